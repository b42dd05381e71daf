// Tests of the router's placement policies (serving/router.c): prefix-affinity's consistent
// hashing and its load bound, sticky conversations, cache-aware's estimate; and the router
// policy as the scenario language reads it (a deployment's own, a scaling block's list, an
// unknown name). The replicas are stubs that take every request and never answer: placement
// is all there is to see.
//
// Not here: retries, resumes and the probe (tests of the runner and the fault runtime), that
// every policy has a row (tests/test_tables.c).
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scenarios/scenario.h"
#include "serving/router.h"
#include "tests/helpers.h"

// --- fixtures

enum { NREP = 4, PROMPT = 300 };

static replica_health healthy(void *ctx) {
  (void)ctx;
  return REPLICA_HEALTHY;
}
static replica_health dead(void *ctx) {
  (void)ctx;
  return REPLICA_DEAD;
}
static sc_status take(void *ctx, uint64_t key, const engine_request *r, sc_error *err) {
  (void)ctx, (void)key, (void)r, (void)err;
  return SC_OK;
}

static const replica_i up = {.health = healthy, .submit = take};
static const replica_i down = {.health = dead, .submit = take};

typedef struct bed {
  replica reps[NREP];
  replica *ptrs[NREP];
  req_table reqs;
  router *rt;
} bed;

static bed *bed_new(router_policy p, double load_bound) {
  bed *b = calloc(1, sizeof *b);
  cr_assert(b);
  for (int i = 0; i < NREP; i++) {
    b->reps[i] = (replica){.i = &up, .index = i};
    b->ptrs[i] = &b->reps[i];
  }
  router_config rc = {.policy = p, .load_bound = load_bound, .max_retries = 1};
  b->rt = router_new(&rc, b->ptrs, NREP, &b->reqs, (router_hooks){0});
  cr_assert(b->rt);
  return b;
}

static void bed_free(bed *b) {
  router_free(b->rt);
  req_table_free(&b->reqs);
  free(b);
}

// A prompt whose first 256 tokens are prefix `pre`'s and the rest request `own`'s.
static void prompt_of(int32_t *p, int pre, int own) {
  for (int i = 0; i < PROMPT; i++)
    p[i] = 3 + (int32_t)((i < 256 ? (uint32_t)pre * 7919u + (uint32_t)i * 31u
                                  : (uint32_t)own * 104729u + (uint32_t)i) % 500u);
}

// Sends a request with prompt p (conversation turn after key prev+1 when prev > 0); its key.
static uint64_t send(bed *b, const int32_t *p, uint64_t prev) {
  req_rec q = {.replica = -1, .state = REQ_INFLIGHT, .prev = prev, .conv = prev ? 1 : 0};
  uint64_t k;
  cr_assert(req_table_add(&b->reqs, &q, &k));
  engine_request er = {.prompt = p, .n_prompt = PROMPT, .max_tokens = 4};
  sc_error err = {{0}};
  cr_assert_eq(router_send(b->rt, k, &er, 0, &err), ROUTER_SENT, "%s", err.msg);
  return k;
}

static int where(const bed *b, uint64_t k) { return b->reqs.v[k].replica; }

// The load bound's promise at the moment of a pick: outstanding + 1 <= ceil(c (total + 1) / n)
// with the counts before it.
static void expect_under_bound(const bed *b, int i, double c) {
  int total = 0;
  for (int j = 0; j < NREP; j++) total += router_outstanding(b->rt, j);
  total--; // the pick itself is counted already
  int before = router_outstanding(b->rt, i) - 1;
  cr_expect(before + 1 <= (int)ceil(c * (total + 1) / NREP - 1e-9),
            "replica %d took a request at %d outstanding of %d", i, before, total);
}

// --- prefix-affinity

Test(router, prefix_affinity_sends_each_prefix_to_one_replica_and_spreads_the_prefixes) {
  bed *b = bed_new(ROUTER_PREFIX_AFFINITY, 0);
  int home[64], per_rep[NREP] = {0};
  int32_t p[PROMPT];
  for (int pre = 0; pre < 64; pre++) {
    for (int own = 0; own < 5; own++) {
      prompt_of(p, pre, own);
      uint64_t k = send(b, p, 0);
      int i = where(b, k);
      if (own == 0) home[pre] = i, per_rep[i]++;
      cr_expect_eq(i, home[pre], "prefix %d went to %d, then to %d", pre, home[pre], i);
      router_end(b->rt, k, REQ_OK); // idle again: the bound never binds
    }
  }
  for (int i = 0; i < NREP; i++)
    cr_expect(per_rep[i] >= 6, "replica %d is home to %d of 64 prefixes", i, per_rep[i]);
  bed_free(b);
}

