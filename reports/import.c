// Importing a published trace as a stored run (see import.h): parse and check every request
// first, then write the run, its one deployment and phase, the request and token rows and the
// metrics in one go, so a malformed trace stores nothing.
#include "reports/import.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reports/metrics.h"

// One request as the trace gives it, in ns from the first arrival.
typedef struct imp_req {
  int prompt, output;
  uint64_t arrival, first, last; // first == 0 with ok false: failed, no tokens
  bool ok;
  const json_t *itls; // vllm-bench: the inter-token gaps (s), or NULL
} imp_req;

typedef struct imp {
  imp_req *v;
  int n, cap;
  json_t *doc; // vllm-bench: the whole document (itls point into it)
  char model[256];
} imp;

static sc_status push(imp *t, const imp_req *r) {
  if (t->n == t->cap) {
    int cap = t->cap ? t->cap * 2 : 256;
    imp_req *v = realloc(t->v, (size_t)cap * sizeof *v);
    if (!v) return SC_OOM;
    t->v = v;
    t->cap = cap;
  }
  t->v[t->n++] = *r;
  return SC_OK;
}

static uint64_t ns_of(double s) { return s > 0 ? (uint64_t)(s * 1e9 + 0.5) : 0; }

// --- llmservingsim: one object per line

static sc_status num_key(const json_t *o, const char *path, int line, const char *k, double *out,
                         sc_error *err) {
  const json_t *v = json_object_get(o, k);
  if (!v) return sc_fail(err, SC_INVALID, "%s:%d: key '%s': missing", path, line, k);
  if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < 0)
    return sc_fail(err, SC_INVALID, "%s:%d: key '%s': expected a number >= 0", path, line, k);
  *out = json_number_value(v);
  return SC_OK;
}

static sc_status int_key(const json_t *o, const char *path, int line, const char *k, int *out,
                         sc_error *err) {
  const json_t *v = json_object_get(o, k);
  if (!v) return sc_fail(err, SC_INVALID, "%s:%d: key '%s': missing", path, line, k);
  if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 10000000)
    return sc_fail(err, SC_INVALID, "%s:%d: key '%s': expected an integer >= 1", path, line, k);
  *out = (int)json_integer_value(v);
  return SC_OK;
}

static sc_status read_jsonl(FILE *f, const char *path, imp *t, sc_error *err) {
  char *buf = NULL;
  size_t cap = 0;
  ssize_t len;
  int line = 0;
  double t0 = -1;
  sc_status st = SC_OK;
  while (st == SC_OK && (len = getline(&buf, &cap, f)) >= 0) {
    line++;
    size_t i = 0;
    while (i < (size_t)len && strchr(" \t\r\n", buf[i])) i++;
    if (i == (size_t)len) continue;
    json_error_t je;
    json_t *o = json_loadb(buf, (size_t)len, 0, &je);
    if (!o || !json_is_object(o)) {
      st = sc_fail(err, SC_INVALID, "%s:%d: expected one JSON object per line%s%s", path, line,
                   o ? "" : ": ", o ? "" : je.text);
      json_decref(o);
      break;
    }
    imp_req r = {.ok = true};
    double q = 0, ft = 0, lt = 0;
    st = int_key(o, path, line, "input_toks", &r.prompt, err);
    if (st == SC_OK) st = int_key(o, path, line, "output_toks", &r.output, err);
    if (st == SC_OK) st = num_key(o, path, line, "queued_ts", &q, err);
    if (st == SC_OK) st = num_key(o, path, line, "first_token_ts", &ft, err);
    if (st == SC_OK) st = num_key(o, path, line, "last_token_ts", &lt, err);
    if (st == SC_OK && ft < q)
      st = sc_fail(err, SC_INVALID, "%s:%d: key 'first_token_ts': before queued_ts", path, line);
    if (st == SC_OK && lt < ft)
      st = sc_fail(err, SC_INVALID, "%s:%d: key 'last_token_ts': before first_token_ts", path,
                   line);
    if (st == SC_OK && t0 < 0) t0 = q;
    if (st == SC_OK && q < t0)
      st = sc_fail(err, SC_INVALID, "%s:%d: key 'queued_ts': before the first request's", path,
                   line);
    if (st == SC_OK) {
      r.arrival = ns_of(q - t0);
      r.first = ns_of(ft - t0);
      r.last = ns_of(lt - t0);
      if (push(t, &r) != SC_OK) st = sc_fail(err, SC_OOM, "%s:%d: out of memory", path, line);
    }
    json_decref(o);
  }
  free(buf);
  if (st == SC_OK && t->n == 0)
    st = sc_fail(err, SC_INVALID, "%s: no requests (expected one JSON object per line)", path);
  return st;
}

