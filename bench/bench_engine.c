// Engine benchmark on the CPU backend: prefill tokens/s and decode tokens/s at several batch
// sizes and TP degrees, with the weight bytes read per second as a fraction of this
// machine's memory bandwidth, measured in the same run: the best of a streaming read
// (XOR over 1 GiB) and a memcpy (STREAM's copy convention: bytes read + bytes written), each
// with 1 thread and with one per core. Decode is measured in --rounds rounds, each timing every
// batch size once in turn, and reported as the median and the range over the rounds: a shared
// machine's speed drifts within seconds, and one timing of each batch size (a few hundred
// milliseconds) put that drift straight into their ratio. Prints the rows as Markdown for
// docs/benchmarks.md. A benchmark, never a test: nothing here asserts a time.
//
// usage: bench_engine [--model PRESET] [--tp-list 1,2] [--batches 1,8,32] [--steps N]
//                     [--rounds N] [--prefill-tokens N] [--threads N] [--weight-dtype f32|int8]
#include <getopt.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "bench/bench_engine_util.h"
#include "config/presets.h"
#include "engine/engine.h"
#include "engine/shard.h"
#include "kernels/clock.h"
#include "kernels/device.h"

// --- memory bandwidth

typedef struct copy_job {
  char *dst;        // NULL: read only
  const char *src;
  size_t n;
  int reps;
  uint64_t sink;    // keeps the reads alive
} copy_job;

static void *copy_worker(void *arg) {
  copy_job *j = arg;
  for (int r = 0; r < j->reps; r++) {
    if (j->dst) {
      memcpy(j->dst, j->src, j->n);
      continue;
    }
    const uint64_t *p = (const uint64_t *)j->src;
    uint64_t acc[8] = {0};
    for (size_t i = 0; i + 8 <= j->n / 8; i += 8)
      for (int k = 0; k < 8; k++) acc[k] ^= p[i + k];
    for (int k = 0; k < 8; k++) j->sink ^= acc[k];
  }
  return NULL;
}

// Best of several runs of `threads` threads each copying (or, read_only, reading) its share
// of `bytes`; a copy counts bytes read + bytes written.
static double mem_bandwidth(size_t bytes, int threads, bool read_only) {
  char *a = malloc(bytes), *b = malloc(bytes);
  if (!a || !b) return 0;
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  double best = 0;
  for (int trial = 0; trial < 5; trial++) {
    pthread_t th[16];
    copy_job jobs[16];
    size_t share = bytes / (size_t)threads;
    uint64_t t0 = sc_monotonic_ns();
    for (int i = 0; i < threads; i++) {
      jobs[i] = (copy_job){read_only ? NULL : b + share * (size_t)i, a + share * (size_t)i,
                           share, 2, 0};
      pthread_create(&th[i], NULL, copy_worker, &jobs[i]);
    }
    for (int i = 0; i < threads; i++) pthread_join(th[i], NULL);
    double s = (double)(sc_monotonic_ns() - t0) / 1e9;
    double bw = (read_only ? 1.0 : 2.0) * 2.0 * (double)(share * (size_t)threads) / s;
    if (bw > best) best = bw;
  }
  free(a);
  free(b);
  return best;
}

// --- engine runs

// Parameters read once per decode step: every weight but the embedding table (only its
// looked-up rows are read).
static double weight_bytes_per_step(const model_config *m) {
  return (double)(model_config_n_params(m) - (uint64_t)m->vocab_size * m->dim) * sizeof(float);
}

static int g_threads; // BLAS threads per rank, 0 = the engine's default
static sc_dtype g_wdt = SC_F32; // --weight-dtype: f32 or int8 (weight-only)

static engine *make_engine(const model_config *m, int tp, int batch, int prompt_len) {
  return bench_engine_new("bench_engine", m, tp, g_wdt, g_threads, batch, prompt_len);
}

static void submit(engine *e, const model_config *m, int n, int prompt_len, int max_tokens) {
  bench_submit("bench_engine", e, m, n, prompt_len, max_tokens);
}

static engine_step_info step(engine *e) { return bench_step("bench_engine", e); }

// Prefill tokens/s: one prompt of n tokens in one step, best of 3.
static double bench_prefill(const model_config *m, int tp, int n) {
  double best = 0;
  for (int trial = 0; trial < 3; trial++) {
    engine *e = make_engine(m, tp, 1, n);
    submit(e, m, 1, n, 1);
    engine_step_info i = step(e);
    double tps = (double)i.prefill_tokens / ((double)i.duration_ns / 1e9);
    if (tps > best) best = tps;
    engine_free(e);
  }
  return best;
}

