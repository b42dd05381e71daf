// How steady is this machine? Times three fixed loops that contain no shardcheck code, over
// and over for a while, and prints how much their speed moves: per 1 s window, and per window
// as long as one repetition of the gate's real scenario (20 s, scenarios/gate-bench.yaml).
// What the real-mode gate and the simulator's accuracy can reach on a machine is bounded by
// this: a rank test over 5 + 5 repetitions at alpha 0.01 catches a 10% slowdown reliably only
// while single repetitions vary by less than about 2.5% (docs/gate.md), and a simulated run can
// match a real one only as closely as the real machine matches itself.
//
// The loops, each a few ms a pass, one after another in every pass:
//   l1:   a 16 KiB buffer summed 256 times (core only: no cache miss, no memory traffic)
//   l2:   a 512 KiB buffer summed 8 times (the core's private L2)
//   dram: a 128 MiB buffer summed once (memory bandwidth, what a decode step streams)
// Sums are integer vector adds in 8 independent chains, so the loops need no fast-math and
// run the same at any optimisation level from -O2. Speed is reported as GB/s read.
//
// Also printed: the share of the time the hypervisor took (steal, /proc/stat) and other
// processes used the CPUs, so a busy machine is told from a noisy one.
//
// A benchmark, never a test: nothing asserts a time. Results go to docs/benchmarks.md.
// usage: bench_machine [--seconds N] [--rep-seconds N] [--series FILE]
// --series writes the 1 s window medians (the window, then GB/s of l1, l2, dram) as a gnuplot
// data file, for `plot 'FILE' using 1:2 with lines, '' using 1:4 with lines`.
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_engine_util.h" // median
#include "kernels/clock.h"

// --- loops

enum { K_L1, K_L2, K_DRAM, K_N };
static const char *const k_name[K_N] = {"l1", "l2", "dram"};
static const size_t k_bytes[K_N] = {(size_t)16 << 10, (size_t)512 << 10, (size_t)128 << 20};
static const int k_passes[K_N] = {256, 8, 1};

// Sum of buf[0 .. n) (n a multiple of 16, buf 64-byte aligned) in 8 independent chains of
// 2-lane vectors (GCC/Clang vector extensions: SSE2 on any x86-64, NEON on arm64, at -O2 too).
typedef uint64_t u64x2 __attribute__((vector_size(16)));
static uint64_t sum_lanes(const uint64_t *buf, size_t n) {
  const u64x2 *v = (const u64x2 *)__builtin_assume_aligned(buf, 64);
  u64x2 a = {0}, b = {0}, c = {0}, d = {0}, e = {0}, f = {0}, g = {0}, h = {0};
  for (size_t i = 0; i < n / 2; i += 8) {
    a += v[i];
    b += v[i + 1];
    c += v[i + 2];
    d += v[i + 3];
    e += v[i + 4];
    f += v[i + 5];
    g += v[i + 6];
    h += v[i + 7];
  }
  u64x2 t = a + b + c + d + e + f + g + h;
  return t[0] + t[1];
}

// --- statistics

typedef struct {
  int n;                  // windows with at least one sample
  double cv, lo, hi, med; // over the windows' medians: sd / mean, min, max, median (GB/s)
} window_stats;

// Groups samples (t_s[i] seconds since the start, gbs[i]) into windows of w seconds and
// summarises the windows' median speeds. out_meds (optional, n entries): the windows' medians
// in time order, ws.n of them.
static window_stats windows(const double *t_s, const double *gbs, int n, double w,
                            double *out_meds) {
  window_stats ws = {0};
  double *cur = malloc(sizeof(double) * (size_t)(n ? n : 1));
  double *meds = malloc(sizeof(double) * (size_t)(n ? n : 1));
  if (!cur || !meds) {
    free(cur);
    free(meds);
    return ws;
  }
  int m = 0, i = 0;
  while (i < n) {
    long idx = (long)(t_s[i] / w);
    int c = 0;
    while (i < n && (long)(t_s[i] / w) == idx) cur[c++] = gbs[i++];
    // A window cut short by the end of the run is left out: it would weigh as much as a full
    // one on fewer samples.
    if (i == n && t_s[n - 1] - (double)idx * w < 0.9 * w) break;
    meds[m++] = median(cur, c);
  }
  if (m > 0) {
    double sum = 0, sq = 0;
    ws.lo = ws.hi = meds[0];
    for (int j = 0; j < m; j++) {
      sum += meds[j];
      ws.lo = fmin(ws.lo, meds[j]);
      ws.hi = fmax(ws.hi, meds[j]);
    }
    double mean = sum / m;
    for (int j = 0; j < m; j++) sq += (meds[j] - mean) * (meds[j] - mean);
    ws.cv = m > 1 ? sqrt(sq / (m - 1)) / mean : NAN;
    if (out_meds) memcpy(out_meds, meds, sizeof(double) * (size_t)m);
    ws.med = median(meds, m);
  }
  ws.n = m;
  free(cur);
  free(meds);
  return ws;
}

