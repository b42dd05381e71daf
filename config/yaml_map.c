// Strict flat-mapping reader over libfyaml, and named documents (see yaml_map.h).
//
// libfyaml is run with diagnostics collected, never printed: a syntax error comes back as
// "FILE:LINE:COL: invalid YAML: ..." in sc_error. What the keys mean is the caller's business.
#include "config/yaml_map.h"

#include <errno.h>
#include <libfyaml.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <limits.h>
#include <sys/stat.h>

#include "kernels/embedded.h"
#include "kernels/paths.h"

#define YAML_MAP_FILE_MAX ((size_t)64 << 20) // largest flat YAML file read, bytes
#define YAML_MAP_DEPTH_MAX 64                // nesting walked to find a node's first token
#define YAML_MAP_SCALAR_MAX 512              // longest scalar converted, bytes with the NUL

// --- positions

// First token of a node: the scalar itself, or the first key/item of a collection.
static struct fy_token *first_token(struct fy_node *node) {
  for (int depth = 0; node && depth < YAML_MAP_DEPTH_MAX; depth++) {
    void *it = NULL;
    switch (fy_node_get_type(node)) {
    case FYNT_SCALAR: return fy_node_get_scalar_token(node);
    case FYNT_MAPPING: {
      struct fy_node_pair *p = fy_node_mapping_iterate(node, &it);
      node = p ? fy_node_pair_key(p) : NULL;
      break;
    }
    case FYNT_SEQUENCE: node = fy_node_sequence_iterate(node, &it); break;
    default: return NULL;
    }
  }
  return NULL;
}

bool yaml_map_pos(struct fy_node *node, int *line, int *col) {
  struct fy_token *t = first_token(node);
  const struct fy_mark *m = t ? fy_token_start_mark(t) : NULL;
  if (!m) return false;
  *line = m->line + 1;
  *col = m->column + 1;
  return true;
}

void yaml_map_where_or(struct fy_node *node, struct fy_node *fallback, const char *file,
                       char *buf, size_t cap) {
  int line = 0, col = 0;
  if (yaml_map_pos(node, &line, &col) || yaml_map_pos(fallback, &line, &col))
    snprintf(buf, cap, "%s:%d:%d", file, line, col);
  else
    snprintf(buf, cap, "%s", file);
}

void yaml_map_where(struct fy_node *node, const char *file, char *buf, size_t cap) {
  yaml_map_where_or(node, NULL, file, buf, cap);
}

// --- scalars

const char *yaml_map_expect(const yaml_map_field *f) {
  switch (f->type) {
  case YAML_MAP_INT: return "an integer";
  case YAML_MAP_DOUBLE: return "a number";
  case YAML_MAP_STRING: return "a string";
  case YAML_MAP_BOOL: return "true or false";
  case YAML_MAP_CUSTOM: return f->expect ? f->expect : "a scalar";
  case YAML_MAP_NODE: return f->expect ? f->expect : "a value";
  }
  return "a value";
}

#define DESCRIBE_SHOWN 60      // characters of a scalar shown before "..."
#define DESCRIBE_ITEM_SHOWN 24 // longest sequence item shown whole

void yaml_map_describe(struct fy_node *v, char *buf, size_t cap) {
  if (!v || fy_node_is_null(v)) {
    snprintf(buf, cap, "null");
    return;
  }
  switch (fy_node_get_type(v)) {
  case FYNT_MAPPING: snprintf(buf, cap, "a mapping"); return;
  case FYNT_SEQUENCE: { // "[1, 2, 3]", "[]", "[a, ...]" for nested or long ones
    size_t len = (size_t)snprintf(buf, cap, "[");
    void *it = NULL;
    struct fy_node *item;
    for (int i = 0; (item = fy_node_sequence_iterate(v, &it)) && len < cap; i++) {
      size_t n = 0;
      const char *t = fy_node_get_type(item) == FYNT_SCALAR ? fy_node_get_scalar(item, &n) : NULL;
      if (!t || n > DESCRIBE_ITEM_SHOWN || len + n > DESCRIBE_SHOWN) {
        len += (size_t)snprintf(buf + len, cap - len, "%s...", i ? ", " : "");
        break;
      }
      len += (size_t)snprintf(buf + len, cap - len, "%s%.*s", i ? ", " : "", (int)n, t);
    }
    if (len < cap) snprintf(buf + len, cap - len, "]");
    return;
  }
  default: break;
  }
  size_t len = 0;
  const char *s = fy_node_get_scalar(v, &len);
  bool quoted = fy_node_get_style(v) != FYNS_PLAIN;
  int shown = len > DESCRIBE_SHOWN ? DESCRIBE_SHOWN : (int)len;
  snprintf(buf, cap, "%s'%.*s'%s", quoted ? "the quoted string " : "", shown, s ? s : "",
           len > DESCRIBE_SHOWN ? "..." : "");
}

