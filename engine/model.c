// Model description (see model.h): dtypes, config checks, Hugging Face config.json read and
// write, parameter counts, the tensor list in Hugging Face names, and deterministic random
// weights (generated per element from a counter, so any slice stands on its own).
//
// Presets (model_preset_load, model_preset_names, model_config_resolve) live in
// config/presets.c; the safetensors format itself in engine/safetensors.c.
#include "engine/model.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/safetensors.h"

// --- dtypes

const char *sc_dtype_name(sc_dtype t) {
  switch (t) {
  case SC_F32: return "f32";
  case SC_F16: return "f16";
  case SC_BF16: return "bf16";
  case SC_I8: return "int8";
  case SC_I4: return "int4";
  case SC_FP8: return "fp8";
  }
  return "unknown";
}

sc_status sc_dtype_parse(const char *s, sc_dtype *out) {
  static const struct {
    const char *name;
    sc_dtype t;
  } names[] = {
      {"f32", SC_F32},   {"fp32", SC_F32},      {"float32", SC_F32}, {"f16", SC_F16},
      {"fp16", SC_F16},  {"float16", SC_F16},   {"bf16", SC_BF16},   {"bfloat16", SC_BF16},
      {"int8", SC_I8},   {"int4", SC_I4},       {"fp8", SC_FP8},     {"fp8_e4m3", SC_FP8},
  };
  if (!s) return SC_INVALID;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!strcasecmp(s, names[i].name)) {
      *out = names[i].t;
      return SC_OK;
    }
  return SC_INVALID;
}

double sc_dtype_bytes(sc_dtype t) {
  switch (t) {
  case SC_F32: return 4;
  case SC_F16:
  case SC_BF16: return 2;
  case SC_I8:
  case SC_FP8: return 1;
  case SC_I4: return 0.5;
  }
  return 0;
}

// torch_dtype spelling of the on-disk dtypes; NULL for dtypes safetensors files do not hold.
static const char *torch_dtype_name(sc_dtype t) {
  switch (t) {
  case SC_F32: return "float32";
  case SC_F16: return "float16";
  case SC_BF16: return "bfloat16";
  default: return NULL;
  }
}

// --- config checks

sc_status model_config_check(const model_config *c, const char *where, sc_error *err) {
  if (!where || !*where) where = c->name[0] ? c->name : "model config";
  const struct {
    const char *field;
    int v;
  } pos[] = {
      {"vocab_size", c->vocab_size},
      {"hidden_size", c->dim},
      {"num_hidden_layers", c->n_layers},
      {"num_attention_heads", c->n_heads},
      {"num_key_value_heads", c->n_kv_heads},
      {"head_dim", c->head_dim},
      {"intermediate_size", c->ffn_dim},
      {"max_position_embeddings", c->max_seq_len},
  };
  for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
    if (pos[i].v <= 0)
      return sc_fail(err, SC_INVALID, "%s: field '%s' must be positive, got %d", where,
                     pos[i].field, pos[i].v);
  if (c->n_heads % c->n_kv_heads)
    return sc_fail(err, SC_INVALID,
                   "%s: field 'num_key_value_heads' (%d) must divide num_attention_heads (%d)",
                   where, c->n_kv_heads, c->n_heads);
  if (c->head_dim % 2)
    return sc_fail(err, SC_INVALID,
                   "%s: field 'head_dim' must be even (RoPE rotates pairs), got %d", where,
                   c->head_dim);
  if ((int64_t)c->n_heads * c->head_dim > INT_MAX)
    return sc_fail(err, SC_INVALID,
                   "%s: field 'num_attention_heads' x 'head_dim' (%d x %d) is too large", where,
                   c->n_heads, c->head_dim);
  if (!(c->rope_theta > 0) || !isfinite(c->rope_theta))
    return sc_fail(err, SC_INVALID, "%s: field 'rope_theta' must be a positive number, got %g",
                   where, (double)c->rope_theta);
  if (!(c->norm_eps > 0) || !isfinite(c->norm_eps))
    return sc_fail(err, SC_INVALID, "%s: field 'rms_norm_eps' must be a positive number, got %g",
                   where, (double)c->norm_eps);
  if ((unsigned)c->dtype > (unsigned)SC_DTYPE_LAST)
    return sc_fail(err, SC_INVALID, "%s: field 'torch_dtype' is not a known dtype (%d)", where,
                   (int)c->dtype);
  if (c->bos_token_id < -1 || c->bos_token_id >= c->vocab_size)
    return sc_fail(err, SC_INVALID,
                   "%s: field 'bos_token_id' must be -1 (none) or below vocab_size %d, got %d",
                   where, c->vocab_size, c->bos_token_id);
  if (c->eos_token_id < -1 || c->eos_token_id >= c->vocab_size)
    return sc_fail(err, SC_INVALID,
                   "%s: field 'eos_token_id' must be -1 (none) or below vocab_size %d, got %d",
                   where, c->vocab_size, c->eos_token_id);
  return SC_OK;
}

