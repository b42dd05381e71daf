// The scenario's faults section (see scenario_impl.h): each fault's kind, time, target and
// the kind's own keys, checked against the phases and the deployments; which kinds an
// external target takes; one fault applied at once (scenario_parse_fault_now).
//
// Left to others: the timeline of one deployment (faults/timeline.c), injecting and judging
// faults (faults/).
#include <libfyaml.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/yaml_map.h"
#include "kernels/util.h"
#include "scenarios/scenario_impl.h"
#include "serving/launch.h"

#define SCN_MAX_TARGET_INDEX (1 << 20) // largest replica or rank number a fault target names

// --- faults

// Target forms (bits) a fault accepts.
enum { TGT_REPLICA = 1, TGT_RANK = 2, TGT_EVERY = 4 };

// Parses "replicaR", "replicaR.rankK" or "every-rank"; returns the form (0 when malformed).
static int target_parse(const char *t, int *r, int *k) {
  if (!strcmp(t, "every-rank")) return TGT_EVERY;
  if (strncmp(t, "replica", 7)) return 0;
  char *end;
  const char *p = t + 7;
  if (*p < '0' || *p > '9') return 0;
  long rv = strtol(p, &end, 10);
  if (rv > SCN_MAX_TARGET_INDEX) return 0;
  *r = (int)rv;
  if (!*end) return TGT_REPLICA;
  if (strncmp(end, ".rank", 5) || end[5] < '0' || end[5] > '9') return 0;
  long kv = strtol(end + 5, &end, 10);
  if (*end || kv > SCN_MAX_TARGET_INDEX) return 0;
  *k = (int)kv;
  return TGT_RANK;
}

// True when some deployment has replica r (and rank k when k >= 0).
static bool target_exists(const scenario *s, int r, int k) {
  for (int i = 0; i < s->n_deployments; i++) {
    const scn_deployment *d = &s->deployments[i];
    if (r < d->dp && (k < 0 || k < d->tp * d->pp)) return true;
  }
  return false;
}

// "replicaR, replicaR.rankK or every-rank": the forms in accept.
static void target_forms(int accept, char *buf, size_t cap) {
  static const char *const forms[] = {"replicaR", "replicaR.rankK", "every-rank"};
  const char *got[3];
  int n = 0;
  for (int i = 0; i < 3; i++)
    if (accept & (1 << i)) got[n++] = forms[i];
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < n; i++) len = sc_list_add(buf, cap, len, i, n, " or ", got[i]);
}

// Checks target text (value v of key k) against the forms `accept` and the deployments.
static sc_status check_target(scn_ctx *c, struct fy_node *v, struct fy_node *k, const char *text,
                              int accept) {
  int r = 0, rk = -1;
  int form = target_parse(text, &r, &rk);
  if (!(form & accept)) {
    char e[160];
    target_forms(accept, e, sizeof e);
    return yaml_map_expect_at(&c->doc, v, k, yaml_map_key_text(k), e);
  }
  if (form == TGT_EVERY || target_exists(c->s, r, form == TGT_RANK ? rk : -1)) return SC_OK;
  char have[300];
  size_t len = 0;
  have[0] = 0;
  for (int i = 0; i < c->s->n_deployments && len < sizeof have; i++) {
    const scn_deployment *d = &c->s->deployments[i];
    len += (size_t)snprintf(have + len, sizeof have - len, "%s%s: replica0..%d x rank0..%d",
                            i ? ", " : "", d->label, d->dp - 1, d->tp * d->pp - 1);
  }
  return yaml_map_fail(&c->doc, v, k, "key '%s': '%s' exists in no deployment (%s)",
                       yaml_map_key_text(k), text, have);
}

// --- each kind's own keys: v is the value of the kind's key k in fault m (a word kind's
// value read as `word`), ft the fault filled in

// The row type of the table below (the parsers read it: chaos draws from it).
typedef struct kind_row kind_row;
static const kind_row *row_of(scn_fault_kind k);

static sc_status parse_kill(scn_ctx *c, const yaml_map_view *m, struct fy_node *v,
                            struct fy_node *k, scn_fault *ft, const char *word) {
  (void)m;
  static const char *const whats[] = {"gpu", "replica"};
  int i = 0;
  SC_TRY(yaml_map_pick(&c->doc, v, k, word, whats, 2, &i));
  snprintf(ft->what, sizeof ft->what, "%s", word);
  return SC_OK;
}

static sc_status parse_hang(scn_ctx *c, const yaml_map_view *m, struct fy_node *v,
                            struct fy_node *k, scn_fault *ft, const char *word) {
  static const char *const whats[] = {"rank", "replica"};
  int i = 0;
  SC_TRY(yaml_map_pick(&c->doc, v, k, word, whats, 2, &i));
  snprintf(ft->what, sizeof ft->what, "%s", word);
  if (yaml_map_has(m, "resume_after") && yaml_map_has(m, "duration")) // both set duration_ns
    return yaml_map_fail(&c->doc, yaml_map_key(m, "duration"), NULL,
                         "key 'duration': a hang takes "
                         "resume_after or duration (the same thing), got both");
  return SC_OK;
}

