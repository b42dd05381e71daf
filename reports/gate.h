// The regression gate: compares a run (or its repetition group) with a baseline run of the same
// scenario and mode, deployment by deployment (matched by label, i.e. layout) and phase by
// phase, metric by metric (and each prompt class's whole-deployment metrics, named
// CLASS:NAME), direction-aware, and says per metric: improved, same, worse within noise, or
// REGRESSED (docs/gate.md).
//
// Sim runs are deterministic: the relative change alone decides against the tolerance. Real
// runs recorded with `run --repeat N` are noisy: a metric regresses only when its median got
// worse by more than the tolerance AND a one-sided exact Mann-Whitney U test over the
// per-repetition values finds the shift significant (p < alpha, default 0.01). With 5 vs 5
// repetitions the 252 arrangements of the ranks are equally likely under "no change": the
// smallest p is 1/252 = 0.004, and p < 0.01 holds for 2 of them (at most one of the 25
// (baseline, current) pairs ordered the better way), so an unchanged metric is flagged with
// probability <= 2/252 = 0.8% from the test alone, whatever its noise. A real run without
// repetitions on either side is judged by the tolerance alone, and says so.
//
// Reading only: both databases are read with SQL; the CLI (cli/cmd_gate.c) picks the runs,
// prints, and writes JUnit and JSON.
#pragma once

#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/status.h"

enum { GATE_MAX_METRICS = 48, GATE_MAX_REPS = 64 };

typedef struct gate_metric_tol {
  char name[64];    // a metric name (its rows of every class too), or CLASS:NAME (that class's)
  double tol; // fraction; < 0: the default tolerance
} gate_metric_tol;

typedef struct gate_options {
  double tol_real;  // default tolerance of real runs (fraction, 0.05)
  double tol_sim;   // default tolerance of sim runs (0.01)
  double alpha;     // significance level of the one-sided test (0.01)
  gate_metric_tol metrics[GATE_MAX_METRICS]; // the metrics compared; none: the defaults
  int n_metrics;
  bool accept_improvements; // sim: a change past the tolerance the better way is IMPROVED
                            // (passes) instead of CHANGED (fails)
} gate_options;

gate_options gate_options_defaults(void);
// The scenario's `gate:` defaults recorded in run_id's config JSON (run.config "gate"), applied
// to o where the command line left them (set: bit 0 tolerance, bit 1 alpha, bit 2 metrics
// given on the command line; a command-line tolerance also replaces the scenario's per-metric
// tolerances). False when the run has none.
bool gate_options_from_run(sqlite3 *db, int64_t run_id, unsigned set, gate_options *o);
// The default metrics are the table's (scenarios/metric_names.h: mt_metric_gated).

typedef enum gate_verdict {
  GATE_IMPROVED,
  GATE_SAME,
  GATE_WORSE_NOISE, // worse by more than the tolerance, but not significant across repetitions
  GATE_REGRESSED,
  GATE_NEW,         // no baseline value (a new deployment, phase or metric): reported only
  GATE_MISSING,     // no current value (the run crashed or stopped early, or the deployment,
                    // phase or metric is gone): a failure
  GATE_CHANGED,     // sim: better by more than the tolerance, not accepted
                    // (gate_options.accept_improvements): a failure, as deterministic runs
                    // change only when the code, the profile or the scenario did
} gate_verdict;
const char *gate_verdict_name(gate_verdict v); // "improved", "same", ..., "REGRESSED"

typedef struct gate_row {
  char deployment[96]; // label
  char phase[64];      // "" = the whole deployment
  char metric[64];     // a metric name; a prompt class's pooled row: "CLASS:NAME"
  double base, cur;    // medians over the repetitions (NaN: none)
  double change;       // (cur - base) / |base|; NaN when base is 0 or missing
  double worse;        // change signed so that > 0 is worse for this metric's direction
  double tol;          // the tolerance applied
  double p;            // one-sided Mann-Whitney p-value; NaN when not tested
  double noise;        // the baseline's spread: (max - min) / 2 / |median| over repetitions
                       // (NaN with fewer than 2)
  double noise_cur;    // the same over the current repetitions
  int n_base, n_cur;   // repetitions with a value
  gate_verdict v;
  char note[160];      // what changed, in words, where numbers cannot say ("" none): a
                       // capacity search's recommendation
} gate_row;

