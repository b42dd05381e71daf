// The scenario language (see scenario.h; docs/scenarios.md is the reference for every key):
// YAML text -> a validated `scenario`. libfyaml builds the tree; this file reads the whole
// document: the root's keys, the command-line overrides --mode/--profile/--record (applied
// before the checks, scenario_load_with), the defaults, the planner's parameters, the order
// in which the sections are read and the checks across them. Each section is a file of its
// own behind scenario_impl.h (deploy, workload, faults, slo, target), every mapping read
// through config/yaml_map.h's views (so types, unknown keys and messages match the presets
// and profiles). Both modes are checked (real: the CPU or CUDA backend; sim: simulated GPUs
// of a hardware profile). The resolved profile (hardware.link applied) and the planner's
// parameters are left in the scenario for the runner and the simulator.
//
// Left to others: turning the workload into requests and reading the dataset's lines
// (scenarios/workload.c), running anything (runner/runner.c), injecting faults (faults/),
// computing SLO metrics (reports/metrics.c). Nothing here prints or exits.
#include "scenarios/scenario.h"

#include <dirent.h>
#include <libfyaml.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config/hardware.h"
#include "config/presets.h"
#include "config/yaml_map.h"
#include "engine/memplan.h"
#include "engine/shard.h"
#include "scenarios/scenario_impl.h"

#define SCN_MAX_TEXT    ((size_t)16 << 20) // largest scenario file read, bytes
#define SCN_MAX_GPUS    1024               // largest GPU count of a scaling item
#define SCN_MAX_RETRIES 100                // router.max_retries at most
#define SCN_STR_(x)     #x
#define SCN_STR(x)      SCN_STR_(x) // a numeric constant as a string literal, for messages

// --- paths

// dst = p when absolute or dir is "" or "."; else DIR/p. False when it does not fit.
bool scn_resolve_path(const scn_ctx *c, const char *p, char *dst, size_t cap) {
  int n;
  if (p[0] == '/' || !c->dir[0] || !strcmp(c->dir, "."))
    n = snprintf(dst, cap, "%s", p);
  else
    n = snprintf(dst, cap, "%s/%s", c->dir, p);
  return n >= 0 && (size_t)n < cap;
}

bool scn_is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

// --- model: dtypes and loading

bool scn_parse_dtype(const char *text, void *dst) {
  sc_dtype t;
  if (sc_dtype_parse(text, &t) != SC_OK) return false;
  snprintf(dst, 8, "%s", sc_dtype_name(t));
  return true;
}

// model.kv_cache_dtype: auto (stored as "") or fp8 (vLLM's spellings fp8_e4m3, fp8_e5m2 too).
static bool parse_kv_dtype(const char *text, void *dst) {
  if (!strcmp(text, "auto")) {
    *(char *)dst = 0;
    return true;
  }
  if (strcmp(text, "fp8") && strcmp(text, "fp8_e4m3") && strcmp(text, "fp8_e5m2")) return false;
  snprintf(dst, 8, "fp8");
  return true;
}

// True when dir holds a *.safetensors file or a model.safetensors.index.json.
static bool has_safetensors(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return false;
  bool found = false;
  struct dirent *e;
  while (!found && (e = readdir(d))) {
    size_t n = strlen(e->d_name);
    found = (n > 12 && !strcmp(e->d_name + n - 12, ".safetensors")) ||
            !strcmp(e->d_name, "model.safetensors.index.json");
  }
  closedir(d);
  return found;
}

// Loads the model `source`, the value v of key k, as `accept` allows: a directory (relative
// to the scenario) wins over a preset name. resolved gets what was loaded (a preset name, or
// a path); has_weights (may be NULL) whether a directory holds safetensors. Errors name v.
sc_status scn_load_model(scn_ctx *c, struct fy_node *v, struct fy_node *k, const char *source,
                         int accept, char *resolved, size_t cap, model_config *out,
                         bool *has_weights) {
  const char *key = yaml_map_key_text(k);
  if (has_weights) *has_weights = false;
  if (!scn_resolve_path(c, source, resolved, cap))
    return yaml_map_fail(&c->doc, v, k, "key '%s': path too long", key);
  bool yaml = yaml_map_is_path(source);
  sc_error e = {{0}};
  sc_status st;
  if (!yaml && (accept & SRC_DIR) && scn_is_dir(resolved)) {
    bool any = false;
    st = model_config_resolve(resolved, out, &any, &e);
    if (st == SC_OK && has_weights) *has_weights = has_safetensors(resolved);
  } else if (yaml && (accept & SRC_PRESET)) {
    st = model_preset_load(resolved, out, &e);
  } else if (!strchr(source, '/') && (accept & SRC_PRESET)) {
    snprintf(resolved, cap, "%s", source);
    st = model_preset_load(source, out, &e);
  } else if (accept == SRC_PRESET) {
    return yaml_map_fail(&c->doc, v, k,
                         "key '%s': expected a preset name or a preset .yaml file, got '%s' "
                         "(a model directory goes under 'path')",
                         key, source);
  } else {
    return yaml_map_fail(&c->doc, v, k,
                         "key '%s': expected a model directory holding config.json, got "
                         "'%s' (%s: no such directory)",
                         key, source, resolved);
  }
  if (st != SC_OK) return yaml_map_fail(&c->doc, v, k, "key '%s': %s", key, e.msg);
  return SC_OK;
}

// --- model

