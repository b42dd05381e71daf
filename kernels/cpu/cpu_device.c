// The cpu device backend: host memory with exact accounting, GEMMs through CBLAS (OpenBLAS),
// or, for 1 to 128 rows on a CPU with AVX-512, kernels of their own that stream the weights
// once; plain C loops for the other ops of a Llama decoder (RMSNorm, rotate-half RoPE, paged
// KV store, paged causal GQA attention with an online softmax (16-lane FMA on AVX-512),
// SwiGLU, add, vocab-sharded embedding), and the int8 weight-only matmul (its own kernels:
// AVX-512, AVX2 or portable C, chosen at run time; or dequantized tiles through CBLAS). The
// own kernels, and attention and SwiGLU on large batches, run on the calling thread and a
// small pool of threads per device; other ops on the calling thread; the CBLAS GEMMs may use
// BLAS threads. The device keeps one scratch buffer (dequantized int8 tiles, x transposed for
// the f32 outer-product kernel).
//
// What it leaves to others: the public wrappers and the backend registry (kernels/device.c),
// fault injection (faults/, at the wrapper layer), the KV block allocator and block tables
// (engine/kv_cache.c), and any parallelism across ranks (the engine runs one thread per rank;
// BLAS may add its own threads, see device_cpu_set_threads). Every op is synchronous, so
// synchronize is a no-op. Nothing here prints or exits; bad arguments give SC_INVALID.
//
// Thread safety: a cpu device keeps no state but its allocation counter (atomic), its kernels'
// thread pool and the int8 tile scratch (each held by one call at a time; a call that finds
// them taken works alone, with a scratch of its own), so several threads may call ops on
// different devices, or on the same one, at the same time, as long as their output buffers do
// not overlap.
#include <cblas.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/clock.h"
#include "kernels/device.h"
#include "kernels/spin.h"

// --- context and memory

struct cpu_pool;

typedef struct cpu_ctx {
  atomic_size_t used; // bytes currently allocated through this device (as requested)
  size_t total;       // physical RAM in bytes; one allocation never pushes used past it
  // int8 matmul (host memory outside the accounting above, like BLAS's own buffers):
  int threads;              // device_cpu_set_threads when opened (0: one per core)
  pthread_mutex_t pool_mu;  // guards pool and pool_tried
  struct cpu_pool *pool;    // threads - 1 kernel threads, started at the first product that
  bool pool_tried;          // wants them
  pthread_mutex_t scratch_mu; // held while a product uses scratch
  float *scratch;             // (scratch_floats) dequantized weight tiles
  size_t scratch_floats;
} cpu_ctx;

enum { CPU_ALIGN = 64 };
#define CPU_MAGIC 0x5348415244435055ull // "SHARDCPU": marks a live allocation

// Sits right before every pointer alloc returns, so free knows the size and the owner.
typedef struct cpu_hdr {
  void *raw;       // what calloc returned (to free)
  size_t bytes;    // size the caller asked for
  const void *own; // the cpu_ctx that allocated it
  uint64_t magic;  // CPU_MAGIC while live, 0 after free
} cpu_hdr;

static size_t cpu_physical_bytes(void) {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return SIZE_MAX;
  return (size_t)pages * (size_t)page;
}

// Reserves bytes in the counter unless used would pass total; false when it would.
static bool cpu_reserve(cpu_ctx *c, size_t bytes) {
  size_t cur = atomic_load(&c->used);
  do {
    if (bytes > c->total || cur > c->total - bytes) return false;
  } while (!atomic_compare_exchange_weak(&c->used, &cur, cur + bytes));
  return true;
}

// Zeroed, 64-byte aligned. calloc (not memset) so that big arenas are zero pages until used.
// On failure *out is NULL and the counter is unchanged.
static sc_status cpu_alloc(void *ctx, size_t bytes, void **out) {
  cpu_ctx *c = ctx;
  if (!out) return SC_INVALID;
  *out = NULL;
  const size_t pad = sizeof(cpu_hdr) + CPU_ALIGN;
  if (bytes > SIZE_MAX - pad) return SC_OOM;
  if (!cpu_reserve(c, bytes)) return SC_OOM;
  void *raw = calloc(1, bytes + pad);
  if (!raw) {
    atomic_fetch_sub(&c->used, bytes);
    return SC_OOM;
  }
  uintptr_t p = ((uintptr_t)raw + sizeof(cpu_hdr) + CPU_ALIGN - 1) & ~(uintptr_t)(CPU_ALIGN - 1);
  cpu_hdr *h = (cpu_hdr *)p - 1;
  *h = (cpu_hdr){.raw = raw, .bytes = bytes, .own = c, .magic = CPU_MAGIC};
  *out = (void *)p;
  return SC_OK;
}

// Freeing a pointer this device did not allocate (or twice) is a broken invariant: it would
// corrupt the accounting that tests and fault checks read, so it aborts.
static void cpu_free(void *ctx, void *ptr) {
  cpu_ctx *c = ctx;
  if (!ptr) return;
  cpu_hdr *h = (cpu_hdr *)ptr - 1;
  SC_ASSERT(h->magic == CPU_MAGIC && h->own == c);
  h->magic = 0;
  atomic_fetch_sub(&c->used, h->bytes);
  free(h->raw);
}

// Host memory on both sides, so every kind is a memmove (D2D may overlap).
static sc_status cpu_copy(void *ctx, void *dst, const void *src, size_t bytes,
                          dev_copy_kind kind) {
  if (kind != DEV_H2D && kind != DEV_D2H && kind != DEV_D2D) return SC_INVALID;
  if (bytes == 0) return SC_OK;
  if (!dst || !src) return SC_INVALID;
  memmove(dst, src, bytes);
  return SC_OK;
}

static sc_status cpu_mem_info(void *ctx, size_t *used, size_t *total) {
  cpu_ctx *c = ctx;
  if (used) *used = atomic_load(&c->used);
  if (total) *total = c->total;
  return SC_OK;
}

static sc_status cpu_synchronize(void *ctx) { return SC_OK; }

// --- matmul (CBLAS, or the small-M kernel below)

static bool f32_direct(cpu_ctx *c, int m, int n, int k, const float *x, const float *w,
                       float beta, float *y);

// y(m,n) = x(m,k) * w(n,k)^T + beta * y. x and y must not overlap. With beta == 0, y is
// written without being read (NaN in y does not leak through).
static sc_status cpu_matmul(void *ctx, int m, int n, int k, const float *x, const float *w,
                            float beta, float *y) {
  if (m < 0 || n < 0 || k < 0) return SC_INVALID;
  if (m == 0 || n == 0) return SC_OK;
  if (!y || (k > 0 && (!x || !w))) return SC_INVALID;
  if (k > 0 && f32_direct(ctx, m, n, k, x, w, beta, y)) return SC_OK;
  size_t ny = (size_t)m * (size_t)n;
  if (beta == 0.0f) memset(y, 0, ny * sizeof *y);
  if (k == 0) {
    for (size_t i = 0; i < ny; i++) y[i] *= beta;
    return SC_OK;
  }
  if (m == 1)
    cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, w, k, x, 1, beta, y, 1);
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, x, k, w, k, beta, y, n);
  return SC_OK;
}

// --- int8 weight-only matmul
//
// y(m,n) = x(m,k) * (scale(n) . q(n,k))^T + beta * y, q int8 in matmul's (out, in) layout.
//
// Up to Q8_DIRECT_M rows of x (decode, small batches; Q8_DIRECT_M_AVX512 with the AVX-512
// build, which beats the tiles up to 128 rows: 17.6-26 against 28-39 ms for every linear layer
// of a llama-small step at 48 rows, 48-70 against 59-85 at 128): the kernel reads q itself. It
// takes Q8_JB weight rows at a time, converts each 16 (or 8) int8 weights to f32 in registers
// once per block of up to Q8_MB rows of x, and multiplies them into Q8_JB x Q8_MB
// accumulators, so q streams from memory once per call, each x load serves Q8_JB weight rows,
// and the weight block (Q8_JB x k bytes) stays in L1 while the x blocks pass. The scale is
// applied once per output.
// Three builds of it, chosen at run time (q8_isa_now): AVX-512 F/BW/VL (16 lanes, masked
// tails), AVX2 + FMA (8 lanes, scalar tails) and portable C. The vector builds are compiled
// with target attributes, so the file needs no -m flags and runs on any x86-64 (elsewhere, the
// portable build only). The weight rows are split over the device's pool (below): as many
// threads as device_cpu_set_threads gives BLAS for the f32 matmul, the caller being one of them.
//
// More rows (prefill): tiles of weight rows are dequantized into an f32 scratch kept by the
// device and multiplied by CBLAS sgemm (so on BLAS's threads, like the f32 matmul). A tile is
// up to Q8_TILE_BYTES, a whole matrix for most of a small model's, since BLAS packs x once
// per call; writing each weight once as f32 and reading it back is small against the GEMM.
enum {
  Q8_JB = 4,                // weight rows per kernel block
  Q8_MB = 4,                // rows of x per kernel block (AVX2: 2, for its 16 registers)
  Q8_DIRECT_M = 32,         // rows of x up to which the kernel reads q directly
  Q8_DIRECT_M_AVX512 = 128, // the same for the AVX-512 build (measured: bench/bench_quant.c)
  Q8_PAR_MIN = 1 << 17,     // n * k weights from which the rows are split over the pool
  Q8_CHUNKS_PER_THREAD = 4, // pieces of a product per pool thread (claimed first come)
};
#define Q8_TILE_BYTES ((size_t)4 << 20) // f32 scratch per dequantized tile (at least 16 rows)

typedef struct q8_job {
  int m, n, k;
  const float *x;     // (m, k)
  const int8_t *q;    // (n, k); NULL: f32 weights in w (the small-M f32 matmul, below)
  const float *scale; // (n); NULL with q
  const float *w;     // (n, k) when q is NULL
  const float *xt;    // (k, 32): x transposed, rows past m zero (f32_outer_avx512)
  float beta;
  float *y;           // (m, n)
} q8_job;

