// The metric names: every metric shardcheck computes or stores, with its unit and direction.
// SLO keys and gate metrics (scenarios/scenario.c) are checked against it, stored metric rows
// (reports/store.h) use it, and docs/metrics.md gives each formula. Computing the values is
// reports/metrics.c. It sits with the scenario language because a scenario names these.
#pragma once

typedef enum mt_dir {
  MT_LOWER_BETTER,  // latencies, error rate, lost requests: an SLO on it is a maximum
  MT_HIGHER_BETTER, // throughput, goodput, efficiency: an SLO on it is a minimum
  MT_NEUTRAL,       // counts and descriptions: no SLO may name it
} mt_dir;

typedef struct mt_metric_info {
  const char *name; // e.g. "ttft_p95_ms"
  const char *unit; // "ms", "tok/s", "req/s", "fraction", "requests", "x", ...
  mt_dir dir;
  const char *what; // one line for --help, docs and reports
} mt_metric_info;

// NULL when no metric has that name.
const mt_metric_info *mt_metric_find(const char *name);
// Every metric, in a stable order; returns the count.
int mt_metric_all(const mt_metric_info **out);
