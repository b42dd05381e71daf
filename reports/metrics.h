// Metrics: per-request records in, summaries out (TTFT, TPOT, ITL, E2EL distributions,
// throughput, goodput, error rates), scaling across deployments, the concurrency knee, and the
// SLO verdicts. docs/metrics.md gives every formula; names follow vLLM's benchmark.
//
// Pure arithmetic over arrays: no clock, no database, no files. The runner feeds it the
// requests it recorded and stores what comes back (reports/store.h); the gate reads the
// stored values. The table of metric names (unit, direction) that SLO keys and the gate are
// checked against is scenarios/metric_names.h.
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "kernels/status.h"
#include "scenarios/metric_names.h"
#include "scenarios/scenario.h"
#include "serving/request.h"

// --- per-request records (their status, req_status, is serving/request.h's)
typedef struct mt_request {
  uint64_t arrival_ns;      // when the client sent it
  uint64_t finish_ns;       // when the client saw it end (last token, or the error)
  const uint64_t *token_ns; // (n_tokens) when the client saw each output token, ascending
  int n_tokens;             // output tokens delivered
  int prompt_tokens;
  req_status status;
  const char *reason;       // REQ_FAILED: the error kind ("oom", "replica_lost", ...); else any
  int class_idx;            // prompt class
  bool warmup;              // excluded from every metric
} mt_request;

// A distribution over n samples; every field NaN when n == 0.
typedef struct mt_dist {
  int n;
  double mean, p50, p90, p95, p99, max;
} mt_dist;

// Per-request limits that make a request "good" (goodput): each <= 0 means no limit.
typedef struct mt_goodput {
  double ttft_ms, tpot_ms, e2el_ms;
} mt_goodput;

enum { MT_MAX_ERROR_KINDS = 16 };

typedef struct mt_summary {
  int requests;                  // non-warmup requests considered
  int ok, cancelled, failed, timeout;
  int good;                      // ok and within every goodput limit
  double window_s;               // the time the rates are over
  mt_dist ttft_ms, tpot_ms, itl_ms, e2el_ms; // over ok requests (TPOT: those with >= 2 tokens)
  int64_t input_tokens, output_tokens; // of ok requests
  double output_tok_s, req_s, goodput_rps;
  double error_rate;             // (failed + timeout) / requests; 0 when requests == 0
  char error_kind[MT_MAX_ERROR_KINDS][32]; // failed requests by reason ("timeout" included)
  int error_count[MT_MAX_ERROR_KINDS];
  int n_error_kinds;
} mt_summary;

// The p-th percentile (p in [0, 100]) of sorted[0..n) by linear interpolation between closest
// ranks (numpy's default): rank = p/100 * (n - 1). NaN when n == 0.
double mt_percentile(const double *sorted, int n, double p);
// Fills out from values[0..n) (sorted in place).
void mt_dist_of(double *values, int n, mt_dist *out);

// Summarizes the non-warmup requests of r[0..n) whose class_idx == class_filter (-1: all).
// Rates are over [t0_ns, t1_ns] when t1_ns > t0_ns, else over the span from the first arrival
// to the last finish of the requests considered. SC_OOM when scratch memory cannot be had.
sc_status mt_summarize(const mt_request *r, int n, int class_filter, const mt_goodput *g,
                       uint64_t t0_ns, uint64_t t1_ns, mt_summary *out);

// The value of a named metric in s (name as in the table: "ttft_p95_ms", "output_tok_s",
// "error_rate", "requests", "errors" ...); false when s does not carry that name.
bool mt_summary_value(const mt_summary *s, const char *name, double *out);
// Writes every metric s carries: calls emit(ud, name, value) once per name.
void mt_summary_each(const mt_summary *s, void (*emit)(void *ud, const char *name, double v),
                     void *ud);

// Goodput limits from the SLO: the tightest TTFT, TPOT and E2EL limits of any percentile or
// the mean (e.g. ttft_p95_ms: 500 makes 500 ms the per-request TTFT limit).
void mt_goodput_from_slo(const scn_slo *slo, mt_goodput *out);

// --- across deployments
// speedup[i] = tput[i] / tput[base]; efficiency[i] = tput[i] / (gpus[i] / gpus[base] * tput[base])
// where base is the deployment with the fewest GPUs (the 1-GPU one when present). NaN where
// tput[base] <= 0.
void mt_scaling(const int *gpus, const double *tput, int n, double *speedup, double *efficiency);
// The knee: the highest concurrency[i] with ttft_p95_ms[i] <= limit_ms (NaN entries skipped);
// -1 when none meets it.
int mt_knee(const int *concurrency, const double *ttft_p95_ms, int n, double limit_ms);

// A phase's client is saturated when it sent its requests this late against its schedule at
// the 99th percentile: its latencies then hold the client's delay (arrivals are stamped as
// scheduled). docs/metrics.md, "The load that was asked for".
#define MT_CLIENT_LATE_MS 50.0

// --- verdicts
enum { MT_NOTE_MAX = 200 };

typedef struct mt_verdict {
  char slo[64];    // the SLO key; a prompt class's: "CLASS:KEY", e.g. "short:ttft_p95_ms"
  char op[3];      // "<=" for MT_LOWER_BETTER metrics, ">=" for MT_HIGHER_BETTER
  double expected;
  double actual;   // NaN: no data (fails)
  bool pass;
  char note[MT_NOTE_MAX]; // "no data: why" when actual is NaN; else "" (the caller may add one)
} mt_verdict;

// A value the caller knows beyond the summary, by name (lost_requests, kv_leak_blocks,
// detect_ms, ...): true when it has the name, *out set (NaN: not measured, why says why in
// cap bytes); false when it has nothing by that name (why may say why: "no fault was
// injected").
typedef bool (*mt_extra_fn)(void *ud, const char *name, double *out, char *why, size_t cap);

// Why summary s has no value (NaN) for `name`: "no request completed", "no completed request
// had two tokens or more", ... (static); NULL when it has a value or does not carry the name.
const char *mt_summary_why(const mt_summary *s, const char *name);

// One verdict per SLO item against s (a deployment's pooled summary); extra names a caller
// knows beyond the summary come from extra (may be NULL). A verdict with no value fails, its
// note "no data: <why>". Returns how many were written (<= cap).
int mt_verdicts(const scn_slo *slo, const mt_summary *s, mt_extra_fn extra, void *ud,
                mt_verdict *out, int cap);
// The verdicts of a prompt class's SLOs c against s, the pooled summary of that class's
// requests (mt_summarize with its class index); each is named "CLASS:KEY". Returns how many
// were written (<= cap).
int mt_class_verdicts(const scn_slo_class *c, const mt_summary *s, mt_verdict *out, int cap);
