// `shardcheck run FILE`: runs a scenario, records it, writes the report, prints the verdict.
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "kernels/mpi.h"
#include "reports/report.h"
#include "reports/store.h"
#include "runner/runner.h"
#include "scenarios/scenario.h"

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
  (void)sig;
  interrupted = 1;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: shardcheck run FILE [--db PATH] [--out DIR] [--seed N] [--junit PATH]\n"
          "                      [--mode real|sim] [--profile NAME|FILE.yaml]\n"
          "                      [--repeat N] [--group RUN] [--sensitivity PCT] [--quiet]\n"
          "                      [--no-report] [--record tokens|requests|summary]\n\n"
          "Runs the scenario FILE: every deployment in turn, every phase of its workload, on\n"
          "the real engine (mode real) or on simulated GPUs in virtual time (mode sim). Every\n"
          "request, token time, engine step and device sample goes to the SQLite database\n"
          "(fewer with --record);\n"
          "at the end the metrics, the SLO verdicts, the plots and index.html are written,\n"
          "and the verdict table is printed. A FILE that does not exist and has no .yaml\n"
          "ending is the name of a shipped scenario (`shardcheck help --list scenarios`),\n"
          "e.g. quickstart.\n\n"
          "  --db PATH      results database, created when absent (default results.db)\n"
          "  --out DIR      report directory (default reports/out/run-<id>/)\n"
          "  --seed N       override the scenario's seed\n"
          "  --junit PATH   also write JUnit XML: one testcase per deployment x SLO\n"
          "  --mode M       override the scenario's mode: real, or sim (the same deployments\n"
          "                 and workload on simulated devices of the scenario's profile)\n"
          "  --profile P    override hardware.profile: an embedded name or a profile YAML,\n"
          "                 e.g. one written by `shardcheck profile`\n"
          "  --repeat N     run it N times (1..64), each a run of its own, recorded as one\n"
          "                 repetition group that `shardcheck gate` judges as a whole (the\n"
          "                 report is written for the last repetition)\n"
          "  --group RUN    add the repetitions to the repetition group of run RUN in the same\n"
          "                 database (same scenario and mode) instead of starting a new one:\n"
          "                 groups recorded in turns, a repetition of each at a time, share\n"
          "                 the machine's drift (docs/gate.md)\n"
          "  --sensitivity PCT  sim only: run the scenario twice more with every price of\n"
          "                 the profile PCT lower and higher (e.g. 2%%), print how far each\n"
          "                 deployment's mean TTFT and TPOT move, and store the larger move\n"
          "                 over PCT as ttft_sensitivity and tpot_sensitivity: near 1, the\n"
          "                 latencies follow the prices; several, the load queues, and a\n"
          "                 small pricing error is a large latency error\n"
          "                 (docs/simulator.md)\n"
          "  --quiet        no progress lines or notes (the verdict table is still printed)\n"
          "  --no-report    skip the plots and index.html (`shardcheck report` makes them\n"
          "                 later)\n"
          "  --record L     override the scenario's record key: what rows the run writes\n"
          "                 besides its summaries (metrics, verdicts): tokens (default: request,\n"
          "                 token, step and device-sample rows), requests (request and\n"
          "                 device-sample rows only), summary (none of them). The metrics are\n"
          "                 the same at every level; plots drawn from token or step rows are\n"
          "                 empty below tokens, and scenarios with faults need tokens\n"
          "                 (docs/schema.md)\n\n"
          "Ctrl-C stops cleanly: requests in flight are recorded as cancelled and the run as\n"
          "interrupted.\n"
          "Under `mpirun -np N` (a scenario with a target, mode real, no faults) the N ranks\n"
          "share the requests: each streams its share from its own process, and rank 0 writes\n"
          "the one database (docs/scaling-out.md). With --sensitivity (mode sim) they share\n"
          "the run and its two scaled runs instead; the output is that of one process.\n"
          "exit codes: 0 every SLO holds, 1 an SLO failed, 2 bad input, 3 the run failed,\n"
          "130 interrupted.\n");
}

// The --sensitivity table: per deployment, the change of mean TTFT and TPOT at each price.
static void print_sensitivity(const runner_sensitivity *sv, FILE *f) {
  fprintf(f, "\nsensitivity: every price x%g and x%g; change of mean TTFT and TPOT, and the larger "
          "over %g%%\n", 1 - sv->frac, 1 + sv->frac, sv->frac * 100);
  fprintf(f, "  %-12s %18s %18s %8s %8s\n", "deployment", "TTFT", "TPOT", "TTFT x", "TPOT x");
  for (int d = 0; d < sv->n; d++) {
    const runner_sensitivity_row *r = &sv->rows[d];
    char cell[2][48];
    for (int k = 0; k < 2; k++)
      snprintf(cell[k], sizeof cell[k], "%+.1f%% / %+.1f%%", r->change[0][k] * 100,
               r->change[1][k] * 100);
    fprintf(f, "  %-12s %18s %18s %8.2f %8.2f\n", r->label, cell[0], cell[1], r->sens[0],
            r->sens[1]);
  }
}

