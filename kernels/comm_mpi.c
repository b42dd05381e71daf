// The mpi communicator (see mpi.h, "the mpi communicator"): the ranks of a group are processes
// of one MPI job, possibly on other hosts, each holding one endpoint.
//
// Every call stages through buffers the group owns and polls MPI's non-blocking operation with
// the group's deadline (sc_mpi_wait), its abort flag and, when set, the alarms of a watched
// group. A wait that ends early leaves the operation pending: the group is then broken, its
// buffers and requests are parked in a list that lives as long as the process (the job fails
// stop right after), and nothing MPI still writes can land in the caller's memory.
//
// all-reduce: small buffers (the other ranks' copies fit in SMALL_BYTES), and any buffer
// between two ranks (each then receives the other's whole buffer: the bytes of the two-step
// exchange, in one step), are all-gathered whole and summed in rank order on every rank: one
// exchange. Larger ones: each rank's slice
// of every rank's buffer (MPI_Ialltoallv), summed in rank order, then the sums all-gathered
// in place (MPI_Iallgatherv): 2 (n - 1) / n of the buffer on the link per rank. Both sum in
// the shm communicator's order, so every rank gets the bits ranks as threads would.
//
// Left to other files: the job itself and the polling (kernels/mpi.c), the registry that opens
// these groups for an executor (kernels/comm.c), and who sends alarms (engine/exec_dist.c).
#include "kernels/mpi.h"

#ifndef SHARDCHECK_HAVE_MPI
// --- without MPI: every entry point says so

sc_status comm_mpi_group_new(int n, const int *members, uint64_t deadline_ns, comm_mpi_group **out,
                             sc_error *err) {
  if (out) *out = NULL;
  return sc_fail(err, SC_INVALID,
                 "comm: this build has no MPI (install libopenmpi-dev and "
                 "configure with SHARDCHECK_MPI=ON)");
}
comm *comm_mpi_group_rank(comm_mpi_group *g, int r) { return NULL; }
int comm_mpi_group_self(const comm_mpi_group *g) { return -1; }
void comm_mpi_group_abort(comm_mpi_group *g) {}
void comm_mpi_group_free(comm_mpi_group *g) {}
void comm_mpi_group_set_slow(comm_mpi_group *g, double factor, uint64_t latency_ns,
                             double bandwidth) {}
const char *comm_mpi_group_error(comm_mpi_group *g) { return ""; }
void comm_mpi_group_watch(comm_mpi_group *g, comm_mpi_group *watch) {}
sc_status comm_mpi_send_alarm(comm *c, const void *buf, size_t bytes, int peer) {
  return SC_INVALID;
}
sc_status comm_mpi_recv_alarm(comm *c, void *buf, size_t bytes, int peer, int *from) {
  return SC_INVALID;
}
sc_status comm_mpi_recv_idle(comm *c, void *buf, size_t bytes, int peer) { return SC_INVALID; }
#else

#include <limits.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/clock.h"
#include "kernels/comm_link.h"
#include "kernels/mpi_impl.h"

#define DEFAULT_DEADLINE_NS 60000000000ull // 60 s when the caller passes 0, as shm
#define SMALL_BYTES         (64u << 10) // all-reduce: others' copies up to this many bytes go whole
#define IDLE_SLEEP_NS       1000000ull  // an idle wait polls at most this far apart (1 ms)
#define BUSY_SLEEP_NS       200000ull   // a collective's wait: at most 0.2 ms apart
// free: sends a healthy peer has not taken by then never will be (it failed, or left)
#define FREE_GRACE_NS       1000000000ull

enum { TAG_DATA = 1, TAG_ALARM = 2 };

// A buffered send still in flight: its copy is freed once MPI is done with it.
typedef struct pending {
  MPI_Request req;
  void *buf;
} pending;

