// int8 weight-only against f32 weights on the CPU backend: the linear layers of one decode
// step (and of one prefill chunk) through the device seam at several batch sizes, the int8
// kernel's builds (portable C, AVX2, AVX-512) one against another, and whole engine steps
// (decode at batch 1 and 8, a prefill) with each kind of weights. Every time is the median of
// its trials; f32 and int8 are measured in alternating rounds, so that a machine shared with
// other work slows both alike. Prints tables in Markdown. A benchmark, never a test: nothing
// here asserts a time.
//
// usage: bench_quant [--model PRESET] [--threads N] [--rows 1,2,4,8,16,32] [--prefill-tokens N]
//                    [--trials N] [--steps N]
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#include "bench/bench_engine_util.h"
#include "config/presets.h"
#include "engine/engine.h"
#include "kernels/clock.h"
#include "kernels/device.h"

static void die(const char *what, const sc_error *err) { bench_die("bench_quant", what, err); }

// --- the linear layers of one step, through the device seam

// One step's linear layers, each with its own weights (as on a rank: every layer streams
// from memory), f32 and int8 quantized from the same values.
typedef struct step_w {
  int n_mats;
  int *n, *k;   // (n_mats) output and input width of each
  float **f;    // (n_mats) f32 weights (n, k), device memory
  int8_t **q;   // (n_mats) int8 weights (n, k), device memory
  float **s;    // (n_mats) scales (n), device memory
  size_t n_weights, n_scales;
  float *x, *y; // (rows_max, widest) input and output
} step_w;

static step_w step_new(device *d, const model_config *m, int rows_max) {
  int D = m->dim, Q = m->n_heads * m->head_dim, KV = m->n_kv_heads * m->head_dim, F = m->ffn_dim;
  int ln[7] = {Q, KV, KV, D, F, F, D}, lk[7] = {D, D, D, Q, D, D, F};
  step_w w = {.n_mats = 7 * m->n_layers + 1};
  w.n = calloc((size_t)w.n_mats, sizeof *w.n);
  w.k = calloc((size_t)w.n_mats, sizeof *w.k);
  w.f = calloc((size_t)w.n_mats, sizeof *w.f);
  w.q = calloc((size_t)w.n_mats, sizeof *w.q);
  w.s = calloc((size_t)w.n_mats, sizeof *w.s);
  if (!w.n || !w.k || !w.f || !w.q || !w.s) die("out of memory", NULL);
  size_t most = (size_t)m->vocab_size * (size_t)D, widest = (size_t)m->vocab_size;
  float *h = malloc(sizeof(float) * most), *hs = malloc(sizeof(float) * widest);
  int8_t *hq = malloc(most);
  if (!h || !hs || !hq) die("out of memory", NULL);
  uint64_t seed = 1;
  for (int i = 0; i < w.n_mats; i++) {
    bool head = i == w.n_mats - 1;
    w.n[i] = head ? m->vocab_size : ln[i % 7];
    w.k[i] = head ? D : lk[i % 7];
    size_t cnt = (size_t)w.n[i] * (size_t)w.k[i];
    for (size_t e = 0; e < cnt; e++) { // real contents: zero pages would all read one page
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      h[e] = (float)((int64_t)(seed >> 40) - (1 << 23)) * 1e-9f;
    }
    dev_q8_quantize(h, w.n[i], w.k[i], hq, hs);
    if (dev_alloc(d, sizeof(float) * cnt, (void **)&w.f[i]) != SC_OK ||
        dev_alloc(d, cnt, (void **)&w.q[i]) != SC_OK ||
        dev_alloc(d, sizeof(float) * (size_t)w.n[i], (void **)&w.s[i]) != SC_OK)
      die("out of device memory", NULL);
    dev_copy(d, w.f[i], h, sizeof(float) * cnt, DEV_H2D);
    dev_copy(d, w.q[i], hq, cnt, DEV_H2D);
    dev_copy(d, w.s[i], hs, sizeof(float) * (size_t)w.n[i], DEV_H2D);
    w.n_weights += cnt;
    w.n_scales += (size_t)w.n[i];
    if ((size_t)w.k[i] > widest) widest = (size_t)w.k[i];
  }
  free(h);
  free(hs);
  free(hq);
  if (dev_alloc(d, sizeof(float) * (size_t)rows_max * widest, (void **)&w.x) != SC_OK ||
      dev_alloc(d, sizeof(float) * (size_t)rows_max * widest, (void **)&w.y) != SC_OK)
    die("out of device memory", NULL);
  for (size_t e = 0; e < (size_t)rows_max * widest; e++) w.x[e] = (float)(e % 13) * 0.01f;
  return w;
}

