// The shm communicator (see comm.h): the ranks of a group are threads of one process.
//
// Collectives meet at a reusable barrier (a mutex, one condition variable and a generation
// counter; while the group has no more ranks than the machine has cores, a waiter spins on the
// generation for up to 0.1 ms before it sleeps). Each rank first copies its input into a staging slot that it owns, so no rank ever
// reads or writes another rank's buffer and a rank that left on a timeout or an abort cannot
// leave a peer touching freed memory. Slots come in two sets, picked by the parity of the
// rank's collective count: the set used by collective k is written again only by k+2, which
// no rank can enter before every rank has entered k+1, i.e. finished reading k.
//
// all-reduce: copy in, barrier, rank r sums its slice of every slot in rank order 0..n-1 and
// writes it back into its own slot, barrier, everyone copies all slices out. The result is
// the same bits on every rank and for every arrival order.
// send/recv: buffered. A send copies the message into the (source, destination) mailbox and
// returns; a recv waits for the oldest message from its peer (and, on a slow link, for the
// moment it becomes receivable). Sends never block, so any pattern of sends followed by recvs
// completes.
//
// Deadlines, abort and the "broken" state are shared by both paths; every wait is a
// pthread_cond_timedwait on CLOCK_MONOTONIC.
//
// Link faults (comm_shm_group_set_slow): while one is set, every transfer costs its latency,
// its bytes over the bandwidth cap, and (factor - 1) x its own time (the copying and summing,
// not the waits for peers). A send still does not block: its message becomes receivable that
// much later (it is in flight), and the recv waits for it (adding nothing of its own). An
// all-reduce or all-gather sleeps the cost after it completes, on every rank. Bytes on the
// link, per rank: a send's size; 2 (n - 1) / n x an all-reduce's buffer; (n - 1) x an
// all-gather's slice (the ring algorithms' traffic). The sleeps end early on abort or break.
// While no link fault is set the cost is one relaxed atomic load per call. Left to other
// files: the nccl and sim backends, device faults (kernels/device.c), and who calls abort (a
// watchdog in the engine).
#include "kernels/comm.h"

#include <errno.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/clock.h"
#include "kernels/comm_link.h"
#include "kernels/device.h"
#include "kernels/spin.h"

#define SHM_MAX_RANKS 1024                     // n_ranks^2 mailboxes: keep them small
#define SHM_DEFAULT_DEADLINE_NS 60000000000ull // 60 s when the caller passes 0
#define SHM_REDUCE_CHUNK 1024                  // floats summed per pass over the slots
#define SHM_SPIN_NS 100000ull                  // a barrier's spin before it sleeps (0.1 ms)

// What a rank is doing when it arrives at the barrier; every rank must agree.
typedef enum shm_op {
  SHM_OP_ALLREDUCE_IN = 1, // inputs staged
  SHM_OP_ALLREDUCE_OUT,    // slices reduced
  SHM_OP_ALLGATHER,
  SHM_OP_BARRIER,
} shm_op;

// The head of one message in a mailbox; its len bytes follow.
typedef struct shm_rec {
  size_t len;  // bytes of the message
  uint64_t at; // monotonic ns from which it may be received (a slow link); 0: at once
} shm_rec;

// Messages from one source to one destination: [shm_rec][len bytes] records, FIFO.
typedef struct shm_queue {
  unsigned char *data; // (cap) bytes; live records in [head, tail)
  size_t cap, head, tail;
} shm_queue;

// Everything one destination rank receives; guarded by its own mutex.
typedef struct shm_inbox {
  pthread_mutex_t mu;
  pthread_cond_t cv; // signalled on every send to this rank and on abort/break
  shm_queue *from;   // (n_ranks) queues, indexed by source rank
} shm_inbox;

// One rank's endpoint. Fields below `c` are touched only by the owning thread, except the
// slots (read by peers between barriers) and the arrival record (under g->mu).
typedef struct shm_rank {
  alignas(64) comm c; // public endpoint; c.ctx points here
  comm_shm_group *g;
  uint64_t seq;      // collectives entered by this rank; seq & 1 picks the slot set
  float *slot[2];    // (cap[p]) floats each: this rank's staged input / reduced slice
  size_t cap[2];     // floats
  shm_op arrived_op; // under g->mu: what this rank arrived at the barrier for
  size_t arrived_n;  // under g->mu: its element count
} shm_rank;

