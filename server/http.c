// The HTTP side of the server (see server.h): libmicrohttpd in its epoll internal-thread mode,
// every callback on that one thread. Routes, the API key, body limits, validation (through
// server/openai.c), then a generation is handed to the loop thread (server/loop.c) as a
// command. A streamed response is a callback response whose connection is suspended while its
// buffer is empty and resumed by the loop when bytes arrive; a non-streamed one suspends its
// connection until the loop has the whole body.
//
// What the loop does with a generation, and the metrics' text, live elsewhere.
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kernels/clock.h"
#include "server/server_impl.h"

typedef enum route {
  R_NONE,
  R_COMPLETIONS,
  R_CHAT,
  R_MODELS,
  R_HEALTH,
  R_METRICS,
  R_ADMIN_FAULTS, // only with --admin-token (else 404, as any unknown path)
  R_ADMIN_STATE,
} route;

// The per-request state of a connection (MHD's req_cls).
typedef struct conn_ctx {
  route r;
  char *body; // (len) the request body so far
  size_t len, cap;
  bool too_big;
  bool answered; // a response was queued while the headers were read
  gen *g;        // the generation it started (one reference)
} conn_ctx;

static route route_of(const server *s, const char *url, const char **method_wanted) {
  static const struct {
    const char *path, *method;
    route r;
  } routes[] = {{"/v1/completions", "POST", R_COMPLETIONS},
                {"/v1/chat/completions", "POST", R_CHAT},
                {"/v1/models", "GET", R_MODELS},
                {"/health", "GET", R_HEALTH},
                {"/metrics", "GET", R_METRICS},
                {"/admin/faults", "POST", R_ADMIN_FAULTS},
                {"/admin/state", "GET", R_ADMIN_STATE}};
  for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
    if (!strcmp(url, routes[i].path)) {
      if (routes[i].r >= R_ADMIN_FAULTS && !s->admin) return R_NONE;
      *method_wanted = routes[i].method;
      return routes[i].r;
    }
  return R_NONE;
}

// --- responses
static enum MHD_Result send_buf(struct MHD_Connection *c, int status, char *buf, const char *type) {
  if (!buf) {
    static char oom[] = "{\"error\": {\"message\": \"out of memory\", \"type\": "
                        "\"InternalServerError\", \"param\": null, \"code\": 500}}";
    buf = oom;
    status = 500;
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(oom), oom, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
  }
  struct MHD_Response *r = MHD_create_response_from_buffer(strlen(buf), buf, MHD_RESPMEM_MUST_FREE);
  if (!r) {
    free(buf);
    return MHD_NO;
  }
  MHD_add_response_header(r, "Content-Type", type);
  enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
  MHD_destroy_response(r);
  return ok;
}

static enum MHD_Result send_error(struct MHD_Connection *c, int status, const char *param,
                                  const char *msg) {
  return send_buf(c, status, oai_error_body(status, param, msg), "application/json");
}

// A 503 refusal: counted (shardcheck:requests_rejected_total) and sent with Retry-After, as a
// client's retry logic reads it.
static enum MHD_Result refuse(server *s, struct MHD_Connection *c, const char *msg) {
  pthread_mutex_lock(&s->mu);
  s->m.rejected++;
  pthread_mutex_unlock(&s->mu);
  char *b = oai_error_body(503, "", msg);
  struct MHD_Response *r =
      b ? MHD_create_response_from_buffer(strlen(b), b, MHD_RESPMEM_MUST_FREE) : NULL;
  if (!r) {
    free(b);
    return MHD_NO;
  }
  MHD_add_response_header(r, "Content-Type", "application/json");
  MHD_add_response_header(r, "Retry-After", "1");
  enum MHD_Result ok = MHD_queue_response(c, 503, r);
  MHD_destroy_response(r);
  return ok;
}

// --- connection slots (server_impl.h)
enum { SWEEP_MAX = 64 }; // connections a sweep shuts down at most (the loop sweeps every 50 ms)
static conn_slot *slot_of(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  return ci ? ci->socket_context : NULL;
}