static sc_status parse_slow(scn_ctx *c, const yaml_map_view *fm, struct fy_node *v,
                            struct fy_node *k, scn_fault *ft, const char *word) {
  (void)fm, (void)word;
  static const char *const none[] = {NULL};
  char on[16] = "";
  const yaml_map_field f[] = {
      F_STR("on", on),
      F_DBL("factor", &ft->factor),
      F_DUR("latency", &ft->latency_ns),
      F_DBL("bandwidth", &ft->bandwidth),
  };
  yaml_map_view m;
  SC_TRY(yaml_map_read_view(&c->doc, v, "slow", k, f, COUNT(f), none, 0, &m));
  SC_TRY(yaml_map_need(&c->doc, &m, "on", "rank or link"));
  static const char *const ons[] = {"rank", "link"};
  int o = 0;
  SC_TRY(yaml_map_pick_key(&c->doc, &m, "on", on, ons, 2, &o));
  snprintf(ft->what, sizeof ft->what, "%s", on);
  SC_TRY(yaml_map_check(&c->doc, &m, "factor", ft->factor > 1, "a step-time multiplier > 1"));
  SC_TRY(yaml_map_check(&c->doc, &m, "bandwidth", ft->bandwidth > 0, "bytes/s, a number > 0"));
  if (o == 0) {
    for (int i = 0; i < m.n; i++)
      if (!strcmp(m.name[i], "latency") || !strcmp(m.name[i], "bandwidth"))
        return yaml_map_fail(&c->doc, m.key[i], NULL,
                             "key '%s': only with on: link (a slow rank takes "
                             "factor)",
                             m.name[i]);
    SC_TRY(yaml_map_need(&c->doc, &m, "factor", "a step-time multiplier > 1"));
  } else if (!yaml_map_has(&m, "factor") && !yaml_map_has(&m, "latency") &&
             !yaml_map_has(&m, "bandwidth")) {
    return yaml_map_fail(&c->doc, v, k,
                         "key 'slow': expected at least one of factor, latency or "
                         "bandwidth, got none");
  }
  return SC_OK;
}

static sc_status parse_cancel_storm(scn_ctx *c, const yaml_map_view *fm, struct fy_node *v,
                                    struct fy_node *k, scn_fault *ft, const char *word) {
  (void)fm, (void)word;
  static const char *const nested[] = {"stages"};
  const yaml_map_field f[] = {F_DBL("fraction", &ft->fraction), F_INT("count", &ft->count)};
  yaml_map_view m;
  SC_TRY(yaml_map_read_view(&c->doc, v, "cancel_storm", k, f, COUNT(f), nested, COUNT(nested), &m));
  int ifr = yaml_map_find(&m, "fraction"), ic = yaml_map_find(&m, "count");
  if (ifr >= 0 && ic >= 0) {
    int later = ifr > ic ? ifr : ic;
    return yaml_map_fail(&c->doc, m.key[later], NULL,
                         "key '%s': expected exactly one of fraction or "
                         "count, got both",
                         m.name[later]);
  }
  if (ifr < 0 && ic < 0)
    return yaml_map_fail(&c->doc, v, k,
                         "missing required key 'fraction' or 'count' (how many in-flight "
                         "requests to cancel)");
  SC_TRY(yaml_map_check(&c->doc, &m, "fraction", ft->fraction > 0 && ft->fraction <= 1,
                        "a number in (0, 1]"));
  SC_TRY(yaml_map_check(&c->doc, &m, "count", ft->count >= 1, "an integer >= 1"));
  ft->stages = SCN_STAGE_QUEUED | SCN_STAGE_PREFILL | SCN_STAGE_DECODE;
  if (yaml_map_has(&m, "stages")) {
    static const char *const stages[] = {"queued", "prefill", "decode"};
    int idx[3], n = 0;
    struct fy_node *items[3];
    SC_TRY(yaml_map_enum_list(&c->doc, yaml_map_val(&m, "stages"), yaml_map_key(&m, "stages"),
                              "a list of stages: queued, prefill, decode", stages, 3, 3, idx, &n,
                              items));
    ft->stages = 0;
    for (int i = 0; i < n; i++) {
      if (ft->stages & (1 << idx[i]))
        return yaml_map_fail(&c->doc, items[i], NULL, "key 'stages': '%s' is listed twice",
                             stages[idx[i]]);
      ft->stages |= 1 << idx[i];
    }
  }
  return SC_OK;
}

