// Predicted vs measured: pairs a sim run (the prediction) with a real run (the measurement) of
// the same scenario and compares their metric rows deployment by deployment and phase by phase,
// and compares the scenario's real runs with each other the same way (the floor: how close one
// measurement comes to another); report_compare, report_print_comparison (the terminal tables)
// and the helpers the HTML page shares (rp_compare, rp_fmt_error, rp_cmp_summary,
// rp_cmp_floor_summary).
//
// Nothing here computes a metric: both sides are the stored rows (docs/metrics.md); the only
// arithmetic is the relative error and its mean. Loading runs is reports/report.c (rq_run_load),
// the HTML section reports/report_html.c.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "reports/report_impl.h"

// --- what is compared

typedef struct cmp_metric {
  const char *name;        // metric row name
  const char *short_name;  // in the summary line; NULL: not summarised (the prediction's own)
  bool optional;           // listed only when either run has a value; summarised last
} cmp_metric;

// The pooled deployment rows, in table order. The sensitivities (`run --sensitivity`) are the
// sim run's only: how far its latencies move per price change, beside their errors.
static const cmp_metric pooled_metrics[] = {
    {"ttft_mean_ms", "TTFT", false},
    {"ttft_p95_ms", "TTFT p95", true},
    {"tpot_mean_ms", "TPOT", false},
    {"tpot_p95_ms", "TPOT p95", true},
    {"e2el_mean_ms", "E2EL", false},
    {"e2el_p95_ms", "E2EL p95", true},
    {"output_tok_s", "output tok/s", false},
    {"busy_frac", "busy", true},
    {"ttft_sensitivity", NULL, true},
    {"tpot_sensitivity", NULL, true},
};
enum { N_POOLED = sizeof pooled_metrics / sizeof pooled_metrics[0] };
_Static_assert((int)N_POOLED <= (int)RP_CMP_SUMMARY_MAX,
               "RP_CMP_SUMMARY_MAX holds every summarised metric");

// The per-phase rows.
static const char *const phase_metrics[] = {"ttft_mean_ms", "tpot_mean_ms"};
enum { N_PHASE = sizeof phase_metrics / sizeof phase_metrics[0] };

static double rel_error(double predicted, double measured) {
  if (isnan(predicted) || isnan(measured) || measured == 0) return NAN;
  return (predicted - measured) / measured;
}

// --- building the pairs

typedef struct pair_builder {
  report_cmp_pair *p;
  int cap;                 // rows allocated in p->rows
} pair_builder;

static bool add_row(pair_builder *b, const char *label, const char *phase, const char *metric,
                    double predicted, double measured) {
  report_cmp_pair *p = b->p;
  if (!rp_grow((void **)&p->rows, p->n_rows, &b->cap, sizeof *p->rows)) return false;
  report_cmp_row *r = &p->rows[p->n_rows++];
  memset(r, 0, sizeof *r);
  snprintf(r->label, sizeof r->label, "%s", label);
  snprintf(r->phase, sizeof r->phase, "%s", phase);
  snprintf(r->metric, sizeof r->metric, "%s", metric);
  r->predicted = predicted;
  r->measured = measured;
  r->error = rel_error(predicted, measured);
  return true;
}

// The index in r->deps of the deployment labelled label; -1 when none is.
static int dep_by_label(const rq_run *r, const char *label) {
  for (int i = 0; i < r->n_deps; i++)
    if (!strcmp(r->deps[i].label, label)) return i;
  return -1;
}

// The phase of m's deployment mdep that matches phase pi of p: the same name and, among phases
// of that name within the deployment, the same occurrence (a ramp's steps have distinct names;
// two phases both named "hold" pair first with first). NULL when m has none.
static const rq_phase *matching_phase(const rq_run *p, int pi, const rq_run *m, int mdep) {
  const rq_phase *ph = &p->phases[pi];
  int k = 0;
  for (int i = 0; i < pi; i++)
    if (p->phases[i].dep == ph->dep && !strcmp(p->phases[i].name, ph->name)) k++;
  for (int i = 0; i < m->n_phases; i++) {
    const rq_phase *q = &m->phases[i];
    if (q->dep == mdep && !strcmp(q->name, ph->name) && k-- == 0) return q;
  }
  return NULL;
}

