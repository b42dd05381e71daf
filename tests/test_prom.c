// The Prometheus text reader (serving/prom.c) on the shapes the HTTP replica scrapes: vLLM's
// series per engine summed, each figure under the first name a server gives it, labels whose
// quoted values hold braces and escaped quotes, and the lines that are not the metric.
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "serving/prom.h"
#include "tests/helpers.h"

static char *corpus(const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/fuzz/corpus/prom/%s", SC_SOURCE_DIR, name);
  char *text = sc_test_read_file(path, NULL);
  cr_assert_not_null(text, "%s", path);
  return text;
}

Test(prom, vllm_series_of_two_engines_are_summed) {
  char *text = corpus("vllm-shape.txt");
  replica_server_metrics m;
  cr_assert(prom_parse(text, &m));
  cr_assert_float_eq(m.running, 21, 1e-9);
  cr_assert_float_eq(m.waiting, 3, 1e-9);
  cr_assert_float_eq(m.kv_usage, 0.4172 + 0.3901, 1e-9);
  cr_assert(isnan(m.kv_blocks)); // shardcheck serve's own figure: not exposed by vLLM
  free(text);
}

Test(prom, each_server_s_names_are_read) {
  static const struct {
    const char *file;
    double running, waiting, kv;
  } in[] = {{"vllm-v0-names.txt", 4, 1, 0.0625},
            {"sglang-shape.txt", 31, 7, 0.58},
            {"llamacpp-tgi-shape.txt", 2, 0, 0.1875}}; // llama.cpp's names come before TGI's
  for (size_t i = 0; i < sizeof in / sizeof *in; i++) {
    char *text = corpus(in[i].file);
    replica_server_metrics m;
    cr_assert(prom_parse(text, &m), "%s", in[i].file);
    cr_assert_float_eq(m.running, in[i].running, 1e-9, "%s", in[i].file);
    cr_assert_float_eq(m.waiting, in[i].waiting, 1e-9, "%s", in[i].file);
    cr_assert_float_eq(m.kv_usage, in[i].kv, 1e-9, "%s", in[i].file);
    free(text);
  }
}

Test(prom, quoted_braces_longer_names_and_values_not_finite_are_told_apart) {
  char *text = corpus("labels-and-edges.txt");
  double v = 0;
  // 2 (labels with '}' and '\"' inside quotes) + 3 (a tab before the value); the _total line
  // is another metric
  cr_assert(prom_sum(text, "vllm:num_requests_running", &v));
  cr_assert_float_eq(v, 5, 1e-9);
  v = -1;
  cr_assert_not(prom_sum(text, "vllm:num_requests_waiting", &v)); // NaN and 1e400 skipped
  cr_assert_float_eq(v, -1, 1e-9);
  replica_server_metrics m;
  cr_assert(prom_parse(text, &m));
  cr_assert_float_eq(m.kv_blocks, 17, 1e-9);
  cr_assert(isnan(m.waiting) && isnan(m.kv_usage));
  free(text);
}

Test(prom, text_without_a_known_name_has_nothing) {
  replica_server_metrics m;
  cr_assert_not(prom_parse("# HELP x y\nx 1\n", &m));
  cr_assert_not(m.have);
  cr_assert(isnan(m.running) && isnan(m.waiting) && isnan(m.kv_usage) && isnan(m.kv_blocks));
  cr_assert_not(prom_parse("", &m));
}
