#!/usr/bin/env bash
# Predicts NVIDIA NIM's published concurrency sweep of Llama-3.3-70B-Instruct FP8 on 2x H100 80GB
# (tp 2, NIM 1.8.0, 5000 input and 500 output tokens, 1 to 250 concurrent users: TTFT, ITL and
# output throughput; docs.nvidia.com/nim/benchmarking/llm/latest/performance.html, as copied
# into tested_benchmarks/nim_llama33_70b_v1.8.0_2xH100_fp8TP2.csv of
# github.com/zivbeker42/llm-guesstimator) with the simulator, and prints each published figure
# beside the prediction, and the step where each curve's knee falls: first with the idealized
# engine, then with the engine block calibrated on the sweep's first step (1 user) alone.
#
#   bench/nim.sh [SHARDCHECK]
#
# Last, it writes the fitted factors as an engine block for `bench/trtllm.sh SHARDCHECK FILE`,
# which predicts TensorRT-LLM's published offline throughput of the same model with them.
#
# The engine NIM runs here is TensorRT-LLM: fp8 weights and KV cache, no_evict admission
# (GUARANTEED_NO_EVICT), prefill not chunked (a prompt in one step, up to the 8192-token
# budget), 256 running sequences at most, 90% of memory for weights and KV. Each concurrency
# step holds 600 simulated seconds after 120 s of warm-up (closed loop, as genai-perf's
# --concurrency). Throughput: the output tokens of the step's requests over the span of their
# arrivals (in a closed loop a request arrives as one completes, so that is the completion
# rate); the output_tok_s metric divides by the span to the last finish instead, which past
# the knee adds a queue's wait (90 s at 250 users) to the window.
#
# The calibration: the page gives means, not requests, so the 1-user step becomes a trace of 40
# requests one after another, each with the step's mean TTFT and its 499 gaps at the mean ITL,
# imported and fitted with `shardcheck calibrate` (docs/calibration.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/release/shardcheck}
out=$(mktemp -d)
echo "scratch: $out"
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
# the knee: the first step whose mean TTFT is more than 3x the step before's (requests queue)
knee() { awk 'NR > 1 && $2 > 3 * prev { print $1; exit } { prev = $2 }'; }

# sweep NAME PROFILE: runs the sweep on PROFILE and prints it beside the published one
sweep() {
  cat >"$out/$1.yaml" <<YAML
name: nim-llama3.3-70b-fp8-2xh100-$1
mode: sim
record: requests
model: {preset: llama3.3-70b, dtype: fp8, kv_cache_dtype: fp8}
hardware: {profile: $2, gpus: 2}
limits: {max_running: 256, token_budget: 8192, prefill_chunk: 8192, kv_headroom: 0.1,
         no_evict: true, request_timeout: 100000s}
deployments: [{tp: 2}]
workload:
  prompts: [{input: 5000, output: 500}]
  phases:
    - {ramp: {concurrency: [1, 5, 25, 50, 100, 150, 200, 250]}, hold: 600s, warmup: 120s}
YAML
  local db=$out/$1.db
  "$bin" run "$out/$1.yaml" --db "$db" --no-report >"$out/$1.log" 2>&1 ||
    { cat "$out/$1.log"; exit 1; }
  printf '%5s | %10s %10s %7s | %8s %8s %7s | %8s %8s %7s\n' users "TTFT ms" predicted error \
    "ITL ms" predicted error "tok/s" predicted error
  echo "$published" | while read -r c ttft itl tps; do
    read -r pt pi pp < <(sqlite3 -separator ' ' "$db" "SELECT
      (SELECT value FROM metric WHERE phase_id = p.id AND class = '' AND name = 'ttft_mean_ms'),
      (SELECT value FROM metric WHERE phase_id = p.id AND class = '' AND name = 'itl_mean_ms'),
      (SELECT sum(output_tokens) / ((max(arrival_ns) - min(arrival_ns)) / 1e9) FROM request
       WHERE phase_id = p.id AND warmup = 0 AND status = 'ok')
      FROM phase p WHERE p.concurrency = $c")
    printf '%5s | %10.1f %10.1f %+6.1f%% | %8.2f %8.2f %+6.1f%% | %8.1f %8.1f %+6.1f%%\n' "$c" \
      "$ttft" "$pt" "$(pct "$pt" "$ttft")" "$itl" "$pi" "$(pct "$pi" "$itl")" "$tps" "$pp" \
      "$(pct "$pp" "$tps")"
  done
  echo "knee (TTFT x3 or more from one step to the next): published at" \
    "$(echo "$published" | knee) users, predicted at $(sqlite3 -separator ' ' "$db" "SELECT \
p.concurrency, m.value FROM phase p JOIN metric m ON m.phase_id = p.id AND m.class = '' AND \
m.name = 'ttft_mean_ms' ORDER BY p.id" | knee) users"
}

echo "== the idealized engine"
sweep idealized h100-sxm

echo "== calibrated on the 1-user step"
# TensorRT-LLM's knobs as an engine block (they replace the scenario's limits in sim mode)
{ cat "$root/scenarios/hardware/h100-sxm.yaml"
  printf 'engine: {max_running: 256, token_budget: 8192, chunked_prefill: false, no_evict: true}\n'
} >"$out/base.yaml"
read -r _ ttft1 itl1 _ <<<"$(echo "$published" | head -1)"
awk -v ttft="$ttft1" -v itl="$itl1" 'BEGIN { t = 0
  for (i = 0; i < 40; i++) { f = t + ttft / 1e3; l = f + 499 * itl / 1e3
    printf "{\"input_toks\": 5000, \"output_toks\": 500, \"queued_ts\": %.6f, ", t
    printf "\"first_token_ts\": %.6f, \"last_token_ts\": %.6f}\n", f, l; t = l } }' >"$out/one.jsonl"
"$bin" import "$out/one.jsonl" --db "$out/one.db" >/dev/null
"$bin" calibrate --db "$out/one.db" --run 1 --profile "$out/base.yaml" --model llama3.3-70b \
  --tp 2 --dtype fp8 --kv-cache-dtype fp8 --out "$out/fit.yaml" | grep -E '^(fit|calibrate)'
sweep calibrated "$out/fit.yaml"
# the fitted factors alone (TensorRT-LLM's offline runs have their own knobs), for
# bench/trtllm.sh SHARDCHECK ENGINE.yaml
{ echo "engine:"; grep -E '^  (step_s|seq_s|tp_step_s|prefill_eff|decode_eff):' "$out/fit.yaml"; } >"$out/engine.yaml"
echo "the fitted factors as an engine block: $out/engine.yaml"
