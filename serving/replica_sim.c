// The simulated replica: the engine with backend "sim" (the real scheduler and KV cache, steps
// priced by the cost model), driven synchronously by the runner's event loop in virtual time,
// and the faults such a replica suffers, modelled in the same virtual time.
//
// No thread. A step starts when the loop calls replica_advance at a time when the replica
// is idle and has work; it is planned and priced at once, and its events are held until the
// virtual clock reaches its end (start + priced duration), when they become pollable, stamped
// with that end. Requests submitted or cancelled while a step is in flight are seen by the next
// step, as a real engine sees them after its current step. The virtual clock belongs to the
// runner; this file only reads it through the engine's clock.
//
// Faults (replica_fault, serving/replica.h) change the modelled behaviour; every outcome is a
// function of the calls made and the clock's readings, so a run is deterministic:
//   KILL        dies at once; the step in flight is abandoned (its events never delivered).
//   KILL_RANK   the step in flight (or, when idle, the next step) fails: dies at once.
//   HANG        no step ends or starts; the router's heartbeat timeout (engine_sim.
//               detect_timeout_ns) after the hang began, the replica is lost. RESUME before that
//               goes on where it stopped (the step in flight ends later by the hang's length).
//   HANG_RANK   the step in flight (or the next one) blocks; the collective deadline (engine_sim.
//               collective_timeout_ns) after that step began, the replica dies. RESUME before
//               that goes on as for HANG.
//   SLOW_RANK   every step started later takes factor x its priced time: a straggler stalls its
//               whole TP x PP group (with pp > 1 the other stages would idle less; not modelled).
//   SLOW_LINK   the replica prices its steps on its own copy of the device whose links (intra-
//               and inter-node) have bw / factor (capped at `bandwidth`) and latency + latency_ns
//               per hop, so only the collectives and PP transfers slow down, exactly as the cost
//               model prices them; measured all-reduce tables are scaled the same way.
//   OOM         admissions are where a simulated replica allocates: after after_allocs more
//               admissions, the next one (persistent: every one) fails at once with "oom".
//   CORRUPT     every step started until CLEAR fails each request that produced a token in it
//               with "numerical" (poisoned activations reach every row through the all-reduce;
//               NaN and bitflip alike), and cancels it in the engine so its KV blocks are free.
//   CLEAR       ends SLOW_RANK, SLOW_LINK, OOM and CORRUPT (on every rank).
// A death fails every request the replica holds, in key order, at the time of death; the
// rank of a *_RANK fault only names the error (a fault on any rank stalls or fails the whole
// group). restart builds a fresh engine with the saved config; it admits once its weights are
// loaded (SIM_LOAD_BYTES_PER_S), and replica_next_ns wakes the loop then. swap (a hot swap)
// is a death without a fault followed by a restart on the new weights: their shapes and dtype
// price every later step, and their static_bytes the load time.
//
// Not here: the scenario's fault timeline (faults/timeline.c) and when to inject or restart
// (runner/runner.c); the cost model (kernels/sim/sim_cost.c).
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serving/replica.h"
#include "serving/replica_keys.h"
#include "kernels/util.h"

// A restarted replica loads one GPU's weights and workspace (engine_sim.static_bytes) host to
// device at this rate (bytes/s): about what a PCIe gen4 x16 link achieves (31.5 GB/s peak),
// the checkpoint already in page cache. load_ns = static_bytes / 25e9 s.
#define SIM_LOAD_BYTES_PER_S 25e9
#define SIM_DETECT_DEFAULT_NS 2000000000ull // the router's heartbeat timeout when unset (2 s)
#define SIM_OOM_UNHEALTHY 3                 // consecutive OOM failures that make it unhealthy

