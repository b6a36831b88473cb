// cachegen: 16-bit floating-point storage types and exact conversions.
#pragma once

#include <cstdint>
#include <cstring>

namespace cachegen {

// IEEE 754 binary16, stored as its bit pattern.
struct Half {
  uint16_t bits;
};
// bfloat16 (the upper half of an fp32), stored as its bit pattern.
struct BFloat16 {
  uint16_t bits;
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2, "16-bit storage types");

// Exact widening conversions.
float half_to_float(Half h) noexcept;
inline float bf16_to_float(BFloat16 b) noexcept {
  uint32_t u = static_cast<uint32_t>(b.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
// fp32 -> fp16 with round-to-nearest-even, overflow to infinity, NaN kept a NaN
// (the same result as numpy's astype(float16) and the F16C instruction).
Half float_to_half(float f) noexcept;

}  // namespace cachegen
