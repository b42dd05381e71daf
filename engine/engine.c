// One replica's engine (see engine.h): request bookkeeping, the step loop that joins the
// scheduler, the executor and the sampler, and the events it returns.
//
// Request-scoped failures (the engine lives on): a sequence gets its own device memory on
// every rank when it is first scheduled (executor_seq_mem: its block table); when that
// allocation fails with SC_OOM the request ends with ENGINE_EV_FAILED (SC_OOM) and its blocks
// go back. Three such failures with no successful admission between mark the engine unhealthy
// (engine_stats.unhealthy) until the next success. Before sampling, each logits row is checked
// for NaN/inf; a request whose row has one ends with ENGINE_EV_FAILED (SC_NUMERICAL). A step
// whose sampled rows are all greedy (temperature 0) and whose logits nobody watches (no
// on_logits) has the devices pick the tokens (exec_batch.tokens), with the same NaN/inf check
// and the same first-largest rule as the host's sampler, so only token ids cross; where the
// executor can also draw sampled rows (executor_picks_sampled: one TP rank on a backend with
// dev_sample), a step with temperature rows does too, each with its request's draw
// (sampler_uniform(seed, index)), as the host's sampler would. Any other
// failure of a step (a lost device, a collective deadline, a hung rank) is the replica's: the
// step returns it and the engine is unusable. The fault hooks (engine_set_rank_fault,
// engine_set_link_fault) only forward to the executor; deciding when to inject is faults/'s.
// The sim backend has no devices: none of this applies to it.
#include "engine/engine.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/exec_dist.h"
#include "engine/executor.h"
#include "engine/kv_cache.h"
#include "engine/scheduler.h"
#include "engine/shard.h"
#include "engine/weights.h"
#include "kernels/device.h"
#include "kernels/mpi.h"

// What the engine keeps per request: the scheduler's seq first (the scheduler hands back
// seq pointers, which are eseq pointers), then its device memory.
typedef struct eseq {
  seq s;
  exec_seq_mem *mem; // NULL until first scheduled (and always for backend sim)
  uint64_t sim_key;  // backend sim: engine_request's
  int sim_len;
  uint64_t sched_ns; // engine clock: the start of the first step that scheduled it
  bool scheduled;    // sched_ns is set
} eseq;

// --- the step seam: how a step's planned sequences are computed
//
// Two implementations, chosen once in engine_new by the backend's name: the real one (the
// executor runs the step on devices) and the sim one (the cost model prices it; no devices,
// no weights, no device memory per sequence). The rest of the engine never asks which.
typedef struct engine_step_i {
  const char *name; // "real", "sim"
  sc_status (*init)(engine *e, sc_error *err); // the backend's state and step buffers
  // Optional (NULL: sequences need no device memory): gives every newly scheduled sequence
  // among items[0..n) its device memory; see admit.
  int (*admit)(engine *e, int n, sc_status *fatal, sc_error *err);
  // Computes (or prices) the planned eseqs[0..n) and sets info's duration.
  sc_status (*run)(engine *e, int n, engine_step_info *info, sc_error *err);
  int (*n_ranks)(const engine *e);
  sc_status (*rank_mem)(engine *e, int r, size_t *used, size_t *total);
  // Optional (NULL: ignored): engine_sim_set_cluster_ranks.
  void (*set_cluster_ranks)(engine *e, int ranks);
} engine_step_i;

static const engine_step_i real_step, sim_step; // defined after their functions, below

#define OOM_STREAK_UNHEALTHY 3 // failed admissions in a row that make the engine unhealthy
enum { EVENTS_CAP0 = 256 }; // first capacity of the event log (then it doubles)

struct engine {
  engine_config cfg;
  executor *ex;
  kv_cache *kv;
  scheduler *sched;
  uint64_t next_id;
  bool admitting;
  sc_status broken;

