// The pool of a cpu device's kernel threads: the calling thread and n_workers more take the
// chunks of one job, first come first served (cpu_pool_run), and cpu_pool_get starts a device's
// pool at its first call that wants one.
//
// What it leaves to others: what a chunk computes (cpu_matmul.c, cpu_ops.c, cpu_attention.c
// split their work into chunks), how many threads a device gets (device_cpu_set_threads in
// cpu_device.c) and the spin-wait primitives (kernels/spin.h).
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/clock.h"
#include "kernels/cpu/cpu_impl.h"
#include "kernels/spin.h"

// --- the pool of a device's kernel threads
//
// n_workers threads that help the calling thread through a job of n chunks, each chunk claimed
// by whichever thread gets to it first. A job is published by bumping gen (release), which
// also carries the chunk count; a chunk is free while its state holds the job's tag and is
// claimed by one compare-and-swap, so a worker reads the job only for a chunk it holds (the
// caller replaces the job only once every chunk is done). The caller claims chunks too, and
// waits only for chunks a worker is running: a worker that the OS has not scheduled (a busy or
// oversubscribed machine) costs nothing but its share of the work. Workers spin on gen for up
// to POOL_SPIN_NS after their last chunk (the ops between two matmuls of a step are shorter),
// then sleep on wake; every spin-wait here pauses, then yields the core after a few turns. One
// job at a time: a call that finds the pool busy runs its job alone.

#define POOL_SPIN_NS 200000ull // 0.2 ms
enum {
  POOL_MAX_CHUNKS = 64, // chunks of one job (the state words of a pool)
  // The job word gen: (job number << POOL_CHUNK_BITS) | chunks, so one atomic store publishes
  // both; bumping the job number adds POOL_JOB_ONE.
  POOL_CHUNK_BITS = 8,
  POOL_CHUNK_MASK = (1 << POOL_CHUNK_BITS) - 1,
  POOL_JOB_ONE = 1 << POOL_CHUNK_BITS,
  // The waiting caller reads the clock once per this many spin turns (a mask: a power of 2
  // minus 1), which costs far more than a pause.
  POOL_CLOCK_EVERY = 255,
};
_Static_assert(POOL_MAX_CHUNKS <= POOL_CHUNK_MASK, "a job's chunk count fits its bits of gen");

struct cpu_pool {
  int n_workers;
  pthread_t *threads;  // (n_workers)
  pthread_mutex_t mu;  // the sleeps on wake and done
  pthread_cond_t wake; // workers sleep here between jobs
  pthread_cond_t done; // the caller sleeps here until remaining is 0
  atomic_ullong gen;   // (job number << POOL_CHUNK_BITS) | chunks; bumped per job and at stop
  atomic_ullong state[POOL_MAX_CHUNKS]; // chunk c of job j: 2j (free) or 2j + 1 (claimed)
  atomic_int remaining; // chunks of the current job not finished
  atomic_flag busy;     // a caller holds the pool
  atomic_bool stop;     // set before the last bump of gen
  void (*fn)(void *arg, int chunk, int chunks); // the job: written before gen is bumped
  void *arg;
};

int cpu_pool_workers(const cpu_pool *p) { return p->n_workers; }

typedef struct pool_worker_arg {
  cpu_pool *p;
  int index, of; // this worker's number, 1..of - 1 (the caller is 0), and the pool's threads
} pool_worker_arg;

// Claims and runs the free chunks of job word g, starting at chunk `first`; the thread that
// finishes the last chunk wakes a caller asleep on done.
static void pool_work(cpu_pool *p, unsigned long long g, int first) {
  unsigned long long tag = (g >> POOL_CHUNK_BITS) * 2u;
  int chunks = (int)(g & POOL_CHUNK_MASK);
  for (int i = 0; i < chunks; i++) {
    int c = (first + i) % chunks;
    unsigned long long want = tag;
    if (!atomic_compare_exchange_strong_explicit(&p->state[c], &want, tag + 1u,
                                                 memory_order_acq_rel, memory_order_relaxed))
      continue;
    p->fn(p->arg, c, chunks);
    if (atomic_fetch_sub_explicit(&p->remaining, 1, memory_order_acq_rel) == 1) {
      pthread_mutex_lock(&p->mu);
      pthread_cond_broadcast(&p->done);
      pthread_mutex_unlock(&p->mu);
    }
  }
}

static void *pool_main(void *arg) {
  pool_worker_arg *wa = arg;
  cpu_pool *p = wa->p;
  // gen starts at 0: a job or a stop published before this thread first ran is not missed
  unsigned long long seen = 0;
  for (;;) {
    unsigned long long g = sc_spin_while_equal(&p->gen, seen, POOL_SPIN_NS, NULL, NULL);
    if (g == seen) {
      pthread_mutex_lock(&p->mu);
      while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
             !atomic_load(&p->stop))
        pthread_cond_wait(&p->wake, &p->mu);
      pthread_mutex_unlock(&p->mu);
    }
    if (atomic_load(&p->stop)) break;
    seen = g;
    pool_work(p, g, (int)(g & POOL_CHUNK_MASK) * wa->index / wa->of); // its share first
  }
  free(wa);
  return NULL;
}

