// The plots of a report: for each, NAME.dat (whitespace-separated columns under a header
// comment line naming them; series as blocks separated by two blank lines, gnuplot's `index`),
// NAME.gp (a standalone gnuplot script that reads NAME.dat by relative path and writes NAME.png
// and NAME.svg when run in the output directory), then gnuplot run on each script as a child
// process in that directory with its output in gnuplot.log.
//
//   scaling          peak output tokens/s vs GPUs per scaling family, ideal-linear line,
//                    efficiency labels
//   ttft             TTFT p50 (dashed) / p95 (solid) vs concurrency per deployment, SLO line
//   tpot_throughput  TPOT p50/p95 and output tokens/s vs concurrency (two panels)
//   timeline         output tokens/s, TTFT p95 and queue length per time bin, phase and fault
//                    markers (one per run: timeline-runN when several runs are reported)
//   kv               KV-cache use per deployment x replica over time (kv-runN likewise)
//
// Values come from the metric rows (reports/report.c reads them) and, for the two time plots,
// the token, request and step rows. The page that shows the plots is reports/report_html.c.
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernels/util.h"
#include "reports/metrics.h"
#include "reports/report_impl.h"

enum {
  GP_TIMEOUT_S = 120,   // one script; a gnuplot that hangs longer is killed and counted failed
  GP_PROBE_TIMEOUT_S = 20,
  TL_MIN_BINS = 30,     // time plots: bins of 1 s, narrower when that gives fewer than this,
  TL_MAX_BINS = 600,    // wider when it gives more than this
};

#define NS_PER_MS 1e6   // stored times are ns; TTFTs are plotted in ms
#define NS_PER_S 1e9    // and times on the x axis in s

typedef struct gp_term {
  bool found;           // prog names an executable file
  char prog[PATH_MAX];  // absolute path of gnuplot
  bool pngcairo;        // its pngcairo terminal exists (else the libgd png terminal)
} gp_term;

// --- files

FILE *rp_open_out(const char *dir, const char *name, const char *ext, char *path, size_t n,
                      sc_error *err) {
  if (snprintf(path, n, "%s/%s.%s", dir, name, ext) >= (int)n) {
    sc_fail(err, SC_INVALID, "output path too long: %s/%s.%s", dir, name, ext);
    return NULL;
  }
  FILE *f = fopen(path, "w");
  if (!f) sc_fail(err, SC_IO, "cannot write %s: %s", path, strerror(errno));
  return f;
}

sc_status rp_close_out(FILE *f, const char *path, sc_error *err) {
  bool bad = ferror(f) != 0;
  if (fclose(f) != 0) bad = true;
  return bad ? sc_fail(err, SC_IO, "writing %s failed", path) : SC_OK;
}

// A number in a .dat file: "NaN" (the scripts' missing value) for NaN or infinity.
static void dat_num(FILE *f, double v) {
  if (isfinite(v)) fprintf(f, " %.10g", v);
  else fputs(" NaN", f);
}

// A string column in a .dat file: double-quoted, with '"' turned into '\'' and control
// characters into spaces.
void rp_dat_str(FILE *f, const char *s) {
  fputs(" \"", f);
  for (; *s; s++) fputc(*s == '"' ? '\'' : (unsigned char)*s < 0x20 ? ' ' : *s, f);
  fputc('"', f);
}

// A gnuplot double-quoted string literal.
void rp_gp_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', f);
    fputc((unsigned char)*s < 0x20 ? ' ' : *s, f);
  }
  fputc('"', f);
}

static void run_prefix(const rp_ctx *c, const rq_run *r, char *buf, size_t n) {
  if (c->n_runs > 1) snprintf(buf, n, "run %lld: ", (long long)r->id);
  else buf[0] = 0;
}

// The script's head: comments, then the loop that draws the body once per output format.
// gp_end closes the loop.
static void gp_begin(FILE *f, const rp_plot *p, const gp_term *t, int w, int h) {
  fprintf(f,
          "# %s.gp: %s\n"
          "# Written by `shardcheck report`. Run `gnuplot %s.gp` in this directory: it reads\n"
          "# %s.dat and writes %s.png and %s.svg. Edit freely to restyle.\n"
          "set datafile missing \"NaN\"\n"
          "do for [fmt in \"png svg\"] {\n"
          "  if (fmt eq \"png\") {\n",
          p->name, p->title, p->name, p->name, p->name, p->name);
  if (t->pngcairo)
    fprintf(f, "    set terminal pngcairo size %d,%d noenhanced font \"sans,10\"\n", w, h);
  else
    fprintf(f, "    set terminal png size %d,%d noenhanced\n", w, h);
  fprintf(f,
          "  } else {\n"
          "    set terminal svg size %d,%d noenhanced font \"sans,10\" background rgb \"white\"\n"
          "  }\n"
          "  set output \"%s.\".fmt\n"
          "  set grid\n",
          w, h, p->name);
}

static void gp_end(FILE *f) {
  fputs("  set output\n}\n", f);
}

// A panel without a single finite value: gnuplot refuses to autoscale "all points undefined",
// so the panel says "no data" over the fixed x range instead.
static void gp_empty_panel(FILE *f, double x0, double x1) {
  fprintf(f,
          "  set label 9999 \"no data\" at graph 0.5, graph 0.5 center\n"
          "  plot [%.10g:%.10g] [0:1] -1 notitle\n"
          "  unset label 9999\n",
          x0, x1);
}

// --- plot 1: scaling

enum { FAM_DP, FAM_TP, FAM_PP, FAM_MIXED, FAM_N };
static const char *const fam_name[FAM_N] = {"dp", "tp", "pp", "mixed"};

typedef struct sc_point {
  int dep;
  double tput, eff, speedup;
} sc_point;

// Which factor grows from base to d: dp, tp, pp, or mixed (more than one).
static int family_of(const rq_deployment *base, const rq_deployment *d) {
  int changed = (d->tp != base->tp) + (d->pp != base->pp) + (d->dp != base->dp);
  if (changed > 1) return FAM_MIXED;
  if (d->tp != base->tp) return FAM_TP;
  if (d->pp != base->pp) return FAM_PP;
  return FAM_DP; // dp grew, or a copy of the base layout
}

static void sc_row(FILE *f, const rq_run *r, const sc_point *pt, const sc_point *base) {
  const rq_deployment *d = &r->deps[pt->dep];
  const rq_deployment *b = &r->deps[base->dep];
  fprintf(f, "%d", d->gpus);
  dat_num(f, pt->tput);
  dat_num(f, b->gpus > 0 ? base->tput * d->gpus / b->gpus : NAN);
  dat_num(f, pt->eff * 100);
  dat_num(f, pt->speedup);
  rp_dat_str(f, d->label);
  fputc('\n', f);
}

typedef struct sc_block {
  char title[160];
  int run;
  bool first_of_run;
} sc_block;

