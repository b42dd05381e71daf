// The runner's state and the functions its files share (runner/runner.h is the public side).
// Internal to runner/. runner.c holds the loop (requests, events, waits, phases, deployments,
// the run); progress.c the progress lines; verdicts.c a deployment's metric rows and checks and
// the run's SLO verdicts; target.c an external target's replica options.
#pragma once

#include <poll.h>
#include <stdbool.h>
#include <stdint.h>

#include "runner/runner.h"
#include "serving/launch.h"
#include "serving/replica.h"
#include "serving/request.h"
#include "serving/router.h"
#include "faults/runtime.h"
#include "reports/metrics.h"
#include "reports/recorder.h"
#include "scenarios/workload.h"

enum {
  EV_BATCH = 8192,           // events pulled from a replica per poll
};

// One phase as run: a ramp runs one of these per concurrency step.
typedef struct phase_run {
  const scn_phase *p;
  char name[64];
  int concurrency;          // closed loop: users; 0 for open loop
  int64_t id;
  uint64_t start, warmup_end, end;
  uint64_t first_seq, end_seq; // requests [first_seq, end_seq)
  int peak_queue, peak_batch;
  int limit_violations;     // steps past limits.max_running or limits.token_budget
  int preemptions;          // sequences preempted to make room in the KV cache (steps' sums)
  double kv_peak;
  double bubble_ns;          // sim, pp > 1: sum of bubble x duration over the steps
  double busy_ns;            // sum of the step durations of every replica
  double ttft_p95_ms;       // filled by the metrics pass
  double output_tok_s;
  uint64_t send_stop;       // when it stopped sending (ns since the run's start)
  // an external server's own figures over the phase, from its /metrics scrapes (every
  // replica's): the scrapes, those with a request running, and the largest running, waiting
  // and KV usage (NaN: not exposed); srv_why: why one is missing
  int srv_scrapes, srv_busy;
  double srv_running, srv_waiting, srv_kv;
  char srv_why[200];
  // the client against its schedule: p99 of how late it sent, the rate and concurrency it
  // achieved, and whether it fell behind (MT_CLIENT_LATE_MS)
  double late_p99_ms, arrival_rate, mean_concurrency;
  bool saturated;
  // a ramp with saturation: the step's output tok/s and TTFT p95 (ms) after its warm-up, as the
  // stop rule saw them
  double step_tok_s, step_ttft95;
  // an external server's prefix cache over the phase (docs/metrics.md, the prefix cache): the
  // growth of its counters of prompt tokens found and looked up, summed over the replicas, from
  // the latest scrape before the phase to its last (cache_reps replicas gave it), or the mean
  // of its hit-rate gauge over the phase's scrapes (gauge_n of them); cache_names: whose (static);
  // cache_bad: why it cannot be told (a counter went down, the counters are malformed)
  double cache_hits, cache_queries, gauge_sum;
  int cache_reps, gauge_n;
  const char *cache_names;
  char cache_bad[160];
} phase_run;


// An HTTP replica's prefix-cache counters at the runner's latest sample of its scrapes.
typedef struct srv_cache {
  bool have;
  double hits, queries;
  const void *ph; // the phase its counters' growth last went to (counted in its cache_reps)
} srv_cache;

typedef struct dep_result {
  int64_t id;
  int gpus;
  bool built;
  mt_summary pooled;
  mt_summary cls_pooled[SCN_MAX_CLASSES]; // per prompt class, when the workload has several
  double peak_tok_s, kv_peak; // peak_tok_s: NaN until a phase delivered (rn_step_tok_s)
  char peak_how[200];         // the phase it came from (its metric row's note)
  int peak_queue, peak_batch;
  int limit_violations;
  int preemptions;
  int knee;                 // -1 none or not computed
  bool has_knee;
  bool has_sat;             // a ramp with saturation ran: sat_knee holds its knee
  double sat_knee;          // the concurrency of the step before the first saturated one (NaN:
                            // the ramp never saturated)
  double speedup, efficiency;
  fault_result faults;      // what the verdicts after faults found (faults/runtime.h)
  // greedy outputs that differ from the first deployment's for the same request; NaN when
  // not compared (mode sim, sampling), 0 for the first deployment itself
  double layout_mismatches;
  // the deployment's own values of metrics no summary carries, kept as written (its metric
  // rows of phase 0): the SLO verdicts read them by name, as they read the fault verdicts'
  struct {
    const char *name; // static
    double v;
    char why[160]; // NaN: why it was not measured
  } kept[32];
  int n_kept;
  char saturated[200]; // "" or which phases' client fell behind (the verdicts' note)
} dep_result;

