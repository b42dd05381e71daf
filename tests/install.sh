#!/usr/bin/env bash
# An install that cannot see the checkout: `cmake --install` of this build into a DESTDIR, the
# installed tree then moved elsewhere (so nothing may point at where it was staged, and the build
# tree's file naming the checkout is not beside the binary), run from a directory outside both:
# --version names the installed data root; a shipped scenario by name validates, runs in mode
# sim and writes its report; a profile installed under a name not built in is found by that name;
# a profile found nowhere is one line naming every place looked, exit 2; the real engine runs;
# the man page is `help --man`; the completion and the docs are in place; the CUDA library is
# installed exactly when the backend is built, and then loads from the installed tree.
#
# usage: tests/install.sh BUILD_DIR (ctest passes it; the build must be complete)
set -euo pipefail
build=$(cd "$1" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tmp=$(cd "$tmp" && pwd -P)
fails=0
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}
# Runs a command (output into $tmp/out), expects exit code $1.
expect_rc() {
  local want=$1 rc=0
  shift
  "$@" >"$tmp/out" 2>&1 || rc=$?
  if [ "$rc" -ne "$want" ]; then
    fail "exit $rc (expected $want): $*"
    sed 's/^/  | /' "$tmp/out" | tail -20
  fi
}

DESTDIR=$tmp/stage cmake --install "$build" --prefix /opt/shardcheck >"$tmp/install.log"
mv "$tmp/stage/opt/shardcheck" "$tmp/moved"
rm -rf "$tmp/stage"
root=$tmp/moved
sc=$root/bin/shardcheck
mkdir "$tmp/work"
cd "$tmp/work"

echo "== the installed tree"
(cd "$root" && find . -type f | sort) | sed 's/^/  /' | grep -v '/scenarios/\|/docs/' || true
for f in bin/shardcheck share/shardcheck/scenarios/quickstart.yaml \
  share/shardcheck/scenarios/hardware/h100-sxm.yaml share/shardcheck/scenarios/models/llama-small.yaml \
  share/shardcheck/scenarios/capacity/llama3-8b-h100.yaml share/man/man1/shardcheck.1.gz \
  share/bash-completion/completions/shardcheck share/doc/shardcheck/README.md \
  share/doc/shardcheck/docs/install.md share/doc/shardcheck/docs/design.md; do
  [ -f "$root/$f" ] || fail "not installed: $f"
done

echo "== --version"
expect_rc 0 "$sc" --version
cat "$tmp/out"
grep -qx "data: $root/share/shardcheck" "$tmp/out" || fail "--version does not name $root/share/shardcheck"
grep -q "^git revision: ." "$tmp/out" || fail "--version has no git revision"

echo "== CUDA files exactly when the backend is built"
libs=$(cd "$root" && find . -name '*.so*' | sort)
if grep -q "^backends:.*cuda" "$tmp/out"; then
  [ "$libs" = "./lib/shardcheck/libshardcheck_cuda.so" ] ||
    fail "a CUDA build installs lib/shardcheck/libshardcheck_cuda.so only, got: $libs"
  # A one-request real run on GPU 0: with a GPU it runs; without one the library is loaded from
  # the installed tree and says so ("no CUDA device"), never "cannot load".
  cat >cuda.yaml <<'EOF'
name: install-cuda
model: {preset: llama-tiny}
mode: real
hardware: {backend: cuda, devices: [0], gpus: 0}
deployments: [{tp: 1}]
workload:
  prompts: [{name: p, weight: 1, input: 8, output: 4}]
  phases: [{fixed: {requests: 1, concurrency: 1}}]
seed: 1
EOF
  rc=0
  "$sc" run cuda.yaml --db cuda.db --no-report --quiet >"$tmp/out" 2>&1 || rc=$?
  if grep -q "cannot load" "$tmp/out" || { [ $rc -ne 0 ] && ! grep -q "no CUDA device" "$tmp/out"; }; then
    fail "the installed CUDA backend did not load (exit $rc)"
    sed 's/^/  | /' "$tmp/out" | tail -5
  fi
else
  [ -z "$libs" ] || fail "a build without CUDA installed: $libs"
fi

echo "== the man page is help --man (before a profile is added: help texts list the names)"
"$sc" help --man >man.1
zcat "$root/share/man/man1/shardcheck.1.gz" | cmp -s - man.1 ||
  fail "share/man/man1/shardcheck.1.gz differs from \`shardcheck help --man\`"

echo "== a shipped scenario by name, from $tmp/work"
expect_rc 0 "$sc" validate quickstart
grep -q "^$root/share/shardcheck/scenarios/quickstart.yaml: ok" "$tmp/out" ||
  fail "validate quickstart did not read the installed file: $(cat "$tmp/out")"
expect_rc 0 "$sc" run quickstart --mode sim --db results.db --out report --quiet
[ -f report/index.html ] || fail "run quickstart --mode sim wrote no report/index.html"
[ "$(sqlite3 results.db 'SELECT count(*) FROM request')" -gt 0 ] ||
  fail "run quickstart --mode sim recorded no requests"
expect_rc 0 "$sc" validate capacity/llama3-8b-h100

echo "== profiles: installed by a new name; found nowhere"
sed 's/^name: .*/name: site-gpu/' "$root/share/shardcheck/scenarios/hardware/h100-sxm.yaml" \
  >"$root/share/shardcheck/scenarios/hardware/site-gpu.yaml"
sed 's/profile: h100-sxm/profile: site-gpu/' "$root/share/shardcheck/scenarios/long-context.yaml" \
  >site.yaml
expect_rc 0 "$sc" validate site.yaml
"$sc" help --list profiles | grep -qx site-gpu || fail "help --list profiles lacks site-gpu"
sed 's/profile: site-gpu/profile: nosuch/' site.yaml >nosuch.yaml
expect_rc 2 "$sc" validate nosuch.yaml
want="no file $root/share/shardcheck/scenarios/hardware/nosuch.yaml"
[ "$(wc -l <"$tmp/out")" -eq 1 ] || fail "an unknown profile takes more than one line"
grep -qF "$want" "$tmp/out" || fail "an unknown profile's message lacks '$want': $(cat "$tmp/out")"
grep -qF "not built in (a100-80g, " "$tmp/out" || fail "an unknown profile's message lacks the built-in names"
expect_rc 2 "$sc" run nosuch-scenario
grep -qF "no $root/share/shardcheck/scenarios/nosuch-scenario.yaml" "$tmp/out" ||
  fail "an unknown scenario's message does not say where it looked: $(cat "$tmp/out")"

echo "== the real engine"
expect_rc 0 "$sc" generate --model llama-tiny --tp 2 --prompt-ids 1,2,3 --max-tokens 4

if [ "$fails" -gt 0 ]; then
  echo "install: $fails failure(s)"
  exit 1
fi
echo "install: the installed tree runs from $tmp/work"
