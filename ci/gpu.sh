#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: everything of shardcheck that needs the GPU, as steps that
# each write their log under $OUT and go on when one fails (the machine is lent for minutes,
# so one call should bring back every result). docs/cuda.md has what each step checks.
#
#   tests     test_cuda, test_cuda_gpu (verbose: each op's worst error); without a GPU
#             test_cuda_gpu would say "skipped: no CUDA device", here that is a failure
#   smoke     scenarios/cuda-smoke.yaml end to end
#   bench     bench_cuda: the GPU's roofs, llama3-8b's linear layers against them, and the
#             whole engine (weights generated at load); its tables go to $OUT/bench_cuda.md
#   layers    bench_cuda --no-engine (the roofs and the layers only)
#   serve     `shardcheck serve --backend cuda` (llama3-8b, bf16) answering the official openai
#             npm client (tests/clients/openai_client.mjs)
#   accuracy  bench/cuda_accuracy.sh: `shardcheck profile --backend cuda`, then a scenario run
#             on the GPU and simulated with that profile, predicted against measured
#
# usage: ci/gpu.sh [STEP ...]   (default: tests smoke bench serve accuracy)
#
# The binaries: build/gpu, configured with -DSHARDCHECK_CUDA=ON and built here; or, with
# PREBUILT=1 and .gpu-carry/ packed by ci/gpu-pack.sh on a machine without a GPU, the CUDA
# build made there, used when every library it needs resolves here (else this builds).
# Shardcheck's Debian libraries, when the machine lacks them, come from .gpu-debs/
# (ci/gpu-deps.sh), unpacked under /tmp/scdeps (never into /) and found through pkg-config's
# sysroot and the library paths; node and the openai npm package for the serve step come from
# .gpu-carry/ when the machine has none.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${OUT:-build/gpu/out}
mkdir -p "$out"
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(tests smoke bench serve accuracy)
summary=$out/summary.md
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
t_start=$(date +%s)
elapsed() { echo $(($(date +%s) - t_start)); }

cmake_extra=()
libs=""
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
  cat >$deps/pkgconf.sh <<EOS
#!/bin/sh
LD_LIBRARY_PATH=$libs exec $deps/usr/bin/pkgconf "\$@"
EOS
  chmod +x $deps/pkgconf.sh
  cmake_extra=(-DPKG_CONFIG_EXECUTABLE=$deps/pkgconf.sh)
fi
# The CUDA libraries where this image keeps them (the toolkit's, or the Python wheels').
for lib in libcublas.so.13 libcudart.so.13 libnccl.so.2; do
  d=$(find /usr/local/cuda*/ /usr/lib/x86_64-linux-gnu /opt -name "$lib" -print -quit 2>/dev/null |
      xargs -r dirname)
  [ -n "$d" ] && libs=$libs:$d
done
# only our binaries get the unpacked libraries (older than the image's, they must not shadow
# them for cmake or nvcc)
run=(env "LD_LIBRARY_PATH=${libs#:}:${LD_LIBRARY_PATH:-}")

note "# ci/gpu.sh on $(hostname), $(date -u '+%Y-%m-%d %H:%M UTC')"
note ""
note '```'
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 |
  tee -a "$summary"
(nvcc --version | tail -1; ls /usr/local/cuda*/lib*/libnccl.so.2.* 2>/dev/null | head -1) 2>&1 |
  tee -a "$summary"
note '```'

