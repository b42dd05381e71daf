#!/usr/bin/env bash
# Installs every Debian package shardcheck needs to build, test and run, and only what is
# missing, so running it twice costs nothing. Needs root (or sudo) only when something is missing.
set -euo pipefail

pkgs=(
  build-essential cmake pkg-config   # compiler and build
  libopenblas-dev                    # CBLAS for the CPU backend
  libsqlite3-dev                     # results store
  libfyaml-dev                       # scenario, preset and hardware-profile YAML
  libjansson-dev                     # config.json and safetensors headers
  libcriterion-dev                   # tests
  gnuplot-nox                        # plots, at run time
  faketime                           # clock-jump faults (libfaketime in the workers)
  clang libclang-rt-dev              # ci/fuzz.sh: libFuzzer with ASan + UBSan (Debian's clang)
  jq                                 # bench/gate.sh reads the gate's JSON
  sqlite3 bc                         # ci/same-rows.sh and the bench/ scripts read results
  libmicrohttpd-dev                  # shardcheck serve's HTTP server
  libcurl4-openssl-dev               # HTTP client: serve's tests, external targets
  python3                            # tests/openai_standin.py, the HTTP targets' stand-in server
  file dpkg-dev                      # ci/package.sh: CPack's DEB generator (file types, dpkg-shlibdeps)
  groff-base                         # tests/test_help.c: the man page renders without warnings
  openmpi-bin libopenmpi-dev         # MPI: ranks as processes, many clients, sweeps (optional build)
)

# The official `openai` npm package, pinned (tests/clients/package.json), for the serve tests
# that drive the server with a client nobody here wrote (tests/clients/openai_client.mjs). Into
# tests/clients/node_modules (ignored); skipped when node or npm is missing (the test then says
# "skipped"). Run after the packages below, and only when the pinned version is not there yet.
install_node_clients() {
  local dir want have
  dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/clients"
  want="$(sed -n 's/.*"openai": *"\([^"]*\)".*/\1/p' "$dir/package.json")"
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "setup: no node/npm: the openai client test will be skipped"
    return 0
  fi
  have=""
  if [ -f "$dir/node_modules/openai/package.json" ]; then
    have="$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$dir/node_modules/openai/package.json" |
      head -1)"
  fi
  if [ "$have" = "$want" ]; then
    echo "setup: openai npm package $want present"
    return 0
  fi
  echo "setup: installing the openai npm package $want into tests/clients/node_modules"
  npm install --prefix "$dir" --no-package-lock --no-audit --no-fund --loglevel=error
}

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#pkgs[@]} packages present"
  install_node_clients
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
install_node_clients