static sc_status plot_scaling(rp_ctx *c, const char *dir, const gp_term *t, rp_plot *p,
                              sc_error *err) {
  snprintf(p->name, sizeof p->name, "scaling");
  snprintf(p->title, sizeof p->title,
           "Peak output tokens/s vs GPUs, with ideal linear scaling and efficiency");
  int total = 0;
  for (int i = 0; i < c->n_runs; i++) total += c->runs[i].n_deps;
  sc_point *pts = calloc((size_t)total + 1, sizeof *pts);
  sc_block *blocks = calloc((size_t)c->n_runs * FAM_N + 1, sizeof *blocks);
  if (!pts || !blocks) {
    free(pts);
    free(blocks);
    return sc_fail(err, SC_OOM, "out of memory for the scaling plot");
  }
  char path[PATH_MAX];
  FILE *f = NULL;
  int n_blocks = 0, max_gpus = 1;
  sc_status s = SC_OK;
  for (int ri = 0; ri < c->n_runs && s == SC_OK; ri++) {
    const rq_run *r = &c->runs[ri];
    int n = 0, base = -1;
    for (int d = 0; d < r->n_deps; d++) {
      double tput = rp_metric(c, r, r->deps[d].id, 0, NULL, "peak_output_tok_s");
      if (!isfinite(tput)) continue;
      pts[n] = (sc_point){d, tput, rp_metric(c, r, r->deps[d].id, 0, NULL, "efficiency"),
                          rp_metric(c, r, r->deps[d].id, 0, NULL, "speedup")};
      if (base < 0 || r->deps[d].gpus < r->deps[pts[base].dep].gpus) base = n;
      n++;
    }
    if (base < 0) continue;
    const rq_deployment *bd = &r->deps[pts[base].dep];
    // Points the runner stored no scaling rows for get them from the peak throughputs.
    for (int i = 0; i < n; i++) {
      const rq_deployment *d = &r->deps[pts[i].dep];
      double ideal = pts[base].tput * d->gpus / (bd->gpus > 0 ? bd->gpus : 1);
      if (!isfinite(pts[i].speedup) && pts[base].tput > 0)
        pts[i].speedup = pts[i].tput / pts[base].tput;
      if (!isfinite(pts[i].eff) && ideal > 0) pts[i].eff = pts[i].tput / ideal;
      if (d->gpus > max_gpus) max_gpus = d->gpus;
    }
    // Members sorted by GPUs (insertion sort: a handful of deployments).
    for (int i = 1; i < n; i++)
      for (int j = i; j > 0 && r->deps[pts[j - 1].dep].gpus > r->deps[pts[j].dep].gpus; j--) {
        sc_point tmp = pts[j];
        pts[j] = pts[j - 1];
        pts[j - 1] = tmp;
        if (base == j) base = j - 1;
        else if (base == j - 1) base = j;
      }
    if (!f) {
      f = rp_open_out(dir, p->name, "dat", path, sizeof path, err);
      if (!f) {
        s = SC_IO;
        break;
      }
      fprintf(f,
              "# gpus peak_output_tok_s ideal_tok_s efficiency_pct speedup label\n"
              "# scaling.dat: one block per scaling family (the factor that grows from the\n"
              "# fewest-GPU deployment, which starts every family); ideal_tok_s = the fewest-GPU\n"
              "# deployment's peak x gpus / its gpus. Blocks are separated by two blank lines.\n");
    }
    char pre[48];
    run_prefix(c, r, pre, sizeof pre);
    bool any_member = false;
    for (int fam = 0; fam < FAM_N; fam++) {
      bool has = false;
      for (int i = 0; i < n; i++)
        has |= i != base && family_of(bd, &r->deps[pts[i].dep]) == fam;
      // A run whose only deployment is the base still gets one block (a single point).
      if (!has && !(fam == FAM_MIXED && !any_member)) continue;
      any_member |= has;
      sc_block *b = &blocks[n_blocks];
      b->run = ri;
      b->first_of_run = n_blocks == 0 || blocks[n_blocks - 1].run != ri;
      int len = snprintf(b->title, sizeof b->title, "%s%s%s", pre, has ? fam_name[fam] : "",
                         has ? ": " : "");
      fprintf(f, "%s# block %d: %s%s\n", n_blocks ? "\n\n" : "", n_blocks, pre,
              has ? fam_name[fam] : "single deployment");
      sc_row(f, r, &pts[base], &pts[base]);
      len += snprintf(b->title + len, sizeof b->title - (size_t)len, "%s", bd->label);
      for (int i = 0; i < n; i++) {
        if (i == base || family_of(bd, &r->deps[pts[i].dep]) != fam) continue;
        sc_row(f, r, &pts[i], &pts[base]);
        if (len < (int)sizeof b->title)
          len += snprintf(b->title + len, sizeof b->title - (size_t)len, ", %s",
                          r->deps[pts[i].dep].label);
      }
      n_blocks++;
    }
  }
  free(pts);
  if (s == SC_OK && !f) {
    snprintf(p->note, sizeof p->note,
             "no scaling plot: no deployment has a peak_output_tok_s metric");
    free(blocks);
    return SC_OK;
  }
  if (s == SC_OK) s = rp_close_out(f, path, err);
  else if (f) fclose(f);
  if (s == SC_OK && !(f = rp_open_out(dir, p->name, "gp", path, sizeof path, err))) s = SC_IO;
  if (s != SC_OK) {
    free(blocks);
    return s;
  }
  gp_begin(f, p, t, 900, 560);
  fprintf(f,
          "  set title \"Peak output tokens/s vs GPUs (labels: scaling efficiency)\"\n"
          "  set xlabel \"GPUs\"\n"
          "  set ylabel \"peak output tokens/s\"\n"
          "  set key top left\n"
          "  set xrange [0:%g]\n"
          "  set yrange [0:*]\n"
          "  set offsets 0, 0, graph 0.08, 0\n",
          max_gpus * 1.15 + 0.5);
  if (max_gpus <= 16) fprintf(f, "  set xtics 1\n");
  fprintf(f, "  plot \\\n");
  for (int b = 0; b < n_blocks; b++) {
    char pre[48];
    run_prefix(c, &c->runs[blocks[b].run], pre, sizeof pre);
    fprintf(f, "    \"scaling.dat\" index %d using 1:2 with linespoints lw 2 pt 7 lc %d title ",
            b, b + 1);
    rp_gp_str(f, blocks[b].title);
    fprintf(f,
            ", \\\n    \"\" index %d using 1:2:(sprintf(\"%%.0f%%%%\", $4)) with labels "
            "offset char 0,1 tc lt %d notitle, \\\n",
            b, b + 1);
    fprintf(f, "    \"\" index %d using 1:3 with lines dt 2 lc rgb \"gray40\" ", b);
    if (blocks[b].first_of_run) {
      char title[96];
      snprintf(title, sizeof title, "%sideal linear", pre);
      fputs("title ", f);
      rp_gp_str(f, title);
    } else {
      fputs("notitle", f);
    }
    fputs(b + 1 < n_blocks ? ", \\\n" : "\n", f);
  }
  gp_end(f);
  free(blocks);
  SC_TRY(rp_close_out(f, path, err));
  p->written = true;
  return SC_OK;
}

// --- plots 2 and 3: latency and throughput vs concurrency

enum { CV_TTFT50, CV_TTFT95, CV_TPOT50, CV_TPOT95, CV_TOKS, CV_N };
static const char *const cv_metric[CV_N] = {"ttft_p50_ms", "ttft_p95_ms", "tpot_p50_ms",
                                            "tpot_p95_ms", "output_tok_s"};

