// The runner's event loop (see runner.h): deployments one after another, each built as DP
// replicas, each phase driven to its end and drained before the next, every request, token,
// step and device sample recorded as it happens, metrics and verdicts computed at the end.
//
// Time: every stamp is read from the run's clock at the moment the runner sees the event (what
// a client would see), and stored as ns since the run's start. An arrival is stamped with the
// time it was scheduled for (open loop: the arrival process; closed loop: the previous
// request's end plus think time), so a runner that falls behind shows up as latency rather than
// vanishing from it. Phases are drained: a phase ends when it has stopped sending and its last
// request has ended, so each phase's numbers are its own.
// Not here: the progress lines (runner/progress.c), the metric rows, checks and SLO verdicts
// (runner/verdicts.c), an external target's replica options (runner/target.c), all three
// behind runner/runner_impl.h; routing, retries and resumes (serving/router.c), the faults and
// their verdicts (faults/runtime.h, called at named points), the formulas (reports/metrics.c),
// the SQL (reports/store.c), plots (reports/).
#include "runner/runner_impl.h"

#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "faults/timeline.h"
#include "kernels/util.h"
#include "kernels/device.h"
#include "scenarios/deployment.h"

static const uint64_t TICK_NS = 10000000ull;      // timeout scan period
static const uint64_t SAMPLE_NS = 1000000000ull;  // device samples and flushes
// After faults, settle: replicas report what they still owe (a storm's cancel acks, a heartbeat
// after their last step) for at least SETTLE_QUIET_NS (real mode), at most SETTLE_MAX_NS,
// looked at every SETTLE_POLL_NS.
static const uint64_t SETTLE_QUIET_NS = 300000000ull;
static const uint64_t SETTLE_MAX_NS = 5000000000ull;
static const uint64_t SETTLE_POLL_NS = 50000000ull;

runner_options runner_options_defaults(void) {
  return (runner_options){.progress = RUNNER_PROGRESS_AUTO};
}

// --- requests
static const char *status_name(req_status s) {
  switch (s) {
  case REQ_OK: return "ok";
  case REQ_CANCELLED: return "cancelled";
  case REQ_FAILED: return "failed";
  case REQ_TIMEOUT: return "timeout";
  }
  return "failed";
}

// Ends request k with status st at time t and records it; its user (closed loop) may send again.
static void finish_req(rt *r, uint64_t k, req_status st, const char *reason, const char *error,
                uint64_t t) {
  req_rec *q = &r->reqs.v[k];
  if (!router_end(r->rt, k, st)) return;
  q->finish = t;
  snprintf(q->reason, sizeof q->reason, "%s", reason ? reason : "");
  const phase_run *ph = &r->phases[q->phase];
  store_request row = {.run_id = r->run_id,
                       .deployment_id = r->dep_id,
                       .phase_id = ph->id,
                       .seq = (int64_t)k,
                       .class_name = workload_class_name(r->wl, q->class_idx),
                       .replica = q->dispatched ? q->replica : -1,
                       .prompt_tokens = q->prompt_tokens,
                       .max_tokens = q->max_tokens,
                       .output_tokens = q->n_tok,
                       .arrival_ns = q->arrival,
                       .dispatch_ns = q->dispatch,
                       .has_dispatch = q->dispatched,
                       .first_token_ns = q->n_tok ? q->tok[0] : 0,
                       .has_first_token = q->n_tok > 0,
                       .finish_ns = t,
                       .has_finish = true,
                       .status = status_name(st),
                       .reason = q->reason[0] ? q->reason : NULL,
                       .error = error,
                       .retries = q->retries,
                       .weight_version = q->version,
                       .has_cached = q->has_cached,
                       .cached_tokens = q->cached_tokens,
                       .warmup = q->warmup};
  if (r->s->record == SCN_RECORD_TOKENS)
    rec_request(r->rec, &row, q->tok, q->n_tok);
  else if (r->s->record == SCN_RECORD_REQUESTS)
    rec_request(r->rec, &row, NULL, 0);
  r->res->tokens += (uint64_t)q->n_tok;
  // A conversation goes on after a turn that ended well (think time later), else it ends.
  bool more = q->conv && st == REQ_OK && !r->stopping &&
              q->turn + 1 < workload_turns(r->wl, q->conv - 1);
  uint64_t think = workload_think_ns(r->wl);
  if (q->user >= 0 && q->user < r->n_users) {
    uint64_t next = t + (more ? think : ph->p->think_ns);
    if (q->conv) {
      r->user_conv[q->user] = more ? (int64_t)q->conv - 1 : -1;
      r->user_turn[q->user] = more ? q->turn + 1 : 0;
      r->user_prev[q->user] = more ? k : UINT64_MAX;
    }
    r->user_next[q->user] = next;
    if (next < r->user_wake) r->user_wake = next;
  } else if (more) {
    if (r->n_turns == r->cap_turns) {
      int cap = r->cap_turns ? 2 * r->cap_turns : 64;
      struct rn_turn *p = realloc(r->turns, (size_t)cap * sizeof *p);
      if (!p) {
        db_ok(r, sc_fail(&r->err, SC_OOM, "runner: out of memory keeping conversations"));
        return;
      }
      r->turns = p;
      r->cap_turns = cap;
    }
    r->turns[r->n_turns++] = (struct rn_turn){.t = t + think, .prev = k,
                                              .conv = (int64_t)q->conv - 1, .turn = q->turn + 1};
  }
}

static bool dispatch_req(rt *r, uint64_t k, uint64_t t);
static void send_turn(rt *r, uint64_t arrival, int user, int64_t conv, int turn, uint64_t prev);

// Sends the next request of the workload (a new conversation's first turn, or a closed-loop
// user's next turn) arriving at `arrival`, from `user` (-1: open loop).
static void send_req(rt *r, uint64_t arrival, int user) {
  send_turn(r, arrival, user, -1, 0, UINT64_MAX);
}

// Sends the next request of the workload, arriving at `arrival`, from `user` (-1: open loop):
// with conversations, turn `turn` of conversation conv (prev: the key of the turn before,
// UINT64_MAX none; conv -1: a new one, or the user's own), else the next request.
static void send_turn(rt *r, uint64_t arrival, int user, int64_t conv, int turn, uint64_t prev) {
  uint64_t k = r->reqs.n;
  wl_request w;
  if (workload_conversations(r->wl)) {
    if (conv < 0 && user >= 0 && r->user_conv[user] >= 0) {
      conv = r->user_conv[user];
      turn = r->user_turn[user];
      prev = r->user_prev[user];
    } else if (conv < 0) {
      conv = r->next_conv++;
      turn = 0;
      prev = UINT64_MAX;
    }
    if (user >= 0) r->user_conv[user] = conv;
    workload_turn(r->wl, (uint64_t)conv, turn, &w);
  } else {
    workload_request(r->wl, k, &w);
    conv = w.conv; // a trace's conversation (request k is line k): its turn before is a key
    prev = w.prev >= 0 ? (uint64_t)w.prev : UINT64_MAX;
    turn = 0;
  }
  phase_run *ph = &r->phases[r->cur];
  uint64_t t = now_rel(r);
  req_rec q = {.arrival = arrival, .sent = t, .prompt_tokens = w.n_prompt,
               .max_tokens = w.max_tokens, .class_idx = w.class_idx, .phase = r->cur,
               .replica = -1, .user = user, .fault = -1, .state = REQ_INFLIGHT,
               .warmup = arrival < ph->warmup_end, .conv = (uint64_t)(conv + 1), .turn = turn,
               .prev = prev == UINT64_MAX ? 0 : prev + 1};
  if (!req_table_add(&r->reqs, &q, &k)) {
    db_ok(r, sc_fail(&r->err, SC_OOM, "runner: out of memory recording requests"));
    r->sending = false;
    return;
  }
  if (user >= 0 || turn == 0) r->sent++; // a rate phase counts its arrivals
  r->res->requests++;
  if (user >= 0) r->user_next[user] = UINT64_MAX;
  if (!dispatch_req(r, k, t) && !router_hold(r->rt, k, t))
    finish_req(r, k, REQ_FAILED, "no_replica", "no healthy replica to send the request to", t);
}

