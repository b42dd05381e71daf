// What a deployment measured and the run's verdicts: a deployment's summaries from the runner's
// own request records (mt_summarize per phase, class and deployment) and its metric rows (each
// measured, or absent with the reason: a row of the metric table that says the kind of replica
// cannot give it, a server that does not expose it), the client against its schedule, the
// layout equivalence of greedy outputs across deployments, the audit of the metrics against
// their rows, and after the last deployment the scaling metrics and the SLO verdicts
// (mt_verdicts, with extra_value for the keys a summary does not hold; a verdict with no value
// fails with "no data: why").
// Not here: the loop that fills the records (runner/runner.c), the formulas (reports/metrics.c),
// the fault verdicts (faults/runtime.h: fault_rt_end fills dep_result.faults).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner/runner_impl.h"
#include "faults/verdict.h"
#include "reports/query.h"

// --- metrics of a deployment
typedef struct emit_ctx {
  rt *r;
  int64_t phase_id;
  const char *cls;
} emit_ctx;

static void emit_metric(void *ud, const char *name, double v) {
  emit_ctx *c = ud;
  db_ok(c->r, store_metric_add(c->r->db, c->r->run_id, c->r->dep_id, c->phase_id, c->cls, name, v,
                               &c->r->err));
}

void rn_add_metric(rt *r, int64_t phase_id, const char *name, double v) {
  db_ok(r, store_metric_add(r->db, r->run_id, r->dep_id, phase_id, NULL, name, v, &r->err));
}

mt_kind rn_kind(const rt *r) { return r->sim ? MT_KIND_SIM : scenario_metric_kind(r->s); }

// A value of the deployment's phase phase_id (0: the whole deployment), or NaN with why: the
// metric table's reason when this kind of replica cannot give it, else why given here. A
// measured value keeps why only when how says how it was measured ("compared on the streamed
// text"). Stored as a metric row with its note; *v and *why are what was stored.
static void put_value(rt *r, int64_t phase_id, const char *name, double *v, const char **why,
                      bool how) {
  const char *absent = mt_metric_absent(name, rn_kind(r));
  if (absent) {
    *v = NAN;
    *why = absent;
  }
  if (!isnan(*v) && !how) *why = NULL;
  else if (!*why) *why = "not measured";
  db_ok(r, store_metric_add_note(r->db, r->run_id, r->dep_id, phase_id, NULL, name, *v, *why,
                                 &r->err));
}

static void phase_value(rt *r, int64_t phase_id, const char *name, double v, const char *why) {
  put_value(r, phase_id, name, &v, &why, false);
}

// Keeps a value of deployment dr for the SLO verdicts (extra_value), with why when NaN.
static void keep(dep_result *dr, const char *name, double v, const char *why) {
  if (dr->n_kept == (int)(sizeof dr->kept / sizeof dr->kept[0])) return;
  dr->kept[dr->n_kept].name = name;
  dr->kept[dr->n_kept].v = v;
  snprintf(dr->kept[dr->n_kept++].why, sizeof dr->kept[0].why, "%s", why ? why : "");
}

// A metric row of the whole deployment dr (phase 0), kept for its SLOs too.
static void dep_value(rt *r, dep_result *dr, const char *name, double v, const char *why) {
  put_value(r, 0, name, &v, &why, false);
  keep(dr, name, v, why);
}

// The same for a measured value whose note says how it was measured.
static void dep_value_how(rt *r, dep_result *dr, const char *name, double v, const char *how) {
  put_value(r, 0, name, &v, &how, true);
  keep(dr, name, v, how);
}

static void dep_metric(rt *r, dep_result *dr, const char *name, double v) {
  dep_value(r, dr, name, v, NULL);
}

// The fraction of the replicas' time spent in steps: busy_ns (the summed step durations of every
// replica over a window) over dp x span_ns; NaN for an empty window.
static double busy_frac(const rt *r, double busy_ns, uint64_t span_ns) {
  return span_ns ? busy_ns / ((double)r->dep->dp * (double)span_ns) : NAN;
}

// --- the client against its schedule
static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

