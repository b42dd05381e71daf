// The history of one scenario across the runs of a results database (`shardcheck report
// --history SCENARIO`): for each gated metric, its value per run over time, one series per
// deployment, with the baseline runs marked; the trend a capacity review reads.
//
// Rows: every run whose run.scenario is the scenario, in start order (run.started_at, then
// id); only complete runs are plotted. Values: the pooled deployment rows of the metric table
// (phase_id NULL, class ''). Runs of one repetition group (run.repeat_group, when the column
// exists) make one point: the median of the group's values, with min-max error bars, at the
// group's first run time. For each metric with a value, history-METRIC.dat (the points),
// history-METRIC.gp (a standalone gnuplot script writing history-METRIC.png and .svg), gnuplot
// run on it (its output in history-gnuplot.log), and one page, history.html, with the runs,
// the plots and a table per metric. The files follow reports/report_plot.c's conventions
// (columns under a header comment, series as blocks two blank lines apart); the per-run
// reports are reports/report.c, report_plot.c and report_html.c. Nothing here computes a
// metric: every value is a stored one (docs/metrics.md), read through reports/query.h. Which metrics are gated is the gate's
// (reports/gate.h). Escaping, finding and running gnuplot are report_plot.c's (rp_* in
// report_impl.h).
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "reports/gate.h"
#include "kernels/util.h"
#include "reports/metrics.h"
#include "reports/report_impl.h"

enum { HS_GP_TIMEOUT_S = 120 }; // one script; a gnuplot that hangs longer is killed

enum { HS_MAX_METRICS = GATE_MAX_METRICS };

// --- the rows

typedef struct hs_run {
  int64_t id;
  char started_at[32];      // UTC, ISO 8601
  int64_t t;                // started_at in s since the epoch; -1: unreadable (not plotted)
  char git_rev[48];         // "" when NULL
  char mode[8];
  char status[16];
  char verdict[8];          // "" when NULL
  bool baseline;
  char group[64];           // run.repeat_group as text; "": none (or no such column)
  int point;                // index into hs_data.points; -1: not plotted
} hs_run;

typedef struct hs_point {
  int first;                // index into hs_data.runs of the group's first run
  int n_runs;               // runs in the point (1 without a repetition group)
  bool baseline;            // one of them is a baseline run
} hs_point;

typedef struct hs_series {
  char label[64];           // deployment label
  char mode[8];             // the runs' mode
  char title[96];           // label, with " (mode)" when the runs mix modes
} hs_series;

typedef struct hs_data {
  hs_run *runs;             // (n_runs) in start order
  int n_runs, cap_runs;
  hs_point *points;         // (n_points) in start order of their first run
  int n_points;
  hs_series *series;        // (n_series) in order of deployment index, then first run
  int n_series, cap_series;
  // The gated metrics, in the order the page shows them: the scenario's `gate.metrics` as its
  // newest complete run recorded them, else the gate's defaults (reports/gate.h).
  char metric[HS_MAX_METRICS][64]; // as long as a gate metric name (gate_metric_tol.name)
  int n_metrics;
  int64_t metrics_run;      // the run whose gate.metrics were used; 0: the defaults
  double *v;                // (n_metrics, n_series, n_runs) stored values; NaN: none
  bool any[HS_MAX_METRICS]; // some plotted run has a value of the metric
  bool mixed_modes;
  int n_plotted;            // runs with a point
} hs_data;

static double *hs_val(hs_data *h, int m, int s, int r) {
  return &h->v[((size_t)m * (size_t)h->n_series + (size_t)s) * (size_t)h->n_runs + (size_t)r];
}

static void hs_free(hs_data *h) {
  free(h->runs);
  free(h->points);
  free(h->series);
  free(h->v);
  memset(h, 0, sizeof *h);
}

