// Load from many clients (docs/scaling-out.md, "Load from many clients"). Under `mpirun -np N
// shardcheck run SCEN`, rank 0 runs the runner as one process would: the workload, the router,
// the request table, the recorder, the one database. Each of a deployment's HTTP replicas is
// wrapped here so that its submissions are dealt out in turn to the N client ranks: rank 0's
// share goes to the HTTP replica itself, every other rank's over MPI to that rank, which holds
// an HTTP replica of the same server (no launch: rank 0 launched it) and streams the request
// from its own process. Every chunk is stamped where it arrives, on that rank's clock, and its
// event comes back to rank 0, whose wrapper brings the stamp onto rank 0's clock with the offset
// measured before the run (replica_clients_sync: the fastest of 16 round trips, the other
// rank's clock read at its middle). So the HTTP work (connections, the event stream's parsing,
// a chunk's stamp) is spread over N processes, and what rank 0 records is what one process
// records: the same rows, metrics and verdicts.
//
// Messages (MPI point to point on the job's world, serving/replica_clients.c's own tags):
//   rank 0 -> k, CTL: OPEN (a replica: its index and HTTP options), SUBMIT (index, key, the
//     request and its prompt), CANCEL (index, key), CLOSE (index), SYNC, QUIT;
//   k -> rank 0: EVENTS on the tag of its replica (the events as this build lays them out:
//     every rank runs the same build, which the job checks first, each with its message),
//     OPENED (index, status, message), SYNC's answer (its clock and its host).
// Rank 0's wrapper looks for its events when the runner polls it; its wait fd holds a 1 ms
// timer beside the HTTP replica's, so a runner asleep in ppoll wakes for events that came
// over MPI (the stamps are the client's, so this wake-up adds nothing to what is measured).
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "kernels/clock.h"
#include "kernels/mpi.h"
#include "serving/replica_clients.h"
#include "serving/replica_keys.h"

#define TAG_CTL      0x5c10
#define TAG_SYNC     0x5c11
#define TAG_OPENED   0x5c12
#define TAG_EV       0x5c40 // + the replica's index
#define MAX_REPLICAS 256
#define SYNC_ROUNDS  16
#define WAIT_NS      (30 * 1000000000ull) // an answer (OPENED, SYNC) from a client rank
#define EV_BATCH     256
#define CLOSED       UINT32_MAX // an EVENTS count: the rank freed its replica, nothing follows

enum { M_OPEN = 1, M_SUBMIT, M_CANCEL, M_CLOSE, M_SYNC, M_QUIT };

// --- a message: a growing byte buffer, and a reader over one

typedef struct msg {
  uint8_t *p;
  size_t n, cap;
  bool oom;
} msg;

static void put(msg *m, const void *v, size_t n) {
  if (m->oom) return;
  if (m->n + n > m->cap) {
    size_t cap = m->cap ? m->cap * 2 : 256;
    while (cap < m->n + n) cap *= 2;
    uint8_t *p = realloc(m->p, cap);
    if (!p) {
      m->oom = true;
      return;
    }
    m->p = p;
    m->cap = cap;
  }
  memcpy(m->p + m->n, v, n);
  m->n += n;
}
static void put_u32(msg *m, uint32_t v) { put(m, &v, sizeof v); }
static void put_u64(msg *m, uint64_t v) { put(m, &v, sizeof v); }
static void put_str(msg *m, const char *s) {
  uint32_t n = s ? (uint32_t)strlen(s) + 1 : 0; // 0: NULL
  put_u32(m, n);
  if (n) put(m, s, n);
}

typedef struct rd {
  const uint8_t *p;
  size_t n, off;
  bool bad;
} rd;

static bool get(rd *r, void *v, size_t n) {
  if (r->bad || r->n - r->off < n) return !(r->bad = true);
  memcpy(v, r->p + r->off, n);
  r->off += n;
  return true;
}
static uint32_t get_u32(rd *r) {
  uint32_t v = 0;
  get(r, &v, sizeof v);
  return v;
}
static uint64_t get_u64(rd *r) {
  uint64_t v = 0;
  get(r, &v, sizeof v);
  return v;
}
// A string in the message (NULL when it was NULL, or when the message is malformed).
static const char *get_str(rd *r) {
  uint32_t n = get_u32(r);
  if (r->bad || n == 0) return NULL;
  if (r->n - r->off < n || r->p[r->off + n - 1] != 0) {
    r->bad = true;
    return NULL;
  }
  const char *s = (const char *)r->p + r->off;
  r->off += n;
  return s;
}

