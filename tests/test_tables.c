// Sync tests of the tables of growing things (docs/design.md, "The tables"): each walks its
// enum from the first value to the count and fails when a value has no row, a row has no name
// or two rows share one, or the name does not reach what uses it (the scenario language reads
// it, the row's behaviour runs). The idea is curl's Curl_easyopts_check: a table that drifts
// from its enum is caught by a test, not by a user.
//
// Not here: what each row's behaviour does (the tests of the file that owns the table).
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/hardware.h"
#include "faults/kinds.h"
#include "faults/runtime.h"
#include "faults/timeline.h"
#include "kernels/embedded.h"
#include "kernels/knobs.h"
#include "reports/metrics.h"
#include "scenarios/metric_names.h"
#include "scenarios/deployment.h"
#include "scenarios/scenario.h"
#include "scenarios/workload.h"
#include "serving/replica.h"
#include "serving/router.h"
#include "serving/wire.h"
#include "tests/helpers.h"

// --- helpers

// A llama-tiny scenario with one prompt class (`input` as given), one phase (as given) and
// more top-level keys (`extra`, "" for none).
static scenario *parse_with(const char *input, const char *phase, const char *extra) {
  char text[2048];
  snprintf(text, sizeof text,
           "name: tables\nmodel: {preset: llama-tiny}\ndeployments: [{tp: 1}]\n"
           "workload:\n  prompts: [{name: a, input: %s, output: 4}]\n  phases: [%s]\n%s",
           input, phase, extra);
  scenario *s = NULL;
  sc_error err = {{0}};
  cr_assert_eq(scenario_parse(text, strlen(text), "tables.yaml", ".", &s, &err), SC_OK, "%s\n%s",
               err.msg, text);
  return s;
}

// --- length distributions and arrival processes (scenarios/workload.c)

Test(tables, every_length_distribution_has_a_row_the_language_reads_and_draws) {
  for (int k = 0; k < SCN_DIST_N; k++) {
    const wl_dist_info *i = workload_dist((scn_dist_kind)k);
    cr_assert(i && i->name && i->name[0], "distribution %d has no row", k);
    for (int j = 0; j < k; j++) cr_expect_str_neq(workload_dist((scn_dist_kind)j)->name, i->name);
    char input[128];
    switch (i->form) {
    case WL_FORM_COUNT: snprintf(input, sizeof input, "8"); break;
    case WL_FORM_PAIR: snprintf(input, sizeof input, "{%s: [4, 8]}", i->name); break;
    case WL_FORM_PARAMS:
      cr_assert(i->a_key && i->b_key, "%s: a mapping form names its keys", i->name);
      snprintf(input, sizeof input, "{%s: {%s: 8, %s: 0.5}}", i->name, i->a_key, i->b_key);
      break;
    }
    scenario *s = parse_with(input, "{fixed: {requests: 1}}", "");
    cr_expect_eq(s->workload.classes[0].input.kind, (scn_dist_kind)k, "%s", i->name);
    workload *w = NULL;
    sc_error err = {{0}};
    cr_assert_eq(workload_new(s, 1, &w, &err), SC_OK, "%s: %s", i->name, err.msg);
    wl_request r;
    workload_request(w, 0, &r);
    cr_expect(r.n_prompt >= 1 && r.n_prompt <= 64, "%s: %d prompt tokens", i->name, r.n_prompt);
    workload_free(w);
    scenario_free(s);
  }
  cr_expect_null(workload_dist(SCN_DIST_N));
}