typedef struct simrep {
  engine *e;                  // NULL only after a failed restart
  engine_config cfg;          // as given, but cfg.sim.hw points at `hw` below
  const sim_hw *hw_base;      // the caller's device (caller owns; outlives the replica)
  sim_hw *hw;                 // this replica's copy, links throttled by SLOW_LINK
  replica_keys keys;
  replica_evq ready;          // pollable
  replica_evq held;           // the step in flight's, released at busy_until
  bool busy;
  uint64_t step_start;        // clock time the step in flight began
  uint64_t busy_until;        // clock time it ends (meaningless while frozen)
  bool frozen;                // the step in flight stopped progressing (HANG, HANG_RANK)
  uint64_t frozen_at;         // since when
  bool admitting;
  int n_ranks;
  int epoch;                  // 1 at start, +1 per restart
  bool dead;
  char error[512];            // why it died ("" while it lives)
  bool loading;               // restarted, loading weights until ready_at
  uint64_t ready_at;
  // faults in force
  bool hung;                  // HANG
  uint64_t hang_deadline;     // when the heartbeat timeout declares it lost
  bool rank_hung;             // HANG_RANK
  int hung_rank;
  bool rank_deadline_set;     // a step is blocked: it fails at rank_deadline
  uint64_t rank_deadline;
  int lost_rank;              // KILL_RANK: the rank whose device is gone (-1: none)
  replica *const *peers;      // the deployment's replicas (replica_set_peers; NULL: none)
  int n_peers;
  double slow_factor;         // SLOW_RANK (1: none)
  double link_factor;         // SLOW_LINK (1: none)
  uint64_t link_latency_ns;
  double link_bandwidth;      // bytes/s cap (0: none)
  bool oom, oom_persistent;   // OOM
  int oom_left;               // admissions that still succeed
  int oom_streak;             // OOM failures since the latest successful admission
  uint64_t oom_failures, numerical_failures;
  bool corrupt;               // CORRUPT
  uint64_t *bad;              // (cap_bad) scratch: engine ids a corrupted step fails
  size_t cap_bad;
} simrep;

static uint64_t now_ns(const simrep *s) { return sc_clock_now(&s->cfg.clock); }

static uint64_t detect_ns(const simrep *s) {
  return s->cfg.sim.detect_timeout_ns ? s->cfg.sim.detect_timeout_ns : SIM_DETECT_DEFAULT_NS;
}

static uint64_t collective_ns(const simrep *s) {
  return s->cfg.sim.collective_timeout_ns ? s->cfg.sim.collective_timeout_ns
                                          : s->cfg.collective_timeout_ns;
}

// Whether engine id `id` still serves a caller key (events of requests this file already
// failed, or never mapped, are dropped).
static bool live(const simrep *s, uint64_t id) {
  const replica_keys *k = &s->keys;
  return id < k->cap_ids && rk_id(k, k->id_to_key[id]) == id;
}

// Makes room for n entries in s->bad. False when memory ran out.
static bool bad_reserve(simrep *s, size_t n) {
  if (n <= s->cap_bad) return true;
  size_t cap = s->cap_bad ? s->cap_bad : 256;
  while (cap < n) cap *= 2;
  uint64_t *p = realloc(s->bad, cap * sizeof *p);
  if (!p) return false;
  s->bad = p;
  s->cap_bad = cap;
  return true;
}

static void push_failed(replica_evq *q, uint64_t key, sc_status st, replica_failure why,
                        uint64_t t) {
  replica_event ev = {.kind = REPLICA_EV_FAILED, .key = key, .status = st, .failure = why,
                      .t_ns = t};
  rq_push(q, &ev);
}

// --- death

typedef struct key_list {
  uint64_t *v; // (cap)
  size_t n, cap;
} key_list;

static void key_add(void *ud, uint64_t key) {
  key_list *l = ud;
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 256;
    uint64_t *p = realloc(l->v, cap * sizeof *p);
    if (!p) return; // that request's FAILED event is lost with the memory
    l->v = p;
    l->cap = cap;
  }
  l->v[l->n++] = key;
}

