// The regression gate (reports/gate.h): the metric rows of two repetition groups, matched by
// deployment label, phase name and metric name, compared direction-aware; the one-sided exact
// Mann-Whitney U test by dynamic programming over rank sums.
#include "reports/gate.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reports/metrics.h"

const char *const gate_default_metrics[] = {
    "ttft_p50_ms", "ttft_p95_ms",  "tpot_p50_ms", "tpot_p95_ms",    "itl_p50_ms",
    "itl_p95_ms",  "e2el_p50_ms",  "e2el_p95_ms", "output_tok_s",   "goodput_rps",
    "error_rate",  "lost_requests", "kv_peak_frac", "detect_ms",    "recover_ms",
    NULL};

gate_options gate_options_defaults(void) {
  return (gate_options){.tol_real = 0.05, .tol_sim = 0.01, .alpha = 0.05};
}

bool gate_options_from_run(sqlite3 *db, int64_t run_id, unsigned set, gate_options *o) {
  sqlite3_stmt *st = NULL;
  json_t *root = NULL;
  if (sqlite3_prepare_v2(db, "SELECT config FROM run WHERE id = ?1", -1, &st, NULL) == SQLITE_OK) {
    sqlite3_bind_int64(st, 1, run_id);
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
      root = json_loads((const char *)sqlite3_column_text(st, 0), 0, NULL);
  }
  sqlite3_finalize(st);
  json_t *g = root ? json_object_get(root, "gate") : NULL;
  if (!json_is_object(g)) {
    json_decref(root);
    return false;
  }
  json_t *t = json_object_get(g, "tolerance"), *a = json_object_get(g, "alpha");
  json_t *m = json_object_get(g, "metrics");
  if (!(set & 1) && json_is_number(t)) o->tol_real = o->tol_sim = json_number_value(t);
  if (!(set & 2) && json_is_number(a)) o->alpha = json_number_value(a);
  if (!(set & 4) && json_is_object(m) && json_object_size(m) > 0) {
    const char *key;
    json_t *val;
    o->n_metrics = 0;
    json_object_foreach(m, key, val) {
      if (o->n_metrics == GATE_MAX_METRICS) break;
      gate_metric_tol *mt = &o->metrics[o->n_metrics++];
      snprintf(mt->name, sizeof mt->name, "%s", key);
      // a --tolerance on the command line wins over the scenario's per-metric ones too
      mt->tol = json_is_number(val) && !(set & 1) ? json_number_value(val) : -1;
    }
  }
  json_decref(root);
  return true;
}

const char *gate_verdict_name(gate_verdict v) {
  switch (v) {
  case GATE_IMPROVED: return "improved";
  case GATE_SAME: return "same";
  case GATE_WORSE_NOISE: return "worse within noise";
  case GATE_REGRESSED: return "REGRESSED";
  case GATE_NEW: return "new (no baseline)";
  case GATE_MISSING: return "missing";
  }
  return "?";
}

// --- Mann-Whitney U

static int cmp_rank(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double gate_mann_whitney_greater(const double *a, int n_a, const double *b, int n_b) {
  int n = n_a + n_b;
  if (n_a < 1 || n_b < 1) return NAN;
  // values with their group (b: 1), sorted; mid-ranks doubled so they are integers
  double (*v)[2] = malloc((size_t)n * sizeof *v);
  int *r2 = malloc((size_t)n * sizeof *r2);
  if (!v || !r2) {
    free(v);
    free(r2);
    return NAN;
  }
  for (int i = 0; i < n_a; i++) v[i][0] = a[i], v[i][1] = 0;
  for (int i = 0; i < n_b; i++) v[n_a + i][0] = b[i], v[n_a + i][1] = 1;
  qsort(v, (size_t)n, sizeof *v, cmp_rank);
  int w_obs = 0;
  for (int i = 0; i < n;) {
    int j = i;
    while (j < n && v[j][0] == v[i][0]) j++;
    for (int k = i; k < j; k++) r2[k] = i + 1 + j; // 2 x the mid-rank (i+1 + j) / 2
    i = j;
  }
  for (int i = 0; i < n; i++)
    if (v[i][1] > 0.5) w_obs += r2[i];
  double p;
  if (n <= 60) {
    // ways[k][s]: subsets of k of the ranks seen so far whose doubled rank sum is s
    int smax = 2 * n * (n + 1) / 2 + 1;
    double *ways = calloc((size_t)(n_b + 1) * (size_t)smax, sizeof *ways);
    if (!ways) {
      free(v);
      free(r2);
      return NAN;
    }
    ways[0] = 1;
    for (int i = 0; i < n; i++)
      for (int k = (i + 1 < n_b ? i + 1 : n_b); k >= 1; k--)
        for (int s = smax - 1; s >= r2[i]; s--)
          ways[(size_t)k * smax + s] += ways[(size_t)(k - 1) * smax + s - r2[i]];
    double total = 0, tail = 0;
    for (int s = 0; s < smax; s++) {
      double w = ways[(size_t)n_b * smax + s];
      total += w;
      if (s >= w_obs) tail += w;
    }
    free(ways);
    p = total > 0 ? tail / total : NAN;
  } else {
    double mean = n_b * (n + 1) / 2.0, sd = sqrt(n_a * (double)n_b * (n + 1) / 12.0);
    double z = (w_obs / 2.0 - 0.5 - mean) / sd;
    p = 0.5 * erfc(z / sqrt(2.0));
  }
  free(v);
  free(r2);
  return p;
}

// --- loading

int gate_group(sqlite3 *db, int64_t run_id, int64_t *out, int cap) {
  bool grouped = false;
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db, "SELECT 1 FROM pragma_table_info('run') WHERE name = "
                             "'repeat_group'", -1, &st, NULL) == SQLITE_OK)
    grouped = sqlite3_step(st) == SQLITE_ROW;
  sqlite3_finalize(st);
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

