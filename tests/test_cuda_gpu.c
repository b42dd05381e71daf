// The CUDA backend on a GPU, against the CPU backend as the reference:
// - every op of the device seam on random inputs, fp32 within 1e-5 relative (below), outputs
//   poisoned with NaN before each run so that an element a kernel never wrote shows, and NaN
//   never passing a comparison;
// - the loopback communicator (several ranks on GPU 0): all-reduce gives the same bits on
//   every rank, all-gather and send/recv move the right bytes, abort and the deadline end a
//   wait;
// - the engine in fp32: greedy tokens identical to the CPU engine's for 32 tokens on
//   llama-tiny and llama-small, and tp=2 and tp=4 on one GPU identical to tp=1.
//
// Without a CUDA device (or without the CUDA build) nothing here can run: the binary prints
// "skipped: no CUDA device" and exits 77, which ctest reports as skipped, never as passed.
#include <stdio.h>

#ifndef SHARDCHECK_HAVE_CUDA
int main(void) {
  puts("skipped: no CUDA device (this build has no CUDA backend)");
  return 77;
}
#else
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "config/presets.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "kernels/comm.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/device.h"
#include "tests/helpers.h"

int main(int argc, char *argv[]) {
  int n = cuda_device_count();
  if (n == 0) {
    puts("skipped: no CUDA device");
    return 77;
  }
  struct criterion_test_set *tests = criterion_initialize();
  int rc = 0;
  if (criterion_handle_args(argc, argv, true)) rc = !criterion_run_all_tests(tests);
  criterion_finalize(tests);
  return rc;
}

// --- helpers

static float *rand_host(rng *r, size_t n, float amp) {
  float *x = malloc(n * sizeof *x);
  cr_assert_not_null(x);
  for (size_t i = 0; i < n; i++) x[i] = rng_float(r, amp);
  return x;
}

// The CPU reference and the GPU under test, side by side.
typedef struct pair {
  device *cpu, *gpu;
} pair;

