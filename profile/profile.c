// Calibration (see profile.h): times the cpu device's ops at the shapes the executor runs and
// the cost model prices, fits the link and the per-step overhead, and writes the hardware
// profile YAML.
//
// How each figure is taken (docs/profile.md says the same for users):
// - timing: each point (an op at one shape) is called once (warm-up, and to size a round),
//   then a group's points are timed in `reps` passes, one round per point per pass; a round
//   repeats the op until at least min_round_s has passed. The median of a point's rounds is
//   the table's value (peaks: the best round). Passes spread each point's rounds over the
//   group, so a short disturbance costs one round of each point, which the median drops.
// - GEMM weights rotate through a pool larger than the last-level cache, so small-m GEMMs
//   read their weights from memory as the engine's do (a model's layers do not fit in cache).
// - decode attention is timed over as many sequences as fill a pool of the same size, each
//   with its own blocks, and divided by their number.
//
// Left to others: the cost model (kernels/sim/sim_cost.c), reading the YAML back
// (config/hardware.c), the device and communicator (kernels/), the engine whose steps are
// timed (engine/engine.c), and everything printed (cli/cmd_profile.c).
#include "profile/profile.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "config/hardware.h"
#include "engine/engine.h"
#include "engine/shard.h"
#include "kernels/clock.h"
#include "kernels/comm.h"
#include "kernels/device.h"
#include "kernels/util.h"

#define PROF_MAX_REPS 15
#define PROF_ROTATE_MIN ((size_t)64 << 20) // weight / KV rotation pool: at least 64 MiB
#define PROF_ROTATE_MAX ((size_t)512 << 20)
#define PROF_ATTN_SEQS 256                 // decode sequences timed in one call at most
#define PROF_MAX_STEPS 64                  // decode steps timed per batch size per round at most
#define PROF_OVERHEAD_ROUNDS_MAX 16        // step-overhead rounds at most
#define PROF_OVERHEAD_PROMPT 16            // prompt tokens of the step-overhead sequences
#define PROF_OVERHEAD_REPLICAS_MAX 8       // replicas side by side in the step-overhead run
#define PROF_PREFILL_PROBES 3              // prompt sizes of the prefill residual (below)
#define PROF_MAX_BATCH 256                 // the cost model prices at most 256 sequences
#define PROF_INNER_MAX 100000              // calls of one op in one timed round at most
#define PROF_INNER_UNTIMED 1000            // calls per round when one call was too fast to time
#define PROF_AR_ROUND_BYTES (32 << 20)     // bytes one all-reduce round moves at least
#define PROF_AR_ITERS_MIN 3                // all-reduce calls per round at least
#define PROF_AR_ITERS_MAX 200              // all-reduce calls per round at most
#define PROF_AR_TIMEOUT_NS (30ull * 1000000000ull) // the shm group's collective timeout
#define PROF_GEMM_COPIES_MAX 4096          // weight copies rotated through per GEMM shape
#define PROF_CUDA_POOL ((size_t)256 << 20) // cuda: weight / KV rotation pool (H100 L2: 50 MB)
#define PROF_SYNC_PROBE 8                  // cuda: calls that size a round (then one wait)
#define PROF_UPLOAD_FLOATS ((size_t)1 << 20) // cuda: host chunk that fills device buffers

// One GEMM shape of one rank, and which ops of which TP degrees it stands for.
typedef struct gemm_shape {
  int n, k, threads;
  char role[96]; // "tp1 q|k|v, tp2 o_proj" (for the YAML comment)
} gemm_shape;

struct profile {
  profile_options o; // grids filled in
  bool cuda;         // backend cuda: device memory, asynchronous ops, ranks sharing GPU 0
  sc_dtype wdt;      // how the GEMM weights are held (cuda: bf16 for a bf16 model; else f32)
  device *dev;       // the device of the host figures (and, on cuda, of the shared buffers)
  hw_profile hw;     // what the YAML says
  profile_summary sum;
  char gemm_role[SIM_TABLES_MAX][96];
  char attn_role[8][64];
  char coll_fit[160];     // the all-reduce fit, in words
  char cpu_model[128];    // /proc/cpuinfo "model name"
  bool virtual_machine;   // /proc/cpuinfo flags name a hypervisor
  long llc_bytes;         // last-level cache, 0 when unknown
  char date[32];          // UTC, ISO 8601
  int cpus_online;
  // step-overhead detail, per batch size: medians of the timed decode steps
  int n_batches;
  int batch[PROFILE_MAX_BATCHES];
  // per step_overhead table (hw.sim.overhead[i]), per batch size
  double wall_s[SIM_OVERHEAD_TABLES][PROFILE_MAX_BATCHES];  // whole engine_step
  double exec_s[SIM_OVERHEAD_TABLES][PROFILE_MAX_BATCHES];  // engine_step_info.duration_ns
  double price_s[SIM_OVERHEAD_TABLES][PROFILE_MAX_BATCHES]; // the cost model, no overhead
  double res_s[SIM_OVERHEAD_TABLES][PROFILE_MAX_BATCHES];   // median of engine_step - price
  // per step_overhead table, per prompt size of its prefill curve: medians of the steps that
  // computed a prompt beside the batch's decodes
  int n_probe[SIM_OVERHEAD_TABLES];                              // prompt sizes measured
  int probe_steps[SIM_OVERHEAD_TABLES][PROF_PREFILL_PROBES];     // steps timed per size
  double probe_wall_s[SIM_OVERHEAD_TABLES][PROF_PREFILL_PROBES]; // whole engine_step
  double probe_price_s[SIM_OVERHEAD_TABLES][PROF_PREFILL_PROBES]; // the cost model, no overhead
};

// Prompt tokens of the prefill residual's probes: what a step computes for a prompt beside a
// batch of decodes (a short chat turn, a paragraph, a page), at most half the model's context.
static const int prof_probe_tokens[PROF_PREFILL_PROBES] = {16, 64, 256};

// --- small helpers

// Deterministic values in [-scale, scale): activations and weights of a plausible size, so no
// NaN, inf or denormal slows an op down.
static void fill_random(float *p, size_t n, uint64_t seed, float scale) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
  for (size_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = scale * ((float)(s >> 40) / (float)(1u << 24) * 2.0f - 1.0f);
  }
}

