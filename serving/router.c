// The router (see router.h): eligibility, the table of picking policies, sending a request (a
// resume's joined prompt) and ending it, retries with backoff, resumes, holding a request for a
// replica that is coming back, and the half-open probe.
#include "serving/router.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_BACKOFF_SHIFT = 20 };                     // the backoff doubles at most this many times
static const uint64_t PROBE_NS = 1000000000ull;      // an unhealthy replica gets one request/s
static const uint64_t DEFAULT_WAIT_NS = 10000000ull; // a retry's wait when backoff_ns is 0

struct router {
  router_config c;
  replica *const *reps; // (n)
  int n;
  req_table *reqs;
  router_hooks h;
  int next;            // round-robin cursor: where the next search starts
  int *outstanding;    // (n) requests in flight per replica
  bool *busy;          // (n) owned by a restart or a swap
  int *version;        // (n) the weights each serves
  bool *eligible;      // (n) scratch of router_pick
  int probe;           // the UNHEALTHY replica the next request may go to; -1 none
  uint64_t next_probe; // when the probe is chosen again
  int probe_rr;        // which unhealthy replica probes next (round robin)
  uint64_t *retry;     // (n_retry) keys waiting for a retry, in the order they began waiting
  size_t n_retry, cap_retry;
};

router *router_new(const router_config *c, replica *const *reps, int n, req_table *reqs,
                   router_hooks hooks) {
  router *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  size_t m = (size_t)(n > 0 ? n : 1);
  r->outstanding = calloc(m, sizeof *r->outstanding);
  r->busy = calloc(m, sizeof *r->busy);
  r->version = calloc(m, sizeof *r->version);
  r->eligible = calloc(m, sizeof *r->eligible);
  if (!r->outstanding || !r->busy || !r->version || !r->eligible) {
    router_free(r);
    return NULL;
  }
  r->c = *c;
  r->reps = reps;
  r->n = n;
  r->reqs = reqs;
  r->h = hooks;
  r->probe = -1;
  return r;
}

void router_free(router *r) {
  if (!r) return;
  free(r->outstanding);
  free(r->busy);
  free(r->version);
  free(r->eligible);
  free(r->retry);
  free(r);
}

// --- the policies: one row each (docs/design.md: adding one is a row and its function)
//
// A policy looks at the eligible replicas in turn, from the round-robin cursor on, and says
// whether replica i beats the best so far (best -1: none yet); the first of equals wins.
static bool least_outstanding(const router *r, int i, int best) {
  return best < 0 || r->outstanding[i] < r->outstanding[best];
}
static bool round_robin(const router *r, int i, int best) {
  (void)r, (void)i;
  return best < 0;
}

static const struct {
  const char *name; // router.policy in a scenario
  bool (*beats)(const router *r, int i, int best);
} policies[ROUTER_POLICY_N] = {
    [ROUTER_LEAST_OUTSTANDING] = {"least-outstanding", least_outstanding},
    [ROUTER_ROUND_ROBIN] = {"round-robin", round_robin},
};

const char *router_policy_name(router_policy p) {
  return (unsigned)p < ROUTER_POLICY_N ? policies[p].name : NULL;
}

bool router_policy_parse(const char *text, router_policy *out) {
  for (int p = 0; p < ROUTER_POLICY_N; p++)
    if (policies[p].name && !strcmp(text, policies[p].name)) {
      *out = (router_policy)p;
      return true;
    }
  return false;
}

// --- which replica
static int pick_among(router *r, const bool *eligible) {
  int best = -1;
  bool (*beats)(const router *, int, int) = policies[r->c.policy].beats;
  for (int k = 0; k < r->n; k++) {
    int i = (r->next + k) % r->n;
    if (eligible[i] && beats(r, i, best)) best = i;
  }
  if (best < 0) return -1;
  r->outstanding[best]++;
  r->next = (best + 1) % r->n;
  return best;
}

int router_pick(router *r, const req_rec *q) {
  for (int j = 0; j < r->n; j++) {
    replica_health h = r->busy[j] ? REPLICA_DEAD : replica_health_get(r->reps[j]);
    bool weights = q->n_tok == 0 || r->version[j] == q->version; // a resume stays on its weights
    r->eligible[j] = (h == REPLICA_HEALTHY || (h == REPLICA_UNHEALTHY && j == r->probe)) && weights;
  }
  int i = pick_among(r, r->eligible);
  if (i >= 0 && i == r->probe) r->probe = -1;
  return i;
}

void router_done(router *r, int i) {
  if (i >= 0 && i < r->n && r->outstanding[i] > 0) r->outstanding[i]--;
}

int router_outstanding(const router *r, int i) {
  return i >= 0 && i < r->n ? r->outstanding[i] : 0;
}

void router_set_busy(router *r, int i, bool busy) {
  if (i >= 0 && i < r->n) r->busy[i] = busy;
}

bool router_busy(const router *r, int i) { return i >= 0 && i < r->n && r->busy[i]; }

void router_set_version(router *r, int i, int version) {
  if (i >= 0 && i < r->n) r->version[i] = version;
}

int router_version(const router *r, int i) { return i >= 0 && i < r->n ? r->version[i] : 0; }

