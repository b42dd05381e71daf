// Framing and (de)serialisation of the process replica's messages (see wire.h). Pure byte
// work: no sockets, no processes (serving/replica_proc.c).
#include "serving/wire.h"

#include <stdlib.h>
#include <string.h>

// --- byte buffers

bool wire_reserve(wire_buf *b, size_t more) {
  if (b->cap - b->n >= more) return true;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap - b->n < more) cap *= 2;
  uint8_t *p = realloc(b->p, cap);
  if (!p) return false;
  b->p = p;
  b->cap = cap;
  return true;
}

void wire_consume(wire_buf *b, size_t k) {
  if (k >= b->n) {
    b->n = 0;
    return;
  }
  memmove(b->p, b->p + k, b->n - k);
  b->n -= k;
}

void wire_buf_free(wire_buf *b) {
  free(b->p);
  memset(b, 0, sizeof *b);
}

// --- writing: a frame is built in place; a failed reserve drops the whole frame

typedef struct writer {
  wire_buf *b;
  size_t start; // where the frame begins in b
  bool bad;     // memory ran out
} writer;

static void put_bytes(writer *w, const void *p, size_t n) {
  if (w->bad) return;
  if (!wire_reserve(w->b, n)) {
    w->bad = true;
    return;
  }
  memcpy(w->b->p + w->b->n, p, n);
  w->b->n += n;
}

static void put_u8(writer *w, uint8_t v) { put_bytes(w, &v, 1); }

static void put_u32(writer *w, uint32_t v) {
  uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
  put_bytes(w, b, 4);
}

static void put_u64(writer *w, uint64_t v) {
  put_u32(w, (uint32_t)v);
  put_u32(w, (uint32_t)(v >> 32));
}

static void put_i32(writer *w, int32_t v) { put_u32(w, (uint32_t)v); }

static void put_f32(writer *w, float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  put_u32(w, u);
}

static void put_f64(writer *w, double v) {
  uint64_t u;
  memcpy(&u, &v, 8);
  put_u64(w, u);
}

// A string of at most WIRE_STR_MAX bytes (longer ones are cut); NULL travels as absent.
static void put_str(writer *w, const char *s) {
  if (!s) {
    put_u32(w, UINT32_MAX);
    return;
  }
  size_t n = strnlen(s, WIRE_STR_MAX);
  put_u32(w, (uint32_t)n);
  put_bytes(w, s, n);
}

static writer begin(wire_buf *b, int type, uint32_t epoch) {
  writer w = {.b = b, .start = b->n};
  put_u32(&w, 0); // the length, patched by end()
  put_u8(&w, (uint8_t)type);
  put_u32(&w, epoch);
  return w;
}

static bool end(writer *w) {
  if (w->bad) {
    w->b->n = w->start;
    return false;
  }
  uint32_t len = (uint32_t)(w->b->n - w->start - 4);
  uint8_t *p = w->b->p + w->start;
  p[0] = (uint8_t)len;
  p[1] = (uint8_t)(len >> 8);
  p[2] = (uint8_t)(len >> 16);
  p[3] = (uint8_t)(len >> 24);
  return true;
}

// --- reading

static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int wire_frame(const uint8_t *p, size_t n, int *type, uint32_t *epoch, const uint8_t **body,
               size_t *body_n, size_t *frame_n) {
  if (n < 4) return 0;
  uint32_t len = le32(p);
  if (len < WIRE_HEADER - 4 || len > WIRE_MAX_FRAME) return -1;
  if (n < 4 + (size_t)len) return 0;
  *type = p[4];
  *epoch = le32(p + 5);
  *body = p + WIRE_HEADER;
  *body_n = len - (WIRE_HEADER - 4);
  *frame_n = 4 + (size_t)len;
  return 1;
}

static const uint8_t *get_bytes(wire_reader *r, size_t n) {
  if (r->bad || r->n - r->off < n) {
    r->bad = true;
    return NULL;
  }
  const uint8_t *p = r->p + r->off;
  r->off += n;
  return p;
}

static uint8_t get_u8(wire_reader *r) {
  const uint8_t *p = get_bytes(r, 1);
  return p ? p[0] : 0;
}

static uint32_t get_u32(wire_reader *r) {
  const uint8_t *p = get_bytes(r, 4);
  return p ? le32(p) : 0;
}

