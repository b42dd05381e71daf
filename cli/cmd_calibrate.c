// `shardcheck calibrate`: fits a hardware profile's engine block to measured runs stored in a
// results database and writes the fitted profile (docs/calibration.md); with --check, reports
// the fitted (or, with --no-fit, the given) profile's error on other runs without refitting.
//
// The replay and the fit are runner/calibrate.c; the measured times are reports/query.c's
// rq_request_times. This file parses arguments, builds the one-deployment sim scenario the
// replay runs, prints the residuals and writes the profile.
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "config/hardware.h"
#include "config/yaml_map.h"
#include "kernels/embedded.h"
#include "reports/store.h"
#include "kernels/clock.h"
#include "runner/calibrate.h"
#include "scenarios/deployment.h"

#define CAL_MAX_RUNS 64

static void usage(FILE *f) {
  fprintf(f,
          "usage: shardcheck calibrate --db PATH --run ID[:SPEC] [--run ID[:SPEC] ...]\n"
          "                            --profile BASE --model PRESET [--tp N] [--pp N]\n"
          "                            [--dtype D] [--kv-cache-dtype D] --out FILE.yaml\n"
          "                            [--check ID[:SPEC] ...] [--no-fit] [--strict]\n\n");
  // the knobs are the table's (kernels/knobs.h): each row's profile key and limits name
  char knobs[600] = "", names[600] = "", para[3200];
  size_t len = 0, ln = 0;
#define KNOB_NAME(name, type, dflt, e, sch, pf, pkey, ok, ex, j)                                   \
  len += (size_t)snprintf(knobs + len, sizeof knobs - len, "%s" #pkey, len ? ", " : "");          \
  ln += (size_t)snprintf(names + ln, sizeof names - ln, "%s" #name, ln ? ", " : "");
  SC_KNOBS(KNOB_NAME)
#undef KNOB_NAME
  snprintf(para, sizeof para,
           "Fits the engine block of hardware profile BASE (host time per step and per scheduled "
           "sequence, prefill and decode efficiency) to measured runs: each run's completed "
           "requests are replayed in the simulator on MODEL at the run's own layout, with their "
           "own arrival times and lengths, and a Nelder-Mead search over the log-parameters, "
           "held within physical bounds (host time at most 50 ms a step and 1 ms a sequence; "
           "no efficiency beyond the datasheet's peaks), minimizes, summed over the runs, the "
           "mean squared per-request error of TTFT and of TPOT (of E2E for a run imported "
           "without first-token times), each divided by the run's measured mean. A run's layout "
           "is its SPEC's (ID:tp=2,pp=1), else the run's stored deployment, else --tp and --pp; "
           "SPEC may also set the run's scheduler knobs by their limits names (%s). The other "
           "knobs (%s) are BASE's engine block's: set them to the measured engine's. Reports "
           "each run's residuals, every parameter at a bound and every direction the runs leave "
           "unconstrained with the kind of run that would pin it (also on stderr and in the "
           "written profile), a leave-one-run-out cross-validation of two or more runs, and each "
           "prediction with its interval; writes BASE with the fitted engine block (its `error`: "
           "the intervals' half-width) to FILE.yaml, an ordinary profile.",
           names, knobs);
  cli_print_wrapped(f, para, 0, 84);
  fprintf(f,
          "\n"
          "  -d, --db PATH       the results database (a run of any target, or `shardcheck\n"
          "                      import`ed trace)\n"
          "  -r, --run ID[:SPEC] a run to fit to (repeatable, at most %d)\n"
          "  -c, --check ID[:SPEC]  a run to predict with the fitted block, not fitted to\n"
          "  -p, --profile BASE  a hardware profile name or .yaml path\n"
          "  -m, --model PRESET  the model the runs served (a preset or a directory)\n"
          "      --tp N, --pp N  the layout of runs that do not say theirs (default 1)\n"
          "      --dtype D       its weights' dtype, as a scenario's model.dtype (default:\n"
          "                      the preset's)\n"
          "      --kv-cache-dtype D  its KV cache's dtype, as model.kv_cache_dtype (default auto)\n"
          "  -o, --out FILE      where the fitted profile goes (required unless --no-fit)\n"
          "      --no-fit        only replay: BASE's engine block as it is\n"
          "      --strict        exit 1 when the fit is not identified (a flat direction, or an\n"
          "                      efficiency or host time at its bound)\n"
          "  -h, --help          this text\n\n"
          "exit codes: 0 ok, 1 --strict and the fit is not identified, 2 bad usage or input (a\n"
          "run with no completed requests, runs of different models, a layout the profile\n"
          "cannot hold, a profile or model that does not load), 3 runtime failure.\n",
          CAL_MAX_RUNS);
}

// A run as the command line names it: its id and what its SPEC sets.
typedef struct run_arg {
  int64_t id;
  int tp, pp;       // 0: not given
  char knobs[200];  // "name=value,..." of the SPEC's knobs
} run_arg;

// "ID[:tp=2,pp=1,max_running=64]" into *a; false with *bad the offending part.
static bool parse_run_arg(const char *v, run_arg *a, const char **bad) {
  memset(a, 0, sizeof *a);
  char buf[256];
  snprintf(buf, sizeof buf, "%s", v);
  char *colon = strchr(buf, ':');
  if (colon) *colon = 0;
  uint64_t id;
  *bad = v;
  if (!cli_parse_u64(buf, &id) || id == 0) return false;
  a->id = (int64_t)id;
  if (!colon) return true;
  size_t kl = 0;
  for (char *save = NULL, *tok = strtok_r(colon + 1, ",", &save); tok;
       tok = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(tok, '=');
    if (!eq) return false;
    *eq = 0;
    if (!strcmp(tok, "tp") || !strcmp(tok, "pp")) {
      int x;
      if (!cli_parse_int(eq + 1, 1, 64, &x)) return false;
      *(tok[0] == 't' ? &a->tp : &a->pp) = x;
    } else {
      kl += (size_t)snprintf(a->knobs + kl, sizeof a->knobs - kl, "%s%s=%s", kl ? "," : "", tok,
                             eq + 1);
    }
  }
  return true;
}

// Sets limit `key` (a knob's limits name, kernels/knobs.h) to val within its bound; false when
// there is no such knob or val does not fit it.
static bool set_knob(scn_limits *l, const char *key, const char *val) {
#define SET_int(name)                                                                              \
  {                                                                                                \
    int x;                                                                                         \
    if (!cli_parse_int(val, 0, 1 << 30, &x) || !sc_knob_ok_##name(x)) return false;                \
    l->name = x;                                                                                   \
    return true;                                                                                   \
  }
#define SET_bool(name)                                                                             \
  {                                                                                                \
    if (strcmp(val, "true") && strcmp(val, "false")) return false;                                 \
    l->name = !strcmp(val, "true");                                                                \
    return true;                                                                                   \
  }
#define SET_double(name)                                                                           \
  {                                                                                                \
    double x;                                                                                      \
    if (!cli_parse_double(val, 0, 1e9, &x) || !sc_knob_ok_##name(x)) return false;                \
    l->name = x;                                                                                   \
    return true;                                                                                   \
  }
#define BY_NAME(name, type, dflt, e, sch, pf, pkey, ok, ex, j)                                     \
  if (!strcmp(key, #name)) SET_##type(name)
  SC_KNOBS(BY_NAME)
#undef BY_NAME
#undef SET_int
#undef SET_bool
#undef SET_double
  return false;
}

// The one-deployment sim scenario a run replays on (its workload is never used), parsed as
// "calibrate flags" like serve's: the scenario parser checks --dtype and --kv-cache-dtype (the
// model's keys; NULL: the preset's) and names the key of a bad one.
static sc_status make_scenario(const char *profile, const char *model, const char *dtype,
                               const char *kv_dtype, int tp, int pp, scenario **out,
                               sc_error *err) {
  char text[4096], extra[256] = "";
  const char *key = strchr(model, '/') ? "path" : "preset";
  if (dtype) snprintf(extra, sizeof extra, ", dtype: \"%s\"", dtype);
  if (kv_dtype)
    snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ", kv_cache_dtype: \"%s\"",
             kv_dtype);
  snprintf(text, sizeof text,
           "name: calibrate\nmode: sim\nmodel: {%s: \"%s\"%s}\n"
           "hardware: {profile: \"%s\", gpus: %d}\n"
           "deployments: [{tp: %d, pp: %d, dp: 1}]\n"
           "workload:\n  prompts: [{name: a, input: 8, output: 8}]\n"
           "  phases: [{rate: 1, requests: 1}]\nlimits: {request_timeout: 0s}\n",
           key, model, extra, profile, tp * pp, tp, pp);
  return scenario_parse(text, strlen(text), "calibrate flags", ".", out, err);
}

static void print_row(const char *what, int64_t id, const calib_errors *e, bool e2e) {
  if (e2e)
    printf("%-6s %4lld %5d  %10s %10s %8s  %8s %8s %8s  E2E %.1f ms, sim %.1f (%+.1f%%), rms "
           "%.3f\n",
           what, (long long)id, e->n, "-", "-", "", "-", "-", "", e->meas_e2e_ms, e->sim_e2e_ms,
           100 * e->e2e_err, e->e2e_rms);
  else
    printf("%-6s %4lld %5d  %10.1f %10.1f %+7.1f%%  %8.2f %8.2f %+7.1f%%  %7.3f %7.3f\n", what,
           (long long)id, e->n, e->meas_ttft_ms, e->sim_ttft_ms, 100 * e->ttft_err,
           e->meas_tpot_ms, e->sim_tpot_ms, 100 * e->tpot_err, e->ttft_rms, e->tpot_rms);
}

static void print_pred(const char *what, int64_t id, const calib_prediction *p, bool e2e) {
  if (e2e)
    printf("%-6s %4lld  E2E ms %.1f [%.1f, %.1f] measured %.1f   out tok/s %.1f [%.1f, %.1f] "
           "measured %.1f%s\n",
           what, (long long)id, p->e2e_ms.value, p->e2e_ms.lo, p->e2e_ms.hi, p->e.meas_e2e_ms,
           p->tok_s.value, p->tok_s.lo, p->tok_s.hi, p->e.meas_tok_s,
           p->inside_tok_s ? "" : "  (outside)");
  else
    printf("%-6s %4lld  TTFT ms %.1f [%.1f, %.1f] measured %.1f   TPOT ms %.2f [%.2f, %.2f] "
           "measured %.2f%s   out tok/s %.1f [%.1f, %.1f] measured %.1f%s\n",
           what, (long long)id, p->ttft_ms.value, p->ttft_ms.lo, p->ttft_ms.hi, p->e.meas_ttft_ms,
           p->tpot_ms.value, p->tpot_ms.lo, p->tpot_ms.hi, p->e.meas_tpot_ms,
           p->inside_tpot ? "" : " (outside)", p->tok_s.value, p->tok_s.lo, p->tok_s.hi,
           p->e.meas_tok_s, p->inside_tok_s ? "" : " (outside)");
}

// What the fit pins, as lines (each begins "calibrate: "): the parameters at a bound, and each
// flat direction with what would pin it. Empty when the fit is identified.
static void ident_text(const calib_ident *id, const double *lo, const double *hi, const double *p,
                       char *buf, size_t cap) {
  size_t n = 0;
  buf[0] = 0;
  for (int i = 0; i < CALIB_NP && n < cap; i++)
    if (id->at_bound[i] && (id->at_hi[i] || i == 2 || i == 3))
      n += (size_t)snprintf(buf + n, cap - n,
                            "calibrate: %s %.4g is at its %s bound (%.4g): the runs push it "
                            "beyond what is physical%s\n",
                            calib_param_names[i], p[i], id->at_hi[i] ? "upper" : "lower",
                            id->at_hi[i] ? hi[i] : lo[i],
                            i == 2 || i == 3 ? "; something else the profile lacks is carried here"
                                             : "");
  for (int f = 0; f < id->n_flat && n < cap; f++) {
    const calib_flat *fl = &id->flat[f];
    n += (size_t)snprintf(buf + n, cap - n, "calibrate: not identified: the runs do not tell");
    bool first = true;
    for (int i = 0; i < CALIB_NP && n < cap; i++) {
      if (fabs(fl->v[i]) < 0.15) continue;
      n += (size_t)snprintf(buf + n, cap - n, "%s %s %s", first ? "" : ",", calib_param_names[i],
                            fl->v[i] > 0 ? "up" : "down");
      first = false;
    }
    if (n < cap)
      n += (size_t)snprintf(buf + n, cap - n, " from the fit (curvature %.3g); %s\n",
                            fl->curvature, fl->hint);
  }
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
  fprintf(o, "\n# --- engine: fitted by `shardcheck calibrate` (docs/calibration.md)\n");
  for (const char *l = note, *nl; l && *l; l = nl ? nl + 1 : NULL) {
    nl = strchr(l, '\n');
    fprintf(o, "# %.*s\n", (int)(nl ? nl - l : (ptrdiff_t)strlen(l)), l);
  }
  hw_profile_write_engine(o, e); // the block from the knob table (config/hardware.h)
  if (fclose(o) != 0) return sc_fail(err, SC_IO, "%s: cannot write the profile", out);
  hw_profile back;
  return hw_profile_load(out, &back, err);
}

// The knobs in a run's config JSON (kernels/knobs.h's rows by their limits names) as
// "name=value,..." into buf.
static void stored_knobs(const char *config, char *buf, size_t cap) {
  json_t *o = json_loads(config, 0, NULL);
  size_t n = 0;
  buf[0] = 0;
#define STORED(name, type, dflt, e, sch, pf, pkey, ok, ex, j)                                      \
  {                                                                                                \
    const json_t *v = json_object_get(o, #name);                                                   \
    if (json_is_boolean(v))                                                                        \
      n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s" #name "=%s", n ? "," : "",        \
                            json_is_true(v) ? "true" : "false");                                   \
    else if (json_is_integer(v))                                                                   \
      n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s" #name "=%lld", n ? "," : "",      \
                            (long long)json_integer_value(v));                                     \
    else if (json_is_real(v))                                                                      \
      n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s" #name "=%.17g", n ? "," : "",     \
                            json_real_value(v));                                                   \
  }
  SC_KNOBS(STORED) // json_object_get(NULL, ...) is NULL: nothing
#undef STORED
  if (n >= cap) buf[0] = 0; // too long to be whole: none rather than a cut one
  json_decref(o);
}

// Loads run a's requests and builds its scenario: its layout (the SPEC's, else its stored
// deployment's unless it is an import that gave none, else the flags'), its knobs (a simulated
// run's stored ones, then the SPEC's; the rest BASE's), whether its
// first tokens were measured; its model into model (the run row's).
static sc_status load_run(store *db, const run_arg *a, const char *profile, const char *model,
                          const char *dtype, const char *kv_dtype, int tp, int pp,
                          calib_run *out, rq_req_time **req, char *run_model, size_t cap,
                          sc_error *err) {
  rq_run run;
  SC_TRY(rq_run_load(store_db(db), a->id, &run, err));
  bool said = strcmp(run.backend, "import") || strstr(run.config, "\"layout\"");
  if (said && run.n_deps > 0) {
    tp = run.deps[0].tp;
    pp = run.deps[0].pp;
  }
  if (a->tp) tp = a->tp;
  if (a->pp) pp = a->pp;
  snprintf(run_model, cap, "%s", run.model);
  bool e2e = strstr(run.config, "\"e2e_only\":true") != NULL;
  // a simulated run's config holds the knobs its engine ran with (a target's holds the
  // scenario's limits, not the server's): they come before the SPEC's
  char stored[400] = "";
  if (!strcmp(run.mode, "sim")) stored_knobs(run.config, stored, sizeof stored);
  rq_run_free(&run);
  memset(out, 0, sizeof *out);
  out->id = a->id;
  out->e2e_only = e2e;
  int n = 0;
  SC_TRY(rq_request_times(store_db(db), a->id, req, &n, err));
  out->req = *req;
  out->n = n;
  sc_error e2 = {{0}};
  sc_status st = make_scenario(profile, model, dtype, kv_dtype, tp, pp, &out->s, &e2);
  if (st != SC_OK) // the layout's line, for what the planner or the shard plan refuses
    return sc_fail(err, st, "calibrate: run %lld at tp %d, pp %d: %s", (long long)a->id, tp, pp,
                   e2.msg);
  char kbuf[600];
  snprintf(kbuf, sizeof kbuf, "%s%s%s", stored, stored[0] && a->knobs[0] ? "," : "", a->knobs);
  for (char *save = NULL, *tok = strtok_r(kbuf, ",", &save); st == SC_OK && tok;
       tok = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(tok, '=');
    *eq = 0;
    if (!set_knob(&out->s->limits, tok, eq + 1))
      st = sc_fail(err, SC_INVALID, "calibrate: run %lld: '%s=%s' is not a scheduler knob within "
                   "its bound (see --help)", (long long)a->id, tok, eq + 1);
  }
  // the layout must hold the model on the profile: one line saying why not
  engine_config ec;
  uint64_t now = 0;
  if (st == SC_OK &&
      scenario_engine_config(out->s, &out->s->deployments[0], &out->s->model.config,
                             out->s->mp.weight_dtype, sc_clock_virtual(&now), &ec, &e2) != SC_OK)
    st = sc_fail(err, SC_INVALID, "calibrate: run %lld at tp %d, pp %d on %s: %s",
                 (long long)a->id, tp, pp, profile, e2.msg);
  return st;
}

int cmd_calibrate(int argc, char **argv) {
  const char *db_path = NULL, *profile = NULL, *model = NULL, *out = NULL;
  const char *dtype = NULL, *kv_dtype = NULL;
  run_arg args[2 * CAL_MAX_RUNS];
  int n_fit = 0, n_check = 0, tp = 1, pp = 1;
  run_arg fit_args[CAL_MAX_RUNS], check_args[CAL_MAX_RUNS];
  bool no_fit = false, strict = false;
  static const struct option opts[] = {
      {"db", required_argument, 0, 'd'},      {"run", required_argument, 0, 'r'},
      {"check", required_argument, 0, 'c'},   {"profile", required_argument, 0, 'p'},
      {"model", required_argument, 0, 'm'},   {"tp", required_argument, 0, 'T'},
      {"pp", required_argument, 0, 'P'},      {"strict", no_argument, 0, 'S'},
      {"out", required_argument, 0, 'o'},     {"no-fit", no_argument, 0, 'N'},
      {"dtype", required_argument, 0, 'D'},   {"kv-cache-dtype", required_argument, 0, 'K'},
      {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
  optind = 1;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, "d:r:c:p:m:o:h", opts, NULL)) != -1) {
    run_arg ra;
    const char *bad = NULL;
    switch (c) {
    case 'd': db_path = optarg; break;
    case 'r':
    case 'c':
      if (!parse_run_arg(optarg, &ra, &bad))
        return cli_usage_error("calibrate", "expected a run id, or ID:tp=N,pp=N,KNOB=V,...", bad);
      if ((c == 'r' ? n_fit : n_check) == CAL_MAX_RUNS)
        return cli_usage_error("calibrate", "too many runs", optarg);
      if (c == 'r') fit_args[n_fit++] = ra;
      else check_args[n_check++] = ra;
      break;
    case 'p': profile = optarg; break;
    case 'm': model = optarg; break;
    case 'T':
    case 'P':
      if (!cli_parse_int(optarg, 1, 64, c == 'T' ? &tp : &pp))
        return cli_usage_error("calibrate", "--tp and --pp expect an integer in 1..64", optarg);
      break;
    case 'o': out = optarg; break;
    case 'N': no_fit = true; break;
    case 'S': strict = true; break;
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
  int n_all = n_fit + n_check;
  for (int i = 0; i < n_all; i++) args[i] = i < n_fit ? fit_args[i] : check_args[i - n_fit];

  sc_error err = {{0}};
  store *db = NULL;
  rq_req_time *reqs[2 * CAL_MAX_RUNS] = {0};
  calib_run runs[2 * CAL_MAX_RUNS];
  memset(runs, 0, sizeof runs);
  char models[2 * CAL_MAX_RUNS][256];
  sc_status st = store_open_readonly(db_path, &db, &err);
  for (int i = 0; st == SC_OK && i < n_all; i++) {
    st = load_run(db, &args[i], profile, model, dtype, kv_dtype, tp, pp, &runs[i], &reqs[i],
                  models[i], sizeof models[i], &err);
    // one model per fit: a run row names the model it served ("" or "unknown": not said)
    for (int j = 0; st == SC_OK && j < i; j++)
      if (models[i][0] && models[j][0] && strcmp(models[i], "unknown") &&
          strcmp(models[j], "unknown") && strcmp(models[i], models[j]))
        st = sc_fail(&err, SC_INVALID,
                     "calibrate: runs %lld and %lld served different models (%s, %s): fit one "
                     "model at a time", (long long)args[j].id, (long long)args[i].id, models[j],
                     models[i]);
  }
  int rc = CLI_OK;
  calib_ident id = {0};
  bool have_id = false;
  calib_spread sp = {0, 0};
  calib_prediction *pred = calloc((size_t)(n_all + n_fit), sizeof *pred);
  if (st == SC_OK && !pred) st = sc_fail(&err, SC_OOM, "calibrate: out of memory");
  char note[4096] = "", idtext[2048] = "";
  size_t nl = 0;
  double lo[CALIB_NP], hi[CALIB_NP], p[CALIB_NP], width = 0;
  if (st == SC_OK) {
    printf("calibrate: %s on %s; ", model, profile);
    if (!no_fit) {
      printf("fitting to %d run%s...\n", n_fit, n_fit == 1 ? "" : "s");
      fflush(stdout);
      calib_fit_result fr;
      st = calib_fit(runs, n_fit, &fr, &err);
      if (st == SC_OK)
        printf("fit after %d replays: step_s %.4g  seq_s %.4g  prefill_eff %.4g  decode_eff "
               "%.4g  tp_step_s %.4g  (objective %.4g)\n",
               fr.evaluations, fr.engine.step_s, fr.engine.seq_s, fr.engine.prefill_eff,
               fr.engine.decode_eff, fr.engine.tp_step_s, fr.objective);
      // every run, checks too, replays with the fitted block
      double q[CALIB_NP];
      calib_get(&fr.engine, q);
      if (st == SC_OK) calib_set(runs, n_all, q);
      if (st == SC_OK) st = calib_identify(runs, n_fit, &id, &err);
      have_id = st == SC_OK;
      if (st == SC_OK) st = calib_spread_of(runs, n_fit, &sp, &err);
    } else {
      printf("replaying with the profile's engine block\n");
    }
    for (int i = 0; i < n_all; i++) printf("  run %lld: tp %d, pp %d%s\n", (long long)runs[i].id,
                                           runs[i].s->deployments[0].tp,
                                           runs[i].s->deployments[0].pp,
                                           runs[i].e2e_only ? ", E2E only" : "");
    if (st == SC_OK)
      printf("\n%-6s %4s %5s  %10s %10s %8s  %8s %8s %8s  %7s %7s\n", "", "run", "reqs",
             "TTFT ms", "sim", "err", "TPOT ms", "sim", "err", "TTFTrms", "TPOTrms");
    for (int i = 0; st == SC_OK && i < n_all; i++) {
      calib_errors e;
      st = calib_eval(&runs[i], &e, NULL, &err);
      if (st != SC_OK) break;
      print_row(i < n_fit ? "fit" : "check", runs[i].id, &e, runs[i].e2e_only);
      if (i < n_fit && nl < sizeof note)
        nl += (size_t)snprintf(note + nl, sizeof note - nl,
                               "run %lld (tp %d): TTFT mean %+.1f%%, TPOT mean %+.1f%%, E2E mean "
                               "%+.1f%%, output tok/s %+.1f%%\n",
                               (long long)runs[i].id, runs[i].s->deployments[0].tp,
                               100 * e.ttft_err, 100 * e.tpot_err, 100 * e.e2e_err,
                               100 * e.tok_s_err);
    }
    if (st == SC_OK)
      printf("\nerr: (sim - measured) / measured of the means; rms: per-request error / measured "
             "mean (minimized)\n");
    calib_get(&runs[0].s->hw.sim.engine, p);
    calib_bounds(&runs[0].s->hw.sim, lo, hi);
    if (st == SC_OK && have_id) {
      ident_text(&id, lo, hi, p, idtext, sizeof idtext);
      fputs(idtext, stderr);
      if (id.identified) printf("identified: every parameter is pinned by the runs\n");
    }
    // leave-one-run-out
    double cv = 0;
    if (st == SC_OK && !no_fit && n_fit >= 2) {
      printf("\nleave-one-run-out (each run predicted by the fit of the others):\n");
      fflush(stdout);
      st = calib_cross_validate(runs, n_fit, pred + n_all, &cv, &err);
      for (int i = 0; st == SC_OK && i < n_fit; i++)
        print_pred("loo", runs[i].id, &pred[n_all + i], runs[i].e2e_only);
      if (st == SC_OK) {
        int in = 0;
        for (int i = 0; i < n_fit; i++) in += pred[n_all + i].inside_tok_s;
        printf("cross-validation: rms error %.1f%% (TPOT or E2E, and throughput); %d of %d "
               "measured throughputs inside their intervals\n", 100 * cv, in, n_fit);
        if (nl < sizeof note)
          nl += (size_t)snprintf(note + nl, sizeof note - nl,
                                 "leave-one-run-out: rms error %.1f%%, %d of %d inside\n",
                                 100 * cv, in, n_fit);
      }
      sp.cv_rel = cv;
    }
    // the predictions with their intervals
    if (st == SC_OK) printf("\npredictions with their intervals:\n");
    for (int i = 0; st == SC_OK && i < n_all; i++) {
      if (no_fit) {
        // the profile's own error (or the idealized engine's) is the half-width: the spread
        // that calib_predict widens to it
        double f = sim_engine_error(&runs[i].s->hw.sim.engine) / 2;
        calib_spread given = {f > 0.02 ? sqrt(f * f - 0.02 * 0.02) : 0, 0};
        st = calib_predict(&runs[i], NULL, given, &pred[i], &err);
      } else {
        st = calib_predict(&runs[i], &id, sp, &pred[i], &err);
      }
      if (st == SC_OK) print_pred(i < n_fit ? "fit" : "check", runs[i].id, &pred[i], runs[i].e2e_only);
      if (st == SC_OK) {
        const calib_prediction *q = &pred[i];
        double wt = q->tok_s.value > 0 ? (q->tok_s.hi - q->tok_s.value) / q->tok_s.value : 0;
        double wp = q->tpot_ms.value > 0 ? (q->tpot_ms.hi - q->tpot_ms.value) / q->tpot_ms.value : 0;
        width = fmax(width, fmax(wt, runs[i].e2e_only ? 0 : wp));
      }
    }
    for (int i = 0; st == SC_OK && i < n_fit && n_fit >= 2; i++) {
      const calib_prediction *q = &pred[n_all + i];
      if (q->tok_s.value > 0) width = fmax(width, (q->tok_s.hi - q->tok_s.value) / q->tok_s.value);
    }
    if (st == SC_OK && !no_fit) {
      if (nl < sizeof note) nl += (size_t)snprintf(note + nl, sizeof note - nl, "%s", idtext);
      if (nl < sizeof note)
        snprintf(note + nl, sizeof note - nl,
                 "error %.3g: the widest interval of these predictions (relative half-width)", width);
      runs[0].s->hw.sim.engine.error = width;
      printf("\nthe profile's error (the intervals' half-width): %.1f%%\n", 100 * width);
      st = write_profile(profile, out, &runs[0].s->hw.sim.engine, note, &err);
      if (st == SC_OK) printf("wrote %s\n", out);
    }
  }
  if (st != SC_OK) rc = cli_fail("calibrate", st, &err);
  else if (strict && !no_fit && have_id && !id.identified) {
    fprintf(stderr, "shardcheck calibrate: --strict: the fit is not identified (above)\n");
    rc = CLI_SLO_FAIL;
  }
  for (int i = 0; i < 2 * CAL_MAX_RUNS; i++) {
    free(reqs[i]);
    scenario_free(runs[i].s);
  }
  free(pred);
  store_close(db);
  return rc;
}