struct comm_shm_group {
  int n_ranks;
  uint64_t deadline_ns; // per blocking call, measured from the call's start
  atomic_bool aborted;  // set once by abort; checked by every call and every wait
  atomic_int broken;    // SC_OK, or the first status that broke the group (sticky)

  pthread_mutex_t mu; // the barrier
  pthread_cond_t cv;
  int count;    // ranks arrived at the current barrier generation
  atomic_ullong gen; // barrier generation; bumped (under mu) when the last rank arrives
  bool agreed;  // whether the ranks of the last completed generation agreed on (op, n)
  bool spin;    // waiters spin a while before sleeping: no more ranks than online cores

  shm_rank *ranks;  // (n_ranks)
  shm_inbox *inbox; // (n_ranks), indexed by destination rank

  comm_link link;         // the link fault (comm_shm_group_set_slow)

  bool built_mu, built_cv, built_link; // teardown of a partial build: what exists
  int built_inboxes;                      // inboxes fully initialised
};

// --- state: abort, broken, wake-ups

// The status every call returns at once, or SC_OK while the group is healthy.
static sc_status group_state(const comm_shm_group *g) {
  if (atomic_load(&g->aborted)) return SC_ABORTED;
  return (sc_status)atomic_load(&g->broken);
}

// Wakes every waiter. The flag it reacts to is set before this is called and each waiter
// tests the flags while holding the mutex it waits on, so no wake-up is lost. Holds one lock
// at a time, so it may be called from any thread that holds none.
static void group_wake_all(comm_shm_group *g) {
  pthread_mutex_lock(&g->mu);
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
  for (int r = 0; r < g->n_ranks; r++) {
    pthread_mutex_lock(&g->inbox[r].mu);
    pthread_cond_broadcast(&g->inbox[r].cv);
    pthread_mutex_unlock(&g->inbox[r].mu);
  }
}

// Marks the group broken with status s (the first cause wins) and wakes every waiter.
// Returns the status the caller should return (SC_ABORTED wins over any break). Call with no
// lock held.
static sc_status group_break(comm_shm_group *g, sc_status s) {
  int expected = SC_OK;
  atomic_compare_exchange_strong(&g->broken, &expected, (int)s);
  group_wake_all(g);
  sc_status now = group_state(g);
  return now == SC_OK ? s : now;
}

static void group_abort(comm_shm_group *g) {
  if (!g) return;
  if (!atomic_exchange(&g->aborted, true)) group_wake_all(g);
}

// --- deadlines (always CLOCK_MONOTONIC: the condition variables are set to that clock)

// Absolute CLOCK_MONOTONIC time (ns) at which a call that starts now must give up.
static uint64_t call_deadline(const comm_shm_group *g) {
  return sc_monotonic_ns() + g->deadline_ns;
}

static struct timespec to_timespec(uint64_t t_ns) {
  return (struct timespec){.tv_sec = (time_t)(t_ns / 1000000000ull),
                           .tv_nsec = (long)(t_ns % 1000000000ull)};
}

// One timed wait on cv (mu held). Returns true once the deadline has passed.
static bool wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t deadline) {
  struct timespec ts = to_timespec(deadline);
  int rc = pthread_cond_timedwait(cv, mu, &ts);
  return rc == ETIMEDOUT || sc_monotonic_ns() >= deadline;
}

static sc_status cond_init_monotonic(pthread_cond_t *cv) {
  pthread_condattr_t a;
  if (pthread_condattr_init(&a)) return SC_OOM;
  int rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  if (!rc) rc = pthread_cond_init(cv, &a);
  pthread_condattr_destroy(&a);
  return rc ? SC_OOM : SC_OK;
}

// --- the barrier

// Whether the group was aborted or broken (for the barrier's spin, which then stops).
static bool group_unhealthy(void *g) { return group_state(g) != SC_OK; }

