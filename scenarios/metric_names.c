// The table of metrics (scenarios/metric_names.h): one row each with its unit, direction, one
// line, who measures it, its flags (per class, model output, zero without faults, latency) and
// its place in the gate's default list. SLO keys (scenarios/), stored metric rows (reports/
// store.h), the SLO verdicts (runner/verdicts.c) and the gate all read it; docs/metrics.md
// gives the formulas. Computing the values is reports/metrics.c and the files the row names.
#include "scenarios/metric_names.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "kernels/util.h"

// The six statistics of a latency (every summary has them, so every prompt class too); gate:
// the place of its p50 in the gate's default list, its p95 the next (0: neither gated).
// clang-format off
#define LAT_ROW(m, stat, what, g)                                                                  \
  {m "_" stat "_ms", "ms", MT_LOWER_BETTER, what " (" stat ")", MT_BY_SUMMARY,                   \
   MT_PER_CLASS | MT_LATENCY, g}
// clang-format on
#define LAT(m, what, g)                                                                            \
  LAT_ROW(m, "mean", what, 0), LAT_ROW(m, "p50", what, g), LAT_ROW(m, "p90", what, 0),             \
      LAT_ROW(m, "p95", what, (g) ? (g) + 1 : 0), LAT_ROW(m, "p99", what, 0),                      \
      LAT_ROW(m, "max", what, 0)
#define S MT_BY_SUMMARY
#define D MT_BY_DEPLOYMENT
#define F MT_BY_FAULTS

