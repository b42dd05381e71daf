// The results database: open (create or check the schema), write a run's rows, read runs back.
//
// SQLite in WAL mode, prepared statements, writes batched into one transaction that
// store_flush commits (the runner flushes periodically and at the end), so a run killed at any
// point leaves a file that passes PRAGMA integrity_check, holding every flushed row, with the
// run's status still "running" (shown as "incomplete" when its process is gone). The schema
// text is reports/schema.c; docs/schema.md explains it. Every read query is reports/query.c's
// (rq_*): the reports and the gate read through it with store_db.
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "kernels/status.h"

typedef struct sqlite3 sqlite3;

extern const int store_schema_version;

// token_second.second counts the token times in [second, second + 1) of this many ns.
#define STORE_NS_PER_SECOND INT64_C(1000000000)
extern const char *const store_schema_sql;

typedef struct store store;

// Opens (creating when absent) the database at path. SC_INVALID when the file is not a
// shardcheck database or its schema is newer than this binary's (the message says which);
// SC_IO when it cannot be opened or created. On error *out is NULL.
sc_status store_open(const char *path, store **out, sc_error *err);
// Opens an existing database for reading only (SC_IO when it does not exist).
sc_status store_open_readonly(const char *path, store **out, sc_error *err);
// Commits what is pending and closes. NULL is a no-op.
void store_close(store *s);
sqlite3 *store_db(store *s);

// Commits the open write transaction (if any). Writes below open one when none is open.
sc_status store_flush(store *s, sc_error *err);

// --- writing a run
typedef struct store_run {
  const char *scenario, *scenario_path, *scenario_text; // name, path (may be NULL), text
  const char *mode;    // "real" | "sim"
  const char *backend; // "cpu" | "cuda" | "sim"
  const char *model;   // preset or path
  const char *config;  // JSON text of the effective limits and defaults (may be NULL)
  const char *git_rev; // the source revision to record (NULL or "": stored as NULL); the store
                       // runs no git itself: the CLI finds it (cli_git_rev, cli/cmd_common.c)
  uint64_t seed;
} store_run;

// Inserts the run with status "running", started_at = now (UTC), r->git_rev, host name and pid;
// commits at once.
sc_status store_run_begin(store *s, const store_run *r, int64_t *run_id, sc_error *err);
// `run --repeat`: run_id is repetition `index` (0-based) of the group whose first run is
// `group`. Committed at once.
sc_status store_run_set_repeat(store *s, int64_t run_id, int64_t group, int index,
                               sc_error *err);
// `run --group RUN`: the repetition group that run `run_id` belongs to, for more repetitions
// to join it: *group its id and *next_index the index the next repetition takes. A run on its
// own becomes repetition 0 of a group of its own id (committed at once). SC_INVALID when there
// is no such run, or it is of another scenario (name) or mode than `scenario` and `mode`.
sc_status store_group_join(store *s, int64_t run_id, const char *scenario, const char *mode,
                           int64_t *group, int *next_index, sc_error *err);
// Sets status ("complete" | "interrupted" | "failed"), verdict ("pass" | "fail" | NULL), error
// (NULL), ended_at = now and duration_ns; commits everything pending.
sc_status store_run_end(store *s, int64_t run_id, const char *status, const char *verdict,
                        const char *error, uint64_t duration_ns, sc_error *err);

typedef struct store_deployment {
  int64_t run_id;
  int idx;
  const char *label;
  int tp, pp, dp;
  uint64_t start_ns;
} store_deployment;
sc_status store_deployment_begin(store *s, const store_deployment *d, int64_t *id, sc_error *err);
sc_status store_deployment_end(store *s, int64_t id, const char *status, const char *error,
                               uint64_t end_ns, sc_error *err);

typedef struct store_phase {
  int64_t run_id, deployment_id;
  int idx;
  const char *name, *kind;  // kind: ramp | rate | fixed
  int concurrency;          // 0 -> NULL
  double rate;              // 0 -> NULL
  const char *arrival;      // NULL for closed loop
  uint64_t start_ns, warmup_end_ns;
} store_phase;
sc_status store_phase_begin(store *s, const store_phase *p, int64_t *id, sc_error *err);
sc_status store_phase_end(store *s, int64_t id, uint64_t end_ns, sc_error *err);

