// Status codes and error text shared by every layer of shardcheck.
//
// Library code (kernels/, engine/, scenarios/, reports/, faults/) returns an sc_status and
// never prints or exits; a caller that wants the why passes an sc_error, which the failing
// function fills with one line naming the file, field or call and the value. The CLI maps
// statuses to exit codes (cli/main.c); nothing here knows about exit codes.
#pragma once

#include <stdarg.h>
#include <stddef.h>

typedef enum sc_status {
  SC_OK = 0,
  SC_INVALID,   // bad input: a file, a field, an argument (exit 2 at the CLI)
  SC_IO,        // a file could not be read or written
  SC_OOM,       // host or device allocation failed
  SC_DEVICE,    // a device call failed
  SC_TIMEOUT,   // a deadline passed (collectives, requests)
  SC_ABORTED,   // someone called abort; the operation was abandoned
  SC_NUMERICAL, // NaN or inf where a finite number was required
} sc_status;

// One line of error text; msg[0] == 0 means nothing was recorded.
typedef struct sc_error {
  char msg[512];
} sc_error;

const char *sc_status_name(sc_status s);

// Records a printf-style message in err (if err is not NULL) and returns status, so that
// `return sc_fail(err, SC_INVALID, "%s: field 'x' must be ...", path);` is one line.
sc_status sc_fail(sc_error *err, sc_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

// Returns from the enclosing function when expr is not SC_OK.
#define SC_TRY(expr)                                                                               \
  do {                                                                                             \
    sc_status sc_try_s_ = (expr);                                                                  \
    if (sc_try_s_ != SC_OK) return sc_try_s_;                                                      \
  } while (0)

// Broken invariants only (never bad input): prints the statement, file and line, then aborts.
#define SC_ASSERT(cond)                                                                            \
  do {                                                                                             \
    if (!(cond)) sc_assert_fail(#cond, __func__, __FILE__, __LINE__);                              \
  } while (0)
_Noreturn void sc_assert_fail(const char *stmt, const char *func, const char *file, int line);
