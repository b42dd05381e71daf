#!/usr/bin/env bash
# The regression gate of a CI pipeline, runnable as it is on a laptop: installs what is missing
# (ci/setup.sh), builds shardcheck (as ci/quickstart.sh does), runs the gate scenarios into a
# results database that keeps every earlier run, compares each new run with its scenario's
# baseline (`shardcheck gate`), writes gate.xml (JUnit) and the reports, and with
# --mark-baseline makes the new runs the baselines when the gate passed. docs/ci.md explains
# it; ci/examples/ holds a GitHub Actions and a GitLab CI pipeline that call it.
#
#   ci/gate.sh                  gate the current checkout against the baselines in results.db
#   ci/gate.sh --mark-baseline  the same, then mark the new runs as baselines (the main branch)
#
# Environment (all optional):
#   SHARDCHECK_DB     the results database (results.db); keep it between pipelines
#   GATE_OUT          where the reports go (reports/out/gate)
#   GATE_JUNIT        the gate's JUnit file (gate.xml)
#   GATE_REAL         real-CPU scenarios, run --repeat GATE_REPEAT times (scenarios/gate-bench.yaml)
#   GATE_SIM          sim scenarios, run once each (scenarios/rtx5090-70b-int4.yaml)
#   GATE_REPEAT       repetitions of each real scenario (5)
#   GATE_ACCEPT=1     with --mark-baseline: mark the new runs even though the gate failed (a
#                     regression accepted on purpose)
#   GATE_ACCEPT_IMPROVEMENTS=1  gate with --accept-improvements: sim metrics better past the
#                     tolerance pass (a change made on purpose) instead of failing as CHANGED
#   GATE_BUILD        the build directory (build/release, as ci/quickstart.sh)
#   SHARDCHECK_GIT_REV  the revision stored with each run (default: git rev-parse --short HEAD)
#
# Exit code: the gate's. 0: no metric regressed and every SLO held; 1: a metric regressed, is
# missing or changed unasked (sim), or a run did not complete (gate.xml says which), or a
# scenario's SLO failed; 2: bad input (a scenario or the database);
# 3: a run failed. A scenario without a baseline yet is reported and passes (a run that
# did not complete fails all the same).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
}

mark=0
for a in "$@"; do
  case $a in
  --mark-baseline) mark=1 ;;
  -h | --help) usage; exit 0 ;;
  *) echo "ci/gate.sh: unknown argument '$a' (--mark-baseline or --help)" >&2; exit 2 ;;
  esac
done

db=${SHARDCHECK_DB:-results.db}
out=${GATE_OUT:-reports/out/gate}
junit=${GATE_JUNIT:-gate.xml}
real=${GATE_REAL-scenarios/gate-bench.yaml}
sim=${GATE_SIM-scenarios/rtx5090-70b-int4.yaml}
repeat=${GATE_REPEAT:-5}
build=${GATE_BUILD:-build/release}

# --- install and build (each step does nothing when already done)
bash ci/setup.sh
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" --target shardcheck
sc=$build/shardcheck

# The newest run in the database (`shardcheck runs --json`, newest first): "ID SCENARIO".
newest_run() {
  "$sc" runs --db "$db" --json --limit 1 | awk '
    /^ *"id": /       { gsub(/[^0-9]/, "", $2); id = $2 }
    /^ *"scenario": / { sub(/^ *"scenario": "/, ""); sub(/",?$/, ""); if (!s) s = $0 }
    END               { if (id) print id, s }'
}

# --- run the scenarios
mkdir -p "$out"
new_runs=()       # one run id per scenario run here (any run of a repetition group)
scenarios=()      # their names, for the history plots
slo_failed=0
run_scenario() { # FILE, extra run options...
  local file=$1
  shift
  local name
  name=$(basename "$file" .yaml)
  echo
  echo "== shardcheck run $file $*"
  local rc=0
  "$sc" run "$file" --db "$db" --out "$out/$name" --junit "$out/$name/junit.xml" "$@" || rc=$?
  case $rc in
  0) ;;
  1) slo_failed=1 ;;
  *) echo "ci/gate.sh: shardcheck run $file exited $rc: no gate" >&2; exit "$rc" ;;
  esac
  local id scn
  read -r id scn < <(newest_run)
  new_runs+=("$id")
  scenarios+=("$scn")
}
for f in $real; do run_scenario "$f" --repeat "$repeat"; done
for f in $sim; do run_scenario "$f"; done

# --- gate: the latest run of every scenario in the database against its baseline
echo
echo "== shardcheck gate --db $db --junit $junit"
gate=0
accept=()
[ "${GATE_ACCEPT_IMPROVEMENTS:-0}" = 1 ] && accept=(--accept-improvements)
"$sc" gate --db "$db" --junit "$junit" ${accept[@]+"${accept[@]}"} || gate=$?
if [ "$gate" -gt 1 ]; then
  echo "ci/gate.sh: shardcheck gate exited $gate" >&2
  exit "$gate"
fi

# --- the history of each scenario: its metrics over every run in the database
for scn in "${scenarios[@]}"; do
  "$sc" report --db "$db" --history "$scn" --out "$out/history-$scn" ||
    echo "ci/gate.sh: warning: no history plots for $scn" >&2
done

# --- the main branch: the new runs become the baselines
if [ "$mark" = 1 ]; then
  if [ "$gate" = 0 ] || [ "${GATE_ACCEPT:-0}" = 1 ]; then
    for id in "${new_runs[@]}"; do "$sc" baseline --db "$db" --run "$id"; done
  else
    echo "ci/gate.sh: the gate failed: the baselines stay (GATE_ACCEPT=1 accepts the change)" >&2
  fi
fi

rc=$gate
[ "$rc" = 0 ] && [ "$slo_failed" = 1 ] && rc=1
echo
echo "database: $db"
echo "gate:     $junit (exit $gate)"
echo "reports:  $out/*/index.html, $out/history-*/history.html"
[ "$slo_failed" = 1 ] && echo "slo:      a scenario's SLO failed (see $out/*/junit.xml)"
exit "$rc"
