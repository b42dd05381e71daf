// The recorder's queue and writer thread (see recorder.h).
//
// The queue is a singly linked list of self-contained items (one malloc each: the row, then
// its token times, then its strings). The writer takes the whole list at once, writes it under
// the store mutex, and commits when a flush was asked for or the list was long.
#include "reports/recorder.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef enum item_kind { IT_REQUEST, IT_STEP, IT_SAMPLE } item_kind;

// Queued items that wake the writer. Below it the writer sleeps until a flush (periodic: the
// runner asks every second of its clock) or a drain: waking it for each of a simulated run's
// millions of rows cost a context switch per row on a 2-CPU host.
enum { WAKE_ITEMS = 512 };

typedef struct item {
  struct item *next;
  item_kind kind;
  union {
    store_request req;
    store_step step;
    store_device_sample sample;
  } u;
  int n_tokens;
  uint64_t *tokens; // (n_tokens) points into the same allocation
} item;

struct recorder {
  store *db;
  pthread_t thread;
  pthread_mutex_t mu;       // guards the queue and the flags
  pthread_cond_t cv;        // writer: work or stop
  pthread_cond_t idle_cv;   // drain: the writer finished a batch
  pthread_mutex_t store_mu; // held by whoever writes to the store
  item *head, *tail;
  bool stop, flush, busy;
  unsigned long queued, written; // items
  int pending;                   // items queued since the writer last took the list
  sc_status status;
  sc_error err;
};