// --- config.json

static const char *json_type_name(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "object";
  case JSON_ARRAY: return "array";
  case JSON_STRING: return "string";
  case JSON_INTEGER: return "integer";
  case JSON_REAL: return "real";
  case JSON_TRUE:
  case JSON_FALSE: return "boolean";
  case JSON_NULL: return "null";
  }
  return "unknown";
}

// Reads integer field f into *out. Absent or null: SC_OK leaving *out alone when optional,
// SC_INVALID when required. *found says whether a value was read.
static sc_status get_int(const json_t *root, const char *path, const char *f, bool required,
                         int *out, bool *found, sc_error *err) {
  json_t *v = json_object_get(root, f);
  if (found) *found = false;
  if (!v || json_is_null(v)) {
    if (required) return sc_fail(err, SC_INVALID, "%s: field '%s' is missing", path, f);
    return SC_OK;
  }
  if (!json_is_integer(v))
    return sc_fail(err, SC_INVALID, "%s: field '%s' must be an integer, got %s", path, f,
                   json_type_name(v));
  json_int_t x = json_integer_value(v);
  if (x < INT_MIN || x > INT_MAX)
    return sc_fail(err, SC_INVALID, "%s: field '%s' is out of range: %lld", path, f,
                   (long long)x);
  *out = (int)x;
  if (found) *found = true;
  return SC_OK;
}

static sc_status get_num(const json_t *root, const char *path, const char *f, bool required,
                         float *out, sc_error *err) {
  json_t *v = json_object_get(root, f);
  if (!v || json_is_null(v)) {
    if (required) return sc_fail(err, SC_INVALID, "%s: field '%s' is missing", path, f);
    return SC_OK;
  }
  if (!json_is_number(v))
    return sc_fail(err, SC_INVALID, "%s: field '%s' must be a number, got %s", path, f,
                   json_type_name(v));
  *out = (float)json_number_value(v);
  return SC_OK;
}

// A token id: an integer, an array of integers (the first is used; empty means none), or
// null/absent (none: -1).
static sc_status get_token_id(const json_t *root, const char *path, const char *f, int *out,
                              sc_error *err) {
  json_t *v = json_object_get(root, f);
  *out = -1;
  if (!v || json_is_null(v)) return SC_OK;
  if (json_is_array(v)) {
    if (json_array_size(v) == 0) return SC_OK;
    json_t *first = json_array_get(v, 0);
    if (!json_is_integer(first))
      return sc_fail(err, SC_INVALID, "%s: field '%s' must hold integers, got %s", path, f,
                     json_type_name(first));
    v = first;
  } else if (!json_is_integer(v))
    return sc_fail(err, SC_INVALID, "%s: field '%s' must be an integer or an array, got %s",
                   path, f, json_type_name(v));
  json_int_t x = json_integer_value(v);
  if (x < -1 || x > INT_MAX)
    return sc_fail(err, SC_INVALID, "%s: field '%s' is out of range: %lld", path, f,
                   (long long)x);
  *out = (int)x;
  return SC_OK;
}

