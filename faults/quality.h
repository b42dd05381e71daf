// The quality delta between two versions of a model's weights (after a hot swap, e.g. f32 to
// int8): greedy-token agreement and the KL divergence of next-token distributions on a fixed
// prompt set, computed on two real engines built here and freed before returning.
//
// Method (docs/metrics.md, "Quality delta after a hot swap"): engine A generates n_tokens
// greedy tokens for every prompt, keeping its next-token distribution at each position; engine
// B is then teacher-forced on A's tokens: for prompt i and position j it is given prompt i
// followed by A's first j tokens, and its next-token distribution at that point is compared
// with A's at j. Left to others: which prompts and versions (scenarios/runner_faults.c), where
// the numbers go (the swap_agreement and swap_kl metrics).
#pragma once

#include "engine/engine.h"
#include "kernels/status.h"

typedef struct fq_result {
  int prompts;      // prompts compared
  int positions;    // next-token positions compared: prompts x n_tokens
  int agree;        // positions where B's most likely token is A's greedy token
  double agreement; // agree / positions (NaN when positions == 0)
  double kl_mean;   // mean over positions of KL(P_A || P_B), nats
  double kl_max;    // the largest one
} fq_result;

// Compares the weights of config b with those of config a (both real backends; their engines
// are built here, one after the other) on prompts[i] (n_prompt[i] token ids each). The
// configs' on_logits hooks and sampling are replaced by the comparison's own. SC_INVALID: a
// sim backend, different vocabularies, no prompts or n_tokens < 1, more than 512 MiB of
// distributions to keep; an engine that fails to build or step passes its error on, prefixed
// with which version it was. *out is written only on success.
sc_status fq_compare(const engine_config *a, const engine_config *b, const int32_t *const *prompts,
                     const int *n_prompt, int n_prompts, int n_tokens, fq_result *out,
                     sc_error *err);

// KL(softmax(a) || softmax(b)) in nats over vocab logits, in double precision with the maxima
// subtracted; a token whose probability under a underflows to 0 contributes 0.
double fq_kl_logits(const float *a, const float *b, int vocab);
