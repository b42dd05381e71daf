// The read queries of the results database (reports/query.h): a run with its rows for the
// reports, metric lookups, a run's time series for the plots, runs by id for the gate and the
// CLI, the gate's metric rows, a scenario's history, and the fault history check's counts.
//
// Every SELECT over stored runs lives here; the writes and the schema are reports/store.c and
// reports/schema.c, and what the numbers mean is left to the callers (reports/report*.c,
// reports/gate.c, faults/verdict.c, cli/).
#include "reports/query.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// --- stepping through rows

static sc_status db_fail(sqlite3 *db, sc_error *err, const char *what) {
  return sc_fail(err, SC_IO, "reading %s: %s", what, sqlite3_errmsg(db));
}

// Steps st to the end, calling row(ud, st) per row; finalizes st. SC_OOM "out of memory
// reading WHAT" when row returns false; SC_IO on a database error.
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

// Runs sql with ?1 bound to run_id and calls row(ud, st) for each result row.
static sc_status each_row(sqlite3 *db, const char *sql, int64_t run_id,
                          bool (*row)(void *ud, sqlite3_stmt *st), void *ud, const char *what,
                          sc_error *err) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return db_fail(db, err, what);
  sqlite3_bind_int64(st, 1, run_id);
  return each_row_of(db, st, row, ud, what, err);
}

// The same with ?1 bound to the text arg.
static sc_status each_row_text(sqlite3 *db, const char *sql, const char *arg,
                               bool (*row)(void *ud, sqlite3_stmt *st), void *ud,
                               const char *what, sc_error *err) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return db_fail(db, err, what);
  sqlite3_bind_text(st, 1, arg, -1, SQLITE_STATIC);
  return each_row_of(db, st, row, ud, what, err);
}

// Makes room for one more element in *arr (n used, *cap allocated, elements of elem bytes),
// doubling the capacity; false when out of memory (*arr unchanged).
static bool grow(void **arr, int n, int *cap, size_t elem) {
  if (n < *cap) return true;
  int nc = *cap ? *cap * 2 : 8;
  void *p = realloc(*arr, (size_t)nc * elem);
  if (!p) return false;
  *arr = p;
  *cap = nc;
  return true;
}

// Column col of the row as text into dst (n bytes, truncated); "" for NULL.
static void col_text(sqlite3_stmt *st, int col, char *dst, size_t n) {
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

// --- one run

int rq_dep_index(const rq_run *r, int64_t dep_id) {
  for (int i = 0; i < r->n_deps; i++)
    if (r->deps[i].id == dep_id) return i;
  return -1;
}

typedef struct loader {
  rq_run *r;
  int cap;
} loader;

static bool row_deployment(void *ud, sqlite3_stmt *st) {
  loader *l = ud;
  rq_run *r = l->r;
  if (!grow((void **)&r->deps, r->n_deps, &l->cap, sizeof *r->deps)) return false;
  rq_deployment *d = &r->deps[r->n_deps++];
  memset(d, 0, sizeof *d);
  d->id = sqlite3_column_int64(st, 0);
  d->idx = sqlite3_column_int(st, 1);
  col_text(st, 2, d->label, sizeof d->label);
  d->tp = sqlite3_column_int(st, 3);
  d->pp = sqlite3_column_int(st, 4);
  d->dp = sqlite3_column_int(st, 5);
  d->gpus = sqlite3_column_int(st, 6);
  d->start_ns = col_i64(st, 7, 0);
  d->end_ns = col_i64(st, 8, -1);
  col_text(st, 9, d->status, sizeof d->status);
  return true;
}

static bool row_phase(void *ud, sqlite3_stmt *st) {
  loader *l = ud;
  rq_run *r = l->r;
  int dep = rq_dep_index(r, sqlite3_column_int64(st, 1));
  if (dep < 0) return true; // a phase of a deployment of another run: not ours to show
  if (!grow((void **)&r->phases, r->n_phases, &l->cap, sizeof *r->phases)) return false;
  rq_phase *p = &r->phases[r->n_phases++];
  memset(p, 0, sizeof *p);
  p->id = sqlite3_column_int64(st, 0);
  p->dep = dep;
  p->idx = sqlite3_column_int(st, 2);
  col_text(st, 3, p->name, sizeof p->name);
  col_text(st, 4, p->kind, sizeof p->kind);
  p->concurrency = (int)col_i64(st, 5, 0);
  double rate = col_f64(st, 6);
  p->rate = isnan(rate) ? 0 : rate;
  p->start_ns = col_i64(st, 7, 0);
  p->end_ns = col_i64(st, 8, -1);
  return true;
}

static bool row_verdict(void *ud, sqlite3_stmt *st) {
  loader *l = ud;
  rq_run *r = l->r;
  int dep = rq_dep_index(r, sqlite3_column_int64(st, 0));
  if (dep < 0) return true;
  if (!grow((void **)&r->verdicts, r->n_verdicts, &l->cap, sizeof *r->verdicts)) return false;
  rq_verdict *v = &r->verdicts[r->n_verdicts++];
  memset(v, 0, sizeof *v);
  v->dep = dep;
  col_text(st, 1, v->slo, sizeof v->slo);
  col_text(st, 2, v->op, sizeof v->op);
  v->expected = col_f64(st, 3);
  v->actual = col_f64(st, 4);
  v->pass = sqlite3_column_int(st, 5) != 0;
  col_text(st, 6, v->note, sizeof v->note);
  return true;
}

// One phase whose client fell behind, added to the run's list.
static bool row_saturated(void *ud, sqlite3_stmt *st) {
  rq_run *r = ((loader *)ud)->r;
  size_t n = strlen(r->saturated);
  if (n + 1 >= sizeof r->saturated) return true;
  char label[64], phase[64];
  col_text(st, 0, label, sizeof label);
  col_text(st, 1, phase, sizeof phase);
  double late = col_f64(st, 2);
  snprintf(r->saturated + n, sizeof r->saturated - n, "%s%s %s (%.0f ms late)", n ? ", " : "",
           label, phase, late);
  return true;
}

// The fault query's columns: 8 of the fault row, then (with fault_window) one per window.
enum { FAULT_COLS = 8 };

static bool row_fault(void *ud, sqlite3_stmt *st) {
  loader *l = ud;
  rq_run *r = l->r;
  if (!grow((void **)&r->faults, r->n_faults, &l->cap, sizeof *r->faults)) return false;
  rq_fault *f = &r->faults[r->n_faults++];
  memset(f, 0, sizeof *f);
  f->dep = sqlite3_column_type(st, 0) == SQLITE_NULL
               ? -1
               : rq_dep_index(r, sqlite3_column_int64(st, 0));
  col_text(st, 1, f->kind, sizeof f->kind);
  col_text(st, 2, f->target, sizeof f->target);
  col_text(st, 3, f->detail, sizeof f->detail);
  f->injected_ns = col_i64(st, 4, 0);
  f->detected_ns = col_i64(st, 5, -1);
  f->recovered_ns = col_i64(st, 6, -1);
  f->affected = (int)col_i64(st, 7, -1);
  for (int w = 0; w < RQ_FAULT_WINDOWS && sqlite3_column_count(st) > FAULT_COLS + w; w++)
    col_text(st, FAULT_COLS + w, f->window[w], sizeof f->window[w]);
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
// Whether table has column col (an older file may lack it).
static bool has_column(sqlite3 *db, const char *table, const char *col) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db, "SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2", -1, &st,
                         NULL) != SQLITE_OK)
    return false;
  sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, col, -1, SQLITE_STATIC);
  bool yes = sqlite3_step(st) == SQLITE_ROW;
  sqlite3_finalize(st);
  return yes;
}

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
  rq_run *r = l->r;
  if (!grow((void **)&r->classes, r->n_classes, &l->cap, sizeof *r->classes)) return false;
  col_text(st, 0, r->classes[r->n_classes++], sizeof *r->classes);
  return true;
}

