// The cuda communicator (see comm.h, "cuda backend"): the ranks of a group are threads of one
// process, each driving a `device` of backend "cuda", and every buffer is device memory of the
// calling rank's device. Two transports, chosen once at creation by where the devices are.
//
// loopback (every rank on one GPU, each with its own stream; NCCL refuses two ranks on one
// GPU): all host-side meeting goes through a comm_shm_group of the same size and deadline,
// whose barrier brings deadlines, abort and the broken state, and whose send/recv carry small
// host messages (device pointer values, acks). Before a meeting each rank publishes what it
// brings (operation, sequence number, size, device pointers) in a slot of its own, one of two
// picked by the parity of its meeting count; the barrier orders those writes before the
// peers' reads, and after it every rank checks that all ranks came for the same operation and
// size (a mismatch breaks the group with SC_INVALID). A rank drains its own stream before it
// arrives, so what it publishes is final, and drains it again before the next barrier, so
// that what it wrote is complete when the peers read it (streams of one GPU see each other's
// finished work). A drain polls cudaStreamQuery (never cudaStreamSynchronize), so an abort or
// the deadline ends it within a poll.
//   all-reduce: publish buf, drain, barrier A; rank r sums its slice [lo_r, hi_r) of every
//   rank's buf in rank order 0, 1, ... (sck_sum) into a device scratch of its own, drains,
//   publishes the scratch, barrier B; then copies every rank's scratch slice into its own buf
//   and drains. Every slice is summed once, by one rank, in one order: every rank ends with
//   the same bits. Two barriers are enough: a peer reads my buf only before B, and I write my
//   buf only after B (and the caller only after I return); a peer reads my scratch only after
//   B of collective k and before it arrives at A of the next meeting, and I write my scratch
//   (and grow it, freeing the old one) only after that A, which no rank passes before every
//   rank has finished reading k. Any call that meets begins with such an A, so no third
//   barrier is needed.
//   all-gather: publish send, drain, barrier A; copy every rank's send into recv + q n;
//   drain; barrier B, because a peer may still be reading my send until it arrives there.
//   send/recv: unbuffered. The sender drains, posts (pointer, bytes) to the receiver through
//   shm and waits for the ack; the receiver takes the message, copies device-to-device on its
//   own stream, drains, and acks. So a send returns once its peer has received it, as with
//   NCCL (shm's sends are buffered instead): two ranks that send to each other at once are a
//   protocol error here, reported as SC_INVALID and breaking the group. A send to oneself
//   is refused (SC_INVALID) on both transports: it could only wait for itself.
//   barrier: drain, then the shm barrier.
// Each host meeting waits at most the deadline from its own start (shm measures it), so one
// loopback call can take up to twice the deadline before SC_TIMEOUT; stream drains are
// bounded by the call's own deadline.
//
// nccl (every rank on a GPU of its own): one non-blocking communicator per rank
// (config.blocking = 0), all created by the creating thread in one ncclGroupStart/End, then
// polled with ncclCommGetAsyncError until ready, within the deadline. A call enqueues the
// NCCL operation on the rank's stream (so it runs after the work queued there), settles an
// ncclInProgress by polling ncclCommGetAsyncError, then polls cudaStreamQuery until the
// stream has drained, checking the async error and the deadline at every turn (short spins,
// then short sleeps). No rank thread ever blocks inside NCCL. A barrier is an all-reduce of
// one float in a device scratch of the rank's.
// Abort and watchdog: there is no watchdog thread. A rank that can be stuck is a rank inside
// a call, and every such rank polls its own deadline and its communicator's async error; the
// first to see either records the failure, marks the group broken and aborts every rank's
// communicator (ncclCommAbort: NCCL kernels of the survivors would otherwise spin for ever).
// comm_abort / comm_cuda_group_abort do the same from any thread, and poll_error also checks
// the async error, so an engine watchdog can drive it. ncclCommAbort frees the communicator
// (the last one of the process's clique frees them all), so no thread may touch any of them
// during or after it: every use of rank r's communicator is one short non-blocking call made
// under r's mutex (taken with trylock, giving up as soon as the communicators are gone), and
// the one thread that wins the "gone" flag takes every rank's mutex, aborts every
// communicator, exactly once, and leaves NULL handles behind. Rank threads never wait for
// that abort to finish: they see the flag and return SC_ABORTED (or the recorded status) at
// once. comm_cuda_group_free waits for it, then, on a healthy group, finalizes (in one group,
// polled) and destroys the communicators; after an abort there is nothing left to free.
//
// Errors: every CUDA and NCCL call goes through the checks of cuda_backend.h; the first
// failure (its text, or the deadline) is kept in the group, marks it broken (SC_DEVICE,
// SC_OOM, SC_TIMEOUT, SC_INVALID) and stops the transport (the shm group is aborted, or the
// NCCL communicators), so that peers waiting anywhere leave with that status.
//
// Link faults (comm_cuda_group_set_slow): the arithmetic of comm_shm_group_set_slow, on the
// same byte counts (a send's size; 2 (n - 1) / n x an all-reduce's buffer; (n - 1) x an
// all-gather's slice), slept after the transfer completes, on every rank for collectives and
// on the receiver only for send/recv. Own time on loopback is the rank's GPU work of the call
// (the sums and copies, not the waits at barriers); on nccl it is the operation's time on the
// rank's stream after the stream has drained, which includes waiting for the peers. The
// sleeps end early on abort or break.
//
// Ranks as processes (comm_cuda_group_new_member): a group of which this process holds one
// rank, the others being other processes (of an MPI job; kernels/comm.c opens it). Always nccl:
// group rank 0 makes NCCL's unique id and the caller's broadcast carries it to every member
// (nccl-tests' bootstrap), then each process creates its own communicator
// (ncclCommInitRankConfig, non-blocking, polled as above). The other ranks' slots hold no
// communicator, and everything that walks the ranks (settle, finalize, abort) skips them.
// An abort or a failure aborts this process's communicator only; its peers see NCCL's
// asynchronous error or their deadline.
//
// Not done: ncclCommShrink (NCCL >= 2.27) to drop a dead rank and go on with the survivors;
// after any failure the group stays broken and the caller builds a new one. Left to other
// files: the device (kernels/cuda/cuda_device.c), the kernels (cuda_*.cu), the shm
// meeting (kernels/comm_shm.c), and who calls abort (a watchdog in the engine).
#include "kernels/comm.h"

#include <pthread.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/clock.h"
#include "kernels/comm_link.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/device.h"
#include "kernels/spin.h"

#define CC_MAX_RANKS 1024                     // as shm: the loopback meeting is an shm group
#define CC_DEFAULT_DEADLINE_NS 60000000000ull // 60 s when the caller passes 0
#define CC_POLL_SPIN_TURNS 256u               // polls that spin or yield before they sleep
#define CC_POLL_SLEEP_NS 20000l               // a poll's sleep after that (20 us)
#define CC_INIT_SLEEP_NS 1000000l             // between polls of a communicator's setup
#define CC_SCRATCH_MIN 4096                   // floats: the smallest loopback scratch

// --- checks for calls whose "not yet" is an answer, not a failure

// cudaStreamQuery: *done is whether the stream has drained. cudaErrorNotReady is cleared from
// the thread's last error, which the next kernel launcher of this thread reads.
static sc_status cu_query(cudaError_t rc, const char *call, const char *file, int line, cuda_err *e,
                          bool *done) {
  *done = rc == cudaSuccess;
  if (rc != cudaErrorNotReady) return cuda_check_rt(rc, call, file, line, e);
  rc = cudaGetLastError();
  if (rc == cudaSuccess || rc == cudaErrorNotReady) return SC_OK;
  return cuda_check_rt(rc, "cudaGetLastError()", file, line, e);
}
#define CU_QUERY(e, done, call) cu_query((call), #call, __FILE__, __LINE__, (e), (done))

