// `shardcheck capacity FILE`: the cheapest GPUs and layout that serve a traffic within its SLO,
// by simulation (runner/capacity.h; docs/capacity.md). Parses the flags, runs the search,
// stores it, prints the table and writes the report.
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "kernels/clock.h"
#include "kernels/mpi.h"
#include "reports/query.h"
#include "reports/report.h"
#include "reports/store.h"
#include "runner/capacity.h"
#include "scenarios/scenario.h"

static void usage(FILE *f) {
  fprintf(f, "usage: shardcheck capacity FILE [--gpus KIND:N,...] [--rate R | --rate-range A:B]\n"
             "                           [--cost KIND=PRICE,...] [--iters N]\n"
             "                           [--error F] [--record requests|summary|tokens]\n"
             "                           [--saturation GAIN:GROWTH|off]\n"
             "                           [--db PATH]"
             " [--out DIR] [--jobs N] [--quiet]\n\n"
             "Finds by simulation, for each GPU kind and every tp x pp x dp layout the memory\n"
             "planner admits on up to N of them, the highest request rate whose SLOs hold\n"
             "(simulated runs of FILE from the target rate, doubled or halved until a rate that\n"
             "holds and one that fails bracket it, then bisected), then recommends the cheapest\n"
             "layout whose pessimistic bound serves the target rate, with the runner-up and why\n"
             "it lost, or says when the interval is too wide to choose. Each layout's capacity\n"
             "is searched again with the profile's prices at either end of its interval (its\n"
             "engine block's `error`, which `shardcheck calibrate` writes; without one the\n"
             "idealized engine's documented error, +-50%%). FILE is a\n"
             "scenario with an slo and rate phases only; each probe runs it in mode sim with one\n"
             "deployment, every rate phase scaled to the probed rate (the first phase's rate\n"
             "is the one named). Every point is stored in the database; the table is printed\n"
             "and a report (index.html, capacity.svg) is written. FILE may also name a shipped\n"
             "scenario (`shardcheck help --list scenarios`): capacity/llama3-8b-h100.\n\n"
             "  --gpus KIND:N,...   GPU kinds (hardware profiles) and how many of each at most\n"
             "                      (default: the scenario's hardware.profile and gpus)\n"
             "  --rate R            the target rate, requests/s (default: the scenario's first\n"
             "                      rate phase)\n"
             "  --rate-range A:B    the search range, requests/s (default: R/8 to 4R)\n"
             "  --cost KIND=P,...   cost per GPU-hour of each kind (default 1 each: the table's\n"
             "                      cost is then GPU-hours)\n"
             "  --error F           the interval's relative half-width for every kind (0: no\n"
             "                      interval; default: each profile's)\n"
             "  --iters N           simulations per layout, less 2 (0..20, default 6): what the\n"
             "                      bracket leaves of N + 2 bisects it (a layout far from the\n"
             "                      target takes more to bracket, and is not bisected)\n"
             "  --saturation G:T    the knee: a probe whose output tok/s fell short of its rate\n"
             "                      (against a lower one's) by more than G while its TTFT p95\n"
             "                      is past T x the lowest rate's fails, and nothing above it\n"
             "                      is probed (default 0.05:3, a ramp's; off: probe past it)\n"
             "  --jobs N            worker processes searching layouts at once (1..64,\n"
             "                      default: the CPUs online); the result is the same.\n"
             "                      Under mpirun or srun the job's ranks share the layouts\n"
             "                      instead, on any number of hosts (docs/scaling-out.md)\n"
             "  --record L          what each probe records in its scratch database (default\n"
             "                      summary; requests and tokens are slower, same points)\n"
             "  --db PATH           results database (default results.db)\n"
             "  --out DIR           report directory (default reports/out/capacity-<id>/)\n"
             "  --quiet             no progress lines\n\n"
             "exit codes: 0 a layout serves the target, 1 none does (the message names the best\n"
             "found, or says the interval is too wide to choose), 2 bad input, 3 runtime\n"
             "failure.\n");
}

// "0.05:3" into o's knee rule, "off" turns it off.
static bool parse_saturation(const char *v, capacity_options *o) {
  if (!strcmp(v, "off")) {
    o->saturation = false;
    return true;
  }
  char buf[64];
  snprintf(buf, sizeof buf, "%s", v);
  char *colon = strchr(buf, ':');
  if (!colon) return false;
  *colon = 0;
  double g, t;
  if (!cli_parse_double(buf, 0, 10, &g) || !cli_parse_double(colon + 1, 1, 1e9, &t)) return false;
  o->saturation = true;
  o->sat_gain = g;
  o->sat_ttft = t;
  return true;
}

