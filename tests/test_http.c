// External targets end to end (serving/replica_http.c, serving/launch.c, target.openai): the
// `shardcheck run` binary against tests/openai_standin.py, a stand-in server that streams
// vLLM-shaped events at known times. Closed and open loop through launched replicas (rows,
// client-side timing, logs, teardown of the whole process group), multi-token chunks, the chat
// API, the failures (a launch that exits, a server never ready, a refused connection, malformed
// events, a mid-stream error), no survivor after SIGKILL of the runner, and the scenario keys'
// errors.
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "serving/launch.h"
#include "tests/helpers.h"

static char out[1 << 16];

#define q1 sc_test_q1
#define q1s sc_test_q1s

// A scenario against the stand-in: `target` lines go under target.openai (indented 4), then
// the rest as given.
static const char *scenario(const char *dir, const char *name, const char *target,
                            const char *rest) {
  static char path[8][600];
  static int slot;
  char *p = path[slot++ % 8];
  snprintf(p, 600, "%s/%s", dir, name);
  char text[8192];
  snprintf(text, sizeof text, "name: %s\ntarget:\n  openai:\n    model: standin\n%s%s", name,
           target, rest);
  cr_assert_eq(sc_test_write_file(p, text, strlen(text)), 0);
  return p;
}

// "    launch: python3 SRC/tests/openai_standin.py --port {port} ARGS\n" plus the url and
// the rest of a launched target.
static const char *launched(const char *args) {
  static char t[2][2048];
  static int slot;
  char *p = t[slot++ % 2];
  snprintf(p, 2048,
           "    url: \"http://127.0.0.1:{port}/v1\"\n"
           "    launch: \"python3 %s/tests/openai_standin.py --port {port} %s\"\n"
           "    vocab_size: 1000\n"
           "    ready: {timeout: 20s}\n"
           "    stop_grace: 2s\n",
           SC_SOURCE_DIR, args);
  return p;
}


// The process group the stand-in wrote to path ("PID PGID"); 0 when the file is not there.
static int pgid_in(const char *path) {
  char *t = sc_test_read_file(path, NULL);
  if (!t) return 0;
  int pid = 0, pgid = 0;
  sscanf(t, "%d %d", &pid, &pgid);
  free(t);
  return pgid;
}

// --- runs that work

Test(http, launched_replicas_closed_and_open_loop_rows_timing_logs_and_teardown) {
  const char *dir = sc_test_tmpdir("http-ok");
  char args[512];
  snprintf(args, sizeof args, "--ttft-ms 40 --token-ms 5 --child --pid-file %s/pid{replica}",
           dir);
  const char *sc = scenario(dir, "ok.yaml", launched(args),
                            "deployments: [{dp: 2}]\n"
                            "workload:\n  prompts: [{input: 16, output: 8}]\n"
                            "  phases: [{fixed: {requests: 8, concurrency: 2}}, "
                            "{rate: 40, arrival: constant, requests: 8}]\n"
                            "slo: {error_rate: 0}\n");
  char db[600];
  snprintf(db, sizeof db, "%s/r.db", dir);
  int rc = sc_test_run_scenario(out, sizeof out, sc, db, "--out %s/rep --no-report", dir);
  cr_assert_eq(rc, 0, "%s", out);
  cr_expect_eq(q1(db, "SELECT count(*) FROM request WHERE status = 'ok'"), 16);
  cr_expect_eq(q1(db, "SELECT count(*) FROM request WHERE output_tokens = 8"), 16);
  cr_expect_eq(q1(db, "SELECT count(DISTINCT replica) FROM request"), 2, "both replicas served");
  cr_expect_eq(q1(db, "SELECT count(*) FROM token"), 16 * 8);
  // the stand-in waits 40 ms before the first chunk, then 5 ms between the 8 chunks: TTFT and
  // E2EL (which ends at the last content chunk) can only be longer
  cr_expect_eq(q1(db, "SELECT count(*) FROM request WHERE first_token_ns - arrival_ns < 40e6"),
               0);
  cr_expect_eq(q1(db, "SELECT count(*) FROM request WHERE finish_ns - arrival_ns < 75e6"), 0);
  // ... and the finish is the last token's own stamp, not a later [DONE] or pull
  cr_expect_eq(q1(db, "SELECT count(*) FROM request r WHERE finish_ns <> (SELECT max(t_ns) FROM "
                      "token t WHERE t.request_id = r.id)"), 0);
  cr_expect_str_eq(q1s(db, "SELECT backend FROM run"), "openai");
  char path[700];
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "%s/rep/dp2-replica%d.log", dir, i);
    char *log = sc_test_read_file(path, NULL);
    cr_assert_not_null(log, "no log %s", path);
    cr_expect(strstr(log, "POST /v1/completions"), "%s", log);
    free(log);
    snprintf(path, sizeof path, "%s/pid%d", dir, i);
    int g = pgid_in(path);
    cr_assert_gt(g, 0);
    cr_expect(!launch_group_alive(g), "replica %d's process group %d outlived the run", i, g);
  }
}

