#!/usr/bin/env bash
# Two network namespaces joined by a veth pair stand in for two hosts: an MPI job with one rank
# in each, over Open MPI's TCP transport between the veth addresses (no shared memory, no
# loopback), started the way mpirun starts ranks on another host (its rsh agent, here a script
# that enters the other namespace instead of ssh).
#
#   1. mpi_check comm: the mpi communicator's collectives, deadlines and alarms across the link;
#   2. mpi_check engine 2 1: a tp 2 engine with its ranks in the two namespaces gives the
#      greedy tokens and logits (bit for bit) of the same engine as threads;
#   3. `shardcheck run` (in the first namespace) of a scenario whose tp 2 replica is an MPI job
#      placed by a hostfile naming the two addresses: every request served, and its greedy
#      tokens those of tp 1 (layout_mismatches 0).
# Each rank says which network namespace it runs in, the link's byte counters must have moved,
# and no process of a job is left after it. The namespaces are removed however the test ends.
#
# usage: mpi_netns.sh SHARDCHECK MPI_CHECK MPIEXEC
# Needs root and iproute2 (`ip`); without them it prints "skipped: needs root and iproute2" and
# exits 77 (ctest: skipped).
set -u
skip() { echo "skipped: $*"; exit 77; }
[ "$(id -u)" = 0 ] && command -v ip >/dev/null || skip "needs root and iproute2"
sc=$(readlink -f "$1") check=$(readlink -f "$2") mpiexec=$3
[ -x "$sc" ] && [ -x "$check" ] && command -v "$mpiexec" >/dev/null || skip "no MPI"
command -v sqlite3 >/dev/null || skip "needs the sqlite3 shell"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Under AddressSanitizer (tests/test_mpi.c does the same): full stacks, as MPI's libraries have
# no frame pointers and tests/lsan.supp names MPI's allocations by the libraries they pass
# through; the list of suppressions used is not printed. Ignored by a build without it.
case ${ASAN_OPTIONS:-} in *fast_unwind_on_malloc*) ;;
  *) export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0" ;; esac
case ${LSAN_OPTIONS:-} in *print_suppressions*) ;;
  *) export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}print_suppressions=0" ;; esac
ns_a=sc-a-$$ ns_b=sc-b-$$ veth_a=scva$$ veth_b=scvb$$
net=10.231.77 addr_a=10.231.77.1 addr_b=10.231.77.2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sc-netns-XXXXXX")

