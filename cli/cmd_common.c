// Helpers shared by the subcommands: status -> exit code, one-line error reports, number
// parsing, name lists, shipped scenarios by name, the source revision a run records. The
// subcommands themselves are cli/cmd_*.c; the store (reports/store.c) records the revision it
// is given and runs no git; where the shipped files are is kernels/paths.c's to find.
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "config/yaml_map.h"
#include "kernels/mpi.h"
#include "kernels/paths.h"

int cli_exit_code(sc_status s) {
  switch (s) {
  case SC_OK: return CLI_OK;
  case SC_INVALID:
  case SC_IO: return CLI_USAGE;
  default: return CLI_RUNTIME;
  }
}

int cli_fail(const char *cmd, sc_status s, const sc_error *err) {
  fprintf(stderr, "shardcheck %s: %s\n", cmd,
          err && err->msg[0] ? err->msg : sc_status_name(s));
  return cli_exit_code(s);
}

int cli_usage_error(const char *cmd, const char *msg, const char *arg) {
  fprintf(stderr, "shardcheck %s: %s%s%s%s\n", cmd, msg, arg ? " '" : "", arg ? arg : "",
          arg ? "'" : "");
  fprintf(stderr, "`shardcheck %s --help` for usage.\n", cmd);
  return CLI_USAGE;
}

static void mpi_end(void) { sc_mpi_finalize(); }

int cli_mpi_begin(const char *cmd, bool *mpi) {
  *mpi = false;
  if (!sc_mpi_launched()) return CLI_OK;
  sc_error err = {{0}};
  if (!sc_mpi_built()) {
    fprintf(stderr,
            "shardcheck %s: started by an MPI launcher, but this build has no MPI "
            "(install libopenmpi-dev and build with SHARDCHECK_MPI=ON; docs/scaling-out.md)\n",
            cmd);
    return CLI_USAGE;
  }
  if (sc_mpi_init(&err) != SC_OK) return cli_fail(cmd, SC_INVALID, &err);
  atexit(mpi_end);
  // the first collective: a rank that never gets here holds the others until the launcher
  // ends the job; 120 s covers a slow host's start
  if (sc_mpi_check_same_build(120000000000ull, &err) != SC_OK) {
    if (sc_mpi_rank() == 0) cli_fail(cmd, SC_INVALID, &err);
    return CLI_USAGE;
  }
  *mpi = sc_mpi_size() > 1;
  return CLI_OK;
}

bool cli_parse_int(const char *s, long lo, long hi, int *out) {
  if (!s || !*s) return false;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || v < lo || v > hi) return false;
  *out = (int)v;
  return true;
}

bool cli_parse_double(const char *s, double lo, double hi, double *out) {
  if (!s || !*s) return false;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || *end || !(v >= lo && v <= hi)) return false;
  *out = v;
  return true;
}

bool cli_parse_pct(const char *s, double *out) {
  char buf[32];
  size_t n = strlen(s);
  if (n == 0 || n >= sizeof buf) return false;
  memcpy(buf, s, n + 1);
  bool pct = buf[n - 1] == '%';
  if (pct) buf[n - 1] = 0;
  if (!cli_parse_double(buf, 0, pct ? 1000 : 10, out)) return false;
  if (pct) *out /= 100;
  return true;
}

bool cli_parse_u64(const char *s, uint64_t *out) {
  if (!s || !*s || *s == '-' || *s == '+') return false;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end) return false;
  *out = (uint64_t)v;
  return true;
}

void cli_print_wrapped(FILE *f, const char *text, int indent, int width) {
  int col = indent;
  while (*text) {
    int word = (int)strcspn(text, " ");
    if (col > indent && col + 1 + word > width) {
      fprintf(f, "\n%*s", indent, "");
      col = indent;
    } else if (col > indent) {
      fputc(' ', f);
      col++;
    }
    fprintf(f, "%.*s", word, text);
    col += word;
    text += word;
    while (*text == ' ') text++;
  }
  fputc('\n', f);
}

