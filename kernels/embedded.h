// Files compiled into the binary (presets, hardware profiles): see cmake/embed.cmake.
#pragma once
#include <stddef.h>

typedef struct sc_embedded_file {
  const char *path; // relative to the source root, e.g. "scenarios/models/llama-tiny.yaml"
  const char *data; // NUL-terminated contents
  size_t size;      // bytes, without the NUL
} sc_embedded_file;

extern const sc_embedded_file sc_embedded_files[]; // ends with a {NULL, NULL, 0} entry

// Returns the embedded file with that path, or NULL.
const sc_embedded_file *sc_embedded_find(const char *path);
