// The simulator's cost model: how long one engine step takes on simulated devices, priced op by
// op from the shapes the executor (engine/executor.c) would run, on a device described by a
// hardware profile, with collectives priced over a link topology. No math is executed.
//
// Per op: max(flops / achieved flop rate, bytes / achieved bandwidth) + launch overhead, where
// the achieved rates come from efficiency curves (small GEMMs are not priced at peak), unless
// the profile carries a measured time table for that op's shape (`shardcheck profile`), which
// then wins. Attention prices prefill (compute-bound) and decode (KV-read-bound, growing with
// the context) separately. Collectives: ring all-reduce 2(n-1)/n x bytes/bw + 2(n-1) x latency
// (a tree when it is cheaper), all-gather (n-1)/n x bytes/bw + (n-1) x latency, PP send/recv
// bytes/bw + latency; a group that spans nodes is priced on the inter-node link. PP: stage
// times per micro-batch and the transfers between stages are laid out on a timeline (each
// stage runs micro-batches in order, each waits for the previous stage), so the bubble emerges
// from the schedule.
//
// Not here: what a step contains (engine/scheduler.c), how a batch splits into micro-batches
// (engine/executor.h, exec_split_microbatches), what the hardware YAML says (config/hardware.c
// reads it into sim_hw), the virtual clock and event loop (runner/runner.c).
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "kernels/knobs.h"

#define SIM_CURVE_MAX 32
#define SIM_TABLES_MAX 64

// A curve through (x, y) points, x strictly increasing and > 0. n == 0: absent.
typedef struct sim_curve {
  int n;
  double x[SIM_CURVE_MAX];
  double y[SIM_CURVE_MAX];
} sim_curve;

// y at x, linear in log(x) between points, the end values beyond the ends (efficiency curves).
// `dflt` when the curve is absent.
double sim_curve_eff(const sim_curve *c, double x, double dflt);
// A time table's value at x: log-log interpolation between points; beyond the last point the
// time grows in proportion to x (t_last * x / x_last), below the first it stays t_first.
// Negative when the curve is absent.
double sim_curve_time(const sim_curve *c, double x);
// y at x, linear between points, the end values beyond the ends; `dflt` when absent.
double sim_curve_lin(const sim_curve *c, double x, double dflt);

typedef struct sim_link {
  char name[32];    // "nvlink4", "pcie4", "ib-ndr", ...
  double bw;        // bytes/s per direction per GPU
  double latency_s; // per hop, seconds
} sim_link;

// The named links (a table with sources in sim_links.c): nvlink3, nvlink4, nvlink5, pcie4,
// pcie5, ib-hdr, ib-ndr, eth-100g, eth-400g, memory. False for an unknown name.
bool sim_link_lookup(const char *name, sim_link *out);
// Writes "nvlink3, nvlink4, ..." into buf.
void sim_link_names(char *buf, int cap);

// A measured GEMM: seconds vs rows m for y(m x n) = x(m x k) . w(k x n)^T at `threads`.
typedef struct sim_gemm_table {
  int n, k, threads;
  sim_curve t; // x: m, y: seconds
} sim_gemm_table;

// Measured attention of one layer on one rank for one sequence, at `threads`.
typedef struct sim_attn_table {
  int heads, kv_heads, head_dim, threads; // heads and kv_heads on the rank
  sim_curve decode;  // x: context length (tokens in the KV cache), y: seconds for one token
  sim_curve prefill; // x: prompt tokens from position 0, y: seconds for all of them
} sim_attn_table;

#define SIM_OVERHEAD_TABLES 16

// A measured per-step residual of one replica of `tp` ranks while `replicas` such replicas
// (itself included) run on the host: a whole engine decode step minus the cost model's price
// of it from the same profile, vs the step's rows; and, where measured, what a step that also
// computes a prompt (or a chunk of one) costs beyond that, vs the prompt tokens (the host work
// of a prefill: its sampling, its other kernels, its block table).
typedef struct sim_overhead_table {
  int tp, replicas;
  sim_curve s;       // x: rows in the step (sequences of a decode step), y: seconds (may be < 0)
  sim_curve prefill; // x: prompt tokens in the step, y: seconds beyond s at the step's decode
                     // rows (may be < 0); n 0: not measured, s is read at all the step's rows
} sim_overhead_table;

// A measured all-reduce over `ranks` ranks.
typedef struct sim_coll_table {
  int ranks;
  sim_curve allreduce; // x: bytes per rank, y: seconds
} sim_coll_table;

