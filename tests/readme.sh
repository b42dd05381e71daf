#!/usr/bin/env bash
# Every command README.md shows runs, so a README that shows a command that no longer works
# fails the tests. How each kind is checked, and where a cheaper form stands in for it:
#
# - The first ```sh block (a fresh Debian machine) must be exactly `ci/quickstart.sh` and
#   `ci/test.sh`; each must exist and parse (bash -n). They are not run here: ci/test.sh is what
#   runs this test, and the quickstart is two minutes of real load (ci/quickstart.sh's own
#   commands are the binary's, checked below).
# - Every other ```sh block runs as a bash script (-e -o pipefail), in README order, in a
#   scratch directory where scenarios/ is the checkout's, build/release is the build directory
#   of the binary under test and HOME is the scratch directory (so the install block installs
#   there). Changed on the way, each named here:
#     `shardcheck profile ...` gets --quick (the full measurement is about 65 s);
#     `shardcheck serve ...` runs in the background on a free port until its block ends, and
#       the block's localhost:8000 becomes that port;
#     curl runs with --fail; sqlite3 must print at least one row;
#     results.db is the database of `run quickstart --mode sim`, made first (the README's
#       comes from the real quickstart, two minutes).
# - The ```yaml block is written to my-check.yaml; `validate` must accept it and
#   `run my-check.yaml --mode sim` must give a verdict (exit 0 or 1).
# - In the prose, every `shardcheck CMD ...` must name a command whose --help lists each --flag
#   shown with it, and every ci/..., bench/... or build/release/... path named must exist.
#
# usage: tests/readme.sh SHARDCHECK SOURCE_DIR BUILD_DIR (ctest passes them)
set -uo pipefail
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=$(cd "$2" && pwd)
build=$(cd "$3" && pwd)
readme=$src/README.md
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}

# --- the blocks, in order: $tmp/blocks/NN.LANG
mkdir "$tmp/blocks" "$tmp/work"
awk -v dir="$tmp/blocks" '
  /^```/ {
    if (inb) { inb = 0; close(f); next }
    n++; lang = substr($0, 4); if (lang == "") lang = "txt"
    f = sprintf("%s/%02d.%s", dir, n, lang); inb = 1; printf "" > f; next
  }
  inb { print > f }' "$readme"

# --- the scratch directory
cd "$tmp/work"
ln -s "$src/scenarios" scenarios
mkdir build
ln -s "$build" build/release
[ "$bin" -ef build/release/shardcheck ] || fail "$bin is not the build directory's shardcheck"
export HOME=$tmp/work
"$bin" run quickstart --mode sim --db results.db --out reports/out/quickstart --quiet >/dev/null ||
  fail "run quickstart --mode sim (the database the sqlite3 examples read)"

cat >"$tmp/prelude.sh" <<'EOF'
set -e -o pipefail
curl() { command curl --fail -sS "$@"; }
sqlite3() {
  local out
  out=$(command sqlite3 "$@")
  [ -n "$out" ] || { echo "sqlite3 printed no rows: $*" >&2; return 1; }
  printf '%s\n' "$out"
}
sc_wait_http() { # port: until /health answers, 30 s at most
  for _ in $(seq 300); do command curl -sf "localhost:$1/health" >/dev/null && return 0; sleep 0.1; done
  echo "nothing answers on port $1" >&2
  return 1
}
EOF

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

first=1
for b in "$tmp"/blocks/*; do
  name=README-block-$(basename "$b")
  case $b in
  *.sh)
    if [ $first = 1 ]; then
      first=0
      got=$(sed 's/#.*//; s/[[:space:]]*$//; /^$/d' "$b")
      [ "$got" = $'ci/quickstart.sh\nci/test.sh' ] ||
        fail "the fresh-machine block must be ci/quickstart.sh and ci/test.sh, is: $(echo $got)"
      for s in ci/quickstart.sh ci/test.sh; do
        [ -x "$src/$s" ] && bash -n "$src/$s" || fail "$s is missing, not executable or does not parse"
      done
      continue
    fi
    port=$(free_port)
    {
      cat "$tmp/prelude.sh"
      sed -e '/shardcheck profile /{s/[[:space:]]*#.*//; s/$/ --quick/;}' \
        -e "/shardcheck serve /{s/--port 8000/--port $port/; s/[[:space:]]*#.*//; s/\$/ \\&\\nsc_wait_http $port/;}" \
        -e "s/localhost:8000/localhost:$port/g" "$b"
      echo 'kill $(jobs -p) 2>/dev/null || true'
    } >"$tmp/$name"
    echo "== $name"
    sed 's/^/  | /' "$b"
    if ! bash "$tmp/$name" >"$tmp/$name.log" 2>&1; then
      fail "$name did not run"
      sed 's/^/  > /' "$tmp/$name.log" | tail -15
    fi
    ;;
  *.yaml)
    echo "== $name: as my-check.yaml"
    cp "$b" my-check.yaml
    "$bin" validate my-check.yaml >"$tmp/out" 2>&1 || { fail "validate my-check.yaml"; cat "$tmp/out"; }
    rc=0
    "$bin" run my-check.yaml --mode sim --db check.db --no-report --quiet >"$tmp/out" 2>&1 || rc=$?
    [ $rc -le 1 ] || { fail "run my-check.yaml --mode sim exited $rc"; tail -5 "$tmp/out"; }
    ;;
  esac
done

# --- commands in the prose
echo "== commands named in the prose"
prose=$(awk '/^```/ { inb = !inb; next } !inb' "$readme" | tr '\n' ' ')
commands=$("$bin" help --list commands)
while IFS= read -r span; do
  span=${span#\`}
  span=${span%\`}
  read -r -a w <<<"$span"
  case ${w[0]-} in
  shardcheck | build/release/shardcheck)
    cmd=${w[1]-}
    [[ $cmd =~ ^[a-z]+$ ]] || continue # `shardcheck <command> --help`
    grep -qx "$cmd" <<<"$commands" || [ "$cmd" = worker ] || { fail "\`$span\`: no command '$cmd'"; continue; }
    helpargs=("$cmd")
    [ "$cmd" = model ] && [[ ${w[2]-} =~ ^(gen|info|list)$ ]] && helpargs+=("${w[2]}")
    help=$("$bin" "${helpargs[@]}" --help 2>&1)
    for flag in $(grep -oE -- '(^| )--[a-z][a-z0-9-]*' <<<"$span"); do
      grep -qE -- "(^|[^a-z-])$flag([^a-z-]|$)" <<<"$help" ||
        fail "\`$span\`: \`shardcheck ${helpargs[*]} --help\` lists no $flag"
    done
    ;;
  ci/* | bench/*)
    [ -e "$src/${w[0]}" ] || fail "\`$span\`: no ${w[0]} in the checkout"
    ;;
  build/release/*)
    [ -e "$build/${w[0]#build/release/}" ] || fail "\`$span\`: the build has no ${w[0]}"
    ;;
  esac
done < <(grep -oE '`[^`]+`' <<<"$prose")

if [ "$fails" -gt 0 ]; then
  echo "readme: $fails failure(s)"
  exit 1
fi
echo "readme: every command README.md shows runs"
