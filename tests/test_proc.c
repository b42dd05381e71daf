// Process replica tests (serving/replica_proc.c): a `shardcheck worker` child gives the same
// tokens as a local replica, cancels, and is lost for real to SIGKILL and SIGSTOP: loss
// detection, "replica_lost" failures, restart with a new epoch, fencing of the stale worker,
// no zombie or orphan left behind, and the worker's own build errors reaching the caller.
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config/presets.h"
#include "serving/replica.h"
#include "serving/wire.h"
#include "kernels/clock.h"
#include "tests/helpers.h"

#define NS_PER_MS 1000000ull
#define NS_PER_S 1000000000ull
#define MAX_KEYS 8
#define MAX_TOK 64

// --- harness

static engine_config tiny_config(int tp) {
  engine_config c = sc_test_engine_config("llama-tiny");
  c.tp = tp;
  c.pp = 1;
  c.weights_seed = 7;
  c.kv_blocks = 128;
  c.max_running = 8;
  c.token_budget = 256;
  c.prefill_chunk = 256;
  c.threads = 1;
  return c;
}

static replica *proc_new(const engine_config *cfg, uint64_t detect_ns) {
  replica_proc_options o = {.exe = SC_BINARY, .detect_timeout_ns = detect_ns,
                            .heartbeat_ns = 50 * NS_PER_MS};
  replica *r = NULL;
  sc_error err = {{0}};
  cr_assert_eq(replica_proc_new(cfg, &o, 0, &r, &err), SC_OK, "replica_proc_new: %s", err.msg);
  cr_assert(replica_is_proc(r));
  cr_assert_gt(replica_proc_pid(r), 0);
  return r;
}

static sc_status submit(replica *r, uint64_t key, int n_prompt, int max_tokens) {
  int32_t prompt[64];
  sc_test_prompt(prompt, n_prompt, (int)key);
  engine_request q = {.prompt = prompt, .n_prompt = n_prompt, .max_tokens = max_tokens};
  sc_error err = {{0}};
  return replica_submit(r, key, &q, &err);
}

// What came back for each key of a test.
typedef struct req_log {
  uint64_t keys[MAX_KEYS];
  int n_keys;
  int32_t tokens[MAX_KEYS][MAX_TOK];
  int n_tokens[MAX_KEYS];
  bool ended[MAX_KEYS];
  replica_event end[MAX_KEYS]; // the FINISHED or FAILED event
  int foreign;                 // events for keys not in keys[] (STEP events aside)
} req_log;

static int key_slot(const req_log *L, uint64_t key) {
  for (int i = 0; i < L->n_keys; i++)
    if (L->keys[i] == key) return i;
  return -1;
}

static void record(req_log *L, const replica_event *ev) {
  if (ev->kind == REPLICA_EV_STEP) return;
  int i = key_slot(L, ev->key);
  if (i < 0) {
    L->foreign++;
    return;
  }
  cr_assert_not(L->ended[i], "no event after a request ended (key %llu)",
                (unsigned long long)ev->key);
  if (ev->kind == REPLICA_EV_TOKEN) {
    cr_assert_eq(ev->index, L->n_tokens[i], "tokens arrive in order");
    if (L->n_tokens[i] < MAX_TOK) L->tokens[i][L->n_tokens[i]] = ev->token;
    L->n_tokens[i]++;
  } else {
    L->ended[i] = true;
    L->end[i] = *ev;
  }
}

static bool all_ended(const req_log *L) {
  for (int i = 0; i < L->n_keys; i++)
    if (!L->ended[i]) return false;
  return true;
}

// Sleeps in ppoll on the replica's wait_fd (or plainly when it has none) for at most ms.
static void wait_a_little(replica *r, int ms) {
  int fd = replica_wait_fd(r);
  struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)ms * 1000000L};
  struct pollfd pf = {.fd = fd, .events = POLLIN};
  ppoll(&pf, fd >= 0 ? 1 : 0, &ts, NULL);
}