// Phase ph's client: how late it sent each request against its schedule (p99), the arrival
// rate it achieved over its sending time, the requests in flight averaged over the phase, and
// whether it fell behind (late p99 past MT_CLIENT_LATE_MS). Mode sim sends on the virtual
// clock: never late.
static void client_figures(rt *r, phase_run *ph) {
  size_t n = ph->end_seq - ph->first_seq;
  ph->late_p99_ms = ph->arrival_rate = ph->mean_concurrency = NAN;
  ph->saturated = false;
  if (n == 0) return;
  double *late = malloc(n * sizeof *late);
  double inflight_ns = 0;
  for (size_t k = 0; k < n; k++) {
    const req_rec *q = &r->reqs.v[ph->first_seq + k];
    if (late) late[k] = q->sent > q->arrival ? (double)(q->sent - q->arrival) / 1e6 : 0;
    if (q->finish > q->arrival) inflight_ns += (double)(q->finish - q->arrival);
  }
  if (late) {
    qsort(late, n, sizeof *late, cmp_double);
    ph->late_p99_ms = mt_percentile(late, (int)n, 99);
    free(late);
  }
  uint64_t sending = (ph->send_stop > ph->start ? ph->send_stop : ph->end) - ph->start;
  if (sending > 0) ph->arrival_rate = (double)n / ((double)sending / 1e9);
  if (ph->end > ph->start) ph->mean_concurrency = inflight_ns / (double)(ph->end - ph->start);
  ph->saturated = ph->late_p99_ms > MT_CLIENT_LATE_MS;
}

// --- an external server's own figures (its /metrics scrapes)
// The largest of a (NaN: none yet) and b (NaN: not exposed).
static double max_known(double a, double b) { return isnan(a) ? b : isnan(b) ? a : fmax(a, b); }

// --- the prefix cache
// Prompt tokens served from the prefix cache over prompt tokens, of the completed non-warm-up
// requests with keys in [from, to) of class cl (-1: every class) that reported theirs (their
// count in *reported); NaN when none did.
static double cache_hit_rate(const rt *r, size_t from, size_t to, int cl, int *reported) {
  double cached = 0, prompt = 0;
  int n = 0;
  for (size_t k = from; k < to && k < r->reqs.n; k++) {
    const req_rec *q = &r->reqs.v[k];
    if (q->warmup || q->state != REQ_DONE || q->status != REQ_OK || !q->has_cached ||
        (cl >= 0 && q->class_idx != cl))
      continue;
    cached += q->cached_tokens;
    prompt += q->prompt_tokens;
    n++;
  }
  *reported = n;
  return n && prompt > 0 ? cached / prompt : NAN;
}

// An external server's prefix_cache_hit_rate over phases ph[0..n) from its /metrics when its
// responses gave no cached_tokens (docs/metrics.md): its counters' growth, hits over queries,
// summed over the phases and replicas; else its hit-rate gauge's mean over their scrapes. NaN
// with why (a counter that went down, malformed or missing counters, no prompt token looked up);
// how names the source when measured. Static text, or buf.
static double server_cache_rate(const phase_run *ph, int n, char *buf, size_t len,
                                const char **how) {
  double hits = 0, queries = 0, gsum = 0;
  int gn = 0, reps = 0;
  const char *names = NULL, *bad = NULL;
  for (int k = 0; k < n; k++) {
    if (!ph[k].id) continue;
    if (ph[k].cache_bad[0] && !bad) bad = ph[k].cache_bad;
    hits += ph[k].cache_hits;
    queries += ph[k].cache_queries;
    reps = ph[k].cache_reps > reps ? ph[k].cache_reps : reps;
    gsum += ph[k].gauge_sum;
    gn += ph[k].gauge_n;
    if (ph[k].cache_names) names = ph[k].cache_names;
  }
  *how = NULL;
  if (bad) {
    snprintf(buf, len, "no cached_tokens in the responses, and /metrics: %.150s", bad);
    return NAN;
  }
  if (reps && queries > 0) {
    snprintf(buf, len, "from the server's /metrics: %s, their growth over the phase (%d "
             "replica%s; warm-up included)", names, reps, reps > 1 ? "s" : "");
    *how = buf;
    return hits / queries;
  }
  if (reps) {
    snprintf(buf, len, "no cached_tokens in the responses, and /metrics' %s did not grow",
             names);
    return NAN;
  }
  if (gn) {
    snprintf(buf, len, "from the server's /metrics: %s, the mean of %d scrape%s (the "
             "server's own window, not the phase's)", names, gn, gn > 1 ? "s" : "");
    *how = buf;
    return gsum / gn;
  }
  snprintf(buf, len, "no cached_tokens in the responses, and /metrics gave no prefix-cache "
           "counters (vllm:prefix_cache_hits/queries) or hit-rate gauge");
  return NAN;
}

