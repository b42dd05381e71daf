// The communicator seam: collectives among the ranks of one group, with deadlines and abort.
//
// Backends: shm (ranks are threads in one process; kernels/comm_shm.c), cuda (loopback on one
// GPU or NCCL; kernels/cuda/comm_cuda.c, below) and mpi (ranks are processes of an MPI job;
// kernels/comm_mpi.c, declared in kernels/mpi.h). Sim mode prices collectives instead
// (kernels/sim/).
// A comm is one rank's endpoint. Every blocking call returns SC_TIMEOUT once the group's
// deadline has passed since the call began, and SC_ABORTED (within 100 ms) once any thread
// has called comm_abort on any endpoint of the group; after an abort every later call on the
// group returns SC_ABORTED at once. Buffers are host memory for shm.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "kernels/status.h"

typedef struct comm_i {
  const char *name;
  sc_status (*allreduce_sum)(void *ctx, float *buf, size_t n);          // in place
  sc_status (*allgather)(void *ctx, const float *send, float *recv, size_t n); // recv: n_ranks*n, rank order
  sc_status (*send)(void *ctx, const void *buf, size_t bytes, int peer);
  sc_status (*recv)(void *ctx, void *buf, size_t bytes, int peer);
  sc_status (*barrier)(void *ctx);
  sc_status (*poll_error)(void *ctx); // SC_OK, or the status that broke the group
  void (*abort)(void *ctx);           // idempotent; callable from any thread
} comm_i;

typedef struct comm {
  const comm_i *i;
  void *ctx;
  int rank;
  int n_ranks;
} comm;

static inline sc_status comm_allreduce_sum(comm *c, float *buf, size_t n) {
  return c->i->allreduce_sum(c->ctx, buf, n);
}
static inline sc_status comm_allgather(comm *c, const float *send, float *recv, size_t n) {
  return c->i->allgather(c->ctx, send, recv, n);
}
static inline sc_status comm_send(comm *c, const void *buf, size_t bytes, int peer) {
  return c->i->send(c->ctx, buf, bytes, peer);
}
static inline sc_status comm_recv(comm *c, void *buf, size_t bytes, int peer) {
  return c->i->recv(c->ctx, buf, bytes, peer);
}
static inline sc_status comm_barrier(comm *c) { return c->i->barrier(c->ctx); }
static inline sc_status comm_poll_error(comm *c) { return c->i->poll_error(c->ctx); }
static inline void comm_abort(comm *c) { c->i->abort(c->ctx); }

// --- shm backend: n_ranks threads of one process share a group.
typedef struct comm_shm_group comm_shm_group;

// deadline_ns: how long one blocking call may wait (0 = 60 s). On error *out is NULL.
sc_status comm_shm_group_new(int n_ranks, uint64_t deadline_ns, comm_shm_group **out);
// The endpoint of rank r (0 <= r < n_ranks), owned by the group.
comm *comm_shm_group_rank(comm_shm_group *g, int r);
void comm_shm_group_abort(comm_shm_group *g); // same as comm_abort on any endpoint
void comm_shm_group_free(comm_shm_group *g);  // NULL is a no-op; no rank may be inside a call
// Fault hook (a throttled link): every later transfer of the group takes factor x its time
// (factor > 1), plus latency_ns, and moves at most bandwidth bytes/s (0: no cap). All zero or
// factor <= 1 with no latency and no cap: back to normal. Thread-safe.
void comm_shm_group_set_slow(comm_shm_group *g, double factor, uint64_t latency_ns,
                             double bandwidth);

// --- cuda backend (builds with SHARDCHECK_HAVE_CUDA; kernels/cuda/comm_cuda.c): the ranks of a
// group are threads of one process, each driving its own `device` of backend "cuda", and every
// buffer is device memory of the calling rank's device. Each call first orders itself after
// the work already queued on the rank's stream, and returns once its result is in place.
// Two transports, chosen by where the ranks' devices are:
//   loopback: every rank on ONE GPU (each its own stream): device-to-device copies and a
//     reduction kernel, meeting at a host barrier (NCCL refuses two ranks on one GPU);
//   nccl:     every rank on a GPU of its own: one non-blocking NCCL communicator per rank;
//     a waiting rank polls its deadline and NCCL's asynchronous error, and the first to see
//     either aborts every rank's communicator (ncclCommAbort), so no survivor spins for ever.
// Sends are unbuffered (a send returns once its peer has received it, as with NCCL).
// Any other mix (some ranks sharing a GPU, others not) is refused with SC_INVALID.
typedef struct comm_cuda_group comm_cuda_group;
typedef struct device device; // kernels/device.h

