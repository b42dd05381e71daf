// Hot swaps (see runtime.h): a rolling swap of the weights, one replica at a time: drain it
// (it admits nothing new, its requests finish), load the new weights (on the supervisor in
// real mode; a simulated replica models the load time), admit again; then the quality delta
// between the old and new weights (faults/quality.h) and the swap_* metrics.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "faults/quality.h"
#include "faults/runtime_impl.h"
#include "scenarios/deployment.h"

// The weights a swap installs: the latest version's config with its model and dtype.
static sc_status swap_config(fault_rt *f, const ft_fault *ft, const engine_config *base,
                             engine_config *out, sc_error *err) {
  const scn_fault *src = ft->src;
  if (f->c.s->target.set) { // a server's weights are its own: the relaunch command says
    *out = *base;
    return SC_OK;
  }
  model_config m = src->swap_model[0] ? src->swap_config : base->model;
  sc_dtype wdt = base->weight_dtype;
  if (src->swap_dtype[0] && sc_dtype_parse(src->swap_dtype, &wdt) != SC_OK)
    return sc_fail(err, SC_INVALID, "unknown dtype '%s'", src->swap_dtype);
  if (f->c.sim && !src->swap_dtype[0]) wdt = (sc_dtype)base->sim.model.weight_dtype;
  SC_TRY(scenario_engine_config(f->c.s, f->c.dep, &m, wdt, f->c.clock, out, err));
  out->weights_seed = base->weights_seed;
  out->weights_dir =
      src->swap_model[0] ? (src->swap_has_weights ? src->swap_model : NULL) : base->weights_dir;
  if (!f->c.sim) out->weight_dtype = wdt == SC_I8 ? SC_I8 : SC_F32;
  return SC_OK;
}

void frt_swap_begin(fault_rt *f, int fi, uint64_t now) {
  fault_run *fr = &f->fr[fi];
  sc_error e = {{0}};
  engine_config c;
  if (swap_config(f, &f->plan.v[fi], &f->vcfg[f->n_vcfg - 1], &c, &e) != SC_OK) {
    snprintf(fr->note, sizeof fr->note, "not injected: %.140s", e.msg);
    fr->swap_done = true;
    frt_note(f, "%s: hot swap not started: %s", f->c.dep->label, e.msg);
    return;
  }
  fr->version = f->n_vcfg;
  f->vcfg[f->n_vcfg++] = c;
  fr->sw_stage = SW_NEXT;
}

// The next replica the swap takes, or -1 when it has taken them all.
static int swap_pick(fault_rt *f, int fi) {
  const ft_fault *ft = &f->plan.v[fi];
  fault_run *fr = &f->fr[fi];
  if (ft->replica >= 0) return fr->sw_next == 0 ? ft->replica : -1;
  return fr->sw_next < f->c.n_reps ? fr->sw_next : -1;
}

static void swap_finish(fault_rt *f, int fi, uint64_t now) {
  fault_run *fr = &f->fr[fi];
  fr->swap_done = true;
  fr->swap_done_ns = now;
  f->swap_active = -1;
  frt_note(f,
           "%s: hot swap to weights v%d done at %.3f s: %d replica%s swapped, longest "
           "drain %.0f ms, longest load %.0f ms",
           f->c.dep->label, fr->version, (double)now / 1e9, fr->sw_done_reps,
           fr->sw_done_reps == 1 ? "" : "s", fr->drain_ms, fr->load_ms);
}

// Starts loading the new weights on replica i (drained): on the supervisor in real mode, at
// once in sim mode (the simulated replica models the load time).
static void swap_load(fault_rt *f, int fi, int i, uint64_t now) {
  fault_run *fr = &f->fr[fi];
  rep_state *rs = &f->rs[i];
  fr->drain_ms = fmax(fr->drain_ms, (double)(now - fr->sw_begin) / 1e6);
  fr->sw_stage = SW_LOAD;
  fr->sw_begin = now;
  router_set_version(f->c.rt, i, fr->version);
  rs->swapping = true;
  rs->swap_cfg = &f->vcfg[fr->version];
  rs->restart_err = (sc_error){{0}};
  // the command (and model) of its next incarnation, for a replica that launched a server
  const scn_fault *src = f->plan.v[fi].src;
  sc_status st = replica_stage_swap(f->c.reps[i], src->swap_launch[0] ? src->swap_launch : NULL,
                                    src->swap_model[0] ? src->swap_model : NULL,
                                    &rs->restart_err);
  if (st != SC_OK) {
    rs->restart_st = st;
    rs->swapping = false;
    return;
  }
  if (replica_in_virtual_time(f->c.reps[i]) || !frt_ask_supervisor(f, i)) {
    rs->restart_st = replica_swap(f->c.reps[i], rs->swap_cfg, &rs->restart_err);
    rs->swapping = false;
  }
}