// Writes out(rn, jn) (dot products of rows r.. of x with weight rows j..) to y, scaled.
static inline void q8_store(const q8_job *jb, int r, int rn, int j, int jn,
                            const float (*out)[Q8_JB]) {
  for (int a = 0; a < rn; a++) {
    float *yr = jb->y + (size_t)(r + a) * (size_t)jb->n + j;
    for (int b = 0; b < jn; b++) {
      float v = jb->scale ? out[a][b] * jb->scale[j + b] : out[a][b];
      yr[b] = jb->beta == 0.0f ? v : v + jb->beta * yr[b]; // beta 0: y is not read
    }
  }
}

// The weight rows j.. of a block, the last one repeated past jn (computed, not stored).
static inline void q8_rows(const q8_job *jb, int j, int jn, const int8_t *w[Q8_JB]) {
  for (int t = 0; t < Q8_JB; t++) w[t] = jb->q + (size_t)(j + (t < jn ? t : jn - 1)) * jb->k;
}

// Portable build: y(:, j0:j1). Each block of weight rows is converted to f32 Q8_KC columns at
// a time (once for all rows of x), then multiplied in float with 8 partial sums, which the
// compiler can vectorise for any x86-64 (SSE2).
enum { Q8_KC = 256, Q8_C_ROWS = 16 };
static void q8_cols_c(const q8_job *jb, int j0, int j1) {
  const int k = jb->k;
  float wf[Q8_JB][Q8_KC];     // the block's weights, Q8_KC columns of them, as f32
  float acc[Q8_C_ROWS][Q8_JB]; // dot products of Q8_C_ROWS rows of x with the block
  for (int j = j0; j < j1; j += Q8_JB) {
    int jn = j1 - j < Q8_JB ? j1 - j : Q8_JB;
    const int8_t *w[Q8_JB];
    q8_rows(jb, j, jn, w);
    for (int r = 0; r < jb->m; r += Q8_C_ROWS) {
      int rn = jb->m - r < Q8_C_ROWS ? jb->m - r : Q8_C_ROWS;
      memset(acc, 0, sizeof acc);
      for (int i0 = 0; i0 < k; i0 += Q8_KC) {
        int len = k - i0 < Q8_KC ? k - i0 : Q8_KC;
        for (int b = 0; b < jn; b++)
          for (int i = 0; i < len; i++) wf[b][i] = (float)w[b][i0 + i];
        for (int a = 0; a < rn; a++) {
          const float *xr = jb->x + (size_t)(r + a) * (size_t)k + i0;
          for (int b = 0; b < jn; b++) {
            float p[8] = {0};
            int i = 0;
            for (; i + 8 <= len; i += 8)
              for (int l = 0; l < 8; l++) p[l] += xr[i + l] * wf[b][i + l];
            float sum = ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7]));
            for (; i < len; i++) sum += xr[i] * wf[b][i];
            acc[a][b] += sum;
          }
        }
      }
      q8_store(jb, r, rn, j, jn, acc);
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define Q8_X86 1
#define Q8_AVX2 __attribute__((target("avx2,fma")))
#define Q8_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))
#define Q8_INLINE static inline __attribute__((always_inline))

// AVX2: rn (1..2, a constant after inlining) rows of x against Q8_JB weight rows.
Q8_AVX2 Q8_INLINE void q8_tile_avx2(const int rn, int k, const float *x,
                                    const int8_t *const w[Q8_JB], float out[Q8_MB][Q8_JB]) {
  __m256 acc[2][Q8_JB];
#pragma GCC unroll 2
  for (int a = 0; a < rn; a++) {
#pragma GCC unroll 4
    for (int b = 0; b < Q8_JB; b++) acc[a][b] = _mm256_setzero_ps();
  }
  int i = 0;
  for (; i + 8 <= k; i += 8) {
    __m256 wv[Q8_JB];
#pragma GCC unroll 4
    for (int b = 0; b < Q8_JB; b++)
      wv[b] = _mm256_cvtepi32_ps(
          _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(w[b] + i))));
#pragma GCC unroll 2
    for (int a = 0; a < rn; a++) {
      __m256 xv = _mm256_loadu_ps(x + (size_t)a * (size_t)k + i);
#pragma GCC unroll 4
      for (int b = 0; b < Q8_JB; b++) acc[a][b] = _mm256_fmadd_ps(xv, wv[b], acc[a][b]);
    }
  }
#pragma GCC unroll 2
  for (int a = 0; a < rn; a++) {
    const float *xr = x + (size_t)a * (size_t)k;
#pragma GCC unroll 4
    for (int b = 0; b < Q8_JB; b++) {
      __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc[a][b]), _mm256_extractf128_ps(acc[a][b], 1));
      h = _mm_add_ps(h, _mm_movehl_ps(h, h));
      h = _mm_add_ss(h, _mm_movehdup_ps(h));
      float s = _mm_cvtss_f32(h);
      for (int t = i; t < k; t++) s += xr[t] * (float)w[b][t];
      out[a][b] = s;
    }
  }
}

Q8_AVX2 static void q8_cols_avx2(const q8_job *jb, int j0, int j1) {
  const int k = jb->k;
  for (int j = j0; j < j1; j += Q8_JB) {
    int jn = j1 - j < Q8_JB ? j1 - j : Q8_JB;
    const int8_t *w[Q8_JB];
    q8_rows(jb, j, jn, w);
    for (int r = 0; r < jb->m; r += 2) {
      const float *xr = jb->x + (size_t)r * (size_t)k;
      float out[Q8_MB][Q8_JB];
      int rn = jb->m - r < 2 ? 1 : 2;
      if (rn == 1)
        q8_tile_avx2(1, k, xr, w, out);
      else
        q8_tile_avx2(2, k, xr, w, out);
      q8_store(jb, r, rn, j, jn, out);
    }
  }
}

// What q8_tile_avx512 prefetches: per cache lines from `at` at each full column step, up to
// `end` (the block of weight rows after the one being multiplied).
typedef struct q8_prefetch {
  uintptr_t at, end; // addresses (held as integers: `at` runs past the weights at the end)
  int per;
} q8_prefetch;

