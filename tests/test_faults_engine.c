// Fault hooks of the real engine: the device wrapper's faults (lost, hang, oom, corrupt), the
// shm communicator's slow link, request-scoped failures in the engine (OOM at admission, NaN
// logits), replica-fatal faults with deadlines (hung or lost ranks at tp=1, tp=2, pp=2), and
// the local replica's inject (kill, hang/resume, slow, oom, kill_rank). Models are llama-tiny
// with random weights; the only time bounds are generous "it did not hang" ones, and lower
// bounds where a fault adds time.
#include <criterion/criterion.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/presets.h"
#include "engine/engine.h"
#include "serving/replica.h"
#include "kernels/clock.h"
#include "kernels/comm.h"
#include "kernels/device.h"
#include "tests/helpers.h"

#define MS 1000000ull // ns
#define NO_HANG_NS (20000ull * MS) // "it did not hang": far above any deadline used here

// --- device wrapper

static device *open_cpu(void) {
  device *d = NULL;
  sc_error err = {{0}};
  cr_assert_eq(device_open("cpu", 0, &d, &err), SC_OK, "%s", err.msg);
  return d;
}

// Device buffers for one small matmul y(M,N) = x(M,K) w(N,K)^T.
enum { M = 4, N = 8, K = 16 };
typedef struct mm {
  float *x, *w, *y;
} mm;

static mm mm_new(device *d) {
  mm b;
  cr_assert_eq(dev_alloc(d, sizeof(float) * M * K, (void **)&b.x), SC_OK);
  cr_assert_eq(dev_alloc(d, sizeof(float) * N * K, (void **)&b.w), SC_OK);
  cr_assert_eq(dev_alloc(d, sizeof(float) * M * N, (void **)&b.y), SC_OK);
  for (int i = 0; i < M * K; i++) b.x[i] = 0.01f * (float)(i % 13) - 0.05f;
  for (int i = 0; i < N * K; i++) b.w[i] = 0.02f * (float)(i % 7) - 0.06f;
  return b;
}

static void mm_free(device *d, mm *b) {
  dev_free(d, b->x);
  dev_free(d, b->w);
  dev_free(d, b->y);
}

static sc_status mm_run(device *d, mm *b) { return dev_matmul(d, M, N, K, b->x, b->w, 0.0f, b->y); }

Test(device_faults, lost_device_fails_every_call_with_device_and_free_still_works, .timeout = 60) {
  device *d = open_cpu();
  mm b = mm_new(d);
  dev_fault f = dev_fault_none();
  f.lost = true;
  device_set_fault(d, &f);
  cr_expect(device_get_fault(d).lost);
  void *p = (void *)1;
  float h[4] = {0};
  size_t used, total;
  cr_expect_eq(dev_alloc(d, 64, &p), SC_DEVICE);
  cr_expect_null(p);
  cr_expect_eq(mm_run(d, &b), SC_DEVICE);
  cr_expect_eq(dev_copy(d, h, b.y, sizeof h, DEV_D2H), SC_DEVICE);
  cr_expect_eq(dev_synchronize(d), SC_DEVICE);
  cr_expect_eq(dev_mem_info(d, &used, &total), SC_DEVICE);
  cr_expect_eq(dev_add(d, 4, h, b.y), SC_DEVICE);
  cr_expect_eq(dev_rmsnorm(d, 1, 4, b.y, b.y, 1e-5f, b.y), SC_DEVICE);
  f = dev_fault_none();
  device_set_fault(d, &f);
  cr_expect_eq(mm_run(d, &b), SC_OK, "a replaced fault no longer applies");
  mm_free(d, &b); // frees work on a lost device too (checked by ASan)
  device_free(d);
}

Test(device_faults, transient_oom_fails_exactly_the_allocation_after_n_then_turns_off,
     .timeout = 60) {
  device *d = open_cpu();
  dev_fault f = dev_fault_none();
  f.oom_after = 2;
  device_set_fault(d, &f);
  void *p[5] = {0};
  cr_expect_eq(dev_alloc(d, 32, &p[0]), SC_OK);
  cr_expect_eq(dev_alloc(d, 32, &p[1]), SC_OK);
  cr_expect_eq(dev_alloc(d, 32, &p[2]), SC_OOM);
  cr_expect_null(p[2]);
  cr_expect_eq(dev_alloc(d, 32, &p[3]), SC_OK);
  cr_expect_eq(dev_alloc(d, 32, &p[4]), SC_OK);
  cr_expect_eq(device_get_fault(d).oom_after, -1, "the fault turned itself off");
  for (int i = 0; i < 5; i++) dev_free(d, p[i]);
  device_free(d);
}

