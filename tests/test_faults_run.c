// End-to-end fault injection: the shipped fault scenarios run with `shardcheck run` in real
// mode (process replicas, CPU backend, llama-tiny) and in sim mode, and their invariants are
// read back from the results database: every request ends exactly once, nothing is lost, KV
// returns to zero, faults are detected, outputs equal a fault-free engine's, and no worker
// outlives the runner.
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/helpers.h"

#define q1 sc_test_q1
#define q1s sc_test_q1s
#define SHIPPED SC_SOURCE_DIR "/scenarios"

static char out[1 << 16];

// Real-mode runs are real-time load tests (SKIP_UNDER_SANITIZERS, tests/helpers.h); sim runs
// are not real-time and run everywhere.

// Runs a shipped scenario into a fresh database; returns its path. The exit code must be 0:
// every shipped fault scenario's SLOs hold.
static const char *run_shipped(const char *name, const char *extra) {
  static char db[8][600];
  static int slot;
  char *p = db[slot++ % 8];
  const char *dir = sc_test_tmpdir(name);
  snprintf(p, 600, "%s/r.db", dir);
  char sc[600];
  snprintf(sc, sizeof sc, SHIPPED "/%s.yaml", name);
  int rc = sc_test_run_scenario(out, sizeof out, sc, p, "--out %s/rep %s", dir, extra);
  cr_assert_eq(rc, 0, "%s: exit %d\n%s", name, rc, out);
  return p;
}

// The invariants every fault run must keep.
static void history_holds(const char *db) {
  // every request ended exactly once, with one of the four statuses
  cr_expect_eq(q1(db, "SELECT count(*) - count(DISTINCT deployment_id || '/' || seq) FROM request"),
               0);
  cr_expect_eq(q1(db, "SELECT count(*) FROM request WHERE status NOT IN "
                      "('ok', 'cancelled', 'failed', 'timeout') OR finish_ns IS NULL"),
               0);
  cr_expect_eq(q1(db, "SELECT count(*) FROM metric WHERE name = 'lost_requests' AND value != 0"),
               0);
  cr_expect_eq(q1(db, "SELECT count(*) FROM metric WHERE name = 'history_violations' AND "
                      "value != 0"),
               0);
  cr_expect_eq(q1(db, "SELECT count(*) FROM metric WHERE name = 'kv_leak_blocks' AND value != 0"),
               0);
  cr_expect_eq(q1(db, "SELECT count(*) FROM metric WHERE name LIKE 'leaked_%' AND value > 0"), 0);
  cr_expect_str_eq(q1s(db, "SELECT status FROM run"), "complete");
}

Test(faults_real, kill_replica_retries_resumes_and_restarts, .timeout = 300) {
  SKIP_UNDER_SANITIZERS();
  const char *db = run_shipped("kill-replica", "");
  history_holds(db);
  cr_expect_str_eq(q1s(db, "SELECT kind || ' ' || target FROM fault"), "kill replica1");
  cr_expect_eq(q1(db, "SELECT detected_ns IS NOT NULL AND detected_ns >= injected_ns FROM fault"),
               1);
  cr_expect(strstr(q1s(db, "SELECT detail FROM fault"), "restarted in"), "%s",
            q1s(db, "SELECT detail FROM fault"));
  cr_expect_gt(sc_test_metric(db, "retried_requests"), 0, "a kill under load retries requests");
  cr_expect_eq(q1(db, "SELECT count(*) FROM request WHERE status != 'ok'"), 0);
  cr_expect_eq(sc_test_metric(db, "output_mismatches"), 0);
  // SLOs before and after the kill, over the requests arriving in each window
  cr_expect_eq(q1(db, "SELECT count(DISTINCT window) FROM fault_window WHERE window IN "
                      "('before', 'after') AND name = 'failed_requests' AND pass = 1"),
               2);
  cr_expect_eq(q1(db, "SELECT count(*) FROM fault_window w JOIN fault f ON f.id = w.fault_id "
                      "WHERE (w.window = 'before' AND w.end_ns != f.injected_ns) OR w.start_ns "
                      ">= w.end_ns"),
               0);
  // recover_ms counts from the kill until replica1 is back and throughput is too: never less
  // than its detection plus its relaunch (a survivor carrying the load is not a recovery)
  double recover = sc_test_metric(db, "recover_ms"), detect = sc_test_metric(db, "detect_ms"),
         reload = sc_test_metric(db, "reload_ms");
  cr_expect_gt(reload, 0, "replica1 was relaunched");
  cr_expect_geq(recover + 1e-3, detect + reload, "recover_ms %.1f, detect_ms %.1f + reload_ms %.1f",
                recover, detect, reload);
  // replica1 came back and served again after its restart
  cr_expect_gt(q1(db, "SELECT count(*) FROM request r JOIN fault f ON f.deployment_id = "
                      "r.deployment_id WHERE r.replica = 1 AND r.dispatch_ns > f.detected_ns + "
                      "1000000000"),
               0);
}

