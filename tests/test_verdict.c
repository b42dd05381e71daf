// The verdict checks (faults/verdict.c): the history check counts every request and token row
// of one deployment (lost, completed twice, bad status, duplicate token) and nothing of other
// deployments; the recovery point of a fault comes from delivered token times; outputs hash by
// FNV-1a 64 over little-endian ids; and the resource snapshot sees new fds, threads and
// children (zombies and odd process names included).
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "faults/verdict.h"
#include "tests/helpers.h"

// --- history fixtures

typedef struct fixture {
  store *s;
  int64_t run, dep, phase;
} fixture;

static store *open_store(const char *tag) {
  const char *d = sc_test_tmpdir(tag);
  cr_assert_not_null(d);
  char path[512];
  snprintf(path, sizeof path, "%s/results.db", d);
  store *s = NULL;
  sc_error err = {{0}};
  cr_assert_eq(store_open(path, &s, &err), SC_OK, "%s", err.msg);
  return s;
}

// A run (when run is 0) and a deployment with one phase in s.
static fixture add_deployment(store *s, int64_t run, int idx) {
  sc_error err = {{0}};
  fixture f = {.s = s, .run = run};
  if (!f.run) {
    store_run r = {.scenario = "verdict", .scenario_text = "name: verdict\n", .mode = "sim",
                   .backend = "sim", .model = "llama-tiny", .seed = 1};
    cr_assert_eq(store_run_begin(s, &r, &f.run, &err), SC_OK, "%s", err.msg);
  }
  store_deployment d = {.run_id = f.run, .idx = idx, .label = "tp1", .tp = 1, .pp = 1, .dp = 1};
  cr_assert_eq(store_deployment_begin(s, &d, &f.dep, &err), SC_OK, "%s", err.msg);
  store_phase p = {.run_id = f.run, .deployment_id = f.dep, .name = "rate 1", .kind = "rate",
                   .rate = 1};
  cr_assert_eq(store_phase_begin(s, &p, &f.phase, &err), SC_OK, "%s", err.msg);
  return f;
}

static fixture new_fixture(const char *tag) { return add_deployment(open_store(tag), 0, 0); }

// A request row with seq and status and n_tokens token rows (idx 0 .. n_tokens - 1); its id.
static int64_t add_request(const fixture *f, int64_t seq, const char *status, int n_tokens) {
  uint64_t t[8], base = 1000000u * (uint64_t)(seq + 2); // ns from the run start
  cr_assert_leq(n_tokens, 8);
  for (int i = 0; i < n_tokens; i++) t[i] = base + 1000u * (uint64_t)i;
  store_request r = {.run_id = f->run, .deployment_id = f->dep, .phase_id = f->phase,
                     .seq = seq, .class_name = "", .replica = 0, .prompt_tokens = 4,
                     .max_tokens = 8, .output_tokens = n_tokens, .arrival_ns = base - 500,
                     .status = status};
  int64_t id = 0;
  sc_error err = {{0}};
  cr_assert_eq(store_request_add(f->s, &r, n_tokens ? t : NULL, n_tokens, &id, &err), SC_OK,
               "%s", err.msg);
  return id;
}

static void exec_sql(const fixture *f, const char *sql) {
  char *msg = NULL;
  int rc = sqlite3_exec(store_db(f->s), sql, NULL, NULL, &msg);
  cr_assert_eq(rc, SQLITE_OK, "%s: %s", sql, msg ? msg : "");
  sqlite3_free(msg);
}

static fv_history check(const fixture *f, int64_t sent) {
  sc_error err = {{0}};
  cr_assert_eq(store_flush(f->s, &err), SC_OK, "%s", err.msg);
  fv_history h;
  memset(&h, 0xa5, sizeof h); // every field must be written
  cr_assert_eq(fv_history_check(f->s, f->run, f->dep, sent, &h, &err), SC_OK, "%s", err.msg);
  return h;
}

static void expect_history(const fv_history *h, const fv_history *want) {
  cr_expect_eq(h->sent, want->sent, "sent %lld", (long long)h->sent);
  cr_expect_eq(h->recorded, want->recorded, "recorded %lld", (long long)h->recorded);
  cr_expect_eq(h->lost, want->lost, "lost %lld", (long long)h->lost);
  cr_expect_eq(h->double_done, want->double_done, "double_done %lld", (long long)h->double_done);
  cr_expect_eq(h->bad_status, want->bad_status, "bad_status %lld", (long long)h->bad_status);
  cr_expect_eq(h->dup_tokens, want->dup_tokens, "dup_tokens %lld", (long long)h->dup_tokens);
  cr_expect_eq(h->ok, want->ok, "ok %lld", (long long)h->ok);
  cr_expect_eq(h->cancelled, want->cancelled, "cancelled %lld", (long long)h->cancelled);
  cr_expect_eq(h->failed, want->failed, "failed %lld", (long long)h->failed);
  cr_expect_eq(h->timeout, want->timeout, "timeout %lld", (long long)h->timeout);
  cr_expect_eq(h->bad_times, want->bad_times, "bad_times %lld", (long long)h->bad_times);
  cr_expect_eq(h->abandoned, want->abandoned, "abandoned %lld", (long long)h->abandoned);
  cr_expect_eq(h->token_gaps, want->token_gaps, "token_gaps %lld", (long long)h->token_gaps);
}

