// Fuzz target: the worker protocol, both directions. The input is a byte stream cut into frames
// by wire_frame, as both ends cut what they read from the socket; each frame's body goes to the
// reader(s) its type selects: the worker's (CONFIG, SWAP, SUBMIT, CANCEL, ADMIT, INJECT) and the
// runner's (READY, HEARTBEAT, ERROR, DEAD, EVENTS), with the same wire_done check after each.
#include <stdint.h>
#include <stdlib.h>

#include "serving/wire.h"

static void apply(int type, const uint8_t *body, size_t n) {
  wire_reader r = {.p = body, .n = n};
  switch (type) {
  case WIRE_CONFIG:
  case WIRE_SWAP: {
    static wire_config wc; // 4 KiB of path: kept off the stack
    if (wire_get_config(&r, &wc)) (void)wire_done(&r);
    break;
  }
  case WIRE_SUBMIT: {
    uint64_t key;
    engine_request q;
    int32_t *prompt = NULL;
    int cap = 0;
    if (wire_get_submit(&r, &key, &q, &prompt, &cap)) (void)wire_done(&r);
    free(prompt);
    break;
  }
  case WIRE_CANCEL: {
    uint64_t key;
    (void)wire_get_cancel(&r, &key);
    break;
  }
  case WIRE_ADMIT: {
    bool a;
    (void)wire_get_admit(&r, &a);
    break;
  }
  case WIRE_INJECT: {
    replica_fault f;
    (void)wire_get_inject(&r, &f);
    break;
  }
  case WIRE_READY:
  case WIRE_HEARTBEAT: {
    wire_status s;
    size_t used[8], total[8];
    (void)wire_get_status(&r, &s, used, total, 8);
    break;
  }
  case WIRE_ERROR:
  case WIRE_DEAD: {
    sc_status s;
    char msg[256];
    (void)wire_get_message(&r, &s, msg, sizeof msg);
    break;
  }
  case WIRE_EVENTS: {
    int k;
    if (!wire_get_events_count(&r, &k)) break;
    for (int i = 0; i < k; i++) {
      replica_event ev;
      if (!wire_get_event(&r, &ev)) break;
    }
    (void)wire_done(&r);
    break;
  }
  default: break;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t off = 0;
  while (off < size) {
    int type;
    uint32_t epoch;
    const uint8_t *body;
    size_t body_n, frame_n;
    int f = wire_frame(data + off, size - off, &type, &epoch, &body, &body_n, &frame_n);
    if (f <= 0) break;
    apply(type, body, body_n);
    off += frame_n;
  }
  return 0;
}
