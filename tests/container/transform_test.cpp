// Calibration profiles and transform files (codec 2): the eigendecomposition, the profile file,
// round trips at a scale, a size target and a KL target, sinks, pre-RoPE keys, recomputed
// layers, and the errors for a missing, foreign or damaged profile.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "cachegen/error.h"
#include "cachegen/profile.h"
#include "container/container_test_util.h"

namespace cachegen {
namespace {

constexpr size_t kT = 300, kH = 2, kD = 8, kW = kH * kD;

ModelShape shape3() {
  ModelShape s;
  s.architecture = "test";
  s.n_layers = 3;
  s.attention = {true, false, true};
  s.n_kv_heads = static_cast<int>(kH);
  s.head_dim = static_cast<int>(kD);
  return s;
}

// fp32 [n_attn = 2, 2, T, W]: rows of a few strong directions plus weak noise (low rank, like KV).
std::vector<float> correlated_kv(size_t T, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> dirs(4 * kW);
  for (float& d : dirs) d = n(rng);
  std::vector<float> kv(2 * 2 * T * kW);
  for (size_t t = 0; t < 4; ++t) {
    for (size_t r = 0; r < T; ++r) {
      float* row = kv.data() + (t * T + r) * kW;
      for (size_t k = 0; k < 4; ++k) {
        const float a = n(rng) * static_cast<float>(4 >> k) * (1.0f + static_cast<float>(t));
        for (size_t j = 0; j < kW; ++j) row[j] += a * dirs[k * kW + j];
      }
      for (size_t j = 0; j < kW; ++j) row[j] += 0.05f * n(rng) + 0.3f * static_cast<float>(j % 3);
    }
  }
  return kv;
}

std::shared_ptr<const KvProfile> fit(const std::vector<float>& kv, size_t T, size_t block,
                                     bool pre_rope = false) {
  ProfileFitter f(3, static_cast<int>(kH), static_cast<int>(kD), block, {1, 0, 1});
  const size_t plane = T * kW;
  for (size_t a = 0; a < 2; ++a) {
    for (int kind = 0; kind < 2; ++kind) {
      std::vector<float> x(kv.begin() + static_cast<ptrdiff_t>((2 * a + kind) * plane),
                           kv.begin() + static_cast<ptrdiff_t>((2 * a + kind + 1) * plane));
      if (kind == 0 && pre_rope) {
        std::vector<int32_t> pos(T);
        for (size_t i = 0; i < T; ++i) pos[i] = static_cast<int32_t>(i);
        rope_rows(x, T, kH, kD, pos, RopeParams{}, true);
      }
      f.add(a == 0 ? 0 : 2, kind, x);
    }
  }
  KvProfile p = f.finish();
  p.model_fingerprint = "test-model";
  p.key_pre_rope = pre_rope;
  p.tensors[0].sensitivity = 2.0f;  // layer 0 K twice as sensitive as the rest
  p.tensors[1].sensitivity = p.tensors[4].sensitivity = p.tensors[5].sensitivity = 1.0f;
  return std::make_shared<const KvProfile>(std::move(p));
}

double mse(const std::vector<float>& a, const std::vector<Half>& b, size_t begin, size_t n) {
  double e = 0;
  for (size_t i = begin; i < begin + n; ++i) {
    const double d = a[i] - half_to_float(b[i]);
    e += d * d;
  }
  return e / static_cast<double>(n);
}

TEST(SymmetricEigen, DiagonalisesAKnownMatrix) {
  // [[2, 1], [1, 2]]: eigenvalues 3 (1, 1)/sqrt2 and 1 (1, -1)/sqrt2.
  std::vector<double> a{2, 1, 1, 2}, values, vectors;
  symmetric_eigen(a, 2, values, vectors);
  EXPECT_NEAR(values[0], 3, 1e-12);
  EXPECT_NEAR(values[1], 1, 1e-12);
  EXPECT_NEAR(std::fabs(vectors[0]), std::sqrt(0.5), 1e-12);
  EXPECT_NEAR(vectors[0] * vectors[2] + vectors[1] * vectors[3], 0, 1e-12);
}

TEST(Profile, FitsAnOrthonormalBasisWithDescendingVariances) {
  const std::vector<float> kv = correlated_kv(kT, 1);
  for (size_t block : {kD, kW}) {
    const auto p = fit(kv, kT, block);
    const ProfileTensor& t = p->tensor(2, 1);
    for (size_t b = 0; b < kW; b += block) {
      for (size_t c = 0; c < block; ++c) {
        if (c > 0) {
          EXPECT_GE(t.variance[b + c - 1], t.variance[b + c]);
        }
        for (size_t d = 0; d < block; ++d) {
          double dot = 0;
          for (size_t i = 0; i < block; ++i)
            dot += double{t.basis[(b + c) * block + i]} * t.basis[(b + d) * block + i];
          EXPECT_NEAR(dot, c == d ? 1.0 : 0.0, 1e-5);
        }
      }
    }
  }
  // Fixed rotations: orthonormal, the same total variance, less compaction than PCA.
  for (const char* rot : {"hadamard", "identity"}) {
    ProfileFitter f(3, static_cast<int>(kH), static_cast<int>(kD), kW, {1, 0, 1});
    f.add(0, 0, std::span<const float>(kv).first(kT * kW));
    f.add(0, 1, std::span<const float>(kv).first(kT * kW));
    f.add(2, 0, std::span<const float>(kv).first(kT * kW));
    f.add(2, 1, std::span<const float>(kv).first(kT * kW));
    const KvProfile r = f.finish(rot);
    const KvProfile pca = f.finish();
    double tr = 0, tp = 0, top_r = 0;
    for (size_t c = 0; c < kW; ++c) {
      tr += r.tensors[0].variance[c];
      tp += pca.tensors[0].variance[c];
    }
    std::vector<float> v = r.tensors[0].variance;
    std::sort(v.begin(), v.end(), std::greater<>());
    for (size_t c = 0; c < 4; ++c) top_r += v[c];
    EXPECT_NEAR(tr, tp, 1e-3 * tp) << rot;
    EXPECT_LT(top_r / tr, 0.99) << rot;
    for (size_t c = 0; c < kW; ++c) {
      double dot = 0;
      for (size_t i = 0; i < kW; ++i)
        dot += double{r.tensors[0].basis[c * kW + i]} * r.tensors[0].basis[c * kW + i];
      EXPECT_NEAR(dot, 1.0, 1e-6) << rot;
    }
  }
  EXPECT_THROW(ProfileFitter(1, 3, 4, 12, {1}).finish("hadamard"), Error);  // not a power of 2
  // The data has four strong directions: whole-width PCA puts nearly all variance in them.
  const auto p = fit(kv, kT, kW);
  const ProfileTensor& t = p->tensor(0, 0);
  double top = 0, all = 0;
  for (size_t c = 0; c < kW; ++c) (c < 4 ? top : all) += t.variance[c];
  EXPECT_GT(top / (top + all), 0.99);
}

TEST(Profile, FileRoundTripsAndRejectsDamage) {
  const auto p = fit(correlated_kv(kT, 2), kT, kW, true);
  const std::vector<uint8_t> bytes = p->serialize();
  const KvProfile q = KvProfile::parse(bytes);
  EXPECT_EQ(q.serialize(), bytes);
  EXPECT_EQ(q.id(), p->id());
  EXPECT_TRUE(q.key_pre_rope);
  EXPECT_EQ(q.model_fingerprint, "test-model");

  std::vector<uint8_t> bad = bytes;
  bad[200] ^= 1;
  EXPECT_THROW(
      {
        try {
          KvProfile::parse(bad);
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::corrupt_input);
          EXPECT_NE(e.message().find("checksum"), std::string::npos);
          throw;
        }
      },
      Error);
  bad = bytes;
  bad[4] = 9;  // version
  try {
    KvProfile::parse(bad);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported_version);
  }
  for (size_t n : {size_t{0}, size_t{10}, bytes.size() - 1}) {
    EXPECT_THROW(KvProfile::parse(std::span(bytes.data(), n)), Error) << n;
  }
  KvProfile nan = *p;
  nan.tensors[0].mean[3] = std::nanf("");
  EXPECT_THROW(nan.serialize(), Error);
  KvProfile block = *p;
  block.block = 5;
  EXPECT_THROW(block.serialize(), Error);
}