// A call on a non-blocking communicator: ncclInProgress is success for now (*pending, when
// given, says so); the caller settles it by polling the communicator's async state.
static sc_status nccl_check_nb(ncclResult_t rc, const char *call, const char *file, int line,
                               cuda_err *e, bool *pending) {
  if (pending) *pending = rc == ncclInProgress;
  return rc == ncclInProgress ? SC_OK : cuda_check_nccl(rc, call, file, line, e);
}
#define NCCL_CHECK_NB(e, pending, call)                                                            \
  nccl_check_nb((call), #call, __FILE__, __LINE__, (e), (pending))

// A communicator's asynchronous state as a call result: ncclSuccess, ncclInProgress, or the
// error (a failure of the query itself included).
static ncclResult_t nccl_async_state(ncclComm_t c) {
  ncclResult_t st = ncclSuccess;
  ncclResult_t rc = ncclCommGetAsyncError(c, &st);
  return rc != ncclSuccess ? rc : st;
}

// --- types

typedef enum cc_transport { CC_LOOPBACK, CC_NCCL } cc_transport;

// What a loopback rank comes to a meeting for; every rank must agree.
typedef enum lb_op { LB_NONE, LB_ALLREDUCE, LB_ALLGATHER, LB_BARRIER } lb_op;

// What a loopback rank publishes for one meeting: written by its owner before the meeting's
// first barrier (part: before the second), read by the peers after it.
typedef struct lb_slot {
  lb_op op;
  uint64_t seq;      // the owner's meeting count: equal on every rank
  size_t n;          // floats: the call's count
  const float *in;   // device: all-reduce buf / all-gather send, (n) floats
  const float *part; // device: all-reduce: the owner's reduced slice, (hi - lo) floats
} lb_slot;

// Loopback send -> recv: the sender's buffer, which stays valid until the ack.
typedef struct lb_msg {
  const void *ptr; // device, (bytes)
  size_t bytes;
} lb_msg;

// Loopback recv -> send; its size differs from lb_msg's, so neither is taken for the other.
typedef struct lb_ack {
  int32_t status; // sc_status the send returns
} lb_ack;

// One rank's endpoint. Fields below `c` are touched by the owning thread only, except the
// slots (read by peers between barriers) and nccl (under nccl_mu).
typedef struct cuda_rank {
  alignas(64) comm c; // public endpoint; c.ctx points here
  comm_cuda_group *g;
  device *dev;         // the caller's, outlives the group
  int gpu;             // cuda_device_gpu(dev)
  cudaStream_t stream; // cuda_device_stream(dev): every op of the device runs on it
  // loopback
  comm *shm;          // this rank's endpoint of g->shm
  uint64_t seq;       // meetings entered; seq & 1 picks the slot
  lb_slot slot[2];    // what this rank brings to a meeting, by parity
  float *scratch;     // device on gpu, (scratch_cap) floats: this rank's reduced slice
  size_t scratch_cap; // floats
  // nccl
  pthread_mutex_t nccl_mu; // held around every use of nccl
  ncclComm_t nccl;         // under nccl_mu; NULL once aborted or destroyed
} cuda_rank;

struct comm_cuda_group {
  cc_transport transport;
  int n_ranks;
  int self; // -1: every rank is a thread here; else the one rank this process holds (nccl)
  uint64_t deadline_ns; // per blocking call, measured from the call's start
  atomic_bool aborted;  // set once by abort; checked by every call and every wait
  atomic_int broken;    // SC_OK, or the first status that broke the group (sticky)

  pthread_mutex_t err_mu; // guards err_set and err (err is written once, before err_set)
  bool err_set;
  char err[512]; // the failure that broke the group

  pthread_mutex_t wake_mu; // with wake_cv: broadcast on abort and break (ends link sleeps)
  pthread_cond_t wake_cv;

  comm_link link;          // the link fault (comm_cuda_group_set_slow)

  cuda_rank *ranks;    // (n_ranks)
  comm_shm_group *shm; // loopback: the host meeting

  atomic_bool nccl_gone;        // nccl: the communicators are being or have been released
  pthread_mutex_t nccl_life_mu; // nccl: held while they are released (free waits on it)

  bool built_err_mu, built_wake_mu, built_wake_cv, built_link, built_life_mu;
  int built_rank_mu; // ranks whose nccl_mu exists
};

// --- state: abort, broken, wake-ups

// The status every call returns at once, or SC_OK while the group is healthy.
static sc_status group_state(const comm_cuda_group *g) {
  if (atomic_load(&g->aborted)) return SC_ABORTED;
  return (sc_status)atomic_load(&g->broken);
}

// Wakes every link sleep. The flag it reacts to is set before this is called and sleepers test
// it under wake_mu, so no wake-up is lost.
static void wake_all(comm_cuda_group *g) {
  pthread_mutex_lock(&g->wake_mu);
  pthread_cond_broadcast(&g->wake_cv);
  pthread_mutex_unlock(&g->wake_mu);
}

static void nccl_abort_all(comm_cuda_group *g);

// Stops the transport so that every rank waiting in it leaves: the shm meeting is aborted
// (waiters come back with SC_ABORTED and then read the group's own state), or every NCCL
// communicator. Call with no lock held.
static void transport_stop(comm_cuda_group *g) {
  if (g->transport == CC_LOOPBACK) comm_shm_group_abort(g->shm);
  else nccl_abort_all(g);
}

// Marks the group broken with status s and this text (the first cause wins), wakes every
// sleeper and stops the transport. Returns the status the caller should return (an abort or an
// earlier break wins). Call with no lock held.
static sc_status group_fail(comm_cuda_group *g, sc_status s, const char *text) {
  pthread_mutex_lock(&g->err_mu);
  int healthy = SC_OK;
  if (atomic_compare_exchange_strong(&g->broken, &healthy, (int)s)) {
    snprintf(g->err, sizeof g->err, "%s", text);
    g->err_set = true;
  }
  pthread_mutex_unlock(&g->err_mu);
  wake_all(g);
  transport_stop(g);
  sc_status now = group_state(g);
  return now == SC_OK ? s : now;
}

static sc_status group_failf(comm_cuda_group *g, sc_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static sc_status group_failf(comm_cuda_group *g, sc_status s, const char *fmt, ...) {
  char text[sizeof g->err];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  return group_fail(g, s, text);
}

static void group_abort(comm_cuda_group *g) {
  if (!g || atomic_exchange(&g->aborted, true)) return;
  wake_all(g);
  transport_stop(g);
}

// --- time: deadlines, polls, link faults

static uint64_t call_deadline(const comm_cuda_group *g) {
  return sc_monotonic_ns() + g->deadline_ns;
}

static unsigned long long deadline_ms(const comm_cuda_group *g) {
  return (unsigned long long)(g->deadline_ns / 1000000ull);
}

static void sleep_ns(long ns) {
  struct timespec ts = {.tv_sec = 0, .tv_nsec = ns};
  nanosleep(&ts, NULL);
}

// One turn of a poll: spins and yields first (a collective of a decode step takes tens of
// microseconds), then short sleeps, so an abort is seen within a sleep.
static void poll_pause(unsigned turn) {
  if (turn < CC_POLL_SPIN_TURNS) sc_spin_pause(turn);
  else sleep_ns(CC_POLL_SLEEP_NS);
}

static bool link_slow(comm_cuda_group *g) { return comm_link_on(&g->link); }

// Sleeps comm_link_cost (kernels/comm_link.h, the shm communicator's arithmetic). Returns SC_OK,
// or the group's state when an abort or break cut the sleep short. Call with no lock held, only
// when link_slow(g).
static sc_status link_delay(comm_cuda_group *g, double bytes, uint64_t own_ns) {
  uint64_t ns = comm_link_cost(&g->link, bytes, own_ns);
  if (!ns) return SC_OK;
  uint64_t until = sc_monotonic_ns() + ns;
  struct timespec ts = {.tv_sec = (time_t)(until / 1000000000ull),
                        .tv_nsec = (long)(until % 1000000000ull)};
  pthread_mutex_lock(&g->wake_mu);
  sc_status s;
  while ((s = group_state(g)) == SC_OK && sc_monotonic_ns() < until)
    pthread_cond_timedwait(&g->wake_cv, &g->wake_mu, &ts);
  pthread_mutex_unlock(&g->wake_mu);
  return s;
}

// --- what both transports share: the rank's GPU and stream

// Makes the rank's GPU current on the calling thread (a rank thread may not have it current).
static sc_status rank_enter(cuda_rank *k) {
  cuda_err e = {{0}};
  sc_status s = CU_CHECK(&e, cudaSetDevice(k->gpu));
  return s == SC_OK ? SC_OK : group_fail(k->g, s, e.msg);
}

static sc_status nccl_poll(cuda_rank *k, bool *settled);

// Waits until everything queued on the rank's stream has run (on nccl: and the communicator
// has settled, checking its async error at every turn). Returns SC_OK; the group's state once
// it is aborted or broken; or breaks it with SC_TIMEOUT past deadline, or with the CUDA/NCCL
// failure. `what` names the operation in the text.
static sc_status stream_wait(cuda_rank *k, uint64_t deadline, const char *what) {
  comm_cuda_group *g = k->g;
  for (unsigned turn = 0;; turn++) {
    SC_TRY(group_state(g));
    bool settled = true;
    if (g->transport == CC_NCCL) SC_TRY(nccl_poll(k, &settled));
    if (settled) {
      cuda_err e = {{0}};
      bool done = false;
      sc_status s = CU_QUERY(&e, &done, cudaStreamQuery(k->stream));
      if (s != SC_OK) return group_fail(g, s, e.msg);
      if (done) return SC_OK;
    }
    if (sc_monotonic_ns() >= deadline)
      return group_failf(g, SC_TIMEOUT,
                         "%s on rank %d (GPU %d) did not complete within the deadline (%llu ms)",
                         what, k->c.rank, k->gpu, deadline_ms(g));
    poll_pause(turn);
  }
}

// [lo, hi) of the n elements that rank r reduces (as comm_shm.c).
static void slice_of(size_t n, int n_ranks, int r, size_t *lo, size_t *hi) {
  size_t q = n / (size_t)n_ranks, rem = n % (size_t)n_ranks, ur = (size_t)r;
  *lo = q * ur + (ur < rem ? ur : rem);
  *hi = *lo + q + (ur < rem ? 1 : 0);
}

// --- loopback: the host meeting

static const char *lb_op_name(lb_op op) {
  switch (op) {
  case LB_ALLREDUCE: return "allreduce";
  case LB_ALLGATHER: return "allgather";
  case LB_BARRIER: return "barrier";
  case LB_NONE: break;
  }
  return "nothing";
}

// Fills the slot of this rank's next meeting (the peers read it after its first barrier) and
// returns its parity.
static int lb_publish(cuda_rank *k, lb_op op, size_t n, const float *in) {
  int p = (int)(k->seq & 1);
  k->slot[p] = (lb_slot){.op = op, .seq = k->seq, .n = n, .in = in, .part = NULL};
  k->seq++;
  return p;
}

// The status of a loopback call whose shm step failed with s. The group's own state comes
// first (we abort the shm group to deliver it); otherwise the shm group broke by itself (a
// peer missed the deadline, a message of the wrong kind) and that breaks this group too.
static sc_status lb_shm_failed(cuda_rank *k, sc_status s, const char *what) {
  sc_status mine = group_state(k->g);
  if (mine != SC_OK) return mine;
  if (s == SC_TIMEOUT)
    return group_failf(k->g, s,
                       "loopback %s on rank %d: a peer did not come within the deadline (%llu ms)",
                       what, k->c.rank, deadline_ms(k->g));
  return group_failf(k->g, s, "loopback %s on rank %d: the host meeting failed (%s)", what,
                     k->c.rank, sc_status_name(s));
}

// The shm barrier. With check, then verifies that every rank brought the same operation,
// meeting number and size in slot p, and breaks the group with SC_INVALID when not (every
// rank reads the same slots, so all of them see it).
static sc_status lb_meet(cuda_rank *k, int p, bool check, const char *what) {
  sc_status s = comm_barrier(k->shm);
  if (s != SC_OK) return lb_shm_failed(k, s, what);
  if (!check) return SC_OK;
  const lb_slot *me = &k->slot[p];
  for (int q = 0; q < k->g->n_ranks; q++) {
    const lb_slot *o = &k->g->ranks[q].slot[p];
    if (o->op != me->op || o->seq != me->seq || o->n != me->n)
      return group_failf(k->g, SC_INVALID,
                         "loopback: rank %d came to meeting #%llu for %s (n=%zu) "
                         "but rank %d to meeting #%llu for %s (n=%zu)",
                         k->c.rank, (unsigned long long)me->seq, lb_op_name(me->op), me->n, q,
                         (unsigned long long)o->seq, lb_op_name(o->op), o->n);
  }
  return SC_OK;
}

// Makes the rank's scratch hold at least n floats. Call only after the meeting's first
// barrier: the old scratch is freed, and a peer reads it until it arrives there. On failure
// the group is broken (SC_OOM or SC_DEVICE) and that status comes back.
static sc_status lb_reserve(cuda_rank *k, size_t n) {
  if (n <= k->scratch_cap) return SC_OK;
  size_t cap = k->scratch_cap > CC_SCRATCH_MIN ? k->scratch_cap : CC_SCRATCH_MIN;
  while (cap < n) cap = cap > SIZE_MAX / 2 / sizeof(float) ? n : cap * 2;
  cuda_err e = {{0}};
  sc_status s = SC_OK;
  if (k->scratch) s = CU_CHECK(&e, cudaFree(k->scratch));
  k->scratch = NULL;
  k->scratch_cap = 0;
  void *p = NULL;
  if (s == SC_OK) s = CU_CHECK(&e, cudaMalloc(&p, cap * sizeof(float)));
  if (s != SC_OK) return group_fail(k->g, s, e.msg);
  k->scratch = p;
  k->scratch_cap = cap;
  return SC_OK;
}

// Enqueues a device-to-device copy of bytes on the rank's stream (nothing for 0 bytes or a
// copy onto itself). On failure the group is broken and that status comes back.
static sc_status lb_copy(cuda_rank *k, void *dst, const void *src, size_t bytes) {
  if (!bytes || dst == src) return SC_OK;
  cuda_err e = {{0}};
  sc_status s = CU_CHECK(&e, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, k->stream));
  return s == SC_OK ? SC_OK : group_fail(k->g, s, e.msg);
}

// --- loopback: vtable

static sc_status lb_allreduce_sum(void *ctx, float *buf, size_t n) {
  cuda_rank *k = ctx;
  comm_cuda_group *g = k->g;
  uint64_t deadline = call_deadline(g);
  SC_TRY(group_state(g));
  if (n && !buf) return SC_INVALID;
  if (n > SIZE_MAX / sizeof(float)) return SC_INVALID;
  SC_TRY(rank_enter(k));
  int p = lb_publish(k, LB_ALLREDUCE, n, buf);
  SC_TRY(stream_wait(k, deadline, "loopback allreduce")); // buf holds the queued work's result
  if (g->n_ranks == 1) return SC_OK;
  SC_TRY(lb_meet(k, p, true, "allreduce")); // A: every buf is final and published

  bool slow = link_slow(g);
  uint64_t t = comm_link_clock(slow), own = 0;
  size_t lo, hi;
  slice_of(n, g->n_ranks, k->c.rank, &lo, &hi);
  SC_TRY(lb_reserve(k, hi - lo));
  if (hi > lo) {
    const float *srcs[SCK_SUM_MAX];
    for (int q = 0; q < g->n_ranks; q++) srcs[q] = g->ranks[q].slot[p].in + lo;
    cuda_err e = {{0}};
    sc_status s = CU_CHECK(&e, sck_sum(k->stream, hi - lo, g->n_ranks, srcs, k->scratch));
    if (s != SC_OK) return group_fail(g, s, e.msg);
  }
  SC_TRY(stream_wait(k, deadline, "loopback allreduce"));
  k->slot[p].part = k->scratch;
  own += comm_link_clock(slow) - t;
  SC_TRY(lb_meet(k, p, false, "allreduce")); // B: every slice is reduced and published
  t = comm_link_clock(slow);

  for (int q = 0; q < g->n_ranks; q++) {
    slice_of(n, g->n_ranks, q, &lo, &hi);
    SC_TRY(lb_copy(k, buf + lo, g->ranks[q].slot[p].part, (hi - lo) * sizeof(float)));
  }
  SC_TRY(stream_wait(k, deadline, "loopback allreduce"));
  if (!slow) return SC_OK;
  own += comm_link_clock(slow) - t;
  double wire = 2.0 * (g->n_ranks - 1) / g->n_ranks * (double)n * sizeof(float);
  return link_delay(g, wire, own);
}

// send may be recv + rank * n (in place); any other overlap of send and recv is not allowed.
static sc_status lb_allgather(void *ctx, const float *send, float *recv, size_t n) {
  cuda_rank *k = ctx;
  comm_cuda_group *g = k->g;
  uint64_t deadline = call_deadline(g);
  SC_TRY(group_state(g));
  if (n && (!send || !recv)) return SC_INVALID;
  if (n > SIZE_MAX / sizeof(float) / (size_t)g->n_ranks) return SC_INVALID;
  SC_TRY(rank_enter(k));
  int p = lb_publish(k, LB_ALLGATHER, n, send);
  SC_TRY(stream_wait(k, deadline, "loopback allgather"));
  if (g->n_ranks == 1) {
    SC_TRY(lb_copy(k, recv, send, n * sizeof(float)));
    return stream_wait(k, deadline, "loopback allgather");
  }
  SC_TRY(lb_meet(k, p, true, "allgather")); // A: every send is final and published

  bool slow = link_slow(g);
  uint64_t t = comm_link_clock(slow);
  for (int q = 0; q < g->n_ranks; q++)
    SC_TRY(lb_copy(k, recv + (size_t)q * n, g->ranks[q].slot[p].in, n * sizeof(float)));
  SC_TRY(stream_wait(k, deadline, "loopback allgather"));
  uint64_t own = comm_link_clock(slow) - t;
  SC_TRY(lb_meet(k, p, false, "allgather")); // B: nobody reads my send any more
  if (!slow) return SC_OK;
  return link_delay(g, (double)(g->n_ranks - 1) * (double)n * sizeof(float), own);
}

static sc_status lb_barrier(void *ctx) {
  cuda_rank *k = ctx;
  comm_cuda_group *g = k->g;
  uint64_t deadline = call_deadline(g);
  SC_TRY(group_state(g));
  SC_TRY(rank_enter(k));
  int p = lb_publish(k, LB_BARRIER, 0, NULL);
  SC_TRY(stream_wait(k, deadline, "loopback barrier"));
  if (g->n_ranks == 1) return SC_OK;
  return lb_meet(k, p, true, "barrier");
}

// The oldest message from peer was not of the kind this rank waits for: both ranks are
// sending to each other (or both receiving from each other), which unbuffered sends cannot do.
static sc_status lb_crossed(cuda_rank *k, int peer, const char *what) {
  return group_failf(k->g, SC_INVALID,
                     "loopback %s on rank %d: rank %d sent to (or received from) it at the "
                     "same time; cuda sends wait for their receiver",
                     what, k->c.rank, peer);
}

// Returns once the peer has copied the message (or refused it: SC_INVALID for a size that is
// not its recv's, the group staying usable).
static sc_status lb_send(void *ctx, const void *buf, size_t bytes, int peer) {
  cuda_rank *k = ctx;
  comm_cuda_group *g = k->g;
  uint64_t deadline = call_deadline(g);
  SC_TRY(group_state(g));
  if (peer < 0 || peer >= g->n_ranks || peer == k->c.rank || (bytes && !buf)) return SC_INVALID;
  SC_TRY(rank_enter(k));
  SC_TRY(stream_wait(k, deadline, "loopback send")); // buf holds the queued work's result
  lb_msg m = {.ptr = buf, .bytes = bytes};
  sc_status s = comm_send(k->shm, &m, sizeof m, peer);
  if (s != SC_OK) return lb_shm_failed(k, s, "send");
  lb_ack a = {.status = SC_OK};
  s = comm_recv(k->shm, &a, sizeof a, peer);
  if (s == SC_INVALID && group_state(g) == SC_OK) return lb_crossed(k, peer, "send");
  if (s != SC_OK) return lb_shm_failed(k, s, "send");
  return (sc_status)a.status;
}

static sc_status lb_recv(void *ctx, void *buf, size_t bytes, int peer) {
  cuda_rank *k = ctx;
  comm_cuda_group *g = k->g;
  uint64_t deadline = call_deadline(g);
  SC_TRY(group_state(g));
  if (peer < 0 || peer >= g->n_ranks || peer == k->c.rank || (bytes && !buf)) return SC_INVALID;
  SC_TRY(rank_enter(k));
  SC_TRY(stream_wait(k, deadline, "loopback recv")); // the queued work is done with buf
  lb_msg m = {0};
  sc_status s = comm_recv(k->shm, &m, sizeof m, peer);
  if (s == SC_INVALID && group_state(g) == SC_OK) return lb_crossed(k, peer, "recv");
  if (s != SC_OK) return lb_shm_failed(k, s, "recv");
  lb_ack a = {.status = SC_OK};
  if (m.bytes != bytes) { // refused: both sides return SC_INVALID, the group stays usable
    a.status = SC_INVALID;
    s = comm_send(k->shm, &a, sizeof a, peer);
    return s == SC_OK ? SC_INVALID : lb_shm_failed(k, s, "recv");
  }
  bool slow = link_slow(g);
  uint64_t t = comm_link_clock(slow);
  SC_TRY(lb_copy(k, buf, m.ptr, bytes));
  SC_TRY(stream_wait(k, deadline, "loopback recv"));
  uint64_t own = comm_link_clock(slow) - t;
  s = comm_send(k->shm, &a, sizeof a, peer); // the sender may reuse its buffer from now on
  if (s != SC_OK) return lb_shm_failed(k, s, "recv");
  if (!slow) return SC_OK;
  return link_delay(g, (double)bytes, own); // the message arrives late; the sender is free
}

// The group's state; also a break of the shm meeting that no rank has reported yet.
static sc_status lb_poll_error(void *ctx) {
  cuda_rank *k = ctx;
  sc_status s = group_state(k->g);
  return s != SC_OK ? s : comm_poll_error(k->shm);
}

static void cc_abort(void *ctx) {
  cuda_rank *k = ctx;
  group_abort(k->g);
}

static const comm_i lb_comm_i = {
    .name = "cuda-loopback",
    .allreduce_sum = lb_allreduce_sum,
    .allgather = lb_allgather,
    .send = lb_send,
    .recv = lb_recv,
    .barrier = lb_barrier,
    .poll_error = lb_poll_error,
    .abort = cc_abort,
};

// --- nccl: the communicators' lives

// The state a call returns once the communicators are gone (an abort or a break released
// them; SC_ABORTED should nothing be recorded, i.e. the group is being freed).
static sc_status nccl_gone_state(const comm_cuda_group *g) {
  sc_status s = group_state(g);
  return s != SC_OK ? s : SC_ABORTED;
}

// Takes rank k's communicator for one short non-blocking call. Returns SC_OK with nccl_mu held
// and k->nccl live, or (lock not held) the state to return once the communicators are gone.
// trylock: a rank never waits for an abort in progress, which holds every rank's lock.
static sc_status nccl_hold(cuda_rank *k) {
  comm_cuda_group *g = k->g;
  for (unsigned turn = 0;; turn++) {
    if (atomic_load(&g->nccl_gone)) return nccl_gone_state(g);
    if (pthread_mutex_trylock(&k->nccl_mu) == 0) break;
    sc_spin_pause(turn);
  }
  if (k->nccl && !atomic_load(&g->nccl_gone)) return SC_OK;
  pthread_mutex_unlock(&k->nccl_mu);
  return nccl_gone_state(g);
}

// Aborts every communicator that is left, holding every rank's lock (in rank order) so that no
// thread is inside NCCL on any of them: ncclCommAbort frees them. Call with nccl_life_mu held,
// after setting nccl_gone, holding no rank's lock.
static void nccl_abort_comms(comm_cuda_group *g) {
  for (int r = 0; r < g->n_ranks; r++) pthread_mutex_lock(&g->ranks[r].nccl_mu);
  for (int r = 0; r < g->n_ranks; r++) {
    cuda_rank *k = &g->ranks[r];
    if (!k->nccl) continue;
    cuda_err e = {{0}};
    (void)NCCL_CHECK(&e, ncclCommAbort(k->nccl)); // nothing more can be done on failure
    k->nccl = NULL;
  }
  for (int r = g->n_ranks - 1; r >= 0; r--) pthread_mutex_unlock(&g->ranks[r].nccl_mu);
}

// Aborts every rank's communicator, exactly once, from whichever thread gets here first; the
// others return at once (the rank threads see nccl_gone and leave). Call with no lock held.
static void nccl_abort_all(comm_cuda_group *g) {
  if (atomic_exchange(&g->nccl_gone, true)) return;
  pthread_mutex_lock(&g->nccl_life_mu);
  nccl_abort_comms(g);
  pthread_mutex_unlock(&g->nccl_life_mu);
}

// Polls rank k's communicator once: *settled is false while its last call is in progress.
// An asynchronous error breaks the group (and aborts every communicator).
static sc_status nccl_poll(cuda_rank *k, bool *settled) {
  SC_TRY(nccl_hold(k));
  cuda_err e = {{0}};
  bool pending = false;
  sc_status s = NCCL_CHECK_NB(&e, &pending, nccl_async_state(k->nccl));
  pthread_mutex_unlock(&k->nccl_mu);
  if (s != SC_OK) return group_fail(k->g, s, e.msg);
  *settled = !pending;
  return SC_OK;
}

// Polls every communicator until its setup (or finalize) has settled, for at most the deadline.
// Returns SC_OK, or the first failure with its text in e. Called by the creating / freeing
// thread only, while no rank thread is inside a call.
static sc_status nccl_settle_all(comm_cuda_group *g, const char *what, cuda_err *e) {
  uint64_t deadline = call_deadline(g);
  for (int r = 0; r < g->n_ranks; r++) {
    cuda_rank *k = &g->ranks[r];
    if (g->self >= 0 && r != g->self) continue; // another process's
    if (!k->nccl) {
      snprintf(e->msg, sizeof e->msg, "%s: rank %d has no communicator", what, r);
      return SC_DEVICE;
    }
    for (;;) {
      bool pending = false;
      SC_TRY(NCCL_CHECK_NB(e, &pending, nccl_async_state(k->nccl)));
      if (!pending) break;
      if (sc_monotonic_ns() >= deadline) {
        snprintf(e->msg, sizeof e->msg,
                 "%s: rank %d (GPU %d) not done within the deadline (%llu ms)", what, r, k->gpu,
                 deadline_ms(g));
        return SC_TIMEOUT;
      }
      sleep_ns(CC_INIT_SLEEP_NS);
    }
  }
  return SC_OK;
}

// The end of a group's NCCL set-up (in one process or across an MPI job): wait for every
// communicator's init; on any failure mark NCCL gone and abort the communicators made.
static sc_status nccl_init_settle(comm_cuda_group *g, sc_status s, cuda_err *e) {
  if (s == SC_OK) s = nccl_settle_all(g, "ncclCommInitRankConfig", e);
  if (s != SC_OK) {
    atomic_store(&g->nccl_gone, true);
    pthread_mutex_lock(&g->nccl_life_mu);
    nccl_abort_comms(g);
    pthread_mutex_unlock(&g->nccl_life_mu);
  }
  return s;
}

// Creates one non-blocking communicator per rank, from this thread, in one group. Returns
// SC_OK with every k->nccl ready, or the failure with its text in e and every communicator
// that was made aborted (nccl_gone set).
static sc_status nccl_create(comm_cuda_group *g, cuda_err *e) {
  int saved = 0;
  SC_TRY(CU_CHECK(e, cudaGetDevice(&saved)));
  ncclUniqueId id;
  SC_TRY(NCCL_CHECK(e, ncclGetUniqueId(&id)));
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0; // every call returns at once: no rank thread ever waits inside NCCL
  SC_TRY(NCCL_CHECK(e, ncclGroupStart()));
  sc_status s = SC_OK;
  for (int r = 0; r < g->n_ranks && s == SC_OK; r++) {
    cuda_rank *k = &g->ranks[r];
    s = CU_CHECK(e, cudaSetDevice(k->gpu)); // a communicator belongs to the current GPU
    if (s == SC_OK)
      s = NCCL_CHECK_NB(e, NULL, ncclCommInitRankConfig(&k->nccl, g->n_ranks, id, r, &cfg));
  }
  cuda_err e_end = {{0}};
  sc_status s_end = NCCL_CHECK_NB(&e_end, NULL, ncclGroupEnd()); // once started, always ended
  if (s == SC_OK && s_end != SC_OK) {
    s = s_end;
    *e = e_end;
  }
  cuda_err e_dev = {{0}};
  sc_status s_dev = CU_CHECK(&e_dev, cudaSetDevice(saved)); // this thread's GPU as it was
  if (s == SC_OK && s_dev != SC_OK) {
    s = s_dev;
    *e = e_dev;
  }
  return nccl_init_settle(g, s, e);
}

// What group rank 0 broadcasts to the members of a group of processes: NCCL's unique id, or
// that it could not make one (the members then fail at once instead of at their deadline).
typedef struct member_boot {
  int32_t ok;
  char why[256]; // when not ok: rank 0's failure
  ncclUniqueId id;
} member_boot;

// Ranks as processes: this process's communicator, rank g->self of g->n_ranks, from the unique
// id group rank 0 makes and bcast carries. Returns SC_OK with it ready, or the failure with its
// text in e (the communicator, if made, aborted and nccl_gone set).
static sc_status nccl_create_member(comm_cuda_group *g, comm_cuda_bcast_fn bcast, void *ud,
                                    cuda_err *e) {
  cuda_rank *k = &g->ranks[g->self];
  member_boot *b = calloc(1, sizeof *b); // rank 0's answer, or the place for it
  if (!b) {
    snprintf(e->msg, sizeof e->msg, "out of host memory");
    return SC_OOM;
  }
  sc_status s = SC_OK;
  if (g->self == 0) {
    s = NCCL_CHECK(e, ncclGetUniqueId(&b->id));
    b->ok = s == SC_OK;
    if (s != SC_OK) snprintf(b->why, sizeof b->why, "%.255s", e->msg);
  }
  sc_error be = {{0}};
  sc_status bs = bcast(ud, b, sizeof *b, &be); // also after a failure: it releases the members
  if (s == SC_OK && bs != SC_OK) {
    s = bs;
    snprintf(e->msg, sizeof e->msg, "the broadcast of NCCL's unique id: %.300s", be.msg);
  }
  if (s == SC_OK && !b->ok) {
    s = SC_DEVICE;
    snprintf(e->msg, sizeof e->msg, "group rank 0 could not make NCCL's unique id: %s", b->why);
  }
  int saved = 0;
  if (s == SC_OK) s = CU_CHECK(e, cudaGetDevice(&saved));
  if (s == SC_OK) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0; // as nccl_create: no thread ever waits inside NCCL
    s = CU_CHECK(e, cudaSetDevice(k->gpu));
    if (s == SC_OK)
      s = NCCL_CHECK_NB(e, NULL,
                        ncclCommInitRankConfig(&k->nccl, g->n_ranks, b->id, g->self, &cfg));
    cuda_err e_dev = {{0}};
    sc_status s_dev = CU_CHECK(&e_dev, cudaSetDevice(saved));
    if (s == SC_OK && s_dev != SC_OK) {
      s = s_dev;
      *e = e_dev;
    }
  }
  free(b);
  return nccl_init_settle(g, s, e);
}

