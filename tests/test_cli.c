// Bad input through the command line: every case gets one clear line naming the file, field
// or value, and exit code 2; none crashes. Plus --help on every subcommand.
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/presets.h"
#include "engine/model.h"
#include "tests/helpers.h"

static char out[1 << 16];

// A fresh llama-tiny directory (f32 weights, seed 1); returns its path.
static const char *tiny_dir(void) {
  const char *d = sc_test_tmpdir("cli");
  cr_assert_not_null(d);
  model_config c;
  sc_error err = {{0}};
  cr_assert_eq(model_preset_load("llama-tiny", &c, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(model_gen_write(&c, 1, SC_F32, d, &err), SC_OK, "%s", err.msg);
  return d;
}

// Runs args, expects exit 2 and one line of output containing every needle.
static void expect_bad_input(const char *args, const char *needle1, const char *needle2) {
  int rc = sc_test_run_cli(args, out, sizeof out);
  cr_expect_eq(rc, 2, "`shardcheck %s` exited %d, output:\n%s", args, rc, out);
  cr_expect_eq(sc_test_count_lines(out), 1, "expected one line, got:\n%s", out);
  if (needle1) cr_expect(strstr(out, needle1), "'%s' missing from: %s", needle1, out);
  if (needle2) cr_expect(strstr(out, needle2), "'%s' missing from: %s", needle2, out);
}

static void edit_config(const char *dir, const char *key, json_t *value /* NULL: delete */) {
  char path[512];
  snprintf(path, sizeof path, "%s/config.json", dir);
  json_error_t je;
  json_t *o = json_load_file(path, 0, &je);
  cr_assert_not_null(o, "%s", je.text);
  if (value) json_object_set_new(o, key, value);
  else json_object_del(o, key);
  cr_assert_eq(json_dump_file(o, path, JSON_INDENT(2)), 0);
  json_decref(o);
}

static char *read_all(const char *path, long *n) {
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f);
  fseek(f, 0, SEEK_END);
  *n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)*n);
  cr_assert_eq(fread(b, 1, (size_t)*n, f), (size_t)*n);
  fclose(f);
  return b;
}

static char args[10240];
#define ARGS(...) (snprintf(args, sizeof args, __VA_ARGS__), args)

Test(cli_bad_input, missing_model_dir_names_the_path) {
  expect_bad_input("generate --model /nonexistent/model-dir --prompt-ids 1,2", "/nonexistent/model-dir", NULL);
}

Test(cli_bad_input, model_dir_without_config_names_config_json) {
  const char *d = sc_test_tmpdir("empty");
  expect_bad_input(ARGS("generate --model %s --prompt-ids 1,2", d), "config.json", NULL);
}

Test(cli_bad_input, config_missing_a_field_names_the_field) {
  const char *d = tiny_dir();
  edit_config(d, "hidden_size", NULL);
  expect_bad_input(ARGS("generate --model %s --prompt-ids 1,2", d), "config.json", "hidden_size");
}

Test(cli_bad_input, config_field_of_wrong_type_names_the_field) {
  const char *d = tiny_dir();
  edit_config(d, "num_attention_heads", json_string("eight"));
  expect_bad_input(ARGS("generate --model %s --prompt-ids 1,2", d), "config.json", "num_attention_heads");
}

Test(cli_bad_input, truncated_safetensors_header_is_refused) {
  const char *d = tiny_dir();
  char path[512];
  snprintf(path, sizeof path, "%s/model.safetensors", d);
  cr_assert_eq(truncate(path, 5), 0);
  expect_bad_input(ARGS("generate --model %s --prompt-ids 1,2", d), "model.safetensors", NULL);
}

Test(cli_bad_input, corrupt_safetensors_header_is_refused) {
  const char *d = tiny_dir();
  char path[512];
  snprintf(path, sizeof path, "%s/model.safetensors", d);
  FILE *f = fopen(path, "r+b");
  cr_assert_not_null(f);
  fseek(f, 9, SEEK_SET);
  fputs("}}}}not json", f);
  fclose(f);
  expect_bad_input(ARGS("generate --model %s --prompt-ids 1,2", d), "model.safetensors", NULL);
}

