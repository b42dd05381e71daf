// The device seam's one public layer: the `device` handle (vtable + context), the registry
// that maps a backend name to its open function, the dev_* wrappers that every caller goes
// through, and the fault hooks that live in those wrappers (so every backend gets them).
//
// The wrappers check that the handle and the vtable slot exist and forward the call; argument
// checks belong to each backend (kernels/cpu/cpu_device.c, ...). Fault hooks cost one relaxed
// atomic load per call while no fault is set. What each fault does, per wrapper:
//   lost:    alloc, copy, mem_info, synchronize and every op fail with SC_DEVICE (free still
//            frees, so a lost device can be torn down).
//   hang:    copy, synchronize and every op block until the hang is cleared (device_set_fault)
//            or device_fault_release is called (SC_ABORTED). alloc, free and mem_info never
//            block: they are host-side bookkeeping, and the engine's control path (admission,
//            stats) must stay responsive. Whoever waits on a hung device bounds the wait: the
//            executor's collective deadline and step watchdog (engine/executor.c).
//   slow:    copy, synchronize and every op are timed on the monotonic clock and owe (factor -
//            1) x their own time; an op after which 0.2 ms or more is owed sleeps it (what the
//            sleep over- or under-shoots carries over), so the device runs factor x slower on
//            average even when its ops take microseconds. A sleep is cut short when the fault
//            is replaced or the device released.
//   oom:     alloc counts oom_after down and fails with SC_OOM at zero; transient faults turn
//            themselves off after that one failure, persistent ones fail every later alloc.
//   corrupt: after a successful matmul (f32, int8 or bf16), one element of y (a different one
//            each call) becomes NaN, or has its top exponent bit flipped (|y| < 2 becomes huge
//            or inf).
// Deciding when to inject (scenario timelines) is faults/'s; backends live in kernels/cpu/,
// kernels/cuda/ and kernels/sim/.
#include "kernels/device.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/clock.h"
#ifdef SHARDCHECK_HAVE_CUDA
#include "kernels/cuda_api.h"
#endif

// --- the handle

struct device {
  const device_i *iface; // backend vtable (static storage, not owned)
  void *ctx;             // backend state, released by iface->destroy in device_free

  atomic_bool any_fault; // fault (below) is not dev_fault_none(): the only hot-path read
  pthread_mutex_t fmu;   // guards fault, fault_gen, released, corrupt_calls
  pthread_cond_t fcv;    // broadcast when fault or released changes (wakes hung and slow ops)
  dev_fault fault;
  uint64_t fault_gen;     // bumped by every device_set_fault
  bool released;          // device_fault_release since the fault was last replaced
  uint64_t corrupt_calls; // matmuls poisoned so far (picks the element of the next one)
  double slow_debt_ns;    // slow fault: extra time owed and not slept yet (negative: overslept)
};

// A slow fault sleeps what it owes once this much has built up (ns): short enough that every
// step of a small model sleeps a few times (step times stay even), long enough that a sleep's
// wake-up latency is small next to it (and what it overshoots is carried over).
#define SLOW_QUANTUM_NS 2e5

sc_status device_wrap(const device_i *iface, void *ctx, device **out) {
  if (!out) return SC_INVALID;
  *out = NULL;
  if (!iface || !iface->name) return SC_INVALID;
  device *d = calloc(1, sizeof *d);
  if (!d) return SC_OOM; // ctx stays owned by the caller
  if (pthread_mutex_init(&d->fmu, NULL)) {
    free(d);
    return SC_OOM;
  }
  pthread_condattr_t ca; // fcv: timed waits (slow ops) on the monotonic clock
  int rc = pthread_condattr_init(&ca);
  if (!rc) rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  if (!rc) rc = pthread_cond_init(&d->fcv, &ca);
  pthread_condattr_destroy(&ca);
  if (rc) {
    pthread_mutex_destroy(&d->fmu);
    free(d);
    return SC_OOM;
  }
  d->iface = iface;
  d->ctx = ctx;
  d->fault = dev_fault_none();
  atomic_init(&d->any_fault, false);
  *out = d;
  return SC_OK;
}

void device_free(device *d) {
  if (!d) return;
  if (d->iface->destroy) d->iface->destroy(d->ctx);
  pthread_cond_destroy(&d->fcv);
  pthread_mutex_destroy(&d->fmu);
  free(d);
}

