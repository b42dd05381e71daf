// The private side of profile/, shared by its files (profile.h lists them by job): struct
// profile (the options resolved, the hw_profile being filled, the detail only the writer
// prints), the constants more than one file uses, the timing of points and the helpers every
// measurement takes, and each file's entry point, in the order profile_measure calls them.
// Internal to profile/; where the room sits among the floors: docs/design.md.
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/hw_profile.h"
#include "kernels/device.h"
#include "kernels/status.h"
#include "profile/profile.h"

#define PROF_MAX_REPS 15
#define PROF_ATTN_SEQS 256                 // decode sequences timed in one call at most
#define PROF_MAX_STEPS 64                  // decode steps timed per batch size per round at most
#define PROF_PREFILL_PROBES 3              // prompt sizes of the prefill residual (overhead.c)
#define PROF_MAX_BATCH 256                 // the cost model prices at most 256 sequences
#define PROF_CUDA_POOL ((size_t)256 << 20) // cuda: weight / KV rotation pool (H100 L2: 50 MB)

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

// --- helpers (profile.c)

// Deterministic values in [-scale, scale) into p[0..n).
void prof_fill_random(float *p, size_t n, uint64_t seed, float scale);
// One progress line through o->progress (nothing when it is NULL).
void prof_progress(const profile_options *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
// The cpu backend's weight and KV rotation pool, bytes: twice the last-level cache, in bounds.
size_t prof_rotate_bytes(void);
// The rotation pool of p's backend, bytes (cuda: PROF_CUDA_POOL).
size_t prof_pool_bytes(const profile *p);
// Fills n elements of dst, a buffer of device d, with prof_fill_random's values (as bf16 bits
// when bf16). SC_OOM / SC_DEVICE when the host chunk or a copy fails.
sc_status prof_fill_device(const profile *p, device *d, void *dst, size_t n, uint64_t seed,
                           float scale, bool bf16);
// Thread counts a rank of TP degree t runs on among `cores`: cores / t and, when that is
// above 1, 1. Writes them to out; returns how many (1 or 2).
int prof_thread_counts(int cores, int t, int *out);

// --- timing (profile.c)

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

// Times points t[0..n): a warm-up call each that sizes its rounds (at least min_s), then reps
// passes over all of them, one round per point per pass; each round's per-call seconds land
// in t[i].v. The first failing op's status, with the rounds after it not run.
sc_status prof_time_points(timed *t, int n, int reps, double min_s);
// The median per-call seconds of t's rounds.
double prof_timed_median(const timed *t, int reps);
// One op on its own: the median and the best per-call seconds of reps rounds (either may be
// NULL). sync: as in timed.
sc_status prof_time_op(prof_op op, void *ctx, device *sync, int reps, double min_s, double *med,
                       double *best);

// --- the measurements, each filling its part of p->hw and p->sum; on error err says why

// host.c: memory, bandwidth, the peak GEMM rate, the smallest op's call, the cores.
sc_status prof_measure_host(profile *p, device *d, sc_error *err);

// gemm.c: the timed GEMM call (host.c's square GEMM uses it too), the shapes to measure, their
// tables, and gemm_eff from one of them.

// What the GEMM being timed is, for the companion ranks that run beside it (prof_measure_gemm):
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

sc_status prof_mm_call(void *c, int iter); // c: an mm_ctx; iter picks the weights' copy
sc_status prof_gemm_plan(const profile_options *o, int cores, gemm_shape *out, int *n_out,
                         sc_error *err);
sc_status prof_measure_gemm(profile *p, const gemm_shape *shapes, int n_shapes, int cores,
                            sc_error *err);
void prof_derive_gemm_eff(profile *p, int cores);

// attention.c: whether the attention tables fit a profile, and the tables.
sc_status prof_attention_plan(const profile_options *o, int cores, sc_error *err);
sc_status prof_measure_attention(profile *p, int cores, sc_error *err);

// allreduce.c: the all-reduce tables and the link fit.
sc_status prof_measure_allreduce(profile *p, sc_error *err);

// overhead.c: the step-overhead tables (after the others: it prices steps with them).
sc_status prof_measure_overhead(profile *p, sc_error *err);
