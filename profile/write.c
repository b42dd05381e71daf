// Writing a measured profile: the header comment (the machine, when, how each figure and
// table was taken, the step-overhead detail per layout and batch) and the YAML that
// hw_profile_load (config/hardware.c) reads back: the figures, then the gemm, attention,
// allreduce and step_overhead tables.
//
// Left to others: every number it writes (the measuring files of profile/), the format's
// documentation (docs/profile.md), reading it back (config/hardware.c).
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "profile/profile_impl.h"

// "[[x, y], [x, y], ...]" + suffix + newline, with `per_line` pairs per line, continuation
// lines indented by `indent` + 1 spaces. x are whole numbers (rows, tokens, bytes).
static void write_pairs(FILE *f, const sim_curve *c, int indent, const char *suffix) {
  const int per_line = 6;
  fputc('[', f);
  for (int i = 0; i < c->n; i++) {
    if (i > 0) {
      fputc(',', f);
      if (i % per_line == 0) fprintf(f, "\n%*s", indent + 1, "");
      else fputc(' ', f);
    }
    fprintf(f, "[%.0f, %.4g]", c->x[i], c->y[i]);
  }
  fprintf(f, "]%s\n", suffix);
}

// A YAML double-quoted string: quotes and backslashes escaped, control characters dropped.
static void write_quoted(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', f);
    if ((unsigned char)*s >= 0x20) fputc(*s, f);
  }
  fputc('"', f);
}

// "# date: ...", and how busy the machine was meanwhile when known.
static void write_when(const profile *p, FILE *f) {
  const profile_options *o = &p->o;
  const model_config *m = &o->model;
  const profile_summary *s = &p->sum;
  fprintf(f, "# date: %s; measuring took %.1f s\n", p->date, s->elapsed_s);
  if (s->other_load >= 0)
    fprintf(f, "# meanwhile: other processes used %.1f%% of the CPUs, the hypervisor took "
               "%.1f%% (steal)\n", s->other_load * 100, s->steal * 100);
  fprintf(f, "# model: %s (dim %d, %d layers, %d heads / %d KV heads x %d, ffn %d, vocab %d)\n"
             "# TP degrees:", m->name, m->dim, m->n_layers, m->n_heads, m->n_kv_heads,
          m->head_dim, m->ffn_dim, m->vocab_size);
  for (int i = 0; i < o->n_tp; i++) fprintf(f, "%s%d", i ? ", " : " ", o->tp[i]);
}

static void write_rounds(const profile *p, FILE *f) {
  fprintf(f, "# Table times are the median of %d rounds; a round repeats the op for at least "
             "%g ms.\n", p->o.reps, p->o.min_round_s * 1e3);
}

// The header's machine line and host figures of a cpu profile.
static void write_host_cpu(const profile *p, FILE *f) {
  const profile_options *o = &p->o;
  const profile_summary *s = &p->sum;
  int th[2];
  prof_thread_counts(s->host_cores, o->tp[0], th);
  fprintf(f, "# machine: %s%s; %d cores usable by the process (%d online); %.1f GiB RAM",
          p->cpu_model, p->virtual_machine ? " (virtual machine)" : "", s->host_cores,
          p->cpus_online, s->mem_bytes / (1u << 30));
  if (p->llc_bytes) fprintf(f, "; last-level cache %ld MiB", p->llc_bytes >> 20);
  fputc('\n', f);
  write_when(p, f);
  fprintf(f, "\n# backend cpu: the \"devices\" are shares of this host, ranks are threads.\n");
  write_rounds(p, f);
  fprintf(f,
          "# host figures:\n"
          "#   mem_bytes: total RAM. mem_bw: streaming read of %zu MiB with %d threads (1 thread:\n"
          "#     %.1f GB/s; mem_eff is their ratio: a rank's elementwise ops run on one thread).\n"
          "#   flops_fp32: the best %d^3 GEMM on %d threads; flops_bf16 and flops_fp16 are the\n"
          "#     same (the CPU backend converts weights to f32 and multiplies in f32);\n"
          "#     flops_int8 0 (no int8 GEMM).\n"
          "#   gemm_eff: achieved fraction of flops_fp32 vs rows m of the tp%d gate|up GEMM on\n"
          "#     %d threads (prices GEMM shapes that have no table below).\n"
          "#   launch_s: one call of the smallest device op (an add of 16 floats).\n"
          "#   host_cores: cores the process may run on; ranks x threads beyond them slow every\n"
          "#     op in proportion.\n"
          "#   link memory: ranks exchange activations through shared memory. link_bw and\n"
          "#     link_latency_s fit t = 2(n-1) latency + 2(n-1)/n bytes / bw to the allreduce\n"
          "#     tables below (%s).\n"
          "#   gpus_per_node 8: up to 8 ranks as threads.\n",
          o->bw_bytes >> 20, s->host_cores, s->mem_bw_1t / 1e9, o->square_n, s->host_cores,
          o->tp[0], th[0], p->coll_fit);
}

