#!/usr/bin/env bash
# SIGKILL campaigns (docs/benchmarks.md, "SIGKILL campaigns"): what a killed shardcheck leaves.
#
# runner  N runs of real-mode fault scenarios, alternating scenarios/kill-replica.yaml (worker
#         processes) and scenarios/http-faults.yaml (launched `shardcheck serve` servers), each
#         SIGKILLed at a moment drawn from SEED, uniform over the run's first 11 s. After each:
#         the database passes PRAGMA integrity_check, `shardcheck runs` lists the run as
#         incomplete, and nothing the runner started is left (every process of the runner's
#         session, which workers and launched servers share, gone within 5 s).
# serve   M `shardcheck serve` servers (llama-tiny, dp 2, --isolation process: two worker
#         processes) under 8 concurrent streaming clients, each SIGKILLed at a moment drawn
#         from SEED in its first 3 s of load; after each, no worker is left in its session.
#
#   bench/sigkill.sh [BUILD_DIR] [N] [M] [SEED]      (defaults build/release 100 30 1)
#
# Prints one line per kill and a table of the counts; exits 1 if any check failed.
set -uo pipefail
BUILD=${1:-build/release}
N=${2:-100}
M=${3:-30}
SEED=${4:-1}
BIN=$(cd "$(dirname "$BUILD/shardcheck")" && pwd)/shardcheck
[ -x "$BIN" ] || { echo "sigkill.sh: $BIN not found (build first)" >&2; exit 2; }
command -v sqlite3 >/dev/null || { echo "sigkill.sh: sqlite3 is needed" >&2; exit 2; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# The i-th draw of SEED, uniform in [lo, hi) seconds, printed with 3 decimals.
draw() { awk -v s="$SEED" -v i="$1" -v lo="$2" -v hi="$3" \
  'BEGIN { srand(s * 100003 + i); for (k = 0; k < 3; k++) r = rand(); printf "%.3f", lo + r * (hi - lo) }'; }

# The live processes of session $1 (a zombie, dead and waiting for init to reap it, is not one).
left_in() {
  ps -eo pid=,sid=,stat=,args= | awk -v s="$1" '$2 == s && $3 !~ /^Z/ { $2 = ""; $3 = ""; print }'
}

# Waits up to 5 s for session $1 to empty; prints what is left (nothing: empty).
wait_empty() {
  local k
  for k in $(seq 1 50); do
    [ -z "$(left_in "$1")" ] && return 0
    sleep 0.1
  done
  left_in "$1"
}

fails=0
r_ok=0 r_nodb=0 r_complete=0 r_bad=0 r_left=0
echo "== runner: $N kills (seed $SEED)"
for i in $(seq 1 "$N"); do
  if [ $((i % 2)) -eq 1 ]; then sc=scenarios/kill-replica.yaml; else sc=scenarios/http-faults.yaml; fi
  at=$(draw "$i" 0.3 11)
  db=$T/r$i.db
  setsid "$BIN" run "$sc" --db "$db" --out "$T/r$i" --no-report >"$T/r$i.log" 2>&1 &
  pid=$!
  sleep "$at"
  sid=$(ps -o sid= -p "$pid" 2>/dev/null | tr -d ' ')
  if [ -z "$sid" ]; then # already over: not a kill
    wait "$pid"
    r_complete=$((r_complete + 1))
    echo "$i $sc at ${at}s: the run had ended"
    continue
  fi
  kill -KILL "$pid"
  wait "$pid" 2>/dev/null
  left=$(wait_empty "$sid")
  what=""
  if [ -n "$left" ]; then
    r_left=$((r_left + 1))
    what="LEFT: $(echo "$left" | head -3 | tr '\n' ';')"
    echo "$left" | awk '{ print $1 }' | xargs -r kill -KILL 2>/dev/null
  fi
  if [ ! -s "$db" ]; then
    r_nodb=$((r_nodb + 1))
    echo "$i $sc at ${at}s: killed before the database existed $what"
  else
    ic=$(sqlite3 "$db" "PRAGMA integrity_check" 2>&1 | head -1)
    listed=$("$BIN" runs --db "$db" 2>&1)
    if [ "$ic" = ok ] && echo "$listed" | grep -q incomplete; then
      r_ok=$((r_ok + 1))
      echo "$i $sc at ${at}s: integrity ok, run incomplete $what"
    else
      r_bad=$((r_bad + 1))
      echo "$i $sc at ${at}s: BAD: integrity '$ic'; runs: $(echo "$listed" | tail -1) $what"
    fi
  fi
  [ -n "$what" ] && fails=$((fails + 1))
done
fails=$((fails + r_bad))

s_ok=0 s_left=0 s_noup=0
echo "== serve: $M kills (seed $SEED)"
for i in $(seq 1 "$M"); do
  port=$((20000 + (RANDOM % 20000)))
  setsid "$BIN" serve --model llama-tiny -dp 2 --isolation process --threads 1 --port "$port" \
    >"$T/s$i.log" 2>&1 &
  pid=$!
  up=0
  for k in $(seq 1 200); do
    if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then up=1; break; fi
    sleep 0.1
  done
  if [ $up -eq 0 ]; then
    s_noup=$((s_noup + 1))
    echo "$i serve on $port never answered /health: $(tail -1 "$T/s$i.log")"
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    continue
  fi
  sid=$(ps -o sid= -p "$pid" | tr -d ' ')
  workers=$(left_in "$sid" | grep -c ' worker ')
  body='{"prompt":"hello","max_tokens":200,"ignore_eos":true,"stream":true}'
  for c in $(seq 1 8); do
    (for r in $(seq 1 50); do
      curl -s -N -m 10 -H 'Content-Type: application/json' -d "$body" \
        "http://127.0.0.1:$port/v1/completions" >/dev/null 2>&1 || break
    done) &
  done
  at=$(draw "$((1000 + i))" 0.2 3)
  sleep "$at"
  kill -KILL "$pid"
  wait "$pid" 2>/dev/null
  left=$(wait_empty "$sid")
  wait # the clients end with the server
  if [ -n "$left" ]; then
    s_left=$((s_left + 1))
    fails=$((fails + 1))
    echo "$i serve at ${at}s of load ($workers workers): LEFT: $(echo "$left" | head -3 | tr '\n' ';')"
    echo "$left" | awk '{ print $1 }' | xargs -r kill -KILL 2>/dev/null
  else
    s_ok=$((s_ok + 1))
    echo "$i serve at ${at}s of load ($workers workers): nothing left"
  fi
done

echo
echo "| campaign | kills | checks passed | killed before the database | run had ended | database bad | processes left | never up |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
echo "| runner (seed $SEED) | $N | $r_ok | $r_nodb | $r_complete | $r_bad | $r_left | |"
echo "| serve (seed $SEED) | $M | $s_ok | | | | $s_left | $s_noup |"
[ "$fails" -eq 0 ]
