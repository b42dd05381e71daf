// Straggler scores (see runtime.h): each replica's recent step durations against its peers'
// (the same load) or, alone, against its own past; a replica above STRAGGLER_ON for PERSIST
// steps in a row is flagged, which detects a slow fault or is said once when none explains it.
#include <stdio.h>
#include <stdlib.h>

#include "faults/kinds.h"
#include "faults/runtime_impl.h"
#include "kernels/util.h"

enum { MAX_PEERS = 64 }; // peers a replica is compared with at most

// Median of the durations hist[from .. to) steps back (0 = the latest).
static uint64_t median_back(const rep_state *rs, int from, int to) {
  uint64_t v[HIST];
  int n = 0;
  for (int b = from; b < to && b < rs->n_hist; b++) v[n++] = rs->hist[(rs->n_hist - 1 - b) % HIST];
  if (n == 0) return 0;
  qsort(v, (size_t)n, sizeof *v, sc_cmp_u64);
  return v[n / 2];
}

void fault_rt_on_step(fault_rt *f, int rep, const engine_step_info *si, uint64_t t) {
  if (!f || !f->faulted || rep >= f->n_rs || si->duration_ns == 0) return;
  rep_state *rs = &f->rs[rep];
  rs->hist[rs->n_hist % HIST] = si->duration_ns;
  rs->n_hist++;
  if (rs->n_hist < MIN_STEPS) return;
  double fast = (double)median_back(rs, 0, FAST), ref = 0;
  // Against its peers when it has some (the same load), else against its own past.
  uint64_t peer[MAX_PEERS];
  int np = 0;
  for (int i = 0; i < f->n_rs && np < MAX_PEERS; i++)
    if (i != rep && f->rs[i].n_hist >= MIN_STEPS) peer[np++] = median_back(&f->rs[i], 0, FAST);
  if (np > 0) {
    qsort(peer, (size_t)np, sizeof *peer, sc_cmp_u64);
    ref = (double)peer[np / 2];
  } else {
    ref = (double)median_back(rs, 2 * FAST, HIST);
  }
  if (ref <= 0) return;
  double score = fast / ref;
  rs->above = score > STRAGGLER_ON ? rs->above + 1 : 0;
  if (!rs->flagged && rs->above >= PERSIST) {
    rs->flagged = true;
    char how[96];
    snprintf(how, sizeof how, "replica%d flagged as a straggler (step time x%.1f)", rep, score);
    int fi = frt_fault_of(f, rep, fk_detected_by(FK_STRAGGLER));
    if (fi >= 0) {
      frt_detect(f, fi, t, how);
    } else if (!rs->told) { // no slow fault explains it: said once, not at every flap
      rs->told = true;
      frt_note(f, "%s: %s; no slow fault explains it (said once per replica)", f->c.dep->label,
               how);
    }
  } else if (rs->flagged && score < STRAGGLER_OFF) {
    rs->flagged = false;
  }
}

void frt_straggler_rearm(fault_rt *f, int rep) {
  if (rep < 0 || rep >= f->n_rs) return;
  f->rs[rep].flagged = false;
  f->rs[rep].above = 0;
}