static uint64_t get_u64(wire_reader *r) {
  uint64_t lo = get_u32(r);
  return lo | (uint64_t)get_u32(r) << 32;
}

static int32_t get_i32(wire_reader *r) { return (int32_t)get_u32(r); }

static float get_f32(wire_reader *r) {
  uint32_t u = get_u32(r);
  float v;
  memcpy(&v, &u, 4);
  return v;
}

static double get_f64(wire_reader *r) {
  uint64_t u = get_u64(r);
  double v;
  memcpy(&v, &u, 8);
  return v;
}

static bool get_bool(wire_reader *r) { return get_u8(r) != 0; }

// The knobs' types (kernels/knobs.h) by their C names, for the rows' encoding.
static void put_int(writer *w, int v) { put_i32(w, v); }
static void put_bool(writer *w, bool v) { put_u8(w, v); }
static void put_double(writer *w, double v) { put_f64(w, v); }
static int get_int(wire_reader *r) { return get_i32(r); }
static double get_double(wire_reader *r) { return get_f64(r); }

// A string into dst (cap bytes, NUL-terminated, cut to fit); false when absent.
static bool get_str(wire_reader *r, char *dst, size_t cap) {
  uint32_t n = get_u32(r);
  dst[0] = 0;
  if (n == UINT32_MAX || r->bad) return false;
  if (n > WIRE_STR_MAX) {
    r->bad = true;
    return false;
  }
  const uint8_t *p = get_bytes(r, n);
  if (!p) return false;
  size_t k = n < cap - 1 ? n : cap - 1;
  memcpy(dst, p, k);
  dst[k] = 0;
  return true;
}

// True when every field was read and nothing is left over.
bool wire_done(const wire_reader *r) { return !r->bad && r->off == r->n; }

// --- runner -> worker