struct comm_mpi_group {
  comm c; // this process's endpoint; c.ctx points here
  int n, self;
  MPI_Comm mc;
  uint64_t deadline_ns;
  atomic_bool aborted;
  atomic_int broken; // SC_OK, or the first status that broke the group (sticky)
  pthread_mutex_t err_mu;
  char error[256]; // under err_mu: why it broke
  bool built_mu, built_link;
  comm_link link;
  comm_mpi_group *watch; // alarms pending there end every wait here (NULL: none)

  // staging (floats unless said)
  float *a, *b; // (cap_a), (cap_b)
  size_t cap_a, cap_b;
  int *cnt, *dsp;    // (n) per-rank counts and offsets of a split buffer
  int *rcnt, *rdsp;  // (n)
  unsigned char *rx; // (cap_rx) bytes: a message being received
  size_t cap_rx;
  pending *sends; // (cap_sends)
  int n_sends, cap_sends;
  bool abandoned; // an operation was left pending: never free what MPI may still touch
  comm_mpi_group *next_parked;
};

// Broken groups with operations MPI may still complete: kept for the life of the process.
static comm_mpi_group *parked;
static pthread_mutex_t parked_mu = PTHREAD_MUTEX_INITIALIZER;

// --- state

static sc_status state_of(const comm_mpi_group *g) {
  if (atomic_load(&g->aborted)) return SC_ABORTED;
  return (sc_status)atomic_load(&g->broken);
}

// Breaks g with s (the first cause wins) and records why; returns what the caller returns.
static sc_status group_break(comm_mpi_group *g, sc_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static sc_status group_break(comm_mpi_group *g, sc_status s, const char *fmt, ...) {
  pthread_mutex_lock(&g->err_mu); // the text is written before broken is set, never after
  if (atomic_load(&g->broken) == SC_OK) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->error, sizeof g->error, fmt, ap);
    va_end(ap);
    atomic_store(&g->broken, (int)s);
  }
  pthread_mutex_unlock(&g->err_mu);
  sc_status now = state_of(g);
  return now == SC_OK ? s : now;
}

static bool alarm_pending(comm_mpi_group *w) {
  int flag = 0;
  MPI_Iprobe(MPI_ANY_SOURCE, TAG_ALARM, w->mc, &flag, MPI_STATUS_IGNORE);
  return flag != 0;
}

// sc_mpi_wait's stop: aborted, broken, or an alarm on the watched group.
static bool should_stop(void *ctx) {
  comm_mpi_group *g = ctx;
  if (state_of(g) != SC_OK) return true;
  return g->watch && alarm_pending(g->watch);
}

// Waits for req within the call's deadline. On anything but completion the request is
// abandoned (the group broken, its buffers parked at free); what = the operation, for the text.
static sc_status wait_op(comm_mpi_group *g, MPI_Request *req, uint64_t deadline, const char *what) {
  char why[MPI_MAX_ERROR_STRING] = "";
  sc_status s = sc_mpi_wait(req, deadline, BUSY_SLEEP_NS, should_stop, g, why, sizeof why);
  if (s == SC_OK) return SC_OK;
  g->abandoned = true;
  if (s == SC_TIMEOUT)
    return group_break(g, SC_TIMEOUT, "%s: deadline %.3f s passed (a peer stopped answering)", what,
                       (double)g->deadline_ns / 1e9);
  if (s == SC_IO) return group_break(g, SC_DEVICE, "%s: %s", what, why);
  sc_status now = state_of(g);
  if (now != SC_OK) return now;
  return group_break(g, SC_ABORTED, "%s: a peer raised an alarm", what); // the watch
}

static sc_status mpi_fail(comm_mpi_group *g, int rc, const char *what) {
  char why[MPI_MAX_ERROR_STRING];
  sc_mpi_error_text(rc, why, sizeof why);
  return group_break(g, SC_DEVICE, "%s: %s", what, why);
}

// --- staging

