// The SQLite schema of a shardcheck results database (docs/schema.md explains every column).
//
// One file holds many runs. Every time column (*_ns) counts nanoseconds from the start of its
// run on the run's clock (monotonic in real mode, virtual in sim mode), so real and simulated
// runs compare; wall-clock times appear only as UTC text for people (run.started_at/ended_at).
// This file holds only the DDL; reports/store.c opens, migrates and writes.
#include "reports/store.h"

const int store_schema_version = 5;

// An external server's scraped figures (store_server_sample_add creates it on first use).
const char *const store_server_sample_sql =
    "CREATE TABLE IF NOT EXISTS server_sample(\n"
    "  run_id INTEGER NOT NULL REFERENCES run(id),\n"
    "  deployment_id INTEGER NOT NULL REFERENCES deployment(id),\n"
    "  replica INTEGER NOT NULL,\n"
    "  t_ns INTEGER NOT NULL,\n" // when it was scraped
    "  running REAL,\n"          // requests running (NULL: not exposed)
    "  waiting REAL,\n"          // requests waiting
    "  kv_usage REAL,\n"         // KV-cache usage, 0..1
    "  kv_blocks REAL);\n";      // KV blocks in use (shardcheck serve)

const char *const store_schema_sql =
    "CREATE TABLE IF NOT EXISTS meta(\n"
    "  key TEXT PRIMARY KEY,\n"
    "  value TEXT NOT NULL);\n"
    "CREATE TABLE IF NOT EXISTS run(\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  scenario TEXT NOT NULL,\n"        // the scenario's name
    "  scenario_path TEXT,\n"
    "  scenario_text TEXT NOT NULL,\n"
    "  mode TEXT NOT NULL,\n"            // real | sim
    "  backend TEXT,\n"                  // cpu | cuda | sim
    "  model TEXT,\n"
    "  git_rev TEXT,\n"
    "  host TEXT,\n"
    "  pid INTEGER,\n"
    "  seed INTEGER NOT NULL,\n"
    "  config TEXT,\n"                   // JSON: the effective limits and defaults
    "  started_at TEXT NOT NULL,\n"      // UTC, ISO 8601
    "  ended_at TEXT,\n"
    "  duration_ns INTEGER,\n"
    "  status TEXT NOT NULL,\n"          // running | complete | interrupted | failed
    "  verdict TEXT,\n"                  // pass | fail | NULL (no SLO, or not finished)
    "  error TEXT,\n"
    "  baseline INTEGER NOT NULL DEFAULT 0,\n"
    "  repeat_group INTEGER,\n"         // `run --repeat`: the id of the group's first run
    "  repeat_index INTEGER);\n"        // its place in the group, 0-based
    "CREATE TABLE IF NOT EXISTS deployment(\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  run_id INTEGER NOT NULL REFERENCES run(id),\n"
    "  idx INTEGER NOT NULL,\n"
    "  label TEXT NOT NULL,\n"
    "  tp INTEGER NOT NULL, pp INTEGER NOT NULL, dp INTEGER NOT NULL, gpus INTEGER NOT NULL,\n"
    "  start_ns INTEGER NOT NULL,\n"
    "  end_ns INTEGER,\n"
    "  status TEXT NOT NULL,\n"          // running | complete | interrupted | failed
    "  error TEXT);\n"
    "CREATE TABLE IF NOT EXISTS phase(\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  run_id INTEGER NOT NULL REFERENCES run(id),\n"
    "  deployment_id INTEGER NOT NULL REFERENCES deployment(id),\n"
    "  idx INTEGER NOT NULL,\n"          // order within the deployment (ramp steps count apart)
    "  name TEXT NOT NULL,\n"
    "  kind TEXT NOT NULL,\n"            // ramp | rate | fixed
    "  concurrency INTEGER,\n"           // ramp, fixed
    "  rate REAL,\n"                     // rate: requests/s
    "  arrival TEXT,\n"                  // rate: poisson | constant | gamma
    "  start_ns INTEGER NOT NULL,\n"
    "  warmup_end_ns INTEGER NOT NULL,\n"
    "  end_ns INTEGER);\n"
    "CREATE TABLE IF NOT EXISTS request(\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  run_id INTEGER NOT NULL REFERENCES run(id),\n"
    "  deployment_id INTEGER NOT NULL REFERENCES deployment(id),\n"
    "  phase_id INTEGER NOT NULL REFERENCES phase(id),\n"
    "  seq INTEGER NOT NULL,\n"          // index of the request within its deployment
    "  class TEXT NOT NULL,\n"
    "  replica INTEGER,\n"               // NULL when never dispatched
    "  prompt_tokens INTEGER NOT NULL,\n"
    "  max_tokens INTEGER NOT NULL,\n"
    "  output_tokens INTEGER NOT NULL,\n" // tokens delivered to the client
    "  arrival_ns INTEGER NOT NULL,\n"
    "  dispatch_ns INTEGER,\n"
    "  first_token_ns INTEGER,\n"
    "  finish_ns INTEGER,\n"
    "  status TEXT NOT NULL,\n"          // ok | cancelled | failed | timeout
    "  reason TEXT,\n"                   // ok: length | stop | context; failed: oom, ...
    "  error TEXT,\n"
    "  retries INTEGER NOT NULL DEFAULT 0,\n"
    "  warmup INTEGER NOT NULL DEFAULT 0,\n"
    "  weight_version INTEGER NOT NULL DEFAULT 0,\n"
    "  cached_tokens INTEGER);\n"      // prompt tokens served from the prefix cache; NULL: not
                                        // reported (no prefix caching, a server without it)
    "CREATE INDEX IF NOT EXISTS request_by_deployment ON request(deployment_id, phase_id);\n"
    // A request's token times as one JSON array of integers, written with the request: one
    // row per request rather than per token, the recorder's largest cost otherwise
    // (docs/schema.md, token). The view gives the rows of one token each.
    "CREATE TABLE IF NOT EXISTS token_times(\n"
    "  request_id INTEGER PRIMARY KEY REFERENCES request(id),\n"
    "  t_ns TEXT NOT NULL);\n"          // [t0, t1, ...]: when the client saw each token
    "CREATE VIEW IF NOT EXISTS token(request_id, idx, t_ns) AS\n"
    "  SELECT tt.request_id, j.key, j.value FROM token_times AS tt, json_each(tt.t_ns) AS j;\n"
    // How many token times clients saw in each second of the run's clock, per deployment: kept
    // by the writer as it writes token_times (version 5), so that a plot over an hour's
    // millions of token times reads a few thousand rows.
    "CREATE TABLE IF NOT EXISTS token_second(\n"
    "  run_id INTEGER NOT NULL REFERENCES run(id),\n"
    "  deployment_id INTEGER NOT NULL REFERENCES deployment(id),\n"
    "  second INTEGER NOT NULL,\n"      // t_ns / 1e9 of the token times it counts
    "  tokens INTEGER NOT NULL,\n"
    "  PRIMARY KEY(run_id, deployment_id, second)) WITHOUT ROWID;\n"
    // Engine steps in blocks (version 5): one row per run of consecutive step ids of one
    // deployment, its steps as a JSON array of arrays; the step view gives a row per step, the
    // ids and columns of the version 4 table. A row per step, with its index, was most of the
    // writer's work and of the report's reading (docs/schema.md, step).
    "CREATE TABLE IF NOT EXISTS step_block(\n"
    "  first_id INTEGER PRIMARY KEY,\n"  // step.id of its first step; the others follow it
    "  run_id INTEGER NOT NULL REFERENCES run(id),\n"
    "  deployment_id INTEGER NOT NULL REFERENCES deployment(id),\n"
    "  n INTEGER NOT NULL,\n"            // steps in it
    "  end_ns INTEGER NOT NULL,\n"       // the latest t_ns + duration_ns of its steps
    "  steps TEXT NOT NULL);\n"          // [[replica, t_ns, duration_ns, seqs, prefill_tokens,
                                         //   decode_tokens, preempted, queue_len, running,
                                         //   kv_used, kv_total], ...] in id order
    // a deployment's blocks in id order, and their latest end without reading them
    "CREATE INDEX IF NOT EXISTS step_block_by_deployment ON step_block(deployment_id, first_id,\n"
    "  end_ns);\n"
    "CREATE VIEW IF NOT EXISTS step(id, run_id, deployment_id, replica, t_ns, duration_ns, seqs,\n"
    "  prefill_tokens, decode_tokens, preempted, queue_len, running, kv_used, kv_total) AS\n"
    "  SELECT b.first_id + j.key, b.run_id, b.deployment_id, json_extract(j.value, '$[0]'),\n"
    "    json_extract(j.value, '$[1]'), json_extract(j.value, '$[2]'),\n"
    "    json_extract(j.value, '$[3]'), json_extract(j.value, '$[4]'),\n"
    "    json_extract(j.value, '$[5]'), json_extract(j.value, '$[6]'),\n"
    "    json_extract(j.value, '$[7]'), json_extract(j.value, '$[8]'),\n"
    "    json_extract(j.value, '$[9]'), json_extract(j.value, '$[10]')\n"
    "  FROM step_block AS b, json_each(b.steps) AS j;\n"
    "CREATE TABLE IF NOT EXISTS device_sample(\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  run_id INTEGER NOT NULL REFERENCES run(id),\n"
    "  deployment_id INTEGER NOT NULL REFERENCES deployment(id),\n"
    "  replica INTEGER NOT NULL,\n"
    "  rank INTEGER NOT NULL,\n"
    "  t_ns INTEGER NOT NULL,\n"
    "  mem_used INTEGER NOT NULL,\n"     // bytes
    "  mem_total INTEGER NOT NULL,\n"    // bytes
    "  link_bytes INTEGER);\n"           // bytes sent by collectives so far (NULL: unknown)
    "CREATE TABLE IF NOT EXISTS fault(\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  run_id INTEGER NOT NULL REFERENCES run(id),\n"
    "  deployment_id INTEGER REFERENCES deployment(id),\n"
    "  kind TEXT NOT NULL,\n"
    "  target TEXT,\n"
    "  injected_ns INTEGER NOT NULL,\n"
    "  detected_ns INTEGER,\n"
    "  recovered_ns INTEGER,\n"
    "  affected INTEGER,\n"              // requests affected
    "  detail TEXT);\n"
    "CREATE TABLE IF NOT EXISTS fault_window(\n"
    "  fault_id INTEGER NOT NULL REFERENCES fault(id),\n"
    "  window TEXT NOT NULL,\n"          // before | during | after
    "  start_ns INTEGER NOT NULL,\n"     // requests in [start_ns, end_ns), grouped as `by` says
    "  end_ns INTEGER NOT NULL,\n"
    "  name TEXT NOT NULL,\n"            // metric name
    "  value REAL,\n"
    "  op TEXT,\n"                       // <= | >= when the scenario has an SLO on it
    "  expected REAL,\n"
    "  pass INTEGER,\n"
    "  by TEXT);\n"                       // finish: by when they ended (v5); NULL: by arrival
    "CREATE TABLE IF NOT EXISTS metric(\n"
    "  run_id INTEGER NOT NULL REFERENCES run(id),\n"
    "  deployment_id INTEGER REFERENCES deployment(id),\n" // NULL: across deployments
    "  phase_id INTEGER REFERENCES phase(id),\n"           // NULL: the whole deployment
    "  class TEXT NOT NULL DEFAULT '',\n"                  // '' = every prompt class
    "  name TEXT NOT NULL,\n"
    "  value REAL,\n"                     // NULL: not measured (note says why)
    "  note TEXT);\n"                     // why it has no value; NULL: nothing to say
    "CREATE INDEX IF NOT EXISTS metric_by_run ON metric(run_id, deployment_id, phase_id);\n"
    "CREATE TABLE IF NOT EXISTS verdict(\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  run_id INTEGER NOT NULL REFERENCES run(id),\n"
    "  deployment_id INTEGER NOT NULL REFERENCES deployment(id),\n"
    "  slo TEXT NOT NULL,\n"             // the SLO key, e.g. ttft_p95_ms
    "  op TEXT NOT NULL,\n"              // <= or >=
    "  expected REAL NOT NULL,\n"
    "  actual REAL,\n"                   // NULL: no data (counts as a failure)
    "  pass INTEGER NOT NULL,\n"
    "  note TEXT);\n"                     // "no data: why", "client saturated: ..."; NULL: none
    // version 3: capacity searches (`shardcheck capacity`, docs/capacity.md)
    "CREATE TABLE IF NOT EXISTS capacity(\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  scenario TEXT NOT NULL,\n"
    "  scenario_text TEXT NOT NULL,\n"
    "  git_rev TEXT,\n"
    "  started_at TEXT NOT NULL,\n"      // UTC, ISO 8601
    "  record TEXT NOT NULL,\n"          // the probes' recording level
    "  seed INTEGER NOT NULL,\n"
    "  target_rate REAL NOT NULL,\n"     // requests/s to serve
    "  rate_lo REAL NOT NULL,\n"         // the search range, requests/s
    "  rate_hi REAL NOT NULL,\n"
    "  iters INTEGER NOT NULL,\n"        // --iters: probes per layout less 2
    "  slo TEXT,\n"                      // e.g. \"ttft_p95_ms <= 500, tpot_p95_ms <= 50\"
    "  costs TEXT,\n"                    // cost per GPU-hour per kind
    "  best INTEGER,\n"                  // capacity_layout.idx of the recommendation, NULL none
    "  runner_up INTEGER,\n"
    "  served INTEGER NOT NULL,\n"       // 1 when a layout serves target_rate
    "  note TEXT);\n"                    // the recommendation, or why none
    "CREATE TABLE IF NOT EXISTS capacity_layout(\n"
    "  capacity_id INTEGER NOT NULL REFERENCES capacity(id),\n"
    "  idx INTEGER NOT NULL,\n"
    "  kind TEXT NOT NULL,\n"            // hardware profile
    "  tp INTEGER NOT NULL, pp INTEGER NOT NULL, dp INTEGER NOT NULL, gpus INTEGER NOT NULL,\n"
    "  label TEXT NOT NULL,\n"
    "  cost_per_hour REAL NOT NULL,\n"
    "  max_rate REAL,\n"                 // NULL: no rate of the range passed
    "  capped INTEGER NOT NULL,\n"       // passed at rate_hi: capacity may be higher
    "  output_tok_s REAL,\n"             // at max_rate
    "  cost_per_mtok REAL,\n"            // cost per million output tokens at max_rate
    "  limit_text TEXT,\n"               // what failed just above max_rate
    // version 5: the interval (docs/capacity.md, "The interval")
    "  max_rate_lo REAL,\n"              // capacity at the pessimistic end of the interval
    "  max_rate_hi REAL,\n"              // ... at the optimistic end
    "  error REAL,\n"                    // the interval's relative half-width (0: none)
    "  knee_rate REAL,\n"                // the prediction's knee (docs/capacity.md); NULL: not
                                         // reached
    "  PRIMARY KEY(capacity_id, idx)) WITHOUT ROWID;\n"
    "CREATE TABLE IF NOT EXISTS capacity_point(\n"
    "  capacity_id INTEGER NOT NULL REFERENCES capacity(id),\n"
    "  layout INTEGER NOT NULL,\n"       // capacity_layout.idx
    "  idx INTEGER NOT NULL,\n"          // order simulated
    "  rate REAL NOT NULL,\n"
    "  pass INTEGER NOT NULL,\n"
    "  ttft_p95_ms REAL, tpot_p95_ms REAL, e2el_p95_ms REAL,\n"
    "  output_tok_s REAL,\n"
    "  error_rate REAL,\n"
    "  failed TEXT,\n"                   // the first SLO that failed, or why the run failed
    "  bound INTEGER NOT NULL DEFAULT 0,\n" // version 5: 0 the prediction's search, -1 the
                                         // pessimistic bound's, 1 the optimistic's
    "  PRIMARY KEY(capacity_id, layout, idx)) WITHOUT ROWID;\n";
