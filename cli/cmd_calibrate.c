// `shardcheck calibrate`: fits a hardware profile's engine block to measured runs stored in a
// results database and writes the fitted profile (docs/calibration.md); with --check, reports
// the fitted (or, with --no-fit, the given) profile's error on other runs without refitting.
//
// The replay and the fit are runner/calibrate.c; the measured times are reports/query.c's
// rq_request_times. This file parses arguments, builds the one-deployment sim scenario the
// replay runs, prints the residuals and writes the profile.
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "config/hardware.h"
#include "config/yaml_map.h"
#include "kernels/embedded.h"
#include "reports/store.h"
#include "runner/calibrate.h"

#define CAL_MAX_RUNS 16

static void usage(FILE *f) {
  fprintf(f,
          "usage: shardcheck calibrate --db PATH --run ID [--run ID ...] --profile BASE\n"
          "                            --model PRESET [--tp N] [--dtype D] [--kv-cache-dtype D]\n"
          "                            --out FILE.yaml\n"
          "                            [--check ID ...] [--no-fit]\n\n");
  // the knobs are the table's (kernels/knobs.h): each row's profile key
  char knobs[400] = "", para[1400];
  size_t len = 0;
#define KNOB_NAME(name, type, dflt, e, sch, pf, pkey, ok, ex, j)                                   \
  len += (size_t)snprintf(knobs + len, sizeof knobs - len, "%s" #pkey, len ? ", " : "");
  SC_KNOBS(KNOB_NAME)
#undef KNOB_NAME
  snprintf(para, sizeof para,
           "Fits the engine block of hardware profile BASE (host time per step and per scheduled "
           "sequence, prefill and decode efficiency) to measured runs: each run's completed "
           "requests are replayed in the simulator on MODEL with tensor parallelism N, with their "
           "own arrival times and lengths, and a Nelder-Mead search over the log-parameters "
           "minimizes, summed over the runs, the mean squared per-request error of TTFT and of "
           "TPOT, each divided by the run's measured mean. The scheduler knobs (%s) are not "
           "fitted: set them in BASE's engine block to the measured engine's. Prints each run's "
           "residuals and writes BASE with the fitted engine block to FILE.yaml, an ordinary "
           "profile.",
           knobs);
  cli_print_wrapped(f, para, 0, 84);
  fprintf(f,
          "\n"
          "  -d, --db PATH       the results database (a run of any target, or `shardcheck\n"
          "                      import`ed trace)\n"
          "  -r, --run ID        a run to fit to (repeatable, at most %d)\n"
          "  -c, --check ID      a run to predict with the fitted block, not fitted to\n"
          "  -p, --profile BASE  a hardware profile name or .yaml path\n"
          "  -m, --model PRESET  the model the runs served (a preset or a directory)\n"
          "      --tp N          its tensor parallelism (default 1)\n"
          "      --dtype D       its weights' dtype, as a scenario's model.dtype (default:\n"
          "                      the preset's)\n"
          "      --kv-cache-dtype D  its KV cache's dtype, as model.kv_cache_dtype (default auto)\n"
          "  -o, --out FILE      where the fitted profile goes (required unless --no-fit)\n"
          "      --no-fit        only replay: BASE's engine block as it is\n"
          "  -h, --help          this text\n\n"
          "exit codes: 0 ok, 2 bad usage or input (a run with no completed requests, a\n"
          "profile or model that does not load), 3 runtime failure.\n",
          CAL_MAX_RUNS);
}

// The one-deployment sim scenario the replay runs (its workload is never used), parsed as
// "calibrate flags" like serve's: the scenario parser checks --dtype and --kv-cache-dtype (the
// model's keys; NULL: the preset's) and names the key of a bad one.
static sc_status make_scenario(const char *profile, const char *model, const char *dtype,
                               const char *kv_dtype, int tp, scenario **out, sc_error *err) {
  char text[4096], extra[256] = "";
  const char *key = strchr(model, '/') ? "path" : "preset";
  if (dtype) snprintf(extra, sizeof extra, ", dtype: \"%s\"", dtype);
  if (kv_dtype)
    snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ", kv_cache_dtype: \"%s\"",
             kv_dtype);
  snprintf(text, sizeof text,
           "name: calibrate\nmode: sim\nmodel: {%s: \"%s\"%s}\n"
           "hardware: {profile: \"%s\", gpus: %d}\n"
           "deployments: [{tp: %d, pp: 1, dp: 1}]\n"
           "workload:\n  prompts: [{name: a, input: 8, output: 8}]\n"
           "  phases: [{rate: 1, requests: 1}]\nlimits: {request_timeout: 0s}\n",
           key, model, extra, profile, tp, tp);
  return scenario_parse(text, strlen(text), "calibrate flags", ".", out, err);
}

