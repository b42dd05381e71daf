// Tests of the shm communicator (kernels/comm_shm.c): collectives, point to point, deadlines
// and abort, with ranks as threads. Rank threads never assert (Criterion asserts belong to the
// test's own thread): they record a status and a failure note, and the test checks both after
// joining them.
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/clock.h"
#include "kernels/comm.h"
#include "tests/helpers.h"

#define MAX_RANKS 8
#define MS 1000000ull // ns

// --- rank threads

typedef struct rank_run rank_run;
typedef sc_status (*rank_fn)(rank_run *r);

// One rank's thread: what it runs, what came back, when.
struct rank_run {
  comm *c;
  int rank, n_ranks;
  rank_fn fn;
  void *arg;            // shared by every rank of the run
  sc_status st;         // what fn returned
  char fail[256];       // first wrong value seen, or empty
  atomic_bool entered;  // set just before the rank makes its blocking call
  uint64_t t_return_ns; // monotonic, when that call came back
  uint64_t took_ns;     // how long that call took
  pthread_t th;
};

static void *rank_main(void *p) {
  rank_run *r = p;
  r->st = r->fn(r);
  return NULL;
}

static void start_ranks(comm_shm_group *g, int n, rank_fn fn, void *arg, rank_run *runs) {
  for (int i = 0; i < n; i++) {
    memset(&runs[i], 0, sizeof runs[i]);
    runs[i].c = comm_shm_group_rank(g, i);
    runs[i].rank = i;
    runs[i].n_ranks = n;
    runs[i].fn = fn;
    runs[i].arg = arg;
    atomic_init(&runs[i].entered, false);
    cr_assert_eq(pthread_create(&runs[i].th, NULL, rank_main, &runs[i]), 0);
  }
}

static void join_ranks(rank_run *runs, int n) {
  for (int i = 0; i < n; i++) pthread_join(runs[i].th, NULL);
}

// Runs fn on n fresh ranks and asserts every one returned SC_OK with no failure note.
static void run_all_ok(int n, uint64_t deadline_ns, rank_fn fn, void *arg) {
  comm_shm_group *g = NULL;
  cr_assert_eq(comm_shm_group_new(n, deadline_ns, &g), SC_OK);
  rank_run runs[MAX_RANKS];
  start_ranks(g, n, fn, arg, runs);
  join_ranks(runs, n);
  for (int i = 0; i < n; i++) {
    cr_expect_eq(runs[i].st, SC_OK, "n_ranks=%d rank %d: %s", n, i, sc_status_name(runs[i].st));
    cr_expect_str_empty(runs[i].fail, "n_ranks=%d rank %d: %s", n, i, runs[i].fail);
  }
  cr_assert_eq(comm_poll_error(comm_shm_group_rank(g, 0)), SC_OK);
  comm_shm_group_free(g);
}

#define NOTE(r, ...)                                                                               \
  do {                                                                                             \
    if (!(r)->fail[0]) snprintf((r)->fail, sizeof(r)->fail, __VA_ARGS__);                          \
  } while (0)

// --- data

// A float of varied sign and magnitude (1e-3 .. 1e2), so the order of a sum changes its bits.
static float value(int rank, int call, size_t i) {
  uint64_t h = (uint64_t)rank * 0x9E3779B97F4A7C15ull ^ (uint64_t)call * 0xC2B2AE3D27D4EB4Full ^
               (uint64_t)i * 0x165667B19E3779F9ull;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  float mant = (float)(h & 0xFFFFFF) / (float)0x1000000 - 0.5f;
  static const float scale[6] = {1e-3f, 1e-2f, 1e-1f, 1.0f, 1e1f, 1e2f};
  return mant * scale[(h >> 24) % 6];
}

// The rank-order sum every rank must get: ((v0 + v1) + v2) + ...
static float rank_order_sum(int n_ranks, int call, size_t i) {
  float acc = value(0, call, i);
  for (int r = 1; r < n_ranks; r++) acc += value(r, call, i);
  return acc;
}

// --- all-reduce

static const size_t reduce_sizes[] = {0, 1, 3, 1000, 100000};
#define N_REDUCE_SIZES (sizeof reduce_sizes / sizeof reduce_sizes[0])
#define REDUCE_CALLS 3

