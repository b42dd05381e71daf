// The router: every routing decision of a deployment, in one place.
//
// - Which replica a request goes to: among the eligible replicas (healthy and not owned by a
//   restart, or the one unhealthy replica on probation; for a resume, one serving the weights
//   the request started on), by the policy's row: least-outstanding (default: the fewest
//   requests in flight, ties broken round-robin), round-robin (the next eligible in turn),
//   prefix-affinity (consistent hashing of the prompt's first tokens with bounded loads),
//   sticky (a conversation's turn where the turn before went) or cache-aware (the longest
//   prefix sent there before, under the load bound); docs/scenarios.md has each.
// - What happens when a replica is lost under a request: a retry after a backoff that doubles
//   with each retry, a resume from the tokens already delivered (router.resume), or a final
//   failure once max_retries are spent.
// - A new request no replica can take while one is coming back (a restart or a hot swap under
//   way) waits for it, as a retry does, instead of failing at once.
// - A half-open circuit: once a second, one UNHEALTHY replica may take the next request; it
//   turns healthy again once a request succeeds.
//
// It reads the deployment's replicas (health) and request table (serving/request.h), and
// reaches the runner through two hooks: dispatch a request now, or end it. Which replica a
// restart or a hot swap owns, and which weights each serves, the fault runtime tells it
// (router_set_busy, router_set_version). No clock of its own: every call is given `now`.
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "serving/replica.h"
#include "serving/request.h"
#include "serving/router_policy.h"


typedef struct router_config {
  router_policy policy;
  // The load bound of prefix-affinity, sticky and cache-aware (consistent hashing with bounded
  // loads): a replica may take a request while its outstanding + 1 <= ceil(load_bound *
  // (outstanding of all the eligible + 1) / eligible count); >= 1 (0: ROUTER_LOAD_BOUND).
  double load_bound;
  int affinity_tokens; // prefix-affinity hashes the prompt's first this many tokens (0:
                       // ROUTER_AFFINITY_TOKENS)
  int max_retries;      // resubmissions of a request whose replica was lost
  uint64_t backoff_ns;  // wait before the first; doubles with each retry
  bool resume;          // a request lost mid-stream continues from its tokens (else fails)
  bool probe_unhealthy; // the half-open circuit (the runner turns it on in fault scenarios)
} router_config;

// How the router reaches the runner (or shardcheck serve's loop).
typedef struct router_hooks {
  void *ud;
  // Sends request key (not dispatched) to a replica the router picks at t; false when none
  // can take it (nothing changed). The caller's own router_send, with the request's prompt.
  bool (*dispatch)(void *ud, uint64_t key, uint64_t t);
  // Ends request key at t as failed (reason: the request row's reason; error: why).
  void (*fail)(void *ud, uint64_t key, const char *reason, const char *error, uint64_t t);
  // Optional (NULL: none). router_send is about to submit a request to replica i (the runner
  // holds the replica while the requests due at one instant go out).
  void (*before_submit)(void *ud, int i);
} router_hooks;

enum {
  ROUTER_RING_POINTS = 64,  // points per replica on prefix-affinity's hash ring
  ROUTER_CACHE_BLOCK = 16,  // tokens per block of cache-aware's estimate
  ROUTER_CACHE_SLOTS = 65536, // block hashes remembered per replica (direct-mapped)
  ROUTER_CACHE_BLOCKS = 1024, // leading blocks of a prompt cache-aware looks at
};

typedef struct router router;

// A router over reps[0..n) and the request table reqs (both outlive it). NULL when memory
// runs out.
router *router_new(const router_config *c, replica *const *reps, int n, req_table *reqs,
                   router_hooks hooks);
void router_free(router *r); // NULL is a no-op

// --- which replica
// The replica for request q among the eligible ones, or -1 when none is. Counts q as
// outstanding on the replica picked; picking the probe ends its probation turn. Without its
// prompt (router_send gives it), prefix-affinity and cache-aware pick as least-outstanding.
int router_pick(router *r, const req_rec *q);
// router_pick with request q's prompt (n tokens) for the policies that read it.
int router_pick_prompt(router *r, const req_rec *q, const int32_t *prompt, int n);
// Tokens of prompt (n) that cache-aware estimates replica i holds: its leading full blocks of
// ROUTER_CACHE_BLOCK tokens that were sent there before (0 for other policies).
int router_cached_estimate(router *r, int i, const int32_t *prompt, int n);
// A request on replica i ended (any way).
void router_done(router *r, int i);
int router_outstanding(const router *r, int i);
// A restart or swap owns replica i (true) or gave it back (false): while owned, no call may
// touch it, and it takes no request.
void router_set_busy(router *r, int i, bool busy);
bool router_busy(const router *r, int i);
// Replica i serves weights `version` from now on (0: the initial ones).
void router_set_version(router *r, int i, int version);
int router_version(const router *r, int i);

// --- sending a request, ending it
typedef enum router_sent {
  ROUTER_SENT,      // submitted to a replica
  ROUTER_NONE,      // no replica can take it now (nothing changed)
  ROUTER_SEND_OOM,  // out of memory joining a resume's prompt (nothing changed)
  ROUTER_REFUSED,   // the replica refused the submission (err says why); the row is marked sent
} router_sent;

// Sends request key (not dispatched) at t to the replica router_pick chooses: er is the whole
// request (its prompt and max_tokens); a request that already has tokens (a resume) sends the
// prompt followed by them, and max_tokens less them. Marks the row sent there (replica, epoch,
// weights version; its dispatch time at its first send). The caller ends the request on
// ROUTER_SEND_OOM and ROUTER_REFUSED.
router_sent router_send(router *r, uint64_t key, const engine_request *er, uint64_t t,
                        sc_error *err);
// Ends request key with status st: done, out of flight, its replica's slot released when it
// was out there, the table's low mark moved past the rows done. False when it had already
// ended (nothing changed).
bool router_end(router *r, uint64_t key, req_status st);

// --- when a replica is lost
// Request key's replica rep was lost under it at t (a FAILED event whose failure is a loss):
// it waits for a retry (or a resume), or, when it may not, it is failed through the hook.
void router_on_lost(router *r, uint64_t key, int rep, uint64_t t);
// No replica could take new request key at t: true when it was queued to wait for one that is
// coming back (owned by a restart, or draining for a swap); false: nothing will, the caller
// fails it.
bool router_hold(router *r, uint64_t key, uint64_t t);

// Whether request key waits in the retry queue (a retry, a resume, or a hold).
bool router_waiting(const router *r, uint64_t key);

// --- the loop's hooks
// Sends the retries due at now (through the dispatch hook); a retry that finds no replica
// fails when every replica is lost for good, else waits one backoff more.
void router_tick(router *r, uint64_t now);
// Once a second (with probe_unhealthy): picks the unhealthy replica that may take the next
// request. The runner calls it after the fault runtime's turn, which may change health.
void router_probe(router *r, uint64_t now);
// The earliest time router_tick has a retry to send (UINT64_MAX: none).
uint64_t router_next(const router *r);