static sc_status send_msg(int dst, int tag, msg *m, sc_error *err) {
  if (m->oom) return sc_fail(err, SC_OOM, "clients: out of memory");
  return sc_mpi_send_bytes(dst, tag, m->p, m->n, err);
}

// Waits (up to WAIT_NS) for a message from src on tag, yielding the core between looks (a clock
// round trip is as short as the two sides look).
static sc_status await_msg(int src, int tag, void **buf, size_t *n, sc_error *err) {
  uint64_t deadline = sc_monotonic_ns() + WAIT_NS;
  for (;;) {
    sc_status s = sc_mpi_try_recv_bytes(src, tag, buf, n, NULL, NULL, err);
    if (s != SC_TIMEOUT) return s;
    if (sc_monotonic_ns() >= deadline)
      return sc_fail(err, SC_TIMEOUT, "clients: rank %d did not answer within %.0f s", src,
                     (double)WAIT_NS / 1e9);
    sched_yield();
  }
}

// --- rank 0: the clocks

sc_status replica_clients_sync(replica_client_rank *out, int n, sc_error *err) {
  memset(out, 0, (size_t)n * sizeof *out);
  out[0].rank = 0;
  snprintf(out[0].host, sizeof out[0].host, "%.63s", sc_mpi_host());
  for (int k = 1; k < n; k++) {
    out[k].rank = k;
    out[k].rtt_ns = UINT64_MAX;
    for (int round = 0; round < SYNC_ROUNDS; round++) {
      msg m = {0};
      put_u32(&m, M_SYNC);
      put_u32(&m, 0);
      uint64_t t0 = sc_monotonic_ns();
      sc_status s = send_msg(k, TAG_CTL, &m, err);
      free(m.p);
      void *buf = NULL;
      size_t len = 0;
      if (s == SC_OK) s = await_msg(k, TAG_SYNC, &buf, &len, err);
      uint64_t t1 = sc_monotonic_ns();
      if (s != SC_OK) return s;
      rd r = {.p = buf, .n = len};
      uint64_t tk = get_u64(&r);
      const char *host = get_str(&r);
      if (r.bad) {
        free(buf);
        return sc_fail(err, SC_IO, "clients: a malformed clock answer from rank %d", k);
      }
      if (t1 - t0 < out[k].rtt_ns) {
        out[k].rtt_ns = t1 - t0;
        out[k].offset_ns = (int64_t)(tk - (t0 + (t1 - t0) / 2));
        snprintf(out[k].host, sizeof out[k].host, "%.63s", host ? host : "?");
      }
      free(buf);
    }
  }
  return SC_OK;
}

void replica_clients_quit(int n) {
  for (int k = 1; k < n; k++) {
    msg m = {0};
    put_u32(&m, M_QUIT);
    put_u32(&m, 0);
    sc_error e = {{0}};
    send_msg(k, TAG_CTL, &m, &e); // a rank already gone: its launcher ends the job anyway
    free(m.p);
  }
}

// --- rank 0: the wrapper

typedef struct clients {
  replica *inner;
  int index, n;
  replica_client_rank *ranks;
  uint64_t submitted; // the next submission goes to rank submitted % n
  replica_keys where; // key -> 1 + the rank that holds it
  replica_evq evq;    // events that came over MPI, not yet polled
  int ep, tfd;        // wait fd: inner's and a 1 ms timer
  char **what;        // failure messages that came over MPI (freed with the wrapper)
  size_t n_what, cap_what;
  char error[256]; // a client rank that could not be reached
  replica_i vt;    // inner's slots, wrapped
} clients;

static void forget(clients *c, const replica_event *ev) {
  if (ev->kind == REPLICA_EV_FINISHED || ev->kind == REPLICA_EV_FAILED) rk_del(&c->where, ev->key);
}