// "2026-05-01T12:34:56Z" as seconds since the epoch; -1 when it is not that form.
static int64_t utc_seconds(const char *iso) {
  struct tm tm = {0};
  char z = 0;
  if (sscanf(iso, "%4d-%2d-%2dT%2d:%2d:%2d%c", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
             &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &z) != 7 || z != 'Z')
    return -1;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  time_t t = timegm(&tm);
  return t == (time_t)-1 ? -1 : (int64_t)t;
}

static bool row_run(void *ud, const rq_history_run *q) {
  hs_data *h = ud;
  if (!rp_grow((void **)&h->runs, h->n_runs, &h->cap_runs, sizeof *h->runs)) return false;
  hs_run *r = &h->runs[h->n_runs++];
  memset(r, 0, sizeof *r);
  r->id = q->id;
  snprintf(r->started_at, sizeof r->started_at, "%s", q->started_at);
  r->t = utc_seconds(r->started_at);
  snprintf(r->git_rev, sizeof r->git_rev, "%s", q->git_rev);
  snprintf(r->mode, sizeof r->mode, "%s", q->mode);
  snprintf(r->status, sizeof r->status, "%s", q->status);
  snprintf(r->verdict, sizeof r->verdict, "%s", q->verdict);
  r->baseline = q->baseline;
  snprintf(r->group, sizeof r->group, "%s", q->group);
  r->point = -1;
  return true;
}

static int series_find(const hs_data *h, const char *label, const char *mode) {
  for (int i = 0; i < h->n_series; i++)
    if (!strcmp(h->series[i].label, label) && !strcmp(h->series[i].mode, mode)) return i;
  return -1;
}

static bool row_series(void *ud, const char *label, const char *mode) {
  hs_data *h = ud;
  if (series_find(h, label, mode) >= 0) return true;
  if (!rp_grow((void **)&h->series, h->n_series, &h->cap_series, sizeof *h->series))
    return false;
  hs_series *s = &h->series[h->n_series++];
  memset(s, 0, sizeof *s);
  snprintf(s->label, sizeof s->label, "%s", label);
  snprintf(s->mode, sizeof s->mode, "%s", mode);
  return true;
}

static int run_index(const hs_data *h, int64_t id) {
  for (int i = 0; i < h->n_runs; i++)
    if (h->runs[i].id == id) return i;
  return -1;
}

static bool row_metric(void *ud, const rq_history_metric *q) {
  hs_data *h = ud;
  int m = 0;
  while (m < h->n_metrics && strcmp(h->metric[m], q->name)) m++;
  int r = run_index(h, q->run_id);
  int s = series_find(h, q->label, q->mode);
  if (m == h->n_metrics || r < 0 || s < 0) return true;
  double v = q->value;
  if (isfinite(v)) *hs_val(h, m, s, r) = v;
  return true;
}

// Groups the plotted runs into points: a run without a group is a point of its own; the runs
// of one group join the point of its first run.
static sc_status hs_points(hs_data *h, sc_error *err) {
  h->points = calloc((size_t)h->n_runs + 1, sizeof *h->points);
  if (!h->points) return sc_fail(err, SC_OOM, "out of memory for %d runs", h->n_runs);
  for (int i = 0; i < h->n_runs; i++) {
    hs_run *r = &h->runs[i];
    if (strcmp(r->status, "complete") || r->t < 0) continue;
    int p = -1;
    if (r->group[0])
      for (int j = 0; j < i && p < 0; j++)
        if (h->runs[j].point >= 0 && !strcmp(h->runs[j].group, r->group)) p = h->runs[j].point;
    if (p < 0) {
      p = h->n_points++;
      h->points[p].first = i;
    }
    r->point = p;
    h->points[p].n_runs++;
    h->points[p].baseline |= r->baseline;
    h->n_plotted++;
  }
  return SC_OK;
}

