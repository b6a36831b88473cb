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
check_rc "demo --prefix -1" 2 "$cg" llama demo --model "$m" --text "$text" --prefix -1
check_rc "demo --prefix 0" 2 "$cg" llama demo --model "$m" --text "$text" --prefix 0
check_rc "demo --prefix 100000" 2 "$cg" llama demo --model "$m" --text "$text" --prefix 100000
check_rc "demo --generate -1" 2 "$cg" llama demo --model "$m" --text "$text" --generate -1
check_rc "demo --level bogus" 2 "$cg" llama demo --model "$m" --text "$text" --level bogus
echo "$passed passed, $failed failed"
[[ $failed == 0 ]]
