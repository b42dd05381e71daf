// `shardcheck plan`: every tp x pp x dp layout of a model on N GPUs of a hardware profile,
// with weights, workspace and KV cache per GPU, whether it fits, and the recommended layout;
// as a table or (--json) one JSON object.
//
// The arithmetic is engine/memplan.c (formulas in docs/planner.md), the presets
// config/presets.c, the profiles config/hardware.c; this file parses arguments and prints.
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "config/hardware.h"
#include "config/presets.h"
#include "engine/memplan.h"
#include "engine/model.h"

#define GB 1e9 // the table's unit: 1 GB = 1e9 bytes
#define PLAN_MAX_GPUS 1024

// --- usage

static void usage(FILE *f) {
  fprintf(f,
          "usage: shardcheck plan --model PRESET|DIR --gpu PROFILE --gpus N [options]\n\n"
          "Lists every tensor (tp) x pipeline (pp) x data (dp) parallel layout of the model on\n"
          "up to N GPUs: weights, activation workspace and KV cache per GPU, the tokens of KV\n"
          "one replica holds, whether it fits, and the recommended layout.\n\n"
          "  -m, --model PRESET|DIR  a built-in preset, a preset .yaml file, or a directory\n"
          "                          holding a Hugging Face config.json (required)\n"
          "  -g, --gpu PROFILE       a built-in hardware profile or a profile .yaml (required)\n"
          "  -n, --gpus N            GPUs available, 1..%d (required)\n"
          "      --dtype T           weight dtype: fp32, bf16, fp16, int8, int4 (weight-only\n"
          "                          quantization), fp8 (default: the model's dtype)\n"
          "      --kv-cache-dtype T  auto (the activations': bf16, or the model's f32/f16) or\n"
          "                          fp8 (default auto)\n"
          "      --context TOKENS    tokens one sequence must fit (default: max_seq_len)\n"
          "      --headroom F        fraction of GPU memory kept free, 0 <= F < 1 (default 0.1)\n"
          "      --json              print one JSON object instead of the table\n"
          "  -h, --help              this text\n\n"
          "Units: 1 GB = 1e9 bytes. Formulas: docs/planner.md.\n",
          PLAN_MAX_GPUS);
  cli_print_names(f, "built-in presets", model_preset_names);
  cli_print_names(f, "hardware profiles", hw_profile_names);
  fprintf(f, "exit codes: 0 ok, 2 bad input or usage, 3 runtime failure.\n");
}

static bool parse_fraction(const char *s, double *out) {
  if (!s || !*s) return false;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || *end || !(v >= 0 && v < 1)) return false;
  *out = v;
  return true;
}

// --- output

static void print_table(const model_config *m, const hw_profile *hw, const memplan_params *p,
                        int gpus, const memplan_layout *l, int n, int best) {
  double usable = hw->mem_bytes * (1 - p->headroom);
  double params = (double)model_config_n_params(m);
  printf("%s: %.2f%s params, weights %s, KV cache %s, context %d tokens\n", m->name,
         params >= 1e9 ? params / 1e9 : params / 1e6, params >= 1e9 ? "B" : "M",
         sc_dtype_name(p->weight_dtype), sc_dtype_name(p->kv_dtype), p->context);
  printf("%d x %s (%s): %.2f GB per GPU, %.0f%% headroom -> %.2f GB usable\n", gpus, hw->name,
         hw->description, hw->mem_bytes / GB, p->headroom * 100, usable / GB);
  printf("workspace for %d batch tokens and %d sequences; KV blocks of %d tokens; "
         "1 GB = 1e9 bytes\n\n",
         p->max_batch_tokens, p->max_seqs, p->block_size);
  printf("%3s %3s %3s %5s %12s %10s %10s %11s %5s  %s\n", "tp", "pp", "dp", "gpus",
         "weights/GPU", "workspace", "KV/GPU", "KV tokens", "fits", "note");
  printf("%3s %3s %3s %5s %12s %10s %10s %11s %5s\n", "", "", "", "", "GB", "GB", "GB",
         "/replica", "");
  for (int i = 0; i < n; i++) {
    const memplan_layout *x = &l[i];
    const char *note = i == best ? "recommended" : x->fits ? "" : x->why;
    if (!x->valid) {
      printf("%3d %3d %3d %5d %12s %10s %10s %11s %5s  %s\n", x->tp, x->pp, x->dp, x->gpus, "-",
             "-", "-", "-", "no", note);
      continue;
    }
    printf("%3d %3d %3d %5d %12.2f %10.2f %10.2f %11lld %5s  %s\n", x->tp, x->pp, x->dp, x->gpus,
           x->weight_bytes / GB, x->workspace_bytes / GB, x->kv_bytes / GB,
           (long long)x->kv_tokens, x->fits ? "yes" : "no", note);
  }
  printf("\n");
  if (best >= 0)
    printf("recommended: tp=%d pp=%d dp=%d: %s\n", l[best].tp, l[best].pp, l[best].dp,
           l[best].why);
  else
    printf("recommended: none: no layout of up to %d %s fits %s at %s with a context of %d "
           "tokens (try more GPUs, --dtype int8/int4/fp8, --kv-cache-dtype fp8 or a shorter --context)\n",
           gpus, hw->name, m->name, sc_dtype_name(p->weight_dtype), p->context);
}