// Fills b->p (zeroed, ids and scenario set) with the rows of sim run p against real run m.
static bool build_pair(rp_ctx *c, const rq_run *p, const rq_run *m, pair_builder *b) {
  for (int d = 0; d < p->n_deps; d++) {
    const rq_deployment *pd = &p->deps[d];
    int md = dep_by_label(m, pd->label);
    if (md < 0) continue;
    b->p->n_deployments++;
    for (int k = 0; k < N_POOLED; k++) {
      const cmp_metric *cm = &pooled_metrics[k];
      double pv = rp_metric(c, p, pd->id, 0, NULL, cm->name);
      double mv = rp_metric(c, m, m->deps[md].id, 0, NULL, cm->name);
      if (cm->optional && isnan(pv) && isnan(mv)) continue;
      if (!add_row(b, pd->label, "", cm->name, pv, mv)) return false;
    }
  }
  for (int d = 0; d < p->n_deps; d++) {
    const rq_deployment *pd = &p->deps[d];
    int md = dep_by_label(m, pd->label);
    if (md < 0) continue;
    for (int i = 0; i < p->n_phases; i++) {
      if (p->phases[i].dep != d) continue;
      const rq_phase *mp = matching_phase(p, i, m, md);
      if (!mp) continue;
      for (int k = 0; k < N_PHASE; k++) {
        double pv = rp_metric(c, p, pd->id, p->phases[i].id, NULL, phase_metrics[k]);
        double mv = rp_metric(c, m, m->deps[md].id, mp->id, NULL, phase_metrics[k]);
        if (!add_row(b, pd->label, p->phases[i].name, phase_metrics[k], pv, mv)) return false;
      }
    }
  }
  return true;
}

static bool pair_seen(const report_comparison *out, int64_t p, int64_t m) {
  for (int i = 0; i < out->n_pairs; i++)
    if (out->pairs[i].predicted_run == p && out->pairs[i].measured_run == m) return true;
  return false;
}

// Starts *pr as run p against run m (rows built by build_pair); false when out of memory.
static bool make_pair(rp_ctx *c, const rq_run *p, const rq_run *m, report_cmp_pair *pr) {
  memset(pr, 0, sizeof *pr);
  pr->predicted_run = p->id;
  pr->measured_run = m->id;
  snprintf(pr->scenario, sizeof pr->scenario, "%s", p->scenario);
  pair_builder b = {pr, 0};
  return build_pair(c, p, m, &b);
}

// The index in c->floors of scenario's floor; -1 when it has none.
static int floor_of(const report_comparison *c, const char *scenario) {
  for (int i = 0; i < c->n_floors; i++)
    if (!strcmp(c->floors[i].scenario, scenario)) return i;
  return -1;
}

const report_cmp_floor *rp_cmp_floor_after(const report_comparison *c, int i) {
  const char *scenario = c->pairs[i].scenario;
  for (int k = i + 1; k < c->n_pairs; k++)
    if (!strcmp(c->pairs[k].scenario, scenario)) return NULL;
  int fi = floor_of(c, scenario);
  return fi < 0 ? NULL : &c->floors[fi];
}

// Adds the floor of `scenario` to out: its real runs in c, each once, and every ordered pair of
// them. Nothing when it has fewer than two. false: out of memory.
static bool add_floor(rp_ctx *c, const char *scenario, report_comparison *out, int *cap) {
  int *idx = malloc(sizeof(int) * (size_t)c->n_runs), n = 0;
  if (!idx) return false;
  for (int i = 0; i < c->n_runs; i++) {
    const rq_run *r = &c->runs[i];
    if (strcmp(r->mode, "real") != 0 || strcmp(r->scenario, scenario) != 0) continue;
    bool dup = false;
    for (int k = 0; k < n; k++) dup |= c->runs[idx[k]].id == r->id;
    if (!dup) idx[n++] = i;
  }
  if (n < 2) {
    free(idx);
    return true;
  }
  if (!rp_grow((void **)&out->floors, out->n_floors, cap, sizeof *out->floors)) {
    free(idx);
    return false;
  }
  report_cmp_floor *f = &out->floors[out->n_floors++];
  memset(f, 0, sizeof *f);
  snprintf(f->scenario, sizeof f->scenario, "%s", scenario);
  f->runs = malloc(sizeof *f->runs * (size_t)n);
  f->pairs = calloc((size_t)(n * (n - 1)), sizeof *f->pairs);
  bool ok = f->runs && f->pairs;
  for (int a = 0; ok && a < n; a++) {
    f->runs[f->n_runs++] = c->runs[idx[a]].id;
    for (int b = 0; ok && b < n; b++)
      if (a != b) ok = make_pair(c, &c->runs[idx[a]], &c->runs[idx[b]], &f->pairs[f->n_pairs++]);
  }
  free(idx);
  return ok;
}

