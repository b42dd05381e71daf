// The HTTP replica: one OpenAI-compatible server (vLLM, SGLang, TGI, llama.cpp's server,
// shardcheck serve) behind the replica seam. Each request is one streaming POST to
// BASE/completions (prompt = the workload's token ids) or BASE/chat/completions (a user message
// of generated words), with stream: true and stream_options.include_usage, max_tokens from the
// request and extra_body merged in.
//
// Threads. The caller's thread only touches the inbox (submits, cancels) and the outbox
// (events) under one mutex, and wakes the replica's thread through an eventfd. That thread
// owns the libcurl multi handles (hshard: up to SHARDS of SHARD_STREAMS streams each, filled
// in turn): it turns the inbox into easy handles (added: a stream opens;
// removed: cancel closes it) and sleeps in epoll on libcurl's sockets (its socket and timer
// callbacks keep the set), handing libcurl only the sockets that are ready
// (curl_multi_socket_action), so thousands of streams share one thread and keep-alive
// connections and a wake costs what is ready, not what is open. Body bytes go through
// sse.h's parser; each chunk becomes events stamped on the run's clock as it arrives
// (client_stamps: the runner keeps these stamps). An eventfd is readable while events wait
// (wait_fd).
//
// Timing rules (docs/metrics.md, "External targets"): a token is output the client can see,
// so the first token is the first chunk with non-empty content (a chat role chunk or an empty
// prefill chunk is not one). A chunk counts every token it holds: len(token_ids) when the
// server sends them, else 1, with the usage chunk's completion_tokens making up the difference
// at the end; tokens that arrive without content (or are only counted by usage) are stamped
// with the next content chunk, or the last one. The request ends (FINISHED) at its last content
// chunk. An {"error": ...} payload fails the request with server_error, a malformed stream with
// protocol, a status other than 200 with http_<status>, no connection with connect.
//
// A launched server (launch.h) belongs to its replica: started when it is built, waited for in
// wait_ready, stopped when it is freed.
//
// Faults (docs/targets.md, "Faults"). inject signals the launched server's process group
// (kill: SIGKILL; hang: SIGSTOP, resume: SIGCONT) or one descendant whose command line matches
// rank_process (kill: gpu); with shardcheck serve's admin URL and token, oom, corrupt and slow
// (and their clear) are POSTed to its /admin/faults instead, blocking the caller up to 5 s
// (serving/admin_client.c).
// With a detect timeout the thread also watches the server once it
// is ready: a launched server that exits, or a readiness URL unanswered for the timeout (a
// stopped server), makes the replica DEAD and fails every request it held with replica_lost;
// a connection refused or dropped mid-stream fails that request with replica_lost (the router
// retries or resumes it) and makes the replica UNHEALTHY until a probe answers. restart runs on
// the fault runtime's supervisor thread: SIGKILL what is left of the group, relaunch the same
// command (its log appended to), wait until ready, next epoch. The launched process is shared
// between that thread and this one under lmu.
//
// Watching and scraping (serving/replica_http_watch.c, behind serving/replica_http_impl.h with
// the state): with a metrics URL the thread GETs it every second and keeps the running and
// waiting requests and the KV usage it names (vLLM's, SGLang's, llama.cpp's and shardcheck
// serve's names, read by serving/prom.c), for the runner's samples and the KV-leak verdict.
#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "serving/replica_http_impl.h"
#include "serving/admin_client.h"

static const replica_i http_i;

// The replica whose thread is running on this thread (NULL elsewhere): its events wake the
// caller once per turn of the thread (signal_out) rather than once per event, which cost a
// wake-up and two context switches per chunk.
static _Thread_local hrep *tl_batching;

// Makes evfd readable if events wait (mu held).
static void signal_out(hrep *h) {
  if (h->signalled || rq_len(&h->out) == 0) return;
  uint64_t one = 1;
  ssize_t w = write(h->evfd, &one, sizeof one);
  (void)w;
  h->signalled = true;
}

// Appends an event (mu held).
static void push_out(hrep *h, const replica_event *ev) {
  if (!rq_push(&h->out, ev)) return; // out of memory: the runner's request timeout catches it
  if (tl_batching != h) signal_out(h);
}

static void emit(hrep *h, const replica_event *ev) {
  pthread_mutex_lock(&h->mu);
  push_out(h, ev);
  pthread_mutex_unlock(&h->mu);
}

// Hands out n tokens of q stamped at t (ids from ids[0..n_ids) when given).
static void emit_tokens(hrep *h, hreq *q, int n, const int32_t *ids, int n_ids, uint64_t t) {
  pthread_mutex_lock(&h->mu);
  for (int i = 0; i < n; i++) {
    // -1: an id the server did not send (or chat, whose prompts are words: no resume from it)
    replica_event ev = {.kind = REPLICA_EV_TOKEN,
                        .key = q->key,
                        .index = q->n_tok,
                        .token = i < n_ids && !h->o.chat ? ids[i] : -1,
                        .t_ns = t};
    push_out(h, &ev);
    q->n_tok++;
  }
  pthread_mutex_unlock(&h->mu);
}

// A copy of text kept until the replica is freed (mu held); NULL when memory ran out.
static const char *keep_msg(hrep *h, const char *text) {
  size_t n = strlen(text) + 1;
  if (n > MSG_BLOCK) return NULL;
  if (!h->msgs || h->msgs->used + n > MSG_BLOCK) {
    msg_block *b = malloc(sizeof *b);
    if (!b) return NULL;
    b->next = h->msgs;
    b->used = 0;
    h->msgs = b;
  }
  char *p = h->msgs->text + h->msgs->used;
  memcpy(p, text, n);
  h->msgs->used += n;
  return p;
}

// Fails q (once) with why and a message; its transfer is removed by the caller.
void hr_fail_req(hrep *h, hreq *q, replica_failure why, int http_status, const char *fmt,
                     ...) {
  if (q->failed) return;
  q->failed = true;
  q->why = why;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(q->msg, sizeof q->msg, fmt, ap);
  va_end(ap);
  replica_event ev = {.kind = REPLICA_EV_FAILED, .key = q->key, .status = SC_IO, .failure = why,
                      .http_status = http_status, .t_ns = now_ns(h)};
  pthread_mutex_lock(&h->mu);
  snprintf(h->last_error, sizeof h->last_error, "%s", q->msg);
  ev.what = keep_msg(h, q->msg);
  push_out(h, &ev);
  pthread_mutex_unlock(&h->mu);
}