void cpu_pool_free(cpu_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->stop, true);
  atomic_fetch_add_explicit(&p->gen, POOL_JOB_ONE, memory_order_release);
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->n_workers; i++) pthread_join(p->threads[i], NULL);
  pthread_cond_destroy(&p->done);
  pthread_cond_destroy(&p->wake);
  pthread_mutex_destroy(&p->mu);
  free(p->threads);
  free(p);
}

// A pool of n_workers threads (fewer when only some could be started), or NULL when none
// could be (the caller then works alone).
static cpu_pool *cpu_pool_new(int n_workers) {
  if (n_workers < 1) return NULL;
  cpu_pool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->threads = calloc((size_t)n_workers, sizeof *p->threads);
  if (!p->threads || pthread_mutex_init(&p->mu, NULL)) {
    free(p->threads);
    free(p);
    return NULL;
  }
  pthread_cond_init(&p->wake, NULL);
  pthread_cond_init(&p->done, NULL);
  atomic_init(&p->gen, 0);
  for (int c = 0; c < POOL_MAX_CHUNKS; c++) atomic_init(&p->state[c], 1ull); // claimed by none
  atomic_init(&p->remaining, 0);
  atomic_init(&p->stop, false);
  atomic_flag_clear(&p->busy);
  for (int i = 0; i < n_workers; i++) {
    pool_worker_arg *wa = malloc(sizeof *wa);
    if (!wa) break;
    *wa = (pool_worker_arg){p, i + 1, n_workers + 1};
    if (pthread_create(&p->threads[i], NULL, pool_main, wa) != 0) {
      free(wa);
      break;
    }
    p->n_workers++;
  }
  if (p->n_workers == 0) {
    cpu_pool_free(p);
    return NULL;
  }
  return p;
}

// Runs fn(arg, chunk, chunks) for every chunk < chunks (at most POOL_MAX_CHUNKS) on the
// calling thread and the pool's; returns when every chunk has run. Without a pool, or while
// another caller holds it, every chunk runs here.
void cpu_pool_run(cpu_pool *p, void (*fn)(void *arg, int chunk, int chunks), void *arg,
                  int chunks) {
  if (chunks > POOL_MAX_CHUNKS) chunks = POOL_MAX_CHUNKS;
  if (!p || chunks <= 1 || atomic_flag_test_and_set_explicit(&p->busy, memory_order_acquire)) {
    for (int c = 0; c < chunks; c++) fn(arg, c, chunks);
    return;
  }
  p->fn = fn;
  p->arg = arg;
  unsigned long long g =
      (atomic_load_explicit(&p->gen, memory_order_relaxed) & ~(unsigned long long)POOL_CHUNK_MASK) +
      POOL_JOB_ONE;
  g |= (unsigned long long)chunks;
  for (int c = 0; c < chunks; c++)
    atomic_store_explicit(&p->state[c], (g >> POOL_CHUNK_BITS) * 2u, memory_order_relaxed);
  atomic_store_explicit(&p->remaining, chunks, memory_order_relaxed);
  atomic_store_explicit(&p->gen, g, memory_order_release);
  pthread_mutex_lock(&p->mu); // wakes the workers that went to sleep (see pool_main)
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  pool_work(p, g, 0);
  uint64_t t0 = 0; // the chunks left are running on workers: spin, then sleep
  for (unsigned it = 0; atomic_load_explicit(&p->remaining, memory_order_acquire) > 0; it++) {
    if ((it & POOL_CLOCK_EVERY) == POOL_CLOCK_EVERY) {
      uint64_t now = sc_monotonic_ns();
      if (!t0) t0 = now;
      else if (now - t0 > POOL_SPIN_NS) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load_explicit(&p->remaining, memory_order_acquire) > 0)
          pthread_cond_wait(&p->done, &p->mu);
        pthread_mutex_unlock(&p->mu);
        break;
      }
    }
    sc_spin_pause(it);
  }
  atomic_flag_clear_explicit(&p->busy, memory_order_release);
}

// The device's pool, started at its first call that wants one: as many workers as its
// threads setting allows beyond the caller. NULL for one thread (or none could start).
cpu_pool *cpu_pool_get(cpu_ctx *c) {
  pthread_mutex_lock(&c->pool_mu);
  if (!c->pool_tried) {
    int t = c->threads > 0 ? c->threads : device_cpu_cores();
    c->pool = cpu_pool_new(t - 1);
    c->pool_tried = true;
  }
  cpu_pool *p = c->pool;
  pthread_mutex_unlock(&c->pool_mu);
  return p;
}
