// `shardcheck report --history SCENARIO`: a database of a few sim runs of one small scenario
// (each on another simulated GPU, so their values differ), start times rewritten so start
// order is not id order, one run marked baseline with plain SQL; then the data files hold one
// row per run in start order with the stored pooled values, the baseline is marked, a
// repetition group is one point (median, min, max), incomplete runs are listed and not
// plotted, runs of two modes are two series, a scenario's gate metrics choose the plots, a
// database without repetition groups still works, the plots exist when gnuplot does (skipped
// with a message when it is not installed), and a scenario without runs is exit 2.
#include <criterion/criterion.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/helpers.h"

static char out[1 << 16];

static int cli(const char *args) {
  return sc_test_run_cli_clean(args, out, sizeof out);
}

// Two deployments, one closed-loop phase: well under a second per run in sim mode.
static const char scenario_yaml[] =
    "name: hist-sim\n"
    "model: {preset: llama3-8b, dtype: bf16}\n"
    "mode: sim\n"
    "hardware: {profile: h100-sxm, gpus: 2}\n"
    "deployments:\n"
    "  - {tp: 1}\n"
    "  - {dp: 2}\n"
    "workload:\n"
    "  prompts:\n"
    "    - {input: {uniform: [64, 256]}, output: 32}\n"
    "  phases:\n"
    "    - {ramp: {concurrency: [4]}, hold: 2s}\n"
    "slo: {ttft_p95_ms: 5000, error_rate: 0.01}\n"
    "seed: 3\n";

// Run i (id i + 1) is simulated on profile[i] with git revision rev-i, and starts at
// start[i]: start order is runs 2, 4, 1, 3.
static const char *const profile[] = {"h100-sxm", "h200", "a100-80g", "l40s"};
static const char *const start[] = {"2026-03-01T10:00:03Z", "2026-03-01T10:00:01Z",
                                    "2026-03-01T10:00:04Z", "2026-03-01T10:00:02Z"};
static const int start_order[] = {2, 4, 1, 3};
enum { N_RUNS = 4 };

static char dir[256], db[300];