// Waits until every rank has arrived with the same (op, n). Returns SC_OK; SC_INVALID (group
// broken) when the ranks disagree; SC_TIMEOUT (group broken) past deadline; SC_ABORTED; or
// the status that broke the group meanwhile.
static sc_status group_barrier(shm_rank *me, shm_op op, size_t n, uint64_t deadline) {
  comm_shm_group *g = me->g;
  pthread_mutex_lock(&g->mu);
  sc_status s = group_state(g);
  if (s != SC_OK) {
    pthread_mutex_unlock(&g->mu);
    return s;
  }
  me->arrived_op = op;
  me->arrived_n = n;
  if (++g->count == g->n_ranks) {
    bool agree = true;
    for (int r = 1; r < g->n_ranks; r++)
      agree &= g->ranks[r].arrived_op == g->ranks[0].arrived_op &&
               g->ranks[r].arrived_n == g->ranks[0].arrived_n;
    g->agreed = agree;
    if (!agree) { // broken before anyone is released, so no rank can start another call
      int healthy = SC_OK;
      atomic_compare_exchange_strong(&g->broken, &healthy, SC_INVALID);
    }
    g->count = 0;
    atomic_store_explicit(&g->gen, atomic_load_explicit(&g->gen, memory_order_relaxed) + 1,
                          memory_order_release);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return agree ? SC_OK : group_break(g, SC_INVALID);
  }
  unsigned long long gen = atomic_load_explicit(&g->gen, memory_order_relaxed);
  if (g->spin) { // the peers have cores of their own: they are about to arrive
    pthread_mutex_unlock(&g->mu);
    // A rank's work between two collectives of a decode step is a fraction of a millisecond
    // and the ranks are near even, so the last peer usually arrives within the spin, and this
    // rank skips a sleep and a wake-up (36 barriers in a tp=2 llama-small step).
    sc_spin_while_equal(&g->gen, gen, SHM_SPIN_NS, group_unhealthy, g);
    pthread_mutex_lock(&g->mu);
  }
  bool late = false;
  while (atomic_load_explicit(&g->gen, memory_order_relaxed) == gen &&
         (s = group_state(g)) == SC_OK && !late)
    late = wait_until(&g->cv, &g->mu, deadline);
  // The generation cannot move twice while this rank waits, so `agreed` is this one's.
  bool done = atomic_load_explicit(&g->gen, memory_order_relaxed) != gen, agreed = g->agreed;
  pthread_mutex_unlock(&g->mu);
  if (done) return agreed ? SC_OK : SC_INVALID; // the last arrival broke the group
  if (s != SC_OK) return s;
  return group_break(g, SC_TIMEOUT);
}

// --- link faults

static bool link_slow(comm_shm_group *g) { return comm_link_on(&g->link); }

// Sleeps comm_link_cost (kernels/comm_link.h). Returns SC_OK, or the group's state when an
// abort or break cut the sleep short. Call with no lock held, only when link_slow(g).
static sc_status link_delay(comm_shm_group *g, double bytes, uint64_t own_ns) {
  uint64_t ns = comm_link_cost(&g->link, bytes, own_ns);
  if (!ns) return SC_OK;
  uint64_t until = sc_monotonic_ns() + ns;
  pthread_mutex_lock(&g->mu); // g->cv is broadcast on abort and break (group_wake_all)
  sc_status s;
  bool late = false;
  while ((s = group_state(g)) == SC_OK && !late) late = wait_until(&g->cv, &g->mu, until);
  pthread_mutex_unlock(&g->mu);
  return s;
}

// Makes slot p of rank `me` hold at least n floats. On failure the group is broken with SC_OOM
// (so the peers do not wait for the deadline) and that status comes back.
static sc_status slot_reserve(shm_rank *me, int p, size_t n) {
  if (n <= me->cap[p]) return SC_OK;
  size_t cap = me->cap[p] ? me->cap[p] : 256;
  while (cap < n) cap = cap > SIZE_MAX / 2 / sizeof(float) ? n : cap * 2;
  float *b = realloc(me->slot[p], cap * sizeof(float));
  if (!b) return group_break(me->g, SC_OOM);
  me->slot[p] = b;
  me->cap[p] = cap;
  return SC_OK;
}

// [lo, hi) of the n elements that rank r reduces.
static void slice_of(size_t n, int n_ranks, int r, size_t *lo, size_t *hi) {
  size_t q = n / (size_t)n_ranks, rem = n % (size_t)n_ranks, ur = (size_t)r;
  *lo = q * ur + (ur < rem ? ur : rem);
  *hi = *lo + q + (ur < rem ? 1 : 0);
}

// --- vtable: collectives

