// The step protocol between the processes of an MPI job that runs one replica (see
// exec_dist.h): orders from rank 0, answers and alarms back. Messages are plain bytes between
// processes of one build.
//
// An order is a header (dist_order) and, for a step, a body: the faults for the rank, then the
// batch: its header (dist_batch), a dist_seq per sequence, the draws when the step draws
// sampled tokens, every sequence's token ids, every sequence's block table (in that order, so
// each part is aligned where the receiver reads it in place). An answer is a
// dist_answer, then the picks (ids, then their logits) or the logits it announces.
#include "engine/exec_dist.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/clock.h"
#include "kernels/mpi.h"

enum { ORDER_STEP = 1, ORDER_QUIT = 2 };
enum { DIST_MAX_RANKS = 1024 }; // ranks of one job as processes (exec_dist_agree's array)
enum { BATCH_TOKENS = 1, BATCH_DRAWS = 2 };

typedef struct dist_order {
  uint32_t kind;     // ORDER_*
  uint32_t n_faults; // dist_fault entries first in the body
  uint64_t bytes;    // the body that follows (0: none)
} dist_order;

typedef struct dist_batch {
  int32_t n_seqs;
  int32_t n_want; // sampled rows (sequences with want_logits)
  uint32_t flags; // BATCH_*
  int32_t pad;
} dist_batch;

typedef struct dist_seq {
  int32_t start, n, n_blocks, want_logits;
} dist_seq;

typedef struct dist_answer {
  int32_t status;    // SC_OK (a failure is an alarm)
  int32_t n_picks;   // int32 ids then floats follow
  uint64_t n_logits; // floats follow
  uint64_t mem_used, mem_total;
} dist_answer;

typedef struct dist_alarm {
  int32_t status;
  char msg[500];
} dist_alarm;

struct exec_dist {
  int n_ranks, vocab;
  pthread_mutex_t mu; // guards the fault queue (faults come from any thread)
  dist_fault *queued; // (n_queued, cap_queued)
  int n_queued, cap_queued;
  unsigned char *buf; // (cap) an order being built or received
  size_t cap;
  // a follower's decoded step
  exec_batch batch;
  exec_seq *seqs; // (cap_seqs)
  int cap_seqs;
  float *logits; // (cap_logits) floats
  size_t cap_logits;
  int32_t *picks; // (cap_picks)
  int cap_picks;
  dist_fault *faults; // (cap_faults) of the current order
  int cap_faults;
};

// --- buffers

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return true;
  size_t c = *cap ? *cap : 16;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * elem);
  if (!q) return false;
  *p = q;
  *cap = c;
  return true;
}

static bool grow_int(void **p, int *cap, int need, size_t elem) {
  size_t c = (size_t)*cap;
  bool ok = grow(p, &c, (size_t)need, elem);
  *cap = (int)c;
  return ok;
}

sc_status exec_dist_new(int n_ranks, int vocab, exec_dist **out) {
  *out = NULL;
  exec_dist *d = calloc(1, sizeof *d);
  if (!d) return SC_OOM;
  d->n_ranks = n_ranks;
  d->vocab = vocab;
  pthread_mutex_init(&d->mu, NULL);
  *out = d;
  return SC_OK;
}

void exec_dist_free(exec_dist *d) {
  if (!d) return;
  pthread_mutex_destroy(&d->mu);
  free(d->queued);
  free(d->buf);
  free(d->seqs);
  free(d->logits);
  free(d->picks);
  free(d->faults);
  free(d);
}

// --- building

sc_status exec_dist_agree(sc_status s, sc_error *err) {
  int n = sc_mpi_size(), me = sc_mpi_rank();
  if (n > DIST_MAX_RANKS)
    return sc_fail(err, SC_INVALID,
                   "executor: at most %d ranks as "
                   "processes, not %d",
                   DIST_MAX_RANKS, n);
  int32_t st[DIST_MAX_RANKS] = {0}, mine = (int32_t)s, first = -1;
  sc_error jerr = {{0}};
  // every rank takes part in each collective, whatever happened before
  sc_status js = sc_mpi_gather(&mine, st, sizeof mine, 0, 0, &jerr);
  for (int r = 0; js == SC_OK && me == 0 && r < n && first < 0; r++)
    if (st[r] != SC_OK) first = r;
  if (js == SC_OK) js = sc_mpi_bcast(&first, sizeof first, 0, 0, &jerr);
  if (js != SC_OK) return sc_fail(err, js, "%s", jerr.msg);
  if (first < 0) return SC_OK;
  dist_alarm a = {.status = mine}; // the first failing rank's, sent from it
  if (me == first)
    snprintf(a.msg, sizeof a.msg, "%.499s", err && err->msg[0] ? err->msg : sc_status_name(s));
  js = sc_mpi_bcast(&a, sizeof a, first, 0, &jerr);
  if (js != SC_OK) return sc_fail(err, js, "%s", jerr.msg);
  if (me == first) return s; // err holds it already
  a.msg[sizeof a.msg - 1] = 0;
  return sc_fail(err, (sc_status)a.status, "rank %d: %s", first, a.msg);
}

