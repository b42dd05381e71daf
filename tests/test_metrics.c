// Tests for the metric arithmetic (reports/metrics.c): percentiles, TTFT/TPOT/ITL/E2EL
// distributions over a hand-made trace, throughput and goodput over a window, error kinds,
// warm-up and class filters, the name -> value view, goodput limits from an SLO, scaling, the
// knee and the SLO verdicts. Every expected number is worked out in a comment beside it.
//
// Not here: which requests the runner passes for a phase or a class, and the rows it stores
// (tests of runner/runner.c); the SLO parser (tests of scenarios/scenario_slo.c): SLOs here are
// filled by hand.
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "reports/metrics.h"

#define MS 1000000ULL // ns per ms
#define EPS 1e-9

// --- helpers

static void near(double got, double want, const char *what) {
  cr_assert(fabs(got - want) <= EPS * fmax(1.0, fabs(want)), "%s: got %.12g, want %.12g", what,
            got, want);
}

static void dist_is(const mt_dist *d, int n, double mean, double p50, double p90, double p95,
                    double p99, double max, const char *what) {
  cr_assert_eq(d->n, n, "%s: n %d, want %d", what, d->n, n);
  const char *stat[] = {"mean", "p50", "p90", "p95", "p99", "max"};
  double got[] = {d->mean, d->p50, d->p90, d->p95, d->p99, d->max};
  double want[] = {mean, p50, p90, p95, p99, max};
  for (int i = 0; i < 6; i++) {
    char w[64];
    snprintf(w, sizeof w, "%s %s", what, stat[i]);
    near(got[i], want[i], w);
  }
}

static void dist_is_empty(const mt_dist *d) {
  cr_assert_eq(d->n, 0);
  cr_assert(isnan(d->mean) && isnan(d->p50) && isnan(d->p90) && isnan(d->p95) &&
            isnan(d->p99) && isnan(d->max));
}

// The trace: five OK requests, class 0 unless a test changes it. Times in ms since start.
//
//   req  arrival  tokens at                finish  n  TTFT  E2EL  TPOT              ITL gaps
//   R0     0      100 120 140 160            160   4  100   160   (160-100)/3 = 20  20 20 20
//   R1    10       60  90                     90   2   50    80   (90-60)/1   = 30  30
//   R2    20      220                        230   1  200   210   -                 -
//   R3    30       80  90 100 110 150        150   5   50   120   (150-80)/4  = 17.5 10 10 10 40
//   R4    40      140 180 240                240   3  100   200   (240-140)/2 = 50  40 60
//
// R2 has one token (in TTFT and E2EL, not in TPOT or ITL) and finishes 10 ms after its token,
// so E2EL comes from finish_ns, not the last token. Prompt tokens 10, 20, 30, 40, 50.
static const uint64_t tok0[] = {100 * MS, 120 * MS, 140 * MS, 160 * MS};
static const uint64_t tok1[] = {60 * MS, 90 * MS};
static const uint64_t tok2[] = {220 * MS};
static const uint64_t tok3[] = {80 * MS, 90 * MS, 100 * MS, 110 * MS, 150 * MS};
static const uint64_t tok4[] = {140 * MS, 180 * MS, 240 * MS};

static int trace(mt_request *r) {
  mt_request t[] = {
      {0, 160 * MS, tok0, 4, 10, REQ_OK, NULL, 0, false},
      {10 * MS, 90 * MS, tok1, 2, 20, REQ_OK, NULL, 0, false},
      {20 * MS, 230 * MS, tok2, 1, 30, REQ_OK, NULL, 0, false},
      {30 * MS, 150 * MS, tok3, 5, 40, REQ_OK, NULL, 0, false},
      {40 * MS, 240 * MS, tok4, 3, 50, REQ_OK, NULL, 0, false},
  };
  memcpy(r, t, sizeof t);
  return 5;
}

// Tokens of the non-OK requests below (times in ms).
static const uint64_t tok_c[] = {70 * MS, 80 * MS};            // cancelled after 2 tokens
static const uint64_t tok_f[] = {90 * MS};                     // failed after 1 token
static const uint64_t tok_t[] = {150 * MS, 200 * MS, 250 * MS}; // timed out after 3 tokens

