#!/usr/bin/env bash
# Proves that a change which claims to change no behaviour changes none: every shipped scenario
# is run in mode sim (virtual time, deterministic: the same scenario and seed give the same
# rows), and every row it writes, the run's own metadata aside (run, meta: wall time, host,
# revision), is dumped as text together with the verdict table the CLI prints. Two builds are
# then compared byte for byte.
#
#   ci/same-rows.sh record DIR [SHARDCHECK]   dump every scenario's rows into DIR
#   ci/same-rows.sh compare DIR [SHARDCHECK]  dump again and diff against DIR (exit 1: differ)
#   ci/same-rows.sh REV [SHARDCHECK]          build REV in a scratch worktree, record its rows,
#                                             then compare this tree's build with them
#
# SHARDCHECK defaults to build/release/shardcheck. The scenarios are this tree's scenarios/*.yaml
# (SCENARIOS=DIR picks another folder); REV mode runs both builds on REV's own scenarios, since
# a change that claims no change of behaviour must give the same rows for the same scenarios.
# A scenario that mode sim refuses (a clock jump has no wall clock to jump there) is kept with its
# refusal, which must not change either; one that names no hardware profile runs on h100-sxm.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

usage() {
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

scenarios=${SCENARIOS:-$root/scenarios}

# dump BIN OUTDIR: one text file per scenario of $scenarios.
dump() {
  local bin=$1 out=$2 tmp
  tmp=$(mktemp -d)
  mkdir -p "$out"
  for f in "$scenarios"/*.yaml; do
    local n db rc
    n=$(basename "$f" .yaml)
    db=$tmp/$n.db
    rc=0
    "$bin" run "$f" --mode sim --db "$db" --no-report --quiet >"$tmp/$n.cli" 2>&1 || rc=$?
    if [ "$rc" -eq 2 ] && grep -q "names none" "$tmp/$n.cli"; then
      rm -f "$db"
      rc=0
      "$bin" run "$f" --mode sim --profile h100-sxm --db "$db" --no-report --quiet \
        >"$tmp/$n.cli" 2>&1 || rc=$?
    fi
    {
      echo "== exit $rc"
      echo "== cli"
      cat "$tmp/$n.cli"
      if [ -f "$db" ]; then
        local t
        # Tables and views, the token and step views in place of the tables they replaced
        # (token_times and step_block, their storage, are the same rows; token_second counts
        # the token view's rows per second).
        for t in $(sqlite3 "$db" "SELECT name FROM sqlite_master WHERE type IN ('table', \
                                  'view') AND name NOT IN ('run','meta','token_times', \
                                  'step_block','token_second') ORDER BY name"); do
          echo "== $t"
          sqlite3 -header "$db" "SELECT * FROM $t" | sort
        done
      fi
    } >"$out/$n.txt"
    printf '  %-28s exit %d, %s lines\n' "$n" "$rc" "$(wc -l <"$out/$n.txt")"
  done
  rm -rf "$tmp"
}

[ $# -ge 1 ] || usage
cmd=$1
bin=${2:-$root/build/release/shardcheck}
case "$cmd" in
record)
  [ $# -ge 2 ] || usage
  dir=$2
  bin=${3:-$root/build/release/shardcheck}
  echo "== recording rows of $bin into $dir"
  dump "$bin" "$dir"
  ;;
compare)
  [ $# -ge 2 ] || usage
  dir=$2
  bin=${3:-$root/build/release/shardcheck}
  new=$(mktemp -d)
  echo "== rows of $bin"
  dump "$bin" "$new"
  if diff -r "$dir" "$new" >"$new.diff"; then
    echo "== same rows: $(ls "$dir" | wc -l) scenarios, byte for byte"
    rm -rf "$new" "$new.diff"
  else
    head -60 "$new.diff"
    echo "== rows differ (full diff: $new.diff)"
    exit 1
  fi
  ;;
-h | --help) usage ;;
*)
  rev=$(git rev-parse --verify "$cmd^{commit}") || usage
  wt=$root/build/same-rows-$rev
  [ -d "$wt" ] || git worktree add --detach "$wt" "$rev" >/dev/null
  cmake -S "$wt" -B "$wt/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDCHECK_CUDA=OFF >/dev/null
  cmake --build "$wt/build" -j"$(nproc)" --target shardcheck >/dev/null
  base=$root/build/same-rows-$rev.rows
  rm -rf "$base"
  echo "== rows of $rev"
  scenarios=$wt/scenarios
  dump "$wt/build/shardcheck" "$base"
  SCENARIOS=$wt/scenarios "$0" compare "$base" "$bin"
  ;;
esac
