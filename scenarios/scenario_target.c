// The scenario's target section (see scenario_impl.h; docs/targets.md): an external
// OpenAI-compatible server, its launch template, environment, readiness and extra body; a
// target's hardware (GPU ids) and deployments; the model as the workload sees it.
//
// Left to others: expanding templates and launching servers (serving/launch.c), the HTTP
// replica (serving/replica_http.c), which faults reach a target (scenario_faults.c).
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <libfyaml.h>
#include <math.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/yaml_map.h"
#include "scenarios/scenario_impl.h"
#include "serving/launch.h"

// A target's context as the workload sees it: the server refuses what it cannot hold.
#define TARGET_CONTEXT    (1 << 20)
#define TARGET_CHAT_VOCAB 32000                    // chat: ids only pick generated words
#define TARGET_READY_NS   (600ull * 1000000000ull) // ready.timeout default
#define TARGET_GRACE_NS   (10ull * 1000000000ull)  // stop_grace default

// --- target: an external OpenAI-compatible server (docs/targets.md)

void scn_warn(scn_ctx *c, const char *fmt, ...) {
  scenario *s = c->s;
  if (s->n_warnings == SCN_MAX_WARNINGS) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->warnings[s->n_warnings++], sizeof s->warnings[0], fmt, ap);
  va_end(ap);
}

// An error unless text (the value v of key k) is a template launch.h can expand.
sc_status scn_check_template(scn_ctx *c, struct fy_node *v, struct fy_node *k, const char *text) {
  char bad[64];
  if (launch_template_check(text, bad, sizeof bad)) return SC_OK;
  if (bad[0] == '{')
    return yaml_map_fail(&c->doc, v, k,
                         "key '%s': unknown placeholder %s; expected one of {tp}, {pp}, {dp}, "
                         "{replica}, {port}, {gpus}, {shardcheck}, {model} ({{ and }} for literal "
                         "braces)",
                         yaml_map_key_text(k), bad);
  return yaml_map_fail(&c->doc, v, k, "key '%s': %s in '%.200s' ({{ and }} for literal braces)",
                       yaml_map_key_text(k), bad, text);
}

// The YAML value v as JSON: mappings are objects, sequences arrays; a plain scalar is null,
// true, false, an integer or a number when it reads as one, else a string (as is every quoted
// scalar). NULL (error at v) for a key that is not a plain scalar.
static json_t *yaml_json(scn_ctx *c, struct fy_node *v, struct fy_node *k, sc_status *st) {
  if (!v || fy_node_is_null(v)) return json_null();
  switch (fy_node_get_type(v)) {
  case FYNT_MAPPING: {
    json_t *o = json_object();
    void *it = NULL;
    struct fy_node_pair *pair;
    while ((pair = fy_node_mapping_iterate(v, &it))) {
      struct fy_node *pk = fy_node_pair_key(pair);
      const char *name = pk && fy_node_get_type(pk) == FYNT_SCALAR ? fy_node_get_scalar0(pk) : NULL;
      if (!name) {
        *st = yaml_map_fail(&c->doc, pk, v, "key '%s': expected plain keys", yaml_map_key_text(k));
        json_decref(o);
        return NULL;
      }
      json_t *x = yaml_json(c, fy_node_pair_value(pair), pk, st);
      if (!x) {
        json_decref(o);
        return NULL;
      }
      json_object_set_new(o, name, x);
    }
    return o;
  }
  case FYNT_SEQUENCE: {
    json_t *a = json_array();
    void *it = NULL;
    struct fy_node *item;
    while ((item = fy_node_sequence_iterate(v, &it))) {
      json_t *x = yaml_json(c, item, k, st);
      if (!x) {
        json_decref(a);
        return NULL;
      }
      json_array_append_new(a, x);
    }
    return a;
  }
  case FYNT_SCALAR: break;
  }
  const char *t = fy_node_get_scalar0(v);
  if (!t) t = "";
  if (fy_node_get_style(v) != FYNS_PLAIN) return json_string(t);
  if (!strcmp(t, "null") || !strcmp(t, "~")) return json_null();
  if (!strcmp(t, "true")) return json_true();
  if (!strcmp(t, "false")) return json_false();
  char *end;
  errno = 0;
  long long i = strtoll(t, &end, 10);
  if (*t && !*end && !errno) return json_integer(i);
  double d = strtod(t, &end);
  if (*t && !*end && isfinite(d)) return json_real(d);
  return json_string(t);
}

