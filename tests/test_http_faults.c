// Faults on external targets end to end: `shardcheck run` launching `shardcheck serve`
// replicas ({shardcheck} in the launch template), llama-tiny on the CPU backend. The shipped
// scenarios (http-quickstart: every phase kind on tp1, dp2 and tp2; http-faults: kill, hang and
// a cancel storm), an exec fault reaching a server through a user command, kill: gpu on serve's
// worker processes, slow, corrupt and oom through serve's admin API, and a SIGKILL of the runner
// mid-run (no server survives it, the file stays consistent with the run listed as
// incomplete). docs/targets.md, "Faults".
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "faults/runtime.h"
#include "tests/helpers.h"

static char out[1 << 16];

#define q1  sc_test_q1
#define q1s sc_test_q1s

// Runs `shardcheck run PATH --db DIR/NAME.db --out DIR/NAME` and returns its exit code.
static int run(const char *path, const char *dir, const char *name, char *db, size_t cap) {
  snprintf(db, cap, "%s/%s.db", dir, name);
  return sc_test_run_scenario(out, sizeof out, path, db, "--out %s/%s --no-report", dir, name);
}

// A launched-serve target with `extra` target lines, then the rest of the scenario.
static const char *serve_scenario(const char *dir, const char *name, const char *model,
                                  const char *serve_args, const char *extra, const char *rest) {
  static char path[4][600];
  static int slot;
  char *p = path[slot++ % 4];
  snprintf(p, 600, "%s/%s", dir, name);
  char text[8192];
  snprintf(text, sizeof text,
           "name: %s\ntarget:\n  openai:\n"
           "    url: \"http://127.0.0.1:{port}/v1\"\n"
           "    launch: \"{shardcheck} serve --model llama-tiny --served-model-name %s -tp {tp} "
           "--port {port} --threads 1 %s\"\n"
           "    model: %s\n    vocab_size: 512\n    extra_body: {ignore_eos: true}\n"
           "    ready: {timeout: 30s}\n    stop_grace: 2s\n%s%s",
           name, model, serve_args, model, extra, rest);
  cr_assert_eq(sc_test_write_file(p, text, strlen(text)), 0);
  return p;
}

// --- the shipped scenarios

Test(http_faults, http_quickstart_runs_every_phase_kind_on_tp1_dp2_tp2_against_launched_serve,
     .timeout = 120) {
  const char *dir = sc_test_tmpdir("httpq");
  char path[600], db[700];
  snprintf(path, sizeof path, "%s/scenarios/http-quickstart.yaml", SC_SOURCE_DIR);
  int rc = run(path, dir, "qs", db, sizeof db);
  cr_assert_eq(rc, 0, "%s", out);
  cr_expect(strstr(out, "verdict: PASS"), "%s", out);
  cr_expect_eq(q1(db, "SELECT count(*) FROM deployment WHERE status = 'complete'"), 3);
  cr_expect_eq(q1(db, "SELECT count(DISTINCT kind) FROM phase"), 3, "fixed, rate and ramp");
  cr_expect_eq(q1(db, "SELECT count(*) FROM request WHERE status <> 'ok'"), 0);
  cr_expect_eq(q1(db, "SELECT count(DISTINCT replica) FROM request r JOIN deployment d ON "
                      "d.id = r.deployment_id WHERE d.label = 'dp2'"),
               2);
  // serve's /metrics was scraped into server_sample (running, waiting, KV usage and blocks)
  cr_expect_gt(q1(db, "SELECT count(*) FROM server_sample WHERE running IS NOT NULL AND "
                      "waiting IS NOT NULL AND kv_usage IS NOT NULL AND kv_blocks IS NOT NULL"),
               0);
  // the prediction: the same file in mode sim (its model on the CPU profile), into the same
  // database, then the report puts it beside the measurement
  cr_assert_eq(sc_test_run_scenario(out, sizeof out, path, db, "--mode sim --no-report --quiet"), 0,
               "%s", out);
  cr_expect_str_eq(q1s(db, "SELECT backend FROM run WHERE id = 2"), "sim");
  cr_expect_eq(q1(db, "SELECT count(*) FROM deployment WHERE run_id = 2"), 3);
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "report --db %s --run 2 --run 1 --out %s/pm", db, dir);
  cr_assert_eq(sc_test_run_cli_clean(cmd, out, sizeof out), 0, "%s", out);
  cr_expect(strstr(out, "mean |error|"), "the prediction beside the measurement: %s", out);
}

