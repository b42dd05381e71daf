// The MPI side of tests/test_mpi.c: a program run under `mpirun -np N`, every rank checking what
// the mpi communicator and the ranks-as-processes engine give, printing one line per failure
// ("rank R: FAIL ...") and, when all held, "rank R: ok (C checks)"; the exit status is 0 only
// when every check of this rank held. test_mpi.c starts it and reads what it printed.
//
//   mpi_check comm        collectives, point to point, deadline, abort, alarms, idle waits,
//                         the link fault, the build check (any N >= 2)
//   mpi_check engine TP PP [BACKEND]
//                         rank 0 drives an engine whose tp x pp ranks are the N = tp x pp
//                         processes and compares its greedy tokens with the same engine as
//                         threads in rank 0's process (and tp1), and its logits bit for bit
//   mpi_check engine-size TP PP      a job of another size than tp x pp is refused everywhere
//   mpi_check engine-fault TP PP R   rank R's device is lost: rank 0's step fails at once with
//                                    rank R's own reason
//   mpi_check engine-stop TP PP R    rank R's process is stopped: rank 0's step ends at the
//                                    collective deadline
//   mpi_check engine-kill TP PP R    rank R's process is killed: the launcher ends the job
//   mpi_check comm-cuda-nodev        NCCL's bootstrap over MPI where no rank has a device: every
//                                    member joins the id's broadcast and fails at once
//   mpi_check engine-link TP PP      a slow link set on rank 0's engine reaches every rank's
//                                    end of its links, and clearing it reaches them too
//
// Not a Criterion program: Criterion forks each test, and MPI does not survive a fork.
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "config/presets.h"
#include "engine/engine.h"
#include "kernels/clock.h"
#include "kernels/comm.h"
#include "kernels/mpi.h"

static int me, n_ranks, checks, failures;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char msg[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  printf("rank %d: FAIL %s\n", me, msg);
  fflush(stdout);
  failures++;
}

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    checks++;                                                                                      \
    if (!(cond)) fail(__VA_ARGS__);                                                                \
  } while (0)

#define MS 1000000ull

// The value rank r contributes at element i of check `salt` (exactly representable sums are
// not needed: the check is against the same order of additions).
static float input(int r, size_t i, int salt) {
  uint32_t x = (uint32_t)(i * 2654435761u) ^ (uint32_t)(r * 40503 + salt * 97);
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  return (float)(x % 20001) / 1000.0f - 10.0f;
}

static comm_group *open_group(int n, const int *members, uint64_t deadline_ns) {
  comm_group *g = NULL;
  sc_error err = {{0}};
  sc_status s = comm_group_open_mpi("cpu", n, members, NULL, deadline_ns, &g, &err);
  CHECK(s == SC_OK, "comm_group_open_mpi: %s", err.msg);
  return g;
}

static comm_group *open_world(uint64_t deadline_ns) {
  int members[64];
  for (int i = 0; i < n_ranks; i++) members[i] = i;
  return open_group(n_ranks, members, deadline_ns);
}

// --- comm

static void check_allreduce(comm *c, size_t n, int salt) {
  float *buf = malloc((n ? n : 1) * sizeof *buf);
  for (size_t i = 0; i < n; i++) buf[i] = input(me, i, salt);
  sc_status s = comm_allreduce_sum(c, buf, n);
  CHECK(s == SC_OK, "all-reduce of %zu: %s", n, sc_status_name(s));
  size_t bad = 0;
  for (size_t i = 0; i < n && s == SC_OK; i++) {
    float want = input(0, i, salt); // shm's order: rank 0, then 1, 2, ...
    for (int r = 1; r < n_ranks; r++) want += input(r, i, salt);
    if (memcmp(&want, &buf[i], sizeof want) != 0 && bad++ == 0)
      fail("all-reduce of %zu: element %zu is %.9g, the rank-order sum %.9g", n, i, buf[i], want);
  }
  CHECK(bad == 0, "all-reduce of %zu: %zu elements differ from the rank-order sum", n, bad);
  free(buf);
}