static sc_status parse_target_env(scn_ctx *c, struct fy_node *v, struct fy_node *k) {
  scn_target *t = &c->s->target;
  if (!v || fy_node_get_type(v) != FYNT_MAPPING)
    return yaml_map_expect_at(&c->doc, v, k, "env", "a mapping of NAME: value");
  void *it = NULL;
  struct fy_node_pair *pair;
  while ((pair = fy_node_mapping_iterate(v, &it))) {
    struct fy_node *pk = fy_node_pair_key(pair), *pv = fy_node_pair_value(pair);
    const char *name = pk && fy_node_get_type(pk) == FYNT_SCALAR ? fy_node_get_scalar0(pk) : "";
    bool ok = name && (isalpha((unsigned char)name[0]) || name[0] == '_') &&
              strlen(name) < sizeof t->env[0].name;
    for (const char *q = name; ok && *q; q++) ok = isalnum((unsigned char)*q) || *q == '_';
    if (!ok)
      return yaml_map_fail(&c->doc, pk, v, "key 'env': expected a variable name, got '%s'", name);
    if (t->n_env == SCN_MAX_TARGET_ENV)
      return yaml_map_fail(&c->doc, pk, v, "key 'env': at most %d variables", SCN_MAX_TARGET_ENV);
    yaml_map_field f = F_STR(name, t->env[t->n_env].value);
    SC_TRY(yaml_map_read_scalar(&c->doc, pk, pv, &f));
    SC_TRY(scn_check_template(c, pv, pk, t->env[t->n_env].value));
    snprintf(t->env[t->n_env].name, sizeof t->env[0].name, "%s", name);
    t->n_env++;
  }
  return SC_OK;
}

