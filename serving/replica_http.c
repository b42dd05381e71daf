// The HTTP replica: one OpenAI-compatible server (vLLM, SGLang, TGI, llama.cpp's server,
// shardcheck serve) behind the replica seam. Each request is one streaming POST to
// BASE/completions (prompt = the workload's token ids) or BASE/chat/completions (a user message
// of generated words), with stream: true and stream_options.include_usage, max_tokens from the
// request and extra_body merged in.
//
// Threads. The caller's thread only touches the inbox (submits, cancels) and the outbox
// (events) under one mutex, and wakes the replica's thread with curl_multi_wakeup. That thread
// owns the libcurl multi handle: it turns the inbox into easy handles (added: a stream opens;
// removed: cancel closes it), runs curl_multi_perform and sleeps in curl_multi_poll, so
// thousands of streams share one thread and keep-alive connections. Body bytes go through
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
// wait_ready, stopped when it is freed. Faults on external servers are not taken yet (inject is
// NULL); launch_pid finds the group a later fault would signal.
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "serving/launch.h"
#include "serving/replica.h"
#include "serving/replica_keys.h"
#include "serving/sse.h"

#define POLL_MS 1000             // the thread's longest sleep (woken earlier by any call)
#define CONNECT_TIMEOUT_MS 10000L
#define ERR_BODY_MAX 2048        // bytes of a non-200 response kept for the message
#define MAX_CONNECTS 8192L       // connections kept alive in the cache

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
  uint64_t last_content; // when the last content chunk arrived (0: none yet)
  bool done;             // [DONE] seen
  bool failed;           // a FAILED event went out: nothing more for it
  replica_failure why;
  char msg[256];
  int prompt_tokens;     // usage.prompt_tokens (-1: not seen)
  int usage_completion;  // usage.completion_tokens (-1: not seen)
} hreq;

typedef struct inbox_item {
  bool cancel;
  uint64_t key;
  char *body; // submit: the JSON request (owned)
} inbox_item;

typedef struct hrep {
  replica_http_options o;
  char *base_url, *model, *api_key, *extra_body, *url; // owned copies; url = the endpoint
  char *command, *log_path, *ready_url;
  char **env;                 // (NULL-terminated) owned copies
  json_t *extra;              // extra_body parsed
  sc_clock clock;
  launch_proc *launch;
  CURLM *multi;
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
  // the thread's own
  hreq **reqs;                // (cap_reqs) requests in flight
  int n_reqs, cap_reqs;
} hrep;

static const replica_i http_i;

static uint64_t now_ns(hrep *h) { return sc_clock_now(&h->clock); }

// Appends an event (mu held).
static void push_out(hrep *h, const replica_event *ev) {
  if (!rq_push(&h->out, ev)) return; // out of memory: the runner's request timeout catches it
  if (!h->signalled) {
    uint64_t one = 1;
    ssize_t w = write(h->evfd, &one, sizeof one);
    (void)w;
    h->signalled = true;
  }
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
    replica_event ev = {.kind = REPLICA_EV_TOKEN, .key = q->key, .index = q->n_tok,
                        .token = i < n_ids ? ids[i] : 0, .t_ns = t};
    push_out(h, &ev);
    q->n_tok++;
  }
  pthread_mutex_unlock(&h->mu);
}

// Fails q (once) with why and a message; its transfer is removed by the caller.
static void fail_req(hrep *h, hreq *q, replica_failure why, int http_status, const char *fmt,
                     ...) __attribute__((format(printf, 5, 6)));