// --- the stream of one request
static bool on_event(void *ud, const char *data, size_t len, bool error) {
  hreq *q = ud;
  hrep *h = q->rep;
  uint64_t t = now_ns(h);
  oai_chunk c;
  if (error) oai_error_parse(data, len, &c);
  else oai_chunk_parse_text(data, len, &q->text_hash, &c);
  switch (c.kind) {
  case OAI_CHUNK_DONE: q->done = true; return true;
  case OAI_CHUNK_ERROR:
    hr_fail_req(h, q, REPLICA_FAIL_SERVER_ERROR, 0, "the server sent an error mid-stream: %s",
             c.error);
    return false;
  case OAI_CHUNK_BAD:
    hr_fail_req(h, q, REPLICA_FAIL_PROTOCOL, 0, "malformed chunk (%s): %.80s", c.error, data);
    return false;
  case OAI_CHUNK_DATA: break;
  }
  if (q->done) {
    hr_fail_req(h, q, REPLICA_FAIL_PROTOCOL, 0, "a chunk after [DONE]");
    return false;
  }
  if (c.has_usage) {
    q->usage_completion = c.usage_completion;
    if (c.usage_prompt >= 0) q->prompt_tokens = c.usage_prompt;
  }
  int n = c.n_token_ids >= 0 ? c.n_token_ids : (c.has_content ? 1 : 0);
  int n_ids = c.n_token_ids > 64 ? 64 : c.n_token_ids;
  if (!c.has_content) { // tokens the client cannot see yet: counted with the next content
    if (n == 0) return true; // no token here (the usage chunk, a role chunk)
    if (q->pending == 0) q->pend_ids_ok = true;
    if (n_ids < n || q->pending + n > 64) q->pend_ids_ok = false;
    for (int i = 0; i < n && q->pend_ids_ok; i++) q->pend_ids[q->pending + i] = c.token_ids[i];
    q->pending += n;
    return true;
  }
  if (n < 1) n = 1; // content is at least one token
  if (q->pending > 0) { // carried tokens first, then this chunk's own
    emit_tokens(h, q, q->pending, q->pend_ids, q->pend_ids_ok ? q->pending : 0, t);
    q->pending = 0;
  }
  emit_tokens(h, q, n, c.token_ids, n_ids > 0 ? n_ids : 0, t);
  q->last_content = t;
  return true;
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud) {
  hreq *q = ud;
  size_t n = size * nmemb;
  if (q->failed) return 0; // ends the transfer
  if (!q->status) curl_easy_getinfo(q->easy, CURLINFO_RESPONSE_CODE, &q->status);
  if (q->status != 200) { // keep the start of the error body for the message
    size_t k = ERR_BODY_MAX - q->n_err_body;
    if (k > n) k = n;
    memcpy(q->err_body + q->n_err_body, ptr, k);
    q->n_err_body += k;
    q->err_body[q->n_err_body] = 0;
    return n;
  }
  if (!sse_feed(&q->sse, ptr, n, on_event, q)) {
    if (q->sse.failed)
      hr_fail_req(q->rep, q, REPLICA_FAIL_PROTOCOL, 0, "malformed event stream: %s", q->sse.why);
    return 0; // the transfer ends; the request has failed
  }
  return n;
}

// A connection failed: UNHEALTHY until the next probe answers (the probe is moved up).
static void suspect(hrep *h) {
  pthread_mutex_lock(&h->mu);
  h->suspect = true;
  pthread_mutex_unlock(&h->mu);
  h->probe_next = 0;
}

// q got no connection (why: curl's words, or the deadline's): watched, that is the replica's
// loss; else the request's.
static void no_connection(hrep *h, hreq *q, const char *why) {
  if (h->detect_ns) suspect(h);
  hr_fail_req(h, q, h->detect_ns ? REPLICA_FAIL_LOST : REPLICA_FAIL_CONNECT, 0,
           "no connection to %s: %s", h->url, why);
}

// The transfer of q ended with result rc (its easy handle is still attached).
static void on_done(hrep *h, hreq *q, CURLcode rc) {
  if (q->failed) return;
  long status = q->status;
  if (!status) curl_easy_getinfo(q->easy, CURLINFO_RESPONSE_CODE, &status);
  bool refused = rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
                 (rc == CURLE_OPERATION_TIMEDOUT && status == 0);
  if (refused) {
    no_connection(h, q, curl_easy_strerror(rc));
    return;
  }
  if (h->detect_ns && rc != CURLE_OK && (status == 0 || status == 200)) {
    // watched: a connection dropped is the replica's loss, not the request's
    suspect(h);
    hr_fail_req(h, q, REPLICA_FAIL_LOST, 0, "the connection to %s dropped %s: %s", h->url,
             q->n_tok ? "mid-stream" : "before the first token", curl_easy_strerror(rc));
    return;
  }
  if (status != 0 && status != 200) {
    hr_fail_req(h, q, REPLICA_FAIL_HTTP, (int)status, "HTTP %ld from %s: %.200s", status, h->url,
             q->err_body);
    return;
  }
  if (rc != CURLE_OK) {
    hr_fail_req(h, q, REPLICA_FAIL_PROTOCOL, 0, "the stream broke off: %s", curl_easy_strerror(rc));
    return;
  }
  if (!q->done || sse_pending(&q->sse)) {
    hr_fail_req(h, q, REPLICA_FAIL_PROTOCOL, 0, "the stream ended without data: [DONE]");
    return;
  }
  uint64_t t = q->last_content ? q->last_content : now_ns(h);
  int extra = q->pending;
  if (q->usage_completion > q->n_tok + extra) extra = q->usage_completion - q->n_tok;
  if (extra > 0)
    emit_tokens(h, q, extra, q->pend_ids, q->pend_ids_ok && extra == q->pending ? extra : 0, t);
  replica_event ev = {.kind = REPLICA_EV_FINISHED, .key = q->key, .reason = FINISH_LENGTH,
                      .n_generated = q->n_tok,
                      .prompt_tokens = q->prompt_tokens > 0 ? q->prompt_tokens : 0, .t_ns = t,
                      .text_hash = q->text_hash};
  emit(h, &ev);
}