sc_status scn_parse_model(scn_ctx *c, struct fy_node *v, struct fy_node *k) {
  scn_model *mo = &c->s->model;
  char preset[1024] = "", path[1024] = "";
  struct fy_node *sv = v, *sk = k; // the source's value and key
  bool is_path = false;
  if (v && fy_node_get_type(v) == FYNT_SCALAR && !fy_node_is_null(v)) { // `model: NAME`
    yaml_map_field f = F_STR("model", preset);
    SC_TRY(yaml_map_read_scalar(&c->doc, k, v, &f));
  } else {
    static const char *const none[] = {NULL};
    const yaml_map_field f[] = {
        F_STR("preset", preset),
        F_STR("path", path),
        F_CUSTOM("dtype", mo->dtype, scn_parse_dtype, DTYPE_EXPECT),
        F_CUSTOM("kv_cache_dtype", mo->kv_cache_dtype, parse_kv_dtype, "auto or fp8"),
        F_CUSTOM("weights_seed", &mo->weights_seed, yaml_map_parse_u64, "a non-negative integer"),
    };
    yaml_map_view m;
    SC_TRY(yaml_map_read_view(&c->doc, v, "model", k, f, COUNT(f), none, 0, &m));
    if (yaml_map_has(&m, "preset") && yaml_map_has(&m, "path"))
      return yaml_map_fail(&c->doc, yaml_map_key(&m, "path"), NULL,
                           "key 'path': expected exactly one of 'preset' or 'path', got both");
    if (!yaml_map_has(&m, "preset") && !yaml_map_has(&m, "path"))
      return yaml_map_fail(&c->doc, v, k,
                           "key 'model': expected exactly one of 'preset' (a preset name "
                           "or .yaml file) or 'path' (a model directory), got neither");
    is_path = yaml_map_has(&m, "path");
    sv = yaml_map_val(&m, is_path ? "path" : "preset");
    sk = yaml_map_key(&m, is_path ? "path" : "preset");
  }
  const char *src = is_path ? path : preset;
  if (!src[0])
    return yaml_map_expect_at(&c->doc, sv, sk, yaml_map_key_text(sk), "a non-empty name or path");
  snprintf(mo->source, sizeof mo->source, "%s", src);
  return scn_load_model(c, sv, sk, src, is_path ? SRC_DIR : SRC_PRESET, mo->resolved,
                        sizeof mo->resolved, &mo->config, &mo->has_weights);
}

// --- hardware

// Loads the scenario's hardware profile into s->hw and sets have_hw: the --profile override
// when there is one (a name, or a .yaml path as given: relative to the working directory),
// else `profile` from the file (value pv of key k; a .yaml path is resolved against the
// scenario's directory). The override's errors name "--profile", the file's its position.
static sc_status load_profile(scn_ctx *c, const char *profile, struct fy_node *pv,
                              struct fy_node *k) {
  scn_hardware *h = &c->s->hardware;
  sc_error e = {{0}};
  if (c->ov && c->ov->profile) {
    snprintf(h->profile, sizeof h->profile, "%s", c->ov->profile); // length checked on entry
    if (hw_profile_load(h->profile, &c->s->hw, &e) != SC_OK)
      return sc_fail(c->doc.err, SC_INVALID, "--profile: %s", e.msg);
  } else {
    if (!yaml_map_is_path(profile))
      snprintf(h->profile, sizeof h->profile, "%s", profile);
    else if (!scn_resolve_path(c, profile, h->profile, sizeof h->profile))
      return yaml_map_fail(&c->doc, pv, k, "key 'profile': path too long");
    if (hw_profile_load(h->profile, &c->s->hw, &e) != SC_OK)
      return yaml_map_fail(&c->doc, pv, k, "key 'profile': %s", e.msg);
  }
  c->s->have_hw = true;
  return SC_OK;
}

// The real-mode keys of a hardware mapping m: backend, gpus, threads, devices. *profile is
// cleared for backend cuda without a profile (memory is then not checked).
static sc_status hardware_real(scn_ctx *c, const yaml_map_view *m, const char *backend,
                               char *profile) {
  scn_hardware *h = &c->s->hardware;
  static const char *const backends[] = {"cpu", "cuda"};
  int b = 0;
  SC_TRY(yaml_map_pick_key(&c->doc, m, "backend", backend, backends, 2, &b));
  SC_TRY(yaml_map_check(&c->doc, m, "gpus", h->gpus >= 0, "an integer >= 0 (0 = no limit)"));
  SC_TRY(yaml_map_check(&c->doc, m, "threads", h->threads >= 0, "an integer >= 0 (0 = automatic)"));
  if (b == 1 && !yaml_map_has(m, "profile")) profile[0] = 0; // no default for real GPUs
  // a target's prediction: its devices are the launched servers' GPUs, not the simulation's
  if (!yaml_map_has(m, "devices") || c->predicting) return SC_OK;
  if (b != 1)
    return yaml_map_fail(&c->doc, yaml_map_key(m, "devices"), NULL,
                         "key 'devices': only with backend: cuda (the backend is %s)", backend);
  struct fy_node *dk = yaml_map_key(m, "devices");
  SC_TRY(yaml_map_int_list(&c->doc, yaml_map_val(m, "devices"), dk, "a list of CUDA device indices",
                           0, COUNT(h->devices), h->devices, &h->n_devices, NULL));
  for (int i = 0; i < h->n_devices; i++)
    for (int j = 0; j < i; j++)
      if (h->devices[i] == h->devices[j])
        return yaml_map_fail(&c->doc, yaml_map_val(m, "devices"), dk,
                             "key 'devices': device %d is listed twice", h->devices[i]);
  if (!yaml_map_has(m, "gpus")) h->gpus = h->n_devices;
  return yaml_map_check(&c->doc, m, "gpus", h->gpus <= h->n_devices,
                        "an integer no larger than the number of devices listed");
}

