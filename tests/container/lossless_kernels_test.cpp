// The lossless tier's kernels give the scalar table's bits on every SIMD path this CPU runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cachegen/runtime.h"
#include "container/lossless_kernels.h"

namespace cachegen {
namespace {

std::vector<const detail::LosslessKernels*> supported_tables() {
  std::vector<const detail::LosslessKernels*> tables = {&detail::lossless_kernels_scalar()};
  if (static_cast<int>(best_supported_simd_path()) >= 1)
    tables.push_back(&detail::lossless_kernels_avx2());
  if (best_supported_simd_path() == SimdPath::avx512)
    tables.push_back(&detail::lossless_kernels_avx512());
  return tables;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST(LosslessKernels, JoinPlanesGivesTheScalarBits) {
  std::mt19937 rng(7);
  const auto& ref = detail::lossless_kernels_scalar();
  for (size_t width : {1, 8, 24, 32, 64, 128, 136}) {
    for (size_t rows : {1, 3, 17}) {
      const size_t n = rows * width;
      std::vector<uint8_t> codes(n), anchors(width), low(n);
      for (uint8_t& c : codes) c = static_cast<uint8_t>(rng());
      for (uint8_t& a : anchors) a = static_cast<uint8_t>(rng() & 0x7f);
      for (uint8_t& l : low) l = static_cast<uint8_t>(rng());
      std::vector<uint16_t> want(n), want_high(n);
      ref.join_planes(codes.data(), anchors.data(), low.data(), n, width, want.data());
      ref.join_planes(codes.data(), anchors.data(), nullptr, n, width, want_high.data());
      // The scalar table against the definition: high byte (sign, then the anchor minus the
      // magnitude) over the low byte.
      for (size_t i = 0; i < n; ++i) {
        const unsigned s = codes[i], a = anchors[i % width];
        const auto high = static_cast<uint16_t>(((s & 1) << 7) | ((a - (s >> 1)) & 0x7f));
        ASSERT_EQ(want[i], (high << 8) | low[i]) << i;
        ASSERT_EQ(want_high[i], high << 8) << i;
      }
      for (const detail::LosslessKernels* k : supported_tables()) {
        std::vector<uint16_t> got(n), got_high(n);
        k->join_planes(codes.data(), anchors.data(), low.data(), n, width, got.data());
        k->join_planes(codes.data(), anchors.data(), nullptr, n, width, got_high.data());
        EXPECT_TRUE(same_bits(got, want)) << width << " x " << rows;
        EXPECT_TRUE(same_bits(got_high, want_high)) << width << " x " << rows;
      }
    }
  }
}

TEST(LosslessKernels, RotationsGiveTheScalarBits) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> angle(-3.2, 3.2);
  std::normal_distribution<float> value(0.0f, 4.0f);
  const auto& ref = detail::lossless_kernels_scalar();
  for (size_t dim : {2, 6, 8, 16, 64, 128}) {
    const size_t half = dim / 2;
    // Square-and-multiply: every table's powers, for distances of one to many set bits.
    std::vector<double> squares(64 * dim);
    for (double& v : squares) v = std::sin(angle(rng));
    const uint64_t deltas[] = {1, 2, 3, 37, 511, 1023, uint64_t{1} << 63 | 5};
    std::vector<double> want_c(half), want_s(half);
    for (const uint64_t delta : deltas) {
      ref.power_pairs(squares.data(), half, delta, want_c.data(), want_s.data());
      for (const detail::LosslessKernels* k : supported_tables()) {
        std::vector<double> c(half, 7.0), s(half, 7.0);  // overwritten whole
        k->power_pairs(squares.data(), half, delta, c.data(), s.data());
        EXPECT_TRUE(same_bits(c, want_c)) << dim << " delta " << delta;
        EXPECT_TRUE(same_bits(s, want_s)) << dim << " delta " << delta;
      }
    }
    // Against the definition: one bit is that square; two multiply in ascending order.
    ref.power_pairs(squares.data(), half, 4, want_c.data(), want_s.data());
    EXPECT_EQ(want_c[0], 1 * squares[2 * dim] - 0 * squares[2 * dim + half]);
    ref.power_pairs(squares.data(), half, 5, want_c.data(), want_s.data());
    const double c0 = squares[0], s0 = squares[half], c2 = squares[2 * dim],
                 s2 = squares[2 * dim + half];
    EXPECT_EQ(want_c[0], (1 * c0 - 0 * s0) * c2 - (1 * s0 + 0 * c0) * s2);
    EXPECT_EQ(want_s[0], (1 * c0 - 0 * s0) * s2 + (1 * s0 + 0 * c0) * c2);
    ref.power_pairs(squares.data(), half, 37, want_c.data(), want_s.data());
    // Rows of three heads, with values the rounding back to float and the IEEE specials reach.
    const size_t width = 3 * dim;
    std::vector<float> x(width);
    for (float& v : x) v = value(rng);
    x[0] = std::numeric_limits<float>::infinity();
    x[width - 1] = std::numeric_limits<float>::quiet_NaN();
    x[width / 2] = 6.0e-8f;
    x[1] = -65504.0f;
    for (const bool adjacent : {true, false}) {
      std::vector<float> want(width);
      ref.rotate_pairs(x.data(), want_c.data(), want_s.data(), width, dim, adjacent, want.data());
      const size_t i0 = dim + (adjacent ? 2 : 1) % dim, i1 = i0 + (adjacent ? 1 : half);
      if (half > 1) {  // pair 1 of the second head, against the definition
        const double x0 = x[i0], x1 = x[i1];
        EXPECT_EQ(want[i0], static_cast<float>(x0 * want_c[1] - x1 * want_s[1]));
        EXPECT_EQ(want[i1], static_cast<float>(x0 * want_s[1] + x1 * want_c[1]));
      }
      for (const detail::LosslessKernels* k : supported_tables()) {
        std::vector<float> got(width);
        k->rotate_pairs(x.data(), want_c.data(), want_s.data(), width, dim, adjacent, got.data());
        EXPECT_TRUE(same_bits(got, want)) << dim << (adjacent ? " adjacent" : " halves");
      }
    }
  }
}

// A fused multiply-add keeps the exact product where the kernels round it first: with equal
// pairs and equal factors, x * c - x * s cancels to exactly 0 when each product is rounded, and
// to the product's rounding error when fused (GCC 12 fuses the complex-multiply pattern into
// vfmaddsub even under -ffp-contract=off). Every table must give the rounded products' 0.
TEST(LosslessKernels, ProductsRoundedBeforeTheyAdd) {
  const double d = 0.1;  // 1.5 * 0.1 is not a double: its rounding error is not 0
  ASSERT_NE(std::fma(1.5, d, -(1.5 * d)), 0.0);
  for (const detail::LosslessKernels* k : supported_tables()) {
    for (const size_t dim : {2, 8, 16, 64}) {
      const size_t half = dim / 2;
      std::vector<double> cos(half, d), sin(half, d);
      std::vector<float> x(2 * dim, 1.5f), y(2 * dim);
      for (const bool adjacent : {true, false}) {
        k->rotate_pairs(x.data(), cos.data(), sin.data(), 2 * dim, dim, adjacent, y.data());
        const size_t first = adjacent ? 2 : 1;  // pair 1's first value (pair 0's when dim is 2)
        EXPECT_EQ(y[dim > 2 ? first : 0], 0.0f) << dim << (adjacent ? " adjacent" : " halves");
        EXPECT_EQ(y[0], 0.0f) << dim;
      }
      // Distance 3: (1.5 + 1.5j) * (d + dj), whose real part is 1.5 d - 1.5 d.
      std::vector<double> squares(2 * dim, d), c(half), s(half);
      std::fill_n(squares.begin(), dim, 1.5);
      k->power_pairs(squares.data(), half, 3, c.data(), s.data());
      for (size_t i = 0; i < half; ++i) EXPECT_EQ(c[i], 0.0) << dim << " pair " << i;
    }
  }
}

}  // namespace
}  // namespace cachegen
