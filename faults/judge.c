// The verdicts after faults (see runtime.h), once the deployment's last phase has ended and
// its replicas are still up: KV blocks still held, the request history over the stored rows
// (faults/verdict.h), detection and recovery times, output equivalence with a fresh fault-free
// engine, each fault's SLOs before, during and after it, then the fault rows and metrics.
// After the replicas are freed: threads, fds and processes left behind.
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "faults/runtime_impl.h"
#include "kernels/util.h"

enum {
  SETTLE_MS = 500,   // how long leaked resources may take to go away
  REF_EVENTS = 1024, // events pulled from the reference engine at a time
  REF_POLL_MS = 100, // the reference engine's wait between polls
};
static const uint64_t REF_DEADLINE_NS = 120000000000ull; // the reference engine's time limit
// An external target's reference is one of its own live replicas, asked again after the run:
// its keys start here, past any request's.
static const uint64_t REF_KEY = 1ull << 62;

// An external target: a live replica to ask again, or -1 (why says) when none is.
static int live_reference(fault_rt *f, char *why, size_t cap) {
  for (int i = 0; i < f->c.n_reps; i++)
    if (!router_busy(f->c.rt, i) && replica_health_get(f->c.reps[i]) == REPLICA_HEALTHY) return i;
  snprintf(why, cap, "no live replica to ask again");
  return -1;
}

// Whether every token of q came with its id (a server may stream text only).
static bool ids_known(const req_rec *q) {
  for (int i = 0; i < q->n_tok; i++)
    if (q->ids[i] < 0) return false;
  return true;
}

void frt_add_value(fault_rt *f, const char *name, double v, const char *why) {
  // what this kind of replica cannot give is absent, whatever was computed (the metric table)
  const char *absent =
      mt_metric_absent(name, f->c.sim ? MT_KIND_SIM : scenario_metric_kind(f->c.s));
  if (absent) {
    v = NAN;
    why = absent;
  }
  if (!isnan(v)) why = NULL;
  else if (!why || !why[0]) why = "not measured";
  db_ok(f, store_metric_add_note(f->c.db, f->c.run_id, f->c.dep_id, 0, NULL, name, v, why,
                                 &f->err));
  fault_result *res = f->res;
  if (res && res->n_fm < (int)(sizeof res->fm / sizeof res->fm[0])) {
    res->fm[res->n_fm].name = name;
    res->fm[res->n_fm].v = v;
    snprintf(res->fm[res->n_fm++].why, sizeof res->fm[0].why, "%s", why ? why : "");
  }
}

// Every token delivery time of the deployment, sorted; *n gets the count. NULL: none/no memory.
static uint64_t *all_token_times(fault_rt *f, size_t *n) {
  size_t total = 0;
  for (size_t k = 0; k < f->c.reqs->n; k++) total += (size_t)f->c.reqs->v[k].n_tok;
  *n = 0;
  if (total == 0) return NULL;
  uint64_t *v = malloc(total * sizeof *v);
  if (!v) return NULL;
  for (size_t k = 0; k < f->c.reqs->n; k++)
    for (int j = 0; j < f->c.reqs->v[k].n_tok; j++) v[(*n)++] = f->c.reqs->v[k].tok[j];
  qsort(v, *n, sizeof *v, sc_cmp_u64);
  return v;
}

uint64_t frt_phase_start_at(const fault_rt *f, uint64_t t) {
  uint64_t s = f->c.n_phases ? f->phase_start[0] : 0;
  for (int k = 0; k < f->c.n_phases; k++)
    if (f->phase_start[k] <= t) s = f->phase_start[k];
  return s;
}

// Greedy outputs of the requests a fault touched (retried, resumed, in flight through a
// cancel storm, or served by weights a hot swap installed) and that completed, compared with a
// fresh fault-free engine of the same layout and the weights that served them. Returns the
// number that differ; -1 when not checked (sampling, sim, no such request, or the reference
// could not run: why says).
static int equivalence_of(fault_rt *f, int version, char *why, size_t cap);