static sc_status allreduce_rounds(rank_run *r) {
  float *buf = malloc(100000 * sizeof(float));
  if (!buf) return SC_OOM;
  int call = 0;
  for (size_t k = 0; k < N_REDUCE_SIZES; k++) {
    size_t n = reduce_sizes[k];
    for (int rep = 0; rep < REDUCE_CALLS; rep++, call++) {
      for (size_t i = 0; i < n; i++) buf[i] = value(r->rank, call, i);
      sc_status s = comm_allreduce_sum(r->c, buf, n);
      if (s != SC_OK) {
        free(buf);
        return s;
      }
      for (size_t i = 0; i < n; i++) {
        float want = rank_order_sum(r->n_ranks, call, i);
        if (memcmp(&buf[i], &want, sizeof want)) {
          NOTE(r, "size %zu call %d [%zu]: got %.9g want %.9g", n, call, i, buf[i], want);
          break;
        }
      }
    }
  }
  free(buf);
  return SC_OK;
}

Test(comm_shm, allreduce_is_the_rank_order_sum_bit_identical_on_every_rank_for_1_to_8_ranks) {
  for (int n = 1; n <= MAX_RANKS; n++) run_all_ok(n, 0, allreduce_rounds, NULL);
}

// Rank r of round k sleeps a round-dependent amount first, so ranks arrive in many orders.
static sc_status allreduce_shuffled_arrivals(rank_run *r) {
  enum { N = 4096, ROUNDS = 6 };
  float buf[N];
  for (int k = 0; k < ROUNDS; k++) {
    for (size_t i = 0; i < N; i++) buf[i] = value(r->rank, 100 + k, i);
    sc_test_sleep_ns((uint64_t)((r->rank * 3 + k * 5) % r->n_ranks) * 2 * MS);
    SC_TRY(comm_allreduce_sum(r->c, buf, N));
    for (size_t i = 0; i < N; i++) {
      float want = rank_order_sum(r->n_ranks, 100 + k, i);
      if (memcmp(&buf[i], &want, sizeof want)) {
        NOTE(r, "round %d [%zu]: got %.9g want %.9g", k, i, buf[i], want);
        break;
      }
    }
  }
  return SC_OK;
}

Test(comm_shm, allreduce_result_does_not_depend_on_arrival_order) {
  // The data must be order-sensitive for this test to mean anything.
  int differs = 0;
  for (size_t i = 0; i < 4096; i++) {
    float fwd = rank_order_sum(4, 100, i), rev = value(3, 100, i);
    for (int r = 2; r >= 0; r--) rev += value(r, 100, i);
    differs += memcmp(&fwd, &rev, sizeof fwd) != 0;
  }
  cr_assert_gt(differs, 0, "test data sums the same in every order");
  run_all_ok(4, 0, allreduce_shuffled_arrivals, NULL);
  run_all_ok(7, 0, allreduce_shuffled_arrivals, NULL);
}

// --- all-gather

static sc_status allgather_rounds(rank_run *r) {
  static const size_t sizes[] = {0, 1, 5, 1000, 30000};
  size_t cap = 30000 * (size_t)r->n_ranks + 1; // one sentinel past the largest gather
  float *send = malloc(30000 * sizeof(float)), *recv = malloc(cap * sizeof(float));
  sc_status s = send && recv ? SC_OK : SC_OOM;
  int call = 0;
  for (size_t k = 0; s == SC_OK && k < sizeof sizes / sizeof sizes[0]; k++) {
    for (int rep = 0; s == SC_OK && rep < 2; rep++, call++) {
      size_t n = sizes[k];
      for (size_t i = 0; i < n; i++) send[i] = value(r->rank, call, i);
      for (size_t i = 0; i < cap; i++) recv[i] = -12345.0f;
      s = comm_allgather(r->c, send, recv, n);
      for (int q = 0; s == SC_OK && q < r->n_ranks; q++)
        for (size_t i = 0; i < n; i++)
          if (recv[(size_t)q * n + i] != value(q, call, i)) {
            NOTE(r, "size %zu call %d: block of rank %d [%zu] wrong", n, call, q, i);
            break;
          }
      if (s == SC_OK && recv[(size_t)r->n_ranks * n] != -12345.0f)
        NOTE(r, "size %zu: wrote past n_ranks*n", n);
    }
  }
  free(send);
  free(recv);
  return s;
}

