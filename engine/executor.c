// The executor (see executor.h): per-rank arenas, the Llama forward pass over a flat batch
// of tokens, TP collectives, PP micro-batches, the thread per rank that runs it (a single rank
// runs on the caller's thread), each sequence's device memory, and the step watchdog: with
// several ranks the caller watches while it waits for them; a single rank gets a watchdog
// thread, started by the first hang fault set through executor_set_fault (so an engine that
// never sees one pays nothing). Deciding which faults to inject is faults/'s; the hooks
// themselves live in kernels/device.c and the communicators, which the comm registry
// (kernels/comm.c) picks for the backend: nothing here names a backend. With ranks as processes
// (exec_config.mpi) this process holds one rank: the groups are MPI's, rank 0 sends each step
// to the others and collects their answers, the others serve (executor_follow); the protocol
// is engine/exec_dist.c.
#include "engine/executor.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/exec_dist.h"
#include "engine/shard.h"
#include "kernels/clock.h"
#include "kernels/comm.h"
#include "kernels/device.h"
#include "kernels/mpi.h"

#define ALIGN 64
#define DEFAULT_DEADLINE_NS 60000000000ull // comm_deadline_ns 0, as the shm communicator
#define NS_PER_S 1000000000ull
// The watchdog looks every WATCH_DIV-th of the hang limit, within [WATCH_MIN_NS, WATCH_MAX_NS]:
// often enough that a hang is caught soon after its limit, never a busy loop.
#define WATCH_DIV 8
#define WATCH_MIN_NS 1000000ull   // 1 ms
#define WATCH_MAX_NS 100000000ull // 100 ms

// --- per-rank state

// A linear layer's weight slice on the device: f32, int8 weight-only with one f32 scale per
// output row of the slice (exec_config.weight_dtype SC_I8; dev_q8_quantize at load), bf16
// (SC_BF16; dev_bf16_from_f32 at load) or fp16 (SC_F16; dev_f16_from_f32 at load). Exactly one
// of f, q, h, e is set.
typedef struct wmat {
  float *f;    // (rows, cols) f32
  int8_t *q;   // (rows, cols) int8
  float *s;    // (rows) scales of q
  uint16_t *h; // (rows, cols) bf16
  uint16_t *e; // (rows, cols) fp16
} wmat;

typedef struct layer_w {
  float *attn_norm; // (dim)
  wmat wq;          // (n_heads_local * head_dim, dim)
  wmat wk;          // (n_kv_local * head_dim, dim)
  wmat wv;          // (n_kv_local * head_dim, dim)
  wmat wo;          // (dim, n_heads_local * head_dim)
  float *ffn_norm;  // (dim)
  wmat wg;          // (ffn_local, dim)
  wmat wu;          // (ffn_local, dim)
  wmat wd;          // (dim, ffn_local)
} layer_w;

typedef struct rank {
  executor *ex;
  int index; // pp_rank * tp + tp_rank
  shard_rank sh;
  device *dev;
  comm *tp_comm; // NULL when tp == 1
  comm *pp_comm; // NULL when pp == 1

  void *w_arena; // every weight slice of this rank
  size_t w_bytes;
  float *embed;      // (vocab_local, dim), first stage only
  float *final_norm; // (dim), last stage only
  wmat lm_head;      // (vocab_local, dim), last stage only
  layer_w *layers;   // (n_layers local)

  void *kv_arena; // K and V of every local layer
  size_t kv_bytes;
  dev_kv_layer *kv; // (n_layers local), each (n_blocks, block_size, n_kv_local, head_dim)

  void *ws_arena; // activations, T = max_tokens, S = max_seqs
  float *x;          // (T, dim) residual stream
  float *h;          // (T, dim) normed
  float *q;          // (T, n_heads_local * head_dim)
  float *k;          // (T, n_kv_local * head_dim)
  float *v;          // (T, n_kv_local * head_dim)
  float *att;        // (T, n_heads_local * head_dim)
  float *o;          // (T, dim) partial projection output
  float *g;          // (T, ffn_local)
  float *u;          // (T, ffn_local)
  float *xs;         // (S, dim) rows that produce logits
  float *logits_l;   // (S, vocab_local)
  float *logits_all; // (tp, S, vocab_local) after the all-gather; NULL when tp == 1
  int32_t *d_amax_i; // (S) greedy picks within this rank's vocab slice (exec_batch.tokens)
  float *d_amax_v;   // (S) their logits
  int32_t *d_ids;    // (T)
  int32_t *d_pos;    // (T)
  int32_t *d_seq;    // (T)
  int32_t *d_bt;     // (S, max_blocks)

  pthread_t thread;
  bool thread_started;
  bool no_graphs;   // a graph recording failed here: this rank enqueues its ops one by one
  atomic_bool busy; // this rank has not finished the current step (read by the watchdog)
  sc_status status;
  sc_error err;
} rank;

// A sequence's device memory (executor.h): its block table on every rank.
struct exec_seq_mem {
  int32_t *host; // (max_blocks) the block table as the rank rows hold it
  int n_up;      // leading entries of host that every rank's row holds
  int32_t *rows[]; // (n_ranks) device rows of max_blocks block ids, one per rank
};

// One micro-batch of the current step, on the host; every rank reads it.
typedef struct mb_meta {
  int seq0, n_seq;  // seqs [seq0, seq0 + n_seq) of the batch
  int tok0, n_tok;  // flat tokens [tok0, tok0 + n_tok)
  int sample0, n_sample; // rows [sample0, sample0 + n_sample) of the logits
  int max_run;           // the most tokens of one sequence (dev_kv_batch's hint)
} mb_meta;

struct executor {
  exec_config cfg;
  int n_ranks;
  int max_blocks; // block-table columns: blocks of a max_seq_len sequence
  rank *ranks;
  // TP and PP groups, of the communicator that serves the backend (kernels/comm.h registry);
  // NULL where the group would have one rank.
  comm_group **tp_groups; // (pp) one per stage, all NULL when tp == 1
  comm_group **pp_groups; // (tp) one per TP index, all NULL when pp == 1

  pthread_mutex_t mu;
  pthread_cond_t cv_go, cv_done;
  uint64_t gen; // bumped once per step
  // the watchdog thread of a single rank (mu guards wd_started)
  pthread_t wd_thread;
  bool wd_started;
  pthread_cond_t cv_wd;   // wakes the watchdog thread to quit
  atomic_int wd_gave_up;  // the rank the watchdog abandoned the step for, or -1
  int n_done;
  bool quit;

  // the current step, flattened (host)
  const exec_batch *batch;
  int n_mb;
  mb_meta *mb;         // (pp)
  int32_t *h_ids;      // (T)
  int32_t *h_pos;      // (T)
  int32_t *h_seq;      // (T) row within its micro-batch
  int32_t *h_bt;       // (S, max_blocks) rows in batch order
  int32_t *h_sample;   // (S) token index within its micro-batch, in logits-row order
  int *bt_from;        // (S) first block-table entry of each seq that its device rows lack
  int n_want;          // rows of logits (or tokens) the current step returns
  int32_t *h_amax_i;   // (tp, S) each last-stage rank's greedy pick (a token id) in its slice
  float *h_amax_v;     // (tp, S) their logits
  sc_status broken;    // first failure; the executor refuses work after one
  sc_error broken_err;

  // ranks as processes (cfg.mpi); self -1 and the rest NULL otherwise
  int self;                     // the one rank this process holds (its job rank)
  comm_group *world;            // every rank of the job: orders, answers and alarms
  exec_dist *dist;              // the step protocol
  size_t *mem_used, *mem_total; // (n_ranks) rank 0: the others' device memory, as they answered
};

// Whether rank i lives in this process (every rank does, unless ranks are processes).
static bool held(const executor *ex, int i) { return ex->self < 0 || ex->self == i; }

// --- arenas

static size_t align_up(size_t n) { return (n + ALIGN - 1) & ~(size_t)(ALIGN - 1); }

// Carves typed pointers from one allocation: first pass counts (base NULL), second assigns.
typedef struct carver {
  char *base;
  size_t off;
} carver;

static void *carve(carver *c, size_t bytes) {
  void *p = c->base ? c->base + c->off : NULL;
  c->off += align_up(bytes);
  return p;
}

static void carve_mat(const rank *r, carver *cv, wmat *w, size_t rows, size_t cols) {
  *w = (wmat){0};
  if (r->ex->cfg.weight_dtype == SC_I8) {
    w->q = carve(cv, rows * cols);
    w->s = carve(cv, rows * sizeof(float));
  } else if (r->ex->cfg.weight_dtype == SC_BF16) {
    w->h = carve(cv, rows * cols * sizeof(uint16_t));
  } else if (r->ex->cfg.weight_dtype == SC_F16) {
    w->e = carve(cv, rows * cols * sizeof(uint16_t));
  } else {
    w->f = carve(cv, rows * cols * sizeof(float));
  }
}

