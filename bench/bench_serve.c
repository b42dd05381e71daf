// `shardcheck serve`'s own cost, two ways (docs/benchmarks.md, "Serving over HTTP"):
//
//   overhead  the same requests on llama-small (real CPU backend, tp 1), one at a time: first
//             straight into a replica in this process (replica_submit, events pulled as the
//             server's loop pulls them), then through serve over HTTP with a libcurl client
//             streaming, stamping each chunk as it arrives. TTFT p50 and TPOT median of each,
//             and the difference. Target: added TTFT p50 <= 1 ms, TPOT within 2%.
//   capacity  sim mode (llama3-70b, tp 4, dp 2 on simulated H100s): N concurrent streams from
//             one libcurl multi handle in this process, each asking for T tokens; chunks per
//             second at the client, and how late after its priced end the server completed
//             each step (shardcheck:sim_step_lateness_seconds). Target on the 2-core machine:
//             >= 5,000 streams, >= 50,000 chunks/s, step ends within 1 ms of their deadline at
//             p99.
//
//   hostile   sim mode with default flags: 2,000 slowloris connections (half a request, then a
//             byte a second) and 1,000 idle ones held open (each reopened when the server closes
//             it) while a legitimate client probes /health and runs completions. Target: every
//             completion succeeds, /health answers within 100 ms.
//   flood     sim mode with default flags: 5,000 streams at once; each completes or is refused
//             with 503, and the refusals equal shardcheck:requests_rejected_total.
//   aborts    sim mode: 10 rounds of 1,000 streams each aborted by its client after two chunks;
//             RSS (this process: server and client) after each round. Target: round 10 within
//             10% of round 1.
//
// Prints one table per mode; numbers go to docs/benchmarks.md with the machine.
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/clock.h"
#include "server/deploy.h"
#include "server/server.h"

// --- a streamed request through HTTP
typedef struct stream {
  uint64_t t0, *t; // when it was sent; when each content chunk arrived (monotonic ns)
  int n_t, cap_t;
  bool done;
  char tail[16]; // the end of the text so far (to find "token_ids" across pieces)
} stream;

static int started, finished; // streams with a first chunk; with [DONE] (capacity's count)

static size_t on_data(char *p, size_t sz, size_t n, void *ud) {
  stream *s = ud;
  size_t k = sz * n;
  uint64_t now = sc_monotonic_ns();
  char buf[16 + 16384];
  size_t keep = strlen(s->tail);
  size_t take = k < 16384 ? k : 16384;
  memcpy(buf, s->tail, keep);
  memcpy(buf + keep, p + (k - take), take);
  buf[keep + take] = 0;
  for (const char *q = buf; (q = strstr(q, "token_ids")); q++) {
    if (s->n_t == s->cap_t) {
      s->cap_t = s->cap_t ? s->cap_t * 2 : 64;
      s->t = realloc(s->t, (size_t)s->cap_t * sizeof *s->t);
    }
    if (!s->n_t) started++;
    s->t[s->n_t++] = now;
  }
  if (!s->done && strstr(buf, "[DONE]")) {
    s->done = true;
    finished++;
  }
  size_t tl = keep + take < 12 ? keep + take : 12;
  memcpy(s->tail, buf + keep + take - tl, tl);
  s->tail[tl] = 0;
  return k;
}

// A POST of body to url, its response to fn(ud), for a multi handle.
static CURL *post(const char *url, const char *body, struct curl_slist *hl,
                  size_t (*fn)(char *, size_t, size_t, void *), void *ud) {
  CURL *c = curl_easy_init();
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, fn);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, ud);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 600L);
  return c;
}

static CURL *easy(int port, const char *body, stream *s, struct curl_slist *hl) {
  char url[128];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/completions", port);
  CURL *c = post(url, body, hl, on_data, s); // (libcurl copies the URL)
  curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
  return c;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n ? v[n / 2] : 0;
}

static server *start(serve_deploy d, int max_conns, int max_seqs, void **keep, int *port) {
  server_config c = server_config_defaults();
  sc_error err = {{0}};
  d.max_num_seqs = max_seqs;
  if (serve_deploy_config(&d, &c, keep, &err) != SC_OK) {
    fprintf(stderr, "bench_serve: %s\n", err.msg);
    exit(2);
  }
  c.port = 0;
  c.served_name = d.model;
  c.max_connections = max_conns;
  c.max_pending = 1 << 20;
  c.idle_timeout_s = 600;
  server *s = NULL;
  if (server_new(&c, &s, &err) != SC_OK || server_wait_ready(s, &err) != SC_OK) {
    fprintf(stderr, "bench_serve: %s\n", err.msg);
    exit(3);
  }
  *port = server_port(s);
  return s;
}