// The trace plus six requests that did not complete:
//   R5  cancelled            arrival  50, tokens 70 80, finish  85
//   R6  failed "oom"          arrival  60, token 90,     finish  95
//   R7  failed "replica_lost" arrival  70, no tokens,    finish 300 (the last finish)
//   R8  failed, reason NULL   arrival  80, no tokens,    finish 100
//   R9  timeout              arrival  90, tokens 150 200 250, finish 290
//   R10 failed "oom"          arrival 100, no tokens,    finish 120
static int trace_with_errors(mt_request *r) {
  int n = trace(r);
  mt_request t[] = {
      {50 * MS, 85 * MS, tok_c, 2, 7, REQ_CANCELLED, NULL, 0, false},
      {60 * MS, 95 * MS, tok_f, 1, 7, REQ_FAILED, "oom", 0, false},
      {70 * MS, 300 * MS, NULL, 0, 7, REQ_FAILED, "replica_lost", 0, false},
      {80 * MS, 100 * MS, NULL, 0, 7, REQ_FAILED, NULL, 0, false},
      {90 * MS, 290 * MS, tok_t, 3, 7, REQ_TIMEOUT, NULL, 0, false},
      {100 * MS, 120 * MS, NULL, 0, 7, REQ_FAILED, "oom", 0, false},
  };
  memcpy(r + n, t, sizeof t);
  return n + 6;
}

static mt_summary summarize(const mt_request *r, int n, int class_filter, const mt_goodput *g,
                            uint64_t t0, uint64_t t1) {
  mt_summary s;
  cr_assert_eq(mt_summarize(r, n, class_filter, g, t0, t1, &s), SC_OK);
  return s;
}

// --- percentiles

Test(percentile, interpolates_between_closest_ranks_like_numpy) {
  double v[] = {1, 2, 3, 4};
  // rank = p/100 * (n - 1) with n = 4:
  near(mt_percentile(v, 4, 50), 2.5, "p50");  // rank 1.5: 2 + 0.5 * (3 - 2)
  near(mt_percentile(v, 4, 90), 3.7, "p90");  // rank 2.7: 3 + 0.7 * (4 - 3)
  near(mt_percentile(v, 4, 25), 1.75, "p25"); // rank 0.75: 1 + 0.75 * (2 - 1)
  cr_assert_eq(mt_percentile(v, 4, 0), 1.0);   // rank 0: the minimum, exactly
  cr_assert_eq(mt_percentile(v, 4, 100), 4.0); // rank 3: the maximum, exactly
  double w[] = {10, 20};
  near(mt_percentile(w, 2, 25), 12.5, "two values p25"); // rank 0.25: 10 + 0.25 * 10
}

Test(percentile, one_value_is_every_percentile_and_none_is_nan) {
  double v[] = {7.25};
  cr_assert_eq(mt_percentile(v, 1, 0), 7.25);
  cr_assert_eq(mt_percentile(v, 1, 50), 7.25);
  cr_assert_eq(mt_percentile(v, 1, 99), 7.25);
  cr_assert_eq(mt_percentile(v, 1, 100), 7.25);
  cr_assert(isnan(mt_percentile(v, 0, 50)));
  cr_assert(isnan(mt_percentile(NULL, 0, 50)));
}

Test(percentile, ties_give_the_tied_value_exactly) {
  double v[] = {5, 5, 5, 9};
  cr_assert_eq(mt_percentile(v, 4, 60), 5.0); // rank 1.8, between two 5s
}

Test(percentile, dist_of_sorts_its_input_and_fills_every_field) {
  double v[] = {4, 1, 3, 2};
  mt_dist d;
  mt_dist_of(v, 4, &d);
  // sorted [1, 2, 3, 4]: mean 10/4 = 2.5; p50 2.5; p90 3.7; p95 rank 2.85: 3.85;
  // p99 rank 2.97: 3.97; max 4
  dist_is(&d, 4, 2.5, 2.5, 3.7, 3.85, 3.97, 4, "dist");
  cr_assert(v[0] == 1 && v[1] == 2 && v[2] == 3 && v[3] == 4, "sorted in place");
  mt_dist_of(v, 0, &d);
  dist_is_empty(&d);
}

// --- latency distributions

