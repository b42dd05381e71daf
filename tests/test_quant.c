// int8 weight-only weights: the per-row quantizer's error bound, the CPU backend's int8
// matmul (small m: the row-dot path; large m: dequantized tiles through CBLAS) against the
// dequantized f32 product, the fault hooks on it, and an int8 engine that mostly agrees with
// the f32 one (but is not the same).
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "kernels/device.h"
#include "tests/helpers.h"

static float frand(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(*s >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

Test(quant, each_weight_is_within_half_a_step_of_its_row_scale) {
  enum { N = 7, K = 37 };
  float w[N * K];
  uint64_t seed = 1;
  for (int i = 0; i < N * K; i++) w[i] = frand(&seed) * (float)(1 + i % 5);
  for (int i = 0; i < K; i++) w[3 * K + i] = 0; // a row of zeros: scale 0, q 0
  int8_t q[N * K];
  float s[N];
  dev_q8_quantize(w, N, K, q, s);
  for (int j = 0; j < N; j++) {
    float mx = 0;
    for (int i = 0; i < K; i++) mx = fmaxf(mx, fabsf(w[j * K + i]));
    cr_expect_float_eq(s[j], mx / 127.0f, 1e-7f);
    for (int i = 0; i < K; i++) {
      cr_expect_leq(abs(q[j * K + i]), 127);
      cr_expect_leq(fabsf(w[j * K + i] - s[j] * q[j * K + i]), s[j] * 0.5f + 1e-7f, "row %d", j);
    }
  }
  cr_expect_eq(s[3], 0.0f);
}

// The int8 product against the f32 product of the dequantized weights, for m rows.
static void check_matmul(int m, int n, int k, float beta) {
  device *d = NULL;
  sc_error err = {{0}};
  cr_assert_eq(device_open("cpu", 0, &d, &err), SC_OK, "%s", err.msg);
  cr_assert(dev_has_matmul_q8(d));
  float *x = malloc(sizeof(float) * (size_t)m * k), *w = malloc(sizeof(float) * (size_t)n * k);
  float *y = malloc(sizeof(float) * (size_t)m * n), *ref = malloc(sizeof(float) * (size_t)m * n);
  int8_t *q = malloc((size_t)n * k);
  float *s = malloc(sizeof(float) * (size_t)n);
  uint64_t seed = 7 + (uint64_t)m;
  for (int i = 0; i < m * k; i++) x[i] = frand(&seed);
  for (int i = 0; i < n * k; i++) w[i] = frand(&seed);
  dev_q8_quantize(w, n, k, q, s);
  for (int i = 0; i < n * k; i++) w[i] = s[i / k] * q[i]; // dequantized
  for (int i = 0; i < m * n; i++) y[i] = ref[i] = frand(&seed);
  cr_assert_eq(dev_matmul(d, m, n, k, x, w, beta, ref), SC_OK);
  cr_assert_eq(dev_matmul_q8(d, m, n, k, x, q, s, beta, y), SC_OK);
  for (int i = 0; i < m * n; i++)
    cr_assert_float_eq(y[i], ref[i], 1e-4f * (1 + fabsf(ref[i])), "m=%d n=%d k=%d at %d", m, n, k,
                       i);
  // a lost device fails the int8 product like any op
  dev_fault f = dev_fault_none();
  f.lost = true;
  device_set_fault(d, &f);
  cr_expect_eq(dev_matmul_q8(d, m, n, k, x, q, s, beta, y), SC_DEVICE);
  free(x), free(w), free(y), free(ref), free(q), free(s);
  device_free(d);
}

Test(quant, small_m_matches_the_dequantized_product) {
  check_matmul(1, 33, 67, 0.0f);
  check_matmul(3, 64, 128, 0.0f);
  check_matmul(8, 17, 9, 0.5f);
}

Test(quant, large_m_matches_the_dequantized_product) {
  check_matmul(9, 130, 67, 0.0f); // tiles of 64 rows and a ragged last one
  check_matmul(40, 64, 256, 1.0f);
}

static engine_config tiny(sc_dtype wdt) {
  engine_config c = engine_config_defaults();
  sc_error err = {{0}};
  cr_assert_eq(model_preset_load("llama-tiny", &c.model, &err), SC_OK, "%s", err.msg);
  c.backend = "cpu";
  c.tp = c.pp = 1;
  c.weights_seed = 7;
  c.kv_blocks = 64;
  c.max_running = 8;
  c.threads = 1;
  c.weight_dtype = wdt;
  return c;
}

static float first_logits[2][64]; // the first 64 logits of the first row, per engine kind
static int which;

static void keep_first(void *ud, uint64_t req_id, int index, const float *logits, int vocab) {
  (void)ud, (void)req_id;
  if (index == 0) memcpy(first_logits[which], logits, sizeof(float) * (vocab < 64 ? vocab : 64));
}

// Greedy tokens of one prompt on an engine of cfg.
static void greedy(const engine_config *cfg, int salt, int32_t *out, int n) {
  engine *e = NULL;
  sc_error err = {{0}};
  engine_config c = *cfg;
  c.on_logits = keep_first;
  which = cfg->weight_dtype == SC_I8;
  cr_assert_eq(engine_new(&c, &e, &err), SC_OK, "%s", err.msg);
  int32_t prompt[16];
  for (int i = 0; i < 16; i++) prompt[i] = 3 + (i * 41 + salt * 97) % 400;
  engine_request q = {.prompt = prompt, .n_prompt = 16, .max_tokens = n};
  uint64_t id;
  cr_assert_eq(engine_submit(e, &q, &id, &err), SC_OK, "%s", err.msg);
  int got = 0;
  while (!engine_idle(e)) {
    engine_step_result r;
    cr_assert_eq(engine_step(e, &r, &err), SC_OK, "%s", err.msg);
    for (int i = 0; i < r.n_events; i++)
      if (r.events[i].kind == ENGINE_EV_TOKEN && got < n) out[got++] = r.events[i].token;
  }
  cr_assert_eq(got, n);
  engine_free(e);
}

Test(quant, an_int8_engine_mostly_agrees_with_f32_and_is_not_the_same, .timeout = 60) {
  engine_config f = tiny(SC_F32), q = tiny(SC_I8);
  int same = 0, total = 0;
  for (int p = 0; p < 4; p++) {
    int32_t a[12], b[12];
    greedy(&f, p, a, 12);
    greedy(&q, p, b, 12);
    for (int i = 0; i < 12 && a[i] == b[i]; i++) same++; // agreement up to the first divergence
    total += 12;
  }
  cr_expect_geq(same, total / 2, "int8 followed f32 for %d of %d tokens", same, total);
  float diff = 0;
  for (int i = 0; i < 64; i++) diff = fmaxf(diff, fabsf(first_logits[0][i] - first_logits[1][i]));
  cr_expect_gt(diff, 0.0f, "the int8 weights really are other weights");
}

Test(quant, weights_the_cpu_backend_cannot_hold_are_refused) {
  engine_config c = tiny(SC_I4);
  engine *e = NULL;
  sc_error err = {{0}};
  cr_expect_eq(engine_new(&c, &e, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "weight_dtype int4 is not supported by the cpu backend"), "%s",
            err.msg);
  cr_expect_null(e);
}
