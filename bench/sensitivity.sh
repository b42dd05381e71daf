#!/usr/bin/env bash
# How far a scenario's simulated latencies move when every time the cost model prices moves by a
# few percent: the amplification between an error of the hardware profile and the TTFT and TPOT
# errors that bench/accuracy.sh reports. TTFT and TPOT need not move with the prices: a slower
# step changes which requests share a step, and in an open loop near saturation it turns into
# queueing, so the same 2% can move TPOT by several times that, or one deployment's number the
# other way. An accuracy target on such a scenario asks the profile (and the machine it was
# measured on) to be steadier by that factor.
#
# For each scenario and each price change of CHANGES: `shardcheck run --mode sim --sensitivity
# PCT` (docs/simulator.md), which runs it with the profile as it is and with every price x (1 -
# PCT) and x (1 + PCT), and prints each deployment's change of mean TTFT and TPOT and the larger
# change over PCT. Sim runs are deterministic; the default takes about a second.
#
# usage: bench/sensitivity.sh [SCENARIO.yaml ...]   (default: quickstart and mixed-prompts)
# env:   BIN (default build/shardcheck), PROFILE (a profile name or YAML, default cpu),
#        CHANGES (default "2% 5%"), OUT (default /tmp/shardcheck-sensitivity)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/shardcheck}
PROFILE=${PROFILE:-cpu}
CHANGES=${CHANGES:-2% 5%}
OUT=${OUT:-/tmp/shardcheck-sensitivity}
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
if [ $# -eq 0 ]; then set -- scenarios/quickstart.yaml scenarios/mixed-prompts.yaml; fi
mkdir -p "$OUT"
db="$OUT/sensitivity.db" # the sim runs land here; only their printed tables are read
rm -f "$db" "$db-wal" "$db-shm"

for sc in "$@"; do
  name=$(basename "$sc" .yaml)
  for pct in $CHANGES; do
    echo "== $name, profile $PROFILE"
    rc=0
    "$BIN" run "$sc" --mode sim --profile "$PROFILE" --db "$db" --quiet --no-report \
      --sensitivity "$pct" >"$OUT/$name-$pct.txt" || rc=$?
    # 0 or 1 (an SLO failed) ran; anything else did not
    if [ "$rc" -gt 1 ]; then
      cat "$OUT/$name-$pct.txt" >&2
      echo "sensitivity.sh: $sc at $pct failed (exit $rc)" >&2
      exit 3
    fi
    sed -n '/^sensitivity:/,$p' "$OUT/$name-$pct.txt"
  done
done