static void check_allgather(comm *c, size_t n) {
  float *send = malloc((n ? n : 1) * sizeof *send);
  float *recv = malloc((n ? n : 1) * (size_t)n_ranks * sizeof *recv);
  for (size_t i = 0; i < n; i++) send[i] = input(me, i, 5);
  sc_status s = comm_allgather(c, send, recv, n);
  CHECK(s == SC_OK, "all-gather of %zu: %s", n, sc_status_name(s));
  size_t bad = 0;
  for (int r = 0; r < n_ranks && s == SC_OK; r++)
    for (size_t i = 0; i < n; i++) bad += recv[(size_t)r * n + i] != input(r, i, 5);
  CHECK(bad == 0, "all-gather of %zu: %zu elements wrong", n, bad);
  free(send);
  free(recv);
}

// A ring: every rank sends to the next and receives from the previous, twice, the second
// message larger; a receive of the wrong size is refused and leaves the message queued.
static void check_ring(comm *c) {
  int next = (me + 1) % n_ranks, prev = (me + n_ranks - 1) % n_ranks;
  int a = 1000 + me, got = -1;
  size_t big_n = 300000;
  int *big = malloc(big_n * sizeof *big), *big_in = calloc(big_n, sizeof *big_in);
  for (size_t i = 0; i < big_n; i++) big[i] = (int)i * 3 + me;
  CHECK(comm_send(c, &a, sizeof a, next) == SC_OK, "send to %d", next);
  CHECK(comm_send(c, big, big_n * sizeof *big, next) == SC_OK, "large send to %d", next);
  char wrong[3];
  CHECK(comm_recv(c, wrong, sizeof wrong, prev) == SC_INVALID, "a receive of the wrong size "
                                                               "is refused");
  CHECK(comm_poll_error(c) == SC_OK, "the group stays usable after a refused receive");
  CHECK(comm_recv(c, &got, sizeof got, prev) == SC_OK && got == 1000 + prev,
        "receive from %d: got %d", prev, got);
  CHECK(comm_recv(c, big_in, big_n * sizeof *big_in, prev) == SC_OK, "large receive");
  size_t bad = 0;
  for (size_t i = 0; i < big_n; i++) bad += big_in[i] != (int)i * 3 + prev;
  CHECK(bad == 0, "large receive: %zu ints wrong", bad);
  free(big);
  free(big_in);
}

typedef struct aborter {
  comm *c;
  uint64_t after_ns;
} aborter;

static void *abort_later(void *p) {
  aborter *a = p;
  struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)a->after_ns};
  nanosleep(&ts, NULL);
  comm_abort(a->c);
  return NULL;
}