Test(http, multi_token_chunks_count_every_token_and_chat_reads_the_prompt_from_usage) {
  const char *dir = sc_test_tmpdir("http-multi");
  const char *sc = scenario(dir, "ids.yaml", launched("--token-ids --ttft-ms 5 --token-ms 2"),
                            "deployments: [{tp: 1}]\n"
                            "workload:\n  prompts: [{input: 16, output: 7}]\n"
                            "  phases: [{fixed: {requests: 4, concurrency: 2}}]\n");
  char db[600];
  snprintf(db, sizeof db, "%s/r.db", dir);
  cr_assert_eq(sc_test_run_scenario(out, sizeof out, sc, db, "--no-report --quiet"), 0, "%s", out);
  cr_expect_eq(q1(db, "SELECT count(*) FROM request WHERE output_tokens = 7"), 4,
               "two token ids per chunk, all counted");
  // three tokens per chunk, no token_ids: the usage chunk says how many there were
  const char *sc2 = scenario(dir, "usage.yaml", launched("--chunk-tokens 3 --ttft-ms 5"),
                             "deployments: [{tp: 1}]\n"
                             "workload:\n  prompts: [{input: 16, output: 7}]\n"
                             "  phases: [{fixed: {requests: 4, concurrency: 2}}]\n");
  snprintf(db, sizeof db, "%s/r2.db", dir);
  cr_assert_eq(sc_test_run_scenario(out, sizeof out, sc2, db, "--no-report --quiet"), 0, "%s", out);
  cr_expect_eq(q1(db, "SELECT count(*) FROM request WHERE output_tokens = 7"), 4);
  // chat: generated words; the prompt's token count is the server's (the stand-in counts words)
  char chat[2300];
  snprintf(chat, sizeof chat, "    api: chat\n%s", launched("--ttft-ms 5"));
  const char *sc3 = scenario(dir, "chat.yaml", chat,
                             "deployments: [{tp: 1}]\n"
                             "workload:\n  prompts: [{input: 16, output: 5}]\n"
                             "  phases: [{fixed: {requests: 3, concurrency: 1}}]\n");
  snprintf(db, sizeof db, "%s/r3.db", dir);
  cr_assert_eq(sc_test_run_scenario(out, sizeof out, sc3, db, "--no-report --quiet"), 0, "%s", out);
  cr_expect_eq(q1(db, "SELECT count(*) FROM request WHERE output_tokens = 5 AND status = 'ok'"),
               3);
}

// --- failures

// Runs a stand-in launched with args that make it exit before it is ready: the run fails
// (exit 3) saying how it exited and the end of its log. The output is in out.
static void launch_fails(const char *tag, const char *args, const char *how) {
  const char *dir = sc_test_tmpdir(tag);
  const char *sc = scenario(dir, "exit.yaml", launched(args),
                            "deployments: [{tp: 1}]\n"
                            "workload:\n  prompts: [{input: 8, output: 2}]\n"
                            "  phases: [{fixed: {requests: 2, concurrency: 1}}]\n");
  char db[600];
  snprintf(db, sizeof db, "%s/r.db", dir);
  int rc = sc_test_run_scenario(out, sizeof out, sc, db, "--out %s/rep --no-report --quiet", dir);
  cr_expect_eq(rc, 3, "%s", out);
  cr_expect(strstr(out, how), "%s", out);
}

