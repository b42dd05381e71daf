// The engine API of one replica (one TP x PP group): create, submit, cancel, step -> events,
// drain, stats, free. Several engines may live in one process (DP = several replicas).
//
// Status codes out; never prints, never exits. Calls on one engine must come from one thread
// at a time (the replica handle serialises them); the ranks' threads are the engine's own.
// Hot weight swaps are the fault-injection layer's, built on engine_free + engine_new.
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/model.h"
#include "engine/sampler.h"
#include "kernels/clock.h"
#include "kernels/device.h"
#include "kernels/knobs.h"
#include "kernels/sim/sim_cost.h"
#include "kernels/status.h"

// The simulated replica (backend "sim"): each step is priced by the cost model (kernels/sim/
// sim_cost.h) and reported in info.duration_ns; the engine's clock is the caller's virtual
// clock, which the engine never advances itself. Tokens are synthetic ids (never eos), so
// lengths come from the requests. kv_blocks must be given (the planner's figure).
typedef struct engine_sim {
  const sim_hw *hw;      // the device and links (caller owns)
  sim_model model;       // shapes and dtypes as priced
  sim_layout layout;     // where the replica sits (tp and pp are the engine's own)
  double static_bytes;   // per GPU: weights + workspace (the planner's), for rank memory
  double kv_block_bytes; // per GPU per KV block
  uint64_t detect_timeout_ns;     // faults: a hung replica is declared lost this long after it
                                  // stopped (the router's heartbeat timeout; 0: 2 s)
  uint64_t collective_timeout_ns; // faults: a hung rank fails its replica this long after it
                                  // stopped (the collective deadline; 0: the engine's)
} engine_sim;

typedef struct engine_config {
  model_config model;
  const char *weights_dir;  // safetensors directory; NULL: random weights from weights_seed
  uint64_t weights_seed;    // seed of generated weights
  sc_dtype weight_dtype;    // real backends: how the matmul weights are held. SC_F32 (default),
                            // SC_I8: weight-only int8, one f32 scale per output channel,
                            // quantized from the loaded weights at load, or SC_BF16 (cuda):
                            // rounded to bf16 at load, multiplied with bf16-rounded activations
                            // and fp32 sums; norms, embeddings and the KV cache stay f32
  const char *backend;      // device backend: "cpu", "cuda", or "sim" (below)
  int tp, pp;               // layout of the replica
  // cuda: the GPUs the ranks take. Rank i (pp_rank * tp + tp_rank) of this replica runs on
  // devices[(first_device + i) % n_devices]; with n_devices 0 on GPU (first_device + i) modulo
  // the GPUs the machine has. Ranks that land on one GPU share it (loopback collectives).
  int devices[16];
  int n_devices;
  int first_device;
  int kv_blocks;            // KV blocks per rank; 0: enough for max_running full-context
                            // sequences, capped at kv_bytes_max per rank
  size_t kv_bytes_max;      // cap for the default above (1 GiB)
  // the scheduler's knobs: block_size, max_running, token_budget, prefill_chunk, no_evict,
  // prefix_caching, reserve_full_isl, kv_watermark (kernels/knobs.h, the rows of engine 1;
  // what each does: engine/scheduler.h)
  SC_KNOBS(SC_KNOB_ENGINE_FIELD)
  int threads;              // cpu backend: BLAS threads per rank; 0: cores / (tp * pp), >= 1
                            // (ranks as processes: cores / the job's ranks on this host)
  bool mpi;                 // ranks are the processes of this MPI job (exec_config.mpi): the
                            // engine runs on rank 0, every other rank calls engine_follow
  uint64_t collective_timeout_ns; // deadline of one collective (30 s)
  sc_clock clock;           // step timing; monotonic by default
  // backend "sim": no weights are loaded and no math runs (see engine_sim).
  engine_sim sim;
  // Optional: called for every row of logits before it is sampled (tests, quality checks).
  void (*on_logits)(void *ud, uint64_t req_id, int index, const float *logits, int vocab);
  void *on_logits_ud;
} engine_config;

// Defaults close to vLLM's; the model, tp and pp are left for the caller.
engine_config engine_config_defaults(void);

typedef struct engine_request {
  const int32_t *prompt; // (n_prompt) token ids, copied at submit
  int n_prompt;
  int max_tokens;        // generated tokens at most (>= 1)
  sampling_params sampling;
  bool stop_at_eos;      // finish when the model's eos_token_id is generated
  // Backend sim (the model computes nothing): what stands for the model's choices. 0 and 0
  // (what every scenario sends): tokens are a fixed function of (the engine's request id,
  // index), never EOS. `shardcheck serve` sets both, so that the same request gives the same
  // tokens and ends at EOS like a model's answer. Other backends ignore them; the worker
  // protocol does not carry them (simulated replicas run in-process).
  uint64_t sim_key; // nonzero: tokens are a function of (sim_key, index)
  int sim_len;      // > 0: the sim_len-th generated token is EOS, the answer's own end
} engine_request;

typedef enum engine_event_kind {
  ENGINE_EV_TOKEN,
  ENGINE_EV_FINISHED,
  ENGINE_EV_FAILED, // a request-scoped failure: this request ends (status), the engine lives on
} engine_event_kind;

typedef enum engine_finish_reason {
  FINISH_NONE = 0,
  FINISH_LENGTH,    // max_tokens generated
  FINISH_STOP,      // eos generated
  FINISH_CONTEXT,   // the model's context is full
  FINISH_CANCELLED, // engine_cancel
} engine_finish_reason;

