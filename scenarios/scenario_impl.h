// The scenario parser's shared state and what its sections share. Internal to scenarios/:
// scenario.h is the public side; docs/design.md maps the files.
//
// One file per section of the language, each reading its keys through config/yaml_map.h's
// views: scenario.c the whole document, the overrides and the public API; scenario_deploy.c
// model, hardware, limits, router and deployments; scenario_workload.c the workload;
// scenario_faults.c the faults; scenario_slo.c the SLOs and the gate; scenario_target.c an
// external target.
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "config/yaml_map.h"
#include "scenarios/scenario.h"

// One parse: where messages point, where relative paths start, what is filled.
typedef struct scn_ctx {
  yaml_map_doc doc; // the name shown in messages, and the error
  const char *dir;  // relative paths resolve against it
  scenario *s;
  const scn_overrides *ov; // command-line overrides (NULL: none)
  bool mode_from_ov;       // the mode is the override's, not the file's
  bool switched;           // the file says real, the override sim: hardware is converted
  bool now;                // one fault applied at once (scenario_parse_fault_now): no time,
                           // no duration, only the kinds a running server takes
  bool predicting;         // a target scenario in mode sim: its model simulated on its profile
} scn_ctx;

// Field table entries (designated, so unused members stay zero).
#define F_INT(k, d) {.key = (k), .type = YAML_MAP_INT, .dst = (d)}
#define F_DBL(k, d) {.key = (k), .type = YAML_MAP_DOUBLE, .dst = (d)}
#define F_STR(k, d) {.key = (k), .type = YAML_MAP_STRING, .dst = (d), .cap = sizeof(d)}
#define F_BOOL(k, d) {.key = (k), .type = YAML_MAP_BOOL, .dst = (d)}
#define F_DUR(k, d)                                                                                \
  {.key = (k), .type = YAML_MAP_CUSTOM, .dst = (d), .parse = yaml_map_parse_dur,                 \
   .expect = YAML_MAP_DUR_EXPECT}
#define F_CUSTOM(k, d, fn, ex)                                                                     \
  {.key = (k), .type = YAML_MAP_CUSTOM, .dst = (d), .parse = (fn), .expect = (ex)}
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

// --- scenarios/scenario.c: paths and defaults
// dst = p when absolute or the scenario's directory is "" or "."; else DIR/p. False when it
// does not fit.
bool scn_resolve_path(const scn_ctx *c, const char *p, char *dst, size_t cap);
bool scn_is_dir(const char *p);
// Every key's default, before a document is read.
void scn_set_defaults(scenario *s);

// --- scenarios/scenario_deploy.c
// What a model key accepts: a preset (a name or a .yaml file) and/or a model directory.
enum { SRC_PRESET = 1, SRC_DIR = 2 };
#define DTYPE_EXPECT "a dtype (f32, f16, bf16, int8, int4, fp8)"
// A dtype name into char[8] dst (YAML_MAP_CUSTOM).
bool scn_parse_dtype(const char *text, void *dst);
// Loads the model `source`, the value v of key k, as `accept` allows: a directory (relative
// to the scenario) wins over a preset name. resolved gets what was loaded (a preset name, or
// a path); has_weights (may be NULL) whether a directory holds safetensors. Errors name v.
sc_status scn_load_model(scn_ctx *c, struct fy_node *v, struct fy_node *k, const char *source,
                         int accept, char *resolved, size_t cap, model_config *out,
                         bool *has_weights);
sc_status scn_parse_model(scn_ctx *c, struct fy_node *v, struct fy_node *k);
// hardware (value v of key k; NULL when absent) in the scenario's mode. root is the document's
// root mapping, where a missing `hardware` is reported.
sc_status scn_parse_hardware(scn_ctx *c, struct fy_node *v, struct fy_node *k,
                             struct fy_node *root);
sc_status scn_parse_limits(scn_ctx *c, struct fy_node *v, struct fy_node *k);
// Sim mode: the scheduler knobs of the profile's engine block replace the scenario's limits.
void scn_apply_engine_knobs(scn_limits *l, const sim_engine *e);
sc_status scn_parse_router(scn_ctx *c, struct fy_node *v, struct fy_node *k);
// Appends (tp, pp, dp) declared at node `at` unless the same layout is already there.
sc_status scn_add_deployment(scn_ctx *c, struct fy_node *at, int tp, int pp, int dp);
// One item of `deployments` (key node k): {tp, pp, dp} or {scaling: ...}.
sc_status scn_parse_deployment_item(scn_ctx *c, struct fy_node *item, struct fy_node *k);
// `deployments` (v NULL: the one deployment of one GPU that a fixed-url target implies,
// declared at k), then the planner's check of each.
sc_status scn_parse_deployments(scn_ctx *c, struct fy_node *v, struct fy_node *k);

// --- scenarios/scenario_workload.c
sc_status scn_parse_workload(scn_ctx *c, struct fy_node *v, struct fy_node *k);

// --- scenarios/scenario_faults.c
sc_status scn_parse_faults(scn_ctx *c, struct fy_node *v, struct fy_node *k);
// Whether fault f suits the scenario's kind of deployment (an external target takes fewer).
sc_status scn_check_fault_target(scn_ctx *c, const scn_fault *f);

// --- scenarios/scenario_slo.c
sc_status scn_parse_slo(scn_ctx *c, struct fy_node *v, struct fy_node *k);
sc_status scn_parse_gate(scn_ctx *c, struct fy_node *v, struct fy_node *k);
// Once every section is read: a warning for each SLO key the scenario's deployments cannot
// measure (the metric table's absent[] for their kind of replica, a fault metric without
// faults): at run time its verdict FAILs with "no data".
void scn_check_slo_measurable(scn_ctx *c);

// --- scenarios/scenario_target.c
// Records a warning for `validate` and `run` to print (the first SCN_MAX_WARNINGS).
void scn_warn(scn_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// An error unless text (the value v of key k) is a template serving/launch.h can expand.
sc_status scn_check_template(scn_ctx *c, struct fy_node *v, struct fy_node *k, const char *text);
sc_status scn_parse_target(scn_ctx *c, struct fy_node *v, struct fy_node *k);
// A target's hardware: devices only (the GPU ids handed out to launched replicas).
sc_status scn_target_hardware(scn_ctx *c, struct fy_node *v, struct fy_node *k);
// A target's deployments (root: the document, where a missing key is reported).
sc_status scn_check_target_deployments(scn_ctx *c, struct fy_node *root);
