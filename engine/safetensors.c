// safetensors I/O (see safetensors.h): the memory-mapped reader (one file or the shards of an
// index), slice reads converted to fp32, the streaming writer, and the fp32 <-> f16/bf16
// conversions they share.
//
// File layout (https://github.com/huggingface/safetensors): an 8-byte little-endian u64 N,
// then N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end)}, "__metadata__": {}}
// (optionally padded with spaces), then the data; offsets are relative to byte 8 + N.
//
// Which tensors a model needs and their shapes is engine/model.c (model_tensor_list); which
// slice each rank reads is engine/shard.c. This file only checks that files are well formed.
#include "engine/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host (the format is little-endian)"
#endif

// --- fp32 <-> half conversions

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

uint16_t sc_f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) // NaN: keep sign and top payload, force quiet
    return (uint16_t)((u >> 16) | 0x0040u);
  // Round to nearest even on the 16 dropped bits; overflow carries into inf as it should.
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

float sc_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t sc_f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t ax = u & 0x7fffffffu;
  if (ax > 0x7f800000u) // NaN: quiet, keep the top payload bits
    return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x03ffu));
  if (ax >= 0x477ff000u) // >= 65520 (65504 + half an ulp, tie goes to the odd max): inf
    return (uint16_t)(sign | 0x7c00u);
  if (ax < 0x38800000u) {         // below 2^-14, the smallest normal half: subnormal or zero
    if (ax <= 0x33000000u) return sign; // <= 2^-25 rounds to zero (2^-25 is a tie -> even 0)
    int e = (int)(ax >> 23);            // 102..112
    uint32_t m = (ax & 0x007fffffu) | 0x00800000u; // value = m * 2^(e - 150)
    int shift = 126 - e;                           // value / 2^-24 = m >> shift, 14..24
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++; // may carry into the smallest normal
    return (uint16_t)(sign | q);
  }
  uint32_t r = ax - 0x38000000u; // rebias the exponent from 127 to 15
  r += 0x0fffu + ((r >> 13) & 1u);
  return (uint16_t)(sign | (r >> 13));
}

float sc_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x03ffu;
  if (e == 0) { // zero or subnormal: m * 2^-24, exact in fp32
    float v = (float)m * 0x1p-24f;
    return sign ? -v : v;
  }
  if (e == 31) return bits_f32(sign | 0x7f800000u | (m << 13)); // inf or NaN
  return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

// --- dtypes as the format spells them

static const char *st_dtype_str(sc_dtype t) {
  switch (t) {
  case SC_F32: return "F32";
  case SC_F16: return "F16";
  case SC_BF16: return "BF16";
  default: return NULL;
  }
}

static bool st_dtype_from_str(const char *s, sc_dtype *out) {
  if (!strcmp(s, "F32")) *out = SC_F32;
  else if (!strcmp(s, "F16")) *out = SC_F16;
  else if (!strcmp(s, "BF16")) *out = SC_BF16;
  else return false;
  return true;
}

static size_t st_dtype_size(sc_dtype t) { return t == SC_F32 ? 4 : 2; }

// --- reader

typedef struct st_file {
  char *path;   // owned
  uint8_t *map; // whole file, PROT_READ
  size_t size;  // bytes
} st_file;

struct st_model {
  st_file *files;
  int n_files, cap_files;
  st_tensor *tensors; // sorted by name once every file is loaded
  int n_tensors, cap_tensors;
};

static char *path_join(const char *dir, const char *name) {
  size_t a = strlen(dir), b = strlen(name);
  char *p = malloc(a + b + 2);
  if (!p) return NULL;
  memcpy(p, dir, a);
  size_t at = a;
  if (a && dir[a - 1] != '/') p[at++] = '/';
  memcpy(p + at, name, b + 1);
  return p;
}

static bool mul_ok(uint64_t a, uint64_t b, uint64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}

