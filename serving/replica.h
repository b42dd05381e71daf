// The replica handle: what the router and the runner talk to for one DP replica (one TP x PP
// group). A vtable with more than one implementation (docs/design.md, "Seams"), picked in one
// place, replica_new:
//   local   — the engine in this process, stepped by its own thread (replica_local.c)
//   process — a `shardcheck worker` child over a Unix socket (replica_proc.c, the runner's side;
//             replica_worker.c, the worker's), so a fault can SIGKILL or SIGSTOP it for real
//   sim     — the engine on simulated devices, stepped by the event loop in virtual time
//             (replica_sim.c)
//   http    — an OpenAI-compatible server, launched or already there (replica_http.c with
//             replica_http_watch.c; its readers sse.c and prom.c; admin_client.c for faults)
// The public wrappers, the failure names and replica_new are serving/replica.c.
//
// Requests are named by the caller's key (any uint64 unique within the replica's life), so
// the runner never sees engine ids. submit and cancel never block on a step: their outcome
// arrives as events. Events are pulled with poll; wait_fd (optional) becomes readable when
// events are pending, so a real-mode loop can sleep in ppoll. Calls come from one thread.
#pragma once

#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "engine/engine.h"
#include "kernels/status.h"
#include "serving/launch.h"

typedef enum replica_ev_kind {
  REPLICA_EV_TOKEN,    // one output token of `key`
  REPLICA_EV_FINISHED, // `key` ended normally or was cancelled (reason)
  REPLICA_EV_FAILED,   // `key` failed (status, what); no more events for it
  REPLICA_EV_STEP,     // one engine step ran (step); key unused
} replica_ev_kind;

// Why a request failed (REPLICA_EV_FAILED). The names are what the request row's reason column
// and the worker protocol carry (replica_failure_name).
typedef enum replica_failure {
  REPLICA_FAIL_INVALID,   // "invalid": the engine refused the request
  REPLICA_FAIL_OOM,       // "oom": an allocation failed
  REPLICA_FAIL_TIMEOUT,   // "timeout": a collective passed its deadline
  REPLICA_FAIL_NUMERICAL, // "numerical": NaN or inf logits
  REPLICA_FAIL_FAILED,    // "replica_failed": the replica died of an error of its own
  REPLICA_FAIL_LOST,      // "replica_lost": killed, hung past detection, or swapped away
  // an external server's (replica_http.c):
  REPLICA_FAIL_CONNECT,      // "connect": no connection to the server (refused, unreachable)
  REPLICA_FAIL_PROTOCOL,     // "protocol": a malformed stream, or one cut short
  REPLICA_FAIL_SERVER_ERROR, // "server_error": an {"error": ...} payload in the stream
  REPLICA_FAIL_HTTP,         // "http": an HTTP status other than 200 (http_status says which;
                             // the request row's reason is "http_<status>")
  REPLICA_FAIL_N
} replica_failure;

// The failure's name ("oom", "replica_lost", ...); never NULL.
const char *replica_failure_name(replica_failure f);
// The failure a status names: SC_INVALID invalid, SC_OOM oom, SC_TIMEOUT timeout, SC_NUMERICAL
// numerical, anything else replica_failed.
replica_failure replica_failure_of(sc_status s);
// The failure named `name`; REPLICA_FAIL_FAILED for a name no failure has.
replica_failure replica_failure_parse(const char *name);
// Whether the replica itself was lost (failed or lost): the request may be retried elsewhere.
static inline bool replica_failure_is_loss(replica_failure f) {
  return f == REPLICA_FAIL_FAILED || f == REPLICA_FAIL_LOST;
}

typedef struct replica_event {
  replica_ev_kind kind;
  uint64_t key;
  int32_t token;               // TOKEN
  int index;                   // TOKEN: 0 for the first output token
  uint64_t sched_ns;           // TOKEN index 0: when the engine first scheduled the request, on
                               // the replica's clock (0: not known, e.g. over the worker protocol)
  engine_finish_reason reason; // FINISHED
  int n_generated;             // FINISHED
  sc_status status;            // FAILED
  replica_failure failure;     // FAILED: why
  engine_step_info step;       // STEP (t_start_ns on the replica's clock)
  uint64_t t_ns;               // when the replica produced the event, on its clock
  int http_status;             // FAILED with REPLICA_FAIL_HTTP: the status
  int prompt_tokens;           // FINISHED: the prompt's tokens as the server counted them
  bool has_cached;             // FINISHED: cached_tokens is known
  int cached_tokens;           // FINISHED: prompt tokens served from the prefix cache (the
                               // engine's, a server's usage.prompt_tokens_details.cached_tokens)
  uint64_t text_hash;          // FINISHED from a server: FNV-1a of the text it streamed (0: none)
                               // (0: not known; the request keeps the workload's count)
  const char *what;            // FAILED: this request's own message, owned by the replica and
                               // valid until it is freed (NULL: replica_error says why)
} replica_event;

