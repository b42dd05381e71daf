// Reports over a results database: report_write (plots + index.html), report_print_verdicts
// (the terminal table), and the formatting helpers the writers share.
//
// A run's rows are read by reports/query.c (rq_run_load, rq_metric). The plots (data, gnuplot scripts, running gnuplot) are reports/report_plot.c, the page
// reports/report_html.c, JUnit reports/report_junit.c; the shared types are
// reports/report_impl.h. Nothing here computes a metric: every number comes from the metric and
// verdict rows the runner stored (docs/metrics.md says how they are computed).
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "reports/metrics.h"
#include "reports/report_impl.h"

// --- helpers the writers share

bool rp_grow(void **arr, int n, int *cap, size_t elem) {
  if (n < *cap) return true;
  int nc = *cap ? *cap * 2 : 8;
  void *p = realloc(*arr, (size_t)nc * elem);
  if (!p) return false;
  *arr = p;
  *cap = nc;
  return true;
}

double rp_metric(rp_ctx *c, const rq_run *r, int64_t dep_id, int64_t phase_id, const char *cls,
                 const char *name) {
  return rq_metric(c->db, &c->metric, r->id, dep_id, phase_id, cls, name);
}

// --- formatting

void rp_fmt_num(double v, char *buf, size_t n) {
  if (isnan(v)) snprintf(buf, n, "-");
  else if (isinf(v)) snprintf(buf, n, "%sinf", v < 0 ? "-" : "");
  else if (v == trunc(v) && fabs(v) < 1e15) snprintf(buf, n, "%.0f", v);
  else if (fabs(v) >= 1000) snprintf(buf, n, "%.0f", v);
  else snprintf(buf, n, "%.4g", v);
}

void rp_fmt_metric(const char *name, double v, char *buf, size_t n) {
  rp_fmt_num(v, buf, n);
  const mt_metric_info *m = mt_metric_find(mt_metric_base(name)); // "short:ttft_p95_ms" too
  if (isnan(v) || !m || !strcmp(m->unit, "fraction")) return;
  size_t len = strlen(buf);
  if (len + 1 < n)
    snprintf(buf + len, n - len, "%s%s", strcmp(m->unit, "x") ? " " : "", m->unit);
}

void rp_fmt_s(int64_t ns, char *buf, size_t n) {
  if (ns < 0) snprintf(buf, n, "-");
  else snprintf(buf, n, "%.3f", (double)ns / 1e9);
}

// Length of the valid UTF-8 sequence at s (1..4), or 0 when it is not one.
static int utf8_len(const unsigned char *s) {
  int len = s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 ? 2 : 0;
  if (s[0] >= 0xF5) len = 0;
  for (int i = 1; i < len; i++)
    if ((s[i] & 0xC0) != 0x80) return 0;
  return len;
}

void rp_put_esc(FILE *f, const char *s) {
  if (!s) return;
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    unsigned char ch = *p;
    if (ch >= 0x80) {
      int len = utf8_len(p);
      if (len) fwrite(p, 1, (size_t)len, f);
      else fputc('?', f);
      p += len ? len : 1;
      continue;
    }
    switch (ch) {
    case '&': fputs("&amp;", f); break;
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '"': fputs("&quot;", f); break;
    case '\'': fputs("&#39;", f); break;
    default:
      if (ch >= 0x20 || ch == '\t' || ch == '\n' || ch == '\r') fputc(ch, f);
    }
    p++;
  }
}

sc_status rp_mkdirs(const char *dir, sc_error *err) {
  char path[1100];
  if (!dir || !*dir) return sc_fail(err, SC_INVALID, "no output directory given");
  if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
    return sc_fail(err, SC_INVALID, "output directory path too long: %.64s...", dir);
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(path, 0777) != 0 && errno != EEXIST)
      return sc_fail(err, SC_IO, "cannot create directory %s: %s", path, strerror(errno));
    *p = '/';
  }
  if (mkdir(path, 0777) != 0 && errno != EEXIST)
    return sc_fail(err, SC_IO, "cannot create directory %s: %s", path, strerror(errno));
  struct stat sb;
  if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return sc_fail(err, SC_IO, "%s is not a directory", path);
  if (access(path, W_OK | X_OK) != 0)
    return sc_fail(err, SC_IO, "cannot write into %s: %s", path, strerror(errno));
  return SC_OK;
}

// --- report_write

static void ctx_free(rp_ctx *c) {
  for (int i = 0; i < c->n_runs; i++) rq_run_free(&c->runs[i]);
  free(c->runs);
  rq_metric_cache_free(&c->metric);
  memset(c, 0, sizeof *c);
}

