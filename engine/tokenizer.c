// Byte-level fallback tokenizer (see tokenizer.h).
#include "engine/tokenizer.h"

#include <stdio.h>

int tokenizer_encode(const model_config *c, const char *text, int32_t *out, int cap) {
  int n = 0;
  if (c->bos_token_id >= 0) {
    if (n < cap) out[n] = c->bos_token_id;
    n++;
  }
  for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
    int32_t id = (int32_t)*p + TOKENIZER_BYTE_BASE;
    if (id >= c->vocab_size) id = id % c->vocab_size;
    if (n < cap) out[n] = id;
    n++;
  }
  return n;
}

int tokenizer_decode_one(const model_config *c, int32_t id, char *buf, size_t cap) {
  (void)c;
  if (id >= TOKENIZER_BYTE_BASE && id < TOKENIZER_BYTE_BASE + 256) {
    unsigned char b = (unsigned char)(id - TOKENIZER_BYTE_BASE);
    if (b >= 32 && b < 127) return snprintf(buf, cap, "%c", b);
    return snprintf(buf, cap, "\\x%02x", b);
  }
  return snprintf(buf, cap, "<%d>", id);
}
