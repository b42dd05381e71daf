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
// Prints one table per mode; numbers go to docs/benchmarks.md with the machine.
#include <curl/curl.h>
#include <poll.h>
#include <sys/epoll.h>
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

static CURL *easy(int port, const char *body, stream *s, struct curl_slist *hl) {
  CURL *c = curl_easy_init();
  char url[128];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/completions", port);
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, s);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
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
  } else {
    fprintf(stderr, "usage: bench_serve overhead [REQUESTS] | capacity [STREAMS] [TOKENS] [MODEL TP DP] [SPREAD_MS]\n");
    return 2;
  }
  curl_global_cleanup();
  return 0;
}
