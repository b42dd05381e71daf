// index.html: one self-contained page per report. Inline CSS; every plot's SVG embedded as a
// base64 data URI (so the page is one file and plots cannot clash), linking the PNG beside it.
//
// First, when the report holds a sim run and a real run of the same scenario, "Predicted vs
// measured" (reports/report_compare.c computes it). Then for each run: metadata, the verdict
// (big PASS / FAIL) with the deployment x SLO table, the scaling table, the deployment x phase
// metrics table, per-class TTFT p95 (when the run has prompt classes), faults (when any); then
// the plots (or why each is missing), then each run's scenario text. Every string from the
// database is HTML-escaped (rp_put_esc). The rows come from reports/report.c, the plots from
// reports/report_plot.c.
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "reports/metrics.h"
#include "reports/report_impl.h"

static const char css[] =
    "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;"
    "max-width:1300px;padding:0 1em;color:#222}\n"
    "h1{margin-bottom:.2em}h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2em}\n"
    "table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:.9em}\n"
    "th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right;white-space:nowrap}\n"
    "th{background:#f2f2f2}td.t,th.t{text-align:left}\n"
    "table.meta td,table.meta th{text-align:left;white-space:normal}\n"
    "tr.all td{font-weight:600;background:#fafafa}\n"
    ".verdict{display:inline-block;font-size:2.4em;font-weight:700;padding:.15em .7em;"
    "border-radius:.2em;color:#fff;margin:.3em 0}\n"
    ".pass{background:#2e7d32}.fail{background:#c62828}.none{background:#757575}\n"
    "td.pass,td.fail{color:#fff;font-weight:700;text-align:center}\n"
    "td.off{background:#ffebee;color:#b71c1c;font-weight:700}\n"
    ".note{background:#fff8e1;border-left:4px solid #f9a825;padding:.5em 1em}\n"
    "figure{margin:1em 0 2em}figure img{max-width:100%;border:1px solid #ddd}\n"
    "figcaption{font-size:.85em;color:#555}\n"
    "pre{background:#f6f8fa;padding:1em;overflow:auto;border:1px solid #ddd}\n";

// --- small writers

static void esc(FILE *f, const char *s) {
  rp_put_esc(f, s);
}

static void th(FILE *f, const char *text, bool left) {
  fputs(left ? "<th class=\"t\">" : "<th>", f);
  esc(f, text);
  fputs("</th>", f);
}

static void td_text(FILE *f, const char *text) {
  fputs("<td class=\"t\">", f);
  esc(f, text);
  fputs("</td>", f);
}

static void td_num(FILE *f, double v) {
  char buf[48];
  rp_fmt_num(v, buf, sizeof buf);
  fprintf(f, "<td>%s</td>", buf);
}

static void td_pct(FILE *f, double frac) {
  char buf[48];
  rp_fmt_num(isfinite(frac) ? round(frac * 1000) / 10 : frac, buf, sizeof buf);
  fprintf(f, "<td>%s%s</td>", buf, isfinite(frac) ? "%" : "");
}

static void meta_row(FILE *f, const char *key, const char *value) {
  if (!value || !*value) return;
  fprintf(f, "<tr><th>%s</th><td>", key);
  esc(f, value);
  fputs("</td></tr>\n", f);
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void put_base64(FILE *f, const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i += 3) {
    unsigned v = (unsigned)p[i] << 16;
    if (i + 1 < n) v |= (unsigned)p[i + 1] << 8;
    if (i + 2 < n) v |= p[i + 2];
    char q[4] = {b64[v >> 18 & 63], b64[v >> 12 & 63], i + 1 < n ? b64[v >> 6 & 63] : '=',
                 i + 2 < n ? b64[v & 63] : '='};
    fwrite(q, 1, 4, f);
  }
}

