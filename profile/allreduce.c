// The all-reduce tables of a profile and the link fit: an in-place sum over the communicator
// the executor gives ranks of the backend (shm on cpu; on cuda every rank on GPU 0, the
// loopback), for each TP degree above 1 (two ranks when there is none), and the ring model's
// latency and bandwidth fitted to every point.
//
// Left to others: the communicators (kernels/comm.h), the ring model that prices a collective
// (kernels/sim/), writing the tables and the fit in words (write.c).
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/clock.h"
#include "kernels/comm.h"
#include "kernels/device.h"
#include "kernels/util.h"
#include "profile/profile_impl.h"

#define PROF_AR_ROUND_BYTES (32 << 20)     // bytes one all-reduce round moves at least
#define PROF_AR_ITERS_MIN 3                // all-reduce calls per round at least
#define PROF_AR_ITERS_MAX 200              // all-reduce calls per round at most
#define PROF_AR_TIMEOUT_NS (30ull * 1000000000ull) // the shm group's collective timeout

typedef struct ar_shared {
  const profile_options *o;
  comm_group *g; // shm (cpu: ranks as threads) or cuda (ranks on GPU 0: loopback)
  int ranks;
  double *t; // (n_ar_bytes, reps) per-call seconds seen by rank 0
} ar_shared;

typedef struct ar_rank {
  ar_shared *sh;
  int r;
  device *d;  // cuda: this rank's device (GPU 0, a stream of its own); NULL on cpu
  float *buf; // (largest size / 4) floats: host memory on cpu, d's memory on cuda
  pthread_t th;
  sc_status st;
} ar_rank;

// Calls that make one timed round of an all-reduce of `bytes`: enough to move
// PROF_AR_ROUND_BYTES, within PROF_AR_ITERS_MIN..PROF_AR_ITERS_MAX.
static int ar_iters(double bytes) {
  double n = ceil((double)PROF_AR_ROUND_BYTES / bytes);
  return n < PROF_AR_ITERS_MIN   ? PROF_AR_ITERS_MIN
         : n > PROF_AR_ITERS_MAX ? PROF_AR_ITERS_MAX
                                 : (int)n;
}

static void *ar_main(void *arg) {
  ar_rank *rk = arg;
  ar_shared *sh = rk->sh;
  const profile_options *o = sh->o;
  comm *c = comm_group_rank(sh->g, rk->r);
  rk->st = SC_OK;
  // warm-up (sizes the staging slots), then passes over all sizes, as in prof_time_points
  for (int i = 0; rk->st == SC_OK && i < o->n_ar_bytes; i++)
    rk->st = comm_allreduce_sum(c, rk->buf, (size_t)(o->ar_bytes[i] / sizeof(float)));
  for (int r = 0; rk->st == SC_OK && r < o->reps; r++)
    for (int i = 0; rk->st == SC_OK && i < o->n_ar_bytes; i++) {
      size_t n = (size_t)(o->ar_bytes[i] / sizeof(float));
      int iters = ar_iters(o->ar_bytes[i]);
      rk->st = comm_barrier(c);
      double a = sc_monotonic_s();
      for (int it = 0; rk->st == SC_OK && it < iters; it++)
        rk->st = comm_allreduce_sum(c, rk->buf, n);
      if (rk->r == 0) sh->t[i * o->reps + r] = (sc_monotonic_s() - a) / iters;
    }
  if (rk->st != SC_OK) comm_group_abort(sh->g);
  return NULL;
}

// Gives every rank its buffer of `floats` (random values): host memory on cpu; on cuda a
// device of its own on GPU 0 (as the executor opens one per rank) and memory of it.
static sc_status ar_buffers(profile *p, ar_rank *rk, int ranks, size_t floats, device **devs,
                            sc_error *err) {
  const profile_options *o = &p->o;
  for (int r = 0; r < ranks; r++) {
    uint64_t seed = o->seed + 7 + (uint64_t)r;
    if (!p->cuda) {
      rk[r].buf = malloc(floats * sizeof(float));
      if (!rk[r].buf) return SC_OOM;
      prof_fill_random(rk[r].buf, floats, seed, 1e-3f);
      continue;
    }
    SC_TRY(device_open(o->backend, 0, &rk[r].d, err));
    devs[r] = rk[r].d;
    SC_TRY(dev_alloc(rk[r].d, floats * sizeof(float), (void **)&rk[r].buf));
    SC_TRY(prof_fill_device(p, rk[r].d, rk[r].buf, floats, seed, 1e-3f, false));
  }
  return SC_OK;
}

