// Launching external servers (see launch.h): templates, ports, processes, readiness, stopping.
//
// A launch forks twice. The server child puts itself in a new process group (setpgid, also done
// by the parent, so neither side races), asks for SIGKILL when this process dies
// (PR_SET_PDEATHSIG), sends its output to the log file and execs `/bin/sh -c 'exec CMD'`. The
// parent-death signal reaches only that one process; the servers we launch (vLLM, SGLang) fork
// workers of their own, so a watchdog child stays behind this process holding the read end of a
// pipe: when launch_stop is done it writes 'q' and the watchdog exits; when this process dies
// the pipe reads end-of-file and the watchdog sends SIGTERM to the group, then SIGKILL after the
// grace period. The watchdog never execs, so after fork it uses async-signal-safe calls only
// (read, kill, nanosleep, _exit) and closes every descriptor but its pipe.
//
// Readiness is an HTTP GET through libcurl's easy interface, every 100 ms. Replicas (requests,
// streams) are serving/replica_http.c's.
#include "serving/launch.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernels/clock.h"

#define NS_PER_S 1000000000ull
#define NS_PER_MS 1000000ull
#define DEFAULT_GRACE_NS (10 * NS_PER_S)
#define READY_POLL_NS (100 * NS_PER_MS)
#define READY_REQ_TIMEOUT_MS 2000L
#define TAIL_LINES 5

const char launch_placeholder_names[] = "tp, pp, dp, replica, port, gpus, shardcheck, model";
static const char *const names[] = {"tp",   "pp",   "dp",         "replica",
                                    "port", "gpus", "shardcheck", "model"};
enum { N_NAMES = 8, NAME_MAX_LEN = 31 };
// An exec fault's command (launch_exec_expand): its own, shorter list.
const char launch_exec_placeholder_names[] = "pid, port, replica";
static const char *const exec_names[] = {"pid", "port", "replica"};
enum { N_EXEC_NAMES = 3 };

// --- templates

// Walks tmpl: calls lit(ud, text, n) for literal text and var(ud, idx) for each placeholder.
// False (bad filled) on an unknown placeholder or an unpaired brace.
typedef struct walker {
  void (*lit)(void *ud, const char *s, size_t n);
  void (*var)(void *ud, int idx);
  void *ud;
} walker;

// Walks t over the placeholder names nm[0..n_nm) (the launch template's by default).
static bool walk_names(const char *t, const char *const *nm, int n_nm, const walker *w, char *bad,
                       size_t cap);

static bool walk(const char *t, const walker *w, char *bad, size_t cap) {
  return walk_names(t, names, N_NAMES, w, bad, cap);
}

static bool walk_names(const char *t, const char *const *nm, int n_nm, const walker *w, char *bad,
                       size_t cap) {
  while (*t) {
    if ((t[0] == '{' && t[1] == '{') || (t[0] == '}' && t[1] == '}')) {
      if (w) w->lit(w->ud, t, 1);
      t += 2;
      continue;
    }
    if (*t == '}') {
      if (bad) snprintf(bad, cap, "an unpaired '}'");
      return false;
    }
    if (*t != '{') {
      const char *e = t;
      while (*e && *e != '{' && *e != '}') e++;
      if (w) w->lit(w->ud, t, (size_t)(e - t));
      t = e;
      continue;
    }
    const char *close = strchr(t + 1, '}');
    if (!close) {
      if (bad) snprintf(bad, cap, "an unpaired '{'");
      return false;
    }
    size_t n = (size_t)(close - t - 1);
    int idx = -1;
    for (int i = 0; i < n_nm && n <= NAME_MAX_LEN; i++)
      if (strlen(nm[i]) == n && !memcmp(nm[i], t + 1, n)) idx = i;
    if (idx < 0) {
      if (bad) snprintf(bad, cap, "{%.*s}", (int)(n < 40 ? n : 40), t + 1);
      return false;
    }
    if (w) w->var(w->ud, idx);
    t = close + 1;
  }
  return true;
}

bool launch_template_check(const char *tmpl, char *bad, size_t cap) {
  return walk(tmpl, NULL, bad, cap);
}

