// Harness overhead: the runner, router, recorder and SQLite against an engine stand-in that
// emits tokens with no compute, so everything measured is the harness's own cost.
//
// The stand-in is a replica (serving/replica.h) with a thread that, every --interval-us,
// emits one token for every request it holds (as one engine step would) and records when it
// emitted each. The runner stamps each token when it sees it; the difference between the two
// is how far the stamp a client would see is off. Prints a table; numbers go to
// docs/benchmarks.md with the machine.
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "serving/replica.h"
#include "reports/metrics.h"
#include "reports/store.h"
#include "runner/runner.h"
#include "scenarios/scenario.h"
#include "kernels/util.h"

// --- the stand-in replica
typedef struct standin_req {
  uint64_t key;
  int max_tokens, next;
} standin_req;

typedef struct standin {
  pthread_t thread;
  pthread_mutex_t mu;
  bool stop;
  uint64_t interval_ns;
  standin_req *active; // (n_active)
  int n_active, cap_active;
  replica_event *out;  // pending events
  size_t head_out, n_out, cap_out; // pending: [head_out, n_out)
  int pipe_r, pipe_w;
  bool signalled;
  engine_stats stats;
  int max_active;
  // emission times, shared by every replica of a run: emit[key * max_tokens + index]
  uint64_t *emit;
  int emit_stride;
  uint64_t n_emit_keys;
  uint64_t *slots; // (cap_slots) scratch: the emit[] slots of one step's tokens
  size_t cap_slots;
} standin;

static void push_ev(standin *s, const replica_event *ev) {
  if (s->n_out == s->cap_out && s->head_out > 0) {
    memmove(s->out, s->out + s->head_out, (s->n_out - s->head_out) * sizeof *s->out);
    s->n_out -= s->head_out;
    s->head_out = 0;
  }
  if (s->n_out == s->cap_out) {
    s->cap_out = s->cap_out ? s->cap_out * 2 : 4096;
    s->out = realloc(s->out, s->cap_out * sizeof *s->out);
    if (!s->out) abort();
  }
  s->out[s->n_out++] = *ev;
  if (!s->signalled) {
    char b = 1;
    if (write(s->pipe_w, &b, 1) < 0) { /* full pipe: the reader is awake anyway */
    }
    s->signalled = true;
  }
}

static void *standin_thread(void *arg) {
  standin *s = arg;
  uint64_t next = sc_monotonic_ns();
  for (;;) {
    next += s->interval_ns;
    uint64_t now = sc_monotonic_ns();
    if (next > now) usleep((useconds_t)((next - now) / 1000));
    pthread_mutex_lock(&s->mu);
    if (s->stop) {
      pthread_mutex_unlock(&s->mu);
      break;
    }
    int n = s->n_active;
    uint64_t t = sc_monotonic_ns();
    size_t pushed = 0; // events of this round: the last `pushed` in the outbox
    for (int i = 0; i < s->n_active;) {
      standin_req *q = &s->active[i];
      push_ev(s, &(replica_event){.kind = REPLICA_EV_TOKEN, .key = q->key, .index = q->next,
                                  .t_ns = t});
      pushed++;
      if (++q->next >= q->max_tokens) {
        push_ev(s, &(replica_event){.kind = REPLICA_EV_FINISHED, .key = q->key,
                                    .reason = FINISH_LENGTH, .n_generated = q->next, .t_ns = t});
        pushed++;
        s->active[i] = s->active[--s->n_active];
      } else {
        i++;
      }
    }
    if (n > 0)
      push_ev(s, &(replica_event){.kind = REPLICA_EV_STEP, .t_ns = t,
                                  .step = {.t_start_ns = t, .duration_ns = 1, .n_seqs = n,
                                           .decode_tokens = n, .running = s->n_active,
                                           .kv_used = s->n_active, .kv_total = 1 << 20}});
    pushed += n > 0;
    s->stats.running = s->n_active;
    // The step's tokens become visible to the runner when the lock is released: that is
    // their emission time (as for an engine, whose tokens all appear at the end of a step).
    // Which tokens they were is noted under the lock; their times are written after it, so
    // the benchmark's own bookkeeping (random writes into a large array, first-touch page
    // faults when a wave of new requests gets its first tokens: 1.5-6.5 ms, measured) never
    // holds up the runner's pull.
    if (s->cap_slots < pushed) {
      s->cap_slots = pushed * 2;
      s->slots = realloc(s->slots, s->cap_slots * sizeof *s->slots);
      if (!s->slots) abort();
    }
    size_t n_slots = 0;
    for (size_t k = s->n_out - pushed; k < s->n_out; k++) {
      const replica_event *ev = &s->out[k];
      if (ev->kind == REPLICA_EV_TOKEN && ev->key < s->n_emit_keys && ev->index < s->emit_stride)
        s->slots[n_slots++] = ev->key * (uint64_t)s->emit_stride + (uint64_t)ev->index;
    }
    uint64_t te = sc_monotonic_ns();
    pthread_mutex_unlock(&s->mu);
    for (size_t k = 0; k < n_slots; k++) s->emit[s->slots[k]] = te;
  }
  return NULL;
}

