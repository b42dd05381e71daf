// The results database (reports/store.c): every table round-trips through the writer and is
// read back by SQL; files that are not ours or too new are refused with the reason; many runs
// share one file; a writer killed with SIGKILL mid-run leaves a consistent file with the run
// shown as incomplete; and `shardcheck runs` lists what is there.
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "reports/query.h"
#include "reports/store.h"
#include "tests/helpers.h"

// --- helpers

// A fresh database path in a new temporary directory (static buffer per call slot).
static const char *db_path(const char *tag) {
  static char bufs[4][512];
  static int slot;
  const char *d = sc_test_tmpdir(tag);
  cr_assert_not_null(d);
  char *b = bufs[slot++ % 4];
  snprintf(b, 512, "%s/results.db", d);
  return b;
}

// Every row of sql as "c1|c2|...", rows separated by ';', NULL as "NULL" (static buffer).
static const char *q(sqlite3 *db, const char *sql) {
  static char out[8192];
  out[0] = 0;
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  cr_assert_eq(rc, SQLITE_OK, "%s: %s", sql, sqlite3_errmsg(db));
  size_t n = 0;
  bool first_row = true;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (!first_row) n += (size_t)snprintf(out + n, sizeof out - n, ";");
    first_row = false;
    for (int c = 0; c < sqlite3_column_count(st); c++) {
      const char *v = (const char *)sqlite3_column_text(st, c);
      n += (size_t)snprintf(out + n, sizeof out - n, "%s%s", c ? "|" : "", v ? v : "NULL");
      cr_assert_lt(n, sizeof out);
    }
  }
  cr_assert_eq(rc, SQLITE_DONE, "%s: %s", sql, sqlite3_errmsg(db));
  sqlite3_finalize(st);
  return out;
}

static void expect_q(sqlite3 *db, const char *sql, const char *want) {
  const char *got = q(db, sql);
  cr_expect_str_eq(got, want, "%s\n  got:  %s\n  want: %s", sql, got, want);
}

static store *open_rw(const char *path) {
  store *s = NULL;
  sc_error err = {{0}};
  cr_assert_eq(store_open(path, &s, &err), SC_OK, "%s", err.msg);
  cr_assert_not_null(s);
  return s;
}

static int64_t begin_run(store *s, const char *scenario, uint64_t seed) {
  store_run r = {.scenario = scenario,
                 .scenario_text = "name: x\n",
                 .mode = "sim",
                 .backend = "sim",
                 .model = "llama-tiny",
                 .git_rev = getenv("SHARDCHECK_GIT_REV"), // found by the caller, as the CLI does
                 .seed = seed};
  int64_t id = 0;
  sc_error err = {{0}};
  cr_assert_eq(store_run_begin(s, &r, &id, &err), SC_OK, "%s", err.msg);
  cr_assert_gt(id, 0);
  return id;
}

static char host_name[256];
static const char *this_host(void) {
  if (gethostname(host_name, sizeof host_name) != 0) host_name[0] = 0;
  host_name[sizeof host_name - 1] = 0;
  return host_name;
}

// --- round trip