  const engine_step_i *be; // real_step, or sim_step for backend "sim"
  sched_item *items;     // (max_running)
  exec_seq *eseqs;       // (max_running)
  sim_seq *sseqs;        // sim: (max_running)
  int *ntok;             // sim: (max_running) tokens per item, for the micro-batch split
  int *mb_first;         // sim: (pp + 1)
  float *logits;         // (max_running, vocab); NULL for sim, which has none
  int32_t *picks;        // (max_running) tokens picked on the devices
  dev_sample_row *draws; // (max_running) this step's sampled rows' draws, for the devices
  bool can_pick;         // the executor picks greedy tokens on the devices
  bool can_draw;         // ... and draws sampled ones
  bool picked;           // this step's sampled rows are in picks, not logits
  bool drawn;            // ... drawn with draws (some row has a temperature)
  void *sample_scratch;  // sampler_scratch_bytes(vocab)
  engine_event *events;  // growable
  int n_events, cap_events;

  uint64_t steps, preemptions, generated;
  uint64_t oom_failures, numerical_failures;
  int oom_streak; // admissions failed with SC_OOM since the last one that succeeded
};

engine_config engine_config_defaults(void) {
  return (engine_config){
      .backend = "cpu",
      .tp = 1,
      .pp = 1,
      SC_KNOBS(SC_KNOB_ENGINE_DEFAULT) // block_size 16, max_running 256, token_budget 8192
      .kv_bytes_max = (size_t)1 << 30,
      .collective_timeout_ns = 30ull * 1000000000ull,
      .clock = sc_clock_monotonic(),
      .weights_seed = 0,
  };
}

const char *engine_finish_reason_name(engine_finish_reason r) {
  switch (r) {
  case FINISH_NONE: return "none";
  case FINISH_LENGTH: return "length";
  case FINISH_STOP: return "stop";
  case FINISH_CONTEXT: return "context";
  case FINISH_CANCELLED: return "cancelled";
  }
  return "unknown";
}

// KV bytes one block costs on the rank that holds the most (layers x local KV heads).
static size_t kv_block_bytes_max(const engine_config *c) {
  size_t mx = 0;
  for (int p = 0; p < c->pp; p++) {
    shard_rank s = shard_rank_plan(&c->model, c->tp, c->pp, 0, p);
    size_t b = (size_t)shard_kv_elems_per_token(&c->model, &s) * sizeof(float) * (size_t)c->block_size;
    if (b > mx) mx = b;
  }
  return mx;
}

static sc_status check_config(engine_config *c, sc_error *err) {
  if (c->block_size < 1 || c->max_running < 1 || c->token_budget < 1)
    return sc_fail(err, SC_INVALID,
                   "engine: block_size, max_running and token_budget must be at least 1");
  if (c->prefill_chunk == 0) c->prefill_chunk = c->token_budget / 4 > 0 ? c->token_budget / 4 : 1;
  if (c->prefill_chunk < 1)
    return sc_fail(err, SC_INVALID, "engine: prefill_chunk must be at least 1");
  SC_TRY(shard_layout_check(&c->model, c->tp, c->pp, err));
  if (strcmp(c->backend, "sim") != 0 && c->weight_dtype != SC_F32 && c->weight_dtype != SC_I8 &&
      c->weight_dtype != SC_BF16 && c->weight_dtype != SC_F16) // 16-bit: the executor checks
    return sc_fail(err, SC_INVALID, "engine: weight_dtype %s is not supported by the %s backend; "
                   "use f32 or int8 (or bf16, f16 on cuda)",
                   sc_dtype_name(c->weight_dtype), c->backend);
  int per_seq = (c->model.max_seq_len + c->block_size - 1) / c->block_size;
  if (c->kv_blocks == 0 && strcmp(c->backend, "sim") != 0) { // sim: the planner's, required
    size_t cap = c->kv_bytes_max / kv_block_bytes_max(c);
    size_t want = (size_t)c->max_running * (size_t)per_seq;
    c->kv_blocks = (int)(want < cap ? want : cap);
    if (c->kv_blocks < 1)
      return sc_fail(err, SC_INVALID, "engine: kv_bytes_max %zu holds no KV block",
                     c->kv_bytes_max);
  }
  return SC_OK;
}

