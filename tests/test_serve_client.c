// `shardcheck serve` driven by a client nobody here wrote: the official `openai` npm package
// (pinned in tests/clients/package.json, installed by ci/setup.sh) runs
// tests/clients/openai_client.mjs against a server started in this process on an ephemeral port.
// Without node or the package the test says "skipped: ..." rather than pass.
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

TestSuite(serve_client, .timeout = 120);

Test(serve_client, the_official_openai_npm_client_completes_chats_streams_and_aborts) {
  char dir[1024], pkg[1200], script[1200];
  snprintf(dir, sizeof dir, "%s/tests/clients", SC_SOURCE_DIR);
  snprintf(pkg, sizeof pkg, "%s/node_modules/openai/package.json", dir);
  snprintf(script, sizeof script, "%s/openai_client.mjs", dir);
  if (!runs("node --version"))
    cr_skip_test("skipped: node is not installed (the openai client test needs it)");
  if (access(pkg, R_OK) != 0)
    cr_skip_test("skipped: the openai npm package is not in tests/clients/node_modules "
                 "(bash ci/setup.sh installs it)");
  // sim mode: a long stream to abort takes no CPU, and steps take milliseconds of wall time
  serve_deploy d = {.model = "llama3-70b", .sim = true, .profile = "h100-sxm", .tp = 4,
                    .pp = 1, .dp = 1};
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
  snprintf(cmd, sizeof cmd, "node '%s' http://127.0.0.1:%d client-key 2>&1", script,
           server_port(s));
  FILE *p = popen(cmd, "r");
  cr_assert(p);
  static char out[65536];
  size_t n = 0, k;
  while (n < sizeof out - 1 && (k = fread(out + n, 1, sizeof out - 1 - n, p)) > 0) n += k;
  out[n] = 0;
  int st = pclose(p);
  server_free(s);
  serve_deploy_free(keep);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the openai client failed (status %d):\n%s",
            st, out);
  cr_assert(strstr(out, "all checks passed"), "%s", out);
}
