// Calibrating a profile's engine block (sim_engine: host time per step and per sequence,
// prefill and decode efficiencies) to measured runs (docs/calibration.md): the measured
// requests are replayed in the simulator with their arrival times and lengths, and a
// Nelder-Mead search over the log-parameters minimizes the per-request error of TTFT and TPOT.
//
// The replay drives one simulated engine (dp 1) directly in virtual time, as a simulated
// replica steps (serving/replica_sim.c): a step starts when the engine is idle and has work,
// requests arriving during it are seen by the next, its tokens are stamped with its end.
// Deterministic: the same inputs give the same fit on every machine.
//
// Not here: reading the runs (reports/query.c, rq_request_times), writing the fitted profile
// and the command line (cli/cmd_calibrate.c).
#pragma once

#include "reports/query.h"
#include "scenarios/scenario.h"

// One run's fit quality. Errors are (sim - measured) / measured of the run's means; the RMS
// figures are the per-request errors divided by the run's measured mean (what is minimized).
typedef struct calib_errors {
  int n;                               // requests compared
  double meas_ttft_ms, sim_ttft_ms;    // means
  double meas_tpot_ms, sim_tpot_ms;    // means over requests with 2+ output tokens
  double ttft_err, tpot_err;           // relative errors of the means
  double ttft_rms, tpot_rms;           // per-request RMS, relative to the measured mean
} calib_errors;

// Replays req[0..n) (arrivals taken relative to the first) on s's first deployment with the
// engine block s->hw.sim.engine, and compares with the measured times. SC_INVALID when a
// request cannot be run (it does not fit the model's context or the KV cache).
sc_status calib_eval(const scenario *s, const rq_req_time *req, int n, calib_errors *out,
                     sc_error *err);

typedef struct calib_run {
  const rq_req_time *req;
  int n;
} calib_run;

typedef struct calib_fit_result {
  sim_engine engine; // the fitted block (knobs as s had them)
  double objective;  // the minimized sum, at the fit
  int evaluations;   // replays run
} calib_fit_result;

// Fits s->hw.sim.engine's step_s, seq_s, prefill_eff, decode_eff to runs[0..n_runs), starting
// from s's block, and leaves the fit in s->hw.sim.engine and *out. The objective is the sum
// over the runs of ttft_rms^2 + tpot_rms^2.
sc_status calib_fit(scenario *s, const calib_run *runs, int n_runs, calib_fit_result *out,
                    sc_error *err);
