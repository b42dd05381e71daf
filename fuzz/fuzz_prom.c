// Fuzz target: a server's /metrics as the HTTP replica reads it: prom_parse on the text (made
// NUL-terminated, as the scrape's buffer is), every figure under every server's names.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serving/prom.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > PROM_TEXT_MAX) return 0; // a scrape reads no more
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  replica_server_metrics m;
  (void)prom_parse(text, &m);
  double sum;
  (void)prom_sum(text, "vllm:num_requests_running", &sum);
  free(text);
  return 0;
}
