// Reports from a results database: gnuplot plots (PNG + SVG, with the script and data file
// behind each), a self-contained index.html, the verdict table on a terminal, and JUnit XML.
//
// Everything is read back from SQLite (a connection from store_db, reports/store.h), so
// `shardcheck run` (at its end) and `shardcheck report` (any time later, over one or several
// runs) write the same thing. gnuplot runs as a child process; without it on PATH the data,
// scripts and HTML are still written and res->plots_skipped says so. Metrics are computed by the
// runner and read from the metric table.
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels/status.h"
#include "reports/store.h"

typedef struct report_options {
  const char *out_dir;     // created when absent (with parents)
  const int64_t *run_ids;  // runs to report; n_runs == 0: the newest run
  int n_runs;
  const char *gnuplot;     // the program; NULL: $SHARDCHECK_GNUPLOT, else "gnuplot" on PATH
} report_options;

typedef struct report_result {
  bool plots_skipped;      // gnuplot was not found (or failed): data and HTML only
  char why[256];           // when plots_skipped: one line saying why
  int n_plots;             // PNG files written
  char index_path[1100];   // out_dir/index.html
} report_result;

// Writes the plots, their scripts and data, and index.html into o->out_dir. SC_INVALID for a
// run that does not exist; SC_IO when out_dir cannot be written.
sc_status report_write(sqlite3 *db, const report_options *o, report_result *res, sc_error *err);

// --- capacity searches (reports/report_capacity.c; docs/capacity.md)

typedef struct rq_capacity rq_capacity; // reports/query.h

// The table `shardcheck capacity` prints: one line per layout searched (the recommendation
// marked *, the runner-up 2), then the recommendation or the refusal.
void report_capacity_print(const rq_capacity *c, FILE *f);
// Writes capacity.dat, capacity.gp, capacity.svg (when gnuplot runs; program as in
// report_options.gnuplot, NULL: $SHARDCHECK_GNUPLOT, else "gnuplot" on PATH) and index.html of
// capacity search id (0: the newest) into dir. The same stored search gives the same files.
// A missing gnuplot is no error (res->plots_skipped). SC_INVALID for no such search; SC_IO.
sc_status report_capacity_write(sqlite3 *db, int64_t id, const char *dir, const char *gnuplot,
                                report_result *res, sc_error *err);

// Prints the verdict table of a run (each deployment x SLO: expected, actual, pass/FAIL) and a
// per-deployment summary line; "no SLOs" when the run has none.
sc_status report_print_verdicts(sqlite3 *db, int64_t run_id, FILE *f, sc_error *err);

// JUnit XML: one testsuite per run, one testcase per deployment x SLO (classname = scenario.
// deployment label, name = SLO key); a failure carries expected vs actual. SC_IO on write errors.
sc_status report_junit_write(sqlite3 *db, int64_t run_id, const char *path, sc_error *err);

// --- predicted vs measured (reports/report_compare.c)
//
// Among the runs of a report, every pair of a sim run (mode "sim": the prediction) and a real
// run (mode "real": the measurement) of the same scenario name is compared deployment by
// deployment (by label), on the pooled deployment metric rows and per phase (by phase name).
// docs/reports.md lists the metrics; the error of each is (predicted - measured) / measured.

// One compared number.
typedef struct report_cmp_row {
  char label[64];          // the deployment's label, present in both runs
  char phase[64];          // the phase's name; "" for the deployment pooled over its phases
  char metric[32];         // metric name (docs/metrics.md), e.g. "ttft_mean_ms"
  double predicted;        // the sim run's value; NaN: no row or NULL
  double measured;         // the real run's value; NaN: no row or NULL
  double error;            // (predicted - measured) / measured, a fraction; NaN when measured
                           // is 0 or NaN, or predicted is NaN
} report_cmp_row;

// One sim run against one real run of the same scenario.
typedef struct report_cmp_pair {
  int64_t predicted_run;   // run id, mode sim
  int64_t measured_run;    // run id, mode real
  char scenario[128];      // the scenario name both carry
  int n_deployments;       // deployment labels present in both runs
  report_cmp_row *rows;    // (n_rows) the pooled rows (phase "") first, then the phase rows;
                           // each group by the predicted run's deployment order
  int n_rows;
} report_cmp_pair;