Test(store, round_trip_keeps_every_column_of_every_table) {
  const char *path = db_path("store-rt");
  store *s = open_rw(path);
  sc_error err = {{0}};
  store_run r = {.scenario = "rt",
                 .scenario_path = "scenarios/rt.yaml",
                 .scenario_text = "name: rt\nseed: 7\n",
                 .mode = "sim",
                 .backend = "sim",
                 .model = "llama3-8b",
                 .config = "{\"block_size\":16}",
                 .git_rev = "abc1234",
                 .seed = 7};
  int64_t run = 0, dep = 0, ph1 = 0, ph2 = 0, rq1 = 0, rq2 = 0, f1 = 0, f2 = 0;
  cr_assert_eq(store_run_begin(s, &r, &run, &err), SC_OK, "%s", err.msg);
  store_deployment d = {.run_id = run, .idx = 0, .tp = 2, .pp = 1, .dp = 2, .start_ns = 100};
  cr_assert_eq(store_deployment_begin(s, &d, &dep, &err), SC_OK, "%s", err.msg);
  store_phase p1 = {.run_id = run, .deployment_id = dep, .idx = 0, .name = "ramp c=4",
                    .kind = "ramp", .concurrency = 4, .start_ns = 100, .warmup_end_ns = 1000};
  store_phase p2 = {.run_id = run, .deployment_id = dep, .idx = 1, .name = "rate 2.5",
                    .kind = "rate", .rate = 2.5, .arrival = "poisson", .start_ns = 4000,
                    .warmup_end_ns = 4000};
  cr_assert_eq(store_phase_begin(s, &p1, &ph1, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(store_phase_begin(s, &p2, &ph2, &err), SC_OK, "%s", err.msg);

  store_request q1 = {.run_id = run, .deployment_id = dep, .phase_id = ph1, .seq = 0,
                      .class_name = "short", .replica = 1, .prompt_tokens = 64,
                      .max_tokens = 3, .output_tokens = 3, .arrival_ns = 120,
                      .dispatch_ns = 150, .first_token_ns = 2000, .finish_ns = 3000,
                      .has_dispatch = true, .has_first_token = true, .has_finish = true,
                      .status = "ok", .reason = "length"};
  const uint64_t toks[3] = {2000, 2500, 3000};
  cr_assert_eq(store_request_add(s, &q1, toks, 3, &rq1, &err), SC_OK, "%s", err.msg);
  store_request q2 = {.run_id = run, .deployment_id = dep, .phase_id = ph2, .seq = 1,
                      .replica = -1, .prompt_tokens = 4096, .max_tokens = 256,
                      .arrival_ns = 4100, .status = "failed", .reason = "oom",
                      .error = "out of KV blocks", .retries = 2, .warmup = true,
                      .weight_version = 1};
  cr_assert_eq(store_request_add(s, &q2, NULL, 0, &rq2, &err), SC_OK, "%s", err.msg);
  cr_assert_gt(rq2, rq1);

  store_step st1 = {.run_id = run, .deployment_id = dep, .replica = 1, .t_ns = 1500,
                    .duration_ns = 400, .seqs = 2, .prefill_tokens = 64, .decode_tokens = 1,
                    .preempted = 0, .queue_len = 3, .running = 2, .kv_used = 5, .kv_total = 100};
  store_step st2 = {.run_id = run, .deployment_id = dep, .replica = 0, .t_ns = 2100,
                    .duration_ns = 300, .seqs = 1, .prefill_tokens = 0, .decode_tokens = 1,
                    .preempted = 1, .queue_len = 0, .running = 1, .kv_used = 6, .kv_total = 100};
  cr_assert_eq(store_step_add(s, &st1, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(store_step_add(s, &st2, &err), SC_OK, "%s", err.msg);
  store_device_sample ds1 = {.run_id = run, .deployment_id = dep, .replica = 0, .rank = 1,
                             .t_ns = 1000, .mem_used = 5000000000ull,
                             .mem_total = 80000000000ull, .link_bytes = -1};
  store_device_sample ds2 = ds1;
  ds2.t_ns = 2000;
  ds2.link_bytes = 12345;
  cr_assert_eq(store_device_sample_add(s, &ds1, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(store_device_sample_add(s, &ds2, &err), SC_OK, "%s", err.msg);
  store_fault fa1 = {.run_id = run, .kind = "clock_jump", .target = "host",
                     .injected_ns = 2200, .detected_ns = 2300, .has_detected = true,
                     .affected = -1};
  store_fault fa2 = {.run_id = run, .deployment_id = dep, .kind = "kill",
                     .target = "replica0.rank1",
                     .detail = "SIGKILL", .injected_ns = 2500, .detected_ns = 2600,
                     .recovered_ns = 3500, .has_detected = true, .has_recovered = true,
                     .affected = 3};
  cr_assert_eq(store_fault_add(s, &fa1, &f1, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(store_fault_add(s, &fa2, &f2, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(store_metric_add(s, run, dep, ph1, NULL, "ttft_p95_ms", 12.5, &err), SC_OK);
  cr_assert_eq(store_metric_add_note(s, run, dep, 0, "", "ttft_mean_ms", NAN,
                                     "no request completed", &err),
               SC_OK);
  cr_assert_eq(store_metric_add(s, run, dep, ph1, "short", "requests", 1, &err), SC_OK);
  cr_assert_eq(store_metric_add(s, run, 0, 0, NULL, "speedup", 1.75, &err), SC_OK);
  cr_assert_eq(store_verdict_add(s, run, dep, "ttft_p95_ms", "<=", 500, 12.5, true, NULL, &err),
               SC_OK);
  cr_assert_eq(store_verdict_add(s, run, dep, "error_rate", "<=", 0.01, NAN, false,
                                 "no data: no request was measured", &err),
               SC_OK);
  cr_assert_eq(store_phase_end(s, ph1, 3900, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(store_phase_end(s, ph2, 5000, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(store_deployment_end(s, dep, "complete", NULL, 5000, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(store_run_end(s, run, "complete", "fail", NULL, 5100, &err), SC_OK, "%s", err.msg);
  store_close(s);

  cr_assert_eq(store_open_readonly(path, &s, &err), SC_OK, "%s", err.msg);
  sqlite3 *db = store_db(s);
  char want[1024];
  expect_q(db, "PRAGMA journal_mode", "wal");
  expect_q(db, "SELECT key, value FROM meta", "schema_version|5");
  snprintf(want, sizeof want,
           "%lld|rt|scenarios/rt.yaml|name: rt\nseed: 7\n|sim|sim|llama3-8b|abc1234|%s|%d|7|"
           "{\"block_size\":16}|NULL|complete|fail|0|0",
           (long long)run, this_host(), (int)getpid());
  expect_q(db, "SELECT id, scenario, scenario_path, scenario_text, mode, backend, model, "
               "git_rev, host, pid, seed, config, error, status, verdict, ended_at IS NULL, "
               "baseline FROM run", want);
  expect_q(db, "SELECT duration_ns, started_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]"
               "T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]Z', ended_at >= started_at FROM run",
           "5100|1|1");
  snprintf(want, sizeof want, "%lld|%lld|0|tp2 pp1 dp2|2|1|2|4|100|5000|complete|NULL",
           (long long)dep, (long long)run);
  expect_q(db, "SELECT id, run_id, idx, label, tp, pp, dp, gpus, start_ns, end_ns, status, error "
               "FROM deployment", want);
  snprintf(want, sizeof want,
           "%lld|%lld|0|ramp c=4|ramp|4|NULL|NULL|100|1000|3900;"
           "%lld|%lld|1|rate 2.5|rate|NULL|2.5|poisson|4000|4000|5000",
           (long long)ph1, (long long)dep, (long long)ph2, (long long)dep);
  expect_q(db, "SELECT id, deployment_id, idx, name, kind, concurrency, rate, arrival, start_ns, "
               "warmup_end_ns, end_ns FROM phase ORDER BY idx", want);
  snprintf(want, sizeof want,
           "%lld|%lld|%lld|0|short|1|64|3|3|120|150|2000|3000|ok|length|NULL|0|0|0;"
           "%lld|%lld|%lld|1||NULL|4096|256|0|4100|NULL|NULL|NULL|failed|oom|out of KV blocks|"
           "2|1|1",
           (long long)rq1, (long long)dep, (long long)ph1, (long long)rq2, (long long)dep,
           (long long)ph2);
  expect_q(db, "SELECT id, deployment_id, phase_id, seq, class, replica, prompt_tokens, "
               "max_tokens, output_tokens, arrival_ns, dispatch_ns, first_token_ns, finish_ns, "
               "status, reason, error, retries, warmup, weight_version FROM request ORDER BY seq",
           want);
  snprintf(want, sizeof want, "%lld|0|2000;%lld|1|2500;%lld|2|3000", (long long)rq1,
           (long long)rq1, (long long)rq1);
  expect_q(db, "SELECT request_id, idx, t_ns FROM token ORDER BY request_id, idx", want);
  snprintf(want, sizeof want, "%lld|[2000,2500,3000]", (long long)rq1);
  expect_q(db, "SELECT request_id, t_ns FROM token_times", want);
  snprintf(want, sizeof want, "%lld|%lld|0|3", (long long)run, (long long)dep);
  expect_q(db, "SELECT run_id, deployment_id, second, tokens FROM token_second", want);
  expect_q(db, "SELECT id, replica, t_ns, duration_ns, seqs, prefill_tokens, decode_tokens, "
               "preempted, queue_len, running, kv_used, kv_total FROM step ORDER BY t_ns",
           "1|1|1500|400|2|64|1|0|3|2|5|100;2|0|2100|300|1|0|1|1|0|1|6|100");
  expect_q(db, "SELECT replica, rank, t_ns, mem_used, mem_total, link_bytes FROM device_sample "
               "ORDER BY t_ns",
           "0|1|1000|5000000000|80000000000|NULL;0|1|2000|5000000000|80000000000|12345");
  snprintf(want, sizeof want,
           "%lld|NULL|clock_jump|host|2200|2300|NULL|NULL|NULL;"
           "%lld|%lld|kill|replica0.rank1|2500|2600|3500|3|SIGKILL",
           (long long)f1, (long long)f2, (long long)dep);
  expect_q(db, "SELECT id, deployment_id, kind, target, injected_ns, detected_ns, recovered_ns, "
               "affected, detail FROM fault ORDER BY id", want);
  snprintf(want, sizeof want,
           "%lld|%lld||ttft_p95_ms|12.5|NULL;%lld|NULL||ttft_mean_ms|NULL|no request completed;"
           "%lld|%lld|short|requests|1.0|NULL;NULL|NULL||speedup|1.75|NULL",
           (long long)dep, (long long)ph1, (long long)dep, (long long)dep, (long long)ph1);
  expect_q(db, "SELECT deployment_id, phase_id, class, name, value, note FROM metric "
               "ORDER BY rowid",
           want);
  expect_q(db, "SELECT slo, op, expected, actual, pass, note FROM verdict ORDER BY id",
           "ttft_p95_ms|<=|500.0|12.5|1|NULL;"
           "error_rate|<=|0.01|NULL|0|no data: no request was measured");
  snprintf(want, sizeof want, "%lld", (long long)run);
  expect_q(db, "SELECT DISTINCT run_id FROM (SELECT run_id FROM deployment UNION ALL SELECT "
               "run_id FROM phase UNION ALL SELECT run_id FROM request UNION ALL SELECT run_id "
               "FROM step UNION ALL SELECT run_id FROM device_sample UNION ALL SELECT run_id FROM "
               "fault UNION ALL SELECT run_id FROM metric UNION ALL SELECT run_id FROM verdict)",
           want);
  store_run_row row;
  cr_assert_eq(store_run_get(s, run, &row, &err), SC_OK, "%s", err.msg);
  cr_expect_str_eq(row.scenario, "rt");
  cr_expect_str_eq(row.mode, "sim");
  cr_expect_str_eq(row.status, "complete");
  cr_expect_str_eq(row.verdict, "fail");
  cr_expect_str_eq(row.git_rev, "abc1234");
  cr_expect_eq(strlen(row.started_at), 20);
  cr_expect_not(row.baseline);
  store_close(s);
}

Test(store, writes_to_a_read_only_store_are_refused) {
  const char *path = db_path("store-ro");
  store *s = open_rw(path);
  store_close(s);
  sc_error err = {{0}};
  cr_assert_eq(store_open_readonly(path, &s, &err), SC_OK, "%s", err.msg);
  store_run r = {.scenario = "x", .scenario_text = "", .mode = "sim"};
  int64_t id = 0;
  cr_expect_eq(store_run_begin(s, &r, &id, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "read-only"), "%s", err.msg);
  store_close(s);
}

Test(store, bad_values_are_refused_with_the_reason) {
  const char *path = db_path("store-bad");
  store *s = open_rw(path);
  sc_error err = {{0}};
  int64_t run = begin_run(s, "bad", 1);
  cr_expect_eq(store_run_end(s, run, "done", NULL, NULL, 1, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "'done'"), "%s", err.msg);
  cr_expect_eq(store_run_end(s, run + 100, "complete", NULL, NULL, 1, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "no run"), "%s", err.msg);
  cr_expect_eq(store_verdict_add(s, run, 1, "ttft_p95_ms", "<", 500, 1, true, NULL, &err),
               SC_INVALID);
  // A request pointing at a phase that does not exist: the foreign key fails, nothing of it
  // (no request row, no tokens) stays, and the store keeps working. The savepoint's rollback
  // reads its sub-journal, which the writer keeps in memory (temp_store 2).
  expect_q(store_db(s), "PRAGMA temp_store", "2");
  store_request rq = {.run_id = run, .deployment_id = 42, .phase_id = 43, .status = "ok",
                      .replica = 0};
  const uint64_t t[2] = {1, 2};
  cr_expect_eq(store_request_add(s, &rq, t, 2, NULL, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "inserting a request row") && strstr(err.msg, "FOREIGN KEY"), "%s",
            err.msg);
  cr_expect(strstr(err.msg, path), "%s", err.msg);
  store_deployment d = {.run_id = run, .label = "one", .tp = 1, .pp = 1, .dp = 1};
  int64_t dep = 0, ph = 0;
  cr_assert_eq(store_deployment_begin(s, &d, &dep, &err), SC_OK, "%s", err.msg);
  store_phase p = {.run_id = run, .deployment_id = dep, .name = "p", .kind = "fixed",
                   .concurrency = 1};
  cr_assert_eq(store_phase_begin(s, &p, &ph, &err), SC_OK, "%s", err.msg);
  rq.deployment_id = dep;
  rq.phase_id = ph;
  cr_assert_eq(store_request_add(s, &rq, t, 2, NULL, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(store_flush(s, &err), SC_OK, "%s", err.msg);
  expect_q(store_db(s), "SELECT (SELECT count(*) FROM request), (SELECT count(*) FROM token)",
           "1|2");
  store_close(s);
}

// --- step blocks and token counts (schema version 5)

// A run with deployments dep[0..1] and a phase each (ph[0..1]) in a new file at path.
static store *file_with_two_deployments(const char *path, int64_t *run, int64_t dep[2],
                                        int64_t ph[2]) {
  store *s = open_rw(path);
  sc_error err = {{0}};
  *run = begin_run(s, "blocks", 1);
  for (int d = 0; d < 2; d++) {
    store_deployment sd = {.run_id = *run, .idx = d, .tp = 1, .pp = 1, .dp = 2};
    cr_assert_eq(store_deployment_begin(s, &sd, &dep[d], &err), SC_OK, "%s", err.msg);
    store_phase sp = {.run_id = *run, .deployment_id = dep[d], .name = "p", .kind = "fixed",
                      .concurrency = 1};
    cr_assert_eq(store_phase_begin(s, &sp, &ph[d], &err), SC_OK, "%s", err.msg);
  }
  return s;
}

static store_step step_of(int64_t run, int64_t dep, int i) {
  return (store_step){.run_id = run, .deployment_id = dep, .replica = i % 3,
                      .t_ns = (uint64_t)i * 1000, .duration_ns = (uint64_t)(i % 7) * 100,
                      .seqs = i % 5, .prefill_tokens = i, .decode_tokens = i % 11,
                      .preempted = i % 2, .queue_len = i % 13, .running = i % 4,
                      .kv_used = i, .kv_total = 1000};
}

Test(store, steps_are_written_in_blocks_and_the_step_view_has_a_row_each_with_ids_in_write_order) {
  const char *path = db_path("store-blocks");
  int64_t run, dep[2], ph[2];
  store *s = file_with_two_deployments(path, &run, dep, ph);
  sc_error err = {{0}};
  // 700 rows: runs of one deployment, then alternating, in calls of 600 and of 1, and a
  // second connection's rows after the first's commit
  enum { N = 700 };
  static store_step rows[N];
  const store_step *ptrs[N];
  for (int i = 0; i < N; i++) {
    rows[i] = step_of(run, dep[i < 400 ? 0 : i % 2], i);
    ptrs[i] = &rows[i];
  }
  cr_assert_eq(store_steps_add(s, ptrs, 600, &err), SC_OK, "%s", err.msg);
  for (int i = 600; i < 650; i++) cr_assert_eq(store_step_add(s, ptrs[i], &err), SC_OK);
  store_close(s);
  s = open_rw(path);
  cr_assert_eq(store_steps_add(s, ptrs + 650, N - 650, &err), SC_OK, "%s", err.msg);
  sqlite3 *db = store_db(s);
  char want[64];
  snprintf(want, sizeof want, "%d|1|%d|%d", N, N, N);
  expect_q(db, "SELECT count(*), min(id), max(id), count(DISTINCT id) FROM step", want);
  // every row as written, its id its place in the writing order
  int bad = 0;
  sqlite3_stmt *st = NULL;
  cr_assert_eq(sqlite3_prepare_v2(db, "SELECT id, run_id, deployment_id, replica, t_ns, "
                                      "duration_ns, seqs, prefill_tokens, decode_tokens, "
                                      "preempted, queue_len, running, kv_used, kv_total FROM "
                                      "step ORDER BY id", -1, &st, NULL), SQLITE_OK);
  for (int i = 0; sqlite3_step(st) == SQLITE_ROW; i++) {
    const store_step *x = &rows[i];
    const int64_t want_row[14] = {i + 1, x->run_id, x->deployment_id, x->replica,
                                  (int64_t)x->t_ns, (int64_t)x->duration_ns, x->seqs,
                                  x->prefill_tokens, x->decode_tokens, x->preempted,
                                  x->queue_len, x->running, x->kv_used, x->kv_total};
    for (int c = 0; c < 14; c++) bad += sqlite3_column_int64(st, c) != want_row[c];
  }
  sqlite3_finalize(st);
  cr_expect_eq(bad, 0, "%d columns differ from what was written", bad);
  // blocks: runs of one deployment, at most 256 steps, ids consecutive, end the latest end
  expect_q(db, "SELECT count(*) FROM step_block WHERE n < 1 OR n > 256", "0");
  expect_q(db, "SELECT count(*) FROM step_block b WHERE b.end_ns != (SELECT max(t_ns + "
               "duration_ns) FROM step s WHERE s.id >= b.first_id AND s.id < b.first_id + b.n) "
               "OR b.n != json_array_length(b.steps)",
           "0");
  expect_q(db, "SELECT count(*) FROM step_block a JOIN step_block b ON b.first_id > a.first_id "
               "AND b.first_id < a.first_id + a.n", "0");
  store_close(s);
}

Test(store, token_second_counts_the_token_times_of_each_second_and_commits_with_them) {
  const char *path = db_path("store-tsec");
  int64_t run, dep[2], ph[2];
  store *s = file_with_two_deployments(path, &run, dep, ph);
  sc_error err = {{0}};
  const int64_t S = STORE_NS_PER_SECOND;
  const uint64_t t1[5] = {S / 2, S - 1, S, 3 * S + 7, 3 * S + 8}; // seconds 0, 0, 1, 3, 3
  const uint64_t t2[3] = {S + 5, 2 * S, 9 * S};                    // seconds 1, 2, 9
  store_request q = {.run_id = run, .deployment_id = dep[0], .phase_id = ph[0], .class_name = "",
                     .replica = 0, .output_tokens = 5, .status = "ok"};
  cr_assert_eq(store_request_add(s, &q, t1, 5, NULL, &err), SC_OK, "%s", err.msg);
  q.seq = 1;
  q.output_tokens = 3;
  cr_assert_eq(store_request_add(s, &q, t2, 3, NULL, &err), SC_OK, "%s", err.msg);
  q.deployment_id = dep[1];
  q.phase_id = ph[1];
  cr_assert_eq(store_request_add(s, &q, t2, 3, NULL, &err), SC_OK, "%s", err.msg);
  // a request whose row is refused (no such phase) counts nothing
  q.phase_id = ph[1] + 100;
  cr_assert_neq(store_request_add(s, &q, t2, 3, NULL, &err), SC_OK);
  // nothing is committed before the flush; then the counts are there with the rows
  char other[64];
  snprintf(other, sizeof other, "%s", sc_test_q1s(path, "SELECT count(*) FROM token_second"));
  cr_expect_str_eq(other, "0");
  cr_assert_eq(store_flush(s, &err), SC_OK, "%s", err.msg);
  char want[256];
  snprintf(want, sizeof want, "%lld|0|2;%lld|1|2;%lld|2|1;%lld|3|2;%lld|9|1;%lld|1|1;%lld|2|1;"
           "%lld|9|1", (long long)dep[0], (long long)dep[0], (long long)dep[0],
           (long long)dep[0], (long long)dep[0], (long long)dep[1], (long long)dep[1],
           (long long)dep[1]);
  expect_q(store_db(s), "SELECT deployment_id, second, tokens FROM token_second ORDER BY "
                        "deployment_id, second", want);
  // more tokens in a second already counted add to it, in a later transaction
  q.phase_id = ph[1];
  q.seq = 2;
  q.output_tokens = 1;
  cr_assert_eq(store_request_add(s, &q, t2 + 2, 1, NULL, &err), SC_OK, "%s", err.msg);
  store_close(s);
  char got[32];
  snprintf(got, sizeof got, "%s", sc_test_q1s(path, "SELECT tokens FROM token_second WHERE "
                                                    "second = 9 ORDER BY deployment_id DESC"));
  cr_expect_str_eq(got, "2");
  snprintf(got, sizeof got, "%s", sc_test_q1s(path, "SELECT count(*) FROM (SELECT r.run_id, "
                                                    "r.deployment_id, t.t_ns / 1000000000 AS "
                                                    "second, count(*) AS tokens FROM token t "
                                                    "JOIN request r ON r.id = t.request_id GROUP "
                                                    "BY 1, 2, 3 EXCEPT SELECT * FROM "
                                                    "token_second)"));
  cr_expect_str_eq(got, "0", "the counts are those of the token view");
}

Test(store, a_version_4_files_steps_become_blocks_with_their_ids_and_its_tokens_are_counted) {
  const char *path = db_path("store-v4");
  int64_t run, dep[2], ph[2];
  store *s = file_with_two_deployments(path, &run, dep, ph);
  sc_error err = {{0}};
  enum { N = 600 };
  static store_step rows[N];
  const store_step *ptrs[N];
  for (int i = 0; i < N; i++) {
    rows[i] = step_of(run, dep[i < 300 ? 0 : i % 2], i);
    ptrs[i] = &rows[i];
  }
  cr_assert_eq(store_steps_add(s, ptrs, N, &err), SC_OK, "%s", err.msg);
  const uint64_t t[3] = {10, STORE_NS_PER_SECOND + 1, STORE_NS_PER_SECOND + 2};
  store_request q = {.run_id = run, .deployment_id = dep[1], .phase_id = ph[1], .class_name = "",
                     .replica = 0, .output_tokens = 3, .status = "ok"};
  cr_assert_eq(store_request_add(s, &q, t, 3, NULL, &err), SC_OK, "%s", err.msg);
  store_close(s);
  sc_test_exec(path, sc_test_v4_sql);
  sc_test_exec(path, "DELETE FROM step WHERE id IN (7, 350)"); // gaps in the ids
  char before[64];
  snprintf(before, sizeof before, "%s", sc_test_q1s(path, "SELECT count(*) || ' ' || "
                                                          "sum(id * (t_ns + kv_used + replica + "
                                                          "deployment_id)) FROM step"));
  // read as it is
  cr_assert_eq(store_open_readonly(path, &s, &err), SC_OK, "%s", err.msg);
  expect_q(store_db(s), "SELECT type FROM sqlite_master WHERE name = 'step'", "table");
  store_close(s);
  // migrated when opened for writing
  s = open_rw(path);
  sqlite3 *db = store_db(s);
  expect_q(db, "SELECT value FROM meta WHERE key = 'schema_version'", "5");
  expect_q(db, "SELECT type FROM sqlite_master WHERE name = 'step'", "view");
  expect_q(db, "SELECT count(*) FROM sqlite_master WHERE name IN ('step_v4', "
               "'step_by_deployment')", "0");
  expect_q(db, "SELECT count(*) || ' ' || sum(id * (t_ns + kv_used + replica + deployment_id)) "
               "FROM step", before);
  expect_q(db, "SELECT count(*) FROM step_block b WHERE n > 256 OR b.end_ns != (SELECT "
               "max(t_ns + duration_ns) FROM step s WHERE s.id >= b.first_id AND s.id < "
               "b.first_id + b.n)", "0");
  expect_q(db, "SELECT second, tokens FROM token_second", "0|1;1|2");
  // the next step takes the id after the last
  store_step x = step_of(run, dep[0], 1);
  cr_assert_eq(store_step_add(s, &x, &err), SC_OK, "%s", err.msg);
  expect_q(db, "SELECT max(id), count(*) FROM step", "601|599");
  store_close(s);
}

// --- refusing files

// A file of this schema with one request of three tokens, recorded out of index order in the
// version 3 table below; its path.
static const char *file_with_tokens(const char *tag) {
  const char *path = db_path(tag);
  store *s = open_rw(path);
  sc_error err = {{0}};
  int64_t run = 0, dep = 0, ph = 0;
  store_run r = {.scenario = "m", .scenario_text = "name: m\n", .mode = "sim", .seed = 1};
  cr_assert_eq(store_run_begin(s, &r, &run, &err), SC_OK, "%s", err.msg);
  store_deployment d = {.run_id = run, .label = "one", .tp = 1, .pp = 1, .dp = 1};
  cr_assert_eq(store_deployment_begin(s, &d, &dep, &err), SC_OK, "%s", err.msg);
  store_phase p = {.run_id = run, .deployment_id = dep, .name = "p", .kind = "fixed",
                   .concurrency = 1};
  cr_assert_eq(store_phase_begin(s, &p, &ph, &err), SC_OK, "%s", err.msg);
  uint64_t t[3] = {10, 20, 30};
  store_request rq = {.run_id = run, .deployment_id = dep, .phase_id = ph, .seq = 0,
                      .class_name = "", .replica = 0, .prompt_tokens = 1, .max_tokens = 3,
                      .output_tokens = 3, .status = "ok"};
  cr_assert_eq(store_request_add(s, &rq, t, 3, NULL, &err), SC_OK, "%s", err.msg);
  store_close(s);
  return path;
}

Test(store, a_version_1_file_is_migrated_when_opened_for_writing) {
  const char *path = file_with_tokens("migrate");
  store *s = NULL;
  sc_error err = {{0}};
  sc_test_exec(path, sc_test_v4_sql);
  sc_test_exec(path, "ALTER TABLE run DROP COLUMN repeat_group; ALTER TABLE run DROP COLUMN "
                     "repeat_index; DROP TABLE fault_window; UPDATE meta SET value = '1' "
                     "WHERE key = 'schema_version'");
  sc_test_exec(path, sc_test_token_table_v3_sql);
  cr_assert_eq(store_open_readonly(path, &s, &err), SC_OK, "%s", err.msg); // read as it is
  expect_q(store_db(s), "SELECT type FROM sqlite_master WHERE name = 'token'", "table");
  store_close(s);
  cr_assert_eq(store_open(path, &s, &err), SC_OK, "%s", err.msg);
  sqlite3 *db = store_db(s);
  expect_q(db, "SELECT value FROM meta WHERE key = 'schema_version'", "5");
  expect_q(db, "SELECT count(*) FROM pragma_table_info('run') WHERE name IN ('repeat_group', "
               "'repeat_index')", "2");
  expect_q(db, "SELECT count(*) FROM sqlite_master WHERE name = 'fault_window'", "1");
  expect_q(db, "SELECT count(*) FROM sqlite_master WHERE name LIKE 'capacity%'", "3");
  expect_q(db, "SELECT idx, t_ns FROM token ORDER BY idx", "0|10;1|20;2|30");
  store_close(s);
}

Test(store, a_version_2_file_gets_the_capacity_tables_when_opened_for_writing) {
  const char *path = file_with_tokens("migrate2");
  store *s = NULL;
  sc_error err = {{0}};
  sc_test_exec(path, sc_test_v4_sql);
  sc_test_exec(path, "DROP TABLE capacity_point; DROP TABLE capacity_layout; DROP TABLE "
                     "capacity; UPDATE meta SET value = '2' WHERE key = 'schema_version'");
  sc_test_exec(path, sc_test_token_table_v3_sql);
  cr_assert_eq(store_open_readonly(path, &s, &err), SC_OK, "%s", err.msg); // read as it is
  expect_q(store_db(s), "SELECT value FROM meta WHERE key = 'schema_version'", "2");
  store_close(s);
  cr_assert_eq(store_open(path, &s, &err), SC_OK, "%s", err.msg);
  expect_q(store_db(s), "SELECT value FROM meta WHERE key = 'schema_version'", "5");
  expect_q(store_db(s), "SELECT count(*) FROM sqlite_master WHERE name LIKE 'capacity%'", "3");
  expect_q(store_db(s), "SELECT count(*) FROM pragma_table_info('capacity_layout') WHERE name "
                        "IN ('max_rate_lo', 'max_rate_hi', 'error')", "3");
  store_close(s);
}

// Version 4's capacity tables (no interval): read as they are, each layout's bounds its
// prediction; opened for writing, they gain the interval's columns, the old points bound 0.
Test(store, a_version_4_files_capacity_tables_gain_the_interval_when_opened_for_writing) {
  const char *path = file_with_tokens("migrate4");
  store *s = NULL;
  sc_error err = {{0}};
  cr_assert_eq(store_open(path, &s, &err), SC_OK, "%s", err.msg);
  store_cap_search cs = {.scenario = "c", .record = "summary", .target_rate = 1, .rate_lo = 1,
                         .rate_hi = 2, .best = 0, .runner_up = -1, .served = true, .note = "n"};
  store_cap_layout l = {.kind = "h100-sxm", .tp = 1, .pp = 1, .dp = 1, .gpus = 1, .label = "tp1",
                        .cost_per_hour = 1, .max_rate = 1.5, .output_tok_s = 10,
                        .cost_per_mtok = 1, .max_rate_lo = 1.2, .max_rate_hi = 1.8, .error = 0.2};
  store_cap_point p = {.layout = 0, .rate = 1.5, .pass = true, .ttft_p95_ms = 1, .tpot_p95_ms = 1,
                       .e2el_p95_ms = 1, .output_tok_s = 10, .error_rate = 0, .bound = -1};
  int64_t id = 0;
  cr_assert_eq(store_capacity_add(s, &cs, &l, 1, &p, 1, &id, &err), SC_OK, "%s", err.msg);
  store_close(s);
  sc_test_exec(path, sc_test_v4_sql);
  cr_assert_eq(store_open_readonly(path, &s, &err), SC_OK, "%s", err.msg);
  rq_capacity c;
  cr_assert_eq(rq_capacity_load(store_db(s), id, &c, &err), SC_OK, "%s", err.msg);
  cr_expect(c.n_layouts == 1 && c.layouts[0].max_rate_lo == 1.5 && c.layouts[0].error == 0,
            "no interval: the bounds are the prediction");
  cr_expect(c.n_points == 1 && c.points[0].bound == 0);
  rq_capacity_free(&c);
  store_close(s);
  cr_assert_eq(store_open(path, &s, &err), SC_OK, "%s", err.msg);
  expect_q(store_db(s), "SELECT value FROM meta WHERE key = 'schema_version'", "5");
  expect_q(store_db(s), "SELECT bound FROM capacity_point", "0");
  expect_q(store_db(s), "SELECT count(*) FROM capacity_layout WHERE max_rate_lo IS NULL", "1");
  store_close(s);
}

Test(store, a_version_3_files_token_rows_become_one_array_per_request_in_index_order) {
  const char *path = file_with_tokens("migrate3");
  sc_test_exec(path, sc_test_v4_sql);
  sc_test_exec(path, "UPDATE meta SET value = '3' WHERE key = 'schema_version'");
  sc_test_exec(path, sc_test_token_table_v3_sql);
  // A second request whose rows went in out of index order, and one with none.
  sc_test_exec(path, "INSERT INTO request(run_id, deployment_id, phase_id, seq, class, "
                     "prompt_tokens, max_tokens, output_tokens, arrival_ns, status) "
                     "SELECT run_id, deployment_id, phase_id, seq + 1, '', 1, 3, 3, 0, 'ok' "
                     "FROM request UNION ALL SELECT run_id, deployment_id, phase_id, seq + 2, "
                     "'', 1, 3, 0, 0, 'failed' FROM request");
  sc_test_exec(path, "INSERT INTO token SELECT r.id, 2, 7 FROM request r WHERE r.seq = 1; "
                     "INSERT INTO token SELECT r.id, 0, 5 FROM request r WHERE r.seq = 1; "
                     "INSERT INTO token SELECT r.id, 1, 6 FROM request r WHERE r.seq = 1");
  store *s = NULL;
  sc_error err = {{0}};
  cr_assert_eq(store_open_readonly(path, &s, &err), SC_OK, "%s", err.msg); // read as it is
  expect_q(store_db(s), "SELECT r.seq, t.idx, t.t_ns FROM token t JOIN request r ON r.id = "
                        "t.request_id ORDER BY r.seq, t.idx", "0|0|10;0|1|20;0|2|30;1|0|5;1|1|6;1|2|7");
  store_close(s);
  cr_assert_eq(store_open(path, &s, &err), SC_OK, "%s", err.msg);
  sqlite3 *db = store_db(s);
  expect_q(db, "SELECT value FROM meta WHERE key = 'schema_version'", "5");
  expect_q(db, "SELECT type FROM sqlite_master WHERE name = 'token'", "view");
  expect_q(db, "SELECT r.seq, tt.t_ns FROM token_times tt JOIN request r ON r.id = "
               "tt.request_id ORDER BY r.seq", "0|[10,20,30];1|[5,6,7]");
  expect_q(db, "SELECT r.seq, t.idx, t.t_ns FROM token t JOIN request r ON r.id = "
               "t.request_id ORDER BY r.seq, t.idx", "0|0|10;0|1|20;0|2|30;1|0|5;1|1|6;1|2|7");
  store_close(s);
  // Opened again, nothing is left to do.
  cr_assert_eq(store_open(path, &s, &err), SC_OK, "%s", err.msg);
  expect_q(store_db(s), "SELECT count(*) FROM token_times", "2");
  store_close(s);
}

Test(store, a_version_4_file_gains_the_notes_and_the_window_grouping) {
  const char *path = file_with_tokens("migrate4");
  sc_test_exec(path, sc_test_v4_sql);
  sc_test_exec(path, "INSERT INTO metric(run_id, name, value) VALUES(1, 'requests', 1); "
                     "UPDATE meta SET value = '4' WHERE key = 'schema_version'");
  store *s = NULL;
  sc_error err = {{0}};
  cr_assert_eq(store_open_readonly(path, &s, &err), SC_OK, "%s", err.msg); // read as it is
  expect_q(store_db(s), "SELECT count(*) FROM pragma_table_info('metric') WHERE name = 'note'",
           "0");
  store_close(s);
  cr_assert_eq(store_open(path, &s, &err), SC_OK, "%s", err.msg);
  sqlite3 *db = store_db(s);
  expect_q(db, "SELECT value FROM meta WHERE key = 'schema_version'", "5");
  expect_q(db, "SELECT (SELECT count(*) FROM pragma_table_info('metric') WHERE name = 'note') + "
               "(SELECT count(*) FROM pragma_table_info('verdict') WHERE name = 'note') + "
               "(SELECT count(*) FROM pragma_table_info('fault_window') WHERE name = 'by')",
           "3");
  expect_q(db, "SELECT name, value, note IS NULL FROM metric", "requests|1.0|1");
  store_close(s);
}

Test(store, schema_version_newer_than_the_binary_is_refused) {
  const char *path = db_path("store-new");
  store_close(open_rw(path));
  sc_test_exec(path, "UPDATE meta SET value = '99' WHERE key = 'schema_version'");
  store *s = (store *)1;
  sc_error err = {{0}};
  char want[640];
  snprintf(want, sizeof want, "%s has schema version 99, newer than this shardcheck (%d)", path,
           store_schema_version);
  cr_expect_eq(store_open(path, &s, &err), SC_INVALID);
  cr_expect_null(s);
  cr_expect_str_eq(err.msg, want);
  err.msg[0] = 0;
  cr_expect_eq(store_open_readonly(path, &s, &err), SC_INVALID);
  cr_expect_str_eq(err.msg, want);
}

Test(store, a_file_that_is_not_sqlite_is_refused_and_left_alone) {
  const char *path = db_path("store-junk");
  unsigned char junk[4096];
  unsigned x = 12345;
  for (size_t i = 0; i < sizeof junk; i++) {
    x = x * 1103515245u + 12345u;
    junk[i] = (unsigned char)(x >> 16);
  }
  cr_assert_eq(sc_test_write_file(path, junk, sizeof junk), 0);
  store *s = NULL;
  sc_error err = {{0}};
  cr_expect_eq(store_open(path, &s, &err), SC_INVALID);
  cr_expect_null(s);
  cr_expect(strstr(err.msg, "is not a shardcheck results database") &&
                strstr(err.msg, "file is not a database") && strstr(err.msg, path),
            "%s", err.msg);
  cr_expect_eq(store_open_readonly(path, &s, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "is not a shardcheck results database"), "%s", err.msg);
  unsigned char back[sizeof junk + 1]; // room for one byte more than was written
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f);
  cr_expect_eq(fread(back, 1, sizeof back, f), sizeof junk);
  fclose(f);
  cr_expect_eq(memcmp(back, junk, sizeof junk), 0, "the file was modified");
}

Test(store, a_database_of_another_program_is_refused_and_left_alone) {
  const char *path = db_path("store-other");
  char want[640];
  snprintf(want, sizeof want, "%s is not a shardcheck results database", path);
  store *s = NULL;
  sc_error err = {{0}};
  sc_test_exec(path, "CREATE TABLE notes(id INTEGER PRIMARY KEY, x TEXT)");
  cr_expect_eq(store_open(path, &s, &err), SC_INVALID);
  cr_expect(strstr(err.msg, want) && strstr(err.msg, "no run table"), "%s", err.msg);
  sc_test_exec(path, "CREATE TABLE run(id INTEGER PRIMARY KEY, x TEXT)");
  cr_expect_eq(store_open(path, &s, &err), SC_INVALID);
  cr_expect(strstr(err.msg, want) && strstr(err.msg, "no meta table"), "%s", err.msg);
  sc_test_exec(path, "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT)");
  cr_expect_eq(store_open(path, &s, &err), SC_INVALID);
  cr_expect(strstr(err.msg, want) && strstr(err.msg, "schema_version"), "%s", err.msg);
  cr_expect_eq(store_open_readonly(path, &s, &err), SC_INVALID);
  cr_expect(strstr(err.msg, want), "%s", err.msg);
  cr_expect_null(s);
  sqlite3 *db = NULL;
  cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  expect_q(db, "SELECT group_concat(name) FROM (SELECT name FROM sqlite_master "
               "WHERE type = 'table' ORDER BY name)",
           "meta,notes,run");
  expect_q(db, "PRAGMA journal_mode", "delete");
  sqlite3_close(db);
}

Test(store, read_only_open_of_a_missing_file_is_an_io_error_and_creates_nothing) {
  const char *path = db_path("store-missing");
  store *s = NULL;
  sc_error err = {{0}};
  cr_expect_eq(store_open_readonly(path, &s, &err), SC_IO);
  cr_expect_null(s);
  cr_expect(strstr(err.msg, path) && strstr(err.msg, "No such file"), "%s", err.msg);
  struct stat sb;
  cr_expect_neq(stat(path, &sb), 0, "store_open_readonly created %s", path);
}

// --- many runs

Test(store, many_runs_share_a_file_listed_newest_first_with_their_status) {
  const char *path = db_path("store-many");
  unsetenv("SHARDCHECK_GIT_REV");
  store *s = open_rw(path);
  sc_error err = {{0}};
  int64_t a = begin_run(s, "alpha", 1);
  cr_assert_eq(store_run_end(s, a, "complete", "pass", NULL, 10, &err), SC_OK, "%s", err.msg);
  int64_t b = begin_run(s, "beta", 2);
  cr_assert_eq(store_run_end(s, b, "failed", NULL, "device lost", 10, &err), SC_OK);
  store_close(s);

  // A second writer appends to the same file.
  s = open_rw(path);
  int64_t c = begin_run(s, "gamma", 3);
  cr_assert_eq(store_run_end(s, c, "interrupted", NULL, NULL, 10, &err), SC_OK);
  int64_t other_host = begin_run(s, "delta", 4);
  int64_t dead_pid = begin_run(s, "epsilon", 5);
  int64_t alive = begin_run(s, "zeta", 6); // this process: still running
  store_close(s);
  cr_assert(a < b && b < c && c < other_host && other_host < dead_pid && dead_pid < alive);

  pid_t child = fork();
  cr_assert_geq(child, 0);
  if (child == 0) _exit(0);
  cr_assert_eq(waitpid(child, NULL, 0), child);
  char sql[256];
  snprintf(sql, sizeof sql, "UPDATE run SET host = 'elsewhere.example' WHERE id = %lld; "
           "UPDATE run SET pid = %d WHERE id = %lld",
           (long long)other_host, (int)child, (long long)dead_pid);
  sc_test_exec(path, sql);

  cr_assert_eq(store_open_readonly(path, &s, &err), SC_OK, "%s", err.msg);
  store_run_row rows[8];
  cr_assert_eq(store_runs_list(s, rows, 8, &err), 6, "%s", err.msg);
  const char *names[] = {"zeta", "epsilon", "delta", "gamma", "beta", "alpha"};
  const char *statuses[] = {"running", "incomplete", "incomplete", "interrupted", "failed",
                            "complete"};
  const char *verdicts[] = {"", "", "", "", "", "pass"};
  for (int i = 0; i < 6; i++) {
    cr_expect_str_eq(rows[i].scenario, names[i]);
    cr_expect_str_eq(rows[i].status, statuses[i], "%s: %s", names[i], rows[i].status);
    cr_expect_str_eq(rows[i].verdict, verdicts[i]);
    cr_expect_str_eq(rows[i].mode, "sim");
    if (i) cr_expect_lt(rows[i].id, rows[i - 1].id);
  }
  // A smaller buffer gets the newest rows and the full count.
  store_run_row two[2];
  cr_expect_eq(store_runs_list(s, two, 2, &err), 6);
  cr_expect_str_eq(two[0].scenario, "zeta");
  cr_expect_str_eq(two[1].scenario, "epsilon");
  cr_expect_eq(store_runs_list(s, NULL, 0, &err), 6);
  store_run_row one;
  cr_expect_eq(store_run_get(s, 999, &one, &err), SC_INVALID);
  char want[640];
  snprintf(want, sizeof want, "no run 999 in %s", path);
  cr_expect_str_eq(err.msg, want);
  store_close(s);
}

// --- killed mid-run

enum { KILL_TOKENS = 16, KILL_FLUSH_EVERY = 300 };

// The child: writes requests (KILL_TOKENS tokens each) and a step per request forever,
// flushing every KILL_FLUSH_EVERY requests and then telling the parent how many are committed.
static _Noreturn void killed_writer(const char *path, int fd) {
  store *s = NULL;
  sc_error err = {{0}};
  if (store_open(path, &s, &err) != SC_OK) _exit(10);
  store_run r = {.scenario = "killed", .scenario_text = "name: killed\n", .mode = "sim",
                 .seed = 9};
  int64_t run = 0, dep = 0, ph = 0;
  if (store_run_begin(s, &r, &run, &err) != SC_OK) _exit(11);
  store_deployment d = {.run_id = run, .label = "tp1", .tp = 1, .pp = 1, .dp = 1};
  if (store_deployment_begin(s, &d, &dep, &err) != SC_OK) _exit(12);
  store_phase p = {.run_id = run, .deployment_id = dep, .name = "p", .kind = "fixed",
                   .concurrency = 8};
  if (store_phase_begin(s, &p, &ph, &err) != SC_OK) _exit(13);
  uint64_t t[KILL_TOKENS];
  for (int64_t i = 1; i <= 10000000; i++) {
    for (int k = 0; k < KILL_TOKENS; k++) t[k] = (uint64_t)(i * 1000 + k);
    store_request rq = {.run_id = run, .deployment_id = dep, .phase_id = ph, .seq = i,
                        .replica = 0, .prompt_tokens = 8, .max_tokens = KILL_TOKENS,
                        .output_tokens = KILL_TOKENS, .arrival_ns = (uint64_t)i * 1000,
                        .status = "ok"};
    store_step st = {.run_id = run, .deployment_id = dep, .t_ns = (uint64_t)i * 1000,
                     .duration_ns = 10, .seqs = 1, .decode_tokens = 1, .kv_total = 64};
    if (store_request_add(s, &rq, t, KILL_TOKENS, NULL, &err) != SC_OK) _exit(14);
    if (store_step_add(s, &st, &err) != SC_OK) _exit(15);
    if (i % KILL_FLUSH_EVERY == 0) {
      if (store_flush(s, &err) != SC_OK) _exit(16);
      if (write(fd, &i, sizeof i) != (ssize_t)sizeof i) _exit(17);
    }
  }
  _exit(18);
}

Test(store, sigkill_mid_run_leaves_a_consistent_file_with_the_run_incomplete) {
  const char *path = db_path("store-kill");
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  pid_t child = fork();
  cr_assert_geq(child, 0);
  if (child == 0) {
    close(fds[0]);
    killed_writer(path, fds[1]);
  }
  close(fds[1]);
  int64_t committed = 0;
  for (int k = 0; k < 3; k++)
    cr_assert_eq(read(fds[0], &committed, sizeof committed), (ssize_t)sizeof committed,
                 "the writer stopped early");
  cr_assert_eq(kill(child, SIGKILL), 0);
  int ws = 0;
  cr_assert_eq(waitpid(child, &ws, 0), child);
  close(fds[0]);
  cr_assert(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL, "the writer exited by itself (%d)", ws);

  store *s = NULL;
  sc_error err = {{0}};
  cr_assert_eq(store_open_readonly(path, &s, &err), SC_OK, "%s", err.msg);
  sqlite3 *db = store_db(s);
  expect_q(db, "PRAGMA integrity_check", "ok");
  expect_q(db, "PRAGMA foreign_key_check", "");
  expect_q(db, "SELECT scenario, status, ended_at, verdict FROM run", "killed|running|NULL|NULL");
  store_run_row row;
  cr_assert_eq(store_runs_list(s, &row, 1, &err), 1, "%s", err.msg);
  cr_expect_str_eq(row.status, "incomplete");
  int64_t requests = atoll(q(db, "SELECT count(*) FROM request"));
  cr_expect_geq(requests, committed, "%lld requests kept, %lld were flushed", (long long)requests,
                (long long)committed);
  // Requests, their tokens and the steps were committed together: nothing half-written.
  char want[128];
  snprintf(want, sizeof want, "%lld|%lld|%lld|0", (long long)requests * KILL_TOKENS,
           (long long)requests, (long long)requests);
  expect_q(db, "SELECT (SELECT count(*) FROM token), (SELECT count(*) FROM step), "
               "(SELECT max(seq) FROM request), (SELECT count(*) FROM request r WHERE "
               "(SELECT count(*) FROM token t WHERE t.request_id = r.id) != r.output_tokens)",
           want);
  store_close(s);
  // The file is still writable: a new run goes after the killed one.
  s = open_rw(path);
  begin_run(s, "after", 1);
  store_close(s);
}

// --- shardcheck runs

static char out[1 << 16];
static char args[2048];
#define ARGS(...) (snprintf(args, sizeof args, __VA_ARGS__), args)

// A database with three runs: complete+pass (baseline), failed, and one left running by a
// process that is gone.
static const char *cli_db(void) {
  const char *path = db_path("store-cli");
  setenv("SHARDCHECK_GIT_REV", "feedbee", 1);
  store *s = open_rw(path);
  sc_error err = {{0}};
  int64_t a = begin_run(s, "ramp-tp", 1);
  cr_assert_eq(store_run_end(s, a, "complete", "pass", NULL, 10, &err), SC_OK);
  int64_t b = begin_run(s, "kill-one-gpu", 2);
  cr_assert_eq(store_run_end(s, b, "failed", "fail", "boom", 10, &err), SC_OK);
  int64_t c = begin_run(s, "cancel-storm", 3);
  (void)c;
  store_close(s);
  sc_test_exec(path, "UPDATE run SET baseline = 1 WHERE scenario = 'ramp-tp'; "
                     "UPDATE run SET host = 'gone.example' WHERE scenario = 'cancel-storm'");
  return path;
}

Test(runs_cli, lists_runs_newest_first_with_status_verdict_and_baseline) {
  const char *path = cli_db();
  int rc = sc_test_run_cli(ARGS("runs --db '%s'", path), out, sizeof out);
  cr_assert_eq(rc, 0, "%s", out);
  cr_expect(strstr(out, "scenario") && strstr(out, "started (UTC)") && strstr(out, "verdict"),
            "%s", out);
  const char *c = strstr(out, "cancel-storm"), *k = strstr(out, "kill-one-gpu"),
             *r = strstr(out, "ramp-tp");
  cr_assert(c && k && r && c < k && k < r, "order:\n%s", out);
  cr_expect(strstr(c, "incomplete") && strstr(c, "incomplete") < k, "%s", out);
  cr_expect(strstr(k, "failed") && strstr(k, "fail ") < r, "%s", out);
  const char *eol = strchr(r, '\n');
  cr_assert_not_null(eol);
  char line[256];
  snprintf(line, sizeof line, "%.*s", (int)(eol - r), r);
  cr_expect(strstr(line, "complete") && strstr(line, "pass") && strstr(line, "feedbee") &&
                strstr(line, "yes"),
            "%s", line);
  cr_expect_null(strstr(out, "newest"), "no footer expected:\n%s", out);
}

Test(runs_cli, limit_shows_the_newest_and_says_how_many_exist) {
  const char *path = cli_db();
  int rc = sc_test_run_cli(ARGS("runs --db '%s' --limit 1", path), out, sizeof out);
  cr_assert_eq(rc, 0, "%s", out);
  cr_expect(strstr(out, "cancel-storm"), "%s", out);
  cr_expect_null(strstr(out, "ramp-tp"), "%s", out);
  cr_expect(strstr(out, "the newest 1 of 3 runs"), "%s", out);
  rc = sc_test_run_cli(ARGS("runs --db '%s' --limit -1", path), out, sizeof out);
  cr_expect_eq(rc, 2, "%s", out);
  cr_expect(strstr(out, "--limit"), "%s", out);
}

Test(runs_cli, json_lists_every_field) {
  const char *path = cli_db();
  int rc = sc_test_run_cli(ARGS("runs --db '%s' --json", path), out, sizeof out);
  cr_assert_eq(rc, 0, "%s", out);
  json_error_t je;
  json_t *o = json_loads(out, 0, &je);
  cr_assert_not_null(o, "%s\n%s", je.text, out);
  cr_expect_eq(json_integer_value(json_object_get(o, "total")), 3);
  json_t *runs = json_object_get(o, "runs");
  cr_assert_eq(json_array_size(runs), 3);
  json_t *newest = json_array_get(runs, 0), *oldest = json_array_get(runs, 2);
  cr_expect_str_eq(json_string_value(json_object_get(newest, "scenario")), "cancel-storm");
  cr_expect_str_eq(json_string_value(json_object_get(newest, "status")), "incomplete");
  cr_expect(json_is_null(json_object_get(newest, "verdict")));
  cr_expect_str_eq(json_string_value(json_object_get(oldest, "verdict")), "pass");
  cr_expect_str_eq(json_string_value(json_object_get(oldest, "git_rev")), "feedbee");
  cr_expect_str_eq(json_string_value(json_object_get(oldest, "mode")), "sim");
  cr_expect(json_is_true(json_object_get(oldest, "baseline")));
  cr_expect(json_is_false(json_object_get(newest, "baseline")));
  cr_expect_eq(json_integer_value(json_object_get(oldest, "id")), 1);
  cr_expect_eq(strlen(json_string_value(json_object_get(oldest, "started_at"))), 20);
  json_decref(o);
}

Test(runs_cli, empty_database_says_no_runs) {
  const char *path = db_path("store-cli-empty");
  store_close(open_rw(path));
  int rc = sc_test_run_cli(ARGS("runs --db '%s'", path), out, sizeof out);
  cr_expect_eq(rc, 0, "%s", out);
  char want[640];
  snprintf(want, sizeof want, "no runs in %s\n", path);
  cr_expect_str_eq(out, want);
}

Test(runs_cli, missing_or_foreign_files_exit_2_with_the_path) {
  const char *d = sc_test_tmpdir("store-cli-bad");
  cr_assert_not_null(d);
  int rc = sc_test_run_cli(ARGS("runs --db '%s/none.db'", d), out, sizeof out);
  cr_expect_eq(rc, 2, "%s", out);
  cr_expect(strstr(out, "none.db") && strstr(out, "No such file"), "%s", out);
  char junk[512];
  snprintf(junk, sizeof junk, "%s/junk.db", d);
  const char *text = "this is a text file, not a database; long enough to hold a header\n"
                     "..................................................................\n";
  cr_assert_eq(sc_test_write_file(junk, text, strlen(text)), 0);
  rc = sc_test_run_cli(ARGS("runs --db '%s'", junk), out, sizeof out);
  cr_expect_eq(rc, 2, "%s", out);
  cr_expect(strstr(out, "junk.db is not a shardcheck results database"), "%s", out);
  rc = sc_test_run_cli("runs --db", out, sizeof out);
  cr_expect_eq(rc, 2, "%s", out);
  rc = sc_test_run_cli("runs extra", out, sizeof out);
  cr_expect_eq(rc, 2, "%s", out);
}

Test(runs_cli, default_database_is_results_db_in_the_current_directory) {
  const char *d = sc_test_tmpdir("store-cli-default");
  cr_assert_not_null(d);
  cr_assert_eq(chdir(d), 0);
  int rc = sc_test_run_cli("runs", out, sizeof out);
  cr_expect_eq(rc, 2, "%s", out);
  cr_expect(strstr(out, "results.db"), "%s", out);
  store_close(open_rw("results.db"));
  rc = sc_test_run_cli("runs", out, sizeof out);
  cr_expect_eq(rc, 0, "%s", out);
  cr_expect_str_eq(out, "no runs in results.db\n");
}

Test(runs_cli, help_is_printed_to_stdout_with_exit_0) {
  int rc = sc_test_run_cli("runs --help", out, sizeof out);
  cr_expect_eq(rc, 0, "%s", out);
  sc_test_run_cli("runs --help 2>/dev/null | cat", out, sizeof out); // stdout only
  cr_expect(strstr(out, "usage: shardcheck runs") && strstr(out, "--db PATH") &&
                strstr(out, "--limit N") && strstr(out, "--json") && strstr(out, "incomplete"),
            "%s", out);
}
