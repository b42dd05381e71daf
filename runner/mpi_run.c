// The runner's MPI pieces (docs/scaling-out.md): what a scenario whose replicas are MPI jobs
// (router.isolation mpi) needs of this host before anything runs. The replicas themselves are
// process replicas started through the MPI launcher (serving/replica_mpi.c).
#include <jansson.h>

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

void rn_clients_config(const runner_options *o, void *conf) {
  if (o->n_clients <= 1 || !o->clients) return;
  json_t *a = json_array();
  for (int k = 0; k < o->n_clients; k++) {
    const replica_client_rank *c = &o->clients[k];
    json_array_append_new(a, json_pack("{s:i, s:s, s:I, s:I}", "rank", c->rank, "host", c->host,
                                       "offset_ns", (json_int_t)c->offset_ns, "rtt_ns",
                                       (json_int_t)c->rtt_ns));
  }
  json_object_set_new((json_t *)conf, "clients", a);
}
