// What a deployment measured and the run's verdicts: a deployment's summaries from the runner's
// own request records (mt_summarize per phase, class and deployment) and its metric rows, the
// layout equivalence of greedy outputs across deployments, the audit of the metrics against
// their rows, and after the last deployment the scaling metrics and the SLO verdicts
// (mt_verdicts, with extra_value for the keys a summary does not hold).
// Not here: the loop that fills the records (runner/runner.c), the formulas (reports/metrics.c),
// the fault verdicts (faults/runtime.h: fault_rt_end fills dep_result.faults).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner/runner_impl.h"
#include "faults/verdict.h"
#include "reports/query.h"

// --- metrics of a deployment
typedef struct emit_ctx {
  rt *r;
  int64_t phase_id;
  const char *cls;
} emit_ctx;

static void emit_metric(void *ud, const char *name, double v) {
  emit_ctx *c = ud;
  db_ok(c->r, store_metric_add(c->r->db, c->r->run_id, c->r->dep_id, c->phase_id, c->cls, name, v,
                               &c->r->err));
}

void rn_add_metric(rt *r, int64_t phase_id, const char *name, double v) {
  db_ok(r, store_metric_add(r->db, r->run_id, r->dep_id, phase_id, NULL, name, v, &r->err));
}

// Keeps a value of deployment dr for the SLO verdicts (extra_value).
static void keep(dep_result *dr, const char *name, double v) {
  if (dr->n_kept == (int)(sizeof dr->kept / sizeof dr->kept[0])) return;
  dr->kept[dr->n_kept].name = name;
  dr->kept[dr->n_kept++].v = v;
}

// A metric row of the whole deployment dr (phase 0), kept for its SLOs too.
static void dep_metric(rt *r, dep_result *dr, const char *name, double v) {
  rn_add_metric(r, 0, name, v);
  keep(dr, name, v);
}

// The fraction of the replicas' time spent in steps: busy_ns (the summed step durations of every
// replica over a window) over dp x span_ns; NaN for an empty window.
static double busy_frac(const rt *r, double busy_ns, uint64_t span_ns) {
  return span_ns ? busy_ns / ((double)r->dep->dp * (double)span_ns) : NAN;
}

sc_status rn_deployment_summaries(rt *r, dep_result *dr, dep_sums *out) {
  size_t n = r->reqs.n;
  int n_classes = workload_n_classes(r->wl);
  out->nc = n_classes > 1 ? n_classes : 0;
  out->v = calloc((size_t)(r->n_phases ? r->n_phases : 1) * (size_t)(1 + out->nc), sizeof *out->v);
  mt_request *m = calloc(n ? n : 1, sizeof *m);
  if (!out->v || !m) {
    free(m);
    return sc_fail(&r->err, SC_OOM, "runner: out of memory computing metrics");
  }
  for (size_t i = 0; i < n; i++) {
    const req_rec *q = &r->reqs.v[i];
    m[i] = (mt_request){.arrival_ns = q->arrival, .finish_ns = q->finish, .token_ns = q->tok,
                        .n_tokens = q->n_tok, .prompt_tokens = q->prompt_tokens,
                        .status = q->status, .reason = q->reason, .class_idx = q->class_idx,
                        .warmup = q->warmup};
  }
  sc_status s = SC_OK;
  for (int k = 0; k < r->n_phases && s == SC_OK; k++) {
    const phase_run *ph = &r->phases[k];
    if (!ph->id) continue; // never started (interrupted before it)
    const mt_request *pm = m + ph->first_seq;
    int pn = (int)(ph->end_seq - ph->first_seq);
    mt_summary *sum = out->v + (size_t)k * (size_t)(1 + out->nc);
    s = mt_summarize(pm, pn, -1, &r->good, ph->warmup_end, ph->end, &sum[0]);
    for (int cl = 0; cl < out->nc && s == SC_OK; cl++)
      s = mt_summarize(pm, pn, cl, &r->good, ph->warmup_end, ph->end, &sum[1 + cl]);
  }
  if (s == SC_OK) s = mt_summarize(m, (int)n, -1, &r->good, 0, 0, &dr->pooled);
  for (int cl = 0; cl < out->nc && s == SC_OK; cl++)
    s = mt_summarize(m, (int)n, cl, &r->good, 0, 0, &dr->cls_pooled[cl]);
  free(m);
  if (s != SC_OK) return sc_fail(&r->err, s, "runner: computing the metrics failed");
  return SC_OK;
}