// --- overhead
static void prompt_ids(int32_t *p, int n, int salt) {
  for (int i = 0; i < n; i++) p[i] = 3 + (i * 37 + salt * 101) % 250;
}

// One request straight into replica r, as the server's loop drives it: TTFT and TPOT in ms.
static void run_in_process(replica *r, uint64_t key, const int32_t *prompt, int n_prompt,
                           int n_out, uint64_t *t, double *ttft, double *tpot) {
  sc_error err = {{0}};
  engine_request er = {.prompt = prompt,
                       .n_prompt = n_prompt,
                       .max_tokens = n_out,
                       .sampling = {.temperature = 0}};
  uint64_t t0 = sc_monotonic_ns();
  replica_submit(r, key, &er, &err);
  int got = 0;
  bool fin = false;
  while (!fin) {
    struct pollfd pf = {.fd = replica_wait_fd(r), .events = POLLIN};
    poll(&pf, 1, 100);
    replica_event ev[64];
    int n = replica_poll(r, ev, 64);
    uint64_t now = sc_monotonic_ns();
    for (int i = 0; i < n; i++) {
      if (ev[i].kind == REPLICA_EV_TOKEN && got < n_out) t[got++] = now;
      if (ev[i].kind == REPLICA_EV_FINISHED || ev[i].kind == REPLICA_EV_FAILED) fin = true;
    }
  }
  *ttft = got ? (double)(t[0] - t0) / 1e6 : 0;
  *tpot = got > 1 ? (double)(t[got - 1] - t[0]) / 1e6 / (got - 1) : 0;
}

// The same request through serve, streamed over HTTP: TTFT and TPOT in ms at the client.
static void run_served(int port, struct curl_slist *hl, char *body, const int32_t *prompt,
                       int n_prompt, int n_out, double *ttft, double *tpot) {
  size_t len = (size_t)sprintf(body, "{\"prompt\":[");
  for (int i = 0; i < n_prompt; i++)
    len += (size_t)sprintf(body + len, "%s%d", i ? "," : "", prompt[i]);
  sprintf(body + len, "],\"max_tokens\":%d,\"ignore_eos\":true,\"temperature\":0,\"stream\":true}",
          n_out);
  stream st = {0};
  CURL *c = easy(port, body, &st, hl);
  st.t0 = sc_monotonic_ns();
  curl_easy_perform(c);
  curl_easy_cleanup(c);
  if (st.n_t != n_out) fprintf(stderr, "bench_serve: %d chunks, want %d\n", st.n_t, n_out);
  *ttft = st.n_t ? (double)(st.t[0] - st.t0) / 1e6 : 0;
  *tpot = st.n_t > 1 ? (double)(st.t[st.n_t - 1] - st.t[0]) / 1e6 / (st.n_t - 1) : 0;
  free(st.t);
}

