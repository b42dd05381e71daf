// The supervisor thread (serving/supervisor.h): one job at a time, the lowest replica index
// first, each a replica_restart or a replica_swap, its outcome published with an atomic flag.
// Not here: when a replica is restarted or swapped and what is done with the outcome (the fault
// runtime, faults/supervisor.c and faults/hot_swap.c; shardcheck serve's loop, server/loop.c).
#include "serving/supervisor.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

// One replica's job.
typedef struct sup_job {
  bool want;                     // (mu) asked for and not begun
  const engine_config *swap_cfg; // (mu) NULL: a restart
  // the outcome: written by the thread before done is set, read by the caller once it is seen
  atomic_bool done;
  sc_status st;
  sc_error err;
} sup_job;

struct supervisor {
  replica *const *reps; // (n)
  int n;
  sup_job *jobs; // (n)
  void (*notify)(void *ud);
  void *ud;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool quit; // (mu)
};

// --- the thread
static void *sup_main(void *arg) {
  supervisor *s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    int i = -1;
    for (int k = 0; k < s->n && i < 0; k++)
      if (s->jobs[k].want) i = k;
    if (i < 0) {
      if (s->quit) break;
      pthread_cond_wait(&s->cv, &s->mu);
      continue;
    }
    sup_job *j = &s->jobs[i];
    j->want = false;
    const engine_config *cfg = j->swap_cfg;
    pthread_mutex_unlock(&s->mu);
    j->err = (sc_error){{0}};
    j->st = cfg ? replica_swap(s->reps[i], cfg, &j->err) : replica_restart(s->reps[i], &j->err);
    atomic_store(&j->done, true);
    if (s->notify) s->notify(s->ud);
    pthread_mutex_lock(&s->mu);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

// --- the owner's side
sc_status sup_new(replica *const *reps, int n, void (*notify)(void *ud), void *ud,
                  supervisor **out) {
  *out = NULL;
  supervisor *s = calloc(1, sizeof *s);
  sup_job *jobs = calloc((size_t)(n > 0 ? n : 1), sizeof *jobs);
  if (!s || !jobs) {
    free(s), free(jobs);
    return SC_OOM;
  }
  *s = (supervisor){.reps = reps, .n = n, .jobs = jobs, .notify = notify, .ud = ud};
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  if (pthread_create(&s->thread, NULL, sup_main, s) != 0) {
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(jobs), free(s);
    return SC_OOM;
  }
  *out = s;
  return SC_OK;
}

void sup_ask(supervisor *s, int i, const engine_config *swap_cfg) {
  sup_job *j = &s->jobs[i];
  atomic_store(&j->done, false);
  pthread_mutex_lock(&s->mu);
  j->want = true;
  j->swap_cfg = swap_cfg;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

bool sup_done(supervisor *s, int i, sc_status *st, sc_error *err) {
  sup_job *j = &s->jobs[i];
  if (!atomic_load(&j->done)) return false;
  if (st) *st = j->st;
  if (err) *err = j->err;
  return true;
}

void sup_free(supervisor *s) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->quit = true;
  for (int i = 0; i < s->n; i++) s->jobs[i].want = false; // not begun: not wanted now
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  free(s->jobs);
  free(s);
}
