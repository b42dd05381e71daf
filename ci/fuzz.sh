#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang, ASan+UBSan) in build/fuzz and runs each for
# SECONDS (default 20) over its seed corpus fuzz/corpus/<target>/ with its dictionary
# fuzz/dict/*.dict. Fails on the first crash, leak, UB report, timeout or out-of-memory, printing
# the reproducer libFuzzer wrote (build/fuzz/artifacts/<target>/...) and how to rerun it.
#
# New inputs found go to build/fuzz/corpus/<target>/ (never into the repository); to keep the
# interesting ones, merge them by hand:
#   build/fuzz/fuzz_T -merge=1 fuzz/corpus/T build/fuzz/corpus/T
#
# usage: ci/fuzz.sh [SECONDS] [TARGET...]   (TARGET without the fuzz_ prefix; default all)
#        ci/fuzz.sh --build                  (only configure and build; ci/test.sh does this
#                                             while other tests run)
set -euo pipefail
cd "$(dirname "$0")/.."
build_only=0
if [ "${1:-}" = --build ]; then build_only=1; shift; fi

secs=${1:-20}
shift || true
# target:dictionary (empty: none; the wire protocol is binary)
all="scenario:scenario hardware:hardware config_json:json_config safetensors:safetensors
  dataset:jsonl wire: oai_request:oai sse:sse prom:prom"

echo "== fuzz: configure and build (clang, libFuzzer + ASan + UBSan)"
mkdir -p build
CC=clang cmake -S . -B build/fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDCHECK_WERROR=ON \
  -DSHARDCHECK_CUDA=OFF -DSHARDCHECK_BENCH=OFF \
  -DSHARDCHECK_FUZZ=ON >build/fuzz.configure.log 2>&1 || { cat build/fuzz.configure.log; exit 1; }
cmake --build build/fuzz -j"$(nproc)" --target fuzz_all
[ $build_only -eq 0 ] || exit 0

export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1"
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# the targets that take a path write each input to a file: in memory, not through the disk (on
# the CI kind, with /tmp on disk, fuzz_safetensors spent 473 of 646 CPU seconds in the kernel)
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then export TMPDIR=/dev/shm; fi
failed=0
for entry in $all; do
  t=${entry%%:*}
  d=${entry#*:}
  if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qx "$t"; then continue; fi
  work=build/fuzz/corpus/$t
  art=build/fuzz/artifacts/$t/
  mkdir -p "$work" "$art"
  args=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536
    -artifact_prefix="$art" -print_final_stats=1)
  [ -n "$d" ] && args+=(-dict="fuzz/dict/$d.dict")
  log=build/fuzz/$t.log
  echo "== fuzz_$t: ${secs}s"
  rc=0
  "build/fuzz/fuzz_$t" "${args[@]}" "$work" "fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  grep -E '^#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units|stat::peak_rss_mb' "$log" || true
  if [ $rc -ne 0 ]; then
    failed=1
    grep -E 'ERROR: |SUMMARY: |runtime error:|Test unit written to|ALARM' "$log" | head -20 || true
    unit=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    echo "== fuzz_$t FAILED (exit $rc; log $log)"
    if [ -n "$unit" ]; then echo "   reproduce: build/fuzz/fuzz_$t $unit"; fi
  fi
done
[ $failed -eq 0 ] || { echo "== fuzz: failures above"; exit 1; }
echo "== fuzz: every target ran ${secs}s without a finding"
