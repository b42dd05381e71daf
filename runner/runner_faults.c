// The fault timeline as a deployment runs (see runner_rt.h): faults injected through the
// replica handle at their times, deaths noticed (detection), dead replicas restarted by a
// supervisor thread, requests of a lost replica retried or resumed on a healthy one, cancel
// storms, straggler scores, and after the last phase the verdicts: KV leaks, the request
// history, recovery times, output equivalence with a fault-free engine, leaked threads, fds
// and processes. Fault rows and metrics go to the database.
//
// The same code serves real and simulated replicas: only the replica implementations differ.
// A restart runs on a supervisor thread in real mode (a worker reloads its weights while the
// loop keeps stamping the other replicas' tokens); the replica is `busy` meanwhile and nothing
// else touches it. The supervisor lives as long as the deployment, because a worker dies with
// the thread that started it (PR_SET_PDEATHSIG). A simulated restart returns at once and
// models its load time itself.
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "faults/quality.h"
#include "faults/timeline.h"
#include "faults/verdict.h"
#include "runner/runner_rt.h"

enum { HIST = 64, FAST = 16, MIN_STEPS = 32, PERSIST = 8 };
static const double STRAGGLER_ON = 2.0;    // step time / reference above this: a straggler
static const double STRAGGLER_OFF = 1.5;   // ... and no longer below this
static const uint64_t RECOVERY_WINDOW_NS = 1000000000ull;
static const double RECOVERY_FRAC = 0.9;
static const uint64_t PROBE_NS = 1000000000ull; // an unhealthy replica gets one request per s

typedef struct rep_state {
  bool dead_seen;      // its death was handled (detection, restart)
  bool unhealthy_seen;
  // restart (real mode: the supervisor owns the replica while it runs)
  bool thr_started;    // a restart was asked for and not collected yet
  bool want;           // (mu) the supervisor should restart it
  atomic_bool thr_done;
  sc_status restart_st;
  sc_error restart_err;
  uint64_t restart_begin;
  int fault;           // the fault whose restart this is (-1 none)
  // hot swap: the supervisor's job is a swap (to swap_cfg) rather than a restart
  bool swapping;
  const engine_config *swap_cfg;
  int version;         // the weights it serves: 0 at start, a swap's version once it began
                       // loading them
  // straggler score: the replica's recent step durations
  uint64_t hist[HIST];
  int n_hist;
  int above;           // consecutive steps scoring above the threshold
  bool flagged;
  bool told;           // an unexplained straggler flag was printed
} rep_state;

typedef struct fault_run {
  uint64_t at, end;    // ns since the run's start; UINT64_MAX: not known yet / never
  bool injected, ended, detected, recovered;
  uint64_t injected_ns, detected_ns, recovered_ns, ended_ns;
  int affected;
  int acks;            // cancel storm: cancels not acknowledged yet
  double reload_ms;    // a restart after it: how long the replica took to come back
  char note[160];
  // hot swap: a rolling swap, one replica at a time: drain, load, admit again
  int version;         // the weights it installs (index into rf_state.vcfg)
  int sw_next;         // replicas taken so far (the next one in order)
  int sw_rep;          // the one being swapped (-1: none)
  int sw_stage;        // SW_*
  uint64_t sw_begin;   // when the current stage began
  int sw_done_reps;    // replicas now on the new weights
  double drain_ms, load_ms; // the longest drain and load
  bool swap_done;
  uint64_t swap_done_ns;
  double dip;          // 1 - the lowest 1 s throughput during the swap / the pre-swap level
  double agreement, kl; // quality delta between the old and new weights (NaN: not measured)
} fault_run;

enum { SW_NEXT, SW_DRAIN, SW_LOAD };

struct rf_state {
  ft_plan plan;
  fault_run *fr;       // (plan.n)
  rep_state *rs;       // (dp)
  int n_rs;
  bool faulted;
  fv_resources before;
  bool have_before;
  uint64_t *retry;     // keys waiting for a retry
  size_t n_retry, cap_retry;
  engine_config *vcfg; // (n_vcfg) the engine config of each weight version, 0 the initial
  int n_vcfg;
  int swap_active;     // the hot swap rolling now (-1: none): one at a time
  // clock jumps (real mode): the workers run under libfaketime, reading their wall clock's
  // offset from clock_file; env is what they are started with
  char clock_dir[64], clock_file[96];
  char env_buf[5][600];
  const char *env[6];
  int64_t clock_offset_ns;
  int unexplained;     // replicas lost with no kill or hang fault to explain it
  dep_result *dr;      // from rf_end on: where the metrics written are kept for the SLOs
  uint64_t next_probe; // when an unhealthy replica may get its next request
  int probe_rr;        // which unhealthy replica probes next (round robin)
  // the supervisor thread (real mode)
  rt *r;
  pthread_t sup;
  bool sup_started, quit;
  pthread_mutex_t mu;
  pthread_cond_t cv;
};

static void *supervisor_main(void *arg);
static void stop_supervisor(struct rf_state *f);
static void swap_begin(rt *r, int fi, uint64_t now);
static void swap_tick(rt *r, int fi, uint64_t now);
static void detect(rt *r, int fi, uint64_t t, const char *how);

bool rf_faulted(const rt *r) { return r->rf && r->rf->faulted; }

// --- clock jumps
static const char *const faketime_libs[] = {
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1",
    "/usr/local/lib/faketime/libfaketimeMT.so.1",
};

const char *rf_faketime_lib(void) {
  const char *env = getenv("SHARDCHECK_LIBFAKETIME");
  if (env && *env) return access(env, R_OK) == 0 ? env : NULL;
  for (size_t i = 0; i < sizeof faketime_libs / sizeof *faketime_libs; i++)
    if (access(faketime_libs[i], R_OK) == 0) return faketime_libs[i];
  return NULL;
}

// Writes the workers' wall-clock offset (whole seconds, libfaketime's relative format) to the
// clock file, atomically: a worker never reads half a line.
static sc_status clock_write(struct rf_state *f, int64_t offset_ns, sc_error *err) {
  char tmp[128];
  snprintf(tmp, sizeof tmp, "%s.new", f->clock_file);
  FILE *o = fopen(tmp, "w");
  if (!o) return sc_fail(err, SC_IO, "clock_jump: cannot write %s: %s", tmp, strerror(errno));
  fprintf(o, "%+lld\n", (long long)(offset_ns / 1000000000));
  bool ok = fclose(o) == 0;
  if (!ok || rename(tmp, f->clock_file) != 0)
    return sc_fail(err, SC_IO, "clock_jump: cannot write %s: %s", f->clock_file, strerror(errno));
  return SC_OK;
}

// Real mode with a clock jump: a clock file at offset +0 and the environment that starts the
// workers under libfaketime (monotonic clocks left alone).
static sc_status clock_setup(rt *r) {
  struct rf_state *f = r->rf;
  bool jumps = false;
  for (int i = 0; i < f->plan.n; i++) jumps |= f->plan.v[i].kind == SCN_FAULT_CLOCK_JUMP;
  if (!jumps || r->sim) return SC_OK;
  const char *lib = rf_faketime_lib();
  if (!lib) return sc_fail(&r->err, SC_INVALID, "clock_jump: libfaketime not found");
  snprintf(f->clock_dir, sizeof f->clock_dir, "/tmp/shardcheck-clock-XXXXXX");
  if (!mkdtemp(f->clock_dir)) {
    f->clock_dir[0] = 0;
    return sc_fail(&r->err, SC_IO, "clock_jump: cannot make a directory: %s", strerror(errno));
  }
  snprintf(f->clock_file, sizeof f->clock_file, "%s/offset", f->clock_dir);
  SC_TRY(clock_write(f, 0, &r->err));
  const char *pre = getenv("LD_PRELOAD");
  snprintf(f->env_buf[0], sizeof f->env_buf[0], "LD_PRELOAD=%s%s%s", lib, pre && *pre ? ":" : "",
           pre ? pre : "");
  snprintf(f->env_buf[1], sizeof f->env_buf[1], "FAKETIME_TIMESTAMP_FILE=%s", f->clock_file);
  snprintf(f->env_buf[2], sizeof f->env_buf[2], "FAKETIME_NO_CACHE=1");
  snprintf(f->env_buf[3], sizeof f->env_buf[3], "FAKETIME_DONT_FAKE_MONOTONIC=1");
  int n = 4;
#ifdef __SANITIZE_ADDRESS__
  // an instrumented worker accepts a preloaded library ahead of its sanitizer runtime
  const char *asan = getenv("ASAN_OPTIONS");
  snprintf(f->env_buf[n++], sizeof f->env_buf[0], "ASAN_OPTIONS=%s%sverify_asan_link_order=0",
           asan ? asan : "", asan && *asan ? ":" : "");
#endif
  for (int i = 0; i < n; i++) f->env[i] = f->env_buf[i];
  f->env[n] = NULL;
  return SC_OK;
}

