// `shardcheck profile`: measures the real device (the cpu backend, or GPU 0 on the cuda
// backend) and writes a hardware profile YAML that `hardware: {profile: FILE.yaml}` accepts
// and the simulator's cost model reads: host figures, GEMM / attention / all-reduce time
// tables for the model's shapes at each TP degree, the link fit and the per-step overhead.
//
// The measuring and the file format are profile/ (profile.h, docs/profile.md); reading
// profiles back is config/hardware.c. This file parses arguments, refuses bad input before
// anything is measured, prints one progress line per measured group on stderr, writes the file
// and checks that it loads back.
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "config/hardware.h"
#include "config/presets.h"
#include "engine/model.h"
#include "profile/profile.h"
#include "engine/shard.h"
#include "config/yaml_map.h"
#include "kernels/clock.h"
#include "kernels/device.h"

#define CMD "profile"

static void usage(FILE *f) {
  fprintf(f,
          "usage: shardcheck profile --backend cpu|cuda --out FILE.yaml [options]\n\n"
          "Measures this machine through the engine's own device ops and writes a hardware\n"
          "profile for the simulator (mode: sim) and the planner: memory size and streaming-\n"
          "read bandwidth, peak fp32 GEMM rate and cores; GEMM time vs rows for every GEMM one\n"
          "rank of each TP degree runs, at cores/tp threads and at 1 thread; attention time\n"
          "(decode vs context, prefill vs prompt length); all-reduce time vs message size\n"
          "between ranks as threads, and the link figures fitted to it; and the per-step\n"
          "overhead: real decode steps of the model minus the cost model's price for them,\n"
          "per batch size, for each TP degree alone and for tp x replicas side by side.\n"
          "Use the file with `hardware: {profile: FILE.yaml}` in a scenario. Format and\n"
          "method: docs/profile.md.\n\n"
          "  --backend B             the device to measure (required): cpu, or cuda (GPU 0,\n"
          "                          every rank sharing it as with `devices: [0]`; needs a\n"
          "                          build with the CUDA backend and a GPU)\n"
          "  -m, --model PRESET|DIR  whose shapes to measure: a built-in preset, a preset\n"
          "                          .yaml, or a directory with config.json (default\n"
          "                          llama-small; weights are random either way)\n"
          "  --tp-list LIST          TP degrees, comma-separated, each must shard the model,\n"
          "                          at most %d (default 1,2)\n"
          "  --quick                 shorter grids and fewer repetitions (seconds, not\n"
          "                          minutes; coarser tables)\n"
          "  -o, --out FILE.yaml     where to write the profile (required; replaced if it\n"
          "                          exists)\n"
          "  --name NAME             the profile's name (default: the backend, cpu or cuda)\n"
          "  --description TEXT      its description (default: the CPU model and cores, or\n"
          "                          the GPU's memory)\n"
          "  -h, --help              this text\n\n"
          "Progress goes to stderr, one line per measured group; a summary to stdout.\n"
          "The default run (llama-small, tp 1,2) takes about 65 s on 2 cores, --quick a few\n"
          "seconds. Run it on an otherwise idle machine: it warns when other processes took\n"
          "CPU time while it measured (cpu). --backend cuda without a visible GPU exits 3\n"
          "(\"no CUDA device\") before measuring.\n",
          PROFILE_MAX_TP);
  cli_print_names(f, "built-in presets", model_preset_names);
  fprintf(f, "exit codes: 0 ok, 2 bad input or usage, 3 runtime failure.\n");
}

// "1,2,4" -> tp[], n. False for anything but 1..PROFILE_MAX_TP integers in 1..1024.
static bool parse_tp_list(const char *s, int *tp, int *n) {
  *n = 0;
  if (!s || !*s) return false;
  char buf[256];
  if (strlen(s) >= sizeof buf) return false;
  strcpy(buf, s);
  char *save = NULL;
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (*n == PROFILE_MAX_TP || !cli_parse_int(t, 1, 1024, &tp[*n])) return false;
    (*n)++;
  }
  return *n > 0 && s[strlen(s) - 1] != ',' && s[0] != ',' && !strstr(s, ",,");
}

// Refuses an --out that cannot be written, before minutes of measuring: its directory must
// exist and be writable, and an existing path must be a writable regular file.
static int check_out(const char *path) {
  if (!yaml_map_is_path(path))
    return cli_usage_error(CMD, "--out must name a .yaml file (what `hardware: {profile: ...}` "
                                "accepts), got", path);
  char dir[4096];
  const char *slash = strrchr(path, '/');
  if (strlen(path) >= sizeof dir) return cli_usage_error(CMD, "--out path too long:", path);
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == path) snprintf(dir, sizeof dir, "/");
  else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  struct stat st;
  if (stat(dir, &st) != 0) {
    fprintf(stderr, "shardcheck profile: --out '%s': cannot write: directory '%s': %s\n", path,
            dir, strerror(errno));
    return CLI_USAGE;
  }
  if (!S_ISDIR(st.st_mode)) {
    fprintf(stderr, "shardcheck profile: --out '%s': cannot write: '%s' is not a directory\n",
            path, dir);
    return CLI_USAGE;
  }
  if (access(dir, W_OK | X_OK) != 0) {
    fprintf(stderr, "shardcheck profile: --out '%s': cannot write into directory '%s': %s\n",
            path, dir, strerror(errno));
    return CLI_USAGE;
  }
  if (stat(path, &st) == 0) {
    if (!S_ISREG(st.st_mode)) {
      fprintf(stderr, "shardcheck profile: --out '%s': exists and is not a regular file\n",
              path);
      return CLI_USAGE;
    }
    if (access(path, W_OK) != 0) {
      fprintf(stderr, "shardcheck profile: --out '%s': cannot write: %s\n", path,
              strerror(errno));
      return CLI_USAGE;
    }
  }
  return CLI_OK;
}

