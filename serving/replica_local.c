// The local replica: one engine in this process, stepped by its own thread.
//
// The caller's thread only touches the inbox (submits, cancels, admitting) and the outbox
// (events) under one mutex; the stepping thread owns the engine: it applies the inbox, runs
// engine_step without the lock, and appends the step's events to the outbox, writing one byte
// to a pipe when the outbox goes from empty to non-empty (wait_fd). Stats and rank memory are
// copied out after every step so readers never touch the engine. Routing, timeouts and
// metrics are the runner's; process and simulated replicas are other files.
//
// Faults (inject): device and link faults go straight to the engine's hooks, which are
// thread-safe, so a fault lands at once even while a long step runs; the replica keeps each
// rank's fault so that faults compose (a slow rank can also run out of memory). KILL marks the
// replica dead at once (its in-flight step is cut short by losing every device, and whatever it
// returns is dropped); HANG parks the stepping thread at the next step boundary until RESUME.
// A lost or hung rank kills the replica through its engine: the step that meets it fails (a
// hung rank at the collective deadline) and the replica dies as on any engine failure.
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "serving/replica.h"
#include "serving/replica_keys.h"

// --- the replica
typedef struct inbox_item {
  bool cancel;
  uint64_t key;
  engine_request req; // submit: prompt points into prompt below
  int32_t *prompt;    // (n_prompt) owned copy
} inbox_item;

typedef struct local {
  engine *e;
  engine_config cfg;
  pthread_t thread;
  bool thread_started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stop;
  // inbox (guarded by mu)
  inbox_item *in;
  int n_in, cap_in;
  bool admitting_change, admitting;
  bool held; // replica_hold: the inbox is not applied
  // outbox (guarded by mu)
  replica_evq out;
  int pipe_r, pipe_w;
  bool signalled; // a byte is in the pipe
  // published state (guarded by mu)
  replica_health health;
  engine_stats stats;
  size_t *mem_used, *mem_total; // (n_ranks)
  int n_ranks;
  char error[512];
  sc_status dying;       // the status a dying replica fails its requests with
  replica_failure dead_why; // and the failure it names (replica_failed, replica_lost)
  // faults (guarded by mu)
  bool hung;        // RFAULT_HANG: the stepping thread takes no step until RFAULT_RESUME
  dev_fault *fault; // (n_ranks) the device fault each rank has now
  // request keys (guarded by mu)
  replica_keys keys;
} local;

static uint64_t now_ns(local *l) { return sc_clock_now(&l->cfg.clock); }

// Appends an event (mu held). False when memory ran out.
static bool push_out(local *l, const replica_event *ev) {
  if (!rq_push(&l->out, ev)) return false;
  if (!l->signalled) {
    char b = 1;
    ssize_t w = write(l->pipe_w, &b, 1);
    (void)w; // the pipe is non-blocking; a full pipe already wakes the reader
    l->signalled = true;
  }
  return true;
}

static void fail_event(local *l, uint64_t key, sc_status s, replica_failure why) {
  replica_event ev = {.kind = REPLICA_EV_FAILED, .key = key, .status = s, .failure = why,
                      .t_ns = now_ns(l)};
  push_out(l, &ev);
}

// The health of a live replica: DRAINING when not admitting, UNHEALTHY while its engine keeps
// failing allocations, else HEALTHY (mu held).
static replica_health live_health(const local *l) {
  if (!l->admitting) return REPLICA_DRAINING;
  return l->stats.unhealthy ? REPLICA_UNHEALTHY : REPLICA_HEALTHY;
}

// Applies the inbox to the engine (mu held; engine calls here are cheap: no step runs). Its
// submissions first, then a change of admitting: a request sent before a drain began is the
// replica's to finish (the drain waits for it), not one the engine refuses as draining.
static void apply_inbox(local *l) {
  for (int i = 0; i < l->n_in; i++) {
    inbox_item *it = &l->in[i];
    if (it->cancel) {
      uint64_t id = rk_id(&l->keys, it->key);
      if (id) engine_cancel(l->e, id);
      continue;
    }
    uint64_t id = 0;
    sc_error err = {{0}};
    sc_status s = engine_submit(l->e, &it->req, &id, &err);
    if (s == SC_OK && !rk_put(&l->keys, it->key, id)) {
      engine_cancel(l->e, id);
      s = SC_OOM;
    }
    if (s != SC_OK) fail_event(l, it->key, s, replica_failure_of(s));
    free(it->prompt);
  }
  l->n_in = 0;
  if (l->admitting_change) {
    engine_set_admitting(l->e, l->admitting);
    l->admitting_change = false;
    if (l->health != REPLICA_DEAD) l->health = live_health(l);
  }
}

