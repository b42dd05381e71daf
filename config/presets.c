// Model presets (scenarios/models/NAME.yaml, embedded in the binary or installed) and the
// command-line resolution "preset name or model directory" -> model_config.
//
// The struct, reading config.json and checking a config are engine/model.c; the YAML reader
// is config/yaml_map.c. A preset gives shapes only: it has no weights (`shardcheck model gen`
// writes random ones).
#include "config/presets.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "config/yaml_map.h"

#define MODELS_DIR "scenarios/models"
#define MODEL_ROPE_THETA_DEFAULT 10000.0f // Llama's rope base (the key is required anyway)

// --- presets

static bool parse_dtype(const char *text, void *dst) { return sc_dtype_parse(text, dst) == SC_OK; }

sc_status model_preset_load(const char *name_or_path, model_config *out, sc_error *err) {
  model_config c;
  memset(&c, 0, sizeof c);
  c.head_dim = 0; // absent: dim / n_heads
  c.rope_theta = MODEL_ROPE_THETA_DEFAULT;
  c.bos_token_id = -1;
  c.eos_token_id = -1;
  c.dtype = SC_BF16;
  char description[256] = "";
  double rope_theta = c.rope_theta, norm_eps = 0;
  const yaml_map_field fields[] = {
      {"name", YAML_MAP_STRING, c.name, sizeof c.name, true, NULL, NULL, NULL, NULL},
      {"description", YAML_MAP_STRING, description, sizeof description, true, NULL, NULL, NULL,
       NULL},
      {"vocab_size", YAML_MAP_INT, &c.vocab_size, 0, true, NULL, NULL, NULL, NULL},
      {"dim", YAML_MAP_INT, &c.dim, 0, true, NULL, NULL, NULL, NULL},
      {"n_layers", YAML_MAP_INT, &c.n_layers, 0, true, NULL, NULL, NULL, NULL},
      {"n_heads", YAML_MAP_INT, &c.n_heads, 0, true, NULL, NULL, NULL, NULL},
      {"n_kv_heads", YAML_MAP_INT, &c.n_kv_heads, 0, true, NULL, NULL, NULL, NULL},
      {"head_dim", YAML_MAP_INT, &c.head_dim, 0, false, NULL, NULL, NULL, NULL},
      {"ffn_dim", YAML_MAP_INT, &c.ffn_dim, 0, true, NULL, NULL, NULL, NULL},
      {"max_seq_len", YAML_MAP_INT, &c.max_seq_len, 0, true, NULL, NULL, NULL, NULL},
      {"rope_theta", YAML_MAP_DOUBLE, &rope_theta, 0, true, NULL, NULL, NULL, NULL},
      {"norm_eps", YAML_MAP_DOUBLE, &norm_eps, 0, true, NULL, NULL, NULL, NULL},
      {"tied_embeddings", YAML_MAP_BOOL, &c.tied_embeddings, 0, true, NULL, NULL, NULL, NULL},
      {"dtype", YAML_MAP_CUSTOM, &c.dtype, 0, true, parse_dtype,
       "a dtype (f32, f16, bf16; fp32, fp16, float32, ...)", NULL, NULL},
      {"bos_token_id", YAML_MAP_INT, &c.bos_token_id, 0, true, NULL, NULL, NULL, NULL},
      {"eos_token_id", YAML_MAP_INT, &c.eos_token_id, 0, false, NULL, NULL, NULL, NULL},
  };
  SC_TRY(yaml_map_read_named(MODELS_DIR, "model preset", name_or_path, fields,
                             (int)(sizeof fields / sizeof fields[0]), err));
  c.rope_theta = (float)rope_theta;
  c.norm_eps = (float)norm_eps;
  if (c.head_dim == 0 && c.n_heads > 0) c.head_dim = c.dim / c.n_heads;
  SC_TRY(model_config_check(&c, name_or_path, err));
  *out = c;
  return SC_OK;
}

int model_preset_names(const char **names, int cap) {
  return yaml_map_names(MODELS_DIR, names, cap);
}

// --- command-line resolution

sc_status model_config_resolve(const char *preset_or_dir, model_config *out, bool *has_weights,
                               sc_error *err) {
  if (has_weights) *has_weights = false;
  if (!preset_or_dir || !*preset_or_dir)
    return sc_fail(err, SC_INVALID, "empty model: give a preset name or a model directory");
  struct stat st;
  if (stat(preset_or_dir, &st) == 0 && S_ISDIR(st.st_mode)) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/config.json", preset_or_dir) >= sizeof path)
      return sc_fail(err, SC_INVALID, "model directory path too long: %s", preset_or_dir);
    if (stat(path, &st) != 0)
      return sc_fail(err, SC_IO, "model directory %s has no config.json (%s)", preset_or_dir,
                     strerror(errno));
    model_config c;
    memset(&c, 0, sizeof c);
    SC_TRY(model_config_load_json(path, &c, err));
    if (!c.name[0]) snprintf(c.name, sizeof c.name, "%s", preset_or_dir);
    *out = c;
    if (has_weights) *has_weights = true;
    return SC_OK;
  }
  if (yaml_map_is_path(preset_or_dir)) return model_preset_load(preset_or_dir, out, err);
  char list[400];
  yaml_map_names_list(MODELS_DIR, list, sizeof list);
  if (strchr(preset_or_dir, '/'))
    return sc_fail(err, SC_IO,
                   "model '%s': no such directory (a model directory holds config.json); "
                   "or give a preset: %s",
                   preset_or_dir, list);
  if (yaml_map_named_exists(MODELS_DIR, preset_or_dir))
    return model_preset_load(preset_or_dir, out, err);
  return sc_fail(err, SC_INVALID,
                 "model '%s' is neither a preset nor a directory; presets: %s "
                 "(or a directory with config.json, or a .yaml file)",
                 preset_or_dir, list);
}