// --- history

Test(history, clean_history_counts_each_status_and_holds) {
  fixture f = new_fixture("fv-clean");
  const char *st[6] = {"ok", "ok", "cancelled", "ok", "failed", "timeout"};
  for (int i = 0; i < 6; i++) add_request(&f, i, st[i], i % 3 + 1);
  fv_history h = check(&f, 6);
  expect_history(&h, &(fv_history){.sent = 6, .recorded = 6, .ok = 3, .cancelled = 1,
                                    .failed = 1, .timeout = 1});
  cr_expect(fv_history_ok(&h, 0));
  store_close(f.s);
}

Test(history, deployment_with_no_rows_has_lost_every_request) {
  fixture f = new_fixture("fv-empty");
  fv_history h = check(&f, 3);
  expect_history(&h, &(fv_history){.sent = 3, .lost = 3});
  cr_expect_not(fv_history_ok(&h, 2));
  cr_expect(fv_history_ok(&h, 3));
  h = check(&f, 0);
  expect_history(&h, &(fv_history){0});
  cr_expect(fv_history_ok(&h, 0));
  store_close(f.s);
}

Test(history, a_timeout_nobody_answered_after_a_replica_loss_is_lost_a_slow_one_is_not) {
  fixture f = new_fixture("fv-abandoned");
  add_request(&f, 0, "ok", 2);
  add_request(&f, 1, "timeout", 1); // slow on a healthy replica: the runner's reason "timeout"
  exec_sql(&f, "UPDATE request SET reason = 'timeout' WHERE seq = 1");
  fv_history h = check(&f, 2);
  expect_history(&h, &(fv_history){.sent = 2, .recorded = 2, .ok = 1, .timeout = 1});
  cr_expect(fv_history_ok(&h, 0), "a slow request is not lost");
  add_request(&f, 2, "timeout", 0); // its replica died under it and nothing retried it
  exec_sql(&f, "UPDATE request SET reason = 'replica_lost' WHERE seq = 2");
  h = check(&f, 3);
  expect_history(&h, &(fv_history){.sent = 3, .recorded = 3, .ok = 1, .timeout = 2,
                                    .abandoned = 1});
  cr_expect_not(fv_history_ok(&h, 0), "a request nobody answered is lost");
  cr_expect(fv_history_ok(&h, 1));
  store_close(f.s);
}

Test(history, a_token_row_missing_from_a_request_is_a_violation) {
  fixture f = new_fixture("fv-token-gap");
  add_request(&f, 0, "ok", 3);
  int64_t id = add_request(&f, 1, "ok", 4);
  fv_history h = check(&f, 2);
  expect_history(&h, &(fv_history){.sent = 2, .recorded = 2, .ok = 2});
  cr_expect(fv_history_ok(&h, 0));
  char sql[128];
  snprintf(sql, sizeof sql, "UPDATE token_times SET t_ns = json_remove(t_ns, '$[2]') "
           "WHERE request_id = %lld", (long long)id);
  exec_sql(&f, sql); // the recorder dropped one of its rows: output_tokens says 4, rows 3
  h = check(&f, 2);
  expect_history(&h, &(fv_history){.sent = 2, .recorded = 2, .ok = 2, .token_gaps = 1});
  cr_expect_not(fv_history_ok(&h, 0));
  store_close(f.s);
}

Test(history, missing_seq_is_lost_and_fails_unless_allowed) {
  fixture f = new_fixture("fv-lost");
  for (int i = 0; i < 5; i++)
    if (i != 2) add_request(&f, i, "ok", 2);
  fv_history h = check(&f, 5);
  expect_history(&h, &(fv_history){.sent = 5, .recorded = 4, .lost = 1, .ok = 4});
  cr_expect_not(fv_history_ok(&h, 0));
  cr_expect(fv_history_ok(&h, 1));
  // Sent beyond the last row: the tail counts as lost too.
  h = check(&f, 7);
  expect_history(&h, &(fv_history){.sent = 7, .recorded = 4, .lost = 3, .ok = 4});
  store_close(f.s);
}