static pair open_pair(void) {
  pair p = {0};
  sc_error err = {{0}};
  cr_assert_eq(device_open("cpu", 0, &p.cpu, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(device_open("cuda", 0, &p.gpu, &err), SC_OK, "%s", err.msg);
  return p;
}

static void close_pair(pair *p) {
  device_free(p->cpu);
  device_free(p->gpu);
}

// A device copy of host bytes (on the cpu device too, so both sides run on their own memory).
static void *up(device *d, const void *h, size_t bytes) {
  void *p = NULL;
  cr_assert_eq(dev_alloc(d, bytes ? bytes : 1, &p), SC_OK);
  if (bytes) cr_assert_eq(dev_copy(d, p, h, bytes, DEV_H2D), SC_OK, "%s", dev_last_error(d));
  return p;
}

// A device buffer of n floats, every one NaN: what a kernel does not write stays NaN.
static float *poisoned(device *d, size_t n) {
  float *h = malloc((n ? n : 1) * sizeof *h);
  cr_assert_not_null(h);
  for (size_t i = 0; i < n; i++) h[i] = NAN;
  float *p = up(d, h, n * sizeof *h);
  free(h);
  return p;
}

static float *down(device *d, const float *p, size_t n) {
  float *h = malloc((n ? n : 1) * sizeof *h);
  cr_assert_not_null(h);
  if (n) cr_assert_eq(dev_copy(d, h, p, n * sizeof *h, DEV_D2H), SC_OK, "%s", dev_last_error(d));
  return h;
}

// got matches ref when every |got - ref| <= tol * max(|ref|, rms(ref)): relative per element,
// with the buffer's rms as the floor for elements near zero (their absolute error follows the
// size of the terms summed, not of the result). NaN anywhere fails.
static void expect_close(const char *what, const float *got, const float *ref, size_t n,
                         double tol) {
  double ss = 0;
  for (size_t i = 0; i < n; i++) ss += (double)ref[i] * ref[i];
  double rms = n ? sqrt(ss / (double)n) : 0, worst = 0;
  size_t bad = 0, first = n;
  for (size_t i = 0; i < n; i++) {
    double bound = tol * fmax(fabs(ref[i]), rms), d = fabs((double)got[i] - ref[i]);
    if (!(d <= bound)) { // NaN fails here
      if (first == n) first = i;
      bad++;
    }
    if (isfinite(d) && bound > 0) worst = fmax(worst, d / fmax(fabs(ref[i]), rms));
  }
  cr_expect_eq(bad, 0, "%s: %zu of %zu elements off (first [%zu]: gpu %.9g, cpu %.9g)", what, bad,
               n, first < n ? first : 0, first < n ? got[first] : 0.0,
               first < n ? ref[first] : 0.0);
  cr_log_info("%s: worst relative error %.3g over %zu elements", what, worst, n);
}

#define F32_TOL 1e-5
#define BF16_RND_TOL 1e-4 // the same bf16-rounded inputs: only the order of fp32 sums differs
#define REDUCED_TOL 1e-2  // attention of a bf16 model: q, k in bf16, p, v in fp16 (or all TF32)

// --- matmul, f32 and int8

static void matmul_case(pair *p, rng *r, int m, int n, int k, float beta) {
  float *x = rand_host(r, (size_t)m * k, 1.0f), *w = rand_host(r, (size_t)n * k, 0.05f);
  float *y0 = rand_host(r, (size_t)m * n, 1.0f);
  float *xc = up(p->cpu, x, (size_t)m * k * 4), *wc = up(p->cpu, w, (size_t)n * k * 4);
  float *xg = up(p->gpu, x, (size_t)m * k * 4), *wg = up(p->gpu, w, (size_t)n * k * 4);
  float *yc = beta == 0 ? poisoned(p->cpu, (size_t)m * n) : up(p->cpu, y0, (size_t)m * n * 4);
  float *yg = beta == 0 ? poisoned(p->gpu, (size_t)m * n) : up(p->gpu, y0, (size_t)m * n * 4);
  cr_assert_eq(dev_matmul(p->cpu, m, n, k, xc, wc, beta, yc), SC_OK);
  cr_assert_eq(dev_matmul(p->gpu, m, n, k, xg, wg, beta, yg), SC_OK, "%s", dev_last_error(p->gpu));
  float *a = down(p->gpu, yg, (size_t)m * n), *b = down(p->cpu, yc, (size_t)m * n);
  char what[96];
  snprintf(what, sizeof what, "matmul m=%d n=%d k=%d beta=%g", m, n, k, beta);
  expect_close(what, a, b, (size_t)m * n, F32_TOL);
  // int8: the same quantized weights on both sides
  int8_t *q = malloc((size_t)n * k);
  float *sc = malloc((size_t)n * sizeof *sc);
  dev_q8_quantize(w, n, k, q, sc);
  int8_t *qc = up(p->cpu, q, (size_t)n * k), *qg = up(p->gpu, q, (size_t)n * k);
  float *sc_c = up(p->cpu, sc, (size_t)n * 4), *sc_g = up(p->gpu, sc, (size_t)n * 4);
  float *yc8 = beta == 0 ? poisoned(p->cpu, (size_t)m * n) : up(p->cpu, y0, (size_t)m * n * 4);
  float *yg8 = beta == 0 ? poisoned(p->gpu, (size_t)m * n) : up(p->gpu, y0, (size_t)m * n * 4);
  cr_assert_eq(dev_matmul_q8(p->cpu, m, n, k, xc, qc, sc_c, beta, yc8), SC_OK);
  cr_assert_eq(dev_matmul_q8(p->gpu, m, n, k, xg, qg, sc_g, beta, yg8), SC_OK, "%s",
               dev_last_error(p->gpu));
  float *a8 = down(p->gpu, yg8, (size_t)m * n), *b8 = down(p->cpu, yc8, (size_t)m * n);
  snprintf(what, sizeof what, "matmul_q8 m=%d n=%d k=%d beta=%g", m, n, k, beta);
  expect_close(what, a8, b8, (size_t)m * n, F32_TOL);
  // bf16 weights (and activations rounded to bf16), fp32 sums: against the CPU's f32 product of
  // the same rounded inputs, so what is compared is the GPU's arithmetic, not bf16's rounding
  // (which alone moves a small output after cancellation past 1e-2 of the unrounded product)
  uint16_t *h = malloc((size_t)n * k * sizeof *h);
  dev_bf16_from_f32(w, (size_t)n * k, h);
  uint16_t *hx = malloc((size_t)m * k * sizeof *hx);
  dev_bf16_from_f32(x, (size_t)m * k, hx);
  float *xr = malloc((size_t)m * k * 4), *wr = malloc((size_t)n * k * 4);
  for (size_t i = 0; i < (size_t)m * k; i++) {
    uint32_t u = (uint32_t)hx[i] << 16;
    memcpy(&xr[i], &u, 4);
  }
  for (size_t i = 0; i < (size_t)n * k; i++) {
    uint32_t u = (uint32_t)h[i] << 16;
    memcpy(&wr[i], &u, 4);
  }
  float *xrc = up(p->cpu, xr, (size_t)m * k * 4), *wrc = up(p->cpu, wr, (size_t)n * k * 4);
  float *yrc = beta == 0 ? poisoned(p->cpu, (size_t)m * n) : up(p->cpu, y0, (size_t)m * n * 4);
  cr_assert_eq(dev_matmul(p->cpu, m, n, k, xrc, wrc, beta, yrc), SC_OK);
  float *br = down(p->cpu, yrc, (size_t)m * n);
  dev_free(p->cpu, xrc), dev_free(p->cpu, wrc), dev_free(p->cpu, yrc);
  free(hx), free(xr), free(wr);
  uint16_t *hg = up(p->gpu, h, (size_t)n * k * sizeof *h);
  float *ygh = beta == 0 ? poisoned(p->gpu, (size_t)m * n) : up(p->gpu, y0, (size_t)m * n * 4);
  cr_assert_eq(dev_matmul_bf16(p->gpu, m, n, k, xg, hg, beta, ygh), SC_OK, "%s",
               dev_last_error(p->gpu));
  float *ah = down(p->gpu, ygh, (size_t)m * n);
  snprintf(what, sizeof what, "matmul_bf16 m=%d n=%d k=%d beta=%g", m, n, k, beta);
  expect_close(what, ah, br, (size_t)m * n, BF16_RND_TOL);
  free(br);
  dev_free(p->gpu, hg);
  dev_free(p->gpu, ygh);
  free(h), free(ah);
  // fp16 weights (x rounded to fp16), against the CPU's f32 product of the same rounded inputs
  uint16_t *e16 = malloc((size_t)n * k * sizeof *e16), *ex16 = malloc((size_t)m * k * sizeof *ex16);
  dev_f16_from_f32(w, (size_t)n * k, e16);
  dev_f16_from_f32(x, (size_t)m * k, ex16);
  float *xe = malloc((size_t)m * k * 4), *we = malloc((size_t)n * k * 4);
  for (size_t i = 0; i < (size_t)m * k + (size_t)n * k; i++) { // the halves back to floats
    const uint16_t *src = i < (size_t)m * k ? &ex16[i] : &e16[i - (size_t)m * k];
    _Float16 hv;
    memcpy(&hv, src, sizeof hv);
    *(i < (size_t)m * k ? &xe[i] : &we[i - (size_t)m * k]) = (float)hv;
  }
  float *xec = up(p->cpu, xe, (size_t)m * k * 4), *wec = up(p->cpu, we, (size_t)n * k * 4);
  float *yec = beta == 0 ? poisoned(p->cpu, (size_t)m * n) : up(p->cpu, y0, (size_t)m * n * 4);
  cr_assert_eq(dev_matmul(p->cpu, m, n, k, xec, wec, beta, yec), SC_OK);
  float *be = down(p->cpu, yec, (size_t)m * n);
  uint16_t *eg = up(p->gpu, e16, (size_t)n * k * sizeof *e16);
  float *yge = beta == 0 ? poisoned(p->gpu, (size_t)m * n) : up(p->gpu, y0, (size_t)m * n * 4);
  cr_assert_eq(dev_matmul_f16(p->gpu, m, n, k, xg, eg, beta, yge), SC_OK, "%s",
               dev_last_error(p->gpu));
  float *ae = down(p->gpu, yge, (size_t)m * n);
  snprintf(what, sizeof what, "matmul_f16 m=%d n=%d k=%d beta=%g", m, n, k, beta);
  expect_close(what, ae, be, (size_t)m * n, BF16_RND_TOL);
  dev_free(p->cpu, xec), dev_free(p->cpu, wec), dev_free(p->cpu, yec);
  dev_free(p->gpu, eg), dev_free(p->gpu, yge);
  free(e16), free(ex16), free(xe), free(we), free(be), free(ae);
  void *cpu_bufs[] = {xc, wc, yc, qc, sc_c, yc8}, *gpu_bufs[] = {xg, wg, yg, qg, sc_g, yg8};
  for (int i = 0; i < 6; i++) {
    dev_free(p->cpu, cpu_bufs[i]);
    dev_free(p->gpu, gpu_bufs[i]);
  }
  free(x), free(w), free(y0), free(a), free(b), free(q), free(sc), free(a8), free(b8);
}

Test(cuda_ops, matmul_f32_int8_and_bf16_match_the_cpu_over_odd_and_large_shapes) {
  pair p = open_pair();
  rng r = {1};
  // 1 row with k % 8 == 0 takes the bf16 decode kernel (1, 2 or 4 columns per warp, the
  // last warp's columns past n clamped); the others cuBLAS
  const int shapes[][3] = {{1, 1, 1},       {1, 257, 129},   {3, 64, 4096},  {7, 1000, 33},
                           {37, 96, 511},   {128, 512, 512}, {300, 130, 77}, {1, 4101, 1024},
                           {4, 8192, 2048}, {8, 4096, 1024}, {5, 3001, 264}};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    matmul_case(&p, &r, shapes[i][0], shapes[i][1], shapes[i][2], 0.0f);
    matmul_case(&p, &r, shapes[i][0], shapes[i][1], shapes[i][2], 0.5f);
  }
  // up to 8 rows through the decode kernel, which takes 1 by default (bench_cuda times both
  // ways to set where it stops)
  sck_set_variants(&(sck_variants){.small_rows = 8});
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
    if (shapes[i][0] <= 8) matmul_case(&p, &r, shapes[i][0], shapes[i][1], shapes[i][2], 0.5f);
  sck_set_variants(NULL);
  close_pair(&p);
}

// A group of bf16 products of one x (q, k, v; gate, up) gives each product's bits as a call of
// its own: one launch for a decode batch, one matmul_bf16 each beyond 8 rows or for odd k.
Test(cuda_ops, a_bf16_group_gives_the_bits_of_separate_products) {
  sck_set_variants(&(sck_variants){.small_rows = 8}); // the kernel up to 8 rows (1 by default)
  pair p = open_pair();
  rng r = {11};
  const int shapes[][2] = {{1, 512}, {3, 512}, {8, 4096}, {12, 512}, {2, 100}};
  const int ns[3] = {640, 128, 130};
  for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
    int m = shapes[si][0], k = shapes[si][1];
    float *x = rand_host(&r, (size_t)m * k, 1.0f);
    float *xg = up(p.gpu, x, (size_t)m * k * 4);
    const uint16_t *wg[3];
    float *ys[3], *yg[3];
    for (int i = 0; i < 3; i++) {
      float *w = rand_host(&r, (size_t)ns[i] * k, 0.05f);
      uint16_t *h = malloc((size_t)ns[i] * k * sizeof *h);
      dev_bf16_from_f32(w, (size_t)ns[i] * k, h);
      wg[i] = up(p.gpu, h, (size_t)ns[i] * k * sizeof *h);
      ys[i] = poisoned(p.gpu, (size_t)m * ns[i]);
      yg[i] = poisoned(p.gpu, (size_t)m * ns[i]);
      cr_assert_eq(dev_matmul_bf16(p.gpu, m, ns[i], k, xg, wg[i], 0.0f, ys[i]), SC_OK, "%s",
                   dev_last_error(p.gpu));
      free(w), free(h);
    }
    cr_assert_eq(dev_matmul_bf16_group(p.gpu, m, k, xg, 3, wg, ns, yg), SC_OK, "%s",
                 dev_last_error(p.gpu));
    for (int i = 0; i < 3; i++) {
      float *a = down(p.gpu, yg[i], (size_t)m * ns[i]), *b = down(p.gpu, ys[i], (size_t)m * ns[i]);
      size_t differ = 0;
      for (size_t e = 0; e < (size_t)m * ns[i]; e++) differ += memcmp(&a[e], &b[e], 4) != 0;
      cr_expect_eq(differ, 0, "group m=%d k=%d, product %d: %zu of %zu outputs differ", m, k, i,
                   differ, (size_t)m * ns[i]);
      free(a), free(b);
      dev_free(p.gpu, (void *)wg[i]), dev_free(p.gpu, ys[i]), dev_free(p.gpu, yg[i]);
    }
    dev_free(p.gpu, xg);
    free(x);
  }
  sck_set_variants(NULL);
  close_pair(&p);
}

