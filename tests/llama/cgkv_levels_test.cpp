// Quality levels end to end: capture 448 tokens, pack at each level, unpack with the model
// (layer 0 recomputed from the token ids), restore, teacher-force: KL near the eval's numbers.
#include <gtest/gtest.h>

#include "cachegen/error.h"
#include "cachegen/quality_levels.h"
#include "llama_test_support.h"

namespace cachegen::llama {
namespace {

constexpr size_t kPrefix = 448, kContinue = 64;

struct Window {
  std::vector<int32_t> tokens;
  KvSnapshot snapshot;
  std::vector<float> exact;  // logits of the continuation after an unmodified restore
};

std::vector<float> continue_from(const Model& model, const Window& w, const KvSnapshot& s) {
  auto ctx = test::make_context(model, false, kTypeF16, 1024);
  restore_seq_state(*ctx, s);
  return ctx->decode(std::span(w.tokens).subspan(kPrefix), kPrefix, true);
}

Window capture(const Model& model) {
  Window w;
  w.tokens = test::story_tokens(model, kPrefix + kContinue);
  w.tokens.resize(kPrefix + kContinue);
  auto ctx = test::make_context(model, false, kTypeF16, 1024);
  const std::span<const int32_t> prefix(w.tokens.data(), kPrefix);
  ctx->decode(prefix, 0, false);
  w.snapshot = capture_seq_state(*ctx, prefix);
  w.exact = continue_from(model, w, w.snapshot);
  return w;
}

double level_kl(const Model& model, const Window& w, const SnapshotEncoding& level, size_t* bytes) {
  const std::vector<uint8_t> file = snapshot_to_cgkv(w.snapshot, w.snapshot.model, level);
  *bytes = file.size();
  const KvSnapshot back = cgkv_to_snapshot(CgkvReader::from_bytes(file), model);
  return test::mean_kl(w.exact, continue_from(model, w, back),
                       static_cast<size_t>(model.n_vocab()));
}

TEST(CgkvLevels, EachLevelRestoresNearTheEvalsKl) {
  CACHEGEN_REQUIRE_MODEL(model);
  const Window w = capture(*model);
  const ModelShape shape = model_cache_shape(*model);
  const RopeParams rope = model_rope_params(*model);
  struct Case {
    QualityLevel level;
    double max_kl;
  };
  for (const Case& c : {Case{QualityLevel::high, 5e-4}, Case{QualityLevel::medium, 0.08},
                        Case{QualityLevel::low, 0.15}}) {
    size_t bytes = 0;
    const double kl = level_kl(*model, w, SnapshotEncoding::quality(c.level, shape, rope), &bytes);
    std::printf("level %-6s %6zu bytes  KL %.3g\n", quality_level_name(c.level), bytes, kl);
    EXPECT_LT(kl, c.max_kl) << quality_level_name(c.level);
  }
  // Lossless stays byte-identical.
  const std::vector<uint8_t> file = snapshot_to_cgkv(w.snapshot, *model, QualityLevel::lossless);
  EXPECT_EQ(build_state(cgkv_to_snapshot(CgkvReader::from_bytes(file), *model)),
            build_state(w.snapshot));
}

TEST(CgkvLevels, PreRopeAloneAndRecomputeAloneAreNearlyExact) {
  CACHEGEN_REQUIRE_MODEL(model);
  const Window w = capture(*model);
  const size_t n_layer = model->identity().n_layer;
  size_t bytes = 0;
  SnapshotEncoding pre = SnapshotEncoding::bits(8, 32);
  pre.quantized.key_pre_rope = true;
  pre.quantized.rope = model_rope_params(*model);
  const double kl_pre = level_kl(*model, w, pre, &bytes);
  SnapshotEncoding rec = SnapshotEncoding::bits(8, 32);
  rec.quantized.layer_bits.assign(n_layer, 8);
  rec.quantized.layer_bits[0] = 0;
  const double kl_rec = level_kl(*model, w, rec, &bytes);
  std::printf("8-bit pre-RoPE KL %.3g, 8-bit with layer 0 recomputed KL %.3g\n", kl_pre, kl_rec);
  EXPECT_LT(kl_pre, 1e-4);
  EXPECT_LT(kl_rec, 1e-4);
}

TEST(CgkvLevels, RecomputedFileWithoutTheModelIsRefused) {
  CACHEGEN_REQUIRE_MODEL(model);
  const Window w = capture(*model);
  const std::vector<uint8_t> file = snapshot_to_cgkv(w.snapshot, *model, QualityLevel::low);
  const CgkvReader r = CgkvReader::from_bytes(file);
  EXPECT_EQ(r.info().recomputed_layers(), std::vector<int>{0});
  try {
    cgkv_to_snapshot(r);
    FAIL() << "restored without the model";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("needs the model"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cachegen::llama
