// Fuzz target: a model directory's config.json, through model_config_load_json (what a
// scenario's model.path and `shardcheck gen-weights --config` read).
#include <stdint.h>

#include "engine/model.h"
#include "fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_write("config.json", data, size);
  model_config c;
  sc_error err = {{0}};
  (void)model_config_load_json(path, &c, &err);
  return 0;
}