Test(router, prefix_affinity_load_bound_spills_a_hot_prefix_and_holds_every_pick) {
  for (int c10 = 10; c10 <= 20; c10 += 5) {
    double c = c10 / 10.0;
    bed *b = bed_new(ROUTER_PREFIX_AFFINITY, c);
    int32_t p[PROMPT];
    prompt_of(p, 7, 0);
    uint64_t first = send(b, p, 0);
    int home = where(b, first), at_home = 1;
    for (int n = 1; n < 40; n++) { // one hot prefix, never answered
      prompt_of(p, 7, n);
      uint64_t k = send(b, p, 0);
      int i = where(b, k);
      expect_under_bound(b, i, c);
      at_home += i == home;
    }
    // the home replica fills to the bound, no further: ceil(c * 40 / 4) at the end
    int cap = (int)ceil(c * 40 / NREP - 1e-9);
    cr_expect_eq(router_outstanding(b->rt, home), cap, "c %.1f: home holds %d", c,
                 router_outstanding(b->rt, home));
    cr_expect_eq(at_home, cap);
    bed_free(b);
  }
}

Test(router, prefix_affinity_passes_a_dead_home_to_the_next_replica_on_the_ring) {
  bed *b = bed_new(ROUTER_PREFIX_AFFINITY, 0);
  int32_t p[PROMPT];
  prompt_of(p, 3, 0);
  uint64_t k = send(b, p, 0);
  int home = where(b, k);
  router_end(b->rt, k, REQ_OK);
  b->reps[home].i = &down;
  prompt_of(p, 3, 1);
  k = send(b, p, 0);
  int next = where(b, k);
  cr_expect_neq(next, home);
  router_end(b->rt, k, REQ_OK);
  prompt_of(p, 3, 2); // and it stays there while the home is down
  k = send(b, p, 0);
  cr_expect_eq(where(b, k), next);
  bed_free(b);
}

// --- sticky

Test(router, sticky_sends_a_turn_where_its_turn_before_went_within_the_load_bound) {
  bed *b = bed_new(ROUTER_STICKY, 1.25);
  int32_t p[PROMPT];
  prompt_of(p, 1, 0);
  uint64_t convs[NREP];
  for (int c = 0; c < NREP; c++) { // four first turns: least-outstanding, one per replica
    convs[c] = send(b, p, 0);
    router_end(b->rt, convs[c], REQ_OK);
    cr_expect_eq(router_outstanding(b->rt, where(b, convs[c])), 0);
  }
  uint64_t t2 = send(b, p, convs[2] + 1);
  cr_expect_eq(where(b, t2), where(b, convs[2]));
  // a turn whose replica holds more than the bound allows goes elsewhere
  int r2 = where(b, convs[2]);
  for (int n = 0; n < 6; n++) send(b, p, t2 + 1); // pile onto r2 while it may take them
  int on_r2 = router_outstanding(b->rt, r2);
  int total = 0;
  for (int j = 0; j < NREP; j++) total += router_outstanding(b->rt, j);
  cr_expect(on_r2 <= (int)ceil(1.25 * total / NREP), "r2 holds %d of %d", on_r2, total);
  cr_expect(on_r2 < 7, "every turn stuck to replica %d past the bound", r2);
  // a turn whose replica is dead goes elsewhere
  b->reps[where(b, convs[1])].i = &down;
  uint64_t t = send(b, p, convs[1] + 1);
  cr_expect_neq(where(b, t), where(b, convs[1]));
  bed_free(b);
}

// --- cache-aware