// Finalizes (in one group, polled within the deadline) and destroys every communicator of a
// healthy group. Returns SC_OK with every handle NULL, or the failure (handles left for the
// caller to abort).
static sc_status nccl_finalize(comm_cuda_group *g) {
  cuda_err e = {{0}};
  SC_TRY(NCCL_CHECK(&e, ncclGroupStart()));
  sc_status s = SC_OK;
  for (int r = 0; r < g->n_ranks && s == SC_OK; r++)
    if (g->ranks[r].nccl) // none in another process's slot
      s = NCCL_CHECK_NB(&e, NULL, ncclCommFinalize(g->ranks[r].nccl));
  sc_status s_end = NCCL_CHECK_NB(&e, NULL, ncclGroupEnd());
  if (s == SC_OK) s = s_end;
  if (s == SC_OK) s = nccl_settle_all(g, "ncclCommFinalize", &e);
  if (s != SC_OK) return s;
  for (int r = 0; r < g->n_ranks; r++) { // local now: nothing is in flight
    if (!g->ranks[r].nccl) continue;
    (void)NCCL_CHECK(&e, ncclCommDestroy(g->ranks[r].nccl));
    g->ranks[r].nccl = NULL;
  }
  return SC_OK;
}

// Releases the communicators at free: waits for an abort in progress; on a healthy group
// finalizes and destroys them, aborting them when that fails; after an abort, nothing.
static void nccl_release(comm_cuda_group *g) {
  pthread_mutex_lock(&g->nccl_life_mu);
  if (!atomic_exchange(&g->nccl_gone, true)) {
    bool any = false;
    for (int r = 0; r < g->n_ranks; r++) any |= g->ranks[r].nccl != NULL;
    if (any && (group_state(g) != SC_OK || nccl_finalize(g) != SC_OK)) nccl_abort_comms(g);
  }
  pthread_mutex_unlock(&g->nccl_life_mu);
}

