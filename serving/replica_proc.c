// The process replica: a `shardcheck worker` child holding a local replica, spoken to over a
// Unix socket, so that a fault can SIGKILL or SIGSTOP a replica for real. This file is the
// runner's side (a replica_i over the socket); the worker's side is serving/replica_worker.c.
//
// Runner side. replica_proc_new forks and execs `EXE worker --fd 3` (the child dies with its
// parent: PR_SET_PDEATHSIG), sends CONFIG and waits for READY. Requests, cancels, admitting and
// faults go out as messages, buffered in the runner and flushed without blocking; events and status
// reports (heartbeats) come back. KILL, HANG and RESUME are signals (SIGKILL, SIGSTOP, SIGCONT);
// every other fault is forwarded and the worker applies it to its local replica. Loss detection
// runs in poll and in health: end of stream, a DEAD message, or no message for detect_timeout_ns. A
// lost worker is fenced: its socket is closed (a stale worker that comes back finds nobody to talk
// to and exits), its pid goes to a fenced list reaped without blocking, and every request it held
// fails with "replica_lost". restart starts a fresh worker with the next epoch; every message
// carries the epoch and one from another epoch is dropped. hold keeps submissions in the buffer
// until released, so the worker reads them at once and admits them in one step. swap (a hot swap)
// is a SWAP message: the worker rebuilds its local replica on the new weights in place and answers
// READY at the next epoch. Workers start with this process's environment plus the entries the
// options add (a clock jump preloads libfaketime this way), and report their wall clock in every
// status, so the runner sees a jump land. wait_fd is an epoll fd that is readable while the socket
// has data, events are pending, or the loss deadline has passed, so a runner sleeping in ppoll
// wakes for each. The worker runs in its own process group: a terminal's ^C reaches the runner
// only, which stops cleanly and frees its replicas (free closes the socket; the worker exits 0).
//
// A replica whose ranks are the processes of an MPI job (options.mpi, router.isolation mpi) is
// the same replica with another child: the MPI launcher running tp x pp `EXE worker --connect
// SOCKET` ranks, rank 0 of which connects to a socket this side listens on and speaks the same
// protocol (serving/replica_mpi.c). Its faults reach the ranks' processes on this host: kill
// (replica) SIGKILLs rank 0, kill: gpu the named rank, hang and resume stop and continue every
// rank; MPI ends a job one of whose ranks died, so each is a lost replica as with a worker.
//
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "serving/replica.h"
#include "serving/replica_keys.h"
#include "serving/replica_mpi.h"
#include "serving/wire.h"
#include "kernels/clock.h"

#define NS_PER_S 1000000000ull
#define DEFAULT_DETECT_NS (2 * NS_PER_S)
#define READY_TIMEOUT_NS (120 * NS_PER_S) // building the engine may take a while
#define EXIT_WAIT_NS (1 * NS_PER_S)       // a worker that closed its socket is exiting
#define DEAD_WAIT_NS (250 * 1000000ull)   // a worker that reported DEAD frees, then exits
#define FREE_WAIT_NS (2 * NS_PER_S)       // free: grace before SIGKILL
#define FREE_WAIT_MPI_NS  (10 * NS_PER_S)    // an MPI job ends every rank and finalizes
#define WORKER_FD 3                       // the socket's fd in the worker
#define READ_MAX_PER_CALL (16u << 20) // bytes read by one update at most (the rest next time)

static void sleep_ns(uint64_t ns) {
  struct timespec ts = {.tv_sec = (time_t)(ns / NS_PER_S), .tv_nsec = (long)(ns % NS_PER_S)};
  nanosleep(&ts, NULL);
}

// Waits up to wait_ns for child pid to end. True when it has been reaped (*known: its wait
// status is in *status; false when the system reaped it, SIGCHLD ignored).
static bool reap(pid_t pid, uint64_t wait_ns, int *status, bool *known) {
  uint64_t deadline = sc_monotonic_ns() + wait_ns;
  for (;;) {
    pid_t w = waitpid(pid, status, WNOHANG);
    if (w == pid) {
      *known = true;
      return true;
    }
    if (w < 0 && errno == ECHILD) {
      *known = false;
      return true;
    }
    if (w < 0 && errno == EINTR) continue;
    if (sc_monotonic_ns() >= deadline) return false;
    sleep_ns(1000000);
  }
}

// ============================================================================================
// --- runner side
// ============================================================================================

typedef enum loss {
  LOSS_NONE,
  LOSS_EOF,      // the socket closed or failed
  LOSS_DEAD,     // the worker reported DEAD (its engine failed)
  LOSS_HUNG,     // nothing arrived for detect_ns
  LOSS_PROTOCOL, // the worker sent something undecodable
} loss;

typedef struct proc {
  // what every incarnation is built from (strings owned)
  engine_config cfg;
  char *weights_dir, *backend, *exe;
  char **env;           // (NULL-terminated) extra environment entries of the worker
  uint64_t detect_ns, heartbeat_ns;
  int index, n_ranks;
  bool mpi;                // the worker is an MPI job of n_ranks processes
  char *mpirun, *hostfile; // its launcher; the hostfile that places its ranks (NULL: here)
  // the incarnation serving now
  int epoch;            // 1 at start, +1 per restart
  pid_t pid;            // its worker (0: none)
  int fd;               // socket to it, non-blocking (-1: none)
  wire_buf in, out;     // bytes received and not yet decoded; bytes not yet sent
  uint64_t last_msg_ns; // monotonic: when the latest message from the worker was read
  bool dead;
  bool admitting;
  bool held; // replica_hold: submissions stay in out until released
  replica_health worker_health; // as the latest report says
  engine_stats stats;           // as the latest report says
  size_t *mem_used, *mem_total; // (n_ranks) bytes, as the latest report says
  char error[512];              // why it died ("" while alive)
  char dead_msg[512];           // the worker's DEAD message ("" when none came)
  char protocol_error[128];
  replica_keys outstanding; // keys submitted and not yet FINISHED or FAILED (value 1)
  replica_evq evq;          // events decoded and not yet polled
  // wait_fd: an epoll set of the socket, evfd (readable while evq holds events) and tfd (fires
  // at the loss deadline)
  int ep, evfd, tfd;
  bool signalled; // evfd holds a count
  // stale workers: fenced (socket closed), not reaped yet
  pid_t *fenced;
  int n_fenced, cap_fenced;
  uint64_t stale_msgs; // messages dropped because their epoch was not the current one
  int64_t wall_skew_ns; // the worker's wall clock minus ours, at its latest report
  bool have_skew;
} proc;

