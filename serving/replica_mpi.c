// A process replica whose tp x pp ranks are the processes of one MPI job (router.isolation
// mpi, docs/scaling-out.md "A replica as an MPI job"). The runner's side is the process
// replica (serving/replica_proc.c) with its worker started as
//   MPIRUN -np TPxPP --bind-to none (--hostfile H | --oversubscribe) EXE worker --connect SOCK
// and this file holds what differs from a plain worker:
//
// - finding the launcher (mpirun, else mpiexec, on PATH);
// - the rendezvous: the runner listens on a Unix socket in a directory of its own
//   (TMPDIR/sc-mpi-XXXXXX/w), the job's rank 0 connects to it, and from then on the runner and
//   rank 0 speak the worker protocol (serving/wire.c) exactly as with a plain worker;
// - the worker side of every rank (`shardcheck worker --connect SOCK`, replica_mpi_serve):
//   each rank dies with its launcher (PR_SET_PDEATHSIG), MPI is initialised and every rank
//   checks it runs the same build; rank 0 serves the runner (replica_proc_serve_mpi), and
//   before each engine it builds (the first, and one per hot swap) it broadcasts the engine
//   config; every other rank waits for that config and serves rank 0's steps (engine_follow)
//   until rank 0 frees its engine, then waits for the next config or the end (an empty one);
// - finding a rank's process on this host (the launcher's descendant whose environment names
//   its rank), so that `kill: gpu` SIGKILLs that very process. MPI then ends the whole job (fail
//   stop), rank 0's socket closes, and the runner sees the replica lost as it sees a plain
//   worker's death; a restart launches a fresh job.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/clock.h"
#include "kernels/mpi.h"
#include "serving/replica_mpi.h"
#include "serving/wire.h"

#define NS_PER_S        1000000000ull
#define BUILD_CHECK_NS  (60 * NS_PER_S) // every rank answers the build check within this
#define CONFIG_BCAST_NS (60 * NS_PER_S)
#define CONNECT_NS      (30 * NS_PER_S) // rank 0 reaches the runner's socket within this

// --- the launcher

bool replica_mpi_launcher(char *out, size_t cap) {
  static const char *const names[] = {"mpirun", "mpiexec"};
  const char *path = getenv("PATH");
  if (!path || !*path) return false;
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
    const char *p = path;
    while (*p) {
      size_t len = strcspn(p, ":");
      char cand[4096];
      if (len > 0 && len + strlen(names[k]) + 2 < sizeof cand) {
        snprintf(cand, sizeof cand, "%.*s/%s", (int)len, p, names[k]);
        struct stat st;
        if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0) {
          if (strlen(cand) >= cap) return false;
          snprintf(out, cap, "%s", cand);
          return true;
        }
      }
      p += len;
      if (*p == ':') p++;
    }
  }
  return false;
}

// --- the rendezvous (runner side)

