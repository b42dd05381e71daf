// Known-answer tests of the simulator's cost model (kernels/sim/sim_cost.c) on the shipped hardware
// profiles and model presets: each expected figure is worked out here from the formulas of
// docs/simulator.md, independently of the code under test.
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "config/hardware.h"
#include "config/presets.h"
#include "engine/executor.h"
#include "engine/model.h"
#include "kernels/sim/sim_cost.h"

// --- helpers

// A shipped profile's device, without measured tables (the known answers are the roofline's; the
// tests that pin the tables add their own).
static sim_hw load_hw(const char *name) {
  hw_profile p;
  sc_error err = {{0}};
  cr_assert_eq(hw_profile_load(name, &p, &err), SC_OK, "%s", err.msg);
  p.sim.n_gemm = p.sim.n_attn = p.sim.n_coll = 0;
  return p.sim;
}

static sim_dtype to_sim_dtype(sc_dtype t) {
  switch (t) {
  case SC_F32: return SIM_F32;
  case SC_F16: return SIM_F16;
  case SC_BF16: return SIM_BF16;
  case SC_I8: return SIM_I8;
  case SC_I4: return SIM_I4;
  case SC_FP8: return SIM_FP8;
  }
  return SIM_F32;
}

// A preset's shapes as the cost model sees them: weights in w, activations and KV in bf16.
static sim_model load_model(const char *preset, sc_dtype w) {
  model_config c;
  sc_error err = {{0}};
  cr_assert_eq(model_preset_load(preset, &c, &err), SC_OK, "%s", err.msg);
  return (sim_model){.dim = c.dim,
                     .n_layers = c.n_layers,
                     .n_heads = c.n_heads,
                     .n_kv_heads = c.n_kv_heads,
                     .head_dim = c.head_dim,
                     .ffn_dim = c.ffn_dim,
                     .vocab = c.vocab_size,
                     .tied_embeddings = c.tied_embeddings,
                     .weight_dtype = to_sim_dtype(w),
                     .act_dtype = SIM_BF16};
}

static sim_layout layout(int tp, int pp) {
  return (sim_layout){.tp = tp, .pp = pp, .first_gpu = 0, .threads = 1, .cluster_ranks = tp * pp};
}

// n decoding sequences, each with `ctx` tokens already in its KV cache.
static void decode_batch(sim_seq *s, int n, int ctx) {
  for (int i = 0; i < n; i++) s[i] = (sim_seq){.start = ctx, .n = 1, .logits = true};
}

// Prices seqs[0..n) split into micro-batches by the executor's rule.
static sim_step_cost price(const sim_hw *hw, const sim_model *m, const sim_layout *l,
                           const sim_seq *s, int n) {
  int ntok[256], mb_first[65];
  for (int i = 0; i < n; i++) ntok[i] = s[i].n;
  int n_mb = exec_split_microbatches(ntok, n, l->pp, mb_first);
  sim_step_cost c;
  cr_assert_eq(sim_step_price(hw, m, l, s, n, mb_first, n_mb, &c), 0);
  return c;
}

static void assert_near(double got, double want, double rel, const char *what) {
  cr_assert(fabs(got - want) <= rel * fabs(want), "%s: got %.6g, want %.6g (within %g%%)", what,
            got, want, rel * 100);
}

// --- 1. batch-1 decode is the weight read plus collectives, launches and step overhead

// The collectives of a batch-1 decode step: 2 all-reduces per layer and 1 of the embedding, of
// dim bf16 values each, the cheaper of ring and tree, and the all-gather of f32 logits.
static double batch1_collectives(const sim_hw *hw, const sim_model *m, int tp) {
  if (tp == 1) return 0;
  double n = tp, bw = hw->intra.bw, lat = hw->intra.latency_s, ar_bytes = m->dim * 2.0;
  double ring = 2 * (n - 1) / n * ar_bytes / bw + 2 * (n - 1) * lat;
  double tree = 2 * log2(n) * lat + 2 * ar_bytes / bw;
  return (2.0 * m->n_layers + 1) * fmin(ring, tree) + (n - 1) / n * m->vocab * 4.0 / bw +
         (n - 1) * lat;
}

// The formula, written out: every weight of the rank read once (the embedding only for the token's
// row, so not counted), the collectives, 12 kernels per layer + embedding + final norm + head.
static double batch1_decode_formula(const sim_hw *hw, const sim_model *m, int tp) {
  double D = m->dim, hd = m->head_dim, L = m->n_layers;
  double qd = m->n_heads / tp * hd;
  double kvd = (m->n_kv_heads % tp == 0 ? m->n_kv_heads / tp : 1) * hd;
  double fl = m->ffn_dim / tp, vl = m->vocab / tp;
  double layer = qd * D + 2 * kvd * D + D * qd + 3 * fl * D; // elements
  double weight_bytes = (L * layer + vl * D) * 2;            // bf16
  double t = weight_bytes / (hw->mem_bw * hw->mem_eff) + batch1_collectives(hw, m, tp);
  t += (12 * L + 3) * hw->launch_s;
  return t + hw->step_overhead_s;
}

static void check_batch1(const char *preset, int tp) {
  sim_hw hw = load_hw("h100-sxm");
  sim_model m = load_model(preset, SC_BF16);
  sim_layout l = layout(tp, 1);
  sim_seq s;
  decode_batch(&s, 1, 100);
  sim_step_cost c = price(&hw, &m, &l, &s, 1);
  assert_near(c.total_s, batch1_decode_formula(&hw, &m, tp), 0.05, preset);
  if (tp > 1) assert_near(c.comm_s, batch1_collectives(&hw, &m, tp), 1e-9, "collectives");
  assert_near(c.overhead_s, (12.0 * m.n_layers + 3) * hw.launch_s + hw.step_overhead_s, 1e-9,
              "launches and step overhead");
  assert_near(c.compute_s + c.comm_s + c.overhead_s, c.total_s, 1e-9, "breakdown sums to total");
  cr_assert_eq(c.n_microbatches, 1);
  cr_assert_eq(c.bubble_frac, 0);
  if (tp == 1) cr_assert_eq(c.comm_s, 0);
}

