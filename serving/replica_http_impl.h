// The HTTP replica's state, shared by its files (serving/replica.h is the public side). Internal
// to serving/replica_http*.c: replica_http.c holds the requests' streams, the thread and the
// vtable; replica_http_watch.c watches the server (exits, readiness probes, /metrics scrapes).
#pragma once

#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "kernels/clock.h"
#include "serving/launch.h"
#include "serving/replica.h"
#include "serving/replica_keys.h"
#include "serving/sse.h"

#define POLL_MS 1000             // the thread's longest sleep (woken earlier by any call)
#define CONNECT_TIMEOUT_NS 10000000000ull // connect_timeout_ns's default
#define ERR_BODY_MAX 2048        // bytes of a non-200 response kept for the message
#define MAX_CONNECTS       65536L      // connections kept alive in the cache (more than streams)
#define WATCH_MS           50          // the thread's longest sleep while it watches its server
#define SCRAPE_NS          500000000ull  // how often the metrics URL is read
#define MSG_BLOCK          65536         // failure messages are kept in blocks of this many bytes
#define EPOLL_BATCH        1024          // socket events taken per wait
#define SHARDS             16            // libcurl multi handles the thread drives
#define SHARD_STREAMS      1024          // streams a shard takes before the next is used

// A body read into memory, NUL-terminated (p NULL: nothing yet).
typedef struct grow_buf {
  char *p;
  size_t n;
} grow_buf;

// --- one request
typedef struct hreq {
  uint64_t key;
  CURL *easy;
  char *body;            // the JSON request (owned; libcurl reads it while sending)
  sse_parser sse;
  struct hrep *rep;
  long status;           // HTTP status once the headers are in (0 before)
  char err_body[ERR_BODY_MAX + 1]; // a non-200 response's first bytes
  size_t n_err_body;
  int n_tok;             // tokens handed out as TOKEN events
  int pending;           // tokens seen (token_ids of a content-less chunk) not yet handed out
  int32_t pend_ids[64];  // their ids while every one is known and they fit (pend_ids_ok)
  bool pend_ids_ok;
  uint64_t last_content; // when the last content chunk arrived (0: none yet)
  uint64_t connect_by;   // monotonic ns: fails unless connected by then (0: connected)
  bool done;             // [DONE] seen
  bool failed;           // a FAILED event went out: nothing more for it
  replica_failure why;
  char msg[256];
  int prompt_tokens;     // usage.prompt_tokens (-1: not seen)
  int usage_completion;  // usage.completion_tokens (-1: not seen)
  uint64_t text_hash;    // FNV-1a of the streamed text so far (oai_text_hash)
  int slot;              // its index in hrep.reqs
  int shard;             // the multi handle it is in (hrep.sh)
} hreq;

// Failure messages, kept until the replica is freed (replica_event.what points into them).
typedef struct msg_block {
  struct msg_block *next;
  size_t used;
  char text[MSG_BLOCK];
} msg_block;

typedef struct inbox_item {
  bool cancel;
  uint64_t key;
  char *body; // submit: the JSON request (owned)
} inbox_item;

// One libcurl multi handle of the thread, with its share of the streams. libcurl 7.88 walks
// a multi's connections for a host when a transfer starts or ends, and finds a socket in a
// hash of 911 buckets on every action: with 10,000 streams in one multi those walks were a
// third of the thread's CPU (docs/benchmarks.md, the HTTP client). Streams fill shard 0 up to
// SHARD_STREAMS, then the next, so a few streams behave as with one multi handle.
typedef struct hshard {
  CURLM *multi;
  struct hrep *h;
  int k;           // its index in hrep.sh
  int n;           // streams in it
  bool timer_set;  // libcurl asked for a timeout at timer_at (monotonic ns)
  uint64_t timer_at;
} hshard;

