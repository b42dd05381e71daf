// The schedulers of the engines the simulator predicts (kernels/knobs.h rows prefill_first,
// whole_prompts, decode_steps; engine/scheduler.c, engine/engine.c): each schedule, simulated,
// differs from the default as the engine's does (docs/calibration.md, "The schedulers").
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "engine/engine.h"
#include "kernels/clock.h"
#include "scenarios/deployment.h"
#include "scenarios/scenario.h"

// A simulated llama3-8b engine on one H100 with `limits` (a flow mapping's inside) and the
// engine block `engine` (two-space indented lines, "" for none) of the h100-sxm profile.
typedef struct sim_rig {
  scenario *s;
  engine *e;
  uint64_t now;
  int steps;
} sim_rig;

static void rig_open(sim_rig *r, const char *limits) {
  char text[2048];
  snprintf(text, sizeof text,
           "name: sched\nmode: sim\nmodel: {preset: llama3-8b}\n"
           "hardware: {profile: h100-sxm, gpus: 1}\ndeployments: [{tp: 1}]\n"
           "limits: {%s}\nworkload:\n  prompts: [{input: 8, output: 8}]\n"
           "  phases: [{fixed: {requests: 1}}]\n",
           limits);
  sc_error err = {{0}};
  memset(r, 0, sizeof *r);
  cr_assert_eq(scenario_parse(text, strlen(text), "sched.yaml", ".", &r->s, &err), SC_OK, "%s",
               err.msg);
  engine_config cfg;
  cr_assert_eq(scenario_engine_config(r->s, &r->s->deployments[0], &r->s->model.config,
                                      r->s->mp.weight_dtype, sc_clock_virtual(&r->now), &cfg, &err),
               SC_OK, "%s", err.msg);
  cr_assert_eq(engine_new(&cfg, &r->e, &err), SC_OK, "%s", err.msg);
}

static void rig_close(sim_rig *r) {
  engine_free(r->e);
  scenario_free(r->s);
}

static uint64_t submit(sim_rig *r, int prompt, int out) {
  static int32_t toks[4096];
  for (int i = 0; i < prompt; i++) toks[i] = 5 + (i * 7) % 1000;
  engine_request q = {.prompt = toks, .n_prompt = prompt, .max_tokens = out};
  uint64_t id;
  sc_error err = {{0}};
  cr_assert_eq(engine_submit(r->e, &q, &id, &err), SC_OK, "%s", err.msg);
  return id;
}

// One step; advances the virtual clock by its price. Returns the result (events valid until
// the next step).
static engine_step_result step(sim_rig *r) {
  engine_step_result res;
  sc_error err = {{0}};
  cr_assert_eq(engine_step(r->e, &res, &err), SC_OK, "%s", err.msg);
  r->now += res.info.duration_ns;
  r->steps++;
  return res;
}

static int tokens_of(const engine_step_result *res, uint64_t id) {
  int n = 0;
  for (int i = 0; i < res->n_events; i++)
    n += res->events[i].kind == ENGINE_EV_TOKEN && res->events[i].req_id == id;
  return n;
}

static int waiting(const sim_rig *r) {
  engine_stats st;
  engine_stats_get(r->e, &st);
  return st.queue_len;
}

// --- prefill first

// Four requests decode; a fifth arrives. Mixing (the default, vLLM V1, TensorRT-LLM) computes
// its prompt beside the four decodes in one step; prefill_first (vLLM V0 without chunked
// prefill, SGLang without mixed chunks) computes it alone, and the four decodes pause a step.
Test(schedulers, prefill_first_computes_a_new_prompt_alone_and_pauses_the_decodes) {
  for (int pf = 0; pf < 2; pf++) {
    sim_rig r;
    rig_open(&r, pf ? "prefill_first: true" : "prefill_first: false");
    uint64_t a[4];
    for (int i = 0; i < 4; i++) a[i] = submit(&r, 200, 20);
    engine_step_result res = step(&r); // the four prompts
    cr_expect_eq(res.info.prefill_tokens, 800);
    for (int i = 0; i < 3; i++) {
      res = step(&r);
      cr_expect_eq(res.info.decode_tokens, 4, "decoding");
      cr_expect_eq(res.info.prefill_tokens, 0);
    }
    uint64_t late = submit(&r, 300, 5);
    res = step(&r);
    cr_expect_eq(res.info.prefill_tokens, 300, "the new prompt is computed at once");
    cr_expect_eq(tokens_of(&res, late), 1);
    if (pf) {
      cr_expect_eq(res.info.decode_tokens, 0, "prefill first: no decode beside the prompt");
      for (int i = 0; i < 4; i++) cr_expect_eq(tokens_of(&res, a[i]), 0);
    } else {
      cr_expect_eq(res.info.decode_tokens, 4, "mixed: the decodes go on beside the prompt");
    }
    // every step after: decodes only, in both
    int mixed = 0;
    while (!engine_idle(r.e)) {
      res = step(&r);
      mixed += res.info.prefill_tokens > 0 && res.info.decode_tokens > 0;
    }
    cr_expect_eq(mixed, 0);
    rig_close(&r);
  }
}

