// What a calibration's runs pin and how far its predictions can be trusted (see calibrate.h):
// the parameters on a bound, the flat directions of the objective (the eigenvectors of its
// Gauss-Newton curvature, from central differences of every request's error), the interval
// around each prediction, and leave-one-run-out cross-validation.
//
// Not here: the replay and the search (calibrate.c), printing and the profile (cli/).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner/calibrate.h"

enum { NP = CALIB_NP };

#define IDENT_H        0.05   // central difference step, log units
#define IDENT_MOVE     0.1823 // log(1.2): the move a direction must answer
#define IDENT_SHIFT    1e-5   // ... with this much objective per term: a 0.3% shift of the errors
#define PRED_FLAT_MOVE 0.4055 // log(1.5): how far a prediction is moved along a flat direction
#define PRED_FLOOR     0.02   // the intervals' floor (the replay's rough objective)
#define PRED_Z         2.0    // the intervals' half-width in units of the spread

// A host time the runs leave at 0 and cannot see is tried at this value: the order of what
// serving engines spend (docs/calibration.md): 1 ms a step, 10 us a sequence, 2 ms a step per
// extra rank (vLLM V0 handing a step to its Ray or multiprocessing workers).
static const double typical[NP] = {1e-3, 1e-5, 0, 0, 2e-3};

// --- residuals

// The rows of run r in the residual vector: its TTFT and TPOT errors (E2E for an e2e_only run)
// per request, each over the root of its count, so that the vector's squared length is the
// objective.
static int run_rows(const calib_run *r) { return r->e2e_only ? r->n : 2 * r->n; }

static sc_status residuals(const calib_run *runs, int n_runs, double *out, double *scratch,
                           sc_error *err) {
  int k = 0;
  for (int i = 0; i < n_runs; i++) {
    const calib_run *r = &runs[i];
    calib_errors e;
    SC_TRY(calib_eval(r, &e, scratch, err));
    int np = 0;
    for (int j = 0; j < r->n; j++) np += r->req[j].output_tokens > 1;
    for (int j = 0; j < r->n; j++) {
      if (r->e2e_only) {
        out[k++] = scratch[3 * j + 2] / sqrt((double)r->n);
      } else {
        out[k++] = scratch[3 * j] / sqrt((double)r->n);
        out[k++] = np ? scratch[3 * j + 1] / sqrt((double)np) : 0;
      }
    }
  }
  return SC_OK;
}

// --- a symmetric eigen-decomposition (cyclic Jacobi; n <= 4)

static void jacobi(int n, double a[NP][NP], double w[NP], double v[NP][NP]) {
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) v[i][j] = i == j;
  for (int sweep = 0; sweep < 50; sweep++) {
    double off = 0;
    for (int i = 0; i < n; i++)
      for (int j = i + 1; j < n; j++) off += a[i][j] * a[i][j];
    if (off < 1e-30) break;
    for (int p = 0; p < n; p++)
      for (int q = p + 1; q < n; q++) {
        if (fabs(a[p][q]) < 1e-300) continue;
        double th = (a[q][q] - a[p][p]) / (2 * a[p][q]);
        double t = (th >= 0 ? 1 : -1) / (fabs(th) + sqrt(th * th + 1));
        double c = 1 / sqrt(t * t + 1), s = t * c;
        for (int k = 0; k < n; k++) {
          double akp = a[k][p], akq = a[k][q];
          a[k][p] = c * akp - s * akq;
          a[k][q] = s * akp + c * akq;
        }
        for (int k = 0; k < n; k++) {
          double apk = a[p][k], aqk = a[q][k];
          a[p][k] = c * apk - s * aqk;
          a[q][k] = s * apk + c * aqk;
        }
        for (int k = 0; k < n; k++) {
          double vkp = v[k][p], vkq = v[k][q];
          v[k][p] = c * vkp - s * vkq;
          v[k][q] = s * vkp + c * vkq;
        }
      }
  }
  for (int i = 0; i < n; i++) w[i] = a[i][i];
}

// Whether parameter i is an efficiency (the others are host times).
static bool is_eff(int i) { return i == 2 || i == 3; }

