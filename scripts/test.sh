#!/usr/bin/env bash
# Every test: installs what is missing, then the release suite (and the Python package's pytest
# suite against the build tree), the ASan+UBSan suite, the concurrency tests under
# ThreadSanitizer, the fuzzers (briefly, from their seed corpora), and an install check:
# find_package/pkg-config consumers, the C99 consumer of the whole C API (with a redis-server),
# and the installed Python package imported by the system python3.
#   CACHEGEN_FUZZ_SECONDS (default 30) bounds each fuzzer's run.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
scripts/install-deps.sh
scripts/fetch-llama.sh

echo "== release build (with llama.cpp) + tests"
scripts/build.sh release -DCACHEGEN_WITH_LLAMA=ON
ctest --preset release -j "$(nproc)"

echo "== Python package (pytest, against the build tree)"
CACHEGEN_CLI="$root/build/release/tools/cli/cachegen" PYTHONPATH="$root/build/release/python" \
  /usr/bin/python3 -m pytest -q -p no:cacheprovider python/tests

echo "== ASan + UBSan build + tests"
scripts/build.sh asan
ctest --preset asan -j "$(nproc)"

echo "== ThreadSanitizer build + concurrency tests (thread pool, batch decode, cache readers, array encode, stores, context store, cachegen decode)"
# Only the test binaries with concurrent tests and the CLI (the tsan build preset names them).
scripts/build.sh tsan
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
build/tsan/tests/core/core_parallel_test --gtest_brief=1
build/tsan/tests/codec/codec_simd_paths_test --gtest_brief=1
build/tsan/tests/cache/cache_layer_test --gtest_brief=1
build/tsan/tests/context/context_test --gtest_brief=1
# encode_kv_array's layers on the pool's threads (the file round trips themselves are
# single-threaded), verify's groups of layers one at a time, and the lossless writer framing a
# wave of tensors while the next one is packed.
build/tsan/tests/container/container_roundtrip_test --gtest_brief=1 \
  --gtest_filter='Container.ArrayEncodeIndependentOfThreads:Container.VerifyOnThreads*:Container.LosslessBytesDoNotDependOnThreads'
# The 64 MiB throughput test measures speed, not synchronisation (and takes a minute under TSan).
build/tsan/tests/store/store_test --gtest_brief=1 --gtest_filter='-*Throughput64MiB*'
# cachegen decode writes a window on a thread of its own while the next one decodes: three
# windows (96 MiB of output) to a file and to a pipe, and a write failing at a file size limit
# (exit 5, the existing output kept; its error message is expected in the log).
tsan_work=$(mktemp -d)
/usr/bin/python3 - "$tsan_work/kv.npy" <<'PY'
import numpy as np, sys
t = np.arange(12288, dtype=np.float32)[None, None, :, None, None]
c = np.arange(4 * 64, dtype=np.float32).reshape(1, 1, 1, 4, 64)
kv = np.broadcast_to(np.sin(t * 0.01 + c).astype(np.float16), (8, 2, 12288, 4, 64))
np.save(sys.argv[1], np.ascontiguousarray(kv))
PY
build/release/tools/cli/cachegen encode "$tsan_work/kv.npy" -o "$tsan_work/kv.cgkv" --bits 2 >/dev/null
build/release/tools/cli/cachegen decode "$tsan_work/kv.cgkv" -o "$tsan_work/ref.npy"
build/tsan/tools/cli/cachegen decode "$tsan_work/kv.cgkv" -o "$tsan_work/back.npy"
cmp "$tsan_work/back.npy" "$tsan_work/ref.npy"
build/tsan/tools/cli/cachegen decode "$tsan_work/kv.cgkv" -o - | cmp - "$tsan_work/ref.npy"
rc=0
(ulimit -f 40960 && trap '' XFSZ &&
  build/tsan/tools/cli/cachegen decode "$tsan_work/kv.cgkv" -o "$tsan_work/ref.npy") || rc=$?
[[ $rc -eq 5 ]] || { echo "TSan cachegen decode past a size limit: exit $rc, expected 5"; exit 1; }
cmp "$tsan_work/back.npy" "$tsan_work/ref.npy"
rm -rf "$tsan_work"
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
# The whole C API, compiled as C99 against the installed headers and library, with a Redis store.
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" cc -std=c99 -Wall -Wextra -Werror -pedantic \
  -o "$prefix/capi_consumer_pc" tests/install/capi_consumer.c \
  $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs cachegen)
mkdir -p "$prefix/capi_work" "$prefix/capi_work_pc" "$prefix/redis"
redis_port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
  --dir "$prefix/redis" >/dev/null &
redis_pid=$!
trap 'kill "$redis_pid" 2>/dev/null || true; rm -rf "$prefix"' EXIT
for _ in $(seq 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
LD_LIBRARY_PATH="$prefix/lib" "$prefix/consumer/capi_consumer" "$prefix/capi_work"
LD_LIBRARY_PATH="$prefix/lib" "$prefix/capi_consumer_pc" "$prefix/capi_work_pc" \
  "redis://127.0.0.1:$redis_port/0"
kill "$redis_pid" && wait "$redis_pid" 2>/dev/null || true
# The installed Python package, imported by the system python3 from the prefix.
PYTHONPATH=$(echo "$prefix"/lib/python3*/site-packages) /usr/bin/python3 - <<'EOF'
import numpy as np, cachegen
kv = np.random.default_rng(0).standard_normal((2, 2, 64, 2, 16)).astype(np.float16)
data = cachegen.encode(kv, level="lossless")
assert np.array_equal(cachegen.decode(data, tokens=(3, 9)), kv[:, :, 3:9])
assert cachegen.inspect(data)["codec"] == "lossless_fp16"
try:
    cachegen.decode(data[:20])
    raise SystemExit("truncated bytes decoded")
except cachegen.TruncatedInput as e:
    assert e.status == "truncated_input"
print("python: installed cachegen package ok (%s)" % cachegen.__file__)
EOF
"$prefix/bin/cachegen" bench seed --json >/dev/null
echo "== all test stages passed (release suite, ASan+UBSan suite, TSan, fuzzers, install)"
echo "stages: 5 passed, 0 failed"