Test(comm_shm, allgather_concatenates_every_rank_in_rank_order_for_1_to_8_ranks) {
  for (int n = 1; n <= MAX_RANKS; n++) run_all_ok(n, 0, allgather_rounds, NULL);
}

// --- send / recv

// A message: [src, dst, seq] then a payload whose length and bytes depend on them.
static size_t msg_len(int src, int seq) {
  return 3 * sizeof(int) + (size_t)((seq * 37 + src) % 300);
}

static void msg_fill(unsigned char *m, int src, int dst, int seq) {
  int hdr[3] = {src, dst, seq};
  memcpy(m, hdr, sizeof hdr);
  for (size_t i = sizeof hdr; i < msg_len(src, seq); i++)
    m[i] = (unsigned char)(src * 31 + seq + i);
}

// Receives message seq from src and checks it; returns the recv status.
static sc_status msg_expect(rank_run *r, int src, int seq) {
  unsigned char got[3 * sizeof(int) + 300], want[3 * sizeof(int) + 300];
  size_t len = msg_len(src, seq);
  SC_TRY(comm_recv(r->c, got, len, src));
  msg_fill(want, src, r->rank, seq);
  if (memcmp(got, want, len)) NOTE(r, "message %d from rank %d is wrong or out of order", seq, src);
  return SC_OK;
}

static sc_status msg_send(rank_run *r, int dst, int seq) {
  unsigned char m[3 * sizeof(int) + 300];
  msg_fill(m, r->rank, dst, seq);
  return comm_send(r->c, m, msg_len(r->rank, seq), dst);
}

// Every rank sends to the next and receives from the previous, 200 times, a few in flight.
static sc_status ring(rank_run *r) {
  int next = (r->rank + 1) % r->n_ranks, prev = (r->rank + r->n_ranks - 1) % r->n_ranks;
  for (int seq = 0; seq < 200; seq += 4) {
    for (int k = 0; k < 4; k++) SC_TRY(msg_send(r, next, seq + k));
    for (int k = 0; k < 4; k++) SC_TRY(msg_expect(r, prev, seq + k));
  }
  return SC_OK;
}

Test(comm_shm, send_recv_ring_delivers_every_message_in_order_for_2_to_8_ranks) {
  for (int n = 2; n <= MAX_RANKS; n++) run_all_ok(n, 10000 * MS, ring, NULL);
}

// Everyone sends to everyone (itself included) first, then receives: sends must not wait.
static sc_status all_to_all(rank_run *r) {
  for (int round = 0; round < 20; round++) {
    for (int q = 0; q < r->n_ranks; q++) SC_TRY(msg_send(r, q, round));
    for (int q = r->n_ranks - 1; q >= 0; q--) SC_TRY(msg_expect(r, q, round));
  }
  return SC_OK;
}

// Partners r and r^1 both send 1 MiB, then both receive.
static sc_status pairwise_big(rank_run *r) {
  enum { BYTES = 1 << 20 };
  int peer = r->rank ^ 1;
  unsigned char *out = malloc(BYTES), *in = malloc(BYTES);
  sc_status s = out && in ? SC_OK : SC_OOM;
  for (int round = 0; s == SC_OK && round < 4; round++) {
    memset(out, r->rank * 16 + round, BYTES);
    s = comm_send(r->c, out, BYTES, peer);
    if (s == SC_OK) s = comm_recv(r->c, in, BYTES, peer);
    if (s == SC_OK && (in[0] != (unsigned char)(peer * 16 + round) ||
                       in[BYTES - 1] != (unsigned char)(peer * 16 + round)))
      NOTE(r, "round %d: wrong bytes from rank %d", round, peer);
  }
  free(out);
  free(in);
  return s;
}

Test(comm_shm, pairwise_exchange_where_both_send_first_does_not_deadlock_for_2_to_8_ranks) {
  for (int n = 2; n <= MAX_RANKS; n++) run_all_ok(n, 10000 * MS, all_to_all, NULL);
  for (int n = 2; n <= MAX_RANKS; n += 2) run_all_ok(n, 10000 * MS, pairwise_big, NULL);
}