// A request as it ended. Times are ns from the run start; 0 with the has_* flag false -> NULL.
typedef struct store_request {
  int64_t run_id, deployment_id, phase_id;
  int64_t seq;
  const char *class_name;
  int replica;              // -1 -> NULL
  int prompt_tokens, max_tokens, output_tokens;
  uint64_t arrival_ns, dispatch_ns, first_token_ns, finish_ns;
  bool has_dispatch, has_first_token, has_finish;
  const char *status;       // ok | cancelled | failed | timeout
  const char *reason;       // may be NULL
  const char *error;        // may be NULL
  int retries;
  bool warmup;
  int weight_version;
  bool has_cached;          // false -> cached_tokens NULL (not reported)
  int cached_tokens;        // prompt tokens served from the prefix cache
} store_request;
// Inserts the request and its token times (token_ns[0..n_tokens), ns from the run start) in the
// open transaction; *id (may be NULL) receives request.id. The token times are counted per
// second into token_second when the transaction commits (store_flush, store_close).
sc_status store_request_add(store *s, const store_request *r, const uint64_t *token_ns,
                            int n_tokens, int64_t *id, sc_error *err);

typedef struct store_step {
  int64_t run_id, deployment_id;
  int replica;
  uint64_t t_ns, duration_ns;
  int seqs, prefill_tokens, decode_tokens, preempted, queue_len, running, kv_used, kv_total;
} store_step;
// A step row: a step_block row of its own (the step view shows it with the next step id).
sc_status store_step_add(store *s, const store_step *st, sc_error *err);
// Several step rows at once, what the recorder's writer uses: one step_block row per run of up
// to 256 consecutive rows of one run and deployment, their step ids following the file's last.
sc_status store_steps_add(store *s, const store_step *const *rows, int n, sc_error *err);

typedef struct store_device_sample {
  int64_t run_id, deployment_id;
  int replica, rank;
  uint64_t t_ns;
  uint64_t mem_used, mem_total;
  int64_t link_bytes; // < 0 -> NULL
} store_device_sample;
sc_status store_device_sample_add(store *s, const store_device_sample *d, sc_error *err);

// What an external server's /metrics said (runs against a target only). The table is made by
// the first write (store_server_sample_sql): files of runs without a target never have it, and
// a file of any schema version 2 gains it when a target run writes there.
typedef struct store_server_sample {
  int64_t run_id, deployment_id;
  int replica;
  uint64_t t_ns;
  double running, waiting; // requests (NaN -> NULL: the server does not expose it)
  double kv_usage;         // fraction 0..1 (NaN -> NULL)
  double kv_blocks;        // blocks in use (NaN -> NULL; shardcheck serve only)
} store_server_sample;
sc_status store_server_sample_add(store *s, const store_server_sample *d, sc_error *err);
extern const char *const store_server_sample_sql;

typedef struct store_fault {
  int64_t run_id, deployment_id; // deployment_id 0 -> NULL
  const char *kind, *target, *detail;
  uint64_t injected_ns, detected_ns, recovered_ns;
  bool has_detected, has_recovered;
  int affected;                  // < 0 -> NULL
} store_fault;
sc_status store_fault_add(store *s, const store_fault *f, int64_t *id, sc_error *err);

// One metric of one window around a fault (before | during | after), and its SLO verdict when
// the scenario has an SLO on it (op NULL: no SLO; expected and pass are then stored as NULL).
// value NaN -> NULL.
typedef struct store_fault_window {
  int64_t fault_id;
  const char *window;            // "before" | "during" | "after"
  uint64_t start_ns, end_ns;     // [start, end): requests that ended in it (by 'finish')
  const char *name;              // a metric name (reports/metrics.h)
  double value;
  const char *op;                // "<=" | ">=" | NULL
  double expected;
  bool pass;
} store_fault_window;
sc_status store_fault_window_add(store *s, const store_fault_window *w, sc_error *err);

// deployment_id / phase_id 0 -> NULL; class NULL -> ''. A NaN value is stored as NULL.
sc_status store_metric_add(store *s, int64_t run_id, int64_t deployment_id, int64_t phase_id,
                           const char *class_name, const char *name, double value, sc_error *err);
