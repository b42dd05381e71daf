// The scenario language: parse and validate a scenario YAML file (libfyaml) into a struct the
// runner drives. docs/scenarios.md is the reference for every key.
//
// This file parses and validates; it runs nothing. The workload generator (scenarios/
// workload.h) turns the workload block into requests; the runner (runner/runner.h) drives
// deployments and phases; faults are parsed and validated here and injected by faults/.
// Errors are SC_INVALID with "FILE:LINE:COL: key 'K': expected ..., got ..." (the first error
// found); unknown keys are errors.
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/hw_profile.h"
#include "engine/memplan.h"
#include "engine/model.h"
#include "kernels/knobs.h"
#include "kernels/status.h"
#include "scenarios/metric_names.h"
#include "serving/router_policy.h"

enum {
  SCN_MAX_DEPLOYMENTS = 32,
  SCN_MAX_CLASSES = 16,
  SCN_MAX_PREFIXES = 4096,
  SCN_MAX_TURNS = 256,
  SCN_MAX_PHASES = 16,
  SCN_MAX_RAMP = 32,
  SCN_MAX_FAULTS = 64,
  SCN_MAX_SLO = 32,
};

typedef enum scn_mode { SCN_MODE_REAL, SCN_MODE_SIM } scn_mode;

// What a run writes besides its run, deployment, phase, metric, verdict and fault rows
// (docs/schema.md, "Recording levels"); the metrics are the same at every level.
typedef enum scn_record {
  SCN_RECORD_TOKENS,   // request, token, step and device-sample rows (the default)
  SCN_RECORD_REQUESTS, // request and device-sample rows: no token or step rows
  SCN_RECORD_SUMMARY,  // none of them: only the summaries
} scn_record;

// --- model and hardware
typedef struct scn_model {
  char source[1024];    // what the file says: a preset name, a preset .yaml path, or a
                        // directory with config.json (+ safetensors), as written
  char resolved[1024];  // source with a relative path made relative to the scenario's directory
  bool has_weights;     // resolved is a directory with safetensors (else weights are generated)
  char dtype[8];        // "" = the model's own dtype; else f32 | f16 | bf16 | int8 | int4 | fp8
  char kv_cache_dtype[8]; // "" = auto (the activations' dtype); "fp8" (sim mode, GPU profiles)
  uint64_t weights_seed; // seed of generated weights (key weights_seed; default 0)
  model_config config;  // resolved shapes (model_config_resolve)
} scn_model;

typedef struct scn_hardware {
  char backend[16];  // real mode: "cpu" (default) | "cuda"; sim mode: ""
  char profile[1024]; // hardware profile name or .yaml path: sim's devices, and the planner's
                      // memory check; real cpu default "cpu"
  int gpus;          // devices available (sim; real: ranks at most); 0 = no limit (real cpu)
  int devices[16];   // real cuda: device indices
  int n_devices;
  int threads;       // real cpu: BLAS threads per rank; 0 = cores / ranks of the deployment
  char link[32];     // sim: intra-node link replacing the profile's ("" = the profile's)
  int nodes;         // sim: nodes of gpus_per_node GPUs (0 = as many as the GPUs need)
  char hostfile[1024]; // real, router.isolation mpi: the MPI hostfile placing each replica's
                       // ranks (resolved against the scenario's directory; "" = this host)
  int hostfile_slots;  // the slots it names (a line `HOST slots=N` or `HOST:N`; a bare HOST 1)
} scn_hardware;

typedef struct scn_deployment {
  int tp, pp, dp;
  int policy;     // key policy (a deployment's, or scaling's list): 1 + its router_policy; 0:
                  // router.policy's. A deployment with its own has it in its label ("dp4-sticky")
  char label[32]; // "tp2", "dp4", "tp2-pp2", "tp2-dp2", "tp1" (1 GPU): made by the parser
  int line, col;  // where it was declared (or the scaling block it came from)
} scn_deployment;

