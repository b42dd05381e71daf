// The quality delta between two versions of a model's weights (after a hot swap, e.g. f32 to
// int8): greedy-token agreement and the KL divergence of next-token distributions on a fixed
// prompt set, computed on two real engines built here and freed before returning.
//
// Method (docs/metrics.md, "Quality delta after a hot swap"): engine A generates n_tokens
// greedy tokens for every prompt, keeping its next-token distribution at each position; engine
// B is then teacher-forced on A's tokens: for prompt i and position j it is given prompt i
// followed by A's first j tokens, and its next-token distribution at that point is compared
// with A's at j. Left to others: which prompts and versions (faults/hot_swap.c), where
// the numbers go (the swap_agreement and swap_kl metrics).
#pragma once

#include "engine/engine.h"
#include "kernels/status.h"

typedef struct fq_result {
  int prompts;      // prompts compared
  int positions;    // next-token positions compared: prompts x n_tokens (EOS does not stop A)
  int agree;        // positions where B's most likely token is A's greedy token
  double agreement; // agree / positions (a successful comparison has positions >= 1)
  double kl_mean;   // mean over positions of KL(P_A || P_B), nats
  double kl_max;    // the largest one
} fq_result;

// Compares the weights of config b (the new version) with those of config a (the old one) on
// prompts[i] (n_prompt[i] token ids each, caller owns): both real backends, their engines
// built here one after the other and freed before returning. The configs are copied; the
// copies' on_logits hooks are the comparison's own, and every request is greedy with EOS not
// stopping it, so each prompt gives exactly n_tokens positions. Memory: A's logits, n_prompts
// x n_tokens x vocab floats. SC_INVALID: a sim backend, different vocabularies, no prompts or
// n_tokens < 1, an empty prompt, a prompt that with n_tokens more tokens exceeds either
// model's context, more than 512 MiB of A's logits to keep. SC_OOM: host memory. An engine
// that fails to build or step passes its status and message on, prefixed with which version
// ("old" = a, "new" = b). *out is written only on success.
sc_status fq_compare(const engine_config *a, const engine_config *b, const int32_t *const *prompts,
                     const int *n_prompt, int n_prompts, int n_tokens, fq_result *out,
                     sc_error *err);

// KL(softmax(a) || softmax(b)) in nats over vocab logits (a, b: (vocab) each): from
// log-softmax values computed in double with each row's maximum subtracted; a token whose
// probability under a underflows to 0 contributes 0. Never negative (rounding is clamped to 0).
// Exposed for tests; fq_compare uses it for every position.
double fq_kl_logits(const float *a, const float *b, int vocab);
