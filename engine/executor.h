// The executor: runs one scheduled step of a replica on all of its TP x PP ranks.
//
// Ranks are threads (one per rank when the replica has more than one) or the processes of an
// MPI job (exec_config.mpi: one rank each, the steps carried by engine/exec_dist.c), each with
// its own device, its weight slices in one arena, its KV storage in one arena, and its
// activations in one arena. TP collectives (two all-reduces per layer, an all-gather of the vocab-split
// logits) go through a comm group per PP stage; activations move stage to stage through a
// comm group per TP index, in micro-batches so that stages overlap. What to run comes from
// engine/scheduler.c; which block holds what is engine/kv_cache.c's. Sampling is the
// engine's (on the host, from the logits this returns).
//
// Each sequence may hold device memory of its own on every rank (exec_seq_mem: its block
// table, kept on the device and updated only where it changed), allocated when the engine
// admits it, so that an allocation failure ends one request instead of the replica.
//
// Faults: device and link faults are set through this file (executor_set_fault,
// executor_set_link_fault). Nothing waits forever on a hung rank: its TP/PP peers give up at
// their collective deadline, and a watchdog in executor_run abandons a step once a rank that
// still has work has had its device hung for comm_deadline_ns (the only bound when the rank
// has no peer waiting on it: tp = pp = 1, or the last PP stage). Either way every group is
// aborted and every device released (device_fault_release), so all rank threads return.
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/model.h"
#include "engine/weights.h"
#include "kernels/device.h"
#include "kernels/status.h"

typedef struct exec_config {
  model_config model;
  const weight_source *weights; // read during executor_new only
  const char *backend;          // device backend, "cpu" or "cuda"
  int tp, pp;
  const int *devices;           // cuda: the GPU of each rank, as engine_config's (n_devices
  int n_devices;                // of them, or NULL / 0: first_device + rank, modulo the GPUs
  int first_device;             // there are)
  int block_size;          // tokens per KV block
  int n_blocks;            // KV blocks per rank (same logical blocks on every rank)
  int max_tokens;          // most tokens in one step (the scheduler's token budget)
  int max_seqs;            // most sequences in one step
  uint64_t comm_deadline_ns; // deadline of one collective, and of a hung rank (0: 60 s)
  sc_dtype weight_dtype;     // linear layers' weights: SC_F32, SC_I8 (weight-only, per-row
                             // scales; needs a backend with matmul_q8) or SC_BF16 (needs
                             // matmul_bf16: cuda)
  bool mpi; // ranks are the processes of this MPI job (kernels/mpi.h), which has exactly tp x pp
            // of them: this process holds rank i = its job rank only, its groups are MPI's
            // (comm_group_open_mpi); rank 0 runs the steps (executor_run) and the others
            // serve them (executor_follow). executor_new is collective over the job.
} exec_config;

// One sequence's device memory on every rank (see the file comment); opaque.
typedef struct exec_seq_mem exec_seq_mem;

// One sequence's share of a step: tokens [start, start + n) of the sequence, whose KV goes
// to (and attention reads from) the blocks listed. want_logits: return the logits of the
// last of those tokens.
typedef struct exec_seq {
  int32_t start;         // position of the first token computed in this step
  int32_t n;             // tokens computed in this step (>= 1)
  const int32_t *tokens; // (n) their ids
  const int32_t *blocks; // block table: enough blocks for start + n tokens
  int n_blocks;
  bool want_logits;
  exec_seq_mem *mem;     // the sequence's device memory; NULL: its block table is uploaded
                         // from the host every step
} exec_seq;

typedef struct exec_batch {
  int n_seqs;
  const exec_seq *seqs;
  float *logits;   // host (n_want, vocab): one row per seq with want_logits, in seq order
  int32_t *tokens; // NULL, or host (n_want): instead of the logits, each row's greedy token
                   // (its largest logit, the first on ties), picked on the devices; -1 for a
                   // row that held a NaN or an infinity (executor_picks_greedy says whether
                   // the backend can)
  const dev_sample_row *draws; // NULL, or host (n_want) with tokens: each row's token drawn
                               // on the devices as sampler_pick would (dev_sample; greedy for a
                               // row of temperature 0); executor_picks_sampled says whether
} exec_batch;

typedef struct executor executor;

// How a step's sequences split into micro-batches (one per PP stage at most, balanced by
// tokens, each at least one sequence): the executor's rule, shared with the simulator so both
// run the same schedule. n_tok[i] = tokens of sequence i; writes mb_first[0..n_mb] (micro-batch
// j = sequences [mb_first[j], mb_first[j + 1])) and returns n_mb. mb_first holds pp + 1 ints.
int exec_split_microbatches(const int *n_tok, int n_seqs, int pp, int *mb_first);
// The step of that rule: whether micro-batch m (holding sequences from some index before i,
// tok tokens before sequence i) ends before sequence i.
bool exec_mb_starts_here(long tok, long total, int i, int n_seqs, int m, int pp);

// Loads every rank's weights and allocates KV and workspace. On error *out is NULL.
sc_status executor_new(const exec_config *cfg, executor **out, sc_error *err);
void executor_free(executor *ex); // NULL is a no-op

// Runs one step. On error the replica's communicators are aborted and its devices released
// (every rank returns) and the executor is unusable: later calls return the same status. err
// names the failing rank and the cause, e.g. "rank 1 (tp_rank=1 pp_rank=0): q_proj: device
// lost"; when a hung device is behind it, "rank R (...): device hung; " comes first, and a
// step abandoned by the watchdog gives SC_TIMEOUT with "rank R (...): device hung: no progress
// for T s (the collective deadline)".
sc_status executor_run(executor *ex, const exec_batch *b, sc_error *err);
// Whether executor_run can return greedy tokens (exec_batch.tokens): the last stage's devices
// have dev_argmax.
bool executor_picks_greedy(const executor *ex);
// Whether executor_run can draw sampled tokens (exec_batch.draws): one TP rank (the draw needs
// the whole vocabulary) whose last stage has dev_sample.
bool executor_picks_sampled(const executor *ex);

// Allocates a sequence's device memory: one small buffer on every rank (on a failure the
// others are freed). SC_OOM when a device is out of memory (the executor stays usable);
// another status (e.g. SC_DEVICE: a lost device) means the device failed. err names the rank.
// On error *out is NULL. Call between steps, from the thread that runs them.
sc_status executor_seq_mem_new(executor *ex, exec_seq_mem **out, sc_error *err);
void executor_seq_mem_free(executor *ex, exec_seq_mem *m); // NULL is a no-op

// Sets rank r's device fault (r = -1: every rank); SC_INVALID for r out of range. Callable
// from any thread, also while a step runs.
sc_status executor_set_fault(executor *ex, int r, const dev_fault *f);
// Throttles every TP and PP group (comm_shm_group_set_slow); any thread, any time.
void executor_set_link_fault(executor *ex, double factor, uint64_t latency_ns, double bandwidth);

// Ranks as processes (exec_config.mpi), every rank but 0: serves rank 0's steps (each runs
// this rank's shard and answers; a step that fails raises an alarm to rank 0 with the error)
// until rank 0's executor_free tells it to stop (SC_OK), or the job's world group fails (its
// status). SC_INVALID on rank 0 or without mpi. Call from the thread that made the executor.
sc_status executor_follow(executor *ex, sc_error *err);

int executor_n_ranks(const executor *ex);
// Device memory of rank r (pp_rank * tp + tp_rank): bytes in use through it and in total.
sc_status executor_rank_mem(executor *ex, int r, size_t *used, size_t *total);