// --- workload
// Each kind is a row of the generator's table (scenarios/workload.c, workload_dist): its name,
// the form the language reads, its draw.
typedef enum scn_dist_kind {
  SCN_DIST_FIXED,     // a
  SCN_DIST_UNIFORM,   // integers in [a, b], inclusive
  SCN_DIST_NORMAL,    // mean a, stddev b
  SCN_DIST_LOGNORMAL, // median a (mu = ln a), sigma b
  SCN_DIST_N          // not a kind: how many there are
} scn_dist_kind;

// A token-count distribution. Draws are rounded to the nearest integer and clamped to
// [1, the model's context]; the workload generator also keeps input + output within it.
typedef struct scn_dist {
  scn_dist_kind kind;
  double a, b;
} scn_dist;

typedef struct scn_class {
  char name[32]; // key name; default "class<i>"
  double weight; // relative; > 0; default 1
  scn_dist input, output;
} scn_class;

typedef enum scn_phase_kind {
  SCN_PHASE_RAMP,  // closed loop, one step per concurrency, each held for hold_ns
  SCN_PHASE_RATE,  // open loop at `rate` requests/s, for duration_ns or `requests`
  SCN_PHASE_FIXED, // closed loop: `requests` in all at `concurrency`
} scn_phase_kind;

// Each process is a row of the generator's table (scenarios/workload.c, workload_arrival): its
// name, whether it takes burstiness, its gaps.
typedef enum scn_arrival {
  SCN_ARRIVAL_POISSON,
  SCN_ARRIVAL_CONSTANT,
  SCN_ARRIVAL_GAMMA,
  SCN_ARRIVAL_TRACE, // workload.trace: each request at its recorded arrival time
  SCN_ARRIVAL_N      // not a process: how many there are
} scn_arrival;

typedef struct scn_phase {
  scn_phase_kind kind;
  char name[48];                   // key name; default "ramp", "rate-8", "fixed" (-2, -3 ...
                                   // when repeated)
  int concurrency[SCN_MAX_RAMP];   // RAMP: the steps; FIXED: [0] only
  int n_concurrency;
  uint64_t hold_ns;                // RAMP: time per step (required)
  uint64_t think_ns;               // RAMP, FIXED: a user's pause between requests (default 0)
  double rate;                     // RATE: requests/s (> 0)
  scn_arrival arrival;             // RATE: default poisson
  double burstiness;               // RATE gamma: shape k (1 = poisson; < 1 burstier); default 1
  uint64_t duration_ns;            // RATE: how long to send (0 when requests is given)
  int requests;                    // RATE or FIXED: how many to send (0 when duration is given)
  uint64_t warmup_ns;              // requests arriving in the first warmup_ns of the phase (of
                                   // each RAMP step) are run but excluded from metrics
  bool saturation;                 // RAMP key saturation: the ramp ends at the first saturated
                                   // step (runner/runner.c, docs/scenarios.md)
  double sat_gain;                 // saturation.gain: a step whose output tok/s is below
                                   // (1 + gain) x the best earlier step's no longer rises (0.05)
  double sat_ttft;                 // saturation.ttft_growth: ... while its TTFT p95 is past
                                   // ttft_growth x the first step's (3)
  int line, col;
} scn_phase;

// Shared prefixes (key workload.prefixes): `count` prompts (system prompts, documents) of
// their own lengths; each request (each conversation) starts with one of them, picked by Zipf
// popularity, followed by its own tokens (its class's input length).
typedef struct scn_prefixes {
  int count;       // key count: how many (0: no shared prefixes; at most SCN_MAX_PREFIXES)
  scn_dist length; // key length: each prefix's length in tokens (a distribution, drawn once
                   // per prefix)
  double zipf;     // key zipf: popularity exponent s, P(prefix i) ~ 1 / (i + 1)^s (1; 0:
                   // every prefix equally often)
} scn_prefixes;