// --- nccl: vtable

typedef enum nccl_kind { NK_ALLREDUCE, NK_ALLGATHER, NK_SEND, NK_RECV } nccl_kind;

// One NCCL operation of a rank.
typedef struct nccl_op {
  nccl_kind kind;
  const void *src;  // device: allreduce/allgather/send source
  void *dst;        // device: allreduce/allgather/recv destination
  size_t count;     // elements (floats; bytes for send/recv)
  int peer;         // send/recv
  double wire;      // bytes on the link (link faults)
  bool delay;       // whether this side sleeps the link fault
  const char *what; // the NCCL call, for texts
} nccl_op;

// Enqueues op on the rank's stream (under the rank's lock; returns at once, possibly still in
// progress). On failure the group is broken and that status comes back.
static sc_status nccl_enqueue(cuda_rank *k, const nccl_op *op) {
  SC_TRY(nccl_hold(k));
  cuda_err e = {{0}};
  sc_status s = SC_OK;
  switch (op->kind) {
  case NK_ALLREDUCE:
    s = NCCL_CHECK_NB(
        &e, NULL,
        ncclAllReduce(op->src, op->dst, op->count, ncclFloat, ncclSum, k->nccl, k->stream));
    break;
  case NK_ALLGATHER:
    s = NCCL_CHECK_NB(&e, NULL,
                      ncclAllGather(op->src, op->dst, op->count, ncclFloat, k->nccl, k->stream));
    break;
  case NK_SEND:
    s = NCCL_CHECK_NB(&e, NULL,
                      ncclSend(op->src, op->count, ncclUint8, op->peer, k->nccl, k->stream));
    break;
  case NK_RECV:
    s = NCCL_CHECK_NB(&e, NULL,
                      ncclRecv(op->dst, op->count, ncclUint8, op->peer, k->nccl, k->stream));
    break;
  }
  pthread_mutex_unlock(&k->nccl_mu);
  return s == SC_OK ? SC_OK : group_fail(k->g, s, e.msg);
}

