// Fuzz target: an external target's SSE stream, as the HTTP replica reads it: bytes fed to
// sse_feed in chunks, each event's data read by oai_chunk_parse (oai_error_parse for an error
// field). The first byte seeds the chunk boundaries (libcurl hands over arbitrary pieces); the
// rest is the stream.
#include <stdint.h>

#include "serving/sse.h"

static bool on_event(void *ud, const char *data, size_t len, bool error) {
  oai_chunk c;
  if (error)
    oai_error_parse(data, len, &c);
  else
    oai_chunk_parse(data, len, &c);
  return c.kind != OAI_CHUNK_DONE;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  uint32_t x = 0x9e3779b9u * (data[0] + 1u); // xorshift state for the chunk sizes
  const char *p = (const char *)data + 1;
  size_t n = size - 1;
  sse_parser sp;
  sse_init(&sp);
  size_t off = 0;
  while (off < n) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    size_t k = data[0] == 0 ? n - off : 1 + x % 64; // 0: the whole stream at once
    if (k > n - off) k = n - off;
    if (!sse_feed(&sp, p + off, k, on_event, NULL)) break;
    off += k;
  }
  (void)sse_pending(&sp);
  sse_free(&sp);
  return 0;
}