Test(http_faults, http_faults_kill_hang_and_cancel_storm_are_detected_relaunched_and_pass,
     .timeout = 120) {
  const char *dir = sc_test_tmpdir("httpf");
  char path[600], db[700];
  snprintf(path, sizeof path, "%s/scenarios/http-faults.yaml", SC_SOURCE_DIR);
  int rc = run(path, dir, "f", db, sizeof db);
  cr_assert_eq(rc, 0, "%s", out);
  cr_expect(strstr(out, "verdict: PASS"), "%s", out);
  cr_expect_eq(q1(db, "SELECT count(*) FROM fault WHERE detected_ns IS NOT NULL"), 3, "%s", out);
  cr_expect(strstr(out, "replica1 lost: its server was killed by signal 9"), "%s", out);
  cr_expect(strstr(out, "unanswered for 1.0 s"), "the hang is seen by the probe: %s", out);
  cr_expect_eq(q1(db, "SELECT count(*) FROM fault WHERE detail LIKE '%restarted in%'"), 2);
  cr_expect_gt(sc_test_metric(db, "retried_requests"), 0);
  cr_expect_gt(sc_test_metric(db, "resumed_requests"), 0, "serve streams token ids: resumes");
  cr_expect_eq(sc_test_metric(db, "output_mismatches"), 0);
  cr_expect_eq(sc_test_metric(db, "kv_leak_blocks"), 0);
  cr_expect_eq(sc_test_metric(db, "leaked_processes"), 0);
  // half of what was in flight at that instant (6 users: 3, fewer when some were between
  // requests), each its own row, and the fault row counts them
  int64_t cancelled = q1(db, "SELECT count(*) FROM request WHERE status = 'cancelled'");
  cr_expect(cancelled >= 1 && cancelled <= 3, "%lld cancelled", (long long)cancelled);
  cr_expect_eq(q1(db, "SELECT affected FROM fault WHERE kind = 'cancel_storm'"), cancelled);
  // each relaunch appends to the replica's log: two startups in each
  for (int i = 0; i < 2; i++) {
    char lp[800];
    snprintf(lp, sizeof lp, "%s/f/dp2-replica%d.log", dir, i);
    char *log = sc_test_read_file(lp, NULL);
    cr_assert_not_null(log, "%s", lp);
    int n = 0;
    for (const char *p = log; (p = strstr(p, "KV cache ")); p++) n++;
    cr_expect_eq(n, 2, "replica%d: %s", i, log);
    free(log);
  }
}

Test(http_faults, the_vllm_sglang_and_llamacpp_scenarios_validate_here_with_only_a_path_warning) {
  const char *names[] = {"vllm-llama3-8b-h100", "sglang-llama3-70b-h100",
                         "llamacpp-llama3-8b-cpu"};
  for (int i = 0; i < 3; i++) {
    char cmd[800];
    snprintf(cmd, sizeof cmd, "validate %s/scenarios/%s.yaml", SC_SOURCE_DIR, names[i]);
    int rc = sc_test_run_cli_clean(cmd, out, sizeof out);
    cr_expect_eq(rc, 0, "%s: %s", names[i], out);
    cr_expect(strstr(out, "faults"), "%s", out);
    cr_expect(!strstr(out, "error"), "%s", out);
  }
}

// --- exec and kill: gpu

Test(http_faults, an_exec_fault_runs_its_command_with_pid_port_replica_and_its_kill_is_detected,
     .timeout = 90) {
  const char *dir = sc_test_tmpdir("httpx");
  char rest[1024];
  snprintf(rest, sizeof rest,
           "deployments: [{dp: 2}]\n"
           "workload:\n  prompts: [{input: 16, output: 24}]\n"
           "  phases: [{ramp: {concurrency: [4]}, hold: 3s}]\n"
           "faults:\n"
           "  - {at: 1s, exec: {command: \"echo {pid} {port} {replica} > %s/seen; kill -9 "
           "{pid}\"}, target: replica1}\n"
           "router: {detect_timeout: 1s}\n"
           "slo: {lost_requests: 0, failed_requests: 0, timeouts: 0}\n",
           dir);
  const char *sc = serve_scenario(dir, "x.yaml", "tiny-x", "", "", rest);
  char db[700];
  int rc = run(sc, dir, "x", db, sizeof db);
  cr_assert_eq(rc, 0, "%s", out);
  cr_expect(strstr(out, "exec on replica1: echo "), "%s", out);
  cr_expect(strstr(out, "replica1 lost: its server was killed by signal 9"), "%s", out);
  cr_expect_eq(q1(db, "SELECT count(*) FROM fault WHERE kind = 'exec' AND detected_ns IS NOT "
                      "NULL AND target = 'replica1'"),
               1);
  char seen[700];
  snprintf(seen, sizeof seen, "%s/seen", dir);
  char *t = sc_test_read_file(seen, NULL);
  cr_assert_not_null(t, "the command did not run");
  int pid = 0, port = 0, rep = -1;
  cr_expect_eq(sscanf(t, "%d %d %d", &pid, &port, &rep), 3, "%s", t);
  cr_expect_gt(pid, 1);
  cr_expect_gt(port, 0);
  cr_expect_eq(rep, 1);
  free(t);
}

