// Capture → (compress) → restore into a fresh context → continue: lossless and lossy, and
// the refusals.
#include <gtest/gtest.h>

#include <llama.h>

#include "cachegen/codec.h"
#include "cachegen/error.h"
#include "llama_test_support.h"

namespace cachegen::llama {
namespace {

using test::make_context;

constexpr size_t kPrefix = 64;
constexpr size_t kContinue = 16;

class Restore : public ::testing::TestWithParam<bool> {};

TEST_P(Restore, LosslessRestoreGivesIdenticalLogits) {
  CACHEGEN_REQUIRE_MODEL(model);
  const bool flash = GetParam();
  const std::vector<int32_t> tokens = test::story_tokens(*model, kPrefix + kContinue);
  const std::span<const int32_t> prefix(tokens.data(), kPrefix),
      cont(tokens.data() + kPrefix, kContinue);

  auto a = make_context(*model, flash);
  a->decode(prefix, 0, false);
  const KvSnapshot s = capture_seq_state(*a, prefix);
  EXPECT_EQ(s.model, model->identity());
  const std::vector<float> expected = a->decode(cont, kPrefix, true);

  auto b = make_context(*model, flash);
  restore_seq_state(*b, s);
  EXPECT_EQ(b->decode(cont, kPrefix, true), expected);  // bit-identical logits
  EXPECT_EQ(test::raw_seq_state(*b).size(), 0u + test::raw_seq_state(*a).size());
}

TEST_P(Restore, QuantizedKvRestoresWithSmallKl) {
  CACHEGEN_REQUIRE_MODEL(model);
  const bool flash = GetParam();
  const std::vector<int32_t> tokens = test::story_tokens(*model, kPrefix + kContinue);
  const std::span<const int32_t> prefix(tokens.data(), kPrefix),
      cont(tokens.data() + kPrefix, kContinue);
  auto a = make_context(*model, flash);
  a->decode(prefix, 0, false);
  KvSnapshot s = capture_seq_state(*a, prefix);
  const std::vector<float> expected = a->decode(cont, kPrefix, true);

  for (KvLayer& layer : s.data_stream().layers) {
    const std::vector<float> k = layer_k_float(layer), v = layer_v_float(layer);
    const size_t n_embd = k_row_elements(layer);
    const std::vector<Half> kq = decode_to_half(encode_values(k, kPrefix, n_embd, 6));
    const std::vector<Half> vq = decode_to_half(encode_values(v, kPrefix, n_embd, 6));
    std::vector<float> kf(kq.size()), vf(vq.size());
    for (size_t i = 0; i < kq.size(); ++i) kf[i] = half_to_float(kq[i]);
    for (size_t i = 0; i < vq.size(); ++i) vf[i] = half_to_float(vq[i]);
    set_layer_k_float(layer, kf);
    set_layer_v_float(layer, vf);
  }
  auto b = make_context(*model, flash);
  restore_seq_state(*b, s);
  const std::vector<float> got = b->decode(cont, kPrefix, true);
  const double kl = test::mean_kl(expected, got, static_cast<size_t>(model->n_vocab()));
  EXPECT_GT(kl, 0.0);
  EXPECT_LT(kl, 5e-3);
}

INSTANTIATE_TEST_SUITE_P(FlashAttn, Restore, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "flash" : "noflash"; });

void expect_refused(Context& ctx, const KvSnapshot& s, const std::string& why) {
  try {
    restore_seq_state(ctx, s);
    FAIL() << "restore was not refused (" << why << ")";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

TEST(RestoreRefusal, OtherModelOrSettings) {
  CACHEGEN_REQUIRE_MODEL(model);
  const std::vector<int32_t> tokens = test::story_tokens(*model, 16);
  auto a = make_context(*model, false);
  a->decode(tokens, 0, false);
  const KvSnapshot s = capture_seq_state(*a, tokens);

  KvSnapshot other = s;
  other.model.gguf_header_hash ^= 1;
  auto fresh = make_context(*model, false);
  expect_refused(*fresh, other, "refusing to restore a KV cache of model");
  other = s;
  other.model.n_layer += 1;
  expect_refused(*fresh, other, "refusing to restore a KV cache of model");

  auto flash = make_context(*model, true);
  expect_refused(*flash, s, "flash attention");
  auto f32 = make_context(*model, false, kTypeF32);
  expect_refused(*f32, s, "this context stores");
  auto small = make_context(*model, false, kTypeF16, 8);
  if (llama_n_ctx(small->get()) < tokens.size()) expect_refused(*small, s, "n_ctx");

  // The refusals left the contexts usable: the right snapshot still restores.
  restore_seq_state(*fresh, s);
}

TEST(RestoreRefusal, CaptureNeedsMatchingTokenCount) {
  CACHEGEN_REQUIRE_MODEL(model);
  const std::vector<int32_t> tokens = test::story_tokens(*model, 8);
  auto a = make_context(*model, false);
  a->decode(tokens, 0, false);
  EXPECT_THROW(capture_seq_state(*a, std::span(tokens.data(), 7)), Error);
}

}  // namespace
}  // namespace cachegen::llama
