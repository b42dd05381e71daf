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
// Every sample of metric `name` in text: the sum of those whose value parses as a finite
// number (*ok of them) and how many do not (*bad: "NaN", "+Inf", a word).
static double scan(const char *text, const char *name, int *ok, int *bad) {
  size_t nl = strlen(name);
  double v = 0;
  *ok = *bad = 0;
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
    if (end == p || !isfinite(x)) {
      (*bad)++;
      continue;
    }
    v += x;
    (*ok)++;
  }
  return v;
}

bool prom_sum(const char *text, const char *name, double *sum) {
  int ok, bad;
  double v = scan(text, name, &ok, &bad);
  if (ok) *sum = v;
  return ok > 0;
}

// --- the prefix cache
// Pairs of counters (hits, queries, both in prompt tokens; the oldest vLLM V1 counted blocks,
// the same fraction), in order of preference, then the hit-rate gauges.
static const struct {
  const char *hits, *queries, *names, *family; // family: both in short, for the reasons
} cache_pairs[] = {
    {"vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total",
     "vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total",
     "vllm:prefix_cache_{hits,queries}_total"},
    {"vllm:prefix_cache_hits", "vllm:prefix_cache_queries",
     "vllm:prefix_cache_hits / vllm:prefix_cache_queries", "vllm:prefix_cache_{hits,queries}"},
    {"vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total",
     "vllm:gpu_prefix_cache_hits_total / vllm:gpu_prefix_cache_queries_total",
     "vllm:gpu_prefix_cache_{hits,queries}_total"},
    {"vllm:gpu_prefix_cache_hits", "vllm:gpu_prefix_cache_queries",
     "vllm:gpu_prefix_cache_hits / vllm:gpu_prefix_cache_queries",
     "vllm:gpu_prefix_cache_{hits,queries}"},
};
static const char *const cache_gauges[] = {"vllm:gpu_prefix_cache_hit_rate",
                                           "sglang:cache_hit_rate"};

bool prom_cache_counters(const char *text, replica_server_metrics *m) {
  m->has_cache = m->has_gauge = false;
  m->cache_hits = m->cache_queries = m->cache_gauge = NAN;
  m->cache_names = NULL;
  m->cache_why[0] = 0;
  for (size_t i = 0; i < sizeof cache_pairs / sizeof *cache_pairs; i++) {
    int hok, hbad, qok, qbad;
    double h = scan(text, cache_pairs[i].hits, &hok, &hbad);
    double q = scan(text, cache_pairs[i].queries, &qok, &qbad);
    if (!hok && !hbad && !qok && !qbad) continue;
    const char *bad = NULL;
    if (!(hok || hbad) || !(qok || qbad))
      bad = "one of the pair only";
    else if (hbad || qbad)
      bad = "a sample that is not a finite number";
    else if (h < 0 || q < 0)
      bad = "a negative count";
    else if (h > q)
      bad = "more hits than queries";
    if (bad) {
      snprintf(m->cache_why, sizeof m->cache_why, "%.60s: %s", cache_pairs[i].family, bad);
      return false;
    }
    m->has_cache = true;
    m->cache_hits = h;
    m->cache_queries = q;
    m->cache_names = cache_pairs[i].names;
    return true;
  }
  for (size_t i = 0; i < sizeof cache_gauges / sizeof *cache_gauges; i++) {
    int ok, bad;
    double g = scan(text, cache_gauges[i], &ok, &bad);
    if (!ok && !bad) continue;
    g = ok ? g / ok : NAN;
    if (bad || !(g >= 0 && g <= 1)) {
      snprintf(m->cache_why, sizeof m->cache_why, "%s: %s", cache_gauges[i],
               bad ? "a sample that is not a finite number" : "not a fraction in [0, 1]");
      return false;
    }
    m->has_gauge = true;
    m->cache_gauge = g;
    m->cache_names = cache_gauges[i];
    return true;
  }
  return false; // none of the names: nothing to say
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
  prom_cache_counters(text, m);
  return m->have;
}
