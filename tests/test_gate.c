// The regression gate (reports/gate.c, cli/cmd_gate.c): the Mann-Whitney U test against exact
// values, gate arithmetic on synthetic databases (direction, tolerance, significance across
// repetitions, new deployments and missing metrics), and the CLI end to end: exit codes, JUnit,
// JSON, `baseline`, `run --repeat`, an unchanged sim rerun that passes exactly and a planted
// slowdown that fails.
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "reports/gate.h"
#include "reports/store.h"
#include "tests/helpers.h"

static char out[1 << 17];

// --- Mann-Whitney U

Test(mann_whitney, five_above_five_is_one_in_252) {
  double a[5] = {1, 2, 3, 4, 5}, b[5] = {6, 7, 8, 9, 10};
  cr_expect_float_eq(gate_mann_whitney_greater(a, 5, b, 5), 1.0 / 252, 1e-12);
  cr_expect_float_eq(gate_mann_whitney_greater(b, 5, a, 5), 1.0, 1e-12);
}

Test(mann_whitney, interleaved_groups_are_not_significant_and_ties_take_mid_ranks) {
  double a[4] = {1, 3, 5, 7}, b[4] = {2, 4, 6, 8};
  // W(b) = 2+4+6+8 = 20; P(W >= 20) over the 70 subsets of 4 of 8 ranks = 24/70
  cr_expect_float_eq(gate_mann_whitney_greater(a, 4, b, 4), 24.0 / 70, 1e-12);
  double c[3] = {1, 1, 1}, d[3] = {1, 1, 1};
  cr_expect_float_eq(gate_mann_whitney_greater(c, 3, d, 3), 1.0, 1e-12); // all tied: no shift
}

Test(mann_whitney, large_groups_use_the_normal_approximation) {
  double a[40], b[40];
  for (int i = 0; i < 40; i++) a[i] = i, b[i] = i + 0.5;
  double p = gate_mann_whitney_greater(a, 40, b, 40);
  cr_expect(p > 0.3 && p < 0.6, "p %g", p);
  for (int i = 0; i < 40; i++) b[i] = 100 + i;
  cr_expect_lt(gate_mann_whitney_greater(a, 40, b, 40), 1e-10);
}

// --- synthetic databases

static store *fresh(const char *tag, char *path, size_t cap) {
  snprintf(path, cap, "%s/g.db", sc_test_tmpdir(tag));
  store *s = NULL;
  sc_error err = {{0}};
  cr_assert_eq(store_open(path, &s, &err), SC_OK, "%s", err.msg);
  return s;
}

// A complete run of scenario with one deployment per label, each with the pooled metrics
// given (names[i] = vals[i]); its id.
static int64_t add_run(store *s, const char *scenario, const char *mode, const char *const *labels,
                       int n_labels, const char *const *names, const double *vals, int n) {
  sc_error err = {{0}};
  store_run r = {.scenario = scenario, .scenario_text = "name: x\n", .mode = mode,
                 .backend = mode, .model = "m", .seed = 1};
  int64_t id = 0, dep = 0;
  cr_assert_eq(store_run_begin(s, &r, &id, &err), SC_OK, "%s", err.msg);
  for (int d = 0; d < n_labels; d++) {
    store_deployment sd = {.run_id = id, .idx = d, .label = labels[d], .tp = 1, .pp = 1, .dp = 1};
    cr_assert_eq(store_deployment_begin(s, &sd, &dep, &err), SC_OK, "%s", err.msg);
    for (int i = 0; i < n; i++)
      cr_assert_eq(store_metric_add(s, id, dep, 0, NULL, names[i], vals[i], &err), SC_OK);
  }
  cr_assert_eq(store_run_end(s, id, "complete", NULL, NULL, 1, &err), SC_OK, "%s", err.msg);
  return id;
}

static const gate_row *row(const gate_result *g, const char *dep, const char *metric) {
  for (int i = 0; i < g->n; i++)
    if (!strcmp(g->rows[i].deployment, dep) && !strcmp(g->rows[i].metric, metric))
      return &g->rows[i];
  cr_assert_fail("no row %s/%s", dep, metric);
  return NULL;
}

static const char *const one[] = {"dp1"};
static const char *const names[] = {"tpot_p50_ms", "output_tok_s", "error_rate", "requests"};