sc_status rp_compare(rp_ctx *c, report_comparison *out, sc_error *err) {
  memset(out, 0, sizeof *out);
  int cap = 0;
  for (int i = 0; i < c->n_runs; i++) {
    const rq_run *p = &c->runs[i];
    if (strcmp(p->mode, "sim") != 0) continue;
    for (int j = 0; j < c->n_runs; j++) {
      const rq_run *m = &c->runs[j];
      if (strcmp(m->mode, "real") != 0 || strcmp(m->scenario, p->scenario) != 0 ||
          pair_seen(out, p->id, m->id))
        continue;
      if (!rp_grow((void **)&out->pairs, out->n_pairs, &cap, sizeof *out->pairs)) {
        report_comparison_free(out);
        return sc_fail(err, SC_OOM, "out of memory comparing runs");
      }
      if (!make_pair(c, p, m, &out->pairs[out->n_pairs++])) {
        report_comparison_free(out);
        return sc_fail(err, SC_OOM, "out of memory comparing run %lld with run %lld",
                       (long long)p->id, (long long)m->id);
      }
    }
  }
  int fcap = 0;
  for (int i = 0; i < out->n_pairs; i++) {
    if (floor_of(out, out->pairs[i].scenario) >= 0) continue;
    if (!add_floor(c, out->pairs[i].scenario, out, &fcap)) {
      report_comparison_free(out);
      return sc_fail(err, SC_OOM, "out of memory comparing the real runs of %s",
                     out->pairs[i].scenario);
    }
  }
  return SC_OK;
}

sc_status report_compare(sqlite3 *db, const int64_t *run_ids, int n_runs,
                         report_comparison *out, sc_error *err) {
  if (out) memset(out, 0, sizeof *out);
  if (!db || !out || n_runs < 0 || (n_runs > 0 && !run_ids))
    return sc_fail(err, SC_INVALID, "report_compare: no database or a bad run list");
  if (n_runs == 0) return SC_OK;
  rp_ctx c = {.db = db};
  c.runs = calloc((size_t)n_runs, sizeof *c.runs);
  if (!c.runs) return sc_fail(err, SC_OOM, "out of memory for %d runs", n_runs);
  sc_status s = SC_OK;
  for (int i = 0; i < n_runs && s == SC_OK; i++) {
    s = rq_run_load(db, run_ids[i], &c.runs[i], err);
    if (s == SC_OK) c.n_runs++;
  }
  if (s == SC_OK) s = rp_compare(&c, out, err);
  for (int i = 0; i < c.n_runs; i++) rq_run_free(&c.runs[i]);
  free(c.runs);
  rq_metric_cache_free(&c.metric);
  return s;
}

void report_comparison_free(report_comparison *c) {
  if (!c) return;
  for (int i = 0; i < c->n_pairs; i++) free(c->pairs[i].rows);
  free(c->pairs);
  for (int i = 0; i < c->n_floors; i++) {
    report_cmp_floor *f = &c->floors[i];
    for (int k = 0; k < f->n_pairs; k++) free(f->pairs[k].rows);
    free(f->pairs);
    free(f->runs);
  }
  free(c->floors);
  memset(c, 0, sizeof *c);
}

double report_cmp_mean_abs_error(const report_cmp_pair *p, const char *name, int *n) {
  double sum = 0;
  int k = 0;
  for (int i = 0; i < p->n_rows; i++) {
    const report_cmp_row *r = &p->rows[i];
    if (r->phase[0] || strcmp(r->metric, name) != 0 || isnan(r->error)) continue;
    sum += fabs(r->error);
    k++;
  }
  if (n) *n = k;
  return k ? sum / k : NAN;
}