// The backend named by --backend: 0 for cpu or cuda, else the exit code of the refusal.
static int check_backend(const char *b) {
  if (!strcmp(b, "cpu") || !strcmp(b, "cuda")) return CLI_OK;
  return cli_usage_error(CMD, "--backend must be cpu or cuda, got", b);
}

// --backend cuda in a build without it: refused (exit 2) once every other argument is checked,
// so a bad argument is named the same in every build.
static int check_cuda_build(void) {
#ifndef SHARDCHECK_HAVE_CUDA
  fprintf(stderr,
          "shardcheck profile: --backend cuda: this build has no CUDA backend (it was built "
          "without CUDA: configure with -DSHARDCHECK_CUDA=ON where the CUDA toolkit, cuBLAS "
          "and NCCL are installed); --backend cpu measures this host\n");
  return CLI_USAGE;
#else
  return CLI_OK;
#endif
}

// --backend cuda: GPU 0 must be there before anything is measured. 0 when it is, else
// CLI_RUNTIME with the backend's own reason (no GPU or driver, the library not loading).
static int check_cuda_device(void) {
  if (device_backend_count("cuda") > 0) return CLI_OK;
  sc_error err = {{0}};
  device *d = NULL;
  sc_status s = device_open("cuda", 0, &d, &err);
  device_free(d);
  if (s == SC_OK) return CLI_OK; // counted none, yet it opens: let the measurement say more
  fprintf(stderr, "shardcheck profile: --backend cuda: no CUDA device to measure: %s\n",
          err.msg[0] ? err.msg : sc_status_name(s));
  return CLI_RUNTIME;
}

static void on_progress(void *ud, const char *line) {
  double t0 = *(const double *)ud;
  fprintf(stderr, "shardcheck profile: [%6.1f s] %s\n",
          (double)sc_monotonic_ns() * 1e-9 - t0, line);
  fflush(stderr);
}

// "shardcheck profile ARGS..." for the file's header (arguments with spaces are quoted).
static void command_line(int argc, char **argv, char *buf, size_t cap) {
  size_t len = (size_t)snprintf(buf, cap, "shardcheck profile");
  for (int i = 1; i < argc && len < cap; i++) {
    bool q = strpbrk(argv[i], " \t'\"") != NULL;
    len += (size_t)snprintf(buf + len, cap - len, q ? " '%s'" : " %s", argv[i]);
  }
}