// Polls r until stop(L) holds or timeout_s passes; returns whether stop held.
typedef bool (*stop_fn)(replica *r, const req_log *L);
static bool pump(replica *r, req_log *L, stop_fn stop, double timeout_s) {
  uint64_t deadline = sc_monotonic_ns() + (uint64_t)(timeout_s * 1e9);
  for (;;) {
    replica_event ev[64];
    int n = replica_poll(r, ev, 64);
    for (int k = 0; k < n; k++) record(L, &ev[k]);
    if (stop(r, L)) return true;
    if (sc_monotonic_ns() > deadline) return false;
    if (n == 0) wait_a_little(r, 20);
  }
}

static bool stop_all_ended(replica *r, const req_log *L) { return all_ended(L); }
static bool stop_first_tokens(replica *r, const req_log *L) {
  for (int i = 0; i < L->n_keys; i++)
    if (L->n_tokens[i] == 0 && !L->ended[i]) return false;
  return true;
}
static bool stop_first_token(replica *r, const req_log *L) { return L->n_tokens[0] > 0; }
static bool stop_dead(replica *r, const req_log *L) {
  return replica_health_get(r) == REPLICA_DEAD && all_ended(L);
}
static bool stop_never(replica *r, const req_log *L) { return false; }

// Polls r (so it reaps what it fenced) until pid is gone, for at most timeout_s.
static bool pump_until_gone(replica *r, req_log *L, pid_t pid, double timeout_s) {
  uint64_t deadline = sc_monotonic_ns() + (uint64_t)(timeout_s * 1e9);
  while (sc_monotonic_ns() < deadline) {
    pump(r, L, stop_never, 0.05);
    if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  }
  return false;
}

// --- the same tokens as a local replica

static void matches_local(int tp) {
  engine_config cfg = tiny_config(tp);
  replica *loc = NULL;
  sc_error err = {{0}};
  cr_assert_eq(replica_local_new(&cfg, 0, &loc, &err), SC_OK, "%s", err.msg);
  replica *pr = proc_new(&cfg, 0);
  static req_log A, B;
  memset(&A, 0, sizeof A);
  memset(&B, 0, sizeof B);
  const int lens[] = {5, 9, 17, 30};
  for (int i = 0; i < 4; i++) {
    uint64_t key = 1000 + (uint64_t)i * 7;
    A.keys[i] = B.keys[i] = key;
    cr_assert_eq(submit(loc, key, lens[i], 12 + i), SC_OK);
    cr_assert_eq(submit(pr, key, lens[i], 12 + i), SC_OK);
  }
  A.n_keys = B.n_keys = 4;
  cr_assert(pump(loc, &A, stop_all_ended, 60), "local replica finished");
  cr_assert(pump(pr, &B, stop_all_ended, 60), "process replica finished");
  for (int i = 0; i < 4; i++) {
    cr_assert_eq(B.end[i].kind, REPLICA_EV_FINISHED);
    cr_assert_eq(B.end[i].reason, FINISH_LENGTH);
    cr_assert_eq(B.n_tokens[i], 12 + i);
    cr_assert_eq(B.end[i].n_generated, 12 + i);
    cr_assert_eq(A.n_tokens[i], B.n_tokens[i]);
    for (int k = 0; k < B.n_tokens[i]; k++)
      cr_assert_eq(A.tokens[i][k], B.tokens[i][k], "key %d token %d: local %d, process %d", i, k,
                   A.tokens[i][k], B.tokens[i][k]);
  }
  cr_assert_eq(B.foreign, 0);
  cr_assert_eq(replica_health_get(pr), REPLICA_HEALTHY);
  engine_stats st;
  replica_stats(pr, &st);
  cr_assert_eq(st.n_ranks, tp, "stats come from the worker's heartbeat");
  size_t used = 0, total = 0;
  cr_assert_eq(replica_rank_mem(pr, tp - 1, &used, &total), SC_OK);
  cr_assert_gt(total, 0);
  cr_assert_eq(replica_rank_mem(pr, tp, &used, &total), SC_INVALID);
  cr_assert_eq(replica_epoch(pr), 1);
  cr_assert_str_empty(replica_error(pr));
  replica_free(pr);
  replica_free(loc);
}

Test(proc, greedy_tokens_match_a_local_replica_tp1, .timeout = 120) { matches_local(1); }
Test(proc, greedy_tokens_match_a_local_replica_tp2, .timeout = 120) { matches_local(2); }

