// The fault runtime's table of fault kinds: one row per scn_fault_kind with what the runtime
// does with it (docs/design.md, "The tables"). The scenario language's row of the same kind
// (its key, what it takes, its parse) is scenarios/scenario_faults.c's, on the floor below;
// both are indexed by scn_fault_kind and test_tables fails when either lacks a row.
//
// A row: how the plan describes a fault, how a chaos draw fills one in, how it reaches a
// replica (a replica_fault) or what it does itself instead, what it does every loop turn, and
// which symptoms detect it. Internal to faults/.
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "faults/runtime.h"
#include "faults/timeline.h"
#include "serving/replica.h"

// Symptoms that detect a fault of the kind (faults/runtime.c, straggler.c).
enum {
  FK_LOST = 1,      // a replica lost (its death, a request failed as replica_lost)
  FK_OOM = 2,       // a request failed with oom, or the replica turned unhealthy
  FK_NUMERICAL = 4, // a request failed with NaN/inf logits
  FK_STRAGGLER = 8, // a replica's steps score as a straggler's
};

typedef struct fk_row {
  unsigned symptoms;  // FK_* that detect it (0: detected by its own behaviour, or never)
  bool chaos_replica; // a chaos draw of it aims at a replica (not kept alive)
  bool supervisor;    // it needs the supervisor thread in mode real (a hot swap's loads)
  bool expanded;      // never planned as it is: the plan holds what it draws (chaos)
  // The plan's one-line detail (ft_fault.detail), from the fault as planned; dur is
  // " for 1.500 s" when it has a duration, else "".
  void (*detail)(ft_fault *f, const char *dur);
  // A chaos draw's own parameters (what, rank, duration, ...) from the draw's generator x
  // (ft_below); rank is the rank drawn for it. NULL: chaos never draws it.
  void (*draw)(ft_fault *f, uint64_t *x, int rank);
  // What a fault asks of its replicas at its start (end false) or its end: *out comes in as a
  // clear of rank ft->rank. NULL: it reaches no replica (act does what it does).
  void (*deliver)(const ft_fault *ft, bool end, replica_fault *out);
  // Begins a fault that does not go to replicas (a cancel storm, a hot swap, a clock jump, a
  // command): it has no end. NULL: it goes to replicas.
  void (*act)(fault_rt *f, int fi, uint64_t now);
  // Every loop turn once the fault is injected (optional).
  void (*tick)(fault_rt *f, int fi, uint64_t now);
} fk_row;

// The row of kind k (static); NULL outside the enum.
const fk_row *fk_of(scn_fault_kind k);
// The kinds (bits 1 << scn_fault_kind) that the symptoms detect.
unsigned fk_detected_by(unsigned symptoms);
