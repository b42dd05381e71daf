// Reports from a results database: the plots' data and scripts, the PNGs (gnuplot is
// installed), plots skipped without gnuplot, index.html, JUnit XML, the terminal verdict table
// and `shardcheck report` exit codes. The databases are built here with plain SQL against the
// schema (reports/schema.c), so the tests need neither the runner nor the store's writer; the
// long runs of the time plots (a spike among 72,000 steps, steps out of order) are written
// through the store, as the runner's rows are (step blocks, token counts per second).
#include <criterion/criterion.h>
#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "reports/query.h"
#include "reports/report.h"
#include "reports/store.h"
#include "tests/helpers.h"

#define S_NS 1000000000LL // ns per second
#define MS_NS 1000000LL

static const char *scenario_text = "name: ramp-test\n# a reviewer's note: <script>alert('x')"
                                   "</script> & \"quotes\"\nslo: {ttft_p95_ms: 500}\n";

// --- building a database

static void exec(sqlite3 *db, const char *sql) {
  char *msg = NULL;
  int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
  cr_assert_eq(rc, SQLITE_OK, "%s\n%s", msg ? msg : "", sql);
}

static void execf(sqlite3 *db, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void execf(sqlite3 *db, const char *fmt, ...) {
  char sql[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(sql, sizeof sql, fmt, ap);
  va_end(ap);
  exec(db, sql);
}

static void metric(sqlite3 *db, int64_t run, int64_t dep, int64_t phase, const char *cls,
                   const char *name, double v) {
  char d[32] = "NULL", p[32] = "NULL";
  if (dep) snprintf(d, sizeof d, "%lld", (long long)dep);
  if (phase) snprintf(p, sizeof p, "%lld", (long long)phase);
  execf(db, "INSERT INTO metric(run_id, deployment_id, phase_id, class, name, value) "
            "VALUES(%lld, %s, %s, '%s', '%s', %.17g)",
        (long long)run, d, p, cls, name, v);
}

// The phase-level (or deployment-level) metric rows the runner stores.
static void summary_metrics(sqlite3 *db, int64_t run, int64_t dep, int64_t phase, double ttft95,
                            double toks) {
  const struct {
    const char *name;
    double v;
  } m[] = {
      {"requests", 4},          {"ok_requests", 4},         {"ttft_p50_ms", ttft95 * 0.6},
      {"ttft_p95_ms", ttft95},  {"tpot_p50_ms", 20},        {"tpot_p95_ms", 24.5},
      {"itl_p95_ms", 25},       {"e2el_p95_ms", ttft95 + 100}, {"output_tok_s", toks},
      {"req_s", toks / 5},      {"goodput_rps", toks / 6},  {"error_rate", 0},
      {"peak_queue", 3},        {"peak_batch", 4},          {"kv_peak_frac", 0.375},
      {"busy_frac", 0.8125},
  };
  for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
    metric(db, run, dep, phase, "", m[i].name, m[i].v);
  metric(db, run, dep, phase, "short", "ttft_p95_ms", ttft95 * 0.8);
  metric(db, run, dep, phase, "long", "ttft_p95_ms", ttft95 * 1.2);
}

// Run `run` in db: deployments tp1 (1 GPU, 1 replica) and dp2 (2 GPUs, 2 replicas), 6 s each;
// ramp phases at concurrency 1, 2, 4 (2 s each); 4 requests of 5 tokens per phase; a step per
// replica every 100 ms; metrics per the runner's contract; verdicts ttft_p95_ms and error_rate
// per deployment, tp1's TTFT failing (612.3 > 500); a killed GPU in dp2.
static void add_run(sqlite3 *db, int64_t run, const char *status) {
  exec(db, "BEGIN");
  sqlite3_stmt *st;
  cr_assert_eq(sqlite3_prepare_v2(db,
                                  "INSERT INTO run(id, scenario, scenario_path, scenario_text, "
                                  "mode, backend, model, git_rev, host, seed, started_at, "
                                  "ended_at, duration_ns, status, verdict) VALUES(?1, "
                                  "'ramp-test', 'scenarios/ramp-test.yaml', ?2, 'sim', 'sim', "
                                  "'llama3-8b', 'abc1234', 'ci-host', 7, "
                                  "'2025-01-01T00:00:00Z', '2025-01-01T00:00:12Z', 12000000000, "
                                  "?3, 'fail')",
                                  -1, &st, NULL),
               SQLITE_OK);
  sqlite3_bind_int64(st, 1, run);
  sqlite3_bind_text(st, 2, scenario_text, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 3, status, -1, SQLITE_STATIC);
  cr_assert_eq(sqlite3_step(st), SQLITE_DONE);
  sqlite3_finalize(st);

  const struct {
    const char *label;
    int dp;
    double ttft[3], toks[3], ttft_all, peak, eff;
  } deps[2] = {
      {"tp1", 1, {120, 300, 612.3}, {200, 380, 700}, 612.3, 700, 1.0},
      {"dp2", 2, {110, 180, 320}, {210, 400, 1218}, 320, 1218, 0.87},
  };
  for (int d = 0; d < 2; d++) {
    int64_t t0 = d * 6 * S_NS;
    execf(db,
          "INSERT INTO deployment(run_id, idx, label, tp, pp, dp, gpus, start_ns, end_ns, "
          "status) VALUES(%lld, %d, '%s', 1, 1, %d, %d, %lld, %lld, 'complete')",
          (long long)run, d, deps[d].label, deps[d].dp, deps[d].dp, (long long)t0,
          (long long)(t0 + 6 * S_NS));
    int64_t dep = sqlite3_last_insert_rowid(db);
    for (int ph = 0; ph < 3; ph++) {
      int64_t p0 = t0 + ph * 2 * S_NS;
      execf(db,
            "INSERT INTO phase(run_id, deployment_id, idx, name, kind, concurrency, start_ns, "
            "warmup_end_ns, end_ns) VALUES(%lld, %lld, %d, 'c%d', 'ramp', %d, %lld, %lld, %lld)",
            (long long)run, (long long)dep, ph, 1 << ph, 1 << ph, (long long)p0, (long long)p0,
            (long long)(p0 + 2 * S_NS));
      int64_t phase = sqlite3_last_insert_rowid(db);
      for (int q = 0; q < 4; q++) {
        int64_t arr = p0 + q * 400 * MS_NS, first = arr + (50 + 30 * ph) * MS_NS;
        execf(db,
              "INSERT INTO request(run_id, deployment_id, phase_id, seq, class, replica, "
              "prompt_tokens, max_tokens, output_tokens, arrival_ns, dispatch_ns, "
              "first_token_ns, finish_ns, status, reason) VALUES(%lld, %lld, %lld, %d, '%s', "
              "%d, 64, 5, 5, %lld, %lld, %lld, %lld, 'ok', 'length')",
              (long long)run, (long long)dep, (long long)phase, ph * 4 + q,
              q % 2 ? "long" : "short", q % deps[d].dp, (long long)arr, (long long)arr,
              (long long)first, (long long)(first + 4 * 20 * MS_NS));
        int64_t req = sqlite3_last_insert_rowid(db);
        execf(db, "INSERT INTO token_times(request_id, t_ns) VALUES(%lld, json_array(%lld, "
                  "%lld, %lld, %lld, %lld))", (long long)req, (long long)first,
              (long long)(first + 20 * MS_NS), (long long)(first + 40 * MS_NS),
              (long long)(first + 60 * MS_NS), (long long)(first + 80 * MS_NS));
      }
      summary_metrics(db, run, dep, phase, deps[d].ttft[ph], deps[d].toks[ph]);
    }
    for (int rep = 0; rep < deps[d].dp; rep++) {
      char steps[60 * 64 + 4] = "[";
      size_t len = 1;
      for (int k = 0; k < 60; k++)
        len += (size_t)snprintf(steps + len, sizeof steps - len,
                                "%s[%d,%lld,20000000,2,0,2,0,%d,2,%d,64]", k ? "," : "", rep,
                                (long long)(t0 + k * 100 * MS_NS), k % 4, (k * 3) % 64);
      snprintf(steps + len, sizeof steps - len, "]");
      execf(db,
            "INSERT INTO step_block(first_id, run_id, deployment_id, n, end_ns, steps) "
            "VALUES((SELECT coalesce(max(first_id + n), 1) FROM step_block), %lld, %lld, 60, "
            "%lld, '%s')",
            (long long)run, (long long)dep, (long long)(t0 + 59 * 100 * MS_NS + 20 * MS_NS),
            steps);
    }
    summary_metrics(db, run, dep, 0, deps[d].ttft_all, deps[d].peak / 1.5);
    metric(db, run, dep, 0, "", "gpus", deps[d].dp);
    metric(db, run, dep, 0, "", "peak_output_tok_s", deps[d].peak);
    metric(db, run, dep, 0, "", "speedup", deps[d].peak / deps[0].peak);
    metric(db, run, dep, 0, "", "efficiency", deps[d].eff);
    metric(db, run, dep, 0, "", "knee_concurrency", d == 0 ? 2 : 4);
    execf(db,
          "INSERT INTO verdict(run_id, deployment_id, slo, op, expected, actual, pass) "
          "VALUES(%lld, %lld, 'ttft_p95_ms', '<=', 500, %.17g, %d)",
          (long long)run, (long long)dep, deps[d].ttft_all, deps[d].ttft_all <= 500);
    execf(db,
          "INSERT INTO verdict(run_id, deployment_id, slo, op, expected, actual, pass) "
          "VALUES(%lld, %lld, 'error_rate', '<=', 0.01, 0, 1)",
          (long long)run, (long long)dep);
    if (d == 1)
      execf(db,
            "INSERT INTO fault(run_id, deployment_id, kind, target, injected_ns, detected_ns, "
            "recovered_ns, affected, detail) VALUES(%lld, %lld, 'kill_gpu', 'replica0.rank1', "
            "%lld, %lld, %lld, 3, 'SIGKILL <worker>')",
            (long long)run, (long long)dep, (long long)(9 * S_NS), (long long)(9200 * MS_NS),
            (long long)(10500 * MS_NS));
  }
  exec(db, "COMMIT");
}

// A fresh database file holding run 1 (complete); returns its path (static buffer).
static const char *make_db(void) {
  static char path[512];
  const char *dir = sc_test_tmpdir("report-db");
  cr_assert_not_null(dir);
  snprintf(path, sizeof path, "%s/results.db", dir);
  sqlite3 *db;
  cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
  exec(db, store_schema_sql);
  execf(db, "INSERT INTO meta(key, value) VALUES('schema_version', '%d')", store_schema_version);
  add_run(db, 1, "complete");
  sqlite3_close(db);
  return path;
}

static sqlite3 *open_db(const char *path) {
  sqlite3 *db;
  cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
  return db;
}

// --- reading what was written

static char *read_file(const char *dir, const char *name, long *len) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return sc_test_read_file(path, len);
}

static bool exists(const char *dir, const char *name) {
  char path[1024];
  struct stat sb;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return stat(path, &sb) == 0;
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
  return n;
}

typedef struct dat_info {
  char header[256]; // the first line
  int rows;         // data lines
  int blocks;       // runs of data lines separated by blank lines
  int cols;         // fields of the first data line
} dat_info;

static dat_info read_dat(const char *dir, const char *name) {
  dat_info di = {{0}, 0, 0, 0};
  char *text = read_file(dir, name, NULL);
  cr_assert_not_null(text, "%s/%s was not written", dir, name);
  bool in_block = false;
  char *save = NULL;
  int line_no = 0;
  for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    // strtok_r skips empty lines: blocks are told apart by their "# block" comments
    if (line_no++ == 0) snprintf(di.header, sizeof di.header, "%s", line);
    if (!strncmp(line, "# block", 7)) {
      in_block = false;
      continue;
    }
    if (line[0] == '#') continue;
    if (!in_block) di.blocks++;
    in_block = true;
    if (di.rows++ == 0) {
      int n = 0;
      for (char *p = line; *p;) {
        while (*p == ' ') p++;
        if (!*p) break;
        n++;
        if (*p == '"') {
          p = strchr(p + 1, '"');
          cr_assert_not_null(p);
          p++;
        } else {
          while (*p && *p != ' ') p++;
        }
      }
      di.cols = n;
    }
  }
  free(text);
  if (di.blocks == 0 && di.rows) di.blocks = 1;
  return di;
}

