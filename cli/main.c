// main(): dispatches to the subcommands in cli/cmd_*.c.
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static const struct {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *help;
} cmds[] = {
    {"run", cmd_run, "run a scenario: every deployment, every phase; record, report, verdict"},
    {"validate", cmd_validate, "check a scenario file without running it"},
    {"runs", cmd_runs, "list the runs in a results database"},
    {"report", cmd_report, "write plots, tables and index.html for runs in a results database"},
    {"gate", cmd_gate, "compare runs with their baselines; exit 1 when a metric regressed"},
    {"baseline", cmd_baseline, "mark a run as the baseline of its scenario"},
    {"generate", cmd_generate, "run one prompt through a sharded engine and print the tokens"},
    {"plan", cmd_plan, "list every tp x pp x dp layout with its memory per GPU"},
    {"capacity", cmd_capacity, "the cheapest GPUs and layout serving a rate within the SLO (sim)"},
    {"model", cmd_model, "model utilities: `model gen` writes random weights for a preset"},
    {"serve", cmd_serve, "serve a model over an OpenAI-compatible HTTP API (real or sim)"},
    {"import", cmd_import, "store a published per-request trace (vLLM, LLMServingSim) as a run"},
    {"calibrate", cmd_calibrate, "fit a profile's engine block to measured runs (sim)"},
    {"profile", cmd_profile, "measure this machine and write a hardware profile (sim)"},
    {"worker", cmd_worker, "internal: one process replica, started by run (not run by hand)"},
};

static void usage(FILE *f) {
  fprintf(f, "usage: shardcheck <command> [options]\n\n"
             "shardcheck validates a sharded LLM serving configuration: it runs a real\n"
             "tensor/pipeline/data-parallel engine under scripted scenarios, records every\n"
             "request in SQLite, plots scaling and gives a verdict.\n\ncommands:\n");
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
    fprintf(f, "  %-10s %s\n", cmds[i].name, cmds[i].help);
  fprintf(f, "\n`shardcheck <command> --help` for its options.\n"
             "exit codes: 0 ok, 1 an SLO failed (run) or a metric regressed (gate), 2 bad input\n"
             "or usage, 3 runtime failure.\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return CLI_USAGE;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return CLI_OK;
  }
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
    if (!strcmp(argv[1], cmds[i].name)) return cmds[i].run(argc - 1, argv + 1);
  fprintf(stderr, "shardcheck: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return CLI_USAGE;
}
