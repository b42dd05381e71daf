// A request as its client sees it, and the table of a deployment's requests (serving/request.c
// grows and empties it and stamps a request's tokens).
//
// The runner (runner/runner.c) and shardcheck serve's loop (server/loop.c) each own a table:
// they add a request when the workload sends one (or a client posts one), stamp its tokens as
// they arrive and end it. The router (serving/router.h) sends a request to a replica
// (router_send), reads and marks it when it routes, retries or resumes a request, and ends it
// (router_end); the fault runtime (faults/runtime.h) reads it when a cancel storm ends requests
// and when it judges them afterwards. What becomes of a request in the database (its `request`
// and `token` rows) is the recorder's (reports/recorder.h).
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum req_state { REQ_INFLIGHT, REQ_DONE } req_state;

// How a request ended (the request row's status: "ok", "cancelled", "failed", "timeout").
typedef enum req_status { REQ_OK, REQ_CANCELLED, REQ_FAILED, REQ_TIMEOUT } req_status;

// One request. Times: ns since the run's start.
typedef struct req_rec {
  uint64_t arrival, dispatch, finish; // arrival: when the client's schedule had it sent
  uint64_t sent;     // when the client sent it (>= arrival: how late the client was)
  uint64_t text_hash; // a server's: FNV-1a of the text it streamed (0: none)
  uint64_t *tok; // (n_tok) when each output token was seen
  int32_t *ids;  // (n_tok) the tokens' ids (a resume continues from them)
  int n_tok, cap_tok;
  int retries;       // resubmissions after its replica was lost (retry or resume)
  int resumed;       // of them, resumes from prompt + tokens already sent
  int fault;         // the planned fault whose path it crossed (index), -1 none
  uint64_t retry_at; // waiting for a retry: when (ns since the run's start)
  bool waiting;      // waiting for a retry (not dispatched)
  bool storm;        // cancelled by a cancel storm: its replica's ack is awaited
  int prompt_tokens, max_tokens, class_idx;
  bool has_cached;   // cached_tokens is known (its FINISHED event said)
  int cached_tokens; // prompt tokens served from the prefix cache
  int phase;   // index into the deployment's phase runs
  int replica; // -1: never dispatched
  int epoch;   // the replica's incarnation when it was sent there
  // Its replica was lost under it since it was last sent (a FAILED event whose failure is a
  // loss): the router must retry, resume or fail it.
  bool loss_seen;
  int version; // the weights that serve it (0: the initial ones, +1 per hot swap)
  // The weights of its first output token, and whether a later token came from other weights
  // (req_add_token stamps both from version): a resume must never cross versions.
  int tok_version;
  bool mixed_versions;
  int user;    // closed loop: the user who sent it; -1: open loop
  // Conversations (zero: none, so a row made without them has none):
  uint64_t conv; // 1 + the workload's conversation it is a turn of; 0: not a turn of one
  int turn;      // its turn in the conversation
  uint64_t prev; // 1 + the key of the conversation's turn before it; 0: none (the router's
                 // sticky policy sends a turn where the one before went)
  req_state state;
  bool warmup, dispatched;
  req_status status;
  char reason[32];
} req_rec;

// A deployment's requests, index = key.
typedef struct req_table {
  req_rec *v; // (n, capacity cap)
  size_t n, cap;
  size_t low; // every request below it is done
  int inflight;
} req_table;

// Adds a copy of r as the table's next row (its key in *key) and counts it in flight. False
// when memory runs out (nothing changed).
bool req_table_add(req_table *t, const req_rec *r, uint64_t *key);
// Frees every row's token arrays and empties the table (its rows' memory is kept for reuse).
void req_table_clear(req_table *t);
// req_table_clear, then the rows' memory; the table is empty and may be reused.
void req_table_free(req_table *t);

// Appends token id, seen at t, to q's output, and notes the weights that made it (q->version):
// a token from other weights than the first one's marks q->mixed_versions. False when memory
// runs out (q unchanged).
bool req_add_token(req_rec *q, int32_t id, uint64_t t);