// Maps path and appends the file (not yet its tensors) to m. On error m is unchanged.
static sc_status st_map_file(st_model *m, const char *path, st_file **out, sc_error *err) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return sc_fail(err, SC_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    sc_status s = sc_fail(err, SC_IO, "%s: cannot stat: %s", path, strerror(errno));
    close(fd);
    return s;
  }
  if (!S_ISREG(sb.st_mode)) {
    close(fd);
    return sc_fail(err, SC_IO, "%s: not a regular file", path);
  }
  size_t size = (size_t)sb.st_size;
  if (size < 8) {
    close(fd);
    return sc_fail(err, SC_INVALID,
                   "%s: truncated: %zu bytes, but a safetensors file starts with an 8-byte "
                   "header length",
                   path, size);
  }
  void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return sc_fail(err, SC_IO, "%s: cannot mmap: %s", path, strerror(errno));
  if (m->n_files == m->cap_files) {
    int cap = m->cap_files ? 2 * m->cap_files : 4;
    st_file *f = realloc(m->files, (size_t)cap * sizeof *f);
    if (!f) {
      munmap(map, size);
      return sc_fail(err, SC_OOM, "%s: out of memory", path);
    }
    m->files = f;
    m->cap_files = cap;
  }
  char *p = strdup(path);
  if (!p) {
    munmap(map, size);
    return sc_fail(err, SC_OOM, "%s: out of memory", path);
  }
  st_file *f = &m->files[m->n_files++];
  f->path = p;
  f->map = map;
  f->size = size;
  *out = f;
  return SC_OK;
}

static sc_status st_push_tensor(st_model *m, const st_tensor *t, sc_error *err) {
  if (m->n_tensors == m->cap_tensors) {
    int cap = m->cap_tensors ? 2 * m->cap_tensors : 64;
    st_tensor *n = realloc(m->tensors, (size_t)cap * sizeof *n);
    if (!n) return sc_fail(err, SC_OOM, "%s: out of memory", t->file);
    m->tensors = n;
    m->cap_tensors = cap;
  }
  m->tensors[m->n_tensors++] = *t;
  return SC_OK;
}

// Parses one tensor entry of f's header into t (name not yet copied).
static sc_status st_parse_entry(const st_file *f, size_t data0, const char *name, json_t *v,
                                st_tensor *t, sc_error *err) {
  const char *path = f->path;
  if (!json_is_object(v))
    return sc_fail(err, SC_INVALID, "%s: corrupt header: tensor '%s' is not an object", path,
                   name);
  json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
         *jo = json_object_get(v, "data_offsets");
  if (!json_is_string(jd) || !json_is_array(js) || !json_is_array(jo) || json_array_size(jo) != 2)
    return sc_fail(err, SC_INVALID,
                   "%s: corrupt header: tensor '%s' needs dtype (string), shape (array) and "
                   "data_offsets ([begin, end])",
                   path, name);
  if (!st_dtype_from_str(json_string_value(jd), &t->dtype))
    return sc_fail(err, SC_INVALID,
                   "%s: tensor '%s' has unsupported dtype %s (shardcheck reads F32, F16 and BF16)",
                   path, name, json_string_value(jd));
  size_t ndim = json_array_size(js);
  if (ndim > 4)
    return sc_fail(err, SC_INVALID, "%s: tensor '%s' has %zu dimensions (at most 4 supported)",
                   path, name, ndim);
  t->ndim = (int)ndim;
  uint64_t count = 1;
  for (size_t i = 0; i < ndim; i++) {
    json_t *d = json_array_get(js, i);
    if (!json_is_integer(d) || json_integer_value(d) < 0)
      return sc_fail(err, SC_INVALID,
                     "%s: corrupt header: tensor '%s' shape[%zu] is not a non-negative integer",
                     path, name, i);
    t->shape[i] = json_integer_value(d);
    if (!mul_ok(count, (uint64_t)t->shape[i], &count))
      return sc_fail(err, SC_INVALID, "%s: tensor '%s' shape overflows", path, name);
  }
  for (size_t i = ndim; i < 4; i++) t->shape[i] = 0;
  json_t *jb = json_array_get(jo, 0), *je = json_array_get(jo, 1);
  if (!json_is_integer(jb) || !json_is_integer(je) || json_integer_value(jb) < 0 ||
      json_integer_value(je) < json_integer_value(jb))
    return sc_fail(err, SC_INVALID,
                   "%s: corrupt header: tensor '%s' data_offsets must be [begin, end] with "
                   "0 <= begin <= end",
                   path, name);
  uint64_t b = (uint64_t)json_integer_value(jb), e = (uint64_t)json_integer_value(je);
  if (e > f->size - data0)
    return sc_fail(err, SC_INVALID,
                   "%s: tensor '%s' bytes [%llu, %llu) run past the end of the file (size %zu)",
                   path, name, (unsigned long long)(data0 + b), (unsigned long long)(data0 + e),
                   f->size);
  uint64_t need;
  if (!mul_ok(count, st_dtype_size(t->dtype), &need) || need != e - b)
    return sc_fail(err, SC_INVALID,
                   "%s: tensor '%s' has %llu bytes but its shape needs %llu elements of %s "
                   "(%llu bytes)",
                   path, name, (unsigned long long)(e - b), (unsigned long long)count,
                   json_string_value(jd), (unsigned long long)count * st_dtype_size(t->dtype));
  t->file = path;
  t->data = f->map + data0 + b;
  t->nbytes = (size_t)(e - b);
  return SC_OK;
}

