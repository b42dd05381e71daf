#!/usr/bin/env bash
# Reproduces the validation table of docs/calibration.md: LLMServingSim's published vLLM
# traces (github.com/casys-kaist/LLMServingSim, MIT licence, bench/examples/) are imported,
# each card's profile takes the GEMM times LLMServingSim measured on it (profiler/perf/), the
# engine block is fitted on the RTX PRO 6000 Llama-3.1-8B trace, and the other traces are
# predicted without refitting; then the other way, fitted on the RTX 4090 trace.
#
#   bench/calibration.sh LLMSERVINGSIM_GIT_DIR [SHARDCHECK]
#
# LLMSERVINGSIM_GIT_DIR: a clone (or bare git directory) of that repository; the traces are read
# with git show, so no work tree is needed. Writes into a scratch directory it prints.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
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
# the scheduler knobs of each run (their vllm/meta.json, vLLM 0.19.0): max_num_seqs,
# max_num_batched_tokens, block 16, chunked prefill, prefix caching, scheduler_reserve_full_isl
# and the 1% watermark (vLLM defaults); the 4090's KV blocks as vLLM reported them (num_gpu_blocks;
# the PRO 6000 runs do not say, and never fill their cache); logits all-gathered over TP in the
# model's dtype, as vLLM's LogitsProcessor gathers the LM head's output (bf16 here)
knobs() {
  printf '  max_running: %s\n  token_budget: 2048\n  block_size: 16\n' "$1"
  printf '  chunked_prefill: true\n  prefix_caching: true\n  reserve_full_isl: true\n'
  printf '  kv_watermark: 0.01\n  logits_dtype: bf16\n'
  [ -z "${2:-}" ] || printf '  num_gpu_blocks: %s\n' "$2"
}
blocks4090=$(show $ex/RTX4090/Llama-3.1-8B/vllm/meta.json | sed -n 's/.*"num_gpu_blocks": \([0-9]*\).*/\1/p' | head -1)
# tables CARD MODEL TP SHAPES: the GEMM times LLMServingSim measured of MODEL bf16 at tensor
# parallelism TP on CARD (profiler/perf/CARD/MODEL/bf16/tpTP, vLLM 0.19.0's own kernels): the
# fused q|k|v, o, gate|up and down projections (dense.csv) and the LM head (per_sequence.csv),
# us at each token count, as a profile's `gemm:` entries (seconds vs rows m). SHAPES: each one's
# per-rank "n k", in that order, as the cost model prices them.
tables() {
  local p=profiler/perf/$1/$2/bf16/tp$3
  { show "$p/dense.csv"; show "$p/per_sequence.csv" | sed 's/^/ps:/'; } | awk -F, -v shapes="$4" '
    BEGIN { split(shapes, s, " "); split("qkv_proj o_proj gate_up_proj down_proj ps:lm_head", op, " ")
            for (i = 1; i <= 5; i++) { shape[op[i]] = s[2 * i - 1] " " s[2 * i]; order[i] = op[i] }
            split("1 2 4 8 16 24 32 48 64 96 128 192 256 384 512 768 1024 1536 2048", pts, " ")
            for (i in pts) want[pts[i]] = 1 }
    ($1 in shape) && ($2 in want) { t[$1] = t[$1] sprintf("%s[%d, %.6g]", t[$1] ? ", " : "", $2, $3 / 1e6) }
    END { for (i = 1; i <= 5; i++) { o = order[i]; if (!(o in t)) continue; split(shape[o], nk, " ")
            printf "  - {n: %d, k: %d, threads: 1, t: [%s]}\n", nk[1], nk[2], t[o] } }'
}
llama8b="6144 4096 4096 4096 28672 4096 4096 14336 128256 4096"        # tp 1
qwen32b_tp2="5120 5120 5120 4096 25600 5120 5120 12800 75968 5120"    # tp 2, per rank
# mem_eff CARD BW: the achieved fraction of CARD's memory bandwidth BW that LLMServingSim's
# measured GEMVs show (Llama-3.1-8B tp1, one token: the four projections of a layer read their
# bf16 weights once), replacing the profile's estimate (0.85).
mem_eff() {
  show "profiler/perf/$1/meta-llama/Llama-3.1-8B/bf16/tp1/dense.csv" | awk -F, -v bw="$2" '
    BEGIN { nk["qkv_proj"] = 6144 * 4096; nk["o_proj"] = 4096 * 4096
            nk["gate_up_proj"] = 28672 * 4096; nk["down_proj"] = 4096 * 14336 }
    ($1 in nk) && $2 == 1 { t += $3 * 1e-6; b += 2 * nk[$1] }
    END { printf "mem_eff: %.4f\n", b / t / bw }'
}
# link CONFIG: the GPU link of the machine a trace ran on as LLMServingSim describes it in the
# trace's config.json (link_bw "GB/s", link_latency ns), which its authors set so that their
# all-reduce (a ring: 2(n-1) steps of latency plus 2(n-1)/n of the bytes over the bandwidth, the
# formula the cost model uses) matches NCCL's on that machine; it replaces the profile's
# estimate (docs/calibration.md). Their network backend (ASTRA-sim's analytical one,
# common/NetworkFunction.cpp, bw_GBps_to_Bpns) reads that GB as 2^30 bytes, so 16 is
# 17.18e9 bytes/s, the unit of a profile's link_bw.
link() {
  show "$1" | awk '/"link_bw"/ { gsub(/[^0-9.]/, "", $2); bw = $2 }
    /"link_latency"/ { gsub(/[^0-9.]/, "", $2); lat = $2 }
    END { printf "link_bw: %.6g\nlink_latency_s: %se-9\n", bw * 2^30, lat }'
}
# mixed CARD MODEL TP HEADS KV_HEADS HEAD_DIM: how much slower decode attention ran in a batch
# with a prompt chunk on CARD (vLLM 0.19's FlashAttention, one varlen kernel for both), from
# LLMServingSim's attention.csv of MODEL at TP: for each count of decodes n and each context,
# the median over prompt chunks (from position 0) of (mixed - the chunk alone) / the same
# decodes alone, as the engine block's `mixed_attn` entries for that per-rank shape.
mixed() {
  show "profiler/perf/$1/$2/bf16/tp$3/attention.csv" | awk -F, '
    NR > 1 && $1 == 0 && $3 > 0 { pure[$3 " " $4] = $5 }
    NR > 1 && $1 > 0 && $2 == 0 && $3 == 0 { pre[$1] = $5 }
    NR > 1 && $1 > 0 && $2 == 0 && $3 > 0 { mix[$1 " " $3 " " $4] = $5 }
    END { for (k in mix) { split(k, a, " "); p = a[2] " " a[3]
            if ((p in pure) && (a[1] in pre)) print a[2], a[3], (mix[k] - pre[a[1]]) / pure[p] } }' |
    sort -k1,1n -k2,2n -k3,3g | awk -v h="$4" -v kv="$5" -v hd="$6" '
    function cell() { if (c) { m = c % 2 ? v[(c + 1) / 2] : (v[c / 2] + v[c / 2 + 1]) / 2
                        row = row sprintf("%s[%d, %.3f]", row ? ", " : "", ctx, m < 1 ? 1 : m) } c = 0 }
    function line() { cell(); if (row) printf "    - {heads: %d, kv_heads: %d, head_dim: %d, decodes: %d, factor: [%s]}\n", h, kv, hd, n, row; row = "" }
    $1 != n { line(); n = $1; ctx = $2 } $2 != ctx { cell(); ctx = $2 } { v[++c] = $3 }
    END { line() }'
}

