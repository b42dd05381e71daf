// The table of metrics (scenarios/metric_names.h): one row each with its unit, direction, one
// line, who measures it, its flags (per class, model output, zero without faults, latency), its
// place in the gate's default list and the kinds of replica that cannot measure it. SLO keys
// (scenarios/), stored metric rows (reports/store.h), the SLO verdicts (runner/verdicts.c) and
// the gate all read it; docs/metrics.md gives the formulas. Computing the values is
// reports/metrics.c and the files the row names.
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
   MT_PER_CLASS | MT_LATENCY, g, {0}}
// clang-format on
#define LAT(m, what, g)                                                                            \
  LAT_ROW(m, "mean", what, 0), LAT_ROW(m, "p50", what, g), LAT_ROW(m, "p90", what, 0),             \
      LAT_ROW(m, "p95", what, (g) ? (g) + 1 : 0), LAT_ROW(m, "p99", what, 0),                      \
      LAT_ROW(m, "max", what, 0)
#define S MT_BY_SUMMARY
#define D MT_BY_DEPLOYMENT
#define F MT_BY_FAULTS
// The reasons a kind of replica cannot give a metric (the rows' absent[]).
#define NO_OUTPUT "simulated tokens carry no model output"
#define NO_STEPS "the server reports no engine steps (only its /metrics)"
#define NO_DIST "a server sends tokens, not next-token distributions"
#define SIM_ONLY "the cost model's own figure: mode sim only"
#define ON_TIME "the virtual clock sends every request on schedule"
#define NO_SWAP "a replica in the runner's threads cannot change its weights (process ones can)"
#define HTTP_AB(why) .absent = {[MT_KIND_SERVE] = (why), [MT_KIND_TEXT] = (why)}