static sc_status reserve_f(comm_mpi_group *g, float **p, size_t *cap, size_t n) {
  if (n <= *cap) return SC_OK;
  size_t c = *cap ? *cap : 1024;
  while (c < n) c = c > SIZE_MAX / 2 / sizeof(float) ? n : c * 2;
  float *q = realloc(*p, c * sizeof(float));
  if (!q) return group_break(g, SC_OOM, "out of host memory for %zu floats", n);
  *p = q;
  *cap = c;
  return SC_OK;
}

// Frees the copies of sends MPI is done with; never blocks.
static void reap_sends(comm_mpi_group *g) {
  for (int i = 0; i < g->n_sends;) {
    int done = 0;
    MPI_Test(&g->sends[i].req, &done, MPI_STATUS_IGNORE);
    if (!done) {
      i++;
      continue;
    }
    free(g->sends[i].buf);
    g->sends[i] = g->sends[--g->n_sends];
  }
}

// [lo, hi) of the n elements that rank r reduces (as shm's slices).
static void slice_of(size_t n, int n_ranks, int r, size_t *lo, size_t *hi) {
  size_t q = n / (size_t)n_ranks, rem = n % (size_t)n_ranks, ur = (size_t)r;
  *lo = q * ur + (ur < rem ? ur : rem);
  *hi = *lo + q + (ur < rem ? 1 : 0);
}

// --- link faults

// Sleeps the link's cost after a transfer (comm_link.h), ending early on abort or break.
static sc_status link_delay(comm_mpi_group *g, double bytes, uint64_t own_ns) {
  uint64_t ns = comm_link_cost(&g->link, bytes, own_ns);
  uint64_t until = sc_monotonic_ns() + ns;
  while (ns && sc_monotonic_ns() < until) {
    if (state_of(g) != SC_OK) return state_of(g);
    uint64_t left = until - sc_monotonic_ns();
    if (left > 1000000) left = 1000000;
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)left};
    nanosleep(&ts, NULL);
  }
  return state_of(g);
}

// --- vtable: collectives

static sc_status m_allreduce(void *ctx, float *buf, size_t n) {
  comm_mpi_group *g = ctx;
  uint64_t deadline = sc_monotonic_ns() + g->deadline_ns;
  SC_TRY(state_of(g));
  if (n && !buf) return SC_INVALID;
  if (g->n == 1) return SC_OK;
  if (n > (size_t)INT_MAX / (size_t)g->n) return SC_INVALID;
  reap_sends(g);
  bool slow = comm_link_on(&g->link);
  uint64_t t = comm_link_clock(slow);
  int N = g->n, me = g->self, rc;
  MPI_Request req;
  if (N == 2 || n * sizeof(float) * (size_t)(N - 1) <= SMALL_BYTES) {
    // every rank's whole buffer, then the same sum everywhere
    SC_TRY(reserve_f(g, &g->b, &g->cap_b, n * (size_t)N));
    if (n) memcpy(g->b + (size_t)me * n, buf, n * sizeof(float));
    rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_FLOAT, g->b, (int)n, MPI_FLOAT, g->mc, &req);
    if (rc != MPI_SUCCESS) return mpi_fail(g, rc, "all-reduce");
    SC_TRY(wait_op(g, &req, deadline, "all-reduce"));
    for (size_t i = 0; i < n; i++) {
      float acc = g->b[i];
      for (int r = 1; r < N; r++) acc += g->b[(size_t)r * n + i];
      buf[i] = acc;
    }
  } else {
    size_t lo, hi;
    slice_of(n, N, me, &lo, &hi);
    size_t mine = hi - lo;
    SC_TRY(reserve_f(g, &g->a, &g->cap_a, n));
    SC_TRY(reserve_f(g, &g->b, &g->cap_b, mine * (size_t)N));
    for (int r = 0; r < N; r++) {
      size_t l, h;
      slice_of(n, N, r, &l, &h);
      g->cnt[r] = (int)(h - l);
      g->dsp[r] = (int)l;
      g->rcnt[r] = (int)mine;
      g->rdsp[r] = (int)(mine * (size_t)r);
    }
    memcpy(g->a, buf, n * sizeof(float));
    rc = MPI_Ialltoallv(g->a, g->cnt, g->dsp, MPI_FLOAT, g->b, g->rcnt, g->rdsp, MPI_FLOAT, g->mc,
                        &req);
    if (rc != MPI_SUCCESS) return mpi_fail(g, rc, "all-reduce");
    SC_TRY(wait_op(g, &req, deadline, "all-reduce"));
    for (size_t i = 0; i < mine; i++) { // this rank's slice, summed in rank order
      float acc = g->b[i];
      for (int r = 1; r < N; r++) acc += g->b[(size_t)r * mine + i];
      g->a[lo + i] = acc;
    }
    rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, g->a, g->cnt, g->dsp, MPI_FLOAT, g->mc, &req);
    if (rc != MPI_SUCCESS) return mpi_fail(g, rc, "all-reduce");
    SC_TRY(wait_op(g, &req, deadline, "all-reduce"));
    memcpy(buf, g->a, n * sizeof(float));
  }
  if (!slow) return SC_OK;
  // own time: the whole call (a process cannot tell its copying from its waiting)
  double wire = 2.0 * (N - 1) / N * (double)n * sizeof(float);
  return link_delay(g, wire, comm_link_clock(slow) - t);
}

