// Tests for the scenario language (scenarios/scenario.c) and `shardcheck validate`: a full
// scenario parses with every field as written, defaults fill what is left out, scaling items
// expand (with dedupe, labels and the planner's auto choice), and each kind of bad input is
// one SC_INVALID naming its exact FILE:LINE:COL and key.
//
// Not here: the planner's arithmetic (tests/test_memplan.c), the strict flat reader itself
// (tests/test_memplan.c), reading dataset lines (the workload generator's tests).
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/hardware.h"
#include "engine/memplan.h"
#include "engine/model.h"
#include "scenarios/scenario.h"
#include "tests/helpers.h"

#define DATA SC_SOURCE_DIR "/tests/data/scenarios"
#define SEC 1000000000ull
#define MS 1000000ull

// --- helpers

// The smallest valid scenario; tests append keys (from line 7 on) or write their own.
#define BASE                                                                                       \
  "name: t\n"                                                                                      \
  "model: llama-tiny\n"                                                                            \
  "deployments: [{tp: 1}]\n"                                                                       \
  "workload:\n"                                                                                    \
  "  prompts: [{input: 10, output: 5}]\n"                                                          \
  "  phases: [{fixed: {requests: 10}}]\n"

// Parses text shown as "t.yaml" with relative paths under tests/data/scenarios.
static scenario *parse_ok(const char *text) {
  scenario *s = NULL;
  sc_error err = {{0}};
  sc_status st = scenario_parse(text, strlen(text), "t.yaml", DATA, &s, &err);
  cr_assert_eq(st, SC_OK, "expected a valid scenario, got: %s", err.msg);
  cr_assert_not_null(s);
  return s;
}

// Parses text, expects SC_INVALID whose message starts with `prefix` ("t.yaml:L:C: ...")
// and contains `needle` (may be NULL).
static void parse_bad(const char *text, const char *prefix, const char *needle) {
  scenario *s = (scenario *)1;
  sc_error err = {{0}};
  sc_status st = scenario_parse(text, strlen(text), "t.yaml", DATA, &s, &err);
  cr_assert_eq(st, SC_INVALID, "expected SC_INVALID, got %s (%s)", sc_status_name(st), err.msg);
  cr_assert_null(s, "*out must be NULL on error");
  cr_expect_eq(strncmp(err.msg, prefix, strlen(prefix)), 0, "expected a message starting '%s', "
               "got '%s'", prefix, err.msg);
  if (needle) cr_expect(strstr(err.msg, needle), "'%s' missing from '%s'", needle, err.msg);
}

static const char *labels(const scenario *s, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < s->n_deployments && len < cap; i++)
    len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? " " : "", s->deployments[i].label);
  return buf;
}

// --- a full scenario

