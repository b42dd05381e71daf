// The simulated replica: the engine with backend "sim" (the real scheduler and KV cache, steps
// priced by the cost model), driven synchronously by the runner's event loop in virtual time.
//
// No thread. A step starts when the loop calls replica_sim_advance at a time when the replica
// is idle and has work; it is planned and priced at once, and its events are held until the
// virtual clock reaches its end (start + priced duration), when they become pollable, stamped
// with that end. Requests submitted or cancelled while a step is in flight are seen by the next
// step, as a real engine sees them after its current step. The virtual clock belongs to the
// runner; this file only reads it through the engine's clock.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/replica.h"
#include "engine/replica_keys.h"

typedef struct simrep {
  engine *e;
  engine_config cfg;
  replica_keys keys;
  replica_evq ready;          // pollable
  replica_evq held;           // the step in flight's, released at busy_until
  bool busy;
  uint64_t busy_until; // clock time the step in flight ends
  bool admitting;
  int n_ranks;
  char error[512];
} simrep;

static uint64_t now_ns(const simrep *s) { return sc_clock_now(&s->cfg.clock); }

// Runs one engine step at the clock's now; its events are held until it ends.
static void start_step(simrep *s) {
  engine_step_result res;
  sc_error err = {{0}};
  uint64_t t = now_ns(s);
  sc_status st = engine_step(s->e, &res, &err);
  if (st != SC_OK) { // the cost model refused: a bug or an impossible layout, not a fault
    snprintf(s->error, sizeof s->error, "%s", err.msg[0] ? err.msg : sc_status_name(st));
    return;
  }
  if (res.info.duration_ns == 0 && res.n_events == 0 && !engine_idle(s->e)) {
    snprintf(s->error, sizeof s->error,
             "the scheduler ran nothing while %d requests wait (a scheduler bug)",
             res.info.queue_len);
    return;
  }
  uint64_t end = t + res.info.duration_ns;
  replica_evq *q = res.info.duration_ns > 0 ? &s->held : &s->ready;
  for (int i = 0; i < res.n_events; i++) {
    replica_event ev = rk_event(&s->keys, &res.events[i], end);
    rq_push(q, &ev);
  }
  if (res.info.duration_ns > 0) {
    rq_push(q, &(replica_event){.kind = REPLICA_EV_STEP, .step = res.info, .t_ns = end});
    s->busy = true;
    s->busy_until = end;
  }
}

uint64_t replica_sim_next_ns(replica *r) {
  simrep *s = r->ctx;
  if (s->busy) return s->busy_until;
  if (s->error[0] || engine_idle(s->e)) return UINT64_MAX;
  return now_ns(s);
}

bool replica_sim_advance(replica *r, uint64_t now) {
  simrep *s = r->ctx;
  size_t before = rq_len(&s->ready);
  if (s->busy && s->busy_until <= now) {
    for (size_t i = s->held.head; i < s->held.n; i++) rq_push(&s->ready, &s->held.v[i]);
    s->held.head = s->held.n = 0;
    s->busy = false;
  }
  if (!s->busy && !s->error[0] && !engine_idle(s->e)) start_step(s);
  return rq_len(&s->ready) > before;
}

// --- vtable
static sc_status s_submit(void *ctx, uint64_t key, const engine_request *q, sc_error *err) {
  simrep *s = ctx;
  if (s->error[0]) return sc_fail(err, SC_ABORTED, "replica: dead (%s)", s->error);
  uint64_t id = 0;
  sc_error e = {{0}};
  sc_status st = engine_submit(s->e, q, &id, &e);
  if (st == SC_OK && !rk_put(&s->keys, key, id)) {
    engine_cancel(s->e, id);
    st = SC_OOM;
  }
  if (st != SC_OK) {
    replica_event ev = {.kind = REPLICA_EV_FAILED, .key = key, .status = st, .t_ns = now_ns(s)};
    snprintf(ev.what, sizeof ev.what, "%s", rk_status_kind(st));
    if (!rq_push(&s->ready, &ev)) return sc_fail(err, SC_OOM, "replica: out of memory");
  }
  return SC_OK;
}

static void s_cancel(void *ctx, uint64_t key) {
  simrep *s = ctx;
  uint64_t id = rk_id(&s->keys, key);
  if (id) engine_cancel(s->e, id);
}

static int s_poll(void *ctx, replica_event *out, int cap) {
  return rq_take(&((simrep *)ctx)->ready, out, cap);
}

static replica_health s_health(void *ctx) {
  simrep *s = ctx;
  if (s->error[0]) return REPLICA_DEAD;
  return s->admitting ? REPLICA_HEALTHY : REPLICA_DRAINING;
}

static void s_set_admitting(void *ctx, bool admitting) {
  simrep *s = ctx;
  s->admitting = admitting;
  engine_set_admitting(s->e, admitting);
}

static void s_stats(void *ctx, engine_stats *out) { engine_stats_get(((simrep *)ctx)->e, out); }

static sc_status s_rank_mem(void *ctx, int r, size_t *used, size_t *total) {
  return engine_rank_mem(((simrep *)ctx)->e, r, used, total);
}

static const char *s_error(void *ctx) { return ((simrep *)ctx)->error; }

static void s_free(void *ctx) {
  simrep *s = ctx;
  if (!s) return;
  engine_free(s->e);
  rk_free(&s->keys);
  rq_free(&s->ready);
  rq_free(&s->held);
  free(s);
}

static const replica_i sim_i = {
    .submit = s_submit,
    .cancel = s_cancel,
    .poll = s_poll,
    .wait_fd = NULL,
    .health = s_health,
    .set_admitting = s_set_admitting,
    .stats = s_stats,
    .rank_mem = s_rank_mem,
    .error = s_error,
    .free = s_free,
};

bool replica_is_sim(const replica *r) { return r && r->i == &sim_i; }

sc_status replica_sim_new(const engine_config *cfg, int index, replica **out, sc_error *err) {
  *out = NULL;
  if (!cfg->clock.now_ns || strcmp(cfg->backend, "sim") != 0)
    return sc_fail(err, SC_INVALID, "replica: a simulated replica needs backend sim and a clock");
  simrep *s = calloc(1, sizeof *s);
  replica *r = calloc(1, sizeof *r);
  if (!s || !r) {
    free(s);
    free(r);
    return sc_fail(err, SC_OOM, "replica: out of memory");
  }
  s->cfg = *cfg;
  s->admitting = true;
  sc_status st = engine_new(&s->cfg, &s->e, err);
  if (st != SC_OK) {
    s_free(s);
    free(r);
    return st;
  }
  s->n_ranks = cfg->tp * cfg->pp;
  *r = (replica){.i = &sim_i, .ctx = s, .index = index, .n_ranks = s->n_ranks};
  *out = r;
  return SC_OK;
}
