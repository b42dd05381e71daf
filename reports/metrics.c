// The metric arithmetic of reports/metrics.h: percentiles, per-request latencies (TTFT, TPOT,
// ITL, E2EL) and their distributions, throughput and goodput over a window, error kinds, the
// name -> value view of a summary, goodput limits from an SLO, scaling across deployments, the
// concurrency knee and the SLO verdicts. docs/metrics.md gives every formula.
//
// Pure arithmetic over arrays the caller owns. Which requests belong to a phase, a class or a
// deployment, the window a phase's rates are over, and the peak_* / kv / gpus rows are the
// runner's (runner/runner.c); storing rows is reports/store.c; the metric name table
// (units, directions) is scenarios/metric_names.c.
#include "reports/metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/util.h"

#define NS_PER_MS 1e6
#define NS_PER_S 1e9

// --- percentiles and distributions

double mt_percentile(const double *sorted, int n, double p) {
  if (n <= 0 || isnan(p)) return NAN;
  if (p < 0) p = 0;
  if (p > 100) p = 100;
  // numpy.percentile(method="linear"): q = p / 100, virtual index q * (n - 1), and numpy's
  // _lerp, which interpolates from the nearer end so that p100 and ties come out exact.
  double vi = p / 100.0 * (double)(n - 1);
  int lo = (int)floor(vi);
  if (lo >= n - 1) return sorted[n - 1];
  double t = vi - (double)lo;
  double a = sorted[lo], b = sorted[lo + 1], d = b - a;
  return t >= 0.5 ? b - d * (1.0 - t) : a + d * t;
}

void mt_dist_of(double *values, int n, mt_dist *out) {
  if (n <= 0) {
    *out = (mt_dist){0, NAN, NAN, NAN, NAN, NAN, NAN};
    return;
  }
  sc_sort_doubles(values, (size_t)n);
  double sum = 0;
  for (int i = 0; i < n; i++) sum += values[i];
  out->n = n;
  out->mean = sum / n;
  out->p50 = mt_percentile(values, n, 50);
  out->p90 = mt_percentile(values, n, 90);
  out->p95 = mt_percentile(values, n, 95);
  out->p99 = mt_percentile(values, n, 99);
  out->max = values[n - 1];
}

// --- summaries

// b - a in ms; exact in the integer domain, then one rounding to double.
static double ms_between(uint64_t a, uint64_t b) { return (double)(int64_t)(b - a) / NS_PER_MS; }

static bool considered(const mt_request *q, int class_filter) {
  return !q->warmup && (class_filter < 0 || q->class_idx == class_filter);
}

// Adds one request of kind `kind` to the error kinds of out. Names are cut to 31 characters;
// once MT_MAX_ERROR_KINDS - 1 kinds exist, further new kinds are counted under "other".
static void add_error_kind(mt_summary *out, const char *kind) {
  char name[sizeof out->error_kind[0]];
  snprintf(name, sizeof name, "%s", kind);
  if (out->n_error_kinds >= MT_MAX_ERROR_KINDS - 1) {
    bool known = false;
    for (int i = 0; i < out->n_error_kinds && !known; i++)
      known = !strcmp(out->error_kind[i], name);
    if (!known) snprintf(name, sizeof name, "other");
  }
  for (int i = 0; i < out->n_error_kinds; i++) {
    if (!strcmp(out->error_kind[i], name)) {
      out->error_count[i]++;
      return;
    }
  }
  int k = out->n_error_kinds++;
  snprintf(out->error_kind[k], sizeof out->error_kind[k], "%s", name);
  out->error_count[k] = 1;
}

// Sorts the error kinds by name so that rows come out in a stable order.
static void sort_error_kinds(mt_summary *s) {
  for (int i = 1; i < s->n_error_kinds; i++) {
    for (int j = i; j > 0 && strcmp(s->error_kind[j - 1], s->error_kind[j]) > 0; j--) {
      char t[sizeof s->error_kind[0]];
      memcpy(t, s->error_kind[j], sizeof t);
      memcpy(s->error_kind[j], s->error_kind[j - 1], sizeof t);
      memcpy(s->error_kind[j - 1], t, sizeof t);
      int c = s->error_count[j];
      s->error_count[j] = s->error_count[j - 1];
      s->error_count[j - 1] = c;
    }
  }
}

