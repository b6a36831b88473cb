#!/bin/bash
# Cycles per value of the codec kernels on a KV .npy: scripts/cycles_per_value.sh KV.npy
# (docs/PERFORMANCE.md). Needs build/release/bench/codec/bench_codec.
# cycles per value = clock (MHz from /proc/cpuinfo) / values per second (perf's hardware cycle
# counter is not available in this VM: perf stat -e cycles says <not supported>)
cd "$(dirname "$0")/.."
B=build/release/bench/codec/bench_codec
IN=${1:?usage: scripts/cycles_per_value.sh KV.npy}
J=$(mktemp)
trap 'rm -f "$J"' EXIT
MHZ=$(grep -m1 "cpu MHz" /proc/cpuinfo | awk '{print $4}')
# Each speed the fastest of 5 runs (the machine is shared; the peers are measured the same way).
$B --input $IN --filter 'lossless|zstd1_fp16|decode_codes/1t|decode_fp16(_into)?/1t|encode_codes/1t|zstd1_(en|de)code' --min-time 0.3 --repetitions 5 --json 2>/dev/null > "$J"
python3 - "$MHZ" "$J" <<'PY'
import json,sys
mhz=float(sys.argv[1]); j=json.load(open(sys.argv[2]))
for k in ['lossless_encode_elems_per_s','lossless_decode_elems_per_s','zstd1_fp16_encode_elems_per_s','zstd1_fp16_decode_elems_per_s','encode_elems_per_s','decode_elems_per_s','decode_fp16_elems_per_s','decode_fp16_into_elems_per_s','zstd1_encode_elems_per_s','zstd1_decode_elems_per_s']:
    r=j[k]; print('%-32s %.3f G/s  %.1f cycles/value'%(k,r/1e9,mhz*1e6/r))
for k in ['lossless_bits_per_value','bytesplit_zstd19_bits_per_value','lossless_over_bytesplit_zstd19','lossless_encode_over_zstd1_fp16','lossless_decode_over_zstd1_fp16','decode_over_zstd1_decode','encode_over_zstd1_encode']:
    print('%-32s %.4f'%(k,j[k]))
PY