static const replica_i proc_i;

static void signal_events(proc *p) {
  if (p->signalled || rq_len(&p->evq) == 0) return;
  uint64_t one = 1;
  ssize_t w = write(p->evfd, &one, sizeof one);
  (void)w; // a full counter is readable anyway
  p->signalled = true;
}

static void clear_events_signal(proc *p) {
  if (!p->signalled || rq_len(&p->evq) > 0) return;
  uint64_t v;
  ssize_t r = read(p->evfd, &v, sizeof v);
  (void)r; // non-blocking: empty is fine
  p->signalled = false;
}

// Arms the loss deadline (last message + detect_ns) while alive; disarms it when dead.
static void arm_timer(proc *p) {
  struct itimerspec its = {{0, 0}, {0, 0}};
  if (!p->dead) {
    uint64_t t = p->last_msg_ns + p->detect_ns;
    its.it_value = (struct timespec){.tv_sec = (time_t)(t / NS_PER_S),
                                     .tv_nsec = (long)(t % NS_PER_S)};
    if (t == 0) its.it_value.tv_nsec = 1; // zero would disarm
  }
  timerfd_settime(p->tfd, TFD_TIMER_ABSTIME, &its, NULL);
  uint64_t v;
  ssize_t r = read(p->tfd, &v, sizeof v); // clears an expiry already counted
  (void)r;
}

static void push_event(proc *p, const replica_event *ev) {
  // out of memory: the event is lost (the runner's request timeout catches its request)
  if (!rq_push(&p->evq, ev)) return;
  if (ev->kind == REPLICA_EV_FINISHED || ev->kind == REPLICA_EV_FAILED)
    rk_del(&p->outstanding, ev->key);
}

static void add_fenced(proc *p, pid_t pid) {
  if (p->n_fenced == p->cap_fenced) {
    int cap = p->cap_fenced ? p->cap_fenced * 2 : 4;
    pid_t *f = realloc(p->fenced, (size_t)cap * sizeof *f);
    if (!f) { // cannot keep track: end it now rather than leave it unreaped
      kill(pid, SIGKILL);
      while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
      }
      return;
    }
    p->fenced = f;
    p->cap_fenced = cap;
  }
  p->fenced[p->n_fenced++] = pid;
}

// Reaps the fenced workers that have ended (never blocks).
static void reap_fenced(proc *p) {
  for (int i = 0; i < p->n_fenced;) {
    int st;
    bool known;
    if (reap(p->fenced[i], 0, &st, &known)) p->fenced[i] = p->fenced[--p->n_fenced];
    else i++;
  }
}

// Closes the socket to the worker (the fence) and drops the byte buffers.
static void close_socket(proc *p) {
  if (p->fd >= 0) {
    epoll_ctl(p->ep, EPOLL_CTL_DEL, p->fd, NULL);
    close(p->fd);
    p->fd = -1;
  }
  p->in.n = p->out.n = 0;
}

static void fail_outstanding(void *ud, uint64_t key) {
  proc *p = ud;
  replica_event ev = {.kind = REPLICA_EV_FAILED, .key = key, .status = SC_ABORTED,
                      .t_ns = sc_monotonic_ns()};
  ev.failure = REPLICA_FAIL_LOST;
  rq_push(&p->evq, &ev);
}

// The worker is lost (why): fence it, mark the replica DEAD with the reason, fail every
// outstanding request with "replica_lost".
static void lose(proc *p, loss why) {
  close_socket(p);
  int st = 0;
  bool known = false, reaped = false;
  if (p->pid > 0 && why != LOSS_HUNG)
    reaped = reap(p->pid, why == LOSS_DEAD ? DEAD_WAIT_NS : EXIT_WAIT_NS, &st, &known);
  const char *msg = p->dead_msg;
  const char *sep = msg[0] ? ": " : "";
  if (reaped && known && WIFEXITED(st))
    snprintf(p->error, sizeof p->error, "%s exited with status %d%s%.400s",
             p->mpi ? "MPI job" : "worker", WEXITSTATUS(st), sep, msg);
  else if (reaped && known && WIFSIGNALED(st))
    snprintf(p->error, sizeof p->error, "%s killed by signal %d%s%.400s",
             p->mpi ? "MPI launcher" : "worker", WTERMSIG(st), sep, msg);
  else if (why == LOSS_HUNG)
    snprintf(p->error, sizeof p->error, "no heartbeat for %.3f s (hung?)",
             (double)p->detect_ns / 1e9);
  else if (why == LOSS_PROTOCOL)
    snprintf(p->error, sizeof p->error, "bad message from the worker: %s", p->protocol_error);
  else if (why == LOSS_DEAD)
    snprintf(p->error, sizeof p->error, "worker failed: %.400s", msg);
  else if (reaped)
    snprintf(p->error, sizeof p->error, "worker exited%s%.400s", sep, msg);
  else
    snprintf(p->error, sizeof p->error, "worker closed its socket%s%.400s", sep, msg);
  if (p->pid > 0 && !reaped) add_fenced(p, p->pid);
  p->pid = 0;
  p->dead = true;
  rk_each(&p->outstanding, fail_outstanding, p);
  rk_free(&p->outstanding);
  arm_timer(p);
  signal_events(p);
}

