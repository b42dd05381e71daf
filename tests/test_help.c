// What the binary says about itself: the manual page (`help --man`) carries every command's
// --help text exactly, one section per command, and lists exactly the commands `--help` lists;
// `help COMMAND` is `COMMAND --help`; `--version` names the version, the revision and the
// backends; `help --list` gives the names the shell completion offers; a scenario name found
// nowhere is one line naming where it was looked for.
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/hardware.h"
#include "config/presets.h"
#include "tests/helpers.h"

static char man[1 << 18], out[1 << 16], want[1 << 16];

// --- the manual page, read back

enum { MAX_PAGES = 64 };
typedef struct page {
  char name[64]; // "" for the DESCRIPTION (the top-level usage), "run", "model gen", ...
  char *text;    // the no-fill block, unescaped (malloc'd)
} page;

// The text of a roff no-fill block line by line, undoing cli/main.c's escapes: a leading "\&",
// "\e" for a backslash, "\-" for a minus. Any other escape fails the test (the writer sets none).
static char *unescape_block(const char *start, const char *end) {
  char *t = malloc((size_t)(end - start) + 1), *o = t;
  cr_assert_not_null(t);
  bool line_start = true;
  for (const char *p = start; p < end; p++) {
    if (*p == '\\') {
      cr_assert(p + 1 < end, "a trailing backslash in the man page");
      char c = *++p;
      if (c == '&' && line_start) continue;
      cr_assert(c == 'e' || c == '-', "unexpected roff escape '\\%c' in a --help block", c);
      *o++ = c == 'e' ? '\\' : '-';
      line_start = false;
      continue;
    }
    *o++ = *p;
    line_start = *p == '\n';
  }
  *o = 0;
  return t;
}

// Splits the page into its help blocks; returns how many.
static int read_pages(const char *text, page *pages) {
  int n = 0;
  const char *name = NULL; // the section the next block belongs to (NULL: none)
  char title[64] = "";
  for (const char *line = text; *line;) {
    const char *eol = strchr(line, '\n');
    if (!eol) eol = line + strlen(line);
    size_t len = (size_t)(eol - line);
    if (len > 4 && !strncmp(line, ".SH ", 4)) {
      name = NULL;
      if (!strncmp(line, ".SH DESCRIPTION", len)) {
        title[0] = 0;
        name = title;
      } else if (!strncmp(line, ".SH \"SHARDCHECK ", 16)) {
        size_t k = 0;
        for (const char *p = line + 16; p < eol && *p != '"' && k + 1 < sizeof title; p++)
          title[k++] = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
        title[k] = 0;
        name = title;
      }
    } else if (len > 4 && !strncmp(line, ".SS \"shardcheck ", 16)) {
      snprintf(title, sizeof title, "%.*s", (int)(len - 17), line + 16);
      name = title;
    } else if (len == 3 && !strncmp(line, ".nf", 3) && name) {
      const char *body = eol + 1, *fi = strstr(body, "\n.fi\n");
      cr_assert_not_null(fi, "a .nf block without .fi");
      cr_assert_lt(n, MAX_PAGES);
      snprintf(pages[n].name, sizeof pages[n].name, "%s", name);
      pages[n].text = unescape_block(body, fi + 1);
      n++;
      name = NULL; // one block per section
      eol = fi + 4;
    }
    line = *eol ? eol + 1 : eol;
  }
  return n;
}

static page pages[MAX_PAGES];
static int n_pages;

static void load_man(void) {
  int rc = sc_test_run_cli("help --man", man, sizeof man);
  cr_assert_eq(rc, 0, "help --man exited %d:\n%.2000s", rc, man);
  cr_assert_lt(strlen(man), sizeof man - 1, "the man page outgrew the test's buffer");
  n_pages = read_pages(man, pages);
}

static void free_pages(void) {
  for (int i = 0; i < n_pages; i++) free(pages[i].text);
  n_pages = 0;
}

// The commands `shardcheck --help` lists (the lines "  NAME  summary" after "commands:").
static int usage_commands(char names[][32], int cap) {
  cr_assert_eq(sc_test_run_cli("--help", out, sizeof out), 0);
  const char *p = strstr(out, "commands:\n");
  cr_assert_not_null(p);
  p += strlen("commands:\n");
  int n = 0;
  while (!strncmp(p, "  ", 2) && n < cap) {
    sscanf(p, " %31s", names[n++]);
    p = strchr(p, '\n') + 1;
  }
  return n;
}

