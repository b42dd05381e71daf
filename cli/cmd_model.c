// `shardcheck model`: model utilities. `model gen` writes deterministic random weights for a
// preset (config.json + model.safetensors); `model info` prints a preset's or a model
// directory's config and parameter count and checks its tensors; `model list` names the
// presets.
//
// The config, the tensor list and the generator are engine/model.c, presets config/presets.c,
// the file format engine/safetensors.c; this file only parses arguments and prints.
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "config/presets.h"
#include "engine/model.h"
#include "engine/safetensors.h"

// --- usage

static void usage_model(FILE *f) {
  fprintf(f, "usage: shardcheck model <gen|info|list> [options]\n\n"
             "  gen   write deterministic random weights for a preset:\n"
             "        shardcheck model gen --preset NAME --seed N --out DIR [--dtype T]\n"
             "  info  print the config and parameter count of a preset or a model directory:\n"
             "        shardcheck model info DIR|PRESET\n"
             "  list  print the names of the built-in presets\n\n"
             "`shardcheck model <gen|info|list> --help` for details.\n");
}

static void usage_gen(FILE *f) {
  fprintf(f,
          "usage: shardcheck model gen --preset NAME --seed N --out DIR [--dtype T]\n\n"
          "Writes DIR/config.json (Hugging Face LlamaForCausalLM) and DIR/model.safetensors\n"
          "with random weights that depend only on the preset and the seed: the same seed\n"
          "gives the same bytes. DIR is created if missing; an existing config.json and\n"
          "model.safetensors are replaced, and a model.safetensors.index.json is removed\n"
          "(it would shadow the new file).\n\n"
          "  --preset NAME  built-in preset name, or a path to a preset .yaml file (required)\n"
          "  --seed N       unsigned 64-bit seed (required)\n"
          "  --out DIR      output directory (required)\n"
          "  --dtype T      weight dtype on disk: f32, f16 or bf16 (default f32)\n"
          "  -h, --help     this text\n\n");
  cli_print_names(f, "built-in presets", model_preset_names);
  fprintf(f, "exit codes: 0 ok, 2 bad input or usage, 3 runtime failure.\n");
}

static void usage_info(FILE *f) {
  fprintf(f, "usage: shardcheck model info DIR|PRESET\n\n"
             "Prints the model's config fields and parameter count. For a directory holding\n"
             "config.json and safetensors weights, also checks that every tensor the config\n"
             "implies is present with its shape (exit 2 naming the first that is not).\n\n");
  cli_print_names(f, "built-in presets", model_preset_names);
  fprintf(f, "exit codes: 0 ok, 2 bad input or usage, 3 runtime failure.\n");
}

// --- argument helpers

// Prints "shardcheck CMD: MSG 'ARG'" and where to find the usage; returns the usage exit code.
// Does any of argv[1..] ask for help?
static bool wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return true;
  return false;
}

// 33563136 -> "33.56M"; with unit "B" (bytes): 67126272 -> "67.1 MB".
static void print_human(double n, const char *unit, char *buf, size_t cap) {
  const char *big = *unit ? " GB" : "B", *mid = *unit ? " MB" : "M", *small = *unit ? " kB" : "K";
  if (n >= 1e9) snprintf(buf, cap, *unit ? "%.1f%s" : "%.2f%s", n / 1e9, big);
  else if (n >= 1e6) snprintf(buf, cap, *unit ? "%.1f%s" : "%.2f%s", n / 1e6, mid);
  else if (n >= 1e3) snprintf(buf, cap, *unit ? "%.1f%s" : "%.2f%s", n / 1e3, small);
  else snprintf(buf, cap, "%.0f%s", n, *unit ? " B" : "");
}

// --- model gen