// Runs op to completion: after the work queued on the rank's stream, returning once its result
// is in place, the deadline, an async error or an abort.
static sc_status nccl_run(cuda_rank *k, const nccl_op *op, uint64_t deadline) {
  comm_cuda_group *g = k->g;
  SC_TRY(rank_enter(k));
  bool slow = link_slow(g);
  if (slow) SC_TRY(stream_wait(k, deadline, op->what)); // own time: this operation's only
  uint64_t t = comm_link_clock(slow);
  if (op->count) SC_TRY(nccl_enqueue(k, op));
  SC_TRY(stream_wait(k, deadline, op->what));
  if (!slow || !op->delay) return SC_OK;
  return link_delay(g, op->wire, comm_link_clock(slow) - t);
}

static sc_status nccl_allreduce_sum(void *ctx, float *buf, size_t n) {
  cuda_rank *k = ctx;
  comm_cuda_group *g = k->g;
  uint64_t deadline = call_deadline(g);
  SC_TRY(group_state(g));
  if (n && !buf) return SC_INVALID;
  if (n > SIZE_MAX / sizeof(float)) return SC_INVALID;
  nccl_op op = {.kind = NK_ALLREDUCE,
                .src = buf,
                .dst = buf,
                .count = n,
                .delay = true,
                .wire = 2.0 * (g->n_ranks - 1) / g->n_ranks * (double)n * sizeof(float),
                .what = "ncclAllReduce"};
  return nccl_run(k, &op, deadline);
}

