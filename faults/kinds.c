// The fault runtime's table of fault kinds (see kinds.h): one row per kind, and the small
// functions that are each kind's own: its detail line, its chaos draw, what it asks of a
// replica. What a kind does that is larger lives in its file and the row points there
// (inject.c: cancel storms, clock jumps, commands; hot_swap.c: hot swaps).
//
// Left to others: parsing a kind (scenarios/scenario_faults.c), planning (timeline.c),
// injecting (inject.c), detecting (runtime.c), judging (judge.c).
#include "faults/kinds.h"

#include <stdio.h>
#include <string.h>

#include "faults/runtime_impl.h"

// --- details: one line for the fault table

static void detail_kill(ft_fault *f, const char *dur) {
  (void)dur;
  snprintf(f->detail, sizeof f->detail, "%s", f->what);
}

static void detail_hang(ft_fault *f, const char *dur) {
  (void)dur;
  if (f->duration_ns)
    snprintf(f->detail, sizeof f->detail, "%s, resume after %.3f s", f->what,
             (double)f->duration_ns / 1e9);
  else
    snprintf(f->detail, sizeof f->detail, "%s, no resume", f->what);
}

static void detail_slow(ft_fault *f, const char *dur) {
  if (!strcmp(f->what, "rank")) {
    snprintf(f->detail, sizeof f->detail, "rank x%g%s", f->factor, dur);
    return;
  }
  char parts[64] = "";
  size_t n = 0;
  if (f->factor > 1) n += (size_t)snprintf(parts + n, sizeof parts - n, " x%g", f->factor);
  if (f->latency_ns && n < sizeof parts)
    n += (size_t)snprintf(parts + n, sizeof parts - n, " +%.0f us", (double)f->latency_ns / 1e3);
  if (f->bandwidth > 0 && n < sizeof parts)
    snprintf(parts + n, sizeof parts - n, " cap %.3g B/s", f->bandwidth);
  snprintf(f->detail, sizeof f->detail, "link%s%s", parts, dur);
}

static void detail_cancel_storm(ft_fault *f, const char *dur) {
  (void)dur;
  const int all = SCN_STAGE_QUEUED | SCN_STAGE_PREFILL | SCN_STAGE_DECODE;
  char st[32];
  snprintf(st, sizeof st, "%s%s%s", f->stages & SCN_STAGE_QUEUED ? "queued " : "",
           f->stages & SCN_STAGE_PREFILL ? "prefill " : "",
           f->stages & SCN_STAGE_DECODE ? "decode " : "");
  if (st[0]) st[strlen(st) - 1] = 0;
  if (f->count)
    snprintf(f->detail, sizeof f->detail, "%d in-flight requests (%s)", f->count,
             f->stages == all ? "any stage" : st);
  else
    snprintf(f->detail, sizeof f->detail, "%g of in-flight requests (%s)", f->fraction,
             f->stages == all ? "any stage" : st);
}

static void detail_hot_swap(ft_fault *f, const char *dur) {
  (void)dur;
  snprintf(f->detail, sizeof f->detail, "model %.40s dtype %s",
           f->src->swap_model[0] ? f->src->swap_model : "(same)",
           f->src->swap_dtype[0] ? f->src->swap_dtype : "(same)");
}

static void detail_clock_jump(ft_fault *f, const char *dur) {
  (void)dur;
  snprintf(f->detail, sizeof f->detail, "%+.3f s", (double)f->src->offset_ns / 1e9);
}

static void detail_oom(ft_fault *f, const char *dur) {
  snprintf(f->detail, sizeof f->detail, "%s after %d allocs%s", f->what, f->after_allocs, dur);
}

static void detail_corrupt(ft_fault *f, const char *dur) {
  snprintf(f->detail, sizeof f->detail, "%s%s", f->what, dur);
}

static void detail_exec(ft_fault *f, const char *dur) {
  (void)dur;
  snprintf(f->detail, sizeof f->detail, "%.120s", f->src->exec_command);
}

// --- chaos draws: the parameters of a drawn fault (the kind, time and replica are drawn)

static void draw_kill(ft_fault *f, uint64_t *x, int rank) {
  if (ft_below(x, 2)) {
    snprintf(f->what, sizeof f->what, "gpu");
    f->rank = rank;
  } else {
    snprintf(f->what, sizeof f->what, "replica");
  }
}

static void draw_hang(ft_fault *f, uint64_t *x, int rank) {
  (void)rank;
  snprintf(f->what, sizeof f->what, "replica");
  f->duration_ns = 1000000000ull + ft_below(x, 2000000001ull); // resume after 1..3 s
}

