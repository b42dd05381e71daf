// `shardcheck validate FILE...`: checks scenario files without running them and prints one
// line per file: what the scenario would run (deployments, phases, faults, SLOs, time), or the
// first error as FILE:LINE:COL with the key and what was expected.
//
// Parsing and every check are the scenario parser's (scenarios/scenario.c and a file per
// section; keys in docs/scenarios.md); the dataset's
// lines are read by the workload generator (scenarios/workload.c, hooked in below). This file
// parses arguments and prints.
#include <ctype.h>
#include <getopt.h>
#include <stdarg.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/model.h"
#include "runner/runner.h"
#include "scenarios/scenario.h"
#include "scenarios/workload.h"

// --- usage

static void usage(FILE *f) {
  fprintf(f,
          "usage: shardcheck validate [--quiet] FILE...\n\n"
          "Checks scenario files without running anything: every key is known and has the\n"
          "right type and range (unknown keys are errors), every deployment is accepted by the\n"
          "memory planner on the scenario's hardware profile, every fault names a phase and a\n"
          "replica or rank that exists, every SLO names a metric. Each error is one line,\n"
          "FILE:LINE:COL: key 'K': expected ..., got .... The reference for every key is\n"
          "docs/scenarios.md. A FILE that does not exist and has no .yaml ending is the name of\n"
          "a shipped scenario (`shardcheck help --list scenarios`), e.g. quickstart.\n\n"
          "For a valid file it prints one line: the scenario's name, mode, model, deployments,\n"
          "phases, faults, SLOs and the expected time per deployment.\n\n"
          "  -q, --quiet   print nothing for a valid file (errors are still printed)\n"
          "  -h, --help    this text\n\n"
          "exit codes: 0 every file is valid, 2 a file is invalid or unreadable, or bad usage,\n"
          "3 runtime failure (out of memory).\n");
}

// --- the summary line

// "250us", "500ms", "30s", "2m", "1h": the largest unit that divides ns exactly.
static void fmt_dur(uint64_t ns, char *buf, size_t cap) {
  static const struct {
    uint64_t ns;
    const char *unit;
  } units[] = {{3600000000000ull, "h"}, {60000000000ull, "m"}, {1000000000ull, "s"},
               {1000000ull, "ms"},      {1000ull, "us"}};
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (ns && ns % units[i].ns == 0) {
      snprintf(buf, cap, "%llu%s", (unsigned long long)(ns / units[i].ns), units[i].unit);
      return;
    }
  snprintf(buf, cap, "%lluns", (unsigned long long)ns);
}

// Appends printf output to buf[*len..cap).
__attribute__((format(printf, 4, 5))) static void add(char *buf, size_t cap, size_t *len,
                                                      const char *fmt, ...) {
  if (*len >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + *len, cap - *len, fmt, ap);
  va_end(ap);
  if (n > 0) *len += (size_t)n;
}

static void describe_phase(const scn_phase *p, char *buf, size_t cap, size_t *len) {
  char d[32];
  // a name the user chose comes first; default names ("ramp", "rate-8", "fixed-2") say
  // nothing the description does not
  const char *kind = scenario_phase_kind_name(p->kind);
  size_t kl = strlen(kind);
  const char *rest = p->name + kl;
  bool default_name = !strncmp(p->name, kind, kl) &&
                      (!*rest || (rest[0] == '-' && isdigit((unsigned char)rest[1])));
  if (!default_name) add(buf, cap, len, "%s: ", p->name);
  switch (p->kind) {
  case SCN_PHASE_RAMP:
    fmt_dur(p->hold_ns, d, sizeof d);
    if (p->n_concurrency == 1)
      add(buf, cap, len, "ramp %d user%s x %s", p->concurrency[0],
          p->concurrency[0] == 1 ? "" : "s", d);
    else
      add(buf, cap, len, "ramp %d..%d users in %d steps x %s", p->concurrency[0],
          p->concurrency[p->n_concurrency - 1], p->n_concurrency, d);
    break;
  case SCN_PHASE_RATE: {
    add(buf, cap, len, "rate %g/s %s", p->rate, workload_arrival_name(p->arrival));
    if (p->duration_ns) {
      fmt_dur(p->duration_ns, d, sizeof d);
      add(buf, cap, len, " for %s", d);
    } else {
      add(buf, cap, len, " for %d requests", p->requests);
    }
    break;
  }
  case SCN_PHASE_FIXED:
    add(buf, cap, len, "fixed %d requests at %d user%s", p->requests, p->concurrency[0],
        p->concurrency[0] == 1 ? "" : "s");
    break;
  }
}