Test(summary, trace_gives_exact_ttft_tpot_itl_e2el) {
  mt_request r[8];
  int n = trace(r);
  mt_summary s = summarize(r, n, -1, NULL, 0, 0);
  // TTFT: 100 50 200 50 100 -> sorted 50 50 100 100 200; mean 500/5 = 100;
  // p50 rank 2: 100; p90 rank 3.6: 100 + 0.6*100 = 160; p95 rank 3.8: 180; p99 rank 3.96: 196
  dist_is(&s.ttft_ms, 5, 100, 100, 160, 180, 196, 200, "ttft");
  // TPOT (R2 has one token: left out): 20 30 17.5 50 -> sorted 17.5 20 30 50; mean 117.5/4 =
  // 29.375; p50 rank 1.5: 20 + 0.5*10 = 25; p90 rank 2.7: 30 + 0.7*20 = 44;
  // p95 rank 2.85: 30 + 0.85*20 = 47; p99 rank 2.97: 30 + 0.97*20 = 49.4; max 50
  dist_is(&s.tpot_ms, 4, 29.375, 25, 44, 47, 49.4, 50, "tpot");
  // ITL gaps pooled: 20 20 20 | 30 | 10 10 10 40 | 40 60 -> n 10, sorted
  // 10 10 10 20 20 20 30 40 40 60; sum 260, mean 26; p50 rank 4.5: 20;
  // p90 rank 8.1: 40 + 0.1*20 = 42; p95 rank 8.55: 40 + 0.55*20 = 51;
  // p99 rank 8.91: 40 + 0.91*20 = 58.2; max 60
  dist_is(&s.itl_ms, 10, 26, 20, 42, 51, 58.2, 60, "itl");
  // E2EL: 160 80 210 120 200 -> sorted 80 120 160 200 210; mean 770/5 = 154; p50 160;
  // p90 rank 3.6: 200 + 0.6*10 = 206; p95 rank 3.8: 208; p99 rank 3.96: 209.6; max 210
  dist_is(&s.e2el_ms, 5, 154, 160, 206, 208, 209.6, 210, "e2el");
}

Test(summary, one_token_output_counts_in_ttft_and_e2el_only) {
  mt_request r[8];
  trace(r);
  // R2 alone: TTFT 220 - 20 = 200, E2EL 230 - 20 = 210, no TPOT, no ITL.
  mt_summary s = summarize(&r[2], 1, -1, NULL, 0, 0);
  dist_is(&s.ttft_ms, 1, 200, 200, 200, 200, 200, 200, "ttft");
  dist_is(&s.e2el_ms, 1, 210, 210, 210, 210, 210, 210, "e2el");
  dist_is_empty(&s.tpot_ms);
  dist_is_empty(&s.itl_ms);
  cr_assert_eq(s.output_tokens, 1);
}

Test(summary, counts_tokens_and_rates_over_the_span) {
  mt_request r[8];
  int n = trace(r);
  mt_summary s = summarize(r, n, -1, NULL, 0, 0);
  cr_assert_eq(s.requests, 5);
  cr_assert_eq(s.ok, 5);
  cr_assert_eq(s.good, 5); // no limits: every OK request is good
  cr_assert_eq(s.input_tokens, 150);  // 10+20+30+40+50
  cr_assert_eq(s.output_tokens, 15);  // 4+2+1+5+3
  near(s.window_s, 0.24, "window");   // first arrival 0 .. last finish 240 ms
  near(s.output_tok_s, 62.5, "tok/s"); // 15 / 0.24
  near(s.req_s, 5 / 0.24, "req/s");   // 20.833...
  near(s.goodput_rps, 5 / 0.24, "goodput");
  cr_assert_eq(s.error_rate, 0.0);
  cr_assert_eq(s.n_error_kinds, 0);
}

Test(summary, explicit_window_replaces_the_span) {
  mt_request r[8];
  int n = trace(r);
  mt_summary s = summarize(r, n, -1, NULL, 0, 500 * MS);
  near(s.window_s, 0.5, "window");
  near(s.output_tok_s, 30, "tok/s"); // 15 / 0.5
  near(s.req_s, 10, "req/s");        // 5 / 0.5
  // The window only divides: a window that starts after every arrival changes no latency.
  s = summarize(r, n, -1, NULL, 1000 * MS, 1250 * MS);
  near(s.window_s, 0.25, "window");
  near(s.output_tok_s, 60, "tok/s"); // 15 / 0.25
  near(s.ttft_ms.mean, 100, "ttft mean");
  // t1 <= t0 means no window: the span again.
  s = summarize(r, n, -1, NULL, 500 * MS, 500 * MS);
  near(s.window_s, 0.24, "window");
}

Test(summary, no_requests_gives_zero_counts_nan_latencies_and_no_rates) {
  mt_summary s = summarize(NULL, 0, -1, NULL, 0, 0);
  cr_assert_eq(s.requests, 0);
  cr_assert_eq(s.error_rate, 0.0);
  cr_assert_eq(s.window_s, 0.0);
  cr_assert(isnan(s.output_tok_s) && isnan(s.req_s) && isnan(s.goodput_rps));
  dist_is_empty(&s.ttft_ms);
  dist_is_empty(&s.tpot_ms);
  dist_is_empty(&s.itl_ms);
  dist_is_empty(&s.e2el_ms);
  // With a window, an empty phase has rates of zero.
  s = summarize(NULL, 0, -1, NULL, 0, 2000 * MS);
  near(s.window_s, 2, "window");
  cr_assert_eq(s.output_tok_s, 0.0);
  cr_assert_eq(s.req_s, 0.0);
}

