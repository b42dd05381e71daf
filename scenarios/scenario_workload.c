// The scenario's workload section (see scenario_impl.h): prompt classes and their length
// distributions, a dataset or a trace, phases (ramp, rate, fixed) and sampling.
//
// Left to others: turning the workload into requests and arrival gaps, reading the dataset's
// lines (scenarios/workload.c); running phases (runner/).
#include <errno.h>
#include <libfyaml.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/yaml_map.h"
#include "scenarios/scenario_impl.h"
#include "scenarios/workload.h"

// --- workload: distributions, classes, phases

// A token count: a plain integer >= 1 (the fixed form of a distribution).
static bool parse_count(const char *text, void *dst) {
  const char *p = text;
  if (!*p || strlen(p) > 9) return false;
  for (; *p; p++)
    if (*p < '0' || *p > '9') return false;
  long v = strtol(text, NULL, 10);
  if (v < 1) return false;
  *(double *)dst = (double)v;
  return true;
}

// What a length takes, from the distribution table (scenarios/workload.h): "a token count (an
// integer >= 1) or one of {uniform: [a, b]}, {normal: {mean, stddev}}, ...".
static void dist_expect(char *buf, size_t cap) {
  size_t len = (size_t)snprintf(buf, cap, "a token count (an integer >= 1) or one of ");
  int n = 0;
  for (int k = 0; k < SCN_DIST_N && len < cap; k++) {
    const wl_dist_info *i = workload_dist((scn_dist_kind)k);
    if (i->form == WL_FORM_PAIR)
      len += (size_t)snprintf(buf + len, cap - len, "%s{%s: [a, b]}", n++ ? ", " : "", i->name);
    else if (i->form == WL_FORM_PARAMS)
      len += (size_t)snprintf(buf + len, cap - len, "%s{%s: {%s, %s}}", n++ ? ", " : "", i->name,
                              i->a_key, i->b_key);
  }
}

static sc_status parse_dist(scn_ctx *c, struct fy_node *v, struct fy_node *k, scn_dist *d) {
  const char *key = yaml_map_key_text(k);
  char expect[300];
  dist_expect(expect, sizeof expect);
  const char *nested[SCN_DIST_N];
  scn_dist_kind kinds[SCN_DIST_N], count = SCN_DIST_FIXED;
  int nn = 0;
  for (int i = 0; i < SCN_DIST_N; i++) {
    const wl_dist_info *di = workload_dist((scn_dist_kind)i);
    if (di->form == WL_FORM_COUNT) count = (scn_dist_kind)i;
    else kinds[nn] = (scn_dist_kind)i, nested[nn++] = di->name;
  }
  if (!v || fy_node_get_type(v) != FYNT_MAPPING) {
    if (!v || fy_node_get_type(v) != FYNT_SCALAR || fy_node_get_style(v) != FYNS_PLAIN)
      return yaml_map_expect_at(&c->doc, v, k, key, expect); // a count is a plain integer
    yaml_map_field f = F_CUSTOM(key, &d->a, parse_count, expect);
    SC_TRY(yaml_map_read_scalar(&c->doc, k, v, &f));
    d->kind = count;
    d->b = 0;
    return SC_OK;
  }
  yaml_map_view m;
  SC_TRY(yaml_map_read_view(&c->doc, v, key, k, NULL, 0, nested, nn, &m));
  if (m.n != 1)
    return m.n ? yaml_map_fail(&c->doc, m.key[1], NULL,
                               "key '%s': expected one distribution in '%s', got "
                               "'%s' and '%s'",
                               m.name[1], key, m.name[0], m.name[1])
               : yaml_map_expect_at(&c->doc, v, k, key, expect);
  struct fy_node *dv = m.val[0], *dk = m.key[0];
  int which = 0;
  while (strcmp(nested[which], m.name[0])) which++; // one of them: read_view checked it
  const wl_dist_info *di = workload_dist(kinds[which]);
  if (di->form == WL_FORM_PAIR) {
    int ab[2], n = 0;
    const char *e = "[a, b]: two integers, 1 <= a <= b";
    SC_TRY(yaml_map_int_list(&c->doc, dv, dk, e, 1, 2, ab, &n, NULL));
    if (n != 2 || ab[0] > ab[1]) return yaml_map_expect_at(&c->doc, dv, dk, di->name, e);
    *d = (scn_dist){kinds[which], ab[0], ab[1]};
    return SC_OK;
  }
  const char *ka = di->a_key, *kb = di->b_key;
  double a = 0, b = 0;
  static const char *const none[] = {NULL};
  const yaml_map_field f[] = {F_DBL(ka, &a), F_DBL(kb, &b)};
  yaml_map_view dm;
  SC_TRY(yaml_map_read_view(&c->doc, dv, m.name[0], dk, f, 2, none, 0, &dm));
  SC_TRY(yaml_map_need(&c->doc, &dm, ka, "a number >= 1"));
  SC_TRY(yaml_map_need(&c->doc, &dm, kb, "a number >= 0"));
  SC_TRY(yaml_map_check(&c->doc, &dm, ka, a >= 1, "a number >= 1"));
  SC_TRY(yaml_map_check(&c->doc, &dm, kb, b >= 0, "a number >= 0"));
  *d = (scn_dist){kinds[which], a, b};
  return SC_OK;
}

