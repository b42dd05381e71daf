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
# simulator is deterministic. One report holds them all, so with N >= 2 it ends with the real
# runs against each other (each as if it predicted another): how close one measurement comes to
# the next, the floor under the prediction's errors (docs/reports.md).
#
# PROFILE names the profile the sim run uses: a built-in name, a file, or `measure`, which
# first measures this machine (`shardcheck profile --tp-list 1,2,4`, about 2 minutes, into
# $OUT/cpu-measured.yaml): the shipped `cpu` profile was measured on one machine, and another
# machine of the same kind may be faster or slower (docs/benchmarks.md).
#
# usage: bench/accuracy.sh [SCENARIO.yaml ...]   (default: quickstart and mixed-prompts)
# env:   BIN (default build/shardcheck), PROFILE (default cpu; or a file, or measure), OUT
#        (default /tmp/shardcheck-accuracy), REPEAT (default 1)
set -euo pipefail
BIN=${BIN:-build/shardcheck}
PROFILE=${PROFILE:-cpu}
OUT=${OUT:-/tmp/shardcheck-accuracy}
REPEAT=${REPEAT:-1}
case $REPEAT in '' | *[!0-9]* | 0) echo "accuracy.sh: REPEAT must be a positive integer" >&2; exit 2 ;; esac
if [ $# -eq 0 ]; then set -- scenarios/quickstart.yaml scenarios/mixed-prompts.yaml; fi
mkdir -p "$OUT"
if [ "$PROFILE" = measure ]; then
  PROFILE=$OUT/cpu-measured.yaml
  echo "== measuring this machine into $PROFILE" >&2
  "$BIN" profile --backend cpu --tp-list 1,2,4 --out "$PROFILE" >&2
fi

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
  runs=(--run "$sim")
  for i in $(seq 1 "$REPEAT"); do runs+=(--run "$i"); done
  echo "== $name: predicted (run $sim) vs measured (runs 1 to $REPEAT)"
  "$BIN" report --db "$db" "${runs[@]}" --out "$OUT/$name-report"
done
