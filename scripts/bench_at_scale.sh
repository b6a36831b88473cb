#!/bin/bash
# The codec at scale (docs/PERFORMANCE.md, "At scale"): a 7B-shaped KV cache of 1,024 tokens
# ([32, 2, 1024, 8, 128] fp16, 67 M values, 128 MiB; Gaussian with per-channel scales) through
# `cachegen encode --bits 4`, `decode`, `encode --lossless` and its decode, next to zstd -1 on
# the same file in the same run: wall seconds, user and system CPU seconds, peak RSS.
# Usage: scripts/bench_at_scale.sh [WORKDIR] (default a temporary directory, removed after).
# Needs build/release/tools/cli/cachegen, /usr/bin/python3 with numpy, zstd and GNU time.
set -euo pipefail
cd "$(dirname "$0")/.."
CG=$PWD/build/release/tools/cli/cachegen
W=${1:-$(mktemp -d)}
[[ $# -ge 1 ]] || trap 'rm -rf "$W"' EXIT
/usr/bin/python3 - "$W/kv.npy" <<'PY'
import numpy as np, sys
rng = np.random.default_rng(1)
L, T, H, D = 32, 1024, 8, 128
scale = np.exp(rng.normal(0, 0.7, size=(L, 2, 1, H, D))).astype(np.float32)
x = (rng.standard_normal((L, 2, T, H, D), dtype=np.float32) * scale).astype(np.float16)
np.save(sys.argv[1], x)
PY
run() {  # label, command...
  local label=$1
  shift
  /usr/bin/time -f "$label: %e s wall, %U s user, %S s system, %M KiB peak RSS" "$@" 2>&1 >/dev/null |
    grep -F "$label:"
}
cd "$W"
echo "threads: $(nproc) ($CG)"
run "encode --bits 4" "$CG" encode kv.npy -o q.cgkv --bits 4
run "decode (bits 4)" "$CG" decode q.cgkv -o q.npy
run "encode --lossless" "$CG" encode kv.npy -o l.cgkv --lossless
run "decode (lossless)" "$CG" decode l.cgkv -o l.npy
cmp -s kv.npy l.npy && echo "lossless round trip: identical" || { echo "lossless round trip differs"; exit 1; }
run "zstd -1" zstd -1 -q -f kv.npy -o kv.zst
run "zstd -d" zstd -d -q -f kv.zst -o z.npy
run "zstd -d + sync" sh -c 'zstd -d -q -f kv.zst -o z2.npy && sync -f z2.npy'
ls -l kv.npy q.cgkv l.cgkv kv.zst | awk '{print $5, $9}'
