#!/usr/bin/env bash
# Mutation suite (docs/benchmarks.md "Mutation suite"): how many realistic regressions do the
# shipped scenarios and the gate catch?
#
#   bench/mutants.sh [--only NAME[,NAME...]] [--list] [--out FILE] [--jobs N] [--timeout S]
#                    [--reuse-build] [--cmake-arg ARG]...
#
# Each bench/mutants/NAME.patch is a small regression (a unified diff against this tree) whose
# header names what should catch it:
#   # mutant: <the regression>
#   # where: <file(s)>
#   # catch: scenario <scenario.yaml> [run options]   the verdict of that run should fail (exit 1)
#   # catch: gate <scenario.yaml> [run options]       the gate against a baseline should flag it
#   # catch: capacity <scenario.yaml> [capacity options]  `gate --capacity` against a baseline
#                                                       search should flag it
#   # catch: test <test_name> [criterion filter]      that shipped test, built from the mutated
#                                                       tree, should fail
# For each patch: a scratch copy of the tree (a detached git worktree under a temp dir, removed
# after), git apply, build shardcheck (RelWithDebInfo, CUDA off), then every catch line:
#   scenario: run the shipped scenario with the mutated binary; exit 1 = CAUGHT, 0 = missed,
#             3 with the run recorded as failed (every replica died with no fault injected, or
#             the metrics audit disagreed) = CAUGHT, anything else = error. Each distinct scenario line is also run once with the
#             unmutated build first: a line that already fails there proves nothing and reads
#             "invalid (fails unmutated)".
#   gate:     run the scenario with the mutated binary into a copy of a database holding a
#             baseline of the same line recorded with the unmutated build (recorded once at the
#             start, marked with `shardcheck baseline`; give real-mode lines `--repeat 5`, see
#             docs/gate.md), then `shardcheck gate --run <that run>`; exit 1 = CAUGHT (a run
#             that fails as above is CAUGHT before any gate). The unmutated build is run and
#             gated the same way once first: a line whose unmutated rerun fails the gate reads
#             "invalid (the unmutated rerun fails the gate)" (capacity lines too).
#   capacity: `shardcheck capacity` of the scenario (options as given) with the mutated binary
#             into a copy of a database holding the same search by the unmutated build, then
#             `shardcheck gate --capacity` (the new search against the one before); exit 1 =
#             CAUGHT. A search exits 0 or 1 (whether a layout serves the target); anything
#             else is an error.
#   test:     build the Criterion test tests/<test_name>.c in the mutated tree and run it
#             (--filter <criterion filter> when given; it runs the mutated shardcheck where it
#             calls the binary); a failure = CAUGHT. The unmutated build must pass it, else
#             "invalid (fails unmutated)". For regressions of the checking itself (the gate's
#             own logic), which no run of a scenario can show.
# A mutant is CAUGHT when any of its lines caught it, else MISSED; a patch that no longer
# applies reads NOT APPLIED, one that does not build BUILD FAILED. Prints one markdown table
# (mutant | caught by | verdict | time) and writes it to --out (default
# $TMPDIR/shardcheck-mutants.md), with each build's and run's output under FILE.logs/.
#
#   --only NAMES     run these mutants only (patch file names without .patch, comma-separated;
#                    repeatable)
#   --list           list the mutants with their catch lines, run nothing
#   --out FILE       where the table goes (also printed)
#   --jobs N         build parallelism (default 2)
#   --timeout S      most seconds one run or gate may take (default 600); a mutated run gets
#                    10x the unmutated run of its line, at least 60 s, at most S; past it:
#                    "error (timeout)"
#   --reuse-build    apply each mutant to the unmutated tree in turn (after its baselines and
#                    controls are recorded) and rebuild it incrementally, reverting the patch
#                    after: minutes less per mutant than a fresh tree and build each
#   --cmake-arg ARG  one more option for the cmake configure step (repeatable)
# Runs are sequential (one mutant at a time). Exit codes: 0 the suite ran (MISSED mutants
# included), 2 bad options, 3 the unmutated build failed.
set -euo pipefail

usage() { sed -n '/^#   bench\/mutants.sh/,/^#                    \[--cmake-arg/p' "$0" | sed 's/^# *//' >&2; }
die() { echo "mutants.sh: $*" >&2; exit 2; }

