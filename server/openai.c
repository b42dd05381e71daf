// The OpenAI-compatible shapes (see openai.h): request validation, then response formatting.
//
// Validation follows vLLM's protocol.py where it has the same knob: unknown fields are
// ignored; a known field of the wrong type or out of range is a 400 naming it; what this
// engine cannot do (n > 1, best_of, logprobs, echo, tools, structured outputs) is a 400 saying
// so. Stop strings and stop token ids are parsed here and matched by the loop.
#include "server/openai.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer.h"
#include "kernels/util.h"

static bool fail(oai_error *e, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static bool fail(oai_error *e, int status, const char *param, const char *fmt, ...) {
  e->status = status;
  snprintf(e->param, sizeof e->param, "%s", param ? param : "");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  return false;
}

int oai_json_depth(const char *text, size_t len, int limit) {
  int depth = 0, most = 0;
  bool in_str = false;
  for (size_t i = 0; i < len; i++) {
    char c = text[i];
    if (in_str) {
      if (c == '\\')
        i++;
      else if (c == '"')
        in_str = false;
      continue;
    }
    if (c == '"') {
      in_str = true;
    } else if (c == '[' || c == '{') {
      if (++depth > most) most = depth;
      if (most > limit) return most;
    } else if ((c == ']' || c == '}') && depth > 0) {
      depth--;
    }
  }
  return most;
}

// --- field readers: absent or null leaves *out as it is and returns true
static const char *type_name(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER: return "an integer";
  case JSON_REAL: return "a number";
  case JSON_TRUE:
  case JSON_FALSE: return "a boolean";
  default: return "null";
  }
}

// An integer field in [lo, hi] (an integral number like 5.0 counts, as pydantic takes it).
static bool get_int(json_t *o, const char *k, long long lo, long long hi, long long *out,
                    oai_error *e) {
  json_t *v = json_object_get(o, k);
  if (!v || json_is_null(v)) return true;
  long long x;
  if (json_is_integer(v)) {
    x = json_integer_value(v);
  } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
             fabs(json_real_value(v)) < 9e18) {
    x = (long long)json_real_value(v);
  } else {
    return fail(e, 400, k, "'%s' must be an integer, got %s", k, type_name(v));
  }
  if (x < lo || x > hi) {
    if (hi == INT32_MAX || hi == INT64_MAX)
      return fail(e, 400, k, "'%s' must be an integer >= %lld, got %lld", k, lo, x);
    return fail(e, 400, k, "'%s' must be an integer in [%lld, %lld], got %lld", k, lo, hi, x);
  }
  *out = x;
  return true;
}

static bool get_num(json_t *o, const char *k, double lo, double hi, bool lo_open, double *out,
                    oai_error *e) {
  json_t *v = json_object_get(o, k);
  if (!v || json_is_null(v)) return true;
  if (!json_is_number(v)) return fail(e, 400, k, "'%s' must be a number, got %s", k, type_name(v));
  double x = json_number_value(v);
  if (!(lo_open ? x > lo : x >= lo) || !(x <= hi))
    return fail(e, 400, k, "'%s' must be a number in %c%g, %g], got %g", k, lo_open ? '(' : '[', lo,
                hi, x);
  *out = x;
  return true;
}

static bool get_bool(json_t *o, const char *k, bool *out, oai_error *e) {
  json_t *v = json_object_get(o, k);
  if (!v || json_is_null(v)) return true;
  if (!json_is_boolean(v))
    return fail(e, 400, k, "'%s' must be a boolean, got %s", k, type_name(v));
  *out = json_is_true(v);
  return true;
}

