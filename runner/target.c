// An external target's replicas (docs/targets.md): the options of one HTTP replica, its
// templates expanded (a free port, its GPU ids, the url, the launch command and environment,
// its log file beside the run's report, its readiness, metrics and admin URLs).
// Not here: expanding a template and launching a server (serving/launch.c), the replica
// itself (serving/replica_http.c), building the replicas of a deployment (runner/runner.c).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner/runner_impl.h"
#include "serving/launch.h"

// The shardcheck binary running ({shardcheck} in a launch template): the runner's worker_exe
// when set, else /proc/self/exe.
static void self_exe(const rt *r, char *out, size_t cap) {
  if (r->o->worker_exe) {
    snprintf(out, cap, "%s", r->o->worker_exe);
    return;
  }
  ssize_t n = readlink("/proc/self/exe", out, cap - 1);
  out[n > 0 ? n : 0] = 0;
}

void rn_log_dir(const rt *r, char *out, size_t cap) {
  const char *t = r->o->log_dir ? r->o->log_dir : "reports/out/run-{run}";
  size_t len = 0;
  out[0] = 0;
  while (*t && len + 1 < cap) {
    if (!strncmp(t, "{run}", 5)) {
      len += (size_t)snprintf(out + len, cap - len, "%lld", (long long)r->run_id);
      t += 5;
      if (len >= cap) len = cap - 1;
      continue;
    }
    out[len++] = *t++;
    out[len] = 0;
  }
}

sc_status rn_http_options(rt *r, const scn_deployment *d, const char *label, int i,
                          replica_http_options *o, http_strings *hs, sc_error *err) {
  const scn_target *t = &r->s->target;
  self_exe(r, hs->exe, sizeof hs->exe);
  launch_vars v = {.tp = d->tp,
                   .pp = d->pp,
                   .dp = d->dp,
                   .replica = i,
                   .gpus = hs->gpus,
                   .exe = hs->exe,
                   .model = t->model};
  hs->gpus[0] = 0;
  const scn_hardware *h = &r->s->hardware;
  int per = d->tp * d->pp;
  for (int k = 0; k < per && h->n_devices > 0; k++) {
    size_t len = strlen(hs->gpus);
    snprintf(hs->gpus + len, sizeof hs->gpus - len, "%s%d", k ? "," : "",
             h->devices[(i * per + k) % h->n_devices]);
  }
  if (t->launch[0]) SC_TRY(launch_free_port(&v.port, err));
  SC_TRY(launch_expand(t->url, &v, hs->url, sizeof hs->url, err));
  *o = (replica_http_options){.base_url = hs->url, .chat = t->api == SCN_API_CHAT,
                              .model = t->model,
                              .api_key = t->api_key_env[0] ? getenv(t->api_key_env) : NULL,
                              .extra_body = t->extra_body[0] ? t->extra_body : NULL};
  // faults: the replica watches its server (probes against detect_timeout; exits)
  SC_TRY(launch_url_at(hs->url, t->ready_path, hs->ready, sizeof hs->ready, err));
  if (r->s->n_faults > 0) {
    o->detect_timeout_ns = r->s->router.detect_timeout_ns;
    o->ready_url = hs->ready;
    o->rank_process = t->rank_process[0] ? t->rank_process : NULL;
  }
  if (t->metrics_path[0]) {
    SC_TRY(launch_url_at(hs->url, t->metrics_path, hs->metrics, sizeof hs->metrics, err));
    o->metrics_url = hs->metrics;
  }
  if (t->admin_token[0]) { // shardcheck serve: oom, corrupt and slow through its admin API
    SC_TRY(launch_url_at(hs->url, "/admin/faults", hs->admin, sizeof hs->admin, err));
    o->admin_url = hs->admin;
    o->admin_token = t->admin_token;
  }
  if (!t->launch[0]) return SC_OK;
  SC_TRY(launch_expand(t->launch, &v, hs->command, sizeof hs->command, err));
  for (int k = 0; k < t->n_env; k++) {
    char val[600];
    SC_TRY(launch_expand(t->env[k].value, &v, val, sizeof val, err));
    snprintf(hs->env[k], sizeof hs->env[k], "%s=%s", t->env[k].name, val);
    hs->envp[k] = hs->env[k];
  }
  int n_env = t->n_env;
  // a clock jump: the servers run under libfaketime, as workers do
  const char *const *fe = fault_rt_worker_env(r->fr);
  for (int k = 0; fe && fe[k] && n_env < SCN_MAX_TARGET_ENV + 8; k++) {
    snprintf(hs->env[n_env], sizeof hs->env[n_env], "%s", fe[k]);
    hs->envp[n_env] = hs->env[n_env];
    n_env++;
  }
  hs->envp[n_env] = NULL;
  char dir[1024];
  rn_log_dir(r, dir, sizeof dir);
  snprintf(hs->log, sizeof hs->log, "%s/%s-replica%d.log", dir, label, i);
  o->command = hs->command;
  o->launch_template = t->launch; // a hot swap expands it (or its own) again with these values
  o->vars = v;
  o->env = hs->envp;
  o->log_path = hs->log;
  o->ready_url = hs->ready;
  o->ready_timeout_ns = t->ready_timeout_ns;
  o->stop_grace_ns = t->stop_grace_ns;
  return SC_OK;
}