Test(sim_cost, batch1_decode_llama3_8b_tp1_is_weight_read_plus_overheads) {
  check_batch1("llama3-8b", 1);
}
Test(sim_cost, batch1_decode_llama3_8b_tp2_adds_ring_allreduces) { check_batch1("llama3-8b", 2); }
Test(sim_cost, batch1_decode_llama3_70b_tp4_adds_allreduces) { check_batch1("llama3-70b", 4); }

// --- 2. TP scaling at a saturating decode batch

static double tokens_per_s(const sim_hw *hw, int tp) {
  sim_model m = load_model("llama3-8b", SC_BF16);
  sim_layout l = layout(tp, 1);
  sim_seq s[256];
  decode_batch(s, 256, 1000);
  return 256 / price(hw, &m, &l, s, 256).total_s;
}

Test(sim_cost, tp2_decode_throughput_is_1_4_to_1_9x_tp1_on_nvlink_and_less_on_pcie4) {
  sim_hw hw = load_hw("h100-sxm");
  double r_nvlink = tokens_per_s(&hw, 2) / tokens_per_s(&hw, 1);
  cr_assert(r_nvlink > 1.4 && r_nvlink < 1.9, "tp2/tp1 over nvlink4: %.3f", r_nvlink);
  cr_assert(sim_link_lookup("pcie4", &hw.intra));
  double r_pcie = tokens_per_s(&hw, 2) / tokens_per_s(&hw, 1);
  cr_assert_lt(r_pcie, r_nvlink, "pcie4 %.3f vs nvlink4 %.3f", r_pcie, r_nvlink);
}

// --- 3. the PP bubble emerges from the schedule

Test(sim_cost, pp2_one_microbatch_runs_stages_one_after_the_other) {
  sim_hw hw = load_hw("h100-sxm");
  sim_model m = load_model("llama3-8b", SC_BF16);
  sim_layout l1 = layout(1, 1), l2 = layout(1, 2);
  sim_seq s;
  decode_batch(&s, 1, 100);
  sim_step_cost c1 = price(&hw, &m, &l1, &s, 1), c2 = price(&hw, &m, &l2, &s, 1);
  // The same ops split over two GPUs, plus one transfer of dim bf16 values between them.
  double xfer = m.dim * 2.0 / hw.intra.bw + hw.intra.latency_s;
  assert_near(c2.total_s, c1.total_s + xfer, 1e-9, "pp2 = pp1 + one transfer");
  cr_assert(c2.bubble_frac > 0.45 && c2.bubble_frac < 0.55, "bubble %.3f", c2.bubble_frac);
  assert_near(c2.compute_s + c2.comm_s + c2.overhead_s, c2.total_s, 1e-9, "breakdown");
}

Test(sim_cost, pp2_two_microbatches_shrink_the_bubble) {
  sim_hw hw = load_hw("h100-sxm");
  sim_model m = load_model("llama3-8b", SC_BF16);
  sim_layout l = layout(1, 2);
  sim_seq s[64];
  decode_batch(s, 64, 100);
  sim_step_cost c1 = price(&hw, &m, &l, s, 1), c64 = price(&hw, &m, &l, s, 64);
  cr_assert_eq(c64.n_microbatches, 2);
  cr_assert_gt(c64.bubble_frac, 0);
  cr_assert_lt(c64.bubble_frac, c1.bubble_frac - 0.1, "%.3f vs %.3f", c64.bubble_frac,
               c1.bubble_frac);
  // Stage 0 runs micro-batch 1 while stage 1 runs micro-batch 0: less than twice one.
  cr_assert_lt(c64.total_s, 2 * c1.total_s);
  assert_near(c64.compute_s + c64.comm_s + c64.overhead_s, c64.total_s, 1e-9, "breakdown");
}

Test(sim_cost, pp2_slow_last_stage_runs_its_microbatches_back_to_back) {
  sim_hw hw = load_hw("h100-sxm");
  sim_model m = load_model("llama3-8b", SC_BF16);
  // the LM head (vocab x dim) measured at 1 s whatever the rows: stage 1 takes ~1 s per
  // micro-batch, stage 0 milliseconds
  hw.gemm[0] = (sim_gemm_table){
      .n = m.vocab, .k = m.dim, .threads = 1, .t = {.n = 2, .x = {1, 1024}, .y = {1.0, 1.0}}};
  hw.n_gemm = 1;
  sim_layout l = layout(1, 2);
  sim_seq s[64];
  decode_batch(s, 64, 100);
  sim_step_cost c = price(&hw, &m, &l, s, 64);
  cr_assert_eq(c.n_microbatches, 2);
  // stage 1 runs micro-batch 1 only after micro-batch 0: 2 s, plus stage 0's first micro-batch
  cr_assert_gt(c.total_s, 2.0);
  cr_assert_lt(c.total_s, 2.1);
  // stage 0 is busy ~1% of the time, stage 1 all of it after its start
  cr_assert(c.bubble_frac > 0.48 && c.bubble_frac < 0.5, "bubble %.4f", c.bubble_frac);
  assert_near(c.compute_s + c.comm_s + c.overhead_s, c.total_s, 1e-9, "breakdown");
}

