#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and the CUDA toolkit: builds shardcheck with the CUDA backend
# and runs what needs the GPU: test_cuda, test_cuda_gpu (verbose: each op's worst error),
# scenarios/cuda-smoke.yaml end to end, and bench_cuda --no-engine (the GPU's roofs and
# llama3-8b's linear layers against them; its tables go to $OUT/bench_cuda.md). The engine
# benchmark and the PyTorch comparison load llama3-8b and take their own calls
# (docs/benchmarks.md). Without a GPU test_cuda_gpu would say "skipped: no CUDA device"; here
# that is a failure.
#
# Shardcheck's Debian libraries, when the machine lacks them, come from .gpu-debs/
# (ci/gpu-deps.sh), unpacked under /tmp/scdeps (never into /) and found through pkg-config's
# sysroot and the library paths.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/gpu/out}
mkdir -p "$out"
cmake_extra=()
run=() # how our binaries start: with the unpacked libraries first on their library path
if [ -d .gpu-debs ]; then
  deps=/tmp/scdeps
  ma=x86_64-linux-gnu
  mkdir -p $deps/pc
  for f in .gpu-debs/*.deb; do dpkg -x "$f" $deps; done
  libs=$deps/usr/lib/$ma:$deps/usr/lib/$ma/openblas-pthread:$deps/lib/$ma
  # criterion.pc and libmicrohttpd.pc name the -dev packages of their own dependencies as
  # Requires.private; linking them as shared libraries needs none of them, so copies without
  # that line go first.
  for pc in criterion libmicrohttpd; do
    grep -v '^Requires.private' $deps/usr/lib/$ma/pkgconfig/$pc.pc >$deps/pc/$pc.pc
  done
  export PKG_CONFIG_SYSROOT_DIR=$deps
  export PKG_CONFIG_LIBDIR=$deps/pc:$deps/usr/lib/$ma/pkgconfig:$deps/usr/lib/$ma/openblas-pthread/pkgconfig
  export LDFLAGS="-Wl,-rpath-link=$libs ${LDFLAGS:-}" # the libraries' own dependencies
  # only our binaries get the unpacked libraries (older than the image's, they must not shadow
  # them for cmake or nvcc); pkgconf itself needs its libpkgconf
  run=(env "LD_LIBRARY_PATH=$libs:${LD_LIBRARY_PATH:-}")
  cat >$deps/pkgconf.sh <<EOS
#!/bin/sh
LD_LIBRARY_PATH=$libs exec $deps/usr/bin/pkgconf "\$@"
EOS
  chmod +x $deps/pkgconf.sh
  cmake_extra=(-DPKG_CONFIG_EXECUTABLE=$deps/pkgconf.sh)
fi
nvidia-smi -L || true
cmake -S . -B build/gpu -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDCHECK_CUDA=ON \
  -DSHARDCHECK_WERROR=ON "${cmake_extra[@]}" | grep "shardcheck:"
cmake --build build/gpu -j"$(nproc)"
rc=0
"${run[@]}" build/gpu/test_cuda --jobs 1 2>&1 | tee "$out/test_cuda.log" || rc=1
"${run[@]}" build/gpu/test_cuda_gpu --jobs 1 --verbose 2>&1 | tee "$out/test_cuda_gpu.log" || rc=1
"${run[@]}" build/gpu/shardcheck run scenarios/cuda-smoke.yaml --db "$out/cuda.db" --out "$out/cuda-smoke" \
  2>&1 | tee "$out/cuda-smoke.log" || rc=1
"${run[@]}" build/gpu/bench_cuda --no-engine | tee "$out/bench_cuda.md" || rc=1
exit $rc