// Sends what is buffered without blocking. False when the socket failed (the peer is gone).
static bool flush_out(proc *p) {
  size_t off = 0;
  bool ok = true;
  while (off < p->out.n) {
    ssize_t w = send(p->fd, p->out.p + off, p->out.n - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      off += (size_t)w;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    ok = false;
    break;
  }
  wire_consume(&p->out, off);
  return ok;
}

static loss protocol_error(proc *p, const char *what, int type) {
  snprintf(p->protocol_error, sizeof p->protocol_error, "%s (message type %d)", what, type);
  return LOSS_PROTOCOL;
}

// Applies one message from the worker. LOSS_DEAD after a DEAD message, LOSS_PROTOCOL for a
// malformed one, else LOSS_NONE.
static loss handle(proc *p, int type, uint32_t epoch, const uint8_t *body, size_t n) {
  if (epoch != (uint32_t)p->epoch) {
    p->stale_msgs++;
    return LOSS_NONE;
  }
  p->last_msg_ns = sc_monotonic_ns();
  wire_reader r = {.p = body, .n = n};
  switch (type) {
  case WIRE_EVENTS: {
    int k;
    if (!wire_get_events_count(&r, &k)) return protocol_error(p, "bad event count", type);
    for (int i = 0; i < k; i++) {
      replica_event ev;
      if (!wire_get_event(&r, &ev)) return protocol_error(p, "bad event", type);
      push_event(p, &ev);
    }
    if (!wire_done(&r)) return protocol_error(p, "trailing bytes", type);
    return LOSS_NONE;
  }
  case WIRE_HEARTBEAT: {
    wire_status s;
    if (!wire_get_status(&r, &s, p->mem_used, p->mem_total, p->n_ranks))
      return protocol_error(p, "bad heartbeat", type);
    p->worker_health = s.health;
    p->stats = s.stats;
    p->wall_skew_ns = s.wall_ns - wire_wall_ns();
    p->have_skew = true;
    return LOSS_NONE;
  }
  case WIRE_DEAD: {
    sc_status s;
    if (!wire_get_message(&r, &s, p->dead_msg, sizeof p->dead_msg))
      return protocol_error(p, "bad DEAD message", type);
    return LOSS_DEAD;
  }
  default: return protocol_error(p, "unexpected message", type);
  }
}

// Decodes every whole frame in p->in.
static loss decode(proc *p) {
  size_t off = 0;
  loss why = LOSS_NONE;
  while (why == LOSS_NONE) {
    int type;
    uint32_t epoch;
    const uint8_t *body;
    size_t body_n, frame_n;
    int f = wire_frame(p->in.p + off, p->in.n - off, &type, &epoch, &body, &body_n, &frame_n);
    if (f == 0) break;
    if (f < 0) {
      why = protocol_error(p, "impossible frame length", 0);
      break;
    }
    off += frame_n;
    why = handle(p, type, epoch, body, body_n);
  }
  wire_consume(&p->in, off);
  return why;
}

// Reads what the socket holds (never blocks) and decodes it.
static loss read_in(proc *p) {
  size_t got = 0;
  bool eof = false;
  while (got < READ_MAX_PER_CALL) {
    if (!wire_reserve(&p->in, WIRE_READ_CHUNK)) break; // out of memory: try again next call
    ssize_t r = recv(p->fd, p->in.p + p->in.n, p->in.cap - p->in.n, MSG_DONTWAIT);
    if (r > 0) {
      p->in.n += (size_t)r;
      got += (size_t)r;
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    eof = true; // 0: end of stream; ECONNRESET and the like: gone
    break;
  }
  loss why = decode(p);
  if (why == LOSS_NONE && eof) why = LOSS_EOF;
  return why;
}

// Talks to the worker: sends, reads, decodes, and checks whether it is lost. Every entry point
// that should notice a loss calls it (poll, health).
static void update(proc *p) {
  reap_fenced(p);
  if (p->dead) return;
  bool sent_ok = p->held || flush_out(p);
  loss why = read_in(p);
  if (why == LOSS_NONE && !sent_ok) why = LOSS_EOF;
  if (why == LOSS_NONE && sc_monotonic_ns() - p->last_msg_ns >= p->detect_ns) why = LOSS_HUNG;
  if (why != LOSS_NONE) lose(p, why);
  else arm_timer(p);
  signal_events(p);
}

// --- starting a worker

// The worker's environment: ours with p->env's entries added, a same-named one replaced.
// The strings are borrowed (ours and p->env's); NULL when memory ran out.
static char **worker_env(const proc *p) {
  size_t n = 0, extra = 0;
  while (environ[n]) n++;
  while (p->env && p->env[extra]) extra++;
  char **v = malloc((n + extra + 1) * sizeof *v);
  if (!v) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    bool replaced = false;
    for (size_t j = 0; j < extra && !replaced; j++) {
      size_t len = strcspn(p->env[j], "=");
      replaced = !strncmp(environ[i], p->env[j], len) && environ[i][len] == '=';
    }
    if (!replaced) v[k++] = environ[i];
  }
  for (size_t j = 0; j < extra; j++) v[k++] = p->env[j];
  v[k] = NULL;
  return v;
}

// Sends out to the worker (pid, on the non-blocking socket fd) and waits until it answers
// READY at epoch: its status report is taken, and in keeps what followed. Frames of another
// epoch are dropped (the last reports of a worker rebuilding its replica for a swap). On error
// err says why (the worker's ERROR message, its exit, a timeout) and nothing is cleaned up;
// *reaped is set when the worker's exit was collected here.
static sc_status await_ready(proc *p, int fd, pid_t pid, uint32_t epoch, wire_buf *out,
                             wire_buf *in, bool *reaped, sc_error *err) {
  uint64_t deadline = sc_monotonic_ns() + READY_TIMEOUT_NS;
  bool eof = false;
  for (;;) {
    size_t off = 0;
    while (off < out->n) {
      ssize_t w = send(fd, out->p + off, out->n - off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) off += (size_t)w;
      else if (w < 0 && errno == EINTR) continue;
      else break; // full: later; failed: the read below sees the end
    }
    wire_consume(out, off);
    // whole frames?
    for (;;) {
      int type;
      uint32_t ep_got;
      const uint8_t *body;
      size_t body_n, frame_n;
      int f = wire_frame(in->p, in->n, &type, &ep_got, &body, &body_n, &frame_n);
      if (f < 0) return sc_fail(err, SC_IO, "replica %d: bad message from the worker", p->index);
      if (f == 0) break;
      wire_reader r = {.p = body, .n = body_n};
      if (ep_got != epoch) {
        p->stale_msgs++;
      } else if (type == WIRE_READY) {
        wire_status st;
        if (!wire_get_status(&r, &st, p->mem_used, p->mem_total, p->n_ranks))
          return sc_fail(err, SC_IO, "replica %d: bad READY from the worker", p->index);
        p->worker_health = st.health;
        p->stats = st.stats;
        wire_consume(in, frame_n);
        return SC_OK;
      } else if (type == WIRE_ERROR) {
        sc_status ws;
        char msg[512];
        if (!wire_get_message(&r, &ws, msg, sizeof msg)) ws = SC_IO;
        return sc_fail(err, ws == SC_OK ? SC_IO : ws, "replica %d: %s", p->index,
                       msg[0] ? msg : "the worker failed to start");
      } else {
        return sc_fail(err, SC_IO, "replica %d: unexpected message %d from the worker",
                       p->index, type);
      }
      wire_consume(in, frame_n);
    }
    if (eof) {
      int st;
      bool known;
      if (pid > 0 && reap(pid, EXIT_WAIT_NS, &st, &known)) {
        *reaped = true;
        if (known && WIFSIGNALED(st))
          return sc_fail(err, SC_IO, "replica %d: worker killed by signal %d before it was ready",
                         p->index, WTERMSIG(st));
        return sc_fail(err, SC_IO,
                       "replica %d: worker exited with status %d before it was ready", p->index,
                       known && WIFEXITED(st) ? WEXITSTATUS(st) : -1);
      }
      return sc_fail(err, SC_IO, "replica %d: worker closed its socket before it was ready",
                     p->index);
    }
    uint64_t now = sc_monotonic_ns();
    if (now >= deadline)
      return sc_fail(err, SC_TIMEOUT, "replica %d: worker not ready after %.0f s", p->index,
                     (double)READY_TIMEOUT_NS / 1e9);
    uint64_t d = deadline - now;
    struct timespec ts = {.tv_sec = (time_t)(d / NS_PER_S), .tv_nsec = (long)(d % NS_PER_S)};
    struct pollfd pf = {.fd = fd, .events = (short)(POLLIN | (out->n ? POLLOUT : 0))};
    ppoll(&pf, 1, &ts, NULL);
    if (!wire_reserve(in, WIRE_READ_CHUNK))
      return sc_fail(err, SC_OOM, "replica %d: out of memory", p->index);
    ssize_t r = recv(fd, in->p + in->n, in->cap - in->n, MSG_DONTWAIT);
    if (r > 0) in->n += (size_t)r;
    else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) eof = true;
  }
}