// hardware (value v of key k; NULL when absent) in the scenario's mode. root is the document's
// root mapping, where a missing `hardware` is reported.
sc_status scn_parse_hardware(scn_ctx *c, struct fy_node *v, struct fy_node *k,
                             struct fy_node *root) {
  scenario *s = c->s;
  scn_hardware *h = &s->hardware;
  const bool sim = s->mode == SCN_MODE_SIM;
  const bool sim_file = sim && !c->switched; // the file itself is a sim scenario
  const bool ov_profile = c->ov && c->ov->profile;
  char backend[16] = "cpu", profile[1024] = "cpu", link[32] = "", names[300];
  hw_profile_names_list(names, sizeof names);
  yaml_map_view m;
  memset(&m, 0, sizeof m);
  if (!v && sim_file)
    return yaml_map_fail(&c->doc, root, NULL,
                         "missing required key 'hardware' (mode: sim simulates "
                         "{profile: NAME, gpus: N}; profiles: %s, or a .yaml file)",
                         names);
  if (v) {
    static const char *const nested[] = {"devices"};
    const yaml_map_field f[] = {
        F_STR("backend", backend),     F_STR("profile", profile), F_INT("gpus", &h->gpus),
        F_INT("threads", &h->threads), F_STR("link", link),       F_INT("nodes", &h->nodes),
    };
    SC_TRY(yaml_map_read_view(&c->doc, v, "hardware", k, f, COUNT(f), nested, COUNT(nested), &m));
    for (int i = 0; i < m.n; i++) { // keys of the other mode
      const char *n = m.name[i];
      bool real_only = !strcmp(n, "backend") || !strcmp(n, "devices") || !strcmp(n, "threads");
      bool sim_only = !strcmp(n, "link") || !strcmp(n, "nodes");
      if (sim_file && real_only)
        return yaml_map_fail(&c->doc, m.key[i], NULL,
                             "key '%s': only in mode: real (mode: sim simulates "
                             "the GPUs of hardware.profile)",
                             n);
      if (!sim && sim_only)
        return yaml_map_fail(&c->doc, m.key[i], NULL, "key '%s': only in mode: sim%s", n,
                             c->mode_from_ov ? " (the mode is real: --mode real)" : "");
    }
    SC_TRY(yaml_map_check(&c->doc, &m, "profile", profile[0] != 0,
                          "a hardware profile name or .yaml path"));
    if (!sim_file) {
      SC_TRY(hardware_real(c, &m, backend, profile));
    } else {
      if (!yaml_map_has(&m, "profile") && !ov_profile)
        return yaml_map_fail(&c->doc, v, k,
                             "missing required key 'profile' (mode: sim simulates the GPUs "
                             "of a hardware profile: %s, or a .yaml file)",
                             names);
      SC_TRY(yaml_map_need(&c->doc, &m, "gpus",
                           "mode: sim: how many GPUs are simulated, an integer >= 1"));
      SC_TRY(yaml_map_check(&c->doc, &m, "gpus", h->gpus >= 1, "an integer >= 1"));
      SC_TRY(yaml_map_check(&c->doc, &m, "nodes", h->nodes >= 0,
                            "an integer >= 0 (0 = as many as needed)"));
      SC_TRY(yaml_map_check(&c->doc, &m, "link", link[0] != 0, "a link name"));
    }
  }
  if (c->switched) { // a real scenario simulated (--mode sim): its devices are the profile's
    h->threads = 0;
    h->n_devices = 0;
    memset(h->devices, 0, sizeof h->devices);
    if (!profile[0] && !ov_profile)
      return sc_fail(c->doc.err, SC_INVALID,
                     "--mode: sim needs a hardware profile and %s names "
                     "none (backend cuda without hardware.profile): give --profile (%s, or a "
                     ".yaml file)",
                     c->doc.file, names);
  }
  snprintf(h->backend, sizeof h->backend, "%s", sim ? "" : backend);
  if (!profile[0] && !ov_profile) { // cuda without a profile: memory is not checked
    h->profile[0] = 0;
    return SC_OK;
  }
  SC_TRY(load_profile(c, profile, yaml_map_val(&m, "profile"), k));
  if (link[0]) {
    sim_link l;
    if (!sim_link_lookup(link, &l)) {
      char links[256];
      sim_link_names(links, sizeof links);
      return yaml_map_fail(&c->doc, yaml_map_val(&m, "link"), yaml_map_key(&m, "link"),
                           "key 'link': unknown link '%s'; known links: %s", link, links);
    }
    sc_error e = {{0}};
    if (hw_profile_set_link(&s->hw, link, &e) != SC_OK)
      return yaml_map_fail(&c->doc, yaml_map_val(&m, "link"), yaml_map_key(&m, "link"),
                           "key 'link': %s", e.msg);
    snprintf(h->link, sizeof h->link, "%s", link);
  }
  if (sim && h->nodes > 0 && (long long)h->gpus > (long long)h->nodes * s->hw.gpus_per_node) {
    char e[200];
    snprintf(e, sizeof e,
             "at most nodes x gpus_per_node = %d x %d = %lld (%d nodes of %d %s "
             "GPUs)",
             h->nodes, s->hw.gpus_per_node, (long long)h->nodes * s->hw.gpus_per_node, h->nodes,
             s->hw.gpus_per_node, s->hw.name);
    return yaml_map_expect_at(&c->doc, yaml_map_val(&m, "gpus"), yaml_map_key(&m, "gpus"), "gpus",
                              e);
  }
  return SC_OK;
}

// --- limits and router

