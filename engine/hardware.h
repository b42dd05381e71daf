// Hardware profiles: what a device offers (memory, bandwidth, throughput, links), read from
// scenarios/hardware/NAME.yaml (embedded in the binary) or a YAML path.
//
// The planner (engine/memplan.h) uses memory; the simulator (kernels/sim/sim_cost.h) uses the
// rest. Figures and their sources live in the YAML files, not here.
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
  char link[32];         // intra-node link kind: "nvlink4", "pcie4", "pcie5", "memory"
  double link_bw;        // intra-node link bandwidth per direction per GPU, bytes/s
  double link_latency_s; // intra-node link latency, seconds
  int gpus_per_node;     // how many of these one node holds (limits TP within a node)
  // The simulator's view (kernels/sim/sim_cost.h): the figures above, plus the optional keys
  // mem_eff, gemm_eff, launch_s, step_overhead_s, inter_link(_bw, _latency_s), host_cores and
  // the measured tables gemm, attention, allreduce that `shardcheck profile` writes.
  sim_hw sim;
} hw_profile;

// Loads a profile by name (embedded scenarios/hardware/NAME.yaml) or from a .yaml path.
// Unknown keys, missing keys and wrong types are SC_INVALID naming file:line:column and key.
sc_status hw_profile_load(const char *name_or_path, hw_profile *out, sc_error *err);
// Copies the figures above (memory, flops, gpus_per_node, the intra-node link) into p->sim;
// hw_profile_load does it, and so must whoever fills a profile by hand.
void hw_profile_sync_sim(hw_profile *p);
// Replaces the intra-node link (a named link, kernels/sim/sim_links.c) and, when nodes > 0,
// keeps gpus_per_node as is: what a scenario's hardware.link overrides. SC_INVALID for an
// unknown link name.
sc_status hw_profile_set_link(hw_profile *p, const char *link, sc_error *err);
// Fills names[] with the embedded profile names (static strings); returns how many exist.
int hw_profile_names(const char **names, int cap);
