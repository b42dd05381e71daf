#!/usr/bin/env bash
# Predicts NVIDIA NIM's published concurrency sweep of Llama-3.3-70B-Instruct FP8 on 2x H100 80GB
# (tp 2, NIM 1.8.0, 5000 input and 500 output tokens, 1 to 250 concurrent users: TTFT, ITL and
# output throughput; docs.nvidia.com/nim/benchmarking/llm/latest/performance.html, as copied
# into tested_benchmarks/nim_llama33_70b_v1.8.0_2xH100_fp8TP2.csv of
# github.com/zivbeker42/llm-guesstimator) with the simulator, nothing fitted, and prints each
# published figure beside the prediction, and the step where each curve's knee falls.
#
#   bench/nim.sh [SHARDCHECK]
#
# The engine NIM runs here is TensorRT-LLM: fp8 weights and KV cache, no_evict admission
# (GUARANTEED_NO_EVICT), prefill not chunked (a prompt in one step, up to the 8192-token
# budget), 256 running sequences at most, 90% of memory for weights and KV. Each concurrency
# step holds 600 simulated seconds after 120 s of warm-up (closed loop, as genai-perf's
# --concurrency). Throughput: the output tokens of the step's requests over the span of their
# arrivals (in a closed loop a request arrives as one completes, so that is the completion
# rate); the output_tok_s metric divides by the span to the last finish instead, which past
# the knee adds a queue's wait (90 s at 250 users) to the window.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/release/shardcheck}
out=$(mktemp -d)
echo "scratch: $out"
cat >"$out/nim.yaml" <<YAML
name: nim-llama3.3-70b-fp8-2xh100
mode: sim
record: requests
model: {preset: llama3.3-70b, dtype: fp8, kv_cache_dtype: fp8}
hardware: {profile: h100-sxm, gpus: 2}
limits: {max_running: 256, token_budget: 8192, prefill_chunk: 8192, kv_headroom: 0.1,
         no_evict: true, request_timeout: 100000s}
deployments: [{tp: 2}]
workload:
  prompts: [{input: 5000, output: 500}]
  phases:
    - {ramp: {concurrency: [1, 5, 25, 50, 100, 150, 200, 250]}, hold: 600s, warmup: 120s}
YAML
"$bin" run "$out/nim.yaml" --db "$out/nim.db" --no-report >"$out/run.log" 2>&1 ||
  { cat "$out/run.log"; exit 1; }
# concurrency TTFT_ms ITL_ms output_tok_s (NIM 1.8.0)
published="1 406.77 18.58 51.67
5 546.7 21.83 218.48
25 688.69 38.75 623.4
50 834.51 59.73 814.37
100 7996.25 92.91 917.26
150 34794.22 92.86 920.9
200 61680.22 93.06 920.54
250 88605.32 93.2 920.12"
pct() { echo "($1 - $2) * 100 / $2" | bc -l; }
printf '%5s | %10s %10s %7s | %8s %8s %7s | %8s %8s %7s\n' users "TTFT ms" predicted error \
  "ITL ms" predicted error "tok/s" predicted error
echo "$published" | while read -r c ttft itl tps; do
  read -r pt pi pp < <(sqlite3 -separator ' ' "$out/nim.db" "SELECT
    (SELECT value FROM metric WHERE phase_id = p.id AND class = '' AND name = 'ttft_mean_ms'),
    (SELECT value FROM metric WHERE phase_id = p.id AND class = '' AND name = 'itl_mean_ms'),
    (SELECT sum(output_tokens) / ((max(arrival_ns) - min(arrival_ns)) / 1e9) FROM request
     WHERE phase_id = p.id AND warmup = 0 AND status = 'ok')
    FROM phase p WHERE p.concurrency = $c")
  printf '%5s | %10.1f %10.1f %+6.1f%% | %8.2f %8.2f %+6.1f%% | %8.1f %8.1f %+6.1f%%\n' "$c" \
    "$ttft" "$pt" "$(pct "$pt" "$ttft")" "$itl" "$pi" "$(pct "$pi" "$itl")" "$tps" "$pp" \
    "$(pct "$pp" "$tps")"
done
# the knee: the first step whose mean TTFT is more than 3x the step before's (requests queue)
knee() { awk 'NR > 1 && $2 > 3 * prev { print $1; exit } { prev = $2 }'; }
echo "knee (TTFT x3 or more from one step to the next): published at $(echo "$published" | knee)" \
  "users, predicted at $(sqlite3 -separator ' ' "$out/nim.db" "SELECT p.concurrency, m.value FROM \
phase p JOIN metric m ON m.phase_id = p.id AND m.class = '' AND m.name = 'ttft_mean_ms' ORDER BY \
p.id" | knee) users"
