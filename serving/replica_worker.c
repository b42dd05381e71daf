// The worker side of the process replica: `shardcheck worker --fd N` (cli/cmd_worker.c) calls
// replica_proc_serve, which serves one local replica to the runner over a Unix socket. The
// runner's side, and why replicas run as processes at all, is serving/replica_proc.c.
//
// replica_proc_serve reads CONFIG, builds a local replica (serving/replica_local.c,
// which owns the engine, its thread and how faults act), answers READY or ERROR, then serves:
// applies what the runner sends (what one read brings with its replica held, so it is admitted
// together; a SWAP frees the replica and builds one on the new weights), forwards events in
// batches and a heartbeat every heartbeat_ns, and reports DEAD when its replica dies. The
// message format is serving/wire.c; what to do with events and when to restart is the runner's.
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kernels/clock.h"
#include "serving/replica.h"
#include "serving/replica_keys.h"
#include "serving/replica_mpi.h"
#include "serving/wire.h"

typedef struct worker {
  int fd;         // blocking socket to the runner
  uint32_t epoch; // from CONFIG
  wire_buf in, out;
  replica *rep;
  int32_t *prompt; // decode buffer for SUBMIT (prompt_cap ids)
  int prompt_cap;
  int n_ranks;
  size_t *mem_used, *mem_total; // (n_ranks) bytes, for reports
  bool failed;                  // a swap could not build its replica: ERROR sent, exit 3
  bool mpi;                     // rank 0 of an MPI job: the replica's ranks are its processes
  replica_event ev[WIRE_EVENTS_MAX];
} worker;

// Sends everything buffered (blocking). False when the runner is gone (or fenced us).
static bool w_flush(worker *w) {
  size_t off = 0;
  while (off < w->out.n) {
    ssize_t n = send(w->fd, w->out.p + off, w->out.n - off, MSG_NOSIGNAL);
    if (n > 0) off += (size_t)n;
    else if (n < 0 && errno == EINTR) continue;
    else return false;
  }
  w->out.n = 0;
  return true;
}

static bool w_put_status(worker *w, int type) {
  wire_status s = {.health = replica_health_get(w->rep), .n_ranks = w->n_ranks,
                   .mem_used = w->mem_used, .mem_total = w->mem_total,
                   .wall_ns = wire_wall_ns()};
  replica_stats(w->rep, &s.stats);
  for (int r = 0; r < w->n_ranks; r++)
    if (replica_rank_mem(w->rep, r, &w->mem_used[r], &w->mem_total[r]) != SC_OK)
      w->mem_used[r] = w->mem_total[r] = 0;
  snprintf(s.error, sizeof s.error, "%s", replica_error(w->rep));
  return wire_put_status(&w->out, type, w->epoch, &s);
}

// Moves every pending event of the local replica into EVENTS messages.
static bool w_put_events(worker *w) {
  int n;
  if (!w->rep) return true; // between two replicas of a swap
  while ((n = replica_poll(w->rep, w->ev, WIRE_EVENTS_MAX)) > 0)
    if (!wire_put_events(&w->out, w->epoch, w->ev, n)) return false;
  return true;
}

// Sizes the memory figures for the replica's ranks. False when memory ran out.
static bool w_size_ranks(worker *w) {
  int n = w->rep->n_ranks;
  size_t *u = realloc(w->mem_used, (size_t)n * sizeof *u);
  if (u) w->mem_used = u;
  size_t *t = realloc(w->mem_total, (size_t)n * sizeof *t);
  if (t) w->mem_total = t;
  if (!u || !t) return false;
  memset(u, 0, (size_t)n * sizeof *u);
  memset(t, 0, (size_t)n * sizeof *t);
  w->n_ranks = n;
  return true;
}

// Builds the local replica from wc. Rank 0 of an MPI job first sends the config to every other
// rank, and the engine's ranks are the job's processes.
static sc_status w_build(worker *w, wire_config *wc, sc_error *err) {
  wc->cfg.clock = sc_clock_monotonic();
  if (w->mpi) {
    wc->cfg.mpi = true;
    SC_TRY(replica_mpi_lead(&wc->cfg, wc->index, wc->heartbeat_ns, err));
  }
  return replica_local_new(&wc->cfg, wc->index, &w->rep, err);
}

