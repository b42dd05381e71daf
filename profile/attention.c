// The attention tables of a profile: per shape of one rank's attention and thread count,
// decode seconds per sequence vs context and prefill seconds vs tokens from position 0.
//
// Decode attention is timed over as many sequences as fill the rotation pool, each with its
// own blocks, and divided by their number.
//
// Left to others: timing and the pool's size (profile.c), the kernels timed (kernels/cpu/,
// kernels/cuda/), writing the tables (write.c).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/shard.h"
#include "kernels/clock.h"
#include "kernels/device.h"
#include "profile/profile_impl.h"

// What every attention point of one shape shares: the KV pool, q and out, and the batch
// description that each point rewrites before its rounds.
typedef struct attn_ctx {
  device *d;
  dev_kv_batch b; // points into pos, seq, bt
  int heads, kv_heads, head_dim;
  const float *q; // (tokens, heads, head_dim)
  dev_kv_layer kv; // (n_blocks, block_size, kv_heads, head_dim) each
  float *out;     // (tokens, heads, head_dim)
  int32_t *pos, *seq; // (tokens), device memory
  int32_t *bt;        // (PROF_ATTN_SEQS, b.max_blocks), device memory
  // where prep writes them: the same arrays on cpu; host copies uploaded to the device on cuda
  int32_t *hpos, *hseq, *hbt;
  bool upload;
} attn_ctx;

// One point: decode of S sequences at context x (S > 0), or a prefill of x tokens (S == 0).
typedef struct attn_point {
  attn_ctx *a;
  int x, S;
} attn_point;

static sc_status attn_prep(void *c) {
  attn_point *pt = c;
  attn_ctx *a = pt->a;
  int bs = a->b.block_size, mb = a->b.max_blocks, rows;
  if (pt->S > 0) { // S sequences, each one token at position x - 1 with its own blocks
    int per = (pt->x + bs - 1) / bs;
    for (int j = 0; j < pt->S; j++) {
      a->hpos[j] = pt->x - 1;
      a->hseq[j] = j;
      for (int b = 0; b < mb; b++) a->hbt[(size_t)j * mb + b] = j * per + (b < per ? b : 0);
    }
    a->b.n_tok = pt->S;
    a->b.max_run = 1;
    rows = pt->S;
  } else { // one sequence, tokens at positions 0 .. x - 1 (each attends to those before it)
    for (int b = 0; b < mb; b++) a->hbt[b] = b;
    for (int j = 0; j < pt->x; j++) {
      a->hpos[j] = j;
      a->hseq[j] = 0;
    }
    a->b.n_tok = pt->x;
    a->b.max_run = pt->x; // a prefill chunk, as the executor tells the backend
    rows = 1;
  }
  if (!a->upload) return SC_OK;
  size_t tok = (size_t)a->b.n_tok * sizeof(int32_t);
  SC_TRY(dev_copy(a->d, a->pos, a->hpos, tok, DEV_H2D));
  SC_TRY(dev_copy(a->d, a->seq, a->hseq, tok, DEV_H2D));
  return dev_copy(a->d, a->bt, a->hbt, (size_t)rows * mb * sizeof(int32_t), DEV_H2D);
}

static sc_status attn_call(void *c, int iter) {
  const attn_ctx *a = ((const attn_point *)c)->a;
  return dev_attention(a->d, &a->b, a->heads, a->kv_heads, a->head_dim,
                       1.0f / sqrtf((float)a->head_dim), a->q, a->kv, a->out);
}