// Decode tokens/s at `batch` running sequences over `steps` steps (prefill excluded).
static double bench_decode(const model_config *m, int tp, int batch, int steps) {
  int prompt_len = 16;
  engine *e = make_engine(m, tp, batch, prompt_len);
  submit(e, m, batch, prompt_len, steps + 8);
  while (step(e).prefill_tokens > 0) {
  }
  for (int i = 0; i < 3; i++) step(e); // warm-up
  uint64_t ns = 0;
  int tokens = 0;
  for (int i = 0; i < steps; i++) {
    engine_step_info s = step(e);
    ns += s.duration_ns;
    tokens += s.decode_tokens;
  }
  engine_free(e);
  return (double)tokens / ((double)ns / 1e9);
}

// The GEMMs of one decode step alone, through the device seam (no attention, no norms, no
// scheduling): milliseconds per step at m rows. Their ratio bounds what batching can gain.
static double bench_gemm_only(const model_config *m, int rows_m) {
  int D = m->dim, Q = m->n_heads * m->head_dim, KV = m->n_kv_heads * m->head_dim, F = m->ffn_dim;
  int n[7] = {Q, KV, KV, D, F, F, D}, k[7] = {D, D, D, Q, D, D, F};
  device *d = NULL;
  sc_error err = {{0}};
  if (device_open("cpu", 0, &d, &err) != SC_OK) return 0;
  device_cpu_set_threads(device_cpu_cores());
  int nw = 7 * m->n_layers + 1;
  float **w = calloc((size_t)nw, sizeof *w), *x = NULL, *y = NULL;
  // Real contents: untouched zeroed pages would all map to one page and read from cache.
  size_t most = (size_t)m->vocab_size * D;
  float *fill = malloc(sizeof(float) * most);
  for (size_t i = 0; i < most; i++) fill[i] = (float)(i % 97) * 1e-3f;
  for (int i = 0; i < nw; i++) {
    size_t cnt = i == nw - 1 ? most : (size_t)n[i % 7] * k[i % 7];
    dev_alloc(d, sizeof(float) * cnt, (void **)&w[i]);
    dev_copy(d, w[i], fill, sizeof(float) * cnt, DEV_H2D);
  }
  free(fill);
  dev_alloc(d, sizeof(float) * (size_t)rows_m * (F > Q ? F : Q), (void **)&x);
  dev_alloc(d, sizeof(float) * (size_t)rows_m * m->vocab_size, (void **)&y);
  double best = 1e30;
  for (int trial = 0; trial < 10; trial++) {
    uint64_t t0 = sc_monotonic_ns();
    for (int l = 0; l < m->n_layers; l++)
      for (int j = 0; j < 7; j++) dev_matmul(d, rows_m, n[j], k[j], x, w[l * 7 + j], 0.0f, y);
    dev_matmul(d, rows_m, m->vocab_size, D, x, w[nw - 1], 0.0f, y);
    double ms = (double)(sc_monotonic_ns() - t0) / 1e6;
    if (ms < best) best = ms;
  }
  for (int i = 0; i < nw; i++) dev_free(d, w[i]);
  dev_free(d, x);
  dev_free(d, y);
  free(w);
  device_free(d);
  return best;
}

static int parse_list(const char *s, int *out, int cap) {
  int n = 0;
  while (*s && n < cap) {
    out[n++] = (int)strtol(s, (char **)&s, 10);
    if (*s == ',') s++;
  }
  return n;
}