static void exec_sql(const char *path, const char *sql) {
  sqlite3 *h = NULL;
  cr_assert_eq(sqlite3_open_v2(path, &h, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
  char *msg = NULL;
  cr_assert_eq(sqlite3_exec(h, sql, NULL, NULL, &msg), SQLITE_OK, "%s: %s", sql,
               msg ? msg : "");
  sqlite3_close(h);
}

// Records the four runs of scenario_yaml plus `extra` (more top-level keys), rewrites their
// start times and marks run 2 as the baseline.
static void make_db_with(const char *extra) {
  const char *d = sc_test_tmpdir("history");
  cr_assert_not_null(d);
  snprintf(dir, sizeof dir, "%s", d);
  snprintf(db, sizeof db, "%s/results.db", dir);
  char path[400];
  snprintf(path, sizeof path, "%s/hist-sim.yaml", dir);
  char text[2048];
  snprintf(text, sizeof text, "%s%s", scenario_yaml, extra);
  cr_assert_eq(sc_test_write_file(path, text, strlen(text)), 0);
  for (int i = 0; i < N_RUNS; i++) {
    char rev[32];
    snprintf(rev, sizeof rev, "rev-%d", i + 1);
    setenv("SHARDCHECK_GIT_REV", rev, 1);
    cr_assert_eq(sc_test_run_scenario(out, sizeof out, path, db, "--out '%s/run' --profile %s", dir,
                                      profile[i]),
                 0, "%s", out);
  }
  unsetenv("SHARDCHECK_GIT_REV");
  for (int i = 0; i < N_RUNS; i++) {
    char sql[200];
    snprintf(sql, sizeof sql, "UPDATE run SET started_at = '%s' WHERE id = %d", start[i], i + 1);
    exec_sql(db, sql);
  }
  exec_sql(db, "UPDATE run SET baseline = 1 WHERE id = 2");
}

static void make_db(void) {
  make_db_with("");
}

// Runs `report --history hist-sim` into DIR/hist (extra options after); returns the exit code.
static int history(const char *extra) {
  char args[1400];
  snprintf(args, sizeof args, "report --db '%s' --history hist-sim --out '%s/hist' %s", db, dir,
           extra);
  return cli(args);
}

static char *read_text(const char *name) {
  char path[600];
  snprintf(path, sizeof path, "%s/hist/%s", dir, name);
  return sc_test_read_file(path, NULL);
}

static long file_size(const char *name) {
  char path[600];
  snprintf(path, sizeof path, "%s/hist/%s", dir, name);
  return sc_test_file_size(path);
}

// --- reading a .dat file

typedef struct dat_row {
  char block[64];           // the block's title ("tp1", "dp2")
  long long t, run_id;
  double value, lo, hi;
  int n, baseline;
  char rev[32];
} dat_row;

// The rows of DIR/hist/NAME (at most cap); returns how many.
static int read_dat(const char *name, dat_row *rows, int cap) {
  char *text = read_text(name);
  cr_assert_not_null(text, "%s missing", name);
  char block[64] = "";
  int n = 0;
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    if (!strncmp(line, "# block ", 8)) {
      const char *colon = strchr(line, ':');
      cr_assert_not_null(colon, "%s", line);
      snprintf(block, sizeof block, "%s", colon + 2);
      continue;
    }
    if (line[0] == '#') continue;
    cr_assert_lt(n, cap);
    dat_row *r = &rows[n++];
    snprintf(r->block, sizeof r->block, "%s", block);
    cr_assert_eq(sscanf(line, "%lld %lf %lf %lf %d %lld %d \"%*[^\"]\" \"%31[^\"]\"", &r->t,
                        &r->value, &r->lo, &r->hi, &r->n, &r->run_id, &r->baseline, r->rev),
                 8, "%s: %s", name, line);
  }
  free(text);
  return n;
}

// The stored pooled value of metric `name` for deployment `label` of run `run`.
static double stored(int run, const char *label, const char *name) {
  char sql[512];
  int len = snprintf(sql, sizeof sql,
           "SELECT quote(m.value) FROM metric m JOIN deployment d ON d.id = m.deployment_id "
           "WHERE m.run_id = %d AND d.label = '%s' AND m.phase_id IS NULL AND m.class = '' "
           "AND m.name = '%s'",
           run, label, name);
  cr_assert_lt(len, (int)sizeof sql);
  return atof(sc_test_q1s(db, sql));
}

static void expect_close(double got, double want, const char *what) {
  cr_expect(fabs(got - want) <= 1e-8 * fabs(want) + 1e-12, "%s: %.12g, stored %.12g", what,
            got, want);
}

static const char *const checked[] = {"ttft_p95_ms", "tpot_p50_ms", "e2el_p95_ms",
                                      "output_tok_s", "kv_peak_frac"};
static const char *const labels[] = {"tp1", "dp2"};

// --- tests

Test(history, one_row_per_run_in_start_order_with_the_stored_pooled_values) {
  make_db();
  cr_assert_eq(history("--gnuplot /nonexistent/gnuplot"), 0, "%s", out);
  cr_expect(strstr(out, "4 runs, 4 plotted as 4 points"), "%s", out);
  for (size_t k = 0; k < sizeof checked / sizeof checked[0]; k++) {
    char name[96];
    snprintf(name, sizeof name, "history-%s.dat", checked[k]);
    dat_row rows[16];
    int n = read_dat(name, rows, 16);
    cr_assert_eq(n, 2 * N_RUNS, "%s: one row per run and deployment", name);
    for (int i = 0; i < n; i++) {
      const dat_row *r = &rows[i];
      int want_run = start_order[i % N_RUNS];
      char what[160];
      snprintf(what, sizeof what, "%s row %d", name, i);
      cr_expect_str_eq(r->block, labels[i / N_RUNS], "%s", what);
      cr_expect_eq(r->run_id, want_run, "%s: run %lld, want %d", what, r->run_id, want_run);
      expect_close(r->value, stored(want_run, r->block, checked[k]), what);
      cr_expect_eq(r->lo, r->value, "%s: a lone run's min is its value", what);
      cr_expect_eq(r->hi, r->value, "%s", what);
      cr_expect_eq(r->n, 1, "%s", what);
      cr_expect_eq(r->baseline, want_run == 2, "%s: only run 2 is a baseline", what);
      char rev[32];
      snprintf(rev, sizeof rev, "rev-%d", want_run);
      cr_expect_str_eq(r->rev, rev, "%s", what);
      if (i % N_RUNS) cr_expect_gt(r->t, rows[i - 1].t, "%s: later than the row before", what);
    }
  }
  // The simulated GPUs differ, so the rows are not all one value: the order is checked.
  cr_expect_neq(stored(1, "tp1", "ttft_p95_ms"), stored(3, "tp1", "ttft_p95_ms"));
}

Test(history, baseline_is_circled_with_a_legend_entry_and_shaded_in_the_tables) {
  make_db();
  cr_assert_eq(history("--gnuplot /nonexistent/gnuplot"), 0, "%s", out);
  char *gp = read_text("history-ttft_p95_ms.gp");
  cr_assert_not_null(gp);
  cr_expect(strstr(gp, "using 1:($7 > 0 ? $2 : NaN) with points pt 6"), "%s", gp);
  cr_expect(strstr(gp, "title \"baseline run\""), "%s", gp);
  cr_expect(strstr(gp, "title \"tp1: newest baseline\""), "%s", gp);
  char line[64];
  snprintf(line, sizeof line, "%.10g with lines dt 3", stored(2, "tp1", "ttft_p95_ms"));
  cr_expect(strstr(gp, line), "the newest baseline's value: %s\n%s", line, gp);
  free(gp);
  char *html = read_text("history.html");
  cr_assert_not_null(html);
  cr_expect(strstr(html, "<tr class=\"base\"><td class=\"t\">2</td>"), "%s", html);
  cr_expect(strstr(html, "Plots skipped"), "gnuplot was not found");
  cr_expect(strstr(html, "<a href=\"history-tpot_p95_ms.gp\">"));
  free(html);
}

// Runs 2, 4 and 1 (the first three by start) as one repetition group of three; run 3 alone.
static void group_runs(bool first_run_names_itself) {
  sqlite3 *h = NULL;
  cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  bool has = sqlite3_table_column_metadata(h, NULL, "run", "repeat_group", NULL, NULL, NULL,
                                           NULL, NULL) == SQLITE_OK;
  sqlite3_close(h);
  // A database from before repetition groups gets the column the newer schema has.
  if (!has) exec_sql(db, "ALTER TABLE run ADD COLUMN repeat_group INTEGER");
  exec_sql(db, first_run_names_itself
                   ? "UPDATE run SET repeat_group = 2 WHERE id IN (2, 4, 1)"
                   : "UPDATE run SET repeat_group = 2 WHERE id IN (4, 1)");
}

static void expect_group_point(void) {
  cr_assert_eq(history("--gnuplot /nonexistent/gnuplot"), 0, "%s", out);
  cr_expect(strstr(out, "4 runs, 4 plotted as 2 points"), "%s", out);
  for (size_t k = 0; k < sizeof checked / sizeof checked[0]; k++) {
    char name[96];
    snprintf(name, sizeof name, "history-%s.dat", checked[k]);
    dat_row rows[16];
    int n = read_dat(name, rows, 16);
    cr_assert_eq(n, 4, "%s: two points per deployment", name);
    for (int d = 0; d < 2; d++) {
      const dat_row *g = &rows[2 * d], *lone = &rows[2 * d + 1];
      double v[3] = {stored(2, labels[d], checked[k]), stored(4, labels[d], checked[k]),
                     stored(1, labels[d], checked[k])};
      for (int i = 0; i < 3; i++) // sort the three
        for (int j = i + 1; j < 3; j++)
          if (v[j] < v[i]) {
            double t = v[i];
            v[i] = v[j];
            v[j] = t;
          }
      cr_expect_str_eq(g->block, labels[d]);
      cr_expect_eq(g->run_id, 2, "%s: the group sits at its first run", name);
      cr_expect_eq(g->t, rows[0].t);
      cr_expect_eq(g->n, 3, "%s", name);
      expect_close(g->value, v[1], "median");
      expect_close(g->lo, v[0], "min");
      expect_close(g->hi, v[2], "max");
      cr_expect_eq(g->baseline, 1, "run 2 is in the group");
      cr_expect_eq(lone->run_id, 3);
      cr_expect_eq(lone->n, 1);
      cr_expect_eq(lone->baseline, 0);
      expect_close(lone->value, stored(3, labels[d], checked[k]), "run 3");
    }
  }
  char *html = read_text("history.html");
  cr_assert_not_null(html);
  cr_expect(strstr(html, "2, 4, 1 (3 runs), baseline"), "%s", html);
  free(html);
}

Test(history, a_repetition_group_is_one_point_median_with_min_and_max) {
  make_db();
  group_runs(true);
  expect_group_point();
}

Test(history, a_group_whose_first_run_has_no_group_id_still_joins_it) {
  make_db();
  group_runs(false);
  expect_group_point();
}

Test(history, a_database_from_before_repetition_groups_plots_every_run) {
  make_db();
  // A version 1 file: no repeat_group or repeat_index column.
  exec_sql(db, "ALTER TABLE run DROP COLUMN repeat_group; ALTER TABLE run DROP COLUMN "
               "repeat_index; UPDATE meta SET value = '1' WHERE key = 'schema_version'");
  cr_assert_eq(history("--gnuplot /nonexistent/gnuplot"), 0, "%s", out);
  cr_expect(strstr(out, "4 runs, 4 plotted as 4 points"), "%s", out);
  dat_row rows[16];
  cr_expect_eq(read_dat("history-tpot_p95_ms.dat", rows, 16), 8);
  cr_expect_eq(rows[0].run_id, 2);
}

Test(history, incomplete_runs_are_listed_but_not_plotted) {
  make_db();
  exec_sql(db, "UPDATE run SET status = 'failed' WHERE id = 1");
  cr_assert_eq(history("--gnuplot /nonexistent/gnuplot"), 0, "%s", out);
  cr_expect(strstr(out, "4 runs, 3 plotted as 3 points"), "%s", out);
  dat_row rows[16];
  int n = read_dat("history-ttft_p95_ms.dat", rows, 16);
  cr_assert_eq(n, 6);
  for (int i = 0; i < n; i++) cr_expect_neq(rows[i].run_id, 1, "run 1 failed");
  char *html = read_text("history.html");
  cr_assert_not_null(html);
  cr_expect(strstr(html, "<td class=\"t\">failed</td>"), "%s", html);
  cr_expect(strstr(html, "no: not complete"));
  free(html);
}

Test(history, runs_of_two_modes_are_separate_series) {
  make_db();
  exec_sql(db, "UPDATE run SET mode = 'real' WHERE id = 3");
  cr_assert_eq(history("--gnuplot /nonexistent/gnuplot"), 0, "%s", out);
  dat_row rows[16];
  int n = read_dat("history-ttft_p95_ms.dat", rows, 16);
  cr_assert_eq(n, 8);
  cr_expect_str_eq(rows[0].block, "tp1 (sim)");
  cr_expect_eq(rows[2].run_id, 1);
  cr_expect_str_eq(rows[3].block, "tp1 (real)");
  cr_expect_eq(rows[3].run_id, 3);
  cr_expect_str_eq(rows[4].block, "dp2 (sim)");
}

Test(history, a_scenario_with_gate_metrics_plots_those_metrics) {
  make_db_with("gate: {metrics: {tpot_p95_ms: 10%, output_tok_s: 3%}}\n");
  cr_assert_eq(history("--gnuplot /nonexistent/gnuplot"), 0, "%s", out);
  cr_expect(strstr(out, "2 metrics"), "%s", out);
  cr_expect_gt(file_size("history-tpot_p95_ms.dat"), 0);
  cr_expect_gt(file_size("history-output_tok_s.dat"), 0);
  cr_expect_lt(file_size("history-ttft_p95_ms.dat"), 0, "not a gate metric of this scenario");
  char *html = read_text("history.html");
  cr_assert_not_null(html);
  cr_expect(strstr(html, "<code>gate.metrics</code>, as run 3 recorded"), "the newest run: %s",
            html);
  free(html);
}

Test(history, gnuplot_draws_a_png_and_an_svg_per_metric) {
  unsetenv("SHARDCHECK_GNUPLOT");
  if (system("command -v gnuplot >/dev/null 2>&1") != 0)
    cr_skip_test("gnuplot is not on PATH (ci/setup.sh installs gnuplot-nox): plots not checked");
  make_db();
  cr_assert_eq(history(""), 0, "%s", out);
  cr_expect_not(strstr(out, "warning"), "%s", out);
  const char *metrics[] = {"ttft_p50_ms", "ttft_p95_ms", "tpot_p95_ms",  "itl_p95_ms",
                           "e2el_p95_ms", "output_tok_s", "goodput_rps", "kv_peak_frac"};
  for (size_t k = 0; k < sizeof metrics / sizeof metrics[0]; k++) {
    char name[96];
    snprintf(name, sizeof name, "history-%s.png", metrics[k]);
    cr_expect_gt(file_size(name), 0, "%s", name);
    snprintf(name, sizeof name, "history-%s.svg", metrics[k]);
    cr_expect_gt(file_size(name), 0, "%s", name);
  }
  cr_expect_lt(file_size("history-detect_ms.png"), 0, "no fault: no detection time to plot");
  char *html = read_text("history.html");
  cr_assert_not_null(html);
  cr_expect(strstr(html, "<img alt=\"history-ttft_p95_ms\" src=\"history-ttft_p95_ms.png\">"));
  cr_expect_not(strstr(html, "Plots skipped"));
  cr_expect(strstr(html, "detect_ms"), "metrics without values are named");
  free(html);
}

Test(history, without_gnuplot_the_data_and_page_are_written_with_a_warning) {
  make_db();
  cr_assert_eq(history("--gnuplot /nonexistent/gnuplot"), 0, "%s", out);
  cr_expect(strstr(out, "warning: plots skipped: gnuplot not found"), "%s", out);
  cr_expect_gt(file_size("history-ttft_p95_ms.dat"), 0);
  cr_expect_gt(file_size("history-ttft_p95_ms.gp"), 0);
  cr_expect_lt(file_size("history-ttft_p95_ms.png"), 0);
  cr_expect_gt(file_size("history.html"), 0);
}

Test(history, a_failing_gnuplot_is_a_warning_not_an_error) {
  make_db();
  cr_assert_eq(history("--gnuplot /bin/false"), 0, "%s", out);
  cr_expect(strstr(out, "warning: plots skipped: gnuplot failed on history-"), "%s", out);
  cr_expect(strstr(out, "history-gnuplot.log"), "%s", out);
  cr_expect_lt(file_size("history-ttft_p95_ms.png"), 0);
  cr_expect_gt(file_size("history-ttft_p95_ms.dat"), 0);
}

Test(history, a_scenario_without_runs_is_exit_2_and_writes_nothing) {
  make_db();
  char args[1400];
  snprintf(args, sizeof args, "report --db '%s' --history nope --out '%s/nope'", db, dir);
  cr_expect_eq(cli(args), 2, "%s", out);
  char want[400];
  snprintf(want, sizeof want, "shardcheck report: no runs of scenario nope in %s\n", db);
  cr_expect(strstr(out, want), "%s", out);
  char path[400];
  snprintf(path, sizeof path, "%s/nope", dir);
  cr_expect_neq(access(path, F_OK), 0, "nothing written");
}

Test(history, history_refuses_run_and_junit_options) {
  cr_expect_eq(cli("report --history x --run 1"), 2, "%s", out);
  cr_expect(strstr(out, "--history takes no --run or --junit"), "%s", out);
  cr_expect_eq(cli("report --history x --junit j.xml"), 2, "%s", out);
  cr_expect_eq(cli("report --history ''"), 2, "%s", out);
  cr_expect(strstr(out, "--history must name a scenario"), "%s", out);
  cr_expect_eq(cli("report --history"), 2, "%s", out);
  cr_expect_eq(cli("report --help"), 0, "%s", out);
  cr_expect(strstr(out, "--history NAME"), "%s", out);
}
