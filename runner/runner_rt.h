// The runner's private state, shared by its two files: runner.c (the event loop, requests,
// phases, deployments, metrics) and runner_faults.c (the fault timeline as it runs: injection,
// detection, retries and resumes, restarts, and the verdicts after faults). Internal to
// scenarios/.
#pragma once

#include <poll.h>
#include <stdbool.h>
#include <stdint.h>

#include "serving/replica.h"
#include "serving/router.h"
#include "reports/metrics.h"
#include "runner/recorder.h"
#include "runner/runner.h"
#include "scenarios/workload.h"

typedef enum req_state { REQ_INFLIGHT, REQ_DONE } req_state;

// One request as the client sees it. Times: ns since the run's start.
typedef struct req_rec {
  uint64_t arrival, dispatch, finish;
  uint64_t *tok;          // (n_tok) when each output token was seen
  int32_t *ids;           // (n_tok) the tokens' ids (a resume continues from them)
  int n_tok, cap_tok;
  int retries;            // resubmissions after its replica was lost (retry or resume)
  int resumed;            // of them, resumes from prompt + tokens already sent
  int fault;              // the planned fault whose path it crossed (index), -1 none
  uint64_t retry_at;      // waiting for a retry: when (ns since the run's start)
  bool waiting;           // waiting for a retry (not dispatched)
  bool storm;             // cancelled by a cancel storm: its replica's ack is awaited
  int prompt_tokens, max_tokens, class_idx;
  int phase;              // index into the deployment's phase runs
  int replica;            // -1: never dispatched
  int version;            // the weights that serve it (0: the initial ones, +1 per hot swap)
  int user;               // closed loop: the user who sent it; -1: open loop
  req_state state;
  bool warmup, dispatched;
  mt_status status;
  char reason[32];
} req_rec;

// One phase as run: a ramp runs one of these per concurrency step.
typedef struct phase_run {
  const scn_phase *p;
  char name[64];
  int concurrency;          // closed loop: users; 0 for open loop
  int64_t id;
  uint64_t start, warmup_end, end;
  uint64_t first_seq, end_seq; // requests [first_seq, end_seq)
  int peak_queue, peak_batch;
  double kv_peak;
  double bubble_ns;          // sim, pp > 1: sum of bubble x duration over the steps
  double busy_ns;            // sum of the step durations of every replica
  double ttft_p95_ms;       // filled by the metrics pass
  double output_tok_s;
} phase_run;

typedef struct dep_result {
  int64_t id;
  int gpus;
  bool built;
  mt_summary pooled;
  double peak_tok_s, kv_peak;
  int peak_queue, peak_batch;
  int knee;                 // -1 none or not computed
  bool has_knee;
  double speedup, efficiency;
  // after faults (runner_faults.c; NaN when not measured)
  bool faulted;
  double detect_ms, recover_ms, lost, kv_leak, mismatches;
  struct {                  // every metric the fault verdicts wrote (SLO keys can name them)
    const char *name;       // static
    double v;
  } fm[32];
  int n_fm;
} dep_result;

typedef struct ev_meta {
  uint64_t t; // when the event was pulled, ns since the run's start
  int rep;    // from which replica
} ev_meta;

typedef struct rt {
  const scenario *s;
  bool sim;                 // mode sim: virtual clock, simulated replicas, no waiting
  uint64_t vnow;            // sim: the virtual clock (ns)
  uint64_t wall_start;      // sim: monotonic ns at the run's start (progress pacing)
  const runner_options *o;
  store *db;
  recorder *rec;            // request, step and sample rows go through it
  runner_result *res;
  sc_clock clock;
  uint64_t t0;              // clock at the run's start
  uint64_t seed;
  int64_t run_id;
  workload *wl;
  mt_goodput good;
  // current deployment
  const scn_deployment *dep;
  int dep_idx;
  int64_t dep_id;
  replica **reps;
  int n_reps;
  bool *eligible;           // (n_reps)
  bool *held;               // (n_reps) held by dispatch_req during issue_together's turn
  bool holding;             // in issue_together: dispatch_req holds what it submits to
  struct pollfd *fds;       // (n_reps) what wait_until sleeps on
  router *rt;
  req_rec *reqs;            // (n_reqs) all requests of the deployment, index = key
  size_t n_reqs, cap_reqs;
  size_t low;               // every request below it is done
  int inflight;
  phase_run *phases;        // (n_phases) of the deployment
  int n_phases, cur;
  // closed-loop users of the current phase
  uint64_t *user_next;      // (n_users) next send time; UINT64_MAX: waiting for its request
  int n_users;
  uint64_t user_wake;       // min of user_next
  // open loop
  uint64_t arrival_j, next_arrival;
  bool sending;
  uint64_t send_end;        // closed ramp / rate duration: no arrival at or after it
  int sent;                 // requests sent in the phase
  // progress
  uint64_t next_tick, next_sample, next_line;
  uint64_t tok_window, tok_window_start;
  double tok_rate;
  double *ttft_scratch;
  size_t cap_ttft;
  bool tty;
  bool stopping;            // interrupted
  bool line_open;           // a \r progress line is on the terminal
  replica_event *ev;        // (cap_ev) events pulled, waiting to be handled
  ev_meta *ev_meta;         // (cap_ev)
  size_t cap_ev;
  sc_error err;             // first database error
  sc_status db_status;
  struct rf_state *rf;      // faults and retries of the current deployment (runner_faults.c)
  bool *busy;               // (n_reps) a restart owns the replica: no call may touch it
  int probe;                // an UNHEALTHY replica the next request may go to (a half-open
                            // circuit: it turns healthy again once a request succeeds); -1
  engine_config ec;         // the replicas' engine config (a reference run rebuilds one)
  int sweep;                // every-rank sweeps: which run of the deployment this is
} rt;


