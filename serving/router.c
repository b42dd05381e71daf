// The router's two policies (see router.h).
#include "serving/router.h"

#include <stdlib.h>

struct router {
  router_policy policy;
  int n;
  int next;         // round-robin cursor: where the next search starts
  int *outstanding; // (n) requests in flight per replica
};

router *router_new(router_policy policy, int n_replicas) {
  router *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->outstanding = calloc((size_t)(n_replicas > 0 ? n_replicas : 1), sizeof *r->outstanding);
  if (!r->outstanding) {
    free(r);
    return NULL;
  }
  r->policy = policy;
  r->n = n_replicas;
  return r;
}

void router_free(router *r) {
  if (!r) return;
  free(r->outstanding);
  free(r);
}

int router_pick(router *r, const bool *eligible) {
  int best = -1;
  for (int k = 0; k < r->n; k++) {
    int i = (r->next + k) % r->n;
    if (eligible && !eligible[i]) continue;
    if (r->policy == ROUTER_ROUND_ROBIN) {
      best = i;
      break;
    }
    if (best < 0 || r->outstanding[i] < r->outstanding[best]) best = i;
  }
  if (best < 0) return -1;
  r->outstanding[best]++;
  r->next = (best + 1) % r->n;
  return best;
}

void router_done(router *r, int i) {
  if (i >= 0 && i < r->n && r->outstanding[i] > 0) r->outstanding[i]--;
}

int router_outstanding(const router *r, int i) {
  return i >= 0 && i < r->n ? r->outstanding[i] : 0;
}

const char *router_policy_name(router_policy p) {
  return p == ROUTER_ROUND_ROBIN ? "round-robin" : "least-outstanding";
}