static sc_status config_from_json(const json_t *root, const char *path, model_config *c,
                                  sc_error *err) {
  if (!json_is_object(root))
    return sc_fail(err, SC_INVALID, "%s: expected a JSON object, got %s", path,
                   json_type_name(root));
  SC_TRY(get_int(root, path, "hidden_size", true, &c->dim, NULL, err));
  SC_TRY(get_int(root, path, "intermediate_size", true, &c->ffn_dim, NULL, err));
  SC_TRY(get_int(root, path, "num_attention_heads", true, &c->n_heads, NULL, err));
  SC_TRY(get_int(root, path, "num_hidden_layers", true, &c->n_layers, NULL, err));
  SC_TRY(get_int(root, path, "vocab_size", true, &c->vocab_size, NULL, err));
  SC_TRY(get_num(root, path, "rms_norm_eps", true, &c->norm_eps, err));
  SC_TRY(get_int(root, path, "max_position_embeddings", true, &c->max_seq_len, NULL, err));
  bool found;
  c->n_kv_heads = c->n_heads;
  SC_TRY(get_int(root, path, "num_key_value_heads", false, &c->n_kv_heads, NULL, err));
  SC_TRY(get_int(root, path, "head_dim", false, &c->head_dim, &found, err));
  if (!found && c->n_heads > 0) {
    if (c->dim % c->n_heads)
      return sc_fail(err, SC_INVALID,
                     "%s: field 'head_dim' is missing and hidden_size %d is not a multiple of "
                     "num_attention_heads %d",
                     path, c->dim, c->n_heads);
    c->head_dim = c->dim / c->n_heads;
  }
  c->rope_theta = 10000.0f;
  SC_TRY(get_num(root, path, "rope_theta", false, &c->rope_theta, err));
  json_t *tie = json_object_get(root, "tie_word_embeddings");
  c->tied_embeddings = false;
  if (tie && !json_is_null(tie)) {
    if (!json_is_boolean(tie))
      return sc_fail(err, SC_INVALID, "%s: field 'tie_word_embeddings' must be a boolean, got %s",
                     path, json_type_name(tie));
    c->tied_embeddings = json_is_true(tie);
  }
  // transformers >= 4.56 writes "dtype"; older versions "torch_dtype".
  const char *dkey = "torch_dtype";
  json_t *dt = json_object_get(root, dkey);
  if (!dt || json_is_null(dt)) dt = json_object_get(root, dkey = "dtype");
  c->dtype = SC_F32;
  if (dt && !json_is_null(dt)) {
    if (!json_is_string(dt))
      return sc_fail(err, SC_INVALID, "%s: field '%s' must be a string, got %s", path, dkey,
                     json_type_name(dt));
    const char *s = json_string_value(dt);
    if (!strcmp(s, "float32")) c->dtype = SC_F32;
    else if (!strcmp(s, "float16")) c->dtype = SC_F16;
    else if (!strcmp(s, "bfloat16")) c->dtype = SC_BF16;
    else
      return sc_fail(err, SC_INVALID,
                     "%s: field '%s' must be float32, float16 or bfloat16, got '%s'", path, dkey,
                     s);
  }
  SC_TRY(get_token_id(root, path, "bos_token_id", &c->bos_token_id, err));
  SC_TRY(get_token_id(root, path, "eos_token_id", &c->eos_token_id, err));
  return SC_OK;
}

// The directory part of path ("." when there is none), as the config's name.
static void name_from_path(const char *path, char *name, size_t cap) {
  const char *slash = strrchr(path, '/');
  if (!slash) snprintf(name, cap, ".");
  else if (slash == path) snprintf(name, cap, "/");
  else snprintf(name, cap, "%.*s", (int)(slash - path), path);
}

// Validates the parsed root (owned by the caller) as path's config.
static sc_status config_from_root(json_t *root, const char *path, model_config *out,
                                  sc_error *err) {
  model_config c;
  memset(&c, 0, sizeof c);
  name_from_path(path, c.name, sizeof c.name);
  SC_TRY(config_from_json(root, path, &c, err));
  SC_TRY(model_config_check(&c, path, err));
  *out = c;
  return SC_OK;
}

