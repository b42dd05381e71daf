// The regression gate for capacity answers (reports/gate.h, gate_capacity_compare): two
// `shardcheck capacity` searches of one question, read back from the capacity tables
// (rq_capacity_load), compared the way the gate compares sim runs: the recommendation, and per
// layout its highest rate under the SLO with the interval's ends, and its cost per million
// tokens, each judged in both directions against the tolerance. The CLI (cli/cmd_gate.c)
// picks the searches and prints.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reports/gate.h"
#include "reports/query.h"

int64_t gate_capacity_latest(sqlite3 *db, const char *scen, int64_t before) {
  sqlite3_stmt *st = NULL;
  int64_t id = 0;
  if (sqlite3_prepare_v2(db,
                         "SELECT max(id) FROM capacity WHERE (?1 IS NULL OR scenario = ?1) "
                         "AND id < ?2",
                         -1, &st, NULL) != SQLITE_OK)
    return 0; // a file without capacity tables (version 2) has no searches
  if (scen) sqlite3_bind_text(st, 1, scen, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st, 2, before);
  if (sqlite3_step(st) == SQLITE_ROW) id = sqlite3_column_int64(st, 0); // NULL reads 0
  sqlite3_finalize(st);
  return id;
}

// The scenario text of search id, malloc'd ("" when NULL); NULL on a database error.
static char *scenario_text(sqlite3 *db, int64_t id) {
  sqlite3_stmt *st = NULL;
  char *txt = NULL;
  if (sqlite3_prepare_v2(db, "SELECT coalesce(scenario_text, '') FROM capacity WHERE id = ?1", -1,
                         &st, NULL) != SQLITE_OK)
    return NULL;
  sqlite3_bind_int64(st, 1, id);
  if (sqlite3_step(st) == SQLITE_ROW) txt = strdup((const char *)sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  return txt;
}

// Whether layout a and b are the same kind and tp x pp x dp.
static bool same_layout(const store_cap_layout *a, const store_cap_layout *b) {
  return !strcmp(a->kind, b->kind) && a->tp == b->tp && a->pp == b->pp && a->dp == b->dp;
}

// The first way searches c and b ask different questions, in words, into why; false when
// they ask the same one.
static bool different_question(const rq_capacity *c, const rq_capacity *b, const char *text_c,
                               const char *text_b, char *why, size_t cap) {
  if (strcmp(c->scenario, b->scenario))
    snprintf(why, cap, "scenario '%.120s' against '%.120s'", c->scenario, b->scenario);
  else if (strcmp(text_c, text_b))
    snprintf(why, cap, "the scenario text differs (its model, workload, hardware or SLO)");
  else if (strcmp(c->slo, b->slo))
    snprintf(why, cap, "SLO '%.150s' against '%.150s'", c->slo, b->slo);
  else if (c->target_rate != b->target_rate)
    snprintf(why, cap, "target rate %g against %g req/s", c->target_rate, b->target_rate);
  else if (c->rate_lo != b->rate_lo || c->rate_hi != b->rate_hi)
    snprintf(why, cap, "search range %g:%g against %g:%g req/s", c->rate_lo, c->rate_hi, b->rate_lo,
             b->rate_hi);
  else if (c->iters != b->iters)
    snprintf(why, cap, "--iters %d against %d", c->iters, b->iters);
  else if (c->seed != b->seed)
    snprintf(why, cap, "seed %lld against %lld", (long long)c->seed, (long long)b->seed);
  else if (strcmp(c->costs, b->costs))
    snprintf(why, cap, "costs '%.150s' against '%.150s'", c->costs, b->costs);
  else if (c->n_layouts != b->n_layouts)
    snprintf(why, cap, "%d layouts searched against %d (other --gpus)", c->n_layouts, b->n_layouts);
  else {
    for (int i = 0; i < c->n_layouts; i++)
      if (!same_layout(&c->layouts[i], &b->layouts[i])) {
        snprintf(why, cap, "layout %d is %.31s %.100s against %.31s %.100s (other --gpus)", i,
                 c->layouts[i].label, c->layouts[i].kind, b->layouts[i].label, b->layouts[i].kind);
        return true;
      }
    return false;
  }
  return true;
}

// Judges one number: higher: whether higher is better. A value on one side only (NaN on the
// other: no rate held, so no cost either) moved past every tolerance.
static void judge_value(gate_row *r, bool higher, bool accept) {
  r->p = r->noise = r->noise_cur = NAN;
  r->n_base = r->n_cur = 1;
  r->change = r->worse = NAN;
  bool hb = !isnan(r->base), hc = !isnan(r->cur);
  if (!hb && !hc) {
    r->v = GATE_SAME;
    return;
  }
  double sign = higher ? -1 : 1;
  if (hb && hc && r->base != 0) {
    r->change = (r->cur - r->base) / fabs(r->base);
    r->worse = sign * r->change;
  } else if (hb && hc) {
    r->worse = r->cur == 0 ? 0 : sign * (r->cur > 0 ? INFINITY : -INFINITY);
  } else {
    // a rate that held on one side only: none held is the worst; a cost only the baseline
    // had means the layout no longer serves any rate (worse), and the other way better
    r->worse = hb ? INFINITY : -INFINITY;
  }
  if (fabs(r->worse) <= r->tol)
    r->v = GATE_SAME;
  else if (r->worse > 0)
    r->v = GATE_REGRESSED;
  else
    r->v = accept ? GATE_IMPROVED : GATE_CHANGED;
}

static gate_row *add_row(gate_result *g, const char *dep, const char *metric) {
  gate_row *r = &g->rows[g->n++];
  memset(r, 0, sizeof *r);
  snprintf(r->deployment, sizeof r->deployment, "%s", dep);
  snprintf(r->metric, sizeof r->metric, "%s", metric);
  r->base = r->cur = NAN;
  return r;
}

// "tp2-dp2 (h100-sxm)", or "none" for index -1.
static void layout_name(const rq_capacity *c, int idx, char *buf, size_t cap) {
  if (idx < 0 || idx >= c->n_layouts)
    snprintf(buf, cap, "none");
  else
    snprintf(buf, cap, "%s (%s)", c->layouts[idx].label, c->layouts[idx].kind);
}

// The recommendation's row: same when it names the same layout; when it changed, better
// (CHANGED, or IMPROVED when accepted) if the new one serves where the old did not or costs
// less per hour, else REGRESSED.
static void recommendation_row(gate_result *g, const rq_capacity *c, const rq_capacity *b,
                               bool accept) {
  gate_row *r = add_row(g, "(search)", "recommendation");
  r->p = r->noise = r->noise_cur = r->change = r->worse = NAN;
  r->n_base = r->n_cur = 1;
  const store_cap_layout *lb = b->best >= 0 && b->best < b->n_layouts ? &b->layouts[b->best] : 0;
  const store_cap_layout *lc = c->best >= 0 && c->best < c->n_layouts ? &c->layouts[c->best] : 0;
  r->base = lb ? lb->cost_per_hour : NAN;
  r->cur = lc ? lc->cost_per_hour : NAN;
  char nb[300], nc[300];
  layout_name(b, b->best, nb, sizeof nb);
  layout_name(c, c->best, nc, sizeof nc);
  bool same = b->served == c->served && ((!lb && !lc) || (lb && lc && same_layout(lb, lc)));
  if (same) {
    r->v = GATE_SAME;
    snprintf(r->note, sizeof r->note, "%.70s%s", nc, c->served ? "" : ", not served");
    return;
  }
  bool better = (c->served && !b->served) ||
                (c->served == b->served && lb && lc && lc->cost_per_hour < lb->cost_per_hour);
  r->v = better ? (accept ? GATE_IMPROVED : GATE_CHANGED) : GATE_REGRESSED;
  snprintf(r->note, sizeof r->note, "%.60s%s -> %.60s%s", nb, b->served ? "" : " (not served)", nc,
           c->served ? "" : " (not served)");
}

sc_status gate_capacity_compare(sqlite3 *cur_db, int64_t cur, sqlite3 *base_db, int64_t base,
                                const gate_options *o, gate_result *out, sc_error *err) {
  memset(out, 0, sizeof *out);
  rq_capacity c = {0}, b = {0};
  sc_status s = rq_capacity_load(cur_db, cur, &c, err);
  if (s == SC_OK) s = rq_capacity_load(base_db, base, &b, err);
  if (s == SC_INVALID && strstr(err->msg, "no capacity search"))
    s = sc_fail(err, SC_INVALID, "gate: no capacity search %lld in the %s database",
                (long long)(c.id ? base : cur), c.id ? "baseline" : "current");
  char *tc = s == SC_OK ? scenario_text(cur_db, cur) : NULL;
  char *tb = s == SC_OK ? scenario_text(base_db, base) : NULL;
  if (s == SC_OK && (!tc || !tb))
    s = sc_fail(err, SC_IO, "gate: reading the capacity searches' scenario text");
  char why[400];
  if (s == SC_OK && cur_db == base_db && cur == base)
    s = sc_fail(err, SC_INVALID,
                "gate: capacity search %lld is its own baseline: nothing to "
                "compare",
                (long long)cur);
  if (s == SC_OK && different_question(&c, &b, tc, tb, why, sizeof why))
    s = sc_fail(err, SC_INVALID,
                "gate: capacity search %lld and the baseline search %lld ask "
                "different questions (%s): not compared",
                (long long)cur, (long long)base, why);
  free(tc);
  free(tb);
  // a recommendation row, then 4 per layout
  if (s == SC_OK && !(out->rows = calloc((size_t)(1 + 4 * c.n_layouts), sizeof *out->rows)))
    s = sc_fail(err, SC_OOM, "gate: out of memory");
  if (s != SC_OK) {
    rq_capacity_free(&c);
    rq_capacity_free(&b);
    free(out->rows);
    memset(out, 0, sizeof *out);
    return s;
  }
  snprintf(out->scenario, sizeof out->scenario, "%s", c.scenario);
  out->sim = out->capacity = true;
  out->cur_run = c.id;
  out->base_run = b.id;
  out->n_base_reps = out->n_cur_reps = 1;
  out->alpha = o->alpha;
  out->noise_base = out->noise_cur = NAN;
  out->noisiest = -1;
  recommendation_row(out, &c, &b, o->accept_improvements);
  static const struct {
    const char *name;
    bool higher;
  } cols[] = {
      {"max_rate", true}, {"max_rate_lo", true}, {"max_rate_hi", true}, {"cost_per_mtok", false}};
  for (int i = 0; i < c.n_layouts; i++) { // the same layouts, in the same order (checked)
    const store_cap_layout *lc = &c.layouts[i], *lb = &b.layouts[i];
    char dep[96];
    snprintf(dep, sizeof dep, "%.31s %.60s", lc->label, lc->kind);
    double vc[] = {lc->max_rate, lc->max_rate_lo, lc->max_rate_hi, lc->cost_per_mtok};
    double vb[] = {lb->max_rate, lb->max_rate_lo, lb->max_rate_hi, lb->cost_per_mtok};
    for (size_t k = 0; k < sizeof cols / sizeof *cols; k++) {
      gate_row *r = add_row(out, dep, cols[k].name);
      r->base = vb[k];
      r->cur = vc[k];
      r->tol = o->tol_sim;
      judge_value(r, cols[k].higher, o->accept_improvements);
      if (k == 0 && lc->capped != lb->capped)
        snprintf(r->note, sizeof r->note, "%s",
                 lc->capped ? "now held at the top of the range"
                            : "no longer holds at the top of "
                              "the range");
    }
  }
  for (int i = 0; i < out->n; i++) {
    out->regressed += out->rows[i].v == GATE_REGRESSED;
    out->changed += out->rows[i].v == GATE_CHANGED;
  }
  out->failed = out->regressed + out->changed;
  rq_capacity_free(&c);
  rq_capacity_free(&b);
  return SC_OK;
}