// hot_swap on an external target: a rolling relaunch with another served model ({model} in the
// launch template) and/or another launch command.
static sc_status parse_target_swap(scn_ctx *c, struct fy_node *v, struct fy_node *k,
                                   scn_fault *ft) {
  static const char *const none[] = {NULL};
  const scn_target *t = &c->s->target;
  const yaml_map_field f[] = {F_STR("model", ft->swap_model), F_STR("launch", ft->swap_launch)};
  yaml_map_view m;
  SC_TRY(yaml_map_read_view(&c->doc, v, "hot_swap", k, f, COUNT(f), none, 0, &m));
  if (!m.n)
    return yaml_map_fail(&c->doc, v, k,
                         "key 'hot_swap': expected at least one of model (a served model "
                         "name for {model} in the launch template) or launch (a new command), got "
                         "neither");
  SC_TRY(yaml_map_check(&c->doc, &m, "model", ft->swap_model[0] != 0, "a served model name"));
  SC_TRY(yaml_map_check(&c->doc, &m, "launch", ft->swap_launch[0] != 0, "a command template"));
  if (yaml_map_has(&m, "launch"))
    SC_TRY(scn_check_template(c, yaml_map_val(&m, "launch"), yaml_map_key(&m, "launch"),
                              ft->swap_launch));
  const char *tmpl = ft->swap_launch[0] ? ft->swap_launch : t->launch;
  if (ft->swap_model[0] && tmpl[0] && !launch_template_uses(tmpl, "model"))
    return yaml_map_fail(
        &c->doc, yaml_map_val(&m, "model"), yaml_map_key(&m, "model"),
        "key 'model': the launch "
        "command has no {model}: the relaunched server would serve the same model");
  if (launch_template_uses(t->url, "port") && tmpl[0] && !launch_template_uses(tmpl, "port"))
    return yaml_map_fail(&c->doc, v, k,
                         "key 'launch': the url has {port} but the command does not pass it "
                         "on");
  return SC_OK;
}

static sc_status parse_hot_swap(scn_ctx *c, const yaml_map_view *fm, struct fy_node *v,
                                struct fy_node *k, scn_fault *ft, const char *word) {
  (void)fm, (void)word;
  if (c->s->target.set) return parse_target_swap(c, v, k, ft);
  static const char *const none[] = {NULL};
  char model[1024] = "";
  const yaml_map_field f[] = {F_STR("model", model),
                              F_CUSTOM("dtype", ft->swap_dtype, scn_parse_dtype, DTYPE_EXPECT)};
  yaml_map_view m;
  SC_TRY(yaml_map_read_view(&c->doc, v, "hot_swap", k, f, COUNT(f), none, 0, &m));
  if (!m.n)
    return yaml_map_fail(&c->doc, v, k,
                         "key 'hot_swap': expected at least one of model or dtype, got "
                         "neither");
  if (yaml_map_has(&m, "model")) {
    struct fy_node *mv = yaml_map_val(&m, "model"), *mk = yaml_map_key(&m, "model");
    if (!model[0])
      return yaml_map_expect_at(&c->doc, mv, mk, "model", "a preset name, .yaml file or directory");
    SC_TRY(scn_load_model(c, mv, mk, model, SRC_PRESET | SRC_DIR, ft->swap_model,
                          sizeof ft->swap_model, &ft->swap_config, &ft->swap_has_weights));
  }
  return SC_OK;
}

static sc_status parse_clock_jump(scn_ctx *c, const yaml_map_view *fm, struct fy_node *v,
                                  struct fy_node *k, scn_fault *ft, const char *word) {
  (void)fm, (void)word;
  if (c->s->mode == SCN_MODE_SIM)
    return yaml_map_fail(&c->doc, k, NULL,
                         "clock_jump: not available in mode: sim (the virtual clock "
                         "has no wall clock to jump)");
  static const char *const none[] = {NULL};
  const yaml_map_field cf[] = {
      F_CUSTOM("offset", &ft->offset_ns, yaml_map_parse_sdur, YAML_MAP_SDUR_EXPECT)};
  yaml_map_view cm;
  SC_TRY(yaml_map_read_view(&c->doc, v, "clock_jump", k, cf, 1, none, 0, &cm));
  SC_TRY(yaml_map_need(&c->doc, &cm, "offset", YAML_MAP_SDUR_EXPECT));
  return yaml_map_check(&c->doc, &cm, "offset", ft->offset_ns != 0, "a non-zero signed duration");
}

static sc_status parse_oom(scn_ctx *c, const yaml_map_view *fm, struct fy_node *v,
                           struct fy_node *k, scn_fault *ft, const char *word) {
  (void)fm, (void)word;
  static const char *const none[] = {NULL};
  static const char *const modes[] = {"transient", "persistent"};
  char mode[16] = "transient";
  const yaml_map_field of[] = {F_STR("mode", mode), F_INT("after_allocs", &ft->after_allocs)};
  yaml_map_view om;
  SC_TRY(yaml_map_read_view(&c->doc, v, "oom", k, of, 2, none, 0, &om));
  int i = 0;
  SC_TRY(yaml_map_pick_key(&c->doc, &om, "mode", mode, modes, 2, &i));
  SC_TRY(yaml_map_check(&c->doc, &om, "after_allocs", ft->after_allocs >= 0, "an integer >= 0"));
  snprintf(ft->what, sizeof ft->what, "%s", mode);
  return SC_OK;
}

