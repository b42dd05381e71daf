// End-to-end tests of `shardcheck run`: the shipped scenarios, verdict exit codes, JUnit,
// request timeouts, Ctrl-C, runs without gnuplot, and scenarios this version refuses to run.
// Each test runs the real binary on the CPU backend and then reads the results database.
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "reports/query.h"
#include "reports/report.h"
#include "reports/store.h"
#include "runner/runner.h"
#include "scenarios/scenario.h"
#include "serving/replica.h"
#include "tests/helpers.h"

static char out[1 << 16];

// Runs the binary with args; returns its exit code, its output in `out`.
static int cli(const char *args) {
  return sc_test_run_cli_clean(args, out, sizeof out);
}

#define q1 sc_test_q1
#define q1s sc_test_q1s

static bool is_png(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  unsigned char sig[8] = {0};
  size_t n = fread(sig, 1, 8, f);
  fclose(f);
  return n == 8 && !memcmp(sig, "\x89PNG\r\n\x1a\n", 8);
}

static int count_substr(const char *path, const char *needle) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  int c = 0;
  for (const char *p = buf; (p = strstr(p, needle)); p += strlen(needle)) c++;
  return c;
}

// Writes a llama-tiny scenario with the given extra YAML into dir/name and returns its path.
static const char *tiny_scenario(const char *dir, const char *name, const char *body) {
  static char path[8][512];
  static int slot;
  char *p = path[slot++ % 8];
  snprintf(p, 512, "%s/%s", dir, name);
  char text[4096];
  snprintf(text, sizeof text, "name: %s\nmodel: llama-tiny\n%s", name, body);
  cr_assert_eq(sc_test_write_file(p, text, strlen(text)), 0);
  return p;
}

// --- the shipped scenarios
//
// They are real-time load tests (phases last seconds of wall time whatever the engine's speed),
// so they run in the optimized build. Under a sanitizer the engine is 10-50x slower and an
// open-loop phase overloads it into timeouts, which says nothing about the harness: there they
// are reported as skipped, and the short end-to-end tests below cover the runner's memory and
// thread safety.
// (SKIP_UNDER_SANITIZERS: tests/helpers.h)

Test(run, quickstart_end_to_end_fills_every_table_and_writes_every_plot, .timeout = 900) {
  SKIP_UNDER_SANITIZERS();
  const char *dir = sc_test_tmpdir("run-qs");
  char db[600], junit[600], rep[600];
  snprintf(db, sizeof db, "%s/results.db", dir);
  snprintf(junit, sizeof junit, "%s/junit.xml", dir);
  snprintf(rep, sizeof rep, "%s/report", dir);
  int rc = sc_test_run_scenario(out, sizeof out, SC_SOURCE_DIR "/scenarios/quickstart.yaml", db,
                                "--out %s --junit %s", rep, junit);
  cr_assert(rc == 0 || rc == 1, "exit %d: %s", rc, out);
  // the exit code is the verdict's
  const char *verdict = q1s(db, "SELECT verdict FROM run");
  cr_assert_str_eq(verdict, rc == 0 ? "pass" : "fail", "%s", out);
  cr_assert_str_eq(q1s(db, "SELECT status FROM run"), "complete");
  cr_assert(strstr(out, "verdict: "), "%s", out);
  // rows in every table (no faults in this scenario: the fault table stays empty)
  cr_assert_eq(q1(db, "SELECT count(*) FROM deployment WHERE status = 'complete'"), 5);
  cr_assert_eq(q1(db, "SELECT count(*) FROM phase WHERE end_ns IS NOT NULL"), 25);
  cr_assert_gt(q1(db, "SELECT count(*) FROM request"), 100);
  cr_assert_eq(q1(db, "SELECT count(*) FROM request WHERE status != 'ok'"), 0);
  cr_assert_eq(q1(db, "SELECT count(*) FROM token"),
               q1(db, "SELECT sum(output_tokens) FROM request"));
  cr_assert_gt(q1(db, "SELECT count(*) FROM step"), 100);
  cr_assert_gt(q1(db, "SELECT count(*) FROM device_sample"), 5);
  cr_assert_gt(q1(db, "SELECT count(*) FROM metric"), 500);
  cr_assert_eq(q1(db, "SELECT count(*) FROM verdict"), 5 * 6); // 5 deployments x 6 SLOs
  cr_assert_eq(q1(db, "SELECT count(*) FROM meta"), 1);
  // per-class rows exist (two prompt classes) and scaling rows for every deployment
  cr_assert_eq(q1(db, "SELECT count(DISTINCT class) FROM metric WHERE class != ''"), 2);
  cr_assert_eq(q1(db, "SELECT count(*) FROM metric WHERE name = 'efficiency' AND value > 0"), 5);
  // token times are what a client saw: ascending, none before its request's arrival
  cr_assert_eq(q1(db, "SELECT count(*) FROM token t JOIN request r ON r.id = t.request_id "
                      "WHERE t.t_ns < r.arrival_ns OR t.t_ns > r.finish_ns"),
               0);
  const char *plots[] = {"scaling", "ttft", "tpot_throughput", "timeline", "kv"};
  for (int i = 0; i < 5; i++) {
    char png[700], svg[700];
    snprintf(png, sizeof png, "%s/%s.png", rep, plots[i]);
    snprintf(svg, sizeof svg, "%s/%s.svg", rep, plots[i]);
    cr_assert_gt(sc_test_file_size(png), 1000, "%s", png);
    cr_assert(is_png(png), "%s", png);
    cr_assert_gt(sc_test_file_size(svg), 1000, "%s", svg);
  }
  char html[700];
  snprintf(html, sizeof html, "%s/index.html", rep);
  cr_assert_gt(count_substr(html, "ttft_p95_ms"), 0);
  cr_assert_eq(count_substr(junit, "<testcase "), 5 * 6); // one per deployment x SLO
  // every deployment's balance over its replicas, each replica's share in the note
  cr_assert_eq(q1(db, "SELECT count(*) FROM metric WHERE name = 'replica_imbalance' AND "
                      "phase_id IS NULL AND value >= 0 AND value <= 1"),
               5);
  cr_assert_eq(q1(db, "SELECT count(*) FROM metric WHERE name = 'replica_imbalance' AND "
                      "phase_id IS NULL AND note LIKE 'shares of requests%'"),
               2); // dp2, dp4
  cr_assert_eq(count_substr(junit, "<failure "), (int)q1(db, "SELECT count(*) FROM verdict "
                                                             "WHERE pass = 0"));
}