static sc_status shm_allreduce_sum(void *ctx, float *buf, size_t n) {
  shm_rank *me = ctx;
  comm_shm_group *g = me->g;
  uint64_t deadline = call_deadline(g);
  SC_TRY(group_state(g));
  if (n && !buf) return SC_INVALID;
  if (n > SIZE_MAX / sizeof(float)) return SC_INVALID;
  if (g->n_ranks == 1) return SC_OK;

  bool slow = link_slow(g);
  uint64_t t = comm_link_clock(slow), own = 0;
  int p = (int)(me->seq++ & 1);
  SC_TRY(slot_reserve(me, p, n));
  if (n) memcpy(me->slot[p], buf, n * sizeof(float));
  own += comm_link_clock(slow) - t;
  SC_TRY(group_barrier(me, SHM_OP_ALLREDUCE_IN, n, deadline));
  t = comm_link_clock(slow);

  // Sum this rank's slice over every slot in rank order; only this rank touches the slice.
  size_t lo, hi;
  slice_of(n, g->n_ranks, me->c.rank, &lo, &hi);
  float acc[SHM_REDUCE_CHUNK];
  for (size_t i0 = lo; i0 < hi; i0 += SHM_REDUCE_CHUNK) {
    size_t m = hi - i0 < SHM_REDUCE_CHUNK ? hi - i0 : SHM_REDUCE_CHUNK;
    memcpy(acc, g->ranks[0].slot[p] + i0, m * sizeof(float));
    for (int r = 1; r < g->n_ranks; r++) {
      const float *src = g->ranks[r].slot[p] + i0;
      for (size_t i = 0; i < m; i++) acc[i] += src[i];
    }
    memcpy(me->slot[p] + i0, acc, m * sizeof(float));
  }
  own += comm_link_clock(slow) - t;
  SC_TRY(group_barrier(me, SHM_OP_ALLREDUCE_OUT, n, deadline));
  t = comm_link_clock(slow);

  for (int r = 0; r < g->n_ranks; r++) {
    slice_of(n, g->n_ranks, r, &lo, &hi);
    if (hi > lo) memcpy(buf + lo, g->ranks[r].slot[p] + lo, (hi - lo) * sizeof(float));
  }
  if (!slow) return SC_OK;
  own += comm_link_clock(slow) - t;
  double wire = 2.0 * (g->n_ranks - 1) / g->n_ranks * (double)n * sizeof(float);
  return link_delay(g, wire, own);
}

static sc_status shm_allgather(void *ctx, const float *send, float *recv, size_t n) {
  shm_rank *me = ctx;
  comm_shm_group *g = me->g;
  uint64_t deadline = call_deadline(g);
  SC_TRY(group_state(g));
  if (n && (!send || !recv)) return SC_INVALID;
  if (n > SIZE_MAX / sizeof(float) / (size_t)g->n_ranks) return SC_INVALID;
  if (g->n_ranks == 1) {
    if (n) memmove(recv, send, n * sizeof(float));
    return SC_OK;
  }

  bool slow = link_slow(g);
  uint64_t t = comm_link_clock(slow), own = 0;
  int p = (int)(me->seq++ & 1);
  SC_TRY(slot_reserve(me, p, n));
  if (n) memcpy(me->slot[p], send, n * sizeof(float));
  own += comm_link_clock(slow) - t;
  SC_TRY(group_barrier(me, SHM_OP_ALLGATHER, n, deadline));
  t = comm_link_clock(slow);
  if (n)
    for (int r = 0; r < g->n_ranks; r++)
      memcpy(recv + (size_t)r * n, g->ranks[r].slot[p], n * sizeof(float));
  if (!slow) return SC_OK;
  own += comm_link_clock(slow) - t;
  return link_delay(g, (double)(g->n_ranks - 1) * (double)n * sizeof(float), own);
}

static sc_status shm_barrier(void *ctx) {
  shm_rank *me = ctx;
  uint64_t deadline = call_deadline(me->g);
  SC_TRY(group_state(me->g));
  if (me->g->n_ranks == 1) return SC_OK;
  me->seq++;
  return group_barrier(me, SHM_OP_BARRIER, 0, deadline);
}

// --- vtable: point to point