sc_status report_write(sqlite3 *db, const report_options *o, report_result *res, sc_error *err) {
  memset(res, 0, sizeof *res);
  if (!db || !o || !o->out_dir || !*o->out_dir)
    return sc_fail(err, SC_INVALID, "report_write: no database or no output directory");
  if (o->n_runs < 0 || (o->n_runs > 0 && !o->run_ids))
    return sc_fail(err, SC_INVALID, "report_write: bad run list");
  if (snprintf(res->index_path, sizeof res->index_path, "%s/index.html", o->out_dir) >=
      (int)sizeof res->index_path)
    return sc_fail(err, SC_INVALID, "output directory path too long: %.64s...", o->out_dir);

  rp_ctx c = {.db = db};
  int64_t newest = 0;
  const int64_t *ids = o->run_ids;
  int n = o->n_runs;
  if (n == 0) {
    SC_TRY(rq_newest_run(db, &newest, err));
    ids = &newest;
    n = 1;
  }
  c.runs = calloc((size_t)n, sizeof *c.runs);
  if (!c.runs) return sc_fail(err, SC_OOM, "out of memory for %d runs", n);
  sc_status s = SC_OK;
  for (int i = 0; i < n && s == SC_OK; i++) {
    s = rq_run_load(db, ids[i], &c.runs[i], err);
    if (s == SC_OK) c.n_runs++;
  }
  if (s == SC_OK) s = rp_mkdirs(o->out_dir, err);
  rp_plot *plots = NULL;
  int n_plots = 0;
  if (s == SC_OK) s = rp_plots_write(&c, o->out_dir, o->gnuplot, &plots, &n_plots, res, err);
  if (s == SC_OK) s = rp_html_write(&c, o->out_dir, plots, n_plots, res, err);
  free(plots);
  ctx_free(&c);
  return s;
}

// --- report_print_verdicts

enum { VCOLS = 5, VCELL = 80 };

sc_status report_print_verdicts(sqlite3 *db, int64_t run_id, FILE *f, sc_error *err) {
  rq_run r;
  SC_TRY(rq_run_load(db, run_id, &r, err));
  // "running": the runner printing its own table before it closes the run.
  if (strcmp(r.status, "complete") != 0 && strcmp(r.status, "running") != 0)
    fprintf(f, "run %lld is %s%s%s\n", (long long)r.id, r.status[0] ? r.status : "unfinished",
            r.error[0] ? ": " : "", r.error);
  if (r.n_verdicts == 0) {
    fprintf(f, "no SLOs in the scenario\n");
    rq_run_free(&r);
    return SC_OK;
  }
  char(*cells)[VCOLS][VCELL] = calloc((size_t)r.n_verdicts + 1, sizeof *cells);
  if (!cells) {
    rq_run_free(&r);
    return sc_fail(err, SC_OOM, "out of memory for %d verdicts", r.n_verdicts);
  }
  const char *head[VCOLS] = {"deployment", "SLO", "expected", "actual", "result"};
  int w[VCOLS] = {0};
  for (int c = 0; c < VCOLS; c++) {
    snprintf(cells[0][c], VCELL, "%s", head[c]);
  }
  int failed = 0;
  for (int i = 0; i < r.n_verdicts; i++) {
    const rq_verdict *v = &r.verdicts[i];
    char num[48];
    snprintf(cells[i + 1][0], VCELL, "%s", r.deps[v->dep].label);
    snprintf(cells[i + 1][1], VCELL, "%s", v->slo);
    rp_fmt_metric(v->slo, v->expected, num, sizeof num);
    snprintf(cells[i + 1][2], VCELL, "%s %s", v->op, num);
    rp_fmt_metric(v->slo, v->actual, num, sizeof num);
    snprintf(cells[i + 1][3], VCELL, "%s", isnan(v->actual) ? "no data" : num);
    snprintf(cells[i + 1][4], VCELL, "%s", v->pass ? "PASS" : "FAIL");
    failed += !v->pass;
  }
  for (int i = 0; i <= r.n_verdicts; i++)
    for (int c = 0; c < VCOLS; c++) {
      int len = (int)strlen(cells[i][c]);
      if (len > w[c]) w[c] = len;
    }
  for (int i = 0; i <= r.n_verdicts; i++) {
    // Text columns left-aligned, numbers right-aligned; then the verdict's note, if any.
    const char *note = i > 0 ? r.verdicts[i - 1].note : "";
    fprintf(f, "%-*s  %-*s  %*s  %*s  %-*s%s%s\n", w[0], cells[i][0], w[1], cells[i][1], w[2],
            cells[i][2], w[3], cells[i][3], note[0] ? w[4] : 0, cells[i][4], note[0] ? "  " : "",
            note);
  }
  fputc('\n', f);
  if (r.saturated[0])
    fprintf(f, "client saturated: %s: the client sent its requests late against its schedule "
            "(p99 past %.0f ms), so these phases' latencies hold the client's delay\n\n",
            r.saturated, MT_CLIENT_LATE_MS);
  for (int d = 0; d < r.n_deps; d++) {
    int n = 0, bad = 0;
    for (int i = 0; i < r.n_verdicts; i++)
      if (r.verdicts[i].dep == d) {
        n++;
        bad += !r.verdicts[i].pass;
      }
    if (!n) continue;
    fprintf(f, "%s (%d GPU%s): ", r.deps[d].label, r.deps[d].gpus, r.deps[d].gpus == 1 ? "" : "s");
    if (!bad) {
      fprintf(f, "PASS (%d/%d SLOs hold)\n", n, n);
      continue;
    }
    fprintf(f, "FAIL (%d of %d SLOs failed:", bad, n);
    for (int i = 0; i < r.n_verdicts; i++)
      if (r.verdicts[i].dep == d && !r.verdicts[i].pass) fprintf(f, " %s", r.verdicts[i].slo);
    fprintf(f, ")\n");
  }
  if (failed)
    fprintf(f, "verdict: FAIL (%d of %d SLOs failed)\n", failed, r.n_verdicts);
  else
    fprintf(f, "verdict: PASS (%d/%d SLOs hold)\n", r.n_verdicts, r.n_verdicts);
  free(cells);
  rq_run_free(&r);
  return SC_OK;
}
