// cachegen: process-wide run-time settings (threads, SIMD path).
#pragma once

#include <cstddef>

namespace cachegen {

// Worker threads used by batched functions: CACHEGEN_THREADS if set (>= 1), else the
// hardware concurrency. set_thread_count(0) restores that default.
size_t thread_count() noexcept;
void set_thread_count(size_t n) noexcept;

// SIMD kernel families. Every path gives byte-identical results; the scalar path is the
// reference twin of every vector kernel. avx2 needs AVX2, F16C, BMI1/2, LZCNT and POPCNT;
// avx512 those and AVX-512 F/BW/VL.
enum class SimdPath : int { scalar = 0, avx2 = 1, avx512 = 2 };

// The path in use: the best the CPU supports, unless CACHEGEN_SIMD=scalar|avx2|avx512
// forces one (a forced path the CPU lacks falls back to the best supported one below it).
// Chosen once, at first use; set_simd_path overrides it (tests use this to run every path).
SimdPath simd_path() noexcept;
void set_simd_path(SimdPath path) noexcept;
// The best path this CPU can run.
SimdPath best_supported_simd_path() noexcept;
const char* simd_path_name(SimdPath path) noexcept;

// Throws Error(invalid_argument) naming the variable when CACHEGEN_THREADS is set (non-empty) but
// is not a decimal integer in 1..1024, or CACHEGEN_SIMD is set but is not scalar, avx2 or avx512.
// (thread_count() and simd_path() cannot fail: they ignore such values.) Tools call this once
// at start-up so a typo is reported rather than silently ignored.
void check_runtime_environment();

}  // namespace cachegen
