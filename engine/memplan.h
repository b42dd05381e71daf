// The memory planner: weights + KV cache + activation workspace per device, against the
// device's memory less a headroom fraction, for every tp x pp x dp layout.
//
// The same arithmetic serves `shardcheck plan`, the real engine's KV sizing and the
// simulator. Which slice each rank holds is engine/shard.h; this file only counts bytes.
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "engine/hw_profile.h"
#include "engine/model.h"

typedef struct memplan_params {
  sc_dtype weight_dtype; // dtype of weights on the device
  sc_dtype kv_dtype;     // dtype of the KV cache (f32 on the CPU backend, else bf16/f16; fp8)
  int context;           // tokens one sequence may hold (0 = the model's max_seq_len)
  double headroom;       // fraction of device memory kept free (0.10 by default)
  int block_size;        // KV block, tokens (16)
  int max_batch_tokens;  // per-step token budget (8192): sizes the activation workspace
  int max_seqs;          // running sequences (256)
} memplan_params;

memplan_params memplan_defaults(void);

typedef struct memplan_layout {
  int tp, pp, dp, gpus;       // gpus = tp * pp * dp
  bool valid;                 // the model can be sharded this way (engine/shard.h)
  char why[256];              // when !valid or !fits: the reason
  double weight_bytes;        // per GPU, the largest stage
  double workspace_bytes;     // per GPU: activations for max_batch_tokens + logits
  double kv_bytes;            // per GPU left for the KV cache (may be negative)
  double kv_bytes_per_token;  // per GPU, for the stage with the most layers
  int64_t kv_tokens;          // tokens of KV one replica can hold (0 when kv_bytes <= 0)
  int64_t kv_blocks;          // kv_tokens / block_size
  double used_bytes;          // per GPU: weights + workspace + KV
  bool fits;                  // weights + workspace fit and kv_tokens >= context
} memplan_layout;

// Evaluates one layout. Returns SC_OK (the verdict is in out->valid / out->fits).
sc_status memplan_eval(const model_config *m, const hw_profile *hw, const memplan_params *p,
                       int tp, int pp, int dp, memplan_layout *out);

// Every tp x pp x dp (powers of two for tp) using at most max_gpus GPUs, valid or not, in a
// stable order (gpus, then tp, then pp). Returns how many exist; writes at most cap.
int memplan_enumerate(const model_config *m, const hw_profile *hw, const memplan_params *p,
                      int max_gpus, memplan_layout *out, int cap);

// Index into layouts of the recommended one, or -1 when none fits: fits on one GPU -> pure
// DP over all GPUs; otherwise the smallest TP (within a node) that fits, then PP; GPUs left
// over become DP replicas (TP x DP hybrids). why[] of the chosen layout says why.
int memplan_recommend(const memplan_layout *layouts, int n, int max_gpus, int gpus_per_node);