const char *device_name(const device *d) { return d ? d->iface->name : "none"; }

const char *dev_last_error(const device *d) {
  const char *m = d && d->iface->last_error ? d->iface->last_error(d->ctx) : NULL;
  return m ? m : "";
}

void *device_backend_ctx(const device *d) { return d ? d->ctx : NULL; }

// --- registry (optional backends are CMake options plus this one place: docs/design.md)

#ifdef SHARDCHECK_HAVE_CUDA
// kernels/cuda/ is loaded from its library on the first cuda device (kernels/cuda_api.h).
#define SC_DEVICE_BACKENDS "cpu, cuda"
#else
#define SC_DEVICE_BACKENDS "cpu"
#endif

bool device_backend_available(const char *backend) {
  if (!backend) return false;
  if (strcmp(backend, "cpu") == 0) return true;
#ifdef SHARDCHECK_HAVE_CUDA
  if (strcmp(backend, "cuda") == 0) return true;
#endif
  return false;
}

int device_backend_count(const char *backend) {
  if (!backend) return 0;
  if (strcmp(backend, "cpu") == 0) return 1;
#ifdef SHARDCHECK_HAVE_CUDA
  if (strcmp(backend, "cuda") == 0) {
    const cuda_api *cu = cuda_api_get(NULL);
    return cu ? cu->device_count() : 0;
  }
#endif
  return 0;
}

sc_status device_open(const char *backend, int index, device **out, sc_error *err) {
  if (!out) return sc_fail(err, SC_INVALID, "device_open: out is NULL");
  *out = NULL;
  if (!backend) return sc_fail(err, SC_INVALID, "device_open: backend name is NULL");
  if (strcmp(backend, "cpu") == 0) return device_cpu_open(out, err); // index ignored on cpu
  if (strcmp(backend, "cuda") == 0) {
#ifdef SHARDCHECK_HAVE_CUDA
    const cuda_api *cu = cuda_api_get(err);
    return cu ? cu->device_open(index, out, err) : SC_INVALID;
#else
    (void)index;
    return sc_fail(err, SC_INVALID,
                   "backend 'cuda' is not built in: configure with SHARDCHECK_CUDA=ON on a "
                   "machine with the CUDA toolkit");
#endif
  }
  return sc_fail(err, SC_INVALID, "unknown device backend '%s': available backends: %s", backend,
                 SC_DEVICE_BACKENDS);
}

// --- fault hooks

dev_fault dev_fault_none(void) { return (dev_fault){.oom_after = -1}; }

static bool fault_is_none(const dev_fault *f) {
  return !f->lost && !f->hang && !(f->slow_factor > 1.0) && f->oom_after < 0 &&
         f->corrupt == DEV_CORRUPT_NONE;
}

// Publishes whether any fault is set (fmu held).
static void fault_changed(device *d) {
  atomic_store_explicit(&d->any_fault, !fault_is_none(&d->fault), memory_order_relaxed);
  pthread_cond_broadcast(&d->fcv);
}

void device_set_fault(device *d, const dev_fault *f) {
  if (!d) return;
  pthread_mutex_lock(&d->fmu);
  d->fault = f ? *f : dev_fault_none();
  d->fault_gen++;
  d->released = false;
  d->slow_debt_ns = 0;
  fault_changed(d);
  pthread_mutex_unlock(&d->fmu);
}

dev_fault device_get_fault(const device *d) {
  if (!d) return dev_fault_none();
  device *m = (device *)d; // the mutex is not part of the logical state
  pthread_mutex_lock(&m->fmu);
  dev_fault f = m->fault;
  pthread_mutex_unlock(&m->fmu);
  return f;
}

void device_fault_release(device *d) {
  if (!d) return;
  pthread_mutex_lock(&d->fmu);
  d->released = true;
  pthread_cond_broadcast(&d->fcv);
  pthread_mutex_unlock(&d->fmu);
}

static bool faulty(device *d) {
  return atomic_load_explicit(&d->any_fault, memory_order_relaxed);
}

// What a call meets on entry (fault set): SC_DEVICE when lost; with may_block, waits out a
// hang (SC_ABORTED once released). *slow: the factor to stretch the call by (1: none).
static sc_status fault_enter(device *d, bool may_block, double *slow) {
  pthread_mutex_lock(&d->fmu);
  while (may_block && d->fault.hang && !d->fault.lost && !d->released)
    pthread_cond_wait(&d->fcv, &d->fmu);
  sc_status s = SC_OK;
  if (d->fault.lost)
    s = SC_DEVICE;
  else if (may_block && d->fault.hang)
    s = SC_ABORTED; // released while hung
  *slow = d->fault.slow_factor > 1.0 ? d->fault.slow_factor : 1.0;
  pthread_mutex_unlock(&d->fmu);
  return s;
}

