// Where a replica's weights come from: safetensors files on disk (checked against the
// shapes the config implies before anything is loaded), or deterministic random weights
// generated slice by slice from a seed (a preset without files). Either way a rank reads
// only its own slices. Conversion to fp32 happens here; placing on a device is the executor's.
#pragma once

#include <stdint.h>

#include "engine/model.h"
#include "kernels/status.h"

typedef struct weight_source weight_source;

// dir NULL: generated from seed. Otherwise opens dir's safetensors and checks that every
// tensor of model_tensor_list(c) is present with its shape. On error *out is NULL and err
// names the file, the tensor and the expected and found shapes.
sc_status weight_source_open(const model_config *c, const char *dir, uint64_t seed,
                             weight_source **out, sc_error *err);
void weight_source_free(weight_source *ws); // NULL is a no-op

// Rows [r0, r0+nr) x cols [c0, c0+nc) of tensor `name` as fp32 into dst (nr, nc).
sc_status weight_source_read(const weight_source *ws, const char *name, int64_t r0, int64_t nr,
                             int64_t c0, int64_t nc, float *dst, sc_error *err);