Test(summary, malformed_records_are_refused) {
  mt_request r = {0, 10 * MS, NULL, 2, 1, REQ_OK, NULL, 0, false}; // 2 tokens, no times
  mt_summary s;
  cr_assert_eq(mt_summarize(&r, 1, -1, NULL, 0, 0, &s), SC_INVALID);
  cr_assert_eq(s.requests, 0);
  r.n_tokens = -1;
  r.token_ns = tok1;
  cr_assert_eq(mt_summarize(&r, 1, -1, NULL, 0, 0, &s), SC_INVALID);
}

// --- requests that did not complete

Test(errors, cancelled_failed_and_timeout_requests_are_counted_not_timed) {
  mt_request r[16];
  int n = trace_with_errors(r);
  mt_summary s = summarize(r, n, -1, NULL, 0, 0);
  cr_assert_eq(s.requests, 11);
  cr_assert_eq(s.ok, 5);
  cr_assert_eq(s.cancelled, 1);
  cr_assert_eq(s.failed, 4);  // R6 R7 R8 R10
  cr_assert_eq(s.timeout, 1); // R9
  cr_assert_eq(s.good, 5);    // only OK requests can be good
  near(s.error_rate, 5.0 / 11, "error_rate"); // (4 failed + 1 timeout) / 11; cancelled is not
  // Latencies are those of the five OK requests alone (as in the trace test).
  dist_is(&s.ttft_ms, 5, 100, 100, 160, 180, 196, 200, "ttft");
  dist_is(&s.tpot_ms, 4, 29.375, 25, 44, 47, 49.4, 50, "tpot");
  cr_assert_eq(s.itl_ms.n, 10);
  dist_is(&s.e2el_ms, 5, 154, 160, 206, 208, 209.6, 210, "e2el");
  // Tokens of cancelled, failed and timed-out requests are not output: 15 as before, and the
  // prompts of OK requests only: 150.
  cr_assert_eq(s.output_tokens, 15);
  cr_assert_eq(s.input_tokens, 150);
  // The span includes every request considered: 0 .. R7's finish at 300 ms.
  near(s.window_s, 0.3, "window");
  near(s.output_tok_s, 50, "tok/s"); // 15 / 0.3
  near(s.req_s, 5 / 0.3, "req/s");   // OK requests only
}

Test(errors, kinds_group_failed_reasons_and_timeouts_sorted_by_name) {
  mt_request r[16];
  int n = trace_with_errors(r);
  mt_summary s = summarize(r, n, -1, NULL, 0, 0);
  // NULL reason -> "error"; R6 and R10 share "oom"; R9 is "timeout".
  cr_assert_eq(s.n_error_kinds, 4);
  const char *kind[] = {"error", "oom", "replica_lost", "timeout"};
  int count[] = {1, 2, 1, 1};
  for (int i = 0; i < 4; i++) {
    cr_assert_str_eq(s.error_kind[i], kind[i]);
    cr_assert_eq(s.error_count[i], count[i], "%s", kind[i]);
  }
  double v = -1;
  cr_assert(mt_summary_value(&s, "errors_oom", &v));
  cr_assert_eq(v, 2.0);
  cr_assert(mt_summary_value(&s, "errors_timeout", &v));
  cr_assert_eq(v, 1.0);
  cr_assert_not(mt_summary_value(&s, "errors_hang", &v), "a kind that did not occur");
}

Test(errors, kinds_beyond_the_table_are_counted_as_other) {
  enum { N = MT_MAX_ERROR_KINDS + 3 };
  mt_request r[N];
  char reason[N][16];
  for (int i = 0; i < N; i++) {
    snprintf(reason[i], sizeof reason[i], "k%02d", i);
    r[i] = (mt_request){0, MS, NULL, 0, 1, REQ_FAILED, reason[i], 0, false};
  }
  mt_summary s = summarize(r, N, -1, NULL, 0, 0);
  // The first 15 reasons keep their name; the remaining 4 are counted as "other".
  cr_assert_eq(s.n_error_kinds, MT_MAX_ERROR_KINDS);
  int total = 0, other = -1;
  for (int i = 0; i < s.n_error_kinds; i++) {
    total += s.error_count[i];
    if (!strcmp(s.error_kind[i], "other")) other = s.error_count[i];
  }
  cr_assert_eq(total, N);
  cr_assert_eq(other, N - (MT_MAX_ERROR_KINDS - 1));
}

// --- filters

