// Weight sources: safetensors (validated against the config) or generated (see weights.h).
#include "engine/weights.h"

#include <stdlib.h>

#include "engine/safetensors.h"

struct weight_source {
  model_config cfg;
  st_model *st;  // NULL when generated
  uint64_t seed; // for generated weights
  const char *dir;
};

// Checks every tensor the config implies against the files' headers (no data is read).
static sc_status check_tensors(const model_config *c, const st_model *st, const char *dir,
                               sc_error *err) {
  int n = model_tensor_list(c, NULL, 0);
  model_tensor_desc *want = calloc((size_t)n, sizeof *want);
  if (!want) return SC_OOM;
  model_tensor_list(c, want, n);
  sc_status s = SC_OK;
  for (int i = 0; i < n && s == SC_OK; i++) {
    const st_tensor *t = st_find(st, want[i].name);
    if (!t) {
      s = sc_fail(err, SC_INVALID, "%s: tensor '%s' is missing (config.json implies it)", dir,
                  want[i].name);
      break;
    }
    int64_t rows = want[i].shape[0], cols = want[i].ndim == 2 ? want[i].shape[1] : 1;
    int64_t trows = t->ndim >= 1 ? t->shape[0] : 1, tcols = t->ndim == 2 ? t->shape[1] : 1;
    if (t->ndim != want[i].ndim || trows != rows || tcols != cols) {
      if (want[i].ndim == 2)
        s = sc_fail(err, SC_INVALID,
                    "%s: tensor '%s' has shape [%lld, %lld] (ndim %d), config.json implies "
                    "[%lld, %lld]",
                    t->file, t->name, (long long)trows, (long long)tcols, t->ndim,
                    (long long)rows, (long long)cols);
      else
        s = sc_fail(err, SC_INVALID,
                    "%s: tensor '%s' has %d dims (first %lld), config.json implies [%lld]",
                    t->file, t->name, t->ndim, (long long)trows, (long long)rows);
    }
  }
  free(want);
  return s;
}

sc_status weight_source_open(const model_config *c, const char *dir, uint64_t seed,
                             weight_source **out, sc_error *err) {
  *out = NULL;
  weight_source *ws = calloc(1, sizeof *ws);
  if (!ws) return SC_OOM;
  ws->cfg = *c;
  ws->seed = seed;
  ws->dir = dir;
  if (dir) {
    sc_status s = st_open_dir(dir, &ws->st, err);
    if (s == SC_OK) s = check_tensors(c, ws->st, dir, err);
    if (s != SC_OK) {
      weight_source_free(ws);
      return s;
    }
  }
  *out = ws;
  return SC_OK;
}

void weight_source_free(weight_source *ws) {
  if (!ws) return;
  st_close(ws->st);
  free(ws);
}

sc_status weight_source_read(const weight_source *ws, const char *name, int64_t r0, int64_t nr,
                             int64_t c0, int64_t nc, float *dst, sc_error *err) {
  if (!ws->st) return model_gen_slice(&ws->cfg, ws->seed, name, r0, nr, c0, nc, dst, err);
  const st_tensor *t = st_find(ws->st, name);
  if (!t) return sc_fail(err, SC_INVALID, "%s: tensor '%s' is missing", ws->dir, name);
  return st_read_f32(t, r0, nr, c0, nc, dst, err);
}
