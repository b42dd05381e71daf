// `shardcheck profile import` (config/kernel_import.c): public per-operator measurements in
// vidur's layout become a profile's GEMM and all-reduce tables, which the cost model then prices
// as measured; a file of another model is refused in one line. The CSVs here are made up in
// vidur's columns: no published data is kept in the repository.
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "config/hardware.h"
#include "helpers.h"
#include "kernels/sim/sim_cost.h"

// A GEMM's made-up time: 5 us plus 1 ns per row per unit of n x k / 2^24.
static double made_up(int m, int n, int k) { return 5e-6 + 1e-9 * m * ((double)n * k / 16777216); }

// vidur's mlp.csv columns for llama3-8b's shapes (heads 32, kv 8, dim 4096, ffn 14336) at tp 1
// and 2; n_kv_head `kv` (8 for llama3-8b).
static const char *write_mlp(const char *dir, int kv) {
  static char path[1200];
  snprintf(path, sizeof path, "%s/mlp.csv", dir);
  FILE *f = fopen(path, "w");
  cr_assert(f);
  fprintf(f, "time_stats.attn_pre_proj.median,time_stats.attn_post_proj.median,"
             "time_stats.mlp_up_proj.median,time_stats.mlp_down_proj.median,n_head,n_kv_head,"
             "n_embd,n_expanded_embd,vocab_size,use_gated_mlp,num_tokens,"
             "num_tensor_parallel_workers\n");
  for (int tp = 1; tp <= 2; tp++)
    for (int m = 1; m <= 4096; m *= 2) {
      const int nk[4][2] = {{(32 / tp + 2 * 8 / tp) * 128, 4096},
                            {4096, 32 / tp * 128},
                            {2 * 14336 / tp, 4096},
                            {4096, 14336 / tp}};
      for (int op = 0; op < 4; op++) fprintf(f, "%.6f,", 1e3 * made_up(m, nk[op][0], nk[op][1]));
      fprintf(f, "32,%d,4096,14336,128256,True,%d,%d\n", kv, m, tp);
    }
  fclose(f);
  return path;
}

Test(kernel_import, vidur_tables_become_the_profiles_and_are_priced_as_measured, .timeout = 60) {
  const char *dir = sc_test_tmpdir("kimport");
  const char *mlp = write_mlp(dir, 8);
  char ar[1200], args[4096], out[8192], prof[1200];
  snprintf(ar, sizeof ar, "%s/all_reduce.csv", dir);
  FILE *f = fopen(ar, "w");
  cr_assert(f);
  fprintf(f, ",time_stats.all_reduce.min,time_stats.all_reduce.median,rank,num_workers,size,"
             "collective\n");
  for (int i = 0, b = 1024; b <= (1 << 26); b *= 4, i++)
    fprintf(f, "%d,0.01,%.6f,0,2,%d,all_reduce\n", i, 0.02 + b / 1e8, b);
  fclose(f);
  snprintf(prof, sizeof prof, "%s/h100-measured.yaml", dir);
  snprintf(args, sizeof args,
           "profile import --profile h100-sxm --model llama3-8b --vidur-mlp %s "
           "--vidur-allreduce %s --source 'made up' --out %s",
           mlp, ar, prof);
  cr_assert_eq(sc_test_run_cli_clean(args, out, sizeof out), 0, "%s", out);
  cr_expect(strstr(out, "8 GEMM tables (tp 1, 2) and 1 all-reduce tables"), "%s", out);
  hw_profile p;
  sc_error err = {{0}};
  cr_assert_eq(hw_profile_load(prof, &p, &err), SC_OK, "%s", err.msg);
  sim_layout l = {.tp = 2, .pp = 1, .threads = 1, .cluster_ranks = 2};
  // tp 2's gate|up at 64 rows, as measured (a grid point), and between two (log-log)
  double t = sim_gemm_s(&p.sim, &l, 64, 14336, 4096, SIM_BF16, SIM_BF16);
  cr_expect(fabs(t / made_up(64, 14336, 4096) - 1) < 1e-4, "%g", t);
  double t48 = sim_gemm_s(&p.sim, &l, 48, 14336, 4096, SIM_BF16, SIM_BF16);
  cr_expect(t48 > made_up(32, 14336, 4096) && t48 < made_up(64, 14336, 4096), "%g", t48);
  // the all-reduce of 4 MiB on two ranks, as measured
  double a = sim_allreduce_s(&p.sim, 0, 2, 4194304);
  cr_expect(fabs(a / ((0.02 + 4194304 / 1e8) / 1e3) - 1) < 1e-4, "%g", a);
  // the profile keeps its figures: an op not imported stays on the roofline
  hw_profile h;
  cr_assert_eq(hw_profile_load("h100-sxm", &h, &err), SC_OK, "%s", err.msg);
  cr_expect_eq(p.sim.mem_bw, h.sim.mem_bw);
  // measurements of another model: one line, exit 2
  mlp = write_mlp(dir, 32);
  snprintf(args, sizeof args,
           "profile import --profile h100-sxm --model llama3-8b --vidur-mlp %s "
           "--out %s/x.yaml",
           mlp, dir);
  cr_expect_eq(sc_test_run_cli_clean(args, out, sizeof out), 2, "%s", out);
  cr_expect(strstr(out, "n_kv_head") && strstr(out, "another model") &&
                sc_test_count_lines(out) == 1,
            "%s", out);
}
