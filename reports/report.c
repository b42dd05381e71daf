// Reports over a results database: loading a run's rows, report_write (plots + index.html),
// report_print_verdicts (the terminal table), and the formatting helpers the writers share.
//
// The plots (data, gnuplot scripts, running gnuplot) are reports/report_plot.c, the page
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

// --- reading rows

static sc_status db_fail(sqlite3 *db, sc_error *err, const char *what) {
  return sc_fail(err, SC_IO, "reading %s: %s", what, sqlite3_errmsg(db));
}

// Steps st to the end, calling row(ud, st) per row; finalizes st.
static sc_status each_row_of(sqlite3 *db, sqlite3_stmt *st, bool (*row)(void *ud, sqlite3_stmt *st),
                             void *ud, const char *what, sc_error *err) {
  sc_status s = SC_OK;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (!row(ud, st)) {
      s = sc_fail(err, SC_OOM, "out of memory reading %s", what);
      break;
    }
  }
  if (s == SC_OK && rc != SQLITE_DONE) s = db_fail(db, err, what);
  sqlite3_finalize(st);
  return s;
}

sc_status rp_each_row(sqlite3 *db, const char *sql, int64_t run_id,
                      bool (*row)(void *ud, sqlite3_stmt *st), void *ud, const char *what,
                      sc_error *err) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return db_fail(db, err, what);
  sqlite3_bind_int64(st, 1, run_id);
  return each_row_of(db, st, row, ud, what, err);
}

sc_status rp_each_row_text(sqlite3 *db, const char *sql, const char *arg,
                           bool (*row)(void *ud, sqlite3_stmt *st), void *ud, const char *what,
                           sc_error *err) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return db_fail(db, err, what);
  sqlite3_bind_text(st, 1, arg, -1, SQLITE_STATIC);
  return each_row_of(db, st, row, ud, what, err);
}

bool rp_grow(void **arr, int n, int *cap, size_t elem) {
  if (n < *cap) return true;
  int nc = *cap ? *cap * 2 : 8;
  void *p = realloc(*arr, (size_t)nc * elem);
  if (!p) return false;
  *arr = p;
  *cap = nc;
  return true;
}

void rp_col_text(sqlite3_stmt *st, int col, char *dst, size_t n) {
  const unsigned char *t = sqlite3_column_text(st, col);
  snprintf(dst, n, "%s", t ? (const char *)t : "");
}

static char *col_dup(sqlite3_stmt *st, int col) {
  const unsigned char *t = sqlite3_column_text(st, col);
  return strdup(t ? (const char *)t : "");
}

static int64_t col_i64(sqlite3_stmt *st, int col, int64_t if_null) {
  return sqlite3_column_type(st, col) == SQLITE_NULL ? if_null : sqlite3_column_int64(st, col);
}

static double col_f64(sqlite3_stmt *st, int col) {
  return sqlite3_column_type(st, col) == SQLITE_NULL ? NAN : sqlite3_column_double(st, col);
}

int rp_dep_index(const rp_run *r, int64_t dep_id) {
  for (int i = 0; i < r->n_deps; i++)
    if (r->deps[i].id == dep_id) return i;
  return -1;
}

typedef struct loader {
  rp_run *r;
  int cap;
} loader;

static bool row_deployment(void *ud, sqlite3_stmt *st) {
  loader *l = ud;
  rp_run *r = l->r;
  if (!rp_grow((void **)&r->deps, r->n_deps, &l->cap, sizeof *r->deps)) return false;
  rp_deployment *d = &r->deps[r->n_deps++];
  memset(d, 0, sizeof *d);
  d->id = sqlite3_column_int64(st, 0);
  d->idx = sqlite3_column_int(st, 1);
  rp_col_text(st, 2, d->label, sizeof d->label);
  d->tp = sqlite3_column_int(st, 3);
  d->pp = sqlite3_column_int(st, 4);
  d->dp = sqlite3_column_int(st, 5);
  d->gpus = sqlite3_column_int(st, 6);
  d->start_ns = col_i64(st, 7, 0);
  d->end_ns = col_i64(st, 8, -1);
  rp_col_text(st, 9, d->status, sizeof d->status);
  return true;
}