static void carve_weights(rank *r, carver *cv) {
  const model_config *m = &r->ex->cfg.model;
  const shard_rank *s = &r->sh;
  size_t d = (size_t)m->dim, qd = (size_t)s->n_heads * m->head_dim,
         kvd = (size_t)s->n_kv * m->head_dim, f = (size_t)s->ffn, fl = sizeof(float);
  r->embed = s->first_stage ? carve(cv, (size_t)s->vocab * d * fl) : NULL;
  for (int l = 0; l < s->n_layers; l++) {
    layer_w *w = &r->layers[l];
    w->attn_norm = carve(cv, d * fl);
    carve_mat(r, cv, &w->wq, qd, d);
    carve_mat(r, cv, &w->wk, kvd, d);
    carve_mat(r, cv, &w->wv, kvd, d);
    carve_mat(r, cv, &w->wo, d, qd);
    w->ffn_norm = carve(cv, d * fl);
    carve_mat(r, cv, &w->wg, f, d);
    carve_mat(r, cv, &w->wu, f, d);
    carve_mat(r, cv, &w->wd, d, f);
  }
  r->final_norm = s->last_stage ? carve(cv, d * fl) : NULL;
  if (s->last_stage) carve_mat(r, cv, &r->lm_head, (size_t)s->vocab, d);
  else r->lm_head = (wmat){0};
}

static void carve_workspace(rank *r, carver *cv) {
  const exec_config *c = &r->ex->cfg;
  const model_config *m = &c->model;
  const shard_rank *s = &r->sh;
  size_t T = (size_t)c->max_tokens, S = (size_t)c->max_seqs, d = (size_t)m->dim,
         qd = (size_t)s->n_heads * m->head_dim, kvd = (size_t)s->n_kv * m->head_dim,
         f = (size_t)s->ffn, fl = sizeof(float), il = sizeof(int32_t);
  r->x = carve(cv, T * d * fl);
  r->h = carve(cv, T * d * fl);
  r->q = carve(cv, T * qd * fl);
  r->k = carve(cv, T * kvd * fl);
  r->v = carve(cv, T * kvd * fl);
  r->att = carve(cv, T * qd * fl);
  r->o = carve(cv, T * d * fl);
  r->g = carve(cv, T * f * fl);
  r->u = carve(cv, T * f * fl);
  r->xs = s->last_stage ? carve(cv, S * d * fl) : NULL;
  r->logits_l = s->last_stage ? carve(cv, S * (size_t)s->vocab * fl) : NULL;
  r->logits_all =
      s->last_stage && s->tp > 1 ? carve(cv, (size_t)s->tp * S * (size_t)s->vocab * fl) : NULL;
  r->d_amax_i = s->last_stage ? carve(cv, S * il) : NULL;
  r->d_amax_v = s->last_stage ? carve(cv, S * fl) : NULL;
  r->d_ids = carve(cv, T * il);
  r->d_pos = carve(cv, T * il);
  r->d_seq = carve(cv, T * il);
  r->d_bt = carve(cv, S * (size_t)r->ex->max_blocks * il);
}

// Allocates one arena on the rank's device and carves it with fn.
static sc_status alloc_arena(rank *r, void (*fn)(rank *, carver *), void **arena, size_t *bytes) {
  carver cv = {0};
  fn(r, &cv);
  SC_TRY(dev_alloc(r->dev, cv.off ? cv.off : ALIGN, arena));
  if (bytes) *bytes = cv.off;
  cv = (carver){.base = *arena};
  fn(r, &cv);
  return SC_OK;
}

// --- loading

// Reads rows [r0, r0+nr) x cols [c0, c0+nc) of `name` and copies them to dst on the device.
static sc_status load_slice(rank *r, float *staging, const char *name, int64_t r0, int64_t nr,
                            int64_t c0, int64_t nc, float *dst, sc_error *err) {
  SC_TRY(weight_source_read(r->ex->cfg.weights, name, r0, nr, c0, nc, staging, err));
  sc_status s = dev_copy(r->dev, dst, staging, (size_t)(nr * nc) * sizeof(float), DEV_H2D);
  if (s != SC_OK) return sc_fail(err, s, "copying '%s' to rank %d's device", name, r->index);
  return SC_OK;
}

// load_slice for a linear layer's weight: quantized (int8) or rounded (bf16, fp16) on the host
// first.
static sc_status load_mat(rank *r, float *staging, const char *name, int64_t r0, int64_t nr,
                          int64_t c0, int64_t nc, wmat *dst, sc_error *err) {
  if (dst->f) return load_slice(r, staging, name, r0, nr, c0, nc, dst->f, err);
  SC_TRY(weight_source_read(r->ex->cfg.weights, name, r0, nr, c0, nc, staging, err));
  size_t n = (size_t)(nr * nc);
  if (dst->h || dst->e) {
    uint16_t *h = malloc((n ? n : 1) * sizeof *h);
    sc_status s = h ? SC_OK : SC_OOM;
    if (h && dst->h) dev_bf16_from_f32(staging, n, h);
    else if (h) dev_f16_from_f32(staging, n, h);
    if (s == SC_OK) s = dev_copy(r->dev, dst->h ? dst->h : dst->e, h, n * sizeof *h, DEV_H2D);
    free(h);
    if (s != SC_OK)
      return sc_fail(err, s, "copying '%s' as %s to rank %d's device", name,
                     dst->h ? "bf16" : "fp16", r->index);
    return SC_OK;
  }
  int8_t *q = malloc(n ? n : 1);
  float *sc = malloc((size_t)(nr ? nr : 1) * sizeof *sc);
  sc_status s = q && sc ? SC_OK : SC_OOM;
  if (s == SC_OK) {
    dev_q8_quantize(staging, (int)nr, (int)nc, q, sc);
    s = dev_copy(r->dev, dst->q, q, n, DEV_H2D);
  }
  if (s == SC_OK) s = dev_copy(r->dev, dst->s, sc, (size_t)nr * sizeof *sc, DEV_H2D);
  free(q);
  free(sc);
  if (s != SC_OK)
    return sc_fail(err, s, "quantizing '%s' to int8 on rank %d's device", name, r->index);
  return SC_OK;
}

static sc_status load_weights(rank *r, float *staging, sc_error *err) {
  const model_config *m = &r->ex->cfg.model;
  const shard_rank *s = &r->sh;
  int64_t d = m->dim, hd = m->head_dim, D = m->dim;
  char name[MODEL_TENSOR_NAME_MAX];
  if (s->first_stage)
    SC_TRY(load_slice(r, staging, "model.embed_tokens.weight", s->vocab0, s->vocab, 0, d,
                      r->embed, err));
  for (int l = 0; l < s->n_layers; l++) {
    layer_w *w = &r->layers[l];
    int gl = s->layer0 + l;
#define LAYER_T(suffix) (snprintf(name, sizeof name, "model.layers.%d.%s", gl, suffix), name)
    SC_TRY(load_slice(r, staging, LAYER_T("input_layernorm.weight"), 0, 1, 0, D, w->attn_norm,
                      err));
    SC_TRY(load_mat(r, staging, LAYER_T("self_attn.q_proj.weight"), s->q_head0 * hd,
                    s->n_heads * hd, 0, D, &w->wq, err));
    SC_TRY(load_mat(r, staging, LAYER_T("self_attn.k_proj.weight"), s->kv_head0 * hd,
                    s->n_kv * hd, 0, D, &w->wk, err));
    SC_TRY(load_mat(r, staging, LAYER_T("self_attn.v_proj.weight"), s->kv_head0 * hd,
                    s->n_kv * hd, 0, D, &w->wv, err));
    SC_TRY(load_mat(r, staging, LAYER_T("self_attn.o_proj.weight"), 0, D, s->q_head0 * hd,
                    s->n_heads * hd, &w->wo, err));
    SC_TRY(load_slice(r, staging, LAYER_T("post_attention_layernorm.weight"), 0, 1, 0, D,
                      w->ffn_norm, err));
    SC_TRY(load_mat(r, staging, LAYER_T("mlp.gate_proj.weight"), s->ffn0, s->ffn, 0, D, &w->wg,
                    err));
    SC_TRY(load_mat(r, staging, LAYER_T("mlp.up_proj.weight"), s->ffn0, s->ffn, 0, D, &w->wu,
                    err));
    SC_TRY(load_mat(r, staging, LAYER_T("mlp.down_proj.weight"), 0, D, s->ffn0, s->ffn, &w->wd,
                    err));
#undef LAYER_T
  }
  if (s->last_stage) {
    SC_TRY(load_slice(r, staging, "model.norm.weight", 0, 1, 0, D, r->final_norm, err));
    const char *head = m->tied_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
    SC_TRY(load_mat(r, staging, head, s->vocab0, s->vocab, 0, D, &r->lm_head, err));
  }
  return SC_OK;
}