static sc_status c_submit(void *ctx, uint64_t key, const engine_request *q, sc_error *err) {
  clients *c = ctx;
  int k = (int)(c->submitted % (uint64_t)c->n);
  if (k == 0) SC_TRY(replica_submit(c->inner, key, q, err));
  if (!rk_put(&c->where, key, (uint64_t)k + 1))
    return sc_fail(err, SC_OOM, "replica %d: out of memory", c->index);
  c->submitted++;
  c->ranks[k].requests++;
  if (k == 0) return SC_OK;
  msg m = {0};
  put_u32(&m, M_SUBMIT);
  put_u32(&m, (uint32_t)c->index);
  put_u64(&m, key);
  engine_request copy = *q;
  copy.prompt = NULL;
  put(&m, &copy, sizeof copy);
  put(&m, q->prompt, (size_t)q->n_prompt * sizeof *q->prompt);
  sc_status s = send_msg(k, TAG_CTL, &m, err);
  free(m.p);
  if (s != SC_OK) rk_del(&c->where, key);
  return s;
}

static void c_cancel(void *ctx, uint64_t key) {
  clients *c = ctx;
  uint64_t at = rk_id(&c->where, key);
  if (at == 0) return;
  if (at == 1) {
    replica_cancel(c->inner, key);
    return;
  }
  msg m = {0};
  put_u32(&m, M_CANCEL);
  put_u32(&m, (uint32_t)c->index);
  put_u64(&m, key);
  sc_error e = {{0}};
  send_msg((int)at - 1, TAG_CTL, &m, &e);
  free(m.p);
}

// Keeps a failure message that came over MPI until the wrapper is freed.
static const char *keep_what(clients *c, const char *s) {
  if (!s) return NULL;
  if (c->n_what == c->cap_what) {
    size_t cap = c->cap_what ? 2 * c->cap_what : 16;
    char **v = realloc(c->what, cap * sizeof *v);
    if (!v) return NULL;
    c->what = v;
    c->cap_what = cap;
  }
  char *d = strdup(s);
  if (d) c->what[c->n_what++] = d;
  return d;
}

// Takes the EVENTS messages pending for this replica into evq, stamps on rank 0's clock.
static void take_remote(clients *c) {
  for (int guard = 0; guard < 64; guard++) {
    void *buf = NULL;
    size_t len = 0;
    int from = 0;
    sc_error e = {{0}};
    if (sc_mpi_try_recv_bytes(-1, TAG_EV + c->index, &buf, &len, &from, NULL, &e) != SC_OK) return;
    rd r = {.p = buf, .n = len};
    uint32_t n = get_u32(&r);
    if (n == CLOSED) n = 0; // (not expected while the wrapper lives)
    int64_t off = from > 0 && from < c->n ? c->ranks[from].offset_ns : 0;
    for (uint32_t i = 0; i < n && !r.bad; i++) {
      replica_event ev;
      if (!get(&r, &ev, sizeof ev)) break;
      const char *what = get_str(&r);
      if (r.bad) break;
      ev.what = keep_what(c, what);
      ev.t_ns = (uint64_t)((int64_t)ev.t_ns - off);
      if (ev.sched_ns) ev.sched_ns = (uint64_t)((int64_t)ev.sched_ns - off);
      if (ev.kind == REPLICA_EV_STEP && ev.step.t_start_ns)
        ev.step.t_start_ns = (uint64_t)((int64_t)ev.step.t_start_ns - off);
      forget(c, &ev);
      rq_push(&c->evq, &ev); // out of memory: lost (the request's timeout catches it)
    }
    free(buf);
  }
}

static int c_poll(void *ctx, replica_event *out, int cap) {
  clients *c = ctx;
  uint64_t v;
  ssize_t rr = read(c->tfd, &v, sizeof v); // the timer's expiries: looked at now
  (void)rr;
  int got = replica_poll(c->inner, out, cap);
  for (int i = 0; i < got; i++) forget(c, &out[i]);
  take_remote(c);
  if (got < cap) got += rq_take(&c->evq, out + got, cap - got);
  return got;
}

