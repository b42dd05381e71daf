// Engine calibration (docs/calibration.md): the engine block of a profile, the trace workload,
// `shardcheck import` of published traces, and `shardcheck calibrate`'s fit.
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/hardware.h"
#include "config/presets.h"
#include "helpers.h"
#include "kernels/embedded.h"
#include "kernels/sim/sim_cost.h"
#include "runner/calibrate.h"
#include "scenarios/scenario.h"

// The shipped h100-sxm profile's text (embedded in the binary).
static const char *h100_text(void) {
  const sc_embedded_file *f = sc_embedded_find("scenarios/hardware/h100-sxm.yaml");
  cr_assert(f);
  return f->data;
}

// --- the engine block

static sim_model llama3_8b(void) {
  model_config c;
  sc_error err = {{0}};
  cr_assert_eq(model_preset_load("llama3-8b", &c, &err), SC_OK, "%s", err.msg);
  return (sim_model){.dim = c.dim, .n_layers = c.n_layers, .n_heads = c.n_heads,
                     .n_kv_heads = c.n_kv_heads, .head_dim = c.head_dim, .ffn_dim = c.ffn_dim,
                     .vocab = c.vocab_size, .weight_dtype = SIM_BF16, .act_dtype = SIM_BF16};
}

static double price(const sim_hw *hw, const sim_seq *s, int n) {
  sim_model m = llama3_8b();
  sim_layout l = {.tp = 1, .pp = 1, .threads = 1, .cluster_ranks = 1};
  sim_step_cost c;
  cr_assert_eq(sim_step_price(hw, &m, &l, s, n, NULL, 1, &c), 0);
  return c.total_s;
}

Test(calibrate, default_engine_block_prices_a_step_exactly_as_none) {
  hw_profile p;
  sc_error err = {{0}};
  cr_assert_eq(hw_profile_load("h100-sxm", &p, &err), SC_OK, "%s", err.msg);
  sim_hw zero = p.sim;
  memset(&zero.engine, 0, sizeof zero.engine);
  sim_seq s[3] = {{.start = 0, .n = 512, .logits = true}, {.start = 900, .n = 1, .logits = true},
                  {.start = 40, .n = 1, .logits = true}};
  cr_expect_eq(price(&p.sim, s, 3), price(&zero, s, 3)); // bit for bit
}

Test(calibrate, engine_block_adds_host_time_and_divides_device_time_by_token_weight) {
  hw_profile p;
  sc_error err = {{0}};
  cr_assert_eq(hw_profile_load("h100-sxm", &p, &err), SC_OK, "%s", err.msg);
  sim_seq dec[4], pre = {.start = 0, .n = 1024, .logits = true};
  for (int i = 0; i < 4; i++) dec[i] = (sim_seq){.start = 100, .n = 1, .logits = true};
  double d0 = price(&p.sim, dec, 4), p0 = price(&p.sim, &pre, 1);
  double ov = p.sim.step_overhead_s;
  p.sim.engine.step_s = 1e-3;
  p.sim.engine.seq_s = 1e-5;
  cr_expect_float_eq(price(&p.sim, dec, 4), d0 + 1e-3 + 4e-5, 1e-12);
  p.sim.engine.step_s = p.sim.engine.seq_s = 0;
  p.sim.engine.decode_eff = 0.5; // a decode-only step: its device time doubles
  cr_expect_float_eq(price(&p.sim, dec, 4), 2 * (d0 - ov) + ov, 1e-12);
  cr_expect_float_eq(price(&p.sim, &pre, 1), p0, 1e-15); // prefill untouched
  p.sim.engine.prefill_eff = 0.25;
  cr_expect_float_eq(price(&p.sim, &pre, 1), 4 * (p0 - ov) + ov, 1e-12);
}

// A step of llama3-8b at tp 2: a 512-token prompt and two decodes, all three sampled.
static sim_step_cost tp2_step(const sim_hw *hw) {
  sim_model m = llama3_8b();
  sim_layout l = {.tp = 2, .pp = 1, .threads = 1, .cluster_ranks = 2};
  sim_seq s[3] = {{.start = 0, .n = 512, .logits = true},
                  {.start = 300, .n = 1, .logits = true},
                  {.start = 900, .n = 1, .logits = true}};
  sim_step_cost c;
  cr_assert_eq(sim_step_price(hw, &m, &l, s, 3, NULL, 1, &c), 0);
  return c;
}

Test(calibrate, engine_block_scales_the_kernels_of_a_tp_step_not_its_collectives) {
  hw_profile p;
  sc_error err = {{0}};
  cr_assert_eq(hw_profile_load("h100-sxm", &p, &err), SC_OK, "%s", err.msg);
  sim_step_cost c0 = tp2_step(&p.sim);
  cr_assert_gt(c0.comm_s, 0);
  p.sim.engine.prefill_eff = 0.5;
  p.sim.engine.decode_eff = 0.8;
  sim_step_cost c1 = tp2_step(&p.sim);
  double f = (512 / 0.5 + 2 / 0.8) / 514; // the token-weighted mean of 1 / eff
  double ov = p.sim.step_overhead_s;
  cr_expect_float_eq(c1.comm_s, c0.comm_s, 1e-15); // the link's price is its own
  cr_expect_float_eq(c1.compute_s, f * c0.compute_s, 1e-12);
  cr_expect_float_eq(c1.total_s, f * (c0.total_s - c0.comm_s - ov) + c0.comm_s + ov, 1e-12);
}

Test(calibrate, logits_dtype_sets_the_bytes_of_a_tp_steps_logits_all_gather) {
  hw_profile p;
  sc_error err = {{0}};
  cr_assert_eq(hw_profile_load("h100-sxm", &p, &err), SC_OK, "%s", err.msg);
  sim_step_cost f32 = tp2_step(&p.sim);
  p.sim.engine.logits_bytes = 2;
  sim_step_cost bf16 = tp2_step(&p.sim);
  double rows = 3.0 * llama3_8b().vocab; // three sampled rows of the whole vocabulary
  double saved = sim_allgather_s(&p.sim, 0, 2, rows * 4) - sim_allgather_s(&p.sim, 0, 2, rows * 2);
  cr_assert_gt(saved, 0);
  cr_expect_float_eq(f32.comm_s - bf16.comm_s, saved, 1e-12);
  cr_expect_float_eq(f32.compute_s, bf16.compute_s, 1e-15); // the kernels are their own
  p.sim.engine.logits_bytes = 4;
  cr_expect_float_eq(tp2_step(&p.sim).total_s, f32.total_s, 1e-15); // 4: as unset
}

