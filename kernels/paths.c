// The executable's directory and the paths found relative to it (see paths.h). The relative
// paths come from CMake (GNUInstallDirs) as compile definitions of this file only; what lies
// under the data root is read by config/ and cli/.
#include "kernels/paths.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef SC_DATADIR_REL
#define SC_DATADIR_REL "../share/shardcheck" // bindir -> datadir/shardcheck
#endif
#ifndef SC_PKGLIBDIR_REL
#define SC_PKGLIBDIR_REL "../lib/shardcheck" // bindir -> libdir/shardcheck
#endif
#define SC_BUILD_SOURCE_FILE "shardcheck-source-dir" // in a build tree: the checkout's path

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char exe_dir[PATH_MAX];    // "" when unknown
static char data_root[PATH_MAX];  // "" when none
static char pkglib_dir[PATH_MAX]; // "" when the executable's directory is unknown
static char installed[PATH_MAX];  // the installed candidate, as looked for
static char build_file[PATH_MAX]; // the build tree's file naming its checkout, as looked for

static bool is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

// realpath of p into out when p is a directory; false (out untouched) otherwise.
static bool dir_real(const char *p, char *out) {
  char r[PATH_MAX];
  if (!is_dir(p) || !realpath(p, r)) return false;
  snprintf(out, PATH_MAX, "%s", r);
  return true;
}

static void find(void) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return;
  exe[n] = 0;
  char *slash = strrchr(exe, '/');
  if (!slash) return;
  *slash = 0;
  snprintf(exe_dir, sizeof exe_dir, "%s", slash == exe ? "/" : exe);
  if ((size_t)snprintf(installed, sizeof installed, "%s/%s", exe, SC_DATADIR_REL) >=
          sizeof installed ||
      (size_t)snprintf(build_file, sizeof build_file, "%s/%s", exe, SC_BUILD_SOURCE_FILE) >=
          sizeof build_file) {
    installed[0] = build_file[0] = 0;
    return;
  }
  if (!dir_real(installed, data_root)) {
    char src[PATH_MAX] = "";
    FILE *f = fopen(build_file, "r");
    if (f && fgets(src, sizeof src, f)) src[strcspn(src, "\n")] = 0;
    if (f) fclose(f);
    if (src[0]) dir_real(src, data_root);
  }
  char lib[PATH_MAX];
  if ((size_t)snprintf(lib, sizeof lib, "%s/%s", exe, SC_PKGLIBDIR_REL) < sizeof lib &&
      !dir_real(lib, pkglib_dir))
    snprintf(pkglib_dir, sizeof pkglib_dir, "%s", lib);
}

const char *paths_exe_dir(void) {
  pthread_once(&once, find);
  return exe_dir[0] ? exe_dir : NULL;
}

const char *paths_data_root(void) {
  pthread_once(&once, find);
  return data_root[0] ? data_root : NULL;
}

const char *paths_pkglib_dir(void) {
  pthread_once(&once, find);
  return pkglib_dir[0] ? pkglib_dir : NULL;
}

void paths_data_looked(char *buf, size_t cap) {
  pthread_once(&once, find);
  if (data_root[0])
    snprintf(buf, cap, "%s", data_root);
  else if (installed[0])
    snprintf(buf, cap, "%s (installed) or the checkout %s names (a build tree)", installed,
             build_file);
  else
    snprintf(buf, cap, "nowhere: the executable's path is unknown");
}

bool paths_data_file(const char *rel, char *buf, size_t cap) {
  const char *root = paths_data_root();
  buf[0] = 0;
  if (!root) return false;
  if ((size_t)snprintf(buf, cap, "%s/%s", root, rel) >= cap) return false;
  struct stat st;
  return stat(buf, &st) == 0 && S_ISREG(st.st_mode);
}
