// The verdict checks of faults/verdict.h: the history check over a deployment's request and
// token rows (two read-only queries through store_db), the recovery point of a fault from the
// delivered tokens' times, the FNV-1a hash of an output, and a snapshot of this process's
// threads, fds and children read from /proc.
//
// Left to others: when to call these and what to store (runner/runner.c writes the fault
// rows and the detect_ms, recover_ms, lost_requests, failed_requests and kv_leak_blocks values;
// docs/metrics.md gives their formulas), the schema (reports/schema.c), the SLO comparison
// (reports/metrics.c).
#include "faults/verdict.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

// --- history

// One pass over the deployment's request rows, grouped by seq (the request_by_deployment index
// finds them): distinct seq values, those with more than one row, those inside [0, sent), and
// the rows by status (a row counts once for its status whatever its seq). ?1 run, ?2
// deployment, ?3 sent.
static const char *const history_requests_sql =
    "SELECT count(*), coalesce(sum(n > 1), 0), coalesce(sum(seq >= 0 AND seq < ?3), 0),"
    " coalesce(sum(ok), 0), coalesce(sum(cancelled), 0), coalesce(sum(failed), 0),"
    " coalesce(sum(timeout), 0), coalesce(sum(n - ok - cancelled - failed - timeout), 0)"
    " FROM (SELECT seq, count(*) AS n,"
    "  sum(status = 'ok') AS ok, sum(status = 'cancelled') AS cancelled,"
    "  sum(status = 'failed') AS failed, sum(status = 'timeout') AS timeout"
    "  FROM request WHERE run_id = ?1 AND deployment_id = ?2 GROUP BY seq)";

// Token rows beyond the first for each (request, idx) of the deployment's requests: per request
// one range of the token table's primary key (request_id, idx), so the cost is linear in the
// deployment's token rows (about 0.1 s for 1e6 rows). ?1 run, ?2 deployment.
static const char *const history_tokens_sql =
    "SELECT coalesce(sum((SELECT count(*) - count(DISTINCT idx) FROM token"
    " WHERE request_id = r.id)), 0)"
    " FROM request AS r WHERE r.run_id = ?1 AND r.deployment_id = ?2";

// Requests whose times run backwards: dispatched, first token or finished before arrival, a
// token before arrival or after the finish, or a token before the one ahead of it (a negative
// latency, as a wall clock that jumped back would give). ?1 run, ?2 deployment.
static const char *const history_times_sql =
    "SELECT count(*) FROM request AS r WHERE r.run_id = ?1 AND r.deployment_id = ?2 AND ("
    " r.dispatch_ns < r.arrival_ns OR r.first_token_ns < r.arrival_ns OR"
    " r.finish_ns < r.arrival_ns OR r.finish_ns < r.first_token_ns OR"
    " EXISTS (SELECT 1 FROM token AS a WHERE a.request_id = r.id AND"
    "  (a.t_ns < r.arrival_ns OR a.t_ns > r.finish_ns OR EXISTS (SELECT 1 FROM token AS b"
    "   WHERE b.request_id = r.id AND b.idx = a.idx + 1 AND b.t_ns < a.t_ns))))";

// Runs sql with ?1 run_id, ?2 deployment_id (and ?3 sent when the statement has it) and reads
// its one row's first ncol integer columns into v. SC_IO with sqlite's message on error.
static sc_status query_row(sqlite3 *db, const char *sql, const char *what, int64_t run_id,
                           int64_t deployment_id, int64_t sent, int64_t *v, int ncol,
                           sc_error *err) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  if (rc != SQLITE_OK)
    return sc_fail(err, SC_IO, "history check: preparing the %s query: %s", what,
                   sqlite3_errmsg(db));
  sqlite3_bind_int64(st, 1, run_id);
  sqlite3_bind_int64(st, 2, deployment_id);
  if (sqlite3_bind_parameter_count(st) >= 3) sqlite3_bind_int64(st, 3, sent);
  rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    sc_status s = sc_fail(err, SC_IO, "history check: the %s query: %s", what,
                          rc == SQLITE_DONE ? "no row" : sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return s;
  }
  for (int i = 0; i < ncol; i++) v[i] = sqlite3_column_int64(st, i);
  sqlite3_finalize(st);
  return SC_OK;
}

