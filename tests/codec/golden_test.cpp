// Golden code streams decode to exactly the golden codes and fp16, and the seed-benchmark
// inputs meet the size targets (all side information included).
#include <gtest/gtest.h>

#include <bit>
#include <cstdio>

#include "cachegen/codec.h"
#include "codec_test_inputs.h"
#include "support/test_data.h"

namespace cachegen {
namespace {

using test::golden_expected;
using test::golden_npy;

const nlohmann::json& find_case(const std::string& name) {
  for (const auto& c : golden_expected()["quant_cases"])
    if (c["name"] == name) return c;
  throw std::runtime_error("no golden case " + name);
}

// The golden CodeStream, assembled from the golden files (not re-quantized).
CodeStream golden_stream(const nlohmann::json& c) {
  const size_t n_rows = c["shape"][0], dim = c["shape"][1];
  const NpyArray codes = golden_npy(c["codes"]);
  const auto real = codes.as<uint8_t>();
  CodeStream s = test::make_stream(std::vector<uint8_t>(real.begin(), real.end()), n_rows, dim,
                                   c["bits"], c["group_size"]);
  const NpyArray scale = golden_npy(c["scale"]), zero = golden_npy(c["zero"]);
  s.scale.assign(scale.as<float>().begin(), scale.as<float>().end());
  s.zero.assign(zero.as<float>().begin(), zero.as<float>().end());
  return s;
}

TEST(CodecGolden, EveryCaseRoundTripsToTheGoldenCodesAndFp16) {
  for (const auto& c : golden_expected()["quant_cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const CodeStream s = golden_stream(c);
    const auto bytes = encode(s);
    const CodeStream back = decode(bytes);
    test::expect_same_stream(back, s);
    const NpyArray want = golden_npy(c["dequant_fp16"]);
    const auto want16 = want.as<uint16_t>();
    const auto got = decode_to_half(bytes);
    ASSERT_EQ(got.size(), want16.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i].bits, want16[i]) << i;
    // Lossless fp32 parameters: never above fixed-width + 4 more bytes per parameter pair +
    // the constant overhead (header, 32 rANS lane states, 2 model bits per channel).
    EXPECT_LE(bytes.size(), fixed_width_bytes(s) + 4 * s.scale.size() + 160 + s.dim / 4);
  }
}

struct SizeTarget {
  const char* name;
  size_t max_bytes;  // coded_bytes must not exceed this
  size_t min_saving_vs_fixed_bytes;
};

// The size table, updated on purpose: estimated_bytes for correlated, fixed for iid (with the
// required 4% at 3 bits).
TEST(CodecGolden, SeedBenchmarkSizeTargets) {
  const SizeTarget targets[] = {
      {"bench_correlated_3bit", 13397, 0},
      {"bench_correlated_4bit", 17388, 0},
      {"bench_iid_3bit", 16384, 16384 * 4 / 100},
      {"bench_iid_4bit", 20480, 0},
  };
  for (const auto& t : targets) {
    const nlohmann::json& c = find_case(t.name);
    const NpyArray in = golden_npy(c["input"]);
    const size_t n_rows = c["shape"][0], dim = c["shape"][1];
    CodeStream q;
    const auto bytes =
        encode_values(in.as<float>(), n_rows, dim, c["bits"], c["group_size"], {}, &q);
    const size_t fixed = c["fixed_width_bytes"];
    const CodedSizeReport rep = coded_size_report(bytes);
    std::printf(
        "%-24s coded %6zu  estimate %6zu  fixed %6zu  params %5zu  models %5zu  "
        "payload %6zu  code/entropy %.4f  channels raw %zu delta %zu uniform %zu\n",
        t.name, bytes.size(), c["entropy_coded_bytes"]["delta=1,per_channel=1"].get<size_t>(),
        fixed, rep.param_bytes, rep.model_bytes, rep.payload_bytes, rep.code_ratio_over_entropy(),
        rep.n_raw_channels, rep.n_delta_channels, rep.n_uniform_channels);
    EXPECT_LE(bytes.size(), t.max_bytes) << t.name;
    EXPECT_LE(bytes.size() + t.min_saving_vs_fixed_bytes, fixed) << t.name;
    test::expect_same_stream(decode(bytes), q);
  }
}

}  // namespace
}  // namespace cachegen
