#!/usr/bin/env bash
# Configures and builds one CMake preset: scripts/build.sh [release|asan|fuzz] [extra cmake args]
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
shift || true
cmake --preset "$preset" "$@" >/dev/null
cmake --build --preset "$preset" -j "${CACHEGEN_JOBS:-$(nproc)}"