Test(cli_bad_input, tensor_bytes_past_the_end_of_the_file_are_refused) {
  const char *d = tiny_dir();
  char path[512];
  snprintf(path, sizeof path, "%s/model.safetensors", d);
  struct stat st;
  cr_assert_eq(stat(path, &st), 0);
  cr_assert_eq(truncate(path, st.st_size - 100), 0);
  expect_bad_input(ARGS("generate --model %s --prompt-ids 1,2", d), "model.safetensors", "past the end");
}

Test(cli_bad_input, tensor_of_unsupported_dtype_is_refused) {
  const char *d = tiny_dir();
  char path[512];
  snprintf(path, sizeof path, "%s/model.safetensors", d);
  long n;
  char *b = read_all(path, &n);
  char *p = strstr(b + 8, "\"F32\""); // the first tensor's dtype, same length as I64
  cr_assert_not_null(p);
  memcpy(p + 1, "I64", 3);
  cr_assert_eq(sc_test_write_file(path, b, (size_t)n), 0);
  free(b);
  expect_bad_input(ARGS("generate --model %s --prompt-ids 1,2", d), "model.safetensors", "I64");
}

Test(cli_bad_input, tensor_shape_other_than_config_implies_names_the_tensor) {
  const char *d = tiny_dir();
  edit_config(d, "intermediate_size", json_integer(256));
  expect_bad_input(ARGS("generate --model %s --prompt-ids 1,2", d), "mlp.", "256");
}

Test(cli_bad_input, tp_that_does_not_divide_the_heads_lists_valid_tp) {
  expect_bad_input("generate --model llama-tiny --tp 3 --prompt-ids 1,2", "tp=3", "valid tp");
}

Test(cli_bad_input, pp_larger_than_the_layer_count_is_refused) {
  expect_bad_input("generate --model llama-tiny --pp 9 --prompt-ids 1,2", "pp=9", "num_hidden_layers");
}

Test(cli_bad_input, prompt_longer_than_the_context_is_refused) {
  static char big[8192];
  size_t n = 0;
  for (int i = 0; i < 600; i++) n += (size_t)snprintf(big + n, sizeof big - n, "%s%d", i ? "," : "", 5);
  expect_bad_input(ARGS("generate --model llama-tiny --prompt-ids %s", big), "context", "600");
}

Test(cli_bad_input, unknown_preset_lists_the_presets) {
  expect_bad_input("generate --model llama-huge --prompt-ids 1,2", "llama-huge", "llama-tiny");
}

Test(cli_bad_input, bad_numbers_and_unknown_flags_are_usage_errors) {
  int rc = sc_test_run_cli("generate --model llama-tiny --prompt-ids 1,x", out, sizeof out);
  cr_expect_eq(rc, 2, "%s", out);
  rc = sc_test_run_cli("generate --model llama-tiny --prompt-ids 1 --tp zero", out, sizeof out);
  cr_expect_eq(rc, 2, "%s", out);
  rc = sc_test_run_cli("generate --model llama-tiny --prompt-ids 1 --bogus", out, sizeof out);
  cr_expect_eq(rc, 2, "%s", out);
  rc = sc_test_run_cli("generate --model llama-tiny --prompt-ids 1 --seed abc", out, sizeof out);
  cr_expect_eq(rc, 2, "%s", out);
  rc = sc_test_run_cli("generate --model llama-tiny --prompt-ids 1 --top-p 2", out, sizeof out);
  cr_expect_eq(rc, 2, "%s", out);
  rc = sc_test_run_cli("frobnicate", out, sizeof out);
  cr_expect_eq(rc, 2, "%s", out);
}

Test(cli, generated_weights_on_disk_give_the_same_tokens_as_in_memory_at_tp2_pp2) {
  const char *d = tiny_dir();
  char a[4096], b[4096];
  cr_assert_eq(sc_test_run_cli(ARGS("generate --model %s --tp 2 --pp 2 --prompt-ids 5,6,7 --max-tokens 16 --json", d), a, sizeof a), 0, "%s", a);
  cr_assert_eq(sc_test_run_cli("generate --model llama-tiny --weights-seed 1 --prompt-ids 5,6,7 --max-tokens 16 --json", b, sizeof b), 0, "%s", b);
  json_error_t je;
  json_t *ja = json_loads(a, 0, &je), *jb = json_loads(b, 0, &je);
  cr_assert_not_null(ja, "%s", a);
  cr_assert_not_null(jb, "%s", b);
  cr_assert(json_equal(json_object_get(ja, "tokens"), json_object_get(jb, "tokens")), "%s\n%s", a, b);
  cr_assert_eq(json_array_size(json_object_get(ja, "tokens")), 16);
  cr_assert(json_is_number(json_object_get(ja, "prefill_ms")));
  cr_assert(json_is_number(json_object_get(ja, "decode_tokens_per_s")));
  json_decref(ja);
  json_decref(jb);
}