// --- vllm-bench: one object with parallel arrays

static sc_status bench_array(const json_t *doc, const char *path, const char *k, size_t n,
                             const json_t **out, sc_error *err) {
  const json_t *a = json_object_get(doc, k);
  if (!json_is_array(a))
    return sc_fail(err, SC_INVALID, "%s: key '%s': expected a list (vllm bench serve "
                   "--save-result --save-detailed writes it)", path, k);
  if (n && json_array_size(a) != n)
    return sc_fail(err, SC_INVALID, "%s: key '%s': expected %zu entries (as input_lens), got %zu",
                   path, k, n, json_array_size(a));
  *out = a;
  return SC_OK;
}

static sc_status read_bench(json_t *doc, const char *path, imp *t, char *assumed, size_t acap,
                            sc_error *err) {
  const json_t *in = NULL, *outl = NULL, *ttft = NULL, *itls = NULL;
  SC_TRY(bench_array(doc, path, "input_lens", 0, &in, err));
  size_t n = json_array_size(in);
  if (n == 0) return sc_fail(err, SC_INVALID, "%s: key 'input_lens': no requests", path);
  SC_TRY(bench_array(doc, path, "output_lens", n, &outl, err));
  SC_TRY(bench_array(doc, path, "ttfts", n, &ttft, err));
  SC_TRY(bench_array(doc, path, "itls", n, &itls, err));
  const json_t *rate = json_object_get(doc, "request_rate");
  double gap = 0;
  if (json_is_number(rate) && json_number_value(rate) > 0 && isfinite(json_number_value(rate))) {
    gap = 1 / json_number_value(rate);
    snprintf(assumed, acap, "request_rate %g: the file has no arrival times; request i assumed "
             "to arrive at i / %g s (evenly spaced, not the benchmark's own draw)",
             json_number_value(rate), json_number_value(rate));
  } else {
    snprintf(assumed, acap, "request_rate inf: every request arrives at 0");
  }
  const json_t *m = json_object_get(doc, "model_id");
  if (json_is_string(m)) snprintf(t->model, sizeof t->model, "%s", json_string_value(m));
  for (size_t i = 0; i < n; i++) {
    const json_t *a = json_array_get(in, i), *b = json_array_get(outl, i);
    const json_t *c = json_array_get(ttft, i), *d = json_array_get(itls, i);
    if (!json_is_integer(a) || json_integer_value(a) < 1)
      return sc_fail(err, SC_INVALID, "%s: key 'input_lens'[%zu]: expected an integer >= 1", path,
                     i);
    if (!json_is_integer(b) || json_integer_value(b) < 0)
      return sc_fail(err, SC_INVALID, "%s: key 'output_lens'[%zu]: expected an integer >= 0",
                     path, i);
    if (!json_is_number(c) || !(json_number_value(c) >= 0))
      return sc_fail(err, SC_INVALID, "%s: key 'ttfts'[%zu]: expected seconds >= 0", path, i);
    if (!json_is_array(d))
      return sc_fail(err, SC_INVALID, "%s: key 'itls'[%zu]: expected a list of seconds", path, i);
    for (size_t j = 0; j < json_array_size(d); j++)
      if (!json_is_number(json_array_get(d, j)) || !(json_number_value(json_array_get(d, j)) >= 0))
        return sc_fail(err, SC_INVALID, "%s: key 'itls'[%zu][%zu]: expected seconds >= 0", path,
                       i, j);
    imp_req r = {.prompt = (int)json_integer_value(a), .output = (int)json_integer_value(b),
                 .arrival = ns_of(gap * (double)i), .itls = d};
    r.ok = r.output > 0 && json_number_value(c) > 0;
    if (r.ok) {
      double sum = 0;
      for (size_t j = 0; j < json_array_size(d); j++) sum += json_number_value(json_array_get(d, j));
      r.first = r.arrival + ns_of(json_number_value(c));
      r.last = r.first + ns_of(sum);
    }
    if (push(t, &r) != SC_OK) return sc_fail(err, SC_OOM, "%s: out of memory", path);
  }
  return SC_OK;
}