// The lanes of a 16-lane step that hold data when `left` elements remain (all of them from 16).
static inline __mmask16 q8_mask16(ptrdiff_t left) {
  return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

// The sums of 16 vectors at once: lane l of the result is the sum of the lanes of v[(l % 4) *
// 4 + l / 4] (a transposing tree of 15 adds and 30 shuffles, where 16 separate reductions take
// about 5 times the instructions; at k = 512 those were a fifth of a 4 x 4 block's work).
Q8_AVX512 Q8_INLINE __m512 q8_sum16_avx512(const __m512 v[16]) {
  __m512 s8[8], s4[4], s2[2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; i++) // each 256-bit half of a pair: 16 vectors -> 8
    s8[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                          _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++) // 128-bit quarters: 8 -> 4
    s4[i] = _mm512_add_ps(_mm512_shuffle_f32x4(s8[2 * i], s8[2 * i + 1], 0x88),
                          _mm512_shuffle_f32x4(s8[2 * i], s8[2 * i + 1], 0xDD));
#pragma GCC unroll 2
  for (int i = 0; i < 2; i++) // pairs of floats within each quarter: 4 -> 2
    s2[i] = _mm512_add_ps(_mm512_shuffle_ps(s4[2 * i], s4[2 * i + 1], 0x44),
                          _mm512_shuffle_ps(s4[2 * i], s4[2 * i + 1], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_ps(s2[0], s2[1], 0x88), // single floats: 2 -> 1
                       _mm512_shuffle_ps(s2[0], s2[1], 0xDD));
}

// 16 weights of row w from column i, as f32: all 16 (full, a constant after inlining), or the
// ones in mk.
Q8_AVX512 Q8_INLINE __m512 q8_load_avx512(const bool i8, const bool full, const void *w, int i,
                                          __mmask16 mk) {
  if (i8) {
    const int8_t *p = (const int8_t *)w + i;
    __m128i q = full ? _mm_loadu_si128((const __m128i *)p) : _mm_maskz_loadu_epi8(mk, p);
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
  }
  return full ? _mm512_loadu_ps((const float *)w + i)
              : _mm512_maskz_loadu_ps(mk, (const float *)w + i);
}

// One column step of q8_tile_avx512: acc += x(rn rows, i..i+16) . w(Q8_JB rows, i..i+16)^T.
Q8_AVX512 Q8_INLINE void q8_step_avx512(const int rn, const bool i8, const bool full, int k,
                                        const float *x, const void *const w[Q8_JB], int i,
                                        __mmask16 mk, __m512 acc[Q8_MB * Q8_JB]) {
  __m512 wv[Q8_JB];
#pragma GCC unroll 4
  for (int b = 0; b < Q8_JB; b++) wv[b] = q8_load_avx512(i8, full, w[b], i, mk);
#pragma GCC unroll 4
  for (int a = 0; a < rn; a++) {
    const float *xa = x + (size_t)a * (size_t)k + i;
    __m512 xv = full ? _mm512_loadu_ps(xa) : _mm512_maskz_loadu_ps(mk, xa);
#pragma GCC unroll 4
    for (int b = 0; b < Q8_JB; b++)
      acc[a * Q8_JB + b] = _mm512_fmadd_ps(xv, wv[b], acc[a * Q8_JB + b]);
  }
}

// AVX-512: rn (1..Q8_MB, a constant after inlining) rows of x against Q8_JB weight rows, int8
// (i8) or f32 (also a constant after inlining). The columns run 16 at a time with full loads,
// then the last k % 16 with masked ones.
Q8_AVX512 Q8_INLINE void q8_tile_avx512(const int rn, const bool i8, int k, const float *x,
                                        const void *const w[Q8_JB], const q8_prefetch *pf,
                                        float out[Q8_MB][Q8_JB]) {
  _Static_assert(Q8_MB * Q8_JB == 16, "a full block's sums are one q8_sum16_avx512");
  __m512 acc[Q8_MB * Q8_JB];
#pragma GCC unroll 16
  for (int t = 0; t < rn * Q8_JB; t++) acc[t] = _mm512_setzero_ps();
  const int k16 = k & ~15;
  uintptr_t p = pf->at;
  for (int i = 0; i < k16; i += 16) {
    for (int t = 0; t < pf->per; t++, p += 64)
      if (p < pf->end) _mm_prefetch((const char *)p, _MM_HINT_T0);
    q8_step_avx512(rn, i8, true, k, x, w, i, 0, acc);
  }
  if (k16 < k)
    q8_step_avx512(rn, i8, false, k, x, w, k16, q8_mask16(k - k16), acc);
  if (rn == Q8_MB) {
    float o[16];
    _mm512_storeu_ps(o, q8_sum16_avx512(acc));
#pragma GCC unroll 4
    for (int a = 0; a < Q8_MB; a++) {
#pragma GCC unroll 4
      for (int b = 0; b < Q8_JB; b++) out[a][b] = o[b * 4 + a];
    }
    return;
  }
#pragma GCC unroll 4
  for (int a = 0; a < rn; a++) {
#pragma GCC unroll 4
    for (int b = 0; b < Q8_JB; b++) out[a][b] = _mm512_reduce_add_ps(acc[a * Q8_JB + b]);
  }
}

// One block of rows of x, with rn and i8 made constants for q8_tile_avx512.
#define Q8_TILE_CASES(I8)                                                                       \
  switch (rn) {                                                                                 \
  case 1: q8_tile_avx512(1, I8, k, xr, w, &pf, out); break;                                     \
  case 2: q8_tile_avx512(2, I8, k, xr, w, &pf, out); break;                                     \
  case 3: q8_tile_avx512(3, I8, k, xr, w, &pf, out); break;                                     \
  default: q8_tile_avx512(4, I8, k, xr, w, &pf, out); break;                                    \
  }

// int8 weights (jb->q) or f32 ones (jb->w). While a block of weight rows is multiplied, the
// next block (the rows that follow it in memory) is prefetched, spread evenly over the block's
// column steps: the block is read from memory only at its first block of rows of x, and
// without this that pass waits on memory, which the hardware prefetcher does not run far
// enough ahead of (one 16 MB matrix on one thread: 54 -> 70-76 GFLOP/s at 32 rows, 28 -> 52-62
// at 8, 19 -> 54 at 4).
Q8_AVX512 static void q8_cols_avx512(const q8_job *jb, int j0, int j1) {
  const int k = jb->k;
  const size_t wbytes = jb->q ? 1 : sizeof(float), row_bytes = (size_t)k * wbytes;
  const uintptr_t base = jb->q ? (uintptr_t)jb->q : (uintptr_t)jb->w;
  const size_t steps = (size_t)k / 16, rblocks = (size_t)(jb->m + Q8_MB - 1) / Q8_MB;
  const size_t lines = (Q8_JB * row_bytes + 63) / 64; // cache lines of one block of rows
  const int per = steps ? (int)((lines + steps * rblocks - 1) / (steps * rblocks)) : 0;
  for (int j = j0; j < j1; j += Q8_JB) {
    q8_prefetch pf = {.per = per, .at = base + (size_t)(j + Q8_JB) * row_bytes};
    pf.end = j + 2 * Q8_JB < j1 ? pf.at + Q8_JB * row_bytes : base + (size_t)j1 * row_bytes;
    int jn = j1 - j < Q8_JB ? j1 - j : Q8_JB;
    const void *w[Q8_JB]; // the last row repeated past jn (computed, not stored)
    for (int t = 0; t < Q8_JB; t++) {
      size_t row = (size_t)(j + (t < jn ? t : jn - 1)) * (size_t)k;
      w[t] = jb->q ? (const void *)(jb->q + row) : (const void *)(jb->w + row);
    }
    for (int r = 0; r < jb->m; r += Q8_MB) {
      const float *xr = jb->x + (size_t)r * (size_t)k;
      float out[Q8_MB][Q8_JB];
      int rn = jb->m - r < Q8_MB ? jb->m - r : Q8_MB;
      if (jb->q) {
        Q8_TILE_CASES(true)
      } else {
        Q8_TILE_CASES(false)
      }
      pf.at += (size_t)per * steps * 64;
      q8_store(jb, r, rn, j, jn, out);
    }
  }
}
#undef Q8_TILE_CASES

// f32 weights, mr = 1 or 2 rows of x (batch-1 and batch-2 decode; a constant after inlining):
// y(0:mr, j0:j1). Each weight row is read to its end before the next, 64 columns at a time
// into four independent sums of 16 lanes (two per row of x at 2 rows), so the weights form one
// sequential stream, which the hardware prefetcher follows best: on one thread of the machine
// in docs/benchmarks.md one row reads about 15 GB/s where the 4-row blocking above and
// OpenBLAS's sgemv read 10-12 (a llama-small rank's weights, bench/bench_quant.c). At 2 rows
// the blocking fills half its block; every linear layer of a llama-small step, blocking against
// this, four interleaved runs: 9.3-11.0 -> 7.3-9.2 ms on one thread, 4.5-6.3 -> 4.4-5.1 ms on
// two. From 3 rows the blocking is as fast as this way of reading.
Q8_AVX512 Q8_INLINE void f32_rowwise(const int mr, const q8_job *jb, int j0, int j1) {
  const int k = jb->k, per = 4 / mr; // sums per row of x
  for (int j = j0; j < j1; j++) {
    const float *w = jb->w + (size_t)j * (size_t)k;
    __m512 acc[2][4];
#pragma GCC unroll 2
    for (int a = 0; a < mr; a++)
#pragma GCC unroll 4
      for (int u = 0; u < per; u++) acc[a][u] = _mm512_setzero_ps();
    int i = 0;
    for (; i + 64 / mr <= k; i += 64 / mr) {
#pragma GCC unroll 4
      for (int u = 0; u < per; u++) {
        __m512 wv = _mm512_loadu_ps(w + i + 16 * u);
#pragma GCC unroll 2
        for (int a = 0; a < mr; a++)
          acc[a][u] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(jb->x + (size_t)a * k + i + 16 * u),
                                      acc[a][u]);
      }
    }
    for (; i < k; i += 16) {
      __mmask16 mk = q8_mask16(k - i);
      __m512 wv = _mm512_maskz_loadu_ps(mk, w + i);
#pragma GCC unroll 2
      for (int a = 0; a < mr; a++)
        acc[a][0] = _mm512_fmadd_ps(
            wv, _mm512_maskz_loadu_ps(mk, jb->x + (size_t)a * k + i), acc[a][0]);
    }
#pragma GCC unroll 2
    for (int a = 0; a < mr; a++) {
      __m512 sum = per == 4 ? _mm512_add_ps(_mm512_add_ps(acc[a][0], acc[a][1]),
                                            _mm512_add_ps(acc[a][2], acc[a][3]))
                            : _mm512_add_ps(acc[a][0], acc[a][1]);
      float v = _mm512_reduce_add_ps(sum), *y = jb->y + (size_t)a * (size_t)jb->n + j;
      *y = jb->beta == 0.0f ? v : v + jb->beta * *y; // beta 0: y is not read
    }
  }
}

Q8_AVX512 static void f32_gemv_avx512(const q8_job *jb, int j0, int j1) {
  f32_rowwise(1, jb, j0, j1);
}

Q8_AVX512 static void f32_rows2_avx512(const q8_job *jb, int j0, int j1) {
  f32_rowwise(2, jb, j0, j1);
}

// f32 weights, F32_OUT_MIN_M to F32_OUT_LANES rows of x (batched decode): y(:, j0:j1) as
// outer products. x comes transposed (jb->xt: column i of x is F32_OUT_LANES floats, two
// vectors, rows past m zero), so each weight is broadcast once and multiplied into both
// vectors of rows: 2 x F32_OUT_JB accumulators, summed along k with no reduction at the end.
// Against the dot-product blocking above, which reloads x for every 4 weight rows and reduces
// 16 sums per block, this does two FMAs per broadcast and nothing else, but always for 32 rows.
// Every linear layer of a llama-small step on one thread of the machine in docs/benchmarks.md:
// 18.8-21.5 ms at 20 to 32 rows (98-100 GFLOP/s at 32, of 115 measured with independent
// FMAs), where the blocking above grows about 0.8 ms a row (18.4-19.8 at 20, 20.4-20.5 at
// 24, 26.1-27.3 at 32): it wins from about 25 rows. The next block of weight rows is prefetched
// into L1, one line per weight row per 16 columns (without it, 24.5 ms at 32 rows: the 12 row
// streams outrun the hardware prefetcher).
enum {
  F32_OUT_MIN_M = 25, // rows of x from which f32_outer_avx512 runs
  F32_OUT_LANES = 32, // to this many (two vectors)
  F32_OUT_JB = 12,    // weight rows per block (24 accumulators)
  // Pieces per pool thread: with the 4 of the blocking above, the last piece of a 1536-row
  // product took about 80 us at 32 rows while the other thread waited (2 threads, a llama-small
  // step at batch 32: 14.3-16.8 -> 13.3-16.3 ms, four interleaved pairs). A block prefetches the
  // next rows of the matrix even past its piece: the same thread most often takes the next piece.
  F32_OUT_CHUNKS_PER_THREAD = 32,
};

Q8_AVX512 Q8_INLINE void f32_outer_step(const q8_job *jb, const float *const w[F32_OUT_JB],
                                        int i, __m512 acc[F32_OUT_JB][2]) {
  const float *xc = jb->xt + (size_t)i * F32_OUT_LANES;
  __m512 x0 = _mm512_load_ps(xc), x1 = _mm512_load_ps(xc + 16);
#pragma GCC unroll 12
  for (int b = 0; b < F32_OUT_JB; b++) {
    __m512 wb = _mm512_set1_ps(w[b][i]);
    acc[b][0] = _mm512_fmadd_ps(x0, wb, acc[b][0]);
    acc[b][1] = _mm512_fmadd_ps(x1, wb, acc[b][1]);
  }
}

// Weight rows j..j + jn (jn <= F32_OUT_JB; the last one repeated past jn, computed, not
// stored), prefetching the lines from pf to pf_end (addresses as integers: pf may run past the
// weights, where nothing is prefetched).
Q8_AVX512 static void f32_outer_block(const q8_job *jb, int j, int jn, uintptr_t pf,
                                      uintptr_t pf_end) {
  const int k = jb->k;
  const float *w[F32_OUT_JB];
  for (int b = 0; b < F32_OUT_JB; b++)
    w[b] = jb->w + (size_t)(j + (b < jn ? b : jn - 1)) * (size_t)k;
  __m512 acc[F32_OUT_JB][2];
  for (int b = 0; b < F32_OUT_JB; b++) acc[b][0] = acc[b][1] = _mm512_setzero_ps();
  int i = 0;
  for (; i + 16 <= k; i += 16) {
    for (int t = 0; t < F32_OUT_JB; t++, pf += 64)
      if (pf < pf_end) _mm_prefetch((const char *)pf, _MM_HINT_T0);
#pragma GCC unroll 16
    for (int ii = i; ii < i + 16; ii++) f32_outer_step(jb, w, ii, acc);
  }
  for (; i < k; i++) f32_outer_step(jb, w, i, acc);
  float o[F32_OUT_JB][F32_OUT_LANES] __attribute__((aligned(64)));
  for (int b = 0; b < F32_OUT_JB; b++) {
    _mm512_store_ps(o[b], acc[b][0]);
    _mm512_store_ps(o[b] + 16, acc[b][1]);
  }
  for (int r = 0; r < jb->m; r++) {
    float *yr = jb->y + (size_t)r * (size_t)jb->n + j;
    for (int b = 0; b < jn; b++)
      yr[b] = jb->beta == 0.0f ? o[b][r] : o[b][r] + jb->beta * yr[b]; // beta 0: y is not read
  }
}

// v[c] = column c of the 16 x 16 block whose rows are v[0..15] (64 shuffles: unpacks pair the
// rows, shuffle_ps makes 4 x 4 blocks within each 128-bit lane, two rounds of shuffle_f32x4
// transpose the 4 x 4 grid of lanes).
Q8_AVX512 Q8_INLINE void f32_transpose16(__m512 v[16]) {
  __m512 t[16], u[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++) { // u[4i + c], lane l: column 4l + c of rows 4i..4i+3
    u[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; c++) {
    __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44);
    __m512 v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);
    __m512 v2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
    __m512 v3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
    v[c] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    v[4 + c] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
    v[8 + c] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    v[12 + c] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
  }
}