const char *const *rf_worker_env(const rt *r) {
  return r->rf && r->rf->env[0] ? r->rf->env : NULL;
}

static void clock_jump(rt *r, int fi) {
  struct rf_state *f = r->rf;
  fault_run *fr = &f->fr[fi];
  sc_error e = {{0}};
  int64_t next = f->clock_offset_ns + f->plan.v[fi].src->offset_ns;
  if (r->sim || !f->clock_file[0]) {
    snprintf(fr->note, sizeof fr->note, "not injected: no worker runs under libfaketime");
  } else if (clock_write(f, next, &e) != SC_OK) {
    snprintf(fr->note, sizeof fr->note, "not injected: %.140s", e.msg);
  } else {
    f->clock_offset_ns = next;
  }
}

// A clock jump is seen once every live worker's reported wall clock is off ours by the
// offset now in force (within half a second: a report is read soon after it is sent).
static void clock_check(rt *r, int fi, uint64_t now) {
  struct rf_state *f = r->rf;
  int seen = 0;
  for (int i = 0; i < r->n_reps; i++) {
    if (r->busy[i] || replica_health_get(r->reps[i]) == REPLICA_DEAD) continue;
    int64_t skew;
    if (!replica_proc_wall_skew(r->reps[i], &skew)) return;
    if (llabs(skew - f->clock_offset_ns) > 500000000ll) return;
    seen++;
  }
  if (seen == 0) return;
  char how[96];
  snprintf(how, sizeof how, "the wall clock of %d worker%s is off by %+.0f s", seen,
           seen == 1 ? "" : "s", (double)f->clock_offset_ns / 1e9);
  detect(r, fi, now, how);
}

sc_status rf_begin(rt *r) {
  struct rf_state *f = calloc(1, sizeof *f);
  if (!f) return sc_fail(&r->err, SC_OOM, "runner: out of memory");
  r->rf = f;
  f->n_rs = r->dep->dp;
  f->rs = calloc((size_t)f->n_rs, sizeof *f->rs);
  if (!f->rs) return sc_fail(&r->err, SC_OOM, "runner: out of memory");
  for (int i = 0; i < f->n_rs; i++) f->rs[i].fault = -1;
  f->swap_active = -1;
  f->faulted = r->s->n_faults > 0;
  if (!f->faulted) return SC_OK;
  SC_TRY(ft_plan_build(r->s, r->dep, r->sweep, r->seed, &f->plan, &r->err));
  f->fr = calloc((size_t)f->plan.n + 1, sizeof *f->fr);
  f->vcfg = calloc((size_t)f->plan.n + 1, sizeof *f->vcfg);
  if (!f->fr || !f->vcfg) return sc_fail(&r->err, SC_OOM, "runner: out of memory");
  f->vcfg[f->n_vcfg++] = r->ec;
  for (int i = 0; i < f->plan.n; i++) {
    f->fr[i].at = f->fr[i].end = UINT64_MAX;
    f->fr[i].sw_rep = -1;
    f->fr[i].dip = f->fr[i].agreement = f->fr[i].kl = NAN;
  }
  if (f->plan.skipped)
    progress_note(r, "%s: %d fault%s not planned here: %s", r->dep->label, f->plan.skipped,
                  f->plan.skipped == 1 ? "" : "s", f->plan.skipped_why);
  sc_error e = {{0}};
  SC_TRY(clock_setup(r));
  f->have_before = fv_resources_now(&f->before, &e) == SC_OK;
  bool swaps = false;
  for (int i = 0; i < f->plan.n; i++) swaps |= f->plan.v[i].kind == SCN_FAULT_HOT_SWAP;
  if (!r->sim && (r->s->router.restart || swaps)) {
    f->r = r;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    if (pthread_create(&f->sup, NULL, supervisor_main, f) != 0) {
      pthread_cond_destroy(&f->cv);
      pthread_mutex_destroy(&f->mu);
      return sc_fail(&r->err, SC_OOM, "runner: cannot start the supervisor thread");
    }
    f->sup_started = true;
  }
  return SC_OK;
}

void rf_phase_started(rt *r, int k) {
  struct rf_state *f = r->rf;
  if (!f || !f->faulted) return;
  const phase_run *ph = &r->phases[k];
  int widx = (int)(ph->p - r->s->workload.phases);
  bool first_of_phase = k == 0 || r->phases[k - 1].p != ph->p;
  for (int i = 0; i < f->plan.n; i++) {
    const ft_fault *ft = &f->plan.v[i];
    if (k == 0 && ft->phase < 0) f->fr[i].at = ph->start + ft->at_ns;
    else if (ft->phase == widx && first_of_phase) f->fr[i].at = ph->start + ft->at_ns;
  }
}

// --- injection
static bool rep_ok(rt *r, int i) {
  return i >= 0 && i < r->n_reps && !r->busy[i] &&
         replica_health_get(r->reps[i]) != REPLICA_DEAD;
}