// send may be recv + rank * n (in place, as NCCL allows).
static sc_status nccl_allgather(void *ctx, const float *send, float *recv, size_t n) {
  cuda_rank *k = ctx;
  comm_cuda_group *g = k->g;
  uint64_t deadline = call_deadline(g);
  SC_TRY(group_state(g));
  if (n && (!send || !recv)) return SC_INVALID;
  if (n > SIZE_MAX / sizeof(float) / (size_t)g->n_ranks) return SC_INVALID;
  nccl_op op = {.kind = NK_ALLGATHER,
                .src = send,
                .dst = recv,
                .count = n,
                .delay = true,
                .wire = (double)(g->n_ranks - 1) * (double)n * sizeof(float),
                .what = "ncclAllGather"};
  return nccl_run(k, &op, deadline);
}

// One point-to-point transfer of bytes with peer: the send (src) or the receive (dst). Returns
// once it is complete (NCCL's send waits for its receiver); the link fault's delay falls on the
// receiver.
static sc_status nccl_p2p(cuda_rank *k, nccl_kind kind, const void *src, void *dst, size_t bytes,
                          int peer) {
  comm_cuda_group *g = k->g;
  uint64_t deadline = call_deadline(g);
  SC_TRY(group_state(g));
  const void *buf = kind == NK_SEND ? src : dst;
  if (peer < 0 || peer >= g->n_ranks || peer == k->c.rank || (bytes && !buf)) return SC_INVALID;
  nccl_op op = {.kind = kind,
                .src = src,
                .dst = dst,
                .count = bytes,
                .peer = peer,
                .delay = kind == NK_RECV,
                .wire = (double)bytes,
                .what = kind == NK_SEND ? "ncclSend" : "ncclRecv"};
  return nccl_run(k, &op, deadline);
}

