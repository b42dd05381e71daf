// The engine's scheduler knobs, one row each (docs/design.md, "The tables"): the one list that
// makes the fields of scn_limits, engine_config and sched_config, the keys of a scenario's
// `limits` and of a hardware profile's `engine` block, their defaults and bounds, the wire
// encoding of an engine config, how a profile's knob replaces the scenario's, the profile
// writer (`shardcheck calibrate`) and the run's config JSON. Adding a knob is a row here and
// its behaviour (engine/scheduler.c).
//
// It sits on the lowest floor because the simulator's profile (kernels/sim/sim_cost.h) holds
// knobs too; each floor expands the rows for its own use. Nothing here knows what a knob does.
#pragma once

#include <stdbool.h>

// X(name, type, dflt, engine, sched, pform, pkey, ok, expect, json)
//   name    the field of scn_limits (and engine_config, sched_config) and the `limits` key
//   type    int | bool | double
//   dflt    the default (a scenario's and engine_config_defaults')
//   engine  1: engine_config carries it (and the worker protocol); 0: the scenario only
//   sched   1: the scheduler takes it as it is (sched_config); 0: the engine turns it into
//           something else (block_size: the KV cache; kv_watermark: blocks)
//   pform   how a profile's engine block sets it: SC_KNOB_P_INT (an integer; 0 or absent: the
//           scenario's), SC_KNOB_P_BOOL (true/false; absent: the scenario's), SC_KNOB_P_VALUE
//           (a number; absent: the scenario's), SC_KNOB_P_CHUNK (chunked_prefill: false puts a
//           whole prompt up to the token budget in one step)
//   pkey    the profile's key and sim_engine's field
//   ok      a limit's bound, an expression of its value v; expect says it in messages
//   json    SC_KNOB_J_ALWAYS: always in the run's config JSON; SC_KNOB_J_SET: only when not its
//           default (so a new knob leaves the config of a run that does not set it as it was)
#define SC_KNOBS(X)                                                                                \
  /* running sequences per replica */                                                              \
  X(max_running, int, 256, 1, 1, SC_KNOB_P_INT, max_running, v >= 1, "an integer >= 1",          \
    SC_KNOB_J_ALWAYS)                                                                              \
  /* tokens per step */                                                                            \
  X(token_budget, int, 8192, 1, 1, SC_KNOB_P_INT, token_budget, v >= 1, "an integer >= 1",       \
    SC_KNOB_J_ALWAYS)                                                                              \
  /* KV block, tokens */                                                                           \
  X(block_size, int, 16, 1, 0, SC_KNOB_P_INT, block_size, v >= 1, "an integer >= 1",             \
    SC_KNOB_J_ALWAYS)                                                                              \
  /* prefill tokens of one sequence per step (0: token_budget / 4) */                              \
  X(prefill_chunk, int, 0, 1, 1, SC_KNOB_P_CHUNK, chunked_prefill, v >= 0,                        \
    "an integer >= 0 (0 = token_budget / 4)", SC_KNOB_J_ALWAYS)                                    \
  /* admit only what fits at full length; never preempt */                                         \
  X(no_evict, bool, false, 1, 1, SC_KNOB_P_BOOL, no_evict, true, "", SC_KNOB_J_SET)               \
  /* full KV blocks cached by content and reused */                                                \
  X(prefix_caching, bool, false, 1, 1, SC_KNOB_P_BOOL, prefix_caching, true, "", SC_KNOB_J_SET)   \
  /* admit only when all of a request's tokens fit the free blocks */                              \
  X(reserve_full_isl, bool, false, 1, 1, SC_KNOB_P_BOOL, reserve_full_isl, true, "",              \
    SC_KNOB_J_SET)                                                                                 \
  /* fraction of KV blocks an admission leaves free while others run */                            \
  X(kv_watermark, double, 0, 1, 0, SC_KNOB_P_VALUE, kv_watermark, v >= 0 && v <= 0.5,            \
    "a fraction in [0, 0.5] (vLLM keeps 0.01)", SC_KNOB_J_SET)                                     \
  /* KV blocks per replica instead of the planner's (0: the planner's) */                          \
  X(num_gpu_blocks_override, int, 0, 0, 0, SC_KNOB_P_INT, num_gpu_blocks, v >= 0,                 \
    "an integer >= 0 (0 = the planner's)", SC_KNOB_J_SET)                                          \
  /* a step that admits prompts computes no decodes (vLLM V0 without chunked prefill) */           \
  X(prefill_first, bool, false, 1, 1, SC_KNOB_P_BOOL, prefill_first, true, "", SC_KNOB_J_SET)      \
  /* a new prompt is admitted only whole, within what is left of the step's budget */             \
  X(whole_prompts, bool, false, 1, 1, SC_KNOB_P_BOOL, whole_prompts, true, "", SC_KNOB_J_SET)      \
  /* decode steps per scheduling (vLLM's num_scheduler_steps): host work once, tokens in bursts */ \
  X(decode_steps, int, 1, 1, 0, SC_KNOB_P_INT, decode_steps, v >= 1 && v <= 64,                   \
    "an integer in [1, 64]", SC_KNOB_J_SET)