Test(run, concurrency_ramp_reports_the_knee_per_deployment, .timeout = 900) {
  SKIP_UNDER_SANITIZERS();
  const char *dir = sc_test_tmpdir("run-ramp");
  char db[600];
  snprintf(db, sizeof db, "%s/results.db", dir);
  int rc = sc_test_run_scenario(out, sizeof out, SC_SOURCE_DIR "/scenarios/concurrency-ramp.yaml",
                                db, "--out %s/report --quiet", dir);
  cr_assert(rc == 0 || rc == 1, "exit %d: %s", rc, out);
  cr_assert_eq(q1(db, "SELECT count(*) FROM phase"), 2 * 6);
  // the knee is stored for both deployments (NULL when no step meets the SLO)
  cr_assert_eq(q1(db, "SELECT count(*) FROM metric WHERE name = 'knee_concurrency' AND "
                      "phase_id IS NULL"),
               2);
  // TTFT p95 per ramp step, the input of the knee and of the TTFT plot
  cr_assert_eq(q1(db, "SELECT count(*) FROM metric m JOIN phase p ON p.id = m.phase_id "
                      "WHERE m.name = 'ttft_p95_ms' AND m.class = '' AND p.concurrency > 0"),
               12);
}

Test(run, mixed_prompts_reports_ttft_p95_per_prompt_class, .timeout = 900) {
  SKIP_UNDER_SANITIZERS();
  const char *dir = sc_test_tmpdir("run-mixed");
  char db[600];
  snprintf(db, sizeof db, "%s/results.db", dir);
  int rc = sc_test_run_scenario(out, sizeof out, SC_SOURCE_DIR "/scenarios/mixed-prompts.yaml", db,
                                "--out %s/report --quiet", dir);
  cr_assert(rc == 0 || rc == 1, "exit %d: %s", rc, out);
  // one TTFT p95 per class, and neither class was starved: every request of both completed
  cr_assert_eq(q1(db, "SELECT count(*) FROM metric WHERE name = 'ttft_p95_ms' AND phase_id IS "
                      "NULL AND class IN ('short', 'long') AND value > 0"),
               2);
  cr_assert_eq(q1(db, "SELECT count(*) FROM request WHERE status != 'ok'"), 0);
  cr_assert_gt(q1(db, "SELECT count(*) FROM request WHERE class = 'long'"), 0);
  // the classes contend in a queue: 10 users, 4 running
  cr_assert_gt(q1(db, "SELECT value FROM metric WHERE name = 'peak_queue' AND phase_id IS NULL"),
               0);
  cr_assert_eq(q1(db, "SELECT max(seqs) FROM step"), 4);
  // each class's own verdict
  cr_assert_eq(q1(db, "SELECT count(*) FROM verdict WHERE slo IN ('short:ttft_max_ms', "
                      "'long:ttft_max_ms')"),
               2);
  // the classes against each other: the slower class's TTFT p95 over the faster's
  cr_assert_eq(q1(db, "SELECT count(*) FROM metric m WHERE name = 'class_ttft_ratio' AND "
                      "phase_id IS NULL AND abs(value - (SELECT max(value) / min(value) FROM "
                      "metric WHERE name = 'ttft_p95_ms' AND phase_id IS NULL AND class != '')) "
                      "< 1e-9"),
               1);
}

Test(run, kv_pressure_preempts_and_resumes_with_the_same_greedy_outputs, .timeout = 300) {
  SKIP_UNDER_SANITIZERS();
  const char *dir = sc_test_tmpdir("run-kv-pressure");
  char db[600];
  snprintf(db, sizeof db, "%s/results.db", dir);
  int rc = sc_test_run_scenario(out, sizeof out, SC_SOURCE_DIR "/scenarios/kv-pressure.yaml", db,
                                "--no-report --quiet");
  cr_assert_eq(rc, 0, "exit %d: %s", rc, out);
  // both deployments preempted (the step rows say so, and the metric is their sum), the cache
  // filled, and every request completed
  cr_assert_eq(q1(db, "SELECT count(*) FROM (SELECT deployment_id FROM step GROUP BY "
                      "deployment_id HAVING sum(preempted) > 0)"),
               2);
  cr_assert_eq(q1(db, "SELECT count(*) FROM metric m WHERE name = 'preemptions' AND phase_id IS "
                      "NULL AND value != (SELECT sum(preempted) FROM step s WHERE "
                      "s.deployment_id = m.deployment_id)"),
               0);
  cr_assert_eq(q1(db, "SELECT count(*) FROM request WHERE status != 'ok'"), 0);
  cr_assert_eq(q1(db, "SELECT count(*) FROM request"), 2 * 48);
  // the second deployment's greedy outputs were compared with the first's, request by request
  cr_assert_eq(q1(db, "SELECT count(*) FROM verdict WHERE slo = 'layout_mismatches' AND "
                      "actual = 0 AND pass = 1"),
               2);
}