typedef struct cv_row {
  int series;
  int phase;                // index into the run's phases
  int concurrency;
  double v[CV_N];
} cv_row;

typedef struct cv_series {
  int run, dep;
  char title[128];          // "[run N: ]LABEL"
} cv_series;

typedef struct cv_data {
  cv_row *rows;             // (n_rows) by series, then concurrency
  int n_rows;
  cv_series *series;        // (n_series)
  int n_series;
  int cmin, cmax;           // concurrency range
  bool log2;                // every concurrency a power of two, and more than one value
  bool any[CV_N];           // some row has a finite value of that metric
} cv_data;

static int cv_cmp(const void *a, const void *b) {
  const cv_row *x = a, *y = b;
  if (x->series != y->series) return x->series - y->series;
  if (x->concurrency != y->concurrency) return x->concurrency - y->concurrency;
  return x->phase - y->phase;
}

// The phase-level metrics of every phase with a concurrency, as series per run x deployment.
static sc_status cv_gather(rp_ctx *c, cv_data *cv, sc_error *err) {
  memset(cv, 0, sizeof *cv);
  int total = 0, total_deps = 0;
  for (int i = 0; i < c->n_runs; i++) {
    total += c->runs[i].n_phases;
    total_deps += c->runs[i].n_deps;
  }
  cv->rows = calloc((size_t)total + 1, sizeof *cv->rows);
  cv->series = calloc((size_t)total_deps + 1, sizeof *cv->series);
  if (!cv->rows || !cv->series) return sc_fail(err, SC_OOM, "out of memory for phase metrics");
  cv->log2 = true;
  for (int ri = 0; ri < c->n_runs; ri++) {
    const rq_run *r = &c->runs[ri];
    for (int d = 0; d < r->n_deps; d++) {
      int first = cv->n_rows;
      for (int pi = 0; pi < r->n_phases; pi++) {
        const rq_phase *ph = &r->phases[pi];
        if (ph->dep != d || ph->concurrency <= 0) continue;
        cv_row *row = &cv->rows[cv->n_rows++];
        row->series = cv->n_series;
        row->phase = pi;
        row->concurrency = ph->concurrency;
        for (int k = 0; k < CV_N; k++) {
          row->v[k] = rp_metric(c, r, r->deps[d].id, ph->id, NULL, cv_metric[k]);
          cv->any[k] |= isfinite(row->v[k]);
        }
        if (cv->n_rows == 1 || ph->concurrency < cv->cmin) cv->cmin = ph->concurrency;
        if (ph->concurrency > cv->cmax) cv->cmax = ph->concurrency;
        if (ph->concurrency & (ph->concurrency - 1)) cv->log2 = false;
      }
      if (cv->n_rows == first) continue;
      cv_series *sr = &cv->series[cv->n_series++];
      sr->run = ri;
      sr->dep = d;
      char pre[48];
      run_prefix(c, r, pre, sizeof pre);
      snprintf(sr->title, sizeof sr->title, "%s%s", pre, r->deps[d].label);
    }
  }
  if (cv->cmax <= cv->cmin) cv->log2 = false;
  qsort(cv->rows, (size_t)cv->n_rows, sizeof *cv->rows, cv_cmp);
  return SC_OK;
}

static void cv_free(cv_data *cv) {
  free(cv->rows);
  free(cv->series);
}

// Writes NAME.dat: a header line naming the columns, then one block per series.
static sc_status cv_write_dat(rp_ctx *c, const cv_data *cv, const char *dir, const char *name,
                              const int *cols, int n_cols, const char *what, sc_error *err) {
  char path[PATH_MAX];
  FILE *f = rp_open_out(dir, name, "dat", path, sizeof path, err);
  if (!f) return SC_IO;
  fputs("# concurrency", f);
  for (int k = 0; k < n_cols; k++) fprintf(f, " %s", cv_metric[cols[k]]);
  fprintf(f, " phase\n# %s.dat: %s per phase with a concurrency, from the phase-level metric\n"
             "# rows; one block per deployment (separated by two blank lines).\n",
          name, what);
  for (int sidx = 0, i = 0; sidx < cv->n_series; sidx++) {
    fprintf(f, "%s# block %d: %s\n", sidx ? "\n\n" : "", sidx, cv->series[sidx].title);
    for (; i < cv->n_rows && cv->rows[i].series == sidx; i++) {
      const cv_row *row = &cv->rows[i];
      fprintf(f, "%d", row->concurrency);
      for (int k = 0; k < n_cols; k++) dat_num(f, row->v[cols[k]]);
      rp_dat_str(f, c->runs[cv->series[sidx].run].phases[row->phase].name);
      fputc('\n', f);
    }
  }
  return rp_close_out(f, path, err);
}

static void cv_axes(FILE *f, const cv_data *cv, double *x0, double *x1) {
  if (cv->log2) {
    *x0 = cv->cmin / 1.4;
    *x1 = cv->cmax * 1.4;
    fprintf(f, "  set logscale x 2\n");
  } else {
    double pad = cv->cmax > cv->cmin ? (cv->cmax - cv->cmin) * 0.05 : 1;
    *x0 = cv->cmin - pad;
    *x1 = cv->cmax + pad;
  }
  fprintf(f, "  set xrange [%.10g:%.10g]\n  set key outside right top\n", *x0, *x1);
}

// Plot lines "NAME.dat" index S using 1:COL for every series.
static void cv_plot_series(FILE *f, const cv_data *cv, const char *name, int col, int dt,
                           const char *suffix, bool last) {
  for (int sidx = 0; sidx < cv->n_series; sidx++) {
    char title[160];
    snprintf(title, sizeof title, "%s%s", cv->series[sidx].title, suffix);
    fprintf(f, "    \"%s.dat\" index %d using 1:%d with linespoints lw 2 pt 7 ps 0.6 lc %d dt %d "
               "title ",
            name, sidx, col, sidx + 1, dt);
    rp_gp_str(f, title);
    fputs(last && sidx + 1 == cv->n_series ? "\n" : ", \\\n", f);
  }
}