Test(history, seq_outside_the_sent_range_is_recorded_but_fills_no_gap) {
  fixture f = new_fixture("fv-range");
  add_request(&f, 0, "ok", 1);
  add_request(&f, 5, "ok", 1);
  add_request(&f, -1, "failed", 0);
  fv_history h = check(&f, 2);
  expect_history(&h, &(fv_history){.sent = 2, .recorded = 3, .lost = 1, .ok = 2, .failed = 1});
  store_close(f.s);
}

Test(history, seq_recorded_twice_is_completed_twice_and_both_rows_count) {
  fixture f = new_fixture("fv-double");
  for (int i = 0; i < 4; i++) add_request(&f, i, "ok", 1);
  add_request(&f, 1, "failed", 0);
  add_request(&f, 3, "ok", 2);
  add_request(&f, 3, "timeout", 0);
  fv_history h = check(&f, 4);
  expect_history(&h, &(fv_history){.sent = 4, .recorded = 4, .double_done = 2, .ok = 5,
                                    .failed = 1, .timeout = 1});
  cr_expect_not(fv_history_ok(&h, 0));
  cr_expect_not(fv_history_ok(&h, 100), "a duplicate is not excused by allowed_lost");
  store_close(f.s);
}

Test(history, status_outside_the_four_is_bad_and_in_no_status_count) {
  fixture f = new_fixture("fv-status");
  add_request(&f, 0, "ok", 1);
  // The writer refuses it ...
  store_request r = {.run_id = f.run, .deployment_id = f.dep, .phase_id = f.phase, .seq = 1,
                     .class_name = "", .replica = -1, .status = "done"};
  sc_error err = {{0}};
  cr_expect_eq(store_request_add(f.s, &r, NULL, 0, NULL, &err), SC_INVALID);
  // ... so a file written by something else, or edited, is what carries one.
  char sql[512];
  snprintf(sql, sizeof sql,
           "INSERT INTO request(run_id, deployment_id, phase_id, seq, class, prompt_tokens, "
           "max_tokens, output_tokens, arrival_ns, status) VALUES(%lld, %lld, %lld, 1, '', 1, "
           "1, 0, 0, 'done'), (%lld, %lld, %lld, 2, '', 1, 1, 0, 0, 'OK')",
           (long long)f.run, (long long)f.dep, (long long)f.phase, (long long)f.run,
           (long long)f.dep, (long long)f.phase);
  exec_sql(&f, sql);
  fv_history h = check(&f, 3);
  expect_history(&h, &(fv_history){.sent = 3, .recorded = 3, .bad_status = 2, .ok = 1});
  cr_expect_not(fv_history_ok(&h, 0));
  store_close(f.s);
}

Test(history, schema_keeps_one_array_of_token_times_per_request) {
  fixture f = new_fixture("fv-tokkey");
  int64_t id = add_request(&f, 0, "ok", 3);
  char sql[160];
  snprintf(sql, sizeof sql, "INSERT INTO token_times(request_id, t_ns) VALUES(%lld, '[99]')",
           (long long)id);
  int rc = sqlite3_exec(store_db(f.s), sql, NULL, NULL, NULL);
  cr_expect_eq(rc & 0xff, SQLITE_CONSTRAINT, "got %s", sqlite3_errstr(rc));
  fv_history h = check(&f, 1);
  expect_history(&h, &(fv_history){.sent = 1, .recorded = 1, .ok = 1});
  store_close(f.s);
}

Test(history, duplicate_token_index_counts_every_row_beyond_the_first) {
  // Files this writer makes hold one array of times per request, so no index twice; a file of
  // version 3 (a table of token rows), read as it is, whose table lacks the key (request_id,
  // idx), or one written by something else, can carry them.
  fixture f = new_fixture("fv-duptok");
  int64_t a = add_request(&f, 0, "ok", 3), b = add_request(&f, 1, "ok", 2);
  add_request(&f, 2, "ok", 4);
  exec_sql(&f, "DROP VIEW token; CREATE TABLE token(request_id INTEGER NOT NULL, "
               "idx INTEGER NOT NULL, t_ns INTEGER NOT NULL); INSERT INTO token SELECT "
               "tt.request_id, j.key, j.value FROM token_times AS tt, json_each(tt.t_ns) AS j");
  fv_history h = check(&f, 3);
  expect_history(&h, &(fv_history){.sent = 3, .recorded = 3, .ok = 3});
  cr_expect(fv_history_ok(&h, 0));
  char sql[256];
  snprintf(sql, sizeof sql,
           "INSERT INTO token(request_id, idx, t_ns) VALUES(%lld, 1, 2001000), "
           "(%lld, 1, 2001000), (%lld, 0, 3000000)", // copies of existing rows
           (long long)a, (long long)a, (long long)b);
  exec_sql(&f, sql);
  h = check(&f, 3);
  expect_history(&h, &(fv_history){.sent = 3, .recorded = 3, .ok = 3, .dup_tokens = 3});
  cr_expect_not(fv_history_ok(&h, 0));
  store_close(f.s);
}