typedef struct uses_ctx {
  int want;
  bool found;
} uses_ctx;
static void uses_lit(void *ud, const char *s, size_t n) { (void)ud, (void)s, (void)n; }
static void uses_var(void *ud, int idx) {
  uses_ctx *u = ud;
  if (idx == u->want) u->found = true;
}

bool launch_template_uses(const char *tmpl, const char *name) {
  uses_ctx u = {.want = -1};
  for (int i = 0; i < N_NAMES; i++)
    if (!strcmp(names[i], name)) u.want = i;
  walker w = {.lit = uses_lit, .var = uses_var, .ud = &u};
  return walk(tmpl, &w, NULL, 0) && u.found;
}

typedef struct exp_ctx {
  char *out;
  size_t cap, n;
  bool overflow;
  const launch_vars *v;
} exp_ctx;

static void exp_put(exp_ctx *e, const char *s, size_t n) {
  if (e->n + n + 1 > e->cap) {
    e->overflow = true;
    return;
  }
  memcpy(e->out + e->n, s, n);
  e->n += n;
  e->out[e->n] = 0;
}
static void exp_lit(void *ud, const char *s, size_t n) { exp_put(ud, s, n); }
static void exp_var(void *ud, int idx) {
  exp_ctx *e = ud;
  char b[32];
  const int iv[] = {e->v->tp, e->v->pp, e->v->dp, e->v->replica, e->v->port};
  if (idx >= 5) {
    const char *t = idx == 5 ? e->v->gpus : idx == 6 ? e->v->exe : e->v->model;
    exp_put(e, t ? t : "", strlen(t ? t : ""));
    return;
  }
  int n = snprintf(b, sizeof b, "%d", iv[idx]);
  exp_put(e, b, (size_t)n);
}

sc_status launch_expand(const char *tmpl, const launch_vars *v, char *out, size_t cap,
                        sc_error *err) {
  exp_ctx e = {.out = out, .cap = cap, .v = v};
  if (cap) out[0] = 0;
  walker w = {.lit = exp_lit, .var = exp_var, .ud = &e};
  char bad[64];
  if (!walk(tmpl, &w, bad, sizeof bad))
    return sc_fail(err, SC_INVALID, "template '%.200s': %s (placeholders: %s)", tmpl, bad,
                   launch_placeholder_names);
  if (e.overflow) return sc_fail(err, SC_INVALID, "template '%.200s': too long once expanded", tmpl);
  return SC_OK;
}

bool launch_exec_check(const char *tmpl, char *bad, size_t cap) {
  return walk_names(tmpl, exec_names, N_EXEC_NAMES, NULL, bad, cap);
}

typedef struct exec_ctx {
  exp_ctx e;
  const int *iv; // pid, port, replica
} exec_ctx;
static void exec_var(void *ud, int idx) {
  exec_ctx *x = ud;
  char b[32];
  int n = snprintf(b, sizeof b, "%d", x->iv[idx]);
  exp_put(&x->e, b, (size_t)n);
}

sc_status launch_exec_expand(const char *tmpl, int pid, int port, int replica, char *out,
                             size_t cap, sc_error *err) {
  const int iv[] = {pid, port, replica};
  exec_ctx x = {.e = {.out = out, .cap = cap}, .iv = iv};
  if (cap) out[0] = 0;
  walker w = {.lit = exp_lit, .var = exec_var, .ud = &x};
  char bad[64];
  if (!walk_names(tmpl, exec_names, N_EXEC_NAMES, &w, bad, sizeof bad))
    return sc_fail(err, SC_INVALID, "command '%.200s': %s (placeholders: %s)", tmpl, bad,
                   launch_exec_placeholder_names);
  if (x.e.overflow)
    return sc_fail(err, SC_INVALID, "command '%.200s': too long once expanded", tmpl);
  return SC_OK;
}

