// The regression gate (reports/gate.c, cli/cmd_gate.c): the Mann-Whitney U test against exact
// values, gate arithmetic on synthetic databases (direction, tolerance, significance across
// repetitions and its level, one repetition a side, noise, new deployments and missing
// metrics, refusals), and the CLI end to end: exit codes, JUnit, JSON, `baseline`, `run
// --repeat`, which baseline is picked, schema versions, an unchanged sim rerun that passes
// exactly and a hardware profile 2% slower that fails.
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reports/gate.h"
#include "reports/store.h"
#include "scenarios/metric_names.h"
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

Test(mann_whitney, five_against_five_p_values_step_in_252ths) {
  // one (baseline, current) pair of the 25 out of order: 2 of the 252 arrangements are as extreme
  double a1[5] = {1, 2, 3, 4, 6}, b1[5] = {5, 7, 8, 9, 10};
  cr_expect_float_eq(gate_mann_whitney_greater(a1, 5, b1, 5), 2.0 / 252, 1e-12);
  double a2[5] = {1, 2, 3, 5, 6}, b2[5] = {4, 7, 8, 9, 10}; // two pairs: 4 of 252
  cr_expect_float_eq(gate_mann_whitney_greater(a2, 5, b2, 5), 4.0 / 252, 1e-12);
  double a4[5] = {1, 3, 4, 5, 6}, b4[5] = {2, 7, 8, 9, 10}; // four pairs: 12 of 252 < 0.05
  cr_expect_float_eq(gate_mann_whitney_greater(a4, 5, b4, 5), 12.0 / 252, 1e-12);
  cr_expect(isnan(gate_mann_whitney_greater(a4, 0, b4, 5)), "an empty side has no p");
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
  // the other way round: lower latency and higher throughput are better, and in a
  // deterministic run a change nobody asked for: CHANGED, a failure, unless accepted
  cr_assert_eq(gate_compare(store_db(s), base, store_db(s), cur, &o, &g, &err), SC_OK);
  cr_expect_eq(row(&g, "dp1", "output_tok_s")->v, GATE_CHANGED);
  cr_expect_eq(row(&g, "dp1", "error_rate")->v, GATE_CHANGED, "errors gone");
  cr_expect_eq(g.regressed, 0);
  cr_expect_eq(g.changed, 2);
  cr_expect_eq(g.failed, 2);
  gate_result_free(&g);
  o.accept_improvements = true;
  cr_assert_eq(gate_compare(store_db(s), base, store_db(s), cur, &o, &g, &err), SC_OK);
  cr_expect_eq(row(&g, "dp1", "output_tok_s")->v, GATE_IMPROVED);
  cr_expect_eq(g.failed, 0);
  gate_result_free(&g);
  cr_assert_eq(gate_compare(store_db(s), cur, store_db(s), base, &o, &g, &err), SC_OK);
  cr_expect_eq(g.regressed, 2, "accepting improvements accepts no regression");
  cr_expect_eq(g.failed, 2);
  gate_result_free(&g);
  o.accept_improvements = false;
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

Test(gate, new_deployments_are_reported_and_missing_metrics_fail) {
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
  cr_expect_eq(g.missing, 2, "output_tok_s and error_rate");
  cr_expect_eq(g.failed, 2);
  cr_expect_str_eq(g.incomplete, "", "the run itself completed");
  gate_result_free(&g);
  int64_t other = add_run(s, "y", "sim", one, 1, names, v, 4);
  cr_expect_eq(gate_compare(store_db(s), other, store_db(s), base, &o, &g, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "different scenarios"), "%s", err.msg);
  cr_expect_eq(gate_compare(store_db(s), 999, store_db(s), base, &o, &g, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "no run 999"), "%s", err.msg);
  store_close(s);
}

// A repetition group of n runs of scenario "x" in mode whose one metric row is `metric` =
// vals[i] (n = 1: a run on its own); the first run's id.
static int64_t add_group_of(store *s, const char *mode, const char *metric, const double *vals,
                            int n) {
  int64_t first = 0;
  sc_error err = {{0}};
  const char *const nm[] = {metric};
  for (int i = 0; i < n; i++) {
    int64_t id = add_run(s, "x", mode, one, 1, nm, &vals[i], 1);
    if (i == 0) first = id;
    if (n > 1) cr_assert_eq(store_run_set_repeat(s, id, first, i, &err), SC_OK, "%s", err.msg);
  }
  return first;
}

// A real repetition group of 5 runs whose tpot_p50_ms are vals[0..5).
static int64_t add_group(store *s, const double *vals) {
  return add_group_of(s, "real", "tpot_p50_ms", vals, 5);
}

// The verdict of metric on dp1, cur against base, with options o.
static gate_verdict verdict_of(store *s, int64_t cur, int64_t base, const gate_options *o,
                               const char *metric, double *p) {
  gate_result g;
  sc_error err = {{0}};
  cr_assert_eq(gate_compare(store_db(s), cur, store_db(s), base, o, &g, &err), SC_OK, "%s",
               err.msg);
  const gate_row *r = row(&g, "dp1", metric);
  gate_verdict v = r->v;
  if (p) *p = r->p;
  gate_result_free(&g);
  return v;
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

Test(gate, at_the_default_alpha_one_pair_out_of_order_regresses_and_two_do_not) {
  char path[600];
  store *s = fresh("gate-alpha", path, sizeof path);
  // medians 10.2 -> 11.4 (+11.8%) in both; the baseline's slowest repetition beats one or two
  // of the current ones
  double base1[] = {10.0, 10.1, 10.2, 10.3, 11.25}, base2[] = {10.0, 10.1, 10.2, 10.3, 11.35};
  double cur[] = {11.2, 11.3, 11.4, 11.5, 11.6};
  int64_t b1 = add_group(s, base1), b2 = add_group(s, base2), c = add_group(s, cur);
  gate_options o = gate_options_defaults();
  cr_expect_float_eq(o.alpha, 0.01, 1e-12);
  double p = 0;
  cr_expect_eq(verdict_of(s, c, b1, &o, "tpot_p50_ms", &p), GATE_REGRESSED);
  cr_expect_float_eq(p, 2.0 / 252, 1e-12);
  cr_expect_eq(verdict_of(s, c, b2, &o, "tpot_p50_ms", &p), GATE_WORSE_NOISE);
  cr_expect_float_eq(p, 4.0 / 252, 1e-12);
  o.alpha = 0.05;
  cr_expect_eq(verdict_of(s, c, b2, &o, "tpot_p50_ms", NULL), GATE_REGRESSED);
  store_close(s);
}

Test(gate, real_throughput_regresses_when_it_falls_and_improves_when_it_rises) {
  char path[600];
  store *s = fresh("gate-hi", path, sizeof path);
  double base[] = {1000, 1010, 990, 1005, 995}, low[] = {900, 905, 895, 910, 890};
  double high[] = {1100, 1105, 1095, 1110, 1090};
  int64_t b = add_group_of(s, "real", "output_tok_s", base, 5);
  int64_t l = add_group_of(s, "real", "output_tok_s", low, 5);
  int64_t h = add_group_of(s, "real", "output_tok_s", high, 5);
  gate_options o = gate_options_defaults();
  double p = 0;
  cr_expect_eq(verdict_of(s, l, b, &o, "output_tok_s", &p), GATE_REGRESSED);
  cr_expect_float_eq(p, 1.0 / 252, 1e-12);
  cr_expect_eq(verdict_of(s, h, b, &o, "output_tok_s", &p), GATE_IMPROVED);
  cr_expect_float_eq(p, 1.0 / 252, 1e-12, "the better way is tested for improved");
  store_close(s);
}

Test(gate, a_side_with_one_repetition_is_judged_by_the_tolerance_alone) {
  char path[600];
  store *s = fresh("gate-one", path, sizeof path);
  double one_v[] = {10.0}, overlapping[] = {9.0, 12.5, 10.0, 13.0, 10.9}; // median +9%
  int64_t b = add_group_of(s, "real", "tpot_p50_ms", one_v, 1);
  int64_t c = add_group(s, overlapping);
  gate_options o = gate_options_defaults();
  double p = 0;
  cr_expect_eq(verdict_of(s, c, b, &o, "tpot_p50_ms", &p), GATE_REGRESSED);
  cr_expect(isnan(p), "no test without repetitions on both sides");
  store_close(s);
}

Test(gate, the_noise_of_both_sides_is_measured_and_summed_up) {
  char path[600];
  store *s = fresh("gate-noise", path, sizeof path);
  double base[] = {10.0, 10.4, 9.8, 10.1, 10.2}, cur[] = {10.0, 11.0, 9.0, 10.0, 10.5};
  int64_t b = add_group(s, base), c = add_group(s, cur);
  gate_options o = gate_options_defaults();
  gate_result g;
  sc_error err = {{0}};
  cr_assert_eq(gate_compare(store_db(s), c, store_db(s), b, &o, &g, &err), SC_OK, "%s", err.msg);
  const gate_row *r = row(&g, "dp1", "tpot_p50_ms");
  cr_expect_float_eq(r->noise, (10.4 - 9.8) / 2 / 10.1, 1e-9);
  cr_expect_float_eq(r->noise_cur, (11.0 - 9.0) / 2 / 10.0, 1e-9);
  cr_expect_float_eq(g.noise_base, r->noise, 1e-12, "one row: its noise is the median");
  cr_expect_eq(g.noisiest, 0);
  cr_expect_float_eq(g.alpha, 0.01, 1e-12);
  cr_expect_eq(r->v, GATE_SAME, "median unchanged");
  gate_result_free(&g);
  store_close(s);
}

Test(gate, an_interrupted_repetition_is_left_out_of_its_group) {
  char path[600];
  store *s = fresh("gate-intr", path, sizeof path);
  double base[] = {10.0, 10.4, 9.8, 10.1, 10.2}, cur[] = {10.1, 10.3, 9.9, 10.0, 30.0};
  int64_t b = add_group(s, base), c = add_group(s, cur);
  char sql[96];
  snprintf(sql, sizeof sql, "UPDATE run SET status = 'interrupted' WHERE id = %lld",
           (long long)(c + 4));
  cr_assert_eq(sqlite3_exec(store_db(s), sql, NULL, NULL, NULL), SQLITE_OK);
  gate_options o = gate_options_defaults();
  gate_result g;
  sc_error err = {{0}};
  cr_assert_eq(gate_compare(store_db(s), c, store_db(s), b, &o, &g, &err), SC_OK, "%s", err.msg);
  cr_expect_eq(g.n_cur_reps, 4);
  cr_expect_eq(g.n_base_reps, 5);
  const gate_row *r = row(&g, "dp1", "tpot_p50_ms");
  cr_expect_eq(r->n_cur, 4);
  cr_expect_float_eq(r->noise_cur, (10.3 - 9.9) / 2 / 10.05, 1e-9, "30.0 left out");
  cr_expect(strstr(g.incomplete, "has status 'interrupted'"), "%s", g.incomplete);
  cr_expect_eq(g.failed, 1, "the group is incomplete: it does not pass");
  gate_result_free(&g);
  store_close(s);
}

Test(gate, sim_against_real_and_a_group_against_itself_are_refused) {
  char path[600];
  store *s = fresh("gate-refuse", path, sizeof path);
  double v[] = {10, 10, 10, 10, 10};
  int64_t real = add_group(s, v);
  int64_t sim = add_group_of(s, "sim", "tpot_p50_ms", v, 1);
  gate_options o = gate_options_defaults();
  gate_result g;
  sc_error err = {{0}};
  cr_expect_eq(gate_compare(store_db(s), sim, store_db(s), real, &o, &g, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "sim and real runs are not compared"), "%s", err.msg);
  cr_expect_eq(g.n, 0);
  cr_expect_null(g.rows);
  cr_expect_eq(gate_compare(store_db(s), real + 3, store_db(s), real + 1, &o, &g, &err),
               SC_INVALID);
  cr_expect(strstr(err.msg, "same repetition group"), "%s", err.msg);
  store_close(s);
}

// --- the CLI

static int cli(const char *fmt, const char *a, const char *b) {
  char args[4096];
  snprintf(args, sizeof args, fmt, a, b);
  return sc_test_run_cli(args, out, sizeof out);
}

// A sim scenario, gate-sim: llama3-8b on 2 GPUs of `profile` as dp2 and tp2, a fixed load (a
// uniformly slower device then stretches the run and changes no scheduling decision), and
// `extra` top-level keys.
static const char *const sim_yaml =
    "name: gate-sim\n"
    "model: {preset: llama3-8b, dtype: bf16}\n"
    "mode: sim\n"
    "hardware: {profile: %s, gpus: 2}\n"
    "deployments: [{dp: 2}, {tp: 2}]\n"
    "workload:\n"
    "  prompts: [{input: {uniform: [128, 1024]}, output: {uniform: [32, 128]}}]\n"
    "  phases: [{fixed: {requests: 120, concurrency: 16}}]\n"
    "%s"
    "seed: 3\n";

static void write_yaml(const char *path, const char *profile, const char *extra) {
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fprintf(f, sim_yaml, profile, extra);
  fclose(f);
}

// Writes dir/h100-slower.yaml: the h100-sxm profile with every priced step 2% longer (FLOP/s
// and bandwidths / 1.02, launch, step overhead and link latency x 1.02) into path.
static void write_slower_profile(const char *dir, char *path, size_t cap) {
  char src[600], line[512], key[64];
  snprintf(src, sizeof src, "%s/scenarios/hardware/h100-sxm.yaml", SC_SOURCE_DIR);
  snprintf(path, cap, "%s/h100-slower.yaml", dir);
  FILE *in = fopen(src, "r"), *dst = fopen(path, "w");
  cr_assert(in && dst, "%s -> %s", src, path);
  static const char *const slower[] = {"mem_bw", "flops_bf16", "flops_fp16", "flops_fp32",
                                       "flops_int8", "link_bw"};
  static const char *const longer[] = {"launch_s", "step_overhead_s", "link_latency_s"};
  int scaled = 0;
  while (fgets(line, sizeof line, in)) {
    double v = 0;
    if (sscanf(line, "%63[a-z0-9_]: %lf", key, &v) == 2) {
      double f = 1;
      for (size_t i = 0; i < sizeof slower / sizeof *slower; i++)
        if (!strcmp(key, slower[i])) f = 1 / 1.02;
      for (size_t i = 0; i < sizeof longer / sizeof *longer; i++)
        if (!strcmp(key, longer[i])) f = 1.02;
      if (f != 1) {
        fprintf(dst, "%s: %.12g\n", key, v * f);
        scaled++;
        continue;
      }
    }
    fputs(strncmp(line, "name:", 5) ? line : "name: h100-sxm-slower\n", dst);
  }
  fclose(in);
  fclose(dst);
  cr_assert_eq(scaled, 9, "every figure of the profile scaled");
}

// The gate's JSON in out (from its first '{'); owned by the caller.
static json_t *parse_json(void) {
  json_error_t je;
  const char *brace = strchr(out, '{');
  cr_assert_not_null(brace, "%s", out);
  json_t *j = json_loads(brace, JSON_DISABLE_EOF_CHECK, &je);
  cr_assert_not_null(j, "%s: %s", je.text, out);
  return j;
}

// Counts the rows of every gate in j whose metric starts with prefix, and of them those with
// the verdict.
static int count_rows(json_t *j, const char *prefix, const char *verdict, int *with) {
  int n = 0;
  *with = 0;
  size_t gi, ri;
  json_t *g, *r;
  json_array_foreach(json_object_get(j, "gates"), gi, g) {
    json_array_foreach(json_object_get(g, "rows"), ri, r) {
      if (strncmp(json_string_value(json_object_get(r, "metric")), prefix, strlen(prefix)))
        continue;
      n++;
      *with += !strcmp(json_string_value(json_object_get(r, "verdict")), verdict);
    }
  }
  return n;
}

static size_t read_file(const char *path) {
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "%s", path);
  size_t n = fread(out, 1, sizeof out - 1, f);
  out[n] = 0;
  fclose(f);
  return n;
}

static int occurrences(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

Test(gate_cli, an_unchanged_sim_rerun_passes_exactly_and_a_2pct_slower_profile_fails,
     .timeout = 120) {
  const char *dir = sc_test_tmpdir("gate-cli");
  char db[600], y[600], slow[600], junit[600], prof[700];
  snprintf(db, sizeof db, "%s/r.db", dir);
  snprintf(y, sizeof y, "%s/g.yaml", dir);
  snprintf(slow, sizeof slow, "%s/slow.yaml", dir);
  snprintf(junit, sizeof junit, "%s/gate.xml", dir);
  write_slower_profile(dir, prof, sizeof prof);
  write_yaml(y, "h100-sxm", "");
  write_yaml(slow, prof, "");
  cr_assert_eq(cli("run %s --db %s --quiet --no-report", y, db), 0, "%s", out);
  cr_expect_eq(cli("gate --db %s%s", db, ""), 0, "no baseline yet: %s", out);
  cr_expect(strstr(out, "no baseline"), "%s", out);
  cr_assert_eq(cli("baseline --db %s --run 1%s", db, ""), 0, "%s", out);
  cr_expect_eq(sc_test_q1(db, "SELECT baseline FROM run WHERE id = 1"), 1);
  cr_assert_eq(cli("run %s --db %s --quiet --no-report", y, db), 0, "%s", out);
  cr_expect_eq(cli("gate --db %s --json%s", db, ""), 0, "%s", out);
  json_t *j = parse_json();
  int same = 0, n = count_rows(j, "", "same", &same);
  cr_expect(n >= 20 && same == n, "every row the same: %d of %d: %s", same, n, out);
  size_t gi, ri;
  json_t *g, *r;
  json_array_foreach(json_object_get(j, "gates"), gi, g) {
    cr_expect_eq(json_integer_value(json_object_get(g, "baseline_run")), 1);
    json_array_foreach(json_object_get(g, "rows"), ri, r) {
      json_t *ch = json_object_get(r, "change");
      cr_expect(json_is_null(ch) || json_real_value(ch) == 0.0, "exactly unchanged: %s %s",
                json_string_value(json_object_get(r, "metric")), out);
    }
  }
  json_decref(j);
  cr_expect_eq(cli("gate --db %s%s", db, ""), 0, "%s", out);
  cr_expect(strstr(out, "sim runs are deterministic") && strstr(out, "gate: PASS"), "%s", out);
  cr_assert_eq(cli("run %s --db %s --quiet --no-report", slow, db), 0, "%s", out);
  cr_expect_eq(cli("gate --db %s --json%s", db, ""), 1, "%s", out);
  j = parse_json();
  int flagged = 0, tpot = count_rows(j, "tpot_", "REGRESSED", &flagged), better = 0;
  cr_expect(tpot >= 4 && flagged == tpot, "every TPOT row: %d of %d: %s", flagged, tpot, out);
  count_rows(j, "", "improved", &better);
  cr_expect_eq(better, 0, "a slower device improves nothing: %s", out);
  count_rows(j, "", "CHANGED (better)", &better);
  cr_expect_eq(better, 0, "a slower device improves nothing: %s", out);
  int unused = 0, rows = count_rows(j, "", "", &unused);
  json_decref(j);
  cr_expect_eq(cli("gate --db %s --junit %s", db, junit), 1, "%s", out);
  cr_expect(strstr(out, "REGRESSED") && strstr(out, "gate: FAIL"), "%s", out);
  read_file(junit);
  cr_expect(strstr(out, "<testsuite name=\"gate-sim\"") && strstr(out, "type=\"regression\""),
            "%s", out);
  cr_expect(strstr(out, "classname=\"gate-sim.dp2\"") && strstr(out, "classname=\"gate-sim.tp2\""),
            "%s", out);
  cr_expect_eq(occurrences(out, "<testcase"), rows, "one testcase per row: %s", out);
}

Test(gate_cli, bad_input_exits_2_with_a_reason) {
  const char *dir = sc_test_tmpdir("gate-bad");
  char db[600], y[600];
  snprintf(db, sizeof db, "%s/r.db", dir);
  snprintf(y, sizeof y, "%s/g.yaml", dir);
  cr_expect_eq(cli("gate --db %s/missing.db%s", dir, ""), 2, "%s", out);
  write_yaml(y, "h100-sxm", "");
  cr_assert_eq(cli("run %s --db %s --quiet --no-report --repeat 2", y, db), 0, "%s", out);
  cr_expect_eq(sc_test_q1(db, "SELECT count(*) FROM run WHERE repeat_group = 1"), 2);
  cr_expect_eq(sc_test_q1(db, "SELECT max(repeat_index) FROM run"), 1);
  cr_expect_eq(cli("gate --db %s --run 7%s", db, ""), 2, "%s", out);
  cr_expect(strstr(out, "no run 7"), "%s", out);
  cr_expect_eq(cli("gate --db %s --run 2 --baseline-run 9%s", db, ""), 2, "%s", out);
  cr_expect(strstr(out, "no run 9"), "%s", out);
  cr_expect_eq(cli("gate --db %s --run 2 --baseline-run 1%s", db, ""), 2, "%s", out);
  cr_expect(strstr(out, "same repetition group"), "%s", out);
  // a run of another scenario in the same database
  store *s = NULL;
  sc_error err = {{0}};
  cr_assert_eq(store_open(db, &s, &err), SC_OK, "%s", err.msg);
  const char *const names1[] = {"tpot_p50_ms"};
  double v = 1;
  int64_t id = add_run(s, "gate-other", "sim", one, 1, names1, &v, 1);
  store_close(s);
  char args[700];
  snprintf(args, sizeof args, "gate --db %s --run %lld --baseline-run 1", db, (long long)id);
  cr_expect_eq(sc_test_run_cli(args, out, sizeof out), 2, "%s", out);
  cr_expect(strstr(out, "runs of different scenarios are not compared"), "%s", out);
  cr_expect(strchr(out, '\n') == out + strlen(out) - 1, "one line: %s", out);
  cr_expect_eq(cli("gate --db %s --tolerance lots%s", db, ""), 2, "%s", out);
  cr_expect_eq(cli("gate --db %s --metric requests%s", db, ""), 2, "%s", out);
  cr_expect(strstr(out, "no better direction"), "%s", out);
  cr_expect_eq(cli("gate --db %s --metric nonsense_ms%s", db, ""), 2, "%s", out);
  cr_expect_eq(cli("baseline --db %s --run 42%s", db, ""), 2, "%s", out);
  cr_expect(strstr(out, "no run 42"), "%s", out);
  cr_expect_eq(cli("baseline --db %s%s", db, ""), 2, "%s", out);
  cr_expect_eq(cli("gate --help%s%s", "", ""), 0, "%s", out);
  cr_expect(strstr(out, "--baseline-run") && strstr(out, "0.01"), "%s", out);
  cr_expect_eq(cli("baseline --help%s%s", "", ""), 0, "%s", out);
}

Test(gate_cli, group_adds_repetitions_to_an_existing_group, .timeout = 120) {
  const char *dir = sc_test_tmpdir("gate-group");
  char db[600], y[600];
  snprintf(db, sizeof db, "%s/r.db", dir);
  snprintf(y, sizeof y, "%s/g.yaml", dir);
  write_yaml(y, "h100-sxm", "");
  // runs 1-2: a group; run 3 joins it (index 2)
  cr_assert_eq(cli("run %s --db %s --quiet --no-report --repeat 2", y, db), 0, "%s", out);
  cr_assert_eq(cli("run %s --db %s --no-report --group 2", y, db), 0, "%s", out);
  cr_expect(strstr(out, "run 3: repetition group 1"), "%s", out);
  cr_expect_eq(sc_test_q1(db, "SELECT repeat_group * 10 + repeat_index FROM run WHERE id = 3"),
               12);
  // run 4 on its own; --group 4 --repeat 2 makes it repetition 0 of group 4, then 5 and 6
  cr_assert_eq(cli("run %s --db %s --quiet --no-report", y, db), 0, "%s", out);
  cr_expect_eq(sc_test_q1(db, "SELECT repeat_group IS NULL FROM run WHERE id = 4"), 1);
  cr_assert_eq(cli("run %s --db %s --quiet --no-report --repeat 2 --group 4", y, db), 0, "%s",
               out);
  cr_expect_eq(sc_test_q1(db, "SELECT group_concat(id || ':' || repeat_group || '.' || "
                              "repeat_index, ' ') = '4:4.0 5:4.1 6:4.2' FROM run WHERE id >= 4"),
               1);
  // a repetition joining a baseline group is part of the baseline
  cr_assert_eq(cli("baseline --db %s --run 1%s", db, ""), 0, "%s", out);
  cr_assert_eq(cli("run %s --db %s --quiet --no-report --group 3", y, db), 0, "%s", out);
  cr_expect_eq(sc_test_q1(db, "SELECT baseline FROM run WHERE id = 7"), 1);
  cr_expect_eq(sc_test_q1(db, "SELECT count(*) FROM run WHERE repeat_group = 1 AND baseline"), 4);
  // the gate takes the group as one: group 4 (3 runs) against group 1 (4 runs)
  cr_expect_eq(cli("gate --db %s --run 6 --json%s", db, ""), 0, "%s", out);
  cr_expect(strstr(out, "\"baseline_repetitions\": 4") && strstr(out, "\"current_repetitions\": 3"),
            "%s", out);
  // refused: no such run, another scenario, another mode, not an id; nothing is recorded
  store *s = NULL;
  sc_error err = {{0}};
  cr_assert_eq(store_open(db, &s, &err), SC_OK, "%s", err.msg);
  const char *const names1[] = {"tpot_p50_ms"};
  double v = 1;
  int64_t other = add_run(s, "gate-other", "sim", one, 1, names1, &v, 1);
  int64_t real = add_run(s, "gate-sim", "real", one, 1, names1, &v, 1);
  store_close(s);
  long long before = sc_test_q1(db, "SELECT count(*) FROM run");
  cr_expect_eq(cli("run %s --db %s --quiet --no-report --group 99", y, db), 2, "%s", out);
  cr_expect(strstr(out, "no run 99 to join"), "%s", out);
  char args[1400];
  snprintf(args, sizeof args, "run %s --db %s --quiet --no-report --group %lld", y, db,
           (long long)other);
  cr_expect_eq(sc_test_run_cli(args, out, sizeof out), 2, "%s", out);
  cr_expect(strstr(out, "a group holds one scenario"), "%s", out);
  snprintf(args, sizeof args, "run %s --db %s --quiet --no-report --group %lld", y, db,
           (long long)real);
  cr_expect_eq(sc_test_run_cli(args, out, sizeof out), 2, "%s", out);
  cr_expect(strstr(out, "a group holds one mode"), "%s", out);
  cr_expect_eq(cli("run %s --db %s --quiet --no-report --group first", y, db), 2, "%s", out);
  cr_expect_eq(sc_test_q1(db, "SELECT count(*) FROM run"), before);
}

Test(gate_cli, the_scenarios_gate_section_sets_the_defaults_and_flags_override_it,
     .timeout = 120) {
  const char *dir = sc_test_tmpdir("gate-yaml");
  char db[600], y[600], slow[600], prof[700];
  snprintf(db, sizeof db, "%s/r.db", dir);
  snprintf(y, sizeof y, "%s/g.yaml", dir);
  snprintf(slow, sizeof slow, "%s/slow.yaml", dir);
  write_slower_profile(dir, prof, sizeof prof);
  const char *gate = "gate: {tolerance: 20%, metrics: {tpot_p50_ms: 10%, output_tok_s: 10%}}\n";
  write_yaml(y, "h100-sxm", gate);
  write_yaml(slow, prof, gate);
  cr_assert_eq(cli("run %s --db %s --quiet --no-report", y, db), 0, "%s", out);
  cr_assert_eq(cli("baseline --db %s --run 1%s", db, ""), 0, "%s", out);
  cr_assert_eq(cli("run %s --db %s --quiet --no-report", slow, db), 0, "%s", out);
  cr_expect_eq(cli("gate --db %s%s", db, ""), 0, "2%% is within the scenario's 10%%: %s", out);
  cr_expect(strstr(out, "tpot_p50_ms") && !strstr(out, "ttft_p95_ms"),
            "only the scenario's metrics: %s", out);
  cr_expect_eq(cli("gate --db %s --tolerance 1%s", db, "%"), 1, "%s", out);
  cr_expect(strstr(out, "REGRESSED"), "%s", out);
  cr_expect_eq(cli("gate --db %s --metric tpot_p50_ms:1%s", db, "%"), 1, "%s", out);
  cr_expect(strstr(out, "tpot_p50_ms") && !strstr(out, "output_tok_s"), "%s", out);
}

// --- the CLI on synthetic databases

// A database at dir/name whose runs 1 .. n are single runs of scenario "x" in modes[i] with
// tpot_p50_ms = vals[i] on dp1, and baseline[i] their mark; its path in path.
static void synthetic_db(const char *dir, const char *name, int n, const char *const *modes,
                         const double *vals, const int *baseline, char *path, size_t cap) {
  snprintf(path, cap, "%s/%s", dir, name);
  store *s = NULL;
  sc_error err = {{0}};
  cr_assert_eq(store_open(path, &s, &err), SC_OK, "%s", err.msg);
  const char *const nm[] = {"tpot_p50_ms"};
  for (int i = 0; i < n; i++) add_run(s, "x", modes[i], one, 1, nm, &vals[i], 1);
  store_close(s);
  for (int i = 0; i < n; i++) {
    char sql[96];
    snprintf(sql, sizeof sql, "UPDATE run SET baseline = %d WHERE id = %d", baseline[i], i + 1);
    sc_test_exec(path, sql);
  }
}

// The (current_run, baseline_run) of every gate in the JSON in out, as "C:B C:B".
static const char *pairs(void) {
  static char buf[256];
  json_t *j = parse_json(), *g;
  size_t i;
  buf[0] = 0;
  json_array_foreach(json_object_get(j, "gates"), i, g) {
    size_t k = strlen(buf);
    snprintf(buf + k, sizeof buf - k, "%s%lld:%lld", i ? " " : "",
             (long long)json_integer_value(json_object_get(g, "current_run")),
             (long long)json_integer_value(json_object_get(g, "baseline_run")));
  }
  json_decref(j);
  return buf;
}

Test(gate_cli, the_default_baseline_is_the_latest_earlier_one_of_the_same_mode) {
  const char *dir = sc_test_tmpdir("gate-pick");
  char db[600];
  const char *const modes[] = {"sim", "sim", "sim", "real", "real"};
  double vals[] = {10, 10, 10, 10, 10};
  int mark[] = {1, 0, 1, 1, 0};
  synthetic_db(dir, "p.db", 5, modes, vals, mark, db, sizeof db);
  cr_expect_eq(cli("gate --db %s --run 2 --json%s", db, ""), 0, "%s", out);
  cr_expect_str_eq(pairs(), "2:1", "not the later baseline 3, nor the real one");
  // the latest run of each scenario and mode; run 3 is a baseline itself: the one before it
  cr_expect_eq(cli("gate --db %s --json%s", db, ""), 0, "%s", out);
  cr_expect_str_eq(pairs(), "5:4 3:1");
  cr_expect_eq(cli("gate --db %s --run 4%s", db, ""), 2, "%s", out);
  cr_expect(strstr(out, "no baseline"), "%s", out);
  cr_expect_eq(cli("gate --db %s --run 2 --baseline-run 3 --json%s", db, ""), 0, "%s", out);
  cr_expect_str_eq(pairs(), "2:3", "a baseline named is taken as it is");
}

Test(gate_cli, a_baseline_in_another_database_is_compared_by_run_id) {
  const char *dir = sc_test_tmpdir("gate-two");
  char cur[600], base[600], args[1400];
  const char *const modes[] = {"sim"};
  double b = 10, c = 11;
  int mark = 1, none = 0;
  synthetic_db(dir, "base.db", 1, modes, &b, &mark, base, sizeof base);
  synthetic_db(dir, "cur.db", 1, modes, &c, &none, cur, sizeof cur);
  snprintf(args, sizeof args, "gate --db %s --baseline %s", cur, base);
  cr_expect_eq(sc_test_run_cli(args, out, sizeof out), 1, "%s", out);
  cr_expect(strstr(out, "+10.0%") && strstr(out, "REGRESSED"), "%s", out);
}

Test(gate_cli, a_version_1_database_is_gated_as_it_is_and_migrated_only_by_baseline) {
  const char *dir = sc_test_tmpdir("gate-v1");
  char db[600];
  const char *const modes[] = {"sim", "sim"};
  double vals[] = {10, 10};
  int mark[] = {1, 0};
  synthetic_db(dir, "v1.db", 2, modes, vals, mark, db, sizeof db);
  sc_test_exec(db, sc_test_v4_sql);
  sc_test_exec(db, "ALTER TABLE run DROP COLUMN repeat_group; ALTER TABLE run DROP COLUMN "
                   "repeat_index; UPDATE meta SET value = '1' WHERE key = 'schema_version'");
  sc_test_exec(db, sc_test_token_table_v3_sql);
  cr_expect_eq(cli("gate --db %s%s", db, ""), 0, "%s", out);
  cr_expect(strstr(out, "same") && strstr(out, "1 repetition"), "%s", out);
  cr_expect_str_eq(sc_test_q1s(db, "SELECT value FROM meta WHERE key = 'schema_version'"), "1",
                   "the gate only reads");
  cr_expect_eq(cli("baseline --db %s --run 2%s", db, ""), 0, "%s", out);
  char want[16];
  snprintf(want, sizeof want, "%d", store_schema_version);
  cr_expect_str_eq(sc_test_q1s(db, "SELECT value FROM meta WHERE key = 'schema_version'"), want);
  cr_expect_eq(sc_test_q1(db, "SELECT count(*) FROM run WHERE baseline = 1"), 2);
}

Test(gate_cli, a_schema_newer_than_the_binary_is_refused_plainly) {
  const char *dir = sc_test_tmpdir("gate-new");
  char db[600];
  const char *const modes[] = {"sim", "sim"};
  double vals[] = {10, 10};
  int mark[] = {1, 0};
  synthetic_db(dir, "n.db", 2, modes, vals, mark, db, sizeof db);
  sc_test_exec(db, "UPDATE meta SET value = '99' WHERE key = 'schema_version'");
  cr_expect_eq(cli("gate --db %s%s", db, ""), 2, "%s", out);
  cr_expect(strstr(out, "schema version 99, newer than this shardcheck"), "%s", out);
  cr_expect_eq(cli("baseline --db %s --run 2%s", db, ""), 2, "%s", out);
  cr_expect(strstr(out, "newer than this shardcheck"), "%s", out);
}

Test(gate_cli, new_deployments_are_skipped_testcases_and_failures_match_the_json) {
  const char *dir = sc_test_tmpdir("gate-junit");
  char db[600], junit[600];
  snprintf(db, sizeof db, "%s/j.db", dir);
  snprintf(junit, sizeof junit, "%s/gate.xml", dir);
  store *s = NULL;
  sc_error err = {{0}};
  cr_assert_eq(store_open(db, &s, &err), SC_OK, "%s", err.msg);
  const char *const two[] = {"dp1", "tp2"};
  double b[] = {10, 1000, 0, 50}, c[] = {12, 800, 0, 50}; // tpot +20%, throughput -20%
  add_run(s, "x<&>", "sim", one, 1, names, b, 4);
  add_run(s, "x<&>", "sim", two, 2, names, c, 4);
  store_close(s);
  sc_test_exec(db, "UPDATE run SET baseline = 1 WHERE id = 1");
  cr_expect_eq(cli("gate --db %s --json%s", db, ""), 1, "%s", out);
  json_t *j = parse_json();
  cr_expect_eq(json_integer_value(json_object_get(j, "regressed")), 2, "tpot on dp1 only: %s",
               out);
  json_t *g = json_array_get(json_object_get(j, "gates"), 0);
  cr_expect_str_eq(json_string_value(json_object_get(g, "mode")), "sim");
  cr_expect(json_is_null(json_object_get(g, "noise")), "sim: no noise");
  cr_expect_float_eq(json_real_value(json_object_get(g, "alpha")), 0.01, 1e-12);
  size_t n_rows = json_array_size(json_object_get(g, "rows"));
  json_t *r0 = json_array_get(json_object_get(g, "rows"), 0);
  const char *keys[] = {"deployment", "phase", "metric", "baseline", "current", "change",
                        "tolerance", "p", "noise", "noise_current", "n_baseline", "n_current",
                        "verdict"};
  for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
    cr_expect_not_null(json_object_get(r0, keys[k]), "row key %s", keys[k]);
  json_decref(j);
  cr_expect_eq(cli("gate --db %s --junit %s", db, junit), 1, "%s", out);
  read_file(junit);
  cr_expect_eq(occurrences(out, "<testcase"), (int)n_rows, "%s", out);
  cr_expect_eq(occurrences(out, "<failure"), 2, "%s", out);
  cr_expect_eq(occurrences(out, "<skipped"), 3, "tp2's three metrics are new: %s", out);
  cr_expect(strstr(out, "name=\"x&lt;&amp;&gt;\"") && strstr(out, "failures=\"2\"") &&
                strstr(out, "skipped=\"3\""),
            "%s", out);
}

// --- prompt classes: their pooled rows are compared as CLASS:NAME

// A complete sim run of scenario "x", deployment dp1, whose overall ttft_p95_ms is `all` and
// whose prompt classes short and long have ttft_p95_ms short_v and long_v (pooled rows), and a
// per-phase short row the gate leaves out; its id.
static int64_t add_class_run(store *s, double all, double short_v, double long_v) {
  sc_error err = {{0}};
  store_run r = {.scenario = "x", .scenario_text = "name: x\n", .mode = "sim", .backend = "sim",
                 .model = "m", .seed = 1};
  int64_t id = 0, dep = 0, ph = 0;
  cr_assert_eq(store_run_begin(s, &r, &id, &err), SC_OK, "%s", err.msg);
  store_deployment sd = {.run_id = id, .idx = 0, .label = "dp1", .tp = 1, .pp = 1, .dp = 1};
  cr_assert_eq(store_deployment_begin(s, &sd, &dep, &err), SC_OK, "%s", err.msg);
  store_phase sp = {.run_id = id, .deployment_id = dep, .idx = 0, .name = "steady",
                    .kind = "rate"};
  cr_assert_eq(store_phase_begin(s, &sp, &ph, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(store_metric_add(s, id, dep, 0, NULL, "ttft_p95_ms", all, &err), SC_OK);
  cr_assert_eq(store_metric_add(s, id, dep, 0, "short", "ttft_p95_ms", short_v, &err), SC_OK);
  cr_assert_eq(store_metric_add(s, id, dep, 0, "long", "ttft_p95_ms", long_v, &err), SC_OK);
  cr_assert_eq(store_metric_add(s, id, dep, 0, "short", "requests", 40, &err), SC_OK);
  cr_assert_eq(store_metric_add(s, id, dep, ph, "short", "ttft_p95_ms", short_v, &err), SC_OK);
  cr_assert_eq(store_run_end(s, id, "complete", NULL, NULL, 1, &err), SC_OK, "%s", err.msg);
  return id;
}

Test(gate, a_starved_prompt_class_regresses_by_name_while_the_overall_metric_holds) {
  char path[600];
  store *s = fresh("gate-class", path, sizeof path);
  int64_t base = add_class_run(s, 1024, 420, 1100);
  int64_t same = add_class_run(s, 1024, 420, 1100);
  int64_t starved = add_class_run(s, 1020, 881, 1050);
  gate_options o = gate_options_defaults();
  gate_result g;
  sc_error err = {{0}};
  cr_assert_eq(gate_compare(store_db(s), same, store_db(s), base, &o, &g, &err), SC_OK, "%s",
               err.msg);
  cr_expect_eq(g.n, 3, "overall, short and long TTFT p95 of the whole deployment only");
  cr_expect_eq(row(&g, "dp1", "short:ttft_p95_ms")->v, GATE_SAME);
  cr_expect_eq(row(&g, "dp1", "long:ttft_p95_ms")->v, GATE_SAME);
  cr_expect_eq(g.regressed, 0, "an unchanged run is not flagged");
  gate_result_free(&g);
  cr_assert_eq(gate_compare(store_db(s), starved, store_db(s), base, &o, &g, &err), SC_OK);
  const gate_row *sh = row(&g, "dp1", "short:ttft_p95_ms");
  cr_expect_eq(sh->v, GATE_REGRESSED, "short TTFT p95 doubled");
  cr_expect_str_eq(sh->phase, "", "the class's pooled row");
  cr_expect_eq(row(&g, "dp1", "ttft_p95_ms")->v, GATE_SAME);
  cr_expect_eq(row(&g, "dp1", "long:ttft_p95_ms")->v, GATE_CHANGED, "better, and unasked");
  cr_expect_eq(g.regressed, 1);
  gate_result_free(&g);
  // chosen by name: CLASS:NAME picks that class's row with its own tolerance; a bare name
  // covers every class's row
  o.n_metrics = 1;
  snprintf(o.metrics[0].name, sizeof o.metrics[0].name, "short:ttft_p95_ms");
  o.metrics[0].tol = 1.5;
  cr_assert_eq(gate_compare(store_db(s), starved, store_db(s), base, &o, &g, &err), SC_OK);
  cr_expect_eq(g.n, 1, "only the short class's row");
  cr_expect_eq(row(&g, "dp1", "short:ttft_p95_ms")->v, GATE_SAME, "+110%% within 150%%");
  gate_result_free(&g);
  snprintf(o.metrics[0].name, sizeof o.metrics[0].name, "ttft_p95_ms");
  o.metrics[0].tol = -1;
  cr_assert_eq(gate_compare(store_db(s), starved, store_db(s), base, &o, &g, &err), SC_OK);
  cr_expect_eq(g.n, 3);
  cr_expect_eq(row(&g, "dp1", "short:ttft_p95_ms")->v, GATE_REGRESSED);
  gate_result_free(&g);
  store_close(s);
}

Test(gate_cli, metric_takes_a_prompt_class_name_with_or_without_a_tolerance) {
  char path[600];
  store *s = fresh("gate-class-cli", path, sizeof path);
  int64_t base = add_class_run(s, 1024, 420, 1100), cur = add_class_run(s, 1020, 881, 1090);
  store_close(s);
  char ids[64];
  snprintf(ids, sizeof ids, "--run %lld --baseline-run %lld", (long long)cur, (long long)base);
  cr_expect_eq(cli("gate --db %s %s --metric short:ttft_p95_ms --json", path, ids), 1, "%s", out);
  json_t *j = parse_json();
  int bad = 0;
  cr_expect_eq(count_rows(j, "", "REGRESSED", &bad), 1, "only short:ttft_p95_ms: %s", out);
  cr_expect_eq(count_rows(j, "short:ttft_p95_ms", "REGRESSED", &bad), 1);
  cr_expect_eq(bad, 1);
  json_decref(j);
  cr_expect_eq(cli("gate --db %s %s --metric short:ttft_p95_ms:200%%", path, ids), 0, "%s", out);
  cr_expect_eq(cli("gate --db %s %s --metric short:lost_requests", path, ids), 2, "%s", out);
  cr_expect(strstr(out, "short:lost_requests") != NULL, "%s", out);
  cr_expect_eq(cli("gate --db %s %s --metric ttft_p95_ms:fast", path, ids), 2, "%s", out);
  cr_expect(strstr(out, "needs a percentage after ':'") != NULL, "%s", out);
}

// --- a crashed or incomplete run never passes

// A run of scenario "x" that began, wrote its deployment and no metric (the process aborted
// before the end): status stays 'running'; its id.
static int64_t add_crashed_run(store *s, const char *mode) {
  sc_error err = {{0}};
  store_run r = {.scenario = "x", .scenario_text = "name: x\n", .mode = mode, .backend = mode,
                 .model = "m", .seed = 1};
  int64_t id = 0, dep = 0;
  cr_assert_eq(store_run_begin(s, &r, &id, &err), SC_OK, "%s", err.msg);
  store_deployment sd = {.run_id = id, .idx = 0, .label = "dp1", .tp = 1, .pp = 1, .dp = 1};
  cr_assert_eq(store_deployment_begin(s, &sd, &dep, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(store_flush(s, &err), SC_OK, "%s", err.msg);
  return id;
}

Test(gate, a_crashed_run_fails_with_every_row_missing_and_the_reason) {
  char path[600];
  store *s = fresh("gate-crash", path, sizeof path);
  double v[] = {10, 1000, 0, 50};
  int64_t base = add_run(s, "x", "sim", one, 1, names, v, 4);
  int64_t cur = add_crashed_run(s, "sim");
  gate_options o = gate_options_defaults();
  gate_result g;
  sc_error err = {{0}};
  cr_assert_eq(gate_compare(store_db(s), cur, store_db(s), base, &o, &g, &err), SC_OK, "%s",
               err.msg);
  cr_expect_eq(g.n, 3);
  cr_expect_eq(g.missing, 3, "every row the baseline has");
  for (int i = 0; i < g.n; i++) cr_expect_eq(g.rows[i].v, GATE_MISSING);
  cr_expect(strstr(g.incomplete, "has status 'running'") && strstr(g.incomplete, "crashed"),
            "%s", g.incomplete);
  cr_expect_eq(g.failed, 4, "3 missing rows and the incomplete run");
  gate_result_free(&g);
  // a run that failed on an error, its metrics written: still not a pass, and the error named
  int64_t failed = add_run(s, "x", "sim", one, 1, names, v, 4);
  sc_test_exec(path, "UPDATE run SET status = 'failed', error = 'invariant: kv block freed "
                     "twice' WHERE id = 3");
  cr_assert_eq(failed, 3);
  cr_assert_eq(gate_compare(store_db(s), failed, store_db(s), base, &o, &g, &err), SC_OK);
  cr_expect_eq(g.missing + g.regressed + g.changed, 0, "every number the same");
  cr_expect(strstr(g.incomplete, "'failed'") && strstr(g.incomplete, "freed twice"), "%s",
            g.incomplete);
  cr_expect_eq(g.failed, 1);
  gate_result_free(&g);
  store_close(s);
}

Test(gate_cli, the_default_run_is_the_latest_even_crashed_and_an_empty_database_is_refused) {
  const char *dir = sc_test_tmpdir("gate-crash-cli");
  char db[600], junit[600];
  snprintf(db, sizeof db, "%s/c.db", dir);
  snprintf(junit, sizeof junit, "%s/gate.xml", dir);
  store *s = NULL;
  sc_error err = {{0}};
  cr_assert_eq(store_open(db, &s, &err), SC_OK, "%s", err.msg);
  double v[] = {10, 1000, 0, 50};
  add_run(s, "x", "sim", one, 1, names, v, 4);
  add_run(s, "x", "sim", one, 1, names, v, 4);
  store_close(s);
  sc_test_exec(db, "UPDATE run SET baseline = 1 WHERE id = 1");
  cr_expect_eq(cli("gate --db %s%s", db, ""), 0, "%s", out);
  cr_assert_eq(store_open(db, &s, &err), SC_OK, "%s", err.msg);
  add_crashed_run(s, "sim"); // run 3: aborted, as with SIGABRT
  store_close(s);
  cr_expect_eq(cli("gate --db %s --junit %s", db, junit), 1, "not run 2, the complete one: %s",
               out);
  cr_expect(strstr(out, "run 3") && strstr(out, "MISSING") && strstr(out, "INCOMPLETE: run 3 "
            "has status 'running'") && strstr(out, "gate: FAIL"), "%s", out);
  read_file(junit);
  cr_expect(strstr(out, "type=\"incomplete\"") && strstr(out, "type=\"missing\"") &&
                strstr(out, "failures=\"4\""),
            "%s", out);
  cr_expect_eq(cli("gate --db %s --json%s", db, ""), 1, "%s", out);
  json_t *j = parse_json();
  json_t *g = json_array_get(json_object_get(j, "gates"), 0);
  cr_expect_eq(json_integer_value(json_object_get(g, "missing")), 3, "%s", out);
  cr_expect(json_is_string(json_object_get(g, "incomplete")), "%s", out);
  cr_expect_eq(json_integer_value(json_object_get(j, "failed")), 4, "%s", out);
  json_decref(j);
  // a crashed run with no baseline to compare with: nothing compared, still a failure
  char lone[600];
  snprintf(lone, sizeof lone, "%s/l.db", dir);
  cr_assert_eq(store_open(lone, &s, &err), SC_OK, "%s", err.msg);
  add_run(s, "y", "sim", one, 1, names, v, 4);
  add_crashed_run(s, "sim");
  store_close(s);
  cr_expect_eq(cli("gate --db %s%s", lone, ""), 1, "%s", out);
  cr_expect(strstr(out, "no baseline") && strstr(out, "INCOMPLETE: run 2 has status 'running'") &&
                strstr(out, "gate: FAIL"),
            "scenario y's complete run passes unjudged, x's crashed one fails: %s", out);
  // a database without a run has nothing to pass
  char empty[600];
  snprintf(empty, sizeof empty, "%s/e.db", dir);
  cr_assert_eq(store_open(empty, &s, &err), SC_OK, "%s", err.msg);
  store_close(s);
  cr_expect_eq(cli("gate --db %s%s", empty, ""), 2, "%s", out);
  cr_expect(strstr(out, "no runs in") && strstr(out, "nothing to gate"), "%s", out);
}

Test(gate_cli, sim_improvements_fail_unless_accepted) {
  const char *dir = sc_test_tmpdir("gate-accept");
  char db[600];
  const char *const modes[] = {"sim", "sim"};
  double vals[] = {10, 8}; // tpot 20% lower: better, and unexplained
  int mark[] = {1, 0};
  synthetic_db(dir, "a.db", 2, modes, vals, mark, db, sizeof db);
  cr_expect_eq(cli("gate --db %s%s", db, ""), 1, "%s", out);
  cr_expect(strstr(out, "CHANGED (better)") && strstr(out, "1 changed") &&
                strstr(out, "gate: FAIL"),
            "%s", out);
  cr_expect_eq(cli("gate --db %s --accept-improvements%s", db, ""), 0, "%s", out);
  cr_expect(strstr(out, "improved") && strstr(out, "gate: PASS"), "%s", out);
  cr_expect_eq(cli("gate --help%s%s", "", ""), 0, "%s", out);
  cr_expect(strstr(out, "--accept-improvements") && strstr(out, "--capacity"), "%s", out);
  // real runs are noisy: an improvement there passes as it did
  const char *const real[] = {"real", "real"};
  synthetic_db(dir, "r.db", 2, real, vals, mark, db, sizeof db);
  cr_expect_eq(cli("gate --db %s%s", db, ""), 0, "%s", out);
  cr_expect(strstr(out, "improved"), "%s", out);
}

// --- the direction table: derived here independently, and checked through the gate

// The better direction of a metric from its unit and name, not from the table: latencies and
// times are better lower, rates of tokens or requests higher (unless the metric only
// describes the load: arrival_rate), and of the rest, counts of bad events (errors, leaks,
// losses, mismatches, violations) and fractions of harm lower, except the few measures of
// goodness listed (and preemptions: its SLO is the floor of a scenario made for KV pressure, so
// fewer of them is that scenario losing what it exercises). -1 lower, 1 higher.
static int expected_dir(const mt_metric_info *m) {
  static const char *const higher[] = {"efficiency", "speedup", "prefix_cache_hit_rate",
                                       "swap_agreement", "knee_concurrency", "preemptions"};
  for (size_t i = 0; i < sizeof higher / sizeof *higher; i++)
    if (!strcmp(m->name, higher[i])) return 1;
  if (!strcmp(m->unit, "ms") || !strcmp(m->unit, "s")) return -1;
  if (!strcmp(m->unit, "tok/s") || !strcmp(m->unit, "req/s")) return 1;
  return -1;
}

// A complete sim run of scenario "x" whose deployment dp1 has metric `name` = v, and, when a
// prompt class carries it, class short's pooled row of it = v too; its id.
static int64_t add_dir_run(store *s, const char *name, double v) {
  sc_error err = {{0}};
  store_run r = {.scenario = "x", .scenario_text = "name: x\n", .mode = "sim", .backend = "sim",
                 .model = "m", .seed = 1};
  int64_t id = 0, dep = 0;
  cr_assert_eq(store_run_begin(s, &r, &id, &err), SC_OK, "%s", err.msg);
  store_deployment sd = {.run_id = id, .idx = 0, .label = "dp1", .tp = 1, .pp = 1, .dp = 1};
  cr_assert_eq(store_deployment_begin(s, &sd, &dep, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(store_metric_add(s, id, dep, 0, NULL, name, v, &err), SC_OK, "%s", err.msg);
  if (mt_metric_per_class(name))
    cr_assert_eq(store_metric_add(s, id, dep, 0, "short", name, v, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(store_run_end(s, id, "complete", NULL, NULL, 1, &err), SC_OK, "%s", err.msg);
  return id;
}

Test(gate, every_metric_direction_matches_its_unit_and_a_loss_regresses) {
  const mt_metric_info *all = NULL;
  int n = mt_metric_all(&all);
  cr_assert_gt(n, 50);
  char path[600];
  store *s = fresh("gate-dirs", path, sizeof path);
  int checked = 0;
  for (int i = 0; i < n; i++) {
    const mt_metric_info *m = &all[i];
    if (m->dir == MT_NEUTRAL) continue;
    int want = expected_dir(m);
    cr_expect_eq(m->dir == MT_HIGHER_BETTER ? 1 : -1, want,
                 "%s (%s) is %s better in the table; a new metric of this unit that is better "
                 "higher belongs in expected_dir's list", m->name, m->unit,
                 m->dir == MT_HIGHER_BETTER ? "higher" : "lower");
    // the gate, asked for this metric: 100 -> 120 is a loss when lower is better, 100 -> 80
    // when higher is, on the deployment's row and on a prompt class's
    double b = 100, c = want > 0 ? 80 : 120;
    int64_t base = add_dir_run(s, m->name, b), cur = add_dir_run(s, m->name, c);
    char cls[80];
    snprintf(cls, sizeof cls, "short:%s", m->name);
    gate_options o = gate_options_defaults();
    o.n_metrics = 1;
    snprintf(o.metrics[0].name, sizeof o.metrics[0].name, "%s", m->name);
    o.metrics[0].tol = -1;
    for (int k = 0; k < (mt_metric_per_class(m->name) ? 2 : 1); k++) {
      const char *rn = k ? cls : m->name;
      o.accept_improvements = false;
      cr_expect_eq(verdict_of(s, cur, base, &o, rn, NULL), GATE_REGRESSED,
                   "%s: %g -> %g is a loss", rn, b, c);
      o.accept_improvements = true;
      cr_expect_eq(verdict_of(s, base, cur, &o, rn, NULL), GATE_IMPROVED, "%s: %g -> %g is a gain",
                   rn, c, b);
      checked++;
    }
  }
  cr_expect_gt(checked, 45, "the directed metrics and the prompt classes' rows of them");
  // the throughput rows by name, the ones a flipped direction would turn into gains
  static const char *const throughput[] = {"output_tok_s", "req_s", "goodput_rps",
                                           "peak_output_tok_s"};
  for (size_t i = 0; i < sizeof throughput / sizeof *throughput; i++)
    cr_expect_eq(mt_metric_find(throughput[i])->dir, MT_HIGHER_BETTER, "%s", throughput[i]);
  store_close(s);
}

// --- capacity searches

// A capacity search of scenario "cap" with slo, and two layouts on h100-sxm: tp1 (cost 1/h)
// and tp2 (2/h), whose max_rate are r1 and r2 (NaN: none held; max_rate_lo/hi = x0.9/x1.1);
// best: the layout recommended (-1 none); its id.
static int64_t add_search(store *s, const char *slo, double r1, double r2, int best) {
  store_cap_search c = {.scenario = "cap", .scenario_text = "name: cap\n", .record = "summary",
                        .seed = 1, .target_rate = 10, .rate_lo = 1.25, .rate_hi = 40, .iters = 6,
                        .slo = slo, .costs = "h100-sxm=1", .best = best, .runner_up = -1,
                        .served = best >= 0, .note = "n"};
  store_cap_layout l[2];
  memset(l, 0, sizeof l);
  for (int i = 0; i < 2; i++) {
    double r = i ? r2 : r1;
    snprintf(l[i].kind, sizeof l[i].kind, "h100-sxm");
    l[i].tp = i + 1;
    l[i].pp = l[i].dp = 1;
    l[i].gpus = i + 1;
    snprintf(l[i].label, sizeof l[i].label, "tp%d", i + 1);
    l[i].cost_per_hour = i + 1;
    l[i].max_rate = r;
    l[i].max_rate_lo = r * 0.9;
    l[i].max_rate_hi = r * 1.1;
    l[i].output_tok_s = r * 100;
    l[i].cost_per_mtok = l[i].cost_per_hour / (r * 100 * 3600) * 1e6;
    l[i].error = 0.1;
  }
  store_cap_point p = {.layout = 0, .rate = 10, .pass = true, .ttft_p95_ms = 1, .tpot_p95_ms = 1,
                       .e2el_p95_ms = 1, .output_tok_s = 1000, .error_rate = 0};
  int64_t id = 0;
  sc_error err = {{0}};
  cr_assert_eq(store_capacity_add(s, &c, l, 2, &p, 1, &id, &err), SC_OK, "%s", err.msg);
  return id;
}

static const gate_row *cap_row(const gate_result *g, const char *dep, const char *metric) {
  return row(g, dep, metric);
}

Test(gate, capacity_answers_are_compared_both_ways_and_the_recommendation_by_name) {
  char path[600];
  store *s = fresh("gate-cap", path, sizeof path);
  const char *slo = "ttft_p95_ms 500, tpot_p95_ms 40";
  int64_t a = add_search(s, slo, 12, 30, 0);
  int64_t same = add_search(s, slo, 12, 30, 0);
  int64_t faster = add_search(s, slo, 12, 36, 0);  // tp2 +20%
  int64_t other = add_search(s, slo, 8, 30, 1);    // tp1 below the target: tp2 recommended
  int64_t none = add_search(s, slo, NAN, 30, 1);   // tp1 holds no rate at all
  gate_options o = gate_options_defaults();
  gate_result g;
  sc_error err = {{0}};
  cr_assert_eq(gate_capacity_compare(store_db(s), same, store_db(s), a, &o, &g, &err), SC_OK,
               "%s", err.msg);
  cr_expect(g.capacity && g.sim);
  cr_expect_eq(g.n, 9, "the recommendation and 4 rows per layout");
  cr_expect_eq(g.failed, 0);
  cr_expect_eq(cap_row(&g, "(search)", "recommendation")->v, GATE_SAME);
  cr_expect(strstr(cap_row(&g, "(search)", "recommendation")->note, "tp1 (h100-sxm)"), "%s",
            cap_row(&g, "(search)", "recommendation")->note);
  gate_result_free(&g);
  cr_assert_eq(gate_capacity_compare(store_db(s), faster, store_db(s), a, &o, &g, &err), SC_OK);
  cr_expect_eq(cap_row(&g, "tp2 h100-sxm", "max_rate")->v, GATE_CHANGED, "+20%% unasked");
  cr_expect_float_eq(cap_row(&g, "tp2 h100-sxm", "max_rate")->change, 0.2, 1e-9);
  cr_expect_eq(cap_row(&g, "tp2 h100-sxm", "cost_per_mtok")->v, GATE_CHANGED);
  cr_expect_eq(cap_row(&g, "tp1 h100-sxm", "max_rate")->v, GATE_SAME);
  cr_expect_eq(g.changed, 4);
  cr_expect_eq(g.failed, 4);
  gate_result_free(&g);
  cr_assert_eq(gate_capacity_compare(store_db(s), a, store_db(s), faster, &o, &g, &err), SC_OK);
  cr_expect_eq(cap_row(&g, "tp2 h100-sxm", "max_rate")->v, GATE_REGRESSED);
  cr_expect_eq(cap_row(&g, "tp2 h100-sxm", "cost_per_mtok")->v, GATE_REGRESSED);
  cr_expect_eq(g.regressed, 4);
  gate_result_free(&g);
  o.accept_improvements = true;
  cr_assert_eq(gate_capacity_compare(store_db(s), faster, store_db(s), a, &o, &g, &err), SC_OK);
  cr_expect_eq(g.failed, 0, "accepted");
  gate_result_free(&g);
  o.accept_improvements = false;
  // the recommendation moved to the dearer layout: regressed, with both names
  cr_assert_eq(gate_capacity_compare(store_db(s), other, store_db(s), a, &o, &g, &err), SC_OK);
  const gate_row *rec = cap_row(&g, "(search)", "recommendation");
  cr_expect_eq(rec->v, GATE_REGRESSED);
  cr_expect(strstr(rec->note, "tp1 (h100-sxm) -> tp2 (h100-sxm)"), "%s", rec->note);
  cr_expect_eq(cap_row(&g, "tp1 h100-sxm", "max_rate")->v, GATE_REGRESSED);
  gate_result_free(&g);
  // no rate held any more: the worst change there is
  cr_assert_eq(gate_capacity_compare(store_db(s), none, store_db(s), a, &o, &g, &err), SC_OK);
  cr_expect_eq(cap_row(&g, "tp1 h100-sxm", "max_rate")->v, GATE_REGRESSED);
  cr_expect_eq(cap_row(&g, "tp1 h100-sxm", "cost_per_mtok")->v, GATE_REGRESSED);
  gate_result_free(&g);
  // another question is refused
  int64_t q = add_search(s, "ttft_p95_ms 200, tpot_p95_ms 40", 12, 30, 0);
  cr_expect_eq(gate_capacity_compare(store_db(s), q, store_db(s), a, &o, &g, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "ask different questions (SLO"), "%s", err.msg);
  cr_expect_eq(g.n, 0);
  cr_expect_eq(gate_capacity_compare(store_db(s), 99, store_db(s), a, &o, &g, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "no capacity search 99"), "%s", err.msg);
  store_close(s);
}

Test(gate_cli, capacity_gate_picks_the_previous_search_and_refuses_another_question) {
  const char *dir = sc_test_tmpdir("gate-cap-cli");
  char db[600], base[600], args[1400];
  snprintf(db, sizeof db, "%s/c.db", dir);
  snprintf(base, sizeof base, "%s/b.db", dir);
  store *s = NULL;
  sc_error err = {{0}};
  const char *slo = "ttft_p95_ms 500";
  cr_assert_eq(store_open(base, &s, &err), SC_OK, "%s", err.msg);
  add_search(s, slo, 12, 30, 0);
  store_close(s);
  cr_assert_eq(store_open(db, &s, &err), SC_OK, "%s", err.msg);
  store_close(s);
  cr_expect_eq(cli("gate --capacity --db %s%s", db, ""), 2, "%s", out);
  cr_expect(strstr(out, "no capacity searches"), "%s", out);
  cr_assert_eq(store_open(db, &s, &err), SC_OK, "%s", err.msg);
  add_search(s, slo, 12, 30, 0);
  store_close(s);
  cr_expect_eq(cli("gate --capacity --db %s%s", db, ""), 2, "one search: %s", out);
  cr_expect(strstr(out, "no earlier search of scenario cap"), "%s", out);
  snprintf(args, sizeof args, "gate --capacity --db %s --baseline %s", db, base);
  cr_expect_eq(sc_test_run_cli(args, out, sizeof out), 0, "%s", out);
  cr_expect(strstr(out, "capacity search 1 against baseline search 1") &&
                strstr(out, "recommendation") && strstr(out, "gate: PASS"),
            "%s", out);
  cr_assert_eq(store_open(db, &s, &err), SC_OK, "%s", err.msg);
  add_search(s, slo, 12, 24, 0); // tp2's capacity down 20%
  store_close(s);
  cr_expect_eq(cli("gate --capacity --db %s --json%s", db, ""), 1, "%s", out);
  json_t *j = parse_json();
  json_t *g = json_array_get(json_object_get(j, "gates"), 0);
  cr_expect_str_eq(json_string_value(json_object_get(g, "mode")), "capacity");
  cr_expect_eq(json_integer_value(json_object_get(g, "current_run")), 2);
  cr_expect_eq(json_integer_value(json_object_get(g, "baseline_run")), 1);
  cr_expect_eq(json_integer_value(json_object_get(g, "regressed")), 4, "%s", out);
  json_decref(j);
  cr_expect_eq(cli("gate --capacity --db %s --run 2 --baseline-run 1 --tolerance 30%s", db, "%"),
               0, "%s", out);
  cr_assert_eq(store_open(db, &s, &err), SC_OK, "%s", err.msg);
  add_search(s, "ttft_p95_ms 400", 12, 30, 0);
  store_close(s);
  cr_expect_eq(cli("gate --capacity --db %s --baseline-run 1%s", db, ""), 2, "%s", out);
  cr_expect(strstr(out, "ask different questions (SLO 'ttft_p95_ms 400' against 'ttft_p95_ms "
                        "500')"),
            "%s", out);
  int lines = 0;
  for (const char *p = out; *p; p++) lines += *p == '\n';
  cr_expect_eq(lines, 1, "one line: %s", out);
  cr_expect_eq(cli("gate --capacity --db %s --metric ttft_p95_ms%s", db, ""), 2, "%s", out);
  cr_expect(strstr(out, "--metric is for runs"), "%s", out);
}
