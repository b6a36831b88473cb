// `cachegen calibrate` on the real model: the profile it measures, transform snapshots written
// with it (smaller than the level at the level's KL on the calibration windows, restored without
// running the model), the profile rows of eval, and the errors for a missing or foreign profile.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "cachegen/error.h"
#include "cachegen/llama_context.h"
#include "llama_test_support.h"

namespace cachegen::llama {
namespace {

std::string story_text_file() {
  const auto text = std::filesystem::temp_directory_path() /
                    ("cachegen_calibrate_" + std::to_string(::getpid()) + ".txt");
  std::ofstream f(text);
  for (int i = 0; i < 60; ++i) {
    f << "Once upon a time, there was a little girl named Lily. She loved to play in the park "
         "with her red ball. One day the ball rolled into the pond and a duck swam to get it. ";
  }
  return text.string();
}

// One small calibration shared by the tests (it runs the model a few hundred times).
const KvProfile& small_profile() {
  static const KvProfile p = [] {
    CalibrateOptions o;
    o.model_path = test::find_test_model();
    o.text_path = story_text_file();
    o.n_windows = 2;
    o.prefix = 96;
    o.n_continue = 16;
    o.bands = 4;
    o.n_threads = 1;
    KvProfile out = calibrate_profile(o, {});
    std::filesystem::remove(o.text_path);
    return out;
  }();
  return p;
}

TEST(Calibrate, MeasuresAProfileOfTheModel) {
  CACHEGEN_REQUIRE_MODEL(model);
  const KvProfile& p = small_profile();
  p.validate();
  EXPECT_EQ(p.model_fingerprint, context_fingerprint(model->identity()));
  EXPECT_EQ(p.n_layers, static_cast<int>(model->identity().n_layer));
  EXPECT_EQ(p.block, p.width());  // PCA over the whole row by default
  EXPECT_TRUE(p.key_pre_rope);
  EXPECT_EQ(p.rope, model_rope_params(*model));
  for (size_t t = 0; t < p.tensors.size(); ++t) {
    EXPECT_GT(p.tensors[t].sensitivity, 0.0f) << t;
    EXPECT_GT(p.tensors[t].variance[0], p.tensors[t].variance.back()) << t;
  }
  // Levels: coarser steps for lower levels.
  EXPECT_GT(p.scale_of(QualityLevel::high), 0.0f);
  EXPECT_LT(p.scale_of(QualityLevel::high), p.scale_of(QualityLevel::medium));
  EXPECT_LE(p.scale_of(QualityLevel::medium), p.scale_of(QualityLevel::low));
  EXPECT_EQ(KvProfile::parse(p.serialize()).id(), p.id());
}

TEST(Calibrate, TransformSnapshotsRestoreWithoutRunningTheModel) {
  CACHEGEN_REQUIRE_MODEL(model);
  const auto profile = std::make_shared<const KvProfile>(small_profile());
  auto ctx = test::make_context(*model, false);
  const std::vector<int32_t> tokens = test::story_tokens(*model, 120);
  ctx->decode(tokens, 0, false);
  const KvSnapshot captured = capture_seq_state(*ctx, tokens);

  const SnapshotEncoding e = SnapshotEncoding::profiled(profile, *model, QualityLevel::medium);
  ASSERT_TRUE(e.transform);
  const std::vector<uint8_t> file = snapshot_to_cgkv(captured, model->identity(), e);
  const std::vector<uint8_t> level = snapshot_to_cgkv(captured, *model, QualityLevel::medium);
  EXPECT_LT(file.size(), level.size());

  CgkvReader reader = CgkvReader::from_bytes(file);
  EXPECT_EQ(reader.info().codec, ContainerCodec::transform);
  EXPECT_TRUE(reader.info().layers[0].recomputed);
  EXPECT_THROW(unpack_snapshot(reader, model), Error);  // no profile set
  reader.set_profile(profile);
  const uint64_t before = model_evaluations();
  const KvSnapshot s = unpack_snapshot(reader, model);
  EXPECT_EQ(model_evaluations(), before);
  // At the high level, values close to the capture (layer 0 recomputed, the rest within the
  // steps).
  CgkvReader high = CgkvReader::from_bytes(
      snapshot_to_cgkv(captured, model->identity(),
                       SnapshotEncoding::profiled(profile, *model, QualityLevel::high)));
  high.set_profile(profile);
  const KvSnapshot hs = unpack_snapshot(high, model);
  const std::vector<float> a = layer_v_float(captured.data_stream().layers[1]);
  const std::vector<float> b = layer_v_float(hs.data_stream().layers[1]);
  double err = 0, var = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err += (a[i] - b[i]) * (a[i] - b[i]);
    var += a[i] * a[i];
  }
  EXPECT_LT(err, 0.05 * var);
  auto restored = test::make_context(*model, false);
  restore_seq_state(*restored, s);