// --- rank 0

void exec_dist_queue_fault(exec_dist *d, const dist_fault *f) {
  pthread_mutex_lock(&d->mu);
  if (grow_int((void **)&d->queued, &d->cap_queued, d->n_queued + 1, sizeof *d->queued))
    d->queued[d->n_queued++] = *f;
  pthread_mutex_unlock(&d->mu);
}

// Appends n bytes at *off of d->buf (grown as needed). False when memory ran out.
static bool put(exec_dist *d, size_t *off, const void *p, size_t n) {
  if (!grow((void **)&d->buf, &d->cap, *off + n, 1)) return false;
  if (n) memcpy(d->buf + *off, p, n);
  *off += n;
  return true;
}

// The batch's encoding from d->buf[*off] on.
static bool put_batch(exec_dist *d, size_t *off, const exec_batch *b) {
  dist_batch h = {.n_seqs = b->n_seqs,
                  .flags = (b->tokens ? BATCH_TOKENS : 0u) | (b->draws ? BATCH_DRAWS : 0u)};
  for (int i = 0; i < b->n_seqs; i++) h.n_want += b->seqs[i].want_logits;
  bool ok = put(d, off, &h, sizeof h);
  for (int i = 0; ok && i < b->n_seqs; i++) {
    const exec_seq *q = &b->seqs[i];
    dist_seq s = {
        .start = q->start, .n = q->n, .n_blocks = q->n_blocks, .want_logits = q->want_logits};
    ok = put(d, off, &s, sizeof s);
  }
  if (ok && b->draws) ok = put(d, off, b->draws, (size_t)h.n_want * sizeof *b->draws);
  for (int i = 0; ok && i < b->n_seqs; i++)
    ok = put(d, off, b->seqs[i].tokens, (size_t)b->seqs[i].n * sizeof(int32_t));
  for (int i = 0; ok && i < b->n_seqs; i++)
    ok = put(d, off, b->seqs[i].blocks, (size_t)b->seqs[i].n_blocks * sizeof(int32_t));
  return ok;
}

sc_status exec_dist_send_step(exec_dist *d, comm *world, const exec_batch *b, sc_error *err) {
  pthread_mutex_lock(&d->mu);
  dist_fault *q = d->queued; // taken: new faults queue for the next step
  int nq = d->n_queued;
  d->queued = NULL;
  d->n_queued = d->cap_queued = 0;
  pthread_mutex_unlock(&d->mu);
  // the batch once, after a gap for each rank's faults
  size_t batch_at = 0;
  sc_status s = SC_OK;
  size_t off = 0;
  if (!put_batch(d, &off, b)) s = sc_fail(err, SC_OOM, "executor: out of memory for a step order");
  size_t batch_bytes = off;
  for (int r = 1; s == SC_OK && r < d->n_ranks; r++) {
    int mine = 0;
    for (int i = 0; i < nq; i++) mine += q[i].rank == r;
    size_t fault_bytes = (size_t)mine * sizeof(dist_fault);
    if (!grow((void **)&d->buf, &d->cap, batch_bytes + fault_bytes, 1)) {
      s = sc_fail(err, SC_OOM, "executor: out of memory for a step order");
      break;
    }
    // the body is [faults][batch]: move the batch up once, then write this rank's faults
    if (batch_at != fault_bytes) {
      memmove(d->buf + fault_bytes, d->buf + batch_at, batch_bytes);
      batch_at = fault_bytes;
    }
    size_t fo = 0;
    for (int i = 0; i < nq; i++)
      if (q[i].rank == r) {
        memcpy(d->buf + fo, &q[i], sizeof q[i]);
        fo += sizeof q[i];
      }
    dist_order o = {
        .kind = ORDER_STEP, .n_faults = (uint32_t)mine, .bytes = fault_bytes + batch_bytes};
    s = comm_send(world, &o, sizeof o, r);
    if (s == SC_OK) s = comm_send(world, d->buf, o.bytes, r);
    if (s != SC_OK)
      s = sc_fail(err, s, "executor: cannot send rank %d its step: %s", r, sc_status_name(s));
  }
  free(q);
  return s;
}