// A step of one 64-token prompt chunk and four decodes at 1,000 tokens of context, on
// llama3-8b at tp 1 (attention shape 32 / 8 / 128 per rank).
static double mixed_step(const sim_hw *hw) {
  sim_seq s[5] = {{.start = 0, .n = 64, .logits = true}};
  for (int i = 1; i < 5; i++) s[i] = (sim_seq){.start = 999, .n = 1, .logits = true};
  return price(hw, s, 5);
}

Test(calibrate, mixed_attn_prices_the_decodes_of_a_batch_with_a_prompt_at_their_factor) {
  hw_profile p;
  sc_error err = {{0}};
  cr_assert_eq(hw_profile_load("h100-sxm", &p, &err), SC_OK, "%s", err.msg);
  sim_model m = llama3_8b();
  sim_layout l = {.tp = 1, .pp = 1, .threads = 1, .cluster_ranks = 1};
  sim_seq dec[4];
  for (int i = 0; i < 4; i++) dec[i] = (sim_seq){.start = 999, .n = 1, .logits = true};
  // the four decodes' attention in one layer, without its launch
  double td = sim_attention_s(&p.sim, &l, dec, 4, m.n_heads, m.n_kv_heads, m.head_dim, SIM_BF16) -
              p.sim.launch_s;
  cr_assert_gt(td, 0);
  double plain = mixed_step(&p.sim), decode_only = price(&p.sim, dec, 4);
  // entries for 2 and 8 decodes, flat in the context: 4 decodes is half-way in log(count)
  p.sim.engine.n_mixed_attn = 3;
  p.sim.engine.mixed_attn[0] = (sim_mixed_attn){32, 8, 128, 2, {2, {100, 10000}, {1.5, 1.5}}};
  p.sim.engine.mixed_attn[1] = (sim_mixed_attn){32, 8, 128, 8, {2, {100, 10000}, {3, 3}}};
  p.sim.engine.mixed_attn[2] = (sim_mixed_attn){64, 8, 128, 4, {1, {100}, {9}}}; // other shape
  cr_expect_float_eq(mixed_step(&p.sim), plain + m.n_layers * td * (2.25 - 1), 1e-12);
  cr_expect_float_eq(price(&p.sim, dec, 4), decode_only, 1e-15); // no prompt: untouched
  // one entry, rising with the context: at 1,000 tokens, half-way from 500 to 2,000 in log
  p.sim.engine.n_mixed_attn = 1;
  p.sim.engine.mixed_attn[0] = (sim_mixed_attn){32, 8, 128, 16, {2, {500, 2000}, {1, 3}}};
  cr_expect_float_eq(mixed_step(&p.sim), plain + m.n_layers * td * (2 - 1), 1e-12);
  // no entry of this shape: untouched
  p.sim.engine.mixed_attn[0].kv_heads = 4;
  cr_expect_float_eq(mixed_step(&p.sim), plain, 1e-15);
}

Test(calibrate, profile_engine_block_loads_and_bad_values_name_the_key) {
  const char *base = h100_text();
  char text[16384];
  snprintf(text, sizeof text, "%sengine:\n  step_s: 0.003\n  seq_s: 2e-5\n  prefill_eff: 0.7\n"
           "  decode_eff: 0.8\n  max_running: 64\n  token_budget: 2048\n  chunked_prefill: false\n"
           "  block_size: 32\n  no_evict: true\n  reserve_full_isl: true\n  kv_watermark: 0.01\n"
           "  num_gpu_blocks: 2588\n  logits_dtype: bf16\n"
           "  mixed_attn:\n    - {heads: 32, kv_heads: 8, head_dim: 128, "
           "decodes: 16, factor: [[256, 1.2], [4096, 1.9]]}\n", base);
  const char *path = sc_test_write_tmp("calib-prof", "p.yaml", text);
  hw_profile p;
  sc_error err = {{0}};
  cr_assert_eq(hw_profile_load(path, &p, &err), SC_OK, "%s", err.msg);
  cr_expect_float_eq(p.sim.engine.step_s, 0.003, 1e-15);
  cr_expect_float_eq(p.sim.engine.decode_eff, 0.8, 1e-15);
  cr_expect_eq(p.sim.engine.max_running, 64);
  cr_expect_eq(p.sim.engine.chunked_prefill, -1);
  cr_expect_eq(p.sim.engine.block_size, 32);
  cr_expect_eq(p.sim.engine.no_evict, 1);
  cr_expect_eq(p.sim.engine.reserve_full_isl, 1);
  cr_expect_float_eq(p.sim.engine.kv_watermark, 0.01, 1e-15);
  cr_expect_eq(p.sim.engine.num_gpu_blocks, 2588);
  cr_expect_eq(p.sim.engine.logits_bytes, 2);
  cr_expect_eq(p.sim.engine.n_mixed_attn, 1);
  cr_expect_eq(p.sim.engine.mixed_attn[0].decodes, 16);
  cr_expect_eq(p.sim.engine.mixed_attn[0].factor.n, 2);
  cr_expect_float_eq(p.sim.engine.mixed_attn[0].factor.y[1], 1.9, 1e-15);
  // the engine's knobs replace the scenario's limits
  char sc[1024];
  snprintf(sc, sizeof sc,
           "name: k\nmode: sim\nmodel: {preset: llama3-8b}\nhardware: {profile: %s, gpus: 1}\n"
           "deployments: [{tp: 1}]\nlimits: {max_running: 8, no_evict: false}\nworkload:\n"
           "  prompts: [{input: 10, output: 5}]\n  phases: [{fixed: {requests: 1}}]\n",
           path);
  scenario *s = NULL;
  cr_assert_eq(scenario_parse(sc, strlen(sc), "k.yaml", ".", &s, &err), SC_OK, "%s", err.msg);
  cr_expect_eq(s->limits.max_running, 64);
  cr_expect(s->limits.no_evict);
  cr_expect(s->limits.reserve_full_isl);
  cr_expect_float_eq(s->limits.kv_watermark, 0.01, 1e-15);
  cr_expect_eq(s->limits.num_gpu_blocks_override, 2588);
  scenario_free(s);
  snprintf(text, sizeof text, "%sengine:\n  prefill_eff: 0\n", base);
  path = sc_test_write_tmp("calib-prof", "bad.yaml", text);
  cr_expect_eq(hw_profile_load(path, &p, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "prefill_eff"), "%s", err.msg);
  cr_expect(strstr(err.msg, "bad.yaml:"), "%s", err.msg);
  snprintf(text, sizeof text, "%sengine:\n  mixed_attn:\n    - {heads: 32, kv_heads: 8, "
           "head_dim: 128, decodes: 4, factor: [[256, 0.5]]}\n", base);
  path = sc_test_write_tmp("calib-prof", "bad-mixed.yaml", text);
  cr_expect_eq(hw_profile_load(path, &p, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "bad-mixed.yaml:") && strstr(err.msg, "'factor'"), "%s", err.msg);
  snprintf(text, sizeof text, "%sengine:\n  kv_watermark: 0.9\n", base);
  path = sc_test_write_tmp("calib-prof", "bad2.yaml", text);
  cr_expect_eq(hw_profile_load(path, &p, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "kv_watermark"), "%s", err.msg);
  snprintf(text, sizeof text, "%sengine:\n  logits_dtype: fp8\n", base);
  path = sc_test_write_tmp("calib-prof", "bad3.yaml", text);
  cr_expect_eq(hw_profile_load(path, &p, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "bad3.yaml:") && strstr(err.msg, "logits_dtype"), "%s", err.msg);
}

