// The cpu device's paged KV cache ops: kv_store (one slot per token) and causal GQA attention
// over the paged cache with an online softmax, in tiles of query tokens split over the
// device's pool on large batches (16-lane FMA dot products and axpys on AVX-512).
//
// What it leaves to others: the KV block allocator and block tables (engine/kv_cache.c), the
// pool (cpu_pool.c) and the choice of build (cpu_device.c). Nothing here prints or exits; bad
// arguments give SC_INVALID.
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_impl.h"

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

sc_status cpu_kv_store(void *ctx, const dev_kv_batch *b, int n_kv_heads, int head_dim,
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

#ifdef CPU_X86
// cpu_dot and cpu_axpy 16 lanes at a time with FMA, masked past the last multiple of 16.
CPU_AVX512 static inline float dot_avx512(const float *a, const float *b, int n) {
  __m512 acc = _mm512_setzero_ps();
  for (int i = 0; i < n; i += 16) {
    __mmask16 mk = cpu_mask16(n - i);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, a + i), _mm512_maskz_loadu_ps(mk, b + i), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

CPU_AVX512 static inline void axpy_avx512(float *restrict y, float a, const float *restrict x,
                                         int n) {
  const __m512 av = _mm512_set1_ps(a);
  for (int i = 0; i < n; i += 16) {
    __mmask16 mk = cpu_mask16(n - i);
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
#ifdef CPU_X86
CPU_AVX512 static void att_tile_avx512(const att_args *a, int t0, int nq, float *sc) {
  att_tile_body(true, a, t0, nq, sc);
}
#endif

static void att_tile(const att_args *a, int t0, int nq, float *sc) {
#ifdef CPU_X86
  if (cpu_isa_now() == DEV_CPU_ISA_AVX512) {
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

sc_status cpu_attention(void *ctx, const dev_kv_batch *b, int n_heads, int n_kv_heads,
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
  int chunks = p ? CPU_CHUNKS_PER_THREAD * (cpu_pool_workers(p) + 1) : 1;
  cpu_pool_run(p, att_chunk, &a, chunks < n_tiles ? chunks : n_tiles);
  free(tile_t0);
  return atomic_load(&a.oom) ? SC_OOM : SC_OK;
}
