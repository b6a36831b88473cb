#!/usr/bin/env bash
# Every test: installs what is missing, then the release suite, the ASan+UBSan suite, the
# concurrency tests under ThreadSanitizer, the fuzzers (briefly, from their seed corpora), and
# an install + find_package/pkg-config check.
#   CACHEGEN_FUZZ_SECONDS (default 30) bounds each fuzzer's run.
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

echo "== ThreadSanitizer build + concurrency tests (cache readers, stores, context store)"
# Only the test binaries with concurrent tests (the tsan build preset names them), run whole.
scripts/build.sh tsan
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
build/tsan/tests/cache/cache_layer_test --gtest_brief=1
build/tsan/tests/context/context_test --gtest_brief=1
# The 64 MiB throughput test measures speed, not synchronisation (and takes a minute under TSan).
build/tsan/tests/store/store_test --gtest_brief=1 --gtest_filter='-*Throughput64MiB*'
unset TSAN_OPTIONS

if [[ -f fuzz/CMakeLists.txt ]]; then
  echo "== fuzzers"
  scripts/build.sh fuzz
  bash fuzz/run_fuzzers.sh build/fuzz "${CACHEGEN_FUZZ_SECONDS:-30}"
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
echo "== all test stages passed (release suite, ASan+UBSan suite, TSan, fuzzers, install)"
echo "stages: 5 passed, 0 failed"
