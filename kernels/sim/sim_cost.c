// The simulator's cost model (see sim_cost.h): curves, the per-op roofline with measured tables
// winning, collectives over the link topology, and one engine step priced op by op as
// engine/executor.c runs it, with PP micro-batches laid out on a timeline.
//
// Every function here is pure: no allocation, no globals, no I/O; sim_step_price works on fixed
// stack arrays (at most SIM_MAX_SEQS sequences and SIM_MAX_MB micro-batches per step). The
// formulas, their units and what is and is not modelled are written out in docs/simulator.md.
//
// Not here: the figures (scenarios/hardware/*.yaml through config/hardware.c), the link table
// (sim_links.c), which sequences make a step (engine/scheduler.c), the micro-batch split rule
// (engine/executor.c, exec_split_microbatches), the clock that advances by the price
// (runner/runner.c).
#include <math.h>
#include <stddef.h>

#include "kernels/sim/sim_cost.h"

#define SIM_MAX_SEQS 65536 // most sequences in one priced step (a sanity bound; no arrays)
#define SIM_MAX_MB 64    // most micro-batches in one priced step
#define SIM_ATTN_MAX (int)(sizeof((sim_hw *)0)->attn / sizeof((sim_hw *)0)->attn[0])
#define SIM_COLL_MAX (int)(sizeof((sim_hw *)0)->coll / sizeof((sim_hw *)0)->coll[0])
#define QUANT_GROUP 128 // int4: one bf16 scale per group of this many inputs (as memplan.c)

// --- curves

// Points of c that can be read: n, at most SIM_CURVE_MAX.
static int curve_n(const sim_curve *c) { return c->n < SIM_CURVE_MAX ? c->n : SIM_CURVE_MAX; }

// y at x on a curve with points: linear in log(x) or in x between points, the end values
// beyond the ends.
static double curve_between(const sim_curve *c, double x, bool log_x) {
  int last = curve_n(c) - 1;
  if (!(x > c->x[0])) return c->y[0];
  if (x >= c->x[last]) return c->y[last];
  int i = 1;
  while (c->x[i] < x) i++;
  double f = log_x ? log(x / c->x[i - 1]) / log(c->x[i] / c->x[i - 1])
                   : (x - c->x[i - 1]) / (c->x[i] - c->x[i - 1]);
  return c->y[i - 1] + f * (c->y[i] - c->y[i - 1]);
}

double sim_curve_eff(const sim_curve *c, double x, double dflt) {
  return !c || c->n <= 0 ? dflt : curve_between(c, x, true);
}

double sim_curve_time(const sim_curve *c, double x) {
  if (!c || c->n <= 0) return -1;
  if (!(x > c->x[0])) return c->y[0];
  int last = curve_n(c) - 1;
  if (x >= c->x[last]) return c->y[last] * x / c->x[last];
  int i = 1;
  while (c->x[i] < x) i++;
  double f = log(x / c->x[i - 1]) / log(c->x[i] / c->x[i - 1]);
  return exp(log(c->y[i - 1]) + f * (log(c->y[i]) - log(c->y[i - 1])));
}

double sim_curve_lin(const sim_curve *c, double x, double dflt) {
  return !c || c->n <= 0 ? dflt : curve_between(c, x, false);
}

// --- dtypes and the device's rates

double sim_dtype_bytes(sim_dtype t) {
  switch (t) {
  case SIM_F32: return 4;
  case SIM_F16:
  case SIM_BF16: return 2;
  case SIM_I8:
  case SIM_FP8: return 1;
  case SIM_I4: return 0.5;
  }
  return 4;
}

static bool quantized(sim_dtype t) { return t == SIM_I8 || t == SIM_I4 || t == SIM_FP8; }

// The dtype of the tensors that are never quantized (embedding, LM head, norms): bf16 beside
// quantized weights, the weight dtype otherwise (engine/memplan.c's rule).
static sim_dtype dense_dtype(sim_dtype w) { return quantized(w) ? SIM_BF16 : w; }