static int equivalence(fault_rt *f, char *why, size_t cap) {
  why[0] = 0;
  int total = -1;
  for (int v = 0; v < f->n_vcfg; v++) {
    int mm = equivalence_of(f, v, why, cap);
    if (mm < 0 && why[0] && strcmp(why, "no request that a fault touched completed") != 0)
      return -1;
    if (mm >= 0) total = (total < 0 ? 0 : total) + mm;
  }
  if (total >= 0) why[0] = 0;
  return total;
}

// Requests that only new weights touched (served by a swapped replica, no fault on their path)
// compared per version: the first this many of them by key, the ones nearest the swap. All of
// a busy phase would cost a reference run as long as the phase.
enum { SWAP_SAMPLE = 64 };

// Whether request q is compared: it completed on weights version after a fault touched it, or
// it is one of the first SWAP_SAMPLE requests served by a swap's weights (*n_swap counts them;
// call in key order from 0).
static bool touched(const req_rec *q, int version, int *n_swap) {
  if (q->status != REQ_OK || q->state != REQ_DONE || q->version != version) return false;
  if (q->retries > 0 || q->fault >= 0) return true;
  return q->version > 0 && (*n_swap)++ < SWAP_SAMPLE;
}

// The same for the requests served by one weight version, against a fresh engine of it.
static int equivalence_of(fault_rt *f, int version, char *why, size_t cap) {
  why[0] = 0;
  if (f->c.sim) {
    snprintf(why, cap, "simulated tokens carry no model output");
    return -1;
  }
  if (f->c.s->workload.temperature > 0) {
    snprintf(why, cap, "sampling is not greedy");
    return -1;
  }
  size_t n = 0;
  int n_swap = 0;
  for (size_t k = 0; k < f->c.reqs->n; k++) {
    const req_rec *q = &f->c.reqs->v[k];
    if (touched(q, version, &n_swap)) n++;
  }
  if (n == 0) {
    snprintf(why, cap, "no request that a fault touched completed");
    return -1;
  }
  engine_config ec = f->vcfg[version];
  replica *ref = NULL;
  sc_error e = {{0}};
  // an external target: the same server, asked again now that no fault is in force
  const bool live = f->c.s->target.set;
  const uint64_t base = live ? REF_KEY : 0;
  if (live) {
    int i = live_reference(f, why, cap);
    if (i < 0) return -1;
    ref = f->c.reps[i];
  } else if (replica_local_new(&ec, 0, &ref, &e) != SC_OK) {
    snprintf(why, cap, "the reference engine failed to start: %.100s", e.msg);
    return -1;
  }
  int32_t **got = calloc(f->c.reqs->n, sizeof *got);
  int *n_got = calloc(f->c.reqs->n, sizeof *n_got);
  bool *done = calloc(f->c.reqs->n, sizeof *done);
  uint64_t *text = calloc(f->c.reqs->n, sizeof *text); // the reference's streamed text (a server)
  replica_event *ev = malloc(REF_EVENTS * sizeof *ev);
  int mismatches = 0;
  size_t left = 0;
  if (!got || !n_got || !done || !ev || !text) {
    snprintf(why, cap, "out of memory");
    mismatches = -1;
    goto out;
  }
  n_swap = 0;
  for (size_t k = 0; k < f->c.reqs->n; k++) {
    const req_rec *q = &f->c.reqs->v[k];
    if (!touched(q, version, &n_swap)) continue;
    wl_request w;
    workload_prompt(f->c.wl, k, (int64_t)q->conv - 1, q->turn, &w);
    engine_request er = {.prompt = w.prompt,
                         .n_prompt = w.n_prompt,
                         .max_tokens = w.max_tokens,
                         .stop_at_eos = f->c.s->workload.stop_at_eos};
    got[k] = malloc((size_t)w.max_tokens * sizeof **got);
    if (!got[k] || replica_submit(ref, base + k, &er, &e) != SC_OK) {
      snprintf(why, cap, "the reference engine refused a request: %.100s", e.msg);
      mismatches = -1;
      goto out;
    }
    left++;
  }
  uint64_t deadline = sc_monotonic_ns() + REF_DEADLINE_NS;
  while (left > 0 && sc_monotonic_ns() < deadline) {
    int fd = replica_wait_fd(ref);
    if (fd >= 0) {
      struct pollfd p = {.fd = fd, .events = POLLIN};
      poll(&p, 1, REF_POLL_MS);
    }
    int m;
    while ((m = replica_poll(ref, ev, REF_EVENTS)) > 0)
      for (int i = 0; i < m; i++) {
        if (ev[i].kind == REPLICA_EV_STEP || ev[i].key < base) continue; // the run's own: late
        uint64_t k = ev[i].key - base;
        if (k >= f->c.reqs->n || !got[k] || done[k]) continue;
        if (ev[i].kind == REPLICA_EV_TOKEN && n_got[k] < f->c.reqs->v[k].max_tokens)
          got[k][n_got[k]++] = ev[i].token;
        if (ev[i].kind == REPLICA_EV_FINISHED) text[k] = ev[i].text_hash;
        if (ev[i].kind == REPLICA_EV_FINISHED || ev[i].kind == REPLICA_EV_FAILED) {
          done[k] = true;
          left--;
        }
      }
    if (replica_health_get(ref) == REPLICA_DEAD) break;
  }
  if (left > 0) {
    snprintf(why, cap, "the reference engine did not finish");
    mismatches = -1;
    goto out;
  }
  // token ids where both sides have them, else the streamed text (a server that sends none)
  int on_text = 0, blind = 0;
  for (size_t k = 0; k < f->c.reqs->n; k++) {
    if (!got[k]) continue;
    const req_rec *q = &f->c.reqs->v[k];
    bool ids = ids_known(q);
    for (int i = 0; i < n_got[k] && ids; i++) ids = got[k][i] >= 0;
    if (ids) {
      mismatches += n_got[k] != q->n_tok ||
                    fv_output_hash(got[k], n_got[k]) != fv_output_hash(q->ids, q->n_tok);
    } else if (q->text_hash && text[k]) {
      on_text++;
      mismatches += q->text_hash != text[k];
    } else {
      blind++;
    }
  }
  if (blind > 0 && on_text == 0 && mismatches == 0 && blind == (int)n) {
    snprintf(why, cap, "the server sends neither token ids nor text to compare");
    mismatches = -1;
  } else if (on_text > 0) {
    snprintf(f->equiv_how, sizeof f->equiv_how,
             "%d of the requests compared on the streamed text (the server sent no token ids)",
             on_text);
  }
out:
  if (!live) replica_free(ref);
  if (got)
    for (size_t k = 0; k < f->c.reqs->n; k++) free(got[k]);
  free(got);
  free(n_got);
  free(done);
  free(text);
  free(ev);
  return mismatches;
}