// The replica dies at time t: the step in flight is abandoned, every request it holds (still
// mapped, or ended by the abandoned step) gets one FAILED event (st, what) at t, in key order,
// and leaves the engine so that its KV blocks are free. fmt: the error() text.
static void die(simrep *s, uint64_t t, sc_status st, replica_failure why, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void die(simrep *s, uint64_t t, sc_status st, replica_failure why, const char *fmt, ...) {
  key_list lost = {0};
  rk_each(&s->keys, key_add, &lost);
  for (size_t i = 0; i < lost.n; i++) {
    uint64_t id = rk_id(&s->keys, lost.v[i]);
    if (s->e) engine_cancel(s->e, id); // its FINISHED event is never translated
  }
  for (size_t i = s->held.head; i < s->held.n; i++) {
    const replica_event *ev = &s->held.v[i];
    if (ev->kind == REPLICA_EV_FINISHED || ev->kind == REPLICA_EV_FAILED) key_add(&lost, ev->key);
  }
  if (lost.n) qsort(lost.v, lost.n, sizeof *lost.v, sc_cmp_u64);
  for (size_t i = 0; i < lost.n; i++)
    if (i == 0 || lost.v[i] != lost.v[i - 1]) push_failed(&s->ready, lost.v[i], st, why, t);
  free(lost.v);
  rk_free(&s->keys);
  s->held.head = s->held.n = 0;
  s->busy = s->frozen = s->hung = s->rank_hung = s->rank_deadline_set = s->loading = false;
  s->dead = true;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->error, sizeof s->error, fmt, ap);
  va_end(ap);
}

// --- stepping

// Runs one engine step at time t; its events are held until it ends (released at once when it
// ran nothing). Under CORRUPT, a request that produced a token fails instead.
static void start_step(simrep *s, uint64_t t) {
  engine_step_result res;
  sc_error err = {{0}};
  if (s->peers) { // the ranks sharing the host during this step: its own and its busy peers'
    int ranks = s->n_ranks;
    for (int i = 0; i < s->n_peers; i++) {
      const simrep *p = replica_is_sim(s->peers[i]) ? s->peers[i]->ctx : NULL;
      if (p && p != s && p->busy && !p->frozen && !p->dead && p->busy_until > t)
        ranks += p->n_ranks;
    }
    engine_sim_set_cluster_ranks(s->e, ranks);
  }
  sc_status st = engine_step(s->e, &res, &err);
  if (st != SC_OK) { // the cost model refused: a bug or an impossible layout, not a fault
    die(s, t, st, REPLICA_FAIL_FAILED, "%s", err.msg[0] ? err.msg : sc_status_name(st));
    return;
  }
  if (res.info.duration_ns == 0 && res.n_events == 0 && !engine_idle(s->e)) {
    die(s, t, SC_INVALID, REPLICA_FAIL_FAILED,
        "the scheduler ran nothing while %d requests wait (a scheduler bug)", res.info.queue_len);
    return;
  }
  uint64_t d = res.info.duration_ns;
  if (d > 0 && s->slow_factor > 1) {
    double x = (double)d * s->slow_factor + 0.5;
    d = x >= 1.8e19 ? UINT64_MAX / 2 : (uint64_t)x;
    res.info.duration_ns = d;
  }
  uint64_t end = t + d;
  replica_evq *q = d > 0 ? &s->held : &s->ready;
  // poisoned rows: every live request with a token in this step (one token per request)
  size_t n_bad = 0;
  if (s->corrupt && bad_reserve(s, (size_t)res.n_events)) {
    for (int i = 0; i < res.n_events; i++)
      if (res.events[i].kind == ENGINE_EV_TOKEN && live(s, res.events[i].req_id))
        s->bad[n_bad++] = res.events[i].req_id;
    if (n_bad) qsort(s->bad, n_bad, sizeof *s->bad, sc_cmp_u64);
  }
  for (int i = 0; i < res.n_events; i++) {
    const engine_event *e = &res.events[i];
    if (n_bad && bsearch(&e->req_id, s->bad, n_bad, sizeof *s->bad, sc_cmp_u64)) continue;
    if (!live(s, e->req_id)) continue; // a request already failed here (its cancel's FINISHED)
    replica_event ev = rk_event(&s->keys, e, end);
    rq_push(q, &ev);
  }
  // res.events is not used past this point: engine_cancel may move it
  for (size_t i = 0; i < n_bad; i++) {
    uint64_t id = s->bad[i], key = s->keys.id_to_key[id];
    push_failed(q, key, SC_NUMERICAL, REPLICA_FAIL_NUMERICAL, end);
    rk_del(&s->keys, key);
    engine_cancel(s->e, id); // frees its blocks; the FINISHED event that follows is dropped
    s->numerical_failures++;
  }
  if (d > 0) {
    rq_push(q, &(replica_event){.kind = REPLICA_EV_STEP, .step = res.info, .t_ns = end});
    s->busy = true;
    s->step_start = t;
    s->busy_until = end;
    if (s->rank_hung) { // the hung rank blocks this step in its first op
      s->frozen = true;
      s->frozen_at = t;
      s->rank_deadline_set = true;
      s->rank_deadline = t + collective_ns(s);
    }
  }
}