// Largest slice any rank reads, in floats (sizes the host staging buffer).
static size_t max_slice_floats(const model_config *m, const shard_rank *s) {
  size_t d = (size_t)m->dim, hd = (size_t)m->head_dim, mx = (size_t)s->vocab * d;
  size_t cand[] = {(size_t)s->n_heads * hd * d, (size_t)s->ffn * d};
  for (size_t i = 0; i < 2; i++)
    if (cand[i] > mx) mx = cand[i];
  return mx;
}

// --- the forward pass

// The deadline of one collective, which is also how long a rank may stay hung (ns).
static uint64_t hang_limit(const executor *ex) {
  return ex->cfg.comm_deadline_ns ? ex->cfg.comm_deadline_ns : DEFAULT_DEADLINE_NS;
}

// The text of the failure that broke one of rank r's communicators, or "".
static const char *group_error(const rank *r) {
  comm_group *gs[2] = {r->ex->cfg.tp > 1 ? r->ex->tp_groups[r->sh.pp_rank] : NULL,
                       r->ex->cfg.pp > 1 ? r->ex->pp_groups[r->sh.tp_rank] : NULL};
  for (int i = 0; i < 2; i++)
    if (comm_group_error(gs[i])[0]) return comm_group_error(gs[i]);
  return "";
}

// Why a call of rank r failed with s, in words, into buf.
static const char *cause_text(const rank *r, sc_status s, char *buf, size_t cap) {
  uint64_t dl = hang_limit(r->ex);
  switch (s) {
  case SC_DEVICE: {
    if (device_get_fault(r->dev).lost) return "device lost";
    const char *why = dev_last_error(r->dev)[0] ? dev_last_error(r->dev) : group_error(r);
    if (!why[0]) return "device error";
    snprintf(buf, cap, "device error: %s", why); // e.g. the CUDA call and the library's message
    return buf;
  }
  case SC_TIMEOUT: // only collectives time out
    snprintf(buf, cap, "deadline %.3f s passed (a peer stopped answering)", (double)dl / 1e9);
    return buf;
  case SC_ABORTED: return "aborted (the step was abandoned)";
  case SC_OOM: return "out of memory";
  default: return sc_status_name(s);
  }
}

// Records in r->err that `what` failed with s on rank r; returns s.
static sc_status rank_fail(rank *r, const char *what, sc_status s) {
  char buf[448];
  return sc_fail(&r->err, s, "rank %d (tp_rank=%d pp_rank=%d): %s: %s", r->index, r->sh.tp_rank,
                 r->sh.pp_rank, what, cause_text(r, s, buf, sizeof buf));
}

// y(m,n) = x(m,k) * w^T for a linear layer's weight, f32, int8 or bf16.
static sc_status mm(device *d, int m, int n, int k, const float *x, const wmat *w, float *y) {
  if (w->q) return dev_matmul_q8(d, m, n, k, x, w->q, w->s, 0.0f, y);
  if (w->h) return dev_matmul_bf16(d, m, n, k, x, w->h, 0.0f, y);
  if (w->e) return dev_matmul_f16(d, m, n, k, x, w->e, 0.0f, y);
  return dev_matmul(d, m, n, k, x, w->f, 0.0f, y);
}

// y[i] = x * w[i]^T for weights sharing x (q, k, v; gate, up): one grouped call when all are
// bf16 (the backend may run them as one launch), else one mm each.
static sc_status mm_group(device *d, int m, int k, const float *x, int count, const wmat *const *w,
                          const int *n, float *const *y) {
  const uint16_t *h[DEV_GROUP_MAX];
  bool all_bf16 = count <= DEV_GROUP_MAX;
  for (int i = 0; i < count && all_bf16; i++) {
    all_bf16 = w[i]->h && !w[i]->q;
    h[i] = w[i]->h;
  }
  if (all_bf16) return dev_matmul_bf16_group(d, m, k, x, count, h, n, y);
  for (int i = 0; i < count; i++) {
    sc_status s = mm(d, m, n[i], k, x, w[i], y[i]);
    if (s != SC_OK) return s;
  }
  return SC_OK;
}

#define RTRY(what, expr)                                                                           \
  do {                                                                                             \
    sc_status rs_ = (expr);                                                                        \
    if (rs_ != SC_OK) return rank_fail(r, what, rs_);                                              \
  } while (0)

// Layer l of this rank on x: h = attn_norm(x) comes in already computed, except for a stage's
// first layer; the residual add that ends the layer is fused with the next layer's norm.
static sc_status forward_layer(rank *r, int l, const dev_kv_batch *kb) {
  const model_config *m = &r->ex->cfg.model;
  const shard_rank *s = &r->sh;
  const layer_w *w = &r->layers[l];
  device *d = r->dev;
  int T = kb->n_tok, D = m->dim, hd = m->head_dim, qd = s->n_heads * hd, kvd = s->n_kv * hd;
  if (l == 0) RTRY("rmsnorm", dev_rmsnorm(d, T, D, r->x, w->attn_norm, m->norm_eps, r->h));
  const wmat *qkv_w[] = {&w->wq, &w->wk, &w->wv};
  const int qkv_n[] = {qd, kvd, kvd};
  float *qkv_y[] = {r->q, r->k, r->v};
  RTRY("q/k/v_proj", mm_group(d, T, D, r->h, 3, qkv_w, qkv_n, qkv_y));
  RTRY("rope and kv_store", dev_rope_kv_store(d, kb, s->n_heads, s->n_kv, hd, m->rope_theta, r->q,
                                              r->k, r->v, r->kv[l]));
  RTRY("attention", dev_attention(d, kb, s->n_heads, s->n_kv, hd, 1.0f / sqrtf((float)hd), r->q,
                                  r->kv[l], r->att));
  RTRY("o_proj", mm(d, T, D, qd, r->att, &w->wo, r->o));
  if (r->tp_comm) RTRY("all-reduce after o_proj", comm_allreduce_sum(r->tp_comm, r->o, (size_t)T * D));
  RTRY("residual add and rmsnorm",
       dev_add_rmsnorm(d, T, D, r->o, r->x, w->ffn_norm, m->norm_eps, r->h));
  const wmat *gu_w[] = {&w->wg, &w->wu};
  const int gu_n[] = {s->ffn, s->ffn};
  float *gu_y[] = {r->g, r->u};
  RTRY("gate/up_proj", mm_group(d, T, D, r->h, 2, gu_w, gu_n, gu_y));
  RTRY("swiglu", dev_swiglu(d, T, s->ffn, r->g, r->u, r->g));
  RTRY("down_proj", mm(d, T, D, s->ffn, r->g, &w->wd, r->o));
  if (r->tp_comm)
    RTRY("all-reduce after down_proj", comm_allreduce_sum(r->tp_comm, r->o, (size_t)T * D));
  if (l + 1 < s->n_layers)
    RTRY("residual add and rmsnorm", dev_add_rmsnorm(d, T, D, r->o, r->x,
                                                     r->layers[l + 1].attn_norm, m->norm_eps, r->h));
  else
    RTRY("residual add", dev_add(d, (size_t)T * D, r->o, r->x));
  return SC_OK;
}

// The rows of a decode micro-batch whose layers a rank records once and replays as a graph
// (dev_graph_begin): a batch of this many decode tokens or fewer, on a rank with no
// communicator (tp 1, pp 1: a collective waits on the host), with 16-bit or int8 weights (their
// products are the backend's own kernels, which keep no scratch that a larger batch regrows).
#define GRAPH_MAX_ROWS 8

// The embedding and the layers of micro-batch mb (positions, sequence ids and block tables are
// on the device already), as a graph where the rank may use one: the ops of a decode batch
// of T rows are the same every step but for what they read from the device, so a graph keyed
// by T replays them. A recording that fails is discarded (nothing of it ran) and the ops run
// one by one; the rank then records no more graphs.
static sc_status forward_layers(rank *r, const mb_meta *mb, const dev_kv_batch *kb) {
  executor *ex = r->ex;
  const shard_rank *s = &r->sh;
  device *d = r->dev;
  int T = mb->n_tok, D = ex->cfg.model.dim, mode = DEV_GRAPH_OFF;
  if (!r->no_graphs && !r->tp_comm && !r->pp_comm && mb->max_run <= 1 && T <= GRAPH_MAX_ROWS &&
      (ex->cfg.weight_dtype == SC_BF16 || ex->cfg.weight_dtype == SC_F16 ||
       ex->cfg.weight_dtype == SC_I8) &&
      dev_graph_begin(d, (uint64_t)T, T, &mode) != SC_OK)
    mode = DEV_GRAPH_OFF;
  if (mode == DEV_GRAPH_REPLAYED) return SC_OK;
  for (int pass = 0; pass < 2; pass++) {
    sc_status st = SC_OK;
    if (s->first_stage) {
      st = dev_embedding(d, T, D, r->d_ids, r->embed, s->vocab0, s->vocab, r->x);
      if (st != SC_OK) st = rank_fail(r, "embedding", st);
      if (st == SC_OK && r->tp_comm) {
        st = comm_allreduce_sum(r->tp_comm, r->x, (size_t)T * D);
        if (st != SC_OK) st = rank_fail(r, "all-reduce of embeddings", st);
      }
    } else {
      st = comm_recv(r->pp_comm, r->x, (size_t)T * D * sizeof(float), s->pp_rank - 1);
      if (st != SC_OK) st = rank_fail(r, "receive activations", st);
    }
    for (int l = 0; l < s->n_layers && st == SC_OK; l++) st = forward_layer(r, l, kb);
    if (mode != DEV_GRAPH_RECORDING) return st;
    mode = DEV_GRAPH_OFF;
    sc_status es = dev_graph_end(d, st == SC_OK);
    if (st == SC_OK && es == SC_OK) return SC_OK; // recorded, and run once
    r->no_graphs = true; // run them again, one by one
  }
  return SC_OK; // not reached: the second pass records nothing
}