// --- prompts
static bool add_ids(json_t *arr, const char *field, const oai_limits *lim, oai_request *r,
                    oai_error *e) {
  size_t n = json_array_size(arr);
  if (n == 0) return fail(e, 400, field, "'%s' is empty", field);
  r->prompt = malloc(n * sizeof *r->prompt);
  if (!r->prompt) return fail(e, 500, field, "out of memory");
  for (size_t i = 0; i < n; i++) {
    json_t *v = json_array_get(arr, i);
    if (!json_is_integer(v))
      return fail(e, 400, field, "'%s' must be a string or an array of token ids; item %zu is %s",
                  field, i, type_name(v));
    long long id = json_integer_value(v);
    if (id < 0 || id >= lim->model->vocab_size)
      return fail(e, 400, field, "token id %lld at %s[%zu] is outside the vocabulary (0..%d)", id,
                  field, i, lim->model->vocab_size - 1);
    r->prompt[i] = (int32_t)id;
  }
  r->n_prompt = (int)n;
  return true;
}

static bool add_text(const char *text, const oai_limits *lim, oai_request *r, oai_error *e) {
  int n = tokenizer_encode(lim->model, text, NULL, 0);
  r->prompt = malloc((size_t)(n > 0 ? n : 1) * sizeof *r->prompt);
  if (!r->prompt) return fail(e, 500, "prompt", "out of memory");
  tokenizer_encode(lim->model, text, r->prompt, n);
  r->n_prompt = n;
  return true;
}

static bool completion_prompt(json_t *o, const oai_limits *lim, oai_request *r, oai_error *e) {
  json_t *p = json_object_get(o, "prompt");
  if (!p || json_is_null(p)) return fail(e, 400, "prompt", "'prompt' is required");
  if (json_is_string(p)) return add_text(json_string_value(p), lim, r, e);
  if (!json_is_array(p))
    return fail(e, 400, "prompt", "'prompt' must be a string or an array of token ids, got %s",
                type_name(p));
  json_t *first = json_array_get(p, 0);
  if (first && (json_is_string(first) || json_is_array(first))) { // a list of prompts
    if (json_array_size(p) != 1)
      return fail(e, 400, "prompt",
                  "batched prompts (%zu in 'prompt') are not supported: send "
                  "one prompt per request",
                  json_array_size(p));
    if (json_is_string(first)) return add_text(json_string_value(first), lim, r, e);
    return add_ids(first, "prompt", lim, r, e);
  }
  return add_ids(p, "prompt", lim, r, e);
}

// The fixed chat template: each message as "<|ROLE|>\nCONTENT\n", then "<|assistant|>\n".
static bool chat_prompt(json_t *o, const oai_limits *lim, oai_request *r, oai_error *e) {
  json_t *msgs = json_object_get(o, "messages");
  if (!msgs || json_is_null(msgs)) return fail(e, 400, "messages", "'messages' is required");
  if (!json_is_array(msgs) || json_array_size(msgs) == 0)
    return fail(e, 400, "messages", "'messages' must be a non-empty array of messages");
  size_t cap = 64, n = 0;
  char *t = malloc(cap);
  if (!t) return fail(e, 500, "messages", "out of memory");
  bool ok = true;
  for (size_t i = 0; ok && i <= json_array_size(msgs); i++) {
    const char *role = "assistant"; // past the last message: the generation prompt
    json_t *m = NULL, *c = NULL;
    if (i < json_array_size(msgs)) {
      m = json_array_get(msgs, i);
      if (!json_is_object(m)) {
        ok = fail(e, 400, "messages", "messages[%zu] must be an object, got %s", i, type_name(m));
        break;
      }
      json_t *rv = json_object_get(m, "role");
      if (!json_is_string(rv)) {
        ok = fail(e, 400, "messages", "messages[%zu].role must be a string", i);
        break;
      }
      role = json_string_value(rv);
      if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant")) {
        ok = fail(e, 400, "messages",
                  "messages[%zu].role must be system, user or assistant, got "
                  "'%.64s'",
                  i, role);
        break;
      }
      c = json_object_get(m, "content");
      if (c && !json_is_null(c) && !json_is_string(c) && !json_is_array(c)) {
        ok = fail(e, 400, "messages",
                  "messages[%zu].content must be a string or an array of "
                  "text parts, got %s",
                  i, type_name(c));
        break;
      }
    }
    // the pieces: the role's header, the content's parts, a newline
    char hdr[32];
    snprintf(hdr, sizeof hdr, "<|%s|>\n", role);
    size_t n_parts = c && json_is_array(c) ? json_array_size(c) : (c && json_is_string(c) ? 1 : 0);
    for (size_t k = 0; ok && k < n_parts + 2; k++) {
      const char *s;
      if (k == 0)
        s = hdr;
      else if (k == n_parts + 1)
        s = m ? "\n" : "";
      else if (json_is_string(c))
        s = json_string_value(c);
      else {
        json_t *part = json_array_get(c, k - 1);
        json_t *ty = json_object_get(part, "type"), *tx = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(ty) || strcmp(json_string_value(ty), "text") ||
            !json_is_string(tx)) {
          ok = fail(e, 400, "messages",
                    "messages[%zu].content[%zu] must be {\"type\": \"text\", "
                    "\"text\": STRING} (only text parts are supported)",
                    i, k - 1);
          break;
        }
        s = json_string_value(tx);
      }
      size_t l = strlen(s);
      if (n + l + 1 > cap) {
        while (n + l + 1 > cap) cap *= 2;
        char *g = realloc(t, cap);
        if (!g) {
          ok = fail(e, 500, "messages", "out of memory");
          break;
        }
        t = g;
      }
      memcpy(t + n, s, l);
      n += l;
      t[n] = 0;
    }
  }
  if (ok) ok = add_text(t, lim, r, e);
  free(t);
  return ok;
}

