// Fuzz target: scenario YAML text -> validated scenario, through scenario_parse (what
// scenario_load calls after reading the file). Relative paths resolve against a private empty
// directory, so a dataset or profile path names nothing that exists unless it is absolute.
#include <stdint.h>

#include "fuzz/fuzz_util.h"
#include "scenarios/scenario.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  scenario *s = NULL;
  sc_error err = {{0}};
  if (scenario_parse((const char *)data, size, "fuzz.yaml", fuzz_dir(), &s, &err) == SC_OK)
    scenario_free(s);
  return 0;
}