// Publishes stats, rank memory and the health they imply (mu held).
static void publish(local *l) {
  engine_stats_get(l->e, &l->stats);
  for (int r = 0; r < l->n_ranks; r++) engine_rank_mem(l->e, r, &l->mem_used[r], &l->mem_total[r]);
  if (l->health != REPLICA_DEAD) l->health = live_health(l);
}

static void fail_key(void *ud, uint64_t key) {
  local *l = ud;
  fail_event(l, key, l->dying, l->dead_why);
}

// The replica is dead (mu held): every request it holds, in the engine or still in the inbox,
// fails with status s and kind `what`; error says why.
static void die_with(local *l, sc_status s, replica_failure why, const char *error) {
  l->health = REPLICA_DEAD;
  snprintf(l->error, sizeof l->error, "%s", error);
  l->dying = s;
  l->dead_why = why;
  rk_each(&l->keys, fail_key, l);
  rk_free(&l->keys);
  for (int i = 0; i < l->n_in; i++) {
    if (!l->in[i].cancel) fail_event(l, l->in[i].key, s, why);
    free(l->in[i].prompt);
  }
  l->n_in = 0;
  pthread_cond_signal(&l->cv);
}

// The engine failed (mu held).
static void die(local *l, sc_status s, const sc_error *err) {
  die_with(l, s, REPLICA_FAIL_FAILED, err->msg[0] ? err->msg : sc_status_name(s));
}