sc_status rq_run_load(sqlite3 *db, int64_t id, rq_run *r, sc_error *err) {
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
  enum { N_STRS = sizeof strs / sizeof strs[0] }; // the seed and duration_ns columns follow
  bool oom = false;
  for (int i = 0; i < N_STRS; i++) oom |= !(*strs[i] = col_dup(st, i));
  r->seed = sqlite3_column_int64(st, N_STRS);
  r->duration_ns = col_i64(st, N_STRS + 1, -1);
  sqlite3_finalize(st);
  if (oom) {
    rq_run_free(r);
    return sc_fail(err, SC_OOM, "out of memory reading run %lld", (long long)id);
  }

  loader l = {r, 0};
  sc_status s = each_row(db,
                         "SELECT id, idx, label, tp, pp, dp, gpus, start_ns, end_ns, status "
                         "FROM deployment WHERE run_id = ?1 ORDER BY idx, id",
                         id, row_deployment, &l, "the deployment table", err);
  if (s == SC_OK) {
    l.cap = 0;
    s = each_row(db,
                 "SELECT p.id, p.deployment_id, p.idx, p.name, p.kind, p.concurrency, p.rate, "
                 "p.start_ns, p.end_ns FROM phase p JOIN deployment d ON d.id = p.deployment_id "
                 "WHERE p.run_id = ?1 ORDER BY d.idx, p.idx, p.id",
                 id, row_phase, &l, "the phase table", err);
  }
  if (s == SC_OK) {
    l.cap = 0;
    s = each_row(db,
                 has_column(db, "verdict", "note")
                     ? "SELECT v.deployment_id, v.slo, v.op, v.expected, v.actual, v.pass, "
                       "v.note FROM verdict v JOIN deployment d ON d.id = v.deployment_id "
                       "WHERE v.run_id = ?1 ORDER BY d.idx, v.id"
                     : "SELECT v.deployment_id, v.slo, v.op, v.expected, v.actual, v.pass, "
                       "NULL FROM verdict v JOIN deployment d ON d.id = v.deployment_id "
                       "WHERE v.run_id = ?1 ORDER BY d.idx, v.id",
                 id, row_verdict, &l, "the verdict table", err);
  }
  if (s == SC_OK)
    s = each_row(db,
                 "SELECT d.label, p.name, (SELECT l.value FROM metric l WHERE l.phase_id = "
                 "m.phase_id AND l.name = 'client_late_p99_ms' AND l.class = '') FROM metric m "
                 "JOIN phase p ON p.id = m.phase_id JOIN deployment d ON d.id = m.deployment_id "
                 "WHERE m.run_id = ?1 AND m.name = 'client_saturated' AND m.value > 0 AND "
                 "m.class = '' ORDER BY d.idx, p.idx",
                 id, row_saturated, &l, "the metric table", err);
  if (s == SC_OK) {
    l.cap = 0;
    s = each_row(db,
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
    s = each_row(db,
                 "SELECT DISTINCT class FROM metric WHERE run_id = ?1 AND class <> '' "
                 "ORDER BY class",
                 id, row_class, &l, "the metric table", err);
  }
  if (s != SC_OK) rq_run_free(r);
  return s;
}

void rq_run_free(rq_run *r) {
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

sc_status rq_newest_run(sqlite3 *db, int64_t *id, sc_error *err) {
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

// --- metric values

double rq_metric(sqlite3 *db, rq_metric_cache *mc, int64_t run_id, int64_t dep_id,
                 int64_t phase_id, const char *cls, const char *name) {
  if (!mc->st &&
      sqlite3_prepare_v2(db,
                         "SELECT value FROM metric WHERE run_id = ?1 AND deployment_id IS ?2 "
                         "AND phase_id IS ?3 AND class = ?4 AND name = ?5 LIMIT 1",
                         -1, &mc->st, NULL) != SQLITE_OK)
    return NAN;
  sqlite3_stmt *st = mc->st;
  sqlite3_reset(st);
  sqlite3_bind_int64(st, 1, run_id);
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

void rq_metric_cache_free(rq_metric_cache *mc) {
  if (!mc) return;
  sqlite3_finalize(mc->st);
  mc->st = NULL;
}

// --- a run's time series

// A run's rows are read by their deployments: the deployment indexes find them where
// `run_id = ?1` would scan every run's rows in the file (a simulated hour writes 2.2 million
// steps).
#define RUN_DEPLOYMENTS "(SELECT id FROM deployment WHERE run_id = ?1)"

sc_status rq_run_span(sqlite3 *db, int64_t run_id, int64_t *span, sc_error *err) {
  sqlite3_stmt *st = NULL;
  // Version 5 keeps each step block's latest end in the index it finds blocks by: one look-up
  // per deployment. Older files hold a row per step.
  const char *steps = has_table(db, "step_block")
                          ? " SELECT (SELECT max(end_ns) FROM step_block WHERE deployment_id ="
                            " d.id) AS t FROM deployment AS d WHERE d.run_id = ?1"
                          : " SELECT max(t_ns + duration_ns) AS t FROM step WHERE deployment_id"
                            " IN " RUN_DEPLOYMENTS;
  char sql[1024];
  snprintf(sql, sizeof sql,
           "SELECT max(t) FROM (%s"
           " UNION ALL SELECT max(max(arrival_ns, coalesce(first_token_ns, 0),"
           "   coalesce(finish_ns, 0))) FROM request WHERE run_id = ?1"
           " UNION ALL SELECT max(coalesce(end_ns, start_ns)) FROM phase WHERE run_id = ?1"
           " UNION ALL SELECT max(max(injected_ns, coalesce(detected_ns, 0),"
           "   coalesce(recovered_ns, 0))) FROM fault WHERE run_id = ?1)",
           steps);
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
    return sc_fail(err, SC_IO, "reading the run's span: %s", sqlite3_errmsg(db));
  sqlite3_bind_int64(st, 1, run_id);
  *span = 0;
  if (sqlite3_step(st) == SQLITE_ROW) *span = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return SC_OK;
}

// A typed callback and its caller's data, for the row adapters below.
typedef struct typed_fn {
  void (*fn)(void);         // the caller's callback, cast back to its type by the adapter
  void *ud;
} typed_fn;

static bool row_token_count(void *ud, sqlite3_stmt *st) {
  typed_fn *t = ud;
  return ((bool (*)(void *, int64_t, int64_t))t->fn)(t->ud, sqlite3_column_int64(st, 0),
                                                     sqlite3_column_int64(st, 1));
}

// Whether run_id's token_second rows count every token row of the run: their sum is the run's
// delivered output tokens (request.output_tokens, each request's count of token rows). Not so
// in a file without the table, at level requests (no token rows, no counts), or where token
// rows were written without the store.
static bool token_seconds_whole(sqlite3 *db, int64_t run_id) {
  if (!has_table(db, "token_second")) return false;
  sqlite3_stmt *st = NULL;
  bool whole = false;
  if (sqlite3_prepare_v2(db,
                         "SELECT (SELECT coalesce(sum(tokens), 0) FROM token_second WHERE "
                         "run_id = ?1) = (SELECT coalesce(sum(output_tokens), 0) FROM request "
                         "WHERE deployment_id IN " RUN_DEPLOYMENTS ")",
                         -1, &st, NULL) == SQLITE_OK) {
    sqlite3_bind_int64(st, 1, run_id);
    whole = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) == 1;
  }
  sqlite3_finalize(st);
  return whole;
}

sc_status rq_token_counts(sqlite3 *db, int64_t run_id, int64_t bin_ns,
                          bool (*fn)(void *ud, int64_t t_ns, int64_t n), void *ud,
                          sc_error *err) {
  typed_fn t = {(void (*)(void))fn, ud};
  if (bin_ns > 0 && bin_ns % STORE_NS_PER_SECOND == 0 && token_seconds_whole(db, run_id))
    return each_row(db,
                    "SELECT second * 1000000000, tokens FROM token_second WHERE run_id = ?1",
                    run_id, row_token_count, &t, "the token_second table", err);
  return each_row(db,
                  "SELECT t.t_ns, 1 FROM token t JOIN request r ON r.id = t.request_id "
                  "WHERE r.run_id = ?1",
                  run_id, row_token_count, &t, "the token table", err);
}

static bool row_first_token(void *ud, sqlite3_stmt *st) {
  typed_fn *t = ud;
  return ((bool (*)(void *, int64_t, int64_t))t->fn)(t->ud, sqlite3_column_int64(st, 0),
                                                     sqlite3_column_int64(st, 1));
}

sc_status rq_first_tokens(sqlite3 *db, int64_t run_id,
                          bool (*fn)(void *ud, int64_t first_token_ns, int64_t ttft_ns),
                          void *ud, sc_error *err) {
  typed_fn t = {(void (*)(void))fn, ud};
  return each_row(db,
                  "SELECT first_token_ns, first_token_ns - arrival_ns FROM request "
                  "WHERE run_id = ?1 AND first_token_ns IS NOT NULL ORDER BY first_token_ns",
                  run_id, row_first_token, &t, "the request table", err);
}

// --- steps

// Reads an integer at *p (spaces before it skipped) into *v and moves *p past it; false when
// there is none.
static bool json_i64(const char **p, int64_t *v) {
  const char *s = *p;
  while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
  bool neg = *s == '-';
  if (neg) s++;
  if (*s < '0' || *s > '9') return false;
  uint64_t u = 0;
  for (; *s >= '0' && *s <= '9'; s++) u = u * 10 + (uint64_t)(*s - '0');
  *v = neg ? (int64_t)(0 - u) : (int64_t)u;
  *p = s;
  return true;
}

// Moves *p past spaces and the character c; false when the next one is not c.
static bool json_char(const char **p, char c) {
  const char *s = *p;
  while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
  if (*s != c) return false;
  *p = s + 1;
  return true;
}

enum { STEP_FIELDS = 11 }; // a step in a step_block: replica, t_ns, ..., kv_total

// Calls fn for every step of deployment dep_id's step_block rows, in id order (what version 5
// stores; the C reading of what the step view gives). SC_INVALID naming the block when its
// steps are not the writer's JSON; SC_OOM when fn returns false; SC_IO on a database error.
static sc_status block_steps_each(sqlite3 *db, int64_t dep_id,
                                  bool (*fn)(void *ud, const rq_step *s), void *ud,
                                  sc_error *err) {
  sqlite3_stmt *st = NULL;
  // the index's order: no sort of the blocks' text
  if (sqlite3_prepare_v2(db,
                         "SELECT first_id, steps FROM step_block WHERE deployment_id = ?1 "
                         "ORDER BY first_id",
                         -1, &st, NULL) != SQLITE_OK)
    return db_fail(db, err, "the step_block table");
  sqlite3_bind_int64(st, 1, dep_id);
  sc_status s = SC_OK;
  int rc;
  while (s == SC_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t first = sqlite3_column_int64(st, 0);
    rq_step x = {.deployment_id = dep_id};
    const char *p = (const char *)sqlite3_column_text(st, 1);
    bool ok = p && json_char(&p, '[');
    bool end = ok && json_char(&p, ']');
    for (int64_t k = 0; ok && !end; k++) {
      int64_t v[STEP_FIELDS];
      ok = json_char(&p, '[');
      for (int i = 0; ok && i < STEP_FIELDS; i++)
        ok = (!i || json_char(&p, ',')) && json_i64(&p, &v[i]);
      ok = ok && json_char(&p, ']');
      if (!ok) break;
      x.id = first + k;
      x.replica = (int)v[0];
      x.t_ns = v[1];
      x.duration_ns = v[2];
      x.queue_len = (int)v[7];
      x.kv_used = v[9];
      x.kv_total = v[10];
      if (!fn(ud, &x)) {
        s = sc_fail(err, SC_OOM, "out of memory reading the step_block table");
        break;
      }
      end = json_char(&p, ']');
      ok = end || json_char(&p, ',');
    }
    if (s == SC_OK && !ok)
      s = sc_fail(err, SC_INVALID, "reading the step_block table: block %lld: its steps are "
                  "not an array of arrays of %d integers", (long long)first, STEP_FIELDS);
  }
  if (s == SC_OK && rc != SQLITE_DONE) s = db_fail(db, err, "the step_block table");
  sqlite3_finalize(st);
  return s;
}

static bool row_step(void *ud, sqlite3_stmt *st) {
  typed_fn *t = ud;
  rq_step s = {.id = sqlite3_column_int64(st, 0),
               .deployment_id = sqlite3_column_int64(st, 1),
               .replica = sqlite3_column_int(st, 2),
               .t_ns = sqlite3_column_int64(st, 3),
               .duration_ns = sqlite3_column_int64(st, 4),
               .queue_len = sqlite3_column_int(st, 5),
               .kv_used = sqlite3_column_int64(st, 6),
               .kv_total = sqlite3_column_int64(st, 7)};
  return ((bool (*)(void *, const rq_step *))t->fn)(t->ud, &s);
}

#define STEP_COLUMNS "id, deployment_id, replica, t_ns, duration_ns, queue_len, kv_used, kv_total"

// The steps of a block come in id order, and each replica's in time order: one row can come
// after rows that started later than it, by about its own duration (a step is handed over when
// it ends). A window of this much of the run's clock puts them back in time order as they come.
#define STEP_REORDER_NS (INT64_C(30) * 1000000000)

// Steps read in id order, handed on in time order (t_ns, then id): those more than
// STEP_REORDER_NS before the latest seen wait in pend[head..n), sorted.
typedef struct step_reorder {
  rq_step *pend;
  size_t head, n, cap;
  int64_t hi;               // the latest t_ns seen
  rq_step last;             // the last handed on
  bool any_out;             // one was handed on
  bool out_of_order;        // a step came after one later than it was handed on
  bool (*fn)(void *ud, const rq_step *s);
  void *ud;
} step_reorder;

static bool step_before(const rq_step *a, const rq_step *b) {
  return a->t_ns < b->t_ns || (a->t_ns == b->t_ns && a->id < b->id);
}

// Hands on the waiting steps that started at or before `upto`.
static bool reorder_out(step_reorder *o, int64_t upto) {
  while (o->head < o->n && o->pend[o->head].t_ns <= upto) {
    o->last = o->pend[o->head++];
    o->any_out = true;
    if (!o->fn(o->ud, &o->last)) return false;
  }
  if (o->head == o->n) o->head = o->n = 0;
  return true;
}

static bool reorder_in(void *ud, const rq_step *s) {
  step_reorder *o = ud;
  if (o->any_out && step_before(s, &o->last)) {
    o->out_of_order = true;
    return false;
  }
  if (o->n == o->cap) {
    if (o->head) { // room at the front
      memmove(o->pend, o->pend + o->head, (o->n - o->head) * sizeof *o->pend);
      o->n -= o->head;
      o->head = 0;
    } else {
      size_t cap = o->cap ? o->cap * 2 : 4096;
      rq_step *p = realloc(o->pend, cap * sizeof *p);
      if (!p) return false;
      o->pend = p;
      o->cap = cap;
    }
  }
  size_t j = o->n; // from the end: a step is seldom more than a few places early
  while (j > o->head && step_before(s, &o->pend[j - 1])) j--;
  memmove(o->pend + j + 1, o->pend + j, (o->n - j) * sizeof *o->pend);
  o->pend[j] = *s;
  o->n++;
  if (s->t_ns > o->hi) o->hi = s->t_ns;
  // only what is a whole window behind the latest: a later step cannot start before it
  return o->hi < INT64_MIN + STEP_REORDER_NS || reorder_out(o, o->hi - STEP_REORDER_NS - 1);
}

// Ids read by row_id.
typedef struct id_list {
  int64_t *v;               // (n)
  int n, cap;
} id_list;

static bool row_id(void *ud, sqlite3_stmt *st) {
  id_list *l = ud;
  if (!grow((void **)&l->v, l->n, &l->cap, sizeof *l->v)) return false;
  l->v[l->n++] = sqlite3_column_int64(st, 0);
  return true;
}

sc_status rq_steps_by_time(sqlite3 *db, int64_t run_id, bool (*fn)(void *ud, const rq_step *s),
                           void (*restart)(void *ud), void *ud, sc_error *err) {
  typed_fn t = {(void (*)(void))fn, ud};
  if (has_table(db, "step_block")) {
    id_list deps = {0};
    sc_status s = each_row(db, "SELECT id FROM deployment WHERE run_id = ?1 ORDER BY id", run_id,
                           row_id, &deps, "the deployment table", err);
    step_reorder o = {.fn = fn, .ud = ud};
    for (int i = 0; s == SC_OK && i < deps.n; i++) {
      o.hi = INT64_MIN;
      o.any_out = false;
      s = block_steps_each(db, deps.v[i], reorder_in, &o, err);
      if (s == SC_OK && !reorder_out(&o, INT64_MAX))
        s = sc_fail(err, SC_OOM, "out of memory reading the step_block table");
    }
    free(o.pend);
    free(deps.v);
    if (!o.out_of_order) return s;
    // A step handed over more than the window late: SQLite sorts them all (slow, and exact).
    restart(ud);
  }
  return each_row(db,
                  "SELECT " STEP_COLUMNS " FROM step WHERE deployment_id IN " RUN_DEPLOYMENTS
                  " ORDER BY deployment_id, t_ns, id",
                  run_id, row_step, &t, "the step table", err);
}

static double col_real(sqlite3_stmt *st, int i) {
  return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

static bool row_server(void *ud, sqlite3_stmt *st) {
  typed_fn *t = ud;
  rq_server_sample s = {.deployment_id = sqlite3_column_int64(st, 0),
                        .replica = sqlite3_column_int(st, 1),
                        .t_ns = sqlite3_column_int64(st, 2),
                        .running = col_real(st, 3),
                        .waiting = col_real(st, 4),
                        .kv_usage = col_real(st, 5)};
  return ((bool (*)(void *, const rq_server_sample *))t->fn)(t->ud, &s);
}

sc_status rq_server_samples(sqlite3 *db, int64_t run_id,
                            bool (*fn)(void *ud, const rq_server_sample *s), void *ud,
                            sc_error *err) {
  if (!has_table(db, "server_sample")) return SC_OK;
  typed_fn t = {(void (*)(void))fn, ud};
  return each_row(db,
                  "SELECT deployment_id, replica, t_ns, running, waiting, kv_usage FROM "
                  "server_sample WHERE run_id = ?1 ORDER BY t_ns, rowid",
                  run_id, row_server, &t, "the server_sample table", err);
}

// --- the run listing

static const char *text_or_empty(sqlite3_stmt *st, int col) {
  const char *t = (const char *)sqlite3_column_text(st, col);
  return t ? t : "";
}

int rq_runs_each(sqlite3 *db, int64_t id, void (*fn)(void *ud, const rq_listed_run *r),
                 void *ud, bool *prepared) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(db,
                              id > 0 ? "SELECT id, scenario, mode, status, started_at, verdict, "
                                       "git_rev, baseline, host, pid FROM run WHERE id=?"
                                     : "SELECT id, scenario, mode, status, started_at, verdict, "
                                       "git_rev, baseline, host, pid FROM run ORDER BY id DESC",
                              -1, &st, NULL);
  *prepared = rc == SQLITE_OK;
  if (rc != SQLITE_OK) {
    sqlite3_finalize(st);
    return rc;
  }
  if (id > 0) sqlite3_bind_int64(st, 1, id);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    rq_listed_run r = {.id = sqlite3_column_int64(st, 0),
                       .scenario = text_or_empty(st, 1),
                       .mode = text_or_empty(st, 2),
                       .status = text_or_empty(st, 3),
                       .started_at = text_or_empty(st, 4),
                       .verdict = text_or_empty(st, 5),
                       .git_rev = text_or_empty(st, 6),
                       .baseline = sqlite3_column_int(st, 7) != 0,
                       .host = (const char *)sqlite3_column_text(st, 8),
                       .has_pid = sqlite3_column_type(st, 9) != SQLITE_NULL,
                       .pid = sqlite3_column_int64(st, 9)};
    fn(ud, &r);
  }
  sqlite3_finalize(st);
  return rc;
}

// --- runs by id

bool rq_has_repeat_groups(sqlite3 *db) {
  bool grouped = false;
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db, "SELECT 1 FROM pragma_table_info('run') WHERE name = "
                             "'repeat_group'", -1, &st, NULL) == SQLITE_OK)
    grouped = sqlite3_step(st) == SQLITE_ROW;
  sqlite3_finalize(st);
  return grouped;
}