Test(history, rows_of_other_deployments_and_runs_do_not_count) {
  store *s = open_store("fv-other");
  fixture f = add_deployment(s, 0, 0);
  fixture g = add_deployment(s, f.run, 1);  // same run, another deployment
  fixture o = add_deployment(s, 0, 0);      // another run
  for (int i = 0; i < 3; i++) add_request(&f, i, "ok", 2);
  add_request(&g, 0, "failed", 0);
  add_request(&g, 0, "failed", 0);
  add_request(&o, 3, "timeout", 0);
  add_request(&o, 1, "cancelled", 1);
  fv_history h = check(&f, 3);
  expect_history(&h, &(fv_history){.sent = 3, .recorded = 3, .ok = 3});
  cr_expect(fv_history_ok(&h, 0));
  h = check(&g, 1);
  expect_history(&h, &(fv_history){.sent = 1, .recorded = 1, .double_done = 1, .failed = 2});
  // The deployment id alone does not select: the run must match too.
  h = check(&(fixture){.s = s, .run = o.run, .dep = f.dep}, 3);
  expect_history(&h, &(fv_history){.sent = 3, .lost = 3});
  store_close(s);
}

Test(history, database_error_is_io_and_negative_sent_is_invalid) {
  fixture f = new_fixture("fv-err");
  add_request(&f, 0, "ok", 1);
  sc_error err = {{0}};
  fv_history h = {0};
  cr_expect_eq(fv_history_check(f.s, f.run, f.dep, -1, &h, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "sent") != NULL, "%s", err.msg);
  cr_assert_eq(store_flush(f.s, &err), SC_OK, "%s", err.msg);
  exec_sql(&f, "DROP VIEW token");
  err.msg[0] = 0;
  cr_expect_eq(fv_history_check(f.s, f.run, f.dep, 1, &h, &err), SC_IO);
  cr_expect(strstr(err.msg, "token") != NULL, "%s", err.msg);
  store_close(f.s);
}

// --- recovery

#define MS 1000000ull
#define SEC 1000000000ull

Test(history, times_running_backwards_are_a_violation) {
  fixture f = new_fixture("fv-times");
  int64_t a = add_request(&f, 0, "ok", 3); // clean
  int64_t b = add_request(&f, 1, "ok", 3);
  int64_t c = add_request(&f, 2, "ok", 3);
  int64_t d = add_request(&f, 3, "ok", 3);
  (void)a;
  char sql[256];
  // a token before the one ahead of it
  snprintf(sql, sizeof sql, "UPDATE token_times SET t_ns = json_set(t_ns, '$[2]', "
           "json_extract(t_ns, '$[2]') - 5000) WHERE request_id = %lld", (long long)b);
  exec_sql(&f, sql);
  // a first token before the arrival
  snprintf(sql, sizeof sql, "UPDATE request SET first_token_ns = arrival_ns - 1 WHERE id = %lld",
           (long long)c);
  exec_sql(&f, sql);
  // finished before it arrived
  snprintf(sql, sizeof sql, "UPDATE request SET finish_ns = arrival_ns - 1 WHERE id = %lld",
           (long long)d);
  exec_sql(&f, sql);
  fv_history h = check(&f, 4);
  expect_history(&h, &(fv_history){.sent = 4, .recorded = 4, .ok = 4, .bad_times = 3});
  cr_expect_not(fv_history_ok(&h, 0));
  store_close(f.s);
}

// Token times at one per `every` ns in [a, b), appended to v at *n.
static void tokens(uint64_t *v, size_t *n, size_t cap, uint64_t a, uint64_t b, uint64_t every) {
  for (uint64_t t = a; t < b; t += every) {
    cr_assert_lt(*n, cap);
    v[(*n)++] = t;
  }
}

enum { TOK_CAP = 20000 };