Test(tables, every_arrival_process_has_a_row_the_language_reads_and_gaps) {
  for (int a = 0; a < SCN_ARRIVAL_N; a++) {
    const wl_arrival_info *i = workload_arrival((scn_arrival)a);
    cr_assert(i && i->name && i->name[0], "arrival process %d has no row", a);
    cr_expect_str_eq(workload_arrival_name((scn_arrival)a), i->name);
    for (int j = 0; j < a; j++) cr_expect_str_neq(workload_arrival_name((scn_arrival)j), i->name);
    if (i->from_trace) continue; // the trace's phase: workload.trace, tested with traces
    char phase[128];
    snprintf(phase, sizeof phase, "{rate: 10, arrival: %s, requests: 5%s}", i->name,
             i->burstiness ? ", burstiness: 0.5" : "");
    scenario *s = parse_with("8", phase, "");
    cr_expect_eq(s->workload.phases[0].arrival, (scn_arrival)a, "%s", i->name);
    workload *w = NULL;
    sc_error err = {{0}};
    cr_assert_eq(workload_new(s, 1, &w, &err), SC_OK, "%s: %s", i->name, err.msg);
    uint64_t gaps = 0;
    for (uint64_t j = 1; j < 50; j++) gaps += workload_gap_ns(w, 0, j);
    cr_expect(gaps > 0, "%s: gaps of a 10/s process", i->name);
    workload_free(w);
    scenario_free(s);
  }
  cr_expect_str_eq(workload_arrival_name(SCN_ARRIVAL_N), "unknown");
}

// --- routing policies (serving/router.c)

static replica_health always_healthy(void *ctx) {
  (void)ctx;
  return REPLICA_HEALTHY;
}

Test(tables, every_router_policy_has_a_row_the_language_reads_and_picks) {
  static const replica_i stub = {.health = always_healthy};
  replica reps[3] = {{.i = &stub}, {.i = &stub, .index = 1}, {.i = &stub, .index = 2}};
  replica *const ptrs[3] = {&reps[0], &reps[1], &reps[2]};
  for (int p = 0; p < ROUTER_POLICY_N; p++) {
    const char *name = router_policy_name((router_policy)p);
    cr_assert(name && name[0], "policy %d has no row", p);
    router_policy back = ROUTER_POLICY_N;
    cr_expect(router_policy_parse(name, &back) && back == (router_policy)p, "%s", name);
    for (int j = 0; j < p; j++) cr_expect_str_neq(router_policy_name((router_policy)j), name);
    char extra[128];
    snprintf(extra, sizeof extra, "router: {policy: %s}\n", name);
    scenario *s = parse_with("8", "{fixed: {requests: 1}}", extra);
    cr_expect_eq(s->router.policy, (router_policy)p, "%s", name);
    scenario_free(s);
    req_table reqs = {0};
    router_config rc = {.policy = (router_policy)p};
    router *rt = router_new(&rc, ptrs, 3, &reqs, (router_hooks){0});
    cr_assert(rt);
    req_rec q = {0};
    for (int k = 0; k < 6; k++) {
      int i = router_pick(rt, &q);
      cr_expect(i >= 0 && i < 3, "%s picked %d", name, i);
    }
    router_free(rt);
  }
  cr_expect_null(router_policy_name(ROUTER_POLICY_N));
}

// --- metrics and SLO keys (scenarios/metric_names.c)

Test(tables, every_metric_row_agrees_with_who_measures_it) {
  const mt_metric_info *all;
  int n = mt_metric_all(&all);
  cr_assert(n > 0);
  mt_summary sum;
  memset(&sum, 0, sizeof sum);
  int gated = 0;
  for (int i = 0; i < n; i++) {
    const mt_metric_info *m = &all[i];
    cr_assert(m->name && m->name[0] && m->unit && m->unit[0] && m->what && m->what[0],
              "metric %d has an empty column", i);
    cr_expect_eq(mt_metric_find(m->name), m, "%s: names are unique", m->name);
    // a summary carries exactly the rows measured by a summary
    double v;
    cr_expect_eq(mt_summary_value(&sum, m->name, &v), m->by == MT_BY_SUMMARY,
                 "%s: measured by a summary: %d", m->name, m->by == MT_BY_SUMMARY);
    // a prompt class's SLO may bound it: a summary carries it and it has a direction
    if (m->flags & MT_PER_CLASS)
      cr_expect(m->by == MT_BY_SUMMARY && m->dir != MT_NEUTRAL, "%s", m->name);
    if (m->flags & MT_LATENCY) {
      char fam[16], stat[16];
      cr_expect_eq(sscanf(m->name, "%15[a-z0-9]_%15[a-z0-9]_ms", fam, stat), 2, "%s", m->name);
    }
    if (m->gate) {
      cr_expect(m->dir != MT_NEUTRAL, "%s: a gated metric has a better direction", m->name);
      gated++;
    }
  }
  // the gate's places are 1..gated, each once, and the list holds them in that order
  const char *const *g = mt_metric_gated();
  int k = 0;
  for (; g[k]; k++) cr_expect_eq(mt_metric_find(g[k])->gate, k + 1, "%s", g[k]);
  cr_expect_eq(k, gated);
}