static json_t *layout_json(const memplan_layout *x) {
  return json_pack("{s:i, s:i, s:i, s:i, s:b, s:b, s:f, s:f, s:f, s:f, s:I, s:I, s:f, s:s}",
                   "tp", x->tp, "pp", x->pp, "dp", x->dp, "gpus", x->gpus, "valid", x->valid,
                   "fits", x->fits, "weight_bytes", x->weight_bytes, "workspace_bytes",
                   x->workspace_bytes, "kv_bytes", x->kv_bytes, "kv_bytes_per_token",
                   x->kv_bytes_per_token, "kv_tokens", (json_int_t)x->kv_tokens, "kv_blocks",
                   (json_int_t)x->kv_blocks, "used_bytes", x->used_bytes, "why", x->why);
}

static int print_json(const model_config *m, const hw_profile *hw, const memplan_params *p,
                      int gpus, const memplan_layout *l, int n, int best) {
  json_t *layouts = json_array();
  for (int i = 0; layouts && i < n; i++) {
    json_t *o = layout_json(&l[i]);
    if (!o || json_array_append_new(layouts, o)) {
      json_decref(layouts);
      layouts = NULL;
    }
  }
  json_t *rec = best >= 0 ? json_pack("{s:i, s:i, s:i, s:i, s:s}", "tp", l[best].tp, "pp",
                                      l[best].pp, "dp", l[best].dp, "gpus", l[best].gpus, "why",
                                      l[best].why)
                          : json_null();
  json_t *root = layouts && rec
                     ? json_pack("{s:s, s:I, s:s, s:f, s:i, s:s, s:s, s:i, s:f, s:f, s:i, "
                                 "s:i, s:i, s:o, s:o}",
                                 "model", m->name, "params", (json_int_t)model_config_n_params(m),
                                 "gpu", hw->name, "mem_bytes", hw->mem_bytes, "gpus", gpus,
                                 "dtype", sc_dtype_name(p->weight_dtype), "kv_dtype",
                                 sc_dtype_name(p->kv_dtype), "context", p->context, "headroom",
                                 p->headroom, "usable_bytes", hw->mem_bytes * (1 - p->headroom),
                                 "block_size", p->block_size, "max_batch_tokens",
                                 p->max_batch_tokens, "max_seqs", p->max_seqs, "layouts", layouts,
                                 "recommended", rec)
                     : NULL;
  if (!root) {
    fprintf(stderr, "shardcheck plan: out of memory building JSON\n");
    return CLI_RUNTIME;
  }
  json_dumpf(root, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(15));
  printf("\n");
  json_decref(root);
  return CLI_OK;
}

// --- the command