static bool parse_int(const char *s, int *out) {
  const char *p = s;
  if (*p == '+' || *p == '-') p++;
  if (!*p) return false;
  for (; *p; p++)
    if (*p < '0' || *p > '9') return false;
  errno = 0;
  long long v = strtoll(s, NULL, 10);
  if (errno || v < -2147483647LL - 1 || v > 2147483647LL) return false;
  *out = (int)v;
  return true;
}

static bool parse_double(const char *s, double *out) {
  // Decimal only: no hex floats, inf or nan (strtod would take them).
  for (const char *p = s; *p; p++)
    if (!strchr("0123456789+-.eE", *p)) return false;
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (!*s || *end || errno || !isfinite(v)) return false;
  *out = v;
  return true;
}

static bool parse_bool(const char *s, bool *out) {
  if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE")) {
    *out = true;
    return true;
  }
  if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE")) {
    *out = false;
    return true;
  }
  return false;
}

// Converts value node v for field f. Returns false (and leaves *dst alone) on a type mismatch.
static bool convert(const yaml_map_field *f, struct fy_node *v) {
  if (!v || fy_node_get_type(v) != FYNT_SCALAR || fy_node_is_null(v)) return false;
  size_t len = 0;
  const char *raw = fy_node_get_scalar(v, &len);
  if (!raw) return false;
  char text[YAML_MAP_SCALAR_MAX];
  if (len >= sizeof text) return false;
  memcpy(text, raw, len);
  text[len] = 0;
  bool plain = fy_node_get_style(v) == FYNS_PLAIN;
  switch (f->type) {
  case YAML_MAP_INT: return plain && parse_int(text, f->dst);
  case YAML_MAP_DOUBLE: return plain && parse_double(text, f->dst);
  case YAML_MAP_BOOL: return plain && parse_bool(text, f->dst);
  case YAML_MAP_STRING:
    if (len + 1 > f->cap) return false;
    memcpy(f->dst, text, len + 1);
    return true;
  case YAML_MAP_CUSTOM: return f->parse && f->parse(text, f->dst);
  case YAML_MAP_NODE: return false; // handled by the caller
  }
  return false;
}

// --- mappings

void yaml_map_key_list(const yaml_map_field *fields, int n, const char *const *more, int n_more,
                       char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < n + n_more && len < cap; i++)
    len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? ", " : "",
                            i < n ? fields[i].key : more[i - n]);
}

sc_status yaml_map_read_value(struct fy_node *k, struct fy_node *v, const char *file,
                              const yaml_map_field *f, sc_error *err) {
  if (f->type == YAML_MAP_NODE) return f->node(v, f->dst, file, err);
  char where[300], got[100];
  yaml_map_where(v && fy_node_get_type(v) == FYNT_SCALAR ? v : k, file, where, sizeof where);
  if (convert(f, v)) return SC_OK;
  yaml_map_describe(v, got, sizeof got);
  if (f->type == YAML_MAP_STRING && v && fy_node_get_type(v) == FYNT_SCALAR && !fy_node_is_null(v))
    return sc_fail(err, SC_INVALID,
                   "%s: key '%s': expected a string of at most %zu characters, got %s", where,
                   f->key, f->cap - 1, got);
  return sc_fail(err, SC_INVALID, "%s: key '%s': expected %s, got %s", where, f->key,
                 yaml_map_expect(f), got);
}

