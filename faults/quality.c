// Quality delta between two weight versions (faults/quality.h): engine A greedy with every
// next-token distribution kept, then engine B teacher-forced on A's tokens in one batch, each
// of B's rows compared with A's as it comes out of B's on_logits hook (so only A's rows are
// kept). Which prompts and versions, and where the numbers go, are the hot swap's
// (faults/hot_swap.c).
#include "faults/quality.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const double MAX_KEEP_BYTES = 512.0 * 1024 * 1024; // A's kept logits at most

// --- the on_logits hook

// What the hook of one engine sees. The engine's request ids are mapped back to submission
// slots (A: slot = prompt, B: slot = position) through ids[], ascending as the engine hands
// them out.
typedef struct fq_hook {
  const uint64_t *ids; // (n) engine ids of the requests submitted so far
  int n;
  int vocab;
  int rows_per_req;    // A: n_tokens (one row per generated token); B: 1
  float *rows;         // (positions x vocab) A's logits: A writes them, B reads them
  bool *seen;          // (positions) a row arrived for the position
  // B only (NULL for A): the comparison, filled as B's rows arrive
  const int32_t *greedy; // (positions) A's greedy tokens
  double *kl;            // (positions) KL(P_A || P_B), nats
  bool *agree;           // (positions) B's argmax == A's token
} fq_hook;

static int slot_of(const fq_hook *h, uint64_t id) {
  int lo = 0, hi = h->n - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2;
    if (h->ids[mid] == id) return mid;
    if (h->ids[mid] < id) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

// The sampler's greedy pick: the largest logit, ties to the lowest id (engine/sampler.h).
static int32_t argmax(const float *x, int n) {
  int32_t best = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[best]) best = i;
  return best;
}

static void on_logits(void *ud, uint64_t req_id, int index, const float *logits, int vocab) {
  fq_hook *h = ud;
  int s = slot_of(h, req_id);
  if (s < 0 || index < 0 || index >= h->rows_per_req || vocab != h->vocab) return;
  size_t x = (size_t)s * (size_t)h->rows_per_req + (size_t)index; // the position
  float *row = h->rows + x * (size_t)vocab;
  if (h->kl) { // B
    h->kl[x] = fq_kl_logits(row, logits, vocab);
    h->agree[x] = argmax(logits, vocab) == h->greedy[x];
  } else { // A
    memcpy(row, logits, (size_t)vocab * sizeof *logits);
  }
  h->seen[x] = true;
}

double fq_kl_logits(const float *a, const float *b, int vocab) {
  double ma = -INFINITY, mb = -INFINITY;
  for (int v = 0; v < vocab; v++) {
    if (a[v] > ma) ma = a[v];
    if (b[v] > mb) mb = b[v];
  }
  double za = 0, zb = 0; // sum of exp(logit - max)
  for (int v = 0; v < vocab; v++) {
    za += exp((double)a[v] - ma);
    zb += exp((double)b[v] - mb);
  }
  double lza = log(za), lzb = log(zb), kl = 0;
  for (int v = 0; v < vocab; v++) {
    double la = (double)a[v] - ma - lza, lb = (double)b[v] - mb - lzb; // log-softmax
    double p = exp(la);
    if (p > 0) kl += p * (la - lb);
  }
  return kl > 0 ? kl : 0; // rounding can leave -1e-17 for equal distributions
}

// --- running one version

// Builds an engine of cfg with the hook h, submits the n requests (prompt p[i] of len[i]
// tokens, max_tokens each, greedy, EOS not stopping them), steps until idle and frees it.
// ids (n) gets the engine ids; tokens (n x max_tokens, may be NULL) the generated ids. On
// error the engine's status comes back with its message prefixed by `which` version.
static sc_status run_engine(const engine_config *cfg, fq_hook *h, const int32_t *const *p,
                            const int *len, int n, int max_tokens, uint64_t *ids, int32_t *tokens,
                            const char *which, sc_error *err) {
  engine_config c = *cfg;
  c.on_logits = on_logits;
  c.on_logits_ud = h;
  engine *e = NULL;
  sc_error e1 = {{0}};
  sc_status s = engine_new(&c, &e, &e1);
  h->ids = ids;
  h->n = 0;
  for (int i = 0; i < n && s == SC_OK; i++) {
    // sampling {0}: temperature 0, greedy
    engine_request q = {.prompt = p[i], .n_prompt = len[i], .max_tokens = max_tokens};
    s = engine_submit(e, &q, &ids[i], &e1);
    if (s == SC_OK) h->n = i + 1;
    if (s == SC_OK && i > 0 && ids[i] <= ids[i - 1])
      s = sc_fail(&e1, SC_INVALID, "engine ids are not increasing");
  }
  while (s == SC_OK && !engine_idle(e)) {
    engine_step_result res;
    s = engine_step(e, &res, &e1);
    for (int j = 0; s == SC_OK && j < res.n_events; j++) {
      const engine_event *ev = &res.events[j];
      int slot = slot_of(h, ev->req_id);
      if (ev->kind == ENGINE_EV_FAILED)
        s = sc_fail(&e1, ev->status, "a request failed (%s)", sc_status_name(ev->status));
      else if (ev->kind == ENGINE_EV_TOKEN && tokens && slot >= 0 && ev->index >= 0 &&
               ev->index < max_tokens)
        tokens[(size_t)slot * (size_t)max_tokens + (size_t)ev->index] = ev->token;
    }
  }
  engine_free(e);
  h->n = 0;
  if (s != SC_OK)
    return sc_fail(err, s, "quality delta: the %s weights: %s", which,
                   e1.msg[0] ? e1.msg : sc_status_name(s));
  return SC_OK;
}