Test(device_faults, persistent_oom_fails_every_allocation_after_n, .timeout = 60) {
  device *d = open_cpu();
  dev_fault f = dev_fault_none();
  f.oom_after = 1;
  f.oom_persistent = true;
  device_set_fault(d, &f);
  void *p = NULL, *q = NULL;
  cr_expect_eq(dev_alloc(d, 32, &p), SC_OK);
  for (int i = 0; i < 4; i++) cr_expect_eq(dev_alloc(d, 32, &q), SC_OOM, "allocation %d", i + 2);
  f = dev_fault_none();
  device_set_fault(d, &f);
  cr_expect_eq(dev_alloc(d, 32, &q), SC_OK);
  dev_free(d, p);
  dev_free(d, q);
  device_free(d);
}

static int count_nan(const float *y, int n) {
  int c = 0;
  for (int i = 0; i < n; i++) c += isnan(y[i]) != 0;
  return c;
}

Test(device_faults, corrupt_nan_poisons_one_element_of_each_matmul_and_bitflip_blows_one_up,
     .timeout = 60) {
  device *d = open_cpu();
  mm b = mm_new(d);
  cr_assert_eq(mm_run(d, &b), SC_OK);
  float clean[M * N];
  memcpy(clean, b.y, sizeof clean);
  cr_expect_eq(count_nan(clean, M * N), 0);
  dev_fault f = dev_fault_none();
  f.corrupt = DEV_CORRUPT_NAN;
  device_set_fault(d, &f);
  for (int it = 0; it < 3; it++) {
    cr_assert_eq(mm_run(d, &b), SC_OK);
    cr_expect_eq(count_nan(b.y, M * N), 1, "call %d: exactly one NaN", it);
  }
  f.corrupt = DEV_CORRUPT_BITFLIP; // every |y| here is < 2: the flip multiplies it by 2^128
  device_set_fault(d, &f);
  cr_assert_eq(mm_run(d, &b), SC_OK);
  int changed = 0;
  for (int i = 0; i < M * N; i++) {
    if (b.y[i] == clean[i]) continue;
    changed++;
    cr_expect(!(fabsf(b.y[i]) < 1e30f) || clean[i] == 0.0f, "element %d: %g -> %g", i, clean[i],
              b.y[i]);
  }
  cr_expect_eq(changed, 1, "one element flipped");
  f = dev_fault_none();
  device_set_fault(d, &f);
  cr_assert_eq(mm_run(d, &b), SC_OK);
  cr_expect_arr_eq(b.y, clean, sizeof clean, "no poison once cleared");
  mm_free(d, &b);
  device_free(d);
}

typedef struct hung_op {
  device *d;
  mm *b;
  atomic_bool done;
  sc_status st;
} hung_op;

static void *run_hung_op(void *p) {
  hung_op *h = p;
  h->st = mm_run(h->d, h->b);
  atomic_store(&h->done, true);
  return NULL;
}

// Starts a matmul on another thread while d hangs; checks it is still blocked after a while.
static pthread_t start_blocked_op(hung_op *h) {
  atomic_init(&h->done, false);
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, run_hung_op, h), 0);
  sc_test_sleep_ms(100);
  cr_expect(!atomic_load(&h->done), "the op returned while its device hangs");
  return th;
}

Test(device_faults, hang_blocks_ops_until_cleared_and_release_wakes_them_with_aborted,
     .timeout = 60) {
  device *d = open_cpu();
  mm b = mm_new(d);
  dev_fault f = dev_fault_none();
  f.hang = true;
  device_set_fault(d, &f);
  size_t used, total;
  cr_expect_eq(dev_mem_info(d, &used, &total), SC_OK, "bookkeeping calls never block");

  hung_op h = {.d = d, .b = &b};
  pthread_t th = start_blocked_op(&h);
  dev_fault none = dev_fault_none();
  device_set_fault(d, &none); // clearing the hang lets it finish
  pthread_join(th, NULL);
  cr_expect_eq(h.st, SC_OK);

  device_set_fault(d, &f);
  th = start_blocked_op(&h);
  device_fault_release(d);
  pthread_join(th, NULL);
  cr_expect_eq(h.st, SC_ABORTED, "released: %s", sc_status_name(h.st));
  cr_expect_eq(mm_run(d, &b), SC_ABORTED, "released until the fault is replaced");
  device_set_fault(d, &none);
  cr_expect_eq(mm_run(d, &b), SC_OK);
  mm_free(d, &b);
  device_free(d);
}

