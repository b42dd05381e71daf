// What the files of the cpu backend share, and nothing public (kernels/device.h is the public
// side): the device's context, the choice of vector build, the kernel thread pool and the ops
// that the vtable in cpu_device.c points to.
//
// The files: cpu_device.c (context, memory, vtable, open, process-wide settings), cpu_pool.c
// (the pool of a device's kernel threads), cpu_matmul.c (f32 and int8 weight-only matmul),
// cpu_ops.c (elementwise and per-row ops), cpu_attention.c (paged KV store and attention).
// See docs/design.md for the device seam.
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/device.h"

// --- vector builds
//
// The vector kernels are compiled with target attributes, so the backend needs no -m flags and
// runs on any x86-64 (elsewhere, the portable build only); which one runs is chosen at run time
// (cpu_isa_now).
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CPU_X86 1
#define CPU_AVX2 __attribute__((target("avx2,fma")))
#define CPU_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))
#define CPU_INLINE static inline __attribute__((always_inline))

// The lanes of a 16-lane step that hold data when `left` elements remain (all of them from 16).
static inline __mmask16 cpu_mask16(ptrdiff_t left) {
  return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}
#endif

// The build the kernels run now: the best this CPU can run, capped by device_cpu_set_isa.
// Process-wide; cheap enough to call per kernel call (cpu_device.c).
dev_cpu_isa cpu_isa_now(void);

// --- context

enum { CPU_ALIGN = 64 }; // bytes: alignment of every allocation and scratch (a cache line)

typedef struct cpu_pool cpu_pool;

typedef struct cpu_ctx {
  atomic_size_t used; // bytes currently allocated through this device (as requested)
  size_t total;       // physical RAM in bytes; one allocation never pushes used past it
  // int8 matmul (host memory outside the accounting above, like BLAS's own buffers):
  int threads;              // device_cpu_set_threads when opened (0: one per core)
  pthread_mutex_t pool_mu;  // guards pool and pool_tried
  cpu_pool *pool;           // threads - 1 kernel threads, started at the first product that
  bool pool_tried;          // wants them
  pthread_mutex_t scratch_mu; // held while a product uses scratch
  float *scratch;             // (scratch_floats) dequantized weight tiles
  size_t scratch_floats;
} cpu_ctx;

// --- the kernel thread pool (cpu_pool.c)

enum {
  // Pieces of a product per pool thread (claimed first come), for the int8 matmul and attention.
  CPU_CHUNKS_PER_THREAD = 4,
};

// The device's pool, started at its first call that wants one: as many workers as its
// threads setting allows beyond the caller. NULL for one thread (or none could start).
cpu_pool *cpu_pool_get(cpu_ctx *c);
// The pool's threads besides the caller (at least 1).
int cpu_pool_workers(const cpu_pool *p);
// Runs fn(arg, chunk, chunks) for every chunk < chunks on the calling thread and the pool's;
// returns when every chunk has run. Without a pool, or while another caller holds it, every
// chunk runs here.
void cpu_pool_run(cpu_pool *p, void (*fn)(void *arg, int chunk, int chunks), void *arg,
                  int chunks);
void cpu_pool_free(cpu_pool *p); // NULL is a no-op

// --- ops (the vtable's slots; the contracts are device_i's in kernels/device.h)

// cpu_matmul.c
sc_status cpu_matmul(void *ctx, int m, int n, int k, const float *x, const float *w, float beta,
                     float *y);
sc_status cpu_matmul_q8(void *ctx, int m, int n, int k, const float *x, const int8_t *q,
                        const float *scale, float beta, float *y);
// cpu_ops.c
sc_status cpu_rmsnorm(void *ctx, int m, int d, const float *x, const float *w, float eps,
                      float *y);
sc_status cpu_rope(void *ctx, int m, int n_heads, int head_dim, const int32_t *pos, float theta,
                   float *x);
sc_status cpu_swiglu(void *ctx, int m, int d, const float *gate, const float *up, float *out);
sc_status cpu_add(void *ctx, size_t n, const float *a, float *y);
sc_status cpu_embedding(void *ctx, int m, int d, const int32_t *ids, const float *table,
                        int row0, int rows, float *out);
sc_status cpu_argmax(void *ctx, int m, int n, const float *x, int32_t *idx, float *val);
// cpu_attention.c
sc_status cpu_kv_store(void *ctx, const dev_kv_batch *b, int n_kv_heads, int head_dim,
                       const float *k, const float *v, dev_kv_layer kv);
sc_status cpu_attention(void *ctx, const dev_kv_batch *b, int n_heads, int n_kv_heads,
                        int head_dim, float scale, const float *q, dev_kv_layer kv, float *out);
