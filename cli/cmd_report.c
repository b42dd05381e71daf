// `shardcheck report`: plots (PNG + SVG with the gnuplot script and data behind each) and a
// self-contained index.html for one or several runs of a results database; optionally JUnit XML.
// With --history SCENARIO: the scenario's gated metrics over all its runs instead.
//
// This file parses arguments, opens the database read-only and prints where things went, then
// the predicted vs measured tables when the runs include a sim run and a real run of the same
// scenario; the report itself is reports/report*.c (report_write, report_junit_write,
// report_compare, report_history_write).
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "reports/report.h"
#include "reports/store.h"

enum { REPORT_MAX_RUNS = 64 };

static void usage(FILE *f) {
  fprintf(f,
          "usage: shardcheck report [--db PATH] [--run ID]... [--out DIR] [--junit PATH]\n"
          "       shardcheck report [--db PATH] --history NAME [--out DIR]\n\n"
          "Writes the report of one run, or of several side by side (e.g. predicted vs\n"
          "measured), from a results database: five plots, each as PNG and SVG with the\n"
          "gnuplot script and data file behind it (scaling vs GPUs, TTFT vs concurrency,\n"
          "TPOT and throughput vs concurrency, a timeline with phase and fault markers,\n"
          "KV-cache use per replica; a sixth, TTFT vs prefix cache hit rate, when a phase\n"
          "measured it), and index.html: one self-contained page with the\n"
          "verdict, the tables, the plots and the scenario text.\n\n"
          "Predicted vs measured: when the runs include a sim run and a real run of the\n"
          "same scenario, each such pair is compared deployment by deployment (same\n"
          "label): mean and p95 TTFT, TPOT and E2EL, output tokens/s and the busy fraction\n"
          "of each deployment, mean TTFT and TPOT of each phase (same name), with error =\n"
          "(predicted - measured) / measured. The tables are printed here, ending with a line\n"
          "\"mean |error|: TTFT x%%, TPOT y%%, ...\" over the deployments, and index.html\n"
          "gets a section \"Predicted vs measured\". With two or more real runs of that\n"
          "scenario, the real runs are then compared with each other the same way, each\n"
          "as if it predicted another (\"mean |difference|\" per pair, and its range): a\n"
          "prediction is not expected to come closer to a real run than that.\n\n"
          "History (--history NAME): every run of the scenario named NAME, in start\n"
          "order, instead of single runs: one plot per gated metric (TTFT, TPOT, ITL, E2EL\n"
          "p50 and p95, output tok/s, goodput, error rate, lost requests, KV peak, fault\n"
          "detection and recovery; each when some run has it) of each deployment's pooled\n"
          "value per complete run, x = the run's start labelled with its git revision. The\n"
          "runs of a repetition group (run --repeat) make one point: their median with\n"
          "min-max bars. Baseline runs are circled. Files: history-METRIC.{dat,gp,png,svg}\n"
          "and history.html (the runs, the plots, a table per metric).\n\n"
          "  -d, --db PATH       results database (default results.db)\n"
          "  -r, --run ID        a run to report; repeat for several, up to %d (default: the\n"
          "                      newest run)\n"
          "      --history NAME  the history of scenario NAME (not with --run or --junit)\n"
          "  -o, --out DIR       output directory, created when absent (default\n"
          "                      reports/out/run-ID, or reports/out/runs-ID-ID... for several,\n"
          "                      or reports/out/history-NAME)\n"
          "      --junit PATH    also write JUnit XML of the run: one testcase per deployment x\n"
          "                      SLO (one run only)\n"
          "      --gnuplot PROG  the gnuplot program (default $SHARDCHECK_GNUPLOT, else gnuplot\n"
          "                      on PATH)\n"
          "  -h, --help          this text\n\n"
          "Without gnuplot the data files, scripts and the page (index.html or history.html:\n"
          "tables, no plots) are still written, a warning says the plots were skipped, and\n"
          "the exit code is unaffected.\n"
          "exit codes: 0 ok, 2 bad input or usage (no database, unknown run, a scenario with\n"
          "no runs), 3 runtime failure.\n",
          REPORT_MAX_RUNS);
}

// A directory name from a scenario name: characters other than letters, digits, '.', '-' and
// '_' become '_'.
static void history_dir(const char *scenario, char *dir, size_t n) {
  int len = snprintf(dir, n, "reports/out/history-");
  for (const char *p = scenario; *p && len + 1 < (int)n; p++) {
    char ch = *p;
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '-' || ch == '_';
    dir[len++] = ok ? ch : '_';
  }
  dir[len] = 0;
}

// `report --history SCENARIO`.
static int report_history(const char *db_path, const char *scenario, const char *out,
                          const char *gnuplot) {
  sc_error err = {{0}};
  store *s = NULL;
  sc_status st = store_open_readonly(db_path, &s, &err);
  if (st != SC_OK) return cli_fail("report", st, &err);
  char dir[1024];
  if (!out) {
    history_dir(scenario, dir, sizeof dir);
    out = dir;
  }
  report_history_options o = {
      .scenario = scenario, .out_dir = out, .gnuplot = gnuplot, .db_name = db_path};
  report_history_result res;
  st = report_history_write(store_db(s), &o, &res, &err);
  store_close(s);
  if (st != SC_OK) return cli_fail("report", st, &err);
  if (res.plots_skipped)
    fprintf(stderr, "shardcheck report: warning: plots skipped: %s\n", res.why);
  printf("history: %s (%d run%s, %d plotted as %d point%s; %d metric%s, %d plot%s)\n",
         res.page_path, res.n_runs, res.n_runs == 1 ? "" : "s", res.n_plotted, res.n_points,
         res.n_points == 1 ? "" : "s", res.n_metrics, res.n_metrics == 1 ? "" : "s", res.n_plots,
         res.n_plots == 1 ? "" : "s");
  return CLI_OK;
}