// The metrics to plot: the `gate.metrics` of the newest plotted run when its scenario has
// them, else the gate's default list.
static void hs_pick_metrics(sqlite3 *db, hs_data *h) {
  int newest = -1;
  for (int i = 0; i < h->n_runs; i++)
    if (h->runs[i].point >= 0) newest = i;
  gate_options o = gate_options_defaults();
  if (newest >= 0 && gate_options_from_run(db, h->runs[newest].id, 0, &o) && o.n_metrics > 0) {
    for (int i = 0; i < o.n_metrics && i < HS_MAX_METRICS; i++)
      if (mt_metric_find(o.metrics[i].name)) // known names only: they become file names
        snprintf(h->metric[h->n_metrics++], sizeof h->metric[0], "%s", o.metrics[i].name);
    if (h->n_metrics) {
      h->metrics_run = h->runs[newest].id;
      return;
    }
  }
  for (const char *const *g = mt_metric_gated(); *g && h->n_metrics < HS_MAX_METRICS; g++)
    snprintf(h->metric[h->n_metrics++], sizeof h->metric[0], "%s", *g);
}

// Reads the runs of scenario into *h (zeroed first). SC_INVALID when there is none.
static sc_status hs_load(sqlite3 *db, const char *scn, const char *db_name, hs_data *h,
                         sc_error *err) {
  memset(h, 0, sizeof *h);
  bool grouped = gate_db_grouped(db);
  sc_status s = rq_history_runs(db, scn, grouped, row_run, h, err);
  if (s == SC_OK && h->n_runs == 0)
    s = sc_fail(err, SC_INVALID, "no runs of scenario %s in %s", scn,
                db_name ? db_name : "the database");
  if (s == SC_OK) s = hs_points(h, err);
  if (s == SC_OK) hs_pick_metrics(db, h);
  if (s == SC_OK)
    s = rq_history_deployments(db, scn, row_series, h, err);
  if (s == SC_OK) {
    size_t n = (size_t)h->n_metrics * (size_t)h->n_series * (size_t)h->n_runs;
    h->v = malloc((n ? n : 1) * sizeof *h->v);
    if (!h->v) s = sc_fail(err, SC_OOM, "out of memory for %zu metric values", n);
    for (size_t i = 0; h->v && i < n; i++) h->v[i] = NAN;
  }
  if (s == SC_OK)
    s = rq_history_metrics(db, scn, row_metric, h, err);
  if (s != SC_OK) {
    hs_free(h);
    return s;
  }
  const char *mode0 = NULL;
  for (int i = 0; i < h->n_runs; i++) {
    if (h->runs[i].point < 0) continue;
    if (mode0 && strcmp(mode0, h->runs[i].mode)) h->mixed_modes = true;
    mode0 = h->runs[i].mode;
  }
  for (int si = 0; si < h->n_series; si++) {
    hs_series *sr = &h->series[si];
    if (h->mixed_modes) snprintf(sr->title, sizeof sr->title, "%s (%s)", sr->label, sr->mode);
    else snprintf(sr->title, sizeof sr->title, "%s", sr->label);
  }
  for (int m = 0; m < h->n_metrics; m++)
    for (int si = 0; si < h->n_series && !h->any[m]; si++)
      for (int r = 0; r < h->n_runs && !h->any[m]; r++)
        h->any[m] = h->runs[r].point >= 0 && isfinite(*hs_val(h, m, si, r));
  return SC_OK;
}

// --- one point of one series

typedef struct hs_cell {
  double med, lo, hi;       // median, min, max of the point's runs with a value
  int n;                    // those runs; 0: no value (med NaN)
} hs_cell;

// vals: scratch of n_runs doubles.
static hs_cell hs_cell_of(hs_data *h, int m, int s, int p, double *vals) {
  hs_cell c = {NAN, NAN, NAN, 0};
  for (int r = h->points[p].first; r < h->n_runs; r++) {
    double v = *hs_val(h, m, s, r);
    if (h->runs[r].point == p && isfinite(v)) vals[c.n++] = v;
  }
  if (!c.n) return c;
  c.med = sc_median(vals, c.n, NAN); // sorts vals
  c.lo = vals[0];
  c.hi = vals[c.n - 1];
  return c;
}