// --- CPU time taken by others

typedef struct {
  unsigned long long total, steal, busy; // jiffies: all, steal, non-idle
} cpu_times;

static int read_cpu(cpu_times *c) {
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return -1;
  unsigned long long v[10] = {0};
  int got = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
                   &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]);
  fclose(f);
  if (got < 8) return -1;
  c->total = 0;
  for (int i = 0; i < 8; i++) c->total += v[i]; // guest time is already in user
  c->steal = v[7];
  c->busy = c->total - v[3] - v[4]; // minus idle and iowait
  return 0;
}

static double cpu_s(const struct rusage *r) {
  return (double)r->ru_utime.tv_sec + (double)r->ru_utime.tv_usec * 1e-6 +
         (double)r->ru_stime.tv_sec + (double)r->ru_stime.tv_usec * 1e-6;
}

// --- main

// Reads a number of seconds from lo to hi into *out; false (and a message) otherwise.
static bool parse_seconds(const char *text, const char *option, double lo, double hi,
                          double *out) {
  char *end = NULL;
  double v = strtod(text, &end);
  if (end == text || *end || !(v >= lo && v <= hi)) {
    fprintf(stderr, "bench_machine: %s wants %g to %g, got '%s'\n", option, lo, hi, text);
    return false;
  }
  *out = v;
  return true;
}

static void usage(FILE *f) {
  fprintf(f, "usage: bench_machine [--seconds N] [--rep-seconds N] [--series FILE]\n"
             "  --seconds N      how long to measure (default 120)\n"
             "  --rep-seconds N  the long window: one gate repetition (default 20)\n"
             "  --series FILE    also write the 1 s window medians there (gnuplot data)\n");
}

