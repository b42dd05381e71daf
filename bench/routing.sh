#!/usr/bin/env bash
# Routing and the prefix cache (docs/benchmarks.md "Routing and the prefix cache"): the shipped
# chat scenarios, round-robin against prefix-affinity at dp 4, in mode sim on H100
# (chat-prefix-dp4-h100.yaml), in mode sim on the CPU profile and for real on the CPU backend
# (chat-prefix-dp4.yaml). Prints one row per run and policy: requests, TTFT mean/p50/p95,
# end-to-end mean, output tokens/s, the prefix cache hit rate and the replicas' busy fraction.
#   bench/routing.sh [BUILD_DIR] [sim|real|all]
set -euo pipefail
BUILD=${1:-build/release}
WHAT=${2:-all}
BIN=$BUILD/shardcheck
[ -x "$BIN" ] || { echo "routing.sh: $BIN not found (build first)" >&2; exit 2; }
cd "$(dirname "$0")/.."
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

table() { # run-name db
  sqlite3 -separator ' | ' "$2" "SELECT '$1', d.label,
    CAST(max(CASE WHEN m.name = 'requests' THEN m.value END) AS INT),
    printf('%.0f', max(CASE WHEN m.name = 'ttft_mean_ms' THEN m.value END)),
    printf('%.0f', max(CASE WHEN m.name = 'ttft_p50_ms' THEN m.value END)),
    printf('%.0f', max(CASE WHEN m.name = 'ttft_p95_ms' THEN m.value END)),
    printf('%.0f', max(CASE WHEN m.name = 'e2el_mean_ms' THEN m.value END)),
    printf('%.1f', max(CASE WHEN m.name = 'output_tok_s' THEN m.value END)),
    printf('%.3f', max(CASE WHEN m.name = 'prefix_cache_hit_rate' THEN m.value END)),
    printf('%.2f', max(CASE WHEN m.name = 'busy_frac' THEN m.value END))
    FROM metric m JOIN deployment d ON d.id = m.deployment_id
    WHERE m.phase_id IS NULL AND m.class = '' GROUP BY d.id ORDER BY d.id"
}

echo "run | deployment | requests | TTFT mean ms | TTFT p50 ms | TTFT p95 ms | E2EL mean ms | output tok/s | cache hit rate | busy"
if [ "$WHAT" != real ]; then
  "$BIN" run scenarios/chat-prefix-dp4-h100.yaml --db "$T/h100.db" --no-report --quiet >/dev/null || true
  table "sim h100-sxm llama3-8b" "$T/h100.db"
  "$BIN" run scenarios/chat-prefix-dp4.yaml --mode sim --db "$T/cpu-sim.db" --no-report \
    --quiet >/dev/null || true
  table "sim cpu llama-small" "$T/cpu-sim.db"
fi
if [ "$WHAT" != sim ]; then
  "$BIN" run scenarios/chat-prefix-dp4.yaml --db "$T/cpu-real.db" --no-report --quiet \
    >/dev/null || true
  table "real cpu llama-small" "$T/cpu-real.db"
fi
