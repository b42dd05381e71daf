// Fuzz target: a hardware profile YAML file, through hw_profile_load (the path form, as
// `--profile FILE.yaml` and a scenario's hardware.profile take it).
#include <stdint.h>

#include "config/hardware.h"
#include "fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_write("profile.yaml", data, size);
  hw_profile p;
  sc_error err = {{0}};
  (void)hw_profile_load(path, &p, &err);
  return 0;
}
