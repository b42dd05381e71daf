// MPI: the processes of one job, started by a launcher (mpirun, Slurm's srun, the Kubernetes
// MPI Operator), and the communicator whose ranks are those processes (kernels/comm_mpi.c).
// docs/scaling-out.md says how shardcheck uses them; docs/design.md where they sit.
//
// MPI is an optional build, like CUDA (CMake option SHARDCHECK_MPI, Debian's libopenmpi-dev):
// only kernels/mpi.c and kernels/comm_mpi.c include <mpi.h>, and in a build without it every
// function here is there and says so (SC_INVALID, "this build has no MPI ..."), so callers need
// no #ifdef. Launch, rendezvous and collectives are MPI's own; nothing here replaces them.
//
// Threads: MPI is initialised with MPI_THREAD_MULTIPLE; a communicator's endpoint is used by
// one thread at a time, and abort is callable from any thread.
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/comm.h"
#include "kernels/status.h"

// --- the job

// Whether this build has MPI at all.
bool sc_mpi_built(void);
// Whether an MPI launcher started this process (its environment says so: Open MPI's
// OMPI_COMM_WORLD_SIZE, PMIx's PMIX_RANK, Slurm's PMI_SIZE with PMI_RANK). Read only; nothing
// is initialised.
bool sc_mpi_launched(void);
// How many processes the launcher started (OMPI_COMM_WORLD_SIZE, PMI_SIZE or SLURM_NTASKS), read
// from the environment without initialising anything: 1 when not launched, 0 when launched but
// the environment does not say.
int sc_mpi_launched_size(void);
// Initialises MPI once (MPI_THREAD_MULTIPLE); later calls return SC_OK at once. SC_INVALID with
// one line in err when the build has no MPI or the library cannot give the thread level.
sc_status sc_mpi_init(sc_error *err);
// Whether sc_mpi_init succeeded and sc_mpi_finalize has not run.
bool sc_mpi_active(void);
// This process's rank in the job and the job's size (0 and 1 while MPI is not active).
int sc_mpi_rank(void);
int sc_mpi_size(void);
// The job's processes on this host, this one included (1 while MPI is not active).
int sc_mpi_local_size(void);
// The host this rank runs on (MPI_Get_processor_name; gethostname without MPI). Static buffer.
const char *sc_mpi_host(void);
// Ends MPI (no-op when not active). Every rank calls it once it is done.
void sc_mpi_finalize(void);
// Fail-stop: ends every process of the job with `code` (MPI_Abort). Without MPI active, _exit.
_Noreturn void sc_mpi_abort(int code);

// Collectives over the whole job, each with a deadline (0: none, the wait ends only when the
// operation does) and polled without blocking inside MPI, so a wait yields its core. On
// SC_TIMEOUT the job is in an undefined state: the caller fails stop (sc_mpi_abort).
// root's bytes [0, n) to every rank's buf.
sc_status sc_mpi_bcast(void *buf, size_t n, int root, uint64_t deadline_ns, sc_error *err);
// Every rank's n bytes into root's recv (size x n bytes, rank order; other ranks' recv unused).
sc_status sc_mpi_gather(const void *send, void *recv, size_t n, int root, uint64_t deadline_ns,
                        sc_error *err);
// The largest of every rank's *v, on every rank.
sc_status sc_mpi_max_int(int *v, uint64_t deadline_ns, sc_error *err);
// Every rank's n bytes (each its own n, up to 2 GiB in all) to root: on root *out (malloc'd, the
// caller frees it) holds them in rank order and counts[0..size) each rank's n; elsewhere *out
// is NULL and counts unused (may be NULL). On error *out is NULL.
sc_status sc_mpi_gather_bytes(const void *send, size_t n, int root, void **out, size_t *counts,
                              uint64_t deadline_ns, sc_error *err);

// Messages between two ranks, outside the collectives: n bytes to rank dst on tag (>= 0),
// returning once MPI holds them (small ones at once; a large one once dst takes it).
sc_status sc_mpi_send_bytes(int dst, int tag, const void *buf, size_t n, sc_error *err);
// Takes the oldest message from src (-1: any rank) on tag (-1: any) if one is pending: SC_OK with
// *buf (malloc'd, the caller frees it), *n, *from and *tag_out (each may be NULL but buf and n);
// SC_TIMEOUT when none is. Never waits for one.
sc_status sc_mpi_try_recv_bytes(int src, int tag, void **buf, size_t *n, int *from, int *tag_out,
                                sc_error *err);