// The request's headers are in: it counts against --max-connections. Returns how many requests
// are in progress with it.
static int slot_begin(server *s, struct MHD_Connection *c) {
  conn_slot *k = slot_of(c);
  pthread_mutex_lock(&s->conn_mu);
  if (k && !k->in_request) {
    k->in_request = true;
    s->n_requests++;
  }
  int n = s->n_requests;
  pthread_mutex_unlock(&s->conn_mu);
  return n;
}

// The whole request is in, or it was answered early: the request timeout no longer applies.
static void slot_received(server *s, struct MHD_Connection *c) {
  conn_slot *k = slot_of(c);
  if (!k) return;
  pthread_mutex_lock(&s->conn_mu);
  k->received = true;
  pthread_mutex_unlock(&s->conn_mu);
}

// Its request ended: a keep-alive connection's next request has the timeout from now.
static void slot_end(server *s, conn_slot *k) {
  pthread_mutex_lock(&s->conn_mu);
  if (k->in_request) s->n_requests--;
  k->in_request = k->received = false;
  k->since_ns = sc_monotonic_ns();
  pthread_mutex_unlock(&s->conn_mu);
}

int server_http_sweep(server *s) {
  uint64_t now = sc_monotonic_ns(), limit = (uint64_t)s->c.request_timeout_s * 1000000000ull;
  int n = 0;
  pthread_mutex_lock(&s->conn_mu);
  // at most SWEEP_MAX a pass: thousands of connections opened together (an attack) close spread
  // over a few hundred ms, not in one burst that holds up libmicrohttpd's thread
  for (conn_slot *k = s->conns; k && n < SWEEP_MAX; k = k->next) {
    if (k->received || k->shut || now - k->since_ns < limit) continue;
    k->shut = true; // libmicrohttpd reads the end and closes it (its CLOSED notice frees k)
    shutdown(k->fd, SHUT_RDWR);
    n++;
  }
  pthread_mutex_unlock(&s->conn_mu);
  if (n) {
    pthread_mutex_lock(&s->mu);
    s->m.timed_out += (uint64_t)n;
    pthread_mutex_unlock(&s->mu);
  }
  return n;
}

// Whether "Authorization: Bearer KEY" matches want (NULL: nothing is required), in time
// independent of where they differ.
static bool key_ok(const char *want, struct MHD_Connection *c) {
  if (!want) return true;
  const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
  if (!h) return false;
  size_t hn = strlen(h), wn = strlen(want), pre = 7; // "Bearer "
  unsigned diff = hn != pre + wn;
  if (hn < pre || strncmp(h, "Bearer ", pre)) diff = 1;
  const char *got = hn >= pre ? h + pre : "";
  size_t gn = hn >= pre ? hn - pre : 0;
  for (size_t i = 0; i < wn; i++)
    diff |= (unsigned char)want[i] ^ (unsigned char)(i < gn ? got[i] : 0);
  return diff == 0;
}

// --- generations
void gen_ref(gen *g) { g->refs++; }

void gen_unref(gen *g) {
  server *s = g->srv;
  pthread_mutex_lock(&s->mu);
  bool last = --g->refs == 0;
  pthread_mutex_unlock(&s->mu);
  if (!last) return;
  oai_request_free(&g->req);
  free(g->out);
  free(g->sse_head);
  free(g->text);
  free(g);
}

// The content reader of a streamed response: what the loop has added, or a suspension until
// it adds more.
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  gen *g = cls;
  server *s = g->srv;
  pthread_mutex_lock(&s->mu);
  ssize_t n;
  if (g->hung_up) {
    n = MHD_CONTENT_READER_END_WITH_ERROR;
  } else if (g->off < g->len) {
    size_t k = g->len - g->off < max ? g->len - g->off : max;
    memcpy(buf, g->out + g->off, k);
    g->off += k;
    if (g->off == g->len) g->off = g->len = 0;
    n = (ssize_t)k;
  } else if (g->done || s->stopped) {
    n = MHD_CONTENT_READER_END_OF_STREAM;
  } else if (g->peer_hup) { // the client is gone: close (its completion cancels the request)
    n = MHD_CONTENT_READER_END_WITH_ERROR;
  } else {
    g->suspended = true;
    MHD_suspend_connection(g->conn);
    n = 0;
  }
  pthread_mutex_unlock(&s->mu);
  return n;
}

