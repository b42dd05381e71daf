// Flags -> a served deployment (see deploy.h). The flags are written as a one-deployment
// scenario and go through scenario_parse and scenario_engine_config, the path every `shardcheck
// run` takes, so serve and run cannot disagree on a layout's engine config or KV capacity.
#include "server/deploy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "scenarios/deployment.h"
#include "scenarios/scenario.h"
#include "scenarios/workload.h"

// What the engine config points into, kept until serve_deploy_free.
typedef struct deploy_keep {
  scenario *s;
  int *sim_lens; // (SERVE_SIM_LENS)
} deploy_keep;

// Appends s to the YAML text as a double-quoted scalar.
static size_t quoted(char *out, size_t cap, const char *s) {
  size_t n = 0;
  if (n < cap) out[n++] = '"';
  for (; *s && n + 3 < cap; s++) {
    if (*s == '"' || *s == '\\') out[n++] = '\\';
    out[n++] = *s;
  }
  if (n < cap) out[n++] = '"';
  if (n < cap) out[n] = 0;
  return n;
}

// The answers' lengths of --sim-output-len: SERVE_SIM_LENS draws of the workload the spec
// writes (its output lengths, or a dataset's), made through the scenario language as a run's
// workload is. *lens NULL with SC_OK: "none".
static sc_status sim_lens(const char *spec, const char *model, const char *hw, int tp, int pp,
                          int **lens, sc_error *err) {
  *lens = NULL;
  if (!strcmp(spec, "none")) return SC_OK;
  char wl[2300];
  if (!strncmp(spec, "dataset:", 8)) {
    char q[2100];
    quoted(q, sizeof q, spec + 8);
    snprintf(wl, sizeof wl, "{dataset: %s, ", q);
  } else {
    snprintf(wl, sizeof wl, "{prompts: [{input: 1, output: %.2000s}], ", spec);
  }
  char text[8192];
  snprintf(text, sizeof text,
           "name: serve\nmode: sim\nmodel: %s\nhardware: %s\ndeployments: [{tp: %d, pp: %d}]\n"
           "workload: %sphases: [{fixed: {requests: 1, concurrency: 1}}]}\n",
           model, hw, tp, pp, wl);
  scenario *s = NULL;
  workload *w = NULL;
  sc_error e = {{0}};
  sc_status st = scenario_parse(text, strlen(text), "--sim-output-len", ".", &s, &e);
  if (st == SC_OK) st = workload_new(s, 0, &w, &e);
  int *v = st == SC_OK ? malloc(SERVE_SIM_LENS * sizeof *v) : NULL;
  if (st == SC_OK && !v) st = sc_fail(&e, SC_OOM, "out of memory");
  for (int i = 0; v && i < SERVE_SIM_LENS; i++) {
    wl_request r;
    workload_request(w, (uint64_t)i, &r);
    v[i] = r.max_tokens;
  }
  workload_free(w);
  scenario_free(s);
  if (st != SC_OK)
    return sc_fail(err, st,
                   "--sim-output-len %.200s: %s (a length, {uniform: [A, B]}, "
                   "{normal: {mean, stddev}}, {lognormal: {median, sigma}}, dataset:FILE.jsonl "
                   "or none)",
                   spec, e.msg);
  *lens = v;
  return SC_OK;
}

