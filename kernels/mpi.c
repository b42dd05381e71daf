// The MPI job (see mpi.h): initialising MPI, the job's rank and size, collectives over the whole
// job polled with a deadline, the build check, and fail-stop. The communicator whose ranks are
// the job's processes is kernels/comm_mpi.c; how the engine and the capacity search use both is
// theirs (engine/exec_dist.c, runner/capacity.c).
//
// Without SHARDCHECK_HAVE_MPI (a build without MPI, first-class) every function is here and
// answers that the build has no MPI.
#include "kernels/mpi.h"

#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef SHARDCHECK_HAVE_MPI
#include <mpi.h>

#include "kernels/mpi_impl.h"
#endif

// --- build id: the GNU build-id note of the running executable

static char build_id[2 * 64 + 1]; // hex; "" when the executable has none

// dl_iterate_phdr's callback: the first object is the executable; its PT_NOTE segments hold
// the build id (note type NT_GNU_BUILD_ID, name "GNU").
static int find_build_id(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  (void)data;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_NOTE) continue;
    const char *p = (const char *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
      const char *name = p + sizeof *nh;
      const unsigned char *desc = (const unsigned char *)name + ((nh->n_namesz + 3) & ~3u);
      if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && !memcmp(name, "GNU", 4)) {
        size_t n = nh->n_descsz < 64 ? nh->n_descsz : 64;
        for (size_t k = 0; k < n; k++) snprintf(build_id + 2 * k, 3, "%02x", desc[k]);
        return 1;
      }
      p = (const char *)desc + ((nh->n_descsz + 3) & ~3u);
    }
  }
  return 1; // the executable only
}

const char *sc_mpi_build_id(void) {
  if (!build_id[0]) dl_iterate_phdr(find_build_id, NULL);
  return build_id;
}

// --- the environment a launcher leaves

bool sc_mpi_launched(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") ||
         (getenv("PMI_SIZE") && getenv("PMI_RANK"));
}

int sc_mpi_launched_size(void) {
  if (!sc_mpi_launched()) return 1;
  const char *names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    const char *v = getenv(names[i]);
    if (v && atoi(v) > 0) return atoi(v);
  }
  return 0;
}

#ifndef SHARDCHECK_HAVE_MPI
// --- without MPI

#define NO_MPI "this build has no MPI (install libopenmpi-dev and configure with SHARDCHECK_MPI=ON)"

bool sc_mpi_built(void) { return false; }
sc_status sc_mpi_init(sc_error *err) { return sc_fail(err, SC_INVALID, "%s", NO_MPI); }
bool sc_mpi_active(void) { return false; }
int sc_mpi_rank(void) { return 0; }
int sc_mpi_size(void) { return 1; }
int sc_mpi_local_size(void) { return 1; }
const char *sc_mpi_host(void) {
  static char host[256];
  if (!host[0] && gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "?");
  return host;
}
void sc_mpi_finalize(void) {}
_Noreturn void sc_mpi_abort(int code) { _exit(code); }
sc_status sc_mpi_bcast(void *buf, size_t n, int root, uint64_t deadline_ns, sc_error *err) {
  return sc_fail(err, SC_INVALID, "%s", NO_MPI);
}
sc_status sc_mpi_gather(const void *send, void *recv, size_t n, int root, uint64_t deadline_ns,
                        sc_error *err) {
  return sc_fail(err, SC_INVALID, "%s", NO_MPI);
}
sc_status sc_mpi_max_int(int *v, uint64_t deadline_ns, sc_error *err) {
  return sc_fail(err, SC_INVALID, "%s", NO_MPI);
}
sc_status sc_mpi_gather_bytes(const void *send, size_t n, int root, void **out, size_t *counts,
                              uint64_t deadline_ns, sc_error *err) {
  if (out) *out = NULL;
  return sc_fail(err, SC_INVALID, "%s", NO_MPI);
}
sc_status sc_mpi_check_same_build(uint64_t deadline_ns, sc_error *err) {
  return sc_fail(err, SC_INVALID, "%s", NO_MPI);
}
sc_status sc_mpi_send_bytes(int dst, int tag, const void *buf, size_t n, sc_error *err) {
  return sc_fail(err, SC_INVALID, "%s", NO_MPI);
}
sc_status sc_mpi_try_recv_bytes(int src, int tag, void **buf, size_t *n, int *from, int *tag_out,
                                sc_error *err) {
  *buf = NULL;
  return sc_fail(err, SC_INVALID, "%s", NO_MPI);
}
#else
// --- with MPI

#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#if defined(__SANITIZE_ADDRESS__)
#define SC_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SC_LSAN 1
#endif
#endif
#ifndef SC_LSAN
#define SC_LSAN 0
#endif
#if SC_LSAN
#include <sanitizer/lsan_interface.h>
#endif

