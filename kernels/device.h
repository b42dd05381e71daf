// The device seam: what the executor needs from a backend (memory, copies, and the ops of a
// Llama decoder), as a vtable plus a context, after ggml-backend.
//
// Backends: cpu (kernels/cpu/, CBLAS + C) and cuda (kernels/cuda/, cuBLAS + its own kernels).
// Sim mode does not come through here: the engine's sim backend prices each step's ops from
// their shapes (kernels/sim/sim_cost.h) instead of allocating and running them. This file
// declares the vtable and the public wrappers; the wrappers are where fault hooks go, so every
// backend gets them. Activations are fp32 row-major everywhere; weights are fp32, or int8 with
// per-row scales for the optional matmul_q8, or bf16 for the optional matmul_bf16; a "device
// pointer" is whatever alloc returned (host memory on cpu, GPU memory on cuda).
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/status.h"

typedef enum dev_copy_kind { DEV_H2D, DEV_D2H, DEV_D2D } dev_copy_kind;

// Where each token of a step sits in the paged KV cache. All arrays live in device memory.
typedef struct dev_kv_batch {
  int n_tok;                   // tokens in this step, over all sequences
  const int32_t *pos;          // (n_tok) position of each token within its sequence
  const int32_t *seq;          // (n_tok) row of block_tables that each token belongs to
  const int32_t *block_tables; // (n_seq, max_blocks) physical block ids, row per sequence
  int max_blocks;              // columns of block_tables
  int block_size;              // tokens per KV block
  int max_run; // a hint, 0 when unknown: the most consecutive tokens of one sequence (the
               // longest prefill chunk); a backend may choose its attention kernel by it
  int reduced_precision; // nonzero: the model's matmuls round their inputs to bf16, so
                         // attention may too (the CUDA backend's prefill then runs in TF32)
} dev_kv_batch;

// One row's draw for device_i.sample: engine/sampler.c's sampler_pick for temperature > 0, with u
// its uniform draw in [0, 1) (sampler_uniform(seed, index)); temperature <= 0 picks greedily.
typedef struct dev_sample_row {
  float temperature;
  float top_p; // (0, 1); anything else keeps every token
  double u;
} dev_sample_row;

// KV storage of one layer on one device: (n_blocks, block_size, n_kv_heads, head_dim) each.
typedef struct dev_kv_layer {
  float *k;
  float *v;
} dev_kv_layer;