static inline uint64_t now_rel(rt *r) { return sc_clock_now(&r->clock) - r->t0; }

// Keeps the first database error; true when s is SC_OK.
static inline bool db_ok(rt *r, sc_status s) {
  if (s != SC_OK && r->db_status == SC_OK) r->db_status = s;
  return s == SC_OK;
}

// --- runner.c
// A line on the progress stream (clearing a rewritten line first).
void progress_note(rt *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Ends request k with status st at time t and records it.
void finish_req(rt *r, uint64_t k, mt_status st, const char *reason, const char *error,
                uint64_t t);
// Sends request k (not dispatched) to a healthy replica at time t: its prompt, continued by
// the tokens already delivered when it has some (a resume). False when no replica is healthy
// (nothing changed). A submit the replica refuses ends the request as failed.
bool dispatch_req(rt *r, uint64_t k, uint64_t t);
// The engine config of d's replicas with model m and weights held as wdt (a hot swap builds
// the config of its new weights this way): sim mode adds the device, the priced shapes and
// dtypes and the planner's memory. err says why d does not fit.
sc_status rt_engine_config(rt *r, const scn_deployment *d, const model_config *m, sc_dtype wdt,
                           engine_config *c, sc_error *err);

// --- runner_faults.c (every function is a no-op when the scenario has no faults, except the
// retry policy: rf_on_failed and the retries that rf_tick sends)
// Plans the deployment's faults and snapshots this process's resources (before replicas).
sc_status rf_begin(rt *r);
// Phase run k just started: faults timed from its workload phase get their times.
void rf_phase_started(rt *r, int k);
// Injects and ends due faults, retries due requests, notices dead replicas (detection) and
// restarts them. Called once per loop turn.
void rf_tick(rt *r, uint64_t now);
// The earliest time rf_tick has something to do (UINT64_MAX: nothing).
uint64_t rf_next(rt *r);
// A FAILED event for request k from replica rep: true when the retry policy took it (retry,
// resume or a final failure recorded here); false: the caller records the failure.
bool rf_on_failed(rt *r, int rep, const replica_event *ev, uint64_t t);
// A STEP event from rep (straggler scores).
void rf_on_step(rt *r, int rep, const engine_step_info *si, uint64_t t);
// An event for request k that ended on the client's side (a storm's cancel acknowledged).
void rf_on_late(rt *r, int rep, const replica_event *ev, uint64_t t);
// True while the fault machinery still waits on replicas (a storm's cancel acks, restarts).
bool rf_busy(rt *r);
// True when the deployment has faults planned (the scenario has a faults block).
bool rf_faulted(const rt *r);
// The weights replica rep serves (0 before any hot swap).
int rf_version(const rt *r, int rep);
// Whether request q may go to replica rep: a resume stays on the weights it started with.
bool rf_may_take(const rt *r, int rep, const req_rec *q);
// No replica could take new request k at t: true when it was queued to wait for one that is
// coming back (a restart or a hot swap under way); false: nothing will, the caller fails it.
bool rf_hold(rt *r, uint64_t k, uint64_t t);
// The environment entries the deployment's workers start with (NULL: none): libfaketime and
// its clock file when the scenario jumps the clock. Valid after rf_begin, until rf_free.
const char *const *rf_worker_env(const rt *r);
// The libfaketime a clock jump preloads into the workers (SHARDCHECK_LIBFAKETIME, else the
// first of the distributions' paths that exists); NULL when there is none.
const char *rf_faketime_lib(void);
// After the deployment's last phase, replicas still up: KV leak check, history check,
// recovery times, equivalence; fault rows and metrics are written. Then replicas are freed
// by the caller and rf_after_free checks for leaked threads, fds and processes.
sc_status rf_end(rt *r, dep_result *dr);
void rf_after_free(rt *r);
void rf_free(rt *r);
