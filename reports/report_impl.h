// Private to reports/report*.c: a run's rows as the reports read them, and the helpers the plot
// (report_plot.c), HTML (report_html.c) and JUnit (report_junit.c) writers share.
//
// report.c loads runs and implements report_write and report_print_verdicts; this header is no
// part of the public API (reports/report.h) and nothing outside reports/report*.c includes it.
#pragma once

#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "reports/query.h"
#include "reports/report.h"

// --- a run's rows: rq_run and its parts (reports/query.h), loaded by rq_run_load

// The reports' working state: the database, a cached metric lookup and the runs reported.
typedef struct rp_ctx {
  sqlite3 *db;
  rq_metric_cache metric;   // the lookup rp_metric keeps between calls
  rq_run *runs;             // (n_runs)
  int n_runs;
} rp_ctx;

// Makes room for one more element in *arr (n used, *cap allocated, elements of elem bytes),
// doubling the capacity; false when out of memory (*arr unchanged).
bool rp_grow(void **arr, int n, int *cap, size_t elem);

// The stored value of metric `name` for (deployment, phase, class) of run r through c's cached
// lookup (rq_metric): dep_id / phase_id 0 stand for NULL (across deployments / the whole
// deployment), cls NULL for ''. NaN when there is no such row or the value is NULL.
double rp_metric(rp_ctx *c, const rq_run *r, int64_t dep_id, int64_t phase_id, const char *cls,
                 const char *name);

// --- formatting

// A number with precision that suits its size: integers as integers, then 4 significant digits
// at most ("612.3", "0.01234", "8123"); "-" for NaN. Writes at most n bytes into buf.
void rp_fmt_num(double v, char *buf, size_t n);
// rp_fmt_num plus the unit of metric `name` from mt_metric_find ("612.3 ms"); fractions and
// unknown names get no unit.
void rp_fmt_metric(const char *name, double v, char *buf, size_t n);
// Writes s to f escaped for HTML and XML text and attribute values (& < > " ' become entities),
// dropping control characters other than tab, newline and carriage return and replacing bytes
// that are not valid UTF-8 by '?'. NULL writes nothing.
void rp_put_esc(FILE *f, const char *s);
// Seconds with millisecond precision for a ns time ("12.345"); "-" for a negative (NULL) one.
void rp_fmt_s(int64_t ns, char *buf, size_t n);

// Creates dir and its missing parents (mkdir -p). SC_IO with the path and strerror on failure.
sc_status rp_mkdirs(const char *dir, sc_error *err);

// --- plots (report_plot.c)

typedef struct rp_plot {
  char name[64];            // file stem in the output directory: NAME.dat .gp .png .svg
  char title[160];
  bool written;             // NAME.dat and NAME.gp were written
  bool has_png;             // gnuplot wrote a non-empty NAME.png
  bool has_svg;             // and a non-empty NAME.svg
  char note[320];           // when !has_png: why (no data, gnuplot missing or failed)
} rp_plot;

// Writes each plot's data and script into dir and runs gnuplot on each script (program
// `gnuplot`: a path or a name searched on PATH; NULL: $SHARDCHECK_GNUPLOT, else "gnuplot").
// *plots (malloc'd, the caller frees) receives *n_plots entries, written or not, each with a
// note when it has no PNG. Sets res->plots_skipped, res->why and res->n_plots. A missing or
// failing gnuplot is no error; SC_IO when a file cannot be written, SC_OOM; on error *plots is
// NULL.
sc_status rp_plots_write(rp_ctx *c, const char *dir, const char *gnuplot, rp_plot **plots,
                         int *n_plots, report_result *res, sc_error *err);

// The pieces report_history.c shares:
// Opens dir/name.ext for writing (its path into path); NULL with SC_INVALID (path too long) or
// SC_IO in err.
FILE *rp_open_out(const char *dir, const char *name, const char *ext, char *path, size_t n,
                  sc_error *err);
// Closes f; SC_IO naming path when a write or the close failed.
sc_status rp_close_out(FILE *f, const char *path, sc_error *err);
// A string column of a .dat file: double-quoted, '"' as '\'', control characters as spaces.
void rp_dat_str(FILE *f, const char *s);
// A gnuplot double-quoted string literal.
void rp_gp_str(FILE *f, const char *s);
// The gnuplot to run, as an absolute path into prog: the name or path gnuplot, else
// $SHARDCHECK_GNUPLOT, else "gnuplot" looked up on $PATH. False when it is not an executable
// file, with why ("gnuplot not found on PATH", "gnuplot not found: 'X' is not an executable").
bool rp_gnuplot_find(const char *gnuplot, char *prog, size_t n, char *why, size_t why_n);
// Runs gnuplot (prog, an absolute path) on dir/stem.gp in dir, with a "== prog stem.gp" line
// and its output appended to the log fd, after removing stem.png and stem.svg; *png and *svg:
// whether each was written (non-empty). Returns its exit status (-1: could not start, killed,
// or died of a signal).
int rp_gnuplot_run(const char *prog, const char *dir, const char *stem, int log, int timeout_s,
                   bool *png, bool *svg);

// --- HTML (report_html.c)

// Writes dir/index.html from the runs in c and the plots (embedding each SVG). SC_IO when it
// cannot be written.
sc_status rp_html_write(rp_ctx *c, const char *dir, const rp_plot *plots, int n_plots,
                        const report_result *res, sc_error *err);

// --- predicted vs measured (report_compare.c)

// report_compare over the runs already loaded in c (the pairs among c->runs).
sc_status rp_compare(rp_ctx *c, report_comparison *out, sc_error *err);
// A relative error as a signed percentage with one decimal ("+12.5%", "-3.0%"); "-" for NaN.
void rp_fmt_error(double error, char *buf, size_t n);
// The pair's summary line, without a newline: "HEAD TTFT 12.5%, TPOT 3.0%, ... (over N
// deployments)" (report_compare.c says which metrics), HEAD e.g. "mean |error|:". Writes at most
// n bytes.
void rp_cmp_summary(const report_cmp_pair *p, const char *head, char *buf, size_t n);
// The floor's range line, without a newline: "mean |difference| over the N pairs: TTFT
// 4.1-12.3%, ... (min-max; over D deployments)", the metrics of rp_cmp_summary. Writes at most
// n bytes.
void rp_cmp_floor_summary(const report_cmp_floor *f, char *buf, size_t n);
// The metrics the summary lines list for p, in their order: names[k] the metric row name,
// short_names[k] its name in the line ("TTFT", ...). Both arrays hold RP_CMP_SUMMARY_MAX;
// returns how many.
enum { RP_CMP_SUMMARY_MAX = 16 };
int rp_cmp_summary_metrics(const report_cmp_pair *p, const char **names,
                           const char **short_names);
// The floor to show after pair i of c: its scenario's, when pair i is the last pair of that
// scenario; NULL otherwise (not the last, or the scenario has no floor).
const report_cmp_floor *rp_cmp_floor_after(const report_comparison *c, int i);
// A pair's mean |error| of metric name as "12.5%" ("-" when it has none), and a floor's range
// of it as "4.1-12.3%" ("-"). Write at most n bytes.
void rp_fmt_mean_abs(const report_cmp_pair *p, const char *name, char *buf, size_t n);
void rp_fmt_floor_range(const report_cmp_floor *f, const char *name, char *buf, size_t n);