// --- the elementwise and normalization ops

Test(cuda_ops, rmsnorm_rope_swiglu_add_and_embedding_match_the_cpu) {
  pair p = open_pair();
  rng r = {2};
  const int m = 37, d = 4096, nh = 32, hd = 128, vocab = 700, row0 = 300, rows = 250;
  size_t md = (size_t)m * d;
  float *x = rand_host(&r, md, 2.0f), *w = rand_host(&r, (size_t)d, 1.0f);
  float *xc = up(p.cpu, x, md * 4), *xg = up(p.gpu, x, md * 4);
  float *wc = up(p.cpu, w, (size_t)d * 4), *wg = up(p.gpu, w, (size_t)d * 4);
  // rmsnorm into a fresh buffer, then in place
  float *yc = poisoned(p.cpu, md), *yg = poisoned(p.gpu, md);
  cr_assert_eq(dev_rmsnorm(p.cpu, m, d, xc, wc, 1e-5f, yc), SC_OK);
  cr_assert_eq(dev_rmsnorm(p.gpu, m, d, xg, wg, 1e-5f, yg), SC_OK, "%s", dev_last_error(p.gpu));
  float *a = down(p.gpu, yg, md), *b = down(p.cpu, yc, md);
  expect_close("rmsnorm", a, b, md, F32_TOL);
  free(a), free(b);
  cr_assert_eq(dev_rmsnorm(p.cpu, m, d, xc, wc, 1e-5f, xc), SC_OK);
  cr_assert_eq(dev_rmsnorm(p.gpu, m, d, xg, wg, 1e-5f, xg), SC_OK);
  a = down(p.gpu, xg, md), b = down(p.cpu, xc, md);
  expect_close("rmsnorm in place", a, b, md, F32_TOL);
  free(a), free(b);
  // rope at scattered positions up to 100k (x is (m, nh, hd) = (m, d))
  int32_t pos[37];
  for (int i = 0; i < m; i++) pos[i] = (int32_t)(rng_next(&r) % 100000);
  pos[0] = 0;
  int32_t *pc = up(p.cpu, pos, sizeof pos), *pg = up(p.gpu, pos, sizeof pos);
  cr_assert_eq(dev_rope(p.cpu, m, nh, hd, pc, 500000.0f, xc), SC_OK);
  cr_assert_eq(dev_rope(p.gpu, m, nh, hd, pg, 500000.0f, xg), SC_OK, "%s", dev_last_error(p.gpu));
  a = down(p.gpu, xg, md), b = down(p.cpu, xc, md);
  expect_close("rope", a, b, md, F32_TOL);
  free(a), free(b);
  // swiglu with gates past float's exp range, into a fresh buffer and in place
  float *g = rand_host(&r, md, 8.0f), *u = rand_host(&r, md, 1.0f);
  g[0] = 100.0f, g[1] = -100.0f, g[2] = 0.0f;
  float *gc = up(p.cpu, g, md * 4), *gg = up(p.gpu, g, md * 4);
  float *uc = up(p.cpu, u, md * 4), *ug = up(p.gpu, u, md * 4);
  float *oc = poisoned(p.cpu, md), *og = poisoned(p.gpu, md);
  cr_assert_eq(dev_swiglu(p.cpu, m, d, gc, uc, oc), SC_OK);
  cr_assert_eq(dev_swiglu(p.gpu, m, d, gg, ug, og), SC_OK, "%s", dev_last_error(p.gpu));
  a = down(p.gpu, og, md), b = down(p.cpu, oc, md);
  expect_close("swiglu", a, b, md, F32_TOL);
  free(a), free(b);
  cr_assert_eq(dev_swiglu(p.cpu, m, d, gc, uc, gc), SC_OK);
  cr_assert_eq(dev_swiglu(p.gpu, m, d, gg, ug, gg), SC_OK);
  a = down(p.gpu, gg, md), b = down(p.cpu, gc, md);
  expect_close("swiglu in place", a, b, md, F32_TOL);
  free(a), free(b);
  // add
  cr_assert_eq(dev_add(p.cpu, md, uc, oc), SC_OK);
  cr_assert_eq(dev_add(p.gpu, md, ug, og), SC_OK, "%s", dev_last_error(p.gpu));
  a = down(p.gpu, og, md), b = down(p.cpu, oc, md);
  expect_close("add", a, b, md, F32_TOL);
  free(a), free(b);
  // embedding of a vocab shard: ids outside [row0, row0 + rows) give zero rows
  float *table = rand_host(&r, (size_t)rows * d, 1.0f);
  int32_t ids[37];
  for (int i = 0; i < m; i++) ids[i] = (int32_t)(rng_next(&r) % vocab);
  ids[0] = row0, ids[1] = row0 + rows - 1, ids[2] = row0 + rows, ids[3] = row0 - 1;
  float *tc = up(p.cpu, table, (size_t)rows * d * 4), *tg = up(p.gpu, table, (size_t)rows * d * 4);
  int32_t *ic = up(p.cpu, ids, sizeof ids), *ig = up(p.gpu, ids, sizeof ids);
  float *ec = poisoned(p.cpu, md), *eg = poisoned(p.gpu, md);
  cr_assert_eq(dev_embedding(p.cpu, m, d, ic, tc, row0, rows, ec), SC_OK);
  cr_assert_eq(dev_embedding(p.gpu, m, d, ig, tg, row0, rows, eg), SC_OK, "%s",
               dev_last_error(p.gpu));
  a = down(p.gpu, eg, md), b = down(p.cpu, ec, md);
  cr_expect_arr_eq(a, b, md * sizeof *a, "embedding: rows are copies, so the bits match");
  free(a), free(b);
  free(x), free(w), free(g), free(u), free(table);
  close_pair(&p); // frees nothing the test needs: device_free releases what is left
}