// --- fault kinds: the language's rows (scenarios/scenario_faults.c) and the runtime's
// (faults/kinds.c), one index

// A scenario holding one fault (an item of `faults:`): a real CPU deployment of two replicas,
// or an external target's one (for the kinds only a target takes).
static scenario *fault_scenario(const char *item, bool target) {
  char text[2048];
  if (target)
    snprintf(text, sizeof text,
             "name: tables\ntarget: {openai: {url: \"http://127.0.0.1:9/v1\", model: m, api: "
             "chat}}\nworkload:\n  prompts: [{name: a, input: 8, output: 4}]\n  phases: "
             "[{rate: 10, requests: 5}]\nfaults: [%s]\n",
             item);
  else
    snprintf(text, sizeof text,
             "name: tables\nmodel: {preset: llama-tiny}\ndeployments: [{tp: 1, dp: 2}]\n"
             "workload:\n  prompts: [{name: a, input: 8, output: 4}]\n  phases: [{rate: 10, "
             "requests: 5}]\nfaults: [%s]\n",
             item);
  scenario *s = NULL;
  sc_error err = {{0}};
  cr_assert_eq(scenario_parse(text, strlen(text), "tables.yaml", ".", &s, &err), SC_OK, "%s\n%s",
               err.msg, text);
  return s;
}

Test(tables, every_fault_kind_has_a_language_row_and_a_runtime_row) {
  for (int k = 0; k < SCN_FAULT_N; k++) {
    const scn_fault_kind_info *i = scenario_fault_kind((scn_fault_kind)k);
    cr_assert(i && i->name && i->name[0] && i->example, "fault kind %d has no language row", k);
    cr_expect_str_eq(scenario_fault_kind_name((scn_fault_kind)k), i->name);
    for (int j = 0; j < k; j++)
      cr_expect_str_neq(scenario_fault_kind_name((scn_fault_kind)j), i->name);
    const fk_row *rt = fk_of((scn_fault_kind)k);
    cr_assert(rt, "%s has no runtime row", i->name);
    // the language reads its example
    scenario *s = fault_scenario(i->example, i->target_only);
    cr_assert_eq(s->n_faults, 1);
    cr_expect_eq(s->faults[0].kind, (scn_fault_kind)k, "%s", i->name);
    // the runtime plans it: a detail line, and it either reaches replicas or acts itself
    ft_plan plan;
    sc_error err = {{0}};
    cr_assert_eq(ft_plan_build(s, &s->deployments[0], 0, 1, &plan, &err), SC_OK, "%s", err.msg);
    cr_expect(plan.n >= 1, "%s: planned", i->name);
    for (int p = 0; p < plan.n; p++) {
      const ft_fault *ft = &plan.v[p];
      const fk_row *r = fk_of(ft->kind);
      cr_expect(!r->expanded && r->detail, "%s: a planned %s has a detail", i->name,
                scenario_fault_kind_name(ft->kind));
      cr_expect(ft->detail[0], "%s: detail", i->name);
      cr_expect((r->deliver != NULL) != (r->act != NULL), "%s: delivered or acted, one",
                scenario_fault_kind_name(ft->kind));
      if (r->deliver)
        for (int end = 0; end < 2; end++)
          cr_expect(replica_fault_kind_info(fault_replica_fault(ft, end).kind), "%s",
                    scenario_fault_kind_name(ft->kind));
    }
    if (rt->expanded) cr_expect(rt->draw == NULL && rt->detail == NULL, "%s", i->name);
    ft_plan_free(&plan);
    scenario_free(s);
  }
  cr_expect_str_eq(scenario_fault_kind_name(SCN_FAULT_N), "unknown");
  cr_expect_null(fk_of(SCN_FAULT_N));
}

// --- replica fault kinds (serving/replica.c)