Test(router, cache_aware_prefers_the_replica_holding_the_longest_prefix_and_estimates_it) {
  bed *b = bed_new(ROUTER_CACHE_AWARE, 0);
  int32_t p[PROMPT], q[PROMPT];
  prompt_of(p, 9, 0);
  uint64_t k = send(b, p, 0);
  int home = where(b, k);
  router_end(b->rt, k, REQ_OK);
  prompt_of(q, 9, 1); // the same 256-token prefix: 16 full blocks of 16
  cr_expect_eq(router_cached_estimate(b->rt, home, q, PROMPT), 256);
  for (int i = 0; i < NREP; i++)
    if (i != home) cr_expect_eq(router_cached_estimate(b->rt, i, q, PROMPT), 0);
  k = send(b, q, 0);
  cr_expect_eq(where(b, k), home);
  router_end(b->rt, k, REQ_OK);
  // an unseen prefix goes to the least loaded: with one request held on home, not home
  uint64_t held = send(b, q, 0);
  cr_expect_eq(where(b, held), home);
  int32_t r[PROMPT];
  prompt_of(r, 11, 0);
  k = send(b, r, 0);
  cr_expect_neq(where(b, k), home);
  bed_free(b);
}

// --- the language

static scenario *parse(const char *text, sc_error *err) {
  scenario *s = NULL;
  sc_status st = scenario_parse(text, strlen(text), "p.yaml", ".", &s, err);
  return st == SC_OK ? s : NULL;
}

Test(router, a_scaling_block_compares_policies_and_a_deployment_may_name_its_own) {
  static const char text[] =
      "name: p\nmodel: {preset: llama-tiny}\nmode: sim\nhardware: {profile: h100-sxm, gpus: 4}\n"
      "router: {policy: sticky, load_bound: 1.5, affinity_tokens: 64}\n"
      "deployments:\n"
      "  - scaling: {gpus: [4], pattern: dp, policy: [round-robin, prefix-affinity]}\n"
      "  - {dp: 2, policy: cache-aware}\n"
      "  - {dp: 2}\n"
      "workload:\n  prompts: [{input: 8, output: 4}]\n  phases: [{fixed: {requests: 1}}]\n";
  sc_error err = {{0}};
  scenario *s = parse(text, &err);
  cr_assert(s, "%s", err.msg);
  cr_assert_eq(s->n_deployments, 4);
  cr_expect_str_eq(s->deployments[0].label, "dp4-round-robin");
  cr_expect_eq(s->deployments[0].policy, ROUTER_ROUND_ROBIN + 1);
  cr_expect_str_eq(s->deployments[1].label, "dp4-prefix-affinity");
  cr_expect_str_eq(s->deployments[2].label, "dp2-cache-aware");
  cr_expect_str_eq(s->deployments[3].label, "dp2");
  cr_expect_eq(s->deployments[3].policy, 0); // router.policy's
  cr_expect_eq(s->router.policy, ROUTER_STICKY);
  cr_expect_eq(s->router.load_bound, 1.5);
  cr_expect_eq(s->router.affinity_tokens, 64);
  scenario_free(s);
}

Test(router, an_unknown_policy_is_one_line_naming_the_place_and_the_known_names) {
  static const char *const bad[] = {
      "router: {policy: prefix-afinity}\ndeployments: [{dp: 2}]\n",
      "deployments: [{dp: 2, policy: sticki}]\n",
      "deployments: [{scaling: {gpus: [2], pattern: dp, policy: [sticky, nope]}}]\n",
      "router: {load_bound: 0.5}\ndeployments: [{dp: 2}]\n",
  };
  static const char *const where_[] = {"p.yaml:5:18", "p.yaml:5:31", "p.yaml:5:67", "p.yaml:5:22"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char text[1024];
    snprintf(text, sizeof text,
             "name: p\nmodel: {preset: llama-tiny}\nmode: sim\n"
             "hardware: {profile: h100-sxm, gpus: 4}\n%s"
             "workload:\n  prompts: [{input: 8, output: 4}]\n  phases: [{fixed: {requests: 1}}]\n",
             bad[i]);
    sc_error err = {{0}};
    scenario *s = parse(text, &err);
    cr_expect_null(s, "case %zu parsed", i);
    scenario_free(s);
    cr_expect(strstr(err.msg, where_[i]) == err.msg, "case %zu: %s", i, err.msg);
    cr_expect_null(strchr(err.msg, '\n'), "case %zu: more than one line: %s", i, err.msg);
    if (i < 3) cr_expect(strstr(err.msg, "prefix-affinity"), "case %zu names none: %s", i, err.msg);
  }
}
