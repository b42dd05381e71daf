// Engine tests on llama-tiny: sharding exactness over every tp x pp layout, batch
// invariance, chunked prefill, KV accounting under cancel and preemption, seeded sampling.
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config/presets.h"
#include "engine/engine.h"
#include "tests/helpers.h"

#define MAX_REQ 32
#define MAX_TOK 64

// --- harness: run requests to completion, keep tokens and (optionally) logits

typedef struct run_log {
  int vocab;
  float *logits[MAX_REQ]; // (MAX_TOK, vocab) per request, when recorded
  int32_t tokens[MAX_REQ][MAX_TOK];
  int n_tokens[MAX_REQ];
  engine_finish_reason reason[MAX_REQ];
  uint64_t ids[MAX_REQ];
  int n_req;
  int max_kv_used;
  uint64_t preemptions;
  uint64_t prefix_hits; // tokens prefix caching spared
} run_log;

static int req_index(const run_log *L, uint64_t id) {
  for (int i = 0; i < L->n_req; i++)
    if (L->ids[i] == id) return i;
  return -1;
}

static void record_logits(void *ud, uint64_t id, int index, const float *logits, int vocab) {
  run_log *L = ud;
  int i = req_index(L, id);
  cr_assert(i >= 0);
  if (L->logits[i] && index < MAX_TOK) memcpy(L->logits[i] + (size_t)index * vocab, logits, sizeof(float) * (size_t)vocab);
}

static engine_config tiny_config(int tp, int pp) {
  engine_config c = sc_test_engine_config("llama-tiny");
  c.tp = tp;
  c.pp = pp;
  c.weights_seed = 1;
  c.kv_blocks = 256;
  c.max_running = 32;
  c.token_budget = 512;
  c.prefill_chunk = 512;
  return c;
}

// Submits every prompt, steps until idle, checks KV returns to zero.
static void run_requests(engine_config cfg, int n_req, int32_t (*prompts)[200], const int *lens,
                         int max_tokens, const sampling_params *sp, run_log *L, bool want_logits) {
  cfg.on_logits = want_logits ? record_logits : NULL; // none: greedy picks on the devices
  cfg.on_logits_ud = L;
  L->vocab = cfg.model.vocab_size;
  L->n_req = n_req;
  engine *e = NULL;
  sc_error err = {{0}};
  cr_assert_eq(engine_new(&cfg, &e, &err), SC_OK, "engine_new: %s", err.msg);
  for (int i = 0; i < n_req; i++) {
    if (want_logits) L->logits[i] = calloc((size_t)MAX_TOK * cfg.model.vocab_size, sizeof(float));
    engine_request r = {.prompt = prompts[i], .n_prompt = lens[i], .max_tokens = max_tokens};
    if (sp) r.sampling = *sp;
    cr_assert_eq(engine_submit(e, &r, &L->ids[i], &err), SC_OK, "submit: %s", err.msg);
  }
  int guard = 0;
  while (!engine_idle(e)) {
    engine_step_result res;
    cr_assert_eq(engine_step(e, &res, &err), SC_OK, "step: %s", err.msg);
    if (res.info.kv_used > L->max_kv_used) L->max_kv_used = res.info.kv_used;
    for (int k = 0; k < res.n_events; k++) {
      const engine_event *ev = &res.events[k];
      int i = req_index(L, ev->req_id);
      cr_assert(i >= 0);
      if (ev->kind == ENGINE_EV_TOKEN) {
        cr_assert_eq(ev->index, L->n_tokens[i], "tokens arrive in order");
        L->tokens[i][L->n_tokens[i]++] = ev->token;
      } else {
        L->reason[i] = ev->reason;
      }
    }
    cr_assert(++guard < 100000, "engine did not finish");
  }
  engine_stats st;
  engine_stats_get(e, &st);
  cr_assert_eq(st.kv_used, 0, "every block returns once all requests finished");
  L->preemptions = st.preemptions;
  L->prefix_hits = st.prefix_hit_tokens;
  engine_free(e);
}

static void free_log(run_log *L) {
  for (int i = 0; i < MAX_REQ; i++) free(L->logits[i]);
}

// --- exactness of sharding