static bool row_phase(void *ud, sqlite3_stmt *st) {
  loader *l = ud;
  rp_run *r = l->r;
  int dep = rp_dep_index(r, sqlite3_column_int64(st, 1));
  if (dep < 0) return true; // a phase of a deployment of another run: not ours to show
  if (!rp_grow((void **)&r->phases, r->n_phases, &l->cap, sizeof *r->phases)) return false;
  rp_phase *p = &r->phases[r->n_phases++];
  memset(p, 0, sizeof *p);
  p->id = sqlite3_column_int64(st, 0);
  p->dep = dep;
  p->idx = sqlite3_column_int(st, 2);
  rp_col_text(st, 3, p->name, sizeof p->name);
  rp_col_text(st, 4, p->kind, sizeof p->kind);
  p->concurrency = (int)col_i64(st, 5, 0);
  double rate = col_f64(st, 6);
  p->rate = isnan(rate) ? 0 : rate;
  p->start_ns = col_i64(st, 7, 0);
  p->end_ns = col_i64(st, 8, -1);
  return true;
}

static bool row_verdict(void *ud, sqlite3_stmt *st) {
  loader *l = ud;
  rp_run *r = l->r;
  int dep = rp_dep_index(r, sqlite3_column_int64(st, 0));
  if (dep < 0) return true;
  if (!rp_grow((void **)&r->verdicts, r->n_verdicts, &l->cap, sizeof *r->verdicts)) return false;
  rp_verdict *v = &r->verdicts[r->n_verdicts++];
  memset(v, 0, sizeof *v);
  v->dep = dep;
  rp_col_text(st, 1, v->slo, sizeof v->slo);
  rp_col_text(st, 2, v->op, sizeof v->op);
  v->expected = col_f64(st, 3);
  v->actual = col_f64(st, 4);
  v->pass = sqlite3_column_int(st, 5) != 0;
  return true;
}

static bool row_fault(void *ud, sqlite3_stmt *st) {
  loader *l = ud;
  rp_run *r = l->r;
  if (!rp_grow((void **)&r->faults, r->n_faults, &l->cap, sizeof *r->faults)) return false;
  rp_fault *f = &r->faults[r->n_faults++];
  memset(f, 0, sizeof *f);
  f->dep = sqlite3_column_type(st, 0) == SQLITE_NULL
               ? -1
               : rp_dep_index(r, sqlite3_column_int64(st, 0));
  rp_col_text(st, 1, f->kind, sizeof f->kind);
  rp_col_text(st, 2, f->target, sizeof f->target);
  rp_col_text(st, 3, f->detail, sizeof f->detail);
  f->injected_ns = col_i64(st, 4, 0);
  f->detected_ns = col_i64(st, 5, -1);
  f->recovered_ns = col_i64(st, 6, -1);
  f->affected = (int)col_i64(st, 7, -1);
  for (int w = 0; w < 3 && sqlite3_column_count(st) > 8 + w; w++)
    rp_col_text(st, 8 + w, f->window[w], sizeof f->window[w]);
  return true;
}

// One window of a fault in a table cell: "TTFT p95 5.7 ms, 2/2 SLOs" or "..., missed
// ttft_p95_ms"; NULL (shown empty) when the window has no rows.
#define FAULT_WINDOW_SQL(W)                                                                     \
  "(SELECT CASE WHEN count(*) = 0 THEN NULL ELSE"                                               \
  " coalesce(printf('TTFT p95 %.1f ms', max(CASE WHEN name = 'ttft_p95_ms' THEN value END)),"   \
  " 'no TTFT') || CASE WHEN count(op) = 0 THEN '' WHEN sum(pass = 0) = 0 THEN"                   \
  " printf(', %d/%d SLOs', count(op), count(op)) ELSE ', missed ' ||"                            \
  " group_concat(CASE WHEN pass = 0 THEN name END, ' ') END END"                               \
  " FROM fault_window w WHERE w.fault_id = f.id AND w.window = '" W "')"

// Whether the database has table name (an older file may lack a newer table).
static bool has_table(sqlite3 *db, const char *name) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
                         -1, &st, NULL) != SQLITE_OK)
    return false;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  bool yes = sqlite3_step(st) == SQLITE_ROW;
  sqlite3_finalize(st);
  return yes;
}

static bool row_class(void *ud, sqlite3_stmt *st) {
  loader *l = ud;
  rp_run *r = l->r;
  if (!rp_grow((void **)&r->classes, r->n_classes, &l->cap, sizeof *r->classes)) return false;
  rp_col_text(st, 0, r->classes[r->n_classes++], sizeof *r->classes);
  return true;
}