// --- cancel

Test(proc, cancel_of_a_queued_request_finishes_it_cancelled, .timeout = 120) {
  engine_config cfg = tiny_config(1);
  cfg.max_running = 1; // the second request waits behind the first
  replica *r = proc_new(&cfg, 0);
  static req_log L;
  memset(&L, 0, sizeof L);
  L.keys[0] = 1;
  L.keys[1] = 2;
  L.n_keys = 2;
  cr_assert_eq(submit(r, 1, 8, 400), SC_OK);
  cr_assert_eq(submit(r, 2, 8, 400), SC_OK);
  replica_cancel(r, 2);
  cr_assert(pump(r, &L, stop_first_tokens, 60));
  replica_cancel(r, 1);
  cr_assert(pump(r, &L, stop_all_ended, 60));
  cr_assert_eq(L.end[1].kind, REPLICA_EV_FINISHED);
  cr_assert_eq(L.end[1].reason, FINISH_CANCELLED);
  cr_assert_eq(L.n_tokens[1], 0);
  cr_assert_eq(L.end[0].kind, REPLICA_EV_FINISHED, "the first request ends normally too");
  replica_free(r);
}

// --- SIGKILL

Test(proc, kill_marks_dead_fails_held_requests_replica_lost_and_leaves_no_zombie,
     .timeout = 120) {
  engine_config cfg = tiny_config(2);
  cfg.max_running = 1;
  replica *r = proc_new(&cfg, 0);
  pid_t pid = replica_proc_pid(r);
  static req_log L;
  memset(&L, 0, sizeof L);
  for (int i = 0; i < 5; i++) {
    L.keys[i] = 10 + (uint64_t)i;
    cr_assert_eq(submit(r, L.keys[i], 8, 480), SC_OK);
  }
  L.n_keys = 5;
  sc_error err = {{0}};
  cr_assert_eq(replica_inject(r, &(replica_fault){.kind = RFAULT_SLOW_RANK, .rank = 2}, &err),
               SC_INVALID, "rank 2 of a tp=2 replica is out of range");
  cr_assert_eq(replica_restart(r, &err), SC_INVALID, "a live replica is not restarted");
  // Stop it first so the requests still held are known, then kill it.
  cr_assert(pump(r, &L, stop_first_token, 60));
  cr_assert_eq(replica_inject(r, &(replica_fault){.kind = RFAULT_HANG}, &err), SC_OK, "%s",
               err.msg);
  pump(r, &L, stop_never, 0.3); // what it sent before it stopped
  bool held[5];
  int n_held = 0;
  for (int i = 0; i < 5; i++) n_held += (held[i] = !L.ended[i]);
  cr_assert_gt(n_held, 0, "a request is still held when the worker is stopped");
  cr_assert_eq(replica_inject(r, &(replica_fault){.kind = RFAULT_KILL, .rank = -1}, &err), SC_OK,
               "%s", err.msg);
  cr_assert(pump(r, &L, stop_dead, 10), "the kill is noticed");
  for (int i = 0; i < 5; i++) {
    if (!held[i]) continue;
    cr_assert_eq(L.end[i].kind, REPLICA_EV_FAILED, "key %d", i);
    cr_assert_str_eq(replica_failure_name(L.end[i].failure), "replica_lost");
    cr_assert_eq(L.end[i].status, SC_ABORTED);
  }
  cr_assert(strstr(replica_error(r), "killed by signal 9"), "error: %s", replica_error(r));
  cr_assert_eq(replica_proc_pid(r), 0);
  cr_assert_eq(replica_wait_fd(r), -1, "a dead, drained replica has nothing to wait on");
  cr_assert_eq(submit(r, 99, 4, 4), SC_ABORTED);
  cr_assert_eq(replica_inject(r, &(replica_fault){.kind = RFAULT_KILL}, &err), SC_ABORTED);
  replica_free(r);
  cr_assert_eq(waitpid(pid, NULL, WNOHANG), -1, "the worker was reaped");
  cr_assert_eq(errno, ECHILD);
}

// --- the engine failing inside the worker

