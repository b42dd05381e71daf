// The scenario's SLO and gate sections (see scenario_impl.h): metric names and limits, per
// prompt class too, checked against the metric table (scenarios/metric_names.h), with a
// "did you mean" for a misspelt key; the gate's tolerances.
//
// Left to others: computing the metrics and the verdicts (reports/metrics.c), the gate
// itself (reports/gate.c).
#include <ctype.h>
#include <errno.h>
#include <libfyaml.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/yaml_map.h"
#include "kernels/util.h"
#include "scenarios/metric_names.h"
#include "scenarios/scenario_impl.h"

#define EDIT_MAX_LEN 63 // longest name edit_distance compares
#define EDIT_FAR     99 // edit_distance of names too long to compare

// --- SLOs

// Edit distance of a and b (short strings, case ignored), for "did you mean".
static int edit_distance(const char *a, const char *b) {
  int la = (int)strlen(a), lb = (int)strlen(b);
  if (la > EDIT_MAX_LEN || lb > EDIT_MAX_LEN) return EDIT_FAR;
  int row[EDIT_MAX_LEN + 1];
  for (int j = 0; j <= lb; j++) row[j] = j;
  for (int i = 1; i <= la; i++) {
    int diag = row[0];
    row[0] = i;
    for (int j = 1; j <= lb; j++) {
      int up = row[j];
      int best = diag + (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[lb];
}

// Up to three SLO-able metric names close to key, "a, b or c", into buf ("" when none).
static void close_names(const char *key, char *buf, size_t cap) {
  const mt_metric_info *all;
  int n = mt_metric_all(&all);
  const char *best[3] = {NULL, NULL, NULL};
  int score[3] = {EDIT_FAR, EDIT_FAR, EDIT_FAR};
  size_t kl = strlen(key);
  for (int i = 0; i < n; i++) {
    if (all[i].dir == MT_NEUTRAL) continue;
    int d = edit_distance(key, all[i].name);
    if (kl >= 3 && !strncasecmp(all[i].name, key, kl)) d = 0; // the key is a prefix
    if (d > 4 && d * 3 > (int)kl) continue;
    for (int j = 0; j < 3; j++)
      if (d < score[j]) {
        for (int m = 2; m > j; m--) {
          score[m] = score[m - 1];
          best[m] = best[m - 1];
        }
        score[j] = d;
        best[j] = all[i].name;
        break;
      }
  }
  int nb = 0;
  while (nb < 3 && best[nb]) nb++;
  size_t len = 0;
  buf[0] = 0;
  for (int j = 0; j < nb; j++) len = sc_list_add(buf, cap, len, j, nb, " or ", best[j]);
}

// The workload's prompt class names, "a, b and c", into buf.
static void class_list(const scn_workload *w, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < w->n_classes; i++)
    len = sc_list_add(buf, cap, len, i, w->n_classes, " and ", w->classes[i].name);
}

// The index of the prompt class named name, or -1 (with the error, pk's position) when the
// workload has none by that name.
static int class_named(scn_ctx *c, struct fy_node *pk, const char *name, const char *where) {
  const scn_workload *w = &c->s->workload;
  for (int i = 0; i < w->n_classes; i++)
    if (!strcmp(w->classes[i].name, name)) return i;
  char list[SCN_MAX_CLASSES * 34];
  class_list(w, list, sizeof list);
  yaml_map_fail(&c->doc, pk, NULL, "%s: unknown prompt class '%s'; the workload's classes are %s",
                where, name, list);
  return -1;
}

// Reads the metric: limit pairs of mapping v ('slo', or a class's 'slo.classes.NAME' when
// per_class) into items[*n..]; the key "classes" is skipped (parse_slo reads it). On error
// *n counts the items read before it.
static sc_status slo_items(scn_ctx *c, struct fy_node *v, const char *where, bool per_class,
                           scn_slo_item *items, int *n) {
  void *it = NULL;
  struct fy_node_pair *pair;
  while ((pair = fy_node_mapping_iterate(v, &it))) {
    struct fy_node *pk = fy_node_pair_key(pair), *pv = fy_node_pair_value(pair);
    const char *name = pk && fy_node_get_type(pk) == FYNT_SCALAR ? fy_node_get_scalar0(pk) : NULL;
    if (!name) return yaml_map_fail(&c->doc, pk, v, "expected a plain key in '%s'", where);
    if (!per_class && !strcmp(name, "classes")) continue;
    if (per_class && !strcmp(name, "classes"))
      return yaml_map_fail(&c->doc, pk, NULL,
                           "key 'classes': per-class SLOs do not nest (a prompt "
                           "class's SLOs are metric names and limits)");
    const mt_metric_info *mi = mt_metric_find(name);
    if (!mi) {
      char close[200];
      close_names(name, close, sizeof close);
      if (close[0])
        return yaml_map_fail(&c->doc, pk, NULL,
                             "unknown SLO key '%s'; did you mean %s? (SLO keys are "
                             "metric names: docs/metrics.md)",
                             name, close);
      return yaml_map_fail(&c->doc, pk, NULL,
                           "unknown SLO key '%s'; SLO keys are metric names such as "
                           "ttft_p95_ms, tpot_p95_ms, e2el_p99_ms, error_rate, lost_requests, "
                           "output_tok_s, goodput_rps (all: docs/metrics.md)",
                           name);
    }
    if (mi->dir == MT_NEUTRAL)
      return yaml_map_fail(&c->doc, pk, NULL,
                           "key '%s': expected a metric an SLO can bound (lower or "
                           "higher is better), got a count with neither (%s)",
                           name, mi->what);
    if (per_class && !mt_metric_per_class(name)) {
      char words[300];
      mt_metric_per_class_words(words, sizeof words);
      return yaml_map_fail(&c->doc, pk, NULL,
                           "key '%s': expected a metric of a prompt class's own requests (%s), "
                           "got a metric of the whole deployment",
                           name, words);
    }
    if (*n == SCN_MAX_SLO)
      return yaml_map_fail(&c->doc, pk, NULL, "key '%s': at most %d SLOs", where, SCN_MAX_SLO);
    scn_slo_item *si = &items[*n];
    yaml_map_field f = F_DBL(name, &si->limit);
    SC_TRY(yaml_map_read_scalar(&c->doc, pk, pv, &f));
    if (!(si->limit >= 0)) {
      char e[80];
      snprintf(e, sizeof e, "a limit >= 0 (%s)", mi->unit);
      return yaml_map_expect_at(&c->doc, pv, pk, name, e);
    }
    snprintf(si->key, sizeof si->key, "%s", name);
    yaml_map_pos(pk, &si->line, &si->col);
    (*n)++;
  }
  return SC_OK;
}

// slo.classes (v, at key k): a mapping of prompt class names to SLO mappings.
static sc_status slo_classes(scn_ctx *c, struct fy_node *v, struct fy_node *k) {
  scn_slo *slo = &c->s->slo;
  const scn_workload *w = &c->s->workload;
  if (!v || fy_node_get_type(v) != FYNT_MAPPING)
    return yaml_map_expect_at(&c->doc, v, k, "classes",
                              "a mapping of prompt class names to SLOs, e.g. "
                              "{short: {ttft_p95_ms: 300}}");
  if (w->dataset[0])
    return yaml_map_fail(&c->doc, k, NULL,
                         "key 'classes': per-class SLOs need prompt classes "
                         "(workload.prompts), but the workload reads its prompts from a dataset");
  if (w->n_classes < 2)
    return yaml_map_fail(&c->doc, k, NULL,
                         "key 'classes': per-class SLOs need a workload with more than "
                         "one prompt class, and this one has one ('%s'): put its limits in 'slo' "
                         "itself",
                         w->n_classes ? w->classes[0].name : "");
  void *it = NULL;
  struct fy_node_pair *pair;
  while ((pair = fy_node_mapping_iterate(v, &it))) {
    struct fy_node *pk = fy_node_pair_key(pair), *pv = fy_node_pair_value(pair);
    const char *name = pk && fy_node_get_type(pk) == FYNT_SCALAR ? fy_node_get_scalar0(pk) : NULL;
    if (!name) return yaml_map_fail(&c->doc, pk, v, "expected a plain key in 'slo.classes'");
    int idx = class_named(c, pk, name, "slo.classes");
    if (idx < 0) return SC_INVALID;
    if (!pv || fy_node_get_type(pv) != FYNT_MAPPING)
      return yaml_map_expect_at(&c->doc, pv, pk, name,
                                "a mapping of metric names to limits, e.g. "
                                "{ttft_p95_ms: 300}");
    scn_slo_class *sc = &slo->classes[slo->n_classes++]; // names are unique: <= n_classes
    snprintf(sc->name, sizeof sc->name, "%s", name);
    sc->class_idx = idx;
    yaml_map_pos(pk, &sc->line, &sc->col);
    char where[64];
    snprintf(where, sizeof where, "slo.classes.%s", name);
    SC_TRY(slo_items(c, pv, where, true, sc->items, &sc->n));
  }
  return SC_OK;
}

sc_status scn_parse_slo(scn_ctx *c, struct fy_node *v, struct fy_node *k) {
  scn_slo *slo = &c->s->slo;
  if (!v || fy_node_get_type(v) != FYNT_MAPPING)
    return yaml_map_expect_at(&c->doc, v, k, "slo",
                              "a mapping of metric names to limits, e.g. "
                              "{ttft_p95_ms: 500, error_rate: 0.01}");
  SC_TRY(slo_items(c, v, "slo", false, slo->items, &slo->n));
  struct fy_node *ck = NULL, *cv = NULL;
  void *it = NULL;
  struct fy_node_pair *pair;
  while ((pair = fy_node_mapping_iterate(v, &it))) {
    struct fy_node *pk = fy_node_pair_key(pair);
    if (pk && fy_node_get_type(pk) == FYNT_SCALAR && !strcmp(fy_node_get_scalar0(pk), "classes"))
      ck = pk, cv = fy_node_pair_value(pair);
  }
  return ck ? slo_classes(c, cv, ck) : SC_OK;
}

// --- what the scenario's deployments can measure

static void check_key(scn_ctx *c, mt_kind kind, const char *key) {
  const mt_metric_info *mi = mt_metric_find(key);
  if (!mi) return;
  const char *why = mi->absent[kind];
  if (why && kind == MT_KIND_SIM && (mi->flags & MT_MODEL_OUTPUT)) {
    scn_warn(c, "slo %s: not judged in mode sim (%s)", key, why);
  } else if (why && kind == MT_KIND_TEXT && !mi->absent[MT_KIND_SERVE]) {
    scn_warn(c,
             "slo %s: unless this server gives it, it cannot be measured (%s): its verdict then "
             "FAILs with no data",
             key, why);
  } else if (why) {
    scn_warn(c,
             "slo %s: cannot be measured on %s replicas (%s): its verdict will FAIL with no data",
             key, mt_kind_name(kind), why);
  } else if (mi->by == MT_BY_FAULTS && !(mi->flags & MT_ZERO_UNFAULTED) && c->s->n_faults == 0) {
    scn_warn(c,
             "slo %s: measured only in a deployment with faults, and the scenario has none: its "
             "verdict will FAIL with no data",
             key);
  }
}

void scn_check_slo_measurable(scn_ctx *c) {
  const scn_slo *slo = &c->s->slo;
  mt_kind kind = c->predicting ? MT_KIND_SIM : scenario_metric_kind(c->s);
  for (int i = 0; i < slo->n; i++) check_key(c, kind, slo->items[i].key);
}

// --- gate

// "5%" or 0.05 -> 0.05 (a fraction in [0, 10]).
static bool parse_fraction(const char *text, void *dst) {
  char *end = NULL;
  errno = 0;
  double v = strtod(text, &end);
  if (end == text || errno) return false;
  if (*end == '%') {
    v /= 100;
    end++;
  }
  if (*end || !(v >= 0 && v <= 10)) return false;
  *(double *)dst = v;
  return true;
}

sc_status scn_parse_gate(scn_ctx *c, struct fy_node *v, struct fy_node *k) {
  scn_gate *g = &c->s->gate;
  static const char *const nested[] = {"metrics"};
  const yaml_map_field f[] = {
      F_CUSTOM("tolerance", &g->tolerance, parse_fraction, "a percentage such as 5% (or 0.05)"),
      F_DBL("alpha", &g->alpha)};
  yaml_map_view m;
  SC_TRY(yaml_map_read_view(&c->doc, v, "gate", k, f, COUNT(f), nested, COUNT(nested), &m));
  if (yaml_map_has(&m, "alpha") && !(g->alpha > 0 && g->alpha <= 0.5))
    return yaml_map_expect_at(&c->doc, yaml_map_val(&m, "alpha"), yaml_map_key(&m, "alpha"),
                              "alpha", "a significance level in (0, 0.5]");
  if (!yaml_map_has(&m, "metrics")) return SC_OK;
  struct fy_node *mv = yaml_map_val(&m, "metrics"), *mk = yaml_map_key(&m, "metrics");
  if (!mv || fy_node_get_type(mv) != FYNT_MAPPING)
    return yaml_map_expect_at(&c->doc, mv, mk, "metrics",
                              "a mapping of metric names to tolerances, e.g. "
                              "{tpot_p95_ms: 10%, output_tok_s: 3%}");
  void *it = NULL;
  struct fy_node_pair *pair;
  while ((pair = fy_node_mapping_iterate(mv, &it))) {
    struct fy_node *pk = fy_node_pair_key(pair), *pv = fy_node_pair_value(pair);
    const char *name = pk && fy_node_get_type(pk) == FYNT_SCALAR ? fy_node_get_scalar0(pk) : NULL;
    if (!name) return yaml_map_fail(&c->doc, pk, mv, "expected a plain key in 'gate.metrics'");
    const char *base = mt_metric_base(name);
    const mt_metric_info *mi = mt_metric_find(base);
    if (!mi || mi->dir == MT_NEUTRAL)
      return yaml_map_fail(&c->doc, pk, NULL,
                           "gate.metrics: '%s' is not a metric with a better direction "
                           "(latencies, rates, error counts: docs/metrics.md)",
                           name);
    if (base != name) { // CLASS:NAME, a prompt class's row
      char cls[64];
      snprintf(cls, sizeof cls, "%.*s", (int)(base - 1 - name), name);
      if (!mt_metric_per_class(base)) {
        char words[300];
        mt_metric_per_class_words(words, sizeof words);
        return yaml_map_fail(&c->doc, pk, NULL,
                             "gate.metrics: '%s': a prompt class's rows carry %s, not %s", name,
                             words, base);
      }
      if (class_named(c, pk, cls, "gate.metrics") < 0) return SC_INVALID;
    }
    if (g->n == SCN_MAX_SLO)
      return yaml_map_fail(&c->doc, pk, NULL, "gate.metrics: at most %d metrics", SCN_MAX_SLO);
    yaml_map_field tf =
        F_CUSTOM(name, &g->metrics[g->n].tol, parse_fraction, "a percentage such as 5% (or 0.05)");
    SC_TRY(yaml_map_read_scalar(&c->doc, pk, pv, &tf));
    snprintf(g->metrics[g->n].key, sizeof g->metrics[g->n].key, "%s", name);
    g->n++;
  }
  return SC_OK;
}
