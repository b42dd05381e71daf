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
  uint64_t hit_tokens;   // prefix caching: tokens admitted already computed
  uint64_t query_tokens; // prefix caching: tokens admitted (looked up)
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
  if (cfg.prefix_caching && kv_cache_enable_prefix(kv) != SC_OK) {
    free(s);
    return SC_OOM;
  }
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
  q->n_hashed = 0;
  q->last_hash = 0;
}

// --- prefix caching

// The hash of a full block of tokens after the blocks whose hash is parent (0: the first):
// FNV-1a over the tokens from the parent, then a splitmix finish; never 0.
static uint64_t block_hash(uint64_t parent, const int32_t *t, int n) {
  uint64_t h = parent ^ UINT64_C(0xcbf29ce484222325);
  for (int i = 0; i < n; i++) h = (h ^ (uint32_t)t[i]) * UINT64_C(0x100000001b3);
  h ^= h >> 30;
  h *= UINT64_C(0xbf58476d1ce4e5b9);
  h ^= h >> 27;
  h *= UINT64_C(0x94d049bb133111eb);
  h ^= h >> 31;
  return h ? h : 1;
}

// q has no blocks: takes every registered block its tokens begin with, leaving its last token
// to compute.
static void match_prefix(scheduler *s, seq *q) {
  int bs = kv_cache_block_size(s->kv);
  uint64_t h = 0;
  int j = 0;
  while ((j + 1) * bs <= q->n_tokens - 1) {
    uint64_t hj = block_hash(h, q->tokens + (size_t)j * (size_t)bs, bs);
    int32_t b = kv_cache_lookup(s->kv, hj);
    if (b < 0) break;
    kv_cache_acquire(s->kv, b);
    q->blocks[q->n_blocks++] = b;
    h = hj;
    j++;
  }
  q->n_computed = j * bs;
  q->n_hashed = j;
  q->last_hash = h;
}

void sched_computed(scheduler *s, seq *q) {
  if (!s->cfg.prefix_caching) return;
  int bs = kv_cache_block_size(s->kv);
  while ((q->n_hashed + 1) * bs <= q->n_computed) {
    int j = q->n_hashed;
    uint64_t h = block_hash(q->last_hash, q->tokens + (size_t)j * (size_t)bs, bs);
    kv_cache_register(s->kv, q->blocks[j], h);
    q->last_hash = h;
    q->n_hashed++;
  }
}

uint64_t sched_prefix_hit_tokens(const scheduler *s) { return s->hit_tokens; }
uint64_t sched_prefix_query_tokens(const scheduler *s) { return s->query_tokens; }

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

// Whether waiting q (its prefix matched) may take the blocks for n more tokens: with
// reserve_full_isl, room for all its tokens; and the watermark left free while others run.
static bool admissible(const scheduler *s, const seq *q, int n) {
  int room = kv_cache_total(s->kv) - kv_cache_used(s->kv); // free or cached: takeable
  int upto = s->cfg.reserve_full_isl && q->n_tokens > q->n_computed + n ? q->n_tokens
                                                                         : q->n_computed + n;
  int want = kv_cache_blocks_for(s->kv, upto) - q->n_blocks;
  int keep = s->running.n > 0 ? s->cfg.watermark_blocks : 0;
  return want + keep <= room;
}

// Admits waiting sequences FCFS into items[n_items..) while the running limit, the budget and
// free blocks allow; returns the new item count.
static int admit_waiting(scheduler *s, sched_item *items, int n_items, int *budget) {
  while (s->waiting.n > 0 && s->running.n < s->cfg.max_running && *budget > 0) {
    seq *q = s->waiting.v[0];
    if (s->cfg.no_evict && s->reserved + full_blocks(s, q) > kv_cache_total(s->kv)) break;
    if (s->cfg.prefix_caching && q->n_blocks == 0) match_prefix(s, q);
    int n = step_tokens(s, q, *budget);
    // whole_prompts: no chunk of a new prompt beside other work (a prompt larger than the
    // whole budget still goes in chunks, alone, rather than never)
    if (s->cfg.whole_prompts && n < q->n_tokens - q->n_computed &&
        *budget < s->cfg.token_budget)
      break;
    if (!admissible(s, q, n) || grow_blocks(s, q, n) != SC_OK) {
      release_blocks(s, q); // blocks a prefix match took go back to the cache
      break;
    }
    if (s->cfg.prefix_caching) {
      s->hit_tokens += (uint64_t)q->n_computed;
      s->query_tokens += (uint64_t)q->n_tokens;
    }
    if (s->cfg.no_evict) s->reserved += full_blocks(s, q);
    list_erase(&s->waiting, 0);
    list_insert(&s->running, s->running.n, q);
    q->state = SEQ_RUNNING;
    items[n_items++] = (sched_item){q, q->n_computed, n, q->n_computed + n == q->n_tokens};
    *budget -= n;
  }
  return n_items;
}

int sched_plan(scheduler *s, sched_item *items, int *n_preempted) {
  int budget = s->cfg.token_budget, n_items = 0, preempted = 0;
  // prefill_first: admit first; a step that admitted anything computes those prompts only
  // (vLLM V0's _schedule_default: running sequences are scheduled only when no prefill was)
  if (s->cfg.prefill_first) {
    n_items = admit_waiting(s, items, 0, &budget);
    if (n_items > 0) {
      *n_preempted = 0;
      return n_items;
    }
  }
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
  // Admit from the queue, FCFS, unless this step had to preempt (no room to spare) or
  // prefill_first already tried.
  if (!preempted && !s->cfg.prefill_first) n_items = admit_waiting(s, items, n_items, &budget);
  *n_preempted = preempted;
  return n_items;
}

int sched_plan_continue(scheduler *s, sched_item *items) {
  for (int i = 0; i < s->running.n; i++)
    if (s->running.v[i]->n_tokens - s->running.v[i]->n_computed != 1) return 0;
  int want = 0; // blocks the step needs, taken only when all are there
  for (int i = 0; i < s->running.n; i++) {
    const seq *q = s->running.v[i];
    want += kv_cache_blocks_for(s->kv, q->n_computed + 1) - q->n_blocks;
  }
  if (want > kv_cache_total(s->kv) - kv_cache_used(s->kv)) return 0;
  for (int i = 0; i < s->running.n; i++) {
    seq *q = s->running.v[i];
    if (grow_blocks(s, q, 1) != SC_OK) return 0; // cannot happen: counted above
    items[i] = (sched_item){q, q->n_computed, 1, true};
  }
  return s->running.n;
}
