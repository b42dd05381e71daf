// Tests for model presets, hardware profiles, the strict YAML reader, the memory planner and
// `shardcheck plan`. Expected figures are public arithmetic (parameter counts x dtype bytes);
// the tolerances say how far the planner's extra terms (norms, scales) may move them.
//
// Not here: config.json reading and model_config_check themselves (tests of engine/model.c),
// the shard plan's slices (tests of engine/shard.c).
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "config/hardware.h"
#include "config/presets.h"
#include "engine/memplan.h"
#include "engine/model.h"
#include "engine/shard.h"
#include "config/yaml_map.h"
#include "tests/helpers.h"

// --- helpers

static model_config preset(const char *name) {
  model_config m;
  sc_error err = {{0}};
  sc_status s = model_preset_load(name, &m, &err);
  cr_assert_eq(s, SC_OK, "preset %s: %s", name, err.msg);
  return m;
}

static hw_profile profile(const char *name) {
  hw_profile hw;
  sc_error err = {{0}};
  sc_status s = hw_profile_load(name, &hw, &err);
  cr_assert_eq(s, SC_OK, "profile %s: %s", name, err.msg);
  return hw;
}

static memplan_layout eval(const char *model, const char *gpu, sc_dtype dt, int tp, int pp,
                           int dp) {
  model_config m = preset(model);
  hw_profile hw = profile(gpu);
  memplan_params p = memplan_defaults();
  p.weight_dtype = dt;
  memplan_layout l;
  cr_assert_eq(memplan_eval(&m, &hw, &p, tp, pp, dp, &l), SC_OK);
  return l;
}

// Enumerates model on up to gpus GPUs of gpu at dt; returns the recommended index.
static int plan(const char *model, const char *gpu, sc_dtype dt, int gpus, memplan_layout *l,
                int cap, int *n) {
  model_config m = preset(model);
  hw_profile hw = profile(gpu);
  memplan_params p = memplan_defaults();
  p.weight_dtype = dt;
  *n = memplan_enumerate(&m, &hw, &p, gpus, l, cap);
  cr_assert_leq(*n, cap);
  return memplan_recommend(l, *n, gpus, hw.gpus_per_node);
}

// Writes text to <tag>.yaml in a fresh directory; returns its path.
static const char *write_yaml(const char *tag, const char *text) {
  char name[256];
  snprintf(name, sizeof name, "%s.yaml", tag);
  return sc_test_write_tmp(tag, name, text);
}

static const char *good_profile =
    "name: test-gpu\n"
    "description: \"a test profile\"\n"
    "mem_bytes: 85899345920\n"
    "mem_bw: 3.35e12\n"
    "flops_bf16: 989.4e12\n"
    "flops_fp16: 989.4e12\n"
    "flops_fp32: 67e12\n"
    "flops_int8: 1979e12\n"
    "link: nvlink4\n"
    "link_bw: 450e9\n"
    "link_latency_s: 2e-6\n"
    "gpus_per_node: 8\n";

// --- presets

Test(presets, every_preset_loads_passes_check_and_is_named_after_its_file) {
  const char *names[64];
  int n = model_preset_names(names, 64);
  cr_assert_geq(n, 6, "only %d presets", n);
  const char *required[] = {"llama-tiny", "llama-small", "llama2-7b",
                            "llama3-8b",  "llama3-70b",  "mistral-7b"};
  for (size_t r = 0; r < sizeof required / sizeof required[0]; r++) {
    bool found = false;
    for (int i = 0; i < n; i++) found = found || !strcmp(names[i], required[r]);
    cr_assert(found, "preset %s missing", required[r]);
  }
  for (int i = 0; i < n; i++) {
    model_config m = preset(names[i]);
    sc_error err = {{0}};
    cr_assert_eq(model_config_check(&m, names[i], &err), SC_OK, "%s: %s", names[i], err.msg);
    cr_assert_str_eq(m.name, names[i]);
  }
}

Test(presets, real_models_have_their_published_parameter_counts) {
  // Published sizes: Llama 2 7B 6.74B, Llama 3 8B 8.03B, Llama 3 70B 70.55B, Mistral 7B 7.24B.
  struct {
    const char *name;
    double billions;
  } want[] = {{"llama2-7b", 6.74}, {"llama3-8b", 8.03}, {"llama3-70b", 70.55},
              {"mistral-7b", 7.24}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    model_config m = preset(want[i].name);
    double b = (double)model_config_n_params(&m) / 1e9;
    cr_assert(b > want[i].billions - 0.01 && b < want[i].billions + 0.01, "%s: %.3fB params",
              want[i].name, b);
  }
}