// True when an OK request is within every limit of g that applies to it: TTFT when it has a
// first token, TPOT when it has two or more, E2EL always; a limit <= 0 is no limit.
static bool is_good(const mt_request *q, const mt_goodput *g) {
  if (!g) return true;
  if (q->n_tokens >= 1 && g->ttft_ms > 0 && ms_between(q->arrival_ns, q->token_ns[0]) > g->ttft_ms)
    return false;
  if (q->n_tokens >= 2 && g->tpot_ms > 0) {
    double tpot = ms_between(q->token_ns[0], q->finish_ns) / (q->n_tokens - 1);
    if (tpot > g->tpot_ms) return false;
  }
  if (g->e2el_ms > 0 && ms_between(q->arrival_ns, q->finish_ns) > g->e2el_ms) return false;
  return true;
}

sc_status mt_summarize(const mt_request *r, int n, int class_filter, const mt_goodput *g,
                       uint64_t t0_ns, uint64_t t1_ns, mt_summary *out) {
  memset(out, 0, sizeof *out);
  mt_dist_of(NULL, 0, &out->ttft_ms);
  out->tpot_ms = out->itl_ms = out->e2el_ms = out->ttft_ms;
  out->window_s = out->output_tok_s = out->req_s = out->goodput_rps = NAN;
  if (n > 0 && !r) return SC_INVALID;

  // Pass 1: validate, count samples (sizes of the scratch arrays).
  int n_ttft = 0, n_tpot = 0, n_itl = 0, n_e2el = 0;
  for (int i = 0; i < n; i++) {
    const mt_request *q = &r[i];
    if (q->n_tokens < 0 || (q->n_tokens > 0 && !q->token_ns && q->status == REQ_OK))
      return SC_INVALID;
    if (!considered(q, class_filter) || q->status != REQ_OK) continue;
    n_e2el++;
    if (q->n_tokens >= 1) n_ttft++;
    if (q->n_tokens >= 2) {
      n_tpot++;
      n_itl += q->n_tokens - 1;
    }
  }

  // Scratch, in ms: ttft (n_ttft), tpot (n_tpot), itl (n_itl), e2el (n_e2el), one block.
  size_t total = (size_t)n_ttft + (size_t)n_tpot + (size_t)n_itl + (size_t)n_e2el;
  double *buf = total ? malloc(total * sizeof *buf) : NULL;
  if (total && !buf) return SC_OOM;
  double *ttft = buf, *tpot = ttft + n_ttft, *itl = tpot + n_tpot, *e2el = itl + n_itl;
  int k_ttft = 0, k_tpot = 0, k_itl = 0, k_e2el = 0;

  // Pass 2: counts, tokens, samples, error kinds, span.
  uint64_t first_arrival = UINT64_MAX, last_finish = 0;
  for (int i = 0; i < n; i++) {
    const mt_request *q = &r[i];
    if (!considered(q, class_filter)) continue;
    out->requests++;
    if (q->arrival_ns < first_arrival) first_arrival = q->arrival_ns;
    if (q->finish_ns > last_finish) last_finish = q->finish_ns;
    switch (q->status) {
    case REQ_OK: break;
    case REQ_CANCELLED: out->cancelled++; continue;
    case REQ_FAILED:
      out->failed++;
      add_error_kind(out, q->reason && q->reason[0] ? q->reason : "error");
      continue;
    case REQ_TIMEOUT: { // by cause: "timeout" (slow), "timeout_replica_lost" (nobody answered)
      out->timeout++;
      char kind[sizeof out->error_kind[0]] = "timeout";
      if (q->reason && q->reason[0] && strcmp(q->reason, "timeout") != 0)
        snprintf(kind, sizeof kind, "timeout_%.20s", q->reason);
      add_error_kind(out, kind);
      continue;
    }
    default: continue;
    }
    out->ok++;
    out->input_tokens += q->prompt_tokens;
    out->output_tokens += q->n_tokens;
    if (is_good(q, g)) out->good++;
    e2el[k_e2el++] = ms_between(q->arrival_ns, q->finish_ns);
    if (q->n_tokens >= 1) ttft[k_ttft++] = ms_between(q->arrival_ns, q->token_ns[0]);
    if (q->n_tokens >= 2) {
      tpot[k_tpot++] = ms_between(q->token_ns[0], q->finish_ns) / (q->n_tokens - 1);
      for (int t = 1; t < q->n_tokens; t++)
        itl[k_itl++] = ms_between(q->token_ns[t - 1], q->token_ns[t]);
    }
  }
  SC_ASSERT(k_ttft == n_ttft && k_tpot == n_tpot && k_itl == n_itl && k_e2el == n_e2el);

  mt_dist_of(ttft, n_ttft, &out->ttft_ms);
  mt_dist_of(tpot, n_tpot, &out->tpot_ms);
  mt_dist_of(itl, n_itl, &out->itl_ms);
  mt_dist_of(e2el, n_e2el, &out->e2el_ms);
  free(buf);
  sort_error_kinds(out);

  if (t1_ns > t0_ns)
    out->window_s = (double)(t1_ns - t0_ns) / NS_PER_S;
  else if (out->requests && last_finish > first_arrival)
    out->window_s = (double)(last_finish - first_arrival) / NS_PER_S;
  else
    out->window_s = 0; // nothing considered, or no time between first arrival and last finish
  if (out->window_s > 0) {
    out->output_tok_s = (double)out->output_tokens / out->window_s;
    out->req_s = out->ok / out->window_s;
    out->goodput_rps = out->good / out->window_s;
  }
  out->error_rate = out->requests ? (double)(out->failed + out->timeout) / out->requests : 0;
  return SC_OK;
}

