// The CUDA backend against the GPU's own ceilings, measured in one run: device-to-device copy
// bandwidth and a large bf16 cuBLAS GEMM (the two roofs), then the linear layers of one
// llama3-8b decode step and of a 2,048-token prefill through the device seam with bf16
// weights (dev_matmul_bf16, what the engine runs), as a share of each roof:
//   decode: weight bytes read per step / step time, against the copy bandwidth (target 80%);
//   prefill: 2 x tokens x parameters / time, against the GEMM rate (target 60%).
// Also the same decode step in fp32 (dev_matmul) and at batch 16, 64 and 256. Weights are random
// bf16 made on the host in one 64 MiB block and copied over the layers' weights on the device.
// Every figure is the median of its trials, timed with CUDA events on the device's stream
// (through dev_synchronize, so the seam's own cost is in). Prints Markdown. A benchmark, never
// a test: nothing here asserts a time; ci/gpu.sh does not run it, a GPU session does:
//   build/gpu/bench_cuda [--gpu N] [--trials N] [--layers N]
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
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/device.h"

#define MIB ((size_t)1 << 20)

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

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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

int main(int argc, char **argv) {
  int gpu = 0, trials = 10, layers = 32;
  static const struct option opts[] = {
      {"gpu", required_argument, 0, 'g'}, {"trials", required_argument, 0, 't'},
      {"layers", required_argument, 0, 'l'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
    if (c == 'g') gpu = atoi(optarg);
    else if (c == 't') trials = atoi(optarg);
    else if (c == 'l') layers = atoi(optarg);
    else {
      fputs("usage: bench_cuda [--gpu N] [--trials N] [--layers N (of llama3-8b's 32)]\n",
            c == 'h' ? stdout : stderr);
      return c == 'h' ? 0 : 2;
    }
  }
  if (trials < 1 || layers < 1 || layers > 32) die("arguments", "--trials >= 1, 1 <= --layers <= 32");
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

  // llama3-8b: dim 4096, 32 heads (8 KV) of 128, ffn 14336
  const int D = 4096, KV = 1024, F = 14336;
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
  printf("| rows (tokens) | step ms | weights read | share of copy bandwidth | GEMM rate | share of "
         "the GEMM roof |\n|---|---|---|---|---|---|\n");
  const int rows[] = {1, 16, 64, 256, 2048};
  for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
    step_arg sa = {.d = d, .mats = mats, .n_mats = n_mats, .m = rows[i], .x = x, .y = y};
    double ms = time_ms(d, do_step, &sa, trials);
    double bw = 2 * params / (ms * 1e-3), rate = 2.0 * rows[i] * params / (ms * 1e-3);
    printf("| %d | %.3f | %.0f GB/s | %.0f%% | %.1f TFLOP/s | %.0f%% |\n", rows[i], ms, bw / 1e9,
           100 * bw / copy_bw, rate / 1e12, 100 * rate / gemm_rate);
  }
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
  dev_free(d, x), dev_free(d, y);
  free(f), free(mats), free(block);
  device_free(d);
  return 0;
}
#endif
