// Launching an external server (a replica of an OpenAI-compatible target, docs/targets.md):
// command templates and their placeholders, free ports, the process itself (its own process
// group, its output in a log file, a watchdog so it never outlives this process), readiness
// over HTTP, and stopping it (SIGTERM to the group, SIGKILL after a grace period).
//
// Nothing here knows a scenario or a replica: the scenario language checks templates with
// launch_template_check, the runner expands them per replica, and serving/replica_http.c owns
// one launch_proc per launched replica (so a fault can later find its process group with
// launch_pid, stop it and start it again from the same spec).
#pragma once

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/status.h"

// --- templates: "{name}" placeholders, "{{" and "}}" for literal braces
typedef struct launch_vars {
  int tp, pp, dp; // the deployment's layout
  int replica;    // this replica's index in the deployment
  int port;       // the port the runner chose for it
  const char *gpus; // "0,1": its GPU ids, comma-separated ("" when none were handed out)
  const char *exe;  // {shardcheck}: the path of the shardcheck binary running (so a scenario
                    // can launch `{shardcheck} serve ...`); NULL: ""
  const char *model; // {model}: the served model name (a hot swap's new one); NULL: ""
} launch_vars;

// The placeholder names a template may use, "tp, pp, dp, replica, port, gpus, shardcheck,
// model".
extern const char launch_placeholder_names[];
// The placeholder names an exec fault's command may use, "pid, port, replica".
extern const char launch_exec_placeholder_names[];

// Whether every placeholder of tmpl is known and every brace is paired. On false, bad (cap
// bytes) names the first unknown placeholder ("{foo}") or the unpaired brace.
bool launch_template_check(const char *tmpl, char *bad, size_t cap);
// Whether tmpl uses placeholder `name` (without braces).
bool launch_template_uses(const char *tmpl, const char *name);
// Writes tmpl with its placeholders replaced into out (cap bytes). SC_INVALID for a template
// launch_template_check refuses or a result longer than cap; out is then unspecified.
sc_status launch_expand(const char *tmpl, const launch_vars *v, char *out, size_t cap,
                        sc_error *err);
// launch_template_check and launch_expand for an exec fault's command: {pid} (the launched
// server's, 0 for a server shardcheck did not start), {port} (from the replica's url) and
// {replica}.
bool launch_exec_check(const char *tmpl, char *bad, size_t cap);
sc_status launch_exec_expand(const char *tmpl, int pid, int port, int replica, char *out,
                             size_t cap, sc_error *err);
// The first word of a command line (what the shell would run), into out.
void launch_command_word(const char *cmd, char *out, size_t cap);
// Whether `word` names an executable: a path (with a '/') that is one, or a name found on PATH.
bool launch_on_path(const char *word);

// The URL of `path` (starting with '/') on the server of url: its scheme, host and port with
// path in place of url's own ("http://h:8000/v1" + "/health" -> "http://h:8000/health").
// SC_INVALID (libcurl's reason) when url cannot be parsed.
sc_status launch_url_at(const char *url, const char *path, char *out, size_t cap, sc_error *err);

// A TCP port on 127.0.0.1 free now (bound and released: another process may take it before
// the server does, which then fails to start and says so in its log). SC_IO when none can be
// bound.
sc_status launch_free_port(int *port, sc_error *err);

// --- one launched server
typedef struct launch_spec {
  const char *command;     // the expanded command line, run as `/bin/sh -c 'exec COMMAND'`
                           // (or as given with script)
  const char *const *env;  // NULL-terminated "NAME=value" entries added to its environment
                           // (NULL: none)
  const char *log_path;    // its stdout and stderr (created or truncated; its directory and
                           // missing parents are made)
  uint64_t stop_grace_ns;  // SIGTERM, then SIGKILL after this long (0: 10 s)
  bool append;             // add to the log file rather than truncate it (a relaunch)
  bool script;             // run as `/bin/sh -c 'COMMAND'` (a command list: an exec fault's),
                           // not exec'd in place of the shell
} launch_spec;

typedef struct launch_proc launch_proc;

// Starts the command in a process group of its own, with a watchdog process that kills the
// group if this process dies without stopping it (and a parent-death signal on the command
// itself). Returns at once; launch_wait_ready waits for it. On error *out is NULL.
sc_status launch_start(const launch_spec *s, launch_proc **out, sc_error *err);
// The server's pid, which is also its process group id (0 once stopped).
int launch_pid(const launch_proc *p);
// Sends sig to the server's whole process group (kill: SIGKILL, hang: SIGSTOP / SIGCONT).
// SC_ABORTED when it is not running, SC_IO when kill fails.
sc_status launch_signal(launch_proc *p, int sig, sc_error *err);
// The pid of the nth (0-based, in pid order) descendant of the server whose command line (its
// arguments joined by spaces) matches the POSIX extended regex; its command line into cmd (cap
// bytes; may be NULL). 0 when there is none (err says why: how many matched).
int launch_find_descendant(const launch_proc *p, const char *regex, int nth, char *cmd, size_t cap,
                           sc_error *err);
// Polls url (GET) until it answers HTTP 200, the server exits, timeout_ns passes since the
// launch, or *interrupted (may be NULL) is set. SC_OK when ready; SC_IO when the command
// exited ("... exited with status N; last lines of LOG: ..."); SC_TIMEOUT ("... not ready after
// T s: URL ...; last lines of LOG: ..."); SC_ABORTED when interrupted.
sc_status launch_wait_ready(launch_proc *p, const char *url, uint64_t timeout_ns,
                            volatile sig_atomic_t *interrupted, sc_error *err);
// Whether the server process has exited (reaped; *status its wait status when not NULL).
bool launch_exited(launch_proc *p, int *status);
// Whether any process of group pgid lives (a zombie does not count; true when /proc cannot be
// read, so a caller waiting on it errs on the side of waiting).
bool launch_group_alive(pid_t pgid);
// Stops the server: SIGTERM to its group, SIGKILL after the grace period to whatever is left,
// reaps it, and dismisses the watchdog. Idempotent. Blocks at most the grace period (+1 s).
void launch_stop(launch_proc *p);
// launch_stop, then frees. NULL is a no-op.
void launch_free(launch_proc *p);

// The last `lines` lines of the file at path joined with " | " into buf ("" when unreadable);
// when they do not fit, their end is kept ("... " and the last bytes).
void launch_log_tail(const char *path, int lines, char *buf, size_t cap);
