// The table of metric names (scenarios/metric_names.h): unit, direction, one line each. SLO
// keys (scenarios/), stored metric rows (reports/store.h) and the gate all use these names;
// docs/metrics.md gives the formulas. Computing the values is reports/metrics.c.
#include <string.h>

#include "scenarios/metric_names.h"

#define LAT(m, what)                                                                               \
  {m "_mean_ms", "ms", MT_LOWER_BETTER, what " (mean)"},                                           \
      {m "_p50_ms", "ms", MT_LOWER_BETTER, what " (p50)"},                                         \
      {m "_p90_ms", "ms", MT_LOWER_BETTER, what " (p90)"},                                         \
      {m "_p95_ms", "ms", MT_LOWER_BETTER, what " (p95)"},                                         \
      {m "_p99_ms", "ms", MT_LOWER_BETTER, what " (p99)"},                                         \
      {m "_max_ms", "ms", MT_LOWER_BETTER, what " (max)"}

static const mt_metric_info metrics[] = {
    LAT("ttft", "time to first token"),
    LAT("tpot", "time per output token after the first"),
    LAT("itl", "inter-token latency, pooled gaps"),
    LAT("e2el", "end-to-end request latency"),
    {"output_tok_s", "tok/s", MT_HIGHER_BETTER, "output tokens per second"},
    {"req_s", "req/s", MT_HIGHER_BETTER, "completed requests per second"},
    {"goodput_rps", "req/s", MT_HIGHER_BETTER, "requests meeting every per-request SLO per second"},
    {"error_rate", "fraction", MT_LOWER_BETTER, "(failed + timed out) / requests"},
    {"requests", "requests", MT_NEUTRAL, "requests measured (warm-up excluded)"},
    {"ok_requests", "requests", MT_NEUTRAL, "requests completed"},
    {"cancelled_requests", "requests", MT_NEUTRAL, "requests cancelled by the client"},
    {"failed_requests", "requests", MT_LOWER_BETTER, "requests failed with an error"},
    {"timeout_requests", "requests", MT_LOWER_BETTER, "requests past the request timeout"},
    {"timeouts", "requests", MT_LOWER_BETTER,
     "the SLO key for timeout_requests: requests past the request timeout, whatever the cause"},
    {"lost_requests", "requests", MT_LOWER_BETTER,
     "requests sent without exactly one terminal status (none, or more than one), or timed "
     "out after their replica was lost with nothing retrying or failing them"},
    {"fault_affected", "requests", MT_NEUTRAL,
     "requests whose path a fault touched: failed or re-dispatched"},
    {"detect_ms", "ms", MT_LOWER_BETTER, "slowest fault detection: max of detected - injected"},
    {"recover_ms", "ms", MT_LOWER_BETTER, "slowest fault recovery: max of recovered - injected"},
    {"kv_leak_blocks", "blocks", MT_LOWER_BETTER,
     "KV blocks still in use on surviving replicas once every request has ended"},
    {"kv_leak_frac", "fraction", MT_LOWER_BETTER,
     "external targets: the largest KV-cache usage a surviving server reports on its /metrics "
     "once every request has ended"},
    {"layout_mismatches", "requests", MT_LOWER_BETTER,
     "mode real, greedy: completed outputs that differ from the first deployment's for the same "
     "request (every layout computes the same tokens)"},
    {"output_mismatches", "requests", MT_LOWER_BETTER,
     "greedy outputs a fault touched that differ from a fault-free engine's"},
    {"history_violations", "rows", MT_LOWER_BETTER,
     "requests completed twice, statuses outside the four, token indexes delivered twice or "
     "missing, times running backwards"},
    {"reload_ms", "ms", MT_LOWER_BETTER, "slowest restart of a lost replica"},
    {"retried_requests", "requests", MT_NEUTRAL, "requests re-dispatched after a replica loss"},
    {"resumed_requests", "requests", MT_NEUTRAL,
     "of them, continued from prompt + tokens already sent"},
    {"faults_injected", "faults", MT_NEUTRAL, "faults injected into the deployment"},
    {"unexplained_losses", "replicas", MT_LOWER_BETTER,
     "replicas declared lost with no kill or hang fault to explain it (false detections)"},
    {"swap_drain_ms", "ms", MT_LOWER_BETTER,
     "hot swap: longest drain of one replica (stop admitting until nothing is in flight)"},
    {"swap_load_ms", "ms", MT_LOWER_BETTER, "hot swap: longest load of the new weights"},
    {"swap_dip", "fraction", MT_LOWER_BETTER,
     "hot swap: 1 - lowest 1 s output throughput during the swap / the level before it"},
    {"swap_agreement", "fraction", MT_HIGHER_BETTER,
     "hot swap: greedy tokens of the old weights the new ones also rank first"},
    {"swap_kl", "nats", MT_LOWER_BETTER,
     "hot swap: mean KL divergence of next-token distributions, old || new"},
    {"leaked_threads", "threads", MT_LOWER_BETTER,
     "runner threads after the deployment's replicas were freed, minus before"},
    {"leaked_fds", "fds", MT_LOWER_BETTER, "runner file descriptors after, minus before"},
    {"leaked_processes", "processes", MT_LOWER_BETTER,
     "runner child processes after, minus before"},
    {"good_requests", "requests", MT_NEUTRAL, "requests meeting every per-request SLO"},
    {"input_tokens", "tokens", MT_NEUTRAL, "prompt tokens of completed requests"},
    {"output_tokens", "tokens", MT_NEUTRAL, "output tokens of completed requests"},
    {"window_s", "s", MT_NEUTRAL, "the time the rates are over"},
    {"peak_queue", "requests", MT_NEUTRAL, "longest queue of any replica"},
    {"peak_batch", "sequences", MT_NEUTRAL, "most sequences in one step of any replica"},
    {"limit_violations", "steps", MT_LOWER_BETTER,
     "engine steps that ran more sequences than limits.max_running or more tokens than "
     "limits.token_budget"},
    {"kv_peak_frac", "fraction", MT_LOWER_BETTER, "highest KV-cache use of any replica"},
    {"pp_bubble_frac", "fraction", MT_NEUTRAL,
     "sim, pp > 1: idle fraction of the pipeline stages, step-time weighted"},
    {"busy_frac", "fraction", MT_NEUTRAL,
     "share of the replicas' time spent in engine steps (utilization)"},
    {"ttft_sensitivity", "x", MT_NEUTRAL,
     "sim, run --sensitivity: mean TTFT change over the price change, the larger side"},
    {"tpot_sensitivity", "x", MT_NEUTRAL,
     "sim, run --sensitivity: mean TPOT change over the price change, the larger side"},
    {"peak_output_tok_s", "tok/s", MT_HIGHER_BETTER, "highest output tokens/s of any phase"},
    {"speedup", "x", MT_HIGHER_BETTER, "peak throughput over the fewest-GPU deployment's"},
    {"efficiency", "fraction", MT_HIGHER_BETTER, "speedup / (GPUs / the fewest-GPU deployment's)"},
    {"knee_concurrency", "users", MT_HIGHER_BETTER,
     "highest ramp concurrency meeting the TTFT p95 SLO"},
    {"gpus", "GPUs", MT_NEUTRAL, "GPUs (ranks) of the deployment"},
};

const mt_metric_info *mt_metric_find(const char *name) {
  for (size_t i = 0; i < sizeof metrics / sizeof metrics[0]; i++)
    if (!strcmp(metrics[i].name, name)) return &metrics[i];
  return NULL;
}

bool mt_metric_per_class(const char *name) {
  static const char *const rates[] = {"output_tok_s", "req_s",           "goodput_rps",
                                      "error_rate",   "failed_requests", "timeout_requests"};
  static const char *const lat[] = {"ttft_", "tpot_", "itl_", "e2el_"};
  const mt_metric_info *m = name ? mt_metric_find(name) : NULL;
  if (!m) return false;
  for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++)
    if (!strcmp(name, rates[i])) return true;
  for (size_t i = 0; i < sizeof lat / sizeof lat[0]; i++)
    if (!strncmp(name, lat[i], strlen(lat[i]))) return true;
  return false;
}

const char *mt_metric_base(const char *name) {
  const char *colon = name ? strrchr(name, ':') : NULL;
  return colon ? colon + 1 : name;
}

int mt_metric_all(const mt_metric_info **out) {
  *out = metrics;
  return (int)(sizeof metrics / sizeof metrics[0]);
}