sc_status model_config_load_json(const char *path, model_config *out, sc_error *err) {
  FILE *f = fopen(path, "rb");
  if (!f) return sc_fail(err, SC_IO, "%s: cannot read: %s", path, strerror(errno));
  // The whole file, then the text parser (the one entry the fuzz target drives too).
  enum { CONFIG_JSON_MAX = 16 << 20 }; // bytes: a config.json is a few KB
  char *text = NULL;
  size_t n = 0, cap = 0;
  sc_status s = SC_OK;
  for (;;) {
    if (n == cap) {
      size_t ncap = cap ? 2 * cap : 8192;
      char *t = ncap <= CONFIG_JSON_MAX + 1 ? realloc(text, ncap) : NULL;
      if (!t) {
        s = ncap > CONFIG_JSON_MAX + 1
                ? sc_fail(err, SC_INVALID, "%s: larger than %d bytes: not a config.json", path,
                          (int)CONFIG_JSON_MAX)
                : sc_fail(err, SC_OOM, "%s: out of memory reading it", path);
        break;
      }
      text = t;
      cap = ncap;
    }
    size_t got = fread(text + n, 1, cap - n, f);
    n += got;
    if (got == 0) {
      if (ferror(f)) s = sc_fail(err, SC_IO, "%s: cannot read: %s", path, strerror(errno));
      break;
    }
  }
  fclose(f);
  if (s == SC_OK) s = model_config_parse_json(text, n, path, out, err);
  free(text);
  return s;
}

sc_status model_config_parse_json(const char *text, size_t len, const char *path,
                                  model_config *out, sc_error *err) {
  json_error_t je;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  if (!root)
    return sc_fail(err, SC_INVALID, "%s: malformed JSON at line %d, column %d: %s", path,
                   je.line, je.column, je.text);
  sc_status s = config_from_root(root, path, out, err);
  json_decref(root);
  return s;
}

// A JSON real that prints as the shortest decimal reading back to the same float
// (1e-05, not 9.99999974737875e-06).
static json_t *json_float(float v) {
  char buf[32];
  for (int p = 1; p <= 9; p++) {
    snprintf(buf, sizeof buf, "%.*g", p, (double)v);
    if ((float)strtod(buf, NULL) == v) break;
  }
  return json_real(strtod(buf, NULL));
}

static json_t *json_token(int id) { return id < 0 ? json_null() : json_integer(id); }

sc_status model_config_write_json(const model_config *c, const char *path, sc_error *err) {
  SC_TRY(model_config_check(c, NULL, err));
  const char *td = torch_dtype_name(c->dtype);
  if (!td)
    return sc_fail(err, SC_INVALID,
                   "%s: torch_dtype %s cannot be written to config.json (float32, float16 or "
                   "bfloat16 only)",
                   path, sc_dtype_name(c->dtype));
  json_t *root = json_pack(
      "{s:[s], s:s, s:s, s:b, s:b, s:f, s:o, s:o, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:o, "
      "s:o, s:b, s:s, s:b}",
      "architectures", "LlamaForCausalLM", "model_type", "llama", "hidden_act", "silu",
      "attention_bias", 0, "mlp_bias", 0, "attention_dropout", 0.0, "bos_token_id",
      json_token(c->bos_token_id), "eos_token_id", json_token(c->eos_token_id), "hidden_size",
      c->dim, "intermediate_size", c->ffn_dim, "num_attention_heads", c->n_heads,
      "num_hidden_layers", c->n_layers, "num_key_value_heads", c->n_kv_heads, "head_dim",
      c->head_dim, "vocab_size", c->vocab_size, "max_position_embeddings", c->max_seq_len,
      "rms_norm_eps", json_float(c->norm_eps), "rope_theta", json_float(c->rope_theta),
      "tie_word_embeddings", (int)c->tied_embeddings, "torch_dtype", td, "use_cache", 1);
  if (!root) return sc_fail(err, SC_OOM, "%s: out of memory building config.json", path);
  int rc = json_dump_file(root, path, JSON_INDENT(2) | JSON_REAL_PRECISION(9));
  json_decref(root);
  if (rc != 0) return sc_fail(err, SC_IO, "%s: cannot write: %s", path, strerror(errno));
  return SC_OK;
}

// --- parameters and tensors

