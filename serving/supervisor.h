// The supervisor: a thread that does the replicas' blocking jobs, a restart (replica_restart)
// or a swap of weights (replica_swap), one at a time, while its owner's loop goes on with the
// other replicas. The fault runtime (faults/supervisor.c) and shardcheck serve's loop
// (server/loop.c) each start one for a deployment's replicas; both hold a replica busy in the
// router while its job runs, so nothing else touches it (docs/design.md, "Seams").
//
// The thread lives as long as the replicas: a worker process dies with the thread that started
// it (PR_SET_PDEATHSIG), and a restarted worker is started by this thread.
#pragma once

#include <stdbool.h>

#include "engine/engine.h"
#include "kernels/status.h"
#include "serving/replica.h"

typedef struct supervisor supervisor;

// Starts the thread for reps[0..n) (reps outlives it). notify (optional) is called on the
// thread with ud after each job (shardcheck serve wakes its loop with it). *out is NULL and
// SC_OOM comes back when the thread or memory cannot be had.
sc_status sup_new(replica *const *reps, int n, void (*notify)(void *ud), void *ud,
                  supervisor **out);
// Asks for a job on replica i: a swap to swap_cfg (it outlives the job), or a restart when
// swap_cfg is NULL. The caller leaves replica i alone until sup_done says the job ended.
void sup_ask(supervisor *s, int i, const engine_config *swap_cfg);
// True once the job last asked for replica i has ended; then its status and error in *st and
// *err (either may be NULL). The caller's thread; never blocks.
bool sup_done(supervisor *s, int i, sc_status *st, sc_error *err);
// Drops the jobs not begun, waits for the one running, ends the thread. NULL is a no-op.
void sup_free(supervisor *s);
