// Calibrating a profile's engine block (sim_engine: host time per step and per sequence,
// prefill and decode efficiencies) to measured runs (docs/calibration.md): the measured
// requests are replayed in the simulator with their arrival times and lengths, each run on its
// own layout and knobs, and a Nelder-Mead search over the log-parameters, held within physical
// bounds, minimizes the per-request error of TTFT and TPOT (or of E2E, for a run whose first
// tokens were not measured). Then what the runs pin and what they leave free
// (calibrate_ident.c): the directions of parameter space the objective is flat along, the
// parameters at a bound, leave-one-run-out cross-validation, and an interval on every
// prediction.
//
// The replay drives one simulated engine (dp 1) directly in virtual time, as a simulated
// replica steps (serving/replica_sim.c): a step starts when the engine is idle and has work,
// requests arriving during it are seen by the next, its tokens are stamped with its end.
// Deterministic: the same inputs give the same fit on every machine.
//
// Not here: reading the runs (reports/query.c, rq_request_times), writing the fitted profile
// and the command line (cli/cmd_calibrate.c).
#pragma once

#include <stdbool.h>

#include "reports/query.h"
#include "scenarios/scenario.h"

// One run's fit quality. Errors are (sim - measured) / measured of the run's means; the RMS
// figures are the per-request errors divided by the run's measured mean (what is minimized).
typedef struct calib_errors {
  int n;                               // requests compared
  double meas_ttft_ms, sim_ttft_ms;    // means
  double meas_tpot_ms, sim_tpot_ms;    // means over requests with 2+ output tokens
  double meas_e2e_ms, sim_e2e_ms;      // means of arrival to last token
  double meas_tok_s, sim_tok_s;        // output tokens / (last finish - first arrival)
  double ttft_err, tpot_err;           // relative errors of the means
  double e2e_err, tok_s_err;           // ... of E2E and of the throughput
  double ttft_rms, tpot_rms, e2e_rms;  // per-request RMS, relative to the measured mean
} calib_errors;

// One measured run as it is replayed: its requests, and the scenario of its layout and knobs
// (one deployment: the run's tp and pp on the profile; the fit writes its engine block).
typedef struct calib_run {
  int64_t id;
  const rq_req_time *req; // (n) by arrival
  int n;
  scenario *s;            // caller owns
  bool e2e_only;          // the first-token times were not measured: fit E2E alone
} calib_run;

// Replays run r on its scenario with the engine block r->s->hw.sim.engine and compares with
// the measured times. SC_INVALID when a request cannot be run (it does not fit the model's
// context or the KV cache). res (optional, 3 x n doubles): each request's TTFT, TPOT and E2E
// error relative to the run's measured mean (0 where it has none).
sc_status calib_eval(const calib_run *r, calib_errors *out, double *res, sc_error *err);

// The fitted parameters, in the order the fit and its reports use.
enum { CALIB_NP = 5 }; // step_s, seq_s, prefill_eff, decode_eff, tp_step_s
extern const char *const calib_param_names[CALIB_NP];

// The physical bounds of each parameter on profile hw (docs/calibration.md): host times in
// [0, 50 ms] per step, [0, 1 ms] per sequence and [0, 10 ms] per step and extra rank;
// efficiencies from 0.05 up to what the
// datasheet allows: decode_eff at most 1 / mem_eff (the memory's peak), prefill_eff at most
// 1 / the largest gemm_eff (the tensor cores' peak), each at least 1.
void calib_bounds(const sim_hw *hw, double lo[CALIB_NP], double hi[CALIB_NP]);

typedef struct calib_fit_result {
  sim_engine engine; // the fitted block (knobs as the first run's scenario had them)
  double objective;  // the minimized sum, at the fit
  int evaluations;   // replays run
} calib_fit_result;

// Fits the engine block's step_s, seq_s, prefill_eff, decode_eff to runs[0..n_runs), starting
// from the first run's block, within calib_bounds, and leaves the fit in every run's
// s->hw.sim.engine and *out. The objective is the sum over the runs of ttft_rms^2 + tpot_rms^2
// (e2e_rms^2 for an e2e_only run). On error the runs' blocks are as they were.
sc_status calib_fit(const calib_run *runs, int n_runs, calib_fit_result *out, sc_error *err);

// Sets the four parameters of every run's engine block (the others as they are).
void calib_set(const calib_run *runs, int n_runs, const double p[CALIB_NP]);
void calib_get(const sim_engine *e, double p[CALIB_NP]);

// --- what the runs pin (calibrate_ident.c)

// A direction of parameter space the runs do not constrain: moving the parameters 20% along it
// (log units, unit length) changes the objective by less than a 0.3% shift of every request's
// error would.
typedef struct calib_flat {
  double v[CALIB_NP];  // the direction, log units of each parameter
  double curvature;    // the objective's second derivative along it
  bool one_sided;      // a host time at 0 the runs cannot see: v is its axis, and a prediction
                       // tries it at the order of what engines spend (calibrate_ident.c)
  char hint[200];      // what kind of run would pin it
} calib_flat;

typedef struct calib_ident {
  bool at_bound[CALIB_NP]; // the fitted value sits on its bound
  bool at_hi[CALIB_NP];    // ... the upper one
  calib_flat flat[CALIB_NP];
  int n_flat;
  bool identified;         // no flat direction and nothing at an upper bound
  int evaluations;
} calib_ident;

// Looks at the fit now in the runs' blocks: the parameters on a bound, and the directions the
// objective is flat along (the eigenvectors of its Gauss-Newton curvature in log-parameters).
sc_status calib_identify(const calib_run *runs, int n_runs, calib_ident *out, sc_error *err);

// A predicted number with its interval: [lo, hi] around value.
typedef struct calib_pred {
  double value, lo, hi;
} calib_pred;

typedef struct calib_prediction {
  calib_errors e;                  // the prediction at the fit and the measured values
  calib_pred ttft_ms, tpot_ms, e2e_ms, tok_s;
  bool inside_tok_s, inside_tpot;  // the measured value lies in the interval
} calib_prediction;

// The relative half-width of the intervals (docs/calibration.md): twice the root of the sum of
// squares of the fit's residuals on its own runs (fit_rel), the cross-validation errors
// (cv_rel, 0 without) and a floor of 2%, plus the largest change of the prediction when the
// parameters move along a flat direction (found per prediction).
typedef struct calib_spread {
  double fit_rel, cv_rel;
} calib_spread;

// The fit's spread on its own runs: fit_rel as above, cv_rel 0 (the caller sets it from
// calib_cross_validate).
sc_status calib_spread_of(const calib_run *runs, int n_runs, calib_spread *out, sc_error *err);

// Predicts run r with the fitted blocks (r's scenario carries them) and puts the interval
// around each number: the spread, and the runs' flat directions moved ±log(1.5) (within the
// bounds). The block is left as it was.
sc_status calib_predict(const calib_run *r, const calib_ident *id, calib_spread sp,
                        calib_prediction *out, sc_error *err);

// Leave-one-run-out: for each run, the fit of the others and its prediction of the run (the
// runs' blocks are restored after). pred (n_runs) gets each prediction (intervals from the
// held-out fit's own spread); *rms the root mean square of the relative errors of the runs'
// mean TPOT and throughput, over every held-out run.
sc_status calib_cross_validate(const calib_run *runs, int n_runs, calib_prediction *pred,
                               double *rms, sc_error *err);
