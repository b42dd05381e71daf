// The named links the simulator knows (see sim_cost.h): bandwidth per direction per GPU and a
// per-hop latency. A hardware profile names its intra-node link and may override the figures;
// a scenario's hardware.link swaps in one of these (e.g. the same GPUs over PCIe gen4).
//
// Sources (per direction):
//   NVLink 3 (A100): 600 GB/s bidirectional per GPU (A100 datasheet) -> 300 GB/s
//   NVLink 4 (H100/H200): 900 GB/s bidirectional (H100 datasheet) -> 450 GB/s
//   NVLink 5 (B200): 1.8 TB/s bidirectional (Blackwell datasheet) -> 900 GB/s
//   PCIe gen4 x16: 16 GT/s x 16 lanes, 128b/130b -> 31.5 GB/s; gen5 x16 -> 63 GB/s
//   InfiniBand HDR 200 Gb/s -> 25 GB/s; NDR 400 Gb/s -> 50 GB/s (one NIC per GPU)
//   Ethernet (RoCE) 100 Gb/s -> 12.5 GB/s; 400 Gb/s -> 50 GB/s
//   memory: ranks as threads of one host exchanging through shared memory (the CPU backend);
//     the figure of scenarios/hardware/cpu.yaml
// Latencies are not on datasheets: order-of-magnitude figures for one small transfer (a few
// microseconds through NVSwitch, ~10 us across PCIe or a NIC); `shardcheck profile` measures
// the collective times of the host it runs on instead.
#include <stdio.h>
#include <string.h>

#include "kernels/sim/sim_cost.h"

static const sim_link LINKS[] = {
    {"nvlink3", 300e9, 3e-6},  {"nvlink4", 450e9, 2e-6},   {"nvlink5", 900e9, 2e-6},
    {"pcie4", 31.5e9, 10e-6},  {"pcie5", 63e9, 10e-6},     {"ib-hdr", 25e9, 5e-6},
    {"ib-ndr", 50e9, 5e-6},    {"eth-100g", 12.5e9, 10e-6}, {"eth-400g", 50e9, 10e-6},
    {"memory", 20e9, 10e-6},
};

bool sim_link_lookup(const char *name, sim_link *out) {
  for (size_t i = 0; i < sizeof LINKS / sizeof LINKS[0]; i++)
    if (!strcmp(LINKS[i].name, name)) {
      *out = LINKS[i];
      return true;
    }
  return false;
}

void sim_link_names(char *buf, int cap) {
  int len = 0;
  buf[0] = 0;
  for (size_t i = 0; i < sizeof LINKS / sizeof LINKS[0] && len < cap; i++)
    len += snprintf(buf + len, (size_t)(cap - len), "%s%s", i ? ", " : "", LINKS[i].name);
}