static void progress(const profile_options *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void progress(const profile_options *o, const char *fmt, ...) {
  if (!o->progress) return;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  o->progress(o->progress_ud, line);
}

// The last-level cache in bytes (0 when unknown): the largest cache sysfs lists for cpu0,
// else what glibc says (which can be far off under a hypervisor).
static long llc_bytes(void) {
  long best = 0;
  for (int i = 0; i < 16; i++) {
    char path[96], buf[64];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    FILE *f = fopen(path, "r");
    if (!f) break;
    char *ok = fgets(buf, sizeof buf, f);
    fclose(f);
    char *end = NULL;
    long v = ok ? strtol(buf, &end, 10) : 0;
    if (end && (*end == 'K' || *end == 'k')) v <<= 10;
    else if (end && (*end == 'M' || *end == 'm')) v <<= 20;
    if (v > best) best = v;
  }
  if (best > 0) return best;
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? l3 : 0;
}

// The size of the weight and KV rotation pools: twice the last-level cache, within bounds.
static size_t rotate_bytes(void) {
  long llc = llc_bytes();
  size_t b = llc > 0 ? 2 * (size_t)llc : 0;
  if (b < PROF_ROTATE_MIN) b = PROF_ROTATE_MIN;
  if (b > PROF_ROTATE_MAX) b = PROF_ROTATE_MAX;
  return b;
}

// The rotation pool of p's backend: the CPU's from its cache; on cuda a fixed 256 MiB, five
// times an H100's L2 (50 MB), so a decode GEMM or attention reads from HBM as in a step.
static size_t pool_bytes(const profile *p) { return p->cuda ? PROF_CUDA_POOL : rotate_bytes(); }

// Fills n elements of dst, a buffer of device d, with fill_random's values (as bf16 bits when
// bf16). On the cpu backend device memory is host memory and is filled in place; on cuda one
// host chunk is filled and copied over the buffer again and again (values do not change a
// timing, only where they sit). SC_OOM / SC_DEVICE when the chunk or a copy fails.
static sc_status fill_device(const profile *p, device *d, void *dst, size_t n, uint64_t seed,
                             float scale, bool bf16) {
  if (!p->cuda) {
    fill_random(dst, n, seed, scale);
    return SC_OK;
  }
  if (n == 0) return SC_OK;
  size_t chunk = n < PROF_UPLOAD_FLOATS ? n : PROF_UPLOAD_FLOATS, es = bf16 ? 2 : 4;
  float *h = malloc(chunk * sizeof(float));
  uint16_t *hb = bf16 ? malloc(chunk * sizeof(uint16_t)) : NULL;
  if (!h || (bf16 && !hb)) {
    free(h);
    free(hb);
    return SC_OOM;
  }
  fill_random(h, chunk, seed, scale);
  if (bf16) dev_bf16_from_f32(h, chunk, hb);
  const void *src = bf16 ? (const void *)hb : (const void *)h;
  sc_status s = SC_OK;
  for (size_t off = 0; s == SC_OK && off < n; off += chunk) {
    size_t len = n - off < chunk ? n - off : chunk;
    s = dev_copy(d, (char *)dst + off * es, src, len * es, DEV_H2D);
  }
  free(h);
  free(hb);
  return s;
}

// --- timing

typedef sc_status (*prof_op)(void *ctx, int iter);

// One timed point: op on its context, called `inner` times per round. iter counts every call
// (ops rotate their buffers with it).
typedef struct timed {
  prof_op op;
  void *ctx;
  sc_status (*prep)(void *ctx); // before each round, or NULL (points that share buffers)
  device *sync; // asynchronous ops (cuda): the device whose queue a round waits for; or NULL
  long inner;
  int iter;
  double v[PROF_MAX_REPS]; // per-call seconds of each round
} timed;

// Seconds per call of `calls` calls of point t back to back; an asynchronous point waits for
// its device's queue once, after the last call, so the calls run as a step runs them.
static sc_status time_calls(timed *t, long calls, double *per_call) {
  double a = sc_monotonic_s();
  for (long j = 0; j < calls; j++) SC_TRY(t->op(t->ctx, t->iter++));
  if (t->sync) SC_TRY(dev_synchronize(t->sync));
  *per_call = (sc_monotonic_s() - a) / (double)calls;
  return SC_OK;
}

// Times points t[0..n): one warm-up call each, which also sizes its rounds (at least min_s;
// an asynchronous point is sized by PROF_SYNC_PROBE calls after the warm-up, since one call
// and a wait is mostly the wait), then `reps` passes over all of them, one round per point per
// pass. Spreading a point's rounds over the whole group means a disturbance of a few seconds
// lands in one round of each point, and the median drops it, rather than in every round of a
// few points.
static sc_status time_points(timed *t, int n, int reps, double min_s) {
  for (int i = 0; i < n; i++) {
    if (t[i].prep) SC_TRY(t[i].prep(t[i].ctx));
    double one = 0;
    SC_TRY(time_calls(&t[i], 1, &one));
    if (t[i].sync) SC_TRY(time_calls(&t[i], PROF_SYNC_PROBE, &one));
    long inner = one > 0 ? (long)ceil(min_s / one) : PROF_INNER_UNTIMED;
    t[i].inner = inner < 1 ? 1 : inner > PROF_INNER_MAX ? PROF_INNER_MAX : inner;
  }
  for (int r = 0; r < reps && r < PROF_MAX_REPS; r++)
    for (int i = 0; i < n; i++) {
      if (t[i].prep) SC_TRY(t[i].prep(t[i].ctx));
      double v = 0;
      SC_TRY(time_calls(&t[i], t[i].inner, &v));
      t[i].v[r] = v > 0 ? v : 1e-9;
    }
  return SC_OK;
}

static double timed_median(const timed *t, int reps) {
  double v[PROF_MAX_REPS];
  if (reps > PROF_MAX_REPS) reps = PROF_MAX_REPS;
  memcpy(v, t->v, sizeof(double) * (size_t)reps);
  return sc_median(v, reps, 0);
}

static double timed_best(const timed *t, int reps) {
  double lo = t->v[0];
  for (int r = 1; r < reps && r < PROF_MAX_REPS; r++) lo = t->v[r] < lo ? t->v[r] : lo;
  return lo;
}

// One op on its own: the median (and the best) per-call seconds over reps rounds. sync: as in
// timed (NULL on the cpu backend).
static sc_status time_op(prof_op op, void *ctx, device *sync, int reps, double min_s,
                         double *med, double *best) {
  timed t = {.op = op, .ctx = ctx, .sync = sync};
  SC_TRY(time_points(&t, 1, reps, min_s));
  if (med) *med = timed_median(&t, reps);
  if (best) *best = timed_best(&t, reps);
  return SC_OK;
}

// --- options

profile_options profile_options_defaults(bool quick) {
  return (profile_options){.backend = "cpu", .quick = quick, .seed = 1};
}

// lo, lo * step, lo * step^2, ... while <= hi (at most cap of them); returns the count.
static int geometric(int *out, int cap, int lo, int hi, int step) {
  int n = 0;
  for (long x = lo; x <= hi && n < cap; x *= step) out[n++] = (int)x;
  return n;
}

// Powers of 2 from 1 to hi and 1.5 times each (1, 2, 3, 4, 6, 8, 12, ...): the default GEMM
// rows. A backend's kernels change at row counts of their own (the CPU's outer-product f32
// kernel runs from 25 to 32 rows, the dot-product blocking on either side), and the cost
// model interpolates linearly between points: with powers of 2 alone, 33 to 63 rows were
// priced from 32 (outer product) and 64 (blocking), and llama-small's steps that mix a short
// prefill with decodes came out about 15% under what they took (docs/benchmarks.md).
static int gemm_rows_grid(int *out, int cap, int hi) {
  int n = 0;
  for (long x = 1; x <= hi && n < cap; x *= 2) {
    out[n++] = (int)x;
    if (x >= 2 && x + x / 2 <= hi && n < cap) out[n++] = (int)(x + x / 2);
  }
  return n;
}

// cuda: every row count from 1 to 16, then the default grid from 24. cuBLAS picks its kernel
// (split-K, tile) per shape, so neighbouring small row counts can differ by 2-3x (an H100's
// 512 x 256 f32 GEMM: 25 us at 8 rows, 8 us at 16), and decode batches land on every count.
static int gemm_rows_grid_gpu(int *out, int cap, int hi) {
  int n = 0;
  for (int x = 1; x <= 16 && x <= hi && n < cap; x++) out[n++] = x;
  int rest[SIM_CURVE_MAX];
  int nr = gemm_rows_grid(rest, SIM_CURVE_MAX, hi);
  for (int i = 0; i < nr && n < cap; i++)
    if (rest[i] > 16) out[n++] = rest[i];
  return n;
}

static sc_status check_grid(const int *v, int n, int hi, const char *what, sc_error *err) {
  for (int i = 0; i < n; i++)
    if (v[i] < 1 || (i > 0 && v[i] <= v[i - 1]) || (hi > 0 && v[i] > hi))
      return sc_fail(err, SC_INVALID,
                     "profile: %s grid must be positive, strictly increasing%s; got %d at %d",
                     what, hi > 0 ? " and within the model's max_seq_len" : "", v[i], i);
  return SC_OK;
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return x < y ? -1 : x > y;
}

// Fills the grids left empty, sorts and dedupes the TP degrees, and checks everything.
static sc_status resolve_options(profile_options *o, sc_error *err) {
  const bool cuda = o->backend && !strcmp(o->backend, "cuda");
  if (!o->backend || (strcmp(o->backend, "cpu") != 0 && !cuda))
    return sc_fail(err, SC_INVALID, "profile: unknown backend '%s'; known backends: cpu, cuda",
                   o->backend ? o->backend : "(null)");
  if (cuda && !device_backend_available("cuda"))
    return sc_fail(err, SC_INVALID,
                   "profile: backend 'cuda' is not built in (configure with SHARDCHECK_CUDA=ON)");
  SC_TRY(model_config_check(&o->model, o->model.name, err));
  const model_config *m = &o->model;
  if (o->n_tp < 1 || o->n_tp > PROFILE_MAX_TP)
    return sc_fail(err, SC_INVALID, "profile: between 1 and %d TP degrees, got %d",
                   PROFILE_MAX_TP, o->n_tp);
  qsort(o->tp, (size_t)o->n_tp, sizeof o->tp[0], cmp_int);
  int n = 0;
  for (int i = 0; i < o->n_tp; i++)
    if (n == 0 || o->tp[i] != o->tp[n - 1]) o->tp[n++] = o->tp[i];
  o->n_tp = n;
  for (int i = 0; i < n; i++) SC_TRY(shard_layout_check(m, o->tp[i], 1, err));

  bool q = o->quick;
  int L = m->max_seq_len, lo = L < 16 ? L : 16;
  if (o->n_gemm_m == 0)
    o->n_gemm_m = q      ? geometric(o->gemm_m, SIM_CURVE_MAX, 1, 1024, 4)
                  : cuda ? gemm_rows_grid_gpu(o->gemm_m, SIM_CURVE_MAX, 2048)
                         : gemm_rows_grid(o->gemm_m, SIM_CURVE_MAX, 2048);
  if (o->n_ctx == 0)
    o->n_ctx = geometric(o->ctx, SIM_CURVE_MAX, lo, q ? (L / 2 > lo ? L / 2 : lo) : L, q ? 4 : 2);
  if (o->n_prefill == 0) {
    o->n_prefill = o->n_ctx;
    memcpy(o->prefill, o->ctx, sizeof o->ctx);
  }
  if (o->n_ar_bytes == 0) {
    double hi = q ? (1 << 20) : (16 << 20), step = q ? 32 : 4;
    for (double b = 1024; b <= hi && o->n_ar_bytes < SIM_CURVE_MAX; b *= step)
      o->ar_bytes[o->n_ar_bytes++] = b;
  }
  if (o->n_batches == 0) {
    // cuda: every batch to 12 (the per-row-count GEMM kernels above show in whole steps)
    static const int dflt[] = {1, 2, 3, 4, 6, 8, 12, 16, 32, 64}, quick[] = {1, 8},
                     gpu[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 16, 24, 32, 64};
    const int *b = q ? quick : cuda ? gpu : dflt;
    o->n_batches = q ? 2 : cuda ? (int)(sizeof gpu / sizeof *gpu) : 10;
    memcpy(o->batches, b, sizeof(int) * (size_t)o->n_batches);
  }
  if (o->reps <= 0) o->reps = q ? 3 : 5;
  if (o->min_round_s <= 0) o->min_round_s = q ? 0.002 : 0.01;
  if (o->decode_steps <= 0) o->decode_steps = q ? 5 : cuda ? 16 : 8; // cuda: ~1 ms steps
  if (o->overhead_rounds <= 0) o->overhead_rounds = q ? 1 : 3;
  if (o->bw_bytes == 0)
    o->bw_bytes = cuda ? (size_t)1 << 30 : q ? (size_t)64 << 20 : (size_t)256 << 20;
  if (o->square_n <= 0) o->square_n = cuda ? (q ? 4096 : 8192) : q ? 1024 : 2048;
  if (!o->name) o->name = cuda ? "cuda" : "cpu";

  if (o->reps > PROF_MAX_REPS)
    return sc_fail(err, SC_INVALID, "profile: at most %d repetitions, got %d", PROF_MAX_REPS,
                   o->reps);
  if (o->n_gemm_m > SIM_CURVE_MAX || o->n_ctx > SIM_CURVE_MAX || o->n_prefill > SIM_CURVE_MAX ||
      o->n_ar_bytes > SIM_CURVE_MAX || o->n_batches > PROFILE_MAX_BATCHES)
    return sc_fail(err, SC_INVALID, "profile: a grid has more than %d points", SIM_CURVE_MAX);
  SC_TRY(check_grid(o->gemm_m, o->n_gemm_m, 0, "GEMM rows", err));
  SC_TRY(check_grid(o->ctx, o->n_ctx, L, "decode context", err));
  SC_TRY(check_grid(o->prefill, o->n_prefill, L, "prefill tokens", err));
  SC_TRY(check_grid(o->batches, o->n_batches, PROF_MAX_BATCH, "decode batch", err));
  for (int i = 0; i < o->n_ar_bytes; i++)
    if (!(o->ar_bytes[i] >= 4) || (i > 0 && !(o->ar_bytes[i] > o->ar_bytes[i - 1])) ||
        o->ar_bytes[i] > (double)((size_t)1 << 30))
      return sc_fail(err, SC_INVALID,
                     "profile: all-reduce sizes must be 4 B .. 1 GiB, strictly increasing");
  if (o->decode_steps > PROF_MAX_STEPS - 1 || o->overhead_rounds > PROF_OVERHEAD_ROUNDS_MAX)
    return sc_fail(err, SC_INVALID,
                   "profile: at most %d decode steps per batch and %d step-overhead rounds",
                   PROF_MAX_STEPS - 1, PROF_OVERHEAD_ROUNDS_MAX);
  if (o->n_gemm_m < 1 || o->n_ctx < 1 || o->n_prefill < 1 || o->n_ar_bytes < 1 ||
      o->n_batches < 1)
    return sc_fail(err, SC_INVALID, "profile: every grid needs at least one point");
  if (o->bw_bytes < ((size_t)1 << 20) || o->square_n < 16 || o->square_n > 8192)
    return sc_fail(err, SC_INVALID,
                   "profile: the bandwidth buffer must be at least 1 MiB and the square GEMM "
                   "16..8192");
  return SC_OK;
}

// Threads a rank of TP degree t runs its GEMMs on: cores / t (the engine's rule, at least 1),
// and 1 (a replica of a dp > 1 deployment may get a single core). Returns how many (1 or 2).
static int thread_counts(int cores, int t, int *out) {
  int full = cores / t > 0 ? cores / t : 1;
  out[0] = full;
  if (full == 1) return 1;
  out[1] = 1;
  return 2;
}

// --- host: memory, peak GEMM rate, call overhead

typedef struct read_job {
  const uint64_t *p;
  size_t n; // uint64 words
  uint64_t sink;
} read_job;

static void *read_worker(void *arg) {
  read_job *j = arg;
  uint64_t acc[8] = {0};
  size_t i = 0;
  for (; i + 8 <= j->n; i += 8)
    for (int k = 0; k < 8; k++) acc[k] ^= j->p[i + k];
  uint64_t x = 0;
  for (int k = 0; k < 8; k++) x ^= acc[k];
  *(volatile uint64_t *)&j->sink = x; // a volatile store: the reads cannot be dropped as dead
  return NULL;
}

// Best streaming-read bandwidth (bytes/s) of `threads` threads each reading its share of buf.
static sc_status read_bandwidth(const uint64_t *buf, size_t bytes, int threads, int reps,
                                double *out, sc_error *err) {
  enum { MAX_T = 256 };
  if (threads > MAX_T) threads = MAX_T;
  pthread_t th[MAX_T];
  read_job jobs[MAX_T];
  size_t words = bytes / 8, per = words / (size_t)threads;
  double best = 0;
  for (int r = 0; r < reps + 1; r++) { // the first pass warms the page tables
    double a = sc_monotonic_s();
    int started = 0;
    for (int t = 0; t < threads; t++) {
      jobs[t] = (read_job){.p = buf + (size_t)t * per, .n = per};
      if (t == 0) continue;
      if (pthread_create(&th[t], NULL, read_worker, &jobs[t]) != 0) break;
      started = t;
    }
    read_worker(&jobs[0]);
    for (int t = 1; t <= started; t++) pthread_join(th[t], NULL);
    if (started != threads - 1)
      return sc_fail(err, SC_OOM, "profile: cannot start %d reader threads", threads);
    double dt = sc_monotonic_s() - a, bw = (double)(per * (size_t)threads * 8) / dt;
    if (r > 0 && bw > best) best = bw;
  }
  *out = best;
  return SC_OK;
}

// What the GEMM being timed is, for the companion ranks that run beside it (measure_gemm):
// m << 48 | n << 24 | k, 0 before the first call.
typedef struct mm_mirror {
  atomic_ullong shape;
  atomic_bool stop;
} mm_mirror;

typedef struct mm_ctx {
  device *d;
  int m, n, k;
  const float *x;   // (m, k)
  const void *pool; // weights: copy c at element c * n * k, each (n, k), elements of wdt
  sc_dtype wdt;     // SC_F32 (dev_matmul) or SC_BF16 (dev_matmul_bf16: bf16 bits)
  int copies;
  float *y;       // (m, n)
  mm_mirror *mr;  // NULL, or where to publish (m, n, k) for the companions
} mm_ctx;

static sc_status mm_call(void *c, int iter) {
  mm_ctx *g = c;
  if (g->mr)
    atomic_store_explicit(&g->mr->shape,
                          (unsigned long long)g->m << 48 | (unsigned long long)g->n << 24 |
                              (unsigned long long)g->k,
                          memory_order_relaxed);
  size_t at = (size_t)(iter % g->copies) * (size_t)g->n * (size_t)g->k;
  if (g->wdt == SC_BF16)
    return dev_matmul_bf16(g->d, g->m, g->n, g->k, g->x, (const uint16_t *)g->pool + at, 0.0f,
                           g->y);
  return dev_matmul(g->d, g->m, g->n, g->k, g->x, (const float *)g->pool + at, 0.0f, g->y);
}

typedef struct add_ctx {
  device *d;
  float *a, *y; // (16) each
} add_ctx;

static sc_status add_call(void *c, int iter) {
  add_ctx *a = c;
  return dev_add(a->d, 16, a->a, a->y);
}

// Best FLOP/s of a square N x N x N GEMM with weights held as wdt, on device d.
static sc_status square_gemm(profile *p, device *d, sc_dtype wdt, double *flops) {
  const profile_options *o = &p->o;
  int N = o->square_n;
  float *a = NULL, *c = NULL;
  void *b = NULL;
  size_t nn = (size_t)N * (size_t)N, wb = (size_t)sc_dtype_bytes(wdt);
  sc_status s = dev_alloc(d, nn * sizeof(float), (void **)&a);
  if (s == SC_OK) s = dev_alloc(d, nn * wb, &b);
  if (s == SC_OK) s = dev_alloc(d, nn * sizeof(float), (void **)&c);
  if (s == SC_OK) s = fill_device(p, d, a, nn, o->seed, 0.05f, false);
  if (s == SC_OK) s = fill_device(p, d, b, nn, o->seed + 1, 0.05f, wdt == SC_BF16);
  double best = 0;
  if (s == SC_OK) {
    if (!p->cuda) device_cpu_set_threads(device_cpu_cores());
    mm_ctx g = {.d = d, .m = N, .n = N, .k = N, .x = a, .pool = b, .wdt = wdt, .copies = 1,
                .y = c};
    s = time_op(mm_call, &g, p->cuda ? d : NULL, o->reps, 0, NULL, &best);
  }
  dev_free(d, a);
  dev_free(d, b);
  dev_free(d, c);
  SC_TRY(s);
  *flops = 2.0 * N * (double)N * N / best;
  return SC_OK;
}

typedef struct copy_ctx {
  device *d;
  void *dst;
  const void *src;
  size_t bytes;
} copy_ctx;

static sc_status copy_call(void *c, int iter) {
  (void)iter;
  copy_ctx *k = c;
  return dev_copy(k->d, k->dst, k->src, k->bytes, DEV_D2D);
}

// cuda: the best device-to-device copy of o->bw_bytes, counted as bytes read plus bytes
// written (the cost model's bytes / mem_bw counts both for every op), in bytes/s.
static sc_status copy_bandwidth(profile *p, device *d, double *out) {
  const profile_options *o = &p->o;
  void *src = NULL, *dst = NULL;
  sc_status s = dev_alloc(d, o->bw_bytes, &src);
  if (s == SC_OK) s = dev_alloc(d, o->bw_bytes, &dst);
  double best = 0;
  copy_ctx k = {.d = d, .dst = dst, .src = src, .bytes = o->bw_bytes};
  int bw_reps = 2 * o->reps > 10 ? 2 * o->reps : 10;
  if (s == SC_OK) s = time_op(copy_call, &k, d, bw_reps, o->min_round_s, NULL, &best);
  dev_free(d, src);
  dev_free(d, dst);
  SC_TRY(s);
  *out = 2.0 * (double)o->bw_bytes / best;
  return SC_OK;
}

// The memory figures of the cpu backend: streaming reads of o->bw_bytes on every core and on
// one (mem_bw, and mem_eff their ratio).
static sc_status cpu_read_bandwidth(profile *p, device *d, int cores, sc_error *err) {
  profile_options *o = &p->o;
  uint64_t *buf = NULL;
  SC_TRY(dev_alloc(d, o->bw_bytes, (void **)&buf));
  for (size_t i = 0; i < o->bw_bytes / 8; i++) buf[i] = i * 0x9E3779B97F4A7C15ull;
  int bw_reps = 2 * o->reps > 10 ? 2 * o->reps : 10; // a round is short: take more of them
  sc_status s = read_bandwidth(buf, o->bw_bytes, cores, bw_reps, &p->sum.mem_bw, err);
  if (s == SC_OK) s = read_bandwidth(buf, o->bw_bytes, 1, bw_reps, &p->sum.mem_bw_1t, err);
  dev_free(d, buf);
  SC_TRY(s);
  if (!(p->sum.mem_bw > 0)) return sc_fail(err, SC_DEVICE, "profile: no memory bandwidth measured");
  if (p->sum.mem_bw_1t > p->sum.mem_bw) p->sum.mem_bw = p->sum.mem_bw_1t;
  return SC_OK;
}

// Host figures. cpu: RAM, streaming reads, an fp32 GEMM on every core, the call of the
// smallest op, the cores. cuda: the GPU's memory, a device-to-device copy, the square GEMM in
// f32 and (with bf16 weights) in bf16, back-to-back launches of the smallest op; host_cores 0
// (a GPU: no CPU share factor, tables looked up without threads).
static sc_status measure_host(profile *p, device *d, sc_error *err) {
  profile_options *o = &p->o;
  double t0 = sc_monotonic_s();
  int cores = p->cuda ? 0 : device_cpu_cores();
  size_t used = 0, total = 0;
  SC_TRY(dev_mem_info(d, &used, &total));
  p->sum.host_cores = cores;
  p->sum.mem_bytes = (double)total;
  sc_status s;
  if (p->cuda) {
    s = copy_bandwidth(p, d, &p->sum.mem_bw);
    if (s != SC_OK) return sc_fail(err, s, "profile: the device-to-device copy failed: %s",
                                   dev_last_error(d));
    p->sum.mem_bw_1t = p->sum.mem_bw;
  } else {
    SC_TRY(cpu_read_bandwidth(p, d, cores, err));
  }

  // peak fp32: a square GEMM (on every core); bf16 on cuda with bf16 weights
  s = square_gemm(p, d, SC_F32, &p->sum.flops_fp32);
  p->sum.flops_bf16 = p->sum.flops_fp32;
  if (s == SC_OK && p->cuda && dev_has_matmul_bf16(d))
    s = square_gemm(p, d, SC_BF16, &p->sum.flops_bf16);
  if (s != SC_OK)
    return sc_fail(err, s, "profile: the square GEMM failed%s%s", p->cuda ? ": " : "",
                   p->cuda ? dev_last_error(d) : "");

  // call overhead of the smallest op (cuda: launched back to back, one wait per round)
  float *t = NULL;
  SC_TRY(dev_alloc(d, 32 * sizeof(float), (void **)&t));
  add_ctx ac = {.d = d, .a = t, .y = t + 16};
  s = time_op(add_call, &ac, p->cuda ? d : NULL, o->reps, o->min_round_s, &p->sum.launch_s, NULL);
  dev_free(d, t);
  SC_TRY(s);

  hw_profile *h = &p->hw;
  h->mem_bytes = p->sum.mem_bytes;
  h->mem_bw = p->sum.mem_bw;
  h->flops_fp32 = p->sum.flops_fp32;
  h->flops_bf16 = h->flops_fp16 = p->sum.flops_bf16;
  h->flops_int8 = 0;
  h->gpus_per_node = 8;
  h->sim.mem_eff = p->sum.mem_bw_1t / p->sum.mem_bw;
  if (!(h->sim.mem_eff > 0 && h->sim.mem_eff <= 1)) h->sim.mem_eff = 1;
  h->sim.launch_s = p->sum.launch_s;
  h->sim.host_cores = cores;
  if (p->cuda)
    progress(o,
             "device: cuda 0, %.1f GiB, device-to-device copy %.0f GB/s (read + write), "
             "GEMM %d^3 f32 %.1f TFLOP/s, bf16 %.1f TFLOP/s, launch %.2f us [%.1f s]",
             p->sum.mem_bytes / (1u << 30), p->sum.mem_bw / 1e9, o->square_n,
             p->sum.flops_fp32 / 1e12, p->sum.flops_bf16 / 1e12, p->sum.launch_s * 1e6,
             sc_monotonic_s() - t0);
  else
    progress(o,
             "host: %d cores, %.1f GiB, streaming read %.1f GB/s (1 thread %.1f GB/s), "
             "fp32 GEMM %d^3 %.1f GFLOP/s, op call %.0f ns [%.1f s]",
             cores, p->sum.mem_bytes / (1u << 30), p->sum.mem_bw / 1e9, p->sum.mem_bw_1t / 1e9,
             o->square_n, p->sum.flops_fp32 / 1e9, p->sum.launch_s * 1e9, sc_monotonic_s() - t0);
  return SC_OK;
}

// --- GEMM tables

// The GEMMs one rank of TP degree t runs per layer and for the head, as the cost model prices
// them (kernels/sim/sim_cost.c, price_microbatch): q|k|v as one GEMM of the three widths,
// o_proj, gate|up as one GEMM of both widths, down_proj, the LM head on its vocabulary share.
// (The executor runs q, k, v and gate, up as separate GEMMs; the difference is in the
// step-overhead residual.) Writes up to 5 shapes; returns how many.
static int rank_gemms(const model_config *m, int t, int *n, int *k, const char **role) {
  shard_rank s = shard_rank_plan(m, t, 1, 0, 0);
  int hd = m->head_dim, D = m->dim;
  static const char *const roles[] = {"q|k|v", "o_proj", "gate|up", "down_proj", "lm_head"};
  int nn[] = {(s.n_heads + 2 * s.n_kv) * hd, D, 2 * s.ffn, D, s.vocab};
  int kk[] = {D, s.n_heads * hd, D, s.ffn, D};
  for (int i = 0; i < 5; i++) {
    n[i] = nn[i];
    k[i] = kk[i];
    role[i] = roles[i];
  }
  return 5;
}

// Every distinct (n, k, threads) over the TP degrees, in measuring order (TP ascending, then
// threads descending). SC_INVALID when there are more than SIM_TABLES_MAX.
static sc_status gemm_plan(const profile_options *o, int cores, gemm_shape *out, int *n_out,
                           sc_error *err) {
  int n = 0;
  for (int i = 0; i < o->n_tp; i++) {
    int th[2], nth = thread_counts(cores, o->tp[i], th);
    for (int j = 0; j < nth; j++) {
      int gn[5], gk[5];
      const char *role[5];
      int ns = rank_gemms(&o->model, o->tp[i], gn, gk, role);
      for (int s = 0; s < ns; s++) {
        int e = 0;
        while (e < n && !(out[e].n == gn[s] && out[e].k == gk[s] && out[e].threads == th[j])) e++;
        if (e == n) {
          if (n == SIM_TABLES_MAX)
            return sc_fail(err, SC_INVALID,
                           "profile: more than %d GEMM tables (shapes x thread counts); "
                           "profile fewer TP degrees at once",
                           SIM_TABLES_MAX);
          out[n++] = (gemm_shape){.n = gn[s], .k = gk[s], .threads = th[j]};
        }
        size_t len = strlen(out[e].role);
        snprintf(out[e].role + len, sizeof out[e].role - len, "%stp%d %s", len ? ", " : "",
                 o->tp[i], role[s]);
      }
    }
  }
  *n_out = n;
  return SC_OK;
}

// A rank that runs beside the one being timed: the same GEMM, as published in mr, on weights
// of its own (another part of the pool) through a device of its own, until mr->stop.
typedef struct mm_companion {
  pthread_t th;
  device *d;
  mm_mirror *mr;
  const float *pool; // its weights, shared by the companions
  size_t pool_floats;
  int index, of; // this companion's number and their count: each starts at its own copy
  const float *x; // the timed rank's activations (only read)
  float *y;       // its own output (max rows)
  sc_status status;
} mm_companion;

static void *companion_main(void *arg) {
  mm_companion *c = arg;
  for (size_t it = 0; !atomic_load_explicit(&c->mr->stop, memory_order_relaxed); it++) {
    unsigned long long sh = atomic_load_explicit(&c->mr->shape, memory_order_relaxed);
    if (!sh) {
      sched_yield();
      continue;
    }
    int m = (int)(sh >> 48), n = (int)(sh >> 24 & 0xFFFFFFu), k = (int)(sh & 0xFFFFFFu);
    size_t nk = (size_t)n * (size_t)k, copies = c->pool_floats / nk;
    if (!copies) copies = 1;
    const float *w = c->pool + ((it + (size_t)c->index * copies / (size_t)c->of) % copies) * nk;
    sc_status s = dev_matmul(c->d, m, n, k, c->x, w, 0.0f, c->y);
    if (s != SC_OK) {
      c->status = s;
      break;
    }
  }
  return NULL;
}

// Frees measure_gemm's buffers: device memory of p->dev on cuda, host memory on cpu.
static void gemm_buffers_free(const profile *p, float *pool, float *x, float *y) {
  if (p->cuda) {
    dev_free(p->dev, pool);
    dev_free(p->dev, x);
    dev_free(p->dev, y);
  } else {
    free(pool);
    free(x);
    free(y);
  }
}

// Each group of shapes at one thread count T is timed on a device opened at T threads (the
// CPU backend sizes a device's kernel pool when it opens), and, when T leaves cores for more
// ranks (cores / T >= 2: the ranks of a TP group, or data-parallel replicas, each on its own
// cores), with cores / T - 1 companion ranks (at most 7: one host's ranks) running the same
// GEMM on other weights at the same time: a rank's GEMMs at small batches read memory as fast
// as one core can, and in a real run its peers read beside it, so it is timed sharing the
// memory system as it will be. The companions read the timed rank's activations (only read)
// and write outputs of their own.
// On cuda there is one thread count (1) and no companion: the buffers are device memory of
// p->dev, the weights (of p->wdt) rotate through PROF_CUDA_POOL, and a round waits for the
// device once after its back-to-back calls.
static sc_status measure_gemm(profile *p, const gemm_shape *shapes, int n_shapes, int cores,
                              sc_error *err) {
  const profile_options *o = &p->o;
  const bool cuda = p->cuda;
  size_t max_nk = 0;
  int max_n = 0, max_k = 0, max_m = o->gemm_m[o->n_gemm_m - 1];
  for (int i = 0; i < n_shapes; i++) {
    size_t nk = (size_t)shapes[i].n * (size_t)shapes[i].k;
    max_nk = nk > max_nk ? nk : max_nk;
    max_n = shapes[i].n > max_n ? shapes[i].n : max_n;
    max_k = shapes[i].k > max_k ? shapes[i].k : max_k;
  }
  const size_t wb = (size_t)sc_dtype_bytes(p->wdt); // f32 or bf16
  size_t half = pool_bytes(p) / wb; // the timed rank's weights; the companions' come after them
  if (half < max_nk) half = max_nk;
  size_t pool_floats = cuda ? half : 2 * half, xf = (size_t)max_m * max_k,
         yf = (size_t)max_m * max_n;
  // Companions: up to the ranks of one host (gpus_per_node 8), each with an output of its own.
  enum { MAX_COMP = 7 };
  int max_comp = cuda ? 0 : cores - 1 > MAX_COMP ? MAX_COMP : cores - 1;
  float *pool = NULL, *x = NULL, *y = NULL; // pool: elements of p->wdt
  sc_status s = SC_OK;
  if (cuda) {
    s = dev_alloc(p->dev, pool_floats * wb, (void **)&pool);
    if (s == SC_OK) s = dev_alloc(p->dev, xf * sizeof(float), (void **)&x);
    if (s == SC_OK) s = dev_alloc(p->dev, yf * sizeof(float), (void **)&y);
    if (s == SC_OK) s = fill_device(p, p->dev, pool, pool_floats, o->seed + 2, 0.05f,
                                    p->wdt == SC_BF16);
    if (s == SC_OK) s = fill_device(p, p->dev, x, xf, o->seed + 3, 1.0f, false);
  } else {
    pool = malloc(pool_floats * sizeof(float));
    x = malloc(xf * sizeof(float));
    y = malloc(yf * (size_t)(1 + max_comp) * sizeof(float));
    s = pool && x && y ? SC_OK : SC_OOM;
  }
  if (s != SC_OK) {
    gemm_buffers_free(p, pool, x, y);
    return sc_fail(err, s, "profile: cannot allocate the GEMM buffers (%zu MiB of weights)",
                   pool_floats * wb >> 20);
  }
  if (!cuda) {
    fill_random(pool, pool_floats, o->seed + 2, 0.05f);
    fill_random(x, xf, o->seed + 3, 1.0f);
  }

  sim_hw *h = &p->hw.sim;
  for (int g0 = 0; s == SC_OK && g0 < n_shapes;) {
    // a group: consecutive shapes at one thread count
    int g1 = g0;
    while (g1 < n_shapes && shapes[g1].threads == shapes[g0].threads) g1++;
    double t0 = sc_monotonic_s();
    const int T = shapes[g0].threads;
    int n_comp = cores / T - 1;
    n_comp = n_comp < 0 ? 0 : n_comp > max_comp ? max_comp : n_comp;
    if (!cuda) device_cpu_set_threads(T);
    device *d = NULL;
    mm_mirror mr;
    atomic_init(&mr.shape, 0);
    atomic_init(&mr.stop, false);
    mm_companion comp[MAX_COMP];
    int started = 0;
    s = device_open(o->backend, 0, &d, err);
    for (; s == SC_OK && started < n_comp; started++) {
      mm_companion *c = &comp[started];
      *c = (mm_companion){.mr = &mr, .pool = pool + half, .pool_floats = half, .index = started,
                          .of = n_comp, .x = x, .y = y + yf * (size_t)(1 + started)};
      s = device_open(o->backend, 0, &c->d, err);
      if (s == SC_OK && pthread_create(&c->th, NULL, companion_main, c) != 0) {
        device_free(c->d);
        s = sc_fail(err, SC_OOM, "profile: cannot start a companion rank's thread");
      }
      if (s != SC_OK) break;
    }
    // every (shape, m) of the group is one point, timed together
    int nm = o->n_gemm_m, np = (g1 - g0) * nm;
    mm_ctx *g = calloc((size_t)np, sizeof *g);
    timed *t = calloc((size_t)np, sizeof *t);
    if (s == SC_OK && (!g || !t)) s = sc_fail(err, SC_OOM, "profile: out of memory");
    for (int i = 0; s == SC_OK && i < np; i++) {
      const gemm_shape *sh = &shapes[g0 + i / nm];
      long copies = (long)(half / ((size_t)sh->n * (size_t)sh->k));
      g[i] = (mm_ctx){.d = d, .m = o->gemm_m[i % nm], .n = sh->n, .k = sh->k, .x = x,
                      .pool = pool, .wdt = p->wdt, .y = y,
                      .copies = (int)(copies < 1                      ? 1
                                      : copies > PROF_GEMM_COPIES_MAX ? PROF_GEMM_COPIES_MAX
                                                                      : copies),
                      .mr = started ? &mr : NULL};
      t[i] = (timed){.op = mm_call, .ctx = &g[i], .sync = cuda ? d : NULL};
    }
    if (s == SC_OK) s = time_points(t, np, o->reps, o->min_round_s);
    if (s != SC_OK && cuda && d && !err->msg[0])
      sc_fail(err, s, "profile: a timed GEMM failed: %s", dev_last_error(d));
    atomic_store(&mr.stop, true);
    for (int c = 0; c < started; c++) {
      pthread_join(comp[c].th, NULL);
      if (s == SC_OK && comp[c].status != SC_OK)
        s = sc_fail(err, comp[c].status, "profile: a companion rank's GEMM failed");
      device_free(comp[c].d);
    }
    device_free(d);
    for (int i = g0; s == SC_OK && i < g1; i++) {
      const gemm_shape *sh = &shapes[i];
      sim_gemm_table *tb = &h->gemm[h->n_gemm];
      *tb = (sim_gemm_table){.n = sh->n, .k = sh->k, .threads = sh->threads};
      for (int j = 0; j < nm; j++) {
        tb->t.x[j] = o->gemm_m[j];
        tb->t.y[j] = timed_median(&t[(i - g0) * nm + j], o->reps);
      }
      tb->t.n = nm;
      snprintf(p->gemm_role[h->n_gemm], sizeof p->gemm_role[0], "%s", sh->role);
      h->n_gemm++;
    }
    free(g);
    free(t);
    if (s == SC_OK && cuda)
      progress(o, "gemm: %d shape%s, %s weights rotating through %zu MiB, x %d rows (%d..%d) "
                  "[%.1f s]",
               g1 - g0, g1 - g0 == 1 ? "" : "s", sc_dtype_name(p->wdt),
               pool_floats * wb >> 20, o->n_gemm_m, o->gemm_m[0], max_m, sc_monotonic_s() - t0);
    else if (s == SC_OK)
      progress(o, "gemm: %d shape%s at %d thread%s x %d rows (%d..%d), %d companion rank%s "
                  "[%.1f s]",
               g1 - g0, g1 - g0 == 1 ? "" : "s", T, T == 1 ? "" : "s", o->n_gemm_m,
               o->gemm_m[0], max_m, started, started == 1 ? "" : "s", sc_monotonic_s() - t0);
    g0 = g1;
  }
  if (!cuda) device_cpu_set_threads(cores);
  gemm_buffers_free(p, pool, x, y);
  if (s != SC_OK && !err->msg[0]) sc_fail(err, s, "profile: a timed GEMM failed");
  return s;
}

// Achieved fraction of the peak of the held weights (flops_fp32; flops_bf16 for bf16 weights
// on cuda) vs m of the largest per-layer GEMM (gate|up) of the smallest TP degree on all its
// threads: prices GEMM shapes the profile has no table for.
static void derive_gemm_eff(profile *p, int cores) {
  const profile_options *o = &p->o;
  int gn[5], gk[5], th[2];
  const char *role[5];
  rank_gemms(&o->model, o->tp[0], gn, gk, role);
  thread_counts(cores, o->tp[0], th);
  sim_hw *h = &p->hw.sim;
  double peak = p->wdt == SC_BF16 ? p->hw.flops_bf16 : p->hw.flops_fp32;
  for (int i = 0; i < h->n_gemm; i++) {
    const sim_gemm_table *g = &h->gemm[i];
    if (g->n != gn[2] || g->k != gk[2] || g->threads != th[0]) continue;
    h->gemm_eff.n = g->t.n;
    for (int j = 0; j < g->t.n; j++) {
      double e = 2.0 * g->t.x[j] * g->n * (double)g->k / g->t.y[j] / peak;
      h->gemm_eff.x[j] = g->t.x[j];
      h->gemm_eff.y[j] = e > 1 ? 1 : e < 1e-4 ? 1e-4 : e;
    }
    return;
  }
}

// --- attention tables

// What every attention point of one shape shares: the KV pool, q and out, and the batch
// description that each point rewrites before its rounds.
typedef struct attn_ctx {
  device *d;
  dev_kv_batch b; // points into pos, seq, bt
  int heads, kv_heads, head_dim;
  const float *q; // (tokens, heads, head_dim)
  dev_kv_layer kv; // (n_blocks, block_size, kv_heads, head_dim) each
  float *out;     // (tokens, heads, head_dim)
  int32_t *pos, *seq; // (tokens), device memory
  int32_t *bt;        // (PROF_ATTN_SEQS, b.max_blocks), device memory
  // where prep writes them: the same arrays on cpu; host copies uploaded to the device on cuda
  int32_t *hpos, *hseq, *hbt;
  bool upload;
} attn_ctx;

// One point: decode of S sequences at context x (S > 0), or a prefill of x tokens (S == 0).
typedef struct attn_point {
  attn_ctx *a;
  int x, S;
} attn_point;

static sc_status attn_prep(void *c) {
  attn_point *pt = c;
  attn_ctx *a = pt->a;
  int bs = a->b.block_size, mb = a->b.max_blocks, rows;
  if (pt->S > 0) { // S sequences, each one token at position x - 1 with its own blocks
    int per = (pt->x + bs - 1) / bs;
    for (int j = 0; j < pt->S; j++) {
      a->hpos[j] = pt->x - 1;
      a->hseq[j] = j;
      for (int b = 0; b < mb; b++) a->hbt[(size_t)j * mb + b] = j * per + (b < per ? b : 0);
    }
    a->b.n_tok = pt->S;
    a->b.max_run = 1;
    rows = pt->S;
  } else { // one sequence, tokens at positions 0 .. x - 1 (each attends to those before it)
    for (int b = 0; b < mb; b++) a->hbt[b] = b;
    for (int j = 0; j < pt->x; j++) {
      a->hpos[j] = j;
      a->hseq[j] = 0;
    }
    a->b.n_tok = pt->x;
    a->b.max_run = pt->x; // a prefill chunk, as the executor tells the backend
    rows = 1;
  }
  if (!a->upload) return SC_OK;
  size_t tok = (size_t)a->b.n_tok * sizeof(int32_t);
  SC_TRY(dev_copy(a->d, a->pos, a->hpos, tok, DEV_H2D));
  SC_TRY(dev_copy(a->d, a->seq, a->hseq, tok, DEV_H2D));
  return dev_copy(a->d, a->bt, a->hbt, (size_t)rows * mb * sizeof(int32_t), DEV_H2D);
}

static sc_status attn_call(void *c, int iter) {
  const attn_ctx *a = ((const attn_point *)c)->a;
  return dev_attention(a->d, &a->b, a->heads, a->kv_heads, a->head_dim,
                       1.0f / sqrtf((float)a->head_dim), a->q, a->kv, a->out);
}

// Decode (per sequence, vs context) and prefill (vs tokens from position 0) of one rank's
// attention with `heads` query and `kv_heads` KV heads of head_dim. The cpu kernel runs on
// the calling thread, so the BLAS thread count does not enter. On cuda the KV pool is
// PROF_CUDA_POOL, the batch arrays are uploaded before each round, and a round waits for the
// device once after its calls.
static sc_status measure_attention_shape(profile *p, device *d, int heads, int kv_heads,
                                         sim_curve *decode, sim_curve *prefill, sc_error *err) {
  const profile_options *o = &p->o;
  const int bs = 16, hd = o->model.head_dim;
  int max_ctx = o->ctx[o->n_ctx - 1], max_pre = o->prefill[o->n_prefill - 1];
  int max_len = max_ctx > max_pre ? max_ctx : max_pre;
  int max_blocks = (max_len + bs - 1) / bs;
  size_t slot = (size_t)kv_heads * hd; // floats per token, K or V
  size_t pool_tokens = pool_bytes(p) / (2 * slot * sizeof(float));
  if (pool_tokens < (size_t)max_blocks * bs) pool_tokens = (size_t)max_blocks * bs;
  int n_blocks = (int)((pool_tokens + bs - 1) / bs);
  int max_tok = max_pre > PROF_ATTN_SEQS ? max_pre : PROF_ATTN_SEQS;
  size_t kv_floats = (size_t)n_blocks * bs * slot, qf = (size_t)max_tok * heads * hd;
  float *k = NULL, *v = NULL, *q = NULL, *out = NULL;
  int32_t *pos = NULL, *seq = NULL, *bt = NULL;
  sc_status s = dev_alloc(d, kv_floats * sizeof(float), (void **)&k);
  if (s == SC_OK) s = dev_alloc(d, kv_floats * sizeof(float), (void **)&v);
  if (s == SC_OK) s = dev_alloc(d, qf * sizeof(float), (void **)&q);
  if (s == SC_OK) s = dev_alloc(d, qf * sizeof(float), (void **)&out);
  if (s == SC_OK) s = dev_alloc(d, (size_t)max_tok * sizeof(int32_t), (void **)&pos);
  if (s == SC_OK) s = dev_alloc(d, (size_t)max_tok * sizeof(int32_t), (void **)&seq);
  size_t bt_n = (size_t)PROF_ATTN_SEQS * max_blocks;
  if (s == SC_OK) s = dev_alloc(d, bt_n * sizeof(int32_t), (void **)&bt);
  if (s == SC_OK) s = fill_device(p, d, k, kv_floats, o->seed + 4, 1.0f, false);
  if (s == SC_OK) s = fill_device(p, d, v, kv_floats, o->seed + 5, 1.0f, false);
  if (s == SC_OK) s = fill_device(p, d, q, qf, o->seed + 6, 1.0f, false);
  attn_ctx a = {.d = d, .heads = heads, .kv_heads = kv_heads, .head_dim = hd, .q = q,
                .kv = {.k = k, .v = v}, .out = out, .pos = pos, .seq = seq, .bt = bt,
                .hpos = pos, .hseq = seq, .hbt = bt, .upload = p->cuda,
                .b = {.pos = pos, .seq = seq, .block_tables = bt, .max_blocks = max_blocks,
                      .block_size = bs, .reduced_precision = p->wdt == SC_BF16}};
  if (s == SC_OK && p->cuda) {
    a.hpos = malloc((size_t)max_tok * sizeof(int32_t));
    a.hseq = malloc((size_t)max_tok * sizeof(int32_t));
    a.hbt = malloc(bt_n * sizeof(int32_t));
    if (!a.hpos || !a.hseq || !a.hbt) s = SC_OOM;
  }
  // the decode points, then the prefill points, timed together
  int np = o->n_ctx + o->n_prefill;
  attn_point pts[2 * SIM_CURVE_MAX];
  timed t[2 * SIM_CURVE_MAX];
  for (int i = 0; i < np; i++) {
    if (i < o->n_ctx) {
      int c = o->ctx[i], S = n_blocks / ((c + bs - 1) / bs);
      pts[i] = (attn_point){.a = &a, .x = c,
                            .S = S > PROF_ATTN_SEQS ? PROF_ATTN_SEQS : S < 1 ? 1 : S};
    } else {
      pts[i] = (attn_point){.a = &a, .x = o->prefill[i - o->n_ctx], .S = 0};
    }
    t[i] = (timed){.op = attn_call, .ctx = &pts[i], .prep = attn_prep,
                   .sync = p->cuda ? d : NULL};
  }
  if (s == SC_OK) s = time_points(t, np, o->reps, o->min_round_s);
  if (s != SC_OK && p->cuda && !err->msg[0])
    sc_fail(err, s, "profile: a timed attention call failed: %s", dev_last_error(d));
  if (s == SC_OK) {
    for (int i = 0; i < o->n_ctx; i++) {
      decode->x[i] = pts[i].x;
      decode->y[i] = timed_median(&t[i], o->reps) / pts[i].S; // per sequence
    }
    decode->n = o->n_ctx;
    for (int i = 0; i < o->n_prefill; i++) {
      prefill->x[i] = pts[o->n_ctx + i].x;
      prefill->y[i] = timed_median(&t[o->n_ctx + i], o->reps);
    }
    prefill->n = o->n_prefill;
  }
  dev_free(d, k);
  dev_free(d, v);
  dev_free(d, q);
  dev_free(d, out);
  dev_free(d, pos);
  dev_free(d, seq);
  dev_free(d, bt);
  if (p->cuda) {
    free(a.hpos);
    free(a.hseq);
    free(a.hbt);
  }
  if (s != SC_OK && !err->msg[0]) sc_fail(err, s, "profile: a timed attention call failed");
  return s;
}

// SC_INVALID when the TP degrees need more attention entries (one per TP degree and thread
// count) than a profile holds.
static sc_status attention_plan(const profile_options *o, int cores, sc_error *err) {
  int n = 0;
  for (int i = 0; i < o->n_tp; i++) {
    int th[2];
    n += thread_counts(cores, o->tp[i], th);
  }
  if (n > 8)
    return sc_fail(err, SC_INVALID,
                   "profile: %d attention tables (TP degrees x thread counts) exceed the 8 a "
                   "profile holds; profile fewer TP degrees at once",
                   n);
  return SC_OK;
}

// One table per (shape, thread count), each timed on a device opened at that thread count:
// the CPU backend splits a large attention over the device's kernel pool.
static sc_status measure_attention(profile *p, int cores, sc_error *err) {
  const profile_options *o = &p->o;
  sim_hw *h = &p->hw.sim;
  for (int i = 0; i < o->n_tp; i++) {
    int t = o->tp[i];
    shard_rank sr = shard_rank_plan(&o->model, t, 1, 0, 0);
    int th[2], nth = thread_counts(cores, t, th);
    for (int j = 0; j < nth; j++) {
      int e = 0;
      while (e < h->n_attn && !(h->attn[e].heads == sr.n_heads &&
                                h->attn[e].kv_heads == sr.n_kv && h->attn[e].threads == th[j]))
        e++;
      if (e < h->n_attn) {
        size_t len = strlen(p->attn_role[e]);
        snprintf(p->attn_role[e] + len, sizeof p->attn_role[0] - len, ", tp%d", t);
        continue;
      }
      if (h->n_attn == 8)
        return sc_fail(err, SC_INVALID,
                       "profile: more than 8 attention tables (TP degrees x thread counts); "
                       "profile fewer TP degrees at once");
      sim_attn_table *a = &h->attn[h->n_attn];
      *a = (sim_attn_table){.heads = sr.n_heads, .kv_heads = sr.n_kv,
                            .head_dim = o->model.head_dim, .threads = th[j]};
      double t0 = sc_monotonic_s();
      if (!p->cuda) device_cpu_set_threads(th[j]);
      device *d = NULL;
      sc_status s = device_open(o->backend, 0, &d, err);
      if (s == SC_OK)
        s = measure_attention_shape(p, d, sr.n_heads, sr.n_kv, &a->decode, &a->prefill, err);
      device_free(d);
      if (!p->cuda) device_cpu_set_threads(cores);
      SC_TRY(s);
      progress(o, "attention: tp%d, %d heads / %d KV heads x %d at %d thread%s, decode %d "
                  "contexts, prefill %d lengths [%.1f s]",
               t, sr.n_heads, sr.n_kv, o->model.head_dim, th[j], th[j] == 1 ? "" : "s",
               o->n_ctx, o->n_prefill, sc_monotonic_s() - t0);
      snprintf(p->attn_role[h->n_attn], sizeof p->attn_role[0], "tp%d", t);
      h->n_attn++;
    }
  }
  return SC_OK;
}

// --- all-reduce tables and the link fit

typedef struct ar_shared {
  const profile_options *o;
  comm_group *g; // shm (cpu: ranks as threads) or cuda (ranks on GPU 0: loopback)
  int ranks;
  double *t; // (n_ar_bytes, reps) per-call seconds seen by rank 0
} ar_shared;

typedef struct ar_rank {
  ar_shared *sh;
  int r;
  device *d;  // cuda: this rank's device (GPU 0, a stream of its own); NULL on cpu
  float *buf; // (largest size / 4) floats: host memory on cpu, d's memory on cuda
  pthread_t th;
  sc_status st;
} ar_rank;

// Calls that make one timed round of an all-reduce of `bytes`: enough to move
// PROF_AR_ROUND_BYTES, within PROF_AR_ITERS_MIN..PROF_AR_ITERS_MAX.
static int ar_iters(double bytes) {
  double n = ceil((double)PROF_AR_ROUND_BYTES / bytes);
  return n < PROF_AR_ITERS_MIN   ? PROF_AR_ITERS_MIN
         : n > PROF_AR_ITERS_MAX ? PROF_AR_ITERS_MAX
                                 : (int)n;
}

static void *ar_main(void *arg) {
  ar_rank *rk = arg;
  ar_shared *sh = rk->sh;
  const profile_options *o = sh->o;
  comm *c = comm_group_rank(sh->g, rk->r);
  rk->st = SC_OK;
  // warm-up (sizes the staging slots), then passes over all sizes, as in time_points
  for (int i = 0; rk->st == SC_OK && i < o->n_ar_bytes; i++)
    rk->st = comm_allreduce_sum(c, rk->buf, (size_t)(o->ar_bytes[i] / sizeof(float)));
  for (int r = 0; rk->st == SC_OK && r < o->reps; r++)
    for (int i = 0; rk->st == SC_OK && i < o->n_ar_bytes; i++) {
      size_t n = (size_t)(o->ar_bytes[i] / sizeof(float));
      int iters = ar_iters(o->ar_bytes[i]);
      rk->st = comm_barrier(c);
      double a = sc_monotonic_s();
      for (int it = 0; rk->st == SC_OK && it < iters; it++)
        rk->st = comm_allreduce_sum(c, rk->buf, n);
      if (rk->r == 0) sh->t[i * o->reps + r] = (sc_monotonic_s() - a) / iters;
    }
  if (rk->st != SC_OK) comm_group_abort(sh->g);
  return NULL;
}

// Gives every rank its buffer of `floats` (random values): host memory on cpu; on cuda a
// device of its own on GPU 0 (as the executor opens one per rank) and memory of it.
static sc_status ar_buffers(profile *p, ar_rank *rk, int ranks, size_t floats, device **devs,
                            sc_error *err) {
  const profile_options *o = &p->o;
  for (int r = 0; r < ranks; r++) {
    uint64_t seed = o->seed + 7 + (uint64_t)r;
    if (!p->cuda) {
      rk[r].buf = malloc(floats * sizeof(float));
      if (!rk[r].buf) return SC_OOM;
      fill_random(rk[r].buf, floats, seed, 1e-3f);
      continue;
    }
    SC_TRY(device_open(o->backend, 0, &rk[r].d, err));
    devs[r] = rk[r].d;
    SC_TRY(dev_alloc(rk[r].d, floats * sizeof(float), (void **)&rk[r].buf));
    SC_TRY(fill_device(p, rk[r].d, rk[r].buf, floats, seed, 1e-3f, false));
  }
  return SC_OK;
}

// One all-reduce table: `ranks` threads over the communicator the executor gives ranks of
// this backend (comm_group_open: shm on cpu; on cuda, every rank on GPU 0, the loopback
// transport), an in-place sum timed on rank 0 from a barrier (a cuda call returns once its
// result is in place).
static sc_status measure_allreduce_ranks(profile *p, int ranks, sim_coll_table *tb,
                                         sc_error *err) {
  const profile_options *o = &p->o;
  size_t floats = (size_t)(o->ar_bytes[o->n_ar_bytes - 1] / sizeof(float));
  ar_shared sh = {.o = o, .ranks = ranks};
  ar_rank *rk = calloc((size_t)ranks, sizeof *rk);
  device **devs = calloc((size_t)ranks, sizeof *devs);
  sh.t = calloc((size_t)o->n_ar_bytes * o->reps, sizeof(double));
  sc_status s = rk && devs && sh.t ? SC_OK : SC_OOM;
  for (int r = 0; s == SC_OK && r < ranks; r++) rk[r] = (ar_rank){.sh = &sh, .r = r};
  if (s == SC_OK) s = ar_buffers(p, rk, ranks, floats, devs, err);
  if (s == SC_OK)
    s = comm_group_open(o->backend, ranks, devs, PROF_AR_TIMEOUT_NS, &sh.g, err);
  int started = 0;
  for (; s == SC_OK && started < ranks; started++)
    if (pthread_create(&rk[started].th, NULL, ar_main, &rk[started]) != 0) {
      comm_group_abort(sh.g);
      s = SC_OOM;
      break;
    }
  for (int r = 0; r < started; r++) {
    pthread_join(rk[r].th, NULL);
    if (s == SC_OK && rk[r].st != SC_OK && rk[r].st != SC_ABORTED) s = rk[r].st;
  }
  for (int r = 0; s == SC_OK && r < ranks; r++)
    if (rk[r].st != SC_OK) s = rk[r].st;
  if (s == SC_OK) {
    tb->ranks = ranks;
    for (int i = 0; i < o->n_ar_bytes; i++) {
      tb->allreduce.x[i] = o->ar_bytes[i];
      tb->allreduce.y[i] = sc_median(sh.t + (size_t)i * o->reps, o->reps, 0);
      if (!(tb->allreduce.y[i] > 0)) tb->allreduce.y[i] = 1e-9;
    }
    tb->allreduce.n = o->n_ar_bytes;
  }
  char why[400] = "";
  if (s != SC_OK)
    snprintf(why, sizeof why, "%.399s", sh.g ? comm_group_error(sh.g) : err->msg);
  comm_group_free(sh.g); // before the devices it runs on
  for (int r = 0; rk && r < ranks; r++) {
    if (rk[r].d) dev_free(rk[r].d, rk[r].buf);
    else free(rk[r].buf);
    device_free(rk[r].d);
  }
  free(rk);
  free(devs);
  free(sh.t);
  if (s != SC_OK)
    return sc_fail(err, s, "profile: the all-reduce over %d ranks failed (%s)%s%s", ranks,
                   sc_status_name(s), why[0] ? ": " : "", why);
  return SC_OK;
}

// Fits the cost model's ring all-reduce, t = 2(n-1) lat + 2(n-1)/n bytes / bw, to every
// measured point by least squares on the relative error (so small and large messages count
// alike). Falls back to the two ends when the fit is not physical.
static void fit_link(profile *p) {
  const sim_hw *h = &p->hw.sim;
  double a11 = 0, a12 = 0, a22 = 0, b1 = 0, b2 = 0;
  double small_t = 0, small_x1 = 1, big_t = 0, big_x2 = 0;
  for (int i = 0; i < h->n_coll; i++) {
    double n = h->coll[i].ranks;
    const sim_curve *c = &h->coll[i].allreduce;
    for (int j = 0; j < c->n; j++) {
      double x1 = 2 * (n - 1), x2 = 2 * (n - 1) / n * c->x[j], y = c->y[j];
      double u1 = x1 / y, u2 = x2 / y;
      a11 += u1 * u1;
      a12 += u1 * u2;
      a22 += u2 * u2;
      b1 += u1;
      b2 += u2;
      if (i == 0 && j == 0) {
        small_t = y;
        small_x1 = x1;
      }
      if (i == 0 && j == c->n - 1) {
        big_t = y;
        big_x2 = x2;
      }
    }
  }
  double det = a11 * a22 - a12 * a12, lat = -1, inv_bw = -1;
  if (det > 0) {
    lat = (b1 * a22 - b2 * a12) / det;
    inv_bw = (a11 * b2 - a12 * b1) / det;
  }
  const char *how = "least squares on relative error";
  if (!(lat >= 0 && inv_bw > 0)) {
    lat = small_t / small_x1;
    double rest = big_t - small_x1 * lat;
    inv_bw = big_x2 > 0 && rest > 0 ? rest / big_x2 : big_x2 > 0 ? big_t / big_x2 : 1e-10;
    how = "the smallest message for latency, the largest for bandwidth";
  }
  if (lat > 1) lat = 1;
  p->sum.link_latency_s = lat;
  p->sum.link_bw = 1 / inv_bw;
  snprintf(p->coll_fit, sizeof p->coll_fit, "%s over %d rank count%s", how, h->n_coll,
           h->n_coll == 1 ? "" : "s");
}

static sc_status measure_allreduce(profile *p, sc_error *err) {
  const profile_options *o = &p->o;
  sim_hw *h = &p->hw.sim;
  int list[PROFILE_MAX_TP], n = 0;
  for (int i = 0; i < o->n_tp; i++)
    if (o->tp[i] > 1) list[n++] = o->tp[i];
  if (n == 0) list[n++] = 2; // the link fit needs one group
  for (int i = 0; i < n; i++) {
    double t0 = sc_monotonic_s();
    SC_TRY(measure_allreduce_ranks(p, list[i], &h->coll[h->n_coll], err));
    h->n_coll++;
    progress(o, "allreduce: %d ranks x %d sizes (%.0f B .. %.0f MiB) [%.1f s]", list[i],
             o->n_ar_bytes, o->ar_bytes[0], o->ar_bytes[o->n_ar_bytes - 1] / (1 << 20),
             sc_monotonic_s() - t0);
  }
  fit_link(p);
  hw_profile *hp = &p->hw;
  snprintf(hp->link, sizeof hp->link, "memory");
  hp->link_bw = p->sum.link_bw;
  hp->link_latency_s = p->sum.link_latency_s;
  return SC_OK;
}

// --- the simulator's view, as hw_profile_load builds it from the written file

static void fill_sim_view(profile *p) {
  hw_profile *hp = &p->hw;
  sim_hw *h = &hp->sim;
  snprintf(hp->name, sizeof hp->name, "%s", p->o.name);
  hw_profile_sync_sim(hp);
  if (!sim_link_lookup("ib-ndr", &h->inter)) h->inter = h->intra; // hardware.c's default
}

// --- step overhead: real decode steps against the cost model

// The replicas of a step-overhead run start each (round, batch size) together. Once aborted
// (a replica failed, or one could not start), waiting returns at once.
typedef struct ov_turn {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int parties, waiting;
  unsigned gen;
  bool aborted;
} ov_turn;

static void ov_turn_wait(ov_turn *t) {
  pthread_mutex_lock(&t->mu);
  unsigned gen = t->gen;
  if (!t->aborted && ++t->waiting == t->parties) {
    t->waiting = 0;
    t->gen++;
    pthread_cond_broadcast(&t->cv);
  }
  while (!t->aborted && gen == t->gen) pthread_cond_wait(&t->cv, &t->mu);
  pthread_mutex_unlock(&t->mu);
}

static void ov_turn_abort(ov_turn *t) {
  pthread_mutex_lock(&t->mu);
  t->aborted = true;
  pthread_cond_broadcast(&t->cv);
  pthread_mutex_unlock(&t->mu);
}

static bool ov_turn_aborted(ov_turn *t) {
  pthread_mutex_lock(&t->mu);
  bool a = t->aborted;
  pthread_mutex_unlock(&t->mu);
  return a;
}

// One replica of the step-overhead run: its engine, and every timed step's figures per batch
// size (`rounds` x PROF_MAX_STEPS slots each); and the probes' steps, each a prompt of n_probe
// sizes computed beside a batch's decodes, once per (round, batch size, prompt size).
enum { OV_WALL, OV_EXEC, OV_PRICE, OV_RES, OV_RES_EXEC, OV_FIGS };
enum { PR_WALL, PR_PRICE, PR_BATCH, PR_FIGS };
typedef struct ov_replica {
  const profile_options *o;
  const sim_hw *hw;
  const sim_model *sm;
  sim_layout lay;
  engine *e;
  int prompt, steps, index;
  size_t per_b, cells;
  double *fig; // OV_FIGS x cells
  int n_probe;           // prompt sizes probed (prof_probe_tokens[0 .. n_probe))
  size_t probe_cells;    // rounds x batch sizes x n_probe
  double *pfig;          // PR_FIGS x probe_cells; PR_WALL NaN where a probe was not timed
  int kept[PROFILE_MAX_BATCHES];
  ov_turn *turn;
  sc_status s;
  sc_error err;
  pthread_t th;
} ov_replica;

// Runs every round of every batch size on r's engine, waiting at r->turn before each.
static void *ov_replica_main(void *arg) {
  ov_replica *r = arg;
  const profile_options *o = r->o;
  const model_config *m = &o->model;
  int max_ids = r->prompt;
  for (int k = 0; k < r->n_probe; k++)
    max_ids = prof_probe_tokens[k] > max_ids ? prof_probe_tokens[k] : max_ids;
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)max_ids);
  sim_seq *seqs = malloc(sizeof(sim_seq) * (PROF_MAX_BATCH + 1));
  if (!ids || !seqs) {
    r->s = sc_fail(&r->err, SC_OOM, "profile: out of memory for the step run");
    ov_turn_abort(r->turn); // the other replicas skip their work too
  }
  for (int rd = 0; rd < o->overhead_rounds; rd++)
    for (int bi = 0; bi < o->n_batches; bi++) {
      ov_turn_wait(r->turn);
      if (r->s != SC_OK || ov_turn_aborted(r->turn)) continue;
      int B = o->batches[bi];
      sc_status s = SC_OK;
      for (int q = 0; s == SC_OK && q < B; q++) {
        for (int j = 0; j < r->prompt; j++)
          ids[j] = 3 + (int32_t)(((uint64_t)q * 7919 + (uint64_t)j * 104729 + o->seed +
                                  (uint64_t)rd + (uint64_t)r->index * 31) %
                                 (uint64_t)(m->vocab_size > 3 ? m->vocab_size - 3 : 1));
        engine_request rq = {.prompt = ids, .n_prompt = r->prompt,
                             .max_tokens = r->steps + 1 + r->n_probe,
                             .sampling = {.temperature = 0, .top_p = 1}};
        uint64_t id;
        s = engine_submit(r->e, &rq, &id, &r->err);
      }
      // adv: decode steps of the batch so far (pure or beside a probe), which sets the
      // batch's positions; probe: the prompt size in flight (-1: none), submitted after every
      // second timed decode step while sizes are left, and timed in the step that computes it
      int n_dec = 0, n_round = 0, adv = 0, probe = -1, probed = 0;
      while (s == SC_OK && !engine_idle(r->e)) {
        engine_step_result rs;
        double a = sc_monotonic_s();
        s = engine_step(r->e, &rs, &r->err);
        double w = sc_monotonic_s() - a;
        if (s != SC_OK) break;
        const engine_step_info *in = &rs.info;
        if (probe >= 0 && in->prefill_tokens > 0) { // the probe's step (or a chunk of it)
          int P = prof_probe_tokens[probe];
          if (in->decode_tokens == B && in->prefill_tokens == P && in->n_seqs == B + 1) {
            for (int q = 0; q < B; q++)
              seqs[q] = (sim_seq){.start = r->prompt + adv, .n = 1, .logits = true};
            seqs[B] = (sim_seq){.start = 0, .n = P, .logits = true};
            int mb[2] = {0, B + 1};
            sim_step_cost cost;
            if (sim_step_price(r->hw, r->sm, &r->lay, seqs, B + 1, mb, 1, &cost) == 0) {
              size_t at = ((size_t)rd * (size_t)o->n_batches + (size_t)bi) * (size_t)r->n_probe +
                          (size_t)probe;
              r->pfig[PR_WALL * r->probe_cells + at] = w;
              r->pfig[PR_PRICE * r->probe_cells + at] = cost.total_s;
              r->pfig[PR_BATCH * r->probe_cells + at] = B;
            }
          }
          probe = -1;
        }
        if (in->decode_tokens == B) adv++;
        if (in->decode_tokens != B || in->prefill_tokens != 0 || in->n_seqs != B) continue;
        int d = n_dec++;
        if (d == 0 || n_round == PROF_MAX_STEPS) continue; // warm-up
        if (probe < 0 && probed < r->n_probe && d % 2 == 0) { // the next step computes it
          int P = prof_probe_tokens[probed];
          for (int j = 0; j < P; j++)
            ids[j] = 3 + (int32_t)(((uint64_t)j * 104729 + (uint64_t)P * 7919 + o->seed +
                                    (uint64_t)rd + (uint64_t)r->index * 31) %
                                   (uint64_t)(m->vocab_size > 3 ? m->vocab_size - 3 : 1));
          engine_request rq = {.prompt = ids, .n_prompt = P, .max_tokens = 1,
                               .sampling = {.temperature = 0, .top_p = 1}};
          uint64_t id;
          s = engine_submit(r->e, &rq, &id, &r->err);
          if (s != SC_OK) break;
          probe = probed++;
        }
        for (int q = 0; q < B; q++)
          seqs[q] = (sim_seq){.start = r->prompt + adv - 1, .n = 1, .logits = true};
        int mb[2] = {0, B};
        sim_step_cost cost;
        if (sim_step_price(r->hw, r->sm, &r->lay, seqs, B, mb, 1, &cost) != 0) {
          s = sc_fail(&r->err, SC_INVALID, "profile: the cost model refused a decode step of %d",
                      B);
          break;
        }
        double x = (double)in->duration_ns * 1e-9;
        size_t at = (size_t)bi * r->per_b + (size_t)r->kept[bi]++;
        double *f = r->fig;
        f[OV_WALL * r->cells + at] = w;
        f[OV_EXEC * r->cells + at] = x;
        f[OV_PRICE * r->cells + at] = cost.total_s;
        f[OV_RES * r->cells + at] = w - cost.total_s;
        f[OV_RES_EXEC * r->cells + at] = x - cost.total_s;
        n_round++;
      }
      if (s == SC_OK && n_round == 0)
        s = sc_fail(&r->err, SC_DEVICE, "profile: no decode step of batch %d was timed", B);
      if (s != SC_OK) {
        r->s = s;
        ov_turn_abort(r->turn);
      }
    }
  free(ids);
  free(seqs);
  return NULL;
}

