// Greedy and temperature/top-p sampling (see sampler.h).
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>

typedef struct cand {
  float p;    // probability after temperature
  int32_t id; // token id
} cand;

static uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

double sampler_uniform(uint64_t seed, uint64_t counter) {
  uint64_t r = splitmix64(splitmix64(seed) ^ counter);
  return (double)(r >> 11) * (1.0 / 9007199254740992.0);
}

size_t sampler_scratch_bytes(int vocab) { return sizeof(cand) * (size_t)vocab; }

static int cand_desc(const void *a, const void *b) {
  const cand *x = a, *y = b;
  if (x->p != y->p) return x->p < y->p ? 1 : -1;
  return x->id < y->id ? -1 : x->id > y->id;
}

static int32_t argmax(const float *logits, int vocab) {
  int32_t best = 0;
  for (int i = 1; i < vocab; i++)
    if (logits[i] > logits[best]) best = i;
  return best;
}

int32_t sampler_pick(const sampling_params *p, const float *logits, int vocab, int index,
                     void *scratch) {
  if (p->temperature <= 0.0f || !scratch) return argmax(logits, vocab);
  cand *c = scratch;
  float mx = logits[argmax(logits, vocab)];
  double sum = 0.0;
  for (int i = 0; i < vocab; i++) {
    c[i].p = expf((logits[i] - mx) / p->temperature);
    c[i].id = i;
    sum += c[i].p;
  }
  qsort(c, (size_t)vocab, sizeof *c, cand_desc);
  // Nucleus: the smallest prefix whose mass reaches top_p (at least one token).
  double top_p = p->top_p > 0.0f && p->top_p < 1.0f ? p->top_p : 1.0;
  double kept = 0.0;
  int n = 0;
  while (n < vocab && (n == 0 || kept < top_p * sum)) kept += c[n++].p;
  double u = sampler_uniform(p->seed, (uint64_t)index) * kept, acc = 0.0;
  for (int i = 0; i < n; i++) {
    acc += c[i].p;
    if (u < acc) return c[i].id;
  }
  return c[n - 1].id;
}
