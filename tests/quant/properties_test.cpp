// The reference module's own checks, plus edge sizes and every bit width.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cachegen/quant.h"
#include "quant/test_inputs.h"

namespace cachegen {
namespace {

using test::iid_normal;
using test::random_walk;

struct Shape {
  size_t n_rows;
  int bits;
};

class EdgeSizes : public ::testing::TestWithParam<std::tuple<size_t, int>> {};

TEST_P(EdgeSizes, ReconstructionShapeRangeAndErrorBound) {
  const auto [n_rows, bits] = GetParam();
  const size_t dim = 16, gs = 32;
  const std::vector<float> x = random_walk(n_rows, dim, 0.1f, 7 + bits);
  const CodeStream s = quantize_to_codes(x, n_rows, dim, bits, gs);
  EXPECT_EQ(s.n_rows, n_rows);
  EXPECT_EQ(s.n_groups(), (n_rows + gs - 1) / gs);
  EXPECT_EQ(s.codes.size(), s.n_groups() * gs * dim);
  const unsigned max_code = (1u << bits) - 1;
  for (uint8_t c : s.codes) ASSERT_LE(c, max_code);
  // Padding rows repeat the last real row.
  for (size_t r = n_rows; r < s.n_groups() * gs; ++r) {
    for (size_t c = 0; c < dim; ++c) ASSERT_EQ(s.codes[r * dim + c], s.code(n_rows - 1, c));
  }
  const std::vector<Half> y = dequant_codes(s);
  ASSERT_EQ(y.size(), n_rows * dim);
  // Error bound: half a step per value, plus fp16 rounding of the result.
  for (size_t r = 0; r < n_rows; ++r) {
    const size_t g = r / gs;
    for (size_t c = 0; c < dim; ++c) {
      const float v = x[r * dim + c];
      const float step = s.scale[g * dim + c];
      const float got = half_to_float(y[r * dim + c]);
      ASSERT_LE(std::fabs(got - v), 0.5f * step * 1.0001f + std::fabs(v) * 1e-3f + 1e-6f)
          << "row " << r << " channel " << c;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllWidths, EdgeSizes,
                         ::testing::Combine(::testing::Values(0, 1, 31, 32, 33, 1000, 4099),
                                            ::testing::Range(1, 9)));

TEST(Quantize, Fp16AndBf16InputsMatchTheirFp32Widening) {
  const size_t n = 70, dim = 24;
  const std::vector<float> x = random_walk(n, dim, 0.3f, 3);
  std::vector<Half> xh(x.size());
  std::vector<BFloat16> xb(x.size());
  std::vector<float> wh(x.size()), wb(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    xh[i] = float_to_half(x[i]);
    wh[i] = half_to_float(xh[i]);
    uint32_t u;
    std::memcpy(&u, &x[i], 4);
    xb[i] = BFloat16{static_cast<uint16_t>(u >> 16)};
    wb[i] = bf16_to_float(xb[i]);
  }
  const CodeStream a = quantize_to_codes(xh, n, dim, 4), b = quantize_to_codes(wh, n, dim, 4);
  EXPECT_EQ(a.codes, b.codes);
  EXPECT_EQ(a.scale, b.scale);
  const CodeStream c = quantize_to_codes(xb, n, dim, 5), d = quantize_to_codes(wb, n, dim, 5);
  EXPECT_EQ(c.codes, d.codes);
  EXPECT_EQ(c.zero, d.zero);
}

TEST(Quantize, ConstantChannelUsesMinimumScale) {
  const std::vector<float> x(64 * 4, 2.5f);
  const CodeStream s = quantize_to_codes(x, 64, 4, 4);
  for (float sc : s.scale) EXPECT_EQ(sc, 1e-8f);
  for (uint8_t c : s.codes) EXPECT_EQ(c, 0);
  for (Half h : dequant_codes(s)) EXPECT_EQ(half_to_float(h), 2.5f);
}

TEST(Quantize, WithParamsReproducesReferenceOnItsOwnParameters) {
  const std::vector<float> x = random_walk(100, 8, 0.2f, 11);
  const CodeStream s = quantize_to_codes(x, 100, 8, 3, 32);
  const CodeStream t = quantize_with_params(x, 100, 8, 3, 32, s.scale, s.zero);
  EXPECT_EQ(s.codes, t.codes);
}

TEST(TokenDelta, ReversibleAndFirstRowKept) {
  const std::vector<float> x = random_walk(77, 9, 0.2f, 5);
  const CodeStream s = quantize_to_codes(x, 77, 9, 6);
  const std::span<const uint8_t> real(s.codes.data(), 77 * 9);
  const std::vector<int16_t> d = token_delta(real, 77, 9);
  for (size_t c = 0; c < 9; ++c) EXPECT_EQ(d[c], real[c]);
  const std::vector<uint8_t> back = token_delta_inverse(d, 77, 9);
  EXPECT_TRUE(std::equal(back.begin(), back.end(), real.begin()));
  EXPECT_TRUE(token_delta(std::span<const uint8_t>(), 0, 9).empty());
}

TEST(Entropy, ConstantZeroTwoSymbolsOneBoundedByAlphabet) {
  EXPECT_EQ(symbol_entropy_bits(std::vector<uint8_t>(50, 3)), 0.0);
  std::vector<uint8_t> two(64);
  for (size_t i = 0; i < two.size(); ++i) two[i] = (i % 2) * 5;
  EXPECT_DOUBLE_EQ(symbol_entropy_bits(two), 1.0);
  std::vector<uint8_t> many(1000);
  for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<uint8_t>((i * 7919) % 13);
  EXPECT_LE(symbol_entropy_bits(many), std::log2(13.0) + 1e-12);
  EXPECT_EQ(symbol_entropy_bits(std::span<const uint8_t>()), 0.0);
}

TEST(Estimate, IidNeverAboveFixedWidthCorrelatedBelow) {
  for (int bits = 1; bits <= 8; ++bits) {
    const CodeStream iid = quantize_to_codes(iid_normal(256 * 64, bits), 256, 64, bits);
    EXPECT_LE(entropy_coded_bytes(iid, true, true), fixed_width_bytes(iid)) << bits;
    EXPECT_LE(entropy_coded_bytes(iid, false, false), fixed_width_bytes(iid)) << bits;
    if (bits >= 2) {
      const CodeStream walk = quantize_to_codes(random_walk(256, 64, 0.12f, bits), 256, 64, bits);
      EXPECT_LT(entropy_coded_bytes(walk, true, true), fixed_width_bytes(walk)) << bits;
    }
  }
}

TEST(Estimate, PerChannelNotAbovePooledOnTwoScaleCase) {
  // The reference's documented case: half the channels vary 10x more than the others, so
  // pooled statistics mix two very different distributions.
  const size_t n = 256, dim = 32;
  std::vector<float> x = random_walk(n, dim, 0.05f, 21);
  for (size_t r = 0; r < n; ++r) {
    for (size_t c = dim / 2; c < dim; ++c) x[r * dim + c] *= 10.0f;
  }
  const CodeStream s = quantize_to_codes(x, n, dim, 4);
  EXPECT_LE(entropy_coded_bytes(s, true, true), entropy_coded_bytes(s, true, false));
  EXPECT_LE(entropy_coded_bytes(s, false, true), entropy_coded_bytes(s, false, false));
}

TEST(Schedule, NonIncreasingFlooredAtTwoEmptyAndSingle) {
  EXPECT_TRUE(layer_group_bits(0, 4).empty());
  EXPECT_EQ(layer_group_bits(1, 4), std::vector<int>{4});
  for (int n = 1; n <= 64; ++n) {
    for (int base = 1; base <= 8; ++base) {
      for (int groups = 1; groups <= 6; ++groups) {
        const std::vector<int> b = layer_group_bits(n, base, groups);
        ASSERT_EQ(b.size(), static_cast<size_t>(n));
        EXPECT_EQ(b.front(), std::max(2, base));
        for (size_t i = 0; i < b.size(); ++i) {
          ASSERT_GE(b[i], 2);
          if (i) {
            ASSERT_LE(b[i], b[i - 1]);
          }
        }
      }
    }
  }
}

TEST(QuantDequant, EqualsQuantizeThenDequant) {
  const std::vector<float> x = random_walk(90, 12, 0.2f, 9);
  EXPECT_EQ(0, std::memcmp(cachegen_quant_dequant(x, 90, 12, 3, 16).data(),
                           dequant_codes(quantize_to_codes(x, 90, 12, 3, 16)).data(), 90 * 12 * 2));
}

}  // namespace
}  // namespace cachegen
