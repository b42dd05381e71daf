// How fragile a simulated run's latencies are: the same scenario run twice more with every price
// of its hardware profile a few percent lower and higher (sim_hw_scale), into a scratch
// database, and each deployment's pooled mean TTFT and TPOT compared with the run's own. A
// closed loop whose phases end by request count scales exactly with the prices (sensitivity 1);
// an open loop near saturation queues, and moves several times more (docs/simulator.md).
//
// Under an MPI launcher (`mpirun -np N shardcheck run --sensitivity PCT`) the run itself and the
// two scaled runs are shared among the job's ranks as capacity shares its layouts, and rank 0
// alone stores and prints (docs/scaling-out.md).
#include <math.h>
#include <stdlib.h>
#include <sqlite3.h>
#include <string.h>

#include "kernels/mpi.h"
#include "reports/query.h"
#include "runner/runner.h"

static const char *const sens_name[2] = {"ttft_sensitivity", "tpot_sensitivity"};

// The pooled mean TTFT and TPOT of every deployment of `run` in db, by deployment index, with
// its label and id; returns how many deployments, or -1 when the query fails.
static int pooled_means(store *db, int64_t run, runner_sensitivity_row *rows, int64_t *dep_ids,
                        int cap) {
  rq_pooled_means pm[SCN_MAX_DEPLOYMENTS];
  if (cap > SCN_MAX_DEPLOYMENTS) cap = SCN_MAX_DEPLOYMENTS;
  int n = rq_pooled_means_read(store_db(db), run, pm, cap);
  for (int i = 0; i < n; i++) {
    if (dep_ids) dep_ids[i] = pm[i].dep_id;
    snprintf(rows[i].label, sizeof rows[i].label, "%s", pm[i].label);
    rows[i].base[0] = pm[i].ttft_mean_ms;
    rows[i].base[1] = pm[i].tpot_mean_ms;
  }
  return n;
}

// One scaled run's pooled means, as a rank of an MPI job sends it to rank 0 (every rank runs
// the same build: sc_mpi_check_same_build).
typedef struct side_means {
  int32_t side;   // 0: prices x (1 - frac), 1: x (1 + frac)
  int32_t status; // sc_status of the run
  int32_t n;      // deployments
  char error[512];
  runner_sensitivity_row rows[SCN_MAX_DEPLOYMENTS]; // label and base[] only
} side_means;

// Runs s with its prices x (1 -/+ frac) (side 0/1) into a scratch database and fills m with
// its pooled means, or with the failure (m->status, m->error). s->hw is restored.
static void run_side(scenario *s, double frac, int side, const runner_options *o, side_means *m) {
  memset(m, 0, sizeof *m);
  m->side = side;
  sc_error err = {{0}};
  store *scratch = NULL;
  sc_status st = store_open(":memory:", &scratch, &err);
  sim_hw saved = s->hw.sim;
  double x = side ? 1 + frac : 1 - frac;
  if (st == SC_OK) {
    sim_hw_scale(&s->hw.sim, x);
    runner_options ro = *o;
    ro.progress = RUNNER_PROGRESS_NONE;
    runner_result res;
    st = runner_run(s, scratch, &ro, &res, &err);
    if (st == SC_OK && strcmp(res.status, "complete") != 0)
      st = sc_fail(&err, SC_INVALID, "sensitivity: the run with prices x%g ended %s%s%s", x,
                   res.status, res.error[0] ? ": " : "", res.error);
    if (st == SC_OK) m->n = pooled_means(scratch, res.run_id, m->rows, NULL, SCN_MAX_DEPLOYMENTS);
    if (st == SC_OK && m->n < 0)
      st = sc_fail(&err, SC_IO, "sensitivity: reading the run with prices x%g: %s", x,
                   sqlite3_errmsg(store_db(scratch)));
  }
  s->hw.sim = saved;
  store_close(scratch);
  m->status = (int32_t)st;
  snprintf(m->error, sizeof m->error, "%s", st == SC_OK ? "" : err.msg);
}

// The MPI job's rank that runs scaled side `side` (0 or 1) of N ranks: the points are the run
// itself (point 0, rank 0's), then the two sides (points 1 and 2), point p on rank p mod N, as
// capacity shares layouts.
static int side_rank(int side, int n_ranks) { return (side + 1) % n_ranks; }

// Whether this process is one of an MPI job of several ranks that share the sensitivity runs.
static bool shared(const runner_options *o) {
  return sc_mpi_active() && sc_mpi_size() > 1 && o->n_clients <= 1;
}

// This rank's sides into *mine (malloc'd; *n of them, each run in side order). s NULL: none.
static sc_status run_share(scenario *s, double frac, const runner_options *o, side_means **mine,
                           int *n, sc_error *err) {
  *mine = NULL;
  *n = 0;
  if (!s) return SC_OK;
  side_means *m = calloc(2, sizeof *m);
  if (!m) return sc_fail(err, SC_OOM, "sensitivity: out of memory");
  for (int side = 0; side < 2; side++)
    if (!shared(o) ? true : side_rank(side, sc_mpi_size()) == sc_mpi_rank())
      run_side(s, frac, side, o, &m[(*n)++]);
  *mine = m;
  return SC_OK;
}