Test(scenario_parse, full_scenario_parses_every_field_as_written) {
  scenario *s = NULL;
  sc_error err = {{0}};
  cr_assert_eq(scenario_load(DATA "/full.yaml", &s, &err), SC_OK, "%s", err.msg);
  cr_expect_str_eq(s->path, DATA "/full.yaml");
  cr_expect_str_eq(s->dir, DATA);
  cr_assert_not_null(s->text);
  cr_expect_eq(strlen(s->text), s->text_len);
  cr_expect(strstr(s->text, "name: full-example"));
  cr_expect_str_eq(s->name, "full-example");
  cr_expect_str_eq(s->description, "every key, non-default values");
  cr_expect_eq(s->mode, SCN_MODE_REAL);
  // model
  cr_expect_str_eq(s->model.source, "llama-tiny");
  cr_expect_str_eq(s->model.resolved, "llama-tiny");
  cr_expect_str_eq(s->model.dtype, "f32");
  cr_expect_eq(s->model.weights_seed, 7);
  cr_expect_not(s->model.has_weights);
  cr_expect_str_eq(s->model.config.name, "llama-tiny");
  cr_expect_eq(s->model.config.n_layers, 8);
  // hardware
  cr_expect_str_eq(s->hardware.backend, "cpu");
  cr_expect_str_eq(s->hardware.profile, "cpu");
  cr_expect_eq(s->hardware.gpus, 8);
  cr_expect_eq(s->hardware.threads, 1);
  cr_expect_eq(s->hardware.n_devices, 0);
  // deployments: two explicit, then scaling [dp, tp] x [1, 4] with tp1 kept once
  char buf[256];
  cr_expect_str_eq(labels(s, buf, sizeof buf), "tp2-pp2 dp2 tp1 dp4 tp4");
  cr_assert_eq(s->n_deployments, 5);
  const scn_deployment *d = s->deployments;
  cr_expect(d[0].tp == 2 && d[0].pp == 2 && d[0].dp == 1);
  cr_expect(d[1].tp == 1 && d[1].pp == 1 && d[1].dp == 2);
  cr_expect(d[4].tp == 4 && d[4].pp == 1 && d[4].dp == 1);
  cr_expect(d[0].line == 9 && d[0].col == 6, "got %d:%d", d[0].line, d[0].col);
  cr_expect(d[2].line == 11 && d[2].col == 6, "got %d:%d", d[2].line, d[2].col);
  cr_expect(d[4].line == 11 && d[4].col == 6, "got %d:%d", d[4].line, d[4].col);
  // prompt classes
  const scn_workload *w = &s->workload;
  cr_assert_eq(w->n_classes, 2);
  cr_expect_str_eq(w->classes[0].name, "short");
  cr_expect_float_eq(w->classes[0].weight, 0.75, 1e-12);
  cr_expect_eq(w->classes[0].input.kind, SCN_DIST_UNIFORM);
  cr_expect(w->classes[0].input.a == 8 && w->classes[0].input.b == 64);
  cr_expect_eq(w->classes[0].output.kind, SCN_DIST_FIXED);
  cr_expect_eq(w->classes[0].output.a, 16);
  cr_expect_str_eq(w->classes[1].name, "long");
  cr_expect_eq(w->classes[1].input.kind, SCN_DIST_NORMAL);
  cr_expect(w->classes[1].input.a == 200 && w->classes[1].input.b == 20);
  cr_expect_eq(w->classes[1].output.kind, SCN_DIST_LOGNORMAL);
  cr_expect(w->classes[1].output.a == 32 && w->classes[1].output.b == 0.5);
  cr_expect_str_eq(w->dataset, "");
  // phases
  cr_assert_eq(w->n_phases, 4);
  const scn_phase *p = w->phases;
  cr_expect_eq(p[0].kind, SCN_PHASE_RAMP);
  cr_expect_str_eq(p[0].name, "warm");
  cr_expect_eq(p[0].n_concurrency, 3);
  cr_expect(p[0].concurrency[0] == 1 && p[0].concurrency[1] == 2 && p[0].concurrency[2] == 4);
  cr_expect_eq(p[0].hold_ns, 2 * SEC);
  cr_expect_eq(p[0].think_ns, 50 * MS);
  cr_expect_eq(p[0].warmup_ns, 500 * MS);
  cr_expect_eq(p[1].kind, SCN_PHASE_RATE);
  cr_expect_str_eq(p[1].name, "rate-8");
  cr_expect_float_eq(p[1].rate, 8, 1e-12);
  cr_expect_eq(p[1].arrival, SCN_ARRIVAL_GAMMA);
  cr_expect_float_eq(p[1].burstiness, 0.5, 1e-12);
  cr_expect_eq(p[1].duration_ns, 10 * SEC);
  cr_expect_eq(p[1].requests, 0);
  cr_expect_eq(p[1].warmup_ns, 1 * SEC);
  cr_expect_eq(p[2].kind, SCN_PHASE_FIXED);
  cr_expect_str_eq(p[2].name, "fixed");
  cr_expect_eq(p[2].requests, 20);
  cr_expect(p[2].n_concurrency == 1 && p[2].concurrency[0] == 4);
  cr_expect_eq(p[2].think_ns, 10 * MS);
  cr_expect_str_eq(p[3].name, "rate-2.5");
  cr_expect_eq(p[3].arrival, SCN_ARRIVAL_CONSTANT);
  cr_expect_eq(p[3].requests, 30);
  cr_expect_eq(p[3].duration_ns, 0);
  cr_expect(p[0].line == 20 && p[0].col == 8, "got %d:%d", p[0].line, p[0].col);
  cr_expect_float_eq(w->temperature, 0.7, 1e-12);
  cr_expect_float_eq(w->top_p, 0.9, 1e-12);
  cr_expect(w->stop_at_eos);
  // faults
  cr_assert_eq(s->n_faults, 10);
  const scn_fault *f = s->faults;
  cr_expect_eq(f[0].kind, SCN_FAULT_KILL);
  cr_expect_str_eq(f[0].what, "gpu");
  cr_expect_str_eq(f[0].target, "replica0.rank1");
  cr_expect_eq(f[0].at_ns, 1 * SEC);
  cr_expect(f[0].line == 27 && f[0].col == 6, "got %d:%d", f[0].line, f[0].col);
  cr_expect_str_eq(f[1].what, "replica");
  cr_expect_str_eq(f[1].target, "replica1");
  cr_expect_eq(f[2].kind, SCN_FAULT_HANG);
  cr_expect_str_eq(f[2].what, "rank");
  cr_expect_str_eq(f[2].at_phase, "warm");
  cr_expect_eq(f[2].duration_ns, 3 * SEC);
  cr_expect_eq(f[3].kind, SCN_FAULT_SLOW);
  cr_expect_str_eq(f[3].what, "link");
  cr_expect_float_eq(f[3].factor, 2, 1e-12);
  cr_expect_eq(f[3].latency_ns, 200000);
  cr_expect_float_eq(f[3].bandwidth, 1e9, 1);
  cr_expect_eq(f[3].duration_ns, 5 * SEC);
  cr_expect_eq(f[4].kind, SCN_FAULT_CANCEL_STORM);
  cr_expect_eq(f[4].count, 3);
  cr_expect_eq(f[4].fraction, 0);
  cr_expect_eq(f[4].stages, SCN_STAGE_QUEUED | SCN_STAGE_DECODE);
  cr_expect_eq(f[5].kind, SCN_FAULT_HOT_SWAP);
  cr_expect_str_eq(f[5].swap_model, "llama-tiny");
  cr_expect_str_eq(f[5].swap_dtype, "bf16");
  cr_expect_eq(f[6].kind, SCN_FAULT_CLOCK_JUMP);
  cr_expect_eq(f[6].offset_ns, -30 * 60 * (int64_t)SEC);
  cr_expect_eq(f[7].kind, SCN_FAULT_OOM);
  cr_expect_str_eq(f[7].what, "persistent");
  cr_expect_eq(f[7].after_allocs, 2);
  cr_expect_str_eq(f[7].target, "every-rank");
  cr_expect_eq(f[8].kind, SCN_FAULT_CORRUPT);
  cr_expect_str_eq(f[8].what, "bitflip");
  cr_expect_str_eq(f[8].target, "replica0");
  cr_expect_eq(f[9].kind, SCN_FAULT_CHAOS);
  cr_expect_eq(f[9].kinds_mask, (1u << SCN_FAULT_KILL) | (1u << SCN_FAULT_SLOW));
  cr_expect(f[9].count_min == 1 && f[9].count_max == 3);
  cr_expect(f[9].between_ns[0] == 10 * SEC && f[9].between_ns[1] == 20 * SEC);
  cr_expect_eq(f[9].n_keep_alive, 1);
  cr_expect_str_eq(f[9].keep_alive[0], "replica0");
  cr_expect_str_eq(f[9].at_phase, "");
  // slo, seed, limits, router
  cr_assert_eq(s->slo.n, 4);
  cr_expect_str_eq(s->slo.items[0].key, "ttft_p95_ms");
  cr_expect_float_eq(s->slo.items[0].limit, 500, 1e-12);
  cr_expect_str_eq(s->slo.items[3].key, "goodput_rps");
  cr_expect_float_eq(s->slo.items[3].limit, 2, 1e-12);
  cr_expect(s->slo.items[0].line == 37 && s->slo.items[0].col == 7);
  cr_expect_eq(s->seed, 42);
  cr_expect_eq(s->limits.request_timeout_ns, 90 * SEC);
  cr_expect_eq(s->limits.max_running, 64);
  cr_expect_eq(s->limits.token_budget, 2048);
  cr_expect_eq(s->limits.prefill_chunk, 256);
  cr_expect_eq(s->limits.block_size, 32);
  cr_expect_float_eq(s->limits.kv_headroom, 0.2, 1e-12);
  cr_expect_eq(s->limits.collective_timeout_ns, 5 * SEC);
  cr_expect_eq(s->router.policy, SCN_ROUTER_ROUND_ROBIN);
  scenario_free(s);
}