static sc_status parse_corrupt(scn_ctx *c, const yaml_map_view *fm, struct fy_node *v,
                               struct fy_node *k, scn_fault *ft, const char *word) {
  (void)fm, (void)word;
  static const char *const none[] = {NULL};
  static const char *const kinds[] = {"nan", "bitflip"};
  char ck[16] = "";
  const yaml_map_field cf[] = {F_STR("kind", ck)};
  yaml_map_view cm;
  SC_TRY(yaml_map_read_view(&c->doc, v, "corrupt", k, cf, 1, none, 0, &cm));
  SC_TRY(yaml_map_need(&c->doc, &cm, "kind", "nan or bitflip"));
  int i = 0;
  SC_TRY(yaml_map_pick_key(&c->doc, &cm, "kind", ck, kinds, 2, &i));
  snprintf(ft->what, sizeof ft->what, "%s", ck);
  return SC_OK;
}

static sc_status parse_exec(scn_ctx *c, const yaml_map_view *fm, struct fy_node *v,
                            struct fy_node *k, scn_fault *ft, const char *word) {
  (void)fm, (void)word;
  static const char *const none[] = {NULL};
  const yaml_map_field ef[] = {F_STR("command", ft->exec_command)};
  yaml_map_view em;
  SC_TRY(yaml_map_read_view(&c->doc, v, "exec", k, ef, 1, none, 0, &em));
  SC_TRY(yaml_map_need(&c->doc, &em, "command",
                       "a command line run at the fault's time, e.g. \"docker kill "
                       "llm-{replica}\""));
  SC_TRY(yaml_map_check(&c->doc, &em, "command", ft->exec_command[0] != 0, "a command line"));
  char bad[64];
  if (!launch_exec_check(ft->exec_command, bad, sizeof bad))
    return yaml_map_fail(&c->doc, yaml_map_val(&em, "command"), yaml_map_key(&em, "command"),
                         "key 'command': %s%s; "
                         "expected placeholders among {pid}, {port}, {replica} ({{ and }} for "
                         "literal braces)",
                         bad[0] == '{' ? "unknown placeholder " : "", bad);
  return SC_OK;
}

static sc_status parse_chaos(scn_ctx *c, const yaml_map_view *fm, struct fy_node *v,
                             struct fy_node *k, scn_fault *ft, const char *word);

// --- which kinds of deployment take each kind: w is "FILE:LINE:COL: fault 'KIND'"
//
// Without a target every kind but exec runs on shardcheck's own replicas. An external target
// takes only what reaches a server from outside: signals to what shardcheck launched, the
// clients' own cancels, a user command, and shardcheck serve's admin API.

static sc_status reach_any(scn_ctx *c, const scn_fault *f, const char *w) {
  (void)c, (void)f, (void)w;
  return SC_OK;
}

// Inside the engine (oom, corrupt, slow): on a target only through serve's admin API.
static sc_status reach_admin(scn_ctx *c, const scn_fault *f, const char *w) {
  const scn_target *t = &c->s->target;
  if (!t->set) return SC_OK;
  if (!t->admin_token[0])
    return sc_fail(c->doc.err, SC_INVALID,
                   "%s: an external target takes no %s fault (it happens inside the "
                   "engine) unless it is shardcheck serve: set target.openai.admin_token to "
                   "the --admin-token its launch passes, and the fault goes through its admin "
                   "API (docs/targets.md)",
                   w, scenario_fault_kind_name(f->kind));
  if (t->launch[0] && !strstr(t->launch, t->admin_token))
    return sc_fail(c->doc.err, SC_INVALID,
                   "%s: target.openai.admin_token is not in target.openai.launch (the "
                   "launched server needs --admin-token with it)",
                   w);
  return SC_OK;
}

// Signals (kill, hang, clock_jump, hot_swap): on a target only to what shardcheck launched.
static sc_status reach_launched(scn_ctx *c, const scn_fault *f, const char *w) {
  (void)f;
  const scn_target *t = &c->s->target;
  if (t->set && !t->launch[0])
    return sc_fail(c->doc.err, SC_INVALID,
                   "%s: needs target.openai.launch (shardcheck signals "
                   "only what it launched; an exec fault reaches a server it did not start)",
                   w);
  return SC_OK;
}

static sc_status reach_kill(scn_ctx *c, const scn_fault *f, const char *w) {
  SC_TRY(reach_launched(c, f, w));
  const scn_target *t = &c->s->target;
  if (t->set && !strcmp(f->what, "gpu") && !t->rank_process[0])
    return sc_fail(c->doc.err, SC_INVALID,
                   "%s: kill: gpu needs target.openai.rank_process (a "
                   "regular expression on the command line of the server's worker processes, "
                   "e.g. \"VllmWorker\")",
                   w);
  return SC_OK;
}

static sc_status reach_hang(scn_ctx *c, const scn_fault *f, const char *w) {
  SC_TRY(reach_launched(c, f, w));
  if (c->s->target.set && !strcmp(f->what, "rank"))
    return sc_fail(c->doc.err, SC_INVALID,
                   "%s: hang: rank is not available on an external target "
                   "(hang: replica stops the whole server)",
                   w);
  return SC_OK;
}

