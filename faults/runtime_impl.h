// The fault runtime's state, shared by its files (faults/runtime.h lists them by job).
// Internal to faults/.
#pragma once

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include "faults/quality.h"
#include "faults/runtime.h"
#include "faults/timeline.h"
#include "faults/verdict.h"
#include "serving/supervisor.h"

// Straggler scores (faults/straggler.c): a replica's step durations over the last HIST steps;
// the median of the latest FAST against its peers' (or its own older ones); scored once it has
// MIN_STEPS; flagged after PERSIST consecutive steps above STRAGGLER_ON.
enum { HIST = 64, FAST = 16, MIN_STEPS = 32, PERSIST = 8 };
static const double STRAGGLER_ON = 2.0;  // step time / reference above this: a straggler
static const double STRAGGLER_OFF = 1.5; // ... and no longer below this
// Recovery (faults/judge.c): throughput in 1 s windows back to 90% of its level before.
static const uint64_t RECOVERY_WINDOW_NS = 1000000000ull;
static const double RECOVERY_FRAC = 0.9;

typedef struct rep_state {
  bool dead_seen; // its death was handled (detection, restart)
  bool unhealthy_seen;
  // restart (real mode: the supervisor owns the replica while it runs)
  bool thr_started; // a restart was asked for and not collected yet
  sc_status restart_st; // the outcome (the supervisor's, once frt_join_restart collects it)
  sc_error restart_err;
  uint64_t restart_begin;
  int fault; // the fault whose restart this is (-1 none)
  // hot swap: the supervisor's job is a swap (to swap_cfg) rather than a restart
  bool swapping;
  const engine_config *swap_cfg;
  // straggler score: the replica's recent step durations
  uint64_t hist[HIST];
  int n_hist;
  int above; // consecutive steps scoring above the threshold
  bool flagged;
  bool told; // an unexplained straggler flag was printed
} rep_state;

typedef struct fault_run {
  uint64_t at, end; // ns since the run's start; UINT64_MAX: not known yet / never
  bool injected, ended, detected, recovered;
  uint64_t injected_ns, detected_ns, recovered_ns, ended_ns;
  int affected;
  int acks;         // cancel storm: cancels not acknowledged yet
  double reload_ms; // a restart after it: how long the replica took to come back
  uint64_t back_ns; // when the last replica it took came back (restarted); 0: none did
  char note[160];
  // exec: the commands started (one per target replica), reaped by the loop
  struct launch_proc **exec; // (c.n_reps) NULL where none runs
  int exec_left;             // still running
  int exec_status;           // the first non-zero wait status (0: all succeeded so far)
  // hot swap: a rolling swap, one replica at a time: drain, load, admit again
  int version;              // the weights it installs (index into fault_rt.vcfg)
  int sw_next;              // replicas taken so far (the next one in order)
  int sw_rep;               // the one being swapped (-1: none)
  int sw_stage;             // SW_*
  uint64_t sw_begin;        // when the current stage began
  int sw_done_reps;         // replicas now on the new weights
  double drain_ms, load_ms; // the longest drain and load
  bool swap_done;
  uint64_t swap_done_ns;
  double dip;           // 1 - the lowest 1 s throughput during the swap / the pre-swap level
  double agreement, kl; // quality delta between the old and new weights (NaN: not measured)
  char quality_why[160]; // why the quality delta was not measured ("": it was, or not tried)
} fault_run;

enum { SW_NEXT, SW_DRAIN, SW_LOAD };

struct fault_rt {
  fault_ctx c;
  ft_plan plan;
  fault_run *fr; // (plan.n)
  rep_state *rs; // (n_rs = dp)
  int n_rs;
  bool faulted;
  uint64_t *phase_start; // (c.n_phases) when each phase run began (0: not yet)
  fv_resources before;
  bool have_before;
  engine_config *vcfg; // (n_vcfg) the engine config of each weight version, 0 the initial
  int n_vcfg;
  int swap_active; // the hot swap rolling now (-1: none): one at a time
  // an external target's quality delta: the old weights' greedy tokens, taken on replica
  // swap_ref_rep before the first phase (swap_ref.n NULL: not taken; swap_ref_why says why)
  fq_greedy swap_ref;
  fq_prompts swap_ref_prompts;
  int swap_ref_rep;
  char swap_ref_why[200];
  // clock jumps (real mode): the workers run under libfaketime, reading their wall clock's
  // offset from clock_file; env is what they are started with
  char clock_dir[64], clock_file[96];
  char env_buf[5][600];
  const char *env[6];
  int64_t clock_offset_ns;
  int unexplained;     // replica losses no kill, hang or exec fault explains
  char equiv_how[160]; // how the outputs were compared when it is worth saying ("" else)
  bool *explained;     // (plan.n x n_rs) fault i explained a loss of replica r: [i * n_rs + r]
  fault_result *res;   // from fault_rt_end on: where the metrics written are kept for the SLOs
  sc_status db_status; // the first database error, and why
  sc_error err;
  supervisor *sup; // the supervisor thread (real mode; NULL: none)
};