// --- tools and structured outputs: serve has no tool parser and no structured decoding, so a
// request that depends on them is refused naming the field, where a 200 that ignored them would
// mislead an agent. vLLM refuses tool_choice "auto" without --enable-auto-tool-choice and
// --tool-call-parser, and serves "required", named tools and response_format by structured
// decoding (docs/serve.md).
static bool no_structured_output(json_t *o, oai_error *e) {
  json_t *tc = json_object_get(o, "tool_choice"), *tools = json_object_get(o, "tools");
  bool none = json_is_string(tc) && !strcmp(json_string_value(tc), "none");
  if (tc && !json_is_null(tc) && !none) {
    if (json_is_string(tc) && !strcmp(json_string_value(tc), "auto"))
      return fail(e, 400, "tool_choice",
                  "\"auto\" tool choice requires --enable-auto-tool-choice and "
                  "--tool-call-parser to be set (vLLM's answer); shardcheck serve has no tool "
                  "parser: send tool_choice \"none\" or no tools");
    return fail(e, 400, "tool_choice",
                "tool_choice %s is not supported: shardcheck serve has no structured decoding "
                "(vLLM serves \"required\" and named tools by it)",
                json_is_string(tc) ? json_string_value(tc) : "(a named function)");
  }
  if (tools && !json_is_null(tools) && !(json_is_array(tools) && !json_array_size(tools)) && !none)
    return fail(e, 400, "tools",
                "tools are not supported: shardcheck serve has no tool parser (vLLM's default "
                "tool_choice with tools is \"auto\", which needs --enable-auto-tool-choice and "
                "--tool-call-parser); send tool_choice \"none\" or no tools");
  static const char *const legacy[] = {"functions", "function_call"};
  for (size_t i = 0; i < 2; i++) {
    json_t *v = json_object_get(o, legacy[i]);
    if (v && !json_is_null(v))
      return fail(e, 400, legacy[i],
                  "%s is not supported: shardcheck serve has no tool parser or structured "
                  "decoding",
                  legacy[i]);
  }
  json_t *rf = json_object_get(o, "response_format");
  if (rf && !json_is_null(rf)) {
    json_t *ty = json_is_object(rf) ? json_object_get(rf, "type") : NULL;
    if (!json_is_string(ty) || strcmp(json_string_value(ty), "text"))
      return fail(e, 400, "response_format",
                  "response_format %s is not supported: shardcheck serve has no structured "
                  "decoding (vLLM serves json_object and json_schema by it); only {\"type\": "
                  "\"text\"}",
                  json_is_string(ty) ? json_string_value(ty) : "(no type)");
  }
  static const char *const guided[] = {"guided_json", "guided_regex", "guided_choice",
                                       "guided_grammar", "structured_outputs"};
  for (size_t i = 0; i < sizeof guided / sizeof guided[0]; i++) {
    json_t *v = json_object_get(o, guided[i]);
    if (v && !json_is_null(v))
      return fail(e, 400, guided[i],
                  "%s is not supported: shardcheck serve has no structured decoding", guided[i]);
  }
  return true;
}

