// The capacity report (report.h, report_capacity_*): the table `shardcheck capacity` prints,
// and index.html with a gnuplot plot of throughput per GPU against TTFT p95 for every
// simulated point with the Pareto front, all drawn from the stored search (rq_capacity_load),
// so a search can be redrawn from the database. Nothing here depends on the time of day or
// the machine: the same search gives the same files. The search itself is runner/capacity.c.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reports/query.h"
#include "reports/report.h"
#include "reports/report_impl.h"

enum { GP_TIMEOUT_S = 120 };

static void fmt(double v, const char *spec, char *buf, size_t n) {
  if (isnan(v))
    snprintf(buf, n, "-");
  else
    snprintf(buf, n, spec, v);
}

static double per_gpu(const store_cap_layout *l, double tok_s) {
  return l->gpus > 0 ? tok_s / l->gpus : NAN;
}

// Whether a layout of c reached its knee: the tables show a knee column only then, so a search
// that never did prints as it did before the knee was kept.
static bool any_knee(const rq_capacity *c) {
  for (int i = 0; i < c->n_layouts; i++)
    if (!isnan(c->layouts[i].knee_rate)) return true;
  return false;
}

void report_capacity_print(const rq_capacity *c, FILE *f) {
  bool knees = any_knee(c);
  fprintf(f, "capacity of %s: target %.3g req/s, rates %.3g..%.3g (%d probes per layout), SLO %s\n",
          c->scenario, c->target_rate, c->rate_lo, c->rate_hi, c->iters + 2, c->slo);
  fprintf(f, "%-2s %-10s %-14s %4s %8s %11s %17s ", "", "kind", "layout", "gpus", "cost/h",
          "max req/s", "interval");
  if (knees) fprintf(f, "%10s ", "knee req/s");
  fprintf(f, "%11s %10s %9s  %s\n", "tok/s/GPU", "ttft p95", "$/M tok", "limit above");
  for (int i = 0; i < c->n_layouts; i++) {
    const store_cap_layout *l = &c->layouts[i];
    const store_cap_point *at = NULL;
    for (int k = 0; k < c->n_points; k++)
      if (c->points[k].layout == i && c->points[k].pass && c->points[k].bound == 0 &&
          c->points[k].rate == l->max_rate)
        at = &c->points[k];
    char rate[24], tpg[24], ttft[24], cpm[24], iv[48] = "-";
    if (isnan(l->max_rate))
      snprintf(rate, sizeof rate, "< %.3g", c->rate_lo);
    else
      snprintf(rate, sizeof rate, "%s%.3g", l->capped ? ">=" : "", l->max_rate);
    if (l->error > 0) {
      char a[16], b[16];
      fmt(l->max_rate_lo, "%.3g", a, sizeof a);
      fmt(l->max_rate_hi, "%.3g", b, sizeof b);
      snprintf(iv, sizeof iv, "[%s, %s]", a, b);
    }
    fmt(per_gpu(l, l->output_tok_s), "%.0f", tpg, sizeof tpg);
    fmt(at ? at->ttft_p95_ms : NAN, "%.0f ms", ttft, sizeof ttft);
    fmt(l->cost_per_mtok, "%.3f", cpm, sizeof cpm);
    const char *mark = i == c->best ? "*" : i == c->runner_up ? "2" : "";
    fprintf(f, "%-2s %-10s %-14s %4d %8.2f %11s %17s ", mark, l->kind, l->label, l->gpus,
            l->cost_per_hour, rate, iv);
    if (knees) {
      char kn[24];
      fmt(l->knee_rate, "%.3g", kn, sizeof kn);
      fprintf(f, "%10s ", kn);
    }
    fprintf(f, "%11s %10s %9s  %s\n", tpg, ttft, cpm, l->limit[0] ? l->limit : "-");
  }
  fprintf(f, "%s\n", c->note);
}

// --- the plot