// Peak FLOP/s a GEMM with weights w and activations act runs at: f32 when either is f32 (the CPU
// backend), f16 when the activations are f16, the fp8 peak for fp8 weights (W8A8: the
// activations are quantized to fp8 on the fly, as vLLM and TensorRT-LLM do on Hopper and later)
// on a device that has one, bf16 otherwise. Weight-only quantized weights (int8, int4, and fp8
// on a device without fp8 tensor cores) are dequantized and multiplied at the activations' rate,
// not the int8 peak.
static double peak_flops(const sim_hw *hw, sim_dtype w, sim_dtype act) {
  if (w == SIM_F32 || act == SIM_F32) return hw->flops_f32;
  if (act == SIM_F16) return hw->flops_f16;
  if (w == SIM_FP8 && hw->flops_fp8 > 0) return hw->flops_fp8;
  return hw->flops_bf16;
}

static double mem_rate(const sim_hw *hw) { return hw->mem_bw * hw->mem_eff; }

// A device the formulas can divide by: positive bandwidths.
static bool hw_ok(const sim_hw *hw) {
  return hw && hw->mem_bw > 0 && hw->mem_eff > 0 && hw->intra.bw > 0 && hw->inter.bw > 0;
}

// CPU profiles: ranks x threads sharing the host's cores slow every op by this factor.
static double share_factor(const sim_hw *hw, const sim_layout *l) {
  if (hw->host_cores <= 0 || !l) return 1;
  int threads = l->threads > 0 ? l->threads : 1;
  int ranks = l->cluster_ranks > 0 ? l->cluster_ranks : l->tp * l->pp;
  double f = (double)ranks * threads / hw->host_cores;
  return f > 1 ? f : 1;
}

// Whether a measured table taken at `threads` applies to layout l (GPU profiles: always).
static bool threads_match(const sim_hw *hw, const sim_layout *l, int threads) {
  if (hw->host_cores <= 0) return true;
  int lt = l && l->threads > 0 ? l->threads : 1;
  return threads == lt;
}

// --- ops
//
// An op's time splits into device work (`busy`) and launch overhead; both already carry the CPU
// share factor. A measured time is all `busy`.
typedef struct op_t {
  double busy, launch;
} op_t;

static double op_total(op_t o) { return o.busy + o.launch; }

static const sim_gemm_table *find_gemm(const sim_hw *hw, const sim_layout *l, int n, int k) {
  for (int i = 0; i < hw->n_gemm && i < SIM_TABLES_MAX; i++) {
    const sim_gemm_table *g = &hw->gemm[i];
    if (g->n == n && g->k == k && g->t.n > 0 && threads_match(hw, l, g->threads)) return g;
  }
  return NULL;
}

// One GEMM y(m x n) = x(m x k) . w(k x n)^T on one rank, weights stored as w: the measured table
// for (n, k) when the profile has one, else max(flops / achieved rate, bytes / achieved bandwidth)
// + a launch.
static op_t gemm_op(const sim_hw *hw, const sim_layout *l, double share, int m, int n, int k,
                    sim_dtype w, sim_dtype act) {
  if (m <= 0) return (op_t){0, 0};
  const sim_gemm_table *g = find_gemm(hw, l, n, k);
  if (g) return (op_t){sim_curve_time(&g->t, m) * share, 0};
  double dm = m, dn = n, dk = k;
  double flops = 2 * dm * dn * dk;
  double rate = peak_flops(hw, w, act) * sim_curve_eff(&hw->gemm_eff, dm, 1);
  double bytes = dn * dk * sim_dtype_bytes(w) + dm * (dn + dk) * sim_dtype_bytes(act);
  if (quantized(w)) bytes += dn * 2;                         // one bf16 scale per output row
  if (w == SIM_I4) bytes += dn * ceil(dk / QUANT_GROUP) * 2; // and one per group of inputs
  double tc = rate > 0 ? flops / rate : 0, tm = bytes / mem_rate(hw);
  return (op_t){(tc > tm ? tc : tm) * share, hw->launch_s * share};
}

