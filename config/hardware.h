// Hardware profiles: scenarios/hardware/NAME.yaml (embedded in the binary) or a YAML path ->
// hw_profile, plus the two edits a scenario or a hand-filled profile needs (the link, the
// simulator's copy of the figures).
//
// The struct itself is engine/hw_profile.h (the planner and the simulator take it); the YAML
// reader is config/yaml_map.h; the figures and their sources are in the YAML files.
#pragma once

#include <stddef.h>
#include <stdio.h>

#include "engine/hw_profile.h"
#include "kernels/status.h"

// Limits hw_profile_load checks (and profile/ clamps what it measures to).
#define HW_LINK_LATENCY_MAX_S 1     // link_latency_s, inter_link_latency_s, launch_s at most
#define HW_STEP_OVERHEAD_MAX_S 10   // step_overhead_s at most; residuals within +- this
#define HW_GPUS_PER_NODE_MAX 1024   // gpus_per_node at most
#define HW_HOST_CORES_MAX 4096      // host_cores at most
#define HW_TABLES_ATTN_MAX 8        // attention tables at most
#define HW_TABLES_COLL_MAX 8        // allreduce tables at most
#define HW_ENGINE_EFF_MAX 10        // engine.prefill_eff, engine.decode_eff at most

// Loads a profile by name (scenarios/hardware/NAME.yaml, built in or installed: config/
// yaml_map.h) or from a .yaml path.
// Unknown keys, missing keys and wrong types are SC_INVALID naming file:line:column and key;
// *out is written only on SC_OK.
sc_status hw_profile_load(const char *name_or_path, hw_profile *out, sc_error *err);
// Copies the flat figures of hw_profile (memory, flops, gpus_per_node, the intra-node link)
// into p->sim; hw_profile_load does it, and so must whoever fills a profile by hand.
void hw_profile_sync_sim(hw_profile *p);
// Writes e as a profile's `engine:` block (the costs, then each knob of kernels/knobs.h that is
// set), as hw_profile_load reads it back.
void hw_profile_write_engine(FILE *o, const sim_engine *e);
// Replaces the intra-node link (a named link, kernels/sim/sim_links.c) and, when nodes > 0,
// keeps gpus_per_node as is: what a scenario's hardware.link overrides. SC_INVALID for an
// unknown link name, *p left as it was.
sc_status hw_profile_set_link(hw_profile *p, const char *link, sc_error *err);
// Fills names[] with the built-in and installed profile names (static strings); returns how
// many exist.
int hw_profile_names(const char **names, int cap);
// Writes "a100-80g, cpu, h100-sxm, ..." (hw_profile_names) into buf, for messages.
void hw_profile_names_list(char *buf, size_t cap);
