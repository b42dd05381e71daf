// The GEMM tables of a profile: every (n, k, threads) one rank of each TP degree runs, timed
// against rows m, with companion ranks running beside the timed one where the cores leave
// room; gemm_eff, derived from one of the tables; and the timed GEMM call (prof_mm_call),
// which host.c's square GEMM shares.
//
// GEMM weights rotate through a pool larger than the last-level cache, so small-m GEMMs read
// their weights from memory as the engine's do (a model's layers do not fit in cache).
//
// Left to others: timing and the pool's size (profile.c), the cost model that prices the same
// shapes (kernels/sim/sim_cost.c), writing the tables (write.c).
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/shard.h"
#include "kernels/clock.h"
#include "kernels/device.h"
#include "profile/profile_impl.h"

#define PROF_GEMM_COPIES_MAX 4096 // weight copies rotated through per GEMM shape

// One call of the GEMM of c (an mm_ctx) on the weights' copy iter picks; publishes its shape
// for the companion ranks first when it has any.
sc_status prof_mm_call(void *c, int iter) {
  mm_ctx *g = c;
  if (g->mr)
    atomic_store_explicit(&g->mr->shape,
                          (unsigned long long)g->m << 48 | (unsigned long long)g->n << 24 |
                              (unsigned long long)g->k,
                          memory_order_relaxed);
  size_t at = (size_t)(iter % g->copies) * (size_t)g->n * (size_t)g->k;
  if (g->wdt == SC_BF16)
    return dev_matmul_bf16(g->d, g->m, g->n, g->k, g->x, (const uint16_t *)g->pool + at, 0.0f,
                           g->y);
  return dev_matmul(g->d, g->m, g->n, g->k, g->x, (const float *)g->pool + at, 0.0f, g->y);
}

// The GEMMs one rank of TP degree t runs per layer and for the head, as the cost model prices
// them (kernels/sim/sim_cost.c, price_microbatch): q|k|v as one GEMM of the three widths,
// o_proj, gate|up as one GEMM of both widths, down_proj, the LM head on its vocabulary share.
// (The executor runs q, k, v and gate, up as separate GEMMs; the difference is in the
// step-overhead residual.) Writes up to 5 shapes; returns how many.
static int rank_gemms(const model_config *m, int t, int *n, int *k, const char **role) {
  shard_rank s = shard_rank_plan(m, t, 1, 0, 0);
  int hd = m->head_dim, D = m->dim;
  static const char *const roles[] = {"q|k|v", "o_proj", "gate|up", "down_proj", "lm_head"};
  int nn[] = {(s.n_heads + 2 * s.n_kv) * hd, D, 2 * s.ffn, D, s.vocab};
  int kk[] = {D, s.n_heads * hd, D, s.ffn, D};
  for (int i = 0; i < 5; i++) {
    n[i] = nn[i];
    k[i] = kk[i];
    role[i] = roles[i];
  }
  return 5;
}

// Every distinct (n, k, threads) over the TP degrees, in measuring order (TP ascending, then
// threads descending). SC_INVALID when there are more than SIM_TABLES_MAX.
sc_status prof_gemm_plan(const profile_options *o, int cores, gemm_shape *out, int *n_out,
                           sc_error *err) {
  int n = 0;
  for (int i = 0; i < o->n_tp; i++) {
    int th[2], nth = prof_thread_counts(cores, o->tp[i], th);
    for (int j = 0; j < nth; j++) {
      int gn[5], gk[5];
      const char *role[5];
      int ns = rank_gemms(&o->model, o->tp[i], gn, gk, role);
      for (int s = 0; s < ns; s++) {
        int e = 0;
        while (e < n && !(out[e].n == gn[s] && out[e].k == gk[s] && out[e].threads == th[j])) e++;
        if (e == n) {
          if (n == SIM_TABLES_MAX)
            return sc_fail(err, SC_INVALID,
                           "profile: more than %d GEMM tables (shapes x thread counts); "
                           "profile fewer TP degrees at once",
                           SIM_TABLES_MAX);
          out[n++] = (gemm_shape){.n = gn[s], .k = gk[s], .threads = th[j]};
        }
        size_t len = strlen(out[e].role);
        snprintf(out[e].role + len, sizeof out[e].role - len, "%stp%d %s", len ? ", " : "",
                 o->tp[i], role[s]);
      }
    }
  }
  *n_out = n;
  return SC_OK;
}