// Forks and execs the worker for epoch, sends it the config and waits until it is ready.
// On success p->pid, p->fd (registered in p->ep), the status report and last_msg_ns are set;
// on error nothing is left running and err says why.
static sc_status spawn(proc *p, int epoch, sc_error *err) {
  p->have_skew = false;
  int sv[2] = {-1, -1}, xp[2]; // the socket (a plain worker); a pipe that carries exec's errno
  replica_mpi_rendezvous rv = {.fd = -1};
  if (p->mpi) {
    sc_error re = {{0}};
    if (replica_mpi_listen(&rv, &re) != SC_OK)
      return sc_fail(err, SC_IO, "replica %d: %s", p->index, re.msg);
  } else if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return sc_fail(err, SC_IO, "replica %d: socketpair: %s", p->index, strerror(errno));
  }
  if (pipe2(xp, O_CLOEXEC) != 0) {
    int e = errno;
    if (sv[0] >= 0) close(sv[0]);
    if (sv[1] >= 0) close(sv[1]);
    replica_mpi_rendezvous_end(&rv);
    return sc_fail(err, SC_IO, "replica %d: pipe: %s", p->index, strerror(e));
  }
  // everything the child needs is built before fork: it only makes async-signal-safe calls
  char fd_arg[16], np_arg[16];
  snprintf(fd_arg, sizeof fd_arg, "%d", WORKER_FD);
  snprintf(np_arg, sizeof np_arg, "%d", p->n_ranks);
  char *plain_argv[] = {p->exe, "worker", "--fd", fd_arg, NULL};
  // the MPI launcher: every rank in this process's environment, unbound (a host may hold
  // several replicas' ranks, and each engine sizes its own threads), placed by the hostfile
  // or all on this host
  char *mpi_argv[] = {p->mpirun,
                      "-np",
                      np_arg,
                      "--bind-to",
                      "none",
                      p->hostfile ? "--hostfile" : "--oversubscribe",
                      p->hostfile ? p->hostfile : p->exe,
                      p->exe,
                      "worker",
                      "--connect",
                      rv.path,
                      NULL};
  if (!p->hostfile) { // drop the second slot of "--hostfile FILE"
    for (int i = 6; mpi_argv[i]; i++) mpi_argv[i] = mpi_argv[i + 1];
  }
  char **argv = p->mpi ? mpi_argv : plain_argv;
  const char *path = p->mpi ? p->mpirun : p->exe;
  char **envp = worker_env(p);
  if (!envp) {
    if (sv[0] >= 0) close(sv[0]);
    if (sv[1] >= 0) close(sv[1]);
    replica_mpi_rendezvous_end(&rv);
    close(xp[0]);
    close(xp[1]);
    return sc_fail(err, SC_OOM, "replica %d: out of memory", p->index);
  }
  sigset_t none;
  sigemptyset(&none);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    free(envp);
    if (sv[0] >= 0) close(sv[0]);
    if (sv[1] >= 0) close(sv[1]);
    replica_mpi_rendezvous_end(&rv);
    close(xp[0]);
    close(xp[1]);
    return sc_fail(err, SC_IO, "replica %d: fork: %s", p->index, strerror(e));
  }
  if (pid == 0) {
    // child: die with the parent; own process group (a terminal's ^C is the runner's to
    // handle); the socket on WORKER_FD, every other descriptor closed; errno to xp on failure
    int e = 0;
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) e = errno;
    if (getppid() != parent) _exit(1); // the parent died before prctl took effect
    setpgid(0, 0);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int efd = fcntl(xp[1], F_DUPFD_CLOEXEC, WORKER_FD + 1);
    if (sv[1] >= 0) {
      int sfd = fcntl(sv[1], F_DUPFD_CLOEXEC, WORKER_FD + 1);
      if (efd < 0 || sfd < 0 || dup2(sfd, WORKER_FD) < 0) e = e ? e : errno;
    } else { // the launcher reads no input of ours (Open MPI forwards stdin to rank 0)
      int nfd = open("/dev/null", O_RDONLY);
      if (efd < 0 || nfd < 0 || dup2(nfd, 0) < 0) e = e ? e : errno;
    }
    if (efd > WORKER_FD + 1) close_range(WORKER_FD + 1, (unsigned)efd - 1, 0);
    if (efd >= 0) close_range((unsigned)efd + 1, ~0u, 0);
    if (!e) execve(path, argv, envp);
    e = e ? e : errno;
    if (efd >= 0) {
      ssize_t w = write(efd, &e, sizeof e);
      (void)w;
    }
    _exit(127);
  }
  free(envp);
  if (sv[1] >= 0) close(sv[1]);
  close(xp[1]);
  int child_errno = 0;
  ssize_t got;
  do got = read(xp[0], &child_errno, sizeof child_errno);
  while (got < 0 && errno == EINTR);
  close(xp[0]);
  int fd = sv[0];
  if (got == (ssize_t)sizeof child_errno) {
    if (fd >= 0) close(fd);
    replica_mpi_rendezvous_end(&rv);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    return sc_fail(err, SC_IO, "replica %d: cannot run %s '%s': %s", p->index,
                   p->mpi ? "the MPI launcher" : "worker", path, strerror(child_errno));
  }
  if (p->mpi) { // rank 0 connects to the socket: from then on it is the worker
    bool gone = false;
    sc_error ae = {{0}};
    sc_status as = replica_mpi_accept(&rv, pid, READY_TIMEOUT_NS, &fd, &gone, &ae);
    replica_mpi_rendezvous_end(&rv);
    if (as != SC_OK) {
      if (!gone) {
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
      }
      return sc_fail(err, as, "replica %d: %s", p->index, ae.msg);
    }
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);

  // CONFIG, then wait for READY or ERROR
  wire_buf out = {0}, in = {0};
  sc_status s = SC_OK;
  if (!wire_put_config(&out, (uint32_t)epoch, &p->cfg, p->index, p->heartbeat_ns)) {
    s = sc_fail(err, SC_OOM, "replica %d: out of memory", p->index);
    goto fail;
  }
  bool reaped = false;
  s = await_ready(p, fd, pid, (uint32_t)epoch, &out, &in, &reaped, err);
  if (reaped) pid = 0;
  if (s != SC_OK) goto fail;
  // ready: anything that followed READY is decoded by the next update
  wire_buf_free(&out);
  if (epoll_ctl(p->ep, EPOLL_CTL_ADD, fd, &(struct epoll_event){.events = EPOLLIN}) != 0) {
    s = sc_fail(err, SC_IO, "replica %d: epoll: %s", p->index, strerror(errno));
    goto fail;
  }
  wire_buf_free(&p->in);
  p->in = in;
  p->fd = fd;
  p->pid = pid;
  p->last_msg_ns = sc_monotonic_ns();
  return SC_OK;
