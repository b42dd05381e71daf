// The event-stream parser and the OpenAI chunk reader (serving/sse.h) on recorded streams in the
// exact formats of vLLM (completions, chat, token ids, the usage chunk, a mid-stream error),
// SGLang and llama.cpp's server (tests/data/sse/), each fed whole, byte by byte and in every
// two-piece split; plus the framing corners: CRLF and CR line ends split across calls,
// comments, multi-line data, a byte-order mark, an event past the size limit.
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serving/sse.h"
#include "tests/helpers.h"

// What a stream adds up to, read the way replica_http.c reads it.
typedef struct tally {
  int events, data, content, done, errors, bad;
  int tokens_by_ids;   // sum of token_ids lengths (-1 chunks skipped)
  int ids_chunks;      // chunks that carried token_ids
  int usage_completion, usage_prompt; // from the last usage seen (-1: none)
  int first_content;   // index of the first event with content (-1: none)
  char finish[24];
  char error[256];
  char last_data[128];
} tally;

static bool count(void *ud, const char *data, size_t len, bool error) {
  tally *t = ud;
  cr_assert_eq(strlen(data), len, "data is NUL-terminated at len");
  oai_chunk c;
  if (error) oai_error_parse(data, len, &c);
  else oai_chunk_parse(data, len, &c);
  snprintf(t->last_data, sizeof t->last_data, "%s", data);
  switch (c.kind) {
  case OAI_CHUNK_DONE: t->done++; break;
  case OAI_CHUNK_ERROR:
    t->errors++;
    snprintf(t->error, sizeof t->error, "%s", c.error);
    break;
  case OAI_CHUNK_BAD: t->bad++; break;
  case OAI_CHUNK_DATA:
    t->data++;
    if (c.has_content && t->first_content < 0) t->first_content = t->events;
    t->content += c.has_content;
    if (c.n_token_ids >= 0) {
      t->tokens_by_ids += c.n_token_ids;
      t->ids_chunks++;
    }
    if (c.has_usage) {
      t->usage_completion = c.usage_completion;
      t->usage_prompt = c.usage_prompt;
    }
    if (c.finish_reason[0]) snprintf(t->finish, sizeof t->finish, "%s", c.finish_reason);
    break;
  }
  t->events++;
  return true;
}

static tally fresh(void) { return (tally){.usage_completion = -1, .usage_prompt = -1,
                                          .first_content = -1}; }

static char *fixture(const char *name, long *len) {
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/data/sse/%s", SC_SOURCE_DIR, name);
  char *b = sc_test_read_file(path, len);
  cr_assert_not_null(b, "cannot read %s", path);
  return b;
}

// Feeds text[0..n) in pieces of `step` bytes (0: whole).
static tally feed(const char *text, size_t n, size_t step) {
  sse_parser p;
  sse_init(&p);
  tally t = fresh();
  if (!step) step = n ? n : 1;
  for (size_t i = 0; i < n; i += step)
    cr_assert(sse_feed(&p, text + i, i + step <= n ? step : n - i, count, &t), "%s", p.why);
  cr_assert(!sse_pending(&p), "the stream ends between events");
  sse_free(&p);
  return t;
}

// The same tally whole, byte by byte and split at every point in two.
static tally feed_all_ways(const char *name) {
  long n;
  char *text = fixture(name, &n);
  tally whole = feed(text, (size_t)n, 0);
  tally bytes = feed(text, (size_t)n, 1);
  cr_assert_eq(memcmp(&whole, &bytes, sizeof whole), 0, "%s: byte by byte differs", name);
  for (long cut = 1; cut < n; cut += 7) {
    sse_parser p;
    sse_init(&p);
    tally t = fresh();
    cr_assert(sse_feed(&p, text, (size_t)cut, count, &t));
    cr_assert(sse_feed(&p, text + cut, (size_t)(n - cut), count, &t));
    sse_free(&p);
    cr_assert_eq(memcmp(&whole, &t, sizeof whole), 0, "%s: split at %ld differs", name, cut);
  }
  free(text);
  return whole;
}

Test(sse, vllm_completions_four_content_chunks_then_usage_and_done) {
  tally t = feed_all_ways("vllm-completions.sse");
  cr_expect_eq(t.content, 4);
  cr_expect_eq(t.first_content, 0);
  cr_expect_eq(t.done, 1);
  cr_expect_eq(t.usage_completion, 4);
  cr_expect_eq(t.usage_prompt, 8);
  cr_expect_str_eq(t.finish, "length");
  cr_expect_eq(t.errors + t.bad, 0);
  cr_expect_eq(t.ids_chunks, 0, "no token_ids unless asked for");
}

Test(sse, vllm_token_ids_count_every_token_of_a_multi_token_chunk) {
  tally t = feed_all_ways("vllm-completions-token-ids.sse");
  cr_expect_eq(t.content, 3);
  cr_expect_eq(t.ids_chunks, 3);
  cr_expect_eq(t.tokens_by_ids, 6);
  cr_expect_eq(t.usage_completion, 6);
}

