// Property tests over the whole finite fp16 range: every stream the encoder writes decodes, and
// the decoded values are finite and within the quantizer's bound (half a step, plus the fp16
// rounding of the output). Inputs: +-65504 extremes, subnormals, constant and near-constant
// channels, ramps, random bit patterns; every bit width, several group sizes, every parameter
// storage (compact on several grids, fp16, fp32) and both batch layouts.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "cachegen/codec.h"
#include "cachegen/half.h"
#include "cachegen/quant.h"
#include "cachegen/runtime.h"
#include "codec_test_inputs.h"

namespace cachegen {
namespace {

constexpr float kHalfMax = 65504.0f;

float half_value(uint16_t bits) {
  return half_to_float(Half{bits});
}

// Spacing of fp16 values at magnitude |v| (2^-24 for subnormals).
float half_ulp(float v) {
  const float a = std::min(std::fabs(v), kHalfMax);
  if (a < 6.103515625e-05f) return 5.9604644775390625e-08f;
  return std::ldexp(1.0f, std::ilogb(a) - 10);
}

// One channel pattern per column: [n_rows, dim] fp32 values, each exactly an fp16 value.
std::vector<float> extreme_inputs(size_t n_rows, size_t dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> x(n_rows * dim);
  const float subnormal = half_value(0x0001), tiny_normal = half_value(0x0400);
  for (size_t c = 0; c < dim; ++c) {
    const size_t kind = (c + seed) % 12;
    for (size_t t = 0; t < n_rows; ++t) {
      float v = 0.0f;
      switch (kind) {
        case 0:  // alternating extremes
          v = (t % 2) ? kHalfMax : -kHalfMax;
          break;
        case 1:  // ramp 0..65504
          v = half_to_float(float_to_half(n_rows > 1 ? kHalfMax * static_cast<float>(t) /
                                                           static_cast<float>(n_rows - 1)
                                                     : kHalfMax));
          break;
        case 2:  // constant with one -65504 outlier
          v = t == n_rows / 2 ? -kHalfMax : 1.0f;
          break;
        case 3:  // constant at the top
          v = kHalfMax;
          break;
        case 4:  // constant at the bottom
          v = -kHalfMax;
          break;
        case 5:  // subnormals and zeros
          v = static_cast<float>(rng() % 5) * subnormal * ((rng() & 1) ? 1.0f : -1.0f);
          break;
        case 6:  // near-constant: one fp16 step apart, at the top of the range
          v = (rng() & 1) ? kHalfMax : half_value(0x7bfe);
          break;
        case 7:  // near-constant around a small normal
          v = (rng() & 1) ? tiny_normal : half_value(0x0401);
          break;
        case 8: {  // random finite fp16 bit patterns over the whole range
          uint16_t b;
          do b = static_cast<uint16_t>(rng());
          while ((b & 0x7c00) == 0x7c00);
          v = half_value(b);
          break;
        }
        case 9:  // constant zero
          v = 0.0f;
          break;
        case 10:  // ramp down from 65504 to -65504
          v = half_to_float(float_to_half(n_rows > 1
                                              ? kHalfMax - 2 * kHalfMax * static_cast<float>(t) /
                                                               static_cast<float>(n_rows - 1)
                                              : -kHalfMax));
          break;
        default:  // a random walk of ordinary KV-like values
          v = half_to_float(
              float_to_half(static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 256.0f));
          break;
      }
      x[t * dim + c] = v;
    }
  }
  return x;
}

// Reference parameters' scale of group g, channel c: (max - min) / (2^bits - 1).
float reference_step(const std::vector<float>& x, size_t n_rows, size_t dim, size_t group_size,
                     int bits, size_t g, size_t c, float& max_abs) {
  float lo = x[g * group_size * dim + c], hi = lo;
  for (size_t t = g * group_size; t < std::min(n_rows, (g + 1) * group_size); ++t) {
    lo = std::min(lo, x[t * dim + c]);
    hi = std::max(hi, x[t * dim + c]);
  }
  max_abs = std::max(std::fabs(lo), std::fabs(hi));
  return (hi - lo) / static_cast<float>((1 << bits) - 1);
}

// Checks decoded halves against x: finite, and within half the decoded step plus the output's
// fp16 rounding; and, when widen > 0, that the step is at most `widen` times the reference's
// plus a few fp16 steps of the group's magnitude (so the bound is not vacuous).
void expect_within_bound(const std::vector<float>& x, const CodeStream& q,
                         const std::vector<Half>& got, float widen) {
  const size_t n = q.n_rows * q.dim;
  ASSERT_EQ(got.size(), n);
  for (size_t t = 0; t < q.n_rows; ++t) {
    for (size_t c = 0; c < q.dim; ++c) {
      const size_t i = t * q.dim + c, g = t / q.group_size;
      const float y = half_to_float(got[i]);
      ASSERT_TRUE(std::isfinite(y)) << "row " << t << " channel " << c << " of " << x[i];
      const float step = q.scale[g * q.dim + c];
      const float bound =
          0.5f * step * (1.0f + 1e-6f) + 0.5f * half_ulp(std::max(std::fabs(x[i]), std::fabs(y)));
      ASSERT_LE(std::fabs(y - x[i]), bound)
          << "row " << t << " channel " << c << " x " << x[i] << " got " << y << " step " << step;
      if (widen > 0 && t % q.group_size == 0) {
        float max_abs = 0.0f;
        const float ref = reference_step(x, q.n_rows, q.dim, q.group_size, q.bits, g, c, max_abs);
        // The fp16 fallback widens by a few fp16 steps of the group's magnitude; constant
        // groups get the 1e-8 floor.
        const float allowed = widen * ref + 8.0f * half_ulp(max_abs) + 1e-7f;
        ASSERT_LE(step, allowed) << "group " << g << " channel " << c << " reference " << ref;
      }
    }
  }
}

struct Grid {
  int scale_mantissa_bits, zero_step_log2;
};

// FORMAT.md's bound on a compact step relative to the reference's, (1 + 2^-m) *
// (2^b - 1) / (2^b - 1 - 2^-z), with one more mantissa step of slack for fp32 rounding; 1.01
// where the grid leaves no room (then the fp16 fallback is used).
float compact_widening(const Grid& g, int bits) {
  const float levels = static_cast<float>((1 << bits) - 1);
  const float usable = levels - std::ldexp(1.0f, -g.zero_step_log2);
  const float m = 1.0f + std::ldexp(1.0f, -g.scale_mantissa_bits);
  return usable > 0 ? m * m * levels / usable : 1.01f;
}

class Fp16Range : public ::testing::TestWithParam<int> {};

TEST_P(Fp16Range, EncodeValuesRoundTripsOnEveryGrid) {
  const int bits = GetParam();
  for (const Grid grid : {Grid{6, 4}, Grid{1, 0}, Grid{23, 8}, Grid{3, 8}}) {
    EncodeOptions o;
    o.scale_mantissa_bits = grid.scale_mantissa_bits;
    o.zero_step_log2 = grid.zero_step_log2;
    for (size_t group_size : {size_t{1}, size_t{7}, size_t{32}, size_t{256}}) {
      for (size_t n_rows : {size_t{1}, size_t{64}, size_t{300}}) {
        const size_t dim = 24;
        const auto x = extreme_inputs(n_rows, dim, static_cast<uint32_t>(n_rows + group_size));
        SCOPED_TRACE("bits " + std::to_string(bits) + " group " + std::to_string(group_size) +
                     " rows " + std::to_string(n_rows) + " grid " +
                     std::to_string(grid.scale_mantissa_bits) + "/" +
                     std::to_string(grid.zero_step_log2));
        CodeStream q;
        const auto bytes = encode_values(x, n_rows, dim, bits, group_size, o, &q);
        CodeStream back;
        ASSERT_NO_THROW(back = decode(bytes));
        EXPECT_EQ(back.codes, q.codes);
        std::vector<Half> got;
        ASSERT_NO_THROW(got = decode_to_half(bytes));
        expect_within_bound(x, back, got, compact_widening(grid, bits));
      }
    }
  }
}

TEST_P(Fp16Range, ReferenceParamsRoundTripExactly) {
  // quantize_to_codes keeps the reference's fp32 parameters; encode stores them exactly in
  // whichever of fp32, fp16 and compact fits and codes smallest.
  const int bits = GetParam();
  for (size_t group_size : {size_t{1}, size_t{7}, size_t{32}, size_t{256}}) {
    const size_t n_rows = 300, dim = 24;
    const auto x = extreme_inputs(n_rows, dim, static_cast<uint32_t>(group_size));
    SCOPED_TRACE("bits " + std::to_string(bits) + " group " + std::to_string(group_size));
    const CodeStream q = quantize_to_codes(x, n_rows, dim, bits, group_size);
    const auto bytes = encode(q);
    CodeStream back;
    ASSERT_NO_THROW(back = decode(bytes));
    EXPECT_EQ(back.codes, q.codes);
    EXPECT_EQ(back.scale, q.scale);
    EXPECT_EQ(back.zero, q.zero);
    expect_within_bound(x, back, decode_to_half(bytes), 0.0f);
  }
}

TEST_P(Fp16Range, BatchesRoundTripInBothLayouts) {
  const int bits = GetParam();
  // 3 heads x 512 rows x 8 dims codes as shared models; 2 heads x 40 rows x 24 dims
  // independently (the layout is the encoder's choice; both must decode).
  for (const auto& [heads, rows, dim] : {std::tuple<size_t, size_t, size_t>{3, 512, 8},
                                         std::tuple<size_t, size_t, size_t>{2, 40, 24}}) {
    const auto x = extreme_inputs(heads * rows, dim, static_cast<uint32_t>(bits));
    SCOPED_TRACE("bits " + std::to_string(bits) + " heads " + std::to_string(heads));
    const auto bytes = encode_values_batch(x, heads, rows, dim, bits, 32);
    std::vector<CodeStream> back;
    ASSERT_NO_THROW(back = decode_batch(bytes));
    ASSERT_EQ(back.size(), heads);
    const auto got = decode_batch_to_half(bytes);
    for (size_t h = 0; h < heads; ++h) {
      const std::vector<float> xh(x.begin() + static_cast<ptrdiff_t>(h * rows * dim),
                                  x.begin() + static_cast<ptrdiff_t>((h + 1) * rows * dim));
      const std::vector<Half> gh(got.begin() + static_cast<ptrdiff_t>(h * rows * dim),
                                 got.begin() + static_cast<ptrdiff_t>((h + 1) * rows * dim));
      expect_within_bound(xh, back[h], gh, compact_widening(Grid{6, 4}, bits));
    }
    const auto streams = quantize_to_codes_batch(x, heads, rows, dim, bits, 32);
    const auto exact = encode_batch(streams);
    ASSERT_NO_THROW(back = decode_batch(exact));
    for (size_t h = 0; h < heads; ++h) EXPECT_EQ(back[h].zero, streams[h].zero);
  }
}

INSTANTIATE_TEST_SUITE_P(AllBits, Fp16Range, ::testing::Range(1, 9));

TEST(Fp16RangeSimd, EveryPathDecodesExtremesToTheSameHalves) {
  const std::vector<SimdPath> paths = test::supported_simd_paths();
  const size_t n_rows = 1024, dim = 64;  // dim 64 and 8: the wide and the narrow kernels
  for (size_t d : {dim, size_t{8}}) {
    const auto x = extreme_inputs(n_rows, d, 5);
    for (int bits : {1, 4, 8}) {
      const auto bytes = encode_values(x, n_rows, d, bits, 32);
      const auto ref_bytes = encode(quantize_to_codes(x, n_rows, d, bits, 32));
      std::vector<Half> first, first_ref;
      for (SimdPath p : paths) {
        set_simd_path(p);
        const auto got = decode_to_half(bytes);
        const auto got_ref = decode_to_half(ref_bytes);
        if (first.empty()) first = got, first_ref = got_ref;
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_EQ(got[i].bits, first[i].bits) << simd_path_name(p) << " element " << i;
          ASSERT_EQ(got_ref[i].bits, first_ref[i].bits) << simd_path_name(p) << " element " << i;
          ASSERT_TRUE(std::isfinite(half_to_float(got_ref[i]))) << simd_path_name(p);
        }
      }
      set_simd_path(best_supported_simd_path());
    }
  }
}

}  // namespace
}  // namespace cachegen