static sc_status m_allgather(void *ctx, const float *send, float *recv, size_t n) {
  comm_mpi_group *g = ctx;
  uint64_t deadline = sc_monotonic_ns() + g->deadline_ns;
  SC_TRY(state_of(g));
  if (n && (!send || !recv)) return SC_INVALID;
  if (n > (size_t)INT_MAX / (size_t)g->n) return SC_INVALID;
  if (g->n == 1) {
    if (n) memmove(recv, send, n * sizeof(float));
    return SC_OK;
  }
  reap_sends(g);
  bool slow = comm_link_on(&g->link);
  uint64_t t = comm_link_clock(slow);
  SC_TRY(reserve_f(g, &g->b, &g->cap_b, n * (size_t)g->n));
  if (n) memcpy(g->b + (size_t)g->self * n, send, n * sizeof(float));
  MPI_Request req;
  int rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_FLOAT, g->b, (int)n, MPI_FLOAT, g->mc, &req);
  if (rc != MPI_SUCCESS) return mpi_fail(g, rc, "all-gather");
  SC_TRY(wait_op(g, &req, deadline, "all-gather"));
  if (n) memcpy(recv, g->b, n * (size_t)g->n * sizeof(float));
  if (!slow) return SC_OK;
  return link_delay(g, (double)(g->n - 1) * (double)n * sizeof(float), comm_link_clock(slow) - t);
}

static sc_status m_barrier(void *ctx) {
  comm_mpi_group *g = ctx;
  uint64_t deadline = sc_monotonic_ns() + g->deadline_ns;
  SC_TRY(state_of(g));
  if (g->n == 1) return SC_OK;
  reap_sends(g);
  MPI_Request req;
  int rc = MPI_Ibarrier(g->mc, &req);
  if (rc != MPI_SUCCESS) return mpi_fail(g, rc, "barrier");
  return wait_op(g, &req, deadline, "barrier");
}

// --- vtable: point to point