Test(gate, sim_changes_are_judged_by_direction_and_tolerance_alone) {
  char path[600];
  store *s = fresh("gate-dir", path, sizeof path);
  double b[] = {10, 1000, 0, 50}, c[] = {10.05, 900, 0.01, 60};
  int64_t base = add_run(s, "x", "sim", one, 1, names, b, 4);
  int64_t cur = add_run(s, "x", "sim", one, 1, names, c, 4);
  gate_options o = gate_options_defaults();
  gate_result g;
  sc_error err = {{0}};
  cr_assert_eq(gate_compare(store_db(s), cur, store_db(s), base, &o, &g, &err), SC_OK, "%s",
               err.msg);
  cr_expect(g.sim);
  cr_expect_eq(row(&g, "dp1", "tpot_p50_ms")->v, GATE_SAME, "+0.5%% is within 1%%");
  cr_expect_eq(row(&g, "dp1", "output_tok_s")->v, GATE_REGRESSED, "throughput down 10%%");
  cr_expect_float_eq(row(&g, "dp1", "output_tok_s")->change, -0.1, 1e-12);
  cr_expect_eq(row(&g, "dp1", "error_rate")->v, GATE_REGRESSED, "errors from none");
  cr_expect_eq(g.n, 3, "requests is not a gated metric");
  cr_expect_eq(g.regressed, 2);
  gate_result_free(&g);
  // the other way round: lower latency and higher throughput improve
  cr_assert_eq(gate_compare(store_db(s), base, store_db(s), cur, &o, &g, &err), SC_OK);
  cr_expect_eq(row(&g, "dp1", "output_tok_s")->v, GATE_IMPROVED);
  cr_expect_eq(g.regressed, 0);
  gate_result_free(&g);
  // a wider tolerance for one metric
  o.n_metrics = 1;
  snprintf(o.metrics[0].name, sizeof o.metrics[0].name, "output_tok_s");
  o.metrics[0].tol = 0.15;
  cr_assert_eq(gate_compare(store_db(s), cur, store_db(s), base, &o, &g, &err), SC_OK);
  cr_expect_eq(g.n, 1);
  cr_expect_eq(row(&g, "dp1", "output_tok_s")->v, GATE_SAME);
  gate_result_free(&g);
  store_close(s);
}

Test(gate, new_deployments_and_missing_metrics_are_reported_not_failed) {
  char path[600];
  store *s = fresh("gate-new", path, sizeof path);
  const char *const two[] = {"dp1", "tp2"};
  double v[] = {10, 1000, 0, 50};
  int64_t base = add_run(s, "x", "sim", one, 1, names, v, 4);
  int64_t cur = add_run(s, "x", "sim", two, 2, names, v, 1); // tp2 new; dp1 lost 2 metrics
  gate_options o = gate_options_defaults();
  gate_result g;
  sc_error err = {{0}};
  cr_assert_eq(gate_compare(store_db(s), cur, store_db(s), base, &o, &g, &err), SC_OK);
  cr_expect_eq(row(&g, "tp2", "tpot_p50_ms")->v, GATE_NEW);
  cr_expect_eq(row(&g, "dp1", "output_tok_s")->v, GATE_MISSING);
  cr_expect_eq(row(&g, "dp1", "tpot_p50_ms")->v, GATE_SAME);
  cr_expect_eq(g.regressed, 0);
  gate_result_free(&g);
  int64_t other = add_run(s, "y", "sim", one, 1, names, v, 4);
  cr_expect_eq(gate_compare(store_db(s), other, store_db(s), base, &o, &g, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "different scenarios"), "%s", err.msg);
  cr_expect_eq(gate_compare(store_db(s), 999, store_db(s), base, &o, &g, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "no run 999"), "%s", err.msg);
  store_close(s);
}

// A real repetition group of 5 runs whose tpot_p50_ms are vals[0..5).
static int64_t add_group(store *s, const double *vals) {
  int64_t first = 0;
  sc_error err = {{0}};
  for (int i = 0; i < 5; i++) {
    double v[] = {vals[i], 1000, 0, 50};
    int64_t id = add_run(s, "x", "real", one, 1, names, v, 1);
    if (i == 0) first = id;
    cr_assert_eq(store_run_set_repeat(s, id, first, i, &err), SC_OK, "%s", err.msg);
  }
  return first;
}