int rq_group_runs(sqlite3 *db, int64_t run_id, bool grouped, int64_t *out, int cap) {
  sqlite3_stmt *st = NULL;
  const char *sql = grouped ? "SELECT id FROM run WHERE id = ?1 OR (repeat_group IS NOT NULL AND "
                              "repeat_group = (SELECT repeat_group FROM run WHERE id = ?1)) "
                              "ORDER BY id"
                            : "SELECT id FROM run WHERE id = ?1";
  int n = 0;
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return 0;
  sqlite3_bind_int64(st, 1, run_id);
  while (sqlite3_step(st) == SQLITE_ROW && n < cap) out[n++] = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return n;
}

bool rq_run_complete(sqlite3 *db, int64_t id) {
  sqlite3_stmt *st = NULL;
  bool ok = false;
  if (sqlite3_prepare_v2(db, "SELECT 1 FROM run WHERE id = ?1 AND status = 'complete'", -1, &st,
                         NULL) == SQLITE_OK) {
    sqlite3_bind_int64(st, 1, id);
    ok = sqlite3_step(st) == SQLITE_ROW;
  }
  sqlite3_finalize(st);
  return ok;
}

bool rq_run_status(sqlite3 *db, int64_t id, char *status, size_t status_cap, char *error,
                   size_t error_cap) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db, "SELECT status, coalesce(error, '') FROM run WHERE id = ?1", -1,
                         &st, NULL) != SQLITE_OK)
    return false;
  sqlite3_bind_int64(st, 1, id);
  bool ok = sqlite3_step(st) == SQLITE_ROW;
  if (ok && status) snprintf(status, status_cap, "%s", (const char *)sqlite3_column_text(st, 0));
  if (ok && error) snprintf(error, error_cap, "%s", (const char *)sqlite3_column_text(st, 1));
  sqlite3_finalize(st);
  return ok;
}

