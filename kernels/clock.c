// CLOCK_MONOTONIC and the virtual clock behind the sc_clock seam.
#include "kernels/clock.h"

#include <time.h>

uint64_t sc_monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t monotonic_now(void *ctx) {
  (void)ctx;
  return sc_monotonic_ns();
}

sc_clock sc_clock_monotonic(void) { return (sc_clock){.now_ns = monotonic_now, .ctx = 0}; }

static uint64_t virtual_now(void *ctx) { return *(const uint64_t *)ctx; }

sc_clock sc_clock_virtual(uint64_t *now) { return (sc_clock){.now_ns = virtual_now, .ctx = now}; }
