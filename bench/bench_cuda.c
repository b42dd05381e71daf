// The CUDA backend against the GPU's own ceilings, measured in one run: device-to-device copy
// bandwidth and a large bf16 cuBLAS GEMM (the two roofs), then the linear layers of one
// llama3-8b decode step and of a 2,048-token prefill through the device seam with bf16
// weights (dev_matmul_bf16, what the engine runs), as a share of each roof:
//   decode: weight bytes read per step / step time, against the copy bandwidth (target 80%);
//   prefill: 2 x tokens x parameters / time, against the GEMM rate (target 60%).
// Also the same decode step in fp32 (dev_matmul) and at batch 16, 64 and 256. Weights are random
// bf16 made on the host in one 64 MiB block and copied over the layers' weights on the device.
// Every figure is the median of its trials, timed with CUDA events on the device's stream
// (through dev_synchronize, so the seam's own cost is in).
// Then, unless --no-engine, the whole engine on the GPU (backend cuda, one rank): the model of
// --model (llama3-8b), bf16 weights (from --weights DIR, e.g. `shardcheck model gen --preset
// llama3-8b --seed 7 --dtype bf16 --out DIR`, the files bench/torch_compare.py loads; else
// generated from seed 7 at load), prefill of 2,048 tokens in one step, steady decode tokens/s
// at batch 1, 16, 64 and 256 (16-token prompts), and end to end (16-token prompts, 64 new
// tokens, greedy: what torch_compare.py times) at batch 1 and 64.
// Prints Markdown. A benchmark, never a test: nothing here asserts a time.
//   build/gpu/bench_cuda [--gpu N] [--trials N] [--layers N] [--model P] [--weights DIR]
//                        [--no-engine]
#include <stdio.h>

#ifndef SHARDCHECK_HAVE_CUDA
int main(void) {
  fputs("bench_cuda: this build has no CUDA backend (configure with SHARDCHECK_CUDA=ON)\n", stderr);
  return 2;
}
#else
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_engine_util.h"
#include "config/presets.h"
#include "engine/engine.h"
#include "kernels/clock.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/device.h"

#define MIB ((size_t)1 << 20)

// llama3-8b's shapes, which the layer and op measurements use: dim, 32 query heads and 8 KV
// heads of 128, ffn
enum { L8_DIM = 4096, L8_HEADS = 32, L8_KV_HEADS = 8, L8_HEAD_DIM = 128, L8_FFN = 14336 };

static void die(const char *what, const char *why) {
  fprintf(stderr, "bench_cuda: %s: %s\n", what, why);
  exit(1);
}

static void ck(cudaError_t rc, const char *what) {
  if (rc != cudaSuccess) die(what, cudaGetErrorString(rc));
}

static void ok(sc_status s, device *d, const char *what) {
  if (s != SC_OK) die(what, dev_last_error(d)[0] ? dev_last_error(d) : sc_status_name(s));
}

// Device allocation through the seam, filled with copies of one block of random host bytes.
static void *rand_dev(device *d, size_t bytes, const void *block, size_t block_bytes) {
  void *p = NULL;
  ok(dev_alloc(d, bytes, &p), d, "dev_alloc");
  for (size_t off = 0; off < bytes; off += block_bytes) {
    size_t n = bytes - off < block_bytes ? bytes - off : block_bytes;
    ok(dev_copy(d, (char *)p + off, block, n, DEV_H2D), d, "dev_copy");
  }
  return p;
}

