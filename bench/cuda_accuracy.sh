#!/usr/bin/env bash
# Simulator accuracy on one NVIDIA GPU, the CUDA counterpart of bench/accuracy.sh: measures
# GPU 0 with `shardcheck profile --backend cuda` (llama-small, tp 1 and 2, every rank on GPU 0),
# runs scenarios/cuda-accuracy.yaml for real on the CUDA backend (llama-small, tp1 and tp2
# sharing GPU 0, a closed loop of 1 then 8 users), then the same scenario in mode sim with the
# measured profile, into one database; `shardcheck report` over both runs prints predicted vs
# measured TTFT, TPOT, E2EL, throughput and busy fraction per deployment and phase with the
# relative error, and the mean |error| over the deployments. The goal is mean TPOT within 5%.
# Numbers go to docs/benchmarks.md with the GPU they ran on.
#
# Run it on an otherwise idle GPU: the profile and the real run are timed on the wall clock.
# It took 35 s on an H100 80GB (profile 14 s, real run 21 s, sim run and report under 1 s;
# 2026-11-27). The library path is the caller's: with the CUDA runtime, cuBLAS
# and NCCL (and shardcheck's own libraries, e.g. from ci/gpu.sh's unpacked .gpu-debs) on
# LD_LIBRARY_PATH; libshardcheck_cuda.so is found beside BIN.
#
# The sim run is made with `--sensitivity 2%`, so the report lists beside each deployment's
# errors how far its predicted TTFT and TPOT move per price change (docs/simulator.md).
#
# usage: bench/cuda_accuracy.sh
# env:   BIN (default build/shardcheck), OUT (default /tmp/shardcheck-cuda-accuracy),
#        SCENARIO (default scenarios/cuda-accuracy.yaml), PROFILE (default: measure into
#        $OUT/cuda-measured.yaml; or an existing profile .yaml to skip measuring),
#        PROFILE_ARGS (extra flags of `shardcheck profile`, e.g. --quick), REPEAT (default 1:
#        real runs, each compared with the one prediction; with 2 or more the report ends with
#        the real runs against each other, the floor under the prediction's errors)
set -euo pipefail
BIN=${BIN:-build/shardcheck}
OUT=${OUT:-/tmp/shardcheck-cuda-accuracy}
SCENARIO=${SCENARIO:-scenarios/cuda-accuracy.yaml}
PROFILE=${PROFILE:-measure}
PROFILE_ARGS=${PROFILE_ARGS:-}
REPEAT=${REPEAT:-1}
case $REPEAT in '' | *[!0-9]* | 0) echo "cuda_accuracy.sh: REPEAT must be a positive integer" >&2; exit 2 ;; esac
mkdir -p "$OUT"
t0=$SECONDS

if [ "$PROFILE" = measure ]; then
  PROFILE=$OUT/cuda-measured.yaml
  echo "== measuring GPU 0 into $PROFILE" >&2
  # shellcheck disable=SC2086 # PROFILE_ARGS is a list of flags
  "$BIN" profile --backend cuda --model llama-small --tp-list 1,2 $PROFILE_ARGS \
    --out "$PROFILE" >&2
fi

name=$(basename "$SCENARIO" .yaml)
db=$OUT/$name.db
rm -f "$db" "$db-wal" "$db-shm"
# exit 1 is a failed SLO, which still records the run; 2 and 3 mean there is nothing to compare
run() {
  local rc=0
  "$BIN" run "$SCENARIO" --db "$db" --quiet --no-report "$@" >/dev/null || rc=$?
  if [ "$rc" -gt 1 ]; then
    echo "cuda_accuracy.sh: \`shardcheck run $SCENARIO $*\` failed (exit $rc)" >&2
    exit "$rc"
  fi
}
for i in $(seq 1 "$REPEAT"); do
  echo "== $name: real run $i of $REPEAT on cuda [$((SECONDS - t0)) s]" >&2
  run
done
sim=$((REPEAT + 1))
echo "== $name: sim run (profile $PROFILE) [$((SECONDS - t0)) s]" >&2
run --mode sim --profile "$PROFILE" --sensitivity 2%
runs=(--run "$sim")
for i in $(seq 1 "$REPEAT"); do runs+=(--run "$i"); done
echo "== $name: predicted (run $sim, sim) vs measured (runs 1 to $REPEAT, cuda) [$((SECONDS - t0)) s]"
"$BIN" report --db "$db" "${runs[@]}" --out "$OUT/$name-report"
echo "== done in $((SECONDS - t0)) s; profile $PROFILE, database $db" >&2
