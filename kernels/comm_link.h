// A throttled link (the slow-link fault), shared by the communicators (kernels/comm_shm.c,
// kernels/cuda/comm_cuda.c): what is set, and what one transfer costs on it. How each
// communicator sleeps that cost (and wakes early on abort) stays its own.
//
// Cost of a transfer of `bytes` whose own time (copying, summing) was own_ns: latency_ns +
// bytes / bandwidth (when capped) + (factor - 1) x own_ns (when factor > 1), in ns.
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/clock.h"

typedef struct comm_link {
  atomic_bool on;     // a fault is set: the only read on a communicator's fast path
  pthread_mutex_t mu; // guards the three below
  double factor;       // > 1: transfers take factor x their own time; else 0
  uint64_t latency_ns; // added per transfer
  double bandwidth;    // bytes/s cap; 0: none
} comm_link;

// 0 on success (no fault set), else the error of pthread_mutex_init.
static inline int comm_link_init(comm_link *l) {
  atomic_init(&l->on, false);
  l->factor = 0, l->latency_ns = 0, l->bandwidth = 0;
  return pthread_mutex_init(&l->mu, NULL);
}

static inline void comm_link_destroy(comm_link *l) { pthread_mutex_destroy(&l->mu); }

// Sets the fault; factor <= 1 with no latency and no cap clears it. Any thread.
static inline void comm_link_set(comm_link *l, double factor, uint64_t latency_ns,
                                 double bandwidth) {
  pthread_mutex_lock(&l->mu);
  l->factor = factor > 1 ? factor : 0;
  l->latency_ns = latency_ns;
  l->bandwidth = bandwidth > 0 ? bandwidth : 0;
  atomic_store_explicit(&l->on, factor > 1 || latency_ns > 0 || bandwidth > 0,
                        memory_order_relaxed);
  pthread_mutex_unlock(&l->mu);
}

static inline bool comm_link_on(comm_link *l) {
  return atomic_load_explicit(&l->on, memory_order_relaxed);
}

// Monotonic ns while the link is slow (own-time accounting), else 0 (no clock read).
static inline uint64_t comm_link_clock(bool slow) { return slow ? sc_monotonic_ns() : 0; }

// The cost above, in ns (0 when none; at most 1e18).
static inline uint64_t comm_link_cost(comm_link *l, double bytes, uint64_t own_ns) {
  pthread_mutex_lock(&l->mu);
  double ns = (double)l->latency_ns;
  if (l->bandwidth > 0) ns += bytes / l->bandwidth * 1e9;
  if (l->factor > 1) ns += (l->factor - 1) * (double)own_ns;
  pthread_mutex_unlock(&l->mu);
  return ns < 1 ? 0 : ns > 1e18 ? (uint64_t)1e18 : (uint64_t)ns;
}
