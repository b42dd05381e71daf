// The server's lifecycle (see server.h): config defaults, start (the HTTP side, then the loop
// thread that builds the replicas), readiness, and the orderly stop. The loop is server/loop.c,
// the HTTP side server/http.c.
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "kernels/clock.h"
#include "server/server_impl.h"

// How long server_free lets the generations' connections send their last bytes.
static const uint64_t DRAIN_FLUSH_NS = 2000000000ull;

server_config server_config_defaults(void) {
  return (server_config){.host = "127.0.0.1",
                         .port = 8000,
                         .served_name = "model",
                         .max_body_bytes = 1u << 20,
                         .max_pending = 4096,
                         .idle_timeout_s = 30,
                         .request_timeout_s = 10,
                         .engine = engine_config_defaults(),
                         .dp = 1,
                         .replicas = {.kind = REPLICA_LOCAL},
                         .layout = "tp1",
                         .policy = ROUTER_LEAST_OUTSTANDING,
                         .max_retries = 3,
                         .restart = true};
}

static char *dup_or_null(const char *s) { return s && *s ? strdup(s) : NULL; }

sc_status server_new(const server_config *c, server **out, sc_error *err) {
  *out = NULL;
  if (c->dp < 1 || c->max_model_len < 2 || c->max_model_len > c->engine.model.max_seq_len)
    return sc_fail(err, SC_INVALID, "server: dp must be >= 1 and max_model_len in [2, %d]",
                   c->engine.model.max_seq_len);
  server *s = calloc(1, sizeof *s);
  if (!s) return sc_fail(err, SC_OOM, "out of memory");
  s->c = *c;
  if (s->c.max_connections <= 0) // every running and waiting stream fits, and some room
    s->c.max_connections = s->c.max_pending + c->dp * c->engine.max_running + 64;
  if (s->c.conn_limit <= 0) { // room for connections without a request yet (idle, slow)
    long lim =
        (long)s->c.max_connections + (s->c.max_connections > 4096 ? s->c.max_connections : 4096);
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY &&
        (long)nofile.rlim_cur - 256 < lim) // descriptors for the replicas, logs and epoll
      lim = (long)nofile.rlim_cur - 256;
    s->c.conn_limit = lim > 16 ? (int)lim : 16;
  }
  s->host = strdup(c->host ? c->host : "127.0.0.1");
  s->name = strdup(c->served_name ? c->served_name : "model");
  s->key = dup_or_null(c->api_key);
  s->admin = dup_or_null(c->admin_token);
  s->layout = strdup(c->layout ? c->layout : "");
  s->m.reps = calloc((size_t)c->dp, sizeof *s->m.reps);
  srv_metrics_init(&s->m, c->max_model_len);
  s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  s->hup_ep = epoll_create1(EPOLL_CLOEXEC);
  pthread_mutex_init(&s->mu, NULL);
  pthread_mutex_init(&s->conn_mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->t0 = sc_monotonic_ns();
  s->lim = (oai_limits){
      .model = &s->c.engine.model, .served_name = s->name, .max_model_len = c->max_model_len};
  if (!s->host || !s->name || !s->layout || !s->m.reps || s->wake_fd < 0 || s->hup_ep < 0 ||
      (c->api_key && *c->api_key && !s->key) ||
      (c->admin_token && *c->admin_token && !s->admin)) {
    server_free(s);
    return sc_fail(err, SC_OOM, "out of memory");
  }
  sc_status st = server_http_start(s, err);
  if (st != SC_OK) {
    server_free(s);
    return st;
  }
  if (pthread_create(&s->loop, NULL, server_loop_main, s) != 0) {
    server_free(s);
    return sc_fail(err, SC_OOM, "cannot start the loop thread");
  }
  s->loop_started = true;
  *out = s;
  return SC_OK;
}

sc_status server_wait_ready(server *s, sc_error *err) {
  pthread_mutex_lock(&s->mu);
  while (!s->ready && !s->failed) pthread_cond_wait(&s->cv, &s->mu);
  sc_status st = s->ready ? SC_OK : s->build_status;
  if (err && !s->ready) *err = s->build_err;
  pthread_mutex_unlock(&s->mu);
  return st;
}

int server_port(const server *s) { return s->port; }

int server_kv_blocks(const server *s) {
  server *m = (server *)s;
  pthread_mutex_lock(&m->mu);
  int n = m->kv_blocks;
  pthread_mutex_unlock(&m->mu);
  return n;
}

void server_free(server *s) {
  if (!s) return;
  if (s->loop_started) {
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_mutex_unlock(&s->mu);
    server_wake(s);
    pthread_join(s->loop, NULL);
  } else {
    pthread_mutex_lock(&s->mu);
    s->stopped = true;
    pthread_mutex_unlock(&s->mu);
  }
  // Streams end whole: every generation's connection sends what the loop gave it (a cut-off
  // stream's error event, [DONE] and the chunked terminator) before the daemon closes it; a
  // client that does not read gets DRAIN_FLUSH_NS.
  uint64_t flush_end = sc_monotonic_ns() + DRAIN_FLUSH_NS;
  pthread_mutex_lock(&s->mu);
  while (s->gen_conns > 0 && s->d) {
    uint64_t now = sc_monotonic_ns();
    if (now >= flush_end) break;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t wait = flush_end - now < 50000000ull ? flush_end - now : 50000000ull;
    ts.tv_nsec += (long)wait;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
  }
  pthread_mutex_unlock(&s->mu);
  server_http_stop(s); // every connection is closed: their commands are queued below
  // Commands the loop never ran: release what they hold.
  server_cmd *c = s->cmd_head;
  s->cmd_head = s->cmd_tail = NULL;
  while (c) {
    server_cmd *next = c->next;
    if (c->drop) c->drop(s, c->ud);
    free(c);
    c = next;
  }
  // The supervisor first: a restart under way finishes before its replica is freed (the
  // workers it started die with it, PR_SET_PDEATHSIG, as the loop's did with the loop).
  sup_free(s->sup);
  s->sup = NULL;
  for (int i = 0; i < s->n_reps; i++) replica_free(s->reps[i]);
  router_free(s->rt);
  req_table_free(&s->reqs);
  free(s->by_key);
  free(s->reps);
  free(s->m.reps);
  if (s->wake_fd >= 0) close(s->wake_fd);
  if (s->hup_ep >= 0) close(s->hup_ep);
  pthread_mutex_destroy(&s->mu);
  pthread_mutex_destroy(&s->conn_mu);
  pthread_cond_destroy(&s->cv);
  free(s->host);
  free(s->name);
  free(s->key);
  free(s->admin);
  free(s->rs);
  free(s->step_end);
  free(s->resume);
  free(s->layout);
  free(s);
}
