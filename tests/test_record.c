// Recording levels (scenario key `record`, `shardcheck run --record`): what rows each level
// writes, that the metrics and verdicts are the same at every level, and the refusals.
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reports/report.h"
#include "reports/store.h"
#include "runner/runner.h"
#include "scenarios/scenario.h"
#include "tests/helpers.h"

static const char *BASE =
    "name: rec\n"
    "mode: sim\n"
    "model: {preset: llama3-8b}\n"
    "hardware: {profile: h100-sxm, gpus: 4}\n"
    "deployments: [{tp: 1, dp: 2}, {tp: 2, pp: 2}]\n"
    "workload:\n"
    "  prompts:\n"
    "    - {name: a, weight: 0.7, input: {uniform: [32, 600]}, output: {uniform: [8, 64]}}\n"
    "    - {name: b, weight: 0.3, input: 2000, output: 16}\n"
    "  phases:\n"
    "    - {ramp: {concurrency: [1, 8]}, hold: 2s}\n"
    "    - {name: burst, rate: 40, arrival: gamma, burstiness: 0.5, duration: 3s}\n"
    "limits: {max_running: 32}\n"
    "slo: {ttft_p95_ms: 500, tpot_p95_ms: 30, error_rate: 0}\n"
    "seed: 11\n";

// Runs BASE with `record: level` into db; returns the run id.
static int64_t run_at(store *db, const char *level) {
  char text[2048];
  snprintf(text, sizeof text, "%srecord: %s\n", BASE, level);
  sc_error err = {{0}};
  scenario *s = NULL;
  cr_assert_eq(scenario_parse(text, strlen(text), "t.yaml", ".", &s, &err), SC_OK, "%s", err.msg);
  runner_options o = runner_options_defaults();
  o.progress = RUNNER_PROGRESS_NONE;
  runner_result res;
  cr_assert_eq(runner_run(s, db, &o, &res, &err), SC_OK, "%s", err.msg);
  cr_assert_str_eq(res.status, "complete", "%s: %s", level, res.error);
  scenario_free(s);
  return res.run_id;
}

// Every row of sql (?1 = run) as text, one line per row (caller frees).
static char *rows(store *db, const char *sql, int64_t run) {
  sqlite3_stmt *st = NULL;
  cr_assert_eq(sqlite3_prepare_v2(store_db(db), sql, -1, &st, NULL), SQLITE_OK, "%s",
               sqlite3_errmsg(store_db(db)));
  sqlite3_bind_int64(st, 1, run);
  size_t cap = 1 << 16, len = 0;
  char *out = malloc(cap);
  out[0] = 0;
  while (sqlite3_step(st) == SQLITE_ROW)
    for (int c = 0; c < sqlite3_column_count(st); c++) {
      const char *v = (const char *)sqlite3_column_text(st, c);
      size_t need = len + (v ? strlen(v) : 4) + 2;
      while (need >= cap) out = realloc(out, cap *= 2);
      len += (size_t)sprintf(out + len, "%s%c", v ? v : "NULL",
                             c + 1 < sqlite3_column_count(st) ? '|' : '\n');
    }
  sqlite3_finalize(st);
  return out;
}

static long long count(store *db, const char *table, int64_t run) {
  char sql[256];
  if (!strcmp(table, "token"))
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM token t JOIN request r ON r.id = "
             "t.request_id WHERE r.run_id = ?1");
  else
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s WHERE run_id = ?1", table);
  char *t = rows(db, sql, run);
  long long n = atoll(t);
  free(t);
  return n;
}