Test(scenario_parse, defaults_fill_every_key_left_out) {
  scenario *s = parse_ok(BASE);
  cr_expect_str_eq(s->path, "");
  cr_expect_str_eq(s->dir, DATA);
  cr_expect_eq(s->mode, SCN_MODE_REAL);
  cr_expect_str_eq(s->description, "");
  cr_expect_str_eq(s->model.dtype, "");
  cr_expect_eq(s->model.weights_seed, 0);
  cr_expect_str_eq(s->hardware.backend, "cpu");
  cr_expect_str_eq(s->hardware.profile, "cpu");
  cr_expect_eq(s->hardware.gpus, 0);
  cr_expect_eq(s->hardware.threads, 0);
  cr_assert_eq(s->n_deployments, 1);
  cr_expect_str_eq(s->deployments[0].label, "tp1");
  const scn_class *cl = &s->workload.classes[0];
  cr_expect_str_eq(cl->name, "class0");
  cr_expect_float_eq(cl->weight, 1, 1e-12);
  const scn_phase *p = &s->workload.phases[0];
  cr_expect_eq(p->concurrency[0], 1); // fixed: concurrency defaults to 1
  cr_expect_eq(p->think_ns, 0);
  cr_expect_eq(p->warmup_ns, 0);
  cr_expect_float_eq(s->workload.temperature, 0, 1e-12);
  cr_expect_float_eq(s->workload.top_p, 1, 1e-12);
  cr_expect_not(s->workload.stop_at_eos);
  cr_expect_eq(s->n_faults, 0);
  cr_expect_eq(s->slo.n, 0);
  cr_expect_eq(s->seed, 0);
  cr_expect_eq(s->limits.request_timeout_ns, 60 * SEC);
  cr_expect_eq(s->limits.max_running, 256);
  cr_expect_eq(s->limits.token_budget, 8192);
  cr_expect_eq(s->limits.prefill_chunk, 0);
  cr_expect_eq(s->limits.block_size, 16);
  cr_expect_float_eq(s->limits.kv_headroom, 0.10, 1e-12);
  cr_expect_eq(s->limits.collective_timeout_ns, 30 * SEC);
  cr_expect_eq(s->router.policy, SCN_ROUTER_LEAST_OUTSTANDING);
  scenario_free(s);
}

Test(scenario_parse, rate_phase_defaults_to_poisson_with_burstiness_1) {
  scenario *s = parse_ok("name: t\nmodel: {preset: llama-tiny}\ndeployments: [{dp: 1}]\n"
                         "workload:\n  prompts: [{input: 10, output: 5}]\n"
                         "  phases: [{rate: 4, duration: 1m}]\n");
  const scn_phase *p = &s->workload.phases[0];
  cr_expect_eq(p->arrival, SCN_ARRIVAL_POISSON);
  cr_expect_float_eq(p->burstiness, 1, 1e-12);
  cr_expect_eq(p->duration_ns, 60 * SEC);
  cr_expect_eq(scenario_phase_duration_ns(p), 60 * SEC);
  cr_expect_eq(scenario_phase_requests(p), 0);
  scenario_free(s);
}