// Sends request k (not dispatched) to the replica the router picks at time t (router_send):
// its prompt, continued by the tokens already delivered when it has some (a resume). False when
// no replica can take it (nothing changed). A submit the replica refuses ends the request as
// failed.
static bool dispatch_req(rt *r, uint64_t k, uint64_t t) {
  wl_request w;
  const req_rec *q = &r->reqs.v[k];
  workload_prompt(r->wl, k, (int64_t)q->conv - 1, q->turn, &w);
  engine_request er = {.prompt = w.prompt,
                       .n_prompt = w.n_prompt,
                       .max_tokens = w.max_tokens,
                       .sampling = {.temperature = (float)r->s->workload.temperature,
                                    .top_p = (float)r->s->workload.top_p,
                                    .seed = r->seed ^ (k * 0x9E3779B97F4A7C15ull)},
                       .stop_at_eos = r->s->workload.stop_at_eos};
  sc_error e = {{0}};
  switch (router_send(r->rt, k, &er, t, &e)) {
  case ROUTER_NONE: return false;
  case ROUTER_SEND_OOM:
    finish_req(r, k, REQ_FAILED, "oom", "runner: out of memory resuming a request", t);
    break;
  case ROUTER_REFUSED: finish_req(r, k, REQ_FAILED, "replica_failed", e.msg, t); break;
  case ROUTER_SENT: break;
  }
  return true;
}

// Request k is past the request timeout at time t: the client gave up at arrival + limit, so
// that is its end, and tokens seen after it are not its.
// Why request k, about to time out, was left unanswered by the failover path: a request whose
// replica was lost under it (a loss event, or its replica dead or restarted since it was sent)
// and that the router then neither retried, resumed nor failed. Fills why and returns true;
// false for a request that was merely slow (on a live replica, or waiting for a retry).
static bool abandoned(rt *r, uint64_t k, char *why, size_t cap) {
  const req_rec *q = &r->reqs.v[k];
  if (q->waiting) {
    if (router_waiting(r->rt, k)) return false;
    snprintf(why, cap, "it waited for a retry that the router never queued");
    return true;
  }
  if (!q->dispatched || router_busy(r->rt, q->replica)) return false;
  replica *rep = r->reps[q->replica];
  if (q->loss_seen)
    snprintf(why, cap, "replica%d was lost under it and nothing retried it", q->replica);
  else if (replica_health_get(rep) == REPLICA_DEAD)
    snprintf(why, cap, "replica%d died under it and nothing retried it", q->replica);
  else if (replica_epoch(rep) != q->epoch)
    snprintf(why, cap, "replica%d was restarted under it and nothing retried it", q->replica);
  else
    return false;
  return true;
}

static void time_out(rt *r, uint64_t k) {
  req_rec *q = &r->reqs.v[k];
  uint64_t limit = r->s->limits.request_timeout_ns;
  uint64_t end = q->arrival + limit;
  char why[128];
  bool lost = abandoned(r, k, why, sizeof why);
  while (q->n_tok > 0 && q->tok[q->n_tok - 1] > end) q->n_tok--;
  if (q->dispatched && !q->waiting && !router_busy(r->rt, q->replica))
    replica_cancel(r->reps[q->replica], k);
  char msg[224];
  snprintf(msg, sizeof msg, "not finished %.3f s after arrival%s%s", (double)limit / 1e9,
           lost ? ": " : "", lost ? why : "");
  // The client sees a timeout either way; the reason tells a lost request from a slow one.
  finish_req(r, k, REQ_TIMEOUT, lost ? "replica_lost" : "timeout", msg, end);
}

// In a rate phase arrivals never decrease with the request index (and every request of an
// earlier phase has ended), so the scan stops at the first request still inside its limit: an
// overloaded phase keeps thousands of requests waiting, and scanning them all every tick was
// most of a simulated overload's time. Closed-loop users may send out of arrival order: there
// every request is looked at.
static void check_timeouts(rt *r, uint64_t now) {
  uint64_t limit = r->s->limits.request_timeout_ns;
  if (!limit) return;
  bool ordered = r->cur < r->n_phases && r->phases[r->cur].p->kind == SCN_PHASE_RATE;
  for (size_t k = r->reqs.low; k < r->reqs.n; k++) {
    req_rec *q = &r->reqs.v[k];
    if (q->state == REQ_DONE) continue;
    if (now - q->arrival > limit) time_out(r, k);
    else if (ordered) break;
  }
}

static bool past_timeout(const rt *r, const req_rec *q, uint64_t t) {
  return r->s->limits.request_timeout_ns && t - q->arrival > r->s->limits.request_timeout_ns;
}

// Whether every token q has came with its id (an HTTP server may send text only): a resume
// sends them back as the prompt's continuation.
static bool ids_known(const req_rec *q) {
  for (int i = 0; i < q->n_tok; i++)
    if (q->ids[i] < 0) return false;
  return true;
}

static void on_event(rt *r, int rep, const replica_event *ev, uint64_t t) {
  if (ev->kind == REPLICA_EV_STEP) {
    const engine_step_info *si = &ev->step;
    uint64_t ts = si->t_start_ns > r->t0 ? si->t_start_ns - r->t0 : 0;
    store_step st = {.run_id = r->run_id, .deployment_id = r->dep_id, .replica = rep,
                     .t_ns = ts, .duration_ns = si->duration_ns, .seqs = si->n_seqs,
                     .prefill_tokens = si->prefill_tokens, .decode_tokens = si->decode_tokens,
                     .preempted = si->n_preempted, .queue_len = si->queue_len,
                     .running = si->running, .kv_used = si->kv_used, .kv_total = si->kv_total};
    if (r->s->record == SCN_RECORD_TOKENS) rec_step(r->rec, &st);
    if (r->cur < r->n_phases) {
      phase_run *ph = &r->phases[r->cur];
      if (si->queue_len > ph->peak_queue) ph->peak_queue = si->queue_len;
      if (si->n_seqs > ph->peak_batch) ph->peak_batch = si->n_seqs;
      // the scenario's limits, not the engine's config: a limit lost on its way is caught too
      if (si->n_seqs > r->s->limits.max_running ||
          si->prefill_tokens + si->decode_tokens > r->s->limits.token_budget)
        ph->limit_violations++;
      ph->preemptions += si->n_preempted;
      double kv = si->kv_total ? (double)si->kv_used / si->kv_total : 0;
      if (kv > ph->kv_peak) ph->kv_peak = kv;
      ph->bubble_ns += si->bubble_frac * (double)si->duration_ns;
      ph->busy_ns += (double)si->duration_ns;
    }
    fault_rt_on_step(r->fr, rep, si, t);
    return;
  }
  if (ev->key >= r->reqs.n) return;
  req_rec *q = &r->reqs.v[ev->key];
  if (q->state == REQ_DONE || q->replica != rep || q->waiting) { // the client stopped listening
    fault_rt_on_late(r->fr, rep, ev, t);
    return;
  }
  if (past_timeout(r, q, t)) { // seen after the client gave up
    time_out(r, ev->key);
    return;
  }
  switch (ev->kind) {
  case REPLICA_EV_TOKEN:
    if (!req_add_token(q, ev->token, t)) {
      replica_cancel(r->reps[rep], ev->key);
      finish_req(r, ev->key, REQ_FAILED, "oom", "runner: out of memory recording tokens", t);
    } else {
      r->tok_window++;
    }
    break;
  case REPLICA_EV_FINISHED:
    if (ev->prompt_tokens > 0) q->prompt_tokens = ev->prompt_tokens; // the server's own count
    q->has_cached = ev->has_cached;
    q->cached_tokens = ev->cached_tokens;
    q->text_hash = ev->text_hash;
    if (ev->reason == FINISH_CANCELLED)
      finish_req(r, ev->key, REQ_CANCELLED, "cancelled", NULL, t);
    else
      finish_req(r, ev->key, REQ_OK, engine_finish_reason_name(ev->reason), NULL, t);
    break;
  case REPLICA_EV_FAILED: {
    fault_rt_on_failed(r->fr, rep, ev, t); // which fault caused it, if one did
    const char *msg = ev->what ? ev->what : replica_error(r->reps[rep]);
    if (replica_failure_is_loss(ev->failure)) { // the router retries, resumes or fails it
      q->loss_seen = true;
      if (q->n_tok > 0 && r->s->router.resume && !ids_known(q)) {
        char why[300];
        snprintf(why, sizeof why,
                 "its replica was lost mid-stream and the server sent no token "
                 "ids to resume from (%.200s)",
                 msg);
        finish_req(r, ev->key, REQ_FAILED, "replica_lost", why, t);
        break;
      }
      router_on_lost(r->rt, ev->key, rep, t);
      break;
    }
    if (ev->failure == REPLICA_FAIL_HTTP) { // the reason names the status
      char why[24];
      snprintf(why, sizeof why, "http_%d", ev->http_status);
      finish_req(r, ev->key, REQ_FAILED, why, msg, t);
      break;
    }
    finish_req(r, ev->key, REQ_FAILED, replica_failure_name(ev->failure),
               ev->status == SC_INVALID ? "the engine refused the request" : msg, t);
    break;
  }
  default: break;
  }
}

