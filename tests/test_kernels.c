// Tests for the device seam (kernels/device.c) and the cpu backend (kernels/cpu/cpu_device.c):
// every op against a naive double-precision reference on deterministic random inputs, with
// the max absolute and relative differences logged (run with --verbose to see them), plus the
// registry, the wrappers' NULL-slot checks and the memory accounting.
//
// What it leaves to others: the engine's use of these ops (the engine's own tests), other
// backends' agreement with cpu (their own tests, against this backend as the reference).
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"
#include "tests/helpers.h"

// --- helpers: random numbers, buffers, comparison

static void fill(rng *r, float *x, size_t n, float amp) {
  for (size_t i = 0; i < n; i++) x[i] = rng_float(r, amp);
}

static device *open_cpu(void) {
  device *d = NULL;
  sc_error err = {{0}};
  sc_status s = device_open("cpu", 0, &d, &err);
  cr_assert_eq(s, SC_OK, "device_open(cpu): %s: %s", sc_status_name(s), err.msg);
  cr_assert_not_null(d);
  return d;
}

// n floats of device memory (zeroed); the test frees them with dev_free.
static float *dfloats(device *d, size_t n) {
  void *p = NULL;
  sc_status s = dev_alloc(d, n * sizeof(float), &p);
  cr_assert_eq(s, SC_OK, "dev_alloc(%zu floats): %s", n, sc_status_name(s));
  return p;
}

static double *dbl(size_t n) {
  double *p = calloc(n ? n : 1, sizeof *p);
  cr_assert_not_null(p);
  return p;
}

typedef struct diff {
  double max_abs; // max |got - ref|
  double max_rel; // max |got - ref| / max(|ref|, rms(ref)): relative, floored for tiny entries
} diff;

static diff compare(const float *got, const double *ref, size_t n) {
  double ss = 0.0;
  for (size_t i = 0; i < n; i++) ss += ref[i] * ref[i];
  double floor = n ? sqrt(ss / (double)n) : 1.0;
  if (floor == 0.0) floor = 1.0;
  diff r = {0.0, 0.0};
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - ref[i]);
    if (!(e == e)) e = INFINITY; // NaN fails every tolerance
    double den = fabs(ref[i]) > floor ? fabs(ref[i]) : floor;
    if (e > r.max_abs) r.max_abs = e;
    if (e / den > r.max_rel) r.max_rel = e / den;
  }
  return r;
}

// Logs the differences and fails the test when the relative one exceeds rtol.
static diff check_close(const char *what, const float *got, const double *ref, size_t n,
                        double rtol) {
  diff df = compare(got, ref, n);
  cr_log_info("%-44s n=%-8zu max_abs=%.3e max_rel=%.3e (tol %.0e)", what, n, df.max_abs,
              df.max_rel, rtol);
  cr_expect_leq(df.max_rel, rtol, "%s: max_rel %.3e > %.0e (max_abs %.3e)", what, df.max_rel,
                rtol, df.max_abs);
  return df;
}

static size_t used_bytes(device *d) {
  size_t used = 0, total = 0;
  cr_assert_eq(dev_mem_info(d, &used, &total), SC_OK);
  return used;
}

// --- matmul

static void matmul_case(device *d, rng *r, int m, int n, int k, float beta) {
  float *x = dfloats(d, (size_t)m * k);  // (m, k)
  float *w = dfloats(d, (size_t)n * k);  // (n, k)
  float *y = dfloats(d, (size_t)m * n);  // (m, n)
  double *ref = dbl((size_t)m * n);      // (m, n)
  fill(r, x, (size_t)m * k, 1.0f);
  fill(r, w, (size_t)n * k, 1.0f);
  if (beta == 0.0f)
    for (size_t i = 0; i < (size_t)m * n; i++) y[i] = NAN; // must not be read
  else
    fill(r, y, (size_t)m * n, 1.0f);
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double acc = beta == 0.0f ? 0.0 : (double)beta * y[(size_t)i * n + j];
      for (int p = 0; p < k; p++) acc += (double)x[(size_t)i * k + p] * w[(size_t)j * k + p];
      ref[(size_t)i * n + j] = acc;
    }
  cr_assert_eq(dev_matmul(d, m, n, k, x, w, beta, y), SC_OK);
  char what[64];
  snprintf(what, sizeof what, "matmul m=%d n=%d k=%d beta=%g", m, n, k, beta);
  check_close(what, y, ref, (size_t)m * n, 1e-5);
  dev_free(d, x);
  dev_free(d, w);
  dev_free(d, y);
  free(ref);
}

Test(kernels, matmul_matches_double_reference_for_odd_shapes_gemv_and_beta) {
  device *d = open_cpu();
  rng r = {1};
  const int shapes[][3] = {{1, 37, 129},  {1, 256, 1024}, {1, 1, 1},     {3, 5, 7},
                           {17, 33, 65},  {64, 128, 256}, {5, 1, 300},   {128, 96, 1000},
                           {2, 4096, 64}, {31, 7, 2048}};
  const float betas[] = {0.0f, 1.0f, 0.5f};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (size_t b = 0; b < sizeof betas / sizeof betas[0]; b++)
      matmul_case(d, &r, shapes[i][0], shapes[i][1], shapes[i][2], betas[b]);
  device_free(d);
}

// From 1 to 128 rows the product runs the small-M kernels on CPUs with AVX-512 (split over the
// pool when n x k is large; from 25 to 32 rows the outer-product one, on x transposed in
// 16 x 16 blocks), else CBLAS: both must match, through every row count and tail.
Test(kernels, matmul_small_m_kernel_and_cblas_both_match_the_reference) {
  dev_cpu_isa best = device_cpu_set_isa(DEV_CPU_ISA_AVX512);
  cr_log_info("small-M f32 kernel: %s", best == DEV_CPU_ISA_AVX512 ? "on" : "off (no AVX-512)");
  const dev_cpu_isa caps[] = {DEV_CPU_ISA_AVX512, DEV_CPU_ISA_C};
  for (size_t c = 0; c < 2; c++) {
    device_cpu_set_isa(caps[c]);
    device *d = open_cpu();
    rng r = {11};
    const int ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 24, 25, 28, 31, 32, 33, 127, 128, 129};
    for (size_t i = 0; i < sizeof ms / sizeof *ms; i++) {
      int m = ms[i];
      matmul_case(d, &r, m, 301, 515, 0.0f); // 155k weights: split over the pool
      matmul_case(d, &r, m, 6, 17, 0.5f);    // one block and a bit, masked tail
    }
    device_free(d);
  }
  device_cpu_set_isa(DEV_CPU_ISA_AVX512);
}