// Under an MPI launcher with --sensitivity (sim): this rank of the job (0 runs the scenario;
// every rank runs its share of the scaled runs, runner_sensitivity_share), and whether this rank
// took part in the sharing's gather already (else it must, to release the others).
static int sens_rank = -1; // -1: not shared
static bool sens_gathered;

// One run; under an MPI launcher, rank 0's, its requests dealt out among n_clients ranks (or,
// with --sensitivity, its scaled runs shared among the job's ranks).
static int run_one(int argc, char **argv, int n_clients, replica_client_rank *clients) {
  const char *file = NULL, *db_path = "results.db", *out_dir = NULL, *junit = NULL;
  bool quiet = false, no_report = false;
  int repeat = 1;
  double sens = 0; // --sensitivity: the price change, 0 none
  int64_t join = 0; // --group: a run of the group to add to
  runner_options ro = runner_options_defaults();
  ro.n_clients = n_clients;
  ro.clients = clients;
  scn_overrides ov = {0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    bool has_val = i + 1 < argc;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return CLI_OK;
    } else if (!strcmp(a, "--db") && has_val) {
      db_path = argv[++i];
    } else if (!strcmp(a, "--out") && has_val) {
      out_dir = argv[++i];
    } else if (!strcmp(a, "--junit") && has_val) {
      junit = argv[++i];
    } else if (!strcmp(a, "--seed") && has_val) {
      if (!cli_parse_u64(argv[++i], &ro.seed))
        return cli_usage_error("run", "--seed needs a non-negative integer, got", argv[i]);
      ro.seed_set = true;
    } else if (!strcmp(a, "--mode") && has_val) {
      ov.mode = argv[++i];
      if (strcmp(ov.mode, "real") && strcmp(ov.mode, "sim"))
        return cli_usage_error("run", "--mode needs real or sim, got", ov.mode);
    } else if (!strcmp(a, "--profile") && has_val) {
      ov.profile = argv[++i];
    } else if (!strcmp(a, "--record") && has_val) {
      ov.record = argv[++i];
      scn_record lvl;
      if (!scenario_record_parse(ov.record, &lvl))
        return cli_usage_error("run", "--record needs tokens, requests or summary, got",
                               ov.record);
    } else if (!strcmp(a, "--repeat") && has_val) {
      if (!cli_parse_int(argv[++i], 1, 64, &repeat))
        return cli_usage_error("run", "--repeat needs a count from 1 to 64, got", argv[i]);
    } else if (!strcmp(a, "--group") && has_val) {
      uint64_t v = 0;
      if (!cli_parse_u64(argv[++i], &v) || v == 0 || v > INT64_MAX)
        return cli_usage_error("run", "--group needs a run id, got", argv[i]);
      join = (int64_t)v;
    } else if (!strcmp(a, "--sensitivity") && has_val) {
      if (!cli_parse_pct(argv[++i], &sens) || !(sens > 0 && sens < 0.5))
        return cli_usage_error("run", "--sensitivity needs a price change above 0 and below "
                               "50%, such as 2%, got", argv[i]);
    } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
      quiet = true;
    } else if (!strcmp(a, "--no-report")) {
      no_report = true;
    } else if (a[0] == '-') {
      return cli_usage_error("run", has_val || strncmp(a, "--", 2) ? "unknown option"
                                                                   : "option needs a value",
                             a);
    } else if (file) {
      return cli_usage_error("run", "one scenario file only; extra argument", a);
    } else {
      file = a;
    }
  }
  if (!file) return cli_usage_error("run", "missing the scenario FILE", NULL);
  sc_error err = {{0}};
  scenario *s = NULL;
  char path[PATH_MAX];
  sc_status st = cli_scenario_path(file, path, sizeof path, &err);
  if (st == SC_OK) st = scenario_load_with(path, &ov, &s, &err);
  if (st != SC_OK) return cli_fail("run", st, &err);
  for (int i = 0; i < s->n_warnings && sens_rank <= 0; i++)
    fprintf(stderr, "warning: %s\n", s->warnings[i]);
  if (n_clients > 1 && (!s->target.set || s->mode == SCN_MODE_SIM || s->n_faults > 0)) {
    fprintf(stderr,
            "shardcheck run: %s: %d client ranks share the requests to an external "
            "target's servers (a scenario with `target` in mode real, without faults); "
            "this one %s: start it as one process (docs/scaling-out.md)\n",
            path, n_clients,
            !s->target.set ? "runs its replicas in this process"
            : s->n_faults  ? "has faults"
                           : "is simulated");
    scenario_free(s);
    return CLI_USAGE;
  }
  if (sens > 0 && s->mode != SCN_MODE_SIM) {
    scenario_free(s);
    return cli_usage_error("run", "--sensitivity prices a sim run; this run is real (use --mode "
                           "sim)", NULL);
  }
  if (sens_rank > 0) { // its share of the scaled runs; rank 0 stores, prints and reports
    sens_gathered = true;
    st = runner_sensitivity_share(sens > 0 ? s : NULL, sens, &ro, &err);
    scenario_free(s);
    return st == SC_OK ? CLI_OK : cli_exit_code(st); // a failed run's text travels to rank 0
  }
  store *db = NULL;
  st = store_open(db_path, &db, &err);
  if (st != SC_OK) {
    scenario_free(s);
    return cli_fail("run", st, &err);
  }
  int64_t group = 0;
  int first_index = 0;
  if (join) {
    st = store_group_join(db, join, s->name, s->mode == SCN_MODE_SIM ? "sim" : "real", &group,
                          &first_index, &err);
    if (st != SC_OK) {
      store_close(db);
      scenario_free(s);
      return cli_fail("run", st, &err);
    }
  }
  struct sigaction sa = {.sa_handler = on_sigint}, old_int, old_term;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  char git_rev[CLI_GIT_REV_CAP];
  cli_git_rev(git_rev, sizeof git_rev);
  ro.git_rev = git_rev;
  ro.log_dir = out_dir; // launched servers' logs beside the report (NULL: the default report dir)
  ro.interrupted = &interrupted;
  ro.progress = quiet ? RUNNER_PROGRESS_NONE : RUNNER_PROGRESS_AUTO;
  runner_result res;
  int code = CLI_OK;
  int64_t first_run = 0;
  uint64_t wall0 = 0;
  for (int rep = 0; rep < repeat; rep++) {
    if (repeat > 1 && !quiet) fprintf(stderr, "repetition %d/%d\n", rep + 1, repeat);
    wall0 = sc_monotonic_ns();
    st = runner_run(s, db, &ro, &res, &err);
    if (st == SC_OK && rep == 0) first_run = res.run_id;
    if (st == SC_OK && (repeat > 1 || join)) {
      if (rep == 0 && !join) group = res.run_id;
      st = store_run_set_repeat(db, res.run_id, group, first_index + rep, &err);
    }
    if (st != SC_OK) break;
    int c = !strcmp(res.status, "interrupted") ? 130
            : !strcmp(res.status, "failed")    ? CLI_RUNTIME
            : res.n_failed > 0                 ? CLI_SLO_FAIL
                                               : CLI_OK;
    if (c > code) code = c;
    if (c == 130 || c == CLI_RUNTIME) break;
    if (rep + 1 < repeat && report_print_verdicts(store_db(db), res.run_id, stdout, &err) != SC_OK)
      fprintf(stderr, "shardcheck run: verdict table: %s\n", err.msg);
  }
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  if (st != SC_OK) {
    store_close(db);
    scenario_free(s);
    return cli_fail("run", st, &err);
  }
  double wall = (double)(sc_monotonic_ns() - wall0) / 1e9;
  if (!quiet && s->mode == SCN_MODE_SIM)
    fprintf(stderr, "run %lld %s: %.1f s simulated in %.1f s (%.0fx real time): %llu requests, "
            "%llu output tokens\n", (long long)res.run_id, res.status, res.wall_s, wall,
            wall > 0 ? res.wall_s / wall : 0.0, (unsigned long long)res.requests,
            (unsigned long long)res.tokens);
  else if (!quiet)
    fprintf(stderr, "run %lld %s in %.1f s: %llu requests, %llu output tokens\n",
            (long long)res.run_id, res.status, res.wall_s, (unsigned long long)res.requests,
            (unsigned long long)res.tokens);
  if (res.error[0]) fprintf(stderr, "shardcheck run: %s\n", res.error);
  if (report_print_verdicts(store_db(db), res.run_id, stdout, &err) != SC_OK)
    fprintf(stderr, "shardcheck run: verdict table: %s\n", err.msg);
  if (sens > 0 && !strcmp(res.status, "complete")) { // of the last repetition
    runner_sensitivity sv;
    if (!quiet)
      fprintf(stderr, "sensitivity: running the scenario twice more, every price x%g and x%g%s\n",
              1 - sens, 1 + sens, sens_rank == 0 ? ", over the MPI job's ranks" : "");
    sens_gathered = true;
    if (runner_sensitivity_run(s, db, res.run_id, sens, &ro, &sv, &err) != SC_OK) {
      fprintf(stderr, "shardcheck run: %s\n", err.msg); // its text says "sensitivity: ..."
      code = CLI_RUNTIME;
    } else {
      print_sensitivity(&sv, stdout);
    }
  }
  char dir[1100];
  if (out_dir)
    snprintf(dir, sizeof dir, "%s", out_dir);
  else
    snprintf(dir, sizeof dir, "reports/out/run-%lld", (long long)res.run_id);
  if (!no_report) {
    report_result rr;
    report_options opt = {.out_dir = dir, .run_ids = &res.run_id, .n_runs = 1};
    if (report_write(store_db(db), &opt, &rr, &err) != SC_OK) {
      fprintf(stderr, "shardcheck run: report: %s\n", err.msg);
      if (code == CLI_OK) code = CLI_RUNTIME;
    } else {
      if (rr.plots_skipped) fprintf(stderr, "warning: plots skipped: %s\n", rr.why);
      if (!quiet) fprintf(stderr, "report: %s\n", rr.index_path);
    }
  }
  if (junit && report_junit_write(store_db(db), res.run_id, junit, &err) != SC_OK) {
    fprintf(stderr, "shardcheck run: junit: %s\n", err.msg);
    if (code == CLI_OK) code = CLI_RUNTIME;
  }
  if (!quiet && (repeat > 1 || join)) {
    char runs[64];
    if (repeat > 1)
      snprintf(runs, sizeof runs, "runs %lld-%lld", (long long)first_run, (long long)res.run_id);
    else
      snprintf(runs, sizeof runs, "run %lld", (long long)res.run_id);
    fprintf(stderr, "database: %s (%s: repetition group %lld)\n", db_path, runs,
            (long long)group);
  }
  else if (!quiet)
    fprintf(stderr, "database: %s (run %lld)\n", db_path, (long long)res.run_id);
  store_close(db);
  scenario_free(s);
  return code;
}

