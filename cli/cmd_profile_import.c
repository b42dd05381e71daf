// `shardcheck profile import`: public per-operator measurements of a GPU into a hardware
// profile's GEMM and all-reduce tables (docs/profile.md, "Measured elsewhere"), so a capacity
// answer for a GPU nobody here owns rests on measured kernels. The formats are
// config/kernel_import.h's; this file parses arguments, writes BASE's text with the imported
// tables in place of its own, and loads the result back.
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "config/hardware.h"
#include "config/kernel_import.h"
#include "config/presets.h"
#include "config/yaml_map.h"
#include "kernels/embedded.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: shardcheck profile import --profile BASE --model PRESET --vidur-mlp FILE\n"
          "                                 [--vidur-allreduce FILE] [--source TEXT]\n"
          "                                 --out FILE.yaml\n\n"
          "Writes BASE with GEMM and all-reduce time tables from measurements published for\n"
          "its GPU: microsoft/vidur's data/profiling/compute/GPU/ORG/MODEL/mlp.csv (the linear\n"
          "layers of one transformer layer on one rank, vLLM's kernels, per token count and TP\n"
          "degree; its model must be MODEL) and data/profiling/network/NET/all_reduce.csv\n"
          "(all-reduce time per size and worker count). The simulator then prices those\n"
          "GEMMs and all-reduces as measured (docs/simulator.md) and the rest on BASE's\n"
          "rooflines. BASE's own gemm and allreduce tables are replaced; its engine block and\n"
          "figures are kept. Check each source's licence before you keep its data (vidur: MIT).\n\n"
          "  --profile BASE        a hardware profile name or .yaml path\n"
          "  --model PRESET        whose shapes the measurements are (a preset or a directory)\n"
          "  --vidur-mlp FILE      vidur's mlp.csv\n"
          "  --vidur-allreduce FILE  vidur's all_reduce.csv\n"
          "  --source TEXT         where the files came from (repository and revision), written\n"
          "                        into the profile's comments\n"
          "  -o, --out FILE.yaml   the profile to write\n"
          "  -h, --help            this text\n\n"
          "exit codes: 0 written, 2 bad usage or input (a file of another model, a column\n"
          "missing), 3 runtime failure.\n");
}

// BASE's text (a name: the embedded profile) into *text.
static sc_status base_text(const char *base, char **text, sc_error *err) {
  size_t len = 0;
  if (strlen(base) > 5 && !strcmp(base + strlen(base) - 5, ".yaml"))
    return yaml_map_slurp(base, 1 << 24, text, &len, err);
  char path[300];
  snprintf(path, sizeof path, "scenarios/hardware/%s.yaml", base);
  const sc_embedded_file *f = sc_embedded_find(path);
  if (!f) return sc_fail(err, SC_INVALID, "profile import: no profile '%s'", base);
  *text = strdup(f->data);
  return *text ? SC_OK : sc_fail(err, SC_OOM, "profile import: out of memory");
}

int cmd_profile_import(int argc, char **argv) {
  const char *base = NULL, *model = NULL, *mlp = NULL, *ar = NULL, *out = NULL, *source = NULL;
  enum { O_MLP = 1000, O_AR, O_SOURCE };
  static const struct option opts[] = {{"profile", required_argument, 0, 'p'},
                                       {"model", required_argument, 0, 'm'},
                                       {"vidur-mlp", required_argument, 0, O_MLP},
                                       {"vidur-allreduce", required_argument, 0, O_AR},
                                       {"source", required_argument, 0, O_SOURCE},
                                       {"out", required_argument, 0, 'o'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  optind = 1;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, "p:m:o:h", opts, NULL)) != -1) {
    switch (c) {
    case 'p': base = optarg; break;
    case 'm': model = optarg; break;
    case O_MLP: mlp = optarg; break;
    case O_AR: ar = optarg; break;
    case O_SOURCE: source = optarg; break;
    case 'o': out = optarg; break;
    case 'h': usage(stdout); return CLI_OK;
    default: return cli_usage_error("profile import", "unknown option", argv[optind - 1]);
    }
  }
  if (optind != argc) return cli_usage_error("profile import", "unexpected argument", argv[optind]);
  if (!base || !model || !out || (!mlp && !ar))
    return cli_usage_error("profile import",
                           "--profile, --model, --out and a measurement file are required", NULL);
  sc_error err = {{0}};
  hw_profile hw;
  model_config m;
  char *text = NULL;
  kimport_result r = {0};
  sc_status st = hw_profile_load(base, &hw, &err);
  if (st == SC_OK) st = model_preset_load(model, &m, &err);
  if (st == SC_OK) st = base_text(base, &text, &err);
  // the imported tables replace the base's: start from none
  sim_hw tables = {.n_gemm = 0, .n_coll = 0};
  if (st == SC_OK && mlp) st = kimport_vidur_mlp(mlp, &m, &tables, &r, &err);
  if (st == SC_OK && ar) st = kimport_vidur_allreduce(ar, &tables, &r, &err);
  FILE *o = st == SC_OK ? fopen(out, "w") : NULL;
  if (st == SC_OK && !o) st = sc_fail(&err, SC_IO, "%s: cannot write the profile", out);
  if (st == SC_OK) {
    bool skip = false;
    for (char *line = text, *nl; line && *line; line = nl ? nl + 1 : NULL) {
      nl = strchr(line, '\n');
      size_t n = nl ? (size_t)(nl - line) : strlen(line);
      if ((!strncmp(line, "gemm:", 5) && mlp) || (!strncmp(line, "allreduce:", 10) && ar))
        skip = true;
      else if (skip && n > 0 && line[0] != ' ' && line[0] != '#')
        skip = false;
      if (!skip) fprintf(o, "%.*s\n", (int)n, line);
    }
    fprintf(o, "\n# --- measured elsewhere: `shardcheck profile import` (docs/profile.md)\n");
    if (source) fprintf(o, "# source: %s\n", source);
    if (mlp) fprintf(o, "# GEMMs of %s from %s\n", m.name, mlp);
    if (ar) fprintf(o, "# all-reduces from %s\n", ar);
    kimport_write_tables(o, &tables);
    if (fclose(o) != 0) st = sc_fail(&err, SC_IO, "%s: cannot write the profile", out);
  }
  free(text);
  hw_profile back;
  if (st == SC_OK) st = hw_profile_load(out, &back, &err);
  if (st != SC_OK) return cli_fail("profile import", st, &err);
  printf("profile import: %d GEMM tables (tp", r.gemm_tables);
  for (int i = 0; i < r.n_tp; i++) printf("%s%d", i ? ", " : " ", r.tp[i]);
  printf(") and %d all-reduce tables into %s\n", r.allreduce_tables, out);
  return CLI_OK;
}
