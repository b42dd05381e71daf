// Shard plan arithmetic (see shard.h). Pure functions of the model config and the layout.
#include "engine/shard.h"

#include <stdio.h>
#include <string.h>

bool shard_tp_valid(const model_config *c, int tp) {
  if (tp < 1) return false;
  if (c->n_heads % tp || c->ffn_dim % tp || c->vocab_size % tp) return false;
  // KV heads split evenly, or each rank holds one replicated KV head.
  return c->n_kv_heads % tp == 0 || tp % c->n_kv_heads == 0;
}

sc_status shard_layout_check(const model_config *c, int tp, int pp, sc_error *err) {
  char valid[128] = "";
  size_t len = 0;
  for (int t = 1; t <= 64; t *= 2)
    if (shard_tp_valid(c, t))
      len += (size_t)snprintf(valid + len, sizeof valid - len, "%s%d", len ? ", " : "", t);
  if (tp < 1 || pp < 1)
    return sc_fail(err, SC_INVALID, "tp=%d pp=%d: both must be at least 1", tp, pp);
  if (c->n_heads % tp)
    return sc_fail(err, SC_INVALID,
                   "tp=%d does not divide num_attention_heads=%d of %s; valid tp: %s", tp,
                   c->n_heads, c->name, valid);
  if (c->n_kv_heads % tp && tp % c->n_kv_heads)
    return sc_fail(err, SC_INVALID,
                   "tp=%d neither divides nor is a multiple of num_key_value_heads=%d of %s; "
                   "valid tp: %s",
                   tp, c->n_kv_heads, c->name, valid);
  if (c->ffn_dim % tp)
    return sc_fail(err, SC_INVALID, "tp=%d does not divide intermediate_size=%d of %s; valid tp: %s",
                   tp, c->ffn_dim, c->name, valid);
  if (c->vocab_size % tp)
    return sc_fail(err, SC_INVALID, "tp=%d does not divide vocab_size=%d of %s; valid tp: %s", tp,
                   c->vocab_size, c->name, valid);
  if (pp > c->n_layers)
    return sc_fail(err, SC_INVALID,
                   "pp=%d is larger than num_hidden_layers=%d of %s; valid pp: 1..%d", pp,
                   c->n_layers, c->name, c->n_layers);
  return SC_OK;
}

void shard_stage_layers(int n_layers, int pp, int s, int *layer0, int *n) {
  int a = (int)((long)s * n_layers / pp), b = (int)((long)(s + 1) * n_layers / pp);
  *layer0 = a;
  *n = b - a;
}

int64_t shard_kv_elems_per_token(const model_config *c, const shard_rank *r) {
  return 2 * (int64_t)r->n_layers * r->n_kv * c->head_dim;
}

shard_rank shard_rank_plan(const model_config *c, int tp, int pp, int tp_rank, int pp_rank) {
  shard_rank r;
  memset(&r, 0, sizeof r);
  r.tp = tp;
  r.pp = pp;
  r.tp_rank = tp_rank;
  r.pp_rank = pp_rank;
  shard_stage_layers(c->n_layers, pp, pp_rank, &r.layer0, &r.n_layers);
  r.n_heads = c->n_heads / tp;
  r.q_head0 = tp_rank * r.n_heads;
  if (c->n_kv_heads % tp == 0) {
    r.n_kv = c->n_kv_heads / tp;
    r.kv_head0 = tp_rank * r.n_kv;
  } else { // tp is a multiple of n_kv_heads: one replicated KV head per rank
    r.n_kv = 1;
    r.kv_head0 = tp_rank * c->n_kv_heads / tp;
  }
  r.ffn = c->ffn_dim / tp;
  r.ffn0 = tp_rank * r.ffn;
  r.vocab = c->vocab_size / tp;
  r.vocab0 = tp_rank * r.vocab;
  r.first_stage = pp_rank == 0;
  r.last_stage = pp_rank == pp - 1;
  return r;
}
