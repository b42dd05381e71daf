// The CUDA device backend (device_i "cuda"): one GPU, one stream, one cuBLAS handle per
// device handle; the executor opens one per rank, so several ranks on one GPU each get a
// stream of their own (the loopback communicator in comm_cuda.c relies on that).
//
// - Memory: cudaMalloc, zeroed before it is handed out. "used" is this handle's own
//   accounting (every live allocation's bytes: the engine's weight, KV and activation arenas
//   and the sequences' block tables), "total" the GPU's memory as cudaMemGetInfo reports it
//   (the driver's own used, total - free, also counts the CUDA context, cuBLAS's workspace and
//   other processes, which the engine's plan does not hold).
// - Ordering: every op is enqueued on the handle's stream and returns without waiting, so a
//   step's kernels run back to back. A copy to the host waits for it (the caller reads the
//   bytes next); so does a copy from the host (the caller may reuse its buffer at once, and
//   it may be pinned); device-to-device copies are stream-ordered. synchronize waits for the
//   stream. The communicators (comm_cuda.c) order themselves after the stream the same way.
// - Math: matmul is cublasSgemm in fp32 with the default math mode (no TF32), so that fp32
//   runs give the CPU engine's greedy tokens; matmul_bf16 is cublasGemmEx on bf16 weights and
//   bf16-rounded activations with fp32 sums (a bf16 model's tensor-core path), except for one
//   row (batch-1 decode), where a kernel of our own streams the weights once with the same
//   rounding and fp32 sums; matmul_q8 and the layer ops are this backend's own kernels
//   (cuda_*.cu), each held to the CPU backend's formula.
// - Graphs: graph_begin / graph_end record a rank's decode step as a CUDA graph (stream capture,
//   thread-local) and replay it (docs/cuda.md); SHARDCHECK_CUDA_GRAPHS=0 at open turns them off.
// - Errors: every CUDA and cuBLAS call is checked (cuda_backend.h); the op returns SC_DEVICE
//   (SC_OOM for allocations) and last_error gives "call (file:line): message". A kernel that
//   faults shows up at the next call that waits (a copy to the host or synchronize) with the
//   kernel's error, as CUDA reports it. Device faults (lost, hang, slow, oom, corrupt) are the
//   seam's wrappers' (kernels/device.c) and take the same path as on the CPU.
// - Arguments: sizes and NULLs are checked as on the CPU. The KV batch's positions and block
//   tables are device memory here and are not read back to be checked: the executor builds
//   them from the host copies the scheduler checked.
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda_api.h"
#include "kernels/device.h"

// One live allocation: its pointer and size (freeing it gives the bytes back to "used").
typedef struct cuda_block {
  void *ptr;
  size_t bytes;
} cuda_block;

// Graphs a device keeps (one per decode batch size the executor records).
#define CUDA_GRAPHS 16

typedef struct cuda_ctx {
  int gpu;
  cudaStream_t stream;
  cublasHandle_t blas;
  pthread_mutex_t mu; // guards blocks, n_blocks, cap_blocks, used (alloc/free from any thread)
  cuda_block *blocks;
  size_t n_blocks, cap_blocks;
  size_t used;
  size_t total;  // the GPU's memory (cudaMemGetInfo at open: it does not change)
  cuda_err err; // the last failure's text (last_error)
  uint16_t *xb; // matmul_bf16's activations rounded to bf16; grown on demand, not in `used`
  size_t xb_cap; // elements xb holds
  // graphs of recorded ops (graph_begin): at most CUDA_GRAPHS of them, by key
  struct {
    uint64_t key;
    cudaGraphExec_t exec;
  } graphs[CUDA_GRAPHS];
  int n_graphs;
  bool recording;     // between a graph_begin that records and its graph_end
  uint64_t rec_key;   // the key being recorded
  bool graphs_off;    // SHARDCHECK_CUDA_GRAPHS=0 at open: every op is enqueued as it comes
  sck_sample *draws;  // sample's rows on the device; grown on demand, not in `used`
  int draws_cap;      // rows draws holds
} cuda_ctx;

