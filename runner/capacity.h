// Capacity planning by simulation (`shardcheck capacity`, docs/capacity.md): for each GPU kind
// and every tp x pp x dp layout the planner admits up to a GPU count, the highest request
// rate whose SLOs hold, found by bracketing and bisecting the rate of simulated runs from the
// target rate (capacity.c, search_layout); then the cheapest
// layout that serves a target rate, and the runner-up.
//
// Each probe is a whole runner_run of the scenario in mode sim with one deployment (the layout)
// on the kind's profile, every rate phase at the probed rate, at a recording level below tokens
// (default summary), into a scratch in-memory database. The search is deterministic: the same
// scenario, seed and options give the same points, with any number of worker processes
// (capacity_options.jobs: forked, each searching every jobs-th layout) or MPI ranks on any
// number of hosts (capacity_options.mpi, docs/scaling-out.md). Storing a search (reports/store.h,
// store_capacity_add) and its report (reports/report.h) are the caller's.
#pragma once

#include <stdbool.h>
#include <stdio.h>

#include "kernels/status.h"
#include "reports/store.h"
#include "scenarios/scenario.h"

enum { CAP_MAX_KINDS = 8 };

typedef struct capacity_kind {
  char name[256];           // hardware profile name (or .yaml path)
  int max_gpus;             // layouts of at most this many GPUs
  double cost_per_gpu_hour; // > 0
} capacity_kind;

typedef struct capacity_options {
  capacity_kind kinds[CAP_MAX_KINDS];
  int n_kinds;             // 0: the scenario's profile with hardware.gpus GPUs, cost 1
  double target_rate;      // requests/s to serve; 0: the scenario's first rate phase's rate
  double rate_lo, rate_hi; // the search range (requests/s); 0: target / 8 and target x 4
  int iters;               // probes per layout, less 2 (default 6): what bracketing leaves bisects
  scn_record record;       // the probes' level (default summary; tokens is allowed)
  FILE *progress;          // a line per layout (NULL: none)
  double error;            // the interval's relative half-width; < 0: each kind's profile's
                           // (its engine block's `error`, or the idealized engine's documented
                           // one: sim_engine_error); 0: no interval
  int jobs;                // worker processes searching layouts at once (<= 1: none, this process);
                           // the result is the same for any count
  bool saturation;         // the knee rule (docs/capacity.md): a probe past the knee counts as
                           // failing, so no later probe of the layout goes above it; false: off
  double sat_gain;         // a probe's output tok/s no longer rises when it is below the best
                           // lower-rate probe's x their rates' ratio / (1 + gain) (0.05) ...
  double sat_ttft;         // ... while its TTFT p95 is past this x the lowest-rate probe's (3)
  bool mpi;                // the processes of this MPI job share the layouts instead (rank r
                           // searches every size-th from r; kernels/mpi.h, MPI initialised):
                           // rank 0 gets the whole result, the same as one process's; every
                           // other rank an empty one (n_layouts 0). Collective over the job.
} capacity_options;

capacity_options capacity_options_defaults(void);

typedef struct capacity_result {
  double target_rate, rate_lo, rate_hi;
  int iters;
  store_cap_layout *layouts; // (n_layouts) every layout searched, kinds in order given
  int n_layouts;
  store_cap_point *points; // (n_points) every probe, in the order simulated
  int n_points;
  int best, runner_up; // layout indexes (-1 none): the cheapest serving target_rate
  char note[1024];     // the recommendation and why the runner-up lost, or the refusal
                       // naming the best layout found
  char slo[512];       // the SLOs as text
  char costs[256];     // the costs as text
} capacity_result;

// Searches s (a sim scenario with SLOs and only rate phases; it is copied, never changed).
// SC_INVALID with a message naming the file when s cannot be searched (no SLO, a ramp phase,
// mode real, a kind with no layout that fits, a bad range); SC_OK otherwise, also when no
// layout serves the target (out->best is then -1 and out->note says why). Free with
// capacity_result_free (also after an error).
sc_status capacity_search(const scenario *s, const capacity_options *o, capacity_result *out,
                          sc_error *err);
void capacity_result_free(capacity_result *r);