Test(recovery, gap_after_the_fault_recovers_within_one_step_of_full_rate) {
  static uint64_t v[TOK_CAP];
  size_t n = 0;
  tokens(v, &n, TOK_CAP, 0, 5 * SEC, MS);        // 1000 tok/s before the fault at 5 s
  tokens(v, &n, TOK_CAP, 6 * SEC, 10 * SEC, MS); // nothing for 1 s, then full rate again
  uint64_t r = 0;
  cr_assert(fv_recovered_at(v, n, 0, 5 * SEC, 5 * SEC, 10 * SEC, SEC, 0.9, &r));
  uint64_t step = SEC / 10;
  cr_expect(r + step >= 6 * SEC && r <= 6 * SEC + step, "recovered at %llu ns",
            (unsigned long long)r);
  // Detected later: the search starts at the detection, on its own grid.
  cr_assert(fv_recovered_at(v, n, 0, 5 * SEC, 5 * SEC + 550 * MS, 10 * SEC, SEC, 0.9, &r));
  cr_expect(r >= 5 * SEC + 550 * MS && r + step >= 6 * SEC && r <= 6 * SEC + step,
            "recovered at %llu ns", (unsigned long long)r);
  cr_expect_eq((r - (5 * SEC + 550 * MS)) % step, 0, "on the grid from the detection");
}

Test(recovery, half_rate_after_the_fault_never_recovers) {
  static uint64_t v[TOK_CAP];
  size_t n = 0;
  tokens(v, &n, TOK_CAP, 0, 5 * SEC, MS);
  tokens(v, &n, TOK_CAP, 5 * SEC, 12 * SEC, 2 * MS);
  uint64_t r = 12345;
  cr_expect_not(fv_recovered_at(v, n, 0, 5 * SEC, 5 * SEC, 12 * SEC, SEC, 0.9, &r));
  cr_expect_eq(r, 12345, "left alone");
  // The same tokens pass a lower bar (0.5 of the pre-fault level) at once.
  cr_expect(fv_recovered_at(v, n, 0, 5 * SEC, 5 * SEC, 12 * SEC, SEC, 0.5, &r));
  cr_expect_eq(r, 5 * SEC);
}

Test(recovery, a_window_must_end_by_end_ns) {
  static uint64_t v[TOK_CAP];
  size_t n = 0;
  tokens(v, &n, TOK_CAP, 0, 5 * SEC, MS);
  tokens(v, &n, TOK_CAP, 9500 * MS, 10 * SEC, MS); // full rate only for the last 0.5 s
  uint64_t r = 7;
  cr_expect_not(fv_recovered_at(v, n, 0, 5 * SEC, 5 * SEC, 10 * SEC, SEC, 0.9, &r));
  cr_expect_eq(r, 7);
  // Had the tokens gone on to 11 s, the window [10 s, 11 s) would show it.
  tokens(v, &n, TOK_CAP, 10 * SEC, 11 * SEC, MS);
  cr_expect(fv_recovered_at(v, n, 0, 5 * SEC, 5 * SEC, 11 * SEC, SEC, 0.9, &r));
  cr_expect(r + SEC / 10 >= 9500 * MS && r <= 9500 * MS, "recovered at %llu",
            (unsigned long long)r);
}

Test(recovery, no_tokens_before_the_fault_is_nothing_to_measure) {
  static uint64_t v[TOK_CAP];
  size_t n = 0;
  tokens(v, &n, TOK_CAP, 5 * SEC, 10 * SEC, MS);
  uint64_t r = 7;
  cr_expect_not(fv_recovered_at(v, n, 0, 5 * SEC, 5 * SEC, 10 * SEC, SEC, 0.9, &r));
  cr_expect_not(fv_recovered_at(NULL, 0, 0, 5 * SEC, 5 * SEC, 10 * SEC, SEC, 0.9, &r));
  // A fault at the phase's start has no pre-fault window at all.
  cr_expect_not(fv_recovered_at(v, n, 5 * SEC, 5 * SEC, 5 * SEC, 10 * SEC, SEC, 0.9, &r));
  cr_expect_not(fv_recovered_at(v, n, 0, 5 * SEC, 5 * SEC, 10 * SEC, 0, 0.9, &r));
  cr_expect_eq(r, 7);
}

Test(recovery, pre_fault_window_is_clipped_at_the_phase_start) {
  static uint64_t v[TOK_CAP];
  size_t n = 0;
  tokens(v, &n, TOK_CAP, 4800 * MS, 5 * SEC, MS);      // the phase starts at 4.8 s
  tokens(v, &n, TOK_CAP, 6 * SEC, 10 * SEC, 2 * MS);   // half rate after the fault
  uint64_t r = 0;
  // Over [4.8 s, 5 s) the level is 1000 tok/s: half of it never recovers.
  cr_expect_not(fv_recovered_at(v, n, 4800 * MS, 5 * SEC, 5 * SEC, 10 * SEC, SEC, 0.9, &r));
  // From 4 s, [4 s, 5 s) holds 200 tokens: 180 in a window are enough, first at t = 5.4 s
  // ([5.4 s, 6.4 s) holds 200; [5.3 s, 6.3 s) only 150).
  cr_assert(fv_recovered_at(v, n, 4 * SEC, 5 * SEC, 5 * SEC, 10 * SEC, SEC, 0.9, &r));
  cr_expect_eq(r, 5400 * MS, "recovered at %llu", (unsigned long long)r);
}

