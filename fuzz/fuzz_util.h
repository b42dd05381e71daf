// Helpers the fuzz targets share: a private temporary directory for the parsers whose production
// entry takes a path (hardware profiles, config.json, safetensors, datasets), and writing the
// fuzzer's buffer there. Everything else is fed from memory by the targets themselves.
#ifndef SHARDCHECK_FUZZ_UTIL_H
#define SHARDCHECK_FUZZ_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// The process's temporary directory (created on first use, removed at exit with its files).
static char fuzz_dir_[64];
static char fuzz_files_[4][160];
static int fuzz_n_files_;

static inline void fuzz_cleanup_(void) {
  for (int i = 0; i < fuzz_n_files_; i++) unlink(fuzz_files_[i]);
  if (fuzz_dir_[0]) rmdir(fuzz_dir_);
}

static inline const char *fuzz_dir(void) {
  if (!fuzz_dir_[0]) {
    const char *t = getenv("TMPDIR");
    snprintf(fuzz_dir_, sizeof fuzz_dir_, "%s/shardcheck-fuzz-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(fuzz_dir_)) {
      perror("fuzz: mkdtemp");
      abort();
    }
    atexit(fuzz_cleanup_);
  }
  return fuzz_dir_;
}

// Writes data[0, size) to DIR/name (replacing it) and returns the path (static storage).
static inline const char *fuzz_write(const char *name, const uint8_t *data, size_t size) {
  static char path[160];
  snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
  bool known = false;
  for (int i = 0; i < fuzz_n_files_; i++) known |= !strcmp(fuzz_files_[i], path);
  if (!known && fuzz_n_files_ < 4) snprintf(fuzz_files_[fuzz_n_files_++], 160, "%s", path);
  FILE *f = fopen(path, "wb");
  if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
    perror("fuzz: writing the input");
    abort();
  }
  return path;
}

#endif