void cli_print_names(FILE *f, const char *what, int (*names_fn)(const char **, int)) {
  const char *names[64];
  int n = names_fn(names, 64);
  if (n > 64) n = 64;
  fprintf(f, "%s:", what);
  for (int i = 0; i < n; i++) fprintf(f, "%s %s", i ? "," : "", names[i]);
  fprintf(f, "%s\n", n ? "" : " (none)");
}

// --- shipped scenarios

sc_status cli_scenario_path(const char *arg, char *out, size_t cap, sc_error *err) {
  struct stat st;
  if (stat(arg, &st) == 0 || yaml_map_is_path(arg)) { // a file, or one the loader will report
    if ((size_t)snprintf(out, cap, "%s", arg) >= cap)
      return sc_fail(err, SC_INVALID, "scenario path too long: %s", arg);
    return SC_OK;
  }
  char rel[512], tried[2 * PATH_MAX + 64];
  if ((size_t)snprintf(rel, sizeof rel, "scenarios/%s.yaml", arg) < sizeof rel &&
      paths_data_file(rel, out, cap))
    return SC_OK;
  if (out[0]) {
    snprintf(tried, sizeof tried, "no %s", out);
  } else {
    char where[2 * PATH_MAX];
    paths_data_looked(where, sizeof where);
    snprintf(tried, sizeof tried, "no shared data directory (looked for %s)", where);
  }
  out[0] = 0;
  return sc_fail(err, SC_INVALID, "scenario '%s': no such file here, and not a shipped "
                 "scenario: %s", arg, tried);
}

// Prints prefix + the stem of every DIR/*.yaml, one a line, in name order.
static void print_yaml_stems(FILE *f, const char *dir, const char *prefix) {
  struct dirent **ents = NULL;
  int n = scandir(dir, &ents, NULL, alphasort);
  for (int i = 0; i < n; i++) {
    const char *name = ents[i]->d_name;
    size_t len = strlen(name);
    if (len > 5 && !strcmp(name + len - 5, ".yaml"))
      fprintf(f, "%s%.*s\n", prefix, (int)(len - 5), name);
    free(ents[i]);
  }
  free(ents);
}

void cli_print_scenario_names(FILE *f) {
  const char *root = paths_data_root();
  char dir[PATH_MAX];
  if (!root || (size_t)snprintf(dir, sizeof dir, "%s/scenarios", root) >= sizeof dir) return;
  print_yaml_stems(f, dir, "");
  struct dirent **ents = NULL;
  int n = scandir(dir, &ents, NULL, alphasort);
  for (int i = 0; i < n; i++) {
    const char *name = ents[i]->d_name;
    char sub[PATH_MAX], prefix[300];
    struct stat st;
    if (name[0] != '.' && strcmp(name, "hardware") && strcmp(name, "models") &&
        (size_t)snprintf(sub, sizeof sub, "%s/%s", dir, name) < sizeof sub &&
        stat(sub, &st) == 0 && S_ISDIR(st.st_mode)) {
      snprintf(prefix, sizeof prefix, "%s/", name);
      print_yaml_stems(f, sub, prefix);
    }
    free(ents[i]);
  }
  free(ents);
}

// --- the source revision

void cli_git_rev(char *rev, size_t cap) {
  rev[0] = 0;
  const char *env = getenv("SHARDCHECK_GIT_REV");
  if (env && *env) {
    snprintf(rev, cap, "%s", env);
    return;
  }
  FILE *p = popen("git rev-parse --short HEAD 2>/dev/null", "r");
  if (!p) return;
  if (!fgets(rev, (int)cap, p)) rev[0] = 0;
  char sink[256];
  while (fread(sink, 1, sizeof sink, p)) {
  }
  if (pclose(p) != 0) rev[0] = 0;
  size_t n = strlen(rev);
  while (n && (rev[n - 1] == '\n' || rev[n - 1] == '\r' || rev[n - 1] == ' ')) rev[--n] = 0;
}
