// Block manager for the paged KV cache: a free stack, reference counts, and (with prefix
// caching) a table from a full block's content hash to the block holding it, whose unreferenced
// blocks wait in LRU order until a new block needs their room.
#include "engine/kv_cache.h"

#include <stdlib.h>

struct kv_cache {
  int n_blocks;
  int block_size; // tokens per block
  int n_free;
  int32_t *free_stack; // (n_blocks) free blocks holding nothing cached, in [0, n_free)
  int32_t *refs;       // (n_blocks) holders of each block; 0: free or cached
  // prefix caching (NULL until kv_cache_enable_prefix)
  uint64_t *hash;      // (n_blocks) the content hash a block is registered under; 0: none
  int32_t *table;      // (table_cap) open addressing, linear probing: block ids, -1 empty
  int table_cap;       // a power of two >= 2 n_blocks
  int32_t *prev, *next; // (n_blocks) the LRU list of cached blocks nobody holds
  int32_t lru_head, lru_tail; // head: evicted first; -1: empty
  int n_lru;
};

sc_status kv_cache_new(int n_blocks, int block_size, kv_cache **out) {
  *out = NULL;
  if (n_blocks < 1 || block_size < 1) return SC_INVALID;
  kv_cache *kv = calloc(1, sizeof *kv);
  if (!kv) return SC_OOM;
  kv->free_stack = malloc(sizeof(int32_t) * (size_t)n_blocks);
  kv->refs = calloc((size_t)n_blocks, sizeof *kv->refs);
  if (!kv->free_stack || !kv->refs) {
    kv_cache_free(kv);
    return SC_OOM;
  }
  kv->n_blocks = n_blocks;
  kv->block_size = block_size;
  kv->n_free = n_blocks;
  kv->lru_head = kv->lru_tail = -1;
  // Lowest ids on top of the stack, so a fresh cache hands out 0, 1, 2, ...
  for (int i = 0; i < n_blocks; i++) kv->free_stack[i] = n_blocks - 1 - i;
  *out = kv;
  return SC_OK;
}

sc_status kv_cache_enable_prefix(kv_cache *kv) {
  if (kv->hash) return SC_OK;
  int cap = 16;
  while (cap < 2 * kv->n_blocks) cap *= 2;
  kv->hash = calloc((size_t)kv->n_blocks, sizeof *kv->hash);
  kv->table = malloc(sizeof *kv->table * (size_t)cap);
  kv->prev = malloc(sizeof *kv->prev * (size_t)kv->n_blocks);
  kv->next = malloc(sizeof *kv->next * (size_t)kv->n_blocks);
  if (!kv->hash || !kv->table || !kv->prev || !kv->next) {
    free(kv->hash), free(kv->table), free(kv->prev), free(kv->next);
    kv->hash = NULL, kv->table = NULL, kv->prev = kv->next = NULL;
    return SC_OOM;
  }
  for (int i = 0; i < cap; i++) kv->table[i] = -1;
  kv->table_cap = cap;
  return SC_OK;
}

void kv_cache_free(kv_cache *kv) {
  if (!kv) return;
  free(kv->free_stack);
  free(kv->refs);
  free(kv->hash), free(kv->table), free(kv->prev), free(kv->next);
  free(kv);
}

int kv_cache_block_size(const kv_cache *kv) { return kv->block_size; }
int kv_cache_total(const kv_cache *kv) { return kv->n_blocks; }
int kv_cache_used(const kv_cache *kv) { return kv->n_blocks - kv->n_free - kv->n_lru; }
int kv_cache_cached(const kv_cache *kv) { return kv->n_lru; }
int kv_cache_blocks_for(const kv_cache *kv, int n_tokens) {
  return (n_tokens + kv->block_size - 1) / kv->block_size;
}

// --- the hash table (keys: kv->hash[block])

