// The results database (reports/store.h): opening, checking and migrating the schema, the
// prepared statements that write a run's rows in batched transactions (steps as step_block
// rows, token times counted per second into token_second as each transaction commits), and
// the run listing that `shardcheck runs`, the report and the gate start from (its query is
// reports/query.c's).
//
// Durability model: WAL journal, synchronous=NORMAL. Every write joins one transaction that is
// opened lazily (BEGIN IMMEDIATE) and committed by store_flush, store_run_begin, store_run_end
// or store_close, so a process killed at any point leaves the last committed state: a file that
// passes PRAGMA integrity_check, holding every flushed row. A run whose process died keeps the
// status "running" in the file; store_runs_list shows it as "incomplete".
//
// Left to others: the DDL (reports/schema.c), what rows a run writes and when it flushes
// (runner/runner.c, contract in docs/schema.md), every read query (reports/query.c: the
// reports, the gate and the run listing read through it), marking baselines, finding the source revision a run records (the CLI:
// cli_git_rev in cli/cmd_common.c).
#include "reports/store.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kernels/util.h"
#include "reports/query.h"

// --- the handle

enum {
  BUSY_TIMEOUT_MS = 5000, // how long a statement waits for another process's lock
  STEP_BLOCK_MAX = 256,   // steps per step_block row at most
  STEP_JSON_MAX = 11 * 21 + 2, // bytes of one step in a block: 11 numbers with a sign or a
                               // comma each, brackets
};

// Prepared statements, created on first use and kept until store_close.
enum {
  ST_BEGIN,
  ST_COMMIT,
  ST_SP_BEGIN,
  ST_SP_RELEASE,
  ST_SP_ROLLBACK,
  ST_RUN_INSERT,
  ST_RUN_END,
  ST_DEP_INSERT,
  ST_DEP_END,
  ST_PHASE_INSERT,
  ST_PHASE_END,
  ST_REQUEST,
  ST_TOKEN,
  ST_TOKEN_SECOND,
  ST_STEP_BLOCK,
  ST_STEP_NEXT_ID,
  ST_DEVICE,
  ST_SERVER,
  ST_FAULT,
  ST_FAULT_WINDOW,
  ST_METRIC,
  ST_VERDICT,
  ST_COUNT
};

static const char *const st_sql[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_SP_BEGIN] = "SAVEPOINT store_request",
    [ST_SP_RELEASE] = "RELEASE store_request",
    [ST_SP_ROLLBACK] = "ROLLBACK TO store_request",
    [ST_RUN_INSERT] = "INSERT INTO run(scenario, scenario_path, scenario_text, mode, backend, "
                      "model, git_rev, host, pid, seed, config, started_at, status) "
                      "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,'running')",
    [ST_RUN_END] = "UPDATE run SET status=?, verdict=?, error=?, ended_at=?, duration_ns=? "
                   "WHERE id=?",
    [ST_DEP_INSERT] = "INSERT INTO deployment(run_id, idx, label, tp, pp, dp, gpus, start_ns, "
                      "status) VALUES(?,?,?,?,?,?,?,?,'running')",
    [ST_DEP_END] = "UPDATE deployment SET status=?, error=?, end_ns=? WHERE id=?",
    [ST_PHASE_INSERT] = "INSERT INTO phase(run_id, deployment_id, idx, name, kind, concurrency, "
                        "rate, arrival, start_ns, warmup_end_ns) VALUES(?,?,?,?,?,?,?,?,?,?)",
    [ST_PHASE_END] = "UPDATE phase SET end_ns=? WHERE id=?",
    [ST_REQUEST] = "INSERT INTO request(run_id, deployment_id, phase_id, seq, class, replica, "
                   "prompt_tokens, max_tokens, output_tokens, arrival_ns, dispatch_ns, "
                   "first_token_ns, finish_ns, status, reason, error, retries, warmup, "
                   "weight_version, cached_tokens) "
                   "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
    [ST_TOKEN] = "INSERT INTO token_times(request_id, t_ns) VALUES(?,?)",
    [ST_TOKEN_SECOND] = "INSERT INTO token_second(run_id, deployment_id, second, tokens) "
                        "VALUES(?,?,?,?) ON CONFLICT(run_id, deployment_id, second) DO UPDATE "
                        "SET tokens = tokens + excluded.tokens",
    [ST_STEP_BLOCK] = "INSERT INTO step_block(first_id, run_id, deployment_id, n, end_ns, steps) "
                      "VALUES(?,?,?,?,?,?)",
    [ST_STEP_NEXT_ID] = "SELECT coalesce((SELECT first_id + n FROM step_block ORDER BY first_id "
                        "DESC LIMIT 1), 1)",
    [ST_DEVICE] = "INSERT INTO device_sample(run_id, deployment_id, replica, rank, t_ns, "
                  "mem_used, mem_total, link_bytes) VALUES(?,?,?,?,?,?,?,?)",
    [ST_SERVER] = "INSERT INTO server_sample(run_id, deployment_id, replica, t_ns, running, "
                  "waiting, kv_usage, kv_blocks) VALUES(?,?,?,?,?,?,?,?)",
    [ST_FAULT] = "INSERT INTO fault(run_id, deployment_id, kind, target, injected_ns, "
                 "detected_ns, recovered_ns, affected, detail) VALUES(?,?,?,?,?,?,?,?,?)",
    [ST_FAULT_WINDOW] = "INSERT INTO fault_window(fault_id, window, start_ns, end_ns, name, "
                        "value, op, expected, pass, by) VALUES(?,?,?,?,?,?,?,?,?,'finish')",
    [ST_METRIC] = "INSERT INTO metric(run_id, deployment_id, phase_id, class, name, value, note) "
                  "VALUES(?,?,?,?,?,?,?)",
    [ST_VERDICT] = "INSERT INTO verdict(run_id, deployment_id, slo, op, expected, actual, pass, "
                   "note) VALUES(?,?,?,?,?,?,?,?)",
};

// Token times counted in one second of a deployment, not yet in token_second.
typedef struct token_count {
  int64_t run_id, deployment_id;
  int64_t second;                 // t_ns / 1e9
  int64_t tokens;
} token_count;

struct store {
  sqlite3 *db;
  char *path;                     // as given to store_open (owned)
  bool readonly;
  sqlite3_stmt *st[ST_COUNT];     // NULL until first used
  char *times;                    // a request's token times as JSON text (grown, reused)
  size_t times_cap;
  char *steps;                    // a step block as JSON text (STEP_BLOCK_MAX steps)
  token_count *counts;            // (n_counts) the open transaction's token times per second,
  int n_counts, cap_counts;       // written to token_second when it commits
  int64_t next_step_id;           // the next step block's first id; 0: read it (at the first
                                  // block of each write transaction, which holds the lock)
  char host[256];                 // this machine's host name ("" when unknown)
  bool have_server_sample;        // the server_sample table exists (made on first use)
};

// --- errors

// SQLite result code -> status: constraint and format problems are bad input, memory is OOM,
// the rest (locking, disk, permissions) is I/O.
static sc_status status_of(int rc) {
  switch (rc & 0xff) {
  case SQLITE_CONSTRAINT:
  case SQLITE_NOTADB:
  case SQLITE_MISMATCH:
  case SQLITE_RANGE: return SC_INVALID;
  case SQLITE_NOMEM: return SC_OOM;
  default: return SC_IO;
  }
}

// Records "PATH: WHAT: sqlite3_errmsg" and returns the status of rc.
static sc_status db_fail(store *s, int rc, const char *what, sc_error *err) {
  return sc_fail(err, status_of(rc), "%s: %s: %s", s->path, what,
                 s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
}

// --- small helpers

// *out = the prepared statement k (prepared on first use, owned by the store).
static sc_status prep(store *s, int k, sqlite3_stmt **out, sc_error *err) {
  *out = s->st[k];
  if (*out) return SC_OK;
  int rc = sqlite3_prepare_v3(s->db, st_sql[k], -1, SQLITE_PREPARE_PERSISTENT, &s->st[k], NULL);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(s->st[k]);
    s->st[k] = NULL;
    return db_fail(s, rc, "preparing a statement", err);
  }
  *out = s->st[k];
  return SC_OK;
}

