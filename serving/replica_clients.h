// Load from many clients: `mpirun -np N shardcheck run SCEN` with N client ranks, each sending
// its share of the requests to an external target's servers from its own process (and host)
// and stamping what it sees on its own clock. What and why: serving/replica_clients.c; the
// user's side: docs/scaling-out.md ("Load from many clients").
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "kernels/status.h"
#include "serving/replica.h"

// One client rank as rank 0 measured it.
typedef struct replica_client_rank {
  int rank;
  char host[64];
  int64_t offset_ns; // its monotonic clock minus rank 0's (at the middle of the best round trip)
  uint64_t rtt_ns;   // that round trip
  uint64_t requests; // requests sent from it so far (counted by rank 0's wrappers)
} replica_client_rank;

// Rank 0: measures every other rank's clock against its own (the fastest of several round
// trips) into out[0..n) (out[0] is rank 0 itself: offset 0); n is the job's size.
sc_status replica_clients_sync(replica_client_rank *out, int n, sc_error *err);

// Rank 0: wraps an HTTP replica (inner, built with o; owned by the result from here on) so that
// the n client ranks share its requests: the k-th submission goes to rank k mod n (rank 0: inner
// itself), every other rank sends it over its own HTTP replica of the same server, and events
// come back stamped on that rank's clock, brought onto rank 0's with ranks[k].offset_ns. Every
// other slot (readiness, the server's metrics, its pid) is inner's. ranks must outlive the
// result. On error inner is freed, *out is NULL and err says why.
sc_status replica_clients_wrap(replica *inner, const replica_http_options *o, int n,
                               replica_client_rank *ranks, replica **out, sc_error *err);

// Rank 0: every other rank leaves its loop (replica_clients_serve returns).
void replica_clients_quit(int n);

// Every rank but 0: serves rank 0's requests until it says quit; the exit status.
int replica_clients_serve(void);