// --- files

// A point's x tic: "REV MM-DD HH:MM" (the revision "-" when unknown).
static void tic_text(const hs_run *r, char *buf, size_t n) {
  const char *iso = r->started_at; // "YYYY-MM-DDTHH:MM:SSZ"
  snprintf(buf, n, "%s %.5s %.5s", r->git_rev[0] ? r->git_rev : "-", iso + 5, iso + 11);
}

// The newest baseline point of series s with a value of metric m; -1 when none.
static int newest_baseline(hs_data *h, int m, int s, double *vals) {
  int found = -1;
  for (int p = 0; p < h->n_points; p++)
    if (h->points[p].baseline && hs_cell_of(h, m, s, p, vals).n) found = p;
  return found;
}

// history-METRIC.dat: one block per series with a value, one row per point with a value.
static sc_status hs_write_dat(hs_data *h, int m, const char *dir, const char *scn, double *vals,
                              sc_error *err) {
  char stem[80], path[PATH_MAX];
  snprintf(stem, sizeof stem, "history-%s", h->metric[m]);
  FILE *f = rp_open_out(dir, stem, "dat", path, sizeof path, err);
  if (!f) return SC_IO;
  const mt_metric_info *mi = mt_metric_find(h->metric[m]);
  fprintf(f,
          "# t_s value min max n run_id baseline started_at git_rev tic\n"
          "# %s.dat: %s (%s) of each complete run of scenario %s,\n"
          "# from the pooled deployment metric rows (phase_id NULL, class ''). One block per\n"
          "# deployment (separated by two blank lines), one row per run in start order.\n"
          "# t_s: the run's start, s since 1970-01-01 UTC. A repetition group is one row at\n"
          "# its first run: value = the median of its runs, min and max over them, n = runs\n"
          "# with a value, run_id = its first run. baseline: 1 when a run of the row is a\n"
          "# baseline. tic: the x-axis label (git revision, start date and time, UTC).\n",
          stem, h->metric[m], mi ? mi->unit : "", scn);
  int block = 0;
  for (int s = 0; s < h->n_series; s++) {
    bool header = false;
    for (int p = 0; p < h->n_points; p++) {
      hs_cell c = hs_cell_of(h, m, s, p, vals);
      if (!c.n) continue;
      if (!header) {
        fprintf(f, "%s# block %d: %s\n", block ? "\n\n" : "", block, h->series[s].title);
        header = true;
        block++;
      }
      const hs_run *r = &h->runs[h->points[p].first];
      char tic[96];
      tic_text(r, tic, sizeof tic);
      fprintf(f, "%lld %.10g %.10g %.10g %d %lld %d", (long long)r->t, c.med, c.lo, c.hi, c.n,
              (long long)r->id, h->points[p].baseline ? 1 : 0);
      rp_dat_str(f, r->started_at);
      rp_dat_str(f, r->git_rev[0] ? r->git_rev : "-");
      rp_dat_str(f, tic);
      fputc('\n', f);
    }
  }
  return rp_close_out(f, path, err);
}

