// The simulated replica (serving/replica_sim.c) and the engine's sim backend: the real
// scheduler and KV cache, steps priced by the cost model, events released in virtual time.
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config/hardware.h"
#include "config/presets.h"
#include "engine/engine.h"
#include "engine/memplan.h"
#include "engine/model.h"
#include "serving/replica.h"
#include "tests/helpers.h"

typedef struct tally {
  int tokens[64];      // per key
  int last_index[64];  // per key
  uint64_t last_t[64]; // per key
  int finished[64];
  int failed;
  int steps;
  int preempted;
  int max_running; // sequences in the largest step
  uint64_t prefill_tokens;
  uint64_t step_ns;
} tally;

static void pull(replica *r, tally *t) {
  replica_event ev[256];
  int n;
  while ((n = replica_poll(r, ev, 256)) > 0)
    for (int i = 0; i < n; i++) {
      const replica_event *e = &ev[i];
      switch (e->kind) {
      case REPLICA_EV_TOKEN:
        cr_assert_eq(e->index, t->tokens[e->key], "tokens of %llu arrive in order",
                     (unsigned long long)e->key);
        cr_assert_geq(e->t_ns, t->last_t[e->key], "token times never go back");
        t->last_t[e->key] = e->t_ns;
        t->tokens[e->key]++;
        break;
      case REPLICA_EV_FINISHED: t->finished[e->key]++; break;
      case REPLICA_EV_FAILED: t->failed++; break;
      case REPLICA_EV_STEP:
        t->steps++;
        t->preempted += e->step.n_preempted;
        if (e->step.n_seqs > t->max_running) t->max_running = e->step.n_seqs;
        t->prefill_tokens += (uint64_t)e->step.prefill_tokens;
        t->step_ns += e->step.duration_ns;
        cr_assert_gt(e->step.duration_ns, 0);
        break;
      }
    }
}

// Drives r to idle the way the runner's sim loop does: jump to the next step end, advance.
static void drive(simbed *b, replica *r, tally *t) {
  for (int guard = 0; guard < 1000000; guard++) {
    uint64_t next = replica_next_ns(r);
    if (next == UINT64_MAX) {
      pull(r, t);
      return;
    }
    cr_assert_geq(next, b->now, "the next event is never in the past");
    b->now = next;
    replica_advance(r, b->now);
    pull(r, t);
  }
  cr_assert_fail("the replica never went idle");
}

Test(sim, every_request_gets_its_tokens_in_virtual_time) {
  simbed *b = sc_test_simbed_new("llama3-8b", "h100-sxm", 1, 1, 4096);
  replica *r = NULL;
  sc_error err = {{0}};
  cr_assert_eq(replica_sim_new(&b->cfg, 0, &r, &err), SC_OK, "%s", err.msg);
  cr_assert(replica_is_sim(r));
  tally t = {0};
  for (uint64_t k = 0; k < 8; k++) sc_test_submit(r, k, 100 + (int)k * 50, 10 + (int)k);
  drive(b, r, &t);
  for (int k = 0; k < 8; k++) {
    cr_expect_eq(t.tokens[k], 10 + k, "request %d: %d tokens", k, t.tokens[k]);
    cr_expect_eq(t.finished[k], 1);
  }
  cr_expect_eq(t.failed, 0);
  // The clock moved exactly by the steps' priced durations: one replica never overlaps itself.
  cr_expect_eq(b->now, t.step_ns, "virtual time %llu = sum of step durations %llu",
               (unsigned long long)b->now, (unsigned long long)t.step_ns);
  // An 8B model decodes a token in milliseconds on an H100, not microseconds or seconds.
  double per_step_ms = (double)t.step_ns / t.steps / 1e6;
  cr_expect(per_step_ms > 1 && per_step_ms < 100, "mean step %.3f ms", per_step_ms);
  replica_free(r);
  sc_test_simbed_free(b);
}

Test(sim, same_requests_give_the_same_timeline) {
  uint64_t ends[2];
  int steps[2];
  for (int run = 0; run < 2; run++) {
    simbed *b = sc_test_simbed_new("llama3-8b", "h100-sxm", 2, 1, 4096);
    replica *r = NULL;
    sc_error err = {{0}};
    cr_assert_eq(replica_sim_new(&b->cfg, 0, &r, &err), SC_OK, "%s", err.msg);
    tally t = {0};
    for (uint64_t k = 0; k < 16; k++) sc_test_submit(r, k, 64 + (int)(k * 37 % 300), 20);
    drive(b, r, &t);
    ends[run] = b->now;
    steps[run] = t.steps;
    replica_free(r);
    sc_test_simbed_free(b);
  }
  cr_expect_eq(ends[0], ends[1]);
  cr_expect_eq(steps[0], steps[1]);
}

// 24 blocks of 16 tokens: 384 tokens for 8 requests of 40 + 40 tokens (80 each, 640 in all).
// Runs them to the end with the admission and caching asked for; every request completes and
// every block comes back (cached ones count as free). Returns the replica's stats.
static engine_stats starved(bool no_evict, bool prefix_caching, tally *t) {
  simbed *b = sc_test_simbed_new("llama3-8b", "h100-sxm", 1, 1, 24);
  b->cfg.no_evict = no_evict;
  b->cfg.prefix_caching = prefix_caching;
  replica *r = NULL;
  sc_error err = {{0}};
  cr_assert_eq(replica_sim_new(&b->cfg, 0, &r, &err), SC_OK, "%s", err.msg);
  *t = (tally){0};
  for (uint64_t k = 0; k < 8; k++) sc_test_submit(r, k, 40, 40);
  drive(b, r, t);
  for (int k = 0; k < 8; k++) {
    cr_expect_eq(t->tokens[k], 40, "request %d: %d tokens", k, t->tokens[k]);
    cr_expect_eq(t->finished[k], 1);
  }
  engine_stats st;
  replica_stats(r, &st);
  cr_expect_eq(st.kv_used, 0, "every block is back");
  replica_free(r);
  sc_test_simbed_free(b);
  return st;
}

Test(sim, running_out_of_kv_blocks_preempts_and_everything_completes) {
  tally t;
  starved(false, false, &t);
  cr_expect_gt(t.preempted, 0, "the cache is too small for all of them at once");
}

// The same starved cache with no_evict: a request is admitted only when every running one fits
// at its full length beside it (5 blocks each, so 4 at a time): nothing is preempted, and
// never more than 4 run at once.
Test(sim, no_evict_admits_only_what_fits_at_full_length_and_never_preempts) {
  tally t;
  starved(true, false, &t);
  cr_expect_eq(t.preempted, 0);
  cr_expect_eq(t.max_running, 4, "at most 24 / 5 sequences of 80 tokens: %d", t.max_running);
}

// The starved cache again, with prefix caching: a preempted request finds the blocks it had
// computed (unless newer ones took their room), so fewer prefill tokens are computed again.
Test(sim, prefix_caching_spares_the_recompute_of_preempted_requests) {
  tally off, on;
  engine_stats s_off = starved(false, false, &off), s_on = starved(false, true, &on);
  cr_expect_gt(on.preempted, 0);
  cr_expect_eq(s_off.prefix_hit_tokens, 0);
  cr_expect_gt(s_on.prefix_hit_tokens, 0);
  cr_expect_lt(on.prefill_tokens, off.prefill_tokens,
               "prefill tokens %llu with caching, %llu without",
               (unsigned long long)on.prefill_tokens, (unsigned long long)off.prefill_tokens);
}

