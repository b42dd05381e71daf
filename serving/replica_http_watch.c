// The HTTP replica's watch over its server, on the replica's thread: with a detect timeout, the
// launched server's exit and readiness probes against the timeout (a lost server makes the
// replica DEAD and fails its requests with replica_lost; a probe answering clears a suspect
// connection and reads the server's wall clock from its Date header); with a metrics URL, a
// scrape of /metrics every SCRAPE_NS (serving/prom.c reads it) kept as the latest figures,
// their peaks and busy scrapes added up for the runner's next read; a drained read (the KV
// leak) that first clears a prompt cache the server keeps in its slots (llama.cpp).
// Not here: the streams, the thread's loop and the vtable (serving/replica_http.c), launching
// and signalling the server (serving/launch.c).
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>

#include "serving/prom.h"
#include "serving/replica_http_impl.h"

// --- the server's end
// Declares the server lost (once): every request in flight fails with replica_lost.
static void declare_dead(hrep *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void declare_dead(hrep *h, const char *fmt, ...) {
  char why[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&h->mu);
  if (h->dead) {
    pthread_mutex_unlock(&h->mu);
    return;
  }
  h->dead = true;
  snprintf(h->dead_why, sizeof h->dead_why, "%s", why);
  pthread_mutex_unlock(&h->mu);
  for (int i = h->n_reqs - 1; i >= 0; i--) {
    hr_fail_req(h, h->reqs[i], REPLICA_FAIL_LOST, 0, "replica lost: %s", why);
    hr_drop_req(h, i);
  }
}

// --- readiness probes
static size_t discard(char *ptr, size_t size, size_t n, void *ud) {
  (void)ptr, (void)ud;
  return size * n;
}

static uint64_t probe_period(const hrep *h) {
  uint64_t p = h->detect_ns / 4;
  return p < 50000000ull ? 50000000ull : p > 500000000ull ? 500000000ull : p;
}

// The probe's headers: keeps the Date header (the server's wall clock, to the second).
static size_t probe_header(char *buf, size_t size, size_t n, void *ud) {
  hrep *h = ud;
  size_t len = size * n;
  if (len > 5 && !strncasecmp(buf, "date:", 5)) {
    char v[128];
    size_t k = len - 5 < sizeof v - 1 ? len - 5 : sizeof v - 1;
    memcpy(v, buf + 5, k);
    v[k] = 0;
    time_t t = curl_getdate(v, NULL);
    if (t > 0) h->probe_date = t;
  }
  return len;
}

static void start_probe(hrep *h) {
  if (!h->probe) {
    h->probe = curl_easy_init();
    if (!h->probe) return;
    long ms = (long)(h->detect_ns / 1000000ull);
    curl_easy_setopt(h->probe, CURLOPT_URL, h->ready_url);
    curl_easy_setopt(h->probe, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h->probe, CURLOPT_TIMEOUT_MS, ms < 200 ? 200L : ms);
    curl_easy_setopt(h->probe, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(h->probe, CURLOPT_HEADERFUNCTION, probe_header);
    curl_easy_setopt(h->probe, CURLOPT_HEADERDATA, h);
  }
  h->probe_date = 0;
  if (curl_multi_add_handle(h->sh[0].multi, h->probe) == CURLM_OK) h->probe_busy = true;
}

void hr_probe_done(hrep *h, CURLcode rc) {
  long code = 0;
  curl_easy_getinfo(h->probe, CURLINFO_RESPONSE_CODE, &code);
  curl_multi_remove_handle(h->sh[0].multi, h->probe);
  h->probe_busy = false;
  uint64_t now = sc_monotonic_ns();
  if (rc == CURLE_OK && code == 200) {
    h->probe_ok = now;
    // The server's wall clock minus ours: its Date header is floor(its time), so half a second
    // later is its time within +-0.5 s; rounded to whole seconds (clock jumps are whole).
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    double ours = (double)wall.tv_sec + (double)wall.tv_nsec / 1e9;
    pthread_mutex_lock(&h->mu);
    h->suspect = false;
    if (h->probe_date > 0) {
      h->skew_ns = (int64_t)llround((double)h->probe_date + 0.5 - ours) * 1000000000ll;
      h->have_skew = true;
    }
    pthread_mutex_unlock(&h->mu);
  }
  h->probe_next = now + probe_period(h);
}

// --- /metrics
// libcurl's write callback of a scrape: appends to the grow_buf ud, PROM_TEXT_MAX bytes at most.
static size_t grow_body(char *ptr, size_t size, size_t nmemb, void *ud) {
  grow_buf *b = ud;
  size_t n = size * nmemb;
  if (b->n + n > PROM_TEXT_MAX) return 0;
  char *p = realloc(b->p, b->n + n + 1);
  if (!p) return 0;
  memcpy(p + b->n, ptr, n);
  b->n += n;
  p[b->n] = 0;
  b->p = p;
  return n;
}

static void start_scrape(hrep *h) {
  if (!h->scrape) {
    h->scrape = curl_easy_init();
    if (!h->scrape) return;
    curl_easy_setopt(h->scrape, CURLOPT_URL, h->metrics_url);
    curl_easy_setopt(h->scrape, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h->scrape, CURLOPT_TIMEOUT_MS, 2000L);
    curl_easy_setopt(h->scrape, CURLOPT_WRITEFUNCTION, grow_body);
    curl_easy_setopt(h->scrape, CURLOPT_WRITEDATA, &h->scrape_text);
  }
  h->scrape_text.n = 0;
  if (curl_multi_add_handle(h->sh[0].multi, h->scrape) == CURLM_OK) h->scrape_busy = true;
}

// Keeps scrape m (from the thread's scrape or one now) as the latest: adds it to what the
// runner's next REPLICA_SM_LATEST read takes. A scrape that failed (m->have false) keeps why.
static void keep_scrape(hrep *h, replica_server_metrics *m) {
  pthread_mutex_lock(&h->mu);
  if (!m->have) {
    snprintf(h->sm.why, sizeof h->sm.why, "%s", m->why);
    h->sm.have = false;
    pthread_mutex_unlock(&h->mu);
    return;
  }
  replica_server_metrics acc = h->sm;
  m->n_scrapes = acc.n_scrapes + 1;
  m->n_busy = acc.n_busy + (m->running > 0);
  m->peak_running = fmax(acc.n_scrapes ? acc.peak_running : NAN, m->running);
  m->peak_waiting = fmax(acc.n_scrapes ? acc.peak_waiting : NAN, m->waiting);
  m->peak_kv = fmax(acc.n_scrapes ? acc.peak_kv : NAN, m->kv_usage);
  h->sm = *m;
  pthread_mutex_unlock(&h->mu);
}

// Why a scrape got nothing: the transfer's error, a status other than 200, or no known name.
static void scrape_failed(hrep *h, CURLcode rc, long code, replica_server_metrics *m) {
  *m = (replica_server_metrics){.running = NAN, .waiting = NAN, .kv_usage = NAN, .kv_blocks = NAN,
                                .peak_running = NAN, .peak_waiting = NAN, .peak_kv = NAN};
  if (rc != CURLE_OK)
    snprintf(m->why, sizeof m->why, "%.100s: %.90s", h->metrics_url, curl_easy_strerror(rc));
  else
    snprintf(m->why, sizeof m->why, "%.100s answered HTTP %ld", h->metrics_url, code);
}

void hr_scrape_done(hrep *h, CURLcode rc) {
  long code = 0;
  curl_easy_getinfo(h->scrape, CURLINFO_RESPONSE_CODE, &code);
  curl_multi_remove_handle(h->sh[0].multi, h->scrape);
  h->scrape_busy = false;
  h->scrape_next = sc_monotonic_ns() + SCRAPE_NS;
  replica_server_metrics m;
  if (rc != CURLE_OK || code != 200 || !h->scrape_text.p) {
    scrape_failed(h, rc, code, &m);
  } else if (prom_parse(h->scrape_text.p, &m)) {
    m.t_ns = now_ns(h);
  } else {
    char why[sizeof m.why];
    snprintf(why, sizeof why, "%s", m.why);
    snprintf(m.why, sizeof m.why, "%.60s: %.130s", h->metrics_url, why);
  }
  keep_scrape(h, &m);
}

// --- each turn of the thread
void hr_watch(hrep *h) {
  uint64_t now = sc_monotonic_ns();
  pthread_mutex_lock(&h->mu);
  bool on = h->watching && !h->dead;
  if (on && h->probe_reset) {
    h->probe_ok = h->probe_next = now;
    h->probe_reset = false;
  }
  pthread_mutex_unlock(&h->mu);
  if (!on) return;
  if (h->metrics_url && !h->scrape_busy && now >= h->scrape_next) start_scrape(h);
  if (!h->detect_ns) return;
  int st = 0;
  bool exited = false;
  pthread_mutex_lock(&h->lmu);
  if (h->launch) exited = launch_exited(h->launch, &st);
  pthread_mutex_unlock(&h->lmu);
  if (exited) {
    if (WIFSIGNALED(st))
      declare_dead(h, "its server was killed by signal %d", WTERMSIG(st));
    else
      declare_dead(h, "its server exited with status %d", WEXITSTATUS(st));
    return;
  }
  if (!h->probe_busy && now >= h->probe_next) start_probe(h);
  if (now > h->probe_ok + h->detect_ns)
    declare_dead(h, "%s unanswered for %.1f s", h->ready_url, (double)h->detect_ns / 1e9);
}

void hr_start_watching(hrep *h) {
  pthread_mutex_lock(&h->mu);
  h->watching = true;
  h->probe_reset = true;
  pthread_mutex_unlock(&h->mu);
  hr_wake(h);
}

// --- the figures, for the caller
// A body read into memory from url on the calling thread (post: an empty POST); the status in
// *code. False when the transfer failed (why says so).
static bool fetch_now(const char *url, bool post, grow_buf *b, long *code, char *why, size_t cap) {
  CURL *c = curl_easy_init();
  *code = 0;
  if (!c) {
    snprintf(why, cap, "out of memory");
    return false;
  }
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 2000L);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, grow_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
  if (post) curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
  CURLcode rc = curl_easy_perform(c);
  if (rc == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, code);
  else snprintf(why, cap, "%.100s: %.90s", url, curl_easy_strerror(rc));
  curl_easy_cleanup(c);
  return rc == CURLE_OK;
}

// A scrape now from the calling thread (blocks up to 2 s), kept as the latest.
static bool scrape_now(hrep *h, replica_server_metrics *out) {
  *out = (replica_server_metrics){.running = NAN, .waiting = NAN, .kv_usage = NAN,
                                  .kv_blocks = NAN, .peak_running = NAN, .peak_waiting = NAN,
                                  .peak_kv = NAN};
  if (!h->metrics_url) {
    snprintf(out->why, sizeof out->why, "no metrics URL (target.openai.metrics_path \"\")");
    return false;
  }
  grow_buf b = {0};
  long code = 0;
  char why[sizeof out->why] = "";
  bool ok = fetch_now(h->metrics_url, false, &b, &code, why, sizeof why);
  if (!ok) {
    snprintf(out->why, sizeof out->why, "%s", why);
  } else if (code != 200 || !b.p) {
    snprintf(out->why, sizeof out->why, "%.100s answered HTTP %ld", h->metrics_url, code);
    ok = false;
  } else if (!prom_parse(b.p, out)) {
    snprintf(why, sizeof why, "%s", out->why);
    snprintf(out->why, sizeof out->why, "%.60s: %.130s", h->metrics_url, why);
    ok = false;
  }
  free(b.p);
  if (!ok) return false;
  out->t_ns = now_ns(h);
  pthread_mutex_lock(&h->mu);
  replica_server_metrics acc = h->sm; // what the runner's sampling has not taken stays
  h->sm = *out;
  h->sm.n_scrapes = acc.n_scrapes;
  h->sm.n_busy = acc.n_busy;
  h->sm.peak_running = acc.peak_running;
  h->sm.peak_waiting = acc.peak_waiting;
  h->sm.peak_kv = acc.peak_kv;
  pthread_mutex_unlock(&h->mu);
  return true;
}

// The server's root URL ("http://host:port") from the metrics URL, into buf.
static void server_root(const hrep *h, char *buf, size_t cap) {
  snprintf(buf, cap, "%s", h->metrics_url);
  char *p = strstr(buf, "://");
  p = p ? strchr(p + 3, '/') : NULL;
  if (p) *p = 0;
}

// llama.cpp's slots keep their prompts' KV once a request ends: erases every slot's (GET
// /props says how many; POST /slots/ID?action=erase each, which the server takes when it was
// started with --slot-save-path). False with why when it cannot.
static bool erase_slots(hrep *h, char *why, size_t cap) {
  char root[1400], url[1500];
  server_root(h, root, sizeof root);
  snprintf(url, sizeof url, "%s/props", root);
  grow_buf b = {0};
  long code = 0;
  int n = -1;
  if (fetch_now(url, false, &b, &code, why, cap) && code == 200 && b.p) {
    json_t *j = json_loads(b.p, 0, NULL);
    json_t *t = j ? json_object_get(j, "total_slots") : NULL;
    if (json_is_integer(t)) n = (int)json_integer_value(t);
    json_decref(j);
  }
  free(b.p);
  if (n < 0) {
    if (!why[0]) snprintf(why, cap, "GET %.80s gave no total_slots (HTTP %ld)", url, code);
    return false;
  }
  for (int i = 0; i < n; i++) {
    snprintf(url, sizeof url, "%s/slots/%d?action=erase", root, i);
    grow_buf e = {0};
    bool ok = fetch_now(url, true, &e, &code, why, cap);
    free(e.p);
    if (!ok) return false;
    if (code != 200) {
      snprintf(why, cap, "POST /slots/%d?action=erase answered HTTP %ld (start llama-server "
               "with --slot-save-path)", i, code);
      return false;
    }
  }
  return true;
}

bool hr_server_metrics(void *ctx, replica_sm_when when, replica_server_metrics *out) {
  hrep *h = ctx;
  if (when == REPLICA_SM_LATEST) {
    pthread_mutex_lock(&h->mu);
    *out = h->sm;
    h->sm.n_scrapes = h->sm.n_busy = 0; // taken: the next read counts from here
    h->sm.peak_running = h->sm.peak_waiting = h->sm.peak_kv = NAN;
    pthread_mutex_unlock(&h->mu);
    if (!out->have && !out->why[0])
      snprintf(out->why, sizeof out->why, "%s",
               h->metrics_url ? "no scrape yet"
                              : "no metrics URL (target.openai.metrics_path \"\")");
    return out->have;
  }
  if (!scrape_now(h, out)) return false;
  if (when != REPLICA_SM_DRAINED) return true;
  const prom_server *ps = prom_server_named(out->server);
  if (!ps || ps->cache == PROM_CACHE_FREE) {
    out->beyond_cache = ps != NULL;
    if (!ps)
      snprintf(out->why, sizeof out->why, "a server whose KV cache shardcheck knows nothing of");
    return true;
  }
  char why[sizeof out->why] = "";
  if (!erase_slots(h, why, sizeof why)) {
    snprintf(out->why, sizeof out->why, "%s keeps its prompts' KV; clearing it failed: %.140s",
             ps->name, why);
    return true;
  }
  if (!scrape_now(h, out)) return false;
  out->beyond_cache = true;
  return true;
}