double sim_gemm_s(const sim_hw *hw, const sim_layout *l, int m, int n, int k, sim_dtype w,
                  sim_dtype act) {
  if (!hw_ok(hw) || m < 0 || n < 1 || k < 1) return -1;
  return op_total(gemm_op(hw, l, share_factor(hw, l), m, n, k, w, act));
}

static op_t elementwise_op(const sim_hw *hw, double share, double bytes) {
  return (op_t){bytes / mem_rate(hw) * share, hw->launch_s * share};
}

double sim_elementwise_s(const sim_hw *hw, const sim_layout *l, double bytes) {
  if (!hw_ok(hw) || !(bytes >= 0)) return -1;
  return op_total(elementwise_op(hw, share_factor(hw, l), bytes));
}

static const sim_attn_table *find_attn(const sim_hw *hw, const sim_layout *l, int heads,
                                       int kv_heads, int head_dim) {
  for (int i = 0; i < hw->n_attn && i < SIM_ATTN_MAX; i++) {
    const sim_attn_table *a = &hw->attn[i];
    if (a->heads == heads && a->kv_heads == kv_heads && a->head_dim == head_dim &&
        a->decode.n > 0 && a->prefill.n > 0 && threads_match(hw, l, a->threads))
      return a;
  }
  return NULL;
}

// One sequence's attention on a measured table: decode (n == 1) from its context s + 1; a prefill
// chunk of n tokens at start s as the difference of the prefill curve, prefill(s + n) - prefill(s),
// and never less than prefill(n) of a chunk from position 0.
static double attn_measured(const sim_attn_table *a, int s, int n) {
  if (n == 1) return sim_curve_time(&a->decode, s + 1.0);
  double from0 = sim_curve_time(&a->prefill, n);
  if (s == 0) return from0;
  double d = sim_curve_time(&a->prefill, (double)s + n) - sim_curve_time(&a->prefill, s);
  return d > from0 ? d : from0;
}

// One sequence's attention on the roofline: max(causal flops / achieved rate, bytes of the K and V
// read plus q in and output out / achieved bandwidth). The products run at the GEMM efficiency
// of n g rows, g = heads / kv_heads: each K and V read serves its group's query heads (a decode
// of llama3-8b multiplies 4 rows per KV head, not 1). eff_g: that efficiency at n = 1 (decode),
// looked up once per call.
static double attn_roofline(const sim_hw *hw, int s, int n, int heads, int kv_heads, int head_dim,
                            sim_dtype kv, double eff_g) {
  double b = sim_dtype_bytes(kv), ctx = (double)s + n;
  double flops = 4.0 * n * (s + n / 2.0) * head_dim * heads;
  double eff = n == 1 ? eff_g : sim_curve_eff(&hw->gemm_eff, (double)n * heads / kv_heads, 1);
  double rate = peak_flops(hw, kv, kv) * eff;
  double bytes = ctx * 2.0 * kv_heads * head_dim * b + 2.0 * n * heads * head_dim * b;
  double tc = rate > 0 ? flops / rate : 0, tm = bytes / mem_rate(hw);
  return tc > tm ? tc : tm;
}

// The engine's measured factors for this attention shape that bracket `decodes`: *lo the
// largest count at or below it (else the smallest), *hi the smallest at or above it (else the
// largest); false when the engine has none for the shape.
static bool mixed_entries(const sim_engine *e, int heads, int kv_heads, int head_dim,
                          int decodes, const sim_mixed_attn **lo, const sim_mixed_attn **hi) {
  *lo = *hi = NULL;
  const sim_mixed_attn *min = NULL, *max = NULL;
  for (int i = 0; i < e->n_mixed_attn && i < SIM_MIXED_MAX; i++) {
    const sim_mixed_attn *m = &e->mixed_attn[i];
    if (m->heads != heads || m->kv_heads != kv_heads || m->head_dim != head_dim) continue;
    if (m->decodes <= decodes && (!*lo || m->decodes > (*lo)->decodes)) *lo = m;
    if (m->decodes >= decodes && (!*hi || m->decodes < (*hi)->decodes)) *hi = m;
    if (!min || m->decodes < min->decodes) min = m;
    if (!max || m->decodes > max->decodes) max = m;
  }
  if (!min) return false;
  if (!*lo) *lo = min;
  if (!*hi) *hi = max;
  return true;
}

