// Quality delta between weight versions (faults/quality.c): the same weights agree exactly,
// other weights do not, the KL divergence matches hand-computed values, and what cannot be
// compared is refused with a reason.
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "faults/quality.h"
#include "tests/helpers.h"

static engine_config tiny(uint64_t seed) {
  engine_config c = engine_config_defaults();
  sc_error err = {{0}};
  cr_assert_eq(model_preset_load("llama-tiny", &c.model, &err), SC_OK, "%s", err.msg);
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

Test(quality, the_same_weights_agree_everywhere_with_zero_divergence, .timeout = 60) {
  fill_prompts();
  engine_config a = tiny(7);
  fq_result r;
  sc_error err = {{0}};
  cr_assert_eq(fq_compare(&a, &a, prompts, lens, NP, NT, &r, &err), SC_OK, "%s", err.msg);
  cr_expect_eq(r.prompts, NP);
  cr_expect_eq(r.positions, NP * NT);
  cr_expect_eq(r.agree, NP * NT);
  cr_expect_float_eq(r.agreement, 1.0, 1e-12);
  cr_expect_lt(r.kl_mean, 1e-9, "kl_mean %g", r.kl_mean);
  cr_expect_lt(r.kl_max, 1e-9, "kl_max %g", r.kl_max);
}

Test(quality, other_weights_disagree_and_diverge, .timeout = 60) {
  fill_prompts();
  engine_config a = tiny(7), b = tiny(8);
  fq_result r;
  sc_error err = {{0}};
  cr_assert_eq(fq_compare(&a, &b, prompts, lens, NP, NT, &r, &err), SC_OK, "%s", err.msg);
  cr_expect_eq(r.positions, NP * NT);
  cr_expect_lt(r.agreement, 0.5, "random models agree at %g", r.agreement);
  cr_expect_gt(r.kl_mean, 0.01);
  cr_expect_geq(r.kl_max, r.kl_mean);
}

Test(quality, kl_of_logits_matches_hand_values) {
  const float a[2] = {0, 0}, b[2] = {0, (float)log(3.0)}; // p = (1/2, 1/2), q = (1/4, 3/4)
  cr_expect_float_eq(fq_kl_logits(a, b, 2), 0.5 * log(4.0 / 3.0), 1e-6);
  cr_expect_float_eq(fq_kl_logits(a, a, 2), 0.0, 1e-12);
  // shifting every logit changes nothing; a token a rules out contributes nothing
  const float c[3] = {100, 100, -1e30f}, d[3] = {7, 7, 7};
  cr_expect_float_eq(fq_kl_logits(c, d, 3), log(1.5), 1e-6); // p = (1/2, 1/2, 0), q = 1/3 each
}

Test(quality, what_cannot_be_compared_is_refused_with_a_reason) {
  fill_prompts();
  engine_config a = tiny(7), b = tiny(7);
  fq_result r;
  sc_error err = {{0}};
  cr_expect_eq(fq_compare(&a, &b, prompts, lens, NP, 0, &r, &err), SC_INVALID);
  b.backend = "sim";
  cr_expect_eq(fq_compare(&a, &b, prompts, lens, NP, NT, &r, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "simulated replicas produce no logits"), "%s", err.msg);
  b = tiny(7);
  b.model.vocab_size += 1;
  cr_expect_eq(fq_compare(&a, &b, prompts, lens, NP, NT, &r, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "different vocabularies"), "%s", err.msg);
}