# .tar.xz and .xz without xz(1), where the image lacks it
untar() { tar -xJf "$1" -C "${2:-.}" 2>/dev/null ||
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$1" "${2:-.}"; }
unxz() { xz -dc "$1" 2>/dev/null || python3 -c 'import lzma, shutil, sys
shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' "$1"; }

bin=build/gpu
if [ "${PREBUILT:-0}" = 1 ] && [ -f .gpu-carry/bin.tar.xz ]; then
  # built where this checkout was packed: the binaries find the source tree (tests' data, the
  # shardcheck binary) and libshardcheck_cuda.so at the paths they were built at
  src=$(cat .gpu-carry/source-dir)
  untar .gpu-carry/bin.tar.xz
  if [ "$src" != "$root" ] && [ ! -e "$src" ]; then mkdir -p "$(dirname "$src")" && ln -s "$root" "$src"; fi
  if "${run[@]}" ldd build/release/test_cuda_gpu build/release/shardcheck | grep -q "not found"; then
    note "prebuilt binaries: libraries not found, building here"
    "${run[@]}" ldd build/release/shardcheck | grep "not found" | tee -a "$summary"
  else
    bin=build/release
    note "prebuilt binaries (.gpu-carry/bin.tar.xz, built at $src)"
  fi
fi
if [ "$bin" = build/gpu ]; then
  cmake -S . -B build/gpu -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDCHECK_CUDA=ON \
    -DSHARDCHECK_WERROR=ON "${cmake_extra[@]}" | grep "shardcheck:"
  cmake --build build/gpu -j"$(nproc)" >"$out/build.log" 2>&1 || {
    tail -40 "$out/build.log"
    note "build: FAILED"
    exit 1
  }
  note "built build/gpu in $(elapsed) s"
fi

rc=0
# step NAME LIMIT_S COMMAND...: runs it with its output in $OUT/NAME.log and a line in the
# summary; LIMIT_S 0 runs a function of this script (which bounds its own waits)
step() {
  local name=$1 limit=$2 t0 st
  shift 2
  t0=$(date +%s)
  echo "== $name (at $(elapsed) s)"
  if [ "$limit" = 0 ]; then
    "$@" >"$out/$name.log" 2>&1
  else
    timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1
  fi
  st=$?
  tail -25 "$out/$name.log"
  note "- $name: $([ $st = 0 ] && echo ok || echo "FAILED (exit $st)") in $(($(date +%s) - t0)) s"
  [ $st = 0 ] || rc=1
}

serve_check() {
  local node=node port=18123
  if ! command -v node >/dev/null; then
    [ -f .gpu-carry/node.xz ] || { echo "serve: no node and no .gpu-carry/node.xz"; return 2; }
    unxz .gpu-carry/node.xz >/tmp/node && chmod +x /tmp/node && node=/tmp/node
  fi
  if [ ! -f tests/clients/node_modules/openai/package.json ]; then
    untar .gpu-carry/node_modules.tar.xz tests/clients
  fi
  "${run[@]}" "$bin/shardcheck" serve --model llama3-8b --dtype bf16 --backend cuda \
    --port $port --api-key client-key --weights-seed 7 --drain-timeout 5 &
  local pid=$! i
  for i in $(seq 1 180); do
    python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/health', timeout=1)" \
      2>/dev/null && break
    kill -0 $pid 2>/dev/null || { echo "serve exited before it was ready"; return 1; }
    sleep 1
  done
  echo "ready after ${i} s"
  timeout 120 $node tests/clients/openai_client.mjs http://127.0.0.1:$port client-key
  local st=$?
  python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:$port/metrics').read().decode())" |
    grep -E "^vllm:(num_requests|kv_cache_usage|prompt_tokens_total|generation_tokens_total)" || true
  kill -TERM $pid
  wait $pid
  return $st
}

for s in "${steps[@]}"; do
  case $s in
  tests)
    step test_cuda 120 "${run[@]}" $bin/test_cuda --jobs 1
    step test_cuda_gpu 240 "${run[@]}" $bin/test_cuda_gpu --jobs 1 --verbose
    grep -E "worst relative error" "$out/test_cuda_gpu.log" | sed 's/^.*\]: /  /' >>"$summary" ;;
  smoke)
    step cuda-smoke 180 "${run[@]}" $bin/shardcheck run scenarios/cuda-smoke.yaml \
      --db "$out/cuda.db" --out "$out/cuda-smoke" ;;
  bench)
    step bench_cuda 240 "${run[@]}" $bin/bench_cuda
    cp "$out/bench_cuda.log" "$out/bench_cuda.md" ;;
  layers)
    step bench_cuda 200 "${run[@]}" $bin/bench_cuda --no-engine
    cp "$out/bench_cuda.log" "$out/bench_cuda.md" ;;
  serve)
    step serve 0 serve_check ;;
  accuracy)
    step accuracy 400 "${run[@]}" BIN=$bin/shardcheck OUT="$out/accuracy" REPEAT=${REPEAT:-2} bash bench/cuda_accuracy.sh ;;
  *) note "- $s: unknown step"; rc=1 ;;
  esac
done
note "total $(elapsed) s"
# at most 8 files come back from a device call: the logs and databases go in one archive
tar -czf "$out/logs.tar.gz" -C "$out" --exclude=logs.tar.gz --exclude=summary.md \
  --exclude=bench_cuda.md . 2>/dev/null
find "$out" -mindepth 1 -maxdepth 1 ! -name logs.tar.gz ! -name summary.md ! -name bench_cuda.md \
  -exec rm -rf {} +
exit $rc