// The starved cache with vLLM's watermark: while anything runs, an admission must leave half
// the blocks (12) free, so of the 3-block prompts at most 4 are admitted before the first
// step (used 0, 3, 6, 9) instead of all 8; every request still completes.
Test(sim, the_watermark_keeps_blocks_free_at_admission) {
  simbed *b = sc_test_simbed_new("llama3-8b", "h100-sxm", 1, 1, 24);
  b->cfg.kv_watermark = 0.5;
  replica *r = NULL;
  sc_error err = {{0}};
  cr_assert_eq(replica_sim_new(&b->cfg, 0, &r, &err), SC_OK, "%s", err.msg);
  tally t = {0}, plain;
  for (uint64_t k = 0; k < 8; k++) sc_test_submit(r, k, 40, 40);
  drive(b, r, &t);
  for (int k = 0; k < 8; k++) cr_expect_eq(t.tokens[k], 40, "request %d", k);
  cr_expect_eq(t.max_running, 4, "%d ran at once", t.max_running);
  replica_free(r);
  sc_test_simbed_free(b);
  starved(false, false, &plain);
  cr_expect_eq(plain.max_running, 8, "without a watermark: %d", plain.max_running);
}

// 24 blocks. Request 0 (40 + 300 tokens, 22 blocks at its full length) runs alone until it
// holds 13 blocks; then request 1 arrives with a 200-token prompt (13 blocks, 11 are free).
// Admitted by its first chunk, request 1 grows beside request 0 until one of them is
// preempted; with reserve_full_isl (vLLM's default since 0.19) it waits until all of its prompt
// fits, after request 0 is done: nothing is preempted and the two never run together.
static tally late_long_prompt(bool reserve) {
  simbed *b = sc_test_simbed_new("llama3-8b", "h100-sxm", 1, 1, 24);
  b->cfg.reserve_full_isl = reserve;
  b->cfg.prefill_chunk = 32;
  replica *r = NULL;
  sc_error err = {{0}};
  cr_assert_eq(replica_sim_new(&b->cfg, 0, &r, &err), SC_OK, "%s", err.msg);
  tally t = {0};
  sc_test_submit(r, 0, 40, 300);
  for (int guard = 0; t.tokens[0] < 160 && guard < 1000; guard++) {
    b->now = replica_next_ns(r);
    replica_advance(r, b->now);
    pull(r, &t);
  }
  cr_assert_eq(t.tokens[0], 160);
  sc_test_submit(r, 1, 200, 20);
  drive(b, r, &t);
  cr_expect_eq(t.tokens[0], 300);
  cr_expect_eq(t.tokens[1], 20);
  replica_free(r);
  sc_test_simbed_free(b);
  return t;
}

Test(sim, reserve_full_isl_admits_a_prompt_only_when_all_of_it_fits) {
  tally chunked = late_long_prompt(false), reserved = late_long_prompt(true);
  cr_expect_gt(chunked.preempted, 0, "admitted by its first chunk, request 1 is preempted");
  cr_expect_eq(chunked.max_running, 2);
  cr_expect_eq(reserved.preempted, 0);
  cr_expect_eq(reserved.max_running, 1, "request 1 waits for all of its prompt's blocks");
}

Test(sim, cancel_frees_the_request_at_once) {
  simbed *b = sc_test_simbed_new("llama3-8b", "h100-sxm", 1, 1, 4096);
  replica *r = NULL;
  sc_error err = {{0}};
  cr_assert_eq(replica_sim_new(&b->cfg, 0, &r, &err), SC_OK, "%s", err.msg);
  tally t = {0};
  sc_test_submit(r, 1, 100, 1000);
  sc_test_submit(r, 2, 100, 5);
  replica_advance(r, b->now); // first step in flight
  replica_cancel(r, 1);
  drive(b, r, &t);
  cr_expect_eq(t.finished[1], 1);
  cr_expect_lt(t.tokens[1], 5, "cancelled early: %d tokens", t.tokens[1]);
  cr_expect_eq(t.tokens[2], 5);
  engine_stats st;
  replica_stats(r, &st);
  cr_expect_eq(st.kv_used, 0);
  replica_free(r);
  sc_test_simbed_free(b);
}

Test(sim, a_request_larger_than_the_cache_fails_without_a_step) {
  simbed *b = sc_test_simbed_new("llama3-8b", "h100-sxm", 1, 1, 4);
  replica *r = NULL;
  sc_error err = {{0}};
  cr_assert_eq(replica_sim_new(&b->cfg, 0, &r, &err), SC_OK, "%s", err.msg);
  tally t = {0};
  sc_test_submit(r, 3, 200, 10); // 210 tokens need 14 blocks of 16
  drive(b, r, &t);
  cr_expect_eq(t.failed, 1);
  cr_expect_eq(t.steps, 0);
  replica_free(r);
  sc_test_simbed_free(b);
}

Test(sim, pp_steps_report_a_bubble) {
  simbed *b = sc_test_simbed_new("llama3-8b", "h100-sxm", 1, 2, 4096);
  replica *r = NULL;
  sc_error err = {{0}};
  cr_assert_eq(replica_sim_new(&b->cfg, 0, &r, &err), SC_OK, "%s", err.msg);
  sc_test_submit(r, 1, 50, 3);
  replica_advance(r, b->now);
  replica_event ev[64];
  b->now = replica_next_ns(r);
  replica_advance(r, b->now);
  int n = replica_poll(r, ev, 64);
  bool saw = false;
  for (int i = 0; i < n; i++)
    if (ev[i].kind == REPLICA_EV_STEP) {
      saw = true;
      cr_expect_gt(ev[i].step.bubble_frac, 0.2, "one micro-batch over two stages idles them");
    }
  cr_expect(saw);
  replica_free(r);
  sc_test_simbed_free(b);
}

Test(sim, sim_backend_needs_a_device_and_kv_blocks) {
  simbed *b = sc_test_simbed_new("llama3-8b", "h100-sxm", 1, 1, 0);
  replica *r = NULL;
  sc_error err = {{0}};
  cr_expect_eq(replica_sim_new(&b->cfg, 0, &r, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "kv_blocks") != NULL, "%s", err.msg);
  cr_expect_null(r);
  b->cfg.kv_blocks = 16;
  b->cfg.sim.hw = NULL;
  cr_expect_eq(replica_sim_new(&b->cfg, 0, &r, &err), SC_INVALID);
  sc_test_simbed_free(b);
}

// --- whole runs in sim mode (runner + virtual clock + recorder + SQLite)
#include <sqlite3.h>
#include <stdio.h>

#include "reports/report.h"
#include "reports/store.h"
#include "runner/runner.h"
#include "scenarios/scenario.h"

// Runs scenario text into db; returns the run id.
static int64_t sim_run(store *db, const char *text) {
  sc_error err = {{0}};
  scenario *s = NULL;
  cr_assert_eq(scenario_parse(text, strlen(text), "t.yaml", ".", &s, &err), SC_OK, "%s", err.msg);
  runner_options o = runner_options_defaults();
  o.progress = RUNNER_PROGRESS_NONE;
  runner_result res;
  cr_assert_eq(runner_run(s, db, &o, &res, &err), SC_OK, "%s", err.msg);
  cr_assert_str_eq(res.status, "complete", "%s", res.error);
  scenario_free(s);
  return res.run_id;
}

static store *open_db(const char *tag) {
  char path[512];
  snprintf(path, sizeof path, "%s/r.db", sc_test_tmpdir(tag));
  store *db = NULL;
  sc_error err = {{0}};
  cr_assert_eq(store_open(path, &db, &err), SC_OK, "%s", err.msg);
  return db;
}