void launch_command_word(const char *cmd, char *out, size_t cap) {
  while (*cmd == ' ' || *cmd == '\t') cmd++;
  // leading NAME=value assignments belong to the shell, not the command
  for (;;) {
    const char *e = cmd;
    while (*e && *e != ' ' && *e != '\t' && *e != '=') e++;
    if (*e != '=' || e == cmd) break;
    while (*e && *e != ' ' && *e != '\t') e++;
    while (*e == ' ' || *e == '\t') e++;
    cmd = e;
  }
  size_t n = 0;
  while (cmd[n] && cmd[n] != ' ' && cmd[n] != '\t' && n + 1 < cap) n++;
  memcpy(out, cmd, n);
  out[n] = 0;
}

static bool executable(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, X_OK) == 0;
}

bool launch_on_path(const char *word) {
  if (!word[0]) return false;
  if (strchr(word, '/')) return executable(word);
  const char *path = getenv("PATH");
  if (!path) path = "/usr/bin:/bin";
  while (*path) {
    const char *e = strchr(path, ':');
    size_t n = e ? (size_t)(e - path) : strlen(path);
    char full[4096];
    snprintf(full, sizeof full, "%.*s/%s", (int)n, n ? path : ".", word);
    if (executable(full)) return true;
    path += n + (e ? 1 : 0);
  }
  return false;
}

sc_status launch_url_at(const char *url, const char *path, char *out, size_t cap, sc_error *err) {
  CURLU *u = curl_url();
  if (!u) return sc_fail(err, SC_OOM, "launch: out of memory");
  char *full = NULL;
  CURLUcode rc = curl_url_set(u, CURLUPART_URL, url, 0);
  if (rc == CURLUE_OK) rc = curl_url_set(u, CURLUPART_PATH, path, 0);
  if (rc == CURLUE_OK) rc = curl_url_set(u, CURLUPART_QUERY, NULL, 0);
  if (rc == CURLUE_OK) rc = curl_url_get(u, CURLUPART_URL, &full, 0);
  sc_status st = SC_OK;
  if (rc != CURLUE_OK)
    st = sc_fail(err, SC_INVALID, "url '%.300s': %s", url, curl_url_strerror(rc));
  else if ((size_t)snprintf(out, cap, "%s", full) >= cap)
    st = sc_fail(err, SC_INVALID, "url '%.300s': too long", url);
  curl_free(full);
  curl_url_cleanup(u);
  return st;
}

// Makes the directory holding file path, and its missing parents.
static sc_status parent_dirs(const char *path, sc_error *err) {
  char d[4096];
  if ((size_t)snprintf(d, sizeof d, "%s", path) >= sizeof d)
    return sc_fail(err, SC_IO, "launch: path too long: %.200s", path);
  char *slash = strrchr(d, '/');
  if (!slash || slash == d) return SC_OK;
  *slash = 0;
  for (char *p = d + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(d, 0777) != 0 && errno != EEXIST)
      return sc_fail(err, SC_IO, "launch: mkdir %s: %s", d, strerror(errno));
    *p = '/';
  }
  if (mkdir(d, 0777) != 0 && errno != EEXIST)
    return sc_fail(err, SC_IO, "launch: mkdir %s: %s", d, strerror(errno));
  return SC_OK;
}

sc_status launch_free_port(int *port, sc_error *err) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return sc_fail(err, SC_IO, "launch: socket: %s", strerror(errno));
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
    int e = errno;
    close(fd);
    return sc_fail(err, SC_IO, "launch: no free port on 127.0.0.1: %s", strerror(e));
  }
  *port = ntohs(a.sin_port);
  close(fd);
  return SC_OK;
}

// --- processes
struct launch_proc {
  char *command, *log_path;
  pid_t pid;      // the server (= its process group); 0 once reaped and stopped
  bool reaped;
  int status;     // its wait status once reaped
  pid_t watchdog; // 0 when none
  int wd_fd;      // write end of the watchdog's pipe (-1: none)
  uint64_t grace_ns;
  uint64_t t_start; // monotonic ns at launch
};

static void sleep_ns(uint64_t ns) {
  struct timespec ts = {.tv_sec = (time_t)(ns / NS_PER_S), .tv_nsec = (long)(ns % NS_PER_S)};
  nanosleep(&ts, NULL);
}