// A decode's factor at context ctx between the bracketing counts (log-linear in the count).
static double mixed_factor(const sim_mixed_attn *lo, const sim_mixed_attn *hi, int decodes,
                           double ctx) {
  double a = sim_curve_eff(&lo->factor, ctx, 1);
  if (lo == hi || lo->decodes == hi->decodes) return a;
  double b = sim_curve_eff(&hi->factor, ctx, 1);
  double f = log((double)decodes / lo->decodes) / log((double)hi->decodes / lo->decodes);
  return a + f * (b - a);
}

// The batch's attention: each sequence's, its decodes (sequences computing one token) at the
// engine's mixed factor when a prompt chunk shares the batch.
static op_t attention_op(const sim_hw *hw, const sim_layout *l, double share, const sim_seq *seqs,
                         int n, int heads, int kv_heads, int head_dim, sim_dtype kv) {
  const sim_attn_table *a = find_attn(hw, l, heads, kv_heads, head_dim);
  double t = 0, eff_g = sim_curve_eff(&hw->gemm_eff, (double)heads / kv_heads, 1);
  const sim_mixed_attn *lo = NULL, *hi = NULL;
  int decodes = 0;
  if (hw->engine.n_mixed_attn > 0) {
    for (int i = 0; i < n; i++) decodes += seqs[i].n == 1;
    bool mixed = decodes && decodes < n; // decodes beside a prompt chunk
    if (!mixed || !mixed_entries(&hw->engine, heads, kv_heads, head_dim, decodes, &lo, &hi))
      lo = hi = NULL; // priced alike
  }
  for (int i = 0; i < n; i++) {
    const sim_seq *q = &seqs[i];
    double x = a ? attn_measured(a, q->start, q->n)
                 : attn_roofline(hw, q->start, q->n, heads, kv_heads, head_dim, kv, eff_g);
    if (lo && q->n == 1) x *= mixed_factor(lo, hi, decodes, q->start + 1.0);
    t += x;
  }
  return (op_t){t * share, a ? 0 : hw->launch_s * share};
}

double sim_attention_s(const sim_hw *hw, const sim_layout *l, const sim_seq *seqs, int n, int heads,
                       int kv_heads, int head_dim, sim_dtype kv) {
  if (!hw_ok(hw) || !seqs || n < 1 || heads < 1 || kv_heads < 1 || head_dim < 1) return -1;
  for (int i = 0; i < n; i++)
    if (seqs[i].start < 0 || seqs[i].n < 1) return -1;
  return op_total(attention_op(hw, l, share_factor(hw, l), seqs, n, heads, kv_heads, head_dim, kv));
}

// --- collectives

// The link a group of GPUs [first, first + ranks) talks over: inter-node when it spans nodes.
static const sim_link *group_link(const sim_hw *hw, int first, int ranks) {
  int g = hw->gpus_per_node > 0 ? hw->gpus_per_node : 1;
  return first / g == (first + ranks - 1) / g ? &hw->intra : &hw->inter;
}

double sim_allreduce_s(const sim_hw *hw, int first, int ranks, double bytes) {
  if (!hw_ok(hw) || first < 0 || ranks < 1 || !(bytes >= 0)) return -1;
  if (ranks == 1 || bytes == 0) return 0;
  const sim_link *lk = group_link(hw, first, ranks);
  if (lk == &hw->intra)
    for (int i = 0; i < hw->n_coll && i < SIM_COLL_MAX; i++)
      if (hw->coll[i].ranks == ranks && hw->coll[i].allreduce.n > 0)
        return sim_curve_time(&hw->coll[i].allreduce, bytes);
  double n = ranks, bw = lk->bw, lat = lk->latency_s;
  double ring = 2 * (n - 1) / n * bytes / bw + 2 * (n - 1) * lat;
  double tree = 2 * log2(n) * lat + 2 * bytes / bw;
  return ring < tree ? ring : tree;
}