// The whole file at dir/name (malloc'd, *n bytes); NULL when it cannot be read.
static unsigned char *slurp(const char *dir, const char *name, size_t *n) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  unsigned char *buf = NULL;
  long len = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  if (len > 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)len))) {
    if (fread(buf, 1, (size_t)len, f) != (size_t)len) {
      free(buf);
      buf = NULL;
    }
  }
  fclose(f);
  *n = buf ? (size_t)len : 0;
  return buf;
}

// --- one run

static void run_meta(FILE *f, const rq_run *r) {
  char buf[64];
  fputs("<table class=\"meta\">\n", f);
  snprintf(buf, sizeof buf, "%lld", (long long)r->id);
  meta_row(f, "run", buf);
  meta_row(f, "scenario", r->scenario);
  meta_row(f, "scenario file", r->scenario_path);
  meta_row(f, "mode", r->mode);
  meta_row(f, "backend", r->backend);
  meta_row(f, "model", r->model);
  meta_row(f, "git revision", r->git_rev);
  meta_row(f, "host", r->host);
  snprintf(buf, sizeof buf, "%llu", (unsigned long long)r->seed);
  meta_row(f, "seed", buf);
  meta_row(f, "started (UTC)", r->started_at);
  meta_row(f, "ended (UTC)", r->ended_at);
  if (r->duration_ns >= 0) {
    rp_fmt_s(r->duration_ns, buf, sizeof buf);
    strcat(buf, " s");
    meta_row(f, "duration", buf);
  }
  meta_row(f, "status", r->status);
  meta_row(f, "error", r->error);
  meta_row(f, "settings", r->config);
  fputs("</table>\n", f);
}

static void run_verdict(FILE *f, const rq_run *r) {
  int failed = 0;
  for (int i = 0; i < r->n_verdicts; i++) failed += !r->verdicts[i].pass;
  bool complete = !strcmp(r->status, "complete");
  const char *cls = failed || !complete ? "fail" : r->n_verdicts ? "pass" : "none";
  const char *word = failed ? "FAIL" : !complete ? "INCOMPLETE" : r->n_verdicts ? "PASS"
                                                                               : "NO SLOs";
  fprintf(f, "<h3>Verdict</h3>\n<div class=\"verdict %s\">%s</div>\n<p>", cls, word);
  if (!r->n_verdicts) fputs("no SLOs in the scenario", f);
  else if (failed) fprintf(f, "%d of %d SLOs failed", failed, r->n_verdicts);
  else fprintf(f, "%d/%d SLOs hold", r->n_verdicts, r->n_verdicts);
  if (!complete) {
    fputs("; the run did not complete (status ", f);
    esc(f, r->status[0] ? r->status : "unknown");
    if (r->error[0]) {
      fputs(": ", f);
      esc(f, r->error);
    }
    fputs(")", f);
  }
  fputs("</p>\n", f);
  if (!r->n_verdicts) return;
  fputs("<table>\n<tr>", f);
  th(f, "deployment", true);
  th(f, "GPUs", false);
  th(f, "SLO", true);
  th(f, "expected", false);
  th(f, "actual", false);
  th(f, "result", false);
  th(f, "note", true);
  fputs("</tr>\n", f);
  for (int i = 0; i < r->n_verdicts; i++) {
    const rq_verdict *v = &r->verdicts[i];
    char e[48], a[48];
    rp_fmt_metric(v->slo, v->expected, e, sizeof e);
    rp_fmt_metric(v->slo, v->actual, a, sizeof a);
    fputs("<tr>", f);
    td_text(f, r->deps[v->dep].label);
    fprintf(f, "<td>%d</td>", r->deps[v->dep].gpus);
    td_text(f, v->slo);
    fputs("<td>", f);
    esc(f, v->op);
    fputs(" ", f);
    esc(f, e);
    fputs("</td><td>", f);
    esc(f, isnan(v->actual) ? "no data" : a);
    fprintf(f, "</td><td class=\"%s\">%s</td>", v->pass ? "pass" : "fail",
            v->pass ? "PASS" : "FAIL");
    td_text(f, v->note);
    fputs("</tr>\n", f);
  }
  fputs("</table>\n", f);
  if (r->saturated[0]) {
    fputs("<p class=\"fail\">Client saturated: ", f);
    esc(f, r->saturated);
    fprintf(f, ". The client sent its requests late against its schedule (p99 past %.0f ms), so "
            "these phases' latencies hold the client's delay, not only the server's.</p>\n",
            MT_CLIENT_LATE_MS);
  }
}

