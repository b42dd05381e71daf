// The runner: drives a scenario through every deployment and phase, records everything in the
// results database, computes the metrics and verdicts, and says how the run ended.
//
// One event loop (docs/design.md, "One request"): arrivals from the workload (closed-
// loop users and open-loop schedules), token/finish/step events from the replicas, request
// timeouts, periodic device samples, flushes and progress lines. Real mode waits in ppoll on
// the replicas' fds against the monotonic clock; the simulator plugs in a virtual clock and a
// stepping wait (runner.c keeps both behind one `wait` function). Reports (plots, HTML, JUnit)
// are reports/report.h's, made by the caller from the database afterwards.
#pragma once

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/engine.h"
#include "serving/replica.h"
#include "serving/replica_clients.h"
#include "kernels/clock.h"
#include "kernels/status.h"
#include "reports/store.h"
#include "scenarios/scenario.h"

typedef enum runner_progress {
  RUNNER_PROGRESS_AUTO,  // a rewritten line on a terminal, else a plain line every 10 s
  RUNNER_PROGRESS_LINES, // a plain line every 10 s
  RUNNER_PROGRESS_NONE,
} runner_progress;

typedef struct runner_options {
  uint64_t seed;                      // used when seed_set (else the scenario's seed)
  bool seed_set;
  runner_progress progress;
  FILE *progress_out;                 // NULL: stderr
  volatile sig_atomic_t *interrupted; // optional: set (by a SIGINT handler) to stop cleanly
  // Optional: builds replica `index` of a deployment from its engine config (NULL: the kind the
  // scenario asks for, through replica_new). For stand-ins (benchmarks of the harness itself).
  sc_status (*make_replica)(void *ud, const engine_config *cfg, int index, replica **out,
                            sc_error *err);
  void *make_replica_ud;
  // Real mode with faults: the shardcheck binary that serves process replicas (`EXE worker`);
  // NULL: /proc/self/exe (right when the caller is shardcheck itself).
  const char *worker_exe;
  const char *git_rev;                // the source revision the run row records (NULL: none)
  // An external target's launched servers write their output to DIR/LABEL-replicaI.log; "{run}"
  // in it becomes the run's id. NULL: reports/out/run-{run} (where `run` writes its report).
  const char *log_dir;
  // Load from many clients (`mpirun -np N shardcheck run`, rank 0; docs/scaling-out.md): the
  // job's n_clients ranks, each one's clock against this one's (replica_clients_sync); an
  // external target's replicas deal their requests out among them. 0 or 1: this process alone.
  int n_clients;
  replica_client_rank *clients;
} runner_options;

runner_options runner_options_defaults(void);

typedef struct runner_result {
  int64_t run_id;
  char status[16];      // complete | interrupted | failed
  char error[512];      // when failed: the first deployment error
  int n_verdicts;       // SLO verdict rows written
  int n_failed;         // of them failing
  uint64_t requests;    // requests sent, all deployments
  uint64_t tokens;      // output tokens delivered
  double wall_s;        // run duration on the run's clock
  uint64_t t0_ns;       // the run's clock at its start: stored times are relative to it
} runner_result;

// Runs s, recording into db. Returns SC_OK when the run took place (whatever its verdicts,
// also when interrupted or when a deployment failed: res->status says so); SC_INVALID for a
// scenario this build cannot run (a fault kind not injected yet, backend cuda without CUDA)
// before anything
// is recorded; SC_IO/SC_OOM when the database or memory fails (the run row is left "running",
// i.e. incomplete).
// Real mode: refuses the weight and KV dtypes the real backends cannot hold (int4, fp8; an fp8
// KV cache), in the model and in hot swaps, naming the key (`shardcheck validate` and
// runner_run both ask). SC_OK in sim mode and against an external target.
sc_status runner_check_dtypes(const scenario *s, sc_error *err);

sc_status runner_run(const scenario *s, store *db, const runner_options *o, runner_result *res,
                     sc_error *err);

// How much the run's latencies move with the prices: per deployment, the pooled mean TTFT and
// TPOT of the run (base) and their relative change, (scaled - base) / base, with every price of
// the profile x (1 - frac) ([0]) and x (1 + frac) ([1]); sens = the larger |change| / frac
// (NaN where a mean is missing or 0).
typedef struct runner_sensitivity_row {
  char label[64];
  double base[2];      // mean TTFT, mean TPOT (ms)
  double change[2][2]; // [x (1 - frac), x (1 + frac)][TTFT, TPOT]
  double sens[2];      // TTFT, TPOT
} runner_sensitivity_row;

typedef struct runner_sensitivity {
  double frac;
  int n;
  runner_sensitivity_row rows[SCN_MAX_DEPLOYMENTS];
} runner_sensitivity;

// Runs sim scenario s twice more, its profile's prices x (1 - frac) and x (1 + frac)
// (sim_hw_scale; s->hw is restored after), into scratch in-memory databases with o's options
// (no progress lines), and stores on the pooled deployment rows of run `run_id` in db the
// metrics ttft_sensitivity and tpot_sensitivity (docs/metrics.md). SC_INVALID for a real
// scenario, frac outside (0, 0.5), or a scaled run that did not complete.
// Under MPI (active, several ranks, o->n_clients <= 1) this is rank 0's part of a collective:
// the run itself was point 0, the scaled runs are points 1 and 2, and rank p mod N runs point p
// (capacity's split); rank 0 gathers the others' means (waiting as long as they run) and alone
// stores and returns what one process would. Every other rank calls runner_sensitivity_share.
sc_status runner_sensitivity_run(scenario *s, store *db, int64_t run_id, double frac,
                                 const runner_options *o, runner_sensitivity *out, sc_error *err);
// A rank other than 0 of such a job: runs its points of scenario s (its own copy) and sends
// their means, or their failures, to rank 0. s NULL: runs nothing and sends nothing (its own
// arguments were refused; rank 0 then says which scaled run is missing). Rank 0 calls it (s NULL)
// only when it will not call runner_sensitivity_run, to release the others. Collective.
sc_status runner_sensitivity_share(scenario *s, double frac, const runner_options *o,
                                   sc_error *err);
