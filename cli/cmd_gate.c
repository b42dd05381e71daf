// `shardcheck gate`: compares runs with their baselines (reports/gate.c) and exits 1 when a
// metric regressed; `shardcheck baseline`: marks a run (and its repetition group) as its
// scenario's baseline. This file parses arguments, picks the runs and writes the table, JSON
// and JUnit; the comparison and the statistics are reports/gate.c's.
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "reports/gate.h"
#include "reports/metrics.h"
#include "reports/query.h"
#include "reports/report_impl.h"
#include "reports/store.h"

enum { MAX_GATES = 64 };

static void usage(FILE *f) {
  fprintf(f,
          "usage: shardcheck gate --db CURRENT.db [--baseline BASE.db] [--run ID]\n"
          "                       [--baseline-run ID] [--tolerance PCT] [--metric NAME[:PCT]]...\n"
          "                       [--alpha A] [--accept-improvements] [--junit PATH] [--json]\n"
          "       shardcheck gate --capacity --db CURRENT.db [--baseline BASE.db] [--run ID]\n"
          "                       [--baseline-run ID] [--tolerance PCT] [--accept-improvements]\n\n"
          "Compares a run with its baseline, deployment by deployment (matched by label) and\n"
          "phase by phase, and says per metric: improved, same, worse within noise,\n"
          "REGRESSED, MISSING (the baseline has it, the run does not) or, in sim, CHANGED\n"
          "(better past the tolerance, not accepted). A run recorded with `run --repeat N`\n"
          "stands for its N repetitions. A run that did not complete (crashed, killed,\n"
          "interrupted or failed) never passes.\n\n"
          "  --db PATH          the current results database (default results.db)\n"
          "  --baseline PATH    where the baseline run is (default: the same database)\n"
          "  --run ID           the run to judge (default: the latest run, whatever its\n"
          "                     status, of every scenario and mode in --db, each judged on\n"
          "                     its own)\n"
          "  --baseline-run ID  the baseline (default: the latest run of the same scenario and\n"
          "                     mode marked with `shardcheck baseline`, earlier than the run\n"
          "                     judged when both are in one database)\n"
          "  --tolerance PCT    allowed change (real runs: the worse way; sim runs and\n"
          "                     capacity searches: either way), e.g. 5%% or 0.05\n"
          "                     (default 5%% for real runs, 1%% for sim runs)\n"
          "  --metric N[:PCT]   ");
  // the default list is the metric table's (scenarios/metric_names.h)
  char dflt[400], para[700];
  mt_metric_gated_words(dflt, sizeof dflt);
  snprintf(para, sizeof para,
           "compare this metric (repeatable; default: %s), with its own tolerance when given; a "
           "name covers each prompt class's row of it too, CLASS:N (short:ttft_p95_ms) that "
           "class's only",
           dflt);
  cli_print_wrapped(f, para, 21, 82);
  fprintf(f,
          "  --alpha A          significance level of the one-sided test across repetitions\n"
          "                     (0.01; with 5 vs 5 repetitions the smallest p is 1/252 = 0.004)\n"
          "  --capacity         compare `shardcheck capacity` searches instead of runs: the\n"
          "                     recommendation, and per layout max_rate, max_rate_lo,\n"
          "                     max_rate_hi (higher is better) and cost_per_mtok (lower);\n"
          "                     --run and --baseline-run then name search ids (default: the\n"
          "                     newest search in --db, against the newest search of its\n"
          "                     scenario in --baseline, or the one before it in --db).\n"
          "                     Searches of another question (scenario, SLO, rates,\n"
          "                     --iters, seed, costs, GPUs) are refused\n"
          "  --accept-improvements\n"
          "                     sim runs and capacity searches: a row better by more than\n"
          "                     the tolerance is 'improved' and passes (without it: CHANGED,\n"
          "                     a failure, as an unexplained change of a deterministic run\n"
          "                     is a finding)\n"
          "  --junit PATH       also write JUnit XML: one testcase per deployment x metric\n"
          "  --json             print JSON instead of the table\n\n"
          "A scenario's `gate:` section (tolerance, alpha, metrics) gives the defaults; the\n"
          "options above override it.\n"
          "Sim runs are deterministic: the tolerance alone decides, in both directions. Real\n"
          "runs with repetitions on both sides regress only when the median moved past the\n"
          "tolerance AND a one-sided Mann-Whitney U test finds the shift significant; their\n"
          "improvements pass (docs/gate.md).\n"
          "A scenario with no baseline yet is reported and passes, unless its run did not\n"
          "complete; so are deployments, phases and metrics only the current run has. What\n"
          "only the baseline has is MISSING.\n"
          "exit codes: 0 nothing failed, 1 something regressed, is missing, changed (sim) or\n"
          "the run is incomplete, 2 bad input (a missing run or database, no runs, runs of\n"
          "different scenarios or of sim and real mode, a schema newer than this\n"
          "shardcheck), 3 runtime failure.\n");
}