// Pulls every pending event from every replica, then handles them. Each chunk is stamped
// with the time it was pulled, and pulling (a copy) comes before handling (recording), so a
// token's stamp does not wait on the handling of the tokens pulled before it.
static void drain_events(rt *r) {
  size_t n = 0;
  for (int i = 0; i < r->n_reps; i++) {
    while (!router_busy(r->rt, i)) {
      if (r->cap_ev - n < EV_BATCH) {
        size_t cap = r->cap_ev ? r->cap_ev * 2 : 4 * EV_BATCH;
        replica_event *e = realloc(r->ev, cap * sizeof *e);
        ev_meta *m = realloc(r->ev_meta, cap * sizeof *m);
        if (e) r->ev = e;
        if (m) r->ev_meta = m;
        if (!e || !m) break; // handle what was pulled; the rest stays queued
        r->cap_ev = cap;
      }
      int got = replica_poll(r->reps[i], r->ev + n, EV_BATCH);
      if (got <= 0) break;
      uint64_t t = now_rel(r); // in hand now: seen no earlier than this
      bool own = r->reps[i]->client_stamps; // stamped as they arrived (an HTTP replica)
      for (int k = 0; k < got; k++) {
        uint64_t te = r->ev[n + (size_t)k].t_ns;
        uint64_t tk = !own ? t : te > r->t0 ? te - r->t0 : 0;
        r->ev_meta[n + (size_t)k] = (ev_meta){.t = tk < t ? tk : t, .rep = i};
      }
      n += (size_t)got;
    }
  }
  for (size_t k = 0; k < n; k++) on_event(r, r->ev_meta[k].rep, &r->ev[k], r->ev_meta[k].t);
}

// Sim mode: advances the virtual clock to the earlier of `deadline` (ns since the run's
// start) and the first moment a replica has events to hand back, starting the steps of idle
// replicas that have work on the way (a started step is priced at once and ends later).
static void sim_wait_until(rt *r, uint64_t deadline) {
  uint64_t until = r->t0 + deadline;
  for (;;) {
    uint64_t t = UINT64_MAX;
    for (int i = 0; i < r->n_reps; i++) {
      uint64_t n = replica_next_ns(r->reps[i]);
      if (n < t) t = n;
    }
    if (t > until) {
      if (until > r->vnow) r->vnow = until;
      return;
    }
    if (t > r->vnow) r->vnow = t;
    bool ready = false;
    for (int i = 0; i < r->n_reps; i++)
      if (replica_next_ns(r->reps[i]) <= r->vnow)
        ready |= replica_advance(r->reps[i], r->vnow);
    if (ready) return;
  }
}

// Real mode: sleeps until `deadline` (ns since the run's start) or until a replica has
// events or a signal arrives. Sim mode: sim_wait_until.
static void wait_until(rt *r, uint64_t deadline) {
  if (r->sim) {
    sim_wait_until(r, deadline);
    return;
  }
  struct pollfd *fds = r->fds;
  int n = 0;
  for (int i = 0; i < r->n_reps; i++) {
    int fd = router_busy(r->rt, i) ? -1 : replica_wait_fd(r->reps[i]);
    if (fd >= 0) fds[n++] = (struct pollfd){.fd = fd, .events = POLLIN};
  }
  uint64_t now = now_rel(r);
  uint64_t d = deadline > now ? deadline - now : 0;
  struct timespec ts = {.tv_sec = (time_t)(d / 1000000000ull),
                        .tv_nsec = (long)(d % 1000000000ull)};
  ppoll(fds, (nfds_t)n, &ts, NULL);
}

// --- periodic work
// Replica i's new scrape m into its prefix-cache figures: its counters' growth since the
// previous scrape taken goes to phase ph (NULL: between phases, dropped), or its gauge to ph's
// mean. A counter that went down (the server restarted) or counters that stopped parsing leave
// ph without the figure, saying why.
static void sample_cache(rt *r, phase_run *ph, int i, const replica_server_metrics *m) {
  srv_cache *c = &r->cache_seen[i];
  if (m->has_cache) {
    if (ph && c->have) {
      if (m->cache_hits < c->hits || m->cache_queries < c->queries) {
        snprintf(ph->cache_bad, sizeof ph->cache_bad,
                 "replica%d: its prefix-cache counters went down (%.0f / %.0f after %.0f / "
                 "%.0f: the server restarted?)", i, m->cache_hits, m->cache_queries, c->hits,
                 c->queries);
      } else {
        ph->cache_hits += m->cache_hits - c->hits;
        ph->cache_queries += m->cache_queries - c->queries;
        ph->cache_names = m->cache_names;
        if (c->ph != ph) ph->cache_reps++;
        c->ph = ph;
      }
    }
    c->have = true;
    c->hits = m->cache_hits;
    c->queries = m->cache_queries;
    return;
  }
  if (ph && m->cache_why[0])
    snprintf(ph->cache_bad, sizeof ph->cache_bad, "replica%d: %.140s", i, m->cache_why);
  else if (ph && c->have && !m->has_gauge)
    snprintf(ph->cache_bad, sizeof ph->cache_bad,
             "replica%d: its prefix-cache counters are gone from /metrics", i);
  c->have = false;
  if (ph && m->has_gauge) {
    ph->gauge_sum += m->cache_gauge;
    ph->gauge_n++;
    ph->cache_names = m->cache_names;
  }
}

// A scrape now (blocking, up to 2 s each) of every external server, or (counters_only) of
// those whose scrapes had prefix-cache counters, kept as its latest: what the next
// sample_servers takes, so that a phase's counters start and end with it.
static void scrape_servers_now(rt *r, bool counters_only) {
  for (int i = 0; i < r->n_reps; i++) {
    replica_server_metrics m;
    if (router_busy(r->rt, i) || (counters_only && !r->cache_seen[i].have)) continue;
    (void)replica_server_metrics_get(r->reps[i], REPLICA_SM_NOW, &m);
  }
}

// An external server's scrapes per replica since the previous call: a server_sample row for
// the latest when it is new, and what they showed (scrapes, busy ones, peaks) added to phase
// ph's figures (NULL: between phases, dropped).
static void sample_servers(rt *r, phase_run *ph) {
  for (int i = 0; i < r->n_reps; i++) {
    replica_server_metrics m;
    if (router_busy(r->rt, i)) continue;
    bool got = replica_server_metrics_get(r->reps[i], REPLICA_SM_LATEST, &m);
    if (ph && m.n_scrapes > 0) {
      if (!ph->srv_scrapes) ph->srv_running = ph->srv_waiting = ph->srv_kv = NAN;
      ph->srv_scrapes += m.n_scrapes;
      ph->srv_busy += m.n_busy;
      ph->srv_running = isnan(ph->srv_running) ? m.peak_running
                                               : fmax(ph->srv_running, m.peak_running);
      ph->srv_waiting = isnan(ph->srv_waiting) ? m.peak_waiting
                                               : fmax(ph->srv_waiting, m.peak_waiting);
      ph->srv_kv = isnan(ph->srv_kv) ? m.peak_kv : fmax(ph->srv_kv, m.peak_kv);
    }
    if (ph && m.why[0]) snprintf(ph->srv_why, sizeof ph->srv_why, "replica%d: %.180s", i, m.why);
    if (!got || m.t_ns == r->server_seen[i]) continue;
    r->server_seen[i] = m.t_ns;
    sample_cache(r, ph, i, &m);
    store_server_sample row = {.run_id = r->run_id,
                               .deployment_id = r->dep_id,
                               .replica = i,
                               .t_ns = m.t_ns > r->t0 ? m.t_ns - r->t0 : 0,
                               .running = m.running,
                               .waiting = m.waiting,
                               .kv_usage = m.kv_usage,
                               .kv_blocks = m.kv_blocks};
    rec_lock(r->rec);
    db_ok(r, store_server_sample_add(r->db, &row, &r->err));
    rec_unlock(r->rec);
  }
}