// Decode steps of `replicas` engines of TP degree tp running side by side (each on its own
// thread, at the engine's threads for that many ranks on the host), at every batch size of
// the grid, each step against the cost model's price of it from this profile (without any
// step overhead). The batch sizes take turns, o->overhead_rounds times over, so that a slow
// moment of the machine lands on one round of each rather than on all of one; the replicas
// start each batch size together. Appends the residual table of (tp, replicas) and its
// per-batch detail; for the first table also sets the scalar step_overhead_s (the median
// residual over every timed step).
static sc_status overhead_at(profile *p, int tp, int replicas, sc_error *err) {
  const profile_options *o = &p->o;
  const model_config *m = &o->model;
  double t0 = sc_monotonic_s();
  int ti = p->hw.sim.n_overhead, max_b = 0, nb = o->n_batches;
  for (int i = 0; i < nb; i++) max_b = o->batches[i] > max_b ? o->batches[i] : max_b;
  int prompt = m->max_seq_len / 4 < PROF_OVERHEAD_PROMPT ? m->max_seq_len / 4
                                                          : PROF_OVERHEAD_PROMPT;
  if (prompt < 1) prompt = 1;
  int steps = o->decode_steps + 1; // the first decode step is a warm-up
  if (prompt + steps + 1 > m->max_seq_len)
    return sc_fail(err, SC_INVALID,
                   "profile: %s's max_seq_len %d is too short for %d decode steps", m->name,
                   m->max_seq_len, steps);
  int n_probe = 0, probe_max = 0; // prompt sizes of the prefill curve that the model holds
  while (n_probe < PROF_PREFILL_PROBES && prof_probe_tokens[n_probe] <= m->max_seq_len / 2)
    probe_max = prof_probe_tokens[n_probe++];
  int per_seq = (prompt + steps + 1 + n_probe + 15) / 16;
  int cores = device_cpu_cores(), threads = p->cuda ? 1 : cores / (tp * replicas);
  if (threads < 1) threads = 1;

  sim_hw hw = p->hw.sim;
  hw.step_overhead_s = 0;
  hw.n_overhead = 0;
  sim_model sm = {.dim = m->dim, .n_layers = m->n_layers, .n_heads = m->n_heads,
                  .n_kv_heads = m->n_kv_heads, .head_dim = m->head_dim, .ffn_dim = m->ffn_dim,
                  .vocab = m->vocab_size, .tied_embeddings = m->tied_embeddings,
                  .weight_dtype = SIM_F32, .act_dtype = SIM_F32};
  if (p->cuda) { // as a scenario prices a GPU profile (scenarios/deployment.c): the model's
    sm.weight_dtype = (sim_dtype)m->dtype; // dtype, bf16 activations
    sm.act_dtype = SIM_BF16;
  }
  size_t per_b = (size_t)o->overhead_rounds * PROF_MAX_STEPS, cells = (size_t)nb * per_b;
  size_t probe_cells = (size_t)o->overhead_rounds * (size_t)nb * (size_t)n_probe;
  ov_replica rep[PROF_OVERHEAD_REPLICAS_MAX];
  ov_turn turn = {.parties = replicas};
  pthread_mutex_init(&turn.mu, NULL);
  pthread_cond_init(&turn.cv, NULL);
  sc_status s = SC_OK;
  int made = 0;
  for (; s == SC_OK && made < replicas; made++) {
    ov_replica *r = &rep[made];
    *r = (ov_replica){.o = o, .hw = &hw, .sm = &sm, .prompt = prompt, .steps = steps,
                      .index = made, .per_b = per_b, .cells = cells, .n_probe = n_probe,
                      .probe_cells = probe_cells, .turn = &turn, .s = SC_OK};
    r->lay = (sim_layout){.tp = tp, .pp = 1, .first_gpu = made * tp, .threads = threads,
                          .cluster_ranks = tp * replicas};
    engine_config c = engine_config_defaults();
    c.model = *m;
    c.weights_dir = NULL;
    c.weights_seed = o->seed;
    c.backend = o->backend;
    c.weight_dtype = p->wdt;
    if (p->cuda) { // every rank of every replica on GPU 0, as `devices: [0]` in a scenario
      c.devices[0] = 0;
      c.n_devices = 1;
    }
    c.tp = tp;
    c.pp = 1;
    c.threads = threads;
    // room for a probe beside the largest batch: one more sequence, its blocks, its prompt in
    // one step (the batch's own prompts fit one step either way)
    c.max_running = max_b + 1;
    c.kv_blocks = max_b * per_seq + (probe_max + 1 + 15) / 16;
    c.token_budget = max_b * prompt > max_b + probe_max ? max_b * prompt : max_b + probe_max;
    c.prefill_chunk = prompt > probe_max ? prompt : probe_max;
    r->fig = malloc(sizeof(double) * cells * OV_FIGS);
    r->pfig = malloc(sizeof(double) * (probe_cells ? probe_cells : 1) * PR_FIGS);
    if (!r->fig || !r->pfig)
      s = sc_fail(err, SC_OOM, "profile: out of memory for the step-overhead run");
    for (size_t i = 0; r->pfig && i < probe_cells; i++) r->pfig[PR_WALL * probe_cells + i] = NAN;
    if (s == SC_OK) s = engine_new(&c, &r->e, err);
    if (s != SC_OK) {
      free(r->fig);
      free(r->pfig);
      break;
    }
  }
  // replica 0 on this thread, the others on their own
  int started = 1;
  for (; s == SC_OK && started < replicas; started++)
    if (pthread_create(&rep[started].th, NULL, ov_replica_main, &rep[started]) != 0) {
      ov_turn_abort(&turn); // the started ones skip their work and reach the end
      s = sc_fail(err, SC_DEVICE, "profile: cannot start a replica thread");
      break;
    }
  if (s == SC_OK) ov_replica_main(&rep[0]);
  for (int q = 1; q < started; q++) pthread_join(rep[q].th, NULL);
  for (int q = 0; s == SC_OK && q < replicas; q++)
    if (rep[q].s != SC_OK) {
      *err = rep[q].err;
      s = rep[q].s;
    }

  if (s == SC_OK) {
    // every replica's steps of one batch size, gathered into replica 0's slots (per_b holds
    // rounds x PROF_MAX_STEPS; a batch size is timed at most that many times per replica, so
    // the pooled figures go through a scratch array of replicas x per_b)
    double *pool = malloc(sizeof(double) * per_b * (size_t)replicas);
    double *all = malloc(sizeof(double) * cells * (size_t)replicas);
    double *all_x = malloc(sizeof(double) * cells * (size_t)replicas);
    if (!pool || !all || !all_x)
      s = sc_fail(err, SC_OOM, "profile: out of memory for the step-overhead run");
    sim_overhead_table *tab = &p->hw.sim.overhead[ti];
    *tab = (sim_overhead_table){.tp = tp, .replicas = replicas, .s = {.n = nb}};
    int n_all = 0;
    for (int bi = 0; s == SC_OK && bi < nb; bi++) {
      double med[OV_FIGS];
      for (int f = 0; f < OV_FIGS; f++) {
        int k = 0;
        for (int q = 0; q < replicas; q++)
          for (int i = 0; i < rep[q].kept[bi]; i++)
            pool[k++] = rep[q].fig[(size_t)f * cells + (size_t)bi * per_b + (size_t)i];
        if (f == OV_RES) memcpy(all + n_all, pool, sizeof(double) * (size_t)k);
        if (f == OV_RES_EXEC) {
          memcpy(all_x + n_all, pool, sizeof(double) * (size_t)k);
          n_all += k;
        }
        med[f] = sc_median(pool, k, 0);
      }
      p->batch[bi] = o->batches[bi];
      p->wall_s[ti][bi] = med[OV_WALL];
      p->exec_s[ti][bi] = med[OV_EXEC];
      p->price_s[ti][bi] = med[OV_PRICE];
      p->res_s[ti][bi] = med[OV_RES];
      tab->s.x[bi] = o->batches[bi];
      tab->s.y[bi] = med[OV_RES] < -HW_STEP_OVERHEAD_MAX_S  ? -HW_STEP_OVERHEAD_MAX_S
                     : med[OV_RES] > HW_STEP_OVERHEAD_MAX_S ? HW_STEP_OVERHEAD_MAX_S
                                                            : med[OV_RES];
    }
    // the prefill curve: per prompt size, the median over every probe's step of its wall time
    // minus its price minus the decode residual just measured at its batch size (with two
    // rounds or more the first round's probes only warm up: a first prompt of a size meets
    // one-time costs)
    p->n_probe[ti] = 0;
    tab->prefill.n = 0;
    size_t first = o->overhead_rounds > 1 ? (size_t)nb * (size_t)n_probe : 0;
    for (int k = 0; s == SC_OK && k < n_probe; k++) {
      int np = 0;
      double w_sum = 0, p_sum = 0;
      for (int q = 0; q < replicas; q++)
        for (size_t c = first + (size_t)k; c < probe_cells; c += (size_t)n_probe) {
          const double *f = rep[q].pfig;
          if (isnan(f[PR_WALL * probe_cells + c])) continue;
          double ds = sim_curve_lin(&tab->s, f[PR_BATCH * probe_cells + c], 0);
          pool[np++] = f[PR_WALL * probe_cells + c] - f[PR_PRICE * probe_cells + c] - ds;
          w_sum += f[PR_WALL * probe_cells + c];
          p_sum += f[PR_PRICE * probe_cells + c];
        }
      if (np == 0) continue; // no probe of this size ran in one step: no point for it
      double med = sc_median(pool, np, 0);
      int at = tab->prefill.n++;
      tab->prefill.x[at] = prof_probe_tokens[k];
      tab->prefill.y[at] = med < -HW_STEP_OVERHEAD_MAX_S  ? -HW_STEP_OVERHEAD_MAX_S
                           : med > HW_STEP_OVERHEAD_MAX_S ? HW_STEP_OVERHEAD_MAX_S
                                                          : med;
      p->probe_steps[ti][at] = np;
      p->probe_wall_s[ti][at] = w_sum / np;
      p->probe_price_s[ti][at] = p_sum / np;
      p->n_probe[ti] = at + 1;
    }
    if (s == SC_OK) {
      p->n_batches = nb;
      p->hw.sim.n_overhead = ti + 1;
      double ov = sc_median(all, n_all, 0);
      if (ti == 0) {
        p->sum.step_overhead_exec_s = sc_median(all_x, n_all, 0);
        p->sum.step_overhead_s =
            ov > 0 ? (ov < HW_STEP_OVERHEAD_MAX_S ? ov : HW_STEP_OVERHEAD_MAX_S) : 0;
        p->sum.overhead_tp = tp;
        p->sum.overhead_steps = n_all;
        p->hw.sim.step_overhead_s = p->sum.step_overhead_s;
      }
      char line[256];
      int len = snprintf(line, sizeof line, "step overhead: %s tp%d", m->name, tp);
      if (replicas > 1)
        len += snprintf(line + len, sizeof line - (size_t)len, " x %d replicas", replicas);
      len += snprintf(line + len, sizeof line - (size_t)len,
                      ", %d decode steps in %d rounds at batch", n_all, o->overhead_rounds);
      for (int i = 0; i < nb && len > 0 && (size_t)len < sizeof line; i++)
        len += snprintf(line + len, sizeof line - (size_t)len, "%s%d", i ? ", " : " ",
                        p->batch[i]);
      for (int k = 0; k < tab->prefill.n && len > 0 && (size_t)len < sizeof line; k++)
        len += snprintf(line + len, sizeof line - (size_t)len, "%s%.0f: %.3f ms",
                        k ? ", " : "; prefill residual at ", tab->prefill.x[k],
                        tab->prefill.y[k] * 1e3);
      progress(o, "%s; median residual %.3f ms [%.1f s]", line, ov * 1e3, sc_monotonic_s() - t0);
    }
    free(pool);
    free(all);
    free(all_x);
  }
  pthread_mutex_destroy(&turn.mu);
  pthread_cond_destroy(&turn.cv);
  for (int q = 0; q < made; q++) {
    engine_free(rep[q].e);
    free(rep[q].fig);
    free(rep[q].pfig);
  }
  return s;
}

