// The router (see router.h): eligibility, the table of picking policies, sending a request (a
// resume's joined prompt) and ending it, retries with backoff, resumes, holding a request for a
// replica that is coming back, and the half-open probe.
#include "serving/router.h"

#include <math.h>
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
  // prefix-affinity: the hash ring, ROUTER_RING_POINTS points per replica, sorted by point
  uint64_t *ring_pt;   // (n * ROUTER_RING_POINTS)
  int *ring_rep;       // (n * ROUTER_RING_POINTS) the replica of each point
  // cache-aware: block-chain hashes sent to each replica (direct-mapped, newest wins)
  uint64_t *seen;      // (n * ROUTER_CACHE_SLOTS), 0: empty; NULL for the other policies
  uint64_t *chain;     // (ROUTER_CACHE_BLOCKS) scratch: the prompt's block-chain hashes
  int n_chain;
  // the prompt of the request being picked (router_pick_prompt), NULL: none
  const int32_t *prompt;
  int n_prompt;
};

// --- hashing prompts: FNV-1a over the token ids, then the splitmix64 finalizer
static uint64_t fin64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t hash_tokens(uint64_t h, const int32_t *t, int n) {
  for (int i = 0; i < n; i++) {
    uint32_t v = (uint32_t)t[i];
    for (int b = 0; b < 4; b++) h = (h ^ ((v >> (8 * b)) & 0xffu)) * 0x100000001b3ull;
  }
  h = fin64(h);
  return h ? h : 1; // 0 is "none"
}

static int cmp_point(const void *a, const void *b, void *pts) {
  uint64_t x = ((const uint64_t *)pts)[*(const int *)a], y = ((const uint64_t *)pts)[*(const int *)b];
  return x < y ? -1 : x > y;
}

// The ring: point k of replica i at fin64 of (i, k), sorted (ties by replica, so the ring is
// the same on every machine).
static bool build_ring(router *r) {
  int m = r->n * ROUTER_RING_POINTS;
  uint64_t *pts = malloc((size_t)m * sizeof *pts);
  int *ord = malloc((size_t)m * sizeof *ord);
  r->ring_pt = malloc((size_t)m * sizeof *r->ring_pt);
  r->ring_rep = malloc((size_t)m * sizeof *r->ring_rep);
  bool ok = pts && ord && r->ring_pt && r->ring_rep;
  for (int j = 0; ok && j < m; j++) {
    pts[j] = fin64(((uint64_t)(j / ROUTER_RING_POINTS) << 32 | (uint64_t)(j % ROUTER_RING_POINTS)) +
                   0x9e3779b97f4a7c15ull);
    ord[j] = j;
  }
  if (ok) qsort_r(ord, (size_t)m, sizeof *ord, cmp_point, pts);
  for (int j = 0; ok && j < m; j++) {
    r->ring_pt[j] = pts[ord[j]];
    r->ring_rep[j] = ord[j] / ROUTER_RING_POINTS;
  }
  free(pts);
  free(ord);
  return ok;
}

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
  if (!(r->c.load_bound >= 1.0)) r->c.load_bound = ROUTER_LOAD_BOUND;
  if (r->c.affinity_tokens < 1) r->c.affinity_tokens = ROUTER_AFFINITY_TOKENS;
  r->n = n;
  bool ok = c->policy != ROUTER_PREFIX_AFFINITY || n <= 0 || build_ring(r);
  if (ok && c->policy == ROUTER_CACHE_AWARE) {
    r->seen = calloc(m * ROUTER_CACHE_SLOTS, sizeof *r->seen);
    r->chain = calloc(ROUTER_CACHE_BLOCKS, sizeof *r->chain);
    ok = r->seen && r->chain;
  }
  if (!ok) {
    router_free(r);
    return NULL;
  }
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
  free(r->ring_pt);
  free(r->ring_rep);
  free(r->seen);
  free(r->chain);
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


// The load bound: whether eligible replica i may take one more request (see router_config).
static bool under_bound(const router *r, const bool *eligible, int i) {
  int total = 0, m = 0;
  for (int j = 0; j < r->n; j++)
    if (eligible[j]) total += r->outstanding[j], m++;
  double cap = ceil(r->c.load_bound * (double)(total + 1) / (double)(m ? m : 1) - 1e-9);
  return (double)(r->outstanding[i] + 1) <= cap;
}

static int scan(const router *r, const bool *eligible,
                bool (*beats)(const router *r, int i, int best)) {
  int best = -1;
  for (int k = 0; k < r->n; k++) {
    int i = (r->next + k) % r->n;
    if (eligible[i] && beats(r, i, best)) best = i;
  }
  return best;
}

// prefix-affinity: the first replica clockwise on the ring from the hash of the prompt's first
// affinity_tokens tokens that is eligible and under the load bound (Mirrokni, Thorup and
// Zadimoghaddam, "Consistent Hashing with Bounded Loads", 2018); least-outstanding without a
// prompt.
static int pick_prefix_affinity(router *r, const req_rec *q, const bool *eligible) {
  (void)q;
  if (!r->prompt || r->n_prompt < 1) return scan(r, eligible, least_outstanding);
  int n = r->n_prompt < r->c.affinity_tokens ? r->n_prompt : r->c.affinity_tokens;
  uint64_t h = hash_tokens(0xcbf29ce484222325ull, r->prompt, n);
  int m = r->n * ROUTER_RING_POINTS, lo = 0, hi = m; // the first point >= h (m: wrap to 0)
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (r->ring_pt[mid] < h) lo = mid + 1;
    else hi = mid;
  }
  for (int k = 0; k < m; k++) {
    int i = r->ring_rep[(lo + k) % m];
    if (eligible[i] && under_bound(r, eligible, i)) return i;
  }
  return scan(r, eligible, least_outstanding);
}

