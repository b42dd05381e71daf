// Calibration of the engine block (see calibrate.h): a virtual-time replay of measured requests
// on one simulated engine, and a Nelder-Mead fit of four log-parameters within their physical
// bounds. What the fit pins and its intervals are calibrate_ident.c's.
#include "runner/calibrate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "kernels/clock.h"
#include "scenarios/deployment.h"
#include "scenarios/workload.h"

#define CALIB_MAX_STEPS 100000000 // a replay that steps this often is stuck
#define CALIB_MAX_EVALS 2400      // replays one fit may run
#define CALIB_RESTARTS 8          // Nelder-Mead searches at most, each from the last one's best
#define CALIB_SEQ_FLOOR_S 1e-7    // step_s and seq_s are fitted as log(x + floor)
#define CALIB_TOL 1e-7            // stop when the simplex's objectives are this close
#define CALIB_STEP_MAX_S 0.05     // host time per step at most (docs/calibration.md)
#define CALIB_SEQ_MAX_S 1e-3      // host time per scheduled sequence at most
#define CALIB_EFF_MIN 0.05        // an efficiency at least
#define CALIB_TP_STEP_MAX_S 0.01  // host time per step per extra rank at most

// --- the replay

sc_status calib_eval(const calib_run *run, calib_errors *out, double *res, sc_error *err) {
  memset(out, 0, sizeof *out);
  const scenario *s = run->s;
  const rq_req_time *req = run->req;
  int n = run->n;
  if (n < 1 || s->n_deployments < 1)
    return sc_fail(err, SC_INVALID, "calibrate: nothing to replay");
  uint64_t now = 0;
  engine_config cfg;
  SC_TRY(scenario_engine_config(s, &s->deployments[0], &s->model.config, s->mp.weight_dtype,
                                sc_clock_virtual(&now), &cfg, err));
  int most = 1;
  for (int i = 0; i < n; i++) most = req[i].prompt_tokens > most ? req[i].prompt_tokens : most;
  int32_t *prompt = malloc((size_t)most * sizeof *prompt);
  uint64_t *first = calloc((size_t)n, sizeof *first), *last = calloc((size_t)n, sizeof *last);
  uint64_t *ids = malloc((size_t)n * sizeof *ids);
  engine *e = NULL;
  sc_status st = prompt && first && last && ids
                     ? engine_new(&cfg, &e, err)
                     : sc_fail(err, SC_OOM, "calibrate: out of memory");
  uint64_t t0 = req[0].arrival_ns;
  int next = 0, done = 0;
  for (long steps = 0; st == SC_OK && done < n; steps++) {
    while (next < n && req[next].arrival_ns - t0 <= now) {
      // each request's own tokens (the engine copies them): no two replayed prompts begin
      // alike, so a profile with prefix caching shares nothing the measured run did not
      for (int i = 0; i < req[next].prompt_tokens; i++)
        prompt[i] = 3 + (int32_t)(wl_hash(UINT64_C(0xca11b), (uint64_t)next, (uint64_t)i) % 1000);
      engine_request q = {.prompt = prompt, .n_prompt = req[next].prompt_tokens,
                          .max_tokens = req[next].output_tokens, .stop_at_eos = false};
      st = engine_submit(e, &q, &ids[next], err);
      if (st != SC_OK) break;
      next++;
    }
    if (st != SC_OK) break;
    if (engine_idle(e)) {
      if (next >= n) break;
      now = req[next].arrival_ns - t0;
      continue;
    }
    engine_step_result r;
    st = engine_step(e, &r, err);
    if (st != SC_OK) break;
    uint64_t end = now + r.info.duration_ns;
    for (int k = 0; k < r.n_events; k++) {
      const engine_event *ev = &r.events[k];
      // ids are handed out in submit order from the first: find the request by search
      int lo = 0, hi = next - 1;
      while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (ids[mid] < ev->req_id) lo = mid + 1;
        else hi = mid;
      }
      if (ids[lo] != ev->req_id) continue;
      if (ev->kind == ENGINE_EV_TOKEN && ev->index == 0) first[lo] = end;
      if (ev->kind == ENGINE_EV_TOKEN) last[lo] = end;
      if (ev->kind != ENGINE_EV_TOKEN) done++;
    }
    if (r.info.duration_ns == 0 && r.n_events == 0) { // nothing could be scheduled
      if (next >= n) {
        st = sc_fail(err, SC_INVALID, "calibrate: the replay of run %lld is stuck with %d of %d "
                     "requests unfinished (do they fit the KV cache?)", (long long)run->id,
                     n - done, n);
        break;
      }
      now = req[next].arrival_ns - t0;
    } else {
      now = end;
    }
    if (steps > CALIB_MAX_STEPS) st = sc_fail(err, SC_INVALID, "calibrate: the replay is stuck");
  }
  engine_free(e);
  if (st == SC_OK) {
    double mt = 0, stt = 0, mp = 0, sp = 0, me = 0, se = 0, et = 0, ep = 0, ee = 0;
    double out_tokens = 0, meas_end = 0, sim_end = 0;
    int np = 0;
    for (int i = 0; i < n; i++) {
      double a = (double)(req[i].arrival_ns - t0);
      mt += (double)(req[i].first_token_ns - req[i].arrival_ns);
      stt += (double)first[i] - a;
      me += (double)(req[i].finish_ns - req[i].arrival_ns);
      se += (double)last[i] - a;
      out_tokens += req[i].output_tokens;
      meas_end = fmax(meas_end, (double)(req[i].finish_ns - t0));
      sim_end = fmax(sim_end, (double)last[i]);
      if (req[i].output_tokens > 1) {
        mp += (double)(req[i].finish_ns - req[i].first_token_ns) / (req[i].output_tokens - 1);
        sp += (double)(last[i] - first[i]) / (req[i].output_tokens - 1);
        np++;
      }
    }
    mt /= n;
    stt /= n;
    me /= n;
    se /= n;
    if (np) {
      mp /= np;
      sp /= np;
    }
    for (int i = 0; i < n; i++) {
      double a = (double)(req[i].arrival_ns - t0);
      double d = ((double)first[i] - a - (double)(req[i].first_token_ns - req[i].arrival_ns)) /
                 (mt > 0 ? mt : 1);
      double q = 0;
      et += d * d;
      if (req[i].output_tokens > 1) {
        double k = req[i].output_tokens - 1;
        q = ((double)(last[i] - first[i]) / k -
             (double)(req[i].finish_ns - req[i].first_token_ns) / k) / (mp > 0 ? mp : 1);
        ep += q * q;
      }
      double x = ((double)last[i] - a - (double)(req[i].finish_ns - req[i].arrival_ns)) /
                 (me > 0 ? me : 1);
      ee += x * x;
      if (res) {
        res[3 * i] = d;
        res[3 * i + 1] = q;
        res[3 * i + 2] = x;
      }
    }
    double mtok = meas_end > 0 ? out_tokens / (meas_end / 1e9) : 0;
    double stok = sim_end > 0 ? out_tokens / (sim_end / 1e9) : 0;
    *out = (calib_errors){.n = n, .meas_ttft_ms = mt / 1e6, .sim_ttft_ms = stt / 1e6,
                          .meas_tpot_ms = mp / 1e6, .sim_tpot_ms = sp / 1e6,
                          .meas_e2e_ms = me / 1e6, .sim_e2e_ms = se / 1e6,
                          .meas_tok_s = mtok, .sim_tok_s = stok,
                          .ttft_err = mt > 0 ? (stt - mt) / mt : 0,
                          .tpot_err = mp > 0 ? (sp - mp) / mp : 0,
                          .e2e_err = me > 0 ? (se - me) / me : 0,
                          .tok_s_err = mtok > 0 ? (stok - mtok) / mtok : 0,
                          .ttft_rms = sqrt(et / n), .tpot_rms = np ? sqrt(ep / np) : 0,
                          .e2e_rms = sqrt(ee / n)};
  }
  free(prompt);
  free(first);
  free(last);
  free(ids);
  return st;
}