int main(int argc, char **argv) {
  const char *preset = "llama-small";
  int tps[8] = {1, 2}, n_tp = 2, batches[8] = {1, 8, 32}, n_b = 3, steps = 32, prefill = 512;
  int rounds = 5;
  static const struct option opts[] = {{"model", 1, 0, 'm'}, {"tp-list", 1, 0, 't'},
                                       {"batches", 1, 0, 'b'}, {"steps", 1, 0, 's'},
                                       {"rounds", 1, 0, 'r'},
                                       {"prefill-tokens", 1, 0, 'p'}, {"threads", 1, 0, 'j'},
                                       {"weight-dtype", 1, 0, 'w'}, {"help", 0, 0, 'h'},
                                       {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'm': preset = optarg; break;
    case 't': n_tp = parse_list(optarg, tps, 8); break;
    case 'b': n_b = parse_list(optarg, batches, 8); break;
    case 's': steps = atoi(optarg); break;
    case 'r': rounds = atoi(optarg); break;
    case 'p': prefill = atoi(optarg); break;
    case 'j': g_threads = atoi(optarg); break;
    case 'w':
      if (sc_dtype_parse(optarg, &g_wdt) != SC_OK || (g_wdt != SC_F32 && g_wdt != SC_I8)) {
        fprintf(stderr, "bench_engine: --weight-dtype: expected f32 or int8, got '%s'\n", optarg);
        return 2;
      }
      break;
    default:
      printf("usage: bench_engine [--model PRESET] [--tp-list 1,2] [--batches 1,8,32] "
             "[--steps N] [--rounds N] [--prefill-tokens N] [--threads N] "
             "[--weight-dtype f32|int8]\n");
      return c == 'h' ? 0 : 2;
    }
  }
  if (rounds < 1 || rounds > 64 || steps < 1 || n_b < 1) {
    fprintf(stderr, "bench_engine: --rounds must be 1..64, --steps and --batches non-empty\n");
    return 2;
  }
  model_config m;
  sc_error err = {{0}};
  if (model_preset_load(preset, &m, &err) != SC_OK) {
    fprintf(stderr, "bench_engine: %s\n", err.msg);
    return 2;
  }
  int cores = device_cpu_cores();
  struct utsname u;
  uname(&u);
  size_t gib = (size_t)1 << 30;
  double bw_copy[2] = {mem_bandwidth(gib, 1, false), mem_bandwidth(gib, cores, false)};
  double bw_read[2] = {mem_bandwidth(gib, 1, true), mem_bandwidth(gib, cores, true)};
  double bw = 0;
  for (int i = 0; i < 2; i++) {
    if (bw_copy[i] > bw) bw = bw_copy[i];
    if (bw_read[i] > bw) bw = bw_read[i];
  }
  double wbytes = weight_bytes_per_step(&m);
  printf("machine: %s %s, %d cores\n", u.sysname, u.machine, cores);
  printf("memory bandwidth: read %.2f GB/s (1 thread) %.2f GB/s (%d threads); memcpy %.2f / %.2f "
         "GB/s (read+write); best %.2f GB/s\n",
         bw_read[0] / 1e9, bw_read[1] / 1e9, cores, bw_copy[0] / 1e9, bw_copy[1] / 1e9, bw / 1e9);
  printf("model: %s fp32, %.1fM params, %.1f MB of weights read per decode step\n\n", m.name,
         (double)model_config_n_params(&m) / 1e6, wbytes / 1e6);
  double g1 = bench_gemm_only(&m, 1), g32 = bench_gemm_only(&m, 32);
  printf("BLAS alone, one decode step's GEMMs at %d threads: %.2f ms at batch 1, %.2f ms at batch "
         "32: batching can gain at most %.1fx here\n\n",
         cores, g1, g32, 32.0 * g1 / g32);
  printf("decode: median of %d rounds (range in brackets), %d timed steps per batch per round\n\n",
         rounds, steps);
  printf("| tp | measure | batch | tokens/s | weight GB/s | of bandwidth | vs batch 1 |\n");
  printf("|---:|---|---:|---:|---:|---:|---:|\n");
  for (int t = 0; t < n_tp; t++) {
    if (shard_layout_check(&m, tps[t], 1, &err) != SC_OK) {
      fprintf(stderr, "bench_engine: %s\n", err.msg);
      continue;
    }
    double pf = bench_prefill(&m, tps[t], prefill);
    printf("| %d | prefill (%d-token prompt) | 1 | %.0f | | | |\n", tps[t], prefill, pf);
    fflush(stdout);
    double runs[8][64], ratio[8][64]; // [batch][round]: tokens/s, and over batch 1's round
    for (int r = 0; r < rounds; r++) {
      for (int b = 0; b < n_b; b++) runs[b][r] = bench_decode(&m, tps[t], batches[b], steps);
      for (int b = 0; b < n_b; b++) ratio[b][r] = runs[b][r] / runs[0][r];
      fprintf(stderr, "bench_engine: tp=%d decode round %d of %d done\n", tps[t], r + 1, rounds);
    }
    for (int b = 0; b < n_b; b++) {
      double lo = runs[b][0], hi = lo, rlo = ratio[b][0], rhi = rlo;
      for (int r = 1; r < rounds; r++) {
        if (runs[b][r] < lo) lo = runs[b][r];
        if (runs[b][r] > hi) hi = runs[b][r];
        if (ratio[b][r] < rlo) rlo = ratio[b][r];
        if (ratio[b][r] > rhi) rhi = ratio[b][r];
      }
      double med = median(runs[b], rounds), wbw = wbytes * med / batches[b];
      double rmed = median(ratio[b], rounds);
      printf("| %d | decode | %d | %.1f (%.0f-%.0f) | %.2f | %.0f%% | %.1fx (%.1f-%.1f) |\n",
             tps[t], batches[b], med, lo, hi, wbw / 1e9, 100.0 * wbw / bw, rmed, rlo, rhi);
    }
    fflush(stdout);
  }
  return 0;
}