// prefix_cache_hit_rate of keys [from, to) (phase_id 0: the whole deployment, then kept for
// its SLO), and of each prompt class that reported it; the requests of phases ph[0..n_ph) (an
// external server's /metrics stand in when no request reported its cached tokens). A
// deployment whose replicas cannot have a prefix cache (limits.prefix_caching off, not a
// server) has no row; its SLO says why.
static void cache_metrics(rt *r, dep_result *dr, int64_t phase_id, size_t from, size_t to,
                          const phase_run *ph, int n_ph) {
  static const char *const name = "prefix_cache_hit_rate";
  bool on = r->s->target.set || r->ec.prefix_caching;
  int n = 0;
  double v = cache_hit_rate(r, from, to, -1, &n);
  const char *why = !on ? "prefix caching is off (limits.prefix_caching)"
                    : r->s->target.set
                        ? "the server sent no usage.prompt_tokens_details.cached_tokens"
                        : "no request completed";
  if (!on && !n) {
    if (!phase_id) keep(dr, name, NAN, why);
    return;
  }
  if (r->s->target.set && !n && r->server_seen) { // the server's own counters stand in
    char buf[300];
    const char *how;
    v = server_cache_rate(ph, n_ph, buf, sizeof buf, &how);
    if (how) {
      put_value(r, phase_id, name, &v, &how, true);
      if (!phase_id) keep(dr, name, v, how);
    } else if (phase_id) {
      phase_value(r, phase_id, name, v, buf);
    } else {
      dep_value(r, dr, name, v, buf);
    }
    return;
  }
  if (phase_id) phase_value(r, phase_id, name, v, why);
  else dep_value(r, dr, name, v, why);
  int nc = workload_n_classes(r->wl);
  for (int cl = 0; nc > 1 && cl < nc; cl++) {
    double cv = cache_hit_rate(r, from, to, cl, &n);
    if (!n) continue;
    emit_ctx cc = {.r = r, .phase_id = phase_id, .cls = workload_class_name(r->wl, cl)};
    emit_metric(&cc, name, cv);
  }
}

// --- how requests spread over the replicas
// Each replica's share of the deployment's requests and of their output tokens: the measured
// (non-warm-up) requests, each counted on the replica that served it last (a retried or
// resumed request on the one that finished it). replica_imbalance = 1 - the fewest requests of
// a replica over the mean count (docs/metrics.md): 0 when every replica took as many, 1 when
// one took none. Its row's note gives the shares, replica by replica.
static void replica_shares(rt *r, dep_result *dr) {
  static const char *const name = "replica_imbalance";
  int n = r->dep->dp;
  double *req = calloc((size_t)(n > 0 ? 2 * n : 1), sizeof *req);
  if (!req) {
    dep_value(r, dr, name, NAN, "out of memory counting the replicas' requests");
    return;
  }
  double *tok = req + n, total = 0, total_tok = 0;
  for (size_t k = 0; k < r->reqs.n; k++) {
    const req_rec *q = &r->reqs.v[k];
    if (q->warmup || !q->dispatched || q->replica < 0 || q->replica >= n) continue;
    req[q->replica]++;
    tok[q->replica] += q->n_tok;
    total++;
    total_tok += q->n_tok;
  }
  double fewest = total;
  for (int i = 0; i < n; i++) fewest = fmin(fewest, req[i]);
  double v = total > 0 ? 1 - fewest / (total / n) : NAN;
  char how[160];
  size_t len = (size_t)snprintf(how, sizeof how,
                                "shares of requests / output tokens, replica 0..%d:", n - 1);
  for (int i = 0; i < n && len < sizeof how; i++)
    len += (size_t)snprintf(how + len, sizeof how - len, " %.2f/%.2f", total ? req[i] / total : 0,
                            total_tok ? tok[i] / total_tok : 0);
  free(req);
  if (total > 0 && n > 1) dep_value_how(r, dr, name, v, how);
  else dep_value(r, dr, name, v, "no request was dispatched");
}

// --- prompt classes against each other
// class_ttft_ratio: the slowest prompt class's TTFT p95 over the fastest's, of the classes with a
// first token in the deployment's pooled summaries (docs/metrics.md). Near 1 when the classes
// wait alike; a class starved behind another takes it far past. Unlike a class's own TTFT limit
// it does not move with the host's speed: a slower host makes both classes wait longer.
static void class_ratio(rt *r, dep_result *dr, int nc) {
  double lo = NAN, hi = NAN;
  int n = 0;
  for (int cl = 0; cl < nc; cl++) {
    double p = dr->cls_pooled[cl].ttft_ms.n > 0 ? dr->cls_pooled[cl].ttft_ms.p95 : NAN;
    if (!(p > 0)) continue;
    lo = n ? fmin(lo, p) : p;
    hi = n ? fmax(hi, p) : p;
    n++;
  }
  dep_value(r, dr, "class_ttft_ratio", n >= 2 ? hi / lo : NAN,
            nc < 2 ? "the workload has one prompt class"
                   : "fewer than two prompt classes had a first token");
}