static sc_status sti_submit(void *ctx, uint64_t key, const engine_request *r, sc_error *err) {
  standin *s = ctx;
  pthread_mutex_lock(&s->mu);
  if (s->n_active == s->cap_active) {
    s->cap_active = s->cap_active ? s->cap_active * 2 : 1024;
    s->active = realloc(s->active, (size_t)s->cap_active * sizeof *s->active);
    if (!s->active) abort();
  }
  s->active[s->n_active++] = (standin_req){.key = key, .max_tokens = r->max_tokens};
  if (s->n_active > s->max_active) s->max_active = s->n_active;
  pthread_mutex_unlock(&s->mu);
  return SC_OK;
}

static void sti_cancel(void *ctx, uint64_t key) {
  standin *s = ctx;
  pthread_mutex_lock(&s->mu);
  for (int i = 0; i < s->n_active; i++)
    if (s->active[i].key == key) {
      push_ev(s, &(replica_event){.kind = REPLICA_EV_FINISHED, .key = key,
                                  .reason = FINISH_CANCELLED, .t_ns = sc_monotonic_ns()});
      s->active[i] = s->active[--s->n_active];
      break;
    }
  pthread_mutex_unlock(&s->mu);
}

static int sti_poll(void *ctx, replica_event *out, int cap) {
  standin *s = ctx;
  pthread_mutex_lock(&s->mu);
  size_t left = s->n_out - s->head_out;
  size_t n = left < (size_t)cap ? left : (size_t)cap;
  if (n) memcpy(out, s->out + s->head_out, n * sizeof *out);
  s->head_out += n;
  if (s->head_out == s->n_out) s->head_out = s->n_out = 0;
  if (s->n_out == 0 && s->signalled) {
    char buf[64];
    while (read(s->pipe_r, buf, sizeof buf) > 0) {
    }
    s->signalled = false;
  }
  pthread_mutex_unlock(&s->mu);
  return (int)n;
}

static int sti_fd(void *ctx) { return ((standin *)ctx)->pipe_r; }
static replica_health sti_health(void *ctx) { return REPLICA_HEALTHY; }
static void sti_admit(void *ctx, bool a) {}
static void sti_stats(void *ctx, engine_stats *out) {
  standin *s = ctx;
  pthread_mutex_lock(&s->mu);
  *out = s->stats;
  pthread_mutex_unlock(&s->mu);
}
static sc_status sti_mem(void *ctx, int r, size_t *used, size_t *total) {
  *used = 0;
  *total = 1;
  return SC_OK;
}
static const char *sti_error(void *ctx) { return ""; }

static int g_max_active;

static void sti_free(void *ctx) {
  standin *s = ctx;
  pthread_mutex_lock(&s->mu);
  s->stop = true;
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  if (s->max_active > g_max_active) g_max_active = s->max_active;
  close(s->pipe_r);
  close(s->pipe_w);
  free(s->active);
  free(s->out);
  free(s->slots);
  free(s);
}

static const replica_i standin_i = {.submit = sti_submit, .cancel = sti_cancel, .poll = sti_poll,
                                    .wait_fd = sti_fd, .health = sti_health,
                                    .set_admitting = sti_admit, .stats = sti_stats,
                                    .rank_mem = sti_mem, .error = sti_error, .free = sti_free};

typedef struct bench_cfg {
  uint64_t interval_ns;
  uint64_t *emit;
  int stride;
  uint64_t n_keys;
} bench_cfg;

static sc_status make_standin(void *ud, const engine_config *cfg, int index, replica **out,
                              sc_error *err) {
  bench_cfg *b = ud;
  standin *s = calloc(1, sizeof *s);
  replica *r = calloc(1, sizeof *r);
  int fds[2];
  if (!s || !r || pipe(fds) != 0) abort();
  for (int i = 0; i < 2; i++) fcntl(fds[i], F_SETFL, O_NONBLOCK);
  s->pipe_r = fds[0];
  s->pipe_w = fds[1];
  s->interval_ns = b->interval_ns;
  s->emit = b->emit;
  s->emit_stride = b->stride;
  s->n_emit_keys = b->n_keys;
  pthread_mutex_init(&s->mu, NULL);
  pthread_create(&s->thread, NULL, standin_thread, s);
  *r = (replica){.i = &standin_i, .ctx = s, .index = index, .n_ranks = 1};
  *out = r;
  return SC_OK;
}

