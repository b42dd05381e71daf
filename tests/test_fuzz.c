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
