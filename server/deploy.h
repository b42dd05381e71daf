// A served deployment from `shardcheck serve`'s flags: the model (preset or directory), dtype,
// layout, limits and mode become the engine config `shardcheck run` would build for the same
// deployment (scenarios/deployment.h: in mode sim the simulated device, the priced shapes and
// the planner's KV capacity), so a served request is scheduled as a scenario's would be.
//
// Running it is server/server.h's; the flags themselves, cli/cmd_serve.c's.
#pragma once

#include <stdbool.h>

#include "kernels/status.h"
#include "server/server.h"

typedef struct serve_deploy {
  const char *model; // a preset name, a preset .yaml or a model directory
  const char *dtype; // NULL: the model's own
  const char *kv_cache_dtype; // NULL or "auto": the activations'; "fp8" (mode sim)
  int tp, pp, dp;
  const char *backend;           // real: "cpu" (default) or "cuda"
  bool sim;                      // mode sim: simulated GPUs of profile
  const char *profile;           // sim: a hardware profile name or .yaml (required); real: optional
  bool process;                  // real: each replica a `shardcheck worker` process
  int max_num_seqs;              // 0: 256
  int max_num_batched_tokens;    // 0: 8192
  int block_size;                // 0: 16
  double gpu_memory_utilization; // 0: 0.9 (the planner keeps 1 - it free)
  int max_model_len;             // 0: the model's context
  int threads;                   // real cpu: BLAS threads per rank (0: cores / ranks)
  uint64_t weights_seed;
  bool prefix_caching; // full KV blocks cached by content (limits.prefix_caching)
  bool reserve_full_isl;  // admit only what fits whole (limits.reserve_full_isl)
  int num_gpu_blocks;     // KV blocks per replica (limits.num_gpu_blocks_override; 0: planner's)
  // sim: the answers' own lengths (where EOS falls): NULL for SERVE_SIM_OUTPUT_LEN; "none"
  // (never EOS, as `shardcheck run` simulates); a workload output length as the scenario
  // language writes it ("200", "{uniform: [50, 400]}", "{lognormal: {median: 200, sigma:
  // 0.9}}"); or "dataset:FILE.jsonl", the output_tokens of a dataset's lines
  const char *sim_output_len;
} serve_deploy;

// The default of --sim-output-len: chat-like answers, median 256 tokens.
#define SERVE_SIM_OUTPUT_LEN "{lognormal: {median: 256, sigma: 0.8}}"
enum { SERVE_SIM_LENS = 16384 }; // draws kept (a dataset's first lines this many at most)

// Fills c's deployment fields (engine, dp, replicas, max_model_len, synthetic_text, layout,
// sim_lens) from d, through the scenario language's validation and the planner. *keep receives what the
// engine config points into (free it with serve_deploy_free after the server). SC_INVALID with
// the reason when the deployment is refused (a bad model, dtype, layout, a plan that does not
// fit).
sc_status serve_deploy_config(const serve_deploy *d, server_config *c, void **keep, sc_error *err);
void serve_deploy_free(void *keep);