// Steps a statement that returns no rows and resets it; bindings stay for the next use.
static sc_status exec_stmt(store *s, sqlite3_stmt *st, const char *what, sc_error *err) {
  int rc = sqlite3_step(st);
  sc_status r = rc == SQLITE_DONE ? SC_OK : db_fail(s, rc, what, err);
  sqlite3_reset(st);
  return r;
}

static sc_status exec_k(store *s, int k, const char *what, sc_error *err) {
  sqlite3_stmt *st;
  SC_TRY(prep(s, k, &st, err));
  return exec_stmt(s, st, what, err);
}

static sc_status exec_sql(store *s, const char *sql, const char *what, sc_error *err) {
  int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
  return rc == SQLITE_OK ? SC_OK : db_fail(s, rc, what, err);
}

static void bind_text(sqlite3_stmt *st, int i, const char *v) {
  if (v) sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC);
  else sqlite3_bind_null(st, i);
}

static void bind_i64(sqlite3_stmt *st, int i, int64_t v) { sqlite3_bind_int64(st, i, v); }

// ns counters are stored as signed 64-bit integers (enough for 292 years).
static void bind_ns(sqlite3_stmt *st, int i, uint64_t v) {
  sqlite3_bind_int64(st, i, (sqlite3_int64)v);
}

static void bind_ns_opt(sqlite3_stmt *st, int i, bool has, uint64_t v) {
  if (has) bind_ns(st, i, v);
  else sqlite3_bind_null(st, i);
}

static void bind_id_opt(sqlite3_stmt *st, int i, int64_t id) { // 0 -> NULL
  if (id) sqlite3_bind_int64(st, i, id);
  else sqlite3_bind_null(st, i);
}

static void bind_real_opt(sqlite3_stmt *st, int i, double v) { // NaN / inf -> NULL
  if (isfinite(v)) sqlite3_bind_double(st, i, v);
  else sqlite3_bind_null(st, i);
}

// Opens the write transaction when none is open. Another writer may have added steps since
// our last transaction: the next step id is read again under the new one's lock.
static sc_status tx_begin(store *s, sc_error *err) {
  if (s->readonly) return sc_fail(err, SC_INVALID, "%s: opened read-only, cannot write", s->path);
  if (!sqlite3_get_autocommit(s->db)) return SC_OK;
  s->next_step_id = 0;
  s->n_counts = 0; // counts of a transaction that did not commit went with it
  return exec_k(s, ST_BEGIN, "beginning a write transaction", err);
}

static bool one_of(const char *v, const char *const *allowed) {
  for (; v && *allowed; allowed++)
    if (!strcmp(v, *allowed)) return true;
  return false;
}

// "YYYY-MM-DDTHH:MM:SSZ" for now (UTC) into buf[32].
static void utc_now(char *buf, size_t cap) {
  time_t t = time(NULL);
  struct tm tm;
  if (!gmtime_r(&t, &tm) || !strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm)) buf[0] = 0;
}

// --- opening

// Reads meta.schema_version into *version: -1 when there is no such row, 0 when its value is
// not a positive integer.
static int read_version(store *s, long *version) {
  sqlite3_stmt *st = NULL;
  *version = -1;
  int rc = sqlite3_prepare_v2(s->db, "SELECT value FROM meta WHERE key = 'schema_version'", -1,
                              &st, NULL);
  if (rc != SQLITE_OK) return rc;
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    const char *v = (const char *)sqlite3_column_text(st, 0);
    char *end = NULL;
    errno = 0;
    *version = v ? strtol(v, &end, 10) : -1;
    if (!v || errno || *end || *version < 1) *version = 0;
  }
  sqlite3_finalize(st);
  return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
}

// Adds column `decl` ("name TYPE ...") to table unless it has a column of that name.
static sc_status add_column(store *s, const char *table, const char *decl, sc_error *err) {
  char name[64], sql[256];
  snprintf(name, sizeof name, "%.*s", (int)strcspn(decl, " "), decl);
  snprintf(sql, sizeof sql, "SELECT count(*) FROM pragma_table_info('%s') WHERE name = '%s'",
           table, name);
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
  bool has = rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) > 0;
  sqlite3_finalize(st);
  if (rc != SQLITE_OK) return db_fail(s, rc, "reading a table's columns", err);
  if (has) return SC_OK;
  snprintf(sql, sizeof sql, "ALTER TABLE %s ADD COLUMN %s", table, decl);
  return exec_sql(s, sql, "migrating the schema to version 5", err);
}

static sc_status write_step_block(store *s, int64_t first_id, const store_step *const *rows,
                                  int n, sc_error *err);

// Version 4's step table (a row per step) into step_blocks of up to STEP_BLOCK_MAX steps with
// consecutive ids, each step keeping its id; inside migrate's transaction.
static sc_status migrate_steps(store *s, sc_error *err) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(s->db,
                              "SELECT id, run_id, deployment_id, replica, t_ns, duration_ns, "
                              "seqs, prefill_tokens, decode_tokens, preempted, queue_len, "
                              "running, kv_used, kv_total FROM step_v4 ORDER BY id",
                              -1, &st, NULL);
  if (rc != SQLITE_OK) return db_fail(s, rc, "migrating the step rows to version 5", err);
  store_step *rows = malloc(STEP_BLOCK_MAX * sizeof *rows);
  const store_step **ptrs = malloc(STEP_BLOCK_MAX * sizeof *ptrs);
  sc_status r = rows && ptrs ? SC_OK
                             : sc_fail(err, SC_OOM, "%s: out of memory migrating steps", s->path);
  int n = 0;
  int64_t first = 0;
  while (r == SC_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t id = sqlite3_column_int64(st, 0);
    store_step x = {.run_id = sqlite3_column_int64(st, 1),
                    .deployment_id = sqlite3_column_int64(st, 2),
                    .replica = sqlite3_column_int(st, 3),
                    .t_ns = (uint64_t)sqlite3_column_int64(st, 4),
                    .duration_ns = (uint64_t)sqlite3_column_int64(st, 5),
                    .seqs = sqlite3_column_int(st, 6),
                    .prefill_tokens = sqlite3_column_int(st, 7),
                    .decode_tokens = sqlite3_column_int(st, 8),
                    .preempted = sqlite3_column_int(st, 9),
                    .queue_len = sqlite3_column_int(st, 10),
                    .running = sqlite3_column_int(st, 11),
                    .kv_used = sqlite3_column_int(st, 12),
                    .kv_total = sqlite3_column_int(st, 13)};
    if (n && (n == STEP_BLOCK_MAX || id != first + n || x.run_id != rows[0].run_id ||
              x.deployment_id != rows[0].deployment_id)) {
      r = write_step_block(s, first, ptrs, n, err);
      n = 0;
    }
    if (!n) first = id;
    rows[n] = x;
    ptrs[n] = &rows[n];
    n++;
  }
  if (r == SC_OK && rc != SQLITE_DONE)
    r = db_fail(s, rc, "migrating the step rows to version 5", err);
  if (r == SC_OK && n) r = write_step_block(s, first, ptrs, n, err);
  sqlite3_finalize(st);
  free(rows);
  free(ptrs);
  return r;
}

