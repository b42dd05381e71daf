// The step-overhead tables of a profile: engines of the model (random weights) run real
// decode steps at every batch size of the grid, each TP degree alone and tp x replicas side
// by side, and each step is set against the cost model's price of it from the tables already
// measured; the residual per batch size is a table, its median over every step the scalar
// step_overhead_s. Prompts submitted while a batch decodes give each table's prefill residual.
//
// Left to others: the tables it prices with (host.c, gemm.c, attention.c, allreduce.c; the
// simulator's view of them is profile.c's), the engine (engine/engine.c), the cost model
// (kernels/sim/sim_cost.c), writing the tables and their detail (write.c).
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/hardware.h"
#include "engine/engine.h"
#include "kernels/clock.h"
#include "kernels/device.h"
#include "kernels/util.h"
#include "profile/profile_impl.h"

#define PROF_OVERHEAD_PROMPT 16      // prompt tokens of the step-overhead sequences
#define PROF_OVERHEAD_REPLICAS_MAX 8 // replicas side by side in the step-overhead run

// Prompt tokens of the prefill residual's probes: what a step computes for a prompt beside a
// batch of decodes (a short chat turn, a paragraph, a page), at most half the model's context.
static const int prof_probe_tokens[PROF_PREFILL_PROBES] = {16, 64, 256};

// The replicas of a step-overhead run start each (round, batch size) together. Once aborted
// (a replica failed, or one could not start), waiting returns at once.
typedef struct ov_turn {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int parties, waiting;
  unsigned gen;
  bool aborted;
} ov_turn;

static void ov_turn_wait(ov_turn *t) {
  pthread_mutex_lock(&t->mu);
  unsigned gen = t->gen;
  if (!t->aborted && ++t->waiting == t->parties) {
    t->waiting = 0;
    t->gen++;
    pthread_cond_broadcast(&t->cv);
  }
  while (!t->aborted && gen == t->gen) pthread_cond_wait(&t->cv, &t->mu);
  pthread_mutex_unlock(&t->mu);
}

static void ov_turn_abort(ov_turn *t) {
  pthread_mutex_lock(&t->mu);
  t->aborted = true;
  pthread_cond_broadcast(&t->cv);
  pthread_mutex_unlock(&t->mu);
}

static bool ov_turn_aborted(ov_turn *t) {
  pthread_mutex_lock(&t->mu);
  bool a = t->aborted;
  pthread_mutex_unlock(&t->mu);
  return a;
}

// One replica of the step-overhead run: its engine, and every timed step's figures per batch
// size (`rounds` x PROF_MAX_STEPS slots each); and the probes' steps, each a prompt of n_probe
// sizes computed beside a batch's decodes, once per (round, batch size, prompt size).
enum { OV_WALL, OV_EXEC, OV_PRICE, OV_RES, OV_RES_EXEC, OV_FIGS };
enum { PR_WALL, PR_PRICE, PR_BATCH, PR_FIGS };
typedef struct ov_replica {
  const profile_options *o;
  const sim_hw *hw;
  const sim_model *sm;
  sim_layout lay;
  engine *e;
  int prompt, steps, index;
  size_t per_b, cells;
  double *fig; // OV_FIGS x cells
  int n_probe;           // prompt sizes probed (prof_probe_tokens[0 .. n_probe))
  size_t probe_cells;    // rounds x batch sizes x n_probe
  double *pfig;          // PR_FIGS x probe_cells; PR_WALL NaN where a probe was not timed
  int kept[PROFILE_MAX_BATCHES];
  ov_turn *turn;
  sc_status s;
  sc_error err;
  pthread_t th;
} ov_replica;