// --- 4. weight dtype

Test(sim_cost, int8_weights_decode_faster_than_bf16_at_batch1) {
  sim_hw hw = load_hw("h100-sxm");
  sim_model bf = load_model("llama3-8b", SC_BF16), i8 = load_model("llama3-8b", SC_I8);
  sim_model i4 = load_model("llama3-8b", SC_I4);
  sim_layout l = layout(1, 1);
  sim_seq s;
  decode_batch(&s, 1, 100);
  double t_bf = price(&hw, &bf, &l, &s, 1).total_s, t_i8 = price(&hw, &i8, &l, &s, 1).total_s;
  double t_i4 = price(&hw, &i4, &l, &s, 1).total_s;
  cr_assert_lt(t_i8, 0.75 * t_bf, "int8 %.4g s vs bf16 %.4g s", t_i8, t_bf);
  cr_assert_lt(t_i4, t_i8);
  // one GEMM row: 1 byte (int8) or 0.5 (int4) per weight, a bf16 scale per output row, for int4
  // one per group of 128 inputs too, and the bf16 row in and out
  double B = hw.mem_bw * hw.mem_eff, nk = 4096.0 * 4096, io = 2 * 4096.0 * 2;
  assert_near(sim_gemm_s(&hw, &l, 1, 4096, 4096, SIM_I8, SIM_BF16),
              (nk + 4096 * 2 + io) / B + hw.launch_s, 1e-12, "int8 GEMV");
  assert_near(sim_gemm_s(&hw, &l, 1, 4096, 4096, SIM_I4, SIM_BF16),
              (nk / 2 + 4096 * 2 + 4096 * 32 * 2 + io) / B + hw.launch_s, 1e-12, "int4 GEMV");
}

// fp8 weights: a byte per weight like int8 when memory bound, and, unlike the weight-only kinds,
// multiplied at the fp8 peak where the device has one (W8A8), at the bf16 rate where it has not.
Test(sim_cost, fp8_weights_read_a_byte_and_multiply_at_the_fp8_peak_where_there_is_one) {
  sim_hw hw = load_hw("h100-sxm"), a100 = load_hw("a100-80g");
  cr_assert_gt(hw.flops_fp8, 1.9 * hw.flops_bf16, "h100-sxm: flops_fp8 %g", hw.flops_fp8);
  cr_assert_eq(a100.flops_fp8, 0, "a100-80g has no fp8 tensor cores");
  sim_layout l = layout(1, 1);
  double B = hw.mem_bw * hw.mem_eff, nk = 4096.0 * 4096, io = 2 * 4096.0 * 2;
  assert_near(sim_gemm_s(&hw, &l, 1, 4096, 4096, SIM_FP8, SIM_BF16),
              sim_gemm_s(&hw, &l, 1, 4096, 4096, SIM_I8, SIM_BF16), 1e-15, "fp8 GEMV = int8");
  assert_near(sim_gemm_s(&hw, &l, 1, 4096, 4096, SIM_FP8, SIM_BF16),
              (nk + 4096 * 2 + io) / B + hw.launch_s, 1e-12, "fp8 GEMV");
  // 8192 rows: compute bound at 0.75 of the peak (gemm_eff beyond 1024 rows)
  double flops = 2.0 * 8192 * 4096 * 4096;
  assert_near(sim_gemm_s(&hw, &l, 8192, 4096, 4096, SIM_FP8, SIM_BF16),
              flops / (hw.flops_fp8 * 0.75) + hw.launch_s, 1e-9, "fp8 GEMM on h100");
  assert_near(sim_gemm_s(&hw, &l, 8192, 4096, 4096, SIM_I8, SIM_BF16),
              flops / (hw.flops_bf16 * 0.75) + hw.launch_s, 1e-9, "int8 weight-only GEMM");
  assert_near(sim_gemm_s(&a100, &l, 8192, 4096, 4096, SIM_FP8, SIM_BF16),
              sim_gemm_s(&a100, &l, 8192, 4096, 4096, SIM_I8, SIM_BF16), 1e-12,
              "fp8 on a100: weight-only, bf16 rate");
  // a whole prefill step of llama3-8b: fp8 about twice as fast as bf16 where compute bound
  sim_model bf = load_model("llama3-8b", SC_BF16), f8 = load_model("llama3-8b", SC_FP8);
  sim_seq p = {.start = 0, .n = 8192, .logits = true};
  double t_bf = price(&hw, &bf, &l, &p, 1).total_s, t_f8 = price(&hw, &f8, &l, &p, 1).total_s;
  cr_assert(t_f8 < 0.75 * t_bf && t_f8 > 0.45 * t_bf, "prefill fp8 %.4g s vs bf16 %.4g s", t_f8,
            t_bf);
}

// An fp8 KV cache halves the bytes a long-context decode reads.
Test(sim_cost, an_fp8_kv_cache_halves_what_decode_attention_reads) {
  sim_hw hw = load_hw("h100-sxm");
  sim_layout l = layout(1, 1);
  sim_seq d = {.start = 7999, .n = 1, .logits = true};
  double bf = sim_attention_s(&hw, &l, &d, 1, 32, 8, 128, SIM_BF16) - hw.launch_s;
  double f8 = sim_attention_s(&hw, &l, &d, 1, 32, 8, 128, SIM_FP8) - hw.launch_s;
  assert_near(f8, bf / 2, 1e-12, "decode attention at 8000 tokens, fp8 KV");
  sim_model m = load_model("llama3-8b", SC_BF16), mk = m;
  mk.kv_fp8 = true;
  sim_seq batch[64];
  decode_batch(batch, 64, 8000);
  double t = price(&hw, &m, &l, batch, 64).total_s, tk = price(&hw, &mk, &l, batch, 64).total_s;
  cr_assert(tk < 0.8 * t, "64 decodes at 8000 tokens: fp8 KV %.4g s vs bf16 %.4g s", tk, t);
}