// CONFIG and SWAP carry the same fields.
static bool put_config(wire_buf *b, int type, uint32_t epoch, const engine_config *cfg,
                       int index, uint64_t heartbeat_ns) {
  writer w = begin(b, type, epoch);
  const model_config *m = &cfg->model;
  put_str(&w, m->name);
  put_i32(&w, m->vocab_size);
  put_i32(&w, m->dim);
  put_i32(&w, m->n_layers);
  put_i32(&w, m->n_heads);
  put_i32(&w, m->n_kv_heads);
  put_i32(&w, m->head_dim);
  put_i32(&w, m->ffn_dim);
  put_i32(&w, m->max_seq_len);
  put_f32(&w, m->rope_theta);
  put_f32(&w, m->norm_eps);
  put_u8(&w, m->tied_embeddings);
  put_u32(&w, (uint32_t)m->dtype);
  put_i32(&w, m->bos_token_id);
  put_i32(&w, m->eos_token_id);
  put_str(&w, cfg->weights_dir);
  put_u64(&w, cfg->weights_seed);
  put_u32(&w, (uint32_t)cfg->weight_dtype);
  put_str(&w, cfg->backend);
  put_i32(&w, cfg->tp);
  put_i32(&w, cfg->pp);
  int nd = cfg->n_devices < 0 ? 0 : cfg->n_devices > 16 ? 16 : cfg->n_devices;
  put_i32(&w, nd);
  for (int i = 0; i < nd; i++) put_i32(&w, cfg->devices[i]);
  put_i32(&w, cfg->first_device);
  put_i32(&w, cfg->kv_blocks);
  put_u64(&w, (uint64_t)cfg->kv_bytes_max);
#define PUT_KNOB(name, type, dflt, e, s, pf, pkey, ok, ex, j)                                      \
  SC_KNOB_IF(e)(put_##type(&w, cfg->name);)
  SC_KNOBS(PUT_KNOB) // the knobs the engine carries, in the rows' order (kernels/knobs.h)
#undef PUT_KNOB
  put_i32(&w, cfg->threads);
  put_u64(&w, cfg->collective_timeout_ns);
  put_i32(&w, index);
  put_u64(&w, heartbeat_ns);
  return end(&w);
}

bool wire_put_config(wire_buf *b, uint32_t epoch, const engine_config *cfg, int index,
                     uint64_t heartbeat_ns) {
  return put_config(b, WIRE_CONFIG, epoch, cfg, index, heartbeat_ns);
}

bool wire_put_swap(wire_buf *b, uint32_t epoch, const engine_config *cfg, int index,
                   uint64_t heartbeat_ns) {
  return put_config(b, WIRE_SWAP, epoch, cfg, index, heartbeat_ns);
}

bool wire_get_config(wire_reader *r, wire_config *out) {
  memset(out, 0, sizeof *out);
  out->cfg = engine_config_defaults();
  model_config *m = &out->cfg.model;
  get_str(r, m->name, sizeof m->name);
  m->vocab_size = get_i32(r);
  m->dim = get_i32(r);
  m->n_layers = get_i32(r);
  m->n_heads = get_i32(r);
  m->n_kv_heads = get_i32(r);
  m->head_dim = get_i32(r);
  m->ffn_dim = get_i32(r);
  m->max_seq_len = get_i32(r);
  m->rope_theta = get_f32(r);
  m->norm_eps = get_f32(r);
  m->tied_embeddings = get_bool(r);
  uint32_t dtype = get_u32(r);
  if (dtype > SC_DTYPE_LAST) return false;
  m->dtype = (sc_dtype)dtype;
  m->bos_token_id = get_i32(r);
  m->eos_token_id = get_i32(r);
  bool has_dir = get_str(r, out->weights_dir, sizeof out->weights_dir);
  out->cfg.weights_dir = has_dir ? out->weights_dir : NULL;
  out->cfg.weights_seed = get_u64(r);
  uint32_t wdtype = get_u32(r);
  if (wdtype > SC_DTYPE_LAST) return false;
  out->cfg.weight_dtype = (sc_dtype)wdtype;
  bool has_backend = get_str(r, out->backend, sizeof out->backend);
  out->cfg.backend = has_backend ? out->backend : NULL;
  out->cfg.tp = get_i32(r);
  out->cfg.pp = get_i32(r);
  int nd = get_i32(r);
  if (nd < 0 || nd > 16) return false;
  out->cfg.n_devices = nd;
  for (int i = 0; i < nd; i++) out->cfg.devices[i] = get_i32(r);
  out->cfg.first_device = get_i32(r);
  out->cfg.kv_blocks = get_i32(r);
  out->cfg.kv_bytes_max = (size_t)get_u64(r);
#define GET_KNOB(name, type, dflt, e, s, pf, pkey, ok, ex, j)                                      \
  SC_KNOB_IF(e)(out->cfg.name = get_##type(r);)
  SC_KNOBS(GET_KNOB)
#undef GET_KNOB
  out->cfg.threads = get_i32(r);
  out->cfg.collective_timeout_ns = get_u64(r);
  out->index = get_i32(r);
  out->heartbeat_ns = get_u64(r);
  return wire_done(r);
}

bool wire_put_submit(wire_buf *b, uint32_t epoch, uint64_t key, const engine_request *q) {
  writer w = begin(b, WIRE_SUBMIT, epoch);
  put_u64(&w, key);
  put_i32(&w, q->max_tokens);
  put_f32(&w, q->sampling.temperature);
  put_f32(&w, q->sampling.top_p);
  put_u64(&w, q->sampling.seed);
  put_u8(&w, q->stop_at_eos);
  int n = q->n_prompt > 0 ? q->n_prompt : 0;
  put_i32(&w, n);
  for (int i = 0; i < n; i++) put_i32(&w, q->prompt[i]);
  return end(&w);
}

bool wire_get_submit(wire_reader *r, uint64_t *key, engine_request *out, int32_t **prompt,
                     int *prompt_cap) {
  memset(out, 0, sizeof *out);
  *key = get_u64(r);
  out->max_tokens = get_i32(r);
  out->sampling.temperature = get_f32(r);
  out->sampling.top_p = get_f32(r);
  out->sampling.seed = get_u64(r);
  out->stop_at_eos = get_bool(r);
  int32_t n = get_i32(r);
  if (r->bad || n < 0 || (size_t)n > (r->n - r->off) / 4) return false;
  if (n > *prompt_cap) {
    int32_t *p = realloc(*prompt, sizeof(int32_t) * (size_t)n);
    if (!p) return false;
    *prompt = p;
    *prompt_cap = n;
  }
  for (int i = 0; i < n; i++) (*prompt)[i] = get_i32(r);
  out->prompt = *prompt;
  out->n_prompt = n;
  return wire_done(r);
}

bool wire_put_cancel(wire_buf *b, uint32_t epoch, uint64_t key) {
  writer w = begin(b, WIRE_CANCEL, epoch);
  put_u64(&w, key);
  return end(&w);
}

bool wire_get_cancel(wire_reader *r, uint64_t *key) {
  *key = get_u64(r);
  return wire_done(r);
}

bool wire_put_admit(wire_buf *b, uint32_t epoch, bool admitting) {
  writer w = begin(b, WIRE_ADMIT, epoch);
  put_u8(&w, admitting);
  return end(&w);
}

bool wire_get_admit(wire_reader *r, bool *admitting) {
  *admitting = get_bool(r);
  return wire_done(r);
}

bool wire_put_inject(wire_buf *b, uint32_t epoch, const replica_fault *f) {
  writer w = begin(b, WIRE_INJECT, epoch);
  put_u32(&w, (uint32_t)f->kind);
  put_i32(&w, f->rank);
  put_f64(&w, f->factor);
  put_u64(&w, f->latency_ns);
  put_f64(&w, f->bandwidth);
  put_i32(&w, f->after_allocs);
  put_u8(&w, f->persistent);
  put_u8(&w, f->bitflip);
  return end(&w);
}

bool wire_get_inject(wire_reader *r, replica_fault *out) {
  memset(out, 0, sizeof *out);
  uint32_t kind = get_u32(r);
  if (!replica_fault_kind_info((replica_fault_kind)kind)) return false;
  out->kind = (replica_fault_kind)kind;
  out->rank = get_i32(r);
  out->factor = get_f64(r);
  out->latency_ns = get_u64(r);
  out->bandwidth = get_f64(r);
  out->after_allocs = get_i32(r);
  out->persistent = get_bool(r);
  out->bitflip = get_bool(r);
  return wire_done(r);
}

// --- worker -> runner

bool wire_put_status(wire_buf *b, int type, uint32_t epoch, const wire_status *s) {
  writer w = begin(b, type, epoch);
  put_u8(&w, (uint8_t)s->health);
  const engine_stats *st = &s->stats;
  put_i32(&w, st->queue_len);
  put_i32(&w, st->running);
  put_i32(&w, st->kv_used);
  put_i32(&w, st->kv_total);
  put_i32(&w, st->kv_block_size);
  put_u64(&w, st->steps);
  put_u64(&w, st->preemptions);
  put_u64(&w, st->prefix_hit_tokens);
  put_u64(&w, st->prefix_query_tokens);
  put_u64(&w, st->generated_tokens);
  put_i32(&w, st->n_ranks);
  put_u64(&w, st->oom_failures);
  put_u64(&w, st->numerical_failures);
  put_u8(&w, st->unhealthy);
  put_i32(&w, s->n_ranks);
  for (int i = 0; i < s->n_ranks; i++) {
    put_u64(&w, (uint64_t)s->mem_used[i]);
    put_u64(&w, (uint64_t)s->mem_total[i]);
  }
  put_str(&w, s->error);
  put_u64(&w, (uint64_t)s->wall_ns);
  return end(&w);
}

bool wire_get_status(wire_reader *r, wire_status *out, size_t *used, size_t *total, int cap) {
  memset(out, 0, sizeof *out);
  uint8_t health = get_u8(r);
  if (health > REPLICA_DEAD) return false;
  out->health = (replica_health)health;
  engine_stats *st = &out->stats;
  st->queue_len = get_i32(r);
  st->running = get_i32(r);
  st->kv_used = get_i32(r);
  st->kv_total = get_i32(r);
  st->kv_block_size = get_i32(r);
  st->steps = get_u64(r);
  st->preemptions = get_u64(r);
  st->prefix_hit_tokens = get_u64(r);
  st->prefix_query_tokens = get_u64(r);
  st->generated_tokens = get_u64(r);
  st->n_ranks = get_i32(r);
  st->oom_failures = get_u64(r);
  st->numerical_failures = get_u64(r);
  st->unhealthy = get_bool(r);
  int n = get_i32(r);
  if (r->bad || n < 0 || (size_t)n > (r->n - r->off) / 16) return false;
  out->n_ranks = n;
  for (int i = 0; i < n; i++) {
    uint64_t u = get_u64(r), t = get_u64(r);
    if (i < cap) {
      used[i] = (size_t)u;
      total[i] = (size_t)t;
    }
  }
  out->mem_used = used;
  out->mem_total = total;
  get_str(r, out->error, sizeof out->error);
  out->wall_ns = (int64_t)get_u64(r);
  return wire_done(r);
}

bool wire_put_message(wire_buf *b, int type, uint32_t epoch, sc_status s, const char *msg) {
  writer w = begin(b, type, epoch);
  put_u32(&w, (uint32_t)s);
  put_str(&w, msg ? msg : "");
  return end(&w);
}

bool wire_get_message(wire_reader *r, sc_status *s, char *msg, size_t cap) {
  uint32_t v = get_u32(r);
  *s = v <= SC_NUMERICAL ? (sc_status)v : SC_ABORTED;
  get_str(r, msg, cap);
  return wire_done(r);
}

bool wire_put_events(wire_buf *b, uint32_t epoch, const replica_event *ev, int n) {
  writer w = begin(b, WIRE_EVENTS, epoch);
  put_u32(&w, (uint32_t)n);
  for (int i = 0; i < n; i++) {
    const replica_event *e = &ev[i];
    put_u8(&w, (uint8_t)e->kind);
    put_u64(&w, e->key);
    put_u64(&w, e->t_ns);
    switch (e->kind) {
    case REPLICA_EV_TOKEN:
      put_i32(&w, e->token);
      put_i32(&w, e->index);
      break;
    case REPLICA_EV_FINISHED:
      put_u8(&w, (uint8_t)e->reason);
      put_i32(&w, e->n_generated);
      put_i32(&w, e->has_cached ? e->cached_tokens : -1);
      break;
    case REPLICA_EV_FAILED:
      put_u32(&w, (uint32_t)e->status);
      put_str(&w, replica_failure_name(e->failure));
      break;
    case REPLICA_EV_STEP: {
      const engine_step_info *s = &e->step;
      put_u64(&w, s->t_start_ns);
      put_u64(&w, s->duration_ns);
      put_f64(&w, s->bubble_frac);
      put_i32(&w, s->n_seqs);
      put_i32(&w, s->prefill_tokens);
      put_i32(&w, s->decode_tokens);
      put_i32(&w, s->n_preempted);
      put_i32(&w, s->queue_len);
      put_i32(&w, s->running);
      put_i32(&w, s->kv_used);
      put_i32(&w, s->kv_total);
      break;
    }
    }
  }
  return end(&w);
}

bool wire_get_events_count(wire_reader *r, int *n) {
  uint32_t v = get_u32(r);
  *n = (int)v;
  return !r->bad && v <= WIRE_EVENTS_MAX;
}

bool wire_get_event(wire_reader *r, replica_event *out) {
  memset(out, 0, sizeof *out);
  uint8_t kind = get_u8(r);
  out->key = get_u64(r);
  out->t_ns = get_u64(r);
  switch (kind) {
  case REPLICA_EV_TOKEN:
    out->token = get_i32(r);
    out->index = get_i32(r);
    break;
  case REPLICA_EV_FINISHED: {
    uint8_t reason = get_u8(r);
    if (reason > FINISH_CANCELLED) return false;
    out->reason = (engine_finish_reason)reason;
    out->n_generated = get_i32(r);
    int32_t cached = get_i32(r);
    out->has_cached = cached >= 0;
    out->cached_tokens = cached >= 0 ? cached : 0;
    break;
  }
  case REPLICA_EV_FAILED: {
    uint32_t s = get_u32(r);
    out->status = s <= SC_NUMERICAL ? (sc_status)s : SC_ABORTED;
    char name[32];
    get_str(r, name, sizeof name);
    out->failure = replica_failure_parse(name);
    break;
  }
  case REPLICA_EV_STEP: {
    engine_step_info *s = &out->step;
    s->t_start_ns = get_u64(r);
    s->duration_ns = get_u64(r);
    s->bubble_frac = get_f64(r);
    s->n_seqs = get_i32(r);
    s->prefill_tokens = get_i32(r);
    s->decode_tokens = get_i32(r);
    s->n_preempted = get_i32(r);
    s->queue_len = get_i32(r);
    s->running = get_i32(r);
    s->kv_used = get_i32(r);
    s->kv_total = get_i32(r);
    break;
  }
  default: return false;
  }
  out->kind = (replica_ev_kind)kind;
  return !r->bad;
}
