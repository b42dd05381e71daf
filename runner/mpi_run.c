// The runner's MPI pieces (docs/scaling-out.md): what a scenario whose replicas are MPI jobs
// (router.isolation mpi) needs of this host before anything runs. The replicas themselves are
// process replicas started through the MPI launcher (serving/replica_mpi.c).
#include "kernels/mpi.h"
#include "runner/runner_impl.h"
#include "serving/replica_mpi.h"

sc_status rn_refuse_mpi(const scenario *s, sc_error *err) {
  if (!scenario_mpi_replicas(s)) return SC_OK;
  if (!sc_mpi_built())
    return sc_fail(err, SC_INVALID,
                   "%s: router.isolation mpi: this shardcheck was built without "
                   "MPI (configure with -DSHARDCHECK_MPI=ON; Debian: libopenmpi-dev)",
                   s->path);
  char launcher[4096];
  if (!replica_mpi_launcher(launcher, sizeof launcher))
    return sc_fail(err, SC_INVALID,
                   "%s: router.isolation mpi: no MPI launcher (mpirun or "
                   "mpiexec) on PATH; is MPI installed? (Debian: apt-get install openmpi-bin)",
                   s->path);
  for (int i = 0; i < s->n_faults; i++)
    if (s->faults[i].kind == SCN_FAULT_CLOCK_JUMP)
      return sc_fail(err, SC_INVALID,
                     "%s:%d:%d: clock_jump needs router.isolation: process (a "
                     "worker's clock is offset through libfaketime, which an MPI launcher does "
                     "not carry to its ranks)",
                     s->path, s->faults[i].line, s->faults[i].col);
  return SC_OK;
}