bool rq_run_scenario_mode(sqlite3 *db, int64_t id, char *scen, size_t scen_cap, char *mode,
                          size_t mode_cap) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db, "SELECT scenario, mode FROM run WHERE id = ?1", -1, &st, NULL) !=
      SQLITE_OK)
    return false;
  sqlite3_bind_int64(st, 1, id);
  bool ok = sqlite3_step(st) == SQLITE_ROW;
  if (ok && scen) snprintf(scen, scen_cap, "%s", (const char *)sqlite3_column_text(st, 0));
  if (ok && mode) snprintf(mode, mode_cap, "%s", (const char *)sqlite3_column_text(st, 1));
  sqlite3_finalize(st);
  return ok;
}

char *rq_run_config(sqlite3 *db, int64_t id) {
  sqlite3_stmt *st = NULL;
  char *config = NULL;
  if (sqlite3_prepare_v2(db, "SELECT config FROM run WHERE id = ?1", -1, &st, NULL) == SQLITE_OK) {
    sqlite3_bind_int64(st, 1, id);
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
      config = strdup((const char *)sqlite3_column_text(st, 0));
  }
  sqlite3_finalize(st);
  return config;
}

int rq_latest_runs(sqlite3 *db, int64_t *out, int cap) {
  sqlite3_stmt *st = NULL;
  int n = 0;
  if (sqlite3_prepare_v2(db, "SELECT max(id) FROM run GROUP BY scenario, mode ORDER BY scenario, "
                             "mode", -1, &st, NULL) != SQLITE_OK)
    return 0;
  while (sqlite3_step(st) == SQLITE_ROW && n < cap) out[n++] = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return n;
}