Test(gate, real_repetitions_regress_only_past_the_tolerance_and_significant) {
  char path[600];
  store *s = fresh("gate-real", path, sizeof path);
  double base_v[] = {10.0, 10.4, 9.8, 10.1, 10.2};
  double slow[] = {11.1, 11.3, 11.0, 11.4, 11.2};   // +10%, every repetition slower
  double noisy[] = {9.0, 12.5, 10.0, 13.0, 10.9};   // median +7.8%, but overlapping
  double close[] = {10.2, 10.5, 10.0, 10.3, 10.4};  // +2.9%: within 5%
  int64_t b = add_group(s, base_v), c1 = add_group(s, slow), c2 = add_group(s, noisy);
  int64_t c3 = add_group(s, close);
  int64_t grp[8];
  cr_expect_eq(gate_group(store_db(s), c1 + 2, grp, 8), 5, "any run stands for its group");
  cr_expect_eq(grp[0], c1);
  gate_options o = gate_options_defaults();
  gate_result g;
  sc_error err = {{0}};
  cr_assert_eq(gate_compare(store_db(s), c1, store_db(s), b, &o, &g, &err), SC_OK);
  const gate_row *r = row(&g, "dp1", "tpot_p50_ms");
  cr_expect_eq(r->n_base, 5);
  cr_expect_eq(r->n_cur, 5);
  cr_expect_eq(r->v, GATE_REGRESSED);
  cr_expect_float_eq(r->p, 1.0 / 252, 1e-12);
  cr_expect_float_eq(r->noise, (10.4 - 9.8) / 2 / 10.1, 1e-9);
  gate_result_free(&g);
  cr_assert_eq(gate_compare(store_db(s), c2, store_db(s), b, &o, &g, &err), SC_OK);
  cr_expect_eq(row(&g, "dp1", "tpot_p50_ms")->v, GATE_WORSE_NOISE, "p %g",
               row(&g, "dp1", "tpot_p50_ms")->p);
  cr_expect_eq(g.regressed, 0);
  gate_result_free(&g);
  cr_assert_eq(gate_compare(store_db(s), c3, store_db(s), b, &o, &g, &err), SC_OK);
  cr_expect_eq(row(&g, "dp1", "tpot_p50_ms")->v, GATE_SAME);
  gate_result_free(&g);
  store_close(s);
}

// --- the CLI

static int cli(const char *fmt, const char *a, const char *b) {
  char args[4096];
  snprintf(args, sizeof args, fmt, a, b);
  return sc_test_run_cli(args, out, sizeof out);
}

static const char *const sim_yaml =
    "name: gate-sim\n"
    "model: {preset: llama3-8b, dtype: bf16}\n"
    "mode: sim\n"
    "hardware: {profile: h100-sxm, gpus: 2}\n"
    "deployments: [{dp: 2}, {tp: 2}]\n"
    "workload:\n"
    "  prompts: [{input: {uniform: [128, 1024]}, output: {uniform: [32, 128]}}]\n"
    "  phases: [{ramp: {concurrency: [8, 32]}, hold: 10s}]\n"
    "%s"
    "seed: 3\n";

static void write_yaml(const char *path, const char *faults) {
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fprintf(f, sim_yaml, faults);
  fclose(f);
}

Test(gate_cli, an_unchanged_sim_rerun_passes_exactly_and_a_planted_slowdown_fails,
     .timeout = 120) {
  const char *dir = sc_test_tmpdir("gate-cli");
  char db[600], y[600], slow[600], junit[600];
  snprintf(db, sizeof db, "%s/r.db", dir);
  snprintf(y, sizeof y, "%s/g.yaml", dir);
  snprintf(slow, sizeof slow, "%s/slow.yaml", dir);
  snprintf(junit, sizeof junit, "%s/gate.xml", dir);
  write_yaml(y, "");
  // a 2% slower device for the whole run: dp2's replica0, and the tp2 group through its rank0
  write_yaml(slow, "faults: [{at: 0s, slow: {on: rank, factor: 1.02}, target: replica0.rank0}]\n");
  cr_assert_eq(cli("run %s --db %s --quiet --no-report", y, db), 0, "%s", out);
  cr_expect_eq(cli("gate --db %s%s", db, ""), 0, "no baseline yet: %s", out);
  cr_expect(strstr(out, "no baseline"), "%s", out);
  cr_assert_eq(cli("baseline --db %s --run 1%s", db, ""), 0, "%s", out);
  cr_expect_eq(sc_test_q1(db, "SELECT baseline FROM run WHERE id = 1"), 1);
  cr_assert_eq(cli("run %s --db %s --quiet --no-report", y, db), 0, "%s", out);
  cr_expect_eq(cli("gate --db %s --json%s", db, ""), 0, "%s", out);
  cr_expect(strstr(out, "\"regressed\": 0"), "%s", out);
  cr_expect_eq(cli("gate --db %s%s", db, ""), 0, "%s", out);
  // exact: nothing moved at all
  cr_expect(!strstr(out, "improved") && !strstr(out, "worse") && strstr(out, "+0.0%"), "%s",
            out);
  cr_assert_eq(cli("run %s --db %s --quiet --no-report", slow, db), 0, "%s", out);
  cr_expect_eq(cli("gate --db %s --junit %s", db, junit), 1, "%s", out);
  cr_expect(strstr(out, "REGRESSED") && strstr(out, "tpot_p50_ms"), "%s", out);
  FILE *f = fopen(junit, "r");
  cr_assert_not_null(f);
  size_t n = fread(out, 1, sizeof out - 1, f);
  out[n] = 0;
  fclose(f);
  cr_expect(strstr(out, "<testsuite name=\"gate-sim\"") && strstr(out, "type=\"regression\""),
            "%s", out);
  cr_expect(strstr(out, "classname=\"gate-sim.dp2\""), "%s", out);
}

