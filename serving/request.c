// The request table (serving/request.h): adding rows, emptying it, stamping a request's
// tokens. The runner and shardcheck serve's loop share it.
// Not here: sending a request to a replica and ending it (serving/router.c: router_send,
// router_end), what a request's end means to its client (runner/runner.c, server/loop.c).
#include "serving/request.h"

#include <stdlib.h>

// --- the table
bool req_table_add(req_table *t, const req_rec *r, uint64_t *key) {
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 1024;
    req_rec *p = realloc(t->v, cap * sizeof *p);
    if (!p) return false;
    t->v = p;
    t->cap = cap;
  }
  *key = t->n++;
  t->v[*key] = *r;
  t->inflight++;
  return true;
}

void req_table_clear(req_table *t) {
  for (size_t i = 0; i < t->n; i++) {
    free(t->v[i].tok);
    free(t->v[i].ids);
  }
  t->n = t->low = 0;
  t->inflight = 0;
}

void req_table_free(req_table *t) {
  req_table_clear(t);
  free(t->v);
  t->v = NULL;
  t->cap = 0;
}

// --- one request
bool req_add_token(req_rec *q, int32_t id, uint64_t t) {
  if (q->n_tok == q->cap_tok) {
    int cap = q->cap_tok ? q->cap_tok * 2 : (q->max_tokens < 64 ? q->max_tokens : 64);
    if (cap < 1) cap = 1;
    uint64_t *p = realloc(q->tok, (size_t)cap * sizeof *p);
    if (!p) return false;
    q->tok = p;
    int32_t *d = realloc(q->ids, (size_t)cap * sizeof *d);
    if (!d) return false;
    q->ids = d;
    q->cap_tok = cap;
  }
  if (q->n_tok == 0) q->tok_version = q->version;
  else if (q->version != q->tok_version) q->mixed_versions = true;
  q->ids[q->n_tok] = id;
  q->tok[q->n_tok++] = t;
  return true;
}
