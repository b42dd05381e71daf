// Ranks as MPI processes, on loopback: `mpirun --oversubscribe -np N` over tests/mpi_check.c
// (the mpi communicator against the rank-order sums of shm, deadlines, aborts, alarms; the
// engine's greedy tokens with its ranks as processes against the same engine as threads).
// After every test no process of the job is left.
//
// Without MPI in the build nothing here can run: the binary prints "skipped: no MPI" and exits
// 77, which ctest reports as skipped, never as passed.
#include <stdio.h>

#ifndef SC_MPI_CHECK
int main(void) {
  puts("skipped: no MPI (this build has no MPI: install libopenmpi-dev, see ci/setup.sh)");
  return 77;
}
#else
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/device.h"
#include "tests/helpers.h"

// Open MPI refuses to run as root unless told; CI and this host run tests as root. Under
// AddressSanitizer the ranks record full stacks (fast_unwind_on_malloc=0): MPI's libraries
// have no frame pointers, and tests/lsan.supp names MPI's allocations by the library they
// pass through (kernels/mpi.c runs the leak check before MPI_Finalize); the list of the
// suppressions used is not printed, as it would join the output the tests compare.
static void allow_root(void) {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
#if defined(__SANITIZE_ADDRESS__)
  const char *a = getenv("ASAN_OPTIONS");
  if (!a || !strstr(a, "fast_unwind_on_malloc")) {
    char opts[1024];
    snprintf(opts, sizeof opts, "%s%sfast_unwind_on_malloc=0", a ? a : "", a && *a ? ":" : "");
    setenv("ASAN_OPTIONS", opts, 1);
  }
  const char *l = getenv("LSAN_OPTIONS"); // the used suppressions' list would join the output
  if (!l || !strstr(l, "print_suppressions")) {
    char opts[1024];
    snprintf(opts, sizeof opts, "%s%sprint_suppressions=0", l ? l : "", l && *l ? ":" : "");
    setenv("LSAN_OPTIONS", opts, 1);
  }
#endif
}

// Runs `mpirun --oversubscribe LAUNCH` (LAUNCH: -np N and the program with its arguments); its
// stdout and stderr in out, its exit code back. A job that has not ended after 300 s (a hang:
// every job here takes seconds, under ASan tens of seconds) is ended by timeout(1), exit 124.
static int run_launch(const char *launch, char *out, size_t cap) {
  allow_root();
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "timeout -k 10 300 '%s' --oversubscribe %s 2>&1 </dev/null",
           SC_MPIEXEC, launch);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  size_t n = 0;
  while (n + 1 < cap) {
    size_t got = fread(out + n, 1, cap - 1 - n, p);
    if (!got) break;
    n += got;
  }
  out[n] = 0;
  char sink[4096];
  while (fread(sink, 1, sizeof sink, p)) {
  }
  int st = pclose(p);
  sc_test_no_sanitizer_reports(out);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// `mpirun --oversubscribe -np N mpi_check ARGS`.
static int run_mpi(int np, const char *args, char *out, size_t cap) {
  char launch[2048];
  snprintf(launch, sizeof launch, "-np %d '%s' %s", np, SC_MPI_CHECK, args);
  return run_launch(launch, out, cap);
}

// Every rank said "ok" and none failed.
static void expect_all_ok(int np, const char *out) {
  cr_expect(!strstr(out, "FAIL"), "%s", out);
  for (int r = 0; r < np; r++) {
    char want[32];
    snprintf(want, sizeof want, "rank %d: ok", r);
    cr_expect(strstr(out, want), "no '%s' in:\n%s", want, out);
  }
}

static void no_orphans(void) {
  sc_test_await(!sc_test_process_with(SC_MPI_CHECK), 10, "a process of the job outlived it");
  // every shardcheck rank (and mpirun) these tests start names a path under a directory of
  // theirs, sc-mpi-*: none outlives its job
  sc_test_await(!sc_test_process_with("/sc-mpi-"), 10, "a shardcheck rank outlived its job");
}

TestSuite(mpi, .fini = no_orphans);

static void comm_at(int np) {
  char out[16384];
  int rc = run_mpi(np, "comm", out, sizeof out);
  cr_expect_eq(rc, 0, "exit %d:\n%s", rc, out);
  expect_all_ok(np, out);
}

Test(mpi, comm_collectives_match_rank_order_sums_on_2_ranks) { comm_at(2); }
Test(mpi, comm_collectives_match_rank_order_sums_on_3_ranks) { comm_at(3); }
Test(mpi, comm_collectives_match_rank_order_sums_on_4_ranks) { comm_at(4); }

// --- the engine with its ranks as processes

static void engine_at(int tp, int pp) {
  char out[16384], args[64];
  snprintf(args, sizeof args, "engine %d %d", tp, pp);
  int rc = run_mpi(tp * pp, args, out, sizeof out);
  cr_expect_eq(rc, 0, "exit %d:\n%s", rc, out);
  expect_all_ok(tp * pp, out);
  char want[96]; // the logits line mpi_check prints
  snprintf(want, sizeof want, "tp %d pp %d: 73728 logits, 0 not bit-identical", tp, pp);
  cr_expect(strstr(out, want), "no '%s' in:\n%s", want, out);
}

Test(mpi, tp2_as_processes_gives_the_threads_greedy_tokens_and_logits) { engine_at(2, 1); }
Test(mpi, pp2_as_processes_gives_the_threads_greedy_tokens_and_logits) { engine_at(1, 2); }
Test(mpi, tp2_pp2_as_processes_gives_the_threads_greedy_tokens_and_logits) { engine_at(2, 2); }