sc_status fv_history_check(store *db, int64_t run_id, int64_t deployment_id, int64_t sent,
                           fv_history *out, sc_error *err) {
  sqlite3 *h = store_db(db);
  if (!h || !out) return sc_fail(err, SC_INVALID, "history check: no database or no output");
  if (sent < 0)
    return sc_fail(err, SC_INVALID, "history check: sent must be >= 0, got %lld",
                   (long long)sent);
  int64_t r[8], t = 0, bt = 0;
  SC_TRY(query_row(h, history_requests_sql, "request", run_id, deployment_id, sent, r, 8, err));
  SC_TRY(query_row(h, history_tokens_sql, "token", run_id, deployment_id, sent, &t, 1, err));
  SC_TRY(query_row(h, history_times_sql, "time", run_id, deployment_id, sent, &bt, 1, err));
  *out = (fv_history){.sent = sent,
                      .recorded = r[0],
                      .double_done = r[1],
                      .lost = sent - r[2],
                      .ok = r[3],
                      .cancelled = r[4],
                      .failed = r[5],
                      .timeout = r[6],
                      .bad_status = r[7],
                      .dup_tokens = t,
                      .bad_times = bt};
  return SC_OK;
}

bool fv_history_ok(const fv_history *h, int64_t allowed_lost) {
  return h && h->lost <= allowed_lost && h->double_done == 0 && h->bad_status == 0 &&
         h->dup_tokens == 0 && h->bad_times == 0;
}

// --- recovery

// Index of the first time >= t in tok_ns[0..n) (n when none).
static size_t lower_bound(const uint64_t *tok_ns, size_t n, uint64_t t) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (tok_ns[mid] < t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

bool fv_recovered_at(const uint64_t *tok_ns, size_t n, uint64_t from_ns, uint64_t fault_ns,
                     uint64_t after_ns, uint64_t end_ns, uint64_t window_ns, double frac,
                     uint64_t *recovered_ns) {
  if (!tok_ns || !recovered_ns || n == 0 || window_ns == 0 || !(frac >= 0) || window_ns > end_ns)
    return false;
  // The pre-fault level: tokens over [lo, fault_ns), lo = fault_ns - window_ns clipped at from.
  uint64_t lo = fault_ns > window_ns ? fault_ns - window_ns : 0;
  if (lo < from_ns) lo = from_ns;
  if (lo >= fault_ns) return false;
  size_t pre = lower_bound(tok_ns, n, fault_ns) - lower_bound(tok_ns, n, lo);
  if (pre == 0) return false;
  // A window of window_ns holding c tokens is back when c / window_ns >= frac x pre / (fault_ns
  // - lo), i.e. c >= need; k = ceil(need) is the fewest tokens that pass.
  double need = frac * (double)pre * (double)window_ns / (double)(fault_ns - lo);
  double kd = ceil(need);
  if (kd > (double)n) return false;
  size_t k = kd > 0 ? (size_t)kd : 0;
  uint64_t step = window_ns / 10 ? window_ns / 10 : 1, last = end_ns - window_ns;
  for (uint64_t t = after_ns; t <= last;) {
    size_t i0 = lower_bound(tok_ns, n, t), c = lower_bound(tok_ns, n, t + window_ns) - i0;
    if ((double)c >= need) {
      *recovered_ns = t;
      return true;
    }
    // Fewer than k tokens in [t, t + window_ns): no window can pass until it reaches past the
    // k-th token from i0, tok_ns[i0 + k - 1] (>= t + window_ns), so skip the grid points whose
    // window ends at or before it. The same t comes back as stepping one by one.
    if (i0 + k - 1 >= n) return false;
    uint64_t first = tok_ns[i0 + k - 1] - window_ns + 1; // the earliest start that reaches it
    uint64_t steps = (first - t + step - 1) / step;
    if (steps > (last - t) / step) return false;
    t += steps * step;
  }
  return false;
}

double fv_dip(const uint64_t *tok_ns, size_t n, uint64_t from_ns, uint64_t fault_ns,
              uint64_t until_ns, uint64_t end_ns, uint64_t window_ns) {
  if (!tok_ns || n == 0 || window_ns == 0 || fault_ns + window_ns > end_ns) return NAN;
  uint64_t lo = fault_ns > window_ns ? fault_ns - window_ns : 0;
  if (lo < from_ns) lo = from_ns;
  if (lo >= fault_ns) return NAN;
  size_t pre = lower_bound(tok_ns, n, fault_ns) - lower_bound(tok_ns, n, lo);
  if (pre == 0) return NAN;
  double level = (double)pre / (double)(fault_ns - lo); // tokens per ns
  uint64_t step = window_ns / 10 ? window_ns / 10 : 1;
  uint64_t last = until_ns > window_ns ? until_ns - window_ns : 0;
  if (last < fault_ns) last = fault_ns;
  if (last + window_ns > end_ns) last = end_ns - window_ns;
  double lowest = INFINITY;
  for (uint64_t t = fault_ns; t <= last; t += step) {
    size_t c = lower_bound(tok_ns, n, t + window_ns) - lower_bound(tok_ns, n, t);
    double rate = (double)c / (double)window_ns;
    if (rate < lowest) lowest = rate;
  }
  double dip = 1 - lowest / level;
  return dip > 0 ? dip : 0;
}

// --- equivalence

uint64_t fv_output_hash(const int32_t *ids, int n) {
  uint64_t h = 0xcbf29ce484222325ull; // FNV-1a 64 offset basis
  for (int i = 0; i < n; i++) {
    uint32_t v = (uint32_t)ids[i];
    for (int b = 0; b < 4; b++) { // little-endian bytes, whatever the host's order
      h ^= (v >> (8 * b)) & 0xffu;
      h *= 0x100000001b3ull; // FNV 64 prime
    }
  }
  return h;
}

// --- resources

// Entries of the directory at path other than . and .. (and, with skip_own_fd, the entry named
// after the DIR's own descriptor: /proc/self/fd lists the fd that lists it); -1 with errno when
// it cannot be read.
static int count_entries(const char *path, bool skip_own_fd) {
  DIR *d = opendir(path);
  if (!d) return -1;
  char self[16] = "";
  if (skip_own_fd) snprintf(self, sizeof self, "%d", dirfd(d));
  int n = 0;
  struct dirent *e;
  errno = 0;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, self))
      continue;
    n++;
  }
  int saved = errno;
  closedir(d);
  if (saved) {
    errno = saved;
    return -1;
  }
  return n;
}