static void stream_free(void *cls) { gen_unref(cls); }

// The loop's side of a new generation and of a cancel live in loop.c.
void server_loop_submit(server *s, void *ud);
void server_loop_cancel(server *s, void *ud);
static void drop_gen(server *s, void *ud) {
  (void)s;
  gen_unref(ud);
}

static void new_id(gen *g, oai_kind k) {
  static uint64_t counter; // (http)
  uint64_t x = sc_monotonic_ns() ^ (++counter * 0x9E3779B97F4A7C15ull);
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  snprintf(g->id, sizeof g->id, "%s-%016llx%08llx", k == OAI_CHAT ? "chatcmpl" : "cmpl",
           (unsigned long long)x, (unsigned long long)(counter & 0xffffffffu));
}

// Sim: what stands for the model's answer to g (engine_request.sim_key, sim_len): a function of
// its prompt (and of its seed when it samples: temperature > 0), so the same request gives the
// same tokens and the same length, drawn from --sim-output-len's lengths; EOS falls past
// min_tokens, and never with ignore_eos.
static void sim_answer(const server *s, gen *g) {
  if (s->c.replicas.kind != REPLICA_SIM) return;
  const oai_request *rq = &g->req;
  uint64_t h = 0xcbf29ce484222325ull; // FNV-1a over the ids
  for (int i = 0; i < rq->n_prompt; i++) h = (h ^ (uint32_t)rq->prompt[i]) * 0x100000001b3ull;
  if (rq->temperature > 0) h ^= (rq->seed + 1) * 0x9E3779B97F4A7C15ull;
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  g->sim_key = h | 1;
  if (rq->ignore_eos || s->c.n_sim_lens <= 0) return;
  int len = s->c.sim_lens[(h >> 20) % (uint64_t)s->c.n_sim_lens];
  g->sim_len = len > rq->min_tokens ? len : rq->min_tokens + 1;
}

static enum MHD_Result start_gen(server *s, struct MHD_Connection *c, conn_ctx *cc) {
  oai_kind kind = cc->r == R_CHAT ? OAI_CHAT : OAI_COMPLETION;
  pthread_mutex_lock(&s->mu);
  bool ready = s->ready, draining = s->draining || s->stopped;
  bool full = s->waiting >= s->c.max_pending;
  oai_limits lim = s->lim;
  pthread_mutex_unlock(&s->mu);
  if (draining) return refuse(s, c, "the server is shutting down");
  if (!ready) return refuse(s, c, "the server is starting: its replicas are not ready");
  if (full) return refuse(s, c, "too many requests are waiting for a replica (--max-pending)");
  oai_error e = {0};
  gen *g = calloc(1, sizeof *g);
  if (!g) return send_error(c, 500, "", "out of memory");
  g->srv = s;
  if (!oai_parse(cc->body ? cc->body : "", cc->len, kind, &lim, &g->req, &e)) {
    free(g);
    return send_error(c, e.status, e.param, e.msg);
  }
  new_id(g, kind);
  sim_answer(s, g);
  g->resp =
      (oai_resp){.kind = kind, .id = g->id, .created = (long long)time(NULL), .model = s->name};
  g->arrival_ns = sc_monotonic_ns();
  g->conn = c;
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  g->fd = ci ? ci->connect_fd : -1;
  g->refs = 2; // the connection's and the submit command's (then the loop's)
  cc->g = g;
  pthread_mutex_lock(&s->mu);
  s->gen_conns++; // until its completion
  bool stopped = s->stopped || s->draining;
  if (!stopped) {
    s->inflight++;
    s->waiting++;
    if (!g->req.stream) { // suspended until the loop has the whole body
      g->suspended = true;
      MHD_suspend_connection(c);
    }
  }
  pthread_mutex_unlock(&s->mu);
  if (stopped || !server_post(s, server_loop_submit, drop_gen, g)) {
    if (!stopped) { // the loop is gone: undo
      pthread_mutex_lock(&s->mu);
      s->inflight--;
      s->waiting--;
      if (g->suspended) {
        g->suspended = false;
        MHD_resume_connection(c);
      }
      g->done = true;
      g->status = 503;
      pthread_mutex_unlock(&s->mu);
    }
    gen_unref(g); // the command's
    cc->g = NULL;
    gen_unref(g);
    pthread_mutex_lock(&s->mu);
    s->gen_conns--;
    pthread_mutex_unlock(&s->mu);
    return refuse(s, c, "the server is shutting down");
  }
  if (!g->req.stream) return MHD_YES;
  struct MHD_Response *r =
      MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, g, stream_free);
  if (!r) return MHD_NO; // the connection closes; its completion cancels the request
  pthread_mutex_lock(&s->mu);
  gen_ref(g); // the response's
  pthread_mutex_unlock(&s->mu);
  MHD_add_response_header(r, "Content-Type", "text/event-stream");
  MHD_add_response_header(r, "Cache-Control", "no-cache");
  enum MHD_Result ok = MHD_queue_response(c, 200, r);
  MHD_destroy_response(r);
  return ok;
}