// On CUDA, each rank's process on a GPU of its own: the tp group is NCCL, bootstrapped over MPI
// (group rank 0 makes the unique id, the members' mpi group carries it), and the greedy tokens
// and logits are those of the same engine as threads on the same GPUs (NCCL there too). Two
// GPUs at least (NCCL refuses two ranks of one communicator on one GPU).
Test(mpi, tp2_on_cuda_as_processes_bootstraps_nccl_over_mpi_and_gives_the_threads_tokens) {
  int gpus = device_backend_count("cuda");
  if (gpus == 0) cr_skip_test("skipped: no CUDA device");
  if (gpus < 2) cr_skip_test("skipped: NCCL across processes needs 2 CUDA devices, 1 is here");
  char out[16384];
  int rc = run_mpi(2, "engine 2 1 cuda", out, sizeof out);
  cr_expect_eq(rc, 0, "exit %d:\n%s", rc, out);
  expect_all_ok(2, out);
  cr_expect(strstr(out, "tp 2 pp 1: 73728 logits, 0 not bit-identical"), "%s", out);
}

// NCCL's bootstrap over MPI without a GPU: members without a device each join the broadcast of
// the unique id and fail at once with their own line; the job goes on in step (mpi_check).
Test(mpi, nccl_bootstrap_over_mpi_releases_every_member_when_none_has_a_device) {
#ifndef SHARDCHECK_HAVE_CUDA
  cr_skip_test("skipped: this build has no CUDA backend");
#else
  if (device_backend_count("cuda") > 0) cr_skip_test("a GPU is here: the tp 2 check above runs");
  for (int np = 2; np <= 3; np++) {
    char out[16384];
    int rc = run_mpi(np, "comm-cuda-nodev", out, sizeof out);
    cr_expect_eq(rc, 0, "exit %d:\n%s", rc, out);
    expect_all_ok(np, out);
  }
#endif
}

Test(mpi, a_job_of_another_size_than_tp_x_pp_is_refused_on_every_rank) {
  char out[8192];
  int rc = run_mpi(3, "engine-size 2 1", out, sizeof out);
  cr_expect_eq(rc, 0, "exit %d:\n%s", rc, out);
  expect_all_ok(3, out);
}

// Rank 3's device is lost: rank 0's step fails with rank 3's own line (its alarm), not at the
// collective deadline (600 s in mpi_check, past ctest's limit); rank 0 then ends the job.
Test(mpi, a_rank_that_fails_ends_rank_0s_step_with_its_own_reason) {
  char out[16384];
  int rc = run_mpi(4, "engine-fault 2 2 3", out, sizeof out);
  cr_expect_eq(rc, 0, "exit %d:\n%s", rc, out);
  cr_expect(strstr(out, "rank 0: ok"), "%s", out);
  cr_expect(strstr(out, "step failed with: rank 3 (tp_rank=1 pp_rank=1)"), "%s", out);
}

// Rank 1 of tp 2 is stopped (SIGSTOP) between steps: rank 0's next step ends with a timeout at
// the 2 s collective deadline, then the job fails stop and no process is left (stopped ones
// included: the launcher's SIGKILL ends them).
Test(mpi, a_stopped_rank_ends_rank_0s_step_at_the_collective_deadline) {
  char out[16384];
  int rc = run_mpi(2, "engine-stop 2 1 1", out, sizeof out);
  cr_expect_neq(rc, 124, "the job hung:\n%s", out);
  cr_expect(strstr(out, "rank 0: ok"), "%s", out);
  cr_expect(strstr(out, "rank 0: the step ended after"), "%s", out);
}

// Rank 3 of tp 2 x pp 2 is killed (SIGKILL) between steps: the launcher ends the whole job,
// rank 0 with it (the replica is lost, fail-stop), exits non-zero, and leaves no process.
Test(mpi, a_killed_rank_ends_the_whole_job_and_leaves_no_process) {
  char out[16384];
  int rc = run_mpi(4, "engine-kill 2 2 3", out, sizeof out);
  cr_expect(rc != 0 && rc != 124, "exit %d:\n%s", rc, out);
  cr_expect(strstr(out, "rank 0: signal 9 to rank 3"), "%s", out);
  cr_expect(!strstr(out, "rank 0: ok"), "rank 0 outlived its job:\n%s", out);
}

// --- a replica as an MPI job: `router.isolation: mpi` in a scenario

// Every layout of llama-tiny up to 4 ranks, each replica one MPI job on this host
// (--oversubscribe), or the same replicas as threads; 12 closed-loop greedy requests each.
static const char *LAYOUTS_SCN = "name: mpi-layouts\n"
                                 "model: {preset: llama-tiny}\n"
                                 "hardware: {backend: cpu}\n"
                                 "deployments: [{tp: 1}, {tp: 2}, {pp: 2}, {tp: 2, pp: 2}]\n"
                                 "workload:\n"
                                 "  prompts:\n"
                                 "    - {input: {uniform: [16, 64]}, output: {uniform: [8, 24]}}\n"
                                 "  phases:\n"
                                 "    - {fixed: {requests: 12, concurrency: 4}}\n"
                                 "router: {isolation: %s}\n"
                                 "slo: {failed_requests: 0}\n"
                                 "seed: 3\n";

// Each request's output length, deployment by deployment, in arrival order.
#define OUTPUTS                                                                                    \
  "SELECT group_concat(output_tokens || '/' || status, ',') FROM (SELECT r.output_tokens, "        \
  "r.status FROM request r JOIN deployment d ON d.id = r.deployment_id ORDER BY d.idx, r.seq)"
#define MISMATCHES                                                                                 \
  "SELECT count(*) || ':' || coalesce(CAST(sum(value) AS INTEGER), -1) FROM metric WHERE name = "  \
  "'layout_mismatches' AND phase_id IS NULL AND class = ''"

