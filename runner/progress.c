// The runner's progress display: a line per phase run (rewritten in place on a terminal, else
// one every 10 s, and one with the phase's totals when it ends), its ETA or, in sim mode, the
// simulated time and the speed against real time; and notes on lines of their own.
// Not here: when the loop calls it (runner/runner.c), the metrics stored (runner/verdicts.c).
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "runner/runner_impl.h"
#include "kernels/util.h"

static void fmt_dur(char *b, size_t cap, double s) {
  if (s < 0 || !isfinite(s)) snprintf(b, cap, "?");
  else if (s < 60) snprintf(b, cap, "%.0fs", s);
  else if (s < 3600) snprintf(b, cap, "%dm%02ds", (int)s / 60, (int)s % 60);
  else snprintf(b, cap, "%dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
}

// Expected length of a phase run in seconds (NaN when it depends on the engine's speed).
static double phase_expect_s(const phase_run *ph) {
  const scn_phase *p = ph->p;
  if (p->kind == SCN_PHASE_RAMP) return (double)p->hold_ns / 1e9;
  if (p->kind == SCN_PHASE_RATE)
    return p->duration_ns ? (double)p->duration_ns / 1e9 : p->requests / p->rate;
  return NAN;
}

static double eta_s(rt *r, uint64_t now) {
  double left = 0;
  for (int k = r->cur; k < r->n_phases; k++) {
    double e = phase_expect_s(&r->phases[k]);
    if (!isfinite(e)) {
      const phase_run *ph = &r->phases[k];
      int todo = ph->p->requests - (k == r->cur ? r->sent : 0);
      double el = (double)(now - r->phases[r->cur].start) / 1e9;
      if (k != r->cur || r->sent == 0 || el <= 0) return NAN;
      e = todo / (r->sent / el) + el;
    }
    if (k == r->cur) e -= (double)(now - r->phases[k].start) / 1e9;
    left += e > 0 ? e : 0;
  }
  double per_dep = 0;
  for (int k = 0; k < r->n_phases; k++) per_dep += phase_expect_s(&r->phases[k]);
  int deps_left = r->s->n_deployments - r->dep_idx - 1;
  if (deps_left > 0) left += isfinite(per_dep) ? deps_left * per_dep : NAN;
  return left;
}

// TTFT p95 (ms) so far over the current phase's measured requests; NaN when none has a token.
static double phase_ttft_p95(rt *r) {
  const phase_run *ph = &r->phases[r->cur];
  size_t n = 0;
  for (uint64_t i = ph->first_seq; i < r->reqs.n; i++) {
    const req_rec *q = &r->reqs.v[i];
    if (q->n_tok == 0 || q->warmup) continue;
    if (n == r->cap_ttft) {
      size_t cap = r->cap_ttft ? r->cap_ttft * 2 : 1024;
      double *p = realloc(r->ttft_scratch, cap * sizeof *p);
      if (!p) break;
      r->ttft_scratch = p;
      r->cap_ttft = cap;
    }
    r->ttft_scratch[n++] = (double)(q->tok[0] - q->arrival) / 1e6;
  }
  if (n == 0) return NAN;
  qsort(r->ttft_scratch, n, sizeof(double), sc_cmp_double);
  return mt_percentile(r->ttft_scratch, (int)n, 95);
}

void rn_progress(rt *r, uint64_t now, bool done) {
  if (r->o->progress == RUNNER_PROGRESS_NONE || r->cur >= r->n_phases) return;
  bool tty = r->tty && r->o->progress == RUNNER_PROGRESS_AUTO;
  uint64_t pace = r->sim ? sc_monotonic_ns() : now; // sim: lines follow the wall clock
  if (!done && pace < r->next_line) return;
  r->next_line = pace + (tty ? TTY_NS : LINE_NS);
  FILE *f = r->o->progress_out ? r->o->progress_out : stderr;
  const phase_run *ph = &r->phases[r->cur];
  double p95 = phase_ttft_p95(r);
  char ttft[32] = "-";
  if (isfinite(p95)) snprintf(ttft, sizeof ttft, "%.0f ms", p95);
  char load[32];
  if (ph->concurrency) snprintf(load, sizeof load, "c=%d", ph->concurrency);
  else snprintf(load, sizeof load, "%g req/s", ph->p->rate);
  const char *pre = tty ? "\r\033[K" : "";
  if (done) {
    uint64_t toks = 0;
    for (uint64_t i = ph->first_seq; i < r->reqs.n; i++) toks += (uint64_t)r->reqs.v[i].n_tok;
    double el = (double)(now - ph->start) / 1e9;
    fprintf(f, "%s%s [%d/%d] %s %s: %d requests in %.1f s | TTFT p95 %s | %.0f tok/s\n", pre,
            r->dep->label, r->dep_idx + 1, r->s->n_deployments, ph->name, load, r->sent, el, ttft,
            el > 0 ? (double)toks / el : 0.0);
    fflush(f);
    r->line_open = false;
    return;
  }
  char total[24] = "";
  if (ph->p->requests) snprintf(total, sizeof total, "/%d", ph->p->requests);
  char eta[64];
  if (r->sim) {
    double wall = (double)(sc_monotonic_ns() - r->wall_start) / 1e9;
    char t[16];
    fmt_dur(t, sizeof t, (double)now / 1e9);
    snprintf(eta, sizeof eta, "%s simulated, %.0fx real time", t,
             wall > 0 ? (double)now / 1e9 / wall : 0.0);
  } else {
    fmt_dur(eta, sizeof eta, eta_s(r, now));
  }
  fprintf(f, "%s%s [%d/%d] %s %s | %d%s sent, %d in flight | TTFT p95 %s | %.0f tok/s | %s%s%s",
          pre, r->dep->label, r->dep_idx + 1, r->s->n_deployments, ph->name, load, r->sent, total,
          r->reqs.inflight, ttft, r->tok_rate, r->sim ? "" : "ETA ", eta, tty ? "" : "\n");
  fflush(f);
  r->line_open = tty;
}

void rn_note(rt *r, const char *fmt, ...) {
  if (r->o->progress == RUNNER_PROGRESS_NONE) return;
  FILE *f = r->o->progress_out ? r->o->progress_out : stderr;
  if (r->line_open) fputs("\r\033[K", f);
  r->line_open = false;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
  fflush(f);
}