// --- the trace workload

static const char *trace_text =
    "{\"arrival_s\": 0, \"prompt_tokens\": 40, \"output_tokens\": 6}\n"
    "{\"arrival_s\": 0.05, \"prompt_tokens\": 12, \"output_tokens\": 9}\n"
    "\n"
    "{\"arrival_s\": 0.123456789, \"prompt_tokens\": 77, \"output_tokens\": 3}\n"
    "{\"arrival_s\": 0.3, \"prompt_tokens\": 5, \"output_tokens\": 12}\n"
    "{\"arrival_s\": 0.3, \"prompt_tokens\": 30, \"output_tokens\": 4}\n";
static const long long trace_ns[] = {0, 50000000, 123456789, 300000000, 300000000};
static const int trace_in[] = {40, 12, 77, 5, 30}, trace_out[] = {6, 9, 3, 12, 4};

// Writes the trace and a scenario replaying it in `mode` beside it; returns the scenario path.
static const char *trace_scenario(const char *mode, const char *model_hw) {
  static char scn[1024];
  const char *dir = sc_test_tmpdir("calib-trace");
  char path[1100], text[2048];
  snprintf(path, sizeof path, "%s/t.jsonl", dir);
  cr_assert_eq(sc_test_write_file(path, trace_text, strlen(trace_text)), 0);
  snprintf(text, sizeof text, "name: tr\nmode: %s\n%sdeployments: [{tp: 1, pp: 1, dp: 1}]\n"
           "workload: {trace: t.jsonl}\n", mode, model_hw);
  snprintf(scn, sizeof scn, "%s/s.yaml", dir);
  cr_assert_eq(sc_test_write_file(scn, text, strlen(text)), 0);
  return scn;
}

// Runs the trace scenario scn to completion; returns its database's path.
static const char *run_trace(const char *scn) {
  static char db[1100];
  char out[8192];
  snprintf(db, sizeof db, "%s.db", scn);
  cr_assert_eq(sc_test_run_scenario(out, sizeof out, scn, db, "--no-report --quiet"), 0, "%s", out);
  return db;
}

static void expect_replayed(const char *db, long long tol_ns) {
  cr_assert_eq(sc_test_q1(db, "SELECT count(*) FROM request"), 5);
  long long a0 = sc_test_q1(db, "SELECT min(arrival_ns) FROM request");
  for (int i = 0; i < 5; i++) {
    char q[200];
    snprintf(q, sizeof q, "SELECT prompt_tokens * 1000 + output_tokens FROM request WHERE seq = %d", i);
    cr_expect_eq(sc_test_q1(db, q), trace_in[i] * 1000 + trace_out[i], "request %d", i);
    snprintf(q, sizeof q, "SELECT arrival_ns FROM request WHERE seq = %d", i);
    long long d = sc_test_q1(db, q) - a0 - trace_ns[i];
    cr_expect(llabs(d) <= tol_ns, "request %d arrived %lld ns off the trace", i, d);
  }
  cr_expect_str_eq(sc_test_q1s(db, "SELECT arrival FROM phase"), "trace");
}

Test(calibrate, trace_replays_arrivals_and_lengths_exactly_in_sim, .timeout = 60) {
  const char *scn = trace_scenario("sim", "model: {preset: llama3-8b}\nhardware: {profile: h100-sxm, gpus: 1}\n");
  const char *db = run_trace(scn);
  cr_expect_eq(sc_test_q1(db, "SELECT min(arrival_ns) FROM request"),
               sc_test_q1(db, "SELECT start_ns FROM phase")); // the first at the phase start
  expect_replayed(db, 0);
}