Test(kernels, matmul_with_k_zero_scales_y_by_beta) {
  device *d = open_cpu();
  float y[6] = {1, 2, 3, 4, 5, 6};
  cr_assert_eq(dev_matmul(d, 2, 3, 0, NULL, NULL, 0.5f, y), SC_OK);
  for (int i = 0; i < 6; i++) cr_expect_float_eq(y[i], 0.5f * (float)(i + 1), 0.0f);
  cr_assert_eq(dev_matmul(d, 2, 3, 0, NULL, NULL, 0.0f, y), SC_OK);
  for (int i = 0; i < 6; i++) cr_expect_eq(y[i], 0.0f);
  device_free(d);
}

// --- rmsnorm

Test(kernels, rmsnorm_matches_double_reference_out_of_place_and_in_place) {
  device *d = open_cpu();
  rng r = {2};
  const int dims[] = {7, 64, 4096, 5120};
  for (size_t c = 0; c < sizeof dims / sizeof dims[0]; c++) {
    const int m = 5, dim = dims[c];
    const float eps = 1e-5f;
    float *x = dfloats(d, (size_t)m * dim); // (m, dim)
    float *w = dfloats(d, (size_t)dim);      // (dim)
    float *y = dfloats(d, (size_t)m * dim); // (m, dim)
    double *ref = dbl((size_t)m * dim);
    fill(&r, x, (size_t)m * dim, 2.0f);
    fill(&r, w, (size_t)dim, 1.5f);
    for (int i = 0; i < dim; i++) x[i] *= 1e-3f; // a row of tiny values: eps matters
    for (int i = 0; i < m; i++) {
      double ss = 0.0;
      for (int j = 0; j < dim; j++) ss += (double)x[(size_t)i * dim + j] * x[(size_t)i * dim + j];
      double inv = 1.0 / sqrt(ss / dim + (double)eps);
      for (int j = 0; j < dim; j++)
        ref[(size_t)i * dim + j] = x[(size_t)i * dim + j] * inv * w[j];
    }
    char what[64];
    cr_assert_eq(dev_rmsnorm(d, m, dim, x, w, eps, y), SC_OK);
    snprintf(what, sizeof what, "rmsnorm d=%d", dim);
    check_close(what, y, ref, (size_t)m * dim, 1e-5);
    cr_assert_eq(dev_rmsnorm(d, m, dim, x, w, eps, x), SC_OK); // y aliases x
    snprintf(what, sizeof what, "rmsnorm d=%d in place", dim);
    check_close(what, x, ref, (size_t)m * dim, 1e-5);
    dev_free(d, x);
    dev_free(d, w);
    dev_free(d, y);
    free(ref);
  }
  device_free(d);
}

// --- rope

Test(kernels, rope_matches_double_reference_rotate_half_at_large_positions) {
  device *d = open_cpu();
  rng r = {3};
  const int32_t positions[] = {0, 1, 7, 100, 1023, 4000, 8191, 32767, 131071};
  const int m = (int)(sizeof positions / sizeof positions[0]);
  const struct {
    int n_heads, head_dim;
    float theta;
  } cases[] = {{3, 128, 10000.0f}, {4, 64, 500000.0f}, {2, 2, 10000.0f}, {1, 96, 1000000.0f}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const int nh = cases[c].n_heads, hd = cases[c].head_dim, half = hd / 2;
    const size_t n = (size_t)m * nh * hd;
    int32_t *pos = NULL;
    cr_assert_eq(dev_alloc(d, sizeof positions, (void **)&pos), SC_OK);
    memcpy(pos, positions, sizeof positions);
    float *x = dfloats(d, n); // (m, nh, hd)
    double *ref = dbl(n);
    fill(&r, x, n, 1.0f);
    for (int t = 0; t < m; t++)
      for (int h = 0; h < nh; h++) {
        const float *xh = x + ((size_t)t * nh + h) * hd;
        double *rh = ref + ((size_t)t * nh + h) * hd;
        for (int i = 0; i < half; i++) {
          double freq = pow((double)cases[c].theta, -2.0 * i / hd);
          double a = positions[t] * freq;
          double x1 = xh[i], x2 = xh[i + half];
          rh[i] = x1 * cos(a) - x2 * sin(a);
          rh[i + half] = x2 * cos(a) + x1 * sin(a);
        }
      }
    cr_assert_eq(dev_rope(d, m, nh, hd, pos, cases[c].theta, x), SC_OK);
    char what[64];
    snprintf(what, sizeof what, "rope heads=%d hd=%d theta=%g", nh, hd, cases[c].theta);
    check_close(what, x, ref, n, 1e-5);
    dev_free(d, pos);
    dev_free(d, x);
    free(ref);
  }
  device_free(d);
}

// --- paged KV store and attention

typedef struct attn_case {
  int block_size, n_heads, n_kv_heads, head_dim;
  float q_amp;      // larger -> peakier softmax
  int n_seq;        // sequences (at most 4)
  int ctx0[4];      // tokens already in the cache before the step, per sequence
  int chunk[4];     // tokens this step adds per sequence (1 = decode, more = prefill chunk)
  int order[4];     // order in which sequences appear in the step's token list
} attn_case;