REPO=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
MDIR=$REPO/bench/mutants
ONLY="" LIST=0 REUSE=0 OUT="${TMPDIR:-/tmp}/shardcheck-mutants.md" JOBS=2 TMO=600
CMAKE_ARGS=()
while [ $# -gt 0 ]; do
  case $1 in
    --only) [ $# -ge 2 ] || die "--only needs a mutant name"; ONLY=${ONLY:+$ONLY,}$2; shift 2 ;;
    --reuse-build) REUSE=1; shift ;;
    --list) LIST=1; shift ;;
    --out) [ $# -ge 2 ] || die "--out needs a file"; OUT=$2; shift 2 ;;
    --jobs) if [ $# -lt 2 ] || ! [[ $2 =~ ^[1-9][0-9]*$ ]]; then die "--jobs needs a positive integer"; fi
      JOBS=$2; shift 2 ;;
    --timeout) if [ $# -lt 2 ] || ! [[ $2 =~ ^[1-9][0-9]*$ ]]; then die "--timeout needs seconds (a positive integer)"; fi
      TMO=$2; shift 2 ;;
    --cmake-arg) [ $# -ge 2 ] || die "--cmake-arg needs an argument"; CMAKE_ARGS+=("$2"); shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) usage; die "unknown option '$1'" ;;
  esac
done

shopt -s nullglob
PATCHES=("$MDIR"/*.patch)
[ ${#PATCHES[@]} -gt 0 ] || die "no patches in $MDIR"
if [ -n "$ONLY" ]; then
  PATCHES=()
  IFS=, read -r -a names <<<"$ONLY"
  for n in "${names[@]}"; do
    [ -f "$MDIR/$n.patch" ] || die "no mutant '$n' (see --list)"
    PATCHES+=("$MDIR/$n.patch")
  done
fi

header() { sed -n "s/^# $2: *//p" "$1"; } # header PATCH KEY: the values of that header line
name_of() { basename "$1" .patch; }

if [ "$LIST" = 1 ]; then
  for p in "${PATCHES[@]}"; do
    printf '%s: %s\n  where: %s\n' "$(name_of "$p")" "$(header "$p" mutant)" "$(header "$p" where)"
    header "$p" catch | sed 's/^/  catch: /'
  done
  exit 0
fi

# Every catch line must be "scenario|gate|capacity FILE.yaml [options]" naming a shipped
# scenario, or "test NAME [filter]" naming a shipped test.
for p in "${PATCHES[@]}"; do
  [ -n "$(header "$p" catch)" ] || die "$(name_of "$p"): no '# catch:' line"
  while read -r kind file _; do
    case $kind in
      scenario|gate|capacity)
        [ -f "$REPO/scenarios/$file" ] || die "$(name_of "$p"): no scenario scenarios/$file" ;;
      test) [ -f "$REPO/tests/$file.c" ] || die "$(name_of "$p"): no test tests/$file.c" ;;
      *) die "$(name_of "$p"): catch kind '$kind' (scenario, gate, capacity or test)" ;;
    esac
  done < <(header "$p" catch)
done

mkdir -p "$(dirname "$OUT")"
OUT=$(cd "$(dirname "$OUT")" && pwd)/$(basename "$OUT")
LOGS=$OUT.logs
rm -rf "$LOGS"
mkdir -p "$LOGS"
T=$(mktemp -d "${TMPDIR:-/tmp}/shardcheck-mutants.XXXXXX")
WTS=()
cleanup() {
  for w in "${WTS[@]}"; do git -C "$REPO" worktree remove --force "$w" >/dev/null 2>&1 || true; done
  git -C "$REPO" worktree prune >/dev/null 2>&1 || true
  rm -rf "$T"
}
trap cleanup EXIT

# worktree DIR: a detached scratch copy of HEAD.
worktree() {
  WTS+=("$1")
  git -C "$REPO" worktree add --quiet --detach "$1" HEAD
}
unworktree() {
  git -C "$REPO" worktree remove --force "$1" >/dev/null 2>&1 || rm -rf "$1"
  git -C "$REPO" worktree prune >/dev/null 2>&1 || true
}
# build DIR LOG: builds shardcheck in DIR/build.
build() {
  cmake </dev/null -S "$1" -B "$1/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDCHECK_CUDA=OFF \
    ${CMAKE_ARGS[@]+"${CMAKE_ARGS[@]}"} >"$2" 2>&1 &&
    cmake --build "$1/build" -j"$JOBS" --target shardcheck >>"$2" 2>&1
}
key_of() { echo "$1" | tr -c 'A-Za-z0-9.\n' '_' ; } # a file name for a catch line
latest_run() { sqlite3 "$1" "SELECT max(id) FROM run"; }

