// Token sampling on the host from a row of logits: greedy, or temperature + top-p with a
// per-request seed. The random draw for the i-th generated token depends only on
// (seed, i), so a request recomputed after preemption, or run again, samples the same tokens.
#pragma once

#include <stdint.h>

#include "kernels/status.h"

typedef struct sampling_params {
  float temperature; // 0 = greedy
  float top_p;       // (0, 1]; 1 = no nucleus cut
  uint64_t seed;     // per request
} sampling_params;

// Returns the sampled token id for logits (vocab). index = position of the token among the
// request's generated tokens. scratch must hold 2 * vocab floats' worth (vocab entries of
// {float, int32}); NULL is allowed for greedy. Ties in greedy go to the lowest id.
int32_t sampler_pick(const sampling_params *p, const float *logits, int vocab, int index,
                     void *scratch);
size_t sampler_scratch_bytes(int vocab);

// Deterministic uniform in [0, 1) from (seed, counter).
double sampler_uniform(uint64_t seed, uint64_t counter);