// A burst of prompts larger than one step's budget: prefill first computes every prompt before
// the first decode (the whole burst's TTFT is prefill only); mixing decodes the first prompts'
// tokens while the later prompts are still being computed.
Test(schedulers, prefill_first_computes_a_burst_of_prompts_before_any_decode) {
  for (int pf = 0; pf < 2; pf++) {
    sim_rig r;
    rig_open(&r, pf ? "token_budget: 1024, prefill_chunk: 1024, whole_prompts: true, "
                      "prefill_first: true"
                    : "token_budget: 1024, prefill_chunk: 1024, whole_prompts: true");
    for (int i = 0; i < 8; i++) submit(&r, 500, 10);
    int decodes_before_last_prompt = 0, prompt_steps = 0;
    engine_step_result res;
    do {
      res = step(&r);
      if (res.info.prefill_tokens > 0) prompt_steps++;
      if (res.info.prefill_tokens > 0 && res.info.decode_tokens > 0) decodes_before_last_prompt++;
    } while (waiting(&r) > 0 || res.info.prefill_tokens > 0);
    if (pf) {
      cr_expect_eq(prompt_steps, 4, "two 500-token prompts a step");
      cr_expect_eq(decodes_before_last_prompt, 0);
    } else {
      cr_expect_gt(decodes_before_last_prompt, 0, "mixed: decodes beside the later prompts");
    }
    rig_close(&r);
  }
}

// --- whole prompts (TensorRT-LLM's in-flight batching without chunked context)

// TensorRT-LLM batches context and generation requests in one step (its in-flight batching:
// generation first, then whole prompts within what is left of max_num_tokens; its docs'
// scheduler example leaves a 5-token prompt for the next step when 2 tokens of the budget are
// left). With whole_prompts a prompt that does not fit the rest of the budget waits whole;
// without it the default scheduler cuts a chunk to fill the step.
Test(schedulers, whole_prompts_leave_a_prompt_that_does_not_fit_for_the_next_step) {
  for (int whole = 0; whole < 2; whole++) {
    sim_rig r;
    rig_open(&r, whole ? "token_budget: 1000, prefill_chunk: 1000, no_evict: true, "
                         "whole_prompts: true"
                       : "token_budget: 1000, prefill_chunk: 1000, no_evict: true");
    uint64_t a = submit(&r, 600, 4), b = submit(&r, 600, 4);
    engine_step_result res = step(&r);
    cr_expect_eq(tokens_of(&res, a), 1);
    if (whole) {
      cr_expect_eq(res.info.prefill_tokens, 600, "the second prompt waits whole");
      res = step(&r); // a's decode and b's whole prompt, in one step
      cr_expect_eq(res.info.prefill_tokens, 600);
      cr_expect_eq(res.info.decode_tokens, 1, "context and generation in one step");
      cr_expect_eq(tokens_of(&res, b), 1);
    } else {
      cr_expect_eq(res.info.prefill_tokens, 1000, "a chunk of the second fills the step");
      cr_expect_eq(tokens_of(&res, b), 0);
    }
    while (!engine_idle(r.e)) step(&r);
    rig_close(&r);
  }
}

// --- multi-step decoding

// vLLM's num_scheduler_steps = 8: after the prompts, one engine step decodes 8 tokens of each
// running request, its tokens all come out at its end, and it costs 8 decode steps less 7 of
// the host's part (the step overhead, step_s and seq_s); a request that arrives meanwhile waits
// for the 8 steps to end.
Test(schedulers, decode_steps_decode_n_tokens_a_plan_streamed_together_host_paid_once) {
  sim_rig one, multi;
  rig_open(&one, "decode_steps: 1");
  rig_open(&multi, "decode_steps: 8");
  uint64_t ids[2][3];
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < 3; i++) ids[k][i] = submit(k ? &multi : &one, 100 + 50 * i, 30);
  step(&one);
  step(&multi); // the prompts: one step either way
  cr_expect_eq(one.now, multi.now);
  uint64_t t0 = one.now, host = 0;
  for (int k = 0; k < 8; k++) {
    engine_step_result res = step(&one);
    cr_expect_eq(res.info.decode_tokens, 3);
    host = res.info.host_ns;
  }
  cr_assert_gt(host, 0, "the profile's step overhead is host time");
  engine_step_result res = step(&multi);
  cr_expect_eq(res.info.decode_tokens, 24, "8 steps of the 3 sequences in one plan");
  for (int i = 0; i < 3; i++) cr_expect_eq(tokens_of(&res, ids[1][i]), 8, "8 tokens at once");
  double want = (double)(one.now - t0) - 7.0 * (double)host;
  cr_expect(res.info.duration_ns > want - 8 && res.info.duration_ns < want + 8,
            "priced %llu ns, 8 steps less 7 host parts %.0f",
            (unsigned long long)res.info.duration_ns, want);
  // a request arriving now waits for the next plan, then runs alone as a prompt
  uint64_t late = submit(&multi, 64, 3);
  res = step(&multi);
  cr_expect_eq(tokens_of(&res, late), 1);
  cr_expect_gt(res.info.prefill_tokens, 0);
  // the sequences end with the same tokens in both
  int total[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    sim_rig *r = k ? &multi : &one;
    while (!engine_idle(r->e)) step(r);
    engine_stats st;
    engine_stats_get(r->e, &st);
    total[k] = (int)st.generated_tokens;
  }
  cr_expect_eq(total[0] + 3, total[1], "3 more tokens: the late request's");
  cr_expect_lt(multi.steps, one.steps, "fewer plans: %d against %d", multi.steps, one.steps);
  rig_close(&one);
  rig_close(&multi);
}