fail:
  wire_buf_free(&out);
  wire_buf_free(&in);
  close(fd);
  if (pid > 0) {
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
  }
  return s;
}

// --- vtable

static sc_status p_submit(void *ctx, uint64_t key, const engine_request *r, sc_error *err) {
  proc *p = ctx;
  if (p->dead) return sc_fail(err, SC_ABORTED, "replica %d: dead (%s)", p->index, p->error);
  if (!rk_put(&p->outstanding, key, 1))
    return sc_fail(err, SC_OOM, "replica %d: out of memory queueing a request", p->index);
  if (!wire_put_submit(&p->out, (uint32_t)p->epoch, key, r)) {
    rk_del(&p->outstanding, key);
    return sc_fail(err, SC_OOM, "replica %d: out of memory queueing a request", p->index);
  }
  if (!p->held) flush_out(p); // a failure shows up as the end of the stream in the next update
  return SC_OK;
}

// Holding keeps submissions in the buffer; the release sends them in one write, and the
// worker admits what it reads at once together (replica_proc_serve holds its replica while it
// applies a read).
static void p_hold(void *ctx, bool on) {
  proc *p = ctx;
  p->held = on;
  if (!on && !p->dead) flush_out(p);
}

static void p_cancel(void *ctx, uint64_t key) {
  proc *p = ctx;
  if (p->dead || !rk_id(&p->outstanding, key)) return;
  if (wire_put_cancel(&p->out, (uint32_t)p->epoch, key)) flush_out(p);
}

