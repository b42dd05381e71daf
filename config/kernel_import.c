// Public per-operator measurements into a profile's tables (see kernel_import.h): a small CSV
// reader, vidur's compute and network files, and the tables' YAML.
#include "config/kernel_import.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config/hardware.h"
#include "config/yaml_map.h"

// The rows m a table keeps: the measured row nearest each of these (log-spaced, as the
// profile's own GEMM grids are).
static const int want_m[] = {1,  2,   3,   4,   6,   8,   12,  16,   24,   32,   48,   64,
                             96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096};
enum { N_WANT = (int)(sizeof want_m / sizeof want_m[0]), CSV_COLS = 128, ROWS_MAX = 65536 };

// --- a CSV of numbers and words (no quoting: vidur writes none)

typedef struct csv {
  char *text;           // the file, split in place
  char *head[CSV_COLS]; // column names
  int n_cols;
  char **cells; // (n_rows x n_cols)
  int n_rows;
} csv;

static void csv_free(csv *c) {
  free(c->text);
  free(c->cells);
}

static int split(char *line, char **out, int cap) {
  int n = 0;
  for (char *p = line;; p++) {
    if (n < cap) out[n] = p;
    n++;
    char *c = strchr(p, ',');
    if (!c) break;
    *c = 0;
    p = c;
  }
  return n < cap ? n : cap;
}

static sc_status csv_read(const char *path, csv *c, sc_error *err) {
  memset(c, 0, sizeof *c);
  size_t len = 0;
  SC_TRY(yaml_map_slurp(path, 1 << 28, &c->text, &len, err));
  char *save = NULL, *line = strtok_r(c->text, "\r\n", &save);
  if (!line) return sc_fail(err, SC_INVALID, "%s: empty", path);
  c->n_cols = split(line, c->head, CSV_COLS);
  int cap = 0;
  while ((line = strtok_r(NULL, "\r\n", &save)) != NULL && c->n_rows < ROWS_MAX) {
    if (!*line) continue;
    if (c->n_rows == cap) {
      cap = cap ? 2 * cap : 256;
      char **v = realloc(c->cells, (size_t)cap * (size_t)c->n_cols * sizeof *v);
      if (!v) return sc_fail(err, SC_OOM, "%s: out of memory", path);
      c->cells = v;
    }
    char **row = c->cells + (size_t)c->n_rows * (size_t)c->n_cols;
    int n = split(line, row, c->n_cols);
    if (n != c->n_cols)
      return sc_fail(err, SC_INVALID, "%s:%d: %d fields, the header has %d", path, c->n_rows + 2, n,
                     c->n_cols);
    c->n_rows++;
  }
  return SC_OK;
}

static int csv_col(const csv *c, const char *name) {
  for (int i = 0; i < c->n_cols; i++)
    if (!strcmp(c->head[i], name)) return i;
  return -1;
}

static double cell(const csv *c, int row, int col) {
  char *end;
  const char *s = c->cells[(size_t)row * (size_t)c->n_cols + (size_t)col];
  double v = strtod(s, &end);
  return end == s ? NAN : v;
}

static sc_status need_cols(const csv *c, const char *path, const char *const *names, int n,
                           int *cols, sc_error *err) {
  for (int i = 0; i < n; i++)
    if ((cols[i] = csv_col(c, names[i])) < 0)
      return sc_fail(err, SC_INVALID, "%s: no column '%s' (is it vidur's %s?)", path, names[i],
                     strstr(names[i], "all_reduce") ? "all_reduce.csv" : "mlp.csv");
  return SC_OK;
}

// --- curves from (x, seconds) samples

