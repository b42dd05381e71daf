#!/usr/bin/env bash
# What CI runs (.ci/run) and what the README shows: set-up, a warnings-as-errors build with
# every test and its Debian packages installed and run (ci/package.sh), the same tests under
# AddressSanitizer + UndefinedBehaviorSanitizer, then the
# threaded tests (communicator, engine, profile, the runner's end-to-end runs, the HTTP server) under
# ThreadSanitizer, then every input parser under libFuzzer for a short fixed time (ci/fuzz.sh).
#
# Criterion does not fail a test on a LeakSanitizer report or on a TSan report without
# halt_on_error, so sanitizer logs are also searched for reports.
set -euo pipefail
cd "$(dirname "$0")/.."

# How long each stage took, printed as it ends and all together when the script exits (a CI log
# is often read from its end).
t_start=$(date +%s)
mkdir -p build
: >build/ci-times.txt
took() { # $1: when the stage began (seconds since the epoch), $2: its name
  local line
  line="$2: $(($(date +%s) - $1)) s"
  echo "== took $line"
  echo "$line" >>build/ci-times.txt
}
# (and the background builds below are stopped if the script ends before them)
sanitizer_builds=""
trap 'echo "== stage times (total $(($(date +%s) - t_start)) s)"; cat build/ci-times.txt
  [ -z "$sanitizer_builds" ] || kill -- "-$sanitizer_builds" 2>/dev/null || true' EXIT

t0=$(date +%s)
bash ci/setup.sh
took "$t0" setup

echo "== layers: every include points down a floor"
bash ci/layers.sh

jobs=$(nproc)

build() { # dir, extra cmake args... (TARGETS: what to build; default all)
  local dir=$1 t0
  t0=$(date +%s)
  shift
  echo "== $dir: configure and build"
  cmake -S . -B "build/$dir" -DSHARDCHECK_WERROR=ON "$@" >"build/$dir.configure.log" 2>&1 ||
    { cat "build/$dir.configure.log"; return 1; }
  grep "shardcheck:" "build/$dir.configure.log" || true
  local targets=()
  for t in ${TARGETS:-}; do targets+=(--target "$t"); done
  cmake --build "build/$dir" -j"$jobs" "${targets[@]}"
  took "$t0" "$dir build"
}

# Runs ctest in build/$1 (more ctest args after), keeps the log, fails on sanitizer reports.
run_tests() {
  local dir=$1
  shift
  echo "== $dir: tests"
  local rc=0 t0
  t0=$(date +%s)
  ctest --test-dir "build/$dir" --output-on-failure "$@" 2>&1 | tee "build/$dir.test.log" || rc=$?
  took "$t0" "$dir tests"
  if grep -qE 'ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer|runtime error:' \
    "build/$dir.test.log"; then
    echo "== $dir: sanitizer reports found (see build/$dir.test.log)"
    return 1
  fi
  return $rc
}

build release -DCMAKE_BUILD_TYPE=RelWithDebInfo

# The sanitizer and fuzz builds are compiled while the release tests run, at the lowest CPU
# priority: most of those tests wait on real time (a scenario's holds), and what they do compute
# must keep its verdicts on a busy host anyway (docs/benchmarks.md, "A busy host"). The builds
# take what the tests leave; their output goes to build/sanitizer-builds.log, printed if one fails.
# The sanitizer builds leave out what they never run: the benchmarks, and the CUDA backend
# (its kernels need a GPU; the release build above compiles it with warnings as errors).
nosan=(-DSHARDCHECK_BENCH=OFF -DSHARDCHECK_CUDA=OFF)
# test_mpi is not among the TSan tests: its ranks are processes (what TSan sees of them is one
# thread each plus Open MPI's own progress threads, uninstrumented, which TSan reports on its
# own); it runs under ASan + UBSan, leaks checked (tests/lsan.supp).
# Under TSan only what runs there: the binary, and the tests named below.
tsan_tests="comm engine faults_engine quant recorder replica_http serve serve_client"
set -m # its own process group, so that the trap above can stop the compilers too
(
  renice -n 19 -p "$BASHPID" >/dev/null
  build asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDCHECK_SANITIZE=address,undefined \
    "${nosan[@]}"
  TARGETS="shardcheck $(printf 'test_%s ' $tsan_tests profile run http http_faults)" \
    build tsan -DCMAKE_BUILD_TYPE=Debug -DSHARDCHECK_SANITIZE=thread "${nosan[@]}"
  t0=$(date +%s)
  bash ci/fuzz.sh --build
  took "$t0" "fuzz build"
) >build/sanitizer-builds.log 2>&1 &
sanitizer_builds=$!
set +m

run_tests release
# The Debian packages of that build, installed with apt-get and run from outside the checkout,
# then removed (the DESTDIR install is a test of its own above: tests/install.sh).
t0=$(date +%s)
bash ci/package.sh build/release
took "$t0" package

t0=$(date +%s)
echo "== waiting for the sanitizer and fuzz builds"
if ! wait "$sanitizer_builds"; then
  tail -n 60 build/sanitizer-builds.log
  echo "== the sanitizer or fuzz builds failed (build/sanitizer-builds.log)"
  exit 1
fi
grep -E '^== took|shardcheck:' build/sanitizer-builds.log || true
sanitizer_builds=""
took "$t0" "waiting for the sanitizer and fuzz builds"

# Under the sanitizers every test but the three bash ones that check the tool as shipped (the
# install tree, the completion, the README's commands): what they check is files, paths and
# documented commands, not memory or threads, so they run once, on the release build above.
ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp" \
  UBSAN_OPTIONS=print_stacktrace=1 run_tests asan -E '^(install|completion|readme)$'

TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/tests/tsan.supp" run_tests tsan \
  -R "^test_($(echo $tsan_tests | tr ' ' '|'))\$"
# The profile's step-overhead replicas (threads side by side) under TSan: the test that measures
# every layout of tp 1,2,4. Its other tests compare timings, which TSan's slowdown makes noise.
t0=$(date +%s)
echo "== tsan: profile replicas"
TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/tests/tsan.supp" build/tsan/test_profile \
  --filter 'profile/written_file*' 2>&1 | tee build/tsan.profile.log
# The runner's threads (replicas, recorder) under TSan: the short end-to-end runs; the binary
# they start inherits TSAN_OPTIONS, and a report makes the test fail.
echo "== tsan: end-to-end runs"
TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/tests/tsan.supp" build/tsan/test_run --jobs 1 \
  --filter 'run/@(passing|an_slo|requests_past|ctrl_c)*' 2>&1 | tee build/tsan.run.log

# HTTP replicas (a libcurl thread per replica, launched stand-in servers) under TSan: every test
# of the file is short; the binary it runs inherits TSAN_OPTIONS. Then faults on launched serve
# replicas (the replica's watching thread, relaunches on the supervisor, scrapes): about 80 s.
echo "== tsan: HTTP replicas"
TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/tests/tsan.supp" build/tsan/test_http --jobs 1 \
  2>&1 | tee build/tsan.http.log
TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/tests/tsan.supp" build/tsan/test_http_faults \
  --jobs 1 2>&1 | tee build/tsan.http_faults.log

took "$t0" "tsan: profile, runs, HTTP"

# Every parser of user or network input under libFuzzer (clang, ASan + UBSan) for a short fixed
# time each over the corpus kept in fuzz/corpus/: 9 targets x 10 s, plus the clang build (the
# corpus carries what longer runs reached, so a short run starts from there).
t0=$(date +%s)
bash ci/fuzz.sh 10
took "$t0" "fuzz build and runs"

echo "== all suites passed"
