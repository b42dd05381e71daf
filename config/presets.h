// Model presets (scenarios/models/NAME.yaml, embedded in the binary, or a .yaml path) and the
// command-line resolution "preset name or model directory" -> model_config.
//
// The struct, reading config.json and checking a config are engine/model.h; the YAML reader is
// config/yaml_map.h. A preset gives shapes only: it has no weights (`shardcheck model gen`
// writes random ones).
#pragma once

#include <stdbool.h>

#include "engine/model.h"
#include "kernels/status.h"

// Loads a preset by name (scenarios/models/NAME.yaml, built in or installed: config/
// yaml_map.h), or from a .yaml path.
// Unknown keys, missing keys, wrong types and a config model_config_check refuses are
// SC_INVALID naming the file (and line:column where there is one); *out is written only on
// SC_OK.
sc_status model_preset_load(const char *name_or_path, model_config *out, sc_error *err);
// Fills names[] with the built-in and installed preset names (static strings); returns how
// many exist.
int model_preset_names(const char **names, int cap);

// A model given on the command line: a preset name, or a directory with config.json.
// *has_weights (may be NULL) says whether a directory (with safetensors) was given. On error
// *out is left as it was and *has_weights is false.
sc_status model_config_resolve(const char *preset_or_dir, model_config *out, bool *has_weights,
                               sc_error *err);
