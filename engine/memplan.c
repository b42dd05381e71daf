// The memory planner (see memplan.h): bytes of weights, activation workspace and KV cache per
// GPU for a tp x pp x dp layout, the enumeration of layouts and the recommendation rule.
//
// Which slice a rank holds is engine/shard.c (shard_rank_plan); this file only counts bytes
// and never allocates device memory. Printing the table is cli/cmd_plan.c; docs/planner.md
// gives the formulas with a worked example.
#include "engine/memplan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/shard.h"

#define GB 1e9 // messages use 1 GB = 1e9 bytes, as the CLI table does

memplan_params memplan_defaults(void) {
  return (memplan_params){
      .weight_dtype = SC_BF16,
      .kv_dtype = SC_BF16,
      .context = 0,
      .headroom = 0.10,
      .block_size = 16,
      .max_batch_tokens = 8192,
      .max_seqs = 256,
  };
}

// --- weights
//
// A projection held as (rows, cols) on one rank. Float dtypes: rows x cols x bytes.
// Quantized weights (int8 and int4 weight-only, fp8) store rows x cols x 1 or 0.5 bytes plus
// one bf16 scale per output row (rows x 2 bytes); int4 adds one bf16 scale per group of 128
// inputs (rows x ceil(cols / 128) x 2 bytes). Embedding, LM head and norms stay bf16 when
// quantized (as in the FP8 checkpoints vLLM and TensorRT-LLM serve).
#define QUANT_GROUP 128

static bool quantized(sc_dtype t) { return t == SC_I8 || t == SC_I4 || t == SC_FP8; }

static double proj_bytes(double rows, double cols, sc_dtype t) {
  double b = rows * cols * sc_dtype_bytes(t);
  if (quantized(t)) b += rows * 2;
  if (t == SC_I4) b += rows * ceil(cols / QUANT_GROUP) * 2;
  return b;
}

// Bytes per element of the tensors that are never quantized (embedding, head, norms).
static double dense_bytes(sc_dtype t) { return quantized(t) ? 2.0 : sc_dtype_bytes(t); }

// Weights of one transformer layer on a rank holding slice r.
static double layer_weight_bytes(const model_config *m, const shard_rank *r, sc_dtype t) {
  double hd = m->head_dim, dim = m->dim;
  double b = 0;
  b += proj_bytes(r->n_heads * hd, dim, t);  // q_proj (n_heads_local * head_dim, dim)
  b += 2 * proj_bytes(r->n_kv * hd, dim, t); // k_proj, v_proj (n_kv_local * head_dim, dim)
  b += proj_bytes(dim, r->n_heads * hd, t);  // o_proj (dim, n_heads_local * head_dim)
  b += 2 * proj_bytes(r->ffn, dim, t);       // gate_proj, up_proj (ffn_local, dim)
  b += proj_bytes(dim, r->ffn, t);           // down_proj (dim, ffn_local)
  b += 2 * dim * dense_bytes(t);             // input and post-attention RMSNorm (dim)
  return b;
}

// Weights on the rank holding slice r (any TP rank of a stage holds the same amount).
static double stage_weight_bytes(const model_config *m, const shard_rank *r, sc_dtype t) {
  double b = r->n_layers * layer_weight_bytes(m, r, t);
  double table = (double)r->vocab * m->dim * dense_bytes(t); // (vocab / tp, dim)
  if (r->first_stage) b += table;                            // embed_tokens
  if (r->last_stage) {
    b += m->dim * dense_bytes(t); // final norm
    // lm_head; a tied head shares the embedding only when both sit on the same stage.
    if (!m->tied_embeddings || !r->first_stage) b += table;
  }
  return b;
}

// --- workspace
//
// Activations for one step of max_batch_tokens tokens, f32 (4 bytes) per element:
//   max_batch_tokens x (3 x dim                      residual, normed input, o/down output
//                       + (n_heads_local + 2 x n_kv_local) x head_dim     q, k, v
//                       + 2 x ffn_local) x 4                              gate, up
// plus, on the last stage, logits for max_seqs sequences (one row each):
//   max_seqs x vocab / tp x 4, and when tp > 1 the gathered full rows: max_seqs x vocab x 4.
// Attention reads K/V from the paged cache and keeps no (tokens x context) score matrix.
static double stage_workspace_bytes(const model_config *m, const shard_rank *r,
                                    const memplan_params *p) {
  double width =
      3.0 * m->dim + (double)(r->n_heads + 2 * r->n_kv) * m->head_dim + 2.0 * r->ffn;
  double b = (double)p->max_batch_tokens * width * 4;
  if (r->last_stage) {
    b += (double)p->max_seqs * r->vocab * 4;
    if (r->tp > 1) b += (double)p->max_seqs * m->vocab_size * 4;
  }
  return b;
}

// --- one layout