// The two paths interleaved request by request (their order alternating), so that a change in
// the machine's speed during the run falls on both alike.
static void overhead(int reqs, int n_prompt, int n_out, int threads) {
  serve_deploy d = {.model = "llama-small", .tp = 1, .pp = 1, .dp = 1, .threads = threads};
  double *ttft[2], *tpot[2], *dttft = calloc((size_t)reqs, sizeof *dttft),
         *rtpot = calloc((size_t)reqs, sizeof *rtpot);
  for (int m = 0; m < 2; m++) {
    ttft[m] = calloc((size_t)reqs, sizeof **ttft);
    tpot[m] = calloc((size_t)reqs, sizeof **tpot);
  }
  int32_t *prompt = malloc((size_t)n_prompt * sizeof *prompt);
  // in-process: a replica of the same config, driven as the server's loop drives it
  server_config c = server_config_defaults();
  void *keep_r = NULL;
  sc_error err = {{0}};
  if (serve_deploy_config(&d, &c, &keep_r, &err) != SC_OK) {
    fprintf(stderr, "bench_serve: %s\n", err.msg);
    exit(2);
  }
  c.engine.clock = sc_clock_monotonic();
  replica *r = NULL;
  if (replica_new(&c.replicas, &c.engine, 0, &r, &err) != SC_OK) {
    fprintf(stderr, "bench_serve: %s\n", err.msg);
    exit(3);
  }
  // through serve
  void *keep_s = NULL;
  int port = 0;
  server *s = start(d, 64, 256, &keep_s, &port);
  struct curl_slist *hl = curl_slist_append(NULL, "Content-Type: application/json");
  char *body = malloc((size_t)n_prompt * 8 + 256);
  uint64_t *t = malloc((size_t)n_out * sizeof *t);
  for (int k = -1; k < reqs; k++) { // k = -1: warm-up of both
    prompt_ids(prompt, n_prompt, k + 1);
    double a[2] = {0, 0}, b[2] = {0, 0};
    for (int o = 0; o < 2; o++) {
      if ((o ^ (k & 1)) == 0)
        run_in_process(r, (uint64_t)(k + 1), prompt, n_prompt, n_out, t, &a[0], &b[0]);
      else
        run_served(port, hl, body, prompt, n_prompt, n_out, &a[1], &b[1]);
    }
    if (k < 0) continue;
    for (int m = 0; m < 2; m++) {
      ttft[m][k] = a[m];
      tpot[m][k] = b[m];
    }
    dttft[k] = a[1] - a[0];
    rtpot[k] = b[0] > 0 ? b[1] / b[0] - 1 : 0;
  }
  free(t);
  free(body);
  curl_slist_free_all(hl);
  server_free(s);
  serve_deploy_free(keep_s);
  replica_free(r);
  serve_deploy_free(keep_r);
  double x0 = median(ttft[0], reqs), x1 = median(ttft[1], reqs);
  double y0 = median(tpot[0], reqs), y1 = median(tpot[1], reqs);
  printf("overhead: llama-small tp1 real cpu, %d requests, each in-process and served in turn, "
         "prompt %d, %d tokens, %d threads\n\n",
         reqs, n_prompt, n_out, threads);
  printf("| path | TTFT p50 ms | TPOT median ms |\n|---|---:|---:|\n");
  printf("| in-process replica | %.3f | %.3f |\n", x0, y0);
  printf("| through serve (HTTP, SSE) | %.3f | %.3f |\n", x1, y1);
  printf("| added (difference of medians) | %+.3f ms | %+.2f%% |\n", x1 - x0, (y1 / y0 - 1) * 100);
  printf("| added (median of pairs) | %+.3f ms | %+.2f%% |\n", median(dttft, reqs),
         median(rtpot, reqs) * 100);
  for (int m = 0; m < 2; m++) {
    free(ttft[m]);
    free(tpot[m]);
  }
  free(dttft);
  free(rtpot);
  free(prompt);
}

// --- capacity
// GET /metrics into a temporary file (rewound; the caller closes it).
static FILE *scrape(int port) {
  CURL *c = curl_easy_init();
  char url[128];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/metrics", port);
  FILE *f = tmpfile();
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
  curl_easy_perform(c);
  curl_easy_cleanup(c);
  rewind(f);
  return f;
}

// The value of the last line of f starting with prefix (-1: none).
static double metric_in(FILE *f, const char *prefix) {
  rewind(f);
  char line[512];
  double v = -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, prefix, strlen(prefix))) v = atof(strrchr(line, ' ') + 1);
  return v;
}

// The two per-step histograms (lateness, handout) at one moment: count and cumulative buckets.
static const char *const snap_les[] = {"0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.01", "0.1"};
enum { N_LES = sizeof snap_les / sizeof *snap_les };
typedef struct hist_snap {
  double count[2], le[2][N_LES];
} hist_snap;
static const char *const snap_names[2] = {"lateness", "handout"};

static void snap_take(int port, hist_snap *h) {
  FILE *f = scrape(port); // one scrape: every figure of the snapshot from the same moment
  for (int k = 0; k < 2; k++) {
    char name[160];
    snprintf(name, sizeof name, "shardcheck:sim_step_%s_seconds_count", snap_names[k]);
    h->count[k] = metric_in(f, name);
    for (int b = 0; b < N_LES; b++) {
      snprintf(name, sizeof name, "shardcheck:sim_step_%s_seconds_bucket{le=\"%s\"",
               snap_names[k], snap_les[b]);
      h->le[k][b] = metric_in(f, name);
    }
  }
  fclose(f);
}

