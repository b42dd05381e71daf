// The messages a process replica and its `shardcheck worker` exchange over their Unix socket
// (serving/replica_proc.c and serving/replica_worker.c): framing, and encoding and decoding of
// each message.
// Internal to serving/.
//
// A frame is: u32 length (of what follows), u8 type, u32 epoch, then the type's fields. Every
// integer is little-endian and fixed-width; a float or double travels as its IEEE bits; a
// string as u32 length + bytes (no NUL), a missing string as length 0xFFFFFFFF. The epoch is
// the incarnation of the replica the message belongs to (the runner drops a worker message
// whose epoch is not the current one). Sockets, buffering and what each side does with a
// message are theirs.
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "engine/engine.h"
#include "serving/replica.h"

enum {
  WIRE_HEADER = 9,           // u32 length + u8 type + u32 epoch
  WIRE_MAX_FRAME = 64 << 20, // bytes after the length; a longer frame is corrupt
  WIRE_EVENTS_MAX = 256,     // events in one EVENTS message at most
  WIRE_STR_MAX = 4096,       // bytes of a decoded string at most (paths, error text)
  WIRE_READ_CHUNK = 65536,   // bytes either side reserves for one read of the socket
};

// How often a worker reports its status when the runner names no period (ns).
#define WIRE_HEARTBEAT_NS (100 * 1000000ull)

// This process's wall clock (CLOCK_REALTIME, ns since the epoch): every status report carries
// the worker's, so that the runner sees a clock jump land. Never used for a duration.
static inline int64_t wire_wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

typedef enum wire_type {
  // runner -> worker
  WIRE_CONFIG = 1, // engine config, replica index, heartbeat period
  WIRE_SUBMIT,     // key, request (prompt ids, max_tokens, sampling, stop_at_eos)
  WIRE_CANCEL,     // key
  WIRE_ADMIT,      // admitting (bool)
  WIRE_INJECT,     // a replica_fault, applied with replica_inject (RESUME included)
  WIRE_SWAP,       // a hot swap: the engine config of the new weights (as CONFIG), at the
                   // next epoch; the worker rebuilds its replica and answers READY or ERROR
  // worker -> runner
  WIRE_READY = 16, // the engine is built; carries a status report (as HEARTBEAT)
  WIRE_ERROR,      // the engine could not be built: status, message; the worker exits 3
  WIRE_EVENTS,     // a batch of replica events
  WIRE_HEARTBEAT,  // status report: health, engine stats, per-rank memory, error text
  WIRE_DEAD,       // the engine failed: status, message; the worker exits 3
} wire_type;

// --- byte buffers
// A growable byte buffer: p[0, n) holds data, cap is allocated. Zero-initialised = empty.
typedef struct wire_buf {
  uint8_t *p;
  size_t n, cap;
} wire_buf;

// Makes room for `more` bytes. False when memory ran out (b unchanged).
bool wire_reserve(wire_buf *b, size_t more);
// Drops the first k bytes (k <= n).
void wire_consume(wire_buf *b, size_t k);
void wire_buf_free(wire_buf *b); // and resets *b to empty

// --- framing
// The next whole frame at the start of p[0, n): 1 with *type, *epoch and the fields
// body[0, *body_n) (pointing into p) and *frame_n the bytes it takes; 0 when more bytes are
// needed; -1 when the length is impossible (the stream is corrupt).
int wire_frame(const uint8_t *p, size_t n, int *type, uint32_t *epoch, const uint8_t **body,
               size_t *body_n, size_t *frame_n);

// A reader over one frame's fields. A read past the end sets bad and yields zeros.
typedef struct wire_reader {
  const uint8_t *p;
  size_t n, off;
  bool bad;
} wire_reader;

// True when every field was read and nothing is left over.
bool wire_done(const wire_reader *r);

// --- runner -> worker
// The worker's side of the config: cfg's strings point into the arrays here.
typedef struct wire_config {
  engine_config cfg; // clock, sim and on_logits are left at engine_config_defaults()'s
  int index;         // replica number within the deployment
  uint64_t heartbeat_ns;
  char weights_dir[WIRE_STR_MAX]; // cfg.weights_dir points here when one was sent
  char backend[64];               // cfg.backend points here
} wire_config;

// Each put appends one frame to b; false when memory ran out (b unchanged).
bool wire_put_config(wire_buf *b, uint32_t epoch, const engine_config *cfg, int index,
                     uint64_t heartbeat_ns);
bool wire_put_submit(wire_buf *b, uint32_t epoch, uint64_t key, const engine_request *r);
// SWAP: the fields of CONFIG (decoded with wire_get_config); epoch is the worker's next one.
bool wire_put_swap(wire_buf *b, uint32_t epoch, const engine_config *cfg, int index,
                   uint64_t heartbeat_ns);
bool wire_put_cancel(wire_buf *b, uint32_t epoch, uint64_t key);
bool wire_put_admit(wire_buf *b, uint32_t epoch, bool admitting);
bool wire_put_inject(wire_buf *b, uint32_t epoch, const replica_fault *f);

// Each get decodes the fields of one frame of its type (r over the body); false when they are
// malformed (r->bad or a value out of range).
bool wire_get_config(wire_reader *r, wire_config *out); // CONFIG and SWAP
// The prompt is decoded into *prompt (grown with realloc; the caller frees it, also on error);
// out->prompt points there.
bool wire_get_submit(wire_reader *r, uint64_t *key, engine_request *out, int32_t **prompt,
                     int *prompt_cap);
bool wire_get_cancel(wire_reader *r, uint64_t *key);
bool wire_get_admit(wire_reader *r, bool *admitting);
bool wire_get_inject(wire_reader *r, replica_fault *out);

// --- worker -> runner
// A worker's status report (READY and HEARTBEAT).
typedef struct wire_status {
  replica_health health;
  engine_stats stats;
  int n_ranks;
  const size_t *mem_used, *mem_total; // put: (n_ranks) bytes; get: see wire_get_status
  char error[512];                    // the local replica's error ("" while it lives)
  int64_t wall_ns;                    // the worker's wall clock (CLOCK_REALTIME) when sent
} wire_status;

bool wire_put_status(wire_buf *b, int type, uint32_t epoch, const wire_status *s);
bool wire_put_message(wire_buf *b, int type, uint32_t epoch, sc_status s, const char *msg);
bool wire_put_events(wire_buf *b, uint32_t epoch, const replica_event *ev, int n);

// Decodes a status report; the memory figures go to used[0, cap) and total[0, cap) (ranks past
// cap are skipped) and out->mem_* point there.
bool wire_get_status(wire_reader *r, wire_status *out, size_t *used, size_t *total, int cap);
// ERROR and DEAD: the status and the message (truncated to cap - 1 bytes, NUL-terminated).
bool wire_get_message(wire_reader *r, sc_status *s, char *msg, size_t cap);
// EVENTS: the number of events in the batch (<= WIRE_EVENTS_MAX), then one at a time.
bool wire_get_events_count(wire_reader *r, int *n);
bool wire_get_event(wire_reader *r, replica_event *out);
