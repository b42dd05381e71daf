// /metrics: the server's counters, gauges and histograms in the Prometheus text format, under
// vLLM V1's names where they mean the same (vllm:num_requests_running, vllm:kv_cache_usage_perc,
// vllm:inter_token_latency_seconds, ...) beside the older names dashboards still read
// (vllm:gpu_cache_usage_perc, vllm:time_per_output_token_seconds), and
// shardcheck's own per replica (KV blocks, epoch, health). Who counts what is server/loop.c's;
// this file only renders.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_impl.h"

// vLLM V1's buckets and names (vllm/v1/metrics/loggers.py, PrometheusStatLogger; docs/serve.md
// names the revisions read).
static const double ttft_bounds[] = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                     0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                     20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
static const double itl_bounds[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                    0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
static const double latency_bounds[] = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                        5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                        60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
static const double iteration_bounds[] = {1,   8,    16,   32,   64,   128,  256,
                                          512, 1024, 2048, 4096, 8192, 16384};

#define BOUNDS(a) a, (int)(sizeof a / sizeof a[0])
typedef struct hist_row {
  const char *name, *help;
  const double *bounds; // NULL: the token-count buckets (srv_metrics.len_bounds)
  int n;
} hist_row;
static const hist_row hists[SRV_H_N] = {
    [SRV_H_TTFT] = {"vllm:time_to_first_token_seconds",
                    "Histogram of time to first token in seconds.", BOUNDS(ttft_bounds)},
    [SRV_H_ITL] = {"vllm:inter_token_latency_seconds",
                   "Histogram of inter-token latency in seconds.", BOUNDS(itl_bounds)},
    [SRV_H_TPOT] = {"vllm:time_per_output_token_seconds",
                    "Histogram of time per output token in seconds.DEPRECATED: Use "
                    "vllm:inter_token_latency_seconds instead.",
                    BOUNDS(itl_bounds)},
    [SRV_H_REQ_TPOT] = {"vllm:request_time_per_output_token_seconds",
                        "Histogram of time_per_output_token_seconds per request.",
                        BOUNDS(itl_bounds)},
    [SRV_H_E2E] = {"vllm:e2e_request_latency_seconds",
                   "Histogram of e2e request latency in seconds.", BOUNDS(latency_bounds)},
    [SRV_H_QUEUE] = {"vllm:request_queue_time_seconds",
                     "Histogram of time spent in WAITING phase for request.",
                     BOUNDS(latency_bounds)},
    [SRV_H_INFERENCE] = {"vllm:request_inference_time_seconds",
                         "Histogram of time spent in RUNNING phase for request.",
                         BOUNDS(latency_bounds)},
    [SRV_H_PREFILL] = {"vllm:request_prefill_time_seconds",
                       "Histogram of time spent in PREFILL phase for request.",
                       BOUNDS(latency_bounds)},
    [SRV_H_DECODE] = {"vllm:request_decode_time_seconds",
                      "Histogram of time spent in DECODE phase for request.",
                      BOUNDS(latency_bounds)},
    [SRV_H_ITERATION] = {"vllm:iteration_tokens_total",
                         "Histogram of number of tokens per engine_step.",
                         BOUNDS(iteration_bounds)},
    [SRV_H_PROMPT_TOKENS] = {"vllm:request_prompt_tokens", "Number of prefill tokens processed.",
                             NULL, 0},
    [SRV_H_GEN_TOKENS] = {"vllm:request_generation_tokens",
                          "Number of generation tokens processed.", NULL, 0},
};
#undef BOUNDS

void srv_metrics_init(srv_metrics *m, int max_model_len) {
  static const int mant[3] = {1, 2, 5};
  m->n_len_bounds = 0;
  for (double p = 1; m->n_len_bounds < SRV_MAX_BOUNDS; p *= 10)
    for (int i = 0; i < 3 && m->n_len_bounds < SRV_MAX_BOUNDS; i++) {
      if (mant[i] * p > max_model_len) return;
      m->len_bounds[m->n_len_bounds++] = mant[i] * p;
    }
}

void srv_observe(srv_metrics *m, srv_hist_id id, double v) {
  const hist_row *r = &hists[id];
  if (r->bounds)
    srv_hist_add(&m->h[id], r->bounds, r->n, v);
  else
    srv_hist_add(&m->h[id], m->len_bounds, m->n_len_bounds, v);
}

// Sim mode: how late after its priced end a step ended, and how long its chunks took to hand
// out (s).
const double srv_late_bounds[SRV_LATE_BUCKETS] = {0.00001, 0.00005, 0.0001, 0.00025, 0.0005,
                                                  0.001,   0.0025,  0.005,  0.01,    0.1};

void srv_hist_add(srv_hist *h, const double *bounds, int n_bounds, double v) {
  h->count++;
  h->sum += v;
  for (int i = 0; i < n_bounds; i++)
    if (v <= bounds[i]) {
      h->le[i]++;
      return;
    }
}

typedef struct buf {
  char *p;
  size_t n, cap;
  bool oom;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    if (k < 0) {
      b->oom = true;
      return;
    }
    if ((size_t)k < b->cap - b->n) {
      b->n += (size_t)k;
      return;
    }
    size_t cap = b->cap * 2 + (size_t)k;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = true;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
}

static void hist(buf *b, const char *name, const char *help, const srv_hist *h,
                 const double *bounds, int n, const char *model) {
  put(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
  uint64_t cum = 0;
  for (int i = 0; i < n; i++) {
    cum += h->le[i];
    put(b, "%s_bucket{le=\"%g\",model_name=\"%s\"} %llu\n", name, bounds[i], model,
        (unsigned long long)cum);
  }
  put(b, "%s_bucket{le=\"+Inf\",model_name=\"%s\"} %llu\n", name, model,
      (unsigned long long)h->count);
  put(b, "%s_count{model_name=\"%s\"} %llu\n", name, model, (unsigned long long)h->count);
  put(b, "%s_sum{model_name=\"%s\"} %.9g\n", name, model, h->sum);
}

char *srv_metrics_render(const srv_metrics *m, int n_reps, const char *model, int pending) {
  buf b = {.cap = 4096};
  b.p = malloc(b.cap);
  if (!b.p) return NULL;
  b.p[0] = 0;
  int running = 0, waiting = 0;
  long kv_used = 0, kv_total = 0;
  unsigned long long preempt = 0, queries = 0, hits = 0;
  for (int i = 0; i < n_reps; i++) {
    running += m->reps[i].running;
    waiting += m->reps[i].waiting;
    kv_used += m->reps[i].kv_used;
    kv_total += m->reps[i].kv_total;
    preempt += m->reps[i].preemptions;
    queries += m->reps[i].prefix_queries;
    hits += m->reps[i].prefix_hits;
  }
  put(&b,
      "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
      "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"%s\"} %d\n",
      model, running);
  put(&b,
      "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
      "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"%s\"} %d\n",
      model, waiting);
  double kv_frac = kv_total ? (double)kv_used / (double)kv_total : 0.0;
  put(&b,
      "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
      "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=\"%s\"} %.6g\n",
      model, kv_frac);
  put(&b,
      "# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: "
      "Use vllm:kv_cache_usage_perc instead.\n"
      "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{model_name=\"%s\"} %.6g\n",
      model, kv_frac);
  put(&b,
      "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.\n"
      "# TYPE vllm:num_preemptions_total counter\n"
      "vllm:num_preemptions_total{model_name=\"%s\"} %llu\n",
      model, preempt);
  put(&b,
      "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of "
      "queried tokens.\n# TYPE vllm:prefix_cache_queries_total counter\n"
      "vllm:prefix_cache_queries_total{model_name=\"%s\"} %llu\n",
      model, queries);
  put(&b,
      "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached "
      "tokens.\n# TYPE vllm:prefix_cache_hits_total counter\n"
      "vllm:prefix_cache_hits_total{model_name=\"%s\"} %llu\n",
      model, hits);
  put(&b,
      "# HELP vllm:gpu_prefix_cache_queries_total GPU prefix cache queries, in terms of number "
      "of queried tokens. DEPRECATED: Use vllm:prefix_cache_queries instead.\n"
      "# TYPE vllm:gpu_prefix_cache_queries_total counter\n"
      "vllm:gpu_prefix_cache_queries_total{model_name=\"%s\"} %llu\n",
      model, queries);
  put(&b,
      "# HELP vllm:gpu_prefix_cache_hits_total GPU prefix cache hits, in terms of number of "
      "cached tokens. DEPRECATED: Use vllm:prefix_cache_hits instead.\n"
      "# TYPE vllm:gpu_prefix_cache_hits_total counter\n"
      "vllm:gpu_prefix_cache_hits_total{model_name=\"%s\"} %llu\n",
      model, hits);
  put(&b,
      "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n"
      "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{model_name=\"%s\"} %llu\n",
      model, (unsigned long long)m->prompt_tokens);
  put(&b,
      "# HELP vllm:generation_tokens_total Number of generation tokens processed.\n"
      "# TYPE vllm:generation_tokens_total counter\n"
      "vllm:generation_tokens_total{model_name=\"%s\"} %llu\n",
      model, (unsigned long long)m->generation_tokens);
  static const char *const reasons[SRV_FINISH_KINDS] = {"stop", "length", "abort"};
  put(&b, "# HELP vllm:request_success_total Count of successfully processed requests.\n"
          "# TYPE vllm:request_success_total counter\n");
  for (int i = 0; i < SRV_FINISH_KINDS; i++)
    put(&b, "vllm:request_success_total{finished_reason=\"%s\",model_name=\"%s\"} %llu\n",
        reasons[i], model, (unsigned long long)m->success[i]);
  for (int i = 0; i < SRV_H_N; i++) {
    const hist_row *r = &hists[i];
    hist(&b, r->name, r->help, &m->h[i], r->bounds ? r->bounds : m->len_bounds,
         r->bounds ? r->n : m->n_len_bounds, model);
  }
  if (m->late.count) {
    hist(&b, "shardcheck:sim_step_lateness_seconds",
         "Sim mode: wall time past its priced end at which each engine step ended.", &m->late,
         srv_late_bounds, SRV_LATE_BUCKETS, model);
    hist(&b, "shardcheck:sim_step_handout_seconds",
         "Sim mode: wall time from each engine step's end to its chunks handed to the "
         "connections.",
         &m->handout, srv_late_bounds, SRV_LATE_BUCKETS, model);
  }
  put(&b,
      "# HELP shardcheck:requests_pending Requests accepted without a first token yet (what "
      "--max-pending counts).\n# TYPE shardcheck:requests_pending gauge\n"
      "shardcheck:requests_pending %d\n",
      pending);
  put(&b,
      "# HELP shardcheck:requests_failed_total Requests that ended with an error.\n"
      "# TYPE shardcheck:requests_failed_total counter\nshardcheck:requests_failed_total %llu\n",
      (unsigned long long)m->failed);
  put(&b,
      "# HELP shardcheck:requests_cancelled_total Requests whose client went away.\n"
      "# TYPE shardcheck:requests_cancelled_total counter\n"
      "shardcheck:requests_cancelled_total %llu\n",
      (unsigned long long)m->cancelled);
  put(&b,
      "# HELP shardcheck:requests_rejected_total Requests refused with 503 (--max-connections, "
      "--max-pending, starting, draining, no replica).\n"
      "# TYPE shardcheck:requests_rejected_total counter\n"
      "shardcheck:requests_rejected_total %llu\n",
      (unsigned long long)m->rejected);
  put(&b,
      "# HELP shardcheck:connections_timed_out_total Connections closed because their request "
      "did not arrive whole within --request-timeout.\n"
      "# TYPE shardcheck:connections_timed_out_total counter\n"
      "shardcheck:connections_timed_out_total %llu\n",
      (unsigned long long)m->timed_out);
  static const char *const gauges[][2] = {
      {"kv_blocks_used", "KV-cache blocks in use on the replica."},
      {"kv_blocks_total", "KV-cache blocks of the replica."},
      {"replica_epoch", "The replica's incarnation (1 at start, +1 per restart or swap)."},
      {"replica_healthy", "1 while the replica is healthy, else 0."},
      {"replica_health", "The replica's state: 0 healthy, 1 draining, 2 unhealthy, 3 dead."}};
  for (size_t k = 0; k < sizeof gauges / sizeof gauges[0]; k++) {
    put(&b, "# HELP shardcheck:%s %s\n# TYPE shardcheck:%s gauge\n", gauges[k][0], gauges[k][1],
        gauges[k][0]);
    for (int i = 0; i < n_reps; i++) {
      const srv_replica_gauges *g = &m->reps[i];
      long v = k == 0   ? g->kv_used
               : k == 1 ? g->kv_total
               : k == 2 ? g->epoch
               : k == 3 ? g->health == REPLICA_HEALTHY
                        : (long)g->health;
      put(&b, "shardcheck:%s{replica=\"%d\"} %ld\n", gauges[k][0], i, v);
    }
  }
  if (b.oom) {
    free(b.p);
    return NULL;
  }
  return b.p;
}