Test(filters, warmup_requests_count_nowhere) {
  mt_request r[8];
  int n = trace(r);
  // Warm-up requests: one OK (TTFT 500 ms, finish 1000 ms) and one failed (finish 2000 ms).
  static const uint64_t wt[] = {500 * MS, 1000 * MS};
  r[n++] = (mt_request){0, 1000 * MS, wt, 2, 99, REQ_OK, NULL, 0, true};
  r[n++] = (mt_request){0, 2000 * MS, NULL, 0, 99, REQ_FAILED, "oom", 0, true};
  mt_summary s = summarize(r, n, -1, NULL, 0, 0);
  cr_assert_eq(s.requests, 5);
  cr_assert_eq(s.failed, 0);
  cr_assert_eq(s.n_error_kinds, 0);
  cr_assert_eq(s.output_tokens, 15);
  cr_assert_eq(s.input_tokens, 150);
  near(s.window_s, 0.24, "window"); // the span ignores warm-up finishes at 1000 and 2000 ms
  dist_is(&s.ttft_ms, 5, 100, 100, 160, 180, 196, 200, "ttft");
}

Test(filters, class_filter_keeps_one_class) {
  mt_request r[8];
  int n = trace(r);
  r[1].class_idx = 1;
  r[3].class_idx = 1;
  mt_summary s = summarize(r, n, 1, NULL, 0, 0);
  // R1 and R3: TTFT 50 50; E2EL 80 120; TPOT 30 17.5; 2 + 5 = 7 output tokens;
  // span 10 .. 150 ms = 0.14 s
  cr_assert_eq(s.requests, 2);
  dist_is(&s.ttft_ms, 2, 50, 50, 50, 50, 50, 50, "ttft");
  // E2EL sorted 80 120: mean 100; p50 rank 0.5: 100; p90 rank 0.9: 116; p95: 118;
  // p99: 119.6
  dist_is(&s.e2el_ms, 2, 100, 100, 116, 118, 119.6, 120, "e2el");
  // TPOT sorted 17.5 30: mean 23.75; p50 23.75; p90 17.5 + 0.9*12.5 = 28.75; p95 29.375;
  // p99 29.875
  dist_is(&s.tpot_ms, 2, 23.75, 23.75, 28.75, 29.375, 29.875, 30, "tpot");
  cr_assert_eq(s.output_tokens, 7);
  near(s.window_s, 0.14, "window");
  near(s.output_tok_s, 50, "tok/s"); // 7 / 0.14
  // Class 0: R0 R2 R4, TTFT 100 200 100 -> mean 400/3; p50 100
  s = summarize(r, n, 0, NULL, 0, 0);
  cr_assert_eq(s.requests, 3);
  near(s.ttft_ms.mean, 400.0 / 3, "class 0 ttft mean");
  near(s.ttft_ms.p50, 100, "class 0 ttft p50");
  // -1: every class
  cr_assert_eq(summarize(r, n, -1, NULL, 0, 0).requests, 5);
}

// --- goodput

Test(goodput, limits_decide_which_requests_are_good) {
  mt_request r[16];
  int n = trace(r);
  // Per request (TTFT, TPOT, E2EL): R0 (100, 20, 160) R1 (50, 30, 80) R2 (200, -, 210)
  // R3 (50, 17.5, 120) R4 (100, 50, 200).
  mt_goodput g = {100, 30, 0};
  mt_summary s = summarize(r, n, -1, &g, 0, 0);
  // TTFT <= 100 and TPOT <= 30 (limits are inclusive): R0 R1 R3; R2 fails TTFT, R4 TPOT.
  cr_assert_eq(s.good, 3);
  near(s.goodput_rps, 12.5, "goodput"); // 3 / 0.24
  // A one-token request has no TPOT: with TPOT <= 10 only R2 is good (TTFT 200 <= 250).
  g = (mt_goodput){250, 10, 0};
  cr_assert_eq(summarize(r, n, -1, &g, 0, 0).good, 1);
  // E2EL <= 150: R1 (80) and R3 (120).
  g = (mt_goodput){0, 0, 150};
  cr_assert_eq(summarize(r, n, -1, &g, 0, 0).good, 2);
  // Limits <= 0 are no limits.
  g = (mt_goodput){0, -1, 0};
  cr_assert_eq(summarize(r, n, -1, &g, 0, 0).good, 5);
  // Requests that did not complete are never good, even with no limits.
  n = trace_with_errors(r);
  cr_assert_eq(summarize(r, n, -1, NULL, 0, 0).good, 5);
}

static scn_slo slo_of(const char *const *keys, const double *limits, int n) {
  scn_slo slo;
  memset(&slo, 0, sizeof slo);
  for (int i = 0; i < n; i++) {
    snprintf(slo.items[i].key, sizeof slo.items[i].key, "%s", keys[i]);
    slo.items[i].limit = limits[i];
  }
  slo.n = n;
  return slo;
}

