// Importing public per-operator measurements into a hardware profile's tables (`shardcheck
// profile import`, docs/profile.md "Measured elsewhere"), so the simulator prices a GPU nobody
// here owns on what its kernels were measured to take.
//
// Formats:
//   vidur-mlp    microsoft/vidur's data/profiling/compute/GPU/ORG/MODEL/mlp.csv: one row per
//                (num_tokens, num_tensor_parallel_workers) with time_stats.OP.median in ms of
//                each linear layer of one transformer layer on one rank (vLLM's kernels):
//                attn_pre_proj (q|k|v), attn_post_proj (o), mlp_up_proj (gate|up, gated MLP),
//                mlp_down_proj; the model's shape columns (n_head, n_kv_head, n_embd,
//                n_expanded_embd) must be the model's
//   vidur-allreduce  vidur's data/profiling/network/NET/all_reduce.csv: time_stats.all_reduce
//                .median in ms against size (bytes) and num_workers
// Each becomes the profile's tables: `gemm` {n, k, threads: 1, t: [[m, s], ...]} per linear
// layer and TP degree, at most 24 rows m from 1 to the largest measured (log-spaced), and
// `allreduce` {ranks, t: [[bytes, s], ...]} per worker count. Nothing of the data is kept
// but what the written profile holds.
//
// Not here: measuring this machine (config/profile.c), reading profiles (config/hardware.c),
// the command line (cli/cmd_profile_import.c).
#pragma once

#include <stdio.h>

#include "engine/model.h"
#include "kernels/sim/sim_cost.h"
#include "kernels/status.h"

typedef struct kimport_result {
  int gemm_tables, allreduce_tables; // written
  int tp[8];                         // the TP degrees the GEMMs were measured at
  int n_tp;
} kimport_result;

// Reads vidur's mlp.csv at path for model m into hw's gemm tables (replacing any of the same
// shape; SC_INVALID when the file's model is another, naming the column, or when it has no
// row). Appends to *r.
sc_status kimport_vidur_mlp(const char *path, const model_config *m, sim_hw *hw, kimport_result *r,
                            sc_error *err);
// Reads vidur's all_reduce.csv at path into hw's allreduce tables (one per worker count).
sc_status kimport_vidur_allreduce(const char *path, sim_hw *hw, kimport_result *r, sc_error *err);
// Writes hw's gemm and allreduce tables as a profile's YAML keys.
void kimport_write_tables(FILE *o, const sim_hw *hw);