TestSuite(help, .init = load_man, .fini = free_pages);

Test(help, man_page_sections_are_the_help_texts_exactly) {
  cr_assert_gt(n_pages, 10, "found %d help blocks in the man page", n_pages);
  for (int i = 0; i < n_pages; i++) {
    char args[128];
    snprintf(args, sizeof args, "%.63s --help", pages[i].name);
    int rc = sc_test_run_cli(args, want, sizeof want);
    cr_expect_eq(rc, 0, "`shardcheck %s` exited %d", args, rc);
    cr_expect_str_eq(pages[i].text, want, "the man page's section for '%s' differs from `%s`",
                     pages[i].name, args);
  }
}

Test(help, man_page_has_a_section_for_every_command_and_no_other) {
  char names[64][32];
  int n = usage_commands(names, 64);
  cr_assert_gt(n, 10);
  cr_expect_str_eq(pages[0].name, "", "the first block is the DESCRIPTION, the usage");
  int top = 0;
  for (int i = 0; i < n_pages; i++) {
    if (!pages[i].name[0] || strchr(pages[i].name, ' ')) continue; // usage; `model gen`
    cr_expect(top < n && !strcmp(pages[i].name, names[top]),
              "section %d is '%s'; --help lists '%s' there", top, pages[i].name,
              top < n ? names[top] : "(nothing)");
    top++;
  }
  cr_expect_eq(top, n, "%d command sections for %d commands", top, n);
  // every subcommand `model --help` names has its section
  cr_assert_eq(sc_test_run_cli("model --help", out, sizeof out), 0);
  for (const char *s = strstr(out, "<") + 1; *s && *s != '>';) {
    char sub[64] = "model ";
    size_t k = strlen(sub);
    while (*s && *s != '|' && *s != '>' && k + 1 < sizeof sub) sub[k++] = *s++;
    sub[k] = 0;
    if (*s == '|') s++;
    bool found = false;
    for (int i = 0; i < n_pages; i++) found |= !strcmp(pages[i].name, sub);
    cr_expect(found, "no man page section for '%s'", sub);
  }
}

Test(help, man_page_renders_without_warnings) {
  if (system("command -v groff >/dev/null 2>&1") != 0)
    cr_skip_test("skipped: groff is not installed (Debian package groff-base)");
  char cmd[512];
  snprintf(cmd, sizeof cmd, "%s help --man | groff -man -Tutf8 -ww -z 2>&1", SC_BINARY);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  size_t n = fread(out, 1, sizeof out - 1, p);
  out[n] = 0;
  cr_expect_eq(pclose(p), 0);
  cr_expect_eq(n, 0, "groff warned:\n%s", out);
}

Test(help, help_command_is_command_help) {
  const char *cmds[] = {"run", "capacity", "serve", "help"};
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    char a[64], b[64];
    snprintf(a, sizeof a, "help %s", cmds[i]);
    snprintf(b, sizeof b, "%s --help", cmds[i]);
    cr_assert_eq(sc_test_run_cli(a, out, sizeof out), 0, "`shardcheck %s`: %s", a, out);
    cr_assert_eq(sc_test_run_cli(b, want, sizeof want), 0);
    cr_expect_str_eq(out, want, "`shardcheck %s` differs from `shardcheck %s`", a, b);
  }
  cr_assert_eq(sc_test_run_cli("help model gen", out, sizeof out), 0);
  cr_assert_eq(sc_test_run_cli("model gen --help", want, sizeof want), 0);
  cr_expect_str_eq(out, want);
  cr_expect_eq(sc_test_run_cli("help no-such-command", out, sizeof out), 2);
  cr_expect(strstr(out, "no-such-command"), "%s", out);
}

// --- --version and the lists