// A rank that runs beside the one being timed: the same GEMM, as published in mr, on weights
// of its own (another part of the pool) through a device of its own, until mr->stop.
typedef struct mm_companion {
  pthread_t th;
  device *d;
  mm_mirror *mr;
  const float *pool; // its weights, shared by the companions
  size_t pool_floats;
  int index, of; // this companion's number and their count: each starts at its own copy
  const float *x; // the timed rank's activations (only read)
  float *y;       // its own output (max rows)
  sc_status status;
} mm_companion;

static void *companion_main(void *arg) {
  mm_companion *c = arg;
  for (size_t it = 0; !atomic_load_explicit(&c->mr->stop, memory_order_relaxed); it++) {
    unsigned long long sh = atomic_load_explicit(&c->mr->shape, memory_order_relaxed);
    if (!sh) {
      sched_yield();
      continue;
    }
    int m = (int)(sh >> 48), n = (int)(sh >> 24 & 0xFFFFFFu), k = (int)(sh & 0xFFFFFFu);
    size_t nk = (size_t)n * (size_t)k, copies = c->pool_floats / nk;
    if (!copies) copies = 1;
    const float *w = c->pool + ((it + (size_t)c->index * copies / (size_t)c->of) % copies) * nk;
    sc_status s = dev_matmul(c->d, m, n, k, c->x, w, 0.0f, c->y);
    if (s != SC_OK) {
      c->status = s;
      break;
    }
  }
  return NULL;
}

// Frees prof_measure_gemm's buffers: device memory of p->dev on cuda, host memory on cpu.
static void gemm_buffers_free(const profile *p, float *pool, float *x, float *y) {
  if (p->cuda) {
    dev_free(p->dev, pool);
    dev_free(p->dev, x);
    dev_free(p->dev, y);
  } else {
    free(pool);
    free(x);
    free(y);
  }
}