sc_status rn_deployment_summaries(rt *r, dep_result *dr, dep_sums *out) {
  size_t n = r->reqs.n;
  int n_classes = workload_n_classes(r->wl);
  out->nc = n_classes > 1 ? n_classes : 0;
  out->v = calloc((size_t)(r->n_phases ? r->n_phases : 1) * (size_t)(1 + out->nc), sizeof *out->v);
  mt_request *m = calloc(n ? n : 1, sizeof *m);
  if (!out->v || !m) {
    free(m);
    return sc_fail(&r->err, SC_OOM, "runner: out of memory computing metrics");
  }
  for (size_t i = 0; i < n; i++) {
    const req_rec *q = &r->reqs.v[i];
    m[i] = (mt_request){.arrival_ns = q->arrival, .finish_ns = q->finish, .token_ns = q->tok,
                        .n_tokens = q->n_tok, .prompt_tokens = q->prompt_tokens,
                        .status = q->status, .reason = q->reason, .class_idx = q->class_idx,
                        .warmup = q->warmup};
  }
  sc_status s = SC_OK;
  for (int k = 0; k < r->n_phases && s == SC_OK; k++) {
    const phase_run *ph = &r->phases[k];
    if (!ph->id) continue; // never started (interrupted before it)
    const mt_request *pm = m + ph->first_seq;
    int pn = (int)(ph->end_seq - ph->first_seq);
    mt_summary *sum = out->v + (size_t)k * (size_t)(1 + out->nc);
    s = mt_summarize(pm, pn, -1, &r->good, ph->warmup_end, ph->end, &sum[0]);
    for (int cl = 0; cl < out->nc && s == SC_OK; cl++)
      s = mt_summarize(pm, pn, cl, &r->good, ph->warmup_end, ph->end, &sum[1 + cl]);
  }
  if (s == SC_OK) s = mt_summarize(m, (int)n, -1, &r->good, 0, 0, &dr->pooled);
  for (int cl = 0; cl < out->nc && s == SC_OK; cl++)
    s = mt_summarize(m, (int)n, cl, &r->good, 0, 0, &dr->cls_pooled[cl]);
  free(m);
  if (s != SC_OK) return sc_fail(&r->err, s, "runner: computing the metrics failed");
  return SC_OK;
}