// One (deployment, phase, metric) with its values per side.
typedef struct series {
  gate_row row;
  double vals[2][GATE_MAX_REPS]; // [0] baseline, [1] current
  int n[2];
} series;

typedef struct table {
  series *s;
  int n, cap;
} table;

static series *find_or_add(table *t, const char *dep, const char *phase, const char *metric) {
  for (int i = 0; i < t->n; i++) {
    gate_row *r = &t->s[i].row;
    if (!strcmp(r->deployment, dep) && !strcmp(r->phase, phase) && !strcmp(r->metric, metric))
      return &t->s[i];
  }
  if (t->n == t->cap) {
    int cap = t->cap ? 2 * t->cap : 64;
    series *p = realloc(t->s, (size_t)cap * sizeof *p);
    if (!p) return NULL;
    t->s = p;
    t->cap = cap;
  }
  series *s = &t->s[t->n++];
  memset(s, 0, sizeof *s);
  snprintf(s->row.deployment, sizeof s->row.deployment, "%s", dep);
  snprintf(s->row.phase, sizeof s->row.phase, "%s", phase);
  snprintf(s->row.metric, sizeof s->row.metric, "%s", metric);
  return s;
}

// The tolerance for metric name, or -2 when it is not compared.
static double tol_of(const gate_options *o, const char *name, double dflt) {
  if (o->n_metrics == 0) {
    for (int i = 0; gate_default_metrics[i]; i++)
      if (!strcmp(gate_default_metrics[i], name)) return dflt;
    return -2;
  }
  for (int i = 0; i < o->n_metrics; i++)
    if (!strcmp(o->metrics[i].name, name))
      return o->metrics[i].tol >= 0 ? o->metrics[i].tol : dflt;
  return -2;
}

// Adds the metric rows of `run` to side `side` of t.
static sc_status load_run(sqlite3 *db, int64_t run, int side, const gate_options *o, double dflt,
                          table *t, sc_error *err) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db,
                         "SELECT d.label, coalesce(p.name, ''), m.name, m.value FROM metric m "
                         "JOIN deployment d ON d.id = m.deployment_id LEFT JOIN phase p ON p.id "
                         "= m.phase_id WHERE m.run_id = ?1 AND m.class = '' AND m.value IS NOT "
                         "NULL ORDER BY d.idx, m.phase_id, m.name",
                         -1, &st, NULL) != SQLITE_OK)
    return sc_fail(err, SC_IO, "gate: reading metrics: %s", sqlite3_errmsg(db));
  sqlite3_bind_int64(st, 1, run);
  sc_status s = SC_OK;
  while (s == SC_OK && sqlite3_step(st) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(st, 2);
    double tol = tol_of(o, name, dflt);
    if (tol < -1) continue;
    series *se = find_or_add(t, (const char *)sqlite3_column_text(st, 0),
                             (const char *)sqlite3_column_text(st, 1), name);
    if (!se) {
      s = sc_fail(err, SC_OOM, "gate: out of memory");
      break;
    }
    se->row.tol = tol;
    if (se->n[side] < GATE_MAX_REPS) se->vals[side][se->n[side]++] = sqlite3_column_double(st, 3);
  }
  sqlite3_finalize(st);
  return s;
}

// The scenario name and mode of run id; false when there is no such run.
static bool run_info(sqlite3 *db, int64_t id, char *scen, size_t cap, bool *sim) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db, "SELECT scenario, mode FROM run WHERE id = ?1", -1, &st, NULL) !=
      SQLITE_OK)
    return false;
  sqlite3_bind_int64(st, 1, id);
  bool ok = sqlite3_step(st) == SQLITE_ROW;
  if (ok) {
    snprintf(scen, cap, "%s", (const char *)sqlite3_column_text(st, 0));
    *sim = !strcmp((const char *)sqlite3_column_text(st, 1), "sim");
  }
  sqlite3_finalize(st);
  return ok;
}

// --- judging