// --- stop strings and stop token ids
static bool get_stops(json_t *o, const oai_limits *lim, oai_request *r, oai_error *e) {
  json_t *v = json_object_get(o, "stop");
  if (v && !json_is_null(v)) {
    if (!json_is_string(v) && !json_is_array(v))
      return fail(e, 400, "stop", "'stop' must be a string or an array of strings, got %s",
                  type_name(v));
    size_t n = json_is_string(v) ? 1 : json_array_size(v);
    if (n > OAI_MAX_STOP)
      return fail(e, 400, "stop", "'stop' has %zu strings; at most %d", n, OAI_MAX_STOP);
    r->stop = n ? calloc(n, sizeof *r->stop) : NULL;
    if (n && !r->stop) return fail(e, 500, "stop", "out of memory");
    for (size_t i = 0; i < n; i++) {
      json_t *x = json_is_string(v) ? v : json_array_get(v, i);
      if (!json_is_string(x))
        return fail(e, 400, "stop", "stop[%zu] must be a string, got %s", i, type_name(x));
      size_t len = json_string_length(x);
      if (len > OAI_MAX_STOP_LEN)
        return fail(e, 400, "stop", "stop[%zu] is %zu bytes long; at most %d", i, len,
                    OAI_MAX_STOP_LEN);
      if (!len) continue; // matches nothing
      if (memchr(json_string_value(x), 0, len))
        return fail(e, 400, "stop", "stop[%zu] holds a NUL byte", i);
      if (!(r->stop[r->n_stop] = strdup(json_string_value(x))))
        return fail(e, 500, "stop", "out of memory");
      r->n_stop++;
      if (len > r->max_stop_len) r->max_stop_len = len;
    }
  }
  if (!get_bool(o, "include_stop_str_in_output", &r->include_stop_str, e)) return false;
  v = json_object_get(o, "stop_token_ids");
  if (v && !json_is_null(v)) {
    if (!json_is_array(v))
      return fail(e, 400, "stop_token_ids",
                  "'stop_token_ids' must be an array of token ids, got %s", type_name(v));
    size_t n = json_array_size(v);
    if (n > OAI_MAX_STOP)
      return fail(e, 400, "stop_token_ids", "'stop_token_ids' has %zu ids; at most %d", n,
                  OAI_MAX_STOP);
    r->stop_ids = n ? malloc(n * sizeof *r->stop_ids) : NULL;
    if (n && !r->stop_ids) return fail(e, 500, "stop_token_ids", "out of memory");
    for (size_t i = 0; i < n; i++) {
      json_t *x = json_array_get(v, i);
      long long id = json_is_integer(x) ? json_integer_value(x) : -1;
      if (id < 0 || id >= lim->model->vocab_size)
        return fail(e, 400, "stop_token_ids", "stop_token_ids[%zu] must be a token id in [0, %d)",
                    i, lim->model->vocab_size);
      r->stop_ids[r->n_stop_ids++] = (int32_t)id;
    }
  }
  return true;
}

