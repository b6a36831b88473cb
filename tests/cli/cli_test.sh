#!/usr/bin/env bash
# End-to-end checks of the cachegen CLI: encode/decode/inspect/verify, token ranges, stores,
# exit codes. Usage: cli_test.sh CACHEGEN_BINARY TEST_DATA_DIR
set -uo pipefail
cg=$(realpath "$1")
data=$(realpath "$2")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
passed=0
failed=0
check() {  # check NAME EXPECTED_RC COMMAND...
  local name=$1 want=$2
  shift 2
  "$@" >"$work/out" 2>&1
  local rc=$?
  if [[ $rc == "$want" ]]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $name: exit $rc, expected $want"
    sed 's/^/    /' "$work/out" | head -20
  fi
}
# A small KV array from the golden walk input: walk128x32_4bit_input.npy is float32 [128, 32] = [1, 2, 128, 2, 8] in C order.
src="$data/golden/walk128x32_4bit_input.npy"
# Rewrite its header to the 5-d shape (same bytes, same order).
hdr_len=$(( $(od -An -tu2 -j8 -N2 "$src") ))
{
  h="{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 128, 2, 8), }"
  pad=$(( (64 - (10 + ${#h} + 1) % 64) % 64 ))
  printf '\x93NUMPY\x01\x00'
  total=$(( ${#h} + pad + 1 ))
  printf "\\x$(printf %02x $((total & 255)))\\x$(printf %02x $((total >> 8)))"
  printf '%s' "$h"
  printf '%*s' "$pad" ''
  printf '\n'
  tail -c +$((10 + hdr_len + 1)) "$src"
} >kv.npy

check "encode" 0 "$cg" encode kv.npy -o kv.cgkv --bits 4 --chunk-tokens 64
check "verify" 0 "$cg" verify kv.cgkv
check "inspect" 0 "$cg" inspect kv.cgkv
check "inspect --json" 0 "$cg" inspect kv.cgkv --json
grep -q '"n_tokens": 128' "$work/out" || { failed=$((failed + 1)); echo "FAIL: inspect json lacks n_tokens"; }
check "decode" 0 "$cg" decode kv.cgkv -o back.npy
check "decode range" 0 "$cg" decode kv.cgkv -o part.npy --tokens 10:70
check "lossless needs fp16" 2 "$cg" encode kv.npy -o l.cgkv --lossless
check "level medium" 0 "$cg" encode kv.npy -o med.cgkv --level medium
check "level high pre-RoPE" 0 "$cg" encode kv.npy -o hi.cgkv --level high --rope-base 10000
check "level verify" 0 "$cg" verify hi.cgkv
check "bad level" 2 "$cg" encode kv.npy -o x.cgkv --level ultra
check "reference params" 0 "$cg" encode kv.npy -o ref.cgkv --params reference --bits 8
check "bad range" 2 "$cg" decode kv.cgkv -o x.npy --tokens 50:500
check "missing file" 3 "$cg" decode missing.cgkv -o x.npy
check "bad bits" 2 "$cg" encode kv.npy -o x.cgkv --bits 9
check "bad chunk" 2 "$cg" encode kv.npy -o x.cgkv --chunk-tokens 33
# Corrupt one byte in the middle: verify names the problem, exit code 4.
cp kv.cgkv bad.cgkv
size=$(stat -c %s bad.cgkv)
printf '\xff' | dd of=bad.cgkv bs=1 seek=$((size / 2)) conv=notrunc status=none
check "corrupt detected" 4 "$cg" verify bad.cgkv
head -c 100 kv.cgkv >short.cgkv
check "truncated detected" 4 "$cg" verify short.cgkv
# Stores.
check "encode into file store" 0 "$cg" encode kv.npy -o ctx/0 --store "file://$work/store"
check "verify from store" 0 "$cg" verify ctx/0 --store "file://$work/store"
check "decode from store" 0 "$cg" decode ctx/0 -o s.npy --store "file://$work/store"
cmp -s s.npy back.npy || { failed=$((failed + 1)); echo "FAIL: store round trip differs from file round trip"; }
check "store put" 0 "$cg" store put "file://$work/store" raw kv.cgkv
check "store get" 0 "$cg" store get "file://$work/store" raw -o got.cgkv
cmp -s got.cgkv kv.cgkv || { failed=$((failed + 1)); echo "FAIL: store get differs"; }
check "store list" 0 "$cg" store list "file://$work/store"
grep -q '^ctx/0$' "$work/out" || { failed=$((failed + 1)); echo "FAIL: store list lacks ctx/0"; }
check "store rm" 0 "$cg" store rm "file://$work/store" raw
check "store rm missing" 3 "$cg" store rm "file://$work/store" raw
# A killed writer's temp file: gc removes it once older than the grace period, nothing else.
touch -d '2 hours ago' "$work/store/.tmp-0123456789abcdef"
check "store gc" 0 "$cg" store gc --store "file://$work/store"
grep -q '^removed 1 ' "$work/out" || { failed=$((failed + 1)); echo "FAIL: store gc removed $(cat "$work/out")"; }
[ ! -e "$work/store/.tmp-0123456789abcdef" ] || { failed=$((failed + 1)); echo "FAIL: temp file survived gc"; }
check "store gc keeps values" 0 "$cg" verify ctx/0 --store "file://$work/store"
check "store gc without store" 2 "$cg" store gc
check "bad store url" 2 "$cg" verify x --store "ftp://nowhere"
check "bench seed" 0 "$cg" bench seed --json
grep -q '"coded_bytes"' "$work/out" || { failed=$((failed + 1)); echo "FAIL: bench seed lacks coded_bytes"; }
check "usage" 2 "$cg" frobnicate
echo "cli: $passed passed, $failed failed"
[[ $failed == 0 ]]