int64_t rq_latest_baseline(sqlite3 *db, const char *scen, const char *mode, int64_t before) {
  sqlite3_stmt *st = NULL;
  int64_t best = 0;
  if (sqlite3_prepare_v2(db, "SELECT max(id) FROM run WHERE baseline = 1 AND scenario = ?1 "
                             "AND mode = ?2 AND id < ?3", -1, &st, NULL) != SQLITE_OK)
    return 0;
  sqlite3_bind_text(st, 1, scen, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 2, mode, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st, 3, before);
  if (sqlite3_step(st) == SQLITE_ROW) best = sqlite3_column_int64(st, 0); // NULL reads 0
  sqlite3_finalize(st);
  return best;
}

// --- the gate's numbers

sc_status rq_gate_metrics(sqlite3 *db, int64_t run,
                          bool (*fn)(void *ud, const char *label, const char *phase,
                                     const char *name, double value),
                          void *ud, sc_error *err) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db,
                         "SELECT d.label, coalesce(p.name, ''), CASE m.class WHEN '' THEN "
                         "m.name ELSE m.class || ':' || m.name END, m.value FROM metric m "
                         "JOIN deployment d ON d.id = m.deployment_id LEFT JOIN phase p ON p.id "
                         "= m.phase_id WHERE m.run_id = ?1 AND (m.class = '' OR m.phase_id IS "
                         "NULL) AND m.value IS NOT NULL ORDER BY d.idx, m.phase_id, m.class, "
                         "m.name",
                         -1, &st, NULL) != SQLITE_OK)
    return sc_fail(err, SC_IO, "gate: reading metrics: %s", sqlite3_errmsg(db));
  sqlite3_bind_int64(st, 1, run);
  sc_status s = SC_OK;
  while (s == SC_OK && sqlite3_step(st) == SQLITE_ROW) {
    if (!fn(ud, (const char *)sqlite3_column_text(st, 0),
            (const char *)sqlite3_column_text(st, 1), (const char *)sqlite3_column_text(st, 2),
            sqlite3_column_double(st, 3)))
      s = sc_fail(err, SC_OOM, "gate: out of memory");
  }
  sqlite3_finalize(st);
  return s;
}

// --- the history of a scenario

static bool row_history_run(void *ud, sqlite3_stmt *st) {
  typed_fn *t = ud;
  rq_history_run r = {.id = sqlite3_column_int64(st, 0)};
  col_text(st, 1, r.started_at, sizeof r.started_at);
  col_text(st, 2, r.git_rev, sizeof r.git_rev);
  col_text(st, 3, r.mode, sizeof r.mode);
  col_text(st, 4, r.status, sizeof r.status);
  col_text(st, 5, r.verdict, sizeof r.verdict);
  r.baseline = sqlite3_column_int(st, 6) != 0;
  col_text(st, 7, r.group, sizeof r.group);
  return ((bool (*)(void *, const rq_history_run *))t->fn)(t->ud, &r);
}

sc_status rq_history_runs(sqlite3 *db, const char *scn, bool grouped,
                          bool (*fn)(void *ud, const rq_history_run *r), void *ud,
                          sc_error *err) {
  typed_fn t = {(void (*)(void))fn, ud};
  return each_row_text(
      db,
      // A group's key is its first run's id, whether that run's own repeat_group holds it or
      // is NULL.
      grouped ? "SELECT r.id, r.started_at, r.git_rev, r.mode, r.status, r.verdict, "
                "r.baseline, coalesce(r.repeat_group, g.repeat_group) FROM run r "
                "LEFT JOIN (SELECT DISTINCT repeat_group FROM run "
                "WHERE repeat_group IS NOT NULL) g ON g.repeat_group = r.id "
                "WHERE r.scenario = ?1 ORDER BY r.started_at, r.id"
              : "SELECT id, started_at, git_rev, mode, status, verdict, baseline, NULL "
                "FROM run WHERE scenario = ?1 ORDER BY started_at, id",
      scn, row_history_run, &t, "the run table", err);
}

static bool row_history_deployment(void *ud, sqlite3_stmt *st) {
  typed_fn *t = ud;
  char label[64], mode[8];
  col_text(st, 0, label, sizeof label);
  col_text(st, 1, mode, sizeof mode);
  return ((bool (*)(void *, const char *, const char *))t->fn)(t->ud, label, mode);
}

sc_status rq_history_deployments(sqlite3 *db, const char *scn,
                                 bool (*fn)(void *ud, const char *label, const char *mode),
                                 void *ud, sc_error *err) {
  typed_fn t = {(void (*)(void))fn, ud};
  return each_row_text(db,
                       "SELECT d.label, r.mode FROM deployment d JOIN run r ON r.id = d.run_id "
                       "WHERE r.scenario = ?1 AND r.status = 'complete' "
                       "ORDER BY d.idx, r.started_at, r.id",
                       scn, row_history_deployment, &t, "the deployment table", err);
}

static bool row_history_metric(void *ud, sqlite3_stmt *st) {
  typed_fn *t = ud;
  if (sqlite3_column_type(st, 4) == SQLITE_NULL) return true;
  rq_history_metric m = {.run_id = sqlite3_column_int64(st, 0),
                         .value = sqlite3_column_double(st, 4)};
  col_text(st, 1, m.label, sizeof m.label);
  col_text(st, 2, m.mode, sizeof m.mode);
  col_text(st, 3, m.name, sizeof m.name);
  return ((bool (*)(void *, const rq_history_metric *))t->fn)(t->ud, &m);
}

sc_status rq_history_metrics(sqlite3 *db, const char *scn,
                             bool (*fn)(void *ud, const rq_history_metric *m), void *ud,
                             sc_error *err) {
  typed_fn t = {(void (*)(void))fn, ud};
  return each_row_text(db,
                       "SELECT m.run_id, d.label, r.mode, m.name, m.value FROM metric m "
                       "JOIN deployment d ON d.id = m.deployment_id JOIN run r ON r.id = "
                       "m.run_id WHERE r.scenario = ?1 AND m.phase_id IS NULL AND m.class = ''",
                       scn, row_history_metric, &t, "the metric table", err);
}

// --- the history check of faults/verdict.c