static void baseline_usage(FILE *f) {
  fprintf(f, "usage: shardcheck baseline --db PATH --run ID\n\n"
             "Marks run ID (and, for a `run --repeat` group, the whole group) as the baseline of\n"
             "its scenario: `shardcheck gate` compares later runs with the latest baseline.\n"
             "exit codes: 0 ok, 2 bad input (no such run or database), 3 runtime failure.\n");
}

// --- picking runs

// The latest run marked as a baseline in base_db of run's scenario and mode; in run's own
// database, only one earlier than run's repetition group. 0: none.
static int64_t find_baseline(sqlite3 *cur_db, int64_t run, sqlite3 *base_db) {
  char scen[128] = "", mode[16] = "";
  if (!rq_run_scenario_mode(cur_db, run, scen, sizeof scen, mode, sizeof mode)) return 0;
  int64_t group[GATE_MAX_REPS];
  int64_t before = INT64_MAX;
  if (base_db == cur_db && gate_group(cur_db, run, group, GATE_MAX_REPS) > 0) before = group[0];
  return rq_latest_baseline(base_db, scen, mode, before);
}

// --- output

static void fmt(double v, char *buf, size_t cap) {
  if (isnan(v)) snprintf(buf, cap, "-");
  else rp_fmt_num(v, buf, cap);
}

static void fmt_pct(double v, const char *format, char *buf, size_t cap) {
  if (isnan(v)) snprintf(buf, cap, "-");
  else if (isinf(v)) snprintf(buf, cap, "%s", v > 0 ? "+inf" : "-inf");
  else snprintf(buf, cap, format, 100 * v);
}

static const char *how_judged(const gate_result *g) {
  if (g->sim) return "sim: exact comparison, the tolerance decides";
  if (g->n_cur_reps >= 2 && g->n_base_reps >= 2) return "real: tolerance and significance";
  return "real, no repetitions: tolerance only";
}

// One row of the table; wm: the metric column's width.
static void print_row(const gate_row *r, int wm) {
  char b[32], c[32], ch[32], tol[32], p[32], nb[32], nc[32], nz[72];
  fmt(r->base, b, sizeof b);
  fmt(r->cur, c, sizeof c);
  fmt_pct(r->change, "%+.1f%%", ch, sizeof ch);
  fmt_pct(r->tol, "%.1f%%", tol, sizeof tol);
  if (isnan(r->p)) snprintf(p, sizeof p, "-");
  else snprintf(p, sizeof p, "%.3f", r->p);
  fmt_pct(r->noise, "%.1f", nb, sizeof nb);
  fmt_pct(r->noise_cur, "%.1f", nc, sizeof nc);
  if (isnan(r->noise) && isnan(r->noise_cur)) snprintf(nz, sizeof nz, "-");
  else snprintf(nz, sizeof nz, "%s/%s%%", nb, nc);
  printf("%-14s %-12s %-*s %12s %12s %9s %6s %6s %11s  %s%s%s\n", r->deployment,
         r->phase[0] ? r->phase : "(all)", wm, r->metric, b, c, ch, tol, p, nz,
         gate_verdict_name(r->v), r->note[0] ? ": " : "", r->note);
}

// The noise the gate measured, in one line.
static void print_noise(const gate_result *g) {
  if (g->sim) {
    printf("noise: none (sim runs are deterministic)\n");
  } else if (g->noisiest < 0) {
    printf("noise: not measured (a side has one repetition)\n");
  } else {
    const gate_row *r = &g->rows[g->noisiest];
    char b[32], c[32];
    fmt_pct(g->noise_base, "%.1f%%", b, sizeof b);
    fmt_pct(g->noise_cur, "%.1f%%", c, sizeof c);
    printf("noise (half range / median over the repetitions): median %s baseline, %s current; "
           "largest %.1f%% (%s %s %s); alpha %g\n", b, c,
           100 * fmax(isnan(r->noise) ? 0 : r->noise, isnan(r->noise_cur) ? 0 : r->noise_cur),
           r->deployment, r->phase[0] ? r->phase : "(all)", r->metric, g->alpha);
  }
}