// What kind of run pins a direction, by its two largest components.
static void hint(const double *v, char *buf, size_t cap) {
  int a = 0, b = -1;
  for (int i = 1; i < NP; i++)
    if (fabs(v[i]) > fabs(v[a])) a = i;
  for (int i = 0; i < NP; i++)
    if (i != a && (b < 0 || fabs(v[i]) > fabs(v[b]))) b = i;
  bool host_a = !is_eff(a), host_b = b >= 0 && !is_eff(b);
  bool pre = a == 2 || (b == 2 && fabs(v[2]) > 0.3);
  if (host_a && host_b)
    snprintf(buf, cap,
             "host time per step against per sequence: add a run at another load "
             "level (another batch size or concurrency)");
  else if (pre)
    snprintf(buf, cap,
             "prefill efficiency against the rest: add runs with other prompt "
             "lengths, or at another TP degree");
  else if (host_a || host_b)
    snprintf(buf, cap,
             "host time against decode efficiency: add a run at another TP degree "
             "(device time per step changes with it, host time does not) or at "
             "another load level");
  else
    snprintf(buf, cap, "add a run at another TP degree or load level");
}

// --- identification

sc_status calib_identify(const calib_run *runs, int n_runs, calib_ident *out, sc_error *err) {
  memset(out, 0, sizeof *out);
  double lo[NP], hi[NP], p[NP];
  calib_bounds(&runs[0].s->hw.sim, lo, hi);
  calib_get(&runs[0].s->hw.sim.engine, p);
  int free_ix[NP], nf = 0, rows = 0, terms = 0, most = 1;
  for (int i = 0; i < NP; i++) {
    double tol = 1e-6 * fmax(fabs(hi[i]), 1e-9);
    out->at_bound[i] = p[i] <= lo[i] + tol || p[i] >= hi[i] - tol;
    out->at_hi[i] = p[i] >= hi[i] - tol;
    if (!out->at_bound[i]) free_ix[nf++] = i;
  }
  for (int r = 0; r < n_runs; r++) {
    rows += run_rows(&runs[r]);
    terms += runs[r].e2e_only ? 1 : 2;
    most = runs[r].n > most ? runs[r].n : most;
  }
  double *jac = calloc((size_t)rows * NP, sizeof *jac), *plus = malloc((size_t)rows * sizeof *plus);
  double *minus = malloc((size_t)rows * sizeof *minus);
  double *scratch = malloc((size_t)most * 3 * sizeof *scratch);
  sc_status st =
      jac && plus && minus && scratch ? SC_OK : sc_fail(err, SC_OOM, "calibrate: out of memory");
  // central differences in log(parameter) of each free parameter
  for (int f = 0; f < nf && st == SC_OK; f++) {
    int k = free_ix[f];
    double q[NP];
    memcpy(q, p, sizeof q);
    q[k] = p[k] * exp(IDENT_H);
    calib_set(runs, n_runs, q);
    st = residuals(runs, n_runs, plus, scratch, err);
    q[k] = p[k] * exp(-IDENT_H);
    calib_set(runs, n_runs, q);
    if (st == SC_OK) st = residuals(runs, n_runs, minus, scratch, err);
    out->evaluations += 2 * n_runs;
    for (int j = 0; j < rows && st == SC_OK; j++)
      jac[(size_t)j * NP + f] = (plus[j] - minus[j]) / (2 * IDENT_H);
  }
  calib_set(runs, n_runs, p);
  if (st == SC_OK && nf > 0) {
    double a[NP][NP] = {{0}}, w[NP], v[NP][NP];
    for (int i = 0; i < nf; i++)
      for (int j = 0; j < nf; j++)
        for (int r = 0; r < rows; r++) a[i][j] += jac[(size_t)r * NP + i] * jac[(size_t)r * NP + j];
    jacobi(nf, a, w, v);
    // flat: a move of IDENT_MOVE (20%) along it raises the objective by less than a 0.3%
    // shift of every request's error would (IDENT_SHIFT per term)
    double need = IDENT_SHIFT * terms / (IDENT_MOVE * IDENT_MOVE);
    for (int e = 0; e < nf; e++) {
      if (w[e] >= need) continue;
      calib_flat *fl = &out->flat[out->n_flat++];
      memset(fl->v, 0, sizeof fl->v);
      int big = 0;
      for (int i = 0; i < nf; i++) {
        fl->v[free_ix[i]] = v[i][e];
        if (fabs(v[i][e]) > fabs(v[big][e])) big = i;
      }
      if (v[big][e] < 0) // a sign that reads the same on every machine
        for (int i = 0; i < NP; i++) fl->v[i] = -fl->v[i];
      fl->curvature = w[e] < 0 ? 0 : w[e];
      hint(fl->v, fl->hint, sizeof fl->hint);
    }
  }
  // a host time at 0 that the runs cannot see (moving it to its typical value changes the
  // objective less than a 0.3% shift of the errors would): a flat direction of its own,
  // one-sided
  for (int i = 0; st == SC_OK && i < NP; i++) {
    if (!(typical[i] > 0) || !out->at_bound[i] || out->at_hi[i] || out->n_flat == NP) continue;
    double q[NP], j0 = 0, j1 = 0;
    memcpy(q, p, sizeof q);
    st = residuals(runs, n_runs, plus, scratch, err);
    for (int r = 0; st == SC_OK && r < rows; r++) j0 += plus[r] * plus[r];
    q[i] = typical[i];
    calib_set(runs, n_runs, q);
    if (st == SC_OK) st = residuals(runs, n_runs, minus, scratch, err);
    calib_set(runs, n_runs, p);
    for (int r = 0; st == SC_OK && r < rows; r++) j1 += minus[r] * minus[r];
    out->evaluations += 2 * n_runs;
    if (st != SC_OK || fabs(j1 - j0) >= IDENT_SHIFT * terms) continue;
    calib_flat *fl = &out->flat[out->n_flat++];
    memset(fl->v, 0, sizeof fl->v);
    fl->v[i] = 1;
    fl->one_sided = true;
    fl->curvature = fabs(j1 - j0);
    if (i == 4)
      snprintf(fl->hint, sizeof fl->hint,
               "the host time a step costs per extra rank: add a run at another TP degree");
    else
      hint(fl->v, fl->hint, sizeof fl->hint);
  }
  bool bad_bound = false;
  for (int i = 0; i < NP; i++) bad_bound |= out->at_hi[i] || (is_eff(i) && out->at_bound[i]);
  out->identified = st == SC_OK && out->n_flat == 0 && !bad_bound;
  free(jac);
  free(plus);
  free(minus);
  free(scratch);
  return st;
}