// Decode (per sequence, vs context) and prefill (vs tokens from position 0) of one rank's
// attention with `heads` query and `kv_heads` KV heads of head_dim. The cpu kernel runs on
// the calling thread, so the BLAS thread count does not enter. On cuda the KV pool is
// PROF_CUDA_POOL, the batch arrays are uploaded before each round, and a round waits for the
// device once after its calls.
static sc_status measure_attention_shape(profile *p, device *d, int heads, int kv_heads,
                                         sim_curve *decode, sim_curve *prefill, sc_error *err) {
  const profile_options *o = &p->o;
  const int bs = 16, hd = o->model.head_dim;
  int max_ctx = o->ctx[o->n_ctx - 1], max_pre = o->prefill[o->n_prefill - 1];
  int max_len = max_ctx > max_pre ? max_ctx : max_pre;
  int max_blocks = (max_len + bs - 1) / bs;
  size_t slot = (size_t)kv_heads * hd; // floats per token, K or V
  size_t pool_tokens = prof_pool_bytes(p) / (2 * slot * sizeof(float));
  if (pool_tokens < (size_t)max_blocks * bs) pool_tokens = (size_t)max_blocks * bs;
  int n_blocks = (int)((pool_tokens + bs - 1) / bs);
  int max_tok = max_pre > PROF_ATTN_SEQS ? max_pre : PROF_ATTN_SEQS;
  size_t kv_floats = (size_t)n_blocks * bs * slot, qf = (size_t)max_tok * heads * hd;
  float *k = NULL, *v = NULL, *q = NULL, *out = NULL;
  int32_t *pos = NULL, *seq = NULL, *bt = NULL;
  sc_status s = dev_alloc(d, kv_floats * sizeof(float), (void **)&k);
  if (s == SC_OK) s = dev_alloc(d, kv_floats * sizeof(float), (void **)&v);
  if (s == SC_OK) s = dev_alloc(d, qf * sizeof(float), (void **)&q);
  if (s == SC_OK) s = dev_alloc(d, qf * sizeof(float), (void **)&out);
  if (s == SC_OK) s = dev_alloc(d, (size_t)max_tok * sizeof(int32_t), (void **)&pos);
  if (s == SC_OK) s = dev_alloc(d, (size_t)max_tok * sizeof(int32_t), (void **)&seq);
  size_t bt_n = (size_t)PROF_ATTN_SEQS * max_blocks;
  if (s == SC_OK) s = dev_alloc(d, bt_n * sizeof(int32_t), (void **)&bt);
  if (s == SC_OK) s = prof_fill_device(p, d, k, kv_floats, o->seed + 4, 1.0f, false);
  if (s == SC_OK) s = prof_fill_device(p, d, v, kv_floats, o->seed + 5, 1.0f, false);
  if (s == SC_OK) s = prof_fill_device(p, d, q, qf, o->seed + 6, 1.0f, false);
  attn_ctx a = {.d = d, .heads = heads, .kv_heads = kv_heads, .head_dim = hd, .q = q,
                .kv = {.k = k, .v = v}, .out = out, .pos = pos, .seq = seq, .bt = bt,
                .hpos = pos, .hseq = seq, .hbt = bt, .upload = p->cuda,
                .b = {.pos = pos, .seq = seq, .block_tables = bt, .max_blocks = max_blocks,
                      .block_size = bs, .reduced_precision = p->wdt == SC_BF16}};
  if (s == SC_OK && p->cuda) {
    a.hpos = malloc((size_t)max_tok * sizeof(int32_t));
    a.hseq = malloc((size_t)max_tok * sizeof(int32_t));
    a.hbt = malloc(bt_n * sizeof(int32_t));
    if (!a.hpos || !a.hseq || !a.hbt) s = SC_OOM;
  }
  // the decode points, then the prefill points, timed together
  int np = o->n_ctx + o->n_prefill;
  attn_point pts[2 * SIM_CURVE_MAX];
  timed t[2 * SIM_CURVE_MAX];
  for (int i = 0; i < np; i++) {
    if (i < o->n_ctx) {
      int c = o->ctx[i], S = n_blocks / ((c + bs - 1) / bs);
      pts[i] = (attn_point){.a = &a, .x = c,
                            .S = S > PROF_ATTN_SEQS ? PROF_ATTN_SEQS : S < 1 ? 1 : S};
    } else {
      pts[i] = (attn_point){.a = &a, .x = o->prefill[i - o->n_ctx], .S = 0};
    }
    t[i] = (timed){.op = attn_call, .ctx = &pts[i], .prep = attn_prep,
                   .sync = p->cuda ? d : NULL};
  }
  if (s == SC_OK) s = prof_time_points(t, np, o->reps, o->min_round_s);
  if (s != SC_OK && p->cuda && !err->msg[0])
    sc_fail(err, s, "profile: a timed attention call failed: %s", dev_last_error(d));
  if (s == SC_OK) {
    for (int i = 0; i < o->n_ctx; i++) {
      decode->x[i] = pts[i].x;
      decode->y[i] = prof_timed_median(&t[i], o->reps) / pts[i].S; // per sequence
    }
    decode->n = o->n_ctx;
    for (int i = 0; i < o->n_prefill; i++) {
      prefill->x[i] = pts[o->n_ctx + i].x;
      prefill->y[i] = prof_timed_median(&t[o->n_ctx + i], o->reps);
    }
    prefill->n = o->n_prefill;
  }
  dev_free(d, k);
  dev_free(d, v);
  dev_free(d, q);
  dev_free(d, out);
  dev_free(d, pos);
  dev_free(d, seq);
  dev_free(d, bt);
  if (p->cuda) {
    free(a.hpos);
    free(a.hseq);
    free(a.hbt);
  }
  if (s != SC_OK && !err->msg[0]) sc_fail(err, s, "profile: a timed attention call failed");
  return s;
}

