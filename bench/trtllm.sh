#!/usr/bin/env bash
# Predicts TensorRT-LLM's published offline throughput (docs/source/performance/perf-overview.md
# in github.com/NVIDIA/TensorRT-LLM, the tables of Llama 3.1 8B and Llama 3.3 70B FP8 on H100 SXM
# and H200: trtllm-bench throughput, every request queued at once, fixed input and output
# lengths, "Total Output Throughput") with the simulator, and prints each published figure
# beside the prediction and its error. The published numbers are written out below, with the
# number of requests the page gives for each length pair; nothing is fitted.
#
#   bench/trtllm.sh [SHARDCHECK] [ENGINE.yaml]
#
# ENGINE.yaml (optional): an `engine:` block appended to each profile (e.g. a calibrated one);
# without it the idealized engine. The scheduler: max_running 2048 and token_budget 8192 (the
# engine settings trtllm-bench picks for these models), admission with no_evict (TensorRT-LLM's
# default capacity policy, GUARANTEED_NO_EVICT), KV headroom 0.05 (the page's
# --kv_cache_free_gpu_mem_fraction 0.95), weights and KV cache in fp8 (the FP8 checkpoints
# carry an FP8 KV cache). docs/calibration.md has the table and what it shows.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/release/shardcheck}
engine=${2:-}
out=$(mktemp -d)
echo "scratch: $out"
# model gpu tp isl osl requests published_tok_s
rows="
llama3.1-8b h100-sxm 1 128 128 30000 28312
llama3.1-8b h100-sxm 1 128 2048 3000 22714
llama3.1-8b h100-sxm 1 128 4096 1500 14325
llama3.1-8b h100-sxm 1 500 2000 3000 17660
llama3.1-8b h100-sxm 1 1000 1000 3000 15220
llama3.1-8b h100-sxm 1 1000 2000 1500 13899
llama3.1-8b h100-sxm 1 2048 128 3000 3450
llama3.1-8b h100-sxm 1 2048 2048 1500 9305
llama3.1-8b h100-sxm 1 5000 500 1500 3459
llama3.1-8b h100-sxm 1 20000 2000 1000 1351
llama3.1-8b h200 1 128 128 30000 27911
llama3.1-8b h200 1 128 2048 3000 26221
llama3.1-8b h200 1 128 4096 1500 18027
llama3.1-8b h200 1 500 2000 3000 20770
llama3.1-8b h200 1 1000 1000 3000 17744
llama3.1-8b h200 1 1000 2000 1500 16828
llama3.1-8b h200 1 2048 128 3000 3538
llama3.1-8b h200 1 2048 2048 1500 12194
llama3.1-8b h200 1 5000 500 1500 3902
llama3.1-8b h200 1 20000 2000 1000 1804
llama3.3-70b h100-sxm 2 128 128 30000 6378
llama3.3-70b h100-sxm 2 128 2048 3000 6651
llama3.3-70b h100-sxm 2 128 4096 1500 4199
llama3.3-70b h100-sxm 2 500 2000 3000 5222
llama3.3-70b h100-sxm 2 1000 1000 3000 4205
llama3.3-70b h100-sxm 2 1000 2000 1500 4146
llama3.3-70b h100-sxm 2 2048 128 3000 762
llama3.3-70b h100-sxm 2 2048 2048 1500 3082
llama3.3-70b h100-sxm 2 5000 500 1500 898
llama3.3-70b h100-sxm 2 20000 2000 1000 437
llama3.3-70b h200 1 128 128 30000 3803
llama3.3-70b h200 1 128 2048 3000 4336
llama3.3-70b h200 1 128 4096 1500 2872
llama3.3-70b h200 1 500 2000 3000 3666
llama3.3-70b h200 1 1000 1000 3000 2909
llama3.3-70b h200 1 1000 2000 1500 2994
llama3.3-70b h200 1 2048 128 3000 442
llama3.3-70b h200 1 2048 2048 1500 2003
llama3.3-70b h200 1 5000 500 1500 566
llama3.3-70b h200 1 20000 2000 1000 283
"
printf '%-13s %-9s %-3s %-11s %10s %10s %8s\n' model gpu tp isl/osl published predicted error
echo "$rows" | while read -r model gpu tp isl osl n pub; do
  [ -n "$model" ] || continue
  name=$model-$gpu-tp$tp-$isl-$osl
  prof=$out/$gpu.yaml
  [ -f "$prof" ] || { cat "$root/scenarios/hardware/$gpu.yaml"; [ -z "$engine" ] || cat "$engine"; } >"$prof"
  cat >"$out/$name.yaml" <<YAML
name: $name
mode: sim
record: requests
model: {preset: $model, dtype: fp8, kv_cache_dtype: fp8}
hardware: {profile: $prof, gpus: $tp}
limits: {max_running: 2048, token_budget: 8192, kv_headroom: 0.05, no_evict: true,
         request_timeout: 100000s}
deployments: [{tp: $tp}]
workload:
  prompts: [{input: $isl, output: $osl}]
  phases: [{fixed: {requests: $n, concurrency: $n}}]
YAML
  "$bin" run "$out/$name.yaml" --db "$out/$name.db" --no-report >"$out/$name.log" 2>&1 ||
    { echo "$name: run failed, see $out/$name.log"; continue; }
  pred=$(sqlite3 "$out/$name.db" "SELECT sum(output_tokens) / ((max(finish_ns) - min(arrival_ns)) / 1e9) FROM request WHERE status = 'ok'")
  printf '%-13s %-9s %-3s %-11s %10s %10.0f %+7.1f%%\n' "$model" "$gpu" "$tp" "$isl/$osl" "$pub" "$pred" \
    "$(echo "($pred - $pub) * 100 / $pub" | bc -l)"
done