Test(proc, a_lost_rank_fails_the_requests_and_the_worker_reports_dead_and_exits_3,
     .timeout = 120) {
  engine_config cfg = tiny_config(2);
  cfg.max_running = 1;
  replica *r = proc_new(&cfg, 0);
  pid_t pid = replica_proc_pid(r);
  static req_log L;
  memset(&L, 0, sizeof L);
  for (int i = 0; i < 4; i++) {
    L.keys[i] = 20 + (uint64_t)i;
    cr_assert_eq(submit(r, L.keys[i], 8, 480), SC_OK);
  }
  L.n_keys = 4;
  cr_assert(pump(r, &L, stop_first_token, 60));
  sc_error err = {{0}};
  cr_assert_eq(replica_inject(r, &(replica_fault){.kind = RFAULT_KILL_RANK, .rank = 1}, &err),
               SC_OK, "%s", err.msg);
  cr_assert(pump(r, &L, stop_dead, 60), "the engine's failure reaches the runner");
  cr_assert_eq(L.end[3].kind, REPLICA_EV_FAILED, "the last queued request failed");
  cr_assert(strstr(replica_error(r), "worker exited with status 3: "), "error: %s",
            replica_error(r));
  replica_free(r);
  cr_assert_eq(waitpid(pid, NULL, WNOHANG), -1);
  cr_assert_eq(errno, ECHILD);
}

// --- SIGSTOP, restart, fencing