static void push(recorder *r, item *it) {
  pthread_mutex_lock(&r->mu);
  if (r->status != SC_OK) { // rows after an error are dropped (rec_drain reports it)
    pthread_mutex_unlock(&r->mu);
    free(it);
    return;
  }
  it->next = NULL;
  if (r->tail)
    r->tail->next = it;
  else
    r->head = it;
  r->tail = it;
  r->queued++;
  if (++r->pending >= WAKE_ITEMS) pthread_cond_signal(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

static void fail_oom(recorder *r) {
  pthread_mutex_lock(&r->mu);
  if (r->status == SC_OK) r->status = sc_fail(&r->err, SC_OOM, "recorder: out of memory");
  pthread_mutex_unlock(&r->mu);
}

static size_t slen(const char *s) { return s ? strlen(s) + 1 : 0; }

// Copies s to *p and advances it; NULL stays NULL.
static const char *scopy(char **p, const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  memcpy(*p, s, n);
  const char *out = *p;
  *p += n;
  return out;
}

void rec_request(recorder *r, const store_request *q, const uint64_t *token_ns, int n_tokens) {
  size_t tok = sizeof(uint64_t) * (size_t)(n_tokens > 0 ? n_tokens : 0);
  size_t str = slen(q->class_name) + slen(q->status) + slen(q->reason) + slen(q->error);
  item *it = malloc(sizeof *it + tok + str);
  if (!it) {
    fail_oom(r);
    return;
  }
  it->kind = IT_REQUEST;
  it->u.req = *q;
  it->n_tokens = n_tokens;
  it->tokens = (uint64_t *)(it + 1);
  if (tok) memcpy(it->tokens, token_ns, tok);
  char *p = (char *)(it + 1) + tok;
  it->u.req.class_name = scopy(&p, q->class_name);
  it->u.req.status = scopy(&p, q->status);
  it->u.req.reason = scopy(&p, q->reason);
  it->u.req.error = scopy(&p, q->error);
  push(r, it);
}

void rec_step(recorder *r, const store_step *st) {
  item *it = malloc(sizeof *it);
  if (!it) {
    fail_oom(r);
    return;
  }
  it->kind = IT_STEP;
  it->u.step = *st;
  push(r, it);
}

void rec_sample(recorder *r, const store_device_sample *d) {
  item *it = malloc(sizeof *it);
  if (!it) {
    fail_oom(r);
    return;
  }
  it->kind = IT_SAMPLE;
  it->u.sample = *d;
  push(r, it);
}

void rec_flush(recorder *r) {
  pthread_mutex_lock(&r->mu);
  r->flush = true;
  pthread_cond_signal(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

static sc_status write_item(recorder *r, const item *it, sc_error *err) {
  switch (it->kind) {
  case IT_REQUEST: return store_request_add(r->db, &it->u.req, it->tokens, it->n_tokens, NULL, err);
  case IT_STEP: return store_step_add(r->db, &it->u.step, err); // batched by the writer
  case IT_SAMPLE: return store_device_sample_add(r->db, &it->u.sample, err);
  }
  return SC_OK;
}

static void *writer(void *arg) {
  recorder *r = arg;
  // Background work: yield the CPU to the event loop, whose token stamps must not wait on
  // SQLite (Linux: a thread's nice value is its own). Failure only costs that preference.
  if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10) != 0) {
  }
  pthread_mutex_lock(&r->mu);
  for (;;) {
    while (!(r->pending >= WAKE_ITEMS || r->flush || r->stop)) pthread_cond_wait(&r->cv, &r->mu);
    if (!r->head && !r->flush && r->stop) break;
    item *batch = r->head;
    r->head = r->tail = NULL;
    r->pending = 0;
    bool flush = r->flush;
    r->flush = false;
    r->busy = true;
    sc_status failed = r->status;
    pthread_mutex_unlock(&r->mu);

    sc_status s = SC_OK;
    sc_error e = {{0}};
    unsigned long n = 0;
    pthread_mutex_lock(&r->store_mu);
    const store_step *steps[64]; // consecutive step rows, written together
    item *pend[64];
    int n_steps = 0;
    for (item *it = batch, *next; it; it = next) {
      next = it->next;
      if (it->kind == IT_STEP) {
        steps[n_steps] = &it->u.step;
        pend[n_steps++] = it;
        n++;
        if (n_steps < 64 && next && next->kind == IT_STEP) continue;
        if (s == SC_OK && failed == SC_OK) s = store_steps_add(r->db, steps, n_steps, &e);
        for (int k = 0; k < n_steps; k++) free(pend[k]);
        n_steps = 0;
        continue;
      }
      if (s == SC_OK && failed == SC_OK) s = write_item(r, it, &e);
      free(it);
      n++;
    }
    if (s == SC_OK && failed == SC_OK && flush) s = store_flush(r->db, &e);
    pthread_mutex_unlock(&r->store_mu);

    pthread_mutex_lock(&r->mu);
    if (s != SC_OK && r->status == SC_OK) {
      r->status = s;
      r->err = e;
    }
    r->written += n;
    r->busy = false;
    pthread_cond_broadcast(&r->idle_cv);
  }
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

sc_status rec_new(store *db, recorder **out, sc_error *err) {
  *out = NULL;
  recorder *r = calloc(1, sizeof *r);
  if (!r) return sc_fail(err, SC_OOM, "recorder: out of memory");
  r->db = db;
  pthread_mutex_init(&r->mu, NULL);
  pthread_mutex_init(&r->store_mu, NULL);
  pthread_cond_init(&r->cv, NULL);
  pthread_cond_init(&r->idle_cv, NULL);
  if (pthread_create(&r->thread, NULL, writer, r) != 0) {
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->store_mu);
    pthread_cond_destroy(&r->cv);
    pthread_cond_destroy(&r->idle_cv);
    free(r);
    return sc_fail(err, SC_OOM, "recorder: cannot start its thread");
  }
  *out = r;
  return SC_OK;
}

sc_status rec_drain(recorder *r, sc_error *err) {
  pthread_mutex_lock(&r->mu);
  r->flush = true;
  pthread_cond_signal(&r->cv);
  while (r->head || r->flush || r->busy) pthread_cond_wait(&r->idle_cv, &r->mu);
  sc_status s = r->status;
  if (s != SC_OK && err) *err = r->err;
  pthread_mutex_unlock(&r->mu);
  return s;
}

void rec_free(recorder *r) {
  if (!r) return;
  rec_drain(r, NULL);
  pthread_mutex_lock(&r->mu);
  r->stop = true;
  pthread_cond_signal(&r->cv);
  pthread_mutex_unlock(&r->mu);
  pthread_join(r->thread, NULL);
  pthread_mutex_destroy(&r->mu);
  pthread_mutex_destroy(&r->store_mu);
  pthread_cond_destroy(&r->cv);
  pthread_cond_destroy(&r->idle_cv);
  free(r);
}

void rec_lock(recorder *r) { pthread_mutex_lock(&r->store_mu); }
void rec_unlock(recorder *r) { pthread_mutex_unlock(&r->store_mu); }