static void step_free(device *d, step_w *w) {
  for (int i = 0; i < w->n_mats; i++) {
    dev_free(d, w->f[i]);
    dev_free(d, w->q[i]);
    dev_free(d, w->s[i]);
  }
  dev_free(d, w->x);
  dev_free(d, w->y);
  free(w->n), free(w->k), free(w->f), free(w->q), free(w->s);
}

enum { ROUNDS = 5 }; // alternating rounds of f32 and int8 trials

// One trial: every linear layer of one step at `rows` rows; milliseconds.
static double step_once(device *d, const step_w *w, int rows, bool int8) {
  uint64_t t0 = sc_monotonic_ns();
  for (int i = 0; i < w->n_mats; i++) {
    sc_status s = int8 ? dev_matmul_q8(d, rows, w->n[i], w->k[i], w->x, w->q[i], w->s[i], 0.0f,
                                       w->y)
                       : dev_matmul(d, rows, w->n[i], w->k[i], w->x, w->f[i], 0.0f, w->y);
    if (s != SC_OK) die("matmul failed", NULL);
  }
  return (double)(sc_monotonic_ns() - t0) / 1e6;
}

// Median milliseconds of `trials` trials of each kind (ms[0]: f32, ms[1]: int8; want[k] false
// skips kind k), in ROUNDS alternating rounds after 0.2 s of warm-up trials (the pool, the
// scratch, the caches, and the cores: an idle virtual CPU takes a while to run at full speed).
static void step_ms(device *d, const step_w *w, int rows, const bool want[2], int trials,
                    double ms[2]) {
  int per = (trials + ROUNDS - 1) / ROUNDS, n = per * ROUNDS;
  double *t[2] = {malloc(sizeof(double) * (size_t)n), malloc(sizeof(double) * (size_t)n)};
  for (uint64_t t0 = sc_monotonic_ns(); sc_monotonic_ns() - t0 < 200000000ull;)
    for (int kind = 0; kind < 2; kind++)
      if (want[kind]) step_once(d, w, rows, kind);
  for (int r = 0; r < ROUNDS; r++)
    for (int kind = 0; kind < 2; kind++)
      for (int i = 0; want[kind] && i < per; i++)
        t[kind][r * per + i] = step_once(d, w, rows, kind);
  for (int kind = 0; kind < 2; kind++) ms[kind] = want[kind] ? median(t[kind], n) : 0;
  free(t[0]);
  free(t[1]);
}

// --- engine steps

static int g_threads;

static engine *make_engine(const model_config *m, sc_dtype wdt, int batch, int prompt_len) {
  return bench_engine_new("bench_quant", m, 1, wdt, g_threads, batch, prompt_len);
}

static void submit(engine *e, const model_config *m, int n, int prompt_len, int max_tokens) {
  bench_submit("bench_quant", e, m, n, prompt_len, max_tokens);
}

static engine_step_info step(engine *e) { return bench_step("bench_quant", e); }