// Drives the swap fi one stage further when it can (called every loop turn).
void frt_swap_tick(fault_rt *f, int fi, uint64_t now) {
  fault_run *fr = &f->fr[fi];
  if (fr->swap_done || (f->swap_active >= 0 && f->swap_active != fi)) return;
  f->swap_active = fi;
  for (;;) {
    int i = fr->sw_rep;
    if (fr->sw_stage == SW_NEXT) {
      i = swap_pick(f, fi);
      if (i < 0) {
        swap_finish(f, fi, now);
        return;
      }
      if (router_busy(f->c.rt, i)) return; // restarting: its turn comes once it is back
      fr->sw_next++;
      if (replica_health_get(f->c.reps[i]) == REPLICA_DEAD) {
        frt_note(f, "%s: hot swap: replica%d is lost, not swapped", f->c.dep->label, i);
        continue;
      }
      fr->sw_rep = i;
      fr->sw_stage = SW_DRAIN;
      fr->sw_begin = now;
      replica_set_admitting(f->c.reps[i], false);
      frt_note(f, "%s: hot swap: replica%d draining (%d in flight)", f->c.dep->label, i,
               router_outstanding(f->c.rt, i));
    }
    if (fr->sw_stage == SW_DRAIN) {
      if (router_busy(f->c.rt, i)) return;
      if (replica_health_get(f->c.reps[i]) == REPLICA_DEAD) { // lost while draining
        fr->sw_stage = SW_NEXT;
        continue;
      }
      if (router_outstanding(f->c.rt, i) > 0) return;
      swap_load(f, fi, i, now);
    }
    if (fr->sw_stage == SW_LOAD) {
      rep_state *rs = &f->rs[i];
      if (router_busy(f->c.rt, i) || rs->swapping) return;
      replica_health h = replica_health_get(f->c.reps[i]);
      if (rs->restart_st == SC_OK && h == REPLICA_DRAINING) return; // sim: still loading
      double ms = (double)(now - fr->sw_begin) / 1e6;
      if (rs->restart_st == SC_OK) {
        fr->load_ms = fmax(fr->load_ms, ms);
        fr->sw_done_reps++;
        rs->n_hist = 0; // its step times start over on the new weights
        frt_note(f, "%s: hot swap: replica%d serves weights v%d (loaded in %.0f ms)",
                 f->c.dep->label, i, fr->version, ms);
      } else {
        frt_note(f, "%s: hot swap: replica%d failed to load weights v%d: %s", f->c.dep->label, i,
                 fr->version, rs->restart_err.msg);
        // a replica that could not change its weights but still lives serves the old ones:
        // left draining, it would take nothing more for the rest of the run
        if (replica_health_get(f->c.reps[i]) != REPLICA_DEAD)
          replica_set_admitting(f->c.reps[i], true);
      }
      fr->sw_rep = -1;
      fr->sw_stage = SW_NEXT;
    }
  }
}

// --- hot swap verdicts
// The prompts of the workload's first n requests, copied (the generator's are valid only until
// its next call); false when memory ran out. Free q->buf.
static bool quality_prompts(fault_rt *f, int n, fq_prompts *q) {
  size_t room = 0;
  for (int k = 0; k < n; k++) {
    wl_request w;
    workload_request(f->c.wl, (uint64_t)k, &w);
    room += (size_t)w.n_prompt;
  }
  *q = (fq_prompts){.buf = malloc((room ? room : 1) * sizeof *q->buf)};
  if (!q->buf) return false;
  size_t at = 0;
  for (int k = 0; k < n; k++, q->count++) {
    wl_request w;
    workload_request(f->c.wl, (uint64_t)k, &w);
    memcpy(q->buf + at, w.prompt, (size_t)w.n_prompt * sizeof *q->buf);
    q->p[k] = q->buf + at;
    q->n[k] = w.n_prompt;
    at += (size_t)w.n_prompt;
  }
  return true;
}