TEST(Profile, RateBoundIsWaterFilling) {
  KvProfile p = *fit(correlated_kv(kT, 12), kT, kW);
  // Layer 0 K only (the others skipped... by zero variance): components of variance 4 and 1,
  // sensitivity 1, the rest 0. KL = sum min(theta, var) / W; bits = sum 0.5 log2(var / theta).
  for (ProfileTensor& t : p.tensors) {
    if (t.variance.empty()) continue;
    std::fill(t.variance.begin(), t.variance.end(), 0.0f);
    t.sensitivity = 1;
  }
  p.tensors[0].variance[0] = 4;
  p.tensors[0].variance[1] = 1;
  // theta = 0.25: KL = 0.5 / 16; bits = (0.5 log2 16 + 0.5 log2 4) / (3 layers * 2 * 16) = 3 / 96.
  EXPECT_NEAR(p.rate_bound(0.5 / 16), 3.0 / 96, 1e-9);
  EXPECT_NEAR(p.rate_bound(5.0 / 16), 0.0, 1e-12);  // every component dropped
  EXPECT_GT(p.rate_bound(0.01 / 16), p.rate_bound(0.1 / 16));
  const std::vector<uint8_t> skip_layer0 = {1, 0, 0};
  EXPECT_NEAR(p.rate_bound(0.5 / 16, skip_layer0), 0.0, 1e-12);
}