// Builds a paged cache with scrambled physical blocks, stores each sequence's history in a
// first step, then runs a mixed step (decode tokens and prefill chunks, sequences interleaved):
// kv_store, then attention. Checks the cache slots exactly and the output against a double
// reference computed from the logical (unpaged) K/V.
static void run_attention_case(const char *what, const attn_case *c, uint64_t seed) {
  device *d = open_cpu();
  rng r = {seed};
  const size_t used0 = used_bytes(d);
  const int bs = c->block_size, nh = c->n_heads, nkv = c->n_kv_heads, hd = c->head_dim;
  const size_t row = (size_t)nkv * hd; // floats per token in K or V

  // block tables: scrambled physical ids, one spare column of -1 per row
  int total[4], need[4], max_blocks = 0, n_blocks = 3; // 3 blocks nobody uses
  for (int s = 0; s < c->n_seq; s++) {
    total[s] = c->ctx0[s] + c->chunk[s];
    need[s] = (total[s] + bs - 1) / bs;
    if (need[s] + 1 > max_blocks) max_blocks = need[s] + 1;
    n_blocks += need[s];
  }
  int *perm = malloc((size_t)n_blocks * sizeof *perm);
  cr_assert_not_null(perm);
  for (int i = 0; i < n_blocks; i++) perm[i] = i;
  for (int i = n_blocks - 1; i > 0; i--) {
    int j = (int)(rng_next(&r) % (uint64_t)(i + 1));
    int tmp = perm[i];
    perm[i] = perm[j];
    perm[j] = tmp;
  }
  int32_t *bt = NULL; // (n_seq, max_blocks)
  cr_assert_eq(dev_alloc(d, (size_t)c->n_seq * max_blocks * sizeof *bt, (void **)&bt), SC_OK);
  for (int s = 0, next = 0; s < c->n_seq; s++)
    for (int j = 0; j < max_blocks; j++)
      bt[(size_t)s * max_blocks + j] = j < need[s] ? perm[next++] : -1;

  // logical K/V per sequence: (total[s], nkv, hd)
  float *lk[4], *lv[4];
  for (int s = 0; s < c->n_seq; s++) {
    lk[s] = malloc((size_t)total[s] * row * sizeof(float));
    lv[s] = malloc((size_t)total[s] * row * sizeof(float));
    cr_assert(lk[s] && lv[s]);
    fill(&r, lk[s], (size_t)total[s] * row, 1.0f);
    fill(&r, lv[s], (size_t)total[s] * row, 1.0f);
  }
  float *kc = dfloats(d, (size_t)n_blocks * bs * row); // (n_blocks, bs, nkv, hd)
  float *vc = dfloats(d, (size_t)n_blocks * bs * row);
  dev_kv_layer kv = {.k = kc, .v = vc};

  // step tokens: history (step 1), then the mixed step (step 2)
  int n_hist = 0, n_tok = 0;
  for (int s = 0; s < c->n_seq; s++) {
    n_hist += c->ctx0[s];
    n_tok += c->chunk[s];
  }
  const int n_max = n_hist > n_tok ? n_hist : n_tok;
  int32_t *pos = NULL, *seq = NULL;
  cr_assert_eq(dev_alloc(d, (size_t)(n_max + 1) * sizeof *pos, (void **)&pos), SC_OK);
  cr_assert_eq(dev_alloc(d, (size_t)(n_max + 1) * sizeof *seq, (void **)&seq), SC_OK);
  float *kin = dfloats(d, (size_t)(n_max + 1) * row); // (n_tok, nkv, hd)
  float *vin = dfloats(d, (size_t)(n_max + 1) * row);

  int t = 0;
  for (int s = c->n_seq - 1; s >= 0; s--) // history in reverse sequence order
    for (int p = 0; p < c->ctx0[s]; p++, t++) {
      pos[t] = p;
      seq[t] = s;
      memcpy(kin + (size_t)t * row, lk[s] + (size_t)p * row, row * sizeof(float));
      memcpy(vin + (size_t)t * row, lv[s] + (size_t)p * row, row * sizeof(float));
    }
  dev_kv_batch hist = {.n_tok = n_hist, .pos = pos, .seq = seq, .block_tables = bt,
                       .max_blocks = max_blocks, .block_size = bs};
  cr_assert_eq(dev_kv_store(d, &hist, nkv, hd, kin, vin, kv), SC_OK);

  t = 0;
  for (int o = 0; o < c->n_seq; o++) {
    const int s = c->order[o];
    for (int p = c->ctx0[s]; p < total[s]; p++, t++) {
      pos[t] = p;
      seq[t] = s;
      memcpy(kin + (size_t)t * row, lk[s] + (size_t)p * row, row * sizeof(float));
      memcpy(vin + (size_t)t * row, lv[s] + (size_t)p * row, row * sizeof(float));
    }
  }
  dev_kv_batch step = {.n_tok = n_tok, .pos = pos, .seq = seq, .block_tables = bt,
                       .max_blocks = max_blocks, .block_size = bs};
  cr_assert_eq(dev_kv_store(d, &step, nkv, hd, kin, vin, kv), SC_OK);

  // every logical position sits, bit for bit, in the slot its block table names
  int misplaced = 0;
  for (int s = 0; s < c->n_seq; s++)
    for (int p = 0; p < total[s]; p++) {
      size_t slot = (size_t)bt[(size_t)s * max_blocks + p / bs] * bs + (size_t)(p % bs);
      misplaced += memcmp(kc + slot * row, lk[s] + (size_t)p * row, row * sizeof(float)) != 0;
      misplaced += memcmp(vc + slot * row, lv[s] + (size_t)p * row, row * sizeof(float)) != 0;
    }
  cr_expect_eq(misplaced, 0, "%s: %d K/V rows not in their block-table slot", what, misplaced);

  // attention and its double reference
  const size_t nq = (size_t)n_tok * nh * hd;
  float *q = dfloats(d, nq);   // (n_tok, nh, hd)
  float *out = dfloats(d, nq); // (n_tok, nh, hd)
  double *ref = dbl(nq);
  fill(&r, q, nq, c->q_amp);
  const float scale = 1.0f / sqrtf((float)hd);
  cr_assert_eq(dev_attention(d, &step, nh, nkv, hd, scale, q, kv, out), SC_OK);

  double *sc = dbl((size_t)n_max + 1);
  for (int i = 0; i < n_tok; i++) {
    const int s = seq[i], ctx = pos[i] + 1;
    for (int h = 0; h < nh; h++) {
      const int g = h / (nh / nkv);
      const float *qh = q + ((size_t)i * nh + h) * hd;
      double mx = -INFINITY, sum = 0.0;
      for (int j = 0; j < ctx; j++) {
        const float *kj = lk[s] + (size_t)j * row + (size_t)g * hd;
        double a = 0.0;
        for (int e = 0; e < hd; e++) a += (double)qh[e] * kj[e];
        sc[j] = a * (double)scale;
        if (sc[j] > mx) mx = sc[j];
      }
      for (int j = 0; j < ctx; j++) sum += (sc[j] = exp(sc[j] - mx));
      double *rh = ref + ((size_t)i * nh + h) * hd;
      for (int j = 0; j < ctx; j++) {
        const float *vj = lv[s] + (size_t)j * row + (size_t)g * hd;
        for (int e = 0; e < hd; e++) rh[e] += sc[j] / sum * vj[e];
      }
    }
  }
  check_close(what, out, ref, nq, 1e-5);

  free(sc);
  free(ref);
  dev_free(d, q);
  dev_free(d, out);
  dev_free(d, kin);
  dev_free(d, vin);
  dev_free(d, pos);
  dev_free(d, seq);
  dev_free(d, kc);
  dev_free(d, vc);
  dev_free(d, bt);
  for (int s = 0; s < c->n_seq; s++) {
    free(lk[s]);
    free(lv[s]);
  }
  free(perm);
  cr_expect_eq(used_bytes(d), used0, "%s: device memory not returned", what);
  device_free(d);
}