// The runner launches each replica as an MPI job of tp x pp processes: tp 2, pp 2 and
// tp 2 x pp 2 give the greedy tokens of tp 1 (layout_mismatches 0 on each of the three, by the
// hash of every request's token ids), and every request ends as with the replicas as threads.
Test(mpi, a_replica_as_an_mpi_job_gives_the_threads_greedy_tokens_in_every_layout) {
  allow_root();
  char text[2048], out[16384];
  const char *dir = sc_test_tmpdir("mpi-layouts");
  char sc_mpi[1100], sc_thr[1100], db_mpi[1100], db_thr[1100];
  snprintf(sc_mpi, sizeof sc_mpi, "%s/mpi.yaml", dir);
  snprintf(sc_thr, sizeof sc_thr, "%s/thread.yaml", dir);
  snprintf(db_mpi, sizeof db_mpi, "%s/mpi.db", dir);
  snprintf(db_thr, sizeof db_thr, "%s/thread.db", dir);
  snprintf(text, sizeof text, LAYOUTS_SCN, "mpi");
  cr_assert_eq(sc_test_write_file(sc_mpi, text, strlen(text)), 0);
  snprintf(text, sizeof text, LAYOUTS_SCN, "thread");
  cr_assert_eq(sc_test_write_file(sc_thr, text, strlen(text)), 0);
  cr_assert_eq(sc_test_run_scenario(out, sizeof out, sc_mpi, db_mpi, "--out '%s/r1'", dir), 0, "%s",
               out);
  cr_expect(strstr(out, "verdict: PASS"), "%s", out);
  cr_expect(strstr(out, "deployment 4/4: tp2-pp2"), "%s", out);
  cr_expect_str_eq(sc_test_q1s(db_mpi, MISMATCHES), "3:0",
                   "tp2, pp2 and tp2-pp2 as MPI jobs against tp1:\n%s", out);
  cr_expect_str_eq(sc_test_q1s(db_mpi, "SELECT json_extract(config, '$.isolation') FROM run"),
                   "mpi");
  char mpi_rows[4096];
  snprintf(mpi_rows, sizeof mpi_rows, "%s", sc_test_q1s(db_mpi, OUTPUTS));
  cr_assert_eq(sc_test_run_scenario(out, sizeof out, sc_thr, db_thr, "--out '%s/r2'", dir), 0, "%s",
               out);
  cr_expect_str_eq(mpi_rows, sc_test_q1s(db_thr, OUTPUTS), "MPI jobs and threads differ");
  cr_expect_str_eq(sc_test_q1s(db_thr, MISMATCHES), "3:0");
}

// kill: gpu SIGKILLs rank 1's own process of replica 1 (tp 2, an MPI job of 2): MPI ends the
// job, the runner sees the replica lost at once (not at the detect timeout), fails over to
// replica 0 and relaunches the job; no request is lost or fails. The suite's end checks that no
// process of any job (an `/sc-mpi-` socket on its command line) is left.
Test(mpi, a_killed_rank_of_an_mpi_replica_is_detected_and_its_job_relaunched_no_request_lost) {
  allow_root();
  const char *sc = sc_test_write_tmp(
      "mpi-kill", "kill.yaml",
      "name: mpi-kill\n"
      "model: {preset: llama-tiny}\n"
      "hardware: {backend: cpu}\n"
      "deployments: [{tp: 2, dp: 2}]\n"
      "workload:\n"
      "  prompts:\n"
      "    - {input: {uniform: [16, 64]}, output: {uniform: [24, 64]}}\n"
      "  phases:\n"
      "    - {ramp: {concurrency: [4]}, hold: 14s}\n"
      "faults:\n"
      "  - {at: 2s, kill: gpu, target: replica1.rank1}\n"
      "router: {detect_timeout: 5s, isolation: mpi}\n"
      "slo: {lost_requests: 0, failed_requests: 0, history_violations: 0, output_mismatches: 0, "
      "detect_ms: 4000}\n"
      "seed: 6\n");
  const char *dir = sc_test_tmpdir("mpi-kill-out");
  char db[1100], out[32768];
  snprintf(db, sizeof db, "%s/k.db", dir);
  int rc = sc_test_run_scenario(out, sizeof out, sc, db, "--out '%s/r'", dir);
  cr_expect_eq(rc, 0, "exit %d:\n%s", rc, out);
  cr_expect(strstr(out, "kill replica1.rank1: gpu"), "%s", out);
  cr_expect(strstr(out, "replica1 lost: MPI job exited"), "the job, not a heartbeat:\n%s", out);
  cr_expect(strstr(out, "replica1 restarted (epoch 2)"), "%s", out);
  cr_expect(strstr(out, "verdict: PASS"), "%s", out);
  cr_expect_eq(sc_test_q1(db, "SELECT count(*) FROM request WHERE status != 'ok'"), 0, "%s", out);
  cr_expect_gt(sc_test_q1(db, "SELECT count(*) FROM request WHERE replica = 1 AND dispatch_ns > "
                              "(SELECT detected_ns FROM fault)"),
               0, "the relaunched replica served nothing:\n%s", out);
  cr_expect_eq(sc_test_q1(db, "SELECT count(*) FROM request r WHERE r.status = 'ok' AND "
                              "r.output_tokens != (SELECT count(*) FROM token t WHERE "
                              "t.request_id = r.id)"),
               0, "a request's tokens were lost");
}

