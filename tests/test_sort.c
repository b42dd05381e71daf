// sc_sort_doubles (kernels/sort.c) against qsort with sc_cmp_double.
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/util.h"

static void check_same_as_qsort(double *v, size_t n) {
  double *w = malloc(n * sizeof *w);
  memcpy(w, v, n * sizeof *w);
  qsort(w, n, sizeof *w, sc_cmp_double);
  sc_sort_doubles(v, n);
  for (size_t i = 0; i < n; i++) {
    if (isnan(w[i])) {
      cr_assert(isnan(v[i]), "index %zu: NaN expected, got %g", i, v[i]);
      continue;
    }
    cr_assert(v[i] == w[i], "index %zu: %.17g, qsort gives %.17g", i, v[i], w[i]);
  }
  free(w);
}

Test(sort, radix_sort_of_doubles_gives_the_qsort_order_with_negatives_nans_and_ties) {
  enum { N = 20000 };
  double *v = malloc(N * sizeof *v);
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < N; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    double u = (double)(x >> 11) / 9007199254740992.0;
    v[i] = i % 97 == 0 ? NAN : i % 13 == 0 ? -u * 1e3 : i % 7 == 0 ? 42.5 : u * 1e-3 + i % 5;
    if (i % 1001 == 0) v[i] = INFINITY;
    if (i % 1003 == 0) v[i] = -INFINITY;
  }
  check_same_as_qsort(v, N);
  check_same_as_qsort(v, 100); // the small path
  free(v);
}

Test(sort, all_equal_and_empty_arrays_are_left_sorted) {
  double v[1000];
  for (int i = 0; i < 1000; i++) v[i] = 3.25;
  check_same_as_qsort(v, 1000);
  sc_sort_doubles(v, 0);
}