// --- names -> values (one walk serves mt_summary_each and mt_summary_value)

typedef void (*emit_fn)(void *ud, const char *name, double v);

static void emit_dist(const char *m, const mt_dist *d, emit_fn emit, void *ud) {
  const struct {
    const char *stat;
    double v;
  } stats[] = {{"mean", d->mean}, {"p50", d->p50}, {"p90", d->p90},
               {"p95", d->p95},   {"p99", d->p99}, {"max", d->max}};
  for (size_t i = 0; i < sizeof stats / sizeof stats[0]; i++) {
    char name[32];
    snprintf(name, sizeof name, "%s_%s_ms", m, stats[i].stat);
    emit(ud, name, d->n > 0 ? stats[i].v : NAN);
  }
}

void mt_summary_each(const mt_summary *s, void (*emit)(void *ud, const char *name, double v),
                     void *ud) {
  emit(ud, "requests", s->requests);
  emit(ud, "ok_requests", s->ok);
  emit(ud, "cancelled_requests", s->cancelled);
  emit(ud, "failed_requests", s->failed);
  emit(ud, "timeout_requests", s->timeout);
  emit(ud, "good_requests", s->good);
  emit(ud, "input_tokens", (double)s->input_tokens);
  emit(ud, "output_tokens", (double)s->output_tokens);
  emit(ud, "window_s", s->window_s);
  emit(ud, "output_tok_s", s->output_tok_s);
  emit(ud, "req_s", s->req_s);
  emit(ud, "goodput_rps", s->goodput_rps);
  emit(ud, "error_rate", s->error_rate);
  emit_dist("ttft", &s->ttft_ms, emit, ud);
  emit_dist("tpot", &s->tpot_ms, emit, ud);
  emit_dist("itl", &s->itl_ms, emit, ud);
  emit_dist("e2el", &s->e2el_ms, emit, ud);
  for (int i = 0; i < s->n_error_kinds && i < MT_MAX_ERROR_KINDS; i++) {
    char name[48]; // "errors_" + a kind of at most 31 characters
    snprintf(name, sizeof name, "errors_%s", s->error_kind[i]);
    emit(ud, name, s->error_count[i]);
  }
}

typedef struct find_ctx {
  const char *name;
  double v;
  bool found;
} find_ctx;

static void find_emit(void *ud, const char *name, double v) {
  find_ctx *f = ud;
  if (!f->found && !strcmp(name, f->name)) {
    f->v = v;
    f->found = true;
  }
}

bool mt_summary_value(const mt_summary *s, const char *name, double *out) {
  if (!s || !name) return false;
  if (!strcmp(name, "timeouts")) name = "timeout_requests"; // the SLO key's stored name
  find_ctx f = {name, NAN, false};
  mt_summary_each(s, find_emit, &f);
  if (f.found && out) *out = f.v;
  return f.found;
}

// --- goodput limits from an SLO

void mt_goodput_from_slo(const scn_slo *slo, mt_goodput *out) {
  *out = (mt_goodput){0, 0, 0};
  if (!slo) return;
  static const char *stats[] = {"mean", "p50", "p90", "p95", "p99", "max"};
  struct {
    const char *m;
    double *limit;
  } fields[] = {{"ttft", &out->ttft_ms}, {"tpot", &out->tpot_ms}, {"e2el", &out->e2el_ms}};
  for (int i = 0; i < slo->n && i < SCN_MAX_SLO; i++) {
    const scn_slo_item *it = &slo->items[i];
    if (!(it->limit > 0)) continue; // <= 0 or NaN: not a usable per-request limit
    for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
      for (size_t k = 0; k < sizeof stats / sizeof stats[0]; k++) {
        char name[32];
        snprintf(name, sizeof name, "%s_%s_ms", fields[f].m, stats[k]);
        if (strcmp(name, it->key)) continue;
        double *l = fields[f].limit;
        if (*l <= 0 || it->limit < *l) *l = it->limit;
      }
    }
  }
}