Test(record, metrics_and_verdicts_are_identical_at_every_level) {
  char path[512];
  snprintf(path, sizeof path, "%s/r.db", sc_test_tmpdir("record-levels"));
  store *db = NULL;
  sc_error err = {{0}};
  cr_assert_eq(store_open(path, &db, &err), SC_OK, "%s", err.msg);
  int64_t run[3] = {run_at(db, "tokens"), run_at(db, "requests"), run_at(db, "summary")};
  static const char *const same[] = {
      "SELECT d.idx, p.idx, m.class, m.name, m.value FROM metric m "
      "LEFT JOIN deployment d ON d.id = m.deployment_id LEFT JOIN phase p ON p.id = m.phase_id "
      "WHERE m.run_id = ?1 ORDER BY d.idx, p.idx, m.class, m.name",
      "SELECT d.idx, v.slo, v.op, v.expected, v.actual, v.pass FROM verdict v "
      "JOIN deployment d ON d.id = v.deployment_id WHERE v.run_id = ?1 ORDER BY d.idx, v.slo",
      "SELECT d.idx, p.idx, p.name, p.start_ns, p.end_ns FROM phase p "
      "JOIN deployment d ON d.id = p.deployment_id WHERE p.run_id = ?1 ORDER BY d.idx, p.idx",
  };
  for (size_t q = 0; q < sizeof same / sizeof same[0]; q++) {
    char *t = rows(db, same[q], run[0]);
    cr_expect_gt(strlen(t), 0, "query %zu has rows", q);
    for (int k = 1; k < 3; k++) {
      char *o = rows(db, same[q], run[k]);
      cr_expect(strcmp(t, o) == 0, "query %zu: level %d differs from tokens", q, k);
      free(o);
    }
    free(t);
  }
  // the request rows of level requests are those of level tokens
  const char *req = "SELECT d.idx, r.seq, r.output_tokens, r.arrival_ns, r.first_token_ns, "
                    "r.finish_ns, r.status FROM request r JOIN deployment d ON "
                    "d.id = r.deployment_id WHERE r.run_id = ?1 ORDER BY d.idx, r.seq";
  char *ra = rows(db, req, run[0]), *rb = rows(db, req, run[1]);
  cr_expect(strcmp(ra, rb) == 0, "request rows differ between tokens and requests");
  free(ra);
  free(rb);
  // what each level writes
  cr_expect_gt(count(db, "token", run[0]), 0);
  cr_expect_gt(count(db, "step", run[0]), 0);
  cr_expect_gt(count(db, "request", run[1]), 0);
  cr_expect_eq(count(db, "token", run[1]), 0);
  cr_expect_eq(count(db, "step", run[1]), 0);
  cr_expect_gt(count(db, "device_sample", run[1]), 0);
  cr_expect_eq(count(db, "request", run[2]), 0);
  cr_expect_eq(count(db, "device_sample", run[2]), 0);
  char *cfg = rows(db, "SELECT config FROM run WHERE id = ?1", run[2]);
  cr_expect(strstr(cfg, "\"record\":\"summary\"") != NULL, "run.config names the level: %s", cfg);
  free(cfg);
  // the report is still written from a summary-only run
  report_result rr;
  report_options opt = {
      .out_dir = sc_test_tmpdir("record-report"), .run_ids = &run[2], .n_runs = 1};
  cr_expect_eq(report_write(store_db(db), &opt, &rr, &err), SC_OK, "%s", err.msg);
  store_close(db);
}

Test(record, a_bad_level_and_faults_below_tokens_exit_2_naming_them) {
  char out[4096];
  const char *sc = sc_test_write_tmp("record-cli", "q.yaml", BASE);
  char args[1200];
  snprintf(args, sizeof args, "run %s --record rows --no-report --db /dev/null", sc);
  cr_expect_eq(sc_test_run_cli_clean(args, out, sizeof out), 2, "%s", out);
  cr_expect(strstr(out, "--record") != NULL, "%s", out);
  char text[2048];
  snprintf(text, sizeof text, "%srecord: bytes\n", BASE);
  sc = sc_test_write_tmp("record-cli2", "b.yaml", text);
  snprintf(args, sizeof args, "validate %s", sc);
  cr_expect_eq(sc_test_run_cli_clean(args, out, sizeof out), 2, "%s", out);
  cr_expect(strstr(out, "b.yaml:16:") != NULL && strstr(out, "record") != NULL, "%s", out);
  snprintf(text, sizeof text,
           "%srecord: requests\nfaults:\n  - {at: 1s, kill: replica, "
           "target: replica1}\n",
           BASE);
  sc = sc_test_write_tmp("record-cli3", "f.yaml", text);
  snprintf(args, sizeof args, "validate %s", sc);
  cr_expect_eq(sc_test_run_cli_clean(args, out, sizeof out), 2, "%s", out);
  cr_expect(strstr(out, "f.yaml:16:") != NULL && strstr(out, "token rows") != NULL, "%s", out);
}
