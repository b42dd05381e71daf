// Sorting many doubles (see util.h, sc_sort_doubles): an LSD radix sort on the IEEE 754 bit
// patterns, made order-preserving, with NaNs moved to the end first. The metrics sort every
// inter-token latency of a run (millions), where qsort's comparator calls dominated a
// simulated hour (docs/benchmarks.md, simulator speed). Not here: percentiles (reports/metrics.c).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/util.h"

enum {
  RADIX_MIN = 512, // below it qsort is as fast and needs no buffer
  BITS = 11,       // bits per digit
  BUCKETS = 1 << BITS,
  DIGITS = (64 + BITS - 1) / BITS,
};

// The bits of v as an unsigned key in the order of the values: negatives reversed below the
// positives. -0.0 sorts just before +0.0 (qsort leaves equal values in either order).
static inline uint64_t key_of(double v) {
  uint64_t u;
  memcpy(&u, &v, sizeof u);
  return (u >> 63) ? ~u : u | 0x8000000000000000ull;
}

static inline double value_of(uint64_t k) {
  uint64_t u = (k >> 63) ? k & 0x7fffffffffffffffull : ~k;
  double v;
  memcpy(&v, &u, sizeof v);
  return v;
}

void sc_sort_doubles(double *v, size_t n) {
  // NaNs to the end, in their order (as sc_cmp_double sorts them)
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (!isnan(v[i])) v[m++] = v[i];
  size_t nan_count = n - m;
  if (nan_count) {
    // the loop above overwrote NaNs with later numbers; they are all NaN, any payload will do
    for (size_t i = m; i < n; i++) v[i] = NAN;
  }
  if (m < RADIX_MIN) {
    qsort(v, m, sizeof *v, sc_cmp_double);
    return;
  }
  uint64_t *a = malloc(m * sizeof *a), *b = malloc(m * sizeof *b);
  if (!a || !b) {
    free(a);
    free(b);
    qsort(v, m, sizeof *v, sc_cmp_double);
    return;
  }
  // 6 digits of 11 bits: the counts (96 KiB) stay in L2
  static _Thread_local size_t count[DIGITS][BUCKETS];
  memset(count, 0, sizeof count);
  for (size_t i = 0; i < m; i++) {
    uint64_t k = a[i] = key_of(v[i]);
    for (int d = 0; d < DIGITS; d++) count[d][(k >> (BITS * d)) & (BUCKETS - 1)]++;
  }
  for (int d = 0; d < DIGITS; d++) {
    size_t *c = count[d];
    if (c[(a[0] >> (BITS * d)) & (BUCKETS - 1)] == m) continue; // one digit for all: no move
    size_t sum = 0;
    for (int j = 0; j < BUCKETS; j++) {
      size_t t = c[j];
      c[j] = sum;
      sum += t;
    }
    for (size_t i = 0; i < m; i++) b[c[(a[i] >> (BITS * d)) & (BUCKETS - 1)]++] = a[i];
    uint64_t *t = a;
    a = b;
    b = t;
  }
  for (size_t i = 0; i < m; i++) v[i] = value_of(a[i]);
  free(a);
  free(b);
}
