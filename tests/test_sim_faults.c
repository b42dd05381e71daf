// Faults on the simulated replica (serving/replica_sim.c): kill, kill_rank, hang, hang_rank,
// resume, slow rank and link, OOM, corruption, clear, restart and epochs, in virtual time.
// Every test drives the replica the way the runner's sim loop does (jump the clock to
// replica_next_ns, replica_advance, poll) and checks the invariants a fault run is judged by:
// every submitted key gets exactly one terminal event, KV returns to zero, detection happens
// at the configured timeout exactly, and the same calls give the same events.
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "config/hardware.h"
#include "engine/model.h"
#include "serving/replica.h"
#include "tests/helpers.h"

#define MS 1000000ull
#define SEC 1000000000ull

// llama3-8b on h100-sxm as tp x pp with 4096 KV blocks.
static simbed *bed_new(int tp, int pp) {
  return sc_test_simbed_new("llama3-8b", "h100-sxm", tp, pp, 4096);
}

static replica *bed_replica(simbed *b) {
  replica *r = NULL;
  sc_error err = {{0}};
  cr_assert_eq(replica_sim_new(&b->cfg, 0, &r, &err), SC_OK, "%s", err.msg);
  return r;
}

// --- an event log and its invariants

typedef struct evlog {
  replica_event *v; // (cap)
  size_t n, cap;
} evlog;

static void pull(replica *r, evlog *l) {
  for (;;) {
    if (l->cap - l->n < 256) {
      l->cap = l->cap ? 2 * l->cap : 1024;
      l->v = realloc(l->v, l->cap * sizeof *l->v);
      cr_assert_not_null(l->v);
    }
    int n = replica_poll(r, l->v + l->n, 256);
    if (n <= 0) return;
    l->n += (size_t)n;
  }
}

// The loop of runner/runner.c in sim mode: jump to the replica's next time, advance, poll;
// stops at `until` (the clock then reads until) or when the replica has nothing left to do.
static void drive_until(simbed *b, replica *r, evlog *l, uint64_t until) {
  for (int guard = 0; guard < 1000000; guard++) {
    uint64_t next = replica_next_ns(r);
    if (next == UINT64_MAX || next > until) {
      if (until != UINT64_MAX && until > b->now) b->now = until;
      pull(r, l);
      return;
    }
    cr_assert_geq(next, b->now, "the next event is never in the past");
    b->now = next;
    replica_advance(r, b->now);
    pull(r, l);
  }
  cr_assert_fail("the replica never went idle");
}

static void drive(simbed *b, replica *r, evlog *l) { drive_until(b, r, l, UINT64_MAX); }

// Drives until `steps` steps have completed and the next one is in flight (started at now).
static void drive_steps(simbed *b, replica *r, evlog *l, int steps) {
  for (int guard = 0; guard < 100000; guard++) {
    int done = 0;
    for (size_t i = 0; i < l->n; i++) done += l->v[i].kind == REPLICA_EV_STEP;
    if (done >= steps) {
      replica_advance(r, b->now); // starts the next step at once
      cr_assert_gt(replica_next_ns(r), b->now, "a step is in flight");
      return;
    }
    uint64_t next = replica_next_ns(r);
    cr_assert_neq(next, UINT64_MAX, "the replica went idle after %d steps", done);
    b->now = next;
    replica_advance(r, b->now);
    pull(r, l);
  }
  cr_assert_fail("too many steps");
}

static sc_status inject(replica *r, replica_fault f) {
  sc_error err = {{0}};
  return replica_inject(r, &f, &err);
}

// The terminal event of key (NULL when none), checking there is at most one and nothing of
// key comes after it.
static const replica_event *terminal(const evlog *l, uint64_t key) {
  const replica_event *t = NULL;
  for (size_t i = 0; i < l->n; i++) {
    const replica_event *e = &l->v[i];
    if (e->kind == REPLICA_EV_STEP || e->key != key) continue;
    cr_assert_null(t, "key %llu has an event after its terminal one",
                   (unsigned long long)key);
    if (e->kind == REPLICA_EV_FINISHED || e->kind == REPLICA_EV_FAILED) t = e;
  }
  return t;
}

// Every key in [0, n) got exactly one terminal event; returns how many FAILED with `what`.
static int expect_one_terminal_each(const evlog *l, int n, const char *what) {
  int failed = 0;
  for (int k = 0; k < n; k++) {
    const replica_event *t = terminal(l, (uint64_t)k);
    cr_assert_not_null(t, "key %d got no terminal event", k);
    if (t->kind == REPLICA_EV_FAILED && strcmp(replica_failure_name(t->failure), what) == 0)
      failed++;
  }
  return failed;
}