// A non-streamed generation's connection came back from suspension: send its body, or wait
// again.
static enum MHD_Result resumed(server *s, struct MHD_Connection *c, gen *g) {
  pthread_mutex_lock(&s->mu);
  if (g->hung_up) {
    pthread_mutex_unlock(&s->mu);
    return MHD_NO;
  }
  if (!g->done) {
    if (s->stopped) {
      pthread_mutex_unlock(&s->mu);
      return send_error(c, 503, "", "the server is shutting down");
    }
    if (g->peer_hup) { // the client is gone: close (its completion cancels the request)
      pthread_mutex_unlock(&s->mu);
      return MHD_NO;
    }
    g->suspended = true;
    MHD_suspend_connection(c);
    pthread_mutex_unlock(&s->mu);
    return MHD_YES;
  }
  char *body = g->out;
  int status = g->status;
  g->out = NULL;
  g->len = g->off = g->cap = 0;
  pthread_mutex_unlock(&s->mu);
  return send_buf(c, status ? status : 500, body, "application/json");
}

// --- the other endpoints
static enum MHD_Result models(server *s, struct MHD_Connection *c) {
  char buf[1024];
  snprintf(buf, sizeof buf,
           "{\"object\":\"list\",\"data\":[{\"id\":\"%s\",\"object\":\"model\",\"created\":%lld,"
           "\"owned_by\":\"shardcheck\",\"root\":\"%s\",\"parent\":null,\"max_model_len\":%d}]}",
           s->name, (long long)time(NULL), s->name, s->lim.max_model_len);
  return send_buf(c, 200, strdup(buf), "application/json");
}

static enum MHD_Result health(server *s, struct MHD_Connection *c) {
  pthread_mutex_lock(&s->mu);
  bool ok = s->ready && !s->draining && !s->stopped;
  bool dead = false;
  for (int i = 0; ok && s->m.reps && i < s->c.dp; i++) dead |= s->m.reps[i].health == REPLICA_DEAD;
  pthread_mutex_unlock(&s->mu);
  if (ok && !dead) return send_buf(c, 200, strdup(""), "text/plain");
  return send_error(c, 503, "", dead ? "a replica is dead" : "not ready");
}

static enum MHD_Result metrics(server *s, struct MHD_Connection *c) {
  pthread_mutex_lock(&s->mu);
  char *t = srv_metrics_render(&s->m, s->ready ? s->c.dp : 0, s->name, s->waiting);
  pthread_mutex_unlock(&s->mu);
  return send_buf(c, 200, t, "text/plain; version=0.0.4; charset=utf-8");
}

