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

// --- the deterministic random numbers the generator (and others: chaos faults) draw from
// splitmix64 of (seed, stream, index): independent streams without state.
uint64_t wl_hash(uint64_t seed, uint64_t stream, uint64_t index);
// Uniform in [0, 1) from a hash.
double wl_unit(uint64_t h);