static void check_comm(void) {
  comm_group *w = open_world(20000 * MS);
  if (!w) return;
  comm *c = comm_group_rank(w, me);
  CHECK(c && comm_group_self(w) == me, "this process's endpoint is rank %d", me);
  CHECK(!comm_group_rank(w, (me + 1) % n_ranks), "another rank's endpoint is not here");
  // sizes on both all-reduce paths (whole buffers; slices), uneven slices included
  size_t sizes[] = {0, 1, 7, 2048, 8191, 65536 + 3, 1 << 20};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) check_allreduce(c, sizes[k], (int)k);
  check_allgather(c, 0);
  check_allgather(c, 1000);
  check_allgather(c, 250001);
  check_ring(c);
  CHECK(comm_barrier(c) == SC_OK, "barrier");

  // the link fault: every rank's all-reduce sleeps at least the latency
  comm_group_set_slow(w, 0, 30 * MS, 0);
  uint64_t t0 = sc_monotonic_ns();
  check_allreduce(c, 100, 9);
  CHECK(sc_monotonic_ns() - t0 >= 30 * MS, "a slow link adds its latency to an all-reduce");
  comm_group_set_slow(w, 0, 0, 0);

  // idle waits: rank 1 sends after a while; rank 0 waits with no deadline
  if (me == 1) {
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 300 * (long)MS};
    nanosleep(&ts, NULL);
    int v = 77;
    CHECK(comm_send(c, &v, sizeof v, 0) == SC_OK, "send for the idle wait");
  } else if (me == 0) {
    int v = 0;
    CHECK(comm_mpi_recv_idle(c, &v, sizeof v, 1) == SC_OK && v == 77, "idle receive got %d", v);
  }

  // alarms: rank 1 raises one; rank 0, waiting in a watched group for a message that never
  // comes, ends with SC_ABORTED and finds the alarm
  int pair[2] = {0, 1};
  comm_group *p = me < 2 ? open_group(2, pair, 60000 * MS) : NULL;
  if (p) {
    comm_group_watch(p, w);
    if (me == 1) {
      char why[32] = "rank 1 gave up";
      CHECK(comm_mpi_send_alarm(c, why, sizeof why, 0) == SC_OK, "send an alarm");
    } else {
      int v;
      sc_status s = comm_recv(comm_group_rank(p, 0), &v, sizeof v, 1);
      CHECK(s == SC_ABORTED, "a wait in a watched group ends on an alarm: %s", sc_status_name(s));
      char why[32] = "";
      int from = -1;
      CHECK(comm_mpi_recv_alarm(c, why, sizeof why, -1, &from) == SC_OK && from == 1 &&
                !strcmp(why, "rank 1 gave up"),
            "the alarm from rank %d says '%s'", from, why);
      CHECK(comm_mpi_recv_alarm(c, why, sizeof why, -1, &from) == SC_TIMEOUT, "no second alarm");
    }
  }
  comm_group_free(p);
  CHECK(comm_barrier(c) == SC_OK, "barrier after the alarm");

  // the deadline: rank 0 waits in an all-reduce that rank 1 never joins
  p = me < 2 ? open_group(2, pair, 200 * MS) : NULL;
  if (p && me == 0) {
    float x = 1;
    sc_status s = comm_allreduce_sum(comm_group_rank(p, 0), &x, 1);
    CHECK(s == SC_TIMEOUT, "an all-reduce no peer joins times out: %s", sc_status_name(s));
    CHECK(strstr(comm_group_error(p), "deadline"), "the group says why: '%s'", comm_group_error(p));
    CHECK(comm_allreduce_sum(comm_group_rank(p, 0), &x, 1) == SC_TIMEOUT,
          "a broken group refuses later calls with the same status");
  }
  comm_group_free(p);
  CHECK(comm_barrier(c) == SC_OK, "barrier after the deadline");

  // abort: rank 0 waits for a message that never comes; another thread aborts the wait
  p = me < 2 ? open_group(2, pair, 60000 * MS) : NULL;
  if (p && me == 0) {
    aborter a = {.c = comm_group_rank(p, 0), .after_ns = 100 * MS};
    pthread_t th;
    pthread_create(&th, NULL, abort_later, &a);
    int v;
    sc_status s = comm_recv(a.c, &v, sizeof v, 1);
    pthread_join(th, NULL);
    CHECK(s == SC_ABORTED, "abort ends a receive: %s", sc_status_name(s));
    CHECK(comm_barrier(a.c) == SC_ABORTED, "an aborted group refuses later calls");
  }
  comm_group_free(p);

  sc_error err = {{0}};
  CHECK(sc_mpi_check_same_build(20000 * MS, &err) == SC_OK, "same build: %s", err.msg);
  CHECK(sc_mpi_build_id()[0], "the executable has a build id");
  CHECK(comm_barrier(c) == SC_OK, "final barrier");
  comm_group_free(w);
}

// --- engine

#define N_REQ   6
#define MAX_NEW 24

// One run's greedy tokens, and with logits on, every logits row (request, index, vocab).
typedef struct elog {
  int vocab;
  uint64_t ids[N_REQ];
  int32_t tokens[N_REQ][MAX_NEW];
  int n_tokens[N_REQ];
  float *logits; // (N_REQ, MAX_NEW, vocab) or NULL
} elog;

static engine_config tiny(int tp, int pp, const char *backend, bool mpi) {
  engine_config c = engine_config_defaults();
  sc_error err = {{0}};
  if (model_preset_load("llama-tiny", &c.model, &err) != SC_OK) fail("preset: %s", err.msg);
  c.backend = backend;
  c.tp = tp;
  c.pp = pp;
  c.weights_seed = 1;
  c.kv_blocks = 128;
  c.max_running = 8;
  c.token_budget = 64;
  c.prefill_chunk = 16; // chunked prefill beside decodes, several sequences per step
  c.threads = 1;
  c.collective_timeout_ns = 600000 * MS; // a wait that is not an alarm would show as a hang
  c.mpi = mpi;
  return c;
}

