// The event-stream framing and the OpenAI chunk reader (see sse.h).
//
// Framing follows the WHATWG rules: lines end in "\r\n", "\n" or "\r"; a line starting with ':'
// is a comment (servers send them as keep-alives); "data:" appends its value (one leading
// space dropped) and a newline to the event's data ("error:", llama.cpp's way to stream an
// error, does the same and marks the event); "event", "id" and "retry" are read past;
// an empty line dispatches the event, minus its last newline. Bytes may arrive split anywhere,
// a "\r\n" across two calls included. The HTTP layer, timing and what a chunk means for a
// request are serving/replica_http.c's.
#include "serving/sse.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// --- framing

void sse_init(sse_parser *p) { memset(p, 0, sizeof *p); }

void sse_reset(sse_parser *p) {
  p->n_line = p->n_data = 0;
  p->has_data = p->is_error = p->cr = p->bom_checked = p->failed = false;
  p->bom_seen = 0;
  p->why[0] = 0;
}

void sse_free(sse_parser *p) {
  free(p->line);
  free(p->data);
  sse_init(p);
}

bool sse_pending(const sse_parser *p) { return p->n_line > 0 || p->has_data; }

static bool fail(sse_parser *p, const char *why) {
  p->failed = true;
  snprintf(p->why, sizeof p->why, "%s", why);
  return false;
}

// Makes room for `more` bytes (plus a NUL) in buf. False when past SSE_MAX_EVENT or out of
// memory.
static bool reserve(sse_parser *p, char **buf, size_t *cap, size_t n, size_t more) {
  if (n + more + 1 <= *cap) return true;
  if (n + more > SSE_MAX_EVENT) return fail(p, "an event longer than 1 MiB");
  size_t c = *cap ? *cap : 256;
  while (c < n + more + 1) c *= 2;
  char *b = realloc(*buf, c);
  if (!b) return fail(p, "out of memory");
  *buf = b;
  *cap = c;
  return true;
}

// One complete line (p->line[0..n_line)).
static bool on_line(sse_parser *p, sse_event_fn fn, void *ud) {
  size_t n = p->n_line;
  p->n_line = 0;
  if (n == 0) { // dispatch
    if (!p->has_data) return true;
    bool error = p->is_error;
    p->has_data = p->is_error = false;
    size_t len = p->n_data ? p->n_data - 1 : 0; // without the last '\n'
    p->n_data = 0;
    p->data[len] = 0;
    return fn(ud, p->data, len, error);
  }
  const char *l = p->line;
  if (l[0] == ':') return true; // a comment
  const char *colon = memchr(l, ':', n);
  size_t name_len = colon ? (size_t)(colon - l) : n;
  bool data = name_len == 4 && !memcmp(l, "data", 4);
  bool error = name_len == 5 && !memcmp(l, "error", 5);
  if (!data && !error) return true; // event, id, retry, unknown
  const char *v = colon ? colon + 1 : l + n;
  if (v < l + n && *v == ' ') v++;
  size_t vlen = (size_t)(l + n - v);
  if (!reserve(p, &p->data, &p->cap_data, p->n_data, vlen + 1)) return false;
  memcpy(p->data + p->n_data, v, vlen);
  p->n_data += vlen;
  p->data[p->n_data++] = '\n';
  p->has_data = true;
  p->is_error |= error;
  return true;
}

bool sse_feed(sse_parser *p, const char *buf, size_t n, sse_event_fn fn, void *ud) {
  if (p->failed) return false;
  size_t i = 0;
  static const unsigned char bom[3] = {0xEF, 0xBB, 0xBF}; // may open the stream, split or not
  while (!p->bom_checked && i < n) {
    if ((unsigned char)buf[i] != bom[p->bom_seen]) {
      p->bom_checked = true;
      break;
    }
    i++;
    if (++p->bom_seen == 3) p->bom_checked = true;
  }
  while (i < n) {
    char ch = buf[i];
    if (p->cr) {
      p->cr = false;
      if (ch == '\n') { // the "\n" of a "\r\n" already handled at the '\r'
        i++;
        continue;
      }
    }
    // the longest run of plain bytes, copied at once
    size_t j = i;
    while (j < n && buf[j] != '\n' && buf[j] != '\r') j++;
    if (j > i) {
      if (!reserve(p, &p->line, &p->cap_line, p->n_line, j - i)) return false;
      memcpy(p->line + p->n_line, buf + i, j - i);
      p->n_line += j - i;
      p->line[p->n_line] = 0;
    }
    if (j == n) break;
    if (buf[j] == '\r') p->cr = true;
    i = j + 1;
    if (!reserve(p, &p->line, &p->cap_line, p->n_line, 0)) return false;
    p->line[p->n_line] = 0;
    if (!on_line(p, fn, ud)) return false;
  }
  return true;
}

// --- chunks

static void set_why(oai_chunk *c, const char *fmt, const char *arg) {
  c->kind = OAI_CHUNK_BAD;
  snprintf(c->error, sizeof c->error, fmt, arg);
}

// Whether v is a non-empty JSON string.
static bool nonempty(const json_t *v) { return json_is_string(v) && json_string_length(v) > 0; }