Test(http, a_launch_command_that_exits_at_once_fails_the_run_with_its_last_lines) {
  launch_fails("http-exit", "--mode exit", "exited with status 3");
  cr_expect(strstr(out, "CUDA error: no device found"), "the log's last lines: %s", out);
}

// vLLM 0.11 refuses a flag it removed with argparse's one-line usage (thousands of bytes) and
// then the error: the message keeps the end of the log, where the error is.
Test(http, a_server_refusing_its_command_line_reports_the_error_after_a_long_usage_line) {
  launch_fails("http-removed-flag", "--mode removed-flag", "exited with status 2");
  cr_expect(strstr(out, "unrecognized arguments: --disable-log-requests"),
            "the log's last line, after the usage: %s", out);
}

Test(http, a_server_never_ready_fails_after_the_timeout_naming_the_url) {
  const char *dir = sc_test_tmpdir("http-never");
  char t[2300];
  snprintf(t, sizeof t,
           "    url: \"http://127.0.0.1:{port}/v1\"\n"
           "    launch: \"python3 %s/tests/openai_standin.py --port {port} --mode never-ready\"\n"
           "    vocab_size: 1000\n"
           "    ready: {path: /health, timeout: 1500ms}\n"
           "    stop_grace: 1s\n",
           SC_SOURCE_DIR);
  const char *sc = scenario(dir, "never.yaml", t,
                            "deployments: [{tp: 1}]\n"
                            "workload:\n  prompts: [{input: 8, output: 2}]\n"
                            "  phases: [{fixed: {requests: 2, concurrency: 1}}]\n");
  char db[600];
  snprintf(db, sizeof db, "%s/r.db", dir);
  int rc = sc_test_run_scenario(out, sizeof out, sc, db, "--out %s/rep --no-report --quiet", dir);
  cr_expect_eq(rc, 3, "%s", out);
  cr_expect(strstr(out, "not ready after 2 s") || strstr(out, "not ready after 1 s"), "%s", out);
  cr_expect(strstr(out, "http://127.0.0.1:"), "names the URL: %s", out);
  cr_expect(strstr(out, "/health"), "%s", out);
}

Test(http, a_refused_connection_fails_every_request_with_reason_connect) {
  const char *dir = sc_test_tmpdir("http-refused");
  int port = 0;
  sc_error e = {{0}};
  cr_assert_eq(launch_free_port(&port, &e), SC_OK, "%s", e.msg); // nothing listens there now
  char t[512];
  snprintf(t, sizeof t, "    url: \"http://127.0.0.1:%d/v1\"\n    vocab_size: 1000\n", port);
  const char *sc = scenario(dir, "refused.yaml", t,
                            "workload:\n  prompts: [{input: 8, output: 2}]\n"
                            "  phases: [{fixed: {requests: 5, concurrency: 2}}]\n"
                            "slo: {error_rate: 0}\n");
  char db[600];
  snprintf(db, sizeof db, "%s/r.db", dir);
  int rc = sc_test_run_scenario(out, sizeof out, sc, db, "--no-report");
  cr_expect_eq(rc, 1, "the error_rate SLO fails: %s", out);
  cr_expect(strstr(out, "error_rate") && strstr(out, "FAIL"), "%s", out);
  cr_expect_eq(q1(db, "SELECT count(*) FROM request WHERE status = 'failed' AND reason = "
                      "'connect'"), 5);
  cr_expect(strstr(q1s(db, "SELECT label FROM deployment"), "127.0.0.1"),
            "the label says what is behind it");
}

Test(http, malformed_events_fail_with_protocol_and_a_mid_stream_error_with_server_error) {
  const char *dir = sc_test_tmpdir("http-bad");
  const char *modes[] = {"malformed", "error"};
  const char *reasons[] = {"protocol", "server_error"};
  for (int i = 0; i < 2; i++) {
    char a[64], name[64], db[600];
    snprintf(a, sizeof a, "--mode %s --ttft-ms 5", modes[i]);
    snprintf(name, sizeof name, "%s.yaml", modes[i]);
    const char *sc = scenario(dir, name, launched(a),
                              "deployments: [{tp: 1}]\n"
                              "workload:\n  prompts: [{input: 8, output: 6}]\n"
                              "  phases: [{fixed: {requests: 4, concurrency: 2}}]\n"
                              "slo: {error_rate: 0}\n");
    snprintf(db, sizeof db, "%s/%s.db", dir, modes[i]);
    int rc = sc_test_run_scenario(out, sizeof out, sc, db, "--no-report --quiet");
    cr_expect_eq(rc, 1, "%s: %s", modes[i], out);
    char q[200];
    snprintf(q, sizeof q, "SELECT count(*) FROM request WHERE status = 'failed' AND reason = '%s'",
             reasons[i]);
    cr_expect_eq(q1(db, q), 4, "%s", modes[i]);
  }
}