// history-METRIC.gp: a standalone script drawing history-METRIC.png and .svg from the .dat.
static sc_status hs_write_gp(hs_data *h, int m, const char *dir, const char *scn,
                             double *vals, sc_error *err) {
  char path[PATH_MAX], stem[80];
  snprintf(stem, sizeof stem, "history-%s", h->metric[m]);
  FILE *f = rp_open_out(dir, stem, "gp", path, sizeof path, err);
  if (!f) return SC_IO;
  const mt_metric_info *mi = mt_metric_find(h->metric[m]);
  int64_t t0 = INT64_MAX, t1 = INT64_MIN;
  for (int p = 0; p < h->n_points; p++) {
    int64_t t = h->runs[h->points[p].first].t;
    if (t < t0) t0 = t;
    if (t > t1) t1 = t;
  }
  double pad = (double)(t1 - t0) * 0.05 + 1; // s: the end points clear of the frame
  size_t tic_max = 0;                          // longest x tic, characters
  for (int p = 0; p < h->n_points; p++) {
    char tic[96];
    tic_text(&h->runs[h->points[p].first], tic, sizeof tic);
    if (strlen(tic) > tic_max) tic_max = strlen(tic);
  }
  fprintf(f,
          "# %s.gp: %s of scenario %s over its runs\n"
          "# Written by `shardcheck report --history`. Run `gnuplot %s.gp` in this\n"
          "# directory: it reads %s.dat and writes %s.png and\n"
          "# %s.svg. Edit freely to restyle.\n"
          "set datafile missing \"NaN\"\n"
          "do for [fmt in \"png svg\"] {\n"
          "  if (fmt eq \"png\") {\n"
          "    if (strstrt(GPVAL_TERMINALS, \"pngcairo\") > 0) {\n"
          "      set terminal pngcairo size 1000,560 noenhanced font \"sans,10\"\n"
          "    } else {\n"
          "      set terminal png size 1000,560 noenhanced\n"
          "    }\n"
          "  } else {\n"
          "    set terminal svg size 1000,560 noenhanced font \"sans,10\" "
          "background rgb \"white\"\n"
          "  }\n"
          "  set output \"%s.\".fmt\n"
          "  set grid\n"
          "  set title ",
          stem, h->metric[m], scn, stem, stem, stem, stem, stem);
  char title[256];
  snprintf(title, sizeof title, "%s: %s per run (repetition groups: median, bars min to max)",
           scn, mi ? mi->what : h->metric[m]);
  rp_gp_str(f, title);
  fprintf(f,
          "\n  set xlabel \"run start (UTC), labelled with the git revision\"\n"
          "  set ylabel \"%s%s%s%s\"\n"
          "  set xrange [%.10g:%.10g]\n"
          "  set yrange [0:*]\n"
          "  set offsets 0, 0, graph 0.08, 0\n"
          "  set xtics rotate by 90 right font \",8\"\n"
          "  set key outside right top\n"
          "  set bmargin %d\n"
          "  plot \\\n",
          h->metric[m], mi ? " (" : "", mi ? mi->unit : "", mi ? ")" : "", (double)t0 - pad,
          (double)t1 + pad, 4 + (int)((double)tic_max * 0.5));
  // Series blocks are numbered as hs_write_dat wrote them: series with a value only.
  int block = 0, n_elems = 0;
  bool baseline_titled = false;
  for (int s = 0; s < h->n_series; s++) {
    bool has = false, has_base = false;
    for (int p = 0; p < h->n_points; p++)
      if (hs_cell_of(h, m, s, p, vals).n) {
        has = true;
        has_base |= h->points[p].baseline;
      }
    if (!has) continue;
    fprintf(f, "%s    \"%s.dat\" index %d using 1:2:3:4:xticlabels(10) with yerrorlines "
               "lw 2 pt 7 ps 0.8 lc %d title ",
            n_elems++ ? ", \\\n" : "", stem, block, s + 1);
    rp_gp_str(f, h->series[s].title);
    if (has_base) {
      fprintf(f, ", \\\n    \"\" index %d using 1:($7 > 0 ? $2 : NaN) with points pt 6 ps 2.4 "
                 "lw 2 lc rgb \"black\" ",
              block);
      if (!baseline_titled) fputs("title \"baseline run\"", f);
      else fputs("notitle", f);
      baseline_titled = true;
      int bp = newest_baseline(h, m, s, vals);
      if (bp >= 0) {
        fprintf(f, ", \\\n    %.10g with lines dt 3 lw 1.5 lc %d title ",
                hs_cell_of(h, m, s, bp, vals).med, s + 1);
        char t[160];
        snprintf(t, sizeof t, "%s: newest baseline", h->series[s].title);
        rp_gp_str(f, t);
      }
    }
    block++;
  }
  fputs("\n  set output\n}\n", f);
  return rp_close_out(f, path, err);
}

