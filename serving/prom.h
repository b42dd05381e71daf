// Reading a server's /metrics: the Prometheus text exposition format ("name{labels} value
// [timestamp]" per line, "#" lines comments) as vLLM, SGLang, TGI, llama.cpp's server and
// shardcheck serve write it. Only what the HTTP replica keeps is read: the running and waiting
// requests, the KV-cache usage and shardcheck serve's KV blocks (replica_server_metrics), and
// which server wrote it, whose row says what its KV usage counts once drained.
// Not here: fetching the text (serving/replica_http.c scrapes it), rendering it (server/metrics.c).
// fuzz/fuzz_prom.c runs prom_parse on arbitrary text.
#pragma once

#include <stdbool.h>

#include "serving/replica.h"

enum { PROM_TEXT_MAX = 4 << 20 }; // bytes of /metrics a scrape reads at most

// The sum of every sample of metric `name` in text (NUL-terminated); false when it has none
// (sum untouched). A sample whose value does not parse or is not finite is skipped.
bool prom_sum(const char *text, const char *name, double *sum);

// The figures of replica_server_metrics in text: each the sum over every series of the first
// name it knows that the text has (a server with two engines reports two series), NaN where
// none is there; m->server the server whose name was found first, m->why which figures it
// lacks. Returns m->have: true when at least one figure was found. t_ns and the peaks are
// left as they were cleared (0, NaN).
bool prom_parse(const char *text, replica_server_metrics *m);

// The server's prefix-cache figures in text into m (has_cache, has_gauge, their values and
// names, cache_why), nothing else touched: the first pair of counters it has of vLLM's prompt
// tokens looked up in and served from its prefix cache (vllm:prefix_cache_queries and
// vllm:prefix_cache_hits, their older vllm:gpu_ names, each with or without prometheus_client's
// _total), summed over every series (one per engine); else the first hit-rate gauge it has
// (vLLM v0's vllm:gpu_prefix_cache_hit_rate, SGLang's sglang:cache_hit_rate), averaged over its
// series. A pair with one name only, a counter whose samples do not all parse as finite
// numbers >= 0, hits above queries, or a gauge outside [0, 1] (older SGLang wrote percent) is
// not read: cache_why says which ("" when the text has none of the names). Returns has_cache ||
// has_gauge.
bool prom_cache_counters(const char *text, replica_server_metrics *m);

// How a server's KV usage reads once nothing runs (docs/targets.md says which server is which).
typedef enum prom_cache {
  PROM_CACHE_FREE,  // blocks its prefix cache keeps count as free: the drained usage is a leak
  PROM_CACHE_SLOTS, // its slots keep their prompts' KV (llama.cpp): erase every slot first
} prom_cache;

// The servers whose /metrics shardcheck reads: a row per server.
typedef struct prom_server {
  const char *name;   // "vLLM", "SGLang", "llama.cpp", "TGI", "shardcheck serve"
  const char *prefix; // its metric names begin with it ("vllm:", "llamacpp:", ...)
  prom_cache cache;
} prom_server;

// The row of the server named name (replica_server_metrics.server); NULL when none.
const prom_server *prom_server_named(const char *name);