// One all-reduce table: `ranks` threads over the communicator the executor gives ranks of
// this backend (comm_group_open: shm on cpu; on cuda, every rank on GPU 0, the loopback
// transport), an in-place sum timed on rank 0 from a barrier (a cuda call returns once its
// result is in place).
static sc_status measure_allreduce_ranks(profile *p, int ranks, sim_coll_table *tb,
                                         sc_error *err) {
  const profile_options *o = &p->o;
  size_t floats = (size_t)(o->ar_bytes[o->n_ar_bytes - 1] / sizeof(float));
  ar_shared sh = {.o = o, .ranks = ranks};
  ar_rank *rk = calloc((size_t)ranks, sizeof *rk);
  device **devs = calloc((size_t)ranks, sizeof *devs);
  sh.t = calloc((size_t)o->n_ar_bytes * o->reps, sizeof(double));
  sc_status s = rk && devs && sh.t ? SC_OK : SC_OOM;
  for (int r = 0; s == SC_OK && r < ranks; r++) rk[r] = (ar_rank){.sh = &sh, .r = r};
  if (s == SC_OK) s = ar_buffers(p, rk, ranks, floats, devs, err);
  if (s == SC_OK)
    s = comm_group_open(o->backend, ranks, devs, PROF_AR_TIMEOUT_NS, &sh.g, err);
  int started = 0;
  for (; s == SC_OK && started < ranks; started++)
    if (pthread_create(&rk[started].th, NULL, ar_main, &rk[started]) != 0) {
      comm_group_abort(sh.g);
      s = SC_OOM;
      break;
    }
  for (int r = 0; r < started; r++) {
    pthread_join(rk[r].th, NULL);
    if (s == SC_OK && rk[r].st != SC_OK && rk[r].st != SC_ABORTED) s = rk[r].st;
  }
  for (int r = 0; s == SC_OK && r < ranks; r++)
    if (rk[r].st != SC_OK) s = rk[r].st;
  if (s == SC_OK) {
    tb->ranks = ranks;
    for (int i = 0; i < o->n_ar_bytes; i++) {
      tb->allreduce.x[i] = o->ar_bytes[i];
      tb->allreduce.y[i] = sc_median(sh.t + (size_t)i * o->reps, o->reps, 0);
      if (!(tb->allreduce.y[i] > 0)) tb->allreduce.y[i] = 1e-9;
    }
    tb->allreduce.n = o->n_ar_bytes;
  }
  char why[400] = "";
  if (s != SC_OK)
    snprintf(why, sizeof why, "%.399s", sh.g ? comm_group_error(sh.g) : err->msg);
  comm_group_free(sh.g); // before the devices it runs on
  for (int r = 0; rk && r < ranks; r++) {
    if (rk[r].d) dev_free(rk[r].d, rk[r].buf);
    else free(rk[r].buf);
    device_free(rk[r].d);
  }
  free(rk);
  free(devs);
  free(sh.t);
  if (s != SC_OK)
    return sc_fail(err, s, "profile: the all-reduce over %d ranks failed (%s)%s%s", ranks,
                   sc_status_name(s), why[0] ? ": " : "", why);
  return SC_OK;
}

// Fits the cost model's ring all-reduce, t = 2(n-1) lat + 2(n-1)/n bytes / bw, to every
// measured point by least squares on the relative error (so small and large messages count
// alike). Falls back to the two ends when the fit is not physical.
static void fit_link(profile *p) {
  const sim_hw *h = &p->hw.sim;
  double a11 = 0, a12 = 0, a22 = 0, b1 = 0, b2 = 0;
  double small_t = 0, small_x1 = 1, big_t = 0, big_x2 = 0;
  for (int i = 0; i < h->n_coll; i++) {
    double n = h->coll[i].ranks;
    const sim_curve *c = &h->coll[i].allreduce;
    for (int j = 0; j < c->n; j++) {
      double x1 = 2 * (n - 1), x2 = 2 * (n - 1) / n * c->x[j], y = c->y[j];
      double u1 = x1 / y, u2 = x2 / y;
      a11 += u1 * u1;
      a12 += u1 * u2;
      a22 += u2 * u2;
      b1 += u1;
      b2 += u2;
      if (i == 0 && j == 0) {
        small_t = y;
        small_x1 = x1;
      }
      if (i == 0 && j == c->n - 1) {
        big_t = y;
        big_x2 = x2;
      }
    }
  }
  double det = a11 * a22 - a12 * a12, lat = -1, inv_bw = -1;
  if (det > 0) {
    lat = (b1 * a22 - b2 * a12) / det;
    inv_bw = (a11 * b2 - a12 * b1) / det;
  }
  const char *how = "least squares on relative error";
  if (!(lat >= 0 && inv_bw > 0)) {
    lat = small_t / small_x1;
    double rest = big_t - small_x1 * lat;
    inv_bw = big_x2 > 0 && rest > 0 ? rest / big_x2 : big_x2 > 0 ? big_t / big_x2 : 1e-10;
    how = "the smallest message for latency, the largest for bandwidth";
  }
  if (lat > 1) lat = 1;
  p->sum.link_latency_s = lat;
  p->sum.link_bw = 1 / inv_bw;
  snprintf(p->coll_fit, sizeof p->coll_fit, "%s over %d rank count%s", how, h->n_coll,
           h->n_coll == 1 ? "" : "s");
}

sc_status prof_measure_allreduce(profile *p, sc_error *err) {
  const profile_options *o = &p->o;
  sim_hw *h = &p->hw.sim;
  int list[PROFILE_MAX_TP], n = 0;
  for (int i = 0; i < o->n_tp; i++)
    if (o->tp[i] > 1) list[n++] = o->tp[i];
  if (n == 0) list[n++] = 2; // the link fit needs one group
  for (int i = 0; i < n; i++) {
    double t0 = sc_monotonic_s();
    SC_TRY(measure_allreduce_ranks(p, list[i], &h->coll[h->n_coll], err));
    h->n_coll++;
    prof_progress(o, "allreduce: %d ranks x %d sizes (%.0f B .. %.0f MiB) [%.1f s]", list[i],
             o->n_ar_bytes, o->ar_bytes[0], o->ar_bytes[o->n_ar_bytes - 1] / (1 << 20),
             sc_monotonic_s() - t0);
  }
  fit_link(p);
  hw_profile *hp = &p->hw;
  snprintf(hp->link, sizeof hp->link, "memory");
  hp->link_bw = p->sum.link_bw;
  hp->link_latency_s = p->sum.link_latency_s;
  return SC_OK;
}