static void sample_devices(rt *r, uint64_t now) {
  for (int i = 0; i < r->n_reps && r->s->record != SCN_RECORD_SUMMARY; i++)
    for (int k = 0; k < r->reps[i]->n_ranks && !router_busy(r->rt, i); k++) {
      size_t used = 0, total = 0;
      if (replica_rank_mem(r->reps[i], k, &used, &total) != SC_OK) continue;
      store_device_sample d = {.run_id = r->run_id, .deployment_id = r->dep_id, .replica = i,
                               .rank = k, .t_ns = now, .mem_used = used, .mem_total = total,
                               .link_bytes = -1};
      rec_sample(r->rec, &d);
    }
  rec_flush(r->rec);
}

static void periodic(rt *r, uint64_t now) {
  if (now >= r->next_tick) {
    check_timeouts(r, now);
    r->next_tick = now + TICK_NS;
  }
  if (now >= r->next_sample) {
    sample_devices(r, now);
    if (r->server_seen) sample_servers(r, r->cur < r->n_phases ? &r->phases[r->cur] : NULL);
    r->next_sample = now + SAMPLE_NS;
    double el = (double)(now - r->tok_window_start) / 1e9;
    if (el > 0) r->tok_rate = (double)r->tok_window / el;
    r->tok_window = 0;
    r->tok_window_start = now;
  }
  rn_progress(r, now, false);
}

// --- one phase run
// The open loop's conversations: the turns due at now (their conversations began in this
// phase, which waits for them: they are sent after its arrivals stopped too).
static void issue_turns(rt *r, uint64_t now) {
  for (int i = 0; i < r->n_turns;) {
    struct rn_turn x = r->turns[i];
    if (x.t > now) {
      i++;
      continue;
    }
    r->turns[i] = r->turns[--r->n_turns];
    send_turn(r, x.t, -1, x.conv, x.turn, x.prev);
  }
}

static void issue_due(rt *r, uint64_t now) {
  phase_run *ph = &r->phases[r->cur];
  const scn_phase *p = ph->p;
  if (r->n_turns) issue_turns(r, now);
  if (!r->sending) return;
  if (p->kind == SCN_PHASE_RATE) {
    while (r->sending && r->next_arrival <= now) {
      if ((p->duration_ns && r->next_arrival >= r->send_end) ||
          (p->requests && r->sent >= p->requests)) {
        r->sending = false;
        break;
      }
      send_req(r, r->next_arrival, -1);
      r->arrival_j++;
      r->next_arrival += workload_gap_ns(r->wl, (int)(p - r->s->workload.phases), r->arrival_j);
    }
    if (p->requests && r->sent >= p->requests) r->sending = false;
    if (p->duration_ns && r->next_arrival >= r->send_end) r->sending = false;
    return;
  }
  // closed loop
  if (p->kind == SCN_PHASE_RAMP && now >= r->send_end) {
    r->sending = false;
    return;
  }
  if (r->user_wake > now) return;
  uint64_t wake = UINT64_MAX;
  for (int u = 0; u < r->n_users && r->sending; u++) {
    uint64_t t = r->user_next[u];
    if (t <= now) {
      if (p->kind == SCN_PHASE_RAMP && t >= r->send_end) continue;
      if (p->kind == SCN_PHASE_FIXED && r->sent >= p->requests) {
        r->sending = false;
        break;
      }
      send_req(r, t, u);
      t = r->user_next[u]; // UINT64_MAX, or a time if it ended at once
    }
    if (t < wake) wake = t;
  }
  r->user_wake = wake;
  if (p->kind == SCN_PHASE_FIXED && r->sent >= p->requests) r->sending = false;
}

static uint64_t next_deadline(rt *r, uint64_t now) {
  uint64_t d = r->next_tick;
  if (r->next_sample < d) d = r->next_sample;
  if (!r->sim && r->o->progress != RUNNER_PROGRESS_NONE && r->next_line < d) d = r->next_line;
  for (int i = 0; i < r->n_turns; i++)
    if (r->turns[i].t < d) d = r->turns[i].t;
  if (r->sending) {
    const scn_phase *p = r->phases[r->cur].p;
    if (p->kind == SCN_PHASE_RATE) {
      if (r->next_arrival < d) d = r->next_arrival;
    } else {
      if (r->user_wake < d) d = r->user_wake;
      if (p->kind == SCN_PHASE_RAMP && r->send_end < d) d = r->send_end;
    }
  }
  uint64_t f = fault_rt_next(r->fr);
  if (f < d) d = f;
  uint64_t g = router_next(r->rt);
  if (g < d) d = g;
  return d > now ? d : now;
}

// issue_due with each replica it submits to held (replica_hold, from the first submission to it,
// rt_before_submit, until every due request is out), so that the requests due at one instant
// (closed-loop users whose requests finished in one step, say) start in one engine step rather
// than in however many the engine begins while they are submitted one by one. A turn with
// nothing due holds nothing.
static void issue_together(rt *r, uint64_t now) {
  r->holding = true;
  issue_due(r, now);
  r->holding = false;
  for (int i = 0; i < r->n_reps; i++)
    if (r->held[i]) {
      replica_hold(r->reps[i], false);
      r->held[i] = false;
    }
}

static void interrupt_inflight(rt *r, uint64_t now) {
  for (size_t k = r->reqs.low; k < r->reqs.n; k++) {
    req_rec *q = &r->reqs.v[k];
    if (q->state == REQ_DONE) continue;
    if (q->dispatched && !q->waiting && !router_busy(r->rt, q->replica))
      replica_cancel(r->reps[q->replica], k);
    finish_req(r, k, REQ_CANCELLED, "interrupted", "the run was interrupted", now);
  }
  r->sending = false;
}

// True when the deployment can serve nothing more: every replica is dead, none is being
// restarted, and none will be (no faults are planned, whose restarts could bring one back, or
// router.restart is off). Without this a closed loop would fail request after request at one
// instant: millions of rows, and a simulated run's clock would crawl.
static bool deployment_dead(rt *r) {
  if ((fault_rt_faulted(r->fr) && r->s->router.restart) || fault_rt_busy(r->fr)) return false;
  for (int i = 0; i < r->n_reps; i++)
    if (router_busy(r->rt, i) || replica_health_get(r->reps[i]) != REPLICA_DEAD) return false;
  return true;
}

