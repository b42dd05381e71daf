// Fuzz target: a model.safetensors file (8-byte header length, JSON header, a small body),
// through st_open_dir as the weight loader opens a directory; each small 1-D or 2-D tensor it
// accepts is then read back with st_read_f32, as the loader slices shards.
#include <stdint.h>
#include <stdlib.h>

#include "engine/safetensors.h"
#include "fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_write("model.safetensors", data, size);
  st_model *m = NULL;
  sc_error err = {{0}};
  if (st_open_dir(fuzz_dir(), &m, &err) != SC_OK) return 0;
  for (int i = 0; i < st_count(m); i++) {
    const st_tensor *t = st_tensor_at(m, i);
    if (t->ndim < 1 || t->ndim > 2 || t->nbytes > (1u << 16)) continue;
    int64_t nr = t->ndim == 2 ? t->shape[0] : 1, nc = t->ndim == 2 ? t->shape[1] : t->shape[0];
    if (nr * nc == 0) continue;
    float *dst = malloc((size_t)(nr * nc) * sizeof *dst);
    if (!dst) break;
    (void)st_read_f32(t, 0, nr, 0, nc, dst, &err);
    free(dst);
  }
  st_close(m);
  return 0;
}