// --- vllm-latency: one batch's latency

static sc_status read_latency(json_t *doc, const char *path, const import_options *o, imp *t,
                              char *assumed, size_t acap, sc_error *err) {
  const json_t *v = json_object_get(doc, "avg_latency");
  if (!json_is_number(v) || !(json_number_value(v) > 0) || !isfinite(json_number_value(v)))
    return sc_fail(err, SC_INVALID, "%s: key 'avg_latency': expected seconds > 0", path);
  if (!o || o->batch < 1 || o->input_len < 1 || o->output_len < 1)
    return sc_fail(err, SC_INVALID, "%s: vLLM's benchmark_latency output has no lengths: give "
                   "--batch-size, --input-len and --output-len", path);
  uint64_t end = ns_of(json_number_value(v));
  for (int i = 0; i < o->batch; i++) {
    imp_req r = {.prompt = o->input_len, .output = o->output_len, .arrival = 0, .first = end,
                 .last = end, .ok = true};
    if (push(t, &r) != SC_OK) return sc_fail(err, SC_OOM, "%s: out of memory", path);
  }
  snprintf(assumed, acap, "a batch of %d requests of %d + %d tokens, all at 0, each finishing at "
           "avg_latency; first tokens not measured (E2E only)", o->batch, o->input_len,
           o->output_len);
  return SC_OK;
}

// --- writing

typedef struct emit_ctx {
  store *db;
  int64_t run, dep, phase;
  sc_status st;
  sc_error *err;
} emit_ctx;

static void emit(void *ud, const char *name, double v) {
  emit_ctx *c = ud;
  if (c->st == SC_OK) c->st = store_metric_add(c->db, c->run, c->dep, c->phase, NULL, name, v, c->err);
}

// Token times of r into tok[0..r->output): the measured gaps when the trace has one per token,
// else evenly spaced from first to last.
static void token_times(const imp_req *r, uint64_t *tok) {
  int n = r->output;
  bool exact = r->itls && (int)json_array_size(r->itls) == n - 1;
  double t = (double)r->first;
  for (int j = 0; j < n; j++) {
    if (j == 0) tok[j] = r->first;
    else if (exact) tok[j] = (uint64_t)(t += json_number_value(json_array_get(r->itls, j - 1)) * 1e9);
    else tok[j] = r->first + (uint64_t)((double)(r->last - r->first) * j / (n - 1));
  }
  if (exact && n > 1) tok[n - 1] = tok[n - 1] > r->last ? tok[n - 1] : r->last;
}