// Sleeps (factor - 1) x the time since t0 (monotonic ns); wakes early when the fault is
// replaced or the device released (a step being abandoned must not wait out a long stretch).
static void fault_stretch(device *d, double factor, uint64_t t0) {
  uint64_t now = sc_monotonic_ns();
  pthread_mutex_lock(&d->fmu);
  // The extra time is owed, and slept once a quantum has built up: a sleep per op would cost
  // its wake-up latency (tens of microseconds) on every short op and slow it far more than
  // asked. What a sleep over- or under-shoots is carried to the next one.
  d->slow_debt_ns += (factor - 1.0) * (double)(now - t0);
  if (d->slow_debt_ns < SLOW_QUANTUM_NS) {
    pthread_mutex_unlock(&d->fmu);
    return;
  }
  double want = d->slow_debt_ns > 1e18 ? 1e18 : d->slow_debt_ns;
  uint64_t until = now + (uint64_t)want;
  struct timespec ts = {.tv_sec = (time_t)(until / 1000000000ull),
                        .tv_nsec = (long)(until % 1000000000ull)};
  uint64_t gen = d->fault_gen;
  while (d->fault_gen == gen && !d->released)
    if (pthread_cond_timedwait(&d->fcv, &d->fmu, &ts) == ETIMEDOUT) break;
  if (d->fault_gen == gen) d->slow_debt_ns -= (double)(sc_monotonic_ns() - now);
  pthread_mutex_unlock(&d->fmu);
}

// Poisons one element of y (m, n) after a matmul when a corrupt fault is set.
static void fault_corrupt(device *d, int m, int n, float *y) {
  if (m <= 0 || n <= 0) return;
  pthread_mutex_lock(&d->fmu);
  dev_corrupt how = d->fault.lost ? DEV_CORRUPT_NONE : d->fault.corrupt;
  uint64_t call = how != DEV_CORRUPT_NONE ? d->corrupt_calls++ : 0;
  pthread_mutex_unlock(&d->fmu);
  if (how == DEV_CORRUPT_NONE) return;
  // A different element each call (a fixed sequence, so runs repeat): Weyl step mod m*n.
  size_t total = (size_t)m * (size_t)n, i = (size_t)((call * 0x9E3779B97F4A7C15ull) % total);
  float v = 0.0f;
  if (!d->iface->copy || d->iface->copy(d->ctx, &v, y + i, sizeof v, DEV_D2H) != SC_OK) return;
  if (how == DEV_CORRUPT_NAN) {
    v = __builtin_nanf("");
  } else {
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    bits ^= 0x40000000u; // the top exponent bit
    memcpy(&v, &bits, sizeof v);
  }
  d->iface->copy(d->ctx, y + i, &v, sizeof v, DEV_H2D);
}

// --- public wrappers

// Resolves the vtable slot or returns SC_INVALID from the enclosing wrapper.
#define DEV_SLOT(d, slot)                                                                          \
  do {                                                                                             \
    if (!(d) || !(d)->iface->slot) return SC_INVALID;                                              \
  } while (0)

// Runs `call` (an expression giving the backend's sc_status) through the fault hooks: the fast
// path is one relaxed load; otherwise lost / hang / slow as the file comment says.
#define DEV_CALL(d, call)                                                                          \
  do {                                                                                             \
    if (!faulty(d)) return (call);                                                                 \
    double slow_;                                                                                  \
    sc_status fs_ = fault_enter((d), true, &slow_);                                                \
    if (fs_ != SC_OK) return fs_;                                                                  \
    uint64_t t0_ = slow_ > 1.0 ? sc_monotonic_ns() : 0;                                            \
    sc_status cs_ = (call);                                                                        \
    if (slow_ > 1.0) fault_stretch((d), slow_, t0_);                                                    \
    return cs_;                                                                                    \
  } while (0)