int main(int argc, char **argv) {
  int streams = 5000, requests = 20000, tokens = 100, dp = 1;
  long interval_us = 20000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--streams")) streams = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--requests")) requests = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--tokens")) tokens = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--interval-us")) interval_us = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--dp")) dp = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "usage: bench_harness [--streams N] [--requests N] [--tokens N] "
                      "[--interval-us N] [--dp N]\n");
      return 2;
    }
  }
  char yaml[1024];
  snprintf(yaml, sizeof yaml,
           "name: harness-overhead\nmodel: llama-tiny\ndeployments: [{dp: %d}]\n"
           "workload:\n  prompts: [{input: 16, output: %d}]\n"
           "  phases: [{fixed: {requests: %d, concurrency: %d}}]\n"
           "limits: {request_timeout: 0}\n",
           dp, tokens, requests, streams);
  sc_error err = {{0}};
  scenario *s = NULL;
  if (scenario_parse(yaml, strlen(yaml), "bench", ".", &s, &err) != SC_OK) {
    fprintf(stderr, "bench_harness: %s\n", err.msg);
    return 1;
  }
  char path[] = "/tmp/sc-bench-harness-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return 1;
  close(fd);
  unlink(path);
  store *db = NULL;
  if (store_open(path, &db, &err) != SC_OK) {
    fprintf(stderr, "bench_harness: %s\n", err.msg);
    return 1;
  }
  bench_cfg b = {.interval_ns = (uint64_t)interval_us * 1000, .stride = tokens,
                 .n_keys = (uint64_t)requests};
  b.emit = calloc((size_t)requests * (size_t)tokens, sizeof *b.emit);
  runner_options o = runner_options_defaults();
  o.progress = RUNNER_PROGRESS_NONE;
  o.make_replica = make_standin;
  o.make_replica_ud = &b;
  runner_result res;
  uint64_t t0 = sc_monotonic_ns();
  if (runner_run(s, db, &o, &res, &err) != SC_OK) {
    fprintf(stderr, "bench_harness: %s\n", err.msg);
    return 1;
  }
  double wall = (double)(sc_monotonic_ns() - t0) / 1e9;
  // stamp error: when the runner saw each token minus when the stand-in emitted it
  sqlite3 *q = store_db(db);
  sqlite3_stmt *st;
  sqlite3_prepare_v2(q,
                     "SELECT r.seq, t.idx, t.t_ns FROM token t JOIN request r ON r.id = "
                     "t.request_id WHERE r.run_id = ?",
                     -1, &st, NULL);
  sqlite3_bind_int64(st, 1, res.run_id);
  size_t n = 0, cap = (size_t)requests * (size_t)tokens;
  uint64_t *d = malloc(cap * sizeof *d);
  while (sqlite3_step(st) == SQLITE_ROW && n < cap) {
    uint64_t seq = (uint64_t)sqlite3_column_int64(st, 0);
    uint64_t idx = (uint64_t)sqlite3_column_int64(st, 1);
    uint64_t seen = res.t0_ns + (uint64_t)sqlite3_column_int64(st, 2);
    uint64_t emitted = b.emit[seq * (uint64_t)tokens + idx];
    d[n++] = seen > emitted ? seen - emitted : 0;
  }
  sqlite3_finalize(st);
  qsort(d, n, sizeof *d, sc_cmp_u64);
  printf("| streams | requests | tokens | wall s | tokens/s | stamp p50 us | p99 us | max us |\n");
  printf("|---|---|---|---|---|---|---|---|\n");
  printf("| %d | %llu | %zu | %.2f | %.0f | %.0f | %.0f | %.0f |\n", g_max_active,
         (unsigned long long)res.requests, n, wall, n / wall, n ? d[n / 2] / 1e3 : 0,
         n ? d[(size_t)(0.99 * (double)(n - 1))] / 1e3 : 0, n ? d[n - 1] / 1e3 : 0);
  printf("target: >= 5000 concurrent streams, stamp error p99 < 1000 us\n");
  free(d);
  free(b.emit);
  store_close(db);
  unlink(path);
  scenario_free(s);
  return 0;
}