// The definition stepped one grid point at a time, counting linearly (the same arithmetic for
// "reaches frac x the level": c >= frac x pre x w / (fault - lo)).
static bool recovered_ref(const uint64_t *v, size_t n, uint64_t from, uint64_t fault,
                          uint64_t after, uint64_t end, uint64_t w, double frac, uint64_t *out) {
  uint64_t lo = fault > w ? fault - w : 0;
  if (lo < from) lo = from;
  if (lo >= fault || w == 0) return false;
  size_t pre = 0;
  for (size_t i = 0; i < n; i++) pre += v[i] >= lo && v[i] < fault;
  if (!pre) return false;
  uint64_t step = w / 10 ? w / 10 : 1;
  for (uint64_t t = after; t + w <= end; t += step) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += v[i] >= t && v[i] < t + w;
    if ((double)c >= frac * (double)pre * (double)w / (double)(fault - lo)) {
      *out = t;
      return true;
    }
  }
  return false;
}

Test(recovery, matches_stepping_every_grid_point_on_irregular_traffic) {
  enum { N = 600 };
  uint64_t v[N];
  uint32_t x = 12345;
  int agree = 0, recovered = 0;
  for (int trial = 0; trial < 40; trial++) {
    // Gaps drawn from 0.1 .. 60 ms, now and then 0.5 .. 1.5 s; odd trials run at half the
    // rate after the fault (so some never recover).
    uint64_t t = 0;
    for (int i = 0; i < N; i++) {
      x = x * 1103515245u + 12345u;
      uint64_t gap = (x >> 8) % 97 == 0 ? 500 * MS + (x >> 4) % SEC
                                        : 100000 + (x >> 6) % (60 * MS);
      t += (trial % 2 && i > N / 3) ? 2 * gap : gap;
      v[i] = t;
    }
    uint64_t fault = v[N / 3], end = v[N - 1] + 1, w = 200 * MS + (uint64_t)trial * 7 * MS;
    uint64_t a = 0, b = 0;
    bool ra = fv_recovered_at(v, N, 0, fault, fault + 3 * MS, end, w, 0.9, &a);
    bool rb = recovered_ref(v, N, 0, fault, fault + 3 * MS, end, w, 0.9, &b);
    cr_expect_eq(ra, rb, "trial %d", trial);
    if (ra && rb) cr_expect_eq(a, b, "trial %d: %llu vs %llu", trial, (unsigned long long)a,
                               (unsigned long long)b);
    agree += ra == rb && (!ra || a == b);
    recovered += ra;
  }
  cr_expect_eq(agree, 40);
  cr_expect(recovered > 0 && recovered < 40, "both outcomes exercised: %d recovered", recovered);
}

Test(recovery, matches_stepping_every_grid_point_at_nanosecond_resolution) {
  // Times of a few ns, windows of 20 .. 59 ns and steps of 2 .. 5 ns: grid points land on token
  // times and on every edge a skip could miss by one.
  enum { N = 200 };
  uint64_t v[N];
  uint32_t x = 777;
  int recovered = 0;
  for (int trial = 0; trial < 300; trial++) {
    uint64_t t = 0;
    for (int i = 0; i < N; i++) {
      x = x * 1103515245u + 12345u;
      uint64_t gap = (x >> 16) % 8;
      t += (trial % 3 == 1 && i > N / 2) ? 2 * gap + (x >> 20) % 2 : gap;
      v[i] = t;
    }
    uint64_t w = 20 + (uint64_t)trial % 40, fault = v[N / 2], after = fault + (uint64_t)trial % 7;
    uint64_t from = trial % 5 == 0 ? fault - w / 3 : 0, end = v[N - 1] + (uint64_t)trial % 3;
    double frac = trial % 4 == 3 ? 1.0 : 0.9;
    uint64_t a = 0, b = 0;
    bool ra = fv_recovered_at(v, N, from, fault, after, end, w, frac, &a);
    bool rb = recovered_ref(v, N, from, fault, after, end, w, frac, &b);
    cr_expect_eq(ra, rb, "trial %d", trial);
    if (ra && rb) cr_expect_eq(a, b, "trial %d: %llu vs %llu", trial, (unsigned long long)a,
                               (unsigned long long)b);
    recovered += ra;
  }
  cr_expect(recovered > 0 && recovered < 300, "both outcomes exercised: %d recovered",
            recovered);
}