static sc_status write_run(store *db, const char *path, const char *name, const char *model,
                           const import_options *o, imp *t, import_result *res, sc_error *err) {
  char config[1024];
  json_t *cfg = json_pack("{s:s, s:s, s:s}", "imported_from", path, "format", res->format,
                          "assumed", res->assumed);
  int tp = o && o->tp > 0 ? o->tp : 1, pp = o && o->pp > 0 ? o->pp : 1;
  int dp = o && o->dp > 0 ? o->dp : 1;
  if (cfg && o && (o->tp || o->pp || o->dp)) { // the layout given: calibrate replays it there
    char lay[64];
    snprintf(lay, sizeof lay, "tp%d-pp%d-dp%d", tp, pp, dp);
    json_object_set_new(cfg, "layout", json_string(lay));
  }
  if (cfg && !strcmp(res->format, "vllm-latency"))
    json_object_set_new(cfg, "e2e_only", json_true());
  char *cs = cfg ? json_dumps(cfg, JSON_COMPACT) : NULL;
  snprintf(config, sizeof config, "%s", cs ? cs : "{}");
  free(cs);
  json_decref(cfg);
  store_run run = {.scenario = name, .scenario_path = path, .scenario_text = "",
                   .mode = "real", .backend = "import", .model = model, .config = config};
  int64_t dep = 0, phase = 0;
  uint64_t end = 0;
  for (int i = 0; i < t->n; i++) {
    uint64_t e = t->v[i].ok ? t->v[i].last : t->v[i].arrival;
    if (e > end) end = e;
  }
  SC_TRY(store_run_begin(db, &run, &res->run_id, err));
  SC_TRY(store_deployment_begin(db, &(store_deployment){.run_id = res->run_id, .label = "imported",
                                                        .tp = tp, .pp = pp, .dp = dp},
                                &dep, err));
  SC_TRY(store_phase_begin(db, &(store_phase){.run_id = res->run_id, .deployment_id = dep,
                                              .name = "trace", .kind = "rate",
                                              .arrival = "trace"},
                           &phase, err));
  int most = 1;
  for (int i = 0; i < t->n; i++) most = t->v[i].output > most ? t->v[i].output : most;
  uint64_t *tok = malloc((size_t)t->n * most * sizeof *tok);
  mt_request *mr = calloc((size_t)t->n, sizeof *mr);
  sc_status st = tok && mr ? SC_OK : sc_fail(err, SC_OOM, "import: out of memory");
  for (int i = 0; i < t->n && st == SC_OK; i++) {
    const imp_req *r = &t->v[i];
    uint64_t *rt = tok + (size_t)i * most;
    int nt = r->ok ? r->output : 0;
    if (r->ok) token_times(r, rt);
    store_request q = {.run_id = res->run_id, .deployment_id = dep, .phase_id = phase,
                       .seq = i, .class_name = "trace", .replica = 0, .prompt_tokens = r->prompt,
                       .max_tokens = r->output > 0 ? r->output : 1, .output_tokens = nt,
                       .arrival_ns = r->arrival, .first_token_ns = r->first,
                       .finish_ns = r->ok ? r->last : r->arrival, .has_first_token = r->ok,
                       .has_finish = true, .status = r->ok ? "ok" : "failed",
                       .reason = r->ok ? NULL : "imported_failure"};
    st = store_request_add(db, &q, rt, nt, NULL, err);
    mr[i] = (mt_request){.arrival_ns = r->arrival, .finish_ns = q.finish_ns, .token_ns = rt,
                         .n_tokens = nt, .prompt_tokens = r->prompt,
                         .status = r->ok ? REQ_OK : REQ_FAILED, .reason = q.reason};
  }
  mt_summary sum;
  emit_ctx ec = {.db = db, .run = res->run_id, .dep = dep, .phase = phase, .err = err};
  if (st == SC_OK) st = mt_summarize(mr, t->n, -1, NULL, 0, 0, &sum);
  if (st == SC_OK) {
    mt_summary_each(&sum, emit, &ec);
    ec.phase = 0;
    mt_summary_each(&sum, emit, &ec);
    st = ec.st;
  }
  free(tok);
  free(mr);
  if (st == SC_OK) st = store_phase_end(db, phase, end, err);
  if (st == SC_OK) st = store_deployment_end(db, dep, "complete", NULL, end, err);
  if (st == SC_OK) st = store_run_end(db, res->run_id, "complete", NULL, NULL, end, err);
  return st;
}

sc_status import_trace(store *db, const char *path, const char *name, const char *model,
                       const import_options *o, import_result *out, sc_error *err) {
  memset(out, 0, sizeof *out);
  FILE *f = fopen(path, "rb");
  if (!f) return sc_fail(err, SC_IO, "%s: cannot read the trace: %s", path, strerror(errno));
  imp t = {0};
  // one JSON document (vllm-bench) or one object per line (llmservingsim)
  json_error_t je;
  t.doc = json_loadf(f, 0, &je);
  sc_status st;
  if (t.doc && json_is_object(t.doc) && json_object_get(t.doc, "input_lens")) {
    snprintf(out->format, sizeof out->format, "vllm-bench");
    st = read_bench(t.doc, path, &t, out->assumed, sizeof out->assumed, err);
  } else if (t.doc && json_is_object(t.doc) && json_object_get(t.doc, "avg_latency")) {
    snprintf(out->format, sizeof out->format, "vllm-latency");
    st = read_latency(t.doc, path, o, &t, out->assumed, sizeof out->assumed, err);
  } else {
    snprintf(out->format, sizeof out->format, "llmservingsim");
    rewind(f);
    st = read_jsonl(f, path, &t, err);
  }
  fclose(f);
  if (st == SC_OK) {
    char base[256];
    const char *b = strrchr(path, '/');
    snprintf(base, sizeof base, "import:%s", b ? b + 1 : path);
    out->requests = t.n;
    st = write_run(db, path, name ? name : base,
                   model ? model : t.model[0] ? t.model : "unknown", o, &t, out, err);
  }
  json_decref(t.doc);
  free(t.v);
  return st;
}
