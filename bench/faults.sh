#!/usr/bin/env bash
# Fault benchmarks (docs/benchmarks.md "Faults"): detection time of kill and hang, recovery
# time of a killed replica with restart, and a 10,000-request cancel storm.
#   bench/faults.sh [BUILD_DIR] [REPEATS]
# Each repeat runs a short real-mode scenario (CPU backend) with the fault at a different time
# and reads the fault row back from the results database. Prints one line per measure.
set -euo pipefail
BUILD=${1:-build}
N=${2:-10}
BIN=$BUILD/shardcheck
[ -x "$BIN" ] || { echo "faults.sh: $BIN not found (build first)" >&2; exit 2; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

scenario() { # name model fault-yaml extra-yaml
  cat > "$T/$1.yaml" <<YAML
name: $1
model: {preset: $2}
hardware: {backend: cpu}
deployments: [{dp: 2}]
workload:
  prompts: [{input: {uniform: [16, 64]}, output: {uniform: [24, 64]}}]
  phases: [{rate: 12, arrival: poisson, duration: 8s}]
faults: [$3]
router: {detect_timeout: 1s}
$4
YAML
}

pct() { # p50 p99 max of the numbers on stdin (ms)
  sort -g | awk '{v[NR]=$1} END {n=NR; if (!n) {print "no data"; exit}
    i50=int(0.5*(n-1))+1; i99=int(0.99*(n-1))+1;
    printf "n=%d p50=%.1f ms p99=%.1f ms max=%.1f ms\n", n, v[i50], v[i99], v[n]}'
}

measure() { # label model fault extra column-expression
  : > "$T/vals"
  for i in $(seq 1 "$N"); do
    at=$(awk -v i="$i" 'BEGIN {printf "%.2fs", 2 + 0.37 * i}')
    scenario "b$i" "$2" "{at: $at, $3}" "$4"
    "$BIN" run "$T/b$i.yaml" --db "$T/r.db" --out "$T/rep" >/dev/null 2>&1 || true
    sqlite3 "$T/r.db" "SELECT ($5) / 1e6 FROM fault WHERE run_id = (SELECT max(id) FROM run)" \
      >> "$T/vals"
  done
  printf '%-44s %s\n' "$1" "$(grep -v '^$' "$T/vals" | pct)"
}

measure "kill replica: detection (detect_timeout 1 s)" llama-tiny \
  "kill: replica, target: replica1" "" "detected_ns - injected_ns"
measure "hang replica: detection (detect_timeout 1 s)" llama-tiny \
  "hang: replica, target: replica1" "" "detected_ns - injected_ns"
measure "kill replica, llama-small: recovery" llama-small \
  "kill: replica, target: replica1" "" "recovered_ns - injected_ns"
sqlite3 "$T/r.db" "SELECT detail FROM fault WHERE run_id = (SELECT max(id) FROM run)" |
  sed 's/^/  last restart: /'

# 10,000 requests in flight (an open-loop burst far above what the replicas serve), then one
# storm cancels all of them: recovered = every cancel acknowledged (KV blocks free).
cat > "$T/storm.yaml" <<YAML
name: storm
model: {preset: llama-tiny}
hardware: {backend: cpu}
deployments: [{dp: 2}]
workload:
  prompts: [{input: 32, output: 200}]
  phases: [{rate: 5000, arrival: constant, requests: 10000}]
faults: [{at: 2.5s, cancel_storm: {count: 10000}}]
limits: {request_timeout: 0s}
YAML
"$BIN" run "$T/storm.yaml" --db "$T/r.db" --out "$T/rep" >/dev/null 2>&1 || true
sqlite3 "$T/r.db" "SELECT 'cancel storm: ' || affected || ' cancelled, KV back to baseline in ' ||
  printf('%.1f', (recovered_ns - injected_ns) / 1e6) || ' ms' FROM fault
  WHERE run_id = (SELECT max(id) FROM run)"
sqlite3 "$T/r.db" "SELECT '  kv_leak_blocks ' || value FROM metric WHERE name = 'kv_leak_blocks'
  AND run_id = (SELECT max(id) FROM run)"