static int tokens_of(const evlog *l, uint64_t key) {
  int n = 0;
  for (size_t i = 0; i < l->n; i++)
    if (l->v[i].kind == REPLICA_EV_TOKEN && l->v[i].key == key) n++;
  return n;
}

static int count_kind(const evlog *l, replica_ev_kind k) {
  int n = 0;
  for (size_t i = 0; i < l->n; i++) n += l->v[i].kind == k;
  return n;
}

static void expect_kv_free(replica *r) {
  engine_stats st;
  replica_stats(r, &st);
  cr_expect_eq(st.kv_used, 0, "KV blocks still in use: %d", st.kv_used);
}

static void submit_batch(replica *r, int n) {
  for (int k = 0; k < n; k++) sc_test_submit(r, (uint64_t)k, 100 + 40 * k, 12 + k);
}

// --- kill

Test(sim_faults, kill_fails_every_held_request_once_abandons_the_step_and_frees_kv) {
  simbed *b = bed_new(1, 1);
  replica *r = bed_replica(b);
  evlog l = {0};
  cr_expect_eq(replica_epoch(r), 1);
  submit_batch(r, 8);
  sc_test_submit(r, 8, 40, 4); // its 4th token and FINISHED come with step 4, the one killed
  drive_steps(b, r, &l, 3);
  b->now += 1000; // inside the step in flight
  uint64_t t_kill = b->now;
  size_t before = l.n;
  cr_assert_eq(inject(r, (replica_fault){.kind = RFAULT_KILL, .rank = -1}), SC_OK);
  pull(r, &l);
  cr_expect_eq(replica_health_get(r), REPLICA_DEAD);
  cr_expect_str_eq(replica_error(r), "killed (fault injection)");
  for (size_t i = before; i < l.n; i++) {
    cr_expect_eq(l.v[i].kind, REPLICA_EV_FAILED, "only FAILED events after the kill");
    cr_expect_eq(l.v[i].t_ns, t_kill);
    cr_expect_eq(l.v[i].status, SC_ABORTED);
  }
  int lost = expect_one_terminal_each(&l, 9, "replica_lost");
  cr_expect_eq(lost, 9, "nobody finished within 3 steps: %d lost", lost);
  cr_expect_eq(tokens_of(&l, 8), 3, "the abandoned step's token never came");
  for (size_t i = 0; i < l.n; i++) cr_expect_leq(l.v[i].t_ns, t_kill, "the step never ended");
  cr_expect_eq(replica_next_ns(r), UINT64_MAX);
  expect_kv_free(r);
  // a dead replica takes nothing more
  engine_request q = {.prompt = (int32_t[]){1, 2}, .n_prompt = 2, .max_tokens = 1};
  sc_error err = {{0}};
  cr_expect_eq(replica_submit(r, 99, &q, &err), SC_ABORTED);
  cr_expect_eq(inject(r, (replica_fault){.kind = RFAULT_HANG, .rank = -1}), SC_ABORTED);
  b->now += SEC;
  cr_expect_not(replica_advance(r, b->now));
  free(l.v);
  replica_free(r);
  sc_test_simbed_free(b);
}

Test(sim_faults, a_rank_out_of_range_is_refused) {
  simbed *b = bed_new(2, 1);
  replica *r = bed_replica(b);
  cr_expect_eq(inject(r, (replica_fault){.kind = RFAULT_KILL_RANK, .rank = 2}), SC_INVALID);
  cr_expect_eq(inject(r, (replica_fault){.kind = RFAULT_HANG_RANK, .rank = -2}), SC_INVALID);
  cr_expect_eq(inject(r, (replica_fault){.kind = RFAULT_SLOW_RANK, .rank = 1, .factor = 2}),
               SC_OK);
  cr_expect_eq(replica_health_get(r), REPLICA_HEALTHY);
  replica_free(r);
  sc_test_simbed_free(b);
}

// --- kill_rank

Test(sim_faults, kill_rank_fails_the_step_in_flight_with_device_lost) {
  simbed *b = bed_new(2, 1);
  replica *r = bed_replica(b);
  evlog l = {0};
  submit_batch(r, 4);
  drive_steps(b, r, &l, 2);
  b->now += 500;
  uint64_t t = b->now;
  cr_assert_eq(inject(r, (replica_fault){.kind = RFAULT_KILL_RANK, .rank = 1}), SC_OK);
  pull(r, &l);
  cr_expect_eq(replica_health_get(r), REPLICA_DEAD);
  cr_expect_str_eq(replica_error(r), "rank 1: device lost");
  cr_expect_eq(expect_one_terminal_each(&l, 4, "replica_failed"), 4);
  for (size_t i = 0; i < l.n; i++)
    if (l.v[i].kind == REPLICA_EV_FAILED) cr_expect_eq(l.v[i].t_ns, t);
  expect_kv_free(r);
  free(l.v);
  replica_free(r);
  sc_test_simbed_free(b);
}