static double median(double *v, int n) {
  if (n == 0) return NAN;
  qsort(v, (size_t)n, sizeof *v, cmp_rank);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void judge(series *se, double alpha) {
  gate_row *r = &se->row;
  r->n_base = se->n[0];
  r->n_cur = se->n[1];
  r->base = median(se->vals[0], se->n[0]); // sorts the values
  r->cur = median(se->vals[1], se->n[1]);
  r->p = NAN;
  r->noise = se->n[0] >= 2 && r->base != 0
                 ? (se->vals[0][se->n[0] - 1] - se->vals[0][0]) / 2 / fabs(r->base)
                 : NAN;
  if (se->n[0] == 0) {
    r->v = GATE_NEW;
    r->change = r->worse = NAN;
    return;
  }
  if (se->n[1] == 0) {
    r->v = GATE_MISSING;
    r->change = r->worse = NAN;
    return;
  }
  const mt_metric_info *mi = mt_metric_find(r->metric);
  double sign = mi && mi->dir == MT_HIGHER_BETTER ? -1 : 1;
  if (r->base != 0) {
    r->change = (r->cur - r->base) / fabs(r->base);
    r->worse = sign * r->change;
  } else {
    r->change = NAN;
    r->worse = r->cur == 0 ? 0 : sign * (r->cur > 0 ? INFINITY : -INFINITY);
  }
  bool noisy = se->n[0] >= 2 && se->n[1] >= 2;
  if (fabs(r->worse) <= r->tol) {
    r->v = GATE_SAME;
    return;
  }
  if (!noisy) {
    r->v = r->worse > 0 ? GATE_REGRESSED : GATE_IMPROVED;
    return;
  }
  // Is the current group shifted the worse (or better) way? Lower-is-better: larger values are
  // worse, so test "current greater"; higher-is-better: negate both sides.
  double a[GATE_MAX_REPS], b[GATE_MAX_REPS];
  bool up = (r->worse > 0) == (sign > 0); // the shift tested is towards larger values
  for (int i = 0; i < se->n[0]; i++) a[i] = up ? se->vals[0][i] : -se->vals[0][i];
  for (int i = 0; i < se->n[1]; i++) b[i] = up ? se->vals[1][i] : -se->vals[1][i];
  r->p = gate_mann_whitney_greater(a, se->n[0], b, se->n[1]);
  bool sig = r->p < alpha;
  if (r->worse > 0) r->v = sig ? GATE_REGRESSED : GATE_WORSE_NOISE;
  else r->v = sig ? GATE_IMPROVED : GATE_SAME;
}

sc_status gate_compare(sqlite3 *cur_db, int64_t cur_run, sqlite3 *base_db, int64_t base_run,
                       const gate_options *o, gate_result *out, sc_error *err) {
  memset(out, 0, sizeof *out);
  char sc_cur[128], sc_base[128];
  bool sim_cur = false, sim_base = false;
  if (!run_info(cur_db, cur_run, sc_cur, sizeof sc_cur, &sim_cur))
    return sc_fail(err, SC_INVALID, "gate: no run %lld in the current database",
                   (long long)cur_run);
  if (!run_info(base_db, base_run, sc_base, sizeof sc_base, &sim_base))
    return sc_fail(err, SC_INVALID, "gate: no run %lld in the baseline database",
                   (long long)base_run);
  if (strcmp(sc_cur, sc_base) != 0)
    return sc_fail(err, SC_INVALID, "gate: run %lld is of scenario '%s' but the baseline run %lld "
                   "is of scenario '%s': runs of different scenarios are not compared",
                   (long long)cur_run, sc_cur, (long long)base_run, sc_base);
  int64_t gb[GATE_MAX_REPS], gc[GATE_MAX_REPS];
  int nb = gate_group(base_db, base_run, gb, GATE_MAX_REPS);
  int nc = gate_group(cur_db, cur_run, gc, GATE_MAX_REPS);
  out->sim = sim_cur && sim_base;
  double dflt = out->sim ? o->tol_sim : o->tol_real;
  table t = {0};
  sc_status s = SC_OK;
  for (int i = 0; i < nb && s == SC_OK; i++) s = load_run(base_db, gb[i], 0, o, dflt, &t, err);
  for (int i = 0; i < nc && s == SC_OK; i++) s = load_run(cur_db, gc[i], 1, o, dflt, &t, err);
  if (s == SC_OK && t.n > 0 && !(out->rows = calloc((size_t)t.n, sizeof *out->rows)))
    s = sc_fail(err, SC_OOM, "gate: out of memory");
  if (s != SC_OK) {
    free(t.s);
    return s;
  }
  snprintf(out->scenario, sizeof out->scenario, "%s", sc_cur);
  out->base_run = gb[0];
  out->cur_run = gc[0];
  out->n_base_reps = nb;
  out->n_cur_reps = nc;
  for (int i = 0; i < t.n; i++) {
    judge(&t.s[i], o->alpha);
    out->rows[out->n++] = t.s[i].row;
    out->regressed += t.s[i].row.v == GATE_REGRESSED;
  }
  free(t.s);
  return SC_OK;
}

void gate_result_free(gate_result *r) {
  if (!r) return;
  free(r->rows);
  memset(r, 0, sizeof *r);
}