// How much slower an engine's decode attention runs in a batch that also computes a prompt
// chunk, for one attention shape on a rank (as sim_attn_table) and one count of decodes in the
// batch: an engine that runs both through one variable-length kernel (vLLM's FlashAttention)
// gives up its decode kernel's split of long contexts. Measured, e.g. from a kernel profile
// (docs/calibration.md); between two counts of a shape the factor is interpolated in log(count).
#define SIM_MIXED_MAX 32
typedef struct sim_mixed_attn {
  int heads, kv_heads, head_dim, decodes;
  sim_curve factor; // x: a decode's context (tokens), y: its attention's factor (>= 1)
} sim_mixed_attn;

// The serving engine's own costs and knobs, apart from the GPU's (a profile's `engine:` block,
// docs/calibration.md). All zero is the idealized engine: no host time beyond the step
// overhead, device time as the roofline prices it, the scenario's scheduler limits.
typedef struct sim_engine {
  double step_s;      // fixed host time per step, s (added to the step overhead)
  double seq_s;       // host time per scheduled sequence of a step, s
  double tp_step_s;   // host time per step per rank of the replica beyond the first, s: the
                      // driver handing each step to its workers (vLLM V0's Ray or
                      // multiprocessing workers); a run at tp 1 cannot see it
  double prefill_eff; // kernel time of prefill tokens is divided by this (collectives are
                      // not); <= 0: 1
  double decode_eff;  // kernel time of decode tokens (a sequence computing 1 token); <= 0: 1
  sim_mixed_attn mixed_attn[SIM_MIXED_MAX]; // by attention shape; none: decodes priced alike
  int n_mixed_attn;
  double error;       // the relative half-width of the intervals of what this block predicts
                      // (`shardcheck calibrate` writes its fit's); 0: unknown, read as
                      // SIM_IDEALIZED_ERROR (the idealized engine's documented error)
  int logits_bytes;   // bytes a logit takes in the TP all-gather of the sampled rows' logits: 2
                      // for an engine that gathers them in the model's dtype (vLLM), 4 for f32
                      // (shardcheck's engine); 0: 4
  // The scheduler's knobs of the measured engine, one field per row of kernels/knobs.h (its
  // pkey: max_running, token_budget, block_size, chunked_prefill, no_evict, prefix_caching,
  // reserve_full_isl, kv_watermark with has_kv_watermark, num_gpu_blocks). 0: the scenario's
  // limits; a flag is 1 on, -1 off (chunked_prefill -1: a prompt, up to the token budget, in
  // one step); a value replaces the scenario's when its has_ flag is set.
  SC_KNOBS(SC_KNOB_PROFILE_FIELD)
} sim_engine;

// The idealized engine's error on the published runs of docs/calibration.md ("Validation
// across layouts"): the half-width of the interval put around what a profile without a fitted
// engine block predicts.
#define SIM_IDEALIZED_ERROR 0.5

// The relative half-width of e's predictions: its error, or SIM_IDEALIZED_ERROR when unknown.
double sim_engine_error(const sim_engine *e);

// The idealized engine: no engine costs, efficiencies 1, the scenario's limits.
sim_engine sim_engine_defaults(void);

// One simulated device and its links, read from a hardware profile.
typedef struct sim_hw {
  double mem_bytes;       // device memory, bytes
  double mem_bw;          // peak memory bandwidth, bytes/s
  double mem_eff;         // achieved fraction of mem_bw on streaming reads (0 < e <= 1)
  double flops_f32, flops_f16, flops_bf16, flops_int8; // dense peak, FLOP/s (int8 0: unknown)
  double flops_fp8;       // dense fp8 peak, FLOP/s (0: no fp8 tensor cores; fp8 at the bf16 rate)
  sim_curve gemm_eff;     // achieved fraction of peak flops vs GEMM rows m (absent: 1)
  double launch_s;        // per kernel launch
  double step_overhead_s; // per engine step (scheduling, sampling, host work)
  sim_link intra;         // between GPUs of one node
  sim_link inter;         // between nodes
  int gpus_per_node;
  // CPU profiles: the "devices" are shares of one host with this many cores; ranks x threads
  // beyond it run proportionally slower. 0: devices are independent (GPUs).
  int host_cores;
  // measured tables (`shardcheck profile`); each wins over the roofline for its shapes
  sim_gemm_table gemm[SIM_TABLES_MAX];
  int n_gemm;
  sim_attn_table attn[8];
  int n_attn;
  sim_coll_table coll[8];
  int n_coll;
  // per-step residuals by layout; one matching the layout (same tp, as many replicas on the
  // host, pp 1) replaces step_overhead_s for it
  sim_overhead_table overhead[SIM_OVERHEAD_TABLES];
  int n_overhead;
  sim_engine engine; // the serving engine's costs (all zero: the idealized engine)
} sim_hw;

