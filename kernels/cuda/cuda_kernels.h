// The CUDA backend's own kernels (kernels/cuda/*.cu: cuda_kernels.cu, cuda_attention.cu,
// cuda_matmul.cu, cuda_sample.cu), as C-callable launchers.
//
// Each launcher enqueues its kernel(s) on the stream it is given and returns what
// cudaGetLastError() says right after the launch (cudaSuccess, or why the launch failed); it
// never synchronizes. Every pointer is device memory unless said otherwise, and every layout
// and formula is the device seam's (kernels/device.h), so that the CPU backend
// (kernels/cpu/cpu_device.c) is the reference each kernel is tested against. Sizes of zero
// launch nothing and return cudaSuccess. The caller has already made the right GPU current
// (cudaSetDevice) and checked the arguments.
#pragma once

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Most source buffers one sck_sum reads (the most ranks a loopback group has).
#define SCK_SUM_MAX 16

// y(m,d) = x / sqrt(mean(x^2) + eps) * w(d), row by row; y may alias x.
cudaError_t sck_rmsnorm(cudaStream_t st, int m, int d, const float *x, const float *w, float eps,
                        float *y);
// x(m,d) += a(m,d), then y = rmsnorm(x) . w as sck_rmsnorm: one launch with the bits of
// sck_add then sck_rmsnorm (the residual add and the next norm of a layer).
cudaError_t sck_add_rmsnorm(cudaStream_t st, int m, int d, const float *a, float *x,
                            const float *w, float eps, float *y);
// In place on x(m, n_heads, head_dim): Hugging Face rotate-half RoPE at positions pos(m):
// for i < head_dim/2, with f = pos * theta^(-2i/head_dim),
// x'[i] = x[i] cos f - x[i + half] sin f, x'[i + half] = x[i + half] cos f + x[i] sin f.
cudaError_t sck_rope(cudaStream_t st, int m, int n_heads, int head_dim, const int32_t *pos,
                     float theta, float *x);
// The paged KV cache, as dev_kv_batch describes it: token t sits in the slot
// block_tables[seq[t] * max_blocks + pos[t] / block_size] * block_size + pos[t] % block_size;
// a slot holds (n_kv_heads, head_dim) floats of K in kc and of V in vc.
typedef struct sck_kv {
  int n_tok;
  const int32_t *pos;          // (n_tok)
  const int32_t *seq;          // (n_tok)
  const int32_t *block_tables; // (n_seq, max_blocks)
  int max_blocks;
  int block_size;
  int max_run; // a hint (0: unknown): the most consecutive tokens of one sequence
  int tf32;    // nonzero: attention may multiply in TF32 (dev_kv_batch.reduced_precision)
} sck_kv;
// Writes k, v (n_tok, n_kv_heads, head_dim) into each token's slot of kc, vc.
cudaError_t sck_kv_store(cudaStream_t st, const sck_kv *b, int n_kv_heads, int head_dim,
                         const float *k, const float *v, float *kc, float *vc);
// sck_rope on q (n_tok, n_heads, head_dim) and on k (n_tok, n_kv_heads, head_dim) at the
// batch's positions, then sck_kv_store of the rotated k and of v: one launch, the same bits.
cudaError_t sck_rope_kv_store(cudaStream_t st, const sck_kv *b, int n_heads, int n_kv_heads,
                              int head_dim, float theta, float *q, float *k, const float *v,
                              float *kc, float *vc);
// Causal attention over the paged cache: token t (sequence seq[t], position p = pos[t]) and
// query head h attend to positions 0..p of the same sequence, KV head h / (n_heads /
// n_kv_heads): out = softmax(scale * q . k_j) . v_j over j. q, out: (n_tok, n_heads, head_dim).
// The cache already holds every token of the step (sck_kv_store ran first). head_dim <= 256.
// With max_run >= 16 (a prefill chunk), head_dim 64 or 128 and 1, 2, 4 or 8 query heads per KV
// head, tiles of query tokens share each K and V read (with tf32, their products on the tensor
// cores in TF32, about 1e-3 relative); else one block per token and head, in fp32.
cudaError_t sck_attention(cudaStream_t st, const sck_kv *b, int n_heads, int n_kv_heads,
                          int head_dim, float scale, const float *q, const float *kc,
                          const float *vc, float *out);
// out(m,d) = silu(gate) * up = gate / (1 + exp(-gate)) * up; out may alias gate.
cudaError_t sck_swiglu(cudaStream_t st, int m, int d, const float *gate, const float *up,
                       float *out);
// y(n) += a(n)
cudaError_t sck_add(cudaStream_t st, size_t n, const float *a, float *y);
// out(m,d) = table[ids[i] - row0] for ids in [row0, row0 + rows), zeros for the others.
cudaError_t sck_embedding(cudaStream_t st, int m, int d, const int32_t *ids, const float *table,
                          int row0, int rows, float *out);
