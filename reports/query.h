// The read side of the results database: every query that reads stored runs back, with typed
// results. Prefix rq_. The report, its plots, the history, predicted vs measured, the gate, the
// fault history check (faults/verdict.c) and the CLI read through these functions, so a change
// of the schema (reports/schema.c, docs/schema.md) meets its readers here, in one file.
//
// What comes back: structs filled in place (rq_run_load, rq_request_history), single values,
// or one callback per row with the row as a struct (the callback returns false to stop: out of
// memory). Text columns that are NULL read as "". Times are ns since the run's start.
//
// Left to others: writing rows, opening and migrating the file (reports/store.c, which owns the
// handle and turns rq_runs_each's rows into store_runs_list's); what the rows mean and how they
// are shown (reports/report*.c, reports/gate.c, cli/); the design of the floors
// (docs/design.md).
#pragma once

#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/status.h"
#include "reports/store.h"

// --- one run, as the reports show it (time columns: ns since the run's start; -1 for NULL)

typedef struct rq_deployment {
  int64_t id;
  int idx;
  char label[64];
  int tp, pp, dp, gpus;
  int64_t start_ns, end_ns; // end_ns -1: not finished
  char status[16];
} rq_deployment;

typedef struct rq_phase {
  int64_t id;
  int dep;                  // index into rq_run.deps
  int idx;                  // order within the deployment
  char name[64];
  char kind[8];             // ramp | rate | fixed
  int concurrency;          // 0: NULL (rate phases)
  double rate;              // requests/s; 0: NULL
  int64_t start_ns, end_ns; // end_ns -1: not finished
} rq_phase;

typedef struct rq_verdict {
  int dep;                  // index into rq_run.deps
  char slo[64];             // the SLO key; a prompt class's: "CLASS:KEY"
  char op[4];               // "<=" | ">="
  double expected;
  double actual;            // NaN: no data
  bool pass;
  char note[200];           // "no data: why", "client saturated (...)", ... ("": none, or an
                            // older file)
} rq_verdict;

enum { RQ_FAULT_WINDOWS = 3 }; // before, during, after

typedef struct rq_fault {
  int dep;                  // index into rq_run.deps; -1: the whole run
  char kind[32];
  char target[64];
  char detail[256];
  int64_t injected_ns, detected_ns, recovered_ns; // detected/recovered -1: never
  int affected;             // requests; -1: unknown
  char window[RQ_FAULT_WINDOWS][160]; // before, during, after: TTFT p95 and the SLOs met or
                            // missed ("": no requests in it, or an older file without windows)
} rq_fault;

typedef struct rq_run {
  int64_t id;
  // Owned strings, never NULL ("" where the column is NULL).
  char *scenario, *scenario_path, *scenario_text, *mode, *backend, *model, *git_rev, *host,
      *config, *started_at, *ended_at, *status, *verdict, *error;
  int64_t seed;
  int64_t duration_ns;      // -1: not finished
  rq_deployment *deps;      // (n_deps) by idx
  int n_deps;
  rq_phase *phases;         // (n_phases) by deployment idx, then phase idx
  int n_phases;
  rq_verdict *verdicts;     // (n_verdicts) by deployment idx, then insertion order
  int n_verdicts;
  rq_fault *faults;         // (n_faults) by injection time
  int n_faults;
  char (*classes)[32];      // (n_classes) prompt class names with metric rows, sorted
  int n_classes;
  char saturated[400];      // the phases whose client fell behind its schedule: "LABEL PHASE
                            // (N ms late), ..." ("": none)
} rq_run;

// Loads run `id` with its deployments, phases, verdicts, faults and class names into *r
// (zeroed first; the caller frees it with rq_run_free). SC_INVALID "no run N in the database"
// when absent; SC_IO on a database error (the message carries sqlite3_errmsg); SC_OOM. On error
// *r holds nothing to free.
sc_status rq_run_load(sqlite3 *db, int64_t id, rq_run *r, sc_error *err);
// Frees what rq_run_load allocated; NULL or a zeroed run is a no-op.
void rq_run_free(rq_run *r);
// The index in r->deps of deployment id dep_id; -1 when it is not one of r's.
int rq_dep_index(const rq_run *r, int64_t dep_id);
// The id of the newest run into *id; SC_INVALID "no runs in the database" when there is none,
// SC_IO on a database error (*id untouched on error).
sc_status rq_newest_run(sqlite3 *db, int64_t *id, sc_error *err);