sc_status dev_alloc(device *d, size_t bytes, void **out) {
  if (out) *out = NULL;
  DEV_SLOT(d, alloc);
  if (faulty(d)) {
    pthread_mutex_lock(&d->fmu);
    sc_status s = SC_OK;
    if (d->fault.lost) {
      s = SC_DEVICE;
    } else if (d->fault.oom_after == 0) {
      s = SC_OOM;
      if (!d->fault.oom_persistent) {
        d->fault.oom_after = -1; // a transient fault fails one allocation
        fault_changed(d);
      }
    } else if (d->fault.oom_after > 0) {
      d->fault.oom_after--;
    }
    pthread_mutex_unlock(&d->fmu);
    if (s != SC_OK) return s;
  }
  return d->iface->alloc(d->ctx, bytes, out);
}

void dev_free(device *d, void *ptr) {
  if (!d || !ptr || !d->iface->free) return;
  d->iface->free(d->ctx, ptr);
}

sc_status dev_copy(device *d, void *dst, const void *src, size_t bytes, dev_copy_kind kind) {
  DEV_SLOT(d, copy);
  DEV_CALL(d, d->iface->copy(d->ctx, dst, src, bytes, kind));
}

sc_status dev_mem_info(device *d, size_t *used, size_t *total) {
  DEV_SLOT(d, mem_info);
  if (faulty(d)) {
    double slow;
    SC_TRY(fault_enter(d, false, &slow));
  }
  return d->iface->mem_info(d->ctx, used, total);
}

sc_status dev_synchronize(device *d) {
  DEV_SLOT(d, synchronize);
  DEV_CALL(d, d->iface->synchronize(d->ctx));
}

// The matmul backend call, then the corrupt hook (the faulty path of dev_matmul).
static sc_status matmul_then_corrupt(device *d, int m, int n, int k, const float *x,
                                     const float *w, float beta, float *y) {
  sc_status s = d->iface->matmul(d->ctx, m, n, k, x, w, beta, y);
  if (s == SC_OK) fault_corrupt(d, m, n, y);
  return s;
}

sc_status dev_matmul(device *d, int m, int n, int k, const float *x, const float *w, float beta,
                     float *y) {
  DEV_SLOT(d, matmul);
  if (!faulty(d)) return d->iface->matmul(d->ctx, m, n, k, x, w, beta, y);
  DEV_CALL(d, matmul_then_corrupt(d, m, n, k, x, w, beta, y));
}

static sc_status matmul_q8_then_corrupt(device *d, int m, int n, int k, const float *x,
                                        const int8_t *q, const float *scale, float beta,
                                        float *y) {
  sc_status s = d->iface->matmul_q8(d->ctx, m, n, k, x, q, scale, beta, y);
  if (s == SC_OK) fault_corrupt(d, m, n, y);
  return s;
}

bool dev_has_matmul_q8(const device *d) { return d && d->iface->matmul_q8; }

static sc_status matmul_bf16_then_corrupt(device *d, int m, int n, int k, const float *x,
                                          const uint16_t *w, float beta, float *y) {
  sc_status s = d->iface->matmul_bf16(d->ctx, m, n, k, x, w, beta, y);
  if (s == SC_OK) fault_corrupt(d, m, n, y);
  return s;
}

bool dev_has_matmul_bf16(const device *d) { return d && d->iface->matmul_bf16; }

sc_status dev_matmul_bf16(device *d, int m, int n, int k, const float *x, const uint16_t *w,
                          float beta, float *y) {
  DEV_SLOT(d, matmul_bf16);
  if (!faulty(d)) return d->iface->matmul_bf16(d->ctx, m, n, k, x, w, beta, y);
  DEV_CALL(d, matmul_bf16_then_corrupt(d, m, n, k, x, w, beta, y));
}

sc_status dev_matmul_bf16_group(device *d, int m, int k, const float *x, int count,
                                const uint16_t *const *w, const int *n, float *const *y) {
  DEV_SLOT(d, matmul_bf16);
  if (count < 1 || count > DEV_GROUP_MAX || !w || !n || !y) return SC_INVALID;
  if (d->iface->matmul_bf16_group && !faulty(d))
    return d->iface->matmul_bf16_group(d->ctx, m, k, x, count, w, n, y);
  for (int i = 0; i < count; i++) {
    sc_status s = dev_matmul_bf16(d, m, n[i], k, x, w[i], 0.0f, y[i]);
    if (s != SC_OK) return s;
  }
  return SC_OK;
}