Test(tables, every_replica_fault_kind_has_a_row_the_wire_and_a_replica_take) {
  simbed *b = sc_test_simbed_new("llama3-8b", "h100-sxm", 2, 1, 64);
  for (int k = 0; k < RFAULT_N; k++) {
    const replica_fault_info *i = replica_fault_kind_info((replica_fault_kind)k);
    cr_assert(i && i->name && i->name[0], "replica fault kind %d has no row", k);
    for (int j = 0; j < k; j++)
      cr_expect_str_neq(replica_fault_kind_info((replica_fault_kind)j)->name, i->name);
    replica_fault f = {.kind = (replica_fault_kind)k,
                       .rank = i->names_rank ? 1 : -1,
                       .factor = 2,
                       .after_allocs = 1};
    // the worker protocol carries it
    wire_buf buf = {0};
    cr_assert(wire_put_inject(&buf, 1, &f));
    int type;
    uint32_t epoch;
    const uint8_t *body;
    size_t body_n, frame_n;
    cr_assert_eq(wire_frame(buf.p, buf.n, &type, &epoch, &body, &body_n, &frame_n), 1);
    wire_reader r = {.p = body, .n = body_n};
    replica_fault back;
    cr_expect(wire_get_inject(&r, &back) && back.kind == f.kind, "%s over the wire", i->name);
    wire_buf_free(&buf);
    // a replica takes it
    replica *rep = NULL;
    sc_error err = {{0}};
    cr_assert_eq(replica_sim_new(&b->cfg, 0, &rep, &err), SC_OK, "%s", err.msg);
    cr_expect_eq(replica_inject(rep, &f, &err), SC_OK, "%s: %s", i->name, err.msg);
    replica_free(rep);
  }
  cr_expect_null(replica_fault_kind_info(RFAULT_N));
  replica_fault bad = {.kind = RFAULT_N, .rank = -1};
  replica *rep = NULL;
  sc_error err = {{0}};
  cr_assert_eq(replica_sim_new(&b->cfg, 0, &rep, &err), SC_OK, "%s", err.msg);
  cr_expect_eq(replica_inject(rep, &bad, &err), SC_INVALID, "an unknown kind is refused");
  replica_free(rep);
  sc_test_simbed_free(b);
}

// --- engine and scheduler knobs (kernels/knobs.h)

