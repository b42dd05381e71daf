// A small strict reader for flat YAML mappings (over libfyaml): a table of fields says which
// keys exist, their types and where the values go; unknown keys, missing required keys and
// wrong types are SC_INVALID with "FILE:LINE:COL: key 'K': expected ..., got ...".
//
// Also "named documents": a name resolved to an embedded file DIR/NAME.yaml (kernels/
// embedded.h) or an installed one (kernels/paths.h), or, when it ends in .yaml, to a file on
// disk; presets (config/presets.c) and
// hardware profiles (config/hardware.c) use it. Nested documents (scenarios) walk the tree
// themselves with the helpers below (positions, describe, one value at a time, views of one
// mapping, checks, picks and sequences: config/yaml_map_view.c), so every reader words the
// same mistake the same way. Nothing here knows what the keys mean; defaults
// are whatever the caller put in the destinations before the call.
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/status.h"

struct fy_node; // libfyaml

typedef enum yaml_map_type {
  YAML_MAP_INT,    // int: a plain decimal integer
  YAML_MAP_DOUBLE, // double: a plain number (64, 1e-5, 3.35e12); byte sizes and rates too
  YAML_MAP_STRING, // char[cap]: any scalar
  YAML_MAP_BOOL,   // bool: true | false
  YAML_MAP_CUSTOM, // a plain or quoted scalar handed to parse()
  YAML_MAP_NODE,   // any value node handed to node() (nested lists and mappings)
} yaml_map_type;

// YAML_MAP_CUSTOM: converts text into *dst; returns false when text is not acceptable.
typedef bool (*yaml_map_parse_fn)(const char *text, void *dst);

typedef struct yaml_map_field {
  const char *key;
  yaml_map_type type;
  void *dst;               // int *, double *, char[cap], bool *, or what parse fills
  size_t cap;              // YAML_MAP_STRING: bytes at dst, NUL included
  bool required;           // absent -> "missing required key"
  yaml_map_parse_fn parse; // YAML_MAP_CUSTOM only
  const char *expect;      // YAML_MAP_CUSTOM only: e.g. "a dtype (f32, f16, bf16, int8, int4)"
  bool *seen;              // optional: set to whether the key was present
  // YAML_MAP_NODE only: reads value node v into dst; on error fills err naming file:line:col.
  sc_status (*node)(struct fy_node *v, void *dst, const char *file, sc_error *err);
} yaml_map_field;

// What field f expects, in messages: "an integer", "a number", ..., or f->expect.
const char *yaml_map_expect(const yaml_map_field *f);
// What a value node is, for "got ...": 'text', the quoted string 'text', null, a mapping,
// [1, 2, 3] (a sequence, "..." for nested or long items). Every reader's messages use it.
void yaml_map_describe(struct fy_node *v, char *buf, size_t cap);
// Writes "a, b, c": the keys of fields[0..n), then more[0..n_more) (e.g. the nested keys a
// caller walks itself), for "expected one of: ...".
void yaml_map_key_list(const yaml_map_field *fields, int n, const char *const *more, int n_more,
                       char *buf, size_t cap);

// Reads the mapping `map` into fields[0..n). `file` names the source in messages. On error
// the destinations of keys read before the bad one are already written.
sc_status yaml_map_read_node(struct fy_node *map, const char *file, const yaml_map_field *fields,
                             int n, sc_error *err);

// Reads one value v of key node k with field f (f->key names it in messages), as
// yaml_map_read_node reads each pair: SC_INVALID "FILE:LINE:COL: key 'K': expected ..., got
// ..." at v (at k when v is not a scalar); *f->dst is left alone then.
sc_status yaml_map_read_value(struct fy_node *k, struct fy_node *v, const char *file,
                              const yaml_map_field *f, sc_error *err);

// Parses text[0..len) (shown as `name`) with libfyaml's diagnostics collected, never printed,
// and returns use(root, arg, err): root is NULL when the text holds no document (nothing but
// whitespace and comments). A syntax error is SC_INVALID "NAME:LINE:COL: invalid YAML: ..."
// and use is not called. The tree lives only while use runs.
sc_status yaml_map_parse(const char *text, size_t len, const char *name,
                         sc_status (*use)(struct fy_node *root, void *arg, sc_error *err),
                         void *arg, sc_error *err);
