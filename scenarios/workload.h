// The workload generator: the requests a scenario sends (prompt tokens, output length, class)
// and when an open-loop phase sends them. Deterministic: request i of a deployment depends only
// on (seed, i), and arrival gap j of phase p only on (seed, p, j), so every deployment of a run
// sees the same requests in the same order, and the same seed gives the same run.
//
// Nothing here knows about time sources, replicas or the database: the runner asks for the next
// request and the next gap; closed-loop users (ramp, fixed) are the runner's.
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "kernels/status.h"
#include "scenarios/scenario.h"

typedef struct workload workload;

typedef struct wl_request {
  const int32_t *prompt; // (n_prompt) token ids: generated ones in [3, vocab); dataset text
                         // tokenized with BOS first. Owned by the generator, valid until the
                         // next workload_request or workload_free
  int n_prompt;
  int max_tokens;        // output tokens asked for (>= 1)
  int class_idx;         // index into the classes (dataset: 0)
  int prefix;            // the shared prefix it starts with (index into workload.prefixes), -1
  int n_prefix;          // of n_prompt, the shared prefix's tokens (0: none)
  int64_t conv;          // its conversation (workload.conversations), -1: none
  int turn;              // its turn in the conversation (0 first; 0 without conversations)
  int64_t prev;          // a trace's conversation: the request index of its turn before, -1:
                         // none (workload.conversations: the runner knows, -1 here)
} wl_request;

// Builds the generator for s (reads s->workload.dataset when set: one JSON object per line,
// {"prompt_tokens": n, "output_tokens": m} or {"prompt": "text", "output_tokens": m}; text is
// tokenized with the byte tokenizer; a trace (s->workload.trace) adds "arrival_s": t to every
// line, and its lengths are never clamped: a line that does not fit the context is an error). Input + output are kept within the model's context
// (input first clamped to context - 1, then output to context - input). SC_INVALID names the
// dataset's FILE:LINE and the field for a bad line; SC_IO when the file cannot be read.
sc_status workload_new(const scenario *s, uint64_t seed, workload **out, sc_error *err);
void workload_free(workload *w); // NULL is a no-op

// A trace file (workload.trace) checked line by line without a model: *n requests, the last
// arrival *last_ns (ns from the first request's arrival... from 0: arrival_s as written).
// SC_INVALID names FILE:LINE and the field; SC_IO when it cannot be read.
sc_status workload_trace_scan(const char *path, int *n, uint64_t *last_ns, sc_error *err);

// Request `index` (0, 1, 2, ... within one deployment; any order, any number of times: the
// result depends only on seed and index). Dataset lines are used in file order, cycling.
void workload_request(workload *w, uint64_t index, wl_request *out);

// The prompt of a request the runner keeps: turn `turn` of conversation conv when conv >= 0
// (workload_turn), else request key (workload_request).
void workload_prompt(workload *w, uint64_t key, int64_t conv, int turn, wl_request *out);

// --- multi-turn conversations (workload.conversations; docs/scenarios.md)
// Whether the workload is made of conversations: the runner then asks for turns, not requests.
bool workload_conversations(const workload *w);
// Turns of conversation conv (>= 1): its drawn count, cut to the turns whose prompt and output
// fit the model's context (the parser refuses a scenario whose conversations can outgrow it).
int workload_turns(workload *w, uint64_t conv);
// Turn `turn` (in [0, workload_turns)) of conversation conv: the shared prefix, every earlier
// message followed by its reply (synthetic tokens as long as that turn's output), then the new
// message; a pure function of (seed, conv, turn), valid like workload_request's.
void workload_turn(workload *w, uint64_t conv, int turn, wl_request *out);
// The pause between a turn's end and the conversation's next turn (workload.conversations.think).
uint64_t workload_think_ns(const workload *w);

int workload_n_classes(const workload *w);
const char *workload_class_name(const workload *w, int idx); // "dataset" for a dataset

// Gap in ns before arrival j (j = 0: the first arrival, counted from the phase start) of open-
// loop phase `phase` (index into s->workload.phases; must be SCN_PHASE_RATE): poisson =
// exponential gaps of mean 1/rate; constant = exactly 1/rate (first at 0); gamma = gamma gaps
// with shape `burstiness` and mean 1/rate; trace = the recorded gap (arrival j - arrival j-1,
// the first from 0; 0 beyond the trace's end).
uint64_t workload_gap_ns(const workload *w, int phase, uint64_t j);

// --- the tables: length distributions and arrival processes, one row each (docs/design.md:
// the one place to add one is scenarios/workload.c). The scenario language reads names and
// forms from here; the draws and gaps are the generator's own.

// How a distribution's parameters are written under prompts[].input / output.
typedef enum wl_dist_form {
  WL_FORM_COUNT,  // a plain integer >= 1: `input: 64` (fixed a)
  WL_FORM_PAIR,   // {NAME: [a, b]}: two integers, 1 <= a <= b
  WL_FORM_PARAMS, // {NAME: {A_KEY: a, B_KEY: b}}: numbers, a >= 1 and b >= 0
} wl_dist_form;

typedef struct wl_dist_info {
  const char *name;          // "uniform": the key of its mapping ("fixed" is a bare count)
  wl_dist_form form;
  const char *a_key, *b_key; // WL_FORM_PARAMS: the keys of a and b ("mean", "stddev")
} wl_dist_info;

typedef struct wl_arrival_info {
  const char *name; // a rate phase's `arrival` and the phase row's: "poisson", ...
  bool from_trace;  // only workload.trace's one phase has it (no scenario names it)
  bool burstiness;  // takes burstiness, its shape
} wl_arrival_info;

// The row of distribution k, of arrival process a (static; NULL outside the enum).
const wl_dist_info *workload_dist(scn_dist_kind k);
const wl_arrival_info *workload_arrival(scn_arrival a);
const char *workload_arrival_name(scn_arrival a); // "poisson", ...; "unknown" outside the enum
// The largest token count a draw of d gives in practice, before clamping: a bounded
// distribution's largest value; normal mean + 6 stddev; lognormal median * e^(6 sigma). What
// the scenario language checks prefixes and conversations against the model's context with.
double workload_dist_bound(const scn_dist *d);

// --- the deterministic random numbers the generator (and others: chaos faults) draw from
// splitmix64 of (seed, stream, index): independent streams without state.
uint64_t wl_hash(uint64_t seed, uint64_t stream, uint64_t index);
// Uniform in [0, 1) from a hash.
double wl_unit(uint64_t h);