// Prints b - a (a NULL: b) as rows of the per-step table.
static void snap_print(const char *when, const hist_snap *a, const hist_snap *b) {
  for (int k = 0; k < 2; k++) {
    double cnt = b->count[k] - (a ? a->count[k] : 0);
    printf("| %s | %s | %.0f |", snap_names[k], when, cnt);
    for (int j = 0; j < N_LES; j++)
      printf(" %.2f%% |", cnt > 0 ? 100 * (b->le[k][j] - (a ? a->le[k][j] : 0)) / cnt : 0);
    printf("\n");
  }
}

typedef struct cli_loop {
  int ep;
  uint64_t due; // libcurl's timer, monotonic ns (0: none)
} cli_loop;

static int cli_timer(CURLM *m, long ms, void *ud) {
  (void)m;
  ((cli_loop *)ud)->due = ms < 0 ? 0 : sc_monotonic_ns() + (uint64_t)ms * 1000000u;
  return 0;
}

static void capacity(int n, int tokens, const char *model, int tp, int dp, int spread_ms) {
  serve_deploy d = {.model = model, .sim = true, .profile = "h100-sxm", .tp = tp, .pp = 1,
                    .dp = dp};
  void *keep = NULL;
  int port = 0;
  server *s = start(d, n + 64, n, &keep, &port);
  CURLM *m = curl_multi_init();
  curl_multi_setopt(m, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)n + 16);
  struct curl_slist *hl = curl_slist_append(NULL, "Content-Type: application/json");
  char body[256];
  snprintf(body, sizeof body,
           "{\"prompt\":\"capacity\",\"max_tokens\":%d,\"ignore_eos\":true,\"stream\":true}",
           tokens);
  stream *st = calloc((size_t)n, sizeof *st);
  CURL **e = calloc((size_t)n, sizeof *e);
  uint64_t t0 = sc_monotonic_ns();
  for (int i = 0; i < n; i++) e[i] = easy(port, body, &st[i], hl);
  // stream i opens at t0 + i * spread / n (spread 0: all at once)
  int opened = 0;
  uint64_t spread = (uint64_t)spread_ms * 1000000u;
  // the client's cost per chunk is what is ready, not what is open: epoll on libcurl's
  // sockets, curl_multi_socket_action on those that woke
  cli_loop cl = {.ep = epoll_create1(EPOLL_CLOEXEC)};
  curl_multi_setopt(m, CURLMOPT_SOCKETFUNCTION, replica_http_epoll_sock);
  curl_multi_setopt(m, CURLMOPT_SOCKETDATA, &cl.ep);
  curl_multi_setopt(m, CURLMOPT_TIMERFUNCTION, cli_timer);
  curl_multi_setopt(m, CURLMOPT_TIMERDATA, &cl);
  int running = n, peak = 0;
  struct epoll_event evs[256];
  hist_snap snaps[3];
  bool snapped[2] = {false, false};
  started = finished = 0;
  while (running || opened < n) {
    uint64_t now = sc_monotonic_ns();
    for (; opened < n && (!spread || t0 + (uint64_t)opened * spread / (uint64_t)n <= now); opened++) {
      st[opened].t0 = now;
      curl_multi_add_handle(m, e[opened]);
      cl.due = now; // libcurl starts it on the next timeout call
    }
    uint64_t next_open = opened < n ? t0 + (uint64_t)opened * spread / (uint64_t)n : 0;
    if (next_open && (!cl.due || next_open < cl.due)) cl.due = next_open;
    int wait_ms = !cl.due ? 50 : cl.due <= now ? 0 : (int)((cl.due - now + 999999) / 1000000);
    int k = epoll_wait(cl.ep, evs, 256, wait_ms);
    for (int i = 0; i < k; i++) {
      int fl = (evs[i].events & EPOLLIN ? CURL_CSELECT_IN : 0) |
               (evs[i].events & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
               (evs[i].events & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0);
      curl_multi_socket_action(m, evs[i].data.fd, fl, &running);
    }
    if (cl.due && sc_monotonic_ns() >= cl.due) {
      cl.due = 0;
      curl_multi_socket_action(m, CURL_SOCKET_TIMEOUT, 0, &running);
    }
    if (running > peak) peak = running;
    // the steady state: from every stream's first chunk to the first stream's last
    if (!snapped[0] && started == n) {
      snap_take(port, &snaps[0]);
      snapped[0] = true;
    }
    if (snapped[0] && !snapped[1] && finished > 0) {
      snap_take(port, &snaps[1]);
      snapped[1] = true;
    }
  }
  close(cl.ep);
  uint64_t t1 = sc_monotonic_ns();
  // chunks/s over the window in which every stream was open: from the last stream's first
  // chunk to the first stream's last chunk
  uint64_t all_open = 0, first_end = UINT64_MAX;
  long total = 0;
  int done = 0;
  for (int i = 0; i < n; i++) {
    total += st[i].n_t;
    done += st[i].done && st[i].n_t == tokens;
    if (st[i].n_t) {
      if (st[i].t[0] > all_open) all_open = st[i].t[0];
      if (st[i].t[st[i].n_t - 1] < first_end) first_end = st[i].t[st[i].n_t - 1];
    }
  }
  long in_window = 0;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < st[i].n_t; k++) in_window += st[i].t[k] >= all_open && st[i].t[k] <= first_end;
  printf("capacity: sim %s tp%d dp%d on h100-sxm, %d streams of %d tokens opened over %d ms "
         "from one libcurl multi handle (same process)\n\n",
         model, tp, dp, n, tokens, spread_ms);
  printf("| streams | completed | peak open | chunks | wall s | chunks/s (all open) | chunks/s "
         "(whole run) |\n");
  printf("|---:|---:|---:|---:|---:|---:|---:|\n");
  double win = first_end > all_open ? (double)(first_end - all_open) / 1e9 : 0;
  printf("| %d | %d | %d | %ld | %.2f | %.0f | %.0f |\n\n", n, done, peak, total,
         (double)(t1 - t0) / 1e9, win > 0 ? (double)in_window / win : 0,
         (double)total / ((double)(t1 - t0) / 1e9));
  // per step: how late it ended (the target) and how long its chunks took to hand out
  snap_take(port, &snaps[2]);
  printf("| per step | window | steps | <= 100 us | <= 250 us | <= 500 us | <= 1 ms | <= 2.5 ms "
         "| <= 10 ms | <= 100 ms |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  snap_print("whole run", NULL, &snaps[2]);
  if (snapped[1]) snap_print("all open", &snaps[0], &snaps[1]);
  for (int i = 0; i < n; i++) {
    curl_multi_remove_handle(m, e[i]);
    curl_easy_cleanup(e[i]);
    free(st[i].t);
  }
  curl_multi_cleanup(m);
  curl_slist_free_all(hl);
  free(st);
  free(e);
  server_free(s);
  serve_deploy_free(keep);
}

