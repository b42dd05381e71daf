// Importing a published per-request trace as a stored run (`shardcheck import`,
// docs/calibration.md), so it can be reported, gated and calibrated against like a run of
// shardcheck's own.
//
// Formats (detected from the content):
//   llmservingsim  one JSON object per line (LLMServingSim's vLLM traces, vllm/requests.jsonl):
//                  input_toks, output_toks, queued_ts, first_token_ts, last_token_ts (seconds on
//                  one monotonic clock; arrival = queued_ts); other keys (request_id,
//                  arrival_time, scheduled_ts) are read past
//   vllm-bench     one JSON object (`vllm bench serve --save-result --save-detailed`):
//                  input_lens, output_lens, ttfts, itls (and request_rate); the file has no
//                  arrival times: with request_rate inf (or absent) every request arrives at 0,
//                  otherwise at i / request_rate (evenly spaced), as the import says
//   vllm-latency   one JSON object (vLLM's benchmarks/benchmark_latency.py --output-json):
//                  avg_latency, the seconds one batch of requests takes from submission to the
//                  last token; the file has no lengths: import_options gives the batch size
//                  and the input and output lengths. Every request arrives at 0 and finishes
//                  at avg_latency; its first token is not measured (the run's config says
//                  "e2e_only": calibrate fits its E2E; its TTFT rows equal its E2E)
// Only first and last token times are known in an llmservingsim trace: the tokens between are
// stored evenly spaced (TPOT exact, inter-token gaps their mean).
//
// Not here: the command line (cli/cmd_import.c), the schema (reports/schema.c).
#pragma once

#include <stdint.h>

#include "kernels/status.h"
#include "reports/store.h"

typedef struct import_result {
  int64_t run_id;
  int requests;
  char format[32];   // "llmservingsim" | "vllm-bench" | "vllm-latency"
  char assumed[256]; // what the import assumed (arrival times), "" when nothing
} import_result;

// What the file does not say: the layout it was measured at (stored as the run's deployment,
// and in its config as "layout", so calibrate replays it there) and a latency benchmark's batch.
typedef struct import_options {
  int tp, pp, dp;                       // 0: not given (the deployment is stored as tp 1)
  int batch, input_len, output_len;     // vllm-latency: the batch (0: not given)
} import_options;

// Reads the trace at path and stores it as one complete run of scenario name `name` (NULL: the
// file's base name) and model `model` (NULL: the trace's own, or "unknown") in db; o (NULL:
// nothing given) as above. SC_INVALID "FILE:LINE: key 'K': expected ..." for a malformed trace
// (nothing is stored then), SC_IO when it cannot be read.
sc_status import_trace(store *db, const char *path, const char *name, const char *model,
                       const import_options *o, import_result *out, sc_error *err);