sc_status memplan_eval(const model_config *m, const hw_profile *hw, const memplan_params *p,
                       int tp, int pp, int dp, memplan_layout *out) {
  memset(out, 0, sizeof *out);
  out->tp = tp;
  out->pp = pp;
  out->dp = dp;
  out->gpus = tp * pp * dp;
  if (dp < 1) {
    snprintf(out->why, sizeof out->why, "dp=%d must be at least 1", dp);
    return SC_OK;
  }
  sc_error err = {{0}};
  if (shard_layout_check(m, tp, pp, &err) != SC_OK) {
    snprintf(out->why, sizeof out->why, "%.*s", (int)sizeof out->why - 1, err.msg);
    return SC_OK;
  }
  out->valid = true;

  // The worst stage bounds every GPU: all ranks of a replica hold the same number of KV
  // blocks (one block table per sequence), so the largest weights, workspace and bytes per
  // token decide.
  for (int s = 0; s < pp; s++) {
    shard_rank r = shard_rank_plan(m, tp, pp, 0, s);
    double w = stage_weight_bytes(m, &r, p->weight_dtype);
    double ws = stage_workspace_bytes(m, &r, p);
    double kvt = (double)shard_kv_elems_per_token(m, &r) * sc_dtype_bytes(p->kv_dtype);
    if (w > out->weight_bytes) out->weight_bytes = w;
    if (ws > out->workspace_bytes) out->workspace_bytes = ws;
    if (kvt > out->kv_bytes_per_token) out->kv_bytes_per_token = kvt;
  }
  double usable = hw->mem_bytes * (1.0 - p->headroom);
  out->kv_bytes = usable - out->weight_bytes - out->workspace_bytes;
  int block = p->block_size > 0 ? p->block_size : 16;
  if (out->kv_bytes > 0 && out->kv_bytes_per_token > 0) {
    out->kv_blocks = (int64_t)floor(out->kv_bytes / (out->kv_bytes_per_token * block));
    out->kv_tokens = out->kv_blocks * block;
  }
  double kv_used = out->kv_bytes > 0 ? out->kv_bytes : 0;
  out->used_bytes = out->weight_bytes + out->workspace_bytes + kv_used;

  int context = p->context > 0 ? p->context : m->max_seq_len;
  if (out->kv_bytes <= 0)
    snprintf(out->why, sizeof out->why,
             "weights %.2f GB + workspace %.2f GB per GPU exceed %.2f GB usable "
             "(%.2f GB less %.0f%% headroom)",
             out->weight_bytes / GB, out->workspace_bytes / GB, usable / GB, hw->mem_bytes / GB,
             p->headroom * 100);
  else if (out->kv_tokens < context)
    snprintf(out->why, sizeof out->why,
             "KV cache holds %lld tokens per replica (%.2f GB per GPU), fewer than one "
             "context of %d",
             (long long)out->kv_tokens, out->kv_bytes / GB, context);
  else
    out->fits = true;
  return SC_OK;
}

// --- every layout

int memplan_enumerate(const model_config *m, const hw_profile *hw, const memplan_params *p,
                      int max_gpus, memplan_layout *out, int cap) {
  int n = 0;
  for (int gpus = 1; gpus <= max_gpus; gpus++)
    for (int tp = 1; tp <= gpus; tp *= 2) {
      if (gpus % tp) continue;
      for (int pp = 1; pp <= gpus / tp; pp++) {
        if ((gpus / tp) % pp) continue;
        if (n < cap) memplan_eval(m, hw, p, tp, pp, gpus / (tp * pp), &out[n]);
        n++;
      }
    }
  return n;
}

// --- the recommendation

static int find(const memplan_layout *l, int n, int tp, int pp, int dp) {
  for (int i = 0; i < n; i++)
    if (l[i].tp == tp && l[i].pp == pp && l[i].dp == dp) return i;
  return -1;
}

// Picks (tp, pp) for one replica and fills its DP from the GPUs; -1 if that layout is absent
// or does not fit.
static int pick(memplan_layout *l, int n, int tp, int pp, int max_gpus) {
  int dp = max_gpus / (tp * pp);
  if (dp < 1) return -1;
  int i = find(l, n, tp, pp, dp);
  return i >= 0 && l[i].fits ? i : -1;
}

int memplan_recommend(const memplan_layout *layouts, int n, int max_gpus, int gpus_per_node) {
  memplan_layout *l = (memplan_layout *)layouts; // why[] of the chosen one is rewritten
  if (gpus_per_node < 1) gpus_per_node = 1;
  int node = gpus_per_node < max_gpus ? gpus_per_node : max_gpus;
  int best = -1;
  const char *rule = "";
  // 1. One GPU holds the model: pure DP, no collectives at all.
  best = pick(l, n, 1, 1, max_gpus);
  if (best >= 0) rule = "the model fits on one GPU, so every GPU serves its own replica (pure DP)";
  // 2. The smallest TP within a node that fits; GPUs left over become DP replicas.
  for (int tp = 2; best < 0 && tp <= node; tp *= 2) {
    best = pick(l, n, tp, 1, max_gpus);
    if (best >= 0) rule = "the smallest tensor-parallel group (within a node) that fits";
  }
  // 3. Add pipeline stages: the fewest GPUs per replica, then the smallest TP.
  for (int size = 2; best < 0 && size <= max_gpus; size++)
    for (int tp = 1; best < 0 && tp <= node && tp <= size; tp *= 2) {
      if (size % tp || size / tp < 2) continue;
      best = pick(l, n, tp, size / tp, max_gpus);
      if (best >= 0) rule = "no tensor-parallel group within a node fits; pipeline stages added";
    }
  if (best < 0) return -1;
  memplan_layout *b = &l[best];
  int idle = max_gpus - b->gpus;
  char extra[64] = "";
  if (idle > 0) snprintf(extra, sizeof extra, "; %d GPU%s left idle", idle, idle > 1 ? "s" : "");
  snprintf(b->why, sizeof b->why,
           "%s; %d replica%s of %d GPU%s, %.2f GB weights per GPU, KV for %lld tokens per "
           "replica%s",
           rule, b->dp, b->dp > 1 ? "s" : "", b->tp * b->pp, b->tp * b->pp > 1 ? "s" : "",
           b->weight_bytes / GB, (long long)b->kv_tokens, extra);
  return best;
}
