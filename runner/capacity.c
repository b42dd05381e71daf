// The capacity search (see capacity.h): layouts per GPU kind from the memory planner, a
// geometric bisection on the request rate per layout, each probe a simulated run, and the
// recommendation. Not here: storing the search (reports/store.c), its table and HTML report
// (cli/cmd_capacity.c, reports/report_capacity.c).
#include "runner/capacity.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config/hardware.h"
#include "engine/memplan.h"
#include "kernels/mpi.h"
#include "reports/query.h"
#include "runner/runner.h"

enum { MAX_LAYOUTS_PER_KIND = 256 };

// Where a share of the search writes its layouts (search_share): a pipe (fd >= 0: a forked
// worker) or memory (fd -1: an MPI rank; p grows, oom set when it cannot).
typedef struct share_out {
  int fd;
  char *p; // (n of cap) bytes
  size_t n, cap;
  bool oom;
} share_out;

static bool out_put(share_out *o, const void *p, size_t n);

capacity_options capacity_options_defaults(void) {
  return (capacity_options){.iters = 6,
                            .record = SCN_RECORD_SUMMARY,
                            .error = -1,
                            .saturation = true,
                            .sat_gain = 0.05,
                            .sat_ttft = 3};
}

void capacity_result_free(capacity_result *r) {
  if (!r) return;
  free(r->layouts);
  free(r->points);
  r->layouts = NULL;
  r->points = NULL;
  r->n_layouts = r->n_points = 0;
}

// --- checking the scenario

static sc_status check_scenario(const scenario *s, sc_error *err) {
  const char *f = s->path[0] ? s->path : s->name;
  if (s->mode != SCN_MODE_SIM)
    return sc_fail(err, SC_INVALID, "%s: capacity simulates: the scenario must be mode sim", f);
  if (s->slo.n == 0 && s->slo.n_classes == 0)
    return sc_fail(err, SC_INVALID,
                   "%s: capacity needs an slo: the limits a layout must hold "
                   "(e.g. slo: {ttft_p95_ms: 500, tpot_p95_ms: 50})",
                   f);
  if (s->n_faults > 0)
    return sc_fail(err, SC_INVALID,
                   "%s:%d:%d: capacity searches a fault-free workload; remove "
                   "the faults",
                   f, s->faults[0].line, s->faults[0].col);
  if (s->target.set)
    return sc_fail(err, SC_INVALID, "%s: capacity simulates shardcheck's engine; not a target", f);
  for (int k = 0; k < s->workload.n_phases; k++) {
    const scn_phase *p = &s->workload.phases[k];
    if (p->kind != SCN_PHASE_RATE)
      return sc_fail(err, SC_INVALID,
                     "%s:%d:%d: phase '%s' is a %s phase: capacity varies "
                     "the request rate, so every phase must be a rate phase (open loop: rate, "
                     "duration)",
                     f, p->line, p->col, p->name, scenario_phase_kind_name(p->kind));
  }
  return SC_OK;
}

// --- one probe

typedef struct search {
  scenario *s; // the working copy: one deployment, the kind's profile, the rate
  const scenario *base;
  const capacity_options *o;
  capacity_result *res;
  int cap_points;
  double error; // the kind's interval half-width (0: none)
} search;

static store_cap_point *new_point(search *x, sc_error *err) {
  capacity_result *r = x->res;
  if (r->n_points == x->cap_points) {
    int cap = x->cap_points ? x->cap_points * 2 : 256;
    store_cap_point *p = realloc(r->points, (size_t)cap * sizeof *p);
    if (!p) {
      sc_fail(err, SC_OOM, "capacity: out of memory");
      return NULL;
    }
    r->points = p;
    x->cap_points = cap;
  }
  store_cap_point *p = &r->points[r->n_points++];
  memset(p, 0, sizeof *p);
  return p;
}

static const char *op_of(const rq_verdict *v) { return v->op[0] == '>' ? "<" : ">"; }