typedef struct device_i {
  const char *name; // "cpu", "cuda", "sim"

  // --- memory
  sc_status (*alloc)(void *ctx, size_t bytes, void **out); // zeroed; SC_OOM when it cannot
  void (*free)(void *ctx, void *ptr);
  sc_status (*copy)(void *ctx, void *dst, const void *src, size_t bytes, dev_copy_kind kind);
  sc_status (*mem_info)(void *ctx, size_t *used, size_t *total); // bytes
  sc_status (*synchronize)(void *ctx);

  // --- ops (m = rows/tokens; every pointer is device memory)
  // y(m,n) = x(m,k) * w(n,k)^T + beta * y(m,n); w in Hugging Face (out, in) layout.
  sc_status (*matmul)(void *ctx, int m, int n, int k, const float *x, const float *w, float beta,
                      float *y);
  // Optional (NULL: the backend has no int8 weights). The same product with w held as int8
  // weight-only: y(m,n) = x(m,k) * (scale(n) . q(n,k))^T + beta * y(m,n), q in the (out, in)
  // layout of matmul, one f32 scale per output row (dev_q8_quantize makes them).
  sc_status (*matmul_q8)(void *ctx, int m, int n, int k, const float *x, const int8_t *q,
                         const float *scale, float beta, float *y);
  // Optional (NULL: no bf16 weights). The same product with w held as bfloat16 bits (the top
  // 16 bits of an f32, dev_bf16_from_f32 rounds them): x is rounded to bf16 as well and the
  // products are summed in fp32, as bf16 inference does; y stays f32.
  sc_status (*matmul_bf16)(void *ctx, int m, int n, int k, const float *x, const uint16_t *w,
                           float beta, float *y);
  // Optional (NULL: no fp16 weights). The same product with w held as IEEE half bits
  // (dev_f16_from_f32 rounds them): x is rounded to fp16 as well, fp32 sums, f32 y.
  sc_status (*matmul_f16)(void *ctx, int m, int n, int k, const float *x, const uint16_t *w,
                          float beta, float *y);
  // Optional (NULL: one matmul_bf16 per weight). count (1..DEV_GROUP_MAX) bf16 products of the
  // same x: y[i](m, n[i]) = bf16(x)(m,k) * w[i](n[i],k)^T, beta 0 (q, k and v of a layer; gate
  // and up), so that a backend can run them as one launch.
  sc_status (*matmul_bf16_group)(void *ctx, int m, int k, const float *x, int count,
                                 const uint16_t *const *w, const int *n, float *const *y);
  // y(m,d) = x / sqrt(mean(x^2) + eps) * w(d); y may alias x.
  sc_status (*rmsnorm)(void *ctx, int m, int d, const float *x, const float *w, float eps,
                       float *y);
  // In place on x(m, n_heads, head_dim): Hugging Face rotate-half RoPE at positions pos(m).
  sc_status (*rope)(void *ctx, int m, int n_heads, int head_dim, const int32_t *pos, float theta,
                    float *x);
  // Writes k, v (n_tok, n_kv_heads, head_dim) into the cache slots the batch names.
  sc_status (*kv_store)(void *ctx, const dev_kv_batch *b, int n_kv_heads, int head_dim,
                        const float *k, const float *v, dev_kv_layer kv);
  // Causal attention over the paged cache: token t of sequence s at position p attends to
  // positions 0..p of s. q, out: (n_tok, n_heads, head_dim); query head h reads KV head
  // h / (n_heads / n_kv_heads). scale is usually 1/sqrt(head_dim).
  sc_status (*attention)(void *ctx, const dev_kv_batch *b, int n_heads, int n_kv_heads,
                         int head_dim, float scale, const float *q, dev_kv_layer kv, float *out);
  // out(m,d) = silu(gate) * up; out may alias gate.
  sc_status (*swiglu)(void *ctx, int m, int d, const float *gate, const float *up, float *out);
  // y(n) += a(n)
  sc_status (*add)(void *ctx, size_t n, const float *a, float *y);
  // out(m,d) = table[ids[i] - row0] for rows in [row0, row0 + rows); other ids give zeros
  // (vocab-sharded embedding: the partial results are summed across ranks).
  sc_status (*embedding)(void *ctx, int m, int d, const int32_t *ids, const float *table,
                         int row0, int rows, float *out);
  // Optional (NULL: greedy tokens are picked on the host). For each row i of x(m,n): idx(i) =
  // the column of its largest value (the first one on ties) and val(i) = that value; idx(i) =
  // -1 when the row holds a NaN or an infinity. idx and val are device memory.
  sc_status (*argmax)(void *ctx, int m, int n, const float *x, int32_t *idx, float *val);

  // Optional (NULL: dev_add_rmsnorm runs add, then rmsnorm). x(m,d) += a(m,d), then y =
  // rmsnorm(x) . w(d) as rmsnorm computes it, in one pass (the residual add before a norm).
  sc_status (*add_rmsnorm)(void *ctx, int m, int d, const float *a, float *x, const float *w,
                           float eps, float *y);
  // Optional (NULL: dev_rope_kv_store runs rope on q, rope on k, then kv_store of k and v):
  // the same results in one pass.
  sc_status (*rope_kv_store)(void *ctx, const dev_kv_batch *b, int n_heads, int n_kv_heads,
                             int head_dim, float theta, float *q, float *k, const float *v,
                             dev_kv_layer kv);
  // Optional (NULL: every op is enqueued as it comes), both or neither. graph_begin replays
  // the ops recorded under key, as they were recorded (*mode DEV_GRAPH_REPLAYED), or starts
  // recording the ops that follow on this device (DEV_GRAPH_RECORDING: they are kept, not run,
  // until graph_end), or declines (DEV_GRAPH_OFF; a backend may by the step's rows, where its
  // products at that many rows keep a scratch they may regrow). graph_end(keep) stops recording: keep
  // false discards what was recorded (nothing of it ran); keep true stores it under the key and
  // runs it once. The caller records only ops whose arguments, pointers included, are the same
  // whenever it asks for the key again, and whose device-side inputs it updates before.
  sc_status (*graph_begin)(void *ctx, uint64_t key, int rows, int *mode);
  sc_status (*graph_end)(void *ctx, bool keep);
  // Optional (NULL: sampled tokens are picked on the host). For each row i of x(m,n), idx(i) =
  // what sampler_pick draws from it with rows[i]: the probabilities exp((x - max) / T) as
  // floats, sorted by probability (the lower id first on ties), the smallest prefix whose mass
  // reaches top_p of the total, and the first token of it whose running mass passes u x that
  // prefix's; the first largest when T <= 0; -1 when the row holds a NaN or an infinity. The
  // masses are summed in double in another order than the host's, so a draw within about 1e-15
  // of a boundary may land on its neighbour. x is overwritten (with the probabilities); rows is a
  // HOST array of m, idx device memory.
  sc_status (*sample)(void *ctx, int m, int n, float *x, const dev_sample_row *rows,
                      int32_t *idx);
  // Optional (NULL: nothing to add): the text of the backend's last failure, e.g. the CUDA call,
  // file, line and message behind an SC_DEVICE; "" when there is none.
  const char *(*last_error)(void *ctx);

  void (*destroy)(void *ctx);
} device_i;

