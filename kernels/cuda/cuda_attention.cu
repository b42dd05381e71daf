// The CUDA backend's attention kernels (sck_attention, cuda_kernels.h): causal GQA attention
// over the paged KV cache, per token for decode and in tiles of query tokens for prefill (fp32
// for an f32 model, 16-bit on the tensor cores for a 16-bit model, TF32 as a variant). Helpers
// shared with the other kernel files are in cuda_common.cuh; the KV store is cuda_kernels.cu's.
//
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
//
// Precision: the per-token and fp32 tiled kernels sum in fp32 in another order than the CPU, so
// they agree to rounding (about 1e-6 relative); the 16-bit and TF32 tiles round their operands
// (about 1e-3 relative, within the 1e-2 a bf16 model is held to). expf is CUDA's accurate expf
// (the file must not be built with --use_fast_math).
#include "kernels/cuda/cuda_common.cuh"

namespace {

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

// One of the tiled kernels for G query heads per KV head: fp32, or for a bf16 model 16-bit (or,
// as a variant, TF32) on the tensor cores; blocks of (rows / G tokens, KV head), with the
// dynamic shared memory each needs.
template <int HD, int G>
cudaError_t att_tiles_launch(cudaStream_t st, const att_params &a, int n_kv_heads, bool reduced) {
  void (*kernel)(att_params) = attention_tiled_kernel<HD, G>;
  size_t smem = tile_smem_floats<HD>() * sizeof(float);
  int rows = kTileRows, threads = kTileThreads;
  if (reduced && sck::variants.attention == SCK_ATT_TF32) {
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

} // namespace

extern "C" {

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

} // extern "C"