// Simulates layout li at `rate` (the first rate phase's; the others scaled alike) into a
// scratch database and appends the point. SC_OK whatever the SLOs said.
static sc_status probe(search *x, int li, double rate, store_cap_point **out, sc_error *err) {
  scenario *s = x->s;
  double base_rate = x->base->workload.phases[0].rate;
  for (int k = 0; k < s->workload.n_phases; k++)
    s->workload.phases[k].rate = x->base->workload.phases[k].rate * rate / base_rate;
  store_cap_point *p = new_point(x, err);
  if (!p) return SC_OOM;
  p->layout = li;
  p->rate = rate;
  store *db = NULL;
  SC_TRY(store_open(":memory:", &db, err));
  runner_options ro = runner_options_defaults();
  ro.progress = RUNNER_PROGRESS_NONE;
  runner_result rr;
  sc_status st = runner_run(s, db, &ro, &rr, err);
  rq_run run = {0};
  if (st == SC_OK) st = rq_run_load(store_db(db), rr.run_id, &run, err);
  if (st == SC_OK) {
    int64_t dep = run.n_deps ? run.deps[0].id : 0;
    rq_metric_cache mc = {0};
    sqlite3 *h = store_db(db);
    p->ttft_p95_ms = rq_metric(h, &mc, rr.run_id, dep, 0, NULL, "ttft_p95_ms");
    p->tpot_p95_ms = rq_metric(h, &mc, rr.run_id, dep, 0, NULL, "tpot_p95_ms");
    p->e2el_p95_ms = rq_metric(h, &mc, rr.run_id, dep, 0, NULL, "e2el_p95_ms");
    p->output_tok_s = rq_metric(h, &mc, rr.run_id, dep, 0, NULL, "output_tok_s");
    p->error_rate = rq_metric(h, &mc, rr.run_id, dep, 0, NULL, "error_rate");
    rq_metric_cache_free(&mc);
    p->pass = !strcmp(rr.status, "complete") && !rr.error[0] && rr.n_failed == 0;
    if (strcmp(rr.status, "complete") || rr.error[0])
      snprintf(p->failed, sizeof p->failed, "the run %s: %.120s", rr.status, rr.error);
    for (int i = 0; i < run.n_verdicts && !p->failed[0]; i++) {
      const rq_verdict *v = &run.verdicts[i];
      if (v->pass) continue;
      if (isnan(v->actual))
        snprintf(p->failed, sizeof p->failed, "%s: no data", v->slo);
      else
        snprintf(p->failed, sizeof p->failed, "%s %.4g %s %.4g", v->slo, v->actual, op_of(v),
                 v->expected);
    }
  }
  rq_run_free(&run);
  store_close(db);
  if (out) *out = p;
  return st;
}

// --- the knee: the saturation rule of a ramp (runner/runner.c, ramp_saturated) on rates

// Whether point k of one search (its points from `first` on) is past the knee: its output
// tok/s no longer rises with the load, while its TTFT p95 is past ttft_growth x the
// lowest-rate point's. A ramp's load is its users; an open loop's is its rate, and below the
// knee the throughput follows it: so "no longer rises" is its throughput below the best
// lower-rate point's x (the rates' ratio) / (1 + gain): short of the load by more than the
// gain. (Read as a ramp reads it, flat within the gain, a rate twice the knee's still rises
// and passes.) Says why in why (when not NULL).
static bool past_knee(const capacity_result *r, const capacity_options *o, int first, int k,
                      char *why, size_t n) {
  const store_cap_point *p = &r->points[k];
  if (!o->saturation || isnan(p->output_tok_s) || isnan(p->ttft_p95_ms)) return false;
  int best = -1, low = -1;
  for (int j = first; j < r->n_points; j++) {
    const store_cap_point *q = &r->points[j];
    if (j == k || !(q->rate < p->rate)) continue;
    if (low < 0 || q->rate < r->points[low].rate) low = j;
    if (!isnan(q->output_tok_s) && (best < 0 || q->output_tok_s > r->points[best].output_tok_s))
      best = j;
  }
  if (best < 0 || low < 0 || isnan(r->points[low].ttft_p95_ms)) return false;
  const store_cap_point *b = &r->points[best], *l = &r->points[low];
  double load = p->rate / b->rate / (1 + o->sat_gain);
  if (!(p->output_tok_s < b->output_tok_s * load && p->ttft_p95_ms > o->sat_ttft * l->ttft_p95_ms))
    return false;
  if (why)
    snprintf(why, n, "past the knee: %.0f tok/s against %.0f at %.3g req/s, TTFT p95 %.0f ms "
             "against %.0f ms at %.3g req/s", p->output_tok_s, b->output_tok_s, b->rate,
             p->ttft_p95_ms, l->ttft_p95_ms, l->rate);
  return true;
}

// Point k of a search (its points from `first` on) past the knee fails, saying why when its
// SLOs held; *sat: the lowest such point so far (-1 none).
static void judge(search *x, int first, int k, int *sat) {
  capacity_result *r = x->res;
  store_cap_point *p = &r->points[k];
  char why[sizeof p->failed];
  if (!past_knee(r, x->o, first, k, why, sizeof why)) return;
  if (p->pass) snprintf(p->failed, sizeof p->failed, "%s", why);
  p->pass = false;
  if (*sat < 0 || p->rate < r->points[*sat].rate) *sat = k;
}

// --- one layout: the bisection

static void set_limit(store_cap_layout *l, const store_cap_point *p) {
  snprintf(l->limit, sizeof l->limit, "at %.3g req/s: %.120s", p->rate, p->failed);
}