typedef struct device device;

// Opens a backend by name ("cpu"; "cuda" when built with it). index picks the GPU; ignored on
// cpu. On error returns a status, fills err, and *out is NULL.
sc_status device_open(const char *backend, int index, device **out, sc_error *err);
void device_free(device *d); // NULL is a no-op
const char *device_name(const device *d);
// The backend's text for its last failure (device_i.last_error), or "" (never NULL).
const char *dev_last_error(const device *d);
// The context a backend's open function wrapped (device_wrap), for that backend's own files
// only (kernels/cuda/ reaches its stream through it); NULL for NULL.
void *device_backend_ctx(const device *d);
bool device_backend_available(const char *backend);
// The devices of backend this process can open (the indexes device_open takes are 0 to this
// minus 1): 1 for cpu, the GPUs the CUDA runtime sees for cuda (loading its library; 0 without
// a GPU, a driver or the library), 0 for a backend that is not built in.
int device_backend_count(const char *backend);

// Wraps a vtable and its context in a device (used by backends' open functions).
sc_status device_wrap(const device_i *iface, void *ctx, device **out);

// --- public wrappers (one place for fault hooks)
sc_status dev_alloc(device *d, size_t bytes, void **out);
void dev_free(device *d, void *ptr);
sc_status dev_copy(device *d, void *dst, const void *src, size_t bytes, dev_copy_kind kind);
sc_status dev_mem_info(device *d, size_t *used, size_t *total);
sc_status dev_synchronize(device *d);
sc_status dev_matmul(device *d, int m, int n, int k, const float *x, const float *w, float beta,
                     float *y);
// Whether the backend multiplies int8 weights: dev_matmul_q8 gives SC_INVALID when it does not
// (the engine refuses int8 weights on such a backend with a message when it loads them).
bool dev_has_matmul_q8(const device *d);
// y(m,n) = x(m,k) * (scale(n) . q(n,k))^T + beta * y(m,n) (device_i.matmul_q8); every fault
// hook applies to it as to dev_matmul (lost, hang, slow, and corrupt poisons its y).
sc_status dev_matmul_q8(device *d, int m, int n, int k, const float *x, const int8_t *q,
                        const float *scale, float beta, float *y);