Test(http_faults, kill_gpu_sigkills_the_server_worker_matching_rank_process, .timeout = 90) {
  const char *dir = sc_test_tmpdir("httpg");
  const char *sc = serve_scenario(dir, "g.yaml", "tiny-g", "--isolation process",
                                  "    rank_process: \" worker --fd\"\n",
                                  "deployments: [{tp: 2}]\n"
                                  "workload:\n  prompts: [{input: 16, output: 24}]\n"
                                  "  phases: [{ramp: {concurrency: [4]}, hold: 3s}]\n"
                                  "faults:\n  - {at: 1s, kill: gpu, target: replica0.rank0}\n"
                                  "router: {detect_timeout: 1s}\n"
                                  "slo: {lost_requests: 0, history_violations: 0}\n");
  char db[700];
  int rc = run(sc, dir, "g", db, sizeof db);
  cr_assert_eq(rc, 0, "%s", out);
  // the worker's death reaches the client one way or another (serve fails or retries its
  // requests; its /health turns 503 until it restarts it): the fault is seen
  cr_expect_eq(q1(db, "SELECT count(*) FROM fault WHERE kind = 'kill' AND detail NOT LIKE "
                      "'%not injected%'"),
               1, "%s", out);
}

// oom, corrupt and slow happen inside an engine: against shardcheck serve they go through its
// admin API (target.openai.admin_token), and the server's own replica takes them.
Test(http_faults, slow_oom_and_corrupt_reach_serve_through_its_admin_api, .timeout = 90) {
  const char *dir = sc_test_tmpdir("httpa");
  const char *sc = serve_scenario(
      dir, "a.yaml", "tiny-a", "--admin-token tok-a1", "    admin_token: tok-a1\n",
      "deployments: [{dp: 1}]\n"
      "workload:\n  prompts: [{input: 16, output: 24}]\n"
      "  phases: [{ramp: {concurrency: [2]}, hold: 5s}]\n"
      "faults:\n  - {at: 1s, slow: {on: rank, factor: 10}, target: replica0.rank0, duration: 1s}\n"
      "  - {at: 2500ms, corrupt: {kind: nan}, target: replica0.rank0, duration: 500ms}\n"
      "  - {at: 3500ms, oom: {mode: persistent, after_allocs: 0}, target: replica0, "
      "duration: 500ms}\n"
      "router: {detect_timeout: 1s}\n");
  char db[700];
  int rc = run(sc, dir, "a", db, sizeof db);
  cr_assert(rc == 0 || rc == 1, "%s", out);
  cr_expect_eq(q1(db, "SELECT count(*) FROM fault WHERE kind IN ('slow', 'oom', 'corrupt') AND "
                      "detail NOT LIKE '%not injected%'"),
               3, "%s", out);
  // the server's replica felt them: its device 10x slower while slowed, so the tokens it streams
  // in that second fall to under half (output tokens per second over the window: a request
  // admitted in the window may spend it all in a slowed prefill, as under TSan, and decode after
  // it, so TPOT alone can miss the fault), requests ended by its NaN check while corrupted, and
  // by its allocator once out of memory
  double before = atof(q1s(db, "SELECT value FROM fault_window WHERE fault_id = 1 AND window = "
                               "'before' AND name = 'output_tok_s'"));
  // a window where no request arrived has no rows: on a slow host both streams can spend the
  // whole slowed second in flight, and then nothing was admitted while slowed, 0 tokens/s
  double during = 0;
  if (q1(db, "SELECT count(*) FROM fault_window WHERE fault_id = 1 AND window = 'during' AND "
             "name = 'output_tok_s'") > 0)
    during = atof(q1s(db, "SELECT value FROM fault_window WHERE fault_id = 1 AND window = "
                          "'during' AND name = 'output_tok_s'"));
  cr_expect_gt(before, 0, "%s", out);
  cr_expect_lt(during, before / 2, "%.1f tokens/s while slowed against %.1f before", during,
               before);
  cr_expect_gt(q1(db, "SELECT count(*) FROM request WHERE error LIKE '%numerical%'"), 0, "%s", out);
  cr_expect_gt(q1(db, "SELECT count(*) FROM request WHERE error LIKE '%oom%'"), 0, "%s", out);
  // refused at validation, naming what is missing: the token; a token the launch does not pass
  static const struct {
    const char *name, *target_line, *fault, *want;
  } refused[] = {
      {"b.yaml", "", "{at: 500ms, oom: {mode: transient}, target: replica0}", "admin_token"},
      {"m.yaml", "    admin_token: tok-m\n",
       "{at: 500ms, slow: {on: rank, factor: 2}, target: replica0.rank0}", "--admin-token"}};
  for (size_t k = 0; k < sizeof refused / sizeof *refused; k++) {
    char rest[512];
    snprintf(rest, sizeof rest,
             "deployments: [{dp: 1}]\nworkload:\n  prompts: [{input: 16, output: 24}]\n"
             "  phases: [{ramp: {concurrency: [2]}, hold: 1s}]\nfaults:\n  - %s\n",
             refused[k].fault);
    const char *p =
        serve_scenario(dir, refused[k].name, "tiny-r", "", refused[k].target_line, rest);
    cr_expect_eq(run(p, dir, "r", db, sizeof db), 2, "%s", out);
    cr_expect(strstr(out, refused[k].want), "%s", out);
  }
}