// A ratio cell: "1.74x", "-" when missing.
static void td_x(FILE *f, double v) {
  char buf[48];
  rp_fmt_num(isfinite(v) ? round(v * 100) / 100 : v, buf, sizeof buf);
  fprintf(f, "<td>%s%s</td>", buf, isfinite(v) ? "x" : "");
}

static const char *const sens_names[2] = {"ttft_sensitivity", "tpot_sensitivity"};

static void run_scaling(FILE *f, rp_ctx *c, const rq_run *r) {
  bool sens = false; // a sim run made with --sensitivity: two more columns
  for (int d = 0; d < r->n_deps && !sens; d++)
    for (int k = 0; k < 2; k++)
      sens |= !isnan(rp_metric(c, r, r->deps[d].id, 0, NULL, sens_names[k]));
  fputs("<h3>Scaling</h3>\n<table>\n<tr>", f);
  th(f, "deployment", true);
  th(f, "tp x pp x dp", false);
  th(f, "GPUs", false);
  th(f, "peak output tok/s", false);
  th(f, "speed-up", false);
  th(f, "efficiency", false);
  th(f, "knee (users)", false);
  if (sens) {
    th(f, "TTFT sensitivity", false);
    th(f, "TPOT sensitivity", false);
  }
  th(f, "status", true);
  fputs("</tr>\n", f);
  for (int d = 0; d < r->n_deps; d++) {
    const rq_deployment *dp = &r->deps[d];
    fputs("<tr>", f);
    td_text(f, dp->label);
    fprintf(f, "<td>%d x %d x %d</td><td>%d</td>", dp->tp, dp->pp, dp->dp, dp->gpus);
    td_num(f, rp_metric(c, r, dp->id, 0, NULL, "peak_output_tok_s"));
    td_x(f, rp_metric(c, r, dp->id, 0, NULL, "speedup"));
    td_pct(f, rp_metric(c, r, dp->id, 0, NULL, "efficiency"));
    double knee = rp_metric(c, r, dp->id, 0, NULL, "knee_concurrency");
    if (isfinite(knee) && knee < 0) fputs("<td>none meets the SLO</td>", f);
    else td_num(f, knee);
    for (int k = 0; sens && k < 2; k++) td_x(f, rp_metric(c, r, dp->id, 0, NULL, sens_names[k]));
    td_text(f, dp->status);
    fputs("</tr>\n", f);
  }
  fputs("</table>\n", f);
}

static void phase_load(const rq_phase *ph, char *buf, size_t n) {
  char num[32];
  if (ph->concurrency > 0) {
    snprintf(buf, n, "%d user%s", ph->concurrency, ph->concurrency == 1 ? "" : "s");
  } else if (ph->rate > 0) {
    rp_fmt_num(ph->rate, num, sizeof num);
    snprintf(buf, n, "%s req/s", num);
  } else {
    snprintf(buf, n, "-");
  }
}