uint64_t model_config_n_params(const model_config *c) {
  uint64_t dim = (uint64_t)c->dim, q = (uint64_t)c->n_heads * (uint64_t)c->head_dim,
           kv = (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim, ffn = (uint64_t)c->ffn_dim,
           vocab = (uint64_t)c->vocab_size;
  uint64_t layer = 2 * dim                   // input + post-attention norms
                   + dim * q + 2 * dim * kv  // q, k, v projections
                   + q * dim                 // o projection
                   + 3 * dim * ffn;          // gate, up, down
  return vocab * dim + (uint64_t)c->n_layers * layer + dim + (c->tied_embeddings ? 0 : vocab * dim);
}

// What a tensor is, for the generator's scaling.
typedef enum tensor_kind {
  TK_EMBED, // model.embed_tokens.weight
  TK_NORM,  // any *norm.weight
  TK_PROJ,  // q/k/v/gate/up: input projections
  TK_OUT,   // o_proj, down_proj: residual outputs
  TK_HEAD,  // lm_head.weight
} tensor_kind;

static const struct {
  const char *suffix;
  tensor_kind kind;
  char rows, cols; // 'd' dim, 'q' n_heads*head_dim, 'k' n_kv_heads*head_dim, 'f' ffn; 0: 1-D
} layer_tensors[] = {
    {"input_layernorm.weight", TK_NORM, 'd', 0},
    {"self_attn.q_proj.weight", TK_PROJ, 'q', 'd'},
    {"self_attn.k_proj.weight", TK_PROJ, 'k', 'd'},
    {"self_attn.v_proj.weight", TK_PROJ, 'k', 'd'},
    {"self_attn.o_proj.weight", TK_OUT, 'd', 'q'},
    {"post_attention_layernorm.weight", TK_NORM, 'd', 0},
    {"mlp.gate_proj.weight", TK_PROJ, 'f', 'd'},
    {"mlp.up_proj.weight", TK_PROJ, 'f', 'd'},
    {"mlp.down_proj.weight", TK_OUT, 'd', 'f'},
};
enum { N_LAYER_TENSORS = sizeof layer_tensors / sizeof layer_tensors[0] };

static int64_t dim_of(const model_config *c, char d) {
  switch (d) {
  case 'd': return c->dim;
  case 'q': return (int64_t)c->n_heads * c->head_dim;
  case 'k': return (int64_t)c->n_kv_heads * c->head_dim;
  case 'f': return c->ffn_dim;
  }
  return 0;
}

static void set_desc(model_tensor_desc *d, const char *name, int64_t rows, int64_t cols) {
  snprintf(d->name, sizeof d->name, "%s", name);
  d->ndim = cols ? 2 : 1;
  d->shape[0] = rows;
  d->shape[1] = cols;
}

static void layer_desc(const model_config *c, int layer, int j, model_tensor_desc *d) {
  char name[MODEL_TENSOR_NAME_MAX];
  snprintf(name, sizeof name, "model.layers.%d.%s", layer, layer_tensors[j].suffix);
  set_desc(d, name, dim_of(c, layer_tensors[j].rows), dim_of(c, layer_tensors[j].cols));
}

int model_tensor_list(const model_config *c, model_tensor_desc *out, int cap) {
  int n = 0;
#define PUT(expr)                                                                                  \
  do {                                                                                             \
    if (n < cap) expr;                                                                             \
    n++;                                                                                           \
  } while (0)
  PUT(set_desc(&out[n], "model.embed_tokens.weight", c->vocab_size, c->dim));
  for (int l = 0; l < c->n_layers; l++)
    for (int j = 0; j < N_LAYER_TENSORS; j++) PUT(layer_desc(c, l, j, &out[n]));
  PUT(set_desc(&out[n], "model.norm.weight", c->dim, 0));
  if (!c->tied_embeddings) PUT(set_desc(&out[n], "lm_head.weight", c->vocab_size, c->dim));
#undef PUT
  return n;
}

// Parses a Hugging Face tensor name against c: its shape in *d and its kind in *kind.
static sc_status tensor_parse(const model_config *c, const char *name, model_tensor_desc *d,
                              tensor_kind *kind, sc_error *err) {
  memset(d, 0, sizeof *d);
  if (!strcmp(name, "model.embed_tokens.weight")) {
    set_desc(d, name, c->vocab_size, c->dim);
    *kind = TK_EMBED;
    return SC_OK;
  }
  if (!strcmp(name, "model.norm.weight")) {
    set_desc(d, name, c->dim, 0);
    *kind = TK_NORM;
    return SC_OK;
  }
  if (!strcmp(name, "lm_head.weight")) {
    if (c->tied_embeddings)
      return sc_fail(err, SC_INVALID,
                     "%s: tensor 'lm_head.weight' does not exist: the model ties it to "
                     "model.embed_tokens.weight",
                     c->name);
    set_desc(d, name, c->vocab_size, c->dim);
    *kind = TK_HEAD;
    return SC_OK;
  }
  static const char prefix[] = "model.layers.";
  if (!strncmp(name, prefix, sizeof prefix - 1)) {
    const char *p = name + sizeof prefix - 1;
    long layer = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 9) layer = layer * 10 + (*p++ - '0'), digits++;
    bool canonical = digits > 0 && *p == '.' && !(digits > 1 && name[sizeof prefix - 1] == '0');
    if (canonical && layer < c->n_layers)
      for (int j = 0; j < N_LAYER_TENSORS; j++)
        if (!strcmp(p + 1, layer_tensors[j].suffix)) {
          layer_desc(c, (int)layer, j, d);
          *kind = layer_tensors[j].kind;
          return SC_OK;
        }
  }
  return sc_fail(err, SC_INVALID, "%s: no tensor named '%s' (%d layers, %s embeddings)", c->name,
                 name, c->n_layers, c->tied_embeddings ? "tied" : "untied");
}