// devs: (n_ranks) the ranks' devices, all of backend "cuda" and owned by the caller (they must
// outlive the group). deadline_ns as comm_shm_group_new. On error fills err, *out is NULL.
sc_status comm_cuda_group_new(int n_ranks, device *const *devs, uint64_t deadline_ns,
                              comm_cuda_group **out, sc_error *err);
comm *comm_cuda_group_rank(comm_cuda_group *g, int r);
const char *comm_cuda_group_transport(const comm_cuda_group *g); // "loopback" or "nccl"
void comm_cuda_group_abort(comm_cuda_group *g);
void comm_cuda_group_free(comm_cuda_group *g); // NULL is a no-op
// The link fault of comm_shm_group_set_slow, with the same meaning and arithmetic.
void comm_cuda_group_set_slow(comm_cuda_group *g, double factor, uint64_t latency_ns,
                              double bandwidth);
// The text of the failure that broke the group (the call, file, line and library message of
// the CUDA/NCCL error, or the deadline), or "" while it is not broken.
const char *comm_cuda_group_error(comm_cuda_group *g);
// Ranks as processes (kernels/comm.c opens these for comm_group_open_mpi with backend cuda):
// a broadcast among a group's member processes, moving n bytes from group rank 0's buf into
// every other member's buf. Collective over the members; SC_OK, or the failure in err.
typedef sc_status (*comm_cuda_bcast_fn)(void *ud, void *buf, size_t n, sc_error *err);
// This process's endpoint of a group of n_ranks processes, this one rank `self` on its device
// dev (cuda, a GPU of its own: NCCL refuses two ranks of one communicator on one GPU). Always
// nccl: group rank 0 makes NCCL's unique id, bcast(ud, ...) carries it to every member, and each
// creates its own communicator, as nccl-tests bootstrap over MPI. Collective over the members;
// every member calls bcast once, also when its own part fails (so none waits for it).
// comm_cuda_group_rank gives NULL for every rank but self. deadline_ns as comm_cuda_group_new.
sc_status comm_cuda_group_new_member(int n_ranks, int self, device *dev, uint64_t deadline_ns,
                                     comm_cuda_bcast_fn bcast, void *ud, comm_cuda_group **out,
                                     sc_error *err);
// The rank this process holds in a group of processes; -1 when every rank is a thread here.
int comm_cuda_group_self(const comm_cuda_group *g);

// --- registry: a group of any backend, opened by the device backend of its ranks
// (kernels/comm.c). The one place that knows which communicator serves which device backend,
// so callers (engine/executor.c) hold a comm_group and never a backend's own type.
typedef struct comm_group comm_group;

// Opens the group of n_ranks endpoints for ranks whose devices, devs (n_ranks, owned by the
// caller, outliving the group), are of device backend `backend`: "cpu" gets shm (host
// buffers); "cuda" gets the cuda group above (device buffers; the backend's library is loaded
// already once its devices are open). deadline_ns: how long one blocking call may wait (0 =
// 60 s). On error returns a status, fills err, and *out is NULL.
sc_status comm_group_open(const char *backend, int n_ranks, device *const *devs,
                          uint64_t deadline_ns, comm_group **out, sc_error *err);
// The endpoint of rank r (0 <= r < n_ranks), owned by the group.
comm *comm_group_rank(comm_group *g, int r);
void comm_group_abort(comm_group *g); // as comm_abort on any endpoint; NULL is a no-op
void comm_group_free(comm_group *g);  // NULL is a no-op; no rank may be inside a call
// The link fault of comm_shm_group_set_slow, with its meaning; NULL is a no-op.
void comm_group_set_slow(comm_group *g, double factor, uint64_t latency_ns, double bandwidth);
// The text of the failure that broke the group, or "" while it is not broken or when its
// backend keeps none (shm); "" for NULL.
const char *comm_group_error(comm_group *g);

// Ranks as processes (kernels/mpi.h): opens this process's endpoint of a group whose ranks are
// processes of the MPI job, members[0..n) their job ranks in group order, this process one of
// them with its device dev (backend `backend`, owned by the caller): "cpu" gets the mpi
// communicator (kernels/comm_mpi.c); "cuda" gets NCCL, its unique id broadcast over MPI.
// Collective over the members. comm_group_rank(g, r) is NULL for every r but comm_group_self's.
// On error returns a status, fills err, and *out is NULL.
sc_status comm_group_open_mpi(const char *backend, int n, const int *members, device *dev,
                              uint64_t deadline_ns, comm_group **out, sc_error *err);
// This process's rank in g: its own for a group of processes, -1 for one whose ranks are
// threads of this process (every endpoint is here).
int comm_group_self(const comm_group *g);
// Processes only (NULL slots elsewhere, a no-op): from now on a blocking call of g also ends,
// with SC_ABORTED, once an alarm (comm_mpi_send_alarm) is pending on `world`'s endpoint.
void comm_group_watch(comm_group *g, comm_group *world);