// xt(k, F32_OUT_LANES) = x(m, k) transposed, rows m.. zero, 16 x 16 blocks at a time (scalar
// loops took 1.5 ns per float, about 1.8 ms of a llama-small step at 32 rows; this, 0.11).
Q8_AVX512 static void f32_out_pack(int m, int k, const float *x, float *xt) {
  for (int r0 = 0; r0 < F32_OUT_LANES; r0 += 16)
    for (int i = 0; i < k; i += 16) {
      __mmask16 mk = q8_mask16(k - i);
      __m512 v[16];
#pragma GCC unroll 16
      for (int j = 0; j < 16; j++)
        v[j] = r0 + j < m ? _mm512_maskz_loadu_ps(mk, x + (size_t)(r0 + j) * (size_t)k + i)
                          : _mm512_setzero_ps();
      f32_transpose16(v);
      int cols = k - i < 16 ? k - i : 16;
      for (int c = 0; c < cols; c++)
        _mm512_store_ps(xt + (size_t)(i + c) * F32_OUT_LANES + r0, v[c]);
    }
}

// The weight rows [j0, j1) in blocks of F32_OUT_JB, each prefetching the next rows (to n).
Q8_AVX512 static void f32_outer_avx512(const q8_job *jb, int j0, int j1) {
  const size_t row_bytes = (size_t)jb->k * sizeof(float);
  const uintptr_t base = (uintptr_t)jb->w;
  for (int j = j0; j < j1; j += F32_OUT_JB) {
    int jn = j1 - j < F32_OUT_JB ? j1 - j : F32_OUT_JB;
    uintptr_t pf = base + (size_t)(j + F32_OUT_JB) * row_bytes;
    int end = j + 2 * F32_OUT_JB < jb->n ? j + 2 * F32_OUT_JB : jb->n;
    f32_outer_block(jb, j, jn, pf, base + (size_t)end * row_bytes);
  }
}
#endif

// --- which build runs (process-wide)

static atomic_int q8_isa_cap = DEV_CPU_ISA_AVX512; // device_cpu_set_isa

// The best build this CPU (and its OS: the cpuid checks include XGETBV) can run.
static dev_cpu_isa q8_isa_best(void) {
#ifdef Q8_X86
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma"))
    return DEV_CPU_ISA_AVX512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return DEV_CPU_ISA_AVX2;
#endif
  return DEV_CPU_ISA_C;
}

static dev_cpu_isa q8_isa_now(void) {
  static atomic_int best = -1; // computed once; every thread computes the same value
  int b = atomic_load_explicit(&best, memory_order_relaxed);
  if (b < 0) {
    b = (int)q8_isa_best();
    atomic_store_explicit(&best, b, memory_order_relaxed);
  }
  int cap = atomic_load_explicit(&q8_isa_cap, memory_order_relaxed);
  return (dev_cpu_isa)(b < cap ? b : cap);
}

dev_cpu_isa device_cpu_set_isa(dev_cpu_isa cap) {
  if (cap < DEV_CPU_ISA_C) cap = DEV_CPU_ISA_C;
  if (cap > DEV_CPU_ISA_AVX512) cap = DEV_CPU_ISA_AVX512;
  atomic_store(&q8_isa_cap, (int)cap);
  return q8_isa_now();
}

const char *device_cpu_isa_name(dev_cpu_isa isa) {
  switch (isa) {
  case DEV_CPU_ISA_C: return "c";
  case DEV_CPU_ISA_AVX2: return "avx2";
  case DEV_CPU_ISA_AVX512: return "avx512";
  }
  return "unknown";
}

typedef void (*q8_cols_fn)(const q8_job *jb, int j0, int j1);

static q8_cols_fn q8_cols(void) {
#ifdef Q8_X86
  switch (q8_isa_now()) {
  case DEV_CPU_ISA_AVX512: return q8_cols_avx512;
  case DEV_CPU_ISA_AVX2: return q8_cols_avx2;
  case DEV_CPU_ISA_C: break;
  }
#endif
  return q8_cols_c;
}

// --- the pool of a device's kernel threads
//
// n_workers threads that help the calling thread through a job of n chunks, each chunk claimed
// by whichever thread gets to it first. A job is published by bumping gen (release), which
// also carries the chunk count; a chunk is free while its state holds the job's tag and is
// claimed by one compare-and-swap, so a worker reads the job only for a chunk it holds (the
// caller replaces the job only once every chunk is done). The caller claims chunks too, and
// waits only for chunks a worker is running: a worker that the OS has not scheduled (a busy or
// oversubscribed machine) costs nothing but its share of the work. Workers spin on gen for up
// to POOL_SPIN_NS after their last chunk (the ops between two matmuls of a step are shorter),
// then sleep on wake; every spin-wait here pauses, then yields the core after a few turns. One
// job at a time: a call that finds the pool busy runs its job alone.

#define POOL_SPIN_NS 200000ull // 0.2 ms
enum { POOL_MAX_CHUNKS = 64 };

typedef struct cpu_pool {
  int n_workers;
  pthread_t *threads;  // (n_workers)
  pthread_mutex_t mu;  // the sleeps on wake and done
  pthread_cond_t wake; // workers sleep here between jobs
  pthread_cond_t done; // the caller sleeps here until remaining is 0
  atomic_ullong gen;   // (job number << 8) | chunks; bumped once per job and once at stop
  atomic_ullong state[POOL_MAX_CHUNKS]; // chunk c of job j: 2j (free) or 2j + 1 (claimed)
  atomic_int remaining; // chunks of the current job not finished
  atomic_flag busy;     // a caller holds the pool
  atomic_bool stop;     // set before the last bump of gen
  void (*fn)(void *arg, int chunk, int chunks); // the job: written before gen is bumped
  void *arg;
} cpu_pool;

typedef struct pool_worker_arg {
  cpu_pool *p;
  int index, of; // this worker's number, 1..of - 1 (the caller is 0), and the pool's threads
} pool_worker_arg;

// Claims and runs the free chunks of job word g, starting at chunk `first`; the thread that
// finishes the last chunk wakes a caller asleep on done.
static void pool_work(cpu_pool *p, unsigned long long g, int first) {
  unsigned long long tag = (g >> 8) * 2u;
  int chunks = (int)(g & 255u);
  for (int i = 0; i < chunks; i++) {
    int c = (first + i) % chunks;
    unsigned long long want = tag;
    if (!atomic_compare_exchange_strong_explicit(&p->state[c], &want, tag + 1u,
                                                 memory_order_acq_rel, memory_order_relaxed))
      continue;
    p->fn(p->arg, c, chunks);
    if (atomic_fetch_sub_explicit(&p->remaining, 1, memory_order_acq_rel) == 1) {
      pthread_mutex_lock(&p->mu);
      pthread_cond_broadcast(&p->done);
      pthread_mutex_unlock(&p->mu);
    }
  }
}

static void *pool_main(void *arg) {
  pool_worker_arg *wa = arg;
  cpu_pool *p = wa->p;
  // gen starts at 0: a job or a stop published before this thread first ran is not missed
  unsigned long long seen = 0;
  for (;;) {
    unsigned long long g = sc_spin_while_equal(&p->gen, seen, POOL_SPIN_NS, NULL, NULL);
    if (g == seen) {
      pthread_mutex_lock(&p->mu);
      while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
             !atomic_load(&p->stop))
        pthread_cond_wait(&p->wake, &p->mu);
      pthread_mutex_unlock(&p->mu);
    }
    if (atomic_load(&p->stop)) break;
    seen = g;
    pool_work(p, g, (int)(g & 255u) * wa->index / wa->of); // its share first
  }
  free(wa);
  return NULL;
}