Test(scenario_parse, durations_take_every_unit_and_bare_seconds) {
  static const struct {
    const char *text;
    uint64_t ns;
  } cases[] = {{"250us", 250000},  {"500ms", 500 * MS}, {"30s", 30 * SEC}, {"2m", 120 * SEC},
               {"1h", 3600 * SEC}, {"1.5", 1500 * MS},  {"0", 0},          {"10ns", 10}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char text[512];
    snprintf(text, sizeof text, BASE "limits: {request_timeout: %s}\n", cases[i].text);
    scenario *s = parse_ok(text);
    cr_expect_eq(s->limits.request_timeout_ns, cases[i].ns, "%s -> %llu", cases[i].text,
                 (unsigned long long)s->limits.request_timeout_ns);
    scenario_free(s);
  }
}

Test(scenario_parse, phase_default_names_are_made_unique) {
  scenario *s = parse_ok("name: t\nmodel: llama-tiny\ndeployments: [{tp: 1}]\nworkload:\n"
                         "  prompts: [{input: 10, output: 5}]\n"
                         "  phases:\n"
                         "    - {ramp: {concurrency: [1]}, hold: 1s}\n"
                         "    - {name: ramp-2, fixed: {requests: 1}}\n"
                         "    - {ramp: {concurrency: [2]}, hold: 1s}\n"
                         "    - {rate: 8, requests: 5}\n"
                         "    - {rate: 8, requests: 5}\n");
  const scn_phase *p = s->workload.phases;
  cr_expect_str_eq(p[0].name, "ramp");
  cr_expect_str_eq(p[1].name, "ramp-2");
  cr_expect_str_eq(p[2].name, "ramp-3");
  cr_expect_str_eq(p[3].name, "rate-8");
  cr_expect_str_eq(p[4].name, "rate-8-2");
  scenario_free(s);
}