static sc_status reach_chaos(scn_ctx *c, const scn_fault *f, const char *w) {
  (void)f;
  if (!c->s->target.set) return SC_OK;
  return sc_fail(c->doc.err, SC_INVALID,
                 "%s: not on an external target (its draws include oom, "
                 "slow and corrupt); list kill, hang and cancel_storm faults instead",
                 w);
}

static sc_status reach_exec(scn_ctx *c, const scn_fault *f, const char *w) {
  const scn_target *t = &c->s->target;
  if (!t->set && c->predicting)
    return sc_fail(c->doc.err, SC_INVALID,
                   "%s: not in mode sim (a user command has no simulated "
                   "server to reach): predict without it",
                   w);
  if (!t->set)
    return sc_fail(c->doc.err, SC_INVALID,
                   "%s: only with a target (it runs a command against a "
                   "server shardcheck did not start; shardcheck's own replicas take kill and "
                   "hang)",
                   w);
  if (!t->launch[0] && strstr(f->exec_command, "{pid}"))
    return sc_fail(c->doc.err, SC_INVALID,
                   "%s: {pid} needs target.openai.launch (a server "
                   "shardcheck did not start has no pid it knows)",
                   w);
  return SC_OK;
}

// --- the table of fault kinds: one row each (docs/design.md: the one place to add a kind,
// with its runtime row in faults/kinds.c)

// What a kind takes besides its own key.
enum {
  KIND_TIMED = 1,        // at or at_phase (exactly one)
  KIND_DURATION = 2,     // duration
  KIND_TARGET = 4,       // target
  KIND_RESUME_AFTER = 8, // resume_after (the same as duration)
  KIND_WORD = 16,        // its value is a word (kill: gpu), not a mapping of its own keys
  KIND_CHAOS = 32,       // chaos may draw it
};

struct kind_row {
  scn_fault_kind_info info; // name, example, target_only, now
  unsigned takes;           // KIND_*
  int targets;              // TGT_* forms a target may take
  bool target_required;
  const char *rank_what; // when its what is this, targets are a rank or every-rank (required)
  sc_status (*parse)(scn_ctx *c, const yaml_map_view *m, struct fy_node *v, struct fy_node *k,
                     scn_fault *ft, const char *word);
  // Whether the scenario's kind of deployment takes the parsed fault f.
  sc_status (*reach)(scn_ctx *c, const scn_fault *f, const char *w);
};

enum { TGT_ANY = TGT_REPLICA | TGT_RANK | TGT_EVERY };

// clang-format off
static const kind_row kinds[SCN_FAULT_N] = {
    [SCN_FAULT_KILL] = {.info = {.name = "kill", .now = true,
                                 .example = "{kill: replica, at: 1s, target: replica0}"},
                        .takes = KIND_TIMED | KIND_TARGET | KIND_WORD | KIND_CHAOS,
                        .targets = TGT_REPLICA, .target_required = true, .rank_what = "gpu",
                        .parse = parse_kill, .reach = reach_kill},
    [SCN_FAULT_HANG] = {.info = {.name = "hang", .now = true,
                                 .example = "{hang: replica, at: 1s, resume_after: 2s, "
                                            "target: replica0}"},
                        .takes = KIND_TIMED | KIND_DURATION | KIND_TARGET | KIND_RESUME_AFTER |
                                 KIND_WORD | KIND_CHAOS,
                        .targets = TGT_REPLICA, .target_required = true, .rank_what = "rank",
                        .parse = parse_hang, .reach = reach_hang},
    [SCN_FAULT_SLOW] = {.info = {.name = "slow", .now = true,
                                 .example = "{slow: {on: rank, factor: 3}, at: 1s, "
                                            "target: replica0.rank0}"},
                        .takes = KIND_TIMED | KIND_DURATION | KIND_TARGET | KIND_CHAOS,
                        .targets = TGT_ANY, .rank_what = "rank",
                        .parse = parse_slow, .reach = reach_admin},
    [SCN_FAULT_CANCEL_STORM] = {.info = {.name = "cancel_storm",
                                         .example = "{cancel_storm: {fraction: 0.5}, at: 1s}"},
                                .takes = KIND_TIMED | KIND_CHAOS,
                                .parse = parse_cancel_storm, .reach = reach_any},
    [SCN_FAULT_HOT_SWAP] = {.info = {.name = "hot_swap",
                                     .example = "{hot_swap: {dtype: int8}, at: 1s}"},
                            .takes = KIND_TIMED | KIND_TARGET, .targets = TGT_REPLICA,
                            .parse = parse_hot_swap, .reach = reach_launched},
    [SCN_FAULT_CLOCK_JUMP] = {.info = {.name = "clock_jump",
                                       .example = "{clock_jump: {offset: +1h}, at: 1s}"},
                              .takes = KIND_TIMED,
                              .parse = parse_clock_jump, .reach = reach_launched},
    [SCN_FAULT_OOM] = {.info = {.name = "oom", .now = true,
                                .example = "{oom: {mode: transient}, at: 1s, target: replica0}"},
                       .takes = KIND_TIMED | KIND_DURATION | KIND_TARGET | KIND_CHAOS,
                       .targets = TGT_ANY, .target_required = true,
                       .parse = parse_oom, .reach = reach_admin},
    [SCN_FAULT_CORRUPT] = {.info = {.name = "corrupt", .now = true,
                                    .example = "{corrupt: {kind: nan}, at: 1s, "
                                               "target: replica0}"},
                           .takes = KIND_TIMED | KIND_DURATION | KIND_TARGET | KIND_CHAOS,
                           .targets = TGT_ANY, .target_required = true,
                           .parse = parse_corrupt, .reach = reach_admin},
    [SCN_FAULT_CHAOS] = {.info = {.name = "chaos",
                                  .example = "{chaos: {kinds: [kill, hang], count: [1, 2], "
                                             "between: [1s, 5s]}}"},
                         .parse = parse_chaos, .reach = reach_chaos},
    [SCN_FAULT_EXEC] = {.info = {.name = "exec", .target_only = true,
                                 .example = "{exec: {command: \"true\"}, at: 1s}"},
                        .takes = KIND_TIMED | KIND_TARGET, .targets = TGT_REPLICA,
                        .parse = parse_exec, .reach = reach_exec},
};
// clang-format on