Test(recovery, level_no_window_can_reach_never_recovers) {
  static uint64_t v[TOK_CAP];
  size_t n = 0;
  tokens(v, &n, TOK_CAP, 0, 10 * SEC, MS); // steady 1000 tok/s, no dip at all
  uint64_t r = 7;
  cr_expect_not(fv_recovered_at(v, n, 0, 5 * SEC, 5 * SEC, 10 * SEC, SEC, 2.0, &r),
                "twice the steady rate");
  // A phase that started 1 ms before the fault: its level (1 token in 1 ms) asks 900 tokens of
  // a 1 s window, more than the 300 there are in all.
  n = 0;
  tokens(v, &n, TOK_CAP, 5 * SEC - MS, 5 * SEC + 299 * MS, MS);
  cr_expect_not(fv_recovered_at(v, n, 5 * SEC - MS, 5 * SEC, 5 * SEC, 10 * SEC, SEC, 0.9, &r));
  cr_expect_eq(r, 7);
  cr_expect(fv_recovered_at(v, n, 5 * SEC - MS, 5 * SEC, 5 * SEC, 10 * SEC, SEC, 0.25, &r),
            "250 of 300 are enough");
  cr_expect_eq(r, 5 * SEC);
}

// --- output hash

// --- throughput dip

Test(dip, no_token_for_a_window_is_a_full_dip_and_half_rate_is_half) {
  static uint64_t v[TOK_CAP];
  size_t n = 0;
  tokens(v, &n, TOK_CAP, 0, 5 * SEC, MS);        // 1000 tok/s before the fault at 5 s
  tokens(v, &n, TOK_CAP, 5 * SEC, 7 * SEC, 2 * MS); // half rate while it lasts (2 s)
  tokens(v, &n, TOK_CAP, 7 * SEC, 10 * SEC, MS);
  cr_expect_float_eq(fv_dip(v, n, 0, 5 * SEC, 7 * SEC, 10 * SEC, SEC), 0.5, 1e-9);
  size_t m = 0;
  tokens(v, &m, TOK_CAP, 0, 5 * SEC, MS);
  tokens(v, &m, TOK_CAP, 6 * SEC + 500 * MS, 10 * SEC, MS); // 1.5 s with nothing
  cr_expect_float_eq(fv_dip(v, m, 0, 5 * SEC, 7 * SEC, 10 * SEC, SEC), 1.0, 1e-9);
}

Test(dip, a_span_shorter_than_the_window_is_one_window_and_no_level_is_nan) {
  static uint64_t v[TOK_CAP];
  size_t n = 0;
  tokens(v, &n, TOK_CAP, 0, 10 * SEC, MS); // steady: no dip
  cr_expect_float_eq(fv_dip(v, n, 0, 5 * SEC, 5 * SEC + 10 * MS, 10 * SEC, SEC), 0.0, 1e-9);
  cr_expect(isnan(fv_dip(v, n, 5 * SEC, 5 * SEC, 6 * SEC, 10 * SEC, SEC)),
            "no time before the fault inside its phase");
  cr_expect(isnan(fv_dip(v, n, 0, 9 * SEC + 500 * MS, 10 * SEC, 10 * SEC, SEC)),
            "no window ends by end_ns");
}

Test(hash, fnv1a_64_of_little_endian_ids) {
  cr_expect_eq(fv_output_hash(NULL, 0), 0xcbf29ce484222325ull, "empty: the offset basis");
  // Four zero bytes: the basis times the FNV prime four times.
  int32_t zero = 0;
  cr_expect_eq(fv_output_hash(&zero, 1), 0x4d25767f9dce13f5ull);
  // ids whose little-endian bytes spell "abcdefgh": FNV-1a 64 of that string.
  const int32_t abcdefgh[2] = {0x64636261, 0x68676665};
  cr_expect_eq(fv_output_hash(abcdefgh, 2), 0x25da8c1836a8d66dull);
  // 'a' then three zero bytes (FNV-1a 64 of "a" alone is the published 0xaf63dc4c8601ec8c).
  const int32_t a = 0x61;
  cr_expect_eq(fv_output_hash(&a, 1), 0xac804b820e4fe984ull);
  const int32_t minus1 = -1; // four 0xff bytes
  cr_expect_eq(fv_output_hash(&minus1, 1), 0x994f76653e2a3951ull);
}

Test(hash, order_of_ids_matters) {
  const int32_t ab[2] = {1, 2}, ba[2] = {2, 1};
  cr_expect_eq(fv_output_hash(ab, 2), 0xc9c28939c99668c6ull);
  cr_expect_eq(fv_output_hash(ba, 2), 0x46c2da3be7c31176ull);
  cr_expect_neq(fv_output_hash(ab, 2), fv_output_hash(ab, 1), "a prefix differs");
}