Test(faults_real, kill_gpu_and_hang_rank_fail_over, .timeout = 300) {
  SKIP_UNDER_SANITIZERS();
  const char *db = run_shipped("kill-gpu", "");
  history_holds(db);
  cr_expect_eq(q1(db, "SELECT count(*) FROM fault WHERE detected_ns IS NOT NULL"), 1);
  cr_expect_eq(sc_test_metric(db, "output_mismatches"), 0);
  db = run_shipped("hang-rank", "");
  history_holds(db);
  // caught by the 1 s collective deadline, not by the 2 s heartbeat timeout: no earlier than the
  // deadline, and the loss it names is the worker's engine failing the step (exit status 3),
  // not a heartbeat missed (how long it took past the deadline is the host's, not the test's)
  long long det = q1(db, "SELECT detected_ns - injected_ns FROM fault");
  cr_expect(det >= 900000000ll, "detected after %lld ns", det);
  const char *how = strstr(out, "hang detected");
  cr_expect(how && strstr(how, "worker exited with status 3") && !strstr(out, "no heartbeat"),
            "not caught by the collective deadline:\n%s", out);
}

Test(faults_real, slow_link_and_rank_are_flagged_as_stragglers, .timeout = 300) {
  SKIP_UNDER_SANITIZERS();
  const char *db = run_shipped("slow-link", "");
  history_holds(db);
  cr_expect_eq(q1(db, "SELECT count(*) FROM fault WHERE kind = 'slow' AND detected_ns IS NOT "
                      "NULL AND detected_ns < injected_ns + 4000000000"),
               2, "detected after (ms): %s",
               q1s(db, "SELECT group_concat(detail || ': ' || coalesce((detected_ns - "
                       "injected_ns) / 1000000, 'never'), '; ') FROM fault"));
}

Test(faults_real, cancel_storm_frees_kv_and_survivors_match, .timeout = 300) {
  SKIP_UNDER_SANITIZERS();
  const char *db = run_shipped("cancel-storm", "");
  history_holds(db);
  cr_expect_gt(q1(db, "SELECT count(*) FROM request WHERE status = 'cancelled'"), 16);
  cr_expect_eq(q1(db, "SELECT count(*) FROM fault WHERE recovered_ns IS NOT NULL"), 2,
               "every storm's cancels were acknowledged");
  cr_expect_eq(sc_test_metric(db, "output_mismatches"), 0);
}

Test(faults_real, oom_fails_only_the_requests_it_hits, .timeout = 300) {
  SKIP_UNDER_SANITIZERS();
  const char *db = run_shipped("oom", "");
  history_holds(db);
  long long oom = q1(db, "SELECT count(*) FROM request WHERE status = 'failed' AND reason = 'oom'");
  cr_expect_gt(oom, 0);
  cr_expect_eq(q1(db, "SELECT count(*) FROM request WHERE status = 'failed'"), oom);
  cr_expect_eq(q1(db, "SELECT count(*) FROM fault WHERE detected_ns IS NOT NULL"), 2);
}

Test(faults_real, chaos_runs_its_seeded_schedule, .timeout = 300) {
  SKIP_UNDER_SANITIZERS();
  const char *db = run_shipped("chaos", "");
  history_holds(db);
  cr_expect_geq(q1(db, "SELECT count(*) FROM fault"), 2);
}

Test(faults_real, hot_swap_rolls_the_replicas_to_int8_one_at_a_time, .timeout = 300) {
  SKIP_UNDER_SANITIZERS();
  const char *db = run_shipped("hot-swap-int8", "");
  history_holds(db);
  cr_expect_eq(q1(db, "SELECT count(*) FROM request WHERE status != 'ok'"), 0);
  // both replicas served the old weights before and the new ones after, and nothing else
  cr_expect_eq(q1(db, "SELECT count(DISTINCT replica) FROM request WHERE weight_version = 1"), 2);
  cr_expect_eq(q1(db, "SELECT count(*) FROM request WHERE weight_version NOT IN (0, 1)"), 0);
  cr_expect(strstr(q1s(db, "SELECT detail FROM fault"), "2 replicas on weights v1"), "%s",
            q1s(db, "SELECT detail FROM fault"));
  // one replica at a time: requests were dispatched while the swap ran
  cr_expect_gt(q1(db, "SELECT count(*) FROM request r JOIN fault f ON r.deployment_id = "
                      "f.deployment_id WHERE r.dispatch_ns > f.injected_ns AND r.dispatch_ns < "
                      "f.injected_ns + (SELECT value FROM metric WHERE name = 'swap_drain_ms') * "
                      "1000000"),
               0);
  cr_expect_gt(sc_test_metric(db, "swap_load_ms"), 0);
  // int8 weights really differ from f32, and mostly agree with them
  double agree = sc_test_metric(db, "swap_agreement");
  cr_expect(agree > 0.5 && agree <= 1, "agreement %g", agree);
  cr_expect_eq(q1(db, "SELECT value > 0 FROM metric WHERE name = 'swap_kl'"), 1);
}