// --- metric values

// A prepared lookup kept between calls (zero-initialise it; rq_metric_cache_free releases it).
typedef struct rq_metric_cache {
  sqlite3_stmt *st;         // owned; NULL until the first lookup
} rq_metric_cache;
// The stored value of metric `name` for (deployment, phase, class) of run run_id: dep_id /
// phase_id 0 stand for NULL (across deployments / the whole deployment), cls NULL for ''. NaN
// when there is no such row, the value is NULL, or the lookup cannot be prepared.
double rq_metric(sqlite3 *db, rq_metric_cache *mc, int64_t run_id, int64_t dep_id,
                 int64_t phase_id, const char *cls, const char *name);
// Finalizes the cached statement; a zeroed cache is a no-op.
void rq_metric_cache_free(rq_metric_cache *mc);

// --- a run's time series (the timeline and KV plots)

// The latest time any of the run's step, request, phase or fault rows mentions into *span (0
// when none). SC_IO "reading the run's span: ..." when the query cannot be prepared.
sc_status rq_run_span(sqlite3 *db, int64_t run_id, int64_t *span, sc_error *err);
// Calls fn(ud, t_ns, n) for the run's token rows, n of them at t_ns, in no particular order. A
// caller that counts them in bins of bin_ns from 0 gets the counts of the token rows: when
// bin_ns is a whole number of seconds and the file's token_second rows count every token row
// of the run, one call per second with a token (t_ns its start, n its count: an hour of
// serving is 3,600 rows, not millions); otherwise one call per token row (n = 1). SC_IO on a
// database error; SC_OOM when fn returns false.
sc_status rq_token_counts(sqlite3 *db, int64_t run_id, int64_t bin_ns,
                          bool (*fn)(void *ud, int64_t t_ns, int64_t n), void *ud,
                          sc_error *err);
// Calls fn for every request of the run with a first token, in first-token order: the first
// token's time and the TTFT (first token - arrival), both ns. Errors as rq_token_counts.
sc_status rq_first_tokens(sqlite3 *db, int64_t run_id,
                          bool (*fn)(void *ud, int64_t first_token_ns, int64_t ttft_ns),
                          void *ud, sc_error *err);

// One engine step row, the columns the plots read.
typedef struct rq_step {
  int64_t id;
  int64_t deployment_id;
  int replica;
  int64_t t_ns, duration_ns;
  int queue_len;
  int64_t kv_used, kv_total; // blocks
} rq_step;
// Calls fn for every step row of the run, deployment by deployment (by id), each deployment's
// in time order (t_ns, then id). The steps are read in id order and put in time order within a
// window of 30 s of the run's clock (a step is recorded when it ends); should one come later
// than that, restart(ud) is called and every step comes again, sorted by SQLite (exact, and
// slow). Errors as rq_token_counts; SC_INVALID when a step_block row is not what the writer
// writes.
sc_status rq_steps_by_time(sqlite3 *db, int64_t run_id, bool (*fn)(void *ud, const rq_step *s),
                           void (*restart)(void *ud), void *ud, sc_error *err);
// One server_sample row: what an external server's /metrics said (NaN: not exposed).
typedef struct rq_server_sample {
  int64_t deployment_id;
  int replica;
  int64_t t_ns;
  double running, waiting, kv_usage;
} rq_server_sample;
// Calls fn for every server_sample row of the run in time order. A file without the table (no
// run against a target wrote there) has none. Errors as rq_token_times.
sc_status rq_server_samples(sqlite3 *db, int64_t run_id,
                            bool (*fn)(void *ud, const rq_server_sample *s), void *ud,
                            sc_error *err);

// --- the run listing (store_runs_list and store_run_get, reports/store.c)

// One run row as `shardcheck runs` lists it; the strings ("" for NULL) live until fn returns.
typedef struct rq_listed_run {
  int64_t id;
  const char *scenario, *mode, *status, *started_at, *verdict, *git_rev;
  bool baseline;
  const char *host;         // NULL when NULL: the host that ran it
  bool has_pid;             // pid is not NULL
  int64_t pid;              // the process that ran it
} rq_listed_run;
// Calls fn for every run newest first, or (id > 0) for run id alone. Returns the SQLite result
// code: SQLITE_DONE when every row was read; another code on an error, with *prepared false
// when the query could not even be prepared.
int rq_runs_each(sqlite3 *db, int64_t id, void (*fn)(void *ud, const rq_listed_run *r),
                 void *ud, bool *prepared);