// --- hostile, flood, aborts: a server with serve's default flags
static server *start_defaults(const char *model, int tp, void **keep, int *port) {
  serve_deploy d = {.model = model, .sim = true, .profile = "h100-sxm", .tp = tp, .pp = 1, .dp = 1};
  server_config c = server_config_defaults();
  sc_error err = {{0}};
  if (serve_deploy_config(&d, &c, keep, &err) != SC_OK) {
    fprintf(stderr, "bench_serve: %s\n", err.msg);
    exit(2);
  }
  c.port = 0;
  c.served_name = d.model;
  server *s = NULL;
  if (server_new(&c, &s, &err) != SC_OK || server_wait_ready(s, &err) != SC_OK) {
    fprintf(stderr, "bench_serve: %s\n", err.msg);
    exit(3);
  }
  *port = server_port(s);
  return s;
}

static void raise_nofile(void) { // as `shardcheck serve` does
  struct rlimit r;
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

static int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(0x7f000001)};
  if (fd >= 0) (void)connect(fd, (struct sockaddr *)&a, sizeof a); // EINPROGRESS
  return fd;
}

// One blocking request on a fresh connection; its status (0: failed), its wall time in ms.
static long one_request(int port, const char *path, const char *body, double *ms) {
  CURL *c = curl_easy_init();
  char url[128];
  snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
  curl_easy_setopt(c, CURLOPT_URL, url);
  FILE *sink = fopen("/dev/null", "w");
  curl_easy_setopt(c, CURLOPT_WRITEDATA, sink);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
  struct curl_slist *hl = NULL;
  if (body) {
    hl = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
  }
  uint64_t t0 = sc_monotonic_ns();
  CURLcode rc = curl_easy_perform(c);
  *ms = (double)(sc_monotonic_ns() - t0) / 1e6;
  long status = 0;
  if (rc == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_cleanup(c);
  curl_slist_free_all(hl);
  fclose(sink);
  return status;
}

typedef struct attack {
  int port, n_slow, n_idle;
  volatile int stop;
  long reopened; // connections the server closed, opened again
} attack;

// Holds n_slow slowloris and n_idle idle connections open until stop: every second each slow
// one sends one more byte of a request it never finishes; a closed one is opened again.
static void *attacker(void *arg) {
  attack *a = arg;
  int n = a->n_slow + a->n_idle;
  int *fd = calloc((size_t)n, sizeof *fd);
  static const char half[] = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ";
  for (int i = 0; i < n; i++) fd[i] = -1;
  while (!a->stop) {
    for (int i = 0; i < n && !a->stop; i++) {
      if (fd[i] >= 0) { // closed by the server?
        char b[256];
        ssize_t r = recv(fd[i], b, sizeof b, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINPROGRESS &&
                       errno != ENOTCONN)) {
          close(fd[i]);
          fd[i] = -1;
          a->reopened++;
        }
      }
      if (fd[i] < 0) {
        fd[i] = connect_to(a->port);
        if (i < a->n_slow) (void)send(fd[i], half, sizeof half - 1, MSG_NOSIGNAL);
      } else if (i < a->n_slow) {
        (void)send(fd[i], "x", 1, MSG_NOSIGNAL);
      }
    }
    for (int k = 0; k < 10 && !a->stop; k++) usleep(100000);
  }
  for (int i = 0; i < n; i++)
    if (fd[i] >= 0) close(fd[i]);
  free(fd);
  return NULL;
}