Test(sim_faults, kill_rank_on_an_idle_replica_fails_its_next_step) {
  simbed *b = bed_new(2, 1);
  replica *r = bed_replica(b);
  evlog l = {0};
  b->now = 5 * MS;
  cr_assert_eq(inject(r, (replica_fault){.kind = RFAULT_KILL_RANK, .rank = 0}), SC_OK);
  cr_expect_eq(replica_health_get(r), REPLICA_HEALTHY, "nobody used the device yet");
  cr_expect_eq(replica_next_ns(r), UINT64_MAX);
  b->now = 7 * MS;
  sc_test_submit(r, 0, 64, 4);
  drive(b, r, &l);
  cr_expect_eq(replica_health_get(r), REPLICA_DEAD);
  cr_expect_str_eq(replica_error(r), "rank 0: device lost");
  cr_expect_eq(expect_one_terminal_each(&l, 1, "replica_failed"), 1);
  cr_expect_eq(terminal(&l, 0)->t_ns, 7 * MS, "the step that would start at 7 ms fails");
  cr_expect_eq(count_kind(&l, REPLICA_EV_STEP), 0);
  expect_kv_free(r);
  free(l.v);
  replica_free(r);
  sc_test_simbed_free(b);
}

// --- hang

Test(sim_faults, hang_is_declared_lost_exactly_at_the_heartbeat_timeout) {
  simbed *b = bed_new(1, 1); // detect_timeout_ns 0: 2 s
  replica *r = bed_replica(b);
  evlog l = {0};
  submit_batch(r, 6);
  drive_steps(b, r, &l, 2);
  b->now += 777;
  uint64_t t_hang = b->now;
  cr_assert_eq(inject(r, (replica_fault){.kind = RFAULT_HANG, .rank = -1}), SC_OK);
  cr_expect_eq(replica_next_ns(r), t_hang + 2 * SEC, "the loop must wake at detection");
  cr_expect_eq(replica_health_get(r), REPLICA_HEALTHY, "not yet noticed");
  b->now = t_hang + SEC;
  sc_test_submit(r, 6, 50, 3); // queued in the hung replica; lost with it
  size_t before = l.n;
  drive(b, r, &l);
  cr_expect_eq(b->now, t_hang + 2 * SEC);
  cr_expect_eq(replica_health_get(r), REPLICA_DEAD);
  cr_expect_str_eq(replica_error(r), "no heartbeat for 2.000 s (hung?)");
  for (size_t i = before; i < l.n; i++) {
    cr_expect_eq(l.v[i].kind, REPLICA_EV_FAILED, "nothing completes while hung");
    cr_expect_eq(l.v[i].t_ns, t_hang + 2 * SEC);
  }
  cr_expect_eq(expect_one_terminal_each(&l, 7, "replica_lost"), 7);
  expect_kv_free(r);
  // RESUME after it was declared lost: fenced, nothing happens
  size_t n = l.n;
  cr_expect_eq(inject(r, (replica_fault){.kind = RFAULT_RESUME, .rank = -1}), SC_ABORTED);
  drive(b, r, &l);
  cr_expect_eq(l.n, n);
  cr_expect_eq(replica_health_get(r), REPLICA_DEAD);
  free(l.v);
  replica_free(r);
  sc_test_simbed_free(b);
}

Test(sim_faults, hang_uses_the_configured_detect_timeout_even_when_idle) {
  simbed *b = bed_new(1, 1);
  b->cfg.sim.detect_timeout_ns = 750 * MS;
  replica *r = bed_replica(b);
  evlog l = {0};
  b->now = 3 * SEC;
  cr_assert_eq(inject(r, (replica_fault){.kind = RFAULT_HANG, .rank = -1}), SC_OK);
  cr_expect_eq(replica_next_ns(r), 3 * SEC + 750 * MS);
  drive(b, r, &l);
  cr_expect_eq(replica_health_get(r), REPLICA_DEAD);
  cr_expect_str_eq(replica_error(r), "no heartbeat for 0.750 s (hung?)");
  cr_expect_eq(l.n, 0, "it held no request");
  free(l.v);
  replica_free(r);
  sc_test_simbed_free(b);
}

