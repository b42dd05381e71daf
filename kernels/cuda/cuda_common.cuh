// What the CUDA backend's kernel files share (kernels/cuda/*.cu): grid sizing, warp sums,
// cp.async, the paged cache's slot of a position, and the variants a benchmark or a test chose
// (sck_set_variants). Device helpers only; every kernel and launcher lives in its own file:
// cuda_kernels.cu (norms, RoPE, KV store, elementwise, sum, embedding), cuda_attention.cu,
// cuda_matmul.cu (int8 and 16-bit weights), cuda_sample.cu (greedy and sampled picks).
// docs/design.md places the backend; cuda_kernels.h is the contract.
#pragma once

#include "kernels/cuda/cuda_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <float.h>

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

// The kernels a benchmark or a test asked for in place of the defaults (cuda_kernels.cu).
namespace sck {
extern sck_variants variants;
}

namespace {

constexpr unsigned kFullMask = 0xffffffffu;

// --- helpers

constexpr int kEwThreads = 256;           // block of the grid-stride kernels
constexpr size_t kEwMaxBlocks = 4096;     // their largest grid (a few waves on an H100)
constexpr unsigned kMaxRowBlocks = 65535; // grid of the kernels that stride over rows

// Blocks for a grid-stride loop over n elements (n > 0).
inline unsigned ew_blocks(size_t n) {
  size_t b = (n + kEwThreads - 1) / kEwThreads;
  return (unsigned)(b < kEwMaxBlocks ? b : kEwMaxBlocks);
}

// Blocks for a loop over rows (rows > 0), one block per row up to kMaxRowBlocks.
inline unsigned row_blocks(int rows) {
  return (unsigned)rows < kMaxRowBlocks ? (unsigned)rows : kMaxRowBlocks;
}

// Threads for a block that strides over cols (cols > 0): a multiple of 32, at most max.
inline unsigned row_threads(int cols, unsigned max) {
  unsigned t = ((unsigned)cols + 31u) / 32u * 32u;
  return t < max ? t : max;
}

inline bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

__device__ __forceinline__ size_t grid_tid() {
  return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ size_t grid_stride() { return (size_t)gridDim.x * blockDim.x; }

// Sum over the 32 lanes of a warp; every lane gets the result.
template <typename T> __device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFullMask, v, off);
  return v;
}

// 16 bytes from global to shared memory without passing through registers (sm_80+): the
// copies of a tile are all in flight at once. With valid false the 16 bytes are zero-filled
// and nothing is read.
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's committed groups are still in flight (in order).
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// --- the paged KV cache

// The cache slot of position p of the sequence whose block-table row is bt.
__device__ __forceinline__ size_t kv_slot(const int32_t *bt, int block_size, int32_t p) {
  return (size_t)bt[p / block_size] * (size_t)block_size + (size_t)(p % block_size);
}

} // namespace