// sticky: a conversation's turn goes where its turn before went while that replica is eligible
// and under the load bound; a first turn (or a request of no conversation), least-outstanding.
static int pick_sticky(router *r, const req_rec *q, const bool *eligible) {
  if (q->prev && q->prev - 1 < r->reqs->n) {
    int i = r->reqs->v[q->prev - 1].replica;
    if (i >= 0 && i < r->n && eligible[i] && under_bound(r, eligible, i)) return i;
  }
  return scan(r, eligible, least_outstanding);
}

// cache-aware: the prompt's leading full blocks' chain hashes, into r->chain.
static void prompt_chain(router *r, const int32_t *p, int n) {
  r->n_chain = 0;
  uint64_t h = 0xcbf29ce484222325ull;
  for (int b = 0; b < ROUTER_CACHE_BLOCKS && (b + 1) * ROUTER_CACHE_BLOCK <= n; b++) {
    h = hash_tokens(h, p + b * ROUTER_CACHE_BLOCK, ROUTER_CACHE_BLOCK);
    r->chain[r->n_chain++] = h;
  }
}

static int chain_hits(const router *r, int i) {
  const uint64_t *t = r->seen + (size_t)i * ROUTER_CACHE_SLOTS;
  int k = 0;
  while (k < r->n_chain && t[r->chain[k] % ROUTER_CACHE_SLOTS] == r->chain[k]) k++;
  return k;
}

// cache-aware: among the eligible under the load bound, the most leading blocks of the prompt
// sent there before (an estimate of its prefix cache: what was sent, not what it evicted),
// then the fewest outstanding, then round-robin order.
static int pick_cache_aware(router *r, const req_rec *q, const bool *eligible) {
  (void)q;
  if (!r->prompt) return scan(r, eligible, least_outstanding);
  prompt_chain(r, r->prompt, r->n_prompt);
  int best = -1, best_hits = -1;
  for (int k = 0; k < r->n; k++) {
    int i = (r->next + k) % r->n;
    if (!eligible[i] || !under_bound(r, eligible, i)) continue;
    int h = chain_hits(r, i);
    if (h > best_hits || (h == best_hits && r->outstanding[i] < r->outstanding[best]))
      best = i, best_hits = h;
  }
  return best >= 0 ? best : scan(r, eligible, least_outstanding);
}

// A policy's row: `beats` compares two replicas in a scan from the round-robin cursor (the
// first of equals wins), or `pick` chooses on its own (reading the request and its prompt).
static const struct {
  const char *name; // router.policy in a scenario
  bool (*beats)(const router *r, int i, int best);
  int (*pick)(router *r, const req_rec *q, const bool *eligible);
} policies[ROUTER_POLICY_N] = {
    [ROUTER_LEAST_OUTSTANDING] = {.name = "least-outstanding", .beats = least_outstanding},
    [ROUTER_ROUND_ROBIN] = {.name = "round-robin", .beats = round_robin},
    [ROUTER_PREFIX_AFFINITY] = {.name = "prefix-affinity", .pick = pick_prefix_affinity},
    [ROUTER_STICKY] = {.name = "sticky", .pick = pick_sticky},
    [ROUTER_CACHE_AWARE] = {.name = "cache-aware", .pick = pick_cache_aware},
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
static int pick_among(router *r, const req_rec *q, const bool *eligible) {
  bool any = false;
  for (int i = 0; i < r->n; i++) any |= eligible[i];
  if (!any) return -1;
  int best = policies[r->c.policy].pick ? policies[r->c.policy].pick(r, q, eligible)
                                        : scan(r, eligible, policies[r->c.policy].beats);
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
  int i = pick_among(r, q, r->eligible);
  if (i >= 0 && i == r->probe) r->probe = -1;
  return i;
}

int router_pick_prompt(router *r, const req_rec *q, const int32_t *prompt, int n) {
  r->prompt = prompt;
  r->n_prompt = n;
  int i = router_pick(r, q);
  if (i >= 0 && r->seen) { // cache-aware remembers what it sent where
    prompt_chain(r, prompt, n);
    uint64_t *t = r->seen + (size_t)i * ROUTER_CACHE_SLOTS;
    for (int k = 0; k < r->n_chain; k++) t[r->chain[k] % ROUTER_CACHE_SLOTS] = r->chain[k];
  }
  r->prompt = NULL;
  r->n_prompt = 0;
  return i;
}

int router_cached_estimate(router *r, int i, const int32_t *prompt, int n) {
  if (!r->seen || i < 0 || i >= r->n) return 0;
  prompt_chain(r, prompt, n);
  return chain_hits(r, i) * ROUTER_CACHE_BLOCK;
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
  int i = router_pick_prompt(r, q, er->prompt, er->n_prompt);
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