// --- verdicts and exit codes

Test(run, an_slo_that_fails_exits_1_and_junit_carries_expected_vs_actual) {
  const char *dir = sc_test_tmpdir("run-fail");
  const char *sc = tiny_scenario(dir, "strict.yaml",
                                 "deployments: [{tp: 1}, {dp: 2}]\n"
                                 "workload:\n  prompts: [{input: 16, output: 8}]\n"
                                 "  phases: [{fixed: {requests: 12, concurrency: 3}}]\n"
                                 "slo: {ttft_p95_ms: 0.000001, error_rate: 0}\n");
  char db[600], junit[600];
  snprintf(db, sizeof db, "%s/r.db", dir);
  snprintf(junit, sizeof junit, "%s/j.xml", dir);
  int rc = sc_test_run_scenario(out, sizeof out, sc, db, "--out %s/rep --junit %s", dir, junit);
  cr_assert_eq(rc, 1, "%s", out);
  cr_assert(strstr(out, "FAIL"), "%s", out);
  cr_assert_str_eq(q1s(db, "SELECT verdict FROM run"), "fail");
  cr_assert_eq(q1(db, "SELECT count(*) FROM verdict WHERE slo = 'ttft_p95_ms' AND pass = 0"), 2);
  cr_assert_eq(q1(db, "SELECT count(*) FROM verdict WHERE slo = 'error_rate' AND pass = 1"), 2);
  cr_assert_eq(q1(db, "SELECT count(*) FROM request"), 2 * 12);
  cr_assert_eq(count_substr(junit, "<testcase "), 4);
  cr_assert_eq(count_substr(junit, "<failure "), 2);
  cr_assert_gt(count_substr(junit, "expected &lt;= "), 0);
}

Test(run, passing_slos_exit_0_and_the_run_is_listed) {
  const char *dir = sc_test_tmpdir("run-pass");
  const char *sc = tiny_scenario(dir, "easy.yaml",
                                 "deployments: [{tp: 2}]\n"
                                 "workload:\n  prompts: [{input: {uniform: [4, 32]}, output: 4}]\n"
                                 "  phases: [{rate: 50, arrival: constant, requests: 20}]\n"
                                 "slo: {ttft_p95_ms: 60000, error_rate: 0}\n");
  char args[2048], db[600];
  snprintf(db, sizeof db, "%s/r.db", dir);
  cr_assert_eq(sc_test_run_scenario(out, sizeof out, sc, db, "--out %s/rep --quiet", dir), 0, "%s",
               out);
  cr_assert_eq(q1(db, "SELECT count(*) FROM request WHERE status = 'ok' AND output_tokens = 4"),
               20);
  snprintf(args, sizeof args, "runs --db %s", db);
  cr_assert_eq(cli(args), 0, "%s", out);
  cr_assert(strstr(out, "easy.yaml") || strstr(out, "easy"), "%s", out);
  cr_assert(strstr(out, "complete"), "%s", out);
  cr_assert(strstr(out, "pass"), "%s", out);
}

Test(run, requests_past_the_timeout_end_as_timeouts_and_count_as_errors) {
  const char *dir = sc_test_tmpdir("run-timeout");
  char sc[600];
  snprintf(sc, sizeof sc, "%s/timeout.yaml", dir);
  const char *text = "name: timeout\nmodel: llama-small\ndeployments: [{tp: 1}]\n"
                     "workload:\n  prompts: [{input: 256, output: 200}]\n"
                     "  phases: [{fixed: {requests: 4, concurrency: 2}}]\n"
                     "limits: {request_timeout: 50ms}\n"
                     "slo: {error_rate: 0}\n";
  cr_assert_eq(sc_test_write_file(sc, text, strlen(text)), 0);
  char db[600];
  snprintf(db, sizeof db, "%s/r.db", dir);
  cr_assert_eq(sc_test_run_scenario(out, sizeof out, sc, db, "--out %s/rep --quiet", dir), 1, "%s",
               out);
  cr_assert_eq(q1(db, "SELECT count(*) FROM request WHERE status = 'timeout'"), 4);
  // the client gave up at arrival + 50 ms: that is the request's end, no token after it
  cr_assert_eq(q1(db, "SELECT count(*) FROM request WHERE finish_ns - arrival_ns != 50000000"),
               0);
  cr_assert_eq(q1(db, "SELECT count(*) FROM token t JOIN request r ON r.id = t.request_id "
                      "WHERE t.t_ns > r.finish_ns"),
               0);
  cr_assert_eq(q1(db, "SELECT count(*) FROM metric WHERE name = 'error_rate' AND value = 1 AND "
                      "phase_id IS NULL AND class = ''"),
               1);
}

Test(run, admission_keeps_max_running_under_overload_and_counts_steps_past_the_limits,
     .timeout = 120) {
  const char *dir = sc_test_tmpdir("admission");
  char db[600];
  snprintf(db, sizeof db, "%s/r.db", dir);
  cr_assert_eq(sc_test_run_scenario(out, sizeof out, SC_SOURCE_DIR "/scenarios/admission.yaml", db,
                                    "--quiet --no-report"),
               0, "%s", out);
  // 96 users, at most 32 running: the batch stops at the limit and the rest queue
  cr_expect_eq(q1(db, "SELECT max(seqs) FROM step"), 32);
  cr_expect_gt(q1(db, "SELECT value FROM metric WHERE name = 'peak_queue' AND phase_id IS NULL "
                      "AND class = '' AND deployment_id = 1"),
               32);
  // the metric counts the step rows past either limit (none here), per deployment
  cr_expect_eq(q1(db, "SELECT count(*) FROM metric m WHERE name = 'limit_violations' AND "
                      "phase_id IS NULL AND value != (SELECT count(*) FROM step s WHERE "
                      "s.deployment_id = m.deployment_id AND (seqs > 32 OR prefill_tokens + "
                      "decode_tokens > 4096))"),
               0);
  cr_expect_eq(q1(db, "SELECT count(*) FROM verdict WHERE slo = 'limit_violations' AND pass = 1"),
               2);
}