// hang: rank SIGSTOPs rank 1's own process of replica 1: rank 0's step ends at the 1 s
// collective deadline with that reason, rank 0 ends the job (the stopped rank with it), and the
// replica is lost and relaunched; no request is lost or fails, and no process of the stopped job
// is left (the suite's end).
Test(mpi, a_stopped_rank_of_an_mpi_replica_ends_its_job_at_the_collective_deadline) {
  allow_root();
  const char *sc = sc_test_write_tmp(
      "mpi-hang", "hang.yaml",
      "name: mpi-hang\n"
      "model: {preset: llama-tiny}\n"
      "hardware: {backend: cpu}\n"
      "deployments: [{tp: 2, dp: 2}]\n"
      "workload:\n"
      "  prompts:\n"
      "    - {input: {uniform: [16, 64]}, output: {uniform: [24, 64]}}\n"
      "  phases:\n"
      "    - {ramp: {concurrency: [4]}, hold: 8s}\n"
      "faults:\n"
      "  - {at: 3s, hang: rank, target: replica1.rank1}\n"
      "limits: {collective_timeout: 1s}\n"
      "router: {detect_timeout: 5s, isolation: mpi}\n"
      "slo: {lost_requests: 0, failed_requests: 0, history_violations: 0, detect_ms: 4000}\n"
      "seed: 7\n");
  const char *dir = sc_test_tmpdir("mpi-hang-out");
  char db[1100], out[32768];
  snprintf(db, sizeof db, "%s/h.db", dir);
  int rc = sc_test_run_scenario(out, sizeof out, sc, db, "--out '%s/r'", dir);
  cr_expect_eq(rc, 0, "exit %d:\n%s", rc, out);
  // rank 0's step ends in an all-reduce (or, stopped between its last one and its answer,
  // waiting for rank 1's answer) at the deadline
  cr_expect(strstr(out, "replica1 lost: MPI job exited with status 3: ") &&
                (strstr(out, "deadline 1.000 s passed") || strstr(out, "rank 1: no answer")),
            "%s", out);
  cr_expect(strstr(out, "replica1 restarted (epoch 2)"), "%s", out);
  cr_expect(strstr(out, "verdict: PASS"), "%s", out);
  cr_expect_eq(sc_test_q1(db, "SELECT count(*) FROM request WHERE status != 'ok'"), 0, "%s", out);
}

// A slow link set on rank 0's engine (as a replica's worker sets it) reaches the other ranks'
// processes with the next step, and so does its end: a pp stage other than 0 pays the link's
// latency on every receive (mpi_check prints the step times); tp 2 x pp 2 also in its
// all-reduces.
Test(mpi, a_slow_link_reaches_every_rank_of_pp2_and_its_end_too) {
  char out[16384];
  int rc = run_mpi(2, "engine-link 1 2", out, sizeof out);
  cr_expect_eq(rc, 0, "exit %d:\n%s", rc, out);
  expect_all_ok(2, out);
}

Test(mpi, a_slow_link_reaches_every_rank_of_tp2_pp2_and_its_end_too) {
  char out[16384];
  int rc = run_mpi(4, "engine-link 2 2", out, sizeof out);
  cr_expect_eq(rc, 0, "exit %d:\n%s", rc, out);
  expect_all_ok(4, out);
}

// The shipped slow-link scenario (a slow link on replica1, then a slow rank 0 of it, tp 2 x dp 2)
// with its replicas as MPI jobs, and as threads: the same requests, the same verdicts, every
// request served; as MPI jobs both faults are caught as stragglers within their 4 s windows,
// as with threads (tests/test_faults_run.c). No process of a job is left (the suite's end).
#define VERDICTS                                                                                   \
  "SELECT group_concat(slo || ' ' || op || ' ' || expected || ' ' || actual || ' ' || pass, "     \
  "'; ') FROM (SELECT * FROM verdict ORDER BY id)"
Test(mpi, the_slow_link_scenario_as_mpi_jobs_gives_the_verdicts_of_threads) {
  allow_root();
  char path[1100];
  snprintf(path, sizeof path, "%s/scenarios/slow-link.yaml", SC_SOURCE_DIR);
  char *shipped = sc_test_read_file(path, NULL);
  cr_assert_not_null(shipped, "%s", path);
  cr_assert_null(strstr(shipped, "router:"), "the shipped scenario names a router: merge it here");
  const char *dir = sc_test_tmpdir("mpi-slow-link");
  char db[2][1100], verdicts[2][4096];
  long long requests[2];
  for (int mpi = 0; mpi < 2; mpi++) {
    size_t n = strlen(shipped) + 64;
    char *text = malloc(n), sc[1100], out[32768];
    cr_assert_not_null(text);
    snprintf(text, n, "%s\nrouter: {isolation: %s}\n", shipped, mpi ? "mpi" : "thread");
    snprintf(sc, sizeof sc, "%s/%s.yaml", dir, mpi ? "mpi" : "thread");
    cr_assert_eq(sc_test_write_file(sc, text, strlen(text)), 0);
    free(text);
    snprintf(db[mpi], sizeof db[mpi], "%s/%s.db", dir, mpi ? "mpi" : "thread");
    int rc = sc_test_run_scenario(out, sizeof out, sc, db[mpi], "--out '%s/r%d'", dir, mpi);
    cr_expect_eq(rc, 0, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, "verdict: PASS"), "%s", out);
    if (mpi) cr_expect(strstr(out, "slow replica1: link +1000 us"), "%s", out);
    snprintf(verdicts[mpi], sizeof verdicts[mpi], "%s", sc_test_q1s(db[mpi], VERDICTS));
    requests[mpi] = sc_test_q1(db[mpi], "SELECT count(*) FROM request");
    cr_expect_eq(sc_test_q1(db[mpi], "SELECT count(*) FROM request WHERE status != 'ok'"), 0,
                 "%s", out);
  }
  free(shipped);
  cr_expect(verdicts[0][0], "no verdicts");
  cr_expect_str_eq(verdicts[1], verdicts[0], "MPI jobs and threads judge differently");
  cr_expect_eq(requests[1], requests[0], "the same seed sent other requests");
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__) // real-time detection
  cr_expect_eq(sc_test_q1(db[1], "SELECT count(*) FROM fault WHERE kind = 'slow' AND detected_ns "
                                 "IS NOT NULL AND detected_ns < injected_ns + 4000000000"),
               2, "detected after (ms): %s",
               sc_test_q1s(db[1], "SELECT group_concat(detail || ': ' || coalesce((detected_ns - "
                                  "injected_ns) / 1000000, 'never'), '; ') FROM fault"));