static void pool_free(cpu_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->stop, true);
  atomic_fetch_add_explicit(&p->gen, 256u, memory_order_release);
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->n_workers; i++) pthread_join(p->threads[i], NULL);
  pthread_cond_destroy(&p->done);
  pthread_cond_destroy(&p->wake);
  pthread_mutex_destroy(&p->mu);
  free(p->threads);
  free(p);
}

// A pool of n_workers threads (fewer when only some could be started), or NULL when none
// could be (the caller then works alone).
static cpu_pool *pool_new(int n_workers) {
  if (n_workers < 1) return NULL;
  cpu_pool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->threads = calloc((size_t)n_workers, sizeof *p->threads);
  if (!p->threads || pthread_mutex_init(&p->mu, NULL)) {
    free(p->threads);
    free(p);
    return NULL;
  }
  pthread_cond_init(&p->wake, NULL);
  pthread_cond_init(&p->done, NULL);
  atomic_init(&p->gen, 0);
  for (int c = 0; c < POOL_MAX_CHUNKS; c++) atomic_init(&p->state[c], 1ull); // claimed by none
  atomic_init(&p->remaining, 0);
  atomic_init(&p->stop, false);
  atomic_flag_clear(&p->busy);
  for (int i = 0; i < n_workers; i++) {
    pool_worker_arg *wa = malloc(sizeof *wa);
    if (!wa) break;
    *wa = (pool_worker_arg){p, i + 1, n_workers + 1};
    if (pthread_create(&p->threads[i], NULL, pool_main, wa) != 0) {
      free(wa);
      break;
    }
    p->n_workers++;
  }
  if (p->n_workers == 0) {
    pool_free(p);
    return NULL;
  }
  return p;
}

// Runs fn(arg, chunk, chunks) for every chunk < chunks (at most POOL_MAX_CHUNKS) on the
// calling thread and the pool's; returns when every chunk has run. Without a pool, or while
// another caller holds it, every chunk runs here.
static void pool_run(cpu_pool *p, void (*fn)(void *arg, int chunk, int chunks), void *arg,
                     int chunks) {
  if (chunks > POOL_MAX_CHUNKS) chunks = POOL_MAX_CHUNKS;
  if (!p || chunks <= 1 || atomic_flag_test_and_set_explicit(&p->busy, memory_order_acquire)) {
    for (int c = 0; c < chunks; c++) fn(arg, c, chunks);
    return;
  }
  p->fn = fn;
  p->arg = arg;
  unsigned long long g = (atomic_load_explicit(&p->gen, memory_order_relaxed) & ~255ull) + 256u;
  g |= (unsigned long long)chunks;
  for (int c = 0; c < chunks; c++)
    atomic_store_explicit(&p->state[c], (g >> 8) * 2u, memory_order_relaxed);
  atomic_store_explicit(&p->remaining, chunks, memory_order_relaxed);
  atomic_store_explicit(&p->gen, g, memory_order_release);
  pthread_mutex_lock(&p->mu); // wakes the workers that went to sleep (see pool_main)
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  pool_work(p, g, 0);
  uint64_t t0 = 0; // the chunks left are running on workers: spin, then sleep
  for (unsigned it = 0; atomic_load_explicit(&p->remaining, memory_order_acquire) > 0; it++) {
    if ((it & 255u) == 255u) {
      uint64_t now = sc_monotonic_ns();
      if (!t0) t0 = now;
      else if (now - t0 > POOL_SPIN_NS) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load_explicit(&p->remaining, memory_order_acquire) > 0)
          pthread_cond_wait(&p->done, &p->mu);
        pthread_mutex_unlock(&p->mu);
        break;
      }
    }
    sc_spin_pause(it);
  }
  atomic_flag_clear_explicit(&p->busy, memory_order_release);
}

// --- the op

static atomic_int cpu_threads; // device_cpu_set_threads; 0: one per core

// The device's pool, started at its first call that wants one: as many workers as its
// threads setting allows beyond the caller. NULL for one thread (or none could start).
static cpu_pool *cpu_pool_get(cpu_ctx *c) {
  pthread_mutex_lock(&c->pool_mu);
  if (!c->pool_tried) {
    int t = c->threads > 0 ? c->threads : device_cpu_cores();
    c->pool = pool_new(t - 1);
    c->pool_tried = true;
  }
  cpu_pool *p = c->pool;
  pthread_mutex_unlock(&c->pool_mu);
  return p;
}

typedef struct q8_par {
  const q8_job *jb;
  q8_cols_fn cols;
  int rows; // weight rows per block of cols (chunks hold whole blocks)
} q8_par;

// Chunk `chunk` of `chunks`: a contiguous range of blocks of weight rows.
static void q8_chunk(void *arg, int chunk, int chunks) {
  const q8_par *pa = arg;
  int blocks = (pa->jb->n + pa->rows - 1) / pa->rows;
  int b0 = (int)((int64_t)blocks * chunk / chunks);
  int b1 = (int)((int64_t)blocks * (chunk + 1) / chunks);
  int j0 = b0 * pa->rows, j1 = b1 * pa->rows < pa->jb->n ? b1 * pa->rows : pa->jb->n;
  if (j0 < j1) pa->cols(pa->jb, j0, j1);
}

// The product by `cols`, which takes weight rows in blocks of `rows`, split over the device's
// pool when it is large, in up to `per_thread` chunks per pool thread.
static void q8_split(cpu_ctx *c, const q8_job *jb, q8_cols_fn cols, int rows, int per_thread) {
  q8_par pa = {jb, cols, rows};
  int blocks = (jb->n + rows - 1) / rows;
  cpu_pool *p =
      (size_t)jb->n * (size_t)jb->k >= Q8_PAR_MIN && blocks > 1 ? cpu_pool_get(c) : NULL;
  int chunks = p ? per_thread * (p->n_workers + 1) : 1;
  pool_run(p, q8_chunk, &pa, chunks < blocks ? chunks : blocks);
}

// Scratch floats for one call (64-byte aligned): the device's while nobody else uses it, else
// a temporary one; scratch_put gives it back.
typedef struct cpu_scratch {
  float *own;  // a temporary buffer to free, or NULL
  bool locked; // the device's scratch is held
} cpu_scratch;

static float *scratch_get(cpu_ctx *c, size_t floats, cpu_scratch *sc) {
  size_t bytes = (floats * sizeof(float) + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
  sc->own = NULL;
  sc->locked = pthread_mutex_trylock(&c->scratch_mu) == 0;
  if (sc->locked && c->scratch_floats < floats) {
    free(c->scratch);
    c->scratch = aligned_alloc(CPU_ALIGN, bytes);
    c->scratch_floats = c->scratch ? floats : 0;
  }
  if (sc->locked && c->scratch) return c->scratch;
  float *p = sc->own = aligned_alloc(CPU_ALIGN, bytes);
  if (!p && sc->locked) {
    pthread_mutex_unlock(&c->scratch_mu);
    sc->locked = false;
  }
  return p;
}

static void scratch_put(cpu_ctx *c, cpu_scratch *sc) {
  free(sc->own);
  if (sc->locked) pthread_mutex_unlock(&c->scratch_mu);
}

// out(nt, k) = scale . q for weight rows [j0, j0 + nt).
static void q8_dequant(const q8_job *jb, int j0, int nt, float *out) {
  const size_t k = (size_t)jb->k;
  for (size_t j = 0; j < (size_t)nt; j++) {
    const int8_t *qr = jb->q + ((size_t)j0 + j) * k;
    float s = jb->scale[(size_t)j0 + j], *o = out + j * k;
    for (size_t i = 0; i < k; i++) o[i] = s * (float)qr[i];
  }
}

// Many rows: dequantized tiles through sgemm. The scratch is the device's while nobody else
// uses it, else a temporary one.
static sc_status q8_gemm_tiles(cpu_ctx *c, const q8_job *jb) {
  const size_t k = (size_t)jb->k;
  size_t rows = Q8_TILE_BYTES / (k * sizeof(float));
  if (rows < 16) rows = 16;
  if (rows > (size_t)jb->n) rows = (size_t)jb->n;
  cpu_scratch sc;
  float *tile = scratch_get(c, rows * k, &sc);
  if (!tile) return SC_OOM;
  for (int j0 = 0; j0 < jb->n; j0 += (int)rows) {
    int nt = jb->n - j0 < (int)rows ? jb->n - j0 : (int)rows;
    q8_dequant(jb, j0, nt, tile);
    if (jb->beta == 0.0f)
      for (size_t r = 0; r < (size_t)jb->m; r++)
        memset(jb->y + r * (size_t)jb->n + j0, 0, (size_t)nt * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, jb->m, nt, jb->k, 1.0f, jb->x, jb->k,
                tile, jb->k, jb->beta, jb->y + j0, jb->n);
  }
  scratch_put(c, &sc);
  return SC_OK;
}

// x and y must not overlap. With beta == 0, y is written without being read.
static sc_status cpu_matmul_q8(void *ctx, int m, int n, int k, const float *x, const int8_t *q,
                               const float *scale, float beta, float *y) {
  cpu_ctx *c = ctx;
  if (m < 0 || n < 0 || k < 0) return SC_INVALID;
  if (m == 0 || n == 0) return SC_OK;
  if (!y || !scale || (k > 0 && (!x || !q))) return SC_INVALID;
  q8_job jb = {.m = m, .n = n, .k = k, .x = x, .q = q, .scale = scale, .beta = beta, .y = y};
  if (k == 0) { // no terms: y = beta * y (0 when beta is 0)
    for (size_t i = 0; i < (size_t)m * (size_t)n; i++) y[i] = beta == 0.0f ? 0.0f : beta * y[i];
    return SC_OK;
  }
  if (m > (q8_isa_now() == DEV_CPU_ISA_AVX512 ? Q8_DIRECT_M_AVX512 : Q8_DIRECT_M))
    return q8_gemm_tiles(c, &jb);
  q8_split(c, &jb, q8_cols(), Q8_JB, Q8_CHUNKS_PER_THREAD);
  return SC_OK;
}

// --- f32 small-M matmul
//
// 1 to 128 rows of x (decode batches) on a CPU with AVX-512, split over the device's pool like
// the int8 product. From 2 rows: the int8 kernel's blocking with f32 weights (Q8_JB weight rows
// against up to Q8_MB rows of x in 16 accumulators, masked tails); from F32_OUT_MIN_M to 32,
// outer products on x transposed into the device's scratch (f32_outer_avx512). The weights
// stream from memory once per call, with no packing of them: CBLAS's sgemm re-packs every
// weight matrix on each call, and at 2-8 rows took 1.5-2x the time of its 1-row sgemv
// (bench/bench_quant.c); the blocking takes 1.1-1.7x less than sgemm from 2 to 32 rows, and
// still 1.1-1.5x less from 48 to 128 (every linear layer of a llama-small step on 2 threads,
// 3 of 4 runs: 16-18 against 23-30 ms at 48 rows; 40-44 against 45-47 at 128; about even at
// 256). One row: f32_gemv_avx512, one weight row at a time (a step's linear layers: 12.6 ->
// 7.4 ms on one thread, 7.2 -> 4.8 ms on two, against sgemv); two rows: f32_rows2_avx512, the
// same reading. More rows (prefill), or no AVX-512: CBLAS.
enum {
  F32_DIRECT_M = 128, // rows of x up to which the kernel runs
};

// The product through the small-M kernel when it applies (k > 0); false: use CBLAS.
static bool f32_direct(cpu_ctx *c, int m, int n, int k, const float *x, const float *w,
                       float beta, float *y) {
#ifdef Q8_X86
  if (m > F32_DIRECT_M || q8_isa_now() != DEV_CPU_ISA_AVX512) return false;
  q8_job jb = {.m = m, .n = n, .k = k, .x = x, .w = w, .beta = beta, .y = y};
  if (m < F32_OUT_MIN_M || m > F32_OUT_LANES) {
    q8_cols_fn fn = m == 1 ? f32_gemv_avx512 : m == 2 ? f32_rows2_avx512 : q8_cols_avx512;
    q8_split(c, &jb, fn, Q8_JB, Q8_CHUNKS_PER_THREAD);
    return true;
  }
  cpu_scratch sc;
  float *xt = scratch_get(c, (size_t)k * F32_OUT_LANES, &sc);
  if (!xt) return false; // CBLAS, which needs no scratch
  f32_out_pack(m, k, x, xt);
  jb.xt = xt;
  q8_split(c, &jb, f32_outer_avx512, F32_OUT_JB, F32_OUT_CHUNKS_PER_THREAD);
  scratch_put(c, &sc);
  return true;
#else
  (void)c, (void)m, (void)n, (void)k, (void)x, (void)w, (void)beta, (void)y;
  return false;
#endif
}

// --- elementwise and per-row ops

// y(m,d) = x / sqrt(mean(x^2) + eps) * w(d); the mean is taken in double. y may alias x.
static sc_status cpu_rmsnorm(void *ctx, int m, int d, const float *x, const float *w, float eps,
                             float *y) {
  if (m < 0 || d <= 0) return SC_INVALID;
  if (m == 0) return SC_OK;
  if (!x || !w || !y) return SC_INVALID;
  for (size_t r = 0; r < (size_t)m; r++) {
    const float *xr = x + r * (size_t)d;
    float *yr = y + r * (size_t)d;
    double p[8] = {0}; // 8 partial sums: one chain of d dependent adds took 0.3 ms of a
    int e = 0;         // llama-small step at batch 32, with the pool's threads waiting
    for (; e + 8 <= d; e += 8)
      for (int l = 0; l < 8; l++) p[l] += (double)xr[e + l] * xr[e + l];
    double ss = ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7]));
    for (; e < d; e++) ss += (double)xr[e] * xr[e];
    float inv = (float)(1.0 / sqrt(ss / d + (double)eps));
    for (int i = 0; i < d; i++) yr[i] = xr[i] * inv * w[i];
  }
  return SC_OK;
}