Test(device_faults, a_slow_op_is_cut_short_by_release_and_still_returns_its_result, .timeout = 60) {
  device *d = open_cpu();
  mm b = mm_new(d);
  dev_fault f = dev_fault_none();
  f.slow_factor = 1e9; // hours for any op
  device_set_fault(d, &f);
  hung_op h = {.d = d, .b = &b};
  uint64_t t0 = sc_monotonic_ns();
  pthread_t th = start_blocked_op(&h);
  device_fault_release(d);
  pthread_join(th, NULL);
  cr_expect_lt(sc_monotonic_ns() - t0, NO_HANG_NS);
  cr_expect_eq(h.st, SC_OK, "a slow op is not a failed one: %s", sc_status_name(h.st));
  mm_free(d, &b);
  device_free(d);
}

// --- comm: slow link

typedef struct link_run {
  comm *c;
  sc_status st;
  uint64_t took_ns;
  pthread_t th;
} link_run;

static void *allreduce_once(void *p) {
  link_run *r = p;
  float buf[256];
  for (int i = 0; i < 256; i++) buf[i] = (float)(r->c->rank + i);
  uint64_t t0 = sc_monotonic_ns();
  r->st = comm_allreduce_sum(r->c, buf, 256);
  r->took_ns = sc_monotonic_ns() - t0;
  if (r->st == SC_OK && buf[5] != (float)(1 + 2 * 5)) r->st = SC_NUMERICAL;
  return NULL;
}

static void allreduce_on_two(comm_shm_group *g, link_run runs[2]) {
  for (int i = 0; i < 2; i++) {
    runs[i] = (link_run){.c = comm_shm_group_rank(g, i)};
    cr_assert_eq(pthread_create(&runs[i].th, NULL, allreduce_once, &runs[i]), 0);
  }
  for (int i = 0; i < 2; i++) pthread_join(runs[i].th, NULL);
}

Test(comm_faults, link_latency_makes_allreduce_and_recv_take_at_least_that_long, .timeout = 60) {
  comm_shm_group *g = NULL;
  cr_assert_eq(comm_shm_group_new(2, 5000 * MS, &g), SC_OK);
  comm_shm_group_set_slow(g, 1.0, 60 * MS, 0);
  link_run runs[2];
  allreduce_on_two(g, runs);
  for (int i = 0; i < 2; i++) {
    cr_expect_eq(runs[i].st, SC_OK, "rank %d: %s", i, sc_status_name(runs[i].st));
    cr_expect_geq(runs[i].took_ns, 60 * MS, "rank %d took %.1f ms", i, runs[i].took_ns / 1e6);
  }
  // A send does not block; its message is receivable one latency later.
  comm *c0 = comm_shm_group_rank(g, 0), *c1 = comm_shm_group_rank(g, 1);
  int v = 42, got = 0;
  uint64_t t0 = sc_monotonic_ns();
  cr_assert_eq(comm_send(c0, &v, sizeof v, 1), SC_OK);
  cr_assert_eq(comm_recv(c1, &got, sizeof got, 0), SC_OK);
  cr_expect_geq(sc_monotonic_ns() - t0, 60 * MS);
  cr_expect_eq(got, 42);
  // A bandwidth cap alone: 4 KiB at 40 KiB/s is 100 ms on the link.
  comm_shm_group_set_slow(g, 0, 0, 40 * 1024.0);
  static char big[4096], back[4096];
  memset(big, 7, sizeof big);
  t0 = sc_monotonic_ns();
  cr_assert_eq(comm_send(c1, big, sizeof big, 0), SC_OK);
  cr_assert_eq(comm_recv(c0, back, sizeof back, 1), SC_OK);
  cr_expect_geq(sc_monotonic_ns() - t0, 100 * MS);
  cr_expect_arr_eq(back, big, sizeof big);
  // Back to normal: still correct.
  comm_shm_group_set_slow(g, 0, 0, 0);
  allreduce_on_two(g, runs);
  for (int i = 0; i < 2; i++) cr_expect_eq(runs[i].st, SC_OK);
  comm_shm_group_free(g);
}

Test(comm_faults, abort_cuts_a_slow_link_sleep_short, .timeout = 60) {
  comm_shm_group *g = NULL;
  cr_assert_eq(comm_shm_group_new(2, 60000 * MS, &g), SC_OK);
  comm_shm_group_set_slow(g, 1.0, 30000 * MS, 0); // 30 s per transfer
  link_run runs[2];
  for (int i = 0; i < 2; i++) {
    runs[i] = (link_run){.c = comm_shm_group_rank(g, i)};
    cr_assert_eq(pthread_create(&runs[i].th, NULL, allreduce_once, &runs[i]), 0);
  }
  sc_test_sleep_ms(100);
  comm_shm_group_abort(g);
  for (int i = 0; i < 2; i++) pthread_join(runs[i].th, NULL);
  for (int i = 0; i < 2; i++) {
    cr_expect_eq(runs[i].st, SC_ABORTED, "rank %d: %s", i, sc_status_name(runs[i].st));
    cr_expect_lt(runs[i].took_ns, NO_HANG_NS);
  }
  comm_shm_group_free(g);
}