sc_status rn_deployment_metrics(rt *r, dep_result *dr, const dep_sums *sums) {
  int conc[SCN_MAX_PHASES * SCN_MAX_RAMP];
  double ttft95[SCN_MAX_PHASES * SCN_MAX_RAMP];
  int n_knee = 0;
  double busy_ns = 0;
  uint64_t span_ns = 0;
  for (int k = 0; k < r->n_phases; k++) {
    phase_run *ph = &r->phases[k];
    if (!ph->id) continue;
    const mt_summary *sum = sums->v + (size_t)k * (size_t)(1 + sums->nc);
    emit_ctx c = {.r = r, .phase_id = ph->id, .cls = NULL};
    mt_summary_each(&sum[0], emit_metric, &c);
    rn_add_metric(r, ph->id, "peak_queue", ph->peak_queue);
    rn_add_metric(r, ph->id, "peak_batch", ph->peak_batch);
    rn_add_metric(r, ph->id, "limit_violations", ph->limit_violations);
    rn_add_metric(r, ph->id, "kv_peak_frac", ph->kv_peak);
    if (r->sim && r->dep->pp > 1 && ph->busy_ns > 0)
      rn_add_metric(r, ph->id, "pp_bubble_frac", ph->bubble_ns / ph->busy_ns);
    rn_add_metric(r, ph->id, "busy_frac", busy_frac(r, ph->busy_ns, ph->end - ph->start));
    busy_ns += ph->busy_ns;
    span_ns += ph->end - ph->start;
    ph->ttft_p95_ms = sum[0].ttft_ms.p95;
    ph->output_tok_s = sum[0].output_tok_s;
    if (sum[0].output_tok_s > dr->peak_tok_s) dr->peak_tok_s = sum[0].output_tok_s;
    if (ph->peak_queue > dr->peak_queue) dr->peak_queue = ph->peak_queue;
    if (ph->peak_batch > dr->peak_batch) dr->peak_batch = ph->peak_batch;
    dr->limit_violations += ph->limit_violations;
    if (ph->kv_peak > dr->kv_peak) dr->kv_peak = ph->kv_peak;
    if (ph->concurrency) {
      conc[n_knee] = ph->concurrency;
      ttft95[n_knee++] = sum[0].ttft_ms.p95;
    }
    for (int cl = 0; cl < sums->nc; cl++) {
      emit_ctx cc = {.r = r, .phase_id = ph->id, .cls = workload_class_name(r->wl, cl)};
      mt_summary_each(&sum[1 + cl], emit_metric, &cc);
    }
  }
  emit_ctx c = {.r = r, .phase_id = 0, .cls = NULL};
  mt_summary_each(&dr->pooled, emit_metric, &c);
  dep_metric(r, dr, "peak_queue", dr->peak_queue);
  dep_metric(r, dr, "peak_batch", dr->peak_batch);
  dep_metric(r, dr, "limit_violations", dr->limit_violations);
  dep_metric(r, dr, "kv_peak_frac", dr->kv_peak);
  dep_metric(r, dr, "busy_frac", busy_frac(r, busy_ns, span_ns));
  dep_metric(r, dr, "gpus", dr->gpus);
  dep_metric(r, dr, "peak_output_tok_s", dr->peak_tok_s);
  for (int i = 0; i < r->s->slo.n; i++)
    if (!strcmp(r->s->slo.items[i].key, "ttft_p95_ms") && n_knee > 0) {
      dr->knee = mt_knee(conc, ttft95, n_knee, r->s->slo.items[i].limit);
      dr->has_knee = true;
      dep_metric(r, dr, "knee_concurrency", dr->knee >= 0 ? dr->knee : NAN);
    }
  for (int cl = 0; cl < sums->nc; cl++) {
    emit_ctx cc = {.r = r, .phase_id = 0, .cls = workload_class_name(r->wl, cl)};
    mt_summary_each(&dr->cls_pooled[cl], emit_metric, &cc);
  }
  return r->db_status;
}