static int p_poll(void *ctx, replica_event *out, int cap) {
  proc *p = ctx;
  update(p);
  int n = rq_take(&p->evq, out, cap);
  clear_events_signal(p);
  return n;
}

static int p_wait_fd(void *ctx) {
  proc *p = ctx;
  return !p->dead || rq_len(&p->evq) ? p->ep : -1;
}

static replica_health p_health(void *ctx) {
  proc *p = ctx;
  update(p);
  if (p->dead) return REPLICA_DEAD;
  if (p->worker_health == REPLICA_UNHEALTHY) return REPLICA_UNHEALTHY;
  return p->admitting ? REPLICA_HEALTHY : REPLICA_DRAINING;
}

static void p_set_admitting(void *ctx, bool admitting) {
  proc *p = ctx;
  p->admitting = admitting;
  if (!p->dead && wire_put_admit(&p->out, (uint32_t)p->epoch, admitting)) flush_out(p);
}

static void p_stats(void *ctx, engine_stats *out) { *out = ((proc *)ctx)->stats; }

static sc_status p_rank_mem(void *ctx, int r, size_t *used, size_t *total) {
  proc *p = ctx;
  if (r < 0 || r >= p->n_ranks) return SC_INVALID;
  if (p->dead) return SC_ABORTED; // no process, no memory to report
  *used = p->mem_used[r];
  *total = p->mem_total[r];
  return SC_OK;
}

static const char *p_error(void *ctx) { return ((proc *)ctx)->error; }

// Signals every rank of launcher's job that runs on this host.
static void signal_ranks(proc *p, pid_t launcher, int sig) {
  pid_t pids[256];
  int n = p->n_ranks < 256 ? p->n_ranks : 256;
  replica_mpi_local_ranks(launcher, pids, n);
  for (int r = 0; r < n; r++)
    if (pids[r] > 0) kill(pids[r], sig);
}

// A fault on an MPI job's ranks, signalled to their processes on this host: 0 when done, 1
// when it is to be forwarded to rank 0 as with a plain worker, -1 when it cannot be (err).
static int mpi_inject(proc *p, const replica_fault *f, sc_error *err) {
  pid_t pids[256];
  int n = p->n_ranks < 256 ? p->n_ranks : 256;
  switch (f->kind) {
  case RFAULT_KILL:        // the replica dies: its rank 0 (MPI ends the rest of the job)
  case RFAULT_KILL_RANK: { // the rank's process is SIGKILLed, and MPI ends the job
    int r = f->kind == RFAULT_KILL || f->rank < 0 ? 0 : f->rank;
    replica_mpi_local_ranks(p->pid, pids, n);
    if (r >= n || pids[r] <= 0) {
      sc_fail(err, SC_INVALID,
              "replica %d: rank %d's process is not on this host (a rank "
              "on another host cannot be signalled)",
              p->index, r);
      return -1;
    }
    kill(pids[r], SIGKILL);
    return 0;
  }
  case RFAULT_HANG: signal_ranks(p, p->pid, SIGSTOP); return 0;
  case RFAULT_HANG_RANK: // the rank's process stops: its peers' collective deadline ends the
                         // step (rank 0 stopped: its heartbeats stop, the detect timeout)
    if (f->rank < 0) {
      signal_ranks(p, p->pid, SIGSTOP);
      return 0;
    }
    replica_mpi_local_ranks(p->pid, pids, n);
    if (f->rank >= n || pids[f->rank] <= 0) {
      sc_fail(err, SC_INVALID,
              "replica %d: rank %d's process is not on this host (a rank "
              "on another host cannot be signalled)",
              p->index, f->rank);
      return -1;
    }
    kill(pids[f->rank], SIGSTOP);
    return 0;
  case RFAULT_RESUME:
    signal_ranks(p, p->pid, SIGCONT);
    for (int i = 0; i < p->n_fenced; i++) signal_ranks(p, p->fenced[i], SIGCONT);
    return 1;
  default: return 1;
  }
}

