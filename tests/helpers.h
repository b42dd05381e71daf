// Shared helpers for the Criterion tests: temporary files, running the CLI and a scenario into a
// database, reading results databases, waiting for a condition with a deadline, processes as
// /proc shows them, llama-tiny engine configs and simulated replicas.
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "config/hardware.h"
#include "config/presets.h"
#include "engine/engine.h"
#include "engine/model.h"
#include "serving/replica.h"

// Makes a fresh directory under $TMPDIR (or /tmp) and returns its path (static buffer per call
// slot; copy it if you need more than a few).
const char *sc_test_tmpdir(const char *tag);
// Runs the shardcheck binary with args (a shell-quoted string), captures stdout+stderr into
// out (NUL-terminated, truncated at cap) and returns its exit code (-1 if it did not exit).
int sc_test_run_cli(const char *args, char *out, size_t cap);
// Fails the test when a sanitizer reported anything in a child's output (the CI builds run the
// binary under ASan+UBSan and TSan; a report there must not pass as an exit code).
void sc_test_no_sanitizer_reports(const char *text);
// sc_test_run_cli, then sc_test_no_sanitizer_reports on its output.
int sc_test_run_cli_clean(const char *args, char *out, size_t cap);
// Runs `shardcheck run 'SCENARIO' --db 'DB'` followed by the arguments flags (printf-style, shell
// words; NULL for none) through sc_test_run_cli_clean: its output in out, its exit code back.
int sc_test_run_scenario(char *out, size_t cap, const char *scenario, const char *db,
                         const char *flags, ...) __attribute__((format(printf, 5, 6)));
// Starts `shardcheck run SCENARIO --db DB --out OUT` in the background with its stdout and
// stderr in the file at log; returns its pid (the test fails when it cannot fork).
pid_t sc_test_spawn_run(const char *scenario, const char *db, const char *out, const char *log);
// Starts `shardcheck serve --port 0 ARGS...` (args NULL-terminated), stdout and stderr into log,
// and waits (30 s at most) for its startup line; its port in *port. The caller reaps the child.
pid_t sc_test_spawn_serve(const char *log, const char *const *args, int *port);
// How many newlines text holds.
int sc_test_count_lines(const char *text);
// The whole file at path, NUL-terminated, in a malloc'd buffer (NULL when it cannot be
// opened); its length in *len when len is not NULL.
char *sc_test_read_file(const char *path, long *len);
// The size of the file at path in bytes, -1 when there is none.
long sc_test_file_size(const char *path);
// Writes text to path; returns 0 on success.
int sc_test_write_file(const char *path, const void *data, size_t n);
// Writes text to a file `name` in a fresh sc_test_tmpdir(tag) and returns its path (static
// buffer per call slot, like sc_test_tmpdir); the test fails when either cannot be made.
const char *sc_test_write_tmp(const char *tag, const char *name, const char *text);
// The first column of the first row of sql on the database at path, as an integer (test
// fails when the query fails or returns no row) or as text ("(null)" for NULL; a static
// buffer).
long long sc_test_q1(const char *db, const char *sql);
const char *sc_test_q1s(const char *db, const char *sql);
// sc_test_q1 that may fail: false (v untouched) when the database or the query cannot be read
// now (not made yet, being written, no row), for polling a database another process writes.
bool sc_test_q1_try(const char *db, const char *sql, long long *v);
// The value of metric `name` of the whole deployment (no phase, no class) in the database at
// path, as stored (the first deployment's when there are several); NaN when absent or NULL.
double sc_test_metric(const char *db, const char *name);
// Runs sql (UPDATE/INSERT text) on a plain SQLite connection to the database at path; the test
// fails when it does not succeed.
void sc_test_exec(const char *db, const char *sql);
// The SQL that gives a file of this schema the token table of schema version 3 (a row per
// token, key (request_id, idx)) in place of token_times and the token view, rows unchanged: how
// the tests make the older files that the store migrates and the readers read as they are.
extern const char *const sc_test_token_table_v3_sql;
// The SQL that makes a file of this schema a file of schema version 4: no metric.note,
// verdict.note, fault_window.by or capacity interval columns; the step table (a row per step, index step_by_deployment) in
// place of step_block and the step view, rows and ids unchanged, and no token_second;
// meta.schema_version 4.
extern const char *const sc_test_v4_sql;