sc_status rn_deployment_metrics(rt *r, dep_result *dr, const dep_sums *sums) {
  int conc[SCN_MAX_PHASES * SCN_MAX_RAMP];
  double ttft95[SCN_MAX_PHASES * SCN_MAX_RAMP];
  int n_knee = 0;
  double busy_ns = 0;
  uint64_t span_ns = 0;
  // an external server: the queue, batch, KV and busy figures are its /metrics'
  const bool http = r->s->target.set;
  int srv_scrapes = 0, srv_busy = 0;
  double srv_running = NAN, srv_waiting = NAN, srv_kv = NAN;
  char srv_why[200] = "";
  double late_max = NAN;
  int saturated = 0;
  size_t sat_len = 0;
  dr->saturated[0] = 0;
  dr->peak_tok_s = NAN;
  dr->peak_how[0] = 0;
  for (int k = 0; k < r->n_phases; k++) {
    phase_run *ph = &r->phases[k];
    if (!ph->id) continue;
    const mt_summary *sum = sums->v + (size_t)k * (size_t)(1 + sums->nc);
    emit_ctx c = {.r = r, .phase_id = ph->id, .cls = NULL};
    mt_summary_each(&sum[0], emit_metric, &c);
    if (http) {
      const char *why = ph->srv_why[0] ? ph->srv_why : "the server's /metrics was not read";
      phase_value(r, ph->id, "peak_queue", ph->srv_waiting, why);
      phase_value(r, ph->id, "peak_batch", ph->srv_running, why);
      phase_value(r, ph->id, "kv_peak_frac", ph->srv_kv, why);
      phase_value(r, ph->id, "busy_frac",
                  ph->srv_scrapes ? (double)ph->srv_busy / ph->srv_scrapes : NAN, why);
      srv_scrapes += ph->srv_scrapes;
      srv_busy += ph->srv_busy;
      srv_running = max_known(srv_running, ph->srv_running);
      srv_waiting = max_known(srv_waiting, ph->srv_waiting);
      srv_kv = max_known(srv_kv, ph->srv_kv);
      if (ph->srv_why[0]) snprintf(srv_why, sizeof srv_why, "%s", ph->srv_why);
    } else {
      phase_value(r, ph->id, "peak_queue", ph->peak_queue, NULL);
      phase_value(r, ph->id, "peak_batch", ph->peak_batch, NULL);
      phase_value(r, ph->id, "kv_peak_frac", ph->kv_peak, NULL);
      phase_value(r, ph->id, "busy_frac", busy_frac(r, ph->busy_ns, ph->end - ph->start),
                  "the phase took no time");
    }
    phase_value(r, ph->id, "limit_violations", ph->limit_violations, NULL);
    phase_value(r, ph->id, "preemptions", ph->preemptions, NULL);
    if (r->sim && r->dep->pp > 1 && ph->busy_ns > 0)
      rn_add_metric(r, ph->id, "pp_bubble_frac", ph->bubble_ns / ph->busy_ns);
    client_figures(r, ph);
    phase_value(r, ph->id, "arrival_rate", ph->arrival_rate, "no request was sent");
    phase_value(r, ph->id, "mean_concurrency", ph->mean_concurrency, "no request was sent");
    phase_value(r, ph->id, "client_late_p99_ms", ph->late_p99_ms, "no request was sent");
    phase_value(r, ph->id, "client_saturated", ph->saturated, NULL);
    cache_metrics(r, dr, ph->id, ph->first_seq, ph->end_seq, ph, 1);
    late_max = max_known(late_max, ph->late_p99_ms);
    if (ph->saturated) {
      saturated++;
      if (sat_len < sizeof dr->saturated)
        sat_len += (size_t)snprintf(dr->saturated + sat_len, sizeof dr->saturated - sat_len,
                                    "%s%s %.0f ms", sat_len ? ", " : "", ph->name,
                                    ph->late_p99_ms);
      rn_note(r, "%s: phase %s: client saturated: it sent its requests %.0f ms late (p99; "
              "threshold %.0f ms): its latencies hold the client's delay", r->dep->label,
              ph->name, ph->late_p99_ms, MT_CLIENT_LATE_MS);
    }
    busy_ns += ph->busy_ns;
    span_ns += ph->end - ph->start;
    ph->ttft_p95_ms = sum[0].ttft_ms.p95;
    ph->output_tok_s = sum[0].output_tok_s;
    double delivered = 0, tok_s = rn_step_tok_s(r, ph, &delivered);
    if (tok_s > dr->peak_tok_s || (isnan(dr->peak_tok_s) && !isnan(tok_s))) {
      dr->peak_tok_s = tok_s;
      snprintf(dr->peak_how, sizeof dr->peak_how,
               "%.63s: %.0f tokens delivered in %.2f s after its warm-up", ph->name, delivered,
               (double)(ph->end - ph->warmup_end) / 1e9);
    }
    if (ph->peak_queue > dr->peak_queue) dr->peak_queue = ph->peak_queue;
    if (ph->peak_batch > dr->peak_batch) dr->peak_batch = ph->peak_batch;
    dr->limit_violations += ph->limit_violations;
    dr->preemptions += ph->preemptions;
    if (ph->kv_peak > dr->kv_peak) dr->kv_peak = ph->kv_peak;
    if (ph->concurrency) {
      conc[n_knee] = ph->concurrency;
      ttft95[n_knee++] = sum[0].ttft_ms.p95;
    }
    for (int cl = 0; cl < sums->nc; cl++) {
      emit_ctx cc = {.r = r, .phase_id = ph->id, .cls = workload_class_name(r->wl, cl)};
      mt_summary_each(&sum[1 + cl], emit_metric, &cc);
    }
  }
  emit_ctx c = {.r = r, .phase_id = 0, .cls = NULL};
  mt_summary_each(&dr->pooled, emit_metric, &c);
  if (http) {
    const char *why = srv_why[0] ? srv_why : "the server's /metrics was not read";
    dep_value(r, dr, "peak_queue", srv_waiting, why);
    dep_value(r, dr, "peak_batch", srv_running, why);
    dep_value(r, dr, "kv_peak_frac", srv_kv, why);
    dep_value(r, dr, "busy_frac", srv_scrapes ? (double)srv_busy / srv_scrapes : NAN, why);
  } else {
    dep_metric(r, dr, "peak_queue", dr->peak_queue);
    dep_metric(r, dr, "peak_batch", dr->peak_batch);
    dep_metric(r, dr, "kv_peak_frac", dr->kv_peak);
    dep_value(r, dr, "busy_frac", busy_frac(r, busy_ns, span_ns), "the phases took no time");
  }
  dep_metric(r, dr, "limit_violations", dr->limit_violations);
  dep_metric(r, dr, "preemptions", dr->preemptions);
  replica_shares(r, dr);
  dep_metric(r, dr, "gpus", dr->gpus);
  if (isnan(dr->peak_tok_s))
    dep_value(r, dr, "peak_output_tok_s", NAN, "no phase ran past its warm-up");
  else
    dep_value_how(r, dr, "peak_output_tok_s", dr->peak_tok_s, dr->peak_how);
  dep_value(r, dr, "client_late_p99_ms", late_max, "no request was sent");
  dep_metric(r, dr, "client_saturated", saturated);
  if (dr->has_sat)
    dep_value(r, dr, "saturation_concurrency", dr->sat_knee,
              "the ramp never saturated: every step raised throughput past the gain or kept "
              "TTFT p95 within the growth bound");
  cache_metrics(r, dr, 0, 0, r->reqs.n, r->phases, r->n_phases);
  for (int i = 0; i < r->s->slo.n; i++)
    if (!strcmp(r->s->slo.items[i].key, "ttft_p95_ms") && n_knee > 0) {
      dr->knee = mt_knee(conc, ttft95, n_knee, r->s->slo.items[i].limit);
      dr->has_knee = true;
      char why[96];
      snprintf(why, sizeof why, "no ramp step met ttft_p95_ms <= %g", r->s->slo.items[i].limit);
      dep_value(r, dr, "knee_concurrency", dr->knee >= 0 ? dr->knee : NAN, why);
    }
  for (int cl = 0; cl < sums->nc; cl++) {
    emit_ctx cc = {.r = r, .phase_id = 0, .cls = workload_class_name(r->wl, cl)};
    mt_summary_each(&dr->cls_pooled[cl], emit_metric, &cc);
  }
  class_ratio(r, dr, sums->nc);
  return r->db_status;
}