// --- SLOs before, during and after each fault
// What the windows show besides the SLO keys the scenario has.
static const char *const window_metrics[] = {"requests", "ttft_p95_ms", "tpot_p95_ms",
                                             "output_tok_s", "error_rate"};

// The summary of the non-warmup requests that ended in window w of span [t0, t1]: before
// [t0, t1), during [t0, t1] (a request the fault failed at its instant is its, however short
// the fault's effect), after (t0, t1]; false when there are none. A request belongs to the
// window of its outcome, not of its arrival: a request a kill failed is the kill's.
static bool window_summary(fault_rt *f, int w, uint64_t t0, uint64_t t1, mt_summary *out) {
  size_t n = 0;
#define IN_WINDOW(q)                                                                               \
  (w == 0 ? (q)->finish >= t0 && (q)->finish < t1                                                \
   : w == 1 ? (q)->finish >= t0 && (q)->finish <= t1                                             \
            : (q)->finish > t0 && (q)->finish <= t1)
  for (size_t k = 0; k < f->c.reqs->n; k++) n += IN_WINDOW(&f->c.reqs->v[k]);
  if (n == 0) return false;
  mt_request *m = calloc(n, sizeof *m);
  if (!m) return false;
  n = 0;
  for (size_t k = 0; k < f->c.reqs->n; k++) {
    const req_rec *q = &f->c.reqs->v[k];
    if (!IN_WINDOW(q)) continue;
    m[n++] = (mt_request){.arrival_ns = q->arrival,
                          .finish_ns = q->finish,
                          .token_ns = q->tok,
                          .n_tokens = q->n_tok,
                          .prompt_tokens = q->prompt_tokens,
                          .status = q->status,
                          .reason = q->reason,
                          .class_idx = q->class_idx,
                          .warmup = q->warmup};
  }
#undef IN_WINDOW
  sc_status s = mt_summarize(m, (int)n, -1, f->c.good, t0, t1, out);
  free(m);
  return s == SC_OK && out->requests > 0;
}

