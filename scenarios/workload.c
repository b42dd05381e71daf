// The workload generator (see workload.h): prompt classes or a JSONL dataset turned into
// requests, and the arrival gaps of open-loop (rate) phases, all drawn from a counter-based
// hash so that request i and gap j are pure functions of (seed, i) and (seed, phase, j).
//
// Parsing the scenario's workload block is scenarios/scenario_workload.c (names and forms
// from the tables here); deciding when a closed-loop user sends its next request, and what
// to do with a request, is the runner's.
//
// Random numbers: wl_hash(seed, stream, index) is three rounds of the splitmix64 finalizer over
// seed, stream and index. Each quantity has its own stream (WL_STREAM_* below): the class of
// request i, its input length, its output length, its prompt tokens, and the gaps of phase p
// (stream WL_STREAM_GAP + p). A draw that needs several numbers (a normal: two uniforms, Box-
// Muller; a gamma: a rejection loop) takes them from sub-streams keyed by the draw's own hash,
// so no draw moves any other. Prompt tokens come two per hash from the splitmix64 sequence
// keyed by the request's token hash: 3 + floor(half * (vocab - 3) / 2^32), ids in [3, vocab).
//
// Lengths: a class draw is rounded to the nearest integer and clamped to [1, context]
// (context = the model's max_seq_len); then input is clamped to context - 1 and output to
// context - input, so every request fits. Distributions: fixed a; uniform integers in
// [round(a), round(b)]; normal mean a, stddev b; lognormal median a (mu = ln a), sigma b.
//
// Dataset (workload.dataset, already resolved against the scenario's directory by the
// parser, opened as it is): one JSON
// object per line, lines used in file order and cycled (request i uses line i mod n).
//   {"prompt_tokens": n, "output_tokens": m}  n random prompt tokens (drawn per request index)
//   {"prompt": "text", "output_tokens": m}    text through the byte tokenizer (engine/
//                                             tokenizer.h: BOS first when the model has one)
// "output_tokens" is optional and defaults to 128 (WL_DEFAULT_OUTPUT_TOKENS, the output length
// of vLLM's random-dataset benchmark). n and m are integers >= 1; exactly one of
// "prompt_tokens" and "prompt" (a non-empty string); no other key. Blank lines are skipped; a
// dataset with no request is an error. Lengths are clamped to the context as above (a long
// text keeps its first context - 1 tokens). Errors: SC_INVALID "FILE:LINE: key 'K': expected
// ..., got ..." (FILE: the dataset path as stored), SC_IO
// when the file cannot be read. A scenario has prompts or a dataset (the parser refuses both);
// given both, the dataset is used. A text prompt's ids are the tokenizer's (a BOS id below 3
// first); generated prompts are in [3, vocab).
//
// Arrivals: poisson = exponential gaps of mean 1/rate; constant = arrival j at exactly j/rate
// (gap j = round(j/rate) - round((j-1)/rate) in ns, so the first gap is 0 and rounding never
// accumulates); gamma = Gamma(k, 1/(rate k)) gaps, k = burstiness (mean 1/rate, CV^2 = 1/k),
// by Marsaglia-Tsang with the U^(1/k) boost when k < 1.
//
// Cost: workload_request allocates nothing; generated prompts are written into one buffer of
// the largest prompt the workload can make (reused by every call), dataset text prompts point
// into the tokens read at load time. A generator is not safe to share between threads.
#include "scenarios/workload.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "engine/tokenizer.h"

enum {
  WL_DEFAULT_OUTPUT_TOKENS = 128, // a dataset line without "output_tokens"
  WL_FIRST_TOKEN = 3,             // ids 0..2 are special (pad/unk, BOS, EOS in Llama presets)
  WL_GAMMA_MAX_TRIES = 1000,      // Marsaglia-Tsang accepts > 95% per try; a cap for safety
};
#define WL_TRACE_MAX_S 1e9 // a trace's arrival_s below this (about 31 years; fits ns in u64)

// Streams of wl_hash used here ("wl" in the high bytes); other users of wl_hash pick others.
static const uint64_t WL_STREAM_CLASS = 0x776c000000000001ull;
static const uint64_t WL_STREAM_INPUT = 0x776c000000000002ull;
static const uint64_t WL_STREAM_OUTPUT = 0x776c000000000003ull;
static const uint64_t WL_STREAM_TOKENS = 0x776c000000000004ull;
static const uint64_t WL_STREAM_GAP = 0x776c000000010000ull; // + phase index
// Shared prefixes and conversations (streams of their own: a workload without them draws
// exactly what it did before they existed).
static const uint64_t WL_STREAM_PREFIX_PICK = 0x776c000000000005ull; // which prefix, per request
static const uint64_t WL_STREAM_PREFIX_LEN = 0x776c000000000006ull;  // a prefix's length
static const uint64_t WL_STREAM_PREFIX_TOK = 0x776c000000000007ull;  // a prefix's tokens
static const uint64_t WL_STREAM_CONV = 0x776c000000000008ull;        // a conversation's key
static const uint64_t WL_STREAM_TURNS = 0x776c000000000009ull;       // its turn count
static const uint64_t WL_STREAM_REPLY = 0x776c00000000000aull;       // a reply's tokens
// Sub-streams of one draw (wl_hash(draw_hash, WL_SUB_*, k)).
static const uint64_t WL_SUB_UNIT = 1;
static const uint64_t WL_SUB_NORMAL = 2;

static const uint64_t WL_GOLDEN = 0x9e3779b97f4a7c15ull;

// One dataset line after validation and clamping.
typedef struct wl_line {
  int n_prompt;     // prompt tokens, in [1, context - 1]
  int max_tokens;   // in [1, context - n_prompt]
  uint64_t arrival_ns; // trace: ns from 0 (arrival_s as written), non-decreasing by line
  int64_t text_off; // offset of its tokens in workload.text; -1: random tokens per request
  int conv;         // trace: its conversation (index in order of first appearance), -1: none
  int prev;         // trace: the line of its conversation before it, -1: none
  uint64_t conv_id; // trace, while loading: the hash of its "conversation" (0: none given)
  int first_turn, n_turns; // a conversation dataset's line: its turns in workload.dturns
} wl_line;

// One turn of a conversation dataset's line: its message and the output it asks for.
typedef struct wl_dturn {
  int n_own;        // the message's tokens
  int max_tokens;   // the output asked for (and the length of its reply in later turns)
  int64_t text_off; // offset of its tokens in workload.text; -1: tokens drawn per conversation
} wl_dturn;

// What a phase needs to make gaps.
typedef struct wl_phase {
  scn_phase_kind kind;
  scn_arrival arrival;
  double mean_ns; // 1e9 / rate (RATE phases)
  double shape;   // gamma shape k (= burstiness)
} wl_phase;

struct workload {
  uint64_t seed;
  int context; // tokens: the model's max_seq_len
  int vocab;   // the model's vocab_size

