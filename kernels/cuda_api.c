// Loads the CUDA backend's library once per process (see cuda_api.h).
#include "kernels/cuda_api.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/paths.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const cuda_api *api;
static sc_error why; // why api is NULL

// DIR/libshardcheck_cuda.so into buf when that file exists; false otherwise (or DIR NULL).
static bool in_dir(const char *dir, char *buf, size_t cap) {
  return dir && snprintf(buf, cap, "%s/%s", dir, SC_CUDA_LIBRARY) < (int)cap &&
         access(buf, F_OK) == 0;
}

static void load(void) {
  char path[PATH_MAX + 32];
  const char *env = getenv("SHARDCHECK_CUDA_LIBRARY");
  void *h = NULL;
  if (env && *env) {
    snprintf(path, sizeof path, "%s", env);
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  } else {
    if (in_dir(paths_exe_dir(), path, sizeof path) ||
        in_dir(paths_pkglib_dir(), path, sizeof path))
      h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    else
      h = dlopen(strcpy(path, SC_CUDA_LIBRARY), RTLD_NOW | RTLD_LOCAL);
  }
  if (!h) {
    const char *e = dlerror();
    if (!e) e = "unknown error";
    if (env && *env)
      sc_fail(&why, SC_INVALID, "backend 'cuda': cannot load %s: %s", path, e);
    else // every place looked, the last one's answer
      sc_fail(&why, SC_INVALID,
              "backend 'cuda': cannot load %s: not in %s nor in %s, and the dynamic linker says: %s",
              SC_CUDA_LIBRARY, paths_exe_dir() ? paths_exe_dir() : "?",
              paths_pkglib_dir() ? paths_pkglib_dir() : "?", e);
    return;
  }
  const cuda_api *(*get)(void) = (const cuda_api *(*)(void))dlsym(h, "shardcheck_cuda_api");
  const cuda_api *a = get ? get() : NULL;
  if (!a || a->version != SC_CUDA_API_VERSION) {
    sc_fail(&why, SC_INVALID, "backend 'cuda': %s is not this shardcheck's CUDA backend (%s)",
            path, a ? "another version" : "no shardcheck_cuda_api");
    dlclose(h);
    return;
  }
  api = a; // the library stays loaded for the life of the process
}

const cuda_api *cuda_api_get(sc_error *err) {
  pthread_once(&once, load);
  if (!api && err) *err = why;
  return api;
}