typedef struct ev_meta {
  uint64_t t; // when the event was pulled, ns since the run's start
  int rep;    // from which replica
} ev_meta;

typedef struct rt {
  const scenario *s;
  bool sim;                 // mode sim: a virtual clock, replicas stepped in it, no waiting
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
  replica **reps;           // (dp) built one by one: n_reps so far
  int n_reps;
  bool *held;               // (n_reps) held by dispatch_req during issue_together's turn
  bool holding;             // in issue_together: dispatch_req holds what it submits to
  struct pollfd *fds;       // (n_reps) what wait_until sleeps on
  router *rt;
  req_table reqs;           // all requests of the deployment, index = key
  phase_run *phases;        // (n_phases) of the deployment
  int n_phases, cur;
  // closed-loop users of the current phase
  uint64_t *user_next;      // (n_users) next send time; UINT64_MAX: waiting for its request
  int n_users;
  uint64_t user_wake;       // min of user_next
  // conversations (workload_conversations): a closed-loop user's, and the open loop's next turns
  int64_t *user_conv;       // (n_users) the conversation it is in; -1: its next starts one
  int *user_turn;           // (n_users) the turn it sends next
  uint64_t *user_prev;      // (n_users) the key of its last turn (UINT64_MAX: none)
  struct rn_turn {          // an open-loop conversation's next turn, due at t
    uint64_t t, prev;
    int64_t conv;
    int turn;
  } *turns;                 // (n_turns, capacity cap_turns) in no order
  int n_turns, cap_turns;
  int64_t next_conv;        // the deployment's next new conversation
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
  bool all_dead;            // every replica died with no fault plan to bring one back
  bool line_open;           // a \r progress line is on the terminal
  replica_event *ev;        // (cap_ev) events pulled, waiting to be handled
  ev_meta *ev_meta;         // (cap_ev)
  size_t cap_ev;
  sc_error err;             // first database error
  sc_status db_status;
  fault_rt *fr;             // the faults of the current deployment (faults/runtime.h)
  // the first deployment's greedy outputs by request index (rn_layout_equivalence)
  uint64_t *ref_hash;       // (n_ref) fv_output_hash of the request's tokens (0: ids unknown)
  uint64_t *ref_text;       // (n_ref) a server's: the hash of its streamed text (0: none)
  bool *ref_ok;             // (n_ref) it completed
  size_t n_ref;
  bool have_ref;
  engine_config ec;         // the replicas' engine config (a reference run rebuilds one)
  int sweep;                // every-rank sweeps: which run of the deployment this is
  char log_dir[1024];       // launched servers' and exec faults' logs (the run's report directory)
  uint64_t *server_seen;    // (dp) an HTTP replica's latest scrape recorded (its t_ns); NULL: none
  srv_cache *cache_seen;    // (dp) an HTTP replica's prefix-cache counters at the latest sample
} rt;

static inline uint64_t now_rel(rt *r) { return sc_clock_now(&r->clock) - r->t0; }

// Keeps the first database error; true when s is SC_OK.
static inline bool db_ok(rt *r, sc_status s) {
  if (s != SC_OK && r->db_status == SC_OK) r->db_status = s;
  return s == SC_OK;
}
static const uint64_t LINE_NS = 10000000000ull;   // plain progress lines
static const uint64_t TTY_NS = 500000000ull;      // terminal progress refresh

