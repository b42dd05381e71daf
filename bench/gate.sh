#!/usr/bin/env bash
# Benchmark of the regression gate (`shardcheck gate`, docs/gate.md): how often it flags an
# unchanged build, and how often it catches a slowdown, on the real CPU engine and in sim mode.
#
# Real mode: records GATE_BENCH_UNCHANGED (40) repetitions of scenarios/gate-bench.yaml as it
# is and GATE_BENCH_SLOWED (20) of a copy with a `slow` fault on its only rank for the whole
# run (factor GATE_BENCH_FACTOR, 1.1: "10% slower"), in groups of GATE_BENCH_GROUP (5), then
# gates (`shardcheck gate --json`). The groups are recorded interleaved by default (G rounds of
# one repetition of every group, `shardcheck run --group`, so that every group spans the whole
# recording and slow drift of the machine falls on all of them alike), or with
# GATE_BENCH_ORDER=grouped one group after another (`run --repeat G`), as a baseline recorded
# on an earlier day and a current group recorded now would be. Then:
#   - unchanged vs unchanged: every ordered pair of two different unchanged groups (baseline,
#     current): the fraction of metric comparisons flagged REGRESSED (target < 1%);
#   - slowed vs unchanged: every slowed group against every unchanged group: the fraction of
#     TPOT comparisons (tpot_p50_ms, tpot_p95_ms; deployment and phase rows) flagged
#     (target >= 95%), and the slowdown as measured (the median change of TPOT p50).
# The `slow` fault owes (factor - 1) x each device op's time and sleeps it in small quanta
# (kernels/device.c), so factor 1.1 slows the rank's steps by about 10%. The unchanged arm
# carries the same fault planned at 1000 s, after its workload (never injected), so both arms
# run their replica as a worker process. The script prints the TPOT slowdown it measured
# between the two, which is what the detection rate is a rate of.
# Sim mode (deterministic): a small fixed-load sim scenario, its baseline, GATE_BENCH_SIM_RERUNS
# (3) unchanged reruns (target: nothing flagged) and one run on a copy of its hardware profile
# made 2% slower (bandwidths and FLOP/s / 1.02, latencies and overheads x 1.02: every priced
# step takes 2% longer; target: every TPOT comparison flagged at the sim tolerance of 1%).
#
# The full benchmark takes about 25 minutes of a 2-core machine (60 runs of ~22 s) and wants
# the machine to itself: anything else running shows up as noise between repetitions.
#   bench/gate.sh
# A quick check that it works (four runs of a 4 s variant, one repetition a side, so the gate
# judges by its tolerance alone; about 30 s):
#   GATE_BENCH_UNCHANGED=2 GATE_BENCH_SLOWED=2 GATE_BENCH_GROUP=1 GATE_BENCH_HOLD=4s \
#     GATE_BENCH_WARMUP=500ms bench/gate.sh
#
# Environment: GATE_BENCH_UNCHANGED, GATE_BENCH_SLOWED, GATE_BENCH_GROUP (both counts must be
# multiples of it, with at least 2 unchanged groups), GATE_BENCH_HOLD and GATE_BENCH_WARMUP
# (replace the scenario's 20s hold and 2s warm-up), GATE_BENCH_FACTOR, GATE_BENCH_SIM_RERUNS,
# GATE_BENCH_ORDER (interleaved or grouped), GATE_BENCH_DIR (where the database, scenarios and
# logs go; default a new /tmp directory, kept), GATE_BUILD (build/release). Needs jq. Exit code: 0 every target met, 1 one missed, 2 bad
# settings, 3 a run or gate failed.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -gt 0 ]; then # settings come from the environment; --help prints the comment above
  if [ "$1" = -h ] || [ "$1" = --help ]; then
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
  fi
  echo "bench/gate.sh: no arguments (settings are environment variables; see --help)" >&2
  exit 2
fi

U=${GATE_BENCH_UNCHANGED:-40}
S=${GATE_BENCH_SLOWED:-20}
G=${GATE_BENCH_GROUP:-5}
HOLD=${GATE_BENCH_HOLD:-}
WARMUP=${GATE_BENCH_WARMUP:-}
FACTOR=${GATE_BENCH_FACTOR:-1.1}
SIM_RERUNS=${GATE_BENCH_SIM_RERUNS:-3}
ORDER=${GATE_BENCH_ORDER:-interleaved}
build=${GATE_BUILD:-build/release}