sc_status yaml_map_read_node(struct fy_node *map, const char *file, const yaml_map_field *fields,
                             int n, sc_error *err) {
  char where[300], got[100];
  if (!map || fy_node_get_type(map) != FYNT_MAPPING) {
    yaml_map_where(map, file, where, sizeof where);
    yaml_map_describe(map, got, sizeof got);
    return sc_fail(err, SC_INVALID, "%s: expected a mapping of keys, got %s", where, got);
  }
  bool seen[128] = {false};
  SC_ASSERT(n <= (int)(sizeof seen / sizeof seen[0]));
  void *it = NULL;
  struct fy_node_pair *pair;
  while ((pair = fy_node_mapping_iterate(map, &it))) {
    struct fy_node *k = fy_node_pair_key(pair), *v = fy_node_pair_value(pair);
    yaml_map_where(k, file, where, sizeof where);
    const char *key = k && fy_node_get_type(k) == FYNT_SCALAR ? fy_node_get_scalar0(k) : NULL;
    if (!key) return sc_fail(err, SC_INVALID, "%s: expected a plain key", where);
    int i = 0;
    while (i < n && strcmp(fields[i].key, key)) i++;
    if (i == n) {
      char keys[400];
      yaml_map_key_list(fields, n, NULL, 0, keys, sizeof keys);
      return sc_fail(err, SC_INVALID, "%s: unknown key '%s'; expected one of: %s", where, key,
                     keys);
    }
    SC_TRY(yaml_map_read_value(k, v, file, &fields[i], err));
    seen[i] = true;
  }
  for (int i = 0; i < n; i++) {
    if (fields[i].seen) *fields[i].seen = seen[i];
    if (fields[i].required && !seen[i]) {
      yaml_map_where(map, file, where, sizeof where);
      return sc_fail(err, SC_INVALID, "%s: missing required key '%s' (%s)", where, fields[i].key,
                     yaml_map_expect(&fields[i]));
    }
  }
  return SC_OK;
}

static bool node_double(struct fy_node *v, double *out) {
  if (!v || fy_node_get_type(v) != FYNT_SCALAR || fy_node_get_style(v) != FYNS_PLAIN) return false;
  size_t len = 0;
  const char *raw = fy_node_get_scalar(v, &len);
  char text[64];
  if (!raw || len >= sizeof text) return false;
  memcpy(text, raw, len);
  text[len] = 0;
  return parse_double(text, out);
}

sc_status yaml_map_pairs(struct fy_node *v, const char *file, const char *key, double *x,
                         double *y, int cap, int *n, sc_error *err) {
  char where[300], got[100];
  *n = 0;
  if (!v || fy_node_get_type(v) != FYNT_SEQUENCE) {
    yaml_map_where(v, file, where, sizeof where);
    yaml_map_describe(v, got, sizeof got);
    return sc_fail(err, SC_INVALID, "%s: key '%s': expected a list of [x, y] pairs, got %s",
                   where, key, got);
  }
  void *it = NULL;
  struct fy_node *item;
  while ((item = fy_node_sequence_iterate(v, &it))) {
    yaml_map_where(item, file, where, sizeof where);
    double a, b;
    if (fy_node_get_type(item) != FYNT_SEQUENCE || fy_node_sequence_item_count(item) != 2 ||
        !node_double(fy_node_sequence_get_by_index(item, 0), &a) ||
        !node_double(fy_node_sequence_get_by_index(item, 1), &b))
      return sc_fail(err, SC_INVALID, "%s: key '%s': expected a pair of numbers [x, y]", where,
                     key);
    if (*n == cap)
      return sc_fail(err, SC_INVALID, "%s: key '%s': at most %d pairs", where, key, cap);
    if (!(a > 0) || (*n > 0 && !(a > x[*n - 1])))
      return sc_fail(err, SC_INVALID,
                     "%s: key '%s': x must be positive and strictly increasing, got %g", where,
                     key, a);
    x[*n] = a;
    y[*n] = b;
    (*n)++;
  }
  return SC_OK;
}

// The offset of the first byte of text[0, len) that does not belong to well-formed UTF-8
// (overlong forms, surrogates and code points past U+10FFFF included), or len when all do.
static size_t utf8_bad_at(const unsigned char *t, size_t len) {
  size_t i = 0;
  while (i < len) {
    unsigned c = t[i];
    size_t n;
    unsigned lo = 0x80, hi = 0xBF; // the second byte's range
    if (c < 0x80) n = 0;
    else if (c >= 0xC2 && c <= 0xDF) n = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else return i;
    if (n > len - i - 1) return i;
    for (size_t k = 1; k <= n; k++) {
      unsigned b = t[i + k];
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return i;
    }
    i += n + 1;
  }
  return len;
}