# Every process started here names $tmp on its command line (mpi_check through a link in $tmp,
# the agent in orted's arguments, shardcheck's ranks their socket under TMPDIR=$tmp); whatever
# is left of them when the test ends is ended by its id.
leftovers() { pgrep -f -- "$tmp/" || true; }
cleanup() {
  for pid in $(leftovers); do kill -9 "$pid" 2>/dev/null; done
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# a sanitizer build's reports (AddressSanitizer, LeakSanitizer, UBSan) in a job's output
no_reports() {
  ! grep -q -e "Sanitizer" -e "runtime error:" "$tmp/out" || fail "$1: a sanitizer report"
}

ip netns add "$ns_a" 2>"$tmp/err" || skip "cannot make a network namespace: $(cat "$tmp/err")"
ip netns add "$ns_b" || skip "cannot make a second network namespace"
ip link add "$veth_a" type veth peer name "$veth_b" 2>"$tmp/err" ||
  skip "cannot make a veth pair: $(cat "$tmp/err")"
ip link set "$veth_a" netns "$ns_a" && ip link set "$veth_b" netns "$ns_b" &&
  ip -n "$ns_a" addr add "$addr_a/24" dev "$veth_a" &&
  ip -n "$ns_b" addr add "$addr_b/24" dev "$veth_b" &&
  ip -n "$ns_a" link set "$veth_a" up && ip -n "$ns_b" link set "$veth_b" up &&
  ip -n "$ns_a" link set lo up && ip -n "$ns_b" link set lo up || {
  echo "FAIL: could not join the namespaces"
  exit 1
}

# mpirun's rsh agent: called as `AGENT HOST COMMAND...` for every host but its own; it starts
# the command (Open MPI's daemon) in the second namespace, with a host name of its own there
# when util-linux's unshare is at hand (each namespace then reads as a host of its own).
uts=""
command -v unshare >/dev/null && uts="unshare --uts"
cat >"$tmp/agent.sh" <<EOF
#!/bin/sh
shift
if [ -n "$uts" ]; then
  exec ip netns exec $ns_b $uts /bin/sh -c "hostname sc-netns-b; \$*"
fi
exec ip netns exec $ns_b /bin/sh -c "\$*"
EOF
# every rank says where it runs, then becomes the program
cat >"$tmp/rank.sh" <<'EOF'
#!/bin/sh
echo "rank ${OMPI_COMM_WORLD_RANK:-?}: netns $(readlink /proc/self/ns/net)"
exec "$@"
EOF
chmod +x "$tmp/agent.sh" "$tmp/rank.sh"
ln -s "$check" "$tmp/mpi_check"
export TMPDIR=$tmp

# Open MPI's settings for every job here: the TCP transport only, on the veth's subnet, both for
# MPI's messages and for its daemons' own wiring; the agent for the "remote" host.
export OMPI_MCA_plm_rsh_agent="$tmp/agent.sh"
export OMPI_MCA_btl=tcp,self
export OMPI_MCA_btl_tcp_if_include=$net.0/24
export OMPI_MCA_oob_tcp_if_include=$net.0/24

tx_bytes() { ip netns exec "$ns_a" cat "/sys/class/net/$veth_a/statistics/tx_bytes"; }
no_leftovers() {
  for _ in $(seq 50); do
    [ -z "$(leftovers)" ] && return 0
    sleep 0.2
  done
  fail "$1: a process of the job outlived it: $(leftovers | tr '\n' ' ')"
}

# One MPI job of 2 ranks, one in each namespace; its output in $tmp/out.
job() {
  local what=$1
  shift
  local before
  before=$(tx_bytes)
  timeout -k 10 300 ip netns exec "$ns_a" "$mpiexec" -np 2 --host "$addr_a:1,$addr_b:1" \
    "$tmp/rank.sh" "$@" >"$tmp/out" 2>&1 </dev/null
  local rc=$?
  cat "$tmp/out"
  [ "$rc" = 0 ] || fail "$what: exit $rc"
  local ns0 ns1
  ns0=$(sed -n 's/^rank 0: netns //p' "$tmp/out")
  ns1=$(sed -n 's/^rank 1: netns //p' "$tmp/out")
  [ -n "$ns0" ] && [ -n "$ns1" ] && [ "$ns0" != "$ns1" ] ||
    fail "$what: the ranks did not run in two namespaces ('$ns0', '$ns1')"
  local moved=$(($(tx_bytes) - before))
  echo "$what: $moved bytes sent over $veth_a"
  [ "$moved" -gt 100000 ] || fail "$what: only $moved bytes crossed the link"
  grep -q "FAIL" "$tmp/out" && fail "$what: a check failed"
  for r in 0 1; do
    grep -q "^rank $r: ok" "$tmp/out" || fail "$what: no 'rank $r: ok'"
  done
  no_reports "$what"
  no_leftovers "$what"
}

job comm "$tmp/mpi_check" comm
job "engine tp 2" "$tmp/mpi_check" engine 2 1
grep -q "tp 2 pp 1: 73728 logits, 0 not bit-identical" "$tmp/out" ||
  fail "engine tp 2: the logits line is missing"

# A scenario's tp 2 replica as an MPI job across the two namespaces; tp 1 (one process, on the
# first host) beside it for the greedy tokens. The runner runs in the first namespace.
printf '%s slots=1\n%s slots=1\n' "$addr_a" "$addr_b" >"$tmp/hosts"
cat >"$tmp/scn.yaml" <<EOF
name: netns
model: {preset: llama-tiny}
hardware: {backend: cpu, hostfile: '$tmp/hosts'}
deployments: [{tp: 1}, {tp: 2}]
workload:
  prompts:
    - {input: {uniform: [16, 64]}, output: {uniform: [8, 24]}}
  phases:
    - {fixed: {requests: 12, concurrency: 4}}
router: {isolation: mpi}
slo: {failed_requests: 0}
seed: 3
EOF
before=$(tx_bytes)
# the hostfile's first host is the runner's; each replica's mpirun uses the agent above
timeout -k 10 300 ip netns exec "$ns_a" "$sc" run "$tmp/scn.yaml" --db "$tmp/r.db" --no-report \
  >"$tmp/out" 2>&1 </dev/null
rc=$?
cat "$tmp/out"
[ "$rc" = 0 ] || fail "scenario: exit $rc"
grep -q "verdict: PASS" "$tmp/out" || fail "scenario: no PASS"
no_reports scenario
moved=$(($(tx_bytes) - before))
echo "scenario: $moved bytes sent over $veth_a"
[ "$moved" -gt 100000 ] || fail "scenario: only $moved bytes crossed the link"
q() { sqlite3 "$tmp/r.db" "$1"; }
got=$(q "SELECT count(*) || ':' || coalesce(CAST(sum(value) AS INTEGER), -1) FROM metric WHERE
         name = 'layout_mismatches' AND phase_id IS NULL AND class = ''")
[ "$got" = "1:0" ] || fail "scenario: layout_mismatches of tp 2 against tp 1: '$got'"
got=$(q "SELECT count(*) FROM request WHERE status != 'ok'")
[ "$got" = 0 ] || fail "scenario: $got requests not ok"
no_leftovers scenario

if [ "$fails" -gt 0 ]; then
  echo "$fails failure(s)"
  exit 1
fi
echo "ok: MPI jobs across two network namespaces"