// The last stage: logits of the sampled rows, gathered over TP, copied to the host; or, when the
// step asks for greedy tokens (exec_batch.tokens), each TP rank's pick within its own vocab
// slice and its logit, copied to the host (executor_run merges the slices): no all-gather and
// no logits cross to the host.
static sc_status forward_head(rank *r, const mb_meta *mb) {
  executor *ex = r->ex;
  const model_config *m = &ex->cfg.model;
  const shard_rank *s = &r->sh;
  device *d = r->dev;
  int ns = mb->n_sample, D = m->dim, V = s->vocab;
  if (ns == 0) return SC_OK;
  for (int j = 0; j < ns; j++)
    RTRY("gather rows", dev_copy(d, r->xs + (size_t)j * D,
                                 r->x + (size_t)ex->h_sample[mb->sample0 + j] * D,
                                 (size_t)D * sizeof(float), DEV_D2D));
  RTRY("final rmsnorm", dev_rmsnorm(d, ns, D, r->xs, r->final_norm, m->norm_eps, r->xs));
  RTRY("lm_head", mm(d, ns, V, D, r->xs, &r->lm_head, r->logits_l));
  if (ex->batch->tokens && ex->batch->draws) { // one TP rank: the whole vocabulary is here
    size_t at = (size_t)mb->sample0;
    RTRY("sampled picks", dev_sample(d, ns, V, r->logits_l, ex->batch->draws + mb->sample0,
                                     r->d_amax_i));
    RTRY("picks to host", dev_copy(d, ex->h_amax_i + at, r->d_amax_i, (size_t)ns * sizeof(int32_t),
                                   DEV_D2H));
    for (int j = 0; j < ns; j++) ex->h_amax_v[at + j] = 0;
    return SC_OK;
  }
  if (ex->batch->tokens) {
    size_t at = (size_t)s->tp_rank * (size_t)ex->cfg.max_seqs + (size_t)mb->sample0;
    RTRY("greedy picks", dev_argmax(d, ns, V, r->logits_l, r->d_amax_i, r->d_amax_v));
    RTRY("picks to host", dev_copy(d, ex->h_amax_i + at, r->d_amax_i, (size_t)ns * sizeof(int32_t),
                                   DEV_D2H));
    RTRY("picks to host",
         dev_copy(d, ex->h_amax_v + at, r->d_amax_v, (size_t)ns * sizeof(float), DEV_D2H));
    for (int j = 0; j < ns; j++) // columns of the slice -> token ids
      if (ex->h_amax_i[at + j] >= 0) ex->h_amax_i[at + j] += s->vocab0;
    return SC_OK;
  }
  const float *src = r->logits_l;
  if (r->tp_comm) {
    RTRY("all-gather of logits", comm_allgather(r->tp_comm, r->logits_l, r->logits_all, (size_t)ns * V));
    src = r->logits_all;
  }
  if (s->tp_rank != 0) return SC_OK;
  float *out = ex->batch->logits + (size_t)mb->sample0 * m->vocab_size;
  for (int tr = 0; tr < s->tp; tr++)
    for (int j = 0; j < ns; j++)
      RTRY("logits to host",
           dev_copy(d, out + (size_t)j * m->vocab_size + (size_t)tr * V,
                    src + ((size_t)tr * ns + j) * V, (size_t)V * sizeof(float), DEV_D2H));
  return SC_OK;
}

// Fills d_bt (n_seq, max_blocks) for micro-batch mb: rows of sequences with device memory come
// from their own device row (uploading only the entries it lacks), the others from the host.
static sc_status upload_block_tables(rank *r, const mb_meta *mb) {
  executor *ex = r->ex;
  device *d = r->dev;
  size_t mbk = (size_t)ex->max_blocks, il = sizeof(int32_t);
  for (int j = 0; j < mb->n_seq; j++) {
    int i = mb->seq0 + j;
    const exec_seq *q = &ex->batch->seqs[i];
    const int32_t *h = ex->h_bt + (size_t)i * mbk;
    int32_t *dst = r->d_bt + (size_t)j * mbk;
    if (!q->mem) {
      RTRY("upload block tables", dev_copy(d, dst, h, mbk * il, DEV_H2D));
      continue;
    }
    int32_t *row = q->mem->rows[r->index];
    int from = ex->bt_from[i], nb = q->n_blocks;
    if (from < nb)
      RTRY("update the sequence's block table",
           dev_copy(d, row + from, h + from, (size_t)(nb - from) * il, DEV_H2D));
    RTRY("gather block tables", dev_copy(d, dst, row, (size_t)nb * il, DEV_D2D));
  }
  return SC_OK;
}

static sc_status forward_microbatch(rank *r, const mb_meta *mb) {
  executor *ex = r->ex;
  const model_config *m = &ex->cfg.model;
  const shard_rank *s = &r->sh;
  device *d = r->dev;
  int T = mb->n_tok, D = m->dim;
  size_t il = sizeof(int32_t);
  RTRY("upload positions", dev_copy(d, r->d_pos, ex->h_pos + mb->tok0, (size_t)T * il, DEV_H2D));
  RTRY("upload seq ids", dev_copy(d, r->d_seq, ex->h_seq + mb->tok0, (size_t)T * il, DEV_H2D));
  SC_TRY(upload_block_tables(r, mb));
  dev_kv_batch kb = {.n_tok = T, .pos = r->d_pos, .seq = r->d_seq, .block_tables = r->d_bt,
                     .max_blocks = ex->max_blocks, .block_size = ex->cfg.block_size,
                     .max_run = mb->max_run,
                     .reduced_precision = ex->cfg.weight_dtype == SC_BF16 ||
                                          ex->cfg.weight_dtype == SC_F16};
  if (s->first_stage)
    RTRY("upload ids", dev_copy(d, r->d_ids, ex->h_ids + mb->tok0, (size_t)T * il, DEV_H2D));
  SC_TRY(forward_layers(r, mb, &kb));
  if (!s->last_stage)
    RTRY("send activations",
         comm_send(r->pp_comm, r->x, (size_t)T * D * sizeof(float), s->pp_rank + 1));
  else
    SC_TRY(forward_head(r, mb));
  return SC_OK;
}

static sc_status rank_forward(rank *r) {
  r->err.msg[0] = 0;
  for (int i = 0; i < r->ex->n_mb; i++) SC_TRY(forward_microbatch(r, &r->ex->mb[i]));
  RTRY("synchronize", dev_synchronize(r->dev));
  return SC_OK;
}

// --- threads

// Abandons the step: aborts every group and releases every device, so that ranks blocked in a
// collective or by a hung device return (SC_ABORTED). Callable from any thread holding no
// executor lock.
static void abort_groups(executor *ex) {
  for (int i = 0; ex->tp_groups && i < ex->cfg.pp; i++) comm_group_abort(ex->tp_groups[i]);
  for (int i = 0; ex->pp_groups && i < ex->cfg.tp; i++) comm_group_abort(ex->pp_groups[i]);
  comm_group_abort(ex->world);
  for (int i = 0; i < ex->n_ranks; i++) device_fault_release(ex->ranks[i].dev);
}

static void *rank_main(void *arg) {
  rank *r = arg;
  executor *ex = r->ex;
  uint64_t seen = 0;
  pthread_mutex_lock(&ex->mu);
  for (;;) {
    while (ex->gen == seen && !ex->quit) pthread_cond_wait(&ex->cv_go, &ex->mu);
    if (ex->quit) break;
    seen = ex->gen;
    pthread_mutex_unlock(&ex->mu);
    sc_status s = rank_forward(r);
    if (s != SC_OK) abort_groups(ex);
    pthread_mutex_lock(&ex->mu);
    r->status = s;
    atomic_store_explicit(&r->busy, false, memory_order_relaxed);
    if (++ex->n_done == ex->n_ranks) pthread_cond_signal(&ex->cv_done);
  }
  pthread_mutex_unlock(&ex->mu);
  return NULL;
}