Test(presets, llama_tiny_is_under_1m_params_and_admits_tp_and_pp_up_to_8) {
  model_config m = preset("llama-tiny");
  cr_assert_lt(model_config_n_params(&m), 1000000u);
  cr_assert_eq(m.dtype, SC_F32);
  for (int tp = 1; tp <= 8; tp *= 2)
    for (int pp = 1; tp * pp <= 8; pp *= 2) {
      sc_error err = {{0}};
      cr_assert_eq(shard_layout_check(&m, tp, pp, &err), SC_OK, "tp=%d pp=%d: %s", tp, pp,
                   err.msg);
    }
}

Test(presets, llama_small_has_30_to_60m_params) {
  model_config m = preset("llama-small");
  uint64_t n = model_config_n_params(&m);
  cr_assert(n >= 30000000u && n <= 60000000u, "%llu params", (unsigned long long)n);
}

Test(presets, a_yaml_path_loads_like_a_preset) {
  const char *path = write_yaml("preset", "name: my-model\n"
                                          "description: x\n"
                                          "vocab_size: 512\ndim: 64\nn_layers: 2\nn_heads: 8\n"
                                          "n_kv_heads: 2\nffn_dim: 128\nmax_seq_len: 256\n"
                                          "rope_theta: 10000\nnorm_eps: 1e-5\n"
                                          "tied_embeddings: true\ndtype: bf16\n"
                                          "bos_token_id: 1\n");
  model_config m;
  sc_error err = {{0}};
  cr_assert_eq(model_preset_load(path, &m, &err), SC_OK, "%s", err.msg);
  cr_assert_str_eq(m.name, "my-model");
  cr_assert_eq(m.head_dim, 8, "head_dim defaults to dim / n_heads");
  cr_assert_eq(m.eos_token_id, -1, "eos_token_id defaults to -1");
  cr_assert(m.tied_embeddings);
  cr_assert_eq(m.dtype, SC_BF16);
}

Test(presets, unknown_preset_lists_the_available_ones) {
  model_config m;
  sc_error err = {{0}};
  cr_assert_eq(model_preset_load("llama9-1t", &m, &err), SC_INVALID);
  cr_assert(strstr(err.msg, "llama9-1t"), "%s", err.msg);
  cr_assert(strstr(err.msg, "llama3-8b") && strstr(err.msg, "llama-tiny"), "%s", err.msg);
}

Test(presets, resolve_names_a_path_that_is_neither_dir_nor_preset) {
  model_config m;
  bool w = true;
  sc_error err = {{0}};
  cr_assert_eq(model_config_resolve("llama3-8b", &m, &w, &err), SC_OK, "%s", err.msg);
  cr_assert_not(w, "a preset has no weights");
  sc_status s = model_config_resolve("/nonexistent/model-dir", &m, &w, &err);
  cr_assert(s == SC_IO || s == SC_INVALID);
  cr_assert(strstr(err.msg, "/nonexistent/model-dir"), "%s", err.msg);
  s = model_config_resolve("no-such-model", &m, &w, &err);
  cr_assert_eq(s, SC_INVALID);
  cr_assert(strstr(err.msg, "no-such-model") && strstr(err.msg, "llama3-70b"), "%s", err.msg);
}

Test(presets, resolve_reads_a_directory_with_config_json) {
  model_config tiny = preset("llama-tiny"), m;
  const char *dir = sc_test_tmpdir("resolve");
  char path[512];
  snprintf(path, sizeof path, "%s/config.json", dir);
  sc_error err = {{0}};
  cr_assert_eq(model_config_write_json(&tiny, path, &err), SC_OK, "%s", err.msg);
  bool w = false;
  cr_assert_eq(model_config_resolve(dir, &m, &w, &err), SC_OK, "%s", err.msg);
  cr_assert(w, "a directory has weights");
  cr_assert_eq(m.dim, tiny.dim);
  cr_assert_eq(m.n_kv_heads, tiny.n_kv_heads);
}

// --- hardware profiles