  // classes (when no dataset)
  int n_classes;
  scn_class classes[SCN_MAX_CLASSES];
  char names[SCN_MAX_CLASSES][32]; // class names ("class<i>" when the scenario left one empty)
  double cdf[SCN_MAX_CLASSES];     // cumulative weights / total; cdf[n_classes - 1] == 1

  // dataset
  bool dataset;
  bool trace; // the dataset is a trace: arrival_s on every line, lengths exact
  wl_line *lines; // (n_lines) in file order, blank lines left out
  int n_lines, lines_cap;
  int32_t *text;  // (n_text) token ids of the "prompt" lines, back to back
  int64_t n_text, text_cap;
  // a trace's conversations, while loading: id hash -> its latest line (open addressing)
  uint64_t *conv_keys; // (conv_cap) 0: empty
  int *conv_line;      // (conv_cap) the latest line of that conversation
  int *conv_idx;       // (conv_cap) its index
  int conv_cap, n_convs;
  int *chain;          // (chain_cap) scratch of trace_prompt: a conversation's lines
  int chain_cap;
  wl_dturn *dturns;    // (n_dturns) a conversation dataset's turns, line after line
  int64_t n_dturns, dturns_cap;

  wl_phase phases[SCN_MAX_PHASES];
  int n_phases;

  // shared prefixes and conversations (classes only)
  int n_prefixes;
  int *prefix_len;    // (n_prefixes) tokens, each in [1, context - 2]
  double *prefix_cdf; // (n_prefixes) cumulative Zipf weights / total; the last is 1
  bool conv;          // conversations
  scn_dist turns;
  uint64_t think_ns;

  int32_t *buf; // (buf_cap) the prompt of the last generated request; reused by every call
  int buf_cap;
};

// --- the hash and the draws