static void print_table(const gate_result *g) {
  if (!g->base_run)
    printf("scenario %s: run %lld, no baseline: nothing compared\n", g->scenario,
           (long long)g->cur_run);
  else if (g->capacity)
    printf("scenario %s: capacity search %lld against baseline search %lld, simulated: exact "
           "comparison, the tolerance decides\n", g->scenario, (long long)g->cur_run,
           (long long)g->base_run);
  else
    printf("scenario %s: run %lld (%d repetition%s) against baseline run %lld (%d), %s\n",
           g->scenario, (long long)g->cur_run, g->n_cur_reps, g->n_cur_reps == 1 ? "" : "s",
           (long long)g->base_run, g->n_base_reps, how_judged(g));
  int wm = 14; // wider for a prompt class's "short:ttft_p95_ms"
  for (int i = 0; i < g->n; i++)
    if ((int)strlen(g->rows[i].metric) > wm) wm = (int)strlen(g->rows[i].metric);
  printf("%-14s %-12s %-*s %12s %12s %9s %6s %6s %11s  %s\n", "deployment", "phase", wm,
         "metric", "baseline", "current", "change", "tol", "p", "noise b/c", "verdict");
  for (int i = 0; i < g->n; i++) print_row(&g->rows[i], wm);
  print_noise(g);
  if (g->incomplete[0]) printf("INCOMPLETE: %s\n", g->incomplete);
  printf("%s: %d of %d comparisons regressed, %d missing, %d changed", g->scenario, g->regressed,
         g->n, g->missing, g->changed);
  printf("%s\n\n", g->incomplete[0] ? "; the run is incomplete" : "");
}