// --- fields this engine does not support: accepted only at their neutral values
static bool unsupported(json_t *o, oai_kind kind, oai_error *e) {
  long long n = 1;
  if (!get_int(o, "n", 1, INT32_MAX, &n, e)) return false;
  if (n != 1) return fail(e, 400, "n", "n > 1 is not supported (one choice per request)");
  json_t *v = json_object_get(o, "best_of");
  if (v && !json_is_null(v) && !(json_is_integer(v) && json_integer_value(v) == 1))
    return fail(e, 400, "best_of", "best_of is not supported");
  v = json_object_get(o, "logprobs");
  if (v && !json_is_null(v) && !json_is_false(v))
    return fail(e, 400, "logprobs", "logprobs are not supported");
  v = json_object_get(o, "top_logprobs");
  if (v && !json_is_null(v) && !(json_is_integer(v) && json_integer_value(v) == 0))
    return fail(e, 400, "top_logprobs", "top_logprobs are not supported");
  v = json_object_get(o, "prompt_logprobs");
  if (v && !json_is_null(v))
    return fail(e, 400, "prompt_logprobs", "prompt_logprobs are not supported");
  if (!no_structured_output(o, e)) return false;
  if (kind == OAI_COMPLETION) {
    v = json_object_get(o, "echo");
    if (v && !json_is_null(v) && !json_is_false(v))
      return fail(e, 400, "echo", "echo is not supported");
    v = json_object_get(o, "suffix");
    if (v && !json_is_null(v)) return fail(e, 400, "suffix", "suffix is not supported");
  }
  return true;
}

bool oai_parse(const char *body, size_t len, oai_kind kind, const oai_limits *lim, oai_request *out,
               oai_error *e) {
  memset(out, 0, sizeof *out);
  if (oai_json_depth(body, len, OAI_MAX_DEPTH) > OAI_MAX_DEPTH)
    return fail(e, 400, "", "the JSON body is nested deeper than %d levels", OAI_MAX_DEPTH);
  json_error_t je;
  json_t *o = json_loadb(body, len, 0, &je);
  if (!o)
    return fail(e, 400, "", "the body is not valid JSON: %s at line %d, column %d (position %d)",
                je.text, je.line, je.column, je.position);
  if (!json_is_object(o)) {
    fail(e, 400, "", "the body must be a JSON object, got %s", type_name(o));
    json_decref(o);
    return false;
  }
  oai_request r = {.kind = kind, .temperature = 1.0, .top_p = 1.0};
  bool ok = true;
  json_t *mv = json_object_get(o, "model");
  if (mv && !json_is_null(mv) && !json_is_string(mv))
    ok = fail(e, 400, "model", "'model' must be a string, got %s", type_name(mv));
  else if (mv && json_is_string(mv) && strcmp(json_string_value(mv), lim->served_name))
    ok = fail(e, 404, "model", "The model `%.200s` does not exist.", json_string_value(mv));
  ok = ok && unsupported(o, kind, e);
  long long max_tokens = -1, min_tokens = 0, seed = 0;
  ok = ok && get_int(o, "max_tokens", 1, INT32_MAX, &max_tokens, e);
  if (ok && kind == OAI_CHAT && max_tokens < 0)
    ok = get_int(o, "max_completion_tokens", 1, INT32_MAX, &max_tokens, e);
  ok = ok && get_int(o, "min_tokens", 0, INT32_MAX, &min_tokens, e);
  ok = ok && get_int(o, "seed", INT64_MIN, INT64_MAX, &seed, e);
  ok = ok && get_num(o, "temperature", 0, 100, false, &r.temperature, e);
  ok = ok && get_num(o, "top_p", 0, 1, true, &r.top_p, e);
  ok = ok && get_bool(o, "ignore_eos", &r.ignore_eos, e);
  ok = ok && get_bool(o, "stream", &r.stream, e);
  json_t *so = json_object_get(o, "stream_options");
  if (ok && so && !json_is_null(so)) {
    if (!json_is_object(so))
      ok = fail(e, 400, "stream_options", "'stream_options' must be an object, got %s",
                type_name(so));
    else if (!r.stream)
      ok = fail(e, 400, "stream_options", "'stream_options' can only be given with stream: true");
    else
      ok = get_bool(so, "include_usage", &r.include_usage, e);
    if (!ok && !strcmp(e->param, "include_usage"))
      snprintf(e->param, sizeof e->param, "stream_options");
  }
  ok = ok && get_stops(o, lim, &r, e);
  if (ok) ok = kind == OAI_CHAT ? chat_prompt(o, lim, &r, e) : completion_prompt(o, lim, &r, e);
  json_decref(o);
  if (ok && r.n_prompt >= lim->max_model_len)
    ok = fail(e, 400, kind == OAI_CHAT ? "messages" : "prompt",
              "This model's maximum context length is %d tokens. However, your prompt has %d "
              "tokens (one position is kept for the first generated token). Please reduce the "
              "length of the prompt.",
              lim->max_model_len, r.n_prompt);
  int room = lim->max_model_len - r.n_prompt;
  if (ok && max_tokens < 0) max_tokens = kind == OAI_CHAT || room < 16 ? room : 16;
  if (ok && r.n_prompt + max_tokens > lim->max_model_len)
    ok = fail(e, 400, "max_tokens",
              "This model's maximum context length is %d tokens. However, you requested %lld "
              "tokens (%d in the prompt, %lld for the completion). Please reduce the length of "
              "the prompt or max_tokens.",
              lim->max_model_len, r.n_prompt + max_tokens, r.n_prompt, max_tokens);
  if (ok && lim->kv_tokens > 0 && r.n_prompt + max_tokens > lim->kv_tokens)
    ok = fail(e, 400, "max_tokens",
              "the request needs %lld tokens of KV cache (%d in the prompt, %lld for the "
              "completion); a replica holds %d",
              r.n_prompt + max_tokens, r.n_prompt, max_tokens, lim->kv_tokens);
  if (ok && min_tokens > max_tokens)
    ok = fail(e, 400, "min_tokens", "'min_tokens' (%lld) must not exceed max_tokens (%lld)",
              min_tokens, max_tokens);
  if (!ok) {
    oai_request_free(&r);
    return false;
  }
  r.max_tokens = (int)max_tokens;
  r.min_tokens = (int)min_tokens;
  r.seed = (uint64_t)seed;
  *out = r;
  return true;
}