static sc_status parse_classes(scn_ctx *c, struct fy_node *v, struct fy_node *k) {
  scn_workload *w = &c->s->workload;
  struct fy_node *items[SCN_MAX_CLASSES];
  SC_TRY(yaml_map_seq(&c->doc, v, k, "a list of prompt classes {name, weight, input, output}",
                      SCN_MAX_CLASSES, items, &w->n_classes));
  for (int i = 0; i < w->n_classes; i++) {
    scn_class *cl = &w->classes[i];
    cl->weight = 1;
    static const char *const nested[] = {"input", "output"};
    const yaml_map_field f[] = {F_STR("name", cl->name), F_DBL("weight", &cl->weight)};
    yaml_map_view m;
    SC_TRY(yaml_map_read_view(&c->doc, items[i], "prompts", k, f, COUNT(f), nested, COUNT(nested),
                              &m));
    char expect[300], e[320];
    dist_expect(expect, sizeof expect);
    snprintf(e, sizeof e, "prompt tokens: %s", expect);
    SC_TRY(yaml_map_need(&c->doc, &m, "input", e));
    snprintf(e, sizeof e, "output tokens: %s", expect);
    SC_TRY(yaml_map_need(&c->doc, &m, "output", e));
    SC_TRY(yaml_map_check(&c->doc, &m, "weight", cl->weight > 0, "a number > 0"));
    SC_TRY(yaml_map_check(&c->doc, &m, "name", cl->name[0] != 0, "a non-empty name"));
    if (!cl->name[0]) snprintf(cl->name, sizeof cl->name, "class%d", i);
    for (int j = 0; j < i; j++)
      if (!strcmp(w->classes[j].name, cl->name))
        return yaml_map_fail(&c->doc, yaml_map_val(&m, "name"), items[i],
                             "key 'name': class name '%s' is used twice", cl->name);
    SC_TRY(parse_dist(c, yaml_map_val(&m, "input"), yaml_map_key(&m, "input"), &cl->input));
    SC_TRY(parse_dist(c, yaml_map_val(&m, "output"), yaml_map_key(&m, "output"), &cl->output));
  }
  return SC_OK;
}

_Static_assert(SCN_MAX_PREFIXES == 4096, "the message of prefixes.count names the bound");