static sc_status plot_ttft(rp_ctx *c, const cv_data *cv, const char *dir, const gp_term *t,
                           rp_plot *p, sc_error *err) {
  snprintf(p->name, sizeof p->name, "ttft");
  snprintf(p->title, sizeof p->title, "TTFT p50 and p95 vs concurrency per deployment");
  if (!cv->n_series) {
    snprintf(p->note, sizeof p->note,
             "no TTFT plot: no phase has a concurrency (only rate phases)");
    return SC_OK;
  }
  if (!cv->any[CV_TTFT50] && !cv->any[CV_TTFT95]) {
    snprintf(p->note, sizeof p->note, "no TTFT plot: no phase has a TTFT value");
    return SC_OK;
  }
  const int cols[] = {CV_TTFT50, CV_TTFT95};
  SC_TRY(cv_write_dat(c, cv, dir, p->name, cols, 2, "TTFT p50 and p95 (ms)", err));
  // The SLO lines: each distinct ttft_p95_ms limit of the runs' verdicts.
  double slo[8];
  int n_slo = 0;
  for (int ri = 0; ri < c->n_runs; ri++)
    for (int i = 0; i < c->runs[ri].n_verdicts; i++) {
      const rq_verdict *v = &c->runs[ri].verdicts[i];
      if (strcmp(v->slo, "ttft_p95_ms") || !isfinite(v->expected)) continue;
      bool seen = false;
      for (int k = 0; k < n_slo; k++) seen |= slo[k] == v->expected;
      if (!seen && n_slo < 8) slo[n_slo++] = v->expected;
    }
  char path[PATH_MAX];
  FILE *f = rp_open_out(dir, p->name, "gp", path, sizeof path, err);
  if (!f) return SC_IO;
  gp_begin(f, p, t, 1000, 560);
  double x0, x1;
  cv_axes(f, cv, &x0, &x1);
  fprintf(f, "  set title \"Time to first token vs concurrency (solid p95, dashed p50)\"\n"
             "  set xlabel \"concurrency (users)\"\n"
             "  set ylabel \"TTFT (ms)\"\n"
             "  set yrange [0:*]\n"
             "  plot \\\n");
  cv_plot_series(f, cv, p->name, 3, 1, " p95", false);
  cv_plot_series(f, cv, p->name, 2, 2, " p50", n_slo == 0);
  for (int k = 0; k < n_slo; k++) {
    char num[32], title[96];
    rp_fmt_num(slo[k], num, sizeof num);
    snprintf(title, sizeof title, "SLO: TTFT p95 <= %s ms", num);
    fprintf(f, "    %.10g with lines dt 3 lw 2 lc rgb \"red\" title ", slo[k]);
    rp_gp_str(f, title);
    fputs(k + 1 < n_slo ? ", \\\n" : "\n", f);
  }
  gp_end(f);
  SC_TRY(rp_close_out(f, path, err));
  p->written = true;
  return SC_OK;
}

static sc_status plot_tpot(rp_ctx *c, const cv_data *cv, const char *dir, const gp_term *t,
                           rp_plot *p, sc_error *err) {
  snprintf(p->name, sizeof p->name, "tpot_throughput");
  snprintf(p->title, sizeof p->title,
           "TPOT p50/p95 and output tokens/s vs concurrency per deployment");
  if (!cv->n_series) {
    snprintf(p->note, sizeof p->note,
             "no TPOT/throughput plot: no phase has a concurrency (only rate phases)");
    return SC_OK;
  }
  if (!cv->any[CV_TPOT50] && !cv->any[CV_TPOT95] && !cv->any[CV_TOKS]) {
    snprintf(p->note, sizeof p->note, "no TPOT/throughput plot: no phase has a value");
    return SC_OK;
  }
  const int cols[] = {CV_TPOT50, CV_TPOT95, CV_TOKS};
  SC_TRY(cv_write_dat(c, cv, dir, p->name, cols, 3, "TPOT p50, p95 (ms) and output tokens/s",
                      err));
  char path[PATH_MAX];
  FILE *f = rp_open_out(dir, p->name, "gp", path, sizeof path, err);
  if (!f) return SC_IO;
  gp_begin(f, p, t, 1000, 800);
  double x0, x1;
  cv_axes(f, cv, &x0, &x1);
  fprintf(f, "  set multiplot layout 2,1 title \"TPOT and output throughput vs concurrency\"\n"
             "  set lmargin at screen 0.09\n"
             "  set rmargin at screen 0.78\n"
             "  set yrange [0:*]\n"
             "  set ylabel \"TPOT (ms; solid p95, dashed p50)\"\n");
  if (cv->any[CV_TPOT50] || cv->any[CV_TPOT95]) {
    fputs("  plot \\\n", f);
    cv_plot_series(f, cv, p->name, 3, 1, " p95", false);
    cv_plot_series(f, cv, p->name, 2, 2, " p50", true);
  } else {
    gp_empty_panel(f, x0, x1);
  }
  fprintf(f, "  set xlabel \"concurrency (users)\"\n"
             "  set ylabel \"output tokens/s\"\n");
  if (cv->any[CV_TOKS]) {
    fputs("  plot \\\n", f);
    cv_plot_series(f, cv, p->name, 4, 1, "", true);
  } else {
    gp_empty_panel(f, x0, x1);
  }
  fputs("  unset multiplot\n", f);
  gp_end(f);
  SC_TRY(rp_close_out(f, path, err));
  p->written = true;
  return SC_OK;
}

// --- time bins (plots 4 and 5)

// The run's span: the latest time any of its rows mentions (and its duration when finished).
static sc_status run_span_ns(rp_ctx *c, const rq_run *r, int64_t *span, sc_error *err) {
  SC_TRY(rq_run_span(c->db, r->id, span, err));
  if (r->duration_ns > *span) *span = r->duration_ns;
  return SC_OK;
}

// The bin width for a span: 1 s, or the next of 2, 5, 10, 20 ... s while that gives more than
// TL_MAX_BINS bins, or the next of 0.5, 0.2 ... 0.01 s while it gives fewer than TL_MIN_BINS.
static int64_t bin_width_ns(int64_t span) {
  int64_t w[30]; // the 1-2-5 sequence from 10 ms to 5e7 s
  int n = 0;
  for (int64_t dec = 10 * 1000 * 1000; n < 30; dec *= 10) { // dec ends at 1e17: no overflow
    w[n++] = dec;
    w[n++] = 2 * dec;
    w[n++] = 5 * dec;
  }
  int i = 6; // 1 s
  while (i + 1 < n && span / w[i] > TL_MAX_BINS) i++;
  while (i > 0 && span / w[i] < TL_MIN_BINS) i--;
  return w[i];
}

// One deployment x replica of the KV plot: its highest use in each bin.
typedef struct kv_series {
  int64_t dep_id;
  int dep;                  // index into the run's deps
  int replica;
  double *max_pct;          // (nb) NaN: no step in the bin
} kv_series;

typedef struct kv_state {
  const rq_run *r;
  int64_t w_ns;             // bin width
  int64_t nb;               // bins; a step at or past the run's span counts in the last
  kv_series *series;        // (n_series) in the order first seen
  int n_series, cap;
  int last;                 // the series of the step before (a replica's steps come in runs)
} kv_state;

static bool kv_step(void *ud, const rq_step *st) {
  kv_state *k = ud;
  kv_series *x = k->n_series ? &k->series[k->last] : NULL;
  if (!x || x->dep_id != st->deployment_id || x->replica != st->replica) {
    x = NULL;
    for (int i = 0; i < k->n_series && !x; i++)
      if (k->series[i].dep_id == st->deployment_id && k->series[i].replica == st->replica) {
        x = &k->series[i];
        k->last = i;
      }
  }
  if (!x) {
    int dep = rq_dep_index(k->r, st->deployment_id);
    if (dep < 0) return true;
    if (!rp_grow((void **)&k->series, k->n_series, &k->cap, sizeof *k->series)) return false;
    x = &k->series[k->n_series];
    *x = (kv_series){.dep_id = st->deployment_id, .dep = dep, .replica = st->replica,
                     .max_pct = malloc((size_t)k->nb * sizeof *x->max_pct)};
    if (!x->max_pct) return false;
    for (int64_t i = 0; i < k->nb; i++) x->max_pct[i] = NAN;
    k->last = k->n_series++;
  }
  int64_t t = st->t_ns;
  int64_t kb = (t < 0 ? 0 : t) / k->w_ns;
  int64_t bin = kb >= k->nb ? k->nb - 1 : kb;
  double pct = 100.0 * (double)st->kv_used / (double)st->kv_total;
  if (!(x->max_pct[bin] >= pct)) x->max_pct[bin] = pct; // NaN: the first in the bin
  return true;
}

