// The fault runtime's plan, detection and loop hooks (see runtime.h; the other jobs are in
// faults/inject.c, supervisor.c, hot_swap.c, straggler.c and judge.c).
//
// The same code serves real and simulated replicas: only the replica implementations differ.
// A restart runs on a supervisor thread in real mode (a worker reloads its weights while the
// loop keeps stamping the other replicas' tokens); the router holds the replica busy
// meanwhile and nothing else touches it. A simulated restart returns at once and models its
// load time itself.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "faults/kinds.h"
#include "faults/runtime_impl.h"

void frt_note(fault_rt *f, const char *fmt, ...) {
  char line[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  f->c.h.note(f->c.h.ud, line);
}

bool fault_rt_faulted(const fault_rt *f) { return f && f->faulted; }

sc_status fault_rt_begin(const fault_ctx *c, fault_rt **out, sc_error *err) {
  fault_rt *f = calloc(1, sizeof *f);
  *out = f;
  if (!f) return sc_fail(err, SC_OOM, "runner: out of memory");
  f->c = *c;
  f->n_rs = f->c.dep->dp;
  f->rs = calloc((size_t)f->n_rs, sizeof *f->rs);
  f->phase_start = calloc((size_t)(c->n_phases > 0 ? c->n_phases : 1), sizeof *f->phase_start);
  if (!f->rs || !f->phase_start) return sc_fail(err, SC_OOM, "runner: out of memory");
  for (int i = 0; i < f->n_rs; i++) f->rs[i].fault = -1;
  f->swap_active = -1;
  f->faulted = f->c.s->n_faults > 0;
  if (!f->faulted) return SC_OK;
  SC_TRY(ft_plan_build(f->c.s, f->c.dep, f->c.sweep, f->c.seed, &f->plan, err));
  f->fr = calloc((size_t)f->plan.n + 1, sizeof *f->fr);
  f->vcfg = calloc((size_t)f->plan.n + 1, sizeof *f->vcfg);
  f->explained = calloc(((size_t)f->plan.n + 1) * (size_t)f->n_rs, sizeof *f->explained);
  if (!f->fr || !f->vcfg || !f->explained) return sc_fail(err, SC_OOM, "runner: out of memory");
  f->vcfg[f->n_vcfg++] = f->c.ec;
  for (int i = 0; i < f->plan.n; i++) {
    f->fr[i].at = f->fr[i].end = UINT64_MAX;
    f->fr[i].sw_rep = -1;
    f->fr[i].dip = f->fr[i].agreement = f->fr[i].kl = NAN;
  }
  if (f->plan.skipped)
    frt_note(f, "%s: %d fault%s not planned here: %s", f->c.dep->label, f->plan.skipped,
             f->plan.skipped == 1 ? "" : "s", f->plan.skipped_why);
  sc_error e = {{0}};
  sc_status cs = frt_clock_setup(f);
  if (cs != SC_OK) return sc_fail(err, cs, "%s", f->err.msg);
  f->have_before = fv_resources_now(&f->before, &e) == SC_OK;
  bool swaps = false;
  for (int i = 0; i < f->plan.n; i++) swaps |= fk_of(f->plan.v[i].kind)->supervisor;
  if (!f->c.sim && (f->c.s->router.restart || swaps) && frt_start_supervisor(f) != SC_OK)
    return sc_fail(err, SC_OOM, "runner: cannot start the supervisor thread");
  return SC_OK;
}

void fault_rt_phase_started(fault_rt *f, int k, const scn_phase *p, const scn_phase *prev,
                            uint64_t start) {
  if (!f) return;
  if (k >= 0 && k < f->c.n_phases) f->phase_start[k] = start;
  if (!f->faulted) return;
  int widx = (int)(p - f->c.s->workload.phases);
  bool first_of_phase = k == 0 || prev != p;
  for (int i = 0; i < f->plan.n; i++) {
    const ft_fault *ft = &f->plan.v[i];
    if (k == 0 && ft->phase < 0)
      f->fr[i].at = start + ft->at_ns;
    else if (ft->phase == widx && first_of_phase)
      f->fr[i].at = start + ft->at_ns;
  }
}

// --- detection and restarts
int frt_fault_of(fault_rt *f, int rep, unsigned kinds) {
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

int frt_loss_fault(const fault_rt *f, int rep) {
  if (!f->faulted || rep < 0 || rep >= f->n_rs) return -1;
  unsigned kinds = fk_detected_by(FK_LOST);
  for (int i = f->plan.n - 1; i >= 0; i--) {
    const ft_fault *ft = &f->plan.v[i];
    if (!f->fr[i].injected || !(kinds & (1u << ft->kind))) continue;
    if (ft->replica >= 0 && ft->replica != rep) continue;
    if (!f->explained[(size_t)i * (size_t)f->n_rs + (size_t)rep]) return i;
  }
  return -1;
}

void frt_detect(fault_rt *f, int fi, uint64_t t, const char *how) {
  if (fi < 0) return;
  fault_run *fr = &f->fr[fi];
  if (fr->detected) return;
  fr->detected = true;
  fr->detected_ns = t;
  frt_note(f, "%s: %s detected at %.3f s (%.0f ms after injection): %s", f->c.dep->label,
           scenario_fault_kind_name(f->plan.v[fi].kind), (double)t / 1e9,
           (double)(t - fr->injected_ns) / 1e6, how);
}

static void check_replicas(fault_rt *f, uint64_t now) {
  for (int i = 0; i < f->c.n_reps && i < f->n_rs; i++) {
    rep_state *rs = &f->rs[i];
    if (rs->thr_started) {
      if (sup_done(f->sup, i, NULL, NULL)) frt_join_restart(f, i, now);
      continue;
    }
    replica_health h = replica_health_get(f->c.reps[i]);
    if (h == REPLICA_DEAD && !rs->dead_seen) {
      frt_on_dead(f, i, now);
    } else if (h == REPLICA_UNHEALTHY && !rs->unhealthy_seen) {
      rs->unhealthy_seen = true;
      frt_detect(f, frt_fault_of(f, i, fk_detected_by(FK_OOM)), now,
                 "allocations keep failing: unhealthy");
    } else if (h == REPLICA_HEALTHY) {
      rs->unhealthy_seen = false;
    }
  }
}

void fault_rt_on_failed(fault_rt *f, int rep, const replica_event *ev, uint64_t t) {
  if (!f || !f->faulted || ev->key >= f->c.reqs->n) return;
  req_rec *q = &f->c.reqs->v[ev->key];
  int fi = -1;
  if (ev->failure == REPLICA_FAIL_OOM) {
    fi = frt_fault_of(f, rep, fk_detected_by(FK_OOM));
    frt_detect(f, fi, t, "a request failed with oom");
  } else if (ev->failure == REPLICA_FAIL_NUMERICAL) {
    fi = frt_fault_of(f, rep, fk_detected_by(FK_NUMERICAL));
    frt_detect(f, fi, t, "NaN/inf logits failed a request");
  } else if (replica_failure_is_loss(ev->failure) && rep < f->n_rs) {
    // the loss being handled (its replica found dead), else the fault that would explain it
    fi = f->rs[rep].dead_seen ? f->rs[rep].fault : frt_loss_fault(f, rep);
  }
  if (fi >= 0 && q->fault != fi) {
    q->fault = fi;
    f->fr[fi].affected++;
  }
}

void fault_rt_on_late(fault_rt *f, int rep, const replica_event *ev, uint64_t t) {
  (void)rep;
  if (!f || ev->key >= f->c.reqs->n) return;
  req_rec *q = &f->c.reqs->v[ev->key];
  if (!q->storm || (ev->kind != REPLICA_EV_FINISHED && ev->kind != REPLICA_EV_FAILED)) return;
  q->storm = false;
  if (q->fault < 0 || q->fault >= f->plan.n) return;
  fault_run *fr = &f->fr[q->fault];
  if (fr->acks > 0 && --fr->acks == 0) {
    fr->recovered = true;
    fr->recovered_ns = t;
  }
}

// --- the loop's hooks
void fault_rt_tick(fault_rt *f, uint64_t now) {
  // Without faults the loop pays no health checks: a replica that dies on its own fails its
  // deployment as before.
  if (!f || !f->faulted) return;
  for (int i = 0; i < f->plan.n; i++) {
    fault_run *fr = &f->fr[i];
    if (!fr->injected && fr->at <= now) frt_act(f, i, false, now);
    if (fr->injected && !fr->ended && fr->end <= now) {
      const ft_fault *ft = &f->plan.v[i];
      if (ft->replica >= 0 && router_busy(f->c.rt, ft->replica)) continue; // after its restart
      frt_act(f, i, true, now);
    }
  }
  check_replicas(f, now);
  for (int i = 0; i < f->plan.n; i++) {
    if (!f->fr[i].injected) continue;
    const fk_row *k = fk_of(f->plan.v[i].kind);
    if (k->tick) k->tick(f, i, now);
    if (f->fr[i].exec) frt_exec_reap(f, i, false);
  }
}

uint64_t fault_rt_next(const fault_rt *f) {
  if (!f) return UINT64_MAX;
  uint64_t d = UINT64_MAX;
  for (int i = 0; i < f->plan.n; i++) {
    const fault_run *fr = &f->fr[i];
    if (!fr->injected && fr->at < d) d = fr->at;
    if (fr->injected && !fr->ended && fr->end < d) d = fr->end;
  }
  return d;
}

bool fault_rt_busy(const fault_rt *f) {
  if (!f) return false;
  for (int i = 0; i < f->plan.n; i++)
    if (f->fr[i].acks > 0) return true;
  for (int i = 0; i < f->n_rs; i++)
    if (f->rs[i].thr_started) return true;
  return false;
}

void fault_rt_free(fault_rt *f) {
  if (!f) return;
  frt_stop_supervisor(f);
  for (int i = 0; f->fr && i < f->plan.n; i++)
    if (f->fr[i].exec) frt_exec_reap(f, i, true);
  ft_plan_free(&f->plan);
  fq_greedy_free(&f->swap_ref);
  free(f->swap_ref_prompts.buf);
  free(f->fr);
  free(f->vcfg);
  free(f->explained);
  if (f->clock_dir[0]) {
    char tmp[128];
    snprintf(tmp, sizeof tmp, "%s.new", f->clock_file);
    unlink(tmp);
    unlink(f->clock_file);
    rmdir(f->clock_dir);
  }
  free(f->rs);
  free(f->phase_start);
  free(f);
}