Test(kernels, attention_matches_double_reference_paged_gqa) {
  // 8 query heads on 2 KV heads, block 4: seq 0 continues a prefill (chunk of 9 after 5),
  // seq 1 decodes at 17, seq 2 prefills 7 from scratch, seq 3 decodes at 0 (first token).
  attn_case c = {.block_size = 4, .n_heads = 8, .n_kv_heads = 2, .head_dim = 64, .q_amp = 1.0f,
                 .n_seq = 4, .ctx0 = {5, 17, 0, 0}, .chunk = {9, 1, 7, 1},
                 .order = {1, 0, 3, 2}};
  run_attention_case("attention paged gqa 8/2 block 4", &c, 4);
}

Test(kernels, attention_matches_double_reference_block16_long_context) {
  // Block 16, contexts of thousands of tokens and a peaky softmax (q scaled by 4).
  attn_case c = {.block_size = 16, .n_heads = 8, .n_kv_heads = 2, .head_dim = 128,
                 .q_amp = 4.0f, .n_seq = 3, .ctx0 = {4095, 0, 700}, .chunk = {1, 21, 2},
                 .order = {0, 1, 2}};
  run_attention_case("attention paged gqa 8/2 block 16 ctx 4096", &c, 5);
}

Test(kernels, attention_matches_double_reference_mha_and_single_kv_head) {
  attn_case mha = {.block_size = 16, .n_heads = 4, .n_kv_heads = 4, .head_dim = 36,
                   .q_amp = 2.0f, .n_seq = 2, .ctx0 = {33, 0}, .chunk = {1, 40},
                   .order = {1, 0}};
  run_attention_case("attention mha 4/4 hd 36", &mha, 6);
  attn_case mqa = {.block_size = 4, .n_heads = 8, .n_kv_heads = 1, .head_dim = 64,
                   .q_amp = 1.0f, .n_seq = 2, .ctx0 = {12, 3}, .chunk = {3, 1},
                   .order = {0, 1}};
  run_attention_case("attention mqa 8/1 block 4", &mqa, 7);
}

Test(kernels, attention_and_kv_store_reject_unmapped_blocks_and_bad_heads) {
  device *d = open_cpu();
  float *kc = dfloats(d, 4 * 4 * 2 * 8), *vc = dfloats(d, 4 * 4 * 2 * 8); // (4, 4, 2, 8)
  float *q = dfloats(d, 8 * 8), *out = dfloats(d, 8 * 8), *k = dfloats(d, 2 * 8);
  dev_kv_layer kv = {kc, vc};
  int32_t bt[2] = {2, -1}, pos[1] = {5}, seq[1] = {0};
  dev_kv_batch b = {.n_tok = 1, .pos = pos, .seq = seq, .block_tables = bt, .max_blocks = 2,
                    .block_size = 4};
  cr_expect_eq(dev_attention(d, &b, 8, 2, 8, 1.0f, q, kv, out), SC_INVALID, "block -1 read");
  cr_expect_eq(dev_kv_store(d, &b, 2, 8, k, k, kv), SC_INVALID, "block -1 written");
  pos[0] = 8; // past max_blocks * block_size
  cr_expect_eq(dev_attention(d, &b, 8, 2, 8, 1.0f, q, kv, out), SC_INVALID);
  pos[0] = 3;
  cr_expect_eq(dev_attention(d, &b, 8, 3, 8, 1.0f, q, kv, out), SC_INVALID, "8 % 3 heads");
  cr_expect_eq(dev_attention(d, &b, 8, 2, 8, 1.0f, q, kv, out), SC_OK);
  cr_expect_eq(dev_attention(d, NULL, 8, 2, 8, 1.0f, q, kv, out), SC_INVALID);
  cr_expect_eq(dev_rope(d, 1, 1, 7, pos, 10000.0f, q), SC_INVALID, "odd head_dim");
  cr_expect_eq(dev_matmul(d, -1, 2, 2, q, q, 0.0f, out), SC_INVALID);
  cr_expect_eq(dev_rmsnorm(d, 1, 0, q, q, 1e-5f, out), SC_INVALID);
  dev_free(d, kc);
  dev_free(d, vc);
  dev_free(d, q);
  dev_free(d, out);
  dev_free(d, k);
  device_free(d);
}

// --- swiglu, add, embedding

// m rows of dim: small products run on the calling thread, large ones over the pool.
static void swiglu_case(device *d, rng *r, int m, int dim) {
  const size_t n = (size_t)m * dim;
  float *g = dfloats(d, n), *u = dfloats(d, n), *o = dfloats(d, n); // (m, dim) each
  double *ref = dbl(n);
  fill(r, g, n, 30.0f); // exp(-g) over/underflows in float at the ends
  fill(r, u, n, 2.0f);
  for (size_t i = 0; i < n; i++) ref[i] = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
  cr_assert_eq(dev_swiglu(d, m, dim, g, u, o), SC_OK);
  check_close("swiglu", o, ref, n, 1e-5);
  cr_assert_eq(dev_swiglu(d, m, dim, g, u, g), SC_OK); // out aliases gate
  check_close("swiglu in place", g, ref, n, 1e-5);
  dev_free(d, g);
  dev_free(d, u);
  dev_free(d, o);
  free(ref);
}

Test(kernels, swiglu_matches_double_reference_including_saturated_gates) {
  device *d = open_cpu();
  rng r = {8};
  swiglu_case(d, &r, 7, 1000);  // 7,000 elements: one thread
  swiglu_case(d, &r, 41, 1001); // 41,041: split over the pool
  device_free(d);
}

