// Hardware profiles: scenarios/hardware/NAME.yaml (embedded) or a .yaml path -> hw_profile.
//
// Only reading and checking live here; the struct is engine/hw_profile.h, the figures and
// their sources are in the YAML files, what the planner does with memory is engine/memplan.c,
// and the simulator's use of the rest is kernels/sim/.
#include "config/hardware.h"

#include <libfyaml.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/yaml_map.h"

#define HW_DIR "scenarios/hardware"
#define HW_INTER_LINK_DEFAULT "ib-ndr" // the link between nodes when a profile names none

// --- nested keys (the simulator's curves and measured tables)

static sc_status read_curve(struct fy_node *v, const char *file, const char *key, sim_curve *c,
                            sc_error *err) {
  return yaml_map_pairs(v, file, key, c->x, c->y, SIM_CURVE_MAX, &c->n, err);
}

static sc_status node_gemm_eff(struct fy_node *v, void *dst, const char *file, sc_error *err) {
  SC_TRY(read_curve(v, file, "gemm_eff", dst, err));
  const sim_curve *c = dst;
  for (int i = 0; i < c->n; i++)
    if (!(c->y[i] > 0 && c->y[i] <= 1)) {
      char where[300];
      yaml_map_where(v, file, where, sizeof where);
      return sc_fail(err, SC_INVALID, "%s: key 'gemm_eff': fractions must be in (0, 1], got %g",
                     where, c->y[i]);
    }
  return SC_OK;
}

static sc_status pos_time_curve(struct fy_node *v, const char *file, const char *key, sim_curve *c,
                                sc_error *err) {
  SC_TRY(read_curve(v, file, key, c, err));
  for (int i = 0; i < c->n; i++)
    if (!(c->y[i] > 0)) {
      char where[300];
      yaml_map_where(v, file, where, sizeof where);
      return sc_fail(err, SC_INVALID, "%s: key '%s': times must be positive seconds, got %g",
                     where, key, c->y[i]);
    }
  return SC_OK;
}

static sc_status node_t(struct fy_node *v, void *dst, const char *file, sc_error *err) {
  return pos_time_curve(v, file, "t", dst, err);
}
static sc_status node_decode(struct fy_node *v, void *dst, const char *file, sc_error *err) {
  return pos_time_curve(v, file, "decode", dst, err);
}
static sc_status node_prefill(struct fy_node *v, void *dst, const char *file, sc_error *err) {
  return pos_time_curve(v, file, "prefill", dst, err);
}

// Walks a list of mappings under `key`, calling item() for each with its index.
static sc_status each_item(struct fy_node *v, const char *file, const char *key, int cap,
                           int *n, void *dst,
                           sc_status (*item)(struct fy_node *, const char *, void *, int,
                                             sc_error *),
                           sc_error *err) {
  char where[300];
  yaml_map_where(v, file, where, sizeof where);
  if (!v || fy_node_get_type(v) != FYNT_SEQUENCE)
    return sc_fail(err, SC_INVALID, "%s: key '%s': expected a list of mappings", where, key);
  void *it = NULL;
  struct fy_node *e;
  *n = 0;
  while ((e = fy_node_sequence_iterate(v, &it))) {
    if (*n == cap) {
      yaml_map_where(e, file, where, sizeof where);
      return sc_fail(err, SC_INVALID, "%s: key '%s': at most %d entries", where, key, cap);
    }
    SC_TRY(item(e, file, dst, *n, err));
    (*n)++;
  }
  return SC_OK;
}

static sc_status positive_ints(struct fy_node *e, const char *file, const char *key,
                               const int *v, const char *const *names, int n, sc_error *err) {
  for (int i = 0; i < n; i++)
    if (v[i] < 1) {
      char where[300];
      yaml_map_where(e, file, where, sizeof where);
      return sc_fail(err, SC_INVALID, "%s: %s entry: key '%s' must be at least 1, got %d",
                     where, key, names[i], v[i]);
    }
  return SC_OK;
}

