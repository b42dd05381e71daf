// Tests for the scenario language (scenarios/scenario.c and its section files) and `shardcheck
// validate`: a full scenario parses with every field as written, defaults fill what is left
// out, scaling items expand (with dedupe, labels and the planner's auto choice), and each kind
// of bad input is one SC_INVALID naming its exact FILE:LINE:COL and key. mode: sim (its
// hardware keys, the resolved profile and planner parameters, its refusals), the
// --mode/--profile overrides (scenario_load_with), and every shipped scenario, with the
// planner's refusal of the tests/data copies that add {tp: 1}.
//
// Not here: the planner's arithmetic (tests/test_memplan.c), the strict flat reader itself
// (tests/test_memplan.c), reading dataset lines (the workload generator's tests).
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/hardware.h"
#include "config/presets.h"
#include "engine/memplan.h"
#include "engine/model.h"
#include "config/yaml_map.h"
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
  cr_expect_eq(strncmp(err.msg, prefix, strlen(prefix)), 0,
               "expected a message starting '%s', "
               "got '%s'",
               prefix, err.msg);
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
  cr_expect_eq(s->router.policy, ROUTER_ROUND_ROBIN);
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
  cr_expect_eq(s->router.policy, ROUTER_LEAST_OUTSTANDING);
  cr_expect_eq(s->router.detect_timeout_ns, 2 * SEC);
  cr_expect_eq(s->router.max_retries, 3);
  cr_expect_eq(s->router.backoff_ns, SEC / 20);
  cr_expect(s->router.resume);
  cr_expect(s->router.restart);
  scenario_free(s);
}

Test(scenario_parse, router_failover_keys) {
  scenario *s = parse_ok("name: t\nmodel: {preset: llama-tiny}\ndeployments: [{dp: 2}]\n"
                         "workload:\n  prompts: [{input: 10, output: 5}]\n"
                         "  phases: [{rate: 4, duration: 1m}]\n"
                         "router: {detect_timeout: 500ms, max_retries: 0, backoff: 1s, "
                         "resume: false, restart: false}\n");
  cr_expect_eq(s->router.detect_timeout_ns, SEC / 2);
  cr_expect_eq(s->router.max_retries, 0);
  cr_expect_eq(s->router.backoff_ns, SEC);
  cr_expect_not(s->router.resume);
  cr_expect_not(s->router.restart);
  scenario_free(s);
}

Test(scenario_errors, router_detect_timeout_and_retries_are_checked) {
  const char *head = "name: t\nmodel: {preset: llama-tiny}\ndeployments: [{dp: 2}]\n"
                     "workload:\n  prompts: [{input: 10, output: 5}]\n"
                     "  phases: [{rate: 4, duration: 1m}]\n";
  char text[512];
  snprintf(text, sizeof text, "%srouter: {detect_timeout: 0s}\n", head);
  parse_bad(text, "t.yaml:7:", "detect_timeout");
  snprintf(text, sizeof text, "%srouter: {max_retries: -1}\n", head);
  parse_bad(text, "t.yaml:7:", "max_retries");
  snprintf(text, sizeof text, "%srouter: {resume: maybe}\n", head);
  parse_bad(text, "t.yaml:7:", "resume");
}