// Every TP degree alone, then the data-parallel layouts the list spans: tp x replicas where
// tp and tp x replicas are both in the list (for 1,2,4: 1x2, 1x4, 2x2), as the profile's
// scaling scenarios run them.
static sc_status measure_overhead(profile *p, sc_error *err) {
  const profile_options *o = &p->o;
  for (int ti = 0; ti < o->n_tp; ti++) SC_TRY(overhead_at(p, o->tp[ti], 1, err));
  for (int ti = 0; ti < o->n_tp; ti++)
    for (int tj = 0; tj < o->n_tp; tj++) {
      int r = o->tp[tj] / o->tp[ti];
      if (r < 2 || r * o->tp[ti] != o->tp[tj] || r > PROF_OVERHEAD_REPLICAS_MAX) continue;
      if (p->hw.sim.n_overhead == SIM_OVERHEAD_TABLES) return SC_OK;
      SC_TRY(overhead_at(p, o->tp[ti], r, err));
    }
  return SC_OK;
}

// --- the machine

static void read_cpu_model(profile *p) {
  snprintf(p->cpu_model, sizeof p->cpu_model, "unknown CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[4096]; // the flags line is long
  bool model = false, flags = false;
  while ((!model || !flags) && fgets(line, sizeof line, f)) {
    const char *c = strchr(line, ':');
    if (!c) continue;
    if (!model && !strncmp(line, "model name", 10)) {
      c++;
      while (*c == ' ' || *c == '\t') c++;
      size_t n = strcspn(c, "\n");
      if (n >= sizeof p->cpu_model) n = sizeof p->cpu_model - 1;
      memcpy(p->cpu_model, c, n);
      p->cpu_model[n] = 0;
      model = true;
    } else if (!flags && !strncmp(line, "flags", 5)) {
      p->virtual_machine = strstr(c, " hypervisor") != NULL;
      flags = true;
    }
  }
  fclose(f);
  p->llc_bytes = llc_bytes();
  long on = sysconf(_SC_NPROCESSORS_ONLN);
  p->cpus_online = on > 0 ? (int)on : 0;
}

// CPU time of the whole machine (busy: user, nice, system, irq, softirq; and steal: taken by
// the hypervisor) from /proc/stat, and of this process, in seconds. False when unreadable.
typedef struct cpu_times {
  double busy, steal, self;
} cpu_times;

static bool read_cpu_times(cpu_times *out) {
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return false;
  unsigned long long v[8] = {0};
  int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                 &v[4], &v[5], &v[6], &v[7]);
  fclose(f);
  long tck = sysconf(_SC_CLK_TCK);
  struct rusage ru;
  if (n < 8 || tck <= 0 || getrusage(RUSAGE_SELF, &ru) != 0) return false;
  out->busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6]) / (double)tck;
  out->steal = (double)v[7] / (double)tck;
  out->self = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
              (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
  return true;
}

