// sc_status names, sc_fail, and the one place that aborts on a broken invariant.
#include "kernels/status.h"

#include <stdio.h>
#include <stdlib.h>

const char *sc_status_name(sc_status s) {
  switch (s) {
  case SC_OK: return "ok";
  case SC_INVALID: return "invalid";
  case SC_IO: return "io";
  case SC_OOM: return "oom";
  case SC_DEVICE: return "device";
  case SC_TIMEOUT: return "timeout";
  case SC_ABORTED: return "aborted";
  case SC_NUMERICAL: return "numerical";
  }
  return "unknown";
}

sc_status sc_fail(sc_error *err, sc_status status, const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
  }
  return status;
}

void sc_assert_fail(const char *stmt, const char *func, const char *file, int line) {
  fprintf(stderr, "shardcheck: internal invariant broken: %s in %s at %s:%d\n", stmt, func, file,
          line);
  abort();
}
