#!/bin/sh
# Runs every fuzzer (codec, .cgkv container, transform tensors, .npy, GGUF metadata, llama.cpp state and blobs) for
# SECONDS from its seed corpus; fails on the first crash. The llama targets are skipped when the
# build had no llama.cpp source (fuzz/CMakeLists.txt).
# Builds nothing: configure and build BUILD_DIR first, e.g.
#   CC=clang CXX=clang++ cmake -B build-fuzz -G Ninja -DCACHEGEN_BUILD_FUZZ=ON \
#       -DCACHEGEN_SANITIZE=ON -DCACHEGEN_BUILD_TESTS=OFF -DCACHEGEN_BUILD_BENCH=OFF \
#       -DCACHEGEN_BUILD_CLI=OFF && ninja -C build-fuzz -j2
# Usage: fuzz/run_fuzzers.sh BUILD_DIR SECONDS
set -eu
if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR SECONDS" >&2
  exit 2
fi
build=$1
seconds=$2
here=$(cd "$(dirname "$0")" && pwd)
status=0
for target in fuzz_codec_decode fuzz_codec_decode_batch fuzz_codec_roundtrip fuzz_cgkv_read \
    fuzz_cgkv_structured fuzz_transform_decode fuzz_npy_parse fuzz_gguf_metadata \
    fuzz_llama_state fuzz_llama_blobs; do
  bin="$build/fuzz/$target"
  case $target in
    fuzz_llama_*)
      if [ ! -x "$bin" ]; then
        echo "== $target skipped (built without the llama.cpp source)"
        continue
      fi
      ;;
  esac
  if [ ! -x "$bin" ]; then
    echo "run_fuzzers: $bin missing (build $build with -DCACHEGEN_BUILD_FUZZ=ON)" >&2
    exit 1
  fi
  work=$(mktemp -d)
  corpus="$here/corpus/$target"
  if [ "$target" = fuzz_gguf_metadata ]; then
    # GGUF seeds are written at run time (no .gguf files in the tree: models stay out of it).
    corpus="$work/seeds"
    mkdir "$corpus"
    python3 "$here/make_gguf_seeds.py" "$corpus"
  fi
  echo "== $target for ${seconds}s"
  # New inputs go to a scratch directory so the checked-in corpus only changes on purpose.
  if ! "$bin" -max_total_time="$seconds" -max_len=8192 -rss_limit_mb=2048 -timeout=10 \
      -artifact_prefix="$work/" "$work" "$corpus" >"$work/log" 2>&1; then
    tail -40 "$work/log"
    echo "run_fuzzers: $target FAILED; crashing input kept in $work" >&2
    status=1
  else
    grep -E '^#[0-9]+.*DONE' "$work/log" | tail -1 || true
    rm -rf "$work"
  fi
done
exit $status