// --- predictions and their intervals

static void put(calib_pred *c, double value, double w) {
  c->value = value;
  c->lo = value * fmax(0, 1 - w);
  c->hi = value * (1 + w);
}

sc_status calib_predict(const calib_run *r, const calib_ident *id, calib_spread sp,
                        calib_prediction *out, sc_error *err) {
  memset(out, 0, sizeof *out);
  SC_TRY(calib_eval(r, &out->e, NULL, err));
  double base =
      PRED_Z * sqrt(sp.fit_rel * sp.fit_rel + sp.cv_rel * sp.cv_rel + PRED_FLOOR * PRED_FLOOR);
  double flat[4] = {0, 0, 0, 0}; // ttft, tpot, e2e, tok/s
  double p[NP], lo[NP], hi[NP];
  calib_get(&r->s->hw.sim.engine, p);
  calib_bounds(&r->s->hw.sim, lo, hi);
  sc_status st = SC_OK;
  // the moves: each flat direction both ways (a host time at 0 to its typical value), then each
  // parameter on its upper bound back inside by the same factor: the bound, not the runs,
  // stopped it there, so the fit is missing something and the parameter is not pinned
  int n_moves = id ? 2 * id->n_flat + NP : 0;
  for (int k = 0; k < n_moves && st == SC_OK; k++) {
    double q[NP];
    memcpy(q, p, sizeof q);
    if (k < 2 * id->n_flat) {
      const calib_flat *fl = &id->flat[k / 2];
      int sgn = k % 2 ? 1 : -1;
      if (fl->one_sided && sgn < 0) continue;
      for (int i = 0; i < NP; i++)
        q[i] = fl->one_sided
                   ? (fl->v[i] > 0 ? typical[i] : p[i])
                   : fmin(fmax(p[i] * exp(sgn * PRED_FLAT_MOVE * fl->v[i]), lo[i]), hi[i]);
    } else {
      int i = k - 2 * id->n_flat;
      if (!id->at_hi[i]) continue;
      q[i] = fmax(p[i] * exp(-PRED_FLAT_MOVE), lo[i]);
    }
    {
      calib_set(r, 1, q);
      calib_errors e;
      st = calib_eval(r, &e, NULL, err);
      if (st != SC_OK) break;
      const double a[4] = {e.sim_ttft_ms, e.sim_tpot_ms, e.sim_e2e_ms, e.sim_tok_s};
      const double b[4] = {out->e.sim_ttft_ms, out->e.sim_tpot_ms, out->e.sim_e2e_ms,
                           out->e.sim_tok_s};
      for (int m = 0; m < 4; m++)
        if (b[m] > 0) flat[m] = fmax(flat[m], fabs(a[m] / b[m] - 1));
    }
  }
  calib_set(r, 1, p);
  SC_TRY(st);
  put(&out->ttft_ms, out->e.sim_ttft_ms, base + flat[0]);
  put(&out->tpot_ms, out->e.sim_tpot_ms, base + flat[1]);
  put(&out->e2e_ms, out->e.sim_e2e_ms, base + flat[2]);
  put(&out->tok_s, out->e.sim_tok_s, base + flat[3]);
  out->inside_tok_s = out->e.meas_tok_s >= out->tok_s.lo && out->e.meas_tok_s <= out->tok_s.hi;
  out->inside_tpot =
      out->e.meas_tpot_ms >= out->tpot_ms.lo && out->e.meas_tpot_ms <= out->tpot_ms.hi;
  return SC_OK;
}

