// Test helpers (see helpers.h). Tests get SC_BINARY and SC_SOURCE_DIR from CMake.
#include "tests/helpers.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernels/clock.h"

// --- running under ThreadSanitizer
//
// Criterion's sandbox (BoxFort) maps an arena at a random address in [0x2000_0000_0000,
// 0x6000_0000_0000), drawn as 0x2000_0000_0000 + (rand_r() & 0x3fffff) << 24, and gives up
// ("Could not initialize inheritable arena") after 10 draws that land on mapped pages. TSan's
// x86-64 layout reserves almost all of that range for its shadow and meta memory; the only
// free part is its "mid app" window [0x5500_0000_0000, 0x5680_0000_0000), so most runs die
// before any test starts. In TSan builds every test binary supplies rand_r (from here) (BoxFort's only
// caller of it here) drawing inside that window. Nothing else in the process uses rand_r.
#if defined(__SANITIZE_THREAD__)
#define SC_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SC_TEST_TSAN 1
#endif
#endif
#ifdef SC_TEST_TSAN
int rand_r(unsigned int *seed) {
  *seed = *seed * 1103515245u + 12345u;
  return 0x350000 + (int)((*seed >> 8) % 0x18000); // base in [0x5500.., 0x5680..) << 24
}
#endif

const char *sc_test_tmpdir(const char *tag) {
  static char bufs[8][256];
  static int slot;
  char *b = bufs[slot++ % 8];
  const char *base = getenv("TMPDIR");
  snprintf(b, 256, "%s/sc-%s-XXXXXX", base && *base ? base : "/tmp", tag);
  if (!mkdtemp(b)) return NULL;
  return b;
}

int sc_test_run_cli(const char *args, char *out, size_t cap) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "%s %s 2>&1", SC_BINARY, args);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  size_t n = 0;
  if (cap) out[0] = 0;
  while (cap && n + 1 < cap) {
    size_t got = fread(out + n, 1, cap - 1 - n, p);
    if (!got) break;
    n += got;
  }
  if (cap) out[n] = 0;
  char sink[4096];
  while (fread(sink, 1, sizeof sink, p)) {
  }
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void sc_test_no_sanitizer_reports(const char *text) {
  cr_assert(!strstr(text, "Sanitizer") && !strstr(text, "runtime error:"), "%s", text);
}

int sc_test_run_cli_clean(const char *args, char *out, size_t cap) {
  int rc = sc_test_run_cli(args, out, cap);
  sc_test_no_sanitizer_reports(out);
  return rc;
}

int sc_test_run_scenario(char *out, size_t cap, const char *scenario, const char *db,
                         const char *flags, ...) {
  char more[2048] = "";
  if (flags) {
    va_list ap;
    va_start(ap, flags);
    vsnprintf(more, sizeof more, flags, ap);
    va_end(ap);
  }
  char args[4096];
  snprintf(args, sizeof args, "run '%s' --db '%s'%s%s", scenario, db, more[0] ? " " : "", more);
  return sc_test_run_cli_clean(args, out, cap);
}

// Starts SC_BINARY with argv (argv[0] included, NULL-terminated), stdout and stderr into log.
static pid_t spawn_logged(const char *log, const char *const *argv) {
  pid_t pid = fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) {
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execv(SC_BINARY, (char *const *)argv);
    _exit(127);
  }
  return pid;
}

pid_t sc_test_spawn_run(const char *scenario, const char *db, const char *out, const char *log) {
  const char *const argv[] = {SC_BINARY, "run", scenario, "--db", db, "--out", out, NULL};
  return spawn_logged(log, argv);
}

pid_t sc_test_spawn_serve(const char *log, const char *const *args, int *port) {
  const char *argv[40] = {SC_BINARY, "serve", "--port", "0"};
  int n = 4;
  for (int i = 0; args[i] && n < 39; i++) argv[n++] = args[i];
  argv[n] = NULL;
  pid_t pid = spawn_logged(log, argv);
  char *text = NULL;
  *port = 0;
  uint64_t dl = sc_test_deadline(30);
  while (!*port && sc_test_before(dl)) {
    sc_test_sleep_ms(10);
    free(text);
    text = sc_test_read_file(log, NULL);
    const char *p = text ? strstr(text, "http://127.0.0.1:") : NULL;
    if (p) *port = atoi(p + strlen("http://127.0.0.1:"));
  }
  cr_assert_gt(*port, 0, "no startup line from serve: %s", text ? text : "");
  free(text);
  return pid;
}

int sc_test_count_lines(const char *text) {
  int n = 0;
  for (; *text; text++) n += *text == '\n';
  return n;
}

char *sc_test_read_file(const char *path, long *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  cr_assert_not_null(b);
  cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
  b[n] = 0;
  fclose(f);
  if (len) *len = n;
  return b;
}