double sim_allgather_s(const sim_hw *hw, int first, int ranks, double bytes) {
  if (!hw_ok(hw) || first < 0 || ranks < 1 || !(bytes >= 0)) return -1;
  if (ranks == 1 || bytes == 0) return 0;
  const sim_link *lk = group_link(hw, first, ranks);
  double n = ranks;
  return (n - 1) / n * bytes / lk->bw + (n - 1) * lk->latency_s;
}

double sim_sendrecv_s(const sim_hw *hw, int a, int b, double bytes) {
  if (!hw_ok(hw) || a < 0 || b < 0 || !(bytes >= 0)) return -1;
  if (a == b || bytes == 0) return 0;
  int g = hw->gpus_per_node > 0 ? hw->gpus_per_node : 1;
  const sim_link *lk = a / g == b / g ? &hw->intra : &hw->inter;
  return bytes / lk->bw + lk->latency_s;
}

// --- one step

// What one stage spends on one micro-batch: device work, launches, and collectives.
typedef struct stage_t {
  double busy, launch, comm;
} stage_t;

static void stage_op(stage_t *a, op_t o) {
  a->busy += o.busy;
  a->launch += o.launch;
}

// The shard plan's KV heads per rank (engine/shard.c): -1 when tp does not fit the model.
static int kv_heads_local(const sim_model *m, int tp) {
  if (m->n_kv_heads % tp == 0) return m->n_kv_heads / tp;
  if (tp % m->n_kv_heads == 0) return 1;
  return -1;
}

// Whether (tp, pp) shards m (engine/shard.c's shard_layout_check).
static bool model_ok(const sim_model *m, int tp, int pp) {
  return m->dim > 0 && m->n_layers > 0 && m->n_heads > 0 && m->n_kv_heads > 0 && m->head_dim > 0 &&
         m->ffn_dim > 0 && m->vocab > 0 && m->n_heads % tp == 0 && m->ffn_dim % tp == 0 &&
         m->vocab % tp == 0 && kv_heads_local(m, tp) > 0 && pp <= m->n_layers;
}

// One micro-batch on one rank: its shapes and the device work of one transformer layer, of the
// embedding (first stage) and of the head (last stage). Collectives depend on which GPUs a stage
// sits on and are priced per stage from the byte counts.
typedef struct mb_cost {
  int tokens, samples;
  stage_t layer;       // one transformer layer, without its 2 all-reduces
  stage_t embed;       // embedding gather, without its all-reduce
  stage_t head;        // final norm of the sampled rows and LM head, without the all-gather
  double act_bytes;    // (tokens, dim) activations: each all-reduce and the PP transfer
  double logits_bytes; // (samples, vocab) logits each rank holds after the all-gather
} mb_cost;