TEST(TransformFile, RoundTripsAtAScaleWithinTheStep) {
  const std::vector<float> kv = correlated_kv(kT, 3);
  const auto p = fit(kv, kT, kW);
  TransformEncoding enc;
  enc.profile = p;
  enc.scale = 0.02;
  enc.chunk_tokens = 128;
  const std::vector<uint8_t> file = write_cgkv_transform(shape3(), kv, kT, enc);
  CgkvReader r = CgkvReader::from_bytes(file);
  EXPECT_EQ(r.info().codec, ContainerCodec::transform);
  EXPECT_EQ(r.info().version, 7);
  EXPECT_EQ(r.info().profile_id, p->id());
  ASSERT_EQ(r.info().chunks.size(), 3u);
  // Without the profile: a clear error naming it.
  try {
    r.read_tokens(0, kT);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(e.message().find("profile"), std::string::npos);
  }
  EXPECT_THROW(r.verify(), Error);
  // A different profile is refused.
  EXPECT_THROW(r.set_profile(fit(correlated_kv(kT, 4), kT, kW)), Error);
  r.set_profile(p);
  r.verify();
  const std::vector<Half> out = r.read_tokens(0, kT);
  const std::vector<float> steps = p->steps(0.02);
  for (size_t t = 0; t < 4; ++t) {
    const float step = steps[(t / 2 == 0 ? 0 : 4) + t % 2];
    // Uniform rounding: error variance step^2 / 12 per coefficient (plus fp16 rounding).
    EXPECT_LT(mse(kv, out, t * kT * kW, kT * kW), step * step / 12 * 1.3 + 1e-4) << t;
  }
  // A range inside a chunk equals the same rows of the whole read.
  const std::vector<Half> part = r.read_tokens(130, 140);
  for (size_t t = 0; t < 4; ++t) {
    for (size_t i = 0; i < 10 * kW; ++i) {
      ASSERT_EQ(part[t * 10 * kW + i].bits, out[(t * kT + 130) * kW + i].bits);
    }
  }
  // The more sensitive tensor (layer 0 K) got the finer step.
  EXPECT_LT(r.info().layers[0].key_step, r.info().layers[0].value_step);
}

TEST(TransformFile, StepFactorsGiveComponentsTheirOwnSteps) {
  const std::vector<float> kv = correlated_kv(kT, 8);
  KvProfile p = *fit(kv, kT, kW);
  // Every component at an eighth of the step, but the last (a weak one) at 8 times it.
  for (size_t t : {size_t{0}, size_t{1}, size_t{4}, size_t{5}}) {
    for (size_t c = 0; c < kW; ++c) p.tensors[t].step_factor[c] = c + 1 < kW ? 0.125f : 8.0f;
  }
  const auto fine = std::make_shared<const KvProfile>(p);
  const auto plain = fit(kv, kT, kW);
  TransformEncoding enc;
  enc.scale = 0.2;
  enc.profile = plain;
  CgkvReader a = CgkvReader::from_bytes(write_cgkv_transform(shape3(), kv, kT, enc));
  enc.profile = fine;
  CgkvReader b = CgkvReader::from_bytes(write_cgkv_transform(shape3(), kv, kT, enc));
  a.set_profile(plain);
  b.set_profile(fine);
  const std::vector<Half> ra = a.read_tokens(0, kT), rb = b.read_tokens(0, kT);
  // Finer steps: a smaller error and a bigger file.
  EXPECT_LT(mse(kv, rb, 0, kv.size()), mse(kv, ra, 0, kv.size()) / 4);
  EXPECT_GT(b.info().file_bytes, a.info().file_bytes);
  // A scale so fine that a coefficient leaves the coded range (|q| <= 32767) is refused.
  enc.scale = 1e-5;
  EXPECT_THROW(write_cgkv_transform(shape3(), kv, kT, enc), Error);
  KvProfile bad = p;
  bad.tensors[0].step_factor[0] = 0;
  EXPECT_THROW(bad.serialize(), Error);
}