typedef enum replica_health {
  REPLICA_HEALTHY,
  REPLICA_DRAINING,  // not admitting; running requests go on
  REPLICA_UNHEALTHY, // alive but failing what it is sent (persistent OOM): route elsewhere
  REPLICA_DEAD,      // failed or lost: every request it held got a FAILED event
} replica_health;

// --- faults: what faults/ asks a replica to suffer (faults/inject.c translates the scenario's
// timeline into these). Every implementation takes every kind; how it acts is its own: a
// process replica signals its worker, a local one sets device and link hooks, a simulated one
// changes its modelled behaviour.
typedef enum replica_fault_kind {
  RFAULT_KILL,      // the replica dies at once (process: SIGKILL); held requests fail
  RFAULT_KILL_RANK, // rank's device is lost: its ops fail, its collectives stop; the replica
                    // notices (step failure or collective deadline) and dies
  RFAULT_HANG,      // the whole replica stops progressing (process: SIGSTOP) until RESUME
  RFAULT_HANG_RANK, // one rank blocks in its next op; the collective deadline catches it
  RFAULT_RESUME,    // ends HANG (SIGCONT) or HANG_RANK
  RFAULT_SLOW_RANK, // factor: the rank's ops take factor x their time
  RFAULT_SLOW_LINK, // factor / latency_ns / bandwidth on the replica's collectives
  RFAULT_OOM,       // device allocations fail after after_allocs more succeed
  RFAULT_CORRUPT,   // activations poisoned (nan or bitflip) until CLEAR
  RFAULT_CLEAR,     // ends SLOW_RANK, SLOW_LINK, OOM and CORRUPT
  RFAULT_N          // not a kind: how many there are
} replica_fault_kind;

// A fault kind's row (serving/replica.c): what every implementation and the worker protocol
// check a kind against, so that no check depends on the order of the enum.
typedef struct replica_fault_info {
  const char *name; // "kill", "kill_rank", ...: for messages
  bool names_rank;  // replica_fault.rank picks the rank it acts on (-1: every rank)
} replica_fault_info;

// The row of kind k (static); NULL for a value outside the enum (an unknown kind).
const replica_fault_info *replica_fault_kind_info(replica_fault_kind k);

typedef struct replica_fault {
  replica_fault_kind kind;
  int rank;            // *_RANK, OOM, CORRUPT, CLEAR: rank within the replica; -1 = every rank
  double factor;       // SLOW_*: > 1 multiplies the time (<= 1: unchanged)
  uint64_t latency_ns; // SLOW_LINK: added per transfer
  double bandwidth;    // SLOW_LINK: bytes/s cap (0: none)
  int after_allocs;    // OOM: allocations that still succeed first
  bool persistent;     // OOM: every later allocation fails (else one does)
  bool bitflip;        // CORRUPT: flip a bit (else write NaN)
} replica_fault;

// What a server behind a replica says about itself on its /metrics (an HTTP replica's
// metrics_url), as of a scrape.
typedef struct replica_server_metrics {
  bool have;        // a scrape succeeded and named at least one of the figures below
  double running;   // requests running (NaN: not exposed)
  double waiting;   // requests waiting (NaN: not exposed)
  double kv_usage;  // KV-cache usage, 0..1 (NaN: not exposed)
  double kv_blocks; // KV blocks in use (shardcheck serve only; NaN: not exposed)
  uint64_t t_ns;    // when it was scraped, on the replica's clock
  const char *server; // whose names the text had: "vLLM", "SGLang", "llama.cpp", "TGI",
                      // "shardcheck serve" (static; NULL: none known)
  // REPLICA_SM_LATEST only: since the previous such read, the scrapes that succeeded, how many
  // of them showed a request running, and their largest figures (NaN: not exposed)
  int n_scrapes, n_busy;
  double peak_running, peak_waiting, peak_kv;
  // REPLICA_SM_DRAINED: the KV usage is what the server holds beyond its prompt cache
  // (cleared first where it keeps one); false: not known (why says)
  bool beyond_cache;
  char why[200]; // why a figure is missing: the scrape failed, the text names none of it, the
                 // cache could not be cleared ("": nothing to say)
  // the server's prefix cache (prom_cache_counters; docs/targets.md): its counters of prompt
  // tokens looked up and found, each summed over its series (has_cache: both read; cache_hits
  // and cache_queries name them), or else its own hit-rate gauge (has_gauge); cache_why: why
  // they could not be read (malformed; "": read, or none there)
  bool has_cache, has_gauge;
  double cache_hits, cache_queries, cache_gauge;
  const char *cache_names; // "vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total"
                           // or the gauge's name (static; NULL: none)
  char cache_why[120];
} replica_server_metrics;

