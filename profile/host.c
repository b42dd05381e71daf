// The host figures of a profile: the memory and how fast it is read (streaming reads on every
// core and on one on cpu; a device-to-device copy on cuda), the peak GEMM rate (a square GEMM:
// f32, and bf16 on cuda), the call of the smallest device op, and the cores.
//
// Left to others: timing (profile.c), the GEMM call it times (gemm.c's prof_mm_call), writing
// the figures and how each was taken (write.c).
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/clock.h"
#include "kernels/device.h"
#include "profile/profile_impl.h"

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
  if (s == SC_OK) s = prof_fill_device(p, d, a, nn, o->seed, 0.05f, false);
  if (s == SC_OK) s = prof_fill_device(p, d, b, nn, o->seed + 1, 0.05f, wdt == SC_BF16);
  double best = 0;
  if (s == SC_OK) {
    if (!p->cuda) device_cpu_set_threads(device_cpu_cores());
    mm_ctx g = {.d = d, .m = N, .n = N, .k = N, .x = a, .pool = b, .wdt = wdt, .copies = 1,
                .y = c};
    s = prof_time_op(prof_mm_call, &g, p->cuda ? d : NULL, o->reps, 0, NULL, &best);
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
  if (s == SC_OK) s = prof_time_op(copy_call, &k, d, bw_reps, o->min_round_s, NULL, &best);
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
sc_status prof_measure_host(profile *p, device *d, sc_error *err) {
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
  s = prof_time_op(add_call, &ac, p->cuda ? d : NULL, o->reps, o->min_round_s, &p->sum.launch_s,
                   NULL);
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
    prof_progress(o,
             "device: cuda 0, %.1f GiB, device-to-device copy %.0f GB/s (read + write), "
             "GEMM %d^3 f32 %.1f TFLOP/s, bf16 %.1f TFLOP/s, launch %.2f us [%.1f s]",
             p->sum.mem_bytes / (1u << 30), p->sum.mem_bw / 1e9, o->square_n,
             p->sum.flops_fp32 / 1e12, p->sum.flops_bf16 / 1e12, p->sum.launch_s * 1e6,
             sc_monotonic_s() - t0);
  else
    prof_progress(o,
             "host: %d cores, %.1f GiB, streaming read %.1f GB/s (1 thread %.1f GB/s), "
             "fp32 GEMM %d^3 %.1f GFLOP/s, op call %.0f ns [%.1f s]",
             cores, p->sum.mem_bytes / (1u << 30), p->sum.mem_bw / 1e9, p->sum.mem_bw_1t / 1e9,
             o->square_n, p->sum.flops_fp32 / 1e9, p->sum.launch_s * 1e9, sc_monotonic_s() - t0);
  return SC_OK;
}