static void req_free(hreq *q) {
  if (!q) return;
  if (q->easy) curl_easy_cleanup(q->easy);
  sse_free(&q->sse);
  free(q->body);
  free(q);
}

// Detaches and frees request i of the thread's list.
void hr_drop_req(hrep *h, int i) {
  hreq *q = h->reqs[i];
  curl_multi_remove_handle(h->sh[q->shard].multi, q->easy);
  h->sh[q->shard].n--;
  req_free(q);
  h->reqs[i] = h->reqs[--h->n_reqs];
  if (i < h->n_reqs) h->reqs[i]->slot = i;
}

// Room for one more request in the thread's list. False when memory ran out.
static bool reqs_room(hrep *h) {
  if (h->n_reqs < h->cap_reqs) return true;
  int cap = h->cap_reqs ? h->cap_reqs * 2 : 64;
  hreq **v = realloc(h->reqs, (size_t)cap * sizeof *v);
  if (!v) return false;
  h->reqs = v;
  h->cap_reqs = cap;
  return true;
}

// The thread looks for overdue connects at the earliest deadline in flight.
static void scan_by(hrep *h, uint64_t at) {
  if (!h->connect_scan || at < h->connect_scan) h->connect_scan = at;
}

// q must be connected within the replica's connect_ns from now.
static void arm_connect(hrep *h, hreq *q) {
  q->connect_by = sc_monotonic_ns() + h->connect_ns;
  scan_by(h, q->connect_by);
}

// libcurl opened a socket for q: a connection made again (a kept-alive one found closed when
// the request went out) gets its own deadline, as libcurl's connect timeout did.
static int on_socket(void *ud, curl_socket_t fd, curlsocktype purpose) {
  (void)fd;
  hreq *q = ud;
  if (purpose == CURLSOCKTYPE_IPCXN && !q->connect_by) arm_connect(q->rep, q);
  return CURL_SOCKOPT_OK;
}

// libcurl's word that q's connection is up (new or reused), before the request goes out.
static int on_connected(void *ud, char *ip, char *local_ip, int port, int local_port) {
  (void)ip, (void)local_ip, (void)port, (void)local_port;
  ((hreq *)ud)->connect_by = 0;
  return CURL_PREREQFUNC_OK;
}

// Fails the requests still unconnected past their deadline; keeps the next deadline.
static void connect_overdue(hrep *h, uint64_t now) {
  if (!h->connect_scan || now < h->connect_scan) return;
  h->connect_scan = 0;
  char why[64];
  snprintf(why, sizeof why, "not connected after %.1f s", (double)h->connect_ns / 1e9);
  for (int i = h->n_reqs - 1; i >= 0; i--) {
    hreq *q = h->reqs[i];
    if (!q->connect_by || q->failed) continue;
    if (now < q->connect_by) {
      scan_by(h, q->connect_by);
      continue;
    }
    no_connection(h, q, why);
    hr_drop_req(h, i);
  }
}

// Opens the stream of request key (body: its JSON, owned from here).
static void start_req(hrep *h, uint64_t key, char *body) {
  pthread_mutex_lock(&h->mu);
  bool dead = h->dead;
  pthread_mutex_unlock(&h->mu);
  if (dead) { // sent while the replica was being declared lost: the router takes it back
    free(body);
    replica_event ev = {.kind = REPLICA_EV_FAILED,
                        .key = key,
                        .status = SC_ABORTED,
                        .failure = REPLICA_FAIL_LOST,
                        .t_ns = now_ns(h)};
    emit(h, &ev);
    return;
  }
  hreq *q = reqs_room(h) ? calloc(1, sizeof *q) : NULL;
  if (!q) {
    free(body);
    replica_event ev = {.kind = REPLICA_EV_FAILED, .key = key, .status = SC_OOM,
                        .failure = REPLICA_FAIL_OOM, .t_ns = now_ns(h)};
    emit(h, &ev);
    return;
  }
  q->key = key;
  q->body = body;
  q->rep = h;
  q->prompt_tokens = -1;
  q->usage_completion = -1;
  q->text_hash = OAI_TEXT_HASH0;
  sse_init(&q->sse);
  q->easy = curl_easy_init();
  if (!q->easy) {
    req_free(q);
    replica_event ev = {.kind = REPLICA_EV_FAILED, .key = key, .status = SC_OOM,
                        .failure = REPLICA_FAIL_OOM, .t_ns = now_ns(h)};
    emit(h, &ev);
    return;
  }
  CURL *e = q->easy;
  curl_easy_setopt(e, CURLOPT_URL, h->url);
  curl_easy_setopt(e, CURLOPT_POSTFIELDS, q->body);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, h->headers);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, q);
  curl_easy_setopt(e, CURLOPT_PRIVATE, q);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  // The connect deadline is the thread's (connect_overdue), not CURLOPT_CONNECTTIMEOUT_MS:
  // libcurl 7.88 keeps that timer in its tree for the transfer's first connect_ns,
  // connected or not, and moves it on every chunk (13% of the thread's CPU at 10,000
  // streams, docs/benchmarks.md).
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 0L);
  curl_easy_setopt(e, CURLOPT_SOCKOPTFUNCTION, on_socket);
  curl_easy_setopt(e, CURLOPT_SOCKOPTDATA, q);
  curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, on_connected);
  curl_easy_setopt(e, CURLOPT_PREREQDATA, q);
  arm_connect(h, q);
  curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, NULL); // no compression: chunks as they come
  q->slot = h->n_reqs;
  q->shard = 0;
  for (int k = 0; k < SHARDS; k++) {
    if (h->sh[k].n < SHARD_STREAMS) {
      q->shard = k;
      break;
    }
    if (h->sh[k].n < h->sh[q->shard].n) q->shard = k;
  }
  h->reqs[h->n_reqs++] = q;
  if (curl_multi_add_handle(h->sh[q->shard].multi, e) == CURLM_OK) {
    h->sh[q->shard].n++;
  } else {
    h->n_reqs--;
    hr_fail_req(h, q, REPLICA_FAIL_FAILED, 0, "libcurl refused a transfer");
    req_free(q);
  }
}

