#!/usr/bin/env bash
# The main job: installs what is missing, fetches and builds (with llama.cpp), then
#  1. cachegen bench seed: the reference's synthetic benchmark with real bitstream sizes;
#  2. cachegen llama demo: capture a real model's KV cache over real text, compress it into a
#     .cgkv, restore it into a fresh llama.cpp context and continue generating;
#  3. cachegen llama run: a prompt answered cold (prefilled, its chunks stored in a context store),
#     then warm (its stored prefix loaded instead of recomputed), with the time-to-first-token split;
#  4. cachegen eval: the size/quality table (KL, top-1, perplexity) against llama.cpp's q8_0/q4_0.
# The model is $CACHEGEN_MODEL, else ../shared/models/stories260K.gguf; the text is
# $CACHEGEN_TEXT, else ../shared/data/tinystories_dev.txt. Without them steps 2-4 are skipped
# with a message saying how to provide them.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/fetch-llama.sh
scripts/build.sh release -DCACHEGEN_WITH_LLAMA=ON
cg=build/release/tools/cli/cachegen

echo "== cachegen bench seed"
"$cg" bench seed

model=${CACHEGEN_MODEL:-../shared/models/stories260K.gguf}
text=${CACHEGEN_TEXT:-../shared/data/tinystories_dev.txt}
if [[ ! -f "$model" || ! -f "$text" ]]; then
  echo "!! SKIPPING the model steps: no GGUF model at '$model' or no text at '$text'."
  echo "!! Point CACHEGEN_MODEL at a GGUF file (and CACHEGEN_TEXT at a text file) to run them."
  exit 0
fi
echo "== cachegen llama demo (capture -> compress -> restore -> continue)"
"$cg" llama demo --model "$model" --text "$text" --level all
echo "== cachegen llama run (context reuse: cold, then warm from the store)"
store=$(mktemp -d)
trap 'rm -rf "$store"' EXIT
head -c 900 "$text" >"$store/prompt.txt"
for run in cold warm; do
  echo "-- $run"
  "$cg" llama run --model "$model" --prompt-file "$store/prompt.txt" --store "file://$store/ctx" \
    --chunk-tokens 64 --n-predict 32
done
echo "== cachegen eval (size / quality table)"
"$cg" eval --model "$model" --text "$text" --contexts 8 --prefix 448 --continue 64
