// Bad input gets a clear error naming the argument, never undefined behaviour.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "cachegen/error.h"
#include "cachegen/quant.h"

namespace cachegen {
namespace {

// Runs fn, expects Error with `code` whose message contains `needle`.
template <typename Fn>
void expect_error(Fn&& fn, ErrorCode code, const std::string& needle) {
  try {
    fn();
    FAIL() << "no error thrown (expected " << error_code_name(code) << ")";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

const std::vector<float> kX(64 * 4, 1.0f);

TEST(QuantErrors, BitsOutsideOneToEight) {
  for (int bits : {-1, 0, 9, 16}) {
    expect_error([&] { quantize_to_codes(kX, 64, 4, bits); }, ErrorCode::invalid_argument, "bits");
  }
}

TEST(QuantErrors, GroupSizeZero) {
  expect_error([&] { quantize_to_codes(kX, 64, 4, 4, 0); }, ErrorCode::invalid_argument,
               "group_size");
  expect_error([&] { quantize_to_codes(kX, 64, 4, 4, kMaxGroupSize + 1); },
               ErrorCode::invalid_argument, "group_size");
}

TEST(QuantErrors, MismatchedShape) {
  expect_error([&] { quantize_to_codes(kX, 63, 4, 4); }, ErrorCode::invalid_argument, "n_rows");
  expect_error([&] { quantize_to_codes(kX, 64, 0, 4); }, ErrorCode::invalid_argument, "dim");
}

TEST(QuantErrors, NanAndInfRejected) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    std::vector<float> x = kX;
    x[77] = bad;
    expect_error([&] { quantize_to_codes(x, 64, 4, 4); }, ErrorCode::invalid_argument, "NaN");
    std::vector<Half> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) h[i] = float_to_half(x[i]);
    expect_error([&] { quantize_to_codes(h, 64, 4, 4); }, ErrorCode::invalid_argument, "NaN");
  }
}

TEST(QuantErrors, RangeOverflowingFp32) {
  std::vector<float> x = {-3e38f, 3e38f};
  expect_error([&] { quantize_to_codes(x, 2, 1, 4); }, ErrorCode::invalid_argument, "range");
}

TEST(QuantErrors, OverflowingSizes) {
  const size_t huge = std::numeric_limits<size_t>::max() / 2;
  expect_error([&] { quantize_to_codes(kX, huge, 4, 4); }, ErrorCode::invalid_argument, "overflow");
  expect_error([&] { quantize_to_codes_batch(kX, huge, huge, 4, 4); }, ErrorCode::invalid_argument,
               "overflow");
  expect_error([&] { quantize_to_codes(kX, 64, 4, 4, std::numeric_limits<size_t>::max()); },
               ErrorCode::invalid_argument, "group_size");
}

TEST(QuantErrors, ScheduleArguments) {
  expect_error([] { layer_group_bits(4, 4, 0); }, ErrorCode::invalid_argument, "n_groups");
  expect_error([] { layer_group_bits(4, 4, -2); }, ErrorCode::invalid_argument, "n_groups");
  expect_error([] { layer_group_bits(-1, 4, 3); }, ErrorCode::invalid_argument, "n_layers");
  expect_error([] { layer_group_bits(4, 9, 3); }, ErrorCode::invalid_argument, "base_bits");
}

TEST(QuantErrors, InconsistentStreamRejected) {
  CodeStream s = quantize_to_codes(kX, 64, 4, 2);
  s.codes[3] = 200;
  expect_error([&] { dequant_codes(s); }, ErrorCode::invalid_argument, "codes");
  s = quantize_to_codes(kX, 64, 4, 2);
  s.scale.pop_back();
  expect_error([&] { entropy_coded_bytes(s); }, ErrorCode::invalid_argument, "scale");
  s = quantize_to_codes(kX, 64, 4, 2);
  std::vector<Half> small(10);
  expect_error([&] { dequant_codes_into(s, small); }, ErrorCode::output_too_small, "expected");
}

TEST(QuantErrors, DeltaInverseOutOfRange) {
  const std::vector<int16_t> d = {200, 100};
  expect_error([&] { token_delta_inverse(d, 2, 1); }, ErrorCode::invalid_argument, "0..255");
  expect_error([&] { symbol_entropy_bits(std::vector<int16_t>{300}); }, ErrorCode::invalid_argument,
               "symbol");
}

TEST(QuantErrors, WithParamsRejectsBadParameters) {
  const std::vector<float> scale(2 * 4, 0.0f), zero(2 * 4, 0.0f);
  expect_error([&] { quantize_with_params(kX, 64, 4, 4, 32, scale, zero); },
               ErrorCode::invalid_argument, "scale");
  const std::vector<float> ok(2 * 4, 1.0f), short_zero(3, 0.0f);
  expect_error([&] { quantize_with_params(kX, 64, 4, 4, 32, ok, short_zero); },
               ErrorCode::invalid_argument, "scale/zero");
}

}  // namespace
}  // namespace cachegen
