// Small helpers every floor uses: qsort comparators, the median and a sort for many doubles,
// and the words of a list in a message.
// Header-only but for sc_sort_doubles (kernels/sort.c); no state.
// Kept here, on the lowest floor, so that no module grows its own copy (docs/design.md).
#pragma once

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

// Ascending doubles for qsort; NaN after every number, so that the order is total.
static inline int sc_cmp_double(const void *pa, const void *pb) {
  double a = *(const double *)pa, b = *(const double *)pb;
  if (isnan(a) || isnan(b)) return isnan(a) - isnan(b);
  return (a > b) - (a < b);
}

// Ascending uint64_t for qsort.
static inline int sc_cmp_u64(const void *pa, const void *pb) {
  uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;
  return (a > b) - (a < b);
}

// Writes v in decimal into the bytes just before end (no NUL) and returns where the digits
// start: printf's PRIu64 without its cost, for the paths that write an integer per token (the
// recorder's token times, the server's token ids). end needs 20 bytes before it.
static inline char *sc_u64_digits(uint64_t v, char *end) {
  do *--end = (char)('0' + v % 10);
  while (v /= 10);
  return end;
}

// Sorts v[0..n) ascending in place, NaNs last: the order qsort with sc_cmp_double gives, in
// linear time (a radix sort; qsort below a few hundred values or when memory runs out).
void sc_sort_doubles(double *v, size_t n);

// The median of v[0..n) (sorts v in place): the middle value, or the mean of the two middle
// values when n is even. `empty` when n <= 0.
static inline double sc_median(double *v, int n, double empty) {
  if (n <= 0) return empty;
  qsort(v, (size_t)n, sizeof *v, sc_cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Appends item to buf (cap bytes, len used) as item i of n in a list worded "a, b or c":
// nothing before the first, `last` (" or ", " and ") before the final one, ", " before the
// others. Returns the new length; from cap on, nothing more is written.
static inline size_t sc_list_add(char *buf, size_t cap, size_t len, int i, int n,
                                 const char *last, const char *item) {
  if (len >= cap) return len;
  return len + (size_t)snprintf(buf + len, cap - len, "%s%s",
                                i == 0 ? "" : i == n - 1 ? last : ", ", item);
}
