// The quality delta through a serving replica (faults/quality.h, the second half): requests
// sent to an idle replica and driven here until they end, for targets whose weights only their
// server holds. docs/metrics.md, "Quality delta after a hot swap".
#include <math.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "faults/quality.h"
#include "kernels/clock.h"

// Waits up to ms for r's events (its wait_fd, else a short sleep).
static void await(replica *r, int ms) {
  int fd = replica_wait_fd(r);
  if (fd >= 0) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    (void)poll(&p, 1, ms);
    return;
  }
  struct timespec ts = {0, 1000000L};
  nanosleep(&ts, NULL);
}

// Runs reqs[0..n) on r at once (keys FQ_KEY0 + i): request i's token ids go to tok[i * cap ..]
// (cap at most) and their count to got[i]. Every request ends before it returns: on a failure,
// a server without token ids or the deadline, the others are cancelled and their ends awaited.
static sc_status drive(replica *r, const engine_request *reqs, int n, int cap, int32_t *tok,
                       int *got, uint64_t timeout_ns, sc_error *err) {
  bool *ended = calloc((size_t)n, sizeof *ended);
  if (!ended) return sc_fail(err, SC_OOM, "quality: out of memory");
  sc_status st = SC_OK;
  int submitted = 0, left = 0;
  for (; submitted < n; submitted++) {
    got[submitted] = 0;
    st = replica_submit(r, FQ_KEY0 + (uint64_t)submitted, &reqs[submitted], err);
    if (st != SC_OK) break;
    left++;
  }
  uint64_t deadline = sc_monotonic_ns() + timeout_ns, give_up = 0;
  replica_event ev[64];
  while (left > 0) {
    int k = replica_poll(r, ev, 64);
    for (int e = 0; e < k; e++) {
      if (ev[e].key < FQ_KEY0 || ev[e].key >= FQ_KEY0 + (uint64_t)submitted) continue;
      int i = (int)(ev[e].key - FQ_KEY0);
      if (ended[i]) continue;
      if (ev[e].kind == REPLICA_EV_TOKEN) {
        if (ev[e].token < 0 && st == SC_OK)
          st = sc_fail(err, SC_INVALID,
                       "the server sends no token ids (shardcheck serve does; vLLM with "
                       "extra_body {return_token_ids: true})");
        else if (ev[e].index >= 0 && ev[e].index < cap) {
          tok[(size_t)i * (size_t)cap + (size_t)ev[e].index] = ev[e].token;
          if (ev[e].index + 1 > got[i]) got[i] = ev[e].index + 1;
        }
      } else if (ev[e].kind == REPLICA_EV_FINISHED || ev[e].kind == REPLICA_EV_FAILED) {
        ended[i] = true;
        left--;
        if (ev[e].kind == REPLICA_EV_FAILED && st == SC_OK)
          st = sc_fail(err, SC_IO, "a request failed (%s): %.300s",
                       replica_failure_name(ev[e].failure),
                       ev[e].what ? ev[e].what : replica_error(r));
      }
    }
    if (k > 0) continue;
    uint64_t now = sc_monotonic_ns();
    if (st == SC_OK && now > deadline)
      st = sc_fail(err, SC_TIMEOUT, "%d of %d requests still running after %.0f s", left, n,
                   (double)timeout_ns / 1e9);
    if (st != SC_OK && !give_up) { // stop the rest; a replica that never answers is let go
      for (int i = 0; i < submitted; i++)
        if (!ended[i]) replica_cancel(r, FQ_KEY0 + (uint64_t)i);
      give_up = now + UINT64_C(5000000000);
    }
    if (give_up && now > give_up) break;
    if (replica_health_get(r) == REPLICA_DEAD && st == SC_OK)
      st = sc_fail(err, SC_IO, "the replica died: %.300s", replica_error(r));
    await(r, 20);
  }
  free(ended);
  return st;
}

static engine_request greedy(const int32_t *prompt, int n, int max_tokens) {
  return (engine_request){.prompt = prompt,
                          .n_prompt = n,
                          .max_tokens = max_tokens,
                          .sampling = {.temperature = 0, .top_p = 1}};
}