Test(run, the_metrics_audit_finds_a_metric_that_disagrees_with_its_rows, .timeout = 120) {
  const char *dir = sc_test_tmpdir("audit");
  const char *sc = tiny_scenario(dir, "audit.yaml",
                                 "mode: sim\nhardware: {profile: h100-sxm, gpus: 1}\n"
                                 "deployments: [{tp: 1}]\n"
                                 "workload:\n  prompts: [{input: {uniform: [8, 64]}, "
                                 "output: {uniform: [2, 40]}}]\n"
                                 "  phases: [{fixed: {requests: 40, concurrency: 4}}]\n");
  char db[600];
  snprintf(db, sizeof db, "%s/r.db", dir);
  cr_assert_eq(sc_test_run_scenario(out, sizeof out, sc, db, "--quiet --no-report"), 0, "%s",
               out); // every run is audited: this one agrees
  sqlite3 *h = NULL;
  cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK);
  char why[200] = "";
  cr_expect_eq(rq_metrics_audit(h, 1, 1, true, why, sizeof why), 0, "%s", why);
  // a TPOT computed over n tokens instead of n - 1 reads low: the rows say otherwise
  cr_assert_eq(sqlite3_exec(h, "UPDATE metric SET value = value * 0.95 WHERE name = "
                               "'tpot_mean_ms' AND phase_id IS NULL AND class = ''",
                            NULL, NULL, NULL),
               SQLITE_OK);
  cr_expect_eq(rq_metrics_audit(h, 1, 1, true, why, sizeof why), 1);
  cr_expect(strstr(why, "tpot_mean_ms: "), "%s", why);
  // a token row the recorder lost: the completed requests' tokens no longer add up
  cr_assert_eq(sqlite3_exec(h, "UPDATE token_times SET t_ns = json_remove(t_ns, '$[0]') WHERE "
                               "request_id = (SELECT q.id FROM request q WHERE q.status = 'ok' "
                               "AND q.output_tokens > 0 LIMIT 1)",
                            NULL, NULL, NULL),
               SQLITE_OK);
  cr_expect_eq(rq_metrics_audit(h, 1, 1, true, why, sizeof why), 2);
  sqlite3_close(h);
}

// --- Ctrl-C, gnuplot, refusals

Test(run, ctrl_c_records_in_flight_requests_as_cancelled_and_marks_the_run_interrupted) {
  const char *dir = sc_test_tmpdir("run-int");
  char sc[600], db[600], rep[600], logp[600];
  snprintf(logp, sizeof logp, "%s/run.log", dir);
  snprintf(sc, sizeof sc, "%s/long.yaml", dir);
  snprintf(db, sizeof db, "%s/r.db", dir);
  snprintf(rep, sizeof rep, "%s/rep", dir);
  const char *text = "name: long\nmodel: llama-small\ndeployments: [{dp: 2}, {tp: 2}]\n"
                     "workload:\n  prompts: [{input: 64, output: 400}]\n"
                     "  phases: [{ramp: {concurrency: [4]}, hold: 60s}]\n";
  cr_assert_eq(sc_test_write_file(sc, text, strlen(text)), 0);
  pid_t pid = sc_test_spawn_run(sc, db, rep, logp);
  // interrupt once the engine is stepping (step rows are flushed every second)
  long long steps = 0;
  for (int i = 0; i < 600 && steps == 0; i++) {
    usleep(100000);
    sqlite3 *h = NULL;
    if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
      sqlite3_stmt *q = NULL;
      if (sqlite3_prepare_v2(h, "SELECT count(*) FROM step", -1, &q, NULL) == SQLITE_OK &&
          sqlite3_step(q) == SQLITE_ROW)
        steps = sqlite3_column_int64(q, 0);
      sqlite3_finalize(q);
    }
    sqlite3_close(h);
  }
  cr_assert_gt(steps, 0, "the run never started stepping");
  kill(pid, SIGINT);
  int st = 0;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFEXITED(st), "the run did not exit cleanly");
  FILE *lf = fopen(logp, "r");
  cr_assert(lf);
  size_t ln = fread(out, 1, sizeof out - 1, lf);
  out[ln] = 0;
  fclose(lf);
  sc_test_no_sanitizer_reports(out);
  cr_assert_eq(WEXITSTATUS(st), 130, "%s", out);
  cr_assert_str_eq(q1s(db, "PRAGMA integrity_check"), "ok");
  cr_assert_str_eq(q1s(db, "SELECT status FROM run"), "interrupted");
  // only the first deployment started; its in-flight requests ended as cancelled
  cr_assert_eq(q1(db, "SELECT count(*) FROM deployment"), 1);
  cr_assert_str_eq(q1s(db, "SELECT status FROM deployment"), "interrupted");
  cr_assert_gt(q1(db, "SELECT count(*) FROM request WHERE status = 'cancelled' AND reason = "
                      "'interrupted'"),
               0);
  cr_assert_eq(q1(db, "SELECT count(*) FROM request WHERE finish_ns IS NULL"), 0);
  cr_assert_eq(q1(db, "SELECT count(*) FROM phase WHERE end_ns IS NULL"), 0);
  char html[700];
  snprintf(html, sizeof html, "%s/index.html", rep);
  cr_assert_gt(sc_test_file_size(html), 0);
}