// Rank 0 sends 20000 messages (some empty) to rank 1 before rank 1 has read many of them.
static sc_status many_one_way(rank_run *r) {
  enum { COUNT = 20000 };
  if (r->rank == 0) {
    for (int seq = 0; seq < COUNT; seq++) {
      uint32_t m[4] = {(uint32_t)seq, (uint32_t)seq * 7u, (uint32_t)seq ^ 0x5555u, 0};
      SC_TRY(comm_send(r->c, m, (size_t)(seq % 5) * sizeof(uint32_t), 1));
    }
    return SC_OK;
  }
  sc_test_sleep_ns(5 * MS);
  for (int seq = 0; seq < COUNT; seq++) {
    uint32_t m[4] = {0}, want[4] = {(uint32_t)seq, (uint32_t)seq * 7u, (uint32_t)seq ^ 0x5555u, 0};
    size_t len = (size_t)(seq % 5) * sizeof(uint32_t);
    SC_TRY(comm_recv(r->c, m, len, 0));
    if (memcmp(m, want, len)) {
      NOTE(r, "message %d arrived out of order or changed", seq);
      break;
    }
  }
  return SC_OK;
}

Test(comm_shm, many_messages_between_one_pair_arrive_in_send_order) {
  run_all_ok(2, 10000 * MS, many_one_way, NULL);
}

// --- barrier and mixed sequences

static sc_status barrier_rounds(rank_run *r) {
  atomic_int *arrived = r->arg;
  for (int round = 0; round < 100; round++) {
    if (r->rank == round % r->n_ranks)
      sc_test_sleep_ns(MS / 4); // a different rank is late each round
    atomic_fetch_add(arrived, 1);
    SC_TRY(comm_barrier(r->c));
    int seen = atomic_load(arrived);
    if (seen < (round + 1) * r->n_ranks) {
      NOTE(r, "round %d: released with %d of %d arrivals", round, seen, (round + 1) * r->n_ranks);
      break;
    }
    SC_TRY(comm_barrier(r->c)); // nobody starts the next round before all have checked
  }
  return SC_OK;
}

Test(comm_shm, barrier_releases_no_rank_before_every_rank_has_arrived) {
  for (int n = 1; n <= MAX_RANKS; n++) {
    atomic_int arrived;
    atomic_init(&arrived, 0);
    run_all_ok(n, 0, barrier_rounds, &arrived);
  }
}

// Interleaves every operation with sizes that change per iteration.
static sc_status mixed(rank_run *r) {
  float red[257], gat_in[64], gat_out[64 * MAX_RANKS];
  int next = (r->rank + 1) % r->n_ranks, prev = (r->rank + r->n_ranks - 1) % r->n_ranks;
  for (int it = 0; it < 60; it++) {
    size_t n = (size_t)(it * 13 % 257), m = (size_t)(it % 64);
    for (size_t i = 0; i < n; i++) red[i] = value(r->rank, 1000 + it, i);
    SC_TRY(comm_allreduce_sum(r->c, red, n));
    for (size_t i = 0; i < n; i++)
      if (red[i] != rank_order_sum(r->n_ranks, 1000 + it, i)) {
        NOTE(r, "iteration %d: all-reduce [%zu] wrong", it, i);
        break;
      }
    if (r->n_ranks > 1) {
      SC_TRY(msg_send(r, next, it));
      SC_TRY(msg_expect(r, prev, it));
    }
    for (size_t i = 0; i < m; i++) gat_in[i] = (float)(r->rank * 1000 + it) + (float)i;
    SC_TRY(comm_allgather(r->c, gat_in, gat_out, m));
    for (int q = 0; q < r->n_ranks; q++)
      for (size_t i = 0; i < m; i++)
        if (gat_out[(size_t)q * m + i] != (float)(q * 1000 + it) + (float)i) {
          NOTE(r, "iteration %d: all-gather block %d wrong", it, q);
          break;
        }
    SC_TRY(comm_barrier(r->c));
  }
  return SC_OK;
}

Test(comm_shm, consecutive_mixed_collectives_and_messages_do_not_mix) {
  for (int n = 1; n <= MAX_RANKS; n++) run_all_ok(n, 10000 * MS, mixed, NULL);
}

// --- abort

typedef struct abort_plan {
  comm_shm_group *g;
  uint64_t t_abort_ns; // monotonic, just before the abort call
} abort_plan;