static sc_status run_phase(rt *r, int k) {
  phase_run *ph = &r->phases[k];
  const scn_phase *p = ph->p;
  if (r->server_seen && k == 0) // where the first phase's prefix-cache counters start
    scrape_servers_now(r, false);
  if (r->server_seen) sample_servers(r, NULL); // between phases: nobody's
  r->cur = k;
  uint64_t start = now_rel(r);
  ph->start = start;
  ph->warmup_end = start + p->warmup_ns;
  ph->first_seq = r->reqs.n;
  store_phase sp = {.run_id = r->run_id, .deployment_id = r->dep_id, .idx = k, .name = ph->name,
                    .kind = scenario_phase_kind_name(p->kind), .concurrency = ph->concurrency,
                    .rate = p->kind == SCN_PHASE_RATE ? p->rate : 0,
                    .arrival = p->kind != SCN_PHASE_RATE ? NULL : workload_arrival_name(p->arrival),
                    .start_ns = start, .warmup_end_ns = ph->warmup_end};
  rec_lock(r->rec);
  sc_status s = store_phase_begin(r->db, &sp, &ph->id, &r->err);
  rec_unlock(r->rec);
  SC_TRY(s);
  r->sent = 0;
  r->sending = true;
  r->send_end = p->kind == SCN_PHASE_RAMP   ? start + p->hold_ns
                : p->kind == SCN_PHASE_RATE ? (p->duration_ns ? start + p->duration_ns : UINT64_MAX)
                                            : UINT64_MAX;
  r->n_users = ph->concurrency;
  for (int u = 0; u < r->n_users; u++) {
    r->user_next[u] = start;
    r->user_conv[u] = -1; // each phase's users begin new conversations
  }
  r->user_wake = start;
  if (p->kind == SCN_PHASE_RATE) {
    r->arrival_j = 0;
    r->next_arrival = start + workload_gap_ns(r->wl, (int)(p - r->s->workload.phases), 0);
  }
  r->next_line = (r->sim ? sc_monotonic_ns() : start) + (r->tty ? TTY_NS : LINE_NS);
  fault_rt_phase_started(r->fr, k, p, k > 0 ? r->phases[k - 1].p : NULL, start);
  for (;;) {
    uint64_t now = now_rel(r);
    if (r->o->interrupted && *r->o->interrupted && !r->stopping) {
      r->stopping = true;
      interrupt_inflight(r, now);
    }
    if (!r->stopping) issue_together(r, now);
    if (!r->stopping) { // retries, then faults (which may change health), then the probe
      router_tick(r->rt, now);
      fault_rt_tick(r->fr, now);
      router_probe(r->rt, now);
    }
    if (!r->stopping && !r->all_dead && r->sending && deployment_dead(r)) {
      r->all_dead = true;
      r->sending = false;
      rn_note(r, "%s: every replica is dead (replica 0: %s); the deployment stops in phase %s",
              r->dep->label, replica_error(r->reps[0]), ph->name);
    }
    periodic(r, now);
    // when it stopped: after this iteration's sends (a client behind its schedule sends its
    // backlog in one go, each send after the one before it, long past `now`)
    if (!r->sending && !ph->send_stop) ph->send_stop = now_rel(r);
    if (!r->sending && r->reqs.inflight == 0 && (r->n_turns == 0 || r->stopping)) break;
    if (r->db_status != SC_OK) break;
    wait_until(r, next_deadline(r, now_rel(r)));
    drain_events(r);
  }
  ph->end = now_rel(r);
  ph->end_seq = r->reqs.n;
  if (r->server_seen) { // the phase's last scrapes are its own; the last one now, unless a
    // fault may have hung a server (a scrape now would hold the loop up to 2 s)
    if (r->s->n_faults == 0) scrape_servers_now(r, true);
    sample_servers(r, ph);
  }
  rn_progress(r, ph->end, true);
  rec_lock(r->rec);
  s = store_phase_end(r->db, ph->id, ph->end, &r->err);
  rec_unlock(r->rec);
  SC_TRY(s);
  return r->db_status;
}

