#!/usr/bin/env bash
# The Debian package as a user gets it: makes the .deb files from a finished build with CPack
# (cmake/install.cmake), installs shardcheck_*.deb with apt-get (CI runs as root on a fresh
# Debian 12 machine; elsewhere through sudo), and from a directory outside the checkout runs
# `shardcheck --version`, `validate` and a short sim run of shipped scenarios by name, and
# checks the man page and the completion. shardcheck-cuda_*.deb, made when the CUDA backend is
# built, is installed beside it and must put its library where the binary looks. Then removes
# what it installed, so the machine is left as it was; it refuses to replace a shardcheck
# package that was installed before it started.
#
# usage: ci/package.sh [BUILD_DIR]   (default build/release; ci/test.sh runs it after its tests)
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${1:-build/release}" && pwd)
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive

if dpkg-query -W -f='${Status}' shardcheck 2>/dev/null | grep -q "install ok installed"; then
  echo "package: a shardcheck package is installed already ($(dpkg-query -W -f='${Version}' shardcheck)); remove it first"
  exit 1
fi

echo "== package: cpack -G DEB in $build"
rm -f "$build"/shardcheck*.deb
(cd "$build" && cpack -G DEB >cpack.log 2>&1) || { cat "$build/cpack.log"; exit 1; }
for d in "$build"/shardcheck*.deb; do
  dpkg-deb -f "$d" Package Version Depends | sed 's/^/  /'
done

cuda=0
ls "$build"/shardcheck-cuda_*.deb >/dev/null 2>&1 && cuda=1
remove() { # whatever of the two got installed
  local p there=()
  for p in shardcheck-cuda shardcheck; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" && there+=("$p")
  done
  [ ${#there[@]} -eq 0 ] && return 0
  echo "== package: removing ${there[*]}"
  $sudo apt-get remove -y -qq --purge "${there[@]}" >/dev/null
}
trap remove EXIT
echo "== package: apt-get install ./shardcheck_*.deb$([ $cuda = 1 ] && echo " ./shardcheck-cuda_*.deb")"
debs='./shardcheck_*.deb' # globs, expanded in $build below
[ $cuda = 1 ] && debs+=' ./shardcheck-cuda_*.deb'
# shellcheck disable=SC2086
(cd "$build" && $sudo apt-get install -y -qq $debs >apt.log 2>&1) || { cat "$build/apt.log"; exit 1; }
grep -E "^(Unpacking|Setting up)" "$build/apt.log" | sed 's/^/  /'

work=$(mktemp -d)
cd "$work"
fails=0
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}
sc=$(command -v shardcheck) || { echo "FAIL: no shardcheck on PATH after apt-get install"; exit 1; }
[ "$sc" = /usr/bin/shardcheck ] || fail "shardcheck is $sc, not the package's /usr/bin/shardcheck"

echo "== package: from $work"
shardcheck --version | tee version.txt
grep -qx "data: /usr/share/shardcheck" version.txt || fail "--version does not name /usr/share/shardcheck"
pkg=$(dpkg-query -W -f='${Version}' shardcheck)
grep -qx "shardcheck $pkg" version.txt || fail "the package's version $pkg is not the binary's"
shardcheck validate quickstart scaling-llama3-8b-h100 || fail "validate of shipped scenarios by name"
shardcheck run scaling-llama3-8b-h100 --db results.db --out report --quiet ||
  fail "run scaling-llama3-8b-h100 (mode sim)"
[ -f report/index.html ] || fail "the sim run wrote no report/index.html"
shardcheck help --man | cmp -s - <(zcat /usr/share/man/man1/shardcheck.1.gz) ||
  fail "/usr/share/man/man1/shardcheck.1.gz is not \`shardcheck help --man\`"
got=$(bash -c 'source /usr/share/bash-completion/completions/shardcheck
  COMP_WORDS=(shardcheck run quick); COMP_CWORD=2; _shardcheck; echo "${COMPREPLY[*]}"')
[ "$got" = quickstart ] || fail "the installed completion of 'shardcheck run quick' gave '$got'"
if [ $cuda = 1 ]; then
  [ -f /usr/lib/shardcheck/libshardcheck_cuda.so ] || fail "shardcheck-cuda has no /usr/lib/shardcheck/libshardcheck_cuda.so"
  grep -q "^backends: .*cuda" version.txt || fail "--version names no cuda backend"
fi
cd /
rm -rf "$work"
if [ "$fails" -gt 0 ]; then
  echo "package: $fails failure(s)"
  exit 1
fi
echo "== package: installed with apt-get, ran from outside the checkout"