// One search of a layout's capacity on the working copy's profile as it is, in at most
// iters + 2 probes when the capacity is within a factor of 2^(iters + 1) of `start`: first
// `start` (clamped to the range), then doubling up while the SLOs hold, or halving down while
// they fail, until a rate that holds and one that fails bracket the capacity (or the range
// ends), then geometric bisection of the bracket with the probes left. Starting at the target
// keeps every failing probe within twice the capacity: a heavily overloaded probe is the most
// expensive kind, and answers nothing more. A point past the knee (judge) fails whatever its
// SLOs said, so the search never probes above it, and a bracket it tops ends once within the
// gain (probes left unspent). *best and *worst: the highest passing point and the lowest
// failing one (-1 none); *knee the highest rate probed below the lowest point past the knee
// (NaN: none was). Its points are marked `bound`.
static sc_status bisect(search *x, int li, double start, int bound, int *best_out, int *worst_out,
                        double *knee, sc_error *err) {
  capacity_result *r = x->res;
  int budget = r->iters + 2;
  int best = -1, worst = -1, first = r->n_points, sat = -1;
  double rate = fmin(fmax(start, r->rate_lo), r->rate_hi);
  store_cap_point *p;
  // bracket
  for (;;) {
    SC_TRY(probe(x, li, rate, &p, err));
    p->bound = bound;
    budget--;
    int k = (int)(p - r->points);
    judge(x, first, k, &sat);
    if (p->pass)
      best = k;
    else
      worst = k;
    if (best >= 0 && worst >= 0) break;
    if (p->pass && rate >= r->rate_hi) break;  // holds at the top: capped
    if (!p->pass && rate <= r->rate_lo) break; // fails at the bottom: none
    rate = p->pass ? fmin(rate * 2, r->rate_hi) : fmax(rate / 2, r->rate_lo);
  }
  // bisect; a bracket whose top is past the knee ends within the gain: the rule tells no rates
  // closer than that apart (a probe up to (1 + gain) x the knee's rate is not past it)
  while (best >= 0 && worst >= 0 && budget > 0 &&
         !(worst == sat && r->points[worst].rate <= r->points[best].rate * (1 + x->o->sat_gain))) {
    double mid = sqrt(r->points[best].rate * r->points[worst].rate);
    SC_TRY(probe(x, li, mid, &p, err));
    p->bound = bound;
    budget--;
    int k = (int)(p - r->points);
    judge(x, first, k, &sat);
    if (p->pass)
      best = k;
    else
      worst = k;
  }
  *best_out = best;
  *worst_out = worst;
  *knee = NAN;
  for (int j = first; sat >= 0 && j < r->n_points; j++)
    if (r->points[j].rate < r->points[sat].rate && !(r->points[j].rate <= *knee))
      *knee = r->points[j].rate;
  return SC_OK;
}

// A layout: its capacity as predicted, then, when the search has an interval (error w > 0),
// its capacity with every price of the profile scaled by 1 / (1 - w) (the pessimistic bound:
// throughput w lower) and by 1 / (1 + w) (the optimistic one), each search started from the
// prediction's capacity moved by the same factor.
static sc_status search_layout(search *x, int li, sc_error *err) {
  capacity_result *r = x->res;
  scenario *s = x->s;
  store_cap_layout *l = &r->layouts[li];
  s->deployments[0] = (scn_deployment){.tp = l->tp, .pp = l->pp, .dp = l->dp};
  snprintf(s->deployments[0].label, sizeof s->deployments[0].label, "%s", l->label);
  s->n_deployments = 1;
  s->hardware.gpus = l->gpus;
  s->hardware.nodes = 0;
  l->max_rate = l->max_rate_lo = l->max_rate_hi = NAN;
  l->output_tok_s = l->cost_per_mtok = NAN;
  int best, worst;
  double knee;
  SC_TRY(bisect(x, li, r->target_rate, 0, &best, &worst, &knee, err));
  l = &r->layouts[li];
  l->knee_rate = knee;
  if (worst >= 0) set_limit(l, &r->points[worst]);
  if (best >= 0) {
    const store_cap_point *b = &r->points[best];
    l->max_rate = l->max_rate_lo = l->max_rate_hi = b->rate;
    l->capped = worst < 0;
    l->output_tok_s = b->output_tok_s;
    if (b->output_tok_s > 0) l->cost_per_mtok = l->cost_per_hour / (b->output_tok_s * 3600) * 1e6;
  }
  double w = x->error;
  r->layouts[li].error = w;
  if (w > 0) {
    const sim_hw nominal = s->hw.sim;
    const double f[2] = {1 / (1 - fmin(w, 0.9)), 1 / (1 + w)};
    for (int k = 0; k < 2; k++) {
      sim_hw_scale(&s->hw.sim, f[k]);
      double start = isnan(r->layouts[li].max_rate) ? r->rate_lo : r->layouts[li].max_rate / f[k];
      sc_status st = bisect(x, li, start, k ? 1 : -1, &best, &worst, &knee, err);
      s->hw.sim = nominal;
      SC_TRY(st);
      double cap = best >= 0 ? r->points[best].rate : NAN;
      if (k)
        r->layouts[li].max_rate_hi = cap;
      else
        r->layouts[li].max_rate_lo = cap;
    }
  }
  l = &r->layouts[li];
  if (x->o->progress) {
    if (!isnan(l->max_rate))
      fprintf(x->o->progress, "  %-10s %-14s %s%.3g req/s [%.3g, %.3g]", l->kind, l->label,
              l->capped ? ">= " : "", l->max_rate, l->max_rate_lo, l->max_rate_hi);
    else
      fprintf(x->o->progress, "  %-10s %-14s below %.3g req/s", l->kind, l->label, r->rate_lo);
    if (!isnan(l->knee_rate)) fprintf(x->o->progress, ", knee %.3g req/s", l->knee_rate);
    fputc('\n', x->o->progress);
    fflush(x->o->progress);
  }
  return SC_OK;
}

