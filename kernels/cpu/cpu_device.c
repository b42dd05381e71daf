// The cpu device backend: host memory with exact accounting, the vtable that names the ops of
// the other files of kernels/cpu/, and the process-wide settings (threads, vector build).
//
// The ops: GEMMs through CBLAS (OpenBLAS) or, for 1 to 128 rows on a CPU with AVX-512, kernels
// of their own, and the int8 weight-only matmul (cpu_matmul.c); RMSNorm, RoPE, SwiGLU, add,
// embedding, argmax (cpu_ops.c); paged KV store and causal GQA attention (cpu_attention.c).
// The own kernels, and attention and SwiGLU on large batches, run on the calling thread and a
// small pool of threads per device (cpu_pool.c); other ops on the calling thread; the CBLAS
// GEMMs may use BLAS threads. What they share is in cpu_impl.h.
//
// What it leaves to others: the public wrappers and the backend registry (kernels/device.c),
// fault injection (faults/, at the wrapper layer), the KV block allocator and block tables
// (engine/kv_cache.c), and any parallelism across ranks (the engine runs one thread per rank;
// BLAS runs one thread per call, its products split over the pool: device_cpu_set_threads). Every op is synchronous, so
// synchronize is a no-op. Nothing here prints or exits; bad arguments give SC_INVALID.
//
// Thread safety: a cpu device keeps no state but its allocation counter (atomic), its kernels'
// thread pool and the int8 tile scratch (each held by one call at a time; a call that finds
// them taken works alone, with a scratch of its own), so several threads may call ops on
// different devices, or on the same one, at the same time, as long as their output buffers do
// not overlap.
#include <cblas.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/cpu_impl.h"
#include "kernels/device.h"

// --- context and memory
#define CPU_MAGIC 0x5348415244435055ull // "SHARDCPU": marks a live allocation

// Sits right before every pointer alloc returns, so free knows the size and the owner.
typedef struct cpu_hdr {
  void *raw;       // what calloc returned (to free)
  size_t bytes;    // size the caller asked for
  const void *own; // the cpu_ctx that allocated it
  uint64_t magic;  // CPU_MAGIC while live, 0 after free
} cpu_hdr;

static size_t cpu_physical_bytes(void) {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return SIZE_MAX;
  return (size_t)pages * (size_t)page;
}

// Reserves bytes in the counter unless used would pass total; false when it would.
static bool cpu_reserve(cpu_ctx *c, size_t bytes) {
  size_t cur = atomic_load(&c->used);
  do {
    if (bytes > c->total || cur > c->total - bytes) return false;
  } while (!atomic_compare_exchange_weak(&c->used, &cur, cur + bytes));
  return true;
}

// Zeroed, 64-byte aligned. calloc (not memset) so that big arenas are zero pages until used.
// On failure *out is NULL and the counter is unchanged.
static sc_status cpu_alloc(void *ctx, size_t bytes, void **out) {
  cpu_ctx *c = ctx;
  if (!out) return SC_INVALID;
  *out = NULL;
  const size_t pad = sizeof(cpu_hdr) + CPU_ALIGN;
  if (bytes > SIZE_MAX - pad) return SC_OOM;
  if (!cpu_reserve(c, bytes)) return SC_OOM;
  void *raw = calloc(1, bytes + pad);
  if (!raw) {
    atomic_fetch_sub(&c->used, bytes);
    return SC_OOM;
  }
  uintptr_t p = ((uintptr_t)raw + sizeof(cpu_hdr) + CPU_ALIGN - 1) & ~(uintptr_t)(CPU_ALIGN - 1);
  cpu_hdr *h = (cpu_hdr *)p - 1;
  *h = (cpu_hdr){.raw = raw, .bytes = bytes, .own = c, .magic = CPU_MAGIC};
  *out = (void *)p;
  return SC_OK;
}

// Freeing a pointer this device did not allocate (or twice) is a broken invariant: it would
// corrupt the accounting that tests and fault checks read, so it aborts.
static void cpu_free(void *ctx, void *ptr) {
  cpu_ctx *c = ctx;
  if (!ptr) return;
  cpu_hdr *h = (cpu_hdr *)ptr - 1;
  SC_ASSERT(h->magic == CPU_MAGIC && h->own == c);
  h->magic = 0;
  atomic_fetch_sub(&c->used, h->bytes);
  free(h->raw);
}

// Host memory on both sides, so every kind is a memmove (D2D may overlap).
static sc_status cpu_copy(void *ctx, void *dst, const void *src, size_t bytes,
                          dev_copy_kind kind) {
  if (kind != DEV_H2D && kind != DEV_D2H && kind != DEV_D2D) return SC_INVALID;
  if (bytes == 0) return SC_OK;
  if (!dst || !src) return SC_INVALID;
  memmove(dst, src, bytes);
  return SC_OK;
}