// Rotate-half RoPE in place on x(m, n_heads, head_dim). Angles and their cos/sin are computed
// in double once per token (shared by its heads), then applied in float.
static sc_status cpu_rope(void *ctx, int m, int n_heads, int head_dim, const int32_t *pos,
                          float theta, float *x) {
  if (m < 0 || n_heads <= 0 || head_dim <= 0 || head_dim % 2 || !(theta > 0.0f))
    return SC_INVALID;
  if (m == 0) return SC_OK;
  if (!pos || !x) return SC_INVALID;
  const int half = head_dim / 2;
  double *inv_freq = malloc((size_t)half * sizeof *inv_freq); // (half)
  float *cs = malloc((size_t)head_dim * sizeof *cs);           // (2, half): cos then sin
  if (!inv_freq || !cs) {
    free(inv_freq);
    free(cs);
    return SC_OOM;
  }
  for (int i = 0; i < half; i++) inv_freq[i] = pow((double)theta, -2.0 * i / head_dim);
  float *cosv = cs, *sinv = cs + half;
  for (size_t t = 0; t < (size_t)m; t++) {
    for (int i = 0; i < half; i++) {
      double a = (double)pos[t] * inv_freq[i];
      cosv[i] = (float)cos(a);
      sinv[i] = (float)sin(a);
    }
    for (int h = 0; h < n_heads; h++) {
      float *xh = x + (t * (size_t)n_heads + (size_t)h) * (size_t)head_dim;
      float *x2p = xh + half;
      for (int i = 0; i < half; i++) {
        float x1 = xh[i], x2 = x2p[i];
        xh[i] = x1 * cosv[i] - x2 * sinv[i];
        x2p[i] = x2 * cosv[i] + x1 * sinv[i];
      }
    }
  }
  free(inv_freq);
  free(cs);
  return SC_OK;
}

typedef struct swiglu_args {
  const float *gate, *up;
  float *out;
  size_t n;
} swiglu_args;

#ifdef Q8_X86
// exp(x) for 16 lanes: x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two parts, Cody-Waite), e^r by
// its degree-7 Taylor polynomial (relative error under 2e-7 on that range), scaled by 2^n with
// vscalefps, which saturates to inf and 0 past the float range. NaN stays NaN.
Q8_AVX512 static inline __m512 exp_avx512(__m512 x) {
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// out[i0:i1] = silu(gate) * up, 16 lanes at a time (masked tail).
Q8_AVX512 static void swiglu_avx512(const float *gate, const float *up, float *out, size_t i0,
                                    size_t i1) {
  for (size_t i = i0; i < i1; i += 16) {
    __mmask16 mk = q8_mask16((ptrdiff_t)(i1 - i));
    __m512 g = _mm512_maskz_loadu_ps(mk, gate + i), u = _mm512_maskz_loadu_ps(mk, up + i);
    __m512 e = exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), g));
    __m512 silu = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    _mm512_mask_storeu_ps(out + i, mk, _mm512_mul_ps(silu, u));
  }
}
#endif

static void swiglu_chunk(void *arg, int chunk, int chunks) {
  const swiglu_args *a = arg;
  size_t i0 = a->n * (size_t)chunk / (size_t)chunks;
  size_t i1 = a->n * (size_t)(chunk + 1) / (size_t)chunks;
#ifdef Q8_X86
  if (q8_isa_now() == DEV_CPU_ISA_AVX512) {
    swiglu_avx512(a->gate, a->up, a->out, i0, i1);
    return;
  }
#endif
  for (size_t i = i0; i < i1; i++) {
    float g = a->gate[i];
    a->out[i] = g / (1.0f + expf(-g)) * a->up[i];
  }
}

// Elements from which SwiGLU is split over the device's pool (expf is most of its time).
enum { SWIGLU_PAR_MIN = 1 << 15 };

// out(m,d) = silu(gate) * up with silu(g) = g / (1 + exp(-g)); out may alias gate or up.
static sc_status cpu_swiglu(void *ctx, int m, int d, const float *gate, const float *up,
                            float *out) {
  if (m < 0 || d < 0) return SC_INVALID;
  size_t n = (size_t)m * (size_t)d;
  if (n == 0) return SC_OK;
  if (!gate || !up || !out) return SC_INVALID;
  swiglu_args a = {gate, up, out, n};
  cpu_pool *p = n >= SWIGLU_PAR_MIN ? cpu_pool_get(ctx) : NULL;
  pool_run(p, swiglu_chunk, &a, p ? p->n_workers + 1 : 1);
  return SC_OK;
}

// y(n) += a(n); a may alias y. Chunks of 8 (all loads before the stores) so that gcc -O2
// vectorises it without knowing n.
static sc_status cpu_add(void *ctx, size_t n, const float *a, float *y) {
  if (n == 0) return SC_OK;
  if (!a || !y) return SC_INVALID;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    float t[8];
    for (int j = 0; j < 8; j++) t[j] = y[i + j] + a[i + j];
    for (int j = 0; j < 8; j++) y[i + j] = t[j];
  }
  for (; i < n; i++) y[i] += a[i];
  return SC_OK;
}

// out(m,d): row i = table(rows, d)[ids[i] - row0] when ids[i] is in [row0, row0 + rows),
// zeros otherwise.
static sc_status cpu_embedding(void *ctx, int m, int d, const int32_t *ids, const float *table,
                               int row0, int rows, float *out) {
  if (m < 0 || d <= 0 || row0 < 0 || rows < 0) return SC_INVALID;
  if (m == 0) return SC_OK;
  if (!ids || !out || (rows > 0 && !table)) return SC_INVALID;
  const size_t rb = (size_t)d * sizeof(float);
  for (size_t i = 0; i < (size_t)m; i++) {
    int64_t r = (int64_t)ids[i] - row0;
    if (r >= 0 && r < rows)
      memcpy(out + i * (size_t)d, table + (size_t)r * (size_t)d, rb);
    else
      memset(out + i * (size_t)d, 0, rb);
  }
  return SC_OK;
}

// Greedy picks in the device's memory: the first largest value of each row, -1 for a row that
// holds a NaN or an infinity (one pass: the comparison and the finiteness test both vectorise).
// The first index of row's largest value, or -1 when the row holds a NaN or an infinity.
static int32_t argmax_row(const float *row, int n) {
  int32_t best = 0;
  int bad = 0;
  for (int j = 0; j < n; j++) {
    bad |= !(fabsf(row[j]) <= FLT_MAX); // false for NaN and inf
    if (row[j] > row[best]) best = j;
  }
  return bad ? -1 : best;
}