static void fail_req(hrep *h, hreq *q, replica_failure why, int http_status, const char *fmt,
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
  else oai_chunk_parse(data, len, &c);
  switch (c.kind) {
  case OAI_CHUNK_DONE: q->done = true; return true;
  case OAI_CHUNK_ERROR:
    fail_req(h, q, REPLICA_FAIL_SERVER_ERROR, 0, "the server sent an error mid-stream: %s",
             c.error);
    return false;
  case OAI_CHUNK_BAD:
    fail_req(h, q, REPLICA_FAIL_PROTOCOL, 0, "malformed chunk (%s): %.80s", c.error, data);
    return false;
  case OAI_CHUNK_DATA: break;
  }
  if (q->done) {
    fail_req(h, q, REPLICA_FAIL_PROTOCOL, 0, "a chunk after [DONE]");
    return false;
  }
  if (c.has_usage) {
    q->usage_completion = c.usage_completion;
    if (c.usage_prompt >= 0) q->prompt_tokens = c.usage_prompt;
  }
  int n = c.n_token_ids >= 0 ? c.n_token_ids : (c.has_content ? 1 : 0);
  int n_ids = c.n_token_ids > 64 ? 64 : c.n_token_ids;
  if (!c.has_content) { // tokens the client cannot see yet: counted with the next content
    q->pending += n;
    return true;
  }
  if (n < 1) n = 1; // content is at least one token
  if (q->pending > 0) { // carried tokens first, then this chunk's own
    emit_tokens(h, q, q->pending, NULL, 0, t);
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
      fail_req(q->rep, q, REPLICA_FAIL_PROTOCOL, 0, "malformed event stream: %s", q->sse.why);
    return 0; // the transfer ends; the request has failed
  }
  return n;
}

// The transfer of q ended with result rc (its easy handle is still attached).
static void on_done(hrep *h, hreq *q, CURLcode rc) {
  if (q->failed) return;
  long status = q->status;
  if (!status) curl_easy_getinfo(q->easy, CURLINFO_RESPONSE_CODE, &status);
  if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
      (rc == CURLE_OPERATION_TIMEDOUT && status == 0)) {
    fail_req(h, q, REPLICA_FAIL_CONNECT, 0, "no connection to %s: %s", h->url,
             curl_easy_strerror(rc));
    return;
  }
  if (status != 0 && status != 200) {
    fail_req(h, q, REPLICA_FAIL_HTTP, (int)status, "HTTP %ld from %s: %.200s", status, h->url,
             q->err_body);
    return;
  }
  if (rc != CURLE_OK) {
    fail_req(h, q, REPLICA_FAIL_PROTOCOL, 0, "the stream broke off: %s", curl_easy_strerror(rc));
    return;
  }
  if (!q->done || sse_pending(&q->sse)) {
    fail_req(h, q, REPLICA_FAIL_PROTOCOL, 0, "the stream ended without data: [DONE]");
    return;
  }
  uint64_t t = q->last_content ? q->last_content : now_ns(h);
  int extra = q->pending;
  if (q->usage_completion > q->n_tok + extra) extra = q->usage_completion - q->n_tok;
  if (extra > 0) emit_tokens(h, q, extra, NULL, 0, t);
  replica_event ev = {.kind = REPLICA_EV_FINISHED, .key = q->key, .reason = FINISH_LENGTH,
                      .n_generated = q->n_tok,
                      .prompt_tokens = q->prompt_tokens > 0 ? q->prompt_tokens : 0, .t_ns = t};
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
static void drop_req(hrep *h, int i) {
  hreq *q = h->reqs[i];
  curl_multi_remove_handle(h->multi, q->easy);
  req_free(q);
  h->reqs[i] = h->reqs[--h->n_reqs];
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

// Opens the stream of request key (body: its JSON, owned from here).
static void start_req(hrep *h, uint64_t key, char *body) {
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
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
  curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, NULL); // no compression: chunks as they come
  h->reqs[h->n_reqs++] = q;
  if (curl_multi_add_handle(h->multi, e) != CURLM_OK) {
    h->n_reqs--;
    fail_req(h, q, REPLICA_FAIL_FAILED, 0, "libcurl refused a transfer");
    req_free(q);
  }
}

static void cancel_req(hrep *h, uint64_t key) {
  for (int i = 0; i < h->n_reqs; i++) {
    if (h->reqs[i]->key != key) continue;
    bool failed = h->reqs[i]->failed;
    int n_tok = h->reqs[i]->n_tok;
    drop_req(h, i); // closes the stream: the server sees the client go
    if (!failed) {
      replica_event ev = {.kind = REPLICA_EV_FINISHED, .key = key, .reason = FINISH_CANCELLED,
                          .n_generated = n_tok, .t_ns = now_ns(h)};
      emit(h, &ev);
    }
    return;
  }
}

