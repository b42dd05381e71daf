// Reading a server's /metrics: the Prometheus text exposition format ("name{labels} value
// [timestamp]" per line, "#" lines comments) as vLLM, SGLang, TGI, llama.cpp's server and
// shardcheck serve write it. Only what the HTTP replica keeps is read: the running and waiting
// requests, the KV-cache usage and shardcheck serve's KV blocks (replica_server_metrics).
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
// none is there. Returns m->have: true when at least one figure was found. t_ns is left 0.
bool prom_parse(const char *text, replica_server_metrics *m);
