// The scheduler: iteration-level continuous batching over one replica's KV cache.
//
// Each step: running sequences first, in the order they were admitted (a decode token each,
// or their next prefill chunk), then waiting sequences FCFS while the per-step token budget,
// the running limit and free blocks allow. A prefill chunk is at most prefill_chunk tokens,
// so a long prompt never holds the whole budget and short prompts mix in beside it. When a
// running sequence needs a block and none is free, the most recently admitted running
// sequence is preempted by recompute: its blocks are freed and it returns to the front of
// the queue with its generated tokens appended to its prompt. Cancel frees blocks at once.
// With prefix caching a freed block keeps its content until its room is needed, so a preempted
// sequence re-admitted soon after finds most of its blocks again.
// Running the step is engine/executor.c's; sampling and events are engine/engine.c's.
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "engine/kv_cache.h"
#include "engine/sampler.h"
#include "kernels/knobs.h"

typedef enum seq_state { SEQ_WAITING, SEQ_RUNNING, SEQ_DONE } seq_state;

typedef struct seq {
  uint64_t id;
  int32_t *tokens;  // (cap) prompt, then generated tokens
  int n_tokens;     // prompt + generated so far
  int n_prompt;
  int cap;          // n_prompt + max_new, at most the context
  int n_computed;   // tokens whose KV is in the cache
  int max_new;      // generated tokens at most
  int n_generated;
  int32_t *blocks;  // (blocks_cap) block table
  int n_blocks;
  int blocks_cap;
  sampling_params sampling;
  bool stop_at_eos;
  int n_preempted;  // times this sequence was preempted
  seq_state state;
  // prefix caching: full blocks from the start whose hash is known (registered or matched),
  // and the hash of the last of them
  int n_hashed;
  uint64_t last_hash;
} seq;

// The scheduler's knobs: the rows of kernels/knobs.h it takes as they are (sched 1), and the
// watermark in blocks. What they do:
// - max_running: sequences in one step at most; token_budget: tokens in one step at most;
//   prefill_chunk: prefill tokens of one sequence in one step at most.
// - no_evict: false admits while free blocks last and preempts by recompute when a running
//   sequence cannot grow (vLLM's policy); true admits a sequence only when the cache holds
//   every running one at its full length (prompt + max_new) beside it, so nothing is ever
//   preempted (TensorRT-LLM's default, GUARANTEED_NO_EVICT).
// - reserve_full_isl: vLLM's admission check (its scheduler_reserve_full_isl, on by default
//   from vLLM 0.19): a waiting sequence is admitted only when the free blocks hold all of its
//   tokens (prompt, and what it generated before a preemption), not just this step's chunk, so
//   a long prompt waits instead of being admitted and preempted half-way.
// - prefix_caching: vLLM's --enable-prefix-caching: each full block computed is registered
//   under the hash of its tokens and all before them (kv_cache.h), and a sequence admitted
//   without blocks (new, or preempted) first takes every registered block its tokens begin
//   with, computing only the rest (always its last token, whose logits it needs).
// - prefill_first: waiting sequences are admitted before the running ones are looked at, and a
//   step that admitted any computes their prompts only; the running sequences decode in the
//   steps that admit nothing (vLLM V0's default scheduler without chunked prefill:
//   vllm/core/scheduler.py, _schedule_default; SGLang's without mixed chunks). Without it a
//   step computes the running sequences first and fills the rest of the budget with prompts.
// - whole_prompts: a waiting sequence is admitted only when all of its prompt fits what is left
//   of the step's budget (and the chunk), FCFS, so a prompt is never cut to fill a step (vLLM
//   V0 without chunked prefill; TensorRT-LLM without chunked context, whose scheduler
//   docs show the prompt that does not fit the rest of max_num_tokens waiting for the next
//   step). A prompt larger than the whole budget still goes, in chunks, in a step of its own.
typedef struct sched_config {
  SC_KNOBS(SC_KNOB_SCHED_FIELD)
  // vLLM's watermark (kv_watermark x the cache): blocks an admission must leave free while any
  // sequence runs (vLLM keeps 1% of the cache), room for the running ones to grow before
  // someone is preempted.
  int watermark_blocks;
} sched_config;

// One sequence's part of a step: tokens [start, start + n); sample when that reaches the end.
typedef struct sched_item {
  seq *s;
  int start;
  int n;
  bool sample;
} sched_item;

typedef struct scheduler scheduler;

sc_status sched_new(sched_config cfg, kv_cache *kv, scheduler **out);
void sched_free(scheduler *s); // NULL is a no-op; does not free the seqs

// Queues q at the back (FCFS). SC_OOM if the queue cannot grow.
sc_status sched_add(scheduler *s, seq *q);
// Takes q out of whichever queue holds it and returns its blocks; q->state = SEQ_DONE.
void sched_remove(scheduler *s, seq *q);

// Plans one step into items (capacity max_running) and returns how many; *n_preempted says
// how many sequences were preempted to make room.
int sched_plan(scheduler *s, sched_item *items, int *n_preempted);
// The next step of a multi-step decode (decode_steps, engine.c): one token of every running
// sequence, with no admission and no preemption. Returns how many items (the running ones), or
// 0 when one of them has more than one token to compute or the free blocks do not hold the
// step (the caller ends the multi-step run and plans anew).
int sched_plan_continue(scheduler *s, sched_item *items);
// After a step computed some of q's tokens (q->n_computed grew): registers the blocks that
// became full (prefix caching; a no-op without it).
void sched_computed(scheduler *s, seq *q);
// Prompt and recomputed tokens prefix caching spared since the scheduler began, and the tokens
// of every admission it looked up (vLLM's prefix_cache_hits and prefix_cache_queries).
uint64_t sched_prefix_hit_tokens(const scheduler *s);
uint64_t sched_prefix_query_tokens(const scheduler *s);

int sched_n_waiting(const scheduler *s);
int sched_n_running(const scheduler *s);
// Some seq in either queue (the first running, else the first waiting), or NULL.
seq *sched_any(const scheduler *s);
// The seq with that id in either queue, or NULL.
seq *sched_find(const scheduler *s, uint64_t id);