// The watchdog's life (async-signal-safe calls only): waits on fd; 'q' dismisses it, anything
// else (end of file: its parent died) makes it end the group.
static _Noreturn void watchdog_main(int fd, pid_t pgid, uint64_t grace_ns) {
  struct sigaction ign = {.sa_handler = SIG_IGN};
  sigaction(SIGINT, &ign, NULL); // a terminal's ^C is the runner's to handle
  sigaction(SIGHUP, &ign, NULL);
  sigaction(SIGPIPE, &ign, NULL);
  char c = 0;
  ssize_t r;
  do {
    r = read(fd, &c, 1);
  } while (r < 0 && errno == EINTR);
  if (r == 1 && c == 'q') _exit(0);
  kill(-pgid, SIGTERM);
  for (uint64_t waited = 0; waited < grace_ns; waited += 50 * NS_PER_MS) {
    if (kill(-pgid, 0) != 0 && errno == ESRCH) _exit(0);
    struct timespec ts = {0, 50 * (long)NS_PER_MS};
    nanosleep(&ts, NULL);
  }
  kill(-pgid, SIGKILL);
  _exit(0);
}

sc_status launch_start(const launch_spec *s, launch_proc **out, sc_error *err) {
  *out = NULL;
  launch_proc *p = calloc(1, sizeof *p);
  if (!p) return sc_fail(err, SC_OOM, "launch: out of memory");
  p->wd_fd = -1;
  p->grace_ns = s->stop_grace_ns ? s->stop_grace_ns : DEFAULT_GRACE_NS;
  size_t n = strlen(s->command) + 6;
  p->command = malloc(n);
  p->log_path = strdup(s->log_path);
  if (!p->command || !p->log_path) {
    launch_free(p);
    return sc_fail(err, SC_OOM, "launch: out of memory");
  }
  snprintf(p->command, n, "%s%s", s->script ? "" : "exec ", s->command);
  sc_status ds = parent_dirs(s->log_path, err);
  if (ds != SC_OK) {
    launch_free(p);
    return ds;
  }
  int log =
      open(s->log_path, O_WRONLY | O_CREAT | (s->append ? O_APPEND : O_TRUNC) | O_CLOEXEC, 0644);
  if (log < 0) {
    sc_status st = sc_fail(err, SC_IO, "launch: cannot open the log file %s: %s", s->log_path,
                           strerror(errno));
    launch_free(p);
    return st;
  }
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int wp[2];
  if (devnull < 0 || pipe2(wp, O_CLOEXEC) != 0) {
    sc_status st = sc_fail(err, SC_IO, "launch: pipe: %s", strerror(errno));
    close(log);
    if (devnull >= 0) close(devnull);
    launch_free(p);
    return st;
  }
  // Everything the child needs is ready before fork: it only calls async-signal-safe functions
  // (and execve) from there.
  int n_env = 0;
  while (s->env && s->env[n_env]) n_env++;
  extern char **environ;
  int n_base = 0;
  while (environ[n_base]) n_base++;
  char **envp = calloc((size_t)(n_base + n_env + 1), sizeof *envp);
  if (!envp) {
    close(log), close(devnull), close(wp[0]), close(wp[1]);
    launch_free(p);
    return sc_fail(err, SC_OOM, "launch: out of memory");
  }
  int k = 0;
  for (int i = 0; i < n_base; i++) {
    bool replaced = false;
    const char *eq = strchr(environ[i], '=');
    size_t nl = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
    for (int j = 0; j < n_env && !replaced; j++)
      replaced = !strncmp(s->env[j], environ[i], nl) && s->env[j][nl] == '=';
    if (!replaced) envp[k++] = environ[i];
  }
  for (int j = 0; j < n_env; j++) envp[k++] = (char *)s->env[j];
  envp[k] = NULL;
  char *argv[] = {"sh", "-c", p->command, NULL};
  pid_t parent = getpid();
  p->t_start = sc_monotonic_ns();
  pid_t pid = fork();
  if (pid < 0) {
    sc_status st = sc_fail(err, SC_IO, "launch: fork: %s", strerror(errno));
    free(envp);
    close(log), close(devnull), close(wp[0]), close(wp[1]);
    launch_free(p);
    return st;
  }
  if (pid == 0) { // the server
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigaction(SIGINT, &dfl, NULL);
    sigaction(SIGTERM, &dfl, NULL);
    sigaction(SIGPIPE, &dfl, NULL);
    dup2(devnull, 0);
    dup2(log, 1);
    dup2(log, 2);
    close_range(3, ~0U, 0);
    execve("/bin/sh", argv, envp);
    _exit(127);
  }
  setpgid(pid, pid); // also here: whichever runs first, the group exists before we use it
  p->pid = pid;
  free(envp);
  close(log);
  close(devnull);
  pid_t wd = fork();
  if (wd == 0) { // the watchdog: its pipe end only
    if (wp[0] != 3) dup2(wp[0], 3);
    close_range(0, 2, 0);
    close_range(4, ~0U, 0);
    watchdog_main(3, pid, p->grace_ns);
  }
  close(wp[0]);
  if (wd < 0) { // no watchdog: the parent-death signal still ends the server itself
    close(wp[1]);
  } else {
    p->watchdog = wd;
    p->wd_fd = wp[1];
  }
  *out = p;
  return SC_OK;
}

