// Parsing and rebuilding llama.cpp's sequence state: byte identity, layout, hostile bytes.
#include <gtest/gtest.h>

#include <tuple>

#include "cachegen/error.h"
#include "llama_test_support.h"

namespace cachegen::llama {
namespace {

using test::make_context;
using test::raw_seq_state;

class StateFormat : public ::testing::TestWithParam<std::tuple<bool, int32_t>> {};

TEST_P(StateFormat, ParseThenBuildIsByteIdentical) {
  CACHEGEN_REQUIRE_MODEL(model);
  const auto [flash, type] = GetParam();
  auto ctx = make_context(*model, flash, type);
  const std::vector<int32_t> tokens = test::story_tokens(*model, 40);
  ctx->decode(tokens, 0, false);
  const std::vector<uint8_t> raw = raw_seq_state(*ctx);

  const KvSnapshot s = parse_seq_state(raw);
  const KvStream& stream = s.data_stream();
  EXPECT_EQ(stream.cells.size(), tokens.size());
  EXPECT_EQ(stream.v_trans, !flash);
  ASSERT_EQ(stream.layers.size(), model->identity().n_layer);
  const size_t n_embd = model->identity().n_head_kv * model->identity().head_dim;
  for (size_t i = 0; i < stream.cells.size(); ++i) EXPECT_EQ(stream.cells[i].pos, int32_t(i));
  for (const KvLayer& layer : stream.layers) {
    EXPECT_EQ(layer.k_type, type);
    EXPECT_EQ(k_row_elements(layer), n_embd);
    EXPECT_EQ(v_row_elements(layer), n_embd);
  }
  EXPECT_EQ(build_state(s), raw);

  // fp32 round trip through the element accessors changes nothing for f16/bf16/f32.
  KvSnapshot copy = s;
  for (KvLayer& layer : copy.data_stream().layers) {
    set_layer_k_float(layer, layer_k_float(layer));
    set_layer_v_float(layer, layer_v_float(layer));
  }
  EXPECT_EQ(build_state(copy), raw);
}

INSTANTIATE_TEST_SUITE_P(FlashAndTypes, StateFormat,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(kTypeF16, kTypeBF16, kTypeF32)),
                         [](const auto& info) {
                           const int32_t t = std::get<1>(info.param);
                           return std::string(std::get<0>(info.param) ? "flash" : "noflash") +
                                  (t == kTypeF16    ? "_f16"
                                   : t == kTypeBF16 ? "_bf16"
                                                    : "_f32");
                         });

TEST(StateFormatHostile, EveryTruncationIsAClearError) {
  CACHEGEN_REQUIRE_MODEL(model);
  for (bool flash : {false, true}) {
    auto ctx = make_context(*model, flash);
    ctx->decode(test::story_tokens(*model, 5), 0, false);
    const std::vector<uint8_t> raw = raw_seq_state(*ctx);
    for (size_t n = 0; n < raw.size(); ++n) {
      try {
        parse_seq_state(std::span(raw.data(), n));
        FAIL() << "a " << n << "-byte prefix of " << raw.size() << " parsed";
      } catch (const Error& e) {
        EXPECT_TRUE(e.code() == ErrorCode::truncated_input || e.code() == ErrorCode::corrupt_input)
            << e.what();
        EXPECT_NE(std::string(e.what()).find("llama state"), std::string::npos);
      }
    }
    std::vector<uint8_t> longer = raw;
    longer.push_back(0);
    EXPECT_THROW(parse_seq_state(longer), Error);
  }
}

TEST(StateFormatHostile, CorruptHeaderFieldsNeverCrash) {
  CACHEGEN_REQUIRE_MODEL(model);
  auto ctx = make_context(*model, false);
  ctx->decode(test::story_tokens(*model, 3), 0, false);
  const std::vector<uint8_t> raw = raw_seq_state(*ctx);
  // Every byte, set to a few hostile values: parse either succeeds (a data byte changed) or
  // throws cachegen::Error.
  for (size_t i = 0; i < raw.size(); ++i) {
    for (uint8_t v : {uint8_t{0x00}, uint8_t{0x01}, uint8_t{0x7f}, uint8_t{0xff}}) {
      std::vector<uint8_t> bad = raw;
      bad[i] = v;
      try {
        const KvSnapshot s = parse_seq_state(bad);
        EXPECT_EQ(build_state(s), bad);
      } catch (const Error&) {
      }
    }
  }
}

TEST(StateFormatHostile, UnknownTypeAndBadLayoutAreCorrupt) {
  // magic 0xaf143cd8, seq_id 0, then the KV streams
  std::vector<uint8_t> b = {0xd8, 0x3c, 0x14, 0xaf, 0, 0, 0, 0, 1,  0, 0, 0, 1, 0,
                            0,    0,    0,    0,    0, 0, 1, 0, 0,  0, 0, 0, 0, 0,
                            0,    0,    0,    0,    1, 0, 0, 0, 99, 0, 0, 0};
  // n_stream 1, cell_count 1, cell {pos 0, n_seq_id 1, seq 0}, v_trans 0, n_layer 1, k_type 99
  b.insert(b.end(), 100, 0);
  try {
    parse_seq_state(b);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::corrupt_input);
    EXPECT_NE(std::string(e.what()).find("k_type"), std::string::npos) << e.what();
  }
  EXPECT_THROW(
      parse_seq_state(std::vector<uint8_t>{0xd8, 0x3c, 0x14, 0xaf, 0, 0, 0, 0, 0, 0, 0, 0}),
      Error);                                                                          // n_stream 0
  EXPECT_THROW(parse_seq_state(std::vector<uint8_t>{1, 2, 3, 4, 0, 0, 0, 0}), Error);  // magic
}

}  // namespace
}  // namespace cachegen::llama