int cmd_plan(int argc, char **argv) {
  enum { OPT_DTYPE = 1000, OPT_KV_DTYPE, OPT_CONTEXT, OPT_HEADROOM, OPT_JSON };
  static const struct option opts[] = {
      {"model", required_argument, NULL, 'm'},
      {"gpu", required_argument, NULL, 'g'},
      {"gpus", required_argument, NULL, 'n'},
      {"dtype", required_argument, NULL, OPT_DTYPE},
      {"kv-cache-dtype", required_argument, NULL, OPT_KV_DTYPE},
      {"context", required_argument, NULL, OPT_CONTEXT},
      {"headroom", required_argument, NULL, OPT_HEADROOM},
      {"json", no_argument, NULL, OPT_JSON},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  const char *model = NULL, *gpu = NULL, *dtype = NULL, *kv_dtype = NULL;
  int gpus = 0, context = 0;
  bool json = false, have_headroom = false;
  double headroom = 0;
  optind = 0; // glibc: full re-initialisation, in case another command parsed before
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":m:g:n:h", opts, NULL)) != -1) {
    switch (c) {
    case 'm': model = optarg; break;
    case 'g': gpu = optarg; break;
    case 'n':
      if (!cli_parse_int(optarg, 1, PLAN_MAX_GPUS, &gpus))
        return cli_usage_error("plan", "--gpus must be an integer in 1..1024, got", optarg);
      break;
    case OPT_DTYPE: dtype = optarg; break;
    case OPT_KV_DTYPE: kv_dtype = optarg; break;
    case OPT_CONTEXT:
      if (!cli_parse_int(optarg, 1, 1 << 30, &context))
        return cli_usage_error("plan", "--context must be a positive number of tokens, got", optarg);
      break;
    case OPT_HEADROOM:
      if (!parse_fraction(optarg, &headroom))
        return cli_usage_error("plan", "--headroom must be a fraction in [0, 1), got", optarg);
      have_headroom = true;
      break;
    case OPT_JSON: json = true; break;
    case 'h': usage(stdout); return CLI_OK;
    case ':': return cli_usage_error("plan", "missing value for", argv[optind - 1]);
    default:
      if (optopt) { // an unknown short option, possibly inside a cluster such as -xv
        char o[3] = {'-', (char)optopt, 0};
        return cli_usage_error("plan", "unknown option", o);
      }
      return cli_usage_error("plan", "unknown option", argv[optind - 1]);
    }
  }
  if (optind < argc) return cli_usage_error("plan", "unexpected argument", argv[optind]);
  if (!model) return cli_usage_error("plan", "missing --model PRESET|DIR", NULL);
  if (!gpu) return cli_usage_error("plan", "missing --gpu PROFILE", NULL);
  if (!gpus) return cli_usage_error("plan", "missing --gpus N", NULL);

  sc_error err = {{0}};
  model_config m;
  bool has_weights = false;
  sc_status s = model_config_resolve(model, &m, &has_weights, &err);
  if (s != SC_OK) return cli_fail("plan --model", s, &err);
  hw_profile hw;
  s = hw_profile_load(gpu, &hw, &err);
  if (s != SC_OK) return cli_fail("plan --gpu", s, &err);

  memplan_params p = memplan_defaults();
  p.weight_dtype = m.dtype;
  if (dtype && sc_dtype_parse(dtype, &p.weight_dtype) != SC_OK)
    return cli_usage_error("plan", "--dtype must be one of fp32, bf16, fp16, int8, int4, fp8, got",
                           dtype);
  // The KV cache is kept in the activation dtype: f32 and f16 models keep theirs, the rest
  // (bf16 and quantized) use bf16; fp8 when asked.
  p.kv_dtype = p.weight_dtype == SC_F32 || p.weight_dtype == SC_F16 ? p.weight_dtype : SC_BF16;
  if (kv_dtype && strcmp(kv_dtype, "auto")) {
    if (strcmp(kv_dtype, "fp8") && strcmp(kv_dtype, "fp8_e4m3") && strcmp(kv_dtype, "fp8_e5m2"))
      return cli_usage_error("plan", "--kv-cache-dtype must be auto or fp8, got", kv_dtype);
    p.kv_dtype = SC_FP8;
  }
  if (context > m.max_seq_len) {
    fprintf(stderr, "shardcheck plan: --context %d exceeds max_seq_len %d of %s\n", context,
            m.max_seq_len, m.name);
    return CLI_USAGE;
  }
  p.context = context ? context : m.max_seq_len;
  if (have_headroom) p.headroom = headroom;

  int n = memplan_enumerate(&m, &hw, &p, gpus, NULL, 0);
  memplan_layout *l = calloc((size_t)n, sizeof *l);
  if (!l) {
    fprintf(stderr, "shardcheck plan: out of memory for %d layouts\n", n);
    return CLI_RUNTIME;
  }
  memplan_enumerate(&m, &hw, &p, gpus, l, n);
  int best = memplan_recommend(l, n, gpus, hw.gpus_per_node);
  int rc = CLI_OK;
  if (json)
    rc = print_json(&m, &hw, &p, gpus, l, n, best);
  else
    print_table(&m, &hw, &p, gpus, l, n, best);
  free(l);
  return rc;
}