// Every row of `sql` (one ? bound to run) as text, rows separated by newlines (caller frees).
static char *rows_text(store *db, const char *sql, int64_t run, long *n_rows) {
  sqlite3_stmt *st = NULL;
  cr_assert_eq(sqlite3_prepare_v2(store_db(db), sql, -1, &st, NULL), SQLITE_OK, "%s",
               sqlite3_errmsg(store_db(db)));
  sqlite3_bind_int64(st, 1, run);
  size_t cap = 1 << 16, len = 0;
  char *out = malloc(cap);
  out[0] = 0;
  *n_rows = 0;
  while (sqlite3_step(st) == SQLITE_ROW) {
    for (int c = 0; c < sqlite3_column_count(st); c++) {
      const unsigned char *v = sqlite3_column_text(st, c);
      size_t need = len + (v ? strlen((const char *)v) : 4) + 2;
      while (need >= cap) out = realloc(out, cap *= 2);
      len += (size_t)sprintf(out + len, "%s%c", v ? (const char *)v : "NULL",
                             c + 1 < sqlite3_column_count(st) ? '|' : '\n');
    }
    (*n_rows)++;
  }
  sqlite3_finalize(st);
  return out;
}

static double metric(store *db, int64_t run, const char *label, const char *phase,
                     const char *name) {
  char sql[512];
  snprintf(sql, sizeof sql,
           "SELECT m.value FROM metric m JOIN deployment d ON d.id = m.deployment_id "
           "LEFT JOIN phase p ON p.id = m.phase_id WHERE m.run_id = ? AND d.label = '%s' "
           "AND m.class = '' AND m.name = '%s' AND %s",
           label, name, phase ? "p.name = ?2" : "m.phase_id IS NULL");
  sqlite3_stmt *st = NULL;
  cr_assert_eq(sqlite3_prepare_v2(store_db(db), sql, -1, &st, NULL), SQLITE_OK);
  sqlite3_bind_int64(st, 1, run);
  if (phase) sqlite3_bind_text(st, 2, phase, -1, SQLITE_STATIC);
  double v = NAN;
  if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_double(st, 0);
  sqlite3_finalize(st);
  return v;
}

static const char *DET_SCENARIO =
    "name: det\n"
    "mode: sim\n"
    "model: {preset: llama3-8b}\n"
    "hardware: {profile: h100-sxm, gpus: 4}\n"
    "deployments: [{tp: 1, dp: 2}, {tp: 2, pp: 2}]\n"
    "workload:\n"
    "  prompts:\n"
    "    - {name: a, weight: 0.7, input: {uniform: [32, 600]}, output: {uniform: [8, 64]}}\n"
    "    - {name: b, weight: 0.3, input: 2000, output: 16}\n"
    "  phases:\n"
    "    - {ramp: {concurrency: [1, 8]}, hold: 3s}\n"
    "    - {name: burst, rate: 40, arrival: gamma, burstiness: 0.5, duration: 5s}\n"
    "limits: {max_running: 32}\n"
    "seed: 11\n";

Test(sim_run, two_runs_of_a_scenario_give_identical_rows) {
  store *db = open_db("sim-det");
  int64_t a = sim_run(db, DET_SCENARIO), b = sim_run(db, DET_SCENARIO);
  cr_assert_neq(a, b);
  static const char *const queries[] = {
      "SELECT d.idx, p.name, r.seq, r.class, r.replica, r.prompt_tokens, r.max_tokens, "
      "r.output_tokens, r.arrival_ns, r.dispatch_ns, r.first_token_ns, r.finish_ns, r.status, "
      "r.reason, r.warmup FROM request r JOIN deployment d ON d.id = r.deployment_id "
      "JOIN phase p ON p.id = r.phase_id WHERE r.run_id = ? ORDER BY d.idx, r.seq",
      "SELECT d.idx, r.seq, t.idx, t.t_ns FROM token t JOIN request r ON r.id = t.request_id "
      "JOIN deployment d ON d.id = r.deployment_id WHERE r.run_id = ? "
      "ORDER BY d.idx, r.seq, t.idx",
      "SELECT d.idx, s.replica, s.t_ns, s.duration_ns, s.seqs, s.prefill_tokens, "
      "s.decode_tokens, s.preempted, s.queue_len, s.running, s.kv_used, s.kv_total FROM step s "
      "JOIN deployment d ON d.id = s.deployment_id WHERE s.run_id = ? ORDER BY s.id",
      "SELECT d.idx, p.name, m.class, m.name, m.value FROM metric m "
      "LEFT JOIN deployment d ON d.id = m.deployment_id LEFT JOIN phase p ON p.id = m.phase_id "
      "WHERE m.run_id = ? ORDER BY d.idx, p.idx, m.class, m.name",
      "SELECT d.idx, p.idx, p.name, p.start_ns, p.warmup_end_ns, p.end_ns FROM phase p "
      "JOIN deployment d ON d.id = p.deployment_id WHERE p.run_id = ? ORDER BY d.idx, p.idx",
      "SELECT d.idx, x.replica, x.rank, x.t_ns, x.mem_used, x.mem_total FROM device_sample x "
      "JOIN deployment d ON d.id = x.deployment_id WHERE x.run_id = ? ORDER BY x.id",
  };
  for (size_t q = 0; q < sizeof queries / sizeof queries[0]; q++) {
    long na, nb;
    char *ta = rows_text(db, queries[q], a, &na), *tb = rows_text(db, queries[q], b, &nb);
    cr_expect_gt(na, 0, "query %zu has rows", q);
    cr_expect_eq(na, nb, "query %zu: %ld vs %ld rows", q, na, nb);
    cr_expect(strcmp(ta, tb) == 0, "query %zu: the rows differ", q);
    free(ta);
    free(tb);
  }
  store_close(db);
}

// busy_frac of every phase and deployment of a run: the step rows' durations over dp x the
// phases' spans, recomputed here from the stored rows.
Test(sim_run, busy_frac_is_step_time_over_replicas_times_the_window) {
  store *db = open_db("sim-busy");
  int64_t run = sim_run(db, DET_SCENARIO);
  sqlite3_stmt *st = NULL;
  cr_assert_eq(sqlite3_prepare_v2(store_db(db),
                                  "SELECT d.label, p.name, d.dp, p.end_ns - p.start_ns, "
                                  "(SELECT coalesce(sum(s.duration_ns), 0) FROM step s WHERE "
                                  "s.deployment_id = d.id AND s.t_ns >= p.start_ns AND s.t_ns < "
                                  "p.end_ns) FROM phase p JOIN deployment d ON d.id = "
                                  "p.deployment_id WHERE p.run_id = ? ORDER BY d.idx, p.idx",
                                  -1, &st, NULL),
               SQLITE_OK);
  sqlite3_bind_int64(st, 1, run);
  char dep[32] = "";
  double busy = 0, span = 0;
  int n = 0, dp = 1;
  for (;;) {
    bool row = sqlite3_step(st) == SQLITE_ROW;
    const char *label = row ? (const char *)sqlite3_column_text(st, 0) : "";
    if (dep[0] && strcmp(dep, label) != 0) { // the previous deployment's pooled row
      double got = metric(db, run, dep, NULL, "busy_frac");
      cr_expect(fabs(got - busy / (dp * span)) < 1e-9, "%s pooled: %.9f, rows say %.9f", dep,
                got, busy / (dp * span));
      busy = span = 0;
    }
    if (!row) break;
    snprintf(dep, sizeof dep, "%s", label);
    dp = sqlite3_column_int(st, 2);
    double w = sqlite3_column_double(st, 3), b = sqlite3_column_double(st, 4);
    double got = metric(db, run, dep, (const char *)sqlite3_column_text(st, 1), "busy_frac");
    cr_expect(b > 0 && got > 0 && got <= 1, "%s %s: busy_frac %g", dep,
              (const char *)sqlite3_column_text(st, 1), got);
    cr_expect(fabs(got - b / (dp * w)) < 1e-9, "%s %s: %.9f, rows say %.9f", dep,
              (const char *)sqlite3_column_text(st, 1), got, b / (dp * w));
    busy += b;
    span += w;
    n++;
  }
  sqlite3_finalize(st);
  cr_expect_eq(n, 6, "2 deployments x (2 ramp steps + burst)");
  store_close(db);
}

