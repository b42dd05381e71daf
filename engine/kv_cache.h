// Paged KV-cache block accounting for one replica.
//
// Every rank of a replica holds the same logical blocks (block b of a sequence lives at the
// same physical index on every rank; each rank stores only its KV heads), so one block
// manager serves the whole replica. The storage itself is allocated by engine/executor.c.
// Accounting is exact: used + free + cached == total at every moment.
//
// Prefix caching (kv_cache_enable_prefix; vLLM's automatic prefix caching): a full block may be
// registered under the hash of its tokens and every token before them, and blocks are counted
// by their holders, so sequences with the same prefix share blocks. A registered block nobody
// holds stays cached (in LRU order) until a new block needs its room; until then a sequence
// whose prefix hashes to it takes it back without computing it again.
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

// Blocks held by nobody that still hold a registered prefix (0 without prefix caching); they
// count as free room.
int kv_cache_cached(const kv_cache *kv);

// Takes n blocks into out[0..n), each held once: free ones first, then the least recently used
// cached ones (their content dropped). SC_OOM (and nothing taken) when fewer than n are free
// or cached.
sc_status kv_cache_take(kv_cache *kv, int n, int32_t *out);
// Drops a hold on each of n blocks; a block nobody holds is free again (cached, if it is
// registered). Returning a block that is not held is a broken invariant (asserts).
void kv_cache_give_back(kv_cache *kv, const int32_t *blocks, int n);

// --- prefix caching
// Turns it on (SC_OOM: the table could not be allocated).
sc_status kv_cache_enable_prefix(kv_cache *kv);
// The block registered under hash h, or -1 (also when prefix caching is off, or h is 0).
int32_t kv_cache_lookup(const kv_cache *kv, uint64_t h);
// One more hold on b, a block kv_cache_lookup returned.
void kv_cache_acquire(kv_cache *kv, int32_t b);
// Registers held block b, now full, under h (nonzero); a no-op when prefix caching is off,
// b is registered already, or another block holds h.
void kv_cache_register(kv_cache *kv, int32_t b, uint64_t h);