// --- layouts of one kind

// Puts the kind's profile into the working copy, as validation resolves it (scenario_deploy.c).
static sc_status use_kind(search *x, const capacity_kind *k, sc_error *err) {
  scenario *s = x->s;
  hw_profile hw;
  SC_TRY(hw_profile_load(k->name, &hw, err));
  if (x->base->hardware.link[0]) SC_TRY(hw_profile_set_link(&hw, x->base->hardware.link, err));
  s->hw = hw;
  s->have_hw = true;
  snprintf(s->hardware.profile, sizeof s->hardware.profile, "%s", k->name);
  s->mp.kv_dtype = hw.sim.host_cores > 0 ? SC_F32 : s->model.kv_cache_dtype[0] ? SC_FP8 : SC_BF16;
  x->error = x->o->error >= 0 ? x->o->error : sim_engine_error(&hw.sim.engine);
  return SC_OK;
}

static sc_status add_layouts(search *x, const capacity_kind *k, sc_error *err) {
  scenario *s = x->s;
  memplan_layout *ls = calloc(MAX_LAYOUTS_PER_KIND, sizeof *ls);
  if (!ls) return sc_fail(err, SC_OOM, "capacity: out of memory");
  int n =
      memplan_enumerate(&s->model.config, &s->hw, &s->mp, k->max_gpus, ls, MAX_LAYOUTS_PER_KIND);
  if (n > MAX_LAYOUTS_PER_KIND) n = MAX_LAYOUTS_PER_KIND;
  capacity_result *r = x->res;
  int added = 0;
  char why[256] = "";
  for (int i = 0; i < n; i++) {
    const memplan_layout *m = &ls[i];
    int node = s->hw.gpus_per_node;
    if (!m->valid || !m->fits) {
      if (!why[0]) snprintf(why, sizeof why, "%s", m->why);
      continue;
    }
    if (node > 0 && m->tp > node && m->tp % node) continue; // as the scenario check refuses
    store_cap_layout *nl = realloc(r->layouts, (size_t)(r->n_layouts + 1) * sizeof *nl);
    if (!nl) {
      free(ls);
      return sc_fail(err, SC_OOM, "capacity: out of memory");
    }
    r->layouts = nl;
    store_cap_layout *l = &r->layouts[r->n_layouts++];
    memset(l, 0, sizeof *l);
    snprintf(l->kind, sizeof l->kind, "%s", k->name);
    l->tp = m->tp;
    l->pp = m->pp;
    l->dp = m->dp;
    l->gpus = m->gpus;
    const int v[3] = {m->tp, m->pp, m->dp};
    static const char *const names[3] = {"tp", "pp", "dp"};
    size_t len = 0;
    for (int j = 0; j < 3; j++)
      if (v[j] != 1)
        len += (size_t)snprintf(l->label + len, sizeof l->label - len, "%s%s%d", len ? "-" : "",
                                names[j], v[j]);
    if (!len) snprintf(l->label, sizeof l->label, "tp1");
    l->cost_per_hour = k->cost_per_gpu_hour * m->gpus;
    added++;
  }
  free(ls);
  if (!added)
    return sc_fail(err, SC_INVALID, "%s: no layout of %s on up to %d %s fits: %s",
                   x->base->path[0] ? x->base->path : x->base->name, s->model.source, k->max_gpus,
                   k->name, why[0] ? why : "none admitted");
  return SC_OK;
}

// --- the recommendation

static void layout_name(const store_cap_layout *l, char *buf, size_t n) {
  snprintf(buf, n, "%.100s %s (%d GPU%s, %.2f/h)", l->kind, l->label, l->gpus,
           l->gpus > 1 ? "s" : "", l->cost_per_hour);
}

// Cheaper first; at equal cost the higher capacity, then fewer GPUs, then the search order.
static bool better(const store_cap_layout *a, int ai, const store_cap_layout *b, int bi) {
  if (a->cost_per_hour != b->cost_per_hour) return a->cost_per_hour < b->cost_per_hour;
  if (a->max_rate != b->max_rate) return a->max_rate > b->max_rate;
  if (a->gpus != b->gpus) return a->gpus < b->gpus;
  return ai < bi;
}

