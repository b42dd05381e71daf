// Restarts (see runtime.h): a dead replica is rebuilt when the scenario asks for restarts
// (router.restart). In real mode a supervisor thread (serving/supervisor.h) does the blocking
// work, one replica at a time, while the loop keeps stamping the other replicas' tokens; the
// router holds the replica busy meanwhile and nothing else touches it. The thread lives as long
// as the deployment, because a worker dies with the thread that started it (PR_SET_PDEATHSIG).
// The same thread loads a hot swap's new weights (hot_swap.c). A simulated restart returns at
// once and models its load time itself.
#include <stdio.h>
#include <time.h>

#include "faults/kinds.h"
#include "faults/runtime_impl.h"

enum { JOIN_POLL_NS = 5000000 }; // how often a join looks at whether the supervisor is done

static void restart_finished(fault_rt *f, int i, uint64_t now) {
  rep_state *rs = &f->rs[i];
  double ms = (double)(now - rs->restart_begin) / 1e6;
  if (rs->restart_st == SC_OK) {
    // the fault that took it is not over before it is back (recover_ms, docs/faults.md)
    if (rs->fault >= 0 && now > f->fr[rs->fault].back_ns) f->fr[rs->fault].back_ns = now;
    rs->dead_seen = false;
    rs->unhealthy_seen = false;
    rs->n_hist = 0;
    rs->flagged = false;
    frt_note(f, "%s: replica%d restarted (epoch %d) in %.0f ms", f->c.dep->label, i,
             replica_epoch(f->c.reps[i]), ms);
  } else {
    frt_note(f, "%s: replica%d could not be restarted: %s", f->c.dep->label, i,
             rs->restart_err.msg);
  }
  if (rs->fault >= 0 && f->fr[rs->fault].reload_ms == 0) f->fr[rs->fault].reload_ms = ms;
}

bool frt_ask_supervisor(fault_rt *f, int i) {
  rep_state *rs = &f->rs[i];
  if (!f->sup) return false;
  router_set_busy(f->c.rt, i, true);
  rs->thr_started = true;
  sup_ask(f->sup, i, rs->swapping ? rs->swap_cfg : NULL);
  return true;
}

void frt_on_dead(fault_rt *f, int i, uint64_t now) {
  rep_state *rs = &f->rs[i];
  rs->dead_seen = true;
  // Every loss is said and counted: the first a fault explains detects it; a later one of the
  // same fault (an exec that took several replicas) is said as its; one no fault explains is
  // a false detection.
  int fi = frt_loss_fault(f, i);
  char how[200];
  snprintf(how, sizeof how, "replica%d lost: %.150s", i, replica_error(f->c.reps[i]));
  if (fi >= 0) {
    f->explained[(size_t)fi * (size_t)f->n_rs + (size_t)i] = true;
    if (!f->fr[fi].detected)
      frt_detect(f, fi, now, how);
    else
      frt_note(f, "%s: %s (the %s fault's)", f->c.dep->label, how,
               scenario_fault_kind_name(f->plan.v[fi].kind));
  } else {
    f->unexplained++;
    frt_note(f, "%s: %s (no kill, hang or exec fault explains it)", f->c.dep->label, how);
  }
  rs->fault = fi;
  if (!f->c.s->router.restart || !replica_can_restart(f->c.reps[i])) return;
  rs->restart_begin = now;
  if (replica_in_virtual_time(f->c.reps[i])) { // it models its load time itself
    rs->restart_st = replica_restart(f->c.reps[i], &rs->restart_err);
    restart_finished(f, i, now);
    return;
  }
  frt_ask_supervisor(f, i);
}

void frt_join_restart(fault_rt *f, int i, uint64_t now) {
  rep_state *rs = &f->rs[i];
  while (!sup_done(f->sup, i, &rs->restart_st, &rs->restart_err)) {
    struct timespec ts = {0, JOIN_POLL_NS};
    nanosleep(&ts, NULL);
  }
  rs->thr_started = false;
  router_set_busy(f->c.rt, i, false);
  if (rs->swapping) { // frt_swap_tick reads the outcome
    rs->swapping = false;
    return;
  }
  restart_finished(f, i, now);
}

sc_status frt_start_supervisor(fault_rt *f) {
  return sup_new(f->c.reps, f->c.n_reps, NULL, NULL, &f->sup);
}

// Stops the supervisor once the replicas are freed (their workers gone with them).
void frt_stop_supervisor(fault_rt *f) {
  sup_free(f->sup);
  f->sup = NULL;
}
