// The hardware profile: what a device offers (memory, bandwidth, throughput, links), as the
// planner (engine/memplan.h) and the simulator (kernels/sim/sim_cost.h) use it.
//
// Only the struct lives here, so the engine can take a profile without knowing where it came
// from. Reading one from scenarios/hardware/NAME.yaml (embedded in the binary) or a YAML path,
// and changing its link, is config/hardware.h; the figures and their sources live in the YAML
// files.
#pragma once

#include "kernels/sim/sim_cost.h"
#include "kernels/status.h"

typedef struct hw_profile {
  char name[64];         // e.g. "h100-sxm"
  char description[128]; // e.g. "NVIDIA H100 SXM5 80GB"
  double mem_bytes;      // device memory, bytes
  double mem_bw;         // memory bandwidth, bytes/s
  double flops_bf16;     // dense bf16 matrix throughput, FLOP/s
  double flops_fp16;     // dense fp16 matrix throughput, FLOP/s
  double flops_fp32;     // fp32 throughput (non-tensor), FLOP/s
  double flops_int8;     // dense int8 throughput, OP/s (0 when unknown)
  double flops_fp8;      // dense fp8 matrix throughput, FLOP/s (optional; 0: none, as on A100)
  char link[32];         // intra-node link kind: "nvlink4", "pcie4", "pcie5", "memory"
  double link_bw;        // intra-node link bandwidth per direction per GPU, bytes/s
  double link_latency_s; // intra-node link latency, seconds
  int gpus_per_node;     // how many of these one node holds (limits TP within a node)
  // The simulator's view (kernels/sim/sim_cost.h): the figures above, plus the optional keys
  // mem_eff, gemm_eff, launch_s, step_overhead_s, inter_link(_bw, _latency_s), host_cores and
  // the measured tables gemm, attention, allreduce that `shardcheck profile` writes.
  sim_hw sim;
} hw_profile;
