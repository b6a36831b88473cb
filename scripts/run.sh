#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs cachegen's end-to-end demo.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh release
echo "== cachegen bench seed (the reference benchmark, real bitstreams where built)"
build/release/tools/cli/cachegen bench seed
