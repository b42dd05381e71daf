// Injection (see runtime.h): a planned fault becomes a replica_fault applied through the
// replica handle (its kind's row in faults/kinds.c says which; every implementation takes
// every kind and acts on it its own way), or does what its row's act says: a cancel storm ends
// requests on the client's side, a clock jump moves the workers' wall clock through
// libfaketime's clock file (real mode), an exec fault runs a command. What a fault did is
// judged in judge.c.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "faults/kinds.h"
#include "faults/runtime_impl.h"
#include "kernels/util.h"
#include "serving/launch.h"

// --- clock jumps
static const char *const faketime_libs[] = {
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1",
    "/usr/local/lib/faketime/libfaketimeMT.so.1",
};

const char *fault_faketime_lib(void) {
  const char *env = getenv("SHARDCHECK_LIBFAKETIME");
  if (env && *env) return access(env, R_OK) == 0 ? env : NULL;
  for (size_t i = 0; i < sizeof faketime_libs / sizeof *faketime_libs; i++)
    if (access(faketime_libs[i], R_OK) == 0) return faketime_libs[i];
  return NULL;
}

// Writes the workers' wall-clock offset (whole seconds, libfaketime's relative format) to the
// clock file, atomically: a worker never reads half a line.
static sc_status clock_write(fault_rt *f, int64_t offset_ns, sc_error *err) {
  char tmp[128];
  snprintf(tmp, sizeof tmp, "%s.new", f->clock_file);
  FILE *o = fopen(tmp, "w");
  if (!o) return sc_fail(err, SC_IO, "clock_jump: cannot write %s: %s", tmp, strerror(errno));
  fprintf(o, "%+lld\n", (long long)(offset_ns / 1000000000));
  bool ok = fclose(o) == 0;
  if (!ok || rename(tmp, f->clock_file) != 0)
    return sc_fail(err, SC_IO, "clock_jump: cannot write %s: %s", f->clock_file, strerror(errno));
  return SC_OK;
}

// Real mode with a clock jump: a clock file at offset +0 and the environment that starts the
// workers under libfaketime (monotonic clocks left alone).
sc_status frt_clock_setup(fault_rt *f) {
  bool jumps = false;
  for (int i = 0; i < f->plan.n; i++) jumps |= f->plan.v[i].kind == SCN_FAULT_CLOCK_JUMP;
  if (!jumps || f->c.sim) return SC_OK;
  const char *lib = fault_faketime_lib();
  if (!lib) return sc_fail(&f->err, SC_INVALID, "clock_jump: libfaketime not found");
  snprintf(f->clock_dir, sizeof f->clock_dir, "/tmp/shardcheck-clock-XXXXXX");
  if (!mkdtemp(f->clock_dir)) {
    f->clock_dir[0] = 0;
    return sc_fail(&f->err, SC_IO, "clock_jump: cannot make a directory: %s", strerror(errno));
  }
  snprintf(f->clock_file, sizeof f->clock_file, "%s/offset", f->clock_dir);
  SC_TRY(clock_write(f, 0, &f->err));
  const char *pre = getenv("LD_PRELOAD");
  snprintf(f->env_buf[0], sizeof f->env_buf[0], "LD_PRELOAD=%s%s%s", lib, pre && *pre ? ":" : "",
           pre ? pre : "");
  snprintf(f->env_buf[1], sizeof f->env_buf[1], "FAKETIME_TIMESTAMP_FILE=%s", f->clock_file);
  snprintf(f->env_buf[2], sizeof f->env_buf[2], "FAKETIME_NO_CACHE=1");
  snprintf(f->env_buf[3], sizeof f->env_buf[3], "FAKETIME_DONT_FAKE_MONOTONIC=1");
  int n = 4;
#ifdef __SANITIZE_ADDRESS__
  // an instrumented worker accepts a preloaded library ahead of its sanitizer runtime
  const char *asan = getenv("ASAN_OPTIONS");
  snprintf(f->env_buf[n++], sizeof f->env_buf[0], "ASAN_OPTIONS=%s%sverify_asan_link_order=0",
           asan ? asan : "", asan && *asan ? ":" : "");
#endif
  for (int i = 0; i < n; i++) f->env[i] = f->env_buf[i];
  f->env[n] = NULL;
  return SC_OK;
}

const char *const *fault_rt_worker_env(const fault_rt *f) { return f && f->env[0] ? f->env : NULL; }

void frt_clock_jump(fault_rt *f, int fi, uint64_t now) {
  (void)now;
  fault_run *fr = &f->fr[fi];
  sc_error e = {{0}};
  int64_t next = f->clock_offset_ns + f->plan.v[fi].src->offset_ns;
  if (!f->clock_file[0]) {
    snprintf(fr->note, sizeof fr->note, "not injected: no worker runs under libfaketime");
  } else if (clock_write(f, next, &e) != SC_OK) {
    snprintf(fr->note, sizeof fr->note, "not injected: %.140s", e.msg);
  } else {
    f->clock_offset_ns = next;
  }
}