static void cancel_req(hrep *h, uint64_t key) {
  for (int i = 0; i < h->n_reqs; i++) {
    if (h->reqs[i]->key != key) continue;
    bool failed = h->reqs[i]->failed;
    int n_tok = h->reqs[i]->n_tok;
    hr_drop_req(h, i); // closes the stream: the server sees the client go
    if (!failed) {
      replica_event ev = {.kind = REPLICA_EV_FINISHED, .key = key, .reason = FINISH_CANCELLED,
                          .n_generated = n_tok, .t_ns = now_ns(h)};
      emit(h, &ev);
    }
    return;
  }
}

// Keeps fd in the epoll set as libcurl's `what` asks (CURL_POLL_*), with data as its tag.
static void epoll_keep(int set, int fd, int what, epoll_data_t data) {
  if (what == CURL_POLL_REMOVE) {
    epoll_ctl(set, EPOLL_CTL_DEL, fd, NULL);
    return;
  }
  struct epoll_event ev = {.events = (what & CURL_POLL_IN ? EPOLLIN : 0u) |
                                     (what & CURL_POLL_OUT ? EPOLLOUT : 0u),
                           .data = data};
  if (epoll_ctl(set, EPOLL_CTL_MOD, fd, &ev) != 0 && errno == ENOENT)
    epoll_ctl(set, EPOLL_CTL_ADD, fd, &ev);
}

int replica_http_epoll_sock(void *easy, int fd, int what, void *ep, void *socketp) {
  (void)easy, (void)socketp;
  epoll_keep(*(const int *)ep, fd, what, (epoll_data_t){.fd = fd});
  return 0;
}

// A shard's socket callback: keeps the thread's epoll set, each socket tagged with its shard
// (data.u64: shard + 1 in the high half, the fd in the low; 0 in the high half is the wake-up).
static int shard_sock(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
  (void)easy, (void)socketp;
  const hshard *sh = userp;
  epoll_keep(sh->h->ep, fd, what,
             (epoll_data_t){.u64 = (uint64_t)(sh->k + 1) << 32 | (uint32_t)fd});
  return 0;
}

// A shard's timer callback: when its multi next wants CURL_SOCKET_TIMEOUT (-1: never).
static int timer_cb(CURLM *m, long timeout_ms, void *userp) {
  (void)m;
  hshard *sh = userp;
  if (timeout_ms < 0) {
    sh->timer_set = false;
  } else {
    sh->timer_set = true;
    sh->timer_at = sc_monotonic_ns() + (uint64_t)timeout_ms * 1000000ull;
  }
  return 0;
}

// Wakes the thread (a submit, a cancel, a stop, a relaunch).
void hr_wake(hrep *h) {
  uint64_t one = 1;
  ssize_t w = write(h->wake_fd, &one, sizeof one);
  (void)w; // a full counter already wakes it
}

