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

#include "tests/helpers.h"

// Open MPI refuses to run as root unless told; CI and this host run tests as root.
static void allow_root(void) {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
}

// Runs `mpirun --oversubscribe -np N mpi_check ARGS`; its stdout and stderr in out, its exit
// code back.
static int run_mpi(int np, const char *args, char *out, size_t cap) {
  allow_root();
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s' --oversubscribe -np %d '%s' %s 2>&1 </dev/null", SC_MPIEXEC, np,
           SC_MPI_CHECK, args);
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
#endif
