// The capacity search (runner/capacity.c) and `shardcheck capacity`: the known-best layout on a
// constructed case, the refusal naming the best found, determinism, storage and the report.
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reports/query.h"
#include "reports/report.h"
#include "reports/store.h"
#include "runner/capacity.h"
#include "scenarios/scenario.h"
#include "tests/helpers.h"

// Short and light: llama3-8b on up to 2 H100s, 20 simulated seconds per probe. The SLO is on
// TTFT only, so every layout's capacity is where its queue starts to grow.
static const char *SCN =
    "name: cap\n"
    "mode: sim\n"
    "model: {preset: llama3-8b}\n"
    "hardware: {profile: h100-sxm, gpus: 2}\n"
    "deployments: [{tp: 1}]\n"
    "workload:\n"
    "  prompts:\n"
    "    - {input: {uniform: [128, 512]}, output: {uniform: [16, 64]}}\n"
    "  phases:\n"
    "    - {name: steady, rate: 20, arrival: poisson, duration: 20s, warmup: 2s}\n"
    "limits: {request_timeout: 30s}\n"
    "slo: {ttft_p95_ms: %s, error_rate: 0}\n"
    "seed: 3\n";

static scenario *load(const char *ttft) {
  char text[2048];
  snprintf(text, sizeof text, SCN, ttft);
  sc_error err = {{0}};
  scenario *s = NULL;
  cr_assert_eq(scenario_parse(text, strlen(text), "cap.yaml", ".", &s, &err), SC_OK, "%s", err.msg);
  return s;
}

static int find(const capacity_result *r, const char *label) {
  for (int i = 0; i < r->n_layouts; i++)
    if (!strcmp(r->layouts[i].label, label)) return i;
  return -1;
}

// Two replicas on two GPUs double one replica's capacity (the router splits the load), while
// tp2 on NVLink is faster per request but one queue: with a cost per GPU of 1, tp1 is the
// cheapest layout for a target one GPU serves, and dp2 the cheapest for twice that.
Test(capacity, picks_the_known_best_layout_on_a_constructed_case) {
  scenario *s = load("400");
  capacity_options o = capacity_options_defaults();
  o.iters = 5;
  o.rate_lo = 4;
  o.rate_hi = 256;
  o.error = 0; // the predictions alone (the interval: the next test)
  capacity_result r;
  sc_error err = {{0}};
  cr_assert_eq(capacity_search(s, &o, &r, &err), SC_OK, "%s", err.msg);
  int tp1 = find(&r, "tp1"), dp2 = find(&r, "dp2"), tp2 = find(&r, "tp2");
  cr_assert(tp1 >= 0 && dp2 >= 0 && tp2 >= 0, "layouts tp1, dp2 and tp2 were searched");
  cr_expect_eq(r.n_points, r.n_layouts * (o.iters + 2),
               "every layout bracketed and bisected within its budget");
  double c1 = r.layouts[tp1].max_rate, c2 = r.layouts[dp2].max_rate;
  cr_assert(c1 > 4 && c1 < 256, "tp1's capacity is inside the range: %g", c1);
  cr_expect(c2 > 1.6 * c1, "dp2 serves about twice tp1: %g against %g", c2, c1);
  cr_expect_eq(r.best, tp1, "tp1 serves the scenario's 20 req/s at one GPU: %s", r.note);
  capacity_result_free(&r);
  // a target between one GPU's capacity and two GPUs': dp2 or tp2, whichever serves more
  o.target_rate = c1 * 1.3;
  cr_assert_eq(capacity_search(s, &o, &r, &err), SC_OK, "%s", err.msg);
  int want = r.layouts[dp2].max_rate >= r.layouts[tp2].max_rate ? dp2 : tp2;
  cr_expect_eq(r.best, want, "%s", r.note);
  cr_expect(r.runner_up >= 0 && r.layouts[r.runner_up].gpus == 2, "%s", r.note);
  cr_expect(strstr(r.note, "Runner-up") && strstr(r.note, "lost on"), "%s", r.note);
  capacity_result_free(&r);
  scenario_free(s);
}

