// Walking a nested document (see yaml_map.h): views of mappings read through field tables,
// the checks and picks that every section of a nested document words the same way, and the
// scalar forms (durations, unsigned integers) its fields take.
//
// Left to others: the flat reader, positions and describe (config/yaml_map.c); what any key
// means (the readers that call these: the scenario language, scenarios/scenario.c).
#include "config/yaml_map.h"

#include <errno.h>
#include <libfyaml.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DUR_MAX_CHARS 40  // digits and dot of a duration at most
#define DUR_MAX_NS 9.2e18 // durations stay below int64 nanoseconds (~292 years)
#define U64_MAX_DIGITS 20 // decimal digits of the largest uint64_t

// --- positions and messages

sc_status yaml_map_fail(const yaml_map_doc *d, struct fy_node *node, struct fy_node *fallback,
                        const char *fmt, ...) {
  char w[300], msg[480];
  yaml_map_where_or(node, fallback, d->file, w, sizeof w);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return sc_fail(d->err, SC_INVALID, "%s: %s", w, msg);
}

sc_status yaml_map_expect_at(const yaml_map_doc *d, struct fy_node *v, struct fy_node *k,
                             const char *key, const char *expect) {
  char got[100];
  yaml_map_describe(v, got, sizeof got);
  return yaml_map_fail(d, v, k, "key '%s': expected %s, got %s", key, expect, got);
}

const char *yaml_map_key_text(struct fy_node *k) {
  const char *t = k ? fy_node_get_scalar0(k) : NULL;
  return t ? t : "?";
}

// --- scalar forms

bool yaml_map_duration(const char *s, bool sign_ok, int64_t *out) {
  bool neg = false;
  if (*s == '+' || *s == '-') {
    if (!sign_ok) return false;
    neg = *s == '-';
    s++;
  }
  const char *p = s;
  int digits = 0, dots = 0;
  for (; (*p >= '0' && *p <= '9') || *p == '.'; p++) {
    if (*p == '.') dots++;
    else digits++;
  }
  if (!digits || dots > 1 || p - s > DUR_MAX_CHARS) return false;
  char num[DUR_MAX_CHARS + 8];
  memcpy(num, s, (size_t)(p - s));
  num[p - s] = 0;
  static const struct {
    const char *unit;
    double ns;
  } units[] = {{"", 1e9}, {"ns", 1}, {"us", 1e3}, {"ms", 1e6},
               {"s", 1e9}, {"m", 60e9}, {"h", 3600e9}};
  double scale = 0;
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (!strcmp(p, units[i].unit)) scale = units[i].ns;
  if (scale == 0) return false;
  double ns = strtod(num, NULL) * scale;
  if (!(ns < DUR_MAX_NS)) return false;
  *out = (neg ? -1 : 1) * (int64_t)llround(ns);
  return true;
}

bool yaml_map_parse_dur(const char *text, void *dst) {
  int64_t v;
  if (!yaml_map_duration(text, false, &v)) return false;
  *(uint64_t *)dst = (uint64_t)v;
  return true;
}

bool yaml_map_parse_sdur(const char *text, void *dst) {
  return yaml_map_duration(text, true, dst);
}

bool yaml_map_parse_u64(const char *text, void *dst) {
  if (!*text || *text == '-' || *text == '+' || strlen(text) > U64_MAX_DIGITS) return false;
  for (const char *p = text; *p; p++)
    if (*p < '0' || *p > '9') return false;
  errno = 0;
  unsigned long long v = strtoull(text, NULL, 10);
  if (errno) return false;
  *(uint64_t *)dst = (uint64_t)v;
  return true;
}

// --- views of mappings

int yaml_map_find(const yaml_map_view *m, const char *k) {
  for (int i = 0; i < m->n; i++)
    if (!strcmp(m->name[i], k)) return i;
  return -1;
}

bool yaml_map_has(const yaml_map_view *m, const char *k) { return yaml_map_find(m, k) >= 0; }

struct fy_node *yaml_map_key(const yaml_map_view *m, const char *k) {
  int i = yaml_map_find(m, k);
  return i >= 0 ? m->key[i] : NULL;
}

struct fy_node *yaml_map_val(const yaml_map_view *m, const char *k) {
  int i = yaml_map_find(m, k);
  return i >= 0 ? m->val[i] : NULL;
}

sc_status yaml_map_read_view(const yaml_map_doc *d, struct fy_node *map, const char *key,
                             struct fy_node *k, const yaml_map_field *f, int nf,
                             const char *const *nested, int nn, yaml_map_view *out) {
  SC_ASSERT(nf + nn <= YAML_MAP_VIEW_MAX);
  char keys[400];
  yaml_map_key_list(f, nf, nested, nn, keys, sizeof keys);
  if (!map || fy_node_get_type(map) != FYNT_MAPPING) {
    char expect[460];
    snprintf(expect, sizeof expect, "a mapping with keys %s", keys);
    if (key) return yaml_map_expect_at(d, map, k, key, expect);
    char got[100];
    yaml_map_describe(map, got, sizeof got);
    return yaml_map_fail(d, map, k, "expected a mapping of scenario keys (%s), got %s", keys,
                         got);
  }
  memset(out, 0, sizeof *out);
  out->map = map;
  out->owner = k;
  int field[YAML_MAP_VIEW_MAX]; // index into f of each present key, -1 for a nested one
  void *it = NULL;
  struct fy_node_pair *pair;
  while ((pair = fy_node_mapping_iterate(map, &it))) {
    struct fy_node *pk = fy_node_pair_key(pair), *pv = fy_node_pair_value(pair);
    const char *name =
        pk && fy_node_get_type(pk) == FYNT_SCALAR ? fy_node_get_scalar0(pk) : NULL;
    if (!name)
      return yaml_map_fail(d, pk, map, "expected a plain key%s%s%s", key ? " in '" : "",
                           key ? key : "", key ? "'" : "");
    int i = 0;
    while (i < nf && strcmp(f[i].key, name)) i++;
    int j = 0;
    while (i == nf && j < nn && strcmp(nested[j], name)) j++;
    if (i == nf && j == nn)
      return yaml_map_fail(d, pk, NULL, "unknown key '%s'; expected one of: %s", name, keys);
    if (i < nf && (!pv || fy_node_is_null(pv))) // no position of its own: point at the key
      return yaml_map_expect_at(d, pv, pk, name, yaml_map_expect(&f[i]));
    field[out->n] = i < nf ? i : -1;
    out->name[out->n] = name;
    out->key[out->n] = pk;
    out->val[out->n] = pv;
    out->n++;
  }
  for (int i = 0; i < out->n; i++)
    if (field[i] >= 0)
      SC_TRY(yaml_map_read_value(out->key[i], out->val[i], d->file, &f[field[i]], d->err));
  return SC_OK;
}