static sc_status wait_in_allreduce(rank_run *r) {
  float buf[100];
  for (int i = 0; i < 100; i++) buf[i] = (float)i;
  atomic_store(&r->entered, true);
  sc_status s = comm_allreduce_sum(r->c, buf, 100);
  r->t_return_ns = sc_monotonic_ns();
  return s;
}

static sc_status wait_in_recv(rank_run *r) {
  char b[8];
  atomic_store(&r->entered, true);
  sc_status s = comm_recv(r->c, b, sizeof b, (r->rank + 1) % r->n_ranks);
  r->t_return_ns = sc_monotonic_ns();
  return s;
}

static sc_status wait_in_barrier(rank_run *r) {
  atomic_store(&r->entered, true);
  sc_status s = comm_barrier(r->c);
  r->t_return_ns = sc_monotonic_ns();
  return s;
}

static void *watchdog_abort(void *p) {
  abort_plan *plan = p;
  plan->t_abort_ns = sc_monotonic_ns();
  comm_shm_group_abort(plan->g);
  return NULL;
}

// n ranks, the first n_waiting call fn and block (the rest never arrive); once they are all
// inside, a watchdog thread that is no rank aborts. Each must return SC_ABORTED, woken by the
// abort: long before the group's 30 s deadline, which is all a wait that missed the abort
// would end on (the bound is a third of it, so a loaded host does not make it fail).
static void abort_while_waiting(int n, int n_waiting, rank_fn fn) {
  abort_plan plan = {0};
  cr_assert_eq(comm_shm_group_new(n, 30000 * MS, &plan.g), SC_OK);
  rank_run runs[MAX_RANKS];
  start_ranks(plan.g, n_waiting, fn, NULL, runs);
  for (int i = 0; i < n_waiting; i++)
    while (!atomic_load(&runs[i].entered)) sc_test_sleep_ns(MS);
  // from "about to call" to "waiting inside", likely (an abort that lands before a rank waits
  // is seen when it calls: the same outcome)
  sc_test_sleep_ns(50 * MS);
  pthread_t wd;
  cr_assert_eq(pthread_create(&wd, NULL, watchdog_abort, &plan), 0);
  pthread_join(wd, NULL);
  join_ranks(runs, n_waiting);
  for (int i = 0; i < n_waiting; i++) {
    cr_expect_eq(runs[i].st, SC_ABORTED, "rank %d: %s", i, sc_status_name(runs[i].st));
    uint64_t after =
        runs[i].t_return_ns > plan.t_abort_ns ? runs[i].t_return_ns - plan.t_abort_ns : 0;
    cr_expect_lt(after, 10000 * MS, "rank %d returned %.1f ms after the abort", i,
                 (double)after / 1e6);
  }
  cr_expect_eq(comm_poll_error(comm_shm_group_rank(plan.g, 0)), SC_ABORTED);
  comm_shm_group_free(plan.g);
}

Test(comm_shm, abort_from_a_watchdog_unblocks_every_rank_waiting_in_allreduce_at_once) {
  abort_while_waiting(4, 3, wait_in_allreduce);
  abort_while_waiting(8, 7, wait_in_allreduce);
}

Test(comm_shm, abort_from_a_watchdog_unblocks_ranks_waiting_in_recv_and_barrier) {
  abort_while_waiting(4, 4, wait_in_recv);
  abort_while_waiting(4, 3, wait_in_barrier);
}

// Every operation of every rank returns SC_ABORTED at once.
static sc_status everything_aborted(rank_run *r) {
  float f[4] = {0}, g[4 * MAX_RANKS];
  char b[4] = {0};
  sc_status got[6] = {
      comm_allreduce_sum(r->c, f, 4),
      comm_allgather(r->c, f, g, 4),
      comm_send(r->c, b, 4, 0),
      comm_recv(r->c, b, 4, (r->rank + 1) % r->n_ranks),
      comm_barrier(r->c),
      comm_poll_error(r->c),
  };
  for (int k = 0; k < 6; k++)
    if (got[k] != SC_ABORTED) NOTE(r, "operation %d returned %s", k, sc_status_name(got[k]));
  return SC_OK;
}