static void hostile(int n_slow, int n_idle, int seconds) {
  raise_nofile();
  void *keep = NULL;
  int port = 0;
  server *s = start_defaults("llama3-70b", 4, &keep, &port);
  attack a = {.port = port, .n_slow = n_slow, .n_idle = n_idle};
  pthread_t t;
  pthread_create(&t, NULL, attacker, &a);
  sleep(2); // the connections are open
  enum { MAXP = 4096 };
  static double health[MAXP], comp[MAXP];
  int nh = 0, nc = 0, h_ok = 0, c_ok = 0;
  uint64_t end = sc_monotonic_ns() + (uint64_t)seconds * 1000000000ull;
  while (sc_monotonic_ns() < end && nh < MAXP) {
    double ms;
    h_ok += one_request(port, "/health", NULL, &ms) == 200;
    if (ms > 100)
      fprintf(stderr, "bench_serve: /health took %.1f ms at %.2f s\n", ms,
              (double)(sc_monotonic_ns() - (end - (uint64_t)seconds * 1000000000ull)) / 1e9);
    health[nh++] = ms;
    if (nh % 10 == 0 && nc < MAXP) {
      c_ok +=
          one_request(port, "/v1/completions",
                      "{\"prompt\":\"legit\",\"max_tokens\":16,\"ignore_eos\":true}", &ms) == 200;
      comp[nc++] = ms;
    }
    usleep(100000);
  }
  FILE *f = scrape(port);
  double timed_out = metric_in(f, "shardcheck:connections_timed_out_total");
  fclose(f);
  a.stop = 1;
  pthread_join(t, NULL);
  server_free(s);
  serve_deploy_free(keep);
  qsort(health, (size_t)nh, sizeof *health, cmp_d);
  qsort(comp, (size_t)nc, sizeof *comp, cmp_d);
  printf("hostile: sim llama3-70b tp4 on h100-sxm, default flags (--request-timeout 10); %d "
         "slowloris + %d idle connections held for %d s (reopened when closed)\n\n",
         n_slow, n_idle, seconds);
  printf("| what | count | ok | p50 ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|---:|\n");
  printf("| GET /health | %d | %d | %.2f | %.2f | %.2f |\n", nh, h_ok, health[nh / 2],
         health[(nh * 99) / 100], health[nh - 1]);
  printf("| completion, 16 tokens | %d | %d | %.2f | %.2f | %.2f |\n\n", nc, c_ok,
         nc ? comp[nc / 2] : 0, nc ? comp[(nc * 99) / 100] : 0, nc ? comp[nc - 1] : 0);
  printf("hostile connections closed by the server (request timeout): %.0f; reopened by the "
         "attacker: %ld\n",
         timed_out, a.reopened);
}

typedef struct flood_one {
  long status;
  bool done;
  char tail[16];
} flood_one;

static size_t flood_data(char *p, size_t sz, size_t n, void *ud) {
  flood_one *f = ud;
  size_t k = sz * n, keep = strlen(f->tail);
  char buf[16 + 64];
  size_t take = k < 64 ? k : 64;
  memcpy(buf, f->tail, keep);
  memcpy(buf + keep, p + k - take, take);
  buf[keep + take] = 0;
  if (strstr(buf, "[DONE]")) f->done = true;
  size_t tl = keep + take < 12 ? keep + take : 12;
  memcpy(f->tail, buf + keep + take - tl, tl);
  f->tail[tl] = 0;
  return k;
}