static const kind_row *row_of(scn_fault_kind k) {
  return (unsigned)k < SCN_FAULT_N && kinds[k].info.name ? &kinds[k] : NULL;
}

// The names of the kinds with all of `flags` (0: every kind; now: the ones the admin API
// takes), "a, b or c" (then `tail`, e.g. " or clear") into buf; their kinds into ids[] when not
// NULL; returns how many.
static int kind_names(unsigned flags, bool now, const char *last, char *buf, size_t cap,
                      scn_fault_kind *ids, const char **names) {
  int n = 0, total = 0;
  for (int k = 0; k < SCN_FAULT_N; k++)
    total += (kinds[k].takes & flags) == flags && (!now || kinds[k].info.now);
  size_t len = 0;
  if (cap) buf[0] = 0;
  for (int k = 0; k < SCN_FAULT_N; k++) {
    const kind_row *r = &kinds[k];
    if ((r->takes & flags) != flags || (now && !r->info.now)) continue;
    if (ids) ids[n] = (scn_fault_kind)k;
    if (names) names[n] = r->info.name;
    len = sc_list_add(buf, cap, len, n++, total, last, r->info.name);
  }
  return n;
}

static sc_status parse_chaos(scn_ctx *c, const yaml_map_view *fm, struct fy_node *v,
                             struct fy_node *k, scn_fault *ft, const char *word) {
  (void)fm, (void)word;
  static const char *const nested[] = {"kinds", "count", "between", "keep_alive"};
  yaml_map_view m;
  SC_TRY(yaml_map_read_view(&c->doc, v, "chaos", k, NULL, 0, nested, COUNT(nested), &m));
  SC_TRY(yaml_map_need(&c->doc, &m, "kinds", "a list of fault kinds to draw from"));
  SC_TRY(yaml_map_need(&c->doc, &m, "count", "[min, max] faults to draw"));
  SC_TRY(yaml_map_need(&c->doc, &m, "between", "[from, to]: the window of fault times"));
  const char *drawable[SCN_FAULT_N];
  scn_fault_kind drawn[SCN_FAULT_N];
  char list[200], expect[220];
  int nd = kind_names(KIND_CHAOS, false, ", ", list, sizeof list, drawn, drawable);
  snprintf(expect, sizeof expect, "a list of %s", list);
  int idx[SCN_FAULT_N], n = 0;
  struct fy_node *items[SCN_FAULT_N];
  SC_TRY(yaml_map_enum_list(&c->doc, yaml_map_val(&m, "kinds"), yaml_map_key(&m, "kinds"), expect,
                            drawable, nd, nd, idx, &n, items));
  for (int i = 0; i < n; i++) ft->kinds_mask |= 1u << drawn[idx[i]];
  int cnt[2] = {0, 0};
  struct fy_node *cv = yaml_map_val(&m, "count"), *ck = yaml_map_key(&m, "count");
  const char *ce = "[min, max]: two integers, 0 <= min <= max, max >= 1";
  SC_TRY(yaml_map_int_list(&c->doc, cv, ck, ce, 0, 2, cnt, &n, NULL));
  if (n != 2 || cnt[0] > cnt[1] || cnt[1] < 1)
    return yaml_map_expect_at(&c->doc, cv, ck, "count", ce);
  ft->count_min = cnt[0];
  ft->count_max = cnt[1];
  struct fy_node *bv = yaml_map_val(&m, "between"), *bk = yaml_map_key(&m, "between"), *bi[2];
  const char *be = "[from, to]: two durations, from <= to";
  SC_TRY(yaml_map_seq(&c->doc, bv, bk, be, 2, bi, &n));
  if (n != 2) return yaml_map_expect_at(&c->doc, bv, bk, "between", be);
  for (int i = 0; i < 2; i++) {
    yaml_map_field f = F_DUR("between", &ft->between_ns[i]);
    SC_TRY(yaml_map_read_scalar(&c->doc, bk, bi[i], &f));
  }
  if (ft->between_ns[0] > ft->between_ns[1])
    return yaml_map_expect_at(&c->doc, bv, bk, "between", be);
  if (yaml_map_has(&m, "keep_alive")) {
    struct fy_node *kv = yaml_map_val(&m, "keep_alive"), *kk = yaml_map_key(&m, "keep_alive"),
                   *ki[8];
    SC_TRY(
        yaml_map_seq(&c->doc, kv, kk, "a list of replicas (replica0, replica1, ...)", 8, ki, &n));
    for (int i = 0; i < n; i++) {
      yaml_map_field f = F_STR("keep_alive", ft->keep_alive[i]);
      SC_TRY(yaml_map_read_scalar(&c->doc, kk, ki[i], &f));
      SC_TRY(check_target(c, ki[i], kk, ft->keep_alive[i], TGT_REPLICA));
    }
    ft->n_keep_alive = n;
  }
  return SC_OK;
}