// workload.prefixes: {count, length, zipf}; the longest prefix must leave the model's context
// room for one token of its own and one output token.
static sc_status parse_prefixes(scn_ctx *c, struct fy_node *v, struct fy_node *k) {
  scn_prefixes *px = &c->s->workload.prefixes;
  px->zipf = 1.0;
  static const char *const nested[] = {"length"};
  const yaml_map_field f[] = {F_INT("count", &px->count), F_DBL("zipf", &px->zipf)};
  yaml_map_view m;
  SC_TRY(yaml_map_read_view(&c->doc, v, "prefixes", k, f, COUNT(f), nested, COUNT(nested), &m));
  SC_TRY(yaml_map_need(&c->doc, &m, "count", "how many shared prefixes, an integer >= 1"));
  SC_TRY(yaml_map_check(&c->doc, &m, "count", px->count >= 1 && px->count <= SCN_MAX_PREFIXES,
                        "an integer in [1, 4096]"));
  SC_TRY(yaml_map_check(&c->doc, &m, "zipf", px->zipf >= 0 && px->zipf <= 100,
                        "a Zipf exponent in [0, 100] (0: every prefix equally popular)"));
  SC_TRY(yaml_map_need(&c->doc, &m, "length", "each prefix's length in tokens"));
  SC_TRY(parse_dist(c, yaml_map_val(&m, "length"), yaml_map_key(&m, "length"), &px->length));
  const model_config *mc = &c->s->model.config;
  double hi = workload_dist_bound(&px->length);
  if (mc->max_seq_len > 0 && hi > mc->max_seq_len - 2)
    return yaml_map_fail(&c->doc, yaml_map_val(&m, "length"), yaml_map_key(&m, "length"),
                         "key 'length': a shared prefix of up to %.0f tokens does not fit the "
                         "context of model '%s' (%d tokens; a request needs one token of its "
                         "own and one output token after it)",
                         hi, mc->name, mc->max_seq_len);
  return SC_OK;
}

// workload.conversations: {turns, think}; with a dataset (whose lines give the turns) {think}.
static sc_status parse_conversations(scn_ctx *c, struct fy_node *v, struct fy_node *k,
                                     bool dataset) {
  scn_conversations *cv = &c->s->workload.conversations;
  static const char *const nested[] = {"turns"};
  const yaml_map_field f[] = {F_DUR("think", &cv->think_ns)};
  yaml_map_view m;
  SC_TRY(yaml_map_read_view(&c->doc, v, "conversations", k, f, COUNT(f), nested, COUNT(nested),
                            &m));
  cv->set = true;
  if (dataset) {
    if (yaml_map_has(&m, "turns"))
      return yaml_map_fail(&c->doc, yaml_map_key(&m, "turns"), NULL,
                           "key 'turns': not with a dataset (its lines give each "
                           "conversation's turns)");
    return SC_OK;
  }
  SC_TRY(yaml_map_need(&c->doc, &m, "turns", "turns per conversation (a token-count form: an "
                                              "integer >= 1 or a distribution)"));
  SC_TRY(parse_dist(c, yaml_map_val(&m, "turns"), yaml_map_key(&m, "turns"), &cv->turns));
  if (workload_dist_bound(&cv->turns) > SCN_MAX_TURNS)
    return yaml_map_fail(&c->doc, yaml_map_val(&m, "turns"), yaml_map_key(&m, "turns"),
                         "key 'turns': expected at most %d turns, got up to %.0f", SCN_MAX_TURNS,
                         workload_dist_bound(&cv->turns));
  return SC_OK;
}

// The longest conversation the workload can make must fit the model's context: the prefix,
// then per turn its message and reply (each distribution's workload_dist_bound).
static sc_status check_conversation_fits(scn_ctx *c, struct fy_node *v) {
  const scn_workload *w = &c->s->workload;
  const model_config *mc = &c->s->model.config;
  double pre = w->prefixes.count ? workload_dist_bound(&w->prefixes.length) : 0, turn = 0;
  for (int i = 0; i < w->n_classes; i++) {
    double t = workload_dist_bound(&w->classes[i].input) +
               workload_dist_bound(&w->classes[i].output);
    if (t > turn) turn = t;
  }
  double turns = floor(workload_dist_bound(&w->conversations.turns) + 0.5);
  double need = pre + turns * turn;
  if (need <= mc->max_seq_len) return SC_OK;
  return yaml_map_fail(&c->doc, v, NULL,
                       "key 'conversations': a conversation can grow to %.0f tokens (prefix "
                       "%.0f + %.0f turns x %.0f tokens of message and reply), past the context "
                       "of model '%s' (%d tokens): fewer turns or shorter messages",
                       need, pre, turns, turn, mc->name, mc->max_seq_len);
}