void oai_request_free(oai_request *r) {
  if (!r) return;
  free(r->prompt);
  r->prompt = NULL;
  for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
  free(r->stop);
  r->stop = NULL;
  r->n_stop = 0;
  free(r->stop_ids);
  r->stop_ids = NULL;
  r->n_stop_ids = 0;
}

// --- responses
const char *oai_error_type(int status) {
  switch (status) {
  case 400: return "BadRequestError";
  case 401: return "AuthenticationError";
  case 404: return "NotFoundError";
  case 405: return "MethodNotAllowed";
  case 413: return "RequestEntityTooLarge";
  case 503: return "ServiceUnavailableError";
  default: return "InternalServerError";
  }
}

static char *dump(json_t *o) {
  char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  return s;
}

static char *sse(json_t *o) {
  char *j = dump(o);
  if (!j) return NULL;
  size_t n = strlen(j);
  char *s = malloc(n + 9);
  if (s) {
    memcpy(s, "data: ", 6);
    memcpy(s + 6, j, n);
    memcpy(s + 6 + n, "\n\n", 3);
  }
  free(j);
  return s;
}

char *oai_error_body(int status, const char *param, const char *msg) {
  return dump(json_pack("{s:{s:s,s:s,s:o,s:i}}", "error", "message", msg, "type",
                        oai_error_type(status), "param",
                        param && *param ? json_string(param) : json_null(), "code", status));
}

char *oai_sse_error(int status, const char *msg) {
  return sse(json_pack("{s:{s:s,s:s,s:i}}", "error", "message", msg, "type", oai_error_type(status),
                       "code", status));
}

// A fixed synthetic vocabulary: simulated tokens carry no model output, only ids.
static const char *const synth_words[] = {
    " the",  " of",   " and",  " to",    " in",   " a",     " is",    " that",  " for",  " it",
    " as",   " with", " was",  " on",    " be",   " at",    " by",    " this",  " had",  " not",
    " are",  " but",  " from", " or",    " have", " an",    " they",  " which", " one",  " you",
    " were", " all",  " we",   " her",   " she",  " there", " would", " their", " will", " when",
    " who",  " him",  " been", " has",   " more", " if",    " no",    " out",   " so",   " said",
    " what", " up",   " its",  " about", " than", " into",  " them",  " can",   " only", " other",
    " time", " new",  " some", " could"};