typedef struct hrep {
  replica_http_options o;
  char *base_url, *model, *api_key, *extra_body, *url; // owned copies; url = the endpoint
  char *command, *log_path, *ready_url;
  char **env;                 // (NULL-terminated) owned copies
  json_t *extra;              // extra_body parsed
  sc_clock clock;
  launch_proc *launch;
  hshard sh[SHARDS];          // the probe and the scrape use sh[0]
  struct curl_slist *headers; // shared by every request (read-only)
  pthread_t thread;
  bool thread_started;
  pthread_mutex_t mu;
  bool stop;                  // (mu)
  inbox_item *in;             // (mu) (cap_in)
  int n_in, cap_in;
  replica_evq out;            // (mu)
  int evfd;
  bool signalled;             // (mu) evfd holds a count
  bool admitting;             // (mu)
  char last_error[256];       // (mu) the latest failure's message
  char error_seen[256];       // caller's copy, refreshed by poll
  msg_block *msgs;            // (mu) every failed request's own message
  // faults
  pthread_mutex_t lmu; // guards launch (the supervisor relaunches it)
  uint64_t detect_ns;  // 0: no watching
  bool watching;       // (mu) ready once: watch the server from here on
  bool dead;           // (mu) the server is lost: DEAD until restarted
  bool suspect;        // (mu) a connection failed: UNHEALTHY until a probe answers
  bool probe_reset;    // (mu) the thread's probe clock starts now (ready, relaunched)
  bool have_skew;      // (mu) skew_ns holds the current incarnation's wall clock
  int64_t skew_ns;     // (mu) its Date header minus our wall clock, whole seconds
  char dead_why[256];  // (mu)
  int epoch;           // (mu) 1, +1 per restart
  char *rank_process, *metrics_url;
  char *admin_url, *admin_token; // shardcheck serve's admin API (NULL: none)
  // hot swaps: what the command was expanded from, and the next incarnation's (staged)
  char *tmpl, *gpus, *exe;         // owned copies (tmpl NULL: no swap)
  launch_vars vars;                // gpus and exe point at the copies; model at model
  char *next_command, *next_model; // (lmu) staged by stage_swap
  replica_server_metrics sm; // (mu) the latest scrape, and what accumulated since the runner's
                             // last read (n_scrapes, n_busy, peaks)
  // the thread's own
  int ep, wake_fd; // the thread's epoll set (libcurl's sockets) and its wake-up
  hreq **reqs;                // (cap_reqs) requests in flight
  int n_reqs, cap_reqs;
  CURL *probe, *scrape; // the readiness probe and the metrics scrape (in the multi while
                        // in flight)
  bool probe_busy, scrape_busy;
  time_t probe_date;                          // the probe answer's Date header (0: none)
  uint64_t probe_ok, probe_next, scrape_next; // monotonic ns
  uint64_t connect_ns;   // how long a transfer may take to connect
  uint64_t connect_scan; // monotonic ns: the earliest connect_by in flight (0: none)
  grow_buf scrape_text; // the scrape's body so far
} hrep;

static inline uint64_t now_ns(hrep *h) { return sc_clock_now(&h->clock); }

// --- the streams (serving/replica_http.c), used by the watcher
// Fails q (once) with why and a message (an event for the caller); its transfer is removed by
// the caller of this (hr_drop_req). The thread's.
void hr_fail_req(hrep *h, hreq *q, replica_failure why, int http_status, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
// Detaches and frees request i of the thread's list.
void hr_drop_req(hrep *h, int i);
// Wakes the thread (a submit, a cancel, a stop, a relaunch). Any thread.
void hr_wake(hrep *h);

// --- watching the server (serving/replica_http_watch.c)
// Once per turn of the thread: scrapes, and with a detect timeout, notices the server's end
// (an exit, the readiness URL unanswered for the timeout): then the replica is DEAD and every
// request in flight fails with replica_lost.
void hr_watch(hrep *h);
// The thread's probe (h->probe) or scrape (h->scrape) transfer ended with rc.
void hr_probe_done(hrep *h, CURLcode rc);
void hr_scrape_done(hrep *h, CURLcode rc);
// From now on the thread watches the server (probes from now). Any thread.
void hr_start_watching(hrep *h);
// The server_metrics slot (serving/replica.h): the latest scrape and what accumulated since
// the previous such read, or one now (the caller's thread), or the drained KV read.
bool hr_server_metrics(void *ctx, replica_sm_when when, replica_server_metrics *out);
