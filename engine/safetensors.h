// Reading safetensors files: one `model.safetensors`, or shards listed by
// `model.safetensors.index.json`, memory-mapped; a reader touches only the bytes of the
// slices it asks for. Also a streaming writer (used by `shardcheck model gen`).
//
// What a tensor must look like for a given model is engine/model.h's business
// (model_tensor_list); this file only checks that the files are well formed.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/model.h"
#include "kernels/status.h"

typedef struct st_tensor {
  const char *name;     // owned by the st_model
  const char *file;     // path of the shard holding it
  sc_dtype dtype;       // F32, F16 or BF16 (others are refused at open)
  int ndim;             // 0..4
  int64_t shape[4];
  const uint8_t *data;  // into the mapping
  size_t nbytes;
} st_tensor;

typedef struct st_model st_model;

// Opens dir/model.safetensors or dir/model.safetensors.index.json and every shard it names.
// Refuses (SC_INVALID, err naming the file) a truncated file, a corrupt header, a tensor whose
// bytes run past the file, an unsupported dtype. Missing files are SC_IO.
sc_status st_open_dir(const char *dir, st_model **out, sc_error *err);
void st_close(st_model *m); // NULL is a no-op
const st_tensor *st_find(const st_model *m, const char *name); // NULL when absent
int st_count(const st_model *m);
// The i-th tensor in name order (0 <= i < st_count), NULL otherwise; for listing a model.
const st_tensor *st_tensor_at(const st_model *m, int i);

// Converts rows [r0, r0+nr) x cols [c0, c0+nc) of a 1-D or 2-D tensor to fp32 in dst (nr, nc).
// A 1-D tensor is one row. Reads only those bytes of the mapping.
sc_status st_read_f32(const st_tensor *t, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                      float *dst, sc_error *err);

// --- writer: declare every tensor first (the header precedes the data), then write each in
// declaration order.
typedef struct st_writer st_writer;
sc_status st_writer_new(const char *path, st_writer **out, sc_error *err);
sc_status st_writer_declare(st_writer *w, const char *name, sc_dtype dtype, int ndim,
                            const int64_t *shape, sc_error *err);
// Writes the next declared tensor from fp32 values, converting to its dtype.
sc_status st_writer_write(st_writer *w, const float *values, size_t n, sc_error *err);
// Streams n more fp32 values into the declared tensors in order, crossing tensor boundaries
// as needed, so a large tensor can be written in chunks (n may be any size).
sc_status st_writer_append(st_writer *w, const float *values, size_t n, sc_error *err);
// Finishes the file (checks every declared tensor was written) and frees w, also on error.
// The data goes to PATH.tmp and is renamed to PATH only on success; on error (here or in an
// earlier write, which the writer remembers and repeats) PATH.tmp is removed and PATH is
// left as it was.
sc_status st_writer_finish(st_writer *w, sc_error *err);

// fp32 <-> half conversions (round to nearest even).
uint16_t sc_f32_to_bf16(float f);
float sc_bf16_to_f32(uint16_t h);
uint16_t sc_f32_to_f16(float f);
float sc_f16_to_f32(uint16_t h);