// The step in flight goes on at t after being frozen since frozen_at: it and its held events
// end later by that long (the STEP event's duration includes the stall, as a clock would).
static void unfreeze(simrep *s, uint64_t t) {
  if (!s->frozen) return;
  uint64_t shift = t - s->frozen_at;
  s->busy_until += shift;
  for (size_t i = s->held.head; i < s->held.n; i++) {
    s->held.v[i].t_ns += shift;
    if (s->held.v[i].kind == REPLICA_EV_STEP) s->held.v[i].step.duration_ns += shift;
  }
  s->frozen = false;
}

// Releases the step in flight when it has ended by now.
static void settle(simrep *s, uint64_t now) {
  if (!s->busy || s->frozen || s->busy_until > now) return;
  for (size_t i = s->held.head; i < s->held.n; i++) rq_push(&s->ready, &s->held.v[i]);
  s->held.head = s->held.n = 0;
  s->busy = false;
}

// A lost device fails the step in flight, or the next step when there is work: dies at t.
static void check_lost_rank(simrep *s, uint64_t t) {
  if (s->dead || s->lost_rank < 0 || s->hung || s->loading) return;
  if (s->busy || !engine_idle(s->e))
    die(s, t, SC_DEVICE, REPLICA_FAIL_FAILED, "rank %d: device lost", s->lost_rank);
}

// The deadlines (heartbeat, collective) that have passed by now: dies at the earlier one.
static void check_deadlines(simrep *s, uint64_t now) {
  bool h = s->hung && s->hang_deadline <= now;
  bool c = s->rank_hung && s->rank_deadline_set && s->rank_deadline <= now;
  if (h && (!c || s->hang_deadline <= s->rank_deadline)) {
    uint64_t ns = detect_ns(s);
    die(s, s->hang_deadline, SC_ABORTED, REPLICA_FAIL_LOST,
        "no heartbeat for %llu.%03llu s (hung?)",
        (unsigned long long)(ns / 1000000000ull),
        (unsigned long long)(ns % 1000000000ull / 1000000ull));
  } else if (c) {
    if (s->n_ranks > 1)
      die(s, s->rank_deadline, SC_TIMEOUT, REPLICA_FAIL_FAILED,
          "rank %d: collective deadline passed (a peer stopped answering)", s->hung_rank);
    else
      die(s, s->rank_deadline, SC_TIMEOUT, REPLICA_FAIL_FAILED,
          "rank 0: step did not finish within the collective deadline");
  }
}

static uint64_t s_next_ns(void *ctx) {
  simrep *s = ctx;
  if (s->dead) return UINT64_MAX;
  uint64_t t = UINT64_MAX;
  if (s->hung && s->hang_deadline < t) t = s->hang_deadline;
  if (s->rank_hung && s->rank_deadline_set && s->rank_deadline < t) t = s->rank_deadline;
  if (s->loading) return s->ready_at < t ? s->ready_at : t;
  if (s->busy) {
    if (!s->frozen && s->busy_until < t) t = s->busy_until;
  } else if (!s->hung && !engine_idle(s->e)) {
    uint64_t now = now_ns(s);
    if (now < t) t = now;
  }
  return t;
}

static bool s_advance(void *ctx, uint64_t now) {
  simrep *s = ctx;
  size_t before = rq_len(&s->ready);
  if (s->dead) return false;
  check_deadlines(s, now);
  if (!s->dead && s->loading && s->ready_at <= now) s->loading = false;
  if (!s->dead && !s->loading) {
    settle(s, now);
    check_lost_rank(s, now);
    if (!s->dead && !s->busy && !s->hung && !engine_idle(s->e)) start_step(s, now);
  }
  return rq_len(&s->ready) > before;
}

