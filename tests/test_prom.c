// The Prometheus text reader (serving/prom.c) on the shapes the HTTP replica scrapes: vLLM's
// series per engine summed, each figure under the first name a server gives it, labels whose
// quoted values hold braces and escaped quotes, and the lines that are not the metric.
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

// --- the prefix cache's figures

// text with every occurrence of from replaced by to (one at most per line is enough here)
static char *replaced(const char *text, const char *from, const char *to) {
  size_t n = strlen(text) + 64 * strlen(to) + 1;
  char *out = malloc(n), *o = out;
  cr_assert_not_null(out);
  for (const char *p = text; *p;) {
    if (!strncmp(p, from, strlen(from))) {
      o += sprintf(o, "%s", to);
      p += strlen(from);
    } else {
      *o++ = *p++;
    }
  }
  *o = 0;
  return out;
}

// A real vLLM V1 scrape (a fresh server: every counter 0) reads its counters under their
// _total names, not the _created gauges beside them; moved on, the fraction is theirs, and a
// second engine's series add up.
Test(prom, vllm_prefix_cache_counters_of_a_real_scrape) {
  char *text = corpus("vllm-v1-qwen3-0.6b.txt");
  replica_server_metrics m;
  cr_assert(prom_parse(text, &m));
  cr_assert(m.has_cache && !m.has_gauge, "%s", m.cache_why);
  cr_expect_float_eq(m.cache_hits, 0, 1e-9);
  cr_expect_float_eq(m.cache_queries, 0, 1e-9);
  cr_expect_str_eq(m.cache_names, "vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total");
  char *a = replaced(
      text, "vllm:prefix_cache_queries_total{engine=\"0\",model_name=\"Qwen/Qwen3-0.6B\"} 0.0",
      "vllm:prefix_cache_queries_total{engine=\"0\",model_name=\"Qwen/Qwen3-0.6B\"} "
      "5120.0\nvllm:prefix_cache_queries_total{engine=\"1\",model_name=\"Qwen/"
      "Qwen3-0.6B\"} 1.024e+03");
  char *b =
      replaced(a, "vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"Qwen/Qwen3-0.6B\"} 0.0",
               "vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"Qwen/Qwen3-0.6B\"} "
               "3840.0\nvllm:prefix_cache_hits_total{engine=\"1\",model_name=\"Qwen/Qwen3-0.6B\"} "
               "768");
  cr_assert(prom_parse(b, &m));
  cr_assert(m.has_cache);
  cr_expect_float_eq(m.cache_hits, 4608, 1e-9);
  cr_expect_float_eq(m.cache_queries, 6144, 1e-9);
  cr_expect_float_eq(m.running, 0, 1e-9); // the other figures as before
  free(a);
  free(b);
  // the deprecated vllm:gpu_ names of vLLM 0.8-0.10, when the current ones are absent
  char *g = replaced(text, "vllm:prefix_cache_", "vllm:gpu_prefix_cache_");
  cr_assert(prom_parse(g, &m));
  cr_expect(m.has_cache);
  cr_expect_str_eq(m.cache_names,
                   "vllm:gpu_prefix_cache_hits_total / vllm:gpu_prefix_cache_queries_total");
  free(g);
  free(text);
}

// SGLang's own documented scrape: no counters, its cache_hit_rate gauge (a fraction).
Test(prom, sglang_cache_hit_rate_gauge_of_a_real_scrape) {
  char *text = corpus("sglang-llama31-8b.txt");
  replica_server_metrics m;
  cr_assert(prom_parse(text, &m));
  cr_expect_float_eq(m.running, 162, 1e-9);
  cr_expect_float_eq(m.waiting, 2826, 1e-9);
  cr_assert(m.has_gauge && !m.has_cache, "%s", m.cache_why);
  cr_expect_float_eq(m.cache_gauge, 0.007507552643049313, 1e-15);
  cr_expect_str_eq(m.cache_names, "sglang:cache_hit_rate");
  // an early SGLang's gauge in percent (its docs showed 10.61) is not a fraction: not read
  char *pct = replaced(text, "} 0.007507552643049313", "} 10.61");
  cr_assert(prom_parse(pct, &m));
  cr_expect(!m.has_gauge && !m.has_cache);
  cr_expect(strstr(m.cache_why, "sglang:cache_hit_rate: not a fraction"), "%s", m.cache_why);
  free(pct);
  free(text);
}

// Counters that cannot be trusted are not read, and say why; a page without any says nothing.
Test(prom, malformed_prefix_cache_counters_are_not_read_and_say_why) {
  static const struct {
    const char *text, *why;
  } in[] = {
      {"vllm:prefix_cache_queries_total{engine=\"0\"} "
       "100\nvllm:prefix_cache_hits_total{engine=\"0\"} NaN\n",
       "not a finite number"},
      {"vllm:prefix_cache_queries_total{engine=\"0\"} "
       "100\nvllm:prefix_cache_hits_total{engine=\"0\"} x\n",
       "not a finite number"},
      {"vllm:prefix_cache_queries_total{engine=\"0\"} 100\n", "one of the pair only"},
      {"vllm:prefix_cache_queries_total 10\nvllm:prefix_cache_hits_total 11\n",
       "more hits than queries"},
      {"vllm:prefix_cache_queries_total -10\nvllm:prefix_cache_hits_total -11\n",
       "a negative count"},
      {"sglang:cache_hit_rate{model_name=\"m\"} +Inf\n", "not a finite number"},
  };
  for (size_t i = 0; i < sizeof in / sizeof *in; i++) {
    replica_server_metrics m;
    prom_parse(in[i].text, &m);
    cr_expect(!m.has_cache && !m.has_gauge, "%zu", i);
    cr_expect(strstr(m.cache_why, in[i].why), "%zu: %s", i, m.cache_why);
  }
  char *text = corpus("vllm-shape.txt");
  replica_server_metrics m;
  cr_assert(prom_parse(text, &m));
  cr_expect(!m.has_cache && !m.has_gauge && !m.cache_why[0], "%s", m.cache_why);
  free(text);
}