static void *http_thread(void *arg) {
  hrep *h = arg;
  inbox_item *batch = NULL;
  int cap_batch = 0;
  for (;;) {
    pthread_mutex_lock(&h->mu);
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
    curl_multi_perform(h->multi, &running);
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(h->multi, &left))) {
      if (m->msg != CURLMSG_DONE) continue;
      hreq *q = NULL;
      curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&q);
      CURLcode rc = m->data.result;
      on_done(h, q, rc);
      for (int i = 0; i < h->n_reqs; i++)
        if (h->reqs[i] == q) {
          drop_req(h, i);
          break;
        }
    }
    // Requests failed by a chunk (server_error, protocol) whose transfers curl still reports
    // as running were aborted by the write callback; they arrive in info_read above.
    curl_multi_poll(h->multi, NULL, 0, POLL_MS, NULL);
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
  json_object_set_new(o, "model", json_string(h->model));
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
  curl_multi_wakeup(h->multi);
  return SC_OK;
}

static void h_cancel(void *ctx, uint64_t key) {
  hrep *h = ctx;
  pthread_mutex_lock(&h->mu);
  if (inbox_room(h)) h->in[h->n_in++] = (inbox_item){.cancel = true, .key = key};
  pthread_mutex_unlock(&h->mu);
  curl_multi_wakeup(h->multi);
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
  memcpy(h->error_seen, h->last_error, sizeof h->error_seen);
  pthread_mutex_unlock(&h->mu);
  return n;
}

static int h_wait_fd(void *ctx) { return ((hrep *)ctx)->evfd; }

static replica_health h_health(void *ctx) {
  hrep *h = ctx;
  pthread_mutex_lock(&h->mu);
  bool a = h->admitting;
  pthread_mutex_unlock(&h->mu);
  return a ? REPLICA_HEALTHY : REPLICA_DRAINING;
}

static void h_set_admitting(void *ctx, bool a) {
  hrep *h = ctx;
  pthread_mutex_lock(&h->mu);
  h->admitting = a;
  pthread_mutex_unlock(&h->mu);
}

static void h_stats(void *ctx, engine_stats *out) {
  (void)ctx;
  memset(out, 0, sizeof *out); // the server's own numbers are not scraped (yet)
}

static sc_status h_rank_mem(void *ctx, int r, size_t *used, size_t *total) {
  (void)ctx, (void)r, (void)used, (void)total;
  return SC_INVALID; // not known from outside the server
}

// The latest request failure's message, as of the latest poll ("" when none).
static const char *h_error(void *ctx) { return ((hrep *)ctx)->error_seen; }

static sc_status h_wait_ready(void *ctx, volatile sig_atomic_t *interrupted, sc_error *err) {
  hrep *h = ctx;
  if (!h->launch) return SC_OK;
  return launch_wait_ready(h->launch, h->ready_url, h->o.ready_timeout_ns, interrupted, err);
}

static void h_free(void *ctx) {
  hrep *h = ctx;
  if (!h) return;
  if (h->thread_started) {
    pthread_mutex_lock(&h->mu);
    h->stop = true;
    pthread_mutex_unlock(&h->mu);
    curl_multi_wakeup(h->multi);
    pthread_join(h->thread, NULL);
  }
  for (int i = h->n_reqs - 1; i >= 0; i--) drop_req(h, i);
  free(h->reqs);
  for (int i = 0; i < h->n_in; i++) free(h->in[i].body);
  free(h->in);
  if (h->multi) curl_multi_cleanup(h->multi);
  curl_slist_free_all(h->headers);
  launch_free(h->launch); // after the connections are closed: the server sees them go first
  rq_free(&h->out);
  if (h->evfd >= 0) close(h->evfd);
  json_decref(h->extra);
  for (int i = 0; h->env && h->env[i]; i++) free(h->env[i]);
  free(h->env);
  free(h->base_url), free(h->model), free(h->api_key), free(h->extra_body), free(h->url);
  free(h->command), free(h->log_path), free(h->ready_url);
  pthread_mutex_destroy(&h->mu);
  free(h);
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
  h->evfd = -1;
  pthread_mutex_init(&h->mu, NULL);
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
  h->multi = curl_multi_init();
  h->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (!h->headers || !h->multi || h->evfd < 0) {
    s = sc_fail(err, SC_OOM, "replica: cannot set up libcurl or its eventfd");
    goto fail;
  }
  curl_multi_setopt(h->multi, CURLMOPT_MAXCONNECTS, MAX_CONNECTS);
  curl_multi_setopt(h->multi, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);
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

bool replica_is_http(const replica *r) { return r && r->i == &http_i; }

int replica_http_pid(const replica *r) {
  return replica_is_http(r) ? launch_pid(((hrep *)r->ctx)->launch) : 0;
}
