// Shared helpers for the Criterion tests: temporary directories and running the CLI.
#pragma once

#include <stddef.h>

// Makes a fresh directory under $TMPDIR (or /tmp) and returns its path (static buffer per call
// slot; copy it if you need more than a few).
const char *sc_test_tmpdir(const char *tag);
// Runs the shardcheck binary with args (a shell-quoted string), captures stdout+stderr into
// out (NUL-terminated, truncated at cap) and returns its exit code (-1 if it did not exit).
int sc_test_run_cli(const char *args, char *out, size_t cap);
// Writes text to path; returns 0 on success.
int sc_test_write_file(const char *path, const void *data, size_t n);