sc_status replica_mpi_listen(replica_mpi_rendezvous *rv, sc_error *err) {
  memset(rv, 0, sizeof *rv);
  rv->fd = -1;
  const char *tmp = getenv("TMPDIR");
  // a socket's path has room for about 100 bytes: a long TMPDIR falls back to /tmp
  if (!tmp || !*tmp || strlen(tmp) > 60) tmp = "/tmp";
  snprintf(rv->dir, sizeof rv->dir, "%s/sc-mpi-XXXXXX", tmp);
  if (!mkdtemp(rv->dir)) {
    int e = errno;
    rv->dir[0] = 0;
    return sc_fail(err, SC_IO, "mpi: cannot make a directory for the rank 0 socket in %s: %s", tmp,
                   strerror(e));
  }
  snprintf(rv->path, sizeof rv->path, "%s/w", rv->dir);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", rv->path);
  rv->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (rv->fd < 0 || bind(rv->fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
      listen(rv->fd, 1) != 0) {
    int e = errno;
    replica_mpi_rendezvous_end(rv);
    return sc_fail(err, SC_IO, "mpi: cannot listen on a Unix socket: %s", strerror(e));
  }
  return SC_OK;
}

sc_status replica_mpi_accept(replica_mpi_rendezvous *rv, pid_t launcher, uint64_t wait_ns, int *fd,
                             bool *reaped, sc_error *err) {
  *fd = -1;
  uint64_t deadline = sc_monotonic_ns() + wait_ns;
  for (;;) {
    struct pollfd pf = {.fd = rv->fd, .events = POLLIN};
    int n = poll(&pf, 1, 100);
    if (n > 0) {
      int c = accept4(rv->fd, NULL, NULL, SOCK_CLOEXEC);
      if (c >= 0) {
        *fd = c;
        return SC_OK;
      }
      if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED)
        return sc_fail(err, SC_IO, "mpi: accept: %s", strerror(errno));
    }
    int st;
    pid_t w = waitpid(launcher, &st, WNOHANG);
    if (w == launcher) {
      *reaped = true;
      if (WIFSIGNALED(st))
        return sc_fail(err, SC_IO,
                       "the MPI launcher was killed by signal %d before rank 0 "
                       "connected",
                       WTERMSIG(st));
      return sc_fail(err, SC_IO,
                     "the MPI launcher exited with status %d before rank 0 "
                     "connected (its messages are above)",
                     WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    }
    if (sc_monotonic_ns() >= deadline)
      return sc_fail(err, SC_TIMEOUT, "rank 0 of the MPI job did not connect within %.0f s",
                     (double)wait_ns / 1e9);
  }
}

void replica_mpi_rendezvous_end(replica_mpi_rendezvous *rv) {
  if (rv->fd >= 0) close(rv->fd);
  rv->fd = -1;
  if (rv->path[0]) unlink(rv->path);
  if (rv->dir[0]) rmdir(rv->dir);
  rv->path[0] = rv->dir[0] = 0;
}

// --- a rank's process on this host

// pid's parent, or 0 when it cannot be read.
static pid_t parent_of(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  const char *rp = strrchr(buf, ')'); // the command may hold spaces and parentheses
  int ppid = 0;
  if (!rp || sscanf(rp + 1, " %*c %d", &ppid) != 1) return 0;
  return (pid_t)ppid;
}

// Whether pid descends from anc within a few generations (mpirun's ranks are its children;
// MPICH's hydra puts a proxy between).
static bool descends(pid_t pid, pid_t anc) {
  for (int depth = 0; depth < 4 && pid > 1; depth++) {
    pid = parent_of(pid);
    if (pid == anc) return true;
  }
  return false;
}

// The job rank pid's environment names (OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK), or -1.
static int rank_of(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  static const char *const keys[] = {"OMPI_COMM_WORLD_RANK=", "PMI_RANK=", "PMIX_RANK="};
  char buf[65536];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  for (ssize_t i = 0; i < n; i += (ssize_t)strlen(buf + i) + 1)
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
      if (!strncmp(buf + i, keys[k], strlen(keys[k]))) return atoi(buf + i + strlen(keys[k]));
  return -1;
}

int replica_mpi_local_ranks(pid_t launcher, pid_t *pids, int n_ranks) {
  for (int r = 0; r < n_ranks; r++) pids[r] = 0;
  if (launcher <= 0) return 0;
  DIR *d = opendir("/proc");
  if (!d) return 0;
  int found = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    char *end;
    long v = strtol(e->d_name, &end, 10);
    if (*end || v <= 1 || v == launcher) continue;
    pid_t pid = (pid_t)v;
    if (!descends(pid, launcher)) continue;
    int r = rank_of(pid);
    if (r < 0 || r >= n_ranks || pids[r]) continue;
    pids[r] = pid;
    found++;
  }
  closedir(d);
  return found;
}

// --- the worker side (every rank)

// Rank 0: connects to the runner's socket (blocking; the runner is listening before the job
// starts, so a refusal only means it has not yet accepted). -1 when it cannot.
static int connect_runner(const char *path) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof sa.sun_path) return -1;
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
  uint64_t deadline = sc_monotonic_ns() + CONNECT_NS;
  for (;;) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) return fd;
    close(fd);
    if (sc_monotonic_ns() >= deadline) return -1;
    usleep(20000);
  }
}