static void draw_slow(ft_fault *f, uint64_t *x, int rank) {
  (void)x;
  snprintf(f->what, sizeof f->what, "rank");
  f->rank = rank;
  f->factor = 3;
  f->duration_ns = 5000000000ull;
}

static void draw_cancel_storm(ft_fault *f, uint64_t *x, int rank) {
  (void)x, (void)rank;
  f->fraction = 0.5;
}

static void draw_oom(ft_fault *f, uint64_t *x, int rank) {
  (void)x, (void)rank;
  snprintf(f->what, sizeof f->what, "transient");
}

static void draw_corrupt(ft_fault *f, uint64_t *x, int rank) {
  (void)x, (void)rank;
  snprintf(f->what, sizeof f->what, "nan");
  f->duration_ns = 1000000000ull;
}

// --- delivery: what a fault asks of its replicas (out comes in as a clear of its rank)

static void deliver_kill(const ft_fault *ft, bool end, replica_fault *out) {
  if (!end) out->kind = !strcmp(ft->what, "gpu") ? RFAULT_KILL_RANK : RFAULT_KILL;
}

static void deliver_hang(const ft_fault *ft, bool end, replica_fault *out) {
  out->kind = end ? RFAULT_RESUME : !strcmp(ft->what, "rank") ? RFAULT_HANG_RANK : RFAULT_HANG;
}

static void deliver_slow(const ft_fault *ft, bool end, replica_fault *out) {
  if (end) return;
  out->kind = !strcmp(ft->what, "rank") ? RFAULT_SLOW_RANK : RFAULT_SLOW_LINK;
  out->factor = ft->factor;
  out->latency_ns = ft->latency_ns;
  out->bandwidth = ft->bandwidth;
}

static void deliver_oom(const ft_fault *ft, bool end, replica_fault *out) {
  if (end) return;
  out->kind = RFAULT_OOM;
  out->after_allocs = ft->after_allocs;
  out->persistent = !strcmp(ft->what, "persistent");
}

static void deliver_corrupt(const ft_fault *ft, bool end, replica_fault *out) {
  if (end) return;
  out->kind = RFAULT_CORRUPT;
  out->bitflip = !strcmp(ft->what, "bitflip");
}

// --- every loop turn

static void tick_clock_jump(fault_rt *f, int fi, uint64_t now) {
  if (!f->fr[fi].detected && !f->fr[fi].note[0]) frt_clock_check(f, fi, now);
}

// --- the table

// clang-format off
static const fk_row rows[SCN_FAULT_N] = {
    [SCN_FAULT_KILL] = {.symptoms = FK_LOST, .chaos_replica = true, .detail = detail_kill,
                        .draw = draw_kill, .deliver = deliver_kill},
    [SCN_FAULT_HANG] = {.symptoms = FK_LOST, .chaos_replica = true, .detail = detail_hang,
                        .draw = draw_hang, .deliver = deliver_hang},
    [SCN_FAULT_SLOW] = {.symptoms = FK_STRAGGLER, .chaos_replica = true, .detail = detail_slow,
                        .draw = draw_slow, .deliver = deliver_slow},
    [SCN_FAULT_CANCEL_STORM] = {.detail = detail_cancel_storm, .draw = draw_cancel_storm,
                                .act = frt_cancel_storm},
    [SCN_FAULT_HOT_SWAP] = {.supervisor = true, .detail = detail_hot_swap,
                            .act = frt_swap_begin, .tick = frt_swap_tick},
    [SCN_FAULT_CLOCK_JUMP] = {.detail = detail_clock_jump, .act = frt_clock_jump,
                              .tick = tick_clock_jump},
    [SCN_FAULT_OOM] = {.symptoms = FK_OOM, .chaos_replica = true, .detail = detail_oom,
                       .draw = draw_oom, .deliver = deliver_oom},
    [SCN_FAULT_CORRUPT] = {.symptoms = FK_NUMERICAL, .chaos_replica = true,
                           .detail = detail_corrupt, .draw = draw_corrupt,
                           .deliver = deliver_corrupt},
    [SCN_FAULT_CHAOS] = {.expanded = true}, // timeline.c draws its faults into the plan
    [SCN_FAULT_EXEC] = {.symptoms = FK_LOST, .detail = detail_exec, .act = frt_exec_start},
};
// clang-format on

const fk_row *fk_of(scn_fault_kind k) { return (unsigned)k < SCN_FAULT_N ? &rows[k] : NULL; }

unsigned fk_detected_by(unsigned symptoms) {
  unsigned kinds = 0;
  for (int k = 0; k < SCN_FAULT_N; k++)
    if (rows[k].symptoms & symptoms) kinds |= 1u << k;
  return kinds;
}