# run BIN TREE DB LOG FILE [options]: runs the scenario within LIMIT seconds; prints its exit
# code.
LIMIT=$TMO
run_scenario() {
  local bin=$1 tree=$2 db=$3 log=$4 file=$5 rc=0
  shift 5
  (cd "$tree" && timeout "$LIMIT" "$bin" run "scenarios/$file" "$@" --db "$db" --quiet \
    --no-report) </dev/null >>"$log" 2>&1 || rc=$?
  echo "$rc"
}
# run_capacity BIN TREE DB LOG FILE [options]: a capacity search within LIMIT seconds; prints
# its exit code.
run_capacity() {
  local bin=$1 tree=$2 db=$3 log=$4 file=$5 rc=0
  shift 5
  (cd "$tree" && timeout "$LIMIT" "$bin" capacity "scenarios/$file" "$@" --db "$db" --quiet \
    --out "$T/capacity-out") </dev/null >>"$log" 2>&1 || rc=$?
  echo "$rc"
}
# run_test TREE LOG NAME [filter]: builds test NAME in TREE/build and runs it within LIMIT
# seconds; prints its exit code (-1: it did not build).
run_test() {
  local tree=$1 log=$2 name=$3 filter=${4:-} rc=0
  if ! cmake --build "$tree/build" -j"$JOBS" --target "$name" </dev/null >>"$log" 2>&1; then
    echo -1
    return
  fi
  (cd "$tree" && timeout "$LIMIT" "build/$name" --jobs 1 ${filter:+--filter "$filter"}) \
    </dev/null >>"$log" 2>&1 || rc=$?
  echo "$rc"
}
# gate_control LINE LOG [options]: the unmutated build run again into a copy of LINE's baseline
# database and gated against it: prints the gate's exit code, which must be 0 (a line the
# unmutated build already fails proves nothing).
gate_control() {
  local line=$1 log=$2 kind file db=$T/control-gate.db rc=0
  shift 2
  read -r kind file _ <<<"$line"
  echo "mutants.sh: control gate of '$line' (unmutated build, again)" >&2
  cp "${BASEDB[$line]}" "$db"
  if [ "$kind" = capacity ]; then
    rc=$(run_capacity "$BASEBIN" "$BASE" "$db" "$log" "$file" "$@")
    [ "$rc" -le 1 ] && rc=0
    [ "$rc" = 0 ] && { (cd "$BASE" && "$BASEBIN" gate --capacity --db "$db") </dev/null >>"$log" 2>&1 || rc=$?; }
  else
    rc=$(run_scenario "$BASEBIN" "$BASE" "$db" "$log" "$file" "$@")
    [ "$rc" -le 1 ] && rc=0
    [ "$rc" = 0 ] && { (cd "$BASE" && "$BASEBIN" gate --db "$db" --run "$(latest_run "$db")") \
      </dev/null >>"$log" 2>&1 || rc=$?; }
  fi
  rm -f "$db"
  echo "$rc"
}
# result RC [DB]: the cell of a catch line from an exit code (1 = caught). Exit 3 with DB's
# latest run recorded as failed is the run reporting what broke (every replica died with no
# fault injected, or the metrics disagreed with their rows): caught too, with the run's error.
result() {
  local why=""
  if [ "$1" = 3 ] && [ -n "${2:-}" ] && [ -f "$2" ]; then
    why=$(sqlite3 "$2" "SELECT substr(error, 1, 90) FROM run WHERE status = 'failed' AND id = (SELECT max(id) FROM run)" 2>/dev/null || true)
  fi
  if [ -n "$why" ]; then
    echo "CAUGHT (the run failed: ${why//|/-}...)"
    return
  fi
  case $1 in
    1) echo CAUGHT ;; 0) echo missed ;; 124|137) echo "error (timeout)" ;; *) echo "error (exit $1)" ;;
  esac
}