// The real backends' executor: BLAS threads, weights loaded onto the ranks (this process's
// only, with ranks as processes).
static sc_status make_executor(const engine_config *c, executor **out, sc_error *err) {
  if (strcmp(c->backend, "cpu") == 0) {
    // BLAS threads x ranks stay within the cores unless the caller asks for more.
    int threads = c->threads;
    if (threads <= 0) {
      threads = device_cpu_cores() / (c->mpi ? sc_mpi_local_size() : c->tp * c->pp);
      if (threads < 1) threads = 1;
    }
    device_cpu_set_threads(threads);
  }
  weight_source *weights = NULL; // needed only while the ranks load their slices
  sc_status ws = weight_source_open(&c->model, c->weights_dir, c->weights_seed, &weights, err);
  if (ws != SC_OK && c->mpi && sc_mpi_active()) return exec_dist_agree(ws, err); // tell the rest
  SC_TRY(ws);
  exec_config xc = {.model = c->model,
                    .weights = weights,
                    .backend = c->backend,
                    .tp = c->tp,
                    .pp = c->pp,
                    .devices = c->devices,
                    .n_devices = c->n_devices,
                    .first_device = c->first_device,
                    .block_size = c->block_size,
                    .n_blocks = c->kv_blocks,
                    .max_tokens = c->token_budget,
                    .max_seqs = c->max_running,
                    .comm_deadline_ns = c->collective_timeout_ns,
                    .weight_dtype = c->weight_dtype,
                    .mpi = c->mpi};
  sc_status s = executor_new(&xc, out, err);
  weight_source_free(weights); // the weights are on the ranks now
  return s;
}

// The real backends: the executor and the step buffers.
static sc_status real_init(engine *e, sc_error *err) {
  const engine_config *c = &e->cfg;
  SC_TRY(make_executor(c, &e->ex, err));
  size_t R = (size_t)c->max_running, V = (size_t)c->model.vocab_size;
  e->logits = malloc(R * V * sizeof(float));
  e->picks = malloc(R * sizeof(int32_t));
  e->draws = malloc(R * sizeof(dev_sample_row));
  e->can_pick = executor_picks_greedy(e->ex);
  e->can_draw = e->can_pick && executor_picks_sampled(e->ex);
  e->sample_scratch = malloc(sampler_scratch_bytes(c->model.vocab_size));
  if (!e->logits || !e->picks || !e->draws || !e->sample_scratch)
    return sc_fail(err, SC_OOM, "engine: out of host memory for step buffers");
  return SC_OK;
}

// backend "sim": no executor, no weights; buffers for pricing a step.
static sc_status sim_init(engine *e, sc_error *err) {
  const engine_config *c = &e->cfg;
  if (!c->sim.hw) return sc_fail(err, SC_INVALID, "engine: backend sim needs a simulated device");
  if (c->kv_blocks < 1)
    return sc_fail(err, SC_INVALID, "engine: backend sim needs kv_blocks from the planner");
  size_t R = (size_t)c->max_running;
  e->sseqs = calloc(R, sizeof *e->sseqs);
  e->ntok = calloc(R, sizeof *e->ntok);
  e->mb_first = calloc((size_t)c->pp + 1, sizeof *e->mb_first);
  if (!e->sseqs || !e->ntok || !e->mb_first)
    return sc_fail(err, SC_OOM, "engine: out of host memory for step buffers");
  e->cfg.sim.layout.tp = c->tp;
  e->cfg.sim.layout.pp = c->pp;
  return SC_OK;
}

sc_status engine_new(const engine_config *cfg, engine **out, sc_error *err) {
  *out = NULL;
  engine *e = calloc(1, sizeof *e);
  if (!e) return SC_OOM;
  e->cfg = *cfg;
  e->admitting = true;
  e->next_id = 1;
  if (!e->cfg.clock.now_ns) e->cfg.clock = sc_clock_monotonic();
  sc_status s = check_config(&e->cfg, err);
  const engine_config *c = &e->cfg;
  e->be = strcmp(c->backend, "sim") == 0 ? &sim_step : &real_step;
  if (s == SC_OK) s = e->be->init(e, err);
  // the same KV cache, scheduler and step buffers for every backend
  if (s == SC_OK) s = kv_cache_new(c->kv_blocks, c->block_size, &e->kv);
  // the knobs the scheduler takes as they are (kernels/knobs.h), and the watermark in blocks
  sched_config sc = {.watermark_blocks = (int)(c->kv_watermark * c->kv_blocks)};
#define TO_SCHED(name, type, dflt, en, sch, pf, pkey, ok, ex, j) SC_KNOB_IF(sch)(sc.name = c->name;)
  SC_KNOBS(TO_SCHED)
#undef TO_SCHED
  if (s == SC_OK) s = sched_new(sc, e->kv, &e->sched);
  if (s == SC_OK) {
    size_t R = (size_t)c->max_running;
    e->items = calloc(R, sizeof *e->items);
    e->eseqs = calloc(R, sizeof *e->eseqs);
    if (!e->items || !e->eseqs)
      s = sc_fail(err, SC_OOM, "engine: out of host memory for step buffers");
  }
  if (s != SC_OK) {
    engine_free(e);
    return s;
  }
  *out = e;
  return SC_OK;
}