// A measured engine's KV size replaces the planner's (vLLM's --num-gpu-blocks-override): every
// step of the replay sees that many blocks, and the run's config says so.
Test(calibrate, num_gpu_blocks_override_sets_the_simulated_kv_cache, .timeout = 60) {
  const char *scn = trace_scenario("sim", "model: {preset: llama3-8b}\nhardware: {profile: "
                                          "h100-sxm, gpus: 1}\nlimits: {num_gpu_blocks_override: "
                                          "100, reserve_full_isl: true, kv_watermark: 0.01}\n");
  const char *db = run_trace(scn);
  cr_expect_gt(sc_test_q1(db, "SELECT count(*) FROM step"), 0);
  cr_expect_eq(sc_test_q1(db, "SELECT count(*) FROM step WHERE kv_total != 100"), 0);
  cr_expect_eq(sc_test_q1(db, "SELECT json_extract(config, '$.num_gpu_blocks_override') "
                              "FROM run"),
               100);
  expect_replayed(db, 0);
}

Test(calibrate, trace_replays_arrivals_and_lengths_in_real_mode, .timeout = 120) {
  const char *scn = trace_scenario("real", "model: {preset: llama-tiny}\nhardware: {backend: cpu}\n");
  const char *db = run_trace(scn);
  expect_replayed(db, 20000000); // sent on the wall clock: within 20 ms of the trace
}