static void *http_thread(void *arg) {
  hrep *h = arg;
  inbox_item *batch = NULL;
  int cap_batch = 0;
  tl_batching = h;
  pthread_setname_np(pthread_self(), "replica-http"); // as top -H and perf show it
  for (;;) {
    pthread_mutex_lock(&h->mu);
    signal_out(h); // what the last turn produced
    if (h->stop) {
      pthread_mutex_unlock(&h->mu);
      break;
    }
    int n = h->n_in;
    if (n > cap_batch) {
      inbox_item *b = realloc(batch, (size_t)n * sizeof *b);
      if (b) batch = b, cap_batch = n;
      else n = cap_batch; // the rest waits for the next turn
    }
    if (n) memcpy(batch, h->in, (size_t)n * sizeof *batch);
    if (h->n_in > n) memmove(h->in, h->in + n, (size_t)(h->n_in - n) * sizeof *h->in);
    h->n_in -= n;
    pthread_mutex_unlock(&h->mu);
    for (int i = 0; i < n; i++) {
      if (batch[i].cancel) cancel_req(h, batch[i].key);
      else start_req(h, batch[i].key, batch[i].body);
    }
    int running = 0;
    // Sleep until a socket is ready, libcurl's timer is due, a call wakes us, or (watching) the
    // next look at the server; then hand libcurl only what is ready (O(ready), not O(streams)).
    hr_watch(h);
    uint64_t now = sc_monotonic_ns();
    long wait_ms = n > 0 ? 0 : h->detect_ns || h->metrics_url ? WATCH_MS : POLL_MS;
    uint64_t wake_at = h->connect_scan; // 0: none
    for (int k = 0; k < SHARDS; k++)
      if (h->sh[k].timer_set && (!wake_at || h->sh[k].timer_at < wake_at))
        wake_at = h->sh[k].timer_at;
    if (wake_at) {
      uint64_t d = wake_at > now ? (wake_at - now + 999999) / 1000000 : 0;
      if ((long)d < wait_ms) wait_ms = (long)d;
    }
    pthread_mutex_lock(&h->mu);
    signal_out(h); // what this turn produced before its sleep
    pthread_mutex_unlock(&h->mu);
    struct epoll_event evs[EPOLL_BATCH];
    int ne = epoll_wait(h->ep, evs, EPOLL_BATCH, (int)wait_ms);
    for (int i = 0; i < ne; i++) {
      uint64_t tag = evs[i].data.u64;
      int fd = (int)(uint32_t)tag;
      if (tag >> 32 == 0) { // the wake-up
        uint64_t v;
        ssize_t rr = read(h->wake_fd, &v, sizeof v);
        (void)rr;
        continue;
      }
      int flags = (evs[i].events & EPOLLIN ? CURL_CSELECT_IN : 0) |
                  (evs[i].events & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
                  (evs[i].events & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0);
      curl_multi_socket_action(h->sh[(tag >> 32) - 1].multi, fd, flags, &running);
    }
    uint64_t after = sc_monotonic_ns();
    for (int k = 0; k < SHARDS; k++) {
      hshard *sh = &h->sh[k];
      if (!sh->timer_set || after < sh->timer_at) continue;
      sh->timer_set = false;
      curl_multi_socket_action(sh->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    }
    connect_overdue(h, after);
    CURLMsg *m;
    int left;
    for (int k = 0; k < SHARDS; k++) {
      while ((m = curl_multi_info_read(h->sh[k].multi, &left))) {
        if (m->msg != CURLMSG_DONE) continue;
        CURLcode rc = m->data.result;
        if (m->easy_handle == h->probe) {
          hr_probe_done(h, rc);
          continue;
        }
        if (m->easy_handle == h->scrape) {
          hr_scrape_done(h, rc);
          continue;
        }
        hreq *q = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&q);
        on_done(h, q, rc);
        hr_drop_req(h, q->slot);
      }
    }
    // Requests failed by a chunk (server_error, protocol) whose transfers curl still reports
    // as running were aborted by the write callback; they arrive in info_read above.
  }
  free(batch);
  return NULL;
}

// --- requests' bodies

// A few words per token id, for chat prompts (the server's tokenizer decides the real count,
// which comes back in usage.prompt_tokens).
static const char *const words[] = {
    "the", "system", "replica", "serves", "tokens", "under", "load", "while", "every",
    "request", "streams", "its", "output", "back", "to", "a", "client", "that", "measures",
    "time", "between", "chunks", "and", "counts", "what", "arrives", "from", "sharded",
    "models", "across", "many", "devices"};

static char *chat_text(const int32_t *ids, int n) {
  size_t cap = (size_t)n * 10 + 1, len = 0;
  char *s = malloc(cap);
  if (!s) return NULL;
  s[0] = 0;
  for (int i = 0; i < n; i++) {
    const char *w = words[(uint32_t)ids[i] % (sizeof words / sizeof *words)];
    len += (size_t)snprintf(s + len, cap - len, "%s%s", i ? " " : "", w);
  }
  return s;
}

static char *request_body(hrep *h, const engine_request *r) {
  json_t *o = json_object();
  if (!o) return NULL;
  pthread_mutex_lock(&h->mu); // a hot swap replaces the model name
  json_object_set_new(o, "model", json_string(h->model));
  pthread_mutex_unlock(&h->mu);
  if (h->o.chat) {
    char *text = chat_text(r->prompt, r->n_prompt);
    if (!text) {
      json_decref(o);
      return NULL;
    }
    json_object_set_new(o, "messages",
                        json_pack("[{s:s, s:s}]", "role", "user", "content", text));
    free(text);
  } else {
    json_t *p = json_array();
    for (int i = 0; i < r->n_prompt; i++) json_array_append_new(p, json_integer(r->prompt[i]));
    json_object_set_new(o, "prompt", p);
  }
  json_object_set_new(o, "max_tokens", json_integer(r->max_tokens));
  json_object_set_new(o, "temperature", json_real(r->sampling.temperature));
  if (r->sampling.top_p > 0 && r->sampling.top_p < 1)
    json_object_set_new(o, "top_p", json_real(r->sampling.top_p));
  json_object_set_new(o, "stream", json_true());
  json_object_set_new(o, "stream_options", json_pack("{s:b}", "include_usage", 1));
  if (h->extra) json_object_update(o, h->extra);
  char *txt = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  return txt;
}

// --- vtable
static bool inbox_room(hrep *h) {
  if (h->n_in < h->cap_in) return true;
  int cap = h->cap_in ? h->cap_in * 2 : 256;
  inbox_item *v = realloc(h->in, (size_t)cap * sizeof *v);
  if (!v) return false;
  h->in = v;
  h->cap_in = cap;
  return true;
}

static sc_status h_submit(void *ctx, uint64_t key, const engine_request *r, sc_error *err) {
  hrep *h = ctx;
  char *body = request_body(h, r);
  if (!body) return sc_fail(err, SC_OOM, "replica: out of memory building a request");
  pthread_mutex_lock(&h->mu);
  if (!inbox_room(h)) {
    pthread_mutex_unlock(&h->mu);
    free(body);
    return sc_fail(err, SC_OOM, "replica: out of memory queueing a request");
  }
  h->in[h->n_in++] = (inbox_item){.key = key, .body = body};
  pthread_mutex_unlock(&h->mu);
  hr_wake(h);
  return SC_OK;
}

static void h_cancel(void *ctx, uint64_t key) {
  hrep *h = ctx;
  pthread_mutex_lock(&h->mu);
  if (inbox_room(h)) h->in[h->n_in++] = (inbox_item){.cancel = true, .key = key};
  pthread_mutex_unlock(&h->mu);
  hr_wake(h);
}

static int h_poll(void *ctx, replica_event *out, int cap) {
  hrep *h = ctx;
  pthread_mutex_lock(&h->mu);
  int n = rq_take(&h->out, out, cap);
  if (rq_len(&h->out) == 0 && h->signalled) {
    uint64_t v;
    ssize_t r = read(h->evfd, &v, sizeof v);
    (void)r;
    h->signalled = false;
  }
  memcpy(h->error_seen, h->dead ? h->dead_why : h->last_error, sizeof h->error_seen);
  pthread_mutex_unlock(&h->mu);
  return n;
}

static int h_wait_fd(void *ctx) { return ((hrep *)ctx)->evfd; }

static replica_health h_health(void *ctx) {
  hrep *h = ctx;
  pthread_mutex_lock(&h->mu);
  replica_health r = h->dead         ? REPLICA_DEAD
                     : !h->admitting ? REPLICA_DRAINING
                     : h->suspect    ? REPLICA_UNHEALTHY
                                     : REPLICA_HEALTHY;
  // the caller that sees it dead reads why next (error): refresh its copy with the health
  if (h->dead) memcpy(h->error_seen, h->dead_why, sizeof h->error_seen);
  pthread_mutex_unlock(&h->mu);
  return r;
}

static void h_set_admitting(void *ctx, bool a) {
  hrep *h = ctx;
  pthread_mutex_lock(&h->mu);
  h->admitting = a;
  pthread_mutex_unlock(&h->mu);
}

// The server's own figures at the latest scrape (zeros when it exposes none).
static void h_stats(void *ctx, engine_stats *out) {
  hrep *h = ctx;
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&h->mu);
  replica_server_metrics m = h->sm;
  pthread_mutex_unlock(&h->mu);
  if (!m.have) return;
  if (isfinite(m.running)) out->running = (int)m.running;
  if (isfinite(m.waiting)) out->queue_len = (int)m.waiting;
  if (isfinite(m.kv_blocks)) out->kv_used = (int)m.kv_blocks;
}

static sc_status h_rank_mem(void *ctx, int r, size_t *used, size_t *total) {
  (void)ctx, (void)r, (void)used, (void)total;
  return SC_INVALID; // not known from outside the server
}