// The real runs of one scenario against each other: the floor a prediction is read against.
// Every ordered pair (A, B) of two different real runs is compared as a prediction is, A in
// the `predicted` column and B in the `measured` one, so a pair's mean |error| is how far one
// measurement misses another made the same way: a prediction cannot be expected to come closer
// to a real run than the real runs come to each other.
typedef struct report_cmp_floor {
  char scenario[128];      // the scenario name
  int64_t *runs;           // (n_runs) its real runs, in the order given, each once
  int n_runs;              // >= 2
  report_cmp_pair *pairs;  // (n_pairs = n_runs x (n_runs - 1)): (runs[0], runs[1]),
  int n_pairs;             // (runs[0], runs[2]), ..., (runs[1], runs[0]), ...
} report_cmp_floor;

typedef struct report_comparison {
  report_cmp_pair *pairs;  // (n_pairs) sim runs in the order given, each with the real runs
  int n_pairs;             // in the order given; 0 when no pair exists
  report_cmp_floor *floors; // (n_floors) one per scenario that has a pair above and two or
  int n_floors;             // more real runs in the report, in the order of its first pair
} report_comparison;

// Compares the runs run_ids[0..n_runs) of db as above into *out (zeroed first; the caller
// frees it with report_comparison_free). A report without a sim run and a real run of the same
// scenario gives n_pairs == 0, which is no error. SC_INVALID for a run that does not exist;
// SC_IO on a database error; SC_OOM. On error *out holds nothing to free.
sc_status report_compare(sqlite3 *db, const int64_t *run_ids, int n_runs,
                         report_comparison *out, sc_error *err);
// Frees what report_compare allocated; NULL or a zeroed comparison is a no-op.
void report_comparison_free(report_comparison *c);
// The mean of |error| over the pair's pooled rows (phase "") of metric `name` whose error is a
// number; *n (may be NULL) receives how many rows that is. NaN when there is none.
double report_cmp_mean_abs_error(const report_cmp_pair *p, const char *name, int *n);
// The smallest and largest mean |error| of metric `name` over the floor's pairs (each pair's
// report_cmp_mean_abs_error); returns how many pairs have one (0: *lo and *hi are NaN).
int report_cmp_floor_range(const report_cmp_floor *f, const char *name, double *lo, double *hi);
// Prints each pair's "predicted vs measured" tables (deployment x metric, then deployment x
// phase x metric: predicted, measured, error %) and its "mean |error|: ..." line to f; after
// a scenario's last pair, its floor: a line per ordered pair of real runs and the range of
// their mean |difference|. Prints nothing when c has no pair.
void report_print_comparison(const report_comparison *c, FILE *f);

// --- history of a scenario across runs (reports/report_history.c)
//
// Every run of one scenario (run.scenario), in start order: each gated metric (the scenario's
// gate.metrics as its newest complete run recorded them, else the gate's defaults: TTFT, TPOT,
// ITL and E2EL p50 and p95, output_tok_s, goodput_rps, error_rate, lost_requests,
// kv_peak_frac, detect_ms, recover_ms; each when some run has it) from the pooled deployment
// rows of the metric table, one series per deployment label, one point per complete run, or
// per repetition group (run.repeat_group, when the database has the column: the median of the
// group's runs with min-max bars, at its first run's start). docs/reports.md lists the files.

typedef struct report_history_options {
  const char *scenario;    // the scenario's name, as run.scenario holds it
  const char *out_dir;     // created when absent (with parents)
  const char *gnuplot;     // the program; NULL: $SHARDCHECK_GNUPLOT, else "gnuplot" on PATH
  const char *db_name;     // the database as the user named it, for messages; NULL: "the
                           // database"
} report_history_options;

typedef struct report_history_result {
  int n_runs;              // runs of the scenario
  int n_plotted;           // of them, the complete runs: the ones plotted
  int n_points;            // points per series (a repetition group counts once)
  int n_metrics;           // metrics with a value in some plotted run: a .dat and .gp each
  int n_plots;             // PNG files gnuplot wrote
  bool plots_skipped;      // gnuplot was not found (or failed): data, scripts and page only
  char why[256];           // when plots_skipped: one line saying why
  char page_path[1100];    // out_dir/history.html
} report_history_result;

// Writes history-METRIC.dat, .gp, .png and .svg per metric and history.html into o->out_dir.
// SC_INVALID "no runs of scenario X in DB" when the scenario has no run (nothing is written);
// SC_IO when out_dir cannot be written or the database cannot be read; SC_OOM. A missing or
// failing gnuplot is no error (res->plots_skipped says why). A scenario whose runs are all
// incomplete still gets its page (the runs table, no plot).
sc_status report_history_write(sqlite3 *db, const report_history_options *o,
                               report_history_result *res, sc_error *err);