Test(http, no_server_survives_a_sigkill_of_the_runner) {
  const char *dir = sc_test_tmpdir("http-kill");
  char args[512];
  snprintf(args, sizeof args, "--child --pid-file %s/pid{replica} --token-ms 20", dir);
  const char *sc = scenario(dir, "kill.yaml", launched(args),
                            "deployments: [{dp: 2}]\n"
                            "workload:\n  prompts: [{input: 8, output: 50}]\n"
                            "  phases: [{fixed: {requests: 1000, concurrency: 2}}]\n");
  char db[600], rep[600], log[600], pf[2][700];
  snprintf(db, sizeof db, "%s/r.db", dir);
  snprintf(rep, sizeof rep, "%s/rep", dir);
  snprintf(log, sizeof log, "%s/run.log", dir);
  pid_t pid = sc_test_spawn_run(sc, db, rep, log);
  int g[2] = {0, 0};
  for (int i = 0; i < 2; i++) snprintf(pf[i], sizeof pf[i], "%s/pid%d", dir, i);
  for (int k = 0; k < 300 && (!g[0] || !g[1]); k++) { // both servers up (at most 30 s)
    sc_test_sleep_ms(100);
    g[0] = pgid_in(pf[0]);
    g[1] = pgid_in(pf[1]);
  }
  cr_assert(g[0] && g[1], "the stand-ins never started");
  // requests flowing: the first ones have finished and been written (the runner is mid-run:
  // its 1,000 requests take minutes)
  long long done = 0;
  sc_test_await(sc_test_q1_try(db, "SELECT count(*) FROM request", &done) && done > 0, 30,
                "no request finished against the stand-ins");
  kill(pid, SIGKILL);
  int st;
  waitpid(pid, &st, 0);
  for (int k = 0; k < 100 && (launch_group_alive(g[0]) || launch_group_alive(g[1])); k++)
    sc_test_sleep_ms(100);
  cr_expect(!launch_group_alive(g[0]) && !launch_group_alive(g[1]),
            "a launched server (or its child) outlived the runner's SIGKILL");
}

// --- scenario keys
static int validate(const char *dir, const char *name, const char *text) {
  char path[600], cmd[800];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  cr_assert_eq(sc_test_write_file(path, text, strlen(text)), 0);
  snprintf(cmd, sizeof cmd, "validate %s", path);
  return sc_test_run_cli_clean(cmd, out, sizeof out);
}

// A launched target (its command need not exist to validate).
#define LAUNCHED                                                                                   \
  "name: x\ntarget:\n  openai:\n    model: m\n    vocab_size: 100\n"                               \
  "    url: \"http://127.0.0.1:{port}/v1\"\n    launch: \"true --port {port}\"\n"                  \
  "deployments: [{tp: 2}]\n"

#define WL "workload:\n  prompts: [{input: 8, output: 2}]\n  phases: [{fixed: {requests: 2}}]\n"

