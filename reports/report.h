// Reports from a results database: gnuplot plots (PNG + SVG, with the script and data file
// behind each), a self-contained index.html, the verdict table on a terminal, and JUnit XML.
//
// Everything is read back from SQLite (a connection from store_db, reports/store.h), so `shardcheck run` (at its end) and
// `shardcheck report` (any time later, over one or several runs) write the same thing. gnuplot
// runs as a child process; without it on PATH the data, scripts and HTML are still written and
// res->plots_skipped says so. Metrics are computed by the runner and read from the metric table.
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

// Prints the verdict table of a run (each deployment x SLO: expected, actual, pass/FAIL) and a
// per-deployment summary line; "no SLOs" when the run has none.
sc_status report_print_verdicts(sqlite3 *db, int64_t run_id, FILE *f, sc_error *err);

// JUnit XML: one testsuite per run, one testcase per deployment x SLO (classname = scenario.
// deployment label, name = SLO key); a failure carries expected vs actual. SC_IO on write errors.
sc_status report_junit_write(sqlite3 *db, int64_t run_id, const char *path, sc_error *err);