int launch_pid(const launch_proc *p) { return p && !p->reaped ? p->pid : 0; }

sc_status launch_signal(launch_proc *p, int sig, sc_error *err) {
  int pid = launch_pid(p);
  if (pid <= 0) return sc_fail(err, SC_ABORTED, "launch: the server is not running");
  if (kill(-pid, sig) != 0)
    return sc_fail(err, SC_IO, "launch: kill(-%d, %d): %s", pid, sig, strerror(errno));
  return SC_OK;
}

bool launch_exited(launch_proc *p, int *status) {
  if (!p->reaped && p->pid > 0) {
    int st;
    pid_t w = waitpid(p->pid, &st, WNOHANG);
    if (w == p->pid) {
      p->reaped = true;
      p->status = st;
    } else if (w < 0 && errno == ECHILD) {
      p->reaped = true;
      p->status = 0;
    }
  }
  if (p->reaped && status) *status = p->status;
  return p->reaped;
}

void launch_log_tail(const char *path, int lines, char *buf, size_t cap) {
  buf[0] = 0;
  if (cap < 8) return;
  FILE *f = fopen(path, "rb");
  if (!f) return;
  char tail[4096];
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  long from = size > (long)sizeof tail - 1 ? size - (long)sizeof tail + 1 : 0;
  fseek(f, from, SEEK_SET);
  size_t n = fread(tail, 1, sizeof tail - 1, f);
  fclose(f);
  tail[n] = 0;
  while (n > 0 && (tail[n - 1] == '\n' || tail[n - 1] == '\r')) tail[--n] = 0;
  // the start of the last `lines` lines
  size_t start = n;
  int seen = 0;
  while (start > 0) {
    if (tail[start - 1] == '\n' && ++seen == lines) break;
    start--;
  }
  // Joined with " | ", built from the end: what does not fit is the start, not the end (a
  // server's last line, "error: unrecognized arguments: ...", follows its long usage line).
  char joined[sizeof tail * 3 + 4];
  size_t len = 0;
  for (size_t i = start; i < n; i++) {
    if (tail[i] == '\r') continue;
    if (tail[i] == '\n') {
      memcpy(joined + len, " | ", 3);
      len += 3;
      continue;
    }
    joined[len++] = tail[i];
  }
  const char *cut = "... ";
  if (len < cap) {
    memcpy(buf, joined, len);
    buf[len] = 0;
    return;
  }
  size_t keep = cap - 1 - strlen(cut);
  snprintf(buf, cap, "%s%.*s", cut, (int)keep, joined + len - keep);
}

static void status_text(int st, char *buf, size_t cap) {
  if (WIFEXITED(st)) snprintf(buf, cap, "exited with status %d", WEXITSTATUS(st));
  else if (WIFSIGNALED(st)) snprintf(buf, cap, "was killed by signal %d", WTERMSIG(st));
  else snprintf(buf, cap, "ended");
}