// With an interval of +-20% on the profile's prices, each layout's capacity has a pessimistic
// and an optimistic bound around its prediction, the recommendation is the cheapest layout
// whose pessimistic bound serves the target, and a target that only predictions serve is
// refused as too wide an interval to choose.
Test(capacity, picks_by_the_pessimistic_bound_and_says_when_the_interval_is_too_wide) {
  scenario *s = load("400");
  capacity_options o = capacity_options_defaults();
  o.iters = 6;
  o.rate_lo = 4;
  o.rate_hi = 256;
  o.error = 0.2;
  capacity_result r;
  sc_error err = {{0}};
  cr_assert_eq(capacity_search(s, &o, &r, &err), SC_OK, "%s", err.msg);
  int tp1 = find(&r, "tp1"), dp2 = find(&r, "dp2");
  cr_assert(tp1 >= 0 && dp2 >= 0);
  double top = 0;
  for (int i = 0; i < r.n_layouts; i++) {
    const store_cap_layout *l = &r.layouts[i];
    cr_expect(l->max_rate_lo < l->max_rate && l->max_rate < l->max_rate_hi,
              "%s: %g in [%g, %g]", l->label, l->max_rate, l->max_rate_lo, l->max_rate_hi);
    cr_expect(l->max_rate_lo > 0.6 * l->max_rate && l->max_rate_hi < 1.6 * l->max_rate,
              "%s: about +-20%%: [%g, %g] around %g", l->label, l->max_rate_lo, l->max_rate_hi,
              l->max_rate);
    cr_expect_float_eq(l->error, 0.2, 1e-12);
    top = fmax(top, l->max_rate);
  }
  int lows = 0, highs = 0;
  for (int k = 0; k < r.n_points; k++) {
    lows += r.points[k].bound < 0;
    highs += r.points[k].bound > 0;
  }
  cr_expect(lows > 0 && highs > 0, "the bounds' searches are points too");
  cr_expect_eq(r.best, tp1, "%s", r.note);
  cr_expect(strstr(r.note, "["), "the interval in the note: %s", r.note);
  double c1 = r.layouts[tp1].max_rate, lo1 = r.layouts[tp1].max_rate_lo;
  capacity_result_free(&r);
  // tp1's prediction serves this target, its pessimistic bound does not: not tp1
  o.target_rate = sqrt(c1 * lo1);
  cr_assert_eq(capacity_search(s, &o, &r, &err), SC_OK, "%s", err.msg);
  cr_expect(r.best >= 0 && r.best != tp1 && r.layouts[r.best].max_rate_lo >= o.target_rate,
            "%s", r.note);
  top = 0; // the highest capacity, from a search that started nearer it
  for (int i = 0; i < r.n_layouts; i++) top = fmax(top, r.layouts[i].max_rate);
  capacity_result_free(&r);
  // only predictions serve it: too wide to choose
  o.target_rate = top * 0.97;
  cr_assert_eq(capacity_search(s, &o, &r, &err), SC_OK, "%s", err.msg);
  cr_expect_eq(r.best, -1, "%s", r.note);
  cr_expect(strstr(r.note, "the interval is too wide to choose"), "%s", r.note);
  capacity_result_free(&r);
  scenario_free(s);
}

