#include "cachegen/runtime.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "cachegen/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace cachegen {
namespace {

std::atomic<size_t> g_threads{0};  // 0 = not chosen yet
std::atomic<int> g_simd{-1};       // -1 = not chosen yet

// CACHEGEN_THREADS as a strict decimal in 1..1024, or 0 when unset or malformed.
size_t env_threads() noexcept {
  const char* env = std::getenv("CACHEGEN_THREADS");
  if (env == nullptr || *env == '\0') return 0;
  size_t n = 0;
  for (const char* p = env; *p; ++p) {
    if (*p < '0' || *p > '9' || n > 1024) return 0;
    n = n * 10 + static_cast<size_t>(*p - '0');
  }
  return n >= 1 && n <= 1024 ? n : 0;
}

size_t default_threads() noexcept {
  if (const size_t n = env_threads()) return n;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : hw;
}

}  // namespace

void check_runtime_environment() {
  if (const char* env = std::getenv("CACHEGEN_THREADS"); env && *env && env_threads() == 0) {
    throw Error(ErrorCode::invalid_argument,
                std::string("CACHEGEN_THREADS='") + env + "' is not a whole number in 1..1024");
  }
  if (const char* env = std::getenv("CACHEGEN_SIMD"); env && *env) {
    if (std::strcmp(env, "scalar") != 0 && std::strcmp(env, "avx2") != 0 &&
        std::strcmp(env, "avx512") != 0) {
      throw Error(ErrorCode::invalid_argument,
                  std::string("CACHEGEN_SIMD='") + env + "' is not scalar, avx2 or avx512");
    }
  }
}

size_t thread_count() noexcept {
  size_t n = g_threads.load(std::memory_order_relaxed);
  if (n == 0) {
    n = default_threads();
    g_threads.store(n, std::memory_order_relaxed);
  }
  return n;
}

void set_thread_count(size_t n) noexcept {
  g_threads.store(n, std::memory_order_relaxed);
}

#if defined(__x86_64__) || defined(__i386__)
// F16C is CPUID.1:ECX bit 29 (clang's __builtin_cpu_supports does not know "f16c").
static bool cpu_has_f16c() noexcept {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
}
// LZCNT (ABM) is CPUID.80000001H:ECX bit 5 (clang 14 does not know "lzcnt" either).
static bool cpu_has_lzcnt() noexcept {
  unsigned a, b, c, d;
  return __get_cpuid(0x80000001u, &a, &b, &c, &d) && (c & (1u << 5)) != 0;
}
#endif

static SimdPath detect_simd_path() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // Both vector paths' files are also compiled with BMI1/2, LZCNT and POPCNT: a CPU with AVX2
  // and F16C but without them runs the scalar path.
  const bool base = cpu_has_f16c() && __builtin_cpu_supports("bmi") &&
                    __builtin_cpu_supports("bmi2") && cpu_has_lzcnt() &&
                    __builtin_cpu_supports("popcnt");
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && base) {
    return SimdPath::avx512;
  }
  if (__builtin_cpu_supports("avx2") && base) return SimdPath::avx2;
#endif
  return SimdPath::scalar;
}

SimdPath best_supported_simd_path() noexcept {
  static const SimdPath best = detect_simd_path();  // CPUID once, not on every call
  return best;
}

static SimdPath clamp_to_supported(SimdPath want) noexcept {
  const SimdPath best = best_supported_simd_path();
  return static_cast<int>(want) > static_cast<int>(best) ? best : want;
}

SimdPath simd_path() noexcept {
  int p = g_simd.load(std::memory_order_relaxed);
  if (p < 0) {
    SimdPath chosen = best_supported_simd_path();
    if (const char* env = std::getenv("CACHEGEN_SIMD")) {
      if (std::strcmp(env, "scalar") == 0)
        chosen = SimdPath::scalar;
      else if (std::strcmp(env, "avx2") == 0)
        chosen = clamp_to_supported(SimdPath::avx2);
      else if (std::strcmp(env, "avx512") == 0)
        chosen = clamp_to_supported(SimdPath::avx512);
    }
    p = static_cast<int>(chosen);
    g_simd.store(p, std::memory_order_relaxed);
  }
  return static_cast<SimdPath>(p);
}

void set_simd_path(SimdPath path) noexcept {
  g_simd.store(static_cast<int>(clamp_to_supported(path)), std::memory_order_relaxed);
}

const char* simd_path_name(SimdPath path) noexcept {
  switch (path) {
    case SimdPath::scalar:
      return "scalar";
    case SimdPath::avx2:
      return "avx2";
    case SimdPath::avx512:
      return "avx512";
  }
  return "unknown";
}

}  // namespace cachegen