sc_status engine_follow(const engine_config *cfg, sc_error *err) {
  if (!cfg->mpi || !strcmp(cfg->backend, "sim"))
    return sc_fail(err, SC_INVALID, "engine_follow: only for ranks as processes (mpi) of a real "
                   "backend");
  engine_config c = *cfg;
  executor *ex = NULL;
  SC_TRY(check_config(&c, err)); // rank 0's checks and KV sizing: they fail there too
  SC_TRY(make_executor(&c, &ex, err));
  sc_status s = executor_follow(ex, err);
  executor_free(ex);
  return s;
}

// Frees q and its device memory (q must be out of the scheduler).
static void seq_free(engine *e, seq *q) {
  if (!q) return;
  eseq *es = (eseq *)q;
  if (es->mem) executor_seq_mem_free(e->ex, es->mem);
  free(q->tokens);
  free(q->blocks);
  free(es);
}

// Frees every queued or running sequence (their blocks go back to the cache).
static void drop_all(engine *e) {
  seq *q;
  while ((q = sched_any(e->sched)) != NULL) {
    sched_remove(e->sched, q);
    seq_free(e, q);
  }
}

void engine_free(engine *e) {
  if (!e) return;
  if (e->sched) drop_all(e);
  sched_free(e->sched);
  kv_cache_free(e->kv);
  executor_free(e->ex);
  free(e->items);
  free(e->eseqs);
  free(e->sseqs);
  free(e->ntok);
  free(e->mb_first);
  free(e->logits);
  free(e->picks);
  free(e->draws);
  free(e->sample_scratch);
  free(e->events);
  free(e);
}

static sc_status push_event(engine *e, engine_event ev) {
  if (e->n_events == e->cap_events) {
    int cap = e->cap_events ? 2 * e->cap_events : EVENTS_CAP0;
    engine_event *v = realloc(e->events, sizeof *v * (size_t)cap);
    if (!v) return SC_OOM;
    e->events = v;
    e->cap_events = cap;
  }
  e->events[e->n_events++] = ev;
  return SC_OK;
}

sc_status engine_submit(engine *e, const engine_request *r, uint64_t *id, sc_error *err) {
  const model_config *m = &e->cfg.model;
  if (e->broken != SC_OK) return sc_fail(err, e->broken, "engine: the replica has failed");
  if (!e->admitting) return sc_fail(err, SC_ABORTED, "engine: draining, not admitting requests");
  if (r->n_prompt < 1) return sc_fail(err, SC_INVALID, "request: the prompt is empty");
  if (r->max_tokens < 1) return sc_fail(err, SC_INVALID, "request: max_tokens must be at least 1");
  if (r->n_prompt >= m->max_seq_len)
    return sc_fail(err, SC_INVALID,
                   "request: prompt of %d tokens leaves no room in the context of %d tokens "
                   "(max_position_embeddings of %s)",
                   r->n_prompt, m->max_seq_len, m->name);
  for (int i = 0; i < r->n_prompt; i++)
    if (r->prompt[i] < 0 || r->prompt[i] >= m->vocab_size)
      return sc_fail(err, SC_INVALID, "request: token %d at position %d is outside the vocabulary [0, %d)",
                     r->prompt[i], i, m->vocab_size);
  int cap = r->n_prompt + r->max_tokens;
  if (cap > m->max_seq_len) cap = m->max_seq_len;
  int blocks = kv_cache_blocks_for(e->kv, cap);
  if (blocks > kv_cache_total(e->kv))
    return sc_fail(err, SC_INVALID,
                   "request: %d tokens need %d KV blocks, the cache has %d in all", cap, blocks,
                   kv_cache_total(e->kv));
  eseq *es = calloc(1, sizeof *es);
  if (!es) return SC_OOM;
  seq *q = &es->s;
  q->tokens = malloc(sizeof(int32_t) * (size_t)cap);
  q->blocks = malloc(sizeof(int32_t) * (size_t)blocks);
  if (!q->tokens || !q->blocks) {
    seq_free(e, q);
    return SC_OOM;
  }
  memcpy(q->tokens, r->prompt, sizeof(int32_t) * (size_t)r->n_prompt);
  q->id = e->next_id++;
  q->n_tokens = q->n_prompt = r->n_prompt;
  q->n_cached = -1;
  q->cap = cap;
  q->max_new = r->max_tokens;
  q->blocks_cap = blocks;
  q->sampling = r->sampling;
  q->stop_at_eos = r->stop_at_eos;
  es->sim_key = r->sim_key;
  es->sim_len = r->sim_len;
  sc_status s = sched_add(e->sched, q);
  if (s != SC_OK) {
    seq_free(e, q);
    return s;
  }
  *id = q->id;
  return SC_OK;
}

