// Quality delta between two weight versions (faults/quality.h): engine A greedy with its
// distributions kept, then engine B teacher-forced on A's tokens in one batch.
#include "faults/quality.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const double MAX_KEEP_BYTES = 512.0 * 1024 * 1024;

// What the on_logits hook fills: rows[slot * vocab ...] for the request whose engine id is
// ids[slot] at index `want` (A: every index below n_tokens; B: index 0 only).
typedef struct keep {
  const uint64_t *ids; // (n) engine ids in submission order (ascending)
  int n;
  int n_tokens;        // rows per request
  int vocab;
  float *rows;         // (n x n_tokens x vocab)
  bool *seen;          // (n x n_tokens)
} keep;

static int slot_of(const keep *k, uint64_t id) {
  int lo = 0, hi = k->n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (k->ids[mid] == id) return mid;
    if (k->ids[mid] < id) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

static void on_logits(void *ud, uint64_t req_id, int index, const float *logits, int vocab) {
  keep *k = ud;
  int s = slot_of(k, req_id);
  if (s < 0 || index < 0 || index >= k->n_tokens || vocab != k->vocab) return;
  size_t at = (size_t)s * (size_t)k->n_tokens + (size_t)index;
  memcpy(k->rows + at * (size_t)vocab, logits, (size_t)vocab * sizeof *logits);
  k->seen[at] = true;
}

double fq_kl_logits(const float *a, const float *b, int vocab) {
  double ma = -INFINITY, mb = -INFINITY;
  for (int v = 0; v < vocab; v++) {
    if (a[v] > ma) ma = a[v];
    if (b[v] > mb) mb = b[v];
  }
  double za = 0, zb = 0;
  for (int v = 0; v < vocab; v++) {
    za += exp((double)a[v] - ma);
    zb += exp((double)b[v] - mb);
  }
  double lza = log(za), lzb = log(zb), kl = 0;
  for (int v = 0; v < vocab; v++) {
    double la = (double)a[v] - ma - lza, lb = (double)b[v] - mb - lzb;
    double p = exp(la);
    if (p > 0) kl += p * (la - lb);
  }
  return kl > 0 ? kl : 0;
}

static int argmax(const float *x, int n) {
  int best = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[best]) best = i;
  return best;
}

// Builds an engine of cfg with the keep hook, submits the n requests (prompts p[i] of len[i],
// max_tokens each, greedy), steps until idle. ids[] gets the engine ids; tokens (n x
// max_tokens, may be NULL) the generated ids. `which` names the version in errors.
static sc_status run_engine(const engine_config *cfg, keep *k, const int32_t *const *p,
                            const int *len, int n, int max_tokens, uint64_t *ids, int32_t *tokens,
                            const char *which, sc_error *err) {
  engine_config c = *cfg;
  c.on_logits = on_logits;
  c.on_logits_ud = k;
  engine *e = NULL;
  sc_error e1 = {{0}};
  if (engine_new(&c, &e, &e1) != SC_OK)
    return sc_fail(err, SC_INVALID, "quality delta: the %s weights: %s", which, e1.msg);
  sc_status s = SC_OK;
  k->ids = ids;
  k->n = 0;
  for (int i = 0; i < n && s == SC_OK; i++) {
    engine_request q = {.prompt = p[i], .n_prompt = len[i], .max_tokens = max_tokens};
    s = engine_submit(e, &q, &ids[i], &e1);
    if (s == SC_OK) k->n = i + 1;
    if (s == SC_OK && i > 0 && ids[i] <= ids[i - 1])
      s = sc_fail(&e1, SC_INVALID, "engine ids are not increasing");
  }
  while (s == SC_OK && !engine_idle(e)) {
    engine_step_result res;
    s = engine_step(e, &res, &e1);
    for (int j = 0; s == SC_OK && j < res.n_events; j++) {
      const engine_event *ev = &res.events[j];
      int slot = slot_of(k, ev->req_id);
      if (ev->kind == ENGINE_EV_FAILED)
        s = sc_fail(&e1, ev->status, "a request failed (%s)", sc_status_name(ev->status));
      else if (ev->kind == ENGINE_EV_TOKEN && tokens && slot >= 0 && ev->index < max_tokens)
        tokens[(size_t)slot * (size_t)max_tokens + (size_t)ev->index] = ev->token;
    }
  }
  engine_free(e);
  if (s != SC_OK) return sc_fail(err, s, "quality delta: the %s weights: %s", which, e1.msg);
  return SC_OK;
}