// Parses text[0..len) (a YAML document whose root is a flat mapping) shown as `name`.
sc_status yaml_map_read_string(const char *text, size_t len, const char *name,
                               const yaml_map_field *fields, int n, sc_error *err);
// Reads the whole file at path into *out (NUL-terminated, caller frees; len excludes the NUL).
// SC_IO for a missing, unreadable or directory path, or one over max_bytes; *out NULL then.
sc_status yaml_map_slurp(const char *path, size_t max_bytes, char **out, size_t *len,
                         sc_error *err);
// Reads the file at path (SC_IO when it cannot be read) and parses it as above.
sc_status yaml_map_read_file(const char *path, const yaml_map_field *fields, int n,
                             sc_error *err);

// Reads a sequence of [x, y] number pairs (e.g. [[1, 0.1], [64, 0.5]]) into x[], y[] (cap
// each), x strictly increasing and > 0. *n = how many. Errors name file:line:col and `key`.
sc_status yaml_map_pairs(struct fy_node *v, const char *file, const char *key, double *x,
                         double *y, int cap, int *n, sc_error *err);

// Line and column (1-based) of node's first token: the scalar itself, or the first key or item
// of a collection. False when it has none (an empty collection or value).
bool yaml_map_pos(struct fy_node *node, int *line, int *col);
// Writes "FILE:LINE:COL" for node (1-based; "FILE" alone when libfyaml has no position).
void yaml_map_where(struct fy_node *node, const char *file, char *buf, size_t cap);
// The same for node, else for fallback when node has no position (a null value: its key).
void yaml_map_where_or(struct fy_node *node, struct fy_node *fallback, const char *file,
                       char *buf, size_t cap);

// --- walking a nested document (config/yaml_map_view.c)
// A reader that walks the tree itself (the scenario language) reads each mapping into a view:
// every key checked against the fields and the nested keys it takes, the scalar ones read
// through the fields, the nodes of every present key kept so the caller walks the nested ones
// and points any message at any key. Every message is SC_INVALID "FILE:LINE:COL: ..." in
// doc->err, worded as the flat reader words it.

// One document being read: where messages point, where they go.
typedef struct yaml_map_doc {
  const char *file; // the name shown in messages
  sc_error *err;    // the first error
} yaml_map_doc;

enum { YAML_MAP_VIEW_MAX = 32 }; // keys of one mapping a view holds (fields and nested)

typedef struct yaml_map_view {
  struct fy_node *map;
  struct fy_node *owner; // the key whose value map is (NULL: the root)
  int n;                 // present keys, in file order
  const char *name[YAML_MAP_VIEW_MAX]; // key text (owned by the document)
  struct fy_node *key[YAML_MAP_VIEW_MAX], *val[YAML_MAP_VIEW_MAX];
} yaml_map_view;

// SC_INVALID with "WHERE: MESSAGE", WHERE the position of node (or of fallback).
sc_status yaml_map_fail(const yaml_map_doc *d, struct fy_node *node, struct fy_node *fallback,
                        const char *fmt, ...) __attribute__((format(printf, 4, 5)));
// SC_INVALID with "WHERE: key 'KEY': expected EXPECT, got WHAT-V-IS" at v (at k when v has no
// position).
sc_status yaml_map_expect_at(const yaml_map_doc *d, struct fy_node *v, struct fy_node *k,
                             const char *key, const char *expect);
// A key node's text ("?" when it has none); owned by the document.
const char *yaml_map_key_text(struct fy_node *k);

// Reads mapping `map`, the value of key `key` (key node k; both NULL for the root): every key
// must be one of fields[0..nf) or nested[0..nn); the fields are read in file order (a field
// with a null value is an error at its key); *out gets every present key's nodes.
sc_status yaml_map_read_view(const yaml_map_doc *d, struct fy_node *map, const char *key,
                             struct fy_node *k, const yaml_map_field *f, int nf,
                             const char *const *nested, int nn, yaml_map_view *out);
// Reads one scalar value v of key node k with field f (f->key must be k's text): the form
// for sequence items and for keys that take a scalar or a collection.
sc_status yaml_map_read_scalar(const yaml_map_doc *d, struct fy_node *k, struct fy_node *v,
                               const yaml_map_field *f);

