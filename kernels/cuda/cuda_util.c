// The CUDA backend's error text (cuda_backend.h): one line per failed CUDA, cuBLAS or NCCL call,
// naming the call, its file and line, and the library's own message.
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/cuda_backend.h"

// file is __FILE__, which the build gives as an absolute path: the text keeps it from the
// project's kernels/ directory on.
static sc_status record(sc_status s, const char *call, const char *file, int line,
                        const char *what, cuda_err *e) {
  const char *rel = strstr(file, "kernels/");
  if (e) snprintf(e->msg, sizeof e->msg, "%s (%s:%d): %s", call, rel ? rel : file, line, what);
  return s;
}

sc_status cuda_check_rt(cudaError_t rc, const char *call, const char *file, int line,
                        cuda_err *e) {
  if (rc == cudaSuccess) return SC_OK;
  char what[192];
  snprintf(what, sizeof what, "%s (%s)", cudaGetErrorString(rc), cudaGetErrorName(rc));
  return record(rc == cudaErrorMemoryAllocation ? SC_OOM : SC_DEVICE, call, file, line, what, e);
}

sc_status cuda_check_blas(cublasStatus_t rc, const char *call, const char *file, int line,
                          cuda_err *e) {
  if (rc == CUBLAS_STATUS_SUCCESS) return SC_OK;
  char what[192];
  snprintf(what, sizeof what, "%s (%s)", cublasGetStatusString(rc), cublasGetStatusName(rc));
  return record(rc == CUBLAS_STATUS_ALLOC_FAILED ? SC_OOM : SC_DEVICE, call, file, line, what, e);
}

sc_status cuda_check_nccl(ncclResult_t rc, const char *call, const char *file, int line,
                          cuda_err *e) {
  if (rc == ncclSuccess) return SC_OK;
  char what[192];
  snprintf(what, sizeof what, "%s (ncclResult %d)", ncclGetErrorString(rc), (int)rc);
  return record(SC_DEVICE, call, file, line, what, e);
}

int cuda_device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError(); // no driver or no device: not sticky, clear it
    return 0;
  }
  return n;
}