static void record(void *ud, uint64_t id, int index, const float *logits, int vocab) {
  elog *L = ud;
  for (int i = 0; i < N_REQ; i++)
    if (L->ids[i] == id && index < MAX_NEW && L->logits)
      memcpy(L->logits + ((size_t)i * MAX_NEW + (size_t)index) * (size_t)vocab, logits,
             (size_t)vocab * sizeof *logits);
}

// Rank 0: runs N_REQ prompts to completion on an engine of cfg into L. False (and a failure)
// when a call fails.
static bool run_engine(engine_config cfg, elog *L, bool logits) {
  memset(L, 0, sizeof *L);
  L->vocab = cfg.model.vocab_size;
  if (logits) L->logits = calloc((size_t)N_REQ * MAX_NEW * (size_t)L->vocab, sizeof(float));
  cfg.on_logits = logits ? record : NULL; // none: greedy picks on the devices
  cfg.on_logits_ud = L;
  engine *e = NULL;
  sc_error err = {{0}};
  if (engine_new(&cfg, &e, &err) != SC_OK) {
    fail("engine_new (tp %d pp %d%s): %s", cfg.tp, cfg.pp, cfg.mpi ? ", mpi" : "", err.msg);
    return false;
  }
  bool ok = true;
  for (int i = 0; i < N_REQ && ok; i++) {
    int32_t prompt[64];
    int n = 5 + 7 * i;
    for (int k = 0; k < n; k++) prompt[k] = 3 + (k * 37 + i * 101) % 500;
    engine_request r = {.prompt = prompt, .n_prompt = n, .max_tokens = MAX_NEW};
    ok = engine_submit(e, &r, &L->ids[i], &err) == SC_OK;
    if (!ok) fail("submit: %s", err.msg);
  }
  for (int guard = 0; ok && !engine_idle(e) && guard < 10000; guard++) {
    engine_step_result res;
    ok = engine_step(e, &res, &err) == SC_OK;
    if (!ok) fail("step (tp %d pp %d%s): %s", cfg.tp, cfg.pp, cfg.mpi ? ", mpi" : "", err.msg);
    for (int k = 0; ok && k < res.n_events; k++)
      for (int i = 0; i < N_REQ; i++)
        if (res.events[k].req_id == L->ids[i] && res.events[k].kind == ENGINE_EV_TOKEN)
          L->tokens[i][L->n_tokens[i]++] = res.events[k].token;
  }
  engine_free(e);
  return ok;
}

// Every rank but 0: serves rank 0's engine of cfg.
static void follow(engine_config cfg) {
  sc_error err = {{0}};
  sc_status s = engine_follow(&cfg, &err);
  CHECK(s == SC_OK, "engine_follow (tp %d pp %d): %s", cfg.tp, cfg.pp, err.msg);
}

static void same_tokens(const elog *a, const elog *b, const char *what) {
  int differ = 0;
  for (int i = 0; i < N_REQ; i++) {
    differ += a->n_tokens[i] != MAX_NEW || b->n_tokens[i] != MAX_NEW;
    for (int k = 0; k < MAX_NEW; k++) differ += a->tokens[i][k] != b->tokens[i][k];
  }
  CHECK(differ == 0, "%s: %d greedy tokens differ", what, differ);
}

static void check_engine(int tp, int pp, const char *backend) {
  if (tp * pp != n_ranks) {
    fail("engine: run tp %d x pp %d with %d processes", tp, pp, tp * pp);
    return;
  }
  engine_config mpi = tiny(tp, pp, backend, true);
  if (me != 0) { // two engines: greedy picks, then logits
    follow(mpi);
    follow(mpi);
    return;
  }
  elog *procs = calloc(1, sizeof *procs), *threads = calloc(1, sizeof *threads),
       *one = calloc(1, sizeof *one);
  // greedy picks on the devices: the same tokens as the same layout as threads, and as tp1
  if (run_engine(mpi, procs, false) && run_engine(tiny(tp, pp, backend, false), threads, false) &&
      run_engine(tiny(1, 1, backend, false), one, false)) {
    same_tokens(procs, threads, "processes vs threads");
    same_tokens(procs, one, "processes vs tp1 pp1");
  }
  free(procs->logits);
  free(threads->logits);
  // logits to the host: every row the same bits as with ranks as threads
  if (run_engine(mpi, procs, true) && run_engine(tiny(tp, pp, backend, false), threads, true)) {
    same_tokens(procs, threads, "processes vs threads, logits path");
    size_t n = (size_t)N_REQ * MAX_NEW * (size_t)procs->vocab, bad = 0;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
      double d = fabs((double)procs->logits[i] - (double)threads->logits[i]);
      if (d > worst) worst = d;
      bad += memcmp(&procs->logits[i], &threads->logits[i], sizeof(float)) != 0;
    }
    printf("rank 0: tp %d pp %d: %zu logits, %zu not bit-identical to threads, max |diff| %g\n", tp,
           pp, n, bad, worst);
    CHECK(bad == 0, "logits as processes equal those as threads bit for bit (%zu differ)", bad);
  }
  free(procs->logits);
  free(threads->logits);
  free(procs);
  free(threads);
  free(one);
}