// The three windows of fault fi: before = [its phase's start, injected), during = [injected,
// the end of its effect], after = (that end, end]. The effect ends when the fault's duration is
// over, else when a swap is done, else when throughput recovered, else at the deployment's end;
// and not before every request the fault touched (failed, retried, resumed, cancelled) ended.
static void fault_spans(fault_rt *f, int fi, uint64_t end, uint64_t span[3][2]) {
  const fault_run *fr = &f->fr[fi];
  uint64_t effect = fr->ended       ? fr->ended_ns
                    : fr->swap_done ? fr->swap_done_ns
                    : fr->recovered ? fr->recovered_ns
                                    : end;
  for (size_t k = 0; k < f->c.reqs->n; k++) {
    const req_rec *q = &f->c.reqs->v[k];
    if (q->fault == fi && q->state == REQ_DONE && q->finish > effect) effect = q->finish;
  }
  if (effect < fr->injected_ns) effect = fr->injected_ns;
  if (effect > end) effect = end;
  uint64_t v[3][2] = {{frt_phase_start_at(f, fr->injected_ns), fr->injected_ns},
                      {fr->injected_ns, effect},
                      {effect, end}};
  memcpy(span, v, sizeof v);
}

// Writes each window's metrics and the verdicts of the scenario's SLOs a window can judge (the
// per-request ones) to fault_window; a failed verdict is also said on the progress stream.
static void fault_windows(fault_rt *f, int fi, int64_t fault_id, uint64_t end) {
  static const char *const names[3] = {"before", "during", "after"};
  uint64_t span[3][2];
  fault_spans(f, fi, end, span);
  char bad[200] = "";
  for (int w = 0; w < 3; w++) {
    mt_summary sum;
    if ((w != 1 && span[w][1] <= span[w][0]) || !window_summary(f, w, span[w][0], span[w][1], &sum))
      continue;
    store_fault_window row = {
        .fault_id = fault_id, .window = names[w], .start_ns = span[w][0], .end_ns = span[w][1]};
    for (size_t i = 0; i < sizeof window_metrics / sizeof *window_metrics; i++) {
      row.name = window_metrics[i];
      if (!mt_summary_value(&sum, row.name, &row.value)) continue;
      bool has_slo = false;
      for (int k = 0; k < f->c.s->slo.n; k++)
        has_slo |= !strcmp(f->c.s->slo.items[k].key, row.name);
      if (!has_slo) db_ok(f, store_fault_window_add(f->c.db, &row, &f->err));
    }
    scn_slo slo = {.n = 0};
    for (int k = 0; k < f->c.s->slo.n; k++) {
      double v;
      if (mt_summary_value(&sum, f->c.s->slo.items[k].key, &v))
        slo.items[slo.n++] = f->c.s->slo.items[k];
    }
    mt_verdict vd[SCN_MAX_SLO];
    int nv = mt_verdicts(&slo, &sum, NULL, NULL, vd, SCN_MAX_SLO);
    for (int k = 0; k < nv; k++) {
      row.name = vd[k].slo;
      row.value = vd[k].actual;
      row.op = vd[k].op;
      row.expected = vd[k].expected;
      row.pass = vd[k].pass;
      db_ok(f, store_fault_window_add(f->c.db, &row, &f->err));
      size_t n = strlen(bad);
      if (!vd[k].pass && n < sizeof bad - 1)
        snprintf(bad + n, sizeof bad - n, "%s%.6s %.31s %.4g (limit %.4g)", n ? ", " : "", names[w],
                 vd[k].slo, vd[k].actual, vd[k].expected);
    }
    row.op = NULL;
  }
  if (bad[0])
    frt_note(f, "%s: around %s %s: SLO missed (requests by when they ended): %s", f->c.dep->label,
             scenario_fault_kind_name(f->plan.v[fi].kind), f->plan.v[fi].target, bad);
}