Test(faults_real, a_swap_under_loss_resumes_every_request_on_the_weights_of_its_tokens,
     .timeout = 300) {
  SKIP_UNDER_SANITIZERS();
  const char *db = run_shipped("hot-swap-loss", "");
  history_holds(db);
  cr_expect_eq(q1(db, "SELECT count(*) FROM request WHERE status != 'ok'"), 0);
  // replica0 alone moved to the int8 weights; replica1 was killed on f32 and came back on f32
  cr_expect_eq(q1(db, "SELECT count(DISTINCT replica) FROM request WHERE weight_version = 1"), 1);
  cr_expect_eq(q1(db, "SELECT min(replica) FROM request WHERE weight_version = 1"), 0);
  cr_expect_eq(q1(db, "SELECT count(*) FROM fault WHERE kind = 'kill' AND detected_ns IS NOT "
                      "NULL"),
               1);
  // the kill caught requests mid-stream, and each resumed on its own weights
  cr_expect_gt(sc_test_metric(db, "resumed_requests"), 0);
  cr_expect_eq(sc_test_metric(db, "version_mixes"), 0);
  cr_expect_eq(sc_test_metric(db, "output_mismatches"), 0);
}

Test(faults_real, clock_jumps_of_the_workers_change_nothing, .timeout = 300) {
  SKIP_UNDER_SANITIZERS();
  if (!getenv("SHARDCHECK_LIBFAKETIME") &&
      access("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1", R_OK) != 0)
    cr_skip_test("skipped: libfaketime is not installed (Debian package faketime)");
  const char *db = run_shipped("clock-jump", "");
  history_holds(db);
  cr_expect_eq(q1(db, "SELECT count(*) FROM fault WHERE kind = 'clock_jump' AND detected_ns IS "
                      "NOT NULL"),
               2, "both jumps reached the workers");
  cr_expect_eq(q1(db, "SELECT count(*) FROM request WHERE status != 'ok'"), 0);
  cr_expect_eq(sc_test_metric(db, "unexplained_losses"), 0);
}

// --- sim mode: the same scenarios on simulated replicas, through the same router

Test(faults_sim, every_shipped_fault_scenario_runs_in_sim_mode, .timeout = 300) {
  const char *names[] = {"kill-replica", "kill-gpu", "hang-rank", "slow-link", "cancel-storm",
                         "oom", "chaos", "hot-swap-int8", "hot-swap-loss"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    const char *db = run_shipped(names[i], "--mode sim");
    history_holds(db);
    cr_expect_gt(q1(db, "SELECT count(*) FROM fault WHERE detected_ns IS NOT NULL OR (kind = "
                        "'hot_swap' AND recovered_ns IS NOT NULL)"),
                 0, "%s", names[i]);
  }
}

Test(faults_sim, a_simulated_hot_swap_prices_the_new_weights_and_their_load, .timeout = 120) {
  const char *db = run_shipped("hot-swap-int8", "--mode sim");
  cr_expect_eq(q1(db, "SELECT count(DISTINCT replica) FROM request WHERE weight_version = 1"), 2);
  cr_expect_gt(sc_test_metric(db, "swap_load_ms"), 0);
  cr_expect_eq(q1(db, "SELECT count(*) FROM metric WHERE name = 'swap_agreement' AND value IS "
                      "NOT NULL"),
               0, "simulated tokens carry no logits to compare");
}

Test(faults_sim, a_clock_jump_is_refused_in_sim_mode) {
  const char *dir = sc_test_tmpdir("clock-sim");
  char args[1024];
  snprintf(args, sizeof args, "run " SHIPPED "/clock-jump.yaml --mode sim --db %s/r.db", dir);
  cr_expect_eq(sc_test_run_cli(args, out, sizeof out), 2, "%s", out);
  cr_expect(strstr(out, "clock_jump: not available in mode: sim"), "%s", out);
}


