// The HTTP replica (serving/replica_http.c) through its own API, below the runner: its connect
// deadline, which the replica's thread keeps instead of libcurl. A server whose accept queue
// is full never completes a connection, so every request fails with reason "connect" once the
// deadline passes, also a request whose kept-alive connection was closed under it (libcurl
// connects again); streams on connections made in time, new or reused, run past it to the end.
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kernels/clock.h"
#include "serving/replica.h"
#include "tests/helpers.h"

#define MS 1000000ull

// Waits (up to limit_ms) until every one of n requests ended; counts the ends by kind.
typedef struct ends {
  int finished, failed, connect_failures, tokens;
  char what[256]; // the first failure's message
  uint64_t last_ns;
} ends;

static ends wait_ends(replica *r, int n, int limit_ms) {
  ends e = {0};
  uint64_t until = sc_monotonic_ns() + (uint64_t)limit_ms * MS;
  replica_event ev[64];
  while (e.finished + e.failed < n && sc_monotonic_ns() < until) {
    struct pollfd pf = {.fd = replica_wait_fd(r), .events = POLLIN};
    poll(&pf, 1, 20);
    int k;
    while ((k = replica_poll(r, ev, 64)) > 0) {
      for (int i = 0; i < k; i++) {
        if (ev[i].kind == REPLICA_EV_TOKEN) e.tokens++;
        if (ev[i].kind == REPLICA_EV_FINISHED) e.finished++, e.last_ns = sc_monotonic_ns();
        if (ev[i].kind != REPLICA_EV_FAILED) continue;
        if (!e.failed++ && ev[i].what) snprintf(e.what, sizeof e.what, "%s", ev[i].what);
        if (ev[i].failure == REPLICA_FAIL_CONNECT) e.connect_failures++;
        e.last_ns = sc_monotonic_ns();
      }
    }
  }
  return e;
}

// A listener on 127.0.0.1 whose accept queue is full (backlog 0, taken by connections nobody
// accepts): the kernel drops every further SYN, so a new connection hangs in connect.
static int full_listener(int *port, int held[3]) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  cr_assert_eq(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
  cr_assert_eq(listen(lfd, 0), 0);
  cr_assert_eq(getsockname(lfd, (struct sockaddr *)&a, &al), 0);
  *port = ntohs(a.sin_port);
  for (int i = 0; i < 3; i++) {
    held[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    connect(held[i], (struct sockaddr *)&a, sizeof a); // EINPROGRESS once the queue is full
  }
  return lfd;
}

Test(replica_http, a_connection_never_accepted_fails_with_connect_at_the_deadline) {
  int port, held[3];
  int lfd = full_listener(&port, held);
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/v1", port);
  replica_http_options o = {.base_url = url, .model = "m", .connect_timeout_ns = 300 * MS};
  engine_config cfg = {.tp = 1, .pp = 1};
  replica *r = NULL;
  sc_error err = {{0}};
  cr_assert_eq(replica_http_new(&cfg, &o, 0, &r, &err), SC_OK, "%s", err.msg);
  uint64_t t0 = sc_monotonic_ns();
  for (uint64_t k = 1; k <= 3; k++) sc_test_submit(r, k, 8, 4);
  ends e = wait_ends(r, 3, 5000);
  cr_assert_eq(e.connect_failures, 3, "connect failures %d, failed %d, finished %d",
               e.connect_failures, e.failed, e.finished);
  double took = (double)(e.last_ns - t0) / 1e9;
  cr_assert(took >= 0.3 && took < 2.0, "failed after %.2f s, the deadline is 0.3 s", took);
  cr_assert(strstr(e.what, "not connected after 0.3 s"), "message: %s", e.what);
  cr_assert(strstr(e.what, url), "message: %s", e.what);
  replica_free(r);
  for (int i = 0; i < 3; i++) close(held[i]);
  close(lfd);
}

// The one-connection server of the test below: answers the first request on its connection,
// then, when the second arrives there, fills its accept queue and closes the connection.
typedef struct once_server {
  int lfd, port, held[2];
} once_server;

// Reads one request (headers and Content-Length bytes of body) from fd; false at EOF.
static bool read_request(int fd) {
  char buf[8192];
  size_t n = 0;
  for (;;) {
    ssize_t k = read(fd, buf + n, sizeof buf - 1 - n);
    if (k <= 0) return false;
    n += (size_t)k;
    buf[n] = 0;
    char *end = strstr(buf, "\r\n\r\n");
    const char *cl = strcasestr(buf, "content-length:");
    if (end && cl && n >= (size_t)(end + 4 - buf) + (size_t)atoi(cl + 15)) return true;
    if (n >= sizeof buf - 1) return false;
  }
}

static void *once_serve(void *arg) {
  once_server *s = arg;
  int c = accept(s->lfd, NULL, NULL);
  if (c < 0 || !read_request(c)) return NULL;
  const char *body = "data: {\"choices\":[{\"index\":0,\"text\":\"a\","
                     "\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n";
  char resp[512];
  int n = snprintf(resp, sizeof resp,
                   "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                   "Content-Length: %zu\r\n\r\n%s",
                   strlen(body), body);
  if (write(c, resp, (size_t)n) != n) return NULL;
  if (read_request(c)) { // the second request on the kept-alive connection
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < 2; i++) {
      s->held[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
      connect(s->held[i], (struct sockaddr *)&a, sizeof a);
    }
  }
  close(c);
  return NULL;
}

Test(replica_http, a_kept_alive_connection_closed_under_a_request_gets_a_new_deadline) {
  once_server s = {.held = {-1, -1}};
  s.lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  cr_assert_eq(bind(s.lfd, (struct sockaddr *)&a, sizeof a), 0);
  cr_assert_eq(listen(s.lfd, 0), 0);
  cr_assert_eq(getsockname(s.lfd, (struct sockaddr *)&a, &al), 0);
  s.port = ntohs(a.sin_port);
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, once_serve, &s), 0);
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/v1", s.port);
  replica_http_options o = {.base_url = url, .model = "m", .connect_timeout_ns = 300 * MS};
  engine_config cfg = {.tp = 1, .pp = 1};
  replica *r = NULL;
  sc_error err = {{0}};
  cr_assert_eq(replica_http_new(&cfg, &o, 0, &r, &err), SC_OK, "%s", err.msg);
  sc_test_submit(r, 1, 8, 1);
  ends e = wait_ends(r, 1, 5000);
  cr_assert_eq(e.finished, 1, "the first request: finished %d, failed %d: %s", e.finished,
               e.failed, e.what);
  uint64_t t0 = sc_monotonic_ns();
  sc_test_submit(r, 2, 8, 1);
  e = wait_ends(r, 1, 5000);
  cr_assert_eq(e.connect_failures, 1, "the second request: connect failures %d, failed %d: %s",
               e.connect_failures, e.failed, e.what);
  double took = (double)(e.last_ns - t0) / 1e9;
  cr_assert(took >= 0.3 && took < 2.0, "failed after %.2f s, the deadline is 0.3 s", took);
  replica_free(r);
  pthread_join(th, NULL);
  for (int i = 0; i < 2; i++)
    if (s.held[i] >= 0) close(s.held[i]);
  close(s.lfd);
}

