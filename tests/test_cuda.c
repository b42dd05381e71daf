// The CUDA backend's host side, on any machine with the CUDA build (no GPU needed): error
// text from failed CUDA / cuBLAS / NCCL calls, and what a user sees when a scenario or an
// engine asks for backend cuda on a machine without a usable GPU. The GPU itself is tested in
// test_cuda_gpu.c. A build without the CUDA backend has nothing here to test: the binary says
// so and exits 77, which ctest reports as skipped.
#ifndef SHARDCHECK_HAVE_CUDA
#include <stdio.h>

int main(void) {
  puts("skipped: this build has no CUDA backend (configure with SHARDCHECK_CUDA=ON)");
  return 77;
}
#else
#include <criterion/criterion.h>
#include <string.h>

#include "config/presets.h"
#include "engine/engine.h"
#include "kernels/comm.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/device.h"
#include "tests/helpers.h"

Test(cuda_errors, a_failed_runtime_call_names_the_call_the_line_and_cuda_s_message) {
  cuda_err e = {{0}};
  cr_assert_eq(cuda_check_rt(cudaErrorMemoryAllocation, "cudaMalloc(&p, bytes)", "k.c", 12, &e),
               SC_OOM, "an allocation failure is out-of-memory, not a device error");
  cr_expect(strstr(e.msg, "cudaMalloc(&p, bytes) (k.c:12): ") == e.msg, "%s", e.msg);
  cr_expect(strstr(e.msg, "cudaErrorMemoryAllocation") != NULL, "%s", e.msg);
  cr_expect(strstr(e.msg, cudaGetErrorString(cudaErrorMemoryAllocation)) != NULL, "%s", e.msg);
  cr_expect_eq(cuda_check_rt(cudaErrorIllegalAddress, "sync", "k.c", 3, &e), SC_DEVICE);
  cr_expect(strstr(e.msg, "cudaErrorIllegalAddress") != NULL, "%s", e.msg);
  cuda_check_rt(cudaErrorIllegalAddress, "sync", "/build/src/kernels/cuda/x.c", 3, &e);
  cr_expect(strstr(e.msg, "sync (kernels/cuda/x.c:3): ") == e.msg, "from kernels/: %s", e.msg);
  cr_expect_eq(cuda_check_rt(cudaErrorLaunchFailure, "x", "k.c", 3, NULL), SC_DEVICE,
               "no error struct: the status alone");
}

Test(cuda_errors, success_is_ok_and_leaves_the_recorded_text_alone) {
  cuda_err e = {{0}};
  strcpy(e.msg, "earlier");
  cr_expect_eq(cuda_check_rt(cudaSuccess, "x", "k.c", 1, &e), SC_OK);
  cr_expect_eq(cuda_check_blas(CUBLAS_STATUS_SUCCESS, "x", "k.c", 1, &e), SC_OK);
  cr_expect_eq(cuda_check_nccl(ncclSuccess, "x", "k.c", 1, &e), SC_OK);
  cr_expect_str_eq(e.msg, "earlier");
}

Test(cuda_errors, cublas_and_nccl_failures_carry_their_library_s_names) {
  cuda_err e = {{0}};
  cr_expect_eq(cuda_check_blas(CUBLAS_STATUS_EXECUTION_FAILED, "cublasSgemm(...)", "d.c", 7, &e),
               SC_DEVICE);
  cr_expect(strstr(e.msg, "cublasSgemm(...) (d.c:7): ") == e.msg, "%s", e.msg);
  cr_expect(strstr(e.msg, "CUBLAS_STATUS_EXECUTION_FAILED") != NULL, "%s", e.msg);
  cr_expect_eq(cuda_check_blas(CUBLAS_STATUS_ALLOC_FAILED, "cublasCreate(&h)", "d.c", 8, &e),
               SC_OOM);
  cr_expect_eq(cuda_check_nccl(ncclUnhandledCudaError, "ncclAllReduce(...)", "c.c", 9, &e),
               SC_DEVICE);
  cr_expect(strstr(e.msg, "ncclAllReduce(...) (c.c:9): ") == e.msg, "%s", e.msg);
  cr_expect(strstr(e.msg, ncclGetErrorString(ncclUnhandledCudaError)) != NULL, "%s", e.msg);
}

Test(cuda_open, is_registered_and_says_what_the_machine_has) {
  cr_expect(device_backend_available("cuda"));
  int n = cuda_device_count();
  cr_assert_geq(n, 0);
  device *d = NULL;
  sc_error err = {{0}};
  if (n == 0) {
    cr_expect_eq(device_open("cuda", 0, &d, &err), SC_DEVICE);
    cr_expect(strstr(err.msg, "no CUDA device is visible") != NULL, "%s", err.msg);
  } else {
    cr_expect_eq(device_open("cuda", n, &d, &err), SC_INVALID, "index past the last GPU");
    cr_expect(strstr(err.msg, "CUDA device") != NULL, "%s", err.msg);
  }
  cr_expect_null(d);
  cr_expect_eq(device_open("cuda", -1, &d, &err), n == 0 ? SC_DEVICE : SC_INVALID);
  cr_expect_null(d);
}

Test(cuda_comm, a_group_of_non_cuda_devices_is_refused_with_a_reason) {
  device *a = NULL, *b = NULL;
  sc_error err = {{0}};
  cr_assert_eq(device_open("cpu", 0, &a, &err), SC_OK);
  cr_assert_eq(device_open("cpu", 0, &b, &err), SC_OK);
  device *devs[2] = {a, b};
  comm_cuda_group *g = NULL;
  cr_expect_eq(comm_cuda_group_new(2, devs, 0, &g, &err), SC_INVALID);
  cr_expect_null(g);
  cr_expect(strstr(err.msg, "cuda") != NULL, "%s", err.msg);
  comm_cuda_group_free(NULL);
  device_free(a);
  device_free(b);
}

Test(cuda_engine, an_engine_without_a_gpu_fails_to_start_with_a_reason) {
  if (cuda_device_count() > 0) cr_skip_test("a GPU is here: test_cuda_gpu runs the engine");
  engine_config c = engine_config_defaults();
  sc_error err = {{0}};
  cr_assert_eq(model_preset_load("llama-tiny", &c.model, &err), SC_OK, "%s", err.msg);
  c.backend = "cuda";
  c.tp = 2;
  c.kv_blocks = 64;
  engine *e = NULL;
  cr_expect_eq(engine_new(&c, &e, &err), SC_DEVICE);
  cr_expect_null(e);
  cr_expect(strstr(err.msg, "no CUDA device is visible") != NULL, "%s", err.msg);
}
#endif
