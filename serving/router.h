// The router: picks the replica a new request goes to.
//
// Least-outstanding (default): the eligible replica with the fewest requests in flight, ties
// broken round-robin; round-robin: the next eligible replica in turn. Which replicas are
// eligible (healthy, admitting) is the caller's to say; health checks, retries and failover
// policy live with the runner and fault injection. No clock, no I/O.
#pragma once

#include <stdbool.h>

typedef enum router_policy { ROUTER_LEAST_OUTSTANDING, ROUTER_ROUND_ROBIN } router_policy;

typedef struct router router;

// NULL when memory runs out.
router *router_new(router_policy policy, int n_replicas);
void router_free(router *r); // NULL is a no-op

// The replica for the next request among those with eligible[i] (NULL: all), or -1 when none
// is eligible. Counts the request as outstanding on the replica picked.
int router_pick(router *r, const bool *eligible);
// A request on replica i ended (any way).
void router_done(router *r, int i);
int router_outstanding(const router *r, int i);
const char *router_policy_name(router_policy p); // "least-outstanding" | "round-robin"