// --- lifecycle

// Opens the group of the n ranks first, first + stride, ... through the comm registry, which
// picks the communicator that moves the backend's buffers.
static sc_status group_open(executor *ex, int first, int stride, int n, comm_group **g,
                            sc_error *err) {
  device **devs = malloc((size_t)n * sizeof *devs); // (n) the ranks' devices
  if (!devs) return sc_fail(err, SC_OOM, "executor: out of memory");
  for (int j = 0; j < n; j++) devs[j] = ex->ranks[first + j * stride].dev;
  sc_status s = comm_group_open(ex->cfg.backend, n, devs, ex->cfg.comm_deadline_ns, g, err);
  free(devs);
  return s;
}

// Ranks as processes: the world group, then this rank's TP group and PP group (the same order
// on every rank, so the collective creations never wait on each other in a cycle). Rank 0's
// groups watch the world for alarms, so a rank that failed ends rank 0's waits at once.
static sc_status make_mpi_groups(executor *ex, sc_error *err) {
  int tp = ex->cfg.tp, pp = ex->cfg.pp, n = ex->n_ranks;
  rank *r = &ex->ranks[ex->self];
  int *m = malloc((size_t)n * sizeof *m); // (n) members of the group being made
  if (!m) return sc_fail(err, SC_OOM, "executor: out of memory");
  const char *be = ex->cfg.backend;
  uint64_t dl = ex->cfg.comm_deadline_ns;
  for (int i = 0; i < n; i++) m[i] = i;
  sc_status s = comm_group_open_mpi("cpu", n, m, r->dev, dl, &ex->world, err); // host buffers
  for (int j = 0; s == SC_OK && tp > 1 && j < tp; j++) m[j] = r->sh.pp_rank * tp + j;
  if (s == SC_OK && tp > 1)
    s = comm_group_open_mpi(be, tp, m, r->dev, dl, &ex->tp_groups[r->sh.pp_rank], err);
  for (int j = 0; s == SC_OK && pp > 1 && j < pp; j++) m[j] = r->sh.tp_rank + j * tp;
  if (s == SC_OK && pp > 1)
    s = comm_group_open_mpi(be, pp, m, r->dev, dl, &ex->pp_groups[r->sh.tp_rank], err);
  free(m);
  SC_TRY(s);
  if (tp > 1) r->tp_comm = comm_group_rank(ex->tp_groups[r->sh.pp_rank], r->sh.tp_rank);
  if (pp > 1) r->pp_comm = comm_group_rank(ex->pp_groups[r->sh.tp_rank], r->sh.pp_rank);
  if (ex->self == 0) {
    comm_group_watch(ex->world, ex->world);
    if (tp > 1) comm_group_watch(ex->tp_groups[r->sh.pp_rank], ex->world);
    if (pp > 1) comm_group_watch(ex->pp_groups[r->sh.tp_rank], ex->world);
  }
  return SC_OK;
}

static sc_status make_groups(executor *ex, sc_error *err) {
  int tp = ex->cfg.tp, pp = ex->cfg.pp;
  ex->tp_groups = calloc((size_t)pp, sizeof *ex->tp_groups);
  ex->pp_groups = calloc((size_t)tp, sizeof *ex->pp_groups);
  if (!ex->tp_groups || !ex->pp_groups) return sc_fail(err, SC_OOM, "executor: out of memory");
  if (ex->self >= 0) return make_mpi_groups(ex, err);
  for (int s = 0; tp > 1 && s < pp; s++) // stage s: ranks s * tp .. s * tp + tp - 1
    SC_TRY(group_open(ex, s * tp, 1, tp, &ex->tp_groups[s], err));
  for (int t = 0; pp > 1 && t < tp; t++) // TP index t: ranks t, t + tp, ...
    SC_TRY(group_open(ex, t, tp, pp, &ex->pp_groups[t], err));
  for (int i = 0; i < ex->n_ranks; i++) {
    rank *r = &ex->ranks[i];
    if (tp > 1) r->tp_comm = comm_group_rank(ex->tp_groups[r->sh.pp_rank], r->sh.tp_rank);
    if (pp > 1) r->pp_comm = comm_group_rank(ex->pp_groups[r->sh.tp_rank], r->sh.pp_rank);
  }
  return SC_OK;
}

// The device index of rank i: exec_config.devices, else first_device + i modulo the devices
// the backend has (0 on cpu, which has one; device_open ignores it there).
static int rank_gpu(const executor *ex, int i) {
  const exec_config *c = &ex->cfg;
  int k = c->first_device + i;
  if (c->devices && c->n_devices > 0) return c->devices[k % c->n_devices];
  int n = device_backend_count(c->backend);
  return n > 0 ? k % n : k; // no GPU: device_open says so
}

static sc_status rank_init(executor *ex, rank *r, float **staging, size_t *staging_cap,
                           sc_error *err) {
  const exec_config *c = &ex->cfg;
  const model_config *m = &c->model;
  SC_TRY(device_open(c->backend, rank_gpu(ex, r->index), &r->dev, err));
  if (c->weight_dtype == SC_BF16 && !dev_has_matmul_bf16(r->dev))
    return sc_fail(err, SC_INVALID, "weight_dtype bf16 is not supported by the %s backend; use "
                   "f32 or int8", c->backend);
  if (c->weight_dtype == SC_F16 && !dev_has_matmul_f16(r->dev))
    return sc_fail(err, SC_INVALID, "weight_dtype f16 is not supported by the %s backend; use "
                   "f32 or int8", c->backend);
  if (c->weight_dtype == SC_I8 && !dev_has_matmul_q8(r->dev))
    return sc_fail(err, SC_INVALID, "weight_dtype int8 is not supported by the %s backend; use "
                   "f32", c->backend);
  r->layers = calloc((size_t)r->sh.n_layers, sizeof *r->layers);
  r->kv = calloc((size_t)r->sh.n_layers, sizeof *r->kv);
  if (!r->layers || !r->kv) return SC_OOM;
  sc_status s = alloc_arena(r, carve_weights, &r->w_arena, &r->w_bytes);
  if (s != SC_OK)
    return sc_fail(err, s, "rank %d: cannot allocate %s of weights", r->index, "its slices");
  size_t need = max_slice_floats(m, &r->sh);
  if (need > *staging_cap) {
    float *p = realloc(*staging, need * sizeof(float));
    if (!p) return sc_fail(err, SC_OOM, "cannot allocate a staging buffer of %zu floats", need);
    *staging = p;
    *staging_cap = need;
  }
  SC_TRY(load_weights(r, *staging, err));
  // KV: (n_blocks, block_size, n_kv_local, head_dim) for K and for V, per local layer.
  size_t per = (size_t)c->n_blocks * c->block_size * r->sh.n_kv * m->head_dim * sizeof(float);
  r->kv_bytes = 2 * align_up(per) * (size_t)r->sh.n_layers;
  s = dev_alloc(r->dev, r->kv_bytes ? r->kv_bytes : ALIGN, &r->kv_arena);
  if (s != SC_OK)
    return sc_fail(err, s, "rank %d: cannot allocate %zu bytes of KV cache (%d blocks)",
                   r->index, r->kv_bytes, c->n_blocks);
  for (int l = 0; l < r->sh.n_layers; l++) {
    r->kv[l].k = (float *)((char *)r->kv_arena + (2 * (size_t)l) * align_up(per));
    r->kv[l].v = (float *)((char *)r->kv_arena + (2 * (size_t)l + 1) * align_up(per));
  }
  s = alloc_arena(r, carve_workspace, &r->ws_arena, NULL);
  if (s != SC_OK) return sc_fail(err, s, "rank %d: cannot allocate its activation workspace", r->index);
  return SC_OK;
}

// Ranks as processes: this process holds the rank of its job rank; the job must have exactly
// one process per rank.
static sc_status mpi_begin(executor *ex, sc_error *err) {
  if (!sc_mpi_active())
    return sc_fail(err, SC_INVALID, "executor: ranks as processes need MPI: start the job with "
                   "mpirun or srun (%s)", sc_mpi_built() ? "MPI is not initialised here" :
                   "and a build with MPI");
  if (sc_mpi_size() != ex->n_ranks)
    return sc_fail(err, SC_INVALID, "executor: the MPI job has %d processes; tp %d x pp %d needs "
                   "%d", sc_mpi_size(), ex->cfg.tp, ex->cfg.pp, ex->n_ranks);
  ex->self = sc_mpi_rank();
  ex->mem_used = calloc((size_t)ex->n_ranks, sizeof *ex->mem_used);
  ex->mem_total = calloc((size_t)ex->n_ranks, sizeof *ex->mem_total);
  if (!ex->mem_used || !ex->mem_total || exec_dist_new(ex->n_ranks, ex->cfg.model.vocab_size,
                                                        &ex->dist) != SC_OK)
    return sc_fail(err, SC_OOM, "executor: out of memory");
  return SC_OK;
}