static const mt_metric_info metrics[] = {
    LAT("ttft", "time to first token", 1),
    LAT("tpot", "time per output token after the first", 3),
    LAT("itl", "inter-token latency, pooled gaps", 5),
    LAT("e2el", "end-to-end request latency", 7),
    {"output_tok_s", "tok/s", MT_HIGHER_BETTER, "output tokens per second", S, MT_PER_CLASS, 9},
    {"req_s", "req/s", MT_HIGHER_BETTER, "completed requests per second", S, MT_PER_CLASS, 0},
    {"goodput_rps", "req/s", MT_HIGHER_BETTER, "requests meeting every per-request SLO per second",
     S, MT_PER_CLASS, 10},
    {"error_rate", "fraction", MT_LOWER_BETTER, "(failed + timed out) / requests", S, MT_PER_CLASS,
     11},
    {"requests", "requests", MT_NEUTRAL, "requests measured (warm-up excluded)", S, 0, 0},
    {"ok_requests", "requests", MT_NEUTRAL, "requests completed", S, 0, 0},
    {"cancelled_requests", "requests", MT_NEUTRAL, "requests cancelled by the client", S, 0, 0},
    {"failed_requests", "requests", MT_LOWER_BETTER, "requests failed with an error", S,
     MT_PER_CLASS, 0},
    {"timeout_requests", "requests", MT_LOWER_BETTER, "requests past the request timeout", S,
     MT_PER_CLASS, 0},
    {"timeouts", "requests", MT_LOWER_BETTER,
     "the SLO key for timeout_requests: requests past the request timeout, whatever the cause", S,
     0, 0},
    {"lost_requests", "requests", MT_LOWER_BETTER,
     "requests sent without exactly one terminal status (none, or more than one), or timed "
     "out after their replica was lost with nothing retrying or failing them",
     F, MT_ZERO_UNFAULTED, 12},
    {"fault_affected", "requests", MT_NEUTRAL,
     "requests whose path a fault touched: failed or re-dispatched", F, 0, 0},
    {"detect_ms", "ms", MT_LOWER_BETTER, "slowest fault detection: max of detected - injected", F,
     0, 14},
    {"recover_ms", "ms", MT_LOWER_BETTER, "slowest fault recovery: max of recovered - injected", F,
     0, 15},
    {"kv_leak_blocks", "blocks", MT_LOWER_BETTER,
     "KV blocks still in use on surviving replicas once every request has ended", F, 0, 0},
    {"kv_leak_frac", "fraction", MT_LOWER_BETTER,
     "external targets: the largest KV-cache usage a surviving server reports on its /metrics "
     "once every request has ended",
     F, 0, 0},
    {"layout_mismatches", "requests", MT_LOWER_BETTER,
     "mode real, greedy: completed outputs that differ from the first deployment's for the same "
     "request (every layout computes the same tokens)",
     D, MT_MODEL_OUTPUT, 0},
    {"output_mismatches", "requests", MT_LOWER_BETTER,
     "greedy outputs a fault touched that differ from a fault-free engine's", F, MT_MODEL_OUTPUT,
     0},
    {"history_violations", "rows", MT_LOWER_BETTER,
     "requests completed twice, statuses outside the four, token indexes delivered twice or "
     "missing, times running backwards",
     F, 0, 0},
    {"reload_ms", "ms", MT_LOWER_BETTER, "slowest restart of a lost replica", F, 0, 0},
    {"retried_requests", "requests", MT_NEUTRAL, "requests re-dispatched after a replica loss", F,
     0, 0},
    {"resumed_requests", "requests", MT_NEUTRAL,
     "of them, continued from prompt + tokens already sent", F, 0, 0},
    {"faults_injected", "faults", MT_NEUTRAL, "faults injected into the deployment", F, 0, 0},
    {"unexplained_losses", "replicas", MT_LOWER_BETTER,
     "replicas declared lost with no kill or hang fault to explain it (false detections)", F, 0, 0},
    {"swap_drain_ms", "ms", MT_LOWER_BETTER,
     "hot swap: longest drain of one replica (stop admitting until nothing is in flight)", F, 0, 0},
    {"swap_load_ms", "ms", MT_LOWER_BETTER, "hot swap: longest load of the new weights", F, 0, 0},
    {"swap_dip", "fraction", MT_LOWER_BETTER,
     "hot swap: 1 - lowest 1 s output throughput during the swap / the level before it", F, 0, 0},
    {"swap_agreement", "fraction", MT_HIGHER_BETTER,
     "hot swap: greedy tokens of the old weights the new ones also rank first", F, MT_MODEL_OUTPUT,
     0},
    {"swap_kl", "nats", MT_LOWER_BETTER,
     "hot swap: mean KL divergence of next-token distributions, old || new", F, MT_MODEL_OUTPUT, 0},
    {"leaked_threads", "threads", MT_LOWER_BETTER,
     "runner threads after the deployment's replicas were freed, minus before", F, 0, 0},
    {"leaked_fds", "fds", MT_LOWER_BETTER, "runner file descriptors after, minus before", F, 0, 0},
    {"leaked_processes", "processes", MT_LOWER_BETTER, "runner child processes after, minus before",
     F, 0, 0},
    {"good_requests", "requests", MT_NEUTRAL, "requests meeting every per-request SLO", S, 0, 0},
    {"input_tokens", "tokens", MT_NEUTRAL, "prompt tokens of completed requests", S, 0, 0},
    {"output_tokens", "tokens", MT_NEUTRAL, "output tokens of completed requests", S, 0, 0},
    {"window_s", "s", MT_NEUTRAL, "the time the rates are over", S, 0, 0},
    {"peak_queue", "requests", MT_NEUTRAL, "longest queue of any replica", D, 0, 0},
    {"peak_batch", "sequences", MT_NEUTRAL, "most sequences in one step of any replica", D, 0, 0},
    {"limit_violations", "steps", MT_LOWER_BETTER,
     "engine steps that ran more sequences than limits.max_running or more tokens than "
     "limits.token_budget",
     D, 0, 0},
    {"kv_peak_frac", "fraction", MT_LOWER_BETTER, "highest KV-cache use of any replica", D, 0, 13},
    {"pp_bubble_frac", "fraction", MT_NEUTRAL,
     "sim, pp > 1: idle fraction of the pipeline stages, step-time weighted", D, 0, 0},
    {"busy_frac", "fraction", MT_NEUTRAL,
     "share of the replicas' time spent in engine steps (utilization)", D, 0, 0},
    {"ttft_sensitivity", "x", MT_NEUTRAL,
     "sim, run --sensitivity: mean TTFT change over the price change, the larger side",
     MT_BY_SENSITIVITY, 0, 0},
    {"tpot_sensitivity", "x", MT_NEUTRAL,
     "sim, run --sensitivity: mean TPOT change over the price change, the larger side",
     MT_BY_SENSITIVITY, 0, 0},
    {"peak_output_tok_s", "tok/s", MT_HIGHER_BETTER, "highest output tokens/s of any phase", D, 0,
     0},
    {"speedup", "x", MT_HIGHER_BETTER, "peak throughput over the fewest-GPU deployment's",
     MT_BY_RUN, 0, 0},
    {"efficiency", "fraction", MT_HIGHER_BETTER, "speedup / (GPUs / the fewest-GPU deployment's)",
     MT_BY_RUN, 0, 0},
    {"knee_concurrency", "users", MT_HIGHER_BETTER,
     "highest ramp concurrency meeting the TTFT p95 SLO", D, 0, 0},
    {"gpus", "GPUs", MT_NEUTRAL, "GPUs (ranks) of the deployment", D, 0, 0},
};