long sc_test_file_size(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

int sc_test_write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t w = fwrite(data, 1, n, f);
  return fclose(f) == 0 && w == n ? 0 : -1;
}

// --- engines
engine_config sc_test_engine_config(const char *preset) {
  engine_config c = engine_config_defaults();
  sc_error err = {{0}};
  cr_assert_eq(model_preset_load(preset, &c.model, &err), SC_OK, "%s", err.msg);
  return c;
}

void sc_test_prompt(int32_t *p, int n, int salt) {
  for (int i = 0; i < n; i++) p[i] = 3 + (i * 37 + salt * 101) % 500;
}

// --- simulated replicas
simbed *sc_test_simbed_new(const char *preset, const char *gpu, int tp, int pp, int kv_blocks) {
  simbed *b = calloc(1, sizeof *b);
  b->hw = calloc(1, sizeof *b->hw);
  sc_error err = {{0}};
  cr_assert_eq(hw_profile_load(gpu, b->hw, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(model_preset_load(preset, &b->m, &err), SC_OK, "%s", err.msg);
  engine_config c = engine_config_defaults();
  c.model = b->m;
  c.backend = "sim";
  c.tp = tp;
  c.pp = pp;
  c.kv_blocks = kv_blocks;
  c.clock = sc_clock_virtual(&b->now);
  c.sim = (engine_sim){.hw = &b->hw->sim,
                       .model = {.dim = b->m.dim, .n_layers = b->m.n_layers,
                                 .n_heads = b->m.n_heads, .n_kv_heads = b->m.n_kv_heads,
                                 .head_dim = b->m.head_dim, .ffn_dim = b->m.ffn_dim,
                                 .vocab = b->m.vocab_size,
                                 .tied_embeddings = b->m.tied_embeddings,
                                 .weight_dtype = SIM_BF16, .act_dtype = SIM_BF16},
                       .layout = {.tp = tp, .pp = pp, .threads = 1, .cluster_ranks = tp * pp},
                       .static_bytes = 1e9, // load after a restart: 1e9 / 25e9 s = 40 ms
                       .kv_block_bytes = 1e6};
  b->cfg = c;
  return b;
}

void sc_test_simbed_free(simbed *b) {
  free(b->hw);
  free(b);
}

void sc_test_submit(replica *r, uint64_t key, int n_prompt, int max_tokens) {
  int32_t *p = calloc((size_t)n_prompt, sizeof *p);
  for (int i = 0; i < n_prompt; i++) p[i] = (int32_t)((key * 31 + (uint64_t)i) % 1000);
  engine_request q = {.prompt = p, .n_prompt = n_prompt, .max_tokens = max_tokens};
  sc_error err = {{0}};
  cr_assert_eq(replica_submit(r, key, &q, &err), SC_OK, "%s", err.msg);
  free(p);
}

const char *sc_test_write_tmp(const char *tag, const char *name, const char *text) {
  static char bufs[8][1024];
  static int slot;
  char *path = bufs[slot++ % 8];
  const char *dir = sc_test_tmpdir(tag);
  cr_assert(dir);
  snprintf(path, 1024, "%s/%s", dir, name);
  cr_assert_eq(sc_test_write_file(path, text, strlen(text)), 0);
  return path;
}

// --- reading a results database
long long sc_test_q1(const char *path, const char *sql) {
  sqlite3 *db = NULL;
  cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  sqlite3_stmt *st = NULL;
  cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
               sqlite3_errmsg(db));
  cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s", sql);
  long long v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return v;
}

bool sc_test_q1_try(const char *path, const char *sql, long long *v) {
  sqlite3 *db = NULL;
  bool ok = false;
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
      *v = sqlite3_column_int64(st, 0);
      ok = true;
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return ok;
}

const char *sc_test_q1s(const char *path, const char *sql) {
  static char buf[512];
  sqlite3 *db = NULL;
  cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  sqlite3_stmt *st = NULL;
  cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s", sql);
  cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s", sql);
  const unsigned char *t = sqlite3_column_text(st, 0);
  snprintf(buf, sizeof buf, "%s", t ? (const char *)t : "(null)");
  sqlite3_finalize(st);
  sqlite3_close(db);
  return buf;
}

const char *const sc_test_v4_sql =
    "ALTER TABLE metric DROP COLUMN note; ALTER TABLE verdict DROP COLUMN note; "
    "ALTER TABLE fault_window DROP COLUMN by; ALTER TABLE capacity_layout DROP COLUMN "
    "max_rate_lo; ALTER TABLE capacity_layout DROP COLUMN max_rate_hi; ALTER TABLE "
    "capacity_layout DROP COLUMN error; ALTER TABLE capacity_point DROP COLUMN bound; "
    "CREATE TEMP TABLE step_rows AS SELECT * FROM step; DROP VIEW step; DROP TABLE step_block; "
    "DROP TABLE token_second; CREATE TABLE step(id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL "
    "REFERENCES run(id), deployment_id INTEGER NOT NULL REFERENCES deployment(id), replica "
    "INTEGER NOT NULL, t_ns INTEGER NOT NULL, duration_ns INTEGER NOT NULL, seqs INTEGER NOT "
    "NULL, prefill_tokens INTEGER NOT NULL, decode_tokens INTEGER NOT NULL, preempted INTEGER "
    "NOT NULL, queue_len INTEGER NOT NULL, running INTEGER NOT NULL, kv_used INTEGER NOT NULL, "
    "kv_total INTEGER NOT NULL); CREATE INDEX step_by_deployment ON step(deployment_id, t_ns); "
    "INSERT INTO step SELECT * FROM step_rows; DROP TABLE step_rows; "
    "UPDATE meta SET value = '4' WHERE key = 'schema_version';";

const char *const sc_test_token_table_v3_sql =
    "DROP VIEW token; CREATE TABLE token(request_id INTEGER NOT NULL REFERENCES request(id), "
    "idx INTEGER NOT NULL, t_ns INTEGER NOT NULL, PRIMARY KEY(request_id, idx)) WITHOUT ROWID; "
    "INSERT INTO token SELECT tt.request_id, j.key, j.value FROM token_times AS tt, "
    "json_each(tt.t_ns) AS j; DROP TABLE token_times;";

void sc_test_exec(const char *path, const char *sql) {
  sqlite3 *db = NULL;
  cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
  char *msg = NULL;
  cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &msg), SQLITE_OK, "%s: %s", sql, msg);
  sqlite3_close(db);
}