Test(sse, vllm_chat_role_chunk_is_not_the_first_token) {
  tally t = feed_all_ways("vllm-chat.sse");
  cr_expect_eq(t.first_content, 1, "the role chunk (content \"\") carries no output");
  cr_expect_eq(t.content, 3, "the final chunk's empty delta is not content either");
  cr_expect_eq(t.usage_completion, 3);
  cr_expect_eq(t.usage_prompt, 42);
  cr_expect_str_eq(t.finish, "length");
}

Test(sse, vllm_mid_stream_error_is_an_error_not_a_success) {
  tally t = feed_all_ways("vllm-error.sse");
  cr_expect_eq(t.content, 2);
  cr_expect_eq(t.errors, 1);
  cr_expect_str_eq(t.error, "Internal server error");
  cr_expect_eq(t.done, 1, "vLLM still ends the stream with [DONE]");
}

Test(sse, sglang_completions_and_chat_with_null_usage_on_content_chunks) {
  tally t = feed_all_ways("sglang-completions.sse");
  cr_expect_eq(t.content, 3);
  cr_expect_eq(t.usage_completion, 3);
  cr_expect_eq(t.done, 1);
  tally c = feed_all_ways("sglang-chat.sse");
  cr_expect_eq(c.first_content, 1);
  cr_expect_eq(c.content, 2);
  cr_expect_eq(c.usage_prompt, 40);
  tally e = feed_all_ways("sglang-error.sse");
  cr_expect_eq(e.errors, 1);
  cr_expect_str_eq(e.error, "Request aborted");
}

Test(sse, llamacpp_usage_rides_on_the_last_chunk_and_errors_come_as_an_error_field) {
  tally t = feed_all_ways("llamacpp-completions.sse");
  cr_expect_eq(t.content, 3, "the last chunk's text is empty");
  cr_expect_eq(t.usage_completion, 3);
  cr_expect_str_eq(t.finish, "length");
  tally c = feed_all_ways("llamacpp-chat.sse");
  cr_expect_eq(c.first_content, 1, "content: null in the role chunk");
  cr_expect_eq(c.content, 2);
  cr_expect_eq(c.usage_prompt, 30);
  tally e = feed_all_ways("llamacpp-error.sse");
  cr_expect_eq(e.errors, 1);
  cr_expect_str_eq(e.error, "the request exceeds the available context size, try increasing it");
  cr_expect_eq(e.done, 1);
}

// --- framing corners
static const char *joined(const char *text, size_t step) {
  static char out[4096];
  out[0] = 0;
  sse_parser p;
  sse_init(&p);
  tally t = fresh();
  size_t n = strlen(text);
  for (size_t i = 0; i < n; i += step) sse_feed(&p, text + i, i + step <= n ? step : n - i, count,
                                                &t);
  snprintf(out, sizeof out, "%d|%s", t.events, t.last_data);
  sse_free(&p);
  return out;
}

Test(sse, crlf_and_cr_line_ends_split_anywhere_give_the_same_events) {
  const char *lf = "data: [DONE]\n\n";
  const char *crlf = "data: [DONE]\r\n\r\n";
  const char *cr = "data: [DONE]\r\r";
  for (size_t step = 1; step < 6; step++) {
    cr_expect_str_eq(joined(lf, step), "1|[DONE]");
    cr_expect_str_eq(joined(crlf, step), "1|[DONE]");
    cr_expect_str_eq(joined(cr, step), "1|[DONE]");
  }
}

Test(sse, comments_ids_and_multi_line_data) {
  cr_expect_str_eq(joined(": keep-alive\n\nid: 7\nevent: x\ndata: a\ndata:b\n\n", 3), "1|a\nb");
  cr_expect_str_eq(joined("\xEF\xBB\xBF" "data: x\n\n", 1), "1|x", "a byte-order mark is skipped");
  cr_expect_str_eq(joined("retry: 10\n\n", 2), "0|", "an event without data is not dispatched");
}

Test(sse, malformed_chunks_are_bad_not_a_crash) {
  oai_chunk c;
  oai_chunk_parse("{not json", 9, &c);
  cr_expect_eq(c.kind, OAI_CHUNK_BAD);
  oai_chunk_parse("[1, 2]", 6, &c);
  cr_expect_eq(c.kind, OAI_CHUNK_BAD);
  oai_chunk_parse("{\"id\": 1}", 9, &c);
  cr_expect_eq(c.kind, OAI_CHUNK_BAD);
  oai_chunk_parse("{\"choices\": [{\"text\": 5, \"token_ids\": \"x\"}]}", 44, &c);
  cr_expect_eq(c.kind, OAI_CHUNK_DATA);
  cr_expect(!c.has_content);
  cr_expect_eq(c.n_token_ids, -1);
}

Test(sse, an_event_past_one_mebibyte_fails_the_parser) {
  sse_parser p;
  sse_init(&p);
  tally t = fresh();
  cr_assert(sse_feed(&p, "data: ", 6, count, &t));
  char *big = malloc(SSE_MAX_EVENT + 16);
  memset(big, 'x', SSE_MAX_EVENT + 16);
  cr_expect(!sse_feed(&p, big, SSE_MAX_EVENT + 16, count, &t));
  cr_expect(p.failed);
  cr_expect(strstr(p.why, "1 MiB"), "%s", p.why);
  free(big);
  sse_free(&p);
}