// The metrics of one table row: a phase (phase_id) or the deployment pooled (phase_id 0).
static void phase_cells(FILE *f, rp_ctx *c, const rq_run *r, int64_t dep_id, int64_t phase_id) {
  static const char *const names[] = {"requests",     "ttft_p50_ms", "ttft_p95_ms",
                                      "tpot_p50_ms",  "tpot_p95_ms", "itl_p95_ms",
                                      "e2el_p95_ms",  "output_tok_s", "req_s",
                                      "goodput_rps",  "error_rate",  "peak_queue",
                                      "peak_batch"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    td_num(f, rp_metric(c, r, dep_id, phase_id, NULL, names[i]));
  td_pct(f, rp_metric(c, r, dep_id, phase_id, NULL, "kv_peak_frac"));
  td_pct(f, rp_metric(c, r, dep_id, phase_id, NULL, "busy_frac"));
}

static void run_phases(FILE *f, rp_ctx *c, const rq_run *r) {
  static const char *const head[] = {
      "requests",       "TTFT p50 (ms)", "TTFT p95 (ms)", "TPOT p50 (ms)",  "TPOT p95 (ms)",
      "ITL p95 (ms)",   "E2EL p95 (ms)", "output tok/s",  "req/s",          "goodput (req/s)",
      "error rate",     "peak queue",    "peak batch",    "KV peak",        "busy"};
  fputs("<h3>Deployments x phases</h3>\n<p>Warm-up requests excluded; rates over each phase "
        "after its warm-up. The bold row of each deployment pools all its phases.</p>\n"
        "<table>\n<tr>",
        f);
  th(f, "deployment", true);
  th(f, "phase", true);
  th(f, "kind", true);
  th(f, "load", false);
  for (size_t i = 0; i < sizeof head / sizeof head[0]; i++) th(f, head[i], false);
  fputs("</tr>\n", f);
  for (int d = 0; d < r->n_deps; d++) {
    for (int i = 0; i < r->n_phases; i++) {
      const rq_phase *ph = &r->phases[i];
      if (ph->dep != d) continue;
      char load[48];
      phase_load(ph, load, sizeof load);
      fputs("<tr>", f);
      td_text(f, r->deps[d].label);
      td_text(f, ph->name);
      td_text(f, ph->kind);
      td_text(f, load);
      phase_cells(f, c, r, r->deps[d].id, ph->id);
      fputs("</tr>\n", f);
    }
    fputs("<tr class=\"all\">", f);
    td_text(f, r->deps[d].label);
    td_text(f, "all phases");
    td_text(f, "");
    td_text(f, "");
    phase_cells(f, c, r, r->deps[d].id, 0);
    fputs("</tr>\n", f);
  }
  fputs("</table>\n", f);
}

// What one errors_<kind> count means, for the table's third column ("" when the kind is a
// failure's reason, which names itself).
static const char *error_kind_means(const char *kind) {
  if (!strcmp(kind, "timeout")) return "timed out while slow (on a live replica, or waiting)";
  if (!strcmp(kind, "timeout_replica_lost"))
    return "timed out after its replica was lost, with nothing retrying it: lost";
  return "failed";
}

static bool error_row(void *ud, const char *label, const char *kind, double n) {
  FILE *f = ud;
  fputs("<tr>", f);
  td_text(f, label);
  td_text(f, kind);
  td_text(f, error_kind_means(kind));
  td_num(f, n);
  fputs("</tr>\n", f);
  return true;
}

// The requests that did not complete, by kind: failures by reason, timeouts by cause.
static void run_errors(FILE *f, rp_ctx *c, const rq_run *r) {
  fputs("<h3>Requests that did not complete</h3>\n<table>\n<tr>", f);
  th(f, "deployment", true);
  th(f, "kind", true);
  th(f, "what happened", true);
  th(f, "requests", false);
  fputs("</tr>\n", f);
  long before = ftell(f);
  sc_error e = {{0}};
  rq_error_kinds(c->db, r->id, error_row, f, &e);
  if (ftell(f) == before) fputs("<tr><td colspan=\"4\">none</td></tr>\n", f);
  fputs("</table>\n", f);
}

static void run_classes(FILE *f, rp_ctx *c, const rq_run *r) {
  if (!r->n_classes) return;
  fputs("<h3>TTFT p95 (ms) per prompt class</h3>\n<table>\n<tr>", f);
  th(f, "deployment", true);
  th(f, "phase", true);
  for (int k = 0; k < r->n_classes; k++) th(f, r->classes[k], false);
  fputs("</tr>\n", f);
  for (int d = 0; d < r->n_deps; d++) {
    for (int i = 0; i <= r->n_phases; i++) { // i == n_phases: the deployment pooled
      const rq_phase *ph = i < r->n_phases ? &r->phases[i] : NULL;
      if (ph && ph->dep != d) continue;
      fputs(ph ? "<tr>" : "<tr class=\"all\">", f);
      td_text(f, r->deps[d].label);
      td_text(f, ph ? ph->name : "all phases");
      for (int k = 0; k < r->n_classes; k++)
        td_num(f, rp_metric(c, r, r->deps[d].id, ph ? ph->id : 0, r->classes[k], "ttft_p95_ms"));
      fputs("</tr>\n", f);
    }
  }
  fputs("</table>\n", f);
}

static void td_delta_ms(FILE *f, int64_t from_ns, int64_t to_ns) {
  td_num(f, to_ns >= 0 ? round((double)(to_ns - from_ns) / 1e5) / 10 : NAN);
}

static void run_faults(FILE *f, const rq_run *r) {
  if (!r->n_faults) return;
  fputs("<h3>Faults</h3>\n<table>\n<tr>", f);
  static const char *const head[] = {"injected (s)", "detected (s)",  "recovered (s)",
                                     "to detect (ms)", "to recover (ms)", "requests affected"};
  th(f, "deployment", true);
  th(f, "kind", true);
  th(f, "target", true);
  for (size_t i = 0; i < sizeof head / sizeof head[0]; i++) th(f, head[i], false);
  th(f, "before", true);
  th(f, "during", true);
  th(f, "after", true);
  th(f, "detail", true);
  fputs("</tr>\n", f);
  for (int i = 0; i < r->n_faults; i++) {
    const rq_fault *ft = &r->faults[i];
    char buf[48];
    fputs("<tr>", f);
    td_text(f, ft->dep >= 0 ? r->deps[ft->dep].label : "(run)");
    td_text(f, ft->kind);
    td_text(f, ft->target);
    int64_t at[3] = {ft->injected_ns, ft->detected_ns, ft->recovered_ns};
    for (int k = 0; k < 3; k++) {
      rp_fmt_s(at[k], buf, sizeof buf);
      fprintf(f, "<td>%s</td>", at[k] < 0 ? "never" : buf);
    }
    td_delta_ms(f, ft->injected_ns, ft->detected_ns);
    td_delta_ms(f, ft->injected_ns, ft->recovered_ns);
    td_num(f, ft->affected >= 0 ? ft->affected : NAN);
    for (int w = 0; w < 3; w++) td_text(f, ft->window[w]);
    td_text(f, ft->detail);
    fputs("</tr>\n", f);
  }
  fputs("</table>\n", f);
}

// --- predicted vs measured

// An error cell is highlighted when |error| exceeds this fraction.
static const double cmp_flag = 0.10;

static void cmp_table(FILE *f, const report_cmp_pair *p, bool phases) {
  fputs("<table>\n<tr>", f);
  th(f, "deployment", true);
  if (phases) th(f, "phase", true);
  th(f, "metric", true);
  th(f, "predicted", false);
  th(f, "measured", false);
  th(f, "error", false);
  fputs("</tr>\n", f);
  for (int i = 0; i < p->n_rows; i++) {
    const report_cmp_row *r = &p->rows[i];
    if ((r->phase[0] != 0) != phases) continue;
    char pv[48], mv[48], e[32];
    rp_fmt_metric(r->metric, r->predicted, pv, sizeof pv);
    rp_fmt_metric(r->metric, r->measured, mv, sizeof mv);
    rp_fmt_error(r->error, e, sizeof e);
    fputs("<tr>", f);
    td_text(f, r->label);
    if (phases) td_text(f, r->phase);
    td_text(f, r->metric);
    fputs("<td>", f);
    esc(f, pv);
    fputs("</td><td>", f);
    esc(f, mv);
    fprintf(f, "</td><td%s>%s</td></tr>\n", fabs(r->error) > cmp_flag ? " class=\"off\"" : "",
            e);
  }
  fputs("</table>\n", f);
}

// The real runs of a scenario against each other: one line per ordered pair, the mean
// |difference| per summarised metric, and the min-max over the pairs.
static void floor_table(FILE *f, const report_cmp_floor *fl) {
  if (!fl->n_pairs) return;
  const char *names[RP_CMP_SUMMARY_MAX], *shorts[RP_CMP_SUMMARY_MAX];
  int m = rp_cmp_summary_metrics(&fl->pairs[0], names, shorts);
  fputs("<h4>Real runs against each other: ", f);
  esc(f, fl->scenario);
  fputs("</h4>\n<p>Each real run as if it predicted another: the mean |difference| over the "
        "deployments, as the errors above are computed. A prediction cannot be expected to "
        "come closer to a real run than the real runs come to each other.</p>\n<table>\n<tr>",
        f);
  th(f, "runs", true);
  for (int k = 0; k < m; k++) th(f, shorts[k], false);
  fputs("</tr>\n", f);
  for (int i = 0; i < fl->n_pairs; i++) {
    const report_cmp_pair *p = &fl->pairs[i];
    fprintf(f, "<tr><td class=\"t\">run %lld as run %lld</td>", (long long)p->predicted_run,
            (long long)p->measured_run);
    char cell[48];
    for (int k = 0; k < m; k++) {
      rp_fmt_mean_abs(p, names[k], cell, sizeof cell);
      fprintf(f, "<td>%s</td>", cell);
    }
    fputs("</tr>\n", f);
  }
  fputs("<tr><td class=\"t\">min-max</td>", f);
  char cell[48];
  for (int k = 0; k < m; k++) {
    rp_fmt_floor_range(fl, names[k], cell, sizeof cell);
    fprintf(f, "<td>%s</td>", cell);
  }
  fputs("</tr>\n</table>\n", f);
}

static void cmp_section(FILE *f, const report_comparison *cmp) {
  if (!cmp->n_pairs) return;
  fputs("<section id=\"compare\">\n<h2>Predicted vs measured</h2>\n<p>Each simulated run "
        "(the prediction) against each real run (the measurement) of the same scenario, "
        "deployment by deployment: error = (predicted - measured) / measured; errors beyond "
        "&plusmn;10% are highlighted.</p>\n",
        f);
  for (int i = 0; i < cmp->n_pairs; i++) {
    const report_cmp_pair *p = &cmp->pairs[i];
    fprintf(f, "<h3>Run %lld (sim) vs run %lld (real): ", (long long)p->predicted_run,
            (long long)p->measured_run);
    esc(f, p->scenario);
    fputs("</h3>\n", f);
    if (!p->n_deployments) {
      fputs("<p>No deployment label is in both runs.</p>\n", f);
      continue;
    }
    cmp_table(f, p, false);
    bool has_phases = false;
    for (int k = 0; k < p->n_rows; k++) has_phases |= p->rows[k].phase[0] != 0;
    if (has_phases) {
      fputs("<h4>Per phase</h4>\n", f);
      cmp_table(f, p, true);
    }
    char line[512];
    rp_cmp_summary(p, "mean |error|:", line, sizeof line);
    fputs("<p class=\"summary\">", f);
    esc(f, line);
    fputs("</p>\n", f);
    const report_cmp_floor *fl = rp_cmp_floor_after(cmp, i);
    if (fl) floor_table(f, fl);
  }
  fputs("</section>\n", f);
}

// --- plots

static void plot_figure(FILE *f, const char *dir, const rp_plot *p) {
  fputs("<figure>\n<h3>", f);
  esc(f, p->title);
  fputs("</h3>\n", f);
  if (p->has_png) {
    size_t n = 0;
    char svg[96];
    snprintf(svg, sizeof svg, "%s.svg", p->name);
    unsigned char *data = p->has_svg ? slurp(dir, svg, &n) : NULL;
    fprintf(f, "<a href=\"%s.png\">", p->name);
    if (data) {
      fputs("<img alt=\"", f);
      esc(f, p->title);
      fputs("\" src=\"data:image/svg+xml;base64,", f);
      put_base64(f, data, n);
      fputs("\">", f);
    } else {
      fprintf(f, "<img alt=\"%s\" src=\"%s.png\">", p->name, p->name);
    }
    fputs("</a>\n", f);
    free(data);
  }
  if (p->note[0]) {
    fputs("<p class=\"note\">", f);
    esc(f, p->note);
    fputs("</p>\n", f);
  }
  if (p->written) {
    fputs("<figcaption>", f);
    if (p->has_png) fprintf(f, "PNG: <a href=\"%s.png\">%s.png</a>; ", p->name, p->name);
    fprintf(f,
            "data: <a href=\"%s.dat\">%s.dat</a>; gnuplot script: <a href=\"%s.gp\">%s.gp</a> "
            "(run <code>gnuplot %s.gp</code> in this directory to draw it)</figcaption>\n",
            p->name, p->name, p->name, p->name, p->name);
  }
  fputs("</figure>\n", f);
}

// --- the page

sc_status rp_html_write(rp_ctx *c, const char *dir, const rp_plot *plots, int n_plots,
                        const report_result *res, sc_error *err) {
  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s/index.html", dir) >= (int)sizeof path)
    return sc_fail(err, SC_INVALID, "output path too long: %s/index.html", dir);
  report_comparison cmp;
  SC_TRY(rp_compare(c, &cmp, err));
  FILE *f = fopen(path, "w");
  if (!f) {
    report_comparison_free(&cmp);
    return sc_fail(err, SC_IO, "cannot write %s: %s", path, strerror(errno));
  }

  const rq_run *first = &c->runs[0];
  fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>", f);
  fputs("shardcheck: ", f);
  esc(f, first->scenario);
  fputs("</title>\n<style>\n", f);
  fputs(css, f);
  fputs("</style>\n</head>\n<body>\n<h1>shardcheck report: ", f);
  esc(f, first->scenario);
  fputs("</h1>\n<p>", f);
  fputs(c->n_runs > 1 ? "runs" : "run", f);
  for (int i = 0; i < c->n_runs; i++)
    fprintf(f, "%s%lld", i ? ", " : " ", (long long)c->runs[i].id);
  fputs(" of the results database</p>\n", f);
  if (res->plots_skipped) {
    fputs("<p class=\"note\">Plots skipped: ", f);
    esc(f, res->why);
    fputs(". The data files, scripts and tables are complete.</p>\n", f);
  }
  cmp_section(f, &cmp);
  report_comparison_free(&cmp);

  for (int i = 0; i < c->n_runs; i++) {
    const rq_run *r = &c->runs[i];
    fprintf(f, "<section id=\"run-%lld\">\n<h2>Run %lld: ", (long long)r->id, (long long)r->id);
    esc(f, r->scenario);
    fputs("</h2>\n", f);
    run_meta(f, r);
    run_verdict(f, r);
    run_scaling(f, c, r);
    run_phases(f, c, r);
    run_classes(f, c, r);
    run_errors(f, c, r);
    run_faults(f, r);
    fputs("</section>\n", f);
  }

  fputs("<section id=\"plots\">\n<h2>Plots</h2>\n", f);
  for (int i = 0; i < n_plots; i++) plot_figure(f, dir, &plots[i]);
  fputs("</section>\n", f);

  fputs("<section id=\"scenario\">\n<h2>Scenario</h2>\n", f);
  for (int i = 0; i < c->n_runs; i++) {
    const rq_run *r = &c->runs[i];
    if (c->n_runs > 1) fprintf(f, "<h3>Run %lld</h3>\n", (long long)r->id);
    fputs("<pre>", f);
    esc(f, r->scenario_text);
    fputs("</pre>\n", f);
  }
  fputs("</section>\n</body>\n</html>\n", f);

  bool bad = ferror(f) != 0;
  if (fclose(f) != 0) bad = true;
  return bad ? sc_fail(err, SC_IO, "writing %s failed", path) : SC_OK;
}