sc_status scn_parse_limits(scn_ctx *c, struct fy_node *v, struct fy_node *k) {
  scn_limits *l = &c->s->limits;
  static const char *const none[] = {NULL};
  const yaml_map_field f[] = {
      F_DUR("request_timeout", &l->request_timeout_ns),
      F_INT("max_running", &l->max_running),
      F_INT("token_budget", &l->token_budget),
      F_INT("prefill_chunk", &l->prefill_chunk),
      F_BOOL("no_evict", &l->no_evict),
      F_BOOL("prefix_caching", &l->prefix_caching),
      F_BOOL("reserve_full_isl", &l->reserve_full_isl),
      F_DBL("kv_watermark", &l->kv_watermark),
      F_INT("num_gpu_blocks_override", &l->num_gpu_blocks_override),
      F_INT("block_size", &l->block_size),
      F_DBL("kv_headroom", &l->kv_headroom),
      F_DUR("collective_timeout", &l->collective_timeout_ns),
  };
  yaml_map_view m;
  SC_TRY(yaml_map_read_view(&c->doc, v, "limits", k, f, COUNT(f), none, 0, &m));
  SC_TRY(yaml_map_check(&c->doc, &m, "max_running", l->max_running >= 1, "an integer >= 1"));
  SC_TRY(yaml_map_check(&c->doc, &m, "token_budget", l->token_budget >= 1, "an integer >= 1"));
  SC_TRY(yaml_map_check(&c->doc, &m, "prefill_chunk", l->prefill_chunk >= 0,
                        "an integer >= 0 (0 = token_budget / 4)"));
  SC_TRY(yaml_map_check(&c->doc, &m, "prefill_chunk", l->prefill_chunk <= l->token_budget,
                        "an integer no larger than token_budget"));
  SC_TRY(yaml_map_check(&c->doc, &m, "block_size", l->block_size >= 1, "an integer >= 1"));
  SC_TRY(yaml_map_check(&c->doc, &m, "kv_headroom", l->kv_headroom >= 0 && l->kv_headroom <= 0.9,
                        "a fraction in [0, 0.9]"));
  SC_TRY(yaml_map_check(&c->doc, &m, "kv_watermark", l->kv_watermark >= 0 && l->kv_watermark <= 0.5,
                        "a fraction in [0, 0.5] (vLLM keeps 0.01)"));
  SC_TRY(yaml_map_check(&c->doc, &m, "num_gpu_blocks_override", l->num_gpu_blocks_override >= 0,
                        "an integer >= 0 (0 = the planner's)"));
  SC_TRY(yaml_map_check(&c->doc, &m, "collective_timeout", l->collective_timeout_ns > 0,
                        "a duration > 0 (a collective always has a deadline)"));
  return SC_OK;
}

// Sim mode: the scheduler knobs a profile's engine block sets (docs/calibration.md) replace the
// scenario's limits, since they describe the engine that profile models.
void scn_apply_engine_knobs(scn_limits *l, const sim_engine *e) {
  if (e->max_running > 0) l->max_running = e->max_running;
  if (e->token_budget > 0) l->token_budget = e->token_budget;
  if (e->block_size > 0) l->block_size = e->block_size;
  if (e->chunked_prefill < 0) l->prefill_chunk = l->token_budget;
  if (l->prefill_chunk > l->token_budget) l->prefill_chunk = l->token_budget;
  if (e->no_evict) l->no_evict = e->no_evict > 0;
  if (e->prefix_caching) l->prefix_caching = e->prefix_caching > 0;
  if (e->reserve_full_isl) l->reserve_full_isl = e->reserve_full_isl > 0;
  if (e->has_kv_watermark) l->kv_watermark = e->kv_watermark;
  if (e->num_gpu_blocks > 0) l->num_gpu_blocks_override = e->num_gpu_blocks;
}

sc_status scn_parse_router(scn_ctx *c, struct fy_node *v, struct fy_node *k) {
  static const char *const none[] = {NULL};
  static const char *const policies[] = {"least-outstanding", "round-robin"};
  static const char *const isolations[] = {"process", "thread"};
  char policy[32] = "least-outstanding", isolation[32] = "";
  scn_router *r = &c->s->router;
  const yaml_map_field f[] = {F_STR("policy", policy),
                              F_STR("isolation", isolation),
                              F_DUR("detect_timeout", &r->detect_timeout_ns),
                              F_INT("max_retries", &r->max_retries),
                              F_DUR("backoff", &r->backoff_ns),
                              F_BOOL("resume", &r->resume),
                              F_BOOL("restart", &r->restart)};
  yaml_map_view m;
  SC_TRY(yaml_map_read_view(&c->doc, v, "router", k, f, COUNT(f), none, 0, &m));
  int p = 0;
  SC_TRY(yaml_map_pick_key(&c->doc, &m, "policy", policy, policies, 2, &p));
  r->policy = p ? SCN_ROUTER_ROUND_ROBIN : SCN_ROUTER_LEAST_OUTSTANDING;
  if (yaml_map_val(&m, "isolation")) {
    int i = 0;
    SC_TRY(yaml_map_pick_key(&c->doc, &m, "isolation", isolation, isolations, 2, &i));
    r->isolation = i ? SCN_ISOLATION_THREAD : SCN_ISOLATION_PROCESS;
  }
  SC_TRY(yaml_map_check(&c->doc, &m, "detect_timeout", r->detect_timeout_ns > 0,
                        "a duration > 0 (a lost replica must be noticed)"));
  SC_TRY(yaml_map_check(&c->doc, &m, "max_retries",
                        r->max_retries >= 0 && r->max_retries <= SCN_MAX_RETRIES,
                        "an integer in [0, " SCN_STR(SCN_MAX_RETRIES) "]"));
  return SC_OK;
}

// --- deployments

// "tp2", "dp4", "tp2-pp2", "tp2-dp2", "pp2-dp2"; "tp1" for one GPU.
static void deployment_label(int tp, int pp, int dp, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = 0;
  const int v[3] = {tp, pp, dp};
  static const char *const names[3] = {"tp", "pp", "dp"};
  for (int i = 0; i < 3 && len < cap; i++)
    if (v[i] != 1)
      len += (size_t)snprintf(buf + len, cap - len, "%s%s%d", len ? "-" : "", names[i], v[i]);
  if (!len) snprintf(buf, cap, "tp1");
}

// Appends (tp, pp, dp) declared at node unless the same layout is already there.
sc_status scn_add_deployment(scn_ctx *c, struct fy_node *at, int tp, int pp, int dp) {
  scenario *s = c->s;
  for (int i = 0; i < s->n_deployments; i++) {
    const scn_deployment *d = &s->deployments[i];
    if (d->tp == tp && d->pp == pp && d->dp == dp) return SC_OK;
  }
  if (s->n_deployments == SCN_MAX_DEPLOYMENTS)
    return yaml_map_fail(&c->doc, at, NULL,
                         "key 'deployments': expected at most %d deployments (after "
                         "expanding scaling items), got more",
                         SCN_MAX_DEPLOYMENTS);
  scn_deployment *d = &s->deployments[s->n_deployments++];
  *d = (scn_deployment){.tp = tp, .pp = pp, .dp = dp};
  deployment_label(tp, pp, dp, d->label, sizeof d->label);
  yaml_map_pos(at, &d->line, &d->col);
  return SC_OK;
}