Test(hardware, every_profile_loads_with_positive_figures) {
  const char *names[64];
  int n = hw_profile_names(names, 64);
  const char *required[] = {"h100-sxm", "h200",    "a100-80g", "l40s",
                            "rtx4090",  "rtx5090", "rtx3050",  "cpu"};
  for (size_t r = 0; r < sizeof required / sizeof required[0]; r++) {
    bool found = false;
    for (int i = 0; i < n; i++) found = found || !strcmp(names[i], required[r]);
    cr_assert(found, "profile %s missing", required[r]);
  }
  for (int i = 0; i < n; i++) {
    hw_profile hw = profile(names[i]);
    cr_assert_str_eq(hw.name, names[i]);
    cr_assert_gt(hw.mem_bytes, 1e9);
    cr_assert_gt(hw.mem_bw, 1e9);
    cr_assert_geq(hw.flops_bf16, hw.flops_fp32 / 100);
    cr_assert_geq(hw.gpus_per_node, 1);
  }
  hw_profile cpu = profile("cpu"); // measured by `shardcheck profile` on a 24 GiB machine
  cr_assert(cpu.mem_bytes > 16.0 * (1 << 30) && cpu.mem_bytes <= 24.0 * (1 << 30), "%g",
            cpu.mem_bytes);
  cr_assert_gt(cpu.sim.host_cores, 0, "a CPU profile says how many cores the ranks share");
  hw_profile h100 = profile("h100-sxm");
  cr_assert_float_eq(h100.flops_bf16, 989.4e12, 1e9, "dense, not with sparsity");
}

Test(hardware, unknown_profile_lists_the_available_ones) {
  hw_profile hw;
  sc_error err = {{0}};
  cr_assert_eq(hw_profile_load("tpu-v9", &hw, &err), SC_INVALID);
  cr_assert(strstr(err.msg, "tpu-v9") && strstr(err.msg, "h100-sxm") && strstr(err.msg, "cpu"),
            "%s", err.msg);
}

Test(hardware, a_profile_path_loads) {
  hw_profile hw;
  sc_error err = {{0}};
  cr_assert_eq(hw_profile_load(write_yaml("good", good_profile), &hw, &err), SC_OK, "%s",
               err.msg);
  cr_assert_str_eq(hw.name, "test-gpu");
  cr_assert_float_eq(hw.mem_bw, 3.35e12, 1.0);
  cr_assert_eq(hw.gpus_per_node, 8);
}