// Copies the message and starts sending it on tag. Never blocks.
static sc_status send_tagged(comm_mpi_group *g, const void *buf, size_t bytes, int peer, int tag) {
  if (peer < 0 || peer >= g->n || (bytes && !buf) || bytes > (size_t)INT_MAX) return SC_INVALID;
  reap_sends(g);
  if (g->n_sends == g->cap_sends) {
    int cap = g->cap_sends ? 2 * g->cap_sends : 8;
    pending *p = realloc(g->sends, (size_t)cap * sizeof *p);
    if (!p) return group_break(g, SC_OOM, "send: out of host memory");
    g->sends = p;
    g->cap_sends = cap;
  }
  void *copy = malloc(bytes ? bytes : 1);
  if (!copy) return group_break(g, SC_OOM, "send: out of host memory for %zu bytes", bytes);
  if (bytes) memcpy(copy, buf, bytes);
  pending *p = &g->sends[g->n_sends];
  int rc = MPI_Isend(copy, (int)bytes, MPI_BYTE, peer, tag, g->mc, &p->req);
  if (rc != MPI_SUCCESS) {
    free(copy);
    return mpi_fail(g, rc, "send");
  }
  p->buf = copy;
  g->n_sends++;
  return SC_OK;
}

static sc_status m_send(void *ctx, const void *buf, size_t bytes, int peer) {
  comm_mpi_group *g = ctx;
  SC_TRY(state_of(g));
  return send_tagged(g, buf, bytes, peer, TAG_DATA);
}

// Waits (deadline 0: none) until a message on tag from peer is there, then receives it into
// buf when it holds `bytes` (else SC_INVALID, the message left queued).
static sc_status recv_tagged(comm_mpi_group *g, void *buf, size_t bytes, int peer, int tag,
                             uint64_t deadline, uint64_t max_sleep_ns) {
  SC_TRY(state_of(g));
  if (peer < 0 || peer >= g->n || (bytes && !buf) || bytes > (size_t)INT_MAX) return SC_INVALID;
  MPI_Status st;
  for (unsigned turn = 0;; turn++) {
    int flag = 0, rc = MPI_Iprobe(peer, tag, g->mc, &flag, &st);
    if (rc != MPI_SUCCESS) return mpi_fail(g, rc, "receive");
    if (flag) break;
    if ((turn & 63u) == 0 && should_stop(g)) {
      sc_status now = state_of(g);
      return now != SC_OK ? now : group_break(g, SC_ABORTED, "receive: a peer raised an alarm");
    }
    if (deadline && (turn & 15u) == 0 && sc_monotonic_ns() >= deadline)
      return group_break(g, SC_TIMEOUT,
                         "receive: deadline %.3f s passed (a peer stopped "
                         "answering)",
                         (double)g->deadline_ns / 1e9);
    if ((turn & 15u) == 0) reap_sends(g); // a rank that only waits still lets its sends finish
    sc_mpi_backoff(turn, max_sleep_ns);
  }
  int count = 0;
  MPI_Get_count(&st, MPI_BYTE, &count);
  if ((size_t)count != bytes) return SC_INVALID;
  if (bytes > g->cap_rx) {
    unsigned char *p = realloc(g->rx, bytes);
    if (!p) return group_break(g, SC_OOM, "receive: out of host memory for %zu bytes", bytes);
    g->rx = p;
    g->cap_rx = bytes;
  }
  MPI_Request req;
  int rc = MPI_Irecv(g->rx, (int)bytes, MPI_BYTE, peer, tag, g->mc, &req);
  if (rc != MPI_SUCCESS) return mpi_fail(g, rc, "receive");
  SC_TRY(wait_op(g, &req, deadline ? deadline : UINT64_MAX, "receive"));
  if (bytes) memcpy(buf, g->rx, bytes);
  return SC_OK;
}

// On a slow link the message lands once the link has carried it: the receiver waits that long
// after it arrived (the sender, as with shm, never waits).
static sc_status m_recv(void *ctx, void *buf, size_t bytes, int peer) {
  comm_mpi_group *g = ctx;
  SC_TRY(recv_tagged(g, buf, bytes, peer, TAG_DATA, sc_monotonic_ns() + g->deadline_ns,
                     BUSY_SLEEP_NS));
  return comm_link_on(&g->link) ? link_delay(g, (double)bytes, 0) : SC_OK;
}

// --- vtable: errors and abort

static sc_status m_poll_error(void *ctx) { return state_of(ctx); }

static void m_abort(void *ctx) {
  comm_mpi_group *g = ctx;
  atomic_store(&g->aborted, true);
}