// --- faults

// Prices the replica's steps on links throttled by the SLOW_LINK fault in force (none: the
// caller's device as is).
static void apply_link_fault(simrep *s) {
  *s->hw = *s->hw_base;
  double f = s->link_factor > 1 ? s->link_factor : 1;
  double lat = (double)s->link_latency_ns * 1e-9, cap = s->link_bandwidth;
  if (f == 1 && lat == 0 && cap <= 0) return;
  sim_link *links[2] = {&s->hw->intra, &s->hw->inter};
  for (int i = 0; i < 2; i++) {
    links[i]->bw /= f;
    if (cap > 0 && links[i]->bw > cap) links[i]->bw = cap;
    links[i]->latency_s += lat;
  }
  for (int i = 0; i < s->hw->n_coll; i++) { // measured all-reduce: slowed as a ring would be
    sim_coll_table *c = &s->hw->coll[i];
    int n = c->ranks;
    for (int j = 0; j < c->allreduce.n; j++) {
      double *y = &c->allreduce.y[j];
      *y = *y * f + 2.0 * (n - 1) * lat;
      if (cap > 0 && n > 1) {
        double floor_s = 2.0 * (n - 1) / n * c->allreduce.x[j] / cap;
        if (*y < floor_s) *y = floor_s;
      }
    }
  }
}

static void clear_faults(simrep *s) {
  s->slow_factor = 1;
  s->link_factor = 1;
  s->link_latency_ns = 0;
  s->link_bandwidth = 0;
  s->oom = s->oom_persistent = false;
  s->oom_left = 0;
  s->oom_streak = 0;
  s->corrupt = false;
  apply_link_fault(s);
}

static sc_status s_inject(void *ctx, const replica_fault *f, sc_error *err) {
  simrep *s = ctx;
  if (!replica_fault_kind_info(f->kind))
    return sc_fail(err, SC_INVALID, "replica: unknown fault kind %d", (int)f->kind);
  if (f->rank < -1 || f->rank >= s->n_ranks)
    return sc_fail(err, SC_INVALID, "replica: rank %d out of range (the replica has ranks 0..%d)",
                   f->rank, s->n_ranks - 1);
  if (s->dead) return sc_fail(err, SC_ABORTED, "replica: dead (%s)", s->error);
  uint64_t now = now_ns(s);
  settle(s, now); // a step that ended by now is done before the fault lands
  int rank = f->rank < 0 ? 0 : f->rank;
  switch (f->kind) {
  case RFAULT_KILL: die(s, now, SC_ABORTED, REPLICA_FAIL_LOST, "killed (fault injection)"); break;
  case RFAULT_KILL_RANK:
    if (s->lost_rank < 0) s->lost_rank = rank;
    check_lost_rank(s, now);
    break;
  case RFAULT_HANG:
    if (s->hung) break;
    s->hung = true;
    s->hang_deadline = now + detect_ns(s);
    if (s->busy && !s->frozen) {
      s->frozen = true;
      s->frozen_at = now;
    }
    break;
  case RFAULT_HANG_RANK:
    if (s->rank_hung) break;
    s->rank_hung = true;
    s->hung_rank = rank;
    if (s->busy) { // the step in flight blocks; its peers wait from its start
      if (!s->frozen) {
        s->frozen = true;
        s->frozen_at = now;
      }
      s->rank_deadline_set = true;
      s->rank_deadline = s->step_start + collective_ns(s);
      if (s->rank_deadline < now) s->rank_deadline = now;
    }
    break;
  case RFAULT_RESUME:
    if (!s->hung && !s->rank_hung) break;
    s->hung = s->rank_hung = s->rank_deadline_set = false;
    unfreeze(s, now);
    check_lost_rank(s, now);
    break;
  case RFAULT_SLOW_RANK:
    if (f->factor > s->slow_factor) s->slow_factor = f->factor;
    break;
  case RFAULT_SLOW_LINK:
    s->link_factor = f->factor > 1 ? f->factor : 1;
    s->link_latency_ns = f->latency_ns;
    s->link_bandwidth = f->bandwidth > 0 ? f->bandwidth : 0;
    apply_link_fault(s);
    break;
  case RFAULT_OOM:
    s->oom = true;
    s->oom_persistent = f->persistent;
    s->oom_left = f->after_allocs > 0 ? f->after_allocs : 0;
    break;
  case RFAULT_CORRUPT: s->corrupt = true; break;
  case RFAULT_CLEAR: clear_faults(s); break;
  case RFAULT_N: break; // not a kind: refused above
  }
  return SC_OK;
}