// Checks that every rank runs the same build of shardcheck (the GNU build id of the running
// executable). SC_INVALID on every rank, err one line naming the first rank that differs and
// its host, when they do not; collective.
sc_status sc_mpi_check_same_build(uint64_t deadline_ns, sc_error *err);
// This executable's GNU build id in hex ("" when it has none). Static buffer.
const char *sc_mpi_build_id(void);

// --- the mpi communicator (kernels/comm_mpi.c): one endpoint per process
//
// A group of some of the job's processes, each holding its own endpoint (comm_mpi_group_rank
// gives it; the others' are in their processes). The collectives of kernels/comm.h over MPI's
// non-blocking calls, polled with the group's deadline and abort:
//   all-reduce: each rank's slice of every rank's buffer is exchanged (MPI_Ialltoallv), summed
//     in rank order 0..n-1, and the sums gathered (MPI_Iallgatherv): the shm communicator's
//     order, so the result is the same bits as with ranks as threads, on every rank; bytes on
//     the link 2 (n - 1) / n x the buffer, as a ring all-reduce (small buffers, and any between
//     two ranks: every buffer all-gathered whole, then the same sum, in one exchange);
//   all-gather: MPI_Iallgather;
//   send/recv: buffered (the message is copied, MPI_Isend; a send never blocks), and a recv of
//     a message whose size is not `bytes` returns SC_INVALID and leaves it queued, as shm;
//   barrier: MPI_Ibarrier.
// Every call stages through buffers the group owns, so a wait abandoned at a deadline or an
// abort never leaves MPI writing into the caller's memory; such a group is broken, its
// requests are never completed, and its buffers are kept until the process ends (the job
// fails stop). The link fault (comm_shm_group_set_slow) costs the same as with shm.
typedef struct comm_mpi_group comm_mpi_group;

// Makes the group of the n processes whose job ranks are members[0..n) (group rank i is job
// rank members[i]); this process must be one of them, and every member calls it with the same
// members, in the same order of calls (MPI_Comm_create_group, collective over the members
// only). deadline_ns as comm_shm_group_new (0: 60 s). On error *out is NULL and err says why.
sc_status comm_mpi_group_new(int n, const int *members, uint64_t deadline_ns, comm_mpi_group **out,
                             sc_error *err);
// This process's endpoint when r is its group rank, else NULL.
comm *comm_mpi_group_rank(comm_mpi_group *g, int r);
int comm_mpi_group_self(const comm_mpi_group *g); // this process's group rank
void comm_mpi_group_abort(comm_mpi_group *g);     // as comm_abort; NULL is a no-op
// NULL is a no-op. A broken group's pending requests and buffers are kept (see above).
void comm_mpi_group_free(comm_mpi_group *g);
void comm_mpi_group_set_slow(comm_mpi_group *g, double factor, uint64_t latency_ns,
                             double bandwidth);
// The failure that broke the group ("deadline 0.5 s passed in all-reduce", an MPI error's
// text), or "" while it is not broken.
const char *comm_mpi_group_error(comm_mpi_group *g);

// Alarms: a short message on a tag of its own, which a peer that failed sends to the rank that
// waits for it. Once `watch` is set on g, every blocking call of g also looks (every few
// hundred polls) for an alarm pending on watch's group, and ends with SC_ABORTED when one is
// (the alarm is left queued for comm_mpi_recv_alarm). watch NULL: none.
void comm_mpi_group_watch(comm_mpi_group *g, comm_mpi_group *watch);
// Sends an alarm of `bytes` to peer over c (an endpoint of an mpi group). Never blocks.
sc_status comm_mpi_send_alarm(comm *c, const void *buf, size_t bytes, int peer);
// Takes an alarm of `bytes` from peer (-1: any) if one is pending: SC_OK with *from, or
// SC_TIMEOUT when none is. Never blocks.
sc_status comm_mpi_recv_alarm(comm *c, void *buf, size_t bytes, int peer, int *from);
// As comm_recv, but with no deadline: a rank idle until its next order, however long; it polls
// ever more slowly (up to every millisecond) and ends with SC_ABORTED on abort.
sc_status comm_mpi_recv_idle(comm *c, void *buf, size_t bytes, int peer);