static sc_status judge(fault_rt *f, uint64_t end, fault_result *dr) {
  uint64_t now = frt_now(f);
  for (int i = 0; i < f->n_rs; i++)
    if (f->rs[i].thr_started) frt_join_restart(f, i, now);
  if (!f->faulted) return SC_OK;
  dr->faulted = true;
  f->res = dr;
  // KV still held on live replicas now that every request has ended. Blocks: shardcheck's
  // engines (their stats) and shardcheck serve (its /metrics counts them). Usage
  // (kv_leak_frac): every replica; a server's read after clearing a prompt cache it keeps in
  // its slots (llama.cpp), since that cache may keep what it keeps. A live replica that cannot
  // say leaves the figure unmeasured (with its reason): no replica's silence passes as 0.
  double leak = 0, leak_frac = 0;
  char leak_why[200] = "", frac_why[200] = "";
  for (int i = 0; i < f->c.n_reps; i++) {
    if (replica_health_get(f->c.reps[i]) == REPLICA_DEAD) continue;
    if (replica_has_server_metrics(f->c.reps[i])) {
      replica_server_metrics m;
      bool got = replica_server_metrics_get(f->c.reps[i], REPLICA_SM_DRAINED, &m);
      if (got && isfinite(m.kv_blocks)) {
        leak += m.kv_blocks;
      } else if (!leak_why[0]) {
        snprintf(leak_why, sizeof leak_why, "replica%d: %.180s", i,
                 got ? "the server counts no KV blocks (only shardcheck serve does)" : m.why);
      }
      if (got && isfinite(m.kv_usage) && m.beyond_cache) {
        leak_frac = fmax(leak_frac, m.kv_usage);
      } else if (!frac_why[0]) {
        snprintf(frac_why, sizeof frac_why, "replica%d: %.180s", i,
                 !got                   ? m.why
                 : !isfinite(m.kv_usage) ? "the server's /metrics has no KV-cache usage"
                                         : m.why);
      }
      continue;
    }
    engine_stats st;
    replica_stats(f->c.reps[i], &st);
    leak += st.kv_used;
    if (st.kv_total > 0) leak_frac = fmax(leak_frac, (double)st.kv_used / st.kv_total);
  }
  if (leak_why[0]) {
    leak = NAN;
    frt_note(f, "%s: KV leak (blocks) not measured: %s", f->c.dep->label, leak_why);
  }
  if (frac_why[0]) {
    leak_frac = NAN;
    frt_note(f, "%s: KV leak (usage) not measured: %s", f->c.dep->label, frac_why);
  }
  dr->kv_leak = leak;
  // History over the recorded rows.
  SC_TRY(rec_drain(f->c.rec, &f->err));
  fv_history h;
  rec_lock(f->c.rec);
  sc_status s =
      fv_history_check(f->c.db, f->c.run_id, f->c.dep_id, (int64_t)f->c.reqs->n, &h, &f->err);
  rec_unlock(f->c.rec);
  SC_TRY(s);
  dr->lost = (double)(h.lost + h.double_done + h.abandoned);
  if (!fv_history_ok(&h, 0))
    frt_note(f,
             "%s: history check FAILED: %lld lost, %lld timed out after their replica was lost "
             "with nobody answering them, %lld completed twice, %lld bad status, %lld duplicate "
             "tokens, %lld with token rows missing, %lld with times running backwards",
             f->c.dep->label, (long long)h.lost, (long long)h.abandoned, (long long)h.double_done,
             (long long)h.bad_status, (long long)h.dup_tokens, (long long)h.token_gaps,
             (long long)h.bad_times);
  // Recovery: throughput back to 90% of its level before the fault.
  size_t n_tok = 0;
  uint64_t *tok = all_token_times(f, &n_tok);
  double detect_ms = NAN, recover_ms = NAN, reload_ms = NAN;
  bool all_recovered = true;
  char recover_why[200] = "no fault was injected";
  int n_injected = 0;
  for (int i = 0; i < f->plan.n; i++) {
    fault_run *fr = &f->fr[i];
    const ft_fault *ft = &f->plan.v[i];
    if (!fr->injected) continue;
    n_injected++;
    bool swap = ft->kind == SCN_FAULT_HOT_SWAP;
    if (swap && tok && fr->swap_done)
      fr->dip = fv_dip(tok, n_tok, frt_phase_start_at(f, fr->injected_ns), fr->injected_ns,
                       fr->swap_done_ns, end, RECOVERY_WINDOW_NS);
    if (ft->kind != SCN_FAULT_CANCEL_STORM && tok && (!swap || fr->swap_done)) {
      // a swap has recovered once it is over and throughput is back; a fault that took
      // replicas, once they are back (restarted) and throughput is back
      uint64_t after = swap ? fr->swap_done_ns : fr->detected ? fr->detected_ns : fr->injected_ns;
      if (fr->back_ns > after) after = fr->back_ns;
      uint64_t rec_at = 0;
      if (fv_recovered_at(tok, n_tok, frt_phase_start_at(f, fr->injected_ns), fr->injected_ns,
                          after, end, RECOVERY_WINDOW_NS, RECOVERY_FRAC, &rec_at)) {
        fr->recovered = true;
        fr->recovered_ns = rec_at;
      }
    }
    if (fr->detected) {
      double ms = (double)(fr->detected_ns - fr->injected_ns) / 1e6;
      if (!(detect_ms >= ms)) detect_ms = ms;
    }
    if (fr->recovered) {
      double ms = (double)(fr->recovered_ns - fr->injected_ns) / 1e6;
      if (!(recover_ms >= ms)) recover_ms = ms;
    } else if (all_recovered) {
      all_recovered = false;
      snprintf(recover_why, sizeof recover_why, "%s %s never recovered%s",
               scenario_fault_kind_name(ft->kind), ft->target,
               ft->kind == SCN_FAULT_CANCEL_STORM
                   ? ": a storm's cancels were never all acknowledged"
               : !tok ? ": no token was delivered"
                      : " (throughput never back at 90% of its level before, or no level before)");
    }
    if (fr->reload_ms > 0 && !(reload_ms >= fr->reload_ms)) reload_ms = fr->reload_ms;
  }
  free(tok);
  if (!all_recovered) recover_ms = NAN; // one fault that never recovered: no figure holds
  dr->detect_ms = detect_ms;
  dr->recover_ms = recover_ms;
  // Equivalence with a fault-free engine.
  char why[160];
  int mm = equivalence(f, why, sizeof why);
  dr->mismatches = mm >= 0 ? mm : NAN;
  if (mm < 0) frt_note(f, "%s: outputs not compared: %s", f->c.dep->label, why);
  if (mm >= 0 && f->equiv_how[0]) frt_note(f, "%s: outputs: %s", f->c.dep->label, f->equiv_how);
  if (mm > 0)
    frt_note(f, "%s: %d output%s differ from a fault-free run", f->c.dep->label, mm,
             mm == 1 ? "" : "s");
  for (int i = 0; i < f->plan.n; i++)
    if (f->plan.v[i].kind == SCN_FAULT_HOT_SWAP && f->fr[i].swap_done) frt_swap_quality(f, i);
  // Rows and metrics.
  rec_lock(f->c.rec);
  for (int i = 0; i < f->plan.n; i++) {
    fault_run *fr = &f->fr[i];
    const ft_fault *ft = &f->plan.v[i];
    char detail[300];
    snprintf(detail, sizeof detail, "%s%s%s", ft->detail,
             fr->injected ? "" : "; not injected: the workload ended first",
             fr->note[0] ? "; " : "");
    if (fr->note[0])
      snprintf(detail + strlen(detail), sizeof detail - strlen(detail), "%s", fr->note);
    if (fr->reload_ms > 0)
      snprintf(detail + strlen(detail), sizeof detail - strlen(detail), "; restarted in %.0f ms",
               fr->reload_ms);
    if (ft->kind == SCN_FAULT_HOT_SWAP && fr->injected) frt_swap_detail(fr, detail, sizeof detail);
    store_fault row = {.run_id = f->c.run_id,
                       .deployment_id = f->c.dep_id,
                       .kind = scenario_fault_kind_name(ft->kind),
                       .target = ft->target[0] ? ft->target : NULL,
                       .detail = detail,
                       .injected_ns = fr->injected           ? fr->injected_ns
                                      : fr->at != UINT64_MAX ? fr->at
                                                             : 0,
                       .detected_ns = fr->detected_ns,
                       .has_detected = fr->detected,
                       .recovered_ns = fr->recovered_ns,
                       .has_recovered = fr->recovered,
                       .affected = fr->injected ? fr->affected : -1};
    int64_t id = 0;
    if (db_ok(f, store_fault_add(f->c.db, &row, &id, &f->err)) && fr->injected)
      fault_windows(f, i, id, end);
  }
  rec_unlock(f->c.rec);
  frt_add_metric(f, "faults_injected", n_injected);
  frt_add_value(f, "detect_ms", detect_ms, "no fault was detected");
  frt_add_value(f, "recover_ms", recover_ms, recover_why);
  frt_add_value(f, "reload_ms", reload_ms, "no lost replica was restarted");
  frt_add_metric(f, "lost_requests", dr->lost);
  frt_add_metric(f, "history_violations",
                 (double)(h.double_done + h.bad_status + h.dup_tokens + h.token_gaps +
                          h.bad_times));
  frt_add_value(f, "kv_leak_blocks", leak, leak_why);
  frt_add_value(f, "kv_leak_frac", leak_frac, frac_why);
  frt_add_value(f, "output_mismatches", dr->mismatches, why);
  int retried = 0, resumed = 0, affected = 0, mixed = 0;
  for (size_t k = 0; k < f->c.reqs->n; k++) {
    const req_rec *q = &f->c.reqs->v[k];
    mixed += q->mixed_versions;
    retried += q->retries > 0;
    resumed += q->resumed > 0;
    affected += !q->warmup && (q->status == REQ_FAILED || q->retries > 0);
  }
  frt_add_metric(f, "fault_affected", affected);
  frt_add_metric(f, "retried_requests", retried);
  frt_add_metric(f, "resumed_requests", resumed);
  frt_add_metric(f, "version_mixes", mixed);
  if (mixed > 0)
    frt_note(f, "%s: %d request%s got tokens from more than one weight version", f->c.dep->label,
             mixed, mixed == 1 ? "" : "s");
  frt_add_metric(f, "unexplained_losses", f->unexplained);
  frt_swap_metrics(f);
  return f->db_status;
}