// Appends the planner's recommendation for up to g GPUs (declared at item); an error at the
// GPU count `at` (of key k) when none fits.
static sc_status auto_layout(scn_ctx *c, struct fy_node *item, struct fy_node *at,
                             struct fy_node *k, int g) {
  const scenario *s = c->s;
  const model_config *m = &s->model.config;
  if (!s->have_hw)
    return yaml_map_fail(&c->doc, at, k, "pattern auto needs hardware.profile to plan memory");
  int n = memplan_enumerate(m, &s->hw, &s->mp, g, NULL, 0);
  memplan_layout *l = calloc((size_t)n, sizeof *l);
  if (!l)
    return sc_fail(c->doc.err, SC_OOM, "%s: out of memory planning %d layouts", c->doc.file, n);
  memplan_enumerate(m, &s->hw, &s->mp, g, l, n);
  int best = memplan_recommend(l, n, g, s->hw.gpus_per_node);
  sc_status st = SC_OK;
  if (best < 0)
    st = yaml_map_fail(&c->doc, at, k,
                       "pattern auto: no layout of up to %d %s GPU%s fits %s at %s with a "
                       "context of %d tokens",
                       g, s->hw.name, g > 1 ? "s" : "", m->name, sc_dtype_name(s->mp.weight_dtype),
                       m->max_seq_len);
  else
    st = scn_add_deployment(c, item, l[best].tp, l[best].pp, l[best].dp);
  free(l);
  return st;
}

static sc_status parse_scaling(scn_ctx *c, struct fy_node *v, struct fy_node *k,
                               struct fy_node *item) {
  static const char *const nested[] = {"gpus", "pattern"};
  yaml_map_view m;
  SC_TRY(yaml_map_read_view(&c->doc, v, "scaling", k, NULL, 0, nested, COUNT(nested), &m));
  SC_TRY(yaml_map_need(&c->doc, &m, "gpus", "a list of GPU counts, e.g. [1, 2, 4]"));
  SC_TRY(yaml_map_need(&c->doc, &m, "pattern", "dp, tp, pp, auto or a list of them"));
  int gpus[32], ng = 0;
  struct fy_node *gk = yaml_map_key(&m, "gpus"), *gitems[32];
  SC_TRY(yaml_map_int_list(&c->doc, yaml_map_val(&m, "gpus"), gk,
                           "a list of GPU counts, e.g. [1, 2, 4]", 1, COUNT(gpus), gpus, &ng,
                           gitems));
  for (int i = 0; i < ng; i++)
    if (gpus[i] > SCN_MAX_GPUS)
      return yaml_map_expect_at(&c->doc, gitems[i], gk, "gpus",
                                "at most " SCN_STR(SCN_MAX_GPUS) " GPUs");
  static const char *const patterns[] = {"dp", "tp", "pp", "auto"};
  const char *pexpect = "dp, tp, pp, auto or a list of them, e.g. [dp, tp]";
  struct fy_node *pv = yaml_map_val(&m, "pattern"), *pk = yaml_map_key(&m, "pattern");
  int pat[8], np = 0;
  struct fy_node *pitems[8];
  if (pv && fy_node_get_type(pv) == FYNT_SEQUENCE) {
    SC_TRY(yaml_map_enum_list(&c->doc, pv, pk, pexpect, patterns, 4, 8, pat, &np, pitems));
  } else {
    char text[32] = "";
    yaml_map_field f = F_STR("pattern", text);
    SC_TRY(yaml_map_read_scalar(&c->doc, pk, pv, &f));
    SC_TRY(yaml_map_pick(&c->doc, pv, pk, text, patterns, 4, &pat[0]));
    np = 1;
  }
  for (int p = 0; p < np; p++)
    for (int i = 0; i < ng; i++) {
      int g = gpus[i];
      switch (pat[p]) {
      case 0: SC_TRY(scn_add_deployment(c, item, 1, 1, g)); break;
      case 1: SC_TRY(scn_add_deployment(c, item, g, 1, 1)); break;
      case 2: SC_TRY(scn_add_deployment(c, item, 1, g, 1)); break;
      default: SC_TRY(auto_layout(c, item, gitems[i], gk, g)); break;
      }
    }
  return SC_OK;
}

sc_status scn_parse_deployment_item(scn_ctx *c, struct fy_node *item, struct fy_node *k) {
  static const char *const nested[] = {"scaling"};
  int tp = 1, pp = 1, dp = 1;
  const yaml_map_field f[] = {F_INT("tp", &tp), F_INT("pp", &pp), F_INT("dp", &dp)};
  yaml_map_view m;
  SC_TRY(
      yaml_map_read_view(&c->doc, item, "deployments", k, f, COUNT(f), nested, COUNT(nested), &m));
  if (yaml_map_has(&m, "scaling")) {
    if (yaml_map_has(&m, "tp") || yaml_map_has(&m, "pp") || yaml_map_has(&m, "dp"))
      return yaml_map_fail(&c->doc, yaml_map_key(&m, "scaling"), NULL,
                           "key 'scaling': expected either tp/pp/dp or scaling in one deployment, "
                           "got both");
    return parse_scaling(c, yaml_map_val(&m, "scaling"), yaml_map_key(&m, "scaling"), item);
  }
  SC_TRY(yaml_map_check(&c->doc, &m, "tp", tp >= 1, "an integer >= 1"));
  SC_TRY(yaml_map_check(&c->doc, &m, "pp", pp >= 1, "an integer >= 1"));
  SC_TRY(yaml_map_check(&c->doc, &m, "dp", dp >= 1, "an integer >= 1"));
  return scn_add_deployment(c, item, tp, pp, dp);
}