// --- 5. attention

// A decode's products run at the efficiency of its KV group's rows (4 query heads per KV head in
// llama3-8b), not of one row: on an RTX 4090, whose one-row rate (165 TFLOP/s x 0.0125) would
// make a decode at context 512 compute bound at 4.1 us, it is KV-read bound at 2.2 us, as
// LLMServingSim measured vLLM's kernel (256 sequences: 619 us, 2.4 us each).
Test(sim_cost, decode_attention_is_kv_read_bound_at_its_group_rows) {
  sim_hw hw = load_hw("rtx4090");
  sim_layout l = layout(1, 1);
  sim_seq d = {.start = 511, .n = 1, .logits = true};
  double kv = 512 * 2.0 * 8 * 128 * 2 + 2.0 * 32 * 128 * 2; // K and V read, q in, out
  double t = sim_attention_s(&hw, &l, &d, 1, 32, 8, 128, SIM_BF16) - hw.launch_s;
  assert_near(t, kv / (hw.mem_bw * hw.mem_eff), 1e-9, "decode at 512 tokens, llama3-8b heads");
  double one_row = 4.0 * 512 * 128 * 32 / (hw.flops_bf16 * sim_curve_eff(&hw.gemm_eff, 1, 1));
  cr_assert_gt(one_row, 1.5 * t, "at one row's efficiency it would be compute bound");
}

Test(sim_cost, decode_attention_grows_with_context_and_prefill_costs_more) {
  sim_hw hw = load_hw("h100-sxm");
  sim_layout l = layout(1, 1);
  double prev = 0;
  for (int ctx = 100; ctx <= 8000; ctx *= 4) {
    sim_seq s = {.start = ctx, .n = 1, .logits = true};
    double t = sim_attention_s(&hw, &l, &s, 1, 32, 8, 128, SIM_BF16);
    cr_assert_gt(t, prev, "context %d", ctx);
    prev = t;
  }
  // Decode at a long context is KV-read bound: the K and V of 8 heads x 128 x bf16 per token.
  sim_seq d = {.start = 7999, .n = 1, .logits = true};
  double kv = 8000 * 2.0 * 8 * 128 * 2 / (hw.mem_bw * hw.mem_eff);
  assert_near(sim_attention_s(&hw, &l, &d, 1, 32, 8, 128, SIM_BF16), kv + hw.launch_s, 0.01,
              "decode at 8000 tokens");
  // A long prefill is compute bound: 4 n (n/2) hd heads FLOP at gemm_eff(4096) = 0.75 of peak.
  sim_seq big = {.start = 0, .n = 4096};
  double flops = 4.0 * 4096 * 2048 * 128 * 32;
  assert_near(sim_attention_s(&hw, &l, &big, 1, 32, 8, 128, SIM_BF16),
              flops / (hw.flops_bf16 * 0.75) + hw.launch_s, 1e-9, "prefill of 4096 tokens");
  sim_seq p = {.start = 0, .n = 512, .logits = true}, one = {.start = 511, .n = 1};
  cr_assert_gt(sim_attention_s(&hw, &l, &p, 1, 32, 8, 128, SIM_BF16),
               sim_attention_s(&hw, &l, &one, 1, 32, 8, 128, SIM_BF16));
  sim_model m = load_model("llama3-8b", SC_BF16);
  cr_assert_gt(price(&hw, &m, &l, &p, 1).total_s, 2 * price(&hw, &m, &l, &one, 1).total_s);
}

// --- 6. measured tables and curves

Test(sim_cost, curve_eff_is_linear_in_log_x_and_flat_beyond_the_ends) {
  sim_curve c = {.n = 2, .x = {1, 100}, .y = {0.1, 0.5}};
  assert_near(sim_curve_eff(&c, 10, -1), 0.3, 1e-12, "midpoint in log x");
  cr_assert_eq(sim_curve_eff(&c, 0.5, -1), 0.1);
  cr_assert_eq(sim_curve_eff(&c, 1000, -1), 0.5);
  cr_assert_eq(sim_curve_eff(&c, 100, -1), 0.5);
  sim_curve none = {0};
  cr_assert_eq(sim_curve_eff(&none, 10, 0.7), 0.7);
}

Test(sim_cost, curve_time_is_log_log_and_proportional_beyond_the_last_point) {
  sim_curve c = {.n = 3, .x = {10, 1000, 4000}, .y = {1e-3, 1e-1, 2e-1}};
  assert_near(sim_curve_time(&c, 100), 1e-2, 1e-12, "log-log midpoint");
  assert_near(sim_curve_time(&c, 2000), 1e-1 * sqrt(2), 1e-12, "second segment");
  assert_near(sim_curve_time(&c, 8000), 4e-1, 1e-12, "proportional beyond the last point");
  cr_assert_eq(sim_curve_time(&c, 1), 1e-3);
  sim_curve none = {0};
  cr_assert_lt(sim_curve_time(&none, 10), 0);
}