static int kv_series_cmp(const void *a, const void *b) {
  const kv_series *x = a, *y = b;
  if (x->dep_id != y->dep_id) return x->dep_id < y->dep_id ? -1 : 1;
  return (x->replica > y->replica) - (x->replica < y->replica);
}

// The series by deployment id and replica, one block each: a line per bin with a step.
static void kv_write(FILE *f, kv_state *k) {
  if (k->n_series) qsort(k->series, (size_t)k->n_series, sizeof *k->series, kv_series_cmp);
  for (int i = 0; i < k->n_series; i++) {
    const kv_series *x = &k->series[i];
    fprintf(f, "%s# block %d: %s replica %d\n", i ? "\n\n" : "", i, k->r->deps[x->dep].label,
            x->replica);
    for (int64_t b = 0; b < k->nb; b++) {
      if (isnan(x->max_pct[b])) continue;
      fprintf(f, "%.10g", ((double)b + 0.5) * ((double)k->w_ns / NS_PER_S));
      dat_num(f, x->max_pct[b]);
      fputc('\n', f);
    }
  }
}

static void kv_free(kv_state *k) {
  for (int i = 0; i < k->n_series; i++) free(k->series[i].max_pct);
  free(k->series);
}

typedef struct tl_bins {
  int64_t w_ns;             // bin width
  int nb;                   // bins; bin b covers [b*w_ns, (b+1)*w_ns)
  int64_t *tokens;          // (nb) tokens seen by clients
  double *ttft_p95;         // (nb) ms, NaN: no first token in the bin
  int *queue;               // (nb) longest deployment queue, -1: no step in the bin
  double *running, *kv;     // (nb) an external server's running requests and KV usage, the
                            // largest one replica reported; NaN: no server sample in the bin
  // scratch while reading
  double *ttft;             // TTFT samples of the bin being read (ms)
  int n_ttft, cap_ttft, ttft_bin;
  int64_t *q_key;           // (dep index << 32 | replica) of each replica seen
  int *q_last;              // its last queue length
  int n_q, cap_q;
  int *q_dep_sum;           // (n_deps) sum of its replicas' last queue lengths
  const rq_run *r;
  bool any_token, any_ttft, any_queue, any_server;
  kv_state kv_use;          // plot 5's bins, from the same reading of the steps
} tl_bins;

static int bin_of(const tl_bins *b, int64_t t) {
  int64_t k = t < 0 ? 0 : t / b->w_ns;
  return k >= b->nb ? b->nb - 1 : (int)k;
}

static bool tl_token(void *ud, int64_t t_ns, int64_t n) {
  tl_bins *b = ud;
  b->tokens[bin_of(b, t_ns)] += n;
  b->any_token = true;
  return true;
}

static void tl_ttft_flush(tl_bins *b) {
  if (!b->n_ttft) return;
  qsort(b->ttft, (size_t)b->n_ttft, sizeof *b->ttft, sc_cmp_double);
  b->ttft_p95[b->ttft_bin] = mt_percentile(b->ttft, b->n_ttft, 95);
  b->n_ttft = 0;
  b->any_ttft = true;
}

static bool tl_request(void *ud, int64_t first_token_ns, int64_t ttft_ns) {
  tl_bins *b = ud;
  int bin = bin_of(b, first_token_ns);
  if (bin != b->ttft_bin) tl_ttft_flush(b);
  b->ttft_bin = bin;
  if (!rp_grow((void **)&b->ttft, b->n_ttft, &b->cap_ttft, sizeof *b->ttft)) return false;
  b->ttft[b->n_ttft++] = (double)ttft_ns / NS_PER_MS;
  return true;
}

static bool tl_step(void *ud, const rq_step *st) {
  tl_bins *b = ud;
  int dep = rq_dep_index(b->r, st->deployment_id);
  if (dep < 0) return true;
  int64_t key = (int64_t)dep << 32 | (uint32_t)st->replica;
  int q = st->queue_len, k = 0;
  while (k < b->n_q && b->q_key[k] != key) k++;
  if (k == b->n_q) {
    int cap = b->cap_q;
    if (!rp_grow((void **)&b->q_key, b->n_q, &cap, sizeof *b->q_key) ||
        !rp_grow((void **)&b->q_last, b->n_q, &b->cap_q, sizeof *b->q_last))
      return false;
    b->q_key[k] = key;
    b->q_last[k] = 0;
    b->n_q++;
  }
  b->q_dep_sum[dep] += q - b->q_last[k];
  b->q_last[k] = q;
  int bin = bin_of(b, st->t_ns);
  if (b->q_dep_sum[dep] > b->queue[bin]) b->queue[bin] = b->q_dep_sum[dep];
  b->any_queue = true;
  return true;
}

// The steps start over (rq_steps_by_time): forgets what they said.
static void tl_steps_restart(void *ud) {
  tl_bins *b = ud;
  for (int i = 0; i < b->nb; i++) b->queue[i] = -1;
  for (int d = 0; d <= b->r->n_deps; d++) b->q_dep_sum[d] = 0;
  b->n_q = 0;
  b->any_queue = false;
}

// A server_sample row: its waiting requests count as the queue (as a step's queue length
// does), its running requests and KV usage go to their own columns.
static bool tl_server(void *ud, const rq_server_sample *sm) {
  tl_bins *b = ud;
  int bin = bin_of(b, sm->t_ns);
  if (isfinite(sm->waiting)) {
    rq_step st = {.deployment_id = sm->deployment_id,
                  .replica = sm->replica,
                  .t_ns = sm->t_ns,
                  .queue_len = (int)sm->waiting};
    if (!tl_step(ud, &st)) return false;
  }
  if (isfinite(sm->running) && !(b->running[bin] >= sm->running)) b->running[bin] = sm->running;
  if (isfinite(sm->kv_usage) && !(b->kv[bin] >= sm->kv_usage)) b->kv[bin] = sm->kv_usage;
  b->any_server |= isfinite(sm->running) || isfinite(sm->kv_usage);
  return true;
}

// A step row: the queue of its deployment and, when it has a KV-cache size, its replica's use.
static bool tl_step_row(void *ud, const rq_step *st) {
  tl_bins *b = ud;
  return tl_step(ud, st) && (st->kv_total <= 0 || kv_step(&b->kv_use, st));
}

static void tl_free(tl_bins *b) {
  kv_free(&b->kv_use);
  free(b->running);
  free(b->kv);
  free(b->tokens);
  free(b->ttft_p95);
  free(b->queue);
  free(b->ttft);
  free(b->q_key);
  free(b->q_last);
  free(b->q_dep_sum);
}

