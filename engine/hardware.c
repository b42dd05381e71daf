// Hardware profiles: scenarios/hardware/NAME.yaml (embedded) or a .yaml path -> hw_profile.
//
// Only reading and checking live here; the figures and their sources are in the YAML files,
// what the planner does with memory is engine/memplan.c, and the simulator's use of the rest
// is kernels/sim/.
#include "engine/hardware.h"

#include <string.h>

#include "engine/yaml_map.h"

#define HW_DIR "scenarios/hardware"

// --- loading

sc_status hw_profile_load(const char *name_or_path, hw_profile *out, sc_error *err) {
  hw_profile p;
  memset(&p, 0, sizeof p);
  const yaml_map_field fields[] = {
      {"name", YAML_MAP_STRING, p.name, sizeof p.name, true, NULL, NULL, NULL},
      {"description", YAML_MAP_STRING, p.description, sizeof p.description, true, NULL, NULL,
       NULL},
      {"mem_bytes", YAML_MAP_DOUBLE, &p.mem_bytes, 0, true, NULL, NULL, NULL},
      {"mem_bw", YAML_MAP_DOUBLE, &p.mem_bw, 0, true, NULL, NULL, NULL},
      {"flops_bf16", YAML_MAP_DOUBLE, &p.flops_bf16, 0, true, NULL, NULL, NULL},
      {"flops_fp16", YAML_MAP_DOUBLE, &p.flops_fp16, 0, true, NULL, NULL, NULL},
      {"flops_fp32", YAML_MAP_DOUBLE, &p.flops_fp32, 0, true, NULL, NULL, NULL},
      {"flops_int8", YAML_MAP_DOUBLE, &p.flops_int8, 0, true, NULL, NULL, NULL},
      {"link", YAML_MAP_STRING, p.link, sizeof p.link, true, NULL, NULL, NULL},
      {"link_bw", YAML_MAP_DOUBLE, &p.link_bw, 0, true, NULL, NULL, NULL},
      {"link_latency_s", YAML_MAP_DOUBLE, &p.link_latency_s, 0, true, NULL, NULL, NULL},
      {"gpus_per_node", YAML_MAP_INT, &p.gpus_per_node, 0, true, NULL, NULL, NULL},
  };
  SC_TRY(yaml_map_read_named(HW_DIR, "hardware profile", name_or_path, fields,
                             (int)(sizeof fields / sizeof fields[0]), err));
  // --- checks: positive where the planner or the simulator divides by them
  const char *where = name_or_path;
  const struct {
    const char *key;
    double v;
  } positive[] = {{"mem_bytes", p.mem_bytes},   {"mem_bw", p.mem_bw},
                  {"flops_bf16", p.flops_bf16}, {"flops_fp16", p.flops_fp16},
                  {"flops_fp32", p.flops_fp32}, {"link_bw", p.link_bw}};
  for (size_t i = 0; i < sizeof positive / sizeof positive[0]; i++)
    if (!(positive[i].v > 0))
      return sc_fail(err, SC_INVALID, "%s: key '%s' must be positive, got %g", where,
                     positive[i].key, positive[i].v);
  if (p.flops_int8 < 0)
    return sc_fail(err, SC_INVALID, "%s: key 'flops_int8' must be >= 0 (0 = unknown), got %g",
                   where, p.flops_int8);
  if (p.link_latency_s < 0 || p.link_latency_s > 1)
    return sc_fail(err, SC_INVALID, "%s: key 'link_latency_s' must be in [0, 1] seconds, got %g",
                   where, p.link_latency_s);
  if (p.gpus_per_node < 1 || p.gpus_per_node > 1024)
    return sc_fail(err, SC_INVALID, "%s: key 'gpus_per_node' must be in 1..1024, got %d", where,
                   p.gpus_per_node);
  if (!p.name[0]) return sc_fail(err, SC_INVALID, "%s: key 'name' must not be empty", where);
  *out = p;
  return SC_OK;
}

int hw_profile_names(const char **names, int cap) { return yaml_map_names(HW_DIR, names, cap); }
