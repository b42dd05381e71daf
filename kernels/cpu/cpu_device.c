// The cpu device backend: host memory with exact accounting, GEMMs through CBLAS (OpenBLAS),
// and plain C loops for the other ops of a Llama decoder (RMSNorm, rotate-half RoPE, paged KV
// store, paged causal GQA attention with an online softmax, SwiGLU, add, vocab-sharded
// embedding). Each op runs on the calling thread (only the GEMMs may use BLAS threads).
//
// What it leaves to others: the public wrappers and the backend registry (kernels/device.c),
// fault injection (faults/, at the wrapper layer), the KV block allocator and block tables
// (engine/kv_cache.c), and any parallelism across ranks (the engine runs one thread per rank;
// BLAS may add its own threads, see device_cpu_set_threads). Every op is synchronous, so
// synchronize is a no-op. Nothing here prints or exits; bad arguments give SC_INVALID.
//
// Thread safety: a cpu device keeps no state but its allocation counter (atomic), so several
// threads may call ops on different devices, or on the same one, at the same time, as long
// as their output buffers do not overlap.
#include <cblas.h>
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/device.h"

// --- context and memory

typedef struct cpu_ctx {
  atomic_size_t used; // bytes currently allocated through this device (as requested)
  size_t total;       // physical RAM in bytes; one allocation never pushes used past it
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

// --- matmul (CBLAS)

// y(m,n) = x(m,k) * w(n,k)^T + beta * y. x and y must not overlap. With beta == 0, y is
// written without being read (NaN in y does not leak through).
static sc_status cpu_matmul(void *ctx, int m, int n, int k, const float *x, const float *w,
                            float beta, float *y) {
  if (m < 0 || n < 0 || k < 0) return SC_INVALID;
  if (m == 0 || n == 0) return SC_OK;
  if (!y || (k > 0 && (!x || !w))) return SC_INVALID;
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
// Few rows (decode): each int8 weight row is converted once per 8 columns and multiplied into
// every input row's accumulator, so W is read once per call; AVX2 + FMA when the CPU has them
// (checked once at run time), else portable C. Many rows (prefill): tiles of Q8_TILE weight
// rows are dequantized to f32 and multiplied by CBLAS, one extra pass over the weights per
// call against a GEMM's many.
enum { Q8_SMALL_M = 8, Q8_TILE = 64 };

// out[r] = x(r,:) . q(:) for r < m (x rows of k floats), portable.
static void q8_rows_c(int m, int k, const float *x, const int8_t *q, float *out) {
  for (int r = 0; r < m; r++) {
    const float *xr = x + (size_t)r * (size_t)k;
    float a[8] = {0};
    int i = 0;
    for (; i + 8 <= k; i += 8)
      for (int l = 0; l < 8; l++) a[l] += xr[i + l] * (float)q[i + l];
    float sum = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    for (; i < k; i++) sum += xr[i] * (float)q[i];
    out[r] = sum;
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define Q8_HAVE_AVX2 1
__attribute__((target("avx2,fma"))) static void q8_rows_avx2(int m, int k, const float *x,
                                                             const int8_t *q, float *out) {
  __m256 acc[Q8_SMALL_M];
  for (int r = 0; r < m; r++) acc[r] = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= k; i += 8) {
    __m128i b = _mm_loadl_epi64((const __m128i *)(const void *)(q + i));
    __m256 w = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
    for (int r = 0; r < m; r++)
      acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(x + (size_t)r * (size_t)k + i), w, acc[r]);
  }
  for (int r = 0; r < m; r++) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc[r]), _mm256_extractf128_ps(acc[r], 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    float sum = _mm_cvtss_f32(h);
    for (int t = i; t < k; t++) sum += x[(size_t)r * (size_t)k + t] * (float)q[t];
    out[r] = sum;
  }
}
#endif

typedef void (*q8_rows_fn)(int m, int k, const float *x, const int8_t *q, float *out);

static q8_rows_fn q8_rows(void) {
#ifdef Q8_HAVE_AVX2
  static int have = -1; // benign race: every thread computes the same value
  if (have < 0) have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (have) return q8_rows_avx2;
#endif
  return q8_rows_c;
}

static sc_status cpu_matmul_q8(void *ctx, int m, int n, int k, const float *x, const int8_t *q,
                               const float *scale, float beta, float *y) {
  (void)ctx;
  if (m < 0 || n < 0 || k < 0) return SC_INVALID;
  if (m == 0 || n == 0) return SC_OK;
  if (!y || !scale || (k > 0 && (!x || !q))) return SC_INVALID;
  if (m <= Q8_SMALL_M) {
    q8_rows_fn rows = q8_rows();
    float dot[Q8_SMALL_M];
    for (size_t j = 0; j < (size_t)n; j++) {
      rows(m, k, x, q + j * (size_t)k, dot);
      for (size_t r = 0; r < (size_t)m; r++) {
        float v = dot[r] * scale[j], *yo = y + r * (size_t)n + j;
        *yo = beta == 0.0f ? v : v + beta * *yo;
      }
    }
    return SC_OK;
  }
  float *tile = malloc((size_t)Q8_TILE * (size_t)k * sizeof *tile);
  if (!tile) return SC_OOM;
  for (int j0 = 0; j0 < n; j0 += Q8_TILE) {
    int nt = n - j0 < Q8_TILE ? n - j0 : Q8_TILE;
    for (size_t j = 0; j < (size_t)nt; j++) {
      const int8_t *qr = q + ((size_t)j0 + j) * (size_t)k;
      float sj = scale[(size_t)j0 + j], *tr = tile + j * (size_t)k;
      for (size_t i = 0; i < (size_t)k; i++) tr[i] = sj * (float)qr[i];
    }
    if (beta == 0.0f)
      for (size_t r = 0; r < (size_t)m; r++) memset(y + r * (size_t)n + j0, 0, nt * sizeof *y);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, nt, k, 1.0f, x, k, tile, k, beta,
                y + j0, n);
  }
  free(tile);
  return SC_OK;
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
    double ss = 0.0;
    for (int i = 0; i < d; i++) ss += (double)xr[i] * xr[i];
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

// out(m,d) = silu(gate) * up with silu(g) = g / (1 + exp(-g)); out may alias gate or up.
static sc_status cpu_swiglu(void *ctx, int m, int d, const float *gate, const float *up,
                            float *out) {
  if (m < 0 || d < 0) return SC_INVALID;
  size_t n = (size_t)m * (size_t)d;
  if (n == 0) return SC_OK;
  if (!gate || !up || !out) return SC_INVALID;
  for (size_t i = 0; i < n; i++) {
    float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
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
static sc_status cpu_kv_store(void *ctx, const dev_kv_batch *b, int n_kv_heads, int head_dim,
                              const float *k, const float *v, dev_kv_layer kv) {
  if (n_kv_heads <= 0 || head_dim <= 0) return SC_INVALID;
  SC_TRY(cpu_check_batch(b, false));
  if (b->n_tok == 0) return SC_OK;
  if (!k || !v || !kv.k || !kv.v) return SC_INVALID;
  const size_t row = (size_t)n_kv_heads * (size_t)head_dim; // floats per slot
  for (size_t t = 0; t < (size_t)b->n_tok; t++) {
    int32_t p = b->pos[t];
    int32_t blk = b->block_tables[(size_t)b->seq[t] * (size_t)b->max_blocks + p / b->block_size];
    size_t slot = (size_t)blk * (size_t)b->block_size + (size_t)(p % b->block_size);
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
// and at the end out /= l.
static sc_status cpu_attention(void *ctx, const dev_kv_batch *b, int n_heads, int n_kv_heads,
                               int head_dim, float scale, const float *q, dev_kv_layer kv,
                               float *out) {
  if (n_heads <= 0 || n_kv_heads <= 0 || head_dim <= 0 || n_heads % n_kv_heads) return SC_INVALID;
  SC_TRY(cpu_check_batch(b, true));
  if (b->n_tok == 0) return SC_OK;
  if (!q || !out || !kv.k || !kv.v) return SC_INVALID;
  const int G = n_heads / n_kv_heads;
  const int bs = b->block_size;
  const size_t hd = (size_t)head_dim;
  const size_t nh = (size_t)n_heads;
  const size_t slot_stride = (size_t)n_kv_heads * hd; // floats per cache slot
  // scratch: scores (ATT_TQ, n_heads, ATT_CH), then m and l (ATT_TQ, n_heads) each
  float *sc = malloc((size_t)ATT_TQ * nh * (ATT_CH + 2) * sizeof *sc);
  if (!sc) return SC_OOM;
  float *mrun = sc + (size_t)ATT_TQ * nh * ATT_CH, *lrun = mrun + (size_t)ATT_TQ * nh;

  for (int t0 = 0; t0 < b->n_tok;) {
    // tile: consecutive tokens of the same sequence
    const int32_t s = b->seq[t0];
    int nq = 1, ctx_len = b->pos[t0] + 1;
    while (nq < ATT_TQ && t0 + nq < b->n_tok && b->seq[t0 + nq] == s) {
      if (b->pos[t0 + nq] + 1 > ctx_len) ctx_len = b->pos[t0 + nq] + 1;
      nq++;
    }
    const int32_t *pos = b->pos + t0;
    const int32_t *bt = b->block_tables + (size_t)s * (size_t)b->max_blocks;
    const float *qt = q + (size_t)t0 * nh * hd; // (nq, n_heads, head_dim)
    float *ot = out + (size_t)t0 * nh * hd;     // (nq, n_heads, head_dim): the accumulator
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
        const float *krow = kv.k + ((size_t)bt[j / bs] * bs + (size_t)(j % bs)) * slot_stride;
        for (int qi = 0; qi < nq; qi++) {
          float *sq = sc + (size_t)qi * nh * ATT_CH + jj; // stride ATT_CH per head
          if (j > pos[qi]) {
            for (size_t h = 0; h < nh; h++) sq[h * ATT_CH] = -INFINITY;
            continue;
          }
          const float *qq = qt + (size_t)qi * nh * hd;
          for (size_t h = 0; h < nh; h++)
            sq[h * ATT_CH] = scale * cpu_dot(qq + h * hd, krow + (h / (size_t)G) * hd, head_dim);
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
        const float *vrow = kv.v + ((size_t)bt[j / bs] * bs + (size_t)(j % bs)) * slot_stride;
        for (int qi = 0; qi < nq; qi++) {
          if (j > pos[qi]) continue;
          const float *sq = sc + (size_t)qi * nh * ATT_CH + jj;
          float *oq = ot + (size_t)qi * nh * hd;
          for (size_t h = 0; h < nh; h++)
            cpu_axpy(oq + h * hd, sq[h * ATT_CH], vrow + (h / (size_t)G) * hd, head_dim);
        }
      }
    }

    for (size_t r = 0; r < (size_t)nq * nh; r++) {
      const float inv = 1.0f / lrun[r]; // l >= 1: the max term contributes exp(0)
      float *orow = ot + r * hd;
      for (size_t e = 0; e < hd; e++) orow[e] *= inv;
    }
    t0 += nq;
  }
  free(sc);
  return SC_OK;
}

// --- vtable, open, threads

static void cpu_destroy(void *ctx) { free(ctx); }

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
    .destroy = cpu_destroy,
};

sc_status device_cpu_open(device **out, sc_error *err) {
  if (!out) return sc_fail(err, SC_INVALID, "device_cpu_open: out is NULL");
  *out = NULL;
  cpu_ctx *c = calloc(1, sizeof *c);
  if (!c) return sc_fail(err, SC_OOM, "cpu device: out of host memory for its context");
  atomic_init(&c->used, 0);
  c->total = cpu_physical_bytes();
  sc_status s = device_wrap(&cpu_iface, c, out);
  if (s != SC_OK) {
    free(c);
    return sc_fail(err, s, "cpu device: could not wrap the backend (%s)", sc_status_name(s));
  }
  return SC_OK;
}

void device_cpu_set_threads(int n) {
  if (n < 1) n = 1;
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