// Whether the backend multiplies bf16 weights (device_i.matmul_bf16; cuda does, cpu does not).
bool dev_has_matmul_bf16(const device *d);
// y(m,n) = bf16(x)(m,k) * w(n,k)^T + beta * y(m,n), fp32 sums (device_i.matmul_bf16); every fault
// hook applies as to dev_matmul.
sc_status dev_matmul_bf16(device *d, int m, int n, int k, const float *x, const uint16_t *w,
                          float beta, float *y);
// Most weights one dev_matmul_bf16_group takes.
#define DEV_GROUP_MAX 4
// y[i](m, n[i]) = bf16(x)(m,k) * w[i](n[i],k)^T for i < count (1..DEV_GROUP_MAX): in one call
// where the backend has device_i.matmul_bf16_group and no fault is set, else one
// dev_matmul_bf16 each (every fault hook then applies to each, as to dev_matmul).
sc_status dev_matmul_bf16_group(device *d, int m, int k, const float *x, int count,
                                const uint16_t *const *w, const int *n, float *const *y);
// Host side: w(n) as bfloat16 bits, rounded to nearest even (NaN stays NaN, inf stays inf).
void dev_bf16_from_f32(const float *w, size_t n, uint16_t *out);
// Whether the backend multiplies fp16 weights (device_i.matmul_f16; cuda does, cpu does not).
bool dev_has_matmul_f16(const device *d);
// y(m,n) = f16(x)(m,k) * w(n,k)^T + beta * y(m,n), fp32 sums (device_i.matmul_f16); every fault
// hook applies as to dev_matmul.
sc_status dev_matmul_f16(device *d, int m, int n, int k, const float *x, const uint16_t *w,
                         float beta, float *y);
// Host side: w(n) as IEEE binary16 bits, rounded to nearest even; past 65504 (after rounding)
// inf, below 2^-24 subnormals and zero as IEEE says, NaN a quiet NaN.
void dev_f16_from_f32(const float *w, size_t n, uint16_t *out);
// Host side: symmetric per-row int8 of w(n,k): scale(j) = max_i |w(j,i)| / 127 (0 for a row of
// zeros), q(j,i) = round(w(j,i) / scale(j)), so |w - scale . q| <= scale / 2 element-wise.
void dev_q8_quantize(const float *w, int n, int k, int8_t *q, float *scale);
sc_status dev_rmsnorm(device *d, int m, int dim, const float *x, const float *w, float eps,
                      float *y);
sc_status dev_rope(device *d, int m, int n_heads, int head_dim, const int32_t *pos, float theta,
                   float *x);
sc_status dev_kv_store(device *d, const dev_kv_batch *b, int n_kv_heads, int head_dim,
                       const float *k, const float *v, dev_kv_layer kv);
sc_status dev_attention(device *d, const dev_kv_batch *b, int n_heads, int n_kv_heads,
                        int head_dim, float scale, const float *q, dev_kv_layer kv, float *out);
sc_status dev_swiglu(device *d, int m, int dim, const float *gate, const float *up, float *out);
sc_status dev_add(device *d, size_t n, const float *a, float *y);
sc_status dev_embedding(device *d, int m, int dim, const int32_t *ids, const float *table,
                        int row0, int rows, float *out);
bool dev_has_argmax(const device *d);
sc_status dev_argmax(device *d, int m, int n, const float *x, int32_t *idx, float *val);
// Sampled picks on the device (device_i.sample); SC_INVALID where the backend has none.
bool dev_has_sample(const device *d);
sc_status dev_sample(device *d, int m, int n, float *x, const dev_sample_row *rows, int32_t *idx);
// x(m,dim) += a(m,dim), then y = rmsnorm(x) . w: one call where the backend has
// device_i.add_rmsnorm and no fault is set, else dev_add then dev_rmsnorm (each with its
// fault hooks). The same bits either way.
sc_status dev_add_rmsnorm(device *d, int m, int dim, const float *a, float *x, const float *w,
                          float eps, float *y);