// Fills the bins of run r: tokens per bin, TTFT p95 of the requests whose first token falls in
// the bin, and the longest queue (per deployment: its replicas' latest queue lengths summed);
// and the KV plot's (its bins are not capped). The steps are read once for both plots: an
// hour of simulated serving has millions. On error nothing is left to free.
static sc_status tl_read(rp_ctx *c, const rq_run *r, tl_bins *b, sc_error *err) {
  int64_t span;
  SC_TRY(run_span_ns(c, r, &span, err));
  memset(b, 0, sizeof *b);
  b->r = r;
  b->w_ns = bin_width_ns(span);
  int64_t nb = span > 0 ? (span + b->w_ns - 1) / b->w_ns : 1; // a row at t == span: last bin
  b->nb = (int)(nb > 100000 ? 100000 : nb);
  b->kv_use = (kv_state){.r = r, .w_ns = b->w_ns, .nb = nb};
  b->tokens = calloc((size_t)b->nb, sizeof *b->tokens);
  b->ttft_p95 = calloc((size_t)b->nb, sizeof *b->ttft_p95);
  b->queue = calloc((size_t)b->nb, sizeof *b->queue);
  b->q_dep_sum = calloc((size_t)r->n_deps + 1, sizeof *b->q_dep_sum);
  b->running = calloc((size_t)b->nb, sizeof *b->running);
  b->kv = calloc((size_t)b->nb, sizeof *b->kv);
  if (!b->tokens || !b->ttft_p95 || !b->queue || !b->q_dep_sum || !b->running || !b->kv) {
    tl_free(b);
    return sc_fail(err, SC_OOM, "out of memory for %d time bins", b->nb);
  }
  for (int i = 0; i < b->nb; i++) {
    b->ttft_p95[i] = b->running[i] = b->kv[i] = NAN;
    b->queue[i] = -1;
  }
  sc_status s = rq_token_counts(c->db, r->id, b->w_ns, tl_token, b, err);
  if (s == SC_OK) s = rq_first_tokens(c->db, r->id, tl_request, b, err);
  if (s == SC_OK) tl_ttft_flush(b);
  if (s == SC_OK) s = rq_steps_by_time(c->db, r->id, tl_step_row, tl_steps_restart, b, err);
  if (s == SC_OK) s = rq_server_samples(c->db, r->id, tl_server, b, err);
  if (s != SC_OK) tl_free(b);
  return s;
}

// --- plot 4: timeline

static void tl_marker(FILE *f, int tag, double x, const char *color, int dt, const char *text,
                      bool with_label) {
  fprintf(f, "  set arrow %d from %.10g, graph 0 to %.10g, graph 1 nohead dt %d lc rgb \"%s\"\n",
          tag, x, x, dt, color);
  if (!with_label) return;
  fprintf(f, "  set label %d ", tag);
  rp_gp_str(f, text);
  // Rotated text hangs left of its anchor: one character to the right puts it beside the line.
  fprintf(f, " at %.10g, graph 0.98 rotate by 90 right font \",7\" tc rgb \"%s\" offset char "
             "1,0\n",
          x, color);
}

// Every phase start and fault time as a vertical line (labels: with_label).
static void tl_markers(FILE *f, const rq_run *r, bool with_label) {
  int tag = 1;
  for (int i = 0; i < r->n_phases; i++) {
    const rq_phase *ph = &r->phases[i];
    char text[160];
    snprintf(text, sizeof text, "%s %s", r->deps[ph->dep].label, ph->name);
    tl_marker(f, tag++, (double)ph->start_ns / NS_PER_S, "gray50", 2, text, with_label);
  }
  for (int i = 0; i < r->n_faults; i++) {
    const rq_fault *ft = &r->faults[i];
    static const char *const what[3] = {"injected", "detected", "recovered"};
    static const char *const color[3] = {"red", "dark-orange", "forest-green"};
    int64_t at[3] = {ft->injected_ns, ft->detected_ns, ft->recovered_ns};
    for (int k = 0; k < 3; k++) {
      if (at[k] < 0) continue;
      char text[160];
      snprintf(text, sizeof text, "%s%s%s %s", ft->kind, ft->target[0] ? " " : "", ft->target,
               what[k]);
      tl_marker(f, tag++, (double)at[k] / NS_PER_S, color[k], 1, text, with_label);
    }
  }
}

static void fmt_width(int64_t w_ns, char *buf, size_t n) {
  rp_fmt_num((double)w_ns / NS_PER_S, buf, n);
}

// The timeline of run r from its bins b (tl_read).
static sc_status plot_timeline(rp_ctx *c, const rq_run *r, const tl_bins *b, const char *dir,
                               const gp_term *t, rp_plot *p, sc_error *err) {
  if (c->n_runs > 1) snprintf(p->name, sizeof p->name, "timeline-run%lld", (long long)r->id);
  else snprintf(p->name, sizeof p->name, "timeline");
  char wbuf[32];
  fmt_width(b->w_ns, wbuf, sizeof wbuf);
  snprintf(p->title, sizeof p->title,
           "Timeline of run %lld: output tokens/s, TTFT p95 and queue length in %s s bins, "
           "with phase and fault markers",
           (long long)r->id, wbuf);
  if (!b->any_token && !b->any_ttft && !b->any_queue) {
    snprintf(p->note, sizeof p->note,
             "no timeline for run %lld: it has no token, request or step rows", (long long)r->id);
    return SC_OK;
  }
  char path[PATH_MAX];
  FILE *f = rp_open_out(dir, p->name, "dat", path, sizeof path, err);
  if (!f) {
    return SC_IO;
  }
  double w_s = (double)b->w_ns / NS_PER_S;
  // two more columns only when an external server's /metrics was sampled (a target run)
  fprintf(f,
          "# t_s output_tok_s ttft_p95_ms queue_len%s\n"
          "# %s.dat: run %lld in bins of %s s. t_s: the middle of the bin (s since the run's\n"
          "# start); output_tok_s: tokens clients saw in the bin / bin width; ttft_p95_ms: p95\n"
          "# TTFT of the requests (warm-up included) whose first token came in the bin;\n"
          "# queue_len: the longest queue of a deployment in the bin, each step row counting\n"
          "# the latest queue lengths of that deployment's replicas summed%s. NaN: nothing in\n"
          "# the bin.\n",
          b->any_server ? " server_running server_kv_usage" : "", p->name, (long long)r->id, wbuf,
          b->any_server ? " (an external\n# server's waiting requests from its /metrics count as "
                         "its queue); server_running,\n# server_kv_usage: the most running "
                         "requests and the highest KV usage (0..1) an\n# external server's "
                         "/metrics showed in the bin"
                       : "");
  for (int i = 0; i < b->nb; i++) {
    fprintf(f, "%.10g", (i + 0.5) * w_s);
    dat_num(f, (double)b->tokens[i] / w_s);
    dat_num(f, b->ttft_p95[i]);
    dat_num(f, b->queue[i] < 0 ? NAN : b->queue[i]);
    if (b->any_server) {
      dat_num(f, b->running[i]);
      dat_num(f, b->kv[i]);
    }
    fputc('\n', f);
  }
  sc_status s = rp_close_out(f, path, err);
  if (s == SC_OK && !(f = rp_open_out(dir, p->name, "gp", path, sizeof path, err))) s = SC_IO;
  if (s != SC_OK) {
    return s;
  }
  double x1 = b->nb * w_s;
  gp_begin(f, p, t, 1200, b->any_server ? 1150 : 900);
  fprintf(f, "  set multiplot layout %d,1 title ", b->any_server ? 4 : 3);
  char title[256];
  snprintf(title, sizeof title, "Run %lld (%s): timeline in %s s bins", (long long)r->id,
           r->scenario, wbuf);
  rp_gp_str(f, title);
  fprintf(f, "\n  set lmargin 12\n  set rmargin 4\n  set xrange [0:%.10g]\n  set yrange [0:*]\n"
             "  set key top left\n", x1);
  tl_markers(f, r, true);
  // Headroom above the data for the rotated marker labels of the top panel.
  fprintf(f, "  set ylabel \"output tokens/s\"\n  set offsets 0, 0, graph 0.45, 0\n");
  fprintf(f, "  plot \"%s.dat\" using 1:2 with lines lw 2 lc 1 notitle\n", p->name);
  fprintf(f, "  unset label\n  set offsets 0, 0, 0, 0\n  set ylabel \"TTFT p95 (ms)\"\n");
  if (b->any_ttft)
    fprintf(f, "  plot \"%s.dat\" using 1:3 with linespoints lw 2 pt 7 ps 0.5 lc 2 notitle\n",
            p->name);
  else
    gp_empty_panel(f, 0, x1);
  fprintf(f, "  set ylabel \"queue length\"\n");
  if (!b->any_server) fprintf(f, "  set xlabel \"time since the run's start (s)\"\n");
  if (b->any_queue)
    fprintf(f, "  plot \"%s.dat\" using 1:4 with steps lw 2 lc 3 notitle\n", p->name);
  else
    gp_empty_panel(f, 0, x1);
  if (b->any_server) { // an external server's own figures, from its /metrics
    fprintf(f, "  set ylabel \"server: running\"\n  set y2label \"KV usage\"\n"
               "  set y2range [0:1]\n  set y2tics\n  set key top right\n"
               "  set xlabel \"time since the run's start (s)\"\n");
    fprintf(f,
            "  plot \"%s.dat\" using 1:5 with steps lw 2 lc 4 title \"running requests\", "
            "\"%s.dat\" using 1:6 axes x1y2 with steps lw 2 lc 5 title \"KV usage\"\n",
            p->name, p->name);
    fputs("  unset y2tics\n  unset y2label\n", f);
  }
  fputs("  unset multiplot\n  unset arrow\n  unset label\n", f);
  gp_end(f);
  SC_TRY(rp_close_out(f, path, err));
  p->written = true;
  return SC_OK;
}