static int c_wait_fd(void *ctx) { return ((clients *)ctx)->ep; }
static replica_health c_health(void *ctx) { return replica_health_get(((clients *)ctx)->inner); }
static void c_set_admitting(void *ctx, bool a) {
  replica_set_admitting(((clients *)ctx)->inner, a);
}
static void c_stats(void *ctx, engine_stats *out) { replica_stats(((clients *)ctx)->inner, out); }
static sc_status c_rank_mem(void *ctx, int r, size_t *used, size_t *total) {
  return replica_rank_mem(((clients *)ctx)->inner, r, used, total);
}
static const char *c_error(void *ctx) {
  clients *c = ctx;
  return c->error[0] ? c->error : replica_error(c->inner);
}
static sc_status c_wait_ready(void *ctx, volatile sig_atomic_t *interrupted, sc_error *err) {
  return replica_wait_ready(((clients *)ctx)->inner, interrupted, err);
}
static int c_pid(void *ctx) { return replica_pid(((clients *)ctx)->inner); }
static int c_port(void *ctx) { return replica_port(((clients *)ctx)->inner); }
static bool c_server_metrics(void *ctx, replica_sm_when when, replica_server_metrics *out) {
  return replica_server_metrics_get(((clients *)ctx)->inner, when, out);
}
static void c_hold(void *ctx, bool on) { replica_hold(((clients *)ctx)->inner, on); }

static void c_free(void *ctx) {
  clients *c = ctx;
  if (!c) return;
  for (int k = 1; k < c->n; k++) {
    msg m = {0};
    put_u32(&m, M_CLOSE);
    put_u32(&m, (uint32_t)c->index);
    sc_error e = {{0}};
    sc_status s = send_msg(k, TAG_CTL, &m, &e);
    free(m.p);
    // what the rank sent before it closed is taken and dropped here, so that the next
    // deployment's replica of this index never sees it
    for (bool closed = s != SC_OK; !closed;) {
      void *buf = NULL;
      size_t len = 0;
      if (await_msg(k, TAG_EV + c->index, &buf, &len, &e) != SC_OK) break;
      rd r = {.p = buf, .n = len};
      closed = get_u32(&r) == CLOSED;
      free(buf);
    }
  }
  replica_free(c->inner);
  rk_free(&c->where);
  rq_free(&c->evq);
  for (size_t i = 0; i < c->n_what; i++) free(c->what[i]);
  free(c->what);
  if (c->ep >= 0) close(c->ep);
  if (c->tfd >= 0) close(c->tfd);
  free(c);
}

sc_status replica_clients_wrap(replica *inner, const replica_http_options *o, int n,
                               replica_client_rank *ranks, replica **out, sc_error *err) {
  *out = NULL;
  int index = inner->index;
  if (index < 0 || index >= MAX_REPLICAS) {
    replica_free(inner);
    return sc_fail(err, SC_INVALID, "clients: replica %d: at most %d replicas", index,
                   MAX_REPLICAS);
  }
  clients *c = calloc(1, sizeof *c);
  replica *r = calloc(1, sizeof *r);
  if (!c || !r) {
    free(c);
    free(r);
    replica_free(inner);
    return sc_fail(err, SC_OOM, "replica %d: out of memory", index);
  }
  c->inner = inner;
  c->index = index;
  c->n = n;
  c->ranks = ranks;
  c->ep = epoll_create1(EPOLL_CLOEXEC);
  c->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  struct itimerspec its = {.it_interval = {0, 1000000}, .it_value = {0, 1000000}};
  int ifd = replica_wait_fd(inner);
  if (c->ep < 0 || c->tfd < 0 || timerfd_settime(c->tfd, 0, &its, NULL) != 0 ||
      epoll_ctl(c->ep, EPOLL_CTL_ADD, c->tfd, &(struct epoll_event){.events = EPOLLIN}) != 0 ||
      (ifd >= 0 &&
       epoll_ctl(c->ep, EPOLL_CTL_ADD, ifd, &(struct epoll_event){.events = EPOLLIN}) != 0)) {
    int e = errno;
    c->n = 1; // nothing was opened elsewhere
    c_free(c);
    free(r);
    return sc_fail(err, SC_IO, "replica %d: epoll/timerfd: %s", index, strerror(e));
  }
  // every other rank opens its own HTTP replica of the same server
  sc_status s = SC_OK;
  for (int k = 1; k < n && s == SC_OK; k++) {
    msg m = {0};
    put_u32(&m, M_OPEN);
    put_u32(&m, (uint32_t)index);
    put_u32(&m, (uint32_t)inner->n_ranks);
    put_u32(&m, o->chat);
    put_u64(&m, o->connect_timeout_ns);
    put_str(&m, o->base_url);
    put_str(&m, o->model);
    put_str(&m, o->api_key);
    put_str(&m, o->extra_body);
    s = send_msg(k, TAG_CTL, &m, err);
    free(m.p);
  }
  for (int k = 1; k < n && s == SC_OK; k++) {
    void *buf = NULL;
    size_t len = 0;
    s = await_msg(k, TAG_OPENED, &buf, &len, err);
    if (s != SC_OK) break;
    rd rr = {.p = buf, .n = len};
    get_u32(&rr);
    int32_t st = (int32_t)get_u32(&rr);
    const char *why = get_str(&rr);
    if (rr.bad)
      s = sc_fail(err, SC_IO, "clients: a malformed answer from rank %d", k);
    else if (st != SC_OK)
      s = sc_fail(err, (sc_status)st, "client rank %d: %s", k, why ? why : "cannot open");
    free(buf);
  }
  if (s != SC_OK) {
    c_free(c);
    free(r);
    return s;
  }
  c->vt = (replica_i){.submit = c_submit,
                      .cancel = c_cancel,
                      .poll = c_poll,
                      .wait_fd = c_wait_fd,
                      .health = c_health,
                      .set_admitting = c_set_admitting,
                      .stats = c_stats,
                      .rank_mem = c_rank_mem,
                      .error = c_error,
                      .free = c_free};
  const replica_i *in = inner->i;
  if (in->wait_ready) c->vt.wait_ready = c_wait_ready;
  if (in->pid) c->vt.pid = c_pid;
  if (in->port) c->vt.port = c_port;
  if (in->server_metrics) c->vt.server_metrics = c_server_metrics;
  if (in->hold) c->vt.hold = c_hold;
  *r = *inner; // index, ranks and the stamps' meaning are inner's
  r->i = &c->vt;
  r->ctx = c;
  r->client_stamps = true;
  *out = r;
  return SC_OK;
}