// --- sending a request, ending it
router_sent router_send(router *r, uint64_t key, const engine_request *er, uint64_t t,
                        sc_error *err) {
  req_rec *q = &r->reqs->v[key];
  int i = router_pick(r, q);
  if (i < 0) return ROUTER_NONE;
  // A resume sends the prompt followed by the tokens the client already has.
  engine_request sub = *er;
  int32_t *joined = NULL;
  if (q->n_tok > 0) {
    joined = malloc((size_t)(er->n_prompt + q->n_tok) * sizeof *joined);
    if (!joined) {
      router_done(r, i);
      return ROUTER_SEND_OOM;
    }
    memcpy(joined, er->prompt, (size_t)er->n_prompt * sizeof *joined);
    memcpy(joined + er->n_prompt, q->ids, (size_t)q->n_tok * sizeof *joined);
    sub.prompt = joined;
    sub.n_prompt = er->n_prompt + q->n_tok;
  }
  sub.max_tokens = er->max_tokens - q->n_tok;
  q->replica = i;
  q->epoch = replica_epoch(r->reps[i]);
  q->loss_seen = false;
  q->version = router_version(r, i);
  q->dispatched = true;
  q->waiting = false;
  if (!q->retries) q->dispatch = t;
  if (r->h.before_submit) r->h.before_submit(r->h.ud, i);
  sc_status s = replica_submit(r->reps[i], key, &sub, err);
  free(joined);
  return s == SC_OK ? ROUTER_SENT : ROUTER_REFUSED;
}

bool router_end(router *r, uint64_t key, req_status st) {
  req_table *t = r->reqs;
  req_rec *q = &t->v[key];
  if (q->state == REQ_DONE) return false;
  q->state = REQ_DONE;
  q->status = st;
  t->inflight--;
  if (q->dispatched && !q->waiting) router_done(r, q->replica);
  q->waiting = false;
  while (t->low < t->n && t->v[t->low].state == REQ_DONE) t->low++;
  return true;
}

// --- retries
static bool push_retry(router *r, uint64_t k) {
  if (r->n_retry == r->cap_retry) {
    size_t cap = r->cap_retry ? 2 * r->cap_retry : 64;
    uint64_t *p = realloc(r->retry, cap * sizeof *p);
    if (!p) return false;
    r->retry = p;
    r->cap_retry = cap;
  }
  r->retry[r->n_retry++] = k;
  return true;
}

static uint64_t wait_ns(const router *r) {
  return r->c.backoff_ns ? r->c.backoff_ns : DEFAULT_WAIT_NS;
}

void router_on_lost(router *r, uint64_t key, int rep, uint64_t t) {
  req_rec *q = &r->reqs->v[key];
  if (q->n_tok > 0 && !r->c.resume) {
    r->h.fail(r->h.ud, key, "replica_lost",
              "its replica was lost mid-stream and router.resume is false", t);
    return;
  }
  if (q->retries >= r->c.max_retries) {
    char msg[96];
    snprintf(msg, sizeof msg, "its replica was lost; gave up after %d retr%s", q->retries,
             q->retries == 1 ? "y" : "ies");
    r->h.fail(r->h.ud, key, "replica_lost", msg, t);
    return;
  }
  router_done(r, rep);
  q->waiting = true;
  q->retries++;
  if (q->n_tok > 0) q->resumed++;
  int shift = q->retries - 1 < MAX_BACKOFF_SHIFT ? q->retries - 1 : MAX_BACKOFF_SHIFT;
  q->retry_at = t + (r->c.backoff_ns << shift);
  if (!push_retry(r, key)) {
    q->waiting = false;
    q->dispatched = false;
    r->h.fail(r->h.ud, key, "oom", "runner: out of memory queueing a retry", t);
  }
}

bool router_hold(router *r, uint64_t key, uint64_t t) {
  bool coming = false;
  for (int i = 0; i < r->n; i++)
    coming |= r->busy[i] || replica_health_get(r->reps[i]) == REPLICA_DRAINING;
  if (!coming) return false;
  req_rec *q = &r->reqs->v[key];
  q->waiting = true;
  q->retry_at = t + wait_ns(r);
  if (push_retry(r, key)) return true;
  q->waiting = false;
  return false;
}

bool router_waiting(const router *r, uint64_t key) {
  for (size_t i = 0; i < r->n_retry; i++)
    if (r->retry[i] == key) return true;
  return false;
}

static bool any_alive(const router *r) {
  for (int i = 0; i < r->n; i++)
    if (r->busy[i] || replica_health_get(r->reps[i]) != REPLICA_DEAD) return true;
  return false;
}

void router_tick(router *r, uint64_t now) {
  size_t w = 0;
  for (size_t i = 0; i < r->n_retry; i++) {
    uint64_t k = r->retry[i];
    req_rec *q = &r->reqs->v[k];
    if (q->state == REQ_DONE) continue;
    if (q->retry_at > now) {
      r->retry[w++] = k;
      continue;
    }
    if (r->h.dispatch(r->h.ud, k, now)) continue;
    if (!any_alive(r)) {
      r->h.fail(r->h.ud, k, "no_replica", "every replica was lost", now);
      continue;
    }
    q->retry_at = now + wait_ns(r);
    r->retry[w++] = k; // wait for a replica to come back (restart) or for the timeout
  }
  r->n_retry = w;
}

uint64_t router_next(const router *r) {
  uint64_t d = UINT64_MAX;
  for (size_t i = 0; i < r->n_retry; i++) {
    const req_rec *q = &r->reqs->v[r->retry[i]];
    if (q->state != REQ_DONE && q->retry_at < d) d = q->retry_at;
  }
  return d;
}

void router_probe(router *r, uint64_t now) {
  if (!r->c.probe_unhealthy || now < r->next_probe) return;
  r->next_probe = now + PROBE_NS;
  r->probe = -1;
  for (int k = 0; k < r->n; k++) {
    int i = (r->probe_rr + k) % r->n;
    if (!r->busy[i] && replica_health_get(r->reps[i]) == REPLICA_UNHEALTHY) {
      r->probe = i;
      r->probe_rr = i + 1;
      break;
    }
  }
}