static const mt_metric_info metrics[] = {
    LAT("ttft", "time to first token", 1),
    LAT("tpot", "time per output token after the first", 3),
    LAT("itl", "inter-token latency, pooled gaps", 5),
    LAT("e2el", "end-to-end request latency", 7),
    {"output_tok_s", "tok/s", MT_HIGHER_BETTER, "output tokens per second", S, MT_PER_CLASS, 9,
     {0}},
    {"req_s", "req/s", MT_HIGHER_BETTER, "completed requests per second", S, MT_PER_CLASS, 0, {0}},
    {"goodput_rps", "req/s", MT_HIGHER_BETTER, "requests meeting every per-request SLO per second",
     S, MT_PER_CLASS, 10, {0}},
    {"error_rate", "fraction", MT_LOWER_BETTER, "(failed + timed out) / requests", S, MT_PER_CLASS,
     11, {0}},
    {"requests", "requests", MT_NEUTRAL, "requests measured (warm-up excluded)", S, 0, 0, {0}},
    {"ok_requests", "requests", MT_NEUTRAL, "requests completed", S, 0, 0, {0}},
    {"cancelled_requests", "requests", MT_NEUTRAL, "requests cancelled by the client", S, 0, 0,
     {0}},
    {"failed_requests", "requests", MT_LOWER_BETTER, "requests failed with an error", S,
     MT_PER_CLASS, 0, {0}},
    {"timeout_requests", "requests", MT_LOWER_BETTER, "requests past the request timeout", S,
     MT_PER_CLASS, 0, {0}},
    {"timeouts", "requests", MT_LOWER_BETTER,
     "the SLO key for timeout_requests: requests past the request timeout, whatever the cause", S,
     0, 0, {0}},
    {"lost_requests", "requests", MT_LOWER_BETTER,
     "requests sent without exactly one terminal status (none, or more than one), or timed "
     "out after their replica was lost with nothing retrying or failing them",
     F, MT_ZERO_UNFAULTED, 12, {0}},
    {"fault_affected", "requests", MT_NEUTRAL,
     "requests whose path a fault touched: failed or re-dispatched", F, 0, 0, {0}},
    {"detect_ms", "ms", MT_LOWER_BETTER, "slowest fault detection: max of detected - injected", F,
     0, 14, {0}},
    {"recover_ms", "ms", MT_LOWER_BETTER, "slowest fault recovery: max of recovered - injected", F,
     0, 15, {0}},
    {"kv_leak_blocks", "blocks", MT_LOWER_BETTER,
     "KV blocks still in use on surviving replicas once every request has ended", F, 0, 0,
     .absent = {[MT_KIND_TEXT] = "the server counts no KV blocks (only shardcheck serve does); "
                                 "gate it on kv_leak_frac"}},
    {"kv_leak_frac", "fraction", MT_LOWER_BETTER,
     "the largest KV-cache use of a surviving replica once every request has ended, beyond what "
     "its prompt cache may keep (a server's: its /metrics after clearing that cache)",
     F, 0, 0, {0}},
    {"layout_mismatches", "requests", MT_LOWER_BETTER,
     "mode real, greedy: completed outputs that differ from the first deployment's for the same "
     "request (every layout computes the same tokens)",
     D, MT_MODEL_OUTPUT, 0, .absent = {[MT_KIND_SIM] = NO_OUTPUT}},
    {"output_mismatches", "requests", MT_LOWER_BETTER,
     "greedy outputs a fault touched (or new weights served) that differ from a fault-free "
     "engine's", F, MT_MODEL_OUTPUT,
     0, .absent = {[MT_KIND_SIM] = NO_OUTPUT}},
    {"history_violations", "rows", MT_LOWER_BETTER,
     "requests completed twice, statuses outside the four, token indexes delivered twice or "
     "missing, times running backwards",
     F, 0, 0, {0}},
    {"reload_ms", "ms", MT_LOWER_BETTER, "slowest restart of a lost replica", F, 0, 0,
     .absent = {[MT_KIND_SIM] = "a simulated restart models its load inside the replica",
                [MT_KIND_LOCAL] = "a replica in the runner's threads is not restarted "
                                  "(isolation: process is)"}},
    {"retried_requests", "requests", MT_NEUTRAL, "requests re-dispatched after a replica loss", F,
     0, 0, {0}},
    {"resumed_requests", "requests", MT_NEUTRAL,
     "of them, continued from prompt + tokens already sent", F, 0, 0, {0}},
    {"faults_injected", "faults", MT_NEUTRAL, "faults injected into the deployment", F, 0, 0, {0}},
    {"unexplained_losses", "replicas", MT_LOWER_BETTER,
     "replicas declared lost with no kill or hang fault to explain it (false detections)", F, 0, 0,
     {0}},
    {"swap_drain_ms", "ms", MT_LOWER_BETTER,
     "hot swap: longest drain of one replica (stop admitting until nothing is in flight)", F, 0, 0,
     .absent = {[MT_KIND_LOCAL] = NO_SWAP}},
    {"swap_load_ms", "ms", MT_LOWER_BETTER, "hot swap: longest load of the new weights", F, 0, 0,
     .absent = {[MT_KIND_LOCAL] = NO_SWAP}},
    {"swap_dip", "fraction", MT_LOWER_BETTER,
     "hot swap: 1 - lowest 1 s output throughput during the swap / the level before it", F, 0, 0,
     .absent = {[MT_KIND_LOCAL] = NO_SWAP}},
    {"swap_agreement", "fraction", MT_HIGHER_BETTER,
     "hot swap: greedy tokens of the old weights the new ones also rank first", F, MT_MODEL_OUTPUT,
     0, .absent = {[MT_KIND_SIM] = NO_OUTPUT, [MT_KIND_LOCAL] = NO_SWAP}},
    {"swap_kl", "nats", MT_LOWER_BETTER,
     "hot swap: mean KL divergence of next-token distributions, old || new", F, MT_MODEL_OUTPUT, 0,
     .absent = {[MT_KIND_SIM] = NO_OUTPUT, [MT_KIND_LOCAL] = NO_SWAP, [MT_KIND_SERVE] = NO_DIST,
                [MT_KIND_TEXT] = NO_DIST}},
    {"version_mixes", "requests", MT_LOWER_BETTER,
     "requests whose output tokens came from more than one weight version (a resume or retry "
     "that crossed a hot swap)",
     F, MT_ZERO_UNFAULTED, 0, .absent = {[MT_KIND_LOCAL] = NO_SWAP}},
    {"leaked_threads", "threads", MT_LOWER_BETTER,
     "runner threads after the deployment's replicas were freed, minus before", F, 0, 0, {0}},
    {"leaked_fds", "fds", MT_LOWER_BETTER, "runner file descriptors after, minus before", F, 0, 0,
     {0}},
    {"leaked_processes", "processes", MT_LOWER_BETTER, "runner child processes after, minus before",
     F, 0, 0, {0}},
    {"good_requests", "requests", MT_NEUTRAL, "requests meeting every per-request SLO", S, 0, 0,
     {0}},
    {"input_tokens", "tokens", MT_NEUTRAL, "prompt tokens of completed requests", S, 0, 0, {0}},
    {"output_tokens", "tokens", MT_NEUTRAL, "output tokens of completed requests", S, 0, 0, {0}},
    {"window_s", "s", MT_NEUTRAL, "the time the rates are over", S, 0, 0, {0}},
    {"peak_queue", "requests", MT_NEUTRAL,
     "longest queue of any replica (a server's: its waiting requests on /metrics)", D, 0, 0, {0}},
    {"peak_batch", "sequences", MT_NEUTRAL,
     "most sequences in one step of any replica (a server's: its running requests on /metrics)",
     D, 0, 0, {0}},
    {"limit_violations", "steps", MT_LOWER_BETTER,
     "engine steps that ran more sequences than limits.max_running or more tokens than "
     "limits.token_budget",
     D, 0, 0, HTTP_AB(NO_STEPS)},
    {"preemptions", "preemptions", MT_HIGHER_BETTER,
     "sequences preempted by recompute to make room in the KV cache (each preemption counted); "
     "an SLO on it is a floor a scenario made for KV pressure sets, so it cannot pass without "
     "preempting",
     D, 0, 0, HTTP_AB(NO_STEPS)},
    {"replica_imbalance", "fraction", MT_LOWER_BETTER,
     "1 - the least-used replica's requests over the mean per replica (0: even; 1: a replica "
     "took none); its note gives each replica's share of requests and tokens",
     D, 0, 0, {0}},
    {"class_ttft_ratio", "x", MT_LOWER_BETTER,
     "the slowest prompt class's TTFT p95 over the fastest's (near 1: the classes wait alike; "
     "far past it: one starves behind another)",
     D, 0, 0, {0}},
    {"kv_peak_frac", "fraction", MT_LOWER_BETTER,
     "highest KV-cache use of any replica (a server's: its /metrics)", D, 0, 13, {0}},
    {"pp_bubble_frac", "fraction", MT_NEUTRAL,
     "sim, pp > 1: idle fraction of the pipeline stages, step-time weighted", D, 0, 0,
     .absent = {[MT_KIND_LOCAL] = SIM_ONLY, [MT_KIND_PROCESS] = SIM_ONLY,
                [MT_KIND_SERVE] = SIM_ONLY, [MT_KIND_TEXT] = SIM_ONLY}},
    {"busy_frac", "fraction", MT_NEUTRAL,
     "share of the replicas' time spent in engine steps (a server's: the share of its scrapes "
     "with a request running)",
     D, 0, 0, {0}},
    {"arrival_rate", "req/s", MT_NEUTRAL,
     "requests the client sent per second of sending: the rate it achieved beside the rate asked",
     D, 0, 0, {0}},
    {"mean_concurrency", "requests", MT_NEUTRAL,
     "requests in flight, averaged over the phase: the concurrency achieved", D, 0, 0, {0}},
    {"client_late_p99_ms", "ms", MT_LOWER_BETTER,
     "how late the client sent its requests against its schedule (p99)", D, 0, 0,
     .absent = {[MT_KIND_SIM] = ON_TIME}},
    {"client_saturated", "phases", MT_LOWER_BETTER,
     "phases whose client fell behind its schedule (sends p99 late past the threshold)", D, 0, 0,
     .absent = {[MT_KIND_SIM] = ON_TIME}},
    {"ttft_sensitivity", "x", MT_NEUTRAL,
     "sim, run --sensitivity: mean TTFT change over the price change, the larger side",
     MT_BY_SENSITIVITY, 0, 0,
     .absent = {[MT_KIND_LOCAL] = SIM_ONLY, [MT_KIND_PROCESS] = SIM_ONLY,
                [MT_KIND_SERVE] = SIM_ONLY, [MT_KIND_TEXT] = SIM_ONLY}},
    {"tpot_sensitivity", "x", MT_NEUTRAL,
     "sim, run --sensitivity: mean TPOT change over the price change, the larger side",
     MT_BY_SENSITIVITY, 0, 0,
     .absent = {[MT_KIND_LOCAL] = SIM_ONLY, [MT_KIND_PROCESS] = SIM_ONLY,
                [MT_KIND_SERVE] = SIM_ONLY, [MT_KIND_TEXT] = SIM_ONLY}},
    {"peak_output_tok_s", "tok/s", MT_HIGHER_BETTER, "highest output tokens/s any phase delivered",
     D, 0, 0, {0}},
    {"speedup", "x", MT_HIGHER_BETTER, "peak throughput over the fewest-GPU deployment's",
     MT_BY_RUN, 0, 0, {0}},
    {"efficiency", "fraction", MT_HIGHER_BETTER, "speedup / (GPUs / the fewest-GPU deployment's)",
     MT_BY_RUN, 0, 0, {0}},
    {"prefix_cache_hit_rate", "fraction", MT_HIGHER_BETTER,
     "prompt tokens served from the prefix cache / prompt tokens, of completed requests that "
     "report it (the engine's; a server's usage.prompt_tokens_details.cached_tokens)",
     D, 0, 0, {0}},
    {"saturation_concurrency", "users", MT_NEUTRAL,
     "a ramp with saturation: the concurrency of the step before its first saturated one (its "
     "later steps are skipped)",
     D, 0, 0, {0}},
    {"knee_concurrency", "users", MT_HIGHER_BETTER,
     "highest ramp concurrency meeting the TTFT p95 SLO", D, 0, 0, {0}},
    {"gpus", "GPUs", MT_NEUTRAL, "GPUs (ranks) of the deployment", D, 0, 0, {0}},
};

#undef S
#undef D
#undef F
#undef NO_OUTPUT
#undef NO_STEPS
#undef NO_DIST
#undef SIM_ONLY
#undef ON_TIME
#undef NO_SWAP
#undef HTTP_AB
enum { N_METRICS = (int)(sizeof metrics / sizeof metrics[0]) };

const mt_metric_info *mt_metric_find(const char *name) {
  for (int i = 0; i < N_METRICS; i++)
    if (!strcmp(metrics[i].name, name)) return &metrics[i];
  return NULL;
}

const char *mt_kind_name(mt_kind k) {
  static const char *const names[MT_KIND_N] = {
      [MT_KIND_LOCAL] = "local", [MT_KIND_PROCESS] = "process", [MT_KIND_SIM] = "sim",
      [MT_KIND_SERVE] = "serve", [MT_KIND_TEXT] = "text"};
  return (unsigned)k < MT_KIND_N ? names[k] : "?";
}

const char *mt_metric_absent(const char *name, mt_kind k) {
  const mt_metric_info *m = name ? mt_metric_find(name) : NULL;
  return m && (unsigned)k < MT_KIND_N ? m->absent[k] : NULL;
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