// Closed loop with as many users per replica as it runs sequences: every replica saturated.
static const char *SCALE_DP =
    "name: dp-scaling\n"
    "mode: sim\n"
    "model: {preset: llama3-8b}\n"
    "hardware: {profile: h100-sxm, gpus: 4}\n"
    "deployments: [{dp: 1}, {dp: 2}, {dp: 4}]\n"
    "workload:\n"
    "  prompts: [{input: {uniform: [64, 256]}, output: {uniform: [32, 96]}}]\n"
    "  phases:\n"
    "    - {ramp: {concurrency: [32, 64, 128]}, hold: 20s, warmup: 2s}\n"
    "limits: {max_running: 32}\n"
    "seed: 5\n";

Test(sim_run, dp_throughput_scales_with_replicas_under_saturation) {
  store *db = open_db("sim-dp");
  int64_t run = sim_run(db, SCALE_DP);
  double t1 = metric(db, run, "tp1", "ramp-c32", "output_tok_s");
  double t2 = metric(db, run, "dp2", "ramp-c64", "output_tok_s");
  double t4 = metric(db, run, "dp4", "ramp-c128", "output_tok_s");
  cr_assert(t1 > 0, "dp1 %g", t1);
  cr_log_info("dp1 %.1f tok/s, dp2 x%.4f, dp4 x%.4f", t1, t2 / t1, t4 / t1);
  cr_expect(fabs(t2 / t1 - 2) <= 2 * 0.02, "dp2 / dp1 = %.4f (2 within 2%%)", t2 / t1);
  cr_expect(fabs(t4 / t1 - 4) <= 4 * 0.03, "dp4 / dp1 = %.4f (4 within 3%%)", t4 / t1);
  // Saturated: every replica steps nearly all the time.
  double u1 = metric(db, run, "tp1", "ramp-c32", "busy_frac");
  double u4 = metric(db, run, "dp4", "ramp-c128", "busy_frac");
  cr_log_info("busy: dp1 %.9f, dp4 %.9f", u1, u4);
  cr_expect(u1 > 0.95 && u1 <= 1 && u4 > 0.95 && u4 <= 1, "busy dp1 %.4f, dp4 %.4f", u1, u4);
  store_close(db);
}

static const char *SCALE_TP =
    "name: tp-scaling\n"
    "mode: sim\n"
    "model: {preset: llama3-8b}\n"
    "hardware: {profile: h100-sxm, gpus: 2%s}\n"
    "deployments: [{tp: 1}, {tp: 2}]\n"
    "workload:\n"
    "  prompts: [{input: {uniform: [64, 256]}, output: {uniform: [32, 96]}}]\n"
    "  phases:\n"
    "    - {name: sat, fixed: {concurrency: 256, requests: 1500}}\n"
    "seed: 5\n";

static double tp_speedup(const char *tag, const char *link) {
  char text[1024];
  snprintf(text, sizeof text, SCALE_TP, link);
  store *db = open_db(tag);
  int64_t run = sim_run(db, text);
  double t1 = metric(db, run, "tp1", "sat", "output_tok_s");
  double t2 = metric(db, run, "tp2", "sat", "output_tok_s");
  store_close(db);
  cr_assert(t1 > 0 && t2 > 0);
  return t2 / t1;
}

Test(sim_run, tp2_speeds_llama3_8b_up_less_than_twice_and_less_over_pcie) {
  double nv = tp_speedup("sim-tp-nv", "");
  double pcie = tp_speedup("sim-tp-pcie", ", link: pcie4");
  cr_log_info("tp2 / tp1: NVLink %.3f, PCIe gen4 %.3f", nv, pcie);
  cr_expect(nv >= 1.4 && nv <= 1.9, "tp2 / tp1 over NVLink = %.3f", nv);
  cr_expect(pcie < nv, "over PCIe gen4 %.3f, over NVLink %.3f", pcie, nv);
}

Test(sim_run, pp2_bubble_shrinks_with_batch) {
  store *db = open_db("sim-pp");
  int64_t run = sim_run(db,
                        "name: pp\n"
                        "mode: sim\n"
                        "model: {preset: llama3-8b}\n"
                        "hardware: {profile: h100-sxm, gpus: 2}\n"
                        "deployments: [{pp: 2}]\n"
                        "workload:\n"
                        "  prompts: [{input: 128, output: 64}]\n"
                        "  phases:\n"
                        "    - {ramp: {concurrency: [1, 64]}, hold: 2s}\n"
                        "seed: 1\n");
  double b1 = metric(db, run, "pp2", "ramp-c1", "pp_bubble_frac");
  double b64 = metric(db, run, "pp2", "ramp-c64", "pp_bubble_frac");
  cr_log_info("pp2 bubble: batch 1 %.3f, batch 64 %.3f", b1, b64);
  cr_expect(b1 > 0.3, "batch 1: bubble %.3f", b1);
  cr_expect(b64 < b1, "batch 64: bubble %.3f < %.3f", b64, b1);
  store_close(db);
}

Test(sim_run, kv_exhaustion_preempts_and_every_request_completes) {
  // long-ish sequences and many users against a small share of memory for KV
  store *db = open_db("sim-kv");
  int64_t run = sim_run(db,
                        "name: kv\n"
                        "mode: sim\n"
                        "model: {preset: mistral-7b}\n"
                        "hardware: {profile: l40s, gpus: 1}\n"
                        "deployments: [{tp: 1}]\n"
                        "workload:\n"
                        "  prompts: [{input: 16000, output: 200}]\n"
                        "  phases:\n"
                        "    - {name: many, fixed: {concurrency: 24, requests: 48}}\n"
                        "limits: {request_timeout: 0s}\n"
                        "seed: 2\n");
  long n;
  char *t = rows_text(db, "SELECT sum(preempted) FROM step WHERE run_id = ?", run, &n);
  cr_log_info("preemptions: %s", t);
  cr_expect(atol(t) > 0, "preemptions: %s", t);
  free(t);
  t = rows_text(db,
                "SELECT count(*), sum(status = 'ok'), sum(output_tokens = 200) FROM request "
                "WHERE run_id = ?",
                run, &n);
  cr_expect_str_eq(t, "48|48|48\n");
  free(t);
  store_close(db);
}

// --- shardcheck run --mode / --profile: bad values are one clear line and exit 2
static void expect_run_refused(const char *args, const char *needle) {
  char out[4096];
  int rc = sc_test_run_cli(args, out, sizeof out);
  cr_expect_eq(rc, 2, "`shardcheck %s` exited %d:\n%s", args, rc, out);
  cr_expect(strstr(out, needle) != NULL, "'%s' missing from:\n%s", needle, out);
  cr_expect(strstr(out, "runtime error") == NULL && strstr(out, "Sanitizer") == NULL, "%s", out);
}

Test(sim_cli, bad_mode_and_profile_overrides_exit_2_naming_them) {
  expect_run_refused("run " SC_SOURCE_DIR "/scenarios/quickstart.yaml --mode simm --no-report",
                     "--mode needs real or sim, got 'simm'");
  expect_run_refused("run " SC_SOURCE_DIR "/scenarios/quickstart.yaml --mode sim --profile "
                     "no-such-gpu --no-report",
                     "no-such-gpu");
  expect_run_refused("run " SC_SOURCE_DIR "/scenarios/quickstart.yaml --mode sim --profile "
                     "/nonexistent/p.yaml --no-report",
                     "/nonexistent/p.yaml");
}