Test(cuda_ops, argmax_picks_what_the_cpu_picks_and_flags_the_same_rows) {
  pair p = open_pair();
  rng r = {9};
  const int m = 64, n = 128256; // llama3's vocabulary
  float *x = rand_host(&r, (size_t)m * n, 10.0f);
  x[(size_t)1 * n + 5] = 20.0f, x[(size_t)1 * n + 70000] = 20.0f; // a tie: the first wins
  x[(size_t)2 * n + 9] = NAN;
  x[(size_t)3 * n + n - 1] = -INFINITY;
  for (int j = 0; j < n; j++) x[(size_t)4 * n + j] = -1.0f; // all equal: column 0
  float *xc = up(p.cpu, x, (size_t)m * n * 4), *xg = up(p.gpu, x, (size_t)m * n * 4);
  int32_t *ic = NULL, *ig = NULL;
  float *vc = poisoned(p.cpu, m), *vg = poisoned(p.gpu, m);
  cr_assert_eq(dev_alloc(p.cpu, m * 4, (void **)&ic), SC_OK);
  cr_assert_eq(dev_alloc(p.gpu, m * 4, (void **)&ig), SC_OK);
  cr_assert_eq(dev_argmax(p.cpu, m, n, xc, ic, vc), SC_OK);
  cr_assert_eq(dev_argmax(p.gpu, m, n, xg, ig, vg), SC_OK, "%s", dev_last_error(p.gpu));
  int32_t got[64];
  cr_assert_eq(dev_copy(p.gpu, got, ig, sizeof got, DEV_D2H), SC_OK);
  cr_expect_arr_eq(got, ic, sizeof got, "the same picks");
  cr_expect_eq(got[1], 5);
  cr_expect_eq(got[2], -1);
  cr_expect_eq(got[3], -1);
  cr_expect_eq(got[4], 0);
  free(x);
  close_pair(&p);
}

// The device's draws against the host's sampler_pick on the same logits and the same uniform
// draws: greedy rows, temperatures, nucleus sizes from a few tokens to all of them, over a small
// vocabulary and llama3's. The two sum the masses in double in different orders, so a draw
// within about 1e-15 of a boundary could land on its neighbour: at most 1 in 100 may differ
// (each difference is printed), and never a greedy row or a flagged one.
Test(cuda_ops, sampled_picks_are_the_host_samplers) {
  pair p = open_pair();
  rng r = {13};
  const int vocabs[] = {1000, 128256};
  const float temps[] = {0.0f, 0.3f, 0.8f, 1.0f, 1.7f};
  const float tops[] = {1.0f, 0.95f, 0.5f, 0.05f};
  int draws = 0, differ = 0;
  for (int vi = 0; vi < 2; vi++) {
    const int n = vocabs[vi], m = vi ? 40 : 200;
    float *x = rand_host(&r, (size_t)m * n, 4.0f);
    for (int i = 0; i < m; i++) // a few clear favourites, and ties among them
      for (int f = 0; f < 5; f++) x[(size_t)i * n + (size_t)(rng_next(&r) % (uint64_t)n)] = 9.0f;
    x[(size_t)3 * n + 7] = NAN;
    dev_sample_row *rows = malloc((size_t)m * sizeof *rows);
    for (int i = 0; i < m; i++)
      rows[i] = (dev_sample_row){.temperature = temps[i % 5], .top_p = tops[(i / 5) % 4],
                                 .u = sampler_uniform(99, (uint64_t)i)};
    float *xg = up(p.gpu, x, (size_t)m * n * 4);
    int32_t *ig = NULL;
    cr_assert_eq(dev_alloc(p.gpu, (size_t)m * 4, (void **)&ig), SC_OK);
    cr_assert_eq(dev_sample(p.gpu, m, n, xg, rows, ig), SC_OK, "%s", dev_last_error(p.gpu));
    int32_t *got = malloc((size_t)m * 4);
    cr_assert_eq(dev_copy(p.gpu, got, ig, (size_t)m * 4, DEV_D2H), SC_OK);
    void *scratch = malloc(sampler_scratch_bytes(n));
    for (int i = 0; i < m; i++) {
      if (i == 3) {
        cr_expect_eq(got[i], -1, "a row with a NaN is flagged");
        continue;
      }
      sampling_params sp = {.temperature = rows[i].temperature, .top_p = rows[i].top_p,
                            .seed = 99};
      int32_t want = sampler_pick(&sp, x + (size_t)i * n, n, i, scratch);
      draws++;
      if (got[i] == want) continue;
      differ++;
      cr_log_info("vocab %d row %d (t %g, top_p %g, u %.17g): device %d, host %d", n, i,
                  rows[i].temperature, rows[i].top_p, rows[i].u, got[i], want);
      cr_expect(rows[i].temperature > 0.0f, "a greedy row differs");
    }
    free(scratch), free(got), free(rows), free(x);
    dev_free(p.gpu, xg), dev_free(p.gpu, ig);
  }
  cr_log_info("sampled picks: %d of %d draws differ from the host's", differ, draws);
  cr_expect_leq(differ * 100, draws, "%d of %d draws differ", differ, draws);
  close_pair(&p);
}

// --- paged KV cache and attention