// Gates past float's exp range, at its edges and around 0, through both builds (AVX-512:
// a polynomial exp with vscalefps; portable: libm's expf).
Test(kernels, swiglu_at_the_ends_of_exp_matches_in_every_build) {
  static const float gates[] = {-200.0f, -104.0f, -88.8f, -87.0f, -20.0f, -1e-30f, -0.0f, 0.0f,
                                1e-30f,  0.5f,    20.0f,  87.0f,  88.8f,  104.0f,  200.0f};
  const int n = (int)(sizeof gates / sizeof *gates);
  double ref[sizeof gates / sizeof *gates];
  for (int i = 0; i < n; i++) ref[i] = (double)gates[i] / (1.0 + exp(-(double)gates[i]));
  const dev_cpu_isa caps[] = {DEV_CPU_ISA_AVX512, DEV_CPU_ISA_C};
  for (size_t c = 0; c < 2; c++) {
    device_cpu_set_isa(caps[c]);
    device *d = open_cpu();
    float *g = dfloats(d, (size_t)n), *u = dfloats(d, (size_t)n), *o = dfloats(d, (size_t)n);
    for (int i = 0; i < n; i++) g[i] = gates[i], u[i] = 1.0f;
    cr_assert_eq(dev_swiglu(d, 1, n, g, u, o), SC_OK);
    check_close(c ? "swiglu ends (portable)" : "swiglu ends (avx512 when present)", o, ref,
                (size_t)n, 1e-5);
    for (int i = 0; i < n; i++) cr_expect(!isnan(o[i]), "gate %g gave NaN", (double)gates[i]);
    dev_free(d, g);
    dev_free(d, u);
    dev_free(d, o);
    device_free(d);
  }
  device_cpu_set_isa(DEV_CPU_ISA_AVX512);
}

Test(kernels, add_matches_double_reference) {
  device *d = open_cpu();
  rng r = {9};
  const size_t n = 12345;
  float *a = dfloats(d, n), *y = dfloats(d, n);
  double *ref = dbl(n);
  fill(&r, a, n, 1.0f);
  fill(&r, y, n, 1.0f);
  for (size_t i = 0; i < n; i++) ref[i] = (double)y[i] + a[i];
  cr_assert_eq(dev_add(d, n, a, y), SC_OK);
  check_close("add", y, ref, n, 1e-6);
  cr_assert_eq(dev_add(d, 0, NULL, NULL), SC_OK);
  dev_free(d, a);
  dev_free(d, y);
  free(ref);
  device_free(d);
}

// dev_f16_from_f32 rounds as the compiler's own conversion to _Float16 does (IEEE binary16,
// round to nearest even): across the whole range, at the overflow and subnormal edges, and for
// zeros, infinities and NaN. The cpu backend has no fp16 product.
Test(kernels, f16_from_f32_rounds_as_ieee_binary16) {
  float edge[] = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e9f,
                  0x1p-14f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x3p-26f, 0x1p-26f, 0x1.ffcp-15f,
                  0x1.ffep-15f, 1.0009765625f, 1.00048828125f, 1.00146484375f, INFINITY,
                  -INFINITY, 3.14159265f, -2.71828f, 1e-8f, 6.1e-5f};
  enum { N = 200000, E = sizeof edge / sizeof *edge };
  float *x = malloc((N + E) * sizeof *x);
  uint16_t *h = malloc((N + E) * sizeof *h);
  cr_assert(x && h);
  memcpy(x, edge, sizeof edge);
  rng r = {41};
  for (int i = 0; i < N; i++) { // every exponent from far below to far above half's range
    uint32_t b = (uint32_t)rng_next(&r);
    b = (b & 0x807fffffu) | ((uint32_t)(96 + rng_next(&r) % 64) << 23);
    memcpy(&x[E + i], &b, sizeof b);
  }
  dev_f16_from_f32(x, N + E, h);
  size_t bad = 0;
  for (int i = 0; i < N + E; i++) {
    _Float16 ref = (_Float16)x[i];
    uint16_t rb;
    memcpy(&rb, &ref, sizeof rb);
    if (rb != h[i] && !bad++)
      cr_log_error("f16 of %a: 0x%04x, the compiler's 0x%04x", (double)x[i], h[i], rb);
  }
  cr_expect_eq(bad, 0, "%zu of %d conversions differ", bad, N + E);
  float nan = NAN;
  dev_f16_from_f32(&nan, 1, h);
  cr_expect((h[0] & 0x7c00u) == 0x7c00u && (h[0] & 0x03ffu), "NaN stays NaN: 0x%04x", h[0]);
  device *d = open_cpu();
  cr_expect_not(dev_has_matmul_f16(d));
  cr_expect_eq(dev_matmul_f16(d, 1, 1, 1, x, h, 0.0f, x), SC_INVALID);
  cr_expect_not(dev_has_sample(d));
  device_free(d);
  free(x), free(h);
}

