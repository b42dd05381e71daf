// `shardcheck serve`: the engine behind an OpenAI-compatible HTTP API. Parses the flags (vLLM's
// names where vLLM has the knob), builds the deployment (server/deploy.h), starts the server
// (server/server.h), prints one startup line, and drains on SIGTERM or SIGINT.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli/cli.h"
#include "server/deploy.h"
#include "server/server.h"

static void usage(FILE *f) {
  fprintf(
      f, "usage: shardcheck serve --model DIR|PRESET [--dtype DTYPE] [--kv-cache-dtype T]\n"
         "                        [-tp|--tensor-parallel-size N] [-pp|--pipeline-parallel-size N]\n"
         "                        [-dp|--data-parallel-size N] [--backend cpu|cuda]\n"
         "                        [--mode real|sim] [--profile NAME|FILE.yaml]\n"
         "                        [--isolation thread|process] [--host ADDR] [--port N]\n"
         "                        [--served-model-name NAME] [--api-key KEY]\n"
         "                        [--admin-token TOKEN] [--max-retries N]\n"
         "                        [--max-num-seqs N] [--max-num-batched-tokens N]\n"
         "                        [--block-size N] [--gpu-memory-utilization F]\n"
         "                        [--max-model-len N] [--drain-timeout SECONDS]\n"
         "                        [--max-pending N] [--max-connections N]\n"
         "                        [--max-body-bytes N] [--idle-timeout SECONDS]\n"
         "                        [--request-timeout SECONDS]\n"
         "                        [--threads N] [--weights-seed S]\n"
         "                        [--enable-prefix-caching] [--scheduler-reserve-full-isl]\n"
         "                        [--num-gpu-blocks-override N] [--sim-output-len SPEC]\n\n"
         "Serves the model over an OpenAI-compatible HTTP API (/v1/completions,\n"
         "/v1/chat/completions, /v1/models, /health, /metrics): dp replicas of tp x pp ranks\n"
         "behind the router, on the CPU or CUDA backend (mode real) or on simulated GPUs whose\n"
         "steps take the wall time the cost model prices (mode sim). docs/serve.md has every\n"
         "endpoint, field and metric.\n\n"
         "  --model DIR|PRESET         a Hugging Face directory or a preset (llama-tiny, ...)\n"
         "  --dtype DTYPE              weight dtype: f32, f16, bf16, int8 (int4, fp8: sim only)\n"
         "  --kv-cache-dtype auto|fp8  the KV cache's dtype (fp8: sim only; default auto)\n"
         "  -tp, --tensor-parallel-size N    ranks per TP group (default 1)\n"
         "  -pp, --pipeline-parallel-size N  pipeline stages (default 1)\n"
         "  -dp, --data-parallel-size N      replicas behind the router (default 1)\n"
         "  --backend cpu|cuda         real mode's device backend (default cpu)\n"
         "  --mode real|sim            sim: no weights, no math; the scheduler and KV cache are\n"
         "                             real, each step takes its priced time (default real)\n"
         "  --profile NAME|FILE.yaml   the hardware profile (required in mode sim)\n"
         "  --isolation thread|process real mode: replicas as threads of this process\n"
         "                             (default) or `shardcheck worker` processes\n"
         "  --host ADDR                address to bind (default 127.0.0.1)\n"
         "  --port N                   port (default 8000; 0: any free port)\n"
         "  --served-model-name NAME   the model name of the API (default: --model)\n"
         "  --api-key KEY              require \"Authorization: Bearer KEY\" on /v1/*\n"
         "  --admin-token TOKEN        serve /admin/faults and /admin/state, which require\n"
         "                             \"Authorization: Bearer TOKEN\" (without it: 404)\n"
         "  --max-retries N            resubmissions of a request whose replica was lost\n"
         "                             (default 3; 0: it ends with an error at once)\n"
         "  --max-num-seqs N           running sequences per replica (default 256)\n"
         "  --max-num-batched-tokens N tokens per engine step (default 8192)\n"
         "  --block-size N             KV-cache block in tokens (default 16)\n"
         "  --gpu-memory-utilization F fraction of device memory the planner may use for\n"
         "                             weights and KV cache (default 0.9)\n"
         "  --max-model-len N          the context the API admits (default: the model's)\n"
         "  --drain-timeout SECONDS    on SIGTERM/SIGINT, how long requests in flight may go\n"
         "                             on before they are cut off (default 30)\n"
         "  --max-pending N            requests without a first token yet, past which new\n"
         "                             ones get 503 (default 4096)\n"
         "  --max-connections N        requests in progress past which new ones get 503\n"
         "                             (default: --max-pending + dp x --max-num-seqs + 64)\n"
         "  --max-body-bytes N         larger request bodies get 413 (default 1048576)\n"
         "  --idle-timeout SECONDS     a connection idle this long is closed (default 30)\n"
         "  --request-timeout SECONDS  a request's headers and body must arrive within this\n"
         "                             long of the connection opening (or its previous\n"
         "                             request ending); else it is closed (default 10)\n"
         "  --threads N                real cpu: BLAS threads per rank (default: cores/ranks)\n"
         "  --weights-seed S           seed of a preset's random weights (default 0)\n"
         "  --enable-prefix-caching    keep full KV blocks by content and reuse them for\n"
         "                             prompts that begin alike (default off)\n"
         "  --scheduler-reserve-full-isl  admit a request only when the free KV blocks hold\n"
         "                             all of its prompt, not just its first chunk (default off)\n"
         "  --num-gpu-blocks-override N KV blocks per replica instead of the planner's\n"
         "  --sim-output-len SPEC      mode sim: where a simulated answer's EOS falls: a length\n"
         "                             (200), a workload output distribution ('{uniform: [50,\n"
         "                             400]}', '{lognormal: {median: 200, sigma: 0.9}}'),\n"
         "                             dataset:FILE.jsonl (its output_tokens) or none (never);\n"
         "                             default " SERVE_SIM_OUTPUT_LEN "\n\n"
         "Startup prints one line with the URL, the layout and the KV capacity; /health\n"
         "answers 200 once every replica is ready. SIGTERM or SIGINT drains: new requests get\n"
         "503, requests in flight finish (up to --drain-timeout), then the server exits 0.\n"
         "exit codes: 0 ok (drained), 2 bad flags or a deployment that does not fit, 3 runtime\n"
         "failure.\n");
}