// A layout serves the target when its pessimistic bound does (its prediction, without an
// interval).
static bool serves(const store_cap_layout *l, double target) {
  return !isnan(l->max_rate_lo) && l->max_rate_lo >= target;
}

static void recommend(capacity_result *r) {
  r->best = r->runner_up = -1;
  for (int i = 0; i < r->n_layouts; i++) {
    const store_cap_layout *l = &r->layouts[i];
    if (!serves(l, r->target_rate)) continue;
    if (r->best < 0 || better(l, i, &r->layouts[r->best], r->best)) {
      r->runner_up = r->best;
      r->best = i;
    } else if (r->runner_up < 0 || better(l, i, &r->layouts[r->runner_up], r->runner_up)) {
      r->runner_up = i;
    }
  }
  char a[160], b[160];
  // none is sure to: the cheapest whose prediction serves the target, if any, and why the
  // interval leaves the choice open
  int maybe = -1;
  for (int i = 0; r->best < 0 && i < r->n_layouts; i++) {
    const store_cap_layout *l = &r->layouts[i];
    if (isnan(l->max_rate) || l->max_rate < r->target_rate) continue;
    if (maybe < 0 || better(l, i, &r->layouts[maybe], maybe)) maybe = i;
  }
  if (maybe >= 0) {
    const store_cap_layout *m = &r->layouts[maybe];
    layout_name(m, a, sizeof a);
    snprintf(r->note, sizeof r->note,
             "the interval is too wide to choose: %s serves %.3g req/s by its prediction (up to "
             "%.3g req/s) but its pessimistic bound is %.3g req/s (the profile's error is "
             "+-%.0f%%), and no layout's pessimistic bound serves the target; calibrate the "
             "profile on runs of the engine (docs/calibration.md) to narrow it",
             a, r->target_rate, m->max_rate, m->max_rate_lo, 100 * m->error);
    return;
  }
  if (r->best < 0) {
    int top = -1; // the highest capacity found; ties: cheaper
    for (int i = 0; i < r->n_layouts; i++) {
      const store_cap_layout *l = &r->layouts[i];
      if (isnan(l->max_rate)) continue;
      if (top < 0 || l->max_rate > r->layouts[top].max_rate ||
          (l->max_rate == r->layouts[top].max_rate &&
           l->cost_per_hour < r->layouts[top].cost_per_hour))
        top = i;
    }
    if (top < 0) {
      snprintf(r->note, sizeof r->note,
               "no layout serves %.3g req/s within the SLO (%.200s): none "
               "holds it even at %.3g req/s, the bottom of the range",
               r->target_rate, r->slo, r->rate_lo);
      return;
    }
    const store_cap_layout *t = &r->layouts[top];
    layout_name(t, a, sizeof a);
    snprintf(r->note, sizeof r->note,
             "no layout serves %.3g req/s within the SLO (%.200s): the "
             "best found is %s, up to %.3g req/s (%.160s)",
             r->target_rate, r->slo, a, t->max_rate,
             t->limit[0] ? t->limit : "the top of the range");
    return;
  }
  const store_cap_layout *w = &r->layouts[r->best];
  layout_name(w, a, sizeof a);
  int len = snprintf(r->note, sizeof r->note,
                     "recommended: %s serves up to %s%.3g req/s [%.3g, %.3g] (target "
                     "%.3g), %.3g output tok/s, %.3g per million output tokens",
                     a, w->capped ? ">= " : "", w->max_rate, w->max_rate_lo, w->max_rate_hi,
                     r->target_rate, w->output_tok_s, w->cost_per_mtok);
  if (len < 0 || (size_t)len >= sizeof r->note) return;
  if (r->runner_up < 0) {
    snprintf(r->note + len, sizeof r->note - (size_t)len, "; no other layout serves the target");
    return;
  }
  const store_cap_layout *u = &r->layouts[r->runner_up];
  layout_name(u, b, sizeof b);
  if (u->cost_per_hour > w->cost_per_hour)
    snprintf(r->note + len, sizeof r->note - (size_t)len,
             ". Runner-up: %s, up to %s%.3g req/s; "
             "it lost on cost: %.2f/h more",
             b, u->capped ? ">= " : "", u->max_rate, u->cost_per_hour - w->cost_per_hour);
  else if (u->max_rate < w->max_rate)
    snprintf(r->note + len, sizeof r->note - (size_t)len,
             ". Runner-up: %s, up to %s%.3g req/s; "
             "same cost, it lost on capacity (%.0f%% of the recommended)",
             b, u->capped ? ">= " : "", u->max_rate, 100 * u->max_rate / w->max_rate);
  else
    snprintf(r->note + len, sizeof r->note - (size_t)len,
             ". Runner-up: %s, up to %s%.3g req/s; "
             "same cost and capacity, it lost on %s",
             b, u->capped ? ">= " : "", u->max_rate,
             u->gpus > w->gpus ? "GPU count" : "the search order");
}

