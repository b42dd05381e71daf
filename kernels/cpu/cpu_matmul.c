// The cpu device's matmuls: y = x * w^T through CBLAS (OpenBLAS, one thread per call, the
// weight rows split over the device's pool), or, for 1 to 128 rows on a CPU with AVX-512,
// kernels of their own that stream the weights once; and the int8 weight-only matmul (its own
// kernels: AVX-512, AVX2 or portable C, chosen at run time; or dequantized tiles through
// CBLAS). The device's scratch buffer (dequantized int8 tiles, x
// transposed for the f32 outer-product kernel) is taken and given back here.
//
// What it leaves to others: the pool the kernels split over (cpu_pool.c), the choice of build
// (cpu_isa_now, cpu_device.c) and the memory accounting (cpu_device.c: the scratch is host
// memory outside it, like BLAS's own buffers). Nothing here prints or exits; bad arguments give
// SC_INVALID.
#include <cblas.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_impl.h"

// --- matmul (CBLAS, or the small-M kernel below)

static bool f32_direct(cpu_ctx *c, int m, int n, int k, const float *x, const float *w,
                       float beta, float *y);
static void blas_split(cpu_ctx *c, int m, int n, int k, const float *x, const float *w,
                       float beta, float *y, int ldy);

// y(m,n) = x(m,k) * w(n,k)^T + beta * y. x and y must not overlap. With beta == 0, y is
// written without being read (NaN in y does not leak through).
sc_status cpu_matmul(void *ctx, int m, int n, int k, const float *x, const float *w,
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
// Three builds of it, chosen at run time (cpu_isa_now): AVX-512 F/BW/VL (16 lanes, masked
// tails), AVX2 + FMA (8 lanes, scalar tails) and portable C. The vector builds are compiled
// with target attributes, so the file needs no -m flags and runs on any x86-64 (elsewhere, the
// portable build only). The weight rows are split over the device's pool (below): as many
// threads as device_cpu_set_threads gives the device, the caller being one of them.
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

#ifdef CPU_X86
// AVX2: rn (1..2, a constant after inlining) rows of x against Q8_JB weight rows.
CPU_AVX2 CPU_INLINE void q8_tile_avx2(const int rn, int k, const float *x,
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

CPU_AVX2 static void q8_cols_avx2(const q8_job *jb, int j0, int j1) {
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

// The sums of 16 vectors at once: lane l of the result is the sum of the lanes of v[(l % 4) *
// 4 + l / 4] (a transposing tree of 15 adds and 30 shuffles, where 16 separate reductions take
// about 5 times the instructions; at k = 512 those were a fifth of a 4 x 4 block's work).
CPU_AVX512 CPU_INLINE __m512 q8_sum16_avx512(const __m512 v[16]) {
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
CPU_AVX512 CPU_INLINE __m512 q8_load_avx512(const bool i8, const bool full, const void *w, int i,
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
CPU_AVX512 CPU_INLINE void q8_step_avx512(const int rn, const bool i8, const bool full, int k,
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
CPU_AVX512 CPU_INLINE void q8_tile_avx512(const int rn, const bool i8, int k, const float *x,
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
    q8_step_avx512(rn, i8, false, k, x, w, k16, cpu_mask16(k - k16), acc);
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
CPU_AVX512 static void q8_cols_avx512(const q8_job *jb, int j0, int j1) {
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
CPU_AVX512 CPU_INLINE void f32_rowwise(const int mr, const q8_job *jb, int j0, int j1) {
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
      __mmask16 mk = cpu_mask16(k - i);
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

CPU_AVX512 static void f32_gemv_avx512(const q8_job *jb, int j0, int j1) {
  f32_rowwise(1, jb, j0, j1);
}

CPU_AVX512 static void f32_rows2_avx512(const q8_job *jb, int j0, int j1) {
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

CPU_AVX512 CPU_INLINE void f32_outer_step(const q8_job *jb, const float *const w[F32_OUT_JB],
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
CPU_AVX512 static void f32_outer_block(const q8_job *jb, int j, int jn, uintptr_t pf,
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
CPU_AVX512 CPU_INLINE void f32_transpose16(__m512 v[16]) {
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
CPU_AVX512 static void f32_out_pack(int m, int k, const float *x, float *xt) {
  for (int r0 = 0; r0 < F32_OUT_LANES; r0 += 16)
    for (int i = 0; i < k; i += 16) {
      __mmask16 mk = cpu_mask16(k - i);
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
CPU_AVX512 static void f32_outer_avx512(const q8_job *jb, int j0, int j1) {
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

typedef void (*q8_cols_fn)(const q8_job *jb, int j0, int j1);

static q8_cols_fn q8_cols(void) {
#ifdef CPU_X86
  switch (cpu_isa_now()) {
  case DEV_CPU_ISA_AVX512: return q8_cols_avx512;
  case DEV_CPU_ISA_AVX2: return q8_cols_avx2;
  case DEV_CPU_ISA_C: break;
  }
#endif
  return q8_cols_c;
}

// --- splitting a product over the pool, scratch, int8 entry

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
  int chunks = p ? per_thread * (cpu_pool_workers(p) + 1) : 1;
  cpu_pool_run(p, q8_chunk, &pa, chunks < blocks ? chunks : blocks);
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
    blas_split(c, jb->m, nt, jb->k, jb->x, tile, jb->beta, jb->y + j0, jb->n);
  }
  scratch_put(c, &sc);
  return SC_OK;
}

// x and y must not overlap. With beta == 0, y is written without being read.
sc_status cpu_matmul_q8(void *ctx, int m, int n, int k, const float *x, const int8_t *q,
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
  if (m > (cpu_isa_now() == DEV_CPU_ISA_AVX512 ? Q8_DIRECT_M_AVX512 : Q8_DIRECT_M))
    return q8_gemm_tiles(c, &jb);
  q8_split(c, &jb, q8_cols(), Q8_JB, CPU_CHUNKS_PER_THREAD);
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

// --- CBLAS over the pool
//
// BLAS is told to use one thread (device_cpu_set_threads), and the weight rows of a product
// are split over the device's pool instead, each chunk one single-threaded BLAS call: the pool
// hands chunks out first come first served, so on a busy host a pool thread the OS has not
// scheduled costs only its share, where BLAS's own threads split the work evenly up front and
// wait for the slowest (llama-small at tp 1 on 2 cores beside two CPU-bound loops: 2 tok/s on
// BLAS's two threads against 14 on one; docs/benchmarks.md, "A busy host").
typedef struct blas_par {
  int m, n, k;
  const float *x; // (m, k)
  const float *w; // (n, k)
  float beta;
  float *y; // (m, ldy): columns [0, n) written
  int ldy;
} blas_par;

static void blas_chunk(void *arg, int chunk, int chunks) {
  const blas_par *b = arg;
  int j0 = (int)((int64_t)b->n * chunk / chunks), j1 = (int)((int64_t)b->n * (chunk + 1) / chunks);
  if (j0 >= j1) return;
  const float *w = b->w + (size_t)j0 * (size_t)b->k;
  float *y = b->y + j0;
  if (b->beta == 0.0f) // BLAS scales y by beta: NaN in y would leak through
    for (int r = 0; r < b->m; r++)
      memset(y + (size_t)r * (size_t)b->ldy, 0, (size_t)(j1 - j0) * sizeof *y);
  if (b->m == 1)
    cblas_sgemv(CblasRowMajor, CblasNoTrans, j1 - j0, b->k, 1.0f, w, b->k, b->x, 1, b->beta, y, 1);
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, b->m, j1 - j0, b->k, 1.0f, b->x, b->k,
                w, b->k, b->beta, y, b->ldy);
}

// y(m, n), row stride ldy, = x(m, k) * w(n, k)^T + beta * y, through CBLAS in chunks of weight
// rows over the device's pool (one call when the product is small).
static void blas_split(cpu_ctx *c, int m, int n, int k, const float *x, const float *w,
                       float beta, float *y, int ldy) {
  blas_par b = {m, n, k, x, w, beta, y, ldy};
  cpu_pool *p = (size_t)n * (size_t)k >= Q8_PAR_MIN && n > 1 ? cpu_pool_get(c) : NULL;
  int chunks = p ? CPU_CHUNKS_PER_THREAD * (cpu_pool_workers(p) + 1) : 1;
  cpu_pool_run(p, blas_chunk, &b, chunks < n ? chunks : n);
}

// The product through the small-M kernel when it applies, else through CBLAS over the pool
// (k > 0); false only when the kernel's scratch could not be had (then one CBLAS call).
static bool f32_direct(cpu_ctx *c, int m, int n, int k, const float *x, const float *w,
                       float beta, float *y) {
#ifdef CPU_X86
  if (m > F32_DIRECT_M || cpu_isa_now() != DEV_CPU_ISA_AVX512) {
    blas_split(c, m, n, k, x, w, beta, y, n);
    return true;
  }
  q8_job jb = {.m = m, .n = n, .k = k, .x = x, .w = w, .beta = beta, .y = y};
  if (m < F32_OUT_MIN_M || m > F32_OUT_LANES) {
    q8_cols_fn fn = m == 1 ? f32_gemv_avx512 : m == 2 ? f32_rows2_avx512 : q8_cols_avx512;
    q8_split(c, &jb, fn, Q8_JB, CPU_CHUNKS_PER_THREAD);
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
  blas_split(c, m, n, k, x, w, beta, y, n);
  return true;
#endif
}