Test(replica_http, streams_outlast_the_connect_deadline_on_new_and_reused_connections) {
  // a free port for the stand-in
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  cr_assert_eq(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
  cr_assert_eq(getsockname(lfd, (struct sockaddr *)&a, &al), 0);
  int port = ntohs(a.sin_port);
  close(lfd); // free again for the stand-in
  char command[1100], url[64], ready[64];
  snprintf(command, sizeof command,
           "python3 %s/tests/openai_standin.py --port %d --ttft-ms 20 --token-ms 40",
           SC_SOURCE_DIR, port);
  snprintf(url, sizeof url, "http://127.0.0.1:%d/v1", port);
  snprintf(ready, sizeof ready, "http://127.0.0.1:%d/health", port);
  const char *dir = sc_test_tmpdir("replica-http-reuse");
  char log[600];
  snprintf(log, sizeof log, "%s/server.log", dir);
  replica_http_options o = {.base_url = url,
                            .model = "standin",
                            .command = command,
                            .log_path = log,
                            .ready_url = ready,
                            .ready_timeout_ns = 20000 * MS,
                            .stop_grace_ns = 2000 * MS,
                            .connect_timeout_ns = 300 * MS};
  engine_config cfg = {.tp = 1, .pp = 1};
  replica *r = NULL;
  sc_error err = {{0}};
  cr_assert_eq(replica_http_new(&cfg, &o, 0, &r, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(replica_wait_ready(r, NULL, &err), SC_OK, "%s", err.msg);
  // two rounds of two streams of 16 tokens 40 ms apart (about 0.7 s each, past the 0.3 s
  // deadline): the second round goes out on the first round's kept-alive connections
  for (int round = 0; round < 2; round++) {
    for (uint64_t k = 1; k <= 2; k++) sc_test_submit(r, (uint64_t)round * 10 + k, 8, 16);
    ends e = wait_ends(r, 2, 10000);
    cr_assert_eq(e.failed, 0, "round %d: %d failed: %s", round, e.failed, e.what);
    cr_assert_eq(e.finished, 2, "round %d: %d finished", round, e.finished);
    cr_assert_eq(e.tokens, 32, "round %d: %d tokens", round, e.tokens);
  }
  replica_free(r);
}
