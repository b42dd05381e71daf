// The engine config of a deployment's replicas (see deployment.h).
#include "scenarios/deployment.h"

#include <string.h>

#include "engine/memplan.h"
#include "kernels/device.h"

static int threads_per_rank(const scenario *s, const scn_deployment *d) {
  if (s->hardware.threads > 0) return s->hardware.threads;
  int t = device_cpu_cores() / (d->tp * d->pp * d->dp);
  return t > 0 ? t : 1;
}

// How a real backend holds the linear layers' weights for a model of dtype wdt: int8 when asked
// for; bf16 or fp16 on cuda for a bf16 or fp16 model (its GEMMs then run on the tensor cores);
// else f32 (the CPU backend multiplies f32 whatever the file says).
static sc_dtype held_dtype(const scenario *s, sc_dtype wdt) {
  if (wdt == SC_I8) return SC_I8;
  if ((wdt == SC_BF16 || wdt == SC_F16) && !strcmp(s->hardware.backend, "cuda")) return wdt;
  return SC_F32;
}

static engine_config engine_cfg(const scenario *s, const scn_deployment *d, sc_clock clock) {
  engine_config c = engine_config_defaults();
  c.model = s->model.config;
  c.weights_dir = s->model.has_weights ? s->model.resolved : NULL;
  c.weights_seed = s->model.weights_seed;
  c.weight_dtype = held_dtype(s, s->mp.weight_dtype);
  c.backend = s->hardware.backend[0] ? s->hardware.backend : "cpu";
  c.tp = d->tp;
  c.pp = d->pp;
  c.n_devices = s->hardware.n_devices;
  memcpy(c.devices, s->hardware.devices, sizeof c.devices);
  // the knobs the engine carries (kernels/knobs.h, engine 1)
#define TO_ENGINE(name, type, dflt, e, sch, pf, pkey, ok, ex, j)                                   \
  SC_KNOB_IF(e)(c.name = s->limits.name;)
  SC_KNOBS(TO_ENGINE)
#undef TO_ENGINE
  c.threads = threads_per_rank(s, d);
  if (s->limits.collective_timeout_ns) c.collective_timeout_ns = s->limits.collective_timeout_ns;
  c.clock = clock;
  return c;
}

// Sim mode: what a simulated replica of d needs on top of the real engine config: the device,
// the shapes and dtypes as priced, the placement, and the planner's KV capacity and memory.
static sc_status sim_config(const scenario *s, const scn_deployment *d, const model_config *m,
                            sc_dtype wdt, engine_config *c, sc_error *err) {
  const sim_hw *hw = &s->hw.sim;
  memplan_params mp = s->mp;
  mp.weight_dtype = wdt;
  memplan_layout lay;
  SC_TRY(memplan_eval(m, &s->hw, &mp, d->tp, d->pp, d->dp, &lay));
  if (!lay.valid || !lay.fits || lay.kv_blocks < 1)
    return sc_fail(err, SC_INVALID, "deployment %s does not fit: %s", d->label, lay.why);
  // Never more blocks than max_running sequences of a full context can use.
  int64_t per_seq = (m->max_seq_len + s->limits.block_size - 1) / s->limits.block_size;
  int64_t most = (int64_t)s->limits.max_running * per_seq;
  c->backend = "sim";
  c->kv_blocks = (int)(lay.kv_blocks < most ? lay.kv_blocks : most);
  c->threads = hw->host_cores > 0 ? hw->host_cores / (d->tp * d->pp * d->dp) : 1;
  if (c->threads < 1) c->threads = 1;
  // the CPU backend holds weights in f32 whatever the file says, or as int8 when asked to
  sim_dtype held = hw->host_cores > 0 ? (wdt == SC_I8 ? SIM_I8 : SIM_F32) : (sim_dtype)wdt;
  c->sim = (engine_sim){
      .hw = hw,
      .model = {.dim = m->dim,
                .n_layers = m->n_layers,
                .n_heads = m->n_heads,
                .n_kv_heads = m->n_kv_heads,
                .head_dim = m->head_dim,
                .ffn_dim = m->ffn_dim,
                .vocab = m->vocab_size,
                .tied_embeddings = m->tied_embeddings,
                .weight_dtype = held,
                .act_dtype = mp.kv_dtype == SC_FP8 ? SIM_BF16 : (sim_dtype)mp.kv_dtype,
                .kv_fp8 = mp.kv_dtype == SC_FP8},
      .layout = {.tp = d->tp,
                 .pp = d->pp,
                 .threads = c->threads,
                 .cluster_ranks = d->tp * d->pp * d->dp},
      .static_bytes = lay.weight_bytes + lay.workspace_bytes,
      .kv_block_bytes = lay.kv_bytes_per_token * s->limits.block_size,
  };
  return SC_OK;
}

sc_status scenario_engine_config(const scenario *s, const scn_deployment *d, const model_config *m,
                                 sc_dtype wdt, sc_clock clock, engine_config *c, sc_error *err) {
  *c = engine_cfg(s, d, clock);
  c->model = *m;
  c->weight_dtype = held_dtype(s, wdt);
  if (s->mode == SCN_MODE_SIM) {
    SC_TRY(sim_config(s, d, m, wdt, c, err));
    c->sim.detect_timeout_ns = s->router.detect_timeout_ns;
    c->sim.collective_timeout_ns = s->limits.collective_timeout_ns;
  }
  // a measured engine's KV size wins over the planner's (sim) and the engine's own sizing (real)
  if (s->limits.num_gpu_blocks_override > 0) c->kv_blocks = s->limits.num_gpu_blocks_override;
  return SC_OK;
}