Test(run, without_gnuplot_the_data_and_html_are_written_and_the_exit_code_holds) {
  const char *dir = sc_test_tmpdir("run-nognuplot");
  const char *sc = tiny_scenario(dir, "plain.yaml",
                                 "deployments: [{tp: 1}]\n"
                                 "workload:\n  prompts: [{input: 8, output: 4}]\n"
                                 "  phases: [{ramp: {concurrency: [1, 2]}, hold: 300ms}]\n"
                                 "slo: {error_rate: 0}\n");
  char args[2048], rep[600];
  snprintf(rep, sizeof rep, "%s/rep", dir);
  snprintf(args, sizeof args, "run %s --db %s/r.db --out %s", sc, dir, rep);
  char cmd[2400];
  snprintf(cmd, sizeof cmd, "env PATH=/nonexistent %s", SC_BINARY);
  // run the binary with a PATH that has no gnuplot
  char full[4600];
  snprintf(full, sizeof full, "%s %s 2>&1", cmd, args);
  FILE *p = popen(full, "r");
  cr_assert(p);
  size_t n = fread(out, 1, sizeof out - 1, p);
  out[n] = 0;
  int st = pclose(p);
  sc_test_no_sanitizer_reports(out);
  cr_assert(WIFEXITED(st));
  cr_assert_eq(WEXITSTATUS(st), 0, "%s", out);
  cr_assert(strstr(out, "warning: plots skipped"), "%s", out);
  char path[700];
  snprintf(path, sizeof path, "%s/index.html", rep);
  cr_assert_gt(sc_test_file_size(path), 0);
  snprintf(path, sizeof path, "%s/ttft.dat", rep);
  cr_assert_gt(sc_test_file_size(path), 0);
  snprintf(path, sizeof path, "%s/ttft.png", rep);
  cr_assert_eq(sc_test_file_size(path), -1);
}

Test(run, scenarios_this_version_cannot_run_are_refused_before_anything_is_recorded) {
  const char *dir = sc_test_tmpdir("run-refuse");
  const char *faults = tiny_scenario(dir, "faults.yaml",
                                     "deployments: [{dp: 2}]\n"
                                     "workload:\n  prompts: [{input: 8, output: 4}]\n"
                                     "  phases: [{fixed: {requests: 4, concurrency: 1}}]\n"
                                     "faults: [{at: 1s, hot_swap: {dtype: int4}}]\n");
  char args[2048], db[600];
  snprintf(db, sizeof db, "%s/r.db", dir);
  cr_assert_eq(sc_test_run_scenario(out, sizeof out, faults, db, NULL), 2, "%s", out);
  cr_assert(strstr(out, "faults.yaml:") &&
                strstr(out, "hot_swap dtype int4: the real backends hold"),
            "%s", out);
  cr_assert_eq(q1(db, "SELECT count(*) FROM run"), 0);
  // fp8 weights and an fp8 KV cache are the simulator's: real mode says so
  static const struct {
    const char *model, *want;
  } sim_only[] = {{"{preset: llama-tiny, dtype: fp8}", "model.dtype fp8: the real backends"},
                  {"{preset: llama-tiny, kv_cache_dtype: fp8}", "model.kv_cache_dtype fp8"}};
  for (size_t i = 0; i < sizeof sim_only / sizeof *sim_only; i++) {
    char text[512], path[600];
    snprintf(path, sizeof path, "%s/fp8-%zu.yaml", dir, i);
    snprintf(text, sizeof text,
             "name: f\nmodel: %s\ndeployments: [{tp: 1}]\nworkload:\n  prompts: [{input: 8, "
             "output: 4}]\n  phases: [{fixed: {requests: 1}}]\n",
             sim_only[i].model);
    cr_assert_eq(sc_test_write_file(path, text, strlen(text)), 0);
    cr_assert_eq(sc_test_run_scenario(out, sizeof out, path, db, NULL), 2, "%s", out);
    cr_assert(strstr(out, sim_only[i].want) && strstr(out, "mode: sim"), "%s", out);
    snprintf(args, sizeof args, "validate %s", path); // validate says the same
    cr_assert_eq(cli(args), 2, "%s", out);
    cr_assert(strstr(out, sim_only[i].want), "%s", out);
  }
  cr_assert_eq(q1(db, "SELECT count(*) FROM run"), 0);
  snprintf(args, sizeof args, "run %s/missing.yaml --db %s", dir, db);
  cr_assert_eq(cli(args), 2, "%s", out);
  cr_assert_eq(cli("run"), 2, "%s", out);
  cr_assert_eq(cli("run --help"), 0, "%s", out);
  cr_assert(strstr(out, "--junit"), "%s", out);
}

Test(run, a_clock_jump_that_cannot_be_injected_is_refused_before_anything_is_recorded) {
  const char *dir = sc_test_tmpdir("run-clock");
  const char *frac = tiny_scenario(dir, "frac.yaml",
                                   "deployments: [{dp: 1}]\n"
                                   "workload:\n  prompts: [{input: 8, output: 4}]\n"
                                   "  phases: [{fixed: {requests: 4, concurrency: 1}}]\n"
                                   "faults: [{at: 1s, clock_jump: {offset: 1500ms}}]\n");
  const char *whole = tiny_scenario(dir, "whole.yaml",
                                    "deployments: [{dp: 1}]\n"
                                    "workload:\n  prompts: [{input: 8, output: 4}]\n"
                                    "  phases: [{fixed: {requests: 4, concurrency: 1}}]\n"
                                    "faults: [{at: 1s, clock_jump: {offset: +1h}}]\n");
  char db[600];
  snprintf(db, sizeof db, "%s/r.db", dir);
  cr_expect_eq(sc_test_run_scenario(out, sizeof out, frac, db, NULL), 2, "%s", out);
  cr_expect(strstr(out, "frac.yaml:") && strstr(out, "whole seconds only"), "%s", out);
  setenv("SHARDCHECK_LIBFAKETIME", "/nonexistent/libfaketimeMT.so.1", 1);
  int rc = sc_test_run_scenario(out, sizeof out, whole, db, NULL);
  unsetenv("SHARDCHECK_LIBFAKETIME");
  cr_expect_eq(rc, 2, "%s", out);
  cr_expect(strstr(out, "clock_jump needs libfaketime"), "%s", out);
  cr_expect_eq(q1(db, "SELECT count(*) FROM run"), 0);
}

