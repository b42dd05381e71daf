// What kernels/mpi.c shares with kernels/comm_mpi.c: the two files that include <mpi.h>, and
// only in a build with MPI (SHARDCHECK_HAVE_MPI).
#pragma once

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/status.h"

// One turn of a polled wait (see mpi.c): spin, then yield, then sleep up to max_sleep_ns.
void sc_mpi_backoff(unsigned turn, uint64_t max_sleep_ns);
// Polls req, sleeping at most max_sleep_ns between polls, until it completes (SC_OK), deadline
// passes (absolute monotonic ns; 0: none; SC_TIMEOUT), stop(ctx) turns true (SC_ABORTED; stop
// may be NULL) or MPI fails (SC_IO). why (cap bytes, may be NULL) says why it did not complete.
// A request left pending stays the caller's.
sc_status sc_mpi_wait(MPI_Request *req, uint64_t deadline, uint64_t max_sleep_ns,
                      bool (*stop)(void *ctx), void *ctx, char *why, size_t cap);
// MPI's text for an error code, into buf.
void sc_mpi_error_text(int code, char *buf, size_t cap);