static sc_status s_restart(void *ctx, sc_error *err) {
  simrep *s = ctx;
  if (!s->dead) return sc_fail(err, SC_INVALID, "replica: only a dead replica restarts");
  engine_free(s->e);
  s->e = NULL;
  s->lost_rank = -1;
  clear_faults(s);
  sc_status st = engine_new(&s->cfg, &s->e, err);
  if (st != SC_OK) {
    snprintf(s->error, sizeof s->error, "restart failed: %.480s", err && err->msg[0] ? err->msg
                                                                            : sc_status_name(st));
    return st;
  }
  rk_free(&s->keys);
  s->held.head = s->held.n = 0;
  s->busy = s->frozen = false;
  s->dead = false;
  s->error[0] = 0;
  s->admitting = true;
  s->epoch++;
  // Loading one GPU's weights (static_bytes) at a PCIe-class host-to-device rate.
  double ns = s->cfg.sim.static_bytes / SIM_LOAD_BYTES_PER_S * 1e9 + 0.5;
  uint64_t load = ns > 0 ? (uint64_t)ns : 0;
  s->ready_at = now_ns(s) + load;
  s->loading = load > 0;
  return SC_OK;
}

static int s_epoch(void *ctx) { return ((simrep *)ctx)->epoch; }

// A swap is a death without a fault (whatever it still holds fails with "replica_lost") and a
// restart with the new weights: their load time is modelled like a restart's.
static sc_status s_swap(void *ctx, const engine_config *cfg, sc_error *err) {
  simrep *s = ctx;
  if (s->dead) return sc_fail(err, SC_ABORTED, "replica: dead (%s)", s->error);
  uint64_t now = now_ns(s);
  settle(s, now);
  die(s, now, SC_ABORTED, REPLICA_FAIL_LOST, "its weights were swapped");
  s->cfg.model = cfg->model;
  s->cfg.weights_dir = cfg->weights_dir;
  s->cfg.weights_seed = cfg->weights_seed;
  s->cfg.weight_dtype = cfg->weight_dtype;
  s->cfg.sim.model = cfg->sim.model;
  s->cfg.sim.static_bytes = cfg->sim.static_bytes;
  return s_restart(s, err);
}

// --- vtable
static sc_status s_submit(void *ctx, uint64_t key, const engine_request *q, sc_error *err) {
  simrep *s = ctx;
  if (s->dead) return sc_fail(err, SC_ABORTED, "replica: dead (%s)", s->error);
  uint64_t id = 0;
  sc_error e = {{0}};
  sc_status st = engine_submit(s->e, q, &id, &e);
  if (st == SC_OK && !rk_put(&s->keys, key, id)) {
    engine_cancel(s->e, id);
    st = SC_OOM;
  } else if (st == SC_OK && s->oom) { // admission is where a simulated replica allocates
    if (s->oom_left > 0) {
      s->oom_left--;
    } else {
      rk_del(&s->keys, key); // its cancel's FINISHED event is dropped
      engine_cancel(s->e, id);
      st = SC_OOM;
      s->oom_failures++;
      s->oom_streak++;
      if (!s->oom_persistent) s->oom = false;
    }
  }
  if (st == SC_OK) s->oom_streak = 0;
  if (st != SC_OK) {
    replica_event ev = {.kind = REPLICA_EV_FAILED, .key = key, .status = st,
                        .failure = replica_failure_of(st), .t_ns = now_ns(s)};
    if (!rq_push(&s->ready, &ev)) return sc_fail(err, SC_OOM, "replica: out of memory");
  }
  return SC_OK;
}