Test(run, router_isolation_thread_keeps_replicas_in_process_and_still_takes_faults,
     .timeout = 300) {
  const char *dir = sc_test_tmpdir("run-isolation");
  const char *sc = tiny_scenario(dir, "thread.yaml",
                                 "deployments: [{dp: 2}]\n"
                                 "router: {isolation: thread}\n"
                                 "workload:\n  prompts: [{input: 8, output: 16}]\n"
                                 "  phases: [{ramp: {concurrency: [2]}, hold: 1s}]\n"
                                 "faults: [{at: 300ms, kill: replica, target: replica0}]\n"
                                 "slo: {lost_requests: 0}\n");
  const char *jump = tiny_scenario(dir, "jump.yaml",
                                   "deployments: [{dp: 1}]\n"
                                   "router: {isolation: thread}\n"
                                   "workload:\n  prompts: [{input: 8, output: 4}]\n"
                                   "  phases: [{fixed: {requests: 4, concurrency: 1}}]\n"
                                   "faults: [{at: 1s, clock_jump: {offset: +1h}}]\n");
  char db[600];
  snprintf(db, sizeof db, "%s/r.db", dir);
  cr_expect_eq(sc_test_run_scenario(out, sizeof out, sc, db, "--no-report"), 0, "%s", out);
  cr_expect_eq(q1(db, "SELECT count(*) FROM run WHERE json_extract(config, '$.isolation') = "
                      "'thread'"), 1);
  cr_expect_eq(q1(db, "SELECT count(*) FROM fault WHERE kind = 'kill' AND detected_ns IS NOT "
                      "NULL"), 1, "the in-process replica was killed and the kill seen");
  // A worker process would have been restarted after the kill; a replica in this process has
  // no restart.
  cr_expect_eq(q1(db, "SELECT count(*) FROM fault WHERE detail LIKE '%restarted in%'"), 0);
  cr_expect_gt(q1(db, "SELECT count(*) FROM request WHERE replica = 1"), 0, "%s", out);
  cr_expect_eq(q1(db, "SELECT count(*) FROM request WHERE status != 'ok'"), 0, "%s", out);
  cr_expect_eq(q1(db, "SELECT value FROM metric WHERE name = 'leaked_processes' AND phase_id "
                      "IS NULL"), 0);
  cr_expect_eq(sc_test_run_scenario(out, sizeof out, jump, db, NULL), 2, "%s", out);
  cr_expect(strstr(out, "clock_jump needs router.isolation: process"), "%s", out);
  cr_expect_eq(q1(db, "SELECT count(*) FROM run"), 1, "refused before anything is recorded");
}

// --- every layout computes the same greedy tokens

// A local replica whose tokens are off by one at tp 2 (a wrong result at one layout only).
static replica_i off_by_one_i;
static int (*local_poll)(void *ctx, replica_event *out, int cap);

static int off_by_one(void *ctx, replica_event *ev, int cap) {
  int n = local_poll(ctx, ev, cap);
  for (int i = 0; i < n; i++)
    if (ev[i].kind == REPLICA_EV_TOKEN) ev[i].token = (ev[i].token + 1) % 256;
  return n;
}

static sc_status make_wrong_at_tp2(void *ud, const engine_config *cfg, int index, replica **rep,
                                   sc_error *err) {
  SC_TRY(replica_local_new(cfg, index, rep, err));
  if (cfg->tp == 2 && *(const bool *)ud) {
    off_by_one_i = *(*rep)->i;
    local_poll = off_by_one_i.poll;
    off_by_one_i.poll = off_by_one;
    (*rep)->i = &off_by_one_i;
  }
  return SC_OK;
}

// Runs two layouts of llama-tiny on the same 12 greedy requests; tp 2 wrong when `wrong`.
static double layout_run(bool wrong, const char *tag, runner_result *res) {
  static const char text[] = "name: layouts\nmodel: llama-tiny\nhardware: {backend: cpu}\n"
                             "deployments: [{tp: 1}, {tp: 2}]\n"
                             "workload:\n  prompts: [{input: {uniform: [8, 24]}, output: 12}]\n"
                             "  phases: [{fixed: {requests: 12, concurrency: 3}}]\n"
                             "slo: {layout_mismatches: 0}\n";
  scenario *s = NULL;
  sc_error err = {{0}};
  cr_assert_eq(scenario_parse(text, strlen(text), "t.yaml", ".", &s, &err), SC_OK, "%s", err.msg);
  char path[600];
  snprintf(path, sizeof path, "%s/r.db", sc_test_tmpdir(tag));
  store *db = NULL;
  cr_assert_eq(store_open(path, &db, &err), SC_OK, "%s", err.msg);
  runner_options o = runner_options_defaults();
  o.progress = RUNNER_PROGRESS_NONE;
  o.make_replica = make_wrong_at_tp2;
  o.make_replica_ud = &wrong;
  cr_assert_eq(runner_run(s, db, &o, res, &err), SC_OK, "%s", err.msg);
  scenario_free(s);
  store_close(db);
  return (double)q1(path, "SELECT value FROM metric m JOIN deployment d ON d.id = "
                          "m.deployment_id WHERE d.label = 'tp2' AND m.name = 'layout_mismatches'");
}