static void print_row(const char *what, int64_t id, const calib_errors *e) {
  printf("%-6s %4lld %5d  %10.1f %10.1f %+7.1f%%  %8.2f %8.2f %+7.1f%%  %7.3f %7.3f\n", what,
         (long long)id, e->n, e->meas_ttft_ms, e->sim_ttft_ms, 100 * e->ttft_err, e->meas_tpot_ms,
         e->sim_tpot_ms, 100 * e->tpot_err, e->ttft_rms, e->tpot_rms);
}

// BASE's text without its top-level engine block (its comments and tables kept as written),
// then the fitted block, written by hw_profile_write_engine.
static sc_status write_profile(const char *base, const char *out, const sim_engine *e,
                               const char *note, sc_error *err) {
  char *text = NULL;
  size_t len = 0;
  if (strlen(base) > 5 && !strcmp(base + strlen(base) - 5, ".yaml")) {
    SC_TRY(yaml_map_slurp(base, 1 << 24, &text, &len, err));
  } else {
    char path[300];
    snprintf(path, sizeof path, "scenarios/hardware/%s.yaml", base);
    const sc_embedded_file *f = sc_embedded_find(path);
    if (!f) return sc_fail(err, SC_INVALID, "calibrate: no profile '%s'", base);
    text = strdup(f->data);
    if (!text) return sc_fail(err, SC_OOM, "calibrate: out of memory");
  }
  FILE *o = fopen(out, "w");
  if (!o) {
    free(text);
    return sc_fail(err, SC_IO, "%s: cannot write the profile", out);
  }
  bool skip = false;
  for (char *line = text, *nl; line && *line; line = nl ? nl + 1 : NULL) {
    nl = strchr(line, '\n');
    size_t n = nl ? (size_t)(nl - line) : strlen(line);
    if (!strncmp(line, "engine:", 7)) skip = true;
    else if (skip && n > 0 && line[0] != ' ' && line[0] != '#') skip = false;
    if (!skip) fprintf(o, "%.*s\n", (int)n, line);
  }
  free(text);
  fprintf(o, "\n# --- engine: fitted by `shardcheck calibrate` (docs/calibration.md)\n# %s\n", note);
  hw_profile_write_engine(o, e); // the block from the knob table (config/hardware.h)
  if (fclose(o) != 0) return sc_fail(err, SC_IO, "%s: cannot write the profile", out);
  hw_profile back;
  return hw_profile_load(out, &back, err);
}

