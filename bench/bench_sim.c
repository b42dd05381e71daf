// Simulator speed: hours of simulated serving through the whole harness (runner, router,
// scheduler, KV cache, cost model, recorder, SQLite), with every request, token time and step
// recorded (or, with --record requests|summary, fewer rows: docs/schema.md), timed on the wall
// clock.
//
// Default: llama3-8b bf16 on 4 simulated H100s as dp=4 (the most engine steps per simulated
// second of the 4-GPU layouts), poisson arrivals at 10 requests/s for 1 hour (36,000
// requests), prompts uniform in [128, 1024] tokens, outputs uniform in [32, 256]. Prints one
// table; numbers go to docs/benchmarks.md with the machine.
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/clock.h"
#include "reports/store.h"
#include "runner/runner.h"
#include "scenarios/scenario.h"

static long long count(sqlite3 *db, const char *sql) {
  sqlite3_stmt *st = NULL;
  long long n = -1;
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
    n = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return n;
}

static void usage(void) {
  fprintf(stderr, "usage: bench_sim [--hours H] [--rate R] [--layout dp4|tp4|tp2dp2] [--db PATH]\n"
                  "                 [--record tokens|requests|summary]\n");
}

int main(int argc, char **argv) {
  double hours = 1, rate = 10;
  const char *layout = "dp4", *db_path = NULL, *record = "tokens";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--hours") && i + 1 < argc) hours = atof(argv[++i]);
    else if (!strcmp(argv[i], "--rate") && i + 1 < argc) rate = atof(argv[++i]);
    else if (!strcmp(argv[i], "--layout") && i + 1 < argc) layout = argv[++i];
    else if (!strcmp(argv[i], "--db") && i + 1 < argc) db_path = argv[++i];
    else if (!strcmp(argv[i], "--record") && i + 1 < argc) record = argv[++i];
    else {
      usage();
      return 2;
    }
  }
  const char *dep = !strcmp(layout, "tp4")      ? "{tp: 4, pp: 1, dp: 1}"
                    : !strcmp(layout, "tp2dp2") ? "{tp: 2, pp: 1, dp: 2}"
                                                : "{tp: 1, pp: 1, dp: 4}";
  char text[2048];
  snprintf(text, sizeof text,
           "name: bench-sim\n"
           "mode: sim\n"
           "model: {preset: llama3-8b, dtype: bf16}\n"
           "hardware: {profile: h100-sxm, gpus: 4}\n"
           "deployments: [%s]\n"
           "workload:\n"
           "  prompts:\n"
           "    - {input: {uniform: [128, 1024]}, output: {uniform: [32, 256]}}\n"
           "  phases:\n"
           "    - {name: steady, rate: %g, arrival: poisson, duration: %gs}\n"
           "limits: {request_timeout: 600s}\n"
           "seed: 1\n"
           "record: %s\n",
           dep, rate, hours * 3600, record);
  sc_error err = {{0}};
  scenario *s = NULL;
  if (scenario_parse(text, strlen(text), "bench-sim", ".", &s, &err) != SC_OK) {
    fprintf(stderr, "bench_sim: scenario: %s\n", err.msg);
    return 1;
  }
  char tmp[256];
  if (!db_path) {
    snprintf(tmp, sizeof tmp, "/tmp/bench_sim_%d.db", (int)getpid());
    db_path = tmp;
  }
  unlink(db_path);
  store *db = NULL;
  if (store_open(db_path, &db, &err) != SC_OK) {
    fprintf(stderr, "bench_sim: %s\n", err.msg);
    return 1;
  }
  runner_options o = runner_options_defaults();
  o.progress = RUNNER_PROGRESS_NONE;
  runner_result res;
  uint64_t t0 = sc_monotonic_ns();
  sc_status st = runner_run(s, db, &o, &res, &err);
  double wall = (double)(sc_monotonic_ns() - t0) / 1e9;
  if (st != SC_OK) {
    fprintf(stderr, "bench_sim: run: %s\n", err.msg);
    return 1;
  }
  sqlite3 *q = store_db(db);
  long long reqs = count(q, "SELECT count(*) FROM request");
  long long toks = count(q, "SELECT count(*) FROM token");
  long long steps = count(q, "SELECT count(*) FROM step");
  double sim_s = res.wall_s; // the run's clock is the virtual one
  printf("layout %s, %g req/s for %g h simulated, record %s: run %s\n", layout, rate, hours,
         record, res.status);
  printf("| wall s | simulated s | x real time | requests | requests / wall s | tokens | steps |"
         " events / wall s |\n");
  printf("| %.2f | %.0f | %.0f | %lld | %.0f | %lld | %lld | %.0f |\n", wall, sim_s, sim_s / wall,
         reqs, reqs / wall, toks, steps, (double)(reqs + toks + steps) / wall);
  store_close(db);
  scenario_free(s);
  if (db_path == tmp) {
    unlink(tmp);
    char side[300];
    snprintf(side, sizeof side, "%s-wal", tmp);
    unlink(side);
    snprintf(side, sizeof side, "%s-shm", tmp);
    unlink(side);
  }
  return 0;
}