typedef struct gate_result {
  char scenario[128];
  bool sim;            // both runs are sim runs
  bool capacity;       // a comparison of two capacity searches (their ids in base_run and
                       // cur_run; gate_capacity_compare)
  int64_t base_run, cur_run; // the groups' first runs
  int n_base_reps, n_cur_reps; // repetitions used: of a group, its complete runs
  double alpha;        // the significance level applied
  gate_row *rows;      // (n) owned
  int n;
  int regressed;       // rows REGRESSED
  int missing;         // rows MISSING
  int changed;         // rows CHANGED (sim improvements not accepted)
  int failed;          // regressed + missing + changed, + 1 when the current side is incomplete:
                       // the gate fails when it is > 0
  char incomplete[256]; // why the current side is not complete ("run 7 has status 'running':
                        // ..."); "" when every run of its group is complete
  double noise_base, noise_cur; // medians of the rows' noise (NaN: no repetitions)
  int noisiest;        // the row with the largest noise on either side; -1: none
} gate_result;

// Whether db's run table has repetition groups (run.repeat_group: schema version 2; a version
// 1 file read as it is has none).
bool gate_db_grouped(sqlite3 *db);

// The runs of run_id's repetition group in db (its own id alone when it has none), ascending;
// returns how many (<= cap), 0 when the run does not exist.
int gate_group(sqlite3 *db, int64_t run_id, int64_t *out, int cap);

// Compares the group of cur_run in cur_db with the group of base_run in base_db (the same
// handle is fine). SC_INVALID when a run is missing, the two are runs of different scenarios
// or modes (sim and real), or, in one database, of the same repetition group (err says
// which); *out is then empty. Free with gate_result_free.
sc_status gate_compare(sqlite3 *cur_db, int64_t cur_run, sqlite3 *base_db, int64_t base_run,
                       const gate_options *o, gate_result *out, sc_error *err);
void gate_result_free(gate_result *r);
// Fills g->incomplete (and leaves the rest of g as it is) when a run of the current group
// ids[0..n) did not complete: its rows are partial or absent, so what the gate did not see
// cannot pass.
void gate_check_complete(sqlite3 *db, const int64_t *ids, int n, gate_result *g);

// --- capacity searches (`shardcheck capacity`, the capacity tables; docs/gate.md)

// The newest capacity search in db of scenario scen (NULL: of any) with an id below before;
// 0 when there is none.
int64_t gate_capacity_latest(sqlite3 *db, const char *scen, int64_t before);

// Compares capacity search cur in cur_db with search base in base_db: the recommendation and
// whether one serves the target, and per layout max_rate and its interval's ends (max_rate_lo,
// max_rate_hi; higher is better) and cost_per_mtok (lower is better), each against
// o->tol_sim in both directions as in sim runs (searches are simulated: deterministic;
// o->accept_improvements accepts the better ones). SC_INVALID when a search is missing, is
// its own baseline, or the two ask different questions (another scenario or scenario text,
// SLO, target rate, search range, iterations, seed, costs or set of layouts: err says which,
// in one line).
sc_status gate_capacity_compare(sqlite3 *cur_db, int64_t cur, sqlite3 *base_db, int64_t base,
                                const gate_options *o, gate_result *out, sc_error *err);

// One-sided exact Mann-Whitney U: the probability, under no difference, that the rank sum of
// b (n_b values) is at least the observed one, i.e. that b is at least this much larger than
// a. Ties get mid-ranks; exact (the rank-sum distribution by dynamic programming) up to 60
// values in all, a normal approximation (with continuity correction) beyond; NaN when a side
// is empty or memory runs out.
double gate_mann_whitney_greater(const double *a, int n_a, const double *b, int n_b);