// A SWAP (at epoch, the next one): the local replica is rebuilt on the new weights. The old
// one is freed first, so two sets of weights are never held at once (the runner drained it
// and has failed whatever it still held). Answers READY at the new epoch, or ERROR and sets
// w->failed. False when the message is malformed or memory ran out.
static bool w_swap(worker *w, wire_reader *r, uint32_t epoch) {
  wire_config *wc = calloc(1, sizeof *wc);
  if (!wc) return false;
  if (!wire_get_config(r, wc)) {
    free(wc);
    return false;
  }
  replica_free(w->rep);
  w->rep = NULL;
  w->epoch = epoch;
  sc_error err = {{0}};
  sc_status s = w_build(w, wc, &err);
  free(wc);
  if (s == SC_OK && !w_size_ranks(w)) s = sc_fail(&err, SC_OOM, "worker: out of memory");
  if (s != SC_OK) {
    w->failed = true;
    return wire_put_message(&w->out, WIRE_ERROR, epoch, s,
                            err.msg[0] ? err.msg : sc_status_name(s));
  }
  return w_put_status(w, WIRE_READY);
}

// Applies one message from the runner (epoch: the frame's). False when it is malformed.
static bool w_apply(worker *w, int type, uint32_t epoch, const uint8_t *body, size_t n) {
  wire_reader r = {.p = body, .n = n};
  switch (type) {
  case WIRE_SWAP: return w_swap(w, &r, epoch);
  case WIRE_SUBMIT: {
    uint64_t key;
    engine_request q;
    if (!wire_get_submit(&r, &key, &q, &w->prompt, &w->prompt_cap)) return false;
    sc_error err = {{0}};
    sc_status s = replica_submit(w->rep, key, &q, &err);
    if (s != SC_OK) { // the replica is dead: the request fails here
      replica_event ev = {.kind = REPLICA_EV_FAILED, .key = key, .status = s,
                          .t_ns = sc_monotonic_ns()};
      ev.failure = replica_failure_of(s);
      return wire_put_events(&w->out, w->epoch, &ev, 1);
    }
    return true;
  }
  case WIRE_CANCEL: {
    uint64_t key;
    if (!wire_get_cancel(&r, &key)) return false;
    replica_cancel(w->rep, key);
    return true;
  }
  case WIRE_ADMIT: {
    bool a;
    if (!wire_get_admit(&r, &a)) return false;
    replica_set_admitting(w->rep, a);
    return true;
  }
  case WIRE_INJECT: {
    replica_fault f;
    if (!wire_get_inject(&r, &f)) return false;
    sc_error err = {{0}};
    replica_inject(w->rep, &f, &err); // its effect (or refusal) shows in later reports
    return true;
  }
  default: return false;
  }
}

typedef enum w_recv { RECV_OK, RECV_EOF, RECV_BAD } w_recv;