// Under an MPI launcher of N ranks: MPI, the same build everywhere, every other rank's clock
// against rank 0's. -1 on rank 0 (*n and *ranks set: it runs the scenario), else the exit status
// (another rank once rank 0 lets it go; any rank when the job cannot start).
static int clients_begin(int *n, replica_client_rank **ranks) {
  sc_error err = {{0}};
  bool several = false;
  int mc = cli_mpi_begin("run", &several); // a build without MPI, ranks of different builds
  if (mc != CLI_OK) return mc;
  *n = sc_mpi_size();
  if (sc_mpi_rank() != 0) {
    int rc = replica_clients_serve();
    sc_mpi_finalize();
    return rc;
  }
  *ranks = calloc((size_t)*n, sizeof **ranks);
  sc_status s =
      *ranks ? replica_clients_sync(*ranks, *n, &err) : sc_fail(&err, SC_OOM, "out of memory");
  if (s != SC_OK) {
    fprintf(stderr, "shardcheck run: %s\n", err.msg);
    replica_clients_quit(*n);
    free(*ranks);
    sc_mpi_finalize();
    return CLI_RUNTIME;
  }
  return -1;
}

// `mpirun -np N shardcheck run --sensitivity PCT`: the run and its scaled runs shared among the
// job's ranks (runner_sensitivity_run); rank 0 alone writes and prints.
static int run_sensitivity_ranks(int argc, char **argv) {
  bool several = false;
  int mc = cli_mpi_begin("run", &several); // a build without MPI, ranks of different builds
  if (mc != CLI_OK) return mc;
  if (!several) return run_one(argc, argv, 1, NULL);
  sens_rank = sc_mpi_rank();
  int rc = run_one(argc, argv, 1, NULL);
  if (!sens_gathered) { // refused, or the run did not complete: the other ranks wait for this
    sc_error err = {{0}};
    runner_sensitivity_share(NULL, 0, NULL, &err);
  }
  sc_mpi_finalize();
  return rc;
}

int cmd_run(int argc, char **argv) {
  if (sc_mpi_launched_size() == 1) return run_one(argc, argv, 1, NULL);
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--sensitivity")) return run_sensitivity_ranks(argc, argv);
  int n = 1;
  replica_client_rank *ranks = NULL;
  int rc = clients_begin(&n, &ranks);
  if (rc >= 0) return rc;
  rc = run_one(argc, argv, n, ranks);
  bool quiet = false;
  for (int i = 1; i < argc; i++) quiet |= !strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q");
  for (int k = 0; k < n && !quiet && rc != CLI_USAGE; k++)
    fprintf(stderr, "client rank %d on %s: %llu requests (clock %+.1f us from rank 0's, round "
            "trip %.1f us)\n", k, ranks[k].host, (unsigned long long)ranks[k].requests,
            (double)ranks[k].offset_ns / 1e3, (double)ranks[k].rtt_ns / 1e3);
  replica_clients_quit(n);
  free(ranks);
  sc_mpi_finalize();
  return rc;
}