// --- every rank but 0

typedef struct served {
  replica *rep[MAX_REPLICAS];
  int32_t *prompt;
  size_t prompt_cap;
  replica_event ev[EV_BATCH];
  bool quit;
  uint64_t synced_ns; // the latest SYNC: the loop spins for a while after one
} served;

static void answer_open(int index, sc_status st, const char *why) {
  msg m = {0};
  put_u32(&m, (uint32_t)index);
  put_u32(&m, (uint32_t)st);
  put_str(&m, why);
  sc_error e = {{0}};
  send_msg(0, TAG_OPENED, &m, &e);
  free(m.p);
}

// Applies one message from rank 0. False when it is malformed.
static bool apply(served *sv, const uint8_t *buf, size_t len) {
  rd r = {.p = buf, .n = len};
  uint32_t type = get_u32(&r), index = get_u32(&r);
  if (r.bad || (type != M_SYNC && type != M_QUIT && index >= MAX_REPLICAS)) return false;
  replica **slot = &sv->rep[index < MAX_REPLICAS ? index : 0];
  switch (type) {
  case M_OPEN: {
    int n_ranks = (int)get_u32(&r);
    bool chat = get_u32(&r) != 0;
    uint64_t connect_ns = get_u64(&r);
    const char *url = get_str(&r), *model = get_str(&r), *key = get_str(&r), *extra = get_str(&r);
    if (r.bad || !url) return false;
    replica_free(*slot);
    *slot = NULL;
    engine_config cfg = engine_config_defaults();
    cfg.tp = n_ranks > 0 ? n_ranks : 1;
    cfg.pp = 1;
    cfg.clock = sc_clock_monotonic();
    replica_http_options o = {.base_url = url,
                              .chat = chat,
                              .model = model,
                              .api_key = key,
                              .extra_body = extra,
                              .connect_timeout_ns = connect_ns};
    sc_error err = {{0}};
    sc_status s = replica_http_new(&cfg, &o, (int)index, slot, &err);
    answer_open((int)index, s, err.msg);
    return true;
  }
  case M_SUBMIT: {
    uint64_t key = get_u64(&r);
    engine_request q;
    if (!get(&r, &q, sizeof q) || q.n_prompt < 0) return false;
    size_t need = (size_t)q.n_prompt;
    if (need > sv->prompt_cap) {
      int32_t *p = realloc(sv->prompt, need * sizeof *p);
      if (!p) return false;
      sv->prompt = p;
      sv->prompt_cap = need;
    }
    if (!get(&r, sv->prompt, need * sizeof *sv->prompt)) return false;
    q.prompt = sv->prompt;
    sc_error err = {{0}};
    sc_status s = *slot ? replica_submit(*slot, key, &q, &err)
                        : sc_fail(&err, SC_ABORTED, "no replica %u here", index);
    if (s != SC_OK) { // as a replica that refuses: a FAILED event
      replica_event ev = {.kind = REPLICA_EV_FAILED,
                          .key = key,
                          .status = s,
                          .t_ns = sc_monotonic_ns(),
                          .failure = replica_failure_of(s)};
      msg m = {0};
      put_u32(&m, 1);
      ev.what = NULL;
      put(&m, &ev, sizeof ev);
      put_str(&m, err.msg);
      send_msg(0, TAG_EV + (int)index, &m, &err);
      free(m.p);
    }
    return true;
  }
  case M_CANCEL: {
    uint64_t key = get_u64(&r);
    if (r.bad) return false;
    if (*slot) replica_cancel(*slot, key);
    return true;
  }
  case M_CLOSE: {
    replica_free(*slot);
    *slot = NULL;
    msg m = {0};
    put_u32(&m, CLOSED);
    sc_error e = {{0}};
    send_msg(0, TAG_EV + (int)index, &m, &e);
    free(m.p);
    return true;
  }
  case M_SYNC: {
    sv->synced_ns = sc_monotonic_ns();
    msg m = {0};
    put_u64(&m, sc_monotonic_ns());
    put_str(&m, sc_mpi_host());
    sc_error e = {{0}};
    send_msg(0, TAG_SYNC, &m, &e);
    free(m.p);
    return true;
  }
  case M_QUIT: sv->quit = true; return true;
  default: return false;
  }
}