#ifdef Q8_X86
// argmax_row 16 lanes at a time: each lane keeps its first largest value and its index, and
// the lanes are merged at the end (the largest value, the lowest index among equals), so the
// result is argmax_row's. The scalar loop, one dependent compare per value, took about 0.15 ms
// of a batch-32 step over llama-small's 8192-token vocabulary.
Q8_AVX512 static int32_t argmax_row_avx512(const float *row, int n) {
  const __m512 lim = _mm512_set1_ps(FLT_MAX);
  const __m512i step = _mm512_set1_epi32(16);
  __m512 best = _mm512_set1_ps(-INFINITY);
  __m512i at = _mm512_set1_epi32(-1), j16 = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                                               11, 12, 13, 14, 15);
  __mmask16 bad = 0;
  for (int j = 0; j < n; j += 16, j16 = _mm512_add_epi32(j16, step)) {
    __mmask16 mk = q8_mask16(n - j);
    __m512 v = _mm512_maskz_loadu_ps(mk, row + j);
    bad |= mk & ~_mm512_cmp_ps_mask(_mm512_abs_ps(v), lim, _CMP_LE_OQ);
    __mmask16 up = _mm512_mask_cmp_ps_mask(mk, v, best, _CMP_GT_OQ);
    best = _mm512_mask_mov_ps(best, up, v);
    at = _mm512_mask_mov_epi32(at, up, j16);
  }
  if (bad) return -1;
  float bv[16];
  int32_t bi[16];
  _mm512_storeu_ps(bv, best);
  _mm512_storeu_si512(bi, at);
  int32_t r = -1;
  float rv = -INFINITY;
  for (int l = 0; l < 16; l++)
    if (bi[l] >= 0 && (r < 0 || bv[l] > rv || (bv[l] == rv && bi[l] < r))) {
      r = bi[l];
      rv = bv[l];
    }
  return r;
}
#endif

static sc_status cpu_argmax(void *ctx, int m, int n, const float *x, int32_t *idx, float *val) {
  if (m < 0 || n <= 0) return SC_INVALID;
  if (m == 0) return SC_OK;
  if (!x || !idx || !val) return SC_INVALID;
  for (size_t i = 0; i < (size_t)m; i++) {
    const float *row = x + i * (size_t)n;
#ifdef Q8_X86
    idx[i] = q8_isa_now() == DEV_CPU_ISA_AVX512 ? argmax_row_avx512(row, n) : argmax_row(row, n);
#else
    idx[i] = argmax_row(row, n);
#endif
    val[i] = row[idx[i] < 0 ? 0 : idx[i]];
  }
  return SC_OK;
}

// --- paged KV cache and attention

// Checks the batch's own fields and that every token's position fits its block-table row.
// When need_ctx, also checks that every block of positions 0..pos is mapped (attention reads
// them all); otherwise only the block holding pos (kv_store writes that one slot). Block ids
// are not checked against the cache's size, which this layer is not told.
static sc_status cpu_check_batch(const dev_kv_batch *b, bool need_ctx) {
  if (!b || b->n_tok < 0) return SC_INVALID;
  if (b->n_tok == 0) return SC_OK;
  if (!b->pos || !b->seq || !b->block_tables || b->max_blocks <= 0 || b->block_size <= 0)
    return SC_INVALID;
  for (int t = 0; t < b->n_tok; t++) {
    int32_t p = b->pos[t], s = b->seq[t];
    if (p < 0 || p == INT32_MAX || s < 0 || p / b->block_size >= b->max_blocks) return SC_INVALID;
    const int32_t *bt = b->block_tables + (size_t)s * (size_t)b->max_blocks;
    for (int j = need_ctx ? 0 : p / b->block_size; j <= p / b->block_size; j++)
      if (bt[j] < 0) return SC_INVALID;
  }
  return SC_OK;
}

// Copies k, v (n_tok, n_kv_heads, head_dim) into slot pos % block_size of block
// block_tables[seq][pos / block_size]; one slot holds all kv heads contiguously.
// The cache slot of position p of a sequence whose block table is bt (blocks of bs slots).
static inline size_t kv_slot(const int32_t *bt, int bs, int32_t p) {
  return (size_t)bt[p / bs] * (size_t)bs + (size_t)(p % bs);
}

static sc_status cpu_kv_store(void *ctx, const dev_kv_batch *b, int n_kv_heads, int head_dim,
                              const float *k, const float *v, dev_kv_layer kv) {
  if (n_kv_heads <= 0 || head_dim <= 0) return SC_INVALID;
  SC_TRY(cpu_check_batch(b, false));
  if (b->n_tok == 0) return SC_OK;
  if (!k || !v || !kv.k || !kv.v) return SC_INVALID;
  const size_t row = (size_t)n_kv_heads * (size_t)head_dim; // floats per slot
  for (size_t t = 0; t < (size_t)b->n_tok; t++) {
    const int32_t *bt = b->block_tables + (size_t)b->seq[t] * (size_t)b->max_blocks;
    size_t slot = kv_slot(bt, b->block_size, b->pos[t]);
    memcpy(kv.k + slot * row, k + t * row, row * sizeof(float));
    memcpy(kv.v + slot * row, v + t * row, row * sizeof(float));
  }
  return SC_OK;
}

// Dot product in float with 8 independent partial sums, so gcc -O2 can vectorise it.
static inline float cpu_dot(const float *a, const float *b, int n) {
  float acc[8] = {0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) acc[j] += a[i + j] * b[i + j];
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; i++) s += a[i] * b[i];
  return s;
}

// y(n) += a * x(n), in chunks of 8 so gcc -O2 vectorises it (its cheap cost model skips
// loops whose trip count it does not know).
static inline void cpu_axpy(float *restrict y, float a, const float *restrict x, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) y[i + j] += a * x[i + j];
  for (; i < n; i++) y[i] += a * x[i];
}

#ifdef Q8_X86
// cpu_dot and cpu_axpy 16 lanes at a time with FMA, masked past the last multiple of 16.
Q8_AVX512 static inline float dot_avx512(const float *a, const float *b, int n) {
  __m512 acc = _mm512_setzero_ps();
  for (int i = 0; i < n; i += 16) {
    __mmask16 mk = q8_mask16(n - i);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, a + i), _mm512_maskz_loadu_ps(mk, b + i), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

Q8_AVX512 static inline void axpy_avx512(float *restrict y, float a, const float *restrict x,
                                         int n) {
  const __m512 av = _mm512_set1_ps(a);
  for (int i = 0; i < n; i += 16) {
    __mmask16 mk = q8_mask16(n - i);
    _mm512_mask_storeu_ps(y + i, mk,
                          _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(mk, x + i),
                                          _mm512_maskz_loadu_ps(mk, y + i)));
  }
}
#define ATT_DOT(V512, a, b, n) ((V512) ? dot_avx512(a, b, n) : cpu_dot(a, b, n))
#define ATT_AXPY(V512, y, a, x, n) ((V512) ? axpy_avx512(y, a, x, n) : cpu_axpy(y, a, x, n))
#else
#define ATT_DOT(V512, a, b, n) cpu_dot(a, b, n)
#define ATT_AXPY(V512, y, a, x, n) cpu_axpy(y, a, x, n)
#endif

// Position j's cache slot in a paged layer (k or v).
static inline const float *att_slot(const float *layer, const int32_t *bt, int bs, int j,
                                    size_t slot_stride) {
  return layer + kv_slot(bt, bs, j) * slot_stride;
}

// Prefetches position j + ATT_PF's cache slot (n floats) while position j is read, when it
// is within the context.
enum { ATT_PF = 4 };
static inline void att_prefetch(const float *layer, const int32_t *bt, int bs, int j,
                                int ctx_len, size_t n) {
  if (j + ATT_PF >= ctx_len) return;
  const float *p = att_slot(layer, bt, bs, j + ATT_PF, n);
  for (size_t i = 0; i < n; i += 16) __builtin_prefetch(p + i, 0, 3);
}

// Tiling of the attention loop: up to ATT_TQ query tokens of one sequence share each K/V row
// read (a prefill chunk), and positions are taken ATT_CH at a time with an online softmax, so
// the scratch is small and independent of the context length.
enum { ATT_TQ = 4, ATT_CH = 64 };

// Causal attention over the paged cache (call kv_store for the step's tokens first: a prefill
// chunk attends to itself through the cache). out must not overlap q.
//
// For a tile of query tokens and a chunk of positions, walking the positions outermost so that
// each cache slot (n_kv_heads * head_dim contiguous floats) is read once, in order:
//   scores(tile, n_heads, chunk) = scale * q . k      (-inf past a token's own position)
//   running max m and sum l per (token, head); the accumulator in out is rescaled by
//   exp(m_old - m_new) when the max grows (online softmax, all in fp32)
//   out += exp(score - m) * v
// and at the end out /= l. Tiles are independent: a large batch splits them over the device's
// pool, each piece with a scratch of its own.
typedef struct att_args {
  const dev_kv_batch *b;
  int n_heads, G, head_dim;
  float scale;
  const float *q;
  dev_kv_layer kv;
  float *out;
  const int *tile_t0; // (n_tiles + 1): tile i is tokens [tile_t0[i], tile_t0[i + 1])
  int n_tiles;
  atomic_bool oom;    // a chunk could not allocate its scratch
} att_args;