const char *engine_finish_reason_name(engine_finish_reason r);

typedef struct engine_event {
  engine_event_kind kind;
  uint64_t req_id;
  int32_t token;              // ENGINE_EV_TOKEN: the id
  int index;                  // ENGINE_EV_TOKEN: 0 for the first generated token
  uint64_t sched_ns;          // ENGINE_EV_TOKEN index 0: when the request was first scheduled
                              // (the start of its first step, engine clock)
  engine_finish_reason reason; // ENGINE_EV_FINISHED
  int n_generated;            // ENGINE_EV_FINISHED, ENGINE_EV_FAILED: tokens generated in all
  sc_status status;           // ENGINE_EV_FAILED: SC_OOM (its device allocation failed) or
                              // SC_NUMERICAL (NaN/inf in its logits)
  int cached_tokens;          // ENGINE_EV_FINISHED: prompt tokens its first admission found in
                              // the prefix cache; -1 without prefix caching
} engine_event;

typedef struct engine_step_info {
  uint64_t t_start_ns;   // engine clock
  uint64_t duration_ns;  // of the executor run (0 when nothing ran); sim: the priced time
  uint64_t host_ns;      // sim: the host's part of duration_ns (the step overhead and the
                         // engine block's step_s and seq_s); a real backend: 0
  double bubble_frac;    // sim with pp > 1: the pipeline's idle fraction (else 0)
  int n_seqs;            // sequences in the step
  int prefill_tokens;    // prompt (or recomputed) tokens computed
  int decode_tokens;     // generation tokens computed
  int n_preempted;       // sequences preempted to make room
  int queue_len;         // waiting after the step
  int running;           // running after the step
  int kv_used, kv_total; // blocks after the step
} engine_step_info;

typedef struct engine_step_result {
  const engine_event *events; // owned by the engine; valid until engine_step or engine_cancel
  int n_events;
  engine_step_info info;
} engine_step_result;

typedef struct engine_stats {
  int queue_len, running;
  int kv_used, kv_total, kv_block_size;
  uint64_t steps, preemptions, generated_tokens;
  uint64_t prefix_hit_tokens;   // prefix caching: tokens admitted with their KV already cached
  uint64_t prefix_query_tokens; // prefix caching: tokens admitted (looked up in the cache)
  int n_ranks;
  uint64_t oom_failures;       // requests failed with SC_OOM
  uint64_t numerical_failures; // requests failed with SC_NUMERICAL (NaN/inf logits)
  bool unhealthy;              // allocations keep failing (3 in a row with no success between):
                               // the router should stop sending here
} engine_stats;

typedef struct engine engine;

// Builds the replica: checks the layout, loads every rank's weight slices, allocates KV and
// workspace, starts the rank threads. On error *out is NULL and err says why.
sc_status engine_new(const engine_config *cfg, engine **out, sc_error *err);
void engine_free(engine *e); // NULL is a no-op
// Ranks as processes (cfg->mpi), on every rank of the job but 0, while rank 0 runs engine_new
// with the same cfg: builds this rank's part and serves rank 0's steps until rank 0 frees its
// engine (SC_OK) or the job fails (the status, err says why). Collective with rank 0's
// engine_new and engine_free.
sc_status engine_follow(const engine_config *cfg, sc_error *err);

// Queues a request; *id identifies it in events. SC_INVALID (err says why) for an empty
// prompt, a token id outside the vocabulary, a prompt that leaves no room in the context, or
// one that needs more KV blocks than the cache has; SC_ABORTED while draining.
sc_status engine_submit(engine *e, const engine_request *r, uint64_t *id, sc_error *err);
// Cancels a queued or running request: its blocks are freed at once and a FINISHED event
// (FINISH_CANCELLED) comes with the next step. SC_INVALID for an unknown id.
sc_status engine_cancel(engine *e, uint64_t id);
// Runs one step (or none, when nothing is queued) and returns its events. A failure in the
// executor (device, collective) is returned with err; the engine is then unusable.
sc_status engine_step(engine *e, engine_step_result *out, sc_error *err);
// true when nothing is queued, running, or waiting to be reported.
bool engine_idle(const engine *e);
// Stops (false) or resumes (true) admitting new requests; running ones go on.
void engine_set_admitting(engine *e, bool admitting);
// Backend sim: the ranks on the host when the next steps are priced (sim_layout.cluster_ranks;
// the simulated replica sets it to its own ranks plus those of its peers in a step). At least
// tp x pp; other backends ignore it.
void engine_sim_set_cluster_ranks(engine *e, int ranks);
void engine_stats_get(const engine *e, engine_stats *out);
// Device memory of rank r: in use through its device and in total.
sc_status engine_rank_mem(engine *e, int r, size_t *used, size_t *total);

// --- fault hooks (faults/ through the replica handle). Callable from any thread, also while
// a step runs. Backend "sim" has no devices: these return SC_INVALID there (the simulated
// replica acts on faults itself).
// Sets the device fault of rank r (-1: every rank), see kernels/device.h.
sc_status engine_set_rank_fault(engine *e, int r, const dev_fault *f);
// Throttles the replica's links (every TP and PP group), see comm_shm_group_set_slow.
sc_status engine_set_link_fault(engine *e, double factor, uint64_t latency_ns, double bandwidth);