// --- plot 5: KV-cache use

// The KV plot of run r from its bins k (tl_read).
static sc_status plot_kv(rp_ctx *c, const rq_run *r, kv_state *k, const char *dir,
                         const gp_term *t, rp_plot *p, sc_error *err) {
  if (c->n_runs > 1) snprintf(p->name, sizeof p->name, "kv-run%lld", (long long)r->id);
  else snprintf(p->name, sizeof p->name, "kv");
  char wbuf[32];
  fmt_width(k->w_ns, wbuf, sizeof wbuf);
  snprintf(p->title, sizeof p->title,
           "KV-cache use of run %lld per deployment x replica (highest in each %s s bin)",
           (long long)r->id, wbuf);
  char path[PATH_MAX];
  FILE *f = rp_open_out(dir, p->name, "dat", path, sizeof path, err);
  if (!f) return SC_IO;
  fprintf(f,
          "# t_s kv_used_pct\n"
          "# %s.dat: run %lld, one block per deployment x replica (separated by two blank\n"
          "# lines). t_s: the middle of a %s s bin (s since the run's start); kv_used_pct: the\n"
          "# highest kv_used / kv_total of the replica's steps in the bin, in percent.\n",
          p->name, (long long)r->id, wbuf);
  kv_write(f, k);
  sc_status s = rp_close_out(f, path, err);
  if (s == SC_OK && k->n_series == 0) {
    snprintf(p->note, sizeof p->note,
             "no KV-cache plot for run %lld: no step rows with a KV-cache size", (long long)r->id);
    remove(path);
  } else if (s == SC_OK) {
    f = rp_open_out(dir, p->name, "gp", path, sizeof path, err);
    if (!f) s = SC_IO;
    if (f) {
      gp_begin(f, p, t, 1200, 560);
      fprintf(f, "  set title ");
      char title[256];
      snprintf(title, sizeof title, "Run %lld (%s): KV-cache use per replica", (long long)r->id,
               r->scenario);
      rp_gp_str(f, title);
      fprintf(f,
              "\n  set xlabel \"time since the run's start (s)\"\n"
              "  set ylabel \"KV cache used (%%)\"\n"
              "  set xrange [0:%.10g]\n"
              "  set yrange [0:105]\n"
              "  set key outside right top\n",
              (double)k->nb * ((double)k->w_ns / NS_PER_S));
      tl_markers(f, r, false);
      fputs("  plot \\\n", f);
      for (int i = 0; i < k->n_series; i++) {
        fprintf(f, "    \"%s.dat\" index %d using 1:2 with lines lw 1.5 lc %d title ", p->name, i,
                i + 1);
        char key[96];
        snprintf(key, sizeof key, "%s r%d", r->deps[k->series[i].dep].label,
                 k->series[i].replica);
        rp_gp_str(f, key);
        fputs(i + 1 < k->n_series ? ", \\\n" : "\n", f);
      }
      fputs("  unset arrow\n", f);
      gp_end(f);
      s = rp_close_out(f, path, err);
      if (s == SC_OK) p->written = true;
    }
  }
  return s;
}

// --- running gnuplot

static bool is_exec_file(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && access(path, X_OK) == 0;
}

// The absolute path of an executable file: name itself when it has a '/', else the first match
// on $PATH. False when there is none.
static bool find_program(const char *name, char *out, size_t n) {
  char cand[PATH_MAX];
  if (!name || !*name) return false;
  if (strchr(name, '/')) {
    if (snprintf(cand, sizeof cand, "%s", name) >= (int)sizeof cand) return false;
  } else {
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
    bool found = false;
    for (const char *p = path; !found;) {
      const char *e = strchr(p, ':');
      int len = e ? (int)(e - p) : (int)strlen(p);
      if (snprintf(cand, sizeof cand, "%.*s/%s", len, len ? p : ".", name) < (int)sizeof cand)
        found = is_exec_file(cand);
      if (!e) break;
      p = e + 1;
    }
    if (!found) return false;
  }
  if (!is_exec_file(cand)) return false;
  if (cand[0] == '/') return snprintf(out, n, "%s", cand) < (int)n;
  char cwd[PATH_MAX];
  if (!getcwd(cwd, sizeof cwd)) return false;
  return snprintf(out, n, "%s/%s", cwd, cand) < (int)n;
}

