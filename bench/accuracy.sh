#!/usr/bin/env bash
# Simulator accuracy on the CPU: each scenario runs on the real CPU engine, then in sim mode
# with a CPU hardware profile (default: the embedded `cpu`, measured by `shardcheck profile`),
# into one database per scenario; `shardcheck report` over both runs prints predicted vs
# measured per deployment and phase with the relative error. Numbers go to
# docs/benchmarks.md with the machine. Run it on an otherwise idle machine: the real runs
# are timed on the wall clock.
#
# usage: bench/accuracy.sh [SCENARIO.yaml ...]   (default: quickstart and mixed-prompts)
# env:   BIN (default build/shardcheck), PROFILE (default cpu), OUT (default
#        /tmp/shardcheck-accuracy)
set -euo pipefail
BIN=${BIN:-build/shardcheck}
PROFILE=${PROFILE:-cpu}
OUT=${OUT:-/tmp/shardcheck-accuracy}
if [ $# -eq 0 ]; then set -- scenarios/quickstart.yaml scenarios/mixed-prompts.yaml; fi
mkdir -p "$OUT"
for sc in "$@"; do
  name=$(basename "$sc" .yaml)
  db="$OUT/$name.db"
  rm -f "$db" "$db-wal" "$db-shm"
  echo "== $name: real run" >&2
  "$BIN" run "$sc" --db "$db" --quiet --no-report >/dev/null || true
  echo "== $name: sim run (profile $PROFILE)" >&2
  "$BIN" run "$sc" --mode sim --profile "$PROFILE" --db "$db" --quiet --no-report >/dev/null || true
  echo "== $name: predicted (run 2) vs measured (run 1)"
  "$BIN" report --db "$db" --run 2 --run 1 --out "$OUT/$name-report"
done