// The fused wrappers on a backend without the fused slots (cpu) run the separate ops, in the
// order the engine ran them before: the same bits, every output written.
Test(kernels, fused_wrappers_without_the_slots_run_the_separate_ops) {
  device *d = open_cpu();
  rng r = {31};
  const int m = 5, dim = 96, nh = 4, nkv = 2, hd = 16, bs = 4;
  size_t md = (size_t)m * dim;
  float *x1 = dfloats(d, md), *x2 = dfloats(d, md), *a = dfloats(d, md), *w = dfloats(d, dim);
  float *y1 = dfloats(d, md), *y2 = dfloats(d, md);
  fill(&r, x1, md, 2.0f), fill(&r, a, md, 1.0f), fill(&r, w, dim, 1.0f);
  memcpy(x2, x1, md * sizeof *x1);
  cr_assert_eq(dev_add_rmsnorm(d, m, dim, a, x1, w, 1e-5f, y1), SC_OK);
  cr_assert_eq(dev_add(d, md, a, x2), SC_OK);
  cr_assert_eq(dev_rmsnorm(d, m, dim, x2, w, 1e-5f, y2), SC_OK);
  cr_expect_arr_eq(x1, x2, md * sizeof *x1, "add_rmsnorm: the residual");
  cr_expect_arr_eq(y1, y2, md * sizeof *y1, "add_rmsnorm: the norm");
  cr_expect_eq(dev_add_rmsnorm(d, -1, dim, a, x1, w, 1e-5f, y1), SC_INVALID);
  size_t qn = (size_t)m * nh * hd, kn = (size_t)m * nkv * hd, cache = (size_t)8 * bs * nkv * hd;
  float *q1 = dfloats(d, qn), *q2 = dfloats(d, qn), *k1 = dfloats(d, kn), *k2 = dfloats(d, kn);
  float *v = dfloats(d, kn);
  fill(&r, q1, qn, 1.0f), fill(&r, k1, kn, 1.0f), fill(&r, v, kn, 1.0f);
  memcpy(q2, q1, qn * sizeof *q1), memcpy(k2, k1, kn * sizeof *k1);
  dev_kv_layer c1 = {dfloats(d, cache), dfloats(d, cache)}, c2 = {dfloats(d, cache), dfloats(d, cache)};
  int32_t pos[5] = {0, 1, 2, 9, 3}, seq[5] = {0, 0, 0, 1, 1}, bt[2 * 4] = {3, 1, 7, 0, 2, 6, 4, 5};
  dev_kv_batch b = {.n_tok = m, .pos = pos, .seq = seq, .block_tables = bt, .max_blocks = 4,
                    .block_size = bs};
  cr_assert_eq(dev_rope_kv_store(d, &b, nh, nkv, hd, 10000.0f, q1, k1, v, c1), SC_OK);
  cr_assert_eq(dev_rope(d, m, nh, hd, pos, 10000.0f, q2), SC_OK);
  cr_assert_eq(dev_rope(d, m, nkv, hd, pos, 10000.0f, k2), SC_OK);
  cr_assert_eq(dev_kv_store(d, &b, nkv, hd, k2, v, c2), SC_OK);
  cr_expect_arr_eq(q1, q2, qn * sizeof *q1, "rope_kv_store: q");
  cr_expect_arr_eq(k1, k2, kn * sizeof *k1, "rope_kv_store: k");
  cr_expect_arr_eq(c1.k, c2.k, cache * sizeof *c1.k, "rope_kv_store: the K cache");
  cr_expect_arr_eq(c1.v, c2.v, cache * sizeof *c1.v, "rope_kv_store: the V cache");
  int mode = -1;
  cr_expect_eq(dev_graph_begin(d, 1, 1, &mode), SC_OK);
  cr_expect_eq(mode, DEV_GRAPH_OFF, "the cpu backend records no graphs");
  cr_expect_eq(dev_graph_end(d, true), SC_INVALID);
  device_free(d);
}

Test(kernels, embedding_vocab_shards_sum_to_the_full_lookup_and_zero_outside) {
  device *d = open_cpu();
  rng r = {10};
  const int vocab = 50, dim = 24, m = 9, split = 29;
  const int32_t ids_h[] = {0, 28, 29, 49, -1, 50, 7, 31, 1000000};
  float *table = dfloats(d, (size_t)vocab * dim); // (vocab, dim), full
  int32_t *ids = NULL;
  cr_assert_eq(dev_alloc(d, sizeof ids_h, (void **)&ids), SC_OK);
  memcpy(ids, ids_h, sizeof ids_h);
  float *o0 = dfloats(d, (size_t)m * dim), *o1 = dfloats(d, (size_t)m * dim); // (m, dim)
  fill(&r, table, (size_t)vocab * dim, 1.0f);
  for (size_t i = 0; i < (size_t)m * dim; i++) o0[i] = o1[i] = NAN; // every row gets written
  // shard 0 holds rows [0, 29), shard 1 rows [29, 50): each is given only its slice
  cr_assert_eq(dev_embedding(d, m, dim, ids, table, 0, split, o0), SC_OK);
  cr_assert_eq(dev_embedding(d, m, dim, ids, table + (size_t)split * dim, split, vocab - split,
                             o1),
               SC_OK);
  double *ref = dbl((size_t)m * dim);
  int wrong_zero = 0;
  for (int i = 0; i < m; i++) {
    bool in0 = ids_h[i] >= 0 && ids_h[i] < split, in1 = ids_h[i] >= split && ids_h[i] < vocab;
    for (int j = 0; j < dim; j++) {
      if (in0 || in1) ref[(size_t)i * dim + j] = table[(size_t)ids_h[i] * dim + j];
      wrong_zero += !in0 && o0[(size_t)i * dim + j] != 0.0f;
      wrong_zero += !in1 && o1[(size_t)i * dim + j] != 0.0f;
      o0[(size_t)i * dim + j] += o1[(size_t)i * dim + j]; // what the all-reduce would do
    }
  }
  cr_expect_eq(wrong_zero, 0, "%d entries outside a shard were not zero", wrong_zero);
  diff df = check_close("embedding shards summed", o0, ref, (size_t)m * dim, 0.0);
  cr_expect_eq(df.max_abs, 0.0);
  dev_free(d, table);
  dev_free(d, ids);
  dev_free(d, o0);
  dev_free(d, o1);
  free(ref);
  device_free(d);
}

// --- memory, copies

Test(kernels, alloc_is_zeroed_aligned_and_used_bytes_return_to_start) {
  device *d = open_cpu();
  size_t used0 = 0, total = 0;
  cr_assert_eq(dev_mem_info(d, &used0, &total), SC_OK);
  cr_expect_gt(total, (size_t)0);
  const size_t sizes[] = {1, 63, 64, 4096, 1 << 20, 3 * 1000 * 1000 + 7, 0};
  void *p[7];
  size_t expect = used0;
  for (int i = 0; i < 7; i++) {
    cr_assert_eq(dev_alloc(d, sizes[i], &p[i]), SC_OK, "alloc %zu", sizes[i]);
    cr_assert_not_null(p[i]);
    cr_expect_eq((uintptr_t)p[i] % 64, 0u, "alloc %zu not 64-byte aligned", sizes[i]);
    size_t nz = 0;
    for (size_t j = 0; j < sizes[i]; j++) nz += ((unsigned char *)p[i])[j] != 0;
    cr_expect_eq(nz, 0u, "alloc %zu: %zu non-zero bytes", sizes[i], nz);
    memset(p[i], 0xab, sizes[i]);
    expect += sizes[i];
    cr_expect_eq(used_bytes(d), expect, "used after alloc %zu", sizes[i]);
  }
  for (int i = 6; i >= 0; i -= 2) dev_free(d, p[i]); // out of order
  for (int i = 5; i >= 0; i -= 2) dev_free(d, p[i]);
  cr_expect_eq(used_bytes(d), used0);
  dev_free(d, NULL);

  void *big = (void *)1;
  cr_expect_eq(dev_alloc(d, total + 1, &big), SC_OOM, "more than physical RAM");
  cr_expect_null(big);
  cr_expect_eq(dev_alloc(d, SIZE_MAX, &big), SC_OOM);
  cr_expect_eq(used_bytes(d), used0, "failed allocations leave the count alone");
  device_free(d);
}