static bool blank_at(const char *t, size_t i, size_t end) {
  return i >= end || t[i] == ' ' || t[i] == '\t' || t[i] == '\r';
}

static size_t past_blanks(const char *t, size_t i, size_t end) {
  while (i < end && (t[i] == ' ' || t[i] == '\t')) i++;
  return i;
}

// The offset of the first explicit mapping key of text[0, len) ("?" as a line's first token,
// after any "---" and sequence entries' "-"), or len when there is none. libfyaml 0.7.12
// crashes cleaning up its parser after it refuses a tab after such a key's value indicator ("?
// a:\t- b"), and the files read here never need one: a key is a plain scalar. Lines of a
// block scalar (after a line ending in "|" or ">" and its indicators, those more indented than
// it, and blank ones) are its text, not tokens.
static size_t explicit_key_at(const char *t, size_t len) {
  long block = -1; // in a block scalar: the indentation of the line that opened it
  for (size_t i = 0; i < len; i++) {
    size_t j = i, eol = i;
    while (eol < len && t[eol] != '\n') eol++;
    while (j < eol && t[j] == ' ') j++;
    long indent = (long)(j - i);
    if (block >= 0 && (blank_at(t, j, eol) || t[j] == '#' || indent > block)) {
      i = eol;
      continue;
    }
    block = -1;
    if (eol - j >= 3 && !strncmp(t + j, "---", 3) && blank_at(t, j + 3, eol))
      j = past_blanks(t, j + 3, eol);
    while (j < eol && t[j] == '-' && blank_at(t, j + 1, eol)) j = past_blanks(t, j + 1, eol);
    if (j < eol && t[j] == '?' && blank_at(t, j + 1, eol)) return j;
    size_t e = eol; // the line without its comment, trailing blanks and block indicators
    for (size_t k = j; k + 1 < eol; k++)
      if ((t[k] == ' ' || t[k] == '\t') && t[k + 1] == '#') {
        e = k;
        break;
      }
    while (e > j && (t[e - 1] == ' ' || t[e - 1] == '\t' || t[e - 1] == '\r')) e--;
    while (e > j && (t[e - 1] == '-' || t[e - 1] == '+' || (t[e - 1] >= '1' && t[e - 1] <= '9')))
      e--;
    if (e > j && (t[e - 1] == '|' || t[e - 1] == '>') && (e - 1 == j || blank_at(t, e - 2, eol)))
      block = indent;
    i = eol;
  }
  return len;
}

// The 1-based line and column (in code points) of text[off].
static void line_col(const char *text, size_t off, int *line, int *col) {
  *line = 1;
  *col = 1;
  for (size_t i = 0; i < off; i++) {
    if (text[i] == '\n') {
      (*line)++;
      *col = 1;
    } else if (((unsigned char)text[i] & 0xC0) != 0x80) {
      (*col)++;
    }
  }
}

sc_status yaml_map_parse(const char *text, size_t len, const char *name,
                         sc_status (*use)(struct fy_node *root, void *arg, sc_error *err),
                         void *arg, sc_error *err) {
  // YAML text is Unicode; libfyaml (0.7.12) loops forever on some bytes that are not UTF-8 (a
  // directive such as "%\xa1"), so they are refused here, at their line and column.
  size_t bad = utf8_bad_at((const unsigned char *)text, len);
  int line, col;
  if (bad < len) {
    line_col(text, bad, &line, &col);
    return sc_fail(err, SC_INVALID, "%s:%d:%d: invalid YAML: byte 0x%02x is not UTF-8", name,
                   line, col, (unsigned char)text[bad]);
  }
  size_t key = explicit_key_at(text, len);
  if (key < len) {
    line_col(text, key, &line, &col);
    return sc_fail(err, SC_INVALID,
                   "%s:%d:%d: explicit mapping keys ('? key') are not read here; write 'key:'",
                   name, line, col);
  }
  // Diagnostics are collected, not printed (engine/ never prints).
  struct fy_diag_cfg dcfg;
  fy_diag_cfg_default(&dcfg);
  dcfg.fp = NULL;
  dcfg.colorize = false;
  struct fy_diag *diag = fy_diag_create(&dcfg);
  if (!diag) return sc_fail(err, SC_OOM, "%s: cannot create a YAML diagnostic object", name);
  fy_diag_set_collect_errors(diag, true);
  struct fy_parse_cfg cfg = {.flags = FYPCF_QUIET | FYPCF_RESOLVE_DOCUMENT, .diag = diag};
  struct fy_document *doc = fy_document_build_from_string(&cfg, text, len);
  sc_status s;
  if (!doc) {
    void *it = NULL;
    struct fy_diag_error *e = fy_diag_errors_iterate(diag, &it);
    if (e)
      s = sc_fail(err, SC_INVALID, "%s:%d:%d: invalid YAML: %s", name, e->line, e->column,
                  e->msg ? e->msg : "syntax error"); // libfyaml's diag positions are 1-based
    else // no document and no complaint: nothing but whitespace and comments
      s = use(NULL, arg, err);
  } else {
    s = use(fy_document_root(doc), arg, err);
    fy_document_destroy(doc);
  }
  fy_diag_destroy(diag);
  return s;
}