static const device_i cuda_iface;

static atomic_long graphs_recorded; // cuda_graphs_recorded()

_Static_assert(SCK_GROUP_MAX == DEV_GROUP_MAX, "a device group is one launch");
_Static_assert(sizeof(sck_sample) == sizeof(dev_sample_row) &&
                   offsetof(sck_sample, u) == offsetof(dev_sample_row, u),
               "a draw crosses to the device as it is");

// Every entry point makes its GPU current first: rank threads and the engine's thread all call
// in, and a thread's current device is per thread. While a graph is being recorded the thread
// that records made it current at graph_begin, and nothing else is called in between.
#define CUDA_ENTER(c)                                                                              \
  do {                                                                                             \
    if (!(c)->recording) CU_TRY(&(c)->err, cudaSetDevice((c)->gpu));                              \
  } while (0)

// --- memory

static sc_status track(cuda_ctx *c, void *p, size_t bytes) {
  pthread_mutex_lock(&c->mu);
  if (c->n_blocks == c->cap_blocks) {
    size_t cap = c->cap_blocks ? 2 * c->cap_blocks : 64;
    cuda_block *nb = realloc(c->blocks, cap * sizeof *nb);
    if (!nb) {
      pthread_mutex_unlock(&c->mu);
      return SC_OOM;
    }
    c->blocks = nb;
    c->cap_blocks = cap;
  }
  c->blocks[c->n_blocks++] = (cuda_block){p, bytes};
  c->used += bytes;
  pthread_mutex_unlock(&c->mu);
  return SC_OK;
}

// Removes p from the table; false when this handle did not allocate it.
static bool untrack(cuda_ctx *c, void *p) {
  bool found = false;
  pthread_mutex_lock(&c->mu);
  for (size_t i = c->n_blocks; i-- > 0;) { // newest first: per-sequence buffers come and go
    if (c->blocks[i].ptr != p) continue;
    c->used -= c->blocks[i].bytes;
    c->blocks[i] = c->blocks[--c->n_blocks];
    found = true;
    break;
  }
  pthread_mutex_unlock(&c->mu);
  return found;
}

static sc_status cuda_alloc(void *ctx, size_t bytes, void **out) {
  cuda_ctx *c = ctx;
  if (!out) return SC_INVALID;
  *out = NULL;
  CUDA_ENTER(c);
  void *p = NULL;
  sc_status s = CU_CHECK(&c->err, cudaMalloc(&p, bytes ? bytes : 1));
  if (s != SC_OK) {
    (void)cudaGetLastError(); // an allocation failure is not sticky: clear it
    return s;
  }
  s = CU_CHECK(&c->err, cudaMemsetAsync(p, 0, bytes, c->stream));
  if (s == SC_OK) s = CU_CHECK(&c->err, cudaStreamSynchronize(c->stream));
  if (s == SC_OK) s = track(c, p, bytes);
  if (s != SC_OK) {
    cudaFree(p);
    return s;
  }
  *out = p;
  return SC_OK;
}

// Freeing a pointer this device did not allocate (or twice) is a broken invariant, as on cpu.
static void cuda_free(void *ctx, void *ptr) {
  cuda_ctx *c = ctx;
  if (!ptr) return;
  SC_ASSERT(untrack(c, ptr));
  if (cudaSetDevice(c->gpu) == cudaSuccess) cudaFree(ptr); // frees after queued work, by spec
}

