// The recorder's queue and writer thread (see recorder.h).
//
// The queue is a list of chunks, each a run of self-contained items (the row, then its token
// times, then its strings) packed one after another. The writer takes up to BATCH_CHUNKS of
// them at a time, writes them under the store mutex, commits when a flush was asked for, and
// hands the chunks back for reuse: a simulated run queues millions of step rows, and one
// malloc in the event loop and one free in the writer per row cost both threads more than the
// copy (the free of another thread's block waits on that thread's malloc arena).
#include "reports/recorder.h"

#include <pthread.h>
#include <stdalign.h>
#include <stdbool.h>
#include <stddef.h>
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

// A chunk's bytes (an item larger than this gets a chunk of its own size); the empty chunks
// kept for reuse; the chunks the writer takes at most at once (so that written ones come back
// while it works through a backlog); and the bytes queued at most, past which a new row waits
// for the writer. A simulation makes rows faster than SQLite takes them (an hour of
// dp=4 serving: 1.6 s against 3.1 s), and a long one would otherwise queue gigabytes; a real
// run's rows come far slower than the writer's pace.
enum { CHUNK_BYTES = 64 * 1024, SPARE_CHUNKS = 64, BATCH_CHUNKS = 32 };

// Step rows handed to the store at once: one step_block row when they are of one deployment.
enum { STEP_RUN = 256 };
#define MAX_QUEUED_BYTES ((size_t)64 << 20)

typedef struct item {
  item_kind kind;
  uint32_t size; // bytes from this item to the next in its chunk
  union {
    store_request req;
    store_step step;
    store_device_sample sample;
  } u;
  int n_tokens;
  uint64_t *tokens; // (n_tokens) points into the same item
} item;

typedef struct chunk {
  struct chunk *next;
  size_t cap, used; // bytes of data
  alignas(max_align_t) unsigned char data[];
} chunk;

struct recorder {
  store *db;
  pthread_t thread;
  pthread_mutex_t mu;       // guards the queue, the spare chunks and the flags
  pthread_cond_t cv;        // writer: work or stop
  pthread_cond_t idle_cv;   // drain: the writer finished a batch
  pthread_cond_t space_cv;  // a row waiting for room: the queue is down to half its bound
  pthread_mutex_t store_mu; // held by whoever writes to the store
  chunk *head, *tail;       // full chunks, in queue order
  chunk *cur;               // the chunk being filled, after them
  chunk *spare;             // empty chunks of CHUNK_BYTES
  int n_spare;
  int n_waiting;                 // rows waiting on space_cv
  size_t live_bytes, peak_bytes; // bytes of the chunks queued, being filled or being written,
                                 // now and at most
  bool stop, flush, busy;
  int pending; // items queued since the writer last took the whole list
  sc_status status;
  sc_error err;
};

static size_t round_up(size_t n) {
  size_t a = alignof(max_align_t);
  return (n + a - 1) / a * a;
}

// Room for an item of size bytes at the end of the queue, or NULL (a write error before, which
// drops the row, or out of memory, which is kept). Called with mu held.
static item *reserve(recorder *r, size_t size) {
  if (r->status != SC_OK) return NULL; // rows after an error are dropped (rec_drain reports it)
  size = round_up(size);
  if (size > UINT32_MAX) {
    r->status = sc_fail(&r->err, SC_OOM, "recorder: a row of %zu bytes", size);
    return NULL;
  }
  if (!r->cur || r->cur->cap - r->cur->used < size) {
    // Waits until the writer has taken the queue down to half: waking at every batch it writes
    // would put the two threads in lockstep (and on one CPU, at times).
    while (r->live_bytes >= MAX_QUEUED_BYTES && r->status == SC_OK) {
      pthread_cond_signal(&r->cv);
      r->n_waiting++;
      pthread_cond_wait(&r->space_cv, &r->mu);
      r->n_waiting--;
    }
    if (r->status != SC_OK) return NULL; // the writer failed meanwhile
    chunk *c;
    if (size <= CHUNK_BYTES && r->spare) {
      c = r->spare;
      r->spare = c->next;
      r->n_spare--;
    } else {
      size_t cap = size > CHUNK_BYTES ? size : CHUNK_BYTES;
      c = malloc(sizeof *c + cap);
      if (!c) {
        r->status = sc_fail(&r->err, SC_OOM, "recorder: out of memory");
        return NULL;
      }
      c->cap = cap;
    }
    r->live_bytes += c->cap;
    if (r->live_bytes > r->peak_bytes) r->peak_bytes = r->live_bytes;
    c->next = NULL;
    c->used = 0;
    if (r->cur) {
      if (r->tail)
        r->tail->next = r->cur;
      else
        r->head = r->cur;
      r->tail = r->cur;
    }
    r->cur = c;
  }
  item *it = (item *)(r->cur->data + r->cur->used);
  r->cur->used += size;
  it->size = (uint32_t)size;
  return it;
}

// The item filled in: wakes the writer when enough wait. Called with mu held.
static void commit(recorder *r) {
  if (++r->pending >= WAKE_ITEMS) pthread_cond_signal(&r->cv);
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
  pthread_mutex_lock(&r->mu);
  item *it = reserve(r, sizeof *it + tok + str);
  if (it) {
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
    commit(r);
  }
  pthread_mutex_unlock(&r->mu);
}

// Queues a row of fixed size (a step or a sample: `bytes` of it copied into the item's union).
static void push_row(recorder *r, item_kind kind, const void *row, size_t bytes) {
  pthread_mutex_lock(&r->mu);
  item *it = reserve(r, sizeof *it);
  if (it) {
    it->kind = kind;
    memcpy(&it->u, row, bytes);
    commit(r);
  }
  pthread_mutex_unlock(&r->mu);
}