// Multi-turn conversations (key workload.conversations): each conversation has `turns` turns;
// turn t's prompt is the whole history (the prefix, every earlier message and reply) plus a
// new message (its class's input length); the next turn leaves think_ns after a turn ends.
typedef struct scn_conversations {
  bool set;          // the key was given
  scn_dist turns;    // key turns: turns per conversation (a distribution, drawn per conversation)
  uint64_t think_ns; // key think: a user's pause between a turn's end and the next turn (0)
} scn_conversations;

typedef struct scn_workload {
  scn_class classes[SCN_MAX_CLASSES]; // key prompts (when no dataset)
  int n_classes;
  scn_prefixes prefixes;              // key prefixes (with prompts only)
  scn_conversations conversations;    // key conversations (with prompts only)
  char dataset[1024];   // key dataset: a .jsonl path as written, resolved against the
                        // scenario's directory ("" when prompts are given); exactly one of
                        // prompts / dataset
  bool trace;           // key trace: `dataset` holds a trace (a .jsonl with arrival_s per line,
                        // replayed exactly: one rate phase "trace" of arrival SCN_ARRIVAL_TRACE)
  scn_phase phases[SCN_MAX_PHASES];
  int n_phases;
  double temperature;   // key sampling.temperature; 0 = greedy (default)
  double top_p;         // key sampling.top_p; default 1
  bool stop_at_eos;     // key stop_at_eos; default false: output lengths are the workload's
} scn_workload;

// --- faults: parsed and validated here, injected by faults/ (see docs/scenarios.md)
// Each kind has two rows of one index (docs/design.md, "The tables"): the language's here
// (scenarios/scenario_faults.c: its key, what it takes, its parse) and the runtime's
// (faults/kinds.c: its detail, chaos draw, delivery to replicas, detection).
typedef enum scn_fault_kind {
  SCN_FAULT_KILL,         // what: "gpu" (target replicaR.rankK) | "replica" (target replicaR)
  SCN_FAULT_HANG,         // what: "rank" | "replica"; duration_ns = resume_after (0: never)
  SCN_FAULT_SLOW,         // what: "rank" | "link"; factor, latency_ns, bandwidth
  SCN_FAULT_CANCEL_STORM, // fraction or count; stages mask
  SCN_FAULT_HOT_SWAP,     // swap_model or swap_dtype
  SCN_FAULT_CLOCK_JUMP,   // offset_ns (signed)
  SCN_FAULT_OOM,          // what: "transient" | "persistent"; after_allocs
  SCN_FAULT_CORRUPT,      // what: "nan" | "bitflip"
  SCN_FAULT_CHAOS,        // kinds_mask, count_min/max, between, keep_alive
  SCN_FAULT_EXEC,         // exec_command: a user command at the fault's time (targets only)
  SCN_FAULT_N             // not a kind: how many there are
} scn_fault_kind;

// A fault kind as the language knows it (its row in scenarios/scenario_faults.c).
typedef struct scn_fault_kind_info {
  const char *name;    // its key in a fault: "kill", "cancel_storm", ...
  const char *example; // one whole fault of the kind, e.g. "{kill: replica, at: 1s, target:
                       // replica0}" (docs, and the sync test's)
  bool target_only;    // an external target's only (exec)
  bool now;            // shardcheck serve's admin API applies it at once
} scn_fault_kind_info;

enum { SCN_STAGE_QUEUED = 1, SCN_STAGE_PREFILL = 2, SCN_STAGE_DECODE = 4 };