Test(kernels, copy_moves_bytes_for_every_kind_and_accounting_is_per_device) {
  device *a = open_cpu(), *b = open_cpu();
  float src[5] = {1, 2, 3, 4, 5};
  float *da = dfloats(a, 5), *db = dfloats(b, 8);
  cr_expect_eq(used_bytes(a), 5 * sizeof(float));
  cr_expect_eq(used_bytes(b), 8 * sizeof(float));
  cr_assert_eq(dev_copy(a, da, src, sizeof src, DEV_H2D), SC_OK);
  cr_assert_eq(dev_copy(a, db, da, sizeof src, DEV_D2D), SC_OK);
  float back[5] = {0};
  cr_assert_eq(dev_copy(b, back, db, sizeof back, DEV_D2H), SC_OK);
  cr_expect_arr_eq(back, src, sizeof src);
  cr_assert_eq(dev_copy(a, da + 1, da, 4 * sizeof(float), DEV_D2D), SC_OK); // overlapping
  const float shifted[5] = {1, 1, 2, 3, 4};
  cr_expect_arr_eq(da, shifted, sizeof shifted);
  cr_expect_eq(dev_copy(a, NULL, src, 4, DEV_H2D), SC_INVALID);
  cr_expect_eq(dev_synchronize(a), SC_OK);
  dev_free(a, da);
  dev_free(b, db);
  cr_expect_eq(used_bytes(a), 0u);
  cr_expect_eq(used_bytes(b), 0u);
  device_free(a);
  device_free(b);
}

// --- registry and wrappers

Test(argmax, picks_the_first_largest_and_flags_rows_with_nan_or_inf) {
  device *d = open_cpu();
  cr_expect(dev_has_argmax(d));
  const int m = 6, n = 5;
  const float rows[6][5] = {{1, 3, 2, 3, 0},         {-5, -4, -4, -9, -4},
                            {0, 0, 0, 0, 0},         {1, NAN, 9, 2, 0},
                            {1, 2, INFINITY, 3, 0}, {-INFINITY, -1, -2, -1, -3}};
  float *x = dfloats(d, (size_t)m * n), *val = dfloats(d, (size_t)m);
  int32_t *idx = NULL;
  cr_assert_eq(dev_alloc(d, (size_t)m * sizeof *idx, (void **)&idx), SC_OK);
  memcpy(x, rows, sizeof rows);
  cr_assert_eq(dev_argmax(d, m, n, x, idx, val), SC_OK);
  const int32_t want[6] = {1, 1, 0, -1, -1, -1}; // -inf too, as the host's check
  for (int i = 0; i < m; i++)
    cr_expect_eq(idx[i], want[i], "row %d: %d, want %d", i, idx[i], want[i]);
  cr_expect_eq(val[0], 3.0f);
  cr_expect_eq(val[1], -4.0f);
  cr_expect_eq(dev_argmax(d, 1, 0, x, idx, val), SC_INVALID, "a row needs a column");
  cr_expect_eq(dev_argmax(d, 0, n, x, idx, val), SC_OK, "no rows: nothing to do");
  dev_free(d, x), dev_free(d, val), dev_free(d, idx);
  device_free(d);
}

// Long rows go 16 lanes at a time on AVX-512: the first of equal maxima across lanes and past
// the last full vector, and a NaN or an infinity in the masked tail, must come out as above.
Test(argmax, long_rows_keep_the_first_maximum_across_lanes_and_tails) {
  const dev_cpu_isa caps[] = {DEV_CPU_ISA_AVX512, DEV_CPU_ISA_C};
  for (size_t c = 0; c < 2; c++) {
    device_cpu_set_isa(caps[c]);
    device *d = open_cpu();
    const int m = 5, n = 8195;
    float *x = dfloats(d, (size_t)m * n), *val = dfloats(d, (size_t)m);
    int32_t *idx = NULL;
    cr_assert_eq(dev_alloc(d, (size_t)m * sizeof *idx, (void **)&idx), SC_OK);
    rng r = {5};
    fill(&r, x, (size_t)m * n, 1.0f);
    float *row = x;
    row[4097] = 7.0f, row[37] = 7.0f, row[8194] = 7.0f; // ties in other lanes: 37 first
    row = x + n;
    row[8194] = 2.0f;                                   // in the tail
    row = x + 2 * (size_t)n;
    for (int j = 0; j < n; j++) row[j] = -3.0f - (float)(j % 7); // all negative, max at 0
    row = x + 3 * (size_t)n;
    row[8193] = NAN;                                     // NaN in the tail
    row = x + 4 * (size_t)n;
    row[100] = 5.0f, row[8192] = -INFINITY;              // -inf in the tail
    cr_assert_eq(dev_argmax(d, m, n, x, idx, val), SC_OK);
    const int32_t want[5] = {37, 8194, 0, -1, -1};
    for (int i = 0; i < m; i++)
      cr_expect_eq(idx[i], want[i], "isa %zu row %d: %d, want %d", c, i, idx[i], want[i]);
    cr_expect_eq(val[0], 7.0f);
    cr_expect_eq(val[1], 2.0f);
    cr_expect_eq(val[2], -3.0f);
    dev_free(d, x), dev_free(d, val), dev_free(d, idx);
    device_free(d);
  }
  device_cpu_set_isa(DEV_CPU_ISA_AVX512);
}

Test(device, open_unknown_backend_is_invalid_and_lists_available_ones) {
  device *d = (device *)1;
  sc_error err = {{0}};
  cr_assert_eq(device_open("nope", 0, &d, &err), SC_INVALID);
  cr_expect_null(d);
  cr_log_info("device_open(nope): %s", err.msg);
  cr_expect(strstr(err.msg, "'nope'") != NULL, "message names the backend: %s", err.msg);
  cr_expect(strstr(err.msg, "cpu") != NULL, "message lists cpu: %s", err.msg);
  cr_expect_eq(device_open(NULL, 0, &d, &err), SC_INVALID);
  cr_expect(device_backend_available("cpu"));
  cr_expect(!device_backend_available("nope"));
  cr_expect(!device_backend_available(NULL));
}

