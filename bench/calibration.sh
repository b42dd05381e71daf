#!/usr/bin/env bash
# Reproduces the validation table of docs/calibration.md: LLMServingSim's published vLLM
# traces (github.com/casys-kaist/LLMServingSim, MIT licence, bench/examples/) are imported,
# the engine block is fitted on the RTX PRO 6000 Llama-3.1-8B trace, and the other traces are
# predicted without refitting.
#
#   bench/calibration.sh LLMSERVINGSIM_GIT_DIR [SHARDCHECK]
#
# LLMSERVINGSIM_GIT_DIR: a clone (or bare git directory) of that repository; the traces are read
# with git show, so no work tree is needed. Writes into a scratch directory it prints.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
src=$1
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${2:-$root/build/release/shardcheck}
out=$(mktemp -d)
echo "scratch: $out"
ex=bench/examples
show() { git --git-dir="$src" show "HEAD:$1" 2>/dev/null || git -C "$src" show "HEAD:$1"; }
show $ex/RTXPRO6000/Llama-3.1-8B/vllm/requests.jsonl >"$out/pro-llama.jsonl"
show $ex/RTX4090/Llama-3.1-8B/vllm/requests.jsonl >"$out/4090-llama.jsonl"
show $ex/RTXPRO6000/Qwen3-32B/vllm/requests.jsonl >"$out/pro-qwen32b.jsonl"
db=$out/v.db
for t in pro-llama 4090-llama pro-qwen32b; do "$bin" import "$out/$t.jsonl" --db "$db" --name "$t"; done
# the scheduler knobs of each run (their vllm/meta.json): max_num_seqs, max_num_batched_tokens,
# block 16, chunked prefill and prefix caching (vLLM V1 defaults)
knobs() { printf 'engine:\n  max_running: %s\n  token_budget: 2048\n  block_size: 16\n  chunked_prefill: true\n  prefix_caching: true\n' "$1"; }
{ cat "$root/scenarios/hardware/rtx-pro-6000.yaml"; knobs 128; } >"$out/pro-base.yaml"
{ cat "$root/scenarios/hardware/rtx4090.yaml"; knobs 256; } >"$out/4090-base.yaml"
echo "== idealized engine (no fitted block)"
"$bin" calibrate --db "$db" --check 1 --no-fit --profile "$out/pro-base.yaml" --model llama3.1-8b
"$bin" calibrate --db "$db" --check 3 --no-fit --profile "$out/pro-base.yaml" --model qwen3-32b --tp 2
"$bin" calibrate --db "$db" --check 2 --no-fit --profile "$out/4090-base.yaml" --model llama3-8b
echo "== fit on the RTX PRO 6000 Llama-3.1-8B trace (run 1)"
"$bin" calibrate --db "$db" --run 1 --profile "$out/pro-base.yaml" --model llama3.1-8b --out "$out/pro-fit.yaml"
echo "== predicted without refitting"
"$bin" calibrate --db "$db" --check 3 --no-fit --profile "$out/pro-fit.yaml" --model qwen3-32b --tp 2
{ cat "$root/scenarios/hardware/rtx4090.yaml"; sed -n '/^engine:/,$p' "$out/pro-fit.yaml" |
  sed 's/max_running: 128/max_running: 256/'; } >"$out/4090-fit.yaml"
"$bin" calibrate --db "$db" --check 2 --no-fit --profile "$out/4090-fit.yaml" --model llama3-8b