int oai_token_text(const model_config *m, bool synthetic, int32_t id, char *buf, size_t cap) {
  if (cap) buf[0] = 0;
  if (id == m->bos_token_id || id == m->eos_token_id || id < TOKENIZER_BYTE_BASE) return 0;
  if (synthetic)
    return snprintf(buf, cap, "%s",
                    synth_words[(size_t)id % (sizeof synth_words / sizeof synth_words[0])]);
  return tokenizer_decode_one(m, id, buf, cap);
}

static json_t *ids_array(const int32_t *ids, int n) {
  json_t *a = json_array();
  for (int i = 0; a && i < n; i++) json_array_append_new(a, json_integer(ids[i]));
  return a;
}

static const char *chunk_object(oai_kind k) {
  return k == OAI_CHAT ? "chat.completion.chunk" : "text_completion";
}

static json_t *head(const oai_resp *r, const char *object) {
  return json_pack("{s:s,s:s,s:I,s:s}", "id", r->id, "object", object, "created",
                   (json_int_t)r->created, "model", r->model);
}

char *oai_sse_role(const oai_resp *r) {
  json_t *o = head(r, chunk_object(r->kind));
  json_t *ch = json_pack("[{s:i,s:{s:s,s:s},s:n,s:n}]", "index", 0, "delta", "role", "assistant",
                         "content", "", "logprobs", "finish_reason");
  if (o && ch)
    json_object_set_new(o, "choices", ch);
  else
    json_decref(ch);
  return sse(o);
}

char *oai_sse_content(const oai_resp *r, const char *text, const int32_t *ids, int n,
                      const char *finish) {
  json_t *o = head(r, chunk_object(r->kind));
  json_t *c = r->kind == OAI_CHAT ? json_pack("{s:i,s:{s:s}}", "index", 0, "delta", "content", text)
                                  : json_pack("{s:i,s:s}", "index", 0, "text", text);
  if (c) {
    json_object_set_new(c, "logprobs", json_null());
    json_object_set_new(c, "finish_reason", finish ? json_string(finish) : json_null());
    if (finish) json_object_set_new(c, "stop_reason", json_null());
    json_object_set_new(c, "token_ids", ids_array(ids, n));
  }
  json_t *ch = json_array();
  if (ch && c)
    json_array_append_new(ch, c);
  else
    json_decref(c);
  if (o && ch)
    json_object_set_new(o, "choices", ch);
  else
    json_decref(ch);
  return sse(o);
}

char *oai_sse_head(const oai_resp *r) {
  char *j = dump(head(r, chunk_object(r->kind)));
  if (!j) return NULL;
  size_t n = strlen(j); // j ends with '}': the choices array goes before it
  char *h = malloc(n + 32);
  if (h) snprintf(h, n + 32, "data: %.*s,\"choices\":[{\"index\":0,", (int)(n - 1), j);
  free(j);
  return h;
}

// Appends src (n bytes) at *at when it fits in end; false (nothing written) when it does not.
static bool put_bytes(char **at, const char *end, const char *src, size_t n) {
  if ((size_t)(end - *at) < n) return false;
  memcpy(*at, src, n);
  *at += n;
  return true;
}