static sc_status parse_fault(scn_ctx *c, struct fy_node *item, struct fy_node *k, scn_fault *ft) {
  const scn_workload *w = &c->s->workload;
  // the fault's own keys, then one kind's: a word kind's value read with them, a mapping
  // kind's walked by its parse
  char word[16] = "";
  yaml_map_field f[SCN_FAULT_N + 5];
  const char *nested[SCN_FAULT_N];
  int nf = 0, nn = 0;
  for (int i = 0; i < SCN_FAULT_N; i++) {
    if (kinds[i].takes & KIND_WORD)
      f[nf++] = (yaml_map_field)F_STR(kinds[i].info.name, word);
    else
      nested[nn++] = kinds[i].info.name;
  }
  f[nf++] = (yaml_map_field)F_DUR("at", &ft->at_ns);
  f[nf++] = (yaml_map_field)F_STR("at_phase", ft->at_phase);
  f[nf++] = (yaml_map_field)F_STR("target", ft->target);
  f[nf++] = (yaml_map_field)F_DUR("duration", &ft->duration_ns);
  f[nf++] = (yaml_map_field)F_DUR("resume_after", &ft->duration_ns); // a hang's duration
  yaml_map_view m;
  SC_TRY(yaml_map_read_view(&c->doc, item, "faults", k, f, nf, nested, nn, &m));
  yaml_map_pos(item, &ft->line, &ft->col);
  int kind = -1, ki = -1;
  for (int i = 0; i < m.n; i++)
    for (int j = 0; j < SCN_FAULT_N; j++) {
      if (strcmp(m.name[i], kinds[j].info.name)) continue;
      if (kind >= 0)
        return yaml_map_fail(&c->doc, m.key[i], NULL,
                             "key '%s': expected one fault kind per fault, got "
                             "both '%s' and '%s'",
                             kinds[j].info.name, kinds[kind].info.name, kinds[j].info.name);
      kind = j;
      ki = i;
    }
  if (kind < 0) {
    char all[300];
    kind_names(0, false, " or ", all, sizeof all, NULL, NULL);
    return yaml_map_fail(&c->doc, item, k,
                         "key 'faults': expected one fault kind per fault (%s), got none", all);
  }
  ft->kind = (scn_fault_kind)kind;
  const kind_row *r = &kinds[kind];
  const char *name = r->info.name;
  if (c->now) { // applied at once: the kinds that act on a replica, for as long as no clear
    if (!r->info.now) {
      char now[200];
      kind_names(0, true, ", ", now, sizeof now, NULL, NULL);
      return yaml_map_fail(&c->doc, m.key[ki], NULL,
                           "key '%s': expected one of %s or clear (a %s fault is a scenario's "
                           "only)",
                           name, now, name);
    }
    for (int i = 0; i < m.n; i++) {
      const char *n = m.name[i];
      if (!strcmp(n, "at") || !strcmp(n, "at_phase") || !strcmp(n, "duration") ||
          !strcmp(n, "resume_after"))
        return yaml_map_fail(&c->doc, m.key[i], NULL,
                             "key '%s': a fault sent to a server applies now and "
                             "lasts until a clear; no %s",
                             n, n);
    }
  }
  // keys the kind does not take
  for (int i = 0; i < m.n; i++) {
    const char *n = m.name[i];
    bool ok = i == ki ||
              ((!strcmp(n, "at") || !strcmp(n, "at_phase")) && (r->takes & KIND_TIMED)) ||
              (!strcmp(n, "duration") && (r->takes & KIND_DURATION)) ||
              (!strcmp(n, "target") && (r->takes & KIND_TARGET)) ||
              (!strcmp(n, "resume_after") && (r->takes & KIND_RESUME_AFTER));
    if (!ok)
      return yaml_map_fail(&c->doc, m.key[i], NULL, "key '%s': a %s fault takes no %s", n, name, n);
  }
  const bool timed = r->takes & KIND_TIMED;
  int ia = yaml_map_find(&m, "at"), ip = yaml_map_find(&m, "at_phase");
  if (timed && ia >= 0 && ip >= 0) {
    int later = ia > ip ? ia : ip;
    return yaml_map_fail(&c->doc, m.key[later], NULL,
                         "key '%s': expected exactly one of at or at_phase, "
                         "got both",
                         m.name[later]);
  }
  if (timed && ia < 0 && ip < 0 && !c->now)
    return yaml_map_fail(&c->doc, item, k,
                         "missing required key 'at' or 'at_phase' (when the %s fault "
                         "happens)",
                         name);
  if (ip >= 0) {
    bool found = false;
    char names[300];
    size_t len = 0;
    names[0] = 0;
    for (int i = 0; i < w->n_phases; i++) {
      found |= !strcmp(w->phases[i].name, ft->at_phase);
      if (len < sizeof names)
        len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "",
                                w->phases[i].name);
    }
    if (!found) {
      char e[340];
      snprintf(e, sizeof e, "the name of a phase (%s)", names);
      return yaml_map_expect_at(&c->doc, m.val[ip], m.key[ip], "at_phase", e);
    }
  }
  SC_TRY(r->parse(c, &m, m.val[ki], m.key[ki], ft, word));
  // its target: a rank (or every rank) when its what aims at one, else the row's forms
  bool at_rank = r->rank_what && !strcmp(ft->what, r->rank_what);
  int accept = at_rank ? TGT_RANK | TGT_EVERY : r->targets;
  bool required = at_rank || r->target_required;
  if (yaml_map_has(&m, "target"))
    return check_target(c, yaml_map_val(&m, "target"), yaml_map_key(&m, "target"), ft->target,
                        accept);
  if (required) {
    char e[160];
    target_forms(accept, e, sizeof e);
    return yaml_map_fail(&c->doc, item, k, "missing required key 'target' (%s, for a %s%s%s fault)",
                         e, name, ft->what[0] ? ": " : "", ft->what);
  }
  return SC_OK;
}