sc_status rp_run_load(sqlite3 *db, int64_t id, rp_run *r, sc_error *err) {
  memset(r, 0, sizeof *r);
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db,
                         "SELECT scenario, scenario_path, scenario_text, mode, backend, model, "
                         "git_rev, host, config, started_at, ended_at, status, verdict, error, "
                         "seed, duration_ns FROM run WHERE id = ?1",
                         -1, &st, NULL) != SQLITE_OK)
    return db_fail(db, err, "the run table");
  sqlite3_bind_int64(st, 1, id);
  int rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    sc_status s = rc == SQLITE_DONE ? sc_fail(err, SC_INVALID, "no run %lld in the database",
                                              (long long)id)
                                    : db_fail(db, err, "the run table");
    sqlite3_finalize(st);
    return s;
  }
  r->id = id;
  char **strs[] = {&r->scenario, &r->scenario_path, &r->scenario_text, &r->mode,
                   &r->backend,  &r->model,         &r->git_rev,       &r->host,
                   &r->config,   &r->started_at,    &r->ended_at,      &r->status,
                   &r->verdict,  &r->error};
  bool oom = false;
  for (int i = 0; i < (int)(sizeof strs / sizeof strs[0]); i++)
    oom |= !(*strs[i] = col_dup(st, i));
  r->seed = sqlite3_column_int64(st, 14);
  r->duration_ns = col_i64(st, 15, -1);
  sqlite3_finalize(st);
  if (oom) {
    rp_run_free(r);
    return sc_fail(err, SC_OOM, "out of memory reading run %lld", (long long)id);
  }

  loader l = {r, 0};
  sc_status s = rp_each_row(db,
                         "SELECT id, idx, label, tp, pp, dp, gpus, start_ns, end_ns, status "
                         "FROM deployment WHERE run_id = ?1 ORDER BY idx, id",
                         id, row_deployment, &l, "the deployment table", err);
  if (s == SC_OK) {
    l.cap = 0;
    s = rp_each_row(db,
                 "SELECT p.id, p.deployment_id, p.idx, p.name, p.kind, p.concurrency, p.rate, "
                 "p.start_ns, p.end_ns FROM phase p JOIN deployment d ON d.id = p.deployment_id "
                 "WHERE p.run_id = ?1 ORDER BY d.idx, p.idx, p.id",
                 id, row_phase, &l, "the phase table", err);
  }
  if (s == SC_OK) {
    l.cap = 0;
    s = rp_each_row(db,
                 "SELECT v.deployment_id, v.slo, v.op, v.expected, v.actual, v.pass "
                 "FROM verdict v JOIN deployment d ON d.id = v.deployment_id "
                 "WHERE v.run_id = ?1 ORDER BY d.idx, v.id",
                 id, row_verdict, &l, "the verdict table", err);
  }
  if (s == SC_OK) {
    l.cap = 0;
    s = rp_each_row(db,
                 has_table(db, "fault_window")
                     ? "SELECT deployment_id, kind, target, detail, injected_ns, detected_ns, "
                       "recovered_ns, affected, " FAULT_WINDOW_SQL("before") ", "
                       FAULT_WINDOW_SQL("during") ", " FAULT_WINDOW_SQL("after")
                       " FROM fault f WHERE run_id = ?1 ORDER BY injected_ns, id"
                     : "SELECT deployment_id, kind, target, detail, injected_ns, detected_ns, "
                       "recovered_ns, affected FROM fault WHERE run_id = ?1 "
                       "ORDER BY injected_ns, id",
                 id, row_fault, &l, "the fault table", err);
  }
  if (s == SC_OK) {
    l.cap = 0;
    s = rp_each_row(db,
                 "SELECT DISTINCT class FROM metric WHERE run_id = ?1 AND class <> '' "
                 "ORDER BY class",
                 id, row_class, &l, "the metric table", err);
  }
  if (s != SC_OK) rp_run_free(r);
  return s;
}

void rp_run_free(rp_run *r) {
  if (!r) return;
  char *strs[] = {r->scenario, r->scenario_path, r->scenario_text, r->mode,    r->backend,
                  r->model,    r->git_rev,       r->host,          r->config,  r->started_at,
                  r->ended_at, r->status,        r->verdict,       r->error};
  for (int i = 0; i < (int)(sizeof strs / sizeof strs[0]); i++) free(strs[i]);
  free(r->deps);
  free(r->phases);
  free(r->verdicts);
  free(r->faults);
  free(r->classes);
  memset(r, 0, sizeof *r);
}