// When replica_server_metrics_get reads.
typedef enum replica_sm_when {
  REPLICA_SM_LATEST,  // the latest scrape, with what accumulated since the previous such read
  REPLICA_SM_NOW,     // a scrape now on the calling thread (blocks up to 2 s)
  REPLICA_SM_DRAINED, // nothing runs: the server's prompt cache cleared where it keeps one
                      // (llama.cpp: its slots erased), then a scrape now
} replica_sm_when;

typedef struct replica replica;

typedef struct replica_i {
  // Queues a request. Fails only when the replica is dead (SC_ABORTED); a request the engine
  // refuses comes back as a FAILED event.
  sc_status (*submit)(void *ctx, uint64_t key, const engine_request *r, sc_error *err);
  // Cancels a request (a FINISHED event with FINISH_CANCELLED follows); unknown keys ignored.
  void (*cancel)(void *ctx, uint64_t key);
  // Moves up to cap pending events into out, oldest first; returns how many. Never blocks.
  int (*poll)(void *ctx, replica_event *out, int cap);
  // Optional (NULL): an fd that is readable while events are pending.
  int (*wait_fd)(void *ctx);
  replica_health (*health)(void *ctx);
  void (*set_admitting)(void *ctx, bool admitting);
  // The engine's stats after its latest step.
  void (*stats)(void *ctx, engine_stats *out);
  // Device memory of rank r after the latest step (bytes).
  sc_status (*rank_mem)(void *ctx, int r, size_t *used, size_t *total);
  // Why the replica died ("" while it lives).
  const char *(*error)(void *ctx);
  // Optional (NULL: takes no faults). Applies a fault (see replica_fault). SC_INVALID for a
  // rank out of range; SC_ABORTED when the replica is dead (a fault on a dead replica does
  // nothing).
  sc_status (*inject)(void *ctx, const replica_fault *f, sc_error *err);
  // Optional (NULL: cannot restart): rebuilds a DEAD replica from its config with a new
  // epoch, blocking until it is ready (or failed: err). Anything the old incarnation still
  // sends is discarded (fencing). Faults in force are cleared.
  sc_status (*restart)(void *ctx, sc_error *err);
  // Optional (NULL: always 1). The incarnation serving now: 1 at start, +1 per restart or
  // swap.
  int (*epoch)(void *ctx);
  // Optional (NULL: cannot change its weights). Rebuilds a live replica with other weights:
  // cfg's model, weights_dir, weights_seed and weight_dtype (for a simulated replica also
  // sim.model and sim.static_bytes) replace the current ones; layout, limits and clock stay.
  // The caller drains it first; requests it still holds fail with "replica_lost". Blocks until
  // the new weights are loaded (a simulated replica models the load time and admits once it is
  // over). On error the replica is DEAD and err says why. Faults in force are cleared.
  sc_status (*swap)(void *ctx, const engine_config *cfg, sc_error *err);
  // Optional, both or neither (NULL: the replica steps on its own, in real time). A replica
  // the event loop steps in virtual time. next_ns: when it next has work (the end of its step
  // in flight; the clock's now when idle with work queued or events to hand back; UINT64_MAX
  // when idle). advance: brings it to `now` (its clock already reads now): a step in flight
  // that ends at or before now completes and its events become pollable; then, if work is
  // queued, the next step starts (planned and priced at once, its events held until it ends).
  // True when events became pollable.
  uint64_t (*next_ns)(void *ctx);
  bool (*advance)(void *ctx, uint64_t now);
  // Optional (NULL: prices its steps alone). The deployment's replicas reps[0..n) (itself
  // included; they outlive it): a simulated replica prices a step with the ranks of the peers
  // that have a step in flight at its start, plus its own, sharing the host
  // (sim_layout.cluster_ranks), since an idle replica uses no cores.
  void (*set_peers)(void *ctx, replica *const *reps, int n);
  // Optional (NULL: runs on this process's wall clock). Its wall clock minus this process's,
  // as of its latest report (ns); false before the first report of its current incarnation.
  bool (*wall_skew)(void *ctx, int64_t *skew_ns);
  // Optional (NULL: every submission is admitted as soon as the engine takes it). While held,
  // submissions queue up and none is admitted; on release they reach the engine together, at
  // its next step boundary, so requests that arrive at one instant start in one step (without
  // it, the engine may start a step between two of them). Steps of work already admitted go
  // on while held. The caller releases what it holds, promptly.
  void (*hold)(void *ctx, bool on);
  // Optional (NULL: ready once built). Blocks until the replica can take requests (a launched
  // server answers its readiness check), it cannot (err says why), or *interrupted is set. The
  // caller builds every replica of a deployment first, then waits for each, so launches
  // overlap.
  sc_status (*wait_ready)(void *ctx, volatile sig_atomic_t *interrupted, sc_error *err);
  // Optional (NULL: it runs in this process). The pid of the process serving it now (a
  // worker; a launched server, also its process group id); 0 when none runs.
  int (*pid)(void *ctx);
  // Optional (NULL: 0). The port its requests go to (an HTTP replica's url; the scheme's default
  // when the url names none); 0: none.
  int (*port)(void *ctx);
  // Optional (NULL: there is no server behind it to ask). What its server says about itself,
  // read as `when` says (a read now is kept as the latest). False when there are none: no
  // metrics URL, nothing scraped yet, no answer 200, or none of the figures named (out->why
  // says which).
  bool (*server_metrics)(void *ctx, replica_sm_when when, replica_server_metrics *out);
  // Optional (NULL: a swap needs nothing but the engine config). A hot swap's next incarnation,
  // before swap, on a drained replica: a launched server is relaunched from launch_template
  // (NULL: the current one) with {model} = model (NULL: the current one), and requests name
  // that model from then on. SC_INVALID when it cannot (a server it did not launch) or the
  // template does not expand; nothing changes then.
  sc_status (*stage_swap)(void *ctx, const char *launch_template, const char *model,
                          sc_error *err);
  void (*free)(void *ctx);
} replica_i;