static void inject_one(rt *r, int fi, int rep, const replica_fault *rf) {
  fault_run *fr = &r->rf->fr[fi];
  if (!rep_ok(r, rep)) {
    snprintf(fr->note, sizeof fr->note, "replica%d was already lost: nothing injected", rep);
    return;
  }
  sc_error e = {{0}};
  if (replica_inject(r->reps[rep], rf, &e) != SC_OK)
    snprintf(fr->note, sizeof fr->note, "not injected: %.140s", e.msg);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

// Requests in flight whose stage is in the mask: queued and prefill cannot be told apart by a
// client (no token yet), so either selects both.
static bool in_stages(const req_rec *q, int stages) {
  if (q->n_tok > 0) return stages & SCN_STAGE_DECODE;
  return stages & (SCN_STAGE_QUEUED | SCN_STAGE_PREFILL);
}

static void cancel_storm(rt *r, int fi, uint64_t now) {
  const ft_fault *ft = &r->rf->plan.v[fi];
  fault_run *fr = &r->rf->fr[fi];
  size_t n = 0;
  uint64_t *keys = malloc((r->n_reqs - r->low + 1) * sizeof *keys);
  if (!keys) {
    snprintf(fr->note, sizeof fr->note, "not injected: out of memory");
    return;
  }
  for (size_t k = r->low; k < r->n_reqs; k++) {
    req_rec *q = &r->reqs[k];
    if (q->state != REQ_DONE && in_stages(q, ft->stages)) keys[n++] = k;
  }
  size_t want = ft->count ? (size_t)ft->count : (size_t)llround(ft->fraction * (double)n);
  if (ft->fraction > 0 && want == 0 && n > 0) want = 1;
  if (want > n) want = n;
  // A seeded partial shuffle picks which ones (the same seed cancels the same requests).
  uint64_t x = r->seed ^ (0x5707ull + (uint64_t)fi * 0x9E3779B97F4A7C15ull);
  for (size_t i = 0; i < want; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    size_t j = i + (size_t)((x >> 33) % (n - i));
    uint64_t t = keys[i];
    keys[i] = keys[j];
    keys[j] = t;
  }
  qsort(keys, want, sizeof *keys, cmp_u64);
  for (size_t i = 0; i < want; i++) {
    req_rec *q = &r->reqs[keys[i]];
    q->fault = fi;
    fr->affected++;
    if (q->dispatched && !q->waiting && !r->busy[q->replica]) {
      replica_cancel(r->reps[q->replica], keys[i]);
      q->storm = true;
      fr->acks++;
    }
    finish_req(r, keys[i], MT_CANCELLED, "cancelled", "cancelled by a cancel storm", now);
  }
  // The requests it spared are still compared with a fault-free run afterwards.
  for (size_t k = r->low; k < r->n_reqs; k++)
    if (r->reqs[k].state != REQ_DONE && r->reqs[k].fault < 0) r->reqs[k].fault = fi;
  free(keys);
  fr->detected = true; // the client did it: known at once
  fr->detected_ns = now;
  if (fr->acks == 0) {
    fr->recovered = true;
    fr->recovered_ns = now;
  }
  progress_note(r, "%s: cancel storm: %zu of %zu in-flight requests cancelled", r->dep->label,
                want, n);
}

static replica_fault to_rfault(const ft_fault *ft, bool end) {
  replica_fault rf = {.rank = ft->rank};
  if (end) {
    rf.kind = ft->kind == SCN_FAULT_HANG ? RFAULT_RESUME : RFAULT_CLEAR;
    return rf;
  }
  switch (ft->kind) {
  case SCN_FAULT_KILL: rf.kind = !strcmp(ft->what, "gpu") ? RFAULT_KILL_RANK : RFAULT_KILL; break;
  case SCN_FAULT_HANG: rf.kind = !strcmp(ft->what, "rank") ? RFAULT_HANG_RANK : RFAULT_HANG; break;
  case SCN_FAULT_SLOW:
    rf.kind = !strcmp(ft->what, "rank") ? RFAULT_SLOW_RANK : RFAULT_SLOW_LINK;
    rf.factor = ft->factor;
    rf.latency_ns = ft->latency_ns;
    rf.bandwidth = ft->bandwidth;
    break;
  case SCN_FAULT_OOM:
    rf.kind = RFAULT_OOM;
    rf.after_allocs = ft->after_allocs;
    rf.persistent = !strcmp(ft->what, "persistent");
    break;
  case SCN_FAULT_CORRUPT:
    rf.kind = RFAULT_CORRUPT;
    rf.bitflip = !strcmp(ft->what, "bitflip");
    break;
  default: rf.kind = RFAULT_CLEAR; break;
  }
  return rf;
}

static void act(rt *r, int fi, bool end, uint64_t now) {
  const ft_fault *ft = &r->rf->plan.v[fi];
  fault_run *fr = &r->rf->fr[fi];
  if (!end) {
    fr->injected = true;
    fr->injected_ns = now;
    fr->end = ft->duration_ns ? now + ft->duration_ns : UINT64_MAX;
    progress_note(r, "%s: fault at %.3f s: %s%s%s: %s", r->dep->label, (double)now / 1e9,
                  scenario_fault_kind_name(ft->kind), ft->target[0] ? " " : "", ft->target,
                  ft->detail);
    if (ft->kind == SCN_FAULT_CANCEL_STORM) {
      cancel_storm(r, fi, now);
      fr->end = UINT64_MAX;
      return;
    }
    if (ft->kind == SCN_FAULT_HOT_SWAP) {
      swap_begin(r, fi, now);
      fr->end = UINT64_MAX;
      return;
    }
    if (ft->kind == SCN_FAULT_CLOCK_JUMP) {
      clock_jump(r, fi);
      fr->end = UINT64_MAX;
      return;
    }
  } else {
    fr->ended = true;
    fr->ended_ns = now;
  }
  replica_fault rf = to_rfault(ft, end);
  if (ft->replica >= 0) {
    inject_one(r, fi, ft->replica, &rf);
  } else {
    for (int i = 0; i < r->n_reps; i++) inject_one(r, fi, i, &rf);
  }
}

// --- detection and restarts
// The injected fault of one of the given kinds that a symptom of replica rep belongs to: the
// latest on it (or on every replica) not detected yet, else the latest detected; -1: none.
static int fault_of(rt *r, int rep, unsigned kinds) {
  struct rf_state *f = r->rf;
  if (!f->faulted) return -1;
  for (int pass = 0; pass < 2; pass++)
    for (int i = f->plan.n - 1; i >= 0; i--) {
      const ft_fault *ft = &f->plan.v[i];
      if (!f->fr[i].injected || !(kinds & (1u << ft->kind))) continue;
      if (ft->replica >= 0 && ft->replica != rep) continue;
      if (pass == 0 && f->fr[i].detected) continue;
      return i;
    }
  return -1;
}

static void detect(rt *r, int fi, uint64_t t, const char *how) {
  if (fi < 0) return;
  fault_run *fr = &r->rf->fr[fi];
  if (fr->detected) return;
  fr->detected = true;
  fr->detected_ns = t;
  progress_note(r, "%s: %s detected at %.3f s (%.0f ms after injection): %s", r->dep->label,
                scenario_fault_kind_name(r->rf->plan.v[fi].kind), (double)t / 1e9,
                (double)(t - fr->injected_ns) / 1e6, how);
}

// The supervisor: restarts the replicas it is asked to, one at a time, until told to quit.
static void *supervisor_main(void *arg) {
  struct rf_state *f = arg;
  pthread_mutex_lock(&f->mu);
  for (;;) {
    int i = -1;
    for (int k = 0; k < f->n_rs && i < 0; k++)
      if (f->rs[k].want) i = k;
    if (i < 0) {
      if (f->quit) break;
      pthread_cond_wait(&f->cv, &f->mu);
      continue;
    }
    rep_state *rs = &f->rs[i];
    rs->want = false;
    pthread_mutex_unlock(&f->mu);
    rs->restart_err = (sc_error){{0}};
    rs->restart_st = rs->swapping
                         ? replica_swap(f->r->reps[i], rs->swap_cfg, &rs->restart_err)
                         : replica_restart(f->r->reps[i], &rs->restart_err);
    atomic_store(&rs->thr_done, true);
    pthread_mutex_lock(&f->mu);
  }
  pthread_mutex_unlock(&f->mu);
  return NULL;
}

static void restart_finished(rt *r, int i, uint64_t now) {
  rep_state *rs = &r->rf->rs[i];
  double ms = (double)(now - rs->restart_begin) / 1e6;
  if (rs->restart_st == SC_OK) {
    rs->dead_seen = false;
    rs->unhealthy_seen = false;
    rs->n_hist = 0;
    rs->flagged = false;
    progress_note(r, "%s: replica%d restarted (epoch %d) in %.0f ms", r->dep->label, i,
                  replica_epoch(r->reps[i]), ms);
  } else {
    progress_note(r, "%s: replica%d could not be restarted: %s", r->dep->label, i,
                  rs->restart_err.msg);
  }
  if (rs->fault >= 0 && r->rf->fr[rs->fault].reload_ms == 0) r->rf->fr[rs->fault].reload_ms = ms;
}

// Hands replica i to the supervisor (a restart, or a swap when rs->swapping): it is busy
// until join_restart collects it. False when there is no supervisor.
static bool ask_supervisor(rt *r, int i) {
  struct rf_state *f = r->rf;
  rep_state *rs = &f->rs[i];
  if (!f->sup_started) return false;
  atomic_store(&rs->thr_done, false);
  r->busy[i] = true;
  rs->thr_started = true;
  pthread_mutex_lock(&f->mu);
  rs->want = true;
  pthread_cond_signal(&f->cv);
  pthread_mutex_unlock(&f->mu);
  return true;
}

static void on_dead(rt *r, int i, uint64_t now) {
  rep_state *rs = &r->rf->rs[i];
  rs->dead_seen = true;
  unsigned lethal = 1u << SCN_FAULT_KILL | 1u << SCN_FAULT_HANG;
  int fi = fault_of(r, i, lethal);
  char how[200];
  snprintf(how, sizeof how, "replica%d lost: %.150s", i, replica_error(r->reps[i]));
  if (fi >= 0) {
    detect(r, fi, now, how);
  } else {
    r->rf->unexplained++;
    progress_note(r, "%s: %s (no kill or hang fault explains it)", r->dep->label, how);
  }
  rs->fault = fi;
  if (!r->s->router.restart || !replica_can_restart(r->reps[i])) return;
  rs->restart_begin = now;
  if (r->sim) { // a simulated restart models its load time itself
    rs->restart_st = replica_restart(r->reps[i], &rs->restart_err);
    restart_finished(r, i, now);
    return;
  }
  ask_supervisor(r, i);
}

// Waits for replica i's restart to finish (it is asked for and running on the supervisor).
static void join_restart(rt *r, int i, uint64_t now) {
  rep_state *rs = &r->rf->rs[i];
  while (!atomic_load(&rs->thr_done)) {
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
  rs->thr_started = false;
  r->busy[i] = false;
  if (rs->swapping) { // swap_tick reads the outcome
    rs->swapping = false;
    return;
  }
  restart_finished(r, i, now);
}

static void check_replicas(rt *r, uint64_t now) {
  struct rf_state *f = r->rf;
  for (int i = 0; i < r->n_reps && i < f->n_rs; i++) {
    rep_state *rs = &f->rs[i];
    if (rs->thr_started) {
      if (atomic_load(&rs->thr_done)) join_restart(r, i, now);
      continue;
    }
    replica_health h = replica_health_get(r->reps[i]);
    if (h == REPLICA_DEAD && !rs->dead_seen) {
      on_dead(r, i, now);
    } else if (h == REPLICA_UNHEALTHY && !rs->unhealthy_seen) {
      rs->unhealthy_seen = true;
      detect(r, fault_of(r, i, 1u << SCN_FAULT_OOM), now, "allocations keep failing: unhealthy");
    } else if (h == REPLICA_HEALTHY) {
      rs->unhealthy_seen = false;
    }
  }
}

// --- hot swap: a rolling swap of the weights, one replica at a time
// The weights a swap installs: the latest version's config with its model and dtype.
static sc_status swap_config(rt *r, const ft_fault *ft, const engine_config *base,
                             engine_config *out, sc_error *err) {
  const scn_fault *src = ft->src;
  model_config m = src->swap_model[0] ? src->swap_config : base->model;
  sc_dtype wdt = base->weight_dtype;
  if (src->swap_dtype[0] && sc_dtype_parse(src->swap_dtype, &wdt) != SC_OK)
    return sc_fail(err, SC_INVALID, "unknown dtype '%s'", src->swap_dtype);
  if (r->sim && !src->swap_dtype[0]) wdt = (sc_dtype)base->sim.model.weight_dtype;
  SC_TRY(rt_engine_config(r, r->dep, &m, wdt, out, err));
  out->weights_seed = base->weights_seed;
  out->weights_dir = src->swap_model[0] ? (src->swap_has_weights ? src->swap_model : NULL)
                                        : base->weights_dir;
  if (!r->sim) out->weight_dtype = wdt == SC_I8 ? SC_I8 : SC_F32;
  return SC_OK;
}

static void swap_begin(rt *r, int fi, uint64_t now) {
  struct rf_state *f = r->rf;
  fault_run *fr = &f->fr[fi];
  sc_error e = {{0}};
  engine_config c;
  if (swap_config(r, &f->plan.v[fi], &f->vcfg[f->n_vcfg - 1], &c, &e) != SC_OK) {
    snprintf(fr->note, sizeof fr->note, "not injected: %.140s", e.msg);
    fr->swap_done = true;
    progress_note(r, "%s: hot swap not started: %s", r->dep->label, e.msg);
    return;
  }
  fr->version = f->n_vcfg;
  f->vcfg[f->n_vcfg++] = c;
  fr->sw_stage = SW_NEXT;
}

// The next replica the swap takes, or -1 when it has taken them all.
static int swap_pick(rt *r, int fi) {
  const ft_fault *ft = &r->rf->plan.v[fi];
  fault_run *fr = &r->rf->fr[fi];
  if (ft->replica >= 0) return fr->sw_next == 0 ? ft->replica : -1;
  return fr->sw_next < r->n_reps ? fr->sw_next : -1;
}

static void swap_finish(rt *r, int fi, uint64_t now) {
  fault_run *fr = &r->rf->fr[fi];
  fr->swap_done = true;
  fr->swap_done_ns = now;
  r->rf->swap_active = -1;
  progress_note(r, "%s: hot swap to weights v%d done at %.3f s: %d replica%s swapped, longest "
                "drain %.0f ms, longest load %.0f ms", r->dep->label, fr->version,
                (double)now / 1e9, fr->sw_done_reps, fr->sw_done_reps == 1 ? "" : "s",
                fr->drain_ms, fr->load_ms);
}

// Starts loading the new weights on replica i (drained): on the supervisor in real mode, at
// once in sim mode (the simulated replica models the load time).
static void swap_load(rt *r, int fi, int i, uint64_t now) {
  struct rf_state *f = r->rf;
  fault_run *fr = &f->fr[fi];
  rep_state *rs = &f->rs[i];
  fr->drain_ms = fmax(fr->drain_ms, (double)(now - fr->sw_begin) / 1e6);
  fr->sw_stage = SW_LOAD;
  fr->sw_begin = now;
  rs->version = fr->version;
  rs->swapping = true;
  rs->swap_cfg = &f->vcfg[fr->version];
  rs->restart_err = (sc_error){{0}};
  if (r->sim || !ask_supervisor(r, i)) {
    rs->restart_st = replica_swap(r->reps[i], rs->swap_cfg, &rs->restart_err);
    rs->swapping = false;
  }
}

// Drives the swap fi one stage further when it can (called every loop turn).
static void swap_tick(rt *r, int fi, uint64_t now) {
  struct rf_state *f = r->rf;
  fault_run *fr = &f->fr[fi];
  if (fr->swap_done || (f->swap_active >= 0 && f->swap_active != fi)) return;
  f->swap_active = fi;
  for (;;) {
    int i = fr->sw_rep;
    if (fr->sw_stage == SW_NEXT) {
      i = swap_pick(r, fi);
      if (i < 0) {
        swap_finish(r, fi, now);
        return;
      }
      if (r->busy[i]) return; // restarting: its turn comes once it is back
      fr->sw_next++;
      if (replica_health_get(r->reps[i]) == REPLICA_DEAD) {
        progress_note(r, "%s: hot swap: replica%d is lost, not swapped", r->dep->label, i);
        continue;
      }
      fr->sw_rep = i;
      fr->sw_stage = SW_DRAIN;
      fr->sw_begin = now;
      replica_set_admitting(r->reps[i], false);
      progress_note(r, "%s: hot swap: replica%d draining (%d in flight)", r->dep->label, i,
                    router_outstanding(r->rt, i));
    }
    if (fr->sw_stage == SW_DRAIN) {
      if (r->busy[i]) return;
      if (replica_health_get(r->reps[i]) == REPLICA_DEAD) { // lost while draining
        fr->sw_stage = SW_NEXT;
        continue;
      }
      if (router_outstanding(r->rt, i) > 0) return;
      swap_load(r, fi, i, now);
    }
    if (fr->sw_stage == SW_LOAD) {
      rep_state *rs = &f->rs[i];
      if (r->busy[i] || rs->swapping) return;
      replica_health h = replica_health_get(r->reps[i]);
      if (rs->restart_st == SC_OK && h == REPLICA_DRAINING) return; // sim: still loading
      double ms = (double)(now - fr->sw_begin) / 1e6;
      if (rs->restart_st == SC_OK) {
        fr->load_ms = fmax(fr->load_ms, ms);
        fr->sw_done_reps++;
        rs->n_hist = 0; // its step times start over on the new weights
        progress_note(r, "%s: hot swap: replica%d serves weights v%d (loaded in %.0f ms)",
                      r->dep->label, i, fr->version, ms);
      } else {
        progress_note(r, "%s: hot swap: replica%d failed to load weights v%d: %s", r->dep->label,
                      i, fr->version, rs->restart_err.msg);
      }
      fr->sw_rep = -1;
      fr->sw_stage = SW_NEXT;
    }
  }
}

int rf_version(const rt *r, int rep) {
  return r->rf && rep >= 0 && rep < r->rf->n_rs ? r->rf->rs[rep].version : 0;
}

bool rf_may_take(const rt *r, int rep, const req_rec *q) {
  return q->n_tok == 0 || rf_version(r, rep) == q->version;
}

// --- retries
static bool push_retry(struct rf_state *f, uint64_t k) {
  if (f->n_retry == f->cap_retry) {
    size_t cap = f->cap_retry ? 2 * f->cap_retry : 64;
    uint64_t *p = realloc(f->retry, cap * sizeof *p);
    if (!p) return false;
    f->retry = p;
    f->cap_retry = cap;
  }
  f->retry[f->n_retry++] = k;
  return true;
}

static bool any_alive(rt *r) {
  for (int i = 0; i < r->n_reps; i++)
    if (r->busy[i] || replica_health_get(r->reps[i]) != REPLICA_DEAD) return true;
  return false;
}

static void retry_due(rt *r, uint64_t now) {
  struct rf_state *f = r->rf;
  size_t w = 0;
  for (size_t i = 0; i < f->n_retry; i++) {
    uint64_t k = f->retry[i];
    req_rec *q = &r->reqs[k];
    if (q->state == REQ_DONE) continue;
    if (q->retry_at > now) {
      f->retry[w++] = k;
      continue;
    }
    if (dispatch_req(r, k, now)) continue;
    if (!any_alive(r)) {
      finish_req(r, k, MT_FAILED, "no_replica", "every replica was lost", now);
      continue;
    }
    q->retry_at = now + (r->s->router.backoff_ns ? r->s->router.backoff_ns : 10000000ull);
    f->retry[w++] = k; // wait for a replica to come back (restart) or for the timeout
  }
  f->n_retry = w;
}

bool rf_on_failed(rt *r, int rep, const replica_event *ev, uint64_t t) {
  struct rf_state *f = r->rf;
  req_rec *q = &r->reqs[ev->key];
  bool lost = !strcmp(ev->what, "replica_lost") || !strcmp(ev->what, "replica_failed");
  if (f->faulted) {
    int fi = -1;
    if (!strcmp(ev->what, "oom")) {
      fi = fault_of(r, rep, 1u << SCN_FAULT_OOM);
      detect(r, fi, t, "a request failed with oom");
    } else if (!strcmp(ev->what, "numerical")) {
      fi = fault_of(r, rep, 1u << SCN_FAULT_CORRUPT);
      detect(r, fi, t, "NaN/inf logits failed a request");
    } else if (lost) {
      fi = fault_of(r, rep, 1u << SCN_FAULT_KILL | 1u << SCN_FAULT_HANG);
    }
    if (fi >= 0 && q->fault != fi) {
      q->fault = fi;
      f->fr[fi].affected++;
    }
  }
  if (!lost) return false;
  const scn_router *rp = &r->s->router;
  if (q->n_tok > 0 && !rp->resume) {
    finish_req(r, ev->key, MT_FAILED, "replica_lost",
               "its replica was lost mid-stream and router.resume is false", t);
    return true;
  }
  if (q->retries >= rp->max_retries) {
    char msg[96];
    snprintf(msg, sizeof msg, "its replica was lost; gave up after %d retr%s", q->retries,
             q->retries == 1 ? "y" : "ies");
    finish_req(r, ev->key, MT_FAILED, "replica_lost", msg, t);
    return true;
  }
  router_done(r->rt, rep);
  q->waiting = true;
  q->retries++;
  if (q->n_tok > 0) q->resumed++;
  int shift = q->retries - 1 < 20 ? q->retries - 1 : 20;
  q->retry_at = t + (rp->backoff_ns << shift);
  if (!push_retry(f, ev->key)) {
    q->waiting = false;
    q->dispatched = false;
    finish_req(r, ev->key, MT_FAILED, "oom", "runner: out of memory queueing a retry", t);
  }
  return true;
}

bool rf_hold(rt *r, uint64_t k, uint64_t t) {
  struct rf_state *f = r->rf;
  if (!f || !f->faulted) return false;
  bool coming = false;
  for (int i = 0; i < r->n_reps; i++)
    coming |= r->busy[i] || replica_health_get(r->reps[i]) == REPLICA_DRAINING;
  if (!coming) return false;
  req_rec *q = &r->reqs[k];
  q->waiting = true;
  q->retry_at = t + (r->s->router.backoff_ns ? r->s->router.backoff_ns : 10000000ull);
  if (push_retry(f, k)) return true;
  q->waiting = false;
  return false;
}

void rf_on_late(rt *r, int rep, const replica_event *ev, uint64_t t) {
  (void)rep;
  struct rf_state *f = r->rf;
  if (!f || ev->key >= r->n_reqs) return;
  req_rec *q = &r->reqs[ev->key];
  if (!q->storm || (ev->kind != REPLICA_EV_FINISHED && ev->kind != REPLICA_EV_FAILED)) return;
  q->storm = false;
  if (q->fault < 0 || q->fault >= f->plan.n) return;
  fault_run *fr = &f->fr[q->fault];
  if (fr->acks > 0 && --fr->acks == 0) {
    fr->recovered = true;
    fr->recovered_ns = t;
  }
}

// --- straggler scores
// Median of the durations hist[from .. to) steps back (0 = the latest).
static uint64_t median_back(const rep_state *rs, int from, int to) {
  uint64_t v[HIST];
  int n = 0;
  for (int b = from; b < to && b < rs->n_hist; b++) v[n++] = rs->hist[(rs->n_hist - 1 - b) % HIST];
  if (n == 0) return 0;
  qsort(v, (size_t)n, sizeof *v, cmp_u64);
  return v[n / 2];
}

void rf_on_step(rt *r, int rep, const engine_step_info *si, uint64_t t) {
  struct rf_state *f = r->rf;
  if (!f || !f->faulted || rep >= f->n_rs || si->duration_ns == 0) return;
  rep_state *rs = &f->rs[rep];
  rs->hist[rs->n_hist % HIST] = si->duration_ns;
  rs->n_hist++;
  if (rs->n_hist < MIN_STEPS) return;
  double fast = (double)median_back(rs, 0, FAST), ref = 0;
  // Against its peers when it has some (the same load), else against its own past.
  uint64_t peer[64];
  int np = 0;
  for (int i = 0; i < f->n_rs && np < 64; i++)
    if (i != rep && f->rs[i].n_hist >= MIN_STEPS) peer[np++] = median_back(&f->rs[i], 0, FAST);
  if (np > 0) {
    qsort(peer, (size_t)np, sizeof *peer, cmp_u64);
    ref = (double)peer[np / 2];
  } else {
    ref = (double)median_back(rs, 2 * FAST, HIST);
  }
  if (ref <= 0) return;
  double score = fast / ref;
  rs->above = score > STRAGGLER_ON ? rs->above + 1 : 0;
  if (!rs->flagged && rs->above >= PERSIST) {
    rs->flagged = true;
    char how[96];
    snprintf(how, sizeof how, "replica%d flagged as a straggler (step time x%.1f)", rep, score);
    int fi = fault_of(r, rep, 1u << SCN_FAULT_SLOW);
    if (fi >= 0) {
      detect(r, fi, t, how);
    } else if (!rs->told) { // no slow fault explains it: said once, not at every flap
      rs->told = true;
      progress_note(r, "%s: %s; no slow fault explains it (said once per replica)",
                    r->dep->label, how);
    }
  } else if (rs->flagged && score < STRAGGLER_OFF) {
    rs->flagged = false;
  }
}

// --- the loop's hooks
void rf_tick(rt *r, uint64_t now) {
  struct rf_state *f = r->rf;
  if (!f) return;
  if (f->n_retry) retry_due(r, now);
  // Without faults only the retry policy runs: a replica that dies on its own fails its
  // deployment as before, and the loop pays no health checks.
  if (!f->faulted) return;
  for (int i = 0; i < f->plan.n; i++) {
    fault_run *fr = &f->fr[i];
    if (!fr->injected && fr->at <= now) act(r, i, false, now);
    if (fr->injected && !fr->ended && fr->end <= now) {
      const ft_fault *ft = &f->plan.v[i];
      if (ft->replica >= 0 && r->busy[ft->replica]) continue; // after its restart
      act(r, i, true, now);
    }
  }
  check_replicas(r, now);
  for (int i = 0; i < f->plan.n; i++) {
    if (!f->fr[i].injected) continue;
    if (f->plan.v[i].kind == SCN_FAULT_HOT_SWAP) swap_tick(r, i, now);
    if (f->plan.v[i].kind == SCN_FAULT_CLOCK_JUMP && !f->fr[i].detected && !f->fr[i].note[0])
      clock_check(r, i, now);
  }
  // Half-open circuit: once a second one unhealthy replica may take the next request.
  if (now >= f->next_probe) {
    f->next_probe = now + PROBE_NS;
    r->probe = -1;
    for (int k = 0; k < r->n_reps; k++) {
      int i = (f->probe_rr + k) % r->n_reps;
      if (!r->busy[i] && replica_health_get(r->reps[i]) == REPLICA_UNHEALTHY) {
        r->probe = i;
        f->probe_rr = i + 1;
        break;
      }
    }
  }
}

uint64_t rf_next(rt *r) {
  struct rf_state *f = r->rf;
  if (!f) return UINT64_MAX;
  uint64_t d = UINT64_MAX;
  for (int i = 0; i < f->plan.n; i++) {
    const fault_run *fr = &f->fr[i];
    if (!fr->injected && fr->at < d) d = fr->at;
    if (fr->injected && !fr->ended && fr->end < d) d = fr->end;
  }
  for (size_t i = 0; i < f->n_retry; i++) {
    const req_rec *q = &r->reqs[f->retry[i]];
    if (q->state != REQ_DONE && q->retry_at < d) d = q->retry_at;
  }
  return d;
}

bool rf_busy(rt *r) {
  struct rf_state *f = r->rf;
  if (!f) return false;
  for (int i = 0; i < f->plan.n; i++)
    if (f->fr[i].acks > 0) return true;
  for (int i = 0; i < f->n_rs; i++)
    if (f->rs[i].thr_started) return true;
  return false;
}

// --- after the last phase
static void add_metric(rt *r, const char *name, double v) {
  db_ok(r, store_metric_add(r->db, r->run_id, r->dep_id, 0, NULL, name, v, &r->err));
  dep_result *dr = r->rf->dr;
  if (dr && dr->n_fm < (int)(sizeof dr->fm / sizeof dr->fm[0])) {
    dr->fm[dr->n_fm].name = name;
    dr->fm[dr->n_fm++].v = v;
  }
}

// Every token delivery time of the deployment, sorted; *n gets the count. NULL: none/no memory.
static uint64_t *all_token_times(rt *r, size_t *n) {
  size_t total = 0;
  for (size_t k = 0; k < r->n_reqs; k++) total += (size_t)r->reqs[k].n_tok;
  *n = 0;
  if (total == 0) return NULL;
  uint64_t *v = malloc(total * sizeof *v);
  if (!v) return NULL;
  for (size_t k = 0; k < r->n_reqs; k++)
    for (int j = 0; j < r->reqs[k].n_tok; j++) v[(*n)++] = r->reqs[k].tok[j];
  qsort(v, *n, sizeof *v, cmp_u64);
  return v;
}

// The start of the phase run in progress at time t.
static uint64_t phase_start_at(rt *r, uint64_t t) {
  uint64_t s = r->n_phases ? r->phases[0].start : 0;
  for (int k = 0; k < r->n_phases; k++)
    if (r->phases[k].start <= t) s = r->phases[k].start;
  return s;
}

// Greedy outputs of the requests a fault touched (retried, resumed, or in flight through a
// cancel storm) and that completed, compared with a fresh fault-free engine of the same
// layout. Returns the number that differ; -1 when not checked (sampling, sim, no such
// request, or the reference could not run: why says).
static int equivalence_of(rt *r, int version, char *why, size_t cap);

static int equivalence(rt *r, char *why, size_t cap) {
  why[0] = 0;
  int total = -1;
  for (int v = 0; v < r->rf->n_vcfg; v++) {
    int mm = equivalence_of(r, v, why, cap);
    if (mm < 0 && why[0] && strcmp(why, "no request that a fault touched completed") != 0)
      return -1;
    if (mm >= 0) total = (total < 0 ? 0 : total) + mm;
  }
  if (total >= 0) why[0] = 0;
  return total;
}

// Whether request q is compared: it completed after a fault touched it, on weights version.
static bool touched(const req_rec *q, int version) {
  return q->status == MT_OK && q->state == REQ_DONE && (q->retries > 0 || q->fault >= 0) &&
         q->version == version;
}

// The same for the requests served by one weight version, against a fresh engine of it.
static int equivalence_of(rt *r, int version, char *why, size_t cap) {
  why[0] = 0;
  if (r->sim) {
    snprintf(why, cap, "simulated tokens carry no model output");
    return -1;
  }
  if (r->s->workload.temperature > 0) {
    snprintf(why, cap, "sampling is not greedy");
    return -1;
  }
  size_t n = 0;
  for (size_t k = 0; k < r->n_reqs; k++) {
    const req_rec *q = &r->reqs[k];
    if (touched(q, version)) n++;
  }
  if (n == 0) {
    snprintf(why, cap, "no request that a fault touched completed");
    return -1;
  }
  engine_config ec = r->rf->vcfg[version];
  replica *ref = NULL;
  sc_error e = {{0}};
  if (replica_local_new(&ec, 0, &ref, &e) != SC_OK) {
    snprintf(why, cap, "the reference engine failed to start: %.100s", e.msg);
    return -1;
  }
  int32_t **got = calloc(r->n_reqs, sizeof *got);
  int *n_got = calloc(r->n_reqs, sizeof *n_got);
  bool *done = calloc(r->n_reqs, sizeof *done);
  replica_event *ev = malloc(1024 * sizeof *ev);
  int mismatches = 0;
  size_t left = 0;
  if (!got || !n_got || !done || !ev) {
    snprintf(why, cap, "out of memory");
    mismatches = -1;
    goto out;
  }
  for (size_t k = 0; k < r->n_reqs; k++) {
    const req_rec *q = &r->reqs[k];
    if (!touched(q, version)) continue;
    wl_request w;
    workload_request(r->wl, k, &w);
    engine_request er = {.prompt = w.prompt, .n_prompt = w.n_prompt, .max_tokens = w.max_tokens,
                         .stop_at_eos = r->s->workload.stop_at_eos};
    got[k] = malloc((size_t)w.max_tokens * sizeof **got);
    if (!got[k] || replica_submit(ref, k, &er, &e) != SC_OK) {
      snprintf(why, cap, "the reference engine refused a request: %.100s", e.msg);
      mismatches = -1;
      goto out;
    }
    left++;
  }
  uint64_t deadline = sc_monotonic_ns() + 120000000000ull;
  while (left > 0 && sc_monotonic_ns() < deadline) {
    int fd = replica_wait_fd(ref);
    if (fd >= 0) {
      struct pollfd p = {.fd = fd, .events = POLLIN};
      poll(&p, 1, 100);
    }
    int m;
    while ((m = replica_poll(ref, ev, 1024)) > 0)
      for (int i = 0; i < m; i++) {
        uint64_t k = ev[i].key;
        if (ev[i].kind == REPLICA_EV_STEP || k >= r->n_reqs || !got[k] || done[k]) continue;
        if (ev[i].kind == REPLICA_EV_TOKEN && n_got[k] < r->reqs[k].max_tokens)
          got[k][n_got[k]++] = ev[i].token;
        if (ev[i].kind == REPLICA_EV_FINISHED || ev[i].kind == REPLICA_EV_FAILED) {
          done[k] = true;
          left--;
        }
      }
    if (replica_health_get(ref) == REPLICA_DEAD) break;
  }
  if (left > 0) {
    snprintf(why, cap, "the reference engine did not finish");
    mismatches = -1;
    goto out;
  }
  for (size_t k = 0; k < r->n_reqs; k++) {
    if (!got[k]) continue;
    const req_rec *q = &r->reqs[k];
    if (n_got[k] != q->n_tok ||
        fv_output_hash(got[k], n_got[k]) != fv_output_hash(q->ids, q->n_tok))
      mismatches++;
  }
out:
  replica_free(ref);
  if (got)
    for (size_t k = 0; k < r->n_reqs; k++) free(got[k]);
  free(got);
  free(n_got);
  free(done);
  free(ev);
  return mismatches;
}

// --- SLOs before, during and after each fault
// What the windows show besides the SLO keys the scenario has.
static const char *const window_metrics[] = {"requests", "ttft_p95_ms", "tpot_p95_ms",
                                             "output_tok_s", "error_rate"};

// The summary of the non-warmup requests arriving in [t0, t1); false when there are none.
static bool window_summary(rt *r, uint64_t t0, uint64_t t1, mt_summary *out) {
  size_t n = 0;
  for (size_t k = 0; k < r->n_reqs; k++) n += r->reqs[k].arrival >= t0 && r->reqs[k].arrival < t1;
  if (n == 0) return false;
  mt_request *m = calloc(n, sizeof *m);
  if (!m) return false;
  n = 0;
  for (size_t k = 0; k < r->n_reqs; k++) {
    const req_rec *q = &r->reqs[k];
    if (q->arrival < t0 || q->arrival >= t1) continue;
    m[n++] = (mt_request){.arrival_ns = q->arrival, .finish_ns = q->finish, .token_ns = q->tok,
                          .n_tokens = q->n_tok, .prompt_tokens = q->prompt_tokens,
                          .status = q->status, .reason = q->reason, .class_idx = q->class_idx,
                          .warmup = q->warmup};
  }
  sc_status s = mt_summarize(m, (int)n, -1, &r->good, t0, t1, out);
  free(m);
  return s == SC_OK && out->requests > 0;
}

// The three windows of fault fi: before = [its phase's start, injected), during = [injected,
// the end of its effect), after = [that end, end). The effect ends when the fault's duration is
// over, else when a swap is done, else when throughput recovered; a fault that never recovered
// has no after window.
static void fault_spans(rt *r, int fi, uint64_t end, uint64_t span[3][2]) {
  const fault_run *fr = &r->rf->fr[fi];
  uint64_t effect = fr->ended ? fr->ended_ns
                    : fr->swap_done ? fr->swap_done_ns
                    : fr->recovered ? fr->recovered_ns
                                    : end;
  if (effect < fr->injected_ns) effect = fr->injected_ns;
  if (effect > end) effect = end;
  uint64_t v[3][2] = {{phase_start_at(r, fr->injected_ns), fr->injected_ns},
                      {fr->injected_ns, effect},
                      {effect, end}};
  memcpy(span, v, sizeof v);
}

// Writes each window's metrics and the verdicts of the scenario's SLOs a window can judge (the
// per-request ones) to fault_window; a failed verdict is also said on the progress stream.
static void fault_windows(rt *r, int fi, int64_t fault_id, uint64_t end) {
  static const char *const names[3] = {"before", "during", "after"};
  uint64_t span[3][2];
  fault_spans(r, fi, end, span);
  char bad[200] = "";
  for (int w = 0; w < 3; w++) {
    mt_summary sum;
    if (span[w][1] <= span[w][0] || !window_summary(r, span[w][0], span[w][1], &sum)) continue;
    store_fault_window row = {.fault_id = fault_id, .window = names[w],
                              .start_ns = span[w][0], .end_ns = span[w][1]};
    for (size_t i = 0; i < sizeof window_metrics / sizeof *window_metrics; i++) {
      row.name = window_metrics[i];
      if (!mt_summary_value(&sum, row.name, &row.value)) continue;
      bool has_slo = false;
      for (int k = 0; k < r->s->slo.n; k++) has_slo |= !strcmp(r->s->slo.items[k].key, row.name);
      if (!has_slo) db_ok(r, store_fault_window_add(r->db, &row, &r->err));
    }
    scn_slo slo = {.n = 0};
    for (int k = 0; k < r->s->slo.n; k++) {
      double v;
      if (mt_summary_value(&sum, r->s->slo.items[k].key, &v))
        slo.items[slo.n++] = r->s->slo.items[k];
    }
    mt_verdict vd[SCN_MAX_SLO];
    int nv = mt_verdicts(&slo, &sum, NULL, NULL, vd, SCN_MAX_SLO);
    for (int k = 0; k < nv; k++) {
      row.name = vd[k].slo;
      row.value = vd[k].actual;
      row.op = vd[k].op;
      row.expected = vd[k].expected;
      row.pass = vd[k].pass;
      db_ok(r, store_fault_window_add(r->db, &row, &r->err));
      size_t n = strlen(bad);
      if (!vd[k].pass && n < sizeof bad - 1)
        snprintf(bad + n, sizeof bad - n, "%s%.6s %.31s %.4g (limit %.4g)", n ? ", " : "",
                 names[w], vd[k].slo, vd[k].actual, vd[k].expected);
    }
    row.op = NULL;
  }
  if (bad[0])
    progress_note(r, "%s: around %s %s: SLO missed: %s", r->dep->label,
                  scenario_fault_kind_name(r->rf->plan.v[fi].kind), r->rf->plan.v[fi].target,
                  bad);
}

// --- hot swap verdicts
// The quality delta of swap fi: its old and new weights on the first prompts of the workload,
// greedy (faults/quality.h). Real mode only: simulated replicas produce no logits.
static void swap_quality(rt *r, int fi) {
  struct rf_state *f = r->rf;
  fault_run *fr = &f->fr[fi];
  if (r->sim || fr->version < 1) return;
  enum { PROMPTS = 8, TOKENS = 16 };
  const int32_t *prompts[PROMPTS];
  int n_prompt[PROMPTS], n = 0;
  for (uint64_t k = 0; k < PROMPTS && k < r->n_reqs; k++, n++) {
    wl_request w;
    workload_request(r->wl, k, &w);
    prompts[n] = w.prompt;
    n_prompt[n] = w.n_prompt;
  }
  if (n == 0) return;
  fq_result q;
  sc_error e = {{0}};
  if (fq_compare(&f->vcfg[fr->version - 1], &f->vcfg[fr->version], prompts, n_prompt, n, TOKENS,
                 &q, &e) != SC_OK) {
    progress_note(r, "%s: hot swap: quality delta not measured: %s", r->dep->label, e.msg);
    return;
  }
  fr->agreement = q.agreement;
  fr->kl = q.kl_mean;
  progress_note(r, "%s: hot swap v%d -> v%d: greedy agreement %.3f over %d positions, mean KL "
                "%.4g nats", r->dep->label, fr->version - 1, fr->version, q.agreement,
                q.positions, q.kl_mean);
}

static void swap_detail(const fault_run *fr, char *d, size_t cap) {
  size_t n = strlen(d);
  if (!fr->swap_done) {
    snprintf(d + n, cap - n, "; not finished: %d replica%s swapped when the workload ended",
             fr->sw_done_reps, fr->sw_done_reps == 1 ? "" : "s");
    return;
  }
  n += (size_t)snprintf(d + n, cap - n, "; %d replica%s on weights v%d, longest drain %.0f ms, "
                        "longest load %.0f ms", fr->sw_done_reps, fr->sw_done_reps == 1 ? "" : "s",
                        fr->version, fr->drain_ms, fr->load_ms);
  if (n < cap && !isnan(fr->dip))
    n += (size_t)snprintf(d + n, cap - n, ", throughput dip %.0f%%", 100 * fr->dip);
  if (n < cap && !isnan(fr->agreement))
    snprintf(d + n, cap - n, ", greedy agreement %.3f, mean KL %.3g nats", fr->agreement, fr->kl);
}

// swap_* metrics: the worst over the deployment's swaps (agreement: the lowest).
static void swap_metrics(rt *r) {
  struct rf_state *f = r->rf;
  double drain = NAN, load = NAN, dip = NAN, agree = NAN, kl = NAN;
  bool any = false;
  for (int i = 0; i < f->plan.n; i++) {
    const fault_run *fr = &f->fr[i];
    if (f->plan.v[i].kind != SCN_FAULT_HOT_SWAP || !fr->injected) continue;
    any = true;
    if (!fr->swap_done) continue;
    if (!(drain >= fr->drain_ms)) drain = fr->drain_ms;
    if (!(load >= fr->load_ms)) load = fr->load_ms;
    if (!isnan(fr->dip) && !(dip >= fr->dip)) dip = fr->dip;
    if (!isnan(fr->agreement) && !(agree <= fr->agreement)) agree = fr->agreement;
    if (!isnan(fr->kl) && !(kl >= fr->kl)) kl = fr->kl;
  }
  if (!any) return;
  add_metric(r, "swap_drain_ms", drain);
  add_metric(r, "swap_load_ms", load);
  add_metric(r, "swap_dip", dip);
  add_metric(r, "swap_agreement", agree);
  add_metric(r, "swap_kl", kl);
}

sc_status rf_end(rt *r, dep_result *dr) {
  struct rf_state *f = r->rf;
  if (!f) return SC_OK;
  uint64_t now = now_rel(r);
  for (int i = 0; i < f->n_rs; i++)
    if (f->rs[i].thr_started) join_restart(r, i, now);
  if (!f->faulted) return SC_OK;
  dr->faulted = true;
  f->dr = dr;
  // KV blocks still held on live replicas now that every request has ended.
  int64_t leak = 0;
  for (int i = 0; i < r->n_reps; i++) {
    if (replica_health_get(r->reps[i]) == REPLICA_DEAD) continue;
    engine_stats st;
    replica_stats(r->reps[i], &st);
    leak += st.kv_used;
  }
  dr->kv_leak = (double)leak;
  // History over the recorded rows.
  SC_TRY(rec_drain(r->rec, &r->err));
  fv_history h;
  rec_lock(r->rec);
  sc_status s = fv_history_check(r->db, r->run_id, r->dep_id, (int64_t)r->n_reqs, &h, &r->err);
  rec_unlock(r->rec);
  SC_TRY(s);
  dr->lost = (double)(h.lost + h.double_done);
  if (!fv_history_ok(&h, 0))
    progress_note(r, "%s: history check FAILED: %lld lost, %lld completed twice, %lld bad "
                  "status, %lld duplicate tokens, %lld with times running backwards",
                  r->dep->label, (long long)h.lost, (long long)h.double_done,
                  (long long)h.bad_status, (long long)h.dup_tokens, (long long)h.bad_times);
  // Recovery: throughput back to 90% of its level before the fault.
  size_t n_tok = 0;
  uint64_t *tok = all_token_times(r, &n_tok);
  uint64_t end = r->n_phases ? r->phases[r->n_phases - 1].end : now;
  double detect_ms = NAN, recover_ms = NAN, reload_ms = NAN;
  bool all_recovered = true;
  int n_injected = 0;
  for (int i = 0; i < f->plan.n; i++) {
    fault_run *fr = &f->fr[i];
    const ft_fault *ft = &f->plan.v[i];
    if (!fr->injected) continue;
    n_injected++;
    bool swap = ft->kind == SCN_FAULT_HOT_SWAP;
    if (swap && tok && fr->swap_done)
      fr->dip = fv_dip(tok, n_tok, phase_start_at(r, fr->injected_ns), fr->injected_ns,
                       fr->swap_done_ns, end, RECOVERY_WINDOW_NS);
    if (ft->kind != SCN_FAULT_CANCEL_STORM && tok && (!swap || fr->swap_done)) {
      // a swap has recovered once it is over and throughput is back
      uint64_t after = swap ? fr->swap_done_ns : fr->detected ? fr->detected_ns : fr->injected_ns;
      uint64_t rec_at = 0;
      if (fv_recovered_at(tok, n_tok, phase_start_at(r, fr->injected_ns), fr->injected_ns, after,
                          end, RECOVERY_WINDOW_NS, RECOVERY_FRAC, &rec_at)) {
        fr->recovered = true;
        fr->recovered_ns = rec_at;
      }
    }
    if (fr->detected) {
      double ms = (double)(fr->detected_ns - fr->injected_ns) / 1e6;
      if (!(detect_ms >= ms)) detect_ms = ms;
    }
    if (fr->recovered) {
      double ms = (double)(fr->recovered_ns - fr->injected_ns) / 1e6;
      if (!(recover_ms >= ms)) recover_ms = ms;
    } else {
      all_recovered = false;
    }
    if (fr->reload_ms > 0 && !(reload_ms >= fr->reload_ms)) reload_ms = fr->reload_ms;
  }
  free(tok);
  if (!all_recovered) recover_ms = NAN; // one fault that never recovered: no figure holds
  dr->detect_ms = detect_ms;
  dr->recover_ms = recover_ms;
  // Equivalence with a fault-free engine.
  char why[160];
  int mm = equivalence(r, why, sizeof why);
  dr->mismatches = mm >= 0 ? mm : NAN;
  if (mm < 0) progress_note(r, "%s: outputs not compared: %s", r->dep->label, why);
  if (mm > 0)
    progress_note(r, "%s: %d output%s differ from a fault-free run", r->dep->label, mm,
                  mm == 1 ? "" : "s");
  for (int i = 0; i < f->plan.n; i++)
    if (f->plan.v[i].kind == SCN_FAULT_HOT_SWAP && f->fr[i].swap_done) swap_quality(r, i);
  // Rows and metrics.
  rec_lock(r->rec);
  for (int i = 0; i < f->plan.n; i++) {
    fault_run *fr = &f->fr[i];
    const ft_fault *ft = &f->plan.v[i];
    char detail[300];
    snprintf(detail, sizeof detail, "%s%s%s", ft->detail,
             fr->injected ? "" : "; not injected: the workload ended first",
             fr->note[0] ? "; " : "");
    if (fr->note[0]) snprintf(detail + strlen(detail), sizeof detail - strlen(detail), "%s",
                              fr->note);
    if (fr->reload_ms > 0)
      snprintf(detail + strlen(detail), sizeof detail - strlen(detail),
               "; restarted in %.0f ms", fr->reload_ms);
    if (ft->kind == SCN_FAULT_HOT_SWAP && fr->injected) swap_detail(fr, detail, sizeof detail);
    store_fault row = {.run_id = r->run_id, .deployment_id = r->dep_id,
                       .kind = scenario_fault_kind_name(ft->kind),
                       .target = ft->target[0] ? ft->target : NULL, .detail = detail,
                       .injected_ns = fr->injected ? fr->injected_ns
                                      : fr->at != UINT64_MAX ? fr->at : 0,
                       .detected_ns = fr->detected_ns, .has_detected = fr->detected,
                       .recovered_ns = fr->recovered_ns, .has_recovered = fr->recovered,
                       .affected = fr->injected ? fr->affected : -1};
    int64_t id = 0;
    if (db_ok(r, store_fault_add(r->db, &row, &id, &r->err)) && fr->injected)
      fault_windows(r, i, id, end);
  }
  rec_unlock(r->rec);
  add_metric(r, "faults_injected", n_injected);
  add_metric(r, "detect_ms", detect_ms);
  add_metric(r, "recover_ms", recover_ms);
  add_metric(r, "reload_ms", reload_ms);
  add_metric(r, "lost_requests", dr->lost);
  add_metric(r, "history_violations",
             (double)(h.double_done + h.bad_status + h.dup_tokens + h.bad_times));
  add_metric(r, "kv_leak_blocks", (double)leak);
  add_metric(r, "output_mismatches", dr->mismatches);
  int retried = 0, resumed = 0, affected = 0;
  for (size_t k = 0; k < r->n_reqs; k++) {
    const req_rec *q = &r->reqs[k];
    retried += q->retries > 0;
    resumed += q->resumed > 0;
    affected += !q->warmup && (q->status == MT_FAILED || q->retries > 0);
  }
  add_metric(r, "fault_affected", affected);
  add_metric(r, "retried_requests", retried);
  add_metric(r, "resumed_requests", resumed);
  add_metric(r, "unexplained_losses", f->unexplained);
  swap_metrics(r);
  return r->db_status;
}

void rf_after_free(rt *r) {
  struct rf_state *f = r->rf;
  if (!f) return;
  stop_supervisor(f);
  if (!f->faulted || !f->have_before) return;
  fv_resources after;
  sc_error e = {{0}};
  if (fv_resources_settled(&f->before, 500, &after, &e) != SC_OK) return;
  rec_lock(r->rec);
  add_metric(r, "leaked_threads", after.threads - f->before.threads);
  add_metric(r, "leaked_fds", after.fds - f->before.fds);
  add_metric(r, "leaked_processes", after.children - f->before.children);
  rec_unlock(r->rec);
  if (after.threads > f->before.threads || after.fds > f->before.fds ||
      after.children > f->before.children)
    progress_note(r, "%s: resources left behind: %+d threads, %+d fds, %+d processes",
                  r->dep->label, after.threads - f->before.threads, after.fds - f->before.fds,
                  after.children - f->before.children);
}

// Stops the supervisor once the replicas are freed (their workers gone with them).
static void stop_supervisor(struct rf_state *f) {
  if (!f->sup_started) return;
  pthread_mutex_lock(&f->mu);
  f->quit = true;
  pthread_cond_signal(&f->cv);
  pthread_mutex_unlock(&f->mu);
  pthread_join(f->sup, NULL);
  pthread_cond_destroy(&f->cv);
  pthread_mutex_destroy(&f->mu);
  f->sup_started = false;
}

void rf_free(rt *r) {
  struct rf_state *f = r->rf;
  if (!f) return;
  stop_supervisor(f);
  ft_plan_free(&f->plan);
  free(f->fr);
  free(f->vcfg);
  if (f->clock_dir[0]) {
    char tmp[128];
    snprintf(tmp, sizeof tmp, "%s.new", f->clock_file);
    unlink(tmp);
    unlink(f->clock_file);
    rmdir(f->clock_dir);
  }
  free(f->rs);
  free(f->retry);
  free(f);
  r->rf = NULL;
}