// --- engine

static engine_config tiny(int tp, int pp) {
  engine_config c = sc_test_engine_config("llama-tiny");
  c.tp = tp;
  c.pp = pp;
  c.weights_seed = 1;
  c.kv_blocks = 64;
  c.max_running = 8;
  c.token_budget = 256;
  c.threads = 1;
  return c;
}

static engine *engine_open(engine_config c) {
  engine *e = NULL;
  sc_error err = {{0}};
  cr_assert_eq(engine_new(&c, &e, &err), SC_OK, "engine_new: %s", err.msg);
  return e;
}

// The status an ENGINE_EV_FAILED event carries.
static sc_status failed_status(const engine_event *ev) { return ev->status; }

#define MAXR 8
#define MAXT 64

// What happened to each request of one engine run.
typedef struct outcome {
  uint64_t id[MAXR];
  int n;
  int32_t tok[MAXR][MAXT];
  int n_tok[MAXR];
  bool finished[MAXR], failed[MAXR];
  sc_status fail_status[MAXR];
} outcome;

static uint64_t submit(engine *e, outcome *o, int salt, int max_tokens) {
  int32_t p[8];
  sc_test_prompt(p, 8, salt);
  engine_request r = {.prompt = p, .n_prompt = 8, .max_tokens = max_tokens};
  sc_error err = {{0}};
  cr_assert_lt(o->n, MAXR);
  cr_assert_eq(engine_submit(e, &r, &o->id[o->n], &err), SC_OK, "%s", err.msg);
  return o->id[o->n++];
}

static int outcome_index(const outcome *o, uint64_t id) {
  for (int i = 0; i < o->n; i++)
    if (o->id[i] == id) return i;
  cr_assert_fail("event for unknown request %llu", (unsigned long long)id);
  return -1;
}

static void record(outcome *o, const engine_step_result *res) {
  for (int k = 0; k < res->n_events; k++) {
    const engine_event *ev = &res->events[k];
    int i = outcome_index(o, ev->req_id);
    cr_assert(!o->finished[i] && !o->failed[i], "no event after a request ended");
    if (ev->kind == ENGINE_EV_TOKEN) {
      cr_assert_lt(o->n_tok[i], MAXT);
      o->tok[i][o->n_tok[i]++] = ev->token;
    } else if (ev->kind == ENGINE_EV_FINISHED) {
      o->finished[i] = true;
    } else {
      o->failed[i] = true;
      o->fail_status[i] = failed_status(ev);
    }
  }
}

// Steps e until it is idle; every step must succeed.
static void run_to_idle(engine *e, outcome *o) {
  for (int guard = 0; !engine_idle(e); guard++) {
    cr_assert_lt(guard, 10000, "the engine did not finish");
    engine_step_result res;
    sc_error err = {{0}};
    cr_assert_eq(engine_step(e, &res, &err), SC_OK, "step: %s", err.msg);
    record(o, &res);
  }
}

// Greedy tokens of request `salt` alone on a fault-free engine of this layout.
static void reference_tokens(int tp, int salt, int max_tokens, int32_t *out) {
  engine *e = engine_open(tiny(tp, 1));
  outcome o = {0};
  submit(e, &o, salt, max_tokens);
  run_to_idle(e, &o);
  cr_assert(o.finished[0] && o.n_tok[0] == max_tokens);
  memcpy(out, o.tok[0], sizeof(int32_t) * (size_t)max_tokens);
  engine_free(e);
}

Test(engine_faults, oom_at_admission_fails_that_request_while_another_completes, .timeout = 60) {
  int32_t want[8];
  reference_tokens(1, 2, 8, want);
  engine *e = engine_open(tiny(1, 1));
  dev_fault f = dev_fault_none();
  f.oom_after = 0; // the next allocation fails, once
  cr_assert_eq(engine_set_rank_fault(e, 0, &f), SC_OK);
  outcome o = {0};
  submit(e, &o, 1, 8);
  submit(e, &o, 2, 8);
  run_to_idle(e, &o);
  cr_expect(o.failed[0] && o.fail_status[0] == SC_OOM, "first request: failed %d status %s",
            o.failed[0], sc_status_name(o.fail_status[0]));
  cr_expect_eq(o.n_tok[0], 0);
  cr_expect(o.finished[1], "the other request completes");
  cr_expect_arr_eq(o.tok[1], want, sizeof want, "with the tokens it has without the fault");
  engine_stats st;
  engine_stats_get(e, &st);
  cr_expect_eq(st.oom_failures, 1);
  cr_expect(!st.unhealthy);
  cr_expect_eq(st.kv_used, 0, "the failed request's blocks came back");
  engine_free(e);
}