Test(sim_cost, measured_gemm_table_wins_over_the_roofline) {
  sim_hw hw = load_hw("h100-sxm");
  sim_layout l = layout(1, 1);
  double roof = sim_gemm_s(&hw, &l, 8, 4096, 4096, SIM_BF16, SIM_BF16);
  hw.gemm[0] = (sim_gemm_table){
      .n = 4096, .k = 4096, .threads = 3, .t = {.n = 2, .x = {1, 64}, .y = {1e-3, 2e-3}}};
  hw.n_gemm = 1;
  // GPU profile: the table's thread count does not matter.
  cr_assert_eq(sim_gemm_s(&hw, &l, 1, 4096, 4096, SIM_BF16, SIM_BF16), 1e-3);
  assert_near(sim_gemm_s(&hw, &l, 8, 4096, 4096, SIM_BF16, SIM_BF16), 1e-3 * sqrt(2), 1e-12,
              "m = 8");
  assert_near(sim_gemm_s(&hw, &l, 128, 4096, 4096, SIM_BF16, SIM_BF16), 4e-3, 1e-12, "m = 128");
  // other shapes keep the roofline
  cr_assert_lt(sim_gemm_s(&hw, &l, 8, 4096, 1024, SIM_BF16, SIM_BF16), roof);
  // o_proj of llama3-8b is (4096, 4096): 32 layers x 1 ms at batch 1 land in the step
  sim_model m = load_model("llama3-8b", SC_BF16);
  sim_seq s;
  decode_batch(&s, 1, 100);
  sim_step_cost c = price(&hw, &m, &l, &s, 1);
  cr_assert_gt(c.total_s, 32e-3);
  cr_assert_lt(c.total_s, 32e-3 + 0.01);
}

Test(sim_cost, measured_attention_and_allreduce_tables_win) {
  sim_hw hw = load_hw("h100-sxm");
  sim_layout l = layout(1, 1);
  hw.attn[0] = (sim_attn_table){.heads = 32,
                                .kv_heads = 8,
                                .head_dim = 128,
                                .threads = 1,
                                .decode = {.n = 2, .x = {100, 1000}, .y = {1e-5, 1e-4}},
                                .prefill = {.n = 2, .x = {100, 1000}, .y = {1e-3, 1e-1}}};
  hw.n_attn = 1;
  sim_seq d = {.start = 99, .n = 1}, p = {.start = 0, .n = 1000}, chunk = {.start = 100, .n = 900};
  cr_assert_eq(sim_attention_s(&hw, &l, &d, 1, 32, 8, 128, SIM_BF16), 1e-5);
  cr_assert_eq(sim_attention_s(&hw, &l, &p, 1, 32, 8, 128, SIM_BF16), 1e-1);
  // a chunk at start 100: prefill(1000) - prefill(100)
  assert_near(sim_attention_s(&hw, &l, &chunk, 1, 32, 8, 128, SIM_BF16), 1e-1 - 1e-3, 1e-12,
              "chunk");
  // other head counts keep the roofline
  cr_assert_lt(sim_attention_s(&hw, &l, &d, 1, 16, 4, 128, SIM_BF16), 1e-5);

  hw.coll[0] =
      (sim_coll_table){.ranks = 2, .allreduce = {.n = 2, .x = {1e3, 1e6}, .y = {1e-5, 1e-4}}};
  hw.n_coll = 1;
  cr_assert_eq(sim_allreduce_s(&hw, 0, 2, 1e6), 1e-4);
  cr_assert_lt(sim_allreduce_s(&hw, 0, 4, 1e6),
               1e-4); // no table for 4 ranks: the formula
}

// --- 7. topology and CPU sharing

Test(sim_cost, group_crossing_nodes_costs_more_than_one_inside) {
  sim_hw hw = load_hw("h100-sxm");
  double bytes = 1 << 20;
  cr_assert_gt(sim_allreduce_s(&hw, 4, 8, bytes), sim_allreduce_s(&hw, 0, 8, bytes));
  cr_assert_gt(sim_allreduce_s(&hw, 0, 16, bytes), 2 * sim_allreduce_s(&hw, 0, 8, bytes));
  cr_assert_gt(sim_allgather_s(&hw, 6, 4, bytes), sim_allgather_s(&hw, 8, 4, bytes));
  assert_near(sim_sendrecv_s(&hw, 7, 8, bytes), bytes / hw.inter.bw + hw.inter.latency_s, 1e-12,
              "sendrecv across nodes");
  assert_near(sim_sendrecv_s(&hw, 6, 7, bytes), bytes / hw.intra.bw + hw.intra.latency_s, 1e-12,
              "sendrecv inside a node");
  // a small message on 4 ranks takes the tree: 2 log2(4) latencies + 2 bytes / bw
  assert_near(sim_allreduce_s(&hw, 0, 4, 16384), 4 * hw.intra.latency_s + 2 * 16384 / hw.intra.bw,
              1e-12, "tree");
  // 2 ranks: the ring (bytes / bw + 2 latencies) always wins
  assert_near(sim_allreduce_s(&hw, 0, 2, 16384), 16384 / hw.intra.bw + 2 * hw.intra.latency_s,
              1e-12, "ring of 2");
  // all-gather of a 1 MiB result on 4 ranks: 3/4 of it in, 3 latencies
  assert_near(sim_allgather_s(&hw, 0, 4, bytes),
              0.75 * bytes / hw.intra.bw + 3 * hw.intra.latency_s, 1e-12, "all-gather");
  // ring all-reduce inside a node, large message: 2(n-1)/n bytes/bw + 2(n-1) latency
  assert_near(sim_allreduce_s(&hw, 0, 8, 1e9),
              2 * 7.0 / 8 * 1e9 / hw.intra.bw + 14 * hw.intra.latency_s, 1e-12, "ring");

  sim_model m = load_model("llama3-70b", SC_BF16);
  sim_seq s[32];
  decode_batch(s, 32, 500);
  sim_layout in = layout(8, 1), across = layout(8, 1), tp16 = layout(16, 1);
  across.first_gpu = 4;
  double t_in = price(&hw, &m, &in, s, 32).total_s;
  cr_assert_gt(price(&hw, &m, &across, s, 32).total_s, t_in);
  cr_assert_gt(price(&hw, &m, &tp16, s, 32).total_s, t_in);
}

