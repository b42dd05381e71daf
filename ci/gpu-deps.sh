#!/usr/bin/env bash
# Where Debian's archive is reachable (the CI machine kind): downloads into .gpu-debs/ the
# Debian packages that ci/gpu.sh needs on a GPU machine whose image has the CUDA toolkit but
# not shardcheck's libraries, and which cannot fetch anything itself. About 20 MB; the folder
# is ignored by git and travels to the GPU machine as a carried path. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(
  libfyaml-dev libfyaml0 libjansson-dev libjansson4 libsqlite3-dev libsqlite3-0
  libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libopenblas0 libgfortran5
  libquadmath0 libcriterion-dev libcriterion3 libgit2-1.5 libnanomsg5 libhttp-parser2.9
  libmbedcrypto7 libmbedtls14 libmbedx509-1 libssh2-1 libffi8 libpcre2-8-0 libgssapi-krb5-2
  libkrb5-3 libk5crypto3 libkrb5support0 libcom-err2 libkeyutils1
  pkgconf pkgconf-bin libpkgconf3
  libmicrohttpd-dev libmicrohttpd12 libgnutls30 libcurl4-openssl-dev libcurl4 libnghttp2-14
  librtmp1 libpsl5 libbrotli1 libldap-2.5-0 libsasl2-2 libidn2-0 libzstd1 libunistring2
  libnettle8 libhogweed6 libtasn1-6 libp11-kit0 libgmp10
)
mkdir -p .gpu-debs
cd .gpu-debs
missing=()
for p in "${pkgs[@]}"; do ls "${p}"_*.deb >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then apt-get download "${missing[@]}"; fi
echo "$(ls ./*.deb | wc -l) packages, $(du -sh . | cut -f1) in .gpu-debs/"