// The checks made once the headers are in: the cap on requests in progress, the route and
// method, the keys, the body's announced size. MHD_YES with cc->answered false: go on and read
// the body; otherwise the response queued (cc->answered) or MHD_NO (close).
static enum MHD_Result header_checks(server *s, struct MHD_Connection *c, conn_ctx *cc,
                                     const char *url, const char *method, const char *want) {
  cc->answered = true;
  int n = slot_begin(s, c);
  // /health and /metrics are always answered: a probe must not read a full server as dead
  if (n > s->c.max_connections && cc->r != R_HEALTH && cc->r != R_METRICS)
    return refuse(s, c, "too many connections (--max-connections)");
  if (cc->r == R_NONE) return send_error(c, 404, "", "Not Found");
  if (strcmp(method, want)) {
    char msg[96];
    snprintf(msg, sizeof msg, "Method %s not allowed; use %s", method, want);
    struct MHD_Response *r = NULL;
    char *b = oai_error_body(405, "", msg);
    if (b) r = MHD_create_response_from_buffer(strlen(b), b, MHD_RESPMEM_MUST_FREE);
    if (!r) {
      free(b);
      return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Allow", want);
    enum MHD_Result ok = MHD_queue_response(c, 405, r);
    MHD_destroy_response(r);
    return ok;
  }
  if (!strncmp(url, "/v1/", 4) && !key_ok(s->key, c))
    return send_error(c, 401, "", "missing or wrong API key (Authorization: Bearer KEY)");
  if (cc->r >= R_ADMIN_FAULTS && !key_ok(s->admin, c))
    return send_error(c, 401, "", "missing or wrong admin token (Authorization: Bearer TOKEN)");
  const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
  if (cl && strtoull(cl, NULL, 10) > s->c.max_body_bytes) {
    char msg[128];
    snprintf(msg, sizeof msg, "the body of %s bytes is larger than the limit of %zu bytes", cl,
             s->c.max_body_bytes);
    return send_error(c, 413, "", msg);
  }
  cc->answered = false;
  return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **req_cls) {
  (void)version;
  server *s = cls;
  conn_ctx *cc = *req_cls;
  if (!cc) { // the headers are in
    cc = calloc(1, sizeof *cc);
    if (!cc) return MHD_NO;
    *req_cls = cc;
    const char *want = NULL;
    cc->r = route_of(s, url, &want);
    enum MHD_Result early = header_checks(s, c, cc, url, method, want);
    if (early != MHD_YES || !cc->answered) return early;
    slot_received(s, c); // answered before its body: no deadline for the rest
    return early;
  }
  if (*upload_size) { // a piece of the body
    if (!cc->too_big && cc->len + *upload_size > s->c.max_body_bytes) {
      cc->too_big = true;
      free(cc->body);
      cc->body = NULL;
      cc->len = cc->cap = 0;
    }
    if (!cc->too_big) {
      if (cc->len + *upload_size + 1 > cc->cap) {
        size_t cap = cc->cap ? cc->cap : 1024;
        while (cap < cc->len + *upload_size + 1) cap *= 2;
        char *b = realloc(cc->body, cap);
        if (!b) return MHD_NO;
        cc->body = b;
        cc->cap = cap;
      }
      memcpy(cc->body + cc->len, upload, *upload_size);
      cc->len += *upload_size;
      cc->body[cc->len] = 0;
    }
    *upload_size = 0;
    return MHD_YES;
  }
  if (cc->g) return resumed(s, c, cc->g);
  slot_received(s, c); // the whole request is in
  if (cc->too_big) {
    char msg[96];
    snprintf(msg, sizeof msg, "the body is larger than the limit of %zu bytes",
             s->c.max_body_bytes);
    return send_error(c, 413, "", msg);
  }
  switch (cc->r) {
  case R_COMPLETIONS:
  case R_CHAT: return start_gen(s, c, cc);
  case R_MODELS: return models(s, c);
  case R_HEALTH: return health(s, c);
  case R_METRICS: return metrics(s, c);
  case R_ADMIN_FAULTS:
  case R_ADMIN_STATE: {
    char *body = NULL;
    int st = cc->r == R_ADMIN_STATE ? server_admin_state(s, &body)
                                    : server_admin_faults(s, cc->body ? cc->body : "", cc->len,
                                                          &body);
    return send_buf(c, st, body, "application/json");
  }
  default: return send_error(c, 404, "", "Not Found");
  }
}

// The request ended (sent, failed or the client went away): a generation not yet finished is
// cancelled.
static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls,
                         enum MHD_RequestTerminationCode why) {
  (void)why;
  server *s = cls;
  conn_slot *k = slot_of(c);
  if (k) slot_end(s, k);
  conn_ctx *cc = *req_cls;
  if (!cc) return;
  *req_cls = NULL;
  gen *g = cc->g;
  if (g) {
    pthread_mutex_lock(&s->mu);
    s->gen_conns--;
    pthread_cond_broadcast(&s->cv); // server_free may wait for the last of them
    g->gone = true;
    g->conn = NULL;
    bool cancel = !g->done;
    if (cancel) gen_ref(g); // the cancel command's
    pthread_mutex_unlock(&s->mu);
    if (cancel && !server_post(s, server_loop_cancel, drop_gen, g)) gen_unref(g);
    gen_unref(g);
  }
  free(cc->body);
  free(cc);
}