// --- resources

static fv_resources now(void) {
  fv_resources r;
  sc_error err = {{0}};
  cr_assert_eq(fv_resources_now(&r, &err), SC_OK, "%s", err.msg);
  cr_assert(r.threads >= 1 && r.fds >= 3 && r.children >= 0, "%d %d %d", r.threads, r.fds,
            r.children);
  return r;
}

Test(resources, fds_are_the_descriptors_open_here_not_counting_the_listing) {
  fv_resources a = now();
  long max = sysconf(_SC_OPEN_MAX);
  if (max < 0 || max > 1 << 20) max = 1 << 20;
  int open_fds = 0;
  for (int fd = 0; fd < max; fd++) open_fds += fcntl(fd, F_GETFD) != -1;
  cr_expect_eq(a.fds, open_fds);
}

Test(resources, pipe_adds_two_fds_and_closing_gives_them_back) {
  fv_resources a = now();
  int p[2];
  cr_assert_eq(pipe(p), 0);
  fv_resources b = now();
  close(p[0]);
  close(p[1]);
  fv_resources c = now();
  cr_expect_eq(b.fds, a.fds + 2);
  cr_expect_eq(c.fds, a.fds);
  cr_expect_eq(b.threads, a.threads);
  cr_expect_eq(b.children, a.children);
}

Test(resources, settled_still_reports_what_stays_open) {
  fv_resources a = now();
  int p[2];
  cr_assert_eq(pipe(p), 0);
  fv_resources b;
  sc_error err = {{0}};
  cr_assert_eq(fv_resources_settled(&a, 20, &b, &err), SC_OK, "%s", err.msg);
  close(p[0]);
  close(p[1]);
  cr_expect_eq(b.fds, a.fds + 2);
  cr_expect_eq(fv_resources_settled(NULL, 20, &b, &err), SC_INVALID);
}

static void *wait_on_pipe(void *arg) {
  char c;
  ssize_t n = read(*(int *)arg, &c, 1);
  (void)n;
  return NULL;
}

Test(resources, running_thread_adds_one_and_joining_gives_it_back) {
  int p[2];
  cr_assert_eq(pipe(p), 0);
  fv_resources a = now();
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, wait_on_pipe, &p[0]), 0);
  fv_resources b = now();
  cr_assert_eq(write(p[1], "x", 1), 1);
  cr_assert_eq(pthread_join(th, NULL), 0);
  fv_resources c;
  sc_error err = {{0}};
  cr_assert_eq(fv_resources_settled(&a, 2000, &c, &err), SC_OK, "%s", err.msg);
  close(p[0]);
  close(p[1]);
  cr_expect_eq(b.threads, a.threads + 1);
  cr_expect_eq(c.threads, a.threads);
  cr_expect_eq(b.fds, a.fds);
}

// Forks a child that names itself `name` (when not NULL), says so on a pipe and sleeps until
// killed; returns once it is named.
static pid_t sleeping_child(const char *name) {
  int p[2];
  cr_assert_eq(pipe(p), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    close(p[0]);
    if (name) prctl(PR_SET_NAME, name, 0, 0, 0);
    if (write(p[1], "r", 1) != 1) _exit(1);
    for (;;) pause();
  }
  close(p[1]);
  char c = 0;
  cr_assert_eq(read(p[0], &c, 1), 1);
  close(p[0]);
  return pid;
}

Test(resources, child_counts_while_alive_and_as_a_zombie_until_reaped) {
  fv_resources a = now();
  pid_t pid = sleeping_child(NULL);
  fv_resources b = now();
  cr_assert_eq(kill(pid, SIGKILL), 0);
  siginfo_t si;
  cr_assert_eq(waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT), 0); // a zombie, not reaped
  fv_resources c = now();
  cr_assert_eq(waitpid(pid, NULL, 0), pid);
  fv_resources d = now();
  cr_expect_eq(b.children, a.children + 1);
  cr_expect_eq(c.children, a.children + 1, "a zombie is still a child");
  cr_expect_eq(d.children, a.children);
  cr_expect_eq(b.fds, a.fds, "the child's pipe is closed again");
}

Test(resources, child_whose_name_holds_a_parenthesis_is_still_counted) {
  fv_resources a = now();
  // Read up to the first ')', this stat line would say state R, parent 1.
  pid_t pid = sleeping_child("x) R 1 (y");
  fv_resources b = now();
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  cr_expect_eq(b.children, a.children + 1);
}