Test(sim_cli, sensitivity_is_refused_for_a_real_run_and_a_bad_change) {
  expect_run_refused("run " SC_SOURCE_DIR "/scenarios/quickstart.yaml --sensitivity 2% --no-report",
                     "--sensitivity prices a sim run; this run is real");
  expect_run_refused("run " SC_SOURCE_DIR "/scenarios/quickstart.yaml --mode sim --sensitivity "
                     "50% --no-report",
                     "--sensitivity needs a price change above 0 and below 50%, such as 2%, got "
                     "'50%'");
  expect_run_refused("run " SC_SOURCE_DIR "/scenarios/quickstart.yaml --mode sim --sensitivity "
                     "x --no-report",
                     "got 'x'");
}

Test(sim_cli, mixed_prompts_in_sim_prints_its_sensitivity) {
  char out[16384], args[1024];
  const char *d = sc_test_tmpdir("sim-cli-sens");
  snprintf(args, sizeof args,
           "run " SC_SOURCE_DIR "/scenarios/mixed-prompts.yaml --mode sim --db %s/r.db "
           "--no-report --sensitivity 0.02",
           d);
  int rc = sc_test_run_cli(args, out, sizeof out);
  cr_expect(rc == 0 || rc == 1, "exit %d:\n%s", rc, out);
  cr_expect(strstr(out, "sensitivity: every price x0.98 and x1.02; change of mean TTFT and TPOT, "
                        "and the larger over 2%\n"),
            "%s", out);
  cr_expect(strstr(out, "\n  tp1 "), "%s", out);
}

Test(sim_cli, quickstart_switched_to_sim_runs_in_virtual_time) {
  char out[16384], args[1024];
  const char *d = sc_test_tmpdir("sim-cli");
  snprintf(args, sizeof args,
           "run " SC_SOURCE_DIR "/scenarios/quickstart.yaml --mode sim --db %s/r.db --no-report",
           d);
  int rc = sc_test_run_cli(args, out, sizeof out);
  cr_expect(rc == 0 || rc == 1, "exit %d:\n%s", rc, out); // 1: an SLO verdict failed
  cr_expect(strstr(out, "s simulated in") != NULL, "%s", out);
  cr_expect(strstr(out, "on simulated cpu") != NULL, "%s", out);
}

// Replicas of one deployment share a CPU host only while they run: a step is priced with the
// ranks of the peers that have a step in flight at its start, plus its own.
Test(sim, a_replica_prices_its_step_with_the_ranks_of_its_busy_peers) {
  simbed *b = sc_test_simbed_new("llama-tiny", "cpu", 1, 1, 256);
  b->hw->sim.host_cores = 1; // one core: two busy ranks run each op at half speed
  b->hw->sim.n_overhead = 0;
  b->hw->sim.step_overhead_s = 0;
  b->cfg.sim.layout.cluster_ranks = 2; // dp2
  sc_error err = {{0}};
  uint64_t d[2][2]; // [peers set?][replica]: the first step's duration
  for (int set = 0; set < 2; set++) {
    replica *reps[2];
    for (int i = 0; i < 2; i++)
      cr_assert_eq(replica_sim_new(&b->cfg, i, &reps[i], &err), SC_OK, "%s", err.msg);
    if (set) replica_set_peers(reps, 2);
    b->now = 0;
    for (int i = 0; i < 2; i++) sc_test_submit(reps[i], (uint64_t)i, 32, 1);
    // replica 0 starts while replica 1 is idle; replica 1 starts while 0's step is in flight
    for (int i = 0; i < 2; i++) {
      replica_advance(reps[i], 0);
      d[set][i] = replica_next_ns(reps[i]);
      cr_assert_gt(d[set][i], 0);
    }
    tally t = {0};
    for (int i = 0; i < 2; i++) drive(b, reps[i], &t);
    cr_expect_eq(t.finished[0] + t.finished[1], 2);
    for (int i = 0; i < 2; i++) replica_free(reps[i]);
  }
  // without peers every step counts the whole deployment; with them only who is busy
  cr_expect_eq(d[0][0], d[0][1]);
  cr_expect_float_eq((double)d[1][0] * 2, (double)d[1][1], 2.0, "alone %llu ns, beside a busy "
                     "peer %llu ns", (unsigned long long)d[1][0], (unsigned long long)d[1][1]);
  cr_expect_eq(d[1][1], d[0][1], "beside a busy peer: as before");
  sc_test_simbed_free(b);
}

// --sensitivity: a closed loop whose phase ends by request count is the same run at another
// speed (every time x f, the same decisions), so its latencies move exactly with the prices;
// an open loop near saturation moves more. The rows land on the run, and the profile is left
// as it was.
static const char *SENS_CLOSED =
    "name: sens-closed\n"
    "mode: sim\n"
    "model: {preset: llama3-8b}\n"
    "hardware: {profile: h100-sxm, gpus: 2}\n"
    "deployments: [{tp: 1}, {tp: 2}]\n"
    "workload:\n"
    "  prompts: [{input: {uniform: [32, 512]}, output: {uniform: [8, 64]}}]\n"
    "  phases:\n"
    "    - {name: users, fixed: {concurrency: 6, requests: 60}}\n"
    "seed: 4\n";

static runner_sensitivity sensitivity(store *db, const char *text, int64_t *run) {
  sc_error err = {{0}};
  scenario *s = NULL;
  cr_assert_eq(scenario_parse(text, strlen(text), "t.yaml", ".", &s, &err), SC_OK, "%s", err.msg);
  *run = sim_run(db, text);
  sim_hw before = s->hw.sim;
  runner_options o = runner_options_defaults();
  runner_sensitivity sv;
  cr_assert_eq(runner_sensitivity_run(s, db, *run, 0.02, &o, &sv, &err), SC_OK, "%s", err.msg);
  cr_expect(memcmp(&before, &s->hw.sim, sizeof before) == 0, "the profile is restored");
  scenario_free(s);
  return sv;
}

Test(sim_run, sensitivity_of_a_closed_loop_is_one_and_is_stored) {
  store *db = open_db("sim-sens");
  int64_t run;
  runner_sensitivity sv = sensitivity(db, SENS_CLOSED, &run);
  cr_assert_eq(sv.n, 2);
  for (int d = 0; d < 2; d++) {
    const runner_sensitivity_row *r = &sv.rows[d];
    cr_log_info("%s: TTFT %+.6f / %+.6f, TPOT %+.6f / %+.6f", r->label, r->change[0][0],
                r->change[1][0], r->change[0][1], r->change[1][1]);
    for (int k = 0; k < 2; k++) {
      cr_expect(fabs(r->change[0][k] + 0.02) < 1e-5 && fabs(r->change[1][k] - 0.02) < 1e-5,
                "%s metric %d: %+.6f / %+.6f", r->label, k, r->change[0][k], r->change[1][k]);
      cr_expect(fabs(r->sens[k] - 1) < 1e-3, "%s: sensitivity %g", r->label, r->sens[k]);
      cr_expect_eq(metric(db, run, r->label, NULL, k ? "tpot_sensitivity" : "ttft_sensitivity"),
                   r->sens[k]);
    }
    cr_expect_eq(r->base[1], metric(db, run, r->label, NULL, "tpot_mean_ms"));
  }
  // the scaled runs went to scratch databases: one run here
  long n;
  free(rows_text(db, "SELECT id FROM run WHERE id >= ?", 0, &n));
  cr_expect_eq(n, 1);
  store_close(db);
}

// Poisson arrivals at 8/s keep the one H100 stepping 99% of the time: requests queue, and TTFT
// moves several times the price change (3.6 when this was written).
static const char *SENS_OPEN =
    "name: sens-open\n"
    "mode: sim\n"
    "model: {preset: llama3-8b}\n"
    "hardware: {profile: h100-sxm, gpus: 1}\n"
    "deployments: [{tp: 1}]\n"
    "workload:\n"
    "  prompts: [{input: {uniform: [256, 2048]}, output: {uniform: [32, 256]}}]\n"
    "  phases:\n"
    "    - {name: open, rate: 8, arrival: poisson, duration: 30s}\n"
    "limits: {max_running: 16}\n"
    "seed: 9\n";