// Phase keys each kind takes (besides the kind key itself).
static const char *const ramp_keys[] = {"name",   "ramp",   "hold",
                                        "think", "warmup", "saturation"};
static const char *const rate_keys[] = {"name",     "rate",     "arrival", "burstiness",
                                        "duration", "requests", "warmup"};
static const char *const fixed_keys[] = {"name", "fixed", "think", "warmup"};

static sc_status parse_phase(scn_ctx *c, struct fy_node *item, struct fy_node *k, scn_phase *p,
                             bool *named) {
  static const char *const nested[] = {"ramp", "fixed", "saturation"};
  char arrival[16] = "poisson";
  p->burstiness = 1;
  const yaml_map_field f[] = {
      F_STR("name", p->name),
      F_DBL("rate", &p->rate),
      F_STR("arrival", arrival),
      F_DBL("burstiness", &p->burstiness),
      F_DUR("duration", &p->duration_ns),
      F_INT("requests", &p->requests),
      F_DUR("hold", &p->hold_ns),
      F_DUR("think", &p->think_ns),
      F_DUR("warmup", &p->warmup_ns),
  };
  yaml_map_view m;
  SC_TRY(yaml_map_read_view(&c->doc, item, "phases", k, f, COUNT(f), nested, COUNT(nested), &m));
  yaml_map_pos(item, &p->line, &p->col);
  // exactly one kind
  static const char *const kinds[] = {"ramp", "rate", "fixed"};
  int kind = -1;
  for (int i = 0; i < m.n; i++)
    for (int j = 0; j < 3; j++) {
      if (strcmp(m.name[i], kinds[j])) continue;
      if (kind >= 0)
        return yaml_map_fail(&c->doc, m.key[i], NULL,
                             "key '%s': expected one phase kind (ramp, rate or "
                             "fixed) per phase, got both '%s' and '%s'",
                             kinds[j], kinds[kind], kinds[j]);
      kind = j;
    }
  if (kind < 0)
    return yaml_map_fail(
        &c->doc, item, k,
        "key 'phases': expected one phase kind per phase (ramp: "
        "{concurrency: [...]}, rate: R or fixed: {requests, concurrency}), got none");
  p->kind = (scn_phase_kind)kind;
  const char *const *allowed = kind == 0 ? ramp_keys : kind == 1 ? rate_keys : fixed_keys;
  int n_allowed = kind == 0 ? COUNT(ramp_keys) : kind == 1 ? COUNT(rate_keys) : COUNT(fixed_keys);
  for (int i = 0; i < m.n; i++) {
    int j = 0;
    while (j < n_allowed && strcmp(allowed[j], m.name[i])) j++;
    if (j == n_allowed) {
      char keys[200];
      yaml_map_key_list(NULL, 0, allowed, n_allowed, keys, sizeof keys);
      return yaml_map_fail(&c->doc, m.key[i], NULL,
                           "key '%s': not part of a %s phase (a %s phase takes: "
                           "%s)",
                           m.name[i], kinds[kind], kinds[kind], keys);
    }
  }
  *named = yaml_map_has(&m, "name");
  SC_TRY(yaml_map_check(&c->doc, &m, "name", p->name[0] != 0, "a non-empty name"));
  switch (p->kind) {
  case SCN_PHASE_RAMP: {
    static const char *const rk[] = {"concurrency"};
    yaml_map_view r;
    struct fy_node *rv = yaml_map_val(&m, "ramp"), *rkn = yaml_map_key(&m, "ramp");
    SC_TRY(yaml_map_read_view(&c->doc, rv, "ramp", rkn, NULL, 0, rk, 1, &r));
    SC_TRY(yaml_map_need(&c->doc, &r, "concurrency", "a list of user counts, e.g. [1, 2, 4, 8]"));
    SC_TRY(yaml_map_int_list(&c->doc, yaml_map_val(&r, "concurrency"),
                             yaml_map_key(&r, "concurrency"),
                             "a list of user counts, e.g. [1, 2, 4, 8]", 1, SCN_MAX_RAMP,
                             p->concurrency, &p->n_concurrency, NULL));
    SC_TRY(yaml_map_need(&c->doc, &m, "hold", "how long each step runs: " YAML_MAP_DUR_EXPECT));
    SC_TRY(yaml_map_check(&c->doc, &m, "hold", p->hold_ns > 0, "a duration > 0"));
    SC_TRY(yaml_map_check(&c->doc, &m, "warmup", p->warmup_ns < p->hold_ns,
                          "a duration shorter than hold (warm-up is excluded from each step)"));
    if (yaml_map_has(&m, "saturation")) {
      static const char *const none[] = {NULL};
      p->saturation = true;
      p->sat_gain = 0.05;
      p->sat_ttft = 3;
      const yaml_map_field sf[] = {F_DBL("gain", &p->sat_gain),
                                   F_DBL("ttft_growth", &p->sat_ttft)};
      yaml_map_view sm;
      SC_TRY(yaml_map_read_view(&c->doc, yaml_map_val(&m, "saturation"), "saturation",
                                yaml_map_key(&m, "saturation"), sf, 2, none, 0, &sm));
      SC_TRY(yaml_map_check(&c->doc, &sm, "gain", p->sat_gain >= 0 && p->sat_gain <= 10,
                            "a fraction in [0, 10] (0.05: throughput up by less than 5%)"));
      SC_TRY(yaml_map_check(&c->doc, &sm, "ttft_growth", p->sat_ttft >= 1 && p->sat_ttft <= 1e6,
                            "a factor >= 1 (TTFT p95 against the ramp's first step's)"));
    }
    if (!*named) snprintf(p->name, sizeof p->name, "ramp");
    break;
  }
  case SCN_PHASE_RATE: {
    SC_TRY(yaml_map_check(&c->doc, &m, "rate", p->rate > 0, "requests per second, a number > 0"));
    // the processes a scenario names, and those that take burstiness (workload.h's table)
    const char *names[SCN_ARRIVAL_N];
    scn_arrival ids[SCN_ARRIVAL_N];
    char bursty[64] = "";
    int n = 0;
    for (int i = 0; i < SCN_ARRIVAL_N; i++) {
      const wl_arrival_info *ai = workload_arrival((scn_arrival)i);
      if (ai->from_trace) continue;
      if (ai->burstiness)
        snprintf(bursty + strlen(bursty), sizeof bursty - strlen(bursty), "%s%s",
                 bursty[0] ? " or " : "", ai->name);
      ids[n] = (scn_arrival)i, names[n++] = ai->name;
    }
    int a = 0;
    SC_TRY(yaml_map_pick_key(&c->doc, &m, "arrival", arrival, names, n, &a));
    p->arrival = ids[a];
    if (yaml_map_has(&m, "burstiness") && !workload_arrival(p->arrival)->burstiness)
      return yaml_map_fail(&c->doc, yaml_map_key(&m, "burstiness"), NULL,
                           "key 'burstiness': only with arrival: %s (arrival is %s)", bursty,
                           arrival);
    SC_TRY(yaml_map_check(&c->doc, &m, "burstiness", p->burstiness > 0,
                          "a gamma shape > 0 (1 = poisson, < 1 burstier)"));
    int id = yaml_map_find(&m, "duration"), ir = yaml_map_find(&m, "requests");
    if (id >= 0 && ir >= 0) {
      int later = id > ir ? id : ir;
      return yaml_map_fail(&c->doc, m.key[later], NULL,
                           "key '%s': expected exactly one of duration or "
                           "requests in a rate phase, got both",
                           m.name[later]);
    }
    if (id < 0 && ir < 0)
      return yaml_map_fail(&c->doc, item, k,
                           "missing required key 'duration' or 'requests' (how long a "
                           "rate phase sends: exactly one of them)");
    SC_TRY(yaml_map_check(&c->doc, &m, "duration", p->duration_ns > 0, "a duration > 0"));
    SC_TRY(yaml_map_check(&c->doc, &m, "requests", p->requests >= 1, "an integer >= 1"));
    SC_TRY(yaml_map_check(&c->doc, &m, "warmup", id < 0 || p->warmup_ns < p->duration_ns,
                          "a duration shorter than the phase's duration"));
    if (!*named) snprintf(p->name, sizeof p->name, "rate-%g", p->rate);
    break;
  }
  case SCN_PHASE_FIXED: {
    static const char *const none[] = {NULL};
    int conc = 1;
    const yaml_map_field ff[] = {F_INT("requests", &p->requests), F_INT("concurrency", &conc)};
    yaml_map_view fm;
    SC_TRY(yaml_map_read_view(&c->doc, yaml_map_val(&m, "fixed"), "fixed",
                              yaml_map_key(&m, "fixed"), ff, 2, none, 0, &fm));
    SC_TRY(yaml_map_need(&c->doc, &fm, "requests", "how many requests in all, an integer >= 1"));
    SC_TRY(yaml_map_check(&c->doc, &fm, "requests", p->requests >= 1, "an integer >= 1"));
    SC_TRY(yaml_map_check(&c->doc, &fm, "concurrency", conc >= 1, "an integer >= 1"));
    p->concurrency[0] = conc;
    p->n_concurrency = 1;
    if (!*named) snprintf(p->name, sizeof p->name, "fixed");
    break;
  }
  }
  return SC_OK;
}

