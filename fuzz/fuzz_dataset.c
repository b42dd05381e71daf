// Fuzz target: a JSONL dataset or trace (one request per line). The first byte picks which:
// odd, a trace through workload_trace_scan (what `run` checks a trace with); even, a dataset
// through workload_new for a llama-tiny scenario whose workload.dataset is the file (what a run
// builds), then every line's request is drawn once.
#include <stdint.h>
#include <stdlib.h>

#include "config/presets.h"
#include "fuzz/fuzz_util.h"
#include "scenarios/scenario.h"
#include "scenarios/workload.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  bool trace = data[0] & 1;
  const char *path = fuzz_write("requests.jsonl", data + 1, size - 1);
  sc_error err = {{0}};
  if (trace) {
    int n = 0;
    uint64_t last = 0;
    (void)workload_trace_scan(path, &n, &last, &err);
    return 0;
  }
  static scenario *s;
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s || model_preset_load("llama-tiny", &s->model.config, &err) != SC_OK) abort();
    snprintf(s->dir, sizeof s->dir, "%s", fuzz_dir());
    snprintf(s->workload.dataset, sizeof s->workload.dataset, "%s", path);
  }
  workload *w = NULL;
  if (workload_new(s, 7, &w, &err) != SC_OK) return 0;
  for (uint64_t i = 0; i < 64; i++) {
    wl_request r;
    workload_request(w, i, &r);
  }
  workload_free(w);
  return 0;
}
