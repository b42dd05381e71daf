// Test helpers (see helpers.h). Tests get SC_BINARY and SC_SOURCE_DIR from CMake.
#include "tests/helpers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

const char *sc_test_tmpdir(const char *tag) {
  static char bufs[8][256];
  static int slot;
  char *b = bufs[slot++ % 8];
  const char *base = getenv("TMPDIR");
  snprintf(b, 256, "%s/sc-%s-XXXXXX", base && *base ? base : "/tmp", tag);
  if (!mkdtemp(b)) return NULL;
  return b;
}

int sc_test_run_cli(const char *args, char *out, size_t cap) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "%s %s 2>&1", SC_BINARY, args);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  size_t n = 0;
  if (cap) out[0] = 0;
  while (cap && n + 1 < cap) {
    size_t got = fread(out + n, 1, cap - 1 - n, p);
    if (!got) break;
    n += got;
  }
  if (cap) out[n] = 0;
  char sink[4096];
  while (fread(sink, 1, sizeof sink, p)) {
  }
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int sc_test_write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t w = fwrite(data, 1, n, f);
  return fclose(f) == 0 && w == n ? 0 : -1;
}
