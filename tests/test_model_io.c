// Tests for model I/O: config.json read/write (engine/model.c), the safetensors reader and
// writer and the half conversions (engine/safetensors.c), the tensor list and the
// deterministic weight generator. Fixtures are written with the writer and then corrupted
// byte by byte, so no external files are needed.
//
// The last section runs the `shardcheck model` command through the built binary (SC_BINARY).
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/model.h"
#include "engine/safetensors.h"
#include "tests/helpers.h"

// --- fixtures

// A small GQA config: 2 layers, 4 query heads over 2 KV heads, untied head.
static model_config tiny_config(void) {
  model_config c;
  memset(&c, 0, sizeof c);
  snprintf(c.name, sizeof c.name, "tiny");
  c.vocab_size = 64;
  c.dim = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.ffn_dim = 48;
  c.max_seq_len = 128;
  c.rope_theta = 500000.0f;
  c.norm_eps = 1e-5f;
  c.tied_embeddings = false;
  c.dtype = SC_BF16;
  c.bos_token_id = 1;
  c.eos_token_id = 2;
  return c;
}

static char *path_in(const char *dir, const char *name) {
  static char bufs[4][1024];
  static int slot;
  char *b = bufs[slot++ % 4];
  snprintf(b, 1024, "%s/%s", dir, name);
  return b;
}

static void write_text(const char *path, const char *text) {
  cr_assert_eq(sc_test_write_file(path, text, strlen(text)), 0, "cannot write %s", path);
}

// Writes dir/model.safetensors holding "a" (3, 5) and "b" (7) of dtype t, values from f(i).
static float fixture_value(int tensor, int i) {
  return tensor == 0 ? (float)(i - 7) * 0.37f : 1.0f / (float)(i + 1);
}