// --- measure

sc_status profile_measure(const profile_options *opts, profile **out, sc_error *err) {
  *out = NULL;
  sc_error local = {{0}};
  if (!err) err = &local;
  err->msg[0] = 0;
  profile *p = calloc(1, sizeof *p);
  if (!p) return sc_fail(err, SC_OOM, "profile: out of memory");
  p->o = *opts;
  sc_status s = resolve_options(&p->o, err);
  p->cuda = p->sum.cuda = s == SC_OK && !strcmp(p->o.backend, "cuda");
  p->wdt = SC_F32;
  double t0 = sc_monotonic_s();
  // The cores the tables are planned for: a cuda rank has one entry per shape (threads 1; a
  // GPU profile's lookups ignore threads), which thread_counts gives for one core.
  int cores = p->cuda ? 1 : device_cpu_cores();
  cpu_times c0 = {0}, c1 = {0};
  bool have_times = !p->cuda && read_cpu_times(&c0); // cuda: the host's load is not the GPU's
  gemm_shape *shapes = calloc(SIM_TABLES_MAX, sizeof *shapes);
  int n_shapes = 0;
  if (s == SC_OK && !shapes) s = sc_fail(err, SC_OOM, "profile: out of memory");
  if (s == SC_OK) s = gemm_plan(&p->o, cores, shapes, &n_shapes, err);
  if (s == SC_OK) s = attention_plan(&p->o, cores, err);
  device *d = NULL;
  if (s == SC_OK) s = device_open(p->o.backend, 0, &d, err);
  p->dev = d;
  // cuda holds a bf16 model's GEMM weights in bf16 (scenarios/deployment.c, held_dtype)
  if (s == SC_OK && p->cuda && p->o.model.dtype == SC_BF16 && dev_has_matmul_bf16(d))
    p->wdt = SC_BF16;
  if (s == SC_OK) {
    read_cpu_model(p);
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(p->date, sizeof p->date, "%Y-%m-%d %H:%M UTC", &tm);
    s = measure_host(p, d, err);
  }
  if (s == SC_OK) s = measure_gemm(p, shapes, n_shapes, cores, err);
  if (s == SC_OK) derive_gemm_eff(p, cores);
  if (s == SC_OK) s = measure_attention(p, cores, err);
  if (s == SC_OK) s = measure_allreduce(p, err);
  if (s == SC_OK) {
    fill_sim_view(p);
    s = measure_overhead(p, err);
  }
  device_free(d);
  p->dev = NULL;
  free(shapes);
  if (s != SC_OK) {
    free(p);
    return s;
  }
  hw_profile *hp = &p->hw;
  if (p->o.description)
    snprintf(hp->description, sizeof hp->description, "%s", p->o.description);
  else if (p->cuda)
    snprintf(hp->description, sizeof hp->description,
             "CUDA GPU 0, %.1f GiB, CUDA backend (measured)", p->sum.mem_bytes / (1u << 30));
  else
    snprintf(hp->description, sizeof hp->description, "%.80s, %d cores, CPU backend (measured)",
             p->cpu_model, cores);
  p->sum.elapsed_s = sc_monotonic_s() - t0;
  p->sum.other_load = p->sum.steal = -1;
  if (have_times && read_cpu_times(&c1) && p->sum.elapsed_s > 0) {
    double cap = p->sum.elapsed_s * (p->cpus_online > 0 ? p->cpus_online : cores);
    double other = (c1.busy - c0.busy) - (c1.self - c0.self);
    p->sum.other_load = other > 0 ? other / cap : 0;
    p->sum.steal = (c1.steal - c0.steal) / cap;
  }
  *out = p;
  return SC_OK;
}

