// Fuzz target: the body of POST /v1/completions or /v1/chat/completions, through oai_parse with
// the llama-tiny preset's limits, as `shardcheck serve` parses it. The first byte picks the
// endpoint; the rest is the body.
#include <stdint.h>
#include <stdlib.h>

#include "config/presets.h"
#include "server/openai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static model_config mc;
  static bool ready;
  if (!ready) {
    sc_error err = {{0}};
    if (model_preset_load("llama-tiny", &mc, &err) != SC_OK) abort();
    ready = true;
  }
  if (size < 1) return 0;
  oai_kind kind = data[0] & 1 ? OAI_CHAT : OAI_COMPLETION;
  oai_limits lim = {.model = &mc,
                    .served_name = "llama-tiny",
                    .max_model_len = mc.max_seq_len,
                    .kv_tokens = 4096};
  oai_request req;
  oai_error e;
  if (oai_parse((const char *)data + 1, size - 1, kind, &lim, &req, &e)) oai_request_free(&req);
  return 0;
}