Test(cli, help_is_offered_by_every_subcommand) {
  const char *cmds[] = {"--help", "generate --help", "plan --help", "model --help", "model gen --help",
                        "serve --help"};
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    int rc = sc_test_run_cli(cmds[i], out, sizeof out);
    cr_expect_eq(rc, 0, "`shardcheck %s` exited %d", cmds[i], rc);
    cr_expect(strstr(out, "usage"), "`shardcheck %s` printed no usage:\n%s", cmds[i], out);
  }
}

// serve refuses a deployment before it binds anything: one line naming what is wrong.
Test(cli, serve_refuses_bad_deployments_in_one_line) {
  expect_bad_input("serve --model no-such-model --port 0", "no-such-model", NULL);
  expect_bad_input("serve --model llama-tiny -tp 3 --port 0", "tp", NULL);
  expect_bad_input("serve --model llama3-70b --mode sim --port 0", "--profile", NULL);
  expect_bad_input("serve --model llama-tiny --max-model-len 4096 --port 0", "4096", "512");
  expect_bad_input("serve --model llama-tiny --host not-an-address --port 0", "not-an-address", NULL);
  expect_bad_input("serve --model llama-tiny --dtype fp8 --port 0", "--dtype fp8", "--mode sim");
  expect_bad_input("serve --model llama-tiny --kv-cache-dtype fp8 --port 0", "--kv-cache-dtype",
                   "--mode sim");
  int rc = sc_test_run_cli("serve --model llama-tiny --port 0 -tp x", out, sizeof out);
  cr_expect_eq(rc, 2, "%s", out);
  cr_expect(strstr(out, "--tensor-parallel-size"), "%s", out);
}

// --- traffic: a prefix or a conversation past the context, a trace line without its
// conversation, an unknown routing policy: one line, exit 2

Test(cli, traffic_bad_input_is_one_line_and_exit_2) {
  static const char *const bodies[] = {
      "deployments: [{dp: 2, policy: prefix-afinity}]\nworkload:\n"
      "  prompts: [{input: 8, output: 4}]\n  phases: [{fixed: {requests: 1}}]\n",
      "deployments: [{dp: 1}]\nworkload:\n  prompts: [{input: 8, output: 4}]\n"
      "  prefixes: {count: 2, length: 1000}\n  phases: [{fixed: {requests: 1}}]\n",
      "deployments: [{dp: 1}]\nworkload:\n  prompts: [{input: 100, output: 100}]\n"
      "  conversations: {turns: 3}\n  phases: [{fixed: {requests: 1}}]\n",
      "deployments: [{dp: 1}]\nworkload:\n  trace: t.jsonl\n",
  };
  static const char *const needles[] = {"key 'policy': expected one of", "key 'length'",
                                        "key 'conversations'", "key 'conversation': missing"};
  const char *dir = sc_test_tmpdir("cli-traffic");
  char path[600];
  snprintf(path, sizeof path, "%s/t.jsonl", dir);
  static const char trace[] = "{\"arrival_s\": 0, \"conversation\": 1, \"prompt_tokens\": 8}\n"
                              "{\"arrival_s\": 1, \"prompt_tokens\": 8}\n";
  cr_assert_eq(sc_test_write_file(path, trace, strlen(trace)), 0);
  for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
    char text[1024], name[32], cmd[700];
    snprintf(text, sizeof text, "name: bad\nmodel: {preset: llama-tiny}\n%s", bodies[i]);
    snprintf(name, sizeof name, "bad%zu.yaml", i);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    cr_assert_eq(sc_test_write_file(path, text, strlen(text)), 0);
    snprintf(cmd, sizeof cmd, "validate %s", path);
    expect_bad_input(cmd, name, needles[i]);
  }
}