Test(engine_faults, three_consecutive_oom_failures_make_the_engine_unhealthy_until_a_success,
     .timeout = 60) {
  engine *e = engine_open(tiny(1, 1));
  dev_fault f = dev_fault_none();
  f.oom_after = 0;
  f.oom_persistent = true;
  cr_assert_eq(engine_set_rank_fault(e, -1, &f), SC_OK);
  outcome o = {0};
  engine_stats st;
  for (int i = 0; i < 3; i++) {
    submit(e, &o, i, 4);
    run_to_idle(e, &o);
    cr_expect(o.failed[i] && o.fail_status[i] == SC_OOM, "request %d", i);
    engine_stats_get(e, &st);
    cr_expect_eq(st.unhealthy, i == 2, "after %d failures: unhealthy %d", i + 1, st.unhealthy);
  }
  cr_expect_eq(st.oom_failures, 3);
  f = dev_fault_none();
  cr_assert_eq(engine_set_rank_fault(e, -1, &f), SC_OK);
  submit(e, &o, 3, 4);
  run_to_idle(e, &o);
  cr_expect(o.finished[3]);
  engine_stats_get(e, &st);
  cr_expect(!st.unhealthy, "a successful admission makes it healthy again");
  cr_expect_eq(st.kv_used, 0);
  engine_free(e);
}

Test(engine_faults, nan_logits_fail_requests_as_numerical_and_the_engine_serves_after_clear,
     .timeout = 60) {
  int32_t want[6];
  reference_tokens(1, 5, 6, want);
  engine *e = engine_open(tiny(1, 1));
  dev_fault f = dev_fault_none();
  f.corrupt = DEV_CORRUPT_NAN;
  cr_assert_eq(engine_set_rank_fault(e, 0, &f), SC_OK);
  outcome o = {0};
  submit(e, &o, 1, 6);
  submit(e, &o, 2, 6);
  run_to_idle(e, &o);
  for (int i = 0; i < 2; i++)
    cr_expect(o.failed[i] && o.fail_status[i] == SC_NUMERICAL, "request %d: failed %d %s", i,
              o.failed[i], sc_status_name(o.fail_status[i]));
  engine_stats st;
  engine_stats_get(e, &st);
  cr_expect_eq(st.numerical_failures, 2);
  cr_expect_eq(st.kv_used, 0);
  f = dev_fault_none();
  cr_assert_eq(engine_set_rank_fault(e, 0, &f), SC_OK);
  submit(e, &o, 5, 6);
  run_to_idle(e, &o);
  cr_expect(o.finished[2], "the engine lives on");
  cr_expect_arr_eq(o.tok[2], want, sizeof want, "and computes what it computed before");
  engine_free(e);
}

Test(engine_faults, fault_hooks_refuse_bad_ranks, .timeout = 60) {
  engine *e = engine_open(tiny(2, 1));
  dev_fault f = dev_fault_none();
  cr_expect_eq(engine_set_rank_fault(e, 2, &f), SC_INVALID);
  cr_expect_eq(engine_set_rank_fault(e, -2, &f), SC_INVALID);
  cr_expect_eq(engine_set_rank_fault(e, 1, &f), SC_OK);
  cr_expect_eq(engine_set_link_fault(e, 2.0, 0, 0), SC_OK);
  cr_expect_eq(engine_set_link_fault(e, 0, 0, 0), SC_OK);
  engine_free(e);
}

// Steps e until a step fails; returns its status, the error in err and how long it took.
static sc_status step_until_failure(engine *e, sc_error *err, uint64_t *took_ns) {
  uint64_t t0 = sc_monotonic_ns();
  for (int guard = 0; guard < 1000; guard++) {
    engine_step_result res;
    sc_status s = engine_step(e, &res, err);
    if (s != SC_OK) {
      *took_ns = sc_monotonic_ns() - t0;
      return s;
    }
  }
  cr_assert_fail("no step failed");
  return SC_OK;
}