static int model_gen(int argc, char **argv) {
  static const struct option opts[] = {
      {"preset", required_argument, NULL, 'p'}, {"seed", required_argument, NULL, 's'},
      {"out", required_argument, NULL, 'o'},    {"dtype", required_argument, NULL, 'd'},
      {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
  };
  const char *preset = NULL, *out = NULL, *seed_s = NULL;
  sc_dtype dtype = SC_F32;
  uint64_t seed = 0;
  optind = 0; // glibc: start afresh (cmd_model may run more than once in a process)
  opterr = 0;
  int ch;
  while ((ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
    switch (ch) {
    case 'p': preset = optarg; break;
    case 'o': out = optarg; break;
    case 's':
      seed_s = optarg;
      if (!cli_parse_u64(optarg, &seed))
        return cli_usage_error("model gen", "--seed must be an unsigned integer, got", optarg);
      break;
    case 'd':
      if (sc_dtype_parse(optarg, &dtype) != SC_OK ||
          (dtype != SC_F32 && dtype != SC_F16 && dtype != SC_BF16))
        return cli_usage_error("model gen", "--dtype must be f32, f16 or bf16, got", optarg);
      break;
    case 'h': usage_gen(stdout); return CLI_OK;
    case ':':
      return cli_usage_error("model gen", "missing the value of", argv[optind - 1]);
    default: return cli_usage_error("model gen", "unknown option", argv[optind - 1]);
    }
  }
  if (optind < argc)
    return cli_usage_error("model gen", "unexpected argument", argv[optind]);
  if (!preset) return cli_usage_error("model gen", "--preset is required", NULL);
  if (!seed_s) return cli_usage_error("model gen", "--seed is required", NULL);
  if (!out) return cli_usage_error("model gen", "--out is required", NULL);

  sc_error err = {{0}};
  model_config c;
  sc_status s = model_preset_load(preset, &c, &err);
  if (s != SC_OK) return cli_fail("model gen", s, &err);
  s = model_gen_write(&c, seed, dtype, out, &err);
  if (s != SC_OK) return cli_fail("model gen", s, &err);
  char np[32], nb[32];
  uint64_t n = model_config_n_params(&c);
  print_human((double)n, "", np, sizeof np);
  print_human((double)n * sc_dtype_bytes(dtype), "B", nb, sizeof nb);
  printf("wrote %s/config.json and %s/model.safetensors: %s, %s params (%" PRIu64
         "), %s, seed %" PRIu64 ", %s\n",
         out, out, c.name, np, n, sc_dtype_name(dtype), seed, nb);
  return CLI_OK;
}

// --- model info

// Checks that every tensor c implies is in dir's safetensors with its shape; prints a summary.
static int check_weights(const model_config *c, const char *dir) {
  sc_error err = {{0}};
  st_model *m;
  sc_status s = st_open_dir(dir, &m, &err);
  if (s != SC_OK) return cli_fail("model info", s, &err);
  int n = model_tensor_list(c, NULL, 0);
  model_tensor_desc *ts = malloc((size_t)n * sizeof *ts);
  if (!ts) {
    st_close(m);
    return cli_fail("model info", sc_fail(&err, SC_OOM, "out of memory"), &err);
  }
  model_tensor_list(c, ts, n);
  s = SC_OK;
  for (int i = 0; i < n && s == SC_OK; i++) {
    const st_tensor *t = st_find(m, ts[i].name);
    if (!t) {
      s = sc_fail(&err, SC_INVALID, "%s: tensor '%s' is missing", dir, ts[i].name);
      break;
    }
    bool same = t->ndim == ts[i].ndim;
    for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == ts[i].shape[d];
    if (!same)
      s = sc_fail(&err, SC_INVALID, "%s: tensor '%s' in %s has shape [%lld%s%lld], expected "
                                    "[%lld%s%lld]",
                  dir, ts[i].name, t->file, (long long)t->shape[0], t->ndim > 1 ? ", " : "",
                  t->ndim > 1 ? (long long)t->shape[1] : 0LL, (long long)ts[i].shape[0],
                  ts[i].ndim > 1 ? ", " : "", ts[i].ndim > 1 ? (long long)ts[i].shape[1] : 0LL);
  }
  if (s == SC_OK) {
    const st_tensor *e = st_find(m, "model.embed_tokens.weight");
    printf("%-24s %d tensors, all %d expected present with their shapes, %s on disk\n",
           "weights", st_count(m), n, e ? sc_dtype_name(e->dtype) : "?");
  }
  free(ts);
  st_close(m);
  return s == SC_OK ? CLI_OK : cli_fail("model info", s, &err);
}

static int model_info(int argc, char **argv) {
  if (wants_help(argc, argv)) {
    usage_info(stdout);
    return CLI_OK;
  }
  if (argc != 2)
    return cli_usage_error("model info", argc < 2 ? "expected DIR or PRESET" : "unexpected argument",
                       argc < 2 ? NULL : argv[2]);
  if (argv[1][0] == '-') return cli_usage_error("model info", "unknown option", argv[1]);
  sc_error err = {{0}};
  model_config c;
  bool has_weights = false;
  sc_status s = model_config_resolve(argv[1], &c, &has_weights, &err);
  if (s != SC_OK) return cli_fail("model info", s, &err);
  uint64_t n = model_config_n_params(&c);
  char np[32], nb[32];
  print_human((double)n, "", np, sizeof np);
  print_human((double)n * sc_dtype_bytes(c.dtype), "B", nb, sizeof nb);
  printf("%-24s %s\n", "model", c.name);
  printf("%-24s %d\n", "vocab_size", c.vocab_size);
  printf("%-24s %d\n", "hidden_size", c.dim);
  printf("%-24s %d\n", "num_hidden_layers", c.n_layers);
  printf("%-24s %d\n", "num_attention_heads", c.n_heads);
  printf("%-24s %d\n", "num_key_value_heads", c.n_kv_heads);
  printf("%-24s %d\n", "head_dim", c.head_dim);
  printf("%-24s %d\n", "intermediate_size", c.ffn_dim);
  printf("%-24s %d\n", "max_position_embeddings", c.max_seq_len);
  printf("%-24s %g\n", "rope_theta", (double)c.rope_theta);
  printf("%-24s %g\n", "rms_norm_eps", (double)c.norm_eps);
  printf("%-24s %s\n", "tie_word_embeddings", c.tied_embeddings ? "true" : "false");
  printf("%-24s %s\n", "dtype", sc_dtype_name(c.dtype));
  printf("%-24s %d\n", "bos_token_id", c.bos_token_id);
  printf("%-24s %d\n", "eos_token_id", c.eos_token_id);
  printf("%-24s %s (%" PRIu64 ")\n", "params", np, n);
  printf("%-24s %s at %s\n", "weight bytes", nb, sc_dtype_name(c.dtype));
  if (!has_weights) {
    printf("%-24s none (a preset; `shardcheck model gen` writes some)\n", "weights");
    return CLI_OK;
  }
  return check_weights(&c, argv[1]);
}

// --- model list

static int model_list(int argc, char **argv) {
  if (wants_help(argc, argv)) {
    printf("usage: shardcheck model list\n\nPrints the built-in preset names, one a line.\n");
    return CLI_OK;
  }
  if (argc != 1) return cli_usage_error("model list", "unexpected argument", argv[1]);
  const char *names[256];
  int n = model_preset_names(names, 256);
  for (int i = 0; i < n && i < 256; i++) printf("%s\n", names[i]);
  return CLI_OK;
}

// --- dispatch

int cmd_model(int argc, char **argv) {
  if (argc < 2) {
    usage_model(stderr);
    return CLI_USAGE;
  }
  const char *sub = argv[1];
  if (!strcmp(sub, "-h") || !strcmp(sub, "--help") || !strcmp(sub, "help")) {
    usage_model(stdout);
    return CLI_OK;
  }
  if (!strcmp(sub, "gen")) return model_gen(argc - 1, argv + 1);
  if (!strcmp(sub, "info")) return model_info(argc - 1, argv + 1);
  if (!strcmp(sub, "list")) return model_list(argc - 1, argv + 1);
  fprintf(stderr, "shardcheck model: unknown subcommand '%s'\n\n", sub);
  usage_model(stderr);
  return CLI_USAGE;
}
