#!/usr/bin/env bash
# Load from many clients (docs/scaling-out.md): the chunks per second `shardcheck run` records
# against one `shardcheck serve --mode sim` when the run is 1, 2 and 4 MPI client ranks
# (`mpirun -np N shardcheck run`). The server is started once (llama-tiny on simulated H100s, dp
# 4, room for every stream) and the scenario names its url (no launch); USERS closed-loop users
# each stream OUT tokens per request (ignore_eos) for HOLD. chunks/s: the tokens recorded with a
# stamp inside the phase's second half, over that half's length; with it the run's own
# client_saturated / client_late_p99_ms, and the CPU time of the server and of the run's ranks.
#
#   bench/clients.sh [BUILD_DIR] [USERS] [HOLD] [OUT] [RANKS...]   (build/release 512 8s 256 1 2 4)
set -euo pipefail
build=${1:-build/release}
users=${2:-512}
hold=${3:-8s}
out_tokens=${4:-256}
shift $(( $# < 4 ? $# : 4 )) || true
ranks=("$@")
[ ${#ranks[@]} -gt 0 ] || ranks=(1 2 4)
bin=$(readlink -f "$build/shardcheck")
work=$(mktemp -d /tmp/sc-clients-bench-XXXXXX)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$bin" serve --model llama-tiny --mode sim --profile h100-sxm -dp 4 --max-num-seqs 4096 \
  --port "$port" > "$work/serve.log" 2>&1 &
srv=$!
trap 'kill $srv 2>/dev/null; wait $srv 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$port/health" > /dev/null && break
  sleep 0.1
done
cat > "$work/c.yaml" <<YAML
name: clients-bench
target:
  openai:
    url: "http://127.0.0.1:$port/v1"
    model: llama-tiny
    vocab_size: 512
    extra_body: {ignore_eos: true}
model: {preset: llama-tiny}
deployments: [{dp: 1}]
workload:
  prompts:
    - {input: 32, output: $out_tokens}
  phases:
    - {name: hold, ramp: {concurrency: [$users]}, hold: $hold}
limits: {request_timeout: 60s}
seed: 1
YAML
q() { sqlite3 "$1" "$2"; }
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
printf '| client ranks | chunks/s (2nd half) | requests | client_saturated | client_late_p99_ms | server CPU (s/s) | run CPU, all ranks (s/s) |\n'
printf '|---:|---:|---:|---:|---:|---:|---:|\n'
for n in "${ranks[@]}"; do
  db="$work/n$n.db"
  s0=$(ticks $srv)
  t0=$(date +%s.%N)
  if [ "$n" = 1 ]; then
    /usr/bin/time -f '%U %S' -o "$work/time" "$bin" run "$work/c.yaml" --db "$db" --no-report \
      --quiet > "$work/run$n.log" 2>&1 || true
  else
    /usr/bin/time -f '%U %S' -o "$work/time" mpirun --oversubscribe --bind-to none -np "$n" \
      "$bin" run "$work/c.yaml" --db "$db" --no-report --quiet > "$work/run$n.log" 2>&1 || true
  fi
  t1=$(date +%s.%N)
  s1=$(ticks $srv)
  wall=$(echo "$t1 - $t0" | bc -l)
  read -r cu cs < "$work/time"
  a=$(q "$db" "SELECT start_ns + (end_ns - start_ns) / 2 FROM phase")
  b=$(q "$db" "SELECT end_ns FROM phase")
  tok=$(q "$db" "SELECT count(*) FROM token WHERE t_ns >= $a AND t_ns < $b")
  reqs=$(q "$db" "SELECT count(*) FROM request")
  sat=$(q "$db" "SELECT value FROM metric WHERE name = 'client_saturated' AND phase_id IS NULL AND class = ''")
  late=$(q "$db" "SELECT printf('%.2f', value) FROM metric WHERE name = 'client_late_p99_ms' AND phase_id IS NULL AND class = ''")
  printf '| %d | %.0f | %d | %s | %s | %.2f | %.2f |\n' "$n" \
    "$(echo "$tok / (($b - $a) / 1000000000)" | bc -l)" "$reqs" "${sat:-}" "${late:-}" \
    "$(echo "($s1 - $s0) / $hz / $wall" | bc -l)" "$(echo "($cu + $cs) / $wall" | bc -l)"
done
