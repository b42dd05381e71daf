// Block manager for the paged KV cache: a free stack plus an in-use bitmap for checks.
#include "engine/kv_cache.h"

#include <stdlib.h>

struct kv_cache {
  int n_blocks;
  int block_size; // tokens per block
  int n_free;
  int32_t *free_stack; // (n_blocks) free block ids in [0, n_free)
  uint8_t *in_use;     // (n_blocks) 1 when handed out
};

sc_status kv_cache_new(int n_blocks, int block_size, kv_cache **out) {
  *out = NULL;
  if (n_blocks < 1 || block_size < 1) return SC_INVALID;
  kv_cache *kv = calloc(1, sizeof *kv);
  if (!kv) return SC_OOM;
  kv->free_stack = malloc(sizeof(int32_t) * (size_t)n_blocks);
  kv->in_use = calloc((size_t)n_blocks, 1);
  if (!kv->free_stack || !kv->in_use) {
    kv_cache_free(kv);
    return SC_OOM;
  }
  kv->n_blocks = n_blocks;
  kv->block_size = block_size;
  kv->n_free = n_blocks;
  // Lowest ids on top of the stack, so a fresh cache hands out 0, 1, 2, ...
  for (int i = 0; i < n_blocks; i++) kv->free_stack[i] = n_blocks - 1 - i;
  *out = kv;
  return SC_OK;
}

void kv_cache_free(kv_cache *kv) {
  if (!kv) return;
  free(kv->free_stack);
  free(kv->in_use);
  free(kv);
}

int kv_cache_block_size(const kv_cache *kv) { return kv->block_size; }
int kv_cache_total(const kv_cache *kv) { return kv->n_blocks; }
int kv_cache_used(const kv_cache *kv) { return kv->n_blocks - kv->n_free; }
int kv_cache_blocks_for(const kv_cache *kv, int n_tokens) {
  return (n_tokens + kv->block_size - 1) / kv->block_size;
}

sc_status kv_cache_take(kv_cache *kv, int n, int32_t *out) {
  if (n > kv->n_free) return SC_OOM;
  for (int i = 0; i < n; i++) {
    int32_t b = kv->free_stack[--kv->n_free];
    SC_ASSERT(!kv->in_use[b]);
    kv->in_use[b] = 1;
    out[i] = b;
  }
  return SC_OK;
}

void kv_cache_give_back(kv_cache *kv, const int32_t *blocks, int n) {
  for (int i = 0; i < n; i++) {
    int32_t b = blocks[i];
    SC_ASSERT(b >= 0 && b < kv->n_blocks && kv->in_use[b]);
    kv->in_use[b] = 0;
    kv->free_stack[kv->n_free++] = b;
  }
}