Test(sim_cost, each_pp_stage_prices_its_own_tp_group_and_transfer_links) {
  sim_hw hw = load_hw("h100-sxm");
  sim_model m = load_model("llama3-8b", SC_BF16);
  sim_seq s[8];
  decode_batch(s, 8, 200);
  // tp=4 x pp=2 on 8-GPU nodes: stage s holds GPUs first + 4s .. first + 4s + 3
  sim_layout inside = layout(4, 2), hop = layout(4, 2), split = layout(4, 2);
  hop.first_gpu = 4;   // stages on GPUs 4-7 and 8-11: only the transfer crosses nodes
  split.first_gpu = 2; // stage 1 on GPUs 6-9: its all-reduces cross nodes
  sim_step_cost c_in = price(&hw, &m, &inside, s, 8), c_hop = price(&hw, &m, &hop, s, 8);
  sim_step_cost c_split = price(&hw, &m, &split, s, 8);
  // the transfer of 4 tokens x dim bf16 (2 micro-batches) moves from NVLink to InfiniBand
  double bytes = 4.0 * m.dim * 2;
  double dx = bytes / hw.inter.bw + hw.inter.latency_s - bytes / hw.intra.bw - hw.intra.latency_s;
  cr_assert_gt(c_hop.total_s, c_in.total_s + dx * 0.99);
  cr_assert_lt(c_hop.total_s, c_in.total_s + 2 * dx * 1.01);
  cr_assert_gt(c_split.total_s, c_hop.total_s);
}

Test(sim_cost, cpu_profile_oversubscription_multiplies_every_op) {
  sim_hw hw = load_hw("cpu");
  hw.host_cores = 2;
  sim_layout fits = {.tp = 2, .pp = 1, .threads = 1, .cluster_ranks = 2};
  sim_layout over = {.tp = 2, .pp = 1, .threads = 2, .cluster_ranks = 4};  // 8 / 2 cores = 4x
  sim_layout under = {.tp = 1, .pp = 1, .threads = 1, .cluster_ranks = 1}; // never below 1x
  double g = sim_gemm_s(&hw, &fits, 16, 1024, 1024, SIM_F32, SIM_F32);
  assert_near(sim_gemm_s(&hw, &over, 16, 1024, 1024, SIM_F32, SIM_F32), 4 * g, 1e-12, "gemm");
  assert_near(sim_gemm_s(&hw, &under, 16, 1024, 1024, SIM_F32, SIM_F32), g, 1e-12, "gemm 1x");
  double e = sim_elementwise_s(&hw, &fits, 1e6);
  assert_near(sim_elementwise_s(&hw, &over, 1e6), 4 * e, 1e-12, "elementwise");
  sim_seq s = {.start = 10, .n = 4};
  double a = sim_attention_s(&hw, &fits, &s, 1, 4, 2, 64, SIM_F32);
  assert_near(sim_attention_s(&hw, &over, &s, 1, 4, 2, 64, SIM_F32), 4 * a, 1e-12, "attention");
  // a measured table taken at another thread count does not apply on a CPU profile
  hw.gemm[0] =
      (sim_gemm_table){.n = 1024, .k = 1024, .threads = 2, .t = {.n = 1, .x = {16}, .y = {5.0}}};
  hw.n_gemm = 1;
  cr_assert_eq(sim_gemm_s(&hw, &over, 16, 1024, 1024, SIM_F32, SIM_F32), 20.0);
  assert_near(sim_gemm_s(&hw, &fits, 16, 1024, 1024, SIM_F32, SIM_F32), g, 1e-12, "threads 1");
}

Test(sim_cost, curve_lin_is_linear_in_x_and_flat_beyond_the_ends) {
  sim_curve c = {.n = 3, .x = {1, 4, 16}, .y = {1e-3, -5e-4, 2e-3}};
  assert_near(sim_curve_lin(&c, 2, 9), 5e-4, 1e-12, "a third of the way from 1 to 4");
  assert_near(sim_curve_lin(&c, 10, 9), 7.5e-4, 1e-12, "half way from 4 to 16");
  cr_assert_eq(sim_curve_lin(&c, 0.5, 9), 1e-3);
  cr_assert_eq(sim_curve_lin(&c, 64, 9), 2e-3);
  sim_curve none = {0};
  cr_assert_eq(sim_curve_lin(&none, 3, 9), 9);
}

