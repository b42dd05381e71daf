#!/usr/bin/env bash
# On a machine without a GPU but with the CUDA toolkit (the CI machine kind): packs what a GPU
# machine that cannot fetch anything needs for `PREBUILT=1 ci/gpu.sh`, so that its minutes go
# to the GPU rather than to compiling. Into .gpu-carry/ (ignored by git; it travels as a
# carried path beside .gpu-debs/, which ci/gpu-deps.sh fills):
#   bin.tar.xz            build/release's CUDA binaries (configure with -DSHARDCHECK_CUDA=ON)
#   source-dir            the path they were built at (their tests find data there)
#   node.xz               this machine's node, when it is one self-contained binary
#   node_modules.tar.xz   the openai npm package of tests/clients (bash ci/setup.sh installs it)
# usage: ci/gpu-pack.sh   (build/release configured with -DSHARDCHECK_CUDA=ON)
set -euo pipefail
cd "$(dirname "$0")/.."
b=build/release # where ci/gpu.sh unpacks it
grep -q "SHARDCHECK_HAVE_CUDA" "$b/CMakeFiles/shardcheck.dir/flags.make" 2>/dev/null ||
  { echo "gpu-pack: $b has no CUDA backend (configure with -DSHARDCHECK_CUDA=ON)" >&2; exit 2; }
cmake --build "$b" -j"$(nproc)" --target shardcheck test_cuda test_cuda_gpu bench_cuda >/dev/null
bash ci/gpu-deps.sh
mkdir -p .gpu-carry
tar -cJf .gpu-carry/bin.tar.xz "$b"/shardcheck "$b"/test_cuda "$b"/test_cuda_gpu \
  "$b"/bench_cuda "$b"/libshardcheck_cuda.so
echo "$PWD" >.gpu-carry/source-dir
node=$(command -v node || true)
if [ -n "$node" ] && ! ldd "$node" | grep -qv -E "lib(c|m|dl|pthread|stdc\+\+|gcc_s)\.so|linux-vdso|ld-linux"; then
  [ -f .gpu-carry/node.xz ] || xz -T0 -6 -c "$node" >.gpu-carry/node.xz
else
  echo "gpu-pack: node missing or not self-contained: the serve step needs node on the GPU machine"
fi
if [ -f tests/clients/node_modules/openai/package.json ]; then
  tar -cJf .gpu-carry/node_modules.tar.xz -C tests/clients node_modules
fi
du -sh .gpu-carry .gpu-debs
