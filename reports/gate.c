// The regression gate (reports/gate.h): the metric rows of two repetition groups, matched by
// deployment label, phase name and metric name, compared direction-aware; the one-sided exact
// Mann-Whitney U test by dynamic programming over rank sums. Choosing the runs, printing and
// the JUnit and JSON files are cli/cmd_gate.c's; the rows are read by reports/query.c.
#include "reports/gate.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/util.h"
#include "reports/metrics.h"
#include "reports/query.h"

gate_options gate_options_defaults(void) {
  return (gate_options){.tol_real = 0.05, .tol_sim = 0.01, .alpha = 0.01};
}

bool gate_options_from_run(sqlite3 *db, int64_t run_id, unsigned set, gate_options *o) {
  char *config = rq_run_config(db, run_id);
  json_t *root = config ? json_loads(config, 0, NULL) : NULL;
  free(config);
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
  case GATE_MISSING: return "MISSING";
  case GATE_CHANGED: return "CHANGED (better)";
  }
  return "?";
}

// --- Mann-Whitney U


// The doubled mid-ranks (integers) of the values of a and b together, sorted into v (value,
// 1 for b); returns the doubled rank sum of b.
static int doubled_ranks(const double *a, int n_a, const double *b, int n_b, double (*v)[2],
                         int *r2) {
  int n = n_a + n_b, w = 0;
  for (int i = 0; i < n_a; i++) v[i][0] = a[i], v[i][1] = 0;
  for (int i = 0; i < n_b; i++) v[n_a + i][0] = b[i], v[n_a + i][1] = 1;
  // sc_cmp_double reads the first double of each row: the rows sort by value
  qsort(v, (size_t)n, sizeof *v, sc_cmp_double);
  for (int i = 0; i < n;) {
    int j = i;
    while (j < n && v[j][0] == v[i][0]) j++;
    for (int k = i; k < j; k++) r2[k] = i + 1 + j; // 2 x the mid-rank (i+1 + j) / 2
    i = j;
  }
  for (int i = 0; i < n; i++)
    if (v[i][1] > 0.5) w += r2[i];
  return w;
}

// P(the doubled rank sum of k of the n ranks r2, drawn at random, >= w): counts the subsets by
// rank sum, one rank at a time. NaN when memory runs out.
static double exact_tail(const int *r2, int n, int k, int w) {
  int smax = n * (n + 1) + 1; // doubled sums are < 2 x n(n+1)/2 + 1
  // ways[j][s]: subsets of j of the ranks seen so far whose doubled rank sum is s
  double *ways = calloc((size_t)(k + 1) * (size_t)smax, sizeof *ways);
  if (!ways) return NAN;
  ways[0] = 1;
  for (int i = 0; i < n; i++)
    for (int j = (i + 1 < k ? i + 1 : k); j >= 1; j--)
      for (int s = smax - 1; s >= r2[i]; s--)
        ways[(size_t)j * smax + s] += ways[(size_t)(j - 1) * smax + s - r2[i]];
  double total = 0, tail = 0;
  for (int s = 0; s < smax; s++) {
    total += ways[(size_t)k * smax + s];
    if (s >= w) tail += ways[(size_t)k * smax + s];
  }
  free(ways);
  return total > 0 ? tail / total : NAN;
}

double gate_mann_whitney_greater(const double *a, int n_a, const double *b, int n_b) {
  int n = n_a + n_b;
  if (n_a < 1 || n_b < 1) return NAN;
  double (*v)[2] = malloc((size_t)n * sizeof *v);
  int *r2 = malloc((size_t)n * sizeof *r2);
  double p = NAN;
  if (v && r2) {
    int w = doubled_ranks(a, n_a, b, n_b, v, r2);
    if (n <= 60) {
      p = exact_tail(r2, n, n_b, w);
    } else { // normal approximation of the rank sum, with continuity correction
      double mean = n_b * (n + 1) / 2.0, sd = sqrt(n_a * (double)n_b * (n + 1) / 12.0);
      p = 0.5 * erfc((w / 2.0 - 0.5 - mean) / sd / sqrt(2.0));
    }
  }
  free(v);
  free(r2);
  return p;
}

// --- loading

bool gate_db_grouped(sqlite3 *db) { return rq_has_repeat_groups(db); }