TEST(TransformFile, MeetsASizeTargetAndAKlTarget) {
  const std::vector<float> kv = correlated_kv(kT, 5);
  const auto p = fit(kv, kT, kW);
  const double elements = static_cast<double>(kv.size());
  for (double bpe : {1.0, 2.0, 4.0}) {
    TransformEncoding enc;
    enc.profile = p;
    enc.bits_per_element = bpe;
    const std::vector<uint8_t> file = write_cgkv_transform(shape3(), kv, kT, enc);
    const double got = static_cast<double>(file.size()) * 8 / elements;
    EXPECT_LE(got, bpe);
    EXPECT_GT(got, bpe * 0.9) << bpe;
  }
  std::vector<float> bad = kv;
  bad[17] = std::nanf("");
  TransformEncoding nan_enc;
  nan_enc.profile = p;
  nan_enc.scale = 0.1;
  EXPECT_THROW(write_cgkv_transform(shape3(), bad, kT, nan_enc), Error);
  TransformEncoding tiny;
  tiny.profile = p;
  tiny.bits_per_element = 0.001;  // below the header and per-channel minimum
  EXPECT_THROW(write_cgkv_transform(shape3(), kv, kT, tiny), Error);

  // KL target: the estimate (sensitivity * MSE summed over tensors) at the chosen scale is at
  // most the target, and a tighter target gives a bigger file.
  size_t prev = 0;
  for (double kl : {1e-1, 1e-2, 1e-3}) {
    TransformEncoding enc;
    enc.profile = p;
    enc.max_kl = kl;
    double scale = 0;
    const std::vector<uint8_t> file = write_cgkv_transform(shape3(), kv, kT, enc, {}, &scale);
    CgkvReader r = CgkvReader::from_bytes(file);
    r.set_profile(p);
    const std::vector<Half> out = r.read_tokens(0, kT);
    double est = 0;
    const size_t layer_of[2] = {0, 2};
    for (size_t t = 0; t < 4; ++t) {
      est += p->tensor(static_cast<int>(layer_of[t / 2]), static_cast<int>(t % 2)).sensitivity *
             mse(kv, out, t * kT * kW, kT * kW);
    }
    EXPECT_LT(est, kl * 1.1 + 1e-5) << kl;
    EXPECT_GT(file.size(), prev);
    prev = file.size();
  }
}

TEST(TransformFile, SinksPreRopeKeysAndRecomputedLayers) {
  const std::vector<float> kv = correlated_kv(kT, 6);
  const auto p = fit(kv, kT, kD, true);
  TransformEncoding enc;
  enc.profile = p;
  enc.scale = 0.05;
  enc.sink_tokens = 16;
  enc.sink_scale = 0.125f;
  enc.rope_position_offset = 0;
  const std::vector<uint8_t> file = write_cgkv_transform(shape3(), kv, kT, enc);
  CgkvReader r = CgkvReader::from_bytes(file);
  r.set_profile(p);
  EXPECT_TRUE(r.info().has_rope);
  EXPECT_EQ(r.info().sink_tokens, 16u);
  const std::vector<Half> out = r.read_tokens(0, kT);
  // Keys come back rotated (as given), sinks with a smaller error than the other rows.
  for (size_t t = 0; t < 4; ++t) {
    const double sink = mse(kv, out, t * kT * kW, 16 * kW);
    const double rest = mse(kv, out, (t * kT + 16) * kW, (kT - 16) * kW);
    EXPECT_LT(sink, rest / 4) << t;
    EXPECT_LT(rest, 0.05 * 0.05) << t;
  }
  // Layer 0 recomputed: nothing stored for it, zeros read back.
  enc.recompute = {1, 0, 0};
  CgkvReader rr = CgkvReader::from_bytes(write_cgkv_transform(shape3(), kv, kT, enc));
  rr.set_profile(p);
  EXPECT_TRUE(rr.info().layers[0].recomputed);
  const std::vector<Half> out2 = rr.read_tokens(0, kT);
  for (size_t i = 0; i < 2 * kT * kW; ++i) ASSERT_EQ(out2[i].bits, 0);
  for (size_t i = 2 * kT * kW; i < out2.size(); ++i) ASSERT_EQ(out2[i].bits, out[i].bits);
}

TEST(TransformFile, DamagedBytesGiveErrorsNotCrashes) {
  const std::vector<float> kv = correlated_kv(64, 7);
  const auto p = fit(kv, 64, kW);
  TransformEncoding enc;
  enc.profile = p;
  enc.scale = 0.1;
  const std::vector<uint8_t> file = write_cgkv_transform(shape3(), kv, 64, enc);
  std::mt19937 rng(9);
  size_t errors = 0;
  for (int i = 0; i < 300; ++i) {
    std::vector<uint8_t> bad = file;
    bad[rng() % bad.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
    try {
      CgkvReader r = CgkvReader::from_bytes(bad);
      r.set_profile(p);
      r.verify();
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 250u);  // checksums catch nearly every flip
}

}  // namespace
}  // namespace cachegen
