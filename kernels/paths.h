// Where a shardcheck binary finds the files it ships with, wherever it was installed: the
// running executable's directory, the shared data root (shipped scenarios, hardware profiles,
// model presets) and the directory of the CUDA backend's library.
//
// Every path is found relative to the executable, so an install under any prefix, a DESTDIR
// staging tree moved elsewhere and a build tree all work without a path compiled in:
//   installed:  BIN/../share/shardcheck (CMake's install rules put the data there; the
//               relative path comes from GNUInstallDirs at configure time)
//   build tree: the checkout named in BIN/shardcheck-source-dir, a file CMake writes in the
//               build directory (a file, not a link: a link into the checkout from inside it
//               would send whatever follows links around in a loop)
// The data root mirrors the checkout: scenarios/*.yaml, scenarios/hardware/*.yaml and
// scenarios/models/*.yaml. What is read from it is config/'s and cli/'s business; presets and
// profiles are also compiled in (kernels/embedded.h), so a binary with no data root still runs.
#pragma once

#include <stdbool.h>
#include <stddef.h>

// The directory of the running executable (from /proc/self/exe, links resolved), or NULL when
// it cannot be read. A static string, computed once; thread-safe.
const char *paths_exe_dir(void);

// The shared data root: the installed one when it exists, else a build tree's checkout; NULL when neither exists. A static string (an absolute path without links),
// computed once; thread-safe.
const char *paths_data_root(void);

// Writes into buf the places paths_data_root looked at, for a message that says where a file
// was not found: the root itself when there is one, else both candidates.
void paths_data_looked(char *buf, size_t cap);

// Writes ROOT/rel into buf and returns true when that file exists (a regular file); false
// when there is no data root, the path does not fit, or there is no such file (buf then holds
// the path that was tried, or "" without a root).
bool paths_data_file(const char *rel, char *buf, size_t cap);

// The installed directory of the CUDA backend's library (BIN/../lib/shardcheck or the
// platform's libdir), whether or not it exists; NULL when the executable's directory is
// unknown. A static string, computed once.
const char *paths_pkglib_dir(void);