Test(run, every_layout_gives_the_first_layouts_greedy_tokens_and_a_wrong_one_fails) {
  runner_result res;
  cr_expect_eq(layout_run(false, "run-layouts", &res), 0);
  cr_expect_eq(res.n_failed, 0, "tp1 and tp2 agree");
  cr_expect_eq(layout_run(true, "run-layouts-wrong", &res), 12, "every request differs at tp2");
  cr_expect_eq(res.n_failed, 1, "tp2's layout_mismatches SLO fails, tp1's (the reference) holds");
}

// --- the load that was asked for
// A runner that stalls in every submission (here a local replica whose submit takes 80 ms)
// falls behind its schedule: the phase is marked client saturated, its latency verdicts say so
// rather than blame the server alone, and the client_saturated SLO fails.
static replica_i stalling_i;
static sc_status (*local_submit)(void *ctx, uint64_t key, const engine_request *r, sc_error *e);

static sc_status stalling_submit(void *ctx, uint64_t key, const engine_request *r, sc_error *e) {
  struct timespec ts = {0, 80000000};
  nanosleep(&ts, NULL);
  return local_submit(ctx, key, r, e);
}

static sc_status make_stalling(void *ud, const engine_config *cfg, int index, replica **rep,
                               sc_error *err) {
  SC_TRY(replica_local_new(cfg, index, rep, err));
  if (*(const bool *)ud) {
    stalling_i = *(*rep)->i;
    local_submit = stalling_i.submit;
    stalling_i.submit = stalling_submit;
    (*rep)->i = &stalling_i;
  }
  return SC_OK;
}

Test(run, a_client_that_falls_behind_its_schedule_is_marked_saturated, .timeout = 120) {
  static const char text[] = "name: late\nmodel: llama-tiny\nhardware: {backend: cpu}\n"
                             "deployments: [{tp: 1}]\n"
                             "workload:\n  prompts: [{input: 8, output: 4}]\n"
                             "  phases: [{name: open, rate: 20, duration: 2s, arrival: constant}]\n"
                             "slo: {client_saturated: 0, ttft_p95_ms: 100000}\n";
  for (int stall = 0; stall < 2; stall++) {
    scenario *s = NULL;
    sc_error err = {{0}};
    cr_assert_eq(scenario_parse(text, strlen(text), "t.yaml", ".", &s, &err), SC_OK, "%s",
                 err.msg);
    char path[600];
    snprintf(path, sizeof path, "%s/r.db", sc_test_tmpdir(stall ? "run-late" : "run-on-time"));
    store *db = NULL;
    cr_assert_eq(store_open(path, &db, &err), SC_OK, "%s", err.msg);
    runner_options o = runner_options_defaults();
    o.progress = RUNNER_PROGRESS_NONE;
    bool on = stall;
    o.make_replica = make_stalling;
    o.make_replica_ud = &on;
    runner_result res;
    cr_assert_eq(runner_run(s, db, &o, &res, &err), SC_OK, "%s", err.msg);
    scenario_free(s);
    FILE *f = tmpfile();
    cr_assert_eq(report_print_verdicts(store_db(db), res.run_id, f, &err), SC_OK, "%s", err.msg);
    store_close(db);
    char table[4096];
    rewind(f);
    table[fread(table, 1, sizeof table - 1, f)] = 0;
    fclose(f);
    double rate = atof(q1s(path, "SELECT value FROM metric WHERE name = 'arrival_rate' AND "
                                 "phase_id IS NOT NULL"));
    double late = atof(q1s(path, "SELECT value FROM metric WHERE name = 'client_late_p99_ms' "
                                 "AND phase_id IS NOT NULL"));
    if (!stall) { // the client kept its schedule: 20 requests/s, none of them late
      cr_expect(rate > 15 && rate < 25, "arrival_rate %.2f", rate);
      cr_expect_eq(res.n_failed, 0, "%s", table);
      continue;
    }
    cr_expect_gt(late, 50, "sends %.1f ms late at p99", late);
    cr_expect_lt(rate, 15, "it achieved %.2f of the 20 requests/s asked", rate);
    cr_expect_eq(q1(path, "SELECT value FROM metric WHERE name = 'client_saturated' AND "
                          "phase_id IS NULL"),
                 1);
    cr_expect_eq(q1(path, "SELECT pass FROM verdict WHERE slo = 'client_saturated'"), 0);
    cr_expect(strstr(q1s(path, "SELECT note FROM verdict WHERE slo = 'ttft_p95_ms'"),
                     "client saturated"),
              "the latency verdict says the client fell behind");
    cr_expect(strstr(table, "client saturated: tp1 open ("), "%s", table);
  }
}

// --- conversations (workload.conversations) in virtual time

// Runs text (a sim scenario) in-process into a fresh database under tag; the database's path.
static const char *sim_run(const char *text, const char *tag) {
  static char path[600];
  scenario *s = NULL;
  sc_error err = {{0}};
  cr_assert_eq(scenario_parse(text, strlen(text), "c.yaml", ".", &s, &err), SC_OK, "%s", err.msg);
  snprintf(path, sizeof path, "%s/c.db", sc_test_tmpdir(tag));
  store *db = NULL;
  cr_assert_eq(store_open(path, &db, &err), SC_OK, "%s", err.msg);
  runner_options o = runner_options_defaults();
  o.progress = RUNNER_PROGRESS_NONE;
  runner_result res;
  cr_assert_eq(runner_run(s, db, &o, &res, &err), SC_OK, "%s", err.msg);
  scenario_free(s);
  store_close(db);
  return path;
}