// "h100-sxm:8,h200:8" into o->kinds (costs 1).
static bool parse_gpus(const char *v, capacity_options *o) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", v);
  o->n_kinds = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    char *colon = strrchr(tok, ':');
    if (!colon || colon == tok || o->n_kinds == CAP_MAX_KINDS) return false;
    *colon = 0;
    capacity_kind *k = &o->kinds[o->n_kinds];
    if (strlen(tok) >= sizeof k->name || !cli_parse_int(colon + 1, 1, 4096, &k->max_gpus))
      return false;
    snprintf(k->name, sizeof k->name, "%s", tok);
    k->cost_per_gpu_hour = 1;
    o->n_kinds++;
  }
  return o->n_kinds > 0;
}

// "h100-sxm=2.5,h200=3.2" onto the kinds; *bad the first unknown kind.
static bool parse_costs(const char *v, capacity_options *o, char *bad, size_t n) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", v);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(tok, '=');
    double price;
    if (!eq || !cli_parse_double(eq + 1, 1e-9, 1e9, &price)) {
      snprintf(bad, n, "%s", tok);
      return false;
    }
    *eq = 0;
    bool found = false;
    for (int k = 0; k < o->n_kinds; k++)
      if (!strcmp(o->kinds[k].name, tok)) {
        o->kinds[k].cost_per_gpu_hour = price;
        found = true;
      }
    if (!found) {
      snprintf(bad, n, "%s (not among --gpus)", tok);
      return false;
    }
  }
  return true;
}