static void expect_dat(const char *dir, const char *name, const char *header, int cols, int rows,
                       int blocks) {
  dat_info di = read_dat(dir, name);
  cr_expect_str_eq(di.header, header, "%s header", name);
  cr_expect_eq(di.cols, cols, "%s: %d columns, expected %d", name, di.cols, cols);
  cr_expect_eq(di.rows, rows, "%s: %d rows, expected %d", name, di.rows, rows);
  cr_expect_eq(di.blocks, blocks, "%s: %d blocks, expected %d", name, di.blocks, blocks);
}

static const char *const scaling_header =
    "# gpus peak_output_tok_s ideal_tok_s efficiency_pct speedup label";

static const char *const plot_names[] = {"scaling", "ttft", "tpot_throughput", "timeline", "kv"};

// report_write of run 1 into a fresh directory with the given gnuplot; returns the directory.
static const char *write_report(const char *db_path, const char *gnuplot, report_result *res) {
  const char *base = sc_test_tmpdir("report-out");
  cr_assert_not_null(base);
  static char dir[512];
  snprintf(dir, sizeof dir, "%s/nested/out", base); // parents are created
  sqlite3 *db = open_db(db_path);
  int64_t run = 1;
  report_options o = {.out_dir = dir, .run_ids = &run, .n_runs = 1, .gnuplot = gnuplot};
  sc_error err = {{0}};
  cr_assert_eq(report_write(db, &o, res, &err), SC_OK, "%s", err.msg);
  sqlite3_close(db);
  return dir;
}

// Checks gnuplot is on PATH (ci/setup.sh installs it) and clears $SHARDCHECK_GNUPLOT, so that
// report_write with no program finds it the way `shardcheck report` does.
static void need_gnuplot(void) {
  unsetenv("SHARDCHECK_GNUPLOT");
  cr_assert_eq(system("command -v gnuplot >/dev/null 2>&1"), 0,
               "gnuplot is not on PATH (ci/setup.sh installs gnuplot-nox)");
}

// --- plots

Test(report, every_plot_has_data_and_script_with_expected_columns_and_rows) {
  report_result res;
  const char *dir = write_report(make_db(), "/nonexistent/gnuplot", &res);
  // One dp family: the 1-GPU base then dp2.
  expect_dat(dir, "scaling.dat", scaling_header, 6, 2, 1);
  // Two deployments x three concurrencies.
  expect_dat(dir, "ttft.dat", "# concurrency ttft_p50_ms ttft_p95_ms phase", 4, 6, 2);
  expect_dat(dir, "tpot_throughput.dat",
             "# concurrency tpot_p50_ms tpot_p95_ms output_tok_s phase", 5, 6, 2);
  // 12 s run: 1 s bins would be 12 (< 30), so 0.2 s bins: 60 rows.
  expect_dat(dir, "timeline.dat", "# t_s output_tok_s ttft_p95_ms queue_len", 4, 60, 1);
  // tp1 r0, dp2 r0, dp2 r1; steps every 100 ms for 6 s -> 30 bins of 0.2 s each.
  expect_dat(dir, "kv.dat", "# t_s kv_used_pct", 2, 90, 3);
  for (size_t i = 0; i < sizeof plot_names / sizeof plot_names[0]; i++) {
    char name[64];
    snprintf(name, sizeof name, "%s.gp", plot_names[i]);
    char *gp = read_file(dir, name, NULL);
    cr_assert_not_null(gp, "%s missing", name);
    char want[96];
    snprintf(want, sizeof want, "\"%s.dat\"", plot_names[i]);
    cr_expect(strstr(gp, want), "%s does not read %s", name, want);
    snprintf(want, sizeof want, "set output \"%s.\".fmt", plot_names[i]);
    cr_expect(strstr(gp, want), "%s does not write %s.png/.svg", name, plot_names[i]);
    free(gp);
  }
}

Test(report, scaling_points_carry_efficiency_and_an_ideal_line_from_the_fewest_gpus) {
  report_result res;
  const char *dir = write_report(make_db(), "/nonexistent/gnuplot", &res);
  char *dat = read_file(dir, "scaling.dat", NULL);
  cr_assert_not_null(dat);
  // base: 1 GPU, 700 tok/s, ideal 700, 100%; dp2: 2 GPUs, 1218 tok/s, ideal 1400, 87%.
  cr_expect(strstr(dat, "\n1 700 700 100 1 \"tp1\"\n"), "%s", dat);
  cr_expect(strstr(dat, "\n2 1218 1400 87 1.74 \"dp2\"\n"), "%s", dat);
  free(dat);
  char *gp = read_file(dir, "scaling.gp", NULL);
  cr_expect(strstr(gp, "ideal linear"));
  cr_expect(strstr(gp, "with labels"));
  free(gp);
}

