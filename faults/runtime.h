// The fault runtime: a deployment's planned faults (faults/timeline.h) as they run, and the
// verdicts after them. The runner calls it at a few named points and knows nothing else of it:
//
//   fault_rt_begin        before the deployment's replicas are built (plans the faults,
//                         snapshots this process's resources, sets up clock jumps)
//   fault_rt_phase_started  a phase run began (faults timed from a workload phase get times)
//   fault_rt_tick         once per loop turn (inject and end due faults, notice dead and
//                         unhealthy replicas and restart them, drive hot swaps, see clock jumps)
//   fault_rt_next         the earliest time tick has something to do
//   fault_rt_on_failed / _on_step / _on_late   replica events that concern it
//   fault_rt_end          after the last phase, replicas still up (the verdicts)
//   fault_rt_after_free   once the replicas are gone (leaked threads, fds, processes)
//
// Every call is a no-op when the scenario has no faults. What it does, by job:
//   faults/runtime.c     the plan, detection, the loop's hooks
//   faults/inject.c      injection through the replica handle, cancel storms, clock jumps
//   faults/supervisor.c  restarts of lost replicas (a thread in real mode)
//   faults/hot_swap.c    rolling weight swaps and their quality delta
//   faults/straggler.c   straggler scores from step times
//   faults/judge.c       after the last phase: KV leaks, the request history, recovery times,
//                        equivalence with a fault-free engine, SLOs around each fault, rows
// Routing, retries and resumes are the router's (serving/router.h): they run without faults
// too. The fault runtime tells the router which replicas a restart or swap owns.
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"
#include "faults/timeline.h"
#include "kernels/clock.h"
#include "kernels/status.h"
#include "reports/metrics.h"
#include "reports/recorder.h"
#include "reports/store.h"
#include "scenarios/scenario.h"
#include "scenarios/workload.h"
#include "serving/replica.h"
#include "serving/request.h"
#include "serving/router.h"

// How the fault runtime reaches the runner.
typedef struct fault_hooks {
  void *ud;
  uint64_t (*now)(void *ud);                // ns since the run's start
  void (*note)(void *ud, const char *line); // one line on the progress stream
  // Ends request key at t with status st (a cancel storm's cancels).
  void (*finish)(void *ud, uint64_t key, req_status st, const char *reason, const char *error,
                 uint64_t t);
} fault_hooks;

// What the fault runtime sees of the deployment the runner drives. Everything it points to
// outlives the fault runtime.
typedef struct fault_ctx {
  const scenario *s;
  const scn_deployment *dep;
  int sweep; // every-rank sweeps: which run of the deployment this is
  uint64_t seed;
  bool sim;             // simulated replicas on a virtual clock
  sc_clock clock;       // the run's clock (a hot swap's engine config takes it)
  replica *const *reps; // (n_reps) the replicas, built after fault_rt_begin
  int n_reps;
  router *rt;
  req_table *reqs;
  workload *wl;           // the requests' prompts (equivalence, swap quality)
  const mt_goodput *good; // the SLO's per-request limits (windows around faults)
  engine_config ec;       // the replicas' engine config (weights version 0)
  int n_phases;           // phase runs of the deployment
  store *db;
  recorder *rec;
  int64_t run_id, dep_id;
  const char *log_dir; // where an exec fault's command writes its output (NULL: discarded)
  fault_hooks h;
} fault_ctx;

// What the verdicts of a deployment found (SLO keys can name every metric in fm).
typedef struct fault_result {
  bool faulted;
  double detect_ms, recover_ms, lost, kv_leak, mismatches; // NaN when not measured
  struct {
    const char *name; // static
    double v;
    char why[160]; // NaN: why it was not measured
  } fm[32]; // every metric the fault verdicts wrote
  int n_fm;
} fault_result;

typedef struct fault_rt fault_rt;

// Plans the deployment's faults and snapshots this process's resources; *out is set also on
// error (free it with fault_rt_free). SC_OOM, or SC_INVALID/SC_IO from the plan or a clock
// jump's set-up (err says why).
sc_status fault_rt_begin(const fault_ctx *c, fault_rt **out, sc_error *err);
// Phase run k (of workload phase p; prev: the phase of run k - 1, NULL for k = 0) began at
// start: faults timed from p (or, for k = 0, from the run) get their times.
void fault_rt_phase_started(fault_rt *f, int k, const scn_phase *p, const scn_phase *prev,
                            uint64_t start);
// Every replica is ready and no phase has begun: against an external target with a hot swap
// planned, the old weights' greedy tokens are taken here (the quality delta, faults/hot_swap.c).
void fault_rt_replicas_ready(fault_rt *f);
void fault_rt_tick(fault_rt *f, uint64_t now);
uint64_t fault_rt_next(const fault_rt *f); // UINT64_MAX: nothing to do
// A FAILED event for request ev->key from replica rep: attributes it to the fault that caused
// it (detection by symptom). The retry decision is the router's.
void fault_rt_on_failed(fault_rt *f, int rep, const replica_event *ev, uint64_t t);
// A STEP event from rep (straggler scores).
void fault_rt_on_step(fault_rt *f, int rep, const engine_step_info *si, uint64_t t);
// An event for a request that ended on the client's side (a storm's cancel acknowledged).
void fault_rt_on_late(fault_rt *f, int rep, const replica_event *ev, uint64_t t);
// True while it still waits on replicas (a storm's cancel acks, restarts under way).
bool fault_rt_busy(const fault_rt *f);
// True when the deployment has faults planned (the scenario has a faults block).
bool fault_rt_faulted(const fault_rt *f);
// The environment entries the deployment's workers start with (NULL: none): libfaketime and
// its clock file when the scenario jumps the clock. Valid until fault_rt_free.
const char *const *fault_rt_worker_env(const fault_rt *f);
// After the last phase (ending at end, ns since the run's start), replicas still up: KV leak
// check, history check, recovery times, equivalence; fault rows and metrics are written and
// what they found goes to res. Returns the first database error.
sc_status fault_rt_end(fault_rt *f, uint64_t end, fault_result *res, sc_error *err);
// Once the replicas are freed: leaked threads, fds and processes. Returns the first database
// error.
sc_status fault_rt_after_free(fault_rt *f, sc_error *err);
void fault_rt_free(fault_rt *f); // NULL is a no-op

// The libfaketime a clock jump preloads into the workers (SHARDCHECK_LIBFAKETIME, else the
// first of the distributions' paths that exists); NULL when there is none.
const char *fault_faketime_lib(void);

// What a planned fault asks of its replica (every implementation takes every kind): its start,
// or its end (a hang's resume, a clear for the rest). `shardcheck serve`'s admin faults use it
// too, so a fault means the same on a server as in a scenario.
replica_fault fault_replica_fault(const ft_fault *ft, bool end);
