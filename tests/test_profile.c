// `shardcheck profile` and profile/: the written profile loads back with a table for every
// shape each requested TP degree runs; measured times are positive and grow with the work
// (rows, context, prompt, message size); bad arguments are refused with exit 2 and a
// message naming the problem before anything is measured; --help is true. --backend cuda:
// refused with exit 2 in a build without CUDA, exit 3 "no CUDA device" where no GPU is
// visible; on a machine with a GPU, a cuda profile is a GPU profile (host_cores 0) whose
// tables the cost model finds for a cuda deployment.
//
// Grids are tiny (llama-tiny, a few points) so every test runs in seconds. Nothing here
// asserts a wall-clock time: "grows" compares work that differs 16x or more.
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "config/hardware.h"
#include "config/presets.h"
#include "profile/profile.h"
#include "engine/shard.h"
#include "kernels/device.h"
#include "kernels/sim/sim_cost.h"
#include "tests/helpers.h"

static char out[1 << 16];

// Options for llama-tiny at the given TP degrees with tiny grids.
static profile_options tiny_options(const int *tp, int n_tp) {
  profile_options o = profile_options_defaults(true);
  sc_error err = {{0}};
  cr_assert_eq(model_preset_load("llama-tiny", &o.model, &err), SC_OK, "%s", err.msg);
  for (int i = 0; i < n_tp; i++) o.tp[i] = tp[i];
  o.n_tp = n_tp;
  static const int m[] = {1, 16, 256}, ctx[] = {16, 256}, pre[] = {16, 256}, bat[] = {1, 4};
  memcpy(o.gemm_m, m, sizeof m);
  o.n_gemm_m = 3;
  memcpy(o.ctx, ctx, sizeof ctx);
  o.n_ctx = 2;
  memcpy(o.prefill, pre, sizeof pre);
  o.n_prefill = 2;
  o.ar_bytes[0] = 1024;
  o.ar_bytes[1] = 1 << 20;
  o.n_ar_bytes = 2;
  memcpy(o.batches, bat, sizeof bat);
  o.n_batches = 2;
  o.decode_steps = 2;
  o.reps = 5; // the median of 5 passes: one busy neighbour does not flip a point
  o.min_round_s = 0.0005;
  o.bw_bytes = (size_t)4 << 20;
  o.square_n = 128;
  return o;
}

static int lines_seen;
static void count_progress(void *ud, const char *line) {
  (void)ud;
  cr_assert(line && *line && !strchr(line, '\n'), "progress line: '%s'", line ? line : "");
  lines_seen++;
}