// --- runs by id (the gate and the CLI)

// Whether the file has run.repeat_group (schema version 2; a version 1 file read-only lacks it).
bool rq_has_repeat_groups(sqlite3 *db);
// The runs of run_id's repetition group (run_id alone when it has none, or grouped is false) in
// id order, at most cap into out; returns how many (0: no such run, or a database error).
int rq_group_runs(sqlite3 *db, int64_t run_id, bool grouped, int64_t *out, int cap);
// Whether run id ended complete (not interrupted, failed or still running).
bool rq_run_complete(sqlite3 *db, int64_t id);
// run id's status as stored ("running", "complete", "interrupted", "failed") and its error
// ("" none); false when there is no such run.
bool rq_run_status(sqlite3 *db, int64_t id, char *status, size_t status_cap, char *error,
                   size_t error_cap);
// The scenario name and mode of run id into scen[scen_cap] and mode[mode_cap] (either may be
// NULL); false when there is no such run (the buffers untouched).
bool rq_run_scenario_mode(sqlite3 *db, int64_t id, char *scen, size_t scen_cap, char *mode,
                          size_t mode_cap);
// Run id's config column (the JSON text the runner stored), malloc'd: the caller frees it. NULL
// when there is no such run, no config, or no memory.
char *rq_run_config(sqlite3 *db, int64_t id);
// The latest run of every scenario and mode whatever its status (a crashed or interrupted one
// included: the gate fails it), ordered by scenario then mode, at most cap into out; returns
// how many (0 as well on a database error).
int rq_latest_runs(sqlite3 *db, int64_t *out, int cap);
// The latest run marked as a baseline of scenario scen in mode `mode` with an id below before;
// 0 when there is none (or on a database error).
int64_t rq_latest_baseline(sqlite3 *db, const char *scen, const char *mode, int64_t before);

// --- the gate's numbers

// Calls fn for each metric row of run with a value, of every request (class '') per phase
// and for the whole deployment, and of each prompt class for the whole deployment, by
// deployment idx, phase id, class, then name: the deployment's label, the phase's name (""
// for the whole deployment), the metric name ("CLASS:NAME" for a class's row) and value.
// SC_IO "gate: reading metrics: ..." when the query cannot be prepared; SC_OOM "gate: out of
// memory" when fn returns false; a step error ends the rows early.
sc_status rq_gate_metrics(sqlite3 *db, int64_t run,
                          bool (*fn)(void *ud, const char *label, const char *phase,
                                     const char *name, double value),
                          void *ud, sc_error *err);

// --- the history of a scenario

typedef struct rq_history_run {
  int64_t id;
  char started_at[32];      // UTC, ISO 8601
  char git_rev[48];         // "" when NULL
  char mode[8];
  char status[16];
  char verdict[8];          // "" when NULL
  bool baseline;
  char group[64];           // the repetition group (its first run's id) as text; "": none
} rq_history_run;
// Calls fn for every run of scenario scn in start order (then id); grouped: the file has
// repetition groups (rq_has_repeat_groups), else every group is "". SC_IO on a database error;
// SC_OOM when fn returns false.
sc_status rq_history_runs(sqlite3 *db, const char *scn, bool grouped,
                          bool (*fn)(void *ud, const rq_history_run *r), void *ud, sc_error *err);
// Calls fn with the label (at most 63 bytes) and mode (at most 7) of every deployment of a
// complete run of scenario scn, by deployment idx, then run start. Errors as rq_history_runs.
sc_status rq_history_deployments(sqlite3 *db, const char *scn,
                                 bool (*fn)(void *ud, const char *label, const char *mode),
                                 void *ud, sc_error *err);
// One pooled deployment metric of a run of the scenario.
typedef struct rq_history_metric {
  int64_t run_id;
  char label[64];           // the deployment's label
  char mode[8];             // the run's mode
  char name[40];            // the metric's name
  double value;
} rq_history_metric;
// Calls fn for every pooled (no phase, class '') deployment metric row with a value of the runs
// of scenario scn. Errors as rq_history_runs.
sc_status rq_history_metrics(sqlite3 *db, const char *scn,
                             bool (*fn)(void *ud, const rq_history_metric *m), void *ud,
                             sc_error *err);

// --- the history check of faults/verdict.c

