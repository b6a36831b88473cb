#!/usr/bin/env bash
# Every test: installs what is missing, then the release suite, the ASan+UBSan suite, the
# fuzzers (briefly, from their seed corpora), and an install + find_package/pkg-config check.
#   CACHEGEN_FUZZ_SECONDS (default 60) bounds each fuzzer's run.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
scripts/install-deps.sh
scripts/fetch-llama.sh

echo "== release build (with llama.cpp) + tests"
scripts/build.sh release -DCACHEGEN_WITH_LLAMA=ON
ctest --preset release -j "$(nproc)"

echo "== ASan + UBSan build + tests"
scripts/build.sh asan
ctest --preset asan -j "$(nproc)"

if [[ -f fuzz/CMakeLists.txt ]]; then
  echo "== fuzzers"
  scripts/build.sh fuzz
  bash fuzz/run_fuzzers.sh build/fuzz "${CACHEGEN_FUZZ_SECONDS:-60}"
fi

echo "== install, then use from CMake (find_package) and pkg-config"
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install build/release --prefix "$prefix" >/dev/null
cmake -S tests/install -B "$prefix/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/consumer" >/dev/null
LD_LIBRARY_PATH="$prefix/lib" "$prefix/consumer/consumer"
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" cc -o "$prefix/consumer_pc" tests/install/consumer.c \
  $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs cachegen)
LD_LIBRARY_PATH="$prefix/lib" "$prefix/consumer_pc"
"$prefix/bin/cachegen" bench seed --json >/dev/null
echo "== all test stages passed (release suite, ASan+UBSan suite, fuzzers, install)"
echo "stages: 4 passed, 0 failed"
