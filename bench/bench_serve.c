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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    s->t[s->n_t++] = now;
  }
  if (strstr(buf, "[DONE]")) s->done = true;
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

static void overhead(int reqs, int n_prompt, int n_out, int threads) {
  serve_deploy d = {.model = "llama-small", .tp = 1, .pp = 1, .dp = 1, .threads = threads};
  double *ttft[2], *tpot[2];
  for (int m = 0; m < 2; m++) {
    ttft[m] = calloc((size_t)reqs, sizeof **ttft);
    tpot[m] = calloc((size_t)reqs, sizeof **tpot);
  }
  int32_t *prompt = malloc((size_t)n_prompt * sizeof *prompt);
  // in-process: a replica of the same config, driven as the server's loop drives it
  {
    server_config c = server_config_defaults();
    void *keep = NULL;
    sc_error err = {{0}};
    if (serve_deploy_config(&d, &c, &keep, &err) != SC_OK) {
      fprintf(stderr, "bench_serve: %s\n", err.msg);
      exit(2);
    }
    c.engine.clock = sc_clock_monotonic();
    replica *r = NULL;
    if (replica_new(&c.replicas, &c.engine, 0, &r, &err) != SC_OK) {
      fprintf(stderr, "bench_serve: %s\n", err.msg);
      exit(3);
    }
    uint64_t *t = malloc((size_t)n_out * sizeof *t);
    for (int k = -1; k < reqs; k++) { // k = -1: warm-up
      prompt_ids(prompt, n_prompt, k + 1);
      engine_request er = {.prompt = prompt,
                           .n_prompt = n_prompt,
                           .max_tokens = n_out,
                           .sampling = {.temperature = 0}};
      uint64_t t0 = sc_monotonic_ns();
      replica_submit(r, (uint64_t)(k + 1), &er, &err);
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
      if (k < 0) continue;
      ttft[0][k] = (double)(t[0] - t0) / 1e6;
      tpot[0][k] = (double)(t[got - 1] - t[0]) / 1e6 / (got - 1);
    }
    free(t);
    replica_free(r);
    serve_deploy_free(keep);
  }
  // through serve
  {
    void *keep = NULL;
    int port = 0;
    server *s = start(d, 64, 256, &keep, &port);
    struct curl_slist *hl = curl_slist_append(NULL, "Content-Type: application/json");
    char *body = malloc((size_t)n_prompt * 8 + 256);
    for (int k = -1; k < reqs; k++) {
      prompt_ids(prompt, n_prompt, k + 1);
      size_t len = (size_t)sprintf(body, "{\"prompt\":[");
      for (int i = 0; i < n_prompt; i++) len += (size_t)sprintf(body + len, "%s%d", i ? "," : "", prompt[i]);
      sprintf(body + len, "],\"max_tokens\":%d,\"ignore_eos\":true,\"temperature\":0,\"stream\":true}",
              n_out);
      stream st = {0};
      CURL *c = easy(port, body, &st, hl);
      st.t0 = sc_monotonic_ns();
      curl_easy_perform(c);
      curl_easy_cleanup(c);
      if (st.n_t != n_out) fprintf(stderr, "bench_serve: %d chunks, want %d\n", st.n_t, n_out);
      if (k >= 0 && st.n_t > 1) {
        ttft[1][k] = (double)(st.t[0] - st.t0) / 1e6;
        tpot[1][k] = (double)(st.t[st.n_t - 1] - st.t[0]) / 1e6 / (st.n_t - 1);
      }
      free(st.t);
    }
    free(body);
    curl_slist_free_all(hl);
    server_free(s);
    serve_deploy_free(keep);
  }
  double a = median(ttft[0], reqs), b = median(ttft[1], reqs);
  double x = median(tpot[0], reqs), y = median(tpot[1], reqs);
  printf("overhead: llama-small tp1 real cpu, %d requests one at a time, prompt %d, %d tokens, "
         "%d threads\n\n",
         reqs, n_prompt, n_out, threads);
  printf("| path | TTFT p50 ms | TPOT median ms |\n|---|---:|---:|\n");
  printf("| in-process replica | %.3f | %.3f |\n", a, x);
  printf("| through serve (HTTP, SSE) | %.3f | %.3f |\n", b, y);
  printf("| added | %+.3f ms | %+.2f%% |\n", b - a, (y / x - 1) * 100);
  for (int m = 0; m < 2; m++) {
    free(ttft[m]);
    free(tpot[m]);
  }
  free(prompt);
}

// --- capacity
static double metric_sum(int port, const char *prefix) {
  CURL *c = curl_easy_init();
  char url[128];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/metrics", port);
  stream dummy = {0};
  (void)dummy;
  FILE *f = tmpfile();
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
  curl_easy_perform(c);
  curl_easy_cleanup(c);
  rewind(f);
  char line[512];
  double v = -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, prefix, strlen(prefix))) v = atof(strrchr(line, ' ') + 1);
  fclose(f);
  return v;
}

static void capacity(int n, int tokens) {
  serve_deploy d = {.model = "llama3-70b", .sim = true, .profile = "h100-sxm", .tp = 4, .pp = 1,
                    .dp = 2};
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
  for (int i = 0; i < n; i++) {
    e[i] = easy(port, body, &st[i], hl);
    st[i].t0 = t0;
    curl_multi_add_handle(m, e[i]);
  }
  int running = 1, peak = 0;
  while (running) {
    curl_multi_perform(m, &running);
    if (running > peak) peak = running;
    if (running) curl_multi_poll(m, NULL, 0, 50, NULL);
  }
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
  double late_n = metric_sum(port, "shardcheck:sim_step_lateness_seconds_count");
  double le1ms = metric_sum(port, "shardcheck:sim_step_lateness_seconds_bucket{le=\"0.001\"");
  double le100us = metric_sum(port, "shardcheck:sim_step_lateness_seconds_bucket{le=\"0.0001\"");
  double le250us = metric_sum(port, "shardcheck:sim_step_lateness_seconds_bucket{le=\"0.00025\"");
  printf("capacity: sim llama3-70b tp4 dp2 on h100-sxm, %d streams of %d tokens from one "
         "libcurl multi handle (same process)\n\n",
         n, tokens);
  printf("| streams | completed | peak open | chunks | wall s | chunks/s (all open) | chunks/s "
         "(whole run) | steps | steps late <= 100 us | <= 250 us | <= 1 ms |\n");
  printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  double win = first_end > all_open ? (double)(first_end - all_open) / 1e9 : 0;
  printf("| %d | %d | %d | %ld | %.2f | %.0f | %.0f | %.0f | %.2f%% | %.2f%% | %.2f%% |\n", n, done,
         peak, total, (double)(t1 - t0) / 1e9, win > 0 ? (double)in_window / win : 0,
         (double)total / ((double)(t1 - t0) / 1e9), late_n, 100 * le100us / late_n,
         100 * le250us / late_n, 100 * le1ms / late_n);
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
    capacity(n, tokens);
  } else {
    fprintf(stderr, "usage: bench_serve overhead [REQUESTS] | capacity [STREAMS] [TOKENS]\n");
    return 2;
  }
  curl_global_cleanup();
  return 0;
}
