// The scenario's deployment sections (see scenario_impl.h): model, hardware, limits, router
// and deployments, checked against the memory planner (engine/memplan.h) and, in mode sim,
// the hardware profile (its engine block's knobs replace the limits).
//
// Left to others: the whole document and the order of sections (scenarios/scenario.c); a
// deployment's engine config (scenarios/deployment.c); an external target's hardware and
// deployments (scenarios/scenario_target.c).
#include <dirent.h>
#include <errno.h>
#include <libfyaml.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/hardware.h"
#include "config/presets.h"
#include "config/yaml_map.h"
#include "engine/memplan.h"
#include "engine/shard.h"
#include "scenarios/scenario_impl.h"

#define SCN_MAX_GPUS    1024 // largest GPU count of a scaling item
#define SCN_MAX_RETRIES 100  // router.max_retries at most
#define SCN_STR_(x)     #x
#define SCN_STR(x)      SCN_STR_(x) // a numeric constant as a string literal, for messages

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

// hardware.hostfile (the value given, in m): resolved against the scenario's directory, read,
// and its slots counted into s->hardware (Open MPI's `HOST slots=N`, MPICH's `HOST:N`; a bare
// HOST is one slot; # starts a comment).
static sc_status read_hostfile(scn_ctx *c, const yaml_map_view *m, const char *given) {
  scn_hardware *h = &c->s->hardware;
  struct fy_node *hv = yaml_map_val(m, "hostfile"), *hk = yaml_map_key(m, "hostfile");
  if (!given[0]) return yaml_map_fail(&c->doc, hv, hk, "key 'hostfile': an MPI hostfile's path");
  if (!scn_resolve_path(c, given, h->hostfile, sizeof h->hostfile))
    return yaml_map_fail(&c->doc, hv, hk, "key 'hostfile': path too long");
  FILE *f = fopen(h->hostfile, "r");
  if (!f)
    return yaml_map_fail(&c->doc, hv, hk, "key 'hostfile': cannot read %s: %s", h->hostfile,
                         strerror(errno));
  char line[1024];
  int slots = 0, lineno = 0;
  sc_status s = SC_OK;
  while (s == SC_OK && fgets(line, sizeof line, f)) {
    lineno++;
    line[strcspn(line, "#\r\n")] = 0;
    char host[256];
    int off = 0;
    if (sscanf(line, " %255s%n", host, &off) != 1) continue; // blank
    int n = 1;
    const char *sl = strstr(line + off, "slots=");
    char *colon = strchr(host, ':');
    if (sl) n = atoi(sl + 6);
    else if (colon) n = atoi(colon + 1);
    if (n < 1 || n > 1 << 20)
      s = yaml_map_fail(&c->doc, hv, hk, "key 'hostfile': %s:%d: a host's slots must be an "
                        "integer >= 1", h->hostfile, lineno);
    else
      slots += n;
  }
  fclose(f);
  SC_TRY(s);
  if (slots == 0)
    return yaml_map_fail(&c->doc, hv, hk, "key 'hostfile': %s names no host", h->hostfile);
  h->hostfile_slots = slots;
  return SC_OK;
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
  char backend[16] = "cpu", profile[1024] = "cpu", link[32] = "", names[300], hostfile[1024] = "";
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
        F_STR("hostfile", hostfile),
    };
    SC_TRY(yaml_map_read_view(&c->doc, v, "hardware", k, f, COUNT(f), nested, COUNT(nested), &m));
    for (int i = 0; i < m.n; i++) { // keys of the other mode
      const char *n = m.name[i];
      bool real_only = !strcmp(n, "backend") || !strcmp(n, "devices") || !strcmp(n, "threads") ||
                       !strcmp(n, "hostfile");
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
      if (yaml_map_has(&m, "hostfile") && !c->switched) SC_TRY(read_hostfile(c, &m, hostfile));
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

// A knob's limits field (kernels/knobs.h): read with the YAML type of its C type.
#define KNOB_F_int(name, dst) F_INT(name, dst)
#define KNOB_F_bool(name, dst) F_BOOL(name, dst)
#define KNOB_F_double(name, dst) F_DBL(name, dst)

sc_status scn_parse_limits(scn_ctx *c, struct fy_node *v, struct fy_node *k) {
  scn_limits *l = &c->s->limits;
  static const char *const none[] = {NULL};
#define KNOB_FIELD(name, type, dflt, e, s, pf, pkey, ok, ex, j) KNOB_F_##type(#name, &l->name),
  const yaml_map_field f[] = {
      F_DUR("request_timeout", &l->request_timeout_ns),
      SC_KNOBS(KNOB_FIELD) // the knobs' keys
      F_DBL("kv_headroom", &l->kv_headroom),
      F_DUR("collective_timeout", &l->collective_timeout_ns),
  };
#undef KNOB_FIELD
  yaml_map_view m;
  SC_TRY(yaml_map_read_view(&c->doc, v, "limits", k, f, COUNT(f), none, 0, &m));
  // each knob's bound (the row's ok, its value v), then the checks across keys
#define KNOB_CHECK(name, type, dflt, e, s, pf, pkey, ok, ex, j)                                    \
  SC_TRY(yaml_map_check(&c->doc, &m, #name, sc_knob_ok_##name(l->name), ex));
  SC_KNOBS(KNOB_CHECK)
#undef KNOB_CHECK
  SC_TRY(yaml_map_check(&c->doc, &m, "prefill_chunk", l->prefill_chunk <= l->token_budget,
                        "an integer no larger than token_budget"));
  SC_TRY(yaml_map_check(&c->doc, &m, "kv_headroom", l->kv_headroom >= 0 && l->kv_headroom <= 0.9,
                        "a fraction in [0, 0.9]"));
  SC_TRY(yaml_map_check(&c->doc, &m, "collective_timeout", l->collective_timeout_ns > 0,
                        "a duration > 0 (a collective always has a deadline)"));
  return SC_OK;
}

// How a profile's engine block sets a knob (kernels/knobs.h, pform): an int when > 0, a flag
// when given (1 on, -1 off), a value when present; chunked_prefill off puts a whole prompt,
// up to the token budget, in one step.
#define KNOB_APPLY_SC_KNOB_P_INT(l, name, e, pkey)                                                 \
  if (e->pkey > 0) l->name = e->pkey;
#define KNOB_APPLY_SC_KNOB_P_BOOL(l, name, e, pkey)                                                \
  if (e->pkey) l->name = e->pkey > 0;
#define KNOB_APPLY_SC_KNOB_P_VALUE(l, name, e, pkey)                                               \
  if (e->has_##pkey) l->name = e->pkey;
#define KNOB_APPLY_SC_KNOB_P_CHUNK(l, name, e, pkey)                                               \
  if (e->pkey < 0) l->name = l->token_budget;

void scn_apply_engine_knobs(scn_limits *l, const sim_engine *e) {
#define KNOB_APPLY(name, type, dflt, en, s, pf, pkey, ok, ex, j)                                   \
  SC_KNOB_CAT(KNOB_APPLY_, pf)(l, name, e, pkey)
  SC_KNOBS(KNOB_APPLY)
#undef KNOB_APPLY
  if (l->prefill_chunk > l->token_budget) l->prefill_chunk = l->token_budget;
}

sc_status scn_parse_router(scn_ctx *c, struct fy_node *v, struct fy_node *k) {
  static const char *const none[] = {NULL};
  static const char *const isolations[] = {"process", "thread", "mpi"};
  scn_router *r = &c->s->router;
  const char *policies[ROUTER_POLICY_N]; // the router's table (serving/router.h)
  for (int i = 0; i < ROUTER_POLICY_N; i++) policies[i] = router_policy_name((router_policy)i);
  char policy[32] = "", isolation[32] = "";
  snprintf(policy, sizeof policy, "%s", router_policy_name(r->policy)); // the default
  const yaml_map_field f[] = {F_STR("policy", policy),
                              F_STR("isolation", isolation),
                              F_DUR("detect_timeout", &r->detect_timeout_ns),
                              F_INT("max_retries", &r->max_retries),
                              F_DUR("backoff", &r->backoff_ns),
                              F_BOOL("resume", &r->resume),
                              F_BOOL("restart", &r->restart),
                              F_DBL("load_bound", &r->load_bound),
                              F_INT("affinity_tokens", &r->affinity_tokens)};
  yaml_map_view m;
  SC_TRY(yaml_map_read_view(&c->doc, v, "router", k, f, COUNT(f), none, 0, &m));
  int p = 0;
  SC_TRY(yaml_map_pick_key(&c->doc, &m, "policy", policy, policies, ROUTER_POLICY_N, &p));
  r->policy = (router_policy)p;
  if (yaml_map_val(&m, "isolation")) {
    int i = 0;
    SC_TRY(yaml_map_pick_key(&c->doc, &m, "isolation", isolation, isolations, 3, &i));
    r->isolation = i == 2 ? SCN_ISOLATION_MPI : i ? SCN_ISOLATION_THREAD : SCN_ISOLATION_PROCESS;
  }
  SC_TRY(yaml_map_check(&c->doc, &m, "load_bound", r->load_bound >= 1 && r->load_bound <= 100,
                        "a factor in [1, 100] (a replica's load against the mean)"));
  SC_TRY(yaml_map_check(&c->doc, &m, "affinity_tokens", r->affinity_tokens >= 1,
                        "an integer >= 1 (the prompt's first tokens prefix-affinity hashes)"));
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
  return scn_add_deployment_policy(c, at, tp, pp, dp, -1);
}

sc_status scn_add_deployment_policy(scn_ctx *c, struct fy_node *at, int tp, int pp, int dp,
                                    int policy) {
  scenario *s = c->s;
  for (int i = 0; i < s->n_deployments; i++) {
    const scn_deployment *d = &s->deployments[i];
    if (d->tp == tp && d->pp == pp && d->dp == dp && d->policy == policy + 1) return SC_OK;
  }
  if (s->n_deployments == SCN_MAX_DEPLOYMENTS)
    return yaml_map_fail(&c->doc, at, NULL,
                         "key 'deployments': expected at most %d deployments (after "
                         "expanding scaling items), got more",
                         SCN_MAX_DEPLOYMENTS);
  scn_deployment *d = &s->deployments[s->n_deployments++];
  *d = (scn_deployment){.tp = tp, .pp = pp, .dp = dp, .policy = policy + 1};
  deployment_label(tp, pp, dp, d->label, sizeof d->label);
  if (policy >= 0) {
    size_t len = strlen(d->label);
    snprintf(d->label + len, sizeof d->label - len, "-%s", router_policy_name(policy));
  }
  yaml_map_pos(at, &d->line, &d->col);
  return SC_OK;
}

// Appends the planner's recommendation for up to g GPUs (declared at item); an error at the
// GPU count `at` (of key k) when none fits.
static sc_status auto_layout(scn_ctx *c, struct fy_node *item, struct fy_node *at,
                             struct fy_node *k, int g, int policy) {
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
    st = scn_add_deployment_policy(c, item, l[best].tp, l[best].pp, l[best].dp, policy);
  free(l);
  return st;
}

// A deployment's `policy` (a name) or a scaling block's (a name or a list of names): router
// policies into pol (at most ROUTER_POLICY_N, each once), their count in *n.
static sc_status parse_policies(scn_ctx *c, struct fy_node *v, struct fy_node *k, int *pol,
                                int *n) {
  const char *names[ROUTER_POLICY_N];
  for (int i = 0; i < ROUTER_POLICY_N; i++) names[i] = router_policy_name((router_policy)i);
  const char *expect = "a routing policy or a list of them (serving/router.c's names)";
  if (v && fy_node_get_type(v) == FYNT_SEQUENCE) {
    struct fy_node *items[ROUTER_POLICY_N];
    SC_TRY(yaml_map_enum_list(&c->doc, v, k, expect, names, ROUTER_POLICY_N, ROUTER_POLICY_N,
                              pol, n, items));
    for (int i = 0; i < *n; i++)
      for (int j = 0; j < i; j++)
        if (pol[i] == pol[j])
          return yaml_map_fail(&c->doc, items[i], k, "key 'policy': '%s' is listed twice",
                               names[pol[i]]);
    return SC_OK;
  }
  char text[32] = "";
  yaml_map_field f = F_STR("policy", text);
  SC_TRY(yaml_map_read_scalar(&c->doc, k, v, &f));
  SC_TRY(yaml_map_pick(&c->doc, v, k, text, names, ROUTER_POLICY_N, &pol[0]));
  *n = 1;
  return SC_OK;
}

static sc_status parse_scaling(scn_ctx *c, struct fy_node *v, struct fy_node *k,
                               struct fy_node *item) {
  static const char *const nested[] = {"gpus", "pattern", "policy"};
  yaml_map_view m;
  SC_TRY(yaml_map_read_view(&c->doc, v, "scaling", k, NULL, 0, nested, COUNT(nested), &m));
  int pol[ROUTER_POLICY_N], npol = 1;
  pol[0] = -1;
  if (yaml_map_has(&m, "policy"))
    SC_TRY(parse_policies(c, yaml_map_val(&m, "policy"), yaml_map_key(&m, "policy"), pol, &npol));
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
  for (int q = 0; q < npol; q++)
    for (int p = 0; p < np; p++)
      for (int i = 0; i < ng; i++) {
        int g = gpus[i];
        switch (pat[p]) {
        case 0: SC_TRY(scn_add_deployment_policy(c, item, 1, 1, g, pol[q])); break;
        case 1: SC_TRY(scn_add_deployment_policy(c, item, g, 1, 1, pol[q])); break;
        case 2: SC_TRY(scn_add_deployment_policy(c, item, 1, g, 1, pol[q])); break;
        default: SC_TRY(auto_layout(c, item, gitems[i], gk, g, pol[q])); break;
        }
      }
  return SC_OK;
}

sc_status scn_parse_deployment_item(scn_ctx *c, struct fy_node *item, struct fy_node *k) {
  static const char *const nested[] = {"scaling", "policy"};
  int tp = 1, pp = 1, dp = 1;
  const yaml_map_field f[] = {F_INT("tp", &tp), F_INT("pp", &pp), F_INT("dp", &dp)};
  yaml_map_view m;
  SC_TRY(
      yaml_map_read_view(&c->doc, item, "deployments", k, f, COUNT(f), nested, COUNT(nested), &m));
  if (yaml_map_has(&m, "scaling")) {
    if (yaml_map_has(&m, "policy"))
      return yaml_map_fail(&c->doc, yaml_map_key(&m, "policy"), NULL,
                           "key 'policy': inside the scaling block (scaling: {gpus, pattern, "
                           "policy}), not beside it");
    if (yaml_map_has(&m, "tp") || yaml_map_has(&m, "pp") || yaml_map_has(&m, "dp"))
      return yaml_map_fail(&c->doc, yaml_map_key(&m, "scaling"), NULL,
                           "key 'scaling': expected either tp/pp/dp or scaling in one deployment, "
                           "got both");
    return parse_scaling(c, yaml_map_val(&m, "scaling"), yaml_map_key(&m, "scaling"), item);
  }
  SC_TRY(yaml_map_check(&c->doc, &m, "tp", tp >= 1, "an integer >= 1"));
  SC_TRY(yaml_map_check(&c->doc, &m, "pp", pp >= 1, "an integer >= 1"));
  SC_TRY(yaml_map_check(&c->doc, &m, "dp", dp >= 1, "an integer >= 1"));
  int pol[ROUTER_POLICY_N] = {-1}, npol = 1;
  if (yaml_map_has(&m, "policy")) {
    struct fy_node *pv = yaml_map_val(&m, "policy"), *pk = yaml_map_key(&m, "policy");
    if (pv && fy_node_get_type(pv) == FYNT_SEQUENCE)
      return yaml_map_expect_at(&c->doc, pv, pk, "policy",
                                "one routing policy (a list goes in a scaling block)");
    SC_TRY(parse_policies(c, pv, pk, pol, &npol));
  }
  return scn_add_deployment_policy(c, item, tp, pp, dp, pol[0]);
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
  bool mpi = s->mode == SCN_MODE_REAL && !c->switched && s->router.isolation == SCN_ISOLATION_MPI;
  if (s->mode == SCN_MODE_REAL && !c->switched && s->hardware.hostfile[0] && !mpi)
    return sc_fail(c->doc.err, SC_INVALID,
                   "%s: hardware.hostfile places the ranks of MPI jobs: it needs "
                   "router.isolation: mpi", c->doc.file);
  for (int i = 0; i < s->n_deployments; i++) {
    const scn_deployment *d = &s->deployments[i];
    char w[300];
    if (d->line)
      snprintf(w, sizeof w, "%s:%d:%d", c->doc.file, d->line, d->col);
    else
      snprintf(w, sizeof w, "%s", c->doc.file);
    int n = d->tp * d->pp * d->dp;
    if (mpi && s->hardware.hostfile[0] && d->tp * d->pp > s->hardware.hostfile_slots)
      return sc_fail(c->doc.err, SC_INVALID,
                     "%s: deployment '%s' (tp=%d pp=%d) runs each replica as an MPI job of %d "
                     "processes; hardware.hostfile %s names %d slot%s",
                     w, d->label, d->tp, d->pp, d->tp * d->pp, s->hardware.hostfile,
                     s->hardware.hostfile_slots, s->hardware.hostfile_slots == 1 ? "" : "s");
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
  if (!v) { // implied: one deployment of one GPU, declared at k
    SC_TRY(scn_add_deployment(c, k, 1, 1, 1));
    c->s->deployments[c->s->n_deployments - 1].line = 0;
  } else if (fy_node_get_type(v) == FYNT_MAPPING) { // the form `deployments: {scaling: ...}`
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
  return s->router.isolation == SCN_ISOLATION_PROCESS || s->router.isolation == SCN_ISOLATION_MPI;
}

bool scenario_mpi_replicas(const scenario *s) {
  return s->mode == SCN_MODE_REAL && !s->target.set && s->router.isolation == SCN_ISOLATION_MPI;
}

mt_kind scenario_metric_kind(const scenario *s) {
  if (s->mode == SCN_MODE_SIM) return MT_KIND_SIM;
  if (s->target.set)
    return strstr(s->target.launch, "{shardcheck} serve") ? MT_KIND_SERVE : MT_KIND_TEXT;
  return scenario_isolates_processes(s) ? MT_KIND_PROCESS : MT_KIND_LOCAL;
}
