// Golden vectors from the float32 port of the reference: codes, scale, zero and fp16
// reconstruction bit for bit; estimates within +-1 byte; schedules exactly.
#include <gtest/gtest.h>

#include <cstring>

#include "cachegen/quant.h"
#include "support/test_data.h"

namespace cachegen {
namespace {

using test::golden_expected;
using test::golden_npy;

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const auto& c : golden_expected()["quant_cases"]) names.push_back(c["name"]);
  return names;
}

const nlohmann::json& find_case(const std::string& name) {
  for (const auto& c : golden_expected()["quant_cases"]) {
    if (c["name"] == name) return c;
  }
  throw std::runtime_error("no golden case " + name);
}

CodeStream quantize_case(const nlohmann::json& c) {
  const NpyArray in = golden_npy(c["input"]);
  const size_t n_rows = c["shape"][0], dim = c["shape"][1];
  const int bits = c["bits"];
  const size_t gs = c["group_size"];
  if (c["input_dtype"] == "float16") {
    EXPECT_EQ(in.dtype, NpyDType::f16);
    return quantize_to_codes(in.as<Half>(), n_rows, dim, bits, gs);
  }
  EXPECT_EQ(in.dtype, NpyDType::f32);
  return quantize_to_codes(in.as<float>(), n_rows, dim, bits, gs);
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

class GoldenCase : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenCase, CodesScaleZeroAndReconstructionBitExact) {
  const nlohmann::json& c = find_case(GetParam());
  const CodeStream s = quantize_case(c);
  const size_t n_rows = c["shape"][0], dim = c["shape"][1];
  ASSERT_EQ(s.n_rows, n_rows);
  ASSERT_EQ(s.n_groups(), static_cast<size_t>(c["n_groups"]));

  const NpyArray codes = golden_npy(c["codes"]);
  ASSERT_EQ(codes.size(), n_rows * dim);
  const auto want_codes = codes.as<uint8_t>();
  size_t code_mismatches = 0;
  for (size_t i = 0; i < n_rows * dim; ++i) code_mismatches += s.codes[i] != want_codes[i];
  EXPECT_EQ(code_mismatches, 0u);

  const NpyArray scale_npy = golden_npy(c["scale"]), zero_npy = golden_npy(c["zero"]);
  const auto scale = scale_npy.as<float>();
  const auto zero = zero_npy.as<float>();
  ASSERT_EQ(scale.size(), s.scale.size());
  ASSERT_EQ(zero.size(), s.zero.size());
  for (size_t i = 0; i < scale.size(); ++i) {
    ASSERT_EQ(bits_of(s.scale[i]), bits_of(scale[i])) << "scale[" << i << "]";
    ASSERT_EQ(bits_of(s.zero[i]), bits_of(zero[i])) << "zero[" << i << "]";
  }

  const NpyArray fp16_npy = golden_npy(c["dequant_fp16"]);
  const auto want_fp16 = fp16_npy.as<uint16_t>();
  const std::vector<Half> got = dequant_codes(s);
  ASSERT_EQ(got.size(), want_fp16.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].bits, want_fp16[i]) << "fp16[" << i << "]";
  }
}

TEST_P(GoldenCase, SizeEstimates) {
  const nlohmann::json& c = find_case(GetParam());
  const CodeStream s = quantize_case(c);
  EXPECT_EQ(fixed_width_bytes(s), static_cast<size_t>(c["fixed_width_bytes"]));
  for (int delta = 0; delta <= 1; ++delta) {
    for (int pc = 0; pc <= 1; ++pc) {
      const std::string key =
          "delta=" + std::to_string(delta) + ",per_channel=" + std::to_string(pc);
      const double want = c["entropy_coded_bytes"][key];
      const double got = static_cast<double>(entropy_coded_bytes(s, delta, pc));
      EXPECT_NEAR(got, want, 1.0) << key;
    }
  }
  const std::span<const uint8_t> real(s.codes.data(), s.n_rows * s.dim);
  EXPECT_NEAR(symbol_entropy_bits(real), static_cast<double>(c["symbol_entropy_bits_pooled_raw"]),
              1e-5);
  const std::vector<int16_t> d = token_delta(real, s.n_rows, s.dim);
  EXPECT_NEAR(symbol_entropy_bits(d), static_cast<double>(c["symbol_entropy_bits_pooled_delta"]),
              1e-5);
}

INSTANTIATE_TEST_SUITE_P(Golden, GoldenCase, ::testing::ValuesIn(case_names()),
                         [](const auto& info) { return info.param; });

TEST(GoldenSchedule, LayerGroupBitsExact) {
  const auto& sched = golden_expected()["layer_group_bits"];
  ASSERT_FALSE(sched.empty());
  for (auto it = sched.begin(); it != sched.end(); ++it) {
    int n_layers, base, groups;
    ASSERT_EQ(std::sscanf(it.key().c_str(), "%d,%d,%d", &n_layers, &base, &groups), 3);
    const std::vector<int> want = it.value().get<std::vector<int>>();
    EXPECT_EQ(layer_group_bits(n_layers, base, groups), want) << it.key();
  }
}

TEST(GoldenEntropy, SymbolEntropyCases) {
  const auto& e = golden_expected()["symbol_entropy_bits"];
  const std::vector<uint8_t> zeros(100, 0);
  std::vector<uint8_t> alt(100);
  for (size_t i = 0; i < alt.size(); ++i) alt[i] = i % 2;
  EXPECT_NEAR(symbol_entropy_bits(zeros), static_cast<double>(e["zeros100"]), 1e-12);
  EXPECT_NEAR(symbol_entropy_bits(alt), static_cast<double>(e["alternating01x50"]), 1e-12);
  EXPECT_NEAR(symbol_entropy_bits(std::span<const uint8_t>()), static_cast<double>(e["empty"]),
              1e-12);
}

}  // namespace
}  // namespace cachegen