void profile_free(profile *p) { free(p); }

const hw_profile *profile_hw(const profile *p) { return &p->hw; }

void profile_summary_get(const profile *p, profile_summary *out) { *out = p->sum; }

// --- writing

// "[[x, y], [x, y], ...]" + suffix + newline, with `per_line` pairs per line, continuation
// lines indented by `indent` + 1 spaces. x are whole numbers (rows, tokens, bytes).
static void write_pairs(FILE *f, const sim_curve *c, int indent, const char *suffix) {
  const int per_line = 6;
  fputc('[', f);
  for (int i = 0; i < c->n; i++) {
    if (i > 0) {
      fputc(',', f);
      if (i % per_line == 0) fprintf(f, "\n%*s", indent + 1, "");
      else fputc(' ', f);
    }
    fprintf(f, "[%.0f, %.4g]", c->x[i], c->y[i]);
  }
  fprintf(f, "]%s\n", suffix);
}

// A YAML double-quoted string: quotes and backslashes escaped, control characters dropped.
static void write_quoted(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', f);
    if ((unsigned char)*s >= 0x20) fputc(*s, f);
  }
  fputc('"', f);
}

// "# date: ...", and how busy the machine was meanwhile when known.
static void write_when(const profile *p, FILE *f) {
  const profile_options *o = &p->o;
  const model_config *m = &o->model;
  const profile_summary *s = &p->sum;
  fprintf(f, "# date: %s; measuring took %.1f s\n", p->date, s->elapsed_s);
  if (s->other_load >= 0)
    fprintf(f, "# meanwhile: other processes used %.1f%% of the CPUs, the hypervisor took "
               "%.1f%% (steal)\n", s->other_load * 100, s->steal * 100);
  fprintf(f, "# model: %s (dim %d, %d layers, %d heads / %d KV heads x %d, ffn %d, vocab %d)\n"
             "# TP degrees:", m->name, m->dim, m->n_layers, m->n_heads, m->n_kv_heads,
          m->head_dim, m->ffn_dim, m->vocab_size);
  for (int i = 0; i < o->n_tp; i++) fprintf(f, "%s%d", i ? ", " : " ", o->tp[i]);
}

