// Loads the CUDA backend's library once per process (see cuda_api.h).
#include "kernels/cuda_api.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const cuda_api *api;
static sc_error why; // why api is NULL

// The library beside the running executable, into buf; false when /proc/self/exe is unreadable.
static bool beside_exe(char *buf, size_t cap) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return false;
  exe[n] = 0;
  char *slash = strrchr(exe, '/');
  if (!slash) return false;
  *slash = 0;
  return snprintf(buf, cap, "%s/%s", exe, SC_CUDA_LIBRARY) < (int)cap;
}

static void load(void) {
  char path[PATH_MAX + 32];
  const char *env = getenv("SHARDCHECK_CUDA_LIBRARY");
  void *h = NULL;
  if (env && *env) {
    snprintf(path, sizeof path, "%s", env);
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  } else {
    if (beside_exe(path, sizeof path) && access(path, F_OK) == 0)
      h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    else
      h = dlopen(strcpy(path, SC_CUDA_LIBRARY), RTLD_NOW | RTLD_LOCAL);
  }
  if (!h) {
    const char *e = dlerror();
    sc_fail(&why, SC_INVALID, "backend 'cuda': cannot load %s: %s", path, e ? e : "unknown error");
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
