// The Prometheus text reader (serving/prom.h): a metric's samples summed over its series, and
// the figures the HTTP replica keeps under each server's names.
// Not here: the scrape itself (serving/replica_http.c), the server side (server/metrics.c).
#include "serving/prom.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// --- the figures and the names each server gives them
// A figure of replica_server_metrics and its names, in order of preference.
typedef struct prom_figure {
  const char *const *names; // NULL-terminated, in order of preference
  double *out;
} prom_figure;

static const char *const running_names[] = {"vllm:num_requests_running", "sglang:num_running_reqs",
                                            "llamacpp:requests_processing",
                                            "tgi_batch_current_size", NULL};
static const char *const waiting_names[] = {"vllm:num_requests_waiting", "sglang:num_queue_reqs",
                                            "llamacpp:requests_deferred", "tgi_queue_size", NULL};
static const char *const kv_names[] = {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
                                       "sglang:token_usage", "llamacpp:kv_cache_usage_ratio", NULL};
static const char *const blocks_names[] = {"shardcheck:kv_blocks_used", NULL};

// vLLM (v1) keeps a freed request's cached blocks in its free queue and counts them free;
// SGLang's token_usage leaves out the radix cache's evictable tokens; llama.cpp's slots keep
// their prompts' cells (its kv_cache_usage_ratio, in builds that still export it, counts them).
static const prom_server servers[] = {
    {"vLLM", "vllm:", PROM_CACHE_FREE},
    {"SGLang", "sglang:", PROM_CACHE_FREE},
    {"llama.cpp", "llamacpp:", PROM_CACHE_SLOTS},
    {"TGI", "tgi_", PROM_CACHE_FREE},
    {"shardcheck serve", "shardcheck:", PROM_CACHE_FREE},
};

const prom_server *prom_server_named(const char *name) {
  for (size_t i = 0; name && i < sizeof servers / sizeof *servers; i++)
    if (!strcmp(servers[i].name, name)) return &servers[i];
  return NULL;
}

static const char *server_of_name(const char *metric) {
  for (size_t i = 0; i < sizeof servers / sizeof *servers; i++)
    if (!strncmp(metric, servers[i].prefix, strlen(servers[i].prefix))) return servers[i].name;
  return NULL;
}

// --- reading the text
bool prom_sum(const char *text, const char *name, double *sum) {
  size_t nl = strlen(name);
  bool found = false;
  double v = 0;
  for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
    if (*l == '#' || strncmp(l, name, nl) != 0) continue;
    const char *p = l + nl;
    if (*p == '{') { // labels: skip to the closing brace (quoted values may hold braces)
      bool quoted = false;
      for (p++; *p && *p != '\n'; p++) {
        if (*p == '\\' && quoted && p[1])
          p++;
        else if (*p == '"')
          quoted = !quoted;
        else if (*p == '}' && !quoted)
          break;
      }
      if (*p != '}') continue;
      p++;
    }
    if (*p != ' ' && *p != '\t') continue; // a longer name that starts with this one
    char *end;
    double x = strtod(p, &end);
    if (end == p || !isfinite(x)) continue;
    v += x;
    found = true;
  }
  if (found) *sum = v;
  return found;
}

bool prom_parse(const char *text, replica_server_metrics *m) {
  *m = (replica_server_metrics){.running = NAN, .waiting = NAN, .kv_usage = NAN, .kv_blocks = NAN,
                                .peak_running = NAN, .peak_waiting = NAN, .peak_kv = NAN};
  const prom_figure figs[] = {{running_names, &m->running},
                              {waiting_names, &m->waiting},
                              {kv_names, &m->kv_usage},
                              {blocks_names, &m->kv_blocks}};
  static const char *const what[] = {"running requests", "waiting requests", "KV-cache usage",
                                     "KV blocks"};
  size_t len = 0;
  for (size_t i = 0; i < sizeof figs / sizeof *figs; i++) {
    bool found = false;
    for (int k = 0; figs[i].names[k] && !found; k++)
      if (prom_sum(text, figs[i].names[k], figs[i].out)) {
        found = m->have = true;
        if (!m->server) m->server = server_of_name(figs[i].names[k]);
      }
    if (!found && len < sizeof m->why)
      len += (size_t)snprintf(m->why + len, sizeof m->why - len, "%s%s", len ? ", " : "no ",
                              what[i]);
  }
  if (len && len < sizeof m->why)
    snprintf(m->why + len, sizeof m->why - len, " under any name shardcheck reads");
  if (isfinite(m->kv_blocks)) m->server = "shardcheck serve"; // it also writes vLLM's names
  return m->have;
}
