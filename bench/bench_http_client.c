// The HTTP client's own capacity (serving/replica_http.c): how many concurrent streams one
// HTTP replica keeps, how many chunks per second it records, and how far its per-chunk stamps
// are from the moment the server sent each chunk.
//
// A stand-in server in a child process (epoll, one thread) answers every streaming POST with
// `chunks` SSE events `gap_ms` apart after `ttft_ms`, chunked transfer encoding, keep-alive.
// Each event carries its own send time in choices[0].token_ids (the monotonic clock in
// microseconds, mod 2^31), which the replica hands back as the token id: the stamp error of a
// chunk is the replica's stamp (ev.t_ns, same machine, same clock) minus that send time. The
// client keeps `streams` requests in flight (closed loop) for `seconds`, and the table gives
// streams, chunks/s recorded, the stamp error's p50 / p99 / max, and both sides' CPU time.
//
//   bench_http_client [streams] [seconds] [gap_ms] [chunks]     (defaults 10000 10 100 20)
//
// Not here: the stamp rules themselves (docs/metrics.md), the runner around the replica.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernels/clock.h"
#include "kernels/util.h"
#include "serving/replica.h"

#define NS_PER_MS 1000000ull

// --- the stand-in server (child process)
typedef struct conn {
  int fd;
  char in[8192];
  size_t n_in;
  bool streaming;
  int sent;        // chunks sent of the current response
  int hidx;        // its index in srv.heap (-1: not scheduled)
} conn;

// A heap entry holds its connection's due time: the sift compares without touching the
// connections (each over 8 KiB, so 10,000 of them miss the cache on every comparison).
typedef struct hent {
  uint64_t next;
  conn *c;
} hent;

typedef struct srv {
  int ep, lfd;
  conn **by_fd; // (cap) indexed by fd
  int cap;
  hent *heap;   // (n_heap) streaming connections, a min-heap on next
  int n_heap;
  int chunks;
  uint64_t gap_ns, ttft_ns;
  uint64_t n_started; // responses begun
} srv;

// --- the schedule: a binary min-heap of streaming connections on their next chunk's time
static void heap_swap(srv *s, int i, int j) {
  hent t = s->heap[i];
  s->heap[i] = s->heap[j];
  s->heap[j] = t;
  s->heap[i].c->hidx = i;
  s->heap[j].c->hidx = j;
}

static void heap_fix(srv *s, int i) {
  while (i > 0 && s->heap[(i - 1) / 2].next > s->heap[i].next) {
    heap_swap(s, i, (i - 1) / 2);
    i = (i - 1) / 2;
  }
  for (;;) {
    int l = 2 * i + 1, r = l + 1, m = i;
    if (l < s->n_heap && s->heap[l].next < s->heap[m].next) m = l;
    if (r < s->n_heap && s->heap[r].next < s->heap[m].next) m = r;
    if (m == i) return;
    heap_swap(s, i, m);
    i = m;
  }
}

static void heap_push(srv *s, conn *c, uint64_t due) {
  c->hidx = s->n_heap;
  s->heap[s->n_heap++] = (hent){due, c};
  heap_fix(s, c->hidx);
}

static void heap_remove(srv *s, conn *c) {
  int i = c->hidx;
  if (i < 0) return;
  c->hidx = -1;
  if (i == --s->n_heap) return;
  s->heap[i] = s->heap[s->n_heap];
  s->heap[i].c->hidx = i;
  heap_fix(s, i);
}

static void srv_close(srv *s, conn *c) {
  epoll_ctl(s->ep, EPOLL_CTL_DEL, c->fd, NULL);
  close(c->fd);
  s->by_fd[c->fd] = NULL;
  heap_remove(s, c);
  free(c);
}

static bool send_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) { // a full socket buffer: wait for it briefly
      struct pollfd pf = {.fd = fd, .events = POLLOUT};
      poll(&pf, 1, 100);
      continue;
    }
    if (w <= 0) return false;
    p += w;
    n -= (size_t)w;
  }
  return true;
}

// A whole request in c->in (headers and Content-Length body): starts its stream.
static void srv_request(srv *s, conn *c) {
  char *hdr_end = memmem(c->in, c->n_in, "\r\n\r\n", 4);
  if (!hdr_end) return;
  size_t hl = (size_t)(hdr_end - c->in) + 4;
  size_t body = 0;
  char *cl = memmem(c->in, hl, "Content-Length:", 15);
  if (!cl) cl = memmem(c->in, hl, "content-length:", 15);
  if (cl) body = strtoul(cl + 15, NULL, 10);
  if (c->n_in < hl + body) return;
  memmove(c->in, c->in + hl + body, c->n_in - hl - body);
  c->n_in -= hl + body;
  static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             "Transfer-Encoding: chunked\r\n\r\n";
  if (!send_all(c->fd, head, sizeof head - 1)) {
    srv_close(s, c);
    return;
  }
  c->streaming = true;
  c->sent = 0;
  // streams' phases spread over the gap (a golden-ratio sequence), as independent requests'
  // tokens are: not every stream's chunk due at one instant
  s->n_started++;
  uint64_t phase = (uint64_t)((double)s->gap_ns * fmod(s->n_started * 0.6180339887, 1.0));
  heap_push(s, c, sc_monotonic_ns() + s->ttft_ns + phase);
}