static void write_rounds(const profile *p, FILE *f) {
  fprintf(f, "# Table times are the median of %d rounds; a round repeats the op for at least "
             "%g ms.\n", p->o.reps, p->o.min_round_s * 1e3);
}

// The header's machine line and host figures of a cpu profile.
static void write_host_cpu(const profile *p, FILE *f) {
  const profile_options *o = &p->o;
  const profile_summary *s = &p->sum;
  int th[2];
  thread_counts(s->host_cores, o->tp[0], th);
  fprintf(f, "# machine: %s%s; %d cores usable by the process (%d online); %.1f GiB RAM",
          p->cpu_model, p->virtual_machine ? " (virtual machine)" : "", s->host_cores,
          p->cpus_online, s->mem_bytes / (1u << 30));
  if (p->llc_bytes) fprintf(f, "; last-level cache %ld MiB", p->llc_bytes >> 20);
  fputc('\n', f);
  write_when(p, f);
  fprintf(f, "\n# backend cpu: the \"devices\" are shares of this host, ranks are threads.\n");
  write_rounds(p, f);
  fprintf(f,
          "# host figures:\n"
          "#   mem_bytes: total RAM. mem_bw: streaming read of %zu MiB with %d threads (1 thread:\n"
          "#     %.1f GB/s; mem_eff is their ratio: a rank's elementwise ops run on one thread).\n"
          "#   flops_fp32: the best %d^3 GEMM on %d threads; flops_bf16 and flops_fp16 are the\n"
          "#     same (the CPU backend converts weights to f32 and multiplies in f32);\n"
          "#     flops_int8 0 (no int8 GEMM).\n"
          "#   gemm_eff: achieved fraction of flops_fp32 vs rows m of the tp%d gate|up GEMM on\n"
          "#     %d threads (prices GEMM shapes that have no table below).\n"
          "#   launch_s: one call of the smallest device op (an add of 16 floats).\n"
          "#   host_cores: cores the process may run on; ranks x threads beyond them slow every\n"
          "#     op in proportion.\n"
          "#   link memory: ranks exchange activations through shared memory. link_bw and\n"
          "#     link_latency_s fit t = 2(n-1) latency + 2(n-1)/n bytes / bw to the allreduce\n"
          "#     tables below (%s).\n"
          "#   gpus_per_node 8: up to 8 ranks as threads.\n",
          o->bw_bytes >> 20, s->host_cores, s->mem_bw_1t / 1e9, o->square_n, s->host_cores,
          o->tp[0], th[0], p->coll_fit);
}