Test(help, version_names_version_revision_and_backends) {
  cr_assert_eq(sc_test_run_cli("--version", out, sizeof out), 0, "%s", out);
  cr_expect(!strncmp(out, "shardcheck 0.", 13), "%s", out);
  cr_expect(strstr(out, "\ngit revision: "), "%s", out);
#ifdef SHARDCHECK_HAVE_CUDA
  cr_expect(strstr(out, "\nbackends: cpu, sim, cuda"), "%s", out);
#else
  cr_expect(strstr(out, "\nbackends: cpu, sim\n"), "%s", out);
#endif
  // run from the build tree: the data root is this checkout (through the build's link)
  char line[1200];
  snprintf(line, sizeof line, "\ndata: %s\n", SC_SOURCE_DIR);
  char real[1024];
  if (realpath(SC_SOURCE_DIR, real)) snprintf(line, sizeof line, "\ndata: %s\n", real);
  cr_expect(strstr(out, line), "expected '%s' in:\n%s", line + 1, out);
  cr_expect_eq(sc_test_run_cli("--version extra", out, sizeof out), 2);
}

// Whether `help --list KIND` prints exactly names[0..n), one a line.
static void expect_list(const char *kind, int (*names_fn)(const char **, int)) {
  char args[64];
  snprintf(args, sizeof args, "help --list %s", kind);
  cr_assert_eq(sc_test_run_cli(args, out, sizeof out), 0, "%s", out);
  const char *names[256];
  int n = names_fn(names, 256);
  cr_assert_gt(n, 0);
  char *p = want;
  for (int i = 0; i < n && i < 256; i++) p += sprintf(p, "%s\n", names[i]);
  cr_expect_str_eq(out, want, "`shardcheck %s`", args);
}

Test(help, lists_give_the_names_that_resolve) {
  expect_list("profiles", hw_profile_names);
  expect_list("presets", model_preset_names);
  cr_assert_eq(sc_test_run_cli("help --list scenarios", out, sizeof out), 0);
  cr_expect(strstr(out, "quickstart\n") && strstr(out, "capacity/llama3-8b-h100\n"), "%s", out);
  cr_expect(!strstr(out, "hardware/") && !strstr(out, "models/"), "%s", out);
  cr_assert_eq(sc_test_run_cli("help --list commands", out, sizeof out), 0);
  cr_expect(strstr(out, "run\n") && strstr(out, "help\n") && !strstr(out, "worker"), "%s", out);
  cr_expect_eq(sc_test_run_cli("help --list colours", out, sizeof out), 2);
}

// --- shipped scenarios by name

Test(help, shipped_scenario_by_name_from_another_directory) {
  char args[1200];
  const char *dir = sc_test_tmpdir("byname");
  snprintf(args, sizeof args,
           "validate capacity/llama3-8b-h100 quickstart --quiet; cd %s && %s "
           "validate quickstart",
           dir, SC_BINARY);
  int rc = sc_test_run_cli(args, out, sizeof out);
  cr_expect_eq(rc, 0, "%s", out);
  cr_expect(strstr(out, "/scenarios/quickstart.yaml: ok: scenario 'quickstart'"), "%s", out);
}

Test(help, unknown_scenario_name_says_where_it_looked) {
  int rc = sc_test_run_cli("run no-such-scenario --db /nonexistent/x.db", out, sizeof out);
  cr_expect_eq(rc, 2, "%s", out);
  cr_expect_eq(sc_test_count_lines(out), 1, "%s", out);
  cr_expect(strstr(out, "no-such-scenario") && strstr(out, "/scenarios/no-such-scenario.yaml"),
            "%s", out);
}

Test(help, unknown_profile_says_every_place_it_looked) {
  const char *f = sc_test_write_tmp("noprof", "s.yaml",
                                    "name: s\nmodel: {preset: llama3-8b}\nmode: sim\n"
                                    "hardware: {profile: no-such-gpu, gpus: 1}\n"
                                    "deployments: [{tp: 1}]\n"
                                    "workload:\n  prompts: [{name: p, weight: 1, input: 8, "
                                    "output: 4}]\n  phases: [{fixed: {requests: 1, "
                                    "concurrency: 1}}]\n");
  char args[1200];
  snprintf(args, sizeof args, "validate %s", f);
  int rc = sc_test_run_cli(args, out, sizeof out);
  cr_expect_eq(rc, 2, "%s", out);
  cr_expect_eq(sc_test_count_lines(out), 1, "%s", out);
  cr_expect(strstr(out, "s.yaml:4:") && strstr(out, "'no-such-gpu'") &&
                strstr(out, "not built in (a100-80g, ") &&
                strstr(out, "/scenarios/hardware/no-such-gpu.yaml"),
            "%s", out);
}