sc_status replica_mpi_lead(const engine_config *cfg, int index, uint64_t heartbeat_ns,
                           sc_error *err) {
  wire_buf b = {0};
  uint64_t n = 0;
  if (cfg && !wire_put_config(&b, 0, cfg, index, heartbeat_ns)) {
    wire_buf_free(&b);
    return sc_fail(err, SC_OOM, "mpi: out of memory");
  }
  n = cfg ? b.n : 0;
  sc_status s = sc_mpi_bcast(&n, sizeof n, 0, CONFIG_BCAST_NS, err);
  if (s == SC_OK && n) s = sc_mpi_bcast(b.p, n, 0, CONFIG_BCAST_NS, err);
  wire_buf_free(&b);
  return s;
}

// Every rank but 0: builds its part of each engine rank 0 builds and serves its steps, until
// rank 0 says it is done (an empty config). A failure of one engine (a device lost, the job
// broken) is rank 0's to act on: it sees it too and ends the job; this rank waits for what
// rank 0 says next. Returns the exit status.
static int follow(void) {
  wire_config *wc = calloc(1, sizeof *wc);
  if (!wc) sc_mpi_abort(3);
  for (;;) {
    uint64_t n = 0;
    sc_error err = {{0}};
    if (sc_mpi_bcast(&n, sizeof n, 0, 0, &err) != SC_OK) sc_mpi_abort(3);
    if (n == 0) break;
    uint8_t *buf = malloc(n);
    if (!buf || sc_mpi_bcast(buf, n, 0, 0, &err) != SC_OK) sc_mpi_abort(3);
    int type;
    uint32_t epoch;
    const uint8_t *body;
    size_t body_n, frame_n;
    memset(wc, 0, sizeof *wc);
    int f = wire_frame(buf, n, &type, &epoch, &body, &body_n, &frame_n);
    wire_reader r = {.p = body, .n = body_n};
    if (f <= 0 || type != WIRE_CONFIG || !wire_get_config(&r, wc)) {
      fprintf(stderr, "shardcheck worker: rank %d: malformed config from rank 0\n", sc_mpi_rank());
      sc_mpi_abort(3);
    }
    free(buf);
    wc->cfg.clock = sc_clock_monotonic();
    wc->cfg.mpi = true;
    if (engine_follow(&wc->cfg, &err) != SC_OK)
      fprintf(stderr, "shardcheck worker: rank %d on %s: %s\n", sc_mpi_rank(), sc_mpi_host(),
              err.msg);
  }
  free(wc);
  return 0;
}

int replica_mpi_serve(const char *path) {
  // every rank ends with its launcher (mpirun's ranks are its children): no rank outlives a
  // launcher that was killed
  pid_t parent = getppid();
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent || parent == 1) return 3;
  sc_error err = {{0}};
  if (sc_mpi_init(&err) != SC_OK) {
    fprintf(stderr, "shardcheck worker: %s\n", err.msg);
    return 2;
  }
  int fd = -1;
  if (sc_mpi_rank() == 0) {
    fd = connect_runner(path);
    if (fd < 0) {
      fprintf(stderr, "shardcheck worker: rank 0 cannot reach the runner at %s: %s\n", path,
              strerror(errno));
      sc_mpi_abort(3);
    }
  }
  // a job of mixed builds is refused before anything runs; rank 0 tells the runner why
  char refuse[512] = "";
  if (sc_mpi_check_same_build(BUILD_CHECK_NS, &err) != SC_OK)
    snprintf(refuse, sizeof refuse, "%s", err.msg);
  int rc;
  if (sc_mpi_rank() != 0) {
    rc = follow(); // a refused job: rank 0 answers the runner, then ends the job

  } else {
    rc = replica_proc_serve_mpi(fd, refuse[0] ? refuse : NULL);
    if (rc != 0) sc_mpi_abort(rc); // the job fails stop
    sc_error qe = {{0}};
    if (replica_mpi_lead(NULL, 0, 0, &qe) != SC_OK) sc_mpi_abort(3);
  }
  sc_mpi_finalize();
  return rc;
}