void exec_dist_send_quit(exec_dist *d, comm *world) {
  dist_order o = {.kind = ORDER_QUIT};
  for (int r = 1; r < d->n_ranks; r++) comm_send(world, &o, sizeof o, r);
}

bool exec_dist_take_alarm(comm *world, sc_status *s, sc_error *err) {
  dist_alarm a;
  int from = -1;
  if (comm_mpi_recv_alarm(world, &a, sizeof a, -1, &from) != SC_OK) return false;
  a.msg[sizeof a.msg - 1] = 0;
  *s = a.status != SC_OK ? (sc_status)a.status : SC_DEVICE;
  sc_fail(err, *s, "%s", a.msg[0] ? a.msg : sc_status_name(*s));
  return true;
}

sc_status exec_dist_collect(exec_dist *d, comm *world, const dist_sink *sink, uint64_t deadline_ns,
                            sc_error *err) {
  sc_status s;
  for (int r = 1; r < d->n_ranks; r++) {
    dist_answer a;
    // world watches itself: a wait ends at once when any rank raises an alarm
    s = comm_recv(world, &a, sizeof a, r);
    if (s != SC_OK) {
      sc_status why;
      if (exec_dist_take_alarm(world, &why, err)) return why;
      if (s == SC_TIMEOUT)
        return sc_fail(err, s,
                       "rank %d (tp_rank=%d pp_rank=%d): no answer to its step for %.3f "
                       "s (the collective deadline): hung or gone",
                       r, r % sink->tp, r / sink->tp, (double)deadline_ns / 1e9);
      return sc_fail(err, s, "rank %d: no answer to its step: %s", r, sc_status_name(s));
    }
    sink->mem_used[r] = (size_t)a.mem_used;
    sink->mem_total[r] = (size_t)a.mem_total;
    size_t at = (size_t)(r % sink->tp) * sink->max_seqs;
    if (a.n_picks > 0 && (size_t)a.n_picks <= sink->max_seqs) {
      SC_TRY(comm_recv(world, sink->amax_i + at, (size_t)a.n_picks * sizeof(int32_t), r));
      SC_TRY(comm_recv(world, sink->amax_v + at, (size_t)a.n_picks * sizeof(float), r));
    }
    if (a.n_logits && sink->logits)
      SC_TRY(comm_recv(world, sink->logits, (size_t)a.n_logits * sizeof(float), r));
  }
  return SC_OK;
}

// --- every other rank

// Reads n bytes at *off of d->buf (size len) into p. False past the end.
static bool get(const exec_dist *d, size_t len, size_t *off, void *p, size_t n) {
  if (*off + n > len) return false;
  if (n) memcpy(p, d->buf + *off, n);
  *off += n;
  return true;
}

// Decodes the batch at d->buf[off, len) into d->batch (pointers into d's buffers).
static bool get_batch(exec_dist *d, size_t len, size_t off) {
  dist_batch h;
  if (!get(d, len, &off, &h, sizeof h) || h.n_seqs < 1 || h.n_want < 0 || h.n_want > h.n_seqs)
    return false;
  if (!grow_int((void **)&d->seqs, &d->cap_seqs, h.n_seqs, sizeof *d->seqs)) return false;
  size_t ids = 0, blocks = 0;
  for (int i = 0; i < h.n_seqs; i++) {
    dist_seq s;
    if (!get(d, len, &off, &s, sizeof s) || s.n < 1 || s.n_blocks < 0) return false;
    d->seqs[i] = (exec_seq){
        .start = s.start, .n = s.n, .n_blocks = s.n_blocks, .want_logits = s.want_logits != 0};
    ids += (size_t)s.n;
    blocks += (size_t)s.n_blocks;
  }
  d->batch = (exec_batch){.n_seqs = h.n_seqs, .seqs = d->seqs};
  if (h.flags & BATCH_DRAWS) { // 8-byte aligned here: every part before it is a multiple of 8
    if (off + (size_t)h.n_want * sizeof(dev_sample_row) > len) return false;
    d->batch.draws = (const dev_sample_row *)(d->buf + off);
    off += (size_t)h.n_want * sizeof(dev_sample_row);
  }
  // ids and block tables point straight into the order's buffer (kept until the next order)
  if (off + (ids + blocks) * sizeof(int32_t) > len) return false;
  const int32_t *p = (const int32_t *)(d->buf + off);
  for (int i = 0; i < h.n_seqs; i++) {
    d->seqs[i].tokens = p;
    p += d->seqs[i].n;
  }
  for (int i = 0; i < h.n_seqs; i++) {
    d->seqs[i].blocks = p;
    p += d->seqs[i].n_blocks;
  }
  off += (ids + blocks) * sizeof(int32_t);
  if (h.flags & BATCH_TOKENS) {
    if (!grow_int((void **)&d->picks, &d->cap_picks, h.n_want + 1, sizeof *d->picks)) return false;
    d->batch.tokens = d->picks;
  } else {
    size_t n = (size_t)(h.n_want + 1) * (size_t)d->vocab;
    if (!grow((void **)&d->logits, &d->cap_logits, n, sizeof *d->logits)) return false;
    d->batch.logits = d->logits;
  }
  return off == len;
}