static sc_status parse_phases(scn_ctx *c, struct fy_node *v, struct fy_node *k) {
  scn_workload *w = &c->s->workload;
  struct fy_node *items[SCN_MAX_PHASES];
  int n = 0;
  SC_TRY(yaml_map_seq(&c->doc, v, k, "a list of phases (each one of ramp, rate or fixed)",
                      SCN_MAX_PHASES, items, &n));
  bool named[SCN_MAX_PHASES];
  for (int i = 0; i < n; i++) {
    SC_TRY(parse_phase(c, items[i], k, &w->phases[i], &named[i]));
    for (int j = 0; named[i] && j < i; j++)
      if (named[j] && !strcmp(w->phases[j].name, w->phases[i].name))
        return yaml_map_fail(&c->doc, fy_node_mapping_lookup_by_string(items[i], "name", FY_NT),
                             items[i], "key 'name': phase name '%s' is used twice",
                             w->phases[i].name);
  }
  // default names: unique against the explicit ones and each other ("ramp", "ramp-2", ...)
  for (int i = 0; i < n; i++) {
    if (named[i]) continue;
    scn_phase *p = &w->phases[i];
    char base[48];
    snprintf(base, sizeof base, "%s", p->name);
    p->name[0] = 0;
    bool taken = false;
    for (int j = 0; j < n; j++)
      taken |= j != i && (named[j] || j < i) && !strcmp(w->phases[j].name, base);
    if (!taken) {
      snprintf(p->name, sizeof p->name, "%s", base);
      continue;
    }
    for (int suffix = 2;; suffix++) {
      char cand[48];
      snprintf(cand, sizeof cand, "%.30s-%d", base, suffix);
      taken = false;
      for (int j = 0; j < n; j++)
        taken |= j != i && (named[j] || j < i) && !strcmp(w->phases[j].name, cand);
      if (!taken) {
        snprintf(p->name, sizeof p->name, "%s", cand);
        break;
      }
    }
  }
  w->n_phases = n;
  return SC_OK;
}

