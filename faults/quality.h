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
#include "serving/replica.h"

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

// --- through a serving replica: an external server's weights are not shardcheck's to load,
// and its API gives tokens, not next-token distributions, so the delta is the greedy agreement
// alone (kl_mean and kl_max NaN). The same method: A's greedy tokens on the old version (taken
// before the workload), B teacher-forced on them (after it), each token one request of
// max_tokens 1 at temperature 0. The replica must send token ids (shardcheck serve does; a
// server that does not fails with SC_INVALID naming it) and be idle: every request runs on it
// at once, keyed from FQ_KEY0 up, and events for other keys are dropped. A deadline of
// timeout_ns covers each call; a request that fails or is still running at the deadline fails
// the call (SC_IO, SC_TIMEOUT) with its message, its siblings cancelled and waited for.
#define FQ_KEY0 (UINT64_C(1) << 62)

enum { FQ_PROMPTS = 8, FQ_TOKENS = 16 }; // prompts and positions of a hot swap's comparison

typedef struct fq_prompts { // the prompts compared: p[i] (n[i] ids) point into buf (owned)
  const int32_t *p[FQ_PROMPTS];
  int n[FQ_PROMPTS];
  int count;
  int32_t *buf;
} fq_prompts;

typedef struct fq_greedy {
  int n_prompts, n_tokens;
  int32_t *tok; // (n_prompts x n_tokens): row i, its first n[i] entries
  int *n;       // (n_prompts) tokens prompt i got (a server may stop at EOS before n_tokens)
} fq_greedy;

// A's side: n_tokens greedy tokens for each of prompts[0..n_prompts) on replica r into *out
// (free with fq_greedy_free; zeroed on error).
sc_status fq_replica_greedy(replica *r, const int32_t *const *prompts, const int *n_prompt,
                            int n_prompts, int n_tokens, uint64_t timeout_ns, fq_greedy *out,
                            sc_error *err);
// B's side: replica r teacher-forced on a's tokens (prompt i followed by a's first j tokens,
// one token asked) for every position a holds; out->agreement over them, KL NaN.
sc_status fq_replica_agreement(replica *r, const fq_greedy *a, const int32_t *const *prompts,
                               const int *n_prompt, uint64_t timeout_ns, fq_result *out,
                               sc_error *err);
void fq_greedy_free(fq_greedy *g); // NULL or zeroed: a no-op