// Points as layout blocks (index i = layout i: tok/s per GPU, TTFT p95, pass), then the Pareto
// front of the passing points (the last index): no other passing point has both more tokens
// per GPU and a lower TTFT.
static sc_status write_dat(const rq_capacity *c, const char *dir, sc_error *err) {
  char path[1200];
  FILE *f = rp_open_out(dir, "capacity", "dat", path, sizeof path, err);
  if (!f) return SC_IO;
  fprintf(f,
          "# shardcheck capacity search %lld: per layout, every simulated point\n"
          "# tok_s_per_gpu ttft_p95_ms pass rate\n",
          (long long)c->id);
  for (int i = 0; i < c->n_layouts; i++) {
    fprintf(f, "# %s %s\n", c->layouts[i].kind, c->layouts[i].label);
    int n = 0;
    for (int k = 0; k < c->n_points; k++) {
      const store_cap_point *p = &c->points[k];
      if (p->layout != i || p->bound != 0 || isnan(p->output_tok_s) || isnan(p->ttft_p95_ms))
        continue;
      fprintf(f, "%.6g %.6g %d %.6g\n", per_gpu(&c->layouts[i], p->output_tok_s), p->ttft_p95_ms,
              p->pass ? 1 : 0, p->rate);
      n++;
    }
    if (!n) fprintf(f, "NaN NaN 0 NaN\n");
    fprintf(f, "\n\n");
  }
  fprintf(f, "# Pareto front of the passing points\n");
  int *front = calloc((size_t)c->n_points + 1, sizeof *front);
  int nf = 0;
  for (int k = 0; front && k < c->n_points; k++) {
    const store_cap_point *p = &c->points[k];
    if (!p->pass || p->bound != 0 || isnan(p->output_tok_s) || isnan(p->ttft_p95_ms)) continue;
    double x = per_gpu(&c->layouts[p->layout], p->output_tok_s);
    bool dominated = false;
    for (int j = 0; j < c->n_points && !dominated; j++) {
      const store_cap_point *q = &c->points[j];
      if (j == k || !q->pass || q->bound != 0 || isnan(q->output_tok_s) || isnan(q->ttft_p95_ms))
        continue;
      double qx = per_gpu(&c->layouts[q->layout], q->output_tok_s);
      dominated = qx >= x && q->ttft_p95_ms <= p->ttft_p95_ms &&
                  (qx > x || q->ttft_p95_ms < p->ttft_p95_ms);
    }
    if (!dominated) front[nf++] = k;
  }
  // by throughput per GPU, a stable order (insertion sort: the front is short)
  for (int a = 1; a < nf; a++)
    for (int b = a; b > 0; b--) {
      const store_cap_point *p = &c->points[front[b]], *q = &c->points[front[b - 1]];
      if (per_gpu(&c->layouts[p->layout], p->output_tok_s) >=
          per_gpu(&c->layouts[q->layout], q->output_tok_s))
        break;
      int t = front[b];
      front[b] = front[b - 1];
      front[b - 1] = t;
    }
  for (int a = 0; a < nf; a++) {
    const store_cap_point *p = &c->points[front[a]];
    fprintf(f, "%.6g %.6g 1 %.6g\n", per_gpu(&c->layouts[p->layout], p->output_tok_s),
            p->ttft_p95_ms, p->rate);
  }
  if (!nf) fprintf(f, "NaN NaN 0 NaN\n");
  free(front);
  return rp_close_out(f, path, err);
}