int report_cmp_floor_range(const report_cmp_floor *f, const char *name, double *lo, double *hi) {
  *lo = *hi = NAN;
  int k = 0;
  for (int i = 0; i < f->n_pairs; i++) {
    double e = report_cmp_mean_abs_error(&f->pairs[i], name, NULL);
    if (isnan(e)) continue;
    *lo = k ? fmin(*lo, e) : e;
    *hi = k ? fmax(*hi, e) : e;
    k++;
  }
  return k;
}

// --- formatting

void rp_fmt_error(double error, char *buf, size_t n) {
  if (isnan(error)) snprintf(buf, n, "-");
  else snprintf(buf, n, "%+.1f%%", error * 100);
}

// Whether the pair has a pooled row of metric name.
static bool has_pooled(const report_cmp_pair *p, const char *name) {
  for (int i = 0; i < p->n_rows; i++)
    if (!p->rows[i].phase[0] && !strcmp(p->rows[i].metric, name)) return true;
  return false;
}

int rp_cmp_summary_metrics(const report_cmp_pair *p, const char **names,
                           const char **short_names) {
  int n = 0;
  for (int pass = 0; pass < 2; pass++) // the means first, then the p95s and busy
    for (int k = 0; k < N_POOLED; k++) {
      const cmp_metric *cm = &pooled_metrics[k];
      if (!cm->short_name || cm->optional != (pass == 1) || !has_pooled(p, cm->name)) continue;
      names[n] = cm->name;
      short_names[n++] = cm->short_name;
    }
  return n;
}

// A summary line: head, then for each metric of rp_cmp_summary_metrics its short name and the
// text value(f, name) gives, then " (TAILn deployments)".
static void summary_line(const report_cmp_pair *p, const void *f,
                         void (*value)(const void *f, const char *name, char *num, size_t n),
                         const char *head, const char *tail, char *buf, size_t n) {
  const char *names[RP_CMP_SUMMARY_MAX], *shorts[RP_CMP_SUMMARY_MAX];
  int m = rp_cmp_summary_metrics(p, names, shorts);
  size_t len = (size_t)snprintf(buf, n, "%s", head);
  for (int k = 0; k < m && len < n; k++) {
    char num[48];
    value(f, names[k], num, sizeof num);
    len += (size_t)snprintf(buf + len, n - len, "%s %s %s", k ? "," : "", shorts[k], num);
  }
  if (len < n)
    snprintf(buf + len, n - len, " (%s%d deployment%s)", tail, p->n_deployments,
             p->n_deployments == 1 ? "" : "s");
}

void rp_fmt_mean_abs(const report_cmp_pair *p, const char *name, char *buf, size_t n) {
  double e = report_cmp_mean_abs_error(p, name, NULL);
  if (isnan(e)) snprintf(buf, n, "-");
  else snprintf(buf, n, "%.1f%%", e * 100);
}

void rp_fmt_floor_range(const report_cmp_floor *f, const char *name, char *buf, size_t n) {
  double lo, hi;
  if (!report_cmp_floor_range(f, name, &lo, &hi)) snprintf(buf, n, "-");
  else snprintf(buf, n, "%.1f-%.1f%%", lo * 100, hi * 100);
}

static void pair_value(const void *p, const char *name, char *num, size_t n) {
  rp_fmt_mean_abs(p, name, num, n);
}

static void floor_value(const void *f, const char *name, char *num, size_t n) {
  rp_fmt_floor_range(f, name, num, n);
}

void rp_cmp_summary(const report_cmp_pair *p, const char *head, char *buf, size_t n) {
  summary_line(p, p, pair_value, head, "over ", buf, n);
}

void rp_cmp_floor_summary(const report_cmp_floor *f, char *buf, size_t n) {
  char head[96];
  snprintf(head, sizeof head, "mean |difference| over the %d pairs:", f->n_pairs);
  if (f->n_pairs) summary_line(&f->pairs[0], f, floor_value, head, "min-max; over ", buf, n);
  else snprintf(buf, n, "%s -", head);
}

// --- the terminal tables

enum { CCOLS = 6, CCELL = 80 };