#endif
}

// A hostfile naming fewer slots than one replica's tp x pp: one line, exit 2, nothing run.
Test(mpi, a_hostfile_with_fewer_slots_than_tp_x_pp_is_refused_with_one_line_and_exit_2) {
  const char *hosts = sc_test_write_tmp("mpi-hosts", "hosts",
                                        "# two hosts\nlocalhost slots=1\n"
                                        "127.0.0.1 slots=2\n");
  char text[2048], out[8192];
  snprintf(text, sizeof text,
           "name: h\nmodel: {preset: llama-tiny}\nhardware: {backend: cpu, hostfile: '%s'}\n"
           "deployments: [{tp: 2, pp: 2}]\nworkload:\n  prompts: [{input: 16, output: 8}]\n"
           "  phases: [{fixed: {requests: 2, concurrency: 1}}]\nrouter: {isolation: mpi}\n",
           hosts);
  const char *sc = sc_test_write_tmp("mpi-hosts-scn", "h.yaml", text);
  const char *dir = sc_test_tmpdir("mpi-hosts-out");
  char db[1100];
  snprintf(db, sizeof db, "%s/h.db", dir);
  cr_expect_eq(sc_test_run_scenario(out, sizeof out, sc, db, NULL), 2, "%s", out);
  cr_expect(strstr(out, "deployment 'tp2-pp2' (tp=2 pp=2) runs each replica as an MPI job of 4 "
                        "processes; hardware.hostfile ") &&
                strstr(out, "names 3 slots"),
            "%s", out);
  cr_expect_eq(sc_test_count_lines(out), 1, "%s", out);
  cr_expect_eq(sc_test_file_size(db), -1, "no database was made");
}

// No MPI launcher on PATH (MPI not installed): one line, exit 2, nothing run.
Test(mpi, an_mpi_replica_without_a_launcher_on_path_is_refused_with_one_line_and_exit_2) {
  const char *sc = sc_test_write_tmp(
      "mpi-nolaunch", "n.yaml",
      "name: n\nmodel: {preset: llama-tiny}\nhardware: {backend: cpu}\n"
      "deployments: [{tp: 2}]\nworkload:\n  prompts: [{input: 16, output: 8}]\n"
      "  phases: [{fixed: {requests: 2, concurrency: 1}}]\nrouter: {isolation: mpi}\n");
  const char *dir = sc_test_tmpdir("mpi-nolaunch-out");
  char db[1100], out[8192];
  snprintf(db, sizeof db, "%s/n.db", dir);
  setenv("PATH", dir, 1); // a directory with no mpirun (this test's own process: Criterion forks)
  cr_expect_eq(sc_test_run_scenario(out, sizeof out, sc, db, NULL), 2, "%s", out);
  cr_expect(strstr(out, "router.isolation mpi: no MPI launcher (mpirun or mpiexec) on PATH"), "%s",
            out);
  cr_expect_eq(sc_test_count_lines(out), 1, "%s", out);
  long long runs = -1; // the database may be made before the check: no run in it
  if (sc_test_file_size(db) > 0) sc_test_q1_try(db, "SELECT count(*) FROM run", &runs);
  cr_expect(runs <= 0, "a run was recorded");
}

// --- sweeps across ranks: `mpirun -np N shardcheck capacity`

// Small and quick: llama3-8b on up to 2 H100s (4 layouts), 20 simulated seconds per probe.
static const char *CAP_SCN = "name: cap\n"
                             "mode: sim\n"
                             "model: {preset: llama3-8b}\n"
                             "hardware: {profile: h100-sxm, gpus: 2}\n"
                             "deployments: [{tp: 1}]\n"
                             "workload:\n"
                             "  prompts:\n"
                             "    - {input: {uniform: [128, 512]}, output: {uniform: [16, 64]}}\n"
                             "  phases:\n"
                             "    - {name: steady, rate: 20, arrival: poisson, duration: 20s}\n"
                             "limits: {request_timeout: 30s}\n"
                             "slo: {ttft_p95_ms: 300, error_rate: 0}\n"
                             "seed: 5\n";

#define CAP_FLAGS "--iters 3 --cost h100-sxm=2.5 --quiet"
// Every stored point of the search, by layout and probe, as one line.
#define POINTS                                                                                     \
  "SELECT group_concat(layout || ',' || idx || ',' || rate || ',' || pass || ',' || "              \
  "ttft_p95_ms, ';') FROM (SELECT * FROM capacity_point ORDER BY layout, idx)"