// Why the server was lost, else the latest request failure's message, as of the latest poll
// ("" when none).
static const char *h_error(void *ctx) { return ((hrep *)ctx)->error_seen; }

static sc_status h_wait_ready(void *ctx, volatile sig_atomic_t *interrupted, sc_error *err) {
  hrep *h = ctx;
  if (h->launch) {
    pthread_mutex_lock(&h->lmu);
    launch_proc *p = h->launch; // only a restart replaces it, and none runs before this
    pthread_mutex_unlock(&h->lmu);
    SC_TRY(launch_wait_ready(p, h->ready_url, h->o.ready_timeout_ns, interrupted, err));
  }
  hr_start_watching(h);
  return SC_OK;
}

// --- faults

static sc_status h_inject(void *ctx, const replica_fault *f, sc_error *err) {
  hrep *h = ctx;
  pthread_mutex_lock(&h->mu);
  bool dead = h->dead;
  pthread_mutex_unlock(&h->mu);
  if (dead) return sc_fail(err, SC_ABORTED, "the replica is dead");
  char *body = h->admin_url ? admin_client_fault_body(f) : NULL;
  if (body) { // inside the engine: through shardcheck serve's admin API
    sc_status s = admin_client_post(h->admin_url, h->admin_token, body, err);
    free(body);
    return s;
  }
  pthread_mutex_lock(&h->lmu);
  sc_status s = SC_OK;
  if (!h->launch) {
    s = sc_fail(err, SC_INVALID,
                "a server shardcheck did not launch takes no signals (an exec "
                "fault can reach it)");
  } else {
    switch (f->kind) {
    case RFAULT_KILL: s = launch_signal(h->launch, SIGKILL, err); break;
    case RFAULT_HANG: s = launch_signal(h->launch, SIGSTOP, err); break;
    case RFAULT_RESUME: s = launch_signal(h->launch, SIGCONT, err); break;
    case RFAULT_KILL_RANK: {
      if (!h->rank_process) {
        s = sc_fail(err, SC_INVALID, "kill: gpu needs target.openai.rank_process");
        break;
      }
      char cmd[160];
      int pid = launch_find_descendant(h->launch, h->rank_process, f->rank < 0 ? 0 : f->rank, cmd,
                                       sizeof cmd, err);
      if (pid <= 0)
        s = SC_INVALID;
      else if (kill(pid, SIGKILL) != 0)
        s = sc_fail(err, SC_IO, "kill(%d, SIGKILL): %s", pid, strerror(errno));
      break;
    }
    default:
      s = sc_fail(err, SC_INVALID,
                  "an external server takes no such fault (only kill, hang and "
                  "resume: signals to what shardcheck launched)");
      break;
    }
  }
  pthread_mutex_unlock(&h->lmu);
  hr_wake(h);
  return s;
}

// Relaunches a DEAD replica's server (the supervisor thread): SIGKILL to what is left of the
// old group, the same command again (its log appended to), wait until ready, next epoch. On
// error the replica stays DEAD.
static sc_status h_restart(void *ctx, sc_error *err) {
  hrep *h = ctx;
  if (!h->command)
    return sc_fail(err, SC_INVALID, "a server shardcheck did not launch cannot be relaunched");
  pthread_mutex_lock(&h->lmu);
  launch_proc *old = h->launch;
  h->launch = NULL;
  pthread_mutex_unlock(&h->lmu);
  if (old) {
    launch_signal(old, SIGKILL, NULL); // a stopped group too
    launch_free(old);
  }
  launch_spec ls = {.command = h->command,
                    .env = (const char *const *)h->env,
                    .log_path = h->log_path ? h->log_path : "/dev/null",
                    .stop_grace_ns = h->o.stop_grace_ns,
                    .append = true};
  launch_proc *p = NULL;
  SC_TRY(launch_start(&ls, &p, err));
  sc_status s = launch_wait_ready(p, h->ready_url, h->o.ready_timeout_ns, NULL, err);
  if (s != SC_OK) {
    launch_free(p);
    return s;
  }
  pthread_mutex_lock(&h->lmu);
  h->launch = p;
  pthread_mutex_unlock(&h->lmu);
  pthread_mutex_lock(&h->mu);
  h->dead = false;
  h->suspect = false;
  h->dead_why[0] = 0;
  h->probe_reset = true;
  h->have_skew = false;
  h->epoch++;
  pthread_mutex_unlock(&h->mu);
  // the thread's probe clock starts again: it reads probe_ok only while the replica lives
  hr_wake(h);
  return SC_OK;
}

// The server's wall clock minus ours, from its latest probe answer's Date header (whole
// seconds); false before one came in this incarnation.
static bool h_wall_skew(void *ctx, int64_t *skew_ns) {
  hrep *h = ctx;
  pthread_mutex_lock(&h->mu);
  bool have = h->have_skew;
  if (have) *skew_ns = h->skew_ns;
  pthread_mutex_unlock(&h->mu);
  return have;
}

// A hot swap (the supervisor thread; the replica is drained): the server is stopped (SIGTERM,
// SIGKILL after the grace period), the staged command started (its log appended to) and waited
// for; from then on requests name the staged model, the replica admits again at the next epoch.
// On error the replica is DEAD.
static sc_status h_swap(void *ctx, const engine_config *cfg, sc_error *err) {
  (void)cfg; // a server's weights are its own: the command says what it serves
  hrep *h = ctx;
  pthread_mutex_lock(&h->lmu);
  launch_proc *old = h->launch;
  char *cmd = h->next_command, *model = h->next_model;
  h->launch = NULL;
  h->next_command = h->next_model = NULL;
  pthread_mutex_unlock(&h->lmu);
  pthread_mutex_lock(&h->mu);
  h->watching = false; // its exit is the swap's doing, not a loss
  pthread_mutex_unlock(&h->mu);
  launch_free(old);
  sc_status s = SC_OK;
  if (!cmd) s = sc_fail(err, SC_INVALID, "swap: no command staged");
  launch_proc *p = NULL;
  if (s == SC_OK) {
    launch_spec ls = {.command = cmd,
                      .env = (const char *const *)h->env,
                      .log_path = h->log_path ? h->log_path : "/dev/null",
                      .stop_grace_ns = h->o.stop_grace_ns,
                      .append = true};
    s = launch_start(&ls, &p, err);
  }
  if (s == SC_OK) s = launch_wait_ready(p, h->ready_url, h->o.ready_timeout_ns, NULL, err);
  if (s != SC_OK) {
    launch_free(p);
    free(cmd), free(model);
    pthread_mutex_lock(&h->mu);
    h->dead = true;
    snprintf(h->dead_why, sizeof h->dead_why, "swap failed: %.200s", err ? err->msg : "");
    pthread_mutex_unlock(&h->mu);
    return s;
  }
  pthread_mutex_lock(&h->lmu);
  h->launch = p;
  free(h->command);
  h->command = cmd;
  pthread_mutex_unlock(&h->lmu);
  pthread_mutex_lock(&h->mu);
  if (model) { // request bodies are built on the caller's thread, under mu from here on
    free(h->model);
    h->model = model;
    h->vars.model = h->model;
  }
  h->epoch++;
  h->have_skew = false;
  h->admitting = true;
  h->watching = true;
  h->probe_reset = true;
  pthread_mutex_unlock(&h->mu);
  hr_wake(h);
  return SC_OK;
}