// Sets profile knob pkey of e to a value other than the scenario's default (a flag on,
// chunked_prefill off, a value of 0.25, an int of 3); false when e has no such knob.
static bool set_profile_knob(sim_engine *e, const char *pkey) {
#define SET_SC_KNOB_P_INT(k) e->k = 3;
#define SET_SC_KNOB_P_BOOL(k) e->k = 1;
#define SET_SC_KNOB_P_CHUNK(k) e->k = -1; // off: prefill_chunk = token_budget
#define SET_SC_KNOB_P_VALUE(k) e->has_##k = true, e->k = 0.25;
#define SET(name, type, dflt, en, sch, pf, k, ok, ex, j)                                          \
  if (!strcmp(pkey, #k)) {                                                                         \
    SC_KNOB_CAT(SET_, pf)(k) return true;                                                          \
  }
  SC_KNOBS(SET)
#undef SET
  return false;
}

// Writes base's text plus e's engine block, loads it back (it must equal e's knobs), and
// simulates a scenario on it: the limit `name` is then the profile's.
static void profile_round_trip(const char *base, const sim_engine *e, const char *name) {
  char *block = NULL;
  size_t n = 0;
  FILE *o = open_memstream(&block, &n);
  cr_assert(o);
  hw_profile_write_engine(o, e);
  fclose(o);
  char text[65536];
  snprintf(text, sizeof text, "%s\n%s", base, block);
  free(block);
  const char *path = sc_test_write_tmp("tables-knob", "p.yaml", text);
  hw_profile p;
  sc_error err = {{0}};
  cr_assert_eq(hw_profile_load(path, &p, &err), SC_OK, "%s: %s", name, err.msg);
#define SAME(nm, type, dflt, en, sch, pf, k, ok, ex, j)                                           \
  cr_expect_eq((double)p.sim.engine.k, (double)e->k, "%s: " #k " read back", name);
  SC_KNOBS(SAME)
#undef SAME
  char sc[1024];
  snprintf(sc, sizeof sc,
           "name: k\nmode: sim\nmodel: {preset: llama3-8b}\nhardware: {profile: %s, gpus: 1}\n"
           "deployments: [{tp: 1}]\nworkload:\n  prompts: [{input: 10, output: 5}]\n"
           "  phases: [{fixed: {requests: 1}}]\n",
           path);
  scenario *s = NULL;
  cr_assert_eq(scenario_parse(sc, strlen(sc), "k.yaml", ".", &s, &err), SC_OK, "%s", err.msg);
  scn_limits dflt = {SC_KNOBS(SC_KNOB_DEFAULT)};
  bool changed = false;
#define CHANGED(nm, type, d, en, sch, pf, k, ok, ex, j)                                           \
  if (!strcmp(name, #nm)) changed = s->limits.nm != dflt.nm;
  SC_KNOBS(CHANGED)
#undef CHANGED
  cr_expect(changed, "%s: the profile's knob replaces the scenario's", name);
  scenario_free(s);
}

// A value of a knob other than its default, within its bound, as YAML text and as a double.
static double knob_value(const char *type, double dflt, char *text, size_t cap) {
  double v = !strcmp(type, "bool") ? !dflt : !strcmp(type, "double") ? 0.25 : dflt + 1;
  if (!strcmp(type, "bool")) snprintf(text, cap, "%s", v ? "true" : "false");
  else snprintf(text, cap, "%g", v);
  return v;
}

Test(tables, every_knob_reaches_the_limits_the_engine_the_wire_and_the_profile) {
  const sc_embedded_file *h100 = sc_embedded_find("scenarios/hardware/h100-sxm.yaml");
  cr_assert(h100);
#define KNOB_TEST(name, type, dflt, e, sch, pf, pkey, ok, ex, j)                                   \
  {                                                                                                \
    char text[64], extra[128];                                                                     \
    double want = knob_value(#type, (double)(dflt), text, sizeof text);                           \
    cr_expect(sc_knob_ok_##name((type)want), #name ": the test's value is within bounds");        \
    /* the scenario's limits read it */                                                            \
    snprintf(extra, sizeof extra, "limits: {" #name ": %s}\n", text);                             \
    scenario *s = parse_with("8", "{fixed: {requests: 1}}", extra);                                \
    cr_expect_eq((double)s->limits.name, want, #name " in limits");                               \
    /* the engine config and the worker protocol carry it (engine 1) */                           \
    engine_config ec;                                                                              \
    sc_error err = {{0}};                                                                          \
    cr_assert_eq(scenario_engine_config(s, &s->deployments[0], &s->model.config,                  \
                                        s->mp.weight_dtype, sc_clock_monotonic(), &ec, &err),     \
                 SC_OK, "%s", err.msg);                                                            \
    SC_KNOB_IF(e)(cr_expect_eq((double)ec.name, want, #name " in the engine config");             \
                  wire_buf b = {0}; cr_assert(wire_put_config(&b, 1, &ec, 0, 1000));              \
                  int type_; uint32_t epoch_; const uint8_t *body_; size_t body_n_, frame_n_;      \
                  cr_assert_eq(wire_frame(b.p, b.n, &type_, &epoch_, &body_, &body_n_, &frame_n_), \
                               1);                                                                 \
                  wire_reader r = {.p = body_, .n = body_n_}; wire_config w;                       \
                  cr_assert(wire_get_config(&r, &w) && wire_done(&r));                             \
                  cr_expect_eq((double)w.cfg.name, want, #name " over the wire");                  \
                  wire_buf_free(&b);)                                                              \
    scenario_free(s);                                                                              \
    /* a profile's engine block sets it, written back by the profile writer */                     \
    sim_engine se = sim_engine_defaults();                                                         \
    cr_assert_eq(set_profile_knob(&se, #pkey), true, #pkey);                                       \
    profile_round_trip(h100->data, &se, #name);                                                    \
  }
  SC_KNOBS(KNOB_TEST)
#undef KNOB_TEST
}