// The table, the report and every stored point of a search over 2 and over 3 ranks (4 layouts:
// shares of 2 + 2 and 2 + 1 + 1) are those of --jobs 1, byte for byte; also with an SLO loose
// enough that every layout's search stops at its knee (docs/capacity.md), its column shown.
Test(mpi, capacity_over_2_and_3_ranks_prints_stores_and_reports_what_jobs_1_does) {
  for (int loose = 0; loose < 2; loose++) {
    char text[2048];
    snprintf(text, sizeof text, "%s", CAP_SCN);
    char *slo = strstr(text, "ttft_p95_ms: 300,");
    cr_assert_not_null(slo);
    if (loose) memcpy(slo, "ttft_p95_ms: 9e4,", strlen("ttft_p95_ms: 300,"));
    const char *sc = sc_test_write_tmp(loose ? "mpi-cap-knee" : "mpi-cap", "cap.yaml", text);
    const char *dir = sc_test_tmpdir(loose ? "mpi-cap-knee-out" : "mpi-cap-out");
    const char *flags = loose ? CAP_FLAGS " --rate-range 4:256" : CAP_FLAGS " --rate-range 4:64";
    char one[16384], args[2048];
    snprintf(args, sizeof args, "capacity %s %s --jobs 1 --db %s/one.db --out %s/r1", sc, flags,
             dir, dir);
    cr_assert_eq(sc_test_run_cli_clean(args, one, sizeof one), 0, "%s", one);
    cr_assert(strstr(one, "recommended:"), "%s", one);
    cr_expect(!loose || strstr(one, "knee req/s"), "%s", one);
    snprintf(args, sizeof args, "%s/r1/index.html", dir);
    char *html1 = sc_test_read_file(args, NULL);
    cr_assert_not_null(html1);
    char points1[8192];
    snprintf(args, sizeof args, "%s/one.db", dir);
    snprintf(points1, sizeof points1, "%s", sc_test_q1s(args, POINTS));
    cr_assert(points1[0]);
    for (int np = 2; np <= 3; np++) {
      char out[16384], launch[2048], db[1100];
      snprintf(db, sizeof db, "%s/np%d.db", dir, np);
      snprintf(launch, sizeof launch, "-np %d '%s' capacity %s %s --db %s --out %s/r%d", np,
               SC_BINARY, sc, flags, db, dir, np);
      cr_assert_eq(run_launch(launch, out, sizeof out), 0, "%s", out);
      cr_expect_str_eq(out, one, "%d ranks printed another table", np);
      snprintf(args, sizeof args, "%s/r%d/index.html", dir, np);
      char *html = sc_test_read_file(args, NULL);
      cr_assert_not_null(html);
      cr_expect_str_eq(html, html1, "%d ranks wrote another report", np);
      free(html);
      char mine[8192];
      snprintf(mine, sizeof mine, "%s", sc_test_q1s(db, POINTS));
      cr_expect_str_eq(mine, points1, "%d ranks stored other points", np);
    }
    free(html1);
  }
}

// --- sensitivity sweeps across ranks: `mpirun -np N shardcheck run --sensitivity PCT`

// Two deployments, a closed loop and an open one near saturation, simulated in a fraction of a
// second each.
static const char *SENS_SCN = "name: sens\n"
                              "mode: sim\n"
                              "model: {preset: llama3-8b}\n"
                              "hardware: {profile: h100-sxm, gpus: 2}\n"
                              "deployments: [{tp: 1}, {tp: 2}]\n"
                              "workload:\n"
                              "  prompts:\n"
                              "    - {input: {uniform: [128, 512]}, output: {uniform: [16, 64]}}\n"
                              "  phases:\n"
                              "    - {fixed: {requests: 40, concurrency: 4}}\n"
                              "    - {rate: 24, arrival: poisson, duration: 10s}\n"
                              "slo: {ttft_p95_ms: 3000, error_rate: 0}\n"
                              "seed: 4\n";

#define SENS_FLAGS "--sensitivity 3%% --no-report --quiet" // only ever inside a format
#define SENSITIVITIES                                                                              \
  "SELECT group_concat(name || '=' || value, ';') FROM (SELECT m.name, m.value FROM metric m "     \
  "JOIN deployment d ON d.id = m.deployment_id WHERE m.name LIKE '%_sensitivity' ORDER BY "       \
  "d.idx, m.name)"

// The run and its two scaled runs shared among 2 and 3 ranks (rank p mod N runs point p: at 2
// ranks, rank 1 the prices x 0.97) print the verdicts and the sensitivity table of one process
// byte for byte, and store the same sensitivities.
Test(mpi, sensitivity_over_2_and_3_ranks_prints_and_stores_what_one_process_does) {
  const char *sc = sc_test_write_tmp("mpi-sens", "sens.yaml", SENS_SCN);
  const char *dir = sc_test_tmpdir("mpi-sens-out");
  char one[16384], args[2048], db[1100];
  snprintf(args, sizeof args, "run %s " SENS_FLAGS " --db %s/one.db", sc, dir);
  cr_assert_eq(sc_test_run_cli_clean(args, one, sizeof one), 0, "%s", one);
  cr_assert(strstr(one, "\nsensitivity: every price x0.97 and x1.03"), "%s", one);
  snprintf(db, sizeof db, "%s/one.db", dir);
  char sens1[4096];
  snprintf(sens1, sizeof sens1, "%s", sc_test_q1s(db, SENSITIVITIES));
  cr_assert(strstr(sens1, "tpot_sensitivity="), "%s", sens1);
  for (int np = 2; np <= 3; np++) {
    char out[16384], launch[2048];
    snprintf(db, sizeof db, "%s/np%d.db", dir, np);
    snprintf(launch, sizeof launch, "-np %d '%s' run %s " SENS_FLAGS " --db %s", np, SC_BINARY,
             sc, db);
    cr_assert_eq(run_launch(launch, out, sizeof out), 0, "%s", out);
    cr_expect_str_eq(out, one, "%d ranks printed another table", np);
    cr_expect_str_eq(sc_test_q1s(db, SENSITIVITIES), sens1, "%d ranks stored others", np);
  }
}

