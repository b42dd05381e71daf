#!/usr/bin/env bash
# Simulator accuracy on the CPU: each scenario runs on the real CPU engine, then in sim mode
# with a CPU hardware profile (default: the embedded `cpu`, measured by `shardcheck profile`),
# into one database per scenario; `shardcheck report` over both runs prints predicted vs
# measured per deployment and phase with the relative error, and the mean |error| over the
# deployments. Numbers go to docs/benchmarks.md with the machine. Run it on an otherwise idle
# machine: the real runs are timed on the wall clock.
#
# The sim run is made with `--sensitivity 2%`, so the report lists beside each deployment's
# errors how far its predicted TTFT and TPOT move per price change (docs/simulator.md).
#
# With REPEAT=N the real run is repeated N times (runs 1..N, the sim run is N+1) and each is
# compared with the one prediction: the spread of the errors is the machine's, since the
# simulator is deterministic.
#
# usage: bench/accuracy.sh [SCENARIO.yaml ...]   (default: quickstart and mixed-prompts)
# env:   BIN (default build/shardcheck), PROFILE (default cpu), OUT (default
#        /tmp/shardcheck-accuracy), REPEAT (default 1)
set -euo pipefail
BIN=${BIN:-build/shardcheck}
PROFILE=${PROFILE:-cpu}
OUT=${OUT:-/tmp/shardcheck-accuracy}
REPEAT=${REPEAT:-1}
case $REPEAT in '' | *[!0-9]* | 0) echo "accuracy.sh: REPEAT must be a positive integer" >&2; exit 2 ;; esac
if [ $# -eq 0 ]; then set -- scenarios/quickstart.yaml scenarios/mixed-prompts.yaml; fi
mkdir -p "$OUT"

for sc in "$@"; do
  name=$(basename "$sc" .yaml)
  db="$OUT/$name.db"
  rm -f "$db" "$db-wal" "$db-shm"
  for i in $(seq 1 "$REPEAT"); do
    echo "== $name: real run $i of $REPEAT" >&2
    "$BIN" run "$sc" --db "$db" --quiet --no-report >/dev/null || true
  done
  sim=$((REPEAT + 1))
  echo "== $name: sim run (profile $PROFILE)" >&2
  "$BIN" run "$sc" --mode sim --profile "$PROFILE" --db "$db" --quiet --no-report \
    --sensitivity 2% >/dev/null || true
  for i in $(seq 1 "$REPEAT"); do
    echo "== $name: predicted (run $sim) vs measured (run $i)"
    "$BIN" report --db "$db" --run "$sim" --run "$i" --out "$OUT/$name-report-$i"
  done
done