start=$SECONDS
REV=$(git -C "$REPO" rev-parse --short HEAD) # the tree built; HEAD may move while the suite runs
echo "mutants.sh: building the unmutated tree ($REV)" >&2
BASE=$T/base
worktree "$BASE"
if ! build "$BASE" "$LOGS/base.build.log"; then
  echo "mutants.sh: the unmutated tree does not build, see $LOGS/base.build.log" >&2
  exit 3
fi
BASEBIN=$BASE/build/shardcheck

# Baselines (gate lines) and controls (scenario lines), once per distinct line.
declare -A CONTROL BASEDB LIMITS
while read -r kind file opts; do
  line="$kind $file${opts:+ $opts}"
  k=$(key_of "$line")
  [ -n "${LIMITS[$line]+x}" ] && continue
  t0=$SECONDS
  if [ "$kind" = capacity ]; then
    echo "mutants.sh: baseline search for '$line' (unmutated build)" >&2
    db=$T/$k.db
    # shellcheck disable=SC2086
    rc=$(run_capacity "$BASEBIN" "$BASE" "$db" "$LOGS/base.$k.log" "$file" $opts)
    if [ "$rc" -le 1 ] && [ -f "$db" ]; then BASEDB[$line]=$db; else
      BASEDB[$line]=""
      echo "mutants.sh: no baseline search for '$line' (exit $rc), see $LOGS/base.$k.log" >&2
    fi
    # shellcheck disable=SC2086
    [ -n "${BASEDB[$line]}" ] && CONTROL[$line]=$(gate_control "$line" "$LOGS/base.$k.log" $opts)
  elif [ "$kind" = test ]; then
    echo "mutants.sh: control run of '$line' (unmutated build)" >&2
    CONTROL[$line]=$(run_test "$BASE" "$LOGS/base.$k.log" "$file" "$opts") # one filter, unglobbed
  elif [ "$kind" = gate ]; then
    echo "mutants.sh: baseline for '$line' (unmutated build)" >&2
    db=$T/$k.db
    # shellcheck disable=SC2086
    rc=$(run_scenario "$BASEBIN" "$BASE" "$db" "$LOGS/base.$k.log" "$file" $opts)
    if [ "$rc" -le 1 ] && [ -f "$db" ] &&
      "$BASEBIN" baseline --db "$db" --run "$(latest_run "$db")" </dev/null >>"$LOGS/base.$k.log" 2>&1; then
      BASEDB[$line]=$db
      # shellcheck disable=SC2086
      CONTROL[$line]=$(gate_control "$line" "$LOGS/base.$k.log" $opts)
    else
      BASEDB[$line]=""
      echo "mutants.sh: no baseline for '$line' (exit $rc), see $LOGS/base.$k.log" >&2
    fi
  else
    echo "mutants.sh: control run of '$line' (unmutated build)" >&2
    # shellcheck disable=SC2086
    CONTROL[$line]=$(run_scenario "$BASEBIN" "$BASE" "$T/control.db" "$LOGS/base.$k.log" "$file" $opts)
  fi
  lim=$((10 * (SECONDS - t0 + 1)))
  [ "$lim" -ge 60 ] || lim=60
  [ "$lim" -le "$TMO" ] || lim=$TMO
  LIMITS[$line]=$lim
done < <(for p in "${PATCHES[@]}"; do header "$p" catch; done)
SETUP=$((SECONDS - start))
echo "mutants.sh: set-up took $SETUP s" >&2