  // A size target is met through the whole file; a profile from another model is refused.
  SnapshotEncoding sized = SnapshotEncoding::profiled(profile, *model);
  sized.transform->bits_per_element = 2.0;
  const std::vector<uint8_t> f2 = snapshot_to_cgkv(captured, model->identity(), sized);
  EXPECT_LE(8.0 * static_cast<double>(f2.size()) /
                static_cast<double>(captured.n_cells() * profile->width() * 2 *
                                    static_cast<size_t>(profile->n_layers)),
            2.0);
  KvProfile other = *profile;
  other.model_fingerprint = "llama:other";
  SnapshotEncoding foreign = SnapshotEncoding::profiled(std::make_shared<const KvProfile>(other),
                                                        *model, QualityLevel::high);
  EXPECT_THROW(snapshot_to_cgkv(captured, model->identity(), foreign), Error);
  KvProfile uncalibrated = *profile;
  uncalibrated.level_scale = {};
  EXPECT_THROW(SnapshotEncoding::profiled(std::make_shared<const KvProfile>(uncalibrated), *model,
                                          QualityLevel::high),
               Error);
}

TEST(Calibrate, EvalPricesProfileRowsThroughTheFile) {
  CACHEGEN_REQUIRE_MODEL(model);
  const auto path = std::filesystem::temp_directory_path() /
                    ("cachegen_profile_" + std::to_string(::getpid()) + ".cgprof");
  write_profile(path.string(), small_profile());
  EvalOptions o;
  o.model_path = test::find_test_model();
  o.text_path = story_text_file();
  o.n_contexts = 1;
  o.prefix = 96;
  o.n_continue = 8;
  o.n_threads = 1;
  o.sweep = "rate";
  o.profile_path = path.string();
  const std::vector<EvalRow> rows = evaluate_kv_quality(o, {});
  std::filesystem::remove(o.text_path);
  std::filesystem::remove(path);
  size_t n = 0;
  double prev_kl = 1e9, prev_bits = 0;
  for (const EvalRow& r : rows) {
    if (r.method.rfind("profile-", 0) != 0) continue;
    ++n;
    EXPECT_EQ(r.priced, "file") << r.method;
    EXPECT_EQ(r.family, "ours (profile)") << r.method;
    if (r.method.rfind("profile-kl", 0) == 0) continue;  // KL targets: estimates
    if (r.method.back() == 'b') {  // the ladder: size targets met, quality rising with size
      const double target = std::stod(r.method.substr(8));
      EXPECT_LE(r.bits_per_element, target + 1e-9) << r.method;
      EXPECT_GT(r.bits_per_element, prev_bits) << r.method;
      EXPECT_LE(r.kl, prev_kl * 1.5 + 1e-6) << r.method;
      prev_bits = r.bits_per_element;
      prev_kl = r.kl;
    }
  }
  EXPECT_EQ(n, 3u + 14u + 4u);  // three levels, fourteen size targets, four KL targets
}

}  // namespace
}  // namespace cachegen::llama