static void write_fixture(const char *path, sc_dtype t) {
  sc_error err = {{0}};
  st_writer *w;
  cr_assert_eq(st_writer_new(path, &w, &err), SC_OK, "%s", err.msg);
  int64_t sa[2] = {3, 5}, sb[1] = {7};
  cr_assert_eq(st_writer_declare(w, "a", t, 2, sa, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(st_writer_declare(w, "b", t, 1, sb, &err), SC_OK, "%s", err.msg);
  float a[15], b[7];
  for (int i = 0; i < 15; i++) a[i] = fixture_value(0, i);
  for (int i = 0; i < 7; i++) b[i] = fixture_value(1, i);
  cr_assert_eq(st_writer_write(w, a, 15, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(st_writer_write(w, b, 7, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(st_writer_finish(w, &err), SC_OK, "%s", err.msg);
}

static long file_size(const char *path) {
  struct stat sb;
  cr_assert_eq(stat(path, &sb), 0);
  return (long)sb.st_size;
}

static uint64_t header_len(const char *path) {
  FILE *f = fopen(path, "rb");
  cr_assert(f);
  uint64_t n = 0;
  cr_assert_eq(fread(&n, 8, 1, f), 1);
  fclose(f);
  return n;
}

// Overwrites bytes at offset of path.
static void patch(const char *path, long offset, const void *bytes, size_t n) {
  FILE *f = fopen(path, "r+b");
  cr_assert(f, "cannot open %s", path);
  cr_assert_eq(fseek(f, offset, SEEK_SET), 0);
  cr_assert_eq(fwrite(bytes, 1, n, f), n);
  fclose(f);
}

// Replaces the first occurrence of `from` in the header of path by `to` (same length).
static void patch_header(const char *path, const char *from, const char *to) {
  cr_assert_eq(strlen(from), strlen(to));
  uint64_t n = header_len(path);
  char *h = malloc(n + 1);
  FILE *f = fopen(path, "rb");
  cr_assert(f);
  fseek(f, 8, SEEK_SET);
  cr_assert_eq(fread(h, 1, n, f), n);
  fclose(f);
  h[n] = 0;
  char *at = strstr(h, from);
  cr_assert(at, "'%s' not in header %s", from, h);
  patch(path, 8 + (at - h), to, strlen(to));
  free(h);
}

static void truncate_to(const char *path, long size) {
  cr_assert_eq(truncate(path, size), 0);
}

// Opens dir and expects SC_INVALID with every word of `needs` (NULL-terminated) in err.
static void expect_refused(const char *dir, sc_status want, const char *const *needs) {
  sc_error err = {{0}};
  st_model *m = NULL;
  sc_status s = st_open_dir(dir, &m, &err);
  cr_assert_eq(s, want, "status %s, want %s: %s", sc_status_name(s), sc_status_name(want),
               err.msg);
  cr_assert_null(m);
  for (; *needs; needs++) cr_assert(strstr(err.msg, *needs), "'%s' not in: %s", *needs, err.msg);
}

// --- config.json

Test(config_json, round_trip_keeps_every_field) {
  const char *dir = sc_test_tmpdir("cfg");
  model_config c = tiny_config(), back;
  sc_error err = {{0}};
  const char *p = path_in(dir, "config.json");
  cr_assert_eq(model_config_write_json(&c, p, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(model_config_load_json(p, &back, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(back.vocab_size, c.vocab_size);
  cr_assert_eq(back.dim, c.dim);
  cr_assert_eq(back.n_layers, c.n_layers);
  cr_assert_eq(back.n_heads, c.n_heads);
  cr_assert_eq(back.n_kv_heads, c.n_kv_heads);
  cr_assert_eq(back.head_dim, c.head_dim);
  cr_assert_eq(back.ffn_dim, c.ffn_dim);
  cr_assert_eq(back.max_seq_len, c.max_seq_len);
  cr_assert_eq(back.rope_theta, c.rope_theta);
  cr_assert_eq(back.norm_eps, c.norm_eps);
  cr_assert_eq(back.tied_embeddings, c.tied_embeddings);
  cr_assert_eq(back.dtype, c.dtype);
  cr_assert_eq(back.bos_token_id, c.bos_token_id);
  cr_assert_eq(back.eos_token_id, c.eos_token_id);
  cr_assert_str_eq(back.name, dir);
}

Test(config_json, written_file_is_what_transformers_reads) {
  const char *dir = sc_test_tmpdir("cfg");
  model_config c = tiny_config();
  c.bos_token_id = -1;
  sc_error err = {{0}};
  const char *p = path_in(dir, "config.json");
  cr_assert_eq(model_config_write_json(&c, p, &err), SC_OK, "%s", err.msg);
  char text[4096] = "";
  FILE *f = fopen(p, "r");
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;
  const char *needs[] = {"\"LlamaForCausalLM\"", "\"model_type\": \"llama\"",
                         "\"hidden_act\": \"silu\"", "\"torch_dtype\": \"bfloat16\"",
                         "\"rms_norm_eps\": 1e-", "\"rope_theta\": 500000.0",
                         "\"bos_token_id\": null", "\"tie_word_embeddings\": false"};
  for (size_t i = 0; i < sizeof needs / sizeof needs[0]; i++)
    cr_assert(strstr(text, needs[i]), "'%s' not in:\n%s", needs[i], text);
}

Test(config_json, optional_fields_take_their_defaults) {
  const char *dir = sc_test_tmpdir("cfg");
  const char *p = path_in(dir, "config.json");
  write_text(p, "{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 4,"
                " \"num_hidden_layers\": 2, \"vocab_size\": 100, \"rms_norm_eps\": 1e-6,"
                " \"max_position_embeddings\": 256, \"eos_token_id\": [7, 8]}");
  model_config c;
  sc_error err = {{0}};
  cr_assert_eq(model_config_load_json(p, &c, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(c.n_kv_heads, 4);
  cr_assert_eq(c.head_dim, 16);
  cr_assert_eq(c.rope_theta, 10000.0f);
  cr_assert_eq(c.tied_embeddings, false);
  cr_assert_eq(c.dtype, SC_F32);
  cr_assert_eq(c.bos_token_id, -1);
  cr_assert_eq(c.eos_token_id, 7);
}

Test(config_json, missing_field_is_invalid_and_names_it) {
  const char *dir = sc_test_tmpdir("cfg");
  const char *p = path_in(dir, "config.json");
  write_text(p, "{\"intermediate_size\": 128, \"num_attention_heads\": 4,"
                " \"num_hidden_layers\": 2, \"vocab_size\": 100, \"rms_norm_eps\": 1e-6,"
                " \"max_position_embeddings\": 256}");
  model_config c;
  sc_error err = {{0}};
  cr_assert_eq(model_config_load_json(p, &c, &err), SC_INVALID);
  cr_assert(strstr(err.msg, p), "%s", err.msg);
  cr_assert(strstr(err.msg, "field 'hidden_size' is missing"), "%s", err.msg);
}

Test(config_json, wrong_type_names_field_and_type) {
  const char *dir = sc_test_tmpdir("cfg");
  const char *p = path_in(dir, "config.json");
  write_text(p, "{\"hidden_size\": \"64\", \"intermediate_size\": 128, \"num_attention_heads\": 4,"
                " \"num_hidden_layers\": 2, \"vocab_size\": 100, \"rms_norm_eps\": 1e-6,"
                " \"max_position_embeddings\": 256}");
  model_config c;
  sc_error err = {{0}};
  cr_assert_eq(model_config_load_json(p, &c, &err), SC_INVALID);
  cr_assert(strstr(err.msg, "field 'hidden_size' must be an integer, got string"), "%s",
            err.msg);
}

Test(config_json, inconsistent_heads_are_refused_naming_the_field) {
  const char *dir = sc_test_tmpdir("cfg");
  const char *p = path_in(dir, "config.json");
  write_text(p, "{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 4,"
                " \"num_key_value_heads\": 3, \"num_hidden_layers\": 2, \"vocab_size\": 100,"
                " \"rms_norm_eps\": 1e-6, \"max_position_embeddings\": 256}");
  model_config c;
  sc_error err = {{0}};
  cr_assert_eq(model_config_load_json(p, &c, &err), SC_INVALID);
  cr_assert(strstr(err.msg, "num_key_value_heads"), "%s", err.msg);
  cr_assert(strstr(err.msg, p), "%s", err.msg);
}

Test(config_json, malformed_json_reports_line_and_column) {
  const char *dir = sc_test_tmpdir("cfg");
  const char *p = path_in(dir, "config.json");
  write_text(p, "{\n  \"hidden_size\": 64,\n  \"vocab_size\": ,\n}");
  model_config c;
  sc_error err = {{0}};
  cr_assert_eq(model_config_load_json(p, &c, &err), SC_INVALID);
  cr_assert(strstr(err.msg, p), "%s", err.msg);
  cr_assert(strstr(err.msg, "line 3"), "%s", err.msg);
  cr_assert(strstr(err.msg, "column"), "%s", err.msg);
}

Test(config_json, unreadable_path_is_io_error_naming_it) {
  const char *dir = sc_test_tmpdir("cfg");
  const char *p = path_in(dir, "no-such-dir/config.json");
  model_config c;
  sc_error err = {{0}};
  cr_assert_eq(model_config_load_json(p, &c, &err), SC_IO);
  cr_assert(strstr(err.msg, p), "%s", err.msg);
}

Test(config_check, zero_and_odd_fields_are_refused_naming_where) {
  model_config c = tiny_config();
  sc_error err = {{0}};
  cr_assert_eq(model_config_check(&c, "here", &err), SC_OK, "%s", err.msg);
  c.ffn_dim = 0;
  cr_assert_eq(model_config_check(&c, "here", &err), SC_INVALID);
  cr_assert(strstr(err.msg, "here: field 'intermediate_size'"), "%s", err.msg);
  c = tiny_config();
  c.head_dim = 7;
  cr_assert_eq(model_config_check(&c, "here", &err), SC_INVALID);
  cr_assert(strstr(err.msg, "head_dim"), "%s", err.msg);
  c = tiny_config();
  c.eos_token_id = c.vocab_size;
  cr_assert_eq(model_config_check(&c, "here", &err), SC_INVALID);
  cr_assert(strstr(err.msg, "eos_token_id"), "%s", err.msg);
}

Test(dtype, names_parse_back_and_aliases_are_accepted) {
  sc_dtype all[] = {SC_F32, SC_F16, SC_BF16, SC_I8, SC_I4};
  for (size_t i = 0; i < 5; i++) {
    sc_dtype t;
    cr_assert_eq(sc_dtype_parse(sc_dtype_name(all[i]), &t), SC_OK);
    cr_assert_eq(t, all[i]);
  }
  sc_dtype t;
  cr_assert_eq(sc_dtype_parse("bfloat16", &t), SC_OK);
  cr_assert_eq(t, SC_BF16);
  cr_assert_eq(sc_dtype_parse("fp16", &t), SC_OK);
  cr_assert_eq(t, SC_F16);
  cr_assert_eq(sc_dtype_parse("float32", &t), SC_OK);
  cr_assert_eq(t, SC_F32);
  cr_assert_eq(sc_dtype_parse("f64", &t), SC_INVALID);
  cr_assert_eq(sc_dtype_bytes(SC_I4), 0.5);
  cr_assert_eq(sc_dtype_bytes(SC_BF16), 2.0);
}

// --- tensor list

Test(tensor_list, shapes_and_count_match_n_params) {
  model_config c = tiny_config();
  int n = model_tensor_list(&c, NULL, 0);
  cr_assert_eq(n, 1 + 9 * c.n_layers + 1 + 1);
  model_tensor_desc *ts = calloc((size_t)n, sizeof *ts);
  cr_assert_eq(model_tensor_list(&c, ts, n), n);
  uint64_t sum = 0;
  for (int i = 0; i < n; i++)
    sum += (uint64_t)ts[i].shape[0] * (ts[i].ndim == 2 ? (uint64_t)ts[i].shape[1] : 1);
  cr_assert_eq(sum, model_config_n_params(&c));
  cr_assert_str_eq(ts[0].name, "model.embed_tokens.weight");
  cr_assert_str_eq(ts[2].name, "model.layers.0.self_attn.q_proj.weight");
  cr_assert_eq(ts[2].shape[0], 32);
  cr_assert_eq(ts[3].shape[0], 16); // k_proj: n_kv_heads * head_dim
  cr_assert_eq(ts[5].shape[0], 32); // o_proj (dim, n_heads*head_dim)
  cr_assert_str_eq(ts[9].name, "model.layers.0.mlp.down_proj.weight");
  cr_assert_eq(ts[9].shape[1], 48);
  cr_assert_str_eq(ts[n - 1].name, "lm_head.weight");
  c.tied_embeddings = true;
  cr_assert_eq(model_tensor_list(&c, NULL, 0), n - 1);
  cr_assert_eq(model_config_n_params(&c), sum - 64 * 32);
  free(ts);
}

Test(tensor_list, find_refuses_names_the_model_does_not_have) {
  model_config c = tiny_config();
  model_tensor_desc d;
  sc_error err = {{0}};
  cr_assert_eq(model_tensor_find(&c, "model.layers.1.mlp.up_proj.weight", &d, &err), SC_OK);
  cr_assert_eq(d.shape[0], 48);
  cr_assert_eq(model_tensor_find(&c, "model.layers.2.mlp.up_proj.weight", &d, &err), SC_INVALID);
  cr_assert_eq(model_tensor_find(&c, "model.layers.01.mlp.up_proj.weight", &d, &err), SC_INVALID);
  cr_assert_eq(model_tensor_find(&c, "model.layers.0.mlp.up_proj.bias", &d, &err), SC_INVALID);
  cr_assert(strstr(err.msg, "model.layers.0.mlp.up_proj.bias"), "%s", err.msg);
  c.tied_embeddings = true;
  cr_assert_eq(model_tensor_find(&c, "lm_head.weight", &d, &err), SC_INVALID);
}

// --- safetensors round trips

static void round_trip(sc_dtype t, float rel_tol) {
  const char *dir = sc_test_tmpdir("st");
  write_fixture(path_in(dir, "model.safetensors"), t);
  cr_assert_eq((8 + header_len(path_in(dir, "model.safetensors"))) % 8, 0,
               "data must start 8-byte aligned");
  sc_error err = {{0}};
  st_model *m;
  cr_assert_eq(st_open_dir(dir, &m, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(st_count(m), 2);
  const st_tensor *a = st_find(m, "a"), *b = st_find(m, "b");
  cr_assert(a && b);
  cr_assert_null(st_find(m, "c"));
  cr_assert_eq(a->dtype, t);
  cr_assert_eq(a->ndim, 2);
  cr_assert_eq(a->shape[0], 3);
  cr_assert_eq(a->shape[1], 5);
  cr_assert_eq(b->ndim, 1);
  cr_assert_eq(b->nbytes, 7 * (t == SC_F32 ? 4u : 2u));
  float va[15], vb[7];
  cr_assert_eq(st_read_f32(a, 0, 3, 0, 5, va, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(st_read_f32(b, 0, 1, 0, 7, vb, &err), SC_OK, "%s", err.msg);
  for (int i = 0; i < 15; i++) {
    float want = fixture_value(0, i);
    if (rel_tol == 0) cr_assert_eq(va[i], want, "a[%d] = %g, want %g", i, va[i], want);
    else cr_assert_leq(fabsf(va[i] - want), rel_tol * fabsf(want), "a[%d] = %g, want %g", i,
                       va[i], want);
  }
  for (int i = 0; i < 7; i++) {
    float want = fixture_value(1, i);
    if (rel_tol == 0) cr_assert_eq(vb[i], want);
    else cr_assert_leq(fabsf(vb[i] - want), rel_tol * fabsf(want));
  }
  st_close(m);
}

Test(safetensors, f32_round_trip_is_exact) { round_trip(SC_F32, 0); }
Test(safetensors, f16_round_trip_within_1e3_rel) { round_trip(SC_F16, 1e-3f); }
Test(safetensors, bf16_round_trip_within_1e2_rel) { round_trip(SC_BF16, 1e-2f); }

Test(safetensors, slice_read_equals_the_same_elements_of_a_full_read) {
  sc_dtype types[] = {SC_F32, SC_BF16};
  for (int k = 0; k < 2; k++) {
    const char *dir = sc_test_tmpdir("st");
    write_fixture(path_in(dir, "model.safetensors"), types[k]);
    sc_error err = {{0}};
    st_model *m;
    cr_assert_eq(st_open_dir(dir, &m, &err), SC_OK, "%s", err.msg);
    const st_tensor *a = st_find(m, "a"), *b = st_find(m, "b");
    float full[15], part[6], bfull[7], bpart[3];
    cr_assert_eq(st_read_f32(a, 0, 3, 0, 5, full, &err), SC_OK);
    cr_assert_eq(st_read_f32(a, 1, 2, 1, 3, part, &err), SC_OK, "%s", err.msg);
    for (int r = 0; r < 2; r++)
      for (int c = 0; c < 3; c++) cr_assert_eq(part[r * 3 + c], full[(1 + r) * 5 + 1 + c]);
    cr_assert_eq(st_read_f32(b, 0, 1, 0, 7, bfull, &err), SC_OK);
    cr_assert_eq(st_read_f32(b, 0, 1, 4, 3, bpart, &err), SC_OK);
    for (int i = 0; i < 3; i++) cr_assert_eq(bpart[i], bfull[4 + i]);
    cr_assert_eq(st_read_f32(a, 2, 2, 0, 5, part, &err), SC_INVALID);
    cr_assert(strstr(err.msg, "'a'") && strstr(err.msg, "out of bounds"), "%s", err.msg);
    cr_assert_eq(st_read_f32(a, 0, 1, 3, 3, part, &err), SC_INVALID);
    cr_assert_eq(st_read_f32(b, 1, 1, 0, 1, part, &err), SC_INVALID);
    st_close(m);
  }
}

Test(safetensors, writer_streams_chunks_across_tensors) {
  const char *dir = sc_test_tmpdir("st");
  sc_error err = {{0}};
  st_writer *w;
  cr_assert_eq(st_writer_new(path_in(dir, "model.safetensors"), &w, &err), SC_OK);
  int64_t s1[2] = {4, 4}, s2[1] = {0}, s3[1] = {4};
  cr_assert_eq(st_writer_declare(w, "x", SC_F16, 2, s1, &err), SC_OK);
  cr_assert_eq(st_writer_declare(w, "empty", SC_F32, 1, s2, &err), SC_OK);
  cr_assert_eq(st_writer_declare(w, "y", SC_F32, 1, s3, &err), SC_OK);
  cr_assert_eq(st_writer_declare(w, "x", SC_F32, 1, s3, &err), SC_INVALID); // twice
  float v[20];
  for (int i = 0; i < 20; i++) v[i] = (float)i;
  cr_assert_eq(st_writer_append(w, v, 7, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(st_writer_append(w, v + 7, 13, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(st_writer_finish(w, &err), SC_OK, "%s", err.msg);
  st_model *m;
  cr_assert_eq(st_open_dir(dir, &m, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(st_count(m), 3);
  float y[4];
  cr_assert_eq(st_read_f32(st_find(m, "y"), 0, 1, 0, 4, y, &err), SC_OK);
  for (int i = 0; i < 4; i++) cr_assert_eq(y[i], (float)(16 + i));
  cr_assert_eq(st_find(m, "empty")->nbytes, 0);
  st_close(m);
}

Test(safetensors, writer_refuses_wrong_counts_and_leaves_no_file) {
  const char *dir = sc_test_tmpdir("st");
  sc_error err = {{0}};
  st_writer *w;
  const char *p = path_in(dir, "model.safetensors");
  cr_assert_eq(st_writer_new(p, &w, &err), SC_OK);
  int64_t s[1] = {4};
  cr_assert_eq(st_writer_declare(w, "x", SC_F32, 1, s, &err), SC_OK);
  cr_assert_eq(st_writer_declare(w, "q", SC_I8, 1, s, &err), SC_INVALID);
  float v[5] = {0};
  cr_assert_eq(st_writer_write(w, v, 5, &err), SC_INVALID);
  cr_assert(strstr(err.msg, "'x' holds 4 values, got 5"), "%s", err.msg);
  cr_assert_eq(st_writer_finish(w, &err), SC_INVALID);
  struct stat sb;
  cr_assert_neq(stat(p, &sb), 0, "a failed writer must leave no file");

  cr_assert_eq(st_writer_new(p, &w, &err), SC_OK);
  cr_assert_eq(st_writer_declare(w, "x", SC_F32, 1, s, &err), SC_OK);
  cr_assert_eq(st_writer_declare(w, "y", SC_F32, 1, s, &err), SC_OK);
  cr_assert_eq(st_writer_write(w, v, 4, &err), SC_OK);
  cr_assert_eq(st_writer_finish(w, &err), SC_INVALID);
  cr_assert(strstr(err.msg, "'y'") && strstr(err.msg, "never written"), "%s", err.msg);
  cr_assert_neq(stat(p, &sb), 0);
}

// --- malformed files

Test(safetensors_refuses, truncated_file_shorter_than_the_length) {
  const char *dir = sc_test_tmpdir("st");
  const char *p = path_in(dir, "model.safetensors");
  write_fixture(p, SC_F32);
  truncate_to(p, 5);
  const char *needs[] = {p, "truncated", NULL};
  expect_refused(dir, SC_INVALID, needs);
}

Test(safetensors_refuses, header_length_past_the_end) {
  const char *dir = sc_test_tmpdir("st");
  const char *p = path_in(dir, "model.safetensors");
  write_fixture(p, SC_F32);
  uint64_t n = header_len(p);
  truncate_to(p, (long)(8 + n / 2));
  const char *needs[] = {p, "truncated", NULL};
  expect_refused(dir, SC_INVALID, needs);
}

Test(safetensors_refuses, corrupt_header) {
  const char *dir = sc_test_tmpdir("st");
  const char *p = path_in(dir, "model.safetensors");
  write_fixture(p, SC_F32);
  patch(p, 8 + 3, "\x01{", 2);
  const char *needs[] = {p, "corrupt header", NULL};
  expect_refused(dir, SC_INVALID, needs);
}

Test(safetensors_refuses, tensor_bytes_past_the_end_of_the_file) {
  const char *dir = sc_test_tmpdir("st");
  const char *p = path_in(dir, "model.safetensors");
  write_fixture(p, SC_F32);
  long size = file_size(p);
  truncate_to(p, size - 4); // the last tensor, b, loses its last element
  char bytes[128];
  snprintf(bytes, sizeof bytes, "run past the end of the file (size %ld)", size - 4);
  const char *needs[] = {p, "tensor 'b' bytes [", bytes, NULL};
  expect_refused(dir, SC_INVALID, needs);
}

Test(safetensors_refuses, nbytes_not_matching_the_shape) {
  const char *dir = sc_test_tmpdir("st");
  const char *p = path_in(dir, "model.safetensors");
  write_fixture(p, SC_F32);
  patch_header(p, "[3,5]", "[3,4]");
  const char *needs[] = {p, "tensor 'a'", "60 bytes", NULL};
  expect_refused(dir, SC_INVALID, needs);
}

Test(safetensors_refuses, unsupported_dtype_named) {
  const char *dir = sc_test_tmpdir("st");
  const char *p = path_in(dir, "model.safetensors");
  write_fixture(p, SC_F32);
  patch_header(p, "\"F32\"", "\"I64\"");
  const char *needs[] = {p, "I64", "unsupported dtype", NULL};
  expect_refused(dir, SC_INVALID, needs);
}

Test(safetensors_refuses, missing_directory_is_io_naming_it) {
  const char *dir = sc_test_tmpdir("st");
  const char *p = path_in(dir, "nope");
  const char *needs[] = {p, NULL};
  expect_refused(p, SC_IO, needs);
  const char *needs2[] = {dir, "model.safetensors", NULL};
  expect_refused(dir, SC_IO, needs2); // exists but holds no weights
}

// --- sharded index

static void write_shard(const char *path, const char *name, float v0) {
  sc_error err = {{0}};
  st_writer *w;
  cr_assert_eq(st_writer_new(path, &w, &err), SC_OK, "%s", err.msg);
  int64_t s[2] = {2, 3};
  cr_assert_eq(st_writer_declare(w, name, SC_BF16, 2, s, &err), SC_OK);
  float v[6];
  for (int i = 0; i < 6; i++) v[i] = v0 + (float)i;
  cr_assert_eq(st_writer_write(w, v, 6, &err), SC_OK);
  cr_assert_eq(st_writer_finish(w, &err), SC_OK, "%s", err.msg);
}

Test(safetensors, index_with_two_shards_finds_tensors_in_both) {
  const char *dir = sc_test_tmpdir("shards");
  write_shard(path_in(dir, "model-00001-of-00002.safetensors"), "first", 0);
  write_shard(path_in(dir, "model-00002-of-00002.safetensors"), "second", 100);
  write_text(path_in(dir, "model.safetensors.index.json"),
             "{\"metadata\": {\"total_size\": 24}, \"weight_map\": {"
             "\"first\": \"model-00001-of-00002.safetensors\","
             "\"second\": \"model-00002-of-00002.safetensors\"}}");
  sc_error err = {{0}};
  st_model *m;
  cr_assert_eq(st_open_dir(dir, &m, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(st_count(m), 2);
  const st_tensor *a = st_find(m, "first"), *b = st_find(m, "second");
  cr_assert(a && b);
  cr_assert(strstr(a->file, "00001"));
  cr_assert(strstr(b->file, "00002"));
  float v[6];
  cr_assert_eq(st_read_f32(b, 1, 1, 0, 3, v, &err), SC_OK);
  cr_assert_eq(v[0], 103.0f);
  cr_assert_eq(v[2], 105.0f);
  cr_assert_str_eq(st_tensor_at(m, 0)->name, "first");
  cr_assert_null(st_tensor_at(m, 2));
  st_close(m);
}

Test(safetensors, index_naming_a_missing_shard_or_wrong_file_is_refused) {
  const char *dir = sc_test_tmpdir("shards");
  write_shard(path_in(dir, "a.safetensors"), "first", 0);
  write_text(path_in(dir, "model.safetensors.index.json"),
             "{\"weight_map\": {\"first\": \"a.safetensors\", \"second\": \"b.safetensors\"}}");
  const char *needs[] = {"b.safetensors", NULL};
  expect_refused(dir, SC_IO, needs);
  write_text(path_in(dir, "model.safetensors.index.json"),
             "{\"weight_map\": {\"first\": \"a.safetensors\", \"second\": \"a.safetensors\"}}");
  const char *needs2[] = {"model.safetensors.index.json", "'second'", NULL};
  expect_refused(dir, SC_INVALID, needs2);
  write_text(path_in(dir, "model.safetensors.index.json"), "{\"weights\": {}}");
  const char *needs3[] = {"weight_map", NULL};
  expect_refused(dir, SC_INVALID, needs3);
}

// --- generated weights

Test(gen, slice_equals_the_same_elements_of_the_full_tensor) {
  model_config c = tiny_config();
  sc_error err = {{0}};
  const char *names[] = {"model.embed_tokens.weight", "model.layers.1.self_attn.k_proj.weight",
                         "model.layers.0.mlp.down_proj.weight", "model.norm.weight"};
  for (size_t k = 0; k < 4; k++) {
    model_tensor_desc d;
    cr_assert_eq(model_tensor_find(&c, names[k], &d, &err), SC_OK);
    int64_t rows = d.ndim == 2 ? d.shape[0] : 1, cols = d.ndim == 2 ? d.shape[1] : d.shape[0];
    float *full = malloc((size_t)(rows * cols) * sizeof *full);
    float part[64];
    cr_assert_eq(model_gen_slice(&c, 7, names[k], 0, rows, 0, cols, full, &err), SC_OK, "%s",
                 err.msg);
    int64_t r0 = rows > 1 ? 1 : 0, nr = rows > 1 ? 3 : 1, c0 = 5, nc = 4;
    cr_assert_eq(model_gen_slice(&c, 7, names[k], r0, nr, c0, nc, part, &err), SC_OK, "%s",
                 err.msg);
    for (int64_t r = 0; r < nr; r++)
      for (int64_t j = 0; j < nc; j++)
        cr_assert_eq(part[r * nc + j], full[(r0 + r) * cols + c0 + j], "%s (%lld, %lld)",
                     names[k], (long long)(r0 + r), (long long)(c0 + j));
    free(full);
  }
}

Test(gen, same_seed_same_values_other_seed_or_tensor_differs) {
  model_config c = tiny_config();
  sc_error err = {{0}};
  const char *q = "model.layers.0.self_attn.q_proj.weight";
  float a[32], b[32], d[32], e[32];
  cr_assert_eq(model_gen_slice(&c, 1, q, 3, 1, 0, 32, a, &err), SC_OK);
  cr_assert_eq(model_gen_slice(&c, 1, q, 3, 1, 0, 32, b, &err), SC_OK);
  cr_assert_eq(model_gen_slice(&c, 2, q, 3, 1, 0, 32, d, &err), SC_OK);
  cr_assert_eq(model_gen_slice(&c, 1, "model.layers.1.self_attn.q_proj.weight", 3, 1, 0, 32, e,
                               &err),
               SC_OK);
  cr_assert_eq(memcmp(a, b, sizeof a), 0);
  int diff_seed = 0, diff_name = 0;
  for (int i = 0; i < 32; i++) diff_seed += a[i] != d[i], diff_name += a[i] != e[i];
  cr_assert_gt(diff_seed, 28);
  cr_assert_gt(diff_name, 28);
}

Test(gen, values_are_finite_and_within_their_bounds) {
  model_config c = tiny_config();
  sc_error err = {{0}};
  int n = model_tensor_list(&c, NULL, 0);
  model_tensor_desc *ts = calloc((size_t)n, sizeof *ts);
  model_tensor_list(&c, ts, n);
  for (int i = 0; i < n; i++) {
    int64_t rows = ts[i].ndim == 2 ? ts[i].shape[0] : 1;
    int64_t cols = ts[i].ndim == 2 ? ts[i].shape[1] : ts[i].shape[0];
    float *v = malloc((size_t)(rows * cols) * sizeof *v);
    cr_assert_eq(model_gen_slice(&c, 42, ts[i].name, 0, rows, 0, cols, v, &err), SC_OK);
    double lo, hi, a;
    const char *nm = ts[i].name;
    if (strstr(nm, "norm")) lo = 0.9, hi = 1.1;
    else {
      if (strstr(nm, "embed")) a = 1.0;
      else if (strstr(nm, "lm_head")) a = sqrt(3.0 / c.dim);
      else if (strstr(nm, "o_proj") || strstr(nm, "down_proj"))
        a = sqrt(3.0 / (double)cols) / sqrt(2.0 * c.n_layers);
      else a = sqrt(3.0 / (double)cols);
      lo = -a, hi = a;
    }
    double sum = 0, mx = -1e9, mn = 1e9;
    for (int64_t j = 0; j < rows * cols; j++) {
      cr_assert(isfinite(v[j]));
      cr_assert(v[j] >= lo - 1e-6 && v[j] <= hi + 1e-6, "%s[%lld] = %g not in [%g, %g]", nm,
                (long long)j, v[j], lo, hi);
      sum += v[j], mx = fmax(mx, v[j]), mn = fmin(mn, v[j]);
    }
    // Spread over most of the range, centred.
    double mid = (lo + hi) / 2, half = (hi - lo) / 2;
    double sigma = half / sqrt(3.0 * (double)(rows * cols)); // of the mean
    cr_assert_lt(fabs(sum / (double)(rows * cols) - mid), 5 * sigma, "%s mean", nm);
    cr_assert_gt(mx - mn, 1.5 * half, "%s spread", nm);
    free(v);
  }
  free(ts);
  float v[4];
  cr_assert_eq(model_gen_slice(&c, 1, "model.layers.9.mlp.up_proj.weight", 0, 1, 0, 4, v, &err),
               SC_INVALID);
  cr_assert_eq(model_gen_slice(&c, 1, "model.norm.weight", 0, 1, 30, 4, v, &err), SC_INVALID);
}

Test(gen, write_produces_a_model_that_reads_back_as_generated) {
  const char *dir = sc_test_tmpdir("gen");
  char out[600];
  snprintf(out, sizeof out, "%s/a/b", dir); // parents are created
  model_config c = tiny_config();
  sc_error err = {{0}};
  cr_assert_eq(model_gen_write(&c, 9, SC_F32, out, &err), SC_OK, "%s", err.msg);
  model_config back;
  cr_assert_eq(model_config_load_json(path_in(out, "config.json"), &back, &err), SC_OK, "%s",
               err.msg);
  cr_assert_eq(back.dtype, SC_F32);
  cr_assert_eq(back.n_kv_heads, 2);
  st_model *m;
  cr_assert_eq(st_open_dir(out, &m, &err), SC_OK, "%s", err.msg);
  int n = model_tensor_list(&c, NULL, 0);
  cr_assert_eq(st_count(m), n);
  const char *name = "model.layers.1.mlp.gate_proj.weight";
  const st_tensor *t = st_find(m, name);
  cr_assert(t);
  cr_assert_eq(t->shape[0], 48);
  cr_assert_eq(t->shape[1], 32);
  float disk[48 * 32], gen[48 * 32];
  cr_assert_eq(st_read_f32(t, 0, 48, 0, 32, disk, &err), SC_OK);
  cr_assert_eq(model_gen_slice(&c, 9, name, 0, 48, 0, 32, gen, &err), SC_OK);
  cr_assert_eq(memcmp(disk, gen, sizeof disk), 0);
  st_close(m);
  cr_assert_eq(model_gen_write(&c, 9, SC_I8, out, &err), SC_INVALID);
}

Test(gen, bf16_write_of_a_tied_model_has_no_lm_head) {
  const char *dir = sc_test_tmpdir("gen");
  model_config c = tiny_config();
  c.tied_embeddings = true;
  sc_error err = {{0}};
  cr_assert_eq(model_gen_write(&c, 3, SC_BF16, dir, &err), SC_OK, "%s", err.msg);
  st_model *m;
  cr_assert_eq(st_open_dir(dir, &m, &err), SC_OK, "%s", err.msg);
  cr_assert_null(st_find(m, "lm_head.weight"));
  const st_tensor *e = st_find(m, "model.embed_tokens.weight");
  cr_assert_eq(e->dtype, SC_BF16);
  float disk[32], gen[32];
  cr_assert_eq(st_read_f32(e, 10, 1, 0, 32, disk, &err), SC_OK);
  cr_assert_eq(model_gen_slice(&c, 3, "model.embed_tokens.weight", 10, 1, 0, 32, gen, &err),
               SC_OK);
  for (int i = 0; i < 32; i++) cr_assert_eq(disk[i], sc_bf16_to_f32(sc_f32_to_bf16(gen[i])));
  st_close(m);
}

// --- half conversions

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

Test(convert, bf16_rounds_to_nearest_even) {
  cr_assert_eq(sc_f32_to_bf16(1.0f), 0x3f80);
  cr_assert_eq(sc_f32_to_bf16(from_bits(0x3f808000)), 0x3f80); // tie, even stays
  cr_assert_eq(sc_f32_to_bf16(from_bits(0x3f818000)), 0x3f82); // tie, odd rounds up
  cr_assert_eq(sc_f32_to_bf16(from_bits(0x3f808001)), 0x3f81); // above the tie
  cr_assert_eq(sc_f32_to_bf16(from_bits(0x3f807fff)), 0x3f80); // below the tie
  cr_assert_eq(sc_f32_to_bf16(-2.0f), 0xc000);
  cr_assert_eq(sc_f32_to_bf16(from_bits(0x7f7fffff)), 0x7f80); // FLT_MAX rounds to inf
  cr_assert_eq(sc_bf16_to_f32(0x3f80), 1.0f);
  cr_assert_eq(sc_bf16_to_f32(0x0001), from_bits(0x00010000)); // subnormal
}

Test(convert, bf16_keeps_inf_and_nan) {
  cr_assert_eq(sc_f32_to_bf16(INFINITY), 0x7f80);
  cr_assert_eq(sc_f32_to_bf16(-INFINITY), 0xff80);
  cr_assert(isnan(sc_bf16_to_f32(sc_f32_to_bf16(NAN))));
  // A NaN whose payload sits only in the dropped bits must not become inf.
  cr_assert(isnan(sc_bf16_to_f32(sc_f32_to_bf16(from_bits(0x7f800001)))));
  cr_assert(isinf(sc_bf16_to_f32(0x7f80)));
}

Test(convert, f16_rounds_to_nearest_even) {
  cr_assert_eq(sc_f32_to_f16(1.0f), 0x3c00);
  cr_assert_eq(sc_f32_to_f16(-2.0f), 0xc000);
  cr_assert_eq(sc_f32_to_f16(65504.0f), 0x7bff);
  cr_assert_eq(sc_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);           // tie, even stays
  cr_assert_eq(sc_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);       // tie, odd rounds up
  cr_assert_eq(sc_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01); // above the tie
  cr_assert_eq(sc_f32_to_f16(65519.0f), 0x7bff);
  cr_assert_eq(sc_f32_to_f16(65520.0f), 0x7c00); // tie with the odd max: inf
  cr_assert_eq(sc_f32_to_f16(1e6f), 0x7c00);
  cr_assert_eq(sc_f16_to_f32(0x3555), from_bits(0x3eaaa000)); // 0.333251953125
}

Test(convert, f16_subnormals_round_trip_and_round) {
  cr_assert_eq(sc_f32_to_f16(0x1p-24f), 0x0001);       // smallest subnormal
  cr_assert_eq(sc_f32_to_f16(0x1p-25f), 0x0000);       // tie with zero: even
  cr_assert_eq(sc_f32_to_f16(0x1.8p-24f), 0x0002);     // 1.5 ulp tie: even (2)
  cr_assert_eq(sc_f32_to_f16(0x1.0p-25f * 1.01f), 0x0001);
  cr_assert_eq(sc_f32_to_f16(0x1.ff8p-15f), 0x03ff);   // largest subnormal
  cr_assert_eq(sc_f32_to_f16(0x1.ffcp-15f), 0x0400);   // tie: rounds up into the smallest normal
  cr_assert_eq(sc_f32_to_f16(-0x1p-20f), 0x8010);
  cr_assert_eq(sc_f32_to_f16(1e-10f), 0x0000);
  cr_assert_eq(sc_f32_to_f16(-0.0f), 0x8000);
  for (uint32_t h = 1; h < 0x0400; h++) {
    float f = sc_f16_to_f32((uint16_t)h);
    cr_assert_eq(f, (float)h * 0x1p-24f);
    cr_assert_eq(sc_f32_to_f16(f), h);
  }
}

Test(convert, f16_every_finite_value_round_trips) {
  for (uint32_t h = 0; h < 0x10000; h++) {
    if ((h & 0x7c00) == 0x7c00) continue; // inf / NaN
    cr_assert_eq(sc_f32_to_f16(sc_f16_to_f32((uint16_t)h)), h, "h = 0x%04x", h);
  }
}

Test(convert, f16_keeps_inf_and_nan) {
  cr_assert_eq(sc_f32_to_f16(INFINITY), 0x7c00);
  cr_assert_eq(sc_f32_to_f16(-INFINITY), 0xfc00);
  cr_assert(isinf(sc_f16_to_f32(0x7c00)) && sc_f16_to_f32(0xfc00) < 0);
  cr_assert(isnan(sc_f16_to_f32(sc_f32_to_f16(NAN))));
  cr_assert(isnan(sc_f16_to_f32(sc_f32_to_f16(from_bits(0x7f800001)))));
  cr_assert(isnan(sc_f16_to_f32(0x7e00)));
}

// --- the `shardcheck model` command (needs the binary built)

static char *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  cr_assert(f, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)size + 1);
  cr_assert_eq(fread(b, 1, (size_t)size, f), (size_t)size);
  fclose(f);
  *n = (size_t)size;
  return b;
}

Test(model_cli, gen_then_info_checks_every_tensor) {
  const char *dir = sc_test_tmpdir("cli");
  char args[1024], out[8192];
  snprintf(args, sizeof args, "model gen --preset llama-tiny --seed 5 --dtype bf16 --out '%s/m'",
           dir);
  cr_assert_eq(sc_test_run_cli(args, out, sizeof out), 0, "%s", out);
  cr_assert(strstr(out, "llama-tiny") && strstr(out, "bf16"), "%s", out);
  snprintf(args, sizeof args, "model info '%s/m'", dir);
  cr_assert_eq(sc_test_run_cli(args, out, sizeof out), 0, "%s", out);
  cr_assert(strstr(out, "num_key_value_heads      2"), "%s", out);
  cr_assert(strstr(out, "all 75 expected present"), "%s", out);
}

Test(model_cli, same_seed_writes_identical_bytes) {
  const char *dir = sc_test_tmpdir("cli");
  char args[1024], out[4096];
  const char *sub[] = {"a", "b", "c"};
  const char *seed[] = {"11", "11", "12"};
  for (int i = 0; i < 3; i++) {
    snprintf(args, sizeof args, "model gen --preset llama-tiny --seed %s --out '%s/%s'", seed[i],
             dir, sub[i]);
    cr_assert_eq(sc_test_run_cli(args, out, sizeof out), 0, "%s", out);
  }
  char p[3][700];
  size_t n[3];
  char *b[3];
  for (int i = 0; i < 3; i++) {
    snprintf(p[i], sizeof p[i], "%s/%s/model.safetensors", dir, sub[i]);
    b[i] = read_all(p[i], &n[i]);
  }
  cr_assert_eq(n[0], n[1]);
  cr_assert_eq(memcmp(b[0], b[1], n[0]), 0, "same seed, different bytes");
  cr_assert_eq(n[0], n[2]);
  cr_assert_neq(memcmp(b[0], b[2], n[0]), 0, "different seed, same bytes");
  for (int i = 0; i < 3; i++) free(b[i]);
}

Test(model_cli, bad_usage_exits_2_with_a_message) {
  char out[4096];
  const char *cases[][2] = {
      {"model", "usage"},
      {"model frobnicate", "unknown subcommand 'frobnicate'"},
      {"model gen --preset llama-tiny --out /tmp/x", "--seed is required"},
      {"model gen --preset llama-tiny --seed -3 --out /tmp/x", "--seed must be an unsigned"},
      {"model gen --preset llama-tiny --seed 1 --out /tmp/x --dtype int8", "--dtype must be"},
      {"model gen --preset no-such-preset --seed 1 --out /tmp/x", "no-such-preset"},
      {"model gen --frob", "unknown option '--frob'"},
      {"model gen --preset", "missing the value of '--preset'"},
      {"model info", "expected DIR or PRESET"},
      {"model info /no/such/dir", "/no/such/dir"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cr_assert_eq(sc_test_run_cli(cases[i][0], out, sizeof out), 2, "`%s`: %s", cases[i][0], out);
    cr_assert(strstr(out, cases[i][1]), "`%s`: '%s' not in: %s", cases[i][0], cases[i][1], out);
  }
}

Test(model_cli, help_exits_0_and_names_every_option) {
  char out[8192];
  cr_assert_eq(sc_test_run_cli("model --help", out, sizeof out), 0, "%s", out);
  cr_assert(strstr(out, "gen") && strstr(out, "info") && strstr(out, "list"), "%s", out);
  cr_assert_eq(sc_test_run_cli("model gen --help", out, sizeof out), 0, "%s", out);
  const char *opts[] = {"--preset", "--seed", "--out", "--dtype", "llama-tiny"};
  for (size_t i = 0; i < 5; i++) cr_assert(strstr(out, opts[i]), "%s not in: %s", opts[i], out);
  cr_assert_eq(sc_test_run_cli("model info --help", out, sizeof out), 0, "%s", out);
  cr_assert_eq(sc_test_run_cli("model list", out, sizeof out), 0, "%s", out);
  cr_assert(strstr(out, "llama-tiny\n"), "%s", out);
}