// The header's machine line and host figures of a cuda profile.
static void write_host_cuda(const profile *p, FILE *f) {
  const profile_options *o = &p->o;
  const profile_summary *s = &p->sum;
  fprintf(f, "# machine: CUDA GPU 0 with %.1f GiB; host %s%s, %d CPUs online\n",
          s->mem_bytes / (1u << 30), p->cpu_model,
          p->virtual_machine ? " (virtual machine)" : "", p->cpus_online);
  write_when(p, f);
  fprintf(f,
          "\n# backend cuda: every rank on GPU 0, each with a stream of its own (as a scenario's\n"
          "#   `hardware: {backend: cuda, devices: [0]}` places them); GEMM weights held as %s.\n",
          sc_dtype_name(p->wdt));
  write_rounds(p, f);
  fprintf(f,
          "#   Ops are asynchronous: a round launches its calls back to back on one stream and\n"
          "#   waits for the device once at the end (as a step runs them), divided by the count.\n"
          "# host figures:\n"
          "#   mem_bytes: the GPU's memory. mem_bw: the best device-to-device copy of %zu MiB,\n"
          "#     bytes read plus bytes written (the cost model counts both); mem_eff 1.\n"
          "#   flops_fp32: the best %d^3 GEMM in f32 (cuBLAS, no TF32); flops_bf16 and\n"
          "#     flops_fp16: the same GEMM with bf16 weights and activations (fp32 sums);\n"
          "#     flops_int8 0 (not measured).\n"
          "#   gemm_eff: achieved fraction of flops_%s vs rows m of the tp%d gate|up GEMM\n"
          "#     (prices GEMM shapes that have no table below).\n"
          "#   launch_s: per call of the smallest device op (an add of 16 floats), launched back\n"
          "#     to back.\n"
          "#   host_cores 0: a GPU (no CPU share factor; tables are looked up without threads,\n"
          "#     so each shape has one entry, written with threads: 1).\n"
          "#   link memory: ranks on one GPU exchange activations through its memory (the\n"
          "#     loopback communicator). link_bw and link_latency_s fit\n"
          "#     t = 2(n-1) latency + 2(n-1)/n bytes / bw to the allreduce tables below (%s).\n"
          "#   gpus_per_node 8: up to 8 ranks on the GPU.\n",
          o->bw_bytes >> 20, o->square_n, p->wdt == SC_BF16 ? "bf16" : "fp32", o->tp[0],
          p->coll_fit);
}