// One pass over the deployment's request rows, grouped by seq (the request_by_deployment index
// finds them): distinct seq values, those with more than one row, those inside [0, sent), and
// the rows by status (a row counts once for its status whatever its seq). ?1 run, ?2
// deployment, ?3 sent.
static const char *const history_requests_sql =
    "SELECT count(*), coalesce(sum(n > 1), 0), coalesce(sum(seq >= 0 AND seq < ?3), 0),"
    " coalesce(sum(ok), 0), coalesce(sum(cancelled), 0), coalesce(sum(failed), 0),"
    " coalesce(sum(timeout), 0), coalesce(sum(n - ok - cancelled - failed - timeout), 0),"
    " coalesce(sum(abandoned), 0)"
    " FROM (SELECT seq, count(*) AS n,"
    "  sum(status = 'ok') AS ok, sum(status = 'cancelled') AS cancelled,"
    "  sum(status = 'failed') AS failed, sum(status = 'timeout') AS timeout,"
    "  sum(status = 'timeout' AND reason = 'replica_lost') AS abandoned"
    "  FROM request WHERE run_id = ?1 AND deployment_id = ?2 GROUP BY seq)";
enum { HISTORY_REQUEST_COLS = 9 };

// Requests whose times run backwards by their own columns: dispatched, first token or finished
// before arrival, finished before the first token. ?1 run, ?2 deployment.
#define HISTORY_BAD_REQUEST_TIMES                                                               \
  "(r.dispatch_ns < r.arrival_ns OR r.first_token_ns < r.arrival_ns OR"                        \
  " r.finish_ns < r.arrival_ns OR r.finish_ns < r.first_token_ns)"
static const char *const history_times_sql =
    "SELECT count(*) FROM request AS r WHERE r.run_id = ?1 AND r.deployment_id = ?2 AND "
    HISTORY_BAD_REQUEST_TIMES;

// Requests that say they delivered tokens but have no token rows at all. ?1 run, ?2 deployment.
static const char *const history_tokenless_sql =
    "SELECT count(*) FROM request AS r WHERE r.run_id = ?1 AND r.deployment_id = ?2"
    " AND r.output_tokens != 0 AND NOT EXISTS (SELECT 1 FROM token AS t WHERE t.request_id = r.id)";

// Every token row of the deployment's requests, a request's rows together in index order, with
// what the request says (output_tokens, arrival, finish, whether its own times are bad), for
// one pass in history_tokens. ?1 run, ?2 deployment.
static const char *const history_token_rows_sql =
    "SELECT r.id, r.output_tokens, r.arrival_ns, r.finish_ns, " HISTORY_BAD_REQUEST_TIMES ","
    " t.idx, t.t_ns FROM request AS r JOIN token AS t ON t.request_id = r.id"
    " WHERE r.run_id = ?1 AND r.deployment_id = ?2 ORDER BY r.id, t.idx";

// One request's token rows so far, in history_tokens.
typedef struct history_req {
  int64_t id, out;                   // the request, its output_tokens
  int64_t n, distinct, hi;           // its rows, their distinct indexes, the highest
  int64_t idx;                       // the index of the latest row
  int64_t max_t, max_t_before;       // the latest time at idx, and at idx - 1 (INT64_MIN: none)
  bool bad_times, bad_request_times; // a token out of order or outside its request
} history_req;

static void history_req_end(const history_req *q, rq_request_history *out) {
  if (q->n == 0) return;
  out->dup_tokens += q->n - q->distinct;
  out->token_gaps += q->distinct != q->out || q->hi != q->out - 1;
  out->bad_times += q->bad_times && !q->bad_request_times; // the latter counted by its own query
}

// Duplicate token rows (beyond the first for a (request, idx)), requests whose distinct token
// indexes are not exactly 0 .. output_tokens - 1 (a row missing, or one past what the request
// says it delivered), and requests with a token before arrival, after the finish, or before one
// at the index ahead of it (a negative latency, as a wall clock that jumped back would give):
// one pass over the deployment's token rows, linear but for their sort. Adds to out's
// dup_tokens, token_gaps and bad_times.
static sc_status history_tokens(sqlite3 *db, int64_t run_id, int64_t deployment_id,
                                rq_request_history *out, sc_error *err) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db, history_token_rows_sql, -1, &st, NULL) != SQLITE_OK)
    return sc_fail(err, SC_IO, "history check: preparing the token query: %s",
                   sqlite3_errmsg(db));
  sqlite3_bind_int64(st, 1, run_id);
  sqlite3_bind_int64(st, 2, deployment_id);
  history_req q = {.n = 0};
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t id = sqlite3_column_int64(st, 0), idx = sqlite3_column_int64(st, 5),
            t = sqlite3_column_int64(st, 6);
    if (q.n == 0 || id != q.id) {
      history_req_end(&q, out);
      q = (history_req){.id = id,
                        .out = sqlite3_column_int64(st, 1),
                        .idx = idx,
                        .max_t = INT64_MIN,
                        .max_t_before = INT64_MIN,
                        .bad_request_times = sqlite3_column_int(st, 4) != 0};
    } else if (idx != q.idx) {
      q.max_t_before = idx == q.idx + 1 ? q.max_t : INT64_MIN;
      q.max_t = INT64_MIN;
      q.idx = idx;
    }
    if (q.n == 0 || idx != q.hi) q.distinct++;
    q.n++;
    q.hi = idx;
    if (t > q.max_t) q.max_t = t;
    if (t < sqlite3_column_int64(st, 2) ||
        (sqlite3_column_type(st, 3) != SQLITE_NULL && t > sqlite3_column_int64(st, 3)) ||
        (q.max_t_before != INT64_MIN && t < q.max_t_before))
      q.bad_times = true;
  }
  history_req_end(&q, out);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE)
    return sc_fail(err, SC_IO, "history check: the token query: %s", sqlite3_errmsg(db));
  return SC_OK;
}

// Runs sql with ?1 run_id, ?2 deployment_id (and ?3 sent when the statement has it) and reads
// its one row's first ncol integer columns into v. SC_IO with sqlite's message on error.
static sc_status history_row(sqlite3 *db, const char *sql, const char *what, int64_t run_id,
                             int64_t deployment_id, int64_t sent, int64_t *v, int ncol,
                             sc_error *err) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  if (rc != SQLITE_OK)
    return sc_fail(err, SC_IO, "history check: preparing the %s query: %s", what,
                   sqlite3_errmsg(db));
  sqlite3_bind_int64(st, 1, run_id);
  sqlite3_bind_int64(st, 2, deployment_id);
  if (sqlite3_bind_parameter_count(st) >= 3) sqlite3_bind_int64(st, 3, sent);
  rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    sc_status s = sc_fail(err, SC_IO, "history check: the %s query: %s", what,
                          rc == SQLITE_DONE ? "no row" : sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return s;
  }
  for (int i = 0; i < ncol; i++) v[i] = sqlite3_column_int64(st, i);
  sqlite3_finalize(st);
  return SC_OK;
}

sc_status rq_request_history_read(sqlite3 *db, int64_t run_id, int64_t deployment_id,
                                  int64_t sent, rq_request_history *out, sc_error *err) {
  int64_t r[HISTORY_REQUEST_COLS];
  SC_TRY(history_row(db, history_requests_sql, "request", run_id, deployment_id, sent, r,
                     HISTORY_REQUEST_COLS, err));
  *out = (rq_request_history){.recorded = r[0],
                              .double_done = r[1],
                              .in_range = r[2],
                              .ok = r[3],
                              .cancelled = r[4],
                              .failed = r[5],
                              .timeout = r[6],
                              .bad_status = r[7],
                              .abandoned = r[8]};
  SC_TRY(history_row(db, history_tokenless_sql, "token", run_id, deployment_id, sent,
                     &out->token_gaps, 1, err));
  SC_TRY(history_row(db, history_times_sql, "time", run_id, deployment_id, sent,
                     &out->bad_times, 1, err));
  return history_tokens(db, run_id, deployment_id, out, err);
}