sc_status model_tensor_find(const model_config *c, const char *name, model_tensor_desc *out,
                            sc_error *err) {
  tensor_kind kind;
  return tensor_parse(c, name, out, &kind, err);
}

// --- deterministic random weights

static uint64_t splitmix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t fnv1a64(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
  return h;
}

sc_status model_gen_slice(const model_config *c, uint64_t seed, const char *name, int64_t r0,
                          int64_t nr, int64_t c0, int64_t nc, float *dst, sc_error *err) {
  model_tensor_desc d;
  tensor_kind kind = TK_PROJ;
  SC_TRY(tensor_parse(c, name, &d, &kind, err));
  int64_t rows = d.ndim == 2 ? d.shape[0] : 1, cols = d.ndim == 2 ? d.shape[1] : d.shape[0];
  if (r0 < 0 || nr < 0 || c0 < 0 || nc < 0 || r0 > rows - nr || c0 > cols - nc)
    return sc_fail(err, SC_INVALID,
                   "%s: tensor '%s' (%lld, %lld): slice rows [%lld, %lld) cols [%lld, %lld) is "
                   "out of bounds",
                   c->name, name, (long long)rows, (long long)cols, (long long)r0,
                   (long long)(r0 + nr), (long long)c0, (long long)(c0 + nc));
  // Element i of the tensor (row-major) is uniform in [-a, a) (norms: 1 + that), drawn from
  // the splitmix64 stream keyed by (seed, name) at position i.
  double a, base = 0;
  switch (kind) {
  case TK_EMBED: a = 1.0; break;
  case TK_NORM: a = 0.1, base = 1.0; break;
  case TK_PROJ: a = sqrt(3.0 / (double)cols); break;
  case TK_OUT: a = sqrt(3.0 / (double)cols) / sqrt(2.0 * c->n_layers); break;
  case TK_HEAD: a = sqrt(3.0 / (double)c->dim); break;
  default: a = 0;
  }
  uint64_t key = splitmix64(seed ^ splitmix64(fnv1a64(name)));
  const uint64_t golden = 0x9e3779b97f4a7c15ull;
  for (int64_t r = 0; r < nr; r++) {
    uint64_t i = (uint64_t)(r0 + r) * (uint64_t)cols + (uint64_t)c0;
    float *row = dst + r * nc;
    for (int64_t j = 0; j < nc; j++, i++) {
      uint64_t z = splitmix64(key + (i + 1) * golden);
      double u = (double)(z >> 40) * 0x1p-23 - 1.0; // [-1, 1) on a 2^-23 grid
      row[j] = (float)(base + a * u);
    }
  }
  return SC_OK;
}