// Runs every round of every batch size on r's engine, waiting at r->turn before each.
static void *ov_replica_main(void *arg) {
  ov_replica *r = arg;
  const profile_options *o = r->o;
  const model_config *m = &o->model;
  int max_ids = r->prompt;
  for (int k = 0; k < r->n_probe; k++)
    max_ids = prof_probe_tokens[k] > max_ids ? prof_probe_tokens[k] : max_ids;
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)max_ids);
  sim_seq *seqs = malloc(sizeof(sim_seq) * (PROF_MAX_BATCH + 1));
  if (!ids || !seqs) {
    r->s = sc_fail(&r->err, SC_OOM, "profile: out of memory for the step run");
    ov_turn_abort(r->turn); // the other replicas skip their work too
  }
  for (int rd = 0; rd < o->overhead_rounds; rd++)
    for (int bi = 0; bi < o->n_batches; bi++) {
      ov_turn_wait(r->turn);
      if (r->s != SC_OK || ov_turn_aborted(r->turn)) continue;
      int B = o->batches[bi];
      sc_status s = SC_OK;
      for (int q = 0; s == SC_OK && q < B; q++) {
        for (int j = 0; j < r->prompt; j++)
          ids[j] = 3 + (int32_t)(((uint64_t)q * 7919 + (uint64_t)j * 104729 + o->seed +
                                  (uint64_t)rd + (uint64_t)r->index * 31) %
                                 (uint64_t)(m->vocab_size > 3 ? m->vocab_size - 3 : 1));
        engine_request rq = {.prompt = ids, .n_prompt = r->prompt,
                             .max_tokens = r->steps + 1 + r->n_probe,
                             .sampling = {.temperature = 0, .top_p = 1}};
        uint64_t id;
        s = engine_submit(r->e, &rq, &id, &r->err);
      }
      // adv: decode steps of the batch so far (pure or beside a probe), which sets the
      // batch's positions; probe: the prompt size in flight (-1: none), submitted after every
      // second timed decode step while sizes are left, and timed in the step that computes it
      int n_dec = 0, n_round = 0, adv = 0, probe = -1, probed = 0;
      while (s == SC_OK && !engine_idle(r->e)) {
        engine_step_result rs;
        double a = sc_monotonic_s();
        s = engine_step(r->e, &rs, &r->err);
        double w = sc_monotonic_s() - a;
        if (s != SC_OK) break;
        const engine_step_info *in = &rs.info;
        if (probe >= 0 && in->prefill_tokens > 0) { // the probe's step (or a chunk of it)
          int P = prof_probe_tokens[probe];
          if (in->decode_tokens == B && in->prefill_tokens == P && in->n_seqs == B + 1) {
            for (int q = 0; q < B; q++)
              seqs[q] = (sim_seq){.start = r->prompt + adv, .n = 1, .logits = true};
            seqs[B] = (sim_seq){.start = 0, .n = P, .logits = true};
            int mb[2] = {0, B + 1};
            sim_step_cost cost;
            if (sim_step_price(r->hw, r->sm, &r->lay, seqs, B + 1, mb, 1, &cost) == 0) {
              size_t at = ((size_t)rd * (size_t)o->n_batches + (size_t)bi) * (size_t)r->n_probe +
                          (size_t)probe;
              r->pfig[PR_WALL * r->probe_cells + at] = w;
              r->pfig[PR_PRICE * r->probe_cells + at] = cost.total_s;
              r->pfig[PR_BATCH * r->probe_cells + at] = B;
            }
          }
          probe = -1;
        }
        if (in->decode_tokens == B) adv++;
        if (in->decode_tokens != B || in->prefill_tokens != 0 || in->n_seqs != B) continue;
        int d = n_dec++;
        if (d == 0 || n_round == PROF_MAX_STEPS) continue; // warm-up
        if (probe < 0 && probed < r->n_probe && d % 2 == 0) { // the next step computes it
          int P = prof_probe_tokens[probed];
          for (int j = 0; j < P; j++)
            ids[j] = 3 + (int32_t)(((uint64_t)j * 104729 + (uint64_t)P * 7919 + o->seed +
                                    (uint64_t)rd + (uint64_t)r->index * 31) %
                                   (uint64_t)(m->vocab_size > 3 ? m->vocab_size - 3 : 1));
          engine_request rq = {.prompt = ids, .n_prompt = P, .max_tokens = 1,
                               .sampling = {.temperature = 0, .top_p = 1}};
          uint64_t id;
          s = engine_submit(r->e, &rq, &id, &r->err);
          if (s != SC_OK) break;
          probe = probed++;
        }
        for (int q = 0; q < B; q++)
          seqs[q] = (sim_seq){.start = r->prompt + adv - 1, .n = 1, .logits = true};
        int mb[2] = {0, B};
        sim_step_cost cost;
        if (sim_step_price(r->hw, r->sm, &r->lay, seqs, B, mb, 1, &cost) != 0) {
          s = sc_fail(&r->err, SC_INVALID, "profile: the cost model refused a decode step of %d",
                      B);
          break;
        }
        double x = (double)in->duration_ns * 1e-9;
        size_t at = (size_t)bi * r->per_b + (size_t)r->kept[bi]++;
        double *f = r->fig;
        f[OV_WALL * r->cells + at] = w;
        f[OV_EXEC * r->cells + at] = x;
        f[OV_PRICE * r->cells + at] = cost.total_s;
        f[OV_RES * r->cells + at] = w - cost.total_s;
        f[OV_RES_EXEC * r->cells + at] = x - cost.total_s;
        n_round++;
      }
      if (s == SC_OK && n_round == 0)
        s = sc_fail(&r->err, SC_DEVICE, "profile: no decode step of batch %d was timed", B);
      if (s != SC_OK) {
        r->s = s;
        ov_turn_abort(r->turn);
      }
    }
  free(ids);
  free(seqs);
  return NULL;
}