// --- a sim run's sensitivity
int rq_pooled_means_read(sqlite3 *db, int64_t run_id, rq_pooled_means *out, int cap) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db,
                         "SELECT d.idx, d.id, d.label, "
                         "(SELECT value FROM metric m WHERE m.deployment_id = d.id AND "
                         "m.phase_id IS NULL AND m.class = '' AND m.name = 'ttft_mean_ms'), "
                         "(SELECT value FROM metric m WHERE m.deployment_id = d.id AND "
                         "m.phase_id IS NULL AND m.class = '' AND m.name = 'tpot_mean_ms') "
                         "FROM deployment d WHERE d.run_id = ?1 ORDER BY d.idx",
                         -1, &st, NULL) != SQLITE_OK)
    return -1;
  sqlite3_bind_int64(st, 1, run_id);
  int n = 0;
  while (n < cap && sqlite3_step(st) == SQLITE_ROW) {
    rq_pooled_means *r = &out[n++];
    r->dep_id = sqlite3_column_int64(st, 1);
    snprintf(r->label, sizeof r->label, "%s", (const char *)sqlite3_column_text(st, 2));
    double *v[2] = {&r->ttft_mean_ms, &r->tpot_mean_ms};
    for (int k = 0; k < 2; k++)
      *v[k] = sqlite3_column_type(st, 3 + k) == SQLITE_NULL ? NAN
                                                            : sqlite3_column_double(st, 3 + k);
  }
  sqlite3_finalize(st);
  return n;
}

// --- requests that did not complete, by kind
sc_status rq_error_kinds(sqlite3 *db, int64_t run_id,
                         bool (*fn)(void *ud, const char *label, const char *kind, double n),
                         void *ud, sc_error *err) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db,
                         "SELECT d.label, substr(m.name, 8), m.value FROM metric m "
                         "JOIN deployment d ON d.id = m.deployment_id WHERE m.run_id = ?1 "
                         "AND m.phase_id IS NULL AND m.class = '' AND m.name LIKE 'errors\\_%' "
                         "ESCAPE '\\' ORDER BY d.idx, m.name",
                         -1, &st, NULL) != SQLITE_OK)
    return sc_fail(err, SC_IO, "reading error kinds: %s", sqlite3_errmsg(db));
  sqlite3_bind_int64(st, 1, run_id);
  sc_status s = SC_OK;
  while (s == SC_OK && sqlite3_step(st) == SQLITE_ROW) {
    const char *label = (const char *)sqlite3_column_text(st, 0);
    const char *kind = (const char *)sqlite3_column_text(st, 1);
    if (!fn(ud, label ? label : "", kind ? kind : "", sqlite3_column_double(st, 2)))
      s = sc_fail(err, SC_OOM, "reading error kinds: out of memory");
  }
  sqlite3_finalize(st);
  return s;
}


// --- the metrics audit

int rq_metrics_audit(sqlite3 *db, int64_t run_id, int64_t dep_id, bool token_rows, char *why,
                     size_t cap) {
  // The formulas of docs/metrics.md, once more in SQL: warm-up requests are not counted;
  // latencies are over completed (ok) requests, TPOT over those with two tokens or more. The
  // token rows are counted as the lengths of their arrays, the rows the token view would give
  // one by one (a third of the time for an hour's 5 million).
  static const char *const sql =
      "SELECT count(*), "
      "  total(status = 'ok'), " // 0, not NULL, over no rows (every request a warm-up)
      "  total(CASE WHEN status = 'ok' THEN output_tokens END), "
      "  avg(CASE WHEN status = 'ok' AND output_tokens >= 1 "
      "      THEN (first_token_ns - arrival_ns) / 1e6 END), "
      "  avg(CASE WHEN status = 'ok' AND output_tokens >= 2 "
      "      THEN (finish_ns - first_token_ns) / 1e6 / (output_tokens - 1) END), "
      "  avg(CASE WHEN status = 'ok' THEN (finish_ns - arrival_ns) / 1e6 END), "
      "  (SELECT total(json_array_length(t.t_ns)) FROM token_times t "
      "   JOIN request q ON q.id = t.request_id "
      "   WHERE q.deployment_id = ?2 AND q.warmup = 0 AND q.status = 'ok') "
      "FROM request WHERE run_id = ?1 AND deployment_id = ?2 AND warmup = 0";
  static const char *const names[] = {"requests",     "ok_requests",  "output_tokens",
                                      "ttft_mean_ms", "tpot_mean_ms", "e2el_mean_ms",
                                      "output_tokens"};
  enum { N = sizeof names / sizeof names[0] };
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
    snprintf(why, cap, "metrics audit: %s", sqlite3_errmsg(db));
    return -1;
  }
  sqlite3_bind_int64(st, 1, run_id);
  sqlite3_bind_int64(st, 2, dep_id);
  double rows[N];
  for (int i = 0; i < N; i++) rows[i] = NAN;
  if (sqlite3_step(st) == SQLITE_ROW)
    for (int i = 0; i < N; i++)
      if (sqlite3_column_type(st, i) != SQLITE_NULL) rows[i] = sqlite3_column_double(st, i);
  sqlite3_finalize(st);
  rq_metric_cache mc = {0};
  int bad = 0;
  for (int i = 0; i < (token_rows ? N : N - 1); i++) {
    double stored = rq_metric(db, &mc, run_id, dep_id, 0, NULL, names[i]);
    bool same = (isnan(stored) && isnan(rows[i])) ||
                fabs(stored - rows[i]) <= 1e-6 * fmax(1.0, fabs(rows[i]));
    if (same) continue;
    if (bad++ == 0)
      snprintf(why, cap, "%s: %.6g stored, %.6g from the %s rows", names[i], stored, rows[i],
               i == N - 1 ? "token" : "request");
  }
  rq_metric_cache_free(&mc);
  return bad;
}

// --- measured request times

sc_status rq_request_times(sqlite3 *db, int64_t run_id, rq_req_time **out, int *n, sc_error *err) {
  *out = NULL;
  *n = 0;
  static const char *q =
      "SELECT prompt_tokens, output_tokens, arrival_ns, first_token_ns, finish_ns FROM request "
      "WHERE run_id = ?1 AND status = 'ok' AND first_token_ns IS NOT NULL AND finish_ns IS NOT "
      "NULL AND deployment_id = (SELECT id FROM deployment WHERE run_id = ?1 ORDER BY idx, id "
      "LIMIT 1) ORDER BY arrival_ns, seq";
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db, q, -1, &st, NULL) != SQLITE_OK)
    return sc_fail(err, SC_IO, "request times: %s", sqlite3_errmsg(db));
  sqlite3_bind_int64(st, 1, run_id);
  rq_req_time *v = NULL;
  int cap = 0, k = 0, rc;
  sc_status s = SC_OK;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (k == cap) {
      cap = cap ? cap * 2 : 256;
      rq_req_time *nv = realloc(v, (size_t)cap * sizeof *nv);
      if (!nv) {
        s = sc_fail(err, SC_OOM, "request times: out of memory");
        break;
      }
      v = nv;
    }
    v[k++] = (rq_req_time){.prompt_tokens = sqlite3_column_int(st, 0),
                           .output_tokens = sqlite3_column_int(st, 1),
                           .arrival_ns = (uint64_t)sqlite3_column_int64(st, 2),
                           .first_token_ns = (uint64_t)sqlite3_column_int64(st, 3),
                           .finish_ns = (uint64_t)sqlite3_column_int64(st, 4)};
  }
  if (s == SC_OK && rc != SQLITE_DONE)
    s = sc_fail(err, SC_IO, "request times: %s", sqlite3_errmsg(db));
  sqlite3_finalize(st);
  if (s == SC_OK && k == 0)
    s = sc_fail(err, SC_INVALID, "run %lld has no completed requests to calibrate against",
                (long long)run_id);
  if (s != SC_OK) {
    free(v);
    return s;
  }
  *out = v;
  *n = k;
  return SC_OK;
}

