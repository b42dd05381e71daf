// The fault timeline (see timeline.h): resolves targets against one deployment, expands
// every-rank sweeps and draws chaos schedules from the seed (splitmix64, so a schedule depends
// only on the seed, the chaos item's position and the deployment's layout).
#include "faults/timeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "faults/kinds.h"

// --- targets
typedef struct tgt {
  bool every;      // every-rank (resolved by the sweep)
  int replica;     // -1: none given
  int rank;        // -1: whole replica
} tgt;

static tgt parse_target(const char *t) {
  tgt g = {.replica = -1, .rank = -1};
  if (!t[0]) return g;
  if (!strcmp(t, "every-rank")) {
    g.every = true;
    return g;
  }
  int r = -1, k = -1;
  if (sscanf(t, "replica%d.rank%d", &r, &k) == 2) {
    g.replica = r;
    g.rank = k;
  } else if (sscanf(t, "replica%d", &r) == 1) {
    g.replica = r;
  }
  return g;
}

int ft_sweeps(const scenario *s, const scn_deployment *d) {
  for (int i = 0; i < s->n_faults; i++)
    if (s->faults[i].kind != SCN_FAULT_CHAOS && !strcmp(s->faults[i].target, "every-rank"))
      return d->tp * d->pp * d->dp;
  return 1;
}

void ft_sweep_label(const scn_deployment *d, int sweep, char *buf, size_t cap) {
  int per = d->tp * d->pp;
  snprintf(buf, cap, "replica%d.rank%d", sweep / per, sweep % per);
}

