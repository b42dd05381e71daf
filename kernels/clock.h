// The clock seam: every duration in shardcheck is read through an sc_clock.
//
// Real mode uses CLOCK_MONOTONIC (never wall time for durations: clock-jump faults move the
// wall clock and nothing may notice). Sim mode uses a virtual clock: a counter the event loop
// advances (runner/runner.c); reading it costs nothing and it moves only when told.
#pragma once

#include <stdint.h>

typedef struct sc_clock {
  uint64_t (*now_ns)(void *ctx); // ns since an arbitrary fixed origin; never goes back
  void *ctx;
} sc_clock;

// The process-wide monotonic clock (ctx unused).
sc_clock sc_clock_monotonic(void);
uint64_t sc_monotonic_ns(void);

// A virtual clock reading *now (ns); whoever owns *now advances it, never backwards.
sc_clock sc_clock_virtual(uint64_t *now);

static inline uint64_t sc_clock_now(const sc_clock *c) { return c->now_ns(c->ctx); }

// The monotonic clock in seconds (benchmarks and measurements that print seconds).
static inline double sc_monotonic_s(void) { return (double)sc_monotonic_ns() * 1e-9; }