static int slot_of(const kv_cache *kv, uint64_t h) {
  return (int)((h ^ (h >> 29)) & (uint64_t)(kv->table_cap - 1));
}

int32_t kv_cache_lookup(const kv_cache *kv, uint64_t h) {
  if (!kv->table || h == 0) return -1;
  for (int i = slot_of(kv, h);; i = (i + 1) & (kv->table_cap - 1)) {
    int32_t b = kv->table[i];
    if (b < 0) return -1;
    if (kv->hash[b] == h) return b;
  }
}

// Removes block b's entry (backward-shift deletion: no tombstones).
static void table_remove(kv_cache *kv, int32_t b) {
  int m = kv->table_cap - 1, i = slot_of(kv, kv->hash[b]);
  while (kv->table[i] != b) i = (i + 1) & m;
  for (int j = (i + 1) & m;; j = (j + 1) & m) {
    int32_t c = kv->table[j];
    if (c < 0) break;
    int home = slot_of(kv, kv->hash[c]);
    // c may move into the hole at i when its home is not in the cyclic range (i, j]
    if (((j - home) & m) >= ((j - i) & m)) {
      kv->table[i] = c;
      i = j;
    }
  }
  kv->table[i] = -1;
  kv->hash[b] = 0;
}

void kv_cache_register(kv_cache *kv, int32_t b, uint64_t h) {
  if (!kv->table || h == 0 || kv->hash[b] != 0 || kv_cache_lookup(kv, h) >= 0) return;
  SC_ASSERT(b >= 0 && b < kv->n_blocks && kv->refs[b] > 0);
  kv->hash[b] = h;
  int i = slot_of(kv, h);
  while (kv->table[i] >= 0) i = (i + 1) & (kv->table_cap - 1);
  kv->table[i] = b;
}

// --- the LRU list of cached blocks nobody holds

static void lru_unlink(kv_cache *kv, int32_t b) {
  int32_t p = kv->prev[b], n = kv->next[b];
  if (p >= 0) kv->next[p] = n;
  else kv->lru_head = n;
  if (n >= 0) kv->prev[n] = p;
  else kv->lru_tail = p;
  kv->n_lru--;
}

static void lru_push(kv_cache *kv, int32_t b) {
  kv->prev[b] = kv->lru_tail;
  kv->next[b] = -1;
  if (kv->lru_tail >= 0) kv->next[kv->lru_tail] = b;
  else kv->lru_head = b;
  kv->lru_tail = b;
  kv->n_lru++;
}

void kv_cache_acquire(kv_cache *kv, int32_t b) {
  SC_ASSERT(b >= 0 && b < kv->n_blocks && kv->hash && kv->hash[b] != 0);
  if (kv->refs[b]++ == 0) lru_unlink(kv, b);
}

sc_status kv_cache_take(kv_cache *kv, int n, int32_t *out) {
  if (n > kv->n_free + kv->n_lru) return SC_OOM;
  for (int i = 0; i < n; i++) {
    int32_t b;
    if (kv->n_free > 0) {
      b = kv->free_stack[--kv->n_free];
    } else { // the least recently used cached block gives up its content
      b = kv->lru_head;
      lru_unlink(kv, b);
      table_remove(kv, b);
    }
    SC_ASSERT(kv->refs[b] == 0);
    kv->refs[b] = 1;
    out[i] = b;
  }
  return SC_OK;
}

void kv_cache_give_back(kv_cache *kv, const int32_t *blocks, int n) {
  // the last block first: a sequence's tail is the least likely to be asked for again, so it
  // is evicted before its head
  for (int i = n - 1; i >= 0; i--) {
    int32_t b = blocks[i];
    SC_ASSERT(b >= 0 && b < kv->n_blocks && kv->refs[b] > 0);
    if (--kv->refs[b] > 0) continue;
    if (kv->hash && kv->hash[b] != 0) lru_push(kv, b);
    else kv->free_stack[kv->n_free++] = b;
  }
}