static json_t *num_or_null(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *row_json(const gate_row *r) {
  return json_pack("{s:s, s:s, s:s, s:o, s:o, s:o, s:f, s:o, s:o, s:o, s:i, s:i, s:s, s:s}",
                   "deployment", r->deployment, "phase", r->phase, "metric", r->metric,
                   "baseline", num_or_null(r->base), "current", num_or_null(r->cur), "change",
                   num_or_null(r->change), "tolerance", r->tol, "p", num_or_null(r->p), "noise",
                   num_or_null(r->noise), "noise_current", num_or_null(r->noise_cur),
                   "n_baseline", r->n_base, "n_current", r->n_cur, "verdict",
                   gate_verdict_name(r->v), "note", r->note);
}

static json_t *noise_json(const gate_result *g) {
  if (g->noisiest < 0) return json_null();
  const gate_row *r = &g->rows[g->noisiest];
  return json_pack("{s:o, s:o, s:{s:s, s:s, s:s}}", "baseline", num_or_null(g->noise_base),
                   "current", num_or_null(g->noise_cur), "noisiest", "deployment",
                   r->deployment, "phase", r->phase, "metric", r->metric);
}

static json_t *gate_json(const gate_result *g) {
  json_t *rows = json_array();
  for (int i = 0; i < g->n; i++) json_array_append_new(rows, row_json(&g->rows[i]));
  return json_pack("{s:s, s:s, s:I, s:I, s:i, s:i, s:f, s:o, s:i, s:i, s:i, s:i, s:o, s:o}",
                   "scenario", g->scenario, "mode",
                   g->capacity ? "capacity" : g->sim ? "sim" : "real", "current_run",
                   (json_int_t)g->cur_run, "baseline_run", (json_int_t)g->base_run,
                   "current_repetitions", g->n_cur_reps, "baseline_repetitions", g->n_base_reps,
                   "alpha", g->alpha, "noise", noise_json(g), "regressed", g->regressed,
                   "missing", g->missing, "changed", g->changed, "failed", g->failed,
                   "incomplete", g->incomplete[0] ? json_string(g->incomplete) : json_null(),
                   "rows", rows);
}

static void attr(FILE *f, const char *name, const char *v) {
  fprintf(f, " %s=\"", name);
  rp_put_esc(f, v);
  fputc('"', f);
}

// One <testcase>: a <failure> when REGRESSED, MISSING or CHANGED, <skipped> when only the
// current run has the metric.
static void junit_case(FILE *f, const gate_result *g, const gate_row *r) {
  char cls[256], name[160], msg[320], b[32], c[32], ch[32];
  snprintf(cls, sizeof cls, "%.127s.%.95s", g->scenario, r->deployment);
  snprintf(name, sizeof name, "%.63s%s%.63s", r->phase, r->phase[0] ? "/" : "", r->metric);
  fputs("  <testcase", f);
  attr(f, "classname", cls);
  attr(f, "name", name);
  if (r->v != GATE_REGRESSED && r->v != GATE_CHANGED && r->v != GATE_NEW &&
      r->v != GATE_MISSING) {
    fputs("/>\n", f);
    return;
  }
  fputs(">\n", f);
  if (r->v == GATE_REGRESSED || r->v == GATE_CHANGED) {
    fmt(r->base, b, sizeof b);
    fmt(r->cur, c, sizeof c);
    fmt_pct(r->change, "%+.1f%%", ch, sizeof ch);
    int k = snprintf(msg, sizeof msg, "%s: %s -> %s (%s, tolerance %.1f%%",
                     r->v == GATE_REGRESSED ? "REGRESSED" : "CHANGED (better, not accepted)", b,
                     c, ch, 100 * r->tol);
    if (!isnan(r->p))
      snprintf(msg + k, sizeof msg - (size_t)k, ", p = %.4f < alpha %g over %d vs %d "
               "repetitions)", r->p, g->alpha, r->n_base, r->n_cur);
    else
      snprintf(msg + k, sizeof msg - (size_t)k, ")");
    fputs(r->v == GATE_REGRESSED ? "    <failure type=\"regression\""
                                 : "    <failure type=\"changed\"", f);
  } else if (r->v == GATE_MISSING) {
    snprintf(msg, sizeof msg, "MISSING: the baseline has it, the run does not%s%.200s",
             g->incomplete[0] ? " (" : "", g->incomplete[0] ? g->incomplete : "");
    if (g->incomplete[0]) snprintf(msg + strlen(msg), sizeof msg - strlen(msg), ")");
    fputs("    <failure type=\"missing\"", f);
  } else {
    snprintf(msg, sizeof msg, "no baseline value: reported, not judged");
    fputs("    <skipped", f);
  }
  attr(f, "message", msg);
  fputs("/>\n  </testcase>\n", f);
}

static bool write_junit(const char *path, const gate_result *g, int n) {
  FILE *f = fopen(path, "w");
  if (!f) return false;
  fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n", f);
  for (int k = 0; k < n; k++) {
    int skipped = 0;
    for (int i = 0; i < g[k].n; i++) skipped += g[k].rows[i].v == GATE_NEW;
    char count[32], fails[32], skips[32];
    snprintf(count, sizeof count, "%d", g[k].n + (g[k].incomplete[0] != 0));
    snprintf(fails, sizeof fails, "%d", g[k].failed);
    snprintf(skips, sizeof skips, "%d", skipped);
    fputs("<testsuite", f);
    attr(f, "name", g[k].scenario);
    attr(f, "tests", count);
    attr(f, "failures", fails);
    attr(f, "skipped", skips);
    fputs(">\n", f);
    if (g[k].incomplete[0]) { // the run itself: one more case, failed
      fputs("  <testcase", f);
      attr(f, "classname", g[k].scenario);
      attr(f, "name", "run complete");
      fputs(">\n    <failure type=\"incomplete\"", f);
      attr(f, "message", g[k].incomplete);
      fputs("/>\n  </testcase>\n", f);
    }
    for (int i = 0; i < g[k].n; i++) junit_case(f, &g[k], &g[k].rows[i]);
    fputs("</testsuite>\n", f);
  }
  fputs("</testsuites>\n", f);
  return fclose(f) == 0;
}

// --- commands

typedef struct gate_args {
  const char *db, *base_db, *junit;
  int64_t run, base_run;
  bool json, capacity;
  gate_options o;
  unsigned set; // given on the command line: 1 tolerance, 2 alpha, 4 metrics
} gate_args;

static int parse_gate(int argc, char **argv, gate_args *a) {
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i];
    bool v = i + 1 < argc;
    uint64_t u;
    double d;
    if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
      usage(stdout);
      return -1;
    } else if (!strcmp(s, "--db") && v) {
      a->db = argv[++i];
    } else if (!strcmp(s, "--baseline") && v) {
      a->base_db = argv[++i];
    } else if ((!strcmp(s, "--run") || !strcmp(s, "--baseline-run")) && v) {
      if (!cli_parse_u64(argv[++i], &u) || u == 0 || u > INT64_MAX)
        return cli_usage_error("gate", "a run id is a positive integer, got", argv[i]);
      *(!strcmp(s, "--run") ? &a->run : &a->base_run) = (int64_t)u;
    } else if (!strcmp(s, "--tolerance") && v) {
      if (!cli_parse_pct(argv[++i], &d))
        return cli_usage_error("gate", "--tolerance needs a percentage such as 5%, got", argv[i]);
      a->o.tol_real = a->o.tol_sim = d;
      a->set |= 1;
    } else if (!strcmp(s, "--alpha") && v) {
      if (!cli_parse_double(argv[++i], 1e-9, 0.5, &a->o.alpha))
        return cli_usage_error("gate", "--alpha needs a number in (0, 0.5], got", argv[i]);
      a->set |= 2;
    } else if (!strcmp(s, "--metric") && v) {
      const char *m = argv[++i];
      if (a->o.n_metrics == GATE_MAX_METRICS)
        return cli_usage_error("gate", "too many --metric options at", m);
      gate_metric_tol *t = &a->o.metrics[a->o.n_metrics];
      // NAME, NAME:PCT, CLASS:NAME or CLASS:NAME:PCT: the last ':' starts a tolerance unless
      // a metric name follows it
      const char *colon = strrchr(m, ':');
      if (colon && mt_metric_find(colon + 1)) colon = NULL;
      size_t len = colon ? (size_t)(colon - m) : strlen(m);
      snprintf(t->name, sizeof t->name, "%.*s", (int)len, m);
      t->tol = -1;
      if (colon && !cli_parse_pct(colon + 1, &t->tol))
        return cli_usage_error("gate", "--metric NAME:PCT needs a percentage after ':', got", m);
      const char *base = mt_metric_base(t->name);
      const mt_metric_info *mi = mt_metric_find(base);
      if (!mi) return cli_usage_error("gate", "--metric: unknown metric", t->name);
      if (mi->dir == MT_NEUTRAL)
        return cli_usage_error("gate", "--metric: no better direction, so no regression, for",
                               t->name);
      if (base != t->name && (base == t->name + 1 || !mt_metric_per_class(base)))
        return cli_usage_error("gate", "--metric CLASS:NAME: a prompt class's rows carry "
                               "latencies, output_tok_s, req_s, goodput_rps, error_rate, "
                               "failed_requests and timeout_requests; got", t->name);
      a->o.n_metrics++;
      a->set |= 4;
    } else if (!strcmp(s, "--junit") && v) {
      a->junit = argv[++i];
    } else if (!strcmp(s, "--capacity")) {
      a->capacity = true;
    } else if (!strcmp(s, "--accept-improvements")) {
      a->o.accept_improvements = true;
    } else if (!strcmp(s, "--json")) {
      a->json = true;
    } else {
      return cli_usage_error("gate", s[0] == '-' && !v ? "option needs a value, or is unknown"
                                                       : "unknown argument",
                             s);
    }
  }
  return 0;
}

