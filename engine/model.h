// Llama-family model description: the config (from Hugging Face config.json or a preset),
// dtypes, the list of tensors a config implies, and deterministic random weights.
//
// Presets and the command-line "preset or directory" resolution are config/presets.h;
// loading tensors from disk is engine/safetensors.h; slicing them for ranks is engine/shard.h;
// running them is engine/executor.c.
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/status.h"

// int4 and fp8 exist for the planner and the simulator only: the real backends hold f32 or int8.
typedef enum sc_dtype { SC_F32, SC_F16, SC_BF16, SC_I8, SC_I4, SC_FP8 } sc_dtype;
#define SC_DTYPE_LAST SC_FP8

const char *sc_dtype_name(sc_dtype t); // "f32", "f16", "bf16", "int8", "int4"
// Accepts f32|fp32|float32, f16|fp16|float16, bf16|bfloat16, int8, int4.
sc_status sc_dtype_parse(const char *s, sc_dtype *out);
double sc_dtype_bytes(sc_dtype t); // bytes per element, 0.5 for int4

#define MODEL_NAME_MAX 128

typedef struct model_config {
  char name[MODEL_NAME_MAX]; // preset name or model directory
  int vocab_size;            // vocab_size
  int dim;                   // hidden_size
  int n_layers;              // num_hidden_layers
  int n_heads;               // num_attention_heads
  int n_kv_heads;            // num_key_value_heads (= n_heads when absent)
  int head_dim;              // head_dim (= dim / n_heads when absent)
  int ffn_dim;               // intermediate_size
  int max_seq_len;           // max_position_embeddings
  float rope_theta;          // rope_theta (10000 when absent)
  float norm_eps;            // rms_norm_eps
  bool tied_embeddings;      // tie_word_embeddings
  sc_dtype dtype;            // torch_dtype: dtype of the weights on disk
  int bos_token_id;          // -1 when none
  int eos_token_id;          // -1 when none
} model_config;

// Checks the fields are positive and consistent (heads divide, head_dim even, ...).
// On error fills err naming `where` (a file path or preset name) and the field.
sc_status model_config_check(const model_config *c, const char *where, sc_error *err);

// Reads a Hugging Face config.json. Required: hidden_size, intermediate_size,
// num_attention_heads, num_hidden_layers, vocab_size, rms_norm_eps, max_position_embeddings.
// A missing field or a wrong type is SC_INVALID with "PATH: field 'F' ..." in err.
sc_status model_config_load_json(const char *path, model_config *out, sc_error *err);
// The same from text[0, len) read from path (which names it in errors and gives the config its
// name, the directory part); what load_json does after reading the file.
sc_status model_config_parse_json(const char *text, size_t len, const char *path,
                                  model_config *out, sc_error *err);
sc_status model_config_write_json(const model_config *c, const char *path, sc_error *err);

uint64_t model_config_n_params(const model_config *c);

// --- the tensors a config implies, in Hugging Face names and (out, in) shapes
#define MODEL_TENSOR_NAME_MAX 96
typedef struct model_tensor_desc {
  char name[MODEL_TENSOR_NAME_MAX]; // e.g. "model.layers.3.self_attn.q_proj.weight"
  int ndim;                         // 1 or 2
  int64_t shape[2];                 // (rows, cols) or (n)
} model_tensor_desc;

// Writes up to cap descriptors and returns how many the model has (call with cap 0 to count).
int model_tensor_list(const model_config *c, model_tensor_desc *out, int cap);
// Fills *out with the shape c implies for the Hugging Face tensor `name`; SC_INVALID naming it
// when c has no such tensor (e.g. lm_head.weight of a tied model, a layer past n_layers).
sc_status model_tensor_find(const model_config *c, const char *name, model_tensor_desc *out,
                            sc_error *err);

// --- deterministic random weights (counter-based: any slice is generated on its own)
// Fills dst (nr, nc) with rows [r0, r0+nr) and cols [c0, c0+nc) of tensor `name` as it would
// be for (c, seed). 1-D tensors use r0 = 0, nr = 1. Values are scaled so activations stay
// finite over thousands of tokens (fan-in scaling; norms near 1).
sc_status model_gen_slice(const model_config *c, uint64_t seed, const char *name, int64_t r0,
                          int64_t nr, int64_t c0, int64_t nc, float *dst, sc_error *err);
// Writes config.json and model.safetensors for (c, seed) into dir (created if missing),
// weights stored as dtype (f32, f16 or bf16), one tensor at a time (streamed in chunks of
// rows, so memory stays a few MB whatever the model), then removes a stale
// model.safetensors.index.json (it would shadow the new file) and writes config.json last.
// model.safetensors is never left half-written: a failure while writing it leaves dir's
// files as they were.
sc_status model_gen_write(const model_config *c, uint64_t seed, sc_dtype dtype, const char *dir,
                          sc_error *err);