void rec_step(recorder *r, const store_step *st) { push_row(r, IT_STEP, st, sizeof *st); }

void rec_sample(recorder *r, const store_device_sample *d) { push_row(r, IT_SAMPLE, d, sizeof *d); }

void rec_flush(recorder *r) {
  pthread_mutex_lock(&r->mu);
  r->flush = true;
  pthread_cond_signal(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

static sc_status write_item(recorder *r, const item *it, sc_error *err) {
  switch (it->kind) {
  case IT_REQUEST: return store_request_add(r->db, &it->u.req, it->tokens, it->n_tokens, NULL, err);
  case IT_STEP: break; // written in runs by write_chunks
  case IT_SAMPLE: return store_device_sample_add(r->db, &it->u.sample, err);
  }
  return SC_OK;
}

// Writes the chunks' items while *s is SC_OK: requests and samples as they come, step rows
// STEP_RUN at a time (store_steps_add makes a step_block row of each run of one deployment's).
// Holding steps back past a request changes no id: each table numbers its own rows in the order
// they are written, and the batch is written whole before the writer commits.
static void write_chunks(recorder *r, chunk *list, sc_status *s, sc_error *e) {
  const store_step *steps[STEP_RUN];
  int n_steps = 0;
  for (chunk *c = list; c; c = c->next)
    for (size_t off = 0; off < c->used;) {
      const item *it = (const item *)(c->data + off);
      off += it->size;
      if (it->kind != IT_STEP) {
        if (*s == SC_OK) *s = write_item(r, it, e);
        continue;
      }
      steps[n_steps++] = &it->u.step;
      if (n_steps < STEP_RUN) continue;
      if (*s == SC_OK) *s = store_steps_add(r->db, steps, n_steps, e);
      n_steps = 0;
    }
  if (n_steps && *s == SC_OK) *s = store_steps_add(r->db, steps, n_steps, e);
}

// Keeps up to SPARE_CHUNKS of the written chunks for reuse. Called with mu held.
static void recycle(recorder *r, chunk *list) {
  for (chunk *c = list, *next; c; c = next) {
    next = c->next;
    r->live_bytes -= c->cap;
    if (c->cap == CHUNK_BYTES && r->n_spare < SPARE_CHUNKS) {
      c->next = r->spare;
      r->spare = c;
      r->n_spare++;
    } else {
      free(c);
    }
  }
  if (r->n_waiting && (r->live_bytes <= MAX_QUEUED_BYTES / 2 || r->status != SC_OK))
    pthread_cond_broadcast(&r->space_cv);
}

static void free_chunks(chunk *list) {
  for (chunk *c = list, *next; c; c = next) {
    next = c->next;
    free(c);
  }
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
    if (!r->head && !r->cur && !r->flush && r->stop) break;
    // Up to BATCH_CHUNKS full chunks; when they are all there are, the chunk being filled goes
    // too (the next row starts another).
    chunk *batch = r->head, *last = r->head;
    for (int k = 1; last && last->next && k < BATCH_CHUNKS; k++) last = last->next;
    bool whole = !last || !last->next;
    if (!whole) {
      r->head = last->next;
      last->next = NULL;
      r->pending = WAKE_ITEMS; // more to take after this batch
    } else {
      if (r->cur) {
        if (last)
          last->next = r->cur;
        else
          batch = r->cur;
        r->cur = NULL;
      }
      r->head = r->tail = NULL;
      r->pending = 0;
    }
    bool flush = r->flush; // a flush asked for commits every batch until the queue is empty
    if (whole) r->flush = false;
    r->busy = true;
    sc_status failed = r->status;
    pthread_mutex_unlock(&r->mu);

    sc_status s = failed;
    sc_error e = {{0}};
    pthread_mutex_lock(&r->store_mu);
    write_chunks(r, batch, &s, &e);
    if (s == SC_OK && flush) s = store_flush(r->db, &e);
    pthread_mutex_unlock(&r->store_mu);

    pthread_mutex_lock(&r->mu);
    if (s != SC_OK && failed == SC_OK && r->status == SC_OK) {
      r->status = s;
      r->err = e;
    }
    recycle(r, batch);
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
  pthread_cond_init(&r->space_cv, NULL);
  if (pthread_create(&r->thread, NULL, writer, r) != 0) {
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->store_mu);
    pthread_cond_destroy(&r->cv);
    pthread_cond_destroy(&r->idle_cv);
    pthread_cond_destroy(&r->space_cv);
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
  while (r->head || r->cur || r->flush || r->busy) pthread_cond_wait(&r->idle_cv, &r->mu);
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
  free_chunks(r->head);
  free_chunks(r->cur);
  free_chunks(r->spare);
  pthread_mutex_destroy(&r->mu);
  pthread_mutex_destroy(&r->store_mu);
  pthread_cond_destroy(&r->cv);
  pthread_cond_destroy(&r->idle_cv);
  pthread_cond_destroy(&r->space_cv);
  free(r);
}

void rec_lock(recorder *r) { pthread_mutex_lock(&r->store_mu); }
void rec_unlock(recorder *r) { pthread_mutex_unlock(&r->store_mu); }

size_t rec_queue_peak_bytes(recorder *r) {
  pthread_mutex_lock(&r->mu);
  size_t n = r->peak_bytes;
  pthread_mutex_unlock(&r->mu);
  return n;
}
