#!/usr/bin/env bash
# A long simulated run end to end, as a user runs it (docs/benchmarks.md, "A long run end to
# end"): the workload of bench/bench_sim.c (llama3-8b bf16 on 4 simulated H100 SXM as dp 4,
# Poisson arrivals at 10 requests/s, prompts uniform in [128, 1024], outputs in [32, 256]) as a
# scenario file, then for each recording level and repeat:
#
#   run      `shardcheck run FILE --db X --out DIR`: the run and its report, until it returns
#   report   `shardcheck report --db X --run 1 --out DIR2` on the file the run wrote
#
# each timed by /usr/bin/time: wall seconds, CPU seconds (user + sys, gnuplot included) and
# peak resident memory; x real time (of a run) is the simulated seconds over its wall (or CPU)
# seconds.
# The load average is printed beside each row: on a shared host, compare CPU seconds.
#
#   bench/run_report.sh [SHARDCHECK] [REPEATS] [LEVELS]
#     SHARDCHECK  the binary (default build/release/shardcheck); several, comma-separated, run
#                 interleaved (repeat 1 of each, then repeat 2 of each, ...)
#     REPEATS     default 1
#     LEVELS      comma-separated recording levels (default tokens,requests)
#   HOURS=H       simulated hours (default 1); DIR=PATH where the files go (default a temporary
#                 folder, removed at the end)
set -euo pipefail
BINS=${1:-build/release/shardcheck}
N=${2:-1}
LEVELS=${3:-tokens,requests}
HOURS=${HOURS:-1}
[ -x /usr/bin/time ] || { echo "run_report.sh: /usr/bin/time is needed" >&2; exit 2; }
IFS=, read -r -a bins <<<"$BINS"
IFS=, read -r -a levels <<<"$LEVELS"
for b in "${bins[@]}"; do
  [ -x "$b" ] || { echo "run_report.sh: $b not found (build first)" >&2; exit 2; }
done
if [ -n "${DIR:-}" ]; then
  T=$DIR
  mkdir -p "$T"
else
  T=$(mktemp -d)
  trap 'rm -rf "$T"' EXIT
fi
secs=$(awk -v h="$HOURS" 'BEGIN { printf "%d", h * 3600 }')

echo "host: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) CPUs, \
$(grep -o -m1 avx512f /proc/cpuinfo || echo 'no avx512f'); $HOURS h simulated"
echo "| binary | level | repeat | part | wall s | CPU s | x real time (wall) | x real time (CPU) \
| peak RSS MB | load average |"
echo "|---|---|---|---|---:|---:|---:|---:|---:|---|"

# row BIN LEVEL REPEAT PART TIMEFILE: one table row from /usr/bin/time's "%e %U %S %M" line.
row() {
  local load
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  read -r wall user sys rss <"$5"
  awk -v b="$1" -v l="$2" -v i="$3" -v p="$4" -v w="$wall" -v u="$user" -v s="$sys" \
    -v m="$rss" -v sim="$secs" -v ld="$load" 'BEGIN {
      c = u + s
      xw = p == "run" ? sprintf("%.0f", sim / w) : "-"
      xc = p == "run" ? sprintf("%.0f", sim / c) : "-"
      printf "| %s | %s | %d | %s | %.2f | %.2f | %s | %s | %.0f | %s |\n",
             b, l, i, p, w, c, xw, xc, m / 1024, ld }'
}

for level in "${levels[@]}"; do
  yaml=$T/bench-sim-$level.yaml
  cat >"$yaml" <<EOF
name: bench-sim
mode: sim
model: {preset: llama3-8b, dtype: bf16}
hardware: {profile: h100-sxm, gpus: 4}
deployments: [{tp: 1, pp: 1, dp: 4}]
workload:
  prompts:
    - {input: {uniform: [128, 1024]}, output: {uniform: [32, 256]}}
  phases:
    - {name: steady, rate: 10, arrival: poisson, duration: ${secs}s}
limits: {request_timeout: 600s}
seed: 1
record: $level
EOF
  for i in $(seq 1 "$N"); do
    for k in "${!bins[@]}"; do
      bin=${bins[$k]}
      db=$T/b$k-$level-$i.db
      rm -f "$db" "$db-wal" "$db-shm"
      /usr/bin/time -f "%e %U %S %M" -o "$T/time" "$bin" run "$yaml" --db "$db" \
        --out "$T/run-b$k-$level-$i" --quiet >"$T/out" 2>&1 ||
        { cat "$T/out" >&2; exit 1; }
      row "$bin" "$level" "$i" run "$T/time"
      /usr/bin/time -f "%e %U %S %M" -o "$T/time" "$bin" report --db "$db" --run 1 \
        --out "$T/report-b$k-$level-$i" >"$T/out" 2>&1 || { cat "$T/out" >&2; exit 1; }
      row "$bin" "$level" "$i" report "$T/time"
      [ -n "${DIR:-}" ] || rm -rf "$db" "$db-wal" "$db-shm" "$T/run-b$k-$level-$i" \
        "$T/report-b$k-$level-$i"
    done
  done
done