int main(int argc, char **argv) {
  double seconds = 120, rep_s = 20;
  const char *series = NULL;
  static const struct option opts[] = {{"seconds", required_argument, NULL, 's'},
                                       {"rep-seconds", required_argument, NULL, 'r'},
                                       {"series", required_argument, NULL, 'o'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 's':
      if (!parse_seconds(optarg, "--seconds", 2, 86400, &seconds)) return 2;
      break;
    case 'r':
      if (!parse_seconds(optarg, "--rep-seconds", 1, 3600, &rep_s)) return 2;
      break;
    case 'o':
      series = optarg;
      break;
    case 'h':
      usage(stdout);
      return 0;
    default:
      usage(stderr);
      return 2;
    }
  }
  if (optind < argc) {
    usage(stderr);
    return 2;
  }

  FILE *series_f = NULL;
  if (series && !(series_f = fopen(series, "w"))) {
    fprintf(stderr, "bench_machine: cannot write %s\n", series);
    return 3;
  }
  uint64_t *buf[K_N];
  for (int k = 0; k < K_N; k++) {
    buf[k] = aligned_alloc(64, k_bytes[k]);
    if (!buf[k]) {
      fprintf(stderr, "bench_machine: cannot allocate %zu bytes\n", k_bytes[k]);
      return 3;
    }
    for (size_t i = 0; i < k_bytes[k] / 8; i++) buf[k][i] = i * 0x9E3779B97F4A7C15ull;
  }
  // Samples: one per loop per pass. A pass takes well over 5 ms (the dram loop alone), so
  // 400 a second is more than enough.
  int cap = (int)(seconds * 400) + 16;
  double *t_s[K_N], *gbs[K_N], *series_meds[K_N];
  int series_n = 0;
  for (int k = 0; k < K_N; k++) {
    t_s[k] = malloc(sizeof(double) * (size_t)cap);
    gbs[k] = malloc(sizeof(double) * (size_t)cap);
    series_meds[k] = malloc(sizeof(double) * (size_t)cap);
    if (!t_s[k] || !gbs[k] || !series_meds[k]) {
      fprintf(stderr, "bench_machine: out of memory\n");
      return 3;
    }
  }

  cpu_times c0 = {0}, c1 = {0};
  int have_cpu = read_cpu(&c0) == 0;
  struct rusage r0, r1;
  getrusage(RUSAGE_SELF, &r0);
  volatile uint64_t sink = 0;
  for (int k = 0; k < K_N; k++) sink += sum_lanes(buf[k], k_bytes[k] / 8); // warm-up, page-in
  fprintf(stderr, "bench_machine: measuring for %.0f s\n", seconds);

  double start = sc_monotonic_s(), next_note = start + 30;
  int n = 0;
  while (n < cap) {
    double t = sc_monotonic_s();
    if (t - start >= seconds) break;
    for (int k = 0; k < K_N; k++) {
      double a = sc_monotonic_s();
      for (int p = 0; p < k_passes[k]; p++) sink += sum_lanes(buf[k], k_bytes[k] / 8);
      double b = sc_monotonic_s();
      t_s[k][n] = a - start;
      gbs[k][n] = (double)k_bytes[k] * k_passes[k] / (b - a) / 1e9;
    }
    n++;
    if (t >= next_note) {
      fprintf(stderr, "bench_machine: %.0f of %.0f s\n", t - start, seconds);
      next_note += 30;
    }
  }
  double elapsed = sc_monotonic_s() - start;
  getrusage(RUSAGE_SELF, &r1);
  if (have_cpu) have_cpu = read_cpu(&c1) == 0;

  printf("machine steadiness: %d passes in %.1f s; speeds in GB/s read\n\n", n, elapsed);
  printf("| loop | median | 1 s windows: cv | range | %.0f s windows: cv | range | n |\n", rep_s);
  printf("|---|---:|---:|---|---:|---|---:|\n");
  for (int k = 0; k < K_N; k++) {
    window_stats w1 = windows(t_s[k], gbs[k], n, 1.0, series ? series_meds[k] : NULL);
    window_stats wr = windows(t_s[k], gbs[k], n, rep_s, NULL);
    series_n = w1.n;
    printf("| %s | %.1f | %.2f%% | %.1f-%.1f (%+.1f%% / %+.1f%%) |", k_name[k], w1.med,
           100 * w1.cv, w1.lo, w1.hi, 100 * (w1.lo / w1.med - 1), 100 * (w1.hi / w1.med - 1));
    if (wr.n >= 2)
      printf(" %.2f%% | %.1f-%.1f | %d |\n", 100 * wr.cv, wr.lo, wr.hi, wr.n);
    else
      printf(" - | - | %d |\n", wr.n);
  }
  if (series_f) {
    fprintf(series_f, "# bench_machine: median speed per 1 s window, GB/s\n"
                      "# window (1 s each, in order) l1 l2 dram\n");
    for (int i = 0; i < series_n; i++)
      fprintf(series_f, "%d %.3f %.3f %.3f\n", i, series_meds[K_L1][i], series_meds[K_L2][i],
              series_meds[K_DRAM][i]);
    if (fclose(series_f)) {
      fprintf(stderr, "bench_machine: cannot write %s\n", series);
      return 3;
    }
  }
  if (have_cpu && c1.total > c0.total) {
    double total = (double)(c1.total - c0.total);
    double mine = cpu_s(&r1) - cpu_s(&r0);
    long hz = sysconf(_SC_CLK_TCK); // jiffies per second in /proc/stat
    if (hz <= 0) hz = 100;
    double others = (double)(c1.busy - c0.busy) / (double)hz - mine;
    printf("\nmeanwhile: steal (the hypervisor) %.2f%% of the CPUs' time; other processes "
           "%.1f%% of one CPU\n",
           100.0 * (double)(c1.steal - c0.steal) / total, 100.0 * fmax(0.0, others) / elapsed);
  }
  printf("\nA 10%% slowdown is caught reliably by 5 + 5 repetitions at alpha 0.01 while one "
         "repetition's\nnoise stays below about 2.5%% (docs/gate.md); the %.0f s windows above "
         "are that noise's floor.\n",
         rep_s);
  for (int k = 0; k < K_N; k++) {
    free(buf[k]);
    free(t_s[k]);
    free(gbs[k]);
    free(series_meds[k]);
  }
  return 0;
}