// The scaled runs are run where they are shared out: rank 1, given another seed, changes the
// x 0.97 column alone (its run), not the verdicts of rank 0's own run.
Test(mpi, sensitivity_over_ranks_takes_each_scaled_run_from_the_rank_that_ran_it) {
  const char *sc = sc_test_write_tmp("mpi-sens-own", "sens.yaml", SENS_SCN);
  const char *dir = sc_test_tmpdir("mpi-sens-own-out");
  char one[16384], out[16384], args[2048], launch[4096];
  snprintf(args, sizeof args, "run %s " SENS_FLAGS " --db %s/one.db", sc, dir);
  cr_assert_eq(sc_test_run_cli_clean(args, one, sizeof one), 0, "%s", one);
  snprintf(launch, sizeof launch,
           "-np 1 '%s' run %s " SENS_FLAGS " --db %s/a.db : -np 1 '%s' run %s --seed 99 " SENS_FLAGS
           " --db %s/b.db",
           SC_BINARY, sc, dir, SC_BINARY, sc, dir);
  cr_assert_eq(run_launch(launch, out, sizeof out), 0, "%s", out);
  char *t1 = strstr(one, "\nsensitivity:"), *t2 = strstr(out, "\nsensitivity:");
  cr_assert(t1 && t2, "%s", out);
  cr_expect_eq(t1 - one, t2 - out, "the verdicts differ:\n%s", out);
  cr_expect_eq(strncmp(one, out, (size_t)(t1 - one)), 0, "the verdicts differ:\n%s", out);
  cr_expect_str_neq(t1, t2, "rank 1's run (another seed) was not the one used:\n%s", out);
  // each row: "  LABEL  TTFT lo / hi  TPOT lo / hi  ...": the x 1.03 halves (rank 0's) agree
  const char *rows1 = strchr(t1 + 1, '\n'), *rows2 = strchr(t2 + 1, '\n');
  rows1 = rows1 ? strchr(rows1 + 1, '\n') : NULL; // past the header
  rows2 = rows2 ? strchr(rows2 + 1, '\n') : NULL;
  cr_assert(rows1 && rows2);
  for (int d = 0; d < 2; d++) {
    char a[256], b[256], l1[64], l2[64], hi1[2][32], hi2[2][32];
    sscanf(rows1 + 1, "%255[^\n]", a);
    sscanf(rows2 + 1, "%255[^\n]", b);
    cr_assert_eq(sscanf(a, "%63s %*s / %31s %*s / %31s", l1, hi1[0], hi1[1]), 3, "%s", a);
    cr_assert_eq(sscanf(b, "%63s %*s / %31s %*s / %31s", l2, hi2[0], hi2[1]), 3, "%s", b);
    cr_expect_str_eq(l1, l2);
    cr_expect_str_eq(hi1[0], hi2[0], "x1.03 TTFT: %s vs %s", a, b);
    cr_expect_str_eq(hi1[1], hi2[1], "x1.03 TPOT: %s vs %s", a, b);
    rows1 = strchr(rows1 + 1, '\n');
    rows2 = strchr(rows2 + 1, '\n');
    cr_assert(rows1 && rows2);
  }
}

// A rank that refuses its arguments (its scenario is not there) runs nothing: rank 0 says which
// scaled run is missing, in one line, and the job ends (no rank waits for ever); a rank 0 that
// cannot open its database releases the others the same way.
Test(mpi, sensitivity_over_ranks_with_a_rank_that_refuses_ends_with_one_line) {
  const char *sc = sc_test_write_tmp("mpi-sens-bad", "sens.yaml", SENS_SCN);
  const char *dir = sc_test_tmpdir("mpi-sens-bad-out");
  char out[16384], launch[4096];
  snprintf(launch, sizeof launch,
           "-np 1 '%s' run %s " SENS_FLAGS " --db %s/a.db : -np 1 '%s' run %s/absent.yaml "
           SENS_FLAGS " --db %s/b.db",
           SC_BINARY, sc, dir, SC_BINARY, dir, dir);
  int rc = run_launch(launch, out, sizeof out);
  cr_expect(rc != 0 && rc != 124, "exit %d:\n%s", rc, out);
  cr_expect(strstr(out, "shardcheck run: sensitivity: rank 1 of the MPI job ran no run with "
                        "prices x0.97"),
            "%s", out);
  snprintf(launch, sizeof launch,
           "-np 1 '%s' run %s " SENS_FLAGS " --db %s/no/such/dir/a.db : -np 1 '%s' run %s "
           SENS_FLAGS " --db %s/b.db",
           SC_BINARY, sc, dir, SC_BINARY, sc, dir);
  rc = run_launch(launch, out, sizeof out);
  cr_expect(rc != 0 && rc != 124, "exit %d:\n%s", rc, out);
  cr_expect(strstr(out, "cannot open the results database"), "%s", out);
}

// A rank that runs another build (here the same binary without its build id) is refused before
// anything is searched: one line naming the rank and its host, exit 2.
Test(mpi, ranks_of_another_build_are_refused_with_one_line_and_exit_2) {
  const char *sc = sc_test_write_tmp("mpi-build", "cap.yaml", CAP_SCN);
  const char *dir = sc_test_tmpdir("mpi-build-out");
  char cmd[2048], out[16384];
  snprintf(cmd, sizeof cmd, "objcopy --remove-section .note.gnu.build-id '%s' '%s/other' 2>&1",
           SC_BINARY, dir);
  cr_assert_eq(system(cmd), 0, "objcopy (binutils) failed: %s", cmd);
  snprintf(cmd, sizeof cmd,
           "-np 1 '%s' capacity %s --quiet --db %s/x.db : -np 1 '%s/other' capacity %s "
           "--quiet --db %s/x.db",
           SC_BINARY, sc, dir, dir, sc, dir);
  cr_expect_eq(run_launch(cmd, out, sizeof out), 2, "%s", out);
  cr_expect(strstr(out, "shardcheck capacity: mpi: rank 1 on ") &&
                strstr(out, "runs another build of shardcheck"),
            "%s", out);
  char *line = strstr(out, "shardcheck capacity:");
  cr_expect(!line || !strstr(line + 1, "shardcheck capacity:"), "one line, from rank 0: %s", out);
}

// --- load from many clients: `mpirun -np N shardcheck run` against an external target