static sc_status nccl_send(void *ctx, const void *buf, size_t bytes, int peer) {
  return nccl_p2p(ctx, NK_SEND, buf, NULL, bytes, peer);
}

static sc_status nccl_recv(void *ctx, void *buf, size_t bytes, int peer) {
  return nccl_p2p(ctx, NK_RECV, NULL, buf, bytes, peer);
}

static sc_status nccl_barrier(void *ctx) {
  cuda_rank *k = ctx;
  comm_cuda_group *g = k->g;
  uint64_t deadline = call_deadline(g);
  SC_TRY(group_state(g));
  // An all-reduce of one float through a device scratch of this rank's: NCCL has no barrier.
  SC_TRY(rank_enter(k));
  if (!k->scratch) {
    cuda_err e = {{0}};
    void *p = NULL;
    sc_status s = CU_CHECK(&e, cudaMalloc(&p, sizeof(float)));
    if (s != SC_OK) return group_fail(g, s, e.msg);
    k->scratch = p;
    k->scratch_cap = 1;
  }
  nccl_op op = {.kind = NK_ALLREDUCE,
                .src = k->scratch,
                .dst = k->scratch,
                .count = 1,
                .delay = false,
                .what = "ncclAllReduce (barrier)"};
  return nccl_run(k, &op, deadline);
}

// The group's state, and an asynchronous error of this rank's communicator (which breaks the
// group and aborts every communicator): an engine watchdog may call it from any thread.
static sc_status nccl_poll_error(void *ctx) {
  cuda_rank *k = ctx;
  SC_TRY(group_state(k->g));
  bool settled = true;
  return nccl_poll(k, &settled);
}

static const comm_i nccl_comm_i = {
    .name = "nccl",
    .allreduce_sum = nccl_allreduce_sum,
    .allgather = nccl_allgather,
    .send = nccl_send,
    .recv = nccl_recv,
    .barrier = nccl_barrier,
    .poll_error = nccl_poll_error,
    .abort = cc_abort,
};

// --- group lifecycle

// Picks the transport from the ranks' GPUs: one GPU -> loopback, one each -> nccl. Returns
// SC_OK, or SC_INVALID with the reason in err.
static sc_status pick_transport(int n_ranks, device *const *devs, cc_transport *t, sc_error *err) {
  for (int r = 0; r < n_ranks; r++) {
    if (!devs[r]) return sc_fail(err, SC_INVALID, "comm_cuda_group_new: rank %d has no device", r);
    if (cuda_device_gpu(devs[r]) < 0)
      return sc_fail(err, SC_INVALID,
                     "comm_cuda_group_new: rank %d's device is %s, not a cuda device", r,
                     device_name(devs[r]));
  }
  int a = -1, b = -1; // the first two ranks that share a GPU
  bool one_gpu = true;
  for (int r = 0; r < n_ranks; r++) {
    int gr = cuda_device_gpu(devs[r]);
    one_gpu &= gr == cuda_device_gpu(devs[0]);
    for (int q = r + 1; q < n_ranks && a < 0; q++)
      if (cuda_device_gpu(devs[q]) == gr) a = r, b = q;
  }
  if (one_gpu) {
    if (n_ranks > SCK_SUM_MAX)
      return sc_fail(err, SC_INVALID,
                     "comm_cuda_group_new: %d ranks on GPU %d; loopback takes at most %d", n_ranks,
                     cuda_device_gpu(devs[0]), SCK_SUM_MAX);
    *t = CC_LOOPBACK;
    return SC_OK;
  }
  if (a < 0) {
    *t = CC_NCCL;
    return SC_OK;
  }
  int ga = cuda_device_gpu(devs[a]), c = 0;
  while (cuda_device_gpu(devs[c]) == ga) c++; // exists: not every rank is on ga
  return sc_fail(err, SC_INVALID,
                 "comm_cuda_group_new: ranks %d and %d share GPU %d but rank %d is on GPU %d: "
                 "a cuda group needs every rank on one GPU (loopback) or each on a GPU of its "
                 "own (nccl)",
                 a, b, ga, c, cuda_device_gpu(devs[c]));
}

static sc_status cond_init_monotonic(pthread_cond_t *cv) {
  pthread_condattr_t a;
  if (pthread_condattr_init(&a)) return SC_OOM;
  int rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  if (!rc) rc = pthread_cond_init(cv, &a);
  pthread_condattr_destroy(&a);
  return rc ? SC_OOM : SC_OK;
}

// Tears down whatever comm_cuda_group_new managed to build (g->built_* say how much). No rank
// may be inside a call.
static void group_destroy(comm_cuda_group *g) {
  if (g->transport == CC_NCCL && g->built_life_mu && g->built_rank_mu == g->n_ranks)
    nccl_release(g);
  int saved = -1;
  cuda_err e = {{0}};
  for (int r = 0; g->ranks && r < g->n_ranks; r++) {
    cuda_rank *k = &g->ranks[r];
    if (!k->scratch) continue;
    if (saved < 0 && CU_CHECK(&e, cudaGetDevice(&saved)) != SC_OK) saved = 0;
    (void)CU_CHECK(&e, cudaSetDevice(k->gpu));
    (void)CU_CHECK(&e, cudaFree(k->scratch)); // waits for the peers' copies still queued
    k->scratch = NULL;
  }
  if (saved >= 0) (void)CU_CHECK(&e, cudaSetDevice(saved));
  comm_shm_group_free(g->shm);
  for (int r = 0; r < g->built_rank_mu; r++) pthread_mutex_destroy(&g->ranks[r].nccl_mu);
  if (g->built_life_mu) pthread_mutex_destroy(&g->nccl_life_mu);
  if (g->built_link) comm_link_destroy(&g->link);
  if (g->built_wake_cv) pthread_cond_destroy(&g->wake_cv);
  if (g->built_wake_mu) pthread_mutex_destroy(&g->wake_mu);
  if (g->built_err_mu) pthread_mutex_destroy(&g->err_mu);
  free(g->ranks);
  free(g);
}