// A job whose size is not tp x pp: every rank refuses, with the sizes in the line.
static void check_engine_size(int tp, int pp) {
  engine_config c = tiny(tp, pp, "cpu", true);
  sc_error err = {{0}};
  sc_status s;
  if (me == 0) {
    engine *e = NULL;
    s = engine_new(&c, &e, &err);
    engine_free(e);
  } else {
    s = engine_follow(&c, &err);
  }
  CHECK(s == SC_INVALID && strstr(err.msg, "needs"),
        "a job of the wrong size is refused: %s "
        "'%s'",
        sc_status_name(s), err.msg);
}

// Rank `victim`'s device is lost between two steps: rank 0's next step fails at once with the
// victim's own reason (its alarm), not a deadline; then every rank stops.
static void check_engine_fault(int tp, int pp, int victim) {
  engine_config c = tiny(tp, pp, "cpu", true);
  if (me != 0) {
    sc_error err = {{0}};
    engine_follow(&c, &err); // ends when rank 0 frees its engine
    return;
  }
  engine *e = NULL;
  sc_error err = {{0}};
  if (engine_new(&c, &e, &err) != SC_OK) {
    fail("engine_new: %s", err.msg);
    return;
  }
  int32_t prompt[8] = {3, 4, 5, 6, 7, 8, 9, 10};
  engine_request r = {.prompt = prompt, .n_prompt = 8, .max_tokens = 100};
  uint64_t id;
  engine_step_result res;
  CHECK(engine_submit(e, &r, &id, &err) == SC_OK, "submit: %s", err.msg);
  CHECK(engine_step(e, &res, &err) == SC_OK, "a step before the fault: %s", err.msg);
  dev_fault f = dev_fault_none();
  f.lost = true;
  CHECK(engine_set_rank_fault(e, victim, &f) == SC_OK, "the fault is queued for rank %d", victim);
  sc_status s = engine_step(e, &res, &err);
  char want[64];
  snprintf(want, sizeof want, "rank %d (tp_rank=%d pp_rank=%d)", victim, victim % tp, victim / tp);
  CHECK(s == SC_DEVICE && strstr(err.msg, want) && strstr(err.msg, "device lost"),
        "the step fails with rank %d's reason: %s '%s'", victim, sc_status_name(s), err.msg);
  printf("rank 0: the step failed with: %s\n", err.msg);
  // fail-stop, as a replica's job does: the victim's peers still wait in their collectives.
  // No rank leaves its loop first (engine_free would tell them to): a rank in MPI_Finalize
  // while the launcher tears the job down can crash Open MPI 4.1's mpirun.
  (void)e;
  if (!failures) printf("rank 0: ok (%d checks)\n", checks);
  fflush(stdout);
  sc_mpi_abort(failures ? 1 : 0);
}