// router.isolation mpi with a hostfile resolved against the scenario's directory: its slots
// are counted (slots=N, HOST:N, a bare HOST one; comments and blank lines skipped); one
// replica's tp x pp beyond them, a hostfile without isolation mpi, an unreadable one and a
// host of 0 slots are refused.
Test(scenario_parse, mpi_isolation_and_the_hostfile_slots) {
  const char *dir = sc_test_tmpdir("scn-hosts");
  char path[600];
  snprintf(path, sizeof path, "%s/hosts", dir);
  const char *hosts = "# the cluster\nnode1 slots=2\n\nnode2:3  # MPICH's form\nnode3\n";
  cr_assert_eq(sc_test_write_file(path, hosts, strlen(hosts)), 0);
  snprintf(path, sizeof path, "%s/zero", dir);
  cr_assert_eq(sc_test_write_file(path, "node1 slots=0\n", 14), 0);
  const char *fmt = "name: t\nmodel: {preset: llama-tiny}\nhardware: {backend: cpu, hostfile: %s}\n"
                    "deployments: [{tp: 2, pp: %d, dp: 3}]\nworkload:\n"
                    "  prompts: [{input: 10, output: 5}]\n  phases: [{fixed: {requests: 1}}]\n"
                    "router: {isolation: %s}\n";
  char text[1024];
  sc_error err = {{0}};
  scenario *s = NULL;
  snprintf(text, sizeof text, fmt, "hosts", 3, "mpi"); // 6 slots: one replica's 6 ranks fit
  cr_assert_eq(scenario_parse(text, strlen(text), "t.yaml", dir, &s, &err), SC_OK, "%s", err.msg);
  cr_expect(scenario_mpi_replicas(s));
  cr_expect(scenario_isolates_processes(s));
  cr_expect_eq(s->hardware.hostfile_slots, 6);
  snprintf(path, sizeof path, "%s/hosts", dir);
  cr_expect_str_eq(s->hardware.hostfile, path);
  scenario_free(s);
  s = NULL;
  const struct {
    const char *file, *iso;
    int pp;
    const char *needle;
  } bad[] = {
      {.file = "hosts",
       .iso = "mpi",
       .pp = 4,
       .needle = "deployment 'tp2-pp4-dp3' (tp=2 pp=4) runs each replica as an MPI job of 8 "
                 "processes; hardware.hostfile "},
      {.file = "hosts", .iso = "process", .pp = 1, .needle = "it needs router.isolation: mpi"},
      {.file = "nothere", .iso = "mpi", .pp = 1, .needle = "key 'hostfile': cannot read"},
      {.file = "zero", .iso = "mpi", .pp = 1, .needle = "slots must be an integer >= 1"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(text, sizeof text, fmt, bad[i].file, bad[i].pp, bad[i].iso);
    err.msg[0] = 0;
    cr_expect_eq(scenario_parse(text, strlen(text), "t.yaml", dir, &s, &err), SC_INVALID,
                 "%s: accepted", bad[i].needle);
    cr_expect(strstr(err.msg, bad[i].needle), "'%s' not in '%s'", bad[i].needle, err.msg);
    scenario_free(s);
    s = NULL;
  }
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

Test(scenario_errors, mode_is_real_or_sim) {
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

// --- mode: sim

// A sim scenario of llama3-8b with the given hardware mapping and deployments.
#define SIM(hardware, deployments)                                                                 \
  "name: t\nmodel: {preset: llama3-8b}\nmode: sim\nhardware: " hardware "\n"                      \
  "deployments: " deployments "\nworkload:\n"                                                      \
  "  prompts: [{input: 10, output: 5}]\n  phases: [{fixed: {requests: 1}}]\n"

// Writes a profile like h100-sxm with gpus_per_node and host_cores to DIR/NAME.yaml; returns
// the path (static buffer).
static const char *write_profile(const char *tag, int gpus_per_node, int host_cores) {
  const char *dir = sc_test_tmpdir(tag);
  cr_assert_not_null(dir);
  static char path[512];
  snprintf(path, sizeof path, "%s/%s.yaml", dir, tag);
  char text[1024];
  snprintf(text, sizeof text,
           "name: %s\ndescription: \"a test device\"\nmem_bytes: 85899345920\nmem_bw: 3.35e12\n"
           "flops_bf16: 989.4e12\nflops_fp16: 989.4e12\nflops_fp32: 67e12\nflops_int8: 0\n"
           "link: nvlink4\nlink_bw: 450e9\nlink_latency_s: 2e-6\ngpus_per_node: %d\n"
           "host_cores: %d\n",
           tag, gpus_per_node, host_cores);
  cr_assert_eq(sc_test_write_file(path, text, strlen(text)), 0);
  return path;
}

Test(sim_mode, is_accepted_and_fills_profile_gpus_and_planner_params) {
  scenario *s = parse_ok(SIM("{profile: h100-sxm, gpus: 4}", "[{tp: 2}, {dp: 4}]"));
  cr_expect_eq(s->mode, SCN_MODE_SIM);
  cr_expect_str_eq(s->hardware.backend, "", "no backend in mode: sim");
  cr_expect_str_eq(s->hardware.profile, "h100-sxm");
  cr_expect_eq(s->hardware.gpus, 4);
  cr_expect_str_eq(s->hardware.link, "");
  cr_expect_eq(s->hardware.nodes, 0);
  cr_assert(s->have_hw);
  cr_expect_str_eq(s->hw.name, "h100-sxm");
  cr_expect_str_eq(s->hw.link, "nvlink4", "the profile's own link");
  cr_expect_eq(s->hw.gpus_per_node, 8);
  cr_expect_float_eq(s->hw.sim.mem_bytes, s->hw.mem_bytes, 1);
  cr_expect_eq(s->mp.weight_dtype, SC_BF16, "llama3-8b's own dtype");
  cr_expect_eq(s->mp.kv_dtype, SC_BF16, "GPUs keep KV in bf16");
  cr_expect_float_eq(s->mp.headroom, 0.10, 1e-12);
  cr_expect_eq(s->mp.block_size, 16);
  cr_expect_eq(s->mp.max_batch_tokens, 8192);
  cr_expect_eq(s->mp.max_seqs, 256);
  scenario_free(s);
}

Test(sim_mode, planner_params_follow_limits_and_dtype) {
  scenario *s = parse_ok("name: t\nmodel: {preset: llama3-70b, dtype: int4}\nmode: sim\n"
                         "hardware: {profile: rtx5090, gpus: 2}\ndeployments: [{tp: 2}]\n"
                         "workload:\n  prompts: [{input: 10, output: 5}]\n"
                         "  phases: [{fixed: {requests: 1}}]\n"
                         "limits: {kv_headroom: 0.05, block_size: 32, token_budget: 4096, "
                         "max_running: 64}\n");
  cr_expect_eq(s->mp.weight_dtype, SC_I4, "int4 weights are planned at int4 in mode: sim");
  cr_expect_float_eq(s->mp.headroom, 0.05, 1e-12);
  cr_expect_eq(s->mp.block_size, 32);
  cr_expect_eq(s->mp.max_batch_tokens, 4096);
  cr_expect_eq(s->mp.max_seqs, 64);
  memplan_layout l;
  memplan_eval(&s->model.config, &s->hw, &s->mp, 2, 1, 1, &l);
  cr_expect(l.fits, "the parsed params are the planner's: %s", l.why);
  scenario_free(s);
}

// fp8 weights and KV cache (sim mode, GPU profiles): planned at a byte each; a CPU profile's
// engine keeps its KV in f32, and anything else than auto or fp8 is refused where it is written.
Test(sim_mode, fp8_weights_and_kv_cache_are_planned_at_a_byte) {
  const char *fmt = "name: t\nmodel: {preset: llama3-8b, dtype: fp8, kv_cache_dtype: %s}\n"
                    "mode: sim\nhardware: {profile: %s, gpus: 1}\ndeployments: [{tp: 1}]\n"
                    "workload:\n  prompts: [{input: 10, output: 5}]\n"
                    "  phases: [{fixed: {requests: 1}}]\n";
  char text[512];
  snprintf(text, sizeof text, fmt, "fp8_e4m3", "h100-sxm");
  scenario *s = parse_ok(text);
  cr_expect_eq(s->mp.weight_dtype, SC_FP8);
  cr_expect_eq(s->mp.kv_dtype, SC_FP8);
  cr_expect_str_eq(s->model.kv_cache_dtype, "fp8");
  scenario_free(s);
  snprintf(text, sizeof text, fmt, "auto", "h100-sxm");
  s = parse_ok(text);
  cr_expect_eq(s->mp.kv_dtype, SC_BF16, "auto: the activations' dtype");
  scenario_free(s);
  snprintf(text, sizeof text, fmt, "int8", "h100-sxm");
  parse_bad(text, "t.yaml:2:", "kv_cache_dtype");
  snprintf(text, sizeof text, fmt, "fp8", "cpu");
  parse_bad(text, "t.yaml:2:", "f32");
}

Test(sim_mode, real_mode_fills_the_profile_and_planner_params_too) {
  scenario *s = parse_ok(BASE);
  cr_assert(s->have_hw, "the real CPU default profile is cpu");
  cr_expect_str_eq(s->hw.name, "cpu");
  cr_expect_eq(s->mp.kv_dtype, SC_F32, "the CPU engine keeps KV in f32");
  cr_expect_eq(s->mp.weight_dtype, SC_F32);
  scenario_free(s);
  s = parse_ok("name: t\nmodel: {preset: llama3-8b}\n"
               "hardware: {backend: cuda, profile: h100-sxm, devices: [0]}\n"
               "deployments: [{tp: 1}]\nworkload:\n  prompts: [{input: 10, output: 5}]\n"
               "  phases: [{fixed: {requests: 1}}]\n");
  cr_assert(s->have_hw);
  cr_expect_str_eq(s->hw.name, "h100-sxm");
  cr_expect_eq(s->mp.kv_dtype, SC_BF16);
  scenario_free(s);
  s = parse_ok("name: t\nmodel: {preset: llama3-8b}\nhardware: {backend: cuda, devices: [0]}\n"
               "deployments: [{tp: 1}]\nworkload:\n  prompts: [{input: 10, output: 5}]\n"
               "  phases: [{fixed: {requests: 1}}]\n");
  cr_expect_not(s->have_hw, "cuda without a profile has none");
  scenario_free(s);
}

Test(sim_mode, a_cpu_profile_plans_kv_in_f32) {
  char text[1024];
  snprintf(text, sizeof text,
           "name: t\nmodel: llama-tiny\nmode: sim\nhardware: {profile: %s, gpus: 2}\n"
           "deployments: [{tp: 2}]\nworkload:\n  prompts: [{input: 10, output: 5}]\n"
           "  phases: [{fixed: {requests: 1}}]\n",
           write_profile("host4", 8, 4));
  scenario *s = parse_ok(text);
  cr_expect_eq(s->hw.sim.host_cores, 4);
  cr_expect_eq(s->mp.kv_dtype, SC_F32, "host_cores > 0: the CPU engine's KV");
  scenario_free(s);
}

Test(sim_mode, link_replaces_the_profiles_intra_node_link) {
  scenario *s = parse_ok(SIM("{profile: h100-sxm, gpus: 8, link: pcie4}", "[{tp: 8}]"));
  cr_expect_str_eq(s->hardware.link, "pcie4");
  cr_expect_str_eq(s->hw.link, "pcie4");
  cr_expect_float_eq(s->hw.link_bw, 31.5e9, 1);
  cr_expect_str_eq(s->hw.sim.intra.name, "pcie4");
  cr_expect_float_eq(s->hw.sim.intra.bw, 31.5e9, 1);
  scenario_free(s);
}

Test(sim_mode, nodes_bound_the_gpus) {
  scenario *s = parse_ok(SIM("{profile: h100-sxm, gpus: 16, nodes: 2}", "[{tp: 8, dp: 2}]"));
  cr_expect_eq(s->hardware.nodes, 2);
  cr_expect_eq(s->hardware.gpus, 16);
  scenario_free(s);
  parse_bad(SIM("{profile: h100-sxm, gpus: 20, nodes: 2}", "[{tp: 1}]"),
            "t.yaml:4:37: key 'gpus': expected at most nodes x gpus_per_node = 2 x 8 = 16",
            "got '20'");
  parse_bad(SIM("{profile: h100-sxm, gpus: 2, nodes: -1}", "[{tp: 1}]"),
            "t.yaml:4:47: key 'nodes': expected an integer >= 0", NULL);
}

Test(sim_mode, a_tp_group_larger_than_a_node_must_span_whole_nodes) {
  char text[1024];
  const char *six = write_profile("six", 6, 0);
  snprintf(text, sizeof text,
           "name: t\nmodel: llama3-8b\nmode: sim\nhardware: {profile: %s, gpus: 16}\n"
           "deployments:\n  - {tp: 4, dp: 2}\n  - {tp: 8}\nworkload:\n"
           "  prompts: [{input: 10, output: 5}]\n  phases: [{fixed: {requests: 1}}]\n",
           six);
  parse_bad(text, "t.yaml:7:6: deployment 'tp8' (tp=8 pp=1 dp=1): a TP group larger than a node "
            "must span whole nodes (tp a multiple of 6", "inter-node link");
  // 8 GPUs over two rtx5090 workstations of 4: whole nodes
  scenario *s = parse_ok("name: t\nmodel: {preset: llama3-70b, dtype: int4}\nmode: sim\n"
                         "hardware: {profile: rtx5090, gpus: 8}\ndeployments: [{tp: 8}]\n"
                         "workload:\n  prompts: [{input: 10, output: 5}]\n"
                         "  phases: [{fixed: {requests: 1}}]\n");
  cr_expect_eq(s->deployments[0].tp, 8);
  scenario_free(s);
}

Test(sim_mode, every_deployment_must_fit_the_gpus) {
  parse_bad(SIM("{profile: h100-sxm, gpus: 2}", "\n  - {tp: 2}\n  - {tp: 2, dp: 2}"),
            "t.yaml:7:6: deployment 'tp2-dp2' (tp=2 pp=1 dp=2) needs 4 GPUs; hardware.gpus is 2",
            NULL);
}

Test(sim_mode, the_planner_refuses_with_the_profile) {
  parse_bad("name: t\nmodel: llama3-70b\nmode: sim\nhardware: {profile: h100-sxm, gpus: 8}\n"
            "deployments:\n  - {tp: 1}\nworkload:\n  prompts: [{input: 10, output: 5}]\n"
            "  phases: [{fixed: {requests: 1}}]\n",
            "t.yaml:6:6: deployment 'tp1' (tp=1 pp=1 dp=1) refused by the planner on h100-sxm: "
            "weights 141.11 GB",
            "exceed");
}

Test(sim_mode_errors, hardware_profile_and_gpus_are_required) {
  parse_bad("name: t\nmodel: llama3-8b\nmode: sim\ndeployments: [{tp: 1}]\nworkload:\n"
            "  prompts: [{input: 10, output: 5}]\n  phases: [{fixed: {requests: 1}}]\n",
            "t.yaml:1:1: missing required key 'hardware' (mode: sim", "h100-sxm, h200");
  parse_bad(SIM("{gpus: 2}", "[{tp: 1}]"),
            "t.yaml:4:12: missing required key 'profile' (mode: sim", "a100-80g, cpu, h100-sxm");
  parse_bad(SIM("{profile: h100-sxm}", "[{tp: 1}]"), "t.yaml:4:12: missing required key 'gpus'",
            NULL);
  parse_bad(SIM("{profile: h100-sxm, gpus: 0}", "[{tp: 1}]"),
            "t.yaml:4:37: key 'gpus': expected an integer >= 1, got '0'", NULL);
}

Test(sim_mode_errors, real_mode_keys_are_refused) {
  parse_bad(SIM("{backend: cpu, profile: h100-sxm, gpus: 1}", "[{tp: 1}]"),
            "t.yaml:4:12: key 'backend': only in mode: real", NULL);
  parse_bad(SIM("{profile: h100-sxm, gpus: 2, devices: [0, 1]}", "[{tp: 1}]"),
            "t.yaml:4:40: key 'devices': only in mode: real", NULL);
  parse_bad(SIM("{profile: h100-sxm, gpus: 1, threads: 2}", "[{tp: 1}]"),
            "t.yaml:4:40: key 'threads': only in mode: real", NULL);
}

Test(sim_mode_errors, sim_mode_keys_are_refused_in_real_mode) {
  parse_bad(BASE "hardware: {link: pcie4}\n", "t.yaml:7:12: key 'link': only in mode: sim",
            NULL);
  parse_bad(BASE "hardware: {gpus: 2, nodes: 1}\n", "t.yaml:7:21: key 'nodes': only in mode: sim",
            NULL);
}

Test(sim_mode_errors, unknown_link_lists_the_known_ones) {
  parse_bad(SIM("{profile: h100-sxm, gpus: 2, link: nvlink9}", "[{tp: 1}]"),
            "t.yaml:4:46: key 'link': unknown link 'nvlink9'; known links: ",
            "nvlink4, nvlink5, pcie4");
}

Test(sim_mode_errors, unknown_profile_lists_the_embedded_ones) {
  parse_bad(SIM("{profile: h900, gpus: 2}", "[{tp: 1}]"),
            "t.yaml:4:21: key 'profile': unknown hardware profile 'h900'", "h100-sxm");
}

Test(sim_mode_errors, clock_jump_is_refused_other_faults_are_checked) {
  parse_bad(SIM("{profile: h100-sxm, gpus: 2}", "[{dp: 2}]")
                "faults:\n  - {at: 1s, clock_jump: {offset: +1h}}\n",
            "t.yaml:10:14: clock_jump: not available in mode: sim (the virtual clock has no wall "
            "clock to jump)",
            NULL);
  parse_bad(SIM("{profile: h100-sxm, gpus: 2}", "[{dp: 2}]")
                "faults:\n  - {at: 1s, kill: gpu, target: replica2.rank0}\n",
            "t.yaml:10:33: key 'target': 'replica2.rank0' exists in no deployment", NULL);
  scenario *s = parse_ok(SIM("{profile: h100-sxm, gpus: 2}", "[{dp: 2}]")
                             "faults:\n  - {at: 1s, kill: gpu, target: replica1.rank0}\n"
                             "  - {at: 2s, slow: {on: link, latency: 50us}}\n");
  cr_assert_eq(s->n_faults, 2);
  cr_expect_eq(s->faults[0].kind, SCN_FAULT_KILL);
  cr_expect_eq(s->faults[1].latency_ns, 50000);
  scenario_free(s);
}

// --- overrides (shardcheck run --mode / --profile)

#define SHIPPED SC_SOURCE_DIR "/scenarios"

static void load_with_bad(const char *path, const char *mode, const char *profile,
                          const char *prefix, const char *needle) {
  scenario *s = (scenario *)1;
  sc_error err = {{0}};
  scn_overrides ov = {.mode = mode, .profile = profile};
  sc_status st = scenario_load_with(path, &ov, &s, &err);
  cr_assert_eq(st, SC_INVALID, "expected SC_INVALID, got %s (%s)", sc_status_name(st), err.msg);
  cr_assert_null(s);
  cr_expect_eq(strncmp(err.msg, prefix, strlen(prefix)), 0, "expected '%s...', got '%s'", prefix,
               err.msg);
  if (needle) cr_expect(strstr(err.msg, needle), "'%s' missing from '%s'", needle, err.msg);
}

Test(overrides, mode_sim_simulates_a_real_cpu_scenario_on_the_cpu_profile) {
  scenario *s = NULL;
  sc_error err = {{0}};
  scn_overrides ov = {.mode = "sim"};
  cr_assert_eq(scenario_load_with(SHIPPED "/quickstart.yaml", &ov, &s, &err), SC_OK, "%s",
               err.msg);
  cr_expect_eq(s->mode, SCN_MODE_SIM);
  cr_expect_str_eq(s->hardware.backend, "", "the backend is cleared");
  cr_expect_str_eq(s->hardware.profile, "cpu", "a real CPU scenario's profile");
  cr_expect_eq(s->hardware.gpus, 4, "the largest deployment's GPUs");
  cr_assert(s->have_hw);
  cr_expect_str_eq(s->hw.name, "cpu");
  cr_expect_eq(s->n_deployments, 5, "deployments are kept");
  scenario_free(s);
}

Test(overrides, profile_replaces_the_files_and_resolves_against_the_cwd) {
  scenario *s = NULL;
  sc_error err = {{0}};
  scn_overrides ov = {.mode = "sim", .profile = "h100-sxm"};
  cr_assert_eq(scenario_load_with(SHIPPED "/quickstart.yaml", &ov, &s, &err), SC_OK, "%s",
               err.msg);
  cr_expect_str_eq(s->hardware.profile, "h100-sxm");
  cr_expect_str_eq(s->hw.name, "h100-sxm");
  cr_expect_eq(s->mp.kv_dtype, SC_BF16);
  scenario_free(s);
  // a relative .yaml path is the working directory's, not the scenario's
  const char *path = write_profile("cwdprof", 8, 0);
  char dir[512];
  snprintf(dir, sizeof dir, "%s", path);
  *strrchr(dir, '/') = 0;
  cr_assert_eq(chdir(dir), 0);
  ov = (scn_overrides){.profile = "cwdprof.yaml"};
  cr_assert_eq(scenario_load_with(SHIPPED "/scaling-llama3-8b-h100.yaml", &ov, &s, &err), SC_OK,
               "%s", err.msg);
  cr_expect_str_eq(s->hardware.profile, "cwdprof.yaml");
  cr_expect_str_eq(s->hw.name, "cwdprof");
  cr_expect_eq(s->mode, SCN_MODE_SIM, "no --mode: the file's");
  scenario_free(s);
}

Test(overrides, mode_real_on_a_sim_scenario_plans_for_the_cpu_backend) {
  scenario *s = NULL;
  sc_error err = {{0}};
  scn_overrides ov = {.mode = "real"};
  cr_assert_eq(scenario_load_with(SHIPPED "/scaling-llama3-8b-h100.yaml", &ov, &s, &err), SC_OK,
               "%s", err.msg);
  cr_expect_eq(s->mode, SCN_MODE_REAL);
  cr_expect_str_eq(s->hardware.backend, "cpu");
  cr_expect_str_eq(s->hardware.profile, "h100-sxm");
  cr_expect_eq(s->mp.kv_dtype, SC_F32);
  scenario_free(s);
  const char *dir = sc_test_tmpdir("ov-link");
  cr_assert_not_null(dir);
  char path[512];
  snprintf(path, sizeof path, "%s/link.yaml", dir);
  const char *text = SIM("{profile: h100-sxm, gpus: 2, link: pcie4}", "[{tp: 2}]");
  cr_assert_eq(sc_test_write_file(path, text, strlen(text)), 0);
  char want[600];
  snprintf(want, sizeof want, "%s:4:40: key 'link': only in mode: sim (the mode is real: --mode "
           "real)", path);
  load_with_bad(path, "real", NULL, want, NULL);
}

Test(overrides, a_real_scenario_with_a_clock_jump_cannot_be_simulated) {
  char want[600];
  snprintf(want, sizeof want, "%s/full.yaml:", DATA);
  load_with_bad(DATA "/full.yaml", "sim", NULL, want, "clock_jump: not available in mode: sim");
}

Test(overrides, cuda_without_a_profile_needs_one_to_be_simulated) {
  const char *dir = sc_test_tmpdir("ov-cuda");
  cr_assert_not_null(dir);
  char path[512];
  snprintf(path, sizeof path, "%s/cuda.yaml", dir);
  const char *text = "name: t\nmodel: {preset: llama3-8b}\n"
                     "hardware: {backend: cuda, devices: [0, 1]}\ndeployments: [{tp: 2}]\n"
                     "workload:\n  prompts: [{input: 10, output: 5}]\n"
                     "  phases: [{fixed: {requests: 1}}]\n";
  cr_assert_eq(sc_test_write_file(path, text, strlen(text)), 0);
  load_with_bad(path, "sim", NULL, "--mode: sim needs a hardware profile", "--profile");
  scenario *s = NULL;
  sc_error err = {{0}};
  scn_overrides ov = {.mode = "sim", .profile = "h200"};
  cr_assert_eq(scenario_load_with(path, &ov, &s, &err), SC_OK, "%s", err.msg);
  cr_expect_eq(s->hardware.gpus, 2, "the devices listed");
  cr_expect_eq(s->hardware.n_devices, 0, "no CUDA devices in mode: sim");
  cr_expect_str_eq(s->hw.name, "h200");
  scenario_free(s);
}

// A fixed-url target (one server already up) may leave out `deployments` (docs/targets.md): its
// prediction (--mode sim) simulates that one server as one deployment of one GPU, as `validate`
// reads it. A launched target still needs them: they are the layouts to launch.
Test(overrides, a_fixed_url_target_without_deployments_is_predicted_as_tp1) {
  const char *dir = sc_test_tmpdir("ov-fixed-url");
  cr_assert_not_null(dir);
  char path[512];
  snprintf(path, sizeof path, "%s/fixed.yaml", dir);
  const char *text = "name: t\ntarget:\n  openai: {url: \"http://127.0.0.1:8000/v1\", "
                     "model: m, vocab_size: 512}\nmodel: {preset: llama-tiny}\n"
                     "workload:\n  prompts: [{input: 10, output: 5}]\n"
                     "  phases: [{fixed: {requests: 1}}]\n";
  cr_assert_eq(sc_test_write_file(path, text, strlen(text)), 0);
  scenario *s = NULL;
  sc_error err = {{0}};
  cr_assert_eq(scenario_load_with(path, NULL, &s, &err), SC_OK, "%s", err.msg);
  cr_expect_eq(s->n_deployments, 1);
  scenario_free(s);
  s = NULL;
  scn_overrides ov = {.mode = "sim"};
  cr_assert_eq(scenario_load_with(path, &ov, &s, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(s->n_deployments, 1);
  cr_expect_eq(s->deployments[0].tp * s->deployments[0].pp * s->deployments[0].dp, 1);
  cr_expect_str_eq(s->deployments[0].label, "tp1");
  cr_expect_eq(s->mode, SCN_MODE_SIM);
  scenario_free(s);
  // launched: the deployments are still required
  snprintf(path, sizeof path, "%s/launched.yaml", dir);
  const char *launched = "name: t\ntarget:\n  openai: {url: \"http://127.0.0.1:{port}/v1\", "
                         "launch: \"x --port {port}\", model: m, vocab_size: 512}\n"
                         "model: {preset: llama-tiny}\n"
                         "workload:\n  prompts: [{input: 10, output: 5}]\n"
                         "  phases: [{fixed: {requests: 1}}]\n";
  cr_assert_eq(sc_test_write_file(path, launched, strlen(launched)), 0);
  load_with_bad(path, "sim", NULL, path, "missing required key 'deployments'");
}

Test(overrides, unknown_values_name_the_option) {
  load_with_bad(SHIPPED "/quickstart.yaml", "fake", NULL, "--mode: expected real or sim",
                "'fake'");
  load_with_bad(SHIPPED "/quickstart.yaml", "sim", "h900",
                "--profile: unknown hardware profile 'h900'", "h100-sxm");
  load_with_bad(SHIPPED "/quickstart.yaml", NULL, "",
                "--profile: expected a hardware profile name or a .yaml path", NULL);
}

Test(overrides, null_overrides_are_scenario_load) {
  scenario *a = NULL, *b = NULL;
  sc_error err = {{0}};
  cr_assert_eq(scenario_load_with(SHIPPED "/long-context.yaml", NULL, &a, &err), SC_OK, "%s",
               err.msg);
  scn_overrides none = {0};
  cr_assert_eq(scenario_load_with(SHIPPED "/long-context.yaml", &none, &b, &err), SC_OK, "%s",
               err.msg);
  cr_expect_eq(a->mode, b->mode);
  cr_expect_str_eq(a->hardware.profile, b->hardware.profile);
  cr_expect_eq(a->hardware.gpus, b->hardware.gpus);
  cr_expect_str_eq(a->path, SHIPPED "/long-context.yaml");
  scenario_free(a);
  scenario_free(b);
}

// --- the shipped scenarios

Test(shipped, every_scenario_file_validates) {
  DIR *d = opendir(SHIPPED);
  cr_assert_not_null(d);
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len < 6 || strcmp(e->d_name + len - 5, ".yaml")) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", SHIPPED, e->d_name);
    scenario *s = NULL;
    sc_error err = {{0}};
    cr_expect_eq(scenario_load(path, &s, &err), SC_OK, "%s: %s", e->d_name, err.msg);
    scenario_free(s);
    n++;
  }
  closedir(d);
  cr_expect_geq(n, 7, "found %d shipped scenarios", n);
}

// Loads a shipped scenario and checks mode sim, profile, gpus and deployment labels.
static scenario *shipped_sim(const char *file, const char *profile, int gpus,
                             const char *want_labels) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", SHIPPED, file);
  scenario *s = NULL;
  sc_error err = {{0}};
  cr_assert_eq(scenario_load(path, &s, &err), SC_OK, "%s", err.msg);
  cr_expect_eq(s->mode, SCN_MODE_SIM, "%s", file);
  cr_expect_str_eq(s->hardware.profile, profile);
  cr_expect_eq(s->hardware.gpus, gpus);
  char buf[256];
  cr_expect_str_eq(labels(s, buf, sizeof buf), want_labels);
  return s;
}

Test(shipped, sim_scenarios_have_their_layouts) {
  scenario *s = shipped_sim("scaling-llama3-8b-h100.yaml", "h100-sxm", 4, "tp1 dp2 dp4 tp2 tp4");
  cr_expect_str_eq(s->model.config.name, "llama3-8b");
  cr_expect_eq(s->workload.phases[0].concurrency[s->workload.phases[0].n_concurrency - 1], 256);
  scenario_free(s);
  s = shipped_sim("scaling-llama3-70b-h100.yaml", "h100-sxm", 8,
                  "tp2 tp4 tp2-dp2 tp2-pp2 tp8 tp4-dp2");
  cr_expect_eq(s->mp.weight_dtype, SC_BF16);
  scenario_free(s);
  s = shipped_sim("rtx5090-70b-int4.yaml", "rtx5090", 2, "tp2 pp2");
  cr_expect_eq(s->mp.weight_dtype, SC_I4);
  cr_expect_str_eq(s->hw.link, "pcie5", "the profile's PCIe link");
  scenario_free(s);
  s = shipped_sim("long-context.yaml", "h100-sxm", 1, "tp1");
  scenario_free(s);
}

// Phases shorter than a few minutes of simulated time, so a run takes seconds.
Test(shipped, sim_scenarios_are_short) {
  static const char *const files[] = {"scaling-llama3-8b-h100.yaml",
                                      "scaling-llama3-70b-h100.yaml", "rtx5090-70b-int4.yaml",
                                      "long-context.yaml"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", SHIPPED, files[i]);
    scenario *s = NULL;
    sc_error err = {{0}};
    cr_assert_eq(scenario_load(path, &s, &err), SC_OK, "%s", err.msg);
    for (int p = 0; p < s->workload.n_phases; p++) {
      uint64_t ns = scenario_phase_duration_ns(&s->workload.phases[p]);
      cr_expect(ns > 0 && ns <= 180 * SEC, "%s phase %d: %llu ns", files[i], p,
                (unsigned long long)ns);
    }
    scenario_free(s);
  }
}

// long-context.yaml's claim: KV, not weights, limits it; the ramp starts below the number
// of full sequences the KV holds and ends above it.
Test(shipped, long_context_ramps_past_the_kv_capacity) {
  scenario *s = shipped_sim("long-context.yaml", "h100-sxm", 1, "tp1");
  const scn_class *cl = &s->workload.classes[0];
  cr_assert_eq(s->workload.n_classes, 1);
  cr_assert(cl->input.kind == SCN_DIST_FIXED && cl->output.kind == SCN_DIST_FIXED);
  cr_expect_geq(cl->input.a, 32000, "32k-token prompts");
  cr_expect_leq(cl->input.a + cl->output.a, s->model.config.max_seq_len, "within the context");
  memplan_layout l;
  memplan_eval(&s->model.config, &s->hw, &s->mp, 1, 1, 1, &l);
  cr_assert(l.fits, "%s", l.why);
  cr_expect_lt(l.weight_bytes, l.kv_bytes, "weights are the smaller part");
  double fit = (double)l.kv_tokens / (cl->input.a + cl->output.a);
  const scn_phase *p = &s->workload.phases[0];
  cr_expect_lt(p->concurrency[0], fit);
  cr_expect_gt(p->concurrency[p->n_concurrency - 1], fit, "the ramp ends past %.1f sequences",
               fit);
  scenario_free(s);
}

// The copy in tests/data is the shipped file plus one deployment line.
static void expect_copy_plus_line(const char *shipped, const char *copy, const char *line) {
  char *a = NULL, *b = NULL;
  size_t na = 0, nb = 0;
  sc_error err = {{0}};
  cr_assert_eq(yaml_map_slurp(shipped, 1 << 20, &a, &na, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(yaml_map_slurp(copy, 1 << 20, &b, &nb, &err), SC_OK, "%s", err.msg);
  char *at = strstr(b, line);
  cr_assert_not_null(at, "'%s' missing from %s", line, copy);
  size_t ll = strlen(line);
  memmove(at, at + ll, nb - (size_t)(at - b) - ll + 1);
  cr_expect_str_eq(b, a, "%s drifted from %s", copy, shipped);
  free(a);
  free(b);
}

Test(shipped, validate_refuses_70b_on_one_h100_for_memory) {
  expect_copy_plus_line(SHIPPED "/scaling-llama3-70b-h100.yaml",
                        SC_SOURCE_DIR "/tests/data/scaling-llama3-70b-h100-tp1.yaml",
                        "  - {tp: 1}\n");
  int rc = sc_test_run_cli("validate " SC_SOURCE_DIR "/tests/data/scaling-llama3-70b-h100-tp1.yaml",
                           out, sizeof out);
  cr_expect_eq(rc, 2, "output: %s", out);
  cr_expect(strstr(out, "deployment 'tp1' (tp=1 pp=1 dp=1) refused by the planner on h100-sxm: "
                        "weights 141.11 GB"), "%s", out);
  cr_expect(strstr(out, "exceed 77.31 GB usable"), "%s", out);
}

Test(shipped, validate_refuses_70b_int4_on_one_rtx5090_for_memory) {
  expect_copy_plus_line(SHIPPED "/rtx5090-70b-int4.yaml",
                        SC_SOURCE_DIR "/tests/data/rtx5090-70b-int4-tp1.yaml", "  - {tp: 1}\n");
  int rc = sc_test_run_cli("validate " SC_SOURCE_DIR "/tests/data/rtx5090-70b-int4-tp1.yaml", out,
                           sizeof out);
  cr_expect_eq(rc, 2, "output: %s", out);
  cr_expect(strstr(out, "deployment 'tp1' (tp=1 pp=1 dp=1) refused by the planner on rtx5090: "
                        "weights "), "%s", out);
  cr_expect(strstr(out, "exceed 30.92 GB usable"), "%s", out);
}

Test(shipped, validate_summarizes_a_sim_scenario) {
  int rc = sc_test_run_cli("validate " SHIPPED "/scaling-llama3-70b-h100.yaml", out, sizeof out);
  cr_expect_eq(rc, 0, "output: %s", out);
  cr_expect(strstr(out, "mode sim, model llama3-70b (bf16, shapes only), 8 simulated GPUs "
                        "(profile h100-sxm), 6 deployments (tp2, tp4, tp2-dp2, tp2-pp2, tp8, "
                        "tp4-dp2)"), "%s", out);
}

// --- gate defaults

Test(scenario_gate, the_gate_section_reads_percentages_fractions_and_metrics) {
  scenario *s = parse_ok(BASE "gate: {tolerance: 7.5%, alpha: 0.01, metrics: {tpot_p95_ms: 10%, "
                              "output_tok_s: 0.03}}\n");
  cr_expect_float_eq(s->gate.tolerance, 0.075, 1e-12);
  cr_expect_float_eq(s->gate.alpha, 0.01, 1e-12);
  cr_assert_eq(s->gate.n, 2);
  cr_expect_str_eq(s->gate.metrics[0].key, "tpot_p95_ms");
  cr_expect_float_eq(s->gate.metrics[0].tol, 0.10, 1e-12);
  cr_expect_float_eq(s->gate.metrics[1].tol, 0.03, 1e-12);
  scenario_free(s);
  s = parse_ok(BASE);
  cr_expect_lt(s->gate.tolerance, 0, "absent: the gate's own default");
  cr_expect_eq(s->gate.n, 0);
  scenario_free(s);
}

Test(scenario_gate, bad_gate_keys_are_refused_where_they_are) {
  parse_bad(BASE "gate: {tolerance: lots}\n", "t.yaml:7:", "tolerance");
  parse_bad(BASE "gate: {alpha: 0.9}\n", "t.yaml:7:", "alpha");
  parse_bad(BASE "gate: {metrics: {requests: 5%}}\n", "t.yaml:7:", "not a metric with a better");
  parse_bad(BASE "gate: {metrics: {ttft_p95_ms: -5%}}\n", "t.yaml:7:", "ttft_p95_ms");
  parse_bad(BASE "gate: {tolernce: 5%}\n", "t.yaml:7:", "tolernce");
}

Test(scenario_parse, router_isolation_defaults_to_process_only_with_faults) {
  const char *head = "name: t\nmodel: {preset: llama-tiny}\ndeployments: [{dp: 2}]\n"
                     "workload:\n  prompts: [{input: 10, output: 5}]\n"
                     "  phases: [{rate: 4, duration: 1m}]\n";
  const char *kill = "faults: [{at: 1s, kill: replica, target: replica0}]\n";
  char text[1024];
  snprintf(text, sizeof text, "%s", head);
  scenario *s = parse_ok(text);
  cr_expect_eq(s->router.isolation, SCN_ISOLATION_DEFAULT);
  cr_expect_not(scenario_isolates_processes(s), "no faults: replicas in this process");
  scenario_free(s);
  snprintf(text, sizeof text, "%s%s", head, kill);
  s = parse_ok(text);
  cr_expect(scenario_isolates_processes(s), "faults: a worker process per replica");
  scenario_free(s);
  snprintf(text, sizeof text, "%s%srouter: {isolation: thread}\n", head, kill);
  s = parse_ok(text);
  cr_expect_eq(s->router.isolation, SCN_ISOLATION_THREAD);
  cr_expect_not(scenario_isolates_processes(s), "thread overrides the faults' default");
  scenario_free(s);
  snprintf(text, sizeof text, "%srouter: {isolation: process}\n", head);
  s = parse_ok(text);
  cr_expect_eq(s->router.isolation, SCN_ISOLATION_PROCESS);
  cr_expect(scenario_isolates_processes(s), "process without faults");
  scenario_free(s);
}

Test(scenario_errors, router_isolation_takes_process_or_thread) {
  const char *head = "name: t\nmodel: {preset: llama-tiny}\ndeployments: [{dp: 2}]\n"
                     "workload:\n  prompts: [{input: 10, output: 5}]\n"
                     "  phases: [{rate: 4, duration: 1m}]\n";
  char text[512];
  snprintf(text, sizeof text, "%srouter: {isolation: container}\n", head);
  parse_bad(text, "t.yaml:7:", "isolation");
  snprintf(text, sizeof text, "%srouter: {isolation: \"\"}\n", head);
  parse_bad(text, "t.yaml:7:", "process");
}

// --- per-class SLOs (slo.classes)

// BASE with two prompt classes, short and long (lines 1-6; tests append from line 7).
#define TWO_CLASSES                                                                                \
  "name: t\n"                                                                                      \
  "model: llama-tiny\n"                                                                            \
  "deployments: [{tp: 1}]\n"                                                                       \
  "workload:\n"                                                                                    \
  "  prompts: [{name: short, input: 10, output: 5}, {name: long, input: 40, output: 5}]\n"         \
  "  phases: [{fixed: {requests: 10}}]\n"

Test(scenario_parse, slo_classes_read_limits_of_several_classes_beside_the_overall_ones) {
  scenario *s = parse_ok(TWO_CLASSES "slo:\n"
                                     "  ttft_p95_ms: 3000\n"
                                     "  classes:\n"
                                     "    short: {ttft_p95_ms: 300, error_rate: 0}\n"
                                     "    long: {e2el_p99_ms: 9000, goodput_rps: 1}\n");
  cr_assert_eq(s->slo.n, 1, "classes is not an SLO of its own");
  cr_expect_str_eq(s->slo.items[0].key, "ttft_p95_ms");
  cr_assert_eq(s->slo.n_classes, 2);
  const scn_slo_class *sh = &s->slo.classes[0], *lo = &s->slo.classes[1];
  cr_expect_str_eq(sh->name, "short");
  cr_expect_eq(sh->class_idx, 0);
  cr_expect_eq(sh->line, 10);
  cr_assert_eq(sh->n, 2);
  cr_expect_str_eq(sh->items[0].key, "ttft_p95_ms");
  cr_expect_eq(sh->items[0].limit, 300);
  cr_expect_str_eq(sh->items[1].key, "error_rate");
  cr_expect_str_eq(lo->name, "long");
  cr_expect_eq(lo->class_idx, 1);
  cr_assert_eq(lo->n, 2);
  cr_expect_str_eq(lo->items[0].key, "e2el_p99_ms");
  cr_expect_eq(lo->items[0].limit, 9000);
  cr_expect_str_eq(lo->items[1].key, "goodput_rps");
  scenario_free(s);
}

Test(scenario_parse, slo_without_classes_has_none) {
  scenario *s = parse_ok(TWO_CLASSES "slo: {ttft_p95_ms: 3000}\n");
  cr_expect_eq(s->slo.n_classes, 0);
  scenario_free(s);
}

Test(scenario_errors, slo_class_unknown_is_named_with_the_workloads_classes) {
  parse_bad(TWO_CLASSES "slo: {classes: {shrt: {ttft_p95_ms: 300}}}\n", "t.yaml:7:17:",
            "unknown prompt class 'shrt'; the workload's classes are short and long");
}

Test(scenario_errors, slo_class_refuses_a_metric_of_the_whole_deployment) {
  parse_bad(TWO_CLASSES "slo: {classes: {short: {lost_requests: 0}}}\n", "t.yaml:7:25:",
            "key 'lost_requests': expected a metric of a prompt class's own requests");
  parse_bad(TWO_CLASSES "slo: {classes: {short: {kv_peak_frac: 0.5}}}\n", "t.yaml:7:25:",
            "kv_peak_frac");
  parse_bad(TWO_CLASSES "slo: {classes: {short: {requests: 3}}}\n", "t.yaml:7:25:",
            "a count with neither");
  parse_bad(TWO_CLASSES "slo: {classes: {short: {ttft_p59_ms: 3}}}\n", "t.yaml:7:25:",
            "unknown SLO key 'ttft_p59_ms'");
  parse_bad(TWO_CLASSES "slo: {classes: {short: 300}}\n", "t.yaml:7:", "key 'short': expected "
            "a mapping of metric names to limits");
  parse_bad(TWO_CLASSES "slo: {classes: [short]}\n", "t.yaml:7:", "key 'classes': expected a "
            "mapping of prompt class names to SLOs");
}

Test(scenario_errors, slo_classes_on_a_one_class_workload_or_a_dataset_say_why) {
  parse_bad(BASE "slo: {classes: {class0: {ttft_p95_ms: 300}}}\n", "t.yaml:7:7:",
            "more than one prompt class, and this one has one ('class0')");
  char text[512];
  snprintf(text, sizeof text, "name: t\nmodel: llama-tiny\ndeployments: [{tp: 1}]\n"
           "workload:\n  dataset: prompts.jsonl\n  phases: [{fixed: {requests: 10}}]\n"
           "slo: {classes: {a: {ttft_p95_ms: 300}}}\n");
  parse_bad(text, "t.yaml:7:7:", "reads its prompts from a dataset"); // tests/data/scenarios
}

Test(scenario_parse, gate_metrics_take_a_prompt_class_name) {
  scenario *s = parse_ok(TWO_CLASSES "gate: {metrics: {short:ttft_p95_ms: 10%, "
                                     "\"long:e2el_p95_ms\": 5%}}\n");
  cr_assert_eq(s->gate.n, 2);
  cr_expect_str_eq(s->gate.metrics[0].key, "short:ttft_p95_ms");
  cr_expect_float_eq(s->gate.metrics[0].tol, 0.10, 1e-12);
  cr_expect_str_eq(s->gate.metrics[1].key, "long:e2el_p95_ms");
  scenario_free(s);
  parse_bad(TWO_CLASSES "gate: {metrics: {shrt:ttft_p95_ms: 10%}}\n", "t.yaml:7:",
            "gate.metrics: unknown prompt class 'shrt'; the workload's classes are short and long");
  parse_bad(TWO_CLASSES "gate: {metrics: {short:lost_requests: 10%}}\n", "t.yaml:7:",
            "a prompt class's rows carry");
}

// --- SLO keys the scenario's deployments cannot measure: a warning at load (validate), a
// "no data" FAIL at run time (docs/metrics.md, "The vacuity matrix")

static bool warned(const scenario *s, const char *want) {
  for (int i = 0; i < s->n_warnings; i++)
    if (strstr(s->warnings[i], want)) return true;
  return false;
}

Test(scenario, an_slo_key_the_deployments_cannot_measure_is_a_warning_naming_why) {
  scenario *t = parse_ok("name: x\ntarget:\n  openai:\n    model: m\n    vocab_size: 100\n"
                         "    url: \"http://127.0.0.1:{port}/v1\"\n"
                         "    launch: \"llama-server -m m.gguf --port {port} --metrics\"\n"
                         "deployments: [{tp: 1}]\nworkload:\n  prompts: [{input: 8, output: 4}]\n"
                         "  phases: [{fixed: {requests: 2, concurrency: 1}}]\n"
                         "slo: {limit_violations: 0, ttft_p95_ms: 500, detect_ms: 100}\n");
  cr_expect(warned(t, "slo limit_violations: cannot be measured on text replicas (the server "
                      "reports no engine steps"),
            "%d warnings: %s", t->n_warnings, t->n_warnings ? t->warnings[0] : "");
  cr_expect(warned(t, "slo detect_ms: measured only in a deployment with faults"));
  cr_expect_not(warned(t, "ttft_p95_ms"), "a latency is measured everywhere");
  scenario_free(t);
  scenario *s = parse_ok("name: x\nmode: sim\nmodel: {preset: llama3-8b}\n"
                         "hardware: {profile: h100-sxm, gpus: 1}\ndeployments: [{tp: 1}]\n"
                         "workload:\n  prompts: [{input: 8, output: 4}]\n"
                         "  phases: [{fixed: {requests: 2, concurrency: 1}}]\n"
                         "slo: {layout_mismatches: 0, client_saturated: 0}\n");
  cr_expect(warned(s, "slo layout_mismatches: not judged in mode sim"));
  cr_expect(warned(s, "slo client_saturated: cannot be measured on sim replicas (the virtual "
                      "clock sends every request on schedule)"));
  scenario_free(s);
}

// --- shared prefixes and conversations (workload.prefixes, workload.conversations)

#define STRUCTURED(keys)                                                                           \
  "name: t\nmodel: llama-tiny\ndeployments: [{tp: 1}]\nworkload:\n"                                \
  "  prompts: [{input: {uniform: [8, 24]}, output: 16}]\n" keys                                    \
  "  phases: [{fixed: {requests: 10}}]\n"

Test(scenario_parse, prefixes_and_conversations_read_every_key) {
  scenario *s = parse_ok(STRUCTURED("  prefixes: {count: 12, length: {uniform: [64, 128]}, "
                                    "zipf: 0.8}\n"
                                    "  conversations: {turns: {uniform: [2, 5]}, think: 1500ms}\n"));
  const scn_workload *w = &s->workload;
  cr_expect_eq(w->prefixes.count, 12);
  cr_expect_eq(w->prefixes.length.kind, SCN_DIST_UNIFORM);
  cr_expect_eq(w->prefixes.length.b, 128);
  cr_expect_eq(w->prefixes.zipf, 0.8);
  cr_expect(w->conversations.set);
  cr_expect_eq(w->conversations.turns.b, 5);
  cr_expect_eq(w->conversations.think_ns, 1500 * MS);
  scenario_free(s);
  s = parse_ok(STRUCTURED("  prefixes: {count: 3, length: 100}\n"));
  cr_expect_eq(s->workload.prefixes.zipf, 1.0); // the default
  cr_expect(!s->workload.conversations.set);
  scenario_free(s);
}

Test(scenario_errors, a_prefix_or_conversation_past_the_context_is_one_line_at_its_key) {
  // llama-tiny's context is 512 tokens
  parse_bad(STRUCTURED("  prefixes: {count: 2, length: 600}\n"),
            "t.yaml:6:32: key 'length': a shared prefix of up to 600 tokens does not fit the "
            "context of model 'llama-tiny' (512 tokens;", NULL);
  parse_bad(STRUCTURED("  prefixes: {count: 2, length: {normal: {mean: 300, stddev: 50}}}\n"),
            "t.yaml:6:33: key 'length': a shared prefix of up to 600 tokens", NULL);
  parse_bad(STRUCTURED("  prefixes: {count: 2, length: 200}\n"
                       "  conversations: {turns: 10, think: 1s}\n"),
            "t.yaml:7:3: key 'conversations': a conversation can grow to 600 tokens (prefix 200 "
            "+ 10 turns x 40 tokens of message and reply), past the context of model "
            "'llama-tiny' (512 tokens)", NULL);
  parse_bad(STRUCTURED("  conversations: {turns: 300}\n"),
            "t.yaml:6:26: key 'turns': expected at most 256 turns, got up to 300", NULL);
  parse_bad(STRUCTURED("  prefixes: {count: 0, length: 10}\n"), "t.yaml:6:21: key 'count'", NULL);
  parse_bad(STRUCTURED("  prefixes: {length: 10}\n"), "t.yaml:6:14: missing required key 'count'",
            NULL);
  parse_bad("name: t\nmodel: llama-tiny\ndeployments: [{tp: 1}]\nworkload:\n"
            "  dataset: ok.jsonl\n  conversations: {turns: 2}\n"
            "  phases: [{fixed: {requests: 10}}]\n",
            "t.yaml:6:19: key 'turns': not with a dataset", NULL);
  parse_bad("name: t\nmodel: llama-tiny\ndeployments: [{tp: 1}]\nworkload:\n"
            "  dataset: ok.jsonl\n  prefixes: {count: 2, length: 8}\n"
            "  phases: [{fixed: {requests: 10}}]\n",
            "t.yaml:6:3: key 'prefixes': only with 'prompts'", NULL);
}

Test(scenario_errors, ramp_saturation_keys_are_checked) {
  scenario *s = parse_ok("name: t\nmodel: llama-tiny\ndeployments: [{tp: 1}]\nworkload:\n"
                         "  prompts: [{input: 10, output: 5}]\n"
                         "  phases: [{ramp: {concurrency: [1, 2]}, hold: 1s, saturation: {}}]\n");
  cr_expect(s->workload.phases[0].saturation);
  cr_expect_eq(s->workload.phases[0].sat_gain, 0.05);
  cr_expect_eq(s->workload.phases[0].sat_ttft, 3);
  scenario_free(s);
  parse_bad("name: t\nmodel: llama-tiny\ndeployments: [{tp: 1}]\nworkload:\n"
            "  prompts: [{input: 10, output: 5}]\n"
            "  phases: [{ramp: {concurrency: [1, 2]}, hold: 1s, saturation: {ttft_growth: 0.5}}]\n",
            "t.yaml:6:", "key 'ttft_growth': expected a factor >= 1");
  parse_bad("name: t\nmodel: llama-tiny\ndeployments: [{tp: 1}]\nworkload:\n"
            "  prompts: [{input: 10, output: 5}]\n"
            "  phases: [{rate: 5, requests: 3, saturation: {}}]\n",
            "t.yaml:6:", "key 'saturation': not part of a rate phase");
}