static const comm_i mpi_comm_i = {
    .name = "mpi",
    .allreduce_sum = m_allreduce,
    .allgather = m_allgather,
    .send = m_send,
    .recv = m_recv,
    .barrier = m_barrier,
    .poll_error = m_poll_error,
    .abort = m_abort,
};

// --- extras: alarms and idle waits

static comm_mpi_group *group_of(comm *c) {
  return c && c->i == &mpi_comm_i ? (comm_mpi_group *)c->ctx : NULL;
}

sc_status comm_mpi_send_alarm(comm *c, const void *buf, size_t bytes, int peer) {
  comm_mpi_group *g = group_of(c);
  if (!g) return SC_INVALID;
  return send_tagged(g, buf, bytes, peer, TAG_ALARM); // also from a broken group: it is news
}

sc_status comm_mpi_recv_alarm(comm *c, void *buf, size_t bytes, int peer, int *from) {
  comm_mpi_group *g = group_of(c);
  if (!g || bytes > (size_t)INT_MAX) return SC_INVALID;
  MPI_Status st;
  int flag = 0;
  MPI_Iprobe(peer < 0 ? MPI_ANY_SOURCE : peer, TAG_ALARM, g->mc, &flag, &st);
  if (!flag) return SC_TIMEOUT;
  int count = 0;
  MPI_Get_count(&st, MPI_BYTE, &count);
  if ((size_t)count != bytes) return SC_INVALID;
  // an alarm is small and already here: a blocking receive of it ends at once
  int rc = MPI_Recv(buf, (int)bytes, MPI_BYTE, st.MPI_SOURCE, TAG_ALARM, g->mc, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS) return SC_DEVICE;
  if (from) *from = st.MPI_SOURCE;
  return SC_OK;
}

sc_status comm_mpi_recv_idle(comm *c, void *buf, size_t bytes, int peer) {
  comm_mpi_group *g = group_of(c);
  if (!g) return SC_INVALID;
  return recv_tagged(g, buf, bytes, peer, TAG_DATA, 0, IDLE_SLEEP_NS);
}

void comm_mpi_group_watch(comm_mpi_group *g, comm_mpi_group *watch) {
  if (g) g->watch = watch;
}

// --- lifecycle

static void group_destroy(comm_mpi_group *g) {
  for (int i = 0; i < g->n_sends; i++) free(g->sends[i].buf);
  free(g->sends);
  free(g->a);
  free(g->b);
  free(g->rx);
  free(g->cnt);
  free(g->dsp);
  free(g->rcnt);
  free(g->rdsp);
  if (g->built_link) comm_link_destroy(&g->link);
  if (g->built_mu) pthread_mutex_destroy(&g->err_mu);
  free(g);
}