Test(http_faults, a_clock_jump_reaches_launched_servers_through_libfaketime_and_nothing_notices,
     .timeout = 90) {
  if (!fault_faketime_lib()) cr_skip_test("libfaketime is not installed");
  const char *dir = sc_test_tmpdir("httpc");
  const char *sc = serve_scenario(dir, "c.yaml", "tiny-c", "", "",
                                  "deployments: [{dp: 2}]\n"
                                  "workload:\n  prompts: [{input: 16, output: 24}]\n"
                                  "  phases: [{ramp: {concurrency: [4]}, hold: 3s}]\n"
                                  "faults:\n  - {at: 1s, clock_jump: {offset: +1h}}\n"
                                  "  - {at: 2s, clock_jump: {offset: -2h}}\n"
                                  "router: {detect_timeout: 1s}\n"
                                  "slo: {failed_requests: 0, unexplained_losses: 0, "
                                  "history_violations: 0, timeouts: 0}\n");
  char db[700];
  int rc = run(sc, dir, "c", db, sizeof db);
  cr_assert_eq(rc, 0, "%s", out);
  // seen through the servers' Date headers: each launched server's wall clock moved
  cr_expect(strstr(out, "is off by +3600 s"), "%s", out);
  cr_expect(strstr(out, "is off by -3600 s"), "%s", out);
  cr_expect_eq(q1(db, "SELECT count(*) FROM fault WHERE kind = 'clock_jump' AND detected_ns IS "
                      "NOT NULL"),
               2);
}

Test(http_faults, a_hot_swap_relaunches_each_replica_in_turn_with_the_new_model_and_loses_nothing,
     .timeout = 90) {
  const char *dir = sc_test_tmpdir("httph");
  char text[2048], path[700];
  snprintf(path, sizeof path, "%s/h.yaml", dir);
  snprintf(text, sizeof text,
           "name: h\ntarget:\n  openai:\n"
           "    url: \"http://127.0.0.1:{port}/v1\"\n"
           "    launch: \"{shardcheck} serve --model llama-tiny --served-model-name {model} "
           "--port {port} --threads 1\"\n"
           "    model: tiny-a\n    vocab_size: 512\n    extra_body: {ignore_eos: true}\n"
           "    stop_grace: 2s\n"
           "deployments: [{dp: 2}]\n"
           "workload:\n  prompts: [{input: 16, output: 24}]\n"
           "  phases: [{ramp: {concurrency: [4]}, hold: 3s}]\n"
           "faults:\n  - {at: 1s, hot_swap: {model: tiny-b}}\n"
           "slo: {failed_requests: 0, lost_requests: 0, history_violations: 0, timeouts: 0}\n");
  cr_assert_eq(sc_test_write_file(path, text, strlen(text)), 0);
  char db[700];
  int rc = run(path, dir, "h", db, sizeof db);
  cr_assert_eq(rc, 0, "%s", out);
  cr_expect(strstr(out, "2 replicas swapped"), "%s", out);
  // requests after the swap name the new model (serve answers 404 to another name): all ok
  cr_expect_gt(q1(db, "SELECT count(*) FROM request WHERE weight_version = 1"), 0);
  cr_expect_eq(q1(db, "SELECT count(*) FROM request WHERE status <> 'ok'"), 0);
  for (int i = 0; i < 2; i++) {
    char lp[800];
    snprintf(lp, sizeof lp, "%s/h/dp2-replica%d.log", dir, i);
    char *log = sc_test_read_file(lp, NULL);
    cr_assert_not_null(log, "%s", lp);
    cr_expect(strstr(log, "tiny-b on http"), "replica%d was relaunched serving tiny-b: %s", i, log);
    free(log);
  }
  // the same weights under another name: the quality delta (greedy tokens taken before the
  // workload, teacher-forced after it, through serve's token ids) finds every position agreeing
  cr_expect(strstr(out, "old weights' greedy tokens taken on replica0"), "%s", out);
  cr_expect_eq(sc_test_metric(db, "swap_agreement"), 1.0, "%s", out);
  cr_expect_eq(q1(db, "SELECT count(*) FROM metric WHERE name = 'swap_kl' AND value IS NULL"), 1);
}