#include "kernels/clock.h"

static atomic_int state; // 0 never initialised, 1 active, 2 finalized
static int world_rank, world_size = 1, local_size = 1;
static char host[MPI_MAX_PROCESSOR_NAME + 1];
static MPI_Comm job = MPI_COMM_NULL; // a duplicate of MPI_COMM_WORLD: the job's collectives

bool sc_mpi_built(void) { return true; }

void sc_mpi_error_text(int code, char *buf, size_t cap) {
  char s[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, s, &len) != MPI_SUCCESS) len = 0;
  s[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = 0;
  snprintf(buf, cap, "%s", len ? s : "unknown MPI error");
}

sc_status sc_mpi_init(sc_error *err) {
  if (atomic_load(&state) == 1) return SC_OK;
  if (atomic_load(&state) == 2)
    return sc_fail(err, SC_INVALID, "mpi: MPI was finalized already; it cannot start again");
  int provided = 0, rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
  if (rc != MPI_SUCCESS) {
    char why[MPI_MAX_ERROR_STRING];
    sc_mpi_error_text(rc, why, sizeof why);
    return sc_fail(err, SC_INVALID, "mpi: MPI_Init_thread failed: %s", why);
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    MPI_Finalize();
    return sc_fail(err, SC_INVALID,
                   "mpi: the MPI library gives thread level %d, shardcheck needs "
                   "MPI_THREAD_MULTIPLE (%d)",
                   provided, MPI_THREAD_MULTIPLE);
  }
  // errors come back as codes (the caller turns them into statuses), never abort the job
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  MPI_Comm_dup(MPI_COMM_WORLD, &job);
  MPI_Comm_set_errhandler(job, MPI_ERRORS_RETURN);
  MPI_Comm local; // the processes that share this host's memory
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) ==
      MPI_SUCCESS) {
    MPI_Comm_size(local, &local_size);
    MPI_Comm_free(&local);
  }
  int len = 0;
  if (MPI_Get_processor_name(host, &len) != MPI_SUCCESS) len = 0;
  host[len] = 0;
  atomic_store(&state, 1);
  return SC_OK;
}

bool sc_mpi_active(void) { return atomic_load(&state) == 1; }
int sc_mpi_rank(void) { return sc_mpi_active() ? world_rank : 0; }
int sc_mpi_size(void) { return sc_mpi_active() ? world_size : 1; }
int sc_mpi_local_size(void) { return sc_mpi_active() ? local_size : 1; }

const char *sc_mpi_host(void) {
  if (!host[0] && gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "?");
  return host;
}

void sc_mpi_finalize(void) {
  int one = 1;
  if (!atomic_compare_exchange_strong(&state, &one, 2)) return;
  MPI_Comm_free(&job);
#if SC_LSAN
  // LeakSanitizer's check, now rather than at exit: MPI_Finalize unloads MPI's plugins, whose
  // own allocations would then show as leaks with stacks no suppression can name. Here every
  // stack resolves, and tests/lsan.supp names MPI's libraries; ours keep every report.
  __lsan_do_leak_check();
#endif
  MPI_Finalize();
}

_Noreturn void sc_mpi_abort(int code) {
  if (sc_mpi_active()) MPI_Abort(MPI_COMM_WORLD, code);
  _exit(code);
}

// --- polling

// One turn of a wait: spins on the first turns, yields for the next, then sleeps a little
// longer each turn up to max_sleep_ns, so an idle rank costs almost no CPU while one whose
// peer answers within microseconds never sleeps.
void sc_mpi_backoff(unsigned turn, uint64_t max_sleep_ns) {
  if (turn < 256) return;
  if (turn < 2048) {
    sched_yield();
    return;
  }
  uint64_t ns = (uint64_t)(turn - 2048) * 1000;
  if (ns < 20000) ns = 20000;
  if (ns > max_sleep_ns) ns = max_sleep_ns;
  struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)ns};
  nanosleep(&ts, NULL);
}

sc_status sc_mpi_wait(MPI_Request *req, uint64_t deadline, uint64_t max_sleep_ns,
                      bool (*stop)(void *ctx), void *ctx, char *why, size_t cap) {
  for (unsigned turn = 0;; turn++) {
    int done = 0, rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      if (why) sc_mpi_error_text(rc, why, cap);
      return SC_IO;
    }
    if (done) return SC_OK;
    if (stop && (turn & 63u) == 0 && stop(ctx)) return SC_ABORTED;
    if (deadline && (turn & 15u) == 0 && sc_monotonic_ns() >= deadline) {
      if (why) snprintf(why, cap, "deadline passed");
      return SC_TIMEOUT;
    }
    sc_mpi_backoff(turn, max_sleep_ns);
  }
}

