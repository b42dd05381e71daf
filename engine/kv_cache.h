// Paged KV-cache block accounting for one replica.
//
// Every rank of a replica holds the same logical blocks (block b of a sequence lives at the
// same physical index on every rank; each rank stores only its KV heads), so one block
// manager serves the whole replica. The storage itself is allocated by engine/executor.c.
// Accounting is exact: used + free == total at every moment.
#pragma once

#include <stdint.h>

#include "kernels/status.h"

typedef struct kv_cache kv_cache;

// n_blocks blocks of block_size tokens. On error *out is NULL.
sc_status kv_cache_new(int n_blocks, int block_size, kv_cache **out);
void kv_cache_free(kv_cache *kv); // NULL is a no-op

int kv_cache_block_size(const kv_cache *kv);
int kv_cache_total(const kv_cache *kv);
int kv_cache_used(const kv_cache *kv);
// Blocks needed to hold n_tokens tokens.
int kv_cache_blocks_for(const kv_cache *kv, int n_tokens);

// Takes n free blocks into out[0..n). SC_OOM (and nothing taken) when fewer than n are free.
sc_status kv_cache_take(kv_cache *kv, int n, int32_t *out);
// Returns n blocks. Returning a block that is not in use is a broken invariant (asserts).
void kv_cache_give_back(kv_cache *kv, const int32_t *blocks, int n);