static sc_status write_gp(const rq_capacity *c, const char *dir, sc_error *err) {
  char path[1200];
  FILE *f = rp_open_out(dir, "capacity", "gp", path, sizeof path, err);
  if (!f) return SC_IO;
  fprintf(f,
          "# Written by `shardcheck capacity`. Run `gnuplot capacity.gp` in this directory:\n"
          "# it reads capacity.dat and writes capacity.svg. Edit freely to restyle.\n"
          "set terminal svg size 1000,%d noenhanced font \"sans,10\" background rgb "
          "\"white\"\n"
          "set output \"capacity.svg\"\n"
          "set title \"Output throughput per GPU against TTFT p95 (every simulated point; "
          "filled: SLO held)\"\n"
          "set xlabel \"output tokens/s per GPU\"\n"
          "set ylabel \"TTFT p95 (ms)\"\n"
          "set logscale y\n"
          "set key outside bottom center horizontal maxrows %d font \",9\"\n"
          "set grid\n"
          "plot \\\n",
          560 + 18 * ((c->n_layouts + 3) / 4), (c->n_layouts + 4) / 4);
  // a point shape per GPU kind (filled: held, hollow: failed), a colour per layout of it
  static const int filled[] = {7, 5, 9, 11, 13}, hollow[] = {6, 4, 8, 10, 12};
  int kind = 0, first = 0;
  for (int i = 0; i < c->n_layouts; i++) {
    if (i > 0 && strcmp(c->layouts[i].kind, c->layouts[i - 1].kind)) {
      kind = (kind + 1) % 5;
      first = i;
    }
    char title[320];
    snprintf(title, sizeof title, "%s %s", c->layouts[i].kind, c->layouts[i].label);
    fprintf(f,
            "  \"capacity.dat\" index %d using 1:($3 > 0 ? $2 : 1/0) with points pt %d "
            "lc %d title ",
            i, filled[kind], i - first + 1);
    rp_gp_str(f, title);
    fprintf(f,
            ", \\\n  \"capacity.dat\" index %d using 1:($3 > 0 ? 1/0 : $2) with points pt %d "
            "lc %d notitle, \\\n",
            i, hollow[kind], i - first + 1);
  }
  fprintf(f,
          "  \"capacity.dat\" index %d using 1:2 with linespoints lw 2 lc rgb \"black\" pt 2 "
          "title \"Pareto front\"\n",
          c->n_layouts);
  return rp_close_out(f, path, err);
}

// --- HTML

static void td(FILE *f, const char *s) {
  fputs("<td>", f);
  rp_put_esc(f, s);
  fputs("</td>", f);
}

