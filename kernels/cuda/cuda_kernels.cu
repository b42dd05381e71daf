// The CUDA backend's own kernels (see cuda_kernels.h): the ops of a Llama decoder other than
// the f32 matmul and the bf16 matmul of more than one row (RMSNorm, alone or after the residual
// add, rotate-half RoPE, alone or with the paged KV store, paged causal GQA attention, SwiGLU,
// add, vocab-sharded embedding, the int8 weight-only matmul, decode's bf16 matmul), plus the
// ordered sum and the fill that the loopback communicator and the tests use. Each launcher
// enqueues on the stream it is given and returns cudaGetLastError(); none allocates or
// synchronizes.
//
// Every kernel computes the CPU backend's formula (kernels/cpu/cpu_device.c), with its layouts
// and edge cases, so that the CPU backend is the reference each one is tested against. Design
// of the non-trivial ones:
//
// rmsnorm: one block of 256 threads per row (rows grid-strided). Each thread sums the squares
//   of its strided elements in double, the warps reduce by shuffles and the block through
//   shared memory, and 1 / sqrt(mean + eps) is taken in double, as on the CPU; the scaling is
//   in float, (x * inv) * w. Each element is read and written by the same thread, so y may
//   alias x. add_rmsnorm is the same kernel adding the residual to each element first.
// rope: one block per (token, 8 heads); thread i computes the angle pos * theta^(-2i/head_dim)
//   and its cos and sin in double (as the CPU does), rounds them to float, and rotates the pair
//   (i, i + head_dim/2) of each of the block's heads. The angle is recomputed per block of 8
//   heads rather than staged, which keeps the kernel free of shared memory. rope_kv_store runs
//   the query heads' chunks and the key heads' in one grid; a key block also copies its
//   rotated heads and v's into the token's cache slot.
// kv_store: one block per token (grid-strided), copying its (n_kv_heads, head_dim) K and V rows
//   into the token's slot.
// attention: one block of 256 threads per (token, query head). The threads form groups of LP
//   lanes (4..32, the fewest that cover head_dim with NV vectors of VW floats each: VW = 4
//   when head_dim is a multiple of 4 and the buffers are 16-byte aligned, else 1); a group
//   owns one position at a time and holds its q and running output slices in registers. Per
//   iteration every group takes 4 positions (K and V of all 4 are loaded before any is used,
//   so each thread has 8 loads in flight), reduces the 4 dot products over its lanes with xor
//   shuffles, and folds them into its own online softmax (running max m, sum l, output
//   rescaled by exp(m_old - m_new) when the max grows). At the end the groups' partial
//   (m, l, output) are merged through shared memory with weights exp(m_g - max). Nothing
//   depends on the context length but the trip count, so contexts of any length work. Each
//   token re-reads its own prefix, per query head: the decode path (and prefill's without
//   the tiled kernel's shapes).
// attention, tiled (a batch with a run of >= 16 tokens of one sequence: prefill): one block of
//   256 threads per (64 / G consecutive tokens, KV head), G query heads per KV head, so 64
//   query rows share every K and V read. The block walks the positions in tiles of 64 through
//   shared memory (Q rows, then K, the tile's probabilities, then V over K's space: 85 KB at
//   head_dim 128, two blocks per SM), each thread owning 4 rows' online softmax and a 4 x 4
//   score tile, then 4 rows x head_dim/16 outputs. Tokens of the block from other sequences
//   (tile edges, decode tokens beside a chunk) are taken run by run, the others masked.
// attention, 16-bit tiles (a bf16 model's prefill): the same blocks and runs with 128 query rows
//   and tiles of 32 positions on the tensor cores (mma.m16n8k16, fp16, fp32 sums); the design
//   is at attention_hmma_kernel. The TF32 tiles of attention_mma_kernel stay as a variant.
// matmul_bf16, m <= 8 (1 by default: cuBLAS reads the weights faster from 2 rows): one warp
//   per 1, 2 or 4 weight rows, 16-byte loads of 8 bf16 weights, x rounded to bf16 as it is read
//   (cuBLAS's path rounds it into a scratch first), fp32 sums reduced over the warp; fewer rows
//   per warp while there would be under
//   2,048 warps, so a 1,024-row projection still covers every SM.
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
// sum: the sources' pointers travel in a by-value kernel parameter; each element is summed in
//   source order (acc = s0; acc += s1; ...), exactly as comm_shm's all-reduce does.
//
// Precision: fp32 everywhere, as on the CPU, except the two places where the CPU uses double
// (the rmsnorm mean, the RoPE angles and their cos/sin). expf is CUDA's accurate expf (the
// file must not be built with --use_fast_math). Where the CPU, compiled as ISO C17 (no FP
// contraction), rounds a product before an add, these kernels use __fmul_rn/__fadd_rn so that
// nvcc does not fuse them into an FMA: rmsnorm and RoPE then give the CPU's bits but in rare
// cases (the double sum's order; CUDA's double pow and sincos are within 2 ulp, glibc's within
// 1), SwiGLU agrees to the few ulps of the exp (the CPU's AVX-512 build has its own), and the
// int8 matmul rounds y = v + beta * y as the CPU does. Dot products and softmax sums are taken
// in a different order from the CPU's, so they agree to rounding (about 1e-6 relative of the
// largest output on random data), not bit for bit.
//
// Left to other files: argument checks, the mapping of errors to sc_status, fault hooks and the
// f32 matmul through cuBLAS (kernels/cuda/cuda_device.c); collectives (comm_cuda.c).
#include "kernels/cuda/cuda_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <float.h>

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

