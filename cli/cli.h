// Subcommands of the shardcheck binary and the helpers they share.
//
// Exit codes everywhere: 0 ok, 2 bad input or usage (the message names the file and the
// field), 3 runtime failure. Library code returns sc_status; cli_exit_code maps it.
#pragma once

#include "kernels/status.h"

enum { CLI_OK = 0, CLI_USAGE = 2, CLI_RUNTIME = 3 };

int cmd_generate(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_model(int argc, char **argv);

// Maps a library status to an exit code (SC_INVALID and SC_IO on input -> 2, else 3).
int cli_exit_code(sc_status s);
// Prints "shardcheck CMD: MSG" on stderr and returns cli_exit_code(s).
int cli_fail(const char *cmd, sc_status s, const sc_error *err);