// Runs argv (argv[0] an absolute path) in directory cwd with stdin from /dev/null and stdout and
// stderr into out_fd; waits at most timeout_s seconds (then kills it). Returns its exit status,
// or -1 when it could not be started, died of a signal or was killed.
static int run_child(char *const argv[], const char *cwd, int out_fd, int timeout_s) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) { // the child: only async-signal-safe calls until exec
    if (cwd && chdir(cwd) != 0) _exit(127);
    int in = open("/dev/null", O_RDONLY);
    if (in >= 0) dup2(in, 0);
    dup2(out_fd, 1);
    dup2(out_fd, 2);
    execv(argv[0], argv);
    _exit(127);
  }
  const struct timespec tick = {0, 10 * 1000 * 1000};
  for (long waited_ms = 0;; waited_ms += 10) {
    int st;
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (w < 0 && errno == ECHILD) return 0; // SIGCHLD ignored: the output files tell
    if (w < 0 && errno != EINTR) return -1;
    if (waited_ms >= (long)timeout_s * 1000) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -1;
    }
    nanosleep(&tick, NULL);
  }
}

bool rp_gnuplot_find(const char *gnuplot, char *prog, size_t n, char *why, size_t why_n) {
  const char *env = getenv("SHARDCHECK_GNUPLOT");
  const char *name = gnuplot ? gnuplot : env && *env ? env : "gnuplot";
  if (find_program(name, prog, n)) return true;
  if (gnuplot || (env && *env))
    snprintf(why, why_n, "gnuplot not found: '%.180s' is not an executable", name);
  else
    snprintf(why, why_n, "gnuplot not found on PATH");
  return false;
}

// Finds gnuplot (rp_gnuplot_find; why it is missing into why) and asks it (`gnuplot -e "set
// terminal"`) whether it has pngcairo.
static void gp_detect(const char *gnuplot, gp_term *t, char *why, size_t why_n) {
  memset(t, 0, sizeof *t);
  t->pngcairo = true; // when gnuplot is missing the scripts are written for the usual build
  if (!rp_gnuplot_find(gnuplot, t->prog, sizeof t->prog, why, why_n)) return;
  t->found = true;
  FILE *out = tmpfile();
  if (!out) return;
  char *argv[] = {t->prog, "-e", "set terminal", NULL};
  int rc = run_child(argv, NULL, fileno(out), GP_PROBE_TIMEOUT_S);
  char *buf = rc == 0 ? malloc(1 << 16) : NULL; // the terminal list: a few KB
  if (buf) {
    rewind(out);
    size_t n = fread(buf, 1, (1 << 16) - 1, out);
    buf[n] = 0;
    t->pngcairo = strstr(buf, "pngcairo") != NULL;
  }
  free(buf);
  fclose(out);
}

static bool nonempty_file(const char *dir, const char *name, const char *ext) {
  char path[PATH_MAX];
  struct stat sb;
  snprintf(path, sizeof path, "%s/%s.%s", dir, name, ext);
  return stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0;
}

static void remove_output(const char *dir, const char *name, const char *ext) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s.%s", dir, name, ext);
  remove(path);
}

int rp_gnuplot_run(const char *prog, const char *dir, const char *stem, int log, int timeout_s,
                   bool *png, bool *svg) {
  remove_output(dir, stem, "png");
  remove_output(dir, stem, "svg");
  char script[PATH_MAX], head[2 * PATH_MAX];
  snprintf(script, sizeof script, "%s.gp", stem);
  int hn = snprintf(head, sizeof head, "== %s %s\n", prog, script);
  if (write(log, head, (size_t)(hn < (int)sizeof head ? hn : (int)sizeof head - 1)) < 0) {
    // the log is a courtesy: a failed write changes nothing
  }
  char *argv[] = {(char *)prog, script, NULL};
  int rc = run_child(argv, dir, log, timeout_s);
  *png = nonempty_file(dir, stem, "png");
  *svg = nonempty_file(dir, stem, "svg");
  return rc;
}

// Runs gnuplot on each written script in dir, logging into dir/gnuplot.log.
static void gp_run_all(const gp_term *t, const char *dir, rp_plot *plots, int n,
                       report_result *res) {
  char log_path[PATH_MAX];
  snprintf(log_path, sizeof log_path, "%s/gnuplot.log", dir);
  int log = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (log < 0) {
    res->plots_skipped = true;
    snprintf(res->why, sizeof res->why, "cannot write %.160s: %s", log_path, strerror(errno));
    for (int i = 0; i < n; i++)
      if (plots[i].written)
        snprintf(plots[i].note, sizeof plots[i].note, "plot skipped: %s", res->why);
    return;
  }
  for (int i = 0; i < n; i++) {
    rp_plot *p = &plots[i];
    if (!p->written) continue;
    char script[96];
    snprintf(script, sizeof script, "%s.gp", p->name);
    int rc = rp_gnuplot_run(t->prog, dir, p->name, log, GP_TIMEOUT_S, &p->has_png, &p->has_svg);
    if (p->has_png) res->n_plots++;
    if (rc != 0 || !p->has_png || !p->has_svg) {
      snprintf(p->note, sizeof p->note, "gnuplot failed on %s (exit %d; see gnuplot.log)",
               script, rc);
      if (!res->plots_skipped)
        snprintf(res->why, sizeof res->why, "gnuplot failed on %.60s (see %.150s)", script,
                 log_path);
      res->plots_skipped = true;
    }
  }
  close(log);
}

// --- all plots

sc_status rp_plots_write(rp_ctx *c, const char *dir, const char *gnuplot, rp_plot **plots,
                         int *n_plots, report_result *res, sc_error *err) {
  *plots = NULL;
  *n_plots = 0;
  int cap = 3 + 2 * c->n_runs;
  rp_plot *ps = calloc((size_t)cap, sizeof *ps);
  if (!ps) return sc_fail(err, SC_OOM, "out of memory for %d plots", cap);
  gp_term t;
  char why[sizeof res->why];
  gp_detect(gnuplot, &t, why, sizeof why);

  cv_data cv = {0};
  int n = 0;
  sc_status s = plot_scaling(c, dir, &t, &ps[n++], err);
  if (s == SC_OK) s = cv_gather(c, &cv, err);
  if (s == SC_OK) {
    s = plot_ttft(c, &cv, dir, &t, &ps[n++], err);
    if (s == SC_OK) s = plot_tpot(c, &cv, dir, &t, &ps[n++], err);
  }
  cv_free(&cv);
  for (int i = 0; i < c->n_runs && s == SC_OK; i++) {
    tl_bins b;
    s = tl_read(c, &c->runs[i], &b, err);
    if (s != SC_OK) break;
    s = plot_timeline(c, &c->runs[i], &b, dir, &t, &ps[n++], err);
    if (s == SC_OK) s = plot_kv(c, &c->runs[i], &b.kv_use, dir, &t, &ps[n++], err);
    tl_free(&b);
  }
  if (s != SC_OK) {
    free(ps);
    return s;
  }
  bool any = false;
  for (int i = 0; i < n; i++) any |= ps[i].written;
  if (!t.found) {
    res->plots_skipped = true;
    snprintf(res->why, sizeof res->why, "%s", why);
    for (int i = 0; i < n; i++)
      if (ps[i].written)
        snprintf(ps[i].note, sizeof ps[i].note,
                 "plot skipped: %.180s (data: %.40s.dat, script: %.40s.gp)",
                 res->why, ps[i].name, ps[i].name);
  } else if (any) {
    gp_run_all(&t, dir, ps, n, res);
  }
  *plots = ps;
  *n_plots = n;
  return SC_OK;
}