// A connection opened: its slot, with the request timeout running from now. Closed (reported
// before libmicrohttpd closes its descriptor): the slot leaves the list.
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_ctx,
                          enum MHD_ConnectionNotificationCode what) {
  server *s = cls;
  if (what == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    conn_slot *k = ci ? calloc(1, sizeof *k) : NULL;
    *socket_ctx = k;
    if (!k) return; // out of memory: no deadline for this one (the idle timeout still holds)
    k->fd = ci->connect_fd;
    k->since_ns = sc_monotonic_ns();
    pthread_mutex_lock(&s->conn_mu);
    k->next = s->conns;
    if (s->conns) s->conns->prev = k;
    s->conns = k;
    s->n_open++;
    pthread_mutex_unlock(&s->conn_mu);
  } else if (what == MHD_CONNECTION_NOTIFY_CLOSED) {
    conn_slot *k = *socket_ctx;
    *socket_ctx = NULL;
    if (!k) return;
    pthread_mutex_lock(&s->conn_mu);
    if (k->in_request) s->n_requests--;
    if (k->prev)
      k->prev->next = k->next;
    else
      s->conns = k->next;
    if (k->next) k->next->prev = k->prev;
    s->n_open--;
    s->conns_closed++;
    pthread_mutex_unlock(&s->conn_mu);
    free(k);
  }
}

static void quiet_log(void *cls, const char *fmt, va_list ap) {
  (void)cls;
  (void)fmt;
  (void)ap;
}

sc_status server_http_start(server *s, sc_error *err) {
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  socklen_t sl;
  unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
  struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
  struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
  if (inet_pton(AF_INET, s->host, &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons((uint16_t)s->c.port);
    sl = sizeof *a4;
  } else if (inet_pton(AF_INET6, s->host, &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons((uint16_t)s->c.port);
    sl = sizeof *a6;
    flags |= MHD_USE_IPv6;
  } else {
    return sc_fail(err, SC_INVALID, "--host: '%s' is not an IPv4 or IPv6 address", s->host);
  }
  (void)sl;
  s->d = MHD_start_daemon(flags, (uint16_t)s->c.port, NULL, NULL, on_request, s,
                          MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss, MHD_OPTION_CONNECTION_LIMIT,
                          (unsigned)s->c.conn_limit, MHD_OPTION_CONNECTION_TIMEOUT,
                          (unsigned)s->c.idle_timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                          (size_t)(64 * 1024), MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                          MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                          MHD_OPTION_EXTERNAL_LOGGER, quiet_log, NULL, MHD_OPTION_END);
  if (!s->d)
    return sc_fail(err, SC_IO, "cannot listen on %s:%d (%s)", s->host, s->c.port,
                   errno ? strerror(errno) : "libmicrohttpd refused to start");
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
  s->port = di ? di->port : s->c.port;
  return SC_OK;
}

void server_http_stop(server *s) {
  if (s->d) MHD_stop_daemon(s->d);
  s->d = NULL;
}