struct replica {
  const replica_i *i;
  void *ctx;
  int index; // replica number within the deployment
  int n_ranks;
  // Its events' t_ns are the moments a client saw them, on the caller's clock (an HTTP
  // replica stamps each chunk as it arrives): the runner records those rather than the moment
  // it pulled the events.
  bool client_stamps;
};

// Builds a local replica: engine_new on the calling thread (errors come back here, err says
// why), then a stepping thread. On error *out is NULL.
sc_status replica_local_new(const engine_config *cfg, int index, replica **out, sc_error *err);
// Builds a simulated replica: cfg->backend "sim" and cfg->clock the caller's virtual clock.
// No thread: the event loop drives it with the two calls below. On error *out is NULL.
sc_status replica_sim_new(const engine_config *cfg, int index, replica **out, sc_error *err);
bool replica_is_sim(const replica *r);
// --- process replicas (replica_proc.c): each a `shardcheck worker` child holding a local
// replica, spoken to over a Unix socket (submit, cancel, admitting, inject; events, stats and
// heartbeats back).
typedef struct replica_proc_options {
  const char *exe;           // the shardcheck binary to run as `EXE worker` (NULL:
                             // /proc/self/exe, right when the caller is shardcheck itself)
  uint64_t detect_timeout_ns; // no heartbeat (or event) for this long: the replica is lost
                             // (DEAD, its requests FAILED with what "replica_lost"); 0: 2 s
  uint64_t heartbeat_ns;     // how often the worker reports (0: 100 ms)
  const char *const *env;    // NULL-terminated "NAME=value" entries added to (or replacing
                             // in) the worker's environment; NULL: none
  bool mpi;                  // the replica's tp x pp ranks are the processes of one MPI job
                             // (serving/replica_mpi.c), started by mpirun or mpiexec on PATH
  const char *hostfile;      // mpi: the hostfile placing the ranks (NULL: all on this host,
                             // --oversubscribe)
} replica_proc_options;