// The planner's check of every deployment, and the GPU limit. A real scenario simulated with
// --mode sim and no hardware.gpus gets as many GPUs as its largest deployment.
static sc_status check_deployments(scn_ctx *c) {
  scenario *s = c->s;
  if (c->switched && s->hardware.gpus == 0)
    for (int i = 0; i < s->n_deployments; i++) {
      const scn_deployment *d = &s->deployments[i];
      if (d->tp * d->pp * d->dp > s->hardware.gpus) s->hardware.gpus = d->tp * d->pp * d->dp;
    }
  for (int i = 0; i < s->n_deployments; i++) {
    const scn_deployment *d = &s->deployments[i];
    char w[300];
    if (d->line)
      snprintf(w, sizeof w, "%s:%d:%d", c->doc.file, d->line, d->col);
    else
      snprintf(w, sizeof w, "%s", c->doc.file);
    int n = d->tp * d->pp * d->dp;
    if (s->hardware.gpus > 0 && n > s->hardware.gpus)
      return sc_fail(c->doc.err, SC_INVALID,
                     "%s: deployment '%s' (tp=%d pp=%d dp=%d) needs %d GPUs; hardware.gpus is %d",
                     w, d->label, d->tp, d->pp, d->dp, n, s->hardware.gpus);
    memplan_layout l = {.valid = true, .fits = true};
    if (s->have_hw) {
      memplan_eval(&s->model.config, &s->hw, &s->mp, d->tp, d->pp, d->dp, &l);
    } else { // no profile (backend cuda): the layout alone, memory is not known
      sc_error e = {{0}};
      l.valid = l.fits = shard_layout_check(&s->model.config, d->tp, d->pp, &e) == SC_OK;
      snprintf(l.why, sizeof l.why, "%.*s", (int)sizeof l.why - 1, e.msg);
    }
    if (!l.valid || !l.fits)
      return sc_fail(c->doc.err, SC_INVALID,
                     "%s: deployment '%s' (tp=%d pp=%d dp=%d) refused by the planner%s%s: %s", w,
                     d->label, d->tp, d->pp, d->dp, s->have_hw ? " on " : "",
                     s->have_hw ? s->hw.name : "", l.why);
    int node = s->hw.gpus_per_node;
    if (s->mode == SCN_MODE_SIM && node > 0 && d->tp > node && d->tp % node)
      return sc_fail(c->doc.err, SC_INVALID,
                     "%s: deployment '%s' (tp=%d pp=%d dp=%d): a TP group larger than a node "
                     "must span whole nodes (tp a multiple of %d, the GPUs per node of %s): "
                     "each node then holds ranks of one group only and every all-reduce "
                     "crosses the inter-node link in equal parts",
                     w, d->label, d->tp, d->pp, d->dp, node, s->hw.name);
  }
  return SC_OK;
}

sc_status scn_parse_deployments(scn_ctx *c, struct fy_node *v, struct fy_node *k) {
  if (v && fy_node_get_type(v) == FYNT_MAPPING) { // the form `deployments: {scaling: ...}`
    static const char *const nested[] = {"scaling"};
    yaml_map_view m;
    SC_TRY(yaml_map_read_view(&c->doc, v, "deployments", k, NULL, 0, nested, COUNT(nested), &m));
    SC_TRY(yaml_map_need(&c->doc, &m, "scaling", "{gpus: [...], pattern: ...}"));
    SC_TRY(parse_scaling(c, yaml_map_val(&m, "scaling"), yaml_map_key(&m, "scaling"), v));
  } else {
    struct fy_node *items[SCN_MAX_DEPLOYMENTS];
    int n = 0;
    SC_TRY(yaml_map_seq(&c->doc, v, k,
                        "a list of deployments ({tp, pp, dp} or {scaling: {gpus, pattern}}) or "
                        "{scaling: {gpus, pattern}}",
                        SCN_MAX_DEPLOYMENTS, items, &n));
    for (int i = 0; i < n; i++) SC_TRY(scn_parse_deployment_item(c, items[i], k));
  }
  return check_deployments(c);
}

// --- public API: isolation

bool scenario_isolates_processes(const scenario *s) {
  if (s->router.isolation == SCN_ISOLATION_DEFAULT) return s->n_faults > 0;
  return s->router.isolation == SCN_ISOLATION_PROCESS;
}
// --- the whole document

void scn_set_defaults(scenario *s) {
  s->mode = SCN_MODE_REAL;
  snprintf(s->hardware.backend, sizeof s->hardware.backend, "cpu");
  snprintf(s->hardware.profile, sizeof s->hardware.profile, "cpu");
  s->workload.temperature = 0;
  s->workload.top_p = 1;
  s->limits = (scn_limits){
      .request_timeout_ns = 60ull * 1000000000ull,
      .max_running = 256,
      .token_budget = 8192,
      .prefill_chunk = 0,
      .block_size = 16,
      .kv_headroom = 0.10,
      .collective_timeout_ns = 30ull * 1000000000ull,
  };
  s->router.policy = SCN_ROUTER_LEAST_OUTSTANDING;
  s->router.detect_timeout_ns = 2000000000ull;
  s->router.max_retries = 3;
  s->router.backoff_ns = 50000000ull;
  s->router.resume = true;
  s->router.restart = true;
  s->gate.tolerance = -1;
  s->gate.alpha = -1;
}