static sc_status p_inject(void *ctx, const replica_fault *f, sc_error *err) {
  proc *p = ctx;
  const replica_fault_info *fi = replica_fault_kind_info(f->kind);
  if (!fi)
    return sc_fail(err, SC_INVALID, "replica %d: unknown fault kind %d", p->index, (int)f->kind);
  if (fi->names_rank && (f->rank < -1 || f->rank >= p->n_ranks))
    return sc_fail(err, SC_INVALID, "replica %d: rank %d is out of range: the replica has ranks "
                   "0..%d (-1: every rank)", p->index, f->rank, p->n_ranks - 1);
  update(p);
  if (p->dead)
    return sc_fail(err, SC_ABORTED, "replica %d: dead (%s)", p->index, p->error);
  if (p->mpi) {
    int done = mpi_inject(p, f, err);
    if (done <= 0) return done < 0 ? SC_INVALID : SC_OK;
  } else {
    switch (f->kind) {
    case RFAULT_KILL: kill(p->pid, SIGKILL); return SC_OK;
    case RFAULT_HANG: kill(p->pid, SIGSTOP); return SC_OK;
    case RFAULT_RESUME:
      kill(p->pid, SIGCONT);
      for (int i = 0; i < p->n_fenced; i++) kill(p->fenced[i], SIGCONT);
      break; // and forwarded: it also ends a hung rank
    default: break;
    }
  }
  if (!wire_put_inject(&p->out, (uint32_t)p->epoch, f))
    return sc_fail(err, SC_OOM, "replica %d: out of memory", p->index);
  flush_out(p);
  return SC_OK;
}

static char *dup_str(const char *s, bool *ok) {
  if (!s) return NULL;
  char *d = strdup(s);
  if (!d) *ok = false;
  return d;
}

static sc_status p_restart(void *ctx, sc_error *err) {
  proc *p = ctx;
  update(p);
  if (!p->dead)
    return sc_fail(err, SC_INVALID, "replica %d: restart of a live replica", p->index);
  SC_TRY(spawn(p, p->epoch + 1, err));
  p->epoch++;
  p->dead = false;
  p->admitting = true;
  p->error[0] = p->dead_msg[0] = p->protocol_error[0] = 0;
  rk_free(&p->outstanding);
  arm_timer(p);
  return SC_OK;
}

static int p_epoch(void *ctx) { return ((proc *)ctx)->epoch; }

// A swap is a SWAP message: the worker (drained by the caller) frees its replica and builds
// one on the new weights in the same process, then answers READY at the next epoch. Requests
// still outstanding fail with "replica_lost"; the old epoch's last reports are dropped. A
// worker that cannot build the new replica answers ERROR and exits: the replica is dead, with
// the reason, and a restart starts a worker on the new weights.
static sc_status p_swap(void *ctx, const engine_config *cfg, sc_error *err) {
  proc *p = ctx;
  update(p);
  if (p->dead) return sc_fail(err, SC_ABORTED, "replica %d: swap of a lost replica", p->index);
  bool ok = true;
  char *dir = dup_str(cfg->weights_dir, &ok);
  if (!ok) return sc_fail(err, SC_OOM, "replica %d: out of memory", p->index);
  rk_each(&p->outstanding, fail_outstanding, p);
  rk_free(&p->outstanding);
  signal_events(p);
  free(p->weights_dir);
  p->weights_dir = dir;
  p->cfg.model = cfg->model;
  p->cfg.weights_dir = dir;
  p->cfg.weights_seed = cfg->weights_seed;
  p->cfg.weight_dtype = cfg->weight_dtype;
  uint32_t next = (uint32_t)p->epoch + 1;
  sc_status s = SC_OK;
  bool reaped = false;
  if (!wire_put_swap(&p->out, next, &p->cfg, p->index, p->heartbeat_ns))
    s = sc_fail(err, SC_OOM, "replica %d: out of memory", p->index);
  else
    s = await_ready(p, p->fd, p->pid, next, &p->out, &p->in, &reaped, err);
  p->epoch++;
  if (s != SC_OK) {
    close_socket(p);
    if (p->pid > 0 && !reaped) add_fenced(p, p->pid);
    p->pid = 0;
    p->dead = true;
    snprintf(p->error, sizeof p->error, "swap failed: %.480s", err ? err->msg : "");
    arm_timer(p);
    return s;
  }
  p->admitting = true;
  p->error[0] = p->dead_msg[0] = p->protocol_error[0] = 0;
  p->last_msg_ns = sc_monotonic_ns();
  arm_timer(p);
  return SC_OK;
}

static void p_free(void *ctx) {
  proc *p = ctx;
  if (!p) return;
  close_socket(p); // the worker sees the end of the stream and exits 0
  if (p->pid > 0) add_fenced(p, p->pid);
  p->pid = 0;
  // stopped workers are continued so they can exit by themselves; whatever is left at the
  // deadline is killed
  for (int i = 0; i < p->n_fenced; i++) { // (an MPI launcher would forward it to the ranks)
    if (p->mpi)
      signal_ranks(p, p->fenced[i], SIGCONT);
    else
      kill(p->fenced[i], SIGCONT);
  }
  uint64_t deadline = sc_monotonic_ns() + (p->mpi ? FREE_WAIT_MPI_NS : FREE_WAIT_NS);
  for (;;) {
    reap_fenced(p);
    if (p->n_fenced == 0 || sc_monotonic_ns() >= deadline) break;
    sleep_ns(1000000);
  }
  for (int i = 0; i < p->n_fenced; i++) {
    kill(p->fenced[i], SIGKILL);
    while (waitpid(p->fenced[i], NULL, 0) < 0 && errno == EINTR) {
    }
  }
  free(p->fenced);
  wire_buf_free(&p->in);
  wire_buf_free(&p->out);
  rk_free(&p->outstanding);
  rq_free(&p->evq);
  free(p->mem_used);
  free(p->mem_total);
  if (p->ep >= 0) close(p->ep);
  if (p->evfd >= 0) close(p->evfd);
  if (p->tfd >= 0) close(p->tfd);
  free(p->weights_dir);
  free(p->backend);
  free(p->exe);
  free(p->mpirun);
  free(p->hostfile);
  for (size_t i = 0; p->env && p->env[i]; i++) free(p->env[i]);
  free(p->env);
  free(p);
}