// Appends one record (receivable at once) to q; *at_off: where its header sits. Returns SC_OK
// or SC_OOM (q unchanged).
static sc_status queue_push(shm_queue *q, const void *buf, size_t bytes, size_t *at_off) {
  size_t need = sizeof(shm_rec) + bytes;
  if (q->cap - q->tail < need && q->head) { // compact before growing
    memmove(q->data, q->data + q->head, q->tail - q->head);
    q->tail -= q->head;
    q->head = 0;
  }
  if (q->cap - q->tail < need) {
    size_t cap = q->cap ? q->cap : 4096;
    while (cap - q->tail < need) {
      if (cap > SIZE_MAX / 2) return SC_OOM;
      cap *= 2;
    }
    unsigned char *d = realloc(q->data, cap);
    if (!d) return SC_OOM;
    q->data = d;
    q->cap = cap;
  }
  shm_rec rec = {.len = bytes, .at = 0};
  memcpy(q->data + q->tail, &rec, sizeof rec);
  if (bytes) memcpy(q->data + q->tail + sizeof rec, buf, bytes);
  *at_off = q->tail;
  q->tail += need;
  return SC_OK;
}

// The header of q's oldest record (q not empty).
static shm_rec queue_head(const shm_queue *q) {
  shm_rec rec;
  memcpy(&rec, q->data + q->head, sizeof rec);
  return rec;
}

static sc_status shm_send(void *ctx, const void *buf, size_t bytes, int peer) {
  shm_rank *me = ctx;
  comm_shm_group *g = me->g;
  SC_TRY(group_state(g));
  if (peer < 0 || peer >= g->n_ranks || (bytes && !buf)) return SC_INVALID;
  if (bytes > SIZE_MAX - sizeof(shm_rec)) return SC_INVALID;
  bool slow = link_slow(g);
  uint64_t t = comm_link_clock(slow);
  shm_inbox *box = &g->inbox[peer];
  shm_queue *q = &box->from[me->c.rank];
  pthread_mutex_lock(&box->mu);
  size_t off = 0;
  sc_status s = queue_push(q, buf, bytes, &off);
  if (s == SC_OK && slow) { // in flight: receivable only once the link has carried it
    uint64_t now = sc_monotonic_ns(), at = now + comm_link_cost(&g->link, (double)bytes, now - t);
    memcpy(q->data + off + offsetof(shm_rec, at), &at, sizeof at);
  }
  if (s == SC_OK) pthread_cond_broadcast(&box->cv);
  pthread_mutex_unlock(&box->mu);
  return s == SC_OK ? SC_OK : group_break(g, s);
}

// Waits for the oldest message from peer and copies it into buf. A message whose size is not
// `bytes` is left in the mailbox and SC_INVALID comes back (the group stays usable).
static sc_status shm_recv(void *ctx, void *buf, size_t bytes, int peer) {
  shm_rank *me = ctx;
  comm_shm_group *g = me->g;
  uint64_t deadline = call_deadline(g);
  SC_TRY(group_state(g));
  if (peer < 0 || peer >= g->n_ranks || (bytes && !buf)) return SC_INVALID;
  shm_inbox *box = &g->inbox[me->c.rank];
  shm_queue *q = &box->from[peer];
  pthread_mutex_lock(&box->mu);
  sc_status s;
  bool ready = false, late = false;
  for (;;) { // until a message is receivable, the group fails, or the deadline passes
    if ((s = group_state(g)) != SC_OK) break;
    uint64_t until = deadline;
    if (q->head != q->tail) {
      uint64_t at = queue_head(q).at;
      if (at == 0 || sc_monotonic_ns() >= at) {
        ready = true;
        break;
      }
      if (at < until) until = at; // in flight on a slow link
    }
    if (late) break;
    late = wait_until(&box->cv, &box->mu, until) && until == deadline;
  }
  if (!ready) {
    pthread_mutex_unlock(&box->mu);
    return s != SC_OK ? s : group_break(g, SC_TIMEOUT);
  }
  shm_rec rec = queue_head(q);
  if (rec.len != bytes) {
    s = SC_INVALID;
  } else {
    if (bytes) memcpy(buf, q->data + q->head + sizeof rec, bytes);
    q->head += sizeof rec + rec.len;
    if (q->head == q->tail) q->head = q->tail = 0;
  }
  pthread_mutex_unlock(&box->mu);
  return s;
}

// --- vtable: errors and abort

static sc_status shm_poll_error(void *ctx) {
  shm_rank *me = ctx;
  return group_state(me->g);
}

static void shm_abort(void *ctx) {
  shm_rank *me = ctx;
  group_abort(me->g);
}

static const comm_i shm_comm_i = {
    .name = "shm",
    .allreduce_sum = shm_allreduce_sum,
    .allgather = shm_allgather,
    .send = shm_send,
    .recv = shm_recv,
    .barrier = shm_barrier,
    .poll_error = shm_poll_error,
    .abort = shm_abort,
};