static void price_microbatch(const sim_hw *hw, const sim_model *m, const sim_layout *l,
                             double share, const sim_seq *seqs, int n, mb_cost *c) {
  int tp = l->tp, hl = m->n_heads / tp, kvl = kv_heads_local(m, tp), hd = m->head_dim;
  int fl = m->ffn_dim / tp, D = m->dim;
  sim_dtype w = m->weight_dtype, act = m->act_dtype, kv = m->kv_fp8 ? SIM_FP8 : act;
  double ab = sim_dtype_bytes(act), kb = sim_dtype_bytes(kv);
  int T = 0, S = 0;
  for (int i = 0; i < n; i++) {
    T += seqs[i].n;
    S += seqs[i].logits ? 1 : 0;
  }
  c->tokens = T;
  c->samples = S;
  double t = T, qd = (double)hl * hd, kvd = (double)kvl * hd;
  stage_t *L = &c->layer;
  *L = (stage_t){0, 0, 0};
  stage_op(L, elementwise_op(hw, share, 2 * t * D * ab + D * ab));       // rmsnorm
  stage_op(L, gemm_op(hw, l, share, T, (int)(qd + 2 * kvd), D, w, act)); // q, k, v
  stage_op(L, elementwise_op(hw, share, 2 * t * (qd + kvd) * ab));       // rope on q, k
  stage_op(L, elementwise_op(hw, share, 2 * t * kvd * (ab + kb)));      // K, V to cache
  stage_op(L, attention_op(hw, l, share, seqs, n, hl, kvl, hd, kv));
  stage_op(L, gemm_op(hw, l, share, T, D, (int)qd, w, act));       // o_proj (+ all-reduce)
  stage_op(L, elementwise_op(hw, share, 3 * t * D * ab));          // residual add
  stage_op(L, elementwise_op(hw, share, 2 * t * D * ab + D * ab)); // rmsnorm
  stage_op(L, gemm_op(hw, l, share, T, 2 * fl, D, w, act));        // gate, up
  stage_op(L, elementwise_op(hw, share, 3 * t * fl * ab));         // swiglu
  stage_op(L, gemm_op(hw, l, share, T, D, fl, w, act));            // down_proj (+ all-reduce)
  stage_op(L, elementwise_op(hw, share, 3 * t * D * ab));          // residual add

  c->embed = (stage_t){0, 0, 0};
  double eb = sim_dtype_bytes(dense_dtype(w));
  stage_op(&c->embed, elementwise_op(hw, share, t * D * (eb + ab))); // rows of the table

  c->head = (stage_t){0, 0, 0};
  if (S > 0) {
    double s_rows = S;
    stage_op(&c->head, elementwise_op(hw, share, 2 * s_rows * D * ab + D * ab)); // final norm
    stage_op(&c->head, gemm_op(hw, l, share, S, m->vocab / tp, D, dense_dtype(w), act));
  }
  c->act_bytes = t * D * ab;
  int lb = hw->engine.logits_bytes > 0 ? hw->engine.logits_bytes : 4;
  c->logits_bytes = (double)S * m->vocab * lb;
}

// Layers of stage s of pp: engine/shard.c's shard_stage_layers rule.
static int stage_layers(int n_layers, int pp, int s) {
  return (int)((long)(s + 1) * n_layers / pp) - (int)((long)s * n_layers / pp);
}

// Stage s's work on micro-batch c: its layers, the embedding on the first stage, the head on the
// last, and the collectives of its TP group (GPUs [g0, g0 + tp)).
static stage_t stage_time(const sim_hw *hw, const sim_model *m, const sim_layout *l, int s,
                          const mb_cost *c) {
  int nl = stage_layers(m->n_layers, l->pp, s), tp = l->tp, g0 = l->first_gpu + s * tp;
  bool first = s == 0, last = s == l->pp - 1;
  stage_t st = {nl * c->layer.busy, nl * c->layer.launch, 0};
  if (first) {
    st.busy += c->embed.busy;
    st.launch += c->embed.launch;
  }
  if (last) {
    st.busy += c->head.busy;
    st.launch += c->head.launch;
  }
  if (tp > 1) {
    double ar = sim_allreduce_s(hw, g0, tp, c->act_bytes);
    st.comm = (2.0 * nl + (first ? 1 : 0)) * ar;
    if (last && c->samples > 0) st.comm += sim_allgather_s(hw, g0, tp, c->logits_bytes);
  }
  return st;
}

// One cell of the timeline: when stage s finished micro-batch j, and the components of the critical
// path that ends there (which sum to `end`).
typedef struct cell {
  double end, busy, launch, comm;
} cell;