// Migrates an older file to the current version in one transaction, each version's steps in
// turn: version 1 gains run.repeat_group and run.repeat_index; version 3's token table (a row
// per token) becomes token_times (a row per request, its times in index order) and the token
// view; version 4 (and the columns older versions have) gains metric.note, verdict.note,
// fault_window.by and the capacity interval's columns, its step table (a row per step)
// becomes step_block (runs of consecutive steps) and the step view, with the same ids, and
// its token times are counted into token_second; the schema text creates what is missing
// (fault_window, the capacity tables, the views). Another process may have migrated the
// file between our read and the lock: the version is read again under it. On error the
// file is left as it was.
static sc_status migrate(store *s, sc_error *err) {
  SC_TRY(exec_sql(s, "BEGIN IMMEDIATE", "migrating the schema", err));
  long version;
  int rc = read_version(s, &version);
  sc_status r = rc == SQLITE_OK ? SC_OK : db_fail(s, rc, "reading meta.schema_version", err);
  if (r == SC_OK && version == 1)
    r = exec_sql(s,
                 "ALTER TABLE run ADD COLUMN repeat_group INTEGER;"
                 " ALTER TABLE run ADD COLUMN repeat_index INTEGER;",
                 "migrating the schema from version 1", err);
  if (r == SC_OK && version >= 1 && version <= 3)
    r = exec_sql(s,
                 "CREATE TABLE token_times(request_id INTEGER PRIMARY KEY REFERENCES request(id),"
                 "  t_ns TEXT NOT NULL);"
                 " INSERT INTO token_times(request_id, t_ns) SELECT request_id, "
                 "  json_group_array(t_ns) FROM (SELECT request_id, t_ns FROM token"
                 "  ORDER BY request_id, idx) GROUP BY request_id;"
                 " DROP TABLE token;",
                 "migrating the token rows to version 4", err);
  // version 5's columns, each added once (a file whose version was set back by hand may have
  // some); a table younger than the file's version comes whole from the schema text
  static const struct {
    const char *table, *decl;
    long since; // the version that made the table
  } added[] = {{"metric", "note TEXT", 1},
               {"verdict", "note TEXT", 1},
               {"fault_window", "by TEXT", 2},
               {"capacity_layout", "max_rate_lo REAL", 3},
               {"capacity_layout", "max_rate_hi REAL", 3},
               {"capacity_layout", "error REAL", 3},
               {"capacity_layout", "knee_rate REAL", 3},
               {"capacity_point", "bound INTEGER NOT NULL DEFAULT 0", 3},
               {"request", "cached_tokens INTEGER", 1}};
  for (size_t k = 0; r == SC_OK && version <= 4 && k < sizeof added / sizeof *added; k++)
    if (version >= added[k].since) r = add_column(s, added[k].table, added[k].decl, err);
  bool steps = version >= 1 && version <= 4 && r == SC_OK;
  if (steps) { // a step table to turn into blocks (a file without one just gains the view)
    sqlite3_stmt *st = NULL;
    steps = sqlite3_prepare_v2(s->db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                               "name = 'step'", -1, &st, NULL) == SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
  }
  if (r == SC_OK && steps)
    r = exec_sql(s, "DROP INDEX IF EXISTS step_by_deployment; ALTER TABLE step RENAME TO step_v4;",
                 "migrating the step rows to version 5", err);
  if (r == SC_OK && version < store_schema_version)
    r = exec_sql(s, store_schema_sql, "migrating the schema", err);
  if (r == SC_OK && steps) r = migrate_steps(s, err);
  if (r == SC_OK && steps)
    r = exec_sql(s, "DROP TABLE step_v4", "migrating the step rows to version 5", err);
  if (r == SC_OK && version >= 1 && version <= 4)
    r = exec_sql(s,
                 "INSERT INTO token_second(run_id, deployment_id, second, tokens)"
                 " SELECT r.run_id, r.deployment_id, j.value / 1000000000, count(*)"
                 " FROM token_times AS tt JOIN request AS r ON r.id = tt.request_id,"
                 " json_each(tt.t_ns) AS j GROUP BY 1, 2, 3",
                 "counting the token times per second (version 5)", err);
  if (r == SC_OK && version < store_schema_version) {
    char sql[96];
    snprintf(sql, sizeof sql, "UPDATE meta SET value = '%d' WHERE key = 'schema_version'",
             store_schema_version);
    r = exec_sql(s, sql, "migrating the schema", err);
  }
  if (r == SC_OK) r = exec_sql(s, "COMMIT", "committing the schema migration", err);
  if (r != SC_OK) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
  return r;
}

// Reads meta.schema_version; checks the file is ours and not newer. *empty is true when the
// file has no tables at all.
static sc_status check_schema(store *s, bool *empty, sc_error *err) {
  sqlite3_stmt *st = NULL;
  const char *q = "SELECT count(*), coalesce(sum(name = 'meta'), 0), "
                  "coalesce(sum(name = 'run'), 0) FROM sqlite_master WHERE type = 'table'";
  int rc = sqlite3_prepare_v2(s->db, q, -1, &st, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    sc_status r = (rc & 0xff) == SQLITE_NOTADB
                      ? sc_fail(err, SC_INVALID, "%s is not a shardcheck results database: %s",
                                s->path, sqlite3_errmsg(s->db))
                      : db_fail(s, rc, "reading the schema", err);
    sqlite3_finalize(st);
    return r;
  }
  int n_tables = sqlite3_column_int(st, 0), has_meta = sqlite3_column_int(st, 1),
      has_run = sqlite3_column_int(st, 2);
  sqlite3_finalize(st);
  *empty = n_tables == 0;
  if (*empty) return SC_OK;
  const char *why = !has_run ? "it has no run table" : "it has no meta table";
  long version = -1;
  if (has_meta && has_run) {
    why = "it has no schema_version in its meta table";
    rc = read_version(s, &version);
    if ((rc & 0xff) == SQLITE_ERROR)
      return sc_fail(err, SC_INVALID, "%s is not a shardcheck results database (reading "
                     "meta.schema_version: %s)", s->path, sqlite3_errmsg(s->db));
    if (rc != SQLITE_OK) return db_fail(s, rc, "reading meta.schema_version", err);
    if (version == 0) why = "its schema_version is not a positive integer";
  }
  if (version < 1)
    return sc_fail(err, SC_INVALID, "%s is not a shardcheck results database (%s)", s->path, why);
  if (version > store_schema_version)
    return sc_fail(err, SC_INVALID, "%s has schema version %ld, newer than this shardcheck (%d)",
                   s->path, version, store_schema_version);
  // An older file is migrated in place when opened for writing. A reader takes it as it is:
  // version 1 lacks run.repeat_group and run.repeat_index (every run its own group), version 2
  // the capacity tables (no searches), version 3 has a token table where version 4 has the
  // token view over token_times (the same rows), version 4 lacks the notes of metrics and
  // verdicts (none to show) and fault_window.by (its windows group requests by arrival), and
  // has a step table where version 5 has the step view over step_block (the same rows) and no
  // token_second (reports/query.c reads the rows themselves then).
  if (version < store_schema_version && !s->readonly) return migrate(s, err);
  return SC_OK;
}

static sc_status create_schema(store *s, sc_error *err) {
  SC_TRY(exec_sql(s, store_schema_sql, "creating the schema", err));
  char sql[128];
  snprintf(sql, sizeof sql, "INSERT INTO meta(key, value) VALUES('schema_version', '%d')",
           store_schema_version);
  return exec_sql(s, sql, "writing meta.schema_version", err);
}

// SQLite's memory statistics take a global mutex on every allocation, which none of shardcheck
// reads; off before SQLite initializes (afterwards sqlite3_config refuses, and they stay on).
static pthread_once_t sqlite_once = PTHREAD_ONCE_INIT;
static void sqlite_setup(void) { (void)sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0); }

