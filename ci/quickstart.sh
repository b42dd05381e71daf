#!/usr/bin/env bash
# First run on a fresh Debian machine: installs what is missing, builds shardcheck, then
# shows the engine at work on the embedded defaults (CPU backend, llama-tiny with generated
# weights): the same prompt through tp=1 and tp=2 x pp=2, which must give the same tokens,
# and a memory plan for a real model on real GPUs.
set -euo pipefail
cd "$(dirname "$0")/.."

bash ci/setup.sh
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build/release -j"$(nproc)" --target shardcheck
sc=build/release/shardcheck

echo
echo "== llama-tiny, tp=1 pp=1"
$sc generate --model llama-tiny --prompt "shardcheck" --max-tokens 24
echo
echo "== llama-tiny, tp=2 pp=2 (four ranks as threads; the tokens must match tp=1)"
$sc generate --model llama-tiny --prompt "shardcheck" --max-tokens 24 --tp 2 --pp 2
a=$($sc generate --model llama-tiny --prompt "shardcheck" --max-tokens 24 --json | sed 's/.*"tokens":\(\[[^]]*\]\).*/\1/')
b=$($sc generate --model llama-tiny --prompt "shardcheck" --max-tokens 24 --tp 2 --pp 2 --json | sed 's/.*"tokens":\(\[[^]]*\]\).*/\1/')
if [ "$a" != "$b" ]; then
  echo "quickstart: tp=2 x pp=2 tokens differ from tp=1: $b vs $a" >&2
  exit 3
fi
echo "tokens identical across layouts"
echo
echo "== memory plan: llama3-70b on 4 x h100-sxm"
$sc plan --model llama3-70b --gpu h100-sxm --gpus 4
