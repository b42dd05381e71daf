// `shardcheck generate`: one prompt through a sharded engine; prints the tokens and timings.
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "config/presets.h"
#include "engine/engine.h"
#include "engine/tokenizer.h"
#include "kernels/clock.h"

static const char *usage_text =
    "usage: shardcheck generate --model DIR|PRESET (--prompt TEXT | --prompt-ids 1,2,3)\n"
    "                           [--tp N] [--pp N] [--max-tokens N]\n"
    "                           [--temperature T] [--top-p P] [--seed S]\n"
    "                           [--weights-seed S] [--threads N] [--json]\n\n"
    "Runs one prompt through a tp x pp replica on the CPU backend and prints the generated\n"
    "token ids, the prefill time and the decode rate.\n\n"
    "  --model DIR|PRESET  a Hugging Face directory (config.json + *.safetensors) or a preset\n"
    "                      name (llama-tiny, llama-small, ...: random weights in memory)\n"
    "  --prompt TEXT       text, turned into ids by the byte-level tokenizer (BOS first)\n"
    "  --prompt-ids LIST   comma-separated token ids\n"
    "  --tp N, --pp N      tensor- and pipeline-parallel degrees (default 1, 1)\n"
    "  --max-tokens N      tokens to generate (default 32)\n"
    "  --temperature T     0 = greedy (default); otherwise sample with --top-p (default 1)\n"
    "  --seed S            sampling seed (default 0): same seed, same tokens\n"
    "  --weights-seed S    seed of a preset's random weights (default 0)\n"
    "  --threads N         BLAS threads per rank (default: cores / (tp x pp))\n"
    "  --json              one JSON object: tokens, prefill_ms, decode_tokens_per_s, ...\n"
    "\nexit codes: 0 ok, 2 bad input or usage, 3 runtime failure\n";

// Parses "1,2,3" into ids; returns the count or -1 (err filled).
static int parse_ids(const char *s, int32_t **out, sc_error *err) {
  int cap = 16, n = 0;
  int32_t *v = malloc(sizeof *v * (size_t)cap);
  if (!v) return -1;
  const char *p = s;
  while (*p) {
    char *end;
    long x = strtol(p, &end, 10);
    if (end == p || x < 0 || x > INT32_MAX) {
      sc_fail(err, SC_INVALID, "--prompt-ids: '%s' is not a list of non-negative integers", s);
      free(v);
      return -1;
    }
    if (n == cap) {
      cap *= 2;
      int32_t *w = realloc(v, sizeof *v * (size_t)cap);
      if (!w) {
        free(v);
        return -1;
      }
      v = w;
    }
    v[n++] = (int32_t)x;
    p = end;
    if (*p == ',') p++;
    else if (*p) {
      sc_fail(err, SC_INVALID, "--prompt-ids: unexpected '%c' in '%s'", *p, s);
      free(v);
      return -1;
    }
  }
  if (n == 0) {
    sc_fail(err, SC_INVALID, "--prompt-ids: the list is empty");
    free(v);
    return -1;
  }
  *out = v;
  return n;
}

// Prints which flag had which bad value and what it must be; returns the usage exit code.
static int bad_value(const char *flag, const char *val, const char *what) {
  fprintf(stderr, "shardcheck generate: %s: '%s' is not %s\n", flag, val, what);
  return CLI_USAGE;
}