static sc_status finish(engine *e, seq *q, engine_finish_reason why) {
  sc_status s = push_event(e, (engine_event){.kind = ENGINE_EV_FINISHED, .req_id = q->id,
                                             .reason = why, .n_generated = q->n_generated,
                                             .cached_tokens = q->n_cached});
  sched_remove(e->sched, q);
  seq_free(e, q);
  return s;
}

// Ends q with a request-scoped failure: a FAILED event carrying status, its blocks and device
// memory freed.
static sc_status fail_request(engine *e, seq *q, sc_status status) {
  if (status == SC_OOM) e->oom_failures++;
  if (status == SC_NUMERICAL) e->numerical_failures++;
  sc_status s = push_event(e, (engine_event){.kind = ENGINE_EV_FAILED, .req_id = q->id,
                                             .status = status,
                                             .n_generated = q->n_generated});
  sched_remove(e->sched, q);
  seq_free(e, q);
  return s;
}

// Whether a row of n logits holds a NaN or an infinity: one branch-free pass (it vectorises).
static bool row_not_finite(const float *x, int n) {
  int bad = 0;
  for (int i = 0; i < n; i++) bad |= !(fabsf(x[i]) <= FLT_MAX); // false for NaN and inf
  return bad != 0;
}

sc_status engine_cancel(engine *e, uint64_t id) {
  seq *q = sched_find(e->sched, id);
  if (!q) return SC_INVALID;
  return finish(e, q, FINISH_CANCELLED);
}

// A simulated token: a fixed function of (request, index), never eos, so that lengths come
// from the request.
static int32_t sim_token(const engine *e, const seq *q) {
  const model_config *m = &e->cfg.model;
  const eseq *es = (const eseq *)q;
  if (es->sim_len > 0 && q->n_generated == es->sim_len - 1) return m->eos_token_id;
  // Two odd 64-bit multipliers (splitmix64's) spread id and index over all the bits.
  const uint64_t mul_id = 0x9E3779B97F4A7C15ull, mul_index = 0xBF58476D1CE4E5B9ull;
  uint64_t key = es->sim_key ? es->sim_key : q->id;
  uint64_t h = (key * mul_id) ^ ((uint64_t)q->n_generated * mul_index);
  h ^= h >> 31;
  int32_t tok = (int32_t)(h % (uint64_t)m->vocab_size);
  if (tok == m->eos_token_id) tok = (tok + 1) % m->vocab_size;
  return tok;
}