Test(sim_run, sensitivity_of_an_open_loop_near_saturation_is_above_one) {
  store *db = open_db("sim-sens-open");
  int64_t run;
  runner_sensitivity sv = sensitivity(db, SENS_OPEN, &run);
  cr_log_info("open loop: TTFT sensitivity %.3f, TPOT %.3f", sv.rows[0].sens[0],
              sv.rows[0].sens[1]);
  cr_expect(sv.rows[0].sens[0] > 2, "TTFT sensitivity %g", sv.rows[0].sens[0]);
  store_close(db);
}

Test(sim_run, sensitivity_refuses_a_real_scenario_and_a_bad_change) {
  sc_error err = {{0}};
  scenario *s = NULL;
  const char *real = "name: r\nmodel: {preset: llama-tiny}\nhardware: {backend: cpu}\n"
                     "deployments: [{tp: 1}]\nworkload:\n  prompts: [{input: 8, output: 4}]\n"
                     "  phases: [{fixed: {concurrency: 1, requests: 1}}]\n";
  cr_assert_eq(scenario_parse(real, strlen(real), "t.yaml", ".", &s, &err), SC_OK, "%s", err.msg);
  runner_options o = runner_options_defaults();
  runner_sensitivity sv;
  cr_expect_eq(runner_sensitivity_run(s, NULL, 1, 0.02, &o, &sv, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "only a sim run"), "%s", err.msg);
  scenario_free(s);
  cr_assert_eq(scenario_parse(SENS_CLOSED, strlen(SENS_CLOSED), "t.yaml", ".", &s, &err), SC_OK);
  cr_expect_eq(runner_sensitivity_run(s, NULL, 1, 0.5, &o, &sv, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "(0, 50%)"), "%s", err.msg);
  scenario_free(s);
}

// --- a request the failover path left unanswered is lost, not merely slow

// The poll of a simulated replica whose loss events are swallowed: when it dies, the requests
// it held get no FAILED event, as if the failover path had dropped them.
static replica_i swallowing_i;
static int (*sim_poll)(void *ctx, replica_event *out, int cap);

static int swallow_losses(void *ctx, replica_event *out, int cap) {
  int n = sim_poll(ctx, out, cap), w = 0;
  for (int i = 0; i < n; i++)
    if (out[i].kind != REPLICA_EV_FAILED || !replica_failure_is_loss(out[i].failure))
      out[w++] = out[i];
  return w;
}

// Builds simulated replicas; replica *ud swallows its loss events.
static sc_status make_swallowing(void *ud, const engine_config *cfg, int index, replica **out,
                                 sc_error *err) {
  SC_TRY(replica_sim_new(cfg, index, out, err));
  if (index == *(const int *)ud) {
    swallowing_i = *(*out)->i;
    sim_poll = swallowing_i.poll;
    swallowing_i.poll = swallow_losses;
    (*out)->i = &swallowing_i;
  }
  return SC_OK;
}

static const char LOST_VS_SLOW[] =
    "name: t\nmode: sim\nmodel: {preset: llama3-8b}\nhardware: {profile: h100-sxm, gpus: 2}\n"
    "deployments: [{dp: 2}]\n"
    "workload:\n  prompts: [{input: 64, output: 400}]\n"
    "  phases: [{ramp: {concurrency: [8]}, hold: 3s}]\n"
    "limits: {request_timeout: 20s}\n"
    "faults: [{at: 1s, kill: replica, target: replica0}]\n"
    "slo: {lost_requests: 0, timeouts: 0}\n";

// Runs LOST_VS_SLOW with replica `swallow` swallowing its loss events (-1: none).
static int64_t run_swallowing(store *db, int swallow, runner_result *res) {
  sc_error err = {{0}};
  scenario *s = NULL;
  cr_assert_eq(scenario_parse(LOST_VS_SLOW, strlen(LOST_VS_SLOW), "t.yaml", ".", &s, &err),
               SC_OK, "%s", err.msg);
  runner_options o = runner_options_defaults();
  o.progress = RUNNER_PROGRESS_NONE;
  o.make_replica = make_swallowing;
  o.make_replica_ud = &swallow;
  cr_assert_eq(runner_run(s, db, &o, res, &err), SC_OK, "%s", err.msg);
  scenario_free(s);
  return res->run_id;
}

static long long count(store *db, const char *sql, int64_t run) {
  long n = 0;
  char *t = rows_text(db, sql, run, &n);
  long long v = atoll(t);
  free(t);
  return v;
}

Test(sim, a_request_nobody_answered_after_its_replica_died_is_lost_not_slow) {
  store *db = open_db("sim-lost-vs-slow");
  runner_result res;
  int64_t run = run_swallowing(db, 0, &res);
  long long lost = count(db, "SELECT count(*) FROM request WHERE run_id = ? AND "
                             "status = 'timeout' AND reason = 'replica_lost'", run);
  cr_assert_gt(lost, 0, "the requests replica0 held when it died timed out unanswered");
  cr_expect_eq(count(db, "SELECT count(*) FROM request WHERE run_id = ? AND status = 'timeout' "
                         "AND reason = 'replica_lost' AND replica != 0", run), 0);
  cr_expect_eq(count(db, "SELECT count(*) FROM request WHERE run_id = ? AND status = 'timeout' "
                         "AND error LIKE '%replica0 was restarted under it%'", run), lost,
               "the error says what happened");
  cr_expect_float_eq(metric(db, run, "dp2", NULL, "lost_requests"), (double)lost, 1e-9,
                     "they count as lost requests");
  cr_expect_float_eq(metric(db, run, "dp2", NULL, "errors_timeout_replica_lost"), (double)lost,
                     1e-9, "timeouts split by cause");
  cr_expect_eq(count(db, "SELECT count(*) FROM verdict WHERE run_id = ? AND pass = 0 AND "
                         "slo IN ('lost_requests', 'timeouts')", run), 2, "both SLOs fail");
  cr_expect_gt(res.n_failed, 0);
  // The report splits what did not complete by kind, the lost timeouts apart.
  const char *dir = sc_test_tmpdir("sim-lost-report");
  report_options ro = {.out_dir = dir, .run_ids = &run, .n_runs = 1, .gnuplot = "/bin/false"};
  report_result rr;
  sc_error err = {{0}};
  cr_assert_eq(report_write(store_db(db), &ro, &rr, &err), SC_OK, "%s", err.msg);
  char path[600];
  snprintf(path, sizeof path, "%s/index.html", dir);
  long len = 0;
  char *html = sc_test_read_file(path, &len);
  cr_expect(strstr(html, "Requests that did not complete") &&
                strstr(html, "timed out after its replica was lost"),
            "%s", html);
  free(html);
  store_close(db);
}

Test(sim, requests_answered_by_the_failover_path_are_neither_lost_nor_timed_out) {
  store *db = open_db("sim-lost-vs-slow-ok");
  runner_result res;
  int64_t run = run_swallowing(db, -1, &res);
  cr_expect_gt(count(db, "SELECT count(*) FROM request WHERE run_id = ? AND retries > 0", run),
               0, "replica0's requests were retried or resumed");
  cr_expect_eq(count(db, "SELECT count(*) FROM request WHERE run_id = ? AND status = 'timeout'",
                     run), 0);
  cr_expect_float_eq(metric(db, run, "dp2", NULL, "lost_requests"), 0, 1e-9);
  cr_expect_eq(res.n_failed, 0);
  store_close(db);
}

// --- a replica lost a second time: after its restart, replica1 dies again on its own (no
// fault explains it). The kill explains the first loss only.
static replica_i relapsing_i;
static int (*relapse_poll_orig)(void *ctx, replica_event *out, int cap);
static int relapse_tokens; // tokens replica1 sent in its second incarnation; -1: it relapsed