double sc_test_metric(const char *path, const char *name) {
  sqlite3 *db = NULL;
  cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK, "%s", path);
  sqlite3_stmt *st = NULL;
  cr_assert_eq(sqlite3_prepare_v2(db,
                                  "SELECT value FROM metric WHERE name = ? AND phase_id IS NULL "
                                  "AND class = '' ORDER BY deployment_id LIMIT 1",
                                  -1, &st, NULL),
               SQLITE_OK, "%s", sqlite3_errmsg(db));
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  double v = NAN;
  if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
    v = sqlite3_column_double(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return v;
}

// --- time
void sc_test_sleep_ms(double ms) { sc_test_sleep_ns(ms > 0 ? (uint64_t)(ms * 1e6) : 0); }

void sc_test_sleep_ns(uint64_t ns) {
  struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                        .tv_nsec = (long)(ns % 1000000000ull)};
  while (nanosleep(&ts, &ts)) {
  }
}

uint64_t sc_test_deadline(double seconds) { return sc_monotonic_ns() + (uint64_t)(seconds * 1e9); }

bool sc_test_before(uint64_t deadline) { return sc_monotonic_ns() < deadline; }

// --- processes
bool sc_test_proc_stat(pid_t pid, char *state, pid_t *ppid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return false;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *rp = strrchr(buf, ')'); // the command name may hold spaces and parentheses
  int pp = 0;
  char s = 0;
  if (!rp || sscanf(rp + 2, "%c %d", &s, &pp) != 2) return false;
  if (state) *state = s;
  if (ppid) *ppid = (pid_t)pp;
  return true;
}

bool sc_test_pid_gone(pid_t pid) {
  char s = 0;
  return !sc_test_proc_stat(pid, &s, NULL) || s == 'Z';
}

int sc_test_children(pid_t parent, pid_t *pids, int cap) {
  DIR *d = opendir("/proc");
  cr_assert_not_null(d);
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d))) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    pid_t pid = (pid_t)atoi(e->d_name), pp = 0;
    char s = 0;
    if (!sc_test_proc_stat(pid, &s, &pp) || pp != parent || s == 'Z') continue;
    if (n < cap) pids[n] = pid;
    n++;
  }
  closedir(d);
  return n;
}

bool sc_test_process_with(const char *marker) {
  DIR *d = opendir("/proc");
  cr_assert_not_null(d);
  bool found = false;
  struct dirent *e;
  while (!found && (e = readdir(d))) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    char path[300], buf[4096];
    snprintf(path, sizeof path, "/proc/%.255s/cmdline", e->d_name);
    FILE *f = fopen(path, "rb");
    if (!f) continue;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    for (size_t i = 0; i < n; i++)
      if (!buf[i]) buf[i] = ' ';
    buf[n] = 0;
    found = strstr(buf, marker) && !sc_test_pid_gone((pid_t)atoi(e->d_name));
  }
  closedir(d);
  return found;
}