// A launched `shardcheck serve --mode sim` (dp 2), a closed-loop and an open-loop phase.
static const char *CLIENTS_SCN =
    "name: clients\n"
    "target:\n"
    "  openai:\n"
    "    url: \"http://127.0.0.1:{port}/v1\"\n"
    "    launch: \"{shardcheck} serve --model llama-tiny --mode sim --profile h100-sxm --port "
    "{port}\"\n"
    "    model: llama-tiny\n"
    "    vocab_size: 512\n"
    "    extra_body: {ignore_eos: true}\n"
    "    ready: {path: /health, timeout: 30s}\n"
    "    stop_grace: 2s\n"
    "model: {preset: llama-tiny}\n"
    "deployments: [{dp: 2}]\n"
    "workload:\n"
    "  prompts:\n"
    "    - {input: {uniform: [16, 64]}, output: {uniform: [8, 32]}}\n"
    "  phases:\n"
    "    - {name: batch, fixed: {requests: 40, concurrency: 8}}\n"
    "    - {name: open, rate: 50, arrival: poisson, duration: 2s}\n"
    "slo: {error_rate: 0, ttft_p95_ms: 2000}\n"
    "seed: 4\n";

// What two runs of one seed must share, whoever sent the requests: the requests by phase and
// status, their tokens (recorded stamps included), and which metrics and verdicts were written.
#define SHARED_ROWS                                                                                \
  "SELECT (SELECT group_concat(x, ';') FROM (SELECT p.name || ':' || r.status || ':' || "          \
  "count(*) || ':' || sum(r.output_tokens) AS x FROM request r JOIN phase p ON p.id = "            \
  "r.phase_id GROUP BY p.name, r.status ORDER BY p.name, r.status)) || '|' || (SELECT "            \
  "sum(json_array_length(t_ns)) FROM token_times) || '|' || (SELECT group_concat(n, ',') FROM "    \
  "(SELECT DISTINCT name AS n FROM metric ORDER BY name)) || '|' || (SELECT group_concat(v, "      \
  "',') FROM (SELECT slo || '=' || pass AS v FROM verdict ORDER BY slo))"

// Two client ranks deal the requests out between them (each streams its share from its own
// process, its stamps brought onto rank 0's clock): rank 0 writes one database whose requests,
// tokens, metrics and verdicts are those of one process with the same seed.
Test(mpi, two_client_ranks_send_and_record_what_one_process_does) {
  const char *sc = sc_test_write_tmp("mpi-clients", "c.yaml", CLIENTS_SCN);
  const char *dir = sc_test_tmpdir("mpi-clients-out");
  char db1[1100], db2[1100], out[32768], launch[4096];
  snprintf(db1, sizeof db1, "%s/one.db", dir);
  snprintf(db2, sizeof db2, "%s/two.db", dir);
  int rc = sc_test_run_scenario(out, sizeof out, sc, db1, "--no-report");
  cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
  snprintf(launch, sizeof launch, "-np 2 '%s' run %s --db %s --no-report", SC_BINARY, sc, db2);
  rc = run_launch(launch, out, sizeof out);
  cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
  cr_expect(strstr(out, "verdict: PASS"), "%s", out);
  const char *r1 = strstr(out, "client rank 1 on ");
  cr_expect(r1 && strstr(out, "client rank 0 on "), "%s", out);
  long sent1 = 0;
  if (r1) sscanf(strchr(r1, ':') + 1, " %ld requests", &sent1);
  cr_expect_gt(sent1, 40, "rank 1 sent a share of the 124 requests:\n%s", out);
  char one[4096];
  snprintf(one, sizeof one, "%s", sc_test_q1s(db1, SHARED_ROWS));
  cr_expect(strstr(one, "batch:ok:40:"), "%s", one);
  cr_expect_str_eq(sc_test_q1s(db2, SHARED_ROWS), one);
  cr_expect_eq(sc_test_q1(db2, "SELECT count(*) FROM run"), 1);
  cr_expect_eq(sc_test_q1(db2, "SELECT json_array_length(config, '$.clients') FROM run"), 2);
  cr_expect_eq(sc_test_q1(db2, "SELECT json_extract(config, '$.clients[1].rank') FROM run"), 1);
  // the same host: one monotonic clock, so the measured offset is within its round trip
  cr_expect(sc_test_q1(db2, "SELECT abs(json_extract(config, '$.clients[1].offset_ns')) <= "
                            "json_extract(config, '$.clients[1].rtt_ns') FROM run"),
            "%s", sc_test_q1s(db2, "SELECT json_extract(config, '$.clients') FROM run"));
  // every stamp on rank 0's clock: no token before its request's arrival or after the run's end
  cr_expect_eq(sc_test_q1(db2, "SELECT count(*) FROM token t JOIN request r ON r.id = "
                               "t.request_id WHERE t.t_ns < r.arrival_ns OR t.t_ns > (SELECT "
                               "duration_ns FROM run)"),
               0);
}

// Client ranks drive an external target's servers; a scenario whose replicas run in this
// process is refused under a launcher of 2 ranks: one line (rank 0's), exit 2, no database.
Test(mpi, run_of_replicas_in_process_under_a_launcher_of_2_ranks_is_refused_with_one_line) {
  const char *dir = sc_test_tmpdir("mpi-run");
  char launch[2048], out[16384];
  snprintf(launch, sizeof launch, "-np 2 '%s' run quickstart --db %s/x.db", SC_BINARY, dir);
  cr_expect_eq(run_launch(launch, out, sizeof out), 2, "%s", out);
  cr_expect(strstr(out, "2 client ranks share the requests to an external target's servers") &&
                strstr(out, "this one runs its replicas in this process"),
            "%s", out);
  char *line = strstr(out, "shardcheck run:"); // the launcher adds its own notice
  cr_expect(!line || !strstr(line + 1, "shardcheck run:"), "one line, from rank 0: %s", out);
  snprintf(launch, sizeof launch, "%s/x.db", dir);
  cr_expect_eq(sc_test_file_size(launch), -1, "no database was made: %s", out);
}
#endif