// An external target's probes wait this long for their requests.
static uint64_t probe_timeout(const fault_rt *f) {
  uint64_t t = f->c.s->limits.request_timeout_ns;
  return t > 0 && t < UINT64_C(600000000000) ? t : UINT64_C(120000000000);
}

// The last hot swap of the plan (-1: none).
static int last_swap(const fault_rt *f, bool done) {
  int last = -1;
  for (int i = 0; i < f->plan.n; i++)
    if (f->plan.v[i].kind == SCN_FAULT_HOT_SWAP && (!done || f->fr[i].swap_done)) last = i;
  return last;
}

void fault_rt_replicas_ready(fault_rt *f) {
  if (!f || f->c.sim || !f->c.s->target.set) return;
  int fi = last_swap(f, false);
  if (fi < 0) return;
  f->swap_ref_rep = f->plan.v[fi].replica >= 0 ? f->plan.v[fi].replica : 0;
  sc_error e = {{0}};
  if (f->c.s->target.api == SCN_API_CHAT)
    snprintf(f->swap_ref_why, sizeof f->swap_ref_why,
             "a chat target's prompts are words, so no token ids to teacher-force");
  else if (!quality_prompts(f, FQ_PROMPTS, &f->swap_ref_prompts))
    snprintf(f->swap_ref_why, sizeof f->swap_ref_why, "out of memory");
  else if (fq_replica_greedy(f->c.reps[f->swap_ref_rep], f->swap_ref_prompts.p,
                             f->swap_ref_prompts.n, FQ_PROMPTS, FQ_TOKENS, probe_timeout(f),
                             &f->swap_ref, &e) != SC_OK)
    snprintf(f->swap_ref_why, sizeof f->swap_ref_why, "the old weights' greedy tokens: %.160s",
             e.msg);
  else
    frt_note(f, "%s: hot swap: the old weights' greedy tokens taken on replica%d (%d prompts)",
             f->c.dep->label, f->swap_ref_rep, FQ_PROMPTS);
}

// The quality delta of swap fr was not measured: why, said and kept for the metrics' notes.
static void quality_unmeasured(fault_rt *f, fault_run *fr, const char *why) {
  snprintf(fr->quality_why, sizeof fr->quality_why, "%.159s", why);
  frt_note(f, "%s: hot swap v%d: quality delta not measured: %s", f->c.dep->label, fr->version,
           why);
}

// An external target's quality delta (swap fi, the plan's last done one): the greedy tokens
// taken before the workload against the server the swaps left on the same replica.
static void swap_quality_http(fault_rt *f, int fi) {
  fault_run *fr = &f->fr[fi];
  const char *label = f->c.dep->label;
  if (fi != last_swap(f, true)) {
    quality_unmeasured(f, fr, "a server's weights can be probed only before the first swap and "
                              "after the last");
    return;
  }
  if (!f->swap_ref.n) {
    quality_unmeasured(f, fr, f->swap_ref_why);
    return;
  }
  fq_result q;
  sc_error e = {{0}};
  if (fq_replica_agreement(f->c.reps[f->swap_ref_rep], &f->swap_ref, f->swap_ref_prompts.p,
                           f->swap_ref_prompts.n, probe_timeout(f), &q, &e) != SC_OK) {
    quality_unmeasured(f, fr, e.msg);
    return;
  }
  fr->agreement = q.agreement;
  frt_note(f,
           "%s: hot swap v0 -> v%d: greedy agreement %.3f over %d positions on replica%d (KL "
           "not measured: a server sends tokens, not distributions)",
           label, fr->version, q.agreement, q.positions, f->swap_ref_rep);
}

