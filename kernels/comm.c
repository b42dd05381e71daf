// The communicator registry (kernels/comm.h, registry section): maps a device backend to the
// communicator that moves its buffers, and wraps each backend's group in one comm_group
// behind a small vtable, so that callers never name a backend's own group type.
//
// What it leaves to others: the collectives themselves (kernels/comm_shm.c; kernels/comm_mpi.c;
// the cuda group in kernels/cuda/comm_cuda.c, reached through the table of the backend's
// library, kernels/cuda_api.h) and the device registry (kernels/device.c). Optional backends are CMake
// options plus this one place (docs/design.md).
#include "kernels/comm.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/mpi.h"

#ifdef SHARDCHECK_HAVE_CUDA
#include "kernels/cuda_api.h"
#endif

// --- the handle

// One backend's group, as comm_group sees it; every slot takes that backend's group.
typedef struct comm_group_i {
  const char *name; // the communicator: "shm", "cuda"
  comm *(*rank)(void *g, int r);
  void (*abort)(void *g);
  void (*free)(void *g);
  void (*set_slow)(void *g, double factor, uint64_t latency_ns, double bandwidth);
  const char *(*error)(void *g); // optional (NULL: the backend keeps no failure text)
  int (*self)(const void *g);     // optional (NULL: every rank is here; -1)
  void (*watch)(void *g, void *world); // optional (NULL: no alarms); world: the same backend's
} comm_group_i;

struct comm_group {
  const comm_group_i *iface; // static storage, not owned
  void *g;                   // the backend's group, freed by iface->free
};

// --- shm

static comm *shm_rank(void *g, int r) { return comm_shm_group_rank(g, r); }
static void shm_abort(void *g) { comm_shm_group_abort(g); }
static void shm_free(void *g) { comm_shm_group_free(g); }
static void shm_set_slow(void *g, double factor, uint64_t latency_ns, double bandwidth) {
  comm_shm_group_set_slow(g, factor, latency_ns, bandwidth);
}

static const comm_group_i shm_iface = {
    .name = "shm",
    .rank = shm_rank,
    .abort = shm_abort,
    .free = shm_free,
    .set_slow = shm_set_slow,
};

static sc_status shm_open(int n_ranks, uint64_t deadline_ns, void **out, sc_error *err) {
  comm_shm_group *g = NULL;
  sc_status s = comm_shm_group_new(n_ranks, deadline_ns, &g);
  if (s != SC_OK) return sc_fail(err, s, "comm: cannot create a communicator");
  *out = g;
  return SC_OK;
}

// --- mpi (ranks are processes)

static comm *mpi_rank(void *g, int r) { return comm_mpi_group_rank(g, r); }
static void mpi_abort(void *g) { comm_mpi_group_abort(g); }
static void mpi_free(void *g) { comm_mpi_group_free(g); }
static void mpi_set_slow(void *g, double factor, uint64_t latency_ns, double bandwidth) {
  comm_mpi_group_set_slow(g, factor, latency_ns, bandwidth);
}
static const char *mpi_error(void *g) { return comm_mpi_group_error(g); }
static int mpi_self(const void *g) { return comm_mpi_group_self(g); }
static void mpi_watch(void *g, void *world) { comm_mpi_group_watch(g, world); }

static const comm_group_i mpi_iface = {
    .name = "mpi",
    .rank = mpi_rank,
    .abort = mpi_abort,
    .free = mpi_free,
    .set_slow = mpi_set_slow,
    .error = mpi_error,
    .self = mpi_self,
    .watch = mpi_watch,
};

// --- cuda (the backend's library is loaded: its devices were opened through it)

#ifdef SHARDCHECK_HAVE_CUDA
enum { CUDA_GROUP_MAX_RANKS = 16 }; // ranks of one cuda group (a TP or PP degree)

static comm *cuda_rank(void *g, int r) { return cuda_api_get(NULL)->group_rank(g, r); }
static void cuda_abort(void *g) { cuda_api_get(NULL)->group_abort(g); }
static void cuda_free(void *g) { cuda_api_get(NULL)->group_free(g); }
static void cuda_set_slow(void *g, double factor, uint64_t latency_ns, double bandwidth) {
  cuda_api_get(NULL)->group_set_slow(g, factor, latency_ns, bandwidth);
}
static const char *cuda_error(void *g) { return cuda_api_get(NULL)->group_error(g); }
// -1 for a group whose ranks are all threads here; the one rank this process holds over MPI
static int cuda_self(const void *g) { return cuda_api_get(NULL)->group_self(g); }

// One table for both set-ups: in one process, and one rank per process over MPI.
static const comm_group_i cuda_iface = {
    .name = "cuda",
    .rank = cuda_rank,
    .abort = cuda_abort,
    .free = cuda_free,
    .set_slow = cuda_set_slow,
    .error = cuda_error,
    .self = cuda_self,
};

static sc_status cuda_open(int n_ranks, device *const *devs, uint64_t deadline_ns, void **out,
                           sc_error *err) {
  if (n_ranks > CUDA_GROUP_MAX_RANKS)
    return sc_fail(err, SC_INVALID, "comm: at most %d ranks in one cuda group",
                   CUDA_GROUP_MAX_RANKS);
  const cuda_api *cu = cuda_api_get(err);
  if (!cu) return SC_INVALID;
  comm_cuda_group *g = NULL;
  SC_TRY(cu->group_new(n_ranks, devs, deadline_ns, &g, err));
  *out = g;
  return SC_OK;
}
#endif