// Gates each of runs[0..n_runs) against its baseline into g (*n results); returns CLI_OK or
// the exit code of the first failure (what was gated before it stays in g).
static int gate_all(const gate_args *a, sqlite3 *cdb, sqlite3 *bdb, const int64_t *runs,
                    int n_runs, gate_result *g, int *n) {
  // (a run without a baseline gets a result only when it did not complete: it fails)
  sc_error err = {{0}};
  for (int i = 0; i < n_runs; i++) {
    int64_t b = a->base_run ? a->base_run : find_baseline(cdb, runs[i], bdb);
    if (!b) {
      fprintf(stderr, "shardcheck gate: run %lld: no baseline of its scenario in %s (mark one "
              "with `shardcheck baseline`): nothing to compare\n", (long long)runs[i],
              a->base_db ? a->base_db : a->db);
      if (a->run) return CLI_USAGE;
      // nothing to compare, but a run that did not complete still fails
      gate_result *r = &g[*n];
      memset(r, 0, sizeof *r);
      int64_t grp[GATE_MAX_REPS];
      int ng = gate_group(cdb, runs[i], grp, GATE_MAX_REPS);
      gate_check_complete(cdb, grp, ng, r);
      if (r->incomplete[0]) {
        char mode[16] = "";
        rq_run_scenario_mode(cdb, runs[i], r->scenario, sizeof r->scenario, mode, sizeof mode);
        r->sim = !strcmp(mode, "sim");
        r->cur_run = ng > 0 ? grp[0] : runs[i];
        r->n_cur_reps = ng;
        r->noisiest = -1;
        r->alpha = a->o.alpha;
        r->noise_base = r->noise_cur = NAN;
        r->failed = 1;
        (*n)++;
      }
      continue;
    }
    gate_options o = a->o; // the scenario's `gate:` defaults where the command line is silent
    gate_options_from_run(cdb, runs[i], a->set, &o);
    sc_status st = gate_compare(cdb, runs[i], bdb, b, &o, &g[*n], &err);
    if (st != SC_OK) return cli_fail("gate", st, &err);
    (*n)++;
  }
  return CLI_OK;
}

