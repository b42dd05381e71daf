#!/usr/bin/env bash
# Validation across layouts (docs/calibration.md, "Validation across layouts"): Argonne's
# LLM-Inference-Bench (github.com/argonne-lcf/LLM-Inference-Bench, BSD-3-Clause,
# Plots/All_results.csv) publishes vLLM's benchmark_latency on H100s: one batch of B requests
# of L prompt and L output tokens (ignore_eos, fp16), its latency, for Llama-3-8B at tp 1, 2
# and 4, L 128..2048, B 1..64. Each row becomes a `shardcheck import` of a latency run at its
# layout; the engine block is fitted on two tp-1 rows and predicts every tp-2 and tp-4 row
# (across layouts), then, fitted on tp 1 at B 1 and 64 of one length, every other tp-1 row
# (across loads), and last, fitted on tp 1 and tp 2, every tp-4 row. Prints each prediction
# with its interval beside the measured throughput, and how many were within 10% and inside.
#
#   [VIDUR_GIT_DIR=DIR] bench/argonne.sh LLM_INFERENCE_BENCH_GIT_DIR [SHARDCHECK] [MODEL_ROW PRESET]
#
# MODEL_ROW: the CSV's model (default meta-llama/Meta-Llama-3-8B) and PRESET ours (llama3-8b).
# The CSV is read with git show; nothing of it is kept. Writes into a scratch directory it
# prints. vLLM's knobs of that benchmark (vLLM 0.5, its V0 scheduler): max_num_seqs 256,
# max_num_batched_tokens = max_model_len 8192, chunked prefill off (prefill first, whole
# prompts), block 16, no prefix caching, 90% of memory, logits gathered in fp16.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
src=$1
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${2:-$root/build/release/shardcheck}
row_model=${3:-meta-llama/Meta-Llama-3-8B}
preset=${4:-llama3-8b}
out=$(mktemp -d)
echo "scratch: $out"
show() { git --git-dir="$src" show "HEAD:$1" 2>/dev/null || git -C "$src" show "HEAD:$1"; }
show Plots/All_results.csv |
  awk -F, -v m="$row_model" '$1 == "Nvidia H100 GPU" && $3 == "vLLM" && $4 == m {print $2, $5, $6, $7}' \
    >"$out/rows.txt"
db=$out/a.db
ids=$out/ids.txt
: >"$ids"
while read -r tp len batch lat; do
  printf '{"avg_latency": %s, "latencies": [%s]}\n' "$lat" "$lat" >"$out/r.json"
  id=$("$bin" import "$out/r.json" --db "$db" --model "$row_model" --tp "$tp" --batch-size "$batch" \
    --input-len "$len" --output-len "$len" --name "tp$tp-$len-$batch" | sed -n 's/.* as run \([0-9]*\) .*/\1/p')
  echo "$id $tp $len $batch $lat" >>"$ids"
done <"$out/rows.txt"
# the H100's all-reduce as measured (microsoft/vidur, MIT: data/profiling/network/
# h100_pairwise_nvlink/all_reduce.csv, vLLM's all-reduce between H100 SXM over NVLink), when
# VIDUR_GIT_DIR is given; else the profile's link estimate
prof=h100-sxm
if [ -n "${VIDUR_GIT_DIR:-}" ]; then
  git --git-dir="$VIDUR_GIT_DIR" show HEAD:data/profiling/network/h100_pairwise_nvlink/all_reduce.csv \
    >"$out/all_reduce.csv" 2>/dev/null ||
    git -C "$VIDUR_GIT_DIR" show HEAD:data/profiling/network/h100_pairwise_nvlink/all_reduce.csv \
      >"$out/all_reduce.csv"
  "$bin" profile import --profile h100-sxm --model "$preset" --vidur-allreduce "$out/all_reduce.csv" \
    --source "microsoft/vidur $(git --git-dir="$VIDUR_GIT_DIR" rev-parse --short HEAD 2>/dev/null ||
      git -C "$VIDUR_GIT_DIR" rev-parse --short HEAD)" --out "$out/h100-measured.yaml"
  prof=$out/h100-measured.yaml
