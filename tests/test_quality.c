// Quality delta between weight versions (faults/quality.c): the same weights agree exactly,
// int8 weights stay close to their f32 originals, other weights do not, the KL divergence
// matches hand-computed values, and what cannot be compared is refused with a reason.
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "config/presets.h"
#include "faults/quality.h"
#include "tests/helpers.h"

// llama-tiny (vocab 512, context 512) with generated weights, one thread, one rank.
static engine_config tiny(uint64_t seed) {
  engine_config c = sc_test_engine_config("llama-tiny");
  c.backend = "cpu";
  c.tp = c.pp = 1;
  c.weights_seed = seed;
  c.kv_blocks = 256;
  c.max_running = 64;
  c.threads = 1;
  return c;
}

enum { NP = 3, NT = 6 };
static int32_t P[NP][12];
static const int32_t *prompts[NP] = {P[0], P[1], P[2]};
static const int lens[NP] = {5, 9, 12};

static void fill_prompts(void) {
  for (int i = 0; i < NP; i++)
    for (int j = 0; j < 12; j++) P[i][j] = 3 + (i * 131 + j * 17) % 400;
}

static fq_result compare(const engine_config *a, const engine_config *b, int n_tokens) {
  fill_prompts();
  fq_result r;
  memset(&r, 0xff, sizeof r);
  sc_error err = {{0}};
  cr_assert_eq(fq_compare(a, b, prompts, lens, NP, n_tokens, &r, &err), SC_OK, "%s", err.msg);
  cr_log_info("%d positions: agreement %.4f, kl_mean %.3g, kl_max %.3g nats", r.positions,
              r.agreement, r.kl_mean, r.kl_max);
  return r;
}

// --- comparisons on real engines

// A's rows after the first come from decode steps, B's from prefills, whose sums run in another
// order: the logits differ in the last bits (KL ~1e-13 measured), never in the argmax.
Test(quality, the_same_weights_agree_everywhere_and_differ_only_by_rounding, .timeout = 60) {
  engine_config a = tiny(7);
  fq_result r = compare(&a, &a, NT);
  cr_expect_eq(r.prompts, NP);
  cr_expect_eq(r.positions, NP * NT);
  cr_expect_eq(r.agree, NP * NT);
  cr_expect_eq(r.agreement, 1.0);
  cr_expect_lt(r.kl_max, 1e-10, "kl_max %g", r.kl_max);
  cr_expect_leq(r.kl_mean, r.kl_max);
  cr_expect_geq(r.kl_mean, 0.0);
}

// With one token per prompt both engines run the same prefill batch: bit-identical logits.
Test(quality, one_token_per_prompt_compares_identical_prefills_exactly, .timeout = 60) {
  engine_config a = tiny(7);
  fq_result r = compare(&a, &a, 1);
  cr_expect_eq(r.positions, NP);
  cr_expect_eq(r.agreement, 1.0);
  cr_expect_eq(r.kl_mean, 0.0);
  cr_expect_eq(r.kl_max, 0.0);
}

Test(quality, other_weights_disagree_and_diverge, .timeout = 60) {
  engine_config a = tiny(7), b = tiny(8);
  fq_result r = compare(&a, &b, NT);
  cr_expect_eq(r.positions, NP * NT);
  cr_expect_lt(r.agreement, 0.5, "random models agree at %g", r.agreement); // 0 measured
  cr_expect_gt(r.kl_mean, 0.1, "kl_mean %g", r.kl_mean);                       // ~1 measured
  cr_expect_geq(r.kl_max, r.kl_mean);
}

// int8 weight-only quantization of the same weights: measured agreement 1.0 here (0.98 over 8
// prompts x 16 tokens), kl_mean ~3e-5 nats, both directions alike; rounding alone gives ~1e-13.
Test(quality, int8_weights_stay_close_to_their_f32_originals, .timeout = 60) {
  engine_config a = tiny(7), b = tiny(7);
  b.weight_dtype = SC_I8;
  fq_result r = compare(&a, &b, NT);
  cr_expect_eq(r.positions, NP * NT);
  cr_expect_geq(r.agreement, 0.8, "agreement %g", r.agreement);
  cr_expect_gt(r.kl_mean, 1e-7, "kl_mean %g: are the int8 weights used?", r.kl_mean);
  cr_expect_lt(r.kl_mean, 1e-3, "kl_mean %g", r.kl_mean);
  cr_expect_lt(r.kl_max, 1e-2, "kl_max %g", r.kl_max);
}

// --- the divergence itself