// --- a ramp that stops at saturation (scn_phase.saturation, docs/scenarios.md)
static int cmp_ms(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double rn_step_tok_s(const rt *r, const phase_run *ph, double *tokens) {
  double n = 0;
  for (size_t k = ph->first_seq; k < ph->end_seq; k++) {
    const req_rec *q = &r->reqs.v[k];
    for (int i = 0; i < q->n_tok; i++) n += q->tok[i] >= ph->warmup_end && q->tok[i] <= ph->end;
  }
  if (tokens) *tokens = n;
  return ph->end > ph->warmup_end ? n / ((double)(ph->end - ph->warmup_end) / 1e9) : NAN;
}

// Step ph's figures after its warm-up: its delivered output tok/s (rn_step_tok_s), and the TTFT
// p95 (ms) of its completed non-warm-up requests (NaN: none).
static void step_figures(rt *r, phase_run *ph) {
  size_t n = ph->end_seq - ph->first_seq;
  double *ttft = malloc((n ? n : 1) * sizeof *ttft);
  int m = 0;
  for (size_t k = ph->first_seq; k < ph->end_seq; k++) {
    const req_rec *q = &r->reqs.v[k];
    if (q->warmup) continue;
    if (ttft && q->status == REQ_OK && q->n_tok > 0)
      ttft[m++] = (double)(q->tok[0] - q->arrival) / 1e6;
  }
  ph->step_tok_s = rn_step_tok_s(r, ph, NULL);
  ph->step_ttft95 = NAN;
  if (ttft && m) {
    qsort(ttft, (size_t)m, sizeof *ttft, cmp_ms);
    ph->step_ttft95 = mt_percentile(ttft, m, 95);
  }
  free(ttft);
}

// Whether ramp step k is saturated: its output tok/s below (1 + gain) x the best earlier step's
// of the ramp while its TTFT p95 is past ttft_growth x the ramp's first step's. The knee (the
// step before it) goes to dr; the caller skips the ramp's later steps.
static bool ramp_saturated(rt *r, dep_result *dr, int k) {
  phase_run *ph = &r->phases[k];
  const scn_phase *p = ph->p;
  if (p->kind != SCN_PHASE_RAMP || !p->saturation) return false;
  step_figures(r, ph);
  int first = k;
  while (first > 0 && r->phases[first - 1].p == p) first--;
  if (first == k) {
    dr->has_sat = true;
    dr->sat_knee = NAN;
    return false;
  }
  double best = 0, base = r->phases[first].step_ttft95;
  for (int j = first; j < k; j++)
    if (r->phases[j].step_tok_s > best) best = r->phases[j].step_tok_s;
  if (!(ph->step_tok_s < best * (1 + p->sat_gain) && ph->step_ttft95 > p->sat_ttft * base))
    return false;
  dr->sat_knee = r->phases[k - 1].concurrency;
  rn_note(r, "%s: %s saturated: %.0f tok/s against %.0f before it, TTFT p95 %.0f ms against "
          "%.0f ms at %d users; the knee is %d users and the ramp's later steps are skipped",
          r->dep->label, ph->name, ph->step_tok_s, best, ph->step_ttft95, base,
          r->phases[first].concurrency, r->phases[k - 1].concurrency);
  return true;
}

// --- one deployment
// After faults: lets the replicas report what they still owe (a storm's cancel acks, a
// heartbeat after their last step) before the verdicts read their state; at most 5 s.
static void settle(rt *r) {
  if (!fault_rt_faulted(r->fr)) return;
  uint64_t start = now_rel(r);
  uint64_t quiet = start + (r->sim ? 0 : SETTLE_QUIET_NS);
  for (;;) {
    uint64_t now = now_rel(r);
    if ((now >= quiet && !fault_rt_busy(r->fr)) || now >= start + SETTLE_MAX_NS) break;
    wait_until(r, now + SETTLE_POLL_NS);
    drain_events(r);
  }
}

// Frees the replicas (the deployment's other state stays for its metrics).
static void free_replicas(rt *r) {
  for (int i = 0; i < r->n_reps; i++) replica_free(r->reps[i]);
  r->n_reps = 0;
}

static void free_deployment(rt *r) {
  free_replicas(r);
  fault_rt_free(r->fr);
  r->fr = NULL;
  free(r->reps);
  r->reps = NULL;
  r->n_reps = 0;
  free(r->held);
  r->held = NULL;
  free(r->fds);
  r->fds = NULL;
  free(r->server_seen);
  r->server_seen = NULL;
  free(r->cache_seen);
  r->cache_seen = NULL;
  router_free(r->rt);
  r->rt = NULL;
  req_table_clear(&r->reqs);
  free(r->phases);
  r->phases = NULL;
  r->n_phases = 0;
  free(r->user_next);
  r->user_next = NULL;
  free(r->user_conv);
  free(r->user_turn);
  free(r->user_prev);
  r->user_conv = NULL;
  r->user_turn = NULL;
  r->user_prev = NULL;
  r->n_turns = 0;
  r->next_conv = 0;
}

static sc_status build_phases(rt *r) {
  const scn_workload *w = &r->s->workload;
  int n = 0, max_users = 1;
  for (int i = 0; i < w->n_phases; i++)
    n += w->phases[i].kind == SCN_PHASE_RAMP ? w->phases[i].n_concurrency : 1;
  r->phases = calloc((size_t)n, sizeof *r->phases);
  if (!r->phases) return sc_fail(&r->err, SC_OOM, "runner: out of memory");
  for (int i = 0; i < w->n_phases; i++) {
    const scn_phase *p = &w->phases[i];
    int steps = p->kind == SCN_PHASE_RAMP ? p->n_concurrency : 1;
    for (int k = 0; k < steps; k++) {
      phase_run *ph = &r->phases[r->n_phases++];
      ph->p = p;
      ph->srv_running = ph->srv_waiting = ph->srv_kv = NAN; // no scrape yet
      if (p->kind == SCN_PHASE_RAMP) {
        ph->concurrency = p->concurrency[k];
        snprintf(ph->name, sizeof ph->name, "%s-c%d", p->name, ph->concurrency);
      } else {
        ph->concurrency = p->kind == SCN_PHASE_FIXED ? p->concurrency[0] : 0;
        snprintf(ph->name, sizeof ph->name, "%s", p->name);
      }
      if (ph->concurrency > max_users) max_users = ph->concurrency;
    }
  }
  r->user_next = calloc((size_t)max_users, sizeof *r->user_next);
  r->user_conv = calloc((size_t)max_users, sizeof *r->user_conv);
  r->user_turn = calloc((size_t)max_users, sizeof *r->user_turn);
  r->user_prev = calloc((size_t)max_users, sizeof *r->user_prev);
  if (!r->user_next || !r->user_conv || !r->user_turn || !r->user_prev)
    return sc_fail(&r->err, SC_OOM, "runner: out of memory");
  return SC_OK;
}

// --- the hooks the router and the fault runtime reach the runner by
static bool rt_dispatch(void *ud, uint64_t key, uint64_t t) { return dispatch_req(ud, key, t); }

// issue_together releases what this holds once the turn's requests are out.
static void rt_before_submit(void *ud, int i) {
  rt *r = ud;
  if (r->holding && !r->held[i]) {
    replica_hold(r->reps[i], true);
    r->held[i] = true;
  }
}

static void rt_fail(void *ud, uint64_t key, const char *reason, const char *error, uint64_t t) {
  finish_req(ud, key, REQ_FAILED, reason, error, t);
}

static uint64_t rt_now(void *ud) { return now_rel(ud); }

static void rt_note(void *ud, const char *line) { rn_note(ud, "%s", line); }

static void rt_finish(void *ud, uint64_t key, req_status st, const char *reason,
                      const char *error, uint64_t t) {
  finish_req(ud, key, st, reason, error, t);
}

// Which replica implementation the scenario's deployments run: simulated replicas in mode sim;
// in mode real, `shardcheck worker` processes with router.isolation process (the default when
// the scenario has faults, so that a fault can SIGKILL or SIGSTOP one for real), else local
// ones.
static replica_kind replica_kind_of(const scenario *s) {
  if (s->mode == SCN_MODE_SIM) return REPLICA_SIM;
  if (s->target.set) return REPLICA_HTTP;
  return scenario_isolates_processes(s) ? REPLICA_PROCESS : REPLICA_LOCAL;
}

static sc_status run_deployment(rt *r, int idx, int sweep, dep_result *dr) {
  const scn_deployment *d = &r->s->deployments[idx];
  r->dep = d;
  r->dep_idx = idx;
  r->sweep = sweep;
  dr->gpus = d->tp * d->pp * d->dp;
  dr->knee = -1;
  // every-rank sweeps: one run of the deployment per rank, labelled with the rank it aims at
  char label[96];
  snprintf(label, sizeof label, "%s", d->label);
  if (ft_sweeps(r->s, d) > 1) {
    char at[48];
    ft_sweep_label(d, sweep, at, sizeof at);
    snprintf(label, sizeof label, "%s@%s", d->label, at);
  }
  store_deployment sd = {.run_id = r->run_id, .idx = idx, .label = label, .tp = d->tp,
                         .pp = d->pp, .dp = d->dp, .start_ns = now_rel(r)};
  rec_lock(r->rec);
  sc_status s = store_deployment_begin(r->db, &sd, &r->dep_id, &r->err);
  rec_unlock(r->rec);
  SC_TRY(s);
  dr->id = r->dep_id;
  s = build_phases(r);
  if (s != SC_OK) return s;
  r->reps = calloc((size_t)d->dp, sizeof *r->reps);
  r->held = calloc((size_t)d->dp, sizeof *r->held);
  r->fds = calloc((size_t)d->dp, sizeof *r->fds);
  if (r->s->target.set) {
    r->server_seen = calloc((size_t)d->dp, sizeof *r->server_seen);
    r->cache_seen = calloc((size_t)d->dp, sizeof *r->cache_seen);
    if (!r->server_seen || !r->cache_seen)
      return sc_fail(&r->err, SC_OOM, "runner: out of memory");
  }
  const scn_router *sr = &r->s->router;
  router_config rc = {.policy = d->policy ? (router_policy)(d->policy - 1) : sr->policy,
                      .load_bound = sr->load_bound,
                      .affinity_tokens = sr->affinity_tokens,
                      .max_retries = sr->max_retries, .backoff_ns = sr->backoff_ns,
                      .resume = sr->resume, .probe_unhealthy = r->s->n_faults > 0};
  router_hooks rh = {
      .ud = r, .dispatch = rt_dispatch, .fail = rt_fail, .before_submit = rt_before_submit};
  if (r->reps) r->rt = router_new(&rc, r->reps, d->dp, &r->reqs, rh);
  if (!r->reps || !r->held || !r->fds || !r->rt)
    return sc_fail(&r->err, SC_OOM, "runner: out of memory");
  engine_config ec;
  sc_error be = {{0}};
  sc_status bs = scenario_engine_config(r->s, d, &r->s->model.config, r->s->mp.weight_dtype,
                                        r->clock, &ec, &be);
  if (r->sim)
    rn_note(r,
            "deployment %d/%d: %s (tp=%d pp=%d dp=%d) on simulated %s, %d KV blocks "
            "per replica",
            idx + 1, r->s->n_deployments, d->label, d->tp, d->pp, d->dp, r->s->hw.name,
            ec.kv_blocks);
  else if (r->s->target.set)
    rn_note(r, "deployment %d/%d: %s (tp=%d pp=%d dp=%d): %s %s", idx + 1, r->s->n_deployments,
            d->label, d->tp, d->pp, d->dp,
            r->s->target.launch[0] ? "launching servers for" : "requests to", r->s->target.url);
  else
    rn_note(r, "deployment %d/%d: %s (tp=%d pp=%d dp=%d, %d thread%s per rank): loading", idx + 1,
            r->s->n_deployments, d->label, d->tp, d->pp, d->dp, ec.threads,
            ec.threads == 1 ? "" : "s");
  r->ec = ec;
  if (bs == SC_OK) {
    fault_ctx fc = {.s = r->s,
                    .dep = d,
                    .sweep = sweep,
                    .seed = r->seed,
                    .sim = r->sim,
                    .clock = r->clock,
                    .reps = r->reps,
                    .n_reps = d->dp,
                    .rt = r->rt,
                    .reqs = &r->reqs,
                    .wl = r->wl,
                    .good = &r->good,
                    .ec = ec,
                    .n_phases = r->n_phases,
                    .db = r->db,
                    .rec = r->rec,
                    .run_id = r->run_id,
                    .dep_id = r->dep_id,
                    .log_dir = r->s->target.set ? r->log_dir : NULL,
                    .h = {.ud = r, .now = rt_now, .note = rt_note, .finish = rt_finish}};
    rn_log_dir(r, r->log_dir, sizeof r->log_dir);
    sc_error fe = {{0}};
    if (fault_rt_begin(&fc, &r->fr, &fe) != SC_OK) {
      r->err = fe;
      bs = sc_fail(&be, SC_OOM, "%s", fe.msg);
    }
  }
  replica_options ro = {
      .kind = replica_kind_of(r->s),
      .proc = {.exe = r->o->worker_exe,
               .detect_timeout_ns = r->s->router.detect_timeout_ns,
               .env = fault_rt_worker_env(r->fr),
               .mpi = scenario_mpi_replicas(r->s),
               .hostfile = r->s->hardware.hostfile[0] ? r->s->hardware.hostfile : NULL}};
  http_strings *hs = ro.kind == REPLICA_HTTP ? calloc(1, sizeof *hs) : NULL;
  if (ro.kind == REPLICA_HTTP && !hs) bs = sc_fail(&be, SC_OOM, "runner: out of memory");
  for (int i = 0; i < d->dp && bs == SC_OK; i++) {
    ec.sim.layout.first_gpu = i * d->tp * d->pp;
    ec.first_device = i * d->tp * d->pp; // real cuda: replica i's ranks take the next GPUs
    if (hs) bs = rn_http_options(r, d, label, i, &ro.http, hs, &be);
    if (bs != SC_OK) break;
    bs = r->o->make_replica ? r->o->make_replica(r->o->make_replica_ud, &ec, i, &r->reps[i], &be)
                            : replica_new(&ro, &ec, i, &r->reps[i], &be);
    if (bs == SC_OK && hs && r->o->n_clients > 1) // its requests dealt out among client ranks
      bs = replica_clients_wrap(r->reps[i], &ro.http, r->o->n_clients, r->o->clients, &r->reps[i],
                                &be);
    if (bs == SC_OK) r->n_reps++;
  }
  free(hs);
  // every replica is built (launched servers start side by side), then each is waited for
  for (int i = 0; i < r->n_reps && bs == SC_OK; i++) {
    sc_error we = {{0}};
    if (replica_wait_ready(r->reps[i], r->o->interrupted, &we) != SC_OK) {
      bs = SC_IO;
      snprintf(be.msg, sizeof be.msg, "replica %d: %.480s", i, we.msg);
      if (r->o->interrupted && *r->o->interrupted) r->stopping = true;
    }
  }
  if (bs == SC_OK) {
    replica_set_peers(r->reps, r->n_reps);
    fault_rt_replicas_ready(r->fr);
  }
  if (bs != SC_OK) {
    free_replicas(r); // a launched server stops here, not at the end of the run
    snprintf(r->res->error, sizeof r->res->error, "deployment %s: %.400s", d->label, be.msg);
    rn_note(r, "deployment %s failed to start: %s", d->label, be.msg);
    SC_TRY(rec_drain(r->rec, &r->err));
    return store_deployment_end(r->db, r->dep_id, "failed", be.msg, now_rel(r), &r->err);
  }
  dr->built = true;
  uint64_t now = now_rel(r);
  r->next_tick = now + TICK_NS;
  r->next_sample = now; // one sample at the start
  r->next_line = now;
  r->tok_window = 0;
  r->tok_window_start = now;
  r->all_dead = false;
  for (int k = 0; k < r->n_phases && !r->stopping && !r->all_dead; k++) {
    s = run_phase(r, k);
    if (s != SC_OK) return s;
    if (ramp_saturated(r, dr, k)) // the rest of the ramp is past its knee
      while (k + 1 < r->n_phases && r->phases[k + 1].p == r->phases[k].p) k++;
  }
  settle(r);
  SC_TRY(fault_rt_end(r->fr, r->n_phases ? r->phases[r->n_phases - 1].end : now_rel(r),
                      &dr->faults, &r->err));
  // A dead replica fails the deployment unless faults were injected (then it is the point:
  // the verdicts judge it).
  bool dead = false;
  for (int i = 0; i < r->n_reps && !fault_rt_faulted(r->fr); i++)
    dead |= replica_health_get(r->reps[i]) == REPLICA_DEAD;
  const char *st = r->stopping ? "interrupted" : "complete";
  if (dead && !r->res->error[0])
    for (int i = 0; i < r->n_reps; i++)
      if (replica_health_get(r->reps[i]) == REPLICA_DEAD)
        snprintf(r->res->error, sizeof r->res->error, "deployment %s: replica %d failed: %.400s",
                 d->label, i, replica_error(r->reps[i]));
  free_replicas(r);
  db_ok(r, fault_rt_after_free(r->fr, &r->err));
  dep_sums sums = {0};
  s = rn_deployment_summaries(r, dr, &sums);
  if (s == SC_OK) s = rec_drain(r->rec, &r->err); // the writer is idle from here to the next phase
  if (s == SC_OK)
    s = store_deployment_end(r->db, r->dep_id, dead ? "failed" : st, dead ? r->res->error : NULL,
                             now_rel(r), &r->err);
  if (s == SC_OK) s = rn_deployment_metrics(r, dr, &sums);
  free(sums.v);
  SC_TRY(s);
  if (!r->stopping) rn_audit_metrics(r);
  return rn_layout_equivalence(r, dr);
}

// --- the run
static char *config_json(const scenario *s, uint64_t seed, const runner_options *ro) {
  json_t *o = json_pack("{s:s, s:s, s:f, s:f, s:f, s:s, s:I, s:i, s:f, s:f}",
                        "backend", s->hardware.backend[0] ? s->hardware.backend : "cpu", "profile",
                        s->hardware.profile,
                        "kv_headroom", s->limits.kv_headroom, "request_timeout_s",
                        (double)s->limits.request_timeout_ns / 1e9, "collective_timeout_s",
                        (double)s->limits.collective_timeout_ns / 1e9, "router",
                        router_policy_name(s->router.policy),
                        "seed", (json_int_t)seed, "cpu_cores", device_cpu_cores(), "temperature",
                        s->workload.temperature, "top_p", s->workload.top_p);
  if (!o) return NULL;
  json_object_set_new(o, "mode", json_string(s->mode == SCN_MODE_SIM ? "sim" : "real"));
  // the knobs (kernels/knobs.h): some always, the others only when set (defaults left out)
#define KNOB_JSON_int json_integer
#define KNOB_JSON_bool json_boolean
#define KNOB_JSON_double json_real
#define KNOB_JSON(name, type, dflt, e, sch, pf, pkey, ok, ex, j)                                   \
  if ((j) == SC_KNOB_J_ALWAYS || s->limits.name != (dflt))                                         \
    json_object_set_new(o, #name, KNOB_JSON_##type(s->limits.name));
  SC_KNOBS(KNOB_JSON)
#undef KNOB_JSON
  if (s->record != SCN_RECORD_TOKENS) // the default is left out: older runs have no key
    json_object_set_new(o, "record", json_string(scenario_record_name(s->record)));
  if (s->mode != SCN_MODE_SIM && !s->target.set)
    json_object_set_new(o, "isolation",
                        json_string(scenario_mpi_replicas(s)         ? "mpi"
                                    : scenario_isolates_processes(s) ? "process"
                                                                     : "thread"));
  if (s->target.set) { // what was measured; never the API key
    const scn_target *t = &s->target;
    json_object_set_new(o, "backend", json_string("openai"));
    json_object_set_new(o, "target",
                        json_pack("{s:s, s:s, s:s, s:s}", "api",
                                  t->api == SCN_API_CHAT ? "chat" : "completions", "model",
                                  t->model, "url", t->url, "launch", t->launch));
  }
  if (s->mode == SCN_MODE_SIM) {
    json_object_set_new(o, "backend", json_string("sim"));
    json_object_set_new(o, "link", json_string(s->hw.link));
    json_object_set_new(o, "gpus", json_integer(s->hardware.gpus));
    json_object_set_new(o, "nodes", json_integer(s->hardware.nodes));
  }
  const scn_gate *g = &s->gate;
  if (g->tolerance >= 0 || g->alpha > 0 || g->n > 0) { // `shardcheck gate` reads it back
    json_t *gj = json_object(), *gm = json_object();
    if (g->tolerance >= 0) json_object_set_new(gj, "tolerance", json_real(g->tolerance));
    if (g->alpha > 0) json_object_set_new(gj, "alpha", json_real(g->alpha));
    for (int i = 0; i < g->n; i++) json_object_set_new(gm, g->metrics[i].key,
                                                       json_real(g->metrics[i].tol));
    json_object_set_new(gj, "metrics", gm);
    json_object_set_new(o, "gate", gj);
  }
  rn_clients_config(ro, o);
  char *txt = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(o);
  return txt;
}

static sc_status refuse(const scenario *s, sc_error *err) {
  const scn_target *t = &s->target;
  if (t->set && t->api_key_env[0] && !getenv(t->api_key_env))
    return sc_fail(err, SC_INVALID, "%s:%d:%d: target.openai.api_key_env: %s is not set (the API "
                   "key is read from it, never stored)", s->path, t->line, t->col,
                   t->api_key_env);
  if (s->mode == SCN_MODE_SIM && !s->have_hw)
    return sc_fail(err, SC_INVALID, "%s: mode sim needs a hardware profile", s->path);
  for (int i = 0; i < s->workload.n_phases && s->n_faults; i++)
    if (s->workload.phases[i].saturation)
      return sc_fail(err, SC_INVALID, "%s:%d:%d: a ramp that stops at saturation cannot carry "
                     "faults (a fault planned in a skipped step would never come)", s->path,
                     s->workload.phases[i].line, s->workload.phases[i].col);
  if (s->mode == SCN_MODE_SIM) return SC_OK;
  SC_TRY(rn_refuse_mpi(s, err));
  for (int i = 0; i < s->n_faults; i++) {
    const scn_fault *f = &s->faults[i];
    if (f->kind != SCN_FAULT_CLOCK_JUMP) continue;
    if (!s->target.set && !scenario_isolates_processes(s))
      return sc_fail(err, SC_INVALID, "%s:%d:%d: clock_jump needs router.isolation: process (the "
                     "workers' clock is offset through libfaketime; a thread shares this "
                     "process's clock)", s->path, f->line, f->col);
    if (f->offset_ns % 1000000000 != 0)
      return sc_fail(err, SC_INVALID, "%s:%d:%d: clock_jump offset: whole seconds only (the "
                     "workers' clock is offset through libfaketime)", s->path, f->line, f->col);
    if (!fault_faketime_lib())
      return sc_fail(err, SC_INVALID,
                     "%s:%d:%d: clock_jump needs libfaketime (Debian package faketime): none "
                     "found in /usr/lib/*/faketime/ (or set SHARDCHECK_LIBFAKETIME to its path)",
                     s->path, f->line, f->col);
  } // no real device, any dtype the planner counts
  if (s->hardware.backend[0] && strcmp(s->hardware.backend, "cpu") != 0) {
#ifndef SHARDCHECK_HAVE_CUDA
    return sc_fail(err, SC_INVALID,
                   "%s: hardware.backend %s: this shardcheck was built without the CUDA backend "
                   "(configure with -DSHARDCHECK_CUDA=ON on a machine with the CUDA toolkit)",
                   s->path, s->hardware.backend);
#endif
  }
  return runner_check_dtypes(s, err);
}

sc_status runner_check_dtypes(const scenario *s, sc_error *err) {
  // an external target's weights are its server's: the keys only shape a --mode sim prediction
  if (s->mode == SCN_MODE_SIM || s->target.set) return SC_OK;
  if (!strcmp(s->model.dtype, "int4") || !strcmp(s->model.dtype, "fp8"))
    return sc_fail(err, SC_INVALID,
                   "%s: model.dtype %s: the real backends hold weights as f32 or int8 "
                   "(weight-only); use int8, f32, f16 or bf16, or mode: sim", s->path,
                   s->model.dtype);
  if (s->model.kv_cache_dtype[0])
    return sc_fail(err, SC_INVALID,
                   "%s: model.kv_cache_dtype %s: the real backends keep the KV cache in the "
                   "activations' dtype; use auto, or mode: sim", s->path, s->model.kv_cache_dtype);
  for (int i = 0; i < s->n_faults; i++) {
    const scn_fault *f = &s->faults[i];
    if (f->kind == SCN_FAULT_HOT_SWAP && (!strcmp(f->swap_dtype, "int4") ||
                                          !strcmp(f->swap_dtype, "fp8")))
      return sc_fail(err, SC_INVALID,
                     "%s:%d:%d: hot_swap dtype %s: the real backends hold weights as f32 or "
                     "int8 (weight-only); use int8", s->path, f->line, f->col, f->swap_dtype);
  }
  return SC_OK;
}

sc_status runner_run(const scenario *s, store *db, const runner_options *o, runner_result *res,
                     sc_error *err) {
  memset(res, 0, sizeof *res);
  SC_TRY(refuse(s, err));
  rt r = {.s = s, .o = o, .db = db, .res = res};
  r.sim = s->mode == SCN_MODE_SIM;
  r.wall_start = sc_monotonic_ns();
  r.clock = r.sim ? sc_clock_virtual(&r.vnow) : sc_clock_monotonic();
  r.seed = o->seed_set ? o->seed : s->seed;
  r.tty = isatty(fileno(o->progress_out ? o->progress_out : stderr));
  mt_goodput_from_slo(&s->slo, &r.good);
  sc_status st = workload_new(s, r.seed, &r.wl, err);
  if (st != SC_OK) return st;
  char *cfg = config_json(s, r.seed, o);
  store_run sr = {.scenario = s->name, .scenario_path = s->path[0] ? s->path : NULL,
                  .scenario_text = s->text ? s->text : "", .mode = r.sim ? "sim" : "real",
                  .backend = r.sim ? "sim" : s->target.set ? "openai"
                                            : s->hardware.backend[0] ? s->hardware.backend : "cpu",
                  .git_rev = o->git_rev,
                  .model = s->model.source, .config = cfg, .seed = r.seed};
  r.t0 = sc_clock_now(&r.clock);
  st = store_run_begin(db, &sr, &r.run_id, err);
  free(cfg);
  if (st != SC_OK) {
    workload_free(r.wl);
    return st;
  }
  res->run_id = r.run_id;
  res->t0_ns = r.t0;
  st = rec_new(db, &r.rec, err);
  if (st != SC_OK) {
    workload_free(r.wl);
    return st;
  }
  int n_runs = 0;
  for (int i = 0; i < s->n_deployments; i++) n_runs += ft_sweeps(s, &s->deployments[i]);
  dep_result *drs = calloc((size_t)n_runs, sizeof *drs);
  if (!drs) st = sc_fail(&r.err, SC_OOM, "runner: out of memory");
  int n_done = 0;
  for (int i = 0; i < s->n_deployments && !r.stopping && st == SC_OK; i++)
    for (int j = 0; j < ft_sweeps(s, &s->deployments[i]) && !r.stopping && st == SC_OK; j++) {
      st = run_deployment(&r, i, j, &drs[n_done]);
      n_done++;
      free_deployment(&r);
      if (o->interrupted && *o->interrupted) r.stopping = true;
    }
  sc_status ds = rec_drain(r.rec, &r.err);
  if (st == SC_OK) st = ds;
  if (st == SC_OK) st = rn_finish_run(&r, drs, n_done);
  res->wall_s = (double)(sc_clock_now(&r.clock) - r.t0) / 1e9;
  snprintf(res->status, sizeof res->status, "%s",
           r.stopping ? "interrupted" : res->error[0] ? "failed" : "complete");
  if (st == SC_OK) {
    const char *verdict = res->n_verdicts == 0 ? NULL : res->n_failed ? "fail" : "pass";
    if (r.stopping) verdict = NULL;
    st = store_run_end(db, r.run_id, res->status, verdict, res->error[0] ? res->error : NULL,
                       sc_clock_now(&r.clock) - r.t0, &r.err);
  }
  if (st != SC_OK && err) *err = r.err;
  free_deployment(&r);
  rec_free(r.rec);
  req_table_free(&r.reqs);
  free(r.ref_hash);
  free(r.ref_ok);
  free(r.ref_text);
  free(r.ttft_scratch);
  free(r.ev);
  free(r.ev_meta);
  free(r.turns);
  free(drs);
  workload_free(r.wl);
  return st;
}