int cmd_capacity(int argc, char **argv) {
  const char *file = NULL, *db_path = "results.db", *out_dir = NULL, *costs = NULL;
  bool quiet = false;
  capacity_options o = capacity_options_defaults();
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  o.jobs = cpus > 1 ? (int)(cpus < 64 ? cpus : 64) : 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    bool has_val = i + 1 < argc;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return CLI_OK;
    } else if (!strcmp(a, "--gpus") && has_val) {
      if (!parse_gpus(argv[++i], &o))
        return cli_usage_error("capacity", "--gpus needs KIND:N[,KIND:N...] with N >= 1, got",
                               argv[i]);
    } else if (!strcmp(a, "--rate") && has_val) {
      if (!cli_parse_double(argv[++i], 1e-6, 1e9, &o.target_rate))
        return cli_usage_error("capacity", "--rate needs requests/s above 0, got", argv[i]);
    } else if (!strcmp(a, "--rate-range") && has_val) {
      const char *v = argv[++i];
      char lo[64] = "", *colon = strchr(v, ':');
      if (colon && (size_t)(colon - v) < sizeof lo) memcpy(lo, v, (size_t)(colon - v));
      if (!colon || !cli_parse_double(lo, 1e-6, 1e9, &o.rate_lo) ||
          !cli_parse_double(colon + 1, 1e-6, 1e9, &o.rate_hi) || !(o.rate_hi > o.rate_lo))
        return cli_usage_error("capacity", "--rate-range needs A:B with 0 < A < B, got", v);
    } else if (!strcmp(a, "--cost") && has_val) {
      costs = argv[++i];
    } else if (!strcmp(a, "--error") && has_val) {
      if (!cli_parse_double(argv[++i], 0, 0.9, &o.error))
        return cli_usage_error("capacity", "--error needs a fraction in [0, 0.9], got", argv[i]);
    } else if (!strcmp(a, "--iters") && has_val) {
      if (!cli_parse_int(argv[++i], 0, 20, &o.iters))
        return cli_usage_error("capacity", "--iters needs a count from 0 to 20, got", argv[i]);
    } else if (!strcmp(a, "--saturation") && has_val) {
      if (!parse_saturation(argv[++i], &o))
        return cli_usage_error("capacity",
                               "--saturation needs GAIN:GROWTH (GAIN in [0, 10], GROWTH >= 1) "
                               "or off, got",
                               argv[i]);
    } else if (!strcmp(a, "--jobs") && has_val) {
      if (!cli_parse_int(argv[++i], 1, 64, &o.jobs))
        return cli_usage_error("capacity", "--jobs needs a count from 1 to 64, got", argv[i]);
    } else if (!strcmp(a, "--record") && has_val) {
      if (!scenario_record_parse(argv[++i], &o.record))
        return cli_usage_error("capacity", "--record needs requests, summary or tokens, got",
                               argv[i]);
    } else if (!strcmp(a, "--db") && has_val) {
      db_path = argv[++i];
    } else if (!strcmp(a, "--out") && has_val) {
      out_dir = argv[++i];
    } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
      quiet = true;
    } else if (a[0] == '-') {
      return cli_usage_error(
          "capacity", has_val || strncmp(a, "--", 2) ? "unknown option" : "option needs a value",
          a);
    } else if (file) {
      return cli_usage_error("capacity", "one scenario file only; extra argument", a);
    } else {
      file = a;
    }
  }
  if (!file) return cli_usage_error("capacity", "missing the scenario FILE", NULL);
  int mc = cli_mpi_begin("capacity", &o.mpi);
  if (mc != CLI_OK) return mc;
  bool quiet_rank = o.mpi && sc_mpi_rank() != 0; // it searches its share and writes nothing
  if (o.mpi) o.jobs = 1;                           // the ranks share the layouts instead
  sc_error err = {{0}};
  scenario *s = NULL;
  scn_overrides ov = {.mode = "sim"};
  char path[PATH_MAX];
  sc_status st = cli_scenario_path(file, path, sizeof path, &err);
  if (st == SC_OK) st = scenario_load_with(path, &ov, &s, &err);
  if (st != SC_OK) return cli_fail("capacity", st, &err);
  if (o.n_kinds == 0) { // the scenario's profile, so that --cost can name it
    snprintf(o.kinds[0].name, sizeof o.kinds[0].name, "%.255s", s->hardware.profile);
    o.kinds[0].max_gpus = s->hardware.gpus > 0 ? s->hardware.gpus : 1;
    o.kinds[0].cost_per_gpu_hour = 1;
    o.n_kinds = 1;
  }
  char bad[128];
  if (costs && !parse_costs(costs, &o, bad, sizeof bad)) {
    scenario_free(s);
    return cli_usage_error("capacity", "--cost needs KIND=PRICE[,...] for kinds of --gpus, got",
                           bad);
  }
  if (!quiet && !quiet_rank) {
    fprintf(stderr, "capacity: searching %d kind%s of GPU%s\n", o.n_kinds, o.n_kinds > 1 ? "s" : "",
            o.mpi ? " over the MPI job's ranks" : "");
    o.progress = stderr;
  }
  uint64_t t0 = sc_monotonic_ns();
  capacity_result r;
  st = capacity_search(s, &o, &r, &err);
  if (st != SC_OK) {
    capacity_result_free(&r);
    scenario_free(s);
    return quiet_rank ? cli_exit_code(st) : cli_fail("capacity", st, &err); // rank 0 says why
  }
  if (quiet_rank) { // rank 0 stores, prints and reports the whole search
    capacity_result_free(&r);
    scenario_free(s);
    return CLI_OK;
  }
  double wall = (double)(sc_monotonic_ns() - t0) / 1e9;
  store *db = NULL;
  st = store_open(db_path, &db, &err);
  int64_t id = 0;
  char git_rev[CLI_GIT_REV_CAP];
  cli_git_rev(git_rev, sizeof git_rev);
  if (st == SC_OK) {
    store_cap_search cs = {.scenario = s->name,
                           .scenario_text = s->text,
                           .git_rev = git_rev,
                           .record = scenario_record_name(o.record),
                           .seed = s->seed,
                           .target_rate = r.target_rate,
                           .rate_lo = r.rate_lo,
                           .rate_hi = r.rate_hi,
                           .iters = r.iters,
                           .slo = r.slo,
                           .costs = r.costs,
                           .best = r.best,
                           .runner_up = r.runner_up,
                           .served = r.best >= 0,
                           .note = r.note};
    st = store_capacity_add(db, &cs, r.layouts, r.n_layouts, r.points, r.n_points, &id, &err);
  }
  int code = r.best >= 0 ? CLI_OK : CLI_SLO_FAIL;
  if (st == SC_OK) {
    rq_capacity c;
    st = rq_capacity_load(store_db(db), id, &c, &err);
    if (st == SC_OK) report_capacity_print(&c, stdout);
    rq_capacity_free(&c);
  }
  char dir[1100];
  if (out_dir)
    snprintf(dir, sizeof dir, "%s", out_dir);
  else
    snprintf(dir, sizeof dir, "reports/out/capacity-%lld", (long long)id);
  if (st == SC_OK) {
    report_result rr;
    if (report_capacity_write(store_db(db), id, dir, NULL, &rr, &err) != SC_OK) {
      fprintf(stderr, "shardcheck capacity: report: %s\n", err.msg);
      code = CLI_RUNTIME;
    } else if (!quiet) {
      if (rr.plots_skipped) fprintf(stderr, "warning: plot skipped: %s\n", rr.why);
      fprintf(stderr,
              "capacity: %d simulations in %.1f s; report: %s; database: %s "
              "(capacity search %lld)\n",
              r.n_points, wall, rr.index_path, db_path, (long long)id);
    }
  }
  if (st != SC_OK)
    code = cli_fail("capacity", st, &err);
  else if (r.best < 0)
    fprintf(stderr, "shardcheck capacity: %s\n", r.note);
  store_close(db);
  capacity_result_free(&r);
  scenario_free(s);
  return code;
}