// Samples, appends and reports the token of q; finishes q when it is done, fails it
// (SC_NUMERICAL) when its logits hold a NaN or inf. picked: the greedy token the devices
// picked (-1: its logits held a NaN or inf), with logits NULL; both NULL: sim.
static sc_status emit_token(engine *e, seq *q, const float *logits, const int32_t *picked) {
  const model_config *m = &e->cfg.model;
  int32_t tok;
  if (logits && row_not_finite(logits, m->vocab_size)) return fail_request(e, q, SC_NUMERICAL);
  if (picked && *picked < 0) return fail_request(e, q, SC_NUMERICAL);
  if (picked) {
    tok = *picked;
  } else if (logits) {
    if (e->cfg.on_logits) e->cfg.on_logits(e->cfg.on_logits_ud, q->id, q->n_generated, logits, m->vocab_size);
    tok = sampler_pick(&q->sampling, logits, m->vocab_size, q->n_generated, e->sample_scratch);
  } else {
    tok = sim_token(e, q);
  }
  q->tokens[q->n_tokens++] = tok;
  SC_TRY(push_event(e, (engine_event){.kind = ENGINE_EV_TOKEN, .req_id = q->id, .token = tok,
                                      .index = q->n_generated,
                                      .sched_ns = ((const eseq *)q)->sched_ns}));
  q->n_generated++;
  e->generated++;
  if (q->stop_at_eos && tok == m->eos_token_id) return finish(e, q, FINISH_STOP);
  if (q->n_generated >= q->max_new) return finish(e, q, FINISH_LENGTH);
  if (q->n_tokens >= q->cap) return finish(e, q, FINISH_CONTEXT);
  return SC_OK;
}

// Gives every newly scheduled sequence among items[0..n) its device memory. A sequence whose
// allocation fails with SC_OOM fails (FAILED event) and leaves the step; returns how many
// items remain (compacted in place). Any other failure of the device is the replica's: it is
// returned in *fatal (with err) and the step must stop.
static int admit(engine *e, int n, sc_status *fatal, sc_error *err) {
  int kept = 0;
  *fatal = SC_OK;
  for (int i = 0; i < n; i++) {
    sched_item it = e->items[i];
    eseq *es = (eseq *)it.s;
    if (!es->mem) {
      sc_error aerr = {{0}};
      sc_status s = executor_seq_mem_new(e->ex, &es->mem, &aerr);
      if (s == SC_OOM) {
        if (++e->oom_streak > OOM_STREAK_UNHEALTHY) e->oom_streak = OOM_STREAK_UNHEALTHY;
        sc_status ps = fail_request(e, it.s, SC_OOM);
        if (ps != SC_OK) {
          *fatal = sc_fail(err, ps, "engine: out of host memory for events");
          return kept;
        }
        continue;
      }
      if (s != SC_OK) {
        *fatal = s;
        if (err) *err = aerr;
        return kept;
      }
      e->oom_streak = 0;
    }
    e->items[kept++] = it;
  }
  return kept;
}

// Runs the planned items[0..n) on the executor; the duration is the clock's.
static sc_status real_run(engine *e, int n, engine_step_info *info, sc_error *err) {
  exec_batch b = {.n_seqs = n, .seqs = e->eseqs, .logits = e->logits,
                  .tokens = e->picked ? e->picks : NULL, .draws = e->drawn ? e->draws : NULL};
  sc_status s = executor_run(e->ex, &b, err);
  info->duration_ns = sc_clock_now(&e->cfg.clock) - info->t_start_ns;
  return s;
}

void engine_sim_set_cluster_ranks(engine *e, int ranks) {
  if (e->be->set_cluster_ranks) e->be->set_cluster_ranks(e, ranks);
}

static void sim_set_cluster_ranks(engine *e, int ranks) {
  int own = e->cfg.tp * e->cfg.pp;
  e->cfg.sim.layout.cluster_ranks = ranks > own ? ranks : own;
}

// Prices the planned items[0..n) with the cost model, split into micro-batches as the
// executor would split them.
static sc_status sim_run(engine *e, int n, engine_step_info *info, sc_error *err) {
  for (int i = 0; i < n; i++) {
    const exec_seq *q = &e->eseqs[i];
    e->sseqs[i] = (sim_seq){.start = q->start, .n = q->n, .logits = q->want_logits};
    e->ntok[i] = q->n;
  }
  int n_mb = exec_split_microbatches(e->ntok, n, e->cfg.pp, e->mb_first);
  sim_step_cost c;
  const engine_sim *sm = &e->cfg.sim;
  if (sim_step_price(sm->hw, &sm->model, &sm->layout, e->sseqs, n, e->mb_first, n_mb, &c) != 0)
    return sc_fail(err, SC_INVALID, "engine: the cost model refused a step of %d sequences", n);
  double ns = c.total_s * 1e9;
  info->duration_ns = ns < 1 ? 1 : (uint64_t)(ns + 0.5);
  info->host_ns = (uint64_t)(c.host_s * 1e9 + 0.5);
  info->bubble_frac = c.bubble_frac;
  return SC_OK;
}