// Runs 6 requests; with hang_for > 0, hangs the third step for that long. Returns the log.
static evlog run_with_hang(uint64_t hang_for, replica_fault_kind kind, int tp, uint64_t *t_hang) {
  simbed *b = bed_new(tp, 1);
  replica *r = bed_replica(b);
  evlog l = {0};
  submit_batch(r, 6);
  if (hang_for) {
    drive_steps(b, r, &l, 2);
    b->now += 1234;
    *t_hang = b->now;
    cr_assert_eq(inject(r, (replica_fault){.kind = kind, .rank = tp - 1}), SC_OK);
    drive_until(b, r, &l, *t_hang + hang_for);
    cr_assert_eq(b->now, *t_hang + hang_for);
    cr_assert_eq(inject(r, (replica_fault){.kind = RFAULT_RESUME, .rank = -1}), SC_OK);
  }
  drive(b, r, &l);
  cr_expect_eq(replica_health_get(r), REPLICA_HEALTHY);
  expect_kv_free(r);
  replica_free(r);
  sc_test_simbed_free(b);
  return l;
}

// The hung run has the plain run's events, every one at or after the hang shifted by its length.
static void expect_shifted(const evlog *plain, const evlog *hung, uint64_t t_hang, uint64_t d) {
  cr_assert_eq(hung->n, plain->n, "%zu events vs %zu", hung->n, plain->n);
  for (size_t i = 0; i < plain->n; i++) {
    const replica_event *a = &plain->v[i], *h = &hung->v[i];
    cr_assert_eq(h->kind, a->kind);
    cr_assert_eq(h->key, a->key);
    if (a->kind == REPLICA_EV_TOKEN) {
      cr_assert_eq(h->token, a->token, "the same tokens");
      cr_assert_eq(h->index, a->index);
    }
    uint64_t want = a->t_ns > t_hang ? a->t_ns + d : a->t_ns;
    cr_assert_eq(h->t_ns, want, "event %zu at %llu, want %llu", i,
                 (unsigned long long)h->t_ns, (unsigned long long)want);
  }
  cr_expect_eq(expect_one_terminal_each(hung, 6, "-"), 0, "nothing failed");
}

Test(sim_faults, hang_then_resume_before_detection_delays_the_step_and_keeps_the_tokens) {
  uint64_t t_hang = 0, unused = 0;
  evlog plain = run_with_hang(0, RFAULT_HANG, 1, &unused);
  evlog hung = run_with_hang(1500 * MS, RFAULT_HANG, 1, &t_hang);
  expect_shifted(&plain, &hung, t_hang, 1500 * MS);
  for (int k = 0; k < 6; k++) cr_expect_eq(tokens_of(&hung, (uint64_t)k), 12 + k);
  free(plain.v);
  free(hung.v);
}

// --- hang_rank

Test(sim_faults, hang_rank_fails_at_the_collective_deadline_from_the_step_start) {
  simbed *b = bed_new(2, 1);
  b->cfg.sim.collective_timeout_ns = 3 * SEC;
  replica *r = bed_replica(b);
  evlog l = {0};
  submit_batch(r, 4);
  drive_steps(b, r, &l, 2);
  uint64_t t_start = b->now; // the step in flight began here
  b->now += 500;
  cr_assert_eq(inject(r, (replica_fault){.kind = RFAULT_HANG_RANK, .rank = 1}), SC_OK);
  cr_expect_eq(replica_next_ns(r), t_start + 3 * SEC);
  drive(b, r, &l);
  cr_expect_eq(b->now, t_start + 3 * SEC);
  cr_expect_eq(replica_health_get(r), REPLICA_DEAD);
  cr_expect_str_eq(replica_error(r),
                   "rank 1: collective deadline passed (a peer stopped answering)");
  cr_expect_eq(expect_one_terminal_each(&l, 4, "replica_failed"), 4);
  for (size_t i = 0; i < l.n; i++)
    if (l.v[i].kind == REPLICA_EV_FAILED) cr_expect_eq(l.v[i].t_ns, t_start + 3 * SEC);
  expect_kv_free(r);
  free(l.v);
  replica_free(r);
  sc_test_simbed_free(b);
}