// --- cuda over MPI: one rank per process, NCCL's unique id broadcast over MPI

#ifdef SHARDCHECK_HAVE_CUDA
// The members' host communicator (an mpi group of the same members) that carries NCCL's
// unique id: group rank 0 sends it to every other member, which receives it.
typedef struct id_bcast {
  comm *c; // this process's endpoint of the mpi group
} id_bcast;

static sc_status bcast_over_mpi(void *ud, void *buf, size_t n, sc_error *err) {
  comm *c = ((id_bcast *)ud)->c;
  sc_status s = SC_OK;
  if (c->rank == 0)
    for (int r = 1; r < c->n_ranks && s == SC_OK; r++) s = comm_send(c, buf, n, r);
  else
    s = comm_recv(c, buf, n, 0);
  return s == SC_OK ? SC_OK : sc_fail(err, s, "over MPI: %s", sc_status_name(s));
}

static sc_status cuda_mpi_open(int n, const int *members, device *dev, uint64_t deadline_ns,
                               const comm_group_i **iface, void **out, sc_error *err) {
  const cuda_api *cu = cuda_api_get(err);
  if (!cu) return SC_INVALID;
  comm_mpi_group *mg = NULL; // collective over the members, as the cuda group after it
  SC_TRY(comm_mpi_group_new(n, members, deadline_ns, &mg, err));
  id_bcast b = {.c = comm_mpi_group_rank(mg, comm_mpi_group_self(mg))};
  comm_cuda_group *g = NULL;
  sc_status s = cu->group_new_member(n, comm_mpi_group_self(mg), dev, deadline_ns,
                                     bcast_over_mpi, &b, &g, err);
  comm_mpi_group_free(mg); // the id has reached every member (or the group failed)
  if (s != SC_OK) return s;
  *iface = &cuda_iface;
  *out = g;
  return SC_OK;
}
#else
static sc_status cuda_mpi_open(int n, const int *members, device *dev, uint64_t deadline_ns,
                               const comm_group_i **iface, void **out, sc_error *err) {
  return sc_fail(err, SC_INVALID, "comm: backend cuda is not built in");
}
#endif

// --- registry

sc_status comm_group_open(const char *backend, int n_ranks, device *const *devs,
                          uint64_t deadline_ns, comm_group **out, sc_error *err) {
  if (!out) return sc_fail(err, SC_INVALID, "comm_group_open: out is NULL");
  *out = NULL;
  if (!backend) return sc_fail(err, SC_INVALID, "comm_group_open: backend name is NULL");
  comm_group *cg = calloc(1, sizeof *cg);
  if (!cg) return sc_fail(err, SC_OOM, "comm: out of memory");
  sc_status s;
  if (strcmp(backend, "cuda") != 0) { // cpu: buffers are host memory
    cg->iface = &shm_iface;
    s = shm_open(n_ranks, deadline_ns, &cg->g, err);
  } else {
#ifdef SHARDCHECK_HAVE_CUDA
    cg->iface = &cuda_iface;
    s = cuda_open(n_ranks, devs, deadline_ns, &cg->g, err);
#else
    s = sc_fail(err, SC_INVALID, "comm: backend cuda is not built in");
#endif
  }
  if (s != SC_OK) {
    free(cg);
    return s;
  }
  *out = cg;
  return SC_OK;
}

comm *comm_group_rank(comm_group *g, int r) { return g->iface->rank(g->g, r); }

void comm_group_abort(comm_group *g) {
  if (g) g->iface->abort(g->g);
}

void comm_group_free(comm_group *g) {
  if (!g) return;
  g->iface->free(g->g);
  free(g);
}

void comm_group_set_slow(comm_group *g, double factor, uint64_t latency_ns, double bandwidth) {
  if (g) g->iface->set_slow(g->g, factor, latency_ns, bandwidth);
}

const char *comm_group_error(comm_group *g) {
  return g && g->iface->error ? g->iface->error(g->g) : "";
}

sc_status comm_group_open_mpi(const char *backend, int n, const int *members, device *dev,
                              uint64_t deadline_ns, comm_group **out, sc_error *err) {
  if (!out) return sc_fail(err, SC_INVALID, "comm_group_open_mpi: out is NULL");
  *out = NULL;
  if (!backend) return sc_fail(err, SC_INVALID, "comm_group_open_mpi: backend name is NULL");
  comm_group *cg = calloc(1, sizeof *cg);
  if (!cg) return sc_fail(err, SC_OOM, "comm: out of memory");
  sc_status s;
  if (strcmp(backend, "cuda") != 0) { // cpu: host buffers over MPI
    comm_mpi_group *g = NULL;
    cg->iface = &mpi_iface;
    s = comm_mpi_group_new(n, members, deadline_ns, &g, err);
    cg->g = g;
  } else {
    s = cuda_mpi_open(n, members, dev, deadline_ns, &cg->iface, &cg->g, err);
  }
  if (s != SC_OK) {
    free(cg);
    return s;
  }
  *out = cg;
  return SC_OK;
}

int comm_group_self(const comm_group *g) {
  return g && g->iface->self ? g->iface->self(g->g) : -1;
}

void comm_group_watch(comm_group *g, comm_group *world) {
  if (g && world && g->iface->watch && g->iface == world->iface) g->iface->watch(g->g, world->g);
}
