// The recorder (reports/recorder.c): rows queued from several threads reach the database in
// each thread's order, a request whose token times need more than a queue chunk is written
// whole, the queue's memory is reused across many writer batches, and after a write error the
// later rows are dropped and rec_drain reports the error.
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "reports/recorder.h"
#include "reports/store.h"
#include "tests/helpers.h"

typedef struct fixture {
  store *db;
  recorder *rec;
  int64_t run, dep, phase;
} fixture;

static fixture open_fixture(const char *tag) {
  fixture f = {0};
  char path[600];
  const char *dir = sc_test_tmpdir(tag);
  cr_assert_not_null(dir);
  snprintf(path, sizeof path, "%s/results.db", dir);
  sc_error err = {{0}};
  cr_assert_eq(store_open(path, &f.db, &err), SC_OK, "%s", err.msg);
  store_run r = {.scenario = "recorder", .scenario_text = "name: x\n", .mode = "sim",
                 .backend = "sim", .model = "llama-tiny", .seed = 1};
  cr_assert_eq(store_run_begin(f.db, &r, &f.run, &err), SC_OK, "%s", err.msg);
  store_deployment d = {.run_id = f.run, .idx = 0, .tp = 1, .pp = 1, .dp = 1};
  cr_assert_eq(store_deployment_begin(f.db, &d, &f.dep, &err), SC_OK, "%s", err.msg);
  store_phase p = {.run_id = f.run, .deployment_id = f.dep, .name = "p", .kind = "fixed",
                   .concurrency = 1};
  cr_assert_eq(store_phase_begin(f.db, &p, &f.phase, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(rec_new(f.db, &f.rec, &err), SC_OK, "%s", err.msg);
  return f;
}

static void close_fixture(fixture *f) {
  rec_free(f->rec);
  store_close(f->db);
}

static long long scalar(store *db, const char *sql) {
  sqlite3_stmt *st = NULL;
  cr_assert_eq(sqlite3_prepare_v2(store_db(db), sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
               sqlite3_errmsg(store_db(db)));
  long long v = -1;
  if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return v;
}

static store_step step_row(const fixture *f, int rep, uint64_t t) {
  return (store_step){.run_id = f->run, .deployment_id = f->dep, .replica = rep, .t_ns = t,
                      .duration_ns = 10, .seqs = 1, .decode_tokens = 1, .kv_total = 8};
}

static store_request request_row(const fixture *f, int64_t seq, int n_tokens) {
  return (store_request){.run_id = f->run, .deployment_id = f->dep, .phase_id = f->phase,
                         .seq = seq, .class_name = "c", .replica = 0, .prompt_tokens = 4,
                         .max_tokens = n_tokens, .output_tokens = n_tokens,
                         .arrival_ns = (uint64_t)seq, .first_token_ns = (uint64_t)seq + 1,
                         .finish_ns = (uint64_t)seq + (uint64_t)n_tokens,
                         .has_first_token = n_tokens > 0, .has_finish = true, .status = "ok"};
}

typedef struct producer {
  recorder *rec;
  const fixture *f;
  int replica, n;
} producer;

// n step rows of one replica at t = 0, 1, ..., with a request (3 token times) every 100th.
static void *produce(void *arg) {
  producer *p = arg;
  for (int i = 0; i < p->n; i++) {
    store_step st = step_row(p->f, p->replica, (uint64_t)i);
    rec_step(p->rec, &st);
    if (i % 100 == 0) {
      store_request q = request_row(p->f, (int64_t)p->replica * 1000000 + i, 3);
      uint64_t t[3] = {(uint64_t)i, (uint64_t)i + 1, (uint64_t)i + 2};
      rec_request(p->rec, &q, t, 3);
    }
    if (i % 5000 == 0) rec_flush(p->rec);
  }
  return NULL;
}

Test(recorder, rows_from_several_threads_arrive_whole_and_in_each_threads_order) {
  fixture f = open_fixture("rec-order");
  recorder *rec = f.rec;
  sc_error err = {{0}};
  enum { THREADS = 3, ROWS = 40000 }; // a few MB of items: many chunks, each used many times
  producer p[THREADS];
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; i++) {
    p[i] = (producer){.rec = rec, .f = &f, .replica = i, .n = ROWS};
    cr_assert_eq(pthread_create(&th[i], NULL, produce, &p[i]), 0);
  }
  for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
  cr_assert_eq(rec_drain(rec, &err), SC_OK, "%s", err.msg);
  cr_expect_eq(scalar(f.db, "SELECT count(*) FROM step"), THREADS * ROWS);
  // each replica's rows in the order it queued them: t_ns rises with the row id
  cr_expect_eq(scalar(f.db, "SELECT count(*) FROM (SELECT t_ns - lag(t_ns) OVER (PARTITION BY "
                            "replica ORDER BY id) AS d FROM step) WHERE d != 1"),
               0);
  cr_expect_eq(scalar(f.db, "SELECT count(*) FROM request"), THREADS * (ROWS / 100));
  cr_expect_eq(scalar(f.db, "SELECT count(*) FROM token"), THREADS * (ROWS / 100) * 3);
  cr_expect_eq(scalar(f.db, "SELECT count(*) FROM request WHERE class != 'c' OR "
                            "status != 'ok' OR reason IS NOT NULL OR error IS NOT NULL"),
               0);
  close_fixture(&f);
}

typedef struct bounded_producer {
  producer p;
  atomic_int done;
} bounded_producer;

static void *produce_then_say_so(void *arg) {
  bounded_producer *b = arg;
  produce(&b->p);
  atomic_store(&b->done, 1);
  return NULL;
}

Test(recorder, a_producer_far_ahead_of_the_writer_waits_with_the_queue_bounded) {
  fixture f = open_fixture("rec-bound");
  enum { ROWS = 600000 };                    // about 90 MB of queued rows
  const size_t bound = 64u << 20, chunk = 64u << 10;
  bounded_producer b = {.p = {.rec = f.rec, .f = &f, .replica = 0, .n = ROWS}};
  atomic_init(&b.done, 0);
  rec_lock(f.rec); // the writer cannot write: the queue only grows
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, produce_then_say_so, &b), 0);
  for (int ms = 0; ms < 60000 && !atomic_load(&b.done) && rec_queue_peak_bytes(f.rec) < bound;
       ms++)
    usleep(1000);
  usleep(50000);
  size_t peak = rec_queue_peak_bytes(f.rec);
  int done = atomic_load(&b.done);
  rec_unlock(f.rec);
  pthread_join(th, NULL);
  cr_expect(!done, "the producer queued all %d rows past the bound", ROWS);
  cr_expect(peak >= bound && peak <= bound + chunk, "peak %zu bytes while blocked", peak);
  sc_error err = {{0}};
  cr_assert_eq(rec_drain(f.rec, &err), SC_OK, "%s", err.msg);
  cr_expect_leq(rec_queue_peak_bytes(f.rec), bound + chunk);
  cr_expect_eq(scalar(f.db, "SELECT count(*) FROM step"), ROWS);
  cr_expect_eq(scalar(f.db, "SELECT count(*) FROM step WHERE t_ns != id - (SELECT min(id) FROM "
                            "step)"),
               0, "rows in the order they were queued");
  close_fixture(&f);
}