static bool p_wall_skew(void *ctx, int64_t *skew_ns) {
  const proc *p = ctx;
  if (p->dead || !p->have_skew) return false;
  *skew_ns = p->wall_skew_ns;
  return true;
}

// The worker's pid now (0 when none runs).
static int p_pid(void *ctx) { return (int)((const proc *)ctx)->pid; }

static const replica_i proc_i = {
    .submit = p_submit,
    .cancel = p_cancel,
    .poll = p_poll,
    .wait_fd = p_wait_fd,
    .health = p_health,
    .set_admitting = p_set_admitting,
    .hold = p_hold,
    .stats = p_stats,
    .rank_mem = p_rank_mem,
    .error = p_error,
    .inject = p_inject,
    .restart = p_restart,
    .epoch = p_epoch,
    .swap = p_swap,
    .wall_skew = p_wall_skew,
    .pid = p_pid,
    .free = p_free,
};

sc_status replica_proc_new(const engine_config *cfg, const replica_proc_options *o, int index,
                           replica **out, sc_error *err) {
  *out = NULL;
  if (cfg->backend && !strcmp(cfg->backend, "sim"))
    return sc_fail(err, SC_INVALID, "replica %d: a process replica needs a real backend, not 'sim'",
                   index);
  replica_proc_options opt = o ? *o : (replica_proc_options){0};
  proc *p = calloc(1, sizeof *p);
  replica *r = calloc(1, sizeof *r);
  if (!p || !r) {
    free(p);
    free(r);
    return sc_fail(err, SC_OOM, "replica %d: out of memory", index);
  }
  p->fd = p->ep = p->evfd = p->tfd = -1;
  p->index = index;
  p->cfg = *cfg;
  p->cfg.on_logits = NULL; // a callback cannot cross a process boundary
  p->cfg.on_logits_ud = NULL;
  bool ok = true;
  p->weights_dir = dup_str(cfg->weights_dir, &ok);
  p->backend = dup_str(cfg->backend, &ok);
  p->exe = dup_str(opt.exe ? opt.exe : "/proc/self/exe", &ok);
  if (opt.mpi) { // the ranks exec the binary by its real path (the launcher's /proc/self/exe
                 // is the launcher)
    char launcher[4096], *real = realpath(p->exe, NULL);
    if (!replica_mpi_launcher(launcher, sizeof launcher)) {
      free(real);
      p_free(p);
      free(r);
      return sc_fail(err, SC_INVALID,
                     "replica %d: router.isolation mpi needs an MPI launcher "
                     "(mpirun or mpiexec) on PATH, and there is none (Debian: apt-get install "
                     "openmpi-bin)",
                     index);
    }
    free(p->exe);
    p->exe = real;
    if (!real) ok = false;
    p->mpi = true;
    p->mpirun = dup_str(launcher, &ok);
    p->hostfile = dup_str(opt.hostfile, &ok);
  }
  size_t n_env = 0;
  while (opt.env && opt.env[n_env]) n_env++;
  p->env = calloc(n_env + 2, sizeof *p->env);
  if (!p->env) ok = false;
  for (size_t i = 0; p->env && i < n_env; i++) p->env[i] = dup_str(opt.env[i], &ok);
  // an MPI job fails stop at once: Open MPI's launcher waits 1 s after its SIGTERM to the
  // other ranks of a job one of whose ranks died before it sends SIGKILL; a replica lost is
  // one to notice as soon as a worker's death
  if (p->env && p->mpi && !getenv("OMPI_MCA_odls_base_sigkill_timeout"))
    p->env[n_env] = dup_str("OMPI_MCA_odls_base_sigkill_timeout=0", &ok);
  p->cfg.weights_dir = p->weights_dir;
  p->cfg.backend = p->backend;
  p->detect_ns = opt.detect_timeout_ns ? opt.detect_timeout_ns : DEFAULT_DETECT_NS;
  p->heartbeat_ns = opt.heartbeat_ns ? opt.heartbeat_ns : WIRE_HEARTBEAT_NS;
  p->n_ranks = cfg->tp > 0 && cfg->pp > 0 ? cfg->tp * cfg->pp : 1;
  p->mem_used = calloc((size_t)p->n_ranks, sizeof *p->mem_used);
  p->mem_total = calloc((size_t)p->n_ranks, sizeof *p->mem_total);
  p->admitting = true;
  p->ep = epoll_create1(EPOLL_CLOEXEC);
  p->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  p->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  sc_status s = SC_OK;
  if (!ok || !p->mem_used || !p->mem_total) {
    s = sc_fail(err, SC_OOM, "replica %d: out of memory", index);
    goto fail;
  }
  if (p->ep < 0 || p->evfd < 0 || p->tfd < 0 ||
      epoll_ctl(p->ep, EPOLL_CTL_ADD, p->evfd, &(struct epoll_event){.events = EPOLLIN}) ||
      epoll_ctl(p->ep, EPOLL_CTL_ADD, p->tfd, &(struct epoll_event){.events = EPOLLIN})) {
    s = sc_fail(err, SC_IO, "replica %d: epoll/eventfd/timerfd: %s", index, strerror(errno));
    goto fail;
  }
  p->epoch = 1;
  s = spawn(p, p->epoch, err);
  if (s != SC_OK) goto fail;
  arm_timer(p);
  *r = (replica){.i = &proc_i, .ctx = p, .index = index, .n_ranks = p->n_ranks};
  *out = r;
  return SC_OK;
fail:
  p_free(p);
  free(r);
  return s;
}

bool replica_is_proc(const replica *r) { return r && r->i == &proc_i; }

int replica_proc_pid(const replica *r) { return replica_is_proc(r) ? p_pid(r->ctx) : 0; }