uint64_t oai_text_hash(uint64_t state, const char *text, size_t n) {
  for (size_t i = 0; i < n; i++) {
    state ^= (unsigned char)text[i];
    state *= 1099511628211ull; // FNV-1a, 64 bits
  }
  return state;
}

// The content string of a chunk's first choice (text, or delta.content); NULL when none.
static json_t *content_of(json_t *c0) {
  json_t *text = json_object_get(c0, "text");
  if (json_is_string(text)) return text;
  json_t *delta = json_object_get(c0, "delta");
  json_t *content = json_is_object(delta) ? json_object_get(delta, "content") : NULL;
  return json_is_string(content) ? content : NULL;
}

void oai_chunk_parse(const char *data, size_t len, oai_chunk *out) {
  oai_chunk_parse_text(data, len, NULL, out);
}

void oai_chunk_parse_text(const char *data, size_t len, uint64_t *text_state, oai_chunk *out) {
  memset(out, 0, sizeof *out);
  out->n_token_ids = -1;
  out->usage_prompt = -1;
  // [DONE], with whatever whitespace a server puts around it
  size_t a = 0, b = len;
  while (a < b && (data[a] == ' ' || data[a] == '\t' || data[a] == '\n')) a++;
  while (b > a && (data[b - 1] == ' ' || data[b - 1] == '\t' || data[b - 1] == '\n')) b--;
  if (b - a == 6 && !memcmp(data + a, "[DONE]", 6)) {
    out->kind = OAI_CHUNK_DONE;
    return;
  }
  json_error_t je;
  json_t *root = json_loadb(data, len, 0, &je);
  if (!root) {
    set_why(out, "not JSON: %s", je.text);
    return;
  }
  if (!json_is_object(root)) {
    json_decref(root);
    set_why(out, "a chunk that is not a JSON object%s", "");
    return;
  }
  json_t *err = json_object_get(root, "error");
  if (err && !json_is_null(err)) { // vLLM, SGLang, llama.cpp: {"error": {"message": ...}}
    out->kind = OAI_CHUNK_ERROR;
    json_t *msg = json_is_object(err) ? json_object_get(err, "message") : err;
    if (json_is_string(msg)) {
      snprintf(out->error, sizeof out->error, "%s", json_string_value(msg));
    } else {
      char *txt = json_dumps(err, JSON_COMPACT);
      snprintf(out->error, sizeof out->error, "%s", txt ? txt : "(unreadable error)");
      free(txt);
    }
    json_decref(root);
    return;
  }
  json_t *choices = json_object_get(root, "choices");
  json_t *usage = json_object_get(root, "usage");
  if (!json_is_array(choices) && !json_is_object(usage)) {
    json_decref(root);
    set_why(out, "a JSON object with neither choices nor usage nor error%s", "");
    return;
  }
  out->kind = OAI_CHUNK_DATA;
  json_t *c0 = json_is_array(choices) ? json_array_get(choices, 0) : NULL;
  if (json_is_object(c0)) {
    json_t *text = json_object_get(c0, "text");
    json_t *delta = json_object_get(c0, "delta");
    if (nonempty(text)) out->has_content = true;
    if (json_is_object(delta) && nonempty(json_object_get(delta, "content")))
      out->has_content = true;
    json_t *content = content_of(c0);
    if (content && text_state)
      *text_state = oai_text_hash(*text_state, json_string_value(content),
                                  json_string_length(content));
    json_t *ids = json_object_get(c0, "token_ids");
    if (json_is_array(ids)) {
      out->n_token_ids = (int)json_array_size(ids);
      for (int i = 0; i < out->n_token_ids && i < 64; i++)
        out->token_ids[i] = (int32_t)json_integer_value(json_array_get(ids, (size_t)i));
    }
    json_t *fr = json_object_get(c0, "finish_reason");
    if (json_is_string(fr))
      snprintf(out->finish_reason, sizeof out->finish_reason, "%s", json_string_value(fr));
  }
  if (json_is_object(usage)) {
    json_t *ct = json_object_get(usage, "completion_tokens");
    json_t *pt = json_object_get(usage, "prompt_tokens");
    if (json_is_integer(ct)) {
      out->has_usage = true;
      out->usage_completion = (int)json_integer_value(ct);
    }
    if (json_is_integer(pt)) out->usage_prompt = (int)json_integer_value(pt);
  }
  json_decref(root);
}

void oai_error_parse(const char *data, size_t len, oai_chunk *out) {
  memset(out, 0, sizeof *out);
  out->kind = OAI_CHUNK_ERROR;
  out->n_token_ids = -1;
  out->usage_prompt = -1;
  json_t *root = json_loadb(data, len, 0, NULL);
  json_t *e = json_is_object(root) && json_is_object(json_object_get(root, "error"))
                  ? json_object_get(root, "error")
                  : root;
  json_t *msg = json_is_object(e) ? json_object_get(e, "message") : NULL;
  if (json_is_string(msg))
    snprintf(out->error, sizeof out->error, "%s", json_string_value(msg));
  else
    snprintf(out->error, sizeof out->error, "%.*s", (int)(len < 255 ? len : 255), data);
  json_decref(root);
}