sc_status scn_parse_faults(scn_ctx *c, struct fy_node *v, struct fy_node *k) {
  scenario *s = c->s;
  if (v && fy_node_get_type(v) == FYNT_SEQUENCE && fy_node_sequence_item_count(v) == 0)
    return SC_OK; // faults: []
  struct fy_node *items[SCN_MAX_FAULTS];
  SC_TRY(yaml_map_seq(&c->doc, v, k, "a list of faults", SCN_MAX_FAULTS, items, &s->n_faults));
  for (int i = 0; i < s->n_faults; i++) SC_TRY(parse_fault(c, items[i], k, &s->faults[i]));
  return SC_OK;
}

sc_status scn_check_fault_target(scn_ctx *c, const scn_fault *f) {
  char w[300];
  snprintf(w, sizeof w, "%s:%d:%d: fault '%s'", c->doc.file, f->line, f->col,
           scenario_fault_kind_name(f->kind));
  return row_of(f->kind)->reach(c, f, w);
}

// --- public API: faults

static sc_status parse_now_root(struct fy_node *root, void *arg, sc_error *err) {
  scn_ctx *c = arg;
  if (!root || fy_node_is_null(root))
    return sc_fail(err, SC_INVALID,
                   "%s: empty; expected one fault (a mapping such as "
                   "{\"kill\": \"gpu\", \"target\": \"replica0.rank1\"})",
                   c->doc.file);
  return parse_fault(c, root, NULL, &c->s->faults[0]);
}

sc_status scenario_parse_fault_now(const char *text, size_t len, const char *name, int dp,
                                   int ranks, bool sim, scn_fault *out, sc_error *err) {
  memset(out, 0, sizeof *out);
  scenario *s = calloc(1, sizeof *s);
  if (!s) return sc_fail(err, SC_OOM, "%s: out of memory", name);
  scn_set_defaults(s);
  s->mode = sim ? SCN_MODE_SIM : SCN_MODE_REAL;
  s->n_deployments = 1;
  s->deployments[0] = (scn_deployment){.tp = ranks, .pp = 1, .dp = dp};
  snprintf(s->deployments[0].label, sizeof s->deployments[0].label, "served");
  scn_ctx c = {.doc = {name, err}, .dir = ".", .s = s, .now = true};
  sc_status st = yaml_map_parse(text, len, name, parse_now_root, &c, err);
  if (st == SC_OK) *out = s->faults[0];
  free(s);
  return st;
}

bool scenario_fault_target(const char *text, int *replica, int *rank) {
  int r = -1, k = -1;
  int form = target_parse(text, &r, &k);
  if (form != TGT_REPLICA && form != TGT_RANK) return false;
  *replica = r;
  *rank = form == TGT_RANK ? k : -1;
  return true;
}

const char *scenario_fault_kind_name(scn_fault_kind k) {
  const kind_row *r = row_of(k);
  return r ? r->info.name : "unknown";
}

const scn_fault_kind_info *scenario_fault_kind(scn_fault_kind k) {
  const kind_row *r = row_of(k);
  return r ? &r->info : NULL;
}