// --- group lifecycle

// Tears down whatever comm_shm_group_new managed to build (g->built_* say how much).
static void group_destroy(comm_shm_group *g) {
  for (int r = 0; r < g->built_inboxes; r++) {
    shm_inbox *b = &g->inbox[r];
    for (int s = 0; s < g->n_ranks; s++) free(b->from[s].data);
    free(b->from);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
  }
  if (g->ranks)
    for (int r = 0; r < g->n_ranks; r++) {
      free(g->ranks[r].slot[0]);
      free(g->ranks[r].slot[1]);
    }
  if (g->built_cv) pthread_cond_destroy(&g->cv);
  if (g->built_mu) pthread_mutex_destroy(&g->mu);
  if (g->built_link) comm_link_destroy(&g->link);
  free(g->inbox);
  free(g->ranks);
  free(g);
}

// Builds one inbox: its mutex, condition variable and n_ranks empty queues. SC_OK or SC_OOM
// (nothing left allocated).
static sc_status inbox_init(shm_inbox *b, int n_ranks) {
  b->from = calloc((size_t)n_ranks, sizeof *b->from);
  if (!b->from) return SC_OOM;
  if (pthread_mutex_init(&b->mu, NULL)) {
    free(b->from);
    return SC_OOM;
  }
  if (cond_init_monotonic(&b->cv) != SC_OK) {
    pthread_mutex_destroy(&b->mu);
    free(b->from);
    return SC_OOM;
  }
  return SC_OK;
}

// Returns SC_OK and *out, or SC_INVALID (out NULL, or n_ranks outside 1..SHM_MAX_RANKS) /
// SC_OOM, with *out NULL and nothing left allocated. deadline_ns 0 means 60 s.
sc_status comm_shm_group_new(int n_ranks, uint64_t deadline_ns, comm_shm_group **out) {
  if (!out) return SC_INVALID;
  *out = NULL;
  if (n_ranks < 1 || n_ranks > SHM_MAX_RANKS) return SC_INVALID;
  comm_shm_group *g = calloc(1, sizeof *g);
  if (!g) return SC_OOM;
  g->n_ranks = n_ranks;
  g->deadline_ns = deadline_ns ? deadline_ns : SHM_DEFAULT_DEADLINE_NS;
  atomic_init(&g->aborted, false);
  atomic_init(&g->broken, SC_OK);
  atomic_init(&g->gen, 0);
  g->spin = n_ranks > 1 && n_ranks <= device_cpu_cores(); // the cores this process may use
  size_t ranks_bytes = sizeof(shm_rank) * (size_t)n_ranks; // a multiple of its 64 B alignment
  g->ranks = aligned_alloc(alignof(shm_rank), ranks_bytes);
  g->inbox = calloc((size_t)n_ranks, sizeof *g->inbox);
  if (!g->ranks || !g->inbox) goto oom;
  memset(g->ranks, 0, ranks_bytes);
  for (int r = 0; r < n_ranks; r++) {
    shm_rank *k = &g->ranks[r];
    k->c = (comm){.i = &shm_comm_i, .ctx = k, .rank = r, .n_ranks = n_ranks};
    k->g = g;
  }
  if (pthread_mutex_init(&g->mu, NULL)) goto oom;
  g->built_mu = true;
  if (comm_link_init(&g->link)) goto oom;
  g->built_link = true;
  if (cond_init_monotonic(&g->cv) != SC_OK) goto oom;
  g->built_cv = true;
  for (; g->built_inboxes < n_ranks; g->built_inboxes++)
    if (inbox_init(&g->inbox[g->built_inboxes], n_ranks) != SC_OK) goto oom;
  *out = g;
  return SC_OK;
oom:
  group_destroy(g);
  return SC_OOM;
}

comm *comm_shm_group_rank(comm_shm_group *g, int r) {
  if (!g || r < 0 || r >= g->n_ranks) return NULL;
  return &g->ranks[r].c;
}

void comm_shm_group_abort(comm_shm_group *g) { group_abort(g); }

void comm_shm_group_free(comm_shm_group *g) {
  if (g) group_destroy(g);
}

void comm_shm_group_set_slow(comm_shm_group *g, double factor, uint64_t latency_ns,
                             double bandwidth) {
  if (g) comm_link_set(&g->link, factor, latency_ns, bandwidth);
}