sc_status executor_new(const exec_config *cfg, executor **out, sc_error *err) {
  *out = NULL;
  SC_TRY(shard_layout_check(&cfg->model, cfg->tp, cfg->pp, err));
  if (cfg->max_tokens < 1 || cfg->max_seqs < 1 || cfg->n_blocks < 1 || cfg->block_size < 1)
    return sc_fail(err, SC_INVALID, "executor: max_tokens, max_seqs, n_blocks and block_size must be positive");
  executor *ex = calloc(1, sizeof *ex);
  if (!ex) return SC_OOM;
  ex->cfg = *cfg;
  ex->n_ranks = cfg->tp * cfg->pp;
  ex->self = -1;
  ex->max_blocks = (cfg->model.max_seq_len + cfg->block_size - 1) / cfg->block_size;
  pthread_mutex_init(&ex->mu, NULL);
  pthread_cond_init(&ex->cv_go, NULL);
  pthread_condattr_t ca; // cv_done, cv_wd: timed waits on the monotonic clock (the watchdog)
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&ex->cv_done, &ca);
  pthread_cond_init(&ex->cv_wd, &ca);
  pthread_condattr_destroy(&ca);
  atomic_init(&ex->wd_gave_up, -1);
  size_t T = (size_t)cfg->max_tokens, S = (size_t)cfg->max_seqs;
  ex->ranks = calloc((size_t)ex->n_ranks, sizeof *ex->ranks);
  ex->mb = calloc((size_t)cfg->pp, sizeof *ex->mb);
  ex->h_ids = malloc(T * sizeof(int32_t));
  ex->h_pos = malloc(T * sizeof(int32_t));
  ex->h_seq = malloc(T * sizeof(int32_t));
  ex->h_bt = calloc(S * (size_t)ex->max_blocks, sizeof(int32_t));
  ex->h_sample = malloc(S * sizeof(int32_t));
  ex->bt_from = calloc(S, sizeof(int));
  ex->h_amax_i = malloc((size_t)cfg->tp * S * sizeof(int32_t));
  ex->h_amax_v = malloc((size_t)cfg->tp * S * sizeof(float));
  sc_status s = SC_OK;
  if (!ex->ranks || !ex->mb || !ex->h_ids || !ex->h_pos || !ex->h_seq || !ex->h_bt ||
      !ex->h_sample || !ex->bt_from || !ex->h_amax_i || !ex->h_amax_v)
    s = sc_fail(err, SC_OOM, "executor: out of host memory");
  float *staging = NULL;
  size_t staging_cap = 0;
  if (s == SC_OK && cfg->mpi) s = mpi_begin(ex, err);
  for (int i = 0; s == SC_OK && i < ex->n_ranks; i++) {
    rank *r = &ex->ranks[i];
    r->ex = ex;
    r->index = i;
    r->sh = shard_rank_plan(&cfg->model, cfg->tp, cfg->pp, i % cfg->tp, i / cfg->tp);
    if (held(ex, i)) s = rank_init(ex, r, &staging, &staging_cap, err);
  }
  free(staging);
  if (ex->self >= 0) s = exec_dist_agree(s, err); // every rank built, or none goes on
  if (s == SC_OK) s = make_groups(ex, err);
  for (int i = 0; s == SC_OK && ex->n_ranks > 1 && ex->self < 0 && i < ex->n_ranks; i++) {
    if (pthread_create(&ex->ranks[i].thread, NULL, rank_main, &ex->ranks[i]) != 0)
      s = sc_fail(err, SC_OOM, "executor: cannot start the thread of rank %d", i);
    else
      ex->ranks[i].thread_started = true;
  }
  if (s != SC_OK) {
    executor_free(ex);
    return s;
  }
  *out = ex;
  return SC_OK;
}

void executor_free(executor *ex) {
  if (!ex) return;
  if (ex->self == 0 && ex->world) exec_dist_send_quit(ex->dist, comm_group_rank(ex->world, 0));
  pthread_mutex_lock(&ex->mu);
  ex->quit = true;
  pthread_cond_broadcast(&ex->cv_go);
  pthread_cond_broadcast(&ex->cv_wd);
  bool wd = ex->wd_started;
  pthread_mutex_unlock(&ex->mu);
  if (wd) pthread_join(ex->wd_thread, NULL);
  for (int i = 0; ex->ranks && i < ex->n_ranks; i++) device_fault_release(ex->ranks[i].dev);
  for (int i = 0; ex->ranks && i < ex->n_ranks; i++) {
    rank *r = &ex->ranks[i];
    if (r->thread_started) pthread_join(r->thread, NULL);
    if (r->dev) {
      dev_free(r->dev, r->w_arena);
      dev_free(r->dev, r->kv_arena);
      dev_free(r->dev, r->ws_arena);
    }
    device_free(r->dev);
    free(r->layers);
    free(r->kv);
  }
  for (int i = 0; ex->tp_groups && i < ex->cfg.pp; i++) comm_group_free(ex->tp_groups[i]);
  for (int i = 0; ex->pp_groups && i < ex->cfg.tp; i++) comm_group_free(ex->pp_groups[i]);
  comm_group_free(ex->world);
  exec_dist_free(ex->dist);
  free(ex->mem_used);
  free(ex->mem_total);
  free(ex->tp_groups);
  free(ex->pp_groups);
  free(ex->ranks);
  free(ex->mb);
  free(ex->h_ids);
  free(ex->h_pos);
  free(ex->h_seq);
  free(ex->h_bt);
  free(ex->h_sample);
  free(ex->h_amax_i);
  free(ex->h_amax_v);
  free(ex->bt_from);
  pthread_mutex_destroy(&ex->mu);
  pthread_cond_destroy(&ex->cv_go);
  pthread_cond_destroy(&ex->cv_done);
  pthread_cond_destroy(&ex->cv_wd);
  free(ex);
}

// --- one step

bool exec_mb_starts_here(long tok, long total, int i, int n_seqs, int m, int pp) {
  int n_mb = n_seqs < pp ? n_seqs : pp;
  // Start the next micro-batch once this one has its share of tokens, keeping at least one
  // sequence for each micro-batch still to come.
  return m + 1 < n_mb && (tok >= total * (m + 1) / n_mb || n_seqs - i <= n_mb - m - 1);
}

int exec_split_microbatches(const int *n_tok, int n_seqs, int pp, int *mb_first) {
  long total = 0, tok = 0;
  for (int i = 0; i < n_seqs; i++) total += n_tok[i];
  int m = 0;
  mb_first[0] = 0;
  for (int i = 0; i < n_seqs; i++) {
    if (i > mb_first[m] && exec_mb_starts_here(tok, total, i, n_seqs, m, pp)) mb_first[++m] = i;
    tok += n_tok[i];
  }
  mb_first[m + 1] = n_seqs;
  return m + 1;
}

// Flattens the batch into host arrays and splits it into micro-batches (one per stage at
// most, balanced by tokens, each at least one sequence).
static sc_status flatten(executor *ex, const exec_batch *b, sc_error *err) {
  int total = 0, n_sample = 0;
  for (int i = 0; i < b->n_seqs; i++) {
    const exec_seq *q = &b->seqs[i];
    if (q->n < 1 || q->start < 0 || q->start + q->n > ex->cfg.model.max_seq_len ||
        q->n_blocks > ex->max_blocks ||
        (long)q->n_blocks * ex->cfg.block_size < (long)q->start + q->n)
      return sc_fail(err, SC_INVALID, "executor: sequence %d of the step is malformed", i);
    total += q->n;
  }
  if (b->n_seqs < 1 || b->n_seqs > ex->cfg.max_seqs || total > ex->cfg.max_tokens)
    return sc_fail(err, SC_INVALID, "executor: step of %d sequences / %d tokens exceeds %d / %d",
                   b->n_seqs, total, ex->cfg.max_seqs, ex->cfg.max_tokens);
  int tok = 0, m = 0;
  mb_meta *cur = &ex->mb[0];
  *cur = (mb_meta){0};
  for (int i = 0; i < b->n_seqs; i++) {
    const exec_seq *q = &b->seqs[i];
    if (m + 1 < ex->cfg.pp && cur->n_seq > 0 &&
        exec_mb_starts_here(tok, total, i, b->n_seqs, m, ex->cfg.pp)) {
      m++;
      cur = &ex->mb[m];
      *cur = (mb_meta){.seq0 = i, .tok0 = tok, .sample0 = n_sample};
    }
    int row = cur->n_seq++;
    if (q->n > cur->max_run) cur->max_run = q->n;
    for (int j = 0; j < q->n; j++) {
      ex->h_ids[tok + j] = q->tokens[j];
      ex->h_pos[tok + j] = q->start + j;
      ex->h_seq[tok + j] = row;
    }
    int32_t *bt = ex->h_bt + (size_t)i * ex->max_blocks;
    memcpy(bt, q->blocks, (size_t)q->n_blocks * sizeof(int32_t));
    for (int j = q->n_blocks; j < ex->max_blocks; j++) bt[j] = q->n_blocks ? q->blocks[0] : 0;
    if (q->mem) { // the entries its device rows lack: from the first that changed
      exec_seq_mem *sm = q->mem;
      int from = 0, same = q->n_blocks < sm->n_up ? q->n_blocks : sm->n_up;
      while (from < same && sm->host[from] == q->blocks[from]) from++;
      memcpy(sm->host + from, q->blocks + from, (size_t)(q->n_blocks - from) * sizeof(int32_t));
      sm->n_up = q->n_blocks;
      ex->bt_from[i] = from;
    }
    if (q->want_logits) {
      ex->h_sample[n_sample++] = tok + q->n - 1 - cur->tok0;
      cur->n_sample++;
    }
    tok += q->n;
    cur->n_tok += q->n;
  }
  ex->n_mb = m + 1;
  ex->n_want = n_sample;
  return SC_OK;
}

