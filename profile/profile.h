// Calibration: measures, on the real device, the op times the simulator's cost model
// (kernels/sim/sim_cost.h) uses, and writes them as a hardware profile YAML that
// hw_profile_load (config/hardware.h) reads back: host figures (memory, bandwidth, peak GEMM
// rate, cores), GEMM time tables for every shape one rank of each TP degree runs, attention
// tables (decode vs context, prefill vs prompt), all-reduce tables over the communicator the
// executor uses with a link fit, and the engine's per-step overhead (the residual of real
// decode steps against the cost model's price).
//
// Two backends: cpu (ranks are threads sharing the host's cores) and cuda (every rank on GPU
// 0, as a scenario's `devices: [0]`; asynchronous ops timed in back-to-back runs that wait for
// the device once; a GPU profile: host_cores 0, one table per shape).
//
// The room's files, by job: profile.c (the options, the order of the measurements, timing,
// the machine), host.c (the host figures), gemm.c, attention.c and allreduce.c (their tables;
// allreduce.c also the link fit), overhead.c (the step overhead), write.c (the YAML);
// profile_impl.h holds what they share. Where the room sits among the floors: docs/design.md.
//
// What it leaves to others: the cost model itself (kernels/sim/), reading profiles
// (config/hardware.c), the device ops it times (kernels/cpu/, kernels/cuda/), argument parsing
// and printing (cli/cmd_profile.c). The format and how each figure is taken: docs/profile.md.
// Nothing prints or exits.
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/hw_profile.h"
#include "engine/model.h"
#include "kernels/status.h"

#define PROFILE_MAX_TP 8     // TP degrees in one profile (the attention and all-reduce tables)
#define PROFILE_MAX_BATCHES 16 // decode batch sizes of the step-overhead tables

// What to measure and how long to spend on it. Start from profile_options_defaults, set the
// model and the TP degrees, then override what you need; a grid left at n == 0 gets the
// default for `quick`.
typedef struct profile_options {
  const char *backend;      // "cpu" or "cuda" (GPU 0; a build with the CUDA backend)
  model_config model;       // the model whose shapes are measured (weights are random)
  int tp[PROFILE_MAX_TP];   // TP degrees, each must shard the model
  int n_tp;
  bool quick;               // shorter grids and fewer repetitions
  const char *name;         // the profile's `name` (the backend's name when NULL)
  const char *description;  // the profile's `description` (from the CPU model, or the GPU's
                            // memory, when NULL)
  const char *command;      // the command line that produced it (for the header comment)
  uint64_t seed;            // random weights of the step-overhead engine, and test data

  // grids (x values, strictly increasing, positive); n == 0: the default
  int gemm_m[SIM_CURVE_MAX]; // GEMM rows
  int n_gemm_m;
  int ctx[SIM_CURVE_MAX];    // decode context lengths, tokens
  int n_ctx;
  int prefill[SIM_CURVE_MAX]; // prefill prompt lengths from position 0, tokens
  int n_prefill;
  double ar_bytes[SIM_CURVE_MAX]; // all-reduce message sizes, bytes per rank
  int n_ar_bytes;
  int batches[PROFILE_MAX_BATCHES]; // decode batch sizes of the step-overhead fit
  int n_batches;

  int reps;            // timed rounds per point (the median is kept); 0: default
  double min_round_s;  // a round repeats the op until it has run at least this long; 0: default
  int decode_steps;    // decode steps timed per batch size per round; 0: default
  int overhead_rounds; // rounds of the step-overhead run (every batch size once each); 0: default
  size_t bw_bytes;     // buffer of the streaming-read test (cuda: of the copy); 0: default
  int square_n;        // size of the square GEMM behind flops_fp32; 0: default (cuda: larger)

  // Called once per measured group (host, each GEMM group, each attention shape, each
  // all-reduce group, the step overhead) with one line saying what was measured and how
  // long it took (no newline). May be NULL.
  void (*progress)(void *ud, const char *line);
  void *progress_ud;
} profile_options;

// Defaults: backend "cpu", seed 1, every grid empty (filled at measure time), no TP degrees.
profile_options profile_options_defaults(bool quick);

// The headline of a finished measurement (also written into the YAML's header comment).
typedef struct profile_summary {
  bool cuda;                  // measured on the cuda backend (GPU 0)
  double mem_bytes;           // total RAM (cuda: the GPU's memory), bytes
  double mem_bw;              // streaming read with host_cores threads (cuda: device-to-device
                              // copy, read + written), bytes/s
  double mem_bw_1t;           // the same with one thread (cuda: mem_bw)
  double flops_fp32;          // square GEMM with host_cores threads (cuda: f32), FLOP/s
  double flops_bf16;          // cuda: the square GEMM with bf16 weights; cpu: flops_fp32
  int host_cores;             // device_cpu_cores(); 0 on cuda (a GPU profile)
  double link_bw;             // all-reduce fit: bytes/s per direction
  double link_latency_s;      // all-reduce fit: seconds per hop
  double launch_s;            // one tiny device op (call overhead)
  double step_overhead_s;     // median residual of whole engine_step wall time, >= 0
  double step_overhead_exec_s; // median residual of engine_step_info.duration_ns (not clamped)
  int overhead_tp;            // the TP degree the step-overhead engine ran at
  int overhead_steps;         // decode steps in the fit
  double elapsed_s;           // the whole measurement
  double other_load;          // CPU time of other processes during it / (elapsed x CPUs); -1
                              // when /proc/stat cannot be read
  double steal;               // CPU time the hypervisor took meanwhile, same unit; -1 unknown
} profile_summary;

typedef struct profile profile;

// Measures everything opts asks for on the device. On success *out holds the results (free
// with profile_free). SC_INVALID (err names the problem) for an unknown or unmeasurable
// backend (cuda in a build without it), a TP degree that does not shard the model, a bad
// grid, or more tables than a profile holds (SIM_TABLES_MAX GEMMs, 8 attention and 8
// all-reduce entries); SC_DEVICE when the device cannot be opened (cuda without a GPU: the
// backend's "no CUDA device is visible"); SC_OOM / SC_DEVICE / SC_TIMEOUT when a measurement
// fails. On error *out is NULL.
sc_status profile_measure(const profile_options *opts, profile **out, sc_error *err);
void profile_free(profile *p); // NULL is a no-op

// The measured profile as hw_profile_load would return it after reading the written file
// (up to the rounding of the printed numbers). Owned by p.
const hw_profile *profile_hw(const profile *p);
void profile_summary_get(const profile *p, profile_summary *out);

// Writes the profile YAML (header comment, figures, tables) to f. SC_IO when writing fails.
sc_status profile_write(const profile *p, FILE *f, sc_error *err);
// Writes it to path (replaced if it exists). SC_IO naming the path when it cannot.
sc_status profile_write_path(const profile *p, const char *path, sc_error *err);