// Runs one request on a (tp, pp) engine with a 300 ms collective deadline, sets fault f on
// rank r after the first step, and checks the next step fails in time with an error naming r.
static void rank_fault_kills_step(int tp, int pp, int r, dev_fault f, sc_status want,
                                  const char *cause) {
  engine_config c = tiny(tp, pp);
  c.collective_timeout_ns = 300 * MS;
  engine *e = engine_open(c);
  outcome o = {0};
  submit(e, &o, 1, 40);
  engine_step_result res;
  sc_error err = {{0}};
  cr_assert_eq(engine_step(e, &res, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(engine_set_rank_fault(e, r, &f), SC_OK);
  uint64_t took = 0;
  sc_status s = step_until_failure(e, &err, &took);
  cr_expect_eq(s, want, "tp=%d pp=%d: %s (%s)", tp, pp, sc_status_name(s), err.msg);
  char name[32];
  snprintf(name, sizeof name, "rank %d ", r);
  cr_expect(strstr(err.msg, name) != NULL, "the error names %s: %s", name, err.msg);
  cr_expect(strstr(err.msg, cause) != NULL, "the error says '%s': %s", cause, err.msg);
  cr_expect_lt(took, NO_HANG_NS, "it took %.1f s", took / 1e9);
  cr_log_info("tp=%d pp=%d: '%s' after %.3f s", tp, pp, err.msg, took / 1e9);
  sc_error again = {{0}};
  cr_expect_neq(engine_step(e, &res, &again), SC_OK, "the engine is unusable after");
  engine_free(e); // joins every rank thread
}

static dev_fault hang_fault(void) {
  dev_fault f = dev_fault_none();
  f.hang = true;
  return f;
}

static dev_fault lost_fault(void) {
  dev_fault f = dev_fault_none();
  f.lost = true;
  return f;
}

Test(engine_faults, tp2_hung_rank_fails_the_step_at_the_collective_deadline_naming_it,
     .timeout = 60) {
  rank_fault_kills_step(2, 1, 1, hang_fault(), SC_TIMEOUT, "device hung");
}

Test(engine_faults, tp2_lost_rank_fails_the_step_naming_it, .timeout = 60) {
  rank_fault_kills_step(2, 1, 1, lost_fault(), SC_DEVICE, "device lost");
}

Test(engine_faults, tp1_hung_rank_gives_up_after_the_collective_timeout, .timeout = 60) {
  rank_fault_kills_step(1, 1, 0, hang_fault(), SC_TIMEOUT, "device hung");
}

Test(engine_faults, pp2_hung_last_stage_that_no_peer_waits_for_gives_up_after_the_timeout,
     .timeout = 60) {
  rank_fault_kills_step(1, 2, 1, hang_fault(), SC_TIMEOUT, "device hung");
}

Test(engine_faults, lost_rank_at_admission_is_fatal_and_names_the_rank, .timeout = 60) {
  engine *e = engine_open(tiny(2, 1));
  dev_fault f = lost_fault();
  cr_assert_eq(engine_set_rank_fault(e, 1, &f), SC_OK);
  outcome o = {0};
  submit(e, &o, 1, 4);
  sc_error err = {{0}};
  uint64_t took = 0;
  cr_expect_eq(step_until_failure(e, &err, &took), SC_DEVICE);
  cr_expect(strstr(err.msg, "rank 1 ") && strstr(err.msg, "device lost"), "%s", err.msg);
  engine_free(e);
}

// --- replica_local

typedef struct rlog {
  int32_t tok[MAXR][MAXT];
  int n_tok[MAXR];
  bool finished[MAXR], failed[MAXR];
  sc_status status[MAXR];
  char what[MAXR][32];
  int events;
} rlog;

static replica *replica_open(engine_config c) {
  replica *r = NULL;
  sc_error err = {{0}};
  cr_assert_eq(replica_local_new(&c, 0, &r, &err), SC_OK, "%s", err.msg);
  return r;
}

static void rsubmit(replica *r, uint64_t key, int salt, int max_tokens) {
  int32_t p[8];
  sc_test_prompt(p, 8, salt);
  engine_request q = {.prompt = p, .n_prompt = 8, .max_tokens = max_tokens};
  sc_error err = {{0}};
  cr_assert_eq(replica_submit(r, key, &q, &err), SC_OK, "%s", err.msg);
}

// Moves pending events into L (keys are 0..MAXR-1); returns how many request events came.
static int rdrain(replica *r, rlog *L) {
  replica_event ev[64];
  int n, got = 0;
  while ((n = replica_poll(r, ev, 64)) > 0)
    for (int k = 0; k < n; k++) {
      if (ev[k].kind == REPLICA_EV_STEP) continue;
      cr_assert_lt(ev[k].key, (uint64_t)MAXR);
      int i = (int)ev[k].key;
      cr_assert(!L->finished[i] && !L->failed[i], "key %d: event after its end", i);
      got++;
      L->events++;
      if (ev[k].kind == REPLICA_EV_TOKEN) {
        cr_assert_lt(L->n_tok[i], MAXT);
        L->tok[i][L->n_tok[i]++] = ev[k].token;
      } else if (ev[k].kind == REPLICA_EV_FINISHED) {
        L->finished[i] = true;
      } else {
        L->failed[i] = true;
        L->status[i] = ev[k].status;
        snprintf(L->what[i], sizeof L->what[i], "%s", replica_failure_name(ev[k].failure));
      }
    }
  return got;
}

static bool all_ended(const rlog *L, int n) {
  for (int i = 0; i < n; i++)
    if (!L->finished[i] && !L->failed[i]) return false;
  return true;
}

// Waits (on the replica's fd) until keys 0..n-1 have all ended; fails past NO_HANG_NS.
static void rwait_all(replica *r, rlog *L, int n) {
  uint64_t t0 = sc_monotonic_ns();
  rdrain(r, L);
  while (!all_ended(L, n)) {
    cr_assert_lt(sc_monotonic_ns() - t0, NO_HANG_NS, "the replica did not finish");
    struct pollfd pf = {.fd = replica_wait_fd(r), .events = POLLIN};
    poll(&pf, 1, 50);
    rdrain(r, L);
  }
}

Test(replica_faults, kill_makes_the_replica_dead_and_fails_every_held_request_as_lost,
     .timeout = 60) {
  engine_config c = tiny(1, 1);
  replica *r = replica_open(c);
  // Slow enough that the requests are still running when the kill lands.
  replica_fault slow = {.kind = RFAULT_SLOW_RANK, .rank = 0, .factor = 20};
  sc_error err = {{0}};
  cr_assert_eq(replica_inject(r, &slow, &err), SC_OK, "%s", err.msg);
  for (int i = 0; i < 3; i++) rsubmit(r, (uint64_t)i, i, 60);
  rlog L = {0};
  uint64_t t0 = sc_monotonic_ns();
  while (L.n_tok[0] + L.n_tok[1] + L.n_tok[2] == 0) { // running, not only queued
    cr_assert_lt(sc_monotonic_ns() - t0, NO_HANG_NS);
    sc_test_sleep_ms(5);
    rdrain(r, &L);
  }
  replica_fault kill = {.kind = RFAULT_KILL};
  cr_assert_eq(replica_inject(r, &kill, &err), SC_OK, "%s", err.msg);
  cr_expect_eq(replica_health_get(r), REPLICA_DEAD);
  cr_expect_str_eq(replica_error(r), "killed (fault injection)");
  rwait_all(r, &L, 3);
  for (int i = 0; i < 3; i++) {
    cr_expect(L.failed[i], "key %d failed", i);
    cr_expect_str_eq(L.what[i], "replica_lost", "key %d", i);
    cr_expect_eq(L.status[i], SC_ABORTED);
  }
  int32_t p[2] = {5, 6};
  engine_request q = {.prompt = p, .n_prompt = 2, .max_tokens = 2};
  cr_expect_eq(replica_submit(r, 7, &q, &err), SC_ABORTED);
  cr_expect_eq(replica_inject(r, &kill, &err), SC_ABORTED, "a dead replica takes no faults");
  sc_test_sleep_ms(50);
  cr_expect_eq(rdrain(r, &L), 0, "nothing after the kill's events");
  replica_free(r);
}

Test(replica_faults, hang_stops_tokens_until_resume_and_tokens_match_a_run_without_it,
     .timeout = 60) {
  int32_t want[2][12];
  reference_tokens(1, 1, 12, want[0]);
  reference_tokens(1, 2, 12, want[1]);
  replica *r = replica_open(tiny(1, 1));
  replica_fault hang = {.kind = RFAULT_HANG}, resume = {.kind = RFAULT_RESUME};
  sc_error err = {{0}};
  cr_assert_eq(replica_inject(r, &hang, &err), SC_OK, "%s", err.msg);
  rsubmit(r, 0, 1, 12);
  rsubmit(r, 1, 2, 12);
  rlog L = {0};
  sc_test_sleep_ms(150);
  cr_expect_eq(rdrain(r, &L), 0, "no events while hung");
  cr_expect_eq(replica_health_get(r), REPLICA_HEALTHY);
  cr_assert_eq(replica_inject(r, &resume, &err), SC_OK, "%s", err.msg);
  rwait_all(r, &L, 2);
  for (int i = 0; i < 2; i++) {
    cr_expect(L.finished[i], "key %d", i);
    cr_expect_arr_eq(L.tok[i], want[i], sizeof want[i], "key %d tokens", i);
  }
  replica_free(r);
}

Test(replica_faults, slow_rank_and_slow_link_still_give_identical_tokens, .timeout = 60) {
  int32_t want[10];
  reference_tokens(2, 3, 10, want);
  replica *r = replica_open(tiny(2, 1));
  sc_error err = {{0}};
  replica_fault slow = {.kind = RFAULT_SLOW_RANK, .rank = 1, .factor = 3};
  replica_fault link = {.kind = RFAULT_SLOW_LINK, .factor = 2, .latency_ns = 200000};
  cr_assert_eq(replica_inject(r, &slow, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(replica_inject(r, &link, &err), SC_OK, "%s", err.msg);
  rsubmit(r, 0, 3, 10);
  rlog L = {0};
  rwait_all(r, &L, 1);
  cr_expect(L.finished[0]);
  cr_expect_arr_eq(L.tok[0], want, sizeof want);
  replica_fault clear = {.kind = RFAULT_CLEAR, .rank = -1};
  cr_expect_eq(replica_inject(r, &clear, &err), SC_OK, "%s", err.msg);
  replica_fault bad = {.kind = RFAULT_SLOW_RANK, .rank = 2, .factor = 3};
  cr_expect_eq(replica_inject(r, &bad, &err), SC_INVALID, "rank out of range");
  replica_free(r);
}

Test(replica_faults, persistent_oom_fails_requests_as_oom_and_makes_the_replica_unhealthy,
     .timeout = 60) {
  replica *r = replica_open(tiny(1, 1));
  sc_error err = {{0}};
  replica_fault oom = {.kind = RFAULT_OOM, .rank = -1, .after_allocs = 0, .persistent = true};
  cr_assert_eq(replica_inject(r, &oom, &err), SC_OK, "%s", err.msg);
  rlog L = {0};
  for (int i = 0; i < 3; i++) rsubmit(r, (uint64_t)i, i, 4);
  rwait_all(r, &L, 3);
  for (int i = 0; i < 3; i++) {
    cr_expect(L.failed[i], "key %d", i);
    cr_expect_str_eq(L.what[i], "oom", "key %d", i);
    cr_expect_eq(L.status[i], SC_OOM);
  }
  cr_expect_eq(replica_health_get(r), REPLICA_UNHEALTHY);
  engine_stats st;
  replica_stats(r, &st);
  cr_expect_eq(st.oom_failures, 3);
  replica_fault clear = {.kind = RFAULT_CLEAR, .rank = -1};
  cr_assert_eq(replica_inject(r, &clear, &err), SC_OK, "%s", err.msg);
  rsubmit(r, 3, 3, 4);
  rwait_all(r, &L, 4);
  cr_expect(L.finished[3]);
  cr_expect_eq(replica_health_get(r), REPLICA_HEALTHY, "healthy again after a success");
  replica_free(r);
}

Test(replica_faults, corrupt_fails_requests_as_numerical_and_the_replica_lives, .timeout = 60) {
  replica *r = replica_open(tiny(1, 1));
  sc_error err = {{0}};
  replica_fault bad = {.kind = RFAULT_CORRUPT, .rank = 0};
  cr_assert_eq(replica_inject(r, &bad, &err), SC_OK, "%s", err.msg);
  rlog L = {0};
  rsubmit(r, 0, 1, 4);
  rwait_all(r, &L, 1);
  cr_expect(L.failed[0]);
  cr_expect_str_eq(L.what[0], "numerical");
  cr_expect_eq(replica_health_get(r), REPLICA_HEALTHY);
  replica_free(r);
}

// Runs one request on a tp=2 replica (300 ms deadline) with fault f injected first; the
// replica must die with every request FAILED "replica_failed" and an error naming rank 1.
static void rank_fault_kills_replica(replica_fault f, const char *cause) {
  engine_config c = tiny(2, 1);
  c.collective_timeout_ns = 300 * MS;
  replica *r = replica_open(c);
  sc_error err = {{0}};
  cr_assert_eq(replica_inject(r, &f, &err), SC_OK, "%s", err.msg);
  rsubmit(r, 0, 1, 8);
  rlog L = {0};
  rwait_all(r, &L, 1);
  cr_expect(L.failed[0]);
  cr_expect_str_eq(L.what[0], "replica_failed");
  cr_expect_eq(replica_health_get(r), REPLICA_DEAD);
  const char *why = replica_error(r);
  cr_expect(strstr(why, "rank 1 ") && strstr(why, cause), "error: %s", why);
  replica_free(r);
}

Test(replica_faults, kill_rank_kills_the_replica_with_an_error_naming_the_rank, .timeout = 60) {
  rank_fault_kills_replica((replica_fault){.kind = RFAULT_KILL_RANK, .rank = 1}, "device lost");
}

Test(replica_faults, hang_rank_kills_the_replica_at_the_collective_deadline, .timeout = 60) {
  rank_fault_kills_replica((replica_fault){.kind = RFAULT_HANG_RANK, .rank = 1}, "device hung");
}