// The step-overhead figures and their detail per layout and batch.
static void write_overhead(const profile *p, FILE *f) {
  const profile_options *o = &p->o;
  const profile_summary *s = &p->sum;
  fprintf(f,
          "#   step_overhead_s: per engine step, beyond the ops the cost model prices: the\n"
          "#     median over %d decode steps of %s at tp%d (random weights, %d rounds) of\n"
          "#     the whole engine_step wall time (scheduling, executor, sampling) minus the cost\n"
          "#     model's price of that step from this profile (executor-only: %.3f ms). The\n"
          "#     step_overhead tables at the end hold that residual per layout and batch (the\n"
          "#     median per batch; the batch sizes take turns each round): each TP degree alone,\n"
          "#     and tp x replicas side by side (data parallelism); a replica of a layout with a\n"
          "#     table is priced with it instead. Medians in ms\n"
          "#     (engine_step / executor = engine_step_info.duration_ns, no sampling / priced,\n"
          "#     and the residual):\n",
          s->overhead_steps, o->model.name, s->overhead_tp, o->overhead_rounds,
          s->step_overhead_exec_s * 1e3);
  for (int t = 0; t < p->hw.sim.n_overhead; t++) {
    const sim_overhead_table *ot = &p->hw.sim.overhead[t];
    char who[32];
    snprintf(who, sizeof who, ot->replicas > 1 ? "tp%d x %d" : "tp%d", ot->tp, ot->replicas);
    for (int i = 0; i < p->n_batches; i++)
      fprintf(f, "#       %s batch %3d: %.3f / %.3f / %.3f, residual %.3f\n", who, p->batch[i],
              p->wall_s[t][i] * 1e3, p->exec_s[t][i] * 1e3, p->price_s[t][i] * 1e3,
              p->res_s[t][i] * 1e3);
    for (int k = 0; k < p->n_probe[t]; k++)
      fprintf(f, "#       %s prompt of %3.0f beside decodes (%d steps, means): %.3f / - / %.3f, "
              "prefill residual %.3f (median, beyond the decode residual)\n", who,
              ot->prefill.x[k], p->probe_steps[t][k], p->probe_wall_s[t][k] * 1e3,
              p->probe_price_s[t][k] * 1e3, ot->prefill.y[k] * 1e3);
  }
  fprintf(f, "#     prefill: a table's residual of a step that also computes a prompt, beyond its\n"
             "#     decode residual: a prompt of 16, 64 and 256 tokens submitted while the batch\n"
             "#     decodes (each size once per round and batch size; the first round's only\n"
             "#     warm up when there are two or more), its step's wall time minus its price\n"
             "#     minus the table's s at the batch size.\n");
}

static void write_tables_cpu(FILE *f) {
  fprintf(f,
          "# gemm: seconds vs rows m of y(m x n) = x(m x k) . w(n x k)^T through a device at\n"
          "#   `threads` threads, for every GEMM one rank of each TP degree runs (q|k|v and\n"
          "#   gate|up as the cost model prices them: one GEMM of the combined width; the\n"
          "#   executor runs them as separate GEMMs). Weights rotate through %zu MiB (twice\n"
          "#   the last-level cache, at least 64), so they come from memory as in the engine.\n"
          "#   Below all cores, cores / threads - 1 companion ranks (at most 7) run the same\n"
          "#   GEMM on other weights meanwhile, as a rank's peers do in a run.\n"
          "# attention: one layer on one rank: decode = seconds per sequence for one token at\n"
          "#   context length x (timed over as many sequences as fill %zu MiB of KV, at most\n"
          "#   %d), prefill = seconds for x tokens from position 0 (causal), on a device at\n"
          "#   `threads` threads (a large attention is split over them).\n"
          "# allreduce: seconds vs bytes per rank of an in-place sum over the shm communicator,\n"
          "#   ranks as threads.\n",
          prof_rotate_bytes() >> 20, prof_rotate_bytes() >> 20, PROF_ATTN_SEQS);
}

static void write_tables_cuda(const profile *p, FILE *f) {
  fprintf(f,
          "# gemm: seconds vs rows m of y(m x n) = x(m x k) . w(n x k)^T (%s weights), for\n"
          "#   every GEMM one rank of each TP degree runs (q|k|v and gate|up as the cost model\n"
          "#   prices them: one GEMM of the combined width; the executor runs them as separate\n"
          "#   GEMMs). Weights rotate through %zu MiB (over 4 times the L2 of an H100), so they\n"
          "#   come from HBM as in a step. One rank alone on the GPU: what ranks sharing it\n"
          "#   cost each other is in the step_overhead tables of their layouts.\n"
          "# attention: one layer on one rank: decode = seconds per sequence for one token at\n"
          "#   context length x (timed over as many sequences as fill %zu MiB of KV, at most\n"
          "#   %d), prefill = seconds for x tokens from position 0 (causal).\n"
          "# allreduce: seconds vs bytes per rank of an in-place sum over the cuda communicator\n"
          "#   with every rank on GPU 0 (loopback: copies and a reduction kernel meeting at host\n"
          "#   barriers), ranks as threads, each with its own stream.\n",
          sc_dtype_name(p->wdt), PROF_CUDA_POOL >> 20, PROF_CUDA_POOL >> 20, PROF_ATTN_SEQS);
}