size_t oai_sse_content_to(const char *sse_head, oai_kind kind, const char *text,
                          const int32_t *ids, int n, const char *finish, char *buf, size_t cap) {
  if (finish && strspn(finish, "abcdefghijklmnopqrstuvwxyz_") != strlen(finish))
    return 0; // not a finish reason the server writes (no escaping here)
  char *at = buf, *end = buf + cap;
  bool ok = put_bytes(&at, end, sse_head, strlen(sse_head));
  const char *key = kind == OAI_CHAT ? "\"delta\":{\"content\":" : "\"text\":";
  ok = ok && put_bytes(&at, end, key, strlen(key));
  json_t *t = ok ? json_string(text) : NULL; // jansson escapes it, and refuses bad UTF-8
  size_t tn = t ? json_dumpb(t, at, (size_t)(end - at), JSON_ENCODE_ANY | JSON_COMPACT) : 0;
  json_decref(t);
  if (!tn || tn > (size_t)(end - at)) return 0;
  at += tn;
  if (kind == OAI_CHAT) ok = put_bytes(&at, end, "}", 1);
  static const char mid[] = ",\"logprobs\":null,\"finish_reason\":";
  ok = ok && put_bytes(&at, end, mid, sizeof mid - 1);
  if (finish) {
    ok = ok && put_bytes(&at, end, "\"", 1) && put_bytes(&at, end, finish, strlen(finish)) &&
         put_bytes(&at, end, "\",\"stop_reason\":null", 20);
  } else {
    ok = ok && put_bytes(&at, end, "null", 4);
  }
  ok = ok && put_bytes(&at, end, ",\"token_ids\":[", 14);
  for (int i = 0; ok && i < n; i++) { // ",%d" without printf's cost
    char d[24], *q = d + sizeof d; // 20 digits, a sign, a comma
    int64_t v = ids[i];
    bool neg = v < 0;
    q = sc_u64_digits(neg ? 0 - (uint64_t)v : (uint64_t)v, q);
    if (neg) *--q = '-';
    if (i) *--q = ',';
    ok = put_bytes(&at, end, q, (size_t)(d + sizeof d - q));
  }
  ok = ok && put_bytes(&at, end, "]}]}\n\n", 6);
  if (!ok || at == end) return 0;
  *at = 0;
  return (size_t)(at - buf);
}

static json_t *usage(int prompt_tokens, int completion_tokens) {
  return json_pack("{s:i,s:i,s:i}", "prompt_tokens", prompt_tokens, "total_tokens",
                   prompt_tokens + completion_tokens, "completion_tokens", completion_tokens);
}

char *oai_sse_usage(const oai_resp *r, int prompt_tokens, int completion_tokens) {
  json_t *o = head(r, chunk_object(r->kind));
  if (o) {
    json_object_set_new(o, "choices", json_array());
    json_object_set_new(o, "usage", usage(prompt_tokens, completion_tokens));
  }
  return sse(o);
}

char *oai_body(const oai_resp *r, const char *text, const int32_t *ids, int n, const char *finish,
               int prompt_tokens) {
  json_t *o = head(r, r->kind == OAI_CHAT ? "chat.completion" : "text_completion");
  json_t *c;
  if (r->kind == OAI_CHAT)
    c = json_pack("{s:i,s:{s:s,s:n,s:s,s:[]}}", "index", 0, "message", "role", "assistant",
                  "reasoning_content", "content", text, "tool_calls");
  else
    c = json_pack("{s:i,s:s}", "index", 0, "text", text);
  if (c) {
    json_object_set_new(c, "logprobs", json_null());
    json_object_set_new(c, "finish_reason", finish ? json_string(finish) : json_null());
    json_object_set_new(c, "stop_reason", json_null());
    if (r->kind == OAI_COMPLETION) json_object_set_new(c, "prompt_logprobs", json_null());
    json_object_set_new(c, "token_ids", ids_array(ids, n));
  }
  json_t *ch = json_array();
  if (ch && c)
    json_array_append_new(ch, c);
  else
    json_decref(c);
  if (o) {
    json_object_set_new(o, "choices", ch ? ch : json_array());
    json_t *u = usage(prompt_tokens, n);
    if (u) json_object_set_new(u, "prompt_tokens_details", json_null());
    json_object_set_new(o, "usage", u);
    if (r->kind == OAI_CHAT) json_object_set_new(o, "prompt_logprobs", json_null());
  } else {
    json_decref(ch);
  }
  return dump(o);
}
