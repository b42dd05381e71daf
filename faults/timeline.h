// The fault timeline of one deployment: the scenario's `faults:` list made concrete for that
// deployment (targets resolved to a replica and rank that exist in it, chaos schedules drawn
// from the seed), in the order they will be injected.
//
// Mode-agnostic: a planned fault says what happens, when and where; the runner injects it
// through the replica handle (serving/replica.h), which every execution (local, process, sim)
// implements in its own way. Not here: injection, detection and the verdicts (faults/
// verdict.h), the scenario's syntax (scenarios/scenario_faults.c); each kind's detail line and
// chaos draw are its row's in faults/kinds.c.
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "kernels/status.h"
#include "scenarios/scenario.h"

typedef struct ft_fault {
  scn_fault_kind kind;    // never SCN_FAULT_CHAOS: chaos items are replaced by their draws
  const scn_fault *src;   // the scenario's item (a chaos draw points at its chaos item)
  int phase;              // >= 0: at_ns counts from the start of this workload phase (index
                          // into scenario.workload.phases); -1: from the deployment's start
  uint64_t at_ns;         // when, from the origin above
  uint64_t duration_ns;   // how long it lasts (0: until the deployment ends); hang: resume_after
  int replica;            // target replica; -1: none or every replica (cancel_storm, hot_swap
                          // without a target, slow link without a target)
  int rank;               // target rank within the replica; -1: the whole replica
  char what[16];          // the kind's value: gpu | replica | rank | link | transient | ...
  double factor;          // slow
  uint64_t latency_ns;    // slow link
  double bandwidth;       // slow link
  double fraction;        // cancel_storm (0 when count)
  int count;              // cancel_storm
  int stages;             // cancel_storm: SCN_STAGE_* mask
  int after_allocs;       // oom
  char target[48];        // as shown in the fault table: "replica0.rank1", "replica1", ""
  char detail[128];       // one line for the fault table: "gpu", "factor 3 for 5.000 s", ...
} ft_fault;

typedef struct ft_plan {
  ft_fault *v; // (n) sorted by (phase, at_ns), ties in the scenario's order
  int n;
  int skipped;        // scenario faults that name a replica or rank this deployment lacks
  char skipped_why[160]; // the first of them, one line
} ft_plan;

// How many times the deployment runs: tp x pp x dp when a fault targets every-rank (each run
// aims that fault at one rank, in order replica0.rank0, replica0.rank1, ...), else 1.
int ft_sweeps(const scenario *s, const scn_deployment *d);
// "replica0.rank1" for sweep i of d (buf of cap bytes); "" when ft_sweeps is 1.
void ft_sweep_label(const scn_deployment *d, int sweep, char *buf, size_t cap);

// Uniform in [0, n) from the seeded generator x of a chaos draw (0 when n is 0).
uint64_t ft_below(uint64_t *x, uint64_t n);

// Builds the plan of deployment d for sweep number `sweep` (0 .. ft_sweeps - 1), drawing chaos
// schedules from seed (the same seed, scenario and deployment always give the same plan).
// *out owns its array (ft_plan_free). SC_OOM only.
sc_status ft_plan_build(const scenario *s, const scn_deployment *d, int sweep, uint64_t seed,
                        ft_plan *out, sc_error *err);
void ft_plan_free(ft_plan *p); // and resets *p; NULL is a no-op