// Sorts (x, y) pairs by x, then keeps the sample nearest each of N_WANT targets: the rows of
// want_m (grid true: a GEMM's m), else log-spaced from the smallest x to the largest; a target
// with no sample within 30% is skipped.
static void to_curve(double *x, double *y, int n, bool grid, sim_curve *out) {
  for (int i = 1; i < n; i++) // insertion sort: a few hundred samples
    for (int j = i; j > 0 && x[j] < x[j - 1]; j--) {
      double t = x[j];
      x[j] = x[j - 1];
      x[j - 1] = t;
      t = y[j];
      y[j] = y[j - 1];
      y[j - 1] = t;
    }
  out->n = 0;
  int last = -1;
  for (int w = 0; w < N_WANT && n > 0 && x[0] > 0; w++) {
    double target = grid ? want_m[w] : x[0] * pow(x[n - 1] / x[0], (double)w / (N_WANT - 1));
    int best = -1;
    for (int i = 0; i < n; i++)
      if (best < 0 || fabs(log(x[i] / target)) < fabs(log(x[best] / target))) best = i;
    if (best <= last || fabs(log(x[best] / target)) > log(1.3)) continue;
    out->x[out->n] = x[best];
    out->y[out->n] = y[best];
    out->n++;
    last = best;
  }
}

static sc_status put_gemm(sim_hw *hw, int n, int k, const sim_curve *t, sc_error *err) {
  int i = 0;
  while (i < hw->n_gemm && !(hw->gemm[i].n == n && hw->gemm[i].k == k)) i++;
  if (i == hw->n_gemm) {
    if (hw->n_gemm == SIM_TABLES_MAX)
      return sc_fail(err, SC_INVALID, "profile import: more than %d GEMM tables", SIM_TABLES_MAX);
    hw->n_gemm++;
  }
  hw->gemm[i] = (sim_gemm_table){.n = n, .k = k, .threads = 1, .t = *t};
  return SC_OK;
}

// --- vidur

sc_status kimport_vidur_mlp(const char *path, const model_config *m, sim_hw *hw, kimport_result *r,
                            sc_error *err) {
  csv c;
  sc_status st = csv_read(path, &c, err);
  static const char *const names[] = {"n_head",
                                      "n_kv_head",
                                      "n_embd",
                                      "n_expanded_embd",
                                      "num_tokens",
                                      "num_tensor_parallel_workers",
                                      "time_stats.attn_pre_proj.median",
                                      "time_stats.attn_post_proj.median",
                                      "time_stats.mlp_up_proj.median",
                                      "time_stats.mlp_down_proj.median"};
  int col[10];
  if (st == SC_OK) st = need_cols(&c, path, names, 10, col, err);
  const int shape[4] = {m->n_heads, m->n_kv_heads, m->dim, m->ffn_dim};
  for (int i = 0; st == SC_OK && i < c.n_rows; i++)
    for (int k = 0; k < 4 && st == SC_OK; k++)
      if (cell(&c, i, col[k]) != shape[k])
        st = sc_fail(err, SC_INVALID,
                     "%s:%d: column '%s' is %g, %s has %d: measurements of "
                     "another model",
                     path, i + 2, names[k], cell(&c, i, col[k]), m->name, shape[k]);
  if (st == SC_OK && c.n_rows == 0) st = sc_fail(err, SC_INVALID, "%s: no measurement", path);
  double *x = malloc((size_t)(c.n_rows ? c.n_rows : 1) * sizeof *x);
  double *y = malloc((size_t)(c.n_rows ? c.n_rows : 1) * sizeof *y);
  if (st == SC_OK && (!x || !y)) st = sc_fail(err, SC_OOM, "%s: out of memory", path);
  // each TP degree the file holds, in the order met
  int tps[8], n_tp = 0;
  for (int i = 0; st == SC_OK && i < c.n_rows; i++) {
    int tp = (int)cell(&c, i, col[5]);
    bool seen = false;
    for (int j = 0; j < n_tp; j++) seen |= tps[j] == tp;
    if (!seen && n_tp < 8 && tp >= 1) tps[n_tp++] = tp;
  }
  for (int t = 0; st == SC_OK && t < n_tp; t++) {
    int tp = tps[t], hd = m->head_dim;
    if (m->n_heads % tp || m->ffn_dim % tp) continue; // not a layout of this model
    int kvl = m->n_kv_heads % tp == 0 ? m->n_kv_heads / tp : 1;
    // (n, k) of q|k|v, o, gate|up, down on one rank: the cost model's shapes
    const int nk[4][2] = {{(m->n_heads / tp + 2 * kvl) * hd, m->dim},
                          {m->dim, m->n_heads / tp * hd},
                          {2 * m->ffn_dim / tp, m->dim},
                          {m->dim, m->ffn_dim / tp}};
    for (int op = 0; op < 4 && st == SC_OK; op++) {
      int n = 0;
      for (int i = 0; i < c.n_rows; i++) {
        double ms = cell(&c, i, col[6 + op]);
        if ((int)cell(&c, i, col[5]) != tp || !(ms > 0)) continue;
        x[n] = cell(&c, i, col[4]);
        y[n++] = ms / 1e3;
      }
      sim_curve cv;
      to_curve(x, y, n, true, &cv);
      if (cv.n > 0) {
        st = put_gemm(hw, nk[op][0], nk[op][1], &cv, err);
        r->gemm_tables++;
      }
    }
    if (r->n_tp < 8) r->tp[r->n_tp++] = tp;
  }
  free(x);
  free(y);
  csv_free(&c);
  return st;
}

