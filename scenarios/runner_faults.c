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
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "faults/timeline.h"
#include "faults/verdict.h"
#include "scenarios/runner_rt.h"

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
  // straggler score: the replica's recent step durations
  uint64_t hist[HIST];
  int n_hist;
  int above;           // consecutive steps scoring above the threshold
  bool flagged;
} rep_state;

typedef struct fault_run {
  uint64_t at, end;    // ns since the run's start; UINT64_MAX: not known yet / never
  bool injected, ended, detected, recovered;
  uint64_t injected_ns, detected_ns, recovered_ns;
  int affected;
  int acks;            // cancel storm: cancels not acknowledged yet
  double reload_ms;    // a restart after it: how long the replica took to come back
  char note[160];
} fault_run;

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

bool rf_faulted(const rt *r) { return r->rf && r->rf->faulted; }

sc_status rf_begin(rt *r) {
  struct rf_state *f = calloc(1, sizeof *f);
  if (!f) return sc_fail(&r->err, SC_OOM, "runner: out of memory");
  r->rf = f;
  f->n_rs = r->dep->dp;
  f->rs = calloc((size_t)f->n_rs, sizeof *f->rs);
  if (!f->rs) return sc_fail(&r->err, SC_OOM, "runner: out of memory");
  for (int i = 0; i < f->n_rs; i++) f->rs[i].fault = -1;
  f->faulted = r->s->n_faults > 0;
  if (!f->faulted) return SC_OK;
  SC_TRY(ft_plan_build(r->s, r->dep, r->sweep, r->seed, &f->plan, &r->err));
  f->fr = calloc((size_t)f->plan.n + 1, sizeof *f->fr);
  if (!f->fr) return sc_fail(&r->err, SC_OOM, "runner: out of memory");
  for (int i = 0; i < f->plan.n; i++) f->fr[i].at = f->fr[i].end = UINT64_MAX;
  if (f->plan.skipped)
    progress_note(r, "%s: %d fault%s not planned here: %s", r->dep->label, f->plan.skipped,
                  f->plan.skipped == 1 ? "" : "s", f->plan.skipped_why);
  sc_error e = {{0}};
  f->have_before = fv_resources_now(&f->before, &e) == SC_OK;
  if (!r->sim && r->s->router.restart) {
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
  } else {
    fr->ended = true;
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
    rs->restart_st = replica_restart(f->r->reps[i], &rs->restart_err);
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

static void on_dead(rt *r, int i, uint64_t now) {
  rep_state *rs = &r->rf->rs[i];
  rs->dead_seen = true;
  unsigned lethal = 1u << SCN_FAULT_KILL | 1u << SCN_FAULT_HANG;
  int fi = fault_of(r, i, lethal);
  char how[200];
  snprintf(how, sizeof how, "replica%d lost: %.150s", i, replica_error(r->reps[i]));
  if (fi >= 0) detect(r, fi, now, how);
  else progress_note(r, "%s: %s", r->dep->label, how);
  rs->fault = fi;
  if (!r->s->router.restart || !replica_can_restart(r->reps[i])) return;
  rs->restart_begin = now;
  if (r->sim) { // a simulated restart models its load time itself
    rs->restart_st = replica_restart(r->reps[i], &rs->restart_err);
    restart_finished(r, i, now);
    return;
  }
  struct rf_state *f = r->rf;
  if (!f->sup_started) return;
  atomic_store(&rs->thr_done, false);
  r->busy[i] = true;
  rs->thr_started = true;
  pthread_mutex_lock(&f->mu);
  rs->want = true;
  pthread_cond_signal(&f->cv);
  pthread_mutex_unlock(&f->mu);
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
    if (fi >= 0) detect(r, fi, t, how);
    else progress_note(r, "%s: %s", r->dep->label, how);
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
static int equivalence(rt *r, char *why, size_t cap) {
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
    if (q->status == MT_OK && q->state == REQ_DONE && (q->retries > 0 || q->fault >= 0)) n++;
  }
  if (n == 0) {
    snprintf(why, cap, "no request that a fault touched completed");
    return -1;
  }
  engine_config ec = r->ec;
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
    if (!(q->status == MT_OK && q->state == REQ_DONE && (q->retries > 0 || q->fault >= 0)))
      continue;
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

sc_status rf_end(rt *r, dep_result *dr) {
  struct rf_state *f = r->rf;
  if (!f) return SC_OK;
  uint64_t now = now_rel(r);
  for (int i = 0; i < f->n_rs; i++)
    if (f->rs[i].thr_started) join_restart(r, i, now);
  if (!f->faulted) return SC_OK;
  dr->faulted = true;
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
                  "status, %lld duplicate tokens", r->dep->label, (long long)h.lost,
                  (long long)h.double_done, (long long)h.bad_status, (long long)h.dup_tokens);
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
    if (ft->kind != SCN_FAULT_CANCEL_STORM && tok) {
      uint64_t after = fr->detected ? fr->detected_ns : fr->injected_ns;
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
    store_fault row = {.run_id = r->run_id, .deployment_id = r->dep_id,
                       .kind = scenario_fault_kind_name(ft->kind),
                       .target = ft->target[0] ? ft->target : NULL, .detail = detail,
                       .injected_ns = fr->injected ? fr->injected_ns
                                      : fr->at != UINT64_MAX ? fr->at : 0,
                       .detected_ns = fr->detected_ns, .has_detected = fr->detected,
                       .recovered_ns = fr->recovered_ns, .has_recovered = fr->recovered,
                       .affected = fr->injected ? fr->affected : -1};
    db_ok(r, store_fault_add(r->db, &row, NULL, &r->err));
  }
  rec_unlock(r->rec);
  add_metric(r, "faults_injected", n_injected);
  add_metric(r, "detect_ms", detect_ms);
  add_metric(r, "recover_ms", recover_ms);
  add_metric(r, "reload_ms", reload_ms);
  add_metric(r, "lost_requests", dr->lost);
  add_metric(r, "history_violations", (double)(h.double_done + h.bad_status + h.dup_tokens));
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
  return r->db_status;
}

void rf_after_free(rt *r) {
  struct rf_state *f = r->rf;
  if (!f) return;
  stop_supervisor(f);
  if (!f->faulted || !f->have_before) return;
  fv_resources after;
  sc_error e = {{0}};
  if (fv_resources_now(&after, &e) != SC_OK) return;
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
  free(f->rs);
  free(f->retry);
  free(f);
  r->rf = NULL;
}
