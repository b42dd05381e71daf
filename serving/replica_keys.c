// The caller-key <-> engine-id map, event translation and event queue shared by the
// replicas (see replica_keys.h).
#include "serving/replica_keys.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t km_slot(const replica_keys *m, uint64_t key) {
  uint64_t h = key * 0x9E3779B97F4A7C15ull;
  size_t i = (size_t)(h >> 17) & (m->cap - 1);
  while (m->vals[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
  return i;
}

static bool km_put(replica_keys *m, uint64_t key, uint64_t val);

static bool km_grow(replica_keys *m) {
  replica_keys g = {.cap = m->cap ? m->cap * 2 : 1024};
  g.keys = calloc(g.cap, sizeof *g.keys);
  g.vals = calloc(g.cap, sizeof *g.vals);
  if (!g.keys || !g.vals) {
    free(g.keys);
    free(g.vals);
    return false;
  }
  for (size_t i = 0; i < m->cap; i++)
    if (m->vals[i]) {
      size_t j = km_slot(&g, m->keys[i]);
      g.keys[j] = m->keys[i];
      g.vals[j] = m->vals[i];
      g.n++;
    }
  free(m->keys);
  free(m->vals);
  m->keys = g.keys;
  m->vals = g.vals;
  m->cap = g.cap;
  m->n = g.n;
  return true;
}

static bool km_put(replica_keys *m, uint64_t key, uint64_t val) {
  if ((m->n + 1) * 2 > m->cap && !km_grow(m)) return false;
  size_t i = km_slot(m, key);
  if (!m->vals[i]) m->n++;
  m->keys[i] = key;
  m->vals[i] = val;
  return true;
}

uint64_t rk_id(const replica_keys *m, uint64_t key) {
  return m->cap ? m->vals[km_slot(m, key)] : 0;
}

// Removes key, re-inserting the rest of its probe run (backward-shift deletion).
void rk_del(replica_keys *m, uint64_t key) {
  if (!m->cap) return;
  size_t i = km_slot(m, key);
  if (!m->vals[i]) return;
  m->vals[i] = 0;
  m->n--;
  for (size_t j = (i + 1) & (m->cap - 1); m->vals[j]; j = (j + 1) & (m->cap - 1)) {
    uint64_t k = m->keys[j], v = m->vals[j];
    m->vals[j] = 0;
    m->n--;
    km_put(m, k, v);
  }
}

bool rk_put(replica_keys *m, uint64_t key, uint64_t id) {
  if (id >= m->cap_ids) {
    size_t cap = m->cap_ids ? m->cap_ids : 1024;
    while (cap <= id) cap *= 2;
    uint64_t *p = realloc(m->id_to_key, cap * sizeof *p);
    if (!p) return false;
    m->id_to_key = p;
    m->cap_ids = cap;
  }
  m->id_to_key[id] = key;
  return km_put(m, key, id);
}

void rk_each(const replica_keys *m, void (*fn)(void *ud, uint64_t key), void *ud) {
  for (size_t i = 0; i < m->cap; i++)
    if (m->vals[i]) fn(ud, m->keys[i]);
}

void rk_free(replica_keys *m) {
  free(m->keys);
  free(m->vals);
  free(m->id_to_key);
  memset(m, 0, sizeof *m);
}

replica_event rk_event(replica_keys *m, const engine_event *e, uint64_t t) {
  uint64_t key = e->req_id < m->cap_ids ? m->id_to_key[e->req_id] : 0;
  replica_event ev = {.key = key, .t_ns = t};
  if (e->kind == ENGINE_EV_TOKEN) {
    ev.kind = REPLICA_EV_TOKEN;
    ev.token = e->token;
    ev.index = e->index;
    ev.sched_ns = e->index == 0 ? e->sched_ns : 0;
  } else if (e->kind == ENGINE_EV_FAILED) {
    ev.kind = REPLICA_EV_FAILED;
    ev.status = e->status;
    ev.n_generated = e->n_generated;
    ev.failure = replica_failure_of(ev.status);
    rk_del(m, key);
  } else {
    ev.kind = REPLICA_EV_FINISHED;
    ev.reason = e->reason;
    ev.n_generated = e->n_generated;
    rk_del(m, key);
  }
  return ev;
}

bool rq_push(replica_evq *q, const replica_event *ev) {
  if (q->n == q->cap && q->head > 0) { // compact first
    memmove(q->v, q->v + q->head, (q->n - q->head) * sizeof *q->v);
    q->n -= q->head;
    q->head = 0;
  }
  if (q->n == q->cap) {
    size_t cap = q->cap ? q->cap * 2 : 1024;
    replica_event *p = realloc(q->v, cap * sizeof *p);
    if (!p) return false;
    q->v = p;
    q->cap = cap;
  }
  q->v[q->n++] = *ev;
  return true;
}

int rq_take(replica_evq *q, replica_event *out, int cap) {
  size_t n = rq_len(q);
  if (n > (size_t)cap) n = (size_t)cap;
  if (n) memcpy(out, q->v + q->head, n * sizeof *out);
  q->head += n;
  if (q->head == q->n) q->head = q->n = 0;
  return (int)n;
}

void rq_free(replica_evq *q) {
  free(q->v);
  memset(q, 0, sizeof *q);
}