// RoPE on q (n_tok, n_heads, head_dim) and k (n_tok, n_kv_heads, head_dim) at the batch's
// positions, then k and v into the cache: one call where the backend has
// device_i.rope_kv_store and no fault is set, else dev_rope, dev_rope, dev_kv_store.
sc_status dev_rope_kv_store(device *d, const dev_kv_batch *b, int n_heads, int n_kv_heads,
                            int head_dim, float theta, float *q, float *k, const float *v,
                            dev_kv_layer kv);
// What dev_graph_begin did (device_i.graph_begin).
enum { DEV_GRAPH_OFF, DEV_GRAPH_RECORDING, DEV_GRAPH_REPLAYED };
// Graphs of ops (device_i.graph_begin): *mode DEV_GRAPH_OFF, with SC_OK, when the backend has
// none or a fault is set on d (the ops then run one by one, through their fault hooks).
sc_status dev_graph_begin(device *d, uint64_t key, int rows, int *mode);
// Ends a recording dev_graph_begin started (SC_INVALID when none was started).
sc_status dev_graph_end(device *d, bool keep);

// --- fault hooks (faults/ drives them through the engine; every backend gets them because
// they live in the wrappers above). Thread-safe: set from any thread while ops run.
typedef enum dev_corrupt { DEV_CORRUPT_NONE, DEV_CORRUPT_NAN, DEV_CORRUPT_BITFLIP } dev_corrupt;

typedef struct dev_fault {
  bool lost;           // the device is gone: every call fails with SC_DEVICE ("device lost")
  bool hang;           // every op blocks until hang is cleared or dev_fault_release is called
  double slow_factor;  // > 1: each op takes factor x its own time (the wrapper sleeps the
                       // difference); <= 1: unchanged
  int oom_after;       // < 0: off; else allocations fail (SC_OOM) once this many more succeeded
  bool oom_persistent; // with oom_after: every later allocation fails too (else only one)
  dev_corrupt corrupt; // poisons the output of every matmul while set (one element per call)
} dev_fault;

// No fault: oom_after -1, the rest zero.
dev_fault dev_fault_none(void);
// Replaces d's fault state (a copy). Ops blocked by a hang continue once hang is false.
void device_set_fault(device *d, const dev_fault *f);
dev_fault device_get_fault(const device *d);
// Wakes every op blocked by a hang on d with SC_ABORTED, now and until the fault is replaced
// (the executor calls it when it aborts a step, so a hung rank's thread can be joined).
void device_fault_release(device *d);

// --- backends' open functions (registration point: kernels/device.c)
sc_status device_cpu_open(device **out, sc_error *err);
// Threads the CPU backend's BLAS may use in this process (global to the BLAS library); the
// int8 matmul of each cpu device opened afterwards uses as many: the caller and n - 1 threads
// of the device's own (started at its first product big enough to split).
void device_cpu_set_threads(int n);
int device_cpu_cores(void);
// The builds of the CPU backend's own vector kernels (the int8 matmul; BLAS picks its own).
typedef enum dev_cpu_isa { DEV_CPU_ISA_C, DEV_CPU_ISA_AVX2, DEV_CPU_ISA_AVX512 } dev_cpu_isa;
const char *device_cpu_isa_name(dev_cpu_isa isa); // "c", "avx2", "avx512"
// Caps the build those kernels use, process-wide, from the next call on (tests compare the
// portable one with the vector ones; benchmarks time each). Returns the build now in use: the
// best one this CPU runs that is not above cap (DEV_CPU_ISA_AVX512: the default, no cap).
dev_cpu_isa device_cpu_set_isa(dev_cpu_isa cap);
