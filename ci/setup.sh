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
  jq                                 # bench/gate.sh reads the gate's JSON
  libmicrohttpd-dev                  # shardcheck serve's HTTP server
  libcurl4-openssl-dev               # HTTP client: serve's tests, external targets
  python3                            # tests/openai_standin.py, the HTTP targets' stand-in server
)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#pkgs[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