// workload.trace: the file read as a dataset with arrivals, and the one phase that replays it.
static sc_status parse_trace(scn_ctx *c, yaml_map_view *m, const char *trace) {
  scn_workload *w = &c->s->workload;
  struct fy_node *tv = yaml_map_val(m, "trace");
  if (yaml_map_has(m, "phases"))
    return yaml_map_fail(&c->doc, yaml_map_key(m, "phases"), NULL,
                         "key 'phases': not with 'trace' (a trace "
                         "replays its own arrival times in one phase named 'trace')");
  if (!trace[0])
    return yaml_map_expect_at(&c->doc, tv, yaml_map_key(m, "trace"), "trace", "a .jsonl path");
  if (!scn_resolve_path(c, trace, w->dataset, sizeof w->dataset))
    return yaml_map_fail(&c->doc, tv, NULL, "key 'trace': path too long");
  int n = 0;
  uint64_t last = 0;
  sc_error e = {0};
  if (workload_trace_scan(w->dataset, &n, &last, &e) != SC_OK)
    return yaml_map_fail(&c->doc, tv, NULL, "key 'trace': %s", e.msg);
  w->trace = true;
  scn_phase *p = &w->phases[0];
  *p = (scn_phase){.kind = SCN_PHASE_RATE, .arrival = SCN_ARRIVAL_TRACE, .requests = n};
  p->rate = last > 0 ? n / (last / 1e9) : n; // for progress lines only: the trace's mean rate
  snprintf(p->name, sizeof p->name, "trace");
  yaml_map_pos(tv, &p->line, &p->col);
  w->n_phases = 1;
  return SC_OK;
}