static sc_status gemm_item(struct fy_node *e, const char *file, void *dst, int i, sc_error *err) {
  sim_gemm_table *g = &((sim_hw *)dst)->gemm[i];
  const yaml_map_field f[] = {
      {"n", YAML_MAP_INT, &g->n, 0, true, NULL, NULL, NULL, NULL},
      {"k", YAML_MAP_INT, &g->k, 0, true, NULL, NULL, NULL, NULL},
      {"threads", YAML_MAP_INT, &g->threads, 0, true, NULL, NULL, NULL, NULL},
      {"t", YAML_MAP_NODE, &g->t, 0, true, NULL, "a list of [m, seconds] pairs", NULL, node_t},
  };
  SC_TRY(yaml_map_read_node(e, file, f, 4, err));
  static const char *const names[] = {"n", "k", "threads"};
  return positive_ints(e, file, "gemm", (int[]){g->n, g->k, g->threads}, names, 3, err);
}

static sc_status attn_item(struct fy_node *e, const char *file, void *dst, int i, sc_error *err) {
  sim_attn_table *a = &((sim_hw *)dst)->attn[i];
  const yaml_map_field f[] = {
      {"heads", YAML_MAP_INT, &a->heads, 0, true, NULL, NULL, NULL, NULL},
      {"kv_heads", YAML_MAP_INT, &a->kv_heads, 0, true, NULL, NULL, NULL, NULL},
      {"head_dim", YAML_MAP_INT, &a->head_dim, 0, true, NULL, NULL, NULL, NULL},
      {"threads", YAML_MAP_INT, &a->threads, 0, true, NULL, NULL, NULL, NULL},
      {"decode", YAML_MAP_NODE, &a->decode, 0, true, NULL, "a list of [context, seconds] pairs",
       NULL, node_decode},
      {"prefill", YAML_MAP_NODE, &a->prefill, 0, true, NULL, "a list of [tokens, seconds] pairs",
       NULL, node_prefill},
  };
  SC_TRY(yaml_map_read_node(e, file, f, 6, err));
  static const char *const names[] = {"heads", "kv_heads", "head_dim", "threads"};
  return positive_ints(e, file, "attention",
                       (int[]){a->heads, a->kv_heads, a->head_dim, a->threads}, names, 4, err);
}

static sc_status coll_item(struct fy_node *e, const char *file, void *dst, int i, sc_error *err) {
  sim_coll_table *c = &((sim_hw *)dst)->coll[i];
  const yaml_map_field f[] = {
      {"ranks", YAML_MAP_INT, &c->ranks, 0, true, NULL, NULL, NULL, NULL},
      {"t", YAML_MAP_NODE, &c->allreduce, 0, true, NULL, "a list of [bytes, seconds] pairs",
       NULL, node_t},
  };
  SC_TRY(yaml_map_read_node(e, file, f, 2, err));
  static const char *const names[] = {"ranks"};
  return positive_ints(e, file, "allreduce", &c->ranks, names, 1, err);
}

// A residual may be negative (the op tables price such steps high), never beyond
// HW_STEP_OVERHEAD_MAX_S.
static sc_status residual_curve(struct fy_node *v, void *dst, const char *file, const char *key,
                                sc_error *err) {
  SC_TRY(read_curve(v, file, key, dst, err));
  const sim_curve *c = dst;
  for (int i = 0; i < c->n; i++)
    if (!(c->y[i] >= -HW_STEP_OVERHEAD_MAX_S && c->y[i] <= HW_STEP_OVERHEAD_MAX_S)) {
      char where[300];
      yaml_map_where(v, file, where, sizeof where);
      return sc_fail(err, SC_INVALID, "%s: key '%s': residuals must be seconds in [-%d, %d], got %g",
                     where, key, HW_STEP_OVERHEAD_MAX_S, HW_STEP_OVERHEAD_MAX_S, c->y[i]);
    }
  return SC_OK;
}
static sc_status node_residual(struct fy_node *v, void *dst, const char *file, sc_error *err) {
  return residual_curve(v, dst, file, "s", err);
}
static sc_status node_prefill_residual(struct fy_node *v, void *dst, const char *file,
                                       sc_error *err) {
  return residual_curve(v, dst, file, "prefill", err);
}