// SC_INVALID when the TP degrees need more attention entries (one per TP degree and thread
// count) than a profile holds.
sc_status prof_attention_plan(const profile_options *o, int cores, sc_error *err) {
  int n = 0;
  for (int i = 0; i < o->n_tp; i++) {
    int th[2];
    n += prof_thread_counts(cores, o->tp[i], th);
  }
  if (n > 8)
    return sc_fail(err, SC_INVALID,
                   "profile: %d attention tables (TP degrees x thread counts) exceed the 8 a "
                   "profile holds; profile fewer TP degrees at once",
                   n);
  return SC_OK;
}

// One table per (shape, thread count), each timed on a device opened at that thread count:
// the CPU backend splits a large attention over the device's kernel pool.
sc_status prof_measure_attention(profile *p, int cores, sc_error *err) {
  const profile_options *o = &p->o;
  sim_hw *h = &p->hw.sim;
  for (int i = 0; i < o->n_tp; i++) {
    int t = o->tp[i];
    shard_rank sr = shard_rank_plan(&o->model, t, 1, 0, 0);
    int th[2], nth = prof_thread_counts(cores, t, th);
    for (int j = 0; j < nth; j++) {
      int e = 0;
      while (e < h->n_attn && !(h->attn[e].heads == sr.n_heads &&
                                h->attn[e].kv_heads == sr.n_kv && h->attn[e].threads == th[j]))
        e++;
      if (e < h->n_attn) {
        size_t len = strlen(p->attn_role[e]);
        snprintf(p->attn_role[e] + len, sizeof p->attn_role[0] - len, ", tp%d", t);
        continue;
      }
      if (h->n_attn == 8)
        return sc_fail(err, SC_INVALID,
                       "profile: more than 8 attention tables (TP degrees x thread counts); "
                       "profile fewer TP degrees at once");
      sim_attn_table *a = &h->attn[h->n_attn];
      *a = (sim_attn_table){.heads = sr.n_heads, .kv_heads = sr.n_kv,
                            .head_dim = o->model.head_dim, .threads = th[j]};
      double t0 = sc_monotonic_s();
      if (!p->cuda) device_cpu_set_threads(th[j]);
      device *d = NULL;
      sc_status s = device_open(o->backend, 0, &d, err);
      if (s == SC_OK)
        s = measure_attention_shape(p, d, sr.n_heads, sr.n_kv, &a->decode, &a->prefill, err);
      device_free(d);
      if (!p->cuda) device_cpu_set_threads(cores);
      SC_TRY(s);
      prof_progress(o, "attention: tp%d, %d heads / %d KV heads x %d at %d thread%s, decode %d "
                  "contexts, prefill %d lengths [%.1f s]",
               t, sr.n_heads, sr.n_kv, o->model.head_dim, th[j], th[j] == 1 ? "" : "s",
               o->n_ctx, o->n_prefill, sc_monotonic_s() - t0);
      snprintf(p->attn_role[h->n_attn], sizeof p->attn_role[0], "tp%d", t);
      h->n_attn++;
    }
  }
  return SC_OK;
}