// Index of key k among m's present keys, -1 when absent; has: whether present; key and val:
// its nodes (NULL when absent).
int yaml_map_find(const yaml_map_view *m, const char *k);
bool yaml_map_has(const yaml_map_view *m, const char *k);
struct fy_node *yaml_map_key(const yaml_map_view *m, const char *k);
struct fy_node *yaml_map_val(const yaml_map_view *m, const char *k);

// SC_OK when key is present; else "missing required key 'KEY' (EXPECT)" at the mapping.
sc_status yaml_map_need(const yaml_map_doc *d, const yaml_map_view *m, const char *key,
                        const char *expect);
// A range or form check on a present key: "key 'K': expected EXPECT, got V" at its value
// unless ok; SC_OK when the key is absent.
sc_status yaml_map_check(const yaml_map_doc *d, const yaml_map_view *m, const char *key, bool ok,
                         const char *expect);
// *out = the index of text in names[0..n), or an error at v (key node k) listing them.
sc_status yaml_map_pick(const yaml_map_doc *d, struct fy_node *v, struct fy_node *k,
                        const char *text, const char *const *names, int n, int *out);
// yaml_map_pick for a key of m read into text.
sc_status yaml_map_pick_key(const yaml_map_doc *d, const yaml_map_view *m, const char *key,
                            const char *text, const char *const *names, int n, int *out);
// The items of a sequence value v (key node k) into items[], *n of them; an error unless
// 1..cap items.
sc_status yaml_map_seq(const yaml_map_doc *d, struct fy_node *v, struct fy_node *k,
                       const char *expect, int cap, struct fy_node **items, int *n);
// Integer items of a sequence, each >= lo, into out[]; their nodes into nodes[] when not NULL
// (else cap is at most 64).
sc_status yaml_map_int_list(const yaml_map_doc *d, struct fy_node *v, struct fy_node *k,
                            const char *expect, int lo, int cap, int *out, int *n,
                            struct fy_node **nodes);
// Enumerated items of a sequence: out[i] = the index of item i in names[0..nnames); their
// nodes into items[].
sc_status yaml_map_enum_list(const yaml_map_doc *d, struct fy_node *v, struct fy_node *k,
                             const char *expect, const char *const *names, int nnames, int cap,
                             int *out, int *n, struct fy_node **items);

// --- scalar forms for YAML_MAP_CUSTOM fields (config/yaml_map_view.c)
// Durations: a decimal number and a unit (ns, us, ms, s, m, h); a bare number is seconds.
// sign_ok: a leading + or - is taken. False on anything else or past +-292 years.
bool yaml_map_duration(const char *text, bool sign_ok, int64_t *out);
bool yaml_map_parse_dur(const char *text, void *dst);  // uint64_t ns, unsigned
bool yaml_map_parse_sdur(const char *text, void *dst); // int64_t ns, signed
bool yaml_map_parse_u64(const char *text, void *dst);  // uint64_t, plain decimal digits
#define YAML_MAP_DUR_EXPECT                                                                        \
  "a duration such as 250us, 500ms, 30s, 2m or 1h (a bare number is seconds)"
#define YAML_MAP_SDUR_EXPECT "a signed duration such as +1h, -30m or 90s"

// --- named documents: embedded DIR/NAME.yaml, installed DATA_ROOT/DIR/NAME.yaml, or a path
// A name is looked up among the files compiled in first, then in the shared data root
// (kernels/paths.h: the installed share/shardcheck, or a build tree's checkout), so a profile
// or preset dropped there is found by name; a built-in one wins over a file of the same name.
// `what` names the kind in messages ("model preset", "hardware profile"). An unknown name is
// SC_INVALID in one line naming every place looked: the built-in names and the file tried (or
// where the data root was looked for).
sc_status yaml_map_read_named(const char *dir, const char *what, const char *name_or_path,
                              const yaml_map_field *fields, int n, sc_error *err);
// True when the name (not a path) resolves as yaml_map_read_named would resolve it.
bool yaml_map_named_exists(const char *dir, const char *name);
// Fills names[] with the stems of the embedded and the installed DIR/*.yaml, each once, sorted
// (static strings, valid for the life of the process); returns how many exist (may exceed cap).
int yaml_map_names(const char *dir, const char **names, int cap);
// Writes "a, b, c" (the names yaml_map_names gives) into buf.
void yaml_map_names_list(const char *dir, char *buf, size_t cap);
// True when s ends with ".yaml" or ".yml".
bool yaml_map_is_path(const char *s);
