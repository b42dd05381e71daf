// Server-sent events as an OpenAI-compatible server streams them, in two layers:
//   sse_parser  — the framing (the WHATWG event-stream rules): bytes in, in whatever pieces the
//                 HTTP client hands them over, one callback per complete event's data out
//   oai_chunk   — what one event's data says: a completions or chat chunk (its text, token
//                 ids, finish reason, usage), the end marker [DONE], or an error payload
// Neither knows about HTTP, sockets or time: serving/replica_http.c feeds libcurl's body
// callback into the parser and turns chunks into replica events. tests/test_sse.c runs both on
// recorded streams of vLLM, SGLang and llama.cpp's server (tests/data/sse/).
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// --- framing
enum { SSE_MAX_EVENT = 1 << 20 }; // bytes of one event's data at most: more is a protocol error

// Called with each dispatched event's data (the "data:" lines joined with '\n', without the
// last newline; NUL-terminated, valid during the call only). Events with no data line are not
// dispatched. llama.cpp's server streams an error as an "error:" field instead of "data:": such
// an event is dispatched with error true and the error lines as its data. Returning false
// stops the parser (sse_feed returns false too).
typedef bool (*sse_event_fn)(void *ud, const char *data, size_t len, bool error);

typedef struct sse_parser {
  char *line;        // (cap_line) the line being read, not yet terminated
  size_t n_line, cap_line;
  char *data;        // (cap_data) the event's data so far
  size_t n_data, cap_data;
  bool has_data;     // a data (or error) field was seen in this event
  bool is_error;     // ... and it was an error field
  bool cr;           // the last byte was '\r' (a following '\n' belongs to it)
  bool bom_checked;  // the stream's first bytes were checked for a UTF-8 byte-order mark
  int bom_seen;      // bytes of it matched so far
  bool failed;       // an event grew past SSE_MAX_EVENT or memory ran out
  char why[96];      // why it failed
} sse_parser;

void sse_init(sse_parser *p);
void sse_reset(sse_parser *p); // back to the start of a stream; keeps the buffers
void sse_free(sse_parser *p);  // and resets *p
// Parses buf[0..n): every event completed by these bytes goes to fn. False when the parser
// failed (p->why says why) or fn returned false; bytes after that point are not parsed.
bool sse_feed(sse_parser *p, const char *buf, size_t n, sse_event_fn fn, void *ud);
// True when bytes of an unfinished event are held (a stream that ends here was cut short).
bool sse_pending(const sse_parser *p);

// --- one event's data, read as an OpenAI chunk
typedef enum oai_chunk_kind {
  OAI_CHUNK_DATA,  // a completion or chat chunk (also one with no choices: the usage chunk)
  OAI_CHUNK_DONE,  // "[DONE]": the stream ends
  OAI_CHUNK_ERROR, // {"error": ...}: the server gave up on the request
  OAI_CHUNK_BAD,   // not JSON, or JSON of no known shape (why says which)
} oai_chunk_kind;

typedef struct oai_chunk {
  oai_chunk_kind kind;
  bool has_content;       // choices[0].text (completions) or choices[0].delta.content (chat)
                          // is a non-empty string: output the client can see
  int n_token_ids;        // choices[0].token_ids when the server sent them, else -1
  int32_t token_ids[64];  // the first of them (min(n_token_ids, 64))
  char finish_reason[24]; // choices[0].finish_reason ("" while null or absent)
  bool has_usage;         // a usage object with completion_tokens
  int usage_prompt;       // usage.prompt_tokens (-1 when absent)
  int usage_completion;   // usage.completion_tokens
  char error[256];        // ERROR: error.message (or the payload); BAD: why
} oai_chunk;

// Reads data[0..len) into *out. Never fails: what cannot be read is OAI_CHUNK_BAD.
void oai_chunk_parse(const char *data, size_t len, oai_chunk *out);
// The same; with text_state (not NULL) the content's bytes continue the FNV-1a hash in it, so
// a stream's text hashes the same however the server cuts it into chunks.
void oai_chunk_parse_text(const char *data, size_t len, uint64_t *text_state, oai_chunk *out);
// FNV-1a (64 bits) of text[0..n) continued from state (OAI_TEXT_HASH0 to start).
uint64_t oai_text_hash(uint64_t state, const char *text, size_t n);
#define OAI_TEXT_HASH0 14695981039346656037ull
// Reads the data of an "error:" event (llama.cpp: {"code", "message", "type"}) into *out:
// always OAI_CHUNK_ERROR, with the message when there is one, else the text itself.
void oai_error_parse(const char *data, size_t len, oai_chunk *out);