Test(comm_shm, every_call_after_an_abort_returns_aborted_at_once) {
  comm_shm_group *g = NULL;
  cr_assert_eq(comm_shm_group_new(4, 30000 * MS, &g), SC_OK);
  comm_abort(comm_shm_group_rank(g, 2)); // the endpoint's abort aborts the group
  comm_shm_group_abort(g);               // idempotent
  comm_abort(comm_shm_group_rank(g, 0));
  rank_run runs[4];
  uint64_t t0 = sc_monotonic_ns();
  start_ranks(g, 4, everything_aborted, NULL, runs);
  join_ranks(runs, 4);
  // "At once": far below the 30 s deadline any wait would have used.
  cr_expect_lt(sc_monotonic_ns() - t0, 10000 * MS);
  for (int i = 0; i < 4; i++) cr_expect_str_empty(runs[i].fail, "rank %d: %s", i, runs[i].fail);
  comm_shm_group_free(g);
}

// --- deadlines

static sc_status timed_call(rank_run *r) {
  uint64_t t0 = sc_monotonic_ns();
  sc_status s;
  if (r->arg == (void *)1) {
    char b[4];
    s = comm_recv(r->c, b, sizeof b, 1);
  } else {
    float buf[16] = {0};
    s = comm_allreduce_sum(r->c, buf, 16);
  }
  r->took_ns = sc_monotonic_ns() - t0;
  return s;
}

// Rank 0 calls (allreduce, or recv when recv_case) with a DEADLINE_MS deadline; rank 1 never
// comes. The deadline is long enough that "at once" below (without waiting for it) holds on a
// loaded host too.
enum { DEADLINE_MS = 2000 };
static void peer_never_arrives(bool recv_case) {
  comm_shm_group *g = NULL;
  cr_assert_eq(comm_shm_group_new(2, DEADLINE_MS * MS, &g), SC_OK);
  rank_run runs[1];
  start_ranks(g, 1, timed_call, recv_case ? (void *)1 : NULL, runs);
  join_ranks(runs, 1);
  cr_expect_eq(runs[0].st, SC_TIMEOUT, "got %s", sc_status_name(runs[0].st));
  cr_expect_geq(runs[0].took_ns, DEADLINE_MS * MS, "gave up after %.1f ms",
                (double)runs[0].took_ns / 1e6);
  cr_expect_lt(runs[0].took_ns, 10000 * MS, "hung for %.1f ms", (double)runs[0].took_ns / 1e6);
  // The group is broken: the late rank's calls fail at once with the same status.
  // "At once" = without waiting for the deadline, which any wait would have used.
  comm *late = comm_shm_group_rank(g, 1);
  float buf[16] = {0};
  uint64_t t0 = sc_monotonic_ns();
  cr_expect_eq(comm_allreduce_sum(late, buf, 16), SC_TIMEOUT);
  cr_expect_lt(sc_monotonic_ns() - t0, DEADLINE_MS * MS, "all-reduce on a broken group waited");
  t0 = sc_monotonic_ns();
  cr_expect_eq(comm_barrier(late), SC_TIMEOUT);
  cr_expect_lt(sc_monotonic_ns() - t0, DEADLINE_MS * MS, "barrier on a broken group waited");
  t0 = sc_monotonic_ns();
  char b[4];
  cr_expect_eq(comm_recv(late, b, sizeof b, 0), SC_TIMEOUT);
  cr_expect_lt(sc_monotonic_ns() - t0, DEADLINE_MS * MS, "recv on a broken group waited");
  cr_expect_eq(comm_send(late, buf, 4, 0), SC_TIMEOUT);
  cr_expect_eq(comm_poll_error(late), SC_TIMEOUT);
  comm_shm_group_abort(g); // an abort after a timeout: every call reports the abort
  cr_expect_eq(comm_barrier(late), SC_ABORTED);
  comm_shm_group_free(g);
}

Test(comm_shm, allreduce_whose_peer_never_arrives_times_out_after_the_deadline_and_breaks_group) {
  peer_never_arrives(false);
}

Test(comm_shm, recv_with_no_message_times_out_after_the_deadline_and_breaks_group) {
  peer_never_arrives(true);
}

// --- misuse and edges

static sc_status mismatched_sizes(rank_run *r) {
  float buf[8] = {0};
  return comm_allreduce_sum(r->c, buf, r->rank == 0 ? 8 : 4);
}