static sc_status cuda_copy(void *ctx, void *dst, const void *src, size_t bytes,
                           dev_copy_kind kind) {
  cuda_ctx *c = ctx;
  enum cudaMemcpyKind k;
  switch (kind) {
  case DEV_H2D: k = cudaMemcpyHostToDevice; break;
  case DEV_D2H: k = cudaMemcpyDeviceToHost; break;
  case DEV_D2D: k = cudaMemcpyDeviceToDevice; break;
  default: return SC_INVALID;
  }
  if (bytes == 0) return SC_OK;
  if (!dst || !src) return SC_INVALID;
  CUDA_ENTER(c);
  CU_TRY(&c->err, cudaMemcpyAsync(dst, src, bytes, k, c->stream));
  if (kind != DEV_D2D) CU_TRY(&c->err, cudaStreamSynchronize(c->stream));
  return SC_OK;
}

// Host bookkeeping only (the replica publishes it every step): no CUDA call.
static sc_status cuda_mem_info(void *ctx, size_t *used, size_t *total) {
  cuda_ctx *c = ctx;
  pthread_mutex_lock(&c->mu);
  if (used) *used = c->used;
  pthread_mutex_unlock(&c->mu);
  if (total) *total = c->total;
  return SC_OK;
}

static sc_status cuda_synchronize(void *ctx) {
  cuda_ctx *c = ctx;
  CUDA_ENTER(c);
  CU_TRY(&c->err, cudaStreamSynchronize(c->stream));
  return SC_OK;
}

// --- ops

// The status of a launcher's return (the kernel's launch; its run fails later, if at all).
#define LAUNCH(c, call) CU_CHECK(&(c)->err, call)

// y(m,n) = x(m,k) w(n,k)^T + beta y, all row-major. In cuBLAS's column-major terms y^T (n x m,
// ld n) = w (stored k x n, ld k, transposed) times x^T (k x m, ld k). beta == 0: cuBLAS does
// not read y.
static sc_status cuda_matmul(void *ctx, int m, int n, int k, const float *x, const float *w,
                             float beta, float *y) {
  cuda_ctx *c = ctx;
  if (m < 0 || n < 0 || k < 0) return SC_INVALID;
  if (m == 0 || n == 0) return SC_OK;
  if (!y || (k > 0 && (!x || !w))) return SC_INVALID;
  CUDA_ENTER(c);
  if (k == 0) { // x w^T is empty: y = beta y
    if (beta == 0.0f) return LAUNCH(c, sck_fill(c->stream, (size_t)m * (size_t)n, 0.0f, y));
    CUBLAS_TRY(&c->err, cublasSscal(c->blas, m * n, &beta, y, 1));
    return SC_OK;
  }
  const float one = 1.0f;
  CUBLAS_TRY(&c->err, cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w, k, x, k,
                                  &beta, y, n));
  return SC_OK;
}

// x(m,k) rounded to bf16 (or fp16) into the handle's scratch (grown on demand: growing waits
// for the stream, since the old scratch may still be read), for the cuBLAS products that follow
// it on the stream.
static sc_status round_x(cuda_ctx *c, int m, int k, const float *x, bool f16) {
  size_t need = (size_t)m * (size_t)k;
  if (need > c->xb_cap) {
    CU_TRY(&c->err, cudaStreamSynchronize(c->stream));
    cudaFree(c->xb);
    c->xb = NULL;
    c->xb_cap = 0;
    sc_status s = CU_CHECK(&c->err, cudaMalloc((void **)&c->xb, need * sizeof *c->xb));
    if (s != SC_OK) {
      (void)cudaGetLastError();
      return s;
    }
    c->xb_cap = need;
  }
  return LAUNCH(c, f16 ? sck_f32_to_f16(c->stream, need, x, c->xb)
                       : sck_f32_to_bf16(c->stream, need, x, c->xb));
}

// y(m,n) = xb(m,k) w(n,k)^T + beta y through cuBLAS, xb the scratch round_x filled: bf16
// operands, fp32 sums (CUBLAS_COMPUTE_32F), fp32 y.
static sc_status gemm_bf16(cuda_ctx *c, int m, int n, int k, const uint16_t *w, float beta,
                           float *y, bool f16) {
  const float one = 1.0f;
  const cudaDataType_t t = f16 ? CUDA_R_16F : CUDA_R_16BF;
  CUBLAS_TRY(&c->err, cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w, t, k,
                                   c->xb, t, k, &beta, y, CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT));
  return SC_OK;
}