Test(device, cuda_open_without_cuda_build_says_how_to_enable_it) {
#ifdef SHARDCHECK_HAVE_CUDA
  cr_skip_test("built with CUDA");
#else
  device *d = NULL;
  sc_error err = {{0}};
  cr_assert_eq(device_open("cuda", 0, &d, &err), SC_INVALID);
  cr_expect_null(d);
  cr_expect(strstr(err.msg, "SHARDCHECK_CUDA=ON") != NULL, "%s", err.msg);
  cr_expect(!device_backend_available("cuda"));
#endif
}

Test(device, free_null_is_a_noop_and_name_is_cpu) {
  device_free(NULL);
  cr_expect_str_eq(device_name(NULL), "none");
  device *d = open_cpu();
  cr_expect_str_eq(device_name(d), "cpu");
  device_free(d);
}

static int destroyed;
static void count_destroy(void *ctx) { destroyed += ctx == (void *)&destroyed; }

Test(device, wrappers_return_invalid_for_missing_slots_and_null_device) {
  static const device_i bare = {.name = "bare", .destroy = count_destroy};
  device *d = NULL;
  cr_assert_eq(device_wrap(&bare, &destroyed, &d), SC_OK);
  cr_expect_str_eq(device_name(d), "bare");
  void *p = (void *)1;
  float x[4] = {0};
  int32_t ids[1] = {0};
  dev_kv_batch b = {0};
  dev_kv_layer kv = {x, x};
  device *ds[2] = {d, NULL};
  for (int i = 0; i < 2; i++) {
    device *dd = ds[i];
    cr_expect_eq(dev_alloc(dd, 16, &p), SC_INVALID);
    cr_expect_null(p);
    dev_free(dd, x); // no slot: nothing happens
    cr_expect_eq(dev_copy(dd, x, x, 4, DEV_D2D), SC_INVALID);
    cr_expect_eq(dev_mem_info(dd, NULL, NULL), SC_INVALID);
    cr_expect_eq(dev_synchronize(dd), SC_INVALID);
    cr_expect_eq(dev_matmul(dd, 1, 1, 1, x, x, 0.0f, x), SC_INVALID);
    cr_expect_eq(dev_rmsnorm(dd, 1, 1, x, x, 1e-5f, x), SC_INVALID);
    cr_expect_eq(dev_rope(dd, 1, 1, 2, ids, 1e4f, x), SC_INVALID);
    cr_expect_eq(dev_kv_store(dd, &b, 1, 1, x, x, kv), SC_INVALID);
    cr_expect_eq(dev_attention(dd, &b, 1, 1, 1, 1.0f, x, kv, x), SC_INVALID);
    cr_expect_eq(dev_swiglu(dd, 1, 1, x, x, x), SC_INVALID);
    cr_expect_eq(dev_add(dd, 1, x, x), SC_INVALID);
    cr_expect_eq(dev_embedding(dd, 1, 1, ids, x, 0, 1, x), SC_INVALID);
  }
  device_free(d);
  cr_expect_eq(destroyed, 1, "destroy called once with the backend's ctx");
  cr_expect_eq(device_wrap(NULL, NULL, &d), SC_INVALID);
  cr_expect_null(d);
}

// --- threads: ranks run as threads, each on its own device

typedef struct rank_job {
  int rank;
  double max_rel; // out: worst relative difference of this rank's matmul
  sc_status status;
} rank_job;

static void *rank_main(void *arg) {
  rank_job *j = arg;
  device *d = NULL;
  j->status = device_open("cpu", j->rank, &d, NULL);
  if (j->status != SC_OK) return NULL;
  rng r = {100 + (uint64_t)j->rank};
  const int m = 16, n = 96, k = 384;
  float *x = NULL, *w = NULL, *y = NULL;
  double *ref = NULL;
  if ((j->status = dev_alloc(d, (size_t)m * k * sizeof(float), (void **)&x)) ||
      (j->status = dev_alloc(d, (size_t)n * k * sizeof(float), (void **)&w)) ||
      (j->status = dev_alloc(d, (size_t)m * n * sizeof(float), (void **)&y)))
    goto out;
  ref = malloc((size_t)m * n * sizeof *ref);
  if (!ref) {
    j->status = SC_OOM;
    goto out;
  }
  for (int it = 0; it < 20 && j->status == SC_OK; it++) {
    fill(&r, x, (size_t)m * k, 1.0f);
    fill(&r, w, (size_t)n * k, 1.0f);
    for (int a = 0; a < m; a++)
      for (int c = 0; c < n; c++) {
        double s = 0.0;
        for (int p = 0; p < k; p++) s += (double)x[(size_t)a * k + p] * w[(size_t)c * k + p];
        ref[(size_t)a * n + c] = s;
      }
    j->status = dev_matmul(d, m, n, k, x, w, 0.0f, y);
    diff df = compare(y, ref, (size_t)m * n);
    if (df.max_rel > j->max_rel) j->max_rel = df.max_rel;
  }
out:
  free(ref);
  dev_free(d, x);
  dev_free(d, w);
  dev_free(d, y);
  size_t used = 1; // no Criterion asserts off the test's thread
  if (j->status == SC_OK && (dev_mem_info(d, &used, NULL) != SC_OK || used != 0))
    j->status = SC_DEVICE;
  device_free(d);
  return NULL;
}

Test(kernels, concurrent_ranks_on_separate_devices_match_double_reference) {
  cr_expect_geq(device_cpu_cores(), 1);
  enum { RANKS = 4 };
  pthread_t th[RANKS];
  rank_job jobs[RANKS];
  for (int i = 0; i < RANKS; i++) {
    jobs[i] = (rank_job){.rank = i};
    cr_assert_eq(pthread_create(&th[i], NULL, rank_main, &jobs[i]), 0);
  }
  double worst = 0.0;
  for (int i = 0; i < RANKS; i++) {
    pthread_join(th[i], NULL);
    cr_expect_eq(jobs[i].status, SC_OK, "rank %d: %s", i, sc_status_name(jobs[i].status));
    if (jobs[i].max_rel > worst) worst = jobs[i].max_rel;
  }
  cr_log_info("%-44s max_rel=%.3e (tol 1e-05)", "matmul on 4 rank threads", worst);
  cr_expect_leq(worst, 1e-5);
}