static int h_epoch(void *ctx) {
  hrep *h = ctx;
  pthread_mutex_lock(&h->mu);
  int e = h->epoch;
  pthread_mutex_unlock(&h->mu);
  return e;
}

static void h_free(void *ctx) {
  hrep *h = ctx;
  if (!h) return;
  if (h->thread_started) {
    pthread_mutex_lock(&h->mu);
    h->stop = true;
    pthread_mutex_unlock(&h->mu);
    hr_wake(h);
    pthread_join(h->thread, NULL);
  }
  for (int i = h->n_reqs - 1; i >= 0; i--) hr_drop_req(h, i);
  free(h->reqs);
  if (h->probe) {
    if (h->probe_busy) curl_multi_remove_handle(h->sh[0].multi, h->probe);
    curl_easy_cleanup(h->probe);
  }
  if (h->scrape) {
    if (h->scrape_busy) curl_multi_remove_handle(h->sh[0].multi, h->scrape);
    curl_easy_cleanup(h->scrape);
  }
  free(h->scrape_text.p);
  while (h->msgs) {
    msg_block *b = h->msgs;
    h->msgs = b->next;
    free(b);
  }
  free(h->rank_process), free(h->metrics_url);
  free(h->admin_url), free(h->admin_token);
  free(h->tmpl), free(h->gpus), free(h->exe), free(h->next_command), free(h->next_model);
  for (int i = 0; i < h->n_in; i++) free(h->in[i].body);
  free(h->in);
  for (int k = 0; k < SHARDS; k++)
    if (h->sh[k].multi) curl_multi_cleanup(h->sh[k].multi);
  curl_slist_free_all(h->headers);
  launch_free(h->launch); // after the connections are closed: the server sees them go first
  rq_free(&h->out);
  if (h->evfd >= 0) close(h->evfd);
  if (h->ep >= 0) close(h->ep); // after curl_multi_cleanup: its sockets' callbacks are done
  if (h->wake_fd >= 0) close(h->wake_fd);
  json_decref(h->extra);
  for (int i = 0; h->env && h->env[i]; i++) free(h->env[i]);
  free(h->env);
  free(h->base_url), free(h->model), free(h->api_key), free(h->extra_body), free(h->url);
  free(h->command), free(h->log_path), free(h->ready_url);
  pthread_mutex_destroy(&h->lmu);
  pthread_mutex_destroy(&h->mu);
  free(h);
}

// The launched server's pid, also its process group id (0: none launched, or stopped).
static int h_pid(void *ctx) {
  hrep *h = ctx;
  pthread_mutex_lock(&h->lmu);
  int pid = launch_pid(h->launch);
  pthread_mutex_unlock(&h->lmu);
  return pid;
}

