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

bash ci/setup.sh

echo "== layers: every include points down a floor"
bash ci/layers.sh

jobs=$(nproc)
mkdir -p build

build() { # dir, extra cmake args...
  local dir=$1
  shift
  echo "== $dir: configure and build"
  cmake -S . -B "build/$dir" -DSHARDCHECK_WERROR=ON "$@" >"build/$dir.configure.log" 2>&1 ||
    { cat "build/$dir.configure.log"; return 1; }
  grep "shardcheck:" "build/$dir.configure.log" || true
  cmake --build "build/$dir" -j"$jobs"
}

# Runs ctest in build/$1 (more ctest args after), keeps the log, fails on sanitizer reports.
run_tests() {
  local dir=$1
  shift
  echo "== $dir: tests"
  local rc=0
  ctest --test-dir "build/$dir" --output-on-failure "$@" 2>&1 | tee "build/$dir.test.log" || rc=$?
  if grep -qE 'ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer|runtime error:' \
    "build/$dir.test.log"; then
    echo "== $dir: sanitizer reports found (see build/$dir.test.log)"
    return 1
  fi
  return $rc
}

build release -DCMAKE_BUILD_TYPE=RelWithDebInfo
run_tests release
# The Debian packages of that build, installed with apt-get and run from outside the checkout,
# then removed (the DESTDIR install is a test of its own above: tests/install.sh).
bash ci/package.sh build/release

# Under the sanitizers every test but the three bash ones that check the tool as shipped (the
# install tree, the completion, the README's commands): what they check is files, paths and
# documented commands, not memory or threads, so they run once, on the release build above.
build asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDCHECK_SANITIZE=address,undefined
ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp" \
  UBSAN_OPTIONS=print_stacktrace=1 run_tests asan -E '^(install|completion|readme)$'

build tsan -DCMAKE_BUILD_TYPE=Debug -DSHARDCHECK_SANITIZE=thread
# test_mpi is not among them: its ranks are processes (what TSan sees of them is one thread
# each plus Open MPI's own progress threads, uninstrumented, which TSan reports on its own);
# it runs under ASan + UBSan above, leaks checked (tests/lsan.supp).
TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/tests/tsan.supp" run_tests tsan -R '^test_(comm|engine|faults_engine|quant|recorder|replica_http|serve|serve_client)$'
# The profile's step-overhead replicas (threads side by side) under TSan: the test that measures
# every layout of tp 1,2,4. Its other tests compare timings, which TSan's slowdown makes noise.
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

# Every parser of user or network input under libFuzzer (clang, ASan + UBSan) for a short fixed
# time each over the corpus kept in fuzz/corpus/: 9 targets x 10 s, plus the clang build (the
# corpus carries what longer runs reached, so a short run starts from there).
bash ci/fuzz.sh 10

echo "== all suites passed"