// Starts the worker (killed with the caller: PR_SET_PDEATHSIG), sends it cfg, waits until its
// engine is built. On error *out is NULL and err says why (the worker's own error when it
// failed to build its engine).
sc_status replica_proc_new(const engine_config *cfg, const replica_proc_options *o, int index,
                           replica **out, sc_error *err);
bool replica_is_proc(const replica *r);
// The worker's pid now (0 when none runs).
int replica_proc_pid(const replica *r);

// --- HTTP replicas (replica_http.c): an OpenAI-compatible server, one streaming POST per
// request over libcurl's multi interface, driven by a thread of its own; optionally a server
// it launched itself (serving/launch.h) and stops when freed.
typedef struct replica_http_options {
  const char *base_url;     // ".../v1": requests go to BASE/completions or BASE/chat/completions
  bool chat;                // the chat API (generated text) instead of completions (token ids)
  const char *model;        // the served model name sent in every request
  const char *api_key;      // sent as "Authorization: Bearer KEY" (NULL: none)
  const char *extra_body;   // a JSON object merged into every request body (NULL: none)
  // launching (command NULL: the server is already there at base_url)
  const char *command;      // the expanded launch command
  const char *const *env;   // NULL-terminated "NAME=value" entries for it (NULL: none)
  const char *log_path;     // its stdout and stderr
  const char *ready_url;    // polled until HTTP 200 (wait_ready)
  uint64_t ready_timeout_ns;
  uint64_t stop_grace_ns;   // SIGTERM, then SIGKILL after this (0: 10 s)
  uint64_t connect_timeout_ns; // a request not connected by then fails with "connect" (0: 10 s)
  // faults (docs/targets.md, "Faults"): with detect_timeout_ns > 0 the replica watches its
  // server once ready: a launched server that exits, or ready_url unanswered (HTTP 200) for
  // this long, makes it DEAD (every request it held fails with "replica_lost"); a dropped or
  // refused connection fails its request with "replica_lost" and makes the replica UNHEALTHY
  // until a probe answers. 0: none of that (a drop is "protocol", a refusal "connect").
  uint64_t detect_timeout_ns;
  const char *rank_process; // kill: gpu: a regex on a descendant's command line (NULL: none)
  const char *metrics_url;  // scraped for running / waiting requests and KV usage (NULL: none)
  // shardcheck serve's POST /admin/faults and its --admin-token: oom, corrupt and slow (and
  // their clear) are sent there (NULL: the replica takes none of them)
  const char *admin_url, *admin_token;
  // hot swaps: the template command was expanded from and its values, to expand another one
  // (or the same with another {model}) for a relaunch; template NULL: no swap
  const char *launch_template;
  launch_vars vars;
} replica_http_options;

// Builds an HTTP replica (launching its server when o->command is set; readiness is waited for
// by replica_wait_ready) stamping events on clock (cfg->clock; monotonic when unset). cfg gives
// the layout (tp x pp ranks, for reports); requests bring their own sampling. On error *out is
// NULL and err says why.
sc_status replica_http_new(const engine_config *cfg, const replica_http_options *o, int index,
                           replica **out, sc_error *err);
// libcurl's socket callback (CURLMOPT_SOCKETFUNCTION) for a multi handle driven through an
// epoll set: ep (CURLMOPT_SOCKETDATA) points at the set's fd; each socket is watched for what
// libcurl asks, its epoll data the fd. The HTTP replica's thread uses it, as can a client.
int replica_http_epoll_sock(void *easy, int fd, int what, void *ep, void *socketp);

// --- picking an implementation
typedef enum replica_kind {
  REPLICA_LOCAL,   // replica_local_new
  REPLICA_PROCESS, // replica_proc_new with proc's options
  REPLICA_SIM,     // replica_sim_new
  REPLICA_HTTP,    // replica_http_new with http's options
} replica_kind;

typedef struct replica_options {
  replica_kind kind;
  replica_proc_options proc; // REPLICA_PROCESS only
  replica_http_options http; // REPLICA_HTTP only
} replica_options;

// Builds replica `index` of kind o->kind from cfg: the one place an implementation is picked.
// On error *out is NULL and err says why.
sc_status replica_new(const replica_options *o, const engine_config *cfg, int index,
                       replica **out, sc_error *err);

// The worker side: serves one replica on fd until the socket closes or the engine dies; the
// return value is the process's exit status (0: the runner closed the socket; 3: the engine
// failed). cli/cmd_worker.c calls it.
int replica_proc_serve(int fd);

// Stops the replica's thread and frees everything. NULL is a no-op.
void replica_free(replica *r);

