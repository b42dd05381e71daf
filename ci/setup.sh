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
  python3-prometheus-client          # tests/prom_check.py: serve's /metrics through its parser
  openmpi-bin libopenmpi-dev         # MPI: ranks as processes, many clients, sweeps (optional build)
  iproute2                           # tests/mpi_netns.sh: two network namespaces as two hosts (as root)
)

# The npm clients the serve tests drive the server with (tests/clients/package.json, pinned):
# the official `openai` package and the Vercel AI SDK (`ai` with `@ai-sdk/openai-compatible`),
# into tests/clients/node_modules (ignored). Skipped when node or npm is missing (the tests then
# say "skipped"). Run after the packages below, and only when a pinned version is not there yet.
install_node_clients() {
  local dir
  dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/clients"
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "setup: no node/npm: the npm client tests will be skipped"
    return 0
  fi
  # every dependency at its pinned version?
  if node -e '
    const fs = require("fs"), dir = process.argv[1];
    const deps = JSON.parse(fs.readFileSync(dir + "/package.json")).dependencies;
    for (const [name, want] of Object.entries(deps)) {
      let have = "";
      try { have = JSON.parse(fs.readFileSync(`${dir}/node_modules/${name}/package.json`)).version; }
      catch (e) {}
      if (have !== want) process.exit(1);
    }' "$dir"; then
    echo "setup: npm clients present (tests/clients/package.json)"
    return 0
  fi
  echo "setup: installing the npm clients of tests/clients/package.json into node_modules"
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