// Median milliseconds of one decode step at `batch` running sequences, over `steps` steps of
// an f32 engine (ms[0]) and of an int8 one (ms[1]), alive together and stepped in rounds.
static void engine_decode_ms(const model_config *m, int batch, int steps, double ms[2]) {
  engine *e[2] = {make_engine(m, SC_F32, batch, 16), make_engine(m, SC_I8, batch, 16)};
  int per = (steps + ROUNDS - 1) / ROUNDS, n = per * ROUNDS;
  double *t[2] = {malloc(sizeof(double) * (size_t)n), malloc(sizeof(double) * (size_t)n)};
  for (int kind = 0; kind < 2; kind++) {
    submit(e[kind], m, batch, 16, n + 72);
    while (step(e[kind]).prefill_tokens > 0) {
    }
  }
  uint64_t t0 = sc_monotonic_ns(); // warm-up: 0.2 s (at most 64 steps each), as in step_ms
  for (int i = 0; i < 64 && sc_monotonic_ns() - t0 < 200000000ull; i++)
    for (int kind = 0; kind < 2; kind++) step(e[kind]);
  for (int r = 0; r < ROUNDS; r++)
    for (int kind = 0; kind < 2; kind++)
      for (int i = 0; i < per; i++)
        t[kind][r * per + i] = (double)step(e[kind]).duration_ns / 1e6;
  for (int kind = 0; kind < 2; kind++) {
    ms[kind] = median(t[kind], n);
    free(t[kind]);
    engine_free(e[kind]);
  }
}

// Median milliseconds of a step that prefills an n-token prompt, 3 of each kind alternating.
static void engine_prefill_ms(const model_config *m, int n, double ms[2]) {
  double t[2][3];
  for (int i = 0; i < 3; i++)
    for (int kind = 0; kind < 2; kind++) {
      engine *e = make_engine(m, kind ? SC_I8 : SC_F32, 1, n);
      submit(e, m, 1, n, 1);
      t[kind][i] = (double)step(e).duration_ns / 1e6;
      engine_free(e);
    }
  for (int kind = 0; kind < 2; kind++) ms[kind] = median(t[kind], 3);
}

static int parse_list(const char *s, int *out, int cap) {
  int n = 0;
  while (*s && n < cap) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || v < 1) return -1;
    out[n++] = (int)v;
    s = *end == ',' ? end + 1 : end;
  }
  return n;
}