// --- progress (runner/progress.c)
// The progress line: while a phase runs (a rewritten line on a terminal, else every 10 s),
// and once when it ends (done: its own totals).
void rn_progress(rt *r, uint64_t now, bool done);
// A line of its own (a deployment starting, a replica lost): clears a rewritten progress line
// first. Nothing when progress is off.
void rn_note(rt *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// --- runner/runner.c
// What phase ph delivered after its warm-up: the output tokens of any of its requests (warm-up
// ones too) received in [warm-up end, end], per second (NaN: no such window); *tokens (may be
// NULL) gets the count. A ramp's saturation rule and peak_output_tok_s read it: a closed-loop
// step whose requests outlast its hold has no request arriving after its warm-up, yet it
// delivers (docs/metrics.md).
double rn_step_tok_s(const rt *r, const phase_run *ph, double *tokens);

// Refuses (SC_INVALID, one line) a scenario whose replicas are MPI jobs when this build has no
// MPI, no launcher is on PATH, or it asks what such replicas cannot do (runner/mpi_run.c).
sc_status rn_refuse_mpi(const scenario *s, sc_error *err);
// The client ranks of a run from many clients into the run's config JSON (an object, conf):
// "clients": [{rank, host, offset_ns, rtt_ns}, ...]; nothing for a run of one process.
void rn_clients_config(const runner_options *o, void *conf);

// --- metrics and verdicts (runner/verdicts.c)
// The summaries of a deployment's requests (mt_summarize): per started phase k, sums[k * (1 +
// nc)] of every request and sums[k * (1 + nc) + 1 + cl] of class cl, nc the classes when the
// workload has several (else 0); pooled over the phases into dr->pooled and dr->cls_pooled.
// They come from the runner's own records, not the rows, so they are computed while the
// recorder writes its backlog (a simulated run's step and token rows), which run_deployment
// waits for before rn_deployment_metrics stores them.
typedef struct dep_sums {
  mt_summary *v;
  int nc;
} dep_sums;

// Stores metric `name` = v of the current deployment (phase_id 0: the whole deployment); a
// database error is kept in r (db_ok).
void rn_add_metric(rt *r, int64_t phase_id, const char *name, double v);
// Fills out (out->v: the caller frees it, also on error) and dr's pooled summaries. SC_OOM, or
// the status of a failed summary (r->err says which).
sc_status rn_deployment_summaries(rt *r, dep_result *dr, dep_sums *out);
// Stores the summaries (rn_deployment_summaries) and the phases' own figures as metric rows.
sc_status rn_deployment_metrics(rt *r, dep_result *dr, const dep_sums *sums);
// Greedy outputs against the first deployment's (layout_mismatches); the first keeps them.
// Where a server sent text without token ids the text is compared (and the note says so).
sc_status rn_layout_equivalence(rt *r, dep_result *dr);
// The kind of replica the deployment runs on, as the metric table's rows name it.
mt_kind rn_kind(const rt *r);
// The deployment's metrics against their rows; a disagreement fails the run (r->res->error).
void rn_audit_metrics(rt *r);
// After the last deployment: scaling metrics and every SLO verdict row of the n deployment
// runs drs. Returns the first database error, or SC_OOM.
sc_status rn_finish_run(rt *r, dep_result *drs, int n);

// --- an external target's replicas (runner/target.c)
// What one HTTP replica's options point into: its templates expanded.
typedef struct http_strings {
  char url[1200], ready[1400], metrics[1400], admin[1400], command[8192], log[1400], gpus[256],
      exe[1024];
  char env[SCN_MAX_TARGET_ENV + 8][700];
  const char *envp[SCN_MAX_TARGET_ENV + 9];
} http_strings;

// The directory launched servers log to (runner_options.log_dir, "{run}" the run's id).
void rn_log_dir(const rt *r, char *out, size_t cap);
// Fills o (pointing into hs) for replica i of deployment d: a free port, its GPU ids (the
// next tp x pp of hardware.devices), the url, launch command and environment expanded, its
// log file and readiness URL. err says what failed.
sc_status rn_http_options(rt *r, const scn_deployment *d, const char *label, int i,
                          replica_http_options *o, http_strings *hs, sc_error *err);
