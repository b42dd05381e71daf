// Subcommands of the shardcheck binary and the helpers they share.
//
// Exit codes everywhere: 0 ok, 1 an SLO failed (run) or a metric regressed (gate), 2 bad input
// or usage (the message names the file and the field), 3 runtime failure. Library code returns
// sc_status; cli_exit_code maps it.
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels/status.h"

enum { CLI_OK = 0, CLI_SLO_FAIL = 1, CLI_USAGE = 2, CLI_RUNTIME = 3 };

int cmd_generate(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_model(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_validate(int argc, char **argv);
int cmd_runs(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_profile_import(int argc, char **argv); // `shardcheck profile import`
int cmd_worker(int argc, char **argv);
int cmd_gate(int argc, char **argv);
int cmd_baseline(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);
int cmd_capacity(int argc, char **argv);

// Maps a library status to an exit code (SC_INVALID and SC_IO on input -> 2, else 3).
int cli_exit_code(sc_status s);
// Prints "shardcheck CMD: MSG" on stderr and returns cli_exit_code(s).
int cli_fail(const char *cmd, sc_status s, const sc_error *err);

// Prints "shardcheck CMD: MSG 'ARG'" (ARG may be NULL) and a pointer to --help on stderr;
// returns CLI_USAGE.
int cli_usage_error(const char *cmd, const char *msg, const char *arg);

// A command an MPI launcher started (mpirun, srun, the Kubernetes MPI Operator; kernels/mpi.h,
// docs/scaling-out.md): initialises MPI (finalized at exit) and checks that every rank runs the
// same build. *mpi: whether this process is a rank of an MPI job of more than one. CLI_OK, or
// CLI_USAGE after one line on stderr (rank 0's only, for a check every rank fails): a build
// without MPI under a launcher, MPI that will not start, another build on some rank.
int cli_mpi_begin(const char *cmd, bool *mpi);

// Whole-string number parsers: false for empty input, trailing characters or out of range.
bool cli_parse_int(const char *s, long lo, long hi, int *out);
bool cli_parse_double(const char *s, double lo, double hi, double *out);
// A fraction given as a percentage or as a number: "5%" -> 0.05, "0.05" -> 0.05 (0 to 1000% or
// 0 to 10); false for anything else.
bool cli_parse_pct(const char *s, double *out);
bool cli_parse_u64(const char *s, uint64_t *out); // no sign allowed

// Writes text greedily wrapped at `width` columns and ends the line; every line after the
// first is indented by `indent` spaces (the first continues one already started there).
void cli_print_wrapped(FILE *f, const char *text, int indent, int width);

// Prints "what: a, b, c" (or "what: (none)") from a names function such as
// model_preset_names or hw_profile_names.
void cli_print_names(FILE *f, const char *what, int (*names_fn)(const char **, int));

// A scenario given on the command line: a file when one exists at arg (or arg ends in .yaml:
// the loader then names the missing file), else the shipped scenario of that name
// (DATA_ROOT/scenarios/NAME.yaml, kernels/paths.h: `quickstart`, `capacity/llama3-8b-h100`).
// The path goes into out. SC_INVALID naming every place looked when there is neither; out is
// then "".
sc_status cli_scenario_path(const char *arg, char *out, size_t cap, sc_error *err);
// Prints the shipped scenarios' names, one a line (what cli_scenario_path resolves): nothing
// without a data root.
void cli_print_scenario_names(FILE *f);

// The source revision a run records (store_run.git_rev): $SHARDCHECK_GIT_REV when set and not
// empty, else `git rev-parse --short HEAD` in the current directory, else "" (no revision).
// Writes at most cap bytes into rev (cap CLI_GIT_REV_CAP keeps what the store has always kept).
enum { CLI_GIT_REV_CAP = 64 };
void cli_git_rev(char *rev, size_t cap);