namespace {

constexpr unsigned kFullMask = 0xffffffffu;

// --- helpers

constexpr int kEwThreads = 256;           // block of the grid-stride kernels
constexpr size_t kEwMaxBlocks = 4096;     // their largest grid (a few waves on an H100)
constexpr unsigned kMaxRowBlocks = 65535; // grid of the kernels that stride over rows

// Blocks for a grid-stride loop over n elements (n > 0).
unsigned ew_blocks(size_t n) {
  size_t b = (n + kEwThreads - 1) / kEwThreads;
  return (unsigned)(b < kEwMaxBlocks ? b : kEwMaxBlocks);
}

// Blocks for a loop over rows (rows > 0), one block per row up to kMaxRowBlocks.
unsigned row_blocks(int rows) {
  return (unsigned)rows < kMaxRowBlocks ? (unsigned)rows : kMaxRowBlocks;
}

// Threads for a block that strides over cols (cols > 0): a multiple of 32, at most max.
unsigned row_threads(int cols, unsigned max) {
  unsigned t = ((unsigned)cols + 31u) / 32u * 32u;
  return t < max ? t : max;
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

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

// --- rmsnorm

constexpr int kNormThreads = 256;

// y(m,d) = x / sqrt(mean(x^2) + eps) * w; y may alias x (no __restrict__). ADD: x += a(m,d)
// first, each element by the thread that then reads it (sck_add's sum, the same bits).
template <bool ADD>
__global__ void __launch_bounds__(kNormThreads)
    rmsnorm_kernel(int m, int d, const float *a, float *x, const float *w, float eps, float *y) {
  __shared__ double part[kNormThreads / 32]; // one partial sum per warp
  __shared__ float inv_sh;                   // the row's 1 / rms
  const int tid = (int)threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int n_warps = (int)blockDim.x / 32;
  for (int r = (int)blockIdx.x; r < m; r += (int)gridDim.x) {
    float *xr = x + (size_t)r * (size_t)d;
    float *yr = y + (size_t)r * (size_t)d;
    double ss = 0.0;
    for (int i = tid; i < d; i += (int)blockDim.x) {
      float xv = xr[i];
      if constexpr (ADD) {
        xv += a[(size_t)r * (size_t)d + i];
        xr[i] = xv;
      }
      const double v = xv;
      ss += v * v; // exact product of two floats in double: an FMA changes nothing
    }
    ss = warp_sum(ss);
    if (lane == 0) part[warp] = ss;
    __syncthreads();
    if (warp == 0) {
      double t = lane < n_warps ? part[lane] : 0.0;
      t = warp_sum(t);
      if (lane == 0) inv_sh = (float)(1.0 / sqrt(t / d + (double)eps));
    }
    __syncthreads();
    const float inv = inv_sh;
    for (int i = tid; i < d; i += (int)blockDim.x) yr[i] = __fmul_rn(__fmul_rn(xr[i], inv), w[i]);
    __syncthreads(); // part and inv_sh are written again for the next row
  }
}

// --- rope

constexpr int kRopeHeads = 8;      // heads per block (they share the block's angles)
constexpr unsigned kRopeThreads = 128;

// In place on x(m, n_heads, head_dim); block (token, head chunk), thread i < head_dim / 2.
__global__ void __launch_bounds__(kRopeThreads)
    rope_kernel(int m, int n_heads, int head_dim, const int32_t *pos, float theta, float *x) {
  const int half = head_dim / 2;
  const int h0 = (int)blockIdx.y * kRopeHeads;
  const int h1 = h0 + kRopeHeads < n_heads ? h0 + kRopeHeads : n_heads;
  for (int t = (int)blockIdx.x; t < m; t += (int)gridDim.x) {
    const double p = (double)pos[t];
    for (int i = (int)threadIdx.x; i < half; i += (int)blockDim.x) {
      const double inv_freq = pow((double)theta, -2.0 * i / head_dim); // the CPU's expression
      double s, c;
      sincos(p * inv_freq, &s, &c);
      const float cf = (float)c, sf = (float)s;
      for (int h = h0; h < h1; h++) {
        float *xh = x + ((size_t)t * (size_t)n_heads + (size_t)h) * (size_t)head_dim;
        const float x1 = xh[i], x2 = xh[i + half];
        xh[i] = __fsub_rn(__fmul_rn(x1, cf), __fmul_rn(x2, sf));
        xh[i + half] = __fadd_rn(__fmul_rn(x2, cf), __fmul_rn(x1, sf));
      }
    }
  }
}

// --- paged KV cache

// The cache slot of position p of the sequence whose block-table row is bt.
__device__ __forceinline__ size_t kv_slot(const int32_t *bt, int block_size, int32_t p) {
  return (size_t)bt[p / block_size] * (size_t)block_size + (size_t)(p % block_size);
}

constexpr unsigned kKvThreads = 256;

// row = n_kv_heads * head_dim floats per slot; block per token (grid-strided).
__global__ void __launch_bounds__(kKvThreads)
    kv_store_kernel(sck_kv b, int row, const float *__restrict__ k, const float *__restrict__ v,
                    float *__restrict__ kc, float *__restrict__ vc) {
  for (int t = (int)blockIdx.x; t < b.n_tok; t += (int)gridDim.x) {
    const int32_t *bt = b.block_tables + (size_t)b.seq[t] * (size_t)b.max_blocks;
    const size_t slot = kv_slot(bt, b.block_size, b.pos[t]);
    const float *ks = k + (size_t)t * (size_t)row, *vs = v + (size_t)t * (size_t)row;
    float *kd = kc + slot * (size_t)row, *vd = vc + slot * (size_t)row;
    for (int c = (int)threadIdx.x; c < row; c += (int)blockDim.x) {
      kd[c] = ks[c];
      vd[c] = vs[c];
    }
  }
}

// sck_rope_kv_store: blocks (token, chunk of 8 heads) over the query heads' chunks, then the key
// heads'; a key block also writes its rotated heads and the same heads of v into the token's
// cache slot. The rotation is rope_kernel's, expression for expression.
__global__ void __launch_bounds__(kRopeThreads)
    rope_kv_store_kernel(sck_kv b, int n_heads, int n_kv, int head_dim, float theta, float *q,
                         float *k, const float *__restrict__ v, float *__restrict__ kc,
                         float *__restrict__ vc) {
  const int half = head_dim / 2, q_chunks = (n_heads + kRopeHeads - 1) / kRopeHeads;
  const bool is_k = (int)blockIdx.y >= q_chunks;
  const int nh = is_k ? n_kv : n_heads;
  float *x = is_k ? k : q;
  const int h0 = ((int)blockIdx.y - (is_k ? q_chunks : 0)) * kRopeHeads;
  const int h1 = h0 + kRopeHeads < nh ? h0 + kRopeHeads : nh;
  const size_t row = (size_t)n_kv * (size_t)head_dim;
  for (int t = (int)blockIdx.x; t < b.n_tok; t += (int)gridDim.x) {
    const double p = (double)b.pos[t];
    float *kd = nullptr, *vd = nullptr;
    if (is_k) {
      const int32_t *bt = b.block_tables + (size_t)b.seq[t] * (size_t)b.max_blocks;
      const size_t slot = kv_slot(bt, b.block_size, b.pos[t]);
      kd = kc + slot * row;
      vd = vc + slot * row;
    }
    for (int i = (int)threadIdx.x; i < half; i += (int)blockDim.x) {
      const double inv_freq = pow((double)theta, -2.0 * i / head_dim); // the CPU's expression
      double sn, cs;
      sincos(p * inv_freq, &sn, &cs);
      const float cf = (float)cs, sf = (float)sn;
      for (int h = h0; h < h1; h++) {
        float *xh = x + ((size_t)t * (size_t)nh + (size_t)h) * (size_t)head_dim;
        const float x1 = xh[i], x2 = xh[i + half];
        const float y1 = __fsub_rn(__fmul_rn(x1, cf), __fmul_rn(x2, sf));
        const float y2 = __fadd_rn(__fmul_rn(x2, cf), __fmul_rn(x1, sf));
        xh[i] = y1;
        xh[i + half] = y2;
        if (is_k) {
          const size_t c = (size_t)h * (size_t)head_dim;
          const float *vh = v + (size_t)t * row + c;
          kd[c + i] = y1;
          kd[c + i + half] = y2;
          vd[c + i] = vh[i];
          vd[c + i + half] = vh[i + half];
        }
      }
    }
  }
}

// --- attention

constexpr int kAttThreads = 256;
constexpr int kAttUnroll = 4; // positions per group per iteration
constexpr int kAttMaxHeadDim = 256;

struct att_params {
  sck_kv b;
  int n_heads;
  int group;          // query heads per KV head
  int head_dim;
  size_t slot_stride; // floats per cache slot: n_kv_heads * head_dim
  float scale;
  const float *q;     // (n_tok, n_heads, head_dim)
  const float *kc;    // (slots, n_kv_heads, head_dim)
  const float *vc;
  float *out;         // (n_tok, n_heads, head_dim)
};

// Loads VW floats from p (16-byte aligned when VW == 4).
template <int VW> __device__ __forceinline__ void load_vec(const float *p, float (&o)[VW]) {
  if constexpr (VW == 4) {
    const float4 t = *reinterpret_cast<const float4 *>(p);
    o[0] = t.x;
    o[1] = t.y;
    o[2] = t.z;
    o[3] = t.w;
  } else {
#pragma unroll
    for (int c = 0; c < VW; c++) o[c] = p[c];
  }
}

// One block per (token, query head) = blockIdx.x / n_heads, % n_heads. Lane r of a group of LP
// owns the elements (r + LP * i) * VW + c, i < NV, c < VW (those below head_dim).
template <int LP, int NV, int VW>
__global__ void __launch_bounds__(kAttThreads) attention_kernel(att_params a) {
  constexpr int NG = kAttThreads / LP;  // groups per block
  constexpr int E = LP * NV * VW;       // elements a group covers (>= head_dim)
  constexpr int U = kAttUnroll;
  __shared__ float sh_acc[NG * E];      // each group's unnormalized output
  __shared__ float sh_m[NG], sh_l[NG];  // each group's running max and sum
  __shared__ float sh_w[NG];            // each group's weight exp(m_g - max)
  __shared__ float sh_inv;              // 1 / sum of the weighted l

  const int t = (int)(blockIdx.x / (unsigned)a.n_heads);
  const int h = (int)(blockIdx.x % (unsigned)a.n_heads);
  const int hd = a.head_dim;
  const int g = (int)threadIdx.x / LP, r = (int)threadIdx.x % LP;
  const int ctx = a.b.pos[t] + 1; // positions 0..pos
  const int32_t *bt = a.b.block_tables + (size_t)a.b.seq[t] * (size_t)a.b.max_blocks;
  const size_t kv_off = (size_t)(h / a.group) * (size_t)hd;
  const size_t qo_off = ((size_t)t * (size_t)a.n_heads + (size_t)h) * (size_t)hd;

  float qv[NV][VW], acc[NV][VW];
#pragma unroll
  for (int i = 0; i < NV; i++) {
    const int e0 = (r + LP * i) * VW;
#pragma unroll
    for (int c = 0; c < VW; c++) qv[i][c] = acc[i][c] = 0.0f;
    if constexpr (VW == 4) {
      if (e0 < hd) load_vec<VW>(a.q + qo_off + e0, qv[i]);
    } else {
#pragma unroll
      for (int c = 0; c < VW; c++)
        if (e0 + c < hd) qv[i][c] = a.q[qo_off + e0 + c];
    }
  }
  float m_run = -INFINITY, l_run = 0.0f;

  // ctx is the same for the whole block, so every lane runs every shuffle below
  for (int j0 = 0; j0 < ctx; j0 += NG * U) {
    float kr[U][NV][VW], vr[U][NV][VW], s[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int j = j0 + u * NG + g;
#pragma unroll
      for (int i = 0; i < NV; i++)
#pragma unroll
        for (int c = 0; c < VW; c++) kr[u][i][c] = vr[u][i][c] = 0.0f;
      if (j < ctx) {
        const size_t base = kv_slot(bt, a.b.block_size, j) * a.slot_stride + kv_off;
#pragma unroll
        for (int i = 0; i < NV; i++) {
          const int e0 = (r + LP * i) * VW;
          if constexpr (VW == 4) {
            if (e0 < hd) {
              load_vec<VW>(a.kc + base + e0, kr[u][i]);
              load_vec<VW>(a.vc + base + e0, vr[u][i]);
            }
          } else {
#pragma unroll
            for (int c = 0; c < VW; c++)
              if (e0 + c < hd) {
                kr[u][i][c] = a.kc[base + e0 + c];
                vr[u][i][c] = a.vc[base + e0 + c];
              }
          }
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      float d = 0.0f;
#pragma unroll
      for (int i = 0; i < NV; i++)
#pragma unroll
        for (int c = 0; c < VW; c++) d += qv[i][c] * kr[u][i][c];
      s[u] = d;
    }
#pragma unroll
    for (int off = LP / 2; off > 0; off >>= 1)
#pragma unroll
      for (int u = 0; u < U; u++) s[u] += __shfl_xor_sync(kFullMask, s[u], off);

    // the group's online softmax (every lane of a group holds the same scores)
    float mx = m_run;
#pragma unroll
    for (int u = 0; u < U; u++) {
      s[u] = j0 + u * NG + g < ctx ? a.scale * s[u] : -INFINITY;
      mx = fmaxf(mx, s[u]);
    }
    if (mx != -INFINITY) { // else no position of this group yet: nothing to fold
      if (mx > m_run) {    // m_run is -inf at first: exp(-inf) = 0 rescales nothing
        const float corr = expf(m_run - mx);
        l_run *= corr;
#pragma unroll
        for (int i = 0; i < NV; i++)
#pragma unroll
          for (int c = 0; c < VW; c++) acc[i][c] *= corr;
        m_run = mx;
      }
#pragma unroll
      for (int u = 0; u < U; u++) {
        const float pu = expf(s[u] - m_run); // 0 past the token's position
        l_run += pu;
#pragma unroll
        for (int i = 0; i < NV; i++)
#pragma unroll
          for (int c = 0; c < VW; c++) acc[i][c] += pu * vr[u][i][c];
      }
    }
  }

  // merge the groups
  if (r == 0) {
    sh_m[g] = m_run;
    sh_l[g] = l_run;
  }
#pragma unroll
  for (int i = 0; i < NV; i++)
#pragma unroll
    for (int c = 0; c < VW; c++) sh_acc[g * E + (r + LP * i) * VW + c] = acc[i][c];
  __syncthreads();
  if ((int)threadIdx.x < NG) {
    float mx = -INFINITY;
    for (int gg = 0; gg < NG; gg++) mx = fmaxf(mx, sh_m[gg]);
    const float mg = sh_m[threadIdx.x];
    sh_w[threadIdx.x] = mg == -INFINITY ? 0.0f : expf(mg - mx);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float l = 0.0f;
    for (int gg = 0; gg < NG; gg++) l += sh_w[gg] * sh_l[gg];
    sh_inv = l > 0.0f ? 1.0f / l : 0.0f; // l >= 1 whenever pos >= 0
  }
  __syncthreads();
  float *oh = a.out + qo_off;
  for (int e = (int)threadIdx.x; e < hd; e += kAttThreads) {
    float o = 0.0f;
    for (int gg = 0; gg < NG; gg++) o += sh_w[gg] * sh_acc[gg * E + e];
    oh[e] = o * sh_inv;
  }
}

template <int LP, int NV, int VW>
cudaError_t att_launch(cudaStream_t st, unsigned blocks, const att_params &a) {
  static_assert(kAttThreads % LP == 0 && LP <= 32 && (LP & (LP - 1)) == 0, "LP: 1..32, 2^i");
  attention_kernel<LP, NV, VW><<<blocks, kAttThreads, 0, st>>>(a);
  return cudaGetLastError();
}

// --- attention over tiles of query tokens (prefill)

constexpr int kTileRows = 64;       // query rows per block: (token, head of the KV group) pairs
constexpr int kTilePos = 64;        // cache positions per step
constexpr int kTileThreads = 256;   // 16 x 16: thread (ty, tx) = (tid / 16, tid % 16)
constexpr int kTileMinRun = 16;     // the batch's longest run of one sequence that selects it

// Floats of dynamic shared memory: Q rows, one K-or-V tile, the tile's probabilities.
template <int HD> constexpr size_t tile_smem_floats() {
  return (size_t)kTileRows * (HD + 4) + (size_t)kTilePos * (HD + 4) +
         (size_t)kTileRows * (kTilePos + 4);
}

// Block (blockIdx.x, blockIdx.y) = (TQ = 64 / G consecutive tokens from t0, KV head); row r of
// the block is token t0 + r / G, query head kvh * G + r % G. The tokens are taken as runs of
// one sequence (the whole tile in a prefill chunk; one token each in a decode batch): for each
// run the block walks the sequence's positions 0..max pos of the run in tiles of 64 (K, then V,
// through shared memory, read once for all G heads and TQ tokens), with a causal mask per row,
// and keeps each row's online softmax (m, l, output) in registers: thread (ty, tx) owns rows
// 4 ty .. 4 ty + 3, score columns tx + 16 b and output columns 4 tx + 64 c .. + 3.
template <int HD, int G>
__global__ void __launch_bounds__(kTileThreads, 2) attention_tiled_kernel(att_params a) {
  constexpr int TQ = kTileRows / G, QP = HD + 4, PP = kTilePos + 4, NCV = HD / 64;
  static_assert(kTileRows % G == 0 && HD % 64 == 0, "G divides 64; HD is 64 or 128");
  extern __shared__ float4 tile_smem[];
  float *qs = reinterpret_cast<float *>(tile_smem); // [kTileRows][QP]
  float *kv = qs + kTileRows * QP;                  // [kTilePos][QP]
  float *ps = kv + kTilePos * QP;                   // [kTileRows][PP]
  __shared__ int s_seq[TQ], s_pos[TQ];

  const int tid = (int)threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int t0 = (int)blockIdx.x * TQ, kvh = (int)blockIdx.y;
  const int nt = a.b.n_tok - t0 < TQ ? a.b.n_tok - t0 : TQ;
  if (tid < TQ) {
    s_seq[tid] = tid < nt ? a.b.seq[t0 + tid] : -1;
    s_pos[tid] = tid < nt ? a.b.pos[t0 + tid] : -1;
  }
  for (int i = tid; i < kTileRows * HD / 4; i += kTileThreads) {
    const int r = i / (HD / 4), c4 = i % (HD / 4), tl = r / G;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (tl < nt)
      v = *reinterpret_cast<const float4 *>(
          a.q + ((size_t)(t0 + tl) * (size_t)a.n_heads + (size_t)(kvh * G + r % G)) * HD + c4 * 4);
    *reinterpret_cast<float4 *>(qs + r * QP + c4 * 4) = v;
  }
  __syncthreads();

  const size_t kv_off = (size_t)kvh * HD;
  for (int run0 = 0; run0 < nt;) { // every thread walks the same runs (shared values only)
    const int sq = s_seq[run0];
    int run1 = run0 + 1, max_pos = s_pos[run0];
    while (run1 < nt && s_seq[run1] == sq) {
      max_pos = s_pos[run1] > max_pos ? s_pos[run1] : max_pos;
      run1++;
    }
    const int32_t *bt = a.b.block_tables + (size_t)sq * (size_t)a.b.max_blocks;
    // positions j0 .. j0 + 63 of K or V into kv (zeros past max_pos), every copy in flight
    // at once, then waited for by the whole block
    auto load_tile = [&](const float *src, int j0) {
      for (int i = tid; i < kTilePos * HD / 4; i += kTileThreads) {
        const int jj = i / (HD / 4), c4 = i % (HD / 4), j = j0 + jj;
        const bool in = j <= max_pos;
        cp_async16(kv + jj * QP + c4 * 4,
                   in ? src + kv_slot(bt, a.b.block_size, j) * a.slot_stride + kv_off + c4 * 4
                      : src,
                   in);
      }
      cp_async_commit();
      cp_async_wait<0>();
      __syncthreads();
    };
    int rpos[4]; // each owned row's position; -1: the row is not in this run
    float m[4], l[4], o[4][NCV][4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const int tl = (ty * 4 + i) / G;
      rpos[i] = tl >= run0 && tl < run1 ? s_pos[tl] : -1;
      m[i] = -INFINITY;
      l[i] = 0.0f;
#pragma unroll
      for (int c = 0; c < NCV; c++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[i][c][e] = 0.0f;
    }
    for (int j0 = 0; j0 <= max_pos; j0 += kTilePos) {
      __syncthreads(); // the last tile's V and P are no longer read
      load_tile(a.kc, j0);
      float sc[4][4];
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int b = 0; b < 4; b++) sc[i][b] = 0.0f;
#pragma unroll 2
      for (int d = 0; d < HD; d += 4) {
        float4 qv[4], kr[4];
#pragma unroll
        for (int i = 0; i < 4; i++) qv[i] = *reinterpret_cast<const float4 *>(qs + (ty * 4 + i) * QP + d);
#pragma unroll
        for (int b = 0; b < 4; b++) kr[b] = *reinterpret_cast<const float4 *>(kv + (tx + 16 * b) * QP + d);
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
          for (int b = 0; b < 4; b++)
            sc[i][b] += qv[i].x * kr[b].x + qv[i].y * kr[b].y + qv[i].z * kr[b].z + qv[i].w * kr[b].w;
      }
      // each row's online softmax over this tile; a row's 64 scores sit in the 16 lanes of
      // its half-warp (the xor shuffles below stay inside it)
#pragma unroll
      for (int i = 0; i < 4; i++) {
        float mx = m[i];
#pragma unroll
        for (int b = 0; b < 4; b++) {
          const int j = j0 + tx + 16 * b;
          sc[i][b] = j <= rpos[i] ? a.scale * sc[i][b] : -INFINITY; // rpos -1: none
          mx = fmaxf(mx, sc[i][b]);
        }
#pragma unroll
        for (int off = 8; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, off));
        const float corr = mx == -INFINITY ? 1.0f : expf(m[i] - mx); // exp(-inf) = 0 at first
        float sum = 0.0f;
#pragma unroll
        for (int b = 0; b < 4; b++) {
          const float p = sc[i][b] == -INFINITY ? 0.0f : expf(sc[i][b] - mx);
          ps[(ty * 4 + i) * PP + tx + 16 * b] = p;
          sum += p;
        }
#pragma unroll
        for (int off = 8; off > 0; off >>= 1) sum += __shfl_xor_sync(kFullMask, sum, off);
        l[i] = l[i] * corr + sum;
        m[i] = mx;
#pragma unroll
        for (int c = 0; c < NCV; c++)
#pragma unroll
          for (int e = 0; e < 4; e++) o[i][c][e] *= corr;
      }
      __syncthreads(); // K is no longer read; P is written
      load_tile(a.vc, j0);
      const int jn = max_pos - j0 + 1 < kTilePos ? max_pos - j0 + 1 : kTilePos;
      for (int jj = 0; jj < jn; jj += 4) { // columns past jn hold p = 0 and v = 0
        float4 pv[4];
#pragma unroll
        for (int i = 0; i < 4; i++) pv[i] = *reinterpret_cast<const float4 *>(ps + (ty * 4 + i) * PP + jj);
#pragma unroll
        for (int u = 0; u < 4; u++) {
#pragma unroll
          for (int c = 0; c < NCV; c++) {
            const float4 v = *reinterpret_cast<const float4 *>(kv + (jj + u) * QP + tx * 4 + 64 * c);
#pragma unroll
            for (int i = 0; i < 4; i++) {
              const float p = u == 0 ? pv[i].x : u == 1 ? pv[i].y : u == 2 ? pv[i].z : pv[i].w;
              o[i][c][0] += p * v.x;
              o[i][c][1] += p * v.y;
              o[i][c][2] += p * v.z;
              o[i][c][3] += p * v.w;
            }
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
      if (rpos[i] < 0) continue;
      const int r = ty * 4 + i, tl = r / G;
      const float inv = 1.0f / l[i]; // l >= 1: position 0 is in every row's first tile
      float *oh = a.out + ((size_t)(t0 + tl) * (size_t)a.n_heads + (size_t)(kvh * G + r % G)) * HD;
#pragma unroll
      for (int c = 0; c < NCV; c++)
        *reinterpret_cast<float4 *>(oh + tx * 4 + 64 * c) =
            make_float4(o[i][c][0] * inv, o[i][c][1] * inv, o[i][c][2] * inv, o[i][c][3] * inv);
    }
    run0 = run1;
  }
}


// --- attention over tiles of query tokens on the tensor cores (a bf16 model's prefill)

constexpr int kMmaThreads = 128; // 4 warps, 16 query rows each

// x rounded to TF32 (10-bit mantissa, round to nearest, ties away), as the mma takes it.
__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t u;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(x));
  return u;
}

// d (16 x 8, fp32) += a (16 x 8, tf32, row-major) . b (8 x 8, tf32, column-major). Fragments
// (PTX ISA, mma.m16n8k8 .tf32), g = lane / 4, t = lane % 4: a0 (g, t), a1 (g + 8, t),
// a2 (g, t + 4), a3 (g + 8, t + 4); b0 (k = t, n = g), b1 (t + 4, g); d0 (g, 2t), d1 (g, 2t + 1),
// d2 (g + 8, 2t), d3 (g + 8, 2t + 1).
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, "
               "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Shared memory of the tensor-core kernel: Q rows (stride HD + 4, rounded to TF32), one K
// tile (stride HD + 4: a B fragment's 32 lanes read 32 banks) and one V tile (stride HD + 8,
// likewise for its transposed reads), K and V as the cache's fp32 bits (the mma reads their
// top 19: TF32 rounded toward zero).
template <int HD> constexpr size_t mma_smem_words() {
  return (size_t)kTileRows * (HD + 4) + (size_t)kTilePos * (HD + 4) +
         (size_t)kTilePos * (HD + 8);
}

// The tiled kernel's blocks and runs, with the products on the tensor cores in TF32 and fp32
// sums: warp w owns rows 16 w .. 16 w + 15 (Q as A fragments in registers for the whole run),
// computes its 16 x 64 scores with mma (K as B fragments from shared memory), folds them into
// each row's online softmax in registers (a row's values sit in the 4 lanes of one g), moves the
// probabilities from the accumulator layout to A fragments by shuffles, and accumulates
// P . V with mma into 16 x HD outputs. Q, K, V and P are rounded to TF32: about 1e-3 relative,
// the precision of a model whose matmuls round their activations to bf16.
template <int HD, int G>
__global__ void __launch_bounds__(kMmaThreads, 2) attention_mma_kernel(att_params a) {
  constexpr int TQ = kTileRows / G, KP = HD + 4, VP = HD + 8, KS = HD / 8, ND = HD / 8;
  static_assert(kTileRows % G == 0 && HD % 64 == 0, "G divides 64; HD is 64 or 128");
  extern __shared__ float4 mma_smem[];
  uint32_t *qs = reinterpret_cast<uint32_t *>(mma_smem); // [kTileRows][KP]
  uint32_t *ks = qs + kTileRows * KP;                    // [kTilePos][KP]
  uint32_t *vs = ks + kTilePos * KP;                     // [kTilePos][VP]
  __shared__ int s_seq[TQ], s_pos[TQ];

  const int tid = (int)threadIdx.x, lane = tid % 32, w = tid / 32, g = lane / 4, t = lane % 4;
  const int t0 = (int)blockIdx.x * TQ, kvh = (int)blockIdx.y;
  const int nt = a.b.n_tok - t0 < TQ ? a.b.n_tok - t0 : TQ;
  if (tid < TQ) {
    s_seq[tid] = tid < nt ? a.b.seq[t0 + tid] : -1;
    s_pos[tid] = tid < nt ? a.b.pos[t0 + tid] : -1;
  }
  for (int i = tid; i < kTileRows * HD / 4; i += kMmaThreads) {
    const int r = i / (HD / 4), c4 = i % (HD / 4), tl = r / G;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (tl < nt)
      v = *reinterpret_cast<const float4 *>(
          a.q + ((size_t)(t0 + tl) * (size_t)a.n_heads + (size_t)(kvh * G + r % G)) * HD + c4 * 4);
    *reinterpret_cast<uint4 *>(qs + r * KP + c4 * 4) =
        make_uint4(to_tf32(v.x), to_tf32(v.y), to_tf32(v.z), to_tf32(v.w));
  }
  __syncthreads();
  uint32_t qa[KS][4]; // the warp's 16 rows of Q as A fragments, one per 8 columns
  const int r0 = 16 * w + g, r1 = r0 + 8;
#pragma unroll
  for (int kk = 0; kk < KS; kk++) {
    qa[kk][0] = qs[r0 * KP + 8 * kk + t];
    qa[kk][1] = qs[r1 * KP + 8 * kk + t];
    qa[kk][2] = qs[r0 * KP + 8 * kk + t + 4];
    qa[kk][3] = qs[r1 * KP + 8 * kk + t + 4];
  }

  const size_t kv_off = (size_t)kvh * HD;
  const int src_lo = 4 * g + t / 2, src_hi = src_lo + 2; // lanes holding columns t, t + 4
  for (int run0 = 0; run0 < nt;) {
    const int sq = s_seq[run0];
    int run1 = run0 + 1, max_pos = s_pos[run0];
    while (run1 < nt && s_seq[run1] == sq) {
      max_pos = s_pos[run1] > max_pos ? s_pos[run1] : max_pos;
      run1++;
    }
    const int32_t *bt = a.b.block_tables + (size_t)sq * (size_t)a.b.max_blocks;
    const int tl0 = r0 / G, tl1 = r1 / G;
    const int p0 = tl0 >= run0 && tl0 < run1 ? s_pos[tl0] : -1; // -1: not in this run
    const int p1 = tl1 >= run0 && tl1 < run1 ? s_pos[tl1] : -1;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    float o[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    // positions j0 .. j0 + 63 of K or V into dst (zeros past max_pos) as one group of copies;
    // groups complete in order: K(0), then per tile V(j0) and K(j0 + 64) (or an empty group)
    auto load_tile = [&](uint32_t *dst, int stride, const float *src, int j0) {
      for (int i = tid; i < kTilePos * HD / 4; i += kMmaThreads) {
        const int jj = i / (HD / 4), c4 = i % (HD / 4), j = j0 + jj;
        const bool in = j <= max_pos;
        cp_async16(dst + jj * stride + c4 * 4,
                   in ? src + kv_slot(bt, a.b.block_size, j) * a.slot_stride + kv_off + c4 * 4
                      : src,
                   in);
      }
      cp_async_commit();
    };
    load_tile(ks, KP, a.kc, 0);

    for (int j0 = 0; j0 <= max_pos; j0 += kTilePos) {
      load_tile(vs, VP, a.vc, j0); // V is free: the last tile's P . V ended with a barrier
      cp_async_wait<1>();          // K(j0) is in (V(j0) may not be)
      __syncthreads();
      float sc[8][4]; // 8 blocks of 8 positions: rows r0 (0, 1) and r1 (2, 3), columns 2t, 2t + 1
#pragma unroll
      for (int n = 0; n < 8; n++) {
        sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KS; kk++)
          mma_tf32(sc[n], qa[kk], ks[(8 * n + g) * KP + 8 * kk + t],
                   ks[(8 * n + g) * KP + 8 * kk + t + 4]);
      }
      __syncthreads(); // every warp has read K(j0): fetch the next tile's during the rest
      if (j0 + kTilePos <= max_pos) load_tile(ks, KP, a.kc, j0 + kTilePos);
      else cp_async_commit(); // an empty group keeps the count of the wait below
      float mx0 = m0, mx1 = m1;
#pragma unroll
      for (int n = 0; n < 8; n++) {
        const int j = j0 + 8 * n + 2 * t;
        sc[n][0] = j <= p0 ? a.scale * sc[n][0] : -INFINITY;
        sc[n][1] = j + 1 <= p0 ? a.scale * sc[n][1] : -INFINITY;
        sc[n][2] = j <= p1 ? a.scale * sc[n][2] : -INFINITY;
        sc[n][3] = j + 1 <= p1 ? a.scale * sc[n][3] : -INFINITY;
        mx0 = fmaxf(mx0, fmaxf(sc[n][0], sc[n][1]));
        mx1 = fmaxf(mx1, fmaxf(sc[n][2], sc[n][3]));
      }
#pragma unroll
      for (int off = 1; off < 4; off <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(kFullMask, mx0, off));
        mx1 = fmaxf(mx1, __shfl_xor_sync(kFullMask, mx1, off));
      }
      const float c0 = mx0 == -INFINITY ? 1.0f : expf(m0 - mx0);
      const float c1 = mx1 == -INFINITY ? 1.0f : expf(m1 - mx1);
      float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
      for (int n = 0; n < 8; n++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const float mx = e < 2 ? mx0 : mx1;
          sc[n][e] = sc[n][e] == -INFINITY ? 0.0f : expf(sc[n][e] - mx);
        }
        sum0 += sc[n][0] + sc[n][1];
        sum1 += sc[n][2] + sc[n][3];
      }
#pragma unroll
      for (int off = 1; off < 4; off <<= 1) {
        sum0 += __shfl_xor_sync(kFullMask, sum0, off);
        sum1 += __shfl_xor_sync(kFullMask, sum1, off);
      }
      l0 = l0 * c0 + sum0;
      l1 = l1 * c1 + sum1;
      m0 = mx0;
      m1 = mx1;
#pragma unroll
      for (int n = 0; n < ND; n++) {
        o[n][0] *= c0;
        o[n][1] *= c0;
        o[n][2] *= c1;
        o[n][3] *= c1;
      }
      cp_async_wait<1>(); // V(j0) is in (the next K may not be)
      __syncthreads();
#pragma unroll
      for (int n = 0; n < 8; n++) { // positions 8n .. 8n + 7 as the k of P . V
        // P's A fragment: column t of row r0 sits in lane 4g + t/2, element t % 2; column t + 4
        // two lanes further
        const float lo0 = __shfl_sync(kFullMask, sc[n][0], src_lo);
        const float lo1 = __shfl_sync(kFullMask, sc[n][1], src_lo);
        const float lo2 = __shfl_sync(kFullMask, sc[n][2], src_lo);
        const float lo3 = __shfl_sync(kFullMask, sc[n][3], src_lo);
        const float hi0 = __shfl_sync(kFullMask, sc[n][0], src_hi);
        const float hi1 = __shfl_sync(kFullMask, sc[n][1], src_hi);
        const float hi2 = __shfl_sync(kFullMask, sc[n][2], src_hi);
        const float hi3 = __shfl_sync(kFullMask, sc[n][3], src_hi);
        const bool odd = t & 1;
        const uint32_t pa[4] = {to_tf32(odd ? lo1 : lo0), to_tf32(odd ? lo3 : lo2),
                                to_tf32(odd ? hi1 : hi0), to_tf32(odd ? hi3 : hi2)};
#pragma unroll
        for (int nd = 0; nd < ND; nd++)
          mma_tf32(o[nd], pa, vs[(8 * n + t) * VP + 8 * nd + g], vs[(8 * n + t + 4) * VP + 8 * nd + g]);
      }
      __syncthreads(); // every warp has read V(j0)
    }
    cp_async_wait<0>(); // the run's last (empty) group
    // rows of this run: out = o / l (l >= 1: position 0 is in every row's first tile)
    const float inv0 = p0 >= 0 ? 1.0f / l0 : 0.0f, inv1 = p1 >= 0 ? 1.0f / l1 : 0.0f;
    float *oh0 = a.out + ((size_t)(t0 + tl0) * (size_t)a.n_heads + (size_t)(kvh * G + r0 % G)) * HD;
    float *oh1 = a.out + ((size_t)(t0 + tl1) * (size_t)a.n_heads + (size_t)(kvh * G + r1 % G)) * HD;
#pragma unroll
    for (int nd = 0; nd < ND; nd++) {
      if (p0 >= 0)
        *reinterpret_cast<float2 *>(oh0 + 8 * nd + 2 * t) = make_float2(o[nd][0] * inv0, o[nd][1] * inv0);
      if (p1 >= 0)
        *reinterpret_cast<float2 *>(oh1 + 8 * nd + 2 * t) = make_float2(o[nd][2] * inv1, o[nd][3] * inv1);
    }
    run0 = run1;
  }
}

// --- attention over tiles of query tokens in 16-bit on the tensor cores (a bf16 model's prefill)

constexpr int kHmmaWarps = 8;                  // warps per block, 16 query rows each
constexpr int kHmmaThreads = kHmmaWarps * 32;
constexpr int kHmmaRows = kHmmaWarps * 16;     // query rows per block: (token, head) pairs
constexpr int kHmmaPos = 32;                   // cache positions per tile

// lo, hi rounded to nearest fp16 and packed as an mma operand takes them (lo in the low 16
// bits).
__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  return u;
}

// d (16 x 8, fp32) += a (16 x 16, row-major) . b (16 x 8, column-major), in fp16.
// Fragments (PTX ISA, mma.m16n8k16), g = lane / 4, t = lane % 4, two elements per register
// (the lower column or row in the low half): a0 (g, 2t..2t+1), a1 (g + 8, 2t..), a2 (g, 2t + 8..),
// a3 (g + 8, 2t + 8..); b0 (k = 2t..2t+1, n = g), b1 (k = 2t + 8.., n = g); d0, d1 (g, 2t..2t+1),
// d2, d3 (g + 8, 2t..2t+1). The accumulators of two neighbouring n-blocks are thus, rounded,
// the A fragment of their 16 columns: P . V takes the probabilities where Q . K^T left them.
// x saturated to fp16's largest finite value, as `cvt.satfinite` does (NaN and infinities pass:
// a poisoned activation still shows).
__device__ __forceinline__ float f16_sat(float x) {
  return fabsf(x) > 65504.0f && fabsf(x) < INFINITY ? copysignf(65504.0f, x) : x;
}

__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
               "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Dynamic shared memory of the 16-bit kernel, bytes: the fp32 stages of one K and one V tile
// (rows of HD + 4 floats, 16-byte aligned for cp.async), Q (rows of HD + 8 fp16), the tile's K
// (HD + 8 fp16 per position) and its V transposed (kHmmaPos + 8 fp16 per dimension). The
// paddings put the 32 lanes of every fragment read, and of the transposing writes, in 32 banks.
template <int HD> constexpr size_t hmma_smem_bytes() {
  return 2 * (size_t)kHmmaPos * (HD + 4) * 4 + (size_t)kHmmaRows * (HD + 8) * 2 +
         (size_t)kHmmaPos * (HD + 8) * 2 + (size_t)HD * (kHmmaPos + 8) * 2;
}

// The tiled kernels' blocks and runs with 128 query rows per block (8 warps of 16), the
// products on the tensor cores in fp16 with fp32 sums: 10 bits of mantissa, as TF32 keeps
// (bf16's 7 cost Q . K^T's scores enough that a long context's average of V, which cancels,
// missed 1e-2); Q is scaled by scale x log2 e before it is rounded (the scores come out in
// log2 units, for exp2), and Q, K and V beyond fp16's range saturate at 65504 (a model whose
// activations reach that would need bf16). Per tile of 32 positions: the block waits for its
// fp32 stage (cp.async, issued while the last tile was computed), converts it into K
// (row-major) and V (transposed, so that a B fragment is one 32-bit read), issues the next
// tile's copies, and each warp then computes its 16 x 32 scores (Q fragments from shared
// memory), folds them into its rows' online softmax in registers (a row's values sit in the 4
// lanes of one g) and accumulates P . V into 16 x HD outputs. Blocks are taken latest tokens
// first, so that the blocks with the longest prefixes do not start last.
template <int HD, int G>
__global__ void __launch_bounds__(kHmmaThreads, 2) attention_hmma_kernel(att_params a) {
  constexpr int TQ = kHmmaRows / G, SP = HD + 4;
  constexpr int QW = (HD + 8) / 2, KW = (HD + 8) / 2, VW = (kHmmaPos + 8) / 2; // row words
  constexpr int KS = HD / 16, ND = HD / 8, NP = kHmmaPos / 8, KC = kHmmaPos / 16;
  static_assert(kHmmaRows % G == 0 && HD % 64 == 0, "G divides 128; HD is 64 or 128");
  extern __shared__ float4 hmma_smem[];
  float *kst = reinterpret_cast<float *>(hmma_smem); // [kHmmaPos][SP]
  float *vst = kst + kHmmaPos * SP;                   // [kHmmaPos][SP]
  uint32_t *qs = reinterpret_cast<uint32_t *>(vst + kHmmaPos * SP); // [kHmmaRows][QW]
  uint32_t *ks = qs + kHmmaRows * QW;                              // [kHmmaPos][KW]
  uint32_t *vt = ks + kHmmaPos * KW;                               // [HD][VW]
  __shared__ int s_seq[TQ], s_pos[TQ];

  const int tid = (int)threadIdx.x, lane = tid % 32, w = tid / 32, g = lane / 4, t = lane % 4;
  const int t0 = (int)(gridDim.x - 1 - blockIdx.x) * TQ, kvh = (int)blockIdx.y;
  const int nt = a.b.n_tok - t0 < TQ ? a.b.n_tok - t0 : TQ;
  if (tid < TQ) {
    s_seq[tid] = tid < nt ? a.b.seq[t0 + tid] : -1;
    s_pos[tid] = tid < nt ? a.b.pos[t0 + tid] : -1;
  }
  const float sl2 = a.scale * 1.4426950408889634f; // exp(s) = exp2(s log2 e)
  for (int i = tid; i < kHmmaRows * HD / 4; i += kHmmaThreads) {
    const int r = i / (HD / 4), c4 = i % (HD / 4), tl = r / G;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (tl < nt)
      v = *reinterpret_cast<const float4 *>(
          a.q + ((size_t)(t0 + tl) * (size_t)a.n_heads + (size_t)(kvh * G + r % G)) * HD + c4 * 4);
    *reinterpret_cast<uint2 *>(qs + r * QW + c4 * 2) =
        make_uint2(pack_f16(f16_sat(sl2 * v.x), f16_sat(sl2 * v.y)),
                   pack_f16(f16_sat(sl2 * v.z), f16_sat(sl2 * v.w)));
  }
  __syncthreads();

  const size_t kv_off = (size_t)kvh * HD;
  const int r0 = 16 * w + g, r1 = r0 + 8, tl0 = r0 / G, tl1 = r1 / G;
  for (int run0 = 0; run0 < nt;) { // every thread walks the same runs (shared values only)
    const int sq = s_seq[run0];
    int run1 = run0 + 1, max_pos = s_pos[run0];
    while (run1 < nt && s_seq[run1] == sq) {
      max_pos = s_pos[run1] > max_pos ? s_pos[run1] : max_pos;
      run1++;
    }
    const int32_t *bt = a.b.block_tables + (size_t)sq * (size_t)a.b.max_blocks;
    const int p0 = tl0 >= run0 && tl0 < run1 ? s_pos[tl0] : -1; // -1: not in this run
    const int p1 = tl1 >= run0 && tl1 < run1 ? s_pos[tl1] : -1;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    float o[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    // positions j0 .. j0 + kHmmaPos - 1 of K and V into the stages (zeros past max_pos), as
    // one group of copies in flight
    auto stage = [&](int j0) {
      for (int i = tid; i < kHmmaPos * HD / 4; i += kHmmaThreads) {
        const int jj = i / (HD / 4), c4 = i % (HD / 4), j = j0 + jj;
        const bool in = j <= max_pos;
        const size_t off =
            in ? kv_slot(bt, a.b.block_size, j) * a.slot_stride + kv_off + (size_t)c4 * 4 : 0;
        cp_async16(kst + jj * SP + c4 * 4, a.kc + off, in);
        cp_async16(vst + jj * SP + c4 * 4, a.vc + off, in);
      }
      cp_async_commit();
    };
    stage(0);
    for (int j0 = 0; j0 <= max_pos; j0 += kHmmaPos) {
      cp_async_wait<0>();
      __syncthreads(); // the stages hold tile j0; no warp reads the last tile's K or V any more
#pragma unroll 2
      for (int i = tid; i < kHmmaPos * HD / 4; i += kHmmaThreads) { // K: row-major
        const int jj = i / (HD / 4), c4 = i % (HD / 4);
        const float4 v = *reinterpret_cast<const float4 *>(kst + jj * SP + c4 * 4);
        *reinterpret_cast<uint2 *>(ks + jj * KW + c4 * 2) =
            make_uint2(pack_f16(f16_sat(v.x), f16_sat(v.y)), pack_f16(f16_sat(v.z), f16_sat(v.w)));
      }
      // V: fp16, transposed: word (d, p) holds positions 2p (low half) and 2p + 1. A warp's 32
      // words are 8 dimensions x 4 pairs, 32 banks both in the stage and in vt.
#pragma unroll 2
      for (int i = tid; i < HD * kHmmaPos / 2; i += kHmmaThreads) {
        const int rest = i >> 5;
        const int d = (rest % (HD / 8)) * 8 + (i & 7);
        const int p = (rest / (HD / 8)) * 4 + ((i >> 3) & 3);
        vt[d * VW + p] = pack_f16(f16_sat(vst[(2 * p) * SP + d]), f16_sat(vst[(2 * p + 1) * SP + d]));
      }
      __syncthreads(); // K and V of tile j0 are in; the stages are free
      if (j0 + kHmmaPos <= max_pos) stage(j0 + kHmmaPos);

      float sc[NP][4]; // blocks of 8 positions: rows r0 (0, 1) and r1 (2, 3), columns 2t, 2t + 1
#pragma unroll
      for (int n = 0; n < NP; n++) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < KS; kk++) {
        const uint32_t qa[4] = {qs[r0 * QW + 8 * kk + t], qs[r1 * QW + 8 * kk + t],
                                qs[r0 * QW + 8 * kk + t + 4], qs[r1 * QW + 8 * kk + t + 4]};
#pragma unroll
        for (int n = 0; n < NP; n++)
          mma_f16(sc[n], qa, ks[(8 * n + g) * KW + 8 * kk + t], ks[(8 * n + g) * KW + 8 * kk + t + 4]);
      }
      float mx0 = m0, mx1 = m1;
#pragma unroll
      for (int n = 0; n < NP; n++) {
        const int j = j0 + 8 * n + 2 * t;
        sc[n][0] = j <= p0 ? sc[n][0] : -INFINITY;
        sc[n][1] = j + 1 <= p0 ? sc[n][1] : -INFINITY;
        sc[n][2] = j <= p1 ? sc[n][2] : -INFINITY;
        sc[n][3] = j + 1 <= p1 ? sc[n][3] : -INFINITY;
        mx0 = fmaxf(mx0, fmaxf(sc[n][0], sc[n][1]));
        mx1 = fmaxf(mx1, fmaxf(sc[n][2], sc[n][3]));
      }
#pragma unroll
      for (int off = 1; off < 4; off <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(kFullMask, mx0, off));
        mx1 = fmaxf(mx1, __shfl_xor_sync(kFullMask, mx1, off));
      }
      const float c0 = mx0 == -INFINITY ? 1.0f : exp2f(m0 - mx0); // m -inf at first: 0
      const float c1 = mx1 == -INFINITY ? 1.0f : exp2f(m1 - mx1);
      float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
      for (int n = 0; n < NP; n++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const float mx = e < 2 ? mx0 : mx1;
          sc[n][e] = sc[n][e] == -INFINITY ? 0.0f : exp2f(sc[n][e] - mx);
        }
        sum0 += sc[n][0] + sc[n][1];
        sum1 += sc[n][2] + sc[n][3];
      }
#pragma unroll
      for (int off = 1; off < 4; off <<= 1) {
        sum0 += __shfl_xor_sync(kFullMask, sum0, off);
        sum1 += __shfl_xor_sync(kFullMask, sum1, off);
      }
      l0 = l0 * c0 + sum0;
      l1 = l1 * c1 + sum1;
      m0 = mx0;
      m1 = mx1;
#pragma unroll
      for (int n = 0; n < ND; n++) {
        o[n][0] *= c0;
        o[n][1] *= c0;
        o[n][2] *= c1;
        o[n][3] *= c1;
      }
#pragma unroll
      for (int kc = 0; kc < KC; kc++) { // positions 16 kc .. 16 kc + 15 as the k of P . V
        const uint32_t pa[4] = {pack_f16(sc[2 * kc][0], sc[2 * kc][1]),
                                pack_f16(sc[2 * kc][2], sc[2 * kc][3]),
                                pack_f16(sc[2 * kc + 1][0], sc[2 * kc + 1][1]),
                                pack_f16(sc[2 * kc + 1][2], sc[2 * kc + 1][3])};
#pragma unroll
        for (int nd = 0; nd < ND; nd++)
          mma_f16(o[nd], pa, vt[(8 * nd + g) * VW + 8 * kc + t], vt[(8 * nd + g) * VW + 8 * kc + t + 4]);
      }
    }
    // rows of this run: out = o / l (l >= 1: the row's largest term counts exp2(0))
    const float inv0 = p0 >= 0 ? 1.0f / l0 : 0.0f, inv1 = p1 >= 0 ? 1.0f / l1 : 0.0f;
    float *oh0 = a.out + ((size_t)(t0 + tl0) * (size_t)a.n_heads + (size_t)(kvh * G + r0 % G)) * HD;
    float *oh1 = a.out + ((size_t)(t0 + tl1) * (size_t)a.n_heads + (size_t)(kvh * G + r1 % G)) * HD;
#pragma unroll
    for (int nd = 0; nd < ND; nd++) {
      if (p0 >= 0)
        *reinterpret_cast<float2 *>(oh0 + 8 * nd + 2 * t) = make_float2(o[nd][0] * inv0, o[nd][1] * inv0);
      if (p1 >= 0)
        *reinterpret_cast<float2 *>(oh1 + 8 * nd + 2 * t) = make_float2(o[nd][2] * inv1, o[nd][3] * inv1);
    }
    run0 = run1;
  }
}

