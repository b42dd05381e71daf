// The CUDA backend's own kernels (see cuda_kernels.h), this file: RMSNorm, alone or after the
// residual add, rotate-half RoPE, alone or with the paged KV store, the KV store, SwiGLU, add,
// vocab-sharded embedding, the ordered sum and the fill that the loopback communicator and the
// tests use, and the variants (sck_set_variants). Attention is cuda_attention.cu's, the int8 and
// 16-bit products cuda_matmul.cu's, greedy and sampled picks cuda_sample.cu's; their shared
// helpers are in cuda_common.cuh. Each launcher enqueues on the stream it is given and returns
// cudaGetLastError(); none allocates or synchronizes.
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
#include "kernels/cuda/cuda_common.cuh"

namespace sck {
sck_variants variants = {};
}

namespace {

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

void sck_set_variants(const sck_variants *v) { sck::variants = v ? *v : sck_variants{}; }

sck_variants sck_get_variants(void) { return sck::variants; }

} // extern "C"