// --- the watchdog

// When the watchdog looks next: an eighth of the limit from now, within [1 ms, 100 ms].
static struct timespec next_tick(const executor *ex) {
  uint64_t tick = hang_limit(ex) / WATCH_DIV;
  if (tick < WATCH_MIN_NS) tick = WATCH_MIN_NS;
  if (tick > WATCH_MAX_NS) tick = WATCH_MAX_NS;
  uint64_t t = sc_monotonic_ns() + tick;
  return (struct timespec){.tv_sec = (time_t)(t / NS_PER_S), .tv_nsec = (long)(t % NS_PER_S)};
}

// One look: a rank that still has work while its device hangs. Returns its index once it has
// been seen so for the limit (*since: when the hang was first seen, 0: not hung), else -1.
static int hang_look(executor *ex, uint64_t *since) {
  int h = -1;
  for (int i = 0; h < 0 && i < ex->n_ranks; i++)
    if (atomic_load_explicit(&ex->ranks[i].busy, memory_order_relaxed) &&
        device_get_fault(ex->ranks[i].dev).hang)
      h = i;
  uint64_t now = sc_monotonic_ns();
  if (h < 0) {
    *since = 0;
    return -1;
  }
  if (!*since) *since = now;
  return now - *since >= hang_limit(ex) ? h : -1;
}

// Several ranks: waits (ex->mu held) until every rank has finished the step, looking for a
// hung rank every tick; abandons the step (abort_groups) when hang_look finds one. Returns
// that rank's index, or -1.
static int watch_step(executor *ex) {
  uint64_t since = 0;
  int gave_up = -1;
  while (ex->n_done < ex->n_ranks) {
    struct timespec ts = next_tick(ex);
    pthread_cond_timedwait(&ex->cv_done, &ex->mu, &ts);
    if (ex->n_done == ex->n_ranks || gave_up >= 0) continue;
    gave_up = hang_look(ex, &since);
    if (gave_up >= 0) {
      pthread_mutex_unlock(&ex->mu);
      abort_groups(ex);
      pthread_mutex_lock(&ex->mu);
    }
  }
  return gave_up;
}

// A single rank (it runs on the caller's thread, so another thread must watch it): looks every
// tick until the executor is freed; abandons a step that hang_look finds hung.
static void *watchdog_main(void *arg) {
  executor *ex = arg;
  uint64_t since = 0;
  pthread_mutex_lock(&ex->mu);
  while (!ex->quit) {
    struct timespec ts = next_tick(ex);
    pthread_cond_timedwait(&ex->cv_wd, &ex->mu, &ts);
    if (ex->quit) break;
    int h = hang_look(ex, &since);
    if (h < 0) continue;
    atomic_store(&ex->wd_gave_up, h);
    since = 0;
    pthread_mutex_unlock(&ex->mu);
    abort_groups(ex);
    pthread_mutex_lock(&ex->mu);
  }
  pthread_mutex_unlock(&ex->mu);
  return NULL;
}

// Starts the single rank's watchdog thread once. SC_OK or SC_OOM (no thread).
static sc_status watchdog_start(executor *ex) {
  pthread_mutex_lock(&ex->mu);
  sc_status s = SC_OK;
  if (!ex->wd_started && !ex->quit) {
    if (pthread_create(&ex->wd_thread, NULL, watchdog_main, ex) == 0)
      ex->wd_started = true;
    else
      s = SC_OOM;
  }
  pthread_mutex_unlock(&ex->mu);
  return s;
}

// Runs the step on every rank; returns the rank a watchdog abandoned it for, or -1.
static int run_ranks(executor *ex) {
  for (int i = 0; i < ex->n_ranks; i++)
    atomic_store_explicit(&ex->ranks[i].busy, true, memory_order_relaxed);
  if (ex->n_ranks == 1 || ex->self >= 0) { // one rank here: on the caller's thread
    rank *r = &ex->ranks[ex->self < 0 ? 0 : ex->self];
    atomic_store(&ex->wd_gave_up, -1);
    r->status = rank_forward(r);
    atomic_store_explicit(&r->busy, false, memory_order_relaxed);
    int g = atomic_exchange(&ex->wd_gave_up, -1);
    return r->status == SC_OK ? -1 : g; // given up as the step ended well: nothing abandoned
  }
  pthread_mutex_lock(&ex->mu);
  ex->n_done = 0;
  ex->gen++;
  pthread_cond_broadcast(&ex->cv_go);
  int gave_up = watch_step(ex);
  pthread_mutex_unlock(&ex->mu);
  return gave_up;
}

// exec_batch.tokens from the TP ranks' picks: for each sampled row the largest logit over the
// slices (the lower slice on ties, so the first largest of the whole row, as on the host), -1
// when any slice held a NaN or an infinity.
static void merge_picks(const executor *ex, int n_sample, int32_t *tokens) {
  size_t S = (size_t)ex->cfg.max_seqs;
  for (int j = 0; j < n_sample; j++) {
    int32_t best = -1;
    float bv = 0;
    bool bad = false;
    for (int t = 0; t < ex->cfg.tp; t++) {
      int32_t i = ex->h_amax_i[(size_t)t * S + (size_t)j];
      float v = ex->h_amax_v[(size_t)t * S + (size_t)j];
      if (i < 0) bad = true;
      else if (best < 0 || v > bv) best = i, bv = v;
    }
    tokens[j] = bad ? -1 : best;
  }
}

// Rank i's device, or for a rank in another process this one's (the job runs one backend).
static const device *dev_like(const executor *ex, int i) {
  return held(ex, i) ? ex->ranks[i].dev : ex->ranks[ex->self].dev;
}

bool executor_picks_greedy(const executor *ex) {
  for (int i = 0; i < ex->n_ranks; i++)
    if (ex->ranks[i].sh.last_stage && !dev_has_argmax(dev_like(ex, i))) return false;
  return true;
}

bool executor_picks_sampled(const executor *ex) {
  if (ex->cfg.tp != 1) return false;
  for (int i = 0; i < ex->n_ranks; i++)
    if (ex->ranks[i].sh.last_stage && !dev_has_sample(dev_like(ex, i))) return false;
  return true;
}

// Rank 0 of processes: every other rank's answer to the step, into the picks, the logits and
// the memory figures.
static sc_status collect(executor *ex, const exec_batch *b, sc_error *err) {
  dist_sink sink = {.tp = ex->cfg.tp, .max_seqs = (size_t)ex->cfg.max_seqs,
                    .amax_i = ex->h_amax_i, .amax_v = ex->h_amax_v,
                    .logits = b->tokens ? NULL : b->logits, .mem_used = ex->mem_used,
                    .mem_total = ex->mem_total};
  return exec_dist_collect(ex->dist, comm_group_rank(ex->world, 0), &sink, hang_limit(ex), err);
}

// Rank 0 of processes, its own part of the step failed (bad): when that failure only followed
// another rank's (an alarm ended its wait, or it waited for a rank that had failed), the other
// rank's alarm is the cause: true with it in *s and err.
static bool remote_cause(executor *ex, const rank *bad, sc_status *s, sc_error *err) {
  if (!bad || (bad->status != SC_ABORTED && bad->status != SC_TIMEOUT)) return false;
  return exec_dist_take_alarm(comm_group_rank(ex->world, 0), s, err);
}