sc_status scn_parse_target(scn_ctx *c, struct fy_node *v, struct fy_node *k) {
  scenario *s = c->s;
  scn_target *t = &s->target;
  static const char *const nested[] = {"openai"};
  yaml_map_view m;
  SC_TRY(yaml_map_read_view(&c->doc, v, "target", k, NULL, 0, nested, COUNT(nested), &m));
  SC_TRY(yaml_map_need(&c->doc, &m, "openai", "an OpenAI-compatible server: {url, model, ...}"));
  struct fy_node *ov = yaml_map_val(&m, "openai"), *ok = yaml_map_key(&m, "openai");
  char api[16] = "completions";
  t->set = true;
  snprintf(t->ready_path, sizeof t->ready_path, "/health");
  snprintf(t->metrics_path, sizeof t->metrics_path, "/metrics");
  t->ready_timeout_ns = TARGET_READY_NS;
  t->stop_grace_ns = TARGET_GRACE_NS;
  static const char *const onested[] = {"env", "ready", "extra_body"};
  const yaml_map_field f[] = {
      F_STR("api", api),
      F_STR("model", t->model),
      F_STR("url", t->url),
      F_STR("launch", t->launch),
      F_STR("api_key_env", t->api_key_env),
      F_INT("vocab_size", &t->vocab_size),
      F_STR("rank_process", t->rank_process),
      F_STR("admin_token", t->admin_token),
      F_STR("metrics_path", t->metrics_path),
      F_DUR("stop_grace", &t->stop_grace_ns),
  };
  yaml_map_view om;
  SC_TRY(yaml_map_read_view(&c->doc, ov, "openai", ok, f, COUNT(f), onested, COUNT(onested), &om));
  yaml_map_pos(ov, &t->line, &t->col);
  static const char *const apis[] = {"completions", "chat"};
  int a = 0;
  SC_TRY(yaml_map_pick_key(&c->doc, &om, "api", api, apis, 2, &a));
  t->api = a ? SCN_API_CHAT : SCN_API_COMPLETIONS;
  SC_TRY(yaml_map_need(&c->doc, &om, "model", "the served model name sent in each request"));
  SC_TRY(yaml_map_check(&c->doc, &om, "model", t->model[0] != 0, "a non-empty model name"));
  SC_TRY(yaml_map_need(&c->doc, &om, "url", "the API base, e.g. \"http://127.0.0.1:{port}/v1\""));
  SC_TRY(yaml_map_check(&c->doc, &om, "url",
                        !strncmp(t->url, "http://", 7) || !strncmp(t->url, "https://", 8),
                        "an http:// or https:// URL"));
  SC_TRY(scn_check_template(c, yaml_map_val(&om, "url"), yaml_map_key(&om, "url"), t->url));
  if (t->api == SCN_API_COMPLETIONS)
    SC_TRY(yaml_map_need(&c->doc, &om, "vocab_size",
                         "api completions sends token ids in [3, vocab_size): the "
                         "served model's vocabulary size"));
  SC_TRY(yaml_map_check(&c->doc, &om, "vocab_size", t->vocab_size > 3, "an integer > 3"));
  SC_TRY(yaml_map_check(&c->doc, &om, "stop_grace", t->stop_grace_ns > 0, "a duration > 0"));
  SC_TRY(yaml_map_check(&c->doc, &om, "api_key_env", t->api_key_env[0] != 0,
                        "an environment variable name"));
  SC_TRY(yaml_map_check(&c->doc, &om, "metrics_path",
                        !t->metrics_path[0] || t->metrics_path[0] == '/',
                        "a path starting with '/' (\"\": no scraping)"));
  if (t->rank_process[0]) {
    regex_t re;
    int rc = regcomp(&re, t->rank_process, REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
      char why[128];
      regerror(rc, &re, why, sizeof why);
      return yaml_map_fail(
          &c->doc, yaml_map_val(&om, "rank_process"), yaml_map_key(&om, "rank_process"),
          "key 'rank_process': expected a regular expression (POSIX extended), got "
          "'%s': %s",
          t->rank_process, why);
    }
    regfree(&re);
  }
  if (yaml_map_has(&om, "launch")) {
    struct fy_node *lv = yaml_map_val(&om, "launch"), *lk = yaml_map_key(&om, "launch");
    SC_TRY(yaml_map_check(&c->doc, &om, "launch", t->launch[0] != 0, "a command line"));
    SC_TRY(scn_check_template(c, lv, lk, t->launch));
    char word[512];
    launch_command_word(t->launch, word, sizeof word);
    if (!strchr(word, '{') && !launch_on_path(word)) {
      char w[300];
      yaml_map_where(lv, c->doc.file, w, sizeof w);
      scn_warn(c,
           "%s: key 'launch': '%s' is not an executable on this machine's PATH (it may "
           "exist only where the scenario runs)",
           w, word);
    }
    if (launch_template_uses(t->url, "port") && !launch_template_uses(t->launch, "port"))
      return yaml_map_fail(&c->doc, lv, lk,
                           "key 'launch': the url has {port} but the command does not "
                           "pass it on: the server would not listen where requests go");
  }
  if (yaml_map_has(&om, "env")) {
    if (!t->launch[0])
      return yaml_map_fail(&c->doc, yaml_map_key(&om, "env"), NULL,
                           "key 'env': only with 'launch' (it is the "
                           "launched server's environment)");
    SC_TRY(parse_target_env(c, yaml_map_val(&om, "env"), yaml_map_key(&om, "env")));
  }
  if (yaml_map_has(&om, "ready")) {
    static const char *const none[] = {NULL};
    const yaml_map_field rf[] = {F_STR("path", t->ready_path),
                                 F_DUR("timeout", &t->ready_timeout_ns)};
    yaml_map_view rm;
    SC_TRY(yaml_map_read_view(&c->doc, yaml_map_val(&om, "ready"), "ready",
                              yaml_map_key(&om, "ready"), rf, COUNT(rf), none, 0, &rm));
    SC_TRY(
        yaml_map_check(&c->doc, &rm, "path", t->ready_path[0] == '/', "a path starting with '/'"));
    SC_TRY(yaml_map_check(&c->doc, &rm, "timeout", t->ready_timeout_ns > 0, "a duration > 0"));
  }
  if (yaml_map_has(&om, "extra_body")) {
    struct fy_node *ev = yaml_map_val(&om, "extra_body"), *ek = yaml_map_key(&om, "extra_body");
    if (!ev || fy_node_get_type(ev) != FYNT_MAPPING)
      return yaml_map_expect_at(&c->doc, ev, ek, "extra_body",
                                "a mapping merged into every request's JSON");
    static const char *const reserved[] = {"model",  "prompt",         "messages",
                                           "stream", "stream_options", "max_tokens"};
    for (int i = 0; i < COUNT(reserved); i++) {
      struct fy_node *rk = fy_node_mapping_lookup_key_by_string(ev, reserved[i], FY_NT);
      if (rk)
        return yaml_map_fail(&c->doc, rk, ek,
                             "key 'extra_body': '%s' is shardcheck's to set (from the "
                             "target and the workload)",
                             reserved[i]);
    }
    sc_status st = SC_OK;
    json_t *j = yaml_json(c, ev, ek, &st);
    if (!j) return st;
    char *txt = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(j);
    if (!txt) return sc_fail(c->doc.err, SC_OOM, "%s: out of memory", c->doc.file);
    bool fits = strlen(txt) < sizeof t->extra_body;
    snprintf(t->extra_body, sizeof t->extra_body, "%s", txt);
    free(txt);
    if (!fits)
      return yaml_map_fail(&c->doc, ev, ek, "key 'extra_body': longer than %zu bytes as JSON",
                           sizeof t->extra_body - 1);
  }
  // The model as the workload sees it: the vocabulary prompt ids are drawn from, and no
  // context limit of its own (the server refuses what it cannot hold).
  model_config *mc = &s->model.config;
  memset(mc, 0, sizeof *mc);
  snprintf(mc->name, sizeof mc->name, "%.*s", (int)sizeof mc->name - 1, t->model);
  mc->vocab_size = t->vocab_size ? t->vocab_size : TARGET_CHAT_VOCAB;
  mc->max_seq_len = TARGET_CONTEXT;
  mc->bos_token_id = mc->eos_token_id = -1;
  snprintf(s->model.source, sizeof s->model.source, "%s", t->model);
  snprintf(s->model.resolved, sizeof s->model.resolved, "%s", t->model);
  return SC_OK;
}

