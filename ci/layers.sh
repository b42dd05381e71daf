#!/usr/bin/env bash
# Fails when a file includes a header from a floor above its own, printing each such include.
# The floors, lowest first (docs/design.md draws them); a folder may include its own headers and
# those of the floors below, never a floor above, and never a sibling on its own floor:
#
#   0 kernels/     devices, communicators, the clock, status codes
#   1 engine/      the sharded Llama engine
#   2 serving/     the replica seam, router, request table, supervisor, worker protocol
#   2 config/      YAML, hardware profiles, model presets
#   3 scenarios/   the scenario language, workloads, metric names
#   3 profile/     `shardcheck profile`: measuring a hardware profile on the real device
#   4 reports/     the SQLite store, metrics, reports, the gate
#   5 faults/      the fault runtime and the verdicts after faults
#   6 runner/      the event loop
#   6 server/      `shardcheck serve`: the OpenAI-compatible HTTP server (libmicrohttpd)
#   7 cli/         the commands
#
# bench/, tests/ and fuzz/ sit outside the floors and may include anything.
set -euo pipefail
cd "$(dirname "$0")/.."

floor() {
  case "$1" in
  kernels) echo 0 ;;
  engine) echo 1 ;;
  serving | config) echo 2 ;;
  scenarios | profile) echo 3 ;;
  reports) echo 4 ;;
  faults) echo 5 ;;
  runner | server) echo 6 ;;
  cli) echo 7 ;;
  *) echo "" ;;
  esac
}

bad=0
checked=0
while IFS= read -r file; do
  top=${file%%/*}
  own=$(floor "$top")
  [ -n "$own" ] || continue
  checked=$((checked + 1))
  while IFS=: read -r line inc; do
    dir=${inc%%/*}
    [ "$dir" = "$top" ] && continue
    theirs=$(floor "$dir")
    [ -n "$theirs" ] || continue
    if [ "$theirs" -ge "$own" ]; then
      if [ "$theirs" -eq "$own" ]; then why="a sibling on the same floor ($own)"
      else why="floor $theirs, above $top/'s floor $own"; fi
      echo "$file:$line: includes \"$inc\": $why"
      bad=$((bad + 1))
    fi
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[a-z_]*/' "$file" |
    sed 's/^\([0-9]*\):.*"\(.*\)".*/\1:\2/')
done < <(git ls-files -co --exclude-standard '*.c' '*.h' '*.cu')

if [ "$bad" -gt 0 ]; then
  echo "layers: $bad include(s) point up or sideways (the floors are in ci/layers.sh and docs/design.md)"
  exit 1
fi
echo "layers: $checked files, every include points down"