static sc_status cpu_mem_info(void *ctx, size_t *used, size_t *total) {
  cpu_ctx *c = ctx;
  if (used) *used = atomic_load(&c->used);
  if (total) *total = c->total;
  return SC_OK;
}

static sc_status cpu_synchronize(void *ctx) { return SC_OK; }
// --- which build runs (process-wide)

static atomic_int cpu_isa_cap = DEV_CPU_ISA_AVX512; // device_cpu_set_isa

// The best build this CPU (and its OS: the cpuid checks include XGETBV) can run.
static dev_cpu_isa cpu_isa_best(void) {
#ifdef CPU_X86
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma"))
    return DEV_CPU_ISA_AVX512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return DEV_CPU_ISA_AVX2;
#endif
  return DEV_CPU_ISA_C;
}

dev_cpu_isa cpu_isa_now(void) {
  static atomic_int best = -1; // computed once; every thread computes the same value
  int b = atomic_load_explicit(&best, memory_order_relaxed);
  if (b < 0) {
    b = (int)cpu_isa_best();
    atomic_store_explicit(&best, b, memory_order_relaxed);
  }
  int cap = atomic_load_explicit(&cpu_isa_cap, memory_order_relaxed);
  return (dev_cpu_isa)(b < cap ? b : cap);
}

dev_cpu_isa device_cpu_set_isa(dev_cpu_isa cap) {
  if (cap < DEV_CPU_ISA_C) cap = DEV_CPU_ISA_C;
  if (cap > DEV_CPU_ISA_AVX512) cap = DEV_CPU_ISA_AVX512;
  atomic_store(&cpu_isa_cap, (int)cap);
  return cpu_isa_now();
}

const char *device_cpu_isa_name(dev_cpu_isa isa) {
  switch (isa) {
  case DEV_CPU_ISA_C: return "c";
  case DEV_CPU_ISA_AVX2: return "avx2";
  case DEV_CPU_ISA_AVX512: return "avx512";
  }
  return "unknown";
}
// --- vtable, open, threads

static atomic_int cpu_threads; // device_cpu_set_threads; 0: one per core

static void cpu_destroy(void *ctx) {
  cpu_ctx *c = ctx;
  cpu_pool_free(c->pool);
  free(c->scratch);
  pthread_mutex_destroy(&c->scratch_mu);
  pthread_mutex_destroy(&c->pool_mu);
  free(c);
}

static const device_i cpu_iface = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .mem_info = cpu_mem_info,
    .synchronize = cpu_synchronize,
    .matmul = cpu_matmul,
    .matmul_q8 = cpu_matmul_q8,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .kv_store = cpu_kv_store,
    .attention = cpu_attention,
    .swiglu = cpu_swiglu,
    .add = cpu_add,
    .embedding = cpu_embedding,
    .argmax = cpu_argmax,
    .destroy = cpu_destroy,
};

sc_status device_cpu_open(device **out, sc_error *err) {
  if (!out) return sc_fail(err, SC_INVALID, "device_cpu_open: out is NULL");
  *out = NULL;
  cpu_ctx *c = calloc(1, sizeof *c);
  if (!c) return sc_fail(err, SC_OOM, "cpu device: out of host memory for its context");
  atomic_init(&c->used, 0);
  c->total = cpu_physical_bytes();
  c->threads = atomic_load(&cpu_threads);
#ifdef OPENBLAS_VERSION
  openblas_set_num_threads(1); // the pool splits BLAS's products (cpu_matmul.c, blas_split)
#endif
  if (pthread_mutex_init(&c->pool_mu, NULL)) {
    free(c);
    return sc_fail(err, SC_OOM, "cpu device: cannot create a mutex");
  }
  if (pthread_mutex_init(&c->scratch_mu, NULL)) {
    pthread_mutex_destroy(&c->pool_mu);
    free(c);
    return sc_fail(err, SC_OOM, "cpu device: cannot create a mutex");
  }
  sc_status s = device_wrap(&cpu_iface, c, out);
  if (s != SC_OK) {
    cpu_destroy(c);
    return sc_fail(err, s, "cpu device: could not wrap the backend (%s)", sc_status_name(s));
  }
  return SC_OK;
}

void device_cpu_set_threads(int n) {
  if (n < 1) n = 1;
  atomic_store(&cpu_threads, n); // the matmuls' pools (devices opened from now on)
#ifdef OPENBLAS_VERSION
  // BLAS runs one thread per call: the pool splits its products (cpu_matmul.c, blas_split)
  openblas_set_num_threads(1);
#endif
}

int device_cpu_cores(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}
