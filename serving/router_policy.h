// The routing policies by name: the enum the scenario language (router.policy) and the router
// share, so a scenario names a policy without seeing the router. The table itself, one row per
// policy with its name and how it picks, is serving/router.c's (docs/design.md).
#pragma once

#include <stdbool.h>

// Which eligible replica a request goes to: one row each in router.c's table (its name, the
// scenario's router.policy, and how it picks).
typedef enum router_policy {
  ROUTER_LEAST_OUTSTANDING, // the fewest requests in flight, ties broken round-robin (default)
  ROUTER_ROUND_ROBIN,       // the next eligible in turn
  ROUTER_PREFIX_AFFINITY,   // consistent hashing of the prompt's first tokens, load-bounded
  ROUTER_STICKY,            // a conversation's turn where its turn before went, load-bounded
  ROUTER_CACHE_AWARE,       // the longest estimated cached prefix among the load-bounded
  ROUTER_POLICY_N           // not a policy: how many there are
} router_policy;

// The defaults of router.load_bound and router.affinity_tokens (serving/router.h's config).
#define ROUTER_LOAD_BOUND 1.25     // Mirrokni, Thorup and Zadimoghaddam's c = 1.25
#define ROUTER_AFFINITY_TOKENS 256 // the prompt's first tokens prefix-affinity hashes

// "least-outstanding", "round-robin", ... (static); NULL outside the enum.
const char *router_policy_name(router_policy p);
// The policy named text into *out; false (and *out untouched) when none is.
bool router_policy_parse(const char *text, router_policy *out);