Test(sim_faults, hang_rank_on_one_gpu_uses_the_engine_deadline_from_the_next_step) {
  simbed *b = bed_new(1, 1);
  b->cfg.collective_timeout_ns = 5 * SEC; // engine_sim.collective_timeout_ns 0: the engine's
  replica *r = bed_replica(b);
  evlog l = {0};
  b->now = 1 * SEC;
  cr_assert_eq(inject(r, (replica_fault){.kind = RFAULT_HANG_RANK, .rank = 0}), SC_OK);
  cr_expect_eq(replica_next_ns(r), UINT64_MAX, "idle: nothing blocks yet");
  b->now = 2 * SEC;
  sc_test_submit(r, 0, 80, 5);
  drive(b, r, &l);
  cr_expect_eq(b->now, 7 * SEC, "the step began at 2 s and blocks");
  cr_expect_eq(replica_health_get(r), REPLICA_DEAD);
  cr_expect_str_eq(replica_error(r), "rank 0: step did not finish within the collective deadline");
  cr_expect_eq(expect_one_terminal_each(&l, 1, "replica_failed"), 1);
  cr_expect_eq(count_kind(&l, REPLICA_EV_TOKEN), 0);
  expect_kv_free(r);
  free(l.v);
  replica_free(r);
  sc_test_simbed_free(b);
}

Test(sim_faults, hang_rank_then_resume_before_the_deadline_is_undone) {
  uint64_t t_hang = 0, unused = 0;
  evlog plain = run_with_hang(0, RFAULT_HANG_RANK, 2, &unused);
  evlog hung = run_with_hang(10 * SEC, RFAULT_HANG_RANK, 2, &t_hang); // the deadline is 30 s
  expect_shifted(&plain, &hung, t_hang, 10 * SEC);
  free(plain.v);
  free(hung.v);
}

// --- slow rank, slow link

// Step durations of 6 requests on tp x 1 with fault f injected before the first step (kind
// RFAULT_CLEAR: none), cleared after clear_after steps (0: never). Returns how many.
static int step_durations(int tp, replica_fault f, int clear_after, uint64_t *out, int cap) {
  simbed *b = bed_new(tp, 1);
  replica *r = bed_replica(b);
  evlog l = {0};
  submit_batch(r, 6);
  cr_assert_eq(inject(r, f), SC_OK);
  if (clear_after) {
    drive_steps(b, r, &l, clear_after); // the step after them is in flight, priced slow
    cr_assert_eq(inject(r, (replica_fault){.kind = RFAULT_CLEAR, .rank = -1}), SC_OK);
  }
  drive(b, r, &l);
  int n = 0;
  for (size_t i = 0; i < l.n; i++)
    if (l.v[i].kind == REPLICA_EV_STEP) {
      cr_assert_lt(n, cap);
      out[n++] = l.v[i].step.duration_ns;
    }
  cr_expect_eq(expect_one_terminal_each(&l, 6, "-"), 0);
  for (int k = 0; k < 6; k++) cr_expect_eq(tokens_of(&l, (uint64_t)k), 12 + k);
  free(l.v);
  replica_free(r);
  sc_test_simbed_free(b);
  return n;
}

Test(sim_faults, slow_rank_factor_2_doubles_every_step_until_clear) {
  uint64_t base[64], slow[64], cleared[64];
  replica_fault none = {.kind = RFAULT_CLEAR, .rank = -1};
  replica_fault f = {.kind = RFAULT_SLOW_RANK, .rank = 0, .factor = 2};
  int n = step_durations(1, none, 0, base, 64);
  cr_assert_gt(n, 5);
  cr_assert_eq(step_durations(1, f, 0, slow, 64), n);
  for (int i = 0; i < n; i++) cr_expect_eq(slow[i], 2 * base[i], "step %d", i);
  cr_assert_eq(step_durations(1, f, 3, cleared, 64), n);
  for (int i = 0; i < n; i++)
    cr_expect_eq(cleared[i], i <= 3 ? 2 * base[i] : base[i], "step %d", i);
}

Test(sim_faults, slow_link_slows_only_replicas_with_collectives) {
  uint64_t base[64], slow[64];
  replica_fault none = {.kind = RFAULT_CLEAR, .rank = -1};
  replica_fault f = {.kind = RFAULT_SLOW_LINK, .rank = -1, .factor = 8, .latency_ns = 20000};
  int n = step_durations(2, none, 0, base, 64);
  cr_assert_eq(step_durations(2, f, 0, slow, 64), n);
  for (int i = 0; i < n; i++)
    cr_expect_gt(slow[i], base[i] + 65 * 20000, "step %d: 65 all-reduces pay the latency", i);
  n = step_durations(1, none, 0, base, 64);
  cr_assert_eq(step_durations(1, f, 0, slow, 64), n);
  for (int i = 0; i < n; i++) cr_expect_eq(slow[i], base[i], "one GPU has no collectives");
}