static int sig_pipe[2] = {-1, -1};

static void on_signal(int sig) {
  (void)sig;
  int saved = errno;
  char b = 1;
  ssize_t w = write(sig_pipe[1], &b, 1);
  (void)w;
  errno = saved;
}

// The value of flag a at argv[*i]: "--flag=value" or "--flag value"; NULL when a is not
// `name` (or `alias`) or has no value.
static const char *flag_val(int argc, char **argv, int *i, const char *name, const char *alias,
                            bool *matched) {
  const char *a = argv[*i];
  const char *names[2] = {name, alias};
  for (int k = 0; k < 2; k++) {
    if (!names[k]) continue;
    size_t n = strlen(names[k]);
    if (strncmp(a, names[k], n)) continue;
    if (a[n] == '=') {
      *matched = true;
      return a + n + 1;
    }
    if (a[n] == 0) {
      *matched = true;
      if (*i + 1 < argc) return argv[++*i];
      return NULL;
    }
  }
  return NULL;
}

// As vLLM's server does at startup (set_ulimit): the soft limit on open files up to the hard
// one, so that --max-connections and the connections still sending a request fit.
static void raise_open_files(void) {
  struct rlimit r;
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

int cmd_serve(int argc, char **argv) {
  serve_deploy d = {.tp = 1, .pp = 1, .dp = 1};
  server_config c = server_config_defaults();
  const char *name = NULL, *mode = "real", *isolation = "thread";
  double drain_s = 30;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    bool m = false;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return CLI_OK;
    }
    if (!strcmp(a, "--enable-prefix-caching") || !strcmp(a, "--no-enable-prefix-caching")) {
      d.prefix_caching = a[2] == 'e';
      continue;
    }
    if (!strcmp(a, "--scheduler-reserve-full-isl") ||
        !strcmp(a, "--no-scheduler-reserve-full-isl")) {
      d.reserve_full_isl = a[2] == 's';
      continue;
    }
#define FLAG(n, alias) ((v = flag_val(argc, argv, &i, n, alias, &m)) != NULL || m)
#define NEED()                                                                                     \
  do {                                                                                             \
    if (!v) return cli_usage_error("serve", "option needs a value", a);                            \
  } while (0)
#define INT_FLAG(n, alias, lo, hi, dst)                                                            \
  if (FLAG(n, alias)) {                                                                            \
    NEED();                                                                                        \
    if (!cli_parse_int(v, lo, hi, dst))                                                            \
      return cli_usage_error("serve", n " needs an integer in " #lo ".." #hi ", got", v);          \
    continue;                                                                                      \
  }
    INT_FLAG("--tensor-parallel-size", "-tp", 1, 1024, &d.tp);
    INT_FLAG("--pipeline-parallel-size", "-pp", 1, 1024, &d.pp);
    INT_FLAG("--data-parallel-size", "-dp", 1, 64, &d.dp);
    INT_FLAG("--port", NULL, 0, 65535, &c.port);
    INT_FLAG("--max-num-seqs", NULL, 1, 1 << 20, &d.max_num_seqs);
    INT_FLAG("--max-num-batched-tokens", NULL, 1, 1 << 24, &d.max_num_batched_tokens);
    INT_FLAG("--block-size", NULL, 1, 4096, &d.block_size);
    INT_FLAG("--num-gpu-blocks-override", NULL, 1, 100000000, &d.num_gpu_blocks);
    INT_FLAG("--max-model-len", NULL, 2, 1 << 24, &d.max_model_len);
    INT_FLAG("--max-pending", NULL, 1, 1 << 24, &c.max_pending);
    INT_FLAG("--max-connections", NULL, 1, 1 << 20, &c.max_connections);
    INT_FLAG("--threads", NULL, 1, 1024, &d.threads);
    INT_FLAG("--max-retries", NULL, 0, 100, &c.max_retries);
    if (FLAG("--model", NULL)) {
      NEED();
      d.model = v;
    } else if (FLAG("--dtype", NULL)) {
      NEED();
      d.dtype = v;
    } else if (FLAG("--sim-output-len", NULL)) {
      NEED();
      d.sim_output_len = v;
    } else if (FLAG("--kv-cache-dtype", NULL)) {
      NEED();
      d.kv_cache_dtype = v;
    } else if (FLAG("--backend", NULL)) {
      NEED();
      if (strcmp(v, "cpu") && strcmp(v, "cuda"))
        return cli_usage_error("serve", "--backend needs cpu or cuda, got", v);
      d.backend = v;
    } else if (FLAG("--mode", NULL)) {
      NEED();
      if (strcmp(v, "real") && strcmp(v, "sim"))
        return cli_usage_error("serve", "--mode needs real or sim, got", v);
      mode = v;
    } else if (FLAG("--profile", NULL)) {
      NEED();
      d.profile = v;
    } else if (FLAG("--isolation", NULL)) {
      NEED();
      if (strcmp(v, "thread") && strcmp(v, "process"))
        return cli_usage_error("serve", "--isolation needs thread or process, got", v);
      isolation = v;
    } else if (FLAG("--host", NULL)) {
      NEED();
      c.host = v;
    } else if (FLAG("--served-model-name", NULL)) {
      NEED();
      name = v;
    } else if (FLAG("--api-key", NULL)) {
      NEED();
      c.api_key = v;
    } else if (FLAG("--admin-token", NULL)) {
      NEED();
      c.admin_token = v;
    } else if (FLAG("--gpu-memory-utilization", NULL)) {
      NEED();
      if (!cli_parse_double(v, 0.1, 1.0, &d.gpu_memory_utilization))
        return cli_usage_error("serve",
                               "--gpu-memory-utilization needs a fraction in [0.1, 1], got", v);
    } else if (FLAG("--drain-timeout", NULL)) {
      NEED();
      if (!cli_parse_double(v, 0, 86400, &drain_s))
        return cli_usage_error("serve", "--drain-timeout needs seconds in [0, 86400], got", v);
    } else if (FLAG("--idle-timeout", NULL)) {
      NEED();
      int t;
      if (!cli_parse_int(v, 1, 86400, &t))
        return cli_usage_error("serve", "--idle-timeout needs whole seconds in [1, 86400], got", v);
      c.idle_timeout_s = (unsigned)t;
    } else if (FLAG("--request-timeout", NULL)) {
      NEED();
      int t;
      if (!cli_parse_int(v, 1, 86400, &t))
        return cli_usage_error("serve", "--request-timeout needs whole seconds in [1, 86400], got",
                               v);
      c.request_timeout_s = (unsigned)t;
    } else if (FLAG("--max-body-bytes", NULL)) {
      NEED();
      uint64_t b;
      if (!cli_parse_u64(v, &b) || b < 1024 || b > (1ull << 30))
        return cli_usage_error("serve", "--max-body-bytes needs bytes in [1024, 2^30], got", v);
      c.max_body_bytes = (size_t)b;
    } else if (FLAG("--weights-seed", NULL)) {
      NEED();
      if (!cli_parse_u64(v, &d.weights_seed))
        return cli_usage_error("serve", "--weights-seed needs an unsigned integer, got", v);
    } else {
      return cli_usage_error("serve", a[0] == '-' ? "unknown option" : "unexpected argument", a);
    }
#undef INT_FLAG
#undef NEED
#undef FLAG
  }
  if (!d.model) return cli_usage_error("serve", "missing --model", NULL);
  d.sim = !strcmp(mode, "sim");
  d.process = !strcmp(isolation, "process");
  if (d.sim && d.backend) return cli_usage_error("serve", "--backend is a real-mode flag", NULL);
  sc_error err = {{0}};
  void *keep = NULL;
  sc_status st = serve_deploy_config(&d, &c, &keep, &err);
  if (st != SC_OK) return cli_fail("serve", st, &err);
  c.served_name = name ? name : d.model;
  if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    serve_deploy_free(keep);
    return cli_fail("serve", SC_IO, &(sc_error){"cannot make the signal pipe"});
  }
  struct sigaction sa = {.sa_handler = on_signal}, old_int, old_term;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  signal(SIGPIPE, SIG_IGN);
  raise_open_files();
  server *srv = NULL;
  st = server_new(&c, &srv, &err);
  if (st == SC_OK) st = server_wait_ready(srv, &err);
  int code = CLI_OK;
  if (st != SC_OK) {
    code = cli_fail("serve", st, &err);
  } else {
    int blocks = server_kv_blocks(srv), bs = c.engine.block_size;
    printf("shardcheck serve: %s on http://%s%s%s:%d (%s: tp=%d pp=%d dp=%d, %s%s%s), KV cache "
           "%d blocks x %d tokens = %d tokens per replica, context %d\n",
           c.served_name, strchr(c.host, ':') ? "[" : "", c.host, strchr(c.host, ':') ? "]" : "",
           server_port(srv), c.layout, d.tp, d.pp, d.dp, d.sim ? "simulated " : "",
           d.sim ? d.profile : c.engine.backend, d.process ? ", worker processes" : "", blocks, bs,
           blocks * bs, c.max_model_len);
    fflush(stdout);
    for (;;) { // until a signal
      struct pollfd p = {.fd = sig_pipe[0], .events = POLLIN};
      if (poll(&p, 1, -1) > 0) break;
    }
    fprintf(stderr, "shardcheck serve: draining (up to %g s)\n", drain_s);
    int cut = server_drain(srv, (uint64_t)(drain_s * 1e9));
    if (cut > 0)
      fprintf(stderr, "shardcheck serve: %d request%s cut off at the drain timeout\n", cut,
              cut == 1 ? "" : "s");
  }
  server_free(srv);
  serve_deploy_free(keep);
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  close(sig_pipe[0]);
  close(sig_pipe[1]);
  return code;
}
