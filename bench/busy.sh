#!/usr/bin/env bash
# Verdicts on a busy host (docs/benchmarks.md "A busy host"): every shipped real-mode scenario
# that runs on the CPU, N times each, with two CPU-bound loops running beside every run (a CI
# runner is rarely quiet). Prints one markdown table, scenario by scenario: the passes out of
# the runs, the wall time, what failed, and the load average at the end of each run; then the
# spread of recover_ms over the runs of kill-replica (the same kill, repeated).
#
#   bench/busy.sh [--runs N] [--only NAME]... [--bin SHARDCHECK] [--out DIR]
#
#   --runs N     runs of each scenario (default 10)
#   --only NAME  this scenario only (repeatable; default: every shipped one below)
#   --bin PATH   the shardcheck to run (default build/release/shardcheck, copied first so a
#                rebuild during the runs changes nothing)
#   --out DIR    where the databases and logs go (default a temp dir, kept)
# The loops are `sh -c 'while :; do :; done'`, started before each run and killed after it.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=10 OUT="" BIN=build/release/shardcheck
ONLY=()
while [ $# -gt 0 ]; do
  case $1 in
    --runs) RUNS=$2; shift 2 ;;
    --only) ONLY+=("$2"); shift 2 ;;
    --bin) BIN=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "busy.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
SCENARIOS=(clock-jump kill-replica kill-gpu hang-rank slow-link cancel-storm oom hot-swap-int8
  chaos http-faults http-quickstart gate-bench mixed-prompts concurrency-ramp quickstart)
[ ${#ONLY[@]} -gt 0 ] && SCENARIOS=("${ONLY[@]}")
OUT=${OUT:-$(mktemp -d /tmp/shardcheck-busy.XXXXXX)}
mkdir -p "$OUT"
cp "$BIN" "$OUT/shardcheck"
SC=$OUT/shardcheck

# run NAME I: one run beside two CPU-bound loops; appends "name<TAB>rc<TAB>secs<TAB>load<TAB>failed"
run() {
  local name=$1 i=$2 db=$OUT/$1-$2.db log=$OUT/$1-$2.log
  rm -f "$db" "$db-wal" "$db-shm"
  sh -c 'while :; do :; done' &
  local l1=$!
  sh -c 'while :; do :; done' &
  local l2=$!
  local t0 rc=0
  t0=$(date +%s)
  "$SC" run "scenarios/$name.yaml" --db "$db" --no-report --out "$OUT/rep-$name-$i" >"$log" 2>&1 ||
    rc=$?
  kill "$l1" "$l2"
  wait "$l1" "$l2" 2>/dev/null || true
  local failed
  failed=$(sed -n 's/^[^ ]* (.*): FAIL ([0-9]* of [0-9]* SLOs failed: \(.*\))$/\1/p' "$log" |
    tr '\n' ' ')
  [ "$rc" -eq 3 ] && failed="run failed: $(grep -m1 'shardcheck run:' "$log" | cut -c1-80)"
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - t0))" \
    "$(cut -d' ' -f1 /proc/loadavg)" "$failed" >>"$OUT/runs.tsv"
}

for name in "${SCENARIOS[@]}"; do
  for i in $(seq 1 "$RUNS"); do run "$name" "$i"; done
done

echo "| scenario | passed | wall s (min-max) | load at the end (min-max) | failed |"
echo "|---|---|---|---|---|"
for name in "${SCENARIOS[@]}"; do
  awk -F'\t' -v n="$name" '$1 == n {
      runs++; pass += ($2 == 0); w = $3 + 0; l = $4 + 0
      if (runs == 1 || w < wmin) wmin = w; if (w > wmax) wmax = w
      if (runs == 1 || l < lmin) lmin = l; if (l > lmax) lmax = l
      if ($2 != 0) fails = fails (fails ? "; " : "") $5
    } END { printf "| %s | %d/%d | %d-%d | %.1f-%.1f | %s |\n", n, pass, runs, wmin, wmax,
            lmin, lmax, fails ? fails : "-" }' "$OUT/runs.tsv"
done
if ls "$OUT"/kill-replica-*.db >/dev/null 2>&1; then
  echo
  echo "recover_ms of kill-replica's kill, run by run (detect_ms + reload_ms beside it):"
  for db in "$OUT"/kill-replica-*.db; do
    sqlite3 "$db" "SELECT printf('  %.0f ms (detect %.0f, reload %.0f)',
      (SELECT value FROM metric WHERE name = 'recover_ms' AND phase_id IS NULL),
      (SELECT value FROM metric WHERE name = 'detect_ms' AND phase_id IS NULL),
      (SELECT value FROM metric WHERE name = 'reload_ms' AND phase_id IS NULL))" 2>/dev/null || true
  done
fi
echo
echo "runs: $OUT/runs.tsv"