// A target's hardware: devices only (the GPU ids handed out to launched replicas).
sc_status scn_target_hardware(scn_ctx *c, struct fy_node *v, struct fy_node *k) {
  scn_hardware *h = &c->s->hardware;
  static const char *const nested[] = {"devices"};
  char profile[1024] = "";
  int gpus = 0;
  // profile and gpus are --mode sim's (the prediction's simulated GPUs): accepted here
  const yaml_map_field f[] = {F_STR("profile", profile), F_INT("gpus", &gpus)};
  yaml_map_view m;
  SC_TRY(yaml_map_read_view(&c->doc, v, "hardware", k, f, COUNT(f), nested, COUNT(nested), &m));
  snprintf(h->backend, sizeof h->backend, "%s", "");
  h->profile[0] = 0;
  if (!yaml_map_has(&m, "devices")) return SC_OK;
  struct fy_node *dk = yaml_map_key(&m, "devices");
  SC_TRY(yaml_map_int_list(&c->doc, yaml_map_val(&m, "devices"), dk,
                           "a list of GPU ids handed out to launched "
                           "replicas",
                           0, COUNT(h->devices), h->devices, &h->n_devices, NULL));
  for (int i = 0; i < h->n_devices; i++)
    for (int j = 0; j < i; j++)
      if (h->devices[i] == h->devices[j])
        return yaml_map_fail(&c->doc, yaml_map_val(&m, "devices"), dk,
                             "key 'devices': device %d is listed twice", h->devices[i]);
  h->gpus = h->n_devices;
  return SC_OK;
}

// "host:port" of a URL (at most cap - 1 bytes), for a fixed target's deployment label.
static void url_hostport(const char *url, char *out, size_t cap) {
  const char *p = strstr(url, "://");
  p = p ? p + 3 : url;
  size_t n = strcspn(p, "/?#");
  if (n >= cap) n = cap - 1;
  memcpy(out, p, n);
  out[n] = 0;
}

// A target's deployments: with launch, each dp > 1 needs {port} in the url and the devices
// must cover tp x pp x dp; without, one deployment of one replica, labelled with where it is.
sc_status scn_check_target_deployments(scn_ctx *c, struct fy_node *root) {
  scenario *s = c->s;
  const scn_target *t = &s->target;
  if (s->n_deployments == 0) {
    if (t->launch[0])
      return yaml_map_fail(&c->doc, root, NULL,
                           "missing required key 'deployments' (with target.openai."
                           "launch: the layouts to launch, e.g. [{tp: 1, dp: 2}])");
    SC_TRY(scn_add_deployment(c, root, 1, 1, 1));
    s->deployments[0].line = s->deployments[0].col = 0;
  }
  for (int i = 0; i < s->n_deployments; i++) {
    scn_deployment *d = &s->deployments[i];
    char w[300];
    if (d->line)
      snprintf(w, sizeof w, "%s:%d:%d", c->doc.file, d->line, d->col);
    else
      snprintf(w, sizeof w, "%s", c->doc.file);
    if (!t->launch[0]) {
      if (s->n_deployments > 1 || d->dp > 1)
        return sc_fail(c->doc.err, SC_INVALID,
                       "%s: deployment '%s': without target.openai.launch "
                       "the url is one fixed server: one deployment of dp 1 (its tp and pp only "
                       "describe what is behind it)",
                       w, d->label);
      char hp[32];
      url_hostport(t->url, hp, sizeof hp);
      char label[sizeof d->label];
      snprintf(label, sizeof label, "%.8s@%.22s", d->label, hp);
      snprintf(d->label, sizeof d->label, "%s", label);
      continue;
    }
    if (d->dp > 1 && !launch_template_uses(t->url, "port"))
      return sc_fail(c->doc.err, SC_INVALID,
                     "%s: deployment '%s' has %d replicas: target.openai.url "
                     "needs {port} so that each replica's server gets its own",
                     w, d->label, d->dp);
    int n = d->tp * d->pp * d->dp;
    if (s->hardware.n_devices > 0 && n > s->hardware.n_devices)
      return sc_fail(c->doc.err, SC_INVALID,
                     "%s: deployment '%s' (tp=%d pp=%d dp=%d) needs %d GPUs; "
                     "hardware.devices lists %d",
                     w, d->label, d->tp, d->pp, d->dp, n, s->hardware.n_devices);
  }
  return SC_OK;
}