// The per-step overhead of layout l for a step of `decodes` sequences computing one token and
// `prompt` tokens of prompts (chunks) whose ops take `ops_s`: the measured residual of its layout
// (TP degree, replicas on the host and, on a CPU profile, the threads the profile ran them at:
// max(1, host_cores / (tp x replicas))) when the profile has one (a negative residual, where the
// op tables price such steps high, takes at most half of ops_s), else step_overhead_s. A table
// with a prefill curve reads s at the decode rows (at least 1) and adds the prefill residual at
// the prompt tokens; without one, s is read at all the step's rows.
static double step_overhead(const sim_hw *hw, const sim_layout *l, int decodes, int prompt,
                            double ops_s) {
  int ranks = l->cluster_ranks > 0 ? l->cluster_ranks : l->tp * l->pp;
  int n_ov = hw->n_overhead < SIM_OVERHEAD_TABLES ? hw->n_overhead : SIM_OVERHEAD_TABLES;
  if (l->pp == 1 && ranks % l->tp == 0)
    for (int i = 0; i < n_ov; i++) {
      const sim_overhead_table *t = &hw->overhead[i];
      int reps = t->replicas > 1 ? t->replicas : 1, th = hw->host_cores / (t->tp * reps);
      if (t->tp != l->tp || reps != ranks / l->tp || !threads_match(hw, l, th > 1 ? th : 1))
        continue;
      double r;
      if (t->prefill.n > 0)
        r = sim_curve_lin(&t->s, decodes > 1 ? decodes : 1, 0) +
            (prompt > 0 ? sim_curve_lin(&t->prefill, prompt, 0) : 0);
      else
        r = sim_curve_lin(&t->s, decodes + prompt, 0);
      return r < -0.5 * ops_s ? -0.5 * ops_s : r;
    }
  return hw->step_overhead_s;
}

sim_engine sim_engine_defaults(void) {
  return (sim_engine){.prefill_eff = 1, .decode_eff = 1};
}

double sim_engine_error(const sim_engine *e) { return e->error > 0 ? e->error : SIM_IDEALIZED_ERROR; }

// The engine block's kernel-time factor for a step: the token-weighted mean of 1 / prefill_eff
// over prefill tokens and 1 / decode_eff over decode tokens (a sequence computing one token).
// Exactly 1 when neither efficiency is set.
static double engine_factor(const sim_engine *e, const sim_seq *seqs, int n) {
  double pe = e->prefill_eff > 0 ? e->prefill_eff : 1, de = e->decode_eff > 0 ? e->decode_eff : 1;
  if (pe == 1 && de == 1) return 1;
  double p = 0, d = 0;
  for (int i = 0; i < n; i++) {
    if (seqs[i].n == 1) d += 1;
    else p += seqs[i].n;
  }
  return (p / pe + d / de) / (p + d);
}

static void scale_curve(sim_curve *c, double f) {
  for (int i = 0; i < c->n; i++) c->y[i] *= f;
}

static void scale_link(sim_link *l, double f) {
  l->bw /= f;
  l->latency_s *= f;
}

void sim_hw_scale(sim_hw *hw, double f) {
  hw->mem_bw /= f;
  hw->flops_f32 /= f;
  hw->flops_f16 /= f;
  hw->flops_bf16 /= f;
  hw->flops_int8 /= f;
  hw->flops_fp8 /= f;
  hw->launch_s *= f;
  hw->step_overhead_s *= f;
  hw->engine.step_s *= f;
  hw->engine.seq_s *= f;
  hw->engine.tp_step_s *= f;
  scale_link(&hw->intra, f);
  scale_link(&hw->inter, f);
  for (int i = 0; i < hw->n_gemm; i++) scale_curve(&hw->gemm[i].t, f);
  for (int i = 0; i < hw->n_attn; i++) {
    scale_curve(&hw->attn[i].decode, f);
    scale_curve(&hw->attn[i].prefill, f);
  }
  for (int i = 0; i < hw->n_coll; i++) scale_curve(&hw->coll[i].allreduce, f);
  for (int i = 0; i < hw->n_overhead; i++) {
    scale_curve(&hw->overhead[i].s, f);
    scale_curve(&hw->overhead[i].prefill, f);
  }
}