sc_status serve_deploy_config(const serve_deploy *d, server_config *c, void **keep, sc_error *err) {
  *keep = NULL;
  if (!d->sim && d->sim_output_len)
    return sc_fail(err, SC_INVALID,
                   "--sim-output-len is a mode sim flag: a real model ends its answers itself");
  char model[2400], dtype[128] = "", profile[2200] = "", hw[2400], limits[256];
  struct stat st;
  bool dir = stat(d->model, &st) == 0 && S_ISDIR(st.st_mode);
  char q[2100];
  quoted(q, sizeof q, d->model);
  if (d->dtype && *d->dtype) {
    char qd[40];
    quoted(qd, sizeof qd, d->dtype);
    snprintf(dtype, sizeof dtype, ", dtype: %s", qd);
  }
  if (d->kv_cache_dtype && *d->kv_cache_dtype) {
    char qk[40];
    quoted(qk, sizeof qk, d->kv_cache_dtype);
    size_t n = strlen(dtype);
    snprintf(dtype + n, sizeof dtype - n, ", kv_cache_dtype: %s", qk);
  }
  snprintf(model, sizeof model, "{%s: %s%s}", dir ? "path" : "preset", q, dtype);
  if (d->profile && *d->profile) {
    char qp[2100];
    quoted(qp, sizeof qp, d->profile);
    snprintf(profile, sizeof profile, ", profile: %s", qp);
  }
  int gpus = d->tp * d->pp * d->dp;
  if (d->sim) {
    if (!d->profile || !*d->profile)
      return sc_fail(err, SC_INVALID,
                     "--mode sim needs --profile (a hardware profile name or "
                     ".yaml file, e.g. h100-sxm)");
    snprintf(hw, sizeof hw, "{gpus: %d%s}", gpus, profile);
  } else {
    char threads[32] = "";
    if (d->threads > 0) snprintf(threads, sizeof threads, ", threads: %d", d->threads);
    snprintf(hw, sizeof hw, "{backend: %s%s%s}", d->backend && *d->backend ? d->backend : "cpu",
             profile, threads);
  }
  double util = d->gpu_memory_utilization > 0 ? d->gpu_memory_utilization : 0.9;
  snprintf(limits, sizeof limits,
           "{max_running: %d, token_budget: %d, block_size: %d, kv_headroom: %.6f, "
           "prefix_caching: %s, reserve_full_isl: %s, num_gpu_blocks_override: %d}",
           d->max_num_seqs > 0 ? d->max_num_seqs : 256,
           d->max_num_batched_tokens > 0 ? d->max_num_batched_tokens : 8192,
           d->block_size > 0 ? d->block_size : 16, 1.0 - util,
           d->prefix_caching ? "true" : "false", d->reserve_full_isl ? "true" : "false",
           d->num_gpu_blocks);
  char text[8192];
  snprintf(text, sizeof text,
           "name: serve\nmode: %s\nmodel: %s\nhardware: %s\nlimits: %s\n"
           "deployments: [{tp: %d, pp: %d, dp: %d}]\n"
           "workload: {prompts: [{input: 1, output: 1}], phases: [{fixed: {requests: 1, "
           "concurrency: 1}}]}\n",
           d->sim ? "sim" : "real", model, hw, limits, d->tp, d->pp, d->dp);
  if (d->weights_seed) {
    // weights_seed lives in the model mapping
    char *brace = strstr(text, "}\nhardware:");
    if (brace) {
      char tail[8192];
      snprintf(tail, sizeof tail, "%s", brace);
      snprintf(brace, sizeof text - (size_t)(brace - text), ", weights_seed: %llu%s",
               (unsigned long long)d->weights_seed, tail);
    }
  }
  scenario *s = NULL;
  sc_status rc = scenario_parse(text, strlen(text), "serve flags", ".", &s, err);
  if (rc != SC_OK) return rc;
  sc_dtype w = s->mp.weight_dtype;
  if (!d->sim && (w == SC_I4 || w == SC_FP8 || s->model.kv_cache_dtype[0])) {
    bool kv = w != SC_I4 && w != SC_FP8;
    scenario_free(s);
    return sc_fail(err, SC_INVALID,
                   "%s %s: the real backends hold weights as f32 or int8 and the KV cache in the "
                   "activations' dtype; use --mode sim for it",
                   kv ? "--kv-cache-dtype" : "--dtype", kv ? d->kv_cache_dtype : sc_dtype_name(w));
  }
  const scn_deployment *dep = &s->deployments[0];
  engine_config ec;
  rc = scenario_engine_config(s, dep, &s->model.config, s->mp.weight_dtype, sc_clock_monotonic(),
                              &ec, err);
  if (rc != SC_OK) {
    scenario_free(s);
    return rc;
  }
  int ctx = s->model.config.max_seq_len;
  if (d->max_model_len > ctx) {
    int m = d->max_model_len;
    scenario_free(s);
    return sc_fail(err, SC_INVALID, "--max-model-len %d is longer than the model's context (%d)", m,
                   ctx);
  }
  deploy_keep *k = calloc(1, sizeof *k);
  if (!k) {
    scenario_free(s);
    return sc_fail(err, SC_OOM, "out of memory");
  }
  k->s = s;
  if (d->sim) {
    rc = sim_lens(d->sim_output_len ? d->sim_output_len : SERVE_SIM_OUTPUT_LEN, model, hw, d->tp,
                  d->pp, &k->sim_lens, err);
    if (rc != SC_OK) {
      serve_deploy_free(k);
      return rc;
    }
  }
  c->sim_lens = k->sim_lens;
  c->n_sim_lens = k->sim_lens ? SERVE_SIM_LENS : 0;
  c->engine = ec;
  c->dp = d->dp;
  c->replicas = (replica_options){.kind = d->sim       ? REPLICA_SIM
                                          : d->process ? REPLICA_PROCESS
                                                       : REPLICA_LOCAL};
  c->max_model_len = d->max_model_len > 0 ? d->max_model_len : ctx;
  c->synthetic_text = d->sim;
  c->layout = dep->label; // lives as long as *keep
  c->policy = s->router.policy;
  *keep = k;
  return SC_OK;
}

void serve_deploy_free(void *keep) {
  deploy_keep *k = keep;
  if (!k) return;
  scenario_free(k->s);
  free(k->sim_lens);
  free(k);
}
