// The CUDA backend's own products (cuda_kernels.h): the int8 weight-only matmul, the 16-bit
// (bf16, fp16) decode kernel and its groups, and the activations' rounding that cuBLAS's 16-bit
// path multiplies. The f32 and the larger 16-bit products are cuBLAS's (cuda_device.c); shared
// helpers are in cuda_common.cuh.
//
// matmul_bf16, m <= 8 (1 by default: cuBLAS reads the weights faster from 2 rows): one warp
//   per 1, 2 or 4 weight rows, 16-byte loads of 8 bf16 weights, x rounded to bf16 as it is read
//   (cuBLAS's path rounds it into a scratch first), fp32 sums reduced over the warp; fewer rows
//   per warp while there would be under 2,048 warps, so a 1,024-row projection still covers
//   every SM. fp16 weights take the same kernel, x rounded to fp16.
// matmul_q8, m <= 32 (decode batches): a warp kernel for up to 8 rows of x, launched once per
//   8 rows (so q is read ceil(m / 8) times, mostly from L2 after the first). Each warp owns NC
//   output columns (1, 2 or 4, fewer when that would leave under 1024 warps), 8 warps per
//   block. With k a multiple of 16 and 16-byte aligned x and q, each lane loads 16 int8
//   weights of each of its columns at once (one int4) and the matching 16 floats of every row
//   of x (four float4), so q streams once per launch and each x load serves NC columns; else a
//   scalar loop. The dot products are reduced over the warp and scaled once.
// matmul_q8, m > 32 (prefill): 64 x 64 output tiles per block of 256 threads, stepping k by 32:
//   the x tile and the int8 tile (converted to float) go through shared memory (transposed,
//   padded by one column against bank conflicts), and each thread accumulates 4 x 4 outputs
//   strided by 16 in fp32. The scale is applied once per output, as on the CPU's small-m path.
//
// Precision: fp32 sums in another order than the CPU's (about 1e-6 relative); the int8 matmul
// rounds y = v + beta * y as the CPU does (__fmul_rn, __fadd_rn: no FMA contraction).
#include "kernels/cuda/cuda_common.cuh"