Test(http, bad_target_keys_exit_2_naming_file_line_column_and_the_key) {
  const char *dir = sc_test_tmpdir("http-keys");
  struct {
    const char *name, *text, *want;
  } cases[] = {
      {"ph.yaml",
       "name: x\ntarget:\n  openai:\n    model: m\n    vocab_size: 100\n"
       "    url: \"http://127.0.0.1:{prot}/v1\"\n" WL,
       "ph.yaml:6:11: key 'url': unknown placeholder {prot}"},
      {"port.yaml",
       "name: x\ntarget:\n  openai:\n    model: m\n    vocab_size: 100\n"
       "    url: \"http://127.0.0.1:8000/v1\"\n    launch: \"true --tp {tp}\"\n"
       "deployments: [{dp: 2}]\n" WL,
       "port.yaml:8:16: deployment 'dp2' has 2 replicas: target.openai.url needs {port}"},
      {"vocab.yaml", "name: x\ntarget:\n  openai:\n    model: m\n    url: \"http://h/v1\"\n" WL,
       "vocab.yaml:4:5: missing required key 'vocab_size'"},
      {"api.yaml",
       "name: x\ntarget:\n  openai:\n    model: m\n    api: chatty\n    url: \"http://h/v1\"\n" WL,
       "api.yaml:5:10: key 'api': expected one of completions, chat"},
      {"extra.yaml",
       "name: x\ntarget:\n  openai:\n    model: m\n    vocab_size: 100\n    url: \"http://h/v1\"\n"
       "    extra_body: {ignore_eos: true, stream: false}\n" WL,
       "extra.yaml:7:36: key 'extra_body': 'stream' is shardcheck's to set"},
      {"fault.yaml",
       "name: x\ntarget:\n  openai:\n    model: m\n    vocab_size: 100\n    url: "
       "\"http://h/v1\"\n" WL "faults:\n  - {kill: replica, target: replica0, at: 1s}\n",
       "fault.yaml:11:6: fault 'kill': needs target.openai.launch"},
      {"oom.yaml", LAUNCHED WL "faults:\n  - {oom: {mode: transient}, target: replica0, at: 1s}\n",
       "oom.yaml:13:6: fault 'oom': an external target takes no oom fault"},
      {"slow.yaml",
       LAUNCHED WL "faults:\n  - {slow: {on: rank, factor: 3}, target: replica0.rank0, "
                   "at: 1s}\n",
       "slow.yaml:13:6: fault 'slow': an external target takes no slow fault"},
      {"corrupt.yaml",
       LAUNCHED WL "faults:\n  - {corrupt: {kind: nan}, target: replica0, at: 1s}\n",
       "corrupt.yaml:13:6: fault 'corrupt': an external target takes no corrupt fault"},
      {"gpu.yaml", LAUNCHED WL "faults:\n  - {kill: gpu, target: replica0.rank0, at: 1s}\n",
       "gpu.yaml:13:6: fault 'kill': kill: gpu needs target.openai.rank_process"},
      {"hangrank.yaml", LAUNCHED WL "faults:\n  - {hang: rank, target: replica0.rank0, at: 1s}\n",
       "hangrank.yaml:13:6: fault 'hang': hang: rank is not available on an external target"},
      {"execph.yaml", LAUNCHED WL "faults:\n  - {exec: {command: \"kill {gpu}\"}, at: 1s}\n",
       "execph.yaml:13:23: key 'command': unknown placeholder {gpu}"},
      {"swap.yaml", LAUNCHED WL "faults:\n  - {hot_swap: {model: other}, at: 1s}\n",
       "swap.yaml:13:24: key 'model': the launch command has no {model}"},
      {"nomodel.yaml", "mode: sim\n" LAUNCHED WL,
       "nomodel.yaml:3:1: mode sim on a target scenario simulates its model"},
      {"execpid.yaml",
       "name: x\ntarget:\n  openai:\n    model: m\n    vocab_size: 100\n    url: "
       "\"http://h/v1\"\n" WL "faults:\n  - {exec: {command: \"kill {pid}\"}, at: 1s}\n",
       "execpid.yaml:11:6: fault 'exec': {pid} needs target.openai.launch"},
      {"model.yaml",
       "name: x\nmodel: {preset: no-such-model}\ntarget:\n  openai:\n    model: m\n"
       "    vocab_size: 100\n    url: \"http://h/v1\"\n" WL,
       "no-such-model"},
      {"unknown.yaml",
       "name: x\ntarget:\n  openai:\n    model: m\n    vocab_size: 100\n    url: \"http://h/v1\"\n"
       "    tokenizer: x\n" WL,
       "unknown.yaml:7:5: unknown key 'tokenizer'"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    int rc = validate(dir, cases[i].name, cases[i].text);
    cr_expect_eq(rc, 2, "%s: %s", cases[i].name, out);
    cr_expect(strstr(out, cases[i].want), "%s: want '%s' in: %s", cases[i].name, cases[i].want,
              out);
  }
}

Test(http, a_launch_command_not_on_path_is_a_warning_naming_it) {
  const char *dir = sc_test_tmpdir("http-path");
  int rc = validate(dir, "vllm.yaml",
                    "name: x\ntarget:\n  openai:\n    model: m\n    vocab_size: 100\n"
                    "    url: \"http://127.0.0.1:{port}/v1\"\n"
                    "    launch: \"no-such-server-xyz serve m -tp {tp} --port {port}\"\n"
                    "    env: {CUDA_VISIBLE_DEVICES: \"{gpus}\"}\n"
                    "    rank_process: \"VllmWorker\"\n"
                    "hardware: {devices: [0, 1, 2, 3]}\n"
                    "deployments: [{tp: 1, dp: 4}, {tp: 2, dp: 2}, {tp: 4}]\n" WL);
  cr_expect_eq(rc, 0, "%s", out);
  cr_expect(strstr(out, "warning: ") && strstr(out, "vllm.yaml:7:14: key 'launch': "
                                                    "'no-such-server-xyz' is not an executable"),
            "%s", out);
  cr_expect(strstr(out, "3 deployments (dp4, tp2-dp2, tp4)"), "%s", out);
}

// --- honest verdicts against servers (docs/metrics.md, "The vacuity matrix")

// The verdict of `slo` in the run of db, of its last deployment: "PASS|actual|note" ("NULL" for
// no value or note).
static const char *verdict_of(const char *db, const char *slo) {
  static char v[4][400];
  static int slot;
  char *p = v[slot++ % 4];
  char sql[300];
  snprintf(sql, sizeof sql,
           "SELECT CASE pass WHEN 1 THEN 'PASS' ELSE 'FAIL' END || '|' || coalesce(actual, "
           "'NULL') || '|' || coalesce(note, 'NULL') FROM verdict WHERE slo = '%s' "
           "ORDER BY id DESC LIMIT 1",
           slo);
  snprintf(p, 400, "%s", q1s(db, sql));
  return p;
}

// llama.cpp's server streams text without token ids: layouts are compared on the text, and a
// replica serving other weights (here dp2's replica1) is caught.
Test(http, a_replica_serving_other_weights_is_caught_on_text_without_token_ids) {
  const char *dir = sc_test_tmpdir("http-text-layout");
  const char *sc = scenario(dir, "text.yaml", launched("--weights {replica} --ttft-ms 5"),
                            "deployments: [{tp: 1}, {dp: 2}]\n"
                            "workload:\n  prompts: [{input: 8, output: 6}]\n"
                            "  phases: [{fixed: {requests: 6, concurrency: 2}}]\n"
                            "slo: {layout_mismatches: 0}\n");
  char db[600];
  snprintf(db, sizeof db, "%s/r.db", dir);
  int rc = sc_test_run_scenario(out, sizeof out, sc, db, "--no-report");
  cr_expect_eq(rc, 1, "%s", out);
  const char *v = verdict_of(db, "layout_mismatches");
  cr_expect(!strncmp(v, "FAIL|", 5) && strstr(v, "compared on the streamed text"), "%s", v);
  cr_expect_gt(atof(v + 5), 0, "replica1's answers differ: %s", v);
  cr_expect(strstr(out, "compared on the streamed text"), "%s", out);
}

// The queue, batch, KV and busy figures of a server come from its /metrics (llama.cpp's names
// here, two slots for four users): measured, so an SLO they break fails with the value.
Test(http, a_server_s_batch_queue_kv_and_busy_figures_come_from_its_metrics) {
  const char *dir = sc_test_tmpdir("http-server-figures");
  const char *sc = scenario(dir, "fig.yaml",
                            launched("--slots 2 --kv-metric --ctx 256 --ttft-ms 30 --token-ms 20"),
                            "deployments: [{tp: 1}]\n"
                            "workload:\n  prompts: [{input: 8, output: 20}]\n"
                            "  phases: [{ramp: {concurrency: [4]}, hold: 2s}]\n"
                            "slo: {kv_peak_frac: 0.001}\n");
  char db[600];
  snprintf(db, sizeof db, "%s/r.db", dir);
  int rc = sc_test_run_scenario(out, sizeof out, sc, db, "--no-report");
  cr_expect_eq(rc, 1, "%s", out);
  cr_expect_eq(sc_test_metric(db, "peak_batch"), 2, "two slots run");
  cr_expect_geq(sc_test_metric(db, "peak_queue"), 1, "the other users wait");
  cr_expect_gt(sc_test_metric(db, "kv_peak_frac"), 0.001);
  cr_expect_gt(sc_test_metric(db, "busy_frac"), 0.5);
  cr_expect(isnan(sc_test_metric(db, "limit_violations")), "a server reports no engine steps");
  cr_expect_str_eq(q1s(db, "SELECT note FROM metric WHERE name = 'limit_violations' AND "
                           "phase_id IS NULL"),
                   "the server reports no engine steps (only its /metrics)");
  const char *v = verdict_of(db, "kv_peak_frac");
  cr_expect(!strncmp(v, "FAIL|", 5) && strcmp(v + 5, "NULL|NULL") && atof(v + 5) > 0.001, "%s",
            v);
}

// A server without /metrics, or with one shardcheck cannot read, leaves its figures absent
// with the reason: an SLO on them fails "no data", and the run goes on.
Test(http, a_missing_or_malformed_metrics_page_gives_absent_figures_and_no_data_verdicts) {
  const char *dir = sc_test_tmpdir("http-bad-metrics");
  static const struct {
    const char *args, *want;
  } cases[] = {{"--metrics none", "answered HTTP 404"},
               {"--metrics malformed", "under any name shardcheck reads"}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char name[32], db[600];
    snprintf(name, sizeof name, "bad%zu.yaml", i);
    const char *sc = scenario(dir, name, launched(cases[i].args),
                              "deployments: [{tp: 1}]\n"
                              "workload:\n  prompts: [{input: 8, output: 4}]\n"
                              "  phases: [{ramp: {concurrency: [2]}, hold: 1500ms}]\n"
                              "slo: {kv_peak_frac: 1, error_rate: 0}\n");
    snprintf(db, sizeof db, "%s/r%zu.db", dir, i);
    int rc = sc_test_run_scenario(out, sizeof out, sc, db, "--no-report");
    cr_expect_eq(rc, 1, "%s: %s", cases[i].args, out);
    const char *v = verdict_of(db, "kv_peak_frac");
    cr_expect(!strncmp(v, "FAIL|NULL|no data: ", 19) && strstr(v, cases[i].want), "%s: %s",
              cases[i].args, v);
    cr_expect(!strncmp(verdict_of(db, "error_rate"), "PASS|0", 6), "the run went on");
    cr_expect(strstr(out, "FAIL    no data: replica0: "), "the table says why: %s", out);
  }
}

// A server whose responses carry no usage.prompt_tokens_details.cached_tokens: the phase's
// prefix_cache_hit_rate comes from its /metrics (vLLM's counters' growth over the phase, or
// SGLang's hit-rate gauge), its note naming them; counters that are malformed or missing leave
// it absent with the reason, never 0. Each request shares a 64-token prefix: after the first,
// the stand-in's cache finds 64 of its 80 prompt tokens (its own 16 by chance at most).
Test(http, a_server_s_prefix_cache_counters_give_the_hit_rate_when_usage_has_none) {
  const char *dir = sc_test_tmpdir("http-cache-counters");
  static const struct {
    const char *args, *note; // note: in the metric's note (either case)
    bool measured;
    double lo, hi; // where a measured value must be
  } cases[] = {
      // the counters from just before the phase to its end: all 30 requests, (29 x 64 + the
      // suffixes' chance matches) / (30 x 80) = 0.773 and a little
      {"--metrics vllm-cache", "vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total",
       true, 0.773, 0.79},
      // the server's gauge (its hits so far over its queries so far) at each scrape: below
      {"--metrics sglang-cache", "sglang:cache_hit_rate, the mean of", true, 0.4, 0.79},
      {"--metrics vllm-cache-bad", "not a finite number", false, 0, 0},
      {"--metrics vllm", "gave no prefix-cache counters", false, 0, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char name[32], db[600], args[256];
    snprintf(name, sizeof name, "pc%zu.yaml", i);
    snprintf(args, sizeof args, "%s --ttft-ms 30 --token-ms 10", cases[i].args);
    const char *sc = scenario(dir, name, launched(args),
                              "deployments: [{tp: 1}]\n"
                              "workload:\n  prompts: [{input: 16, output: 4}]\n"
                              "  prefixes: {count: 1, length: 64}\n"
                              "  phases: [{rate: 10, arrival: constant, duration: 3s}]\n"
                              "slo: {prefix_cache_hit_rate: 0.5, error_rate: 0}\n");
    snprintf(db, sizeof db, "%s/r%zu.db", dir, i);
    int rc = sc_test_run_scenario(out, sizeof out, sc, db, "--no-report");
    cr_expect_eq(rc, cases[i].measured ? 0 : 1, "%s: %s", cases[i].args, out);
    cr_expect_eq(q1(db, "SELECT count(*) FROM request WHERE cached_tokens IS NOT NULL"), 0,
                 "%s: the stand-in sends no cached_tokens", cases[i].args);
    double v = atof(q1s(db, "SELECT coalesce(m.value, -1) FROM metric m JOIN phase p ON "
                            "p.id = m.phase_id WHERE m.name = 'prefix_cache_hit_rate'"));
    const char *note = q1s(db, "SELECT coalesce(m.note, '') FROM metric m JOIN phase p ON "
                               "p.id = m.phase_id WHERE m.name = 'prefix_cache_hit_rate'");
    cr_expect(strstr(note, cases[i].note), "%s: %s", cases[i].args, note);
    if (cases[i].measured) {
      cr_expect(v > cases[i].lo && v < cases[i].hi, "%s: %g", cases[i].args, v);
      cr_expect(!strncmp(verdict_of(db, "prefix_cache_hit_rate"), "PASS|0.", 7), "%s: %s",
                cases[i].args, verdict_of(db, "prefix_cache_hit_rate"));
    } else {
      cr_expect_eq(v, -1, "%s: absent, not %g", cases[i].args, v);
      const char *vd = verdict_of(db, "prefix_cache_hit_rate");
      cr_expect(!strncmp(vd, "FAIL|NULL|no data: ", 19) && strstr(vd, cases[i].note), "%s: %s",
                cases[i].args, vd);
    }
  }
}

// llama.cpp's slots keep their prompts' KV once a request ends: a healthy, drained server's
// usage is its prompt cache, not a leak. The leak check clears it through the server's own
// endpoint first (POST /slots/ID?action=erase, which needs --slot-save-path); what is left is
// a leak. Without the endpoint the leak is not measured, and says why.
Test(http, a_prompt_cache_is_not_a_kv_leak_and_a_real_leak_still_fails) {
  const char *dir = sc_test_tmpdir("http-kv-leak");
  static const struct {
    const char *args, *want;
  } cases[] = {{"--kv-metric --slot-save-path /tmp", "PASS|0.0|NULL"},
               {"--kv-metric --slot-save-path /tmp --leak-cells 64", "FAIL|"},
               {"--kv-metric", "FAIL|NULL|no data: "}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char name[32], db[600], args[200];
    snprintf(name, sizeof name, "leak%zu.yaml", i);
    snprintf(args, sizeof args, "%s --ctx 2048 --slots 4", cases[i].args);
    const char *sc = scenario(dir, name, launched(args),
                              "deployments: [{tp: 1}]\n"
                              "workload:\n  prompts: [{input: 32, output: 8}]\n"
                              "  phases: [{ramp: {concurrency: [2]}, hold: 1500ms}]\n"
                              "faults: [{at: 500ms, cancel_storm: {count: 1}}]\n"
                              "slo: {kv_leak_frac: 0}\n");
    snprintf(db, sizeof db, "%s/r%zu.db", dir, i);
    int rc = sc_test_run_scenario(out, sizeof out, sc, db, "--no-report");
    cr_expect_eq(rc, i == 0 ? 0 : 1, "%s: %s", cases[i].args, out);
    const char *v = verdict_of(db, "kv_leak_frac");
    cr_expect(!strncmp(v, cases[i].want, strlen(cases[i].want)), "%s: %s", cases[i].args, v);
    if (i == 2)
      cr_expect(strstr(v, "--slot-save-path"), "says how to let it clear the cache: %s", v);
  }
}
