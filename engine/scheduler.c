// Continuous batching with chunked prefill and preemption by recompute, or admission that
// reserves each sequence's full length so nothing is preempted (see scheduler.h).
#include "engine/scheduler.h"

#include <stdlib.h>
#include <string.h>

// A growable array of seq pointers, in priority order.
typedef struct seq_list {
  seq **v;
  int n, cap;
} seq_list;

struct scheduler {
  sched_config cfg;
  kv_cache *kv;
  seq_list waiting; // front is next
  seq_list running; // in admission order; the back is preempted first
  int reserved;      // no_evict: blocks the running sequences hold or will at full length
};

// Makes room for n entries, so that moving a seq between the lists never allocates.
static sc_status list_reserve(seq_list *l, int n) {
  if (n <= l->cap) return SC_OK;
  int cap = l->cap ? l->cap : 64;
  while (cap < n) cap *= 2;
  seq **v = realloc(l->v, sizeof *v * (size_t)cap);
  if (!v) return SC_OOM;
  l->v = v;
  l->cap = cap;
  return SC_OK;
}

static void list_insert(seq_list *l, int at, seq *q) {
  SC_ASSERT(l->n < l->cap);
  memmove(l->v + at + 1, l->v + at, sizeof *l->v * (size_t)(l->n - at));
  l->v[at] = q;
  l->n++;
}

static void list_erase(seq_list *l, int at) {
  memmove(l->v + at, l->v + at + 1, sizeof *l->v * (size_t)(l->n - at - 1));
  l->n--;
}

static int list_index(const seq_list *l, const seq *q) {
  for (int i = 0; i < l->n; i++)
    if (l->v[i] == q) return i;
  return -1;
}

sc_status sched_new(sched_config cfg, kv_cache *kv, scheduler **out) {
  *out = NULL;
  if (cfg.max_running < 1 || cfg.token_budget < 1 || cfg.prefill_chunk < 1) return SC_INVALID;
  scheduler *s = calloc(1, sizeof *s);
  if (!s) return SC_OOM;
  s->cfg = cfg;
  s->kv = kv;
  *out = s;
  return SC_OK;
}

void sched_free(scheduler *s) {
  if (!s) return;
  free(s->waiting.v);
  free(s->running.v);
  free(s);
}

sc_status sched_add(scheduler *s, seq *q) {
  int total = s->waiting.n + s->running.n + 1;
  SC_TRY(list_reserve(&s->waiting, total));
  SC_TRY(list_reserve(&s->running, total));
  q->state = SEQ_WAITING;
  list_insert(&s->waiting, s->waiting.n, q);
  return SC_OK;
}

// The blocks q holds at its full length (no_evict's reservation).
static int full_blocks(const scheduler *s, const seq *q) {
  return kv_cache_blocks_for(s->kv, q->cap);
}

static void release_blocks(scheduler *s, seq *q) {
  kv_cache_give_back(s->kv, q->blocks, q->n_blocks);
  q->n_blocks = 0;
  q->n_computed = 0;
}

void sched_remove(scheduler *s, seq *q) {
  int i = list_index(&s->running, q);
  if (i >= 0) {
    list_erase(&s->running, i);
    if (s->cfg.no_evict) s->reserved -= full_blocks(s, q);
  }
  i = list_index(&s->waiting, q);
  if (i >= 0) list_erase(&s->waiting, i);
  release_blocks(s, q);
  q->state = SEQ_DONE;
}

int sched_n_waiting(const scheduler *s) { return s->waiting.n; }
int sched_n_running(const scheduler *s) { return s->running.n; }

seq *sched_any(const scheduler *s) {
  if (s->running.n) return s->running.v[0];
  return s->waiting.n ? s->waiting.v[0] : NULL;
}

seq *sched_find(const scheduler *s, uint64_t id) {
  for (int i = 0; i < s->running.n; i++)
    if (s->running.v[i]->id == id) return s->running.v[i];
  for (int i = 0; i < s->waiting.n; i++)
    if (s->waiting.v[i]->id == id) return s->waiting.v[i];
  return NULL;
}

// Tokens of q to compute this step, within budget and the prefill chunk.
static int step_tokens(const scheduler *s, const seq *q, int budget) {
  int need = q->n_tokens - q->n_computed;
  int n = need < budget ? need : budget;
  if (need > 1 && n > s->cfg.prefill_chunk) n = s->cfg.prefill_chunk;
  return n;
}

// Grows q's block table to hold its computed tokens plus n more; SC_OOM if blocks are short.
static sc_status grow_blocks(scheduler *s, seq *q, int n) {
  int want = kv_cache_blocks_for(s->kv, q->n_computed + n) - q->n_blocks;
  if (want <= 0) return SC_OK;
  SC_TRY(kv_cache_take(s->kv, want, q->blocks + q->n_blocks));
  q->n_blocks += want;
  return SC_OK;
}

int sched_plan(scheduler *s, sched_item *items, int *n_preempted) {
  int budget = s->cfg.token_budget, n_items = 0, preempted = 0;
  for (int i = 0; i < s->running.n && budget > 0; i++) {
    seq *q = s->running.v[i];
    int n = step_tokens(s, q, budget);
    bool self_preempted = false;
    while (grow_blocks(s, q, n) != SC_OK) {
      seq *victim = s->running.v[s->running.n - 1];
      list_erase(&s->running, s->running.n - 1);
      if (s->cfg.no_evict) s->reserved -= full_blocks(s, victim);
      release_blocks(s, victim);
      victim->state = SEQ_WAITING;
      victim->n_preempted++;
      list_insert(&s->waiting, 0, victim);
      preempted++;
      if (victim == q) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;
    items[n_items++] = (sched_item){q, q->n_computed, n, q->n_computed + n == q->n_tokens};
    budget -= n;
  }
  // Admit from the queue, FCFS, unless this step had to preempt (no room to spare).
  while (!preempted && s->waiting.n > 0 && s->running.n < s->cfg.max_running && budget > 0) {
    seq *q = s->waiting.v[0];
    int n = step_tokens(s, q, budget);
    if (s->cfg.no_evict && s->reserved + full_blocks(s, q) > kv_cache_total(s->kv)) break;
    if (grow_blocks(s, q, n) != SC_OK) break;
    if (s->cfg.no_evict) s->reserved += full_blocks(s, q);
    list_erase(&s->waiting, 0);
    list_insert(&s->running, s->running.n, q);
    q->state = SEQ_RUNNING;
    items[n_items++] = (sched_item){q, q->n_computed, n, q->n_computed + n == q->n_tokens};
    budget -= n;
  }
  *n_preempted = preempted;
  return n_items;
}