// The measured residual of a layout (TP degree, replicas on the host) prices it by the rows of
// the step; a layout without a table keeps step_overhead_s.
Test(sim_cost, step_overhead_table_prices_its_layout_by_rows) {
  sim_hw hw = load_hw("cpu");
  hw.host_cores = 2;
  hw.step_overhead_s = 7e-3;
  hw.overhead[0] = (sim_overhead_table){.tp = 1, .s = {.n = 3, .x = {1, 4, 16},
                                                       .y = {1e-3, -5e-4, 2e-3}}};
  hw.n_overhead = 1;
  sim_model m = load_model("llama-small", SC_F32);
  sim_layout alone = {.tp = 1, .pp = 1, .threads = 2, .cluster_ranks = 1};
  sim_layout dp2 = {.tp = 1, .pp = 1, .threads = 1, .cluster_ranks = 2};
  sim_layout tp2 = {.tp = 2, .pp = 1, .threads = 1, .cluster_ranks = 2};
  sim_seq s[64];
  const struct {
    int n;
    double residual;
  } want[] = {{1, 1e-3}, {2, 5e-4}, {4, -5e-4}, {10, 7.5e-4}, {64, 2e-3}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    decode_batch(s, want[i].n, 20);
    sim_hw bare = hw;
    bare.n_overhead = 0;
    bare.step_overhead_s = 0;
    double ops = price(&bare, &m, &alone, s, want[i].n).total_s;
    sim_step_cost c = price(&hw, &m, &alone, s, want[i].n);
    assert_near(c.total_s, ops + want[i].residual, 1e-9, "tp1 alone");
    assert_near(c.compute_s + c.comm_s + c.overhead_s, c.total_s, 1e-9, "breakdown");
    // a replica sharing the host, or a TP degree without a table: the scalar
    double ops_dp = price(&bare, &m, &dp2, s, want[i].n).total_s;
    assert_near(price(&hw, &m, &dp2, s, want[i].n).total_s, ops_dp + 7e-3, 1e-9, "dp2");
    double ops_tp = price(&bare, &m, &tp2, s, want[i].n).total_s;
    assert_near(price(&hw, &m, &tp2, s, want[i].n).total_s, ops_tp + 7e-3, 1e-9, "tp2");
  }
  // a prefill chunk counts its tokens as rows
  sim_seq chunk = {.start = 0, .n = 10, .logits = true};
  sim_hw bare = hw;
  bare.n_overhead = 0;
  bare.step_overhead_s = 0;
  assert_near(price(&hw, &m, &alone, &chunk, 1).total_s,
              price(&bare, &m, &alone, &chunk, 1).total_s + 7.5e-4, 1e-9, "10-token chunk");
  // a table of tp1 x 2 replicas prices dp2 (and only dp2)
  hw.overhead[1] = (sim_overhead_table){.tp = 1, .replicas = 2,
                                        .s = {.n = 1, .x = {1}, .y = {3e-3}}};
  hw.n_overhead = 2;
  decode_batch(s, 4, 20);
  assert_near(price(&hw, &m, &dp2, s, 4).total_s, price(&bare, &m, &dp2, s, 4).total_s + 3e-3,
              1e-9, "dp2 table");
  assert_near(price(&hw, &m, &alone, s, 4).total_s,
              price(&bare, &m, &alone, s, 4).total_s - 5e-4, 1e-9, "tp1 alone keeps its own");
  // one replica of a dp deployment running alone has 1 thread; the tp1 table is at 2
  sim_layout lone = {.tp = 1, .pp = 1, .threads = 1, .cluster_ranks = 1};
  assert_near(price(&hw, &m, &lone, s, 4).total_s, price(&bare, &m, &lone, s, 4).total_s + 7e-3,
              1e-9, "tp1 at 1 thread: the scalar");
  sim_layout dp4 = {.tp = 1, .pp = 1, .threads = 1, .cluster_ranks = 4};
  assert_near(price(&hw, &m, &dp4, s, 4).total_s, price(&bare, &m, &dp4, s, 4).total_s + 7e-3,
              1e-9, "dp4: no table, the scalar");
  // a residual larger than the ops themselves takes at most half of them
  hw.overhead[0].s.y[0] = -10;
  decode_batch(s, 1, 20);
  double ops = price(&bare, &m, &alone, s, 1).total_s;
  assert_near(price(&hw, &m, &alone, s, 1).total_s, 0.5 * ops, 1e-9, "floor");
}

// A table with a prefill curve prices a step's decodes at its decode rows and adds the prefill
// residual at the step's prompt tokens; a step of decodes alone is priced as without it.
Test(sim_cost, step_overhead_prefill_curve_adds_the_prompt_residual) {
  sim_hw hw = load_hw("cpu");
  hw.host_cores = 2;
  hw.step_overhead_s = 7e-3;
  hw.overhead[0] = (sim_overhead_table){
      .tp = 1, .s = {.n = 3, .x = {1, 4, 16}, .y = {1e-3, -5e-4, 2e-3}},
      .prefill = {.n = 2, .x = {16, 256}, .y = {4e-4, 2e-3}}};
  hw.n_overhead = 1;
  sim_hw bare = hw;
  bare.n_overhead = 0;
  bare.step_overhead_s = 0;
  sim_model m = load_model("llama-small", SC_F32);
  sim_layout alone = {.tp = 1, .pp = 1, .threads = 2, .cluster_ranks = 1};
  sim_seq s[8];
  decode_batch(s, 4, 20);
  assert_near(price(&hw, &m, &alone, s, 4).total_s, price(&bare, &m, &alone, s, 4).total_s - 5e-4,
              1e-9, "decodes alone: s at 4 rows");
  s[4] = (sim_seq){.start = 0, .n = 64, .logits = true}; // 4 decodes and a 64-token prompt
  // s(4) + prefill(64): a fifth of the way from 16 to 256
  assert_near(price(&hw, &m, &alone, s, 5).total_s,
              price(&bare, &m, &alone, s, 5).total_s - 5e-4 + 7.2e-4, 1e-9, "4 decodes + 64");
  sim_seq chunk = {.start = 0, .n = 256, .logits = true}; // a prompt alone: s at 1 row
  assert_near(price(&hw, &m, &alone, &chunk, 1).total_s,
              price(&bare, &m, &alone, &chunk, 1).total_s + 1e-3 + 2e-3, 1e-9, "prompt alone");
  sim_hw scaled = hw; // a price change scales the prefill curve with the rest
  sim_hw_scale(&scaled, 2);
  cr_expect_float_eq(scaled.overhead[0].prefill.y[1], 4e-3, 1e-12);
}