// Milliseconds of fn(arg) on the stream of d, median of trials, after one warm-up call.
typedef void (*timed_fn)(void *arg);
static double time_ms(device *d, timed_fn fn, void *arg, int trials) {
  cudaStream_t st = cuda_device_stream(d);
  cudaEvent_t a, b;
  ck(cudaEventCreate(&a), "cudaEventCreate");
  ck(cudaEventCreate(&b), "cudaEventCreate");
  fn(arg);
  ok(dev_synchronize(d), d, "warm-up");
  double *v = malloc((size_t)trials * sizeof *v);
  for (int t = 0; t < trials; t++) {
    ck(cudaEventRecord(a, st), "cudaEventRecord");
    fn(arg);
    ck(cudaEventRecord(b, st), "cudaEventRecord");
    ok(dev_synchronize(d), d, "dev_synchronize");
    float ms = 0;
    ck(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    v[t] = ms;
  }
  double m = median(v, trials);
  free(v);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return m;
}

// --- the two roofs

typedef struct copy_arg {
  device *d;
  void *dst, *src;
  size_t bytes;
} copy_arg;

static void do_copy(void *p) {
  copy_arg *c = p;
  ok(dev_copy(c->d, c->dst, c->src, c->bytes, DEV_D2D), c->d, "dev_copy D2D");
}

typedef struct gemm_arg {
  device *d;
  cublasHandle_t h;
  int n;
  void *a, *b, *c;
} gemm_arg;

static void do_gemm(void *p) {
  gemm_arg *g = p;
  const float one = 1, zero = 0;
  cublasStatus_t rc = cublasGemmEx(g->h, CUBLAS_OP_T, CUBLAS_OP_N, g->n, g->n, g->n, &one, g->a,
                                   CUDA_R_16BF, g->n, g->b, CUDA_R_16BF, g->n, &zero, g->c,
                                   CUDA_R_16BF, g->n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (rc != CUBLAS_STATUS_SUCCESS) die("cublasGemmEx", cublasGetStatusString(rc));
}

// --- llama3-8b's linear layers through the seam

typedef struct mat {
  int n, k;
  uint16_t *h; // bf16 (n, k)
} mat;

typedef struct step_arg {
  device *d;
  mat *mats;
  int n_mats;
  int m;
  float *x, *y; // (m, max k), (m, max n)
  float **f;    // f32 weights, or NULL
} step_arg;

static void do_step(void *p) {
  step_arg *s = p;
  for (int i = 0; i < s->n_mats; i++) {
    const mat *w = &s->mats[i];
    sc_status st = s->f ? dev_matmul(s->d, s->m, w->n, w->k, s->x, s->f[i], 0.0f, s->y)
                        : dev_matmul_bf16(s->d, s->m, w->n, w->k, s->x, w->h, 0.0f, s->y);
    ok(st, s->d, "matmul");
  }
}

// --- a 2,048-token prefill's other ops, one layer of llama3-8b

typedef enum {
  OP_RMSNORM,
  OP_ADD_RMSNORM,
  OP_ROPE,
  OP_KV_STORE,
  OP_ROPE_KV_STORE,
  OP_ATTENTION,
  OP_ADD,
  OP_SWIGLU
} op_kind;

typedef struct op_arg {
  device *d;
  op_kind kind;
  int T;
  float *x, *y, *w;     // activations (T x ffn), outputs, the norm's weight
  dev_kv_batch kb;      // T tokens of one sequence at positions 0..T-1
  dev_kv_layer kv;
} op_arg;

static void do_op(void *p) {
  op_arg *o = p;
  const int D = L8_DIM, H = L8_HEADS, KVH = L8_KV_HEADS, HD = L8_HEAD_DIM, F = L8_FFN;
  sc_status s = SC_OK;
  switch (o->kind) {
  case OP_RMSNORM: s = dev_rmsnorm(o->d, o->T, D, o->x, o->w, 1e-5f, o->y); break;
  case OP_ADD_RMSNORM: s = dev_add_rmsnorm(o->d, o->T, D, o->x, o->y, o->w, 1e-5f, o->y); break;
  case OP_ROPE_KV_STORE: // q in y, k and v in x (v past T rows of dim)
    s = dev_rope_kv_store(o->d, &o->kb, H, KVH, HD, 500000.0f, o->y, o->x,
                          o->x + (size_t)o->T * D, o->kv);
    break;
  case OP_ROPE: // q and k
    s = dev_rope(o->d, o->T, H, HD, o->kb.pos, 500000.0f, o->y);
    if (s == SC_OK) s = dev_rope(o->d, o->T, KVH, HD, o->kb.pos, 500000.0f, o->x);
    break;
  case OP_KV_STORE: s = dev_kv_store(o->d, &o->kb, KVH, HD, o->x, o->x, o->kv); break;
  case OP_ATTENTION:
    s = dev_attention(o->d, &o->kb, H, KVH, HD, 1.0f / sqrtf((float)HD), o->x, o->kv, o->y);
    break;
  case OP_ADD: s = dev_add(o->d, (size_t)o->T * D, o->x, o->y); break;
  case OP_SWIGLU: s = dev_swiglu(o->d, o->T, F, o->x, o->x, o->y); break;
  }
  ok(s, o->d, "prefill op");
}

// Each op of a llama3-8b layer beside its matmuls, at T tokens of one prefill, x the layer's
// count of it: where a prefill step's time goes besides the linear layers (their line above).
static void prefill_ops(device *d, int T, float *x, float *y, int trials, double linear_ms) {
  const int D = L8_DIM, KVD = L8_KV_HEADS * L8_HEAD_DIM, bs = 16, nb = (T + bs - 1) / bs;
  int32_t *pos = malloc((size_t)T * sizeof *pos), *seq = calloc((size_t)T, sizeof *seq);
  int32_t *bt = malloc((size_t)nb * sizeof *bt);
  for (int i = 0; i < T; i++) pos[i] = i;
  for (int i = 0; i < nb; i++) bt[i] = nb - 1 - i; // blocks anywhere, as a cache holds them
  op_arg o = {.d = d, .T = T, .x = x, .y = y};
  void *dp, *ds, *db, *kc, *vc, *w;
  ok(dev_alloc(d, (size_t)T * 4, &dp), d, "dev_alloc");
  ok(dev_alloc(d, (size_t)T * 4, &ds), d, "dev_alloc");
  ok(dev_alloc(d, (size_t)nb * 4, &db), d, "dev_alloc");
  ok(dev_alloc(d, (size_t)nb * bs * KVD * 4, &kc), d, "dev_alloc");
  ok(dev_alloc(d, (size_t)nb * bs * KVD * 4, &vc), d, "dev_alloc");
  ok(dev_alloc(d, (size_t)D * 4, &w), d, "dev_alloc");
  ok(dev_copy(d, dp, pos, (size_t)T * 4, DEV_H2D), d, "dev_copy");
  ok(dev_copy(d, ds, seq, (size_t)T * 4, DEV_H2D), d, "dev_copy");
  ok(dev_copy(d, db, bt, (size_t)nb * 4, DEV_H2D), d, "dev_copy");
  ok(dev_copy(d, w, x, (size_t)D * 4, DEV_D2D), d, "dev_copy");
  o.w = w;
  o.kb = (dev_kv_batch){.n_tok = T, .pos = dp, .seq = ds, .block_tables = db, .max_blocks = nb,
                        .block_size = bs, .max_run = T};
  o.kv = (dev_kv_layer){kc, vc};
  // per_layer: calls per layer of a bf16 model's prefill as the engine runs it (the first
  // layer's norm and the last layer's add aside); 0: a variant or the separate ops a fused one
  // replaced, timed for comparison. reduced: a bf16 model's attention; tf32: its TF32 variant.
  struct {
    const char *name;
    op_kind kind;
    int per_layer, reduced, tf32;
  } ops[] = {{"residual add + rmsnorm (fused)", OP_ADD_RMSNORM, 2, 0, 0},
             {"rope (q and k) + kv_store (fused)", OP_ROPE_KV_STORE, 1, 0, 0},
             {"attention, 16-bit tensor cores (a bf16 model)", OP_ATTENTION, 1, 1, 0},
             {"swiglu", OP_SWIGLU, 1, 0, 0},
             {"rmsnorm (alone)", OP_RMSNORM, 0, 0, 0},
             {"residual add (alone)", OP_ADD, 0, 0, 0},
             {"rope, q and k (alone)", OP_ROPE, 0, 0, 0},
             {"kv_store (alone)", OP_KV_STORE, 0, 0, 0},
             {"attention, TF32 tensor cores (variant)", OP_ATTENTION, 0, 1, 1},
             {"attention, fp32 (an f32 model)", OP_ATTENTION, 0, 0, 0}};
  printf("\nA %d-token prefill's other ops (one sequence from position 0), llama3-8b's 32 "
         "layers (x per layer 0: not run by the engine, for comparison):\n\n| op | per call ms "
         "| x per layer | 32 layers ms | attention TFLOP/s |\n|---|---|---|---|---|\n", T);
  // causal attention's products: q.k and p.v over T (T + 1) / 2 positions, every head
  const double att_flop = 4.0 * L8_HEADS * L8_HEAD_DIM * (double)T * (T + 1) / 2;
  double sum_bf16 = 0;
  for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
    o.kind = ops[i].kind;
    o.kb.reduced_precision = ops[i].reduced;
    sck_set_variants(&(sck_variants){.attention = ops[i].tf32 ? SCK_ATT_TF32 : SCK_ATT_DEFAULT});
    if (ops[i].kind == OP_ATTENTION) // the cache holds the sequence's K and V first
      ok(dev_kv_store(d, &o.kb, L8_KV_HEADS, L8_HEAD_DIM, x, x, o.kv), d, "kv_store");
    double ms = time_ms(d, do_op, &o, trials), all = ms * ops[i].per_layer * 32;
    if (ops[i].kind == OP_ATTENTION)
      printf("| %s | %.3f | %d | %.2f | %.0f |\n", ops[i].name, ms, ops[i].per_layer, all,
             att_flop / (ms * 1e-3) / 1e12);
    else
      printf("| %s | %.3f | %d | %.2f | |\n", ops[i].name, ms, ops[i].per_layer, all);
    sum_bf16 += all;
  }
  sck_set_variants(NULL);
  printf("\nlinear layers (above, %d rows) %.2f ms + the other ops of a bf16 model %.2f ms = "
         "%.2f ms: %.0f tokens/s if nothing else took time\n", T, linear_ms, sum_bf16,
         linear_ms + sum_bf16, T / ((linear_ms + sum_bf16) * 1e-3));
  dev_free(d, dp), dev_free(d, ds), dev_free(d, db), dev_free(d, kc), dev_free(d, vc);
  dev_free(d, w);
  free(pos), free(seq), free(bt);
}

// --- the whole engine

// One engine for every measurement (loading llama3-8b's weights takes a while): up to 256
// sequences, a 2,048-token step, and KV blocks for 256 sequences of 96 tokens or one of 2,064.
static engine *gpu_engine(const model_config *m, const char *weights, int gpu) {
  engine_config c = engine_config_defaults();
  c.model = *m;
  c.backend = "cuda";
  c.devices[0] = gpu;
  c.n_devices = 1;
  c.weights_dir = weights;
  c.weights_seed = 7;
  c.weight_dtype = SC_BF16;
  c.max_running = 256;
  c.token_budget = 4096;
  c.prefill_chunk = 2048;
  c.kv_blocks = 256 * (96 / 16 + 1); // the KV cache is f32: sized to what is used
  sc_error err = {{0}};
  engine *e = NULL;
  if (engine_new(&c, &e, &err) != SC_OK) bench_die("bench_cuda", "engine_new", &err);
  return e;
}

static void run_engine(const char *preset, const char *weights, int gpu, double copy_bw,
                       double gemm_rate) {
  model_config m;
  sc_error err = {{0}};
  if (model_preset_load(preset, &m, &err) != SC_OK)
    bench_die("bench_cuda", "model_preset_load", &err);
  // The linear layers' parameters: a decode step reads them all (and the KV cache, not
  // counted); a prefill multiplies every token by the layers' and only the last by lm_head's.
  double q = (double)m.n_heads * m.head_dim, kv = (double)m.n_kv_heads * m.head_dim;
  double layer_params = (double)m.n_layers * ((double)m.dim * (q + 2 * kv) + q * m.dim +
                                              3.0 * m.dim * m.ffn_dim);
  double params = layer_params + (double)m.vocab_size * m.dim;
  printf("\nthe engine on GPU %d: %s, bf16 weights %s (%.2f G linear parameters), one rank ",
         gpu, preset, weights ? weights : "generated from seed 7", params / 1e9);
  uint64_t t_load = sc_monotonic_ns();
  engine *e = gpu_engine(&m, weights, gpu);
  printf("(loaded in %.1f s)\n\n| measure | batch | tokens/s | of the roof |\n|---|---|---|---|\n",
         (double)(sc_monotonic_ns() - t_load) / 1e9);
  double best = 0; // prefill: 2,048 tokens in one step, best of 3
  for (int t = 0; t < 3; t++) {
    bench_submit("bench_cuda", e, &m, 1, 2048, 1);
    engine_step_info i = bench_step("bench_cuda", e);
    while (!engine_idle(e)) bench_step("bench_cuda", e);
    double tps = (double)i.prefill_tokens / ((double)i.duration_ns / 1e9);
    if (tps > best) best = tps;
  }
  printf("| prefill, 2048 tokens | 1 | %.0f | %.0f%% of the GEMM roof (linear layers) |\n", best,
         100 * 2 * layer_params * best / gemm_rate);
  // steady decode; batch 1 also with every op enqueued one by one (no graphs), for comparison
  const int batches[] = {1, 1, 2, 4, 8, 16, 64, 256};
  for (size_t bi = 0; bi < sizeof batches / sizeof *batches; bi++) {
    int b = batches[bi], steps = 32;
    bool eager = bi == 1;
    sck_set_variants(&(sck_variants){.no_graphs = eager});
    bench_submit("bench_cuda", e, &m, b, 16, steps + 8);
    while (bench_step("bench_cuda", e).prefill_tokens > 0) {
    }
    for (int i = 0; i < 3; i++) bench_step("bench_cuda", e);
    uint64_t ns = 0;
    int tokens = 0;
    for (int i = 0; i < steps; i++) {
      engine_step_info s = bench_step("bench_cuda", e);
      ns += s.duration_ns;
      tokens += s.decode_tokens;
    }
    while (!engine_idle(e)) bench_step("bench_cuda", e);
    double tps = tokens / ((double)ns / 1e9), steps_s = tps / b;
    printf("| decode%s | %d | %.0f | weights at %.0f%% of the copy roof |\n",
           eager ? ", no graphs" : "", b, tps, 100 * 2 * params * steps_s / copy_bw);
  }
  sck_set_variants(NULL);
  const int e2e[] = {1, 64};
  for (size_t bi = 0; bi < 2; bi++) { // end to end, as torch_compare.py times it
    int b = e2e[bi];
    bench_submit("bench_cuda", e, &m, b, 16, 64);
    uint64_t t0 = sc_monotonic_ns();
    while (!engine_idle(e)) bench_step("bench_cuda", e);
    double s = (double)(sc_monotonic_ns() - t0) / 1e9;
    printf("| end to end, 16 + 64 tokens, greedy | %d | %.0f | - |\n", b, b * 64 / s);
  }
  engine_free(e);
}

int main(int argc, char **argv) {
  int gpu = 0, trials = 10, layers = 32;
  const char *preset = "llama3-8b", *weights = NULL;
  bool engine_too = true;
  static const struct option opts[] = {
      {"gpu", required_argument, 0, 'g'}, {"trials", required_argument, 0, 't'},
      {"layers", required_argument, 0, 'l'}, {"model", required_argument, 0, 'm'},
      {"weights", required_argument, 0, 'w'}, {"no-engine", no_argument, 0, 'n'},
      {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
    if (c == 'g') gpu = atoi(optarg);
    else if (c == 't') trials = atoi(optarg);
    else if (c == 'l') layers = atoi(optarg);
    else if (c == 'm') preset = optarg;
    else if (c == 'w') weights = optarg;
    else if (c == 'n') engine_too = false;
    else {
      fputs("usage: bench_cuda [--gpu N] [--trials N] [--layers N (of llama3-8b's 32)]\n"
            "                  [--model PRESET (llama3-8b)] [--weights DIR] [--no-engine]\n",
            c == 'h' ? stdout : stderr);
      return c == 'h' ? 0 : 2;
    }
  }
  if (trials < 1 || layers < 1 || layers > 32)
    die("arguments", "--trials >= 1, 1 <= --layers <= 32");
  device *d = NULL;
  sc_error err = {{0}};
  if (device_open("cuda", gpu, &d, &err) != SC_OK) die("device_open", err.msg);
  struct cudaDeviceProp prop;
  ck(cudaGetDeviceProperties(&prop, gpu), "cudaGetDeviceProperties");
  size_t used = 0, total = 0;
  ok(dev_mem_info(d, &used, &total), d, "dev_mem_info");
  printf("# bench_cuda: %s (GPU %d, %.1f GiB), %d trials per figure, medians\n\n", prop.name, gpu,
         (double)total / (1 << 30), trials);

  size_t block_bytes = 64 * MIB;
  uint16_t *block = malloc(block_bytes);
  uint64_t z = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < block_bytes / 2; i++) { // bf16 in about [-0.03, 0.03]: exponent 121-122
    z ^= z << 13, z ^= z >> 7, z ^= z << 17;
    block[i] = (uint16_t)(((z >> 63) << 15) | (0x79u << 7) | ((z >> 20) & 0xffu));
  }

  // roof 1: device-to-device copy of 1 GiB
  copy_arg ca = {.d = d, .bytes = 1024 * MIB};
  ca.src = rand_dev(d, ca.bytes, block, block_bytes);
  ca.dst = rand_dev(d, ca.bytes, block, block_bytes);
  double copy_ms = time_ms(d, do_copy, &ca, trials);
  double copy_bw = 2.0 * (double)ca.bytes / (copy_ms * 1e-3); // read + write
  dev_free(d, ca.src);
  dev_free(d, ca.dst);

  // roof 2: an 8192^3 bf16 GEMM on the device's stream
  gemm_arg ga = {.d = d, .n = 8192};
  size_t gb = (size_t)ga.n * ga.n * 2;
  ga.a = rand_dev(d, gb, block, block_bytes);
  ga.b = rand_dev(d, gb, block, block_bytes);
  ga.c = rand_dev(d, gb, block, block_bytes);
  if (cublasCreate(&ga.h) != CUBLAS_STATUS_SUCCESS) die("cublasCreate", "failed");
  cublasSetStream(ga.h, cuda_device_stream(d));
  double gemm_ms = time_ms(d, do_gemm, &ga, trials);
  double gemm_rate = 2.0 * ga.n * (double)ga.n * ga.n / (gemm_ms * 1e-3);
  cublasDestroy(ga.h);
  dev_free(d, ga.a), dev_free(d, ga.b), dev_free(d, ga.c);

  printf("| roof | figure |\n|---|---|\n");
  printf("| device-to-device copy, 1 GiB (read + write) | %.0f GB/s |\n", copy_bw / 1e9);
  printf("| bf16 GEMM 8192^3, fp32 sums | %.0f TFLOP/s |\n\n", gemm_rate / 1e12);

  const int D = L8_DIM, KV = L8_KV_HEADS * L8_HEAD_DIM, F = L8_FFN;
  const int shapes[7][2] = {{D, D}, {KV, D}, {KV, D}, {D, D}, {F, D}, {F, D}, {D, F}};
  int n_mats = 7 * layers;
  mat *mats = calloc((size_t)n_mats, sizeof *mats);
  double params = 0;
  for (int i = 0; i < n_mats; i++) {
    mats[i].n = shapes[i % 7][0];
    mats[i].k = shapes[i % 7][1];
    mats[i].h = rand_dev(d, (size_t)mats[i].n * mats[i].k * 2, block, block_bytes);
    params += (double)mats[i].n * mats[i].k;
  }
  const int max_m = 2048;
  float *xblock = malloc(block_bytes); // activations: random f32 in [-1, 1)
  for (size_t i = 0; i < block_bytes / sizeof(float); i++) {
    z ^= z << 13, z ^= z >> 7, z ^= z << 17;
    xblock[i] = (float)((double)(z >> 11) * 0x1p-52 - 1.0);
  }
  float *x = rand_dev(d, (size_t)max_m * F * sizeof(float), xblock, block_bytes), *y = NULL;
  free(xblock);
  ok(dev_alloc(d, (size_t)max_m * F * sizeof(float), (void **)&y), d, "dev_alloc y");
  printf("llama3-8b linear layers, %d of 32 layers (%.2f G parameters, %.2f GB of bf16), "
         "dev_matmul_bf16:\n\n", layers, params / 1e9, 2 * params / 1e9);
  printf("| rows (tokens) | step ms | weights read | share of copy bandwidth | GEMM rate | "
         "share of the GEMM roof |\n|---|---|---|---|---|---|\n");
  const int rows[] = {1, 16, 64, 256, 2048};
  double prefill_linear_ms = 0;
  for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
    step_arg sa = {.d = d, .mats = mats, .n_mats = n_mats, .m = rows[i], .x = x, .y = y};
    double ms = time_ms(d, do_step, &sa, trials);
    if (rows[i] == max_m) prefill_linear_ms = ms * 32 / layers;
    double bw = 2 * params / (ms * 1e-3), rate = 2.0 * rows[i] * params / (ms * 1e-3);
    printf("| %d | %.3f | %.0f GB/s | %.0f%% | %.1f TFLOP/s | %.0f%% |\n", rows[i], ms, bw / 1e9,
           100 * bw / copy_bw, rate / 1e12, 100 * rate / gemm_rate);
  }
  // a few rows: the decode kernel against cuBLAS (where the kernel should stop taking rows)
  for (int m1 = 1; m1 <= 8; m1 *= 2)
    for (int blas = 0; blas < 2; blas++) {
      sck_set_variants(&(sck_variants){.small_rows = blas ? -1 : 8});
      step_arg sa = {.d = d, .mats = mats, .n_mats = n_mats, .m = m1, .x = x, .y = y};
      double ms = time_ms(d, do_step, &sa, trials), bw = 2 * params / (ms * 1e-3);
      printf("| %d, %s | %.3f | %.0f GB/s | %.0f%% | | |\n", m1,
             blas ? "cuBLAS" : "the decode kernel", ms, bw / 1e9, 100 * bw / copy_bw);
    }
  sck_set_variants(NULL);
  // the same decode step with f32 weights (what an f32 model runs), over the first layers that fit
  int f32_mats = n_mats < 7 * 8 ? n_mats : 7 * 8; // 8 layers: 7 GB of f32
  float **f = calloc((size_t)f32_mats, sizeof *f);
  double f32_params = 0;
  for (int i = 0; i < f32_mats; i++) {
    f[i] = rand_dev(d, (size_t)mats[i].n * mats[i].k * 4, block, block_bytes);
    f32_params += (double)mats[i].n * mats[i].k;
  }
  step_arg sf = {.d = d, .mats = mats, .n_mats = f32_mats, .m = 1, .x = x, .y = y, .f = f};
  double fms = time_ms(d, do_step, &sf, trials);
  double fbw = 4 * f32_params / (fms * 1e-3);
  printf("\nf32 weights (dev_matmul, cublasSgemm), 1 row, %d layers: %.3f ms, %.0f GB/s, %.0f%% of "
         "the copy bandwidth\n", f32_mats / 7, fms, fbw / 1e9, 100 * fbw / copy_bw);
  for (int i = 0; i < f32_mats; i++) dev_free(d, f[i]);
  for (int i = 0; i < n_mats; i++) dev_free(d, mats[i].h);
  prefill_ops(d, max_m, x, y, trials, prefill_linear_ms);
  dev_free(d, x), dev_free(d, y);
  free(f), free(mats), free(block);
  device_free(d);
  if (engine_too) run_engine(preset, weights, gpu, copy_bw, gemm_rate);
  return 0;
}
#endif