void fq_greedy_free(fq_greedy *g) {
  if (!g) return;
  free(g->tok);
  free(g->n);
  *g = (fq_greedy){0};
}

sc_status fq_replica_greedy(replica *r, const int32_t *const *prompts, const int *n_prompt,
                            int n_prompts, int n_tokens, uint64_t timeout_ns, fq_greedy *out,
                            sc_error *err) {
  *out = (fq_greedy){0};
  if (n_prompts < 1 || n_tokens < 1)
    return sc_fail(err, SC_INVALID, "quality: no prompts or no tokens to compare");
  fq_greedy g = {.n_prompts = n_prompts, .n_tokens = n_tokens};
  g.tok = calloc((size_t)n_prompts * (size_t)n_tokens, sizeof *g.tok);
  g.n = calloc((size_t)n_prompts, sizeof *g.n);
  engine_request *q = calloc((size_t)n_prompts, sizeof *q);
  sc_status st = SC_OK;
  if (!g.tok || !g.n || !q) st = sc_fail(err, SC_OOM, "quality: out of memory");
  for (int i = 0; i < n_prompts && st == SC_OK; i++)
    q[i] = greedy(prompts[i], n_prompt[i], n_tokens);
  if (st == SC_OK) st = drive(r, q, n_prompts, n_tokens, g.tok, g.n, timeout_ns, err);
  free(q);
  if (st != SC_OK) {
    fq_greedy_free(&g);
    return st;
  }
  *out = g;
  return SC_OK;
}

sc_status fq_replica_agreement(replica *r, const fq_greedy *a, const int32_t *const *prompts,
                               const int *n_prompt, uint64_t timeout_ns, fq_result *out,
                               sc_error *err) {
  int positions = 0, used = 0;
  for (int i = 0; i < a->n_prompts; i++) {
    positions += a->n[i];
    used += a->n[i] > 0;
  }
  if (positions == 0) return sc_fail(err, SC_INVALID, "quality: the old version gave no tokens");
  // request (i, j): prompt i followed by a's first j tokens, laid out one after the other
  size_t room = 0;
  for (int i = 0; i < a->n_prompts; i++)
    for (int j = 0; j < a->n[i]; j++) room += (size_t)(n_prompt[i] + j);
  int32_t *text = malloc(room * sizeof *text), *b = calloc((size_t)positions, sizeof *b);
  int *got = calloc((size_t)positions, sizeof *got);
  engine_request *q = calloc((size_t)positions, sizeof *q);
  sc_status st = SC_OK;
  if (!text || !b || !got || !q) st = sc_fail(err, SC_OOM, "quality: out of memory");
  size_t at = 0;
  for (int i = 0, k = 0; i < a->n_prompts && st == SC_OK; i++)
    for (int j = 0; j < a->n[i]; j++, k++) {
      int32_t *p = text + at;
      memcpy(p, prompts[i], (size_t)n_prompt[i] * sizeof *p);
      memcpy(p + n_prompt[i], a->tok + (size_t)i * (size_t)a->n_tokens, (size_t)j * sizeof *p);
      q[k] = greedy(p, n_prompt[i] + j, 1);
      at += (size_t)(n_prompt[i] + j);
    }
  if (st == SC_OK) st = drive(r, q, positions, 1, b, got, timeout_ns, err);
  if (st == SC_OK) {
    int agree = 0;
    for (int i = 0, k = 0; i < a->n_prompts; i++)
      for (int j = 0; j < a->n[i]; j++, k++)
        agree += got[k] == 1 && b[k] == a->tok[(size_t)i * (size_t)a->n_tokens + (size_t)j];
    *out = (fq_result){.prompts = used,
                       .positions = positions,
                       .agree = agree,
                       .agreement = (double)agree / positions,
                       .kl_mean = NAN,
                       .kl_max = NAN};
  }
  free(text), free(b), free(got), free(q);
  return st;
}