// Rank `victim`'s process is stopped (SIGSTOP) or killed (SIGKILL) by rank 0 between two steps
// (every rank runs on this host). Stopped: rank 0's next step ends with SC_TIMEOUT at the
// collective deadline (2 s here), never later; then the job fails stop. Killed: the launcher
// ends the whole job (rank 0 with it), as a replica's job is lost; test_mpi.c checks that.
static void check_engine_signal(int tp, int pp, int victim, int sig) {
  int pids[64] = {0}, mine = (int)getpid();
  sc_error err = {{0}};
  CHECK(sc_mpi_gather(&mine, pids, sizeof mine, 0, 0, &err) == SC_OK, "pids: %s", err.msg);
  engine_config c = tiny(tp, pp, "cpu", true);
  c.collective_timeout_ns = 2000 * MS;
  if (me != 0) {
    engine_follow(&c, &err); // the victim never comes back; the others end with the job
    return;
  }
  engine *e = NULL;
  if (engine_new(&c, &e, &err) != SC_OK) {
    fail("engine_new: %s", err.msg);
    return;
  }
  int32_t prompt[8] = {3, 4, 5, 6, 7, 8, 9, 10};
  engine_request r = {.prompt = prompt, .n_prompt = 8, .max_tokens = 100};
  uint64_t id;
  engine_step_result res;
  CHECK(engine_submit(e, &r, &id, &err) == SC_OK, "submit: %s", err.msg);
  CHECK(engine_step(e, &res, &err) == SC_OK, "a step before the signal: %s", err.msg);
  printf("rank 0: signal %d to rank %d (pid %d)\n", sig, victim, pids[victim]);
  fflush(stdout);
  kill(pids[victim], sig);
  uint64_t t0 = sc_monotonic_ns();
  sc_status s = engine_step(e, &res, &err);
  double took = (double)(sc_monotonic_ns() - t0) / 1e9;
  printf("rank 0: the step ended after %.2f s: %s: %s\n", took, sc_status_name(s), err.msg);
  CHECK(s == SC_TIMEOUT, "a stopped rank ends the step with a timeout: %s '%s'",
        sc_status_name(s), err.msg);
  CHECK(took < 30, "the step ended at the deadline (2 s), not %.1f s later", took);
  kill(pids[victim], SIGCONT);
  if (!failures) printf("rank 0: ok (%d checks)\n", checks);
  fflush(stdout);
  sc_mpi_abort(failures ? 1 : 0); // fail-stop: the victim's peers still wait
}

// The slow-link fault set on rank 0's engine (engine_set_link_fault, as a replica's worker
// does) reaches the other ranks with the next step, and so does its end. With pp > 1 only the
// receiving stage (a rank other than 0) pays a slow link's latency (a send never waits), so a
// step slowed by at least the latency shows that the fault reached that rank's process; with
// tp > 1 every all-reduce pays it. Steps are timed by their fastest, as the host is shared.
#define LINK_LATENCY_NS (150 * MS)
#define LINK_STEPS      3

// The fastest of LINK_STEPS steps of e, in ns; UINT64_MAX when a step fails.
static uint64_t fastest_step(engine *e) {
  uint64_t best = UINT64_MAX;
  for (int i = 0; i < LINK_STEPS; i++) {
    engine_step_result res;
    sc_error err = {{0}};
    uint64_t t0 = sc_monotonic_ns();
    if (engine_step(e, &res, &err) != SC_OK) {
      fail("step: %s", err.msg);
      return UINT64_MAX;
    }
    uint64_t dt = sc_monotonic_ns() - t0;
    if (dt < best) best = dt;
  }
  return best;
}

static void check_engine_link(int tp, int pp) {
  engine_config c = tiny(tp, pp, "cpu", true);
  if (tp * pp != n_ranks || pp < 2) {
    fail("engine-link: run tp %d x pp %d (pp >= 2) with %d processes", tp, pp, tp * pp);
    return;
  }
  if (me != 0) {
    follow(c);
    return;
  }
  engine *e = NULL;
  sc_error err = {{0}};
  if (engine_new(&c, &e, &err) != SC_OK) {
    fail("engine_new: %s", err.msg);
    return;
  }
  int32_t prompt[8] = {3, 4, 5, 6, 7, 8, 9, 10};
  engine_request r = {.prompt = prompt, .n_prompt = 8, .max_tokens = 100};
  uint64_t id;
  CHECK(engine_submit(e, &r, &id, &err) == SC_OK, "submit: %s", err.msg);
  uint64_t before = fastest_step(e);
  CHECK(engine_set_link_fault(e, 0, LINK_LATENCY_NS, 0) == SC_OK, "the link fault is set");
  uint64_t slowed = fastest_step(e);
  CHECK(engine_set_link_fault(e, 0, 0, 0) == SC_OK, "the link fault is cleared");
  uint64_t after = fastest_step(e); // the clear travels with the first of these steps
  printf("rank 0: tp %d pp %d: fastest step %.1f ms, %.1f ms with a %.0f ms link, %.1f ms "
         "after\n", tp, pp, (double)before / 1e6, (double)slowed / 1e6,
         (double)LINK_LATENCY_NS / 1e6, (double)after / 1e6);
  CHECK(slowed != UINT64_MAX && slowed >= LINK_LATENCY_NS,
        "every slowed step waits for the link at the receiving stage (%.1f ms)",
        (double)slowed / 1e6);
  CHECK(after < LINK_LATENCY_NS && before < LINK_LATENCY_NS,
        "steps without the fault are faster than its latency (%.1f ms before, %.1f ms after)",
        (double)before / 1e6, (double)after / 1e6);
  engine_free(e);
}

