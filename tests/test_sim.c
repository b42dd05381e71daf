// The simulated replica (engine/replica_sim.c) and the engine's sim backend: the real
// scheduler and KV cache, steps priced by the cost model, events released in virtual time.
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/hardware.h"
#include "engine/memplan.h"
#include "engine/model.h"
#include "engine/replica.h"

typedef struct simbed {
  hw_profile *hw;
  model_config m;
  uint64_t now;
  engine_config cfg;
} simbed;

static simbed *bed_new(const char *preset, const char *gpu, int tp, int pp, int kv_blocks) {
  simbed *b = calloc(1, sizeof *b);
  b->hw = calloc(1, sizeof *b->hw);
  sc_error err = {{0}};
  cr_assert_eq(hw_profile_load(gpu, b->hw, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(model_preset_load(preset, &b->m, &err), SC_OK, "%s", err.msg);
  engine_config c = engine_config_defaults();
  c.model = b->m;
  c.backend = "sim";
  c.tp = tp;
  c.pp = pp;
  c.kv_blocks = kv_blocks;
  c.clock = sc_clock_virtual(&b->now);
  c.sim = (engine_sim){.hw = &b->hw->sim,
                       .model = {.dim = b->m.dim, .n_layers = b->m.n_layers,
                                 .n_heads = b->m.n_heads, .n_kv_heads = b->m.n_kv_heads,
                                 .head_dim = b->m.head_dim, .ffn_dim = b->m.ffn_dim,
                                 .vocab = b->m.vocab_size,
                                 .tied_embeddings = b->m.tied_embeddings,
                                 .weight_dtype = SIM_BF16, .act_dtype = SIM_BF16},
                       .layout = {.tp = tp, .pp = pp, .threads = 1, .cluster_ranks = tp * pp},
                       .static_bytes = 1e9,
                       .kv_block_bytes = 1e6};
  b->cfg = c;
  return b;
}

static void bed_free(simbed *b) {
  free(b->hw);
  free(b);
}

typedef struct tally {
  int tokens[64];      // per key
  int last_index[64];  // per key
  uint64_t last_t[64]; // per key
  int finished[64];
  int failed;
  int steps;
  int preempted;
  uint64_t step_ns;
} tally;

static void pull(replica *r, tally *t) {
  replica_event ev[256];
  int n;
  while ((n = replica_poll(r, ev, 256)) > 0)
    for (int i = 0; i < n; i++) {
      const replica_event *e = &ev[i];
      switch (e->kind) {
      case REPLICA_EV_TOKEN:
        cr_assert_eq(e->index, t->tokens[e->key], "tokens of %llu arrive in order",
                     (unsigned long long)e->key);
        cr_assert_geq(e->t_ns, t->last_t[e->key], "token times never go back");
        t->last_t[e->key] = e->t_ns;
        t->tokens[e->key]++;
        break;
      case REPLICA_EV_FINISHED: t->finished[e->key]++; break;
      case REPLICA_EV_FAILED: t->failed++; break;
      case REPLICA_EV_STEP:
        t->steps++;
        t->preempted += e->step.n_preempted;
        t->step_ns += e->step.duration_ns;
        cr_assert_gt(e->step.duration_ns, 0);
        break;
      }
    }
}

// Drives r to idle the way the runner's sim loop does: jump to the next step end, advance.
static void drive(simbed *b, replica *r, tally *t) {
  for (int guard = 0; guard < 1000000; guard++) {
    uint64_t next = replica_sim_next_ns(r);
    if (next == UINT64_MAX) {
      pull(r, t);
      return;
    }
    cr_assert_geq(next, b->now, "the next event is never in the past");
    b->now = next;
    replica_sim_advance(r, b->now);
    pull(r, t);
  }
  cr_assert_fail("the replica never went idle");
}

static void submit(replica *r, uint64_t key, int n_prompt, int max_tokens) {
  int32_t *p = calloc((size_t)n_prompt, sizeof *p);
  for (int i = 0; i < n_prompt; i++) p[i] = (int32_t)((key * 31 + (uint64_t)i) % 1000);
  engine_request q = {.prompt = p, .n_prompt = n_prompt, .max_tokens = max_tokens};
  sc_error err = {{0}};
  cr_assert_eq(replica_submit(r, key, &q, &err), SC_OK, "%s", err.msg);
  free(p);
}

Test(sim, every_request_gets_its_tokens_in_virtual_time) {
  simbed *b = bed_new("llama3-8b", "h100-sxm", 1, 1, 4096);
  replica *r = NULL;
  sc_error err = {{0}};
  cr_assert_eq(replica_sim_new(&b->cfg, 0, &r, &err), SC_OK, "%s", err.msg);
  cr_assert(replica_is_sim(r));
  tally t = {0};
  for (uint64_t k = 0; k < 8; k++) submit(r, k, 100 + (int)k * 50, 10 + (int)k);
  drive(b, r, &t);
  for (int k = 0; k < 8; k++) {
    cr_expect_eq(t.tokens[k], 10 + k, "request %d: %d tokens", k, t.tokens[k]);
    cr_expect_eq(t.finished[k], 1);
  }
  cr_expect_eq(t.failed, 0);
  // The clock moved exactly by the steps' priced durations: one replica never overlaps itself.
  cr_expect_eq(b->now, t.step_ns, "virtual time %llu = sum of step durations %llu",
               (unsigned long long)b->now, (unsigned long long)t.step_ns);
  // An 8B model decodes a token in milliseconds on an H100, not microseconds or seconds.
  double per_step_ms = (double)t.step_ns / t.steps / 1e6;
  cr_expect(per_step_ms > 1 && per_step_ms < 100, "mean step %.3f ms", per_step_ms);
  replica_free(r);
  bed_free(b);
}

Test(sim, same_requests_give_the_same_timeline) {
  uint64_t ends[2];
  int steps[2];
  for (int run = 0; run < 2; run++) {
    simbed *b = bed_new("llama3-8b", "h100-sxm", 2, 1, 4096);
    replica *r = NULL;
    sc_error err = {{0}};
    cr_assert_eq(replica_sim_new(&b->cfg, 0, &r, &err), SC_OK, "%s", err.msg);
    tally t = {0};
    for (uint64_t k = 0; k < 16; k++) submit(r, k, 64 + (int)(k * 37 % 300), 20);
    drive(b, r, &t);
    ends[run] = b->now;
    steps[run] = t.steps;
    replica_free(r);
    bed_free(b);
  }
  cr_expect_eq(ends[0], ends[1]);
  cr_expect_eq(steps[0], steps[1]);
}

Test(sim, running_out_of_kv_blocks_preempts_and_everything_completes) {
  // 24 blocks of 16 tokens: 384 tokens for 8 requests of 40 + 40 tokens (80 each, 640 in all).
  simbed *b = bed_new("llama3-8b", "h100-sxm", 1, 1, 24);
  replica *r = NULL;
  sc_error err = {{0}};
  cr_assert_eq(replica_sim_new(&b->cfg, 0, &r, &err), SC_OK, "%s", err.msg);
  tally t = {0};
  for (uint64_t k = 0; k < 8; k++) submit(r, k, 40, 40);
  drive(b, r, &t);
  cr_expect_gt(t.preempted, 0, "the cache is too small for all of them at once");
  for (int k = 0; k < 8; k++) {
    cr_expect_eq(t.tokens[k], 40, "request %d: %d tokens", k, t.tokens[k]);
    cr_expect_eq(t.finished[k], 1);
  }
  engine_stats st;
  replica_stats(r, &st);
  cr_expect_eq(st.kv_used, 0, "every block is back");
  replica_free(r);
  bed_free(b);
}

Test(sim, cancel_frees_the_request_at_once) {
  simbed *b = bed_new("llama3-8b", "h100-sxm", 1, 1, 4096);
  replica *r = NULL;
  sc_error err = {{0}};
  cr_assert_eq(replica_sim_new(&b->cfg, 0, &r, &err), SC_OK, "%s", err.msg);
  tally t = {0};
  submit(r, 1, 100, 1000);
  submit(r, 2, 100, 5);
  replica_sim_advance(r, b->now); // first step in flight
  replica_cancel(r, 1);
  drive(b, r, &t);
  cr_expect_eq(t.finished[1], 1);
  cr_expect_lt(t.tokens[1], 5, "cancelled early: %d tokens", t.tokens[1]);
  cr_expect_eq(t.tokens[2], 5);
  engine_stats st;
  replica_stats(r, &st);
  cr_expect_eq(st.kv_used, 0);
  replica_free(r);
  bed_free(b);
}

Test(sim, a_request_larger_than_the_cache_fails_without_a_step) {
  simbed *b = bed_new("llama3-8b", "h100-sxm", 1, 1, 4);
  replica *r = NULL;
  sc_error err = {{0}};
  cr_assert_eq(replica_sim_new(&b->cfg, 0, &r, &err), SC_OK, "%s", err.msg);
  tally t = {0};
  submit(r, 3, 200, 10); // 210 tokens need 14 blocks of 16
  drive(b, r, &t);
  cr_expect_eq(t.failed, 1);
  cr_expect_eq(t.steps, 0);
  replica_free(r);
  bed_free(b);
}

Test(sim, pp_steps_report_a_bubble) {
  simbed *b = bed_new("llama3-8b", "h100-sxm", 1, 2, 4096);
  replica *r = NULL;
  sc_error err = {{0}};
  cr_assert_eq(replica_sim_new(&b->cfg, 0, &r, &err), SC_OK, "%s", err.msg);
  submit(r, 1, 50, 3);
  replica_sim_advance(r, b->now);
  replica_event ev[64];
  b->now = replica_sim_next_ns(r);
  replica_sim_advance(r, b->now);
  int n = replica_poll(r, ev, 64);
  bool saw = false;
  for (int i = 0; i < n; i++)
    if (ev[i].kind == REPLICA_EV_STEP) {
      saw = true;
      cr_expect_gt(ev[i].step.bubble_frac, 0.2, "one micro-batch over two stages idles them");
    }
  cr_expect(saw);
  replica_free(r);
  bed_free(b);
}

Test(sim, sim_backend_needs_a_device_and_kv_blocks) {
  simbed *b = bed_new("llama3-8b", "h100-sxm", 1, 1, 0);
  replica *r = NULL;
  sc_error err = {{0}};
  cr_expect_eq(replica_sim_new(&b->cfg, 0, &r, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "kv_blocks") != NULL, "%s", err.msg);
  cr_expect_null(r);
  b->cfg.kv_blocks = 16;
  b->cfg.sim.hw = NULL;
  cr_expect_eq(replica_sim_new(&b->cfg, 0, &r, &err), SC_INVALID);
  bed_free(b);
}
