// Layer 0 restored without a forward pass (issue: restore cost O(bytes), never a prefill):
// Layer0Projector's K/V next to llama.cpp's own prefill on both shared models, and restores at
// every level running no llama_decode.
#include <gtest/gtest.h>
#include <llama.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "cachegen/error.h"
#include "cachegen/quality_levels.h"
#include "llama/cgkv_blobs.h"
#include "llama/layer0_kv.h"
#include "llama_test_support.h"

namespace cachegen::llama {
namespace {

// The test model plus the shared tinystories-hd64.gguf when it is there (a second head_dim).
std::vector<std::string> models_under_test() {
  std::vector<std::string> out;
  if (const std::string m = test::find_test_model(); !m.empty()) out.push_back(m);
  const std::filesystem::path hd64 = std::filesystem::path(CACHEGEN_REPO_ROOT) / ".." / "shared" /
                                     "models" / "tinystories-hd64.gguf";
  if (std::filesystem::exists(hd64) &&
      (out.empty() || !std::filesystem::equivalent(out[0], hd64))) {
    out.push_back(hd64.string());
  }
  return out;
}

KvSnapshot prefill_capture(const Model& model, std::span<const int32_t> tokens) {
  auto ctx = test::make_context(model, false, kTypeF16, 512);
  ctx->decode(tokens, 0, false);
  return capture_seq_state(*ctx, tokens);
}

TEST(Layer0, ProjectionMatchesLlamaCppsPrefill) {
  const std::vector<std::string> paths = models_under_test();
  if (paths.empty()) GTEST_SKIP() << "no GGUF model: set CACHEGEN_MODEL";
  for (const std::string& path : paths) {
    const Model model(path);
    std::string why;
    ASSERT_TRUE(detail::Layer0Projector::supported(model, &why)) << path << ": " << why;
    const std::vector<int32_t> tokens = test::story_tokens(model, 300);
    const KvSnapshot cap = prefill_capture(model, tokens);
    const KvLayer& l0 = cap.data_stream().layers.at(0);
    std::vector<int32_t> pos(tokens.size());
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
    std::vector<float> k, v;
    model.layer0().compute(tokens, pos, model_rope_params(model), k, v);
    // Informational: the cost that replaces a prefill (docs/QUALITY_LEVELS.md, "Layer 0").
    const auto t0 = std::chrono::steady_clock::now();
    model.layer0().compute(tokens, pos, model_rope_params(model), k, v);
    std::printf(
        "%s: layer 0 of %zu tokens computed in %.3f ms\n",
        std::filesystem::path(path).filename().c_str(), tokens.size(),
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    for (int kind = 0; kind < 2; ++kind) {
      const std::vector<float> want = kind == 0 ? layer_k_float(l0) : layer_v_float(l0);
      const std::vector<float>& got = kind == 0 ? k : v;
      ASSERT_EQ(got.size(), want.size());
      double max_err = 0, max_abs = 0;
      size_t same = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        // The cache holds fp16: compare after the same rounding.
        const float g = half_to_float(float_to_half(got[i]));
        max_err = std::max(max_err, static_cast<double>(std::fabs(g - want[i])));
        max_abs = std::max(max_abs, static_cast<double>(std::fabs(want[i])));
        same += g == want[i] ? 1 : 0;
      }
      std::printf("%s %s: %zu/%zu fp16 values identical, max |err| %.3g of max |x| %.3g\n",
                  std::filesystem::path(path).filename().c_str(), kind == 0 ? "K" : "V", same,
                  want.size(), max_err, max_abs);
      // fp16 keeps 11 significant bits: an error above a few ulps of the largest value would
      // be another computation, not rounding.
      EXPECT_LE(max_err, max_abs * 4.0 / 1024) << path << (kind == 0 ? " K" : " V");
      EXPECT_GE(static_cast<double>(same), 0.9 * static_cast<double>(want.size()));
    }
  }
}

TEST(Layer0, RestoreAtEveryLevelRunsNoForwardPass) {
  const std::vector<std::string> paths = models_under_test();
  if (paths.empty()) GTEST_SKIP() << "no GGUF model: set CACHEGEN_MODEL";
  for (const std::string& path : paths) {
    const Model model(path);
    const std::vector<int32_t> tokens = test::story_tokens(model, 200);
    const KvSnapshot cap = prefill_capture(model, tokens);
    for (QualityLevel level :
         {QualityLevel::lossless, QualityLevel::high, QualityLevel::medium, QualityLevel::low}) {
      const std::vector<uint8_t> file = snapshot_to_cgkv(cap, model, level);
      const CgkvReader reader = CgkvReader::from_bytes(file);
      const std::vector<int> recomputed = reader.info().recomputed_layers();
      std::printf("%s level %s: layer 0 %s\n", std::filesystem::path(path).filename().c_str(),
                  quality_level_name(level), recomputed.empty() ? "stored" : "recomputed");
      EXPECT_EQ(recomputed.empty(), level == QualityLevel::lossless);
      auto ctx = test::make_context(model, false, kTypeF16, 512);
      const uint64_t before = model_evaluations();
      restore_seq_state(*ctx, cgkv_to_snapshot(reader, model));
      EXPECT_EQ(model_evaluations(), before) << path << " level " << quality_level_name(level);
      // The counter is real: a decode moves it.
      ctx->decode(std::span(tokens).subspan(0, 1), static_cast<int32_t>(tokens.size()), false);
      EXPECT_EQ(model_evaluations(), before + 1);
    }
  }
}

TEST(Layer0, RecomputeRuleFollowsTheStatedCosts) {
  // n_embd <= 800 (layer0_kv.h; docs/QUALITY_LEVELS.md, "Layer 0").
  EXPECT_TRUE(detail::layer0_recompute_pays(64));   // stories260K
  EXPECT_TRUE(detail::layer0_recompute_pays(256));  // tinystories-hd64
  EXPECT_TRUE(detail::layer0_recompute_pays(800));
  EXPECT_FALSE(detail::layer0_recompute_pays(801));
  EXPECT_FALSE(detail::layer0_recompute_pays(4096));  // a 7B model: layer 0 stored
  CACHEGEN_REQUIRE_MODEL(model);
  const bool want =
      detail::layer0_recompute_pays(static_cast<size_t>(llama_model_n_embd(model->get())));
  for (QualityLevel level : {QualityLevel::high, QualityLevel::medium, QualityLevel::low}) {
    const SnapshotEncoding l = SnapshotEncoding::quality(level, *model);
    EXPECT_EQ(l.quantized.layer_bits.at(0) == 0, want) << quality_level_name(level);
    EXPECT_EQ(l.quantized.value_layer_bits.at(0) == 0, want) << quality_level_name(level);
    // Stored instead: with layer 1's bits.
    SnapshotEncoding stored = l;
    detail::store_recomputed_layers(stored.quantized);
    EXPECT_EQ(stored.quantized.layer_bits.at(0), l.quantized.layer_bits.at(1));
    EXPECT_EQ(stored.quantized.value_layer_bits.at(0), l.quantized.value_layer_bits.at(1));
  }
}

TEST(Layer0, OnlyLayerZeroMayBeRecomputed) {
  CACHEGEN_REQUIRE_MODEL(model);
  const std::vector<int32_t> tokens = test::story_tokens(*model, 64);
  const KvSnapshot cap = prefill_capture(*model, tokens);
  SnapshotEncoding level = SnapshotEncoding::bits(8, 32);
  level.quantized.layer_bits.assign(model->identity().n_layer, 8);
  level.quantized.layer_bits[1] = 0;  // a deeper layer needs the whole prefix: never recomputed
  const std::vector<uint8_t> file = snapshot_to_cgkv(cap, cap.model, level);
  const uint64_t before = model_evaluations();
  try {
    (void)cgkv_to_snapshot(CgkvReader::from_bytes(file), *model);
    ADD_FAILURE() << "a file with layer 1 recomputed was restored";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::corrupt_input) << e.what();
  }
  EXPECT_EQ(model_evaluations(), before);
}

TEST(Layer0, OutOfVocabularyTokenIsCorruptInput) {
  CACHEGEN_REQUIRE_MODEL(model);
  const int32_t bad[2] = {1, model->n_vocab()};
  const int32_t pos[2] = {0, 1};
  std::vector<float> k, v;
  try {
    model->layer0().compute(bad, pos, model_rope_params(*model), k, v);
    ADD_FAILURE() << "token id n_vocab accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::corrupt_input);
  }
}

}  // namespace
}  // namespace cachegen::llama