sc_status yaml_map_read_scalar(const yaml_map_doc *d, struct fy_node *k, struct fy_node *v,
                               const yaml_map_field *f) {
  if (!v || fy_node_is_null(v)) return yaml_map_expect_at(d, v, k, f->key, yaml_map_expect(f));
  return yaml_map_read_value(k, v, d->file, f, d->err);
}

// --- checks and picks

sc_status yaml_map_need(const yaml_map_doc *d, const yaml_map_view *m, const char *key,
                        const char *expect) {
  if (yaml_map_has(m, key)) return SC_OK;
  return yaml_map_fail(d, m->map, m->owner, "missing required key '%s' (%s)", key, expect);
}

sc_status yaml_map_check(const yaml_map_doc *d, const yaml_map_view *m, const char *key, bool ok,
                         const char *expect) {
  if (ok || !yaml_map_has(m, key)) return SC_OK;
  return yaml_map_expect_at(d, yaml_map_val(m, key), yaml_map_key(m, key), key, expect);
}

sc_status yaml_map_pick(const yaml_map_doc *d, struct fy_node *v, struct fy_node *k,
                        const char *text, const char *const *names, int n, int *out) {
  for (int i = 0; i < n; i++)
    if (!strcmp(text, names[i])) {
      *out = i;
      return SC_OK;
    }
  char expect[300];
  size_t len = (size_t)snprintf(expect, sizeof expect, "one of ");
  for (int i = 0; i < n && len < sizeof expect; i++)
    len += (size_t)snprintf(expect + len, sizeof expect - len, "%s%s", i ? ", " : "", names[i]);
  return yaml_map_expect_at(d, v, k, yaml_map_key_text(k), expect);
}

sc_status yaml_map_pick_key(const yaml_map_doc *d, const yaml_map_view *m, const char *key,
                            const char *text, const char *const *names, int n, int *out) {
  return yaml_map_pick(d, yaml_map_val(m, key), yaml_map_key(m, key), text, names, n, out);
}

// --- sequences

sc_status yaml_map_seq(const yaml_map_doc *d, struct fy_node *v, struct fy_node *k,
                       const char *expect, int cap, struct fy_node **items, int *n) {
  if (!v || fy_node_get_type(v) != FYNT_SEQUENCE)
    return yaml_map_expect_at(d, v, k, yaml_map_key_text(k), expect);
  *n = 0;
  void *it = NULL;
  struct fy_node *item;
  while ((item = fy_node_sequence_iterate(v, &it))) {
    if (*n == cap)
      return yaml_map_fail(d, item, k, "key '%s': expected %s, at most %d items; got more",
                           yaml_map_key_text(k), expect, cap);
    items[(*n)++] = item;
  }
  if (!*n) return yaml_map_expect_at(d, v, k, yaml_map_key_text(k), expect);
  return SC_OK;
}

sc_status yaml_map_int_list(const yaml_map_doc *d, struct fy_node *v, struct fy_node *k,
                            const char *expect, int lo, int cap, int *out, int *n,
                            struct fy_node **nodes) {
  struct fy_node *buf[64], **items = nodes ? nodes : buf;
  SC_ASSERT(nodes || cap <= 64);
  SC_TRY(yaml_map_seq(d, v, k, expect, cap, items, n));
  for (int i = 0; i < *n; i++) {
    yaml_map_field f = {.key = yaml_map_key_text(k), .type = YAML_MAP_INT, .dst = &out[i]};
    SC_TRY(yaml_map_read_scalar(d, k, items[i], &f));
    if (out[i] < lo) {
      char e[64];
      snprintf(e, sizeof e, "an integer >= %d", lo);
      return yaml_map_expect_at(d, items[i], k, yaml_map_key_text(k), e);
    }
  }
  return SC_OK;
}

sc_status yaml_map_enum_list(const yaml_map_doc *d, struct fy_node *v, struct fy_node *k,
                             const char *expect, const char *const *names, int nnames, int cap,
                             int *out, int *n, struct fy_node **items) {
  SC_TRY(yaml_map_seq(d, v, k, expect, cap, items, n));
  for (int i = 0; i < *n; i++) {
    char text[32] = "";
    yaml_map_field f = {
        .key = yaml_map_key_text(k), .type = YAML_MAP_STRING, .dst = text, .cap = sizeof text};
    SC_TRY(yaml_map_read_scalar(d, k, items[i], &f));
    SC_TRY(yaml_map_pick(d, items[i], k, text, names, nnames, &out[i]));
  }
  return SC_OK;
}