Test(goodput, from_slo_takes_the_tightest_latency_limits_and_ignores_itl) {
  const char *keys[] = {"ttft_p95_ms", "ttft_mean_ms", "tpot_p99_ms", "itl_p95_ms",
                        "e2el_max_ms", "error_rate",   "output_tok_s"};
  double limits[] = {500, 300, 50, 5, 2000, 0.01, 100};
  scn_slo slo = slo_of(keys, limits, 7);
  mt_goodput g;
  mt_goodput_from_slo(&slo, &g);
  cr_assert_eq(g.ttft_ms, 300.0); // min(500, 300)
  cr_assert_eq(g.tpot_ms, 50.0);  // itl_p95_ms 5 does not make a TPOT limit
  cr_assert_eq(g.e2el_ms, 2000.0);
  slo.n = 0;
  mt_goodput_from_slo(&slo, &g);
  cr_assert(g.ttft_ms == 0 && g.tpot_ms == 0 && g.e2el_ms == 0, "no SLO, no limits");
}

// --- scaling and knee

Test(scaling, speedup_and_efficiency_against_the_one_gpu_deployment) {
  int gpus[] = {4, 1, 2};
  double tput[] = {320, 100, 180}, sp[3], ef[3];
  mt_scaling(gpus, tput, 3, sp, ef);
  // base: the 1-GPU deployment (index 1, 100 tok/s)
  near(sp[0], 3.2, "4 GPUs speedup");     // 320 / 100
  near(ef[0], 0.8, "4 GPUs efficiency");  // 320 / (4 * 100)
  near(sp[1], 1, "1 GPU speedup");
  near(ef[1], 1, "1 GPU efficiency");
  near(sp[2], 1.8, "2 GPUs speedup");     // 180 / 100
  near(ef[2], 0.9, "2 GPUs efficiency");  // 180 / (2 * 100)
}

Test(scaling, without_a_one_gpu_deployment_the_fewest_gpus_is_the_base) {
  int gpus[] = {2, 4, 8};
  double tput[] = {200, 360, 560}, sp[3], ef[3];
  mt_scaling(gpus, tput, 3, sp, ef);
  near(sp[0], 1, "2 GPUs speedup");
  near(ef[0], 1, "2 GPUs efficiency");
  near(sp[1], 1.8, "4 GPUs speedup");    // 360 / 200
  near(ef[1], 0.9, "4 GPUs efficiency"); // 360 / (4/2 * 200)
  near(sp[2], 2.8, "8 GPUs speedup");    // 560 / 200
  near(ef[2], 0.7, "8 GPUs efficiency"); // 560 / (8/2 * 200)
}

Test(scaling, a_base_without_throughput_gives_nan) {
  int gpus[] = {1, 2};
  double tput[] = {0, 180}, sp[2], ef[2];
  mt_scaling(gpus, tput, 2, sp, ef);
  cr_assert(isnan(sp[0]) && isnan(sp[1]) && isnan(ef[0]) && isnan(ef[1]));
  tput[0] = NAN;
  mt_scaling(gpus, tput, 2, sp, ef);
  cr_assert(isnan(sp[1]) && isnan(ef[1]));
}

Test(knee, highest_concurrency_meeting_the_limit_skipping_nan) {
  int conc[] = {1, 2, 4, 8, 16};
  double p95[] = {50, 80, NAN, 400, 900};
  cr_assert_eq(mt_knee(conc, p95, 5, 500), 8);  // 400 <= 500, 900 > 500
  cr_assert_eq(mt_knee(conc, p95, 5, 400), 8);  // inclusive
  double p95b[] = {50, 80, 300, NAN, 900};
  cr_assert_eq(mt_knee(conc, p95b, 5, 500), 4); // 8 has no data: skipped
}

Test(knee, none_meeting_the_limit_gives_minus_one) {
  int conc[] = {1, 2, 4};
  double p95[] = {50, 80, 120};
  cr_assert_eq(mt_knee(conc, p95, 3, 10), -1);
  double all_nan[] = {NAN, NAN, NAN};
  cr_assert_eq(mt_knee(conc, all_nan, 3, 1000), -1);
  cr_assert_eq(mt_knee(conc, p95, 0, 1000), -1);
}

// --- verdicts

static bool extra_lost(void *ud, const char *name, double *out, char *why, size_t cap) {
  if (strcmp(name, "lost_requests")) return false;
  *out = *(const double *)ud;
  if (isnan(*out)) snprintf(why, cap, "the history was not checked");
  return true;
}