static sc_status matmul_f16_then_corrupt(device *d, int m, int n, int k, const float *x,
                                         const uint16_t *w, float beta, float *y) {
  sc_status s = d->iface->matmul_f16(d->ctx, m, n, k, x, w, beta, y);
  if (s == SC_OK) fault_corrupt(d, m, n, y);
  return s;
}

bool dev_has_matmul_f16(const device *d) { return d && d->iface->matmul_f16; }

sc_status dev_matmul_f16(device *d, int m, int n, int k, const float *x, const uint16_t *w,
                         float beta, float *y) {
  DEV_SLOT(d, matmul_f16);
  if (!faulty(d)) return d->iface->matmul_f16(d->ctx, m, n, k, x, w, beta, y);
  DEV_CALL(d, matmul_f16_then_corrupt(d, m, n, k, x, w, beta, y));
}

void dev_f16_from_f32(const float *w, size_t n, uint16_t *out) {
  for (size_t i = 0; i < n; i++) {
    uint32_t b;
    memcpy(&b, &w[i], sizeof b);
    uint32_t sign = (b >> 16) & 0x8000u, e = (b >> 23) & 0xffu, mant = b & 0x7fffffu;
    if (e == 0xffu) { // inf, or NaN kept quiet
      out[i] = (uint16_t)(sign | 0x7c00u | (mant ? 0x0200u | (mant >> 13) : 0));
      continue;
    }
    int ex = (int)e - 127 + 15; // the half's biased exponent
    uint32_t h;
    if (ex >= 31) {
      h = 0x7c00u; // too large: inf
    } else if (ex <= 0) { // a subnormal half, or zero: shift the significand with its lead bit
      if (ex < -10) {
        h = 0;
      } else {
        uint32_t sig = mant | 0x800000u;
        int shift = 14 - ex; // 24-bit significand down to the half's 10 bits at exponent -14
        uint32_t q = sig >> shift, rem = sig & ((1u << shift) - 1u), half = 1u << (shift - 1);
        h = q + (rem > half || (rem == half && (q & 1u))); // may carry into the first normal
      }
    } else {
      uint32_t q = ((uint32_t)ex << 10) | (mant >> 13), rem = mant & 0x1fffu;
      h = q + (rem > 0x1000u || (rem == 0x1000u && (q & 1u))); // a carry may reach inf: right
    }
    out[i] = (uint16_t)(sign | h);
  }
}