namespace {

// Round to nearest even, as the host's dev_f16_from_f32 (the fp16 matmul's activations).
__global__ void to_f16_kernel(size_t n, const float *x, __half *y) {
  for (size_t i = grid_tid(); i < n; i += grid_stride()) y[i] = __float2half_rn(x[i]);
}

// Round to nearest even, as the host's dev_bf16_from_f32 (NaN stays NaN).
__global__ void to_bf16_kernel(size_t n, const float *x, __nv_bfloat16 *y) {
  for (size_t i = grid_tid(); i < n; i += grid_stride()) y[i] = __float2bfloat16_rn(x[i]);
}

// --- int8 weight-only matmul

// y = v + beta * y, not reading y when beta is 0 (the CPU's q8_store, unfused).
__device__ __forceinline__ void q8_out(float *y, float v, float beta) {
  *y = beta == 0.0f ? v : __fadd_rn(v, __fmul_rn(beta, *y));
}

// k == 0: y = beta * y (0 when beta is 0).
__global__ void q8_k0_kernel(size_t n, float beta, float *y) {
  for (size_t i = grid_tid(); i < n; i += grid_stride())
    y[i] = beta == 0.0f ? 0.0f : __fmul_rn(beta, y[i]);
}

// Sign-extended byte c (0..3) of w, as a float.
__device__ __forceinline__ float q8_byte(int w, int c) { return (float)(int8_t)(w >> (8 * c)); }

constexpr int kGemvWarps = 8;       // warps per block
constexpr int kGemvRows = 8;        // rows of x per launch of the warp kernel
constexpr int kGemvMaxM = 32;       // up to this many rows, launches of it (8 rows each)
constexpr int kGemvMinWarps = 1024; // fewer columns per warp while there would be fewer warps

// y[0:M, :] with M <= 8 rows of x: warp w of the grid computes columns NC w .. NC w + NC - 1
// for every row. VEC: k % 16 == 0 and x, q 16-byte aligned, so each lane takes 16 weights of
// each of its NC rows of q (one int4 each) and 16 floats of each row of x (four float4) per
// step; every x load serves NC columns. Else a scalar loop (used with NC = 1).
template <int M, int NC, bool VEC>
__global__ void __launch_bounds__(kGemvWarps * 32)
    q8_gemv_kernel(int n, int k, const float *__restrict__ x, const int8_t *__restrict__ q,
                   const float *__restrict__ scale, float beta, float *y) {
  static_assert(M * NC <= 32, "one lane stores each output");
  const int lane = (int)threadIdx.x % 32;
  const int j0 = ((int)blockIdx.x * kGemvWarps + (int)threadIdx.x / 32) * NC;
  if (j0 >= n) return; // the whole warp leaves together: the shuffles below see full warps
  const int8_t *qr[NC]; // the warp's rows of q; past n the last row again (computed, not stored)
#pragma unroll
  for (int c = 0; c < NC; c++) qr[c] = q + (size_t)(j0 + c < n ? j0 + c : n - 1) * (size_t)k;
  float acc[M][NC];
#pragma unroll
  for (int a = 0; a < M; a++)
#pragma unroll
    for (int c = 0; c < NC; c++) acc[a][c] = 0.0f;
  if constexpr (VEC) {
#pragma unroll(NC == 1 ? 2 : 1) // two steps' loads in flight; NC > 1 has NC rows' already
    for (int i = lane * 16; i < k; i += 32 * 16) {
      float wf[NC][16];
#pragma unroll
      for (int c = 0; c < NC; c++) {
        const int4 qq = *reinterpret_cast<const int4 *>(qr[c] + i);
        const int qw[4] = {qq.x, qq.y, qq.z, qq.w};
#pragma unroll
        for (int b = 0; b < 16; b++) wf[c][b] = q8_byte(qw[b / 4], b % 4);
      }
#pragma unroll
      for (int a = 0; a < M; a++) {
        const float4 *xp = reinterpret_cast<const float4 *>(x + (size_t)a * (size_t)k + i);
        float xf[16];
#pragma unroll
        for (int b = 0; b < 4; b++) {
          const float4 xv = xp[b];
          xf[4 * b] = xv.x;
          xf[4 * b + 1] = xv.y;
          xf[4 * b + 2] = xv.z;
          xf[4 * b + 3] = xv.w;
        }
#pragma unroll
        for (int c = 0; c < NC; c++) {
          float sum = 0.0f;
#pragma unroll
          for (int b = 0; b < 16; b++) sum += xf[b] * wf[c][b];
          acc[a][c] += sum;
        }
      }
    }
  } else {
    for (int i = lane; i < k; i += 32) {
#pragma unroll
      for (int c = 0; c < NC; c++) {
        const float wq = (float)qr[c][i];
#pragma unroll
        for (int a = 0; a < M; a++) acc[a][c] += x[(size_t)a * (size_t)k + i] * wq;
      }
    }
  }
#pragma unroll
  for (int c = 0; c < NC; c++) {
    const int j = j0 + c;
    const float sj = scale[j < n ? j : n - 1];
#pragma unroll
    for (int a = 0; a < M; a++) {
      const float v = warp_sum(acc[a][c]);
      if (lane == a * NC + c && j < n)
        q8_out(y + (size_t)a * (size_t)n + j, __fmul_rn(v, sj), beta);
    }
  }
}

template <int M, int NC, bool VEC>
void q8_gemv_run(cudaStream_t st, int n, int k, const float *x, const int8_t *q,
                 const float *scale, float beta, float *y) {
  const unsigned cols = kGemvWarps * NC; // per block
  const unsigned blocks = (unsigned)(((unsigned)n + cols - 1) / cols);
  q8_gemv_kernel<M, NC, VEC><<<blocks, kGemvWarps * 32, 0, st>>>(n, k, x, q, scale, beta, y);
}

// M rows; columns per warp: 4 from 4 to 7 rows, 2 from 2 and at 8 (where 4 columns would
// take more than 128 registers and spill), fewer while that leaves few warps.
template <int M>
void q8_gemv_launch(cudaStream_t st, int n, int k, const float *x, const int8_t *q,
                    const float *scale, float beta, float *y) {
  if (k % 16 || !aligned16(x) || !aligned16(q)) {
    q8_gemv_run<M, 1, false>(st, n, k, x, q, scale, beta, y);
    return;
  }
  int nc = M >= 4 && M < 8 ? 4 : M >= 2 ? 2 : 1;
  while (nc > 1 && n / nc < kGemvMinWarps) nc /= 2;
  if (nc == 4) q8_gemv_run<M, (M >= 4 && M < 8 ? 4 : 1), true>(st, n, k, x, q, scale, beta, y);
  else if (nc == 2) q8_gemv_run<M, (M >= 2 ? 2 : 1), true>(st, n, k, x, q, scale, beta, y);
  else q8_gemv_run<M, 1, true>(st, n, k, x, q, scale, beta, y);
}

constexpr int kTileM = 64, kTileN = 64, kTileK = 32; // block tile; 4 x 4 outputs per thread
constexpr int kGemmThreads = 256;

// Block (blockIdx.x, blockIdx.y) computes y[m0:m0+64, n0:n0+64]; thread (tx, ty) = (tid % 16,
// tid / 16) its rows m0 + ty + 16 a and columns n0 + tx + 16 b.
__global__ void __launch_bounds__(kGemmThreads)
    q8_gemm_kernel(int m, int n, int k, const float *__restrict__ x,
                   const int8_t *__restrict__ q, const float *__restrict__ scale, float beta,
                   float *y) {
  __shared__ float xs[kTileK][kTileM + 1]; // x tile, transposed: xs[kk][row]
  __shared__ float ws[kTileK][kTileN + 1]; // q tile as float, transposed: ws[kk][col]
  const int tid = (int)threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int m0 = (int)blockIdx.y * kTileM, n0 = (int)blockIdx.x * kTileN;
  float acc[4][4];
#pragma unroll
  for (int a = 0; a < 4; a++)
#pragma unroll
    for (int b = 0; b < 4; b++) acc[a][b] = 0.0f;

  for (int k0 = 0; k0 < k; k0 += kTileK) {
    // 64 x 32 of each, 8 per thread; consecutive threads read consecutive k
#pragma unroll
    for (int it = 0; it < kTileM * kTileK / kGemmThreads; it++) {
      const int idx = tid + it * kGemmThreads;
      const int c = idx % kTileK, rr = idx / kTileK, kc = k0 + c;
      const int gm = m0 + rr, gn = n0 + rr;
      xs[c][rr] = gm < m && kc < k ? x[(size_t)gm * (size_t)k + kc] : 0.0f;
      ws[c][rr] = gn < n && kc < k ? (float)q[(size_t)gn * (size_t)k + kc] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTileK; kk++) {
      float av[4], bv[4];
#pragma unroll
      for (int a = 0; a < 4; a++) av[a] = xs[kk][ty + 16 * a];
#pragma unroll
      for (int b = 0; b < 4; b++) bv[b] = ws[kk][tx + 16 * b];
#pragma unroll
      for (int a = 0; a < 4; a++)
#pragma unroll
        for (int b = 0; b < 4; b++) acc[a][b] += av[a] * bv[b];
    }
    __syncthreads();
  }
#pragma unroll
  for (int a = 0; a < 4; a++) {
    const int row = m0 + ty + 16 * a;
    if (row >= m) continue;
#pragma unroll
    for (int b = 0; b < 4; b++) {
      const int col = n0 + tx + 16 * b;
      if (col < n)
        q8_out(y + (size_t)row * (size_t)n + col, __fmul_rn(acc[a][b], scale[col]), beta);
    }
  }
}

// --- bf16 weights, few rows of x

constexpr int kBfWarps = 4;        // warps per block
constexpr int kBfMaxM = 8;         // rows of x the warp kernel can take
constexpr int kBfRows = 1;         // rows it takes by default: from 2, cuBLAS reads the weights
                                   // faster (65% of an H200's copy bandwidth at 2 to 8 rows,
                                   // against 58% at 2 and 22% at 8 for this kernel)
constexpr int kBfMinWarps = 2048;  // fewer columns per warp while there would be fewer warps

// x rounded to bf16 and back (what cuBLAS multiplies after sck_f32_to_bf16).
__device__ __forceinline__ float bf16_round(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}

// x rounded to the weights' 16-bit format and back: bf16, or fp16 (F16).
template <bool F16> __device__ __forceinline__ float in_round(float v) {
  if constexpr (F16) return __half2float(__float2half_rn(v));
  else return bf16_round(v);
}

// Up to SCK_GROUP_MAX products of one x, as one launch: matrix i takes blocks [blk[i],
// blk[i + 1]) of the grid.
struct bf16_group {
  int count;
  int blk[SCK_GROUP_MAX + 1];
  const uint4 *w[SCK_GROUP_MAX];
  float *y[SCK_GROUP_MAX];
  int n[SCK_GROUP_MAX];
};

// y[0:M, :] = bf16(x) . w^T + beta y for the group's matrix of this block: warp w of its
// blocks computes columns NC w .. NC w + NC - 1 for all M rows. Each lane loads 8 weights of
// each of its NC rows of w at once (one uint4: k % 8 == 0, w and x 16-byte aligned) and the
// matching 8 floats of each row of x (two float4), rounds x to bf16 as cuBLAS's path does, and
// sums in fp32; the warp then reduces each dot product by shuffles. Weights stream once; x
// comes from L1/L2. F16: the weights are IEEE half bits, and x is rounded to fp16 instead.
template <int M, int NC, bool F16>
__global__ void __launch_bounds__(kBfWarps * 32)
    bf16_gemv_kernel(int k, const float *__restrict__ x, bf16_group gr, float beta) {
  static_assert(M * NC <= 32, "one lane stores each output");
  int mi = 0; // constant indices below keep gr in parameter space
#pragma unroll
  for (int i = 1; i < SCK_GROUP_MAX; i++)
    if (i < gr.count && (int)blockIdx.x >= gr.blk[i]) mi = i;
  int n = gr.n[0], b0 = gr.blk[0];
  const uint4 *w = gr.w[0];
  float *y = gr.y[0];
#pragma unroll
  for (int i = 1; i < SCK_GROUP_MAX; i++)
    if (mi == i) n = gr.n[i], b0 = gr.blk[i], w = gr.w[i], y = gr.y[i];
  const int lane = (int)threadIdx.x % 32;
  const int j0 = (((int)blockIdx.x - b0) * kBfWarps + (int)threadIdx.x / 32) * NC;
  if (j0 >= n) return; // the whole warp leaves together
  const int k8 = k / 8;
  const uint4 *wr[NC]; // past n the last row again (computed, not stored)
#pragma unroll
  for (int c = 0; c < NC; c++) wr[c] = w + (size_t)(j0 + c < n ? j0 + c : n - 1) * (size_t)k8;
  float acc[M][NC];
#pragma unroll
  for (int a = 0; a < M; a++)
#pragma unroll
    for (int c = 0; c < NC; c++) acc[a][c] = 0.0f;
#pragma unroll 2 // two steps' loads in flight (four measured slower on an H200)
  for (int i = lane; i < k8; i += 32) {
    uint4 wv[NC];
#pragma unroll
    for (int c = 0; c < NC; c++) wv[c] = __ldg(wr[c] + i);
    float wf[NC][8];
#pragma unroll
    for (int c = 0; c < NC; c++) {
      const unsigned u[4] = {wv[c].x, wv[c].y, wv[c].z, wv[c].w};
#pragma unroll
      for (int e = 0; e < 4; e++) {
        if constexpr (F16) {
          wf[c][2 * e] = __half2float(__ushort_as_half((unsigned short)(u[e] & 0xffffu)));
          wf[c][2 * e + 1] = __half2float(__ushort_as_half((unsigned short)(u[e] >> 16)));
        } else { // bf16 -> f32 is the bits shifted up
          wf[c][2 * e] = __uint_as_float(u[e] << 16);
          wf[c][2 * e + 1] = __uint_as_float(u[e] & 0xffff0000u);
        }
      }
    }
#pragma unroll
    for (int a = 0; a < M; a++) {
      const float4 *xp = reinterpret_cast<const float4 *>(x + (size_t)a * (size_t)k) + 2 * i;
      const float4 x0 = __ldg(xp), x1 = __ldg(xp + 1);
      const float xf[8] = {in_round<F16>(x0.x), in_round<F16>(x0.y), in_round<F16>(x0.z),
                           in_round<F16>(x0.w), in_round<F16>(x1.x), in_round<F16>(x1.y),
                           in_round<F16>(x1.z), in_round<F16>(x1.w)};
#pragma unroll
      for (int c = 0; c < NC; c++)
#pragma unroll
        for (int e = 0; e < 8; e++) acc[a][c] += xf[e] * wf[c][e];
    }
  }
#pragma unroll
  for (int c = 0; c < NC; c++) {
    const int j = j0 + c;
#pragma unroll
    for (int a = 0; a < M; a++) {
      const float v = warp_sum(acc[a][c]);
      if (lane == a * NC + c && j < n) q8_out(y + (size_t)a * (size_t)n + j, v, beta);
    }
  }
}

// Columns per warp: up to 4 (2 from 5 rows, where 4 would spill), fewer while the group would
// have fewer than kBfMinWarps warps (a small n then still spreads over every SM).
template <int M, bool F16>
cudaError_t bf16_gemv_launch(cudaStream_t st, int k, const float *x, bf16_group gr, float beta) {
  int total = 0;
  for (int i = 0; i < gr.count; i++) total += gr.n[i];
  int nc = M <= 4 ? 4 : 2;
  while (nc > 1 && total / nc < kBfMinWarps) nc /= 2;
  const int cols = kBfWarps * nc; // per block
  gr.blk[0] = 0;
  for (int i = 0; i < gr.count; i++) gr.blk[i + 1] = gr.blk[i] + (gr.n[i] + cols - 1) / cols;
  const unsigned blocks = (unsigned)gr.blk[gr.count];
  if (nc == 4) bf16_gemv_kernel<M, (M <= 4 ? 4 : 2), F16><<<blocks, kBfWarps * 32, 0, st>>>(k, x, gr, beta);
  else if (nc == 2) bf16_gemv_kernel<M, 2, F16><<<blocks, kBfWarps * 32, 0, st>>>(k, x, gr, beta);
  else bf16_gemv_kernel<M, 1, F16><<<blocks, kBfWarps * 32, 0, st>>>(k, x, gr, beta);
  return cudaGetLastError();
}

template <bool F16>
cudaError_t bf16_gemv_dispatch(cudaStream_t st, int m, int k, const float *x,
                               const bf16_group &gr, float beta) {
  switch (m) {
  case 1: return bf16_gemv_launch<1, F16>(st, k, x, gr, beta);
  case 2: return bf16_gemv_launch<2, F16>(st, k, x, gr, beta);
  case 3: return bf16_gemv_launch<3, F16>(st, k, x, gr, beta);
  case 4: return bf16_gemv_launch<4, F16>(st, k, x, gr, beta);
  case 5: return bf16_gemv_launch<5, F16>(st, k, x, gr, beta);
  case 6: return bf16_gemv_launch<6, F16>(st, k, x, gr, beta);
  case 7: return bf16_gemv_launch<7, F16>(st, k, x, gr, beta);
  default: return bf16_gemv_launch<8, F16>(st, k, x, gr, beta);
  }
}

} // namespace