typedef struct flat_doc {
  const char *name;
  const yaml_map_field *fields;
  int n;
} flat_doc;

static sc_status read_flat_root(struct fy_node *root, void *arg, sc_error *err) {
  const flat_doc *d = arg;
  if (!root)
    return sc_fail(err, SC_INVALID, "%s: empty document; expected a mapping of keys", d->name);
  return yaml_map_read_node(root, d->name, d->fields, d->n, err);
}

sc_status yaml_map_read_string(const char *text, size_t len, const char *name,
                               const yaml_map_field *fields, int n, sc_error *err) {
  flat_doc d = {.name = name, .fields = fields, .n = n};
  return yaml_map_parse(text, len, name, read_flat_root, &d, err);
}

sc_status yaml_map_slurp(const char *path, size_t max_bytes, char **out, size_t *len,
                         sc_error *err) {
  *out = NULL;
  *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return sc_fail(err, SC_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || S_ISDIR(st.st_mode)) {
    fclose(f);
    return sc_fail(err, SC_IO, "%s: not a readable file", path);
  }
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  while (buf) {
    n += fread(buf + n, 1, cap - 1 - n, f); // one byte kept for the NUL
    if (n < cap - 1) break;
    char *bigger = cap < max_bytes ? realloc(buf, cap * 2) : NULL;
    if (!bigger) {
      free(buf);
      buf = NULL;
      break;
    }
    buf = bigger;
    cap *= 2;
  }
  bool bad = ferror(f) != 0;
  fclose(f);
  if (!buf)
    return sc_fail(err, SC_IO, "%s: larger than %zu MiB or out of memory", path, max_bytes >> 20);
  if (bad) {
    free(buf);
    return sc_fail(err, SC_IO, "%s: read error", path);
  }
  buf[n] = 0;
  *out = buf;
  *len = n;
  return SC_OK;
}

sc_status yaml_map_read_file(const char *path, const yaml_map_field *fields, int n,
                             sc_error *err) {
  char *buf;
  size_t len;
  SC_TRY(yaml_map_slurp(path, YAML_MAP_FILE_MAX, &buf, &len, err));
  sc_status s = yaml_map_read_string(buf, len, path, fields, n, err);
  free(buf);
  return s;
}

// --- named documents

bool yaml_map_is_path(const char *s) {
  size_t n = strlen(s);
  return (n > 5 && !strcmp(s + n - 5, ".yaml")) || (n > 4 && !strcmp(s + n - 4, ".yml"));
}

#define NAMES_DIRS 8
#define NAMES_MAX 64
#define NAME_LEN 64

static struct {
  char dir[128];
  int n;                          // how many names exist (built-in, then installed ones)
  char names[NAMES_MAX][NAME_LEN]; // sorted stems (the first NAMES_MAX)
} names_cache[NAMES_DIRS];
static int names_cache_n;
static pthread_mutex_t names_lock = PTHREAD_MUTEX_INITIALIZER;

static int cmp_name(const void *a, const void *b) { return strcmp(a, b); }

// Adds the stem of file (NAME.yaml; anything else is skipped) to slot c unless it is there.
static void names_add(int c, const char *file) {
  size_t len = strlen(file);
  if (len <= 5 || strcmp(file + len - 5, ".yaml") || len - 5 >= NAME_LEN) return;
  int k = names_cache[c].n;
  for (int i = 0; i < k && i < NAMES_MAX; i++)
    if (strlen(names_cache[c].names[i]) == len - 5 &&
        !strncmp(names_cache[c].names[i], file, len - 5))
      return;
  if (k < NAMES_MAX) snprintf(names_cache[c].names[k], NAME_LEN, "%.*s", (int)(len - 5), file);
  names_cache[c].n = k + 1;
}

