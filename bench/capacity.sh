#!/usr/bin/env bash
# Capacity search speed (docs/benchmarks.md "Capacity search"): `shardcheck capacity` over the
# workload of bench/bench_sim.c (llama3-8b, prompts 128-1024, outputs 32-256, Poisson; 120
# simulated seconds per probe) on up to 4 H100 SXM and 4 H200 (24 layouts) with 6 bisection
# steps (8 rates per layout), rates 5..320 req/s, target 40.
#   bench/capacity.sh [BUILD_DIR] [REPEATS]
# Prints one table row per repeat: wall seconds, simulations, layouts, seconds per simulation.
set -euo pipefail
BUILD=${1:-build/release}
N=${2:-1}
BIN=$BUILD/shardcheck
[ -x "$BIN" ] || { echo "capacity.sh: $BIN not found (build first)" >&2; exit 2; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
echo "| repeat | wall s | simulations | layouts | s / simulation |"
echo "|---|---|---|---|---|"
for i in $(seq 1 "$N"); do
  t0=$(date +%s.%N)
  "$BIN" capacity scenarios/capacity/llama3-8b-h100.yaml --gpus h100-sxm:4,h200:4 \
    --rate 40 --rate-range 5:320 --iters 6 --db "$T/c$i.db" --out "$T/r$i" --quiet >"$T/out$i"
  t1=$(date +%s.%N)
  sims=$(sqlite3 "$T/c$i.db" "SELECT count(*) FROM capacity_point")
  lays=$(sqlite3 "$T/c$i.db" "SELECT count(*) FROM capacity_layout")
  awk -v i="$i" -v a="$t0" -v b="$t1" -v s="$sims" -v l="$lays" \
    'BEGIN { printf "| %d | %.1f | %d | %d | %.3f |\n", i, b - a, s, l, (b - a) / s }'
done
tail -1 "$T/out$N"
