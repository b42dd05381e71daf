// `shardcheck serve`: the engine behind an OpenAI-compatible HTTP API (docs/serve.md).
//
// A server is three parts:
// - the HTTP side (server/http.c): libmicrohttpd in its epoll internal-thread mode parses
//   requests; the handlers check the API key, read and validate the body (server/openai.c) and
//   hand each generation to the loop as a command; streamed responses are filled by the loop
//   and sent as the client can take them, their connections suspended while nothing is
//   ready, so an idle stream costs nothing;
// - the loop thread (server/loop.c): the one thread that touches the replicas and the router
//   (the replica API is single-threaded). It runs the handlers' commands, sleeps in ppoll on
//   the replicas' wait fds, its wake eventfd and an epoll set of the clients' sockets (a
//   hang-up cancels the request), steps simulated replicas to priced deadlines on the
//   monotonic clock, and turns events into response bytes and metrics;
// - the deployment (server/deploy.c): flags -> the same engine config `shardcheck run` builds.
//
// Anything that must reach the replicas (the admin endpoints, server/admin.c: faults and
// state) goes through server_loop_call: a closure run on the loop thread. A dead replica is
// rebuilt (a new epoch) by a supervisor thread in real mode, at once in sim mode, while the loop
// goes on serving the others.
//
// This file is the public API; the struct both sides share is server/server_impl.h.
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "kernels/status.h"
#include "serving/replica.h"
#include "serving/router_policy.h"

typedef struct server server;

typedef struct server_config {
  // --- listening
  const char *host;        // address to bind ("127.0.0.1"); an IPv4 or IPv6 literal
  int port;                // 0: an ephemeral port (server_port says which)
  const char *served_name; // the model name the API reports and accepts
  const char *api_key;     // NULL or "": no key; else "Authorization: Bearer KEY" required
  size_t max_body_bytes;   // request bodies larger get 413 (default 1 MiB)
  int max_connections;     // requests in progress (headers in) past it get 503; 0 (default):
                           // max_pending + dp x max_running + 64, so every running and
                           // waiting stream fits
  int max_pending;         // generations waiting for a replica past it get 503 (default 4096)
  unsigned idle_timeout_s; // a connection with no traffic this long is closed (default 30)
  unsigned request_timeout_s; // a request's headers and body must arrive within this many
                              // seconds of its connection opening (or its previous request
                              // ending); else the connection is closed (default 10)
  int conn_limit; // open connections at most, requests or not (0: max_connections + the
                  // larger of 4096 and max_connections, within the open-file limit); past it
                  // new connections wait in the kernel's backlog
  // --- the deployment
  engine_config engine;     // every replica's config (clock ignored: the server sets it)
  int dp;                   // replicas
  replica_options replicas; // which implementation (local, process, sim)
  int max_model_len;        // the context the API admits (<= engine.model.max_seq_len)
  bool synthetic_text;      // sim: token ids become words of a fixed synthetic vocabulary
  const int *sim_lens;      // sim: (n_sim_lens) answer lengths a request's EOS falls at, one
  int n_sim_lens;           // picked by its prompt and seed (0: never EOS)
  const char *layout;       // for messages and /metrics labels, e.g. "tp2-pp1-dp2"
  router_policy policy;     // which replica a request goes to (default least-outstanding)
  // --- faults and recovery
  const char *admin_token; // NULL or "": /admin/* are 404; else they take
                           // "Authorization: Bearer TOKEN" (401 without it)
  int max_retries;         // resubmissions of a request whose replica was lost (default 3;
                           // 0: such a request ends with an error at once)
  bool restart;            // a dead replica is rebuilt with a new epoch where its kind can be
                           // (process and sim replicas; default true)
} server_config;

// Defaults: 127.0.0.1:8000, 1 MiB bodies, connections sized to the deployment, 4096 pending,
// 30 s idle, 10 s to send a request, dp 1, 3 retries, restarts on.
server_config server_config_defaults(void);

// Binds and starts the HTTP side, then the loop thread, which builds the replicas (/health
// answers 503 until they are ready). On error *out is NULL and err says why (SC_IO: the
// address could not be bound).
sc_status server_new(const server_config *c, server **out, sc_error *err);
// Blocks until every replica is built (SC_OK) or one failed (its status; err says why).
sc_status server_wait_ready(server *s, sc_error *err);
// The port the server listens on.
int server_port(const server *s);
// KV blocks per replica (after server_wait_ready) and their size in tokens.
int server_kv_blocks(const server *s);

// Stops admitting (new generations get 503, /health 503) and waits for the requests in flight
// to finish, at most timeout_ns; those still running then end with an error. Returns how many
// were cut off. Callable once, from any thread but the loop's.
int server_drain(server *s, uint64_t timeout_ns);

// Runs fn(ud) on the loop thread, where the replicas may be touched, and waits for it. The
// seam for handlers that act on replicas (faults, state); never call it from the loop thread.
// false when the server is stopping (fn did not run).
bool server_loop_call(server *s, void (*fn)(server *s, void *ud), void *ud);
// On the loop thread only (inside a server_loop_call): replica i, and how many there are.
replica *server_replica(server *s, int i);
int server_n_replicas(const server *s);

// Stops the loop (requests still in flight end with an error), the HTTP side and every
// replica, and frees everything. NULL is a no-op.
void server_free(server *s);
