// What every replica implementation shares: the caller-key <-> engine-id mapping, the
// translation of engine events into replica events (serving/replica.h), and the queue that
// holds events until they are polled. Internal to engine/.
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "serving/replica.h"

// An open-addressing map caller key -> engine id (0 = empty slot), plus id -> key.
typedef struct replica_keys {
  uint64_t *keys, *vals; // (cap)
  size_t cap, n;
  uint64_t *id_to_key;   // (cap_ids) indexed by engine id
  size_t cap_ids;
} replica_keys;

// Records that engine id `id` serves `key`. False when memory ran out.
bool rk_put(replica_keys *m, uint64_t key, uint64_t id);
// The engine id serving key, or 0.
uint64_t rk_id(const replica_keys *m, uint64_t key);
// Forgets key (its request ended).
void rk_del(replica_keys *m, uint64_t key);
// Calls fn(ud, key) for every key still mapped (the requests a dying replica holds).
void rk_each(const replica_keys *m, void (*fn)(void *ud, uint64_t key), void *ud);
void rk_free(replica_keys *m); // and resets *m to empty

// The replica event for engine event e seen at time t; a FINISHED or FAILED event forgets its
// key.
replica_event rk_event(replica_keys *m, const engine_event *e, uint64_t t);

// A FIFO of replica events: [head, n) pending in v (cap). Zero-initialised = empty.
typedef struct replica_evq {
  replica_event *v;
  size_t head, n, cap;
} replica_evq;

// Appends ev (compacting or growing the array). False when memory ran out.
bool rq_push(replica_evq *q, const replica_event *ev);
// Moves up to cap events, oldest first, into out; returns how many.
int rq_take(replica_evq *q, replica_event *out, int cap);
static inline size_t rq_len(const replica_evq *q) { return q->n - q->head; }
void rq_free(replica_evq *q); // and resets *q to empty