// The kernels a benchmark or a test asked for in place of the defaults (sck_set_variants).
sck_variants g_variants = {};

// One of the tiled kernels for G query heads per KV head: fp32, or for a bf16 model 16-bit (or,
// as a variant, TF32) on the tensor cores; blocks of (rows / G tokens, KV head), with the
// dynamic shared memory each needs.
template <int HD, int G>
cudaError_t att_tiles_launch(cudaStream_t st, const att_params &a, int n_kv_heads, bool reduced) {
  void (*kernel)(att_params) = attention_tiled_kernel<HD, G>;
  size_t smem = tile_smem_floats<HD>() * sizeof(float);
  int rows = kTileRows, threads = kTileThreads;
  if (reduced && g_variants.attention == SCK_ATT_TF32) {
    kernel = attention_mma_kernel<HD, G>;
    smem = mma_smem_words<HD>() * sizeof(uint32_t);
    threads = kMmaThreads;
  } else if (reduced) {
    kernel = attention_hmma_kernel<HD, G>;
    smem = hmma_smem_bytes<HD>();
    rows = kHmmaRows;
    threads = kHmmaThreads;
  }
  const cudaError_t rc = cudaFuncSetAttribute((const void *)kernel,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (rc != cudaSuccess) return rc;
  const int tq = rows / G;
  const dim3 grid((unsigned)((a.b.n_tok + tq - 1) / tq), (unsigned)n_kv_heads);
  kernel<<<grid, threads, smem, st>>>(a);
  return cudaGetLastError();
}

template <int HD>
cudaError_t att_tiles(cudaStream_t st, const att_params &a, int n_kv_heads, bool reduced) {
  switch (a.group) {
  case 1: return att_tiles_launch<HD, 1>(st, a, n_kv_heads, reduced);
  case 2: return att_tiles_launch<HD, 2>(st, a, n_kv_heads, reduced);
  case 4: return att_tiles_launch<HD, 4>(st, a, n_kv_heads, reduced);
  default: return att_tiles_launch<HD, 8>(st, a, n_kv_heads, reduced);
  }
}

// --- elementwise

// out = silu(gate) * up = gate / (1 + exp(-gate)) * up; out may alias gate or up.
__global__ void swiglu_kernel(size_t n, const float *gate, const float *up, float *out) {
  for (size_t i = grid_tid(); i < n; i += grid_stride()) {
    const float g = gate[i];
    out[i] = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), up[i]);
  }
}