// n_seq sequences with a history already in the cache, then a step of new tokens per sequence
// (1: decode; more: a chunk of prefill), GQA heads, blocks shuffled across the cache.
static void attention_case(const char *what, int n_seq, const int *hist, const int *step, int nh,
                           int nkv, int hd, int bs, int max_run, int reduced, uint64_t seed) {
  pair p = open_pair();
  rng r = {seed};
  int max_ctx = 0, n_hist = 0, n_step = 0;
  for (int s = 0; s < n_seq; s++) {
    max_ctx = hist[s] + step[s] > max_ctx ? hist[s] + step[s] : max_ctx;
    n_hist += hist[s];
    n_step += step[s];
  }
  int max_blocks = (max_ctx + bs - 1) / bs, n_blocks = n_seq * max_blocks;
  int32_t *bt = malloc((size_t)n_blocks * sizeof *bt);
  int32_t *perm = malloc((size_t)n_blocks * sizeof *perm);
  for (int i = 0; i < n_blocks; i++) perm[i] = i;
  for (int i = n_blocks - 1; i > 0; i--) { // the blocks of a sequence lie anywhere
    int j = (int)(rng_next(&r) % (uint64_t)(i + 1)), t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
  memcpy(bt, perm, (size_t)n_blocks * sizeof *bt);
  size_t slot = (size_t)nkv * hd, cache = (size_t)n_blocks * bs * slot;
  float *kcache_c = poisoned(p.cpu, cache), *vcache_c = poisoned(p.cpu, cache);
  float *kcache_g = poisoned(p.gpu, cache), *vcache_g = poisoned(p.gpu, cache);
  dev_kv_layer kvc = {kcache_c, vcache_c}, kvg = {kcache_g, vcache_g};
  int32_t *btc = up(p.cpu, bt, (size_t)n_blocks * 4), *btg = up(p.gpu, bt, (size_t)n_blocks * 4);
  for (int phase = 0; phase < 2; phase++) { // 0: store the history; 1: the step + attention
    int n_tok = phase ? n_step : n_hist;
    if (!n_tok) continue;
    int32_t *pos = malloc((size_t)n_tok * 4), *seq = malloc((size_t)n_tok * 4);
    int t = 0;
    for (int s = 0; s < n_seq; s++)
      for (int i = 0; i < (phase ? step[s] : hist[s]); i++, t++) {
        pos[t] = (phase ? hist[s] : 0) + i;
        seq[t] = s;
      }
    size_t kvn = (size_t)n_tok * slot;
    float *k = rand_host(&r, kvn, 1.0f), *v = rand_host(&r, kvn, 1.0f);
    int32_t *posc = up(p.cpu, pos, (size_t)n_tok * 4), *posg = up(p.gpu, pos, (size_t)n_tok * 4);
    int32_t *seqc = up(p.cpu, seq, (size_t)n_tok * 4), *seqg = up(p.gpu, seq, (size_t)n_tok * 4);
    float *kc = up(p.cpu, k, kvn * 4), *kg = up(p.gpu, k, kvn * 4);
    float *vc = up(p.cpu, v, kvn * 4), *vg = up(p.gpu, v, kvn * 4);
    dev_kv_batch bc = {.n_tok = n_tok, .pos = posc, .seq = seqc, .block_tables = btc,
                       .max_blocks = max_blocks, .block_size = bs, .max_run = max_run,
                       .reduced_precision = reduced};
    dev_kv_batch bg = bc;
    bg.pos = posg, bg.seq = seqg, bg.block_tables = btg;
    cr_assert_eq(dev_kv_store(p.cpu, &bc, nkv, hd, kc, vc, kvc), SC_OK);
    cr_assert_eq(dev_kv_store(p.gpu, &bg, nkv, hd, kg, vg, kvg), SC_OK, "%s",
                 dev_last_error(p.gpu));
    if (phase) {
      size_t qn = (size_t)n_tok * nh * hd;
      float *q = rand_host(&r, qn, 1.0f);
      float *qc = up(p.cpu, q, qn * 4), *qg = up(p.gpu, q, qn * 4);
      float *oc = poisoned(p.cpu, qn), *og = poisoned(p.gpu, qn);
      float scale = 1.0f / sqrtf((float)hd);
      cr_assert_eq(dev_attention(p.cpu, &bc, nh, nkv, hd, scale, qc, kvc, oc), SC_OK);
      cr_assert_eq(dev_attention(p.gpu, &bg, nh, nkv, hd, scale, qg, kvg, og), SC_OK, "%s",
                   dev_last_error(p.gpu));
      float *a = down(p.gpu, og, qn), *b = down(p.cpu, oc, qn);
      expect_close(what, a, b, qn, reduced ? REDUCED_TOL : F32_TOL);
      free(a), free(b), free(q);
    }
    free(pos), free(seq), free(k), free(v);
  }
  // the stored cache itself, slot for slot (poison stays where neither side wrote)
  float *a = down(p.gpu, kcache_g, cache), *b = down(p.cpu, kcache_c, cache);
  size_t differ = 0;
  for (size_t i = 0; i < cache; i++) differ += memcmp(&a[i], &b[i], sizeof *a) != 0;
  cr_expect_eq(differ, 0, "%s: kv_store wrote %zu K elements differently", what, differ);
  free(a), free(b), free(bt), free(perm);
  close_pair(&p);
}

// max_run is the batch's hint (dev_kv_batch): from 16 the GPU takes tiles of query tokens
// (head_dim 64 or 128, 1, 2, 4 or 8 query heads per KV head), below one block per token and
// head. A hint larger than the truth only costs time, so decode batches go through the tiled
// kernels too (each token a run of its own). reduced_precision (a bf16 model) puts the tiled
// kernel's products on the tensor cores in TF32, held to 1e-2 like the bf16 matmul.
Test(cuda_ops, attention_decode_over_several_sequences_matches_the_cpu) {
  const int hist[] = {0, 1, 15, 16, 17, 200, 1000, 4095}, step[] = {1, 1, 1, 1, 1, 1, 1, 1};
  attention_case("attention decode hd=128 gqa 32/8", 8, hist, step, 32, 8, 128, 16, 1, 0, 3);
  attention_case("attention decode hd=64 mha 4/4", 8, hist, step, 4, 4, 64, 16, 1, 0, 4);
  attention_case("attention decode, tiled, hd=128 gqa 32/8", 8, hist, step, 32, 8, 128, 16, 64, 0,
                 3);
  attention_case("attention decode, tf32, hd=128 gqa 32/8", 8, hist, step, 32, 8, 128, 16, 64, 1,
                 3);
}

Test(cuda_ops, attention_prefill_chunks_match_the_cpu) {
  const int hist[] = {0, 48, 300}, step[] = {512, 33, 7};
  const int hist2[] = {0}, step2[] = {2048};
  const int hist3[] = {37, 0, 5}, step3[] = {100, 20, 130};
  for (int kind = 0; kind < 3; kind++) { // fp32 tiles; a bf16 model's 16-bit and TF32 tiles
    const char *k = kind == 0 ? "tiled" : kind == 1 ? "16-bit" : "tf32";
    int tf = kind > 0;
    sck_set_variants(&(sck_variants){.attention = kind == 2 ? SCK_ATT_TF32 : SCK_ATT_DEFAULT});
    char w[96];
    snprintf(w, sizeof w, "attention prefill, %s, hd=128 gqa 32/8", k);
    attention_case(w, 3, hist, step, 32, 8, 128, 16, 512, tf, 5);
    snprintf(w, sizeof w, "attention prefill 2048, %s, hd=128 gqa 8/2", k);
    attention_case(w, 1, hist2, step2, 8, 2, 128, 32, 2048, tf, 6);
    snprintf(w, sizeof w, "attention prefill, %s, hd=64 mha 4/4", k);
    attention_case(w, 3, hist3, step3, 4, 4, 64, 16, 130, tf, 7);
    snprintf(w, sizeof w, "attention prefill, %s, hd=64 gqa 8/4", k);
    attention_case(w, 3, hist3, step3, 8, 4, 64, 16, 130, tf, 8);
    snprintf(w, sizeof w, "attention prefill, %s, hd=128 gqa 16/2", k);
    attention_case(w, 3, hist3, step3, 16, 2, 128, 16, 130, tf, 9);
    // a chunk beside decodes of other sequences in one block's tokens
    const int hist4[] = {0, 700, 5, 64, 31}, step4[] = {90, 1, 1, 1, 40};
    snprintf(w, sizeof w, "attention prefill beside decodes, %s, hd=128 gqa 32/8", k);
    attention_case(w, 5, hist4, step4, 32, 8, 128, 16, 90, tf, 10);
  }
  sck_set_variants(NULL);
  attention_case("attention prefill, per token, hd=128 gqa 32/8", 3, hist, step, 32, 8, 128, 16, 0,
                 0, 5);
}

// --- memory, errors, faults

// --- fused ops and graphs

static void expect_same_bits(const char *what, device *d, const float *a, const float *b, size_t n) {
  float *x = down(d, a, n), *y = down(d, b, n);
  size_t differ = 0;
  for (size_t i = 0; i < n; i++) differ += memcmp(&x[i], &y[i], sizeof *x) != 0;
  cr_expect_eq(differ, 0, "%s: %zu of %zu elements differ", what, differ, n);
  free(x), free(y);
}

// The residual add fused with the next norm, and RoPE fused with the KV store, give the bits of
// the ops they replace (the engine runs the fused ones on cuda, the separate ones on the cpu).
Test(cuda_ops, fused_add_rmsnorm_and_rope_kv_store_give_the_bits_of_the_separate_ops) {
  pair p = open_pair();
  device *g = p.gpu;
  rng r = {21};
  const int m = 19, d = 4096, nh = 32, nkv = 8, hd = 128, bs = 16;
  size_t md = (size_t)m * d;
  float *x = rand_host(&r, md, 2.0f), *a = rand_host(&r, md, 1.0f), *w = rand_host(&r, d, 1.0f);
  float *x1 = up(g, x, md * 4), *x2 = up(g, x, md * 4), *ag = up(g, a, md * 4);
  float *wg = up(g, w, (size_t)d * 4), *y1 = poisoned(g, md), *y2 = poisoned(g, md);
  cr_assert_eq(dev_add_rmsnorm(g, m, d, ag, x1, wg, 1e-5f, y1), SC_OK, "%s", dev_last_error(g));
  cr_assert_eq(dev_add(g, md, ag, x2), SC_OK);
  cr_assert_eq(dev_rmsnorm(g, m, d, x2, wg, 1e-5f, y2), SC_OK);
  expect_same_bits("add_rmsnorm: the residual", g, x1, x2, md);
  expect_same_bits("add_rmsnorm: the norm", g, y1, y2, md);
  // rope + kv_store: m tokens of 3 sequences at scattered positions, blocks anywhere
  int32_t pos[19], seq[19], bt[3 * 8];
  for (int i = 0; i < m; i++) seq[i] = i % 3, pos[i] = (int32_t)(i / 3 * 17 + seq[i]);
  for (int i = 0; i < 24; i++) bt[i] = (i * 7) % 24;
  size_t qn = (size_t)m * nh * hd, kn = (size_t)m * nkv * hd, cache = (size_t)24 * bs * nkv * hd;
  float *q = rand_host(&r, qn, 1.0f), *k = rand_host(&r, kn, 1.0f), *v = rand_host(&r, kn, 1.0f);
  float *q1 = up(g, q, qn * 4), *q2 = up(g, q, qn * 4), *k1 = up(g, k, kn * 4);
  float *k2 = up(g, k, kn * 4), *vg = up(g, v, kn * 4);
  dev_kv_layer c1 = {poisoned(g, cache), poisoned(g, cache)};
  dev_kv_layer c2 = {poisoned(g, cache), poisoned(g, cache)};
  dev_kv_batch b = {.n_tok = m, .pos = up(g, pos, sizeof pos), .seq = up(g, seq, sizeof seq),
                    .block_tables = up(g, bt, sizeof bt), .max_blocks = 8, .block_size = bs};
  cr_assert_eq(dev_rope_kv_store(g, &b, nh, nkv, hd, 500000.0f, q1, k1, vg, c1), SC_OK, "%s",
               dev_last_error(g));
  cr_assert_eq(dev_rope(g, m, nh, hd, b.pos, 500000.0f, q2), SC_OK);
  cr_assert_eq(dev_rope(g, m, nkv, hd, b.pos, 500000.0f, k2), SC_OK);
  cr_assert_eq(dev_kv_store(g, &b, nkv, hd, k2, vg, c2), SC_OK);
  expect_same_bits("rope_kv_store: q", g, q1, q2, qn);
  expect_same_bits("rope_kv_store: k", g, k1, k2, kn);
  float *h1 = down(g, c1.k, cache), *h2 = down(g, c2.k, cache), *h3 = down(g, c1.v, cache),
        *h4 = down(g, c2.v, cache);
  size_t differ = 0; // poison (NaN) where neither wrote: compared as bits
  for (size_t i = 0; i < cache; i++)
    differ += (memcmp(&h1[i], &h2[i], 4) != 0) + (memcmp(&h3[i], &h4[i], 4) != 0);
  cr_expect_eq(differ, 0, "rope_kv_store: %zu cache elements differ", differ);
  free(h1), free(h2), free(h3), free(h4);
  free(x), free(a), free(w), free(q), free(k), free(v);
  close_pair(&p);
}

// A graph replays the ops it recorded with the inputs the device holds at replay; a discarded
// recording ran nothing; a fault on the device turns graphs off (its ops then meet the hooks).
Test(cuda_device, a_recorded_graph_replays_its_ops_on_new_inputs) {
  pair p = open_pair();
  device *g = p.gpu;
  rng r = {23};
  const int m = 3, d = 1024;
  size_t md = (size_t)m * d;
  float *x = rand_host(&r, md, 1.0f), *a = rand_host(&r, md, 1.0f), *w = rand_host(&r, d, 1.0f);
  float *xg = up(g, x, md * 4), *ag = up(g, a, md * 4), *wg = up(g, w, (size_t)d * 4);
  float *yg = poisoned(g, md), *xr = up(g, x, md * 4), *yr = poisoned(g, md);
  int mode = -1;
  cr_assert_eq(dev_graph_begin(g, 7, 1, &mode), SC_OK, "%s", dev_last_error(g));
  cr_assert_eq(mode, DEV_GRAPH_RECORDING);
  cr_assert_eq(dev_add_rmsnorm(g, m, d, ag, xg, wg, 1e-5f, yg), SC_OK, "%s", dev_last_error(g));
  cr_assert_eq(dev_graph_end(g, true), SC_OK, "%s", dev_last_error(g));
  cr_assert_eq(dev_add_rmsnorm(g, m, d, ag, xr, wg, 1e-5f, yr), SC_OK);
  expect_same_bits("recorded graph, first run", g, yg, yr, md);
  float *a2 = rand_host(&r, md, 3.0f); // new inputs in the same buffer, then a replay
  cr_assert_eq(dev_copy(g, ag, a2, md * 4, DEV_H2D), SC_OK);
  cr_assert_eq(dev_graph_begin(g, 7, 1, &mode), SC_OK, "%s", dev_last_error(g));
  cr_assert_eq(mode, DEV_GRAPH_REPLAYED);
  cr_assert_eq(dev_add_rmsnorm(g, m, d, ag, xr, wg, 1e-5f, yr), SC_OK);
  expect_same_bits("replayed graph, new inputs", g, yg, yr, md);
  expect_same_bits("replayed graph, the residual", g, xg, xr, md);
  // a discarded recording leaves its outputs as they were
  float *z = poisoned(g, md);
  cr_assert_eq(dev_graph_begin(g, 8, 1, &mode), SC_OK);
  cr_assert_eq(mode, DEV_GRAPH_RECORDING);
  cr_assert_eq(dev_rmsnorm(g, m, d, xr, wg, 1e-5f, z), SC_OK);
  cr_assert_eq(dev_graph_end(g, false), SC_OK);
  float *h = down(g, z, md);
  size_t nans = 0;
  for (size_t i = 0; i < md; i++) nans += isnan(h[i]);
  cr_expect_eq(nans, md, "a discarded recording ran nothing");
  free(h);
  dev_fault f = dev_fault_none();
  f.slow_factor = 1.5;
  device_set_fault(g, &f);
  cr_assert_eq(dev_graph_begin(g, 7, 1, &mode), SC_OK);
  cr_expect_eq(mode, DEV_GRAPH_OFF, "no graph while a fault is set");
  device_set_fault(g, NULL);
  cr_assert_eq(dev_graph_begin(g, 9, 64, &mode), SC_OK);
  cr_expect_eq(mode, DEV_GRAPH_OFF, "no graph of more rows than the decode kernel takes");
  cr_expect_eq(dev_graph_end(g, true), SC_INVALID, "nothing is being recorded");
  free(x), free(a), free(a2), free(w);
  close_pair(&p);
}

Test(cuda_device, memory_is_accounted_zeroed_and_freed) {
  device *d = NULL;
  sc_error err = {{0}};
  cr_assert_eq(device_open("cuda", 0, &d, &err), SC_OK, "%s", err.msg);
  size_t used0 = 0, total = 0, used1 = 0;
  cr_assert_eq(dev_mem_info(d, &used0, &total), SC_OK);
  cr_expect_gt(total, (size_t)1 << 30);
  void *p = NULL;
  cr_assert_eq(dev_alloc(d, 3 << 20, &p), SC_OK);
  cr_assert_eq(dev_mem_info(d, &used1, NULL), SC_OK);
  cr_expect_eq(used1 - used0, (size_t)3 << 20);
  float *h = down(d, p, (3 << 20) / 4);
  size_t nonzero = 0;
  for (size_t i = 0; i < (3 << 20) / 4; i++) nonzero += h[i] != 0.0f;
  cr_expect_eq(nonzero, 0, "alloc hands out zeroed memory");
  free(h);
  dev_free(d, p);
  cr_assert_eq(dev_mem_info(d, &used1, NULL), SC_OK);
  cr_expect_eq(used1, used0);
  void *huge = NULL;
  cr_expect_eq(dev_alloc(d, total + ((size_t)1 << 30), &huge), SC_OOM, "more than the GPU has");
  cr_expect(strstr(dev_last_error(d), "cudaMalloc") != NULL, "%s", dev_last_error(d));
  cr_expect_null(huge);
  cr_assert_eq(dev_alloc(d, 1024, &p), SC_OK, "the failure was not sticky");
  dev_free(d, p);
  device_free(d);
}

Test(cuda_device, an_injected_fault_takes_the_same_path_as_on_the_cpu) {
  pair p = open_pair();
  float *x = NULL;
  cr_assert_eq(dev_alloc(p.gpu, 64 * 4, (void **)&x), SC_OK);
  dev_fault f = dev_fault_none();
  f.lost = true;
  device_set_fault(p.gpu, &f);
  cr_expect_eq(dev_matmul(p.gpu, 1, 8, 8, x, x, 0.0f, x), SC_DEVICE);
  cr_expect_eq(dev_synchronize(p.gpu), SC_DEVICE);
  f = dev_fault_none();
  f.corrupt = DEV_CORRUPT_NAN;
  device_set_fault(p.gpu, &f);
  float *y = poisoned(p.gpu, 64);
  cr_assert_eq(dev_matmul(p.gpu, 8, 8, 8, x, x, 0.0f, y), SC_OK);
  float *h = down(p.gpu, y, 64);
  int nans = 0;
  for (int i = 0; i < 64; i++) nans += isnan(h[i]);
  cr_expect_eq(nans, 1, "one element poisoned (the product of zeros is zero elsewhere)");
  free(h);
  close_pair(&p);
}

// --- the loopback communicator: ranks are threads, all on GPU 0

typedef struct lb_rank {
  comm *c;
  device *d;
  int rank, n;
  size_t len;
  sc_status s_reduce, s_gather, s_ring;
  float *reduced, *gathered, *ring; // host copies of the results
} lb_rank;

// Rank r's input element i, exact in fp32 so that any summation order gives the same sum.
static float lb_value(int r, size_t i) {
  return (float)((int)((i * 7 + (size_t)r * 13) % 1024) - 512);
}

static void *lb_main(void *arg) {
  lb_rank *L = arg;
  size_t n = L->len;
  float *h = malloc(n * sizeof *h);
  for (size_t i = 0; i < n; i++) h[i] = lb_value(L->rank, i);
  float *buf = NULL, *all = NULL, *msg = NULL;
  dev_alloc(L->d, n * 4, (void **)&buf);
  dev_alloc(L->d, n * 4 * (size_t)L->n, (void **)&all);
  dev_alloc(L->d, n * 4, (void **)&msg);
  dev_copy(L->d, buf, h, n * 4, DEV_H2D);
  L->s_reduce = comm_allreduce_sum(L->c, buf, n);
  L->reduced = malloc(n * 4);
  dev_copy(L->d, L->reduced, buf, n * 4, DEV_D2H);
  dev_copy(L->d, buf, h, n * 4, DEV_H2D);
  L->s_gather = comm_allgather(L->c, buf, all, n);
  L->gathered = malloc(n * 4 * (size_t)L->n);
  dev_copy(L->d, L->gathered, all, n * 4 * (size_t)L->n, DEV_D2H);
  // a ring: rank r sends its input to r + 1 and receives r - 1's
  int next = (L->rank + 1) % L->n, prev = (L->rank + L->n - 1) % L->n;
  bool even = L->rank % 2 == 0;
  L->s_ring = even ? comm_send(L->c, buf, n * 4, next) : comm_recv(L->c, msg, n * 4, prev);
  if (L->s_ring == SC_OK)
    L->s_ring = even ? comm_recv(L->c, msg, n * 4, prev) : comm_send(L->c, buf, n * 4, next);
  L->ring = malloc(n * 4);
  dev_copy(L->d, L->ring, msg, n * 4, DEV_D2H);
  dev_free(L->d, buf), dev_free(L->d, all), dev_free(L->d, msg);
  free(h);
  return NULL;
}

Test(cuda_comm, loopback_allreduce_allgather_and_send_recv_on_one_gpu, .timeout = 120) {
  const int sizes[] = {2, 3, 4};
  for (int si = 0; si < 3; si++) {
    int n = sizes[si];
    device *devs[4];
    sc_error err = {{0}};
    for (int r = 0; r < n; r++) cr_assert_eq(device_open("cuda", 0, &devs[r], &err), SC_OK);
    comm_cuda_group *g = NULL;
    cr_assert_eq(comm_cuda_group_new(n, devs, 10000000000ull, &g, &err), SC_OK, "%s", err.msg);
    cr_expect_str_eq(comm_cuda_group_transport(g), "loopback");
    lb_rank L[4];
    pthread_t th[4];
    for (int r = 0; r < n; r++) {
      L[r] = (lb_rank){.c = comm_cuda_group_rank(g, r), .d = devs[r], .rank = r, .n = n,
                       .len = 100003};
      pthread_create(&th[r], NULL, lb_main, &L[r]);
    }
    for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < n; r++) {
      cr_expect_eq(L[r].s_reduce, SC_OK, "%s", comm_cuda_group_error(g));
      cr_expect_eq(L[r].s_gather, SC_OK, "%s", comm_cuda_group_error(g));
      cr_expect_eq(L[r].s_ring, SC_OK, "%s", comm_cuda_group_error(g));
      size_t bad = 0;
      for (size_t i = 0; i < L[r].len; i++) {
        float want = 0;
        for (int j = 0; j < n; j++) want += lb_value(j, i);
        bad += L[r].reduced[i] != want;
        for (int j = 0; j < n; j++)
          bad += L[r].gathered[(size_t)j * L[r].len + i] != lb_value(j, i);
        bad += L[r].ring[i] != lb_value((r + n - 1) % n, i);
      }
      cr_expect_eq(bad, 0, "%d ranks: rank %d has %zu wrong elements", n, r, bad);
      cr_expect_arr_eq(L[r].reduced, L[0].reduced, L[r].len * 4, "same bits on every rank");
    }
    // freed only now: every rank's result is compared with rank 0's
    for (int r = 0; r < n; r++) free(L[r].reduced), free(L[r].gathered), free(L[r].ring);
    comm_cuda_group_free(g);
    for (int r = 0; r < n; r++) device_free(devs[r]);
  }
}