// A swap to other weights (a relaunch with another seed): the greedy tokens mostly disagree.
Test(http_faults, a_hot_swap_to_other_weights_shows_in_the_quality_delta, .timeout = 90) {
  const char *dir = sc_test_tmpdir("httpw");
  const char *sc = serve_scenario(
      dir, "q.yaml", "tiny-q", "", "",
      "deployments: [{dp: 1}]\n"
      "workload:\n  prompts: [{input: 16, output: 24}]\n"
      "  phases: [{ramp: {concurrency: [2]}, hold: 2s}]\n"
      "faults:\n  - {at: 500ms, hot_swap: {launch: \"{shardcheck} serve --model llama-tiny "
      "--served-model-name tiny-q --weights-seed 7 -tp {tp} --port {port} --threads 1\"}}\n");
  char db[700];
  int rc = run(sc, dir, "q", db, sizeof db);
  cr_assert_eq(rc, 0, "%s", out);
  double agree = sc_test_metric(db, "swap_agreement");
  cr_expect(agree >= 0 && agree < 0.5,
            "greedy agreement %.3f after a swap to unrelated weights: %s", agree, out);
  cr_expect(strstr(out, "greedy agreement"), "%s", out);
}

// --- the runner killed mid-run

Test(http_faults, a_sigkill_of_the_runner_leaves_no_server_and_a_consistent_file_incomplete,
     .timeout = 90) {
  const char *dir = sc_test_tmpdir("httpk");
  char marker[64];
  snprintf(marker, sizeof marker, "tiny-k%d", (int)getpid());
  const char *sc = serve_scenario(dir, "k.yaml", marker, "", "",
                                  "deployments: [{dp: 2}]\n"
                                  "workload:\n  prompts: [{input: 16, output: 24}]\n"
                                  "  phases: [{ramp: {concurrency: [4]}, hold: 60s}]\n"
                                  "faults:\n  - {at: 50s, kill: replica, target: replica0}\n");
  char db[600], rep[600], log[600];
  snprintf(db, sizeof db, "%s/r.db", dir);
  snprintf(rep, sizeof rep, "%s/rep", dir);
  snprintf(log, sizeof log, "%s/run.log", dir);
  pid_t pid = sc_test_spawn_run(sc, db, rep, log);
  bool up = false;
  for (int k = 0; k < 300 && !up; k++) { // the servers up and requests done (at most 30 s)
    sc_test_sleep_ms(100);
    up = sc_test_process_with(marker) && sc_test_file_size(db) > 0 &&
         q1(db, "SELECT count(*) FROM request") > 20;
  }
  cr_assert(up, "the run never got going");
  kill(pid, SIGKILL);
  int st;
  waitpid(pid, &st, 0);
  for (int k = 0; k < 100 && sc_test_process_with(marker); k++) sc_test_sleep_ms(100);
  cr_expect(!sc_test_process_with(marker), "a launched server outlived the runner's SIGKILL");
  cr_expect_str_eq(q1s(db, "PRAGMA integrity_check"), "ok");
  cr_expect_gt(q1(db, "SELECT count(*) FROM request"), 0);
  char cmd[800];
  snprintf(cmd, sizeof cmd, "runs --db %s", db);
  cr_expect_eq(sc_test_run_cli_clean(cmd, out, sizeof out), 0, "%s", out);
  cr_expect(strstr(out, "incomplete"), "the killed run is listed as incomplete: %s", out);
}