static int relapse_poll(void *ctx, replica_event *out, int cap) {
  int n = relapse_poll_orig(ctx, out, cap);
  if (relapse_tokens < 0 || relapsing_i.epoch(ctx) != 2) return n;
  for (int i = 0; i < n; i++) relapse_tokens += out[i].kind == REPLICA_EV_TOKEN;
  if (relapse_tokens >= 300) {
    relapse_tokens = -1;
    sc_error e = {{0}};
    replica_fault kill = {.kind = RFAULT_KILL, .rank = -1};
    cr_assert_eq(relapsing_i.inject(ctx, &kill, &e), SC_OK, "%s", e.msg);
  }
  return n;
}

static sc_status make_relapsing(void *ud, const engine_config *cfg, int index, replica **out,
                                sc_error *err) {
  (void)ud;
  SC_TRY(replica_sim_new(cfg, index, out, err));
  if (index == 1) {
    relapsing_i = *(*out)->i;
    relapse_poll_orig = relapsing_i.poll;
    relapsing_i.poll = relapse_poll;
    (*out)->i = &relapsing_i;
  }
  return SC_OK;
}

Test(sim, a_second_loss_of_a_replica_a_kill_already_took_is_counted_and_said) {
  const char *text =
      "name: t\nmode: sim\nmodel: {preset: llama3-8b}\nhardware: {profile: h100-sxm, gpus: 2}\n"
      "deployments: [{dp: 2}]\n"
      "workload:\n  prompts: [{input: 64, output: 200}]\n"
      "  phases: [{ramp: {concurrency: [8]}, hold: 8s}]\n"
      "faults: [{at: 1s, kill: replica, target: replica1}]\n"
      "slo: {unexplained_losses: 0}\n";
  store *db = open_db("sim-relapse");
  sc_error err = {{0}};
  scenario *s = NULL;
  cr_assert_eq(scenario_parse(text, strlen(text), "t.yaml", ".", &s, &err), SC_OK, "%s", err.msg);
  runner_options o = runner_options_defaults();
  o.progress = RUNNER_PROGRESS_LINES;
  o.progress_out = tmpfile();
  o.make_replica = make_relapsing;
  relapse_tokens = 0;
  runner_result res;
  cr_assert_eq(runner_run(s, db, &o, &res, &err), SC_OK, "%s", err.msg);
  scenario_free(s);
  cr_assert_lt(relapse_tokens, 0, "replica1 relapsed after its restart");
  cr_expect_float_eq(metric(db, res.run_id, "dp2", NULL, "unexplained_losses"), 1, 1e-9,
                     "the second loss has no fault to explain it");
  cr_expect_eq(res.n_failed, 1, "unexplained_losses: 0 fails");
  char lines[1 << 15];
  rewind(o.progress_out);
  size_t n = fread(lines, 1, sizeof lines - 1, o.progress_out);
  lines[n] = 0;
  fclose(o.progress_out);
  const char *first = strstr(lines, "replica1 lost");
  cr_assert(first, "%s", lines);
  cr_expect(strstr(first + 1, "replica1 lost") &&
                strstr(lines, "(no kill, hang or exec fault explains it)"),
            "each loss has its line: %s", lines);
  cr_expect(strstr(lines, "restarted (epoch 3)"), "%s", lines);
  store_close(db);
}

// A kill with no retry fails the requests its replica held: at the kill, so in the window
// during it, not in the one before it where they arrived.
Test(sim, the_requests_a_kill_failed_are_in_its_window_not_the_one_before) {
  const char *text =
      "name: t\nmode: sim\nmodel: {preset: llama3-8b}\nhardware: {profile: h100-sxm, gpus: 2}\n"
      "deployments: [{dp: 2}]\n"
      "workload:\n  prompts: [{input: 64, output: 100}]\n"
      "  phases: [{ramp: {concurrency: [8]}, hold: 4s}]\n"
      "router: {max_retries: 0, resume: false, restart: false}\n"
      "faults: [{at: 2s, kill: replica, target: replica0}]\n"
      "slo: {failed_requests: 0}\n";
  store *db = open_db("sim-window-outcome");
  int64_t run = sim_run(db, text);
  long long failed = count(db, "SELECT count(*) FROM request WHERE run_id = ? AND "
                               "status = 'failed'", run);
  cr_assert_gt(failed, 0, "the kill failed the requests replica0 held");
  long n = 0;
  char *rows = rows_text(db, "SELECT w.window, w.value, w.pass, w.by FROM fault_window w JOIN "
                             "fault f ON f.id = w.fault_id WHERE f.run_id = ? AND w.name = "
                             "'failed_requests' ORDER BY w.start_ns", run, &n);
  char want[128];
  snprintf(want, sizeof want, "before|0.0|1|finish\nduring|%lld.0|0|finish\n", failed);
  cr_expect(!strncmp(rows, want, strlen(want)), "want %s got %s", want, rows);
  free(rows);
  store_close(db);
}

// On a slow host a ramp step's requests can all outlast its hold: every one it sent arrived
// in its warm-up, and nothing is measured. That is no data (the SLO fails saying so), not a
// disagreement between the metrics and their rows (which failed the run as a bug).
Test(sim, a_deployment_whose_every_request_was_a_warm_up_has_no_data_not_a_failed_audit) {
  const char *text =
      "name: t\nmode: sim\nmodel: {preset: llama3-8b}\nhardware: {profile: h100-sxm, gpus: 1}\n"
      "deployments: [{tp: 1}]\n"
      "workload:\n  prompts: [{input: 64, output: 16}]\n"
      "  phases: [{fixed: {requests: 4, concurrency: 4}, warmup: 10s}]\n"
      "slo: {ttft_p95_ms: 1000}\n";
  store *db = open_db("sim-all-warmup");
  int64_t run = sim_run(db, text); // asserts the run completed
  long n = 0;
  char *v = rows_text(db, "SELECT pass, note FROM verdict WHERE run_id = ?", run, &n);
  cr_expect_str_eq(v, "0|no data: no request was measured\n");
  free(v);
  store_close(db);
}

Test(sim, a_request_slow_on_a_healthy_replica_times_out_as_slow) {
  const char *text =
      "name: t\nmode: sim\nmodel: {preset: llama3-8b}\nhardware: {profile: h100-sxm, gpus: 1}\n"
      "deployments: [{dp: 1}]\n"
      "workload:\n  prompts: [{input: 64, output: 2000}]\n"
      "  phases: [{fixed: {requests: 2, concurrency: 2}}]\n"
      "limits: {request_timeout: 1s}\n"
      "faults: [{at: 100ms, slow: {on: rank, factor: 4}, target: replica0.rank0}]\n"
      "slo: {lost_requests: 0}\n";
  store *db = open_db("sim-slow");
  int64_t run = sim_run(db, text);
  cr_expect_eq(count(db, "SELECT count(*) FROM request WHERE run_id = ? AND status = 'timeout' "
                         "AND reason = 'timeout'", run), 2, "slow, not lost");
  cr_expect_float_eq(metric(db, run, "tp1", NULL, "lost_requests"), 0, 1e-9);
  cr_expect_float_eq(metric(db, run, "tp1", NULL, "errors_timeout"), 2, 1e-9);
  store_close(db);
}

