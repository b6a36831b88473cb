// fp16 conversions: exact, round-to-nearest-even, checked against the F16C instruction.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <random>

#include "cachegen/half.h"
#include "cachegen/runtime.h"

namespace cachegen {
namespace {

__attribute__((target("f16c"))) uint16_t hw_float_to_half(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Half, KnownValues) {
  EXPECT_EQ(float_to_half(0.0f).bits, 0x0000);
  EXPECT_EQ(float_to_half(-0.0f).bits, 0x8000);
  EXPECT_EQ(float_to_half(1.0f).bits, 0x3c00);
  EXPECT_EQ(float_to_half(65504.0f).bits, 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f).bits, 0x7c00);  // tie rounds to even: infinity
  EXPECT_EQ(float_to_half(65519.99f).bits, 0x7bff);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)).bits, 0x0001);             // smallest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)).bits, 0x0000);             // tie to even: zero
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)).bits, 0x3c00);      // tie, even down
  EXPECT_EQ(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)).bits, 0x3c02);  // tie, even up
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(NAN))));
  EXPECT_EQ(half_to_float(Half{0x0001}), std::ldexp(1.0f, -24));
  EXPECT_EQ(bf16_to_float(BFloat16{0x3f80}), 1.0f);
}

TEST(Half, MatchesF16cOnRandomAndEdgeFloats) {
  if (best_supported_simd_path() == SimdPath::scalar) GTEST_SKIP() << "CPU lacks F16C";
  std::mt19937 rng(42);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = rng();
    // Bias towards the fp16 range, where rounding matters.
    if (i % 2) u = (u & 0x80ffffffu) | ((100u + (rng() % 45u)) << 23);
    const float f = from_bits(u);
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_half(f).bits, hw_float_to_half(f)) << std::hex << u;
  }
}

}  // namespace
}  // namespace cachegen
