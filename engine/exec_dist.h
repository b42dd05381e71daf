// The step protocol of an executor whose ranks are the processes of an MPI job (internal to
// engine/; engine/executor.c uses it when exec_config.mpi is set, docs/scaling-out.md "A
// replica's ranks as processes"). Rank 0 holds the scheduler: for each step it sends every other rank an order
// (the batch, and the faults queued for that rank since the last step), runs its own shard,
// and collects each rank's result (its status, its device memory, and from the last stage the
// greedy picks or the logits). The others wait for orders, run their shard and answer. A rank
// whose step fails raises an alarm to rank 0 (kernels/mpi.h) with its error line, which ends
// rank 0's waits at once: the step fails with that rank's reason, and the job fails stop.
//
// Everything travels over the job's world group (an mpi comm_group of every rank) as byte
// messages between processes of one build (the job checks that at its start: kernels/mpi.h).
// What a step computes is executor.c's; this file moves its inputs and outputs.
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/executor.h"
#include "kernels/comm.h"
#include "kernels/device.h"
#include "kernels/status.h"

typedef struct exec_dist exec_dist;

// A fault for another rank's process, carried by the next order.
typedef struct dist_fault {
  int rank;  // the rank it is for (never -1: one entry per rank)
  bool link; // a link fault (factor, latency_ns, bandwidth) for every group of the
             // rank; else a device fault (dev)
  dev_fault dev;
  double factor;
  uint64_t latency_ns;
  double bandwidth;
} dist_fault;

// n_ranks of the job, vocab the model's (a follower's logits buffer). SC_OOM or SC_OK.
sc_status exec_dist_new(int n_ranks, int vocab, exec_dist **out);
void exec_dist_free(exec_dist *d); // NULL is a no-op

// Every rank's outcome of building its part (s, err): the first failure in rank order, on every
// rank (its status back, err its line, prefixed with the rank when it is another's); SC_OK
// when every rank built. Collective over the job; waits as long as the slowest rank builds.
sc_status exec_dist_agree(sc_status s, sc_error *err);

// --- rank 0

// Queues f for its rank's next order; any thread.
void exec_dist_queue_fault(exec_dist *d, const dist_fault *f);
// Sends the step's order (b and the faults queued) to every other rank over world (rank 0's
// endpoint). Never blocks; on error err says why.
sc_status exec_dist_send_step(exec_dist *d, comm *world, const exec_batch *b, sc_error *err);
// Tells every other rank to leave its loop (executor_free). Never blocks; errors are ignored
// (a broken job is torn down by its launcher).
void exec_dist_send_quit(exec_dist *d, comm *world);
// Where the results land on rank 0: the layout, and the executor's buffers.
typedef struct dist_sink {
  int tp;                       // TP degree: rank i is tp_rank i % tp
  size_t max_seqs;              // S: picks of TP rank t start at t * S
  int32_t *amax_i;              // (tp, S) greedy picks (token ids)
  float *amax_v;                // (tp, S) their logits
  float *logits;                // (n_want, vocab) or NULL when the step wants tokens
  size_t *mem_used, *mem_total; // (n_ranks) each rank's device memory, as of its answer
} dist_sink;
// Waits for every other rank's answer to the step just sent (each within deadline_ns) and
// puts its picks or logits into the sink. On a rank's alarm (or when one is already pending)
// returns that rank's status with its error line in err; on a deadline SC_TIMEOUT naming the
// rank that did not answer.
sc_status exec_dist_collect(exec_dist *d, comm *world, const dist_sink *sink, uint64_t deadline_ns,
                            sc_error *err);
// Whether a rank has raised an alarm: its status and line into *s and err (rank 0, after its own
// part of a step failed, to report the cause rather than the consequence). Never blocks.
bool exec_dist_take_alarm(comm *world, sc_status *s, sc_error *err);

// --- every other rank

// Waits (however long) for rank 0's next order. *quit: leave the loop; else *b is the step
// (owned by d, valid until the next call) and faults[0..*n_faults) (owned by d) are to be
// applied first. SC_ABORTED when the world group was aborted; another status on a malformed
// order.
sc_status exec_dist_recv_step(exec_dist *d, comm *world, bool *quit, const exec_batch **b,
                              const dist_fault **faults, int *n_faults, sc_error *err);
// Answers a step that ran: picks[0..n_picks) (and their logits) from a last-stage rank that
// picked tokens, logits[0..n_logits) from the last stage's TP rank 0 when the step wanted
// logits, and this rank's device memory.
sc_status exec_dist_send_result(comm *world, const int32_t *picks_i, const float *picks_v,
                                int n_picks, const float *logits, size_t n_logits, size_t mem_used,
                                size_t mem_total);
// Answers a step that failed: an alarm to rank 0 with s and the error line.
void exec_dist_send_alarm(comm *world, sc_status s, const char *msg);