sc_status scn_parse_workload(scn_ctx *c, struct fy_node *v, struct fy_node *k) {
  scn_workload *w = &c->s->workload;
  char dataset[1024] = "", trace[1024] = "";
  static const char *const nested[] = {"prompts", "phases", "sampling", "prefixes",
                                       "conversations"};
  const yaml_map_field f[] = {F_STR("dataset", dataset), F_STR("trace", trace),
                              F_BOOL("stop_at_eos", &w->stop_at_eos)};
  yaml_map_view m;
  SC_TRY(yaml_map_read_view(&c->doc, v, "workload", k, f, COUNT(f), nested, COUNT(nested), &m));
  if (yaml_map_has(&m, "prefixes") && !yaml_map_has(&m, "prompts"))
    return yaml_map_fail(&c->doc, yaml_map_key(&m, "prefixes"), NULL,
                         "key 'prefixes': only with 'prompts' (its classes give each request's "
                         "own message), not with a dataset or a trace");
  if (yaml_map_has(&m, "conversations") && yaml_map_has(&m, "trace"))
    return yaml_map_fail(&c->doc, yaml_map_key(&m, "conversations"), NULL,
                         "key 'conversations': not with a trace (its lines name their "
                         "conversations and arrive at their own times)");
  if (yaml_map_has(&m, "trace")) {
    if (yaml_map_has(&m, "prompts") || yaml_map_has(&m, "dataset")) {
      const char *o = yaml_map_has(&m, "prompts") ? "prompts" : "dataset";
      return yaml_map_fail(&c->doc, yaml_map_key(&m, o), NULL,
                           "key '%s': not with 'trace' (a trace gives every "
                           "request's lengths)",
                           o);
    }
    SC_TRY(parse_trace(c, &m, trace));
    goto sampling;
  }
  if (yaml_map_has(&m, "prompts") && yaml_map_has(&m, "dataset")) {
    int later = yaml_map_find(&m, "prompts") > yaml_map_find(&m, "dataset")
                    ? yaml_map_find(&m, "prompts")
                    : yaml_map_find(&m, "dataset");
    return yaml_map_fail(&c->doc, m.key[later], NULL,
                         "key '%s': expected exactly one of prompts or "
                         "dataset, got both",
                         m.name[later]);
  }
  if (!yaml_map_has(&m, "prompts") && !yaml_map_has(&m, "dataset"))
    return yaml_map_fail(&c->doc, v, k,
                         "missing required key 'prompts', 'dataset' or 'trace' (a list of "
                         "prompt classes, or a .jsonl file)");
  SC_TRY(
      yaml_map_need(&c->doc, &m, "phases", "a list of phases (each one of ramp, rate or fixed)"));
  if (yaml_map_has(&m, "prompts"))
    SC_TRY(parse_classes(c, yaml_map_val(&m, "prompts"), yaml_map_key(&m, "prompts")));
  if (yaml_map_has(&m, "prefixes"))
    SC_TRY(parse_prefixes(c, yaml_map_val(&m, "prefixes"), yaml_map_key(&m, "prefixes")));
  if (yaml_map_has(&m, "conversations")) {
    bool ds = !yaml_map_has(&m, "prompts");
    SC_TRY(parse_conversations(c, yaml_map_val(&m, "conversations"),
                               yaml_map_key(&m, "conversations"), ds));
    if (!ds) SC_TRY(check_conversation_fits(c, yaml_map_key(&m, "conversations")));
  }
  if (yaml_map_has(&m, "dataset")) {
    struct fy_node *dv = yaml_map_val(&m, "dataset");
    if (!dataset[0])
      return yaml_map_expect_at(&c->doc, dv, yaml_map_key(&m, "dataset"), "dataset",
                                "a .jsonl path");
    if (!scn_resolve_path(c, dataset, w->dataset, sizeof w->dataset))
      return yaml_map_fail(&c->doc, dv, NULL, "key 'dataset': path too long");
    FILE *fp = scn_is_dir(w->dataset) ? NULL : fopen(w->dataset, "rb");
    if (!fp)
      return yaml_map_fail(&c->doc, dv, NULL, "key 'dataset': cannot read '%s': %s", w->dataset,
                           scn_is_dir(w->dataset) ? "a directory, not a .jsonl file"
                                                  : strerror(errno));
    fclose(fp);
  }
sampling:
  if (yaml_map_has(&m, "sampling")) {
    static const char *const none[] = {NULL};
    const yaml_map_field sf[] = {F_DBL("temperature", &w->temperature), F_DBL("top_p", &w->top_p)};
    yaml_map_view sm;
    SC_TRY(yaml_map_read_view(&c->doc, yaml_map_val(&m, "sampling"), "sampling",
                              yaml_map_key(&m, "sampling"), sf, 2, none, 0, &sm));
    SC_TRY(yaml_map_check(&c->doc, &sm, "temperature", w->temperature >= 0,
                          "a number >= 0 (0 = greedy)"));
    SC_TRY(
        yaml_map_check(&c->doc, &sm, "top_p", w->top_p > 0 && w->top_p <= 1, "a number in (0, 1]"));
  }
  if (w->trace) return SC_OK;
  return parse_phases(c, yaml_map_val(&m, "phases"), yaml_map_key(&m, "phases"));
}

// --- public API: phases

int scenario_phase_requests(const scn_phase *p) {
  if (p->kind == SCN_PHASE_FIXED || (p->kind == SCN_PHASE_RATE && !p->duration_ns))
    return p->requests;
  return 0;
}

uint64_t scenario_phase_duration_ns(const scn_phase *p) {
  if (p->kind == SCN_PHASE_RAMP) return (uint64_t)p->n_concurrency * p->hold_ns;
  if (p->kind == SCN_PHASE_RATE) return p->duration_ns;
  return 0;
}

const char *scenario_phase_kind_name(scn_phase_kind k) {
  switch (k) {
  case SCN_PHASE_RAMP: return "ramp";
  case SCN_PHASE_RATE: return "rate";
  case SCN_PHASE_FIXED: return "fixed";
  }
  return "unknown";
}