sc_status fq_compare(const engine_config *a, const engine_config *b, const int32_t *const *prompts,
                     const int *n_prompt, int n_prompts, int n_tokens, fq_result *out,
                     sc_error *err) {
  if (n_prompts < 1 || n_tokens < 1)
    return sc_fail(err, SC_INVALID, "quality delta: needs at least one prompt and one token, got "
                   "%d and %d", n_prompts, n_tokens);
  if ((a->backend && !strcmp(a->backend, "sim")) || (b->backend && !strcmp(b->backend, "sim")))
    return sc_fail(err, SC_INVALID, "quality delta needs a real backend: simulated replicas "
                   "produce no logits");
  int vocab = a->model.vocab_size;
  if (b->model.vocab_size != vocab)
    return sc_fail(err, SC_INVALID, "the two weight versions have different vocabularies (%d vs "
                   "%d): no token-level comparison", vocab, b->model.vocab_size);
  int m = n_prompts * n_tokens;
  if ((double)m * vocab * sizeof(float) > MAX_KEEP_BYTES)
    return sc_fail(err, SC_INVALID, "quality delta: %d positions x %d logits exceed 512 MiB", m,
                   vocab);
  keep ka = {.n_tokens = n_tokens, .vocab = vocab}, kb = {.n_tokens = 1, .vocab = vocab};
  ka.rows = malloc((size_t)m * (size_t)vocab * sizeof *ka.rows);
  kb.rows = malloc((size_t)m * (size_t)vocab * sizeof *kb.rows);
  ka.seen = calloc((size_t)m, sizeof *ka.seen);
  kb.seen = calloc((size_t)m, sizeof *kb.seen);
  uint64_t *ids = calloc((size_t)m, sizeof *ids);
  int32_t *toks = calloc((size_t)m, sizeof *toks);
  const int32_t **bp = calloc((size_t)m, sizeof *bp);
  int *bl = calloc((size_t)m, sizeof *bl);
  int32_t *forced = NULL;
  size_t forced_len = 0;
  for (int i = 0; i < n_prompts; i++)
    forced_len += (size_t)n_tokens * (size_t)(n_prompt[i] + n_tokens);
  forced = malloc(forced_len * sizeof *forced);
  sc_status s = SC_OK;
  if (!ka.rows || !kb.rows || !ka.seen || !kb.seen || !ids || !toks || !bp || !bl || !forced) {
    s = sc_fail(err, SC_OOM, "quality delta: out of memory");
    goto out;
  }
  // A: greedy, every position's distribution kept
  s = run_engine(a, &ka, prompts, n_prompt, n_prompts, n_tokens, ids, toks, "old", err);
  if (s != SC_OK) goto out;
  // B: prompt i + A's first j tokens, one token each
  size_t off = 0;
  for (int i = 0; i < n_prompts; i++)
    for (int j = 0; j < n_tokens; j++) {
      int32_t *p = forced + off;
      memcpy(p, prompts[i], (size_t)n_prompt[i] * sizeof *p);
      memcpy(p + n_prompt[i], toks + (size_t)i * (size_t)n_tokens, (size_t)j * sizeof *p);
      bp[i * n_tokens + j] = p;
      bl[i * n_tokens + j] = n_prompt[i] + j;
      off += (size_t)(n_prompt[i] + j);
    }
  s = run_engine(b, &kb, bp, bl, m, 1, ids, NULL, "new", err);
  if (s != SC_OK) goto out;
  fq_result r = {.prompts = n_prompts, .kl_max = 0};
  double kl_sum = 0;
  for (int x = 0; x < m; x++) {
    if (!ka.seen[x] || !kb.seen[x]) {
      s = sc_fail(err, SC_INVALID, "quality delta: position %d of prompt %d produced no logits",
                  x % n_tokens, x / n_tokens);
      goto out;
    }
    const float *la = ka.rows + (size_t)x * (size_t)vocab;
    const float *lb = kb.rows + (size_t)x * (size_t)vocab;
    r.agree += argmax(lb, vocab) == toks[x];
    double kl = fq_kl_logits(la, lb, vocab);
    kl_sum += kl;
    if (kl > r.kl_max) r.kl_max = kl;
    r.positions++;
  }
  r.agreement = r.positions ? (double)r.agree / r.positions : NAN;
  r.kl_mean = r.positions ? kl_sum / r.positions : NAN;
  *out = r;
out:
  free(ka.rows);
  free(kb.rows);
  free(ka.seen);
  free(kb.seen);
  free(ids);
  free(toks);
  free(bp);
  free(bl);
  free(forced);
  return s;
}