// --- checks of a deployment
// Every layout computes the same greedy outputs: each deployment gets the same requests (the
// same index is the same prompt and max_tokens), so a completed request's tokens are compared
// with those of the same request in the first deployment, by hash. The first deployment keeps
// its outputs as the reference. Mode real, greedy sampling only (simulated tokens carry no
// model output); layout_mismatches is stored for every later deployment.
// Where a server streamed no token ids (llama.cpp, SGLang, chat) its text is compared instead
// (the streamed text's FNV-1a hash): a placeholder id proves nothing. 0: the ids are unknown.
static uint64_t ids_hash(const req_rec *q) {
  for (int i = 0; i < q->n_tok; i++)
    if (q->ids[i] < 0) return 0;
  return fv_output_hash(q->ids, q->n_tok) | 1; // never 0
}

sc_status rn_layout_equivalence(rt *r, dep_result *dr) {
  dr->layout_mismatches = NAN;
  if (r->sim || r->s->workload.temperature > 0) return SC_OK;
  if (!r->have_ref) {
    size_t n = r->reqs.n ? r->reqs.n : 1;
    r->ref_hash = calloc(n, sizeof *r->ref_hash);
    r->ref_text = calloc(n, sizeof *r->ref_text);
    r->ref_ok = calloc(n, sizeof *r->ref_ok);
    if (!r->ref_hash || !r->ref_ok || !r->ref_text)
      return sc_fail(&r->err, SC_OOM, "runner: out of memory keeping the reference outputs");
    for (size_t k = 0; k < r->reqs.n; k++) {
      const req_rec *q = &r->reqs.v[k];
      r->ref_ok[k] = q->status == REQ_OK;
      r->ref_hash[k] = ids_hash(q);
      r->ref_text[k] = q->text_hash;
    }
    r->n_ref = r->reqs.n;
    r->have_ref = true;
    dr->layout_mismatches = 0;
    keep(dr, "layout_mismatches", 0, NULL); // the reference itself: no row
    return SC_OK;
  }
  int mm = 0, on_text = 0, compared = 0, unknown = 0;
  for (size_t k = 0; k < r->reqs.n && k < r->n_ref; k++) {
    const req_rec *q = &r->reqs.v[k];
    if (q->status != REQ_OK || !r->ref_ok[k]) continue;
    uint64_t h = ids_hash(q);
    if (h && r->ref_hash[k]) {
      compared++;
      mm += h != r->ref_hash[k];
    } else if (q->text_hash && r->ref_text[k]) {
      compared++;
      on_text++;
      mm += q->text_hash != r->ref_text[k];
    } else {
      unknown++; // neither ids nor text on both sides
    }
  }
  double v = compared ? mm : NAN;
  char why[160] = "";
  if (on_text > 0)
    snprintf(why, sizeof why, "compared on the streamed text for %d of %d requests (the server "
             "sent no token ids)", on_text, compared);
  if (!compared)
    snprintf(why, sizeof why, "no request had token ids or streamed text to compare");
  dr->layout_mismatches = v;
  if (why[0]) rn_note(r, "%s: layout equivalence: %s", r->dep->label, why);
  if (unknown > 0)
    rn_note(r, "%s: layout equivalence: %d completed request%s had neither token ids nor text "
            "to compare", r->dep->label, unknown, unknown == 1 ? "" : "s");
  if (mm > 0)
    rn_note(r, "%s: %d greedy output%s differ from the first deployment's", r->dep->label, mm,
            mm == 1 ? "" : "s");
  if (on_text > 0) dep_value_how(r, dr, "layout_mismatches", v, why);
  else dep_value(r, dr, "layout_mismatches", v, why);
  return r->db_status;
}

