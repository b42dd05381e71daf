// `shardcheck serve` driven by clients nobody here wrote, from npm (pinned in
// tests/clients/package.json, installed by ci/setup.sh): the official `openai` package
// (tests/clients/openai_client.mjs) and the Vercel AI SDK's OpenAI-compatible provider
// (tests/clients/ai_sdk_client.mjs) against a server started in this process on an ephemeral
// port, completions and chat, whole and streamed; and the `openai` client through 20 drains of
// the binary (tests/clients/drain_client.mjs). Without node or a package a test says
// "skipped: ..." rather than pass.
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server/deploy.h"
#include "server/server.h"
#include "tests/helpers.h"

// Whether cmd (a shell command line) exits 0, its output dropped.
static bool runs(const char *cmd) {
  char line[1200];
  snprintf(line, sizeof line, "%s >/dev/null 2>&1", cmd);
  int st = system(line);
  return st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

TestSuite(serve_client, .timeout = 180);

// Skips the test unless node and the npm package `pkg` (its package.json under node_modules)
// are there.
static void need_node_package(const char *pkg) {
  char path[1200];
  snprintf(path, sizeof path, "%s/tests/clients/node_modules/%s/package.json", SC_SOURCE_DIR, pkg);
  if (!runs("node --version"))
    cr_skip_test("skipped: node is not installed (the npm client tests need it)");
  if (access(path, R_OK) != 0)
    cr_skip_test("skipped: the npm package %s is not in tests/clients/node_modules "
                 "(bash ci/setup.sh installs it)",
                 pkg);
}

// Runs `node tests/clients/SCRIPT ARGS` against a sim-mode server (llama3-70b tp4 on h100-sxm,
// API key "client-key") in this process; fails unless it exits 0 and prints `want`.
static void run_client(const char *script, const char *args, const char *want) {
  // sim mode: a long stream to abort takes no CPU, and steps take milliseconds of wall time
  serve_deploy d = {
      .model = "llama3-70b", .sim = true, .profile = "h100-sxm", .tp = 4, .pp = 1, .dp = 1};
  server_config c = server_config_defaults();
  void *keep = NULL;
  sc_error err = {{0}};
  cr_assert_eq(serve_deploy_config(&d, &c, &keep, &err), SC_OK, "%s", err.msg);
  c.port = 0;
  c.served_name = "llama3-70b";
  c.api_key = "client-key";
  server *s = NULL;
  cr_assert_eq(server_new(&c, &s, &err), SC_OK, "%s", err.msg);
  cr_assert_eq(server_wait_ready(s, &err), SC_OK, "%s", err.msg);
  char cmd[2600];
  snprintf(cmd, sizeof cmd, "node '%s/tests/clients/%s' http://127.0.0.1:%d %s 2>&1", SC_SOURCE_DIR,
           script, server_port(s), args);
  FILE *p = popen(cmd, "r");
  cr_assert(p);
  static char out[65536];
  size_t n = 0, k;
  while (n < sizeof out - 1 && (k = fread(out + n, 1, sizeof out - 1 - n, p)) > 0) n += k;
  out[n] = 0;
  int st = pclose(p);
  server_free(s);
  serve_deploy_free(keep);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s failed (status %d):\n%s", script, st, out);
  cr_assert(strstr(out, want), "%s", out);
}

Test(serve_client, the_official_openai_npm_client_completes_chats_streams_and_aborts) {
  need_node_package("openai");
  run_client("openai_client.mjs", "client-key", "all checks passed");
}

// The Vercel AI SDK's completion model always sends stop: ["\nuser:"] (before: 400, "stop
// strings are not supported"); its chat model, whole and streamed, with usage.
Test(serve_client, the_vercel_ai_sdk_completes_and_chats_whole_and_streamed) {
  need_node_package("ai");
  need_node_package("@ai-sdk/openai-compatible");
  run_client("ai_sdk_client.mjs", "client-key llama3-70b", "all checks passed");
}

// SIGTERM with --drain-timeout 0.2 under the `openai` client's stream, 20 times: each time the
// client gets the drain's error event from a stream that ended whole (before, in 2 of 5 runs it
// raised "TypeError: terminated" and never saw it).
Test(serve_client, the_openai_client_sees_every_drain_cut_off_end_whole, .timeout = 300) {
  need_node_package("openai");
  const char *dir = sc_test_tmpdir("serve-client-drain");
  const char *const args[] = {"--mode",          "sim",        "--profile", "h100-sxm",
                              "--model",         "llama3-70b", "-tp",       "4",
                              "--drain-timeout", "0.2",        NULL};
  for (int run = 0; run < 20; run++) {
    char log[1200], node_log[1200];
    snprintf(log, sizeof log, "%s/serve-%d.log", dir, run); // a run never reads the last one's
    snprintf(node_log, sizeof node_log, "%s/node-%d.log", dir, run);
    int port = 0;
    pid_t pid = sc_test_spawn_serve(log, args, &port);
    char cmd[2600];
    snprintf(cmd, sizeof cmd,
             "node '%s/tests/clients/drain_client.mjs' http://127.0.0.1:%d "
             "llama3-70b >'%s' 2>&1",
             SC_SOURCE_DIR, port, node_log);
    pid_t client = fork();
    cr_assert_neq(client, -1);
    if (client == 0) {
      execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
      _exit(127);
    }
    // SIGTERM once the client streams
    bool streaming = false;
    uint64_t dl = sc_test_deadline(30);
    while (!streaming && sc_test_before(dl)) {
      sc_test_sleep_ms(10);
      char *t = sc_test_read_file(node_log, NULL);
      streaming = t && strstr(t, "streaming");
      free(t);
    }
    cr_assert(streaming, "run %d: the client never streamed", run);
    kill(pid, SIGTERM);
    int st = 0;
    waitpid(client, &st, 0);
    char *t = sc_test_read_file(node_log, NULL);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "run %d: the client: %s", run, t ? t : "");
    free(t);
    waitpid(pid, &st, 0);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "run %d: serve exited %d", run, st);
  }
}