extern "C" {

cudaError_t sck_matmul_q8(cudaStream_t st, int m, int n, int k, const float *x, const int8_t *q,
                          const float *scale, float beta, float *y) {
  if (m < 0 || n < 0 || k < 0) return cudaErrorInvalidValue;
  if (m == 0 || n == 0) return cudaSuccess;
  if (k == 0) {
    const size_t ny = (size_t)m * (size_t)n;
    q8_k0_kernel<<<ew_blocks(ny), kEwThreads, 0, st>>>(ny, beta, y);
    return cudaGetLastError();
  }
  if (m <= kGemvMaxM) { // decode batches: the warp kernel, 8 rows of x per launch
    for (int r0 = 0; r0 < m; r0 += kGemvRows) {
      const int mr = m - r0 < kGemvRows ? m - r0 : kGemvRows;
      const float *xr = x + (size_t)r0 * (size_t)k;
      float *yr = y + (size_t)r0 * (size_t)n;
      switch (mr) {
      case 1: q8_gemv_launch<1>(st, n, k, xr, q, scale, beta, yr); break;
      case 2: q8_gemv_launch<2>(st, n, k, xr, q, scale, beta, yr); break;
      case 3: q8_gemv_launch<3>(st, n, k, xr, q, scale, beta, yr); break;
      case 4: q8_gemv_launch<4>(st, n, k, xr, q, scale, beta, yr); break;
      case 5: q8_gemv_launch<5>(st, n, k, xr, q, scale, beta, yr); break;
      case 6: q8_gemv_launch<6>(st, n, k, xr, q, scale, beta, yr); break;
      case 7: q8_gemv_launch<7>(st, n, k, xr, q, scale, beta, yr); break;
      default: q8_gemv_launch<8>(st, n, k, xr, q, scale, beta, yr); break;
      }
      const cudaError_t rc = cudaGetLastError();
      if (rc != cudaSuccess) return rc;
    }
    return cudaSuccess;
  }
  const unsigned gy = (unsigned)((m + kTileM - 1) / kTileM);
  if (gy > 65535u) return cudaErrorInvalidValue; // more than 4M rows
  const dim3 grid((unsigned)((n + kTileN - 1) / kTileN), gy);
  q8_gemm_kernel<<<grid, kGemmThreads, 0, st>>>(m, n, k, x, q, scale, beta, y);
  return cudaGetLastError();
}

int sck_matmul_bf16_small_rows(void) {
  const int v = sck::variants.small_rows;
  return v == 0 ? kBfRows : v < 0 ? 0 : v < kBfMaxM ? v : kBfMaxM;
}

bool sck_matmul_bf16_small_ok(int m, int k, const float *x, const uint16_t *w) {
  return m >= 1 && m <= sck_matmul_bf16_small_rows() && k > 0 && k % 8 == 0 && aligned16(x) &&
         aligned16(w);
}

cudaError_t sck_matmul_bf16_small(cudaStream_t st, int m, int n, int k, const float *x,
                                  const uint16_t *w, float beta, float *y) {
  return sck_matmul_bf16_small_group(st, m, k, x, 1, &w, &n, &y, beta);
}

// The group of 16-bit products behind the bf16 and fp16 launchers.
static cudaError_t small_group(cudaStream_t st, int m, int k, const float *x, int count,
                               const uint16_t *const *w, const int *n, float *const *y,
                               float beta, bool f16) {
  if (m < 0 || k < 0 || count < 1 || count > SCK_GROUP_MAX) return cudaErrorInvalidValue;
  bf16_group gr = {};
  for (int i = 0; i < count; i++) {
    if (n[i] < 0 || !sck_matmul_bf16_small_ok(m, k, x, w[i])) return cudaErrorInvalidValue;
    if (n[i] == 0) continue; // nothing of it to compute
    gr.w[gr.count] = reinterpret_cast<const uint4 *>(w[i]);
    gr.y[gr.count] = y[i];
    gr.n[gr.count] = n[i];
    gr.count++;
  }
  if (m == 0 || gr.count == 0) return cudaSuccess;
  return f16 ? bf16_gemv_dispatch<true>(st, m, k, x, gr, beta)
             : bf16_gemv_dispatch<false>(st, m, k, x, gr, beta);
}

cudaError_t sck_matmul_bf16_small_group(cudaStream_t st, int m, int k, const float *x, int count,
                                        const uint16_t *const *w, const int *n, float *const *y,
                                        float beta) {
  return small_group(st, m, k, x, count, w, n, y, beta, false);
}

cudaError_t sck_matmul_f16_small(cudaStream_t st, int m, int n, int k, const float *x,
                                 const uint16_t *w, float beta, float *y) {
  return small_group(st, m, k, x, 1, &w, &n, &y, beta, true);
}

cudaError_t sck_f32_to_f16(cudaStream_t st, size_t n, const float *x, uint16_t *y) {
  if (n == 0) return cudaSuccess;
  to_f16_kernel<<<ew_blocks(n), kEwThreads, 0, st>>>(n, x, reinterpret_cast<__half *>(y));
  return cudaGetLastError();
}

cudaError_t sck_f32_to_bf16(cudaStream_t st, size_t n, const float *x, uint16_t *y) {
  if (n == 0) return cudaSuccess;
  to_bf16_kernel<<<ew_blocks(n), kEwThreads, 0, st>>>(n, x, reinterpret_cast<__nv_bfloat16 *>(y));
  return cudaGetLastError();
}

} // extern "C"