// Runs the planned items[0..n) (n > 0) on the backend and emits their tokens; adds the step's
// tokens to info and sets its duration. The engine is broken when the backend fails.
static sc_status run_items(engine *e, int n, engine_step_info *info, sc_error *err) {
  for (int i = 0; i < n; i++) {
    const sched_item *it = &e->items[i];
    eseq *es = (eseq *)it->s;
    if (!es->scheduled) { // vLLM's scheduled time: its queue time ends, its prefill begins
      es->scheduled = true;
      es->sched_ns = info->t_start_ns;
    }
    e->eseqs[i] = (exec_seq){.start = it->start, .n = it->n, .tokens = it->s->tokens + it->start,
                             .blocks = it->s->blocks, .n_blocks = it->s->n_blocks,
                             .want_logits = it->sample, .mem = ((eseq *)it->s)->mem};
    // One token past the prompt is a decode token; anything else is (re)prefill.
    if (it->n == 1 && it->start >= it->s->n_prompt)
      info->decode_tokens++;
    else
      info->prefill_tokens += it->n;
  }
  // Every row greedy and nobody watching the logits: the devices pick the tokens, and only
  // the tokens cross to the host (no logits copy; under TP no logits all-gather either).
  e->picked = e->can_pick && !e->cfg.on_logits; // can_pick: never on sim
  e->drawn = false;
  for (int i = 0, row = 0; e->picked && i < n; i++) {
    if (!e->items[i].sample) continue;
    const seq *q = e->items[i].s;
    e->draws[row++] = (dev_sample_row){
        .temperature = q->sampling.temperature, .top_p = q->sampling.top_p,
        .u = sampler_uniform(q->sampling.seed, (uint64_t)q->n_generated)};
    if (q->sampling.temperature > 0.0f) e->drawn = true;
  }
  if (e->drawn && !e->can_draw) e->picked = e->drawn = false;
  sc_status s = e->be->run(e, n, info, err);
  if (s != SC_OK) {
    e->broken = s;
    return s;
  }
  e->steps++;
  int row = 0;
  for (int i = 0; i < n; i++) {
    sched_item *it = &e->items[i];
    it->s->n_computed += it->n;
    sched_computed(e->sched, it->s);
    if (!it->sample) continue;
    size_t V = (size_t)e->cfg.model.vocab_size;
    const float *lg = !e->logits || e->picked ? NULL : e->logits + (size_t)row * V;
    const int32_t *pk = e->picked ? e->picks + row : NULL;
    row++;
    SC_TRY(emit_token(e, it->s, lg, pk));
  }
  return SC_OK;
}

sc_status engine_step(engine *e, engine_step_result *out, sc_error *err) {
  memset(out, 0, sizeof *out);
  if (e->broken != SC_OK) return sc_fail(err, e->broken, "engine: the replica has failed");
  engine_step_info *info = &out->info;
  info->t_start_ns = sc_clock_now(&e->cfg.clock);
  int n_pre = 0;
  int n = sched_plan(e->sched, e->items, &n_pre);
  info->n_preempted = n_pre;
  e->preemptions += (uint64_t)n_pre;
  if (n > 0 && e->be->admit) {
    sc_status s;
    n = e->be->admit(e, n, &s, err);
    if (s != SC_OK) {
      e->broken = s;
      return s;
    }
  }
  bool decode_only = n > 0;
  for (int i = 0; i < n; i++) decode_only &= e->items[i].n == 1 && e->items[i].sample;
  if (n > 0) SC_TRY(run_items(e, n, info, err));
  // decode_steps: a decode-only step goes on for up to decode_steps steps before the next
  // plan (vLLM's multi-step scheduling): the running sequences decode again without admission
  // or preemption, the host's part of each further step is not paid again (its price says
  // which part that is; a real backend reports none), and every token comes out at the end.
  for (int k = 1; decode_only && k < e->cfg.decode_steps; k++) {
    int m = sched_plan_continue(e->sched, e->items);
    if (m <= 0) break;
    engine_step_info sub = {.t_start_ns = sc_clock_now(&e->cfg.clock)};
    SC_TRY(run_items(e, m, &sub, err));
    info->decode_tokens += sub.decode_tokens;
    info->duration_ns += sub.duration_ns - (sub.host_ns < sub.duration_ns ? sub.host_ns : 0);
    if (m > n) n = m;
  }
  info->n_seqs = n;
  info->queue_len = sched_n_waiting(e->sched);
  info->running = sched_n_running(e->sched);
  info->kv_used = kv_cache_used(e->kv);
  info->kv_total = kv_cache_total(e->kv);
  out->events = e->events;
  out->n_events = e->n_events;
  e->n_events = 0; // the buffer stays valid until the next step appends to it
  return SC_OK;
}