static size_t discard(char *ptr, size_t size, size_t n, void *ud) {
  (void)ptr, (void)ud;
  return size * n;
}

sc_status launch_wait_ready(launch_proc *p, const char *url, uint64_t timeout_ns,
                            volatile sig_atomic_t *interrupted, sc_error *err) {
  CURL *c = curl_easy_init();
  if (!c) return sc_fail(err, SC_OOM, "launch: curl_easy_init failed");
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, READY_REQ_TIMEOUT_MS);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
  uint64_t deadline = p->t_start + timeout_ns;
  char tail[200], why[64]; // short enough for the caller's message to keep its end
  sc_status st = SC_OK;
  long code = 0;
  for (;;) {
    int ws;
    if (launch_exited(p, &ws)) {
      status_text(ws, why, sizeof why);
      launch_log_tail(p->log_path, TAIL_LINES, tail, sizeof tail);
      st = sc_fail(err, SC_IO, "the launch command %s before it was ready; last lines of %s: %s",
                   why, p->log_path, tail[0] ? tail : "(empty)");
      break;
    }
    if (interrupted && *interrupted) {
      st = sc_fail(err, SC_ABORTED, "interrupted while waiting for %s", url);
      break;
    }
    code = 0;
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    if (code == 200) break;
    uint64_t now = sc_monotonic_ns();
    if (now >= deadline) {
      launch_log_tail(p->log_path, TAIL_LINES, tail, sizeof tail);
      st = sc_fail(err, SC_TIMEOUT, "server not ready after %.0f s: %s answered %s; last lines "
                   "of %s: %s", (double)timeout_ns / 1e9, url,
                   code ? "with an HTTP status other than 200" : "nothing", p->log_path,
                   tail[0] ? tail : "(empty)");
      break;
    }
    uint64_t left = deadline - now;
    sleep_ns(left < READY_POLL_NS ? left : READY_POLL_NS);
  }
  curl_easy_cleanup(c);
  return st;
}

bool launch_group_alive(pid_t pgid) {
  if (kill(-pgid, 0) != 0) return errno != ESRCH;
  DIR *d = opendir("/proc");
  if (!d) return true;
  bool alive = false;
  struct dirent *e;
  while (!alive && (e = readdir(d))) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    char path[300], buf[512];
    snprintf(path, sizeof path, "/proc/%.255s/stat", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *rp = strrchr(buf, ')'); // comm may hold spaces and parentheses
    char state = 0;
    int ppid = 0, pgrp = 0;
    if (rp && sscanf(rp + 1, " %c %d %d", &state, &ppid, &pgrp) == 3 && pgrp == pgid &&
        state != 'Z' && state != 'X')
      alive = true;
  }
  closedir(d);
  return alive;
}

// --- a launched server's processes, by command line (kill: gpu)
typedef struct proc_ent {
  int pid, ppid;
} proc_ent;

static int cmp_ent(const void *a, const void *b) {
  return ((const proc_ent *)a)->pid - ((const proc_ent *)b)->pid;
}

// Every live process's pid and parent, sorted by pid (*n of them; NULL when /proc is unreadable
// or memory ran out).
static proc_ent *proc_table(int *n) {
  *n = 0;
  DIR *d = opendir("/proc");
  if (!d) return NULL;
  int cap = 256;
  proc_ent *v = malloc((size_t)cap * sizeof *v);
  struct dirent *e;
  while (v && (e = readdir(d))) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    char path[300], buf[512];
    snprintf(path, sizeof path, "/proc/%.255s/stat", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    size_t k = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[k] = 0;
    const char *rp = strrchr(buf, ')');
    char state = 0;
    int ppid = 0;
    if (!rp || sscanf(rp + 1, " %c %d", &state, &ppid) != 2 || state == 'Z' || state == 'X')
      continue;
    if (*n == cap) {
      cap *= 2;
      proc_ent *w = realloc(v, (size_t)cap * sizeof *v);
      if (!w) {
        free(v);
        v = NULL;
        break;
      }
      v = w;
    }
    v[(*n)++] = (proc_ent){.pid = atoi(e->d_name), .ppid = ppid};
  }
  closedir(d);
  if (v) qsort(v, (size_t)*n, sizeof *v, cmp_ent);
  return v;
}

