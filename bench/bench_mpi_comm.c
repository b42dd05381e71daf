// The mpi communicator's all-reduce against shm's on one host, at the tensor sizes the engine
// reduces (tokens x dim floats, twice a layer) for llama-small (dim 512) and llama3-8b (dim
// 4096): a decode step of 1 and 16 sequences and a prefill chunk of 256 tokens.
//
//   mpirun --oversubscribe -np N bench_mpi_comm [REPS]
//
// Rank 0 first times shm with N threads in its own process while the other ranks wait; then
// every rank times the mpi group of the N processes. Each size: the median of REPS calls
// (default 200) after 10 warm-ups, and the bus bandwidth with the nccl-tests factor for
// all-reduce, 2 (N - 1) / N x bytes / time. Prints a table; docs/benchmarks.md keeps the
// latest with the machine it ran on. Not a test: nothing here asserts a time.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/clock.h"
#include "kernels/comm.h"
#include "kernels/mpi.h"

enum { WARMUP = 10, MAX_REPS = 10000 };

typedef struct size_row {
  const char *model;
  int dim, tokens;
} size_row;

static const size_row SIZES[] = {
    {"llama-small", 512, 1},   {"llama-small", 512, 16},  {"llama-small", 512, 256},
    {"llama3-8b", 4096, 1},    {"llama3-8b", 4096, 16},   {"llama3-8b", 4096, 256},
};
enum { N_SIZES = sizeof SIZES / sizeof *SIZES };

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

// Median ns of reps all-reduces of n floats on c; 0 on a failed call.
static uint64_t time_allreduce(comm *c, size_t n, int reps) {
  float *buf = calloc(n, sizeof *buf);
  uint64_t *t = calloc((size_t)reps, sizeof *t);
  uint64_t med = 0;
  if (!buf || !t) goto out;
  for (size_t i = 0; i < n; i++) buf[i] = (float)(i % 7) * 0.25f;
  for (int k = 0; k < WARMUP + reps; k++) {
    uint64_t t0 = sc_monotonic_ns();
    if (comm_allreduce_sum(c, buf, n) != SC_OK) goto out;
    if (k >= WARMUP) t[k - WARMUP] = sc_monotonic_ns() - t0;
  }
  qsort(t, (size_t)reps, sizeof *t, cmp_u64);
  med = t[reps / 2];
out:
  free(buf);
  free(t);
  return med;
}

// --- shm: N threads of rank 0's process

typedef struct shm_arg {
  comm *c;
  int reps;
  uint64_t med[N_SIZES];
} shm_arg;

static void *shm_rank(void *p) {
  shm_arg *a = p;
  for (int s = 0; s < N_SIZES; s++)
    a->med[s] = time_allreduce(a->c, (size_t)SIZES[s].dim * (size_t)SIZES[s].tokens, a->reps);
  return NULL;
}

static int time_shm(int n, int reps, uint64_t *med) {
  comm_shm_group *g = NULL;
  if (comm_shm_group_new(n, 0, &g) != SC_OK) return 1;
  pthread_t th[64];
  shm_arg a[64];
  for (int r = 0; r < n; r++) {
    a[r] = (shm_arg){.c = comm_shm_group_rank(g, r), .reps = reps};
    pthread_create(&th[r], NULL, shm_rank, &a[r]);
  }
  for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
  memcpy(med, a[0].med, sizeof a[0].med);
  comm_shm_group_free(g);
  return 0;
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 200;
  if (reps < 1 || reps > MAX_REPS) reps = 200;
  sc_error err = {{0}};
  if (sc_mpi_init(&err) != SC_OK) {
    fprintf(stderr, "bench_mpi_comm: %s\n", err.msg);
    return 2;
  }
  int me = sc_mpi_rank(), n = sc_mpi_size();
  if (n < 2 || n > 64) {
    if (me == 0) fprintf(stderr, "bench_mpi_comm: run it under mpirun with 2..64 ranks\n");
    sc_mpi_finalize();
    return 2;
  }
  uint64_t shm[N_SIZES] = {0}, mpi[N_SIZES] = {0};
  int bad = me == 0 ? time_shm(n, reps, shm) : 0;
  int go = bad; // the others wait for rank 0's shm run, then every rank times mpi
  if (sc_mpi_bcast(&go, sizeof go, 0, 0, &err) != SC_OK || go) {
    if (me == 0) fprintf(stderr, "bench_mpi_comm: shm failed or %s\n", err.msg);
    sc_mpi_finalize();
    return 3;
  }
  int members[64];
  for (int r = 0; r < n; r++) members[r] = r;
  comm_group *g = NULL;
  if (comm_group_open_mpi("cpu", n, members, NULL, 0, &g, &err) != SC_OK) {
    fprintf(stderr, "bench_mpi_comm: rank %d: %s\n", me, err.msg);
    sc_mpi_abort(3);
  }
  comm *c = comm_group_rank(g, me);
  for (int s = 0; s < N_SIZES; s++)
    mpi[s] = time_allreduce(c, (size_t)SIZES[s].dim * (size_t)SIZES[s].tokens, reps);
  comm_group_free(g);
  if (me == 0) {
    printf("all-reduce, %d ranks on %s, median of %d: shm (threads) vs mpi (processes)\n", n,
           sc_mpi_host(), reps);
    printf("%-12s %6s %10s %10s %10s %7s %12s %12s\n", "model", "tokens", "bytes", "shm us",
           "mpi us", "mpi/shm", "shm busbw", "mpi busbw");
    for (int s = 0; s < N_SIZES; s++) {
      double bytes = (double)SIZES[s].dim * SIZES[s].tokens * sizeof(float);
      double f = 2.0 * (n - 1) / n * bytes;
      printf("%-12s %6d %10.0f %10.1f %10.1f %7.2f %9.2f GB/s %9.2f GB/s\n", SIZES[s].model,
             SIZES[s].tokens, bytes, shm[s] / 1e3, mpi[s] / 1e3,
             shm[s] ? (double)mpi[s] / (double)shm[s] : 0, shm[s] ? f / (double)shm[s] : 0,
             mpi[s] ? f / (double)mpi[s] : 0);
    }
  }
  sc_mpi_finalize();
  return 0;
}