// --- the fit

const char *const calib_param_names[CALIB_NP] = {"step_s", "seq_s", "prefill_eff", "decode_eff",
                                                 "tp_step_s"};

void calib_bounds(const sim_hw *hw, double lo[CALIB_NP], double hi[CALIB_NP]) {
  double g = 0;
  for (int i = 0; i < hw->gemm_eff.n && i < SIM_CURVE_MAX; i++) g = fmax(g, hw->gemm_eff.y[i]);
  double me = hw->mem_eff > 0 ? hw->mem_eff : 1;
  lo[0] = lo[1] = 0;
  hi[0] = CALIB_STEP_MAX_S;
  hi[1] = CALIB_SEQ_MAX_S;
  lo[2] = lo[3] = CALIB_EFF_MIN;
  hi[2] = g > 0 ? fmax(1, 1 / g) : 1;
  hi[3] = fmax(1, 1 / me);
  lo[4] = 0;
  hi[4] = CALIB_TP_STEP_MAX_S;
}

void calib_get(const sim_engine *e, double p[CALIB_NP]) {
  p[0] = e->step_s;
  p[1] = e->seq_s;
  p[2] = e->prefill_eff > 0 ? e->prefill_eff : 1;
  p[3] = e->decode_eff > 0 ? e->decode_eff : 1;
  p[4] = e->tp_step_s;
}