static void flood(int n, int tokens) {
  raise_nofile();
  void *keep = NULL;
  int port = 0;
  server *s = start_defaults("llama3-70b", 4, &keep, &port);
  CURLM *m = curl_multi_init();
  struct curl_slist *hl = curl_slist_append(NULL, "Content-Type: application/json");
  char body[256];
  snprintf(body, sizeof body,
           "{\"prompt\":\"flood\",\"max_tokens\":%d,\"ignore_eos\":true,\"stream\":true}", tokens);
  flood_one *st = calloc((size_t)n, sizeof *st);
  CURL **e = calloc((size_t)n, sizeof *e);
  char url[128];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/completions", port);
  uint64_t t0 = sc_monotonic_ns();
  for (int i = 0; i < n; i++)
    curl_multi_add_handle(m, e[i] = post(url, body, hl, flood_data, &st[i]));
  int running = n;
  while (running) {
    curl_multi_perform(m, &running);
    if (running) curl_multi_poll(m, NULL, 0, 100, NULL);
  }
  double wall = (double)(sc_monotonic_ns() - t0) / 1e9;
  int done = 0, refused = 0, other = 0;
  for (int i = 0; i < n; i++) {
    curl_easy_getinfo(e[i], CURLINFO_RESPONSE_CODE, &st[i].status);
    if (st[i].status == 200 && st[i].done)
      done++;
    else if (st[i].status == 503)
      refused++;
    else
      other++;
    curl_multi_remove_handle(m, e[i]);
    curl_easy_cleanup(e[i]);
  }
  FILE *f = scrape(port);
  double rejected = metric_in(f, "shardcheck:requests_rejected_total");
  fclose(f);
  curl_multi_cleanup(m);
  curl_slist_free_all(hl);
  free(st);
  free(e);
  server_free(s);
  serve_deploy_free(keep);
  printf("flood: sim llama3-70b tp4 on h100-sxm, default flags (--max-num-seqs 256, --max-pending "
         "4096, --max-connections 4416); %d streams of %d tokens at once\n\n",
         n, tokens);
  printf("| streams | completed | refused 503 | other | requests_rejected_total | wall s |\n"
         "|---:|---:|---:|---:|---:|---:|\n| %d | %d | %d | %d | %.0f | %.1f |\n",
         n, done, refused, other, rejected, wall);
}

static long rss_kb(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  char line[256];
  long v = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmRSS:", 6)) v = atol(line + 6);
  if (f) fclose(f);
  return v;
}

typedef struct abort_one {
  int chunks;
} abort_one;

static size_t abort_data(char *p, size_t sz, size_t n, void *ud) {
  abort_one *a = ud;
  for (const char *q = p; (q = memchr(q, '\n', (size_t)(p + sz * n - q))); q++) a->chunks++;
  return a->chunks >= 4 ? 0 : sz * n; // two chunks: "data: ...\n\n" twice
}

// The server of `aborts` in a child process of its own, so that its RSS is the server's alone
// (libcurl's buffers live in this one): the child writes its port to the pipe and serves until
// the pipe's other end closes.
static pid_t serve_child(int *port, int *ctl) {
  int up[2], down[2];
  if (pipe(up) || pipe(down)) exit(3);
  pid_t pid = fork();
  if (pid == 0) {
    close(up[0]);
    close(down[1]);
    void *keep = NULL;
    int p = 0;
    server *s = start_defaults("llama3-70b", 4, &keep, &p);
    if (write(up[1], &p, sizeof p) != sizeof p) _exit(3);
    char c;
    while (read(down[0], &c, 1) > 0) {
    } // until the parent closes it
    server_free(s);
    serve_deploy_free(keep);
    _exit(0);
  }
  close(up[1]);
  close(down[0]);
  if (read(up[0], port, sizeof *port) != sizeof *port) exit(3);
  close(up[0]);
  *ctl = down[1];
  return pid;
}