// The same with a note (NULL or "": none): why a NaN value was not measured.
sc_status store_metric_add_note(store *s, int64_t run_id, int64_t deployment_id,
                                int64_t phase_id, const char *class_name, const char *name,
                                double value, const char *note, sc_error *err);
// actual NaN -> NULL. op: "<=" or ">=". note (NULL or "": none): what the verdict rests on
// beyond its numbers ("no data: why", "client saturated: ...").
sc_status store_verdict_add(store *s, int64_t run_id, int64_t deployment_id, const char *slo,
                            const char *op, double expected, double actual, bool pass,
                            const char *note, sc_error *err);

// --- capacity searches (`shardcheck capacity`, runner/capacity.h; docs/capacity.md)

// One simulated point: a layout at one request rate and what the SLOs said.
typedef struct store_cap_point {
  int layout;          // index into the search's layouts
  double rate;         // requests/s offered
  bool pass;           // every SLO held, the run completed and it was not past the knee
  double ttft_p95_ms, tpot_p95_ms, e2el_p95_ms; // pooled, NaN when none
  double output_tok_s; // output tokens/s delivered
  double error_rate;
  char failed[160];    // when !pass: the first SLO that failed ("ttft_p95_ms 812 > 500"), or
                       // why the run did not complete
  int bound;           // which search: 0 the prediction's, -1 the pessimistic bound's (the
                       // profile's prices at the slow end of its interval), 1 the optimistic's
} store_cap_point;

// One layout searched: a GPU kind and tp x pp x dp, and what the bisection found.
typedef struct store_cap_layout {
  char kind[256];       // hardware profile name
  int tp, pp, dp, gpus;
  char label[32];       // "tp2-dp2"
  double cost_per_hour; // gpus x the kind's cost per GPU-hour
  double max_rate;      // the highest rate whose point passed; NaN: none passed
  bool capped;          // it passed at the top of the range (its capacity may be higher)
  double output_tok_s;  // at max_rate
  double cost_per_mtok; // cost_per_hour / (output_tok_s x 3600) x 1e6 at max_rate
  char limit[160];      // the failure of the lowest failing point above max_rate ("" none)
  double max_rate_lo;   // the capacity at the pessimistic end of the interval (= max_rate
  double max_rate_hi;   // without one), and at the optimistic end; NaN: none passed
  double error;         // the interval's relative half-width on this layout's kind (0: none)
  double knee_rate;     // the prediction's knee: the highest rate probed below the first one
                        // past it (runner/capacity.h, saturation); NaN: not reached
} store_cap_layout;

typedef struct store_cap_search {
  const char *scenario, *scenario_text; // name and the file's text
  const char *git_rev;                  // may be NULL
  const char *record;                   // the probes' recording level
  uint64_t seed;
  double target_rate, rate_lo, rate_hi;
  int iters;                            // --iters: probes per layout less 2
  const char *slo;                      // the SLOs as text ("ttft_p95_ms <= 500, ...")
  const char *costs;                    // cost per GPU-hour per kind as text
  int best, runner_up;                  // layout indexes, -1 none
  bool served;                          // best >= 0
  const char *note;                     // the recommendation, or why none (a sentence)
} store_cap_search;

// Writes a search, its layouts and its points (layout indexes as given) in one transaction,
// committed at once; *id the search's id. On error nothing is written.
sc_status store_capacity_add(store *s, const store_cap_search *c, const store_cap_layout *layouts,
                             int n_layouts, const store_cap_point *points, int n_points,
                             int64_t *id, sc_error *err);

// --- reading runs (shardcheck runs, report, gate)
typedef struct store_run_row {
  int64_t id;
  char scenario[128];
  char mode[8];
  char status[16];   // as stored; "incomplete" when stored "running" and its pid is not alive
                     // on this host (or the host differs)
  char started_at[32];
  char verdict[8];   // "" when NULL
  char git_rev[48];
  bool baseline;
} store_run_row;
// Runs newest first. Writes at most cap rows into out; returns the count that exist (>= 0), or
// -1 with err on a database error.
int store_runs_list(store *s, store_run_row *out, int cap, sc_error *err);
// One run by id; SC_INVALID "no run N in PATH" when absent.
sc_status store_run_get(store *s, int64_t id, store_run_row *out, sc_error *err);
