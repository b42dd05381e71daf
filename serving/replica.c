// The replica seam's public side (see replica.h): the one place an implementation is picked,
// freeing, peers, the table of fault kinds and the names of the failure kinds.
#include "serving/replica.h"

#include <stdlib.h>
#include <string.h>

sc_status replica_new(const replica_options *o, const engine_config *cfg, int index, replica **out,
                      sc_error *err) {
  switch (o->kind) {
  case REPLICA_SIM: return replica_sim_new(cfg, index, out, err);
  case REPLICA_PROCESS: return replica_proc_new(cfg, &o->proc, index, out, err);
  case REPLICA_HTTP: return replica_http_new(cfg, &o->http, index, out, err);
  case REPLICA_LOCAL: break;
  }
  return replica_local_new(cfg, index, out, err);
}

void replica_free(replica *r) {
  if (!r) return;
  r->i->free(r->ctx);
  free(r);
}

void replica_set_peers(replica *const *reps, int n) {
  for (int i = 0; i < n; i++)
    if (reps[i]->i->set_peers) reps[i]->i->set_peers(reps[i]->ctx, reps, n);
}

// --- fault kinds: one row each
static const replica_fault_info fault_kinds[RFAULT_N] = {
    [RFAULT_KILL] = {"kill", false},
    [RFAULT_KILL_RANK] = {"kill_rank", true},
    [RFAULT_HANG] = {"hang", false},
    [RFAULT_HANG_RANK] = {"hang_rank", true},
    [RFAULT_RESUME] = {"resume", false},
    [RFAULT_SLOW_RANK] = {"slow_rank", true},
    [RFAULT_SLOW_LINK] = {"slow_link", false},
    [RFAULT_OOM] = {"oom", true},
    [RFAULT_CORRUPT] = {"corrupt", true},
    [RFAULT_CLEAR] = {"clear", true},
};

const replica_fault_info *replica_fault_kind_info(replica_fault_kind k) {
  return (unsigned)k < RFAULT_N && fault_kinds[k].name ? &fault_kinds[k] : NULL;
}

// --- failure kinds
static const char *const failure_names[REPLICA_FAIL_N] = {
    [REPLICA_FAIL_INVALID] = "invalid",       [REPLICA_FAIL_OOM] = "oom",
    [REPLICA_FAIL_TIMEOUT] = "timeout",       [REPLICA_FAIL_NUMERICAL] = "numerical",
    [REPLICA_FAIL_FAILED] = "replica_failed", [REPLICA_FAIL_LOST] = "replica_lost",
    [REPLICA_FAIL_CONNECT] = "connect",       [REPLICA_FAIL_PROTOCOL] = "protocol",
    [REPLICA_FAIL_SERVER_ERROR] = "server_error", [REPLICA_FAIL_HTTP] = "http",
};

const char *replica_failure_name(replica_failure f) {
  return f >= 0 && f < REPLICA_FAIL_N ? failure_names[f] : failure_names[REPLICA_FAIL_FAILED];
}

replica_failure replica_failure_of(sc_status s) {
  switch (s) {
  case SC_INVALID: return REPLICA_FAIL_INVALID;
  case SC_OOM: return REPLICA_FAIL_OOM;
  case SC_TIMEOUT: return REPLICA_FAIL_TIMEOUT;
  case SC_NUMERICAL: return REPLICA_FAIL_NUMERICAL;
  default: return REPLICA_FAIL_FAILED;
  }
}

replica_failure replica_failure_parse(const char *name) {
  for (int f = 0; f < REPLICA_FAIL_N; f++)
    if (!strcmp(name, failure_names[f])) return (replica_failure)f;
  return REPLICA_FAIL_FAILED;
}
