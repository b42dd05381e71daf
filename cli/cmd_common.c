// Helpers shared by the subcommands: status -> exit code, one-line error reports.
#include <stdio.h>

#include "cli/cli.h"

int cli_exit_code(sc_status s) {
  switch (s) {
  case SC_OK: return CLI_OK;
  case SC_INVALID:
  case SC_IO: return CLI_USAGE;
  default: return CLI_RUNTIME;
  }
}

int cli_fail(const char *cmd, sc_status s, const sc_error *err) {
  fprintf(stderr, "shardcheck %s: %s\n", cmd,
          err && err->msg[0] ? err->msg : sc_status_name(s));
  return cli_exit_code(s);
}