// The ppid field of /proc/<pid>/stat: "pid (comm) state ppid ...", where comm may hold spaces
// and ')' itself, so the fields resume after the LAST ')'. -1 when the process is gone or the
// line does not parse.
static long stat_ppid(const char *pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%s/stat", pid);
  FILE *f = fopen(path, "re");
  if (!f) return -1;
  size_t m = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[m] = 0;
  const char *p = strrchr(buf, ')');
  char state;
  long ppid;
  if (!p || sscanf(p + 1, " %c %ld", &state, &ppid) != 2) return -1;
  return ppid;
}

sc_status fv_resources_now(fv_resources *out, sc_error *err) {
  if (!out) return sc_fail(err, SC_INVALID, "resources: no output");
  int threads = count_entries("/proc/self/task", false);
  if (threads < 0)
    return sc_fail(err, SC_IO, "resources: reading /proc/self/task: %s", strerror(errno));
  int fds = count_entries("/proc/self/fd", true);
  if (fds < 0) return sc_fail(err, SC_IO, "resources: reading /proc/self/fd: %s", strerror(errno));
  DIR *d = opendir("/proc");
  if (!d) return sc_fail(err, SC_IO, "resources: reading /proc: %s", strerror(errno));
  long me = (long)getpid();
  int children = 0;
  struct dirent *e;
  errno = 0;
  while ((e = readdir(d))) {
    if (!isdigit((unsigned char)e->d_name[0])) continue;
    // A process that exits between readdir and the read is simply not counted.
    if (stat_ppid(e->d_name) == me) children++;
    errno = 0;
  }
  int saved = errno;
  closedir(d);
  if (saved) return sc_fail(err, SC_IO, "resources: listing /proc: %s", strerror(saved));
  *out = (fv_resources){.threads = threads, .fds = fds, .children = children};
  return SC_OK;
}

sc_status fv_resources_settled(const fv_resources *before, int max_ms, fv_resources *out,
                               sc_error *err) {
  if (!before) return sc_fail(err, SC_INVALID, "resources: no earlier reading");
  for (int waited = 0;; waited++) {
    sc_status st = fv_resources_now(out, err);
    if (st != SC_OK) return st;
    if ((out->threads <= before->threads && out->fds <= before->fds &&
         out->children <= before->children) ||
        waited >= max_ms)
      return SC_OK;
    nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
  }
}