static sc_status overhead_item(struct fy_node *e, const char *file, void *dst, int i,
                               sc_error *err) {
  sim_overhead_table *o = &((sim_hw *)dst)->overhead[i];
  const yaml_map_field f[] = {
      {"tp", YAML_MAP_INT, &o->tp, 0, true, NULL, NULL, NULL, NULL},
      {"replicas", YAML_MAP_INT, &o->replicas, 0, false, NULL, NULL, NULL, NULL},
      {"s", YAML_MAP_NODE, &o->s, 0, true, NULL, "a list of [rows, seconds] pairs", NULL,
       node_residual},
      {"prefill", YAML_MAP_NODE, &o->prefill, 0, false, NULL,
       "a list of [prompt tokens, seconds] pairs", NULL, node_prefill_residual},
  };
  o->replicas = 1;
  SC_TRY(yaml_map_read_node(e, file, f, 4, err));
  static const char *const names[] = {"tp", "replicas"};
  return positive_ints(e, file, "step_overhead", (int[]){o->tp, o->replicas}, names, 2, err);
}

static sc_status node_gemm(struct fy_node *v, void *dst, const char *file, sc_error *err) {
  sim_hw *h = dst;
  return each_item(v, file, "gemm", SIM_TABLES_MAX, &h->n_gemm, h, gemm_item, err);
}
static sc_status node_attn(struct fy_node *v, void *dst, const char *file, sc_error *err) {
  sim_hw *h = dst;
  return each_item(v, file, "attention", HW_TABLES_ATTN_MAX, &h->n_attn, h, attn_item, err);
}
static sc_status node_coll(struct fy_node *v, void *dst, const char *file, sc_error *err) {
  sim_hw *h = dst;
  return each_item(v, file, "allreduce", HW_TABLES_COLL_MAX, &h->n_coll, h, coll_item, err);
}
static sc_status node_overhead(struct fy_node *v, void *dst, const char *file, sc_error *err) {
  sim_hw *h = dst;
  return each_item(v, file, "step_overhead", SIM_OVERHEAD_TABLES, &h->n_overhead, h,
                   overhead_item, err);
}

static sc_status node_mixed_factor(struct fy_node *v, void *dst, const char *file,
                                   sc_error *err) {
  SC_TRY(read_curve(v, file, "factor", dst, err));
  const sim_curve *c = dst;
  for (int i = 0; i < c->n; i++)
    if (!(c->y[i] >= 1 && c->y[i] <= HW_ENGINE_EFF_MAX)) {
      char where[300];
      yaml_map_where(v, file, where, sizeof where);
      return sc_fail(err, SC_INVALID, "%s: key 'factor': pairs must be [context, factor in "
                     "[1, %d]], got [%g, %g]", where, HW_ENGINE_EFF_MAX, c->x[i], c->y[i]);
    }
  return SC_OK;
}

static sc_status mixed_item(struct fy_node *e, const char *file, void *dst, int i,
                            sc_error *err) {
  sim_mixed_attn *m = &((sim_engine *)dst)->mixed_attn[i];
  const yaml_map_field f[] = {
      {"heads", YAML_MAP_INT, &m->heads, 0, true, NULL, NULL, NULL, NULL},
      {"kv_heads", YAML_MAP_INT, &m->kv_heads, 0, true, NULL, NULL, NULL, NULL},
      {"head_dim", YAML_MAP_INT, &m->head_dim, 0, true, NULL, NULL, NULL, NULL},
      {"decodes", YAML_MAP_INT, &m->decodes, 0, true, NULL, NULL, NULL, NULL},
      {"factor", YAML_MAP_NODE, &m->factor, 0, true, NULL, "a list of [context, factor] pairs",
       NULL, node_mixed_factor},
  };
  SC_TRY(yaml_map_read_node(e, file, f, 5, err));
  static const char *const names[] = {"heads", "kv_heads", "head_dim", "decodes"};
  return positive_ints(e, file, "mixed_attn",
                       (int[]){m->heads, m->kv_heads, m->head_dim, m->decodes}, names, 4, err);
}

