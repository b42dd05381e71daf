// Results-database benchmark: records token events through the store's public writer
// (store_request_add, store_steps_add, store_flush) into a fresh file, as a run would, and
// prints rows, seconds, rows/s and the file size, against the target of 1,000,000 token events
// in under 3 s. A benchmark, never a test: nothing here asserts a time.
//
// Default shape: 10,000 requests x 100 tokens = 1,000,000 token times (each request's in one
// token_times row, docs/schema.md), plus one step row per 10 tokens (100,000) and the 10,000
// request rows; store_flush every 50,000 events written (token times + step + request rows).
// The steps go to the store 256 at a time and before each flush, as the recorder hands them.
// "record" is from the first write to the last flush's commit; "close" is store_close (it
// checkpoints the WAL into the database file).
//
// usage: bench_store [--requests N] [--tokens N] [--dir DIR] [--keep]
#include <getopt.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "kernels/clock.h"
#include "reports/store.h"

#define TARGET_S 3.0
#define FLUSH_ROWS 50000

static long long file_size(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 ? (long long)sb.st_size : 0;
}

static int fail(const char *what, const sc_error *err) {
  fprintf(stderr, "bench_store: %s: %s\n", what, err->msg);
  return 1;
}

int main(int argc, char **argv) {
  static const struct option opts[] = {
      {"requests", required_argument, NULL, 'r'}, {"tokens", required_argument, NULL, 't'},
      {"dir", required_argument, NULL, 'd'},      {"keep", no_argument, NULL, 'k'},
      {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0},
  };
  int n_req = 10000, n_tok = 100;
  const char *dir = getenv("TMPDIR");
  bool keep = false;
  int c;
  while ((c = getopt_long(argc, argv, "r:t:d:kh", opts, NULL)) != -1) {
    switch (c) {
    case 'r': n_req = atoi(optarg); break;
    case 't': n_tok = atoi(optarg); break;
    case 'd': dir = optarg; break;
    case 'k': keep = true; break;
    default:
      printf("usage: bench_store [--requests N (10000)] [--tokens N per request (100)] "
             "[--dir DIR ($TMPDIR or /tmp)] [--keep]\n");
      return c == 'h' ? 0 : 2;
    }
  }
  if (n_req < 1 || n_tok < 1) {
    fprintf(stderr, "bench_store: --requests and --tokens must be positive\n");
    return 2;
  }
  char tmpl[512], path[600];
  snprintf(tmpl, sizeof tmpl, "%s/bench-store-XXXXXX", dir && *dir ? dir : "/tmp");
  if (!mkdtemp(tmpl)) {
    perror("bench_store: mkdtemp");
    return 1;
  }
  snprintf(path, sizeof path, "%s/results.db", tmpl);

  sc_error err = {{0}};
  store *s = NULL;
  if (store_open(path, &s, &err) != SC_OK) return fail("open", &err);
  store_run r = {.scenario = "bench-store", .scenario_text = "name: bench-store\n",
                 .mode = "sim", .backend = "sim", .model = "llama3-8b", .seed = 1};
  int64_t run = 0, dep = 0, ph = 0;
  if (store_run_begin(s, &r, &run, &err) != SC_OK) return fail("run", &err);
  store_deployment d = {.run_id = run, .label = "tp1 pp1 dp1", .tp = 1, .pp = 1, .dp = 1};
  if (store_deployment_begin(s, &d, &dep, &err) != SC_OK) return fail("deployment", &err);
  store_phase p = {.run_id = run, .deployment_id = dep, .name = "fixed c=64", .kind = "fixed",
                   .concurrency = 64};
  if (store_phase_begin(s, &p, &ph, &err) != SC_OK) return fail("phase", &err);
  if (store_flush(s, &err) != SC_OK) return fail("flush", &err);

  uint64_t *tok = malloc((size_t)n_tok * sizeof *tok); // (n_tok) ns from the run start
  if (!tok) return fail("malloc", &(sc_error){{"out of memory"}});
  long long rows = 0, since_flush = 0, steps = 0, flushes = 0;
  enum { STEP_RUN = 256 };
  store_step held[STEP_RUN];
  const store_step *held_p[STEP_RUN];
  int n_held = 0;
  for (int k = 0; k < STEP_RUN; k++) held_p[k] = &held[k];
  double t0 = sc_monotonic_s();
  for (int i = 0; i < n_req; i++) {
    uint64_t arrival = (uint64_t)i * 1000000; // 1 ms apart
    for (int k = 0; k < n_tok; k++) tok[k] = arrival + 50000000 + (uint64_t)k * 20000000;
    store_request rq = {.run_id = run, .deployment_id = dep, .phase_id = ph, .seq = i,
                        .class_name = "", .replica = 0, .prompt_tokens = 512,
                        .max_tokens = n_tok, .output_tokens = n_tok, .arrival_ns = arrival,
                        .dispatch_ns = arrival + 1000, .first_token_ns = tok[0],
                        .finish_ns = tok[n_tok - 1], .has_dispatch = true,
                        .has_first_token = true, .has_finish = true, .status = "ok",
                        .reason = "length"};
    if (store_request_add(s, &rq, tok, n_tok, NULL, &err) != SC_OK) return fail("request", &err);
    rows += 1 + n_tok;
    since_flush += 1 + n_tok;
    for (int k = 0; k < n_tok; k += 10) { // one step row per 10 tokens
      held[n_held++] = (store_step){.run_id = run, .deployment_id = dep, .replica = 0,
                                    .t_ns = tok[k], .duration_ns = 20000000, .seqs = 64,
                                    .decode_tokens = 64, .queue_len = 3, .running = 64,
                                    .kv_used = 1200, .kv_total = 4096};
      if (n_held == STEP_RUN) {
        if (store_steps_add(s, held_p, n_held, &err) != SC_OK) return fail("step", &err);
        n_held = 0;
      }
      steps++;
      rows++;
      since_flush++;
    }
    if (since_flush >= FLUSH_ROWS) {
      if (n_held && store_steps_add(s, held_p, n_held, &err) != SC_OK) return fail("step", &err);
      n_held = 0;
      if (store_flush(s, &err) != SC_OK) return fail("flush", &err);
      since_flush = 0;
      flushes++;
    }
  }
  if (n_held && store_steps_add(s, held_p, n_held, &err) != SC_OK) return fail("step", &err);
  if (store_flush(s, &err) != SC_OK) return fail("flush", &err);
  flushes++;
  double t1 = sc_monotonic_s();
  char wal[640];
  snprintf(wal, sizeof wal, "%s-wal", path);
  long long db_before = file_size(path), wal_before = file_size(wal);
  store_close(s);
  double t2 = sc_monotonic_s();
  long long db_after = file_size(path);
  free(tok);

  long long tokens = (long long)n_req * n_tok;
  double rec = t1 - t0, total = t2 - t0;
  struct utsname u;
  uname(&u);
  printf("bench_store: %s %s, %ld online CPUs, SQLite %s, WAL, synchronous=NORMAL\n",
         u.sysname, u.machine, sysconf(_SC_NPROCESSORS_ONLN), sqlite3_libversion());
  printf("shape: %d requests x %d tokens, a step row per 10 tokens, flush every %d events "
         "(%lld flushes)\n\n", n_req, n_tok, FLUSH_ROWS, flushes);
  printf("%-28s %12s %10s %14s %14s\n", "phase", "events", "seconds", "events/s", "tokens/s");
  printf("%-28s %12lld %10.3f %14.0f %14.0f\n", "record (writes + flushes)", rows, rec,
         rows / rec, tokens / rec);
  printf("%-28s %12s %10.3f\n", "close (WAL checkpoint)", "", t2 - t1);
  printf("%-28s %12lld %10.3f %14.0f %14.0f\n\n", "total", rows, total, rows / total,
         tokens / total);
  printf("events: %lld token times (%d token_times rows), %d request rows, %lld step rows\n",
         tokens, n_req, n_req, steps);
  printf("file: %.1f MB database + %.1f MB WAL before close; %.1f MB after close (%.1f bytes "
         "per token, all tables)\n",
         db_before / 1e6, wal_before / 1e6, db_after / 1e6, (double)db_after / (double)tokens);
  if (tokens == 1000000)
    printf("target: 1,000,000 token events recorded in < %.0f s (record + close): %.3f s: %s\n",
           TARGET_S, total, total < TARGET_S ? "met" : "NOT met");
  else
    printf("target: < %.0f s for 1,000,000 token events (the default shape; this run recorded "
           "%lld)\n", TARGET_S, tokens);
  if (!keep) {
    remove(path);
    remove(wal);
    char shm[640];
    snprintf(shm, sizeof shm, "%s-shm", path);
    remove(shm);
    rmdir(tmpl);
  } else {
    printf("kept: %s\n", path);
  }
  return 0;
}