static void s_cancel(void *ctx, uint64_t key) {
  simrep *s = ctx;
  if (s->dead) return;
  uint64_t id = rk_id(&s->keys, key);
  if (id) engine_cancel(s->e, id);
}

static int s_poll(void *ctx, replica_event *out, int cap) {
  return rq_take(&((simrep *)ctx)->ready, out, cap);
}

static replica_health s_health(void *ctx) {
  simrep *s = ctx;
  if (s->dead) return REPLICA_DEAD;
  if (s->loading) return REPLICA_DRAINING;
  if (s->oom_streak >= SIM_OOM_UNHEALTHY) return REPLICA_UNHEALTHY;
  return s->admitting ? REPLICA_HEALTHY : REPLICA_DRAINING;
}

static void s_set_admitting(void *ctx, bool admitting) {
  simrep *s = ctx;
  s->admitting = admitting;
  if (s->e) engine_set_admitting(s->e, admitting);
}

static void s_stats(void *ctx, engine_stats *out) {
  simrep *s = ctx;
  if (!s->e) {
    *out = (engine_stats){.n_ranks = s->n_ranks};
  } else {
    engine_stats_get(s->e, out);
  }
  out->oom_failures += s->oom_failures;
  out->numerical_failures += s->numerical_failures;
  out->unhealthy = out->unhealthy || s->oom_streak >= SIM_OOM_UNHEALTHY;
}

static sc_status s_rank_mem(void *ctx, int r, size_t *used, size_t *total) {
  simrep *s = ctx;
  if (!s->e) return SC_ABORTED;
  return engine_rank_mem(s->e, r, used, total);
}

static const char *s_error(void *ctx) { return ((simrep *)ctx)->error; }

static void s_free(void *ctx) {
  simrep *s = ctx;
  if (!s) return;
  engine_free(s->e);
  rk_free(&s->keys);
  rq_free(&s->ready);
  rq_free(&s->held);
  free(s->bad);
  free(s->hw);
  free(s);
}

static void s_set_peers(void *ctx, replica *const *reps, int n) {
  simrep *s = ctx;
  s->peers = reps;
  s->n_peers = n;
}

static const replica_i sim_i = {
    .submit = s_submit,
    .cancel = s_cancel,
    .poll = s_poll,
    .wait_fd = NULL,
    .health = s_health,
    .set_admitting = s_set_admitting,
    .stats = s_stats,
    .rank_mem = s_rank_mem,
    .error = s_error,
    .inject = s_inject,
    .restart = s_restart,
    .epoch = s_epoch,
    .swap = s_swap,
    .next_ns = s_next_ns,
    .advance = s_advance,
    .set_peers = s_set_peers,
    .free = s_free,
};

bool replica_is_sim(const replica *r) { return r && r->i == &sim_i; }

sc_status replica_sim_new(const engine_config *cfg, int index, replica **out, sc_error *err) {
  *out = NULL;
  if (!cfg->clock.now_ns || !cfg->backend || strcmp(cfg->backend, "sim") != 0)
    return sc_fail(err, SC_INVALID, "replica: a simulated replica needs backend sim and a clock");
  simrep *s = calloc(1, sizeof *s);
  replica *r = calloc(1, sizeof *r);
  if (!s || !r) {
    free(s);
    free(r);
    return sc_fail(err, SC_OOM, "replica: out of memory");
  }
  s->cfg = *cfg;
  s->admitting = true;
  s->epoch = 1;
  s->lost_rank = -1;
  s->n_ranks = cfg->tp * cfg->pp;
  if (cfg->sim.hw) { // the engine refuses a missing device itself
    s->hw_base = cfg->sim.hw;
    s->hw = malloc(sizeof *s->hw);
    if (!s->hw) {
      s_free(s);
      free(r);
      return sc_fail(err, SC_OOM, "replica: out of memory");
    }
    s->cfg.sim.hw = s->hw;
    clear_faults(s);
  }
  sc_status st = engine_new(&s->cfg, &s->e, err);
  if (st != SC_OK) {
    s_free(s);
    free(r);
    return st;
  }
  *r = (replica){.i = &sim_i, .ctx = s, .index = index, .n_ranks = s->n_ranks};
  *out = r;
  return SC_OK;
}