// --- OOM

Test(sim_faults, transient_oom_fails_one_admission_after_n) {
  simbed *b = bed_new(1, 1);
  replica *r = bed_replica(b);
  evlog l = {0};
  b->now = 10 * MS;
  cr_assert_eq(inject(r, (replica_fault){.kind = RFAULT_OOM, .rank = -1, .after_allocs = 2}),
               SC_OK);
  submit_batch(r, 5);
  pull(r, &l);
  cr_assert_eq(l.n, 1, "the third admission fails at once");
  cr_expect_eq(l.v[0].kind, REPLICA_EV_FAILED);
  cr_expect_eq(l.v[0].key, 2);
  cr_expect_eq(l.v[0].status, SC_OOM);
  cr_expect_str_eq(replica_failure_name(l.v[0].failure), "oom");
  cr_expect_eq(l.v[0].t_ns, 10 * MS);
  drive(b, r, &l);
  cr_expect_eq(expect_one_terminal_each(&l, 5, "oom"), 1);
  for (int k = 0; k < 5; k++)
    if (k != 2) cr_expect_eq(terminal(&l, (uint64_t)k)->kind, REPLICA_EV_FINISHED);
  engine_stats st;
  replica_stats(r, &st);
  cr_expect_eq(st.oom_failures, 1);
  cr_expect_not(st.unhealthy);
  cr_expect_eq(replica_health_get(r), REPLICA_HEALTHY);
  expect_kv_free(r);
  free(l.v);
  replica_free(r);
  sc_test_simbed_free(b);
}

Test(sim_faults, persistent_oom_makes_the_replica_unhealthy_after_3_until_clear) {
  simbed *b = bed_new(1, 1);
  replica *r = bed_replica(b);
  evlog l = {0};
  cr_assert_eq(inject(r, (replica_fault){.kind = RFAULT_OOM, .rank = -1, .after_allocs = 1,
                                         .persistent = true}),
               SC_OK);
  sc_test_submit(r, 0, 50, 4);
  sc_test_submit(r, 1, 50, 4);
  sc_test_submit(r, 2, 50, 4);
  cr_expect_eq(replica_health_get(r), REPLICA_HEALTHY, "2 failures");
  sc_test_submit(r, 3, 50, 4);
  cr_expect_eq(replica_health_get(r), REPLICA_UNHEALTHY, "3 failures in a row");
  engine_stats st;
  replica_stats(r, &st);
  cr_expect(st.unhealthy);
  sc_test_submit(r, 4, 50, 4);
  cr_expect_eq(replica_health_get(r), REPLICA_UNHEALTHY);
  cr_assert_eq(inject(r, (replica_fault){.kind = RFAULT_CLEAR, .rank = -1}), SC_OK);
  cr_expect_eq(replica_health_get(r), REPLICA_HEALTHY);
  sc_test_submit(r, 5, 50, 4);
  drive(b, r, &l);
  cr_expect_eq(expect_one_terminal_each(&l, 6, "oom"), 4);
  cr_expect_eq(terminal(&l, 0)->kind, REPLICA_EV_FINISHED);
  cr_expect_eq(terminal(&l, 5)->kind, REPLICA_EV_FINISHED);
  replica_stats(r, &st);
  cr_expect_eq(st.oom_failures, 4);
  expect_kv_free(r);
  free(l.v);
  replica_free(r);
  sc_test_simbed_free(b);
}

Test(sim_faults, a_successful_admission_ends_the_oom_streak) {
  simbed *b = bed_new(1, 1);
  replica *r = bed_replica(b);
  evlog l = {0};
  for (int k = 0; k < 3; k++) {
    cr_assert_eq(inject(r, (replica_fault){.kind = RFAULT_OOM, .rank = -1}), SC_OK);
    sc_test_submit(r, (uint64_t)k, 50, 2);
  }
  cr_expect_eq(replica_health_get(r), REPLICA_UNHEALTHY);
  sc_test_submit(r, 3, 50, 2); // the transient faults are over: admitted
  cr_expect_eq(replica_health_get(r), REPLICA_HEALTHY);
  drive(b, r, &l);
  cr_expect_eq(expect_one_terminal_each(&l, 4, "oom"), 3);
  expect_kv_free(r);
  free(l.v);
  replica_free(r);
  sc_test_simbed_free(b);
}

// --- corruption

