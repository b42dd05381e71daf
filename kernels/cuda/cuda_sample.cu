// The CUDA backend's picks (cuda_kernels.h): greedy (the first largest logit of a row, and a
// NaN/inf flag) and sampled (sampler_pick's draw, engine/sampler.c). Shared helpers are in
// cuda_common.cuh.
//
// argmax: one block per row; each thread keeps the first largest of its strided elements and
//   whether it saw a NaN or an infinity, then the block reduces (the larger value, the lower
//   column on ties).
// sample: one block of 1,024 threads per row: the same first largest and flag; for a
//   temperature, the probabilities as the host computes them (each rounded to float, the exp in
//   double) written over the logits, their sum, and two bisections over a 64-bit key (the
//   probability's bits, then the id inverted: the host's sort order as one number), each step
//   a block-wide sum of the mass at or above the key: no sort, no scratch.
#include "kernels/cuda/cuda_common.cuh"

namespace {

// One block per row: each thread keeps the first largest of its strided elements and whether
// it saw a NaN or an infinity, then the block reduces (larger value wins, the lower column on
// ties, so the result is the row's first largest, as on the CPU).
constexpr int kArgmaxThreads = 256;

__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_kernel(int n, const float *x, int32_t *idx, float *val) {
  __shared__ float sv[kArgmaxThreads];
  __shared__ int si[kArgmaxThreads];
  __shared__ int sbad[kArgmaxThreads];
  const float *row = x + (size_t)blockIdx.x * (size_t)n;
  float best = -INFINITY;
  int at = n, bad = 0; // at == n: no element yet (every value so far was -inf or NaN)
  for (int j = (int)threadIdx.x; j < n; j += kArgmaxThreads) {
    const float v = row[j];
    bad |= !(fabsf(v) <= FLT_MAX);
    if (v > best || (at == n && v == best)) best = v, at = j;
  }
  sv[threadIdx.x] = best, si[threadIdx.x] = at, sbad[threadIdx.x] = bad;
  __syncthreads();
  for (int w = kArgmaxThreads / 2; w > 0; w >>= 1) {
    if ((int)threadIdx.x < w) {
      const int o = (int)threadIdx.x + w;
      sbad[threadIdx.x] |= sbad[o];
      if (sv[o] > sv[threadIdx.x] || (sv[o] == sv[threadIdx.x] && si[o] < si[threadIdx.x]))
        sv[threadIdx.x] = sv[o], si[threadIdx.x] = si[o];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const int a = si[0] < n ? si[0] : 0;
    idx[blockIdx.x] = sbad[0] ? -1 : a;
    val[blockIdx.x] = row[a];
  }
}

// --- sampling (sck_sample)

constexpr int kSampleThreads = 1024;

// Sum of v over the block, the same bits in every thread (each warp adds the warps' partials in
// the same order). sh: 32 doubles of shared memory, free again when it returns.
__device__ double block_sum(double v, double *sh) {
  const int lane = (int)threadIdx.x % 32, warp = (int)threadIdx.x / 32;
  v = warp_sum(v);
  __syncthreads(); // sh's last use is over
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  return warp_sum(lane < (int)blockDim.x / 32 ? sh[lane] : 0.0);
}

// The order sampler_pick sorts by, as one number: a larger key comes first (probability, then
// the lower id).
__device__ __forceinline__ unsigned long long sample_key(float p, int j) {
  return ((unsigned long long)__float_as_uint(p) << 32) | (unsigned long long)(~(unsigned)j);
}

// The mass of the keys >= k in this block's row: the running sum sampler_pick reaches after the
// last of them.
__device__ double sample_mass(const float *row, int n, unsigned long long k, double *sh) {
  double s = 0.0;
  for (int j = (int)threadIdx.x; j < n; j += (int)blockDim.x) {
    const float p = row[j];
    if (sample_key(p, j) >= k) s += p;
  }
  return block_sum(s, sh);
}

// The largest key k in [lo, ~0] with mass(k) >= t (ge) or > t; mass(lo) must qualify. Mass only
// changes at an element's key, so the answer is an element's key.
__device__ unsigned long long sample_search(const float *row, int n, unsigned long long lo,
                                            double t, bool ge, double *sh) {
  unsigned long long hi = ~0ull;
  while (lo < hi) { // every thread takes the same branch: the mass is the same in all
    const unsigned long long mid = lo + (hi - lo) / 2 + 1;
    const double m = sample_mass(row, n, mid, sh);
    if (ge ? m >= t : m > t) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// One block per row: the first largest logit and a NaN/inf flag; for a temperature > 0 the
// probabilities (written over the logits) and their sum, then two searches over the keys: the
// nucleus's last key, the smallest prefix whose mass reaches top_p x sum; and the first key whose
// running mass passes u x that prefix's mass (the nucleus's last when rounding leaves none).
__global__ void __launch_bounds__(kSampleThreads)
    sample_kernel(int n, float *x, const sck_sample *rows, int32_t *idx) {
  __shared__ double sh[32];
  __shared__ float sv[32];
  __shared__ int si[32], sbad[32];
  const int tid = (int)threadIdx.x, lane = tid % 32, warp = tid / 32;
  float *row = x + (size_t)blockIdx.x * (size_t)n;
  const sck_sample sp = rows[blockIdx.x];
  float best = -INFINITY;
  int at = n, bad = 0; // at == n: no element yet
  for (int j = tid; j < n; j += kSampleThreads) {
    const float v = row[j];
    bad |= !(fabsf(v) <= FLT_MAX);
    if (v > best || (at == n && v == best)) best = v, at = j;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(kFullMask, best, off);
    const int oi = __shfl_xor_sync(kFullMask, at, off), ob = __shfl_xor_sync(kFullMask, bad, off);
    if (ov > best || (ov == best && oi < at)) best = ov, at = oi;
    bad |= ob;
  }
  if (lane == 0) sv[warp] = best, si[warp] = at, sbad[warp] = bad;
  __syncthreads();
  best = sv[0], at = si[0], bad = sbad[0];
  for (int w = 1; w < kSampleThreads / 32; w++) {
    if (sv[w] > best || (sv[w] == best && si[w] < at)) best = sv[w], at = si[w];
    bad |= sbad[w];
  }
  if (bad || !(sp.temperature > 0.0f)) { // every thread read the same: all return here
    if (tid == 0) idx[blockIdx.x] = bad ? -1 : (at < n ? at : 0);
    return;
  }
  double s = 0.0;
  for (int j = tid; j < n; j += kSampleThreads) { // sampler_pick's float expression, exp in double
    const float p = (float)exp((double)__fdiv_rn(__fsub_rn(row[j], best), sp.temperature));
    row[j] = p;
    s += p;
  }
  const double sum = block_sum(s, sh);
  const double top_p = sp.top_p > 0.0f && sp.top_p < 1.0f ? (double)sp.top_p : 1.0;
  const unsigned long long last = sample_search(row, n, 0, top_p * sum, true, sh);
  const double kept = sample_mass(row, n, last, sh), t = sp.u * kept;
  const unsigned long long pick =
      kept > t ? sample_search(row, n, last, t, false, sh) : last;
  if (tid == 0) idx[blockIdx.x] = (int32_t)(~(unsigned)(pick & 0xffffffffull));
}

} // namespace

extern "C" {

cudaError_t sck_sample_rows(cudaStream_t st, int m, int n, float *x, const sck_sample *rows,
                            int32_t *idx) {
  if (m <= 0 || n <= 0) return m < 0 || n < 0 ? cudaErrorInvalidValue : cudaSuccess;
  sample_kernel<<<(unsigned)m, kSampleThreads, 0, st>>>(n, x, rows, idx);
  return cudaGetLastError();
}

cudaError_t sck_argmax(cudaStream_t st, int m, int n, const float *x, int32_t *idx, float *val) {
  if (m <= 0 || n <= 0) return m < 0 || n < 0 ? cudaErrorInvalidValue : cudaSuccess;
  argmax_kernel<<<(unsigned)m, kArgmaxThreads, 0, st>>>(n, x, idx, val);
  return cudaGetLastError();
}

} // extern "C"