static uint64_t mix64(uint64_t z) { // splitmix64: one step of the sequence from state z
  z += WL_GOLDEN;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t wl_hash(uint64_t seed, uint64_t stream, uint64_t index) {
  return mix64(mix64(mix64(seed) ^ stream) ^ index);
}

double wl_unit(uint64_t h) { return (double)(h >> 11) * 0x1.0p-53; }

// Uniform [0, 1): draw k of the sub-stream of key.
static double unit_at(uint64_t key, uint64_t k) { return wl_unit(wl_hash(key, WL_SUB_UNIT, k)); }

// Standard normal: draw k of key's normal sub-stream (Box-Muller of two uniforms).
static double normal_at(uint64_t key, uint64_t k) {
  double u1 = wl_unit(wl_hash(key, WL_SUB_NORMAL, 2 * k));
  double u2 = wl_unit(wl_hash(key, WL_SUB_NORMAL, 2 * k + 1));
  return sqrt(-2.0 * log1p(-u1)) * cos(2.0 * M_PI * u2); // 1 - u1 in (0, 1]: finite
}

// Gamma(k, 1) from key: Marsaglia and Tsang (2000), "A simple method for generating gamma
// variables"; for k < 1, Gamma(k) = Gamma(k + 1) * U^(1/k).
static double gamma_draw(uint64_t key, double k) {
  double boost = 1.0;
  if (k < 1.0) {
    boost = pow(unit_at(key, 0), 1.0 / k);
    k += 1.0;
  }
  double d = k - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
  for (uint64_t i = 0; i < WL_GAMMA_MAX_TRIES; i++) {
    double x = normal_at(key, i);
    double v = 1.0 + c * x;
    if (v <= 0.0) continue;
    v = v * v * v;
    double u = unit_at(key, i + 1);
    double x2 = x * x;
    if (u < 1.0 - 0.0331 * x2 * x2 || log(u) < 0.5 * x2 + d * (1.0 - v + log(v)))
      return boost * d * v;
  }
  return boost * d; // not reached in practice; deterministic all the same
}

// A token count: x rounded and clamped to [1, hi] (NaN gives 1).
static int clamp_len(double x, int hi) {
  x = floor(x + 0.5);
  if (!(x >= 1.0)) return 1;
  if (x >= (double)hi) return hi;
  return (int)x;
}

// Writes n random prompt ids of the sequence keyed by key into b (two ids per hash).
static void fill_key(const workload *w, int32_t *b, int n, uint64_t key) {
  uint64_t range = (uint64_t)(w->vocab - WL_FIRST_TOKEN);
  for (int j = 0; j < n; j += 2) {
    uint64_t h = mix64(key + (uint64_t)j * WL_GOLDEN);
    b[j] = WL_FIRST_TOKEN + (int32_t)(((h >> 32) * range) >> 32);
    if (j + 1 < n) b[j + 1] = WL_FIRST_TOKEN + (int32_t)(((h & 0xffffffffull) * range) >> 32);
  }
}

// Writes n random prompt ids of request index into w->buf.
static void fill_tokens(workload *w, uint64_t index, int n) {
  fill_key(w, w->buf, n, wl_hash(w->seed, WL_STREAM_TOKENS, index));
}

static uint64_t to_ns(double x) {
  if (!(x > 0.0)) return 0;
  if (x >= 18446744073709549568.0) return UINT64_MAX; // the largest double below 2^64
  return (uint64_t)(x + 0.5);
}

// --- the tables: length distributions and arrival processes
//
// One row each: the name and form the scenario language reads (workload.h's info), and the
// generator's own behaviour. docs/design.md: adding one is a row here plus its functions.

// Distribution draws: d's value from its draw hash h, unrounded; the largest value a draw can
// give after clamp_len(., hi); what its parameters need (NULL: they are fine).
static double draw_fixed(const scn_dist *d, uint64_t h) {
  (void)h;
  return d->a;
}
static double draw_uniform(const scn_dist *d, uint64_t h) {
  double lo = floor(d->a + 0.5), hi = floor(d->b + 0.5);
  double v = lo + floor(wl_unit(h) * (hi - lo + 1.0));
  return v > hi ? hi : v;
}
static double draw_normal(const scn_dist *d, uint64_t h) { return d->a + d->b * normal_at(h, 0); }
static double draw_lognormal(const scn_dist *d, uint64_t h) {
  return d->a * exp(d->b * normal_at(h, 0));
}
static int max_a(const scn_dist *d, int hi) { return clamp_len(d->a, hi); }
static int max_b(const scn_dist *d, int hi) { return clamp_len(d->b, hi); }
static int max_unbounded(const scn_dist *d, int hi) {
  (void)d;
  return hi;
}
// The largest value in practice (workload_dist_bound): 6 standard deviations for the tails.
static double bound_a(const scn_dist *d) { return d->a; }
static double bound_b(const scn_dist *d) { return floor(d->b + 0.5); }
static double bound_normal(const scn_dist *d) { return d->a + 6.0 * d->b; }
static double bound_lognormal(const scn_dist *d) { return d->a * exp(6.0 * d->b); }
static const char *check_uniform(const scn_dist *d) { return d->a > d->b ? "a <= b" : NULL; }
static const char *check_normal(const scn_dist *d) { return d->b < 0 ? "stddev b >= 0" : NULL; }
static const char *check_lognormal(const scn_dist *d) {
  return d->a <= 0 || d->b < 0 ? "median a > 0 and sigma b >= 0" : NULL;
}

typedef struct dist_row {
  wl_dist_info info;
  double (*draw)(const scn_dist *d, uint64_t h);
  int (*max)(const scn_dist *d, int hi);
  double (*bound)(const scn_dist *d);      // its largest value in practice, unclamped
  const char *(*check)(const scn_dist *d); // optional
} dist_row;

static const dist_row dists[SCN_DIST_N] = {
    [SCN_DIST_FIXED] = {.info = {.name = "fixed", .form = WL_FORM_COUNT},
                        .draw = draw_fixed, .max = max_a, .bound = bound_a},
    [SCN_DIST_UNIFORM] = {.info = {.name = "uniform", .form = WL_FORM_PAIR},
                          .draw = draw_uniform, .max = max_b, .bound = bound_b,
                          .check = check_uniform},
    [SCN_DIST_NORMAL] = {.info = {.name = "normal", .form = WL_FORM_PARAMS, .a_key = "mean",
                                  .b_key = "stddev"},
                         .draw = draw_normal, .max = max_unbounded, .bound = bound_normal,
                         .check = check_normal},
    [SCN_DIST_LOGNORMAL] = {.info = {.name = "lognormal", .form = WL_FORM_PARAMS,
                                     .a_key = "median", .b_key = "sigma"},
                            .draw = draw_lognormal, .max = max_unbounded,
                            .bound = bound_lognormal, .check = check_lognormal},
};

// One draw of d for (stream, index), unrounded (d's kind is checked by setup_classes).
static double dist_draw(const scn_dist *d, uint64_t seed, uint64_t stream, uint64_t index) {
  return dists[d->kind].draw(d, wl_hash(seed, stream, index));
}

// Arrival gaps: the gap before arrival j of phase p (index `phase`), in ns.
static uint64_t gap_poisson(const workload *w, const wl_phase *p, int phase, uint64_t j) {
  double u = wl_unit(wl_hash(w->seed, WL_STREAM_GAP + (uint64_t)phase, j));
  return to_ns(-log1p(-u) * p->mean_ns);
}
static uint64_t gap_constant(const workload *w, const wl_phase *p, int phase, uint64_t j) {
  (void)w, (void)phase;
  if (j == 0) return 0;
  return to_ns(floor((double)j * p->mean_ns + 0.5)) -
         to_ns(floor((double)(j - 1) * p->mean_ns + 0.5));
}
static uint64_t gap_gamma(const workload *w, const wl_phase *p, int phase, uint64_t j) {
  uint64_t key = wl_hash(w->seed, WL_STREAM_GAP + (uint64_t)phase, j);
  return to_ns(gamma_draw(key, p->shape) * p->mean_ns / p->shape);
}
static uint64_t gap_trace(const workload *w, const wl_phase *p, int phase, uint64_t j) {
  (void)p, (void)phase;
  if (!w->trace || j >= (uint64_t)w->n_lines) return 0;
  return w->lines[j].arrival_ns - (j ? w->lines[j - 1].arrival_ns : 0);
}

typedef struct arrival_row {
  wl_arrival_info info;
  uint64_t (*gap)(const workload *w, const wl_phase *p, int phase, uint64_t j);
} arrival_row;

static const arrival_row arrivals[SCN_ARRIVAL_N] = {
    [SCN_ARRIVAL_POISSON] = {{"poisson", false, false}, gap_poisson},
    [SCN_ARRIVAL_CONSTANT] = {{"constant", false, false}, gap_constant},
    [SCN_ARRIVAL_GAMMA] = {{"gamma", false, true}, gap_gamma},
    [SCN_ARRIVAL_TRACE] = {{"trace", true, false}, gap_trace},
};

const wl_dist_info *workload_dist(scn_dist_kind k) {
  return (unsigned)k < SCN_DIST_N && dists[k].info.name ? &dists[k].info : NULL;
}

const wl_arrival_info *workload_arrival(scn_arrival a) {
  return (unsigned)a < SCN_ARRIVAL_N && arrivals[a].info.name ? &arrivals[a].info : NULL;
}

double workload_dist_bound(const scn_dist *d) {
  return (unsigned)d->kind < SCN_DIST_N ? dists[d->kind].bound(d) : INFINITY;
}

const char *workload_arrival_name(scn_arrival a) {
  const wl_arrival_info *i = workload_arrival(a);
  return i ? i->name : "unknown";
}

// --- validation of what the parser gave (the parser reports with FILE:LINE:COL; these are
// the generator's own preconditions)

static sc_status check_dist(const scn_dist *d, const char *cls, const char *which,
                            sc_error *err) {
  const char *why = NULL;
  const dist_row *r = (unsigned)d->kind < SCN_DIST_N ? &dists[d->kind] : NULL;
  if (!isfinite(d->a) || !isfinite(d->b)) why = "finite parameters";
  else if (!r) why = "a known distribution";
  else if (r->check) why = r->check(d);
  if (!why) return SC_OK;
  return sc_fail(err, SC_INVALID, "workload: class '%s': %s: %s needs %s, got a=%g b=%g", cls,
                 which, r ? r->info.name : "unknown", why, d->a, d->b);
}

static sc_status setup_classes(workload *w, const scn_workload *wl, sc_error *err) {
  if (wl->n_classes < 1 || wl->n_classes > SCN_MAX_CLASSES)
    return sc_fail(err, SC_INVALID,
                   "workload: expected 1 to %d prompt classes or a dataset, got %d classes",
                   SCN_MAX_CLASSES, wl->n_classes);
  w->n_classes = wl->n_classes;
  double total = 0;
  for (int i = 0; i < wl->n_classes; i++) {
    const scn_class *c = &wl->classes[i];
    w->classes[i] = *c;
    if (c->name[0]) snprintf(w->names[i], sizeof w->names[i], "%.31s", c->name);
    else snprintf(w->names[i], sizeof w->names[i], "class%d", i);
    if (!(c->weight > 0) || !isfinite(c->weight))
      return sc_fail(err, SC_INVALID, "workload: class '%s': weight must be > 0, got %g",
                     w->names[i], c->weight);
    SC_TRY(check_dist(&c->input, w->names[i], "input", err));
    SC_TRY(check_dist(&c->output, w->names[i], "output", err));
    total += c->weight;
    w->cdf[i] = total;
  }
  if (!isfinite(total))
    return sc_fail(err, SC_INVALID, "workload: class weights sum to %g", total);
  for (int i = 0; i < w->n_classes; i++) w->cdf[i] /= total;
  w->cdf[w->n_classes - 1] = 1.0;
  return SC_OK;
}

static sc_status setup_phases(workload *w, const scn_workload *wl, sc_error *err) {
  if (wl->n_phases < 0 || wl->n_phases > SCN_MAX_PHASES)
    return sc_fail(err, SC_INVALID, "workload: expected at most %d phases, got %d",
                   SCN_MAX_PHASES, wl->n_phases);
  w->n_phases = wl->n_phases;
  for (int i = 0; i < wl->n_phases; i++) {
    const scn_phase *p = &wl->phases[i];
    wl_phase *q = &w->phases[i];
    q->kind = p->kind;
    q->arrival = p->arrival;
    if (p->kind != SCN_PHASE_RATE) continue;
    if (!(p->rate > 0) || !isfinite(p->rate))
      return sc_fail(err, SC_INVALID, "workload: phase '%s': rate must be > 0, got %g",
                     p->name, p->rate);
    if ((unsigned)p->arrival >= SCN_ARRIVAL_N ||
        arrivals[p->arrival].info.from_trace != wl->trace)
      return sc_fail(err, SC_INVALID, "workload: phase '%s': unknown arrival process %d",
                     p->name, (int)p->arrival);
    if (arrivals[p->arrival].info.burstiness &&
        (!(p->burstiness > 0) || !isfinite(p->burstiness)))
      return sc_fail(err, SC_INVALID,
                     "workload: phase '%s': gamma burstiness must be > 0, got %g", p->name,
                     p->burstiness);
    q->mean_ns = 1e9 / p->rate;
    q->shape = p->burstiness;
  }
  return SC_OK;
}

// Shared prefixes (their lengths, drawn once each, and the Zipf popularity) and conversations.
static sc_status setup_structure(workload *w, const scn_workload *wl, sc_error *err) {
  const scn_prefixes *px = &wl->prefixes;
  if (px->count < 0 || px->count > SCN_MAX_PREFIXES)
    return sc_fail(err, SC_INVALID, "workload: prefixes: expected 0 to %d, got %d",
                   SCN_MAX_PREFIXES, px->count);
  if (px->count > 0) {
    if (!(px->zipf >= 0) || !isfinite(px->zipf))
      return sc_fail(err, SC_INVALID, "workload: prefixes: zipf must be >= 0, got %g", px->zipf);
    SC_TRY(check_dist(&px->length, "prefixes", "length", err));
    if (w->context < 3)
      return sc_fail(err, SC_INVALID, "workload: a context of %d tokens has no room for a "
                     "shared prefix", w->context);
    w->n_prefixes = px->count;
    w->prefix_len = malloc((size_t)px->count * sizeof *w->prefix_len);
    w->prefix_cdf = malloc((size_t)px->count * sizeof *w->prefix_cdf);
    if (!w->prefix_len || !w->prefix_cdf)
      return sc_fail(err, SC_OOM, "workload: out of memory for %d prefixes", px->count);
    double total = 0;
    for (int i = 0; i < px->count; i++) {
      double x = dist_draw(&px->length, w->seed, WL_STREAM_PREFIX_LEN, (uint64_t)i);
      w->prefix_len[i] = clamp_len(x, w->context - 2); // room for one token and one output
      total += pow((double)(i + 1), -px->zipf);
      w->prefix_cdf[i] = total;
    }
    for (int i = 0; i < px->count; i++) w->prefix_cdf[i] /= total;
    w->prefix_cdf[px->count - 1] = 1.0;
  }
  if (wl->conversations.set) {
    SC_TRY(check_dist(&wl->conversations.turns, "conversations", "turns", err));
    w->conv = true;
    w->turns = wl->conversations.turns;
    w->think_ns = wl->conversations.think_ns;
  }
  if (w->n_prefixes || w->conv) w->buf_cap = w->context - 1; // a prompt fits the context
  return SC_OK;
}

// The class of request (or conversation) index: its weight's share of the draws.
static int pick_class(const workload *w, uint64_t index) {
  int c = 0;
  if (w->n_classes > 1) {
    double u = wl_unit(wl_hash(w->seed, WL_STREAM_CLASS, index));
    while (c < w->n_classes - 1 && u >= w->cdf[c]) c++;
  }
  return c;
}

// The shared prefix of request (or conversation) index, -1 without prefixes: the first whose
// cumulative popularity passes a uniform draw (binary search).
static int pick_prefix(const workload *w, uint64_t index) {
  if (!w->n_prefixes) return -1;
  double u = wl_unit(wl_hash(w->seed, WL_STREAM_PREFIX_PICK, index));
  int lo = 0, hi = w->n_prefixes - 1;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (u < w->prefix_cdf[mid]) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

// Writes prefix p (none: -1) at the start of w->buf; its length.
static int put_prefix(workload *w, int p) {
  if (p < 0) return 0;
  int n = w->prefix_len[p];
  fill_key(w, w->buf, n, wl_hash(w->seed, WL_STREAM_PREFIX_TOK, (uint64_t)p));
  return n;
}

// A request of a workload with shared prefixes and without conversations: the prefix, then the
// class's input drawn as before (index's own tokens), clamped to what the context leaves.
static void prefixed_request(workload *w, uint64_t index, wl_request *out) {
  int c = pick_class(w, index), p = pick_prefix(w, index);
  const scn_class *cls = &w->classes[c];
  int n_pre = put_prefix(w, p);
  int in = clamp_len(dist_draw(&cls->input, w->seed, WL_STREAM_INPUT, index), w->context);
  int outn = clamp_len(dist_draw(&cls->output, w->seed, WL_STREAM_OUTPUT, index), w->context);
  if (in > w->context - 1 - n_pre) in = w->context - 1 - n_pre;
  if (outn > w->context - n_pre - in) outn = w->context - n_pre - in;
  fill_key(w, w->buf + n_pre, in, wl_hash(w->seed, WL_STREAM_TOKENS, index));
  *out = (wl_request){.prompt = w->buf, .n_prompt = n_pre + in, .max_tokens = outn,
                      .class_idx = c, .prefix = p, .n_prefix = n_pre, .conv = -1, .prev = -1};
}

// Message i of conversation key ck (class cls): its new tokens and its reply's length.
static void message_lengths(const workload *w, const scn_class *cls, uint64_t ck, int i, int *in,
                            int *outn) {
  *in = clamp_len(dist_draw(&cls->input, ck, WL_STREAM_INPUT, (uint64_t)i), w->context);
  *outn = clamp_len(dist_draw(&cls->output, ck, WL_STREAM_OUTPUT, (uint64_t)i), w->context);
}

// --- the dataset

// A trace line of a conversation with a line before it, written into w->buf: the line before's
// prompt, its reply (tokens of the workload as long as its output), then this line's own
// tokens (its text, or tokens drawn for it), all cut at this line's prompt_tokens. False (buf
// unchanged) when the scratch of the chain cannot be had: the line's own tokens stand alone.
static bool trace_prompt(workload *w, uint64_t at) {
  int n = 0;
  for (int j = (int)at; j >= 0; j = w->lines[j].prev) n++;
  if (n > w->chain_cap) {
    int *c = realloc(w->chain, (size_t)n * sizeof *c);
    if (!c) return false;
    w->chain = c;
    w->chain_cap = n;
  }
  int k = n;
  for (int j = (int)at; j >= 0; j = w->lines[j].prev) w->chain[--k] = j;
  int len = 0; // w->buf holds the prompt of chain[i - 1], len tokens
  for (int i = 0; i < n; i++) {
    const wl_line *l = &w->lines[w->chain[i]];
    if (len > l->n_prompt) len = l->n_prompt;
    if (i > 0 && len < l->n_prompt) { // the reply of the line before
      const wl_line *p = &w->lines[w->chain[i - 1]];
      int r = p->max_tokens < l->n_prompt - len ? p->max_tokens : l->n_prompt - len;
      fill_key(w, w->buf + len, r, wl_hash(w->seed, WL_STREAM_REPLY, (uint64_t)w->chain[i - 1]));
      len += r;
    }
    int own = l->n_prompt - len;
    if (own > 0 && l->text_off >= 0)
      memcpy(w->buf + len, w->text + l->text_off, (size_t)own * sizeof *w->buf);
    else if (own > 0)
      fill_key(w, w->buf + len, own, wl_hash(w->seed, WL_STREAM_TOKENS, (uint64_t)w->chain[i]));
    len = l->n_prompt;
  }
  return true;
}

static const char *json_type_name(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER: return "an integer";
  case JSON_REAL: return "a real";
  case JSON_TRUE:
  case JSON_FALSE: return "a boolean";
  case JSON_NULL: return "null";
  }
  return "unknown";
}

// An integer >= 1 from key k of a dataset line.
static sc_status line_count(const json_t *v, const char *path, int line, const char *k, int *out,
                            sc_error *err) {
  if (!json_is_integer(v))
    return sc_fail(err, SC_INVALID, "%s:%d: key '%s': expected an integer >= 1, got %s", path,
                   line, k, json_type_name(v));
  json_int_t x = json_integer_value(v);
  if (x < 1 || x > INT_MAX)
    return sc_fail(err, SC_INVALID, "%s:%d: key '%s': expected an integer >= 1, got %lld", path,
                   line, k, (long long)x);
  *out = (int)x;
  return SC_OK;
}

static sc_status grow(void **p, int64_t *cap, int64_t need, size_t elem) {
  if (need <= *cap) return SC_OK;
  int64_t n = *cap ? *cap : 64;
  while (n < need) n *= 2;
  void *q = realloc(*p, (size_t)n * elem);
  if (!q) return SC_OOM;
  *p = q;
  *cap = n;
  return SC_OK;
}

static sc_status parse_turns(workload *w, const model_config *mc, const char *path, int lineno,
                             const json_t *v, wl_line *out, sc_error *err);

// Parses one non-blank line into *out (text tokens appended to w->text).
static sc_status parse_line(workload *w, const model_config *mc, const char *path, int lineno,
                            const char *text, size_t len, wl_line *out, sc_error *err) {
  json_error_t je;
  out->conv_id = 0;
  out->conv = out->prev = -1;
  out->first_turn = out->n_turns = 0;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  if (!root)
    return sc_fail(err, SC_INVALID, "%s:%d: expected one JSON object, got malformed JSON at "
                   "column %d: %s", path, lineno, je.column, je.text);
  sc_status st = SC_OK;
  int n_tokens = 0, max_tokens = WL_DEFAULT_OUTPUT_TOKENS;
  const char *prompt = NULL;
  bool has_tokens = false, has_arrival = false, has_turns = false;
  double arrival = 0;
  const char *k;
  json_t *v;
  if (!json_is_object(root)) {
    st = sc_fail(err, SC_INVALID, "%s:%d: expected one JSON object, got %s", path, lineno,
                 json_type_name(root));
    goto done;
  }
  json_object_foreach(root, k, v) {
    if (!strcmp(k, "prompt_tokens")) {
      st = line_count(v, path, lineno, k, &n_tokens, err);
      has_tokens = true;
    } else if (!strcmp(k, "output_tokens")) {
      st = line_count(v, path, lineno, k, &max_tokens, err);
    } else if (w->trace && !strcmp(k, "arrival_s")) {
      arrival = json_number_value(v);
      has_arrival = true;
      if (!json_is_number(v) || !(arrival >= 0 && arrival < WL_TRACE_MAX_S))
        st = sc_fail(err, SC_INVALID, "%s:%d: key 'arrival_s': expected seconds >= 0 (below %g), "
                     "got %s", path, lineno, WL_TRACE_MAX_S,
                     json_is_number(v) ? "a number out of range" : json_type_name(v));
    } else if (!w->trace && !strcmp(k, "turns")) {
      st = parse_turns(w, mc, path, lineno, v, out, err);
      has_turns = true;
    } else if (w->trace && !strcmp(k, "conversation")) {
      if (json_is_string(v) && json_string_length(v) > 0) {
        const char *id = json_string_value(v);
        uint64_t h = 0xcbf29ce484222325ull; // FNV-1a of "s:" and the text
        for (const char *c = "s:"; *c; c++) h = (h ^ (uint8_t)*c) * 0x100000001b3ull;
        for (size_t i = 0; i < json_string_length(v); i++)
          h = (h ^ (uint8_t)id[i]) * 0x100000001b3ull;
        out->conv_id = h ? h : 1;
      } else if (json_is_integer(v)) {
        out->conv_id = mix64((uint64_t)json_integer_value(v) ^ 0x636f6e76ull) | 1;
      } else {
        st = sc_fail(err, SC_INVALID, "%s:%d: key 'conversation': expected a non-empty string "
                     "or an integer, got %s", path, lineno,
                     json_is_string(v) ? "an empty string" : json_type_name(v));
      }
    } else if (!strcmp(k, "prompt")) {
      if (!json_is_string(v) || json_string_length(v) == 0)
        st = sc_fail(err, SC_INVALID, "%s:%d: key 'prompt': expected a non-empty string, got %s",
                     path, lineno, json_is_string(v) ? "an empty string" : json_type_name(v));
      else prompt = json_string_value(v);
    } else {
      st = sc_fail(err, SC_INVALID, "%s:%d: key '%.64s': expected one of %s", path, lineno, k,
                   w->trace ? "arrival_s, conversation, prompt_tokens, prompt, output_tokens"
                            : "prompt_tokens, prompt, output_tokens, turns");
    }
    if (st != SC_OK) goto done;
  }
  if (has_turns) {
    if (has_tokens || prompt)
      st = sc_fail(err, SC_INVALID, "%s:%d: key 'turns': a conversation gives its prompts in "
                   "its turns, not beside them", path, lineno);
    goto done;
  }
  if (has_tokens && prompt) {
    st = sc_fail(err, SC_INVALID,
                 "%s:%d: key 'prompt': expected either 'prompt' or 'prompt_tokens', got both",
                 path, lineno);
    goto done;
  }
  if (!has_tokens && !prompt) {
    st = sc_fail(err, SC_INVALID,
                 "%s:%d: key 'prompt_tokens': expected an integer >= 1 (or key 'prompt' with "
                 "text), got neither", path, lineno);
    goto done;
  }
  if (w->trace && !has_arrival) {
    st = sc_fail(err, SC_INVALID, "%s:%d: key 'arrival_s': missing (a trace gives every "
                 "request's arrival time in seconds)", path, lineno);
    goto done;
  }
  out->arrival_ns = to_ns(arrival * 1e9);
  int keep = w->context - 1;
  out->text_off = -1;
  if (prompt) {
    n_tokens = tokenizer_encode(mc, prompt, NULL, 0);
    if (n_tokens < keep) keep = n_tokens;
    if (grow((void **)&w->text, &w->text_cap, w->n_text + keep, sizeof *w->text) != SC_OK) {
      st = sc_fail(err, SC_OOM, "%s:%d: out of memory for the prompt's %d tokens", path, lineno,
                   keep);
      goto done;
    }
    tokenizer_encode(mc, prompt, w->text + w->n_text, keep);
    out->text_off = w->n_text;
    w->n_text += keep;
  }
  if (w->trace && (int64_t)n_tokens + max_tokens > w->context) {
    st = sc_fail(err, SC_INVALID, "%s:%d: key 'output_tokens': prompt_tokens %d + output_tokens "
                 "%d exceed the model's context of %d (a trace is replayed exactly, never "
                 "clamped)", path, lineno, n_tokens, max_tokens, w->context);
    goto done;
  }
  out->n_prompt = n_tokens < keep ? n_tokens : keep;
  out->max_tokens = clamp_len(max_tokens, w->context - out->n_prompt);
done:
  json_decref(root);
  return st;
}

// A conversation dataset's "turns": 1 to SCN_MAX_TURNS objects {"prompt": text or
// "prompt_tokens": n, "output_tokens": m (optional, 128)} appended to w->dturns; the line takes
// its first turn's lengths (out->n_prompt, out->max_tokens).
static sc_status parse_turns(workload *w, const model_config *mc, const char *path, int lineno,
                             const json_t *v, wl_line *out, sc_error *err) {
  size_t n = json_is_array(v) ? json_array_size(v) : 0;
  if (n < 1 || n > SCN_MAX_TURNS)
    return sc_fail(err, SC_INVALID, "%s:%d: key 'turns': expected a list of 1 to %d turns "
                   "{prompt or prompt_tokens, output_tokens}, got %s", path, lineno,
                   SCN_MAX_TURNS, json_is_array(v) ? "a list of another length"
                                                   : json_type_name(v));
  out->first_turn = (int)w->n_dturns;
  out->n_turns = (int)n;
  for (size_t i = 0; i < n; i++) {
    const json_t *t = json_array_get(v, i), *tv;
    wl_dturn d = {.max_tokens = WL_DEFAULT_OUTPUT_TOKENS, .text_off = -1};
    const char *k, *prompt = NULL;
    bool has_n = false;
    if (!json_is_object(t))
      return sc_fail(err, SC_INVALID, "%s:%d: key 'turns': turn %zu: expected an object, got %s",
                     path, lineno, i + 1, json_type_name(t));
    json_object_foreach((json_t *)t, k, tv) {
      sc_status st = SC_OK;
      if (!strcmp(k, "prompt_tokens")) {
        st = line_count(tv, path, lineno, k, &d.n_own, err);
        has_n = true;
      } else if (!strcmp(k, "output_tokens")) {
        st = line_count(tv, path, lineno, k, &d.max_tokens, err);
      } else if (!strcmp(k, "prompt") && json_is_string(tv) && json_string_length(tv) > 0) {
        prompt = json_string_value(tv);
      } else {
        st = sc_fail(err, SC_INVALID, "%s:%d: key 'turns': turn %zu: key '%.64s': expected "
                     "prompt (a non-empty string), prompt_tokens or output_tokens", path, lineno,
                     i + 1, k);
      }
      if (st != SC_OK) return st;
    }
    if (has_n == (prompt != NULL))
      return sc_fail(err, SC_INVALID, "%s:%d: key 'turns': turn %zu: expected exactly one of "
                     "prompt and prompt_tokens", path, lineno, i + 1);
    if (prompt) {
      int keep = w->context - 1, nt = tokenizer_encode(mc, prompt, NULL, 0);
      if (nt < keep) keep = nt;
      if (grow((void **)&w->text, &w->text_cap, w->n_text + keep, sizeof *w->text) != SC_OK)
        return sc_fail(err, SC_OOM, "%s:%d: out of memory for a turn's %d tokens", path, lineno,
                       keep);
      tokenizer_encode(mc, prompt, w->text + w->n_text, keep);
      d.text_off = w->n_text;
      w->n_text += keep;
      d.n_own = keep;
    }
    if (grow((void **)&w->dturns, &w->dturns_cap, w->n_dturns + 1, sizeof *w->dturns) != SC_OK)
      return sc_fail(err, SC_OOM, "%s:%d: out of memory for the conversation", path, lineno);
    w->dturns[w->n_dturns++] = d;
  }
  const wl_dturn *f = &w->dturns[out->first_turn];
  out->n_prompt = f->n_own < w->context - 1 ? f->n_own : w->context - 1;
  out->max_tokens = clamp_len(f->max_tokens, w->context - out->n_prompt);
  out->arrival_ns = 0;
  out->text_off = -1;
  return SC_OK;
}

static bool blank(const char *s, ssize_t n) {
  for (ssize_t i = 0; i < n; i++)
    if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n') return false;
  return true;
}

// A trace line's conversation (l->conv_id): its index and the line before it (l->conv,
// l->prev) from the table of conversations seen; line `at` becomes the conversation's latest.
// Every line names one or none does: SC_INVALID naming the line that breaks it.
static sc_status trace_conversation(workload *w, wl_line *l, int at, const char *path,
                                    int lineno, sc_error *err) {
  bool has = l->conv_id != 0;
  if (at > 0 && has != (w->n_convs > 0))
    return has ? sc_fail(err, SC_INVALID, "%s:%d: key 'conversation': the lines above name "
                         "none (a trace names every line's conversation or none)", path, lineno)
               : sc_fail(err, SC_INVALID, "%s:%d: key 'conversation': missing (the lines above "
                         "name theirs: a trace names every line's conversation or none)", path,
                         lineno);
  if (!has) return SC_OK;
  if (2 * (w->n_convs + 1) > w->conv_cap) { // grow to keep the load under one half
    int cap = w->conv_cap ? 2 * w->conv_cap : 64;
    uint64_t *keys = calloc((size_t)cap, sizeof *keys);
    int *line = malloc((size_t)cap * sizeof *line), *idx = malloc((size_t)cap * sizeof *idx);
    if (!keys || !line || !idx) {
      free(keys), free(line), free(idx);
      return sc_fail(err, SC_OOM, "%s:%d: out of memory for the trace's conversations", path,
                     lineno);
    }
    for (int i = 0; i < w->conv_cap; i++) {
      if (!w->conv_keys[i]) continue;
      int j = (int)(w->conv_keys[i] % (uint64_t)cap);
      while (keys[j]) j = (j + 1) % cap;
      keys[j] = w->conv_keys[i], line[j] = w->conv_line[i], idx[j] = w->conv_idx[i];
    }
    free(w->conv_keys), free(w->conv_line), free(w->conv_idx);
    w->conv_keys = keys, w->conv_line = line, w->conv_idx = idx, w->conv_cap = cap;
  }
  int j = (int)(l->conv_id % (uint64_t)w->conv_cap);
  while (w->conv_keys[j] && w->conv_keys[j] != l->conv_id) j = (j + 1) % w->conv_cap;
  if (!w->conv_keys[j]) {
    w->conv_keys[j] = l->conv_id;
    w->conv_idx[j] = w->n_convs++;
    l->prev = -1;
  } else {
    l->prev = w->conv_line[j];
  }
  l->conv = w->conv_idx[j];
  w->conv_line[j] = at;
  return SC_OK;
}

static sc_status load_dataset(workload *w, const model_config *mc, const char *path,
                              sc_error *err) {
  FILE *f = fopen(path, "rb");
  if (!f) return sc_fail(err, SC_IO, "%s: cannot read dataset: %s", path, strerror(errno));
  char *line = NULL; // getline's buffer, one line
  size_t cap = 0;
  ssize_t len;
  int lineno = 0, max_generated = 1;
  sc_status st = SC_OK;
  errno = 0;
  while ((len = getline(&line, &cap, f)) >= 0) {
    lineno++;
    if (blank(line, len)) continue;
    wl_line l;
    st = parse_line(w, mc, path, lineno, line, (size_t)len, &l, err);
    if (st != SC_OK) break;
    int64_t lines_cap = w->lines_cap;
    if (grow((void **)&w->lines, &lines_cap, (int64_t)w->n_lines + 1, sizeof *w->lines)) {
      st = sc_fail(err, SC_OOM, "%s:%d: out of memory for the dataset", path, lineno);
      break;
    }
    w->lines_cap = (int)lines_cap;
    if (w->trace && w->n_lines > 0 && l.arrival_ns < w->lines[w->n_lines - 1].arrival_ns) {
      st = sc_fail(err, SC_INVALID, "%s:%d: key 'arrival_s': arrivals must not decrease (this "
                   "line arrives before the one above it)", path, lineno);
      break;
    }
    if (w->trace) st = trace_conversation(w, &l, w->n_lines, path, lineno, err);
    if (st != SC_OK) break;
    if (w->n_lines > 0 && (l.n_turns > 0) != w->conv) {
      st = sc_fail(err, SC_INVALID, "%s:%d: key 'turns': %s (a dataset is all conversations or "
                   "none)", path, lineno, w->conv ? "missing: the lines above are conversations"
                                                   : "the lines above are single requests");
      break;
    }
    w->conv = l.n_turns > 0;
    w->lines[w->n_lines++] = l;
    if ((l.text_off < 0 || l.conv >= 0) && l.n_prompt > max_generated)
      max_generated = l.n_prompt; // (a conversation's text line is written there too)
    errno = 0;
  }
  int read_errno = errno;
  if (st == SC_OK && ferror(f))
    st = sc_fail(err, SC_IO, "%s: cannot read dataset: %s", path, strerror(read_errno));
  free(line);
  fclose(f);
  if (st == SC_OK && w->n_lines == 0)
    st = sc_fail(err, SC_INVALID,
                 "%s: dataset has no requests: expected one JSON object per line", path);
  w->buf_cap = w->conv ? w->context - 1 : max_generated;
  return st;
}

// --- public

sc_status workload_trace_scan(const char *path, int *n, uint64_t *last_ns, sc_error *err) {
  workload *w = calloc(1, sizeof *w);
  if (!w) return sc_fail(err, SC_OOM, "workload: out of memory");
  static const model_config any = {.max_seq_len = INT_MAX, .vocab_size = 256};
  w->dataset = w->trace = true;
  w->context = INT_MAX;
  sc_status st = load_dataset(w, &any, path, err);
  if (st == SC_OK) {
    *n = w->n_lines;
    *last_ns = w->lines[w->n_lines - 1].arrival_ns;
  }
  workload_free(w);
  return st;
}

sc_status workload_new(const scenario *s, uint64_t seed, workload **out, sc_error *err) {
  SC_ASSERT(s && out);
  *out = NULL;
  const model_config *mc = &s->model.config;
  if (mc->max_seq_len < 2)
    return sc_fail(err, SC_INVALID,
                   "workload: model '%s' has a context (max_seq_len) of %d: no room for a "
                   "prompt and an output token", mc->name, mc->max_seq_len);
  if (mc->vocab_size <= WL_FIRST_TOKEN)
    return sc_fail(err, SC_INVALID,
                   "workload: model '%s' has vocab_size %d: prompts need ids from %d up",
                   mc->name, mc->vocab_size, WL_FIRST_TOKEN);
  workload *w = calloc(1, sizeof *w);
  if (!w) return sc_fail(err, SC_OOM, "workload: out of memory");
  w->seed = seed;
  w->context = mc->max_seq_len;
  w->vocab = mc->vocab_size;
  const scn_workload *wl = &s->workload;
  sc_status st = setup_phases(w, wl, err);
  if (st == SC_OK && wl->dataset[0]) {
    char path[2 * sizeof wl->dataset + 2]; // the dataset as opened
    int n;
    n = snprintf(path, sizeof path, "%s", wl->dataset); // resolved by the parser
    if (n < 0 || (size_t)n >= sizeof path) {
      st = sc_fail(err, SC_INVALID, "workload: dataset path too long: %s", wl->dataset);
    } else {
      w->dataset = true;
      w->trace = wl->trace;
      w->n_classes = 1;
      snprintf(w->names[0], sizeof w->names[0], "%s", wl->trace ? "trace" : "dataset");
      st = load_dataset(w, mc, path, err);
      w->think_ns = wl->conversations.think_ns; // a conversation dataset's
      if (st == SC_OK && wl->conversations.set && !w->conv)
        st = sc_fail(err, SC_INVALID, "%s: workload.conversations is set but no line of the "
                     "dataset has 'turns'", path);
    }
  } else if (st == SC_OK) {
    st = setup_classes(w, wl, err);
    w->buf_cap = 1;
    for (int i = 0; st == SC_OK && i < w->n_classes; i++) {
      const scn_dist *in = &w->classes[i].input;
      int m = dists[in->kind].max(in, w->context - 1);
      if (m > w->buf_cap) w->buf_cap = m;
    }
    if (st == SC_OK) st = setup_structure(w, wl, err);
  }
  if (st == SC_OK) {
    w->buf = malloc((size_t)w->buf_cap * sizeof *w->buf);
    if (!w->buf) st = sc_fail(err, SC_OOM, "workload: out of memory for a %d-token prompt",
                              w->buf_cap);
  }
  if (st != SC_OK) {
    workload_free(w);
    return st;
  }
  *out = w;
  return SC_OK;
}

void workload_free(workload *w) {
  if (!w) return;
  free(w->lines);
  free(w->text);
  free(w->buf);
  free(w->prefix_len);
  free(w->prefix_cdf);
  free(w->conv_keys);
  free(w->conv_line);
  free(w->conv_idx);
  free(w->chain);
  free(w->dturns);
  free(w);
}

void workload_request(workload *w, uint64_t index, wl_request *out) {
  if (w->conv) {
    workload_turn(w, index, 0, out);
    return;
  }
  if (w->n_prefixes) {
    prefixed_request(w, index, out);
    return;
  }
  out->prefix = -1;
  out->n_prefix = 0;
  out->conv = -1;
  out->turn = 0;
  out->prev = -1;
  if (w->dataset) {
    const wl_line *l = &w->lines[index % (uint64_t)w->n_lines];
    out->n_prompt = l->n_prompt;
    out->max_tokens = l->max_tokens;
    out->class_idx = 0;
    if (l->conv >= 0) { // a trace's conversation: the turn before's request and its history
      out->conv = l->conv;
      out->prev = l->prev;
      if (l->prev >= 0 && trace_prompt(w, index % (uint64_t)w->n_lines)) {
        out->prompt = w->buf;
        return;
      }
    }
    if (l->text_off >= 0) {
      out->prompt = w->text + l->text_off;
    } else {
      fill_tokens(w, index, l->n_prompt);
      out->prompt = w->buf;
    }
    return;
  }
  int c = 0;
  if (w->n_classes > 1) {
    double u = wl_unit(wl_hash(w->seed, WL_STREAM_CLASS, index));
    while (c < w->n_classes - 1 && u >= w->cdf[c]) c++;
  }
  const scn_class *cls = &w->classes[c];
  int in = clamp_len(dist_draw(&cls->input, w->seed, WL_STREAM_INPUT, index), w->context);
  int outn = clamp_len(dist_draw(&cls->output, w->seed, WL_STREAM_OUTPUT, index), w->context);
  if (in > w->context - 1) in = w->context - 1;
  if (outn > w->context - in) outn = w->context - in;
  SC_ASSERT(in <= w->buf_cap);
  fill_tokens(w, index, in);
  out->prompt = w->buf;
  out->n_prompt = in;
  out->max_tokens = outn;
  out->class_idx = c;
}

void workload_prompt(workload *w, uint64_t key, int64_t conv, int turn, wl_request *out) {
  if (conv >= 0 && w->conv) workload_turn(w, (uint64_t)conv, turn, out);
  else workload_request(w, key, out);
}

bool workload_conversations(const workload *w) { return w->conv; }

uint64_t workload_think_ns(const workload *w) { return w->think_ns; }

// Message i of conversation conv (key ck): its own tokens and its output (a conversation
// dataset's line, conv mod its lines; else class cls's draws).
static void message_of(const workload *w, uint64_t conv, uint64_t ck, const scn_class *cls,
                       int i, int *in, int *outn) {
  if (w->dataset) {
    const wl_dturn *d = &w->dturns[w->lines[conv % (uint64_t)w->n_lines].first_turn + i];
    *in = d->n_own;
    *outn = d->max_tokens;
    return;
  }
  message_lengths(w, cls, ck, i, in, outn);
}

// Writes message i's first n tokens at b: a dataset turn's text, else tokens drawn for it.
static void message_fill(const workload *w, uint64_t conv, uint64_t ck, int i, int32_t *b,
                         int n) {
  const wl_dturn *d =
      w->dataset ? &w->dturns[w->lines[conv % (uint64_t)w->n_lines].first_turn + i] : NULL;
  if (d && d->text_off >= 0) memcpy(b, w->text + d->text_off, (size_t)n * sizeof *b);
  else fill_key(w, b, n, wl_hash(ck, WL_STREAM_TOKENS, (uint64_t)i));
}

int workload_turns(workload *w, uint64_t conv) {
  if (!w->conv) return 1;
  uint64_t ck = wl_hash(w->seed, WL_STREAM_CONV, conv);
  const scn_class *cls = w->dataset ? NULL : &w->classes[pick_class(w, conv)];
  int k = w->dataset ? w->lines[conv % (uint64_t)w->n_lines].n_turns
                     : clamp_len(dist_draw(&w->turns, w->seed, WL_STREAM_TURNS, conv),
                                 SCN_MAX_TURNS);
  int p = pick_prefix(w, conv);
  int64_t len = p >= 0 ? w->prefix_len[p] : 0; // the prompt of the turn after the last counted
  for (int i = 0; i < k; i++) {
    int in, outn;
    message_of(w, conv, ck, cls, i, &in, &outn);
    if (len + in + outn > w->context) return i > 0 ? i : 1; // turn i would not fit
    len += in + outn;
  }
  return k;
}

void workload_turn(workload *w, uint64_t conv, int turn, wl_request *out) {
  SC_ASSERT(w->conv && turn >= 0);
  uint64_t ck = wl_hash(w->seed, WL_STREAM_CONV, conv);
  int c = w->dataset ? 0 : pick_class(w, conv), p = pick_prefix(w, conv);
  const scn_class *cls = w->dataset ? NULL : &w->classes[c];
  int n = put_prefix(w, p), n_pre = n, in = 1, outn = 1;
  for (int i = 0; i <= turn; i++) {
    message_of(w, conv, ck, cls, i, &in, &outn);
    if (in > w->context - 1 - n) in = w->context - 1 - n; // only a cut conversation's turn 0
    if (in < 0) in = 0;
    message_fill(w, conv, ck, i, w->buf + n, in);
    n += in;
    if (outn > w->context - n) outn = w->context - n;
    if (i == turn) break;
    // the reply the history holds: as long as that turn's output (the server's own reply is
    // not waited for: every replica kind and every run sees the same history)
    int r = outn < w->context - 1 - n ? outn : w->context - 1 - n;
    fill_key(w, w->buf + n, r, wl_hash(ck, WL_STREAM_REPLY, (uint64_t)i));
    n += r;
  }
  *out = (wl_request){.prompt = w->buf, .n_prompt = n, .max_tokens = outn > 0 ? outn : 1,
                      .class_idx = c, .prefix = p, .n_prefix = n_pre, .conv = (int64_t)conv,
                      .turn = turn, .prev = -1};
}

int workload_n_classes(const workload *w) { return w->n_classes; }

// NULL for an index outside [0, workload_n_classes).
const char *workload_class_name(const workload *w, int idx) {
  if (idx < 0 || idx >= w->n_classes) return NULL;
  return w->names[idx];
}

// A phase index out of range or not SCN_PHASE_RATE is the caller's bug (SC_ASSERT).
uint64_t workload_gap_ns(const workload *w, int phase, uint64_t j) {
  SC_ASSERT(phase >= 0 && phase < w->n_phases && w->phases[phase].kind == SCN_PHASE_RATE);
  const wl_phase *p = &w->phases[phase];
  return arrivals[p->arrival].gap(w, p, phase, j);
}