// --- checks of a deployment
// Every layout computes the same greedy outputs: each deployment gets the same requests (the
// same index is the same prompt and max_tokens), so a completed request's tokens are compared
// with those of the same request in the first deployment, by hash. The first deployment keeps
// its outputs as the reference. Mode real, greedy sampling only (simulated tokens carry no
// model output); layout_mismatches is stored for every later deployment.
sc_status rn_layout_equivalence(rt *r, dep_result *dr) {
  dr->layout_mismatches = NAN;
  if (r->sim || r->s->workload.temperature > 0) return SC_OK;
  if (!r->have_ref) {
    r->ref_hash = calloc(r->reqs.n ? r->reqs.n : 1, sizeof *r->ref_hash);
    r->ref_ok = calloc(r->reqs.n ? r->reqs.n : 1, sizeof *r->ref_ok);
    if (!r->ref_hash || !r->ref_ok)
      return sc_fail(&r->err, SC_OOM, "runner: out of memory keeping the reference outputs");
    for (size_t k = 0; k < r->reqs.n; k++) {
      const req_rec *q = &r->reqs.v[k];
      r->ref_ok[k] = q->status == REQ_OK;
      r->ref_hash[k] = fv_output_hash(q->ids, q->n_tok);
    }
    r->n_ref = r->reqs.n;
    r->have_ref = true;
    dr->layout_mismatches = 0;
    keep(dr, "layout_mismatches", 0); // the reference itself: no row
    return SC_OK;
  }
  int mm = 0;
  for (size_t k = 0; k < r->reqs.n && k < r->n_ref; k++) {
    const req_rec *q = &r->reqs.v[k];
    if (q->status == REQ_OK && r->ref_ok[k] && fv_output_hash(q->ids, q->n_tok) != r->ref_hash[k])
      mm++;
  }
  dr->layout_mismatches = mm;
  if (mm > 0)
    rn_note(r, "%s: %d greedy output%s differ from the first deployment's", r->dep->label, mm,
            mm == 1 ? "" : "s");
  dep_metric(r, dr, "layout_mismatches", mm);
  return r->db_status;
}

// The deployment's metrics against the rows they summarize (rq_metrics_audit): a disagreement
// is a bug in shardcheck's formulas or its recorder, and fails the run rather than let a wrong
// figure reach a verdict or a gate.
// At level summary there are no rows to audit against; at level requests, no token rows.
void rn_audit_metrics(rt *r) {
  if (r->s->record == SCN_RECORD_SUMMARY) return;
  char why[200] = "";
  int bad = rq_metrics_audit(store_db(r->db), r->run_id, r->dep_id,
                             r->s->record == SCN_RECORD_TOKENS, why, sizeof why);
  if (bad == 0 || r->res->error[0]) return;
  snprintf(r->res->error, sizeof r->res->error,
           "deployment %s: %d of its metrics disagree with its request and token rows (%s): a "
           "bug in shardcheck's metrics or recorder",
           r->dep->label, bad < 0 ? 0 : bad, why);
}

// --- the verdicts of the run
typedef struct verdict_extra {
  const dep_result *d;
} verdict_extra;

// A metric a summary does not carry, by name: the deployment's own values and the fault
// verdicts' as they were written; a metric the table marks MT_ZERO_UNFAULTED is 0 in a
// deployment without faults. False: not measured here (the verdict fails with no value).
static bool extra_value(void *ud, const char *name, double *out) {
  const dep_result *d = ((verdict_extra *)ud)->d;
  const fault_result *f = &d->faults;
  for (int i = 0; i < d->n_kept; i++)
    if (!strcmp(name, d->kept[i].name)) {
      *out = d->kept[i].v;
      return true;
    }
  for (int i = 0; i < f->n_fm; i++)
    if (!strcmp(name, f->fm[i].name)) {
      *out = f->fm[i].v;
      return true;
    }
  const mt_metric_info *mi = mt_metric_find(name);
  if (!f->faulted && mi && (mi->flags & MT_ZERO_UNFAULTED)) {
    *out = 0;
    return true;
  }
  return false;
}