Test(faults_sim, hang_rank_is_detected_at_the_collective_deadline, .timeout = 120) {
  const char *db = run_shipped("hang-rank", "--mode sim");
  // virtual time: the 1 s deadline counts from the start of the step the rank hung in, which
  // began at most one step (a few simulated milliseconds) before the injection or after it
  long long det = q1(db, "SELECT detected_ns - injected_ns FROM fault");
  cr_expect(det > 950000000ll && det <= 1050000000ll, "detected after %lld ns", det);
}

Test(faults_sim, chaos_with_the_same_seed_injects_the_same_faults, .timeout = 120) {
  const char *a = run_shipped("chaos", "--mode sim");
  char first[512];
  snprintf(first, sizeof first, "%s",
           q1s(a, "SELECT group_concat(kind || ' ' || coalesce(target, '') || ' ' || detail || "
                  "' ' || injected_ns, '; ') FROM fault"));
  const char *b = run_shipped("chaos", "--mode sim");
  cr_expect_str_eq(q1s(b, "SELECT group_concat(kind || ' ' || coalesce(target, '') || ' ' || "
                          "detail || ' ' || injected_ns, '; ') FROM fault"),
                   first);
  const char *c = run_shipped("chaos", "--mode sim --seed 13");
  cr_expect_str_neq(q1s(c, "SELECT group_concat(kind || ' ' || coalesce(target, '') || ' ' || "
                          "detail || ' ' || injected_ns, '; ') FROM fault"),
                    first);
}

Test(faults_sim, a_deployment_whose_every_replica_is_dead_for_good_stops, .timeout = 60) {
  // the only replica killed with router.restart off: its closed-loop users would fail request
  // after request at one instant; the deployment stops instead, and the phase's rest is unrun
  const char *dir = sc_test_tmpdir("all-dead");
  char sc[600], args[2048];
  snprintf(sc, sizeof sc, "%s/all-dead.yaml", dir);
  const char *text = "name: all-dead\nmodel: llama-tiny\nmode: sim\n"
                     "hardware: {profile: h100-sxm, gpus: 1}\ndeployments: [{tp: 1}]\n"
                     "workload:\n  prompts: [{input: 16, output: 16}]\n"
                     "  phases:\n    - {ramp: {concurrency: [4]}, hold: 5s}\n"
                     "    - {name: after, ramp: {concurrency: [4]}, hold: 5s}\n"
                     "faults:\n  - {at: 1s, kill: replica, target: replica0}\n"
                     "router: {restart: false}\nslo: {error_rate: 0}\n";
  cr_assert_eq(sc_test_write_file(sc, text, strlen(text)), 0);
  snprintf(args, sizeof args, "run %s --db %s/r.db --no-report", sc, dir);
  cr_assert_eq(sc_test_run_cli(args, out, sizeof out), 1, "%s", out);
  cr_expect(strstr(out, "every replica is dead"), "%s", out);
  char db[700];
  snprintf(db, sizeof db, "%s/r.db", dir);
  cr_expect_lt(q1(db, "SELECT count(*) FROM request WHERE status = 'failed'"), 16);
  cr_expect_eq(q1(db, "SELECT count(*) FROM phase"), 1, "the second phase never started");
  cr_expect_str_eq(q1s(db, "SELECT status FROM run"), "complete");
}

// --- the runner killed: its workers die with it and the database stays consistent

Test(faults_real, a_sigkilled_runner_leaves_no_worker_and_a_consistent_database, .timeout = 120) {
  SKIP_UNDER_SANITIZERS();
  const char *dir = sc_test_tmpdir("fault-kill9");
  char db[600], logp[600];
  snprintf(db, sizeof db, "%s/r.db", dir);
  snprintf(logp, sizeof logp, "%s/run.log", dir);
  pid_t pid = sc_test_spawn_run(SHIPPED "/kill-replica.yaml", db, dir, logp);
  pid_t wp[2] = {0, 0};
  int nw = 0;
  for (int i = 0; i < 300 && nw < 2; i++) {
    usleep(20000);
    nw = sc_test_children(pid, wp, 2);
  }
  cr_assert_eq(nw, 2, "the run never started its two workers");
  usleep(500000); // then kill the runner mid-run
  kill(pid, SIGKILL);
  int st = 0;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  for (int i = 0; i < nw; i++) {
    bool gone = false; // dead (a zombie waits for init)
    for (int k = 0; k < 200 && !(gone = sc_test_pid_gone(wp[i])); k++) usleep(10000);
    cr_expect(gone, "worker %d outlived the runner", (int)wp[i]);
  }
  cr_assert_str_eq(q1s(db, "PRAGMA integrity_check"), "ok");
  cr_expect_str_eq(q1s(db, "SELECT status FROM run"), "running"); // listed as incomplete
}