Test(hardware, step_overhead_tables_load_and_bad_ones_are_refused) {
  char text[1200];
  hw_profile hw;
  sc_error err = {{0}};
  snprintf(text, sizeof text,
           "%sstep_overhead:\n  - {tp: 1, s: [[1, 0.001], [4, -0.0005]]}\n"
           "  - {tp: 2, replicas: 2, s: [[1, 0.002]]}\n", good_profile);
  cr_assert_eq(hw_profile_load(write_yaml("overhead", text), &hw, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(hw.sim.n_overhead, 2);
  cr_expect_eq(hw.sim.overhead[0].tp, 1);
  cr_expect_eq(hw.sim.overhead[0].s.n, 2);
  cr_expect_float_eq(hw.sim.overhead[0].s.y[1], -0.0005, 1e-12, "a negative residual loads");
  cr_expect_eq(hw.sim.overhead[0].replicas, 1, "replicas default to 1");
  cr_expect_eq(hw.sim.overhead[1].tp, 2);
  cr_expect_eq(hw.sim.overhead[1].replicas, 2);

  snprintf(text, sizeof text, "%sstep_overhead:\n  - {tp: 1, s: [[1, 0.001], [4, -20]]}\n",
           good_profile);
  cr_assert_eq(hw_profile_load(write_yaml("overhead-big", text), &hw, &err), SC_INVALID);
  cr_assert(strstr(err.msg, "residuals must be seconds in [-10, 10], got -20"), "%s", err.msg);

  snprintf(text, sizeof text, "%sstep_overhead:\n  - {tp: 0, s: [[1, 0.001]]}\n", good_profile);
  cr_assert_eq(hw_profile_load(write_yaml("overhead-tp", text), &hw, &err), SC_INVALID);
  cr_assert(strstr(err.msg, "key 'tp' must be at least 1, got 0"), "%s", err.msg);

  snprintf(text, sizeof text, "%sstep_overhead:\n  - {tp: 1, s: [[4, 0.001], [2, 0.001]]}\n",
           good_profile);
  cr_assert_eq(hw_profile_load(write_yaml("overhead-order", text), &hw, &err), SC_INVALID);
  cr_assert(strstr(err.msg, "strictly increasing"), "%s", err.msg);
}

Test(hardware, unknown_key_is_invalid_with_file_line_col_and_key) {
  char text[1024];
  snprintf(text, sizeof text, "%s  \nmemory_clock: 2619\n", good_profile); // line 13
  const char *path = write_yaml("unknown", text);
  hw_profile hw;
  sc_error err = {{0}};
  cr_assert_eq(hw_profile_load(path, &hw, &err), SC_INVALID);
  char where[600];
  snprintf(where, sizeof where, "%s:14:1:", path);
  cr_assert(strstr(err.msg, where), "want '%s' in: %s", where, err.msg);
  cr_assert(strstr(err.msg, "'memory_clock'"), "%s", err.msg);
  cr_assert(strstr(err.msg, "mem_bw"), "lists the keys: %s", err.msg);
}

Test(hardware, wrong_type_names_the_key_the_expected_type_and_the_value) {
  char text[1024];
  snprintf(text, sizeof text, "%s", good_profile);
  char *at = strstr(text, "gpus_per_node: 8");
  memcpy(at, "gpus_per_node: x", 16);
  const char *path = write_yaml("wrongtype", text);
  hw_profile hw;
  sc_error err = {{0}};
  cr_assert_eq(hw_profile_load(path, &hw, &err), SC_INVALID);
  char where[600];
  snprintf(where, sizeof where, "%s:12:16: key 'gpus_per_node': expected an integer, got 'x'",
           path);
  cr_assert(strstr(err.msg, where), "want '%s' in: %s", where, err.msg);

  snprintf(text, sizeof text, "%s", good_profile);
  at = strstr(text, "mem_bw: 3.35e12");
  memcpy(at, "mem_bw: \"fast\"", 14);
  memset(at + 14, ' ', 1);
  path = write_yaml("quoted", text);
  cr_assert_eq(hw_profile_load(path, &hw, &err), SC_INVALID);
  cr_assert(strstr(err.msg, "key 'mem_bw': expected a number, got the quoted string 'fast'"),
            "%s", err.msg);
}

Test(hardware, missing_key_and_bad_yaml_are_invalid_and_located) {
  char text[1024];
  snprintf(text, sizeof text, "%s", good_profile);
  char *at = strstr(text, "link_bw:");
  at[0] = '#'; // comment the line out
  const char *path = write_yaml("missing", text);
  hw_profile hw;
  sc_error err = {{0}};
  cr_assert_eq(hw_profile_load(path, &hw, &err), SC_INVALID);
  cr_assert(strstr(err.msg, "missing required key 'link_bw'") && strstr(err.msg, path), "%s",
            err.msg);

  path = write_yaml("syntax", "name: x\n  description: [unclosed\n");
  cr_assert_eq(hw_profile_load(path, &hw, &err), SC_INVALID);
  cr_assert(strstr(err.msg, path) && strstr(err.msg, "invalid YAML"), "%s", err.msg);

  cr_assert_eq(hw_profile_load("/nonexistent/x.yaml", &hw, &err), SC_IO);
  cr_assert(strstr(err.msg, "/nonexistent/x.yaml"), "%s", err.msg);
}

// --- the strict reader on its own

Test(yaml_map, reads_every_type_and_reports_seen_keys) {
  int i = 7;
  double d = 0;
  char s[8] = "";
  bool b = false, seen_i = true, seen_b = false;
  const yaml_map_field f[] = {
      {"i", YAML_MAP_INT, &i, 0, false, NULL, NULL, &seen_i, NULL},
      {"d", YAML_MAP_DOUBLE, &d, 0, true, NULL, NULL, NULL, NULL},
      {"s", YAML_MAP_STRING, s, sizeof s, true, NULL, NULL, NULL, NULL},
      {"b", YAML_MAP_BOOL, &b, 0, true, NULL, NULL, &seen_b, NULL},
  };
  const char *text = "d: 3.35e12\ns: short\nb: true\n";
  sc_error err = {{0}};
  cr_assert_eq(yaml_map_read_string(text, strlen(text), "mem", f, 4, &err), SC_OK, "%s",
               err.msg);
  cr_assert_eq(i, 7, "an absent key keeps its default");
  cr_assert_not(seen_i);
  cr_assert(seen_b && b);
  cr_assert_float_eq(d, 3.35e12, 1.0);
  cr_assert_str_eq(s, "short");
  const char *too_long = "d: 1\ns: much-too-long\nb: false\n";
  cr_assert_eq(yaml_map_read_string(too_long, strlen(too_long), "mem", f, 4, &err), SC_INVALID);
  cr_assert(strstr(err.msg, "mem:2:4: key 's'"), "%s", err.msg);
  const char *dup = "d: 1\nd: 2\ns: x\nb: false\n";
  cr_assert_eq(yaml_map_read_string(dup, strlen(dup), "mem", f, 4, &err), SC_INVALID);
  cr_assert(strstr(err.msg, "mem:2:1: invalid YAML: duplicate key"), "%s", err.msg);
  const char *empty = "# nothing\n";
  cr_assert_eq(yaml_map_read_string(empty, strlen(empty), "mem", f, 4, &err), SC_INVALID);
  cr_assert(strstr(err.msg, "mem: empty document"), "%s", err.msg);
  const char *seq = "- 1\n- 2\n";
  cr_assert_eq(yaml_map_read_string(seq, strlen(seq), "mem", f, 4, &err), SC_INVALID);
  cr_assert(strstr(err.msg, "expected a mapping"), "%s", err.msg);
}

// --- the planner: weights

Test(memplan, weights_at_one_gpu_are_params_times_dtype_bytes) {
  const char *names[64];
  int n = model_preset_names(names, 64);
  for (int i = 0; i < n; i++) {
    model_config m = preset(names[i]);
    memplan_layout l = eval(names[i], "h200", SC_F32, 1, 1, 1);
    cr_assert(l.valid, "%s: %s", names[i], l.why);
    cr_assert_float_eq(l.weight_bytes, 4.0 * (double)model_config_n_params(&m), 1.0, "%s",
                       names[i]);
  }
}

Test(memplan, llama2_7b_fp16_weights_are_13_to_14_5_gb) {
  memplan_layout l = eval("llama2-7b", "h100-sxm", SC_F16, 1, 1, 1);
  cr_assert(l.weight_bytes > 13e9 && l.weight_bytes < 14.5e9, "%.3f GB", l.weight_bytes / 1e9);
  cr_assert(l.fits, "%s", l.why);
}

Test(memplan, llama3_70b_fp16_is_about_141_gb_and_no_one_gpu_layout_fits_an_h100) {
  memplan_layout l = eval("llama3-70b", "h100-sxm", SC_F16, 1, 1, 1);
  cr_assert(l.weight_bytes > 139e9 && l.weight_bytes < 143e9, "%.3f GB", l.weight_bytes / 1e9);
  memplan_layout ls[8];
  int n;
  int best = plan("llama3-70b", "h100-sxm", SC_F16, 1, ls, 8, &n);
  cr_assert_eq(n, 1);
  cr_assert_not(ls[0].fits);
  cr_assert(strstr(ls[0].why, "exceed"), "%s", ls[0].why);
  cr_assert_eq(best, -1);
}

Test(memplan, llama3_70b_int4_is_35_to_40_gb_fits_two_rtx5090_with_tp2_not_one) {
  memplan_layout one = eval("llama3-70b", "rtx5090", SC_I4, 1, 1, 1);
  cr_assert(one.weight_bytes > 35e9 && one.weight_bytes < 40e9, "%.3f GB",
            one.weight_bytes / 1e9);
  cr_assert_not(one.fits);
  memplan_layout two = eval("llama3-70b", "rtx5090", SC_I4, 2, 1, 1);
  cr_assert(two.fits, "%s", two.why);
  cr_assert_float_eq(two.weight_bytes, one.weight_bytes / 2, one.weight_bytes * 0.01);
  memplan_layout ls[8];
  int n;
  int best = plan("llama3-70b", "rtx5090", SC_I4, 2, ls, 8, &n);
  cr_assert_geq(best, 0);
  cr_assert_eq(ls[best].tp, 2);
  cr_assert_eq(ls[best].pp, 1);
  cr_assert_eq(ls[best].dp, 1);
}

Test(memplan, int8_is_about_half_of_bf16_and_embeddings_stay_bf16) {
  memplan_layout b = eval("llama3-8b", "h100-sxm", SC_BF16, 1, 1, 1);
  memplan_layout q = eval("llama3-8b", "h100-sxm", SC_I8, 1, 1, 1);
  model_config m = preset("llama3-8b");
  double table = 2.0 * m.vocab_size * m.dim * 2; // embedding + head at bf16
  double linear_bf16 = b.weight_bytes - table;
  // int8 linear weights are half of bf16 plus 2 bytes per output row: under 0.1% more.
  cr_assert(q.weight_bytes - table > linear_bf16 / 2, "");
  cr_assert(q.weight_bytes - table < linear_bf16 / 2 * 1.001, "%.4f vs %.4f GB",
            (q.weight_bytes - table) / 1e9, linear_bf16 / 2e9);
}

// fp8 weights are planned like int8 (a byte a weight, a scale per row, bf16 tables), and an
// fp8 KV cache holds twice the tokens of a bf16 one in the same bytes.
Test(memplan, fp8_weights_plan_like_int8_and_an_fp8_kv_cache_holds_twice_the_tokens) {
  memplan_layout q = eval("llama3-8b", "h100-sxm", SC_I8, 1, 1, 1);
  memplan_layout f = eval("llama3-8b", "h100-sxm", SC_FP8, 1, 1, 1);
  cr_assert_eq(f.weight_bytes, q.weight_bytes);
  model_config m = preset("llama3-8b");
  hw_profile hw = profile("h100-sxm");
  memplan_params p = memplan_defaults();
  p.weight_dtype = SC_FP8;
  memplan_layout bf, f8;
  cr_assert_eq(memplan_eval(&m, &hw, &p, 1, 1, 1, &bf), SC_OK);
  p.kv_dtype = SC_FP8;
  cr_assert_eq(memplan_eval(&m, &hw, &p, 1, 1, 1, &f8), SC_OK);
  cr_assert_eq(f8.kv_bytes_per_token * 2, bf.kv_bytes_per_token);
  cr_assert_geq(f8.kv_blocks, 2 * bf.kv_blocks - 1, "%lld vs %lld blocks",
                (long long)f8.kv_blocks, (long long)bf.kv_blocks);
}

Test(memplan, pipeline_stages_split_the_layers_and_the_head_sits_on_the_last) {
  memplan_layout one = eval("llama3-70b", "h200", SC_BF16, 1, 1, 1);
  memplan_layout two = eval("llama3-70b", "h200", SC_BF16, 1, 2, 1);
  model_config m = preset("llama3-70b");
  double table = (double)m.vocab_size * m.dim * 2;
  // Each stage holds 40 layers plus one vocab table (embedding on the first, head on the last).
  cr_assert_float_eq(two.weight_bytes, (one.weight_bytes - 2 * table) / 2 + table + m.dim * 2,
                     1e6);
  cr_assert_float_eq(two.kv_bytes_per_token, one.kv_bytes_per_token / 2, 1e-6);
}

Test(memplan, a_tied_head_is_free_on_one_stage_but_not_across_stages) {
  model_config m = preset("llama-tiny");
  m.tied_embeddings = true;
  hw_profile hw = profile("cpu");
  memplan_params p = memplan_defaults();
  p.weight_dtype = SC_F32;
  memplan_layout a, b;
  memplan_eval(&m, &hw, &p, 1, 1, 1, &a);
  cr_assert_float_eq(a.weight_bytes, 4.0 * (double)model_config_n_params(&m), 1.0);
  memplan_eval(&m, &hw, &p, 1, 8, 1, &b); // one layer per stage: the last holds the head
  double table = 4.0 * m.vocab_size * m.dim;
  cr_assert_gt(b.weight_bytes, table, "the last stage holds a copy of the head");
}

Test(memplan, kv_heads_are_replicated_past_n_kv_heads) {
  memplan_layout t8 = eval("llama3-8b", "h100-sxm", SC_BF16, 8, 1, 1);
  memplan_layout t16 = eval("llama3-8b", "h100-sxm", SC_BF16, 16, 1, 1);
  cr_assert(t16.valid, "%s", t16.why);
  // 8 KV heads: one per rank at tp=8 and still one (a replica) at tp=16.
  cr_assert_float_eq(t8.kv_bytes_per_token, t16.kv_bytes_per_token, 1e-9);
  cr_assert_float_eq(t8.kv_bytes_per_token, 2.0 * 32 * 1 * 128 * 2, 1e-9);
}

Test(memplan, invalid_layouts_carry_the_shard_reason) {
  memplan_layout l = eval("llama-tiny", "cpu", SC_F32, 1, 16, 1);
  cr_assert_not(l.valid);
  cr_assert_not(l.fits);
  cr_assert(strstr(l.why, "pp=16"), "%s", l.why);
}

Test(memplan, kv_tokens_are_whole_blocks_and_used_bytes_add_up) {
  memplan_layout l = eval("llama3-8b", "h100-sxm", SC_BF16, 1, 1, 1);
  cr_assert(l.fits, "%s", l.why);
  cr_assert_eq(l.kv_tokens, l.kv_blocks * 16);
  cr_assert_leq((double)l.kv_tokens * l.kv_bytes_per_token, l.kv_bytes);
  hw_profile hw = profile("h100-sxm");
  cr_assert_float_eq(l.used_bytes, hw.mem_bytes * 0.9, 1.0);
  // 32 layers x 8 KV heads x 128 x 2 (K and V) x 2 bytes = 128 KiB per token
  cr_assert_float_eq(l.kv_bytes_per_token, 131072.0, 1e-9);
}

Test(memplan, enumerate_lists_every_layout_in_a_stable_order) {
  memplan_layout ls[64];
  int n;
  plan("llama-tiny", "cpu", SC_F32, 4, ls, 64, &n);
  // gpus 1: 1x1x1; 2: dp2, pp2, tp2; 3: dp3, pp3; 4: six (tp1: pp1,2,4; tp2: pp1,2; tp4)
  cr_assert_eq(n, 12);
  for (int i = 1; i < n; i++) {
    const memplan_layout *a = &ls[i - 1], *b = &ls[i];
    bool ordered = a->gpus < b->gpus || (a->gpus == b->gpus && a->tp < b->tp) ||
                   (a->gpus == b->gpus && a->tp == b->tp && a->pp < b->pp);
    cr_assert(ordered, "layout %d out of order", i);
    cr_assert_eq(b->gpus, b->tp * b->pp * b->dp);
  }
  model_config m = preset("llama-tiny");
  hw_profile hw = profile("cpu");
  memplan_params p = memplan_defaults();
  cr_assert_eq(memplan_enumerate(&m, &hw, &p, 8, NULL, 0), 32, "counting with cap 0");
}

// --- the planner: recommendations

Test(memplan, recommends_pure_dp_for_llama3_8b_on_4_h100) {
  memplan_layout ls[32];
  int n;
  int best = plan("llama3-8b", "h100-sxm", SC_BF16, 4, ls, 32, &n);
  cr_assert_geq(best, 0);
  cr_assert_eq(ls[best].tp, 1);
  cr_assert_eq(ls[best].pp, 1);
  cr_assert_eq(ls[best].dp, 4);
  cr_assert(strstr(ls[best].why, "pure DP"), "%s", ls[best].why);
}

// The rule (memplan.h): the smallest TP within a node that fits, GPUs left over as DP. At
// bf16, 70B needs 70.6 GB per GPU at tp=2, which fits an H100's 77.3 usable GB with 4.6 GB
// of KV (28k tokens, three full 8192-token contexts): tp=2 x dp=2, not tp=4.
Test(memplan, recommends_tp2_dp2_for_llama3_70b_bf16_on_4_h100) {
  memplan_layout ls[32];
  int n;
  int best = plan("llama3-70b", "h100-sxm", SC_BF16, 4, ls, 32, &n);
  cr_assert_geq(best, 0);
  cr_assert_eq(ls[best].tp, 2);
  cr_assert_eq(ls[best].pp, 1);
  cr_assert_eq(ls[best].dp, 2);
  cr_assert(strstr(ls[best].why, "smallest tensor-parallel"), "%s", ls[best].why);
}

Test(memplan, recommends_pipeline_stages_when_no_tp_within_a_node_fits) {
  // 70B at bf16 on rtx4090 (24 GiB, 4 per node): tp=4 holds 35 GB per GPU, too much, so a
  // replica needs 8 GPUs: tp=4 x pp=2.
  memplan_layout ls[64];
  int n;
  int best = plan("llama3-70b", "rtx4090", SC_BF16, 8, ls, 64, &n);
  cr_assert_geq(best, 0);
  cr_assert_eq(ls[best].tp * ls[best].pp, 8);
  cr_assert_leq(ls[best].tp, 4, "TP stays within a node");
  cr_assert(strstr(ls[best].why, "pipeline"), "%s", ls[best].why);
}

Test(memplan, recommends_none_when_nothing_fits) {
  memplan_layout ls[32];
  int n;
  cr_assert_eq(plan("llama3-70b", "rtx3050", SC_BF16, 4, ls, 32, &n), -1);
}

// --- the CLI (skipped when the binary is not built)

static bool have_binary(void) { return access(SC_BINARY, X_OK) == 0; }

Test(plan_cli, help_exits_0_and_bad_input_exits_2_naming_it) {
  if (!have_binary()) cr_skip_test("shardcheck binary not built");
  static char out[1 << 16];
  cr_assert_eq(sc_test_run_cli("plan --help", out, sizeof out), 0, "%s", out);
  cr_assert(strstr(out, "--headroom") && strstr(out, "h100-sxm"), "%s", out);
  cr_assert_eq(sc_test_run_cli("plan --model nope --gpu h100-sxm --gpus 4", out, sizeof out), 2);
  cr_assert(strstr(out, "nope") && strstr(out, "llama3-8b"), "%s", out);
  cr_assert_eq(sc_test_run_cli("plan --model llama3-8b --gpu tpu --gpus 4", out, sizeof out), 2);
  cr_assert(strstr(out, "tpu") && strstr(out, "h100-sxm"), "%s", out);
  cr_assert_eq(sc_test_run_cli("plan --model llama3-8b --gpu h100-sxm --gpus zero", out,
                               sizeof out),
               2);
  cr_assert(strstr(out, "--gpus") && strstr(out, "zero"), "%s", out);
  cr_assert_eq(sc_test_run_cli("plan --model llama3-8b --gpu h100-sxm --gpus 4 --dtype fp6",
                               out, sizeof out),
               2);
  cr_assert(strstr(out, "--dtype") && strstr(out, "fp6"), "%s", out);
  cr_assert_eq(sc_test_run_cli("plan --model llama3-8b --gpu h100-sxm --gpus 4 --kv-cache-dtype "
                               "int8",
                               out, sizeof out),
               2);
  cr_assert(strstr(out, "--kv-cache-dtype") && strstr(out, "int8"), "%s", out);
  cr_assert_eq(sc_test_run_cli("plan --model llama3-8b --gpu h100-sxm --gpus 4 --bogus", out,
                               sizeof out),
               2);
  cr_assert(strstr(out, "--bogus"), "%s", out);
  cr_assert_eq(sc_test_run_cli("plan --model llama3-8b --gpu h100-sxm", out, sizeof out), 2);
  cr_assert(strstr(out, "--gpus"), "%s", out);
}

Test(plan_cli, table_names_the_unit_and_the_recommendation) {
  if (!have_binary()) cr_skip_test("shardcheck binary not built");
  static char out[1 << 16];
  int rc = sc_test_run_cli("plan --model llama3-70b --gpu h100-sxm --gpus 4", out, sizeof out);
  cr_assert_eq(rc, 0, "%s", out);
  cr_assert(strstr(out, "1 GB = 1e9 bytes"), "%s", out);
  cr_assert(strstr(out, "recommended: tp=2 pp=1 dp=2:"), "%s", out);
}

Test(plan_cli, json_is_one_object_with_layouts_and_the_recommendation) {
  if (!have_binary()) cr_skip_test("shardcheck binary not built");
  static char out[1 << 18];
  int rc = sc_test_run_cli("plan --model llama3-70b --gpu rtx5090 --gpus 2 --dtype int4 --json",
                           out, sizeof out);
  cr_assert_eq(rc, 0, "%s", out);
  json_error_t je;
  json_t *root = json_loads(out, 0, &je);
  cr_assert(root, "not JSON: %s\n%s", je.text, out);
  cr_assert_str_eq(json_string_value(json_object_get(root, "model")), "llama3-70b");
  cr_assert_str_eq(json_string_value(json_object_get(root, "gpu")), "rtx5090");
  cr_assert_str_eq(json_string_value(json_object_get(root, "dtype")), "int4");
  cr_assert_eq(json_integer_value(json_object_get(root, "gpus")), 2);
  cr_assert_eq(json_integer_value(json_object_get(root, "context")), 8192);
  cr_assert_eq(json_array_size(json_object_get(root, "layouts")), 4);
  json_t *rec = json_object_get(root, "recommended");
  cr_assert(json_is_object(rec));
  cr_assert_eq(json_integer_value(json_object_get(rec, "tp")), 2);
  json_decref(root);

  rc = sc_test_run_cli("plan --model llama3-70b --gpu h100-sxm --gpus 2 --dtype fp8 "
                       "--kv-cache-dtype fp8 --json",
                       out, sizeof out);
  cr_assert_eq(rc, 0, "%s", out);
  root = json_loads(out, 0, &je);
  cr_assert(root, "not JSON: %s\n%s", je.text, out);
  cr_assert_str_eq(json_string_value(json_object_get(root, "dtype")), "fp8");
  cr_assert_str_eq(json_string_value(json_object_get(root, "kv_dtype")), "fp8");
  json_decref(root);

  rc = sc_test_run_cli("plan --model llama3-70b --gpu rtx3050 --gpus 1 --json", out, sizeof out);
  cr_assert_eq(rc, 0, "%s", out);
  root = json_loads(out, 0, &je);
  cr_assert(root, "not JSON: %s", je.text);
  cr_assert(json_is_null(json_object_get(root, "recommended")));
  json_decref(root);
}