// --- collectives over the job

static uint64_t deadline_of(uint64_t ns) { return ns ? sc_monotonic_ns() + ns : 0; }

static sc_status job_wait(MPI_Request *req, uint64_t deadline_ns, const char *what, sc_error *err) {
  char why[MPI_MAX_ERROR_STRING];
  sc_status s = sc_mpi_wait(req, deadline_of(deadline_ns), 1000000, NULL, NULL, why, sizeof why);
  if (s == SC_TIMEOUT)
    return sc_fail(err, s, "mpi: %s: no answer from every rank after %.3f s", what,
                   (double)deadline_ns / 1e9);
  if (s != SC_OK) return sc_fail(err, s, "mpi: %s: %s", what, why);
  return SC_OK;
}

static sc_status not_active(sc_error *err) {
  return sc_fail(err, SC_INVALID, "mpi: MPI is not initialised in this process");
}

sc_status sc_mpi_bcast(void *buf, size_t n, int root, uint64_t deadline_ns, sc_error *err) {
  if (!sc_mpi_active()) return not_active(err);
  if (n > (size_t)INT32_MAX) return sc_fail(err, SC_INVALID, "mpi: broadcast of %zu bytes", n);
  MPI_Request req;
  int rc = MPI_Ibcast(buf, (int)n, MPI_BYTE, root, job, &req);
  if (rc != MPI_SUCCESS) return sc_fail(err, SC_IO, "mpi: MPI_Ibcast failed");
  return job_wait(&req, deadline_ns, "broadcast", err);
}

sc_status sc_mpi_gather(const void *send, void *recv, size_t n, int root, uint64_t deadline_ns,
                        sc_error *err) {
  if (!sc_mpi_active()) return not_active(err);
  if (n > (size_t)INT32_MAX) return sc_fail(err, SC_INVALID, "mpi: gather of %zu bytes", n);
  MPI_Request req;
  int rc = MPI_Igather(send, (int)n, MPI_BYTE, recv, (int)n, MPI_BYTE, root, job, &req);
  if (rc != MPI_SUCCESS) return sc_fail(err, SC_IO, "mpi: MPI_Igather failed");
  return job_wait(&req, deadline_ns, "gather", err);
}

sc_status sc_mpi_max_int(int *v, uint64_t deadline_ns, sc_error *err) {
  if (!sc_mpi_active()) return not_active(err);
  MPI_Request req;
  int in = *v;
  int rc = MPI_Iallreduce(&in, v, 1, MPI_INT, MPI_MAX, job, &req);
  if (rc != MPI_SUCCESS) return sc_fail(err, SC_IO, "mpi: MPI_Iallreduce failed");
  return job_wait(&req, deadline_ns, "agreement", err);
}

sc_status sc_mpi_gather_bytes(const void *send, size_t n, int root, void **out, size_t *counts,
                              uint64_t deadline_ns, sc_error *err) {
  *out = NULL;
  if (!sc_mpi_active()) return not_active(err);
  int64_t mine = n > (size_t)INT32_MAX ? -1 : (int64_t)n;
  int64_t *all = NULL; // (size) root: every rank's count
  int *cnt = NULL, *dsp = NULL;
  if (world_rank == root) {
    all = calloc((size_t)world_size, sizeof *all);
    cnt = calloc((size_t)world_size, sizeof *cnt);
    dsp = calloc((size_t)world_size, sizeof *dsp);
  }
  sc_status s = world_rank == root && (!all || !cnt || !dsp)
                    ? sc_fail(err, SC_OOM, "mpi: out of memory")
                    : SC_OK;
  // every rank takes part in the count's gather, even after an error of its own
  sc_error e2 = {{0}};
  sc_status s2 = sc_mpi_gather(&mine, all, sizeof mine, root, deadline_ns, &e2);
  if (s == SC_OK && s2 != SC_OK) s = sc_fail(err, s2, "%s", e2.msg);
  int64_t total = 0;
  for (int r = 0; all && s == SC_OK && r < world_size; r++) {
    if (all[r] < 0 || total + all[r] > INT32_MAX) {
      s = sc_fail(err, SC_INVALID, "mpi: gather of more than 2 GiB (rank %d)", r);
      break;
    }
    cnt[r] = (int)all[r];
    dsp[r] = (int)total;
    total += all[r];
    if (counts) counts[r] = (size_t)all[r];
  }
  char *buf = NULL;
  if (world_rank == root && s == SC_OK && !(buf = malloc(total ? (size_t)total : 1)))
    s = sc_fail(err, SC_OOM, "mpi: out of memory for %lld bytes", (long long)total);
  // the root cannot take the bytes: it stops here, and the job fails stop (its caller's error)
  if (s == SC_OK && mine >= 0) {
    MPI_Request req;
    int rc = MPI_Igatherv(send, (int)mine, MPI_BYTE, buf, cnt, dsp, MPI_BYTE, root, job, &req);
    s = rc != MPI_SUCCESS ? sc_fail(err, SC_IO, "mpi: MPI_Igatherv failed")
                          : job_wait(&req, deadline_ns, "gather", err);
  } else if (s == SC_OK) {
    s = sc_fail(err, SC_INVALID, "mpi: gather of %zu bytes from one rank", n);
  }
  free(all);
  free(cnt);
  free(dsp);
  if (s != SC_OK) {
    free(buf);
    return s;
  }
  *out = buf;
  return SC_OK;
}