// The cells of one table line: the header (r NULL) or row r.
static void row_cells(const report_cmp_row *r, char cells[CCOLS][CCELL]) {
  static const char *const head[CCOLS] = {"deployment", "phase",    "metric",
                                          "predicted",  "measured", "error"};
  if (!r) {
    for (int k = 0; k < CCOLS; k++) snprintf(cells[k], CCELL, "%s", head[k]);
    return;
  }
  snprintf(cells[0], CCELL, "%s", r->label);
  snprintf(cells[1], CCELL, "%s", r->phase);
  snprintf(cells[2], CCELL, "%s", r->metric);
  rp_fmt_metric(r->metric, r->predicted, cells[3], CCELL);
  rp_fmt_metric(r->metric, r->measured, cells[4], CCELL);
  rp_fmt_error(r->error, cells[5], CCELL);
}

// Prints the rows of p that are pooled (phases false) or per phase (phases true) as one table
// under a header line: widths from the widest cell (a first pass formats every cell to measure
// it), text columns left-aligned, numbers right-aligned; the phase column only per phase.
static void print_table(const report_cmp_pair *p, bool phases, FILE *f) {
  char cells[CCOLS][CCELL];
  int w[CCOLS] = {0};
  for (int pass = 0; pass < 2; pass++)
    for (int i = -1; i < p->n_rows; i++) { // -1: the header
      const report_cmp_row *r = i < 0 ? NULL : &p->rows[i];
      if (r && (r->phase[0] != 0) != phases) continue;
      row_cells(r, cells);
      if (pass == 0) {
        for (int k = 0; k < CCOLS; k++) {
          int len = (int)strlen(cells[k]);
          if (len > w[k]) w[k] = len;
        }
        continue;
      }
      fprintf(f, "%-*s  ", w[0], cells[0]);
      if (phases) fprintf(f, "%-*s  ", w[1], cells[1]);
      fprintf(f, "%-*s  %*s  %*s  %*s\n", w[2], cells[2], w[3], cells[3], w[4], cells[4], w[5],
              cells[5]);
    }
}

// The floor on the terminal: a title naming the real runs, each ordered pair's summary line,
// the range line.
static void print_floor(const report_cmp_floor *fl, FILE *f) {
  fprintf(f, "\nreal runs against each other: %s, runs", fl->scenario);
  for (int i = 0; i < fl->n_runs; i++)
    fprintf(f, "%s %lld", i ? (i == fl->n_runs - 1 ? " and" : ",") : "", (long long)fl->runs[i]);
  fputs(" (each as if it predicted another: a prediction is not expected to come closer)\n", f);
  char line[512];
  for (int i = 0; i < fl->n_pairs; i++) {
    const report_cmp_pair *p = &fl->pairs[i];
    char head[96];
    snprintf(head, sizeof head, "run %lld as run %lld: mean |difference|:",
             (long long)p->predicted_run, (long long)p->measured_run);
    rp_cmp_summary(p, head, line, sizeof line);
    fprintf(f, "%s\n", line);
  }
  rp_cmp_floor_summary(fl, line, sizeof line);
  fprintf(f, "%s\n", line);
}

void report_print_comparison(const report_comparison *c, FILE *f) {
  if (!c) return;
  for (int i = 0; i < c->n_pairs; i++) {
    const report_cmp_pair *p = &c->pairs[i];
    fprintf(f, "%spredicted vs measured: %s, run %lld (sim) vs run %lld (real)\n", i ? "\n" : "",
            p->scenario, (long long)p->predicted_run, (long long)p->measured_run);
    if (!p->n_deployments) {
      fprintf(f, "no deployment label is in both runs\n");
      continue;
    }
    print_table(p, false, f);
    bool has_phases = false;
    for (int k = 0; k < p->n_rows; k++) has_phases |= p->rows[k].phase[0] != 0;
    if (has_phases) {
      fputc('\n', f);
      print_table(p, true, f);
    }
    char line[512];
    rp_cmp_summary(p, "mean |error|:", line, sizeof line);
    fprintf(f, "%s\n", line);
    const report_cmp_floor *fl = rp_cmp_floor_after(c, i);
    if (fl) print_floor(fl, f);
  }
}
