// Regressions found by the fuzz targets (fuzz/): each input a fuzzer turned up, fed to the same
// production entry its target calls, with the clear error it now gets. The inputs are also in
// the targets' seed corpora (fuzz/corpus/<target>/regress-*).
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "config/hardware.h"
#include "scenarios/scenario.h"
#include "tests/helpers.h"

// fuzz_scenario: "%" then bytes that are not UTF-8 made libfyaml's directive scanner loop
// forever (a hang, not an error). YAML text must be UTF-8: refused at the first such byte.
static const char directive_not_utf8[] = "%\xa1\xa1\xa1\xa1\xa1\xa1\xa1\xa1\xa1\xa1\xa1\xa1\xa1"
                                         "\xa1\xa1\xa1\xa1\xa1\xa1\xa1\x34";

Test(fuzz, scenario_directive_of_bytes_not_utf8_is_refused_at_its_column, .timeout = 10) {
  scenario *s = NULL;
  sc_error err = {{0}};
  sc_status st =
      scenario_parse(directive_not_utf8, sizeof directive_not_utf8 - 1, "bad.yaml", ".", &s, &err);
  cr_assert_eq(st, SC_INVALID, "%s", err.msg);
  cr_assert_null(s);
  cr_assert(strstr(err.msg, "bad.yaml:1:2: invalid YAML: byte 0xa1 is not UTF-8"), "%s", err.msg);
}

Test(fuzz, scenario_bytes_not_utf8_in_a_later_line_name_that_line, .timeout = 10) {
  static const char text[] = "name: x\n# caf\xc3\xa9 \xff\n";
  scenario *s = NULL;
  sc_error err = {{0}};
  cr_assert_eq(scenario_parse(text, sizeof text - 1, "bad.yaml", ".", &s, &err), SC_INVALID);
  cr_assert(strstr(err.msg, "bad.yaml:2:8: invalid YAML: byte 0xff is not UTF-8"), "%s", err.msg);
}

Test(fuzz, hardware_profile_directive_of_bytes_not_utf8_is_refused, .timeout = 10) {
  const char *path = sc_test_write_tmp("fuzz-hw", "bad.yaml", directive_not_utf8);
  hw_profile p;
  sc_error err = {{0}};
  cr_assert_eq(hw_profile_load(path, &p, &err), SC_INVALID, "%s", err.msg);
  cr_assert(strstr(err.msg, ":1:2: invalid YAML: byte 0xa1 is not UTF-8"), "%s", err.msg);
}

// fuzz_scenario and fuzz_hardware (the CPU-hour campaigns): a single-quoted scalar of many
// escaped quotes made libfyaml 0.7.12 leak its text iterator's chunk array (upstream issue
// 337; suppressed in tests/lsan.supp, since the allocation is the library's own). Both inputs
// are refused as what they are, a string where a mapping belongs, and ASan finds no leak of
// ours on the way.
Test(fuzz, a_quoted_scalar_of_escaped_quotes_is_a_string_not_a_mapping, .timeout = 10) {
  static const struct {
    int quotes;
    const char *tail;
  } in[] = {{124, ""}, {60, " "}};
  for (size_t i = 0; i < sizeof in / sizeof *in; i++) {
    char text[256];
    memset(text, '\'', (size_t)in[i].quotes);
    snprintf(text + in[i].quotes, sizeof text - (size_t)in[i].quotes, "%s", in[i].tail);
    scenario *s = NULL;
    sc_error err = {{0}};
    cr_assert_eq(scenario_parse(text, strlen(text), "q.yaml", ".", &s, &err), SC_INVALID);
    cr_assert(strstr(err.msg, "q.yaml:1:") && strstr(err.msg, "expected a mapping") &&
                  strstr(err.msg, "got the quoted string ''''"),
              "%s", err.msg);
    const char *path = sc_test_write_tmp("fuzz-hwq", "q.yaml", text);
    hw_profile p;
    cr_assert_eq(hw_profile_load(path, &p, &err), SC_INVALID, "%s", err.msg);
    cr_assert(strstr(err.msg, "expected a mapping of keys, got the quoted string"), "%s",
              err.msg);
  }
}

// The same input as a body of serve's POST /admin/faults (the 400 comes from this error).
Test(fuzz, admin_fault_body_of_bytes_not_utf8_is_refused, .timeout = 10) {
  scn_fault f;
  sc_error err = {{0}};
  cr_assert_eq(scenario_parse_fault_now(directive_not_utf8, sizeof directive_not_utf8 - 1, "body",
                                        1, 2, true, &f, &err),
               SC_INVALID);
  cr_assert(strstr(err.msg, "body:1:2: invalid YAML: byte 0xa1 is not UTF-8"), "%s", err.msg);
}

// fuzz_hardware (CI's 10 s run): an explicit key ("? ") whose value indicator is followed by a
// tab and a block entry crashed libfyaml 0.7.12 (a write through a null pointer in its parser's
// cleanup after it refuses the tab). Explicit keys are refused before libfyaml sees the text, at their column,
// wherever a line's first token is one; a "?" elsewhere, or in a block scalar, is text.
Test(fuzz, an_explicit_key_is_refused_at_its_column_before_libfyaml_reads_it, .timeout = 10) {
  static const struct {
    const char *text, *at;
  } in[] = {{"? elreduce:\t- ngine", ":1:1: "},
            {"name: x\n? a:\t- b\n", ":2:1: "},
            {"- ? a:\t? b", ":1:3: "},
            {"--- ? a:\t- b", ":1:5: "},
            {"name: x\n  ?\n", ":2:3: "}};
  for (size_t i = 0; i < sizeof in / sizeof *in; i++) {
    scenario *s = NULL;
    sc_error err = {{0}};
    cr_assert_eq(scenario_parse(in[i].text, strlen(in[i].text), "k.yaml", ".", &s, &err),
                 SC_INVALID, "%s", in[i].text);
    cr_expect(strstr(err.msg, in[i].at) && strstr(err.msg, "explicit mapping keys"), "%s",
              err.msg);
    const char *path = sc_test_write_tmp("fuzz-hwk", "k.yaml", in[i].text);
    hw_profile p;
    cr_assert_eq(hw_profile_load(path, &p, &err), SC_INVALID, "%s", err.msg);
    cr_expect(strstr(err.msg, "explicit mapping keys"), "%s", err.msg);
  }
  // not explicit keys: a "?" in quotes, in a plain scalar (after its first character), and
  // a block scalar's lines
  static const char *const text[] = {
      "name: \"?\"\ndescription: why? ?not\n",
      "name: x\ndescription: |\n  ? the text of a block scalar\n  - and more\n",
      "name: x\ndescription: >-  # folded\n  ?\n\n  ? again\n"};
  for (size_t i = 0; i < sizeof text / sizeof *text; i++) {
    scenario *s = NULL;
    sc_error err = {{0}};
    cr_assert_eq(scenario_parse(text[i], strlen(text[i]), "k.yaml", ".", &s, &err), SC_INVALID);
    cr_expect(!strstr(err.msg, "explicit") && strstr(err.msg, "missing required key"), "%s",
              err.msg);
  }
}