Test(sharding, every_tp_pp_layout_matches_tp1_pp1_greedy_32_tokens, .timeout = 600) {
  static int32_t prompts[1][200];
  int lens[1] = {12};
  sc_test_prompt(prompts[0], lens[0], 0);
  static run_log ref;
  memset(&ref, 0, sizeof ref);
  run_requests(tiny_config(1, 1), 1, prompts, lens, 32, NULL, &ref, true);
  cr_assert_eq(ref.n_tokens[0], 32);
  const int tps[] = {1, 2, 4, 8}, pps[] = {1, 2, 4, 8};
  for (int a = 0; a < 4; a++)
    for (int b = 0; b < 4; b++) {
      int tp = tps[a], pp = pps[b];
      if (tp * pp > 8 || tp * pp == 1) continue;
      static run_log L;
      memset(&L, 0, sizeof L);
      run_requests(tiny_config(tp, pp), 1, prompts, lens, 32, NULL, &L, true);
      double max_rel = 0;
      for (int t = 0; t < 32; t++) {
        const float *x = ref.logits[0] + (size_t)t * ref.vocab, *y = L.logits[0] + (size_t)t * ref.vocab;
        double scale = 0, diff = 0;
        for (int v = 0; v < ref.vocab; v++) {
          scale = fmax(scale, fabs(x[v]));
          diff = fmax(diff, fabs((double)x[v] - y[v]));
        }
        max_rel = fmax(max_rel, diff / scale);
      }
      cr_log_info("tp=%d pp=%d: max relative logit error %.3g over 32 steps", tp, pp, max_rel);
      cr_expect(max_rel < 1e-4, "tp=%d pp=%d: max relative logit error %g", tp, pp, max_rel);
      cr_expect_arr_eq(L.tokens[0], ref.tokens[0], sizeof(int32_t) * 32,
                       "tp=%d pp=%d: greedy tokens differ from tp=1 pp=1", tp, pp);
      free_log(&L);
    }
  free_log(&ref);
}

Test(sharding, greedy_picks_on_the_devices_give_the_host_sampler_s_tokens, .timeout = 600) {
  static int32_t prompts[4][200];
  int lens[4] = {12, 1, 40, 7};
  for (int i = 0; i < 4; i++) sc_test_prompt(prompts[i], lens[i], i);
  const int layouts[][2] = {{1, 1}, {2, 1}, {4, 1}, {1, 2}, {2, 2}};
  for (int a = 0; a < 5; a++) {
    int tp = layouts[a][0], pp = layouts[a][1];
    static run_log host, dev;
    memset(&host, 0, sizeof host);
    memset(&dev, 0, sizeof dev);
    run_requests(tiny_config(tp, pp), 4, prompts, lens, 24, NULL, &host, true); // logits watched
    run_requests(tiny_config(tp, pp), 4, prompts, lens, 24, NULL, &dev, false); // devices pick
    for (int i = 0; i < 4; i++) {
      cr_expect_eq(dev.n_tokens[i], host.n_tokens[i], "tp=%d pp=%d request %d", tp, pp, i);
      cr_expect_arr_eq(dev.tokens[i], host.tokens[i], sizeof(int32_t) * (size_t)host.n_tokens[i],
                       "tp=%d pp=%d request %d: the devices' greedy picks differ", tp, pp, i);
    }
    free_log(&host);
    free_log(&dev);
  }
}

// --- batch invariance and chunked prefill

Test(batching, request_alone_and_inside_a_batch_of_16_others_give_same_greedy_tokens, .timeout = 300) {
  static int32_t prompts[17][200];
  int lens[17];
  for (int i = 0; i < 17; i++) {
    lens[i] = 5 + (i * 13) % 60;
    sc_test_prompt(prompts[i], lens[i], i);
  }
  static run_log alone, batch;
  memset(&alone, 0, sizeof alone);
  memset(&batch, 0, sizeof batch);
  // Request 8 alone, then all 17 at once.
  run_requests(tiny_config(1, 1), 1, &prompts[8], &lens[8], 24, NULL, &alone, false);
  run_requests(tiny_config(1, 1), 17, prompts, lens, 24, NULL, &batch, false);
  cr_assert_arr_eq(batch.tokens[8], alone.tokens[0], sizeof(int32_t) * 24);
  // And the same through tp=2 x pp=2 (micro-batches split the batch across stages).
  static run_log sharded;
  memset(&sharded, 0, sizeof sharded);
  run_requests(tiny_config(2, 2), 17, prompts, lens, 24, NULL, &sharded, false);
  cr_assert_arr_eq(sharded.tokens[8], alone.tokens[0], sizeof(int32_t) * 24);
}

Test(batching, chunked_prefill_gives_same_tokens_as_one_shot_prefill, .timeout = 300) {
  static int32_t prompts[3][200];
  int lens[3] = {150, 61, 9};
  for (int i = 0; i < 3; i++) sc_test_prompt(prompts[i], lens[i], 40 + i);
  static run_log one, chunked;
  memset(&one, 0, sizeof one);
  memset(&chunked, 0, sizeof chunked);
  run_requests(tiny_config(1, 1), 3, prompts, lens, 16, NULL, &one, false);
  engine_config c = tiny_config(1, 1);
  c.prefill_chunk = 7;
  c.token_budget = 20;
  run_requests(c, 3, prompts, lens, 16, NULL, &chunked, false);
  for (int i = 0; i < 3; i++)
    cr_assert_arr_eq(chunked.tokens[i], one.tokens[i], sizeof(int32_t) * 16, "request %d", i);
}

