// `shardcheck runs`: lists the runs in a results database, newest first, as a table or (--json)
// one JSON object.
//
// Reading and the "incomplete" status are reports/store.c; the columns are explained in
// docs/schema.md. This file parses arguments and prints.
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "reports/store.h"

#define RUNS_DEFAULT_LIMIT 50

// --- usage

static void usage(FILE *f) {
  fprintf(f,
          "usage: shardcheck runs [--db PATH] [--json] [--limit N]\n\n"
          "Lists the runs recorded in a results database, newest first: id, scenario, mode,\n"
          "status, start time (UTC), verdict, git revision, and whether the run is a baseline.\n\n"
          "  -d, --db PATH    the results database (default results.db); it is only read\n"
          "  -n, --limit N    show the newest N runs (default %d; 0 shows all)\n"
          "      --json       print one JSON object instead of the table\n"
          "  -h, --help       this text\n\n"
          "Statuses: running (its process is alive on this host), complete, interrupted,\n"
          "failed, incomplete (recorded as running, but its process is gone or ran on another\n"
          "host: killed before it could finish; the rows it flushed are kept).\n"
          "Verdicts: pass, fail, - (no SLO, or not finished). Columns: docs/schema.md.\n"
          "exit codes: 0 ok, 2 bad usage, or the database is missing or not a shardcheck\n"
          "results database, 3 runtime failure.\n",
          RUNS_DEFAULT_LIMIT);
}

// --- output

// "2024-05-01T12:34:56Z" -> "2024-05-01 12:34:56"; anything else as it is. buf[32].
static const char *started_text(const char *iso, char *buf) {
  size_t n = strlen(iso);
  if (n != 20 || iso[10] != 'T' || iso[19] != 'Z') return iso;
  memcpy(buf, iso, 19);
  buf[10] = ' ';
  buf[19] = 0;
  return buf;
}

static void print_table(const char *db, const store_run_row *rows, int shown, int total) {
  int w_id = 2, w_sc = 8;
  for (int i = 0; i < shown; i++) {
    int w = snprintf(NULL, 0, "%lld", (long long)rows[i].id);
    if (w > w_id) w_id = w;
    int ws = (int)strlen(rows[i].scenario);
    if (ws > w_sc) w_sc = ws;
  }
  printf("%*s  %-*s  %-4s  %-11s  %-19s  %-7s  %-9s  %s\n", w_id, "id", w_sc, "scenario",
         "mode", "status", "started (UTC)", "verdict", "git rev", "baseline");
  for (int i = 0; i < shown; i++) {
    const store_run_row *r = &rows[i];
    char buf[32], line[512];
    int n = snprintf(line, sizeof line, "%*lld  %-*s  %-4s  %-11s  %-19s  %-7s  %-9s  %s", w_id,
                     (long long)r->id, w_sc, r->scenario, r->mode, r->status,
                     started_text(r->started_at, buf), r->verdict[0] ? r->verdict : "-",
                     r->git_rev[0] ? r->git_rev : "-", r->baseline ? "yes" : "");
    if (n > (int)sizeof line - 1) n = (int)sizeof line - 1;
    while (n > 0 && line[n - 1] == ' ') line[--n] = 0; // no trailing blanks
    printf("%s\n", line);
  }
  if (shown < total)
    printf("(the newest %d of %d runs in %s; --limit 0 shows all)\n", shown, total, db);
}

static int print_json(const char *db, const store_run_row *rows, int shown, int total) {
  json_t *runs = json_array();
  for (int i = 0; runs && i < shown; i++) {
    const store_run_row *r = &rows[i];
    json_t *o = json_pack("{s:I, s:s, s:s, s:s, s:s, s:o, s:o, s:b}", "id", (json_int_t)r->id,
                          "scenario", r->scenario, "mode", r->mode, "status", r->status,
                          "started_at", r->started_at, "verdict",
                          r->verdict[0] ? json_string(r->verdict) : json_null(), "git_rev",
                          r->git_rev[0] ? json_string(r->git_rev) : json_null(), "baseline",
                          r->baseline);
    if (!o || json_array_append_new(runs, o)) {
      json_decref(runs);
      runs = NULL;
    }
  }
  json_t *root = runs ? json_pack("{s:s, s:i, s:o}", "db", db, "total", total, "runs", runs)
                      : NULL;
  if (!root) {
    fprintf(stderr, "shardcheck runs: out of memory building JSON\n");
    return CLI_RUNTIME;
  }
  json_dumpf(root, stdout, JSON_INDENT(2));
  printf("\n");
  json_decref(root);
  return CLI_OK;
}

// --- the command

int cmd_runs(int argc, char **argv) {
  enum { OPT_JSON = 1000 };
  static const struct option opts[] = {
      {"db", required_argument, NULL, 'd'},
      {"limit", required_argument, NULL, 'n'},
      {"json", no_argument, NULL, OPT_JSON},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  const char *db = "results.db";
  int limit = RUNS_DEFAULT_LIMIT;
  bool json = false;
  optind = 0; // glibc: full re-initialisation, in case another command parsed before
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":d:n:h", opts, NULL)) != -1) {
    switch (c) {
    case 'd': db = optarg; break;
    case 'n':
      if (!cli_parse_int(optarg, 0, 1000000000, &limit))
        return cli_usage_error("runs", "--limit must be an integer >= 0, got", optarg);
      break;
    case OPT_JSON: json = true; break;
    case 'h': usage(stdout); return CLI_OK;
    case ':': return cli_usage_error("runs", "missing value for", argv[optind - 1]);
    default:
      if (optopt) {
        char o[3] = {'-', (char)optopt, 0};
        return cli_usage_error("runs", "unknown option", o);
      }
      return cli_usage_error("runs", "unknown option", argv[optind - 1]);
    }
  }
  if (optind < argc) return cli_usage_error("runs", "unexpected argument", argv[optind]);

  sc_error err = {{0}};
  store *s = NULL;
  sc_status st = store_open_readonly(db, &s, &err);
  if (st != SC_OK) return cli_fail("runs", st, &err);
  int total = store_runs_list(s, NULL, 0, &err);
  if (total < 0) {
    store_close(s);
    fprintf(stderr, "shardcheck runs: %s\n", err.msg);
    return CLI_RUNTIME;
  }
  int cap = limit == 0 || limit > total ? total : limit;
  store_run_row *rows = cap ? calloc((size_t)cap, sizeof *rows) : NULL;
  if (cap && !rows) {
    store_close(s);
    fprintf(stderr, "shardcheck runs: out of memory for %d runs\n", cap);
    return CLI_RUNTIME;
  }
  int n = cap ? store_runs_list(s, rows, cap, &err) : total;
  store_close(s);
  if (n < 0) {
    free(rows);
    fprintf(stderr, "shardcheck runs: %s\n", err.msg);
    return CLI_RUNTIME;
  }
  if (n < cap) cap = n; // runs deleted between the two reads
  int rc = CLI_OK;
  if (json) rc = print_json(db, rows, cap, n);
  else if (n == 0) printf("no runs in %s\n", db);
  else print_table(db, rows, cap, n);
  free(rows);
  return rc;
}