static void print_summary(const char *path, const scenario *s) {
  char line[4096];
  size_t len = 0;
  const size_t cap = sizeof line;
  const scn_model *m = &s->model;
  if (s->target.set) {
    const scn_target *t = &s->target;
    add(line, cap, &len, "%s: ok: scenario '%s', target openai (%s, model %s, %s%s%s)", path,
        s->name, t->api == SCN_API_CHAT ? "chat" : "completions", t->model,
        t->launch[0] ? "launched per replica, url " : "url ", t->url,
        s->hardware.n_devices ? ", GPUs from hardware.devices" : "");
  } else {
  add(line, cap, &len, "%s: ok: scenario '%s', mode %s, model %s (%s, %s)", path, s->name,
      s->mode == SCN_MODE_SIM ? "sim" : "real", m->config.name,
      m->dtype[0] ? m->dtype : sc_dtype_name(m->config.dtype),
      s->mode == SCN_MODE_SIM ? "shapes only"
      : m->has_weights        ? "weights from disk"
                              : "generated weights");
  }
  const scn_hardware *h = &s->hardware;
  if (s->target.set) {
    // nothing of shardcheck's own hardware is used
  } else if (s->mode == SCN_MODE_SIM) {
    add(line, cap, &len, ", %d simulated GPU%s (profile %s", h->gpus, h->gpus == 1 ? "" : "s",
        h->profile);
    if (h->link[0]) add(line, cap, &len, ", link %s", h->link);
    if (h->nodes) add(line, cap, &len, ", %d node%s", h->nodes, h->nodes == 1 ? "" : "s");
    add(line, cap, &len, ")");
  } else {
    add(line, cap, &len, ", backend %s (profile %s)", h->backend,
        h->profile[0] ? h->profile : "none: memory not checked");
  }
  add(line, cap, &len, ", %d deployment%s (", s->n_deployments, s->n_deployments == 1 ? "" : "s");
  for (int i = 0; i < s->n_deployments; i++)
    add(line, cap, &len, "%s%s", i ? ", " : "", s->deployments[i].label);
  const scn_workload *w = &s->workload;
  if (w->dataset[0])
    add(line, cap, &len, "), prompts from %s", w->dataset);
  else
    add(line, cap, &len, "), %d prompt class%s", w->n_classes, w->n_classes == 1 ? "" : "es");
  add(line, cap, &len, ", %d phase%s: ", w->n_phases, w->n_phases == 1 ? "" : "s");
  uint64_t known_ns = 0;
  long long counted = 0;
  for (int i = 0; i < w->n_phases; i++) {
    if (i) add(line, cap, &len, ", ");
    describe_phase(&w->phases[i], line, cap, &len);
    known_ns += scenario_phase_duration_ns(&w->phases[i]);
    counted += scenario_phase_requests(&w->phases[i]);
  }
  add(line, cap, &len, "; %d fault%s, %d SLO%s", s->n_faults, s->n_faults == 1 ? "" : "s",
      s->slo.n, s->slo.n == 1 ? "" : "s");
  for (int i = 0; i < s->slo.n_classes; i++) // "2 SLOs, 1 of class short and 2 of class long"
    add(line, cap, &len, "%s %d of class %s", i + 1 < s->slo.n_classes ? "," : " and",
        s->slo.classes[i].n, s->slo.classes[i].name);
  double secs = (double)known_ns / 1e9;
  if (known_ns && counted)
    add(line, cap, &len, "; ~%.0f s plus %lld counted requests per deployment", secs, counted);
  else if (known_ns)
    add(line, cap, &len, "; ~%.0f s per deployment", secs);
  else
    add(line, cap, &len, "; %lld requests per deployment", counted);
  if (len >= cap) len = cap - 1;
  printf("%.*s\n", (int)len, line);
}

// --- the command

// Validates one file; returns its exit code.
static int validate_one(const char *arg, bool quiet) {
  scenario *s = NULL;
  sc_error err = {{0}};
  char path[PATH_MAX];
  sc_status st = cli_scenario_path(arg, path, sizeof path, &err);
  if (st == SC_OK) st = scenario_load(path, &s, &err);
  if (st != SC_OK) return cli_fail("validate", st, &err);
  // The dataset's lines are the workload generator's to read: building it here makes a bad
  // line fail `validate` with its FILE:LINE exactly as `run` would.
  workload *wl = NULL;
  st = runner_check_dtypes(s, &err);
  if (st == SC_OK) st = workload_new(s, s->seed, &wl, &err);
  workload_free(wl);
  if (st != SC_OK) {
    scenario_free(s);
    return cli_fail("validate", st, &err);
  }
  for (int i = 0; i < s->n_warnings; i++) fprintf(stderr, "warning: %s\n", s->warnings[i]);
  if (!quiet) print_summary(path, s);
  scenario_free(s);
  return CLI_OK;
}

int cmd_validate(int argc, char **argv) {
  static const struct option opts[] = {
      {"quiet", no_argument, NULL, 'q'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  bool quiet = false;
  optind = 0; // glibc: full re-initialisation, in case another command parsed before
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":qh", opts, NULL)) != -1) {
    switch (c) {
    case 'q': quiet = true; break;
    case 'h': usage(stdout); return CLI_OK;
    default:
      if (optopt) {
        char o[3] = {'-', (char)optopt, 0};
        return cli_usage_error("validate", "unknown option", o);
      }
      return cli_usage_error("validate", "unknown option", argv[optind - 1]);
    }
  }
  if (optind >= argc) return cli_usage_error("validate", "missing FILE (a scenario .yaml)", NULL);
  int rc = CLI_OK;
  for (int i = optind; i < argc; i++) {
    int r = validate_one(argv[i], quiet);
    if (r > rc) rc = r;
  }
  return rc;
}