sc_status comm_mpi_group_new(int n, const int *members, uint64_t deadline_ns, comm_mpi_group **out,
                             sc_error *err) {
  if (!out) return sc_fail(err, SC_INVALID, "comm: out is NULL");
  *out = NULL;
  if (!sc_mpi_active())
    return sc_fail(err, SC_INVALID,
                   "comm: MPI is not initialised in this process (an mpi "
                   "communicator needs the process started by mpirun or srun)");
  if (n < 1 || n > sc_mpi_size() || !members)
    return sc_fail(err, SC_INVALID, "comm: a group of %d ranks in a job of %d", n, sc_mpi_size());
  int self = -1;
  for (int i = 0; i < n; i++) {
    if (members[i] < 0 || members[i] >= sc_mpi_size())
      return sc_fail(err, SC_INVALID, "comm: rank %d is not in the job (size %d)", members[i],
                     sc_mpi_size());
    if (members[i] == sc_mpi_rank()) self = i;
  }
  if (self < 0)
    return sc_fail(err, SC_INVALID, "comm: rank %d is not a member of the group", sc_mpi_rank());
  comm_mpi_group *g = calloc(1, sizeof *g);
  if (!g) return sc_fail(err, SC_OOM, "comm: out of memory");
  g->n = n;
  g->self = self;
  g->mc = MPI_COMM_NULL;
  g->deadline_ns = deadline_ns ? deadline_ns : DEFAULT_DEADLINE_NS;
  atomic_init(&g->aborted, false);
  atomic_init(&g->broken, SC_OK);
  g->c = (comm){.i = &mpi_comm_i, .ctx = g, .rank = self, .n_ranks = n};
  g->cnt = calloc((size_t)n, sizeof *g->cnt);
  g->dsp = calloc((size_t)n, sizeof *g->dsp);
  g->rcnt = calloc((size_t)n, sizeof *g->rcnt);
  g->rdsp = calloc((size_t)n, sizeof *g->rdsp);
  g->built_mu = pthread_mutex_init(&g->err_mu, NULL) == 0;
  g->built_link = g->built_mu && comm_link_init(&g->link) == 0;
  if (!g->cnt || !g->dsp || !g->rcnt || !g->rdsp || !g->built_link) {
    group_destroy(g);
    return sc_fail(err, SC_OOM, "comm: out of memory");
  }
  MPI_Group world, sub;
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  int rc = MPI_Group_incl(world, n, members, &sub);
  if (rc == MPI_SUCCESS) {
    rc = MPI_Comm_create_group(MPI_COMM_WORLD, sub, 0, &g->mc);
    MPI_Group_free(&sub);
  }
  MPI_Group_free(&world);
  if (rc != MPI_SUCCESS || g->mc == MPI_COMM_NULL) {
    char why[MPI_MAX_ERROR_STRING] = "no communicator";
    if (rc != MPI_SUCCESS) sc_mpi_error_text(rc, why, sizeof why);
    group_destroy(g);
    return sc_fail(err, SC_DEVICE, "comm: cannot make an MPI communicator of %d ranks: %s", n, why);
  }
  MPI_Comm_set_errhandler(g->mc, MPI_ERRORS_RETURN);
  *out = g;
  return SC_OK;
}

comm *comm_mpi_group_rank(comm_mpi_group *g, int r) { return g && r == g->self ? &g->c : NULL; }

int comm_mpi_group_self(const comm_mpi_group *g) { return g ? g->self : -1; }

void comm_mpi_group_abort(comm_mpi_group *g) {
  if (g) atomic_store(&g->aborted, true);
}

void comm_mpi_group_free(comm_mpi_group *g) {
  if (!g) return;
  if (state_of(g) != SC_OK) g->abandoned = true; // peers may be gone: wait for nothing
  // sends still in flight finish first (a healthy peer takes them at once)
  uint64_t deadline = sc_monotonic_ns() + FREE_GRACE_NS;
  while (sc_mpi_active() && !g->abandoned && g->n_sends > 0) {
    pending *p = &g->sends[g->n_sends - 1];
    if (sc_mpi_wait(&p->req, deadline, BUSY_SLEEP_NS, NULL, NULL, NULL, 0) != SC_OK) {
      g->abandoned = true;
      break;
    }
    free(p->buf);
    g->n_sends--;
  }
  if (g->abandoned || !sc_mpi_active()) { // MPI may still write into these: keep them
    pthread_mutex_lock(&parked_mu);
    g->next_parked = parked;
    parked = g;
    pthread_mutex_unlock(&parked_mu);
    return;
  }
  MPI_Comm_free(&g->mc);
  group_destroy(g);
}

void comm_mpi_group_set_slow(comm_mpi_group *g, double factor, uint64_t latency_ns,
                             double bandwidth) {
  if (g) comm_link_set(&g->link, factor, latency_ns, bandwidth);
}

const char *comm_mpi_group_error(comm_mpi_group *g) {
  if (!g || atomic_load(&g->broken) == SC_OK) return "";
  return g->error; // written once, before broken was set
}
#endif