// y(m,n) = x(m,k) * (scale(n) . q(n,k))^T + beta * y(m,n); q int8 in (out, in) layout, one
// scale per output row. beta == 0 never reads y (it may hold NaN).
cudaError_t sck_matmul_q8(cudaStream_t st, int m, int n, int k, const float *x, const int8_t *q,
                          const float *scale, float beta, float *y);
// dst(n) = srcs[0](n) + srcs[1](n) + ... + srcs[n_src - 1](n), summed in that order for every
// element (so every rank that sums the same sources gets the same bits). srcs is a HOST array
// of n_src (1..SCK_SUM_MAX) device pointers, copied into the launch; dst may alias a source.
cudaError_t sck_sum(cudaStream_t st, size_t n, int n_src, const float *const *srcs, float *dst);
// Writes value to every element of x(n) (tests poison outputs with NaN before each run).
cudaError_t sck_fill(cudaStream_t st, size_t n, float value, float *x);
// Greedy picks: for each row i of x(m,n), idx(i) = the column of its largest value (the first
// on ties), val(i) = that value; idx(i) = -1 when the row holds a NaN or an infinity.
cudaError_t sck_argmax(cudaStream_t st, int m, int n, const float *x, int32_t *idx, float *val);
// One row's draw (kernels/device.h's dev_sample_row, the same layout).
typedef struct sck_sample {
  float temperature;
  float top_p;
  double u;
} sck_sample;
// Sampled picks, device_i.sample's contract: rows DEVICE memory (m), x overwritten with the
// probabilities of the rows with a temperature > 0.
cudaError_t sck_sample_rows(cudaStream_t st, int m, int n, float *x, const sck_sample *rows,
                            int32_t *idx);
// y(m,n) = bf16(x(m,k)) * w(n,k)^T + beta * y(m,n) for a decode batch: w bf16 bits in (out,
// in) layout, x rounded to bf16 (as sck_f32_to_bf16 does) and fp32 sums, in one kernel that
// streams w once. Only where sck_matmul_bf16_small_ok (1 to sck_matmul_bf16_small_rows() rows,
// k % 8 == 0, x and w 16-byte aligned); beta == 0 never reads y.
int sck_matmul_bf16_small_rows(void); // 1, or what sck_variants.small_rows sets
bool sck_matmul_bf16_small_ok(int m, int k, const float *x, const uint16_t *w);
cudaError_t sck_matmul_bf16_small(cudaStream_t st, int m, int n, int k, const float *x,
                                  const uint16_t *w, float beta, float *y);
// The same for count (1..SCK_GROUP_MAX) weights of one x, y[i](m, n[i]), in one launch; w, n
// and y are HOST arrays of count (each w[i] must pass sck_matmul_bf16_small_ok).
#define SCK_GROUP_MAX 4
cudaError_t sck_matmul_bf16_small_group(cudaStream_t st, int m, int k, const float *x, int count,
                                        const uint16_t *const *w, const int *n, float *const *y,
                                        float beta);
// y(n) = x(n) as bfloat16 bits, rounded to nearest even (the bf16 matmul's activations).
cudaError_t sck_f32_to_bf16(cudaStream_t st, size_t n, const float *x, uint16_t *y);
// The same product for w as IEEE half bits, x rounded to fp16 (where sck_matmul_bf16_small_ok).
cudaError_t sck_matmul_f16_small(cudaStream_t st, int m, int n, int k, const float *x,
                                 const uint16_t *w, float beta, float *y);
// y(n) = x(n) as IEEE half bits, rounded to nearest even (the fp16 matmul's activations).
cudaError_t sck_f32_to_f16(cudaStream_t st, size_t n, const float *x, uint16_t *y);

// Kernels a benchmark or a test may choose in place of the defaults, to compare them on the same
// GPU in one run (bench/bench_cuda.c, tests/test_cuda_gpu.c). Process-wide; set it while no op
// runs. Zero is every default.
typedef enum sck_attention_kind {
  SCK_ATT_DEFAULT = 0, // a bf16 model's prefill tiles: Q.K^T in bf16, P.V in fp16 (mma.m16n8k16)
  SCK_ATT_TF32,        // the same tiles in TF32 (mma.m16n8k8), 64 query rows per block
} sck_attention_kind;
typedef struct sck_variants {
  sck_attention_kind attention;
  int small_rows; // rows up to which a bf16 product takes the decode kernel: 1..8 (0: 1;
                   // < 0: none, every product through cuBLAS)
  int no_graphs;   // nonzero: devices record and replay no graphs (cuda_device.c)
} sck_variants;
void sck_set_variants(const sck_variants *v); // NULL: the defaults
sck_variants sck_get_variants(void);

#ifdef __cplusplus
}
#endif