// Dtype codes the cost model knows (the engine's sc_dtype maps onto them).
typedef enum sim_dtype { SIM_F32, SIM_F16, SIM_BF16, SIM_I8, SIM_I4, SIM_FP8 } sim_dtype;
double sim_dtype_bytes(sim_dtype t); // 4, 2, 2, 1, 0.5, 1

// The model's shapes, as the shard plan splits them.
typedef struct sim_model {
  int dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim, vocab;
  bool tied_embeddings;
  sim_dtype weight_dtype; // weights on the device (int8/int4: fewer bytes read)
  sim_dtype act_dtype;    // activations, KV cache and collectives (f32 on the CPU backend)
  bool kv_fp8;            // the KV cache is fp8 instead (1 byte; attention at the fp8 rate)
} sim_model;

// Where one replica sits and how it is split.
typedef struct sim_layout {
  int tp, pp;
  int first_gpu;     // index of the replica's first GPU in the cluster (replica r: r * tp * pp)
  int threads;       // CPU profiles: BLAS threads per rank (the engine's); GPUs: ignored
  int cluster_ranks; // CPU profiles: ranks running on the host at once (all replicas)
} sim_layout;

// Every price of hw times f (f > 0): times (launch, step overhead, link latencies, the measured
// tables' seconds) x f, rates (memory and link bandwidths, FLOP/s) / f. Efficiencies, memory
// and the topology are left alone, so every step sim_step_price prices takes f times as long.
void sim_hw_scale(sim_hw *hw, double f);

// One sequence's part of a step: tokens [start, start + n), logits wanted for the last one.
typedef struct sim_seq {
  int start;
  int n;
  bool logits;
} sim_seq;

// What one step cost, and where the time went.
typedef struct sim_step_cost {
  double total_s;      // start of the step to the last stage's end (what the clock advances)
  double compute_s;    // summed over the ops of one rank of each stage (stage 0 .. pp-1)
  double comm_s;       // collectives and PP transfers on the critical path
  double overhead_s;   // the step overhead (step_overhead_s or its table) + launches + the
                       // engine block's step_s + seq_s per sequence
  double host_s;       // the host's part of overhead_s: the step overhead and the engine
                       // block's step_s and seq_s (not the launches)
  double bubble_frac;  // pp > 1: idle fraction of the stages between the step's start and end
  int n_microbatches;
} sim_step_cost;

// Prices one step: seqs[0..n) split into micro-batches at mb_first[0..n_mb] (micro-batch j
// holds seqs [mb_first[j], mb_first[j+1]); n_mb == 1 when pp == 1). Returns 0 and fills out;
// -1 for an invalid argument (n < 1, tp or pp < 1, n_mb outside 1..n).
int sim_step_price(const sim_hw *hw, const sim_model *m, const sim_layout *l, const sim_seq *seqs,
                   int n, const int *mb_first, int n_mb, sim_step_cost *out);

// --- the pieces, exposed for tests and for `shardcheck profile`'s residual fit (seconds)
// One GEMM of m rows on one rank.
double sim_gemm_s(const sim_hw *hw, const sim_layout *l, int m, int n, int k, sim_dtype w,
                  sim_dtype act);
// Attention of one layer on one rank over seqs (heads, kv_heads on the rank).
double sim_attention_s(const sim_hw *hw, const sim_layout *l, const sim_seq *seqs, int n,
                       int heads, int kv_heads, int head_dim, sim_dtype kv);
// An elementwise op moving `bytes` through memory.
double sim_elementwise_s(const sim_hw *hw, const sim_layout *l, double bytes);
// Collectives over `ranks` ranks starting at GPU `first` (consecutive), `bytes` per rank.
double sim_allreduce_s(const sim_hw *hw, int first, int ranks, double bytes);
double sim_allgather_s(const sim_hw *hw, int first, int ranks, double bytes);
// A point-to-point transfer from GPU a to GPU b.
double sim_sendrecv_s(const sim_hw *hw, int a, int b, double bytes);