bool engine_idle(const engine *e) {
  return sched_n_running(e->sched) == 0 && sched_n_waiting(e->sched) == 0 && e->n_events == 0;
}

void engine_set_admitting(engine *e, bool admitting) { e->admitting = admitting; }

void engine_stats_get(const engine *e, engine_stats *out) {
  *out = (engine_stats){.queue_len = sched_n_waiting(e->sched),
                        .running = sched_n_running(e->sched),
                        .kv_used = kv_cache_used(e->kv),
                        .kv_total = kv_cache_total(e->kv),
                        .kv_block_size = kv_cache_block_size(e->kv),
                        .steps = e->steps,
                        .preemptions = e->preemptions,
                        .prefix_hit_tokens = sched_prefix_hit_tokens(e->sched),
                        .prefix_query_tokens = sched_prefix_query_tokens(e->sched),
                        .generated_tokens = e->generated,
                        .n_ranks = e->be->n_ranks(e),
                        .oom_failures = e->oom_failures,
                        .numerical_failures = e->numerical_failures,
                        .unhealthy = e->oom_streak >= OOM_STREAK_UNHEALTHY};
}

sc_status engine_rank_mem(engine *e, int r, size_t *used, size_t *total) {
  return e->be->rank_mem(e, r, used, total);
}

// --- the two implementations of the step seam

static int real_n_ranks(const engine *e) { return executor_n_ranks(e->ex); }

static sc_status real_rank_mem(engine *e, int r, size_t *used, size_t *total) {
  return executor_rank_mem(e->ex, r, used, total);
}

static const engine_step_i real_step = {
    .name = "real",
    .init = real_init,
    .admit = admit,
    .run = real_run,
    .n_ranks = real_n_ranks,
    .rank_mem = real_rank_mem,
};

static int sim_n_ranks(const engine *e) { return e->cfg.tp * e->cfg.pp; }

// The planner's figures: the static bytes and the KV blocks in use, of the simulated device.
static sc_status sim_rank_mem(engine *e, int r, size_t *used, size_t *total) {
  if (r < 0 || r >= e->cfg.tp * e->cfg.pp) return SC_INVALID;
  const engine_sim *sm = &e->cfg.sim;
  *used = (size_t)(sm->static_bytes + sm->kv_block_bytes * kv_cache_used(e->kv));
  *total = (size_t)sm->hw->mem_bytes;
  return SC_OK;
}

static const engine_step_i sim_step = {
    .name = "sim",
    .init = sim_init,
    .run = sim_run,
    .n_ranks = sim_n_ranks,
    .rank_mem = sim_rank_mem,
    .set_cluster_ranks = sim_set_cluster_ranks,
};

// --- fault hooks (the executor's; sim has none, and no executor)

sc_status engine_set_rank_fault(engine *e, int r, const dev_fault *f) {
  if (!e || !e->ex || !f) return SC_INVALID;
  return executor_set_fault(e->ex, r, f);
}

sc_status engine_set_link_fault(engine *e, double factor, uint64_t latency_ns, double bandwidth) {
  if (!e || !e->ex) return SC_INVALID;
  executor_set_link_fault(e->ex, factor, latency_ns, bandwidth);
  return SC_OK;
}
