// Lookup over the files cmake/embed.cmake compiled in.
#include "kernels/embedded.h"

#include <string.h>

const sc_embedded_file *sc_embedded_find(const char *path) {
  for (const sc_embedded_file *f = sc_embedded_files; f->path; f++)
    if (strcmp(f->path, path) == 0) return f;
  return NULL;
}