// Counts over a deployment's request and token rows (faults/verdict.h's fv_history says what
// each means): requests recorded (distinct seq), seqs with more than one row, seqs inside
// [0, sent), rows by status, token rows beyond the first per (request, idx), requests whose
// token rows are not exactly the indexes 0 .. output_tokens - 1, requests whose times run
// backwards, timeouts of requests the failover path left unanswered (reason replica_lost).
typedef struct rq_request_history {
  int64_t recorded, double_done, in_range, ok, cancelled, failed, timeout, bad_status, abandoned;
  int64_t dup_tokens, token_gaps, bad_times;
} rq_request_history;
// Fills *out for deployment deployment_id of run run_id, sent requests. SC_IO "history check:
// ..." naming the query on a database error (*out then partly filled).
sc_status rq_request_history_read(sqlite3 *db, int64_t run_id, int64_t deployment_id,
                                  int64_t sent, rq_request_history *out, sc_error *err);

// --- a sim run's sensitivity (runner/sensitivity.c)

// One deployment's pooled mean TTFT and TPOT (ms; NaN when absent).
typedef struct rq_pooled_means {
  int64_t dep_id;
  char label[64];
  double ttft_mean_ms, tpot_mean_ms;
} rq_pooled_means;
// The pooled means of up to cap deployments of run run_id, by deployment index, into out;
// returns how many, or -1 when the query cannot be prepared (sqlite3_errmsg says why).
int rq_pooled_means_read(sqlite3 *db, int64_t run_id, rq_pooled_means *out, int cap);

// --- requests that did not complete, by kind (the errors_<kind> rows)

// Calls fn for every pooled errors_<kind> metric of run run_id (a deployment's whole run, every
// class), by deployment index, then kind: the deployment's label, the kind (the name without
// "errors_": "oom", "replica_lost", "timeout", "timeout_replica_lost", ...) and the count.
// SC_IO "reading error kinds: ..." when the query cannot be prepared; SC_OOM when fn returns
// false.
sc_status rq_error_kinds(sqlite3 *db, int64_t run_id,
                         bool (*fn)(void *ud, const char *label, const char *kind, double n),
                         void *ud, sc_error *err);

// --- the metrics audit: the stored metrics against the rows they summarize

// Recomputes, with SQL over the request and token rows of deployment dep_id of run run_id, the
// whole-deployment figures any formula slip would move (requests, completed requests, output
// tokens, mean TTFT, TPOT and end-to-end latency, token rows of completed requests) and compares
// each with the metric row mt_summarize wrote (relative 1e-6). Returns how many disagree, with
// the first one in why ("tpot_mean_ms: 11.08 stored, 11.85 from the rows"); -1 with why set
// when a query cannot be prepared. The rows must be written (the recorder drained). Without
// token_rows (a run recorded at level requests: no token rows) the token-row count is not
// compared.
int rq_metrics_audit(sqlite3 *db, int64_t run_id, int64_t dep_id, bool token_rows, char *why,
                     size_t cap);

// --- measured request times (runner/calibrate.c)

// One completed request of a run as its client saw it, ns from the run's start.
typedef struct rq_req_time {
  int prompt_tokens, output_tokens;
  uint64_t arrival_ns, first_token_ns, finish_ns;
} rq_req_time;
// The ok requests of run_id's first deployment, by arrival then seq, into *out (malloc'd, the
// caller frees) and *n. SC_INVALID when the run has none; SC_IO naming the query on a
// database error (*out NULL then).
sc_status rq_request_times(sqlite3 *db, int64_t run_id, rq_req_time **out, int *n, sc_error *err);

// --- capacity searches (`shardcheck capacity`; the rows store_capacity_add wrote)

typedef struct rq_capacity {
  int64_t id;
  char scenario[128], record[16], started_at[32], git_rev[48];
  char slo[512], costs[256], note[1024];
  int64_t seed;
  double target_rate, rate_lo, rate_hi;
  int iters;
  int best, runner_up;         // layout indexes, -1 none
  bool served;
  store_cap_layout *layouts;   // (n_layouts) by idx
  int n_layouts;
  store_cap_point *points;     // (n_points) by layout, then the order simulated
  int n_points;
} rq_capacity;

// Loads capacity search `id` (0: the newest) into *c (free with rq_capacity_free). SC_INVALID
// "no capacity search N" when absent (or none at all), SC_IO on a database error, SC_OOM.
sc_status rq_capacity_load(sqlite3 *db, int64_t id, rq_capacity *c, sc_error *err);
void rq_capacity_free(rq_capacity *c); // a zeroed one is a no-op