fi
{
  [ "$prof" = h100-sxm ] && cat "$root/scenarios/hardware/h100-sxm.yaml" || cat "$prof"
  printf 'engine:\n  max_running: 256\n  token_budget: 8192\n  chunked_prefill: false\n'
  printf '  prefill_first: true\n  whole_prompts: true\n  block_size: 16\n  logits_dtype: bf16\n'
} >"$out/base.yaml"
id_of() { awk -v t="$1" -v l="$2" -v b="$3" '$2 == t && $3 == l && $4 == b {print $1}' "$ids"; }
fit_and_predict() { # NAME FIT_IDS... -- CHECK_IDS...
  local name=$1
  shift
  local args=()
  while [ "$1" != "--" ]; do args+=(--run "$1"); shift; done
  shift
  for c in "$@"; do args+=(--check "$c"); done
  "$bin" calibrate --db "$db" "${args[@]}" --profile "$out/base.yaml" --model "$preset" \
    --dtype f16 --out "$out/$name.yaml" >"$out/$name.log" 2>&1 || true
  echo "== $name: $(grep '^fit after' "$out/$name.log")"
  grep -E '^calibrate:|identified' "$out/$name.log" | sed 's/^/  /' || true
  printf '%-4s %-3s %5s %5s %12s %12s %24s %8s %s\n' run tp len batch 'meas tok/s' 'pred tok/s' \
    interval error inside
  grep -E '^(fit|check) +[0-9]+ +E2E' "$out/$name.log" | tr -d '\r' | while read -r what id rest; do
    set -- $(awk -v i="$id" '$1 == i {print $2, $3, $4}' "$ids")
    meas=$(echo "$rest" | sed -n 's/.*out tok\/s \([0-9.]*\) \[\([0-9.]*\), \([0-9.]*\)\] measured \([0-9.]*\).*/\4 \1 \2 \3/p')
    set -- "$@" $meas
    awk -v w="$what" -v id="$id" -v tp="$1" -v l="$2" -v b="$3" -v m="$4" -v p="$5" -v lo="$6" -v hi="$7" \
      'BEGIN { printf "%-4s %-3s %5s %5s %12.1f %12.1f %24s %+7.1f%% %s\n", w, tp, l, b, m, p, \
               sprintf("[%.1f, %.1f]", lo, hi), 100 * (p - m) / m, (m >= lo && m <= hi) ? "yes" : "NO" }'
  done | tee "$out/$name.table"
  awk '$1 == "check" { n++; e = $(NF - 1); sub("%", "", e); e = e + 0; if (e < 0) e = -e; if (e <= 10) w++;
                       if ($NF == "yes") in_++ }
       END { printf "predicted %d: within 10%%: %d, measured inside the interval: %d (%.0f%%)\n",
             n, w, in_, n ? 100 * in_ / n : 0 }' "$out/$name.table"
}
# across layouts: fitted on tp 1, L 1024 at B 16 and 64; every tp-2 and tp-4 row predicted
checks=$(awk '$2 != 1 {print $1}' "$ids")
fit_and_predict layouts "$(id_of 1 1024 16)" "$(id_of 1 1024 64)" -- $checks
# across loads: fitted on tp 1, L 512 at B 1 and 64; every other tp-1 row predicted
checks=$(awk '$2 == 1 && !($3 == 512 && ($4 == 1 || $4 == 64)) {print $1}' "$ids")
fit_and_predict loads "$(id_of 1 512 1)" "$(id_of 1 512 64)" -- $checks
# beyond the rule (two TP degrees): fitted on tp 1 and tp 2 at L 1024, B 16 and 64; every tp-4
# row predicted
checks=$(awk '$2 == 4 {print $1}' "$ids")
fit_and_predict joint "$(id_of 1 1024 16)" "$(id_of 1 1024 64)" "$(id_of 2 1024 16)" \
  "$(id_of 2 1024 64)" -- $checks
