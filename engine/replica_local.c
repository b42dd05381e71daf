// The local replica: one engine in this process, stepped by its own thread.
//
// The caller's thread only touches the inbox (submits, cancels, admitting) and the outbox
// (events) under one mutex; the stepping thread owns the engine: it applies the inbox, runs
// engine_step without the lock, and appends the step's events to the outbox, writing one byte
// to a pipe when the outbox goes from empty to non-empty (wait_fd). Stats and rank memory are
// copied out after every step so readers never touch the engine. Routing, timeouts and
// metrics are the runner's; process and simulated replicas are other files.
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/replica.h"
#include "engine/replica_keys.h"

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
  sc_status dying; // the status a dying replica fails its requests with
  // stepping thread only
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

static void fail_event(local *l, uint64_t key, sc_status s, const char *what) {
  replica_event ev = {.kind = REPLICA_EV_FAILED, .key = key, .status = s, .t_ns = now_ns(l)};
  snprintf(ev.what, sizeof ev.what, "%s", what);
  push_out(l, &ev);
}

// Applies the inbox to the engine (mu held; engine calls here are cheap: no step runs).
static void apply_inbox(local *l) {
  if (l->admitting_change) {
    engine_set_admitting(l->e, l->admitting);
    l->admitting_change = false;
    if (l->health != REPLICA_DEAD) l->health = l->admitting ? REPLICA_HEALTHY : REPLICA_DRAINING;
  }
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
    if (s != SC_OK) fail_event(l, it->key, s, rk_status_kind(s));
    free(it->prompt);
  }
  l->n_in = 0;
}

// Publishes stats and rank memory (mu held).
static void publish(local *l) {
  engine_stats_get(l->e, &l->stats);
  for (int r = 0; r < l->n_ranks; r++) engine_rank_mem(l->e, r, &l->mem_used[r], &l->mem_total[r]);
}

static void fail_key(void *ud, uint64_t key) {
  local *l = ud;
  fail_event(l, key, l->dying, "replica_failed");
}

// The engine failed: every request it holds fails; the replica is dead (mu held).
static void die(local *l, sc_status s, const sc_error *err) {
  l->health = REPLICA_DEAD;
  snprintf(l->error, sizeof l->error, "%s", err->msg[0] ? err->msg : sc_status_name(s));
  l->dying = s;
  rk_each(&l->keys, fail_key, l);
  rk_free(&l->keys);
}

static void *step_thread(void *arg) {
  local *l = arg;
  pthread_mutex_lock(&l->mu);
  while (!l->stop) {
    apply_inbox(l);
    if (l->health == REPLICA_DEAD || engine_idle(l->e)) {
      pthread_cond_wait(&l->cv, &l->mu);
      continue;
    }
    pthread_mutex_unlock(&l->mu);
    engine_step_result res;
    sc_error err = {{0}};
    sc_status s = engine_step(l->e, &res, &err);
    uint64_t t = now_ns(l);
    pthread_mutex_lock(&l->mu);
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

static void l_free(void *ctx) {
  local *l = ctx;
  if (!l) return;
  if (l->thread_started) {
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
  }
  engine_free(l->e);
  for (int i = 0; i < l->n_in; i++) free(l->in[i].prompt);
  free(l->in);
  rq_free(&l->out);
  free(l->mem_used);
  free(l->mem_total);
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
    .stats = l_stats,
    .rank_mem = l_rank_mem,
    .error = l_error,
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
  if (!l->mem_used || !l->mem_total) {
    s = sc_fail(err, SC_OOM, "replica: out of memory");
    goto fail;
  }
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

void replica_free(replica *r) {
  if (!r) return;
  r->i->free(r->ctx);
  free(r);
}