// A decode batch of sck_matmul_bf16_small_rows() rows or fewer (1) runs the backend's own
// kernel, x rounded inside; more rows go
// to cuBLAS with x rounded into the scratch first (on the stream, so the scratch is free again
// once the GEMM has read it).
static sc_status matmul_16(cuda_ctx *c, int m, int n, int k, const float *x, const uint16_t *w,
                           float beta, float *y, bool f16) {
  if (m < 0 || n < 0 || k < 0) return SC_INVALID;
  if (m == 0 || n == 0) return SC_OK;
  if (!y || (k > 0 && (!x || !w))) return SC_INVALID;
  if (k == 0) return cuda_matmul(c, m, n, 0, NULL, NULL, beta, y);
  CUDA_ENTER(c);
  if (sck_matmul_bf16_small_ok(m, k, x, w))
    return LAUNCH(c, f16 ? sck_matmul_f16_small(c->stream, m, n, k, x, w, beta, y)
                         : sck_matmul_bf16_small(c->stream, m, n, k, x, w, beta, y));
  SC_TRY(round_x(c, m, k, x, f16));
  return gemm_bf16(c, m, n, k, w, beta, y, f16);
}

static sc_status cuda_matmul_bf16(void *ctx, int m, int n, int k, const float *x,
                                  const uint16_t *w, float beta, float *y) {
  return matmul_16(ctx, m, n, k, x, w, beta, y, false);
}

// The same with fp16 weights and x rounded to fp16 (a float16 model's checkpoint as it is).
static sc_status cuda_matmul_f16(void *ctx, int m, int n, int k, const float *x,
                                 const uint16_t *w, float beta, float *y) {
  return matmul_16(ctx, m, n, k, x, w, beta, y, true);
}

// q, k, v (or gate, up) of a decode batch as one launch; otherwise x rounded once and one
// cuBLAS product each.
static sc_status cuda_matmul_bf16_group(void *ctx, int m, int k, const float *x, int count,
                                        const uint16_t *const *w, const int *n, float *const *y) {
  cuda_ctx *c = ctx;
  if (m < 0 || k < 0 || count < 1 || count > SCK_GROUP_MAX) return SC_INVALID;
  bool one = true;
  for (int i = 0; i < count; i++) {
    if (n[i] < 0 || !y[i] || (k > 0 && (!x || !w[i]))) return SC_INVALID;
    one = one && sck_matmul_bf16_small_ok(m, k, x, w[i]);
  }
  if (m == 0) return SC_OK;
  if (k == 0) {
    for (int i = 0; i < count; i++) SC_TRY(cuda_matmul_bf16(ctx, m, n[i], 0, x, w[i], 0.0f, y[i]));
    return SC_OK;
  }
  CUDA_ENTER(c);
  if (one) return LAUNCH(c, sck_matmul_bf16_small_group(c->stream, m, k, x, count, w, n, y, 0.0f));
  SC_TRY(round_x(c, m, k, x, false));
  for (int i = 0; i < count; i++)
    if (n[i] > 0) SC_TRY(gemm_bf16(c, m, n[i], k, w[i], 0.0f, y[i], false));
  return SC_OK;
}

static sc_status cuda_matmul_q8(void *ctx, int m, int n, int k, const float *x, const int8_t *q,
                                const float *scale, float beta, float *y) {
  cuda_ctx *c = ctx;
  if (m < 0 || n < 0 || k < 0) return SC_INVALID;
  if (m == 0 || n == 0) return SC_OK;
  if (!y || !scale || (k > 0 && (!x || !q))) return SC_INVALID;
  CUDA_ENTER(c);
  return LAUNCH(c, sck_matmul_q8(c->stream, m, n, k, x, q, scale, beta, y));
}