void calib_set(const calib_run *runs, int n_runs, const double p[CALIB_NP]) {
  for (int r = 0; r < n_runs; r++) {
    sim_engine *e = &runs[r].s->hw.sim.engine;
    e->step_s = p[0];
    e->seq_s = p[1];
    e->prefill_eff = p[2];
    e->decode_eff = p[3];
    e->tp_step_s = p[4];
  }
}

enum { NP = CALIB_NP };

// The search's coordinates: log(x + floor) of the host times, log of the efficiencies.
static void to_x(const double *p, double *x) {
  x[0] = log(p[0] + CALIB_SEQ_FLOOR_S);
  x[1] = log(p[1] + CALIB_SEQ_FLOOR_S);
  x[2] = log(p[2]);
  x[3] = log(p[3]);
  x[4] = log(p[4] + CALIB_SEQ_FLOOR_S);
}

// Back from coordinates, held within [lo, hi] (a point outside is priced at its projection).
static void from_x(const double *x, const double *lo, const double *hi, double *p) {
  p[0] = exp(x[0]) - CALIB_SEQ_FLOOR_S;
  p[1] = exp(x[1]) - CALIB_SEQ_FLOOR_S;
  p[2] = exp(x[2]);
  p[3] = exp(x[3]);
  p[4] = exp(x[4]) - CALIB_SEQ_FLOOR_S;
  for (int i = 0; i < NP; i++) p[i] = fmin(fmax(p[i], lo[i]), hi[i]);
}

typedef struct fit_ctx {
  const calib_run *runs;
  int n_runs, evals;
  double lo[NP], hi[NP];
  bool fixed[NP]; // held at fix[]: a parameter none of the runs can see
  double fix[NP];
  sc_status st;
  sc_error *err;
} fit_ctx;

static double objective(fit_ctx *c, const double *x) {
  if (c->st != SC_OK) return INFINITY;
  double p[NP];
  from_x(x, c->lo, c->hi, p);
  for (int i = 0; i < NP; i++)
    if (c->fixed[i]) p[i] = c->fix[i];
  calib_set(c->runs, c->n_runs, p);
  double j = 0;
  for (int r = 0; r < c->n_runs; r++) {
    calib_errors ce;
    c->st = calib_eval(&c->runs[r], &ce, NULL, c->err);
    if (c->st != SC_OK) return INFINITY;
    j += c->runs[r].e2e_only ? ce.e2e_rms * ce.e2e_rms
                             : ce.ttft_rms * ce.ttft_rms + ce.tpot_rms * ce.tpot_rms;
  }
  c->evals++;
  return j;
}