// --- the seeded generator of chaos draws
static uint64_t splitmix(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
uint64_t ft_below(uint64_t *x, uint64_t n) { return n ? splitmix(x) % n : 0; }

static void fmt_s(char *b, size_t cap, uint64_t ns) {
  snprintf(b, cap, "%.3f s", (double)ns / 1e9);
}

// The detail line of a fault as planned (its kind's row says how) and its target.
static void describe(ft_fault *f) {
  char dur[32] = "";
  if (f->duration_ns) {
    char t[24];
    fmt_s(t, sizeof t, f->duration_ns);
    snprintf(dur, sizeof dur, " for %s", t);
  }
  const fk_row *k = fk_of(f->kind);
  if (k && k->detail) k->detail(f, dur);
  if (f->replica >= 0 && f->rank >= 0)
    snprintf(f->target, sizeof f->target, "replica%d.rank%d", f->replica, f->rank);
  else if (f->replica >= 0)
    snprintf(f->target, sizeof f->target, "replica%d", f->replica);
  else
    f->target[0] = 0;
}

static ft_fault from_item(const scn_fault *sf, int phase) {
  ft_fault f = {.kind = sf->kind, .src = sf, .phase = phase, .at_ns = sf->at_ns,
                .duration_ns = sf->duration_ns, .replica = -1, .rank = -1,
                .factor = sf->factor, .latency_ns = sf->latency_ns,
                .bandwidth = sf->bandwidth, .fraction = sf->fraction, .count = sf->count,
                .stages = sf->stages ? sf->stages
                                     : SCN_STAGE_QUEUED | SCN_STAGE_PREFILL | SCN_STAGE_DECODE,
                .after_allocs = sf->after_allocs};
  snprintf(f.what, sizeof f.what, "%s", sf->what);
  return f;
}

static int phase_index(const scenario *s, const char *name) {
  for (int i = 0; i < s->workload.n_phases; i++)
    if (!strcmp(s->workload.phases[i].name, name)) return i;
  return -1;
}

typedef struct plan_b {
  ft_plan *p;
  int cap;
} plan_b;

static bool push(plan_b *b, const ft_fault *f) {
  if (b->p->n == b->cap) {
    int cap = b->cap ? 2 * b->cap : 16;
    ft_fault *v = realloc(b->p->v, (size_t)cap * sizeof *v);
    if (!v) return false;
    b->p->v = v;
    b->cap = cap;
  }
  b->p->v[b->p->n++] = *f;
  return true;
}

static void skip(ft_plan *p, const scn_fault *sf, const char *why) {
  if (!p->skipped++)
    snprintf(p->skipped_why, sizeof p->skipped_why, "%s (line %d): %s",
             scenario_fault_kind_name(sf->kind), sf->line, why);
}

static bool kept_alive(const scn_fault *chaos, int rep) {
  char name[32];
  snprintf(name, sizeof name, "replica%d", rep);
  for (int i = 0; i < chaos->n_keep_alive; i++)
    if (!strcmp(chaos->keep_alive[i], name)) return true;
  return false;
}

// Draws the faults of one chaos item. Kinds that need a target draw it among the replicas
// not kept alive; when there is none, only target-free kinds (cancel_storm) can be drawn.
static bool draw_chaos(const scn_fault *c, int item, const scn_deployment *d, uint64_t seed,
                       plan_b *b) {
  uint64_t x = seed ^ (0xC4A05ull + (uint64_t)item * 0x9E3779B97F4A7C15ull);
  int ranks = d->tp * d->pp;
  int alive[64], n_alive = 0;
  for (int r = 0; r < d->dp && n_alive < 64; r++)
    if (!kept_alive(c, r)) alive[n_alive++] = r;
  scn_fault_kind kinds[SCN_FAULT_N];
  int n_kinds = 0;
  for (int k = 0; k < SCN_FAULT_N; k++)
    if (c->kinds_mask & (1u << k)) {
      if (fk_of((scn_fault_kind)k)->chaos_replica && n_alive == 0) continue;
      kinds[n_kinds++] = (scn_fault_kind)k;
    }
  int count = c->count_min + (int)ft_below(&x, (uint64_t)(c->count_max - c->count_min + 1));
  if (n_kinds == 0) {
    if (count > 0) skip(b->p, c, "every replica is kept alive");
    return true;
  }
  uint64_t from = c->between_ns[0], span = c->between_ns[1] - c->between_ns[0];
  for (int i = 0; i < count; i++) {
    ft_fault f = {.kind = kinds[ft_below(&x, (uint64_t)n_kinds)], .src = c, .phase = -1,
                  .at_ns = from + (span ? ft_below(&x, span + 1) : 0), .replica = -1, .rank = -1,
                  .stages = SCN_STAGE_QUEUED | SCN_STAGE_PREFILL | SCN_STAGE_DECODE};
    const fk_row *k = fk_of(f.kind);
    if (k->chaos_replica) f.replica = alive[ft_below(&x, (uint64_t)n_alive)];
    int rank = (int)ft_below(&x, (uint64_t)ranks);
    if (k->draw) k->draw(&f, &x, rank);
    describe(&f);
    if (!push(b, &f)) return false;
  }
  return true;
}

static int cmp_fault(const void *a, const void *b) {
  const ft_fault *x = a, *y = b;
  if (x->phase != y->phase) return x->phase < y->phase ? -1 : 1;
  if (x->at_ns != y->at_ns) return x->at_ns < y->at_ns ? -1 : 1;
  return x->src < y->src ? -1 : x->src > y->src; // scenario order (qsort is not stable)
}

sc_status ft_plan_build(const scenario *s, const scn_deployment *d, int sweep, uint64_t seed,
                        ft_plan *out, sc_error *err) {
  *out = (ft_plan){0};
  plan_b b = {.p = out};
  int ranks = d->tp * d->pp;
  for (int i = 0; i < s->n_faults; i++) {
    const scn_fault *sf = &s->faults[i];
    if (sf->kind == SCN_FAULT_CHAOS) {
      if (!draw_chaos(sf, i, d, seed, &b)) goto oom;
      continue;
    }
    int phase = sf->at_phase[0] ? phase_index(s, sf->at_phase) : -1;
    ft_fault f = from_item(sf, phase);
    tgt g = parse_target(sf->target);
    if (g.every) {
      g.replica = sweep / ranks;
      g.rank = sweep % ranks;
    }
    if (g.replica >= d->dp) {
      skip(out, sf, "its replica does not exist in this deployment");
      continue;
    }
    if (g.rank >= ranks) {
      skip(out, sf, "its rank does not exist in this deployment");
      continue;
    }
    f.replica = g.replica;
    f.rank = g.rank;
    describe(&f);
    if (!push(&b, &f)) goto oom;
  }
  if (out->n > 1) qsort(out->v, (size_t)out->n, sizeof *out->v, cmp_fault);
  return SC_OK;
oom:
  ft_plan_free(out);
  return sc_fail(err, SC_OOM, "faults: out of memory planning the timeline");
}

void ft_plan_free(ft_plan *p) {
  if (!p) return;
  free(p->v);
  *p = (ft_plan){0};
}