int gate_group(sqlite3 *db, int64_t run_id, int64_t *out, int cap) {
  return rq_group_runs(db, run_id, gate_db_grouped(db), out, cap);
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

// The tolerance for metric name (a prompt class's row: "CLASS:NAME"), or -2 when it is not
// compared. A bare name chosen (by default or by name) covers every class's row of it too;
// CLASS:NAME chosen by name covers that class's row, with its own tolerance when given.
static double tol_of(const gate_options *o, const char *name, double dflt) {
  const char *base = mt_metric_base(name);
  if (o->n_metrics == 0) {
    const mt_metric_info *mi = mt_metric_find(base);
    return mi && mi->gate > 0 ? dflt : -2; // the table's default list
  }
  for (int pass = 0; pass < (base != name ? 2 : 1); pass++) // the exact name first
    for (int i = 0; i < o->n_metrics; i++)
      if (!strcmp(o->metrics[i].name, pass ? base : name))
        return o->metrics[i].tol >= 0 ? o->metrics[i].tol : dflt;
  return -2;
}

// Where load_run's rows go: the table, the side, and the options choosing the metrics.
typedef struct loading {
  table *t;
  int side;
  const gate_options *o;
  double dflt;
} loading;

static bool add_metric(void *ud, const char *label, const char *phase, const char *name,
                       double value) {
  loading *l = ud;
  double tol = tol_of(l->o, name, l->dflt);
  if (tol < -1) return true;
  series *se = find_or_add(l->t, label, phase, name);
  if (!se) return false;
  se->row.tol = tol;
  if (se->n[l->side] < GATE_MAX_REPS) se->vals[l->side][se->n[l->side]++] = value;
  return true;
}

// Adds the metric rows of `run` to side `side` of t.
static sc_status load_run(sqlite3 *db, int64_t run, int side, const gate_options *o, double dflt,
                          table *t, sc_error *err) {
  loading l = {t, side, o, dflt};
  return rq_gate_metrics(db, run, add_metric, &l, err);
}

// Adds the runs ids[0..*n) of one group to side `side` of t: of a group of several, only the
// complete ones (an interrupted repetition has partial numbers); *n becomes how many were used.
static sc_status load_group(sqlite3 *db, const int64_t *ids, int *n, int side,
                            const gate_options *o, double dflt, table *t, sc_error *err) {
  int used = 0;
  for (int i = 0; i < *n; i++) {
    if (*n > 1 && !rq_run_complete(db, ids[i])) continue;
    SC_TRY(load_run(db, ids[i], side, o, dflt, t, err));
    used++;
  }
  *n = used;
  return SC_OK;
}

enum { RUN_MODE_CAP = 16 }; // run.mode: "sim" | "real", with room to spare

// The scenario name and mode of run id; false when there is no such run.
static bool run_info(sqlite3 *db, int64_t id, char *scen, size_t cap, bool *sim) {
  char mode[RUN_MODE_CAP];
  if (!rq_run_scenario_mode(db, id, scen, cap, mode, sizeof mode)) return false;
  *sim = !strcmp(mode, "sim");
  return true;
}

// --- judging

// Half the range of the sorted values v relative to their median; NaN with fewer than 2.
static double spread(const double *v, int n, double med) {
  return n >= 2 && med != 0 ? (v[n - 1] - v[0]) / 2 / fabs(med) : NAN;
}

// Fills the row's medians (sorting the values), noise, counts, change and worse.
static void describe(series *se) {
  gate_row *r = &se->row;
  r->n_base = se->n[0];
  r->n_cur = se->n[1];
  r->base = sc_median(se->vals[0], se->n[0], NAN);
  r->cur = sc_median(se->vals[1], se->n[1], NAN);
  r->noise = spread(se->vals[0], se->n[0], r->base);
  r->noise_cur = spread(se->vals[1], se->n[1], r->cur);
  r->p = NAN;
  r->change = r->worse = NAN;
  if (se->n[0] == 0 || se->n[1] == 0) return;
  const mt_metric_info *mi = mt_metric_find(mt_metric_base(r->metric));
  double sign = mi && mi->dir == MT_HIGHER_BETTER ? -1 : 1;
  if (r->base != 0) {
    r->change = (r->cur - r->base) / fabs(r->base);
    r->worse = sign * r->change;
  } else { // from zero: any move is past every tolerance
    r->worse = r->cur == 0 ? 0 : sign * (r->cur > 0 ? INFINITY : -INFINITY);
  }
}

// The one-sided p that the current repetitions moved the way `worse` says (worse > 0: the
// worse way), from the row's sorted values.
static double shift_p(const series *se, bool lower_better) {
  double a[GATE_MAX_REPS], b[GATE_MAX_REPS];
  // lower-is-better and worse, or higher-is-better and better: the current values went up
  bool up = (se->row.worse > 0) == lower_better;
  for (int i = 0; i < se->n[0]; i++) a[i] = up ? se->vals[0][i] : -se->vals[0][i];
  for (int i = 0; i < se->n[1]; i++) b[i] = up ? se->vals[1][i] : -se->vals[1][i];
  return gate_mann_whitney_greater(a, se->n[0], b, se->n[1]);
}

// sim: whether the runs are deterministic (a change past the tolerance either way is judged);
// accept: a sim change the better way is an improvement asked for.
static void judge(series *se, double alpha, bool sim, bool accept) {
  gate_row *r = &se->row;
  describe(se);
  if (se->n[0] == 0 || se->n[1] == 0) {
    r->v = se->n[0] == 0 ? GATE_NEW : GATE_MISSING;
    return;
  }
  if (fabs(r->worse) <= r->tol) {
    r->v = GATE_SAME;
    return;
  }
  if (sim) { // deterministic: any change past the tolerance is one the code made
    r->v = r->worse > 0 ? GATE_REGRESSED : accept ? GATE_IMPROVED : GATE_CHANGED;
    return;
  }
  if (se->n[0] < 2 || se->n[1] < 2) { // no noise estimate: the tolerance alone
    r->v = r->worse > 0 ? GATE_REGRESSED : GATE_IMPROVED;
    return;
  }
  const mt_metric_info *mi = mt_metric_find(mt_metric_base(r->metric));
  r->p = shift_p(se, !(mi && mi->dir == MT_HIGHER_BETTER));
  bool sig = r->p < alpha;
  if (r->worse > 0) r->v = sig ? GATE_REGRESSED : GATE_WORSE_NOISE;
  else r->v = sig ? GATE_IMPROVED : GATE_SAME;
}

// The result's noise summary: medians of the rows' noise per side, and the noisiest row.
static void summarize_noise(gate_result *g) {
  double *nb = malloc((size_t)(g->n ? g->n : 1) * sizeof *nb);
  double *nc = malloc((size_t)(g->n ? g->n : 1) * sizeof *nc);
  int kb = 0, kc = 0;
  double worst = -1;
  g->noisiest = -1;
  for (int i = 0; nb && nc && i < g->n; i++) {
    const gate_row *r = &g->rows[i];
    if (!isnan(r->noise)) nb[kb++] = r->noise;
    if (!isnan(r->noise_cur)) nc[kc++] = r->noise_cur;
    double m = fmax(isnan(r->noise) ? -1 : r->noise, isnan(r->noise_cur) ? -1 : r->noise_cur);
    if (m >= 0 && m > worst) {
      worst = m;
      g->noisiest = i;
    }
  }
  g->noise_base = sc_median(nb, kb, NAN);
  g->noise_cur = sc_median(nc, kc, NAN);
  free(nb);
  free(nc);
}

// Checks that both runs exist and are of one scenario and one mode, and, in one database, of
// two groups; fills g->scenario and g->sim.
static sc_status check_runs(sqlite3 *cur_db, int64_t cur_run, sqlite3 *base_db, int64_t base_run,
                            gate_result *g, sc_error *err) {
  char sc_base[128];
  bool sim_cur = false, sim_base = false;
  if (!run_info(cur_db, cur_run, g->scenario, sizeof g->scenario, &sim_cur))
    return sc_fail(err, SC_INVALID, "gate: no run %lld in the current database",
                   (long long)cur_run);
  if (!run_info(base_db, base_run, sc_base, sizeof sc_base, &sim_base))
    return sc_fail(err, SC_INVALID, "gate: no run %lld in the baseline database",
                   (long long)base_run);
  if (strcmp(g->scenario, sc_base) != 0)
    return sc_fail(err, SC_INVALID, "gate: run %lld is of scenario '%s' but the baseline run %lld "
                   "is of scenario '%s': runs of different scenarios are not compared",
                   (long long)cur_run, g->scenario, (long long)base_run, sc_base);
  if (sim_cur != sim_base)
    return sc_fail(err, SC_INVALID, "gate: run %lld is a %s run but the baseline run %lld is a %s "
                   "run: sim and real runs are not compared", (long long)cur_run,
                   sim_cur ? "sim" : "real", (long long)base_run, sim_base ? "sim" : "real");
  int64_t grp[GATE_MAX_REPS];
  int n = cur_db == base_db ? gate_group(cur_db, cur_run, grp, GATE_MAX_REPS) : 0;
  for (int i = 0; i < n; i++)
    if (grp[i] == base_run)
      return sc_fail(err, SC_INVALID, "gate: run %lld and the baseline run %lld are of the same "
                     "repetition group (%lld): nothing to compare", (long long)cur_run,
                     (long long)base_run, (long long)grp[0]);
  g->sim = sim_cur;
  return SC_OK;
}

void gate_check_complete(sqlite3 *db, const int64_t *ids, int n, gate_result *g) {
  for (int i = 0; i < n; i++) {
    char status[32] = "", error[160] = "";
    if (!rq_run_status(db, ids[i], status, sizeof status, error, sizeof error) ||
        !strcmp(status, "complete"))
      continue;
    const char *why = !strcmp(status, "running")
                          ? "it never ended: the process crashed or was killed (or is still "
                            "running), so its rows are partial"
                      : !strcmp(status, "interrupted") ? "it was stopped early, so its rows "
                                                         "are partial"
                                                       : "it stopped on an error";
    int len = snprintf(g->incomplete, sizeof g->incomplete, "run %lld has status '%s': %s%s%.120s",
                       (long long)ids[i], status, why, error[0] ? ": " : "", error);
    (void)len; // a long error is cut at the buffer's end, on purpose
    return;
  }
}

sc_status gate_compare(sqlite3 *cur_db, int64_t cur_run, sqlite3 *base_db, int64_t base_run,
                       const gate_options *o, gate_result *out, sc_error *err) {
  memset(out, 0, sizeof *out);
  sc_status s = check_runs(cur_db, cur_run, base_db, base_run, out, err);
  if (s != SC_OK) {
    memset(out, 0, sizeof *out);
    return s;
  }
  int64_t gb[GATE_MAX_REPS], gc[GATE_MAX_REPS];
  int nb = gate_group(base_db, base_run, gb, GATE_MAX_REPS);
  int nc = gate_group(cur_db, cur_run, gc, GATE_MAX_REPS);
  gate_check_complete(cur_db, gc, nc, out);
  double dflt = out->sim ? o->tol_sim : o->tol_real;
  table t = {0};
  s = load_group(base_db, gb, &nb, 0, o, dflt, &t, err);
  if (s == SC_OK) s = load_group(cur_db, gc, &nc, 1, o, dflt, &t, err);
  if (s == SC_OK && t.n > 0 && !(out->rows = calloc((size_t)t.n, sizeof *out->rows)))
    s = sc_fail(err, SC_OOM, "gate: out of memory");
  if (s != SC_OK) {
    free(t.s);
    memset(out, 0, sizeof *out);
    return s;
  }
  out->base_run = gb[0];
  out->cur_run = gc[0];
  out->n_base_reps = nb;
  out->n_cur_reps = nc;
  out->alpha = o->alpha;
  for (int i = 0; i < t.n; i++) {
    judge(&t.s[i], o->alpha, out->sim, o->accept_improvements);
    gate_verdict v = t.s[i].row.v;
    out->rows[out->n++] = t.s[i].row;
    out->regressed += v == GATE_REGRESSED;
    out->missing += v == GATE_MISSING;
    out->changed += v == GATE_CHANGED;
  }
  out->failed = out->regressed + out->missing + out->changed + (out->incomplete[0] != 0);
  free(t.s);
  summarize_noise(out);
  return SC_OK;
}

void gate_result_free(gate_result *r) {
  if (!r) return;
  free(r->rows);
  memset(r, 0, sizeof *r);
}
