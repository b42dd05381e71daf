// The metric names: every metric shardcheck computes or stores, with its unit and direction.
// SLO keys and gate metrics (scenarios/scenario.c) are checked against it, stored metric rows
// (reports/store.h) use it, and docs/metrics.md gives each formula. Computing the values is
// reports/metrics.c. It sits with the scenario language because a scenario names these.
#pragma once

#include <stdbool.h>

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
// Whether a summary of any set of requests carries the metric and it has a direction
// (latencies, output_tok_s, req_s, goodput_rps, error_rate, failed and timed-out requests):
// the metrics a prompt class's SLOs and gate rows may name.
bool mt_metric_per_class(const char *name);
// A name with a prompt class, "short:ttft_p95_ms", as the class's verdicts and gate rows are
// named: the metric part ("ttft_p95_ms"); name itself when it has no ':'.
const char *mt_metric_base(const char *name);
// Every metric, in a stable order; returns the count.
int mt_metric_all(const mt_metric_info **out);