typedef struct wait_arg {
  comm *c;
  device *d;
  sc_status s;
} wait_arg;

static void *wait_main(void *arg) {
  wait_arg *w = arg;
  float *buf = NULL;
  dev_alloc(w->d, 1024, (void **)&buf);
  w->s = comm_allreduce_sum(w->c, buf, 256);
  dev_free(w->d, buf);
  return NULL;
}

Test(cuda_comm, a_missing_peer_times_out_and_abort_ends_a_wait, .timeout = 60) {
  device *devs[2];
  sc_error err = {{0}};
  for (int r = 0; r < 2; r++) cr_assert_eq(device_open("cuda", 0, &devs[r], &err), SC_OK);
  comm_cuda_group *g = NULL;
  cr_assert_eq(comm_cuda_group_new(2, devs, 200000000ull, &g, &err), SC_OK, "%s", err.msg);
  wait_arg w = {.c = comm_cuda_group_rank(g, 0), .d = devs[0]};
  wait_main(&w); // rank 1 never comes: the 0.2 s deadline passes
  cr_expect_eq(w.s, SC_TIMEOUT);
  comm_cuda_group_free(g);
  cr_assert_eq(comm_cuda_group_new(2, devs, 60000000000ull, &g, &err), SC_OK, "%s", err.msg);
  w = (wait_arg){.c = comm_cuda_group_rank(g, 0), .d = devs[0]};
  pthread_t th;
  pthread_create(&th, NULL, wait_main, &w);
  struct timespec ts = {0, 100000000};
  nanosleep(&ts, NULL);
  comm_cuda_group_abort(g);
  pthread_join(th, NULL);
  cr_expect_eq(w.s, SC_ABORTED);
  comm_cuda_group_free(g);
  for (int r = 0; r < 2; r++) device_free(devs[r]);
}