// Maps path, parses its header and appends its tensors to m.
static sc_status st_load_file(st_model *m, const char *path, sc_error *err) {
  st_file *f = NULL;
  SC_TRY(st_map_file(m, path, &f, err));
  uint64_t n;
  memcpy(&n, f->map, 8);
  if (n > f->size - 8)
    return sc_fail(err, SC_INVALID,
                   "%s: truncated: the header claims %llu bytes but the file has %zu after the "
                   "length",
                   f->path, (unsigned long long)n, f->size - 8);
  json_error_t je;
  json_t *root = json_loadb((const char *)f->map + 8, (size_t)n, JSON_REJECT_DUPLICATES, &je);
  if (!root)
    return sc_fail(err, SC_INVALID, "%s: corrupt header: %s (header line %d, column %d)", f->path,
                   je.text, je.line, je.column);
  if (!json_is_object(root)) {
    json_decref(root);
    return sc_fail(err, SC_INVALID, "%s: corrupt header: not a JSON object", f->path);
  }
  size_t data0 = 8 + (size_t)n;
  const char *key;
  json_t *v;
  sc_status s = SC_OK;
  json_object_foreach(root, key, v) {
    if (!strcmp(key, "__metadata__")) continue;
    st_tensor t;
    memset(&t, 0, sizeof t);
    s = st_parse_entry(f, data0, key, v, &t, err);
    if (s != SC_OK) break;
    char *name = strdup(key);
    if (!name) {
      s = sc_fail(err, SC_OOM, "%s: out of memory", f->path);
      break;
    }
    t.name = name;
    s = st_push_tensor(m, &t, err);
    if (s != SC_OK) {
      free(name);
      break;
    }
  }
  json_decref(root);
  return s;
}