// mkdir -p: creates dir and its missing parents.
static sc_status mkdir_p(const char *dir, sc_error *err) {
  char p[4096];
  if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
    return sc_fail(err, SC_INVALID, "%s: path too long", dir);
  for (char *s = p + 1; *s; s++) {
    if (*s != '/') continue;
    *s = 0;
    if (mkdir(p, 0777) != 0 && errno != EEXIST)
      return sc_fail(err, SC_IO, "%s: cannot create %s: %s", dir, p, strerror(errno));
    *s = '/';
  }
  if (mkdir(p, 0777) != 0 && errno != EEXIST)
    return sc_fail(err, SC_IO, "%s: cannot create: %s", dir, strerror(errno));
  struct stat sb;
  if (stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return sc_fail(err, SC_IO, "%s: not a directory", dir);
  return SC_OK;
}

static char *join(const char *dir, const char *name, char *buf, size_t cap) {
  snprintf(buf, cap, "%s%s%s", dir, dir[0] && dir[strlen(dir) - 1] == '/' ? "" : "/", name);
  return buf;
}

sc_status model_gen_write(const model_config *c, uint64_t seed, sc_dtype dtype, const char *dir,
                          sc_error *err) {
  if (!torch_dtype_name(dtype))
    return sc_fail(err, SC_INVALID, "%s: dtype %s cannot be written (f32, f16 or bf16)", dir,
                   sc_dtype_name(dtype));
  SC_TRY(model_config_check(c, NULL, err));
  SC_TRY(mkdir_p(dir, err));
  char path[4200];
  int n = model_tensor_list(c, NULL, 0);
  model_tensor_desc *ts = malloc((size_t)n * sizeof *ts);
  if (!ts) return sc_fail(err, SC_OOM, "%s: out of memory", dir);
  model_tensor_list(c, ts, n);
  st_writer *w;
  sc_status s = st_writer_new(join(dir, "model.safetensors", path, sizeof path), &w, err);
  if (s != SC_OK) {
    free(ts);
    return s;
  }
  for (int i = 0; i < n && s == SC_OK; i++)
    s = st_writer_declare(w, ts[i].name, dtype, ts[i].ndim, ts[i].shape, err);
  // Generate and stream each tensor in chunks of whole rows (or of one row's columns when a
  // row is longer than a chunk): at most CHUNK values in memory.
  enum { CHUNK = 1 << 20 };
  float *buf = NULL;
  if (s == SC_OK && !(buf = malloc(CHUNK * sizeof *buf)))
    s = sc_fail(err, SC_OOM, "%s: out of memory", dir);
  for (int i = 0; i < n && s == SC_OK; i++) {
    int64_t rows = ts[i].ndim == 2 ? ts[i].shape[0] : 1;
    int64_t cols = ts[i].ndim == 2 ? ts[i].shape[1] : ts[i].shape[0];
    int64_t rstep = cols <= CHUNK ? CHUNK / cols : 1, cstep = cols <= CHUNK ? cols : CHUNK;
    for (int64_t r = 0; r < rows && s == SC_OK; r += rstep) {
      int64_t nr = rows - r < rstep ? rows - r : rstep;
      for (int64_t c0 = 0; c0 < cols && s == SC_OK; c0 += cstep) {
        int64_t nc = cols - c0 < cstep ? cols - c0 : cstep;
        s = model_gen_slice(c, seed, ts[i].name, r, nr, c0, nc, buf, err);
        if (s == SC_OK) s = st_writer_append(w, buf, (size_t)(nr * nc), err);
      }
    }
  }
  free(buf);
  free(ts);
  if (s != SC_OK) {
    st_writer_finish(w, NULL); // frees w and removes the partial file; keep the first error
    return s;
  }
  SC_TRY(st_writer_finish(w, err));
  // A stale index would shadow the single file just written.
  if (unlink(join(dir, "model.safetensors.index.json", path, sizeof path)) != 0 &&
      errno != ENOENT)
    return sc_fail(err, SC_IO, "%s: cannot remove: %s", path, strerror(errno));
  model_config disk = *c;
  disk.dtype = dtype;
  return model_config_write_json(&disk, join(dir, "config.json", path, sizeof path), err);
}