int cmd_profile(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "import")) return cmd_profile_import(argc - 1, argv + 1);
  enum { OPT_BACKEND = 1000, OPT_TP_LIST, OPT_QUICK, OPT_NAME, OPT_DESCRIPTION };
  static const struct option opts[] = {
      {"backend", required_argument, NULL, OPT_BACKEND},
      {"model", required_argument, NULL, 'm'},
      {"tp-list", required_argument, NULL, OPT_TP_LIST},
      {"quick", no_argument, NULL, OPT_QUICK},
      {"out", required_argument, NULL, 'o'},
      {"name", required_argument, NULL, OPT_NAME},
      {"description", required_argument, NULL, OPT_DESCRIPTION},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  const char *backend = NULL, *model = "llama-small", *out = NULL, *name = NULL,
             *description = NULL;
  int tp[PROFILE_MAX_TP] = {1, 2}, n_tp = 2;
  bool quick = false;
  optind = 0; // glibc: full re-initialisation, in case another command parsed before
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":m:o:h", opts, NULL)) != -1) {
    switch (c) {
    case OPT_BACKEND: backend = optarg; break;
    case 'm': model = optarg; break;
    case OPT_TP_LIST:
      if (!parse_tp_list(optarg, tp, &n_tp))
        return cli_usage_error(CMD, "--tp-list must be 1 to 8 comma-separated integers in "
                                    "1..1024, got", optarg);
      break;
    case OPT_QUICK: quick = true; break;
    case 'o': out = optarg; break;
    case OPT_NAME:
      if (!*optarg || strlen(optarg) >= 64)
        return cli_usage_error(CMD, "--name must be 1 to 63 characters, got", optarg);
      name = optarg;
      break;
    case OPT_DESCRIPTION:
      if (strlen(optarg) >= 128)
        return cli_usage_error(CMD, "--description must be under 128 characters, got", optarg);
      description = optarg;
      break;
    case 'h': usage(stdout); return CLI_OK;
    case ':': return cli_usage_error(CMD, "missing value for", argv[optind - 1]);
    default:
      if (optopt) {
        char o[3] = {'-', (char)optopt, 0};
        return cli_usage_error(CMD, "unknown option", o);
      }
      return cli_usage_error(CMD, "unknown option", argv[optind - 1]);
    }
  }
  if (optind < argc) return cli_usage_error(CMD, "unexpected argument", argv[optind]);
  if (!backend) return cli_usage_error(CMD, "missing --backend cpu (or cuda)", NULL);
  int rc = check_backend(backend);
  if (rc != CLI_OK) return rc;
  if (!out) return cli_usage_error(CMD, "missing --out FILE.yaml", NULL);
  rc = check_out(out);
  if (rc != CLI_OK) return rc;

  sc_error err = {{0}};
  profile_options o = profile_options_defaults(quick);
  bool has_weights = false;
  sc_status s = model_config_resolve(model, &o.model, &has_weights, &err);
  if (s != SC_OK) return cli_fail("profile --model", s, &err);
  for (int i = 0; i < n_tp; i++) {
    s = shard_layout_check(&o.model, tp[i], 1, &err);
    if (s != SC_OK) return cli_fail("profile --tp-list", s, &err);
  }
  if (!strcmp(backend, "cuda")) {
    rc = check_cuda_build();
    if (rc == CLI_OK) rc = check_cuda_device();
    if (rc != CLI_OK) return rc;
  }
  memcpy(o.tp, tp, sizeof tp);
  o.n_tp = n_tp;
  o.backend = backend;
  o.name = name;
  o.description = description;
  char cmdline[1024];
  command_line(argc, argv, cmdline, sizeof cmdline);
  o.command = cmdline;
  double t0 = (double)sc_monotonic_ns() * 1e-9;
  o.progress = on_progress;
  o.progress_ud = &t0;

  profile *p = NULL;
  s = profile_measure(&o, &p, &err);
  if (s != SC_OK) return cli_fail(CMD, s, &err);
  s = profile_write_path(p, out, &err);
  if (s != SC_OK) {
    profile_free(p);
    fprintf(stderr, "shardcheck profile: %s\n", err.msg);
    return CLI_RUNTIME;
  }
  hw_profile back;
  s = hw_profile_load(out, &back, &err);
  if (s != SC_OK) {
    profile_free(p);
    fprintf(stderr, "shardcheck profile: the written profile does not load back: %s\n",
            err.msg);
    return CLI_RUNTIME;
  }
  profile_summary sm;
  profile_summary_get(p, &sm);
  if (sm.other_load > 0.1 || sm.steal > 0.1)
    fprintf(stderr,
            "shardcheck profile: warning: while measuring, other processes used %.0f%% of the "
            "CPUs and the hypervisor took %.0f%%: the timings may be off; rerun on an idle "
            "machine\n",
            sm.other_load * 100, sm.steal * 100);
  printf("wrote %s (profile '%s', %.1f s)\n", out, back.name, sm.elapsed_s);
  if (sm.cuda)
    printf("  device: cuda 0, %.1f GiB, device-to-device copy %.0f GB/s (read + write), GEMM "
           "f32 %.1f TFLOP/s, bf16 %.1f TFLOP/s, launch %.2f us\n",
           sm.mem_bytes / (1u << 30), sm.mem_bw / 1e9, sm.flops_fp32 / 1e12,
           sm.flops_bf16 / 1e12, sm.launch_s * 1e6);
  else
    printf("  host: %d cores, %.1f GiB, streaming read %.1f GB/s, fp32 GEMM %.1f GFLOP/s\n",
           sm.host_cores, sm.mem_bytes / (1u << 30), sm.mem_bw / 1e9, sm.flops_fp32 / 1e9);
  printf("  tables: %d gemm, %d attention, %d allreduce, %d step_overhead\n", back.sim.n_gemm,
         back.sim.n_attn, back.sim.n_coll, back.sim.n_overhead);
  printf("  link (all-reduce fit): %.2f GB/s, latency %.1f us\n", sm.link_bw / 1e9,
         sm.link_latency_s * 1e6);
  printf("  step_overhead_s: %.3f ms (tp%d, %d decode steps; executor-only residual %.3f ms)\n",
         sm.step_overhead_s * 1e3, sm.overhead_tp, sm.overhead_steps,
         sm.step_overhead_exec_s * 1e3);
  for (int i = 0; i < back.sim.n_overhead; i++) {
    const sim_curve *cv = &back.sim.overhead[i].s;
    printf("  step_overhead tp%d", back.sim.overhead[i].tp);
    if (back.sim.overhead[i].replicas > 1) printf(" x %d replicas", back.sim.overhead[i].replicas);
    printf(":");
    for (int j = 0; j < cv->n; j++)
      printf("%s %.0f: %.2f", j ? "," : "", cv->x[j], cv->y[j] * 1e3);
    printf(" ms (batch: residual)\n");
  }
  profile_free(p);
  return CLI_OK;
}