sc_status executor_run(executor *ex, const exec_batch *b, sc_error *err) {
  if (ex->broken != SC_OK) {
    if (err) *err = ex->broken_err;
    return ex->broken;
  }
  if (b->tokens && !executor_picks_greedy(ex))
    return sc_fail(err, SC_INVALID, "executor: this backend cannot pick greedy tokens; ask for "
                   "logits");
  if (b->draws && (!b->tokens || !executor_picks_sampled(ex)))
    return sc_fail(err, SC_INVALID, "executor: sampled tokens are drawn on the devices of one TP "
                   "rank with dev_sample only; ask for logits");
  SC_TRY(flatten(ex, b, err));
  ex->batch = b;
  sc_status ds = SC_OK; // rank 0 of processes: sending the step, collecting the answers
  sc_error de = {{0}};
  if (ex->self == 0) ds = exec_dist_send_step(ex->dist, comm_group_rank(ex->world, 0), b, &de);
  int gave_up = ds == SC_OK ? run_ranks(ex) : -1;
  if (ex->self == 0 && ds == SC_OK && gave_up < 0 && ex->ranks[0].status == SC_OK)
    ds = collect(ex, b, &de);
  ex->batch = NULL;
  // Report the root cause: the first failure that is not a consequence of the abort.
  const rank *bad = NULL;
  for (int i = 0; i < ex->n_ranks; i++) {
    const rank *r = &ex->ranks[i];
    if (r->status != SC_OK && (!bad || (bad->status == SC_ABORTED && r->status != SC_ABORTED)))
      bad = r;
  }
  if (!bad && gave_up < 0 && ds == SC_OK) {
    if (b->tokens) merge_picks(ex, ex->n_want, b->tokens);
    return SC_OK;
  }
  // A hung device behind the failure (its peers only saw a deadline pass).
  const rank *hung = gave_up >= 0 ? &ex->ranks[gave_up] : NULL;
  for (int i = 0; !hung && i < ex->n_ranks; i++)
    if (ex->ranks[i].status != SC_OK && device_get_fault(ex->ranks[i].dev).hang)
      hung = &ex->ranks[i];
  sc_error e = {{0}};
  sc_status s;
  if (ex->self == 0 && (ds != SC_OK || remote_cause(ex, bad, &ds, &de))) {
    s = ds; // another rank's failure (its alarm), or no answer from one
    e = de;
  } else if (gave_up >= 0 && (!bad || bad->status == SC_ABORTED)) {
    uint64_t dl = hang_limit(ex);
    s = sc_fail(&e, SC_TIMEOUT,
                "rank %d (tp_rank=%d pp_rank=%d): device hung: no progress for %.3f s (the "
                "collective deadline)",
                hung->index, hung->sh.tp_rank, hung->sh.pp_rank, (double)dl / 1e9);
  } else if (hung && hung != bad) {
    s = sc_fail(&e, bad->status, "rank %d (tp_rank=%d pp_rank=%d): device hung; %s", hung->index,
                hung->sh.tp_rank, hung->sh.pp_rank, bad->err.msg);
  } else {
    s = bad->status;
    e = bad->err;
  }
  ex->broken = s;
  ex->broken_err = e;
  if (err) *err = e;
  return s;
}

sc_status executor_seq_mem_new(executor *ex, exec_seq_mem **out, sc_error *err) {
  *out = NULL;
  if (ex->broken != SC_OK) {
    if (err) *err = ex->broken_err;
    return ex->broken;
  }
  size_t row_bytes = (size_t)ex->max_blocks * sizeof(int32_t);
  exec_seq_mem *m = calloc(1, sizeof *m + (size_t)ex->n_ranks * sizeof m->rows[0]);
  if (!m) return sc_fail(err, SC_OOM, "executor: out of host memory for a sequence");
  m->host = calloc((size_t)ex->max_blocks, sizeof(int32_t));
  if (!m->host) {
    free(m);
    return sc_fail(err, SC_OOM, "executor: out of host memory for a sequence");
  }
  for (int i = 0; i < ex->n_ranks; i++) {
    rank *r = &ex->ranks[i];
    if (!held(ex, i)) continue; // a rank in another process uploads its block tables each step
    sc_status s = dev_alloc(r->dev, row_bytes, (void **)&m->rows[i]);
    if (s != SC_OK) {
      char what[64];
      snprintf(what, sizeof what, "the sequence's block table (%zu bytes)", row_bytes);
      char buf[96];
      sc_fail(err, s, "rank %d (tp_rank=%d pp_rank=%d): %s: %s", r->index, r->sh.tp_rank,
              r->sh.pp_rank, what, cause_text(r, s, buf, sizeof buf));
      executor_seq_mem_free(ex, m);
      return s;
    }
  }
  *out = m;
  return SC_OK;
}

void executor_seq_mem_free(executor *ex, exec_seq_mem *m) {
  if (!m) return;
  for (int i = 0; i < ex->n_ranks; i++) dev_free(ex->ranks[i].dev, m->rows[i]);
  free(m->host);
  free(m);
}

sc_status executor_set_fault(executor *ex, int r, const dev_fault *f) {
  if (!f || r < -1 || r >= ex->n_ranks) return SC_INVALID;
  if (f->hang && (ex->n_ranks == 1 || (ex->self >= 0 && (r < 0 || r == ex->self))))
    SC_TRY(watchdog_start(ex));
  for (int i = r < 0 ? 0 : r; i < (r < 0 ? ex->n_ranks : r + 1); i++) {
    if (held(ex, i)) device_set_fault(ex->ranks[i].dev, f);
    else if (ex->self == 0) exec_dist_queue_fault(ex->dist, &(dist_fault){.rank = i, .dev = *f});
  }
  return SC_OK;
}

void executor_set_link_fault(executor *ex, double factor, uint64_t latency_ns, double bandwidth) {
  for (int i = 0; i < ex->cfg.pp; i++)
    comm_group_set_slow(ex->tp_groups[i], factor, latency_ns, bandwidth);
  for (int i = 0; i < ex->cfg.tp; i++)
    comm_group_set_slow(ex->pp_groups[i], factor, latency_ns, bandwidth);
  for (int i = 1; ex->self == 0 && i < ex->n_ranks; i++) // the others' ends of their links
    exec_dist_queue_fault(ex->dist, &(dist_fault){.rank = i, .link = true, .factor = factor,
                                                  .latency_ns = latency_ns,
                                                  .bandwidth = bandwidth});
}

int executor_n_ranks(const executor *ex) { return ex->n_ranks; }

sc_status executor_rank_mem(executor *ex, int r, size_t *used, size_t *total) {
  if (r < 0 || r >= ex->n_ranks) return SC_INVALID;
  if (held(ex, r)) return dev_mem_info(ex->ranks[r].dev, used, total);
  if (ex->self != 0) return SC_INVALID;
  *used = ex->mem_used[r]; // as of its latest answer
  *total = ex->mem_total[r];
  return SC_OK;
}

// --- ranks as processes: serving rank 0's steps

// This rank's answer to a step that ran: the last stage's picks (tokens) or logits (TP rank 0).
static sc_status answer(executor *ex, const exec_batch *b) {
  rank *r = &ex->ranks[ex->self];
  comm *w = comm_group_rank(ex->world, ex->self);
  size_t used = 0, total = 0;
  dev_mem_info(r->dev, &used, &total);
  int n_picks = 0;
  size_t n_logits = 0;
  size_t at = (size_t)r->sh.tp_rank * (size_t)ex->cfg.max_seqs;
  if (r->sh.last_stage && b->tokens) n_picks = ex->n_want;
  else if (r->sh.last_stage && r->sh.tp_rank == 0)
    n_logits = (size_t)ex->n_want * (size_t)ex->cfg.model.vocab_size;
  return exec_dist_send_result(w, ex->h_amax_i + at, ex->h_amax_v + at, n_picks, b->logits,
                               n_logits, used, total);
}

sc_status executor_follow(executor *ex, sc_error *err) {
  if (ex->self <= 0)
    return sc_fail(err, SC_INVALID, "executor_follow: only ranks other than 0 of processes");
  comm *w = comm_group_rank(ex->world, ex->self);
  for (;;) {
    bool quit = false;
    const exec_batch *b = NULL;
    const dist_fault *f = NULL;
    int nf = 0;
    SC_TRY(exec_dist_recv_step(ex->dist, w, &quit, &b, &f, &nf, err));
    if (quit) return SC_OK;
    for (int i = 0; i < nf; i++) {
      if (!f[i].link) {
        executor_set_fault(ex, ex->self, &f[i].dev);
        continue;
      }
      rank *r = &ex->ranks[ex->self];
      if (ex->cfg.tp > 1) comm_group_set_slow(ex->tp_groups[r->sh.pp_rank], f[i].factor,
                                              f[i].latency_ns, f[i].bandwidth);
      if (ex->cfg.pp > 1) comm_group_set_slow(ex->pp_groups[r->sh.tp_rank], f[i].factor,
                                              f[i].latency_ns, f[i].bandwidth);
    }
    if (ex->broken != SC_OK) continue; // it raised its alarm already: wait to be stopped
    sc_error e = {{0}};
    sc_status s = executor_run(ex, b, &e);
    if (s == SC_OK) s = answer(ex, b);
    if (s != SC_OK) exec_dist_send_alarm(w, s, e.msg[0] ? e.msg : sc_status_name(s));
  }
}
