// The cpu device's elementwise and per-row ops: RMSNorm, rotate-half RoPE, SwiGLU (16-lane
// exp on AVX-512, split over the device's pool on large batches), add, vocab-sharded
// embedding and greedy argmax (16 lanes on AVX-512). Each has a portable C build; the AVX-512
// one runs when cpu_isa_now says so.
//
// What it leaves to others: the matmuls (cpu_matmul.c), KV store and attention
// (cpu_attention.c), the pool (cpu_pool.c) and the choice of build (cpu_device.c). Nothing here
// prints or exits; bad arguments give SC_INVALID.
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_impl.h"

// --- elementwise and per-row ops

// y(m,d) = x / sqrt(mean(x^2) + eps) * w(d); the mean is taken in double. y may alias x.
sc_status cpu_rmsnorm(void *ctx, int m, int d, const float *x, const float *w, float eps,
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
sc_status cpu_rope(void *ctx, int m, int n_heads, int head_dim, const int32_t *pos,
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

#ifdef CPU_X86
// exp(x) for 16 lanes: x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two parts, Cody-Waite), e^r by
// its degree-7 Taylor polynomial (relative error under 2e-7 on that range), scaled by 2^n with
// vscalefps, which saturates to inf and 0 past the float range. NaN stays NaN.
CPU_AVX512 static inline __m512 exp_avx512(__m512 x) {
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
CPU_AVX512 static void swiglu_avx512(const float *gate, const float *up, float *out, size_t i0,
                                    size_t i1) {
  for (size_t i = i0; i < i1; i += 16) {
    __mmask16 mk = cpu_mask16((ptrdiff_t)(i1 - i));
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
#ifdef CPU_X86
  if (cpu_isa_now() == DEV_CPU_ISA_AVX512) {
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
sc_status cpu_swiglu(void *ctx, int m, int d, const float *gate, const float *up,
                            float *out) {
  if (m < 0 || d < 0) return SC_INVALID;
  size_t n = (size_t)m * (size_t)d;
  if (n == 0) return SC_OK;
  if (!gate || !up || !out) return SC_INVALID;
  swiglu_args a = {gate, up, out, n};
  cpu_pool *p = n >= SWIGLU_PAR_MIN ? cpu_pool_get(ctx) : NULL;
  cpu_pool_run(p, swiglu_chunk, &a, p ? cpu_pool_workers(p) + 1 : 1);
  return SC_OK;
}

// y(n) += a(n); a may alias y. Chunks of 8 (all loads before the stores) so that gcc -O2
// vectorises it without knowing n.
sc_status cpu_add(void *ctx, size_t n, const float *a, float *y) {
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
sc_status cpu_embedding(void *ctx, int m, int d, const int32_t *ids, const float *table,
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

#ifdef CPU_X86
// argmax_row 16 lanes at a time: each lane keeps its first largest value and its index, and
// the lanes are merged at the end (the largest value, the lowest index among equals), so the
// result is argmax_row's. The scalar loop, one dependent compare per value, took about 0.15 ms
// of a batch-32 step over llama-small's 8192-token vocabulary.
CPU_AVX512 static int32_t argmax_row_avx512(const float *row, int n) {
  const __m512 lim = _mm512_set1_ps(FLT_MAX);
  const __m512i step = _mm512_set1_epi32(16);
  __m512 best = _mm512_set1_ps(-INFINITY);
  __m512i at = _mm512_set1_epi32(-1), j16 = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                                               11, 12, 13, 14, 15);
  __mmask16 bad = 0;
  for (int j = 0; j < n; j += 16, j16 = _mm512_add_epi32(j16, step)) {
    __mmask16 mk = cpu_mask16(n - j);
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

sc_status cpu_argmax(void *ctx, int m, int n, const float *x, int32_t *idx, float *val) {
  if (m < 0 || n <= 0) return SC_INVALID;
  if (m == 0) return SC_OK;
  if (!x || !idx || !val) return SC_INVALID;
  for (size_t i = 0; i < (size_t)m; i++) {
    const float *row = x + i * (size_t)n;
#ifdef CPU_X86
    idx[i] = cpu_isa_now() == DEV_CPU_ISA_AVX512 ? argmax_row_avx512(row, n) : argmax_row(row, n);
#else
    idx[i] = argmax_row(row, n);
#endif
    val[i] = row[idx[i] < 0 ? 0 : idx[i]];
  }
  return SC_OK;
}