double rp_metric(rp_ctx *c, const rp_run *r, int64_t dep_id, int64_t phase_id, const char *cls,
                 const char *name) {
  if (!c->metric &&
      sqlite3_prepare_v2(c->db,
                         "SELECT value FROM metric WHERE run_id = ?1 AND deployment_id IS ?2 "
                         "AND phase_id IS ?3 AND class = ?4 AND name = ?5 LIMIT 1",
                         -1, &c->metric, NULL) != SQLITE_OK)
    return NAN;
  sqlite3_stmt *st = c->metric;
  sqlite3_reset(st);
  sqlite3_bind_int64(st, 1, r->id);
  if (dep_id) sqlite3_bind_int64(st, 2, dep_id);
  else sqlite3_bind_null(st, 2);
  if (phase_id) sqlite3_bind_int64(st, 3, phase_id);
  else sqlite3_bind_null(st, 3);
  sqlite3_bind_text(st, 4, cls ? cls : "", -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 5, name, -1, SQLITE_STATIC);
  double v = NAN;
  if (sqlite3_step(st) == SQLITE_ROW) v = col_f64(st, 0);
  sqlite3_reset(st);
  return v;
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
  const mt_metric_info *m = mt_metric_find(name);
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
  for (int i = 0; i < c->n_runs; i++) rp_run_free(&c->runs[i]);
  free(c->runs);
  sqlite3_finalize(c->metric);
  memset(c, 0, sizeof *c);
}

// The id of the newest run; SC_INVALID when the database holds none.
static sc_status newest_run(sqlite3 *db, int64_t *id, sc_error *err) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db, "SELECT max(id) FROM run", -1, &st, NULL) != SQLITE_OK)
    return db_fail(db, err, "the run table");
  sc_status s = SC_OK;
  if (sqlite3_step(st) != SQLITE_ROW) s = db_fail(db, err, "the run table");
  else if (sqlite3_column_type(st, 0) == SQLITE_NULL)
    s = sc_fail(err, SC_INVALID, "no runs in the database");
  else *id = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return s;
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
    SC_TRY(newest_run(db, &newest, err));
    ids = &newest;
    n = 1;
  }
  c.runs = calloc((size_t)n, sizeof *c.runs);
  if (!c.runs) return sc_fail(err, SC_OOM, "out of memory for %d runs", n);
  sc_status s = SC_OK;
  for (int i = 0; i < n && s == SC_OK; i++) {
    s = rp_run_load(db, ids[i], &c.runs[i], err);
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
  rp_run r;
  SC_TRY(rp_run_load(db, run_id, &r, err));
  // "running": the runner printing its own table before it closes the run.
  if (strcmp(r.status, "complete") != 0 && strcmp(r.status, "running") != 0)
    fprintf(f, "run %lld is %s%s%s\n", (long long)r.id, r.status[0] ? r.status : "unfinished",
            r.error[0] ? ": " : "", r.error);
  if (r.n_verdicts == 0) {
    fprintf(f, "no SLOs in the scenario\n");
    rp_run_free(&r);
    return SC_OK;
  }
  char(*cells)[VCOLS][VCELL] = calloc((size_t)r.n_verdicts + 1, sizeof *cells);
  if (!cells) {
    rp_run_free(&r);
    return sc_fail(err, SC_OOM, "out of memory for %d verdicts", r.n_verdicts);
  }
  const char *head[VCOLS] = {"deployment", "SLO", "expected", "actual", "result"};
  int w[VCOLS] = {0};
  for (int c = 0; c < VCOLS; c++) {
    snprintf(cells[0][c], VCELL, "%s", head[c]);
  }
  int failed = 0;
  for (int i = 0; i < r.n_verdicts; i++) {
    const rp_verdict *v = &r.verdicts[i];
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
  for (int i = 0; i <= r.n_verdicts; i++)
    // Text columns left-aligned, numbers right-aligned.
    fprintf(f, "%-*s  %-*s  %*s  %*s  %s\n", w[0], cells[i][0], w[1], cells[i][1], w[2],
            cells[i][2], w[3], cells[i][3], cells[i][4]);
  fputc('\n', f);
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
  rp_run_free(&r);
  return SC_OK;
}