static sc_status cuda_rmsnorm(void *ctx, int m, int d, const float *x, const float *w, float eps,
                              float *y) {
  cuda_ctx *c = ctx;
  if (m < 0 || d <= 0) return SC_INVALID;
  if (m == 0) return SC_OK;
  if (!x || !w || !y) return SC_INVALID;
  CUDA_ENTER(c);
  return LAUNCH(c, sck_rmsnorm(c->stream, m, d, x, w, eps, y));
}

static sc_status cuda_rope(void *ctx, int m, int n_heads, int head_dim, const int32_t *pos,
                           float theta, float *x) {
  cuda_ctx *c = ctx;
  if (m < 0 || n_heads <= 0 || head_dim <= 0 || head_dim % 2 || !(theta > 0.0f))
    return SC_INVALID;
  if (m == 0) return SC_OK;
  if (!pos || !x) return SC_INVALID;
  CUDA_ENTER(c);
  return LAUNCH(c, sck_rope(c->stream, m, n_heads, head_dim, pos, theta, x));
}

// The batch's host-side fields (its arrays are device memory and stay unread here).
static sc_status check_batch(const dev_kv_batch *b, sck_kv *out) {
  if (!b || b->n_tok < 0) return SC_INVALID;
  if (b->n_tok > 0 && (!b->pos || !b->seq || !b->block_tables || b->max_blocks <= 0 ||
                       b->block_size <= 0))
    return SC_INVALID;
  *out = (sck_kv){.n_tok = b->n_tok, .pos = b->pos, .seq = b->seq,
                  .block_tables = b->block_tables, .max_blocks = b->max_blocks,
                  .block_size = b->block_size, .max_run = b->max_run,
                  .tf32 = b->reduced_precision};
  return SC_OK;
}

static sc_status cuda_kv_store(void *ctx, const dev_kv_batch *b, int n_kv_heads, int head_dim,
                               const float *k, const float *v, dev_kv_layer kv) {
  cuda_ctx *c = ctx;
  sck_kv kb;
  if (n_kv_heads <= 0 || head_dim <= 0) return SC_INVALID;
  SC_TRY(check_batch(b, &kb));
  if (kb.n_tok == 0) return SC_OK;
  if (!k || !v || !kv.k || !kv.v) return SC_INVALID;
  CUDA_ENTER(c);
  return LAUNCH(c, sck_kv_store(c->stream, &kb, n_kv_heads, head_dim, k, v, kv.k, kv.v));
}

static sc_status cuda_attention(void *ctx, const dev_kv_batch *b, int n_heads, int n_kv_heads,
                                int head_dim, float scale, const float *q, dev_kv_layer kv,
                                float *out) {
  cuda_ctx *c = ctx;
  sck_kv kb;
  if (n_heads <= 0 || n_kv_heads <= 0 || head_dim <= 0 || n_heads % n_kv_heads) return SC_INVALID;
  if (head_dim > 256) return SC_INVALID; // the kernel holds a head's row in registers
  SC_TRY(check_batch(b, &kb));
  if (kb.n_tok == 0) return SC_OK;
  if (!q || !out || !kv.k || !kv.v) return SC_INVALID;
  CUDA_ENTER(c);
  return LAUNCH(c, sck_attention(c->stream, &kb, n_heads, n_kv_heads, head_dim, scale, q, kv.k,
                                 kv.v, out));
}

static sc_status cuda_add_rmsnorm(void *ctx, int m, int d, const float *a, float *x,
                                  const float *w, float eps, float *y) {
  cuda_ctx *c = ctx;
  if (m < 0 || d <= 0) return SC_INVALID;
  if (m == 0) return SC_OK;
  if (!a || !x || !w || !y) return SC_INVALID;
  CUDA_ENTER(c);
  return LAUNCH(c, sck_add_rmsnorm(c->stream, m, d, a, x, w, eps, y));
}