int sim_step_price(const sim_hw *hw, const sim_model *m, const sim_layout *l, const sim_seq *seqs,
                   int n, const int *mb_first, int n_mb, sim_step_cost *out) {
  if (!hw_ok(hw) || !m || !l || !seqs || !out) return -1;
  if (n < 1 || n > SIM_MAX_SEQS || l->tp < 1 || l->pp < 1 || l->first_gpu < 0) return -1;
  if (n_mb < 1 || n_mb > n || n_mb > SIM_MAX_MB || (!mb_first && n_mb != 1)) return -1;
  if (!model_ok(m, l->tp, l->pp)) return -1;
  for (int i = 0; i < n; i++)
    if (seqs[i].start < 0 || seqs[i].n < 1) return -1;
  int first[SIM_MAX_MB + 1];
  for (int j = 0; j <= n_mb; j++) first[j] = mb_first ? mb_first[j] : (j ? n : 0);
  if (first[0] != 0 || first[n_mb] != n) return -1;
  for (int j = 0; j < n_mb; j++)
    if (first[j + 1] <= first[j]) return -1;

  double share = share_factor(hw, l);
  mb_cost mc[SIM_MAX_MB];
  for (int j = 0; j < n_mb; j++)
    price_microbatch(hw, m, l, share, seqs + first[j], first[j + 1] - first[j], &mc[j]);

  // The timeline, one stage at a time: stage s starts micro-batch j when stage s-1 has finished it
  // and sent its activations, and when stage s has finished micro-batch j-1. prev[j] is stage s-1's
  // cell for micro-batch j, cur[j] stage s's.
  int pp = l->pp, tp = l->tp;
  cell prev[SIM_MAX_MB], cur[SIM_MAX_MB];
  double busy_sum = 0;
  for (int s = 0; s < pp; s++) {
    // the transfer into stage s: from GPU (tp_rank t, stage s-1) to (tp_rank t, stage s), all tp
    // pairs at once on their own links; priced for tp_rank 0
    int g_from = l->first_gpu + (s - 1) * tp, g_to = l->first_gpu + s * tp;
    for (int j = 0; j < n_mb; j++) {
      stage_t st = stage_time(hw, m, l, s, &mc[j]);
      cell start = {0, 0, 0, 0};
      if (s > 0) {
        double x = sim_sendrecv_s(hw, g_from, g_to, mc[j].act_bytes);
        start = prev[j];
        start.end += x;
        start.comm += x;
      }
      if (j > 0 && cur[j - 1].end > start.end) start = cur[j - 1];
      cur[j] = (cell){start.end + st.busy + st.launch + st.comm, start.busy + st.busy,
                      start.launch + st.launch, start.comm + st.comm};
      busy_sum += st.busy + st.launch + st.comm;
    }
    for (int j = 0; j < n_mb; j++) prev[j] = cur[j];
  }
  cell last = prev[n_mb - 1];
  int decodes = 0, prompt = 0;
  for (int i = 0; i < n; i++) {
    if (seqs[i].n == 1) decodes++;
    else prompt += seqs[i].n;
  }
  double ef = engine_factor(&hw->engine, seqs, n);
  double ov = step_overhead(hw, l, decodes, prompt, last.end) + hw->engine.step_s +
              hw->engine.seq_s * n + hw->engine.tp_step_s * (tp * pp - 1);
  // The factor is the engine's use of the GPU (its kernels, their launches); a collective's
  // price is the link's, which a profile sets or measures on its own.
  *out = (sim_step_cost){
      .total_s = (last.busy + last.launch) * ef + last.comm + ov,
      .compute_s = last.busy * ef,
      .comm_s = last.comm,
      .overhead_s = last.launch * ef + ov,
      .host_s = ov,
      .bubble_frac = pp > 1 && last.end > 0 ? 1 - busy_sum / (pp * last.end) : 0,
      .n_microbatches = n_mb,
  };
  if (out->bubble_frac < 0) out->bubble_frac = 0;
  return 0;
}