static sc_status open_common(const char *path, bool readonly, store **out, sc_error *err) {
  *out = NULL;
  if (!path || !*path) return sc_fail(err, SC_INVALID, "results database: empty path");
  store *s = calloc(1, sizeof *s);
  char *p = strdup(path);
  if (!s || !p) {
    free(s);
    free(p);
    return sc_fail(err, SC_OOM, "%s: out of memory opening the results database", path);
  }
  s->path = p;
  s->readonly = readonly;
  if (gethostname(s->host, sizeof s->host) != 0) s->host[0] = 0;
  s->host[sizeof s->host - 1] = 0;

  // NOMUTEX: a connection is used by one thread at a time (the recorder's store lock), so
  // SQLite's own lock on every call, a dozen per step row, is not needed.
  int flags = (readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) |
              SQLITE_OPEN_NOMUTEX;
  pthread_once(&sqlite_once, sqlite_setup);
  int rc = sqlite3_open_v2(path, &s->db, flags, NULL);
  sc_status r = SC_OK;
  if (rc != SQLITE_OK) {
    r = sc_fail(err, rc == SQLITE_NOMEM ? SC_OOM : SC_IO, "%s: cannot open the results "
                "database: %s", path, s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
    goto fail;
  }
  sqlite3_extended_result_codes(s->db, 1);
  sqlite3_busy_timeout(s->db, BUSY_TIMEOUT_MS);
  if (!readonly && sqlite3_db_readonly(s->db, "main") == 1) {
    r = sc_fail(err, SC_IO, "%s: cannot open the results database for writing (read-only "
                "file or directory)", path);
    goto fail;
  }
  bool empty = false;
  if ((r = check_schema(s, &empty, err)) != SC_OK) goto fail;
  if (readonly) {
    if (empty) {
      r = sc_fail(err, SC_INVALID, "%s is not a shardcheck results database (it has no tables)",
                  path);
      goto fail;
    }
    *out = s;
    return SC_OK;
  }
  // journal_mode answers a row: sqlite3_exec runs it to completion. temp_store=MEMORY keeps
  // the sub-journal of each request's savepoint (the pages it touched, as they were) in
  // memory: past 64 KiB SQLite spilled it to a file in /var/tmp, and those writes were most
  // of the writer's system calls (an hour of simulated dp=4 serving: 9.8-10.1 -> 7.5-7.6 s).
  if ((r = exec_sql(s, "PRAGMA journal_mode=WAL", "switching to WAL", err)) != SC_OK ||
      (r = exec_sql(s, "PRAGMA synchronous=NORMAL", "setting synchronous", err)) != SC_OK ||
      (r = exec_sql(s, "PRAGMA temp_store=MEMORY", "setting temp_store", err)) != SC_OK ||
      (r = exec_sql(s, "PRAGMA cache_size=-65536", "setting cache_size", err)) != SC_OK ||
      (r = exec_sql(s, "PRAGMA foreign_keys=ON", "setting foreign_keys", err)) != SC_OK)
    goto fail;
  if (empty) {
    // Create in one transaction; check again inside it, another process may have won.
    if ((r = exec_sql(s, "BEGIN IMMEDIATE", "beginning the schema transaction", err)) != SC_OK)
      goto fail;
    if ((r = check_schema(s, &empty, err)) == SC_OK && empty) r = create_schema(s, err);
    if (r == SC_OK) r = exec_sql(s, "COMMIT", "committing the schema", err);
    if (r != SC_OK) {
      sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
      goto fail;
    }
  }
  *out = s;
  return SC_OK;
fail:
  store_close(s);
  return r;
}

sc_status store_open(const char *path, store **out, sc_error *err) {
  return open_common(path, false, out, err);
}

sc_status store_open_readonly(const char *path, store **out, sc_error *err) {
  *out = NULL;
  struct stat sb;
  if (path && *path && stat(path, &sb) != 0)
    return sc_fail(err, SC_IO, "%s: cannot open the results database: %s", path,
                   strerror(errno));
  return open_common(path, true, out, err);
}

// Writes the open transaction's token counts to token_second (adding to the rows of seconds
// already there). On error the counts not yet written stay pending, for the next commit.
static sc_status write_token_counts(store *s, sc_error *err) {
  if (!s->n_counts) return SC_OK;
  sqlite3_stmt *st;
  SC_TRY(prep(s, ST_TOKEN_SECOND, &st, err));
  int i = 0; // written
  sc_status r = SC_OK;
  while (r == SC_OK && i < s->n_counts) {
    const token_count *c = &s->counts[i];
    bind_i64(st, 1, c->run_id);
    bind_i64(st, 2, c->deployment_id);
    bind_i64(st, 3, c->second);
    bind_i64(st, 4, c->tokens);
    r = exec_stmt(s, st, "counting token times per second", err);
    if (r == SC_OK) i++;
  }
  memmove(s->counts, s->counts + i, (size_t)(s->n_counts - i) * sizeof *s->counts);
  s->n_counts -= i;
  return r;
}

void store_close(store *s) {
  if (!s) return;
  if (s->db && !sqlite3_get_autocommit(s->db)) {
    // Commit what is pending; on failure (nothing to report it to) SQLite rolls it back.
    sc_error ignored;
    if (write_token_counts(s, &ignored) != SC_OK ||
        sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
      sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
  }
  for (int k = 0; k < ST_COUNT; k++) sqlite3_finalize(s->st[k]);
  sqlite3_close_v2(s->db);
  free(s->times);
  free(s->steps);
  free(s->counts);
  free(s->path);
  free(s);
}

sqlite3 *store_db(store *s) { return s ? s->db : NULL; }

sc_status store_flush(store *s, sc_error *err) {
  if (sqlite3_get_autocommit(s->db)) return SC_OK;
  SC_TRY(write_token_counts(s, err));
  return exec_k(s, ST_COMMIT, "committing", err);
}

// --- writing a run

sc_status store_run_begin(store *s, const store_run *r, int64_t *run_id, sc_error *err) {
  if (!r->scenario || !r->scenario_text || !r->mode)
    return sc_fail(err, SC_INVALID, "%s: a run needs a scenario name, text and mode", s->path);
  char started[32];
  utc_now(started, sizeof started);
  SC_TRY(tx_begin(s, err));
  sqlite3_stmt *st;
  SC_TRY(prep(s, ST_RUN_INSERT, &st, err));
  bind_text(st, 1, r->scenario);
  bind_text(st, 2, r->scenario_path);
  bind_text(st, 3, r->scenario_text);
  bind_text(st, 4, r->mode);
  bind_text(st, 5, r->backend);
  bind_text(st, 6, r->model);
  bind_text(st, 7, r->git_rev && r->git_rev[0] ? r->git_rev : NULL);
  bind_text(st, 8, s->host[0] ? s->host : NULL);
  bind_i64(st, 9, (int64_t)getpid());
  bind_i64(st, 10, (int64_t)r->seed); // seeds >= 2^63 read back negative (same 64 bits)
  bind_text(st, 11, r->config);
  bind_text(st, 12, started);
  SC_TRY(exec_stmt(s, st, "inserting the run row", err));
  if (run_id) *run_id = sqlite3_last_insert_rowid(s->db);
  return store_flush(s, err);
}

sc_status store_run_end(store *s, int64_t run_id, const char *status, const char *verdict,
                        const char *error, uint64_t duration_ns, sc_error *err) {
  static const char *const statuses[] = {"complete", "interrupted", "failed", NULL};
  static const char *const verdicts[] = {"pass", "fail", NULL};
  if (!one_of(status, statuses))
    return sc_fail(err, SC_INVALID, "%s: run %lld: status must be complete, interrupted or "
                   "failed, got '%s'", s->path, (long long)run_id, status ? status : "(null)");
  if (verdict && !one_of(verdict, verdicts))
    return sc_fail(err, SC_INVALID, "%s: run %lld: verdict must be pass, fail or NULL, got '%s'",
                   s->path, (long long)run_id, verdict);
  char ended[32];
  utc_now(ended, sizeof ended);
  SC_TRY(tx_begin(s, err));
  sqlite3_stmt *st;
  SC_TRY(prep(s, ST_RUN_END, &st, err));
  bind_text(st, 1, status);
  bind_text(st, 2, verdict);
  bind_text(st, 3, error);
  bind_text(st, 4, ended);
  bind_ns(st, 5, duration_ns);
  bind_i64(st, 6, run_id);
  SC_TRY(exec_stmt(s, st, "ending the run", err));
  if (sqlite3_changes(s->db) != 1)
    return sc_fail(err, SC_INVALID, "no run %lld in %s", (long long)run_id, s->path);
  return store_flush(s, err);
}

sc_status store_deployment_begin(store *s, const store_deployment *d, int64_t *id, sc_error *err) {
  char label[64];
  snprintf(label, sizeof label, "tp%d pp%d dp%d", d->tp, d->pp, d->dp);
  SC_TRY(tx_begin(s, err));
  sqlite3_stmt *st;
  SC_TRY(prep(s, ST_DEP_INSERT, &st, err));
  bind_i64(st, 1, d->run_id);
  bind_i64(st, 2, d->idx);
  bind_text(st, 3, d->label ? d->label : label);
  bind_i64(st, 4, d->tp);
  bind_i64(st, 5, d->pp);
  bind_i64(st, 6, d->dp);
  bind_i64(st, 7, (int64_t)d->tp * d->pp * d->dp);
  bind_ns(st, 8, d->start_ns);
  SC_TRY(exec_stmt(s, st, "inserting a deployment row", err));
  if (id) *id = sqlite3_last_insert_rowid(s->db);
  return SC_OK;
}

sc_status store_deployment_end(store *s, int64_t id, const char *status, const char *error,
                               uint64_t end_ns, sc_error *err) {
  static const char *const statuses[] = {"complete", "interrupted", "failed", NULL};
  if (!one_of(status, statuses))
    return sc_fail(err, SC_INVALID, "%s: deployment %lld: status must be complete, interrupted "
                   "or failed, got '%s'", s->path, (long long)id, status ? status : "(null)");
  SC_TRY(tx_begin(s, err));
  sqlite3_stmt *st;
  SC_TRY(prep(s, ST_DEP_END, &st, err));
  bind_text(st, 1, status);
  bind_text(st, 2, error);
  bind_ns(st, 3, end_ns);
  bind_i64(st, 4, id);
  SC_TRY(exec_stmt(s, st, "ending a deployment", err));
  if (sqlite3_changes(s->db) != 1)
    return sc_fail(err, SC_INVALID, "no deployment %lld in %s", (long long)id, s->path);
  return SC_OK;
}

sc_status store_phase_begin(store *s, const store_phase *p, int64_t *id, sc_error *err) {
  if (!p->name || !p->kind)
    return sc_fail(err, SC_INVALID, "%s: a phase needs a name and a kind", s->path);
  SC_TRY(tx_begin(s, err));
  sqlite3_stmt *st;
  SC_TRY(prep(s, ST_PHASE_INSERT, &st, err));
  bind_i64(st, 1, p->run_id);
  bind_i64(st, 2, p->deployment_id);
  bind_i64(st, 3, p->idx);
  bind_text(st, 4, p->name);
  bind_text(st, 5, p->kind);
  if (p->concurrency) bind_i64(st, 6, p->concurrency);
  else sqlite3_bind_null(st, 6);
  if (p->rate != 0) bind_real_opt(st, 7, p->rate);
  else sqlite3_bind_null(st, 7);
  bind_text(st, 8, p->arrival);
  bind_ns(st, 9, p->start_ns);
  bind_ns(st, 10, p->warmup_end_ns);
  SC_TRY(exec_stmt(s, st, "inserting a phase row", err));
  if (id) *id = sqlite3_last_insert_rowid(s->db);
  return SC_OK;
}

sc_status store_phase_end(store *s, int64_t id, uint64_t end_ns, sc_error *err) {
  SC_TRY(tx_begin(s, err));
  sqlite3_stmt *st;
  SC_TRY(prep(s, ST_PHASE_END, &st, err));
  bind_ns(st, 1, end_ns);
  bind_i64(st, 2, id);
  SC_TRY(exec_stmt(s, st, "ending a phase", err));
  if (sqlite3_changes(s->db) != 1)
    return sc_fail(err, SC_INVALID, "no phase %lld in %s", (long long)id, s->path);
  return SC_OK;
}

// The request row and its tokens, inside the savepoint store_request_add opened.
static sc_status request_rows(store *s, const store_request *r, const uint64_t *token_ns,
                              int n_tokens, int64_t *id, sc_error *err) {
  sqlite3_stmt *st;
  SC_TRY(prep(s, ST_REQUEST, &st, err));
  bind_i64(st, 1, r->run_id);
  bind_i64(st, 2, r->deployment_id);
  bind_i64(st, 3, r->phase_id);
  bind_i64(st, 4, r->seq);
  bind_text(st, 5, r->class_name ? r->class_name : "");
  if (r->replica >= 0) bind_i64(st, 6, r->replica);
  else sqlite3_bind_null(st, 6);
  bind_i64(st, 7, r->prompt_tokens);
  bind_i64(st, 8, r->max_tokens);
  bind_i64(st, 9, r->output_tokens);
  bind_ns(st, 10, r->arrival_ns);
  bind_ns_opt(st, 11, r->has_dispatch, r->dispatch_ns);
  bind_ns_opt(st, 12, r->has_first_token, r->first_token_ns);
  bind_ns_opt(st, 13, r->has_finish, r->finish_ns);
  bind_text(st, 14, r->status);
  bind_text(st, 15, r->reason);
  bind_text(st, 16, r->error);
  bind_i64(st, 17, r->retries);
  bind_i64(st, 18, r->warmup ? 1 : 0);
  bind_i64(st, 19, r->weight_version);
  if (r->has_cached) bind_i64(st, 20, r->cached_tokens);
  else sqlite3_bind_null(st, 20);
  SC_TRY(exec_stmt(s, st, "inserting a request row", err));
  int64_t rid = sqlite3_last_insert_rowid(s->db);
  if (id) *id = rid;
  if (n_tokens <= 0) return SC_OK;
  // The hot path (every generated token passes here): the times as one JSON array, written
  // by hand (digits only), in a buffer the handle keeps; one row per request.
  size_t need = (size_t)n_tokens * 21 + 2; // 20 digits and a comma each, the brackets
  if (need > s->times_cap) {
    char *p = realloc(s->times, need);
    if (!p) return sc_fail(err, SC_OOM, "%s: request %lld: out of memory for %d token times",
                           s->path, (long long)r->seq, n_tokens);
    s->times = p;
    s->times_cap = need;
  }
  char *p = s->times;
  *p++ = '[';
  for (int i = 0; i < n_tokens; i++) {
    if (i) *p++ = ',';
    char digits[20], *end = digits + sizeof digits;
    const char *d = sc_u64_digits(token_ns[i] > INT64_MAX ? INT64_MAX : token_ns[i], end);
    memcpy(p, d, (size_t)(end - d));
    p += end - d;
  }
  *p++ = ']';
  sqlite3_stmt *tk;
  SC_TRY(prep(s, ST_TOKEN, &tk, err));
  sqlite3_bind_int64(tk, 1, rid);
  sqlite3_bind_text(tk, 2, s->times, (int)(p - s->times), SQLITE_STATIC);
  return exec_stmt(s, tk, "inserting a request's token times", err);
}

// Makes room in s->counts for the seconds of token_ns[0..n) that are not the second of the
// token before them (an upper bound on the entries count_tokens adds). SC_OOM when out of memory.
static sc_status reserve_counts(store *s, const uint64_t *token_ns, int n, sc_error *err) {
  int need = 0;
  for (int i = 0; i < n; i++)
    if (i == 0 || token_ns[i] / STORE_NS_PER_SECOND != token_ns[i - 1] / STORE_NS_PER_SECOND)
      need++;
  if (s->n_counts + need <= s->cap_counts) return SC_OK;
  int cap = s->cap_counts ? s->cap_counts : 64;
  while (cap < s->n_counts + need) cap *= 2;
  token_count *p = realloc(s->counts, (size_t)cap * sizeof *p);
  if (!p) return sc_fail(err, SC_OOM, "%s: out of memory counting token times", s->path);
  s->counts = p;
  s->cap_counts = cap;
  return SC_OK;
}

static int64_t ns_i64(uint64_t v) { return v > INT64_MAX ? INT64_MAX : (int64_t)v; }

// Adds a written request's token times to the transaction's counts per second. The entries of
// recent seconds are the last ones: the search goes backwards. reserve_counts made the room.
static void count_tokens(store *s, const store_request *r, const uint64_t *token_ns, int n) {
  token_count *c = NULL;
  for (int i = 0; i < n; i++) {
    int64_t sec = ns_i64(token_ns[i]) / STORE_NS_PER_SECOND;
    if (!c || c->second != sec) {
      c = NULL;
      for (int k = s->n_counts - 1; k >= 0 && !c; k--) {
        token_count *e = &s->counts[k];
        if (e->second == sec && e->deployment_id == r->deployment_id && e->run_id == r->run_id)
          c = e;
      }
      if (!c) {
        c = &s->counts[s->n_counts++];
        *c = (token_count){r->run_id, r->deployment_id, sec, 0};
      }
    }
    c->tokens++;
  }
}

sc_status store_request_add(store *s, const store_request *r, const uint64_t *token_ns,
                            int n_tokens, int64_t *id, sc_error *err) {
  static const char *const statuses[] = {"ok", "cancelled", "failed", "timeout", NULL};
  if (!one_of(r->status, statuses))
    return sc_fail(err, SC_INVALID, "%s: request %lld: status must be ok, cancelled, failed or "
                   "timeout, got '%s'", s->path, (long long)r->seq,
                   r->status ? r->status : "(null)");
  if (n_tokens > 0 && !token_ns)
    return sc_fail(err, SC_INVALID, "%s: request %lld: %d token times but no array", s->path,
                   (long long)r->seq, n_tokens);
  SC_TRY(tx_begin(s, err));
  SC_TRY(reserve_counts(s, token_ns, n_tokens, err));
  // A savepoint makes the request and its tokens all-or-nothing.
  SC_TRY(exec_k(s, ST_SP_BEGIN, "opening a savepoint", err));
  sc_status st = request_rows(s, r, token_ns, n_tokens, id, err);
  if (st != SC_OK) {
    sc_error ignored;
    exec_k(s, ST_SP_ROLLBACK, "rolling back a request", &ignored);
  }
  sc_error rel_err;
  sc_status rel = exec_k(s, ST_SP_RELEASE, "releasing a savepoint", st == SC_OK ? err : &rel_err);
  if (st == SC_OK && rel == SC_OK) count_tokens(s, r, token_ns, n_tokens);
  return st != SC_OK ? st : rel;
}

// Writes v in decimal at p (a '-' first when negative); returns the end.
static char *put_i64(char *p, int64_t v) {
  char digits[20], *end = digits + sizeof digits;
  uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  if (v < 0) *p++ = '-';
  const char *d = sc_u64_digits(mag, end);
  memcpy(p, d, (size_t)(end - d));
  return p + (end - d);
}

// One step_block row: rows[0..n) (1 <= n <= STEP_BLOCK_MAX, of one run and deployment) with
// ids first_id, first_id + 1, ...; first_id 0: the ids after every block in the file. In the
// open transaction.
static sc_status write_step_block(store *s, int64_t first_id, const store_step *const *rows,
                                  int n, sc_error *err) {
  if (!s->steps && !(s->steps = malloc((size_t)STEP_BLOCK_MAX * STEP_JSON_MAX + 2)))
    return sc_fail(err, SC_OOM, "%s: out of memory writing step rows", s->path);
  sqlite3_stmt *st;
  if (!first_id) {
    if (!s->next_step_id) {
      SC_TRY(prep(s, ST_STEP_NEXT_ID, &st, err));
      int rc = sqlite3_step(st);
      if (rc == SQLITE_ROW) s->next_step_id = sqlite3_column_int64(st, 0);
      sqlite3_reset(st);
      if (rc != SQLITE_ROW) return db_fail(s, rc, "reading the next step id", err);
    }
    first_id = s->next_step_id;
  }
  // The hot path at level tokens (an hour of dp=4 serving: 2.2 million steps): the numbers
  // written by hand, as for token times.
  char *p = s->steps;
  int64_t end_ns = 0;
  *p++ = '[';
  for (int i = 0; i < n; i++) {
    const store_step *x = rows[i];
    int64_t t = ns_i64(x->t_ns), d = ns_i64(x->duration_ns);
    int64_t e = t > INT64_MAX - d ? INT64_MAX : t + d;
    if (i == 0 || e > end_ns) end_ns = e;
    const int64_t v[11] = {x->replica,       t,          d,          x->seqs,
                           x->prefill_tokens, x->decode_tokens, x->preempted, x->queue_len,
                           x->running,       x->kv_used, x->kv_total};
    if (i) *p++ = ',';
    *p++ = '[';
    for (int k = 0; k < 11; k++) {
      if (k) *p++ = ',';
      p = put_i64(p, v[k]);
    }
    *p++ = ']';
  }
  *p++ = ']';
  SC_TRY(prep(s, ST_STEP_BLOCK, &st, err));
  bind_i64(st, 1, first_id);
  bind_i64(st, 2, rows[0]->run_id);
  bind_i64(st, 3, rows[0]->deployment_id);
  bind_i64(st, 4, n);
  bind_i64(st, 5, end_ns);
  sqlite3_bind_text(st, 6, s->steps, (int)(p - s->steps), SQLITE_STATIC);
  SC_TRY(exec_stmt(s, st, "inserting step rows", err));
  if (s->next_step_id && first_id + n > s->next_step_id) s->next_step_id = first_id + n;
  return SC_OK;
}

sc_status store_steps_add(store *s, const store_step *const *rows, int n, sc_error *err) {
  SC_TRY(tx_begin(s, err));
  // A block holds consecutive steps of one run and deployment.
  for (int i = 0, k; i < n; i += k) {
    for (k = 1; i + k < n && k < STEP_BLOCK_MAX && rows[i + k]->run_id == rows[i]->run_id &&
                rows[i + k]->deployment_id == rows[i]->deployment_id;
         k++) {
    }
    SC_TRY(write_step_block(s, 0, rows + i, k, err));
  }
  return SC_OK;
}

sc_status store_step_add(store *s, const store_step *x, sc_error *err) {
  return store_steps_add(s, &x, 1, err);
}

sc_status store_device_sample_add(store *s, const store_device_sample *d, sc_error *err) {
  SC_TRY(tx_begin(s, err));
  sqlite3_stmt *st;
  SC_TRY(prep(s, ST_DEVICE, &st, err));
  bind_i64(st, 1, d->run_id);
  bind_i64(st, 2, d->deployment_id);
  bind_i64(st, 3, d->replica);
  bind_i64(st, 4, d->rank);
  bind_ns(st, 5, d->t_ns);
  bind_i64(st, 6, (int64_t)d->mem_used);
  bind_i64(st, 7, (int64_t)d->mem_total);
  if (d->link_bytes >= 0) bind_i64(st, 8, d->link_bytes);
  else sqlite3_bind_null(st, 8);
  return exec_stmt(s, st, "inserting a device_sample row", err);
}

sc_status store_server_sample_add(store *s, const store_server_sample *d, sc_error *err) {
  SC_TRY(tx_begin(s, err));
  if (!s->have_server_sample) {
    SC_TRY(exec_sql(s, store_server_sample_sql, "creating the server_sample table", err));
    s->have_server_sample = true;
  }
  sqlite3_stmt *st;
  SC_TRY(prep(s, ST_SERVER, &st, err));
  bind_i64(st, 1, d->run_id);
  bind_i64(st, 2, d->deployment_id);
  bind_i64(st, 3, d->replica);
  bind_ns(st, 4, d->t_ns);
  bind_real_opt(st, 5, d->running);
  bind_real_opt(st, 6, d->waiting);
  bind_real_opt(st, 7, d->kv_usage);
  bind_real_opt(st, 8, d->kv_blocks);
  return exec_stmt(s, st, "inserting a server_sample row", err);
}

sc_status store_fault_add(store *s, const store_fault *f, int64_t *id, sc_error *err) {
  if (!f->kind) return sc_fail(err, SC_INVALID, "%s: a fault needs a kind", s->path);
  SC_TRY(tx_begin(s, err));
  sqlite3_stmt *st;
  SC_TRY(prep(s, ST_FAULT, &st, err));
  bind_i64(st, 1, f->run_id);
  bind_id_opt(st, 2, f->deployment_id);
  bind_text(st, 3, f->kind);
  bind_text(st, 4, f->target);
  bind_ns(st, 5, f->injected_ns);
  bind_ns_opt(st, 6, f->has_detected, f->detected_ns);
  bind_ns_opt(st, 7, f->has_recovered, f->recovered_ns);
  if (f->affected >= 0) bind_i64(st, 8, f->affected);
  else sqlite3_bind_null(st, 8);
  bind_text(st, 9, f->detail);
  SC_TRY(exec_stmt(s, st, "inserting a fault row", err));
  if (id) *id = sqlite3_last_insert_rowid(s->db);
  return SC_OK;
}

sc_status store_run_set_repeat(store *s, int64_t run_id, int64_t group, int index,
                               sc_error *err) {
  SC_TRY(tx_begin(s, err));
  sqlite3_stmt *st = NULL;
  // A repetition joining a group marked as a baseline is part of that baseline.
  int rc = sqlite3_prepare_v2(s->db,
                              "UPDATE run SET repeat_group = ?1, repeat_index = ?2, baseline = "
                              "max(baseline, (SELECT coalesce(max(baseline), 0) FROM run WHERE "
                              "id = ?1 OR repeat_group = ?1)) WHERE id = ?3",
                              -1, &st, NULL);
  if (rc != SQLITE_OK) return db_fail(s, rc, "preparing the repeat update", err);
  bind_i64(st, 1, group);
  bind_i64(st, 2, index);
  bind_i64(st, 3, run_id);
  sc_status r = exec_stmt(s, st, "recording a run's repetition group", err);
  sqlite3_finalize(st);
  if (r == SC_OK) r = store_flush(s, err);
  return r;
}

sc_status store_group_join(store *s, int64_t run_id, const char *scenario, const char *mode,
                           int64_t *group, int *next_index, sc_error *err) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(s->db,
                              "SELECT scenario, mode, coalesce(repeat_group, id), (SELECT "
                              "coalesce(max(repeat_index), 0) + 1 FROM run g WHERE g.repeat_group "
                              "= coalesce(r.repeat_group, r.id)), repeat_group IS NULL FROM run r "
                              "WHERE id = ?1",
                              -1, &st, NULL);
  if (rc != SQLITE_OK) return db_fail(s, rc, "preparing the group lookup", err);
  bind_i64(st, 1, run_id);
  rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return db_fail(s, rc, "looking up a repetition group", err);
    return sc_fail(err, SC_INVALID, "%s: no run %lld to join (--group)", s->path,
                   (long long)run_id);
  }
  char have_scn[160], have_mode[16];
  snprintf(have_scn, sizeof have_scn, "%s", (const char *)sqlite3_column_text(st, 0));
  snprintf(have_mode, sizeof have_mode, "%s", (const char *)sqlite3_column_text(st, 1));
  *group = sqlite3_column_int64(st, 2);
  *next_index = sqlite3_column_int(st, 3);
  bool alone = sqlite3_column_int(st, 4) != 0;
  sqlite3_finalize(st);
  if (strcmp(have_scn, scenario))
    return sc_fail(err, SC_INVALID,
                   "%s: run %lld is of scenario '%s', not '%s': a group holds one scenario",
                   s->path, (long long)run_id, have_scn, scenario);
  if (strcmp(have_mode, mode))
    return sc_fail(err, SC_INVALID, "%s: run %lld is a %s run, not %s: a group holds one mode",
                   s->path, (long long)run_id, have_mode, mode);
  if (alone) {
    *next_index = 1;
    return store_run_set_repeat(s, run_id, run_id, 0, err);
  }
  return SC_OK;
}