// y += a; a may alias y.
__global__ void add_kernel(size_t n, const float *a, float *y) {
  for (size_t i = grid_tid(); i < n; i += grid_stride()) y[i] += a[i];
}

__global__ void fill_kernel(size_t n, float value, float *x) {
  for (size_t i = grid_tid(); i < n; i += grid_stride()) x[i] = value;
}

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

// Round to nearest even, as the host's dev_f16_from_f32 (the fp16 matmul's activations).
__global__ void to_f16_kernel(size_t n, const float *x, __half *y) {
  for (size_t i = grid_tid(); i < n; i += grid_stride()) y[i] = __float2half_rn(x[i]);
}

// Round to nearest even, as the host's dev_bf16_from_f32 (NaN stays NaN).
__global__ void to_bf16_kernel(size_t n, const float *x, __nv_bfloat16 *y) {
  for (size_t i = grid_tid(); i < n; i += grid_stride()) y[i] = __float2bfloat16_rn(x[i]);
}

struct sum_srcs {
  const float *p[SCK_SUM_MAX]; // the first n_src are the sources
};

// dst = ((s0 + s1) + s2) + ...; dst may alias a source (each element is read, then written, by
// the same thread).
__global__ void sum_kernel(size_t n, int n_src, sum_srcs s, float *dst) {
  for (size_t i = grid_tid(); i < n; i += grid_stride()) {
    float acc = s.p[0][i];
#pragma unroll
    for (int j = 1; j < SCK_SUM_MAX; j++) // constant indices: s stays in parameter space
      if (j < n_src) acc += s.p[j][i];
    dst[i] = acc;
  }
}

