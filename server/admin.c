// The admin API of `shardcheck serve` (docs/serve.md, "Admin API"), served only with
// --admin-token: POST /admin/faults applies one fault now, in the shape of one item of a
// scenario's `faults:` list (scenarios/scenario_faults.c parses it, its kind's row in
// faults/kinds.c says what it asks of a replica, so a fault means the same here as in a
// scenario), or {"clear": true} ends the
// faults in force; GET /admin/state shows the replicas, their ranks, epochs, health, KV blocks
// and restarts. Both reach the replicas through the loop thread (server_loop_call).
//
// Not here: restarting dead replicas (server/loop.c, through serving/supervisor.h in real
// mode); routing, tokens and keys (http.c's and loop.c's).
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "faults/runtime.h"
#include "scenarios/scenario.h"
#include "server/server_impl.h"

// --- POST /admin/faults
typedef struct admin_fault {
  bool clear;       // {"clear": true}: resume a hang, clear slow, oom and corrupt
  ft_fault ft;      // else the fault
  int replica;      // the target replica; -1: every replica
  // the outcome (loop)
  int status;
  char msg[400];
  int applied[64], epochs[64], n_applied;
} admin_fault;

static void apply_cmd(server *s, void *ud) {
  admin_fault *a = ud;
  int from = a->replica < 0 ? 0 : a->replica, to = a->replica < 0 ? s->n_reps : a->replica + 1;
  size_t len = 0;
  a->msg[0] = 0;
  for (int i = from; i < to; i++) {
    const char *why = NULL;
    sc_error e = {{0}};
    if (router_busy(s->rt, i))
      why = "is restarting";
    else if (replica_health_get(s->reps[i]) == REPLICA_DEAD)
      why = "is dead";
    if (!why) {
      replica_fault rf = fault_replica_fault(&a->ft, a->clear);
      sc_status st = replica_inject(s->reps[i], &rf, &e);
      if (st == SC_OK && a->clear) { // a clear ends a hang too
        rf.kind = RFAULT_RESUME;
        st = replica_inject(s->reps[i], &rf, &e);
      }
      if (st == SC_OK) {
        if (a->n_applied < 64) {
          a->epochs[a->n_applied] = replica_epoch(s->reps[i]);
          a->applied[a->n_applied++] = i;
        }
        continue;
      }
      why = e.msg;
    }
    if (len < sizeof a->msg)
      len += (size_t)snprintf(a->msg + len, sizeof a->msg - len, "%sreplica%d %s",
                              len ? "; " : "", i, why);
  }
  a->status = a->n_applied > 0 ? 200 : 409;
  server_wake(s); // a kill's death, say, is seen on the next turn
}

// The key an error message of the scenario parser quotes first ("... key 'kill': ..."); "" when
// none.
static void param_of(const char *msg, char *param, size_t cap) {
  param[0] = 0;
  const char *p = strstr(msg, "key '");
  if (!p) return;
  p += 5;
  const char *e = strchr(p, '\'');
  if (!e) return;
  size_t n = (size_t)(e - p) < cap - 1 ? (size_t)(e - p) : cap - 1;
  memcpy(param, p, n);
  param[n] = 0;
  if (!strcmp(param, "faults")) param[0] = 0; // the body itself was not one fault
}

static int bad(char **body, const char *param, const char *msg) {
  *body = oai_error_body(400, param, msg);
  return 400;
}

// {"clear": true, "target": "replicaR"} (target optional: every replica).
static int parse_clear(server *s, json_t *o, admin_fault *a, char **body) {
  const char *k;
  json_t *v;
  json_object_foreach(o, k, v) {
    if (strcmp(k, "clear") && strcmp(k, "target")) {
      char m[160];
      snprintf(m, sizeof m, "key '%.60s': a clear takes only clear and target", k);
      return bad(body, k, m);
    }
  }
  if (!json_is_true(json_object_get(o, "clear")))
    return bad(body, "clear", "key 'clear': expected true");
  a->clear = true;
  a->replica = -1;
  a->ft.rank = -1;
  json_t *t = json_object_get(o, "target");
  if (t) {
    int rep = -1, rank = -1;
    if (!json_is_string(t) || !scenario_fault_target(json_string_value(t), &rep, &rank) ||
        rank >= 0)
      return bad(body, "target", "key 'target': expected replicaR");
    if (rep >= s->c.dp) {
      char m[160];
      snprintf(m, sizeof m, "key 'target': the server has replica0..replica%d", s->c.dp - 1);
      return bad(body, "target", m);
    }
    a->replica = rep;
  }
  return 0;
}

static int parse_fault(server *s, const char *text, size_t len, admin_fault *a, char **body) {
  sc_error e = {{0}};
  scn_fault f;
  int ranks = s->c.engine.tp * s->c.engine.pp;
  bool sim = s->c.replicas.kind == REPLICA_SIM;
  if (scenario_parse_fault_now(text, len, "body", s->c.dp, ranks, sim, &f, &e) != SC_OK) {
    char param[64];
    param_of(e.msg, param, sizeof param);
    return bad(body, param, e.msg);
  }
  a->replica = -1;
  int rank = -1;
  if (f.target[0] && !scenario_fault_target(f.target, &a->replica, &rank))
    return bad(body, "target", "key 'target': every-rank is a scenario's sweep; name one rank "
                               "(replicaR.rankK)");
  a->ft = (ft_fault){.kind = f.kind,
                     .replica = a->replica,
                     .rank = rank,
                     .factor = f.factor,
                     .latency_ns = f.latency_ns,
                     .bandwidth = f.bandwidth,
                     .after_allocs = f.after_allocs};
  snprintf(a->ft.what, sizeof a->ft.what, "%s", f.what);
  snprintf(a->ft.target, sizeof a->ft.target, "%.47s", f.target);
  return 0;
}