// --- running gnuplot

// Runs gnuplot on every written script; has_png[m] tells which plots exist afterwards.
static void hs_run_gnuplot(const hs_data *h, const char *dir, const char *gnuplot,
                           bool *has_png, report_history_result *res) {
  char prog[PATH_MAX];
  if (!rp_gnuplot_find(gnuplot, prog, sizeof prog, res->why, sizeof res->why)) {
    res->plots_skipped = true;
    return;
  }
  char log_path[PATH_MAX];
  snprintf(log_path, sizeof log_path, "%s/history-gnuplot.log", dir);
  int log = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (log < 0) {
    res->plots_skipped = true;
    snprintf(res->why, sizeof res->why, "cannot write %.160s: %s", log_path, strerror(errno));
    return;
  }
  for (int m = 0; m < h->n_metrics; m++) {
    if (!h->any[m]) continue;
    char stem[80], script[96];
    snprintf(stem, sizeof stem, "history-%s", h->metric[m]);
    snprintf(script, sizeof script, "%s.gp", stem);
    bool has_svg = false;
    int rc = rp_gnuplot_run(prog, dir, stem, log, HS_GP_TIMEOUT_S, &has_png[m], &has_svg);
    if (has_png[m]) res->n_plots++;
    if ((rc != 0 || !has_png[m] || !has_svg) && !res->plots_skipped) {
      res->plots_skipped = true;
      snprintf(res->why, sizeof res->why, "gnuplot failed on %.60s (exit %d; see %.140s)",
               script, rc, log_path);
    }
  }
  close(log);
}

// --- history.html

static const char css[] =
    "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;"
    "max-width:1300px;padding:0 1em;color:#222}\n"
    "h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2em}\n"
    "table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:.9em}\n"
    "th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right;white-space:nowrap}\n"
    "th{background:#f2f2f2}td.t,th.t{text-align:left}tr.base td{background:#e8f5e9}\n"
    ".note{background:#fff8e1;border-left:4px solid #f9a825;padding:.5em 1em}\n"
    "figure{margin:1em 0 2em}figure img{max-width:100%;border:1px solid #ddd}\n"
    "figcaption{font-size:.85em;color:#555}\n";

static void put_th(FILE *f, const char *text, bool left) {
  fputs(left ? "<th class=\"t\">" : "<th>", f);
  rp_put_esc(f, text);
  fputs("</th>", f);
}

static void put_td(FILE *f, const char *text, bool left) {
  fputs(left ? "<td class=\"t\">" : "<td>", f);
  rp_put_esc(f, text);
  fputs("</td>", f);
}

// The runs of a point: "7" or "7, 8, 9 (3 runs)".
static void point_runs(const hs_data *h, int p, char *buf, size_t n) {
  size_t len = 0;
  buf[0] = 0;
  for (int r = h->points[p].first; r < h->n_runs && len < n; r++)
    if (h->runs[r].point == p)
      len += (size_t)snprintf(buf + len, n - len, "%s%lld", len ? ", " : "",
                              (long long)h->runs[r].id);
  if (h->points[p].n_runs > 1 && len < n)
    snprintf(buf + len, n - len, " (%d runs)", h->points[p].n_runs);
}

static void runs_table(FILE *f, const hs_data *h) {
  fputs("<table>\n<tr>", f);
  const char *head[] = {"run", "started (UTC)", "git revision", "mode", "status", "verdict",
                        "repetition group", "baseline", "plotted"};
  for (int i = 0; i < (int)(sizeof head / sizeof head[0]); i++) put_th(f, head[i], true);
  fputs("</tr>\n", f);
  for (int i = 0; i < h->n_runs; i++) {
    const hs_run *r = &h->runs[i];
    char id[32];
    snprintf(id, sizeof id, "%lld", (long long)r->id);
    fputs(r->baseline ? "<tr class=\"base\">" : "<tr>", f);
    put_td(f, id, true);
    put_td(f, r->started_at, true);
    put_td(f, r->git_rev[0] ? r->git_rev : "-", true);
    put_td(f, r->mode, true);
    put_td(f, r->status, true);
    put_td(f, r->verdict[0] ? r->verdict : "-", true);
    put_td(f, r->group[0] ? r->group : "-", true);
    put_td(f, r->baseline ? "yes" : "", true);
    put_td(f, r->point >= 0 ? "yes" : r->t < 0 ? "no: start time unreadable" : "no: not complete",
           true);
    fputs("</tr>\n", f);
  }
  fputs("</table>\n", f);
}