// Measures llama-tiny at tp, writes the profile into a fresh directory and loads it back.
static profile *measure_and_load(const int *tp, int n_tp, hw_profile *back, char *path,
                                 size_t cap) {
  profile_options o = tiny_options(tp, n_tp);
  o.progress = count_progress;
  lines_seen = 0;
  profile *p = NULL;
  sc_error err = {{0}};
  cr_assert_eq(profile_measure(&o, &p, &err), SC_OK, "%s", err.msg);
  cr_assert_not_null(p);
  const char *dir = sc_test_tmpdir("profile");
  cr_assert_not_null(dir);
  snprintf(path, cap, "%s/tiny.yaml", dir);
  cr_assert_eq(profile_write_path(p, path, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(hw_profile_load(path, back, &err), SC_OK, "%s", err.msg);
  return p;
}

static const sim_gemm_table *find_gemm(const sim_hw *h, int n, int k, int threads) {
  for (int i = 0; i < h->n_gemm; i++)
    if (h->gemm[i].n == n && h->gemm[i].k == k && h->gemm[i].threads == threads)
      return &h->gemm[i];
  return NULL;
}

static const sim_attn_table *find_attn(const sim_hw *h, int heads, int kv, int hd, int threads) {
  for (int i = 0; i < h->n_attn; i++) {
    const sim_attn_table *a = &h->attn[i];
    if (a->heads == heads && a->kv_heads == kv && a->head_dim == hd && a->threads == threads)
      return a;
  }
  return NULL;
}

static bool close_rel(double a, double b) { return fabs(a - b) <= 1e-3 * fabs(b) + 1e-12; }

// --- the written file

Test(profile, written_file_loads_back_with_gemm_and_attention_tables_for_every_tp_degree) {
  const int tp[] = {1, 2, 4};
  hw_profile h;
  char path[512];
  profile *p = measure_and_load(tp, 3, &h, path, sizeof path);
  model_config m;
  sc_error err = {{0}};
  cr_assert_eq(model_preset_load("llama-tiny", &m, &err), SC_OK);
  int cores = device_cpu_cores();
  cr_expect_eq(h.sim.host_cores, cores);
  cr_expect_str_eq(h.name, "cpu");
  cr_expect_str_eq(h.link, "memory");
  cr_expect_eq(h.gpus_per_node, 8);
  for (int i = 0; i < 3; i++) {
    shard_rank s = shard_rank_plan(&m, tp[i], 1, 0, 0);
    int hd = m.head_dim, D = m.dim;
    // the shapes the cost model prices: q|k|v, o, gate|up, down, LM head
    int n[] = {(s.n_heads + 2 * s.n_kv) * hd, D, 2 * s.ffn, D, s.vocab};
    int k[] = {D, s.n_heads * hd, D, s.ffn, D};
    int full = cores / tp[i] > 0 ? cores / tp[i] : 1;
    int threads[] = {full, 1};
    for (int t = 0; t < 2; t++) {
      for (int j = 0; j < 5; j++) {
        const sim_gemm_table *g = find_gemm(&h.sim, n[j], k[j], threads[t]);
        cr_expect_not_null(g, "tp%d: no gemm table for n=%d k=%d threads=%d", tp[i], n[j], k[j],
                           threads[t]);
        if (g) cr_expect_eq(g->t.n, 3);
      }
      const sim_attn_table *a = find_attn(&h.sim, s.n_heads, s.n_kv, hd, threads[t]);
      cr_expect_not_null(a, "tp%d: no attention table for %d/%d heads at %d threads", tp[i],
                         s.n_heads, s.n_kv, threads[t]);
      if (a) {
        cr_expect_eq(a->decode.n, 2);
        cr_expect_eq(a->prefill.n, 2);
      }
    }
  }
  // all-reduce tables for tp 2 and 4, none for 1
  cr_assert_eq(h.sim.n_coll, 2);
  cr_expect_eq(h.sim.coll[0].ranks, 2);
  cr_expect_eq(h.sim.coll[1].ranks, 4);
  // what was loaded is what was measured, up to the printed precision
  const hw_profile *mine = profile_hw(p);
  cr_expect(close_rel(h.mem_bw, mine->mem_bw));
  cr_expect(close_rel(h.flops_fp32, mine->flops_fp32));
  cr_expect(close_rel(h.link_bw, mine->link_bw));
  cr_expect(close_rel(h.sim.step_overhead_s, mine->sim.step_overhead_s));
  // a step-overhead table per TP degree alone, then tp x replicas for 1x2, 1x4 and 2x2, at the
  // batch grid, as measured
  cr_assert_eq(h.sim.n_overhead, 6);
  const int want_tp[] = {1, 2, 4, 1, 1, 2}, want_rep[] = {1, 1, 1, 2, 4, 2};
  for (int i = 0; i < 6; i++) {
    const sim_overhead_table *t = &h.sim.overhead[i];
    cr_expect_eq(t->tp, want_tp[i], "table %d", i);
    cr_expect_eq(t->replicas, want_rep[i], "table %d", i);
    cr_expect_eq(mine->sim.overhead[i].replicas, want_rep[i], "table %d", i);
    cr_assert_eq(t->s.n, 2);
    cr_expect_eq(t->s.x[0], 1);
    cr_expect_eq(t->s.x[1], 4);
    for (int j = 0; j < 2; j++) {
      cr_expect(t->s.y[j] >= -10 && t->s.y[j] <= 10, "table %d: residual %g s", i, t->s.y[j]);
      cr_expect(close_rel(t->s.y[j], mine->sim.overhead[i].s.y[j]));
    }
    // the prefill residual at the probes' prompt sizes the model holds, loaded back as written
    cr_expect_geq(t->prefill.n, 1, "table %d: no prefill residual", i);
    cr_expect_eq(t->prefill.n, mine->sim.overhead[i].prefill.n, "table %d", i);
    for (int j = 0; j < t->prefill.n; j++) {
      cr_expect(t->prefill.x[j] == 16 || t->prefill.x[j] == 64 || t->prefill.x[j] == 256,
                "table %d: prompt size %g", i, t->prefill.x[j]);
      cr_expect(close_rel(t->prefill.y[j], mine->sim.overhead[i].prefill.y[j]));
    }
  }
  cr_expect_eq(h.sim.n_gemm, mine->sim.n_gemm);
  for (int i = 0; i < h.sim.n_gemm; i++)
    for (int j = 0; j < h.sim.gemm[i].t.n; j++)
      cr_expect(close_rel(h.sim.gemm[i].t.y[j], mine->sim.gemm[i].t.y[j]));
  // one progress line per group: host, at least one GEMM group (one per thread count),
  // three attention shapes, two all-reduce groups, the step overhead
  cr_expect_geq(lines_seen, 1 + 1 + 3 + 2 + 1, "%d progress lines", lines_seen);
  profile_free(p);
}

Test(profile, identical_gemm_shapes_of_different_tp_degrees_get_one_table) {
  const int tp[] = {1, 2, 4};
  hw_profile h;
  char path[512];
  profile *p = measure_and_load(tp, 3, &h, path, sizeof path);
  for (int i = 0; i < h.sim.n_gemm; i++)
    for (int j = i + 1; j < h.sim.n_gemm; j++)
      cr_expect(!(h.sim.gemm[i].n == h.sim.gemm[j].n && h.sim.gemm[i].k == h.sim.gemm[j].k &&
                  h.sim.gemm[i].threads == h.sim.gemm[j].threads),
                "gemm %d and %d are both n=%d k=%d threads=%d", i, j, h.sim.gemm[i].n,
                h.sim.gemm[i].k, h.sim.gemm[i].threads);
  profile_free(p);
}

Test(profile, measured_times_are_positive_and_grow_with_rows_context_and_message_size) {
  const int tp[] = {1, 2};
  hw_profile h;
  char path[512];
  profile *p = measure_and_load(tp, 2, &h, path, sizeof path);
  cr_expect_gt(h.mem_bw, 0);
  // No host streams 10 TB/s: above that the reads were optimised away (the profile's reader
  // once lost its loop to dead-code elimination and reported 13 PB/s).
  cr_expect_lt(h.mem_bw, 1e13, "mem_bw %g B/s", h.mem_bw);
  cr_expect_gt(h.flops_fp32, 0);
  cr_expect_gt(h.link_bw, 0);
  cr_expect_geq(h.link_latency_s, 0);
  cr_expect_geq(h.sim.step_overhead_s, 0);
  cr_expect(h.sim.mem_eff > 0 && h.sim.mem_eff <= 1);
  for (int i = 0; i < h.sim.n_gemm; i++) {
    const sim_curve *c = &h.sim.gemm[i].t;
    for (int j = 0; j < c->n; j++) cr_expect_gt(c->y[j], 0);
    cr_expect_gt(c->y[c->n - 1], c->y[0], "gemm n=%d k=%d: 256 rows %g s, 1 row %g s",
                 h.sim.gemm[i].n, h.sim.gemm[i].k, c->y[c->n - 1], c->y[0]);
  }
  for (int i = 0; i < h.sim.n_attn; i++) {
    const sim_attn_table *a = &h.sim.attn[i];
    cr_expect_gt(a->decode.y[0], 0);
    cr_expect_gt(a->decode.y[1], a->decode.y[0], "decode at context 256 vs 16");
    cr_expect_gt(a->prefill.y[0], 0);
    cr_expect_gt(a->prefill.y[1], a->prefill.y[0], "prefill of 256 tokens vs 16");
  }
  cr_assert_eq(h.sim.n_coll, 1);
  const sim_curve *ar = &h.sim.coll[0].allreduce;
  cr_expect_gt(ar->y[0], 0);
  cr_expect_gt(ar->y[1], ar->y[0], "all-reduce of 1 MiB vs 1 KiB");
  profile_free(p);
}

Test(profile, tp1_alone_still_measures_a_two_rank_all_reduce_for_the_link) {
  const int tp[] = {1};
  hw_profile h;
  char path[512];
  profile *p = measure_and_load(tp, 1, &h, path, sizeof path);
  cr_assert_eq(h.sim.n_coll, 1);
  cr_expect_eq(h.sim.coll[0].ranks, 2);
  cr_expect_gt(h.link_bw, 0);
  profile_free(p);
}

// --- library refusals (before anything is measured)

Test(profile, measure_refuses_a_tp_degree_that_does_not_shard_the_model) {
  const int tp[] = {1, 3};
  profile_options o = tiny_options(tp, 2);
  profile *p = (profile *)1;
  sc_error err = {{0}};
  cr_expect_eq(profile_measure(&o, &p, &err), SC_INVALID);
  cr_expect_null(p);
  cr_expect(strstr(err.msg, "tp=3") && strstr(err.msg, "valid tp"), "%s", err.msg);
}

Test(profile, measure_refuses_an_unknown_backend_naming_it) {
  const int tp[] = {1};
  profile_options o = tiny_options(tp, 1);
  o.backend = "tpu";
  profile *p = NULL;
  sc_error err = {{0}};
  cr_expect_eq(profile_measure(&o, &p, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "'tpu'"), "%s", err.msg);
}

Test(profile, measure_refuses_a_context_grid_past_max_seq_len) {
  const int tp[] = {1};
  profile_options o = tiny_options(tp, 1);
  o.ctx[1] = o.model.max_seq_len + 1;
  profile *p = NULL;
  sc_error err = {{0}};
  cr_expect_eq(profile_measure(&o, &p, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "decode context"), "%s", err.msg);
}

// Without a GPU (or without the CUDA backend) a cuda measurement fails before any timing,
// naming the reason, and hands back nothing.
Test(profile, measure_on_cuda_without_a_gpu_fails_naming_the_device) {
  if (device_backend_count("cuda") > 0) cr_skip_test("a CUDA device is visible");
  const int tp[] = {1};
  profile_options o = tiny_options(tp, 1);
  o.backend = "cuda";
  o.progress = count_progress;
  lines_seen = 0;
  profile *p = (profile *)1;
  sc_error err = {{0}};
  sc_status s = profile_measure(&o, &p, &err);
  cr_expect_null(p);
  cr_expect_eq(lines_seen, 0, "measured before failing");
#ifdef SHARDCHECK_HAVE_CUDA
  cr_expect_eq(s, SC_DEVICE, "%s", sc_status_name(s));
  cr_expect(strstr(err.msg, "no CUDA device"), "%s", err.msg);
#else
  cr_expect_eq(s, SC_INVALID, "%s", sc_status_name(s));
  cr_expect(strstr(err.msg, "cuda") && strstr(err.msg, "not built in"), "%s", err.msg);
#endif
}

// On a GPU: llama-tiny at tp 1 and 2 on GPU 0. The profile is a GPU profile (host_cores 0), one
// GEMM and one attention table per shape with threads 1, the all-reduce over 2 ranks sharing
// the GPU, step-overhead tables for tp1, tp2 and tp1 x 2; and the cost model, for a cuda
// deployment as a scenario lays it out (threads 1, or any: GPU profiles ignore them), prices
// every GEMM and the attention from those tables rather than from the formulas.
Test(profile, cuda_profile_tables_are_found_for_a_cuda_deployment) {
  if (device_backend_count("cuda") < 1) cr_skip_test("no CUDA device");
  const int tp[] = {1, 2};
  profile_options o = tiny_options(tp, 2);
  o.backend = "cuda";
  profile *p = NULL;
  sc_error err = {{0}};
  cr_assert_eq(profile_measure(&o, &p, &err), SC_OK, "%s", err.msg);
  const char *dir = sc_test_tmpdir("profile-cuda");
  char path[512];
  snprintf(path, sizeof path, "%s/cuda.yaml", dir);
  cr_assert_eq(profile_write_path(p, path, &err), SC_OK, "%s", err.msg);
  hw_profile h;
  cr_assert_eq(hw_profile_load(path, &h, &err), SC_OK, "%s", err.msg);
  cr_expect_str_eq(h.name, "cuda");
  cr_expect_eq(h.sim.host_cores, 0);
  cr_expect_gt(h.mem_bw, 1e10);
  cr_expect_gt(h.flops_fp32, 0);
  cr_expect_eq(h.sim.n_coll, 1);
  cr_expect_eq(h.sim.n_overhead, 3);
  for (int i = 0; i < h.sim.n_gemm; i++) cr_expect_eq(h.sim.gemm[i].threads, 1);
  for (int i = 0; i < h.sim.n_attn; i++) cr_expect_eq(h.sim.attn[i].threads, 1);
  model_config m = o.model;
  for (int i = 0; i < 2; i++) {
    shard_rank s = shard_rank_plan(&m, tp[i], 1, 0, 0);
    sim_layout lay = {.tp = tp[i], .pp = 1, .threads = 1, .cluster_ranks = tp[i]};
    int n = 2 * s.ffn, k = m.dim;
    const sim_gemm_table *g = find_gemm(&h.sim, n, k, 1);
    cr_assert_not_null(g, "tp%d: no gate|up table", tp[i]);
    double t = sim_gemm_s(&h.sim, &lay, 16, n, k, SIM_F32, SIM_BF16);
    cr_expect(close_rel(t, sim_curve_time(&g->t, 16)), "tp%d: priced %g, table %g", tp[i], t,
              sim_curve_time(&g->t, 16));
    lay.threads = 7; // a GPU profile's lookup does not key on threads
    cr_expect(close_rel(sim_gemm_s(&h.sim, &lay, 16, n, k, SIM_F32, SIM_BF16), t));
    cr_expect_not_null(find_attn(&h.sim, s.n_heads, s.n_kv, m.head_dim, 1), "tp%d", tp[i]);
  }
  profile_free(p);
}

Test(profile, write_path_reports_an_unwritable_path) {
  const int tp[] = {1};
  profile_options o = tiny_options(tp, 1);
  profile *p = NULL;
  sc_error err = {{0}};
  cr_assert_eq(profile_measure(&o, &p, &err), SC_OK, "%s", err.msg);
  cr_expect_eq(profile_write_path(p, "/nonexistent-sc-dir/p.yaml", &err), SC_IO);
  cr_expect(strstr(err.msg, "/nonexistent-sc-dir/p.yaml"), "%s", err.msg);
  profile_free(p);
}

// --- the command line

Test(profile_cli, help_exits_0_and_names_every_option) {
  int rc = sc_test_run_cli("profile --help", out, sizeof out);
  cr_expect_eq(rc, 0, "%s", out);
  const char *want[] = {"--backend", "cuda", "--model", "--tp-list", "--quick", "--out",
                        "--name", "--description", "llama-tiny", "docs/profile.md"};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    cr_expect(strstr(out, want[i]), "'%s' missing from --help:\n%s", want[i], out);
}

// Runs args; expects exit 2 before any measuring (no progress line) and every needle in the
// output.
static void expect_refused(const char *args, const char *needle1, const char *needle2) {
  int rc = sc_test_run_cli(args, out, sizeof out);
  cr_expect_eq(rc, 2, "`shardcheck %s` exited %d:\n%s", args, rc, out);
  cr_expect(!strstr(out, "host:"), "measured before refusing:\n%s", out);
  cr_expect_leq(sc_test_count_lines(out), 2, "%s", out);
  if (needle1) cr_expect(strstr(out, needle1), "'%s' missing from: %s", needle1, out);
  if (needle2) cr_expect(strstr(out, needle2), "'%s' missing from: %s", needle2, out);
  sc_test_no_sanitizer_reports(out);
}

Test(profile_cli, unknown_backend_exits_2_naming_it) {
  expect_refused("profile --backend tpu --out /tmp/sc-never.yaml", "'tpu'", "cpu");
}

Test(profile_cli, missing_backend_or_out_exits_2) {
  expect_refused("profile --out /tmp/sc-never.yaml", "--backend", NULL);
  expect_refused("profile --backend cpu", "--out", NULL);
}

Test(profile_cli, tp_list_that_does_not_divide_the_heads_exits_2_with_the_valid_degrees) {
  const char *d = sc_test_tmpdir("profile-cli");
  char args[512];
  snprintf(args, sizeof args,
           "profile --backend cpu --model llama-tiny --tp-list 1,3 --out %s/p.yaml", d);
  expect_refused(args, "tp=3", "num_attention_heads");
  cr_expect(strstr(out, "valid tp"), "%s", out);
  snprintf(args, sizeof args, "profile --backend cpu --tp-list 1,,2 --out %s/p.yaml", d);
  expect_refused(args, "--tp-list", NULL);
}

Test(profile_cli, unwritable_out_exits_2_naming_the_path) {
  expect_refused("profile --backend cpu --model llama-tiny --out /nonexistent-sc-dir/p.yaml",
                 "/nonexistent-sc-dir/p.yaml", "/nonexistent-sc-dir");
  const char *d = sc_test_tmpdir("profile-cli");
  char args[512], sub[300];
  snprintf(sub, sizeof sub, "%s/dir.yaml", d);
  cr_assert_eq(mkdir(sub, 0755), 0);
  snprintf(args, sizeof args, "profile --backend cpu --model llama-tiny --out %s", sub);
  expect_refused(args, "dir.yaml", "not a regular file");
  snprintf(args, sizeof args, "profile --backend cpu --model llama-tiny --out %s/p.txt", d);
  expect_refused(args, ".yaml", "p.txt");
}

#ifndef SHARDCHECK_HAVE_CUDA
Test(profile_cli, cuda_backend_in_a_build_without_cuda_exits_2) {
  expect_refused("profile --backend cuda --out /tmp/sc-never.yaml", "--backend cuda",
                 "no CUDA backend");
}
#else
// No GPU: exit 3 (a runtime failure, docs/profile.md) with the backend's reason, before
// anything is measured and without writing --out.
Test(profile_cli, cuda_backend_without_a_gpu_exits_3_with_no_cuda_device) {
  if (device_backend_count("cuda") > 0) cr_skip_test("a CUDA device is visible");
  const char *d = sc_test_tmpdir("profile-cli");
  char args[512], path[300];
  snprintf(path, sizeof path, "%s/never.yaml", d);
  snprintf(args, sizeof args, "profile --backend cuda --model llama-tiny --quick --out %s", path);
  int rc = sc_test_run_cli(args, out, sizeof out);
  cr_expect_eq(rc, 3, "`shardcheck %s` exited %d:\n%s", args, rc, out);
  cr_expect(strstr(out, "--backend cuda") && strstr(out, "no CUDA device"), "%s", out);
  cr_expect(!strstr(out, "device:") && !strstr(out, "host:"), "measured:\n%s", out);
  cr_expect_leq(sc_test_count_lines(out), 2, "%s", out);
  struct stat st;
  cr_expect_neq(stat(path, &st), 0, "--out was written without a device");
  sc_test_no_sanitizer_reports(out);
}
#endif

// Bad input is refused (exit 2) before the device is looked for, cuda or not.
Test(profile_cli, cuda_backend_bad_arguments_exit_2_before_looking_for_a_gpu) {
  expect_refused("profile --backend cuda", "--out", NULL);
  expect_refused("profile --backend cuda --tp-list 1,3 --out /tmp/sc-never.yaml", "tp=3", NULL);
  expect_refused("profile --backend cuda --out /nonexistent-sc-dir/p.yaml",
                 "/nonexistent-sc-dir/p.yaml", NULL);
  expect_refused("profile --backend cuda --tp-list 1,,2 --out /tmp/sc-never.yaml", "--tp-list",
                 NULL);
#ifndef SHARDCHECK_HAVE_CUDA
  // good arguments in a build without the backend: refused as such, after they were checked
  expect_refused("profile --backend cuda --model llama-tiny --quick --out /tmp/sc-never.yaml",
                 "this build has no CUDA backend", NULL);
#endif
}

Test(profile_cli, quick_run_writes_a_profile_that_loads_with_progress_on_stderr) {
  const char *d = sc_test_tmpdir("profile-cli");
  char path[300], args[512];
  snprintf(path, sizeof path, "%s/tiny.yaml", d);
  snprintf(args, sizeof args,
           "profile --backend cpu --model llama-tiny --tp-list 2,1 --quick --out %s", path);
  int rc = sc_test_run_cli(args, out, sizeof out);
  cr_assert_eq(rc, 0, "%s", out);
  sc_test_no_sanitizer_reports(out);
  const char *want[] = {"host:", "gemm:", "attention:", "allreduce:", "step overhead:", "wrote"};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    cr_expect(strstr(out, want[i]), "'%s' missing from:\n%s", want[i], out);
  hw_profile h;
  sc_error err = {{0}};
  cr_assert_eq(hw_profile_load(path, &h, &err), SC_OK, "%s", err.msg);
  cr_expect_gt(h.sim.n_gemm, 0);
  cr_expect_eq(h.sim.n_coll, 1);
  // the header says how it was made
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f);
  char head[4096];
  size_t n = fread(head, 1, sizeof head - 1, f);
  head[n] = 0;
  fclose(f);
  cr_expect(strstr(head, "# command: shardcheck profile --backend cpu --model llama-tiny"),
            "%s", head);
  cr_expect(strstr(head, "# machine: "), "%s", head);
  cr_expect(strstr(head, "# date: "), "%s", head);
  cr_expect(strstr(head, "# meanwhile: other processes used "), "%s", head);
}