// Sends c's next chunk (its send time inside), or the end of its stream.
static void srv_chunk(srv *s, conn *c) {
  char ev[256], out[320];
  if (c->sent < s->chunks) {
    uint64_t us = sc_monotonic_ns() / 1000;
    int n = snprintf(ev, sizeof ev,
                     "data: {\"choices\":[{\"index\":0,\"text\":\"x\",\"token_ids\":[%llu]}]}\n\n",
                     (unsigned long long)(us % 2147483648ull));
    int m = snprintf(out, sizeof out, "%x\r\n%s\r\n", n, ev);
    c->sent++;
    s->heap[c->hidx].next += s->gap_ns;
    heap_fix(s, c->hidx);
    if (!send_all(c->fd, out, (size_t)m)) srv_close(s, c);
    return;
  }
  static const char done[] = "data: [DONE]\n\n";
  int m = snprintf(out, sizeof out, "%zx\r\n%s\r\n0\r\n\r\n", sizeof done - 1, done);
  c->streaming = false;
  heap_remove(s, c);
  if (!send_all(c->fd, out, (size_t)m)) srv_close(s, c);
}

static _Noreturn void srv_main(int lfd, int chunks, uint64_t gap_ns, uint64_t ttft_ns) {
  srv s = {.lfd = lfd, .chunks = chunks, .gap_ns = gap_ns, .ttft_ns = ttft_ns, .cap = 65536};
  s.by_fd = calloc((size_t)s.cap, sizeof *s.by_fd);
  s.heap = calloc((size_t)s.cap, sizeof *s.heap);
  s.ep = epoll_create1(0);
  struct epoll_event le = {.events = EPOLLIN, .data.fd = lfd};
  epoll_ctl(s.ep, EPOLL_CTL_ADD, lfd, &le);
  struct epoll_event evs[512];
  for (;;) {
    // every chunk due goes out, then sleep (to the nanosecond, ppoll on the epoll fd) until the
    // next one or a socket event
    uint64_t now = sc_monotonic_ns();
    while (s.n_heap > 0 && s.heap[0].next <= now) srv_chunk(&s, s.heap[0].c);
    now = sc_monotonic_ns();
    uint64_t due = s.n_heap > 0 ? s.heap[0].next : now + 50 * NS_PER_MS;
    uint64_t d = due > now ? due - now : 0;
    struct timespec ts = {.tv_sec = (time_t)(d / 1000000000ull), .tv_nsec = (long)(d % 1000000000ull)};
    struct pollfd pf = {.fd = s.ep, .events = POLLIN};
    int n = ppoll(&pf, 1, &ts, NULL) > 0 ? epoll_wait(s.ep, evs, 512, 0) : 0;
    for (int i = 0; i < n; i++) {
      int fd = evs[i].data.fd;
      if (fd == lfd) {
        int cfd;
        while ((cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
          if (cfd >= s.cap) {
            close(cfd);
            continue;
          }
          int one = 1;
          setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          conn *c = calloc(1, sizeof *c);
          c->fd = cfd;
          c->hidx = -1;
          s.by_fd[cfd] = c;
          struct epoll_event ce = {.events = EPOLLIN, .data.fd = cfd};
          epoll_ctl(s.ep, EPOLL_CTL_ADD, cfd, &ce);
        }
        continue;
      }
      conn *c = s.by_fd[fd];
      if (!c) continue;
      ssize_t r = recv(fd, c->in + c->n_in, sizeof c->in - c->n_in, 0);
      if (r <= 0) {
        if (r < 0 && errno == EAGAIN) continue;
        srv_close(&s, c);
        continue;
      }
      c->n_in += (size_t)r;
      if (!c->streaming) srv_request(&s, c);
    }
  }
}

// --- the client: one HTTP replica

static double cpu_s(int who) {
  struct rusage ru;
  getrusage(who, &ru);
  return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec / 1e6;
}

int main(int argc, char **argv) {
  int streams = argc > 1 ? atoi(argv[1]) : 10000;
  double seconds = argc > 2 ? atof(argv[2]) : 10;
  int gap_ms = argc > 3 ? atoi(argv[3]) : 100;
  int chunks = argc > 4 ? atoi(argv[4]) : 20;
  signal(SIGPIPE, SIG_IGN);
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  if (bind(lfd, (struct sockaddr *)&a, sizeof a) || listen(lfd, 65535) ||
      getsockname(lfd, (struct sockaddr *)&a, &al)) {
    perror("bench_http_client: listen");
    return 1;
  }
  int port = ntohs(a.sin_port);
  pid_t child = fork();
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); // never outlives the bench
    srv_main(lfd, chunks, (uint64_t)gap_ms * NS_PER_MS, 20 * NS_PER_MS);
  }
  close(lfd);

  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/v1", port);
  replica_http_options o = {.base_url = url, .model = "standin"};
  engine_config cfg = {.tp = 1, .pp = 1, .clock = sc_clock_monotonic()};
  replica *r = NULL;
  sc_error e = {{0}};
  if (replica_http_new(&cfg, &o, 0, &r, &e) != SC_OK) {
    fprintf(stderr, "bench_http_client: %s\n", e.msg);
    kill(child, SIGKILL);
    return 1;
  }
  int32_t prompt[16];
  for (int i = 0; i < 16; i++) prompt[i] = 3 + i;
  engine_request q = {.prompt = prompt, .n_prompt = 16, .max_tokens = chunks};
  uint64_t key = 0;
  int inflight = 0;
  size_t cap_err = 1 << 20, n_err = 0;
  double *err_ms = malloc(cap_err * sizeof *err_ms);
  uint64_t t0 = sc_monotonic_ns();
  uint64_t warm = t0 + (uint64_t)(2.0 * 1e9); // the first 2 s open connections: not counted
  uint64_t end = t0 + (uint64_t)(seconds * 1e9);
  uint64_t chunks_in = 0, failed = 0, finished = 0;
  double cpu0 = 0, cpu_child0 = 0;
  bool counting = false;
  replica_event ev[4096];
  while (sc_monotonic_ns() < end) {
    while (inflight < streams) {
      if (replica_submit(r, key++, &q, &e) != SC_OK) break;
      inflight++;
    }
    struct pollfd pf = {.fd = replica_wait_fd(r), .events = POLLIN};
    poll(&pf, 1, 10);
    uint64_t now = sc_monotonic_ns();
    if (!counting && now >= warm) {
      counting = true;
      warm = now;
      cpu0 = cpu_s(RUSAGE_SELF);
    }
    int n;
    while ((n = replica_poll(r, ev, 4096)) > 0)
      for (int i = 0; i < n; i++) {
        if (ev[i].kind == REPLICA_EV_TOKEN) {
          if (!counting) continue;
          chunks_in++;
          int64_t d = (int64_t)((ev[i].t_ns / 1000) % 2147483648ull) - ev[i].token;
          if (d < -1000000000ll) d += 2147483648ll; // the send time wrapped before the stamp
          if (n_err == cap_err) {
            cap_err *= 2;
            err_ms = realloc(err_ms, cap_err * sizeof *err_ms);
          }
          err_ms[n_err++] = (double)d / 1000.0;
        } else if (ev[i].kind == REPLICA_EV_FINISHED || ev[i].kind == REPLICA_EV_FAILED) {
          inflight--;
          if (ev[i].kind == REPLICA_EV_FAILED) failed++;
          else finished++;
        }
      }
  }
  uint64_t t1 = sc_monotonic_ns();
  double cpu = cpu_s(RUSAGE_SELF) - cpu0;
  replica_free(r);
  kill(child, SIGTERM);
  waitpid(child, NULL, 0);
  cpu_child0 = cpu_s(RUSAGE_CHILDREN);
  double span = (double)(t1 - warm) / 1e9;
  qsort(err_ms, n_err, sizeof *err_ms, sc_cmp_double);
  double p50 = n_err ? err_ms[n_err / 2] : 0, p99 = n_err ? err_ms[(size_t)(n_err * 0.99)] : 0;
  double mx = n_err ? err_ms[n_err - 1] : 0;
  printf("| streams | gap ms | chunks/s recorded | stamp error p50 ms | p99 ms | max ms | client "
         "CPU s/s | server CPU s | finished | failed |\n");
  printf("|---|---|---|---|---|---|---|---|---|---|\n");
  printf("| %d | %d | %.0f | %.3f | %.3f | %.1f | %.2f | %.1f | %llu | %llu |\n", streams, gap_ms,
         (double)chunks_in / span, p50, p99, mx, cpu / span, cpu_child0,
         (unsigned long long)finished, (unsigned long long)failed);
  free(err_ms);
  return 0;
}