// --- capacity searches

static void col_str(sqlite3_stmt *st, int i, char *out, size_t n) {
  const char *v = (const char *)sqlite3_column_text(st, i);
  snprintf(out, n, "%s", v ? v : "");
}

void rq_capacity_free(rq_capacity *c) {
  if (!c) return;
  free(c->layouts);
  free(c->points);
  memset(c, 0, sizeof *c);
}

sc_status rq_capacity_load(sqlite3 *db, int64_t id, rq_capacity *c, sc_error *err) {
  memset(c, 0, sizeof *c);
  sqlite3_stmt *st = NULL;
  const char *head =
      "SELECT id, scenario, record, started_at, git_rev, slo, costs, note, seed, target_rate, "
      "rate_lo, rate_hi, iters, best, runner_up, served FROM capacity "
      "WHERE id = ?1 OR (?1 = 0 AND id = (SELECT max(id) FROM capacity))";
  if (sqlite3_prepare_v2(db, head, -1, &st, NULL) != SQLITE_OK)
    return sc_fail(err, SC_IO, "reading capacity searches: %s", sqlite3_errmsg(db));
  sqlite3_bind_int64(st, 1, id);
  int rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
      return sc_fail(err, SC_IO, "reading capacity search %lld: %s", (long long)id,
                     sqlite3_errmsg(db));
    if (id) return sc_fail(err, SC_INVALID, "no capacity search %lld in the database", (long long)id);
    return sc_fail(err, SC_INVALID, "no capacity searches in the database");
  }
  c->id = sqlite3_column_int64(st, 0);
  col_str(st, 1, c->scenario, sizeof c->scenario);
  col_str(st, 2, c->record, sizeof c->record);
  col_str(st, 3, c->started_at, sizeof c->started_at);
  col_str(st, 4, c->git_rev, sizeof c->git_rev);
  col_str(st, 5, c->slo, sizeof c->slo);
  col_str(st, 6, c->costs, sizeof c->costs);
  col_str(st, 7, c->note, sizeof c->note);
  c->seed = sqlite3_column_int64(st, 8);
  c->target_rate = sqlite3_column_double(st, 9);
  c->rate_lo = sqlite3_column_double(st, 10);
  c->rate_hi = sqlite3_column_double(st, 11);
  c->iters = sqlite3_column_int(st, 12);
  c->best = sqlite3_column_type(st, 13) == SQLITE_NULL ? -1 : sqlite3_column_int(st, 13);
  c->runner_up = sqlite3_column_type(st, 14) == SQLITE_NULL ? -1 : sqlite3_column_int(st, 14);
  c->served = sqlite3_column_int(st, 15) != 0;
  sqlite3_finalize(st);
  // a file of version 4 or older (opened read-only, not migrated) has no interval: its
  // bounds are the prediction; one written before the knee has none (NULL)
  const char *ls = "SELECT kind, tp, pp, dp, gpus, label, cost_per_hour, max_rate, capped, "
                   "output_tok_s, cost_per_mtok, limit_text, max_rate_lo, max_rate_hi, error, "
                   "knee_rate FROM capacity_layout WHERE capacity_id = ?1 ORDER BY idx";
  const char *ls5 = "SELECT kind, tp, pp, dp, gpus, label, cost_per_hour, max_rate, capped, "
                    "output_tok_s, cost_per_mtok, limit_text, max_rate_lo, max_rate_hi, error, "
                    "NULL FROM capacity_layout WHERE capacity_id = ?1 ORDER BY idx";
  const char *ls4 = "SELECT kind, tp, pp, dp, gpus, label, cost_per_hour, max_rate, capped, "
                    "output_tok_s, cost_per_mtok, limit_text, max_rate, max_rate, 0, NULL "
                    "FROM capacity_layout WHERE capacity_id = ?1 ORDER BY idx";
  bool v5 = sqlite3_prepare_v2(db, ls, -1, &st, NULL) == SQLITE_OK ||
            sqlite3_prepare_v2(db, ls5, -1, &st, NULL) == SQLITE_OK;
  if (!v5 && sqlite3_prepare_v2(db, ls4, -1, &st, NULL) != SQLITE_OK)
    return sc_fail(err, SC_IO, "reading capacity layouts: %s", sqlite3_errmsg(db));
  sqlite3_bind_int64(st, 1, c->id);
  int cap = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (c->n_layouts == cap) {
      cap = cap ? cap * 2 : 32;
      store_cap_layout *p = realloc(c->layouts, (size_t)cap * sizeof *p);
      if (!p) {
        sqlite3_finalize(st);
        rq_capacity_free(c);
        return sc_fail(err, SC_OOM, "reading capacity layouts: out of memory");
      }
      c->layouts = p;
    }
    store_cap_layout *l = &c->layouts[c->n_layouts++];
    memset(l, 0, sizeof *l);
    col_str(st, 0, l->kind, sizeof l->kind);
    l->tp = sqlite3_column_int(st, 1);
    l->pp = sqlite3_column_int(st, 2);
    l->dp = sqlite3_column_int(st, 3);
    l->gpus = sqlite3_column_int(st, 4);
    col_str(st, 5, l->label, sizeof l->label);
    l->cost_per_hour = sqlite3_column_double(st, 6);
    l->max_rate = col_real(st, 7);
    l->capped = sqlite3_column_int(st, 8) != 0;
    l->output_tok_s = col_real(st, 9);
    l->cost_per_mtok = col_real(st, 10);
    col_str(st, 11, l->limit, sizeof l->limit);
    l->max_rate_lo = col_real(st, 12);
    l->max_rate_hi = col_real(st, 13);
    l->error = sqlite3_column_double(st, 14);
    l->knee_rate = col_real(st, 15);
  }
  sqlite3_finalize(st);
  const char *ps = v5 ? "SELECT layout, rate, pass, ttft_p95_ms, tpot_p95_ms, e2el_p95_ms, "
                        "output_tok_s, error_rate, failed, bound FROM capacity_point WHERE "
                        "capacity_id = ?1 ORDER BY layout, idx"
                      : "SELECT layout, rate, pass, ttft_p95_ms, tpot_p95_ms, e2el_p95_ms, "
                        "output_tok_s, error_rate, failed, 0 FROM capacity_point WHERE "
                        "capacity_id = ?1 ORDER BY layout, idx";
  if (sqlite3_prepare_v2(db, ps, -1, &st, NULL) != SQLITE_OK) {
    rq_capacity_free(c);
    return sc_fail(err, SC_IO, "reading capacity points: %s", sqlite3_errmsg(db));
  }
  sqlite3_bind_int64(st, 1, c->id);
  cap = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (c->n_points == cap) {
      cap = cap ? cap * 2 : 128;
      store_cap_point *p = realloc(c->points, (size_t)cap * sizeof *p);
      if (!p) {
        sqlite3_finalize(st);
        rq_capacity_free(c);
        return sc_fail(err, SC_OOM, "reading capacity points: out of memory");
      }
      c->points = p;
    }
    store_cap_point *p = &c->points[c->n_points++];
    memset(p, 0, sizeof *p);
    p->layout = sqlite3_column_int(st, 0);
    p->rate = sqlite3_column_double(st, 1);
    p->pass = sqlite3_column_int(st, 2) != 0;
    p->ttft_p95_ms = col_real(st, 3);
    p->tpot_p95_ms = col_real(st, 4);
    p->e2el_p95_ms = col_real(st, 5);
    p->output_tok_s = col_real(st, 6);
    p->error_rate = col_real(st, 7);
    col_str(st, 8, p->failed, sizeof p->failed);
    p->bound = sqlite3_column_int(st, 9);
  }
  sqlite3_finalize(st);
  return SC_OK;
}