// An SLO loose enough to hold past the throughput's knee (TTFT p95 30 s on 20 s phases: a
// queue that grows still answers in time): without the knee rule every layout "serves" the top
// of the range; with it each layout's capacity stops at its knee, the probe above fails saying
// why, and its throughput there is the most the layout delivered.
Test(capacity, a_loose_slo_stops_at_the_knee_and_says_so) {
  scenario *s = load("30000");
  capacity_options o = capacity_options_defaults();
  o.iters = 5;
  o.rate_lo = 4;
  o.rate_hi = 256;
  o.error = 0;
  o.saturation = false;
  capacity_result off, on;
  sc_error err = {{0}};
  cr_assert_eq(capacity_search(s, &o, &off, &err), SC_OK, "%s", err.msg);
  int tp1 = find(&off, "tp1");
  cr_assert(tp1 >= 0);
  cr_expect(off.layouts[tp1].capped && off.layouts[tp1].max_rate == 256,
            "without the knee tp1 holds the SLO at the top: %g", off.layouts[tp1].max_rate);
  cr_expect(isnan(off.layouts[tp1].knee_rate));
  o.saturation = true;
  cr_assert_eq(capacity_search(s, &o, &on, &err), SC_OK, "%s", err.msg);
  for (int i = 0; i < on.n_layouts; i++) {
    const store_cap_layout *l = &on.layouts[i];
    cr_expect(!isnan(l->knee_rate) && !isnan(l->max_rate), "%s: knee %g", l->label, l->knee_rate);
    cr_expect(l->max_rate <= l->knee_rate, "%s: capacity %g past its knee %g", l->label,
              l->max_rate, l->knee_rate);
    cr_expect(strstr(l->limit, "past the knee"), "%s: %s", l->label, l->limit);
    // the knee's throughput is the most any probe of the layout delivered, within the gain
    double top = 0, at = NAN;
    for (int k = 0; k < on.n_points; k++) {
      const store_cap_point *p = &on.points[k];
      if (p->layout != i) continue;
      top = fmax(top, p->output_tok_s);
      if (p->rate == l->knee_rate) at = p->output_tok_s;
      if (p->rate > l->knee_rate) cr_expect_not(p->pass, "%s: %g req/s above the knee held",
                                                l->label, p->rate);
    }
    cr_expect(at >= top / 1.1, "%s: %g tok/s at the knee, %g at most", l->label, at, top);
  }
  double c1 = on.layouts[find(&on, "tp1")].max_rate;
  cr_expect(c1 > 32 && c1 < 256, "tp1 stops inside the range: %g", c1);
  capacity_result_free(&on);
  // a budget that would bisect finer than the gain: a bracket topped by a probe past the knee
  // ends within 1 + gain, its probes left unspent
  o.iters = 9;
  cr_assert_eq(capacity_search(s, &o, &on, &err), SC_OK, "%s", err.msg);
  cr_expect_lt(on.n_points, on.n_layouts * (o.iters + 2));
  for (int i = 0; i < on.n_layouts; i++) {
    const store_cap_layout *l = &on.layouts[i];
    double above = INFINITY;
    for (int k = 0; k < on.n_points; k++)
      if (on.points[k].layout == i && on.points[k].rate > l->max_rate)
        above = fmin(above, on.points[k].rate);
    cr_expect(strstr(l->limit, "past the knee") && above <= l->max_rate * (1 + o.sat_gain),
              "%s: %g then %g (%s)", l->label, l->max_rate, above, l->limit);
  }
  capacity_result_free(&off);
  capacity_result_free(&on);
  scenario_free(s);
}

// The knee in the table, the report and the database, the same with one process and two;
// --saturation off and bad values of it.
Test(capacity, the_knee_is_stored_shown_and_the_same_with_workers) {
  char text[2048];
  snprintf(text, sizeof text, SCN, "30000");
  const char *sc = sc_test_write_tmp("cap-knee", "cap.yaml", text);
  const char *dir = sc_test_tmpdir("cap-knee-out");
  char out[3][16384], args[2048], html[2][1200];
  for (int k = 0; k < 2; k++) {
    snprintf(args, sizeof args,
             "capacity %s --iters 3 --rate-range 4:256 --error 0.2 --db %s/c.db --out %s/r%d "
             "--quiet --jobs %d",
             sc, dir, dir, k, k + 1);
    cr_assert_eq(sc_test_run_cli_clean(args, out[k], sizeof out[k]), 0, "%s", out[k]);
    snprintf(html[k], sizeof html[k], "%s/r%d/index.html", dir, k);
  }
  cr_expect_str_eq(out[0], out[1]);
  cr_expect(strstr(out[0], "knee req/s") && strstr(out[0], "past the knee"), "%s", out[0]);
  char *a = sc_test_read_file(html[0], NULL), *b = sc_test_read_file(html[1], NULL);
  cr_assert(a && b);
  cr_expect_str_eq(a, b, "the two reports differ");
  cr_expect(strstr(a, "<th>knee req/s</th>") != NULL);
  free(a);
  free(b);
  char db[1200];
  snprintf(db, sizeof db, "%s/c.db", dir);
  cr_expect_eq(sc_test_q1(db, "SELECT count(*) FROM capacity_layout WHERE capacity_id = 1 AND "
                              "knee_rate IS NOT NULL AND max_rate <= knee_rate"),
               sc_test_q1(db, "SELECT count(*) FROM capacity_layout WHERE capacity_id = 1"));
  cr_expect_eq(sc_test_q1(db, "SELECT count(*) FROM (SELECT layout, idx, rate, pass, failed "
                              "FROM capacity_point WHERE capacity_id = 1 EXCEPT SELECT layout, "
                              "idx, rate, pass, failed FROM capacity_point WHERE capacity_id = "
                              "2)"),
               0);
  // off: the table as before the knee, no knee stored
  snprintf(args, sizeof args,
           "capacity %s --iters 3 --rate-range 4:256 --error 0 --saturation off --db %s/c.db "
           "--out %s/r2 --quiet",
           sc, dir, dir);
  cr_assert_eq(sc_test_run_cli_clean(args, out[2], sizeof out[2]), 0, "%s", out[2]);
  cr_expect(!strstr(out[2], "knee"), "%s", out[2]);
  cr_expect_eq(sc_test_q1(db, "SELECT count(*) FROM capacity_layout WHERE capacity_id = 3 AND "
                              "knee_rate IS NOT NULL"),
               0);
  static const char *const bad[] = {"0.05", "x:3", "0.05:0.5", "-1:3", "11:3", "0.05:"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    snprintf(args, sizeof args, "capacity %s --saturation %s --db %s/c.db", sc, bad[i], dir);
    cr_expect_eq(sc_test_run_cli_clean(args, out[2], sizeof out[2]), 2, "%s: %s", bad[i], out[2]);
    cr_expect(strstr(out[2], "--saturation") != NULL, "%s", out[2]);
  }
}

