// A replica whose ranks are the processes of one MPI job: the pieces serving/replica_proc.c
// (the runner's side) and `shardcheck worker --connect` (every rank's side) use. What and why:
// serving/replica_mpi.c; the user's side: docs/scaling-out.md.
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "engine/engine.h"
#include "kernels/status.h"

// The MPI launcher on PATH (mpirun, else mpiexec) into out. False when there is none.
bool replica_mpi_launcher(char *out, size_t cap);

// The runner's socket rank 0 connects to: a directory of its own (TMPDIR/sc-mpi-XXXXXX) and
// the socket in it.
typedef struct replica_mpi_rendezvous {
  int fd; // listening (-1: none)
  char dir[96], path[104];
} replica_mpi_rendezvous;

sc_status replica_mpi_listen(replica_mpi_rendezvous *rv, sc_error *err);
// Waits up to wait_ns for rank 0 to connect: *fd the connection. Fails early when the
// launcher (the child pid) ends first; *reaped is then set (its exit collected here).
sc_status replica_mpi_accept(replica_mpi_rendezvous *rv, pid_t launcher, uint64_t wait_ns, int *fd,
                             bool *reaped, sc_error *err);
// Closes the listening socket and removes the socket and its directory.
void replica_mpi_rendezvous_end(replica_mpi_rendezvous *rv);

// The pids of the job's ranks 0..n_ranks-1 that run on this host, descendants of the launcher
// (0 for a rank not found here); the count found.
int replica_mpi_local_ranks(pid_t launcher, pid_t *pids, int n_ranks);

// `shardcheck worker --connect PATH`, on every rank of the job: the exit status.
int replica_mpi_serve(const char *path);
// Rank 0, before it builds an engine: sends every other rank the config (cfg NULL: the end,
// every other rank leaves). Collective with the other ranks' waits.
sc_status replica_mpi_lead(const engine_config *cfg, int index, uint64_t heartbeat_ns,
                           sc_error *err);
// Rank 0's worker loop (serving/replica_worker.c): replica_proc_serve over fd, each engine
// built with its ranks as the job's processes (cfg.mpi) after replica_mpi_lead. refuse: a
// reason to answer the runner's CONFIG with ERROR instead (NULL: none).
int replica_proc_serve_mpi(int fd, const char *refuse);
