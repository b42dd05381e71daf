#!/usr/bin/env bash
# How far a scenario's simulated latencies move when every time the cost model prices moves by a
# few percent: the amplification between an error of the hardware profile and the TTFT and TPOT
# errors that bench/accuracy.sh reports. TTFT and TPOT need not move with the factor: a slower
# step changes which requests share a step, and in an open loop near saturation it turns into
# queueing, so the same 2% can move TPOT by several times that, or one deployment's number the
# other way. An accuracy target on such a scenario asks the profile (and the machine it was
# measured on) to be steadier by that factor.
#
# For each scenario: one sim run with the profile as it is and one with each factor of FACTORS
# applied to every time in it (GEMM, attention, all-reduce and step-overhead tables, launch,
# link latency and step overhead times x f; memory and link bandwidths and FLOP/s / f), into
# one database; then `shardcheck gate --json` of each scaled run against the unscaled one gives
# the change of mean TTFT and mean TPOT per deployment, printed with the amplification
# change / (f - 1). Sim runs are deterministic; the default takes about a second.
#
# usage: bench/sensitivity.sh [SCENARIO.yaml ...]   (default: quickstart and mixed-prompts)
# env:   BIN (default build/shardcheck), PROFILE (a profile YAML written by `shardcheck
#        profile`, default scenarios/hardware/cpu.yaml), FACTORS (default "0.95 0.98 1.02
#        1.05"), OUT (default /tmp/shardcheck-sensitivity). Needs jq and perl.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/shardcheck}
PROFILE=${PROFILE:-scenarios/hardware/cpu.yaml}
FACTORS=${FACTORS:-0.95 0.98 1.02 1.05}
OUT=${OUT:-/tmp/shardcheck-sensitivity}
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
command -v jq >/dev/null || { echo "sensitivity.sh: needs jq" >&2; exit 2; }
[ -f "$PROFILE" ] || { echo "sensitivity.sh: no profile file '$PROFILE'" >&2; exit 2; }
for f in $FACTORS; do
  [[ $f =~ ^[0-9]+(\.[0-9]+)?$ ]] && [ "$f" != 1 ] && [ "$f" != 1.00 ] && [ "$f" != 1.0 ] ||
    { echo "sensitivity.sh: FACTORS must be positive numbers other than 1, got '$f'" >&2; exit 2; }
done
if [ $# -eq 0 ]; then set -- scenarios/quickstart.yaml scenarios/mixed-prompts.yaml; fi
mkdir -p "$OUT"

# scale FACTOR SRC DST: SRC with every priced time x FACTOR. Above `gemm:` the scalar keys;
# from it on, the second number of every [x, seconds] pair of the tables.
scale() {
  perl -se '
    my $tables = 0;
    while (<>) {
      $tables = 1 if /^gemm:/;
      if (!/^\s*#/) {
        if ($tables) {
          s/\[\s*([-0-9.eE+]+)\s*,\s*([-0-9.eE+]+)\s*\]/sprintf("[%s, %.6g]", $1, $2 * $f)/ge;
        } else {
          s/^((?:launch_s|step_overhead_s|link_latency_s):\s*)([-0-9.eE+]+)/$1 . sprintf("%.6g", $2 * $f)/e;
          s/^((?:mem_bw|link_bw|flops_\w+):\s*)([-0-9.eE+]+)/$1 . sprintf("%.6g", $2 \/ $f)/e;
          s/^name:.*/name: "scaled-$f"/;
        }
      }
      print;
    }' -- -f="$1" "$2" >"$3"
}

for sc in "$@"; do
  name=$(basename "$sc" .yaml)
  db="$OUT/$name.db"
  rm -f "$db" "$db-wal" "$db-shm"
  "$BIN" run "$sc" --mode sim --profile "$PROFILE" --db "$db" --quiet --no-report >/dev/null
  base=1
  run=1
  echo "== $name: change of mean TTFT and TPOT per deployment, and change / (f - 1), profile $PROFILE"
  printf '%-8s %-12s %8s %10s %10s\n' factor deployment metric change amplif.
  for f in $FACTORS; do
    scaled="$OUT/profile-$f.yaml"
    scale "$f" "$PROFILE" "$scaled"
    "$BIN" run "$sc" --mode sim --profile "$scaled" --db "$db" --quiet --no-report >/dev/null
    run=$((run + 1))
    rc=0
    "$BIN" gate --db "$db" --run "$run" --baseline-run "$base" --json \
      --metric ttft_mean_ms --metric tpot_mean_ms >"$OUT/gate-$name-$f.json" || rc=$?
    [ "$rc" -le 1 ] || { echo "sensitivity.sh: gate failed (exit $rc)" >&2; exit 3; }
    jq -r --arg f "$f" '.gates[0].rows[] | select(.phase == "") |
        [$f, .deployment, (.metric | sub("_mean_ms"; "")), .change * 100,
         .change / (($f | tonumber) - 1)] | @tsv' "$OUT/gate-$name-$f.json" |
      while IFS=$'\t' read -r a b c d e; do
        printf '%-8s %-12s %8s %+9.1f%% %10.2f\n' "$a" "$b" "$c" "$d" "$e"
      done
  done
done