// --- time: a test waits for a condition with a deadline, never a fixed sleep then an assert
// (a loaded CI host stretches every sleep)
// Sleeps ns nanoseconds, or ms milliseconds (whole, through interruptions).
void sc_test_sleep_ns(uint64_t ns);
void sc_test_sleep_ms(double ms);
// Monotonic ns now plus seconds: a deadline for sc_test_before.
uint64_t sc_test_deadline(double seconds);
// True while the monotonic clock is before deadline.
bool sc_test_before(uint64_t deadline);
// Waits until cond (an expression, evaluated every 2 ms) holds; fails the test with the message
// (printf-style, after timeout_s) when timeout_s seconds pass first. Deadlines are generous: a
// condition that holds is seen at once, so they cost only a failing run.
#define sc_test_await(cond, timeout_s, ...)                                                        \
  do {                                                                                             \
    uint64_t sc_dl_ = sc_test_deadline(timeout_s);                                                 \
    while (!(cond)) {                                                                              \
      cr_assert(sc_test_before(sc_dl_), __VA_ARGS__);                                              \
      sc_test_sleep_ms(2);                                                                         \
    }                                                                                              \
  } while (0)

// --- processes, as /proc shows them
// The state letter (R, S, Z, ...) of pid and its parent's pid; false when there is no such
// process.
bool sc_test_proc_stat(pid_t pid, char *state, pid_t *ppid);
// True when pid names no live process: gone, or a zombie awaiting a reaper.
bool sc_test_pid_gone(pid_t pid);
// The live (not zombie) children of parent: their count, and up to cap pids into pids.
int sc_test_children(pid_t parent, pid_t *pids, int cap);
// Whether a live (not zombie) process's command line holds marker.
bool sc_test_process_with(const char *marker);

// engine_config_defaults() with the model of the named preset (the test fails when it does not
// load); every other field is the caller's to set.
engine_config sc_test_engine_config(const char *preset);
// A deterministic prompt of n token ids for request `salt`: 3 + (i * 37 + salt * 101) % 500.
void sc_test_prompt(int32_t *p, int n, int salt);

// A simulated replica's set-up: a GPU profile, a model preset and an engine config for the sim
// backend on a virtual clock (`now`, in ns) that the test moves.
typedef struct simbed {
  hw_profile *hw;
  model_config m;
  uint64_t now; // the virtual clock (ns)
  engine_config cfg;
} simbed;

// The model preset on the named GPU profile as tp x pp with kv_blocks KV blocks (the test
// fails when either does not load). Free it with sc_test_simbed_free.
simbed *sc_test_simbed_new(const char *preset, const char *gpu, int tp, int pp, int kv_blocks);
void sc_test_simbed_free(simbed *b);
// Submits request `key` to r: n_prompt token ids (key * 31 + i) % 1000 and max_tokens; the
// test fails when it is refused.
void sc_test_submit(replica *r, uint64_t key, int n_prompt, int max_tokens);

// Real-time load tests (phases of seconds of wall time) run in the optimized build: under a
// sanitizer the engine is 10-50x slower and an open-loop phase turns into timeouts, which says
// nothing about the harness. There they report themselves as skipped.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SKIP_UNDER_SANITIZERS()                                                                    \
  cr_skip_test("skipped: shipped scenarios are real-time load tests, run in the optimized build")
#else
#define SKIP_UNDER_SANITIZERS() ((void)0)
#endif

// A seeded generator for test data (splitmix64): the same seed gives the same numbers.
typedef struct rng {
  uint64_t s;
} rng;

static inline uint64_t rng_next(rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform in [-amp, amp).
static inline float rng_float(rng *r, float amp) {
  return amp * (float)((double)(rng_next(r) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}
