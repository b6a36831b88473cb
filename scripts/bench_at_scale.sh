#!/bin/bash
# The codec at scale (docs/PERFORMANCE.md, "At scale"): a 7B-shaped KV cache of 1,024 tokens
# ([32, 2, 1024, 8, 128] fp16, 67 M values, 128 MiB; Gaussian with per-channel scales) through
# `cachegen encode --bits 4`, `decode`, `encode --lossless` and its decode, next to zstd -1 on
# the same file in the same run: wall seconds, user and system CPU seconds, peak RSS.
# Usage: scripts/bench_at_scale.sh [WORKDIR] (default a temporary directory, removed after).
# With AT_SCALE_KERNEL=1 it also measures the codec's kernels on the same file (`cachegen bench
# codec --input kv.npy --bits 4`, ~3 minutes: zstd -19 of 128 MiB twice) and prints each
# command's wall time over its kernel's on the same number of threads (issue 10's "within 1.5×").
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
declare -A wall  # label -> wall seconds
run() {  # label, command...
  local label=$1 line
  shift
  line=$(/usr/bin/time -f "$label: %e s wall, %U s user, %S s system, %M KiB peak RSS" "$@" 2>&1 \
    >/dev/null | grep -F "$label:")
  echo "$line"
  wall[$label]=$(awk '{print $(NF-12)}' <<<"$line")
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
if [[ ${AT_SCALE_KERNEL:-0} == 1 ]]; then
  "$CG" bench codec --input kv.npy --bits 4 --min-time 0.2 --repetitions 2 --json >kernel.json
  /usr/bin/python3 - kernel.json "${wall[encode --bits 4]}" "${wall[decode (bits 4)]}" \
    "${wall[encode --lossless]}" "${wall[decode (lossless)]}" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
n = j["elements"]
rows = [("encode --bits 4", "file_encode"), ("decode (bits 4)", "file_decode"),
        ("encode --lossless", "lossless_encode"), ("decode (lossless)", "lossless_decode")]
for (label, key), w in zip(rows, sys.argv[2:]):
    kernel = n / (j[key + "_elems_per_s"] * j[key + "_mt_over_1t"])  # seconds, all threads
    print(f"{label}: {float(w):.3f} s wall, kernel {kernel * 1e3:.1f} ms ({key}: "
          f"{j[key + '_elems_per_s'] / 1e9:.3f} G/s x {j[key + '_mt_over_1t']:.2f}): "
          f"{float(w) / kernel:.2f}x the kernel")
PY
fi