Test(sim_faults, corrupt_fails_every_request_with_a_token_in_each_step_until_clear) {
  simbed *b = bed_new(2, 1);
  b->cfg.max_running = 4; // keys 4 and 5 wait while 0..3 run
  replica *r = bed_replica(b);
  evlog l = {0};
  submit_batch(r, 6);
  drive_steps(b, r, &l, 1); // step 2 in flight: it is not poisoned
  uint64_t t = b->now;
  cr_assert_eq(inject(r, (replica_fault){.kind = RFAULT_CORRUPT, .rank = 1}), SC_OK);
  drive_steps(b, r, &l, 2); // step 3 in flight, poisoned: its four requests leave the engine now
  engine_stats st;
  replica_stats(r, &st);
  cr_expect_eq(st.running, 0, "the poisoned requests were cancelled: %d run", st.running);
  cr_expect_eq(st.kv_used, 0, "their blocks are free: %d used", st.kv_used);
  cr_expect_eq(st.queue_len, 2);
  drive(b, r, &l);
  int bad = expect_one_terminal_each(&l, 6, "numerical");
  cr_expect_eq(bad, 6, "every request produced a token in a poisoned step");
  for (int k = 0; k < 6; k++) {
    const replica_event *e = terminal(&l, (uint64_t)k);
    cr_expect_eq(e->status, SC_NUMERICAL);
    cr_expect_gt(e->t_ns, t);
  }
  replica_stats(r, &st);
  cr_expect_eq(st.numerical_failures, 6);
  cr_expect_eq(st.kv_used, 0, "the failed requests' blocks are freed");
  cr_expect_eq(replica_health_get(r), REPLICA_HEALTHY, "it fails requests, not the replica");
  // after CLEAR, requests complete again
  cr_assert_eq(inject(r, (replica_fault){.kind = RFAULT_CLEAR, .rank = -1}), SC_OK);
  sc_test_submit(r, 6, 70, 5);
  drive(b, r, &l);
  cr_expect_eq(terminal(&l, 6)->kind, REPLICA_EV_FINISHED);
  cr_expect_eq(tokens_of(&l, 6), 5);
  expect_kv_free(r);
  free(l.v);
  replica_free(r);
  sc_test_simbed_free(b);
}

Test(sim_faults, corrupt_spares_requests_that_produce_no_token_in_the_step) {
  simbed *b = bed_new(1, 1);
  b->cfg.token_budget = 256; // prefill_chunk 64: a 600-token prompt needs 10 steps
  replica *r = bed_replica(b);
  evlog l = {0};
  sc_test_submit(r, 0, 600, 3);
  sc_test_submit(r, 1, 30, 40);
  drive_steps(b, r, &l, 1);
  cr_assert_eq(inject(r, (replica_fault){.kind = RFAULT_CORRUPT, .rank = -1}), SC_OK);
  drive_steps(b, r, &l, 3); // step 3 was poisoned: key 1 decoded, key 0 only prefilled
  cr_assert_eq(inject(r, (replica_fault){.kind = RFAULT_CLEAR, .rank = -1}), SC_OK);
  drive(b, r, &l);
  cr_expect_str_eq(replica_failure_name(terminal(&l, 1)->failure), "numerical");
  cr_expect_eq(terminal(&l, 0)->kind, REPLICA_EV_FINISHED, "still prefilling when poisoned");
  cr_expect_eq(tokens_of(&l, 0), 3);
  expect_kv_free(r);
  free(l.v);
  replica_free(r);
  sc_test_simbed_free(b);
}

// --- restart