static sc_status cuda_rope_kv_store(void *ctx, const dev_kv_batch *b, int n_heads, int n_kv_heads,
                                    int head_dim, float theta, float *q, float *k, const float *v,
                                    dev_kv_layer kv) {
  cuda_ctx *c = ctx;
  sck_kv kb;
  if (n_heads <= 0 || n_kv_heads <= 0 || head_dim <= 0 || head_dim % 2 || !(theta > 0.0f))
    return SC_INVALID;
  SC_TRY(check_batch(b, &kb));
  if (kb.n_tok == 0) return SC_OK;
  if (!q || !k || !v || !kv.k || !kv.v) return SC_INVALID;
  CUDA_ENTER(c);
  return LAUNCH(c, sck_rope_kv_store(c->stream, &kb, n_heads, n_kv_heads, head_dim, theta, q, k,
                                     v, kv.k, kv.v));
}

// --- graphs

// Declines steps of more rows than the bf16 decode kernel takes: cuBLAS's path rounds x into a
// scratch that a larger batch regrows, which a recording cannot hold.
static sc_status cuda_graph_begin(void *ctx, uint64_t key, int rows, int *mode) {
  cuda_ctx *c = ctx;
  *mode = DEV_GRAPH_OFF;
  if (c->recording) return SC_INVALID;
  if (c->graphs_off || sck_get_variants().no_graphs || rows > sck_matmul_bf16_small_rows())
    return SC_OK;
  CUDA_ENTER(c);
  for (int i = 0; i < c->n_graphs; i++) {
    if (c->graphs[i].key != key) continue;
    CU_TRY(&c->err, cudaGraphLaunch(c->graphs[i].exec, c->stream));
    *mode = DEV_GRAPH_REPLAYED;
    return SC_OK;
  }
  if (c->n_graphs == CUDA_GRAPHS) return SC_OK;
  // thread-local: other threads' CUDA calls (other ranks, the recorder) stay legal meanwhile
  CU_TRY(&c->err, cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
  c->recording = true;
  c->rec_key = key;
  *mode = DEV_GRAPH_RECORDING;
  return SC_OK;
}

static sc_status cuda_graph_end(void *ctx, bool keep) {
  cuda_ctx *c = ctx;
  if (!c->recording) return SC_INVALID;
  c->recording = false;
  cudaGraph_t g = NULL;
  cudaError_t rc = cudaSetDevice(c->gpu);
  if (rc == cudaSuccess) rc = cudaStreamEndCapture(c->stream, &g);
  if (rc != cudaSuccess || !keep) { // a capture an op broke ends here too, with its error
    if (g) cudaGraphDestroy(g);
    (void)cudaGetLastError();
    return keep ? CU_CHECK(&c->err, rc) : SC_OK;
  }
  cudaGraphExec_t exec = NULL;
  sc_status s = CU_CHECK(&c->err, cudaGraphInstantiate(&exec, g, 0));
  cudaGraphDestroy(g);
  if (s != SC_OK) {
    (void)cudaGetLastError();
    return s;
  }
  c->graphs[c->n_graphs].key = c->rec_key;
  c->graphs[c->n_graphs].exec = exec;
  c->n_graphs++;
  atomic_fetch_add(&graphs_recorded, 1);
  CU_TRY(&c->err, cudaGraphLaunch(exec, c->stream));
  return SC_OK;
}

static sc_status cuda_swiglu(void *ctx, int m, int d, const float *gate, const float *up,
                             float *out) {
  cuda_ctx *c = ctx;
  if (m < 0 || d < 0) return SC_INVALID;
  if (m == 0 || d == 0) return SC_OK;
  if (!gate || !up || !out) return SC_INVALID;
  CUDA_ENTER(c);
  return LAUNCH(c, sck_swiglu(c->stream, m, d, gate, up, out));
}

static sc_status cuda_add(void *ctx, size_t n, const float *a, float *y) {
  cuda_ctx *c = ctx;
  if (n == 0) return SC_OK;
  if (!a || !y) return SC_INVALID;
  CUDA_ENTER(c);
  return LAUNCH(c, sck_add(c->stream, n, a, y));
}

static sc_status cuda_embedding(void *ctx, int m, int d, const int32_t *ids, const float *table,
                                int row0, int rows, float *out) {
  cuda_ctx *c = ctx;
  if (m < 0 || d <= 0 || row0 < 0 || rows < 0) return SC_INVALID;
  if (m == 0) return SC_OK;
  if (!ids || !out || (rows > 0 && !table)) return SC_INVALID;
  CUDA_ENTER(c);
  return LAUNCH(c, sck_embedding(c->stream, m, d, ids, table, row0, rows, out));
}

static sc_status cuda_argmax(void *ctx, int m, int n, const float *x, int32_t *idx, float *val) {
  cuda_ctx *c = ctx;
  if (m < 0 || n <= 0) return SC_INVALID;
  if (m == 0) return SC_OK;
  if (!x || !idx || !val) return SC_INVALID;
  CUDA_ENTER(c);
  return LAUNCH(c, sck_argmax(c->stream, m, n, x, idx, val));
}

// The rows' draws go to a device buffer of the handle (grown on demand: growing waits for the
// stream, whose last sample may still read it), then one block per row picks.
static sc_status cuda_sample(void *ctx, int m, int n, float *x, const dev_sample_row *rows,
                             int32_t *idx) {
  cuda_ctx *c = ctx;
  if (m < 0 || n <= 0) return SC_INVALID;
  if (m == 0) return SC_OK;
  if (!x || !rows || !idx) return SC_INVALID;
  CUDA_ENTER(c);
  if (m > c->draws_cap) {
    CU_TRY(&c->err, cudaStreamSynchronize(c->stream));
    cudaFree(c->draws);
    c->draws = NULL;
    c->draws_cap = 0;
    sc_status s = CU_CHECK(&c->err, cudaMalloc((void **)&c->draws, (size_t)m * sizeof *c->draws));
    if (s != SC_OK) {
      (void)cudaGetLastError();
      return s;
    }
    c->draws_cap = m;
  }
  CU_TRY(&c->err, cudaMemcpyAsync(c->draws, rows, (size_t)m * sizeof *c->draws,
                                  cudaMemcpyHostToDevice, c->stream));
  CU_TRY(&c->err, cudaStreamSynchronize(c->stream)); // rows may be reused once this returns
  return LAUNCH(c, sck_sample_rows(c->stream, m, n, x, c->draws, idx));
}

static const char *cuda_last_error(void *ctx) { return ((cuda_ctx *)ctx)->err.msg; }

// --- lifecycle

static void cuda_destroy(void *ctx) {
  cuda_ctx *c = ctx;
  if (!c) return;
  if (cudaSetDevice(c->gpu) == cudaSuccess) {
    if (c->stream) cudaStreamSynchronize(c->stream);
    for (size_t i = 0; i < c->n_blocks; i++) cudaFree(c->blocks[i].ptr); // leaked by the caller
    cudaFree(c->xb);
    cudaFree(c->draws);
    if (c->recording) {
      cudaGraph_t g = NULL;
      if (cudaStreamEndCapture(c->stream, &g) == cudaSuccess && g) cudaGraphDestroy(g);
    }
    for (int i = 0; i < c->n_graphs; i++) cudaGraphExecDestroy(c->graphs[i].exec);
    if (c->blas) cublasDestroy(c->blas);
    if (c->stream) cudaStreamDestroy(c->stream);
  }
  free(c->blocks);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

static const device_i cuda_iface = {
    .name = "cuda",
    .alloc = cuda_alloc,
    .free = cuda_free,
    .copy = cuda_copy,
    .mem_info = cuda_mem_info,
    .synchronize = cuda_synchronize,
    .matmul = cuda_matmul,
    .matmul_q8 = cuda_matmul_q8,
    .matmul_bf16 = cuda_matmul_bf16,
    .matmul_f16 = cuda_matmul_f16,
    .matmul_bf16_group = cuda_matmul_bf16_group,
    .rmsnorm = cuda_rmsnorm,
    .rope = cuda_rope,
    .kv_store = cuda_kv_store,
    .attention = cuda_attention,
    .swiglu = cuda_swiglu,
    .add = cuda_add,
    .embedding = cuda_embedding,
    .argmax = cuda_argmax,
    .sample = cuda_sample,
    .add_rmsnorm = cuda_add_rmsnorm,
    .rope_kv_store = cuda_rope_kv_store,
    .graph_begin = cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .last_error = cuda_last_error,
    .destroy = cuda_destroy,
};

sc_status device_cuda_open(int index, device **out, sc_error *err) {
  if (!out) return sc_fail(err, SC_INVALID, "device_cuda_open: out is NULL");
  *out = NULL;
  int n = cuda_device_count();
  if (n == 0)
    return sc_fail(err, SC_DEVICE, "cuda device %d: no CUDA device is visible (no GPU, or no "
                   "driver)", index);
  if (index < 0 || index >= n)
    return sc_fail(err, SC_INVALID, "cuda device %d: this machine has %d CUDA device%s (0..%d)",
                   index, n, n == 1 ? "" : "s", n - 1);
  cuda_ctx *c = calloc(1, sizeof *c);
  if (!c) return sc_fail(err, SC_OOM, "cuda device %d: out of host memory", index);
  c->gpu = index;
  const char *graphs = getenv("SHARDCHECK_CUDA_GRAPHS");
  c->graphs_off = graphs && !strcmp(graphs, "0");
  if (pthread_mutex_init(&c->mu, NULL)) {
    free(c);
    return sc_fail(err, SC_OOM, "cuda device %d: cannot create a mutex", index);
  }
  sc_status s = CU_CHECK(&c->err, cudaSetDevice(index));
  if (s == SC_OK)
    s = CU_CHECK(&c->err, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  size_t free_b = 0;
  if (s == SC_OK) s = CU_CHECK(&c->err, cudaMemGetInfo(&free_b, &c->total));
  if (s == SC_OK) s = CUBLAS_CHECK(&c->err, cublasCreate(&c->blas));
  if (s == SC_OK) s = CUBLAS_CHECK(&c->err, cublasSetStream(c->blas, c->stream));
  if (s == SC_OK) s = CUBLAS_CHECK(&c->err, cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));
  if (s == SC_OK) s = device_wrap(&cuda_iface, c, out);
  if (s != SC_OK) {
    sc_fail(err, s, "cuda device %d: %s", index, c->err.msg[0] ? c->err.msg : sc_status_name(s));
    cuda_destroy(c);
    return s;
  }
  return SC_OK;
}

// --- cuda_backend.h accessors

static cuda_ctx *ctx_of(const device *d) {
  return d && !strcmp(device_name(d), "cuda") ? device_backend_ctx(d) : NULL;
}

cudaStream_t cuda_device_stream(device *d) {
  cuda_ctx *c = ctx_of(d);
  return c ? c->stream : NULL;
}

long cuda_graphs_recorded(void) { return atomic_load(&graphs_recorded); }

int cuda_device_gpu(const device *d) {
  cuda_ctx *c = ctx_of(d);
  return c ? c->gpu : -1;
}

// --- the library's one export (kernels/cuda_api.h)

const cuda_api *shardcheck_cuda_api(void) {
  static const cuda_api api = {
      .version = SC_CUDA_API_VERSION,
      .device_count = cuda_device_count,
      .device_open = device_cuda_open,
      .group_new = comm_cuda_group_new,
      .group_rank = comm_cuda_group_rank,
      .group_transport = comm_cuda_group_transport,
      .group_abort = comm_cuda_group_abort,
      .group_free = comm_cuda_group_free,
      .group_set_slow = comm_cuda_group_set_slow,
      .group_error = comm_cuda_group_error,
      .group_new_member = comm_cuda_group_new_member,
      .group_self = comm_cuda_group_self,
  };
  return &api;
}