// The values of metric m: one row per point, one column per series.
static void metric_table(FILE *f, hs_data *h, int m, double *vals) {
  fputs("<table>\n<tr>", f);
  put_th(f, "started (UTC)", true);
  put_th(f, "git revision", true);
  put_th(f, "runs", true);
  for (int s = 0; s < h->n_series; s++) put_th(f, h->series[s].title, false);
  fputs("</tr>\n", f);
  for (int p = 0; p < h->n_points; p++) {
    const hs_run *r = &h->runs[h->points[p].first];
    char runs[256];
    point_runs(h, p, runs, sizeof runs);
    fputs(h->points[p].baseline ? "<tr class=\"base\">" : "<tr>", f);
    put_td(f, r->started_at, true);
    put_td(f, r->git_rev[0] ? r->git_rev : "-", true);
    if (h->points[p].baseline) strncat(runs, ", baseline", sizeof runs - strlen(runs) - 1);
    put_td(f, runs, true);
    for (int s = 0; s < h->n_series; s++) {
      hs_cell c = hs_cell_of(h, m, s, p, vals);
      char cell[160], a[48], b[48];
      rp_fmt_metric(h->metric[m], c.med, cell, sizeof cell);
      if (c.n > 1) {
        rp_fmt_num(c.lo, a, sizeof a);
        rp_fmt_num(c.hi, b, sizeof b);
        size_t len = strlen(cell);
        snprintf(cell + len, sizeof cell - len, " [%s-%s]", a, b);
      }
      put_td(f, cell, false);
    }
    fputs("</tr>\n", f);
  }
  fputs("</table>\n", f);
}