Test(recorder, a_request_larger_than_a_queue_chunk_is_written_whole_between_its_neighbours) {
  fixture f = open_fixture("rec-large");
  recorder *rec = f.rec;
  sc_error err = {{0}};
  enum { BIG = 100000 }; // 800 KB of token times, past the queue's 64 KiB chunks
  uint64_t *t = malloc(BIG * sizeof *t);
  cr_assert_not_null(t);
  for (int i = 0; i < BIG; i++) t[i] = 1000 + (uint64_t)i * 7;
  store_step a = step_row(&f, 0, 1), b = step_row(&f, 0, 2);
  rec_step(rec, &a);
  store_request q = request_row(&f, 1, BIG);
  q.error = "a long error text";
  rec_request(rec, &q, t, BIG);
  rec_step(rec, &b);
  cr_assert_eq(rec_drain(rec, &err), SC_OK, "%s", err.msg);
  cr_expect_eq(scalar(f.db, "SELECT count(*) FROM token"), BIG);
  cr_expect_eq(scalar(f.db, "SELECT sum(t_ns = 1000 + idx * 7) FROM token"), BIG);
  cr_expect_eq(scalar(f.db, "SELECT count(*) FROM request WHERE error = 'a long error text' "
                            "AND output_tokens = 100000"),
               1);
  sqlite3_stmt *st = NULL;
  sqlite3_prepare_v2(store_db(f.db), "SELECT group_concat(t_ns) FROM (SELECT t_ns FROM step "
                                     "ORDER BY id)", -1, &st, NULL);
  cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
  cr_expect_str_eq((const char *)sqlite3_column_text(st, 0), "1,2");
  sqlite3_finalize(st);
  free(t);
  close_fixture(&f);
}

Test(recorder, after_a_write_error_later_rows_are_dropped_and_the_drain_reports_it) {
  fixture f = open_fixture("rec-error");
  recorder *rec = f.rec;
  sc_error err = {{0}};
  store_step ok = step_row(&f, 0, 1);
  rec_step(rec, &ok);
  cr_assert_eq(rec_drain(rec, &err), SC_OK, "%s", err.msg);
  // a step of a deployment that does not exist breaks its foreign key
  store_step bad = step_row(&f, 0, 2);
  bad.deployment_id = f.dep + 1000;
  rec_step(rec, &bad);
  cr_assert_eq(rec_drain(rec, &err), SC_INVALID, "%s", err.msg);
  cr_expect(strstr(err.msg, "inserting step rows: FOREIGN KEY"), "%s", err.msg);
  store_step later = step_row(&f, 0, 3);
  rec_step(rec, &later);
  sc_error again = {{0}};
  cr_expect_neq(rec_drain(rec, &again), SC_OK);
  cr_expect_eq(scalar(f.db, "SELECT count(*) FROM step WHERE t_ns = 3"), 0);
  close_fixture(&f);
}