Test(capacity, refuses_an_slo_no_layout_meets_naming_the_best_found) {
  scenario *s = load("400");
  capacity_options o = capacity_options_defaults();
  o.iters = 3;
  o.rate_lo = 4;
  o.rate_hi = 64;
  o.error = 0;
  o.target_rate = 500; // beyond any layout of two GPUs
  capacity_result r;
  sc_error err = {{0}};
  cr_assert_eq(capacity_search(s, &o, &r, &err), SC_OK, "%s", err.msg);
  cr_expect_eq(r.best, -1);
  cr_expect(strstr(r.note, "no layout serves 500 req/s") && strstr(r.note, "the best found is"),
            "%s", r.note);
  capacity_result_free(&r);
  scenario_free(s);
  // an SLO nothing meets even at the bottom of the range
  s = load("0.001");
  o.target_rate = 0;
  cr_assert_eq(capacity_search(s, &o, &r, &err), SC_OK, "%s", err.msg);
  cr_expect_eq(r.best, -1);
  cr_expect(strstr(r.note, "none holds it even at 4 req/s"), "%s", r.note);
  capacity_result_free(&r);
  scenario_free(s);
}

Test(capacity, a_scenario_without_slo_or_with_a_ramp_is_refused_naming_it) {
  const char *text = "name: c\nmode: sim\nmodel: {preset: llama3-8b}\n"
                     "hardware: {profile: h100-sxm, gpus: 1}\ndeployments: [{tp: 1}]\n"
                     "workload:\n  prompts: [{input: 64, output: 8}]\n"
                     "  phases:\n    - {ramp: {concurrency: [1, 2]}, hold: 1s}\n"
                     "slo: {ttft_p95_ms: 100}\n";
  sc_error err = {{0}};
  scenario *s = NULL;
  cr_assert_eq(scenario_parse(text, strlen(text), "r.yaml", ".", &s, &err), SC_OK, "%s", err.msg);
  capacity_options o = capacity_options_defaults();
  capacity_result r;
  cr_expect_eq(capacity_search(s, &o, &r, &err), SC_INVALID);
  cr_expect(strstr(err.msg, ":9:") && strstr(err.msg, "rate phase"), "%s", err.msg);
  capacity_result_free(&r);
  scenario_free(s);
}