// The port of the url (its scheme's default when it names none).
static int h_port(void *ctx) {
  hrep *h = ctx;
  CURLU *u = curl_url();
  char *port = NULL;
  int p = 0;
  if (u && curl_url_set(u, CURLUPART_URL, h->base_url, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK)
    p = atoi(port);
  curl_free(port);
  curl_url_cleanup(u);
  return p;
}

static sc_status h_stage_swap(void *ctx, const char *launch_template, const char *model,
                              sc_error *err) {
  hrep *h = ctx;
  if (!h->tmpl) return sc_fail(err, SC_INVALID, "swap: a server shardcheck did not launch");
  launch_vars v = h->vars;
  if (model) v.model = model;
  char *cmd = malloc(8192);
  char *m = strdup(model ? model : h->model);
  if (!cmd || !m) {
    free(cmd), free(m);
    return sc_fail(err, SC_OOM, "swap: out of memory");
  }
  sc_status s = launch_expand(launch_template ? launch_template : h->tmpl, &v, cmd, 8192, err);
  if (s != SC_OK) {
    free(cmd), free(m);
    return s;
  }
  pthread_mutex_lock(&h->lmu);
  free(h->next_command), free(h->next_model);
  h->next_command = cmd;
  h->next_model = m;
  pthread_mutex_unlock(&h->lmu);
  return SC_OK;
}

static const replica_i http_i = {
    .submit = h_submit,
    .cancel = h_cancel,
    .poll = h_poll,
    .wait_fd = h_wait_fd,
    .health = h_health,
    .set_admitting = h_set_admitting,
    .stats = h_stats,
    .rank_mem = h_rank_mem,
    .error = h_error,
    .wait_ready = h_wait_ready,
    .inject = h_inject,
    .restart = h_restart,
    .epoch = h_epoch,
    .swap = h_swap,
    .wall_skew = h_wall_skew,
    .pid = h_pid,
    .port = h_port,
    .server_metrics = hr_server_metrics,
    .stage_swap = h_stage_swap,
    .free = h_free,
};

// --- lifecycle
static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;
static void curl_init(void) { curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

static char *dup_or_null(const char *s, bool *oom) {
  if (!s) return NULL;
  char *d = strdup(s);
  if (!d) *oom = true;
  return d;
}

sc_status replica_http_new(const engine_config *cfg, const replica_http_options *o, int index,
                           replica **out, sc_error *err) {
  *out = NULL;
  pthread_once(&curl_once, curl_init);
  if (curl_init_rc != CURLE_OK)
    return sc_fail(err, SC_IO, "replica: curl_global_init: %s", curl_easy_strerror(curl_init_rc));
  if (!o->base_url || !o->model) return sc_fail(err, SC_INVALID, "replica: no url or model");
  hrep *h = calloc(1, sizeof *h);
  replica *r = calloc(1, sizeof *r);
  if (!h || !r) {
    free(h);
    free(r);
    return sc_fail(err, SC_OOM, "replica: out of memory");
  }
  h->evfd = h->ep = h->wake_fd = -1;
  pthread_mutex_init(&h->mu, NULL);
  pthread_mutex_init(&h->lmu, NULL);
  h->epoch = 1;
  h->detect_ns = o->detect_timeout_ns;
  h->connect_ns = o->connect_timeout_ns ? o->connect_timeout_ns : CONNECT_TIMEOUT_NS;
  h->o = *o;
  h->admitting = true;
  h->clock = cfg->clock.now_ns ? cfg->clock : sc_clock_monotonic();
  bool oom = false;
  h->base_url = dup_or_null(o->base_url, &oom);
  h->model = dup_or_null(o->model, &oom);
  h->api_key = dup_or_null(o->api_key, &oom);
  h->extra_body = dup_or_null(o->extra_body, &oom);
  h->command = dup_or_null(o->command, &oom);
  h->log_path = dup_or_null(o->log_path, &oom);
  h->ready_url = dup_or_null(o->ready_url, &oom);
  h->rank_process =
      dup_or_null(o->rank_process && o->rank_process[0] ? o->rank_process : NULL, &oom);
  h->metrics_url = dup_or_null(o->metrics_url, &oom);
  h->admin_url = dup_or_null(o->admin_url, &oom);
  h->admin_token = dup_or_null(o->admin_token, &oom);
  h->tmpl = dup_or_null(o->command ? o->launch_template : NULL, &oom);
  h->gpus = dup_or_null(o->vars.gpus ? o->vars.gpus : "", &oom);
  h->exe = dup_or_null(o->vars.exe ? o->vars.exe : "", &oom);
  h->vars = o->vars;
  h->vars.gpus = h->gpus;
  h->vars.exe = h->exe;
  h->vars.model = h->model;
  if (h->detect_ns && !h->ready_url) h->detect_ns = 0; // nothing to probe: no watching
  int n_env = 0;
  while (o->env && o->env[n_env]) n_env++;
  h->env = calloc((size_t)n_env + 1, sizeof *h->env);
  if (!h->env) oom = true;
  for (int i = 0; i < n_env && h->env; i++) h->env[i] = dup_or_null(o->env[i], &oom);
  size_t ul = strlen(o->base_url) + 32;
  h->url = malloc(ul);
  if (!h->url) oom = true;
  sc_status s = SC_OK;
  if (oom) {
    s = sc_fail(err, SC_OOM, "replica: out of memory");
    goto fail;
  }
  { // BASE without a trailing '/', then the endpoint
    size_t bl = strlen(o->base_url);
    while (bl > 0 && o->base_url[bl - 1] == '/') bl--;
    snprintf(h->url, ul, "%.*s/%s", (int)bl, o->base_url,
             o->chat ? "chat/completions" : "completions");
  }
  if (o->extra_body && o->extra_body[0]) {
    json_error_t je;
    h->extra = json_loads(o->extra_body, 0, &je);
    if (!json_is_object(h->extra)) {
      s = sc_fail(err, SC_INVALID, "replica: extra_body is not a JSON object: %s", je.text);
      goto fail;
    }
  }
  h->headers = curl_slist_append(NULL, "Content-Type: application/json");
  h->headers = curl_slist_append(h->headers, "Accept: text/event-stream");
  if (o->api_key && o->api_key[0]) {
    char auth[1200];
    snprintf(auth, sizeof auth, "Authorization: Bearer %.1100s", o->api_key);
    h->headers = curl_slist_append(h->headers, auth);
  }
  bool multis = true;
  for (int k = 0; k < SHARDS; k++) {
    hshard *sh = &h->sh[k];
    *sh = (hshard){.multi = curl_multi_init(), .h = h, .k = k};
    multis = multis && sh->multi;
  }
  h->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  h->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  h->ep = epoll_create1(EPOLL_CLOEXEC);
  if (h->ep >= 0 && h->wake_fd >= 0) {
    struct epoll_event we = {.events = EPOLLIN, .data.u64 = (uint32_t)h->wake_fd};
    epoll_ctl(h->ep, EPOLL_CTL_ADD, h->wake_fd, &we);
  }
  if (!h->headers || !multis || h->evfd < 0 || h->wake_fd < 0 || h->ep < 0) {
    s = sc_fail(err, SC_OOM, "replica: cannot set up libcurl or its eventfd");
    goto fail;
  }
  for (int k = 0; k < SHARDS; k++) {
    CURLM *m = h->sh[k].multi;
    curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, MAX_CONNECTS);
    curl_multi_setopt(m, CURLMOPT_SOCKETFUNCTION, shard_sock);
    curl_multi_setopt(m, CURLMOPT_SOCKETDATA, &h->sh[k]);
    curl_multi_setopt(m, CURLMOPT_TIMERFUNCTION, timer_cb);
    curl_multi_setopt(m, CURLMOPT_TIMERDATA, &h->sh[k]);
    curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);
  }
  if (h->command) {
    launch_spec ls = {.command = h->command, .env = (const char *const *)h->env,
                      .log_path = h->log_path ? h->log_path : "/dev/null",
                      .stop_grace_ns = o->stop_grace_ns};
    s = launch_start(&ls, &h->launch, err);
    if (s != SC_OK) goto fail;
  }
  if (pthread_create(&h->thread, NULL, http_thread, h) != 0) {
    s = sc_fail(err, SC_OOM, "replica: cannot start its thread");
    goto fail;
  }
  h->thread_started = true;
  *r = (replica){.i = &http_i, .ctx = h, .index = index, .n_ranks = cfg->tp * cfg->pp,
                 .client_stamps = true};
  *out = r;
  return SC_OK;
fail:
  h_free(h);
  free(r);
  return s;
}
