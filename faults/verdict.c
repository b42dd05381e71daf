// The verdict checks of faults/verdict.h: the history check over a deployment's request and
// token rows (their counts read by rq_request_history_read, reports/query.h, through
// store_db), the recovery point of a fault from the delivered tokens' times, the FNV-1a hash
// of an output, and a snapshot of this process's threads, fds and children read from /proc.
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
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "reports/query.h"

// --- history

sc_status fv_history_check(store *db, int64_t run_id, int64_t deployment_id, int64_t sent,
                           fv_history *out, sc_error *err) {
  sqlite3 *h = store_db(db);
  if (!h || !out) return sc_fail(err, SC_INVALID, "history check: no database or no output");
  if (sent < 0)
    return sc_fail(err, SC_INVALID, "history check: sent must be >= 0, got %lld",
                   (long long)sent);
  rq_request_history q;
  SC_TRY(rq_request_history_read(h, run_id, deployment_id, sent, &q, err));
  *out = (fv_history){.sent = sent,
                      .recorded = q.recorded,
                      .double_done = q.double_done,
                      .lost = sent - q.in_range,
                      .ok = q.ok,
                      .cancelled = q.cancelled,
                      .failed = q.failed,
                      .timeout = q.timeout,
                      .bad_status = q.bad_status,
                      .abandoned = q.abandoned,
                      .dup_tokens = q.dup_tokens,
                      .token_gaps = q.token_gaps,
                      .bad_times = q.bad_times};
  return SC_OK;
}

bool fv_history_ok(const fv_history *h, int64_t allowed_lost) {
  return h && h->lost + h->abandoned <= allowed_lost && h->double_done == 0 &&
         h->bad_status == 0 && h->token_gaps == 0 &&
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
