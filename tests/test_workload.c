// Tests for the workload generator (scenarios/workload.c): determinism of requests and gaps,
// class weights, the length distributions and their clamping to the model's context, prompt
// token ids, the JSONL dataset (both line forms, cycling, errors with FILE:LINE and key), and
// the arrival processes (poisson, constant, gamma). Scenarios are built by hand on the
// llama-tiny preset (context 512, vocab 512, BOS 1); datasets are written to temporary
// directories. Statistical checks use fixed seeds and tolerances of several standard errors.
//
// Not here: parsing the workload block from YAML (tests of scenarios/scenario_workload.c), how the
// runner uses requests and gaps (tests of the runner).
#include <criterion/criterion.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/presets.h"
#include "engine/model.h"
#include "engine/tokenizer.h"
#include "scenarios/workload.h"
#include "tests/helpers.h"

// --- fixtures

enum { CTX = 512, VOCAB = 512 }; // llama-tiny

static scenario *tiny_scenario(void) {
  scenario *s = calloc(1, sizeof *s);
  cr_assert(s);
  sc_error err = {{0}};
  cr_assert_eq(model_preset_load("llama-tiny", &s->model.config, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(s->model.config.max_seq_len, CTX);
  cr_assert_eq(s->model.config.vocab_size, VOCAB);
  snprintf(s->dir, sizeof s->dir, ".");
  return s;
}

static scn_dist fixed(double a) { return (scn_dist){SCN_DIST_FIXED, a, 0}; }
static scn_dist dist(scn_dist_kind k, double a, double b) { return (scn_dist){k, a, b}; }

static void add_class(scenario *s, const char *name, double weight, scn_dist in, scn_dist out) {
  scn_class *c = &s->workload.classes[s->workload.n_classes++];
  snprintf(c->name, sizeof c->name, "%s", name);
  c->weight = weight;
  c->input = in;
  c->output = out;
}

static int add_rate_phase(scenario *s, double rate, scn_arrival arrival, double burstiness) {
  int i = s->workload.n_phases++;
  scn_phase *p = &s->workload.phases[i];
  p->kind = SCN_PHASE_RATE;
  snprintf(p->name, sizeof p->name, "rate-%g", rate);
  p->rate = rate;
  p->arrival = arrival;
  p->burstiness = burstiness;
  p->requests = 1000;
  return i;
}

static workload *make(const scenario *s, uint64_t seed) {
  workload *w = NULL;
  sc_error err = {{0}};
  sc_status st = workload_new(s, seed, &w, &err);
  cr_assert_eq(st, SC_OK, "workload_new: %s", err.msg);
  cr_assert(w);
  return w;
}

// FNV-1a over a request's lengths, class and tokens: a fingerprint to compare requests.
static uint64_t fingerprint(const wl_request *r) {
  uint64_t h = 1469598103934665603ull;
  int32_t head[3] = {r->n_prompt, r->max_tokens, r->class_idx};
  const unsigned char *p = (const unsigned char *)head;
  for (size_t i = 0; i < sizeof head; i++) h = (h ^ p[i]) * 1099511628211ull;
  p = (const unsigned char *)r->prompt;
  for (size_t i = 0; i < (size_t)r->n_prompt * sizeof *r->prompt; i++)
    h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static scenario *mixed_scenario(void) {
  scenario *s = tiny_scenario();
  add_class(s, "short", 3, dist(SCN_DIST_UNIFORM, 8, 64), fixed(16));
  add_class(s, "chat", 2, dist(SCN_DIST_NORMAL, 120, 30), dist(SCN_DIST_LOGNORMAL, 40, 0.5));
  add_class(s, "long", 1, fixed(300), dist(SCN_DIST_UNIFORM, 50, 150));
  return s;
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

// --- determinism

Test(workload, same_seed_and_index_give_same_request_across_generators_and_call_orders) {
  scenario *s = mixed_scenario();
  enum { N = 600 };
  static uint64_t fwd[N];
  workload *a = make(s, 42), *b = make(s, 42);
  wl_request r;
  for (int i = 0; i < N; i++) {
    workload_request(a, (uint64_t)i, &r);
    fwd[i] = fingerprint(&r);
  }
  // b: backwards, then a scattered order with repeats, interleaved with calls on a.
  for (int i = N - 1; i >= 0; i--) {
    workload_request(b, (uint64_t)i, &r);
    cr_assert_eq(fingerprint(&r), fwd[i], "request %d differs when made backwards", i);
  }
  for (int k = 0; k < 2 * N; k++) {
    int i = (k * 7919) % N;
    workload_request(a, (uint64_t)((i * 31) % N), &r); // moves a's buffer, not b's requests
    workload_request(b, (uint64_t)i, &r);
    cr_assert_eq(fingerprint(&r), fwd[i], "request %d differs on repeat %d", i, k);
  }
  // more than one class and more than one length were drawn: the comparison saw variety
  int classes = 0, lengths = 0, prev_len = -1;
  for (int i = 0; i < 50; i++) {
    workload_request(a, (uint64_t)i, &r);
    classes |= 1 << r.class_idx;
    if (r.n_prompt != prev_len) lengths++;
    prev_len = r.n_prompt;
  }
  cr_assert_eq(classes, 7);
  cr_assert_gt(lengths, 10);
  workload_free(a);
  workload_free(b);
  free(s);
}

Test(workload, different_seeds_give_different_requests) {
  scenario *s = mixed_scenario();
  workload *a = make(s, 1), *b = make(s, 2);
  wl_request r;
  int same_fp = 0, same_class = 0;
  for (int i = 0; i < 500; i++) {
    workload_request(a, (uint64_t)i, &r);
    uint64_t fa = fingerprint(&r);
    int ca = r.class_idx;
    workload_request(b, (uint64_t)i, &r);
    same_fp += fingerprint(&r) == fa;
    same_class += r.class_idx == ca;
  }
  cr_assert_eq(same_fp, 0, "%d of 500 requests are identical across seeds", same_fp);
  // two independent class draws agree with probability 0.5^2 + 0.333^2 + 0.167^2 = 0.389
  cr_assert(same_class > 140 && same_class < 250, "class agreement %d / 500", same_class);
  workload_free(a);
  workload_free(b);
  free(s);
}

Test(workload, request_index_and_seed_are_not_interchangeable) {
  scenario *s = mixed_scenario();
  workload *a = make(s, 5), *b = make(s, 6);
  wl_request r;
  workload_request(a, 6, &r);
  uint64_t a6 = fingerprint(&r);
  workload_request(b, 5, &r);
  cr_assert_neq(fingerprint(&r), a6);
  workload_request(a, 0, &r);
  uint64_t a0 = fingerprint(&r);
  workload_request(a, 1, &r);
  cr_assert_neq(fingerprint(&r), a0);
  workload_free(a);
  workload_free(b);
  free(s);
}

// --- classes and lengths

Test(workload, class_frequencies_are_within_2_percent_of_weights_over_20000_draws) {
  scenario *s = tiny_scenario();
  const double weight[4] = {0.5, 0.25, 0.15, 0.10};
  add_class(s, "a", 5, fixed(10), fixed(10));
  add_class(s, "b", 2.5, fixed(20), fixed(10));
  add_class(s, "c", 1.5, fixed(30), fixed(10));
  add_class(s, "d", 1, fixed(40), fixed(10));
  workload *w = make(s, 2024);
  cr_assert_eq(workload_n_classes(w), 4);
  cr_assert_str_eq(workload_class_name(w, 2), "c");
  cr_assert_null(workload_class_name(w, 4));
  int count[4] = {0};
  wl_request r;
  for (int i = 0; i < 20000; i++) {
    workload_request(w, (uint64_t)i, &r);
    cr_assert(r.class_idx >= 0 && r.class_idx < 4);
    cr_assert_eq(r.n_prompt, 10 * (r.class_idx + 1), "lengths come from the drawn class");
    count[r.class_idx]++;
  }
  for (int c = 0; c < 4; c++) {
    double f = count[c] / 20000.0;
    cr_assert(fabs(f - weight[c]) < 0.02, "class %d: frequency %.4f, weight %.2f", c, f,
              weight[c]);
  }
  workload_free(w);
  free(s);
}

Test(workload, unnamed_class_is_called_class_and_its_index) {
  scenario *s = tiny_scenario();
  add_class(s, "", 1, fixed(10), fixed(10));
  add_class(s, "", 1, fixed(10), fixed(10));
  workload *w = make(s, 0);
  cr_assert_str_eq(workload_class_name(w, 1), "class1");
  workload_free(w);
  free(s);
}

Test(workload, uniform_lengths_hit_both_bounds_and_never_leave_them) {
  scenario *s = tiny_scenario();
  add_class(s, "u", 1, dist(SCN_DIST_UNIFORM, 10, 20), dist(SCN_DIST_UNIFORM, 1, 3));
  workload *w = make(s, 9);
  int seen_in[21] = {0}, seen_out[4] = {0};
  wl_request r;
  for (int i = 0; i < 5000; i++) {
    workload_request(w, (uint64_t)i, &r);
    cr_assert(r.n_prompt >= 10 && r.n_prompt <= 20, "input %d outside [10, 20]", r.n_prompt);
    cr_assert(r.max_tokens >= 1 && r.max_tokens <= 3, "output %d outside [1, 3]", r.max_tokens);
    seen_in[r.n_prompt]++;
    seen_out[r.max_tokens]++;
  }
  for (int v = 10; v <= 20; v++) // expected 455 each
    cr_assert_gt(seen_in[v], 300, "input %d drawn %d times", v, seen_in[v]);
  for (int v = 1; v <= 3; v++) cr_assert_gt(seen_out[v], 1500, "output %d", v); // 1667 each
  workload_free(w);
  free(s);
}

Test(workload, normal_lengths_have_the_mean_and_stddev_asked_for) {
  scenario *s = tiny_scenario();
  add_class(s, "n", 1, dist(SCN_DIST_NORMAL, 200, 30), fixed(8));
  workload *w = make(s, 31337);
  double sum = 0, sum2 = 0;
  const int n = 20000;
  wl_request r;
  for (int i = 0; i < n; i++) {
    workload_request(w, (uint64_t)i, &r);
    sum += r.n_prompt;
    sum2 += (double)r.n_prompt * r.n_prompt;
  }
  double mean = sum / n, sd = sqrt(sum2 / n - mean * mean);
  cr_assert(fabs(mean - 200) < 1.5, "mean %.2f, want 200 (standard error 0.21)", mean);
  cr_assert(fabs(sd - 30) < 1.5, "stddev %.2f, want 30", sd);
  workload_free(w);
  free(s);
}

Test(workload, lognormal_lengths_have_the_median_and_sigma_asked_for) {
  scenario *s = tiny_scenario();
  add_class(s, "ln", 1, fixed(16), dist(SCN_DIST_LOGNORMAL, 100, 0.5));
  workload *w = make(s, 77);
  enum { N = 20001 };
  static int v[N];
  wl_request r;
  for (int i = 0; i < N; i++) {
    workload_request(w, (uint64_t)i, &r);
    v[i] = r.max_tokens;
  }
  qsort(v, N, sizeof *v, cmp_int);
  int median = v[N / 2], p84 = v[(int)(N * 0.8413)];
  cr_assert(abs(median - 100) <= 3, "median %d, want 100", median);
  cr_assert(abs(p84 - 165) <= 6, "84th percentile %d, want 100 e^0.5 = 164.9", p84);
  workload_free(w);
  free(s);
}

Test(workload, long_input_is_clamped_to_context_minus_one_and_output_to_the_rest) {
  scenario *s = tiny_scenario();
  add_class(s, "huge", 1, fixed(10000), fixed(256));
  add_class(s, "fits", 1, fixed(400), fixed(300));
  add_class(s, "wild", 1, dist(SCN_DIST_NORMAL, 300, 1000), dist(SCN_DIST_LOGNORMAL, 300, 3));
  workload *w = make(s, 3);
  bool seen[3] = {false}, low = false, high = false;
  wl_request r;
  for (int i = 0; i < 3000; i++) {
    workload_request(w, (uint64_t)i, &r);
    cr_assert(r.n_prompt >= 1 && r.max_tokens >= 1);
    cr_assert_leq(r.n_prompt + r.max_tokens, CTX, "request %d: %d + %d > %d", i, r.n_prompt,
                  r.max_tokens, CTX);
    seen[r.class_idx] = true;
    if (r.class_idx == 0) {
      cr_assert_eq(r.n_prompt, CTX - 1);
      cr_assert_eq(r.max_tokens, 1);
    } else if (r.class_idx == 1) {
      cr_assert_eq(r.n_prompt, 400);
      cr_assert_eq(r.max_tokens, CTX - 400);
    } else {
      low |= r.n_prompt == 1;           // draws below 1 clamp up
      high |= r.n_prompt == CTX - 1;    // draws past the context clamp down
    }
  }
  cr_assert(seen[0] && seen[1] && seen[2]);
  cr_assert(low && high, "the normal class reached both clamps: low %d high %d", low, high);
  workload_free(w);
  free(s);
}

Test(workload, prompt_token_ids_cover_3_to_vocab_minus_one_and_nothing_else) {
  scenario *s = tiny_scenario();
  add_class(s, "t", 1, dist(SCN_DIST_UNIFORM, 1, 301), fixed(4));
  workload *w = make(s, 11);
  static int seen[VOCAB];
  long n_tokens = 0;
  wl_request r;
  for (int i = 0; i < 2000; i++) {
    workload_request(w, (uint64_t)i, &r);
    for (int j = 0; j < r.n_prompt; j++) {
      int32_t id = r.prompt[j];
      cr_assert(id >= 3 && id < VOCAB, "request %d token %d: id %d", i, j, id);
      seen[id]++;
    }
    n_tokens += r.n_prompt;
  }
  // ~300,000 tokens over 509 ids: every id appears (expected ~590 times each)
  cr_assert_gt(n_tokens, 250000);
  for (int id = 3; id < VOCAB; id++)
    cr_assert_gt(seen[id], 400, "id %d seen %d times", id, seen[id]);
  workload_free(w);
  free(s);
}

Test(workload, bad_class_parameters_are_refused) {
  struct {
    double weight;
    scn_dist in;
    const char *want;
  } cases[] = {
      {0, {SCN_DIST_FIXED, 10, 0}, "workload: class 'x': weight must be > 0, got 0"},
      {1, {SCN_DIST_UNIFORM, 20, 10}, "workload: class 'x': input: uniform needs a <= b, got "
                                      "a=20 b=10"},
      {1, {SCN_DIST_LOGNORMAL, 0, 1}, "workload: class 'x': input: lognormal needs median a > 0 "
                                      "and sigma b >= 0, got a=0 b=1"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    scenario *s = tiny_scenario();
    add_class(s, "x", cases[i].weight, cases[i].in, fixed(1));
    workload *w = (workload *)1;
    sc_error err = {{0}};
    cr_assert_eq(workload_new(s, 0, &w, &err), SC_INVALID, "case %zu", i);
    cr_assert_null(w);
    cr_assert_str_eq(err.msg, cases[i].want);
    free(s);
  }
  scenario *s = tiny_scenario(); // neither classes nor a dataset
  workload *w = NULL;
  sc_error err = {{0}};
  cr_assert_eq(workload_new(s, 0, &w, &err), SC_INVALID);
  cr_assert(strstr(err.msg, "prompt classes or a dataset"), "%s", err.msg);
  free(s);
}

// --- dataset

static scenario *dataset_scenario(const char *path) {
  scenario *s = tiny_scenario();
  snprintf(s->workload.dataset, sizeof s->workload.dataset, "%s", path);
  return s;
}

Test(workload, dataset_reads_both_line_forms_in_order_and_cycles) {
  const char *path = sc_test_write_tmp("wl-ds", "set.jsonl",
                                       "{\"prompt_tokens\": 5, \"output_tokens\": 7}\n"
                                       "\n"
                                       "   \r\n"
                                       "{\"output_tokens\": 3, \"prompt\": \"hi\"}\r\n"
                                       "{\"prompt_tokens\": 9}"); // no final newline
  scenario *s = dataset_scenario(path);
  add_class(s, "ignored", 1, fixed(50), fixed(50)); // a dataset takes the place of classes
  workload *w = make(s, 4);
  cr_assert_eq(workload_n_classes(w), 1);
  cr_assert_str_eq(workload_class_name(w, 0), "dataset");
  wl_request r;
  for (uint64_t cycle = 0; cycle < 3; cycle++) {
    workload_request(w, 3 * cycle + 0, &r);
    cr_assert_eq(r.n_prompt, 5);
    cr_assert_eq(r.max_tokens, 7);
    cr_assert_eq(r.class_idx, 0);
    for (int j = 0; j < 5; j++) cr_assert(r.prompt[j] >= 3 && r.prompt[j] < VOCAB);
    workload_request(w, 3 * cycle + 1, &r);
    cr_assert_eq(r.n_prompt, 3, "BOS + 2 bytes");
    cr_assert_eq(r.max_tokens, 3);
    cr_assert_eq(r.prompt[0], 1);
    cr_assert_eq(r.prompt[1], 'h' + 3);
    cr_assert_eq(r.prompt[2], 'i' + 3);
    workload_request(w, 3 * cycle + 2, &r);
    cr_assert_eq(r.n_prompt, 9);
    cr_assert_eq(r.max_tokens, 128, "output_tokens defaults to 128");
  }
  // the same line on another cycle: same lengths, tokens drawn for the request index
  workload_request(w, 0, &r);
  uint64_t first = fingerprint(&r);
  workload_request(w, 3, &r);
  cr_assert_neq(fingerprint(&r), first);
  workload_free(w);
  free(s);
}

Test(workload, dataset_path_is_opened_as_the_parser_resolved_it) {
  const char *path = sc_test_write_tmp("wl-rel", "rel.jsonl", "{\"prompt_tokens\": 17}\n");
  scenario *s = tiny_scenario();
  snprintf(s->dir, sizeof s->dir, "/nonexistent-scenario-dir"); // not joined again
  snprintf(s->workload.dataset, sizeof s->workload.dataset, "%s", path);
  workload *w = make(s, 0);
  wl_request r;
  workload_request(w, 0, &r);
  cr_assert_eq(r.n_prompt, 17);
  workload_free(w);
  free(s);
}

Test(workload, dataset_lengths_are_clamped_to_the_context) {
  char text[2048];
  int n = snprintf(text, sizeof text, "{\"prompt_tokens\": 5000, \"output_tokens\": 64}\n"
                                      "{\"prompt_tokens\": 500, \"output_tokens\": 64}\n"
                                      "{\"prompt\": \"");
  for (int i = 0; i < 600; i++) text[n++] = 'a' + i % 26;
  snprintf(text + n, sizeof text - (size_t)n, "\", \"output_tokens\": 9}\n");
  scenario *s = dataset_scenario(sc_test_write_tmp("wl-clamp", "long.jsonl", text));
  workload *w = make(s, 0);
  wl_request r;
  workload_request(w, 0, &r);
  cr_assert_eq(r.n_prompt, CTX - 1);
  cr_assert_eq(r.max_tokens, 1);
  workload_request(w, 1, &r);
  cr_assert_eq(r.n_prompt, 500);
  cr_assert_eq(r.max_tokens, CTX - 500);
  workload_request(w, 2, &r);
  cr_assert_eq(r.n_prompt, CTX - 1, "600 bytes + BOS keep their first %d tokens", CTX - 1);
  cr_assert_eq(r.max_tokens, 1);
  cr_assert_eq(r.prompt[1], 'a' + 3);
  cr_assert_eq(r.prompt[CTX - 2], 'a' + (CTX - 3) % 26 + 3);
  workload_free(w);
  free(s);
}

Test(workload, dataset_bad_lines_name_file_line_and_key) {
  struct {
    const char *text;
    const char *want; // after "PATH:"
  } cases[] = {
      {"{\"prompt_tokens\": 5}\n\n{\"prompt_tokens\": \"5\"}\n",
       "3: key 'prompt_tokens': expected an integer >= 1, got a string"},
      {"{\"prompt_tokens\": 5, \"max_tokens\": 3}\n",
       "1: key 'max_tokens': expected one of prompt_tokens, prompt, output_tokens, turns"},
      {"{\"prompt_tokens\": 5}\n{\"prompt_tokens\": 4, \"output_tokens\": 0}\n",
       "2: key 'output_tokens': expected an integer >= 1, got 0"},
      {"{\"prompt_tokens\": 2.5}\n",
       "1: key 'prompt_tokens': expected an integer >= 1, got a real"},
      {"{\"prompt\": 12}\n", "1: key 'prompt': expected a non-empty string, got an integer"},
      {"{\"prompt\": \"\"}\n", "1: key 'prompt': expected a non-empty string, got an empty string"},
      {"{\"prompt\": \"x\", \"prompt_tokens\": 3}\n",
       "1: key 'prompt': expected either 'prompt' or 'prompt_tokens', got both"},
      {"\n\n\n\n{\"output_tokens\": 3}\n",
       "5: key 'prompt_tokens': expected an integer >= 1 (or key 'prompt' with text), got neither"},
      {"[1, 2]\n", "1: expected one JSON object, got an array"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *path = sc_test_write_tmp("wl-bad", "bad.jsonl", cases[i].text);
    scenario *s = dataset_scenario(path);
    workload *w = (workload *)1;
    sc_error err = {{0}};
    cr_assert_eq(workload_new(s, 0, &w, &err), SC_INVALID, "case %zu: %s", i, err.msg);
    cr_assert_null(w);
    char want[1400];
    snprintf(want, sizeof want, "%s:%s", path, cases[i].want);
    cr_assert_str_eq(err.msg, want, "case %zu", i);
    free(s);
  }
}

Test(workload, dataset_malformed_json_names_file_and_line) {
  const char *path = sc_test_write_tmp("wl-json", "broken.jsonl",
                                       "{\"prompt_tokens\": 5}\n{\"prompt_tokens\": 5,}\n");
  scenario *s = dataset_scenario(path);
  workload *w = NULL;
  sc_error err = {{0}};
  cr_assert_eq(workload_new(s, 0, &w, &err), SC_INVALID);
  char want[1200];
  snprintf(want, sizeof want, "%s:2: expected one JSON object, got malformed JSON", path);
  cr_assert(!strncmp(err.msg, want, strlen(want)), "%s", err.msg);
  // a duplicate key is malformed too
  path = sc_test_write_tmp("wl-dup", "dup.jsonl", "{\"prompt_tokens\": 5, \"prompt_tokens\": 6}\n");
  snprintf(s->workload.dataset, sizeof s->workload.dataset, "%s", path);
  cr_assert_eq(workload_new(s, 0, &w, &err), SC_INVALID);
  snprintf(want, sizeof want, "%s:1: ", path);
  cr_assert(!strncmp(err.msg, want, strlen(want)) && strstr(err.msg, "duplicate"), "%s",
            err.msg);
  free(s);
}

Test(workload, empty_dataset_is_invalid) {
  const char *path = sc_test_write_tmp("wl-empty", "empty.jsonl", "\n  \n\t\n");
  scenario *s = dataset_scenario(path);
  workload *w = NULL;
  sc_error err = {{0}};
  cr_assert_eq(workload_new(s, 0, &w, &err), SC_INVALID);
  cr_assert_null(w);
  char want[1200];
  snprintf(want, sizeof want, "%s: dataset has no requests: expected one JSON object per line",
           path);
  cr_assert_str_eq(err.msg, want);
  free(s);
}

Test(workload, missing_dataset_is_an_io_error_naming_the_path) {
  const char *dir = sc_test_tmpdir("wl-missing");
  cr_assert(dir);
  scenario *s = tiny_scenario();
  snprintf(s->workload.dataset, sizeof s->workload.dataset, "%s/nope.jsonl", dir);
  workload *w = (workload *)1;
  sc_error err = {{0}};
  cr_assert_eq(workload_new(s, 0, &w, &err), SC_IO);
  cr_assert_null(w);
  char want[1200];
  snprintf(want, sizeof want, "%s/nope.jsonl: cannot read dataset: ", dir);
  cr_assert(!strncmp(err.msg, want, strlen(want)), "%s", err.msg);
  // a directory opens but cannot be read
  snprintf(s->workload.dataset, sizeof s->workload.dataset, "%s", dir);
  cr_assert_eq(workload_new(s, 0, &w, &err), SC_IO, "%s", err.msg);
  free(s);
}

// --- arrivals

// Mean and squared coefficient of variation of n gaps of phase p, in seconds.
static void gap_stats(const workload *w, int p, int n, double *mean, double *cv2) {
  double sum = 0, sum2 = 0;
  for (int j = 0; j < n; j++) {
    double g = (double)workload_gap_ns(w, p, (uint64_t)j) * 1e-9;
    sum += g;
    sum2 += g * g;
  }
  *mean = sum / n;
  *cv2 = (sum2 / n - *mean * *mean) / (*mean * *mean);
}

Test(workload, poisson_gaps_have_mean_one_over_rate_and_cv_one) {
  scenario *s = tiny_scenario();
  add_class(s, "c", 1, fixed(8), fixed(8));
  int p = add_rate_phase(s, 10, SCN_ARRIVAL_POISSON, 1);
  workload *w = make(s, 123);
  double mean, cv2;
  gap_stats(w, p, 40000, &mean, &cv2);
  cr_assert(fabs(mean - 0.1) < 0.1 * 0.03, "mean gap %.5f s, want 0.1", mean);
  cr_assert(fabs(sqrt(cv2) - 1) < 0.03, "CV %.4f, want 1", sqrt(cv2));
  cr_assert_gt(workload_gap_ns(w, p, 0), 0, "the first poisson gap is drawn too");
  workload_free(w);
  free(s);
}

Test(workload, constant_gaps_are_exact_and_start_at_zero) {
  scenario *s = tiny_scenario();
  add_class(s, "c", 1, fixed(8), fixed(8));
  int p8 = add_rate_phase(s, 8, SCN_ARRIVAL_CONSTANT, 1);
  int p3 = add_rate_phase(s, 3, SCN_ARRIVAL_CONSTANT, 1);
  workload *w = make(s, 123);
  cr_assert_eq(workload_gap_ns(w, p8, 0), 0);
  for (uint64_t j = 1; j < 1000; j++) cr_assert_eq(workload_gap_ns(w, p8, j), 125000000ull);
  // 1/3 s does not divide into ns: gaps round, arrival times do not drift
  cr_assert_eq(workload_gap_ns(w, p3, 0), 0);
  uint64_t t = 0;
  for (uint64_t j = 1; j <= 3000; j++) {
    uint64_t g = workload_gap_ns(w, p3, j);
    cr_assert(g == 333333333ull || g == 333333334ull, "gap %" PRIu64 " ns", g);
    t += g;
  }
  cr_assert_eq(t, 1000000000000ull, "3000 arrivals at 3/s end at exactly 1000 s");
  workload_free(w);
  free(s);
}

Test(workload, gamma_gaps_have_mean_one_over_rate_and_cv2_one_over_burstiness) {
  scenario *s = tiny_scenario();
  add_class(s, "c", 1, fixed(8), fixed(8));
  struct {
    double k, tol_cv2;
  } cases[] = {{0.25, 0.10}, {1, 0.05}, {4, 0.05}};
  for (size_t i = 0; i < 3; i++) add_rate_phase(s, 5, SCN_ARRIVAL_GAMMA, cases[i].k);
  workload *w = make(s, 99);
  for (int p = 0; p < 3; p++) {
    double mean, cv2, want = 1 / cases[p].k;
    gap_stats(w, p, 50000, &mean, &cv2);
    cr_assert(fabs(mean - 0.2) < 0.2 * 0.04, "k %g: mean gap %.5f s, want 0.2", cases[p].k, mean);
    cr_assert(fabs(cv2 - want) < want * cases[p].tol_cv2, "k %g: CV^2 %.4f, want %.4f",
              cases[p].k, cv2, want);
  }
  workload_free(w);
  free(s);
}

Test(workload, gaps_depend_only_on_seed_phase_and_index) {
  scenario *s = tiny_scenario();
  add_class(s, "c", 1, fixed(8), fixed(8));
  add_rate_phase(s, 4, SCN_ARRIVAL_POISSON, 1);
  add_rate_phase(s, 4, SCN_ARRIVAL_POISSON, 1);
  add_rate_phase(s, 4, SCN_ARRIVAL_GAMMA, 0.5);
  workload *a = make(s, 8), *b = make(s, 8), *c = make(s, 9);
  wl_request r;
  int same_phase = 0, same_seed = 0;
  for (int j = 199; j >= 0; j--) {
    workload_request(b, (uint64_t)j, &r); // requests do not move gaps
    for (int p = 0; p < 3; p++)
      cr_assert_eq(workload_gap_ns(a, p, (uint64_t)(199 - j)),
                   workload_gap_ns(b, p, (uint64_t)(199 - j)));
    same_phase += workload_gap_ns(a, 0, (uint64_t)j) == workload_gap_ns(a, 1, (uint64_t)j);
    same_seed += workload_gap_ns(a, 0, (uint64_t)j) == workload_gap_ns(c, 0, (uint64_t)j);
  }
  cr_assert_eq(same_phase, 0, "two phases share %d gaps", same_phase);
  cr_assert_eq(same_seed, 0, "two seeds share %d gaps", same_seed);
  workload_free(a);
  workload_free(b);
  workload_free(c);
  free(s);
}

Test(workload, bad_rate_phase_is_refused) {
  scenario *s = tiny_scenario();
  add_class(s, "c", 1, fixed(8), fixed(8));
  add_rate_phase(s, 0, SCN_ARRIVAL_POISSON, 1);
  workload *w = NULL;
  sc_error err = {{0}};
  cr_assert_eq(workload_new(s, 0, &w, &err), SC_INVALID);
  cr_assert_str_eq(err.msg, "workload: phase 'rate-0': rate must be > 0, got 0");
  s->workload.phases[0].rate = 2;
  s->workload.phases[0].arrival = SCN_ARRIVAL_GAMMA;
  s->workload.phases[0].burstiness = 0;
  cr_assert_eq(workload_new(s, 0, &w, &err), SC_INVALID);
  cr_assert(strstr(err.msg, "burstiness must be > 0"), "%s", err.msg);
  free(s);
}

Test(workload, free_of_null_is_a_no_op) { workload_free(NULL); }

// --- shared prefixes and conversations

static scenario *prefix_scenario(int count, double zipf, scn_dist len) {
  scenario *s = tiny_scenario();
  add_class(s, "chat", 1, dist(SCN_DIST_UNIFORM, 8, 24), fixed(16));
  s->workload.prefixes = (scn_prefixes){.count = count, .length = len, .zipf = zipf};
  return s;
}

Test(workload, prefix_popularity_follows_zipf_within_sampling_error_and_prefixes_repeat_exactly) {
  enum { N = 8, DRAWS = 20000 };
  scenario *s = prefix_scenario(N, 1.0, dist(SCN_DIST_UNIFORM, 40, 80));
  workload *w = make(s, 5);
  int count[N] = {0}, len[N] = {0};
  int32_t head[N][80];
  for (uint64_t i = 0; i < DRAWS; i++) {
    wl_request r;
    workload_request(w, i, &r);
    cr_assert(r.prefix >= 0 && r.prefix < N, "prefix %d", r.prefix);
    cr_assert(r.n_prefix >= 40 && r.n_prefix <= 80, "prefix length %d", r.n_prefix);
    int own = r.n_prompt - r.n_prefix;
    cr_assert(own >= 8 && own <= 24, "own tokens %d", own);
    cr_assert_eq(r.conv, -1);
    int p = r.prefix;
    if (!count[p]++) {
      len[p] = r.n_prefix;
      memcpy(head[p], r.prompt, (size_t)r.n_prefix * sizeof *r.prompt);
    } else {
      cr_assert_eq(r.n_prefix, len[p]);
      cr_assert(!memcmp(head[p], r.prompt, (size_t)len[p] * sizeof *r.prompt),
                "request %" PRIu64 " has prefix %d's length but not its tokens", i, p);
    }
  }
  double h = 0;
  for (int i = 0; i < N; i++) h += 1.0 / (i + 1);
  for (int i = 0; i < N; i++) {
    double pi = 1.0 / (i + 1) / h, sd = sqrt(DRAWS * pi * (1 - pi));
    cr_expect(fabs(count[i] - DRAWS * pi) < 4.5 * sd, "prefix %d: %d draws, expected %.0f +- %.0f",
              i, count[i], DRAWS * pi, sd);
  }
  for (int i = 1; i < N; i++)
    cr_expect(len[i] != len[0] || memcmp(head[i], head[0], (size_t)len[0] * sizeof **head),
              "prefixes 0 and %d are the same tokens", i);
  workload_free(w);
  // zipf 0: every prefix equally often
  s->workload.prefixes.zipf = 0;
  w = make(s, 5);
  int flat[N] = {0};
  for (uint64_t i = 0; i < DRAWS; i++) {
    wl_request r;
    workload_request(w, i, &r);
    flat[r.prefix]++;
  }
  double sd = sqrt(DRAWS * (1.0 / N) * (1 - 1.0 / N));
  for (int i = 0; i < N; i++)
    cr_expect(fabs(flat[i] - DRAWS / (double)N) < 4.5 * sd, "prefix %d: %d draws", i, flat[i]);
  workload_free(w);
  free(s);
}

Test(workload, conversation_turns_extend_the_history_and_follow_the_turns_distribution) {
  enum { CONVS = 4000 };
  scenario *s = prefix_scenario(4, 1.0, fixed(64));
  s->workload.classes[0].input = dist(SCN_DIST_UNIFORM, 4, 12);
  s->workload.classes[0].output = dist(SCN_DIST_UNIFORM, 4, 12);
  s->workload.conversations = (scn_conversations){
      .set = true, .turns = dist(SCN_DIST_UNIFORM, 2, 6), .think_ns = 1500000000ull};
  workload *w = make(s, 9);
  cr_assert(workload_conversations(w));
  cr_assert_eq(workload_think_ns(w), 1500000000ull);
  double sum = 0, sum2 = 0;
  int seen[7] = {0};
  int32_t *prev = malloc(CTX * sizeof *prev);
  cr_assert(prev);
  for (uint64_t c = 0; c < CONVS; c++) {
    int k = workload_turns(w, c);
    cr_assert(k >= 2 && k <= 6, "conversation %" PRIu64 ": %d turns", c, k);
    seen[k]++;
    sum += k;
    sum2 += (double)k * k;
    if (c >= 50) continue; // the history check on the first 50
    int n_prev = 0, out_prev = 0;
    for (int t = 0; t < k; t++) {
      wl_request r;
      workload_turn(w, c, t, &r);
      cr_assert_eq(r.conv, (int64_t)c);
      cr_assert_eq(r.turn, t);
      cr_assert_eq(r.n_prefix, 64);
      cr_assert(r.n_prompt + r.max_tokens <= CTX);
      if (t > 0) {
        int added = r.n_prompt - n_prev - out_prev; // the new message
        cr_assert(added >= 4 && added <= 12, "turn %d adds %d tokens after the reply", t, added);
        cr_assert(!memcmp(prev, r.prompt, (size_t)n_prev * sizeof *prev),
                  "turn %d does not begin with turn %d's prompt", t, t - 1);
      }
      memcpy(prev, r.prompt, (size_t)r.n_prompt * sizeof *prev);
      n_prev = r.n_prompt;
      out_prev = r.max_tokens;
    }
  }
  double mean = sum / CONVS, var = sum2 / CONVS - mean * mean;
  // uniform integers 2..6: mean 4, variance 2
  cr_expect(fabs(mean - 4.0) < 4.5 * sqrt(2.0 / CONVS), "mean turns %.3f", mean);
  cr_expect(fabs(var - 2.0) < 0.15, "variance of turns %.3f", var);
  for (int k = 2; k <= 6; k++)
    cr_expect(fabs(seen[k] - CONVS / 5.0) < 4.5 * sqrt(CONVS * 0.2 * 0.8), "%d turns: %d", k,
              seen[k]);
  // the same seed gives the same conversation; another seed another
  workload *again = make(s, 9), *other = make(s, 10);
  wl_request a, b;
  workload_turn(w, 17, 1, &a);
  uint64_t fa = fingerprint(&a);
  workload_turn(again, 17, 1, &b);
  cr_expect_eq(fingerprint(&b), fa);
  workload_turn(other, 17, 1, &b);
  cr_expect_neq(fingerprint(&b), fa);
  // a request index is its conversation's first turn (what validate and serve's warm-up use)
  workload_request(w, 17, &b);
  workload_turn(again, 17, 0, &a);
  cr_expect_eq(fingerprint(&a), fingerprint(&b));
  free(prev);
  workload_free(w);
  workload_free(again);
  workload_free(other);
  free(s);
}

Test(workload, a_conversation_that_would_outgrow_the_context_ends_at_the_last_turn_that_fits) {
  scenario *s = prefix_scenario(1, 1.0, fixed(100));
  s->workload.classes[0].input = fixed(50);
  s->workload.classes[0].output = fixed(50);
  s->workload.conversations = (scn_conversations){.set = true, .turns = fixed(40)};
  workload *w = make(s, 1);
  // 100 + 4 x 100 = 500 fits the context of 512; a fifth turn would need 600
  cr_assert_eq(workload_turns(w, 0), 4);
  wl_request r;
  workload_turn(w, 0, 3, &r);
  cr_expect_eq(r.n_prompt, 100 + 3 * 100 + 50);
  cr_expect_eq(r.max_tokens, 50);
  workload_free(w);
  free(s);
}

Test(workload, without_prefixes_or_conversations_a_request_has_neither) {
  // (that such a workload's requests did not change is ci/same-rows.sh's to prove)
  scenario *s = tiny_scenario();
  add_class(s, "a", 1, dist(SCN_DIST_UNIFORM, 8, 64), dist(SCN_DIST_UNIFORM, 4, 16));
  workload *w = make(s, 42);
  wl_request r;
  workload_request(w, 3, &r);
  cr_expect_eq(r.prefix, -1);
  cr_expect_eq(r.n_prefix, 0);
  cr_expect_eq(r.conv, -1);
  cr_expect(!workload_conversations(w));
  cr_expect_eq(workload_turns(w, 3), 1);
  workload_free(w);
  free(s);
}

// --- a trace's conversations ("conversation" on every line)

static scenario *trace_scenario(const char *path) {
  scenario *s = dataset_scenario(path);
  s->workload.trace = true;
  s->workload.phases[0] = (scn_phase){.kind = SCN_PHASE_RATE, .arrival = SCN_ARRIVAL_TRACE,
                                      .rate = 1, .requests = 4};
  s->workload.n_phases = 1;
  return s;
}

Test(workload, a_traces_conversation_turn_carries_the_turn_before_and_names_it) {
  const char *path = sc_test_write_tmp(
      "wl-conv", "t.jsonl",
      "{\"arrival_s\": 0, \"conversation\": \"x\", \"prompt_tokens\": 40, \"output_tokens\": 10}\n"
      "{\"arrival_s\": 0.5, \"conversation\": 7, \"prompt_tokens\": 30, \"output_tokens\": 5}\n"
      "{\"arrival_s\": 1, \"conversation\": \"x\", \"prompt_tokens\": 70, \"output_tokens\": 8}\n"
      "{\"arrival_s\": 2, \"conversation\": \"x\", \"prompt_tokens\": 50, \"output_tokens\": 8}\n");
  scenario *s = trace_scenario(path);
  workload *w = make(s, 3);
  int32_t first[40];
  wl_request r;
  workload_request(w, 0, &r);
  cr_expect_eq(r.conv, 0);
  cr_expect_eq(r.prev, -1);
  memcpy(first, r.prompt, sizeof first);
  workload_request(w, 1, &r);
  cr_expect_eq(r.conv, 1);
  cr_expect_eq(r.prev, -1);
  workload_request(w, 2, &r);
  cr_expect_eq(r.conv, 0);
  cr_expect_eq(r.prev, 0, "line 3 follows line 1 of conversation x");
  cr_expect_eq(r.n_prompt, 70);
  cr_expect(!memcmp(first, r.prompt, sizeof first), "its prompt begins with line 1's");
  int32_t third[70];
  memcpy(third, r.prompt, sizeof third);
  workload_request(w, 3, &r); // shorter than the turn before: its first 50 tokens
  cr_expect_eq(r.prev, 2);
  cr_expect_eq(r.n_prompt, 50);
  cr_expect(!memcmp(third, r.prompt, 50 * sizeof *third));
  workload_free(w);
  free(s);
}

Test(workload, a_trace_line_without_its_conversation_is_refused_naming_the_line) {
  const char *path = sc_test_write_tmp(
      "wl-conv-missing", "t.jsonl",
      "{\"arrival_s\": 0, \"conversation\": \"x\", \"prompt_tokens\": 40}\n"
      "{\"arrival_s\": 1, \"prompt_tokens\": 30}\n");
  int n = 0;
  uint64_t last = 0;
  sc_error err = {{0}};
  cr_assert_eq(workload_trace_scan(path, &n, &last, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "t.jsonl:2: key 'conversation': missing"), "%s", err.msg);
  cr_expect_null(strchr(err.msg, '\n'));
  path = sc_test_write_tmp("wl-conv-late", "t.jsonl",
                           "{\"arrival_s\": 0, \"prompt_tokens\": 40}\n"
                           "{\"arrival_s\": 1, \"conversation\": \"\", \"prompt_tokens\": 30}\n");
  cr_assert_eq(workload_trace_scan(path, &n, &last, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "t.jsonl:2: key 'conversation': expected a non-empty string"), "%s",
            err.msg);
  path = sc_test_write_tmp("wl-conv-late2", "t.jsonl",
                           "{\"arrival_s\": 0, \"prompt_tokens\": 40}\n"
                           "{\"arrival_s\": 1, \"conversation\": 3, \"prompt_tokens\": 30}\n");
  cr_assert_eq(workload_trace_scan(path, &n, &last, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "t.jsonl:2: key 'conversation': the lines above name none"), "%s",
            err.msg);
}

// --- a dataset of conversations ("turns" on every line)

Test(workload, a_conversation_datasets_turns_carry_the_history_and_cycle_by_line) {
  const char *path = sc_test_write_tmp(
      "wl-dsconv", "c.jsonl",
      "{\"turns\": [{\"prompt_tokens\": 20, \"output_tokens\": 5}, {\"prompt\": \"hello there\", "
      "\"output_tokens\": 4}]}\n"
      "{\"turns\": [{\"prompt_tokens\": 10}]}\n");
  scenario *s = dataset_scenario(path);
  s->workload.conversations = (scn_conversations){.set = true, .think_ns = 7};
  workload *w = make(s, 2);
  cr_assert(workload_conversations(w));
  cr_expect_eq(workload_think_ns(w), 7);
  cr_expect_eq(workload_turns(w, 0), 2);
  cr_expect_eq(workload_turns(w, 1), 1);
  cr_expect_eq(workload_turns(w, 2), 2, "conversation 2 is line 1 again");
  wl_request r;
  workload_turn(w, 0, 0, &r);
  cr_expect_eq(r.n_prompt, 20);
  cr_expect_eq(r.max_tokens, 5);
  int32_t first[20];
  memcpy(first, r.prompt, sizeof first);
  workload_turn(w, 0, 1, &r);
  int32_t text[32];
  int n_text = tokenizer_encode(&s->model.config, "hello there", text, 32);
  cr_expect_eq(r.n_prompt, 20 + 5 + n_text, "the history, its reply, then the new message");
  cr_expect_eq(r.max_tokens, 4);
  cr_expect(!memcmp(first, r.prompt, sizeof first));
  cr_expect(!memcmp(text, r.prompt + 25, (size_t)n_text * sizeof *text));
  workload_turn(w, 1, 0, &r);
  cr_expect_eq(r.max_tokens, 128, "output_tokens defaults to 128");
  workload_free(w);
  // every line a conversation or none
  path = sc_test_write_tmp("wl-dsconv-mixed", "c.jsonl",
                           "{\"turns\": [{\"prompt_tokens\": 20}]}\n{\"prompt_tokens\": 10}\n");
  snprintf(s->workload.dataset, sizeof s->workload.dataset, "%s", path);
  workload *bad = NULL;
  sc_error err = {{0}};
  cr_assert_eq(workload_new(s, 2, &bad, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "c.jsonl:2: key 'turns': missing"), "%s", err.msg);
  free(s);
}