int yaml_map_names(const char *dir, const char **names, int cap) {
  pthread_mutex_lock(&names_lock);
  int c = 0;
  while (c < names_cache_n && strcmp(names_cache[c].dir, dir)) c++;
  if (c == names_cache_n && c < NAMES_DIRS) {
    snprintf(names_cache[c].dir, sizeof names_cache[c].dir, "%s", dir);
    names_cache[c].n = 0;
    size_t dl = strlen(dir);
    for (const sc_embedded_file *f = sc_embedded_files; f->path; f++) {
      const char *rest = f->path + dl;
      if (strncmp(f->path, dir, dl) || *rest != '/' || strchr(rest + 1, '/')) continue;
      names_add(c, rest + 1);
    }
    char path[PATH_MAX];
    const char *root = paths_data_root();
    DIR *d = root && (size_t)snprintf(path, sizeof path, "%s/%s", root, dir) < sizeof path
                 ? opendir(path)
                 : NULL;
    for (struct dirent *e; d && (e = readdir(d));) names_add(c, e->d_name);
    if (d) closedir(d);
    int k = names_cache[c].n;
    qsort(names_cache[c].names, (size_t)(k < NAMES_MAX ? k : NAMES_MAX), NAME_LEN, cmp_name);
    names_cache_n++;
  }
  int total = c < names_cache_n ? names_cache[c].n : 0;
  for (int i = 0; i < total && i < cap && i < NAMES_MAX; i++) names[i] = names_cache[c].names[i];
  pthread_mutex_unlock(&names_lock);
  return total;
}

void yaml_map_names_list(const char *dir, char *buf, size_t cap) {
  const char *names[NAMES_MAX];
  int n = yaml_map_names(dir, names, NAMES_MAX);
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < n && i < NAMES_MAX && len < cap; i++)
    len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", names[i]);
}

// Where the document `name` of dir is: the embedded file (*emb) or, when none is built in, the
// installed DATA_ROOT/DIR/NAME.yaml (its path in file, true). file gets the path tried either
// way ("" without a data root); false when neither exists.
static bool named_find(const char *dir, const char *name, const sc_embedded_file **emb,
                       char *file, size_t cap) {
  char rel[256];
  *emb = NULL;
  file[0] = 0;
  if (strchr(name, '/') || (size_t)snprintf(rel, sizeof rel, "%s/%s.yaml", dir, name) >= sizeof rel)
    return false;
  if ((*emb = sc_embedded_find(rel))) return true;
  return paths_data_file(rel, file, cap);
}

bool yaml_map_named_exists(const char *dir, const char *name) {
  const sc_embedded_file *emb;
  char file[PATH_MAX];
  return named_find(dir, name, &emb, file, sizeof file);
}

sc_status yaml_map_read_named(const char *dir, const char *what, const char *name_or_path,
                              const yaml_map_field *fields, int n, sc_error *err) {
  if (!name_or_path || !*name_or_path)
    return sc_fail(err, SC_INVALID, "empty %s name", what);
  if (yaml_map_is_path(name_or_path)) return yaml_map_read_file(name_or_path, fields, n, err);
  const sc_embedded_file *f;
  char file[PATH_MAX];
  if (named_find(dir, name_or_path, &f, file, sizeof file))
    return f ? yaml_map_read_string(f->data, f->size, f->path, fields, n, err)
             : yaml_map_read_file(file, fields, n, err);
  char list[400], looked[2 * PATH_MAX + 64];
  yaml_map_names_list(dir, list, sizeof list);
  if (file[0])
    snprintf(looked, sizeof looked, "no file %s", file);
  else {
    char where[2 * PATH_MAX];
    paths_data_looked(where, sizeof where);
    snprintf(looked, sizeof looked, "no shared data directory (looked for %s)", where);
  }
  return sc_fail(err, SC_INVALID, "unknown %s '%s': not built in (%s) and %s; or give a path "
                 "to a .yaml file", what, name_or_path, list, looked);
}