// --- KV accounting

Test(kv, blocks_return_to_zero_after_finish_and_cancel_in_every_stage, .timeout = 120) {
  engine_config c = tiny_config(2, 1);
  c.prefill_chunk = 8;
  c.token_budget = 24;
  engine *e = NULL;
  sc_error err = {{0}};
  cr_assert_eq(engine_new(&c, &e, &err), SC_OK, "%s", err.msg);
  static int32_t p[6][200];
  uint64_t id[6];
  for (int i = 0; i < 6; i++) {
    sc_test_prompt(p[i], 40, i);
    engine_request r = {.prompt = p[i], .n_prompt = 40, .max_tokens = 30};
    cr_assert_eq(engine_submit(e, &r, &id[i], &err), SC_OK);
  }
  engine_step_result res;
  engine_stats st;
  cr_assert_eq(engine_step(e, &res, &err), SC_OK); // 3 sequences mid-prefill, 3 queued
  engine_stats_get(e, &st);
  cr_assert_gt(st.kv_used, 0);
  cr_assert_gt(st.queue_len, 0);
  int used_before = st.kv_used;
  cr_assert_eq(engine_cancel(e, id[0]), SC_OK); // mid-prefill
  engine_stats_get(e, &st);
  cr_assert_lt(st.kv_used, used_before, "cancel frees blocks at once");
  cr_assert_eq(engine_cancel(e, id[5]), SC_OK); // still queued
  cr_assert_eq(engine_cancel(e, 9999), SC_INVALID);
  bool cancelled_decoding = false;
  int cancel_events = 0;
  while (!engine_idle(e)) {
    cr_assert_eq(engine_step(e, &res, &err), SC_OK, "%s", err.msg);
    for (int k = 0; k < res.n_events; k++) {
      const engine_event *ev = &res.events[k];
      if (ev->kind == ENGINE_EV_FINISHED && ev->reason == FINISH_CANCELLED) cancel_events++;
      if (ev->kind == ENGINE_EV_TOKEN && ev->req_id == id[1] && ev->index == 3 && !cancelled_decoding) {
        cr_assert_eq(engine_cancel(e, id[1]), SC_OK); // mid-decode
        cancelled_decoding = true;
        break; // the events buffer is not ours after a cancel
      }
    }
  }
  cr_assert(cancelled_decoding);
  cr_assert_eq(cancel_events, 3, "one FINISHED(cancelled) event per cancel");
  engine_stats_get(e, &st);
  cr_assert_eq(st.kv_used, 0);
  cr_assert_eq(st.running + st.queue_len, 0);
  engine_free(e);
}

Test(kv, preemption_under_a_tiny_kv_budget_completes_every_request_with_same_tokens, .timeout = 300) {
  static int32_t prompts[8][200];
  int lens[8];
  for (int i = 0; i < 8; i++) {
    lens[i] = 20 + 7 * i;
    sc_test_prompt(prompts[i], lens[i], 70 + i);
  }
  static run_log ample, tight;
  memset(&ample, 0, sizeof ample);
  memset(&tight, 0, sizeof tight);
  run_requests(tiny_config(1, 2), 8, prompts, lens, 40, NULL, &ample, false);
  cr_assert_eq(ample.preemptions, 0);
  engine_config c = tiny_config(1, 2);
  c.kv_blocks = 12; // 192 tokens of KV for 8 requests of up to 109 tokens each
  run_requests(c, 8, prompts, lens, 40, NULL, &tight, false);
  cr_log_info("preemptions under 12 blocks: %llu", (unsigned long long)tight.preemptions);
  cr_assert_gt(tight.preemptions, 0, "the budget must force preemption");
  cr_assert_leq(tight.max_kv_used, 12);
  for (int i = 0; i < 8; i++) {
    cr_assert_eq(tight.n_tokens[i], 40);
    cr_assert_eq(tight.reason[i], FINISH_LENGTH);
    cr_assert_arr_eq(tight.tokens[i], ample.tokens[i], sizeof(int32_t) * 40, "request %d", i);
  }
}

