// `shardcheck profile`'s measurement (see profile.h): resolves the options, measures in order
// (host figures, GEMM, attention and all-reduce tables, the step overhead) and owns the
// profile; and what every measuring file shares: timing a group of points, the rotation
// pool, test data on a device, progress lines, and the machine (CPU model, cache, the load
// meanwhile).
//
// How a point is timed (docs/profile.md says the same for users): each point (an op at one
// shape) is called once (warm-up, and to size a round), then a group's points are timed in
// `reps` passes, one round per point per pass; a round repeats the op until at least
// min_round_s has passed. The median of a point's rounds is the table's value (peaks: the
// best round). Passes spread each point's rounds over the group, so a short disturbance costs
// one round of each point, which the median drops.
//
// Left to the room's other files: each measurement (host.c, gemm.c, attention.c,
// allreduce.c, overhead.c) and the YAML (write.c). Left to others: the cost model
// (kernels/sim/sim_cost.c), reading the YAML back (config/hardware.c), the device and
// communicator (kernels/), the engine whose steps are timed (engine/engine.c), and everything
// printed (cli/cmd_profile.c).
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "config/hardware.h"
#include "engine/shard.h"
#include "kernels/clock.h"
#include "kernels/device.h"
#include "kernels/util.h"
#include "profile/profile_impl.h"

#define PROF_ROTATE_MIN ((size_t)64 << 20) // weight / KV rotation pool: at least 64 MiB
#define PROF_ROTATE_MAX ((size_t)512 << 20)
#define PROF_OVERHEAD_ROUNDS_MAX 16        // step-overhead rounds at most
#define PROF_INNER_MAX 100000              // calls of one op in one timed round at most
#define PROF_INNER_UNTIMED 1000            // calls per round when one call was too fast to time
#define PROF_SYNC_PROBE 8                  // cuda: calls that size a round (then one wait)
#define PROF_UPLOAD_FLOATS ((size_t)1 << 20) // cuda: host chunk that fills device buffers

// --- small helpers

// Deterministic values in [-scale, scale): activations and weights of a plausible size, so no
// NaN, inf or denormal slows an op down.
void prof_fill_random(float *p, size_t n, uint64_t seed, float scale) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
  for (size_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = scale * ((float)(s >> 40) / (float)(1u << 24) * 2.0f - 1.0f);
  }
}

void prof_progress(const profile_options *o, const char *fmt, ...) {
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
size_t prof_rotate_bytes(void) {
  long llc = llc_bytes();
  size_t b = llc > 0 ? 2 * (size_t)llc : 0;
  if (b < PROF_ROTATE_MIN) b = PROF_ROTATE_MIN;
  if (b > PROF_ROTATE_MAX) b = PROF_ROTATE_MAX;
  return b;
}

// The rotation pool of p's backend: the CPU's from its cache; on cuda a fixed 256 MiB, five
// times an H100's L2 (50 MB), so a decode GEMM or attention reads from HBM as in a step.
size_t prof_pool_bytes(const profile *p) { return p->cuda ? PROF_CUDA_POOL : prof_rotate_bytes(); }

// Fills n elements of dst, a buffer of device d, with prof_fill_random's values (as bf16 bits
// when bf16). On the cpu backend device memory is host memory and is filled in place; on cuda
// one host chunk is filled and copied over the buffer again and again (values do not change a
// timing, only where they sit). SC_OOM / SC_DEVICE when the chunk or a copy fails.
sc_status prof_fill_device(const profile *p, device *d, void *dst, size_t n, uint64_t seed,
                           float scale, bool bf16) {
  if (!p->cuda) {
    prof_fill_random(dst, n, seed, scale);
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
  prof_fill_random(h, chunk, seed, scale);
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
sc_status prof_time_points(timed *t, int n, int reps, double min_s) {
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

double prof_timed_median(const timed *t, int reps) {
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
sc_status prof_time_op(prof_op op, void *ctx, device *sync, int reps, double min_s, double *med,
                       double *best) {
  timed t = {.op = op, .ctx = ctx, .sync = sync};
  SC_TRY(prof_time_points(&t, 1, reps, min_s));
  if (med) *med = prof_timed_median(&t, reps);
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
int prof_thread_counts(int cores, int t, int *out) {
  int full = cores / t > 0 ? cores / t : 1;
  out[0] = full;
  if (full == 1) return 1;
  out[1] = 1;
  return 2;
}

// --- the simulator's view, as hw_profile_load builds it from the written file

static void fill_sim_view(profile *p) {
  hw_profile *hp = &p->hw;
  sim_hw *h = &hp->sim;
  snprintf(hp->name, sizeof hp->name, "%s", p->o.name);
  hw_profile_sync_sim(hp);
  if (!sim_link_lookup("ib-ndr", &h->inter)) h->inter = h->intra; // hardware.c's default
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
  // GPU profile's lookups ignore threads), which prof_thread_counts gives for one core.
  int cores = p->cuda ? 1 : device_cpu_cores();
  cpu_times c0 = {0}, c1 = {0};
  bool have_times = !p->cuda && read_cpu_times(&c0); // cuda: the host's load is not the GPU's
  gemm_shape *shapes = calloc(SIM_TABLES_MAX, sizeof *shapes);
  int n_shapes = 0;
  if (s == SC_OK && !shapes) s = sc_fail(err, SC_OOM, "profile: out of memory");
  if (s == SC_OK) s = prof_gemm_plan(&p->o, cores, shapes, &n_shapes, err);
  if (s == SC_OK) s = prof_attention_plan(&p->o, cores, err);
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
    s = prof_measure_host(p, d, err);
  }
  if (s == SC_OK) s = prof_measure_gemm(p, shapes, n_shapes, cores, err);
  if (s == SC_OK) prof_derive_gemm_eff(p, cores);
  if (s == SC_OK) s = prof_measure_attention(p, cores, err);
  if (s == SC_OK) s = prof_measure_allreduce(p, err);
  if (s == SC_OK) {
    fill_sim_view(p);
    s = prof_measure_overhead(p, err);
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
