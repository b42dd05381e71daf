// The OpenAI-compatible request and response shapes, as vLLM's server writes them: parsing and
// validating a /v1/completions or /v1/chat/completions body into what the engine runs, and
// formatting the responses (whole bodies, SSE chunks, errors). Pure functions of their inputs:
// no sockets, no threads. docs/serve.md lists every field.
//
// HTTP itself (methods, paths, keys, limits) is server/http.c's; when a chunk is sent, the
// loop's (server/loop.c).
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/model.h"

typedef enum oai_kind { OAI_COMPLETION, OAI_CHAT } oai_kind;

enum { OAI_MAX_DEPTH = 64 }; // JSON nested deeper is refused (400)

// An error response: the HTTP status, the error's type, the field it is about ("" none).
typedef struct oai_error {
  int status;
  char param[64];
  char msg[512];
} oai_error;

// What the API admits (the deployment's limits).
typedef struct oai_limits {
  const model_config *model; // vocabulary, BOS and EOS
  const char *served_name;   // the only model name accepted
  int max_model_len;         // prompt + completion tokens at most
  int kv_tokens;             // KV capacity of one replica in tokens (0: unknown)
} oai_limits;

// A validated generation request.
typedef struct oai_request {
  oai_kind kind;
  int32_t *prompt; // (n_prompt) token ids, owned
  int n_prompt;
  int max_tokens; // >= 1
  int min_tokens; // EOS does not end the request before this many tokens
  bool ignore_eos;
  double temperature, top_p;
  uint64_t seed;
  bool stream, include_usage;
  // Stop strings (owned, n_stop; empty ones dropped), matched on the detokenized text as vLLM
  // does: the text up to a match is sent, the match itself only with include_stop_str; and stop
  // token ids (owned, n_stop_ids): the generated id ends the request (it is kept, its text is
  // not sent).
  char **stop;
  int n_stop;
  size_t max_stop_len; // the longest stop string: how much text a stream holds back
  bool include_stop_str;
  int32_t *stop_ids;
  int n_stop_ids;
} oai_request;

enum { OAI_MAX_STOP = 64, OAI_MAX_STOP_LEN = 1024 }; // more or longer stop strings: 400

// Parses and validates body (len bytes) of kind. On success *out is filled (free it with
// oai_request_free) and true comes back; else e holds the status (400, or 404 for another
// model) and the message, naming the field, and *out holds nothing to free.
bool oai_parse(const char *body, size_t len, oai_kind kind, const oai_limits *lim, oai_request *out,
               oai_error *e);
void oai_request_free(oai_request *r);

// The deepest nesting of arrays and objects in the JSON text (strings skipped), scanning no
// further than one level past limit.
int oai_json_depth(const char *text, size_t len, int limit);

// --- responses. Every function returns a malloc'd NUL-terminated string (NULL: out of memory).
// {"error": {"message", "type", "param", "code"}}
char *oai_error_body(int status, const char *param, const char *msg);
// The error type vLLM names a status with ("BadRequestError", "NotFoundError", ...).
const char *oai_error_type(int status);

// One streamed or finished response's identity.
typedef struct oai_resp {
  oai_kind kind;
  const char *id;    // "cmpl-..." or "chatcmpl-..."
  long long created; // unix seconds
  const char *model;
} oai_resp;

// The text of token id for the response (byte tokens as the byte-level tokenizer prints them;
// BOS, EOS and pad ids print nothing; synthetic: a word of a fixed synthetic vocabulary).
// Appends to buf (cap bytes, NUL-terminated); returns the length written.
int oai_token_text(const model_config *m, bool synthetic, int32_t id, char *buf, size_t cap);

// SSE: "data: {...}\n\n". The chat role chunk (delta {role: assistant, content: ""}).
char *oai_sse_role(const oai_resp *r);
// A content chunk: text, the token ids it holds (extension field token_ids), and the finish
// reason when it ends the stream (NULL: not yet).
char *oai_sse_content(const oai_resp *r, const char *text, const int32_t *ids, int n,
                      const char *finish);
// The same chunk without a JSON tree, for the per-token path: sse_head is the generation's
// oai_sse_head (malloc'd: the constant start of every content chunk). Writes the chunk
// NUL-terminated into buf (cap bytes) and returns its length; 0 when it does not fit or the
// text is not valid UTF-8 (then oai_sse_content says what to send). Byte for byte the same as
// oai_sse_content (test_serve checks it).
char *oai_sse_head(const oai_resp *r);
size_t oai_sse_content_to(const char *sse_head, oai_kind kind, const char *text,
                          const int32_t *ids, int n, const char *finish, char *buf, size_t cap);
// The usage chunk (choices: []).
char *oai_sse_usage(const oai_resp *r, int prompt_tokens, int completion_tokens);
// An error after streaming began: data: {"error": {"message", "type", "code"}}.
char *oai_sse_error(int status, const char *msg);
// The whole non-streamed response.
char *oai_body(const oai_resp *r, const char *text, const int32_t *ids, int n, const char *finish,
               int prompt_tokens);