static sc_status hs_write_html(hs_data *h, const char *dir, const char *scn,
                               const char *db_name, const bool *has_png,
                               const report_history_result *res, double *vals, sc_error *err) {
  char path[PATH_MAX];
  FILE *f = rp_open_out(dir, "history", "html", path, sizeof path, err);
  if (!f) return SC_IO;
  fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>", f);
  fputs("shardcheck history: ", f);
  rp_put_esc(f, scn);
  fprintf(f, "</title>\n<style>\n%s</style>\n</head>\n<body>\n<h1>shardcheck history: ", css);
  rp_put_esc(f, scn);
  fprintf(f, "</h1>\n<p>%d run%s of the scenario in ", h->n_runs, h->n_runs == 1 ? "" : "s");
  rp_put_esc(f, db_name ? db_name : "the database");
  fprintf(f,
          "; %d complete run%s plotted as %d point%s (the runs of a repetition group make "
          "one point: their median, with bars from min to max, at the group's first run). "
          "Values are each deployment's pooled metrics over the whole run. Baseline runs are "
          "circled in the plots and shaded in the tables.</p>\n",
          h->n_plotted, h->n_plotted == 1 ? "" : "s", h->n_points, h->n_points == 1 ? "" : "s");
  if (h->metrics_run)
    fprintf(f, "<p>Metrics: the scenario's <code>gate.metrics</code>, as run %lld recorded "
               "them.</p>\n", (long long)h->metrics_run);
  else
    fputs("<p>Metrics: the gate's default metrics (docs/gate.md).</p>\n", f);
  if (!h->n_points)
    fputs("<p class=\"note\">No complete run: nothing to plot.</p>\n", f);
  if (res->plots_skipped) {
    fputs("<p class=\"note\">Plots skipped: ", f);
    rp_put_esc(f, res->why);
    fputs(". The data files, scripts and tables are complete.</p>\n", f);
  }
  fputs("<section id=\"runs\">\n<h2>Runs</h2>\n", f);
  runs_table(f, h);
  fputs("</section>\n<section id=\"metrics\">\n<h2>Metrics</h2>\n", f);
  int missing = 0;
  for (int m = 0; m < h->n_metrics; m++) {
    if (!h->any[m]) {
      missing++;
      continue;
    }
    const mt_metric_info *mi = mt_metric_find(h->metric[m]);
    char stem[80];
    snprintf(stem, sizeof stem, "history-%s", h->metric[m]);
    fprintf(f, "<figure id=\"%s\">\n<h3>%s", stem, h->metric[m]);
    if (mi) {
      fputs(" (", f);
      rp_put_esc(f, mi->unit);
      fputs("): ", f);
      rp_put_esc(f, mi->what);
    }
    fputs("</h3>\n", f);
    if (has_png[m])
      fprintf(f, "<a href=\"%s.svg\"><img alt=\"%s\" src=\"%s.png\"></a>\n", stem, stem, stem);
    else
      fputs("<p class=\"note\">No plot: see the note above.</p>\n", f);
    metric_table(f, h, m, vals);
    fprintf(f,
            "<figcaption>data: <a href=\"%s.dat\">%s.dat</a>; gnuplot script: <a "
            "href=\"%s.gp\">%s.gp</a> (run <code>gnuplot %s.gp</code> in this directory to draw "
            "it)</figcaption>\n</figure>\n",
            stem, stem, stem, stem, stem);
  }
  if (missing) {
    fputs("<p>No value in any plotted run:", f);
    for (int m = 0, k = 0; m < h->n_metrics; m++)
      if (!h->any[m]) fprintf(f, "%s %s", k++ ? "," : "", h->metric[m]);
    fputs(".</p>\n", f);
  }
  fputs("</section>\n</body>\n</html>\n", f);
  return rp_close_out(f, path, err);
}

// --- report_history_write

sc_status report_history_write(sqlite3 *db, const report_history_options *o,
                               report_history_result *res, sc_error *err) {
  memset(res, 0, sizeof *res);
  if (!db || !o || !o->scenario || !*o->scenario || !o->out_dir || !*o->out_dir)
    return sc_fail(err, SC_INVALID, "report_history_write: no database, scenario or directory");
  if (snprintf(res->page_path, sizeof res->page_path, "%s/history.html", o->out_dir) >=
      (int)sizeof res->page_path)
    return sc_fail(err, SC_INVALID, "output directory path too long: %.64s...", o->out_dir);
  hs_data h;
  SC_TRY(hs_load(db, o->scenario, o->db_name, &h, err));
  res->n_runs = h.n_runs;
  res->n_plotted = h.n_plotted;
  res->n_points = h.n_points;
  double *vals = malloc(((size_t)h.n_runs + 1) * sizeof *vals);
  sc_status s = vals ? rp_mkdirs(o->out_dir, err)
                     : sc_fail(err, SC_OOM, "out of memory for %d runs", h.n_runs);
  bool has_png[HS_MAX_METRICS] = {false};
  for (int m = 0; m < h.n_metrics && s == SC_OK; m++) {
    if (!h.any[m]) continue;
    s = hs_write_dat(&h, m, o->out_dir, o->scenario, vals, err);
    if (s == SC_OK) s = hs_write_gp(&h, m, o->out_dir, o->scenario, vals, err);
    if (s == SC_OK) res->n_metrics++;
  }
  if (s == SC_OK && res->n_metrics) hs_run_gnuplot(&h, o->out_dir, o->gnuplot, has_png, res);
  if (s == SC_OK)
    s = hs_write_html(&h, o->out_dir, o->scenario, o->db_name, has_png, res, vals, err);
  free(vals);
  hs_free(&h);
  return s;
}