// The CLI twice on the same inputs, in one process and in two workers: the same table, the
// same stored points, the same report. No probe of this search is past a knee: without the
// knee rule (--saturation off, the search as it was before it) the table and report are the
// same too.
Test(capacity, the_search_is_deterministic_stored_and_reported) {
  char text[2048];
  snprintf(text, sizeof text, SCN, "400");
  const char *sc = sc_test_write_tmp("cap-cli", "cap.yaml", text);
  const char *dir = sc_test_tmpdir("cap-cli-out");
  char out[3][16384], args[2048], html[3][1200];
  for (int k = 0; k < 3; k++) {
    snprintf(args, sizeof args,
             "capacity %s --iters 3 --rate-range 4:64 --cost h100-sxm=2.5 "
             "--db %s/%s --out %s/r%d --quiet --jobs %d%s",
             sc, dir, k < 2 ? "c.db" : "off.db", dir, k, k == 1 ? 2 : 1,
             k == 2 ? " --saturation off" : "");
    cr_assert_eq(sc_test_run_cli_clean(args, out[k], sizeof out[k]), 0, "%s", out[k]);
    snprintf(html[k], sizeof html[k], "%s/r%d/index.html", dir, k);
  }
  cr_expect_str_eq(out[0], out[1]);
  cr_expect_str_eq(out[0], out[2], "the knee rule changed a search that never reached a knee");
  cr_expect(!strstr(out[0], "knee"), "%s", out[0]);
  char *c = sc_test_read_file(html[2], NULL);
  cr_assert(c);
  cr_expect(strstr(out[0], "recommended: h100-sxm") != NULL, "%s", out[0]);
  char *a = sc_test_read_file(html[0], NULL), *b = sc_test_read_file(html[1], NULL);
  cr_assert(a && b);
  cr_expect_str_eq(a, b, "the two reports differ");
  cr_expect_str_eq(a, c, "the report without the knee rule differs");
  cr_expect(strstr(a, "Every simulated point") != NULL);
  free(a);
  free(b);
  free(c);
  char db[1200];
  snprintf(db, sizeof db, "%s/c.db", dir);
  cr_expect_eq(sc_test_q1(db, "SELECT count(*) FROM capacity"), 2);
  cr_expect_eq(sc_test_q1(db, "SELECT count(*) FROM (SELECT layout, idx, rate, pass, "
                              "ttft_p95_ms FROM capacity_point WHERE capacity_id = 1 EXCEPT "
                              "SELECT layout, idx, rate, pass, ttft_p95_ms FROM capacity_point "
                              "WHERE capacity_id = 2)"),
               0);
  cr_expect_gt(sc_test_q1(db, "SELECT count(*) FROM capacity_point WHERE capacity_id = 1"), 0);
  // the interval is stored: the profile's (the idealized engine's documented error)
  cr_expect_eq(sc_test_q1(db, "SELECT count(*) FROM capacity_layout WHERE capacity_id = 1 AND "
                              "NOT (max_rate_lo <= max_rate AND max_rate <= max_rate_hi AND "
                              "error = 0.5)"),
               0);
  cr_expect_gt(sc_test_q1(db, "SELECT count(*) FROM capacity_point WHERE bound = -1"), 0);
  cr_expect(strstr(out[0], "interval"), "the table shows it: %s", out[0]);
  // a search no layout passes exits 1 naming the best found
  snprintf(args, sizeof args,
           "capacity %s --iters 2 --rate 500 --rate-range 4:64 --db %s/c.db "
           "--out %s/r2 --quiet",
           sc, dir, dir);
  cr_expect_eq(sc_test_run_cli_clean(args, out[0], sizeof out[0]), 1, "%s", out[0]);
  cr_expect(strstr(out[0], "shardcheck capacity: no layout serves 500 req/s") != NULL, "%s",
            out[0]);
  snprintf(args, sizeof args, "capacity %s --gpus h100-sxm --db %s/c.db", sc, dir);
  cr_expect_eq(sc_test_run_cli_clean(args, out[0], sizeof out[0]), 2, "%s", out[0]);
  cr_expect(strstr(out[0], "--gpus") != NULL, "%s", out[0]);
  snprintf(args, sizeof args, "capacity %s --cost h200=3 --db %s/c.db", sc, dir);
  cr_expect_eq(sc_test_run_cli_clean(args, out[0], sizeof out[0]), 2, "%s", out[0]);
  cr_expect(strstr(out[0], "not among --gpus") != NULL, "%s", out[0]);
}
