// The shard plan: which slice of which tensor each rank of a TP x PP replica holds.
//
// TP is Megatron-style: q/k/v and gate/up split by output rows (heads, ffn columns), o and
// down split by input columns and summed with one all-reduce each; the embedding and the LM
// head are split by vocab (the embedding's partial rows summed, the head's logits gathered).
// KV heads are replicated when tp > n_kv_heads. PP gives each stage a contiguous, balanced
// range of layers, the embedding on the first stage and the final norm + head on the last.
// DP is N independent replicas and needs nothing here. Memory arithmetic is engine/memplan.h.
#pragma once

#include <stdbool.h>

#include "engine/model.h"

typedef struct shard_rank {
  int tp, pp;           // layout of the replica
  int tp_rank, pp_rank; // this rank's place in it
  int layer0, n_layers; // this stage's layers [layer0, layer0 + n_layers)
  int q_head0, n_heads; // query heads held
  int kv_head0, n_kv;   // KV heads held (replicas of one head when tp > n_kv_heads)
  int ffn0, ffn;        // ffn columns held (rows of gate/up, columns of down)
  int vocab0, vocab;    // vocabulary rows of embedding and LM head held
  bool first_stage;     // holds the embedding
  bool last_stage;      // holds the final norm and the LM head
} shard_rank;

// SC_OK when (tp, pp) can shard c; otherwise SC_INVALID with the reason and the valid
// alternatives in err (e.g. "tp=3 does not divide num_attention_heads=8; valid tp: 1, 2, 4, 8").
sc_status shard_layout_check(const model_config *c, int tp, int pp, sc_error *err);
bool shard_tp_valid(const model_config *c, int tp);

// Layers of stage s of pp: [*layer0, *layer0 + *n).
void shard_stage_layers(int n_layers, int pp, int s, int *layer0, int *n);

// The slice held by (tp_rank, pp_rank); the layout must have passed shard_layout_check.
shard_rank shard_rank_plan(const model_config *c, int tp, int pp, int tp_rank, int pp_rank);

// KV-cache elements one token costs on rank r: K and V of every layer it holds, its KV heads.
int64_t shard_kv_elems_per_token(const model_config *c, const shard_rank *r);