sc_status store_fault_window_add(store *s, const store_fault_window *w, sc_error *err) {
  if (!w->window || !w->name)
    return sc_fail(err, SC_INVALID, "%s: a fault window row needs a window and a name", s->path);
  SC_TRY(tx_begin(s, err));
  sqlite3_stmt *st;
  SC_TRY(prep(s, ST_FAULT_WINDOW, &st, err));
  bind_i64(st, 1, w->fault_id);
  bind_text(st, 2, w->window);
  bind_ns(st, 3, w->start_ns);
  bind_ns(st, 4, w->end_ns);
  bind_text(st, 5, w->name);
  bind_real_opt(st, 6, w->value);
  bind_text(st, 7, w->op);
  if (w->op) bind_real_opt(st, 8, w->expected);
  else sqlite3_bind_null(st, 8);
  if (w->op) bind_i64(st, 9, w->pass);
  else sqlite3_bind_null(st, 9);
  return exec_stmt(s, st, "inserting a fault window row", err);
}

sc_status store_metric_add(store *s, int64_t run_id, int64_t deployment_id, int64_t phase_id,
                           const char *class_name, const char *name, double value,
                           sc_error *err) {
  return store_metric_add_note(s, run_id, deployment_id, phase_id, class_name, name, value, NULL,
                               err);
}