// --- the runner's hooks
static inline uint64_t frt_now(const fault_rt *f) { return f->c.h.now(f->c.h.ud); }

static inline void finish(fault_rt *f, uint64_t key, req_status st, const char *reason,
                          const char *error, uint64_t t) {
  f->c.h.finish(f->c.h.ud, key, st, reason, error, t);
}

// A line on the progress stream.
void frt_note(fault_rt *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// Keeps the first database error; true when s is SC_OK.
static inline bool db_ok(fault_rt *f, sc_status s) {
  if (s != SC_OK && f->db_status == SC_OK) f->db_status = s;
  return s == SC_OK;
}

// --- faults/runtime.c
// The injected fault of one of the given kinds (bits 1 << scn_fault_kind) that a symptom of
// replica rep belongs to: the latest on it (or on every replica) not detected yet, else the
// latest detected; -1: none.
int frt_fault_of(fault_rt *f, int rep, unsigned kinds);
// The fault that explains a loss of replica rep: the latest injected fault of a kind a loss
// detects (kill, hang, exec) on rep (or on every replica) that has not explained a loss of rep
// already. A fault explains one loss per replica it reaches, so a second loss of a replica it
// already took, after the restart, is another loss. -1: none explains it.
int frt_loss_fault(const fault_rt *f, int rep);
// Fault fi (-1: none, a no-op) was detected at t, by `how`.
void frt_detect(fault_rt *f, int fi, uint64_t t, const char *how);

// --- faults/straggler.c
// A fault a straggler score detects begins on replica rep: a flag already up (from host noise,
// or from an earlier fault it did not drop below STRAGGLER_OFF after) must not hide it, so the
// replica is scored afresh: PERSIST steps above STRAGGLER_ON from now on flag it again.
void frt_straggler_rearm(fault_rt *f, int rep);

// --- faults/inject.c
// Real mode with a clock jump planned: the clock file and the workers' environment.
sc_status frt_clock_setup(fault_rt *f);
// Fault fi begins (end false) or ends (end true) at now.
void frt_act(fault_rt *f, int fi, bool end, uint64_t now);
// Whether every live worker's wall clock shows clock jump fi (then it is detected).
void frt_clock_check(fault_rt *f, int fi, uint64_t now);
// What faults that reach no replica do at their start (their rows' act, faults/kinds.c): a
// clock jump moves the workers' clock, a cancel storm cancels requests in flight, an exec
// fault starts its commands.
void frt_clock_jump(fault_rt *f, int fi, uint64_t now);
void frt_cancel_storm(fault_rt *f, int fi, uint64_t now);
void frt_exec_start(fault_rt *f, int fi, uint64_t now);

// Reaps the commands of exec fault fi that have ended (every loop turn); wait: all of them,
// stopping what still runs (the deployment's end).
void frt_exec_reap(fault_rt *f, int fi, bool wait);

// --- faults/supervisor.c
// Starts the thread that restarts and swaps replicas in real mode. SC_OOM when it cannot.
sc_status frt_start_supervisor(fault_rt *f);
void frt_stop_supervisor(fault_rt *f); // once the replicas are freed; idempotent
// Replica i was found dead at now: detection, then a restart when the scenario asks for one.
void frt_on_dead(fault_rt *f, int i, uint64_t now);
// Hands replica i to the supervisor (a restart, or a swap when rs->swapping): the router
// holds it busy until frt_join_restart collects it. False when there is no supervisor.
bool frt_ask_supervisor(fault_rt *f, int i);
// Waits for replica i's restart or swap (asked for and running on the supervisor) to finish.
void frt_join_restart(fault_rt *f, int i, uint64_t now);

// --- faults/hot_swap.c
void frt_swap_begin(fault_rt *f, int fi, uint64_t now);
// Drives swap fi one stage further when it can (every loop turn).
void frt_swap_tick(fault_rt *f, int fi, uint64_t now);
// The quality delta of swap fi between its old and new weights (real mode).
void frt_swap_quality(fault_rt *f, int fi);
// Appends what swap fr did to the fault row's detail d (cap bytes).
void frt_swap_detail(const fault_run *fr, char *d, size_t cap);
// The swap_* metrics: the worst over the deployment's swaps.
void frt_swap_metrics(fault_rt *f);

// --- faults/judge.c
// Stores a deployment metric (and keeps it for the SLOs once fault_rt_end began); a NaN value
// is stored with why (NULL: "not measured") as its note.
void frt_add_value(fault_rt *f, const char *name, double v, const char *why);
static inline void frt_add_metric(fault_rt *f, const char *name, double v) {
  frt_add_value(f, name, v, NULL);
}
// The start of the phase run in progress at time t.
uint64_t frt_phase_start_at(const fault_rt *f, uint64_t t);