// --- expansions every floor shares

// The json column: when a knob goes in the run's config JSON.
enum { SC_KNOB_J_ALWAYS, SC_KNOB_J_SET };

#define SC_KNOB_CAT_(a, b) a##b
#define SC_KNOB_CAT(a, b) SC_KNOB_CAT_(a, b)
#define SC_KNOB_IF_1(...) __VA_ARGS__
#define SC_KNOB_IF_0(...)
// SC_KNOB_IF(flag)(text): text when flag is 1.
#define SC_KNOB_IF(flag) SC_KNOB_CAT(SC_KNOB_IF_, flag)

// A struct's field for every knob: scn_limits (all), engine_config (engine 1), sched_config
// (sched 1).
#define SC_KNOB_FIELD(name, type, dflt, e, s, pf, pkey, ok, ex, j) type name;
#define SC_KNOB_ENGINE_FIELD(name, type, dflt, e, s, pf, pkey, ok, ex, j)                          \
  SC_KNOB_IF(e)(type name;)
#define SC_KNOB_SCHED_FIELD(name, type, dflt, e, s, pf, pkey, ok, ex, j) SC_KNOB_IF(s)(type name;)
// Designated initializers of the defaults: `.name = dflt,` (all; engine 1 only).
#define SC_KNOB_DEFAULT(name, type, dflt, e, s, pf, pkey, ok, ex, j) .name = (dflt),
#define SC_KNOB_ENGINE_DEFAULT(name, type, dflt, e, s, pf, pkey, ok, ex, j)                        \
  SC_KNOB_IF(e)(.name = (dflt), )

// sc_knob_ok_NAME(v): whether v is within the knob's bound (its row's ok).
#define SC_KNOB_OK_FN(name, type, dflt, e, s, pf, pkey, ok, ex, j)                                 \
  static inline bool sc_knob_ok_##name(type v) { return (void)v, (ok); }
SC_KNOBS(SC_KNOB_OK_FN)

// A profile's engine block: sim_engine's field of each knob (0: the scenario's). An int or a
// chunked_prefill-like flag is an int (1 on, -1 off for flags); a value has a has_ flag.
#define SC_KNOB_PFIELD_SC_KNOB_P_INT(pkey) int pkey;
#define SC_KNOB_PFIELD_SC_KNOB_P_BOOL(pkey) int pkey;
#define SC_KNOB_PFIELD_SC_KNOB_P_CHUNK(pkey) int pkey;
#define SC_KNOB_PFIELD_SC_KNOB_P_VALUE(pkey)                                                       \
  bool has_##pkey;                                                                                 \
  double pkey;
#define SC_KNOB_PROFILE_FIELD(name, type, dflt, e, s, pf, pkey, ok, ex, j)                         \
  SC_KNOB_CAT(SC_KNOB_PFIELD_, pf)(pkey)