Test(verdicts, lower_and_higher_better_metrics_compare_their_own_way) {
  mt_request r[8];
  int n = trace(r);
  mt_summary s = summarize(r, n, -1, NULL, 0, 0);
  const char *keys[] = {"ttft_p95_ms", "tpot_mean_ms", "output_tok_s", "req_s",
                        "error_rate",  "e2el_max_ms"};
  double limits[] = {200, 20, 50, 30, 0.01, 210};
  scn_slo slo = slo_of(keys, limits, 6);
  mt_verdict v[8];
  cr_assert_eq(mt_verdicts(&slo, &s, NULL, NULL, v, 8), 6);
  // ttft_p95_ms 180 <= 200: pass
  cr_assert_str_eq(v[0].slo, "ttft_p95_ms");
  cr_assert_str_eq(v[0].op, "<=");
  near(v[0].actual, 180, "ttft_p95_ms");
  cr_assert_eq(v[0].expected, 200.0);
  cr_assert(v[0].pass);
  // tpot_mean_ms 29.375 <= 20: fail
  cr_assert_str_eq(v[1].op, "<=");
  cr_assert_not(v[1].pass);
  // output_tok_s 62.5 >= 50: pass
  cr_assert_str_eq(v[2].op, ">=");
  near(v[2].actual, 62.5, "output_tok_s");
  cr_assert(v[2].pass);
  // req_s 20.83 >= 30: fail
  cr_assert_str_eq(v[3].op, ">=");
  cr_assert_not(v[3].pass);
  // error_rate 0 <= 0.01: pass
  cr_assert(v[4].pass);
  // e2el_max_ms 210 <= 210: equal passes
  cr_assert(v[5].pass);
  // cap: only as many as fit
  cr_assert_eq(mt_verdicts(&slo, &s, NULL, NULL, v, 2), 2);
}

Test(verdicts, missing_metric_is_nan_and_fails_and_extra_supplies_names) {
  mt_request r[8];
  trace(r);
  mt_summary s = summarize(&r[2], 1, -1, NULL, 0, 0); // one 1-token request: TPOT has n 0
  const char *keys[] = {"lost_requests", "tpot_p95_ms", "no_such_metric"};
  double limits[] = {0, 50, 1};
  scn_slo slo = slo_of(keys, limits, 3);
  mt_verdict v[3];
  cr_assert_eq(mt_verdicts(&slo, &s, NULL, NULL, v, 3), 3);
  // lost_requests: not in a summary, no extra -> NaN, fails, and says so
  cr_assert(isnan(v[0].actual));
  cr_assert_str_eq(v[0].op, "<=");
  cr_assert_not(v[0].pass);
  cr_expect_str_eq(v[0].note, "no data: not measured here");
  // tpot_p95_ms: the summary carries it as NaN (no 2-token request) -> fails, saying why
  cr_assert(isnan(v[1].actual));
  cr_assert_not(v[1].pass);
  cr_expect_str_eq(v[1].note, "no data: no completed request had two tokens or more");
  // a name outside the table: cannot be judged -> fails
  cr_assert_str_eq(v[2].op, "?");
  cr_assert_not(v[2].pass);
  // extra supplies lost_requests: 0 <= 0 passes, 2 <= 0 fails
  double lost = 0;
  mt_verdicts(&slo, &s, extra_lost, &lost, v, 3);
  cr_assert_eq(v[0].actual, 0.0);
  cr_assert(v[0].pass);
  cr_expect_str_eq(v[0].note, "", "a measured value needs no note");
  lost = 2;
  mt_verdicts(&slo, &s, extra_lost, &lost, v, 3);
  cr_assert_eq(v[0].actual, 2.0);
  cr_assert_not(v[0].pass);
  // extra knows the name but could not measure it: no data, with its reason
  lost = NAN;
  mt_verdicts(&slo, &s, extra_lost, &lost, v, 3);
  cr_assert_not(v[0].pass);
  cr_expect_str_eq(v[0].note, "no data: the history was not checked");
}

// --- names

typedef struct names {
  char name[64][48];
  double v[64];
  int n;
} names;

static void collect(void *ud, const char *name, double v) {
  names *c = ud;
  cr_assert_lt(c->n, 64);
  snprintf(c->name[c->n], sizeof c->name[c->n], "%s", name);
  c->v[c->n++] = v;
}

Test(names, every_emitted_name_is_in_the_metric_table) {
  mt_request r[16];
  int n = trace_with_errors(r);
  mt_summary s = summarize(r, n, -1, NULL, 0, 0);
  names c = {0};
  mt_summary_each(&s, collect, &c);
  // 13 counts and rates + 4 distributions x 6 + 4 error kinds
  cr_assert_eq(c.n, 13 + 24 + 4);
  int errors = 0;
  for (int i = 0; i < c.n; i++) {
    if (!strncmp(c.name[i], "errors_", 7)) {
      errors++;
      continue;
    }
    cr_assert_not_null(mt_metric_find(c.name[i]), "%s is not in the table", c.name[i]);
  }
  cr_assert_eq(errors, 4);
}