sc_status rn_finish_run(rt *r, dep_result *drs, int n) {
  int *gpus = calloc((size_t)n + 1, sizeof *gpus), *map = calloc((size_t)n + 1, sizeof *map);
  double *tput = calloc((size_t)n + 1, sizeof *tput), *sp = calloc((size_t)n + 1, sizeof *sp);
  double *ef = calloc((size_t)n + 1, sizeof *ef);
  if (!gpus || !map || !tput || !sp || !ef) {
    free(gpus), free(map), free(tput), free(sp), free(ef);
    return sc_fail(&r->err, SC_OOM, "runner: out of memory");
  }
  int m = 0;
  for (int i = 0; i < n; i++)
    if (drs[i].built) {
      gpus[m] = drs[i].gpus;
      tput[m] = drs[i].peak_tok_s;
      map[m++] = i;
    }
  if (m > 0) mt_scaling(gpus, tput, m, sp, ef);
  for (int j = 0; j < m; j++) {
    dep_result *d = &drs[map[j]];
    d->speedup = sp[j];
    d->efficiency = ef[j];
    r->dep_id = d->id;
    dep_metric(r, d, "speedup", sp[j]);
    dep_metric(r, d, "efficiency", ef[j]);
  }
  // Sim mode: its tokens carry no model output, so there is no equivalence or quality delta
  // to judge (the table's MT_MODEL_OUTPUT metrics).
  scn_slo slo = r->s->slo;
  if (r->sim) {
    int w = 0;
    for (int k = 0; k < slo.n; k++) {
      const char *key = slo.items[k].key;
      const mt_metric_info *mi = mt_metric_find(key);
      if (!mi || !(mi->flags & MT_MODEL_OUTPUT)) {
        slo.items[w++] = slo.items[k];
        continue;
      }
      rn_note(r, "slo %s: not judged in mode sim (simulated tokens carry no model output)", key);
    }
    slo.n = w;
  }
  // the whole deployment's SLOs and every class's: SCN_MAX_SLO each at most
  const int cap = SCN_MAX_SLO * (SCN_MAX_CLASSES + 1);
  mt_verdict *v = calloc((size_t)cap, sizeof *v);
  if (!v) {
    free(gpus), free(map), free(tput), free(sp), free(ef);
    return sc_fail(&r->err, SC_OOM, "runner: out of memory");
  }
  for (int j = 0; j < m; j++) {
    dep_result *d = &drs[map[j]];
    verdict_extra ex = {.d = d};
    int nv = mt_verdicts(&slo, &d->pooled, extra_value, &ex, v, SCN_MAX_SLO);
    // then each prompt class's SLOs against the class's pooled summary ("short:ttft_p95_ms")
    for (int c = 0; c < slo.n_classes; c++)
      nv += mt_class_verdicts(&slo.classes[c], &d->cls_pooled[slo.classes[c].class_idx],
                              v + nv, cap - nv);
    for (int k = 0; k < nv; k++) {
      db_ok(r, store_verdict_add(r->db, r->run_id, d->id, v[k].slo, v[k].op, v[k].expected,
                                 v[k].actual, v[k].pass, &r->err));
      r->res->n_verdicts++;
      r->res->n_failed += !v[k].pass;
    }
  }
  free(v);
  // A deployment that never ran fails every SLO, its classes' too: there is nothing to show
  // it holds.
  for (int i = 0; i < n; i++)
    for (int c = -1; !drs[i].built && drs[i].id && c < slo.n_classes; c++) {
      const scn_slo_item *items = c < 0 ? slo.items : slo.classes[c].items;
      int n_items = c < 0 ? slo.n : slo.classes[c].n;
      for (int k = 0; k < n_items; k++) {
        const scn_slo_item *it = &items[k];
        const mt_metric_info *mi = mt_metric_find(it->key);
        char name[64];
        if (c < 0) snprintf(name, sizeof name, "%.63s", it->key);
        else snprintf(name, sizeof name, "%.31s:%.31s", slo.classes[c].name, it->key);
        db_ok(r, store_verdict_add(r->db, r->run_id, drs[i].id, name,
                                   mi && mi->dir == MT_HIGHER_BETTER ? ">=" : "<=", it->limit,
                                   NAN, false, &r->err));
        r->res->n_verdicts++;
        r->res->n_failed++;
      }
    }
  free(gpus), free(map), free(tput), free(sp), free(ef);
  return r->db_status;
}