static int parent_of(const proc_ent *v, int n, int pid) {
  proc_ent key = {.pid = pid};
  const proc_ent *e = bsearch(&key, v, (size_t)n, sizeof *v, cmp_ent);
  return e ? e->ppid : 0;
}

// The command line of pid with its arguments joined by spaces, into out ("" when unreadable).
static void cmdline_of(int pid, char *out, size_t cap) {
  out[0] = 0;
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
  FILE *f = fopen(path, "rb");
  if (!f) return;
  size_t k = fread(out, 1, cap - 1, f);
  fclose(f);
  while (k > 0 && out[k - 1] == 0) k--;
  for (size_t i = 0; i < k; i++)
    if (out[i] == 0) out[i] = ' ';
  out[k] = 0;
}

int launch_find_descendant(const launch_proc *p, const char *regex, int nth, char *cmd, size_t cap,
                           sc_error *err) {
  int root = launch_pid(p);
  if (root <= 0) {
    sc_fail(err, SC_ABORTED, "launch: the server is not running");
    return 0;
  }
  regex_t re;
  if (regcomp(&re, regex, REG_EXTENDED | REG_NOSUB) != 0) {
    sc_fail(err, SC_INVALID, "launch: bad regular expression '%.100s'", regex);
    return 0;
  }
  int n = 0, found = 0, pid = 0;
  proc_ent *v = proc_table(&n);
  char line[1024];
  for (int i = 0; v && i < n && !pid; i++) {
    int a = v[i].ppid, depth = 0;
    while (a > 1 && a != root && depth++ < 64) a = parent_of(v, n, a);
    if (a != root) continue; // not a descendant (the server itself is not one)
    cmdline_of(v[i].pid, line, sizeof line);
    if (regexec(&re, line, 0, NULL, 0) != 0) continue;
    if (found++ == nth) {
      pid = v[i].pid;
      if (cmd) snprintf(cmd, cap, "%s", line);
    }
  }
  free(v);
  regfree(&re);
  if (!pid)
    sc_fail(err, SC_INVALID,
            "no process under the server (pid %d) matches rank_process '%.100s'"
            " %s (%d match%s)",
            root, regex, found ? "that often" : "", found, found == 1 ? "es" : "");
  return pid;
}

void launch_stop(launch_proc *p) {
  if (!p) return;
  if (p->pid > 0 && launch_exited(p, NULL) && !launch_group_alive(p->pid)) p->pid = 0; // gone already
  if (p->pid > 0) {
    pid_t g = p->pid;
    kill(-g, SIGTERM);
    uint64_t deadline = sc_monotonic_ns() + p->grace_ns;
    for (;;) {
      launch_exited(p, NULL);
      if (p->reaped && !launch_group_alive(g)) break;
      if (sc_monotonic_ns() >= deadline) {
        kill(-g, SIGKILL);
        if (!p->reaped) {
          int st;
          while (waitpid(g, &st, 0) < 0 && errno == EINTR) {
          }
          p->reaped = true;
          p->status = st;
        }
        // the rest of the group is not ours to reap; give SIGKILL a moment to land
        for (int i = 0; i < 100 && launch_group_alive(g); i++) sleep_ns(10 * NS_PER_MS);
        break;
      }
      sleep_ns(10 * NS_PER_MS);
    }
    p->pid = 0;
  }
  if (p->wd_fd >= 0) {
    ssize_t w = write(p->wd_fd, "q", 1);
    (void)w; // a watchdog already gone has nothing left to do
    close(p->wd_fd);
    p->wd_fd = -1;
  }
  if (p->watchdog > 0) {
    while (waitpid(p->watchdog, NULL, 0) < 0 && errno == EINTR) {
    }
    p->watchdog = 0;
  }
}

void launch_free(launch_proc *p) {
  if (!p) return;
  launch_stop(p);
  free(p->command);
  free(p->log_path);
  free(p);
}