// --- 8. invalid arguments

Test(sim_cost, invalid_arguments_return_minus_one) {
  sim_hw hw = load_hw("h100-sxm");
  sim_model m = load_model("llama3-8b", SC_BF16);
  sim_layout l = layout(1, 1);
  sim_seq s[300];
  decode_batch(s, 300, 10);
  int one[] = {0, 1}, two[] = {0, 1, 2}, bad[] = {0, 0, 2};
  sim_step_cost c;
  cr_assert_eq(sim_step_price(&hw, &m, &l, s, 1, one, 1, &c), 0);
  cr_assert_eq(sim_step_price(NULL, &m, &l, s, 1, one, 1, &c), -1);
  cr_assert_eq(sim_step_price(&hw, &m, &l, s, 1, one, 1, NULL), -1);
  cr_assert_eq(sim_step_price(&hw, &m, &l, s, 0, one, 1, &c), -1);
  cr_assert_eq(sim_step_price(&hw, &m, &l, s, 1, one, 0, &c), -1);
  cr_assert_eq(sim_step_price(&hw, &m, &l, s, 1, two, 2, &c), -1); // n_mb > n
  cr_assert_eq(sim_step_price(&hw, &m, &l, s, 2, bad, 2, &c),
               -1); // empty micro-batch
  cr_assert_eq(sim_step_price(&hw, &m, &l, s, 300, NULL, 1, &c), 0); // big batches are fine
  int mb[66];
  for (int i = 0; i < 66; i++) mb[i] = i;
  sim_layout deep = layout(1, 65);
  cr_assert_eq(sim_step_price(&hw, &m, &deep, s, 65, mb, 65, &c), -1); // 65 micro-batches
  sim_layout tp0 = layout(0, 1), pp0 = layout(1, 0), tp3 = layout(3, 1), pp99 = layout(1, 99);
  cr_assert_eq(sim_step_price(&hw, &m, &tp0, s, 1, one, 1, &c), -1);
  cr_assert_eq(sim_step_price(&hw, &m, &pp0, s, 1, one, 1, &c), -1);
  cr_assert_eq(sim_step_price(&hw, &m, &tp3, s, 1, one, 1, &c),
               -1); // 3 does not divide 32
  cr_assert_eq(sim_step_price(&hw, &m, &pp99, s, 1, one, 1, &c),
               -1); // more stages than layers
  sim_seq neg = {.start = -1, .n = 1}, empty = {.start = 0, .n = 0};
  cr_assert_eq(sim_step_price(&hw, &m, &l, &neg, 1, one, 1, &c), -1);
  cr_assert_eq(sim_step_price(&hw, &m, &l, &empty, 1, one, 1, &c), -1);
  cr_assert_eq(sim_gemm_s(&hw, &l, 1, 0, 16, SIM_BF16, SIM_BF16), -1);
  cr_assert_eq(sim_attention_s(&hw, &l, s, 0, 32, 8, 128, SIM_BF16), -1);
  cr_assert_eq(sim_elementwise_s(&hw, &l, -1), -1);
  cr_assert_eq(sim_allreduce_s(&hw, 0, 0, 16), -1);
  cr_assert_eq(sim_allgather_s(&hw, -1, 2, 16), -1);
  cr_assert_eq(sim_sendrecv_s(&hw, 0, 1, -5), -1);
}

// sim_hw_scale: every step of every layout takes f times as long, on a GPU roofline profile and
// on the measured CPU profile (GEMM, attention, all-reduce and step-overhead tables).
Test(sim_cost, scaling_every_price_scales_every_step) {
  hw_profile cpu;
  sc_error err = {{0}};
  cr_assert_eq(hw_profile_load("cpu", &cpu, &err), SC_OK, "%s", err.msg);
  cr_assert(cpu.sim.n_gemm > 0 && cpu.sim.n_attn > 0 && cpu.sim.n_coll > 0 &&
            cpu.sim.n_overhead > 0);
  struct {
    sim_hw hw;
    const char *preset;
    sc_dtype w;
    int threads;
  } cases[] = {{load_hw("h100-sxm"), "llama3-8b", SC_BF16, 1},
               {cpu.sim, "llama-small", SC_F32, 1},
               {cpu.sim, "llama-small", SC_F32, 2}};
  sim_seq dec[32], mixed[3] = {{.start = 0, .n = 300, .logits = true},
                               {.start = 40, .n = 1, .logits = true},
                               {.start = 900, .n = 1, .logits = true}};
  decode_batch(dec, 32, 500);
  const int lay[][2] = {{1, 1}, {2, 1}, {4, 1}, {2, 2}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    sim_model m = load_model(cases[c].preset, cases[c].w);
    for (int f = 0; f < 2; f++) {
      double k = f ? 1.02 : 0.95;
      sim_hw scaled = cases[c].hw;
      sim_hw_scale(&scaled, k);
      for (size_t i = 0; i < sizeof lay / sizeof lay[0]; i++) {
        sim_layout l = layout(lay[i][0], lay[i][1]);
        l.threads = cases[c].threads;
        for (int b = 1; b <= 32; b *= 2) {
          double want = price(&cases[c].hw, &m, &l, dec, b).total_s * k;
          assert_near(price(&scaled, &m, &l, dec, b).total_s, want, 1e-12, "decode step");
        }
        double want = price(&cases[c].hw, &m, &l, mixed, 3).total_s * k;
        assert_near(price(&scaled, &m, &l, mixed, 3).total_s, want, 1e-12, "prefill chunk");
      }
    }
  }
}