// The deployment's metrics against the rows they summarize (rq_metrics_audit): a disagreement
// is a bug in shardcheck's formulas or its recorder, and fails the run rather than let a wrong
// figure reach a verdict or a gate.
// At level summary there are no rows to audit against; at level requests, no token rows.
void rn_audit_metrics(rt *r) {
  if (r->s->record == SCN_RECORD_SUMMARY) return;
  char why[200] = "";
  int bad = rq_metrics_audit(store_db(r->db), r->run_id, r->dep_id,
                             r->s->record == SCN_RECORD_TOKENS, why, sizeof why);
  if (bad == 0 || r->res->error[0]) return;
  snprintf(r->res->error, sizeof r->res->error,
           "deployment %s: %d of its metrics disagree with its request and token rows (%s): a "
           "bug in shardcheck's metrics or recorder",
           r->dep->label, bad < 0 ? 0 : bad, why);
}

// --- the verdicts of the run
typedef struct verdict_extra {
  const dep_result *d;
} verdict_extra;

// A metric a summary does not carry, by name: the deployment's own values and the fault
// verdicts' as they were written, with why when not measured; a metric the table marks
// MT_ZERO_UNFAULTED is 0 in a deployment without faults. False: not measured here (the verdict
// fails with no data; why says so when it knows).
static bool extra_value(void *ud, const char *name, double *out, char *why, size_t cap) {
  const dep_result *d = ((verdict_extra *)ud)->d;
  const fault_result *f = &d->faults;
  for (int i = 0; i < d->n_kept; i++)
    if (!strcmp(name, d->kept[i].name)) {
      *out = d->kept[i].v;
      if (isnan(*out)) snprintf(why, cap, "%s", d->kept[i].why);
      return true;
    }
  for (int i = 0; i < f->n_fm; i++)
    if (!strcmp(name, f->fm[i].name)) {
      *out = f->fm[i].v;
      if (isnan(*out)) snprintf(why, cap, "%s", f->fm[i].why);
      return true;
    }
  const mt_metric_info *mi = mt_metric_find(name);
  if (!f->faulted && mi && (mi->flags & MT_ZERO_UNFAULTED)) {
    *out = 0;
    return true;
  }
  if (mi && mi->by == MT_BY_FAULTS && !f->faulted)
    snprintf(why, cap, "no fault was injected in this deployment");
  else if (mi && mi->by == MT_BY_FAULTS)
    snprintf(why, cap, "none of its faults measures it");
  else if (mi && mi->by == MT_BY_SENSITIVITY)
    snprintf(why, cap, "measured by run --sensitivity in mode sim only");
  return false;
}

// A verdict on a value measured in a way worth saying ("compared on the streamed text") says it.
static void note_how(const dep_result *d, mt_verdict *v) {
  if (isnan(v->actual) || v->note[0]) return;
  for (int i = 0; i < d->n_kept; i++)
    if (!strcmp(v->slo, d->kept[i].name) && d->kept[i].why[0])
      snprintf(v->note, sizeof v->note, "%s", d->kept[i].why);
}

// A verdict on a figure the client shaped (latencies, throughput) in a deployment whose client
// fell behind its schedule says so: the server is not alone in that figure.
static void note_saturated(const dep_result *d, mt_verdict *v) {
  const mt_metric_info *mi = mt_metric_find(mt_metric_base(v->slo));
  if (!d->saturated[0] || !mi || (mi->by != MT_BY_SUMMARY && strcmp(mi->name, "knee_concurrency")))
    return;
  size_t n = strlen(v->note);
  snprintf(v->note + n, sizeof v->note - n, "%sclient saturated (%s late, p99)", n ? "; " : "",
           d->saturated);
}