Test(quality, kl_of_logits_matches_hand_values) {
  const float a[2] = {0, 0}, b[2] = {0, (float)log(3.0)}; // p = (1/2, 1/2), q = (1/4, 3/4)
  cr_expect_float_eq(fq_kl_logits(a, b, 2), 0.5 * log(2.0) + 0.5 * log(2.0 / 3.0), 1e-7);
  cr_expect_float_eq(fq_kl_logits(b, a, 2), 0.25 * log(0.5) + 0.75 * log(1.5), 1e-7);
  cr_expect_eq(fq_kl_logits(a, a, 2), 0.0);
  // shifting every logit changes nothing; a token p rules out contributes nothing
  const float c[3] = {100, 100, -1e30f}, d[3] = {7, 7, 7};
  cr_expect_float_eq(fq_kl_logits(c, d, 3), log(1.5), 1e-7); // p = (1/2, 1/2, 0), q = 1/3 each
  // logits far beyond exp's range: p = (1, ~e^-1000), q = (~e^-1000, 1), KL = 1000
  const float e[2] = {1000, 0}, f[2] = {0, 1000};
  cr_expect_float_eq(fq_kl_logits(e, f, 2), 1000.0, 1e-9);
}

// A small perturbation of one logit: KL = log(1 + e^eps) - log 2 - eps / 2 ~ eps^2 / 8.
Test(quality, a_small_perturbation_gives_the_second_order_divergence) {
  const float eps = 1e-3f;
  const float a[2] = {0, 0}, b[2] = {0, eps};
  double want = log1p(exp((double)eps)) - log(2.0) - (double)eps / 2;
  double got = fq_kl_logits(a, b, 2);
  cr_expect_float_eq(got, want, 1e-3 * want, "got %.9g want %.9g", got, want);
  cr_expect_float_eq(got, (double)eps * eps / 8, 1e-3 * want);
}

// --- refusals

static void expect_refused(const engine_config *a, const engine_config *b, const int32_t *const *p,
                           const int *n, int n_prompts, int n_tokens, sc_status want,
                           const char *msg) {
  fq_result r = {.prompts = -7};
  sc_error err = {{0}};
  cr_expect_eq(fq_compare(a, b, p, n, n_prompts, n_tokens, &r, &err), want, "%s", err.msg);
  cr_expect(strstr(err.msg, msg), "'%s' does not say '%s'", err.msg, msg);
  cr_expect_eq(r.prompts, -7, "the result was written on error");
}

Test(quality, what_cannot_be_compared_is_refused_with_a_reason) {
  fill_prompts();
  engine_config a = tiny(7), b = tiny(7);
  expect_refused(&a, &b, prompts, lens, NP, 0, SC_INVALID, "at least one prompt and one token");
  expect_refused(&a, &b, prompts, lens, 0, NT, SC_INVALID, "at least one prompt and one token");
  b.backend = "sim";
  expect_refused(&a, &b, prompts, lens, NP, NT, SC_INVALID,
                 "quality delta needs a real backend: simulated replicas produce no logits");
  expect_refused(&b, &a, prompts, lens, NP, NT, SC_INVALID, "simulated replicas");
  b = tiny(7);
  b.model.vocab_size = 513;
  expect_refused(&a, &b, prompts, lens, NP, NT, SC_INVALID,
                 "the two weight versions have different vocabularies (512 vs 513): no "
                 "token-level comparison");
  const int empty[NP] = {5, 0, 12};
  expect_refused(&a, &a, prompts, empty, NP, NT, SC_INVALID, "prompt 1 is empty");
  // prompt 2 has 12 tokens: 12 + 501 > 512
  expect_refused(&a, &a, prompts, lens, NP, 501, SC_INVALID,
                 "prompt 2 (12 tokens) and 501 generated tokens exceed the context of 512");
}

Test(quality, more_than_512_mib_of_logits_is_refused_before_building_anything) {
  fill_prompts();
  engine_config a = tiny(7);
  a.model.vocab_size = 1 << 20; // 4 MiB a position: 3 x 64 positions are 768 MiB
  expect_refused(&a, &a, prompts, lens, NP, 64, SC_INVALID, "768 MiB, more than 512 MiB");
}

Test(quality, an_engine_that_cannot_be_built_is_named_with_its_reason, .timeout = 60) {
  fill_prompts();
  engine_config a = tiny(7), b = tiny(7);
  b.tp = 3; // 8 heads do not split 3 ways
  expect_refused(&a, &b, prompts, lens, NP, NT, SC_INVALID, "quality delta: the new weights: ");
  expect_refused(&b, &a, prompts, lens, NP, NT, SC_INVALID, "quality delta: the old weights: ");
}