// A cuda group of processes (comm_group_open_mpi, backend cuda) whose members have no device:
// each still joins the broadcast of NCCL's unique id (rank 0 sends its failure, the others take
// it), so every rank fails at once with its own line instead of waiting for the 30 s deadline.
// Needs the CUDA build (its library), not a GPU.
static void check_comm_cuda_nodev(void) {
  int members[64];
  for (int i = 0; i < n_ranks; i++) members[i] = i;
  comm_group *g = NULL;
  sc_error err = {{0}};
  uint64_t t0 = sc_monotonic_ns();
  sc_status s = comm_group_open_mpi("cuda", n_ranks, members, NULL, 30000 * MS, &g, &err);
  double took = (double)(sc_monotonic_ns() - t0) / 1e9;
  printf("rank %d: %s after %.2f s: %s\n", me, sc_status_name(s), took, err.msg);
  CHECK(s == SC_INVALID && !g, "a member without a device is refused: %s", sc_status_name(s));
  char want[64];
  snprintf(want, sizeof want, "rank %d has no device", me);
  CHECK(strstr(err.msg, want), "the line names this rank: '%s'", err.msg);
  CHECK(took < 10, "no rank waited for the deadline (%.2f s)", took);
  // the job's ranks are still in step: a world collective after it completes
  int v = me;
  CHECK(sc_mpi_max_int(&v, 10000 * MS, &err) == SC_OK && v == n_ranks - 1, "max after: %s",
        err.msg);
}

int main(int argc, char **argv) {
  sc_error err = {{0}};
  if (sc_mpi_init(&err) != SC_OK) {
    printf("FAIL %s\n", err.msg);
    return 1;
  }
  me = sc_mpi_rank();
  n_ranks = sc_mpi_size();
  if (argc >= 2 && !strcmp(argv[1], "comm") && n_ranks >= 2 && n_ranks <= 64) {
    check_comm();
  } else if (argc >= 4 && !strcmp(argv[1], "engine")) {
    check_engine(atoi(argv[2]), atoi(argv[3]), argc >= 5 ? argv[4] : "cpu");
  } else if (argc >= 4 && !strcmp(argv[1], "engine-size")) {
    check_engine_size(atoi(argv[2]), atoi(argv[3]));
  } else if (argc >= 5 && !strcmp(argv[1], "engine-stop")) {
    check_engine_signal(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), SIGSTOP);
  } else if (argc >= 5 && !strcmp(argv[1], "engine-kill")) {
    check_engine_signal(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), SIGKILL);
  } else if (argc >= 2 && !strcmp(argv[1], "comm-cuda-nodev") && n_ranks <= 64) {
    check_comm_cuda_nodev();
  } else if (argc >= 4 && !strcmp(argv[1], "engine-link")) {
    check_engine_link(atoi(argv[2]), atoi(argv[3]));
  } else if (argc >= 5 && !strcmp(argv[1], "engine-fault")) {
    check_engine_fault(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
  } else {
    fail("usage: mpi_check comm | engine TP PP [BACKEND] | engine-size TP PP | engine-fault TP "
         "PP RANK | engine-link TP PP | comm-cuda-nodev (under mpirun, 2..64 ranks)");
  }
  if (!failures) printf("rank %d: ok (%d checks)\n", me, checks);
  fflush(stdout);
  sc_mpi_finalize();
  return failures ? 1 : 0;
}