sc_status kimport_vidur_allreduce(const char *path, sim_hw *hw, kimport_result *r, sc_error *err) {
  csv c;
  sc_status st = csv_read(path, &c, err);
  static const char *const names[] = {"time_stats.all_reduce.median", "num_workers", "size"};
  int col[3];
  if (st == SC_OK) st = need_cols(&c, path, names, 3, col, err);
  int rank = st == SC_OK ? csv_col(&c, "rank") : -1;
  if (st == SC_OK && c.n_rows == 0) st = sc_fail(err, SC_INVALID, "%s: no measurement", path);
  double *x = malloc((size_t)(c.n_rows ? c.n_rows : 1) * sizeof *x);
  double *y = malloc((size_t)(c.n_rows ? c.n_rows : 1) * sizeof *y);
  if (st == SC_OK && (!x || !y)) st = sc_fail(err, SC_OOM, "%s: out of memory", path);
  for (int w = 2; st == SC_OK && w <= 64; w *= 2) {
    int n = 0;
    for (int i = 0; i < c.n_rows; i++) {
      double ms = cell(&c, i, col[0]);
      if ((int)cell(&c, i, col[1]) != w || !(ms > 0)) continue;
      if (rank >= 0 && cell(&c, i, rank) != 0) continue; // rank 0's timing
      x[n] = cell(&c, i, col[2]);
      y[n++] = ms / 1e3;
    }
    if (!n) continue;
    sim_curve cv;
    to_curve(x, y, n, false, &cv);
    // a larger message never takes less: the small sizes' noise (a few us either way) would
    // otherwise price some all-reduces below smaller ones
    for (int k = 1; k < cv.n; k++) cv.y[k] = fmax(cv.y[k], cv.y[k - 1]);
    int i = 0;
    while (i < hw->n_coll && hw->coll[i].ranks != w) i++;
    if (i == hw->n_coll) {
      if (hw->n_coll == HW_TABLES_COLL_MAX) break;
      hw->n_coll++;
    }
    hw->coll[i] = (sim_coll_table){.ranks = w, .allreduce = cv};
    r->allreduce_tables++;
  }
  free(x);
  free(y);
  csv_free(&c);
  return st;
}

void kimport_write_tables(FILE *o, const sim_hw *hw) {
  if (hw->n_gemm > 0) fprintf(o, "gemm:\n");
  for (int i = 0; i < hw->n_gemm; i++) {
    const sim_gemm_table *g = &hw->gemm[i];
    fprintf(o, "  - {n: %d, k: %d, threads: %d,\n     t: [", g->n, g->k, g->threads);
    for (int k = 0; k < g->t.n; k++)
      fprintf(o, "%s[%.6g, %.6g]", k ? (k % 6 ? ", " : ",\n        ") : "", g->t.x[k], g->t.y[k]);
    fprintf(o, "]}\n");
  }
  if (hw->n_coll > 0) fprintf(o, "allreduce:\n");
  for (int i = 0; i < hw->n_coll; i++) {
    const sim_coll_table *c = &hw->coll[i];
    fprintf(o, "  - {ranks: %d,\n     t: [", c->ranks);
    for (int k = 0; k < c->allreduce.n; k++)
      fprintf(o, "%s[%.6g, %.6g]", k ? (k % 6 ? ", " : ",\n        ") : "", c->allreduce.x[k],
              c->allreduce.y[k]);
    fprintf(o, "]}\n");
  }
}
