// The metric table: every metric shardcheck computes or stores, one row each with its unit,
// direction, who measures it, the kinds of replica it cannot be measured on (and why), whether
// a prompt class has it, and whether the gate compares it by default. SLO keys and gate
// metrics (scenarios/scenario_slo.c) are checked against it, stored metric rows
// (reports/store.h) use it, the SLO verdicts (runner/verdicts.c) and the gate (reports/gate.c)
// read it, and docs/metrics.md gives each formula. Computing the values is reports/metrics.c's
// and the measuring files'. It sits with the scenario language because a scenario names these.
#pragma once

#include <stdbool.h>
#include <stddef.h>

typedef enum mt_dir {
  MT_LOWER_BETTER,  // latencies, error rate, lost requests: an SLO on it is a maximum
  MT_HIGHER_BETTER, // throughput, goodput, efficiency: an SLO on it is a minimum
  MT_NEUTRAL,       // counts and descriptions: no SLO may name it
} mt_dir;

// Who measures a metric (docs/metrics.md gives each formula).
typedef enum mt_source {
  MT_BY_SUMMARY,     // the summary of any set of requests (reports/metrics.c, mt_summarize)
  MT_BY_DEPLOYMENT,  // the runner, of a whole deployment (queues, batches, KV, the knee)
  MT_BY_FAULTS,      // the verdicts after faults (faults/judge.c, faults/hot_swap.c)
  MT_BY_RUN,         // across the run's deployments (scaling)
  MT_BY_SENSITIVITY, // run --sensitivity, mode sim (runner/sensitivity.c)
} mt_source;

// The kinds of replica a deployment can run on, as the vacuity matrix (docs/metrics.md) lists
// them: a metric is measured on each unless its row says why it cannot be.
typedef enum mt_kind {
  MT_KIND_LOCAL,   // shardcheck's engine in the runner's process (mode real, isolation thread)
  MT_KIND_PROCESS, // shardcheck's engine in `shardcheck worker` processes
  MT_KIND_SIM,     // simulated replicas (mode sim: priced steps, no model output)
  MT_KIND_SERVE,   // an HTTP target that is shardcheck serve (token ids, its own /metrics)
  MT_KIND_TEXT,    // an HTTP target that streams text only (no token ids: llama.cpp, SGLang)
  MT_KIND_N,
} mt_kind;

enum {
  MT_PER_CLASS = 1,       // a prompt class's summary carries it: its SLOs and gate rows may
  MT_MODEL_OUTPUT = 2,    // compares model output: not measured in mode sim (tokens are priced)
  MT_ZERO_UNFAULTED = 4,  // 0 in a deployment without faults (nothing measured it there)
  MT_LATENCY = 8,         // one statistic of a latency distribution: FAMILY_STAT_ms
};

typedef struct mt_metric_info {
  const char *name; // e.g. "ttft_p95_ms"
  const char *unit; // "ms", "tok/s", "req/s", "fraction", "requests", "x", ...
  mt_dir dir;
  const char *what; // one line for --help, docs and reports
  mt_source by;     // who measures it
  unsigned flags;   // MT_PER_CLASS | MT_MODEL_OUTPUT | MT_ZERO_UNFAULTED | MT_LATENCY
  int gate;         // its place in the gate's default list (1, 2, ...); 0: not gated by default
  // Why it cannot be measured on a kind of replica (NULL: it is, or it is absent at run time
  // with its own reason); an SLO on it there FAILs with "no data: <why>", and validate warns.
  const char *absent[MT_KIND_N];
} mt_metric_info;

// The table of metrics (scenarios/metric_names.c): one row per metric, the one place to add
// one (docs/design.md). NULL when no metric has that name.
const mt_metric_info *mt_metric_find(const char *name);
// The kind's name as the matrix and messages write it: "local", "process", "sim", "serve",
// "text" (static).
const char *mt_kind_name(mt_kind k);
// Why metric `name` cannot be measured on kind k; NULL when it can (or is not in the table).
const char *mt_metric_absent(const char *name, mt_kind k);
// Whether a summary of any set of requests carries the metric and it has a direction
// (latencies, output_tok_s, req_s, goodput_rps, error_rate, failed and timed-out requests):
// the metrics a prompt class's SLOs and gate rows may name (the MT_PER_CLASS rows).
bool mt_metric_per_class(const char *name);
// A name with a prompt class, "short:ttft_p95_ms", as the class's verdicts and gate rows are
// named: the metric part ("ttft_p95_ms"); name itself when it has no ':'.
const char *mt_metric_base(const char *name);
// Every metric, in a stable order; returns the count.
int mt_metric_all(const mt_metric_info **out);
// The metrics the gate compares by default, in its order (static, NULL-terminated).
const char *const *mt_metric_gated(void);
// The per-class metrics in words, for messages: "TTFT, TPOT, ITL or E2EL latencies,
// output_tok_s, ..., failed_requests or timeout_requests".
void mt_metric_per_class_words(char *buf, size_t cap);
// The gate's default metrics in words, for --help: "TTFT, TPOT, ITL and E2EL p50 and p95,
// output_tok_s, ..., recover_ms".
void mt_metric_gated_words(char *buf, size_t cap);