Test(run, a_conversations_turns_arrive_think_time_after_the_turn_before_and_carry_its_history) {
  static const char text[] =
      "name: conv\nmodel: {preset: llama-tiny}\nmode: sim\n"
      "hardware: {profile: h100-sxm, gpus: 1}\ndeployments: [{tp: 1}]\n"
      "limits: {prefix_caching: true}\nslo: {prefix_cache_hit_rate: 0.2}\n"
      "workload:\n  prompts: [{input: 20, output: 10}]\n"
      "  prefixes: {count: 1, length: 64}\n"
      "  conversations: {turns: 3, think: 2s}\n"
      "  phases:\n    - {name: open, rate: 1, requests: 1}\n"
      "    - {name: closed, fixed: {requests: 6, concurrency: 2}}\n";
  const char *db = sim_run(text, "conv");
  // open loop: one conversation of three turns, each 2 s after the one before ended
  const char *open = "FROM request r JOIN phase p ON p.id = r.phase_id WHERE p.name = 'open'";
  char sql[512];
  snprintf(sql, sizeof sql, "SELECT count(*) %s", open);
  cr_assert_eq(q1(db, sql), 3);
  for (int t = 1; t < 3; t++) {
    snprintf(sql, sizeof sql,
             "SELECT (SELECT arrival_ns %s ORDER BY seq LIMIT 1 OFFSET %d) - "
             "(SELECT finish_ns %s ORDER BY seq LIMIT 1 OFFSET %d)", open, t, open, t - 1);
    cr_expect_eq(q1(db, sql), 2000000000ll, "turn %d", t);
    snprintf(sql, sizeof sql, "SELECT prompt_tokens %s ORDER BY seq LIMIT 1 OFFSET %d", open, t);
    cr_expect_eq(q1(db, sql), 64 + 20 + t * 30, "turn %d: the history, then 20 new tokens", t);
  }
  // closed loop: two users, each in its own conversation; 6 requests are two conversations of
  // three turns, every later turn 2 s after a turn ended
  const char *closed = "FROM request r JOIN phase p ON p.id = r.phase_id WHERE p.name = 'closed'";
  snprintf(sql, sizeof sql, "SELECT count(*) %s", closed);
  cr_assert_eq(q1(db, sql), 6);
  snprintf(sql, sizeof sql, "SELECT count(*) %s AND prompt_tokens = 84", closed);
  cr_expect_eq(q1(db, sql), 2);
  snprintf(sql, sizeof sql,
           "SELECT count(*) %s AND prompt_tokens > 84 AND arrival_ns - 2000000000 IN "
           "(SELECT finish_ns FROM request)", closed);
  cr_expect_eq(q1(db, sql), 4);
  // the prefix cache: each later turn finds the full blocks of the turn before's prompt (the
  // reply in its history is the workload's, not the tokens generated): 0, then 80 of 84, then
  // 112 of 114
  snprintf(sql, sizeof sql, "SELECT group_concat(cached_tokens) FROM (SELECT cached_tokens %s "
           "ORDER BY seq)", open);
  cr_expect_str_eq(q1s(db, sql), "0,80,112");
  cr_expect_eq(q1(db, "SELECT round(m.value * 1e6) FROM metric m JOIN phase p ON p.id = "
                     "m.phase_id WHERE p.name = 'open' AND m.name = 'prefix_cache_hit_rate'"),
               llround(192.0 / 342.0 * 1e6), "the open phase's hit rate");
  cr_expect_eq(q1(db, "SELECT pass FROM verdict WHERE slo = 'prefix_cache_hit_rate'"), 1);
}

// --- a ramp that stops at saturation

Test(run, a_ramp_with_saturation_ends_after_its_first_saturated_step_and_records_the_knee) {
  static const char text[] =
      "name: sat\nmodel: {preset: llama3-8b, dtype: bf16}\nmode: sim\n"
      "hardware: {profile: h100-sxm, gpus: 1}\ndeployments: [{tp: 1}]\n"
      "workload:\n  prompts: [{input: {uniform: [512, 2048]}, output: {uniform: [64, 256]}}]\n"
      "  phases:\n    - {name: ramp, ramp: {concurrency: [1, 4, 16, 64, 256, 512, 1024, 2048]},"
      " hold: 10s, warmup: 2s, saturation: {gain: 0.05, ttft_growth: 3}}\n"
      "seed: 3\n";
  const char *db = sim_run(text, "sat");
  // 512 users: throughput within 5% of 256's while TTFT p95 is past 3x the first step's
  cr_expect_eq(q1(db, "SELECT count(*) FROM phase"), 6, "1024 and 2048 users were skipped");
  cr_expect_eq(q1(db, "SELECT count(*) FROM phase WHERE name = 'ramp-c512'"), 1);
  cr_expect_eq(sc_test_metric(db, "saturation_concurrency"), 256);
  // the same ramp stopped at 64 users never saturates: no knee, and the row says why
  char cut[1024];
  snprintf(cut, sizeof cut, "%s", text);
  char *at = strstr(cut, "64, 256, 512, 1024, 2048");
  cr_assert(at);
  snprintf(at, sizeof cut - (size_t)(at - cut),
           "64]}, hold: 10s, warmup: 2s, saturation: {}}\nseed: 3\n");
  db = sim_run(cut, "sat-never");
  cr_expect_eq(q1(db, "SELECT count(*) FROM phase"), 4);
  cr_expect_str_eq(q1s(db, "SELECT coalesce(value, 'NULL') || '|' || note FROM metric WHERE "
                           "name = 'saturation_concurrency'"),
                   "NULL|the ramp never saturated: every step raised throughput past the gain "
                   "or kept TTFT p95 within the growth bound");
}