// Prints the table or the JSON and writes the JUnit file; returns the exit code.
static int emit(const gate_args *a, const gate_result *g, int n) {
  int regressed = 0, failed = 0;
  for (int i = 0; i < n; i++) regressed += g[i].regressed, failed += g[i].failed;
  if (a->json) {
    json_t *arr = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(arr, gate_json(&g[i]));
    json_t *o = json_pack("{s:i, s:i, s:o}", "regressed", regressed, "failed", failed, "gates",
                          arr);
    char *txt = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
    if (txt) puts(txt);
    free(txt);
    json_decref(o);
  } else {
    for (int i = 0; i < n; i++) print_table(&g[i]);
    printf("gate: %s (%d regressed, %d failed in all)\n", failed ? "FAIL" : "PASS", regressed,
           failed);
  }
  if (a->junit && !write_junit(a->junit, g, n)) {
    fprintf(stderr, "shardcheck gate: cannot write %s\n", a->junit);
    return CLI_RUNTIME;
  }
  return failed ? CLI_SLO_FAIL : CLI_OK;
}

// --capacity: the search to judge (--run, else the newest in cdb) against its baseline
// (--baseline-run, else the newest earlier search of its scenario in bdb) into g[0].
static int gate_capacity(const gate_args *a, sqlite3 *cdb, sqlite3 *bdb, gate_result *g,
                         int *n) {
  int64_t cur = a->run ? a->run : gate_capacity_latest(cdb, NULL, INT64_MAX);
  if (!cur) {
    fprintf(stderr, "shardcheck gate: no capacity searches in %s: nothing to gate\n", a->db);
    return CLI_USAGE;
  }
  char scen[128] = "";
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(cdb, "SELECT scenario FROM capacity WHERE id = ?1", -1, &st, NULL) ==
      SQLITE_OK) {
    sqlite3_bind_int64(st, 1, cur);
    if (sqlite3_step(st) == SQLITE_ROW)
      snprintf(scen, sizeof scen, "%s", (const char *)sqlite3_column_text(st, 0));
  }
  sqlite3_finalize(st);
  if (!scen[0]) {
    fprintf(stderr, "shardcheck gate: no capacity search %lld in %s\n", (long long)cur, a->db);
    return CLI_USAGE;
  }
  int64_t base = a->base_run ? a->base_run
                             : gate_capacity_latest(bdb, scen, bdb == cdb ? cur : INT64_MAX);
  if (!base) {
    fprintf(stderr, "shardcheck gate: capacity search %lld: no earlier search of scenario %s in "
            "%s: nothing to compare\n", (long long)cur, scen, a->base_db ? a->base_db : a->db);
    return CLI_USAGE;
  }
  sc_error err = {{0}};
  sc_status s = gate_capacity_compare(cdb, cur, bdb, base, &a->o, &g[0], &err);
  if (s != SC_OK) return cli_fail("gate", s, &err);
  *n = 1;
  return CLI_OK;
}