typedef struct scn_fault {
  scn_fault_kind kind;
  uint64_t at_ns;        // key at: a duration from the start of each deployment's first phase
  char at_phase[48];     // key at_phase: instead of at, the start of the named phase
  char target[64];       // "replica0", "replica0.rank1", "every-rank", "" (none/all)
  char what[16];         // see the kinds above
  double factor;         // slow: step-time multiplier (> 1)
  uint64_t latency_ns;   // slow link: added latency
  double bandwidth;      // slow link: bytes/s cap (0 = unchanged)
  uint64_t duration_ns;  // hang resume_after, slow duration; 0 = until the end
  double fraction;       // cancel_storm: fraction of in-flight requests (0 when count given)
  int count;             // cancel_storm: count
  int stages;            // cancel_storm: SCN_STAGE_* mask (default all)
  char swap_model[1024]; // hot_swap: a preset or directory ("" = same model)
  char swap_dtype[8];    // hot_swap: new weight dtype ("" = same)
  char swap_launch[2048];   // hot_swap on a target: the new launch template ("" = the target's);
                            // swap_model then holds the new served model name ("" = same)
  model_config swap_config; // hot_swap with a model: its resolved shapes
  bool swap_has_weights; // ... and swap_model is a directory holding safetensors
  int64_t offset_ns;     // clock_jump: signed offset of the wall clock
  int after_allocs;      // oom: fail after this many allocations
  unsigned kinds_mask;   // chaos: bit (1u << scn_fault_kind) per kind it may draw
  int count_min, count_max;       // chaos
  uint64_t between_ns[2];          // chaos: window of fault times
  char keep_alive[8][32];          // chaos: replicas never targeted
  int n_keep_alive;
  char exec_command[1024]; // exec: the command, with {pid} {port} {replica}
  int line, col;
} scn_fault;

// --- gate: defaults of `shardcheck gate` for this scenario (docs/gate.md), recorded in the
// run's config JSON; the command line overrides them.
typedef struct scn_gate {
  double tolerance; // fraction for every gated metric; < 0: the gate's (5% real, 1% sim)
  double alpha;     // significance level; < 0: the gate's (0.01)
  struct {
    char key[64];   // a metric name with a direction, or CLASS:NAME for a prompt class's
    double tol;     // fraction
  } metrics[SCN_MAX_SLO]; // when given, the metrics gated instead of the default list
  int n;
} scn_gate;

// --- SLOs: each key is a metric name of reports/metrics.h and a limit; the metric's direction
// says whether the limit is a maximum (latencies, error_rate, lost_requests) or a minimum
// (output_tok_s, req_s, goodput_rps).
typedef struct scn_slo_item {
  char key[32];  // e.g. "ttft_p95_ms", "error_rate", "goodput_rps"
  double limit;
  int line, col;
} scn_slo_item;

// The SLOs of one prompt class (key slo.classes.NAME): limits on the summary of that class's
// requests alone, so only metrics such a summary carries (mt_metric_per_class). Their
// verdicts are named "NAME:KEY", e.g. "short:ttft_p95_ms".
typedef struct scn_slo_class {
  char name[32];     // a workload.prompts[].name
  int class_idx;     // its index in workload.classes
  scn_slo_item items[SCN_MAX_SLO];
  int n;
  int line, col;     // where the class's key is
} scn_slo_class;

typedef struct scn_slo {
  scn_slo_item items[SCN_MAX_SLO];
  int n;
  scn_slo_class classes[SCN_MAX_CLASSES]; // key classes: per prompt class, in file order
  int n_classes;
} scn_slo;

// --- limits (engine settings; defaults close to vLLM's, stored with every run)
typedef struct scn_limits {
  uint64_t request_timeout_ns;   // a request not finished after this is cancelled and counted
                                 // as status timeout (default 60 s; 0 = none)
  // the scheduler's knobs, one field per row of kernels/knobs.h (its defaults and bounds):
  // max_running, token_budget, block_size, prefill_chunk, no_evict, prefix_caching,
  // reserve_full_isl, kv_watermark, num_gpu_blocks_override
  SC_KNOBS(SC_KNOB_FIELD)
  double kv_headroom;            // fraction of device memory kept free (0.10)
  uint64_t collective_timeout_ns; // deadline of one collective (30 s)
} scn_limits;

// How a real-mode deployment runs its replicas (key router.isolation).
typedef enum scn_isolation {
  SCN_ISOLATION_DEFAULT, // not given: process when the scenario has faults, else thread
  SCN_ISOLATION_PROCESS, // each replica a `shardcheck worker` process (SIGKILL, SIGSTOP real)
  SCN_ISOLATION_THREAD,  // each replica in this process, stepped by a thread of its own
  SCN_ISOLATION_MPI,     // each replica one MPI job of tp x pp `shardcheck worker` processes
} scn_isolation;