// The quality delta of swap fi: its old and new weights on the first prompts of the workload,
// greedy (faults/quality.h). Real mode only: simulated replicas produce no logits.
void frt_swap_quality(fault_rt *f, int fi) {
  fault_run *fr = &f->fr[fi];
  if (f->c.sim || fr->version < 1) return;
  if (f->c.s->target.set) {
    swap_quality_http(f, fi);
    return;
  }
  int n = f->c.reqs->n < FQ_PROMPTS ? (int)f->c.reqs->n : FQ_PROMPTS;
  if (n == 0) return;
  fq_prompts p;
  if (!quality_prompts(f, n, &p)) {
    quality_unmeasured(f, fr, "out of memory");
    return;
  }
  fq_result q;
  sc_error e = {{0}};
  sc_status st =
      fq_compare(&f->vcfg[fr->version - 1], &f->vcfg[fr->version], p.p, p.n, n, FQ_TOKENS, &q, &e);
  free(p.buf);
  if (st != SC_OK) {
    quality_unmeasured(f, fr, e.msg);
    return;
  }
  fr->agreement = q.agreement;
  fr->kl = q.kl_mean;
  frt_note(f,
           "%s: hot swap v%d -> v%d: greedy agreement %.3f over %d positions, mean KL "
           "%.4g nats",
           f->c.dep->label, fr->version - 1, fr->version, q.agreement, q.positions, q.kl_mean);
}

void frt_swap_detail(const fault_run *fr, char *d, size_t cap) {
  size_t n = strlen(d);
  if (!fr->swap_done) {
    snprintf(d + n, cap - n, "; not finished: %d replica%s swapped when the workload ended",
             fr->sw_done_reps, fr->sw_done_reps == 1 ? "" : "s");
    return;
  }
  n += (size_t)snprintf(d + n, cap - n,
                        "; %d replica%s on weights v%d, longest drain %.0f ms, "
                        "longest load %.0f ms",
                        fr->sw_done_reps, fr->sw_done_reps == 1 ? "" : "s", fr->version,
                        fr->drain_ms, fr->load_ms);
  if (n < cap && !isnan(fr->dip))
    n += (size_t)snprintf(d + n, cap - n, ", throughput dip %.0f%%", 100 * fr->dip);
  if (n < cap && !isnan(fr->agreement))
    n += (size_t)snprintf(d + n, cap - n, ", greedy agreement %.3f", fr->agreement);
  if (n < cap && !isnan(fr->kl)) snprintf(d + n, cap - n, ", mean KL %.3g nats", fr->kl);
}

// swap_* metrics: the worst over the deployment's swaps (agreement: the lowest).
void frt_swap_metrics(fault_rt *f) {
  double drain = NAN, load = NAN, dip = NAN, agree = NAN, kl = NAN;
  bool any = false, done = false;
  const char *why_q = "no swap finished", *why_dip = "no swap finished";
  for (int i = 0; i < f->plan.n; i++) {
    const fault_run *fr = &f->fr[i];
    if (f->plan.v[i].kind != SCN_FAULT_HOT_SWAP || !fr->injected) continue;
    any = true;
    if (!fr->swap_done) continue;
    done = true;
    if (!(drain >= fr->drain_ms)) drain = fr->drain_ms;
    if (!(load >= fr->load_ms)) load = fr->load_ms;
    if (!isnan(fr->dip) && !(dip >= fr->dip)) dip = fr->dip;
    if (!isnan(fr->agreement) && !(agree <= fr->agreement)) agree = fr->agreement;
    if (!isnan(fr->kl) && !(kl >= fr->kl)) kl = fr->kl;
    if (fr->quality_why[0]) why_q = fr->quality_why;
    why_dip = "no token rate before the swap to measure a dip against";
  }
  if (!any) return;
  if (done && f->c.sim) why_q = "simulated tokens carry no model output";
  else if (done && isnan(kl) && !isnan(agree))
    why_q = "a server sends tokens, not next-token distributions";
  const char *why_done = done ? "not measured" : "no swap finished";
  frt_add_value(f, "swap_drain_ms", drain, why_done);
  frt_add_value(f, "swap_load_ms", load, why_done);
  frt_add_value(f, "swap_dip", dip, why_dip);
  frt_add_value(f, "swap_agreement", agree, why_q);
  frt_add_value(f, "swap_kl", kl, why_q);
}