fail() { # CODE, message
  echo "bench/gate.sh: $2" >&2
  exit "$1"
}
command -v jq >/dev/null || fail 2 "needs jq (apt-get install jq)"
[ "$ORDER" = interleaved ] || [ "$ORDER" = grouped ] ||
  fail 2 "GATE_BENCH_ORDER must be interleaved or grouped, got '$ORDER'"
for v in "$U" "$S" "$G" "$SIM_RERUNS"; do
  [[ $v =~ ^[0-9]+$ ]] || fail 2 "counts must be integers, got '$v'"
done
((G >= 1 && U % G == 0 && S % G == 0 && U / G >= 2 && S / G >= 1)) ||
  fail 2 "GATE_BENCH_UNCHANGED ($U) and GATE_BENCH_SLOWED ($S) must be multiples of" \
    "GATE_BENCH_GROUP ($G), with at least 2 unchanged groups and 1 slowed group"

if [ ! -x "$build/shardcheck" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" -j"$(nproc)" --target shardcheck
fi
sc=$build/shardcheck
work=${GATE_BENCH_DIR:-$(mktemp -d /tmp/gate-bench.XXXXXX)}
mkdir -p "$work"
db=$work/bench.db
log=$work/bench.log
rm -f "$db" "$db-wal" "$db-shm"
: >"$log"
echo "bench/gate.sh: database, scenarios and logs in $work"

# --- the scenarios
base=$work/gate-bench.yaml
slow=$work/gate-bench-slow.yaml
cp scenarios/gate-bench.yaml "$base"
if [ -n "$HOLD" ]; then
  grep -q 'hold: 20s' "$base" || fail 2 "scenarios/gate-bench.yaml has no 'hold: 20s' to replace"
  sed -i "s/hold: 20s/hold: $HOLD/" "$base"
fi
if [ -n "$WARMUP" ]; then
  grep -q 'warmup: 2s' "$base" || fail 2 "scenarios/gate-bench.yaml has no 'warmup: 2s' to replace"
  sed -i "s/warmup: 2s/warmup: $WARMUP/" "$base"
fi
fault="faults: [{at: 0s, slow: {on: rank, factor: $FACTOR}, target: replica0.rank0}]"
sed "s/^seed:/$fault\nseed:/" "$base" >"$slow"
# A scenario with faults runs its replica as a worker process, one without as a thread of the
# runner; the unchanged arm gets the same fault planned after its workload has ended (never
# injected), so both arms run the same way and differ only by the slowdown.
late="faults: [{at: 1000s, slow: {on: rank, factor: $FACTOR}, target: replica0.rank0}]"
sed -i "s/^seed:/$late\nseed:/" "$base"
grep -q '^faults:' "$slow" || fail 2 "could not add the slow fault (no 'seed:' line)"

simscn=$work/gate-sim-check.yaml
simhw=$work/h100-sxm-2pct-slower.yaml
cat >"$simscn" <<'EOF'
# bench/gate.sh's sim check: a fixed number of requests at a fixed concurrency, so a uniformly
# slower device stretches the whole run in time and changes no scheduling decision.
name: gate-sim-check
model: {preset: llama3-8b, dtype: bf16}
mode: sim
hardware: {profile: h100-sxm, gpus: 2}
deployments:
  - {tp: 1}
  - {tp: 2}
  - {dp: 2}
workload:
  prompts:
    - {input: {uniform: [128, 1024]}, output: {uniform: [32, 128]}}
  phases:
    - {fixed: {requests: 200, concurrency: 16}}
seed: 5
EOF
awk -v f=1.02 '
  $1 ~ /^(mem_bw|flops_(bf16|fp16|fp32|int8)|link_bw):$/ { printf "%s %.9g\n", $1, $2 / f; next }
  $1 ~ /^(launch_s|step_overhead_s|link_latency_s):$/    { printf "%s %.9g\n", $1, $2 * f; next }
  $1 == "name:" { print "name: h100-sxm-2pct-slower"; next }
  { print }' scenarios/hardware/h100-sxm.yaml >"$simhw"
for f in "$base" "$slow" "$simscn"; do
  "$sc" validate "$f" >>"$log" 2>&1 || fail 2 "$f: invalid (see $log)"
done

# --- recording
newest_run() { "$sc" runs --db "$db" --json --limit 1 | jq -r '.runs[0].id'; }

run() { # FILE, run options...: one `shardcheck run`; 0 or 1 (an SLO failed) go on
  local rc=0
  "$sc" run "$@" --db "$db" --no-report --quiet >>"$log" 2>&1 || rc=$?
  [ "$rc" -le 1 ] || fail 3 "shardcheck run $* exited $rc (see $log)"
}

# Grouped: each group's G repetitions back to back (`run --repeat G`), the groups one after
# another. Interleaved: G rounds, each one repetition of every group (`run --group`), the
# order rotated by one group per round: every group then spans the whole recording, and the
# machine's drift falls on all groups alike instead of on some.
groups_files=()
groups_ids=()
record_grouped() {
  local i t0
  for ((i = 0; i < ${#groups_files[@]}; i++)); do
    t0=$SECONDS
    run "${groups_files[i]}" --repeat "$G"
    groups_ids[i]=$(newest_run)
    echo "  group $((i + 1))/${#groups_files[@]} ($(basename "${groups_files[i]}" .yaml)," \
      "runs up to ${groups_ids[i]}) in $((SECONDS - t0)) s"
  done
}
record_interleaved() {
  local n=${#groups_files[@]} r k i t0
  for ((r = 0; r < G; r++)); do
    t0=$SECONDS
    for ((k = 0; k < n; k++)); do
      i=$(((k + r) % n))
      if [ "$r" = 0 ]; then
        run "${groups_files[i]}"
        groups_ids[i]=$(newest_run)
      else
        run "${groups_files[i]}" --group "${groups_ids[i]}"
      fi
    done
    echo "  round $((r + 1))/$G: one repetition of each of the $n groups in $((SECONDS - t0)) s"
  done
}

gate() { # CURRENT-RUN, BASELINE-RUN, JSONL-FILE: appends the gate's JSON as one line
  local rc=0 json
  json=$("$sc" gate --db "$db" --run "$1" --baseline-run "$2" --json 2>>"$log") || rc=$?
  [ "$rc" -le 1 ] || fail 3 "shardcheck gate --run $1 --baseline-run $2 exited $rc (see $log)"
  jq -c . <<<"$json" >>"$3"
}

# Counts over the rows of a JSONL file of gate outputs: "COMPARED FLAGGED NOISE" (REGRESSED,
# worse within noise) for the rows whose metric matches the regex (new and missing rows
# compare nothing and are left out).
count() { # FILE, METRIC-REGEX
  jq -rs --arg re "$2" '[.[].gates[].rows[] | select(.metric | test($re))
      | select(.verdict != "new (no baseline)" and .verdict != "MISSING")]
      | "\(length) \(map(select(.verdict == "REGRESSED")) | length)"
        + " \(map(select(.verdict == "worse within noise")) | length)"' "$1"
}

pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f%%", b ? 100 * a / b : 0 }'; }

t_start=$SECONDS
echo "== recording ($ORDER): $U unchanged + $S slowed repetitions in groups of $G"
for ((g = 0; g < U / G; g++)); do groups_files+=("$base"); done
for ((g = 0; g < S / G; g++)); do groups_files+=("$slow"); done
"record_$ORDER"
unchanged=("${groups_ids[@]:0:U/G}")
slowed=("${groups_ids[@]:U/G}")

echo "== gating"
uu=$work/unchanged-vs-unchanged.jsonl
su=$work/slowed-vs-unchanged.jsonl
: >"$uu"
: >"$su"
for b in "${unchanged[@]}"; do
  for c in "${unchanged[@]}"; do [ "$b" = "$c" ] || gate "$c" "$b" "$uu"; done
done
for c in "${slowed[@]}"; do
  for b in "${unchanged[@]}"; do gate "$c" "$b" "$su"; done
done

echo "== sim check"
sim_base=$work/sim-unchanged.jsonl
sim_slow=$work/sim-slower.jsonl
: >"$sim_base"
: >"$sim_slow"
run "$simscn"
sim0=$(newest_run)
for ((i = 0; i < SIM_RERUNS; i++)); do
  run "$simscn"
  gate "$(newest_run)" "$sim0" "$sim_base"
done
run "$simscn" --profile "$simhw"
gate "$(newest_run)" "$sim0" "$sim_slow"

# --- results
word() { if [ "$1" = 1 ]; then echo "met"; else echo "MISSED"; fi; }
read -r n_uu f_uu w_uu < <(count "$uu" '.')
read -r n_su f_su w_su < <(count "$su" '^tpot_')
read -r n_s50 f_s50 _ < <(count "$su" '^tpot_p50_ms$')
read -r n_s95 f_s95 _ < <(count "$su" '^tpot_p95_ms$')
read -r n_si f_si _ < <(count "$su" '^itl_p50_ms$')
read -r n_sb f_sb _ < <(count "$sim_base" '.')
read -r n_ss f_ss _ < <(count "$sim_slow" '^tpot_')
read -r n_st f_st _ < <(count "$sim_slow" '_ms$|_tok_s$|_rps$')
met_uu=$(awk -v a="$f_uu" -v b="$n_uu" 'BEGIN { print (b > 0 && a < 0.01 * b) ? 1 : 0 }')
met_su=$(awk -v a="$f_su" -v b="$n_su" 'BEGIN { print (b > 0 && a >= 0.95 * b) ? 1 : 0 }')
met_sb=$([ "$n_sb" -gt 0 ] && [ "$f_sb" = 0 ] && echo 1 || echo 0)
met_ss=$([ "$n_ss" -gt 0 ] && [ "$f_ss" = "$n_ss" ] && echo 1 || echo 0)
slowdown=$(jq -rs '[.[].gates[].rows[] | select(.metric == "tpot_p50_ms" and .phase == "")
    | .change | select(. != null)] | sort | if length == 0 then "-" else
    .[length / 2 | floor] * 1000 | round / 10
    | (if . >= 0 then "+" else "" end) + tostring + "%" end' "$su")
g_uu=$(wc -l <"$uu")
g_su=$(wc -l <"$su")

echo
echo "== results ($((SECONDS - t_start)) s; groups of $G, recorded $ORDER; $work)"
printf 'unchanged vs unchanged: %d gates, %d of %d metric comparisons REGRESSED = %s' \
  "$g_uu" "$f_uu" "$n_uu" "$(pct "$f_uu" "$n_uu")"
printf ' (target < 1%%): %s\n' \
  "$(word "$met_uu")"
echo "  $w_uu more worse within noise (past the tolerance, not significant)"
if [ "$f_uu" -gt 0 ]; then
  echo "  flagged: $(jq -rs '[.[].gates[].rows[] | select(.verdict == "REGRESSED")
      | "\(.deployment)/\(if .phase == "" then "(all)" else .phase end)/\(.metric)"]
      | group_by(.) | map("\(.[0]) x\(length)") | join(", ")' "$uu")"
fi
printf 'slowed (slow factor %s) vs unchanged: %d gates, %d of %d TPOT comparisons REGRESSED' \
  "$FACTOR" "$g_su" "$f_su" "$n_su"
printf ' = %s (target >= 95%%): %s\n' "$(pct "$f_su" "$n_su")" "$(word "$met_su")"
minp=""
if [ "$G" -ge 2 ]; then
  minp="; the smallest p of $G against $G: $(awk -v g="$G" \
    'BEGIN { c = 1; for (i = 1; i <= g; i++) c = c * (g + i) / i; printf "%.3g", 1 / c }')"
else
  minp="; one repetition a side: tolerance only"
fi
echo "  measured slowdown: TPOT p50 $slowdown (median change over the gates); $w_su more" \
  "worse within noise (past the tolerance, not significant$minp)"
echo "  by metric: TPOT p50 $f_s50 of $n_s50, TPOT p95 $f_s95 of $n_s95; ITL p50 (the median" \
  "token gap, steadier on a noisy machine: docs/gate.md) $f_si of $n_si = $(pct "$f_si" "$n_si")"
printf 'sim, unchanged reruns: %d of %d comparisons REGRESSED (target: none): %s\n' \
  "$f_sb" "$n_sb" "$(word "$met_sb")"
printf 'sim, profile 2%% slower: %d of %d TPOT comparisons REGRESSED (target: all): %s;' \
  "$f_ss" "$n_ss" "$(word "$met_ss")"
printf ' latency and throughput rows: %d of %d\n' "$f_st" "$n_st"
[ "$met_uu$met_su$met_sb$met_ss" = 1111 ] || exit 1