void dev_bf16_from_f32(const float *w, size_t n, uint16_t *out) {
  for (size_t i = 0; i < n; i++) {
    uint32_t b;
    memcpy(&b, &w[i], sizeof b);
    if ((b & 0x7f800000u) == 0x7f800000u && (b & 0x007fffffu)) // NaN: keep it a quiet NaN
      out[i] = (uint16_t)((b >> 16) | 0x0040u);
    else // round to nearest even on the 16 bits dropped (inf stays inf)
      out[i] = (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
  }
}

sc_status dev_matmul_q8(device *d, int m, int n, int k, const float *x, const int8_t *q,
                        const float *scale, float beta, float *y) {
  DEV_SLOT(d, matmul_q8);
  if (!faulty(d)) return d->iface->matmul_q8(d->ctx, m, n, k, x, q, scale, beta, y);
  DEV_CALL(d, matmul_q8_then_corrupt(d, m, n, k, x, q, scale, beta, y));
}

// Largest |q| of the symmetric int8 weights: -128 is left out so that the range is symmetric.
enum { Q8_QMAX = 127 };

void dev_q8_quantize(const float *w, int n, int k, int8_t *q, float *scale) {
  for (size_t j = 0; j < (size_t)n; j++) {
    const float *row = w + j * (size_t)k;
    float mx = 0;
    for (int i = 0; i < k; i++) mx = fmaxf(mx, fabsf(row[i]));
    float s = mx / (float)Q8_QMAX, inv = mx > 0 ? (float)Q8_QMAX / mx : 0;
    scale[j] = s;
    for (int i = 0; i < k; i++) {
      long v = lrintf(row[i] * inv);
      q[j * (size_t)k + (size_t)i] = (int8_t)(v > Q8_QMAX ? Q8_QMAX : v < -Q8_QMAX ? -Q8_QMAX : v);
    }
  }
}

sc_status dev_rmsnorm(device *d, int m, int dim, const float *x, const float *w, float eps,
                      float *y) {
  DEV_SLOT(d, rmsnorm);
  DEV_CALL(d, d->iface->rmsnorm(d->ctx, m, dim, x, w, eps, y));
}

sc_status dev_rope(device *d, int m, int n_heads, int head_dim, const int32_t *pos, float theta,
                   float *x) {
  DEV_SLOT(d, rope);
  DEV_CALL(d, d->iface->rope(d->ctx, m, n_heads, head_dim, pos, theta, x));
}

sc_status dev_kv_store(device *d, const dev_kv_batch *b, int n_kv_heads, int head_dim,
                       const float *k, const float *v, dev_kv_layer kv) {
  DEV_SLOT(d, kv_store);
  DEV_CALL(d, d->iface->kv_store(d->ctx, b, n_kv_heads, head_dim, k, v, kv));
}

sc_status dev_attention(device *d, const dev_kv_batch *b, int n_heads, int n_kv_heads,
                        int head_dim, float scale, const float *q, dev_kv_layer kv, float *out) {
  DEV_SLOT(d, attention);
  DEV_CALL(d, d->iface->attention(d->ctx, b, n_heads, n_kv_heads, head_dim, scale, q, kv, out));
}

sc_status dev_swiglu(device *d, int m, int dim, const float *gate, const float *up, float *out) {
  DEV_SLOT(d, swiglu);
  DEV_CALL(d, d->iface->swiglu(d->ctx, m, dim, gate, up, out));
}

sc_status dev_add(device *d, size_t n, const float *a, float *y) {
  DEV_SLOT(d, add);
  DEV_CALL(d, d->iface->add(d->ctx, n, a, y));
}

sc_status dev_embedding(device *d, int m, int dim, const int32_t *ids, const float *table,
                        int row0, int rows, float *out) {
  DEV_SLOT(d, embedding);
  DEV_CALL(d, d->iface->embedding(d->ctx, m, dim, ids, table, row0, rows, out));
}

sc_status dev_add_rmsnorm(device *d, int m, int dim, const float *a, float *x, const float *w,
                          float eps, float *y) {
  if (!d) return SC_INVALID;
  if (m < 0 || dim <= 0) return SC_INVALID;
  if (d->iface->add_rmsnorm && !faulty(d))
    return d->iface->add_rmsnorm(d->ctx, m, dim, a, x, w, eps, y);
  SC_TRY(dev_add(d, (size_t)m * (size_t)dim, a, x));
  return dev_rmsnorm(d, m, dim, x, w, eps, y);
}

sc_status dev_rope_kv_store(device *d, const dev_kv_batch *b, int n_heads, int n_kv_heads,
                            int head_dim, float theta, float *q, float *k, const float *v,
                            dev_kv_layer kv) {
  if (!d || !b) return SC_INVALID;
  if (d->iface->rope_kv_store && !faulty(d))
    return d->iface->rope_kv_store(d->ctx, b, n_heads, n_kv_heads, head_dim, theta, q, k, v, kv);
  SC_TRY(dev_rope(d, b->n_tok, n_heads, head_dim, b->pos, theta, q));
  SC_TRY(dev_rope(d, b->n_tok, n_kv_heads, head_dim, b->pos, theta, k));
  return dev_kv_store(d, b, n_kv_heads, head_dim, k, v, kv);
}

sc_status dev_graph_begin(device *d, uint64_t key, int rows, int *mode) {
  if (!mode) return SC_INVALID;
  *mode = DEV_GRAPH_OFF;
  if (!d || !d->iface->graph_begin || !d->iface->graph_end || faulty(d)) return SC_OK;
  return d->iface->graph_begin(d->ctx, key, rows, mode);
}

sc_status dev_graph_end(device *d, bool keep) {
  if (!d || !d->iface->graph_end) return SC_INVALID;
  return d->iface->graph_end(d->ctx, keep);
}

bool dev_has_argmax(const device *d) { return d && d->iface->argmax; }

bool dev_has_sample(const device *d) { return d && d->iface->sample; }

sc_status dev_sample(device *d, int m, int n, float *x, const dev_sample_row *rows, int32_t *idx) {
  DEV_SLOT(d, sample);
  DEV_CALL(d, d->iface->sample(d->ctx, m, n, x, rows, idx));
}

sc_status dev_argmax(device *d, int m, int n, const float *x, int32_t *idx, float *val) {
  DEV_SLOT(d, argmax);
  DEV_CALL(d, d->iface->argmax(d->ctx, m, n, x, idx, val));
}