// --- the engine: greedy tokens against the CPU engine, and TP on one GPU against tp=1

#define MAX_TOK 32

static void watch_nothing(void *ud, uint64_t req_id, int index, const float *logits, int vocab) {
  (void)ud, (void)req_id, (void)index, (void)logits, (void)vocab;
}

// MAX_TOK tokens of one 12-token prompt: greedy, or drawn with sampling params sp (NULL:
// greedy); host: a logits watcher, so the host samples every token
static void generate(const char *preset, const char *backend, int tp, sc_dtype dtype,
                     const sampling_params *sp, bool host, int32_t out[MAX_TOK]) {
  engine_config c = engine_config_defaults();
  sc_error err = {{0}};
  cr_assert_eq(model_preset_load(preset, &c.model, &err), SC_OK, "%s", err.msg);
  c.weight_dtype = dtype;
  if (host) c.on_logits = watch_nothing;
  c.backend = backend;
  c.tp = tp;
  c.weights_seed = 1;
  c.kv_blocks = 64;
  c.max_running = 4;
  c.token_budget = 256;
  c.n_devices = 1; // every rank on GPU 0: TP through the loopback communicator
  engine *e = NULL;
  cr_assert_eq(engine_new(&c, &e, &err), SC_OK, "%s %s tp=%d: %s", preset, backend, tp, err.msg);
  int32_t prompt[12];
  for (int i = 0; i < 12; i++) prompt[i] = 3 + (i * 37) % 500;
  engine_request q = {.prompt = prompt, .n_prompt = 12, .max_tokens = MAX_TOK};
  if (sp) q.sampling = *sp;
  uint64_t id = 0;
  cr_assert_eq(engine_submit(e, &q, &id, &err), SC_OK, "%s", err.msg);
  int n = 0;
  for (int guard = 0; !engine_idle(e); guard++) {
    engine_step_result res;
    cr_assert_eq(engine_step(e, &res, &err), SC_OK, "%s %s tp=%d: %s", preset, backend, tp,
                 err.msg);
    for (int k = 0; k < res.n_events; k++)
      if (res.events[k].kind == ENGINE_EV_TOKEN && n < MAX_TOK) out[n++] = res.events[k].token;
    cr_assert_lt(guard, 10000);
  }
  cr_assert_eq(n, MAX_TOK);
  engine_free(e);
}