// Sends every replica's pending events to rank 0.
static void forward(served *sv) {
  for (int i = 0; i < MAX_REPLICAS; i++) {
    if (!sv->rep[i]) continue;
    int n;
    while ((n = replica_poll(sv->rep[i], sv->ev, EV_BATCH)) > 0) {
      msg m = {0};
      put_u32(&m, (uint32_t)n);
      for (int k = 0; k < n; k++) {
        replica_event ev = sv->ev[k];
        const char *what = ev.what;
        ev.what = NULL;
        put(&m, &ev, sizeof ev);
        put_str(&m, what);
      }
      sc_error e = {{0}};
      send_msg(0, TAG_EV + i, &m, &e);
      free(m.p);
    }
  }
}

int replica_clients_serve(void) {
  served *sv = calloc(1, sizeof *sv);
  if (!sv) return 3;
  int rc = 0;
  while (!sv->quit) {
    for (int guard = 0; guard < 256 && !sv->quit; guard++) {
      void *buf = NULL;
      size_t len = 0;
      sc_error e = {{0}};
      sc_status s = sc_mpi_try_recv_bytes(0, TAG_CTL, &buf, &len, NULL, NULL, &e);
      if (s == SC_TIMEOUT) break;
      if (s != SC_OK || !apply(sv, buf, len)) {
        fprintf(stderr, "shardcheck run: client rank %d: %s\n", sc_mpi_rank(),
                s != SC_OK ? e.msg : "a malformed message from rank 0");
        rc = 3;
        sv->quit = true;
      }
      free(buf);
    }
    forward(sv);
    if (sv->quit) break;
    // sleep on the replicas' fds, looking at MPI again within 200 us (not at all within 100 ms
    // of a SYNC: rank 0 is measuring the clocks, and each look's delay is its error)
    if (sc_monotonic_ns() - sv->synced_ns < 100000000ull) {
      sched_yield();
      continue;
    }
    struct pollfd pf[MAX_REPLICAS];
    nfds_t np = 0;
    for (int i = 0; i < MAX_REPLICAS; i++) {
      int fd = sv->rep[i] ? replica_wait_fd(sv->rep[i]) : -1;
      if (fd >= 0) pf[np++] = (struct pollfd){.fd = fd, .events = POLLIN};
    }
    struct timespec ts = {0, 200000};
    ppoll(pf, np, &ts, NULL);
  }
  for (int i = 0; i < MAX_REPLICAS; i++) replica_free(sv->rep[i]);
  free(sv->prompt);
  free(sv);
  return rc;
}
