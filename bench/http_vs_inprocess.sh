#!/usr/bin/env bash
# The same workload through `shardcheck serve` (a launched external target: HTTP, SSE, the
# client's own stamps) and in-process (local replicas: no HTTP at all), side by side
# (docs/benchmarks.md, "External targets").
#   bench/http_vs_inprocess.sh [BUILD_DIR]
# llama-tiny on the CPU backend, tp1 and dp2, a closed loop of 8 users for 6 s after 1 s of
# warm-up; prints TTFT, TPOT and output throughput of each path from the results database.
set -euo pipefail
BUILD=${1:-build/release}
BIN=$BUILD/shardcheck
[ -x "$BIN" ] || { echo "http_vs_inprocess.sh: $BIN not found (build first)" >&2; exit 2; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
WL='workload:
  prompts: [{input: {uniform: [16, 64]}, output: 32}]
  phases: [{ramp: {concurrency: [8]}, hold: 6s, warmup: 1s}]
seed: 4'
cat >"$T/inproc.yaml" <<YAML
name: inproc
model: {preset: llama-tiny}
hardware: {backend: cpu}
limits: {max_running: 256}
router: {isolation: thread}
deployments: [{tp: 1}, {dp: 2}]
$WL
YAML
cat >"$T/http.yaml" <<YAML
name: http
target:
  openai:
    url: "http://127.0.0.1:{port}/v1"
    launch: "{shardcheck} serve --model llama-tiny -tp {tp} --port {port} --threads 1"
    model: llama-tiny
    vocab_size: 512
    extra_body: {ignore_eos: true}
    stop_grace: 2s
deployments: [{tp: 1}, {dp: 2}]
$WL
YAML
printf '| path | deployment | requests | TTFT p50 ms | TTFT p95 ms | TPOT p50 ms | TPOT p95 ms | output tok/s |\n'
printf '|---|---|---|---|---|---|---|---|\n'
for p in inproc http; do
  "$BIN" run "$T/$p.yaml" --db "$T/$p.db" --out "$T/$p" --no-report --quiet >/dev/null 2>&1 || true
  sqlite3 -separator ' | ' "$T/$p.db" "
    SELECT '$p', d.label,
      (SELECT printf('%d', value) FROM metric WHERE deployment_id = d.id AND phase_id IS NULL AND class = '' AND name = 'requests'),
      (SELECT printf('%.2f', value) FROM metric WHERE deployment_id = d.id AND phase_id IS NULL AND class = '' AND name = 'ttft_p50_ms'),
      (SELECT printf('%.2f', value) FROM metric WHERE deployment_id = d.id AND phase_id IS NULL AND class = '' AND name = 'ttft_p95_ms'),
      (SELECT printf('%.2f', value) FROM metric WHERE deployment_id = d.id AND phase_id IS NULL AND class = '' AND name = 'tpot_p50_ms'),
      (SELECT printf('%.2f', value) FROM metric WHERE deployment_id = d.id AND phase_id IS NULL AND class = '' AND name = 'tpot_p95_ms'),
      (SELECT printf('%.0f', value) FROM metric WHERE deployment_id = d.id AND phase_id IS NULL AND class = '' AND name = 'output_tok_s')
    FROM deployment d ORDER BY d.idx" | sed 's/^/| /; s/$/ |/'
done