// Reads what the socket holds and applies every whole message.
static w_recv w_receive(worker *w) {
  bool eof = false;
  for (;;) {
    if (!wire_reserve(&w->in, WIRE_READ_CHUNK)) return RECV_BAD;
    ssize_t r = recv(w->fd, w->in.p + w->in.n, w->in.cap - w->in.n, MSG_DONTWAIT);
    if (r > 0) {
      w->in.n += (size_t)r;
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    eof = true;
    break;
  }
  // what was read at once is admitted at once: the replica is held while it is applied
  size_t off = 0;
  replica *held = w->rep;
  if (held) replica_hold(held, true);
  w_recv got = RECV_OK;
  for (;;) {
    int type;
    uint32_t epoch;
    const uint8_t *body;
    size_t body_n, frame_n;
    int f = wire_frame(w->in.p + off, w->in.n - off, &type, &epoch, &body, &body_n, &frame_n);
    if (f == 0) break;
    if (f > 0 && type == WIRE_SWAP && held) { // the replica is about to be freed
      replica_hold(held, false);
      held = NULL;
    }
    if (f < 0 || !w_apply(w, type, epoch, body, body_n)) {
      got = RECV_BAD;
      break;
    }
    off += frame_n;
    if (w->failed) break; // nothing more is applied: the worker exits
  }
  if (held) replica_hold(held, false);
  if (got == RECV_BAD) return RECV_BAD;
  wire_consume(&w->in, off);
  return eof ? RECV_EOF : RECV_OK;
}

// Reads the CONFIG frame (blocking). 1 with *cfg, 0 at the end of the stream, -1 when what
// came is not a config.
static int w_read_config(worker *w, wire_config *cfg) {
  for (;;) {
    int type;
    uint32_t epoch;
    const uint8_t *body;
    size_t body_n, frame_n;
    int f = wire_frame(w->in.p, w->in.n, &type, &epoch, &body, &body_n, &frame_n);
    if (f < 0) return -1;
    if (f > 0) {
      wire_reader r = {.p = body, .n = body_n};
      if (type != WIRE_CONFIG || !wire_get_config(&r, cfg)) return -1;
      w->epoch = epoch;
      wire_consume(&w->in, frame_n);
      return 1;
    }
    if (!wire_reserve(&w->in, WIRE_READ_CHUNK)) return -1;
    ssize_t r = recv(w->fd, w->in.p + w->in.n, w->in.cap - w->in.n, 0);
    if (r > 0) w->in.n += (size_t)r;
    else if (r < 0 && errno == EINTR) continue;
    else return 0;
  }
}

static void w_free(worker *w) {
  replica_free(w->rep);
  wire_buf_free(&w->in);
  wire_buf_free(&w->out);
  free(w->prompt);
  free(w->mem_used);
  free(w->mem_total);
}

// Reports DEAD (after the events still pending) and returns the worker's exit status.
static int w_die(worker *w, const char *msg) {
  w_put_events(w);
  wire_put_message(&w->out, WIRE_DEAD, w->epoch, SC_ABORTED, msg);
  w_flush(w);
  w_free(w);
  return 3;
}

// Serves on fd (see replica_proc_serve); mpi: as rank 0 of an MPI job (replica_proc_serve_mpi),
// refuse: the reason to answer CONFIG with ERROR (NULL: none).
static int serve(int fd, bool mpi, const char *refuse) {
  worker *w = calloc(1, sizeof *w);
  if (!w) return 3;
  w->fd = fd;
  w->mpi = mpi;
  wire_config *wc = calloc(1, sizeof *wc);
  if (!wc) {
    free(w);
    return 3;
  }
  int got = w_read_config(w, wc);
  if (got <= 0) {
    if (got < 0) {
      wire_put_message(&w->out, WIRE_ERROR, w->epoch, SC_INVALID,
                       "worker: the first message was not a valid config");
      w_flush(w);
    }
    w_free(w);
    free(wc);
    free(w);
    return got < 0 ? 3 : 0;
  }
  uint64_t hb = wc->heartbeat_ns ? wc->heartbeat_ns : WIRE_HEARTBEAT_NS;
  sc_error err = {{0}};
  sc_status s = refuse ? sc_fail(&err, SC_INVALID, "%s", refuse) : w_build(w, wc, &err);
  if (s == SC_OK && !w_size_ranks(w)) s = sc_fail(&err, SC_OOM, "worker: out of memory");
  free(wc);
  if (s != SC_OK) {
    wire_put_message(&w->out, WIRE_ERROR, w->epoch, s, err.msg[0] ? err.msg : sc_status_name(s));
    w_flush(w);
    w_free(w);
    free(w);
    return 3;
  }
  int rc = 0;
  if (!w_put_status(w, WIRE_READY) || !w_flush(w)) {
    w_free(w);
    free(w);
    return 0;
  }
  uint64_t next_hb = sc_monotonic_ns() + hb;
  for (;;) {
    uint64_t now = sc_monotonic_ns();
    uint64_t d = next_hb > now ? next_hb - now : 0;
    struct timespec ts = {.tv_sec = (time_t)(d / 1000000000ull),
                          .tv_nsec = (long)(d % 1000000000ull)};
    struct pollfd pf[2] = {{.fd = fd, .events = POLLIN},
                           {.fd = replica_wait_fd(w->rep), .events = POLLIN}};
    int np = ppoll(pf, 2, &ts, NULL);
    if (np > 0 && pf[0].revents) {
      w_recv got_in = w_receive(w);
      if (got_in == RECV_BAD) {
        rc = w_die(w, "worker: malformed message from the runner");
        break;
      }
      if (got_in == RECV_EOF || w->failed) { // the runner closed the socket: done
        if (w->failed) w_flush(w);
        w_free(w);
        rc = w->failed ? 3 : 0;
        break;
      }
    }
    bool ok = w_put_events(w);
    now = sc_monotonic_ns();
    if (ok && now >= next_hb) {
      ok = w_put_status(w, WIRE_HEARTBEAT);
      next_hb = now + hb;
    }
    if (replica_health_get(w->rep) == REPLICA_DEAD) {
      const char *why = replica_error(w->rep);
      char msg[512];
      snprintf(msg, sizeof msg, "%s", why[0] ? why : "the engine failed");
      rc = w_die(w, msg);
      break;
    }
    if (!ok) {
      rc = w_die(w, "worker: out of memory");
      break;
    }
    if (!w_flush(w)) { // the runner is gone, or fenced this worker: leave quietly
      w_free(w);
      rc = 0;
      break;
    }
  }
  free(w);
  return rc;
}

int replica_proc_serve(int fd) { return serve(fd, false, NULL); }

int replica_proc_serve_mpi(int fd, const char *refuse) { return serve(fd, true, refuse); }