// The fit's own residual spread: the root mean square over the runs of the relative errors of
// the means the objective fits (TTFT and TPOT, or E2E), and of the throughput.
static sc_status fit_spread(const calib_run *runs, int n_runs, double *rel, sc_error *err) {
  double s = 0;
  int k = 0;
  for (int i = 0; i < n_runs; i++) {
    calib_errors e;
    SC_TRY(calib_eval(&runs[i], &e, NULL, err));
    if (runs[i].e2e_only) {
      s += e.e2e_err * e.e2e_err;
      k++;
    } else {
      s += e.ttft_err * e.ttft_err + e.tpot_err * e.tpot_err;
      k += 2;
    }
    s += e.tok_s_err * e.tok_s_err;
    k++;
  }
  *rel = k ? sqrt(s / k) : 0;
  return SC_OK;
}

sc_status calib_spread_of(const calib_run *runs, int n_runs, calib_spread *out, sc_error *err) {
  out->cv_rel = 0;
  return fit_spread(runs, n_runs, &out->fit_rel, err);
}

sc_status calib_cross_validate(const calib_run *runs, int n_runs, calib_prediction *pred,
                               double *rms, sc_error *err) {
  *rms = 0;
  if (n_runs < 2) return SC_OK;
  double p0[NP];
  calib_get(&runs[0].s->hw.sim.engine, p0);
  calib_run *rest = malloc((size_t)(n_runs - 1) * sizeof *rest);
  if (!rest) return sc_fail(err, SC_OOM, "calibrate: out of memory");
  sc_status st = SC_OK;
  double s = 0;
  int k = 0;
  for (int i = 0; i < n_runs && st == SC_OK; i++) {
    int m = 0;
    for (int j = 0; j < n_runs; j++)
      if (j != i) rest[m++] = runs[j];
    calib_set(runs, n_runs, p0); // every held-out fit starts where the whole fit ended
    calib_fit_result fr;
    calib_ident id;
    calib_spread sp = {0, 0};
    st = calib_fit(rest, m, &fr, err);
    if (st == SC_OK) st = calib_identify(rest, m, &id, err);
    if (st == SC_OK) st = fit_spread(rest, m, &sp.fit_rel, err);
    if (st == SC_OK) {
      double q[NP];
      calib_get(&rest[0].s->hw.sim.engine, q);
      calib_set(&runs[i], 1, q);
      st = calib_predict(&runs[i], &id, sp, &pred[i], err);
    }
    if (st == SC_OK) {
      const calib_errors *e = &pred[i].e;
      double a = runs[i].e2e_only ? e->e2e_err : e->tpot_err;
      s += a * a + e->tok_s_err * e->tok_s_err;
      k += 2;
    }
  }
  calib_set(runs, n_runs, p0);
  free(rest);
  *rms = k ? sqrt(s / k) : 0;
  return st;
}