constexpr unsigned kEmbThreads = 256;

// out row i = table[ids[i] - row0] when that is in [0, rows), zeros otherwise.
__global__ void __launch_bounds__(kEmbThreads)
    embedding_kernel(int m, int d, const int32_t *ids, const float *__restrict__ table, int row0,
                     int rows, float *__restrict__ out) {
  for (int i = (int)blockIdx.x; i < m; i += (int)gridDim.x) {
    const int64_t r = (int64_t)ids[i] - row0;
    float *o = out + (size_t)i * (size_t)d;
    if (r >= 0 && r < rows) {
      const float *src = table + (size_t)r * (size_t)d;
      for (int c = (int)threadIdx.x; c < d; c += (int)blockDim.x) o[c] = src[c];
    } else {
      for (int c = (int)threadIdx.x; c < d; c += (int)blockDim.x) o[c] = 0.0f;
    }
  }
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

// --- launchers

extern "C" {

cudaError_t sck_rmsnorm(cudaStream_t st, int m, int d, const float *x, const float *w, float eps,
                        float *y) {
  if (m < 0 || d < 0) return cudaErrorInvalidValue;
  if (m == 0 || d == 0) return cudaSuccess;
  rmsnorm_kernel<false><<<row_blocks(m), kNormThreads, 0, st>>>(m, d, nullptr, const_cast<float *>(x), w, eps, y);
  return cudaGetLastError();
}

cudaError_t sck_add_rmsnorm(cudaStream_t st, int m, int d, const float *a, float *x,
                            const float *w, float eps, float *y) {
  if (m < 0 || d < 0) return cudaErrorInvalidValue;
  if (m == 0 || d == 0) return cudaSuccess;
  rmsnorm_kernel<true><<<row_blocks(m), kNormThreads, 0, st>>>(m, d, a, x, w, eps, y);
  return cudaGetLastError();
}

cudaError_t sck_rope(cudaStream_t st, int m, int n_heads, int head_dim, const int32_t *pos,
                     float theta, float *x) {
  if (m < 0 || n_heads < 0 || head_dim < 0 || head_dim % 2) return cudaErrorInvalidValue;
  if (m == 0 || n_heads == 0 || head_dim == 0) return cudaSuccess;
  const dim3 grid(row_blocks(m), (unsigned)((n_heads + kRopeHeads - 1) / kRopeHeads));
  rope_kernel<<<grid, row_threads(head_dim / 2, kRopeThreads), 0, st>>>(m, n_heads, head_dim,
                                                                          pos, theta, x);
  return cudaGetLastError();
}

cudaError_t sck_kv_store(cudaStream_t st, const sck_kv *b, int n_kv_heads, int head_dim,
                         const float *k, const float *v, float *kc, float *vc) {
  if (!b || b->n_tok < 0 || n_kv_heads < 0 || head_dim < 0) return cudaErrorInvalidValue;
  const size_t row = (size_t)n_kv_heads * (size_t)head_dim;
  if (b->n_tok == 0 || row == 0) return cudaSuccess;
  if (row > (size_t)INT32_MAX || b->block_size <= 0) return cudaErrorInvalidValue;
  kv_store_kernel<<<row_blocks(b->n_tok), row_threads((int)row, kKvThreads), 0, st>>>(
      *b, (int)row, k, v, kc, vc);
  return cudaGetLastError();
}

cudaError_t sck_rope_kv_store(cudaStream_t st, const sck_kv *b, int n_heads, int n_kv_heads,
                              int head_dim, float theta, float *q, float *k, const float *v,
                              float *kc, float *vc) {
  if (!b || b->n_tok < 0 || n_heads < 0 || n_kv_heads < 0 || head_dim < 0 || head_dim % 2)
    return cudaErrorInvalidValue;
  if (b->n_tok == 0 || head_dim == 0 || n_heads + n_kv_heads == 0) return cudaSuccess;
  if (b->block_size <= 0 || (size_t)n_kv_heads * (size_t)head_dim > (size_t)INT32_MAX)
    return cudaErrorInvalidValue;
  const int chunks = (n_heads + kRopeHeads - 1) / kRopeHeads + (n_kv_heads + kRopeHeads - 1) / kRopeHeads;
  const dim3 grid(row_blocks(b->n_tok), (unsigned)chunks);
  rope_kv_store_kernel<<<grid, row_threads(head_dim / 2, kRopeThreads), 0, st>>>(
      *b, n_heads, n_kv_heads, head_dim, theta, q, k, v, kc, vc);
  return cudaGetLastError();
}

cudaError_t sck_attention(cudaStream_t st, const sck_kv *b, int n_heads, int n_kv_heads,
                          int head_dim, float scale, const float *q, const float *kc,
                          const float *vc, float *out) {
  if (!b || b->n_tok < 0 || n_heads < 0 || n_kv_heads <= 0 || head_dim < 0 ||
      head_dim > kAttMaxHeadDim || n_heads % n_kv_heads)
    return cudaErrorInvalidValue;
  if (b->n_tok == 0 || n_heads == 0 || head_dim == 0) return cudaSuccess;
  const size_t blocks = (size_t)b->n_tok * (size_t)n_heads;
  if (blocks > (size_t)INT32_MAX || b->block_size <= 0) return cudaErrorInvalidValue;
  att_params a;
  a.b = *b;
  a.n_heads = n_heads;
  a.group = n_heads / n_kv_heads;
  a.head_dim = head_dim;
  a.slot_stride = (size_t)n_kv_heads * (size_t)head_dim;
  a.scale = scale;
  a.q = q;
  a.kc = kc;
  a.vc = vc;
  a.out = out;
  const unsigned nb = (unsigned)blocks;
  const bool vec = head_dim % 4 == 0 && aligned16(q) && aligned16(kc) && aligned16(vc) &&
                   aligned16(out);
  if (b->max_run >= kTileMinRun && vec && (head_dim == 64 || head_dim == 128) &&
      (a.group == 1 || a.group == 2 || a.group == 4 || a.group == 8))
    return head_dim == 64 ? att_tiles<64>(st, a, n_kv_heads, b->tf32 != 0)
                          : att_tiles<128>(st, a, n_kv_heads, b->tf32 != 0);
  if (vec) {
    const int n4 = head_dim / 4; // float4s per row: 1..64
    if (n4 <= 4) return att_launch<4, 1, 4>(st, nb, a);
    if (n4 <= 8) return att_launch<8, 1, 4>(st, nb, a);
    if (n4 <= 16) return att_launch<16, 1, 4>(st, nb, a);
    if (n4 <= 32) return att_launch<32, 1, 4>(st, nb, a);
    return att_launch<32, 2, 4>(st, nb, a);
  }
  if (head_dim <= 4) return att_launch<4, 1, 1>(st, nb, a);
  if (head_dim <= 8) return att_launch<8, 1, 1>(st, nb, a);
  if (head_dim <= 16) return att_launch<16, 1, 1>(st, nb, a);
  if (head_dim <= 32) return att_launch<32, 1, 1>(st, nb, a);
  if (head_dim <= 64) return att_launch<32, 2, 1>(st, nb, a);
  if (head_dim <= 128) return att_launch<32, 4, 1>(st, nb, a);
  return att_launch<32, 8, 1>(st, nb, a);
}

cudaError_t sck_swiglu(cudaStream_t st, int m, int d, const float *gate, const float *up,
                       float *out) {
  if (m < 0 || d < 0) return cudaErrorInvalidValue;
  const size_t n = (size_t)m * (size_t)d;
  if (n == 0) return cudaSuccess;
  swiglu_kernel<<<ew_blocks(n), kEwThreads, 0, st>>>(n, gate, up, out);
  return cudaGetLastError();
}

cudaError_t sck_add(cudaStream_t st, size_t n, const float *a, float *y) {
  if (n == 0) return cudaSuccess;
  add_kernel<<<ew_blocks(n), kEwThreads, 0, st>>>(n, a, y);
  return cudaGetLastError();
}

cudaError_t sck_embedding(cudaStream_t st, int m, int d, const int32_t *ids, const float *table,
                          int row0, int rows, float *out) {
  if (m < 0 || d < 0) return cudaErrorInvalidValue;
  if (m == 0 || d == 0) return cudaSuccess;
  embedding_kernel<<<row_blocks(m), row_threads(d, kEmbThreads), 0, st>>>(m, d, ids, table,
                                                                           row0, rows, out);
  return cudaGetLastError();
}

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
  const int v = g_variants.small_rows;
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

cudaError_t sck_sum(cudaStream_t st, size_t n, int n_src, const float *const *srcs, float *dst) {
  if (n == 0) return cudaSuccess;
  if (n_src < 1 || n_src > SCK_SUM_MAX || !srcs) return cudaErrorInvalidValue;
  sum_srcs s = {};
  for (int i = 0; i < n_src; i++) s.p[i] = srcs[i];
  sum_kernel<<<ew_blocks(n), kEwThreads, 0, st>>>(n, n_src, s, dst);
  return cudaGetLastError();
}

cudaError_t sck_fill(cudaStream_t st, size_t n, float value, float *x) {
  if (n == 0) return cudaSuccess;
  fill_kernel<<<ew_blocks(n), kEwThreads, 0, st>>>(n, value, x);
  return cudaGetLastError();
}

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

void sck_set_variants(const sck_variants *v) { g_variants = v ? *v : sck_variants{}; }

sck_variants sck_get_variants(void) { return g_variants; }

cudaError_t sck_f32_to_bf16(cudaStream_t st, size_t n, const float *x, uint16_t *y) {
  if (n == 0) return cudaSuccess;
  to_bf16_kernel<<<ew_blocks(n), kEwThreads, 0, st>>>(n, x, reinterpret_cast<__nv_bfloat16 *>(y));
  return cudaGetLastError();
}

} // extern "C"