Test(report, timeline_bins_count_every_token_and_mark_phases_and_faults) {
  report_result res;
  const char *dir = write_report(make_db(), "/nonexistent/gnuplot", &res);
  char *dat = read_file(dir, "timeline.dat", NULL);
  cr_assert_not_null(dat);
  double tokens = 0;
  int queue_rows = 0;
  char *save = NULL;
  for (char *line = strtok_r(dat, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    if (line[0] == '#') continue;
    double t, toks, q;
    char ttft[32], qs[32];
    cr_assert_eq(sscanf(line, "%lf %lf %31s %31s", &t, &toks, ttft, qs), 4, "%s", line);
    tokens += toks * 0.2; // tok/s x bin width
    if (strcmp(qs, "NaN")) {
      q = atof(qs);
      cr_expect(q >= 0 && q <= 6, "queue %g: two replicas of at most 3 each", q);
      queue_rows++;
    }
  }
  free(dat);
  cr_expect(fabs(tokens - 2 * 3 * 4 * 5) < 1e-6, "tokens counted: %g, stored 120", tokens);
  cr_expect_eq(queue_rows, 60, "every bin holds steps");
  char *gp = read_file(dir, "timeline.gp", NULL);
  cr_assert_not_null(gp);
  cr_expect(strstr(gp, "\"tp1 c1\""), "phase marker label");
  cr_expect(strstr(gp, "\"dp2 c4\""), "phase marker label");
  cr_expect(strstr(gp, "\"kill_gpu replica0.rank1 injected\""));
  cr_expect(strstr(gp, "\"kill_gpu replica0.rank1 detected\""));
  cr_expect(strstr(gp, "\"kill_gpu replica0.rank1 recovered\""));
  cr_expect(strstr(gp, "set multiplot layout 3,1"));
  free(gp);
}

Test(report, ttft_plot_uses_log2_concurrency_and_draws_the_slo) {
  report_result res;
  const char *dir = write_report(make_db(), "/nonexistent/gnuplot", &res);
  char *gp = read_file(dir, "ttft.gp", NULL);
  cr_assert_not_null(gp);
  cr_expect(strstr(gp, "set logscale x 2"));
  cr_expect(strstr(gp, "500 with lines"), "SLO line at 500 ms:\n%s", gp);
  cr_expect(strstr(gp, "SLO: TTFT p95 <= 500 ms"));
  cr_expect(strstr(gp, "dt 2 title \"tp1 p50\""), "p50 dashed");
  cr_expect(strstr(gp, "dt 1 title \"tp1 p95\""), "p95 solid");
  free(gp);
}

Test(report, gnuplot_writes_every_png_and_the_page_embeds_the_svgs) {
  need_gnuplot();
  report_result res;
  const char *dir = write_report(make_db(), NULL, &res);
  cr_expect_not(res.plots_skipped, "why: %s", res.why);
  cr_expect_eq(res.n_plots, 5);
  for (size_t i = 0; i < sizeof plot_names / sizeof plot_names[0]; i++) {
    char name[64];
    long n = 0;
    snprintf(name, sizeof name, "%s.png", plot_names[i]);
    char *png = read_file(dir, name, &n);
    cr_assert_not_null(png, "%s missing", name);
    cr_expect_gt(n, 8, "%s is empty", name);
    cr_expect_eq(memcmp(png, "\x89PNG\r\n\x1a\n", 8), 0, "%s is not a PNG", name);
    free(png);
    snprintf(name, sizeof name, "%s.svg", plot_names[i]);
    char *svg = read_file(dir, name, &n);
    cr_assert_not_null(svg, "%s missing", name);
    cr_expect(strstr(svg, "<svg"), "%s is not an SVG", name);
    free(svg);
  }
  char *html = read_file(dir, "index.html", NULL);
  cr_assert_not_null(html);
  cr_expect_eq(count(html, "data:image/svg+xml;base64,"), 5);
  cr_expect(strstr(html, "<a href=\"timeline.png\">"));
  cr_expect_not(strstr(html, "Plots skipped"));
  free(html);
  cr_expect(exists(dir, "gnuplot.log"));
}

Test(report, missing_gnuplot_skips_plots_but_writes_data_and_html) {
  report_result res;
  const char *dir = write_report(make_db(), "/nonexistent/gnuplot", &res);
  cr_expect(res.plots_skipped);
  cr_expect(strstr(res.why, "not found"), "why: %s", res.why);
  cr_expect_eq(res.n_plots, 0);
  cr_expect(strstr(res.index_path, "/nested/out/index.html"), "%s", res.index_path);
  cr_expect(exists(dir, "index.html"));
  cr_expect(exists(dir, "ttft.dat") && exists(dir, "ttft.gp"));
  cr_expect_not(exists(dir, "ttft.png"));
  char *html = read_file(dir, "index.html", NULL);
  cr_assert_not_null(html);
  cr_expect(strstr(html, "Plots skipped"));
  cr_expect(strstr(html, "<a href=\"ttft.gp\">"), "scripts stay linked");
  cr_expect_not(strstr(html, "href=\"ttft.png\""), "no link to a PNG that was not drawn");
  cr_expect(strstr(html, "Deployments x phases"), "tables are written anyway");
  free(html);
}

Test(report, no_gnuplot_on_path_says_so) {
  const char *db = make_db();
  const char *empty = sc_test_tmpdir("report-path");
  setenv("PATH", empty, 1);
  unsetenv("SHARDCHECK_GNUPLOT");
  report_result res;
  write_report(db, NULL, &res);
  cr_expect(res.plots_skipped);
  cr_expect_str_eq(res.why, "gnuplot not found on PATH");
}

Test(report, gnuplot_from_the_environment_is_used) {
  const char *db = make_db();
  setenv("SHARDCHECK_GNUPLOT", "/nonexistent/gp-from-env", 1);
  report_result res;
  write_report(db, NULL, &res);
  cr_expect(res.plots_skipped);
  cr_expect(strstr(res.why, "/nonexistent/gp-from-env"), "why: %s", res.why);
}

Test(report, failing_gnuplot_is_a_skipped_plot_not_an_error) {
  cr_assert_eq(access("/bin/false", X_OK), 0);
  report_result res;
  const char *dir = write_report(make_db(), "/bin/false", &res);
  cr_expect(res.plots_skipped);
  cr_expect(strstr(res.why, "gnuplot.log"), "why: %s", res.why);
  cr_expect_eq(res.n_plots, 0);
  cr_expect(exists(dir, "index.html"));
}

Test(report, rate_phases_only_skip_the_concurrency_plots_with_a_note) {
  const char *db_path = make_db();
  sqlite3 *db = open_db(db_path);
  exec(db, "UPDATE phase SET kind = 'rate', concurrency = NULL, rate = 4, arrival = 'poisson'");
  sqlite3_close(db);
  need_gnuplot();
  report_result res;
  const char *dir = write_report(db_path, NULL, &res);
  cr_expect_not(res.plots_skipped, "why: %s", res.why);
  cr_expect_eq(res.n_plots, 3, "scaling, timeline and kv");
  cr_expect_not(exists(dir, "ttft.dat"));
  cr_expect_not(exists(dir, "tpot_throughput.gp"));
  char *html = read_file(dir, "index.html", NULL);
  cr_assert_not_null(html);
  cr_expect(strstr(html, "no TTFT plot: no phase has a concurrency"));
  cr_expect(strstr(html, "<td class=\"t\">4 req/s</td>"), "phase load column");
  free(html);
}

Test(report, sparse_runs_still_plot_with_empty_panels) {
  // No step rows (no queue panel data, no KV plot) and no TPOT values (an empty top panel).
  const char *db_path = make_db();
  sqlite3 *db = open_db(db_path);
  exec(db, "DELETE FROM step_block");
  exec(db, "UPDATE metric SET value = NULL WHERE name LIKE 'tpot%'");
  sqlite3_close(db);
  need_gnuplot();
  report_result res;
  const char *dir = write_report(db_path, NULL, &res);
  cr_expect_not(res.plots_skipped, "why: %s", res.why);
  cr_expect_eq(res.n_plots, 4, "every plot but kv");
  cr_expect_not(exists(dir, "kv.dat"), "no KV data file without step rows");
  char *gp = read_file(dir, "timeline.gp", NULL);
  cr_assert_not_null(gp);
  cr_expect(strstr(gp, "\"no data\""), "the queue panel says no data");
  free(gp);
  gp = read_file(dir, "tpot_throughput.gp", NULL);
  cr_assert_not_null(gp);
  cr_expect_eq(count(gp, "\"no data\""), 1, "the TPOT panel is empty, throughput is not");
  free(gp);
  char *html = read_file(dir, "index.html", NULL);
  cr_expect(strstr(html, "no KV-cache plot for run 1"));
  free(html);
}

// --- long runs: the plots of millions of rows

// A run of one deployment (dp 2) written through the store (step blocks, token counts): `secs`
// seconds, a step of each replica every 100 ms (KV 25% or 50% used), replica 1's rows handed
// over 50 ms after replica 0's later ones (a step is recorded when it ends); a request with 20
// tokens every second. One step of replica 1 at spike_ns holds every KV block and queues 500,
// the others a queue of 1. Without a spike (spike_ns 0) the queues tell the steps' order: each
// replica queues 10 once every 5 s, 150 ms apart, which only a panel that takes the steps in
// the order they were written adds up; and a step at late_ns (0: none), queueing 30, is handed
// over 40 s after it started, with replica 1 queueing 25 from 5 to 15 s after it.
static const char *make_long_db(const char *tag, int secs, int64_t spike_ns, int64_t late_ns) {
  static char path[512];
  const char *dir = sc_test_tmpdir(tag);
  cr_assert_not_null(dir);
  snprintf(path, sizeof path, "%s/results.db", dir);
  store *s = NULL;
  sc_error err = {{0}};
  cr_assert_eq(store_open(path, &s, &err), SC_OK, "%s", err.msg);
  store_run r = {.scenario = "long", .scenario_text = "name: long\n", .mode = "sim", .seed = 1};
  int64_t run = 0, dep = 0, ph = 0;
  cr_assert_eq(store_run_begin(s, &r, &run, &err), SC_OK, "%s", err.msg);
  store_deployment d = {.run_id = run, .label = "dp2", .tp = 1, .pp = 1, .dp = 2};
  cr_assert_eq(store_deployment_begin(s, &d, &dep, &err), SC_OK, "%s", err.msg);
  store_phase p = {.run_id = run, .deployment_id = dep, .name = "steady", .kind = "rate",
                   .rate = 1, .arrival = "constant"};
  cr_assert_eq(store_phase_begin(s, &p, &ph, &err), SC_OK, "%s", err.msg);
  store_step late = {0};
  for (int64_t k = 0; k < (int64_t)secs * 10; k++) {
    for (int rep = 0; rep < 2; rep++) {
      // replica 1's step of time k goes after replica 0's of k + 1
      int64_t kk = rep == 0 ? k + 1 : k;
      if (rep == 0 && kk >= (int64_t)secs * 10) continue;
      int64_t t = kk * 100 * MS_NS + rep * 50 * MS_NS;
      store_step st = {.run_id = run, .deployment_id = dep, .replica = rep, .t_ns = (uint64_t)t,
                       .duration_ns = 60 * MS_NS, .seqs = 1, .decode_tokens = 1,
                       .queue_len = spike_ns ? 1 : 0, .running = 1,
                       .kv_used = kk % 2 ? 25 : 50, .kv_total = 100};
      if (!spike_ns && kk % 50 == (rep ? 10 : 12)) st.queue_len = 10;
      if (!spike_ns && rep == 1 && late_ns && t >= late_ns + 5 * S_NS &&
          t < late_ns + 15 * S_NS)
        st.queue_len = 25;
      if (rep == 1 && t == spike_ns) {
        st.kv_used = 100;
        st.queue_len = 500;
      }
      if (t == late_ns) {
        late = st;
        late.queue_len = 30;
        continue;
      }
      if (late.kv_total && t >= late_ns + 40 * S_NS) {
        cr_assert_eq(store_step_add(s, &late, &err), SC_OK, "%s", err.msg);
        late.kv_total = 0;
      }
      cr_assert_eq(store_step_add(s, &st, &err), SC_OK, "%s", err.msg);
    }
    if (k == 0) {
      store_step first = {.run_id = run, .deployment_id = dep, .replica = 0, .seqs = 1,
                          .queue_len = spike_ns ? 1 : 0, .running = 1, .kv_used = 50,
                          .kv_total = 100};
      cr_assert_eq(store_step_add(s, &first, &err), SC_OK, "%s", err.msg);
    }
    if (k % 10 == 0) {
      uint64_t arrival = (uint64_t)(k * 100 * MS_NS), t[20];
      for (int i = 0; i < 20; i++) t[i] = arrival + (uint64_t)(200 * MS_NS + i * 45 * MS_NS);
      store_request q = {.run_id = run, .deployment_id = dep, .phase_id = ph, .seq = k / 10,
                         .class_name = "", .replica = (int)(k / 10 % 2), .prompt_tokens = 8,
                         .max_tokens = 20, .output_tokens = 20, .arrival_ns = arrival,
                         .dispatch_ns = arrival, .first_token_ns = t[0], .finish_ns = t[19],
                         .has_dispatch = true, .has_first_token = true, .has_finish = true,
                         .status = "ok", .reason = "length"};
      cr_assert_eq(store_request_add(s, &q, t, 20, NULL, &err), SC_OK, "%s", err.msg);
    }
  }
  uint64_t end = (uint64_t)secs * S_NS;
  cr_assert_eq(store_phase_end(s, ph, end, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(store_deployment_end(s, dep, "complete", NULL, end, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(store_run_end(s, run, "complete", NULL, NULL, end, &err), SC_OK, "%s", err.msg);
  store_close(s);
  return path;
}

// The data line of dir/name whose first field is t_s: the text after it, at most n bytes ("" when
// there is none).
static void dat_line_at(const char *dir, const char *name, const char *t_s, char *out, size_t n) {
  char *text = read_file(dir, name, NULL);
  cr_assert_not_null(text);
  char key[32];
  snprintf(key, sizeof key, "\n%s ", t_s);
  const char *at = strstr(text, key);
  out[0] = 0;
  if (at) {
    at += strlen(key);
    size_t len = strcspn(at, "\n");
    snprintf(out, n, "%.*s", (int)(len < n ? len : n - 1), at);
  }
  free(text);
}

Test(report, a_single_step_spike_in_an_hour_survives_the_bins_of_the_kv_and_queue_plots) {
  // 72,000 steps in 10 s bins: each bin shows the highest KV use and the longest queue of any
  // step in it, so the one step at 1234.55 s is in the bin of 1230-1240 s.
  const char *path = make_long_db("report-spike", 3600, 1234550 * MS_NS, 0);
  report_result res;
  const char *dir = write_report(path, "/nonexistent/gnuplot", &res);
  expect_dat(dir, "kv.dat", "# t_s kv_used_pct", 2, 720, 2);
  char line[128];
  dat_line_at(dir, "timeline.dat", "1235", line, sizeof line);
  cr_expect_str_eq(line, "20 200 501", "tokens/s, TTFT p95, queue (replica 1's 500 + 1)");
  dat_line_at(dir, "timeline.dat", "1245", line, sizeof line);
  cr_expect_str_eq(line, "20 200 2");
  char *kv = read_file(dir, "kv.dat", NULL);
  cr_assert_not_null(kv);
  const char *r1 = strstr(kv, "# block 1: dp2 replica 1\n");
  cr_assert_not_null(r1);
  cr_expect(strstr(r1, "\n1235 100\n"), "the spike's bin at 100%%");
  cr_expect_eq(count(kv, " 100\n"), 1, "only its bin");
  cr_expect_eq(count(kv, " 50\n"), 719, "every other bin at the highest of 25 and 50");
  free(kv);
}

// Writes the report of db_path, then of the same rows as a version 4 file holds them (a step
// table, no token counts: the rows read one by one), and expects the same plot data.
static void expect_same_plots_as_version_4(const char *db_path) {
  report_result res;
  char fast[512];
  snprintf(fast, sizeof fast, "%s", write_report(db_path, "/nonexistent/gnuplot", &res));
  sc_test_exec(db_path, sc_test_v4_sql);
  const char *slow = write_report(db_path, "/nonexistent/gnuplot", &res);
  const char *const files[] = {"timeline.dat", "kv.dat"};
  for (size_t i = 0; i < 2; i++) {
    long la = 0, lb = 0;
    char *a = read_file(fast, files[i], &la), *b = read_file(slow, files[i], &lb);
    cr_assert(a && b, "%s", files[i]);
    cr_expect(la == lb && !memcmp(a, b, (size_t)la), "%s differs:\n%s\n---\n%s", files[i], a,
              b);
    free(a);
    free(b);
  }
}

// What rq_steps_by_time handed over: the steps after the last restart, how many of them came
// before the one handed over before them, and the restarts.
typedef struct step_order {
  int64_t n, backwards;
  int restarts;
  int64_t last_t, last_id;
} step_order;

static bool order_step(void *ud, const rq_step *s) {
  step_order *o = ud;
  if (o->n && (s->t_ns < o->last_t || (s->t_ns == o->last_t && s->id < o->last_id)))
    o->backwards++;
  o->n++;
  o->last_t = s->t_ns;
  o->last_id = s->id;
  return true;
}

static void order_restart(void *ud) {
  step_order *o = ud;
  *o = (step_order){.restarts = o->restarts + 1};
}

static step_order steps_by_time(const char *db_path) {
  sqlite3 *db = open_db(db_path);
  step_order o = {0};
  sc_error err = {{0}};
  cr_assert_eq(rq_steps_by_time(db, 1, order_step, order_restart, &o, &err), SC_OK, "%s",
               err.msg);
  sqlite3_close(db);
  return o;
}

Test(report, plots_from_step_blocks_and_token_counts_are_those_of_the_rows_one_by_one) {
  const char *path = make_long_db("report-same", 900, 0, 0);
  step_order o = steps_by_time(path);
  cr_expect_eq(o.n, 2 * 9000);
  cr_expect_eq(o.backwards, 0, "every step in time order");
  cr_expect_eq(o.restarts, 0, "within the window");
  expect_same_plots_as_version_4(path);
}

Test(report, a_step_handed_over_later_than_the_window_puts_the_steps_in_order_all_the_same) {
  const char *path = make_long_db("report-late", 900, 0, 400 * S_NS);
  step_order o = steps_by_time(path);
  cr_expect_eq(o.n, 2 * 9000);
  cr_expect_eq(o.backwards, 0, "every step in time order");
  cr_expect_eq(o.restarts, 1, "the late step sends them again, sorted by SQLite");
  expect_same_plots_as_version_4(path);
}

// --- index.html

// A sim run made with --sensitivity: the scaling table gets its two columns, "-" where a
// deployment has no value.
Test(report, index_html_scaling_table_shows_the_sensitivities_when_the_run_has_them) {
  const char *path = make_db();
  sqlite3 *db = open_db(path);
  exec(db, "INSERT INTO metric(run_id, deployment_id, phase_id, class, name, value) SELECT 1, id, "
           "NULL, '', 'tpot_sensitivity', 3.818 FROM deployment WHERE run_id = 1 AND idx = 0");
  exec(db, "INSERT INTO metric(run_id, deployment_id, phase_id, class, name, value) SELECT 1, id, "
           "NULL, '', 'ttft_sensitivity', 2.985 FROM deployment WHERE run_id = 1 AND idx = 0");
  sqlite3_close(db);
  report_result res;
  const char *dir = write_report(path, "/nonexistent/gnuplot", &res);
  char *html = read_file(dir, "index.html", NULL);
  cr_assert_not_null(html);
  cr_expect(strstr(html, "<th>TTFT sensitivity</th><th>TPOT sensitivity</th><th class=\"t\">"
                         "status</th>"),
            "%s", html);
  cr_expect(strstr(html, "<td>2.99x</td><td>3.82x</td><td class=\"t\">complete</td>"), "tp1");
  cr_expect(strstr(html, "<td>-</td><td>-</td><td class=\"t\">complete</td>"), "dp2 has none");
  free(html);
}

Test(report, index_html_has_verdict_tables_and_escaped_scenario) {
  report_result res;
  const char *dir = write_report(make_db(), "/nonexistent/gnuplot", &res);
  char *html = read_file(dir, "index.html", NULL);
  cr_assert_not_null(html);
  cr_expect(strstr(html, "<!DOCTYPE html>"));
  cr_expect(strstr(html, "<style>"), "inline CSS");
  cr_expect(strstr(html, "<div class=\"verdict fail\">FAIL</div>"));
  cr_expect(strstr(html, "1 of 4 SLOs failed"));
  cr_expect(strstr(html, "&lt;= 500 ms</td><td>612.3 ms</td><td class=\"fail\">FAIL"),
            "verdict row of tp1");
  cr_expect(strstr(html, "<h3>Scaling</h3>"));
  cr_expect(strstr(html, "<td>87%</td>"), "dp2 efficiency");
  cr_expect_not(strstr(html, "sensitivity"), "no sensitivity columns without the rows");
  cr_expect(strstr(html, "<td>1.74x</td>"), "dp2 speed-up");
  cr_expect(strstr(html, "Deployments x phases"));
  cr_expect(strstr(html, "<th>KV peak</th><th>busy</th></tr>"));
  cr_expect(strstr(html, "<td>37.5%</td><td>81.3%</td></tr>"), "KV peak and busy of a row");
  cr_expect(strstr(html, "TTFT p95 (ms) per prompt class"));
  cr_expect(strstr(html, "<th>long</th>") && strstr(html, "<th>short</th>"));
  cr_expect(strstr(html, "<h3>Faults</h3>"));
  cr_expect(strstr(html, "SIGKILL &lt;worker&gt;"));
  cr_expect(strstr(html, "abc1234"), "git revision");
  cr_expect(strstr(html, "ci-host"));
  // The scenario text, escaped: no live <script> anywhere in the page.
  cr_expect(strstr(html, "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; "
                         "&quot;quotes&quot;"));
  cr_expect_not(strstr(html, "<script"));
  free(html);
}

Test(report, unknown_run_is_invalid_and_writes_nothing) {
  const char *db_path = make_db();
  sqlite3 *db = open_db(db_path);
  const char *base = sc_test_tmpdir("report-none");
  char dir[512];
  snprintf(dir, sizeof dir, "%s/out", base);
  int64_t run = 99;
  report_options o = {.out_dir = dir, .run_ids = &run, .n_runs = 1, .gnuplot = "/nonexistent"};
  report_result res;
  sc_error err = {{0}};
  cr_expect_eq(report_write(db, &o, &res, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "no run 99"), "%s", err.msg);
  cr_expect_not(exists(dir, "."), "the output directory was created");
  sqlite3_close(db);
}

Test(report, several_runs_prefix_families_and_get_a_timeline_each) {
  const char *db_path = make_db();
  sqlite3 *db = open_db(db_path);
  add_run(db, 2, "complete");
  const char *dir = sc_test_tmpdir("report-two");
  int64_t runs[2] = {1, 2};
  report_options o = {.out_dir = dir, .run_ids = runs, .n_runs = 2, .gnuplot = "/nonexistent"};
  report_result res;
  sc_error err = {{0}};
  cr_assert_eq(report_write(db, &o, &res, &err), SC_OK, "%s", err.msg);
  sqlite3_close(db);
  expect_dat(dir, "scaling.dat", scaling_header, 6, 4, 2);
  char *gp = read_file(dir, "scaling.gp", NULL);
  cr_assert_not_null(gp);
  cr_expect(strstr(gp, "\"run 1: dp: tp1, dp2\""), "%s", gp);
  cr_expect(strstr(gp, "\"run 2: ideal linear\""));
  free(gp);
  cr_expect(exists(dir, "timeline-run1.dat") && exists(dir, "timeline-run2.dat"));
  cr_expect(exists(dir, "kv-run1.gp") && exists(dir, "kv-run2.gp"));
  expect_dat(dir, "ttft.dat", "# concurrency ttft_p50_ms ttft_p95_ms phase", 4, 12, 4);
}

Test(report, newest_run_is_the_default) {
  const char *db_path = make_db();
  sqlite3 *db = open_db(db_path);
  add_run(db, 5, "complete");
  const char *dir = sc_test_tmpdir("report-newest");
  report_options o = {.out_dir = dir, .gnuplot = "/nonexistent"};
  report_result res;
  sc_error err = {{0}};
  cr_assert_eq(report_write(db, &o, &res, &err), SC_OK, "%s", err.msg);
  sqlite3_close(db);
  char *html = read_file(dir, "index.html", NULL);
  cr_assert_not_null(html);
  cr_expect(strstr(html, "<h2>Run 5: ramp-test</h2>"));
  cr_expect_not(strstr(html, "<h2>Run 1:"));
  free(html);
}

// --- JUnit

Test(report, junit_has_one_testcase_per_deployment_slo_and_the_failure) {
  const char *db_path = make_db();
  sqlite3 *db = open_db(db_path);
  const char *dir = sc_test_tmpdir("report-junit");
  char path[512];
  snprintf(path, sizeof path, "%s/junit.xml", dir);
  sc_error err = {{0}};
  cr_assert_eq(report_junit_write(db, 1, path, &err), SC_OK, "%s", err.msg);
  sqlite3_close(db);
  char *x = read_file(dir, "junit.xml", NULL);
  cr_assert_not_null(x);
  cr_expect_eq(strncmp(x, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites", 50), 0);
  cr_expect_eq(count(x, "<testsuites "), 1);
  cr_expect_eq(count(x, "</testsuites>"), 1);
  cr_expect_eq(count(x, "<testsuite "), 1);
  cr_expect_eq(count(x, "</testsuite>"), 1);
  cr_expect(strstr(x, "<testsuite name=\"ramp-test\" tests=\"4\" failures=\"1\""), "%s", x);
  cr_expect_eq(count(x, "<testcase "), 4);
  // Each testcase closes: self-closing when it passes, </testcase> after its failure.
  cr_expect_eq(count(x, "time=\"0\"/>"), 3);
  cr_expect_eq(count(x, "</testcase>"), 1);
  cr_expect_eq(count(x, "<failure "), 1);
  cr_expect(strstr(x, "<testcase classname=\"ramp-test.tp1\" name=\"ttft_p95_ms\" time=\"0\">\n"
                      "      <failure message=\"expected &lt;= 500, got 612.3\" type=\"slo\">"),
            "%s", x);
  cr_expect(strstr(x, "classname=\"ramp-test.dp2\" name=\"error_rate\""));
  cr_expect_not(strstr(x, "name=\"run\""), "a complete run with SLOs has no run testcase");
  free(x);
}

Test(report, junit_of_a_run_without_slos_has_one_run_testcase) {
  const char *db_path = make_db();
  sqlite3 *db = open_db(db_path);
  add_run(db, 2, "complete");
  add_run(db, 3, "interrupted");
  exec(db, "DELETE FROM verdict WHERE run_id IN (2, 3)");
  exec(db, "UPDATE run SET error = 'killed by <SIGINT>' WHERE id = 3");
  const char *dir = sc_test_tmpdir("report-junit-run");
  char path[512];
  sc_error err = {{0}};
  snprintf(path, sizeof path, "%s/ok.xml", dir);
  cr_assert_eq(report_junit_write(db, 2, path, &err), SC_OK, "%s", err.msg);
  snprintf(path, sizeof path, "%s/bad.xml", dir);
  cr_assert_eq(report_junit_write(db, 3, path, &err), SC_OK, "%s", err.msg);
  sqlite3_close(db);
  char *ok = read_file(dir, "ok.xml", NULL);
  cr_expect_eq(count(ok, "<testcase "), 1);
  cr_expect(strstr(ok, "name=\"run\""));
  cr_expect(strstr(ok, "tests=\"1\" failures=\"0\""));
  cr_expect_eq(count(ok, "<failure"), 0);
  free(ok);
  char *bad = read_file(dir, "bad.xml", NULL);
  cr_expect(strstr(bad, "tests=\"1\" failures=\"1\""));
  cr_expect(strstr(bad, "<failure message=\"run 3 is interrupted: killed by &lt;SIGINT&gt;\" "
                        "type=\"run\">"),
            "%s", bad);
  free(bad);
}

Test(report, junit_unwritable_path_is_io) {
  const char *db_path = make_db();
  sqlite3 *db = open_db(db_path);
  sc_error err = {{0}};
  cr_expect_eq(report_junit_write(db, 1, "/nonexistent/dir/junit.xml", &err), SC_IO);
  cr_expect(strstr(err.msg, "/nonexistent/dir/junit.xml"), "%s", err.msg);
  cr_expect_eq(report_junit_write(db, 42, "/tmp/never.xml", &err), SC_INVALID);
  sqlite3_close(db);
}

// --- the terminal table

static char *verdict_text(sqlite3 *db, int64_t run) {
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  cr_assert_not_null(f);
  sc_error err = {{0}};
  cr_assert_eq(report_print_verdicts(db, run, f, &err), SC_OK, "%s", err.msg);
  fclose(f);
  return buf;
}

Test(report, verdict_table_lists_each_slo_and_the_overall_result) {
  const char *db_path = make_db();
  sqlite3 *db = open_db(db_path);
  add_run(db, 2, "complete");
  exec(db, "UPDATE verdict SET actual = 480, pass = 1 WHERE run_id = 2");
  add_run(db, 3, "complete");
  exec(db, "DELETE FROM verdict WHERE run_id = 3");
  char *t = verdict_text(db, 1);
  // Text columns left-aligned, numbers right-aligned, widths from the widest cell.
  cr_expect(strstr(t, "deployment  SLO           expected    actual  result\n"), "%s", t);
  cr_expect(strstr(t, "tp1         ttft_p95_ms  <= 500 ms  612.3 ms  FAIL\n"), "%s", t);
  cr_expect(strstr(t, "dp2         ttft_p95_ms  <= 500 ms    320 ms  PASS\n"), "%s", t);
  cr_expect(strstr(t, "dp2         error_rate     <= 0.01         0  PASS\n\n"), "%s", t);
  cr_expect(strstr(t, "tp1 (1 GPU): FAIL (1 of 2 SLOs failed: ttft_p95_ms)\n"), "%s", t);
  cr_expect(strstr(t, "dp2 (2 GPUs): PASS (2/2 SLOs hold)\n"), "%s", t);
  cr_expect(strstr(t, "verdict: FAIL (1 of 4 SLOs failed)\n"), "%s", t);
  free(t);
  t = verdict_text(db, 2);
  cr_expect(strstr(t, "verdict: PASS (4/4 SLOs hold)\n"), "%s", t);
  free(t);
  t = verdict_text(db, 3);
  cr_expect_str_eq(t, "no SLOs in the scenario\n");
  free(t);
  exec(db, "UPDATE run SET status = 'interrupted', error = 'SIGINT' WHERE id = 3");
  t = verdict_text(db, 3);
  cr_expect_str_eq(t, "run 3 is interrupted: SIGINT\nno SLOs in the scenario\n");
  free(t);
  sc_error err = {{0}};
  cr_expect_eq(report_print_verdicts(db, 77, stdout, &err), SC_INVALID);
  sqlite3_close(db);
}

// --- the CLI

static char out[1 << 16];

Test(report, cli_exit_codes) {
  const char *db = make_db();
  const char *dir = sc_test_tmpdir("report-cli");
  char args[2048];

  snprintf(args, sizeof args, "report --db %s/missing.db --out %s/a", dir, dir);
  cr_expect_eq(sc_test_run_cli(args, out, sizeof out), 2, "%s", out);
  cr_expect(strstr(out, "missing.db"), "%s", out);

  snprintf(args, sizeof args, "report --db %s --run 99 --out %s/b", db, dir);
  cr_expect_eq(sc_test_run_cli(args, out, sizeof out), 2, "%s", out);
  cr_expect(strstr(out, "no run 99"), "%s", out);
  cr_expect_not(exists(dir, "b"));

  snprintf(args, sizeof args, "report --db %s --run abc", db);
  cr_expect_eq(sc_test_run_cli(args, out, sizeof out), 2, "%s", out);

  cr_expect_eq(sc_test_run_cli("report --help", out, sizeof out), 0, "%s", out);
  cr_expect(strstr(out, "usage: shardcheck report"), "%s", out);
  cr_expect(strstr(out, "--junit PATH"), "%s", out);

  snprintf(args, sizeof args,
           "report --db %s --out %s/c --gnuplot /nonexistent/gnuplot --junit %s/j.xml", db, dir,
           dir);
  cr_expect_eq(sc_test_run_cli(args, out, sizeof out), 0, "%s", out);
  cr_expect(strstr(out, "warning: plots skipped"), "%s", out);
  cr_expect(strstr(out, "/c/index.html"), "%s", out);
  cr_expect(exists(dir, "c/index.html"));
  cr_expect(exists(dir, "j.xml"));
}

// --- predicted vs measured

// One deployment of a comparison run: its label and metric values (NaN: no row). Pooled values
// in the order of cmp_names; per phase, mean TTFT and mean TPOT of phases c1 and c2 (a phase
// whose TTFT is NaN is not recorded at all).
static const char *const cmp_names[] = {"ttft_mean_ms", "ttft_p95_ms",  "tpot_mean_ms",
                                        "tpot_p95_ms",  "e2el_mean_ms", "e2el_p95_ms",
                                        "output_tok_s", "busy_frac",    "tpot_sensitivity"};
enum { CMP_NAMES = sizeof cmp_names / sizeof cmp_names[0] };

typedef struct cmp_dep {
  const char *label;
  int tp, dp;
  double pooled[CMP_NAMES];
  double phase_ttft[2], phase_tpot[2];
} cmp_dep;

// Records a complete run of scenario `scenario` in mode `mode` into the database at path with
// the store API; returns its id.
static int64_t store_cmp_run(const char *path, const char *scenario, const char *mode,
                             const cmp_dep *deps, int n_deps) {
  store *s = NULL;
  sc_error err = {{0}};
  cr_assert_eq(store_open(path, &s, &err), SC_OK, "%s", err.msg);
  store_run r = {.scenario = scenario, .scenario_text = "name: x\n", .mode = mode,
                 .backend = strcmp(mode, "sim") ? "cpu" : "sim", .model = "llama3-8b",
                 .git_rev = "abc1234", .seed = 7};
  int64_t run = 0;
  cr_assert_eq(store_run_begin(s, &r, &run, &err), SC_OK, "%s", err.msg);
  for (int d = 0; d < n_deps; d++) {
    store_deployment sd = {.run_id = run, .idx = d, .label = deps[d].label, .tp = deps[d].tp,
                           .pp = 1, .dp = deps[d].dp, .start_ns = (uint64_t)d * 4 * S_NS};
    int64_t dep = 0;
    cr_assert_eq(store_deployment_begin(s, &sd, &dep, &err), SC_OK, "%s", err.msg);
    for (int ph = 0; ph < 2; ph++) {
      if (isnan(deps[d].phase_ttft[ph])) continue;
      uint64_t t0 = sd.start_ns + (uint64_t)ph * 2 * S_NS;
      store_phase sp = {.run_id = run, .deployment_id = dep, .idx = ph,
                        .name = ph ? "c2" : "c1", .kind = "ramp", .concurrency = 1 << ph,
                        .start_ns = t0, .warmup_end_ns = t0};
      int64_t phase = 0;
      cr_assert_eq(store_phase_begin(s, &sp, &phase, &err), SC_OK, "%s", err.msg);
      cr_assert_eq(store_metric_add(s, run, dep, phase, NULL, "ttft_mean_ms",
                                    deps[d].phase_ttft[ph], &err), SC_OK, "%s", err.msg);
      cr_assert_eq(store_metric_add(s, run, dep, phase, NULL, "tpot_mean_ms",
                                    deps[d].phase_tpot[ph], &err), SC_OK, "%s", err.msg);
      cr_assert_eq(store_phase_end(s, phase, t0 + 2 * S_NS, &err), SC_OK, "%s", err.msg);
    }
    for (int k = 0; k < CMP_NAMES; k++)
      if (!isnan(deps[d].pooled[k]))
        cr_assert_eq(store_metric_add(s, run, dep, 0, NULL, cmp_names[k], deps[d].pooled[k],
                                      &err), SC_OK, "%s", err.msg);
    // A row of another class and one across deployments: neither is a pooled deployment row.
    cr_assert_eq(store_metric_add(s, run, dep, 0, "short", "ttft_mean_ms", 1e6, &err), SC_OK);
    cr_assert_eq(store_deployment_end(s, dep, "complete", NULL, sd.start_ns + 4 * S_NS, &err),
                 SC_OK, "%s", err.msg);
  }
  cr_assert_eq(store_metric_add(s, run, 0, 0, NULL, "ttft_mean_ms", 1e6, &err), SC_OK);
  cr_assert_eq(store_run_end(s, run, "complete", NULL, NULL, (uint64_t)n_deps * 4 * S_NS, &err),
               SC_OK, "%s", err.msg);
  store_close(s);
  return run;
}

// The predicted (sim) deployments: tp1 and dp2 also ran for real, tp2 did not. dp2 has no TTFT
// p95 and no E2EL p95 in either run; its TPOT p95 is predicted only.
static const cmp_dep sim_deps[] = {
    {"tp1", 1, 1, {110, 150, 19, 25, 500, 700, 900, 0.6, 3.5}, {90, 130}, {21, 18}},
    {"dp2", 1, 2, {60, NAN, 2, 30, 300, NAN, 2000, NAN, NAN}, {55, 65}, {2, 2}},
    {"tp2", 2, 1, {40, 50, 10, 12, 200, 250, 3000, 0.3, 1}, {35, 45}, {9, 11}},
};
// The measured (real) deployments: pp2 was not simulated; dp2's TPOT is 0 (no error) and its
// throughput has no row (no error); dp2 lacks phase c2 (stopped early).
static const cmp_dep real_deps[] = {
    {"pp2", 1, 1, {45, 55, 11, 13, 210, 260, 2900, 0.4, NAN}, {40, 50}, {10, 12}},
    {"tp1", 1, 1, {100, 120, 20, 24, 400, 700, 1000, 0.5, NAN}, {100, 100}, {20, 20}},
    {"dp2", 1, 2, {50, NAN, 0, NAN, 400, NAN, NAN, NAN, NAN}, {50, NAN}, {1, NAN}},
};

// A fresh database with run 1 (sim) and run 2 (real) of scenario cmp-test; returns its path.
static const char *make_cmp_db(void) {
  static char path[512];
  const char *dir = sc_test_tmpdir("report-cmp");
  cr_assert_not_null(dir);
  snprintf(path, sizeof path, "%s/results.db", dir);
  cr_assert_eq(store_cmp_run(path, "cmp-test", "sim", sim_deps, 3), 1);
  cr_assert_eq(store_cmp_run(path, "cmp-test", "real", real_deps, 3), 2);
  return path;
}

static report_comparison compare(const char *db_path, const int64_t *runs, int n) {
  sqlite3 *db = open_db(db_path);
  report_comparison c;
  sc_error err = {{0}};
  cr_assert_eq(report_compare(db, runs, n, &c, &err), SC_OK, "%s", err.msg);
  sqlite3_close(db);
  return c;
}

static const report_cmp_row *cmp_row(const report_cmp_pair *p, const char *label,
                                     const char *phase, const char *metric) {
  for (int i = 0; i < p->n_rows; i++)
    if (!strcmp(p->rows[i].label, label) && !strcmp(p->rows[i].phase, phase) &&
        !strcmp(p->rows[i].metric, metric))
      return &p->rows[i];
  return NULL;
}

static void expect_cmp(const report_cmp_pair *p, const char *label, const char *phase,
                       const char *metric, double predicted, double measured) {
  const report_cmp_row *r = cmp_row(p, label, phase, metric);
  cr_assert_not_null(r, "no row %s %s %s", label, phase, metric);
  cr_expect_eq(r->predicted, predicted, "%s %s %s predicted %g", label, phase, metric,
               r->predicted);
  cr_expect_eq(r->measured, measured, "%s %s %s measured %g", label, phase, metric,
               r->measured);
  cr_expect_eq(r->error, (predicted - measured) / measured, "%s %s %s error %.17g", label,
               phase, metric, r->error);
}

static void expect_no_error(const report_cmp_pair *p, const char *label, const char *metric) {
  const report_cmp_row *r = cmp_row(p, label, "", metric);
  cr_assert_not_null(r, "no row %s %s", label, metric);
  cr_expect(isnan(r->error), "%s %s: error %g where measured is 0 or missing", label, metric,
            r->error);
}

Test(report, compare_errors_are_predicted_minus_measured_over_measured) {
  const char *db_path = make_cmp_db();
  int64_t runs[2] = {2, 1}; // the order given does not decide which run predicts
  report_comparison c = compare(db_path, runs, 2);
  cr_assert_eq(c.n_pairs, 1);
  const report_cmp_pair *p = &c.pairs[0];
  cr_expect_eq(p->predicted_run, 1);
  cr_expect_eq(p->measured_run, 2);
  cr_expect_str_eq(p->scenario, "cmp-test");
  cr_expect_eq(p->n_deployments, 2);
  for (int k = 0; k < CMP_NAMES - 1; k++)
    expect_cmp(p, "tp1", "", cmp_names[k], sim_deps[0].pooled[k], real_deps[1].pooled[k]);
  // the prediction's sensitivity: listed beside the errors, with no error of its own
  const report_cmp_row *sv = cmp_row(p, "tp1", "", "tpot_sensitivity");
  cr_assert_not_null(sv);
  cr_expect(sv->predicted == 3.5 && isnan(sv->measured) && isnan(sv->error));
  expect_cmp(p, "dp2", "", "ttft_mean_ms", 60, 50);
  expect_cmp(p, "dp2", "", "e2el_mean_ms", 300, 400);
  expect_no_error(p, "dp2", "tpot_mean_ms");  // measured 0
  expect_no_error(p, "dp2", "tpot_p95_ms");   // measured missing
  expect_no_error(p, "dp2", "output_tok_s");  // measured missing
  cr_expect_null(cmp_row(p, "dp2", "", "ttft_p95_ms"), "a p95 neither run has is not listed");
  cr_expect_null(cmp_row(p, "dp2", "", "busy_frac"), "nor a busy fraction (older runs)");
  cr_expect_null(cmp_row(p, "dp2", "", "e2el_p95_ms"));
  expect_cmp(p, "tp1", "c1", "ttft_mean_ms", 90, 100);
  expect_cmp(p, "tp1", "c2", "ttft_mean_ms", 130, 100);
  expect_cmp(p, "tp1", "c1", "tpot_mean_ms", 21, 20);
  expect_cmp(p, "tp1", "c2", "tpot_mean_ms", 18, 20);
  expect_cmp(p, "dp2", "c1", "ttft_mean_ms", 55, 50);
  expect_cmp(p, "dp2", "c1", "tpot_mean_ms", 2, 1);
  cr_expect_null(cmp_row(p, "dp2", "c2", "ttft_mean_ms"), "c2 did not run for real");
  // 9 + 5 pooled rows, 4 + 2 phase rows; the pooled rows first.
  cr_expect_eq(p->n_rows, 20);
  for (int i = 0; i < 14 && i < p->n_rows; i++) cr_expect_str_eq(p->rows[i].phase, "");
  int n = 0;
  cr_expect_eq(report_cmp_mean_abs_error(p, "ttft_mean_ms", &n), (0.1 + 0.2) / 2);
  cr_expect_eq(n, 2);
  cr_expect_eq(report_cmp_mean_abs_error(p, "tpot_mean_ms", &n), 0.05);
  cr_expect_eq(n, 1, "dp2's TPOT error is no number and is left out");
  cr_expect(isnan(report_cmp_mean_abs_error(p, "itl_mean_ms", &n)));
  cr_expect_eq(n, 0);
  report_comparison_free(&c);
  report_comparison_free(&c); // a freed comparison is zeroed: freeing again is a no-op
  report_comparison_free(NULL);
}

Test(report, compare_skips_labels_that_only_one_run_has) {
  report_comparison c = compare(make_cmp_db(), (const int64_t[]){1, 2}, 2);
  cr_assert_eq(c.n_pairs, 1);
  for (int i = 0; i < c.pairs[0].n_rows; i++) {
    cr_expect_str_neq(c.pairs[0].rows[i].label, "tp2", "tp2 was only simulated");
    cr_expect_str_neq(c.pairs[0].rows[i].label, "pp2", "pp2 only ran for real");
  }
  // Rows follow the predicted run's deployment order: tp1 before dp2.
  cr_expect_str_eq(c.pairs[0].rows[0].label, "tp1");
  cr_expect_str_eq(c.pairs[0].rows[9].label, "dp2");
  report_comparison_free(&c);
}

Test(report, compare_pairs_only_sim_with_real_of_the_same_scenario) {
  const char *db_path = make_cmp_db();
  cr_assert_eq(store_cmp_run(db_path, "cmp-test", "real", real_deps, 3), 3);
  cr_assert_eq(store_cmp_run(db_path, "other", "sim", sim_deps, 3), 4);
  report_comparison c = compare(db_path, (const int64_t[]){2, 3}, 2);
  cr_expect_eq(c.n_pairs, 0, "two real runs");
  report_comparison_free(&c);
  c = compare(db_path, (const int64_t[]){4, 2}, 2);
  cr_expect_eq(c.n_pairs, 0, "a sim run of another scenario");
  report_comparison_free(&c);
  c = compare(db_path, (const int64_t[]){1}, 1);
  cr_expect_eq(c.n_pairs, 0, "one run");
  report_comparison_free(&c);
  c = compare(db_path, (const int64_t[]){1, 2, 3, 4, 1}, 5);
  cr_assert_eq(c.n_pairs, 2, "run 1 against runs 2 and 3, once each");
  cr_expect_eq(c.pairs[0].measured_run, 2);
  cr_expect_eq(c.pairs[1].measured_run, 3);
  report_comparison_free(&c);
  sqlite3 *db = open_db(db_path);
  sc_error err = {{0}};
  cr_expect_eq(report_compare(db, (const int64_t[]){1, 99}, 2, &c, &err), SC_INVALID);
  cr_expect(strstr(err.msg, "no run 99"), "%s", err.msg);
  cr_expect_eq(c.n_pairs, 0);
  sqlite3_close(db);
}

static char *comparison_text(const report_comparison *c) {
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  cr_assert_not_null(f);
  report_print_comparison(c, f);
  fclose(f);
  return buf;
}

static const char *const cmp_summary =
    "mean |error|: TTFT 15.0%, TPOT 5.0%, E2EL 25.0%, output tok/s 10.0%, TTFT p95 25.0%, "
    "TPOT p95 4.2%, E2EL p95 0.0%, busy 20.0% (over 2 deployments)\n";

Test(report, comparison_table_lists_each_deployment_metric_and_a_mean_error_line) {
  report_comparison c = compare(make_cmp_db(), (const int64_t[]){1, 2}, 2);
  char *t = comparison_text(&c);
  cr_expect(strstr(t, "predicted vs measured: cmp-test, run 1 (sim) vs run 2 (real)\n"), "%s", t);
  // Text columns left-aligned, numbers right-aligned, widths from the widest cell.
  cr_expect(strstr(t, "deployment  metric             predicted    measured   error\n"), "%s", t);
  cr_expect(strstr(t, "tp1         ttft_mean_ms          110 ms      100 ms  +10.0%\n"), "%s", t);
  cr_expect(strstr(t, "tp1         output_tok_s       900 tok/s  1000 tok/s  -10.0%\n"), "%s", t);
  cr_expect(strstr(t, "tp1         tpot_sensitivity        3.5x           -       -\n"), "%s", t);
  cr_expect(strstr(t, "dp2         tpot_mean_ms            2 ms        0 ms       -\n"), "%s", t);
  cr_expect(strstr(t, "dp2         output_tok_s      2000 tok/s           -       -\n"), "%s", t);
  cr_expect(strstr(t, "deployment  phase  metric        predicted  measured    error\n"), "%s", t);
  cr_expect(strstr(t, "tp1         c2     ttft_mean_ms     130 ms    100 ms   +30.0%\n"), "%s", t);
  cr_expect(strstr(t, "dp2         c1     tpot_mean_ms       2 ms      1 ms  +100.0%\n"), "%s", t);
  cr_expect(strstr(t, "  -\n\ndeployment  phase"), "a blank line between the tables:\n%s", t);
  size_t len = strlen(t), sl = strlen(cmp_summary);
  cr_expect(len >= sl && !strcmp(t + len - sl, cmp_summary), "the summary ends it:\n%s", t);
  free(t);
  report_comparison_free(&c);
  report_comparison none = {0};
  t = comparison_text(&none);
  cr_expect_str_eq(t, "", "no pair prints nothing");
  free(t);
}

// report_write of runs into a fresh directory without gnuplot; returns index.html's text.
static char *cmp_html(const char *db_path, const int64_t *runs, int n) {
  const char *dir = sc_test_tmpdir("report-cmp-out");
  sqlite3 *db = open_db(db_path);
  report_options o = {.out_dir = dir, .run_ids = runs, .n_runs = n, .gnuplot = "/nonexistent"};
  report_result res;
  sc_error err = {{0}};
  cr_assert_eq(report_write(db, &o, &res, &err), SC_OK, "%s", err.msg);
  sqlite3_close(db);
  char *html = read_file(dir, "index.html", NULL);
  cr_assert_not_null(html);
  return html;
}

Test(report, index_html_has_the_predicted_vs_measured_section_with_large_errors_marked) {
  char *html = cmp_html(make_cmp_db(), (const int64_t[]){1, 2}, 2);
  cr_expect_eq(count(html, "<h2>Predicted vs measured</h2>"), 1);
  cr_expect(strstr(html, "<h3>Run 1 (sim) vs run 2 (real): cmp-test</h3>"));
  // Exactly 10% is not beyond 10%; 20% is.
  cr_expect(strstr(html, "<td class=\"t\">tp1</td><td class=\"t\">ttft_mean_ms</td><td>110 ms"
                         "</td><td>100 ms</td><td>+10.0%</td></tr>"),
            "%s", html);
  cr_expect(strstr(html, "<td class=\"t\">dp2</td><td class=\"t\">ttft_mean_ms</td><td>60 ms"
                         "</td><td>50 ms</td><td class=\"off\">+20.0%</td></tr>"));
  cr_expect(strstr(html, "<td class=\"t\">tp1</td><td class=\"t\">c1</td><td class=\"t\">"
                         "tpot_mean_ms</td><td>21 ms</td><td>20 ms</td><td>+5.0%</td></tr>"));
  cr_expect(strstr(html, "<td>-</td></tr>"), "no error: a dash, not highlighted");
  cr_expect_not(strstr(html, "class=\"off\">-<"));
  cr_expect(strstr(html, "mean |error|: TTFT 15.0%, TPOT 5.0%"));
  // The section comes before the runs' own sections.
  cr_expect(strstr(html, "id=\"compare\"") < strstr(html, "id=\"run-1\""));
  free(html);
}

Test(report, index_html_of_runs_without_a_pair_has_no_comparison) {
  const char *db_path = make_cmp_db();
  cr_assert_eq(store_cmp_run(db_path, "cmp-test", "real", real_deps, 3), 3);
  char *html = cmp_html(db_path, (const int64_t[]){1}, 1);
  cr_expect_not(strstr(html, "Predicted vs measured"));
  free(html);
  html = cmp_html(db_path, (const int64_t[]){2, 3}, 2);
  cr_expect_not(strstr(html, "Predicted vs measured"));
  free(html);
}

Test(report, cli_prints_predicted_vs_measured_for_a_sim_and_a_real_run) {
  const char *db = make_cmp_db();
  cr_assert_eq(store_cmp_run(db, "cmp-test", "real", real_deps, 3), 3);
  const char *dir = sc_test_tmpdir("report-cmp-cli");
  char args[2048];
  snprintf(args, sizeof args, "report --db %s --run 1 --run 2 --out %s/a --gnuplot /nonexistent",
           db, dir);
  cr_expect_eq(sc_test_run_cli(args, out, sizeof out), 0, "%s", out);
  cr_expect(strstr(out, "predicted vs measured: cmp-test, run 1 (sim) vs run 2 (real)\n"), "%s",
            out);
  cr_expect(strstr(out, "tp1         ttft_mean_ms          110 ms      100 ms  +10.0%\n"), "%s",
            out);
  size_t len = strlen(out), sl = strlen(cmp_summary);
  cr_expect(len >= sl && !strcmp(out + len - sl, cmp_summary), "the summary ends it:\n%s", out);
  cr_expect(exists(dir, "a/index.html"));

  snprintf(args, sizeof args, "report --db %s --run 2 --run 3 --out %s/b --gnuplot /nonexistent",
           db, dir);
  cr_expect_eq(sc_test_run_cli(args, out, sizeof out), 0, "%s", out);
  cr_expect_not(strstr(out, "predicted vs measured"), "two real runs: %s", out);
  cr_expect_not(strstr(out, "mean |error|"), "%s", out);

  snprintf(args, sizeof args, "report --db %s --run 1 --out %s/c --gnuplot /nonexistent", db,
           dir);
  cr_expect_eq(sc_test_run_cli(args, out, sizeof out), 0, "%s", out);
  cr_expect_not(strstr(out, "predicted vs measured"), "one run: %s", out);
}

// --- the real runs against each other (the floor of a prediction's error)

// A second real run: tp1's mean TTFT and TPOT differ from real_deps' (125 against 100, 25
// against 20); every other value is the same.
static const cmp_dep real_deps_b[] = {
    {"pp2", 1, 1, {45, 55, 11, 13, 210, 260, 2900, 0.4, NAN}, {40, 50}, {10, 12}},
    {"tp1", 1, 1, {125, 120, 25, 24, 400, 700, 1000, 0.5, NAN}, {100, 100}, {20, 20}},
    {"dp2", 1, 2, {50, NAN, 0, NAN, 400, NAN, NAN, NAN, NAN}, {50, NAN}, {1, NAN}},
};

// make_cmp_db plus run 3: real_deps_b.
static const char *make_floor_db(void) {
  const char *db_path = make_cmp_db();
  cr_assert_eq(store_cmp_run(db_path, "cmp-test", "real", real_deps_b, 3), 3);
  return db_path;
}

Test(report, floor_compares_every_real_run_with_every_other_as_a_prediction) {
  report_comparison c = compare(make_floor_db(), (const int64_t[]){1, 2, 3, 2}, 4);
  cr_assert_eq(c.n_pairs, 2, "the sim run against each real run");
  cr_assert_eq(c.n_floors, 1);
  const report_cmp_floor *f = &c.floors[0];
  cr_expect_str_eq(f->scenario, "cmp-test");
  cr_assert_eq(f->n_runs, 2, "run 2, given twice, counts once");
  cr_expect(f->runs[0] == 2 && f->runs[1] == 3);
  cr_assert_eq(f->n_pairs, 2);
  const report_cmp_pair *a = &f->pairs[0], *b = &f->pairs[1];
  cr_expect(a->predicted_run == 2 && a->measured_run == 3);
  cr_expect(b->predicted_run == 3 && b->measured_run == 2);
  cr_expect_eq(a->n_deployments, 3, "pp2 ran for real in both: it is compared here");
  expect_cmp(a, "tp1", "", "ttft_mean_ms", 100, 125);
  expect_cmp(b, "tp1", "", "ttft_mean_ms", 125, 100);
  expect_cmp(a, "pp2", "", "tpot_mean_ms", 11, 11);
  expect_cmp(a, "tp1", "c1", "ttft_mean_ms", 100, 100);
  // TTFT over pp2, tp1, dp2: (0 + 0.2 + 0) / 3 and (0 + 0.25 + 0) / 3; TPOT over pp2 and tp1
  // (dp2 measured 0: no error): 0.2 / 2 and 0.25 / 2.
  cr_expect_float_eq(report_cmp_mean_abs_error(a, "ttft_mean_ms", NULL), 0.2 / 3, 1e-12);
  cr_expect_float_eq(report_cmp_mean_abs_error(b, "ttft_mean_ms", NULL), 0.25 / 3, 1e-12);
  double lo, hi;
  cr_expect_eq(report_cmp_floor_range(f, "tpot_mean_ms", &lo, &hi), 2);
  cr_expect_float_eq(lo, 0.1, 1e-12);
  cr_expect_float_eq(hi, 0.125, 1e-12);
  cr_expect_eq(report_cmp_floor_range(f, "itl_mean_ms", &lo, &hi), 0);
  cr_expect(isnan(lo) && isnan(hi));
  report_comparison_free(&c);
  cr_expect_eq(c.n_floors, 0);
  cr_expect_null(c.floors);
}

Test(report, floor_needs_a_prediction_and_two_real_runs_of_its_scenario) {
  const char *db_path = make_floor_db();
  cr_assert_eq(store_cmp_run(db_path, "other", "real", real_deps, 3), 4);
  cr_assert_eq(store_cmp_run(db_path, "other", "real", real_deps_b, 3), 5);
  report_comparison c = compare(db_path, (const int64_t[]){2, 3}, 2);
  cr_expect_eq(c.n_floors, 0, "two real runs and nothing predicted");
  report_comparison_free(&c);
  c = compare(db_path, (const int64_t[]){1, 2}, 2);
  cr_expect_eq(c.n_floors, 0, "one real run");
  report_comparison_free(&c);
  c = compare(db_path, (const int64_t[]){1, 2, 4, 5}, 4);
  cr_expect_eq(c.n_floors, 0, "the other scenario's real runs have no prediction");
  report_comparison_free(&c);
  c = compare(db_path, (const int64_t[]){1, 2, 3, 4, 5}, 5);
  cr_assert_eq(c.n_floors, 1);
  cr_expect(c.floors[0].n_runs == 2 && c.floors[0].runs[0] == 2 && c.floors[0].runs[1] == 3);
  report_comparison_free(&c);
}

Test(report, comparison_text_ends_each_scenario_with_its_real_runs_against_each_other) {
  report_comparison c = compare(make_floor_db(), (const int64_t[]){1, 2, 3}, 3);
  char *t = comparison_text(&c);
  const char *last_pair = strstr(t, "run 1 (sim) vs run 3 (real)");
  const char *floor = strstr(t, "\nreal runs against each other: cmp-test, runs 2 and 3 (each "
                                "as if it predicted another: a prediction is not expected to "
                                "come closer)\n");
  cr_assert(last_pair && floor && last_pair < floor, "%s", t);
  cr_expect(strstr(floor, "run 2 as run 3: mean |difference|: TTFT 6.7%, TPOT 10.0%,"), "%s", t);
  cr_expect(strstr(floor, "run 3 as run 2: mean |difference|: TTFT 8.3%, TPOT 12.5%,"), "%s", t);
  const char *range = "mean |difference| over the 2 pairs: TTFT 6.7-8.3%, TPOT 10.0-12.5%, "
                      "E2EL 0.0-0.0%, output tok/s 0.0-0.0%, TTFT p95 0.0-0.0%, TPOT p95 "
                      "0.0-0.0%, E2EL p95 0.0-0.0%, busy 0.0-0.0% (min-max; over 3 "
                      "deployments)\n";
  size_t len = strlen(t), rl = strlen(range);
  cr_expect(len >= rl && !strcmp(t + len - rl, range), "the range line ends it:\n%s", t);
  free(t);
  report_comparison_free(&c);
}

Test(report, index_html_has_a_table_of_the_real_runs_against_each_other) {
  char *html = cmp_html(make_floor_db(), (const int64_t[]){1, 2, 3}, 3);
  const char *h = strstr(html, "<h4>Real runs against each other: cmp-test</h4>");
  cr_assert_not_null(h, "%s", html);
  cr_expect(strstr(html, "run 1 (sim) vs run 3 (real)") < h, "after the scenario's last pair");
  cr_expect(strstr(h, "<tr><th class=\"t\">runs</th><th>TTFT</th><th>TPOT</th>"), "%s", h);
  cr_expect(strstr(h, "<tr><td class=\"t\">run 2 as run 3</td><td>6.7%</td><td>10.0%</td>"),
            "%s", h);
  cr_expect(strstr(h, "<tr><td class=\"t\">min-max</td><td>6.7-8.3%</td><td>10.0-12.5%</td>"),
            "%s", h);
  cr_expect(strstr(h, "</table>\n</section>"), "it closes the section:\n%s", h);
  free(html);
  html = cmp_html(make_floor_db(), (const int64_t[]){1, 2}, 2);
  cr_expect_not(strstr(html, "Real runs against each other"), "one real run: no floor");
  free(html);
}