sc_status runner_sensitivity_share(scenario *s, double frac, const runner_options *o,
                                   sc_error *err) {
  side_means *mine = NULL;
  int n = 0;
  sc_status st = s && o ? run_share(s, frac, o, &mine, &n, err) : SC_OK;
  void *all = NULL;
  size_t *counts = sc_mpi_rank() == 0 ? calloc((size_t)sc_mpi_size(), sizeof *counts) : NULL;
  sc_error ge = {{0}};
  // every rank takes part, also with nothing to send (the job's ranks wait for each other here)
  sc_status gs = sc_mpi_gather_bytes(mine, (size_t)n * sizeof *mine, 0, &all, counts, 0, &ge);
  free(mine);
  free(all); // rank 0 calls this only when it stores nothing
  free(counts);
  if (st == SC_OK && gs != SC_OK) st = sc_fail(err, gs, "sensitivity: %s", ge.msg);
  return st;
}

// Fills got[side] from every side run, here or (shared) on the job's ranks: gathered on rank 0.
static sc_status collect_sides(scenario *s, double frac, const runner_options *o,
                               side_means got[2], sc_error *err) {
  side_means *mine = NULL;
  int n = 0;
  sc_status st = run_share(s, frac, o, &mine, &n, err); // on failure still gathered, below
  bool have[2] = {false, false};
  for (int i = 0; i < n; i++) {
    got[mine[i].side] = mine[i];
    have[mine[i].side] = true;
  }
  if (shared(o)) {
    int size = sc_mpi_size();
    void *all = NULL;
    size_t *counts = calloc((size_t)size, sizeof *counts);
    sc_error ge = {{0}};
    sc_status gs = sc_mpi_gather_bytes(NULL, 0, 0, &all, counts, 0, &ge); // rank 0's are here
    if (st == SC_OK && (gs != SC_OK || !counts))
      st = sc_fail(err, gs != SC_OK ? gs : SC_OOM, "sensitivity: %s",
                   gs != SC_OK ? ge.msg : "out of memory");
    const char *at = all;
    for (int k = 1; st == SC_OK && k < size; k++) {
      at += counts[k - 1];
      for (size_t b = 0; b + sizeof(side_means) <= counts[k]; b += sizeof(side_means)) {
        side_means m;
        memcpy(&m, at + b, sizeof m);
        if (m.side == 0 || m.side == 1) {
          got[m.side] = m;
          have[m.side] = true;
        }
      }
    }
    free(all);
    free(counts);
    for (int side = 0; st == SC_OK && side < 2; side++)
      if (!have[side])
        st = sc_fail(err, SC_INVALID,
                     "sensitivity: rank %d of the MPI job ran no run with prices x%g (its "
                     "arguments or scenario were refused there)",
                     side_rank(side, size), side ? 1 + frac : 1 - frac);
  }
  free(mine);
  return st;
}

sc_status runner_sensitivity_run(scenario *s, store *db, int64_t run_id, double frac,
                                 const runner_options *o, runner_sensitivity *out, sc_error *err) {
  memset(out, 0, sizeof *out);
  if (s->mode != SCN_MODE_SIM || !(frac > 0 && frac < 0.5)) {
    if (shared(o)) runner_sensitivity_share(NULL, 0, NULL, NULL); // release the other ranks
    if (s->mode != SCN_MODE_SIM)
      return sc_fail(err, SC_INVALID, "sensitivity: only a sim run is priced (mode: sim)");
    return sc_fail(err, SC_INVALID, "sensitivity: the price change must be in (0, 50%%), got %g%%",
                   frac * 100);
  }
  int64_t dep_ids[SCN_MAX_DEPLOYMENTS];
  out->frac = frac;
  out->n = pooled_means(db, run_id, out->rows, dep_ids, SCN_MAX_DEPLOYMENTS);
  sc_status st = SC_OK;
  if (out->n < 0)
    st = sc_fail(err, SC_IO, "sensitivity: reading run %lld: %s", (long long)run_id,
                 sqlite3_errmsg(store_db(db)));
  side_means *got = calloc(2, sizeof *got);
  if (!got && st == SC_OK) st = sc_fail(err, SC_OOM, "sensitivity: out of memory");
  if (st != SC_OK) {
    if (shared(o)) runner_sensitivity_share(NULL, 0, NULL, NULL);
    free(got);
    return st;
  }
  st = collect_sides(s, frac, o, got, err);
  for (int side = 0; side < 2 && st == SC_OK; side++) { // in side order, as one process runs them
    const side_means *m = &got[side];
    if (m->status != SC_OK) {
      st = sc_fail(err, (sc_status)m->status, "%s", m->error);
      break;
    }
    if (m->n != out->n)
      st = sc_fail(err, SC_INVALID, "sensitivity: %d deployments with prices x%g, %d in run %lld",
                   m->n, side ? 1 + frac : 1 - frac, out->n, (long long)run_id);
    for (int d = 0; st == SC_OK && d < m->n; d++)
      for (int k = 0; k < 2; k++) {
        double b = out->rows[d].base[k];
        out->rows[d].change[side][k] = b > 0 ? (m->rows[d].base[k] - b) / b : NAN;
      }
  }
  free(got);
  for (int d = 0; st == SC_OK && d < out->n; d++)
    for (int k = 0; k < 2; k++) {
      runner_sensitivity_row *r = &out->rows[d];
      double lo = fabs(r->change[0][k]), hi = fabs(r->change[1][k]);
      r->sens[k] = isnan(lo) || isnan(hi) ? NAN : (lo > hi ? lo : hi) / frac;
      st = store_metric_add(db, run_id, dep_ids[d], 0, NULL, sens_name[k], r->sens[k], err);
    }
  if (st == SC_OK) st = store_flush(db, err);
  return st;
}