Test(calibrate, trace_refuses_decreasing_arrivals_and_a_missing_arrival_with_file_line) {
  const char *dir = sc_test_tmpdir("calib-bad-trace");
  char path[1100], scn[1100], text[1024], args[2400], out[8192];
  const char *cases[][2] = {
      {"{\"arrival_s\": 1, \"prompt_tokens\": 4}\n{\"arrival_s\": 0.5, \"prompt_tokens\": 4}\n",
       "t.jsonl:2: key 'arrival_s'"},
      {"{\"arrival_s\": 1, \"prompt_tokens\": 4}\n\n{\"prompt_tokens\": 4}\n",
       "t.jsonl:3: key 'arrival_s': missing"},
      {"{\"arrival_s\": 0, \"prompt_tokens\": 8000, \"output_tokens\": 500}\n",
       "t.jsonl:1: key 'output_tokens'"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(path, sizeof path, "%s/t.jsonl", dir);
    cr_assert_eq(sc_test_write_file(path, cases[i][0], strlen(cases[i][0])), 0);
    snprintf(text, sizeof text, "name: tr\nmode: sim\nmodel: {preset: llama3-8b}\nhardware: "
             "{profile: h100-sxm, gpus: 1}\ndeployments: [{tp: 1, pp: 1, dp: 1}]\nworkload: "
             "{trace: t.jsonl}\n");
    snprintf(scn, sizeof scn, "%s/s.yaml", dir);
    cr_assert_eq(sc_test_write_file(scn, text, strlen(text)), 0);
    snprintf(args, sizeof args, "validate %s", scn);
    cr_expect_eq(sc_test_run_cli_clean(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, cases[i][1]), "case %zu: %s", i, out);
  }
}

// --- import

static const char *lss_text =
    "{\"request_id\": \"bench-0\", \"input_toks\": 100, \"output_toks\": 11, \"arrival_time\": 17e8, "
    "\"queued_ts\": 50.0, \"scheduled_ts\": 50.0, \"first_token_ts\": 50.2, \"last_token_ts\": 50.7}\n"
    "{\"request_id\": \"bench-1\", \"input_toks\": 30, \"output_toks\": 5, \"arrival_time\": 17e8, "
    "\"queued_ts\": 50.5, \"scheduled_ts\": 50.5, \"first_token_ts\": 50.6, \"last_token_ts\": 51.0}\n";

Test(calibrate, import_llmservingsim_trace_keeps_its_ttft_and_tpot, .timeout = 30) {
  const char *trace = sc_test_write_tmp("calib-imp", "requests.jsonl", lss_text);
  char db[1100], args[2400], out[8192];
  snprintf(db, sizeof db, "%s.db", trace);
  snprintf(args, sizeof args, "import %s --db %s", trace, db);
  cr_assert_eq(sc_test_run_cli_clean(args, out, sizeof out), 0, "%s", out);
  cr_expect(strstr(out, "llmservingsim"), "%s", out);
  cr_expect_eq(sc_test_q1(db, "SELECT arrival_ns FROM request WHERE seq = 1"), 500000000);
  cr_expect_eq(sc_test_q1(db, "SELECT first_token_ns FROM request WHERE seq = 0"), 200000000);
  cr_expect_eq(sc_test_q1(db, "SELECT count(*) FROM token"), 16);
  // TTFT (200 + 100) / 2 = 150 ms; TPOT (500/10 + 400/4) / 2 = 75 ms
  cr_expect_eq(sc_test_q1(db, "SELECT round(value * 1000) FROM metric WHERE name = "
                              "'ttft_mean_ms' AND phase_id IS NULL"), 150000);
  cr_expect_eq(sc_test_q1(db, "SELECT round(value * 1000) FROM metric WHERE name = "
                              "'tpot_mean_ms' AND phase_id IS NULL"), 75000);
  cr_expect_str_eq(sc_test_q1s(db, "SELECT status FROM run"), "complete");
}

Test(calibrate, import_refuses_a_malformed_trace_with_file_line_and_field, .timeout = 30) {
  const char *cases[][2] = {
      {"{\"input_toks\": 3, \"output_toks\": 2, \"queued_ts\": 1, \"first_token_ts\": 2, "
       "\"last_token_ts\": 3}\n{\"input_toks\": 3, \"output_toks\": 2, \"queued_ts\": 1, "
       "\"last_token_ts\": 3}\n",
       "bad.jsonl:2: key 'first_token_ts': missing"},
      {"{\"input_toks\": \"3\", \"output_toks\": 2, \"queued_ts\": 1, \"first_token_ts\": 2, "
       "\"last_token_ts\": 3}\n",
       "bad.jsonl:1: key 'input_toks': expected an integer"},
      {"{\"input_toks\": 3, \"output_toks\": 2, \"queued_ts\": 1, \"first_token_ts\": 2, "
       "\"last_token_ts\": 1.5}\n",
       "bad.jsonl:1: key 'last_token_ts'"},
      {"{\"input_lens\": [3, 4], \"output_lens\": [2, 2], \"ttfts\": [0.1], \"itls\": [[0.1], [0.1]]}",
       "bad.jsonl: key 'ttfts': expected 2 entries"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *trace = sc_test_write_tmp("calib-imp-bad", "bad.jsonl", cases[i][0]);
    char db[1100], args[2400], out[8192];
    snprintf(db, sizeof db, "%s.db", trace);
    snprintf(args, sizeof args, "import %s --db %s", trace, db);
    cr_expect_eq(sc_test_run_cli_clean(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, cases[i][1]), "case %zu: %s", i, out);
    cr_expect_eq(sc_test_q1(db, "SELECT count(*) FROM run"), 0, "nothing stored");
  }
}

Test(calibrate, import_vllm_bench_result_uses_its_token_gaps_and_says_what_it_assumed,
     .timeout = 30) {
  const char *text = "{\"request_rate\": 2.0, \"model_id\": \"m\", \"input_lens\": [10, 20], "
                     "\"output_lens\": [3, 2], \"ttfts\": [0.1, 0.2], "
                     "\"itls\": [[0.01, 0.03], [0.05]]}";
  const char *trace = sc_test_write_tmp("calib-bench", "bench.json", text);
  char db[1100], args[2400], out[8192];
  snprintf(db, sizeof db, "%s.db", trace);
  snprintf(args, sizeof args, "import %s --db %s", trace, db);
  cr_assert_eq(sc_test_run_cli_clean(args, out, sizeof out), 0, "%s", out);
  cr_expect(strstr(out, "vllm-bench"), "%s", out);
  cr_expect(strstr(out, "assumed: request_rate 2"), "%s", out);
  cr_expect_eq(sc_test_q1(db, "SELECT arrival_ns FROM request WHERE seq = 1"), 500000000);
  cr_expect_eq(sc_test_q1(db, "SELECT t_ns FROM token t JOIN request r ON r.id = t.request_id "
                              "WHERE r.seq = 0 AND t.idx = 2"), 140000000);
  cr_expect_str_eq(sc_test_q1s(db, "SELECT model FROM run"), "m");
}

// --- calibrate

// Simulates dir/t.jsonl on H100 with the engine block engine_lines (two-space indented) and
// model mapping `model` at tensor parallelism tp into dir/r.db (the next run id); the profile is
// left as dir/truth.yaml.
static void run_known_tp(const char *dir, const char *engine_lines, const char *model, int tp);
static void run_known(const char *dir, const char *engine_lines, const char *model) {
  run_known_tp(dir, engine_lines, model, 1);
}
static void run_known_tp(const char *dir, const char *engine_lines, const char *model, int tp) {
  char path[1100], text[16384], out[8192];
  snprintf(text, sizeof text, "%sengine:\n%s", h100_text(), engine_lines);
  snprintf(path, sizeof path, "%s/truth.yaml", dir);
  cr_assert_eq(sc_test_write_file(path, text, strlen(text)), 0);
  snprintf(text, sizeof text, "name: known\nmode: sim\nmodel: %s\nhardware: {profile: truth.yaml, "
           "gpus: %d}\ndeployments: [{tp: %d, pp: 1, dp: 1}]\nworkload: {trace: t.jsonl}\n", model,
           tp, tp);
  snprintf(path, sizeof path, "%s/s.yaml", dir);
  cr_assert_eq(sc_test_write_file(path, text, strlen(text)), 0);
  char db[600];
  snprintf(db, sizeof db, "%s/r.db", dir);
  cr_assert_eq(sc_test_run_scenario(out, sizeof out, path, db, "--no-report --quiet"), 0, "%s",
               out);
}

Test(calibrate, fit_recovers_known_engine_parameters_within_2_percent, .timeout = 120) {
  // a run simulated with a known engine block, every request at 0 (the scheduling then does
  // not depend on the prices, so the objective is smooth and its minimum is the truth)
  const char *dir = sc_test_tmpdir("calib-fit");
  char path[1100], text[16384], args[4096], out[16384];
  const char *base = h100_text();
  snprintf(path, sizeof path, "%s/t.jsonl", dir);
  FILE *f = fopen(path, "w");
  cr_assert(f);
  static const int in[] = {64, 300, 1200, 3000};
  for (int i = 0; i < 40; i++)
    fprintf(f, "{\"arrival_s\": 0, \"prompt_tokens\": %d, \"output_tokens\": %d}\n",
            in[(i * 7) % 4], 8 + (i * 37) % 100);
  fclose(f);
  run_known(dir, "  step_s: 0.002\n  seq_s: 2e-5\n  prefill_eff: 0.6\n  decode_eff: 0.75\n"
            "  max_running: 16\n  token_budget: 2048\n", "{preset: llama3-8b}");
  snprintf(text, sizeof text, "%sengine:\n  max_running: 16\n  token_budget: 2048\n"
           "  logits_dtype: bf16\n", base);
  snprintf(path, sizeof path, "%s/base.yaml", dir);
  cr_assert_eq(sc_test_write_file(path, text, strlen(text)), 0);
  snprintf(args, sizeof args, "calibrate --db %s/r.db --run 1 --profile %s/base.yaml --model "
           "llama3-8b --out %s/fit.yaml", dir, dir, dir);
  cr_assert_eq(sc_test_run_cli_clean(args, out, sizeof out), 0, "%s", out);
  cr_expect(strstr(out, "fit       1"), "residuals printed: %s", out);
  snprintf(path, sizeof path, "%s/fit.yaml", dir);
  hw_profile p;
  sc_error err = {{0}};
  cr_assert_eq(hw_profile_load(path, &p, &err), SC_OK, "%s", err.msg); // loads back
  const sim_engine *e = &p.sim.engine;
  cr_expect(fabs(e->step_s / 0.002 - 1) < 0.02, "step_s %g", e->step_s);
  cr_expect(fabs(e->seq_s / 2e-5 - 1) < 0.02, "seq_s %g", e->seq_s);
  cr_expect(fabs(e->prefill_eff / 0.6 - 1) < 0.02, "prefill_eff %g", e->prefill_eff);
  cr_expect(fabs(e->decode_eff / 0.75 - 1) < 0.02, "decode_eff %g", e->decode_eff);
  cr_expect_eq(e->max_running, 16);
  cr_expect_eq(e->logits_bytes, 2); // the base's knobs go with the fit
}

Test(calibrate, replay_takes_the_runs_weight_and_kv_dtypes, .timeout = 60) {
  // a run of llama3-8b in fp8 with an fp8 KV cache replays to the nanosecond only when
  // calibrate is told both dtypes; with the preset's bf16 it prices other steps
  const char *dir = sc_test_tmpdir("calib-dtype");
  char path[1100], args[4096], out[16384];
  snprintf(path, sizeof path, "%s/t.jsonl", dir);
  FILE *f = fopen(path, "w");
  cr_assert(f);
  for (int i = 0; i < 20; i++)
    fprintf(f, "{\"arrival_s\": %.2f, \"prompt_tokens\": %d, \"output_tokens\": %d}\n", 0.05 * i,
            (int[]){64, 300, 1200}[i % 3], 8 + 5 * i);
  fclose(f);
  run_known(dir, "  step_s: 0.001\n  max_running: 16\n",
            "{preset: llama3-8b, dtype: fp8, kv_cache_dtype: fp8}");
  static const char *const dtypes[] = {"--dtype fp8 --kv-cache-dtype fp8", "--dtype fp8", ""};
  for (int i = 0; i < 3; i++) {
    snprintf(args, sizeof args, "calibrate --db %s/r.db --check 1 --no-fit --profile "
             "%s/truth.yaml --model llama3-8b %s", dir, dir, dtypes[i]);
    cr_assert_eq(sc_test_run_cli_clean(args, out, sizeof out), 0, "%s", out);
    bool exact = strstr(out, "0.000   0.000") != NULL;
    cr_expect_eq(exact, i == 0, "'%s': %s", dtypes[i], out);
  }
  static const char *const bad[][2] = {{"--dtype fp9", "key 'dtype'"},
                                       {"--kv-cache-dtype int8", "key 'kv_cache_dtype'"}};
  for (int i = 0; i < 2; i++) {
    snprintf(args, sizeof args, "calibrate --db %s/r.db --check 1 --no-fit --profile "
             "%s/truth.yaml --model llama3-8b %s", dir, dir, bad[i][0]);
    cr_expect_eq(sc_test_run_cli_clean(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "calibrate flags:") && strstr(out, bad[i][1]) &&
                  strstr(out, strchr(bad[i][0], ' ') + 1),
              "%s", out);
  }
}

// --- identification, joint fits, bounds (issue 37)

// A burst of 48 requests at 0: prompts of four lengths, outputs 8 to 120 tokens.
static void write_burst(const char *dir) {
  char path[1100];
  snprintf(path, sizeof path, "%s/t.jsonl", dir);
  FILE *f = fopen(path, "w");
  cr_assert(f);
  static const int in[] = {64, 300, 1200, 3000};
  for (int i = 0; i < 48; i++)
    fprintf(f, "{\"arrival_s\": 0, \"prompt_tokens\": %d, \"output_tokens\": %d}\n",
            in[(i * 7) % 4], 8 + (i * 37) % 113);
  fclose(f);
}

static const char *TRUTH = "  step_s: 0.004\n  prefill_eff: 0.8\n  decode_eff: 0.7\n"
                           "  max_running: 32\n  token_budget: 2048\n";

// Writes dir/base.yaml: h100-sxm with the truth's knobs and nothing fitted.
static void write_base(const char *dir) {
  char path[1100], text[16384];
  snprintf(text, sizeof text, "%sengine:\n  max_running: 32\n  token_budget: 2048\n", h100_text());
  snprintf(path, sizeof path, "%s/base.yaml", dir);
  cr_assert_eq(sc_test_write_file(path, text, strlen(text)), 0);
}

// One burst at tp 1 cannot tell the host time per step from the decode efficiency (a decode
// step's time is mostly the weights' read, fixed per step like the host time): the fit says
// so, names what would pin it, and --strict exits 1. Runs at tp 1 and tp 2 together (the
// device time halves, the host time does not) pin both: the joint fit finds them within 5%.
Test(calibrate, a_tp1_burst_is_not_identified_and_tp1_with_tp2_recovers_both, .timeout = 300) {
  const char *dir = sc_test_tmpdir("calib-ident");
  char args[4096], out[32768];
  write_burst(dir);
  run_known_tp(dir, TRUTH, "{preset: llama3-8b}", 1); // run 1
  run_known_tp(dir, TRUTH, "{preset: llama3-8b}", 2); // run 2
  write_base(dir);
  snprintf(args, sizeof args, "calibrate --db %s/r.db --run 1 --profile %s/base.yaml --model "
           "llama3-8b --out %s/fit1.yaml --strict", dir, dir, dir);
  cr_expect_eq(sc_test_run_cli_clean(args, out, sizeof out), 1, "%s", out);
  cr_expect(strstr(out, "not identified") && strstr(out, "step_s") && strstr(out, "decode_eff"),
            "%s", out);
  cr_expect(strstr(out, "another TP degree"), "what would pin it: %s", out);
  char path[1100];
  snprintf(path, sizeof path, "%s/fit1.yaml", dir);
  char *prof = sc_test_read_file(path, NULL);
  cr_assert(prof, "the profile is written also when not identified");
  cr_expect(strstr(prof, "# calibrate: not identified"), "in the profile's comments");
  cr_expect(strstr(prof, "  error: "), "its interval's half-width");
  free(prof);
  snprintf(args, sizeof args, "calibrate --db %s/r.db --run 1 --run 2 --profile %s/base.yaml "
           "--model llama3-8b --out %s/fit12.yaml", dir, dir, dir);
  cr_assert_eq(sc_test_run_cli_clean(args, out, sizeof out), 0, "%s", out);
  cr_expect(strstr(out, "run 2: tp 2"), "the run's own layout: %s", out);
  cr_expect(strstr(out, "leave-one-run-out"), "%s", out);
  hw_profile p;
  sc_error err = {{0}};
  snprintf(path, sizeof path, "%s/fit12.yaml", dir);
  cr_assert_eq(hw_profile_load(path, &p, &err), SC_OK, "%s", err.msg);
  cr_expect(fabs(p.sim.engine.step_s / 0.004 - 1) < 0.05, "step_s %g: %s", p.sim.engine.step_s, out);
  cr_expect(fabs(p.sim.engine.decode_eff / 0.7 - 1) < 0.05, "decode_eff %g: %s",
            p.sim.engine.decode_eff, out);
}

// A run whose engine decodes faster than the card's memory allows: the fit stops at the bound
// (1 / mem_eff: the datasheet's bandwidth) and says so; no fitted value leaves its bounds.
Test(calibrate, no_fitted_value_leaves_its_bounds_and_a_bound_is_reported, .timeout = 300) {
  const char *dir = sc_test_tmpdir("calib-bound");
  char args[4096], out[32768], path[1100];
  write_burst(dir);
  run_known(dir, "  decode_eff: 3\n  prefill_eff: 3\n  max_running: 32\n  token_budget: 2048\n",
            "{preset: llama3-8b}");
  write_base(dir);
  snprintf(args, sizeof args, "calibrate --db %s/r.db --run 1 --profile %s/base.yaml --model "
           "llama3-8b --out %s/fit.yaml --strict", dir, dir, dir);
  cr_expect_eq(sc_test_run_cli_clean(args, out, sizeof out), 1, "%s", out);
  cr_expect(strstr(out, "decode_eff") && strstr(out, "upper bound"), "%s", out);
  hw_profile p;
  sc_error err = {{0}};
  snprintf(path, sizeof path, "%s/fit.yaml", dir);
  cr_assert_eq(hw_profile_load(path, &p, &err), SC_OK, "%s", err.msg);
  double lo[CALIB_NP], hi[CALIB_NP], v[CALIB_NP];
  calib_bounds(&p.sim, lo, hi);
  calib_get(&p.sim.engine, v);
  for (int i = 0; i < CALIB_NP; i++)
    cr_expect(v[i] >= lo[i] - 1e-12 && v[i] <= hi[i] + 1e-12, "%s %g outside [%g, %g]",
              calib_param_names[i], v[i], lo[i], hi[i]);
  cr_expect_float_eq(v[3], hi[3], 1e-5, "decode_eff on its bound (as the profile prints it)");
  cr_expect_leq(hi[3], 1 / 0.5, "the bound is the datasheet's: 1 / mem_eff");
}

// Bad input: one clear line and exit 2.
Test(calibrate, bad_input_is_one_clear_line_and_exit_2, .timeout = 120) {
  const char *dir = sc_test_tmpdir("calib-badin");
  char args[4096], out[16384], db[1100];
  write_burst(dir);
  run_known(dir, "  max_running: 32\n", "{preset: llama3-8b}"); // run 1
  snprintf(db, sizeof db, "%s/r.db", dir);
  // run 2: the same trace imported as a run of another model
  const char *trace = sc_test_write_tmp("calib-badin-t", "requests.jsonl", lss_text);
  snprintf(args, sizeof args, "import %s --db %s --model qwen3-32b", trace, db);
  cr_assert_eq(sc_test_run_cli_clean(args, out, sizeof out), 0, "%s", out);
  snprintf(args, sizeof args, "calibrate --db %s --run 1 --run 2 --profile h100-sxm --model "
           "llama3-8b --out %s/x.yaml", db, dir);
  cr_expect_eq(sc_test_run_cli_clean(args, out, sizeof out), 2, "%s", out);
  cr_expect(strstr(out, "different models") && sc_test_count_lines(out) == 1, "%s", out);
  // a layout the profile cannot hold: llama3-70b at tp 1 on one H100
  snprintf(args, sizeof args, "calibrate --db %s --run 1 --profile h100-sxm --model llama3-70b "
           "--out %s/x.yaml", db, dir);
  cr_expect_eq(sc_test_run_cli_clean(args, out, sizeof out), 2, "%s", out);
  cr_expect(strstr(out, "run 1 at tp 1") && strstr(out, "exceed") &&
                sc_test_count_lines(out) == 1, "%s", out);
  snprintf(args, sizeof args, "calibrate --db %s --run 1:tp=3 --profile h100-sxm --model "
           "llama3-8b --out %s/x.yaml", db, dir);
  cr_expect_eq(sc_test_run_cli_clean(args, out, sizeof out), 2, "%s", out);
  cr_expect(strstr(out, "run 1 at tp 3") && strstr(out, "does not divide") &&
                sc_test_count_lines(out) == 1, "%s", out);
  // a run without completed requests: every request timed out
  char path[1100], text[1024];
  snprintf(text, sizeof text, "name: none\nmode: sim\nmodel: {preset: llama3-8b}\nhardware: "
           "{profile: h100-sxm, gpus: 1}\ndeployments: [{tp: 1}]\nlimits: {request_timeout: 1ms}\n"
           "workload:\n  prompts: [{input: 4000, output: 50}]\n  phases: [{fixed: {requests: 4}}]\n");
  snprintf(path, sizeof path, "%s/none.yaml", dir);
  cr_assert_eq(sc_test_write_file(path, text, strlen(text)), 0);
  sc_test_run_scenario(out, sizeof out, path, db, "--no-report --quiet"); // run 3
  snprintf(args, sizeof args, "calibrate --db %s --run 3 --profile h100-sxm --model llama3-8b "
           "--out %s/x.yaml", db, dir);
  cr_expect_eq(sc_test_run_cli_clean(args, out, sizeof out), 2, "%s", out);
  cr_expect(strstr(out, "no completed requests") && sc_test_count_lines(out) == 1, "%s", out);
}

// Intervals cover the truth at the rate docs/calibration.md states (80%): runs simulated on a
// "truth" the base profile does not know (a slower link, host time, slower kernels), fitted at
// tp 1 on two loads, predict runs at other lengths and at tp 2 and tp 4; at least 80% of the
// measured throughputs fall inside their intervals.
Test(calibrate, intervals_cover_simulated_runs_at_the_stated_rate, .timeout = 600) {
  const char *dir = sc_test_tmpdir("calib-cover");
  char args[8192], out[65536], path[1100], text[16384];
  // the truth: h100-sxm with a slower link and an engine the base does not have
  const char *h = h100_text();
  snprintf(text, sizeof text, "%s", h);
  char *lat = strstr(text, "link_latency_s: 2e-6");
  cr_assert(lat, "the shipped profile's link latency");
  memcpy(lat, "link_latency_s: 8e-6", 20);
  snprintf(text + strlen(text), sizeof text - strlen(text),
           "engine:\n  step_s: 0.0015\n  seq_s: 1e-5\n  tp_step_s: 0.0005\n  prefill_eff: 0.7\n"
           "  decode_eff: 0.8\n  max_running: 64\n  token_budget: 4096\n");
  snprintf(path, sizeof path, "%s/truth.yaml", dir);
  cr_assert_eq(sc_test_write_file(path, text, strlen(text)), 0);
  snprintf(text, sizeof text, "%sengine:\n  max_running: 64\n  token_budget: 4096\n", h);
  snprintf(path, sizeof path, "%s/base.yaml", dir);
  cr_assert_eq(sc_test_write_file(path, text, strlen(text)), 0);
  // runs: {tp, requests, prompt, output}; the first two are fitted
  static const int runs[][4] = {{1, 8, 512, 64},  {1, 48, 512, 64},  {1, 24, 128, 128},
                                {1, 24, 2048, 32}, {2, 8, 512, 64},   {2, 48, 512, 64},
                                {4, 8, 512, 64},  {4, 48, 1024, 96}, {2, 24, 2048, 32}};
  int n = (int)(sizeof runs / sizeof runs[0]);
  for (int i = 0; i < n; i++) {
    snprintf(path, sizeof path, "%s/t.jsonl", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    for (int k = 0; k < runs[i][1]; k++)
      fprintf(f, "{\"arrival_s\": 0, \"prompt_tokens\": %d, \"output_tokens\": %d}\n",
              runs[i][2] + 7 * (k % 5), runs[i][3] + 3 * (k % 7));
    fclose(f);
    snprintf(text, sizeof text, "name: cover\nmode: sim\nmodel: {preset: llama3-8b}\nhardware: "
             "{profile: truth.yaml, gpus: %d}\ndeployments: [{tp: %d}]\nworkload: {trace: "
             "t.jsonl}\n", runs[i][0], runs[i][0]);
    snprintf(path, sizeof path, "%s/s.yaml", dir);
    cr_assert_eq(sc_test_write_file(path, text, strlen(text)), 0);
    char db[1200];
    snprintf(db, sizeof db, "%s/r.db", dir);
    cr_assert_eq(sc_test_run_scenario(out, sizeof out, path, db, "--no-report --quiet"), 0, "%s",
                 out);
  }
  size_t len = (size_t)snprintf(args, sizeof args, "calibrate --db %s/r.db --run 1 --run 2 "
                                "--profile %s/base.yaml --model llama3-8b --out %s/fit.yaml",
                                dir, dir, dir);
  for (int i = 3; i <= n; i++)
    len += (size_t)snprintf(args + len, sizeof args - len, " --check %d", i);
  cr_assert_eq(sc_test_run_cli_clean(args, out, sizeof out), 0, "%s", out);
  int checks = 0, outside = 0;
  for (const char *p = out; (p = strstr(p, "\ncheck ")) != NULL; p++) {
    const char *eol = strchr(p + 1, '\n');
    const char *tok = strstr(p, "out tok/s");
    if (!tok || (eol && tok > eol)) continue; // the residual table's rows
    checks++;
    const char *o = strstr(tok, "(outside)");
    outside += o && (!eol || o < eol);
  }
  cr_expect_eq(checks, n - 2, "%s", out);
  cr_expect(checks - outside >= 0.8 * checks, "%d of %d inside: %s", checks - outside, checks,
            out);
}

// A simulated run's knobs come from the run itself (its stored config), a SPEC's override them,
// and BASE's engine block gives the rest: a run simulated with max_running 4 and a 512-token
// budget replays to the nanosecond on a base that sets neither, and not with a SPEC of 8.
Test(calibrate, a_simulated_runs_knobs_come_from_the_run_and_a_spec_overrides_them, .timeout = 120) {
  const char *dir = sc_test_tmpdir("calib-knobs");
  char args[4096], out[16384], path[1100], text[16384];
  write_burst(dir);
  run_known(dir, "  step_s: 0.002\n  max_running: 4\n  token_budget: 512\n", "{preset: llama3-8b}");
  snprintf(text, sizeof text, "%sengine:\n  step_s: 0.002\n", h100_text());
  snprintf(path, sizeof path, "%s/base.yaml", dir);
  cr_assert_eq(sc_test_write_file(path, text, strlen(text)), 0);
  snprintf(args, sizeof args, "calibrate --db %s/r.db --check 1 --no-fit --profile %s/base.yaml "
           "--model llama3-8b", dir, dir);
  cr_assert_eq(sc_test_run_cli_clean(args, out, sizeof out), 0, "%s", out);
  cr_expect(strstr(out, "0.000   0.000"), "the run's own knobs: exact: %s", out);
  snprintf(args, sizeof args, "calibrate --db %s/r.db --check 1:max_running=8 --no-fit --profile "
           "%s/base.yaml --model llama3-8b", dir, dir);
  cr_assert_eq(sc_test_run_cli_clean(args, out, sizeof out), 0, "%s", out);
  cr_expect(!strstr(out, "0.000   0.000"), "the SPEC's max_running 8: another schedule: %s", out);
  snprintf(args, sizeof args, "calibrate --db %s/r.db --check 1:max_runing=8 --no-fit --profile "
           "%s/base.yaml --model llama3-8b", dir, dir);
  cr_expect_eq(sc_test_run_cli_clean(args, out, sizeof out), 2, "%s", out);
  cr_expect(strstr(out, "max_runing=8") && sc_test_count_lines(out) == 1, "%s", out);
}
