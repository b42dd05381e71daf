#!/usr/bin/env bash
# First run on a fresh Debian machine: installs what is missing, builds shardcheck, then runs
# the main job on the embedded defaults: scenarios/quickstart.yaml (CPU backend, llama-small
# with generated weights, 1x/2x/4x by DP and by TP under a concurrency ramp) into a SQLite
# file, with the plots, index.html and the verdict. About two minutes on 2 cores.
#
# Exit code: the run's (0 every SLO holds, 1 an SLO failed, 2 bad input, 3 the run failed).
set -euo pipefail
cd "$(dirname "$0")/.."

bash ci/setup.sh
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build/release -j"$(nproc)" --target shardcheck
sc=build/release/shardcheck

db=results.db
out=reports/out/quickstart
echo
echo "== shardcheck validate scenarios/quickstart.yaml"
$sc validate scenarios/quickstart.yaml
echo
echo "== shardcheck run scenarios/quickstart.yaml --db $db --out $out"
rc=0
$sc run scenarios/quickstart.yaml --db "$db" --out "$out" --junit "$out/junit.xml" || rc=$?
echo
echo "database:   $db   (shardcheck runs --db $db; sqlite3 $db)"
echo "report:     $out/index.html"
echo "plots:      $(ls "$out"/*.png 2>/dev/null | tr '\n' ' ')"
echo "junit:      $out/junit.xml"
exit $rc