// --- searching the layouts, in this process or in worker processes

// Searches layouts w, w + jobs, ... (the kind's profile put in first). With out (a worker)
// each layout is written to it as it is done: its index, the layout, its point count and
// points; then -1, or on error -2, the status and the error.
static sc_status search_share(search *x, const int *kind_of, int w, int jobs, share_out *out,
                              sc_error *err) {
  capacity_result *r = x->res;
  int cur = -1;
  sc_status st = SC_OK;
  for (int i = w; i < r->n_layouts && st == SC_OK; i += jobs) {
    if (kind_of[i] != cur) {
      cur = kind_of[i];
      st = use_kind(x, &x->o->kinds[cur], err);
      if (st != SC_OK) break;
    }
    int first = r->n_points;
    st = search_layout(x, i, err);
    if (st == SC_OK && out) {
      int n = r->n_points - first;
      bool ok = out_put(out, &i, sizeof i) &&
                out_put(out, &r->layouts[i], sizeof r->layouts[i]) &&
                out_put(out, &n, sizeof n) &&
                out_put(out, r->points + first, (size_t)n * sizeof *r->points);
      if (!ok) st = sc_fail(err, SC_IO, "capacity: a worker could not write its results");
    }
  }
  if (out) {
    int end = st == SC_OK ? -1 : -2;
    if (out_put(out, &end, sizeof end) && st != SC_OK)
      (void)(out_put(out, &st, sizeof st) && out_put(out, err, sizeof *err));
  }
  return st;
}

// One worker's output, read whole.
typedef struct wbuf {
  int fd;
  pid_t pid;
  char *p;
  size_t n, cap;
  bool eof;
} wbuf;

static bool take(const wbuf *b, size_t *off, void *dst, size_t n) {
  if (*off + n > b->n) return false;
  memcpy(dst, b->p + *off, n);
  *off += n;
  return true;
}

// Puts the shares' records (w[0..n), each read whole) back in layout order: layouts by index,
// each one's points after those of the layouts before it, the same result as one process
// gives. A share that failed gives its status and error; one cut short, SC_IO.
static sc_status merge_shares(search *x, const wbuf *w, int n_shares, sc_error *err) {
  capacity_result *r = x->res;
  sc_status st = SC_OK;
  store_cap_point **pts = calloc((size_t)r->n_layouts, sizeof *pts);
  int *npts = calloc((size_t)r->n_layouts, sizeof *npts);
  bool *done = calloc((size_t)r->n_layouts, sizeof *done);
  if (st == SC_OK && (!pts || !npts || !done)) st = sc_fail(err, SC_OOM, "capacity: out of memory");
  for (int k = 0; k < n_shares && st == SC_OK; k++) {
    size_t off = 0;
    for (;;) {
      int li;
      if (!take(&w[k], &off, &li, sizeof li)) {
        st = sc_fail(err, SC_IO, "capacity: worker %d ended early (killed?)", k);
        break;
      }
      if (li == -1) break;
      if (li == -2) {
        sc_status ws = SC_IO;
        if (take(&w[k], &off, &ws, sizeof ws) && take(&w[k], &off, err, sizeof *err))
          st = ws;
        else
          st = sc_fail(err, SC_IO, "capacity: worker %d failed", k);
        break;
      }
      int n = 0;
      if (li < 0 || li >= r->n_layouts ||
          !take(&w[k], &off, &r->layouts[li], sizeof r->layouts[li]) ||
          !take(&w[k], &off, &n, sizeof n) || n < 0 ||
          !(pts[li] = malloc((size_t)(n ? n : 1) * sizeof **pts)) ||
          !take(&w[k], &off, pts[li], (size_t)n * sizeof **pts)) {
        st = sc_fail(err, SC_IO, "capacity: worker %d wrote a short record", k);
        break;
      }
      npts[li] = n;
      done[li] = true;
    }
  }
  for (int i = 0; i < r->n_layouts && st == SC_OK; i++) {
    if (!done[i]) {
      st = sc_fail(err, SC_IO, "capacity: layout %d was not searched", i);
      break;
    }
    for (int j = 0; j < npts[i] && st == SC_OK; j++) {
      store_cap_point *p = new_point(x, err);
      if (!p)
        st = SC_OOM;
      else
        *p = pts[i][j];
    }
  }
  for (int i = 0; pts && i < r->n_layouts; i++) free(pts[i]);
  free(pts);
  free(npts);
  free(done);
  return st;
}