static sc_status parse_root(scn_ctx *c, struct fy_node *root) {
  scenario *s = c->s;
  char mode[16] = "real", record[16] = "tokens";
  const yaml_map_field f[] = {
      F_STR("name", s->name),
      F_STR("description", s->description),
      F_STR("mode", mode),
      F_STR("record", record),
      F_CUSTOM("seed", &s->seed, yaml_map_parse_u64, "a non-negative integer"),
  };
  static const char *const nested[] = {"model", "hardware", "deployments", "workload", "faults",
                                       "slo",   "limits",   "router",      "gate",     "target"};
  yaml_map_view m;
  SC_TRY(yaml_map_read_view(&c->doc, root, NULL, NULL, f, COUNT(f), nested, COUNT(nested), &m));
  SC_TRY(yaml_map_need(&c->doc, &m, "name", "a string naming the scenario"));
  const bool target = yaml_map_has(&m, "target");
  if (!target) {
    SC_TRY(yaml_map_need(&c->doc, &m, "model", "{preset: NAME} or {path: DIR}"));
    SC_TRY(yaml_map_need(&c->doc, &m, "deployments",
                         "a list of {tp, pp, dp} or {scaling: {gpus, pattern}}"));
  }
  SC_TRY(yaml_map_need(&c->doc, &m, "workload", "{prompts or dataset, phases}"));
  SC_TRY(yaml_map_check(&c->doc, &m, "name", s->name[0] != 0, "a non-empty name"));
  static const char *const modes[] = {"real", "sim"};
  int md = 0;
  SC_TRY(yaml_map_pick_key(&c->doc, &m, "mode", mode, modes, 2, &md));
  if (c->ov && c->ov->mode) { // checked to be real or sim on entry
    int o = strcmp(c->ov->mode, "sim") ? 0 : 1;
    c->switched = md == 0 && o == 1;
    c->mode_from_ov = true;
    md = o;
  }
  s->mode = md ? SCN_MODE_SIM : SCN_MODE_REAL;
  static const char *const records[] = {"tokens", "requests", "summary"};
  int rec = 0;
  SC_TRY(yaml_map_pick_key(&c->doc, &m, "record", record, records, 3, &rec));
  if (c->ov && c->ov->record) scenario_record_parse(c->ov->record, (scn_record *)&rec);
  s->record = (scn_record)rec;
  // A target scenario in mode sim predicts what the measurement will show: its `model` on its
  // `hardware.profile`, the same deployments, workload and faults, simulated (the target is
  // checked, then set aside).
  c->predicting = target && s->mode == SCN_MODE_SIM;
  if (c->predicting) {
    SC_TRY(scn_parse_target(c, yaml_map_val(&m, "target"), yaml_map_key(&m, "target")));
    memset(&s->target, 0, sizeof s->target);
    memset(&s->model, 0, sizeof s->model);
    if (!yaml_map_has(&m, "model"))
      return yaml_map_fail(&c->doc, yaml_map_key(&m, "target"), NULL,
                           "mode sim on a target scenario simulates "
                           "its model on its hardware profile: add model: {preset: NAME} (and "
                           "hardware.profile)%s",
                           c->mode_from_ov ? " (--mode sim)" : "");
    SC_TRY(yaml_map_need(&c->doc, &m, "deployments", "a list of {tp, pp, dp}"));
  }
  if (target && !c->predicting) {
    // `model` and hardware.profile are --mode sim's (a prediction); checked, not used here
    if (yaml_map_has(&m, "model"))
      SC_TRY(scn_parse_model(c, yaml_map_val(&m, "model"), yaml_map_key(&m, "model")));
    SC_TRY(scn_parse_target(c, yaml_map_val(&m, "target"), yaml_map_key(&m, "target")));
    if (yaml_map_has(&m, "hardware"))
      SC_TRY(scn_target_hardware(c, yaml_map_val(&m, "hardware"), yaml_map_key(&m, "hardware")));
    else
      s->hardware.backend[0] = s->hardware.profile[0] = 0;
  } else {
    SC_TRY(scn_parse_model(c, yaml_map_val(&m, "model"), yaml_map_key(&m, "model")));
    SC_TRY(scn_parse_hardware(c, yaml_map_val(&m, "hardware"), yaml_map_key(&m, "hardware"), root));
  }
  if (yaml_map_has(&m, "limits"))
    SC_TRY(scn_parse_limits(c, yaml_map_val(&m, "limits"), yaml_map_key(&m, "limits")));
  if (s->mode == SCN_MODE_SIM && s->have_hw) scn_apply_engine_knobs(&s->limits, &s->hw.sim.engine);
  if (yaml_map_has(&m, "router"))
    SC_TRY(scn_parse_router(c, yaml_map_val(&m, "router"), yaml_map_key(&m, "router")));
  // the planner's parameters (engine/memplan.h), as the engine will size itself: the KV cache
  // is f32 on the CPU backend (real cpu, or a simulated CPU profile: host_cores > 0), else bf16
  memplan_params *mp = &s->mp;
  *mp = memplan_defaults();
  mp->headroom = s->limits.kv_headroom;
  mp->block_size = s->limits.block_size;
  mp->max_batch_tokens = s->limits.token_budget;
  mp->max_seqs = s->limits.max_running;
  mp->weight_dtype = s->model.config.dtype;
  if (s->model.dtype[0]) sc_dtype_parse(s->model.dtype, &mp->weight_dtype);
  bool cpu = s->mode == SCN_MODE_SIM ? s->have_hw && s->hw.sim.host_cores > 0
                                     : !strcmp(s->hardware.backend, "cpu");
  mp->kv_dtype = cpu ? SC_F32 : SC_BF16;
  if (s->model.kv_cache_dtype[0] && s->mode == SCN_MODE_SIM) {
    if (cpu)
      return yaml_map_fail(
          &c->doc, yaml_map_val(&m, "model"), yaml_map_key(&m, "model"),
          "model.kv_cache_dtype fp8: the CPU profile %s models the CPU backend, whose "
          "KV cache is f32; use auto",
          s->hardware.profile);
    mp->kv_dtype = SC_FP8;
  }
  if (!target || c->predicting) {
    SC_TRY(
        scn_parse_deployments(c, yaml_map_val(&m, "deployments"), yaml_map_key(&m, "deployments")));
  } else {
    if (yaml_map_has(&m, "deployments")) {
      struct fy_node *dv = yaml_map_val(&m, "deployments"), *dk = yaml_map_key(&m, "deployments");
      struct fy_node *items[SCN_MAX_DEPLOYMENTS];
      int n = 0;
      SC_TRY(yaml_map_seq(&c->doc, dv, dk, "a list of deployments {tp, pp, dp}",
                          SCN_MAX_DEPLOYMENTS, items, &n));
      for (int i = 0; i < n; i++) SC_TRY(scn_parse_deployment_item(c, items[i], dk));
    }
    SC_TRY(scn_check_target_deployments(c, root));
  }
  SC_TRY(scn_parse_workload(c, yaml_map_val(&m, "workload"), yaml_map_key(&m, "workload")));
  if (yaml_map_has(&m, "faults"))
    SC_TRY(scn_parse_faults(c, yaml_map_val(&m, "faults"), yaml_map_key(&m, "faults")));
  for (int i = 0; i < s->n_faults; i++) SC_TRY(scn_check_fault_target(c, &s->faults[i]));
  if (s->record != SCN_RECORD_TOKENS && s->n_faults > 0) {
    const char *lvl = scenario_record_name(s->record);
    if (c->ov && c->ov->record)
      return sc_fail(c->doc.err, SC_INVALID,
                     "%s: --record %s: this scenario has faults, whose "
                     "verdicts (the request history, recovery) read token rows: use --record "
                     "tokens",
                     c->doc.file, lvl);
    return yaml_map_fail(&c->doc, yaml_map_key(&m, "record"), NULL,
                         "key 'record': %s, but the scenario has "
                         "faults, whose verdicts (the request history, recovery) read token rows: "
                         "record: tokens",
                         lvl);
  }
  if (yaml_map_has(&m, "slo"))
    SC_TRY(scn_parse_slo(c, yaml_map_val(&m, "slo"), yaml_map_key(&m, "slo")));
  if (yaml_map_has(&m, "gate"))
    SC_TRY(scn_parse_gate(c, yaml_map_val(&m, "gate"), yaml_map_key(&m, "gate")));
  return SC_OK;
}