static sc_status node_mixed_attn(struct fy_node *v, void *dst, const char *file, sc_error *err) {
  sim_engine *e = dst;
  return each_item(v, file, "mixed_attn", SIM_MIXED_MAX, &e->n_mixed_attn, e, mixed_item, err);
}

// logits_dtype: the bytes of one logit in that dtype.
static bool parse_logits_dtype(const char *text, void *dst) {
  int *bytes = dst;
  if (!strcmp(text, "f32")) *bytes = 4;
  else if (!strcmp(text, "bf16") || !strcmp(text, "f16")) *bytes = 2;
  else return false;
  return true;
}

// A knob's engine-block field (kernels/knobs.h, pform): an int as it is, a flag into a bool
// flag_KEY (made 1 or -1 when present), a value as it is (its has_ flag set when present).
#define KNOB_FLAG_SC_KNOB_P_INT(pkey)
#define KNOB_FLAG_SC_KNOB_P_BOOL(pkey) bool flag_##pkey = false;
#define KNOB_FLAG_SC_KNOB_P_CHUNK(pkey) KNOB_FLAG_SC_KNOB_P_BOOL(pkey)
#define KNOB_FLAG_SC_KNOB_P_VALUE(pkey)
#define KNOB_FLAG(name, type, dflt, en, s, pf, pkey, ok, ex, j) SC_KNOB_CAT(KNOB_FLAG_, pf)(pkey)
#define KNOB_FIELD_SC_KNOB_P_INT(pkey)                                                             \
  {#pkey, YAML_MAP_INT, &e->pkey, 0, false, NULL, NULL, NULL, NULL},
#define KNOB_FIELD_SC_KNOB_P_BOOL(pkey)                                                            \
  {#pkey, YAML_MAP_BOOL, &flag_##pkey, 0, false, NULL, NULL, NULL, NULL},
#define KNOB_FIELD_SC_KNOB_P_CHUNK(pkey) KNOB_FIELD_SC_KNOB_P_BOOL(pkey)
#define KNOB_FIELD_SC_KNOB_P_VALUE(pkey)                                                           \
  {#pkey, YAML_MAP_DOUBLE, &e->pkey, 0, false, NULL, NULL, NULL, NULL},
#define KNOB_FIELD(name, type, dflt, en, s, pf, pkey, ok, ex, j) SC_KNOB_CAT(KNOB_FIELD_, pf)(pkey)

// After reading: the tri-state of a flag given, the has_ flag of a value given, the bounds.
#define KNOB_SET_SC_KNOB_P_INT(pkey, name, ex)                                                     \
  if (e->pkey < 0)                                                                                 \
    return sc_fail(err, SC_INVALID, "%s: engine: key '%s' must be an integer >= 1 (or absent: "  \
                   "the scenario's limits), got %d", where, #pkey, e->pkey);
#define KNOB_SET_SC_KNOB_P_BOOL(pkey, name, ex)                                                    \
  if (fy_node_mapping_lookup_by_string(v, #pkey, FY_NT)) e->pkey = flag_##pkey ? 1 : -1;
#define KNOB_SET_SC_KNOB_P_CHUNK(pkey, name, ex) KNOB_SET_SC_KNOB_P_BOOL(pkey, name, ex)
#define KNOB_SET_SC_KNOB_P_VALUE(pkey, name, ex)                                                   \
  e->has_##pkey = fy_node_mapping_lookup_by_string(v, #pkey, FY_NT) != NULL;                      \
  if (!sc_knob_ok_##name(e->pkey))                                                                 \
    return sc_fail(err, SC_INVALID, "%s: engine: key '%s' must be %s, got %g", where, #pkey, ex,  \
                   e->pkey);
#define KNOB_SET(name, type, dflt, en, s, pf, pkey, ok, ex, j)                                     \
  SC_KNOB_CAT(KNOB_SET_, pf)(pkey, name, ex)

// The engine block (docs/calibration.md): the serving engine's costs, then the scheduler knobs
// of kernels/knobs.h (a row each).
static sc_status node_engine(struct fy_node *v, void *dst, const char *file, sc_error *err) {
  sim_engine *e = dst;
  SC_KNOBS(KNOB_FLAG) // the flags as read
  const yaml_map_field f[] = {
      {"step_s", YAML_MAP_DOUBLE, &e->step_s, 0, false, NULL, NULL, NULL, NULL},
      {"seq_s", YAML_MAP_DOUBLE, &e->seq_s, 0, false, NULL, NULL, NULL, NULL},
      {"tp_step_s", YAML_MAP_DOUBLE, &e->tp_step_s, 0, false, NULL, NULL, NULL, NULL},
      {"prefill_eff", YAML_MAP_DOUBLE, &e->prefill_eff, 0, false, NULL, NULL, NULL, NULL},
      {"decode_eff", YAML_MAP_DOUBLE, &e->decode_eff, 0, false, NULL, NULL, NULL, NULL},
      {"error", YAML_MAP_DOUBLE, &e->error, 0, false, NULL, NULL, NULL, NULL},
      {"mixed_attn", YAML_MAP_NODE, e, 0, false, NULL,
       "a list of {heads, kv_heads, head_dim, decodes, factor: [[context, factor], ...]}", NULL,
       node_mixed_attn},
      {"logits_dtype", YAML_MAP_CUSTOM, &e->logits_bytes, 0, false, parse_logits_dtype,
       "a dtype (f32, bf16, f16)", NULL, NULL},
      SC_KNOBS(KNOB_FIELD)};
  *e = sim_engine_defaults();
  SC_TRY(yaml_map_read_node(v, file, f, (int)(sizeof f / sizeof f[0]), err));
  char where[300];
  yaml_map_where(v, file, where, sizeof where);
  if (!(e->step_s >= 0 && e->step_s <= HW_STEP_OVERHEAD_MAX_S && e->seq_s >= 0 &&
        e->seq_s <= HW_STEP_OVERHEAD_MAX_S && e->tp_step_s >= 0 &&
        e->tp_step_s <= HW_STEP_OVERHEAD_MAX_S))
    return sc_fail(err, SC_INVALID, "%s: engine: keys 'step_s', 'seq_s' and 'tp_step_s' must be "
                   "seconds in [0, %d], got %g, %g and %g", where, HW_STEP_OVERHEAD_MAX_S,
                   e->step_s, e->seq_s, e->tp_step_s);
  if (!(e->prefill_eff > 0 && e->prefill_eff <= HW_ENGINE_EFF_MAX && e->decode_eff > 0 &&
        e->decode_eff <= HW_ENGINE_EFF_MAX))
    return sc_fail(err, SC_INVALID, "%s: engine: keys 'prefill_eff' and 'decode_eff' must be in "
                   "(0, %d], got %g and %g", where, HW_ENGINE_EFF_MAX, e->prefill_eff,
                   e->decode_eff);
  if (!(e->error >= 0 && e->error <= 10))
    return sc_fail(err, SC_INVALID, "%s: engine: key 'error' must be a relative half-width in "
                   "[0, 10], got %g", where, e->error);
  SC_KNOBS(KNOB_SET)
  return SC_OK;
}

// A knob's line of the written engine block (kernels/knobs.h, pform), when it is set.
#define KNOB_WRITE_SC_KNOB_P_INT(o, e, pkey)                                                       \
  if (e->pkey > 0) fprintf(o, "  " #pkey ": %d\n", e->pkey);
#define KNOB_WRITE_SC_KNOB_P_BOOL(o, e, pkey)                                                      \
  if (e->pkey) fprintf(o, "  " #pkey ": %s\n", e->pkey > 0 ? "true" : "false");
#define KNOB_WRITE_SC_KNOB_P_CHUNK(o, e, pkey) KNOB_WRITE_SC_KNOB_P_BOOL(o, e, pkey)
#define KNOB_WRITE_SC_KNOB_P_VALUE(o, e, pkey)                                                     \
  if (e->has_##pkey) fprintf(o, "  " #pkey ": %.6g\n", e->pkey);
#define KNOB_WRITE(name, type, dflt, en, s, pf, pkey, ok, ex, j)                                   \
  SC_KNOB_CAT(KNOB_WRITE_, pf)(o, e, pkey)

void hw_profile_write_engine(FILE *o, const sim_engine *e) {
  fprintf(o, "engine:\n  step_s: %.6g\n  seq_s: %.6g\n  prefill_eff: %.6g\n  decode_eff: %.6g\n",
          e->step_s, e->seq_s, e->prefill_eff, e->decode_eff);
  if (e->tp_step_s > 0) fprintf(o, "  tp_step_s: %.6g\n", e->tp_step_s);
  if (e->n_mixed_attn > 0) fprintf(o, "  mixed_attn:\n");
  for (int i = 0; i < e->n_mixed_attn && i < SIM_MIXED_MAX; i++) {
    const sim_mixed_attn *m = &e->mixed_attn[i];
    fprintf(o, "    - {heads: %d, kv_heads: %d, head_dim: %d, decodes: %d, factor: [", m->heads,
            m->kv_heads, m->head_dim, m->decodes);
    for (int k = 0; k < m->factor.n && k < SIM_CURVE_MAX; k++)
      fprintf(o, "%s[%.6g, %.6g]", k ? ", " : "", m->factor.x[k], m->factor.y[k]);
    fprintf(o, "]}\n");
  }
  if (e->error > 0) fprintf(o, "  error: %.4g\n", e->error);
  if (e->logits_bytes > 0) // the bytes are what is priced: an f16 block comes back as bf16
    fprintf(o, "  logits_dtype: %s\n", e->logits_bytes == 2 ? "bf16" : "f32");
  SC_KNOBS(KNOB_WRITE)
}

// --- loading

static sc_status set_link(sim_link *l, const char *name, const char *where, const char *key,
                          sc_error *err) {
  if (sim_link_lookup(name, l)) return SC_OK;
  char names[256];
  sim_link_names(names, sizeof names);
  return sc_fail(err, SC_INVALID, "%s: key '%s': unknown link '%s'; known links: %s", where, key,
                 name, names);
}

void hw_profile_sync_sim(hw_profile *p) {
  sim_hw *h = &p->sim;
  h->mem_bytes = p->mem_bytes;
  h->mem_bw = p->mem_bw;
  h->flops_f32 = p->flops_fp32;
  h->flops_f16 = p->flops_fp16;
  h->flops_bf16 = p->flops_bf16;
  h->flops_int8 = p->flops_int8;
  h->flops_fp8 = p->flops_fp8;
  h->gpus_per_node = p->gpus_per_node;
  snprintf(h->intra.name, sizeof h->intra.name, "%s", p->link);
  h->intra.bw = p->link_bw;
  h->intra.latency_s = p->link_latency_s;
}

sc_status hw_profile_set_link(hw_profile *p, const char *link, sc_error *err) {
  SC_TRY(set_link(&p->sim.intra, link, p->name, "link", err));
  snprintf(p->link, sizeof p->link, "%s", p->sim.intra.name);
  p->link_bw = p->sim.intra.bw;
  p->link_latency_s = p->sim.intra.latency_s;
  return SC_OK;
}

static sc_status hw_profile_read(const char *name_or_path, hw_profile *p, sc_error *err);

sc_status hw_profile_load(const char *name_or_path, hw_profile *out, sc_error *err) {
  static const hw_profile zero;
  hw_profile *pp = malloc(sizeof *pp);
  if (!pp) return sc_fail(err, SC_OOM, "out of memory reading a hardware profile");
  *pp = zero;
  sc_status st = hw_profile_read(name_or_path, pp, err);
  if (st == SC_OK) *out = *pp;
  free(pp);
  return st;
}

static sc_status hw_profile_read(const char *name_or_path, hw_profile *p, sc_error *err) {
  sim_hw *h = &p->sim;
  // what `engine` takes, for a value that is not a mapping: the costs, then the knobs
  char engine_expect[400];
  size_t len = (size_t)snprintf(engine_expect, sizeof engine_expect,
                                "a mapping {step_s, seq_s, tp_step_s, prefill_eff, decode_eff, error");
#define KNOB_KEY(name, type, dflt, en, s, pf, pkey, ok, ex, j)                                     \
  len += (size_t)snprintf(engine_expect + len, sizeof engine_expect - len, ", " #pkey);
  SC_KNOBS(KNOB_KEY)
#undef KNOB_KEY
  snprintf(engine_expect + len, sizeof engine_expect - len, "}");
  char inter[32] = HW_INTER_LINK_DEFAULT;
  double inter_bw = 0, inter_lat = -1;
  h->mem_eff = 1;
  h->engine = sim_engine_defaults();
  const yaml_map_field fields[] = {
      {"name", YAML_MAP_STRING, p->name, sizeof p->name, true, NULL, NULL, NULL, NULL},
      {"description", YAML_MAP_STRING, p->description, sizeof p->description, true, NULL, NULL,
       NULL, NULL},
      {"mem_bytes", YAML_MAP_DOUBLE, &p->mem_bytes, 0, true, NULL, NULL, NULL, NULL},
      {"mem_bw", YAML_MAP_DOUBLE, &p->mem_bw, 0, true, NULL, NULL, NULL, NULL},
      {"flops_bf16", YAML_MAP_DOUBLE, &p->flops_bf16, 0, true, NULL, NULL, NULL, NULL},
      {"flops_fp16", YAML_MAP_DOUBLE, &p->flops_fp16, 0, true, NULL, NULL, NULL, NULL},
      {"flops_fp32", YAML_MAP_DOUBLE, &p->flops_fp32, 0, true, NULL, NULL, NULL, NULL},
      {"flops_int8", YAML_MAP_DOUBLE, &p->flops_int8, 0, true, NULL, NULL, NULL, NULL},
      {"flops_fp8", YAML_MAP_DOUBLE, &p->flops_fp8, 0, false, NULL, NULL, NULL, NULL},
      {"link", YAML_MAP_STRING, p->link, sizeof p->link, true, NULL, NULL, NULL, NULL},
      {"link_bw", YAML_MAP_DOUBLE, &p->link_bw, 0, true, NULL, NULL, NULL, NULL},
      {"link_latency_s", YAML_MAP_DOUBLE, &p->link_latency_s, 0, true, NULL, NULL, NULL, NULL},
      {"gpus_per_node", YAML_MAP_INT, &p->gpus_per_node, 0, true, NULL, NULL, NULL, NULL},
      // the simulator's (optional)
      {"mem_eff", YAML_MAP_DOUBLE, &h->mem_eff, 0, false, NULL, NULL, NULL, NULL},
      {"gemm_eff", YAML_MAP_NODE, &h->gemm_eff, 0, false, NULL, "a list of [m, fraction] pairs",
       NULL, node_gemm_eff},
      {"launch_s", YAML_MAP_DOUBLE, &h->launch_s, 0, false, NULL, NULL, NULL, NULL},
      {"step_overhead_s", YAML_MAP_DOUBLE, &h->step_overhead_s, 0, false, NULL, NULL, NULL, NULL},
      {"inter_link", YAML_MAP_STRING, inter, sizeof inter, false, NULL, NULL, NULL, NULL},
      {"inter_link_bw", YAML_MAP_DOUBLE, &inter_bw, 0, false, NULL, NULL, NULL, NULL},
      {"inter_link_latency_s", YAML_MAP_DOUBLE, &inter_lat, 0, false, NULL, NULL, NULL, NULL},
      {"host_cores", YAML_MAP_INT, &h->host_cores, 0, false, NULL, NULL, NULL, NULL},
      {"gemm", YAML_MAP_NODE, h, 0, false, NULL, "a list of {n, k, threads, t}", NULL, node_gemm},
      {"attention", YAML_MAP_NODE, h, 0, false, NULL,
       "a list of {heads, kv_heads, head_dim, threads, decode, prefill}", NULL, node_attn},
      {"allreduce", YAML_MAP_NODE, h, 0, false, NULL, "a list of {ranks, t}", NULL, node_coll},
      {"step_overhead", YAML_MAP_NODE, h, 0, false, NULL, "a list of {tp, replicas, s, prefill}", NULL,
       node_overhead},
      {"engine", YAML_MAP_NODE, &h->engine, 0, false, NULL, engine_expect, NULL, node_engine},
  };
  SC_TRY(yaml_map_read_named(HW_DIR, "hardware profile", name_or_path, fields,
                             (int)(sizeof fields / sizeof fields[0]), err));
  // --- checks: positive where the planner or the simulator divides by them
  const char *where = name_or_path;
  const struct {
    const char *key;
    double v;
  } positive[] = {{"mem_bytes", p->mem_bytes},   {"mem_bw", p->mem_bw},
                  {"flops_bf16", p->flops_bf16}, {"flops_fp16", p->flops_fp16},
                  {"flops_fp32", p->flops_fp32}, {"link_bw", p->link_bw}};
  for (size_t i = 0; i < sizeof positive / sizeof positive[0]; i++)
    if (!(positive[i].v > 0))
      return sc_fail(err, SC_INVALID, "%s: key '%s' must be positive, got %g", where,
                     positive[i].key, positive[i].v);
  if (p->flops_int8 < 0)
    return sc_fail(err, SC_INVALID, "%s: key 'flops_int8' must be >= 0 (0 = unknown), got %g",
                   where, p->flops_int8);
  if (!(p->flops_fp8 >= 0) || !isfinite(p->flops_fp8))
    return sc_fail(err, SC_INVALID,
                   "%s: key 'flops_fp8' must be >= 0 (0 or absent: no fp8 tensor cores), got %g",
                   where, p->flops_fp8);
  if (p->link_latency_s < 0 || p->link_latency_s > HW_LINK_LATENCY_MAX_S)
    return sc_fail(err, SC_INVALID, "%s: key 'link_latency_s' must be in [0, %d] seconds, got %g",
                   where, HW_LINK_LATENCY_MAX_S, p->link_latency_s);
  if (p->gpus_per_node < 1 || p->gpus_per_node > HW_GPUS_PER_NODE_MAX)
    return sc_fail(err, SC_INVALID, "%s: key 'gpus_per_node' must be in 1..%d, got %d", where,
                   HW_GPUS_PER_NODE_MAX, p->gpus_per_node);
  if (!p->name[0]) return sc_fail(err, SC_INVALID, "%s: key 'name' must not be empty", where);
  if (!(h->mem_eff > 0 && h->mem_eff <= 1))
    return sc_fail(err, SC_INVALID, "%s: key 'mem_eff' must be in (0, 1], got %g", where,
                   h->mem_eff);
  if (h->launch_s < 0 || h->launch_s > HW_LINK_LATENCY_MAX_S || h->step_overhead_s < 0 ||
      h->step_overhead_s > HW_STEP_OVERHEAD_MAX_S)
    return sc_fail(err, SC_INVALID,
                   "%s: keys 'launch_s' and 'step_overhead_s' must be non-negative seconds "
                   "(at most %d and %d), got %g and %g", where, HW_LINK_LATENCY_MAX_S,
                   HW_STEP_OVERHEAD_MAX_S, h->launch_s, h->step_overhead_s);
  if (h->host_cores < 0 || h->host_cores > HW_HOST_CORES_MAX)
    return sc_fail(err, SC_INVALID, "%s: key 'host_cores' must be in 0..%d, got %d", where,
                   HW_HOST_CORES_MAX, h->host_cores);
  hw_profile_sync_sim(p);
  SC_TRY(set_link(&h->inter, inter, where, "inter_link", err));
  if (inter_bw < 0 || inter_lat > HW_LINK_LATENCY_MAX_S)
    return sc_fail(err, SC_INVALID,
                   "%s: keys 'inter_link_bw' and 'inter_link_latency_s' must be positive "
                   "(latency at most %d s)", where, HW_LINK_LATENCY_MAX_S);
  if (inter_bw > 0) h->inter.bw = inter_bw;
  if (inter_lat >= 0) h->inter.latency_s = inter_lat;
  return SC_OK;
}

int hw_profile_names(const char **names, int cap) { return yaml_map_names(HW_DIR, names, cap); }

void hw_profile_names_list(char *buf, size_t cap) { yaml_map_names_list(HW_DIR, buf, cap); }