Test(gate_cli, bad_input_exits_2_with_a_reason) {
  const char *dir = sc_test_tmpdir("gate-bad");
  char db[600], y[600];
  snprintf(db, sizeof db, "%s/r.db", dir);
  snprintf(y, sizeof y, "%s/g.yaml", dir);
  cr_expect_eq(cli("gate --db %s/missing.db%s", dir, ""), 2, "%s", out);
  write_yaml(y, "");
  cr_assert_eq(cli("run %s --db %s --quiet --no-report --repeat 2", y, db), 0, "%s", out);
  cr_expect_eq(sc_test_q1(db, "SELECT count(*) FROM run WHERE repeat_group = 1"), 2);
  cr_expect_eq(sc_test_q1(db, "SELECT max(repeat_index) FROM run"), 1);
  cr_expect_eq(cli("gate --db %s --run 7%s", db, ""), 2, "%s", out);
  cr_expect_eq(cli("gate --db %s --run 2 --baseline-run 9%s", db, ""), 2, "%s", out);
  cr_expect(strstr(out, "no run 9"), "%s", out);
  cr_expect_eq(cli("gate --db %s --tolerance lots%s", db, ""), 2, "%s", out);
  cr_expect_eq(cli("gate --db %s --metric requests%s", db, ""), 2, "%s", out);
  cr_expect(strstr(out, "no better direction"), "%s", out);
  cr_expect_eq(cli("baseline --db %s --run 42%s", db, ""), 2, "%s", out);
  cr_expect_eq(cli("gate --help%s%s", "", ""), 0, "%s", out);
  cr_expect(strstr(out, "--baseline-run"), "%s", out);
}

Test(gate_cli, the_scenarios_gate_section_sets_the_defaults_and_flags_override_it,
     .timeout = 120) {
  const char *dir = sc_test_tmpdir("gate-yaml");
  char db[600], y[600], slow[600];
  snprintf(db, sizeof db, "%s/r.db", dir);
  snprintf(y, sizeof y, "%s/g.yaml", dir);
  snprintf(slow, sizeof slow, "%s/slow.yaml", dir);
  write_yaml(y, "gate: {tolerance: 20%, metrics: {tpot_p50_ms: 10%, output_tok_s: 10%}}\n");
  write_yaml(slow, "gate: {tolerance: 20%, metrics: {tpot_p50_ms: 10%, output_tok_s: 10%}}\n"
                   "faults: [{at: 0s, slow: {on: rank, factor: 1.02}, target: replica0.rank0}]\n");
  cr_assert_eq(cli("run %s --db %s --quiet --no-report", y, db), 0, "%s", out);
  cr_assert_eq(cli("baseline --db %s --run 1%s", db, ""), 0, "%s", out);
  cr_assert_eq(cli("run %s --db %s --quiet --no-report", slow, db), 0, "%s", out);
  cr_expect_eq(cli("gate --db %s%s", db, ""), 0, "2%% is within the scenario's 10%%: %s", out);
  cr_expect(strstr(out, "tpot_p50_ms") && !strstr(out, "ttft_p95_ms"),
            "only the scenario's metrics: %s", out);
  cr_expect_eq(cli("gate --db %s --tolerance 1%s", db, "%"), 1, "%s", out);
  cr_expect(strstr(out, "REGRESSED"), "%s", out);
}