// One tile: nq consecutive tokens from t0 of one sequence; sc is the scratch (ATT_TQ, n_heads,
// ATT_CH + 2).
__attribute__((always_inline)) static inline void att_tile_body(const bool v512, const att_args *a,
                                                                 int t0, int nq, float *sc) {
  const dev_kv_batch *b = a->b;
  const int bs = b->block_size, head_dim = a->head_dim;
  const size_t hd = (size_t)head_dim, nh = (size_t)a->n_heads, G = (size_t)a->G;
  const size_t slot_stride = nh / G * hd; // floats per cache slot
  float *mrun = sc + (size_t)ATT_TQ * nh * ATT_CH, *lrun = mrun + (size_t)ATT_TQ * nh;
  const int32_t s = b->seq[t0];
  int ctx_len = 0;
  for (int i = 0; i < nq; i++)
    if (b->pos[t0 + i] + 1 > ctx_len) ctx_len = b->pos[t0 + i] + 1;
  const int32_t *pos = b->pos + t0;
  const int32_t *bt = b->block_tables + (size_t)s * (size_t)b->max_blocks;
  const float *qt = a->q + (size_t)t0 * nh * hd; // (nq, n_heads, head_dim)
  float *ot = a->out + (size_t)t0 * nh * hd;     // (nq, n_heads, head_dim): the accumulator
  memset(ot, 0, (size_t)nq * nh * hd * sizeof *ot);
  for (size_t i = 0; i < (size_t)nq * nh; i++) {
    mrun[i] = -INFINITY;
    lrun[i] = 0.0f;
  }

  for (int c0 = 0; c0 < ctx_len; c0 += ATT_CH) {
    const int nc = ctx_len - c0 < ATT_CH ? ctx_len - c0 : ATT_CH;

    // scores for this chunk of positions
    for (int jj = 0; jj < nc; jj++) {
      const int j = c0 + jj;
      const float *krow = att_slot(a->kv.k, bt, bs, j, slot_stride);
      att_prefetch(a->kv.k, bt, bs, j, ctx_len, slot_stride);
      for (int qi = 0; qi < nq; qi++) {
        float *sq = sc + (size_t)qi * nh * ATT_CH + jj; // stride ATT_CH per head
        if (j > pos[qi]) {
          for (size_t h = 0; h < nh; h++) sq[h * ATT_CH] = -INFINITY;
          continue;
        }
        const float *qq = qt + (size_t)qi * nh * hd;
        for (size_t h = 0; h < nh; h++)
          sq[h * ATT_CH] = a->scale * ATT_DOT(v512, qq + h * hd, krow + (h / G) * hd, head_dim);
      }
    }

    // online softmax: new max, rescale what is accumulated, numerators in place
    for (size_t r = 0; r < (size_t)nq * nh; r++) {
      float *sr = sc + r * ATT_CH;
      float mx = mrun[r];
      for (int jj = 0; jj < nc; jj++) mx = sr[jj] > mx ? sr[jj] : mx;
      if (mx > mrun[r]) { // mrun is -inf on the first chunk: exp(-inf) = 0 rescales nothing
        const float corr = expf(mrun[r] - mx);
        lrun[r] *= corr;
        float *orow = ot + r * hd;
        for (size_t e = 0; e < hd; e++) orow[e] *= corr;
        mrun[r] = mx;
      }
      float l = 0.0f;
      for (int jj = 0; jj < nc; jj++) {
        sr[jj] = expf(sr[jj] - mx); // exp(-inf) = 0 past the token's position
        l += sr[jj];
      }
      lrun[r] += l;
    }

    // out += p * v, again one cache slot at a time
    for (int jj = 0; jj < nc; jj++) {
      const int j = c0 + jj;
      const float *vrow = att_slot(a->kv.v, bt, bs, j, slot_stride);
      att_prefetch(a->kv.v, bt, bs, j, ctx_len, slot_stride);
      for (int qi = 0; qi < nq; qi++) {
        if (j > pos[qi]) continue;
        const float *sq = sc + (size_t)qi * nh * ATT_CH + jj;
        float *oq = ot + (size_t)qi * nh * hd;
        for (size_t h = 0; h < nh; h++)
          ATT_AXPY(v512, oq + h * hd, sq[h * ATT_CH], vrow + (h / G) * hd, head_dim);
      }
    }
  }

  for (size_t r = 0; r < (size_t)nq * nh; r++) {
    const float inv = 1.0f / lrun[r]; // l >= 1: the max term contributes exp(0)
    float *orow = ot + r * hd;
    for (size_t e = 0; e < hd; e++) orow[e] *= inv;
  }
}

// att_tile_body in the machine's baseline (SSE2) and, where the CPU has AVX-512, with 16-lane
// FMA dot products and axpys: a decode step's attention is mostly these, 64 floats at a time,
// and at batch 32 it took about a fifth of the step.
static void att_tile_base(const att_args *a, int t0, int nq, float *sc) {
  att_tile_body(false, a, t0, nq, sc);
}
#ifdef Q8_X86
Q8_AVX512 static void att_tile_avx512(const att_args *a, int t0, int nq, float *sc) {
  att_tile_body(true, a, t0, nq, sc);
}
#endif

static void att_tile(const att_args *a, int t0, int nq, float *sc) {
#ifdef Q8_X86
  if (q8_isa_now() == DEV_CPU_ISA_AVX512) {
    att_tile_avx512(a, t0, nq, sc);
    return;
  }
#endif
  att_tile_base(a, t0, nq, sc);
}

// Chunk `chunk` of `chunks`: a contiguous range of tiles, with a scratch of its own.
static void att_chunk(void *arg, int chunk, int chunks) {
  att_args *a = arg;
  int i0 = (int)((int64_t)a->n_tiles * chunk / chunks);
  int i1 = (int)((int64_t)a->n_tiles * (chunk + 1) / chunks);
  if (i0 >= i1) return;
  float *sc = malloc((size_t)ATT_TQ * (size_t)a->n_heads * (ATT_CH + 2) * sizeof *sc);
  if (!sc) {
    atomic_store(&a->oom, true);
    return;
  }
  for (int i = i0; i < i1; i++) att_tile(a, a->tile_t0[i], a->tile_t0[i + 1] - a->tile_t0[i], sc);
  free(sc);
}

// Attention work (query-position pairs x head_dim x heads) from which the tiles are split
// over the device's pool: a decode batch of a few sequences with short contexts stays on the
// calling thread.
#define ATT_PAR_MIN ((int64_t)1 << 18)

static sc_status cpu_attention(void *ctx, const dev_kv_batch *b, int n_heads, int n_kv_heads,
                               int head_dim, float scale, const float *q, dev_kv_layer kv,
                               float *out) {
  if (n_heads <= 0 || n_kv_heads <= 0 || head_dim <= 0 || n_heads % n_kv_heads) return SC_INVALID;
  SC_TRY(cpu_check_batch(b, true));
  if (b->n_tok == 0) return SC_OK;
  if (!q || !out || !kv.k || !kv.v) return SC_INVALID;
  // tiles: up to ATT_TQ consecutive tokens of the same sequence
  int *tile_t0 = malloc(((size_t)b->n_tok + 1) * sizeof *tile_t0);
  if (!tile_t0) return SC_OOM;
  int n_tiles = 0;
  int64_t work = 0;
  for (int t0 = 0; t0 < b->n_tok;) {
    int nq = 1;
    while (nq < ATT_TQ && t0 + nq < b->n_tok && b->seq[t0 + nq] == b->seq[t0]) nq++;
    for (int i = 0; i < nq; i++) work += (int64_t)(b->pos[t0 + i] + 1);
    tile_t0[n_tiles++] = t0;
    t0 += nq;
  }
  tile_t0[n_tiles] = b->n_tok;
  work *= (int64_t)n_heads * head_dim;
  att_args a = {.b = b, .n_heads = n_heads, .G = n_heads / n_kv_heads, .head_dim = head_dim,
                .scale = scale, .q = q, .kv = kv, .out = out, .tile_t0 = tile_t0,
                .n_tiles = n_tiles};
  atomic_init(&a.oom, false);
  cpu_pool *p = n_tiles > 1 && work >= ATT_PAR_MIN ? cpu_pool_get(ctx) : NULL;
  int chunks = p ? Q8_CHUNKS_PER_THREAD * (p->n_workers + 1) : 1;
  pool_run(p, att_chunk, &a, chunks < n_tiles ? chunks : n_tiles);
  free(tile_t0);
  return atomic_load(&a.oom) ? SC_OOM : SC_OK;
}

// --- vtable, open, threads

static void cpu_destroy(void *ctx) {
  cpu_ctx *c = ctx;
  pool_free(c->pool);
  free(c->scratch);
  pthread_mutex_destroy(&c->scratch_mu);
  pthread_mutex_destroy(&c->pool_mu);
  free(c);
}

static const device_i cpu_iface = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .mem_info = cpu_mem_info,
    .synchronize = cpu_synchronize,
    .matmul = cpu_matmul,
    .matmul_q8 = cpu_matmul_q8,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .kv_store = cpu_kv_store,
    .attention = cpu_attention,
    .swiglu = cpu_swiglu,
    .add = cpu_add,
    .embedding = cpu_embedding,
    .argmax = cpu_argmax,
    .destroy = cpu_destroy,
};

sc_status device_cpu_open(device **out, sc_error *err) {
  if (!out) return sc_fail(err, SC_INVALID, "device_cpu_open: out is NULL");
  *out = NULL;
  cpu_ctx *c = calloc(1, sizeof *c);
  if (!c) return sc_fail(err, SC_OOM, "cpu device: out of host memory for its context");
  atomic_init(&c->used, 0);
  c->total = cpu_physical_bytes();
  c->threads = atomic_load(&cpu_threads);
  if (pthread_mutex_init(&c->pool_mu, NULL)) {
    free(c);
    return sc_fail(err, SC_OOM, "cpu device: cannot create a mutex");
  }
  if (pthread_mutex_init(&c->scratch_mu, NULL)) {
    pthread_mutex_destroy(&c->pool_mu);
    free(c);
    return sc_fail(err, SC_OOM, "cpu device: cannot create a mutex");
  }
  sc_status s = device_wrap(&cpu_iface, c, out);
  if (s != SC_OK) {
    cpu_destroy(c);
    return sc_fail(err, s, "cpu device: could not wrap the backend (%s)", sc_status_name(s));
  }
  return SC_OK;
}

void device_cpu_set_threads(int n) {
  if (n < 1) n = 1;
  atomic_store(&cpu_threads, n); // the int8 matmul's pools (devices opened from now on)
#ifdef OPENBLAS_VERSION
  openblas_set_num_threads(n);
#endif
}

int device_cpu_cores(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}
