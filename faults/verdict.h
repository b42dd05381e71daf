// Verdicts after faults (Jepsen-style): checks that judge a deployment that suffered faults.
//
// What is here: the history check over the recorded rows of one deployment (every request
// exactly one terminal status, none lost, no token index delivered twice), the recovery point
// of a fault from the delivered tokens' times, the equivalence of outputs by hash, and a
// snapshot of this process's threads, fds and child processes (leak checks). All pure or
// read-only: the runner decides when to call them and records the results (fault rows,
// metrics detect_ms, recover_ms, lost_requests, failed_requests, kv_leak_blocks).
// Not here: injecting faults (the runner through the replica handle), the SQL schema
// (reports/schema.c), the SLO comparison (reports/metrics.c).
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/status.h"
#include "reports/store.h"

// --- history: over the request and token rows of one deployment
typedef struct fv_history {
  int64_t sent;        // requests the runner sent (the caller's count; seq 0 .. sent - 1)
  int64_t recorded;    // distinct seq values with a request row
  int64_t lost;        // seq in [0, sent) with no request row
  int64_t double_done; // seq with more than one request row (completed twice)
  int64_t bad_status;  // rows whose status is not ok | cancelled | failed | timeout
  int64_t dup_tokens;  // (request, index) token rows beyond the first
  int64_t token_gaps;  // requests whose token rows are not exactly indexes 0 .. output - 1
  int64_t bad_times;   // requests whose times run backwards (a negative latency)
  int64_t ok, cancelled, failed, timeout; // rows by status
  // Of the timeouts, requests the failover path left unanswered: their replica was lost under
  // them and nothing retried, resumed or failed them (status timeout, reason replica_lost).
  // They are lost requests, whatever timer ended them.
  int64_t abandoned;
} fv_history;

// Fills out from the database (the rows must be flushed). SC_IO on a database error.
sc_status fv_history_check(store *db, int64_t run_id, int64_t deployment_id, int64_t sent,
                           fv_history *out, sc_error *err);
// True when the history holds: nothing lost or abandoned (beyond allowed_lost together),
// nothing completed twice, no bad status, no duplicate token, no time running backwards.
bool fv_history_ok(const fv_history *h, int64_t allowed_lost);

// --- recovery: when throughput came back after a fault
// tok_ns: every token delivery time of the deployment, ns, sorted ascending (n of them).
// The pre-fault level is the token rate over [fault_ns - window_ns, fault_ns), clipped to
// start at from_ns (the phase's start). The fault has recovered at the first time t >=
// after_ns (its detection, or the fault time when nothing was detected), stepping by
// window_ns / 10, at which the rate over [t, t + window_ns) reaches frac (0.9) x the
// pre-fault level, with t + window_ns <= end_ns. Returns false (nothing to measure against,
// or it never recovered before end_ns) and leaves *recovered_ns alone.
bool fv_recovered_at(const uint64_t *tok_ns, size_t n, uint64_t from_ns, uint64_t fault_ns,
                     uint64_t after_ns, uint64_t end_ns, uint64_t window_ns, double frac,
                     uint64_t *recovered_ns);

// --- equivalence: outputs compared by a hash of their token ids
// FNV-1a 64 over the ids in order (n may be 0: the offset basis comes back).
// The deepest throughput dip over [fault_ns, until_ns): 1 - the lowest token rate of a window
// of window_ns (starts stepping by window_ns / 10; one window from fault_ns when the span is
// shorter) / the pre-fault level (as for fv_recovered_at, from from_ns). 0: no dip; 1: no
// token at all. NaN when there is no pre-fault level or no window ends by end_ns.
double fv_dip(const uint64_t *tok_ns, size_t n, uint64_t from_ns, uint64_t fault_ns,
              uint64_t until_ns, uint64_t end_ns, uint64_t window_ns);

uint64_t fv_output_hash(const int32_t *ids, int n);

// --- resources of this process (leak checks before and after a deployment)
typedef struct fv_resources {
  int threads;  // entries of /proc/self/task
  int fds;      // open file descriptors (/proc/self/fd, not counting the one used to list)
  int children; // live child processes (zombies included): /proc/<pid>/stat with ppid = us
} fv_resources;

// SC_IO when /proc cannot be read.
sc_status fv_resources_now(fv_resources *out, sc_error *err);

// Reads the resources until none exceeds `before` or `max_ms` has passed, and returns the last
// reading. A thread that pthread_join has returned for, or a child that was just reaped, can
// stay listed under /proc for a moment after: a leak is what is still there after the wait.
sc_status fv_resources_settled(const fv_resources *before, int max_ms, fv_resources *out,
                               sc_error *err);