int server_admin_faults(server *s, const char *text, size_t len, char **body) {
  admin_fault *a = calloc(1, sizeof *a);
  if (!a) {
    *body = NULL;
    return 500;
  }
  json_error_t je;
  json_t *o = json_loadb(text, len, 0, &je);
  int st = 0;
  if (o && json_is_object(o) && json_object_get(o, "clear"))
    st = parse_clear(s, o, a, body);
  else
    st = parse_fault(s, text, len, a, body);
  json_decref(o);
  if (st) {
    free(a);
    return st;
  }
  pthread_mutex_lock(&s->mu);
  bool ready = s->ready;
  pthread_mutex_unlock(&s->mu);
  if (!ready || !server_loop_call(s, apply_cmd, a)) {
    free(a);
    *body = oai_error_body(503, "", ready ? "the server is shutting down"
                                          : "the server is starting: its replicas are not ready");
    return 503;
  }
  st = a->status;
  if (st != 200) {
    *body = oai_error_body(st, "target", a->msg);
  } else {
    json_t *r = json_object(), *reps = json_array();
    json_object_set_new(r, "applied", json_string(a->clear ? "clear"
                                                           : scenario_fault_kind_name(a->ft.kind)));
    if (!a->clear && a->ft.what[0]) json_object_set_new(r, "what", json_string(a->ft.what));
    for (int i = 0; i < a->n_applied; i++)
      json_array_append_new(reps, json_pack("{s:i, s:i}", "replica", a->applied[i], "epoch",
                                            a->epochs[i]));
    json_object_set_new(r, "replicas", reps);
    if (a->msg[0]) json_object_set_new(r, "skipped", json_string(a->msg));
    *body = json_dumps(r, JSON_COMPACT);
    json_decref(r);
  }
  free(a);
  return st;
}

// --- GET /admin/state
static const char *health_name(replica_health h) {
  switch (h) {
  case REPLICA_HEALTHY: return "healthy";
  case REPLICA_DRAINING: return "draining";
  case REPLICA_UNHEALTHY: return "unhealthy";
  default: return "dead";
  }
}

typedef struct state_call {
  json_t *reps;
} state_call;

static void state_cmd(server *s, void *ud) {
  state_call *sc = ud;
  sc->reps = json_array();
  for (int i = 0; i < s->n_reps; i++) {
    replica *r = s->reps[i];
    srv_restart *rs = &s->rs[i];
    json_t *o = json_object();
    json_object_set_new(o, "replica", json_integer(i));
    json_object_set_new(o, "restarting", json_boolean(rs->restarting));
    json_object_set_new(o, "restarts", json_integer(rs->restarts));
    json_object_set_new(o, "note", json_string(rs->note));
    json_object_set_new(o, "outstanding", json_integer(router_outstanding(s->rt, i)));
    if (rs->restarting) { // the supervisor owns it: nothing else is read
      json_object_set_new(o, "health", json_string("dead"));
      json_array_append_new(sc->reps, o);
      continue;
    }
    engine_stats st;
    replica_stats(r, &st);
    json_object_set_new(o, "epoch", json_integer(replica_epoch(r)));
    json_object_set_new(o, "health", json_string(health_name(replica_health_get(r))));
    json_object_set_new(o, "error", json_string(replica_error(r)));
    if (replica_has_pid(r)) json_object_set_new(o, "pid", json_integer(replica_pid(r)));
    json_object_set_new(o, "kv_blocks_used", json_integer(st.kv_used));
    json_object_set_new(o, "kv_blocks_total", json_integer(st.kv_total));
    json_object_set_new(o, "running", json_integer(st.running));
    json_object_set_new(o, "waiting", json_integer(st.queue_len));
    json_t *ranks = json_array();
    for (int k = 0; k < r->n_ranks; k++) {
      size_t used = 0, total = 0;
      json_t *ro = json_pack("{s:i}", "rank", k);
      if (replica_rank_mem(r, k, &used, &total) == SC_OK) {
        json_object_set_new(ro, "mem_used_bytes", json_integer((json_int_t)used));
        json_object_set_new(ro, "mem_total_bytes", json_integer((json_int_t)total));
      }
      json_array_append_new(ranks, ro);
    }
    json_object_set_new(o, "ranks", ranks);
    json_array_append_new(sc->reps, o);
  }
}

int server_admin_state(server *s, char **body) {
  pthread_mutex_lock(&s->mu);
  bool ready = s->ready, draining = s->draining;
  int inflight = s->inflight, waiting = s->waiting;
  pthread_mutex_unlock(&s->mu);
  state_call sc = {0};
  if (ready && !server_loop_call(s, state_cmd, &sc)) {
    *body = oai_error_body(503, "", "the server is shutting down");
    return 503;
  }
  const char *kind = s->c.replicas.kind == REPLICA_SIM       ? "sim"
                     : s->c.replicas.kind == REPLICA_PROCESS ? "process"
                                                             : "thread";
  json_t *o = json_pack("{s:s, s:s, s:s, s:b, s:b, s:i, s:i, s:i, s:i, s:i}", "model", s->name,
                        "layout", s->layout, "replica_kind", kind, "ready", ready, "draining",
                        draining, "tp", s->c.engine.tp, "pp", s->c.engine.pp, "dp", s->c.dp,
                        "requests_in_flight", inflight, "requests_pending", waiting);
  json_object_set_new(o, "replicas", sc.reps ? sc.reps : json_array());
  *body = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  return 200;
}