// A closed-loop step whose requests outlast its hold has no request arriving after its warm-up,
// so its arrival-counted output_tok_s is 0; yet it delivers, and peak_output_tok_s (what a step
// delivered after its warm-up, of any of its requests) counts that: here the c64 step, whose
// 64 requests each outlast the whole ramp.
Test(sim, peak_throughput_counts_what_a_step_delivered_when_its_requests_outlast_the_hold) {
  const char *text =
      "name: t\nmode: sim\nmodel: {preset: llama3-8b}\nhardware: {profile: h100-sxm, gpus: 1}\n"
      "deployments: [{dp: 1}]\n"
      "workload:\n  prompts: [{input: 64, output: 4000}]\n"
      "  phases: [{name: ramp, ramp: {concurrency: [1, 64]}, hold: 1s, warmup: 500ms}]\n"
      "slo: {lost_requests: 0}\nseed: 3\n";
  store *db = open_db("sim-peak-delivered");
  int64_t run = sim_run(db, text);
  cr_expect_float_eq(metric(db, run, "tp1", "ramp-c64", "output_tok_s"), 0, 1e-9,
                     "no request arrived after the warm-up");
  double peak = metric(db, run, "tp1", NULL, "peak_output_tok_s");
  // 64 sequences decoding for the 0.5 s after the warm-up: far more than one sequence's rate
  cr_expect_gt(peak, 1000, "peak %g tok/s", peak);
  long n = 0;
  char *how = rows_text(db, "SELECT note FROM metric WHERE run_id = ? AND phase_id IS NULL AND "
                            "name = 'peak_output_tok_s'", run, &n);
  cr_expect(strstr(how, "ramp-c64: ") == how, "%s", how);
  free(how);
  store_close(db);
}

// A straggler flag already up when a slow fault begins does not hide it: the replica is scored
// afresh from the fault's start (faults/straggler.c). Here replica1 is still flagged for its slow
// rank when its link slows too; both faults are detected, the link one after it began.
Test(sim, a_slow_fault_on_a_replica_already_flagged_is_detected_too) {
  const char *text =
      "name: t\nmode: sim\nmodel: {preset: llama3-8b}\nhardware: {profile: h100-sxm, gpus: 4}\n"
      "deployments: [{tp: 2, dp: 2}]\n"
      "workload:\n  prompts: [{input: 64, output: 64}]\n"
      "  phases: [{rate: 40, duration: 6s}]\n"
      "faults:\n"
      "  - {at: 1s, slow: {on: rank, factor: 6}, target: replica1.rank0, duration: 3s}\n"
      "  - {at: 2s, slow: {on: link, latency: 1ms}, target: replica1, duration: 3s}\n"
      "slo: {lost_requests: 0}\nseed: 3\n";
  store *db = open_db("sim-slow-twice");
  int64_t run = sim_run(db, text);
  cr_expect_eq(count(db, "SELECT count(*) FROM fault WHERE run_id = ? AND detected_ns IS NOT NULL "
                         "AND detected_ns > injected_ns", run), 2, "both faults detected");
  store_close(db);
}

// --- per-class SLOs judged in a whole run

Test(sim_run, a_class_slo_is_judged_on_its_own_requests_and_stored_as_class_colon_key) {
  store *db = open_db("sim-class-slo");
  const char *text = "name: cls\n"
                     "mode: sim\n"
                     "model: {preset: llama3-8b}\n"
                     "hardware: {profile: h100-sxm, gpus: 1}\n"
                     "deployments: [{tp: 1}]\n"
                     "workload:\n"
                     "  prompts:\n"
                     "    - {name: short, input: 32, output: 8}\n"
                     "    - {name: long, input: 2000, output: 8}\n"
                     "  phases: [{fixed: {requests: 24, concurrency: 4}}]\n"
                     "slo:\n"
                     "  ttft_p95_ms: 100000\n"
                     "  classes: {short: {ttft_p95_ms: 0.001}, long: {ttft_p95_ms: 100000}}\n"
                     "seed: 5\n";
  int64_t run = sim_run(db, text);
  long n = 0;
  char *rows = rows_text(db, "SELECT slo, op, pass FROM verdict WHERE run_id = ? ORDER BY id",
                         run, &n);
  cr_expect_str_eq(rows, "ttft_p95_ms|<=|1\nshort:ttft_p95_ms|<=|0\nlong:ttft_p95_ms|<=|1\n");
  free(rows);
  // the short verdict's actual value is the short class's pooled TTFT p95 metric row
  rows = rows_text(db, "SELECT v.actual = m.value FROM verdict v JOIN metric m ON m.run_id = "
                   "v.run_id AND m.deployment_id = v.deployment_id AND m.phase_id IS NULL AND "
                   "m.class = 'short' AND m.name = 'ttft_p95_ms' WHERE v.run_id = ? AND v.slo = "
                   "'short:ttft_p95_ms'", run, &n);
  cr_expect_str_eq(rows, "1\n");
  free(rows);
  store_close(db);
}

// --- prefix caching: what a request finds cached, as its FINISHED event says

// Submits key with prompt p (n tokens), drives to idle and returns the cached tokens its
// FINISHED event reports (-1: it reported none).
static int cached_of(simbed *b, replica *r, uint64_t key, const int32_t *p, int n) {
  engine_request q = {.prompt = p, .n_prompt = n, .max_tokens = 4};
  sc_error err = {{0}};
  cr_assert_eq(replica_submit(r, key, &q, &err), SC_OK, "%s", err.msg);
  int cached = -2;
  for (int guard = 0; guard < 100000 && cached == -2; guard++) {
    uint64_t next = replica_next_ns(r);
    if (next != UINT64_MAX) {
      b->now = next;
      replica_advance(r, b->now);
    }
    replica_event ev[64];
    int m = replica_poll(r, ev, 64);
    for (int i = 0; i < m; i++)
      if (ev[i].kind == REPLICA_EV_FINISHED && ev[i].key == key)
        cached = ev[i].has_cached ? ev[i].cached_tokens : -1;
    if (next == UINT64_MAX && m == 0 && cached == -2) break;
  }
  cr_assert_neq(cached, -2, "request %llu never finished", (unsigned long long)key);
  return cached;
}

Test(sim, the_cache_hit_count_equals_the_full_blocks_shared_with_an_earlier_request) {
  simbed *b = sc_test_simbed_new("llama3-8b", "h100-sxm", 1, 1, 4096);
  b->cfg.prefix_caching = true;
  int bs = b->cfg.block_size;
  cr_assert_eq(bs, 16);
  replica *r = NULL;
  sc_error err = {{0}};
  cr_assert_eq(replica_sim_new(&b->cfg, 0, &r, &err), SC_OK, "%s", err.msg);
  int32_t a[200], p[200];
  sc_test_prompt(a, 200, 1);
  cr_expect_eq(cached_of(b, r, 0, a, 200), 0, "nothing is cached before the first request");
  // shares 100 tokens: 6 full blocks (96 tokens) of the first request's prompt
  memcpy(p, a, sizeof p);
  for (int i = 100; i < 200; i++) p[i] = 3 + (p[i] + 1) % 400;
  cr_expect_eq(cached_of(b, r, 1, p, 200), 96);
  // shares 128 tokens with the first: 8 blocks, whatever the second shared
  for (int i = 128; i < 200; i++) p[i] = a[i] == 5 ? 6 : 5;
  memcpy(p, a, 128 * sizeof *p);
  cr_expect_eq(cached_of(b, r, 2, p, 150), 128);
  // the whole prompt again: every full block but the one holding the last token (computed anew
  // to give the first output)
  cr_expect_eq(cached_of(b, r, 3, a, 200), 192);
  cr_expect_eq(cached_of(b, r, 4, a, 192), 176, "the last token's block is computed again");
  // unrelated tokens: nothing
  sc_test_prompt(p, 200, 77);
  cr_expect_eq(cached_of(b, r, 5, p, 200), 0);
  replica_free(r);
  // without prefix caching the engine reports no cached count at all
  b->cfg.prefix_caching = false;
  cr_assert_eq(replica_sim_new(&b->cfg, 0, &r, &err), SC_OK, "%s", err.msg);
  cr_expect_eq(cached_of(b, r, 0, a, 200), -1);
  cr_expect_eq(cached_of(b, r, 1, a, 200), -1);
  replica_free(r);
  sc_test_simbed_free(b);
}