static void aborts(int rounds, int n) {
  raise_nofile();
  int port = 0, ctl = -1;
  pid_t child = serve_child(&port, &ctl);
  struct curl_slist *hl = curl_slist_append(NULL, "Content-Type: application/json");
  const char *body =
      "{\"prompt\":\"abort me\",\"max_tokens\":4000,\"ignore_eos\":true,\"stream\":true}";
  char url[128];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/completions", port);
  long rss[64];
  printf("aborts: sim llama3-70b tp4 on h100-sxm, default flags; %d rounds of %d streams, each "
         "aborted by its client after two chunks; RSS of the server's process 1.5 s after the "
         "round's last cancel\n\n",
         rounds, n);
  printf("| round | aborted | cancelled (server) | KV blocks used after | RSS kB |\n"
         "|---:|---:|---:|---:|---:|\n");
  for (int r = 0; r < rounds && r < 64; r++) {
    CURLM *m = curl_multi_init();
    abort_one *st = calloc((size_t)n, sizeof *st);
    CURL **e = calloc((size_t)n, sizeof *e);
    for (int i = 0; i < n; i++)
      curl_multi_add_handle(m, e[i] = post(url, body, hl, abort_data, &st[i]));
    int running = n, aborted = 0;
    while (running) {
      curl_multi_perform(m, &running);
      if (running) curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(m, &left)))
      aborted += msg->msg == CURLMSG_DONE && msg->data.result == CURLE_WRITE_ERROR;
    for (int i = 0; i < n; i++) {
      curl_multi_remove_handle(m, e[i]);
      curl_easy_cleanup(e[i]);
    }
    curl_multi_cleanup(m);
    free(st);
    free(e);
    double cancelled = 0, kv = -1;
    uint64_t dl = sc_monotonic_ns() + 30000000000ull; // the server has them all cancelled
    while (sc_monotonic_ns() < dl) {
      FILE *f = scrape(port);
      cancelled = metric_in(f, "shardcheck:requests_cancelled_total");
      kv = metric_in(f, "shardcheck:kv_blocks_used{replica=\"0\"}");
      fclose(f);
      if (cancelled >= (double)(r + 1) * n && kv == 0) break;
      usleep(20000);
    }
    usleep(1500000); // an idle server trims its heap within a second (server/loop.c)
    rss[r] = rss_kb(child);
    for (int k = 0; k < 10; k++) { // settled: two reads 200 ms apart within 1%
      usleep(200000);
      long again = rss_kb(child);
      bool same = labs(again - rss[r]) * 100 <= rss[r];
      rss[r] = again;
      if (same) break;
    }
    printf("| %d | %d | %.0f | %.0f | %ld |\n", r + 1, aborted, cancelled, kv, rss[r]);
  }
  printf("\nRSS after the last round / after the first: %.3f\n",
         (double)rss[rounds - 1] / (double)rss[0]);
  curl_slist_free_all(hl);
  close(ctl);
  waitpid(child, NULL, 0);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  curl_global_init(CURL_GLOBAL_DEFAULT);
  if (!strcmp(mode, "overhead")) {
    int reqs = argc > 2 ? atoi(argv[2]) : 20;
    overhead(reqs, 128, 32, 2);
  } else if (!strcmp(mode, "capacity")) {
    int n = argc > 2 ? atoi(argv[2]) : 5000, tokens = argc > 3 ? atoi(argv[3]) : 200;
    const char *model = argc > 4 ? argv[4] : "llama3-70b";
    int tp = argc > 5 ? atoi(argv[5]) : 4, dp = argc > 6 ? atoi(argv[6]) : 2;
    int spread_ms = argc > 7 ? atoi(argv[7]) : 0;
    capacity(n, tokens, model, tp, dp, spread_ms);
  } else if (!strcmp(mode, "hostile")) {
    hostile(argc > 2 ? atoi(argv[2]) : 2000, argc > 3 ? atoi(argv[3]) : 1000,
            argc > 4 ? atoi(argv[4]) : 30);
  } else if (!strcmp(mode, "flood")) {
    flood(argc > 2 ? atoi(argv[2]) : 5000, argc > 3 ? atoi(argv[3]) : 32);
  } else if (!strcmp(mode, "aborts")) {
    aborts(argc > 2 ? atoi(argv[2]) : 10, argc > 3 ? atoi(argv[3]) : 1000);
  } else {
    fprintf(stderr, "usage: bench_serve overhead [REQUESTS] | capacity [STREAMS] [TOKENS] [MODEL "
                    "TP DP] [SPREAD_MS]\n"
                    "       | hostile [SLOW] [IDLE] [SECONDS] | flood [STREAMS] [TOKENS] | aborts "
                    "[ROUNDS] [STREAMS]\n");
    return 2;
  }
  curl_global_cleanup();
  return 0;
}