static inline sc_status replica_submit(replica *r, uint64_t key, const engine_request *q,
                                       sc_error *err) {
  return r->i->submit(r->ctx, key, q, err);
}
static inline void replica_cancel(replica *r, uint64_t key) { r->i->cancel(r->ctx, key); }
static inline int replica_poll(replica *r, replica_event *out, int cap) {
  return r->i->poll(r->ctx, out, cap);
}
static inline int replica_wait_fd(replica *r) { return r->i->wait_fd ? r->i->wait_fd(r->ctx) : -1; }
static inline replica_health replica_health_get(replica *r) { return r->i->health(r->ctx); }
static inline void replica_set_admitting(replica *r, bool a) { r->i->set_admitting(r->ctx, a); }
static inline void replica_hold(replica *r, bool on) {
  if (r->i->hold) r->i->hold(r->ctx, on);
}
static inline void replica_stats(replica *r, engine_stats *out) { r->i->stats(r->ctx, out); }
static inline sc_status replica_wait_ready(replica *r, volatile sig_atomic_t *interrupted,
                                           sc_error *err) {
  return r->i->wait_ready ? r->i->wait_ready(r->ctx, interrupted, err) : SC_OK;
}
static inline sc_status replica_rank_mem(replica *r, int rank, size_t *used, size_t *total) {
  return r->i->rank_mem(r->ctx, rank, used, total);
}
static inline const char *replica_error(replica *r) { return r->i->error(r->ctx); }
static inline sc_status replica_inject(replica *r, const replica_fault *f, sc_error *err) {
  return r->i->inject ? r->i->inject(r->ctx, f, err)
                      : sc_fail(err, SC_INVALID, "this replica takes no faults");
}
static inline bool replica_can_restart(const replica *r) { return r->i->restart != NULL; }
static inline sc_status replica_restart(replica *r, sc_error *err) {
  return r->i->restart ? r->i->restart(r->ctx, err) : SC_INVALID;
}
static inline int replica_epoch(replica *r) { return r->i->epoch ? r->i->epoch(r->ctx) : 1; }
static inline bool replica_can_swap(const replica *r) { return r->i->swap != NULL; }
static inline sc_status replica_swap(replica *r, const engine_config *cfg, sc_error *err) {
  return r->i->swap ? r->i->swap(r->ctx, cfg, err)
                    : sc_fail(err, SC_INVALID, "this replica cannot change its weights");
}
// Virtual time (next_ns/advance): UINT64_MAX and false for a replica that steps on its own.
static inline bool replica_in_virtual_time(const replica *r) { return r->i->next_ns != NULL; }
static inline uint64_t replica_next_ns(replica *r) {
  return r->i->next_ns ? r->i->next_ns(r->ctx) : UINT64_MAX;
}
static inline bool replica_advance(replica *r, uint64_t now) {
  return r->i->advance ? r->i->advance(r->ctx, now) : false;
}
static inline bool replica_wall_skew(replica *r, int64_t *skew_ns) {
  return r->i->wall_skew ? r->i->wall_skew(r->ctx, skew_ns) : false;
}
static inline bool replica_has_pid(const replica *r) { return r->i->pid != NULL; }
static inline int replica_pid(replica *r) { return r->i->pid ? r->i->pid(r->ctx) : 0; }
static inline int replica_port(replica *r) { return r->i->port ? r->i->port(r->ctx) : 0; }
static inline bool replica_has_server_metrics(const replica *r) {
  return r->i->server_metrics != NULL;
}
// *out holds the figures when it returns true.
static inline bool replica_server_metrics_get(replica *r, replica_sm_when when,
                                              replica_server_metrics *out) {
  if (r->i->server_metrics) return r->i->server_metrics(r->ctx, when, out);
  *out = (replica_server_metrics){.running = NAN, .waiting = NAN, .kv_usage = NAN,
                                  .kv_blocks = NAN, .peak_running = NAN, .peak_waiting = NAN,
                                  .peak_kv = NAN};
  static const char why[] = "no server behind the replica";
  memcpy(out->why, why, sizeof why);
  return false;
}
static inline sc_status replica_stage_swap(replica *r, const char *launch_template,
                                           const char *model, sc_error *err) {
  return r->i->stage_swap ? r->i->stage_swap(r->ctx, launch_template, model, err) : SC_OK;
}
// Makes reps[0..n) (one deployment's replicas; reps outlives them) each other's peers.
void replica_set_peers(replica *const *reps, int n);