// --- the comparison

static bool is_sim(const engine_config *c) { return c->backend && !strcmp(c->backend, "sim"); }

sc_status fq_compare(const engine_config *a, const engine_config *b, const int32_t *const *prompts,
                     const int *n_prompt, int n_prompts, int n_tokens, fq_result *out,
                     sc_error *err) {
  if (n_prompts < 1 || n_tokens < 1)
    return sc_fail(err, SC_INVALID, "quality delta: needs at least one prompt and one token, got "
                   "%d prompts and %d tokens", n_prompts, n_tokens);
  if (is_sim(a) || is_sim(b))
    return sc_fail(err, SC_INVALID, "quality delta needs a real backend: simulated replicas "
                   "produce no logits");
  int vocab = a->model.vocab_size;
  if (b->model.vocab_size != vocab)
    return sc_fail(err, SC_INVALID, "the two weight versions have different vocabularies (%d vs "
                   "%d): no token-level comparison", vocab, b->model.vocab_size);
  int ctx = a->model.max_seq_len < b->model.max_seq_len ? a->model.max_seq_len
                                                        : b->model.max_seq_len;
  size_t forced_len = 0; // B's prompts, all together
  for (int i = 0; i < n_prompts; i++) {
    if (!prompts[i] || n_prompt[i] < 1)
      return sc_fail(err, SC_INVALID, "quality delta: prompt %d is empty", i);
    // A's last token is generated from n_prompt + n_tokens - 1 tokens, which must leave room
    if (n_prompt[i] > ctx - n_tokens)
      return sc_fail(err, SC_INVALID, "quality delta: prompt %d (%d tokens) and %d generated "
                     "tokens exceed the context of %d tokens", i, n_prompt[i], n_tokens, ctx);
    forced_len += (size_t)n_tokens * (size_t)n_prompt[i] +
                  (size_t)n_tokens * (size_t)(n_tokens - 1) / 2;
  }
  double keep_bytes = (double)n_prompts * n_tokens * vocab * sizeof(float);
  if (keep_bytes > MAX_KEEP_BYTES)
    return sc_fail(err, SC_INVALID, "quality delta: %d prompts x %d tokens x %d logits of %zu "
                   "bytes take %.0f MiB, more than 512 MiB", n_prompts, n_tokens, vocab,
                   sizeof(float), keep_bytes / (1024.0 * 1024.0));
  int m = n_prompts * n_tokens; // positions (fits: m * vocab * 4 <= 512 MiB)
  fq_hook ha = {.vocab = vocab, .rows_per_req = n_tokens};
  ha.rows = malloc((size_t)m * (size_t)vocab * sizeof *ha.rows);
  ha.seen = calloc((size_t)m, sizeof *ha.seen);
  fq_hook hb = {.vocab = vocab, .rows_per_req = 1, .rows = ha.rows};
  hb.seen = calloc((size_t)m, sizeof *hb.seen);
  hb.kl = calloc((size_t)m, sizeof *hb.kl);
  hb.agree = calloc((size_t)m, sizeof *hb.agree);
  uint64_t *ids = calloc((size_t)m, sizeof *ids);         // (m) engine ids
  int32_t *toks = calloc((size_t)m, sizeof *toks);        // (n_prompts x n_tokens) A's tokens
  const int32_t **bp = calloc((size_t)m, sizeof *bp);     // (m) B's prompts, into forced
  int *bl = calloc((size_t)m, sizeof *bl);                // (m) their lengths
  int32_t *forced = malloc(forced_len * sizeof *forced);  // (forced_len) token ids
  hb.greedy = toks;
  sc_status s = SC_OK;
  if (!ha.rows || !ha.seen || !hb.seen || !hb.kl || !hb.agree || !ids || !toks || !bp || !bl ||
      !forced) {
    s = sc_fail(err, SC_OOM, "quality delta: out of memory for %d positions of %d logits", m,
                vocab);
    goto out;
  }
  // A: greedy, every position's logits kept
  s = run_engine(a, &ha, prompts, n_prompt, n_prompts, n_tokens, ids, toks, "old", err);
  if (s != SC_OK) goto out;
  // B: prompt i followed by A's first j tokens, one token each, compared in the hook
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
  s = run_engine(b, &hb, bp, bl, m, 1, ids, NULL, "new", err);
  if (s != SC_OK) goto out;
  fq_result r = {.prompts = n_prompts};
  double kl_sum = 0;
  for (int x = 0; x < m; x++) {
    if (!ha.seen[x] || !hb.seen[x]) {
      s = sc_fail(err, SC_INVALID, "quality delta: the %s weights gave no logits at position %d "
                  "of prompt %d", ha.seen[x] ? "new" : "old", x % n_tokens, x / n_tokens);
      goto out;
    }
    r.agree += hb.agree[x];
    kl_sum += hb.kl[x];
    if (hb.kl[x] > r.kl_max) r.kl_max = hb.kl[x];
    r.positions++;
  }
  r.agreement = (double)r.agree / r.positions; // positions == m >= 1
  r.kl_mean = kl_sum / r.positions;
  *out = r;
out:
  free(ha.rows);
  free(ha.seen);
  free(hb.seen);
  free(hb.kl);
  free(hb.agree);
  free(ids);
  free(toks);
  free(bp);
  free(bl);
  free(forced);
  return s;
}