typedef struct scn_router {
  router_policy policy;       // key router.policy: a name of serving/router.h's table
                              // (least-outstanding by default)
  scn_isolation isolation;    // key isolation: process | thread | mpi (default: see
                              // scn_isolation)
  uint64_t detect_timeout_ns; // key detect_timeout: no heartbeat this long = replica lost (2 s)
  int max_retries;            // key max_retries: resubmissions of one request at most (3)
  uint64_t backoff_ns;        // key backoff: wait before the first retry, doubled per retry
                              // (50 ms)
  bool resume;                // key resume: a request that already streamed tokens continues
                              // on another replica from prompt + tokens sent (true); false:
                              // it fails with reason replica_lost
  bool restart;               // key restart: a dead replica is restarted (true)
  double load_bound;          // key load_bound: prefix-affinity, sticky and cache-aware's bound
                              // on a replica's load against the mean, >= 1 (1.25)
  int affinity_tokens;        // key affinity_tokens: prefix-affinity hashes this many of the
                              // prompt's first tokens (256)
} scn_router;

// --- an external target (key target.openai): an OpenAI-compatible server instead of
// shardcheck's own engine (docs/targets.md). Templates keep their {placeholders}: the runner
// expands them per replica (serving/launch.h).
enum { SCN_MAX_TARGET_ENV = 16, SCN_MAX_WARNINGS = 8 };

typedef enum scn_target_api { SCN_API_COMPLETIONS, SCN_API_CHAT } scn_target_api;

typedef struct scn_target {
  bool set;                  // the scenario has a target block
  scn_target_api api;        // key api: completions (default) | chat
  char model[256];           // key model: the served model name sent in each request
  char url[1024];            // key url: the API base (".../v1"), may hold {port} etc.
  char launch[4096];         // key launch: the command template ("" = the server is already up)
  struct {
    char name[64];
    char value[512];         // a template
  } env[SCN_MAX_TARGET_ENV]; // key env: added to the launched server's environment
  int n_env;
  char ready_path[256];      // key ready.path: polled until HTTP 200 (default /health)
  uint64_t ready_timeout_ns; // key ready.timeout (default 10 min)
  char api_key_env[128];     // key api_key_env: the variable the API key is read from ("" none)
  int vocab_size;            // key vocab_size: prompt token ids are drawn in [3, vocab_size)
  char extra_body[4096];     // key extra_body: a JSON object (from YAML) merged into requests
  char rank_process[256];    // key rank_process: a regex on a child's command line (faults)
  char admin_token[128];     // key admin_token: shardcheck serve's --admin-token (oom, corrupt
                             // and slow faults go through its admin API; "" none)
  char metrics_path[256];    // key metrics_path: scraped every second (default /metrics; ""
                             // none)
  uint64_t stop_grace_ns;    // key stop_grace: SIGTERM, then SIGKILL after this (default 10 s)
  int line, col;             // where target.openai is
} scn_target;

typedef struct scenario {
  char path[1024];     // the file as given ("" when parsed from a string)
  char dir[1024];      // its directory: relative paths inside are resolved against it
  char *text;          // the file's text, NUL-terminated (stored with each run)
  size_t text_len;
  char name[128];      // required
  char description[512];
  scn_mode mode;       // key mode: real (default) | sim
  scn_model model;
  scn_hardware hardware;
  scn_deployment deployments[SCN_MAX_DEPLOYMENTS];
  int n_deployments;
  scn_workload workload;
  scn_fault faults[SCN_MAX_FAULTS];
  int n_faults;
  scn_slo slo;
  scn_gate gate;
  scn_limits limits;
  scn_router router;
  scn_target target;   // key target (target.set: the deployments run an external server)
  uint64_t seed;       // key seed (default 0)
  scn_record record;   // key record: tokens (default) | requests | summary
  // Things validation noticed that may still run (a launch command not on this machine's
  // PATH may exist on the GPU machine): `validate` and `run` print them.
  char warnings[SCN_MAX_WARNINGS][300];
  int n_warnings;
  // Resolved during validation, for the runner and the simulator:
  bool have_hw;        // hardware.profile named a profile (always in sim mode)
  hw_profile hw;       // that profile, hardware.link applied
  memplan_params mp;   // the planner's parameters, as the engine sizes itself
} scenario;

