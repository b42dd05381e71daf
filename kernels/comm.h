// The communicator seam: collectives among the ranks of one group, with deadlines and abort.
//
// Backends: shm (ranks are threads in one process; kernels/comm_shm.c), nccl and sim (later).
// A comm is one rank's endpoint. Every blocking call returns SC_TIMEOUT once the group's
// deadline has passed since the call began, and SC_ABORTED (within 100 ms) once any thread
// has called comm_abort on any endpoint of the group; after an abort every later call on the
// group returns SC_ABORTED at once. Buffers are host memory for shm.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "kernels/status.h"

typedef struct comm_i {
  const char *name;
  sc_status (*allreduce_sum)(void *ctx, float *buf, size_t n);          // in place
  sc_status (*allgather)(void *ctx, const float *send, float *recv, size_t n); // recv: n_ranks*n, rank order
  sc_status (*send)(void *ctx, const void *buf, size_t bytes, int peer);
  sc_status (*recv)(void *ctx, void *buf, size_t bytes, int peer);
  sc_status (*barrier)(void *ctx);
  sc_status (*poll_error)(void *ctx); // SC_OK, or the status that broke the group
  void (*abort)(void *ctx);           // idempotent; callable from any thread
} comm_i;

typedef struct comm {
  const comm_i *i;
  void *ctx;
  int rank;
  int n_ranks;
} comm;

static inline sc_status comm_allreduce_sum(comm *c, float *buf, size_t n) {
  return c->i->allreduce_sum(c->ctx, buf, n);
}
static inline sc_status comm_allgather(comm *c, const float *send, float *recv, size_t n) {
  return c->i->allgather(c->ctx, send, recv, n);
}
static inline sc_status comm_send(comm *c, const void *buf, size_t bytes, int peer) {
  return c->i->send(c->ctx, buf, bytes, peer);
}
static inline sc_status comm_recv(comm *c, void *buf, size_t bytes, int peer) {
  return c->i->recv(c->ctx, buf, bytes, peer);
}
static inline sc_status comm_barrier(comm *c) { return c->i->barrier(c->ctx); }
static inline sc_status comm_poll_error(comm *c) { return c->i->poll_error(c->ctx); }
static inline void comm_abort(comm *c) { c->i->abort(c->ctx); }

// --- shm backend: n_ranks threads of one process share a group.
typedef struct comm_shm_group comm_shm_group;

// deadline_ns: how long one blocking call may wait (0 = 60 s). On error *out is NULL.
sc_status comm_shm_group_new(int n_ranks, uint64_t deadline_ns, comm_shm_group **out);
// The endpoint of rank r (0 <= r < n_ranks), owned by the group.
comm *comm_shm_group_rank(comm_shm_group *g, int r);
void comm_shm_group_abort(comm_shm_group *g); // same as comm_abort on any endpoint
void comm_shm_group_free(comm_shm_group *g);  // NULL is a no-op; no rank may be inside a call
// Fault hook (a throttled link): every later transfer of the group takes factor x its time
// (factor > 1), plus latency_ns, and moves at most bandwidth bytes/s (0: no cap). All zero or
// factor <= 1 with no latency and no cap: back to normal. Thread-safe.
void comm_shm_group_set_slow(comm_shm_group *g, double factor, uint64_t latency_ns,
                             double bandwidth);
