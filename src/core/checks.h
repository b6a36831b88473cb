// Internal helpers for argument checking and overflow-safe size arithmetic.
#pragma once

#include <cstddef>
#include <limits>
#include <string>

#include "cachegen/error.h"

namespace cachegen::detail {

[[noreturn]] inline void fail(ErrorCode code, const std::string& message) {
  throw Error(code, message);
}
[[noreturn]] inline void invalid(const std::string& message) {
  throw Error(ErrorCode::invalid_argument, message);
}

// a * b, or Error(invalid_argument) naming `what` when it overflows size_t.
inline size_t checked_mul(size_t a, size_t b, const char* what) {
  size_t r;
  if (__builtin_mul_overflow(a, b, &r)) {
    invalid(std::string(what) + ": size product overflows (" + std::to_string(a) + " * " +
            std::to_string(b) + ")");
  }
  return r;
}
inline size_t checked_add(size_t a, size_t b, const char* what) {
  size_t r;
  if (__builtin_add_overflow(a, b, &r)) {
    invalid(std::string(what) + ": size sum overflows (" + std::to_string(a) + " + " +
            std::to_string(b) + ")");
  }
  return r;
}

inline void check_bits(int bits, const char* name = "bits") {
  if (bits < 1 || bits > 8) {
    invalid(std::string(name) + " must be in 1..8, got " + std::to_string(bits));
  }
}

}  // namespace cachegen::detail