#undef S
#undef D
#undef F
enum { N_METRICS = (int)(sizeof metrics / sizeof metrics[0]) };

const mt_metric_info *mt_metric_find(const char *name) {
  for (int i = 0; i < N_METRICS; i++)
    if (!strcmp(metrics[i].name, name)) return &metrics[i];
  return NULL;
}

bool mt_metric_per_class(const char *name) {
  const mt_metric_info *m = name ? mt_metric_find(name) : NULL;
  return m && (m->flags & MT_PER_CLASS);
}

const char *mt_metric_base(const char *name) {
  const char *colon = name ? strrchr(name, ':') : NULL;
  return colon ? colon + 1 : name;
}

int mt_metric_all(const mt_metric_info **out) {
  *out = metrics;
  return N_METRICS;
}

// --- the gate's default list, in its order (the rows' gate column)

static const char *gated[N_METRICS + 1];
static pthread_once_t gated_once = PTHREAD_ONCE_INIT;

static void fill_gated(void) {
  int n = 0;
  for (int place = 1; place <= N_METRICS; place++)
    for (int i = 0; i < N_METRICS; i++)
      if (metrics[i].gate == place) gated[n++] = metrics[i].name;
  gated[n] = NULL;
}

const char *const *mt_metric_gated(void) {
  pthread_once(&gated_once, fill_gated);
  return gated;
}

// --- in words, for messages and --help

// The latency families ("TTFT", upper case) and statistics ("p50") of the MT_LATENCY rows that
// `keep` accepts, each once, in table order, into fam[] and stat[] (*nf and *ns of them).
static void families(bool (*keep)(const mt_metric_info *m), char fam[][8], int *nf, char stat[][8],
                     int *ns) {
  *nf = *ns = 0;
  for (int i = 0; i < N_METRICS; i++) {
    const mt_metric_info *m = &metrics[i];
    if (!(m->flags & MT_LATENCY) || !keep(m)) continue;
    char f[8] = "", st[8] = "";
    if (sscanf(m->name, "%7[a-z0-9]_%7[a-z0-9]_ms", f, st) != 2) continue;
    for (char *c = f; *c; c++) *c = (char)toupper((unsigned char)*c);
    int j = 0;
    while (j < *nf && strcmp(fam[j], f)) j++;
    if (j == *nf && *nf < N_METRICS) snprintf(fam[(*nf)++], 8, "%s", f);
    j = 0;
    while (j < *ns && strcmp(stat[j], st)) j++;
    if (j == *ns && *ns < N_METRICS) snprintf(stat[(*ns)++], 8, "%s", st);
  }
}

static bool is_per_class(const mt_metric_info *m) { return m->flags & MT_PER_CLASS; }
static bool is_gated(const mt_metric_info *m) { return m->gate > 0; }

void mt_metric_per_class_words(char *buf, size_t cap) {
  char fam[N_METRICS][8], stat[N_METRICS][8];
  int nf, ns;
  families(is_per_class, fam, &nf, stat, &ns);
  char lat[64] = "";
  size_t len = 0;
  for (int i = 0; i < nf; i++) len = sc_list_add(lat, sizeof lat, len, i, nf, " or ", fam[i]);
  if (len < sizeof lat) snprintf(lat + len, sizeof lat - len, " latencies");
  const char *items[N_METRICS];
  int n = 0;
  if (nf) items[n++] = lat;
  for (int i = 0; i < N_METRICS; i++)
    if (is_per_class(&metrics[i]) && !(metrics[i].flags & MT_LATENCY)) items[n++] = metrics[i].name;
  len = 0;
  buf[0] = 0;
  for (int i = 0; i < n; i++) len = sc_list_add(buf, cap, len, i, n, " or ", items[i]);
}

void mt_metric_gated_words(char *buf, size_t cap) {
  char fam[N_METRICS][8], stat[N_METRICS][8];
  int nf, ns;
  families(is_gated, fam, &nf, stat, &ns);
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < nf; i++) len = sc_list_add(buf, cap, len, i, nf, " and ", fam[i]);
  for (int i = 0; i < ns && len < cap; i++)
    len += (size_t)snprintf(buf + len, cap - len, "%s%s", i == 0 ? " " : " and ", stat[i]);
  for (const char *const *g = mt_metric_gated(); *g && len < cap; g++)
    if (!(mt_metric_find(*g)->flags & MT_LATENCY))
      len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", *g);
}