Test(comm_shm, allreduce_with_different_sizes_on_different_ranks_returns_invalid_everywhere) {
  comm_shm_group *g = NULL;
  cr_assert_eq(comm_shm_group_new(3, 10000 * MS, &g), SC_OK);
  rank_run runs[3];
  start_ranks(g, 3, mismatched_sizes, NULL, runs);
  join_ranks(runs, 3);
  for (int i = 0; i < 3; i++)
    cr_expect_eq(runs[i].st, SC_INVALID, "rank %d: %s", i, sc_status_name(runs[i].st));
  cr_expect_eq(comm_poll_error(comm_shm_group_rank(g, 1)), SC_INVALID);
  comm_shm_group_free(g);
}

Test(comm_shm, recv_of_the_wrong_size_returns_invalid_and_keeps_the_message) {
  comm_shm_group *g = NULL;
  cr_assert_eq(comm_shm_group_new(2, 1000 * MS, &g), SC_OK);
  comm *a = comm_shm_group_rank(g, 0), *b = comm_shm_group_rank(g, 1);
  int x = 42, y = 0;
  cr_assert_eq(comm_send(a, &x, sizeof x, 1), SC_OK);
  long big = 0;
  cr_expect_eq(comm_recv(b, &big, sizeof big, 0), SC_INVALID);
  cr_expect_eq(comm_recv(b, &y, sizeof y, 0), SC_OK);
  cr_expect_eq(y, 42);
  cr_expect_eq(comm_send(a, &x, sizeof x, 2), SC_INVALID, "peer out of range");
  cr_expect_eq(comm_recv(b, &y, sizeof y, -1), SC_INVALID, "peer out of range");
  cr_expect_eq(comm_poll_error(a), SC_OK);
  comm_shm_group_free(g);
}

Test(comm_shm, single_rank_group_calls_are_trivial) {
  comm_shm_group *g = NULL;
  cr_assert_eq(comm_shm_group_new(1, 50 * MS, &g), SC_OK);
  comm *c = comm_shm_group_rank(g, 0);
  cr_assert_not_null(c);
  cr_expect_eq(c->rank, 0);
  cr_expect_eq(c->n_ranks, 1);
  cr_expect_str_eq(c->i->name, "shm");
  float buf[3] = {1.5f, -2.0f, 3.25f}, out[3];
  cr_expect_eq(comm_allreduce_sum(c, buf, 3), SC_OK);
  cr_expect(buf[0] == 1.5f && buf[1] == -2.0f && buf[2] == 3.25f);
  cr_expect_eq(comm_allgather(c, buf, out, 3), SC_OK);
  cr_expect_arr_eq(out, buf, sizeof buf);
  cr_expect_eq(comm_barrier(c), SC_OK);
  int x = 7, y = 0;
  cr_expect_eq(comm_send(c, &x, sizeof x, 0), SC_OK); // to itself
  cr_expect_eq(comm_recv(c, &y, sizeof y, 0), SC_OK);
  cr_expect_eq(y, 7);
  cr_expect_eq(comm_allreduce_sum(c, NULL, 0), SC_OK);
  cr_expect_eq(comm_poll_error(c), SC_OK);
  comm_shm_group_free(g);
}

Test(comm_shm, group_new_rejects_bad_rank_counts_and_free_null_is_a_noop) {
  comm_shm_group *g = (comm_shm_group *)1;
  cr_expect_eq(comm_shm_group_new(0, 0, &g), SC_INVALID);
  cr_expect_null(g);
  g = (comm_shm_group *)1;
  cr_expect_eq(comm_shm_group_new(-3, 0, &g), SC_INVALID);
  cr_expect_null(g);
  comm_shm_group_free(NULL);
  comm_shm_group_abort(NULL);
  cr_assert_eq(comm_shm_group_new(3, 0, &g), SC_OK);
  for (int r = 0; r < 3; r++) {
    comm *c = comm_shm_group_rank(g, r);
    cr_assert_not_null(c);
    cr_expect_eq(c->rank, r);
    cr_expect_eq(c->n_ranks, 3);
  }
  cr_expect_null(comm_shm_group_rank(g, 3));
  cr_expect_null(comm_shm_group_rank(g, -1));
  comm_shm_group_free(g);
}