Test(sim_faults, restart_gives_epoch_2_and_admits_after_the_modelled_load) {
  simbed *b = bed_new(1, 1);
  replica *r = bed_replica(b);
  evlog l = {0};
  sc_error err = {{0}};
  cr_expect_eq(replica_restart(r, &err), SC_INVALID, "only a dead replica restarts");
  submit_batch(r, 3);
  drive_steps(b, r, &l, 1);
  cr_assert_eq(inject(r, (replica_fault){.kind = RFAULT_SLOW_RANK, .rank = -1, .factor = 4}),
               SC_OK);
  cr_assert_eq(inject(r, (replica_fault){.kind = RFAULT_KILL, .rank = -1}), SC_OK);
  drive(b, r, &l);
  cr_expect_eq(expect_one_terminal_each(&l, 3, "replica_lost"), 3);
  b->now += 100 * MS;
  uint64_t t = b->now;
  cr_assert(replica_can_restart(r));
  cr_assert_eq(replica_restart(r, &err), SC_OK, "%s", err.msg);
  cr_expect_eq(replica_epoch(r), 2);
  cr_expect_str_eq(replica_error(r), "");
  cr_expect_eq(replica_health_get(r), REPLICA_DRAINING, "loading its weights");
  cr_expect_eq(replica_next_ns(r), t + 40 * MS, "1 GB at 25 GB/s");
  sc_test_submit(r, 10, 60, 4); // queued until ready
  b->now = t + 40 * MS - 1;
  cr_expect_not(replica_advance(r, b->now));
  cr_expect_eq(replica_health_get(r), REPLICA_DRAINING);
  evlog l2 = {0};
  drive(b, r, &l2);
  cr_expect_eq(replica_health_get(r), REPLICA_HEALTHY);
  cr_expect_eq(terminal(&l2, 10)->kind, REPLICA_EV_FINISHED);
  cr_expect_eq(l2.v[0].kind, REPLICA_EV_TOKEN);
  cr_expect_eq(tokens_of(&l2, 10), 4);
  // the slow fault was cleared: the first step ends exactly one unslowed step after ready
  evlog l3 = {0};
  simbed *b3 = bed_new(1, 1);
  replica *r3 = bed_replica(b3);
  sc_test_submit(r3, 10, 60, 4);
  drive(b3, r3, &l3);
  cr_expect_eq(l2.v[0].t_ns, t + 40 * MS + l3.v[0].t_ns);
  cr_expect_eq(replica_epoch(r), 2);
  expect_kv_free(r);
  free(l.v);
  free(l2.v);
  free(l3.v);
  replica_free(r3);
  sc_test_simbed_free(b3);
  replica_free(r);
  sc_test_simbed_free(b);
}

// --- determinism

// A run through every fault kind; returns its events.
static evlog fault_script(void) {
  simbed *b = bed_new(2, 1);
  b->cfg.sim.detect_timeout_ns = 400 * MS;
  b->cfg.sim.collective_timeout_ns = 250 * MS;
  replica *r = bed_replica(b);
  evlog l = {0};
  sc_error err = {{0}};
  uint64_t key = 0;
  for (; key < 6; key++) sc_test_submit(r, key, 64 + (int)(key * 53 % 400), 30);
  replica_fault seq[] = {
      {.kind = RFAULT_SLOW_RANK, .rank = 1, .factor = 1.7},
      {.kind = RFAULT_SLOW_LINK, .rank = -1, .factor = 3, .latency_ns = 5000},
      {.kind = RFAULT_HANG, .rank = -1},
      {.kind = RFAULT_RESUME, .rank = -1},
      {.kind = RFAULT_OOM, .rank = -1, .after_allocs = 1},
      {.kind = RFAULT_CORRUPT, .rank = 0},
      {.kind = RFAULT_CLEAR, .rank = -1},
      {.kind = RFAULT_HANG_RANK, .rank = 1},
  };
  for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
    drive_until(b, r, &l, b->now + 37 * MS);
    cr_assert_eq(inject(r, seq[i]), SC_OK, "fault %zu", i);
    sc_test_submit(r, key++, 90, 20);
    sc_test_submit(r, key++, 40, 10);
  }
  drive(b, r, &l); // the hung rank's deadline kills it
  cr_assert_eq(replica_health_get(r), REPLICA_DEAD);
  cr_assert_eq(replica_restart(r, &err), SC_OK, "%s", err.msg);
  sc_test_submit(r, key++, 64, 8);
  drive(b, r, &l);
  expect_one_terminal_each(&l, (int)key, "-");
  expect_kv_free(r);
  replica_free(r);
  sc_test_simbed_free(b);
  return l;
}

Test(sim_faults, the_same_fault_script_gives_the_same_events) {
  evlog a = fault_script(), b = fault_script();
  cr_assert_eq(a.n, b.n);
  cr_assert_gt(count_kind(&a, REPLICA_EV_FAILED), 0);
  for (size_t i = 0; i < a.n; i++) {
    const replica_event *x = &a.v[i], *y = &b.v[i];
    cr_assert_eq(x->kind, y->kind, "event %zu", i);
    cr_assert_eq(x->key, y->key, "event %zu", i);
    cr_assert_eq(x->t_ns, y->t_ns, "event %zu", i);
    cr_assert_eq(x->token, y->token, "event %zu", i);
    cr_assert_eq(x->index, y->index, "event %zu", i);
    cr_assert_eq(x->status, y->status, "event %zu", i);
    cr_assert_str_eq(replica_failure_name(x->failure), replica_failure_name(y->failure),
                     "event %zu", i);
    cr_assert_eq(x->step.duration_ns, y->step.duration_ns, "event %zu", i);
  }
  free(a.v);
  free(b.v);
}