// One Nelder-Mead search from x0 with a first step of `step` (log units) along each axis
// (step_s, seq_s and tp_step_s from a 1 ms / 10 us / 1 ms scale when they sit at their floor), at most `budget`
// replays; leaves the best point in x0 and returns its objective.
static double nelder_mead(fit_ctx *c, double *x0, double step, int budget) {
  double x[NP + 1][NP], f[NP + 1];
  int stop = c->evals + budget;
  memcpy(x[0], x0, sizeof x[0]);
  for (int i = 1; i <= NP; i++) {
    memcpy(x[i], x[0], sizeof x[0]);
    double floor_x = log(2 * CALIB_SEQ_FLOOR_S);
    if (i == 1 && x[0][0] < floor_x) x[i][0] = log(1e-3);
    else if (i == 2 && x[0][1] < floor_x) x[i][1] = log(1e-5);
    else if (i == 5 && x[0][4] < floor_x) x[i][4] = log(1e-3);
    else x[i][i - 1] += step;
  }
  for (int i = 0; i <= NP; i++) f[i] = objective(c, x[i]);
  while (c->st == SC_OK && c->evals < stop) {
    // order: best first (insertion sort; ties keep their order, so the fit is deterministic)
    for (int i = 1; i <= NP; i++)
      for (int j = i; j > 0 && f[j] < f[j - 1]; j--) {
        double t = f[j];
        f[j] = f[j - 1];
        f[j - 1] = t;
        double tx[NP];
        memcpy(tx, x[j], sizeof tx);
        memcpy(x[j], x[j - 1], sizeof tx);
        memcpy(x[j - 1], tx, sizeof tx);
      }
    if (fabs(f[NP] - f[0]) <= CALIB_TOL * (fabs(f[0]) + CALIB_TOL * CALIB_TOL)) break;
    double cen[NP] = {0}, xr[NP], xe[NP], xc[NP];
    for (int i = 0; i < NP; i++)
      for (int k = 0; k < NP; k++) cen[k] += x[i][k] / NP;
    for (int k = 0; k < NP; k++) xr[k] = cen[k] + (cen[k] - x[NP][k]);
    double fr = objective(c, xr);
    if (fr < f[0]) {
      for (int k = 0; k < NP; k++) xe[k] = cen[k] + 2 * (cen[k] - x[NP][k]);
      double fe = objective(c, xe);
      memcpy(x[NP], fe < fr ? xe : xr, sizeof xr);
      f[NP] = fe < fr ? fe : fr;
    } else if (fr < f[NP - 1]) {
      memcpy(x[NP], xr, sizeof xr);
      f[NP] = fr;
    } else {
      bool outside = fr < f[NP];
      for (int k = 0; k < NP; k++)
        xc[k] = outside ? cen[k] + 0.5 * (xr[k] - cen[k]) : cen[k] + 0.5 * (x[NP][k] - cen[k]);
      double fc = objective(c, xc);
      if (fc < (outside ? fr : f[NP])) {
        memcpy(x[NP], xc, sizeof xc);
        f[NP] = fc;
      } else { // shrink toward the best
        for (int i = 1; i <= NP; i++) {
          for (int k = 0; k < NP; k++) x[i][k] = x[0][k] + 0.5 * (x[i][k] - x[0][k]);
          f[i] = objective(c, x[i]);
        }
      }
    }
  }
  int best = 0;
  for (int i = 1; i <= NP; i++)
    if (f[i] < f[best]) best = i;
  memcpy(x0, x[best], sizeof x[best]);
  return f[best];
}

sc_status calib_fit(const calib_run *runs, int n_runs, calib_fit_result *out, sc_error *err) {
  memset(out, 0, sizeof *out);
  if (n_runs < 1) return sc_fail(err, SC_INVALID, "calibrate: no run to fit");
  fit_ctx c = {.runs = runs, .n_runs = n_runs, .err = err};
  calib_bounds(&runs[0].s->hw.sim, c.lo, c.hi);
  double start[NP], p[NP], x[NP];
  calib_get(&runs[0].s->hw.sim.engine, start);
  for (int i = 0; i < NP; i++) p[i] = fmin(fmax(start[i], c.lo[i]), c.hi[i]);
  // tp_step_s is a price of a replica's extra ranks: with none in any run it stays as it was
  bool ranks = false;
  for (int r = 0; r < n_runs; r++)
    ranks |= runs[r].s->deployments[0].tp * runs[r].s->deployments[0].pp > 1;
  c.fixed[4] = !ranks;
  c.fix[4] = p[4];
  to_x(p, x);
  // Nelder-Mead restarted from its best point with a fresh simplex until a restart gains
  // nothing: a simplex collapses along the nearly collinear directions of this objective
  // (a decode step's device time and the fixed step time) long before the minimum.
  double best = INFINITY, step = log(2.0);
  for (int r = 0; r < CALIB_RESTARTS && c.st == SC_OK && c.evals < CALIB_MAX_EVALS; r++) {
    double f = nelder_mead(&c, x, step, CALIB_MAX_EVALS / CALIB_RESTARTS);
    bool gained = f < best * (1 - 1e-6);
    best = f < best ? f : best;
    if (!gained && r > 0) break;
    step = log(1.25);
  }
  if (c.st != SC_OK) {
    calib_set(runs, n_runs, start);
    return c.st;
  }
  from_x(x, c.lo, c.hi, p);
  for (int i = 0; i < NP; i++)
    if (c.fixed[i]) p[i] = c.fix[i];
  calib_set(runs, n_runs, p);
  out->engine = runs[0].s->hw.sim.engine;
  out->objective = best;
  out->evaluations = c.evals;
  return SC_OK;
}
