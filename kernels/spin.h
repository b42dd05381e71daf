// Short spin-waits, for a thread that expects a peer on another core within microseconds (the
// CPU backend's kernel pool, the shm communicator's barrier): cheaper than a sleep and a
// wake-up on a condition variable, which cost tens of microseconds each.
#pragma once

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/clock.h"

// One turn of a spin-wait: a pause for the first turns, then a yield, so that two threads the
// OS has put on one core (after a long sleep, say) do not spin each other's time away.
static inline void sc_spin_pause(unsigned turn) {
  if (turn < 64) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  } else {
    sched_yield();
  }
}

// Spins while *a == v, for at most max_ns, and (checked every 64 turns, like the clock) while
// stop is NULL or stop(ctx) is false. Returns the last value read (acquire).
static inline unsigned long long sc_spin_while_equal(atomic_ullong *a, unsigned long long v,
                                                     uint64_t max_ns, bool (*stop)(void *ctx),
                                                     void *ctx) {
  uint64_t t0 = 0;
  for (unsigned it = 0;; it++) {
    unsigned long long cur = atomic_load_explicit(a, memory_order_acquire);
    if (cur != v) return cur;
    if ((it & 63u) == 63u) {
      if (stop && stop(ctx)) return cur;
      uint64_t now = sc_monotonic_ns();
      if (!t0) t0 = now;
      else if (now - t0 > max_ns) return cur;
    }
    sc_spin_pause(it);
  }
}