int cmd_report(int argc, char **argv) {
  enum { OPT_JUNIT = 1000, OPT_GNUPLOT, OPT_HISTORY };
  static const struct option opts[] = {
      {"db", required_argument, NULL, 'd'},
      {"run", required_argument, NULL, 'r'},
      {"out", required_argument, NULL, 'o'},
      {"junit", required_argument, NULL, OPT_JUNIT},
      {"gnuplot", required_argument, NULL, OPT_GNUPLOT},
      {"history", required_argument, NULL, OPT_HISTORY},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  const char *db_path = "results.db", *out = NULL, *junit = NULL, *gnuplot = NULL,
             *history = NULL;
  int64_t runs[REPORT_MAX_RUNS];
  int n_runs = 0;
  optind = 0; // glibc: full re-initialisation, in case another command parsed before
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":d:r:o:h", opts, NULL)) != -1) {
    switch (c) {
    case 'd': db_path = optarg; break;
    case 'r': {
      uint64_t id;
      if (!cli_parse_u64(optarg, &id) || id == 0 || id > INT64_MAX)
        return cli_usage_error("report", "--run must be a run id (a positive integer), got",
                               optarg);
      if (n_runs == REPORT_MAX_RUNS)
        return cli_usage_error("report", "too many --run options; the most is", "64");
      runs[n_runs++] = (int64_t)id;
      break;
    }
    case 'o': out = optarg; break;
    case OPT_JUNIT: junit = optarg; break;
    case OPT_GNUPLOT: gnuplot = optarg; break;
    case OPT_HISTORY: history = optarg; break;
    case 'h': usage(stdout); return CLI_OK;
    case ':': return cli_usage_error("report", "missing value for", argv[optind - 1]);
    default:
      if (optopt) {
        char o[3] = {'-', (char)optopt, 0};
        return cli_usage_error("report", "unknown option", o);
      }
      return cli_usage_error("report", "unknown option", argv[optind - 1]);
    }
  }
  if (optind < argc) return cli_usage_error("report", "unexpected argument", argv[optind]);
  if (!*db_path) return cli_usage_error("report", "--db must name a file", NULL);
  if (out && !*out) return cli_usage_error("report", "--out must name a directory", NULL);
  if (junit && !*junit) return cli_usage_error("report", "--junit must name a file", NULL);
  if (junit && n_runs > 1)
    return cli_usage_error("report", "--junit takes one run; drop it or give one --run", NULL);
  if (history && !*history)
    return cli_usage_error("report", "--history must name a scenario", NULL);
  if (history && (n_runs || junit))
    return cli_usage_error("report", "--history takes no --run or --junit", NULL);
  if (history) return report_history(db_path, history, out, gnuplot);

  sc_error err = {{0}};
  store *s = NULL;
  sc_status st = store_open_readonly(db_path, &s, &err);
  if (st != SC_OK) return cli_fail("report", st, &err);

  // Check every run up front (so nothing is written for a bad id) and find the newest.
  store_run_row row;
  for (int i = 0; i < n_runs && st == SC_OK; i++) st = store_run_get(s, runs[i], &row, &err);
  if (st == SC_OK && n_runs == 0) {
    int n = store_runs_list(s, &row, 1, &err);
    if (n < 0) st = SC_IO;
    else if (n == 0) st = sc_fail(&err, SC_INVALID, "no runs in %s", db_path);
    else runs[n_runs++] = row.id;
  }
  if (st != SC_OK) {
    store_close(s);
    return cli_fail("report", st, &err);
  }

  char dir[1024];
  if (!out) {
    int len = snprintf(dir, sizeof dir, "reports/out/run%s", n_runs > 1 ? "s" : "");
    for (int i = 0; i < n_runs && len < (int)sizeof dir; i++)
      len += snprintf(dir + len, sizeof dir - (size_t)len, "-%lld", (long long)runs[i]);
    out = dir;
  }
  report_options o = {.out_dir = out, .run_ids = runs, .n_runs = n_runs, .gnuplot = gnuplot};
  report_result res;
  report_comparison cmp = {0};
  st = report_write(store_db(s), &o, &res, &err);
  if (st == SC_OK && junit) st = report_junit_write(store_db(s), runs[0], junit, &err);
  if (st == SC_OK) st = report_compare(store_db(s), runs, n_runs, &cmp, &err);
  store_close(s);
  if (st != SC_OK) return cli_fail("report", st, &err);
  if (res.plots_skipped)
    fprintf(stderr, "shardcheck report: warning: plots skipped: %s\n", res.why);
  printf("report: %s (%d plot%s)\n", res.index_path, res.n_plots, res.n_plots == 1 ? "" : "s");
  if (junit) printf("junit: %s\n", junit);
  if (cmp.n_pairs) {
    putchar('\n');
    report_print_comparison(&cmp, stdout);
  }
  report_comparison_free(&cmp);
  return CLI_OK;
}
