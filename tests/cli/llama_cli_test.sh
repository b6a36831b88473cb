#!/usr/bin/env bash
# End-to-end checks of the llama.cpp commands of the cachegen CLI on the shared models: `llama
# demo --json` restores every level without running the model, lossless continues identically,
# and bad arguments exit 2. Usage: llama_cli_test.sh CACHEGEN_BINARY REPO_ROOT
set -uo pipefail
cg=$(realpath "$1")
root=$(realpath "$2")
text=${CACHEGEN_TEXT:-$root/../shared/data/tinystories_dev.txt}
models=()
[[ -n ${CACHEGEN_MODEL:-} ]] && models+=("$CACHEGEN_MODEL")
for m in stories260K tinystories-hd64; do
  [[ -f $root/../shared/models/$m.gguf ]] && models+=("$root/../shared/models/$m.gguf")
done
if [[ ${#models[@]} == 0 || ! -f $text ]]; then
  echo "*** llama CLI tests SKIPPED: no model or text (set CACHEGEN_MODEL, CACHEGEN_TEXT) ***"
  exit 0
fi
passed=0
failed=0
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
check_rc() {  # check_rc NAME EXPECTED_RC COMMAND...
  local name=$1 want=$2
  shift 2
  "$@" >/dev/null 2>&1
  local rc=$?
  if [[ $rc == "$want" ]]; then passed=$((passed + 1)); else fail "$name: exit $rc, expected $want"; fi
}
for m in "${models[@]}"; do
  out=$("$cg" llama demo --model "$m" --text "$text" --prefix 200 --generate 16 --repeat 1 --threads 1 \
    --level all --json) || { fail "demo --level all on $m"; continue; }
  if python3 - "$out" <<'PY'; then passed=$((passed + 1)); else fail "demo --json on $m"; fi
import json, sys
rows = json.loads(sys.argv[1])
assert [r["level"] for r in rows] == ["lossless", "high", "medium", "low"], rows
for r in rows:
    for key in ("bytes", "bits_per_element", "write_ms", "restore_ms", "prefill_ms",
                "identical_tokens"):
        assert key in r, key
    assert r["restore_model_evaluations"] == 0, r  # a restore never runs the model
    assert r["bytes"] > 0 and r["restore_ms"] > 0 and r["prefill_ms"] > 0, r
lossless = rows[0]
assert lossless["identical_tokens"] == lossless["generated_tokens"] == 17, lossless
assert rows[1]["bytes"] < lossless["bytes"] / 2, rows[1]
PY
done
m=${models[0]}
# llama run: cold, then warm from the stored prefix (file:// and a real redis-server).
work=$(mktemp -d)
trap 'rm -rf "$work"; [[ -n ${redis_pid:-} ]] && kill "$redis_pid" 2>/dev/null' EXIT
head -c 700 "$text" >"$work/prompt.txt"
{ head -c 350 "$text"; echo " And then a dragon flew over the hills and far away."; } >"$work/other.txt"
run() { "$cg" llama run --model "$1" --prompt-file "$2" --store "$3" --n-predict 12 \
  --chunk-tokens 64 --threads 1 --json "${@:4}"; }
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
expect() {  # expect NAME ACTUAL WANTED
  if [[ $2 == "$3" ]]; then passed=$((passed + 1)); else fail "$1: got '$2', expected '$3'"; fi
}
# A port free a moment ago may be taken before our server binds it (then ours exits, or another
# process's server answers there): the server answering must be ours, by its pid.
for _ in $(seq 8); do
  redis_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no >/dev/null 2>&1 &
  redis_pid=$!
  ours=0
  for _ in $(seq 50); do
    if redis-cli -p "$redis_port" info server 2>/dev/null | tr -d '\r' | grep -x "process_id:$redis_pid" >/dev/null; then
      ours=1
      break
    fi
    kill -0 "$redis_pid" 2>/dev/null || break
    sleep 0.1
  done
  [[ $ours == 1 ]] && break
  kill "$redis_pid" 2>/dev/null
  wait "$redis_pid" 2>/dev/null
  redis_pid=
done
[[ -n $redis_pid ]] || fail "redis-server did not start"
for url in "file://$work/store" "redis://127.0.0.1:$redis_port/0"; do
  cold=$(run "$m" "$work/prompt.txt" "$url") || fail "cold run on $url"
  n=$(field "$cold" prompt_tokens)
  expect "cold run reuses nothing ($url)" "$(field "$cold" reused_tokens)" 0
  expect "cold run stores every whole chunk ($url)" "$(field "$cold" written_chunks)" $((n / 64))
  warm=$(run "$m" "$work/prompt.txt" "$url" --level lossless) || fail "warm run on $url"
  expect "warm run reuses the stored prefix ($url)" "$(field "$warm" reused_tokens)" $(((n - 1) / 64 * 64))
  expect "warm lossless text = cold text ($url)" "$(field "$warm" text)" "$(field "$cold" text)"
  expect "warm run recomputes the rest ($url)" "$(field "$warm" recomputed_tokens)" $((n - (n - 1) / 64 * 64))
  low=$(run "$m" "$work/prompt.txt" "$url" --level low --no-write) || fail "low run on $url"
  expect "low level is smaller ($url)" \
    "$(python3 -c 'import sys; print(int(sys.argv[1]) < int(sys.argv[2]) / 4)' "$(field "$low" bytes_fetched)" "$(field "$warm" bytes_fetched)")" True
  part=$(run "$m" "$work/other.txt" "$url" --no-write) || fail "shared-prefix run on $url"
  r=$(field "$part" reused_tokens)
  expect "a prompt sharing its first part reuses that part ($url)" \
    "$(python3 -c 'import sys; print(0 < int(sys.argv[1]) < int(sys.argv[2]))' "$r" "$n")" True
done
# Another model never gets these chunks.
if [[ ${#models[@]} -gt 1 ]]; then
  other=$(run "${models[1]}" "$work/prompt.txt" "file://$work/store" --no-write) || fail "other model"
  expect "another model reuses nothing" "$(field "$other" reused_tokens)" 0
fi
# A damaged chunk value: loading stops there, the rest is recomputed, the answer is the same.
victim=$(ls "$work/store" | grep -v manifest | grep '/lossless/\|%2Flossless%2F' | sort | sed -n 3p)
if [[ -n $victim ]]; then
  printf '\xff' | dd of="$work/store/$victim" bs=1 seek=200 conv=notrunc status=none
  dam=$(run "$m" "$work/prompt.txt" "file://$work/store" --level lossless --no-write) || fail "damaged run"
  r=$(field "$dam" reused_tokens)
  expect "a damaged chunk stops the load before it" \
    "$(python3 -c 'import sys; r, n = map(int, sys.argv[1:]); print(r % 64 == 0 and r < (n - 1) // 64 * 64)' "$r" "$n")" True
  expect "the answer does not change" "$(field "$dam" text)" "$(field "$cold" text)"
  [[ $(field "$dam" stop_reason) == *verification* || $(field "$dam" stop_reason) == *match* ]] &&
    passed=$((passed + 1)) || fail "stop_reason names the damage: $(field "$dam" stop_reason)"
else
  fail "no lossless chunk value found in the file store"
fi
# The next writer repairs the damaged chunk: a later run loads everything again.
fix=$(run "$m" "$work/prompt.txt" "file://$work/store" --level lossless --write-levels lossless) || fail "repair run"
again=$(run "$m" "$work/prompt.txt" "file://$work/store" --level lossless --no-write) || fail "after repair"
expect "a damaged chunk is rewritten by the next run" "$(field "$again" reused_tokens)" $(((n - 1) / 64 * 64))
check_rc "run --n-predict 0" 2 "$cg" llama run --model "$m" --prompt x --store "file://$work/s2" --n-predict 0
check_rc "run without a store" 2 "$cg" llama run --model "$m" --prompt x
check_rc "demo --prefix -1" 2 "$cg" llama demo --model "$m" --text "$text" --prefix -1
check_rc "demo --prefix 0" 2 "$cg" llama demo --model "$m" --text "$text" --prefix 0
check_rc "demo --prefix 100000" 2 "$cg" llama demo --model "$m" --text "$text" --prefix 100000
check_rc "demo --generate -1" 2 "$cg" llama demo --model "$m" --text "$text" --generate -1
check_rc "demo --level bogus" 2 "$cg" llama demo --model "$m" --text "$text" --level bogus
# eval --sweep rate: every family in the JSON, our ladder growing in bits, the SVG written.
sweep=$("$cg" eval --model "$m" --text "$text" --contexts 1 --prefix 64 --continue 8 --threads 1 \
  --sweep rate --json --svg "$work/rate.svg") || fail "eval --sweep rate"
if python3 - "$sweep" "$work/rate.svg" <<'PY'; then passed=$((passed + 1)); else fail "eval --sweep rate --json"; fi
import json, sys
import xml.etree.ElementTree as ET
rows = json.loads(sys.argv[1])
families = {r["family"] for r in rows}
assert {"ours", "kivi", "turboquant", "llama.cpp"} <= families, families
for r in rows:
    for key in ("method", "family", "priced", "bits_per_element", "kl", "top1", "ppl"):
        assert key in r, key
    assert r["bits_per_element"] > 0 and r["kl"] >= 0, r
    if r["family"] == "ours":
        assert r["priced"] == "file", r
ladder = [r["bits_per_element"] for r in rows if r["method"].startswith("KR")]
assert len(ladder) == 8 and ladder == sorted(ladder), ladder
assert min(ladder) < 2.5 and max(ladder) > 5, ladder
root = ET.parse(sys.argv[2]).getroot()  # well-formed XML
names = {g.get("data-name") for g in root.iter("{http://www.w3.org/2000/svg}g")}
assert {"ours", "kivi", "turboquant", "llama.cpp"} <= names, names
PY
check_rc "eval --sweep bogus" 2 "$cg" eval --model "$m" --text "$text" --sweep bogus
# calibrate -> a profile; transform files through encode / decode / verify / inspect and llama
# pack / unpack; a missing or damaged profile is refused with the documented exit codes.
if "$cg" calibrate --model "$m" --text "$text" -o "$work/m.cgprof" --windows 2 --prefix 96 \
  --continue 16 --bands 2 --threads 1 >/dev/null 2>&1; then
  passed=$((passed + 1))
  kv=$root/../shared/data/kv/$(basename "$m" .gguf)_dev_ctx00.npy
  if [[ -f $kv ]]; then
    check_rc "encode --profile --level medium" 0 "$cg" encode "$kv" -o "$work/t.cgkv" --profile "$work/m.cgprof" --level medium
    check_rc "encode --profile --bits-per-element 1.5" 0 "$cg" encode "$kv" -o "$work/t2.cgkv" --profile "$work/m.cgprof" --bits-per-element 1.5
    bits=$("$cg" inspect "$work/t2.cgkv" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["bits_per_element"] <= 1.5)')
    expect "a size target is met" "$bits" True
    check_rc "decode --profile" 0 "$cg" decode "$work/t.cgkv" -o "$work/t.npy" --profile "$work/m.cgprof"
    check_rc "verify --profile" 0 "$cg" verify "$work/t.cgkv" --profile "$work/m.cgprof"
    check_rc "inspect (no profile needed)" 0 "$cg" inspect "$work/t.cgkv"
    check_rc "decode without the profile" 2 "$cg" decode "$work/t.cgkv" -o "$work/t.npy"
    cp "$work/m.cgprof" "$work/bad.cgprof"
    printf '\x01' | dd of="$work/bad.cgprof" bs=1 seek=300 conv=notrunc status=none
    check_rc "decode with a damaged profile" 4 "$cg" decode "$work/t.cgkv" -o "$work/t.npy" --profile "$work/bad.cgprof"
    check_rc "--bits-per-element without --profile" 2 "$cg" encode "$kv" -o "$work/t3.cgkv" --bits-per-element 2
    bound=$("$cg" profile "$work/m.cgprof" --bound-kl 1e-3 --bound-kl 1e-2 --skip-layer 0 | grep -c 'rate bound')
    expect "profile prints its rate bounds" "$bound" 2
    check_rc "profile --skip-layer past the layers" 2 "$cg" profile "$work/m.cgprof" --bound-kl 1e-3 --skip-layer 99
  fi
  "$cg" llama demo --model "$m" --text "$text" --prefix 120 --generate 1 --level lossless \
    --save-state "$work/s.state" >/dev/null 2>&1 || true
  if [[ -f $work/s.state ]]; then
    check_rc "llama pack --profile" 0 "$cg" llama pack "$work/s.state" -o "$work/s.cgkv" --model "$m" --profile "$work/m.cgprof" --level high
    check_rc "llama unpack --profile" 0 "$cg" llama unpack "$work/s.cgkv" -o "$work/s2.state" --model "$m" --profile "$work/m.cgprof"
    check_rc "llama unpack without the profile" 2 "$cg" llama unpack "$work/s.cgkv" -o "$work/s2.state" --model "$m"
  fi
else
  fail "calibrate"
fi
echo "$passed passed, $failed failed"
[[ $failed == 0 ]]