sc_status rn_finish_run(rt *r, dep_result *drs, int n) {
  int *gpus = calloc((size_t)n + 1, sizeof *gpus), *map = calloc((size_t)n + 1, sizeof *map);
  double *tput = calloc((size_t)n + 1, sizeof *tput), *sp = calloc((size_t)n + 1, sizeof *sp);
  double *ef = calloc((size_t)n + 1, sizeof *ef);
  if (!gpus || !map || !tput || !sp || !ef) {
    free(gpus), free(map), free(tput), free(sp), free(ef);
    return sc_fail(&r->err, SC_OOM, "runner: out of memory");
  }
  int m = 0;
  for (int i = 0; i < n; i++)
    if (drs[i].built) {
      gpus[m] = drs[i].gpus;
      tput[m] = drs[i].peak_tok_s;
      map[m++] = i;
    }
  if (m > 0) mt_scaling(gpus, tput, m, sp, ef);
  for (int j = 0; j < m; j++) {
    dep_result *d = &drs[map[j]];
    d->speedup = sp[j];
    d->efficiency = ef[j];
    r->dep_id = d->id;
    const char *why = "the fewest-GPU deployment has no throughput";
    dep_value(r, d, "speedup", sp[j], why);
    dep_value(r, d, "efficiency", ef[j], why);
  }
  // Sim mode: its tokens carry no model output, so there is no equivalence or quality delta
  // to judge (the table's MT_MODEL_OUTPUT metrics).
  scn_slo slo = r->s->slo;
  if (r->sim) {
    int w = 0;
    for (int k = 0; k < slo.n; k++) {
      const char *key = slo.items[k].key;
      const mt_metric_info *mi = mt_metric_find(key);
      if (!mi || !(mi->flags & MT_MODEL_OUTPUT)) {
        slo.items[w++] = slo.items[k];
        continue;
      }
      rn_note(r, "slo %s: not judged in mode sim (simulated tokens carry no model output)", key);
    }
    slo.n = w;
  }
  // the whole deployment's SLOs and every class's: SCN_MAX_SLO each at most
  const int cap = SCN_MAX_SLO * (SCN_MAX_CLASSES + 1);
  mt_verdict *v = calloc((size_t)cap, sizeof *v);
  if (!v) {
    free(gpus), free(map), free(tput), free(sp), free(ef);
    return sc_fail(&r->err, SC_OOM, "runner: out of memory");
  }
  for (int j = 0; j < m; j++) {
    dep_result *d = &drs[map[j]];
    verdict_extra ex = {.d = d};
    int nv = mt_verdicts(&slo, &d->pooled, extra_value, &ex, v, SCN_MAX_SLO);
    // then each prompt class's SLOs against the class's pooled summary ("short:ttft_p95_ms")
    for (int c = 0; c < slo.n_classes; c++)
      nv += mt_class_verdicts(&slo.classes[c], &d->cls_pooled[slo.classes[c].class_idx],
                              v + nv, cap - nv);
    for (int k = 0; k < nv; k++) {
      note_how(d, &v[k]);
      note_saturated(d, &v[k]);
      db_ok(r, store_verdict_add(r->db, r->run_id, d->id, v[k].slo, v[k].op, v[k].expected,
                                 v[k].actual, v[k].pass, v[k].note, &r->err));
      r->res->n_verdicts++;
      r->res->n_failed += !v[k].pass;
    }
  }
  free(v);
  // A deployment that never ran fails every SLO, its classes' too: there is nothing to show
  // it holds.
  for (int i = 0; i < n; i++)
    for (int c = -1; !drs[i].built && drs[i].id && c < slo.n_classes; c++) {
      const scn_slo_item *items = c < 0 ? slo.items : slo.classes[c].items;
      int n_items = c < 0 ? slo.n : slo.classes[c].n;
      for (int k = 0; k < n_items; k++) {
        const scn_slo_item *it = &items[k];
        const mt_metric_info *mi = mt_metric_find(it->key);
        char name[64];
        if (c < 0) snprintf(name, sizeof name, "%.63s", it->key);
        else snprintf(name, sizeof name, "%.31s:%.31s", slo.classes[c].name, it->key);
        db_ok(r, store_verdict_add(r->db, r->run_id, drs[i].id, name,
                                   mi && mi->dir == MT_HIGHER_BETTER ? ">=" : "<=", it->limit,
                                   NAN, false, "no data: the deployment never ran", &r->err));
        r->res->n_verdicts++;
        r->res->n_failed++;
      }
    }
  free(gpus), free(map), free(tput), free(sp), free(ef);
  return r->db_status;
}
