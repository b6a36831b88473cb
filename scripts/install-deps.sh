#!/usr/bin/env bash
# Installs the Debian 12 packages cachegen needs, if any are missing. Idempotent; needs root
# (or sudo) only when something is missing.
set -euo pipefail

PACKAGES=(
  build-essential g++ cmake ninja-build pkg-config git
  clang libclang-rt-14-dev            # fuzzers and sanitizer runtimes
  libgtest-dev libbenchmark-dev       # tests, benchmarks
  libzstd-dev zstd libxxhash-dev libhiredis-dev redis-server
  libcli11-dev nlohmann-json3-dev
  pybind11-dev python3-dev python3-numpy python3-pytest   # the Python package and its tests
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm fetches the pinned llama.cpp source package. Any Node.js with npm will do (a NodeSource
# nodejs bundles npm and conflicts with Debian's npm package), so check the command.
command -v npm >/dev/null || missing+=(nodejs npm)
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) != 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