sc_status store_metric_add_note(store *s, int64_t run_id, int64_t deployment_id,
                                int64_t phase_id, const char *class_name, const char *name,
                                double value, const char *note, sc_error *err) {
  if (!name) return sc_fail(err, SC_INVALID, "%s: a metric needs a name", s->path);
  SC_TRY(tx_begin(s, err));
  sqlite3_stmt *st;
  SC_TRY(prep(s, ST_METRIC, &st, err));
  bind_i64(st, 1, run_id);
  bind_id_opt(st, 2, deployment_id);
  bind_id_opt(st, 3, phase_id);
  bind_text(st, 4, class_name ? class_name : "");
  bind_text(st, 5, name);
  bind_real_opt(st, 6, value);
  bind_text(st, 7, note && note[0] ? note : NULL);
  return exec_stmt(s, st, "inserting a metric row", err);
}

sc_status store_verdict_add(store *s, int64_t run_id, int64_t deployment_id, const char *slo,
                            const char *op, double expected, double actual, bool pass,
                            const char *note, sc_error *err) {
  static const char *const ops[] = {"<=", ">=", NULL};
  if (!slo || !one_of(op, ops) || !isfinite(expected))
    return sc_fail(err, SC_INVALID, "%s: verdict %s: needs an SLO name, op <= or >= and a finite "
                   "expected value", s->path, slo ? slo : "(null)");
  SC_TRY(tx_begin(s, err));
  sqlite3_stmt *st;
  SC_TRY(prep(s, ST_VERDICT, &st, err));
  bind_i64(st, 1, run_id);
  bind_i64(st, 2, deployment_id);
  bind_text(st, 3, slo);
  bind_text(st, 4, op);
  sqlite3_bind_double(st, 5, expected);
  bind_real_opt(st, 6, actual);
  bind_i64(st, 7, pass ? 1 : 0);
  bind_text(st, 8, note && note[0] ? note : NULL);
  return exec_stmt(s, st, "inserting a verdict row", err);
}