// --- across deployments

void mt_scaling(const int *gpus, const double *tput, int n, double *speedup, double *efficiency) {
  int base = -1;
  for (int i = 0; i < n; i++)
    if (gpus[i] > 0 && (base < 0 || gpus[i] < gpus[base])) base = i;
  bool ok = base >= 0 && tput[base] > 0;
  for (int i = 0; i < n; i++) {
    if (!ok || gpus[i] <= 0) {
      speedup[i] = efficiency[i] = NAN;
      continue;
    }
    speedup[i] = tput[i] / tput[base];
    efficiency[i] = tput[i] / ((double)gpus[i] / gpus[base] * tput[base]);
  }
}

int mt_knee(const int *concurrency, const double *ttft_p95_ms, int n, double limit_ms) {
  int knee = -1;
  for (int i = 0; i < n; i++)
    if (ttft_p95_ms[i] <= limit_ms && concurrency[i] > knee) knee = concurrency[i];
  return knee;
}

// --- verdicts

const char *mt_summary_why(const mt_summary *s, const char *name) {
  double v;
  if (!s || !name || !mt_summary_value(s, name, &v) || !isnan(v)) return NULL;
  if (s->requests == 0) return "no request was measured";
  if (s->ok == 0) return "no request completed";
  if (!strncmp(name, "ttft_", 5)) return "no completed request had a token";
  if (!strncmp(name, "tpot_", 5) || !strncmp(name, "itl_", 4))
    return "no completed request had two tokens or more";
  if (!(s->window_s > 0)) return "the requests span no time";
  return "no sample";
}

// One verdict per item of items[0..n) against s (and extra), named "CLS:KEY" when cls is
// not NULL; returns how many were written (<= cap).
static int verdicts_of(const scn_slo_item *items, int n_items, const char *cls,
                       const mt_summary *s, mt_extra_fn extra, void *ud, mt_verdict *out,
                       int cap) {
  int n = 0;
  for (int i = 0; i < n_items && i < SCN_MAX_SLO && n < cap; i++) {
    const scn_slo_item *it = &items[i];
    mt_verdict *v = &out[n++];
    memset(v, 0, sizeof *v);
    if (cls) snprintf(v->slo, sizeof v->slo, "%s:%s", cls, it->key);
    else snprintf(v->slo, sizeof v->slo, "%s", it->key);
    v->expected = it->limit;
    v->actual = NAN;
    char why[MT_NOTE_MAX - 16] = "";
    double a;
    if (mt_summary_value(s, it->key, &a)) {
      v->actual = a;
      const char *w = mt_summary_why(s, it->key);
      if (w) snprintf(why, sizeof why, "%s", w);
    } else if (extra && extra(ud, it->key, &a, why, sizeof why)) {
      v->actual = a;
    }
    if (isnan(v->actual))
      snprintf(v->note, sizeof v->note, "no data: %s", why[0] ? why : "not measured here");
    const mt_metric_info *m = mt_metric_find(it->key);
    if (m && m->dir == MT_LOWER_BETTER) {
      snprintf(v->op, sizeof v->op, "<=");
      v->pass = v->actual <= v->expected; // false when either is NaN
    } else if (m && m->dir == MT_HIGHER_BETTER) {
      snprintf(v->op, sizeof v->op, ">=");
      v->pass = v->actual >= v->expected;
    } else {
      // Not a metric an SLO may name (unknown or neutral): the parser refuses these; a
      // verdict that cannot be judged fails.
      snprintf(v->op, sizeof v->op, "?");
      v->pass = false;
    }
  }
  return n;
}

int mt_verdicts(const scn_slo *slo, const mt_summary *s, mt_extra_fn extra, void *ud,
                mt_verdict *out, int cap) {
  if (!slo || !out) return 0;
  return verdicts_of(slo->items, slo->n, NULL, s, extra, ud, out, cap);
}

int mt_class_verdicts(const scn_slo_class *c, const mt_summary *s, mt_verdict *out, int cap) {
  if (!c || !out) return 0;
  return verdicts_of(c->items, c->n, c->name, s, NULL, NULL, out, cap);
}
