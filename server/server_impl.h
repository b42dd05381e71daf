// The server's insides, shared by its HTTP side (server/http.c), its loop thread
// (server/loop.c) and /metrics (server/metrics.c). server.h is the public API.
//
// Ownership and threads: `mu` guards every field marked (mu); fields marked (loop) belong to
// the loop thread alone, (http) to libmicrohttpd's one internal thread. A generation (gen) is
// shared: the handler makes it, the loop fills its output, the connection sends it; each holder
// keeps a reference and the last one frees it.
#pragma once

#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "server/openai.h"
#include "server/server.h"
#include "serving/request.h"
#include "serving/router.h"
#include "serving/supervisor.h"

// --- one generation request
typedef struct gen gen;
struct gen {
  server *srv;
  // Set by the handler before the loop sees it; read-only after.
  oai_request req;
  oai_resp resp;
  char id[48];
  uint64_t arrival_ns;         // monotonic, when the body was complete
  uint64_t sim_key;            // sim: what its tokens are drawn from (its prompt, and its seed
                               // when sampled; engine_request.sim_key); 0 in mode real
  int sim_len;                 // sim: the answer's length, EOS last (0: never EOS)
  struct MHD_Connection *conn; // its connection (NULL once closed (mu))
  int fd;                      // the client's socket, polled for a hang-up while suspended
  // (mu)
  int refs;
  char *out; // (len) bytes for the connection, from off
  size_t len, off, cap;
  int status;     // non-streamed: the response's status once done
  bool done;      // nothing more will be added to out
  bool suspended; // the connection is suspended until the loop adds bytes
  bool gone;      // the connection closed (client gone or response sent)
  bool hung_up;   // the loop saw the client hang up: close, send nothing more
  bool peer_hup;  // the client hung up while the connection was not suspended: close at the
                  // next suspension instead (libmicrohttpd does not watch a suspended one)
  bool watched;   // its socket is in the loop's hang-up set (hup_ep)
  bool resume_queued; // in the loop's burst of connections to resume (one reference)
  // (loop)
  uint64_t key;    // its row in the loop's request table
  uint32_t serial; // tells its hang-up events from an earlier generation's of the same row
  bool live;       // in the loop's table and not finished
  bool final_sent; // the chunk with finish_reason went out
  bool cancelling; // a cancel was sent to its replica
  char finish[16]; // the finish reason once known
  char *sse_head;  // streamed: the start of its content chunks (oai_sse_head), once needed
  char *text;      // non-streamed, or with stop strings: the text so far (text_len)
  size_t text_len, text_cap;
  size_t sent;      // streamed with stop strings: bytes of text sent (the rest is held back)
  bool output_done; // its last bytes are out (a stop the server found: the row ends later)
  uint64_t end_ns;  // monotonic, when output_done was set that way (0: at its finish)
  uint64_t first_ns; // monotonic, its first token (0: none yet)
  uint64_t last_ns;  // monotonic, its latest token
  uint64_t sched_ns; // monotonic, when its replica first scheduled it (0: not known)
  gen *prev, *next;  // the loop's list of live generations
};

void gen_ref(gen *g);   // (mu) held
void gen_unref(gen *g); // takes mu itself; frees on the last reference

// --- commands: closures the HTTP side hands to the loop
typedef struct server_cmd server_cmd;
struct server_cmd {
  void (*fn)(server *s, void *ud);
  void (*drop)(server *s, void *ud); // the loop is gone: release ud instead (NULL: nothing)
  void *ud;
  bool *ran; // server_loop_call: set (mu) once fn ran, then cv broadcast
  server_cmd *next;
};
// Queues a command and wakes the loop; false when the loop is gone (nothing queued).
bool server_post(server *s, void (*fn)(server *, void *), void (*drop)(server *, void *), void *ud);

// --- metrics
// vLLM's histograms, one row each in server/metrics.c (its name, help and buckets): the table
// /metrics renders and srv_observe fills.
typedef enum srv_hist_id {
  SRV_H_TTFT,          // arrival (body complete) to first token
  SRV_H_ITL,           // between a request's consecutive tokens
  SRV_H_TPOT,          // the same, under the name vLLM kept until 0.11 (older dashboards)
  SRV_H_REQ_TPOT,      // per request: decode time / (tokens - 1)
  SRV_H_E2E,           // arrival to last token
  SRV_H_QUEUE,         // arrival to first scheduled
  SRV_H_INFERENCE,     // first scheduled to last token
  SRV_H_PREFILL,       // first scheduled to first token
  SRV_H_DECODE,        // first token to last token
  SRV_H_ITERATION,     // tokens per engine step (prefill + decode)
  SRV_H_PROMPT_TOKENS, // per finished request
  SRV_H_GEN_TOKENS,    // per finished request
  SRV_H_N              // not a histogram: how many there are
} srv_hist_id;

enum { SRV_MAX_BOUNDS = 24, SRV_LATE_BUCKETS = 10, SRV_FINISH_KINDS = 3 };
typedef struct srv_hist {
  uint64_t count;
  double sum;
  uint64_t le[SRV_MAX_BOUNDS]; // per bucket (cumulated when rendered)
} srv_hist;

typedef struct srv_replica_gauges {
  int kv_used, kv_total, running, waiting, epoch;
  // the replica's counters since it (re)started: preemptions, prefix-cache lookups and hits
  uint64_t preemptions, prefix_queries, prefix_hits;
  replica_health health;
} srv_replica_gauges;