sc_status exec_dist_recv_step(exec_dist *d, comm *world, bool *quit, const exec_batch **b,
                              const dist_fault **faults, int *n_faults, sc_error *err) {
  *quit = false;
  dist_order o;
  sc_status s = comm_mpi_recv_idle(world, &o, sizeof o, 0);
  if (s != SC_OK)
    return sc_fail(err, s, "executor: waiting for rank 0's next order: %s", sc_status_name(s));
  if (o.kind == ORDER_QUIT) {
    *quit = true;
    return SC_OK;
  }
  size_t fault_bytes = (size_t)o.n_faults * sizeof(dist_fault);
  if (o.kind != ORDER_STEP || o.bytes < fault_bytes || o.bytes > ((size_t)1 << 34))
    return sc_fail(err, SC_INVALID, "executor: a malformed order from rank 0");
  // aligned for the int32 and double views into it (malloc's alignment, offsets of 8)
  if (!grow((void **)&d->buf, &d->cap, o.bytes, 1))
    return sc_fail(err, SC_OOM, "executor: out of memory for a step order of %llu bytes",
                   (unsigned long long)o.bytes);
  s = comm_recv(world, d->buf, o.bytes, 0);
  if (s != SC_OK) return sc_fail(err, s, "executor: receiving a step order: %s", sc_status_name(s));
  if (!grow_int((void **)&d->faults, &d->cap_faults, (int)o.n_faults + 1, sizeof *d->faults))
    return sc_fail(err, SC_OOM, "executor: out of memory");
  if (fault_bytes) memcpy(d->faults, d->buf, fault_bytes);
  // the batch follows: decode it where it sits (its arrays are 4- or 8-byte aligned there)
  memmove(d->buf, d->buf + fault_bytes, o.bytes - fault_bytes);
  if (!get_batch(d, o.bytes - fault_bytes, 0))
    return sc_fail(err, SC_INVALID, "executor: a malformed step from rank 0");
  *b = &d->batch;
  *faults = d->faults;
  *n_faults = (int)o.n_faults;
  return SC_OK;
}

sc_status exec_dist_send_result(comm *world, const int32_t *picks_i, const float *picks_v,
                                int n_picks, const float *logits, size_t n_logits, size_t mem_used,
                                size_t mem_total) {
  dist_answer a = {.status = SC_OK,
                   .n_picks = n_picks,
                   .n_logits = n_logits,
                   .mem_used = mem_used,
                   .mem_total = mem_total};
  SC_TRY(comm_send(world, &a, sizeof a, 0));
  if (n_picks > 0) {
    SC_TRY(comm_send(world, picks_i, (size_t)n_picks * sizeof *picks_i, 0));
    SC_TRY(comm_send(world, picks_v, (size_t)n_picks * sizeof *picks_v, 0));
  }
  if (n_logits) SC_TRY(comm_send(world, logits, n_logits * sizeof *logits, 0));
  return SC_OK;
}

void exec_dist_send_alarm(comm *world, sc_status s, const char *msg) {
  dist_alarm a = {.status = s};
  snprintf(a.msg, sizeof a.msg, "%s", msg && msg[0] ? msg : sc_status_name(s));
  comm_mpi_send_alarm(world, &a, sizeof a, 0);
}