Test(scenario_parse, model_directory_resolves_against_the_scenario_dir) {
  const char *dir = sc_test_tmpdir("scn-model");
  cr_assert_not_null(dir);
  char sub[512], sub2[512];
  snprintf(sub, sizeof sub, "%s/tiny", dir);
  snprintf(sub2, sizeof sub2, "%s/config-only", dir);
  model_config c;
  sc_error err = {{0}};
  cr_assert_eq(model_preset_load("llama-tiny", &c, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(model_gen_write(&c, 1, SC_F32, sub, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(mkdir(sub2, 0755), 0);
  char cfg[600];
  snprintf(cfg, sizeof cfg, "%s/config.json", sub2);
  cr_assert_eq(model_config_write_json(&c, cfg, &err), SC_OK, "%s", err.msg);

  const char *text = "name: t\nmodel: {path: tiny}\ndeployments: [{tp: 2}]\nworkload:\n"
                     "  prompts: [{input: 10, output: 5}]\n  phases: [{fixed: {requests: 1}}]\n";
  scenario *s = NULL;
  cr_assert_eq(scenario_parse(text, strlen(text), "t.yaml", dir, &s, &err), SC_OK, "%s", err.msg);
  cr_expect_str_eq(s->model.source, "tiny");
  cr_expect_str_eq(s->model.resolved, sub);
  cr_expect(s->model.has_weights);
  cr_expect_eq(s->model.config.dim, c.dim);
  scenario_free(s);

  const char *text2 = "name: t\nmodel: {path: config-only}\ndeployments: [{tp: 1}]\n"
                      "workload:\n  prompts: [{input: 10, output: 5}]\n"
                      "  phases: [{fixed: {requests: 1}}]\n";
  cr_assert_eq(scenario_parse(text2, strlen(text2), "t.yaml", dir, &s, &err), SC_OK, "%s",
               err.msg);
  cr_expect_not(s->model.has_weights, "a directory without safetensors has no weights");
  scenario_free(s);
}

Test(scenario_parse, cuda_without_a_profile_checks_the_layout_but_not_memory) {
  scenario *s = parse_ok("name: t\nmodel: {preset: llama3-70b}\n"
                         "hardware: {backend: cuda, devices: [0, 1]}\n"
                         "deployments: [{tp: 1}, {tp: 2}]\nworkload:\n"
                         "  prompts: [{input: 10, output: 5}]\n"
                         "  phases: [{fixed: {requests: 1}}]\n");
  cr_expect_str_eq(s->hardware.backend, "cuda");
  cr_expect_str_eq(s->hardware.profile, "", "no default profile for real GPUs");
  cr_expect_eq(s->hardware.n_devices, 2);
  cr_expect_eq(s->hardware.gpus, 2, "gpus defaults to the devices listed");
  scenario_free(s);
  parse_bad("name: t\nmodel: {preset: llama3-70b}\nhardware: {backend: cuda}\n"
            "deployments: [{tp: 3}]\nworkload:\n"
            "  prompts: [{input: 10, output: 5}]\n  phases: [{fixed: {requests: 1}}]\n",
            "t.yaml:4:16: deployment 'tp3' (tp=3 pp=1 dp=1) refused by the planner: tp=3", NULL);
}

Test(scenario_parse, dataset_path_resolves_against_the_scenario_dir) {
  scenario *s = NULL;
  sc_error err = {{0}};
  cr_assert_eq(scenario_load(DATA "/dataset.yaml", &s, &err), SC_OK, "%s", err.msg);
  cr_expect_str_eq(s->workload.dataset, DATA "/prompts.jsonl");
  cr_expect_eq(s->workload.n_classes, 0);
  scenario_free(s);
}

Test(scenario_parse, free_of_null_is_a_no_op) { scenario_free(NULL); }

Test(scenario_parse, kind_names) {
  cr_expect_str_eq(scenario_phase_kind_name(SCN_PHASE_RAMP), "ramp");
  cr_expect_str_eq(scenario_phase_kind_name(SCN_PHASE_FIXED), "fixed");
  cr_expect_str_eq(scenario_fault_kind_name(SCN_FAULT_KILL), "kill");
  cr_expect_str_eq(scenario_fault_kind_name(SCN_FAULT_CANCEL_STORM), "cancel_storm");
  cr_expect_str_eq(scenario_fault_kind_name(SCN_FAULT_CHAOS), "chaos");
}

// --- deployments and scaling

#define SCALED(deployments)                                                                        \
  "name: t\nmodel: llama-tiny\ndeployments: " deployments "\nworkload:\n"                          \
  "  prompts: [{input: 10, output: 5}]\n  phases: [{fixed: {requests: 1}}]\n"

Test(scaling, dp_and_tp_expand_per_gpu_count_with_dedupe_and_labels) {
  scenario *s = parse_ok(SCALED("\n  - {scaling: {gpus: [1, 2, 4], pattern: [dp, tp]}}"));
  char buf[256];
  cr_expect_str_eq(labels(s, buf, sizeof buf), "tp1 dp2 dp4 tp2 tp4");
  for (int i = 0; i < s->n_deployments; i++)
    cr_expect(s->deployments[i].line == 4 && s->deployments[i].col == 6,
              "deployment %d at %d:%d, expected the item's 4:6", i, s->deployments[i].line,
              s->deployments[i].col);
  cr_expect(s->deployments[2].dp == 4 && s->deployments[2].tp == 1);
  cr_expect(s->deployments[4].tp == 4 && s->deployments[4].dp == 1);
  scenario_free(s);
}

Test(scaling, single_pattern_and_mapping_form) {
  scenario *s = parse_ok(SCALED("{scaling: {gpus: [1, 2, 4], pattern: tp}}"));
  char buf[256];
  cr_expect_str_eq(labels(s, buf, sizeof buf), "tp1 tp2 tp4");
  scenario_free(s);
  s = parse_ok(SCALED("{scaling: {gpus: [2, 4], pattern: pp}}"));
  cr_expect_str_eq(labels(s, buf, sizeof buf), "pp2 pp4");
  scenario_free(s);
}

Test(scaling, explicit_duplicates_are_kept_once_and_hybrids_are_labelled) {
  scenario *s = parse_ok(SCALED("[{tp: 2, dp: 2}, {pp: 2, dp: 2}, {tp: 2, pp: 2}, "
                                "{tp: 2, dp: 2}, {scaling: {gpus: [4], pattern: dp}}]"));
  char buf[256];
  cr_expect_str_eq(labels(s, buf, sizeof buf), "tp2-dp2 pp2-dp2 tp2-pp2 dp4");
  scenario_free(s);
}

// Deployments of llama3-70b at bf16 on h100-sxm with scaling `auto` over gpus.
#define SEVENTY_B(gpus)                                                                            \
  "name: t\nmodel: {preset: llama3-70b}\nhardware: {backend: cuda, profile: h100-sxm}\n"           \
  "deployments: {scaling: {gpus: " gpus ", pattern: auto}}\nworkload:\n"                          \
  "  prompts: [{input: 10, output: 5}]\n  phases: [{fixed: {requests: 1}}]\n"

Test(scaling, auto_picks_the_planners_layout) {
  scenario *s = parse_ok(SEVENTY_B("[4, 8]"));
  cr_assert_eq(s->n_deployments, 2);
  hw_profile hw;
  sc_error err = {{0}};
  cr_assert_eq(hw_profile_load("h100-sxm", &hw, &err), SC_OK);
  memplan_params p = memplan_defaults(); // the scenario's limits are the defaults
  p.weight_dtype = s->model.config.dtype;
  p.kv_dtype = SC_BF16;                  // backend cuda
  const int gpus[2] = {4, 8};
  for (int i = 0; i < 2; i++) {
    memplan_layout l[64];
    int n = memplan_enumerate(&s->model.config, &hw, &p, gpus[i], l, 64);
    cr_assert_leq(n, 64);
    int best = memplan_recommend(l, n, gpus[i], hw.gpus_per_node);
    cr_assert_geq(best, 0);
    const scn_deployment *d = &s->deployments[i];
    cr_expect(d->tp == l[best].tp && d->pp == l[best].pp && d->dp == l[best].dp,
              "gpus %d: scenario chose tp%d pp%d dp%d, planner tp%d pp%d dp%d", gpus[i], d->tp,
              d->pp, d->dp, l[best].tp, l[best].pp, l[best].dp);
    cr_expect_gt(d->tp, 1, "70B does not fit one H100, so auto shards it");
    cr_expect(d->line == 4 && d->col == 15, "declared at the scaling item, got %d:%d", d->line,
              d->col);
  }
  scenario_free(s);
}

Test(scaling, auto_with_no_fitting_layout_names_the_gpu_count) {
  parse_bad(SEVENTY_B("[1]"), "t.yaml:4:32: pattern auto: no layout of up to 1 h100-sxm GPU fits",
            "llama3-70b");
}

// --- bad input: each one SC_INVALID at its exact FILE:LINE:COL

Test(scenario_errors, unknown_top_level_key) {
  parse_bad(BASE "sedd: 3\n", "t.yaml:7:1: unknown key 'sedd'; expected one of: ", "seed");
}

Test(scenario_errors, unknown_nested_key) {
  parse_bad(BASE "limits: {max_runing: 8}\n",
            "t.yaml:7:10: unknown key 'max_runing'; expected one of: ", "max_running");
}

Test(scenario_errors, slo_typo_suggests_the_metric) {
  parse_bad(BASE "slo: {error_rate: 0.01, ttft_p95: 500}\n",
            "t.yaml:7:25: unknown SLO key 'ttft_p95'; did you mean ttft_p95_ms", NULL);
}

Test(scenario_errors, slo_on_a_neutral_count_is_refused) {
  parse_bad(BASE "slo: {requests: 10}\n",
            "t.yaml:7:7: key 'requests': expected a metric an SLO can bound", "a count");
}

Test(scenario_errors, negative_slo_limit) {
  parse_bad(BASE "slo: {ttft_p95_ms: -1}\n",
            "t.yaml:7:20: key 'ttft_p95_ms': expected a limit >= 0", "got '-1'");
}

Test(scenario_errors, wrong_type) {
  parse_bad("name: t\nmodel: llama-tiny\ndeployments: [{tp: two}]\nworkload:\n"
            "  prompts: [{input: 10, output: 5}]\n  phases: [{fixed: {requests: 10}}]\n",
            "t.yaml:3:20: key 'tp': expected an integer, got 'two'", NULL);
}

Test(scenario_errors, missing_required_key) {
  parse_bad("name: t\nmodel: llama-tiny\ndeployments: [{tp: 1}]\n",
            "t.yaml:1:1: missing required key 'workload'", NULL);
  parse_bad("name: t\nmodel: llama-tiny\ndeployments: [{tp: 1}]\n"
            "workload:\n  prompts: [{input: 10, output: 5}]\n"
            "  phases: [{ramp: {concurrency: [1]}}]\n",
            "t.yaml:6:13: missing required key 'hold'", NULL);
}

Test(scenario_errors, null_value_points_at_its_key) {
  parse_bad("name:\nmodel: llama-tiny\n", "t.yaml:1:1: key 'name': expected a string, got null",
            NULL);
}

Test(scenario_errors, missing_key_of_an_empty_mapping_points_at_its_key) {
  parse_bad(BASE "faults:\n  - {at: 1s, corrupt: {}, target: replica0}\n",
            "t.yaml:8:14: missing required key 'kind' (nan or bitflip)", NULL);
}

Test(scenario_errors, bad_distribution) {
  parse_bad("name: t\nmodel: llama-tiny\ndeployments: [{tp: 1}]\nworkload:\n"
            "  prompts: [{input: {uniform: [64, 8]}, output: 5}]\n"
            "  phases: [{fixed: {requests: 10}}]\n",
            "t.yaml:5:32: key 'uniform': expected [a, b]: two integers, 1 <= a <= b", NULL);
  parse_bad("name: t\nmodel: llama-tiny\ndeployments: [{tp: 1}]\nworkload:\n"
            "  prompts: [{input: 10, output: {poisson: 3}}]\n"
            "  phases: [{fixed: {requests: 10}}]\n",
            "t.yaml:5:34: unknown key 'poisson'; expected one of: uniform, normal, lognormal",
            NULL);
  parse_bad("name: t\nmodel: llama-tiny\ndeployments: [{tp: 1}]\nworkload:\n"
            "  prompts: [{input: 0, output: 5}]\n  phases: [{fixed: {requests: 10}}]\n",
            "t.yaml:5:21: key 'input': expected a token count (an integer >= 1)", "got '0'");
  parse_bad("name: t\nmodel: llama-tiny\ndeployments: [{tp: 1}]\nworkload:\n"
            "  prompts: [{input: {lognormal: {median: 0.5, sigma: 1}}, output: 5}]\n"
            "  phases: [{fixed: {requests: 10}}]\n",
            "t.yaml:5:42: key 'median': expected a number >= 1, got '0.5'", NULL);
}

Test(scenario_errors, bad_duration) {
  parse_bad("name: t\nmodel: llama-tiny\ndeployments: [{tp: 1}]\nworkload:\n"
            "  prompts: [{input: 10, output: 5}]\n"
            "  phases: [{ramp: {concurrency: [1, 2]}, hold: 10 parsecs}]\n",
            "t.yaml:6:48: key 'hold': expected a duration such as", "got '10 parsecs'");
  parse_bad(BASE "limits: {request_timeout: -5s}\n",
            "t.yaml:7:27: key 'request_timeout': expected a duration", "got '-5s'");
}

Test(scenario_errors, phase_with_two_kinds) {
  parse_bad("name: t\nmodel: llama-tiny\ndeployments: [{tp: 1}]\nworkload:\n"
            "  prompts: [{input: 10, output: 5}]\n"
            "  phases:\n    - {ramp: {concurrency: [1]}, hold: 1s, rate: 4}\n",
            "t.yaml:7:44: key 'rate': expected one phase kind (ramp, rate or fixed) per phase, "
            "got both 'ramp' and 'rate'",
            NULL);
}

Test(scenario_errors, rate_phase_with_duration_and_requests) {
  parse_bad("name: t\nmodel: llama-tiny\ndeployments: [{tp: 1}]\nworkload:\n"
            "  prompts: [{input: 10, output: 5}]\n"
            "  phases:\n    - {rate: 4, duration: 10s, requests: 50}\n",
            "t.yaml:7:32: key 'requests': expected exactly one of duration or requests in a rate "
            "phase, got both",
            NULL);
}

Test(scenario_errors, key_of_another_phase_kind) {
  parse_bad("name: t\nmodel: llama-tiny\ndeployments: [{tp: 1}]\nworkload:\n"
            "  prompts: [{input: 10, output: 5}]\n"
            "  phases:\n    - {fixed: {requests: 5}, hold: 1s}\n",
            "t.yaml:7:30: key 'hold': not part of a fixed phase", NULL);
  parse_bad("name: t\nmodel: llama-tiny\ndeployments: [{tp: 1}]\nworkload:\n"
            "  prompts: [{input: 10, output: 5}]\n"
            "  phases:\n    - {rate: 4, requests: 5, burstiness: 2}\n",
            "t.yaml:7:30: key 'burstiness': only with arrival: gamma", NULL);
}

Test(scenario_errors, planner_refuses_a_deployment_for_memory) {
  parse_bad("name: t\nmodel: {preset: llama3-70b}\nhardware: {backend: cuda, profile: h100-sxm}\n"
            "deployments:\n  - {tp: 1}\nworkload:\n  prompts: [{input: 10, output: 5}]\n"
            "  phases: [{fixed: {requests: 10}}]\n",
            "t.yaml:5:6: deployment 'tp1' (tp=1 pp=1 dp=1) refused by the planner on h100-sxm: "
            "weights ",
            "exceed");
}

Test(scenario_errors, planner_refuses_an_invalid_layout) {
  parse_bad("name: t\nmodel: llama-tiny\ndeployments:\n  - {tp: 2}\n  - {tp: 3}\nworkload:\n"
            "  prompts: [{input: 10, output: 5}]\n  phases: [{fixed: {requests: 10}}]\n",
            "t.yaml:5:6: deployment 'tp3' (tp=3 pp=1 dp=1) refused by the planner on cpu: tp=3 "
            "does not divide",
            "valid tp: 1, 2, 4, 8");
}

Test(scenario_errors, deployment_larger_than_hardware_gpus) {
  parse_bad("name: t\nmodel: llama-tiny\nhardware: {gpus: 2}\ndeployments:\n  - {dp: 4}\n"
            "workload:\n  prompts: [{input: 10, output: 5}]\n  phases: [{fixed: {requests: 1}}]\n",
            "t.yaml:5:6: deployment 'dp4' (tp=1 pp=1 dp=4) needs 4 GPUs; hardware.gpus is 2",
            NULL);
}

Test(scenario_errors, mode_sim_is_not_yet_available) {
  parse_bad(BASE "mode: sim\n",
            "t.yaml:7:7: mode 'sim': simulated GPUs are not available yet in this version; use "
            "mode: real",
            NULL);
  parse_bad(BASE "mode: fake\n", "t.yaml:7:7: key 'mode': expected one of real, sim, got 'fake'",
            NULL);
}

Test(scenario_errors, fault_target_that_exists_nowhere) {
  parse_bad(BASE "faults:\n  - {at: 5s, kill: gpu, target: replica0.rank1}\n",
            "t.yaml:8:33: key 'target': 'replica0.rank1' exists in no deployment", "tp1");
  parse_bad(BASE "faults:\n  - {at: 5s, kill: replica, target: replica0.rank0}\n",
            "t.yaml:8:37: key 'target': expected replicaR, got 'replica0.rank0'", NULL);
  parse_bad(BASE "faults:\n  - {at: 5s, kill: gpu}\n",
            "t.yaml:8:6: missing required key 'target' (replicaR.rankK or every-rank", NULL);
}

Test(scenario_errors, fault_at_an_unknown_phase) {
  parse_bad(BASE "faults:\n  - {at_phase: warm, cancel_storm: {fraction: 0.5}}\n",
            "t.yaml:8:16: key 'at_phase': expected the name of a phase (fixed), got 'warm'", NULL);
  parse_bad(BASE "faults:\n  - {cancel_storm: {fraction: 0.5}}\n",
            "t.yaml:8:6: missing required key 'at' or 'at_phase'", NULL);
  parse_bad(BASE "faults:\n  - {at: 1s, clock_jump: {offset: +1h}, target: replica0}\n",
            "t.yaml:8:41: key 'target': a clock_jump fault takes no target", NULL);
}

Test(scenario_errors, missing_dataset_file) {
  parse_bad("name: t\nmodel: llama-tiny\ndeployments: [{tp: 1}]\nworkload:\n"
            "  dataset: no-such-file.jsonl\n  phases: [{fixed: {requests: 10}}]\n",
            "t.yaml:5:12: key 'dataset': cannot read '" DATA "/no-such-file.jsonl'", NULL);
}

Test(scenario_errors, prompts_and_dataset_together) {
  parse_bad("name: t\nmodel: llama-tiny\ndeployments: [{tp: 1}]\nworkload:\n"
            "  prompts: [{input: 10, output: 5}]\n  dataset: prompts.jsonl\n"
            "  phases: [{fixed: {requests: 10}}]\n",
            "t.yaml:6:3: key 'dataset': expected exactly one of prompts or dataset, got both",
            NULL);
}

Test(scenario_errors, unknown_model_preset) {
  parse_bad("name: t\nmodel: {preset: llama-huge}\ndeployments: [{tp: 1}]\nworkload:\n"
            "  prompts: [{input: 10, output: 5}]\n  phases: [{fixed: {requests: 10}}]\n",
            "t.yaml:2:17: key 'preset': unknown model preset 'llama-huge'", "llama-tiny");
}

Test(scenario_errors, yaml_syntax_error) {
  parse_bad("name: t\nmodel: [llama-tiny\n", "t.yaml:3:1: invalid YAML: ", NULL);
}

Test(scenario_errors, empty_file_and_non_mapping_root) {
  parse_bad("", "t.yaml: empty file", NULL);
  parse_bad("# only a comment\n", "t.yaml: empty file", NULL);
  parse_bad("- name: t\n", "t.yaml:1:3: expected a mapping of scenario keys", "got [...]");
}

Test(scenario_errors, unreadable_file_is_an_io_error) {
  scenario *s = NULL;
  sc_error err = {{0}};
  cr_expect_eq(scenario_load("/nonexistent/x.yaml", &s, &err), SC_IO);
  cr_expect_null(s);
  cr_expect(strstr(err.msg, "/nonexistent/x.yaml"), "%s", err.msg);
}

// --- the CLI

static char out[1 << 14];

Test(validate_cli, valid_file_exits_0_with_a_summary) {
  int rc = sc_test_run_cli("validate " DATA "/full.yaml", out, sizeof out);
  cr_expect_eq(rc, 0, "output: %s", out);
  cr_expect(strstr(out, "full.yaml: ok: scenario 'full-example'"), "%s", out);
  cr_expect(strstr(out, "5 deployments (tp2-pp2, dp2, tp1, dp4, tp4)"), "%s", out);
  rc = sc_test_run_cli("validate --quiet " DATA "/full.yaml", out, sizeof out);
  cr_expect_eq(rc, 0);
  cr_expect_str_eq(out, "");
}

Test(validate_cli, invalid_file_exits_2_naming_the_position) {
  const char *dir = sc_test_tmpdir("scn-cli");
  cr_assert_not_null(dir);
  char path[512], args[600];
  snprintf(path, sizeof path, "%s/bad.yaml", dir);
  const char *text = BASE "slo: {ttft_p95: 500}\n";
  cr_assert_eq(sc_test_write_file(path, text, strlen(text)), 0);
  snprintf(args, sizeof args, "validate %s", path);
  int rc = sc_test_run_cli(args, out, sizeof out);
  cr_expect_eq(rc, 2, "output: %s", out);
  char want[600];
  snprintf(want, sizeof want, "shardcheck validate: %s:7:7: unknown SLO key 'ttft_p95'", path);
  cr_expect(strstr(out, want), "expected '%s' in: %s", want, out);
  cr_expect(strstr(out, "did you mean ttft_p95_ms"), "%s", out);
}

Test(validate_cli, a_bad_dataset_line_exits_2_naming_file_and_line) {
  const char *dir = sc_test_tmpdir("scn-cli-ds");
  cr_assert_not_null(dir);
  char sc[512], ds[512], args[600];
  snprintf(ds, sizeof ds, "%s/prompts.jsonl", dir);
  const char *lines = "{\"prompt_tokens\": 12, \"output_tokens\": 4}\n{\"prompt_tokens\": \"x\"}\n";
  cr_assert_eq(sc_test_write_file(ds, lines, strlen(lines)), 0);
  snprintf(sc, sizeof sc, "%s/ds.yaml", dir);
  const char *text = "name: ds\nmodel: llama-tiny\ndeployments: [{tp: 1}]\n"
                     "workload:\n  dataset: prompts.jsonl\n"
                     "  phases: [{fixed: {requests: 2}}]\n";
  cr_assert_eq(sc_test_write_file(sc, text, strlen(text)), 0);
  snprintf(args, sizeof args, "validate %s", sc);
  int rc = sc_test_run_cli(args, out, sizeof out);
  cr_expect_eq(rc, 2, "output: %s", out);
  char want[600];
  snprintf(want, sizeof want, "%s:2: key 'prompt_tokens'", ds);
  cr_expect(strstr(out, want), "expected '%s' in: %s", want, out);
}

Test(validate_cli, missing_file_and_usage_exit_2) {
  cr_expect_eq(sc_test_run_cli("validate /nonexistent/x.yaml", out, sizeof out), 2);
  cr_expect(strstr(out, "/nonexistent/x.yaml"), "%s", out);
  cr_expect_eq(sc_test_run_cli("validate", out, sizeof out), 2);
  cr_expect(strstr(out, "missing FILE"), "%s", out);
  cr_expect_eq(sc_test_run_cli("validate --bogus x.yaml", out, sizeof out), 2);
}

Test(validate_cli, help_exits_0) {
  int rc = sc_test_run_cli("validate --help", out, sizeof out);
  cr_expect_eq(rc, 0);
  cr_expect(strstr(out, "usage: shardcheck validate"), "%s", out);
  cr_expect(strstr(out, "docs/scenarios.md"), "%s", out);
}
