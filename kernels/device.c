// The device seam's one public layer: the `device` handle (vtable + context), the registry
// that maps a backend name to its open function, and the dev_* wrappers that every caller goes
// through.
//
// The wrappers only check that the handle and the vtable slot exist and forward the call;
// argument checks belong to each backend (kernels/cpu/cpu_device.c, ...), and fault hooks
// (faults/) will be added here later so that every backend gets them. Backends themselves
// live in kernels/cpu/, kernels/cuda/ and kernels/sim/.
#include "kernels/device.h"

#include <stdlib.h>
#include <string.h>

// --- the handle

struct device {
  const device_i *iface; // backend vtable (static storage, not owned)
  void *ctx;             // backend state, released by iface->destroy in device_free
};

sc_status device_wrap(const device_i *iface, void *ctx, device **out) {
  if (!out) return SC_INVALID;
  *out = NULL;
  if (!iface || !iface->name) return SC_INVALID;
  device *d = malloc(sizeof *d);
  if (!d) return SC_OOM; // ctx stays owned by the caller
  d->iface = iface;
  d->ctx = ctx;
  *out = d;
  return SC_OK;
}

void device_free(device *d) {
  if (!d) return;
  if (d->iface->destroy) d->iface->destroy(d->ctx);
  free(d);
}

const char *device_name(const device *d) { return d ? d->iface->name : "none"; }

// --- registry (STYLE 14: optional backends are CMake options plus this one place)

#ifdef SHARDCHECK_HAVE_CUDA
// Defined by kernels/cuda/ when the CUDA backend is built in.
sc_status device_cuda_open(int index, device **out, sc_error *err);
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

sc_status device_open(const char *backend, int index, device **out, sc_error *err) {
  if (!out) return sc_fail(err, SC_INVALID, "device_open: out is NULL");
  *out = NULL;
  if (!backend) return sc_fail(err, SC_INVALID, "device_open: backend name is NULL");
  if (strcmp(backend, "cpu") == 0) return device_cpu_open(out, err); // index ignored on cpu
  if (strcmp(backend, "cuda") == 0) {
#ifdef SHARDCHECK_HAVE_CUDA
    return device_cuda_open(index, out, err);
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

// --- public wrappers (fault hooks go here; keep them thin)

// Resolves the vtable slot or returns SC_INVALID from the enclosing wrapper.
#define DEV_SLOT(d, slot)                                                                          \
  do {                                                                                             \
    if (!(d) || !(d)->iface->slot) return SC_INVALID;                                              \
  } while (0)

sc_status dev_alloc(device *d, size_t bytes, void **out) {
  if (out) *out = NULL;
  DEV_SLOT(d, alloc);
  return d->iface->alloc(d->ctx, bytes, out);
}

void dev_free(device *d, void *ptr) {
  if (!d || !ptr || !d->iface->free) return;
  d->iface->free(d->ctx, ptr);
}

sc_status dev_copy(device *d, void *dst, const void *src, size_t bytes, dev_copy_kind kind) {
  DEV_SLOT(d, copy);
  return d->iface->copy(d->ctx, dst, src, bytes, kind);
}

sc_status dev_mem_info(device *d, size_t *used, size_t *total) {
  DEV_SLOT(d, mem_info);
  return d->iface->mem_info(d->ctx, used, total);
}

sc_status dev_synchronize(device *d) {
  DEV_SLOT(d, synchronize);
  return d->iface->synchronize(d->ctx);
}

sc_status dev_matmul(device *d, int m, int n, int k, const float *x, const float *w, float beta,
                     float *y) {
  DEV_SLOT(d, matmul);
  return d->iface->matmul(d->ctx, m, n, k, x, w, beta, y);
}

sc_status dev_rmsnorm(device *d, int m, int dim, const float *x, const float *w, float eps,
                      float *y) {
  DEV_SLOT(d, rmsnorm);
  return d->iface->rmsnorm(d->ctx, m, dim, x, w, eps, y);
}

sc_status dev_rope(device *d, int m, int n_heads, int head_dim, const int32_t *pos, float theta,
                   float *x) {
  DEV_SLOT(d, rope);
  return d->iface->rope(d->ctx, m, n_heads, head_dim, pos, theta, x);
}

sc_status dev_kv_store(device *d, const dev_kv_batch *b, int n_kv_heads, int head_dim,
                       const float *k, const float *v, dev_kv_layer kv) {
  DEV_SLOT(d, kv_store);
  return d->iface->kv_store(d->ctx, b, n_kv_heads, head_dim, k, v, kv);
}

sc_status dev_attention(device *d, const dev_kv_batch *b, int n_heads, int n_kv_heads,
                        int head_dim, float scale, const float *q, dev_kv_layer kv, float *out) {
  DEV_SLOT(d, attention);
  return d->iface->attention(d->ctx, b, n_heads, n_kv_heads, head_dim, scale, q, kv, out);
}

sc_status dev_swiglu(device *d, int m, int dim, const float *gate, const float *up, float *out) {
  DEV_SLOT(d, swiglu);
  return d->iface->swiglu(d->ctx, m, dim, gate, up, out);
}

sc_status dev_add(device *d, size_t n, const float *a, float *y) {
  DEV_SLOT(d, add);
  return d->iface->add(d->ctx, n, a, y);
}

sc_status dev_embedding(device *d, int m, int dim, const int32_t *ids, const float *table,
                        int row0, int rows, float *out) {
  DEV_SLOT(d, embedding);
  return d->iface->embedding(d->ctx, m, dim, ids, table, row0, rows, out);
}