int cmd_gate(int argc, char **argv) {
  gate_args a = {.db = "results.db", .o = gate_options_defaults()};
  int rc = parse_gate(argc, argv, &a);
  if (rc) return rc < 0 ? CLI_OK : rc;
  if (a.capacity && (a.set & 4))
    return cli_usage_error("gate", "--capacity compares its own rows (recommendation, max_rate, "
                           "max_rate_lo, max_rate_hi, cost_per_mtok); --metric is for runs, got",
                           a.o.metrics[0].name);
  sc_error err = {{0}};
  store *cur = NULL, *base = NULL;
  sc_status st = store_open_readonly(a.db, &cur, &err);
  if (st == SC_OK && a.base_db) st = store_open_readonly(a.base_db, &base, &err);
  if (st != SC_OK) {
    store_close(cur);
    return cli_fail("gate", st, &err);
  }
  sqlite3 *cdb = store_db(cur), *bdb = base ? store_db(base) : cdb;
  int64_t runs[MAX_GATES];
  char scen[128];
  int n_runs = a.capacity ? 0 : a.run ? 1 : rq_latest_runs(cdb, runs, MAX_GATES), n = 0;
  if (a.run) runs[0] = a.run;
  gate_result *g = calloc(MAX_GATES, sizeof *g);
  int code = g ? CLI_OK : CLI_RUNTIME;
  if (!g) fprintf(stderr, "shardcheck gate: out of memory\n");
  if (g && a.capacity) {
    code = gate_capacity(&a, cdb, bdb, g, &n);
    if (code == CLI_OK) code = emit(&a, g, n);
  } else if (g && a.run && !rq_run_scenario_mode(cdb, a.run, scen, sizeof scen, NULL, 0)) {
    fprintf(stderr, "shardcheck gate: no run %lld in %s\n", (long long)a.run, a.db);
    code = CLI_USAGE;
  }
  if (code == CLI_OK && !a.capacity && n_runs == 0) {
    fprintf(stderr, "shardcheck gate: no runs in %s: nothing to gate\n", a.db);
    code = CLI_USAGE;
  }
  if (code == CLI_OK && !a.capacity) code = gate_all(&a, cdb, bdb, runs, n_runs, g, &n);
  if (code == CLI_OK && !a.capacity) code = emit(&a, g, n);
  for (int i = 0; i < n; i++) gate_result_free(&g[i]);
  free(g);
  store_close(base);
  store_close(cur);
  return code;
}

// Sets run.baseline = 1 on the n runs ids in one transaction; false on a database error.
static bool mark_baseline(sqlite3 *db, const int64_t *ids, int n) {
  sqlite3_stmt *st = NULL;
  bool ok = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK &&
            sqlite3_prepare_v2(db, "UPDATE run SET baseline = 1 WHERE id = ?1", -1, &st, NULL) ==
                SQLITE_OK;
  for (int i = 0; ok && i < n; i++) {
    sqlite3_bind_int64(st, 1, ids[i]);
    ok = sqlite3_step(st) == SQLITE_DONE;
    sqlite3_reset(st);
  }
  sqlite3_finalize(st);
  if (ok) ok = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK;
  if (!ok) sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
  return ok;
}

int cmd_baseline(int argc, char **argv) {
  const char *db = "results.db";
  uint64_t run = 0;
  for (int i = 1; i < argc; i++) {
    bool v = i + 1 < argc;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      baseline_usage(stdout);
      return CLI_OK;
    } else if (!strcmp(argv[i], "--db") && v) {
      db = argv[++i];
    } else if (!strcmp(argv[i], "--run") && v) {
      if (!cli_parse_u64(argv[++i], &run) || run == 0 || run > INT64_MAX)
        return cli_usage_error("baseline", "a run id is a positive integer, got", argv[i]);
    } else {
      return cli_usage_error("baseline", "unknown argument", argv[i]);
    }
  }
  if (!run) return cli_usage_error("baseline", "missing --run ID", NULL);
  sc_error err = {{0}};
  store *s = NULL;
  sc_status st = store_open(db, &s, &err);
  if (st != SC_OK) return cli_fail("baseline", st, &err);
  int64_t group[GATE_MAX_REPS];
  char scen[128] = "?";
  int n = gate_group(store_db(s), (int64_t)run, group, GATE_MAX_REPS), code = CLI_OK;
  if (n == 0) {
    fprintf(stderr, "shardcheck baseline: no run %llu in %s\n", (unsigned long long)run, db);
    code = CLI_USAGE;
  } else if (!mark_baseline(store_db(s), group, n)) {
    fprintf(stderr, "shardcheck baseline: %s: %s\n", db, sqlite3_errmsg(store_db(s)));
    code = CLI_RUNTIME;
  } else {
    rq_run_scenario_mode(store_db(s), (int64_t)run, scen, sizeof scen, NULL, 0);
    printf("run %llu%s is now the baseline of scenario %s\n", (unsigned long long)run,
           n > 1 ? " (with its repetitions)" : "", scen);
  }
  store_close(s);
  return code;
}