Test(names, summary_value_accepts_exactly_the_emitted_names) {
  mt_request r[16];
  int n = trace_with_errors(r);
  mt_summary s = summarize(r, n, -1, NULL, 0, 0);
  names c = {0};
  mt_summary_each(&s, collect, &c);
  for (int i = 0; i < c.n; i++) {
    double v = -1;
    cr_assert(mt_summary_value(&s, c.name[i], &v), "%s", c.name[i]);
    cr_assert(v == c.v[i] || (isnan(v) && isnan(c.v[i])), "%s", c.name[i]);
  }
  double v;
  cr_assert(mt_summary_value(&s, "ttft_p95_ms", &v));
  near(v, 180, "ttft_p95_ms");
  cr_assert(mt_summary_value(&s, "requests", &v));
  cr_assert_eq(v, 11.0);
  cr_assert_not(mt_summary_value(&s, "peak_queue", &v), "the runner's, not a summary's");
  cr_assert_not(mt_summary_value(&s, "errors", &v));
  cr_assert_not(mt_summary_value(&s, "ttft_p75_ms", &v));
}

Test(names, empty_distributions_are_emitted_as_nan) {
  mt_summary s = summarize(NULL, 0, -1, NULL, 0, 0);
  names c = {0};
  mt_summary_each(&s, collect, &c);
  cr_assert_eq(c.n, 13 + 24); // no error kinds
  int nan = 0;
  for (int i = 0; i < c.n; i++)
    if (strstr(c.name[i], "_ms")) {
      cr_assert(isnan(c.v[i]), "%s", c.name[i]);
      nan++;
    }
  cr_assert_eq(nan, 24);
}

// --- per-class verdicts

Test(verdicts, a_short_class_missing_its_limit_fails_exactly_that_verdict_named_by_class) {
  // 10 short requests with a 500 ms TTFT, 10 long ones with 100 ms: each class's summary is
  // judged by its own SLOs
  mt_request r[20];
  uint64_t tok[20][2];
  for (int i = 0; i < 20; i++) {
    bool sh = i < 10;
    uint64_t t0 = (uint64_t)i * 1000000000ull;
    tok[i][0] = t0 + (sh ? 500 : 100) * 1000000ull;
    tok[i][1] = tok[i][0] + 20000000ull;
    r[i] = (mt_request){.arrival_ns = t0, .finish_ns = tok[i][1], .token_ns = tok[i],
                        .n_tokens = 2, .prompt_tokens = sh ? 16 : 900, .status = REQ_OK,
                        .class_idx = sh ? 0 : 1};
  }
  scn_slo_class sc = {.name = "short", .class_idx = 0, .n = 2,
                      .items = {{.key = "ttft_p95_ms", .limit = 300},
                                {.key = "error_rate", .limit = 0}}};
  scn_slo_class lc = {.name = "long", .class_idx = 1, .n = 1,
                      .items = {{.key = "ttft_p95_ms", .limit = 300}}};
  mt_goodput g = {0, 0, 0};
  mt_summary ss, ls;
  cr_assert_eq(mt_summarize(r, 20, 0, &g, 0, 0, &ss), SC_OK);
  cr_assert_eq(mt_summarize(r, 20, 1, &g, 0, 0, &ls), SC_OK);
  mt_verdict v[4];
  int n = mt_class_verdicts(&sc, &ss, v, 4);
  n += mt_class_verdicts(&lc, &ls, v + n, 4 - n);
  cr_assert_eq(n, 3);
  cr_expect_str_eq(v[0].slo, "short:ttft_p95_ms");
  cr_expect_str_eq(v[0].op, "<=");
  cr_expect_float_eq(v[0].actual, 500, 1e-6);
  cr_expect_not(v[0].pass, "short TTFT 500 ms > 300 ms");
  cr_expect_str_eq(v[1].slo, "short:error_rate");
  cr_expect(v[1].pass);
  cr_expect_str_eq(v[2].slo, "long:ttft_p95_ms");
  cr_expect(v[2].pass, "long TTFT 100 ms");
  // a class with no requests has no data: its verdict fails
  mt_summary none;
  cr_assert_eq(mt_summarize(r, 20, 5, &g, 0, 0, &none), SC_OK);
  cr_assert_eq(mt_class_verdicts(&sc, &none, v, 4), 2);
  cr_expect(isnan(v[0].actual) && !v[0].pass);
}