// A clock jump is seen once every live worker's reported wall clock is off ours by the
// offset now in force (within half a second: a report is read soon after it is sent).
void frt_clock_check(fault_rt *f, int fi, uint64_t now) {
  int seen = 0;
  for (int i = 0; i < f->c.n_reps; i++) {
    if (router_busy(f->c.rt, i) || replica_health_get(f->c.reps[i]) == REPLICA_DEAD) continue;
    int64_t skew;
    if (!replica_wall_skew(f->c.reps[i], &skew)) return;
    if (llabs(skew - f->clock_offset_ns) > 500000000ll) return;
    seen++;
  }
  if (seen == 0) return;
  char how[96];
  snprintf(how, sizeof how, "the wall clock of %d worker%s is off by %+.0f s", seen,
           seen == 1 ? "" : "s", (double)f->clock_offset_ns / 1e9);
  frt_detect(f, fi, now, how);
}

// --- injection
static bool rep_ok(fault_rt *f, int i) {
  return i >= 0 && i < f->c.n_reps && !router_busy(f->c.rt, i) &&
         replica_health_get(f->c.reps[i]) != REPLICA_DEAD;
}

// A fault that did not reach replica rep explains none of its losses (frt_loss_fault).
static void inject_one(fault_rt *f, int fi, int rep, const replica_fault *rf) {
  fault_run *fr = &f->fr[fi];
  bool *explained = rep >= 0 && rep < f->n_rs ? &f->explained[(size_t)fi * (size_t)f->n_rs +
                                                              (size_t)rep]
                                              : NULL;
  if (!rep_ok(f, rep)) {
    snprintf(fr->note, sizeof fr->note, "replica%d was already lost: nothing injected", rep);
    if (explained && rf->kind != RFAULT_CLEAR && rf->kind != RFAULT_RESUME) *explained = true;
    return;
  }
  sc_error e = {{0}};
  if (replica_inject(f->c.reps[rep], rf, &e) != SC_OK) {
    snprintf(fr->note, sizeof fr->note, "not injected: %.140s", e.msg);
    if (explained && rf->kind != RFAULT_CLEAR && rf->kind != RFAULT_RESUME) *explained = true;
  }
}

// Requests in flight whose stage is in the mask: queued and prefill cannot be told apart by a
// client (no token yet), so either selects both.
static bool in_stages(const req_rec *q, int stages) {
  if (q->n_tok > 0) return stages & SCN_STAGE_DECODE;
  return stages & (SCN_STAGE_QUEUED | SCN_STAGE_PREFILL);
}

void frt_cancel_storm(fault_rt *f, int fi, uint64_t now) {
  const ft_fault *ft = &f->plan.v[fi];
  fault_run *fr = &f->fr[fi];
  size_t n = 0;
  uint64_t *keys = malloc((f->c.reqs->n - f->c.reqs->low + 1) * sizeof *keys);
  if (!keys) {
    snprintf(fr->note, sizeof fr->note, "not injected: out of memory");
    return;
  }
  for (size_t k = f->c.reqs->low; k < f->c.reqs->n; k++) {
    req_rec *q = &f->c.reqs->v[k];
    if (q->state != REQ_DONE && in_stages(q, ft->stages)) keys[n++] = k;
  }
  size_t want = ft->count ? (size_t)ft->count : (size_t)llround(ft->fraction * (double)n);
  if (ft->fraction > 0 && want == 0 && n > 0) want = 1;
  if (want > n) want = n;
  // A seeded partial shuffle picks which ones (the same seed cancels the same requests).
  uint64_t x = f->c.seed ^ (0x5707ull + (uint64_t)fi * 0x9E3779B97F4A7C15ull);
  for (size_t i = 0; i < want; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    size_t j = i + (size_t)((x >> 33) % (n - i));
    uint64_t t = keys[i];
    keys[i] = keys[j];
    keys[j] = t;
  }
  qsort(keys, want, sizeof *keys, sc_cmp_u64);
  for (size_t i = 0; i < want; i++) {
    req_rec *q = &f->c.reqs->v[keys[i]];
    q->fault = fi;
    fr->affected++;
    if (q->dispatched && !q->waiting && !router_busy(f->c.rt, q->replica)) {
      replica_cancel(f->c.reps[q->replica], keys[i]);
      q->storm = true;
      fr->acks++;
    }
    finish(f, keys[i], REQ_CANCELLED, "cancelled", "cancelled by a cancel storm", now);
  }
  // The requests it spared are still compared with a fault-free run afterwards.
  for (size_t k = f->c.reqs->low; k < f->c.reqs->n; k++)
    if (f->c.reqs->v[k].state != REQ_DONE && f->c.reqs->v[k].fault < 0) f->c.reqs->v[k].fault = fi;
  free(keys);
  fr->detected = true; // the client did it: known at once
  fr->detected_ns = now;
  if (fr->acks == 0) {
    fr->recovered = true;
    fr->recovered_ns = now;
  }
  frt_note(f, "%s: cancel storm: %zu of %zu in-flight requests cancelled", f->c.dep->label, want,
           n);
}