sc_status fault_rt_end(fault_rt *f, uint64_t end, fault_result *res, sc_error *err) {
  if (!f) return SC_OK;
  sc_status s = judge(f, end, res);
  if (s != SC_OK && err) *err = f->err;
  return s;
}

sc_status fault_rt_after_free(fault_rt *f, sc_error *err) {
  if (!f) return SC_OK;
  frt_stop_supervisor(f);
  for (int i = 0; f->fr && i < f->plan.n; i++)
    if (f->fr[i].exec) frt_exec_reap(f, i, true); // before the count of child processes
  if (!f->faulted || !f->have_before) return SC_OK;
  fv_resources after;
  sc_error e = {{0}};
  if (fv_resources_settled(&f->before, SETTLE_MS, &after, &e) != SC_OK) return SC_OK;
  rec_lock(f->c.rec);
  frt_add_metric(f, "leaked_threads", after.threads - f->before.threads);
  frt_add_metric(f, "leaked_fds", after.fds - f->before.fds);
  frt_add_metric(f, "leaked_processes", after.children - f->before.children);
  rec_unlock(f->c.rec);
  if (after.threads > f->before.threads || after.fds > f->before.fds ||
      after.children > f->before.children)
    frt_note(f, "%s: resources left behind: %+d threads, %+d fds, %+d processes", f->c.dep->label,
             after.threads - f->before.threads, after.fds - f->before.fds,
             after.children - f->before.children);
  if (f->db_status != SC_OK && err) *err = f->err;
  return f->db_status;
}