// Each group of shapes at one thread count T is timed on a device opened at T threads (the
// CPU backend sizes a device's kernel pool when it opens), and, when T leaves cores for more
// ranks (cores / T >= 2: the ranks of a TP group, or data-parallel replicas, each on its own
// cores), with cores / T - 1 companion ranks (at most 7: one host's ranks) running the same
// GEMM on other weights at the same time: a rank's GEMMs at small batches read memory as fast
// as one core can, and in a real run its peers read beside it, so it is timed sharing the
// memory system as it will be. The companions read the timed rank's activations (only read)
// and write outputs of their own.
// On cuda there is one thread count (1) and no companion: the buffers are device memory of
// p->dev, the weights (of p->wdt) rotate through PROF_CUDA_POOL, and a round waits for the
// device once after its back-to-back calls.
sc_status prof_measure_gemm(profile *p, const gemm_shape *shapes, int n_shapes, int cores,
                            sc_error *err) {
  const profile_options *o = &p->o;
  const bool cuda = p->cuda;
  size_t max_nk = 0;
  int max_n = 0, max_k = 0, max_m = o->gemm_m[o->n_gemm_m - 1];
  for (int i = 0; i < n_shapes; i++) {
    size_t nk = (size_t)shapes[i].n * (size_t)shapes[i].k;
    max_nk = nk > max_nk ? nk : max_nk;
    max_n = shapes[i].n > max_n ? shapes[i].n : max_n;
    max_k = shapes[i].k > max_k ? shapes[i].k : max_k;
  }
  const size_t wb = (size_t)sc_dtype_bytes(p->wdt); // f32 or bf16
  // the timed rank's weights; the companions' come after them
  size_t half = prof_pool_bytes(p) / wb;
  if (half < max_nk) half = max_nk;
  size_t pool_floats = cuda ? half : 2 * half, xf = (size_t)max_m * max_k,
         yf = (size_t)max_m * max_n;
  // Companions: up to the ranks of one host (gpus_per_node 8), each with an output of its own.
  enum { MAX_COMP = 7 };
  int max_comp = cuda ? 0 : cores - 1 > MAX_COMP ? MAX_COMP : cores - 1;
  float *pool = NULL, *x = NULL, *y = NULL; // pool: elements of p->wdt
  sc_status s = SC_OK;
  if (cuda) {
    s = dev_alloc(p->dev, pool_floats * wb, (void **)&pool);
    if (s == SC_OK) s = dev_alloc(p->dev, xf * sizeof(float), (void **)&x);
    if (s == SC_OK) s = dev_alloc(p->dev, yf * sizeof(float), (void **)&y);
    if (s == SC_OK) s = prof_fill_device(p, p->dev, pool, pool_floats, o->seed + 2, 0.05f,
                                    p->wdt == SC_BF16);
    if (s == SC_OK) s = prof_fill_device(p, p->dev, x, xf, o->seed + 3, 1.0f, false);
  } else {
    pool = malloc(pool_floats * sizeof(float));
    x = malloc(xf * sizeof(float));
    y = malloc(yf * (size_t)(1 + max_comp) * sizeof(float));
    s = pool && x && y ? SC_OK : SC_OOM;
  }
  if (s != SC_OK) {
    gemm_buffers_free(p, pool, x, y);
    return sc_fail(err, s, "profile: cannot allocate the GEMM buffers (%zu MiB of weights)",
                   pool_floats * wb >> 20);
  }
  if (!cuda) {
    prof_fill_random(pool, pool_floats, o->seed + 2, 0.05f);
    prof_fill_random(x, xf, o->seed + 3, 1.0f);
  }

  sim_hw *h = &p->hw.sim;
  for (int g0 = 0; s == SC_OK && g0 < n_shapes;) {
    // a group: consecutive shapes at one thread count
    int g1 = g0;
    while (g1 < n_shapes && shapes[g1].threads == shapes[g0].threads) g1++;
    double t0 = sc_monotonic_s();
    const int T = shapes[g0].threads;
    int n_comp = cores / T - 1;
    n_comp = n_comp < 0 ? 0 : n_comp > max_comp ? max_comp : n_comp;
    if (!cuda) device_cpu_set_threads(T);
    device *d = NULL;
    mm_mirror mr;
    atomic_init(&mr.shape, 0);
    atomic_init(&mr.stop, false);
    mm_companion comp[MAX_COMP];
    int started = 0;
    s = device_open(o->backend, 0, &d, err);
    for (; s == SC_OK && started < n_comp; started++) {
      mm_companion *c = &comp[started];
      *c = (mm_companion){.mr = &mr, .pool = pool + half, .pool_floats = half, .index = started,
                          .of = n_comp, .x = x, .y = y + yf * (size_t)(1 + started)};
      s = device_open(o->backend, 0, &c->d, err);
      if (s == SC_OK && pthread_create(&c->th, NULL, companion_main, c) != 0) {
        device_free(c->d);
        s = sc_fail(err, SC_OOM, "profile: cannot start a companion rank's thread");
      }
      if (s != SC_OK) break;
    }
    // every (shape, m) of the group is one point, timed together
    int nm = o->n_gemm_m, np = (g1 - g0) * nm;
    mm_ctx *g = calloc((size_t)np, sizeof *g);
    timed *t = calloc((size_t)np, sizeof *t);
    if (s == SC_OK && (!g || !t)) s = sc_fail(err, SC_OOM, "profile: out of memory");
    for (int i = 0; s == SC_OK && i < np; i++) {
      const gemm_shape *sh = &shapes[g0 + i / nm];
      long copies = (long)(half / ((size_t)sh->n * (size_t)sh->k));
      g[i] = (mm_ctx){.d = d, .m = o->gemm_m[i % nm], .n = sh->n, .k = sh->k, .x = x,
                      .pool = pool, .wdt = p->wdt, .y = y,
                      .copies = (int)(copies < 1                      ? 1
                                      : copies > PROF_GEMM_COPIES_MAX ? PROF_GEMM_COPIES_MAX
                                                                      : copies),
                      .mr = started ? &mr : NULL};
      t[i] = (timed){.op = prof_mm_call, .ctx = &g[i], .sync = cuda ? d : NULL};
    }
    if (s == SC_OK) s = prof_time_points(t, np, o->reps, o->min_round_s);
    if (s != SC_OK && cuda && d && !err->msg[0])
      sc_fail(err, s, "profile: a timed GEMM failed: %s", dev_last_error(d));
    atomic_store(&mr.stop, true);
    for (int c = 0; c < started; c++) {
      pthread_join(comp[c].th, NULL);
      if (s == SC_OK && comp[c].status != SC_OK)
        s = sc_fail(err, comp[c].status, "profile: a companion rank's GEMM failed");
      device_free(comp[c].d);
    }
    device_free(d);
    for (int i = g0; s == SC_OK && i < g1; i++) {
      const gemm_shape *sh = &shapes[i];
      sim_gemm_table *tb = &h->gemm[h->n_gemm];
      *tb = (sim_gemm_table){.n = sh->n, .k = sh->k, .threads = sh->threads};
      for (int j = 0; j < nm; j++) {
        tb->t.x[j] = o->gemm_m[j];
        tb->t.y[j] = prof_timed_median(&t[(i - g0) * nm + j], o->reps);
      }
      tb->t.n = nm;
      snprintf(p->gemm_role[h->n_gemm], sizeof p->gemm_role[0], "%s", sh->role);
      h->n_gemm++;
    }
    free(g);
    free(t);
    if (s == SC_OK && cuda)
      prof_progress(o, "gemm: %d shape%s, %s weights rotating through %zu MiB, x %d rows (%d..%d) "
                  "[%.1f s]",
               g1 - g0, g1 - g0 == 1 ? "" : "s", sc_dtype_name(p->wdt),
               pool_floats * wb >> 20, o->n_gemm_m, o->gemm_m[0], max_m, sc_monotonic_s() - t0);
    else if (s == SC_OK)
      prof_progress(o, "gemm: %d shape%s at %d thread%s x %d rows (%d..%d), %d companion rank%s "
                  "[%.1f s]",
               g1 - g0, g1 - g0 == 1 ? "" : "s", T, T == 1 ? "" : "s", o->n_gemm_m,
               o->gemm_m[0], max_m, started, started == 1 ? "" : "s", sc_monotonic_s() - t0);
    g0 = g1;
  }
  if (!cuda) device_cpu_set_threads(cores);
  gemm_buffers_free(p, pool, x, y);
  if (s != SC_OK && !err->msg[0]) sc_fail(err, s, "profile: a timed GEMM failed");
  return s;
}