// --- the build check

typedef struct build_row {
  char id[sizeof build_id];
  char host[64];
} build_row;

sc_status sc_mpi_check_same_build(uint64_t deadline_ns, sc_error *err) {
  if (!sc_mpi_active()) return not_active(err);
  build_row mine = {{0}, {0}}, *all = NULL;
  snprintf(mine.id, sizeof mine.id, "%s", sc_mpi_build_id());
  snprintf(mine.host, sizeof mine.host, "%.63s", sc_mpi_host());
  if (world_rank == 0) {
    all = calloc((size_t)world_size, sizeof *all);
    if (!all) return sc_fail(err, SC_OOM, "mpi: out of memory");
  }
  sc_status s = sc_mpi_gather(&mine, all, sizeof mine, 0, deadline_ns, err);
  int bad = -1; // the first rank whose build differs from rank 0's
  for (int r = 1; s == SC_OK && all && r < world_size && bad < 0; r++)
    if (strcmp(all[r].id, all[0].id) != 0) bad = r;
  char msg[sizeof err->msg] = "";
  if (bad >= 0)
    snprintf(msg, sizeof msg,
             "mpi: rank %d on %s runs another build of shardcheck (build id "
             "%.16s) than rank 0 on %s (%.16s): install the same binary on every host",
             bad, all[bad].host, all[bad].id[0] ? all[bad].id : "none", all[0].host,
             all[0].id[0] ? all[0].id : "none");
  free(all);
  if (s != SC_OK) return s;
  SC_TRY(sc_mpi_bcast(msg, sizeof msg, 0, deadline_ns, err));
  if (msg[0]) return sc_fail(err, SC_INVALID, "%s", msg);
  return SC_OK;
}

// --- messages between two ranks (on MPI_COMM_WORLD: the job's collectives use a duplicate)

sc_status sc_mpi_send_bytes(int dst, int tag, const void *buf, size_t n, sc_error *err) {
  if (!sc_mpi_active()) return not_active(err);
  if (n > (size_t)INT32_MAX) return sc_fail(err, SC_INVALID, "mpi: a message of %zu bytes", n);
  int rc = MPI_Send(buf, (int)n, MPI_BYTE, dst, tag, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) {
    char why[MPI_MAX_ERROR_STRING];
    sc_mpi_error_text(rc, why, sizeof why);
    return sc_fail(err, SC_IO, "mpi: a message to rank %d: %s", dst, why);
  }
  return SC_OK;
}

sc_status sc_mpi_try_recv_bytes(int src, int tag, void **buf, size_t *n, int *from, int *tag_out,
                                sc_error *err) {
  *buf = NULL;
  *n = 0;
  if (!sc_mpi_active()) return not_active(err);
  int flag = 0, count = 0;
  MPI_Status st;
  int rc = MPI_Iprobe(src < 0 ? MPI_ANY_SOURCE : src, tag < 0 ? MPI_ANY_TAG : tag, MPI_COMM_WORLD,
                      &flag, &st);
  if (rc != MPI_SUCCESS) return sc_fail(err, SC_IO, "mpi: MPI_Iprobe failed");
  if (!flag) return SC_TIMEOUT;
  MPI_Get_count(&st, MPI_BYTE, &count);
  void *b = malloc(count > 0 ? (size_t)count : 1);
  if (!b) return sc_fail(err, SC_OOM, "mpi: out of memory for a message of %d bytes", count);
  rc = MPI_Recv(b, count, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS) {
    free(b);
    return sc_fail(err, SC_IO, "mpi: MPI_Recv failed");
  }
  *buf = b;
  *n = (size_t)count;
  if (from) *from = st.MPI_SOURCE;
  if (tag_out) *tag_out = st.MPI_TAG;
  return SC_OK;
}
#endif