// The header's machine line and host figures of a cuda profile.
static void write_host_cuda(const profile *p, FILE *f) {
  const profile_options *o = &p->o;
  const profile_summary *s = &p->sum;
  fprintf(f, "# machine: CUDA GPU 0 with %.1f GiB; host %s%s, %d CPUs online\n",
          s->mem_bytes / (1u << 30), p->cpu_model,
          p->virtual_machine ? " (virtual machine)" : "", p->cpus_online);
  write_when(p, f);
  fprintf(f,
          "\n# backend cuda: every rank on GPU 0, each with a stream of its own (as a scenario's\n"
          "#   `hardware: {backend: cuda, devices: [0]}` places them); GEMM weights held as %s.\n",
          sc_dtype_name(p->wdt));
  write_rounds(p, f);
  fprintf(f,
          "#   Ops are asynchronous: a round launches its calls back to back on one stream and\n"
          "#   waits for the device once at the end (as a step runs them), divided by the count.\n"
          "# host figures:\n"
          "#   mem_bytes: the GPU's memory. mem_bw: the best device-to-device copy of %zu MiB,\n"
          "#     bytes read plus bytes written (the cost model counts both); mem_eff 1.\n"
          "#   flops_fp32: the best %d^3 GEMM in f32 (cuBLAS, no TF32); flops_bf16 and\n"
          "#     flops_fp16: the same GEMM with bf16 weights and activations (fp32 sums);\n"
          "#     flops_int8 0 (not measured).\n"
          "#   gemm_eff: achieved fraction of flops_%s vs rows m of the tp%d gate|up GEMM\n"
          "#     (prices GEMM shapes that have no table below).\n"
          "#   launch_s: per call of the smallest device op (an add of 16 floats), launched back\n"
          "#     to back.\n"
          "#   host_cores 0: a GPU (no CPU share factor; tables are looked up without threads,\n"
          "#     so each shape has one entry, written with threads: 1).\n"
          "#   link memory: ranks on one GPU exchange activations through its memory (the\n"
          "#     loopback communicator). link_bw and link_latency_s fit\n"
          "#     t = 2(n-1) latency + 2(n-1)/n bytes / bw to the allreduce tables below (%s).\n"
          "#   gpus_per_node 8: up to 8 ranks on the GPU.\n",
          o->bw_bytes >> 20, o->square_n, p->wdt == SC_BF16 ? "bf16" : "fp32", o->tp[0],
          p->coll_fit);
}

// The step-overhead figures and their detail per layout and batch.
static void write_overhead(const profile *p, FILE *f) {
  const profile_options *o = &p->o;
  const profile_summary *s = &p->sum;
  fprintf(f,
          "#   step_overhead_s: per engine step, beyond the ops the cost model prices: the\n"
          "#     median over %d decode steps of %s at tp%d (random weights, %d rounds) of\n"
          "#     the whole engine_step wall time (scheduling, executor, sampling) minus the cost\n"
          "#     model's price of that step from this profile (executor-only: %.3f ms). The\n"
          "#     step_overhead tables at the end hold that residual per layout and batch (the\n"
          "#     median per batch; the batch sizes take turns each round): each TP degree alone,\n"
          "#     and tp x replicas side by side (data parallelism); a replica of a layout with a\n"
          "#     table is priced with it instead. Medians in ms\n"
          "#     (engine_step / executor = engine_step_info.duration_ns, no sampling / priced,\n"
          "#     and the residual):\n",
          s->overhead_steps, o->model.name, s->overhead_tp, o->overhead_rounds,
          s->step_overhead_exec_s * 1e3);
  for (int t = 0; t < p->hw.sim.n_overhead; t++) {
    const sim_overhead_table *ot = &p->hw.sim.overhead[t];
    char who[32];
    snprintf(who, sizeof who, ot->replicas > 1 ? "tp%d x %d" : "tp%d", ot->tp, ot->replicas);
    for (int i = 0; i < p->n_batches; i++)
      fprintf(f, "#       %s batch %3d: %.3f / %.3f / %.3f, residual %.3f\n", who, p->batch[i],
              p->wall_s[t][i] * 1e3, p->exec_s[t][i] * 1e3, p->price_s[t][i] * 1e3,
              p->res_s[t][i] * 1e3);
    for (int k = 0; k < p->n_probe[t]; k++)
      fprintf(f, "#       %s prompt of %3.0f beside decodes (%d steps, means): %.3f / - / %.3f, "
              "prefill residual %.3f (median, beyond the decode residual)\n", who,
              ot->prefill.x[k], p->probe_steps[t][k], p->probe_wall_s[t][k] * 1e3,
              p->probe_price_s[t][k] * 1e3, ot->prefill.y[k] * 1e3);
  }
  fprintf(f, "#     prefill: a table's residual of a step that also computes a prompt, beyond its\n"
             "#     decode residual: a prompt of 16, 64 and 256 tokens submitted while the batch\n"
             "#     decodes (each size once per round and batch size; the first round's only\n"
             "#     warm up when there are two or more), its step's wall time minus its price\n"
             "#     minus the table's s at the batch size.\n");
}

static void write_tables_cpu(FILE *f) {
  fprintf(f,
          "# gemm: seconds vs rows m of y(m x n) = x(m x k) . w(n x k)^T through a device at\n"
          "#   `threads` threads, for every GEMM one rank of each TP degree runs (q|k|v and\n"
          "#   gate|up as the cost model prices them: one GEMM of the combined width; the\n"
          "#   executor runs them as separate GEMMs). Weights rotate through %zu MiB (twice\n"
          "#   the last-level cache, at least 64), so they come from memory as in the engine.\n"
          "#   Below all cores, cores / threads - 1 companion ranks (at most 7) run the same\n"
          "#   GEMM on other weights meanwhile, as a rank's peers do in a run.\n"
          "# attention: one layer on one rank: decode = seconds per sequence for one token at\n"
          "#   context length x (timed over as many sequences as fill %zu MiB of KV, at most\n"
          "#   %d), prefill = seconds for x tokens from position 0 (causal), on a device at\n"
          "#   `threads` threads (a large attention is split over them).\n"
          "# allreduce: seconds vs bytes per rank of an in-place sum over the shm communicator,\n"
          "#   ranks as threads.\n",
          rotate_bytes() >> 20, rotate_bytes() >> 20, PROF_ATTN_SEQS);
}

static void write_tables_cuda(const profile *p, FILE *f) {
  fprintf(f,
          "# gemm: seconds vs rows m of y(m x n) = x(m x k) . w(n x k)^T (%s weights), for\n"
          "#   every GEMM one rank of each TP degree runs (q|k|v and gate|up as the cost model\n"
          "#   prices them: one GEMM of the combined width; the executor runs them as separate\n"
          "#   GEMMs). Weights rotate through %zu MiB (over 4 times the L2 of an H100), so they\n"
          "#   come from HBM as in a step. One rank alone on the GPU: what ranks sharing it\n"
          "#   cost each other is in the step_overhead tables of their layouts.\n"
          "# attention: one layer on one rank: decode = seconds per sequence for one token at\n"
          "#   context length x (timed over as many sequences as fill %zu MiB of KV, at most\n"
          "#   %d), prefill = seconds for x tokens from position 0 (causal).\n"
          "# allreduce: seconds vs bytes per rank of an in-place sum over the cuda communicator\n"
          "#   with every rank on GPU 0 (loopback: copies and a reduction kernel meeting at host\n"
          "#   barriers), ranks as threads, each with its own stream.\n",
          sc_dtype_name(p->wdt), PROF_CUDA_POOL >> 20, PROF_CUDA_POOL >> 20, PROF_ATTN_SEQS);
}

static void write_header(const profile *p, FILE *f) {
  const profile_options *o = &p->o;
  fprintf(f, "# %s: a hardware profile measured by `shardcheck profile` (docs/profile.md).\n",
          p->hw.name);
  if (o->command) fprintf(f, "# command: %s\n", o->command);
  if (p->cuda) write_host_cuda(p, f);
  else write_host_cpu(p, f);
  write_overhead(p, f);
  if (p->cuda) write_tables_cuda(p, f);
  else write_tables_cpu(f);
}

sc_status profile_write(const profile *p, FILE *f, sc_error *err) {
  const hw_profile *h = &p->hw;
  const sim_hw *s = &h->sim;
  write_header(p, f);
  fprintf(f, "name: ");
  write_quoted(f, h->name);
  fprintf(f, "\ndescription: ");
  write_quoted(f, h->description);
  fprintf(f, "\nmem_bytes: %.0f    # %.1f GiB\n", h->mem_bytes, h->mem_bytes / (1u << 30));
  fprintf(f, "mem_bw: %.4g\n", h->mem_bw);
  fprintf(f, "mem_eff: %.3f\n", s->mem_eff);
  fprintf(f, "flops_bf16: %.4g\nflops_fp16: %.4g\nflops_fp32: %.4g\nflops_int8: 0\n",
          h->flops_bf16, h->flops_fp16, h->flops_fp32);
  fprintf(f, "link: %s\nlink_bw: %.4g\nlink_latency_s: %.4g\ngpus_per_node: %d\n", h->link,
          h->link_bw, h->link_latency_s, h->gpus_per_node);
  fprintf(f, "host_cores: %d\nlaunch_s: %.4g\nstep_overhead_s: %.4g\n", s->host_cores,
          s->launch_s, s->step_overhead_s);
  if (s->gemm_eff.n > 0) {
    fprintf(f, "gemm_eff: ");
    write_pairs(f, &s->gemm_eff, 10, "");
  }
  fprintf(f, "gemm:\n");
  for (int i = 0; i < s->n_gemm; i++) {
    const sim_gemm_table *g = &s->gemm[i];
    fprintf(f, "  # %s\n  - {n: %d, k: %d, threads: %d,\n     t: ", p->gemm_role[i], g->n, g->k,
            g->threads);
    write_pairs(f, &g->t, 7, "}");
  }
  fprintf(f, "attention:\n");
  for (int i = 0; i < s->n_attn; i++) {
    const sim_attn_table *a = &s->attn[i];
    fprintf(f, "  # %s\n  - heads: %d\n    kv_heads: %d\n    head_dim: %d\n    threads: %d\n",
            p->attn_role[i], a->heads, a->kv_heads, a->head_dim, a->threads);
    fprintf(f, "    decode: ");
    write_pairs(f, &a->decode, 12, "");
    fprintf(f, "    prefill: ");
    write_pairs(f, &a->prefill, 13, "");
  }
  fprintf(f, "allreduce:\n");
  for (int i = 0; i < s->n_coll; i++) {
    const sim_coll_table *c = &s->coll[i];
    fprintf(f, "  - ranks: %d\n    t: ", c->ranks);
    write_pairs(f, &c->allreduce, 7, "");
  }
  fprintf(f, "step_overhead:\n");
  for (int i = 0; i < s->n_overhead; i++) {
    fprintf(f, "  - tp: %d\n", s->overhead[i].tp);
    if (s->overhead[i].replicas > 1) fprintf(f, "    replicas: %d\n", s->overhead[i].replicas);
    fprintf(f, "    s: ");
    write_pairs(f, &s->overhead[i].s, 7, "");
    if (s->overhead[i].prefill.n > 0) {
      fprintf(f, "    prefill: ");
      write_pairs(f, &s->overhead[i].prefill, 13, "");
    }
  }
  if (fflush(f) != 0 || ferror(f))
    return sc_fail(err, SC_IO, "profile: writing the profile failed: %s", strerror(errno));
  return SC_OK;
}

sc_status profile_write_path(const profile *p, const char *path, sc_error *err) {
  FILE *f = fopen(path, "w");
  if (!f) return sc_fail(err, SC_IO, "cannot write '%s': %s", path, strerror(errno));
  sc_status s = profile_write(p, f, err);
  if (fclose(f) != 0 && s == SC_OK)
    s = sc_fail(err, SC_IO, "cannot write '%s': %s", path, strerror(errno));
  return s;
}