// --- reading runs (the query is reports/query.c's rq_runs_each)

static void copy_str(char *dst, size_t cap, const char *v) {
  size_t n = v ? strlen(v) : 0;
  if (n >= cap) n = cap - 1;
  if (n) memcpy(dst, v, n);
  dst[n] = 0;
}

// A "running" run whose process is gone (or lives on another host) is "incomplete".
static bool run_alive(const store *s, const rq_listed_run *r) {
  if (!r->host || !s->host[0] || strcmp(r->host, s->host)) return false;
  if (!r->has_pid) return false;
  if (r->pid <= 0 || r->pid > INT32_MAX) return false;
  return kill((pid_t)r->pid, 0) == 0 || errno != ESRCH;
}

// Where listed rows go: out[0..cap) and the count of rows seen.
typedef struct listing {
  const store *s;
  store_run_row *out;
  int cap, n;
} listing;

static void list_row(void *ud, const rq_listed_run *r) {
  listing *l = ud;
  if (l->n < l->cap) {
    store_run_row *out = &l->out[l->n];
    memset(out, 0, sizeof *out);
    out->id = r->id;
    copy_str(out->scenario, sizeof out->scenario, r->scenario);
    copy_str(out->mode, sizeof out->mode, r->mode);
    copy_str(out->status, sizeof out->status, r->status);
    if (!strcmp(out->status, "running") && !run_alive(l->s, r))
      snprintf(out->status, sizeof out->status, "incomplete");
    copy_str(out->started_at, sizeof out->started_at, r->started_at);
    copy_str(out->verdict, sizeof out->verdict, r->verdict);
    copy_str(out->git_rev, sizeof out->git_rev, r->git_rev);
    out->baseline = r->baseline;
  }
  l->n++;
}

