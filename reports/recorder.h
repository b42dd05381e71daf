// The recorder: writes a run's high-volume rows (requests with their token times, engine steps,
// device samples) to the results database from a thread of its own, so the event loop never
// waits on SQLite while tokens are arriving (a stall there would show up in every token stamp).
//
// Rows are copied into a queue and written in order, in batched transactions (reports/store.h);
// past 64 MiB queued, a new row waits for the writer (a simulation outruns SQLite).
// Anything else the runner writes (run, deployment, phase rows, metrics, verdicts) goes straight
// to the store between rec_lock and rec_unlock, which keeps the writer off the connection.
// Write errors are kept and returned by rec_drain; rows after an error are dropped. Step rows
// go to the store up to 256 at a time (a step_block row each): requests and samples queued
// among them are written as they come, so one queued after a step that fails may be in.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "kernels/status.h"
#include "reports/store.h"

typedef struct recorder recorder;

// Starts the writer thread for db (db must outlive the recorder). On error *out is NULL.
sc_status rec_new(store *db, recorder **out, sc_error *err);
// Drains the queue, stops the thread. NULL is a no-op.
void rec_free(recorder *r);

// Queue a row; strings and token times are copied. Never blocks on SQLite.
void rec_request(recorder *r, const store_request *q, const uint64_t *token_ns, int n_tokens);
void rec_step(recorder *r, const store_step *st);
void rec_sample(recorder *r, const store_device_sample *d);
// Asks the writer to commit what it has written (a periodic flush).
void rec_flush(recorder *r);
// Waits until every queued row is written and committed; returns the first error (then err).
sc_status rec_drain(recorder *r, sc_error *err);

// The most bytes the queue held at once (it holds at most 64 MiB and a row, then a new row waits
// for the writer).
size_t rec_queue_peak_bytes(recorder *r);

// Exclusive use of the store for direct writes (the writer waits meanwhile).
void rec_lock(recorder *r);
void rec_unlock(recorder *r);