sc_status report_capacity_write(sqlite3 *db, int64_t id, const char *dir, const char *gnuplot,
                                report_result *res, sc_error *err) {
  memset(res, 0, sizeof *res);
  rq_capacity c;
  SC_TRY(rq_capacity_load(db, id, &c, err));
  sc_status st = rp_mkdirs(dir, err);
  if (st == SC_OK) st = write_dat(&c, dir, err);
  if (st == SC_OK) st = write_gp(&c, dir, err);
  bool svg = false;
  if (st == SC_OK) {
    char prog[1024];
    if (!rp_gnuplot_find(gnuplot, prog, sizeof prog, res->why, sizeof res->why)) {
      res->plots_skipped = true;
    } else {
      char logp[1200];
      FILE *lf = rp_open_out(dir, "gnuplot", "log", logp, sizeof logp, err);
      if (!lf) {
        st = SC_IO;
      } else {
        bool png = false;
        int rc = rp_gnuplot_run(prog, dir, "capacity", fileno(lf), GP_TIMEOUT_S, &png, &svg);
        fclose(lf);
        if (rc != 0 || !svg) {
          res->plots_skipped = true;
          snprintf(res->why, sizeof res->why, "gnuplot failed on capacity.gp (see gnuplot.log)");
        } else {
          res->n_plots = 1;
        }
      }
    }
  }
  char path[1200];
  FILE *f = st == SC_OK ? rp_open_out(dir, "index", "html", path, sizeof path, err) : NULL;
  if (st == SC_OK && !f) st = SC_IO;
  if (f) {
    fputs("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>capacity: ", f);
    rp_put_esc(f, c.scenario);
    fputs("</title>\n<style>body{font-family:sans-serif;margin:2em}table{border-collapse:"
          "collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}"
          "td:nth-child(-n+3){text-align:left}tr.best{background:#dfd}tr.second{background:"
          "#eef}</style></head><body>\n<h1>Capacity: ",
          f);
    rp_put_esc(f, c.scenario);
    fputs("</h1>\n<p>", f);
    rp_put_esc(f, c.note);
    fprintf(f,
            "</p>\n<p>Target %.3g req/s; every layout searched from it over %.3g..%.3g "
            "req/s (doubled or halved to bracket its capacity, then bisected; %d probes per "
            "layout), probes recorded at level ",
            c.target_rate, c.rate_lo, c.rate_hi, c.iters + 2);
    rp_put_esc(f, c.record);
    fputs("; seed ", f);
    fprintf(f, "%lld. SLO: ", (long long)c.seed);
    rp_put_esc(f, c.slo);
    fputs(". Cost per GPU-hour: ", f);
    rp_put_esc(f, c.costs);
    fputs(".</p>\n", f);
    if (svg)
      fputs("<p><img src=\"capacity.svg\" alt=\"throughput per GPU against TTFT p95\"></p>\n", f);
    else
      fputs("<p>(no plot: gnuplot was not run; capacity.gp and capacity.dat are here)</p>\n", f);
    bool knees = any_knee(&c);
    fputs("<table>\n<tr><th></th><th>kind</th><th>layout</th><th>GPUs</th><th>cost/h</th>"
          "<th>max req/s</th><th>interval</th>",
          f);
    if (knees) fputs("<th>knee req/s</th>", f);
    fputs("<th>output tok/s</th><th>tok/s per GPU</th><th>cost per M tokens</th>"
          "<th>limit above</th></tr>\n",
          f);
    for (int i = 0; i < c.n_layouts; i++) {
      const store_cap_layout *l = &c.layouts[i];
      char b[64];
      fprintf(f, "<tr%s>",
              i == c.best        ? " class=\"best\""
              : i == c.runner_up ? " class=\"second\""
                                 : "");
      td(f, i == c.best ? "recommended" : i == c.runner_up ? "runner-up" : "");
      td(f, l->kind);
      td(f, l->label);
      fprintf(f, "<td>%d</td><td>%.2f</td>", l->gpus, l->cost_per_hour);
      if (isnan(l->max_rate))
        snprintf(b, sizeof b, "&lt; %.3g", c.rate_lo);
      else
        snprintf(b, sizeof b, "%s%.3g", l->capped ? "&ge; " : "", l->max_rate);
      fprintf(f, "<td>%s</td>", b);
      if (l->error > 0) {
        char lo[16], hi[16];
        fmt(l->max_rate_lo, "%.3g", lo, sizeof lo);
        fmt(l->max_rate_hi, "%.3g", hi, sizeof hi);
        snprintf(b, sizeof b, "[%s, %s] (&plusmn;%.0f%%)", lo, hi, 100 * l->error);
        fprintf(f, "<td>%s</td>", b);
      } else {
        td(f, "-");
      }
      if (knees) {
        fmt(l->knee_rate, "%.3g", b, sizeof b);
        td(f, b);
      }
      fmt(l->output_tok_s, "%.0f", b, sizeof b);
      td(f, b);
      fmt(per_gpu(l, l->output_tok_s), "%.0f", b, sizeof b);
      td(f, b);
      fmt(l->cost_per_mtok, "%.3f", b, sizeof b);
      td(f, b);
      td(f, l->limit[0] ? l->limit : "-");
      fputs("</tr>\n", f);
    }
    fputs("</table>\n<h2>Every simulated point</h2>\n<table>\n<tr><th>kind</th><th>layout</th>"
          "<th>search</th><th>req/s</th><th>SLO</th><th>TTFT p95 ms</th><th>TPOT p95 "
          "ms</th><th>output tok/s"
          "</th><th>error rate</th><th>failed</th></tr>\n",
          f);
    for (int k = 0; k < c.n_points; k++) {
      const store_cap_point *p = &c.points[k];
      const store_cap_layout *l = &c.layouts[p->layout];
      char b[64];
      fputs("<tr>", f);
      td(f, l->kind);
      td(f, l->label);
      td(f, p->bound < 0 ? "pessimistic" : p->bound > 0 ? "optimistic" : "predicted");
      fprintf(f, "<td>%.4g</td><td>%s</td>", p->rate, p->pass ? "held" : "failed");
      fmt(p->ttft_p95_ms, "%.1f", b, sizeof b);
      td(f, b);
      fmt(p->tpot_p95_ms, "%.2f", b, sizeof b);
      td(f, b);
      fmt(p->output_tok_s, "%.0f", b, sizeof b);
      td(f, b);
      fmt(p->error_rate, "%.4f", b, sizeof b);
      td(f, b);
      td(f, p->failed[0] ? p->failed : "-");
      fputs("</tr>\n", f);
    }
    fputs("</table>\n</body></html>\n", f);
    st = rp_close_out(f, path, err);
    snprintf(res->index_path, sizeof res->index_path, "%.1099s", path);
  }
  rq_capacity_free(&c);
  return st;
}