static void write_header(const profile *p, FILE *f) {
  const profile_options *o = &p->o;
  fprintf(f, "# %s: a hardware profile measured by `shardcheck profile` (docs/profile.md).\n",
          p->hw.name);
  if (o->command) fprintf(f, "# command: %s\n", o->command);
  if (p->cuda) write_host_cuda(p, f);
  else write_host_cpu(p, f);
  write_overhead(p, f);
  if (p->cuda) write_tables_cuda(p, f);
  else write_tables_cpu(f);
}

sc_status profile_write(const profile *p, FILE *f, sc_error *err) {
  const hw_profile *h = &p->hw;
  const sim_hw *s = &h->sim;
  write_header(p, f);
  fprintf(f, "name: ");
  write_quoted(f, h->name);
  fprintf(f, "\ndescription: ");
  write_quoted(f, h->description);
  fprintf(f, "\nmem_bytes: %.0f    # %.1f GiB\n", h->mem_bytes, h->mem_bytes / (1u << 30));
  fprintf(f, "mem_bw: %.4g\n", h->mem_bw);
  fprintf(f, "mem_eff: %.3f\n", s->mem_eff);
  fprintf(f, "flops_bf16: %.4g\nflops_fp16: %.4g\nflops_fp32: %.4g\nflops_int8: 0\n",
          h->flops_bf16, h->flops_fp16, h->flops_fp32);
  fprintf(f, "link: %s\nlink_bw: %.4g\nlink_latency_s: %.4g\ngpus_per_node: %d\n", h->link,
          h->link_bw, h->link_latency_s, h->gpus_per_node);
  fprintf(f, "host_cores: %d\nlaunch_s: %.4g\nstep_overhead_s: %.4g\n", s->host_cores,
          s->launch_s, s->step_overhead_s);
  if (s->gemm_eff.n > 0) {
    fprintf(f, "gemm_eff: ");
    write_pairs(f, &s->gemm_eff, 10, "");
  }
  fprintf(f, "gemm:\n");
  for (int i = 0; i < s->n_gemm; i++) {
    const sim_gemm_table *g = &s->gemm[i];
    fprintf(f, "  # %s\n  - {n: %d, k: %d, threads: %d,\n     t: ", p->gemm_role[i], g->n, g->k,
            g->threads);
    write_pairs(f, &g->t, 7, "}");
  }
  fprintf(f, "attention:\n");
  for (int i = 0; i < s->n_attn; i++) {
    const sim_attn_table *a = &s->attn[i];
    fprintf(f, "  # %s\n  - heads: %d\n    kv_heads: %d\n    head_dim: %d\n    threads: %d\n",
            p->attn_role[i], a->heads, a->kv_heads, a->head_dim, a->threads);
    fprintf(f, "    decode: ");
    write_pairs(f, &a->decode, 12, "");
    fprintf(f, "    prefill: ");
    write_pairs(f, &a->prefill, 13, "");
  }
  fprintf(f, "allreduce:\n");
  for (int i = 0; i < s->n_coll; i++) {
    const sim_coll_table *c = &s->coll[i];
    fprintf(f, "  - ranks: %d\n    t: ", c->ranks);
    write_pairs(f, &c->allreduce, 7, "");
  }
  fprintf(f, "step_overhead:\n");
  for (int i = 0; i < s->n_overhead; i++) {
    fprintf(f, "  - tp: %d\n", s->overhead[i].tp);
    if (s->overhead[i].replicas > 1) fprintf(f, "    replicas: %d\n", s->overhead[i].replicas);
    fprintf(f, "    s: ");
    write_pairs(f, &s->overhead[i].s, 7, "");
    if (s->overhead[i].prefill.n > 0) {
      fprintf(f, "    prefill: ");
      write_pairs(f, &s->overhead[i].prefill, 13, "");
    }
  }
  if (fflush(f) != 0 || ferror(f))
    return sc_fail(err, SC_IO, "profile: writing the profile failed: %s", strerror(errno));
  return SC_OK;
}

sc_status profile_write_path(const profile *p, const char *path, sc_error *err) {
  FILE *f = fopen(path, "w");
  if (!f) return sc_fail(err, SC_IO, "cannot write '%s': %s", path, strerror(errno));
  sc_status s = profile_write(p, f, err);
  if (fclose(f) != 0 && s == SC_OK)
    s = sc_fail(err, SC_IO, "cannot write '%s': %s", path, strerror(errno));
  return s;
}