typedef struct srv_metrics {
  uint64_t prompt_tokens, generation_tokens;
  uint64_t success[SRV_FINISH_KINDS]; // finished_reason stop, length, abort
  uint64_t failed, cancelled;
  uint64_t rejected;  // every request refused with 503 (connections, pending, draining, ...)
  uint64_t timed_out; // connections shut down for missing --request-timeout
  srv_hist h[SRV_H_N];
  double len_bounds[SRV_MAX_BOUNDS]; // token-count buckets: 1, 2, 5, 10, ... to max_model_len
  int n_len_bounds;
  srv_hist late;    // sim: how far past its priced end each step ended (srv_late_bounds)
  srv_hist handout; // sim: from a step's end to its events handed to the connections
  srv_replica_gauges *reps; // (n_reps)
} srv_metrics;

// Renders /metrics (Prometheus text, vLLM's names) from m; malloc'd, NULL when out of memory.
char *srv_metrics_render(const srv_metrics *m, int n_reps, const char *model, int pending);
// The token-count buckets for a context of max_model_len (vLLM's build_1_2_5_buckets).
void srv_metrics_init(srv_metrics *m, int max_model_len);
// Adds v to histogram id (mu held).
void srv_observe(srv_metrics *m, srv_hist_id id, double v);
void srv_hist_add(srv_hist *h, const double *bounds, int n_bounds, double v);
extern const double srv_late_bounds[SRV_LATE_BUCKETS];

// --- restarts: a dead replica rebuilt with a new epoch (the supervisor thread in real mode,
// serving/supervisor.h; the loop itself in sim mode, where a restart returns at once and models
// its load)
typedef struct srv_restart {
  // (loop)
  bool restarting;   // the supervisor owns the replica (the router holds it busy)
  bool given_up;     // dead for good: it cannot restart, restarts are off, or one failed
  int restarts;      // restarts that succeeded
  uint64_t began_ns; // monotonic, when the running restart began
  double last_ms;    // the latest restart's duration
  char note[256];    // the latest restart's outcome ("" none yet)
} srv_restart;

// --- connections (server/http.c): every open connection has a slot, so that one whose request
// does not arrive whole within --request-timeout (a slowloris, an idle keep-alive connection) is
// closed from outside libmicrohttpd's thread: the loop thread's sweep shuts its socket down, and
// libmicrohttpd sees the end and closes it. libmicrohttpd reports a connection closed before it
// closes the descriptor, and the slot leaves the list under conn_mu then, so a descriptor in the
// list is always the connection's own.
typedef struct conn_slot conn_slot;
struct conn_slot {
  int fd;
  uint64_t since_ns; // monotonic: accepted, or its previous request ended (the deadline's start)
  bool in_request;   // its headers are in: the request counts against --max-connections
  bool received;     // the whole request is in (or answered): no deadline until it ends
  bool shut;         // the sweep shut it down
  conn_slot *prev, *next;
};

// Shuts down the connections whose request has not arrived whole within the request timeout, a
// bounded number a pass; returns how many (the loop thread calls it every 50 ms).
int server_http_sweep(server *s);

// The admin endpoints (server/admin.c), on the HTTP thread; each returns the HTTP status and a
// malloc'd JSON body in *body (NULL: out of memory).
int server_admin_faults(server *s, const char *text, size_t len, char **body);
int server_admin_state(server *s, char **body);

// --- the server
struct server {
  server_config c; // strings below are copies
  char *host, *name, *key, *admin, *layout; // admin: the admin token (NULL: no admin API)
  oai_limits lim; // kv_tokens set once ready
  struct MHD_Daemon *d;
  int port;
  int wake_fd; // eventfd: commands or a state change for the loop
  int hup_ep;  // epoll: the generations' sockets, edge-triggered on a hang-up (loop)
  uint32_t next_serial; // (loop)
  gen **resume;         // (loop) connections to resume (flush_resumes), each one reference
  size_t n_resume, cap_resume;
  pthread_t loop;
  bool loop_started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  // (mu)
  server_cmd *cmd_head, *cmd_tail;
  bool ready, failed; // replicas built / failed to build (build_err says why)
  sc_status build_status;
  sc_error build_err;
  bool draining; // new generations get 503
  bool stopping; // the loop is asked to end
  bool stopped;  // the loop has ended: nothing may suspend any more
  int inflight;  // generations accepted and not finished
  int waiting;   // of them, without a first token yet (--max-pending counts these)
  int kv_blocks; // per replica, once ready
  srv_metrics m;
  int gen_conns; // connections holding a generation (a drain waits for their last bytes)
  // (conn_mu) every open connection; n_requests of them with a request in progress
  pthread_mutex_t conn_mu;
  conn_slot *conns;
  int n_open, n_requests;
  uint64_t conns_closed; // ever (an idle server trims its heap once they stop closing)
  unsigned conn_limit; // libmicrohttpd's hard cap on open connections
  // (loop)
  replica **reps;
  int n_reps;
  router *rt;
  req_table reqs;
  gen **by_key;  // (cap_by_key) the generation of each row
  size_t cap_by_key;
  gen *live;     // live generations
  uint64_t t0;   // monotonic at start: the sim replicas' clock origin
  uint64_t vnow; // sim: the virtual clock (ns since t0)
  uint64_t *step_end; // sim (n_reps): when its earliest step not yet handed out ended (0: none)
  bool sim;
  uint64_t n_events; // events handled so far (the gauges refresh when it moves)
  srv_restart *rs;   // (n_reps) each replica's restarts; fields marked there
  // The supervisor (real mode with restarts; NULL: none), started by the loop thread, freed by
  // server_free once the loop has ended.
  supervisor *sup;
};

// The loop thread's body (server/loop.c).
void *server_loop_main(void *arg);
// HTTP side (server/http.c): starts and stops the daemon.
sc_status server_http_start(server *s, sc_error *err);
void server_http_stop(server *s);
// Wakes the loop (writes the eventfd).
void server_wake(server *s);