int store_runs_list(store *s, store_run_row *out, int cap, sc_error *err) {
  listing l = {s, out, cap, 0};
  bool prepared;
  int rc = rq_runs_each(s->db, 0, list_row, &l, &prepared);
  if (rc != SQLITE_DONE) {
    db_fail(s, rc, prepared ? "listing runs" : "preparing a statement", err);
    return -1;
  }
  return l.n;
}

sc_status store_run_get(store *s, int64_t id, store_run_row *out, sc_error *err) {
  listing l = {s, out, 1, 0};
  bool prepared;
  int rc = rq_runs_each(s->db, id, list_row, &l, &prepared);
  if (l.n > 0) return SC_OK;
  if (rc == SQLITE_DONE)
    return sc_fail(err, SC_INVALID, "no run %lld in %s", (long long)id, s->path);
  return db_fail(s, rc, prepared ? "reading a run" : "preparing a statement", err);
}

// --- capacity searches

sc_status store_capacity_add(store *s, const store_cap_search *c, const store_cap_layout *layouts,
                             int n_layouts, const store_cap_point *points, int n_points,
                             int64_t *id, sc_error *err) {
  char now[32];
  utc_now(now, sizeof now);
  SC_TRY(tx_begin(s, err));
  SC_TRY(exec_k(s, ST_SP_BEGIN, "opening a savepoint", err));
  sqlite3_stmt *st = NULL;
  sc_status r = SC_OK;
  int rc = sqlite3_prepare_v2(
      s->db,
      "INSERT INTO capacity(scenario, scenario_text, git_rev, started_at, record, seed, "
      "target_rate, rate_lo, rate_hi, iters, slo, costs, best, runner_up, served, note) "
      "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", -1, &st, NULL);
  if (rc != SQLITE_OK) r = db_fail(s, rc, "preparing the capacity row", err);
  if (r == SC_OK) {
    bind_text(st, 1, c->scenario);
    bind_text(st, 2, c->scenario_text ? c->scenario_text : "");
    bind_text(st, 3, c->git_rev && *c->git_rev ? c->git_rev : NULL);
    bind_text(st, 4, now);
    bind_text(st, 5, c->record);
    bind_i64(st, 6, (int64_t)c->seed);
    sqlite3_bind_double(st, 7, c->target_rate);
    sqlite3_bind_double(st, 8, c->rate_lo);
    sqlite3_bind_double(st, 9, c->rate_hi);
    bind_i64(st, 10, c->iters);
    bind_text(st, 11, c->slo);
    bind_text(st, 12, c->costs);
    if (c->best >= 0) bind_i64(st, 13, c->best);
    if (c->runner_up >= 0) bind_i64(st, 14, c->runner_up);
    bind_i64(st, 15, c->served ? 1 : 0);
    bind_text(st, 16, c->note);
    r = exec_stmt(s, st, "inserting the capacity row", err);
  }
  sqlite3_finalize(st);
  int64_t cid = sqlite3_last_insert_rowid(s->db);
  st = NULL;
  if (r == SC_OK) {
    rc = sqlite3_prepare_v2(s->db,
                            "INSERT INTO capacity_layout(capacity_id, idx, kind, tp, pp, dp, "
                            "gpus, label, cost_per_hour, max_rate, capped, output_tok_s, "
                            "cost_per_mtok, limit_text, max_rate_lo, max_rate_hi, error, "
                            "knee_rate) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                            -1, &st, NULL);
    if (rc != SQLITE_OK) r = db_fail(s, rc, "preparing a capacity_layout row", err);
  }
  for (int i = 0; r == SC_OK && i < n_layouts; i++) {
    const store_cap_layout *l = &layouts[i];
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    bind_i64(st, 1, cid);
    bind_i64(st, 2, i);
    bind_text(st, 3, l->kind);
    bind_i64(st, 4, l->tp);
    bind_i64(st, 5, l->pp);
    bind_i64(st, 6, l->dp);
    bind_i64(st, 7, l->gpus);
    bind_text(st, 8, l->label);
    sqlite3_bind_double(st, 9, l->cost_per_hour);
    bind_real_opt(st, 10, l->max_rate);
    bind_i64(st, 11, l->capped ? 1 : 0);
    bind_real_opt(st, 12, l->output_tok_s);
    bind_real_opt(st, 13, l->cost_per_mtok);
    bind_text(st, 14, l->limit[0] ? l->limit : NULL);
    bind_real_opt(st, 15, l->max_rate_lo);
    bind_real_opt(st, 16, l->max_rate_hi);
    sqlite3_bind_double(st, 17, l->error);
    bind_real_opt(st, 18, l->knee_rate);
    r = exec_stmt(s, st, "inserting a capacity_layout row", err);
  }
  sqlite3_finalize(st);
  st = NULL;
  if (r == SC_OK) {
    rc = sqlite3_prepare_v2(s->db,
                            "INSERT INTO capacity_point(capacity_id, layout, idx, rate, pass, "
                            "ttft_p95_ms, tpot_p95_ms, e2el_p95_ms, output_tok_s, error_rate, "
                            "failed, bound) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)", -1, &st, NULL);
    if (rc != SQLITE_OK) r = db_fail(s, rc, "preparing a capacity_point row", err);
  }
  for (int i = 0; r == SC_OK && i < n_points; i++) {
    const store_cap_point *p = &points[i];
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    bind_i64(st, 1, cid);
    bind_i64(st, 2, p->layout);
    bind_i64(st, 3, i);
    sqlite3_bind_double(st, 4, p->rate);
    bind_i64(st, 5, p->pass ? 1 : 0);
    bind_real_opt(st, 6, p->ttft_p95_ms);
    bind_real_opt(st, 7, p->tpot_p95_ms);
    bind_real_opt(st, 8, p->e2el_p95_ms);
    bind_real_opt(st, 9, p->output_tok_s);
    bind_real_opt(st, 10, p->error_rate);
    bind_text(st, 11, p->failed[0] ? p->failed : NULL);
    bind_i64(st, 12, p->bound);
    r = exec_stmt(s, st, "inserting a capacity_point row", err);
  }
  sqlite3_finalize(st);
  if (r != SC_OK) {
    sc_error ignored;
    exec_k(s, ST_SP_ROLLBACK, "rolling back a capacity search", &ignored);
  }
  sc_error rel_err;
  sc_status rel = exec_k(s, ST_SP_RELEASE, "releasing a savepoint", r == SC_OK ? err : &rel_err);
  if (r == SC_OK) r = rel;
  if (r == SC_OK) r = store_flush(s, err);
  if (r == SC_OK && id) *id = cid;
  return r;
}