static void greedy(const char *preset, const char *backend, int tp, int32_t out[MAX_TOK]) {
  generate(preset, backend, tp, SC_F32, NULL, false, out);
}

Test(cuda_engine, fp32_greedy_tokens_match_the_cpu_engine_and_tp_on_one_gpu, .timeout = 600) {
  const char *presets[] = {"llama-tiny", "llama-small"};
  for (int i = 0; i < 2; i++) {
    int32_t cpu[MAX_TOK], gpu[MAX_TOK];
    greedy(presets[i], "cpu", 1, cpu);
    greedy(presets[i], "cuda", 1, gpu);
    cr_expect_arr_eq(gpu, cpu, sizeof cpu, "%s: cuda tp=1 greedy tokens differ from cpu",
                     presets[i]);
    for (int tp = 2; tp <= 4; tp *= 2) {
      int32_t t[MAX_TOK];
      greedy(presets[i], "cuda", tp, t);
      cr_expect_arr_eq(t, gpu, sizeof t, "%s: cuda tp=%d differs from tp=1", presets[i], tp);
    }
  }
}
// A 16-bit model's decode steps replay graphs (one per batch size) on a rank of its own: the
// same greedy tokens as with every op enqueued one by one (SHARDCHECK_CUDA_GRAPHS=0), and graphs
// were in fact recorded (the backend counts them) in the one run and not in the other.
Test(cuda_engine, decode_graphs_give_the_tokens_of_ops_one_by_one, .timeout = 600) {
  const char *presets[] = {"llama-tiny", "llama-small"};
  const sc_dtype dtypes[] = {SC_BF16, SC_F16};
  for (int i = 0; i < 2; i++)
    for (int di = 0; di < 2; di++) {
      const char *dn = sc_dtype_name(dtypes[di]);
      int32_t with[MAX_TOK], without[MAX_TOK];
      unsetenv("SHARDCHECK_CUDA_GRAPHS");
      long g0 = cuda_graphs_recorded();
      generate(presets[i], "cuda", 1, dtypes[di], NULL, false, with);
      long g1 = cuda_graphs_recorded();
      cr_expect_gt(g1, g0, "%s %s: no graph was recorded", presets[i], dn);
      setenv("SHARDCHECK_CUDA_GRAPHS", "0", 1);
      generate(presets[i], "cuda", 1, dtypes[di], NULL, false, without);
      cr_expect_eq(cuda_graphs_recorded(), g1, "%s %s: SHARDCHECK_CUDA_GRAPHS=0 recorded a graph",
                   presets[i], dn);
      unsetenv("SHARDCHECK_CUDA_GRAPHS");
      cr_expect_arr_eq(with, without, sizeof with, "%s %s: tokens with graphs differ", presets[i],
                       dn);
    }
}

// Sampled tokens drawn on the GPU (one TP rank) are the tokens the host's sampler draws from
// the same logits (a logits watcher makes the host sample), for an f32 and a bf16 model.
Test(cuda_engine, tokens_drawn_on_the_device_are_the_host_samplers, .timeout = 600) {
  const sampling_params sps[] = {{.temperature = 0.8f, .top_p = 0.95f, .seed = 5},
                                 {.temperature = 1.3f, .top_p = 1.0f, .seed = 6}};
  const sc_dtype dtypes[] = {SC_F32, SC_BF16};
  for (int di = 0; di < 2; di++)
    for (int si = 0; si < 2; si++) {
      int32_t dev[MAX_TOK], host[MAX_TOK];
      generate("llama-small", "cuda", 1, dtypes[di], &sps[si], false, dev);
      generate("llama-small", "cuda", 1, dtypes[di], &sps[si], true, host);
      cr_expect_arr_eq(dev, host, sizeof dev, "%s, temperature %g: device draws differ",
                       sc_dtype_name(dtypes[di]), sps[si].temperature);
    }
}
#endif