// Achieved fraction of the peak of the held weights (flops_fp32; flops_bf16 for bf16 weights
// on cuda) vs m of the largest per-layer GEMM (gate|up) of the smallest TP degree on all its
// threads: prices GEMM shapes the profile has no table for.
void prof_derive_gemm_eff(profile *p, int cores) {
  const profile_options *o = &p->o;
  int gn[5], gk[5], th[2];
  const char *role[5];
  rank_gemms(&o->model, o->tp[0], gn, gk, role);
  prof_thread_counts(cores, o->tp[0], th);
  sim_hw *h = &p->hw.sim;
  double peak = p->wdt == SC_BF16 ? p->hw.flops_bf16 : p->hw.flops_fp32;
  for (int i = 0; i < h->n_gemm; i++) {
    const sim_gemm_table *g = &h->gemm[i];
    if (g->n != gn[2] || g->k != gk[2] || g->threads != th[0]) continue;
    h->gemm_eff.n = g->t.n;
    for (int j = 0; j < g->t.n; j++) {
      double e = 2.0 * g->t.x[j] * g->n * (double)g->k / g->t.y[j] / peak;
      h->gemm_eff.x[j] = g->t.x[j];
      h->gemm_eff.y[j] = e > 1 ? 1 : e < 1e-4 ? 1e-4 : e;
    }
    return;
  }
}