int cmd_calibrate(int argc, char **argv) {
  const char *db_path = NULL, *profile = NULL, *model = NULL, *out = NULL;
  const char *dtype = NULL, *kv_dtype = NULL;
  int64_t fit_ids[CAL_MAX_RUNS], check_ids[CAL_MAX_RUNS];
  int n_fit = 0, n_check = 0, tp = 1;
  bool no_fit = false;
  static const struct option opts[] = {
      {"db", required_argument, 0, 'd'},      {"run", required_argument, 0, 'r'},
      {"check", required_argument, 0, 'c'},   {"profile", required_argument, 0, 'p'},
      {"model", required_argument, 0, 'm'},   {"tp", required_argument, 0, 'T'},
      {"out", required_argument, 0, 'o'},     {"no-fit", no_argument, 0, 'N'},
      {"dtype", required_argument, 0, 'D'},   {"kv-cache-dtype", required_argument, 0, 'K'},
      {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
  optind = 1;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, "d:r:c:p:m:o:h", opts, NULL)) != -1) {
    uint64_t id;
    switch (c) {
    case 'd': db_path = optarg; break;
    case 'r':
    case 'c':
      if (!cli_parse_u64(optarg, &id) || id == 0)
        return cli_usage_error("calibrate", "expected a run id", optarg);
      if ((c == 'r' ? n_fit : n_check) == CAL_MAX_RUNS)
        return cli_usage_error("calibrate", "too many runs", optarg);
      if (c == 'r') fit_ids[n_fit++] = (int64_t)id;
      else check_ids[n_check++] = (int64_t)id;
      break;
    case 'p': profile = optarg; break;
    case 'm': model = optarg; break;
    case 'T':
      if (!cli_parse_int(optarg, 1, 64, &tp))
        return cli_usage_error("calibrate", "--tp expects an integer in 1..64", optarg);
      break;
    case 'o': out = optarg; break;
    case 'N': no_fit = true; break;
    case 'D': dtype = optarg; break;
    case 'K': kv_dtype = optarg; break;
    case 'h': usage(stdout); return CLI_OK;
    default: return cli_usage_error("calibrate", "unknown option", argv[optind - 1]);
    }
  }
  if (optind != argc) return cli_usage_error("calibrate", "unexpected argument", argv[optind]);
  if (!db_path) return cli_usage_error("calibrate", "--db is required", NULL);
  if (!profile) return cli_usage_error("calibrate", "--profile is required", NULL);
  if (!model) return cli_usage_error("calibrate", "--model is required", NULL);
  if (!n_fit && !n_check) return cli_usage_error("calibrate", "--run (or --check) is required", NULL);
  if (!no_fit && !n_fit) return cli_usage_error("calibrate", "--run is required to fit", NULL);
  if (!no_fit && !out) return cli_usage_error("calibrate", "--out is required", NULL);

  sc_error err = {0};
  store *db = NULL;
  scenario *s = NULL;
  rq_req_time *reqs[2 * CAL_MAX_RUNS] = {0};
  int nreq[2 * CAL_MAX_RUNS] = {0};
  sc_status st = store_open_readonly(db_path, &db, &err);
  if (st == SC_OK) st = make_scenario(profile, model, dtype, kv_dtype, tp, &s, &err);
  for (int i = 0; st == SC_OK && i < n_fit + n_check; i++) {
    int64_t id = i < n_fit ? fit_ids[i] : check_ids[i - n_fit];
    st = rq_request_times(store_db(db), id, &reqs[i], &nreq[i], &err);
  }
  int rc = CLI_OK;
  if (st == SC_OK) {
    printf("calibrate: %s on %s, tp %d; ", model, profile, tp);
    if (!no_fit) {
      calib_run runs[CAL_MAX_RUNS];
      for (int i = 0; i < n_fit; i++) runs[i] = (calib_run){reqs[i], nreq[i]};
      printf("fitting to %d run%s...\n", n_fit, n_fit == 1 ? "" : "s");
      fflush(stdout);
      calib_fit_result fr;
      st = calib_fit(s, runs, n_fit, &fr, &err);
      if (st == SC_OK)
        printf("fit after %d replays: step_s %.4g  seq_s %.4g  prefill_eff %.4g  decode_eff "
               "%.4g  (objective %.4g)\n",
               fr.evaluations, fr.engine.step_s, fr.engine.seq_s, fr.engine.prefill_eff,
               fr.engine.decode_eff, fr.objective);
    } else {
      printf("replaying with the profile's engine block\n");
    }
    if (st == SC_OK)
      printf("\n%-6s %4s %5s  %10s %10s %8s  %8s %8s %8s  %7s %7s\n", "", "run", "reqs",
             "TTFT ms", "sim", "err", "TPOT ms", "sim", "err", "TTFTrms", "TPOTrms");
    char note[512] = "";
    size_t nl = 0;
    for (int i = 0; st == SC_OK && i < n_fit + n_check; i++) {
      calib_errors e;
      st = calib_eval(s, reqs[i], nreq[i], &e, &err);
      if (st != SC_OK) break;
      int64_t id = i < n_fit ? fit_ids[i] : check_ids[i - n_fit];
      print_row(i < n_fit ? "fit" : "check", id, &e);
      if (i < n_fit && nl < sizeof note)
        nl += (size_t)snprintf(note + nl, sizeof note - nl,
                               "%srun %lld: TTFT mean %+.1f%%, TPOT mean %+.1f%%", nl ? "; " : "",
                               (long long)id, 100 * e.ttft_err, 100 * e.tpot_err);
    }
    if (st == SC_OK)
      printf("\nerr: (sim - measured) / measured of the means; rms: per-request error / measured "
             "mean (minimized)\n");
    if (st == SC_OK && !no_fit) {
      st = write_profile(profile, out, &s->hw.sim.engine, note, &err);
      if (st == SC_OK) printf("wrote %s\n", out);
    }
  }
  if (st != SC_OK) rc = cli_fail("calibrate", st, &err);
  for (int i = 0; i < 2 * CAL_MAX_RUNS; i++) free(reqs[i]);
  scenario_free(s);
  store_close(db);
  return rc;
}
