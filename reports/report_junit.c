// JUnit XML for CI test reporters (Jenkins, GitLab, GitHub): one <testsuite> for the run, one
// <testcase> per deployment x SLO (classname "SCENARIO.LABEL", name the SLO key), and a
// <failure type="slo"> carrying expected vs actual for each SLO that does not hold.
//
// A run that did not complete gets one more testcase "run" that fails (type="run") with its
// status and error; a run with no verdict rows gets the "run" testcase alone, passing when the
// run completed. Rows come from reports/report.c; escaping is rp_put_esc.
#include <errno.h>
#include <math.h>
#include <string.h>

#include "reports/report_impl.h"

#define NS_PER_S 1e9 // stored durations are ns; JUnit times are s

static void attr(FILE *f, const char *name, const char *value) {
  fprintf(f, " %s=\"", name);
  rp_put_esc(f, value);
  fputc('"', f);
}

// "expected <= 500, got 612.3" (units in the body, not the message).
static void failure_message(const rq_verdict *v, char *buf, size_t n) {
  char e[48], a[48];
  rp_fmt_num(v->expected, e, sizeof e);
  rp_fmt_num(v->actual, a, sizeof a);
  if (isnan(v->actual) && v->note[0])
    snprintf(buf, n, "expected %s %s, got %s", v->op, e, v->note); // "no data: why"
  else
    snprintf(buf, n, "expected %s %s, got %s%s%s", v->op, e, isnan(v->actual) ? "no data" : a,
             v->note[0] ? "; " : "", v->note);
}

sc_status report_junit_write(sqlite3 *db, int64_t run_id, const char *path, sc_error *err) {
  if (!path || !*path) return sc_fail(err, SC_INVALID, "no JUnit output path given");
  rq_run r;
  SC_TRY(rq_run_load(db, run_id, &r, err));
  FILE *f = fopen(path, "w");
  if (!f) {
    sc_status s = sc_fail(err, SC_IO, "cannot write %s: %s", path, strerror(errno));
    rq_run_free(&r);
    return s;
  }
  bool complete = !strcmp(r.status, "complete");
  bool run_case = !complete || r.n_verdicts == 0;
  int tests = r.n_verdicts + run_case;
  int failures = !complete;
  for (int i = 0; i < r.n_verdicts; i++) failures += !r.verdicts[i].pass;
  char secs[32];
  snprintf(secs, sizeof secs, "%.3f", r.duration_ns > 0 ? (double)r.duration_ns / NS_PER_S : 0.0);

  fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites", f);
  attr(f, "name", "shardcheck");
  fprintf(f, " tests=\"%d\" failures=\"%d\" errors=\"0\" time=\"%s\">\n", tests, failures, secs);
  fputs("  <testsuite", f);
  attr(f, "name", r.scenario);
  fprintf(f, " tests=\"%d\" failures=\"%d\" errors=\"0\" skipped=\"0\" time=\"%s\"", tests,
          failures, secs);
  if (r.started_at[0]) attr(f, "timestamp", r.started_at);
  if (r.host[0]) attr(f, "hostname", r.host);
  fputs(">\n    <properties>\n", f);
  char buf[64];
  snprintf(buf, sizeof buf, "%lld", (long long)r.id);
  const char *props[][2] = {{"run_id", buf},        {"mode", r.mode},
                            {"backend", r.backend}, {"model", r.model},
                            {"git_rev", r.git_rev}, {"status", r.status}};
  for (size_t i = 0; i < sizeof props / sizeof props[0]; i++) {
    if (!props[i][1][0]) continue;
    fputs("      <property", f);
    attr(f, "name", props[i][0]);
    attr(f, "value", props[i][1]);
    fputs("/>\n", f);
  }
  char seed[32];
  snprintf(seed, sizeof seed, "%llu", (unsigned long long)r.seed);
  fputs("      <property name=\"seed\"", f);
  attr(f, "value", seed);
  fputs("/>\n", f);
  if (r.saturated[0]) { // phases whose client fell behind: their latencies hold its delay
    fputs("      <property name=\"client_saturated\"", f);
    attr(f, "value", r.saturated);
    fputs("/>\n", f);
  }
  fputs("    </properties>\n", f);

  char cls[256];
  for (int i = 0; i < r.n_verdicts; i++) {
    const rq_verdict *v = &r.verdicts[i];
    const rq_deployment *d = &r.deps[v->dep];
    snprintf(cls, sizeof cls, "%s.%s", r.scenario, d->label);
    fputs("    <testcase", f);
    attr(f, "classname", cls);
    attr(f, "name", v->slo);
    fputs(" time=\"0\"", f);
    if (v->pass && !v->note[0]) {
      fputs("/>\n", f);
      continue;
    }
    if (v->pass) { // it holds, and says what it rests on ("client saturated", "on text")
      fputs(">\n      <system-out>", f);
      rp_put_esc(f, v->note);
      fputs("</system-out>\n    </testcase>\n", f);
      continue;
    }
    char msg[400], e[48], a[48];
    failure_message(v, msg, sizeof msg);
    rp_fmt_metric(v->slo, v->expected, e, sizeof e);
    rp_fmt_metric(v->slo, v->actual, a, sizeof a);
    fputs(">\n      <failure", f);
    attr(f, "message", msg);
    fputs(" type=\"slo\">", f);
    fprintf(f, "deployment ");
    rp_put_esc(f, d->label);
    fprintf(f, " (tp=%d pp=%d dp=%d, %d GPU%s): ", d->tp, d->pp, d->dp, d->gpus,
            d->gpus == 1 ? "" : "s");
    rp_put_esc(f, v->slo);
    fputs(" expected ", f);
    rp_put_esc(f, v->op);
    fputc(' ', f);
    rp_put_esc(f, e);
    fputs(", got ", f);
    rp_put_esc(f, isnan(v->actual) ? "no data" : a);
    if (v->note[0]) {
      fputs(" (", f);
      rp_put_esc(f, v->note);
      fputc(')', f);
    }
    fputs("</failure>\n    </testcase>\n", f);
  }
  if (run_case) {
    fputs("    <testcase", f);
    attr(f, "classname", r.scenario);
    fprintf(f, " name=\"run\" time=\"%s\"", secs);
    if (complete) {
      fputs("/>\n", f);
    } else {
      char msg[600];
      snprintf(msg, sizeof msg, "run %lld is %s%s%.400s", (long long)r.id,
               r.status[0] ? r.status : "unfinished", r.error[0] ? ": " : "", r.error);
      fputs(">\n      <failure", f);
      attr(f, "message", msg);
      fputs(" type=\"run\">", f);
      rp_put_esc(f, msg);
      fputs("</failure>\n    </testcase>\n", f);
    }
  }
  fputs("  </testsuite>\n</testsuites>\n", f);
  bool bad = ferror(f) != 0;
  if (fclose(f) != 0) bad = true;
  rq_run_free(&r);
  return bad ? sc_fail(err, SC_IO, "writing %s failed", path) : SC_OK;
}