ROWS=()
n_caught=0 n_total=${#PATCHES[@]} i=0
for p in "${PATCHES[@]}"; do
  i=$((i + 1))
  name=$(name_of "$p")
  t0=$SECONDS
  wt=$T/m-$name
  [ "$REUSE" = 1 ] && wt=$BASE
  log=$LOGS/$name.log
  : >"$log"
  [ "$REUSE" = 1 ] || worktree "$wt"
  cells=() verdict=MISSED
  if ! git -C "$wt" apply "$p" </dev/null >>"$log" 2>&1; then
    verdict="NOT APPLIED"
  elif ! { echo "mutants.sh: [$i/$n_total] $name: building" >&2; build "$wt" "$LOGS/$name.build.log"; }; then
    verdict="BUILD FAILED"
  else
    bin=$wt/build/shardcheck
    while read -r kind file opts; do
      line="$kind $file${opts:+ $opts}"
      echo "mutants.sh: [$i/$n_total] $name: $line" >&2
      echo "== $line" >>"$log"
      LIMIT=${LIMITS[$line]}
      if [ "$kind" = test ]; then
        ctl=${CONTROL[$line]}
        rc=$(run_test "$wt" "$log" "$file" "$opts")
        case $rc in
          0) cell=missed ;; -1) cell="error (the test does not build)" ;;
          124|137) cell="error (timeout)" ;; *) cell="CAUGHT (exit $rc)" ;;
        esac
        if [ "$ctl" != 0 ]; then cell="invalid (fails unmutated)"; fi
      elif [ "$kind" = capacity ]; then
        if [ -z "${BASEDB[$line]}" ]; then
          cell="error (no baseline)"
        elif [ "${CONTROL[$line]:-0}" != 0 ]; then
          cell="invalid (the unmutated rerun fails the gate: exit ${CONTROL[$line]})"
        else
          db=$T/$name.capacity.db
          cp "${BASEDB[$line]}" "$db"
          # shellcheck disable=SC2086
          rc=$(run_capacity "$bin" "$wt" "$db" "$log" "$file" $opts)
          if [ "$rc" -gt 1 ]; then
            cell="$(result "$rc") in the search"
          else
            rc=0
            (cd "$wt" && timeout "$LIMIT" "$bin" gate --capacity --db "$db") </dev/null \
              >>"$log" 2>&1 || rc=$?
            cell=$(result "$rc")
          fi
          rm -f "$db"
        fi
      elif [ "$kind" = scenario ]; then
        ctl=${CONTROL[$line]}
        rm -f "$T/$name.db"
        # shellcheck disable=SC2086
        rc=$(run_scenario "$bin" "$wt" "$T/$name.db" "$log" "$file" $opts)
        cell=$(result "$rc" "$T/$name.db")
        if [ "$ctl" = 1 ]; then
          cell="invalid (fails unmutated)"
        elif [ "$ctl" != 0 ]; then
          cell="error (unmutated exit $ctl)"
        fi
      elif [ -z "${BASEDB[$line]}" ]; then
        cell="error (no baseline)"
      elif [ "${CONTROL[$line]:-0}" != 0 ]; then
        cell="invalid (the unmutated rerun fails the gate: exit ${CONTROL[$line]})"
      else
        db=$T/$name.gate.db
        cp "${BASEDB[$line]}" "$db"
        # shellcheck disable=SC2086
        rc=$(run_scenario "$bin" "$wt" "$db" "$log" "$file" $opts)
        if [ "$rc" -gt 1 ]; then
          cell=$(result "$rc" "$db")
          [ "${cell#CAUGHT}" != "$cell" ] || cell="$cell in the run"
        else
          rc=0
          (cd "$wt" && timeout "$LIMIT" "$bin" gate --db "$db" --run "$(latest_run "$db")") \
            </dev/null >>"$log" 2>&1 || rc=$?
          cell=$(result "$rc")
        fi
        rm -f "$db"
      fi
      [ "${cell#CAUGHT}" != "$cell" ] && verdict=CAUGHT
      cells+=("$line: $cell")
    done < <(header "$p" catch)
  fi
  [ "$verdict" = CAUGHT ] && n_caught=$((n_caught + 1))
  rm -f "$T/$name.db"
  if [ "$REUSE" = 1 ]; then
    git -C "$wt" checkout --quiet -- . # the patch reverted; the next build recompiles its files
  else
    unworktree "$wt"
  fi
  dt=$((SECONDS - t0))
  caught_by=""
  for c in ${cells[@]+"${cells[@]}"}; do caught_by+="${caught_by:+<br>}\`${c%%: *}\`: ${c#*: }"; done
  ROWS+=("| $name | ${caught_by:--} | $verdict | $dt s |")
  echo "mutants.sh: [$i/$n_total] $name: $verdict ($dt s)" >&2
done

{
  echo "| mutant | caught by | verdict | time |"
  echo "|---|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
  echo
  echo "$n_caught of $n_total caught; $REV, $(date -u +%Y-%m-%d), $((SECONDS - start)) s in all, $SETUP s of them the unmutated build, baselines and control runs."
} | tee "$OUT"
echo "mutants.sh: table in $OUT, logs in $LOGS" >&2
