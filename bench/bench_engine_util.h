// Engine set-up shared by the benchmarks: an engine sized for `batch` sequences of
// `prompt_len`-token prompts on generated weights, synthetic prompts, and one step; each exits
// with code 3 and the error on failure; and the median of a set of timings. Benchmarks only:
// nothing here is part of the library.
#ifndef SHARDCHECK_BENCH_ENGINE_UTIL_H
#define SHARDCHECK_BENCH_ENGINE_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "engine/engine.h"
#include "kernels/util.h"

// The median of v(n), n >= 1 (sorts v): kernels/util.h's.
static inline double median(double *v, int n) { return sc_median(v, n, 0); }

static inline void bench_die(const char *prog, const char *what, const sc_error *err) {
  fprintf(stderr, "%s: %s%s%s\n", prog, what, err && err->msg[0] ? ": " : "",
          err ? err->msg : "");
  exit(3);
}

// threads: per rank (0: the engine's default).
static inline engine *bench_engine_new(const char *prog, const model_config *m, int tp,
                                       sc_dtype wdt, int threads, int batch, int prompt_len) {
  engine_config c = engine_config_defaults();
  c.model = *m;
  c.tp = tp;
  c.threads = threads;
  c.weights_seed = 7;
  c.weight_dtype = wdt;
  c.max_running = batch;
  c.token_budget = prompt_len * batch > 256 ? prompt_len * batch : 256;
  c.prefill_chunk = c.token_budget;
  c.kv_blocks = batch * ((m->max_seq_len + 15) / 16);
  sc_error err = {{0}};
  engine *e = NULL;
  if (engine_new(&c, &e, &err) != SC_OK) bench_die(prog, "engine_new", &err);
  return e;
}

// Submits n requests of prompt_len tokens (a fixed pattern per request) and max_tokens each.
static inline void bench_submit(const char *prog, engine *e, const model_config *m, int n,
                         int prompt_len, int max_tokens) {
  int32_t *p = malloc(sizeof *p * (size_t)prompt_len);
  if (!p) bench_die(prog, "out of memory", NULL);
  for (int r = 0; r < n; r++) {
    for (int i = 0; i < prompt_len; i++) p[i] = 3 + (i * 31 + r * 7) % (m->vocab_size - 3);
    engine_request req = {.prompt = p, .n_prompt = prompt_len, .max_tokens = max_tokens};
    uint64_t id;
    sc_error err = {{0}};
    if (engine_submit(e, &req, &id, &err) != SC_OK) bench_die(prog, "engine_submit", &err);
  }
  free(p);
}

// Steps once; returns the step's info.
static inline engine_step_info bench_step(const char *prog, engine *e) {
  engine_step_result r;
  sc_error err = {{0}};
  if (engine_step(e, &r, &err) != SC_OK) bench_die(prog, "engine_step", &err);
  return r.info;
}

#endif