// Forks `jobs` workers over fork-time copies of the search, reads what each writes, and puts
// the layouts and points back in layout order: the same result as one process gives.
static sc_status search_parallel(search *x, const int *kind_of, int jobs, sc_error *err) {
  wbuf *w = calloc((size_t)jobs, sizeof *w);
  if (!w) return sc_fail(err, SC_OOM, "capacity: out of memory");
  if (x->o->progress) fflush(x->o->progress);
  fflush(stdout);
  fflush(stderr);
  sc_status st = SC_OK;
  int started = 0;
  for (; started < jobs; started++) {
    int pfd[2];
    if (pipe(pfd) != 0) {
      st = sc_fail(err, SC_IO, "capacity: pipe: %s", strerror(errno));
      break;
    }
    pid_t pid = fork();
    if (pid < 0) {
      close(pfd[0]);
      close(pfd[1]);
      st = sc_fail(err, SC_IO, "capacity: fork: %s", strerror(errno));
      break;
    }
    if (pid == 0) { // the worker: its share, then exit without running the parent's atexit
      close(pfd[0]);
      for (int k = 0; k < started; k++) close(w[k].fd);
      sc_error e = {{0}};
      share_out o = {.fd = pfd[1]};
      sc_status s = search_share(x, kind_of, started, jobs, &o, &e);
      close(pfd[1]);
      _exit(s == SC_OK ? 0 : 1);
    }
    close(pfd[1]);
    w[started] = (wbuf){.fd = pfd[0], .pid = pid};
  }
  // read every worker's pipe to its end
  for (;;) {
    struct pollfd pf[64];
    int idx[64], n = 0;
    for (int k = 0; k < started && n < 64; k++)
      if (!w[k].eof) {
        pf[n] = (struct pollfd){.fd = w[k].fd, .events = POLLIN};
        idx[n++] = k;
      }
    if (n == 0) break;
    if (poll(pf, (nfds_t)n, -1) < 0) {
      if (errno == EINTR) continue;
      st = sc_fail(err, SC_IO, "capacity: poll: %s", strerror(errno));
      break;
    }
    for (int j = 0; j < n; j++) {
      if (!(pf[j].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      wbuf *b = &w[idx[j]];
      if (b->cap - b->n < 65536) {
        size_t cap = b->cap ? b->cap * 2 : 1 << 17;
        char *q = realloc(b->p, cap);
        if (!q) {
          st = sc_fail(err, SC_OOM, "capacity: out of memory");
          b->eof = true;
          continue;
        }
        b->p = q;
        b->cap = cap;
      }
      ssize_t got = read(b->fd, b->p + b->n, b->cap - b->n);
      if (got > 0)
        b->n += (size_t)got;
      else if (got == 0 || errno != EINTR)
        b->eof = true;
    }
  }
  for (int k = 0; k < started; k++) {
    close(w[k].fd);
    int ws = 0;
    while (waitpid(w[k].pid, &ws, 0) < 0 && errno == EINTR) {
    }
  }
  if (st == SC_OK) st = merge_shares(x, w, started, err);
  for (int k = 0; k < jobs; k++) free(w[k].p);
  free(w);
  return st;
}

static bool out_put(share_out *o, const void *p, size_t n) {
  if (o->fd < 0) { // memory
    if (o->cap - o->n < n) {
      size_t cap = o->cap ? o->cap : 1 << 16;
      while (cap - o->n < n) cap *= 2;
      char *q = realloc(o->p, cap);
      if (!q) return !(o->oom = true);
      o->p = q;
      o->cap = cap;
    }
    memcpy(o->p + o->n, p, n);
    o->n += n;
    return true;
  }
  const char *c = p;
  while (n > 0) {
    ssize_t k = write(o->fd, c, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k;
    n -= (size_t)k;
  }
  return true;
}

// The ranks of the MPI job: rank r searches layouts r, r + size, ... into memory, rank 0
// gathers every rank's records (waiting as long as the slowest rank searches) and merges them.
// A rank whose search failed sends its error, which rank 0 returns. Every other rank's result
// is left empty.
static sc_status search_mpi(search *x, const int *kind_of, sc_error *err) {
  int me = sc_mpi_rank(), n = sc_mpi_size();
  share_out mine = {.fd = -1};
  sc_error e = {{0}};
  (void)search_share(x, kind_of, me, n, &mine, &e); // a failure travels in the records
  if (mine.oom) mine.n = 0; // an empty share: rank 0 says it ended early
  void *all = NULL;
  size_t *counts = me == 0 ? calloc((size_t)n, sizeof *counts) : NULL;
  sc_status st = me == 0 && !counts ? sc_fail(err, SC_OOM, "capacity: out of memory") : SC_OK;
  sc_error ge = {{0}};
  sc_status gs = sc_mpi_gather_bytes(mine.p, mine.n, 0, &all, counts, 0, &ge);
  free(mine.p);
  if (st == SC_OK && gs != SC_OK) st = sc_fail(err, gs, "capacity: %s", ge.msg);
  if (me != 0 || st != SC_OK) {
    free(all);
    free(counts);
    if (me != 0) capacity_result_free(x->res);
    return st;
  }
  wbuf *w = calloc((size_t)n, sizeof *w);
  if (!w) st = sc_fail(err, SC_OOM, "capacity: out of memory");
  size_t at = 0;
  for (int k = 0; w && k < n; k++) { // views into the gathered bytes
    w[k] = (wbuf){.fd = -1, .p = (char *)all + at, .n = counts[k], .eof = true};
    at += counts[k];
  }
  x->res->n_points = 0; // rank 0's own points come back in its share, in layout order
  if (st == SC_OK) st = merge_shares(x, w, n, err);
  free(w);
  free(all);
  free(counts);
  return st;
}

// --- the search

static void slo_text(const scenario *s, char *buf, size_t n) {
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < s->slo.n && len < n; i++)
    len += (size_t)snprintf(buf + len, n - len, "%s%s %g", i ? ", " : "", s->slo.items[i].key,
                            s->slo.items[i].limit);
  for (int c = 0; c < s->slo.n_classes && len < n; c++)
    for (int i = 0; i < s->slo.classes[c].n && len < n; i++)
      len += (size_t)snprintf(buf + len, n - len, "%s%s:%s %g", len ? ", " : "",
                              s->slo.classes[c].name, s->slo.classes[c].items[i].key,
                              s->slo.classes[c].items[i].limit);
}

sc_status capacity_search(const scenario *base, const capacity_options *o, capacity_result *out,
                          sc_error *err) {
  memset(out, 0, sizeof *out);
  out->best = out->runner_up = -1;
  SC_TRY(check_scenario(base, err));
  const char *f = base->path[0] ? base->path : base->name;
  capacity_options opt = *o;
  if (opt.n_kinds == 0) {
    snprintf(opt.kinds[0].name, sizeof opt.kinds[0].name, "%.255s", base->hardware.profile);
    opt.kinds[0].max_gpus = base->hardware.gpus > 0 ? base->hardware.gpus : 1;
    opt.kinds[0].cost_per_gpu_hour = 1;
    opt.n_kinds = 1;
  }
  out->target_rate = opt.target_rate > 0 ? opt.target_rate : base->workload.phases[0].rate;
  out->rate_lo = opt.rate_lo > 0 ? opt.rate_lo : out->target_rate / 8;
  out->rate_hi = opt.rate_hi > 0 ? opt.rate_hi : out->target_rate * 4;
  out->iters = opt.iters >= 0 ? opt.iters : 6;
  if (!(out->rate_lo > 0 && out->rate_hi > out->rate_lo))
    return sc_fail(err, SC_INVALID, "%s: the rate range %g:%g is empty (it needs 0 < A < B)", f,
                   out->rate_lo, out->rate_hi);
  slo_text(base, out->slo, sizeof out->slo);
  size_t len = 0;
  for (int k = 0; k < opt.n_kinds && len < sizeof out->costs; k++)
    len += (size_t)snprintf(out->costs + len, sizeof out->costs - len, "%s%s=%g", k ? "," : "",
                            opt.kinds[k].name, opt.kinds[k].cost_per_gpu_hour);
  scenario *s = malloc(sizeof *s);
  if (!s) return sc_fail(err, SC_OOM, "capacity: out of memory");
  *s = *base; // shares text and the like with base, which outlives it; never freed as a scenario
  s->record = opt.record;
  search x = {.s = s, .base = base, .o = &opt, .res = out};
  sc_status st = SC_OK;
  int *kind_of = NULL; // (n_layouts) index into opt.kinds
  for (int k = 0; k < opt.n_kinds && st == SC_OK; k++) {
    int first = out->n_layouts;
    st = use_kind(&x, &opt.kinds[k], err);
    if (st == SC_OK) st = add_layouts(&x, &opt.kinds[k], err);
    int *ko = st == SC_OK ? realloc(kind_of, (size_t)out->n_layouts * sizeof *ko) : NULL;
    if (st == SC_OK && !ko) st = sc_fail(err, SC_OOM, "capacity: out of memory");
    if (ko) kind_of = ko;
    for (int i = first; i < out->n_layouts && st == SC_OK; i++) kind_of[i] = k;
  }
  int jobs = opt.jobs > 1 ? opt.jobs : 1;
  if (jobs > out->n_layouts) jobs = out->n_layouts;
  if (st == SC_OK && opt.mpi && sc_mpi_size() > 1)
    st = search_mpi(&x, kind_of, err);
  else if (st == SC_OK)
    st = jobs > 1 ? search_parallel(&x, kind_of, jobs, err)
                  : search_share(&x, kind_of, 0, 1, NULL, err);
  free(kind_of);
  free(s);
  if (st != SC_OK || (opt.mpi && sc_mpi_rank() != 0)) return st; // its share went to rank 0
  recommend(out);
  return SC_OK;
}