int main(int argc, char **argv) {
  const char *preset = "llama-small";
  int rows[16] = {1, 2, 4, 8, 16, 32}, n_rows = 6, prefill = 512, trials = 15, steps = 32;
  static const struct option opts[] = {
      {"model", 1, 0, 'm'},  {"threads", 1, 0, 'j'}, {"rows", 1, 0, 'r'},
      {"prefill-tokens", 1, 0, 'p'}, {"trials", 1, 0, 't'}, {"steps", 1, 0, 's'},
      {"help", 0, 0, 'h'},   {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'm': preset = optarg; break;
    case 'j': g_threads = atoi(optarg); break;
    case 'r': n_rows = parse_list(optarg, rows, 16); break;
    case 'p': prefill = atoi(optarg); break;
    case 't': trials = atoi(optarg); break;
    case 's': steps = atoi(optarg); break;
    default:
      printf("usage: bench_quant [--model PRESET] [--threads N] [--rows 1,2,4,8,16,32] "
             "[--prefill-tokens N] [--trials N] [--steps N]\n");
      return c == 'h' ? 0 : 2;
    }
  }
  if (n_rows < 1 || prefill < 1 || trials < 1 || steps < 1 || g_threads < 0) {
    fprintf(stderr, "bench_quant: --rows, --prefill-tokens, --trials and --steps must be "
                    "positive, --threads at least 0\n");
    return 2;
  }
  model_config m;
  sc_error err = {{0}};
  if (model_preset_load(preset, &m, &err) != SC_OK) {
    fprintf(stderr, "bench_quant: %s\n", err.msg);
    return 2;
  }
  int cores = device_cpu_cores(), threads = g_threads > 0 ? g_threads : cores;
  struct utsname u;
  uname(&u);
  dev_cpu_isa best = device_cpu_set_isa(DEV_CPU_ISA_AVX512);
  printf("machine: %s %s, %d cores; int8 kernel: %s; threads: %d\n", u.sysname, u.machine, cores,
         device_cpu_isa_name(best), threads);

  device_cpu_set_threads(threads);
  device *d = NULL;
  if (device_open("cpu", 0, &d, &err) != SC_OK) die("device_open", &err);
  int rows_max = prefill;
  for (int i = 0; i < n_rows; i++)
    if (rows[i] > rows_max) rows_max = rows[i];
  step_w w = step_new(d, &m, rows_max);
  printf("model: %s, %d linear layers, %.1fM weights: %.1f MB as f32, %.1f MB as int8 + "
         "scales\n\n",
         m.name, w.n_mats, (double)w.n_weights / 1e6, (double)w.n_weights * 4 / 1e6,
         ((double)w.n_weights + 4.0 * (double)w.n_scales) / 1e6);

  printf("Every linear layer of one step through the device seam (median of %d):\n\n", trials);
  printf("| rows (tokens) | f32 ms | int8 ms | int8 speed-up | f32 weight GB/s | int8 weight "
         "GB/s |\n|---:|---:|---:|---:|---:|---:|\n");
  for (int i = 0; i <= n_rows; i++) {
    int r = i < n_rows ? rows[i] : prefill;
    int tr = r > 64 ? (trials + 4) / 5 : trials;
    double ms[2];
    step_ms(d, &w, r, (const bool[2]){true, true}, tr, ms);
    double f = ms[0], q = ms[1];
    printf("| %d%s | %.3f | %.3f | %.2fx | %.1f | %.1f |\n", r, i < n_rows ? "" : " (prefill)", f,
           q, f / q, (double)w.n_weights * 4 / f / 1e6,
           ((double)w.n_weights + 4.0 * (double)w.n_scales) / q / 1e6);
    fflush(stdout);
  }

  printf("\nThe int8 kernel's builds, same step (ms, median of %d):\n\n", trials);
  if (threads > 1)
    printf("| rows | build | %d threads | 1 thread |\n|---:|---|---:|---:|\n", threads);
  else
    printf("| rows | build | 1 thread |\n|---:|---|---:|\n");
  device *d1 = NULL; // a device with one thread (for the second column)
  device_cpu_set_threads(1);
  if (device_open("cpu", 0, &d1, &err) != SC_OK) die("device_open", &err);
  device_cpu_set_threads(threads);
  step_w w1 = step_new(d1, &m, 8);
  int kr[2] = {1, 8};
  for (int i = 0; i < 2; i++)
    for (int isa = DEV_CPU_ISA_C; isa <= (int)best; isa++) {
      device_cpu_set_isa((dev_cpu_isa)isa);
      double a[2], b[2];
      step_ms(d, &w, kr[i], (const bool[2]){false, true}, trials, a);
      printf("| %d | %s | %.3f", kr[i], device_cpu_isa_name((dev_cpu_isa)isa), a[1]);
      if (threads > 1) {
        step_ms(d1, &w1, kr[i], (const bool[2]){false, true}, trials, b);
        printf(" | %.3f", b[1]);
      }
      printf(" |\n");
      fflush(stdout);
    }
  device_cpu_set_isa(DEV_CPU_ISA_AVX512);
  step_free(d1, &w1);
  device_free(d1);
  step_free(d, &w);
  device_free(d);

  printf("\nEngine steps (%s at tp 1, %d thread%s; decode: median of %d steps, prefill: of "
         "3):\n\n",
         m.name, threads, threads > 1 ? "s" : "", (steps + ROUNDS - 1) / ROUNDS * ROUNDS);
  printf("| step | f32 ms | int8 ms | f32 tokens/s | int8 tokens/s | int8 speed-up |\n"
         "|---|---:|---:|---:|---:|---:|\n");
  int batches[2] = {1, 8};
  for (int i = 0; i < 2; i++) {
    double ms[2];
    engine_decode_ms(&m, batches[i], steps, ms);
    printf("| decode, batch %d | %.2f | %.2f | %.1f | %.1f | %.2fx |\n", batches[i], ms[0], ms[1],
           batches[i] * 1e3 / ms[0], batches[i] * 1e3 / ms[1], ms[0] / ms[1]);
    fflush(stdout);
  }
  double ms[2];
  engine_prefill_ms(&m, prefill, ms);
  printf("| prefill, %d tokens | %.1f | %.1f | %.0f | %.0f | %.2fx |\n", prefill, ms[0], ms[1],
         prefill * 1e3 / ms[0], prefill * 1e3 / ms[1], ms[0] / ms[1]);
  return 0;
}