# each card's profile with its measured tables (the rooflines price the rest: attention,
# elementwise, the other models' shapes), and its engine block: vLLM's knobs and the card's
# mixed-batch attention; `fitted FILE` is what a fit wrote of the engine's costs, which go to
# the other card's profile with that card's own knobs and measurements
pro_card() {
  grep -v -E "^(mem_eff|link_bw|link_latency_s):" "$root/scenarios/hardware/rtx-pro-6000.yaml"
  mem_eff RTXPRO6000 1792e9; link $ex/RTXPRO6000/Qwen3-32B/config.json; echo "gemm:"
  tables RTXPRO6000 meta-llama/Llama-3.1-8B 1 "$llama8b"; tables RTXPRO6000 Qwen/Qwen3-32B 2 "$qwen32b_tp2"
  echo "engine:"
}
pro_engine() {
  knobs 128; echo "  mixed_attn:"
  mixed RTXPRO6000 meta-llama/Llama-3.1-8B 1 32 8 128; mixed RTXPRO6000 Qwen/Qwen3-32B 2 32 4 128
}
card_4090() {
  grep -v -E "^(mem_eff):" "$root/scenarios/hardware/rtx4090.yaml"; mem_eff RTX4090 1008e9; echo "gemm:"
  tables RTX4090 meta-llama/Llama-3.1-8B 1 "$llama8b"; echo "engine:"
}
engine_4090() { knobs 256 "$blocks4090"; echo "  mixed_attn:"; mixed RTX4090 meta-llama/Llama-3.1-8B 1 32 8 128; }
fitted() { grep -E '^  (step_s|seq_s|prefill_eff|decode_eff):' "$1"; }
{ pro_card; pro_engine; } >"$out/pro-base.yaml"
{ card_4090; engine_4090; } >"$out/4090-base.yaml"
echo "== idealized engine (no fitted costs)"
"$bin" calibrate --db "$db" --check 1 --no-fit --profile "$out/pro-base.yaml" --model llama3.1-8b
"$bin" calibrate --db "$db" --check 3 --no-fit --profile "$out/pro-base.yaml" --model qwen3-32b --tp 2
"$bin" calibrate --db "$db" --check 2 --no-fit --profile "$out/4090-base.yaml" --model llama3-8b
echo "== fit on the RTX PRO 6000 Llama-3.1-8B trace (run 1)"
"$bin" calibrate --db "$db" --run 1 --profile "$out/pro-base.yaml" --model llama3.1-8b --out "$out/pro-fit.yaml"
echo "== predicted without refitting"
"$bin" calibrate --db "$db" --check 3 --no-fit --profile "$out/pro-fit.yaml" --model qwen3-32b --tp 2
{ card_4090; fitted "$out/pro-fit.yaml"; engine_4090; } >"$out/4090-fit.yaml"
"$bin" calibrate --db "$db" --check 2 --no-fit --profile "$out/4090-fit.yaml" --model llama3-8b
echo "== the other way: fit on the RTX 4090 trace (run 2), predict the PRO 6000 ones"
"$bin" calibrate --db "$db" --run 2 --profile "$out/4090-base.yaml" --model llama3-8b --out "$out/4090-own.yaml"
{ pro_card; fitted "$out/4090-own.yaml"; pro_engine; } >"$out/pro-from-4090.yaml"
"$bin" calibrate --db "$db" --check 1 --no-fit --profile "$out/pro-from-4090.yaml" --model llama3.1-8b
"$bin" calibrate --db "$db" --check 3 --no-fit --profile "$out/pro-from-4090.yaml" --model qwen3-32b --tp 2
