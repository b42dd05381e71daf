// What the CUDA backend's C files share (kernels/cuda/): turning a failed CUDA, cuBLAS or NCCL
// call into an sc_status plus one line of text, and reaching a cuda device's GPU and stream
// from its `device` handle (the communicators order their copies after the rank's work).
//
// Every CUDA, cuBLAS and NCCL call in the backend goes through one of the CU_CHECK macros
// below, so a failure always says which call, where, and the library's own message, e.g.
//   cudaMemcpyAsync (kernels/cuda/cuda_device.c:212): an illegal memory access was encountered
// Allocation failures (cudaErrorMemoryAllocation, CUBLAS_STATUS_ALLOC_FAILED) map to SC_OOM,
// everything else to SC_DEVICE.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
// nccl.h declares a few functions with () rather than (void): not our warning to fix.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#include <stddef.h>

#include "kernels/device.h"
#include "kernels/status.h"

// One recorded failure: the status it maps to and its line of text.
typedef struct cuda_err {
  char msg[384];
} cuda_err;

// Each returns SC_OK for success; otherwise fills e (when not NULL) with
// "CALL (FILE:LINE): MESSAGE" and returns SC_OOM or SC_DEVICE.
sc_status cuda_check_rt(cudaError_t rc, const char *call, const char *file, int line,
                        cuda_err *e);
sc_status cuda_check_blas(cublasStatus_t rc, const char *call, const char *file, int line,
                          cuda_err *e);
sc_status cuda_check_nccl(ncclResult_t rc, const char *call, const char *file, int line,
                          cuda_err *e);

#define CU_CHECK(e, call) cuda_check_rt((call), #call, __FILE__, __LINE__, (e))
#define CUBLAS_CHECK(e, call) cuda_check_blas((call), #call, __FILE__, __LINE__, (e))
#define NCCL_CHECK(e, call) cuda_check_nccl((call), #call, __FILE__, __LINE__, (e))
// Returns the status from the enclosing function when the call failed.
#define CU_TRY(e, call) SC_TRY(CU_CHECK(e, call))
#define CUBLAS_TRY(e, call) SC_TRY(CUBLAS_CHECK(e, call))
#define NCCL_TRY(e, call) SC_TRY(NCCL_CHECK(e, call))

// The GPUs the CUDA runtime sees: 0 when there is none or no driver (never an error).
int cuda_device_count(void);

// Opens GPU index as a `device` of backend "cuda" (device_open reaches it through
// kernels/cuda_api.h).
sc_status device_cuda_open(int index, device **out, sc_error *err);

// For a device opened with backend "cuda" (kernels/cuda/cuda_device.c): its GPU index and the
// stream every op of it runs on. NULL / -1 for any other device.
cudaStream_t cuda_device_stream(device *d);
int cuda_device_gpu(const device *d);

// Graphs the backend has recorded in this process, over every device (tests check that a run
// that should replay graphs recorded some, and one with SHARDCHECK_CUDA_GRAPHS=0 none).
long cuda_graphs_recorded(void);
