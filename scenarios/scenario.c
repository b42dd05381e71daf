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

#include <libfyaml.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config/yaml_map.h"
#include "scenarios/scenario_impl.h"

#define SCN_MAX_TEXT ((size_t)16 << 20) // largest scenario file read, bytes

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

// --- the whole document

void scn_set_defaults(scenario *s) {
  s->mode = SCN_MODE_REAL;
  snprintf(s->hardware.backend, sizeof s->hardware.backend, "cpu");
  snprintf(s->hardware.profile, sizeof s->hardware.profile, "cpu");
  s->workload.temperature = 0;
  s->workload.top_p = 1;
  s->limits = (scn_limits){
      .request_timeout_ns = 60ull * 1000000000ull,
      SC_KNOBS(SC_KNOB_DEFAULT) // kernels/knobs.h
      .kv_headroom = 0.10,
      .collective_timeout_ns = 30ull * 1000000000ull,
  };
  s->router.policy = ROUTER_LEAST_OUTSTANDING;
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
  bool fixed_url = false; // a prediction of one server already up: one deployment may be implied
  if (c->predicting) {
    SC_TRY(scn_parse_target(c, yaml_map_val(&m, "target"), yaml_map_key(&m, "target")));
    fixed_url = !s->target.launch[0];
    memset(&s->target, 0, sizeof s->target);
    memset(&s->model, 0, sizeof s->model);
    if (!yaml_map_has(&m, "model"))
      return yaml_map_fail(&c->doc, yaml_map_key(&m, "target"), NULL,
                           "mode sim on a target scenario simulates "
                           "its model on its hardware profile: add model: {preset: NAME} (and "
                           "hardware.profile)%s",
                           c->mode_from_ov ? " (--mode sim)" : "");
    if (!fixed_url) // launched servers: the layouts to launch are the ones to simulate
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
  if (c->predicting && !yaml_map_has(&m, "deployments")) {
    // a fixed url is one server of one replica (docs/targets.md): simulated as tp1
    SC_TRY(scn_parse_deployments(c, NULL, root));
  } else if (!target || c->predicting) {
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
  scn_check_slo_measurable(c);
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