// A group of n_ranks endpoints on transport t, everything built but the ranks' devices and the
// transport itself; self as in the group. NULL when host memory runs out (nothing left).
static comm_cuda_group *group_alloc(cc_transport t, int n_ranks, int self, uint64_t deadline_ns) {
  comm_cuda_group *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  g->transport = t;
  g->n_ranks = n_ranks;
  g->self = self;
  g->deadline_ns = deadline_ns ? deadline_ns : CC_DEFAULT_DEADLINE_NS;
  atomic_init(&g->aborted, false);
  atomic_init(&g->broken, SC_OK);
  atomic_init(&g->nccl_gone, false);
  size_t ranks_bytes = sizeof(cuda_rank) * (size_t)n_ranks; // a multiple of its 64 B alignment
  g->ranks = aligned_alloc(alignof(cuda_rank), ranks_bytes);
  if (!g->ranks) goto oom;
  memset(g->ranks, 0, ranks_bytes);
  if (pthread_mutex_init(&g->err_mu, NULL)) goto oom;
  g->built_err_mu = true;
  if (pthread_mutex_init(&g->wake_mu, NULL)) goto oom;
  g->built_wake_mu = true;
  if (cond_init_monotonic(&g->wake_cv) != SC_OK) goto oom;
  g->built_wake_cv = true;
  if (comm_link_init(&g->link)) goto oom;
  g->built_link = true;
  if (pthread_mutex_init(&g->nccl_life_mu, NULL)) goto oom;
  g->built_life_mu = true;
  for (int r = 0; r < n_ranks; r++) {
    cuda_rank *k = &g->ranks[r];
    k->c = (comm){
        .i = t == CC_LOOPBACK ? &lb_comm_i : &nccl_comm_i, .ctx = k, .rank = r, .n_ranks = n_ranks};
    k->g = g;
    k->gpu = -1; // another process's, until a device is set
    if (pthread_mutex_init(&k->nccl_mu, NULL)) goto oom;
    g->built_rank_mu++;
  }
  return g;
oom:
  group_destroy(g);
  return NULL;
}

static void rank_set_device(cuda_rank *k, device *dev) {
  k->dev = dev;
  k->gpu = cuda_device_gpu(dev);
  k->stream = cuda_device_stream(dev);
}

// Returns SC_OK and *out; or, with *out NULL, nothing left allocated and the reason in err:
// SC_INVALID (out or devs NULL, n_ranks outside 1..CC_MAX_RANKS, a device that is not cuda, a
// mix of shared and own GPUs, more than SCK_SUM_MAX ranks on one GPU), SC_OOM, or the failure
// of NCCL's setup (SC_DEVICE, SC_TIMEOUT past the deadline). deadline_ns 0 means 60 s.
sc_status comm_cuda_group_new(int n_ranks, device *const *devs, uint64_t deadline_ns,
                              comm_cuda_group **out, sc_error *err) {
  if (!out) return sc_fail(err, SC_INVALID, "comm_cuda_group_new: out is NULL");
  *out = NULL;
  if (n_ranks < 1 || n_ranks > CC_MAX_RANKS || !devs)
    return sc_fail(err, SC_INVALID, "comm_cuda_group_new: n_ranks %d (1..%d) and %d devices",
                   n_ranks, CC_MAX_RANKS, devs ? n_ranks : 0);
  cc_transport t = CC_LOOPBACK;
  SC_TRY(pick_transport(n_ranks, devs, &t, err));

  comm_cuda_group *g = group_alloc(t, n_ranks, -1, deadline_ns);
  if (!g) return sc_fail(err, SC_OOM, "comm_cuda_group_new: out of host memory");
  for (int r = 0; r < n_ranks; r++) rank_set_device(&g->ranks[r], devs[r]);

  if (t == CC_LOOPBACK) {
    sc_status s = comm_shm_group_new(n_ranks, g->deadline_ns, &g->shm);
    if (s != SC_OK) {
      group_destroy(g);
      return sc_fail(err, s, "comm_cuda_group_new: the host meeting of %d ranks: %s", n_ranks,
                     sc_status_name(s));
    }
    for (int r = 0; r < n_ranks; r++) g->ranks[r].shm = comm_shm_group_rank(g->shm, r);
  } else {
    cuda_err e = {{0}};
    sc_status s = nccl_create(g, &e);
    if (s != SC_OK) {
      group_destroy(g);
      return sc_fail(err, s, "comm_cuda_group_new: %s", e.msg);
    }
  }
  *out = g;
  return SC_OK;
}

sc_status comm_cuda_group_new_member(int n_ranks, int self, device *dev, uint64_t deadline_ns,
                                     comm_cuda_bcast_fn bcast, void *ud, comm_cuda_group **out,
                                     sc_error *err) {
  if (!out) return sc_fail(err, SC_INVALID, "comm_cuda_group_new_member: out is NULL");
  *out = NULL;
  if (n_ranks < 1 || n_ranks > CC_MAX_RANKS || self < 0 || self >= n_ranks || !bcast)
    return sc_fail(err, SC_INVALID,
                   "comm_cuda_group_new_member: rank %d of %d ranks (1..%d), bcast %s", self,
                   n_ranks, CC_MAX_RANKS, bcast ? "set" : "NULL");
  // a member that cannot take part still broadcasts (rank 0) or takes rank 0's broadcast, so
  // that the others are not left waiting for it
  const char *bad = !dev                     ? "has no device"
                    : cuda_device_gpu(dev) < 0 ? "is on a device that is not cuda"
                                               : NULL;
  comm_cuda_group *g = bad ? NULL : group_alloc(CC_NCCL, n_ranks, self, deadline_ns);
  if (bad || !g) {
    member_boot *b = calloc(1, sizeof *b);
    if (b) {
      snprintf(b->why, sizeof b->why, "rank %d %s", self, bad ? bad : "is out of host memory");
      sc_error be = {{0}};
      (void)bcast(ud, b, sizeof *b, &be);
      free(b);
    }
    if (bad)
      return sc_fail(err, SC_INVALID, "comm_cuda_group_new_member: rank %d %s", self, bad);
    return sc_fail(err, SC_OOM, "comm_cuda_group_new_member: out of host memory");
  }
  rank_set_device(&g->ranks[self], dev);
  cuda_err e = {{0}};
  sc_status s = nccl_create_member(g, bcast, ud, &e);
  if (s != SC_OK) {
    group_destroy(g);
    return sc_fail(err, s, "comm_cuda_group_new_member: rank %d of %d: %s", self, n_ranks, e.msg);
  }
  *out = g;
  return SC_OK;
}

int comm_cuda_group_self(const comm_cuda_group *g) { return g ? g->self : -1; }

comm *comm_cuda_group_rank(comm_cuda_group *g, int r) {
  if (!g || r < 0 || r >= g->n_ranks || (g->self >= 0 && r != g->self)) return NULL;
  return &g->ranks[r].c;
}

const char *comm_cuda_group_transport(const comm_cuda_group *g) {
  if (!g) return "";
  return g->transport == CC_LOOPBACK ? "loopback" : "nccl";
}

// Same as comm_abort on any endpoint: idempotent, any thread. On nccl the calling thread
// aborts every communicator (unless a failure already did).
void comm_cuda_group_abort(comm_cuda_group *g) { group_abort(g); }

// No rank may be inside a call. Waits for an abort in progress on another thread.
void comm_cuda_group_free(comm_cuda_group *g) {
  if (g) group_destroy(g);
}

void comm_cuda_group_set_slow(comm_cuda_group *g, double factor, uint64_t latency_ns,
                              double bandwidth) {
  if (g) comm_link_set(&g->link, factor, latency_ns, bandwidth);
}

// The text is written once, before err_set; it is never changed afterwards, so the pointer
// stays valid and unchanging until the group is freed.
const char *comm_cuda_group_error(comm_cuda_group *g) {
  if (!g) return "";
  pthread_mutex_lock(&g->err_mu);
  bool set = g->err_set;
  pthread_mutex_unlock(&g->err_mu);
  return set ? g->err : "";
}