// Command-line overrides applied before validation (shardcheck run --mode/--profile).
typedef struct scn_overrides {
  const char *mode;    // NULL: the file's; "real" | "sim"
  const char *profile; // NULL: the file's hardware.profile; a name or a .yaml path (as given)
  const char *record;  // NULL: the file's record key; "tokens" | "requests" | "summary"
} scn_overrides;

// Reads and validates the file at path. On success *out owns everything (scenario_free); on
// error *out is NULL and err holds the first error (SC_IO when the file cannot be read,
// SC_INVALID for everything else, with FILE:LINE:COL).
sc_status scenario_load(const char *path, scenario **out, sc_error *err);
// Same from text shown as `name`; dir resolves relative paths ("." when NULL).
sc_status scenario_parse(const char *text, size_t len, const char *name, const char *dir,
                         scenario **out, sc_error *err);
// scenario_load with overrides (ov may be NULL). Switching a real scenario to sim keeps its
// deployments and workload; the profile defaults to the file's hardware.profile ("cpu" for a
// real CPU scenario), so a CPU run and its simulation compare the same thing.
sc_status scenario_load_with(const char *path, const scn_overrides *ov, scenario **out,
                             sc_error *err);
void scenario_free(scenario *s); // NULL is a no-op

// Total requests a phase sends when known up front (FIXED, RATE with requests), else 0.
int scenario_phase_requests(const scn_phase *p);
// Expected wall time of a phase in ns when known (RAMP: steps x hold; RATE with duration), else 0.
uint64_t scenario_phase_duration_ns(const scn_phase *p);
// Whether s's replicas run as `shardcheck worker` processes in mode real: router.isolation, or,
// when it is not given, whether s has faults.
bool scenario_isolates_processes(const scenario *s);
// Whether s's replicas run as MPI jobs in mode real (router.isolation mpi): each replica's
// tp x pp ranks the processes of one job, placed by hardware.hostfile.
bool scenario_mpi_replicas(const scenario *s);
// The kind of replica s's deployments run on, as the metric table's rows name it
// (scenarios/metric_names.h): sim in mode sim; against a target, serve when its launch runs
// `{shardcheck} serve`, else a server that may stream text only; else process or local.
mt_kind scenario_metric_kind(const scenario *s);
const char *scenario_phase_kind_name(scn_phase_kind k); // "ramp", "rate", "fixed"
const char *scenario_fault_kind_name(scn_fault_kind k); // "kill", "hang", ..., "chaos"
// The language's row of kind k (static); NULL outside the enum.
const scn_fault_kind_info *scenario_fault_kind(scn_fault_kind k);
const char *scenario_record_name(scn_record r);         // "tokens", "requests", "summary"
// The level named by text into *out; false (and *out untouched) for anything else.
bool scenario_record_parse(const char *text, scn_record *out);

// One fault applied at once, as `shardcheck serve`'s POST /admin/faults takes it: text (YAML or
// JSON: {"kill": "gpu", "target": "replica0.rank1"}) is one item of a `faults:` list without
// at, at_phase, duration or resume_after, of a kind that acts on a replica (kill, hang, slow,
// oom, corrupt), checked as a scenario's is against a deployment of dp replicas of `ranks`
// ranks. On error *out is zeroed and err says why, as "NAME:LINE:COL: key 'KEY': ..." (the key
// at fault is quoted first).
sc_status scenario_parse_fault_now(const char *text, size_t len, const char *name, int dp,
                                   int ranks, bool sim, scn_fault *out, sc_error *err);
// A target "replicaR" (rank -1) or "replicaR.rankK"; false for any other text.
bool scenario_fault_target(const char *text, int *replica, int *rank);