static void *step_thread(void *arg) {
  local *l = arg;
  pthread_mutex_lock(&l->mu);
  while (!l->stop) {
    bool dead = l->health == REPLICA_DEAD;
    if (!dead && !l->hung && !l->held) apply_inbox(l);
    if (dead || l->hung || engine_idle(l->e)) {
      pthread_cond_wait(&l->cv, &l->mu);
      continue;
    }
    pthread_mutex_unlock(&l->mu);
    engine_step_result res;
    sc_error err = {{0}};
    sc_status s = engine_step(l->e, &res, &err);
    uint64_t t = now_ns(l);
    pthread_mutex_lock(&l->mu);
    if (l->health == REPLICA_DEAD) continue; // killed meanwhile: what the step did is dropped
    if (s != SC_OK) {
      die(l, s, &err);
      continue;
    }
    for (int i = 0; i < res.n_events; i++) {
      replica_event ev = rk_event(&l->keys, &res.events[i], t);
      push_out(l, &ev);
    }
    if (res.info.duration_ns > 0)
      push_out(l, &(replica_event){.kind = REPLICA_EV_STEP, .step = res.info, .t_ns = t});
    publish(l);
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

// --- vtable
static sc_status l_submit(void *ctx, uint64_t key, const engine_request *r, sc_error *err) {
  local *l = ctx;
  int32_t *p = malloc(sizeof(int32_t) * (size_t)(r->n_prompt > 0 ? r->n_prompt : 1));
  if (!p) return sc_fail(err, SC_OOM, "replica: out of memory queueing a request");
  if (r->n_prompt > 0) memcpy(p, r->prompt, sizeof(int32_t) * (size_t)r->n_prompt);
  pthread_mutex_lock(&l->mu);
  if (l->health == REPLICA_DEAD) {
    pthread_mutex_unlock(&l->mu);
    free(p);
    return sc_fail(err, SC_ABORTED, "replica: dead (%s)", l->error);
  }
  if (l->n_in == l->cap_in) {
    int cap = l->cap_in ? l->cap_in * 2 : 256;
    inbox_item *q = realloc(l->in, (size_t)cap * sizeof *q);
    if (!q) {
      pthread_mutex_unlock(&l->mu);
      free(p);
      return sc_fail(err, SC_OOM, "replica: out of memory queueing a request");
    }
    l->in = q;
    l->cap_in = cap;
  }
  inbox_item *it = &l->in[l->n_in++];
  *it = (inbox_item){.key = key, .req = *r, .prompt = p};
  it->req.prompt = p;
  pthread_cond_signal(&l->cv);
  pthread_mutex_unlock(&l->mu);
  return SC_OK;
}

static void l_cancel(void *ctx, uint64_t key) {
  local *l = ctx;
  pthread_mutex_lock(&l->mu);
  if (l->n_in == l->cap_in) {
    int cap = l->cap_in ? l->cap_in * 2 : 256;
    inbox_item *q = realloc(l->in, (size_t)cap * sizeof *q);
    if (!q) { // the request runs to its end; the caller has already stopped listening
      pthread_mutex_unlock(&l->mu);
      return;
    }
    l->in = q;
    l->cap_in = cap;
  }
  l->in[l->n_in++] = (inbox_item){.cancel = true, .key = key};
  pthread_cond_signal(&l->cv);
  pthread_mutex_unlock(&l->mu);
}

static void l_hold(void *ctx, bool on) {
  local *l = ctx;
  pthread_mutex_lock(&l->mu);
  l->held = on;
  if (!on && l->n_in) pthread_cond_signal(&l->cv);
  pthread_mutex_unlock(&l->mu);
}

static int l_poll(void *ctx, replica_event *out, int cap) {
  local *l = ctx;
  pthread_mutex_lock(&l->mu);
  int n = rq_take(&l->out, out, cap);
  if (rq_len(&l->out) == 0) {
    if (l->signalled) {
      char buf[64];
      while (read(l->pipe_r, buf, sizeof buf) > 0) {
      }
      l->signalled = false;
    }
  }
  pthread_mutex_unlock(&l->mu);
  return n;
}

static int l_wait_fd(void *ctx) { return ((local *)ctx)->pipe_r; }

static replica_health l_health(void *ctx) {
  local *l = ctx;
  pthread_mutex_lock(&l->mu);
  replica_health h = l->health;
  pthread_mutex_unlock(&l->mu);
  return h;
}

static void l_set_admitting(void *ctx, bool admitting) {
  local *l = ctx;
  pthread_mutex_lock(&l->mu);
  l->admitting = admitting;
  l->admitting_change = true;
  pthread_cond_signal(&l->cv);
  pthread_mutex_unlock(&l->mu);
}

static void l_stats(void *ctx, engine_stats *out) {
  local *l = ctx;
  pthread_mutex_lock(&l->mu);
  *out = l->stats;
  pthread_mutex_unlock(&l->mu);
}

static sc_status l_rank_mem(void *ctx, int r, size_t *used, size_t *total) {
  local *l = ctx;
  if (r < 0 || r >= l->n_ranks) return SC_INVALID;
  pthread_mutex_lock(&l->mu);
  *used = l->mem_used[r];
  *total = l->mem_total[r];
  pthread_mutex_unlock(&l->mu);
  return SC_OK;
}

static const char *l_error(void *ctx) { return ((local *)ctx)->error; }

// --- faults

// Sets ranks [r0, r1) to their recorded faults (mu held).
static void apply_faults(local *l, int r0, int r1) {
  for (int r = r0; r < r1; r++) engine_set_rank_fault(l->e, r, &l->fault[r]);
}

// Applies f (see replica.h): SC_OK; SC_ABORTED on a dead replica (nothing changes); SC_INVALID
// for a rank outside [-1, n_ranks) or an unknown kind. Never waits for a step.
static sc_status l_inject(void *ctx, const replica_fault *f, sc_error *err) {
  local *l = ctx;
  if (!f) return sc_fail(err, SC_INVALID, "replica: no fault given");
  pthread_mutex_lock(&l->mu);
  sc_status s = SC_OK;
  if (l->health == REPLICA_DEAD) {
    s = sc_fail(err, SC_ABORTED, "replica: dead (%s)", l->error);
    goto out;
  }
  const replica_fault_info *fi = replica_fault_kind_info(f->kind);
  if (!fi) {
    s = sc_fail(err, SC_INVALID, "replica: unknown fault kind %d", (int)f->kind);
    goto out;
  }
  if (fi->names_rank && (f->rank < -1 || f->rank >= l->n_ranks)) {
    s = sc_fail(err, SC_INVALID, "replica: rank %d is out of range: the replica has ranks 0..%d "
                "(-1: every rank)", f->rank, l->n_ranks - 1);
    goto out;
  }
  int r0 = f->rank < 0 ? 0 : f->rank, r1 = f->rank < 0 ? l->n_ranks : f->rank + 1;
  switch (f->kind) {
  case RFAULT_KILL:
    // Losing every device cuts an in-flight step short; it is dropped when it returns.
    for (int r = 0; r < l->n_ranks; r++) l->fault[r].lost = true;
    apply_faults(l, 0, l->n_ranks);
    die_with(l, SC_ABORTED, REPLICA_FAIL_LOST, "killed (fault injection)");
    break;
  case RFAULT_KILL_RANK:
    for (int r = r0; r < r1; r++) l->fault[r].lost = true;
    break;
  case RFAULT_HANG: l->hung = true; break;
  case RFAULT_HANG_RANK:
    for (int r = r0; r < r1; r++) l->fault[r].hang = true;
    break;
  case RFAULT_RESUME:
    l->hung = false;
    r0 = 0;
    r1 = l->n_ranks;
    for (int r = r0; r < r1; r++) l->fault[r].hang = false;
    pthread_cond_signal(&l->cv);
    break;
  case RFAULT_SLOW_RANK:
    for (int r = r0; r < r1; r++) l->fault[r].slow_factor = f->factor;
    break;
  case RFAULT_SLOW_LINK:
    s = engine_set_link_fault(l->e, f->factor, f->latency_ns, f->bandwidth);
    if (s != SC_OK) s = sc_fail(err, s, "replica: this engine takes no link faults");
    goto out;
  case RFAULT_OOM:
    for (int r = r0; r < r1; r++) {
      l->fault[r].oom_after = f->after_allocs > 0 ? f->after_allocs : 0;
      l->fault[r].oom_persistent = f->persistent;
    }
    break;
  case RFAULT_CORRUPT:
    for (int r = r0; r < r1; r++)
      l->fault[r].corrupt = f->bitflip ? DEV_CORRUPT_BITFLIP : DEV_CORRUPT_NAN;
    break;
  case RFAULT_CLEAR: // a lost device stays lost; a hang ends with RESUME
    for (int r = r0; r < r1; r++) {
      dev_fault keep = l->fault[r];
      l->fault[r] = dev_fault_none();
      l->fault[r].lost = keep.lost;
      l->fault[r].hang = keep.hang;
    }
    engine_set_link_fault(l->e, 0, 0, 0);
    break;
  default:
    s = sc_fail(err, SC_INVALID, "replica: unknown fault kind %d", (int)f->kind);
    goto out;
  }
  if (f->kind != RFAULT_KILL && f->kind != RFAULT_HANG) apply_faults(l, r0, r1);
out:
  pthread_mutex_unlock(&l->mu);
  return s;
}

// --- lifecycle

static void l_free(void *ctx) {
  local *l = ctx;
  if (!l) return;
  if (l->thread_started) {
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_signal(&l->cv);
    // A step held up by a hung rank or a throttled link ends sooner without them.
    dev_fault none = dev_fault_none();
    engine_set_rank_fault(l->e, -1, &none);
    engine_set_link_fault(l->e, 0, 0, 0);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
  }
  engine_free(l->e);
  for (int i = 0; i < l->n_in; i++) free(l->in[i].prompt);
  free(l->in);
  rq_free(&l->out);
  free(l->mem_used);
  free(l->mem_total);
  free(l->fault);
  rk_free(&l->keys);
  if (l->pipe_r >= 0) close(l->pipe_r);
  if (l->pipe_w >= 0) close(l->pipe_w);
  pthread_cond_destroy(&l->cv);
  pthread_mutex_destroy(&l->mu);
  free(l);
}

static const replica_i local_i = {
    .submit = l_submit,
    .cancel = l_cancel,
    .poll = l_poll,
    .wait_fd = l_wait_fd,
    .health = l_health,
    .set_admitting = l_set_admitting,
    .hold = l_hold,
    .stats = l_stats,
    .rank_mem = l_rank_mem,
    .error = l_error,
    .inject = l_inject,
    .free = l_free,
};

sc_status replica_local_new(const engine_config *cfg, int index, replica **out, sc_error *err) {
  *out = NULL;
  local *l = calloc(1, sizeof *l);
  replica *r = calloc(1, sizeof *r);
  if (!l || !r) {
    free(l);
    free(r);
    return sc_fail(err, SC_OOM, "replica: out of memory");
  }
  l->pipe_r = l->pipe_w = -1;
  l->cfg = *cfg;
  if (!l->cfg.clock.now_ns) l->cfg.clock = sc_clock_monotonic();
  l->admitting = true;
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv, NULL);
  sc_status s = engine_new(&l->cfg, &l->e, err);
  if (s != SC_OK) {
    l_free(l);
    free(r);
    return s;
  }
  int fds[2];
  if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) {
    s = sc_fail(err, SC_IO, "replica: pipe: %s", strerror(errno));
    goto fail;
  }
  l->pipe_r = fds[0];
  l->pipe_w = fds[1];
  l->n_ranks = cfg->tp * cfg->pp;
  l->mem_used = calloc((size_t)l->n_ranks, sizeof *l->mem_used);
  l->mem_total = calloc((size_t)l->n_ranks, sizeof *l->mem_total);
  l->fault = calloc((size_t)l->n_ranks, sizeof *l->fault);
  if (!l->mem_used || !l->mem_total || !l->fault) {
    s = sc_fail(err, SC_OOM, "replica: out of memory");
    goto fail;
  }
  for (int k = 0; k < l->n_ranks; k++) l->fault[k] = dev_fault_none();
  publish(l);
  if (pthread_create(&l->thread, NULL, step_thread, l) != 0) {
    s = sc_fail(err, SC_OOM, "replica: cannot start its thread");
    goto fail;
  }
  l->thread_started = true;
  *r = (replica){.i = &local_i, .ctx = l, .index = index, .n_ranks = l->n_ranks};
  *out = r;
  return SC_OK;
fail:
  l_free(l);
  free(r);
  return s;
}