// Decode steps of `replicas` engines of TP degree tp running side by side (each on its own
// thread, at the engine's threads for that many ranks on the host), at every batch size of
// the grid, each step against the cost model's price of it from this profile (without any
// step overhead). The batch sizes take turns, o->overhead_rounds times over, so that a slow
// moment of the machine lands on one round of each rather than on all of one; the replicas
// start each batch size together. Appends the residual table of (tp, replicas) and its
// per-batch detail; for the first table also sets the scalar step_overhead_s (the median
// residual over every timed step).
static sc_status overhead_at(profile *p, int tp, int replicas, sc_error *err) {
  const profile_options *o = &p->o;
  const model_config *m = &o->model;
  double t0 = sc_monotonic_s();
  int ti = p->hw.sim.n_overhead, max_b = 0, nb = o->n_batches;
  for (int i = 0; i < nb; i++) max_b = o->batches[i] > max_b ? o->batches[i] : max_b;
  int prompt = m->max_seq_len / 4 < PROF_OVERHEAD_PROMPT ? m->max_seq_len / 4
                                                          : PROF_OVERHEAD_PROMPT;
  if (prompt < 1) prompt = 1;
  int steps = o->decode_steps + 1; // the first decode step is a warm-up
  if (prompt + steps + 1 > m->max_seq_len)
    return sc_fail(err, SC_INVALID,
                   "profile: %s's max_seq_len %d is too short for %d decode steps", m->name,
                   m->max_seq_len, steps);
  int n_probe = 0, probe_max = 0; // prompt sizes of the prefill curve that the model holds
  while (n_probe < PROF_PREFILL_PROBES && prof_probe_tokens[n_probe] <= m->max_seq_len / 2)
    probe_max = prof_probe_tokens[n_probe++];
  int per_seq = (prompt + steps + 1 + n_probe + 15) / 16;
  int cores = device_cpu_cores(), threads = p->cuda ? 1 : cores / (tp * replicas);
  if (threads < 1) threads = 1;

  sim_hw hw = p->hw.sim;
  hw.step_overhead_s = 0;
  hw.n_overhead = 0;
  sim_model sm = {.dim = m->dim, .n_layers = m->n_layers, .n_heads = m->n_heads,
                  .n_kv_heads = m->n_kv_heads, .head_dim = m->head_dim, .ffn_dim = m->ffn_dim,
                  .vocab = m->vocab_size, .tied_embeddings = m->tied_embeddings,
                  .weight_dtype = SIM_F32, .act_dtype = SIM_F32};
  if (p->cuda) { // as a scenario prices a GPU profile (scenarios/deployment.c): the model's
    sm.weight_dtype = (sim_dtype)m->dtype; // dtype, bf16 activations
    sm.act_dtype = SIM_BF16;
  }
  size_t per_b = (size_t)o->overhead_rounds * PROF_MAX_STEPS, cells = (size_t)nb * per_b;
  size_t probe_cells = (size_t)o->overhead_rounds * (size_t)nb * (size_t)n_probe;
  ov_replica rep[PROF_OVERHEAD_REPLICAS_MAX];
  ov_turn turn = {.parties = replicas};
  pthread_mutex_init(&turn.mu, NULL);
  pthread_cond_init(&turn.cv, NULL);
  sc_status s = SC_OK;
  int made = 0;
  for (; s == SC_OK && made < replicas; made++) {
    ov_replica *r = &rep[made];
    *r = (ov_replica){.o = o, .hw = &hw, .sm = &sm, .prompt = prompt, .steps = steps,
                      .index = made, .per_b = per_b, .cells = cells, .n_probe = n_probe,
                      .probe_cells = probe_cells, .turn = &turn, .s = SC_OK};
    r->lay = (sim_layout){.tp = tp, .pp = 1, .first_gpu = made * tp, .threads = threads,
                          .cluster_ranks = tp * replicas};
    engine_config c = engine_config_defaults();
    c.model = *m;
    c.weights_dir = NULL;
    c.weights_seed = o->seed;
    c.backend = o->backend;
    c.weight_dtype = p->wdt;
    if (p->cuda) { // every rank of every replica on GPU 0, as `devices: [0]` in a scenario
      c.devices[0] = 0;
      c.n_devices = 1;
    }
    c.tp = tp;
    c.pp = 1;
    c.threads = threads;
    // room for a probe beside the largest batch: one more sequence, its blocks, its prompt in
    // one step (the batch's own prompts fit one step either way)
    c.max_running = max_b + 1;
    c.kv_blocks = max_b * per_seq + (probe_max + 1 + 15) / 16;
    c.token_budget = max_b * prompt > max_b + probe_max ? max_b * prompt : max_b + probe_max;
    c.prefill_chunk = prompt > probe_max ? prompt : probe_max;
    r->fig = malloc(sizeof(double) * cells * OV_FIGS);
    r->pfig = malloc(sizeof(double) * (probe_cells ? probe_cells : 1) * PR_FIGS);
    if (!r->fig || !r->pfig)
      s = sc_fail(err, SC_OOM, "profile: out of memory for the step-overhead run");
    for (size_t i = 0; r->pfig && i < probe_cells; i++) r->pfig[PR_WALL * probe_cells + i] = NAN;
    if (s == SC_OK) s = engine_new(&c, &r->e, err);
    if (s != SC_OK) {
      free(r->fig);
      free(r->pfig);
      break;
    }
  }
  // replica 0 on this thread, the others on their own
  int started = 1;
  for (; s == SC_OK && started < replicas; started++)
    if (pthread_create(&rep[started].th, NULL, ov_replica_main, &rep[started]) != 0) {
      ov_turn_abort(&turn); // the started ones skip their work and reach the end
      s = sc_fail(err, SC_DEVICE, "profile: cannot start a replica thread");
      break;
    }
  if (s == SC_OK) ov_replica_main(&rep[0]);
  for (int q = 1; q < started; q++) pthread_join(rep[q].th, NULL);
  for (int q = 0; s == SC_OK && q < replicas; q++)
    if (rep[q].s != SC_OK) {
      *err = rep[q].err;
      s = rep[q].s;
    }

  if (s == SC_OK) {
    // every replica's steps of one batch size, gathered into replica 0's slots (per_b holds
    // rounds x PROF_MAX_STEPS; a batch size is timed at most that many times per replica, so
    // the pooled figures go through a scratch array of replicas x per_b)
    double *pool = malloc(sizeof(double) * per_b * (size_t)replicas);
    double *all = malloc(sizeof(double) * cells * (size_t)replicas);
    double *all_x = malloc(sizeof(double) * cells * (size_t)replicas);
    if (!pool || !all || !all_x)
      s = sc_fail(err, SC_OOM, "profile: out of memory for the step-overhead run");
    sim_overhead_table *tab = &p->hw.sim.overhead[ti];
    *tab = (sim_overhead_table){.tp = tp, .replicas = replicas, .s = {.n = nb}};
    int n_all = 0;
    for (int bi = 0; s == SC_OK && bi < nb; bi++) {
      double med[OV_FIGS];
      for (int f = 0; f < OV_FIGS; f++) {
        int k = 0;
        for (int q = 0; q < replicas; q++)
          for (int i = 0; i < rep[q].kept[bi]; i++)
            pool[k++] = rep[q].fig[(size_t)f * cells + (size_t)bi * per_b + (size_t)i];
        if (f == OV_RES) memcpy(all + n_all, pool, sizeof(double) * (size_t)k);
        if (f == OV_RES_EXEC) {
          memcpy(all_x + n_all, pool, sizeof(double) * (size_t)k);
          n_all += k;
        }
        med[f] = sc_median(pool, k, 0);
      }
      p->batch[bi] = o->batches[bi];
      p->wall_s[ti][bi] = med[OV_WALL];
      p->exec_s[ti][bi] = med[OV_EXEC];
      p->price_s[ti][bi] = med[OV_PRICE];
      p->res_s[ti][bi] = med[OV_RES];
      tab->s.x[bi] = o->batches[bi];
      tab->s.y[bi] = med[OV_RES] < -HW_STEP_OVERHEAD_MAX_S  ? -HW_STEP_OVERHEAD_MAX_S
                     : med[OV_RES] > HW_STEP_OVERHEAD_MAX_S ? HW_STEP_OVERHEAD_MAX_S
                                                            : med[OV_RES];
    }
    // the prefill curve: per prompt size, the median over every probe's step of its wall time
    // minus its price minus the decode residual just measured at its batch size (with two
    // rounds or more the first round's probes only warm up: a first prompt of a size meets
    // one-time costs)
    p->n_probe[ti] = 0;
    tab->prefill.n = 0;
    size_t first = o->overhead_rounds > 1 ? (size_t)nb * (size_t)n_probe : 0;
    for (int k = 0; s == SC_OK && k < n_probe; k++) {
      int np = 0;
      double w_sum = 0, p_sum = 0;
      for (int q = 0; q < replicas; q++)
        for (size_t c = first + (size_t)k; c < probe_cells; c += (size_t)n_probe) {
          const double *f = rep[q].pfig;
          if (isnan(f[PR_WALL * probe_cells + c])) continue;
          double ds = sim_curve_lin(&tab->s, f[PR_BATCH * probe_cells + c], 0);
          pool[np++] = f[PR_WALL * probe_cells + c] - f[PR_PRICE * probe_cells + c] - ds;
          w_sum += f[PR_WALL * probe_cells + c];
          p_sum += f[PR_PRICE * probe_cells + c];
        }
      if (np == 0) continue; // no probe of this size ran in one step: no point for it
      double med = sc_median(pool, np, 0);
      int at = tab->prefill.n++;
      tab->prefill.x[at] = prof_probe_tokens[k];
      tab->prefill.y[at] = med < -HW_STEP_OVERHEAD_MAX_S  ? -HW_STEP_OVERHEAD_MAX_S
                           : med > HW_STEP_OVERHEAD_MAX_S ? HW_STEP_OVERHEAD_MAX_S
                                                          : med;
      p->probe_steps[ti][at] = np;
      p->probe_wall_s[ti][at] = w_sum / np;
      p->probe_price_s[ti][at] = p_sum / np;
      p->n_probe[ti] = at + 1;
    }
    if (s == SC_OK) {
      p->n_batches = nb;
      p->hw.sim.n_overhead = ti + 1;
      double ov = sc_median(all, n_all, 0);
      if (ti == 0) {
        p->sum.step_overhead_exec_s = sc_median(all_x, n_all, 0);
        p->sum.step_overhead_s =
            ov > 0 ? (ov < HW_STEP_OVERHEAD_MAX_S ? ov : HW_STEP_OVERHEAD_MAX_S) : 0;
        p->sum.overhead_tp = tp;
        p->sum.overhead_steps = n_all;
        p->hw.sim.step_overhead_s = p->sum.step_overhead_s;
      }
      char line[256];
      int len = snprintf(line, sizeof line, "step overhead: %s tp%d", m->name, tp);
      if (replicas > 1)
        len += snprintf(line + len, sizeof line - (size_t)len, " x %d replicas", replicas);
      len += snprintf(line + len, sizeof line - (size_t)len,
                      ", %d decode steps in %d rounds at batch", n_all, o->overhead_rounds);
      for (int i = 0; i < nb && len > 0 && (size_t)len < sizeof line; i++)
        len += snprintf(line + len, sizeof line - (size_t)len, "%s%d", i ? ", " : " ",
                        p->batch[i]);
      for (int k = 0; k < tab->prefill.n && len > 0 && (size_t)len < sizeof line; k++)
        len += snprintf(line + len, sizeof line - (size_t)len, "%s%.0f: %.3f ms",
                        k ? ", " : "; prefill residual at ", tab->prefill.x[k],
                        tab->prefill.y[k] * 1e3);
      prof_progress(o, "%s; median residual %.3f ms [%.1f s]", line, ov * 1e3,
                    sc_monotonic_s() - t0);
    }
    free(pool);
    free(all);
    free(all_x);
  }
  pthread_mutex_destroy(&turn.mu);
  pthread_cond_destroy(&turn.cv);
  for (int q = 0; q < made; q++) {
    engine_free(rep[q].e);
    free(rep[q].fig);
    free(rep[q].pfig);
  }
  return s;
}

// Every TP degree alone, then the data-parallel layouts the list spans: tp x replicas where
// tp and tp x replicas are both in the list (for 1,2,4: 1x2, 1x4, 2x2), as the profile's
// scaling scenarios run them.
sc_status prof_measure_overhead(profile *p, sc_error *err) {
  const profile_options *o = &p->o;
  for (int ti = 0; ti < o->n_tp; ti++) SC_TRY(overhead_at(p, o->tp[ti], 1, err));
  for (int ti = 0; ti < o->n_tp; ti++)
    for (int tj = 0; tj < o->n_tp; tj++) {
      int r = o->tp[tj] / o->tp[ti];
      if (r < 2 || r * o->tp[ti] != o->tp[tj] || r > PROF_OVERHEAD_REPLICAS_MAX) continue;
      if (p->hw.sim.n_overhead == SIM_OVERHEAD_TABLES) return SC_OK;
      SC_TRY(overhead_at(p, o->tp[ti], r, err));
    }
  return SC_OK;
}