int cmd_generate(int argc, char **argv) {
  const char *model = NULL, *prompt = NULL, *prompt_ids = NULL;
  int tp = 1, pp = 1, max_tokens = 32, threads = 0, json = 0, rc;
  double temperature = 0.0, top_p = 1.0;
  uint64_t seed = 0, wseed = 0;
  static const struct option opts[] = {
      {"model", required_argument, 0, 'm'},       {"prompt", required_argument, 0, 'p'},
      {"prompt-ids", required_argument, 0, 'i'},  {"tp", required_argument, 0, 't'},
      {"pp", required_argument, 0, 'P'},          {"max-tokens", required_argument, 0, 'n'},
      {"temperature", required_argument, 0, 'T'}, {"top-p", required_argument, 0, 'k'},
      {"seed", required_argument, 0, 's'},        {"weights-seed", required_argument, 0, 'w'},
      {"threads", required_argument, 0, 'j'},     {"json", no_argument, 0, 'J'},
      {"help", no_argument, 0, 'h'},              {0, 0, 0, 0}};
  optind = 1;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'm': model = optarg; break;
    case 'p': prompt = optarg; break;
    case 'i': prompt_ids = optarg; break;
    case 't':
      if (!cli_parse_int(optarg, 1, 1024, &tp)) return bad_value("--tp", optarg, "an integer in 1..1024");
      break;
    case 'P':
      if (!cli_parse_int(optarg, 1, 1024, &pp)) return bad_value("--pp", optarg, "an integer in 1..1024");
      break;
    case 'n':
      if (!cli_parse_int(optarg, 1, 1 << 30, &max_tokens))
        return bad_value("--max-tokens", optarg, "a positive integer");
      break;
    case 'j':
      if (!cli_parse_int(optarg, 1, 1024, &threads))
        return bad_value("--threads", optarg, "an integer in 1..1024");
      break;
    case 'T':
      if (!cli_parse_double(optarg, 0, 100, &temperature))
        return bad_value("--temperature", optarg, "a number in [0, 100]");
      break;
    case 'k':
      if (!cli_parse_double(optarg, 0, 1, &top_p)) return bad_value("--top-p", optarg, "a number in [0, 1]");
      break;
    case 's':
      if (!cli_parse_u64(optarg, &seed)) return bad_value("--seed", optarg, "an unsigned integer");
      break;
    case 'w':
      if (!cli_parse_u64(optarg, &wseed)) return bad_value("--weights-seed", optarg, "an unsigned integer");
      break;
    case 'J': json = 1; break;
    case 'h': fputs(usage_text, stdout); return CLI_OK;
    default:
      fprintf(stderr, "shardcheck generate: unknown or incomplete option '%s'\n\n%s",
              argv[optind - 1], usage_text);
      return CLI_USAGE;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "shardcheck generate: unexpected argument '%s'\n", argv[optind]);
    return CLI_USAGE;
  }
  if (!model || (!prompt == !prompt_ids)) {
    fprintf(stderr, "shardcheck generate: needs --model and exactly one of --prompt, --prompt-ids\n\n%s",
            usage_text);
    return CLI_USAGE;
  }

  sc_error err = {{0}};
  engine_config cfg = engine_config_defaults();
  bool has_weights = false;
  sc_status s = model_config_resolve(model, &cfg.model, &has_weights, &err);
  if (s != SC_OK) return cli_fail("generate", s, &err);
  cfg.weights_dir = has_weights ? model : NULL;
  cfg.weights_seed = wseed;
  cfg.tp = tp;
  cfg.pp = pp;
  cfg.threads = threads;
  cfg.max_running = 1;
  cfg.token_budget = cfg.model.max_seq_len;
  cfg.prefill_chunk = cfg.token_budget;

  int32_t *ids = NULL;
  int n_ids;
  if (prompt_ids) {
    n_ids = parse_ids(prompt_ids, &ids, &err);
    if (n_ids < 0) return cli_fail("generate", SC_INVALID, &err);
  } else {
    n_ids = tokenizer_encode(&cfg.model, prompt, NULL, 0);
    ids = malloc(sizeof *ids * (size_t)(n_ids ? n_ids : 1));
    if (!ids) return CLI_RUNTIME;
    tokenizer_encode(&cfg.model, prompt, ids, n_ids);
  }
  // Checked before the weights load, so a bad prompt costs nothing.
  if (n_ids >= cfg.model.max_seq_len) {
    fprintf(stderr,
            "shardcheck generate: prompt of %d tokens is longer than the context of %s "
            "(max_position_embeddings = %d, one position kept for the first generated token)\n",
            n_ids, model, cfg.model.max_seq_len);
    free(ids);
    return CLI_USAGE;
  }
  cfg.kv_blocks = (cfg.model.max_seq_len + cfg.block_size - 1) / cfg.block_size;

  engine *e = NULL;
  uint64_t t_load = sc_monotonic_ns();
  s = engine_new(&cfg, &e, &err);
  if (s != SC_OK) {
    free(ids);
    return cli_fail("generate", s, &err);
  }
  double load_ms = (double)(sc_monotonic_ns() - t_load) / 1e6;
  engine_request req = {.prompt = ids, .n_prompt = n_ids, .max_tokens = max_tokens,
                        .sampling = {.temperature = (float)temperature, .top_p = (float)top_p, .seed = seed}};
  uint64_t id;
  s = engine_submit(e, &req, &id, &err);
  int32_t *out = malloc(sizeof *out * (size_t)max_tokens);
  int n_out = 0;
  engine_finish_reason why = FINISH_NONE;
  uint64_t t0 = sc_monotonic_ns(), t_first = 0, t_last = 0;
  while (s == SC_OK && out && why == FINISH_NONE) {
    engine_step_result r;
    s = engine_step(e, &r, &err);
    for (int i = 0; s == SC_OK && i < r.n_events; i++) {
      if (r.events[i].kind == ENGINE_EV_TOKEN) {
        out[n_out++] = r.events[i].token;
        t_last = sc_monotonic_ns();
        if (n_out == 1) t_first = t_last;
      } else {
        why = r.events[i].reason;
      }
    }
  }
  if (s != SC_OK || !out) {
    rc = cli_fail("generate", out ? s : SC_OOM, &err);
    free(out);
    free(ids);
    engine_free(e);
    return rc;
  }
  double prefill_ms = (double)(t_first - t0) / 1e6;
  double decode_s = (double)(t_last - t_first) / 1e9;
  double decode_tps = n_out > 1 && decode_s > 0 ? (n_out - 1) / decode_s : 0.0;
  if (json) {
    json_t *o = json_object(), *toks = json_array();
    for (int i = 0; i < n_out; i++) json_array_append_new(toks, json_integer(out[i]));
    json_object_set_new(o, "model", json_string(model));
    json_object_set_new(o, "tp", json_integer(tp));
    json_object_set_new(o, "pp", json_integer(pp));
    json_object_set_new(o, "prompt_tokens", json_integer(n_ids));
    json_object_set_new(o, "tokens", toks);
    json_object_set_new(o, "finish_reason", json_string(engine_finish_reason_name(why)));
    json_object_set_new(o, "load_ms", json_real(load_ms));
    json_object_set_new(o, "prefill_ms", json_real(prefill_ms));
    json_object_set_new(o, "decode_tokens_per_s", json_real(decode_tps));
    char *text = json_dumps(o, JSON_COMPACT);
    printf("%s\n", text);
    free(text);
    json_decref(o);
  } else {
    printf("tokens:");
    for (int i = 0; i < n_out; i++) printf(" %d", out[i]);
    printf("\n");
    if (prompt) {
      printf("text: ");
      char buf[32];
      for (int i = 0; i < n_out; i++) {
        tokenizer_decode_one(&cfg.model, out[i], buf, sizeof buf);
        fputs(buf, stdout);
      }
      printf("\n");
    }
    printf("model %s, tp=%d pp=%d, %d prompt tokens, %d generated (%s)\n", model, tp, pp, n_ids,
           n_out, engine_finish_reason_name(why));
    printf("load %.1f ms, prefill %.2f ms, decode %.1f tokens/s\n", load_ms, prefill_ms,
           decode_tps);
  }
  free(out);
  free(ids);
  engine_free(e);
  return CLI_OK;
}
