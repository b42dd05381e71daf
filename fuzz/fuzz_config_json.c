// Fuzz target: a model directory's config.json, through model_config_parse_json (what
// model_config_load_json calls on the file's bytes, for a scenario's model.path and
// `shardcheck model gen --config`).
#include <stdint.h>

#include "engine/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  model_config c;
  sc_error err = {{0}};
  (void)model_config_parse_json((const char *)data, size, "fuzz/config.json", &c, &err);
  return 0;
}