// Prefix caching on the real engine: prompts sharing a 48-token prefix (3 blocks) compute it
// once, and under a tiny budget the preempted requests find their blocks again. Every request
// gets the tokens it gets without caching (each cached block holds exactly the KV a recompute
// would), and every block is back at the end.
Test(kv, prefix_caching_shares_prompts_and_preempted_blocks_with_the_same_tokens, .timeout = 300) {
  static int32_t prompts[8][200];
  int lens[8];
  for (int i = 0; i < 8; i++) {
    lens[i] = 48 + 5 + 3 * i;
    sc_test_prompt(prompts[i], lens[i], 90 + i);
    if (i > 0) memcpy(prompts[i], prompts[0], 48 * sizeof(int32_t));
  }
  static run_log plain, shared, tight;
  memset(&plain, 0, sizeof plain);
  memset(&shared, 0, sizeof shared);
  memset(&tight, 0, sizeof tight);
  engine_config c = tiny_config(2, 1);
  c.block_size = 16;
  c.max_running = 4; // the first four compute the prefix; the rest find it
  run_requests(c, 8, prompts, lens, 40, NULL, &plain, false);
  cr_assert_eq(plain.prefix_hits, 0);
  c.prefix_caching = true;
  run_requests(c, 8, prompts, lens, 40, NULL, &shared, false);
  cr_assert_geq(shared.prefix_hits, 4 * 48, "hit tokens %llu",
                (unsigned long long)shared.prefix_hits);
  c.max_running = 32;
  c.kv_blocks = 14;
  run_requests(c, 8, prompts, lens, 40, NULL, &tight, false);
  cr_assert_gt(tight.preemptions, 0, "the budget must force preemption");
  cr_assert_gt(tight.prefix_hits, shared.prefix_hits, "preempted requests found blocks again");
  for (int i = 0; i < 8; i++) {
    cr_assert_eq(shared.n_tokens[i], 40);
    cr_assert_eq(tight.n_tokens[i], 40);
    cr_assert_arr_eq(shared.tokens[i], plain.tokens[i], sizeof(int32_t) * 40, "request %d", i);
    cr_assert_arr_eq(tight.tokens[i], plain.tokens[i], sizeof(int32_t) * 40, "request %d", i);
  }
}

// --- sampling and requests

Test(sampling, same_seed_gives_same_tokens_and_another_seed_differs, .timeout = 120) {
  static int32_t prompts[1][200];
  int lens[1] = {10};
  sc_test_prompt(prompts[0], 10, 3);
  sampling_params sp = {.temperature = 1.0f, .top_p = 0.95f, .seed = 42};
  static run_log a, b, d;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  memset(&d, 0, sizeof d);
  run_requests(tiny_config(1, 1), 1, prompts, lens, 32, &sp, &a, false);
  run_requests(tiny_config(2, 1), 1, prompts, lens, 32, &sp, &b, false);
  sp.seed = 43;
  run_requests(tiny_config(1, 1), 1, prompts, lens, 32, &sp, &d, false);
  cr_assert_arr_eq(a.tokens[0], b.tokens[0], sizeof(int32_t) * 32);
  cr_assert(memcmp(a.tokens[0], d.tokens[0], sizeof(int32_t) * 32) != 0);
}

Test(requests, submit_refuses_bad_requests_with_a_reason) {
  engine_config c = tiny_config(1, 1);
  c.kv_blocks = 4;
  engine *e = NULL;
  sc_error err = {{0}};
  cr_assert_eq(engine_new(&c, &e, &err), SC_OK, "%s", err.msg);
  static int32_t p[600];
  sc_test_prompt(p, 600, 0);
  uint64_t id;
  engine_request r = {.prompt = p, .n_prompt = 512, .max_tokens = 4};
  cr_assert_eq(engine_submit(e, &r, &id, &err), SC_INVALID);
  cr_assert(strstr(err.msg, "context"), "%s", err.msg);
  r.n_prompt = 100; // 104 tokens need 7 blocks of 16; the cache has 4
  cr_assert_eq(engine_submit(e, &r, &id, &err), SC_INVALID);
  cr_assert(strstr(err.msg, "blocks"), "%s", err.msg);
  p[0] = 100000;
  r.n_prompt = 10;
  cr_assert_eq(engine_submit(e, &r, &id, &err), SC_INVALID);
  cr_assert(strstr(err.msg, "vocabulary"), "%s", err.msg);
  r.n_prompt = 0;
  cr_assert_eq(engine_submit(e, &r, &id, &err), SC_INVALID);
  engine_free(e);
}

Test(layout, invalid_layouts_are_refused_with_the_valid_alternatives) {
  engine_config c = tiny_config(3, 1);
  engine *e = NULL;
  sc_error err = {{0}};
  cr_assert_eq(engine_new(&c, &e, &err), SC_INVALID);
  cr_assert_null(e);
  cr_assert(strstr(err.msg, "tp=3") && strstr(err.msg, "valid tp: 1, 2, 4, 8"), "%s", err.msg);
  c = tiny_config(1, 9);
  cr_assert_eq(engine_new(&c, &e, &err), SC_INVALID);
  cr_assert(strstr(err.msg, "pp=9"), "%s", err.msg);
}