static sc_status parse_doc_root(struct fy_node *root, void *arg, sc_error *err) {
  scn_ctx *c = arg;
  if (!root || fy_node_is_null(root))
    return sc_fail(err, SC_INVALID,
                   "%s: empty file; expected a scenario (a mapping of keys: "
                   "name, model, deployments, workload, ...)",
                   c->doc.file);
  return parse_root(c, root);
}

// Parses s->text into s, with overrides ov (may be NULL).
static sc_status parse_text(scenario *s, const char *name, const scn_overrides *ov, sc_error *err) {
  scn_ctx c = {.doc = {name, err}, .dir = s->dir, .s = s, .ov = ov};
  return yaml_map_parse(s->text, s->text_len, name, parse_doc_root, &c, err);
}

// --- public API

// scenario_parse with overrides (ov may be NULL, its values already checked).
static sc_status parse_with(const char *text, size_t len, const char *name, const char *dir,
                            const scn_overrides *ov, scenario **out, sc_error *err) {
  *out = NULL;
  if (!name) name = "<scenario>";
  scenario *s = calloc(1, sizeof *s);
  char *copy = malloc(len + 1);
  if (!s || !copy) {
    free(s);
    free(copy);
    return sc_fail(err, SC_OOM, "%s: out of memory", name);
  }
  memcpy(copy, text, len);
  copy[len] = 0;
  s->text = copy;
  s->text_len = len;
  snprintf(s->dir, sizeof s->dir, "%s", dir && *dir ? dir : ".");
  scn_set_defaults(s);
  sc_status st = parse_text(s, name, ov, err);
  if (st != SC_OK) {
    scenario_free(s);
    return st;
  }
  *out = s;
  return SC_OK;
}

sc_status scenario_parse(const char *text, size_t len, const char *name, const char *dir,
                         scenario **out, sc_error *err) {
  return parse_with(text, len, name, dir, NULL, out, err);
}

sc_status scenario_load(const char *path, scenario **out, sc_error *err) {
  return scenario_load_with(path, NULL, out, err);
}

const char *scenario_record_name(scn_record r) {
  switch (r) {
  case SCN_RECORD_TOKENS: return "tokens";
  case SCN_RECORD_REQUESTS: return "requests";
  case SCN_RECORD_SUMMARY: return "summary";
  }
  return "tokens";
}

bool scenario_record_parse(const char *text, scn_record *out) {
  for (int r = SCN_RECORD_TOKENS; r <= SCN_RECORD_SUMMARY; r++)
    if (text && !strcmp(text, scenario_record_name((scn_record)r))) {
      *out = (scn_record)r;
      return true;
    }
  return false;
}

sc_status scenario_load_with(const char *path, const scn_overrides *ov, scenario **out,
                             sc_error *err) {
  *out = NULL;
  scn_record rec;
  if (ov && ov->record && !scenario_record_parse(ov->record, &rec))
    return sc_fail(err, SC_INVALID,
                   "--record: expected tokens, requests or summary, got "
                   "'%.100s'",
                   ov->record);
  if (ov && ov->mode && strcmp(ov->mode, "real") && strcmp(ov->mode, "sim"))
    return sc_fail(err, SC_INVALID, "--mode: expected real or sim, got '%.100s'", ov->mode);
  if (ov && ov->profile && !ov->profile[0])
    return sc_fail(err, SC_INVALID,
                   "--profile: expected a hardware profile name or a .yaml path, got ''");
  if (ov && ov->profile && strlen(ov->profile) >= sizeof(((scn_hardware *)0)->profile))
    return sc_fail(err, SC_INVALID, "--profile: path too long");
  char *buf;
  size_t len;
  SC_TRY(yaml_map_slurp(path, SCN_MAX_TEXT, &buf, &len, err));
  char dir[1024];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else if (slash == dir)
    dir[1] = 0; // "/x.yaml" -> "/"
  else
    *slash = 0;
  sc_status s = parse_with(buf, len, path, dir, ov, out, err);
  free(buf);
  if (s == SC_OK) snprintf((*out)->path, sizeof(*out)->path, "%s", path);
  return s;
}

void scenario_free(scenario *s) {
  if (!s) return;
  free(s->text);
  free(s);
}