// --- exec: a user command at the fault's time, once per target replica (every replica when the
// fault names none), in a process group of its own (serving/launch.h: it cannot outlive the
// runner), its output in LOG_DIR/LABEL-exec-FAULT-replicaR.log.
void frt_exec_start(fault_rt *f, int fi, uint64_t now) {
  (void)now;
  const ft_fault *ft = &f->plan.v[fi];
  fault_run *fr = &f->fr[fi];
  fr->exec = calloc((size_t)f->c.n_reps, sizeof *fr->exec);
  if (!fr->exec) {
    snprintf(fr->note, sizeof fr->note, "not injected: out of memory");
    return;
  }
  for (int i = 0; i < f->c.n_reps; i++) {
    if (ft->replica >= 0 && i != ft->replica) continue;
    char cmd[2048], log[1400];
    sc_error e = {{0}};
    replica *rep = f->c.reps[i];
    if (launch_exec_expand(ft->src->exec_command, replica_pid(rep), replica_port(rep), i,
                           cmd, sizeof cmd, &e) != SC_OK) {
      snprintf(fr->note, sizeof fr->note, "not run: %.140s", e.msg);
      continue;
    }
    if (f->c.log_dir)
      snprintf(log, sizeof log, "%s/%s-exec%d-replica%d.log", f->c.log_dir, f->c.dep->label, fi, i);
    else
      snprintf(log, sizeof log, "/dev/null");
    launch_spec ls = {
        .command = cmd, .log_path = log, .stop_grace_ns = 2000000000ull, .script = true};
    if (launch_start(&ls, &fr->exec[i], &e) != SC_OK) {
      snprintf(fr->note, sizeof fr->note, "not run: %.140s", e.msg);
      continue;
    }
    fr->exec_left++;
    frt_note(f, "%s: exec on replica%d: %.200s", f->c.dep->label, i, cmd);
  }
}

void frt_exec_reap(fault_rt *f, int fi, bool wait) {
  fault_run *fr = &f->fr[fi];
  for (int i = 0; fr->exec && i < f->c.n_reps; i++) {
    if (!fr->exec[i]) continue;
    int st = 0;
    bool done = launch_exited(fr->exec[i], &st);
    if (!done && !wait) continue;
    if (!done) {
      snprintf(fr->note, sizeof fr->note,
               "the command still ran at the deployment's end: "
               "stopped");
      st = 0;
    }
    launch_free(fr->exec[i]); // dismisses the watchdog (and stops the group if it lingers)
    fr->exec[i] = NULL;
    fr->exec_left--;
    if (st != 0 && fr->exec_status == 0) {
      fr->exec_status = st;
      snprintf(fr->note, sizeof fr->note, "the command on replica%d %s %d", i,
               WIFSIGNALED(st) ? "was killed by signal" : "exited with status",
               WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
      frt_note(f, "%s: exec fault: %s", f->c.dep->label, fr->note);
    }
  }
  if (wait || fr->exec_left == 0) {
    free(fr->exec);
    fr->exec = NULL;
  }
}

replica_fault fault_replica_fault(const ft_fault *ft, bool end) {
  replica_fault rf = {.kind = RFAULT_CLEAR, .rank = ft->rank};
  const fk_row *k = fk_of(ft->kind);
  if (k && k->deliver) k->deliver(ft, end, &rf);
  return rf;
}

void frt_act(fault_rt *f, int fi, bool end, uint64_t now) {
  const ft_fault *ft = &f->plan.v[fi];
  fault_run *fr = &f->fr[fi];
  if (!end) {
    fr->injected = true;
    fr->injected_ns = now;
    fr->end = ft->duration_ns ? now + ft->duration_ns : UINT64_MAX;
    frt_note(f, "%s: fault at %.3f s: %s%s%s: %s", f->c.dep->label, (double)now / 1e9,
             scenario_fault_kind_name(ft->kind), ft->target[0] ? " " : "", ft->target, ft->detail);
    const fk_row *k = fk_of(ft->kind);
    if (k->act) { // it does what it does itself, once: no end
      k->act(f, fi, now);
      fr->end = UINT64_MAX;
      return;
    }
  } else {
    fr->ended = true;
    fr->ended_ns = now;
  }
  replica_fault rf = fault_replica_fault(ft, end);
  bool rearm = !end && (fk_of(ft->kind)->symptoms & FK_STRAGGLER);
  if (ft->replica >= 0) {
    if (rearm) frt_straggler_rearm(f, ft->replica);
    inject_one(f, fi, ft->replica, &rf);
  } else {
    for (int i = 0; i < f->c.n_reps; i++) {
      if (rearm) frt_straggler_rearm(f, i);
      inject_one(f, fi, i, &rf);
    }
  }
}
