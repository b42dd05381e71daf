// How fragile a simulated run's latencies are: the same scenario run twice more with every price
// of its hardware profile a few percent lower and higher (sim_hw_scale), into a scratch
// database, and each deployment's pooled mean TTFT and TPOT compared with the run's own. A
// closed loop whose phases end by request count scales exactly with the prices (sensitivity 1);
// an open loop near saturation queues, and moves several times more (docs/simulator.md).
#include <math.h>
#include <stdlib.h>
#include <sqlite3.h>
#include <string.h>

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

sc_status runner_sensitivity_run(scenario *s, store *db, int64_t run_id, double frac,
                                 const runner_options *o, runner_sensitivity *out, sc_error *err) {
  memset(out, 0, sizeof *out);
  if (s->mode != SCN_MODE_SIM)
    return sc_fail(err, SC_INVALID, "sensitivity: only a sim run is priced (mode: sim)");
  if (!(frac > 0 && frac < 0.5))
    return sc_fail(err, SC_INVALID, "sensitivity: the price change must be in (0, 50%%), got %g%%",
                   frac * 100);
  int64_t dep_ids[SCN_MAX_DEPLOYMENTS];
  out->frac = frac;
  out->n = pooled_means(db, run_id, out->rows, dep_ids, SCN_MAX_DEPLOYMENTS);
  if (out->n < 0)
    return sc_fail(err, SC_IO, "sensitivity: reading run %lld: %s", (long long)run_id,
                   sqlite3_errmsg(store_db(db)));
  sim_hw *saved = malloc(sizeof *saved);
  if (!saved) return sc_fail(err, SC_OOM, "sensitivity: out of memory");
  *saved = s->hw.sim;
  runner_options ro = *o;
  ro.progress = RUNNER_PROGRESS_NONE;
  sc_status st = SC_OK;
  for (int side = 0; side < 2 && st == SC_OK; side++) {
    store *scratch = NULL;
    st = store_open(":memory:", &scratch, err);
    if (st != SC_OK) break;
    s->hw.sim = *saved;
    sim_hw_scale(&s->hw.sim, side ? 1 + frac : 1 - frac);
    runner_result res;
    st = runner_run(s, scratch, &ro, &res, err);
    if (st == SC_OK && strcmp(res.status, "complete") != 0)
      st = sc_fail(err, SC_INVALID, "sensitivity: the run with prices x%g ended %s%s%s",
                   side ? 1 + frac : 1 - frac, res.status, res.error[0] ? ": " : "", res.error);
    runner_sensitivity_row scaled[SCN_MAX_DEPLOYMENTS];
    int n = st == SC_OK ? pooled_means(scratch, res.run_id, scaled, NULL, SCN_MAX_DEPLOYMENTS) : 0;
    if (st == SC_OK && n != out->n)
      st = sc_fail(err, SC_INVALID, "sensitivity: %d deployments with prices x%g, %d in run %lld",
                   n, side ? 1 + frac : 1 - frac, out->n, (long long)run_id);
    for (int d = 0; st == SC_OK && d < n; d++)
      for (int k = 0; k < 2; k++) {
        double b = out->rows[d].base[k];
        out->rows[d].change[side][k] = b > 0 ? (scaled[d].base[k] - b) / b : NAN;
      }
    store_close(scratch);
  }
  s->hw.sim = *saved;
  free(saved);
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