Test(proc, hang_is_detected_restart_serves_epoch_2_and_the_resumed_stale_worker_is_fenced,
     .timeout = 120) {
  engine_config cfg = tiny_config(1);
  cfg.max_running = 1;
  replica *r = proc_new(&cfg, 500 * NS_PER_MS);
  pid_t stale = replica_proc_pid(r);
  static req_log L;
  memset(&L, 0, sizeof L);
  L.keys[0] = 1;
  L.keys[1] = 2;
  L.n_keys = 2;
  cr_assert_eq(submit(r, 1, 8, 400), SC_OK);
  cr_assert_eq(submit(r, 2, 8, 400), SC_OK);
  sc_error err = {{0}};
  cr_assert_eq(replica_inject(r, &(replica_fault){.kind = RFAULT_HANG}, &err), SC_OK, "%s",
               err.msg);
  uint64_t t0 = sc_monotonic_ns();
  cr_assert(pump(r, &L, stop_dead, 0.5 + 5), "a stopped worker is declared lost");
  cr_assert_geq(sc_monotonic_ns() - t0, 400 * NS_PER_MS, "not before the detect timeout");
  cr_assert(strstr(replica_error(r), "no heartbeat for 0.500 s"), "error: %s", replica_error(r));
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(L.end[i].kind, REPLICA_EV_FAILED, "key %d was held", i);
    cr_assert_str_eq(replica_failure_name(L.end[i].failure), "replica_lost");
  }
  cr_assert(kill(stale, 0) == 0, "the stale worker is fenced, not killed");

  cr_assert_eq(replica_restart(r, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(replica_epoch(r), 2);
  cr_assert_eq(replica_health_get(r), REPLICA_HEALTHY);
  cr_assert_str_empty(replica_error(r));
  cr_assert_neq(replica_proc_pid(r), stale);
  static req_log N;
  memset(&N, 0, sizeof N);
  N.keys[0] = 100;
  N.n_keys = 1;
  cr_assert_eq(submit(r, 100, 6, 5), SC_OK);
  cr_assert(pump(r, &N, stop_all_ended, 60), "the new incarnation serves");
  cr_assert_eq(N.end[0].reason, FINISH_LENGTH);
  cr_assert_eq(N.n_tokens[0], 5);

  // The stale worker comes back, finds its socket closed and exits; nothing of it arrives.
  cr_assert_eq(replica_inject(r, &(replica_fault){.kind = RFAULT_RESUME}, &err), SC_OK, "%s",
               err.msg);
  memset(&N, 0, sizeof N);
  N.keys[0] = 1; // the old epoch's keys: any event for them now would come from the stale one
  N.keys[1] = 2;
  N.n_keys = 2;
  cr_assert(pump_until_gone(r, &N, stale, 10), "the resumed stale worker exits");
  cr_assert_eq(N.n_tokens[0] + N.n_tokens[1], 0);
  cr_assert_not(N.ended[0] || N.ended[1]);
  cr_assert_eq(replica_health_get(r), REPLICA_HEALTHY, "the new worker is untouched");
  replica_free(r);
}

Test(proc, a_hang_shorter_than_the_detect_timeout_is_survived, .timeout = 60) {
  engine_config cfg = tiny_config(1);
  replica *r = proc_new(&cfg, 5 * NS_PER_S);
  pid_t pid = replica_proc_pid(r);
  sc_error err = {{0}};
  cr_assert_eq(replica_inject(r, &(replica_fault){.kind = RFAULT_HANG}, &err), SC_OK);
  static req_log L;
  memset(&L, 0, sizeof L);
  L.keys[0] = 5;
  L.n_keys = 1;
  cr_assert_eq(submit(r, 5, 6, 8), SC_OK); // buffered while the worker is stopped
  pump(r, &L, stop_never, 0.2);
  cr_assert_not(L.ended[0], "a stopped worker serves nothing");
  cr_assert_eq(replica_inject(r, &(replica_fault){.kind = RFAULT_RESUME}, &err), SC_OK);
  cr_assert(pump(r, &L, stop_all_ended, 60));
  cr_assert_eq(L.end[0].reason, FINISH_LENGTH);
  cr_assert_eq(replica_health_get(r), REPLICA_HEALTHY);
  cr_assert_eq(replica_epoch(r), 1);
  cr_assert_eq(replica_proc_pid(r), pid);
  replica_free(r);
}

Test(proc, free_of_a_stopped_worker_returns_and_reaps_it, .timeout = 60) {
  engine_config cfg = tiny_config(1);
  replica *r = proc_new(&cfg, 0);
  pid_t pid = replica_proc_pid(r);
  sc_error err = {{0}};
  cr_assert_eq(replica_inject(r, &(replica_fault){.kind = RFAULT_HANG}, &err), SC_OK);
  replica_free(r);
  cr_assert_eq(waitpid(pid, NULL, WNOHANG), -1);
  cr_assert_eq(errno, ECHILD);
}

// --- the runner's death

Test(proc, workers_die_with_the_process_that_started_them, .timeout = 60) {
  // Orphans come to this process (not to init, which may never reap them), so nothing of the
  // test is left behind.
  cr_assert_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  pid_t runner = fork();
  cr_assert_geq(runner, 0);
  if (runner == 0) {
    close(fds[0]);
    engine_config cfg = engine_config_defaults();
    sc_error err = {{0}};
    int pids[2] = {-1, -1}; // the worker, the holder
    if (model_preset_load("llama-tiny", &cfg.model, &err) == SC_OK) {
      cfg.kv_blocks = 64;
      cfg.threads = 1;
      replica_proc_options o = {.exe = SC_BINARY};
      replica *r = NULL;
      if (replica_proc_new(&cfg, &o, 0, &r, &err) == SC_OK) {
        pids[0] = replica_proc_pid(r);
        // The holder keeps a copy of the runner's end of the socket, so the worker never sees
        // it close: only the death signal can end the worker.
        pids[1] = fork();
        if (pids[1] == 0)
          for (;;) pause();
      }
    }
    ssize_t w = write(fds[1], pids, sizeof pids);
    (void)w;
    for (;;) pause();
  }
  close(fds[1]);
  int pids[2] = {-1, -1};
  ssize_t got = read(fds[0], pids, sizeof pids);
  close(fds[0]);
  kill(runner, SIGKILL);
  waitpid(runner, NULL, 0);
  bool gone = false;
  if (got == (ssize_t)sizeof pids && pids[0] > 0) {
    uint64_t deadline = sc_monotonic_ns() + 10 * NS_PER_S;
    while (!(gone = sc_test_pid_gone(pids[0])) && sc_monotonic_ns() < deadline) usleep(20000);
  }
  if (pids[1] > 0) kill(pids[1], SIGKILL);
  if (pids[0] > 0 && !gone) kill(pids[0], SIGKILL);
  for (int i = 0; i < 2; i++)
    if (pids[i] > 0) waitpid(pids[i], NULL, 0);
  cr_assert_eq(got, (ssize_t)sizeof pids);
  cr_assert_gt(pids[0], 0, "the child started a worker");
  cr_assert_gt(pids[1], 0, "the child forked the holder");
  cr_assert(gone, "worker %d outlived the process that started it", pids[0]);
}

// --- errors

Test(proc, an_engine_the_worker_cannot_build_is_an_error_with_the_engines_message,
     .timeout = 60) {
  engine_config cfg = tiny_config(3); // 3 does not divide llama-tiny's 8 heads
  engine *e = NULL;
  sc_error want = {{0}};
  sc_status ws = engine_new(&cfg, &e, &want);
  cr_assert_neq(ws, SC_OK);
  cr_assert_neq(want.msg[0], 0);
  replica_proc_options o = {.exe = SC_BINARY};
  replica dummy = {0};
  replica *r = &dummy; // NULL on error
  sc_error err = {{0}};
  sc_status s = replica_proc_new(&cfg, &o, 0, &r, &err);
  cr_assert_eq(s, ws);
  cr_assert_null(r);
  cr_assert(strstr(err.msg, want.msg), "got '%s', want it to contain '%s'", err.msg, want.msg);
}

Test(proc, a_missing_worker_binary_is_an_error_naming_it, .timeout = 60) {
  engine_config cfg = tiny_config(1);
  replica_proc_options o = {.exe = "/nonexistent/shardcheck"};
  replica *r = NULL;
  sc_error err = {{0}};
  cr_assert_neq(replica_proc_new(&cfg, &o, 0, &r, &err), SC_OK);
  cr_assert_null(r);
  cr_assert(strstr(err.msg, "/nonexistent/shardcheck"), "%s", err.msg);
}

Test(proc, a_sim_backend_is_refused, .timeout = 60) {
  engine_config cfg = tiny_config(1);
  cfg.backend = "sim";
  replica *r = NULL;
  sc_error err = {{0}};
  cr_assert_eq(replica_proc_new(&cfg, &(replica_proc_options){.exe = SC_BINARY}, 0, &r, &err),
               SC_INVALID);
  cr_assert_null(r);
}

// --- the CLI

Test(proc, worker_help_exits_0_and_says_it_is_internal) {
  static char out[8192];
  cr_assert_eq(sc_test_run_cli("worker --help", out, sizeof out), 0, "%s", out);
  cr_assert(strstr(out, "Internal"), "%s", out);
  cr_assert(strstr(out, "--fd"), "%s", out);
}

Test(proc, worker_without_fd_is_a_usage_error) {
  static char out[8192];
  cr_assert_eq(sc_test_run_cli("worker", out, sizeof out), 2, "%s", out);
  cr_assert_eq(sc_test_run_cli("worker --fd 999", out, sizeof out), 2, "%s", out);
}

// --- weight swaps and the worker's environment

Test(proc, swap_rebuilds_the_replica_in_the_same_worker_on_the_new_weights, .timeout = 120) {
  engine_config cfg = tiny_config(1);
  replica *pr = proc_new(&cfg, 0);
  static req_log A, B;
  memset(&A, 0, sizeof A);
  memset(&B, 0, sizeof B);
  A.keys[0] = 1;
  A.n_keys = 1;
  cr_assert_eq(submit(pr, 1, 9, 12), SC_OK);
  cr_assert(pump(pr, &A, stop_all_ended, 60));
  pid_t pid = replica_proc_pid(pr);
  engine_config other = cfg;
  other.weights_seed = 8; // other weights, same shapes
  sc_error err = {{0}};
  cr_assert_eq(replica_swap(pr, &other, &err), SC_OK, "%s", err.msg);
  cr_expect_eq(replica_epoch(pr), 2);
  cr_expect_eq(replica_proc_pid(pr), pid, "the swap went over the socket: the same worker");
  cr_expect_eq(replica_health_get(pr), REPLICA_HEALTHY);
  B.keys[0] = 1;
  B.n_keys = 1;
  cr_assert_eq(submit(pr, 1, 9, 12), SC_OK);
  cr_assert(pump(pr, &B, stop_all_ended, 60));
  cr_assert_eq(B.end[0].kind, REPLICA_EV_FINISHED);
  bool differ = false;
  for (int k = 0; k < 12; k++) differ |= A.tokens[0][k] != B.tokens[0][k];
  cr_expect(differ, "the same prompt gives other greedy tokens on other weights");
  // a second swap back gives the first weights' tokens again
  static req_log C;
  memset(&C, 0, sizeof C);
  C.keys[0] = 1;
  C.n_keys = 1;
  cr_assert_eq(replica_swap(pr, &cfg, &err), SC_OK, "%s", err.msg);
  cr_expect_eq(replica_epoch(pr), 3);
  cr_assert_eq(submit(pr, 1, 9, 12), SC_OK);
  cr_assert(pump(pr, &C, stop_all_ended, 60));
  for (int k = 0; k < 12; k++) cr_expect_eq(C.tokens[0][k], A.tokens[0][k], "token %d", k);
  replica_free(pr);
}

Test(proc, a_swap_the_worker_cannot_load_leaves_the_replica_dead_with_the_reason,
     .timeout = 120) {
  engine_config cfg = tiny_config(1);
  replica *pr = proc_new(&cfg, 0);
  pid_t pid = replica_proc_pid(pr);
  engine_config bad = cfg;
  bad.weights_dir = "/nonexistent/shardcheck-weights";
  sc_error err = {{0}};
  cr_assert_neq(replica_swap(pr, &bad, &err), SC_OK);
  cr_expect(strstr(err.msg, "/nonexistent/shardcheck-weights"), "%s", err.msg);
  cr_expect_eq(replica_health_get(pr), REPLICA_DEAD);
  cr_expect(strstr(replica_error(pr), "swap failed"), "%s", replica_error(pr));
  static req_log L;
  memset(&L, 0, sizeof L);
  cr_expect(pump_until_gone(pr, &L, pid, 10), "the worker exited and was reaped");
  replica_free(pr);
}

Test(proc, a_worker_reports_its_wall_clock_and_takes_the_environment_given, .timeout = 120) {
  const char *lib = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
  if (access(lib, R_OK) != 0) cr_skip_test("skipped: no libfaketime at %s", lib);
  SKIP_UNDER_SANITIZERS(); // a preloaded library ahead of the sanitizer runtime
  const char *dir = sc_test_tmpdir("proc-faketime");
  char file[600], env_file[700], env_pre[700];
  snprintf(file, sizeof file, "%s/offset", dir);
  FILE *f = fopen(file, "w");
  cr_assert_not_null(f);
  fputs("+3600\n", f);
  fclose(f);
  snprintf(env_pre, sizeof env_pre, "LD_PRELOAD=%s", lib);
  snprintf(env_file, sizeof env_file, "FAKETIME_TIMESTAMP_FILE=%s", file);
  const char *env[] = {env_pre, env_file, "FAKETIME_NO_CACHE=1", "FAKETIME_DONT_FAKE_MONOTONIC=1",
                       NULL};
  engine_config cfg = tiny_config(1);
  replica_proc_options o = {.exe = SC_BINARY, .heartbeat_ns = 50 * NS_PER_MS, .env = env};
  replica *r = NULL;
  sc_error err = {{0}};
  cr_assert_eq(replica_proc_new(&cfg, &o, 0, &r, &err), SC_OK, "%s", err.msg);
  static req_log L;
  memset(&L, 0, sizeof L);
  int64_t skew = 0;
  bool have = false;
  for (int i = 0; i < 100 && !have; i++) {
    pump(r, &L, stop_never, 0.02);
    have = replica_wall_skew(r, &skew);
  }
  cr_assert(have, "a heartbeat came");
  cr_expect(llabs(skew - 3600 * (int64_t)NS_PER_S) < 500 * (int64_t)NS_PER_MS,
            "the worker's wall clock is an hour ahead: skew %lld ns", (long long)skew);
  // requests are served as usual: the worker's timing is monotonic
  L.keys[0] = 5;
  L.n_keys = 1;
  cr_assert_eq(submit(r, 5, 9, 8), SC_OK);
  cr_assert(pump(r, &L, stop_all_ended, 60));
  cr_expect_eq(L.end[0].kind, REPLICA_EV_FINISHED);
  replica_free(r);
}

// --- holding admissions

// Submits four requests while r is held: nothing is admitted (no event) until the release,
// and then all four start in one step.
static void held_requests_start_in_one_step(replica *r) {
  replica_hold(r, true);
  for (uint64_t k = 1; k <= 4; k++) cr_assert_eq(submit(r, k, 6, 3), SC_OK);
  uint64_t until = sc_monotonic_ns() + 100 * NS_PER_MS;
  while (sc_monotonic_ns() < until) {
    replica_event ev[16];
    cr_assert_eq(replica_poll(r, ev, 16), 0, "no event while the replica is held");
    wait_a_little(r, 10);
  }
  replica_hold(r, false);
  int first_seqs = 0, first_prefill = 0, finished = 0;
  uint64_t deadline = sc_monotonic_ns() + 60 * NS_PER_S;
  while (finished < 4 && sc_monotonic_ns() < deadline) {
    replica_event ev[64];
    int n = replica_poll(r, ev, 64);
    for (int i = 0; i < n; i++) {
      if (ev[i].kind == REPLICA_EV_STEP && !first_seqs) {
        first_seqs = ev[i].step.n_seqs;
        first_prefill = ev[i].step.prefill_tokens;
      }
      finished += ev[i].kind == REPLICA_EV_FINISHED;
      cr_assert_neq(ev[i].kind, REPLICA_EV_FAILED);
    }
    if (n == 0) wait_a_little(r, 20);
  }
  cr_assert_eq(finished, 4);
  cr_expect_eq(first_seqs, 4, "the first step admitted all four");
  cr_expect_eq(first_prefill, 4 * 6, "and prefilled all four prompts");
}

Test(proc, a_held_local_replica_admits_what_was_submitted_in_one_step, .timeout = 120) {
  engine_config cfg = tiny_config(1);
  replica *loc = NULL;
  sc_error err = {{0}};
  cr_assert_eq(replica_local_new(&cfg, 0, &loc, &err), SC_OK, "%s", err.msg);
  held_requests_start_in_one_step(loc);
  replica_free(loc);
}

Test(proc, a_held_worker_admits_what_was_submitted_in_one_step, .timeout = 120) {
  engine_config cfg = tiny_config(1);
  replica *pr = proc_new(&cfg, 0);
  held_requests_start_in_one_step(pr);
  replica_free(pr);
}

// The engine config crosses the wire whole: the scheduler's knobs a worker must apply as the
// runner set them (a knob lost on the way would make a process replica schedule differently).
Test(proc, the_config_frame_carries_every_scheduler_knob) {
  engine_config c = engine_config_defaults();
  c.backend = "cpu";
  c.kv_blocks = 2588;
  c.max_running = 7;
  c.token_budget = 300;
  c.prefill_chunk = 64;
  c.no_evict = true;
  c.prefix_caching = true;
  c.reserve_full_isl = true;
  c.kv_watermark = 0.01;
  wire_buf b = {0};
  cr_assert(wire_put_config(&b, 3, &c, 1, 1000000));
  int type;
  uint32_t epoch;
  const uint8_t *body;
  size_t body_n, frame_n;
  cr_assert_eq(wire_frame(b.p, b.n, &type, &epoch, &body, &body_n, &frame_n), 1);
  cr_expect_eq(type, WIRE_CONFIG);
  wire_reader r = {.p = body, .n = body_n};
  wire_config w;
  cr_assert(wire_get_config(&r, &w));
  cr_expect(wire_done(&r));
  cr_expect_eq(w.cfg.kv_blocks, 2588);
  cr_expect_eq(w.cfg.max_running, 7);
  cr_expect_eq(w.cfg.token_budget, 300);
  cr_expect_eq(w.cfg.prefill_chunk, 64);
  cr_expect(w.cfg.no_evict && w.cfg.prefix_caching && w.cfg.reserve_full_isl);
  cr_expect_float_eq(w.cfg.kv_watermark, 0.01, 0);
  wire_buf_free(&b);
}