static int st_cmp_tensor(const void *a, const void *b) {
  return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static int st_cmp_key(const void *key, const void *t) {
  return strcmp((const char *)key, ((const st_tensor *)t)->name);
}

static sc_status st_sort(st_model *m, sc_error *err) {
  if (m->n_tensors) qsort(m->tensors, (size_t)m->n_tensors, sizeof *m->tensors, st_cmp_tensor);
  for (int i = 1; i < m->n_tensors; i++)
    if (!strcmp(m->tensors[i - 1].name, m->tensors[i].name))
      return sc_fail(err, SC_INVALID, "tensor '%s' appears in both %s and %s",
                     m->tensors[i].name, m->tensors[i - 1].file, m->tensors[i].file);
  return SC_OK;
}

static bool file_exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

// Loads the shards named by the index at ipath (each once) and checks the weight_map.
static sc_status st_load_index(st_model *m, const char *dir, const char *ipath, sc_error *err) {
  json_error_t je;
  FILE *fp = fopen(ipath, "rb");
  if (!fp) return sc_fail(err, SC_IO, "%s: cannot open: %s", ipath, strerror(errno));
  json_t *root = json_loadf(fp, JSON_REJECT_DUPLICATES, &je);
  fclose(fp);
  if (!root)
    return sc_fail(err, SC_INVALID, "%s: malformed JSON at line %d, column %d: %s", ipath,
                   je.line, je.column, je.text);
  sc_status s = SC_OK;
  json_t *wm = json_object_get(root, "weight_map");
  const char *key;
  json_t *v;
  if (!json_is_object(wm)) {
    s = sc_fail(err, SC_INVALID, "%s: field 'weight_map' is missing or not an object", ipath);
    goto out;
  }
  json_object_foreach(wm, key, v) {
    const char *file = json_string_value(v);
    if (!file || !*file || file[0] == '/' || strstr(file, "..")) {
      s = sc_fail(err, SC_INVALID,
                  "%s: weight_map['%s'] must name a shard file beside the index", ipath, key);
      goto out;
    }
    char *sp = path_join(dir, file);
    if (!sp) {
      s = sc_fail(err, SC_OOM, "%s: out of memory", ipath);
      goto out;
    }
    bool seen = false;
    for (int i = 0; i < m->n_files && !seen; i++) seen = !strcmp(m->files[i].path, sp);
    if (!seen) s = st_load_file(m, sp, err);
    free(sp);
    if (s != SC_OK) goto out;
  }
  s = st_sort(m, err);
  if (s != SC_OK) goto out;
  // Every mapped tensor must be in the shard the index names.
  json_object_foreach(wm, key, v) {
    const st_tensor *t = st_find(m, key);
    char *sp = path_join(dir, json_string_value(v));
    if (!sp) {
      s = sc_fail(err, SC_OOM, "%s: out of memory", ipath);
      goto out;
    }
    bool ok = t && !strcmp(t->file, sp);
    if (!ok)
      s = sc_fail(err, SC_INVALID, "%s: weight_map puts tensor '%s' in %s, which does not hold it",
                  ipath, key, sp);
    free(sp);
    if (!ok) goto out;
  }
out:
  json_decref(root);
  return s;
}

sc_status st_open_dir(const char *dir, st_model **out, sc_error *err) {
  *out = NULL;
  st_model *m = calloc(1, sizeof *m);
  if (!m) return sc_fail(err, SC_OOM, "%s: out of memory", dir);
  char *ipath = path_join(dir, "model.safetensors.index.json");
  char *spath = path_join(dir, "model.safetensors");
  sc_status s;
  if (!ipath || !spath) s = sc_fail(err, SC_OOM, "%s: out of memory", dir);
  else if (file_exists(ipath)) s = st_load_index(m, dir, ipath, err);
  else if (file_exists(spath)) {
    s = st_load_file(m, spath, err);
    if (s == SC_OK) s = st_sort(m, err);
  } else {
    struct stat sb;
    if (stat(dir, &sb) != 0)
      s = sc_fail(err, SC_IO, "%s: cannot open: %s", dir, strerror(errno));
    else
      s = sc_fail(err, SC_IO, "%s: no model.safetensors or model.safetensors.index.json in it",
                  dir);
  }
  free(ipath);
  free(spath);
  if (s != SC_OK) {
    st_close(m);
    return s;
  }
  *out = m;
  return SC_OK;
}

void st_close(st_model *m) {
  if (!m) return;
  for (int i = 0; i < m->n_tensors; i++) free((char *)m->tensors[i].name);
  for (int i = 0; i < m->n_files; i++) {
    munmap(m->files[i].map, m->files[i].size);
    free(m->files[i].path);
  }
  free(m->tensors);
  free(m->files);
  free(m);
}

const st_tensor *st_find(const st_model *m, const char *name) {
  if (!m || !m->n_tensors) return NULL;
  return bsearch(name, m->tensors, (size_t)m->n_tensors, sizeof *m->tensors, st_cmp_key);
}

int st_count(const st_model *m) { return m ? m->n_tensors : 0; }

const st_tensor *st_tensor_at(const st_model *m, int i) {
  return m && i >= 0 && i < m->n_tensors ? &m->tensors[i] : NULL;
}

// Converts n elements at src (possibly unaligned) of dtype t to fp32.
static void st_convert(sc_dtype t, const uint8_t *src, int64_t n, float *dst) {
  if (t == SC_F32) {
    memcpy(dst, src, (size_t)n * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    uint16_t h;
    memcpy(&h, src + 2 * i, 2);
    dst[i] = t == SC_BF16 ? sc_bf16_to_f32(h) : sc_f16_to_f32(h);
  }
}

sc_status st_read_f32(const st_tensor *t, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                      float *dst, sc_error *err) {
  int64_t rows, cols;
  if (t->ndim == 0) rows = cols = 1;
  else if (t->ndim == 1) rows = 1, cols = t->shape[0];
  else if (t->ndim == 2) rows = t->shape[0], cols = t->shape[1];
  else
    return sc_fail(err, SC_INVALID, "%s: tensor '%s' has %d dimensions; slices read 1-D or 2-D",
                   t->file, t->name, t->ndim);
  if (r0 < 0 || nr < 0 || c0 < 0 || nc < 0 || r0 > rows - nr || c0 > cols - nc)
    return sc_fail(err, SC_INVALID,
                   "%s: tensor '%s' (%lld, %lld): slice rows [%lld, %lld) cols [%lld, %lld) is "
                   "out of bounds",
                   t->file, t->name, (long long)rows, (long long)cols, (long long)r0,
                   (long long)(r0 + nr), (long long)c0, (long long)(c0 + nc));
  size_t es = st_dtype_size(t->dtype);
  for (int64_t r = 0; r < nr; r++)
    st_convert(t->dtype, t->data + ((size_t)(r0 + r) * (size_t)cols + (size_t)c0) * es, nc,
               dst + r * nc);
  return SC_OK;
}

// --- writer

typedef struct st_wtensor {
  char *name;
  sc_dtype dtype;
  int ndim;
  int64_t shape[4];
  uint64_t count; // elements
  uint64_t begin; // byte offset into the data section
} st_wtensor;

struct st_writer {
  char *path, *tmp; // final path; written as tmp and renamed by finish
  FILE *f;
  st_wtensor *t;
  int n, cap;
  uint64_t data_bytes;  // sum of declared tensor sizes
  bool started;         // header written; no more declarations
  int cur;              // tensor being written
  uint64_t cur_done;    // elements of t[cur] written
  sc_status failed;     // sticky: first error, SC_OK while fine
  sc_error ferr;        // its message
};

// Records the writer's first failure and returns it (later calls repeat it).
static sc_status w_fail(st_writer *w, sc_error *err, sc_status s) {
  if (w->failed == SC_OK) {
    w->failed = s;
    if (err) w->ferr = *err;
  }
  return s;
}

static sc_status w_failed(const st_writer *w, sc_error *err) {
  if (err) *err = w->ferr;
  return w->failed;
}

sc_status st_writer_new(const char *path, st_writer **out, sc_error *err) {
  *out = NULL;
  st_writer *w = calloc(1, sizeof *w);
  if (!w) return sc_fail(err, SC_OOM, "%s: out of memory", path);
  size_t len = strlen(path);
  w->path = strdup(path);
  w->tmp = malloc(len + 5);
  if (!w->path || !w->tmp) {
    free(w->path);
    free(w->tmp);
    free(w);
    return sc_fail(err, SC_OOM, "%s: out of memory", path);
  }
  memcpy(w->tmp, path, len);
  memcpy(w->tmp + len, ".tmp", 5);
  w->f = fopen(w->tmp, "wb");
  if (!w->f) {
    sc_status s = sc_fail(err, SC_IO, "%s: cannot create: %s", path, strerror(errno));
    free(w->path);
    free(w->tmp);
    free(w);
    return s;
  }
  *out = w;
  return SC_OK;
}

sc_status st_writer_declare(st_writer *w, const char *name, sc_dtype dtype, int ndim,
                            const int64_t *shape, sc_error *err) {
  if (w->failed) return w_failed(w, err);
  if (w->started)
    return sc_fail(err, SC_INVALID, "%s: tensor '%s' declared after writing began", w->path,
                   name);
  if (!name || !*name || !strcmp(name, "__metadata__"))
    return sc_fail(err, SC_INVALID, "%s: invalid tensor name '%s'", w->path, name ? name : "");
  if (!st_dtype_str(dtype))
    return sc_fail(err, SC_INVALID, "%s: tensor '%s': dtype %s cannot be stored (f32, f16, bf16)",
                   w->path, name, sc_dtype_name(dtype));
  if (ndim < 0 || ndim > 4)
    return sc_fail(err, SC_INVALID, "%s: tensor '%s': %d dimensions (0..4 allowed)", w->path,
                   name, ndim);
  for (int i = 0; i < w->n; i++)
    if (!strcmp(w->t[i].name, name))
      return sc_fail(err, SC_INVALID, "%s: tensor '%s' declared twice", w->path, name);
  uint64_t count = 1;
  for (int i = 0; i < ndim; i++)
    if (shape[i] < 0 || !mul_ok(count, (uint64_t)shape[i], &count))
      return sc_fail(err, SC_INVALID, "%s: tensor '%s': bad shape[%d] = %lld", w->path, name, i,
                     (long long)shape[i]);
  if (w->n == w->cap) {
    int cap = w->cap ? 2 * w->cap : 64;
    st_wtensor *t = realloc(w->t, (size_t)cap * sizeof *t);
    if (!t) return sc_fail(err, SC_OOM, "%s: out of memory", w->path);
    w->t = t;
    w->cap = cap;
  }
  st_wtensor *t = &w->t[w->n];
  memset(t, 0, sizeof *t);
  t->name = strdup(name);
  if (!t->name) return sc_fail(err, SC_OOM, "%s: out of memory", w->path);
  t->dtype = dtype;
  t->ndim = ndim;
  for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
  t->count = count;
  t->begin = w->data_bytes;
  w->data_bytes += count * st_dtype_size(dtype);
  w->n++;
  return SC_OK;
}

static sc_status w_io(st_writer *w, sc_error *err) {
  sc_status s = sc_fail(err, SC_IO, "%s: write failed: %s", w->path, strerror(errno));
  return w_fail(w, err, s);
}

// Writes the length, the JSON header and the space padding that puts the data at a multiple
// of 8 bytes.
static sc_status w_header(st_writer *w, sc_error *err) {
  w->started = true;
  json_t *root = json_pack("{s:{s:s}}", "__metadata__", "format", "pt");
  sc_status s = SC_OK;
  if (!root) return w_fail(w, err, sc_fail(err, SC_OOM, "%s: out of memory", w->path));
  for (int i = 0; i < w->n && s == SC_OK; i++) {
    const st_wtensor *t = &w->t[i];
    json_t *shape = json_array();
    for (int d = 0; d < t->ndim; d++) json_array_append_new(shape, json_integer(t->shape[d]));
    json_t *off = json_array();
    json_array_append_new(off, json_integer((json_int_t)t->begin));
    json_array_append_new(off, json_integer((json_int_t)(t->begin + t->count *
                                                                     st_dtype_size(t->dtype))));
    json_t *e = json_pack("{s:s, s:o, s:o}", "dtype", st_dtype_str(t->dtype), "shape", shape,
                          "data_offsets", off);
    if (!e || json_object_set_new(root, t->name, e))
      s = sc_fail(err, SC_OOM, "%s: out of memory", w->path);
  }
  char *text = s == SC_OK ? json_dumps(root, JSON_COMPACT) : NULL;
  json_decref(root);
  if (s == SC_OK && !text) s = sc_fail(err, SC_OOM, "%s: out of memory", w->path);
  if (s != SC_OK) return w_fail(w, err, s);
  size_t len = strlen(text);
  uint64_t n = (len + 7) & ~(uint64_t)7; // 8 + n is a multiple of 8
  static const char spaces[8] = "        ";
  bool ok = fwrite(&n, 8, 1, w->f) == 1 && fwrite(text, 1, len, w->f) == len &&
            fwrite(spaces, 1, n - len, w->f) == n - len;
  free(text);
  return ok ? SC_OK : w_io(w, err);
}

sc_status st_writer_append(st_writer *w, const float *values, size_t n, sc_error *err) {
  if (w->failed) return w_failed(w, err);
  if (!w->started) SC_TRY(w_header(w, err));
  while (n > 0) {
    while (w->cur < w->n && w->t[w->cur].count == 0) w->cur++; // empty tensors take no bytes
    if (w->cur >= w->n)
      return w_fail(w, err,
                    sc_fail(err, SC_INVALID, "%s: %zu values more than the declared tensors hold",
                            w->path, n));
    st_wtensor *t = &w->t[w->cur];
    uint64_t left = t->count - w->cur_done;
    size_t k = n < left ? n : (size_t)left;
    if (t->dtype == SC_F32) {
      if (fwrite(values, sizeof(float), k, w->f) != k) return w_io(w, err);
    } else {
      uint16_t buf[4096];
      for (size_t i = 0; i < k;) {
        size_t m = k - i < 4096 ? k - i : 4096;
        for (size_t j = 0; j < m; j++)
          buf[j] = t->dtype == SC_BF16 ? sc_f32_to_bf16(values[i + j])
                                       : sc_f32_to_f16(values[i + j]);
        if (fwrite(buf, 2, m, w->f) != m) return w_io(w, err);
        i += m;
      }
    }
    values += k;
    n -= k;
    w->cur_done += k;
    if (w->cur_done == t->count) w->cur++, w->cur_done = 0;
  }
  return SC_OK;
}

sc_status st_writer_write(st_writer *w, const float *values, size_t n, sc_error *err) {
  if (w->failed) return w_failed(w, err);
  if (w->cur >= w->n)
    return w_fail(w, err,
                  sc_fail(err, SC_INVALID, "%s: every declared tensor is already written",
                          w->path));
  const st_wtensor *t = &w->t[w->cur];
  if (w->cur_done != 0)
    return w_fail(w, err,
                  sc_fail(err, SC_INVALID,
                          "%s: tensor '%s' is partly written; finish it with st_writer_append",
                          w->path, t->name));
  if (n != t->count)
    return w_fail(w, err,
                  sc_fail(err, SC_INVALID, "%s: tensor '%s' holds %llu values, got %zu", w->path,
                          t->name, (unsigned long long)t->count, n));
  if (n == 0) { // an empty tensor: nothing to write, move past it
    if (!w->started) SC_TRY(w_header(w, err));
    w->cur++;
    return SC_OK;
  }
  return st_writer_append(w, values, n, err);
}

sc_status st_writer_finish(st_writer *w, sc_error *err) {
  if (!w) return SC_OK;
  sc_status s = w->failed;
  if (s != SC_OK) w_failed(w, err);
  if (s == SC_OK && !w->started) s = w_header(w, err);
  if (s == SC_OK) {
    while (w->cur < w->n && w->cur_done == 0 && w->t[w->cur].count == 0) w->cur++;
    if (w->cur < w->n)
      s = sc_fail(err, SC_INVALID, "%s: tensor '%s' was declared but %s", w->path,
                  w->t[w->cur].name, w->cur_done ? "only partly written" : "never written");
  }
  if (fclose(w->f) != 0 && s == SC_OK)
    s = sc_fail(err, SC_IO, "%s: write failed: %s", w->path, strerror(errno));
  if (s == SC_OK && rename(w->tmp, w->path) != 0)
    s = sc_fail(err, SC_IO, "%s: cannot rename from %s: %s", w->path, w->tmp, strerror(errno));
  if (s != SC_OK) unlink(w->tmp);
  for (int i = 0; i < w->n; i++) free(w->t[i].name);
  free(w->t);
  free(w->path);
  free(w->tmp);
  free(w);
  return s;
}
