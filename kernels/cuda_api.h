// The CUDA backend as the rest of shardcheck reaches it: a table of entry points, loaded on
// first use from the backend's own shared library (libshardcheck_cuda.so, built from
// kernels/cuda/ when SHARDCHECK_CUDA is on).
//
// Why a library loaded at run time rather than linked in: cuBLAS and NCCL cost every process
// that links them about 0.1 s and 95 MB of private memory at start-up, before any GPU is
// touched, and a binary linked to them does not start at all where the CUDA runtime is not
// installed. shardcheck starts a process per CLI call and per worker replica, and most runs
// use the CPU backend or the simulator, so only a run that opens a cuda device pays for CUDA.
//
// Where the library is looked for: $SHARDCHECK_CUDA_LIBRARY if set, else beside the running
// executable (a build tree), else the installed library directory (kernels/paths.h:
// BIN/../lib/shardcheck), else the dynamic linker's search path.
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "kernels/comm.h"
#include "kernels/device.h"
#include "kernels/status.h"

#define SC_CUDA_API_VERSION 2
#define SC_CUDA_LIBRARY "libshardcheck_cuda.so"

typedef struct cuda_api {
  int version; // SC_CUDA_API_VERSION of the library's build
  int (*device_count)(void); // GPUs the CUDA runtime sees: 0 without a GPU or a driver
  sc_status (*device_open)(int index, device **out, sc_error *err);
  // kernels/comm.h, cuda section
  sc_status (*group_new)(int n_ranks, device *const *devs, uint64_t deadline_ns,
                         comm_cuda_group **out, sc_error *err);
  comm *(*group_rank)(comm_cuda_group *g, int r);
  const char *(*group_transport)(const comm_cuda_group *g);
  void (*group_abort)(comm_cuda_group *g);
  void (*group_free)(comm_cuda_group *g);
  void (*group_set_slow)(comm_cuda_group *g, double factor, uint64_t latency_ns,
                         double bandwidth);
  const char *(*group_error)(comm_cuda_group *g);
  // ranks as processes (kernels/comm.h): one member's endpoint, NCCL's id broadcast by bcast
  sc_status (*group_new_member)(int n_ranks, int self, device *dev, uint64_t deadline_ns,
                                comm_cuda_bcast_fn bcast, void *ud, comm_cuda_group **out,
                                sc_error *err);
  int (*group_self)(const comm_cuda_group *g);
} cuda_api;

// The table, loading the library on the first call (thread-safe; later calls return the same
// answer). NULL when it cannot be loaded, with err saying which file and why.
const cuda_api *cuda_api_get(sc_error *err);

// What the library exports: its table (the one symbol cuda_api_get looks up).
const cuda_api *shardcheck_cuda_api(void);
