// LayerKVCache with keys pre-RoPE and recomputed (not stored) layers; quality_level_config.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <thread>

#include "cache/cache_test_inputs.h"
#include "cachegen/error.h"
#include "cachegen/kv_cache.h"
#include "cachegen/quality_levels.h"

namespace cachegen {
namespace {

using test::kv_walk;
using test::token_slice;
using test::view;

constexpr size_t kHeads = 2, kDim = 8, kTokens = 300;

KVCacheConfig pre_rope_config(ParamMode mode) {
  KVCacheConfig cfg;
  cfg.params = mode;
  cfg.block_tokens = 64;
  cfg.key_pre_rope = true;
  cfg.rope.freq_base = 10000.0f;
  cfg.rope_position_offset = 3;
  return cfg;
}

LayerKVCache fill(const KVCacheConfig& cfg, const std::vector<Half>& k, const std::vector<Half>& v,
                  const std::vector<size_t>& sizes, int kb = 6, int vb = 4) {
  LayerKVCache c(kHeads, kDim, kb, vb, cfg);
  size_t t = 0, i = 0;
  while (t < kTokens) {
    const size_t n = std::min(sizes[i++ % sizes.size()], kTokens - t);
    const auto ks = token_slice(k, kHeads, kTokens, kDim, t, n);
    const auto vs = token_slice(v, kHeads, kTokens, kDim, t, n);
    c.append(view(ks, kHeads, n, kDim), view(vs, kHeads, n, kDim));
    t += n;
  }
  return c;
}

bool same(const std::vector<Half>& a, const std::vector<Half>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 2) == 0;
}

// Keys that are a smooth pre-RoPE walk rotated to their positions, as a model's keys are.
std::vector<Half> rotated_keys(const KVCacheConfig& cfg) {
  const std::vector<Half> pre = kv_walk(kHeads, kTokens, kDim, 11);
  std::vector<Half> out(pre.size());
  std::vector<int32_t> pos(kTokens);
  for (size_t t = 0; t < kTokens; ++t) pos[t] = cfg.rope_position_offset + static_cast<int>(t);
  for (size_t h = 0; h < kHeads; ++h) {
    std::vector<float> f(kTokens * kDim);
    for (size_t i = 0; i < f.size(); ++i) f[i] = half_to_float(pre[h * kTokens * kDim + i]);
    rope_rows(f, kTokens, 1, kDim, pos, cfg.rope, false);
    for (size_t i = 0; i < f.size(); ++i) out[h * kTokens * kDim + i] = float_to_half(f[i]);
  }
  return out;
}

class PreRopeSplits : public ::testing::TestWithParam<ParamMode> {};

TEST_P(PreRopeSplits, OneCallUnevenCallsAndSingleTokensAgree) {
  const KVCacheConfig cfg = pre_rope_config(GetParam());
  const auto k = rotated_keys(cfg), v = kv_walk(kHeads, kTokens, kDim, 12);
  const LayerKVCache one = fill(cfg, k, v, {kTokens});
  const LayerKVCache uneven = fill(cfg, k, v, {7, 100, 1, 33, 154});
  const LayerKVCache single = fill(cfg, k, v, {1});
  for (const LayerKVCache* c : {&uneven, &single}) {
    EXPECT_TRUE(same(c->fetch_keys(), one.fetch_keys()));
    EXPECT_TRUE(same(c->fetch_values(), one.fetch_values()));
    for (int kind = 0; kind < 2; ++kind) {
      const auto a = c->snapshot_blocks(kind), b = one.snapshot_blocks(kind);
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].bytes, b[i].bytes);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, PreRopeSplits,
                         ::testing::Values(ParamMode::compact, ParamMode::reference));

TEST(PreRope, FetchReturnsRotatedKeysAndBeatsPlainQuantization) {
  KVCacheConfig plain = pre_rope_config(ParamMode::compact);
  plain.key_pre_rope = false;
  const KVCacheConfig pre = pre_rope_config(ParamMode::compact);
  const auto k = rotated_keys(pre), v = kv_walk(kHeads, kTokens, kDim, 12);
  const auto err = [&](const LayerKVCache& c) {
    const std::vector<Half> got = c.fetch_keys();
    double e = 0;
    for (size_t i = 0; i < k.size(); ++i) {
      const double d = half_to_float(got[i]) - half_to_float(k[i]);
      e += d * d;
    }
    return e;
  };
  const LayerKVCache a = fill(plain, k, v, {kTokens}, 3, 3), b = fill(pre, k, v, {kTokens}, 3, 3);
  EXPECT_LT(err(b), err(a));  // smooth pre-RoPE keys quantize better than rotated ones
  // Residual tokens come back within fp16 rounding of what was appended.
  const LayerKVCache r = fill(pre, k, v, {kTokens}, 8, 8);
  const std::vector<Half> got = r.fetch_keys(288, 300);
  for (size_t h = 0; h < kHeads; ++h) {
    for (size_t i = 0; i < 12 * kDim; ++i) {
      const float want = half_to_float(k[(h * kTokens + 288) * kDim + i]);
      EXPECT_NEAR(half_to_float(got[h * 12 * kDim + i]), want, 2e-3f * (1 + std::fabs(want)));
    }
  }
}

// Rotation angles are kept per thread between calls: caches of other offsets, bases and
// directions rotating in turn on one thread get what each computes alone on a fresh thread.
TEST(PreRope, AnglesKeptBetweenCallsAreTheRightOnes) {
  std::vector<KVCacheConfig> cfgs(3, pre_rope_config(ParamMode::compact));
  cfgs[1].rope.freq_base = 500000.0f;  // at the same positions as cfgs[0]
  cfgs[1].rope.neox = true;
  cfgs[2].rope_position_offset = 50;
  const auto v = kv_walk(kHeads, kTokens, kDim, 12);
  std::vector<std::vector<Half>> keys, alone(cfgs.size()), part(cfgs.size());
  for (const KVCacheConfig& cfg : cfgs) keys.push_back(rotated_keys(cfg));
  for (size_t i = 0; i < cfgs.size(); ++i) {
    std::thread([&, i] {
      const LayerKVCache one = fill(cfgs[i], keys[i], v, {64});
      alone[i] = one.fetch_keys();
      part[i] = one.fetch_keys(100, 200);
    }).join();
  }
  std::vector<LayerKVCache> c;
  for (const KVCacheConfig& cfg : cfgs) c.emplace_back(kHeads, kDim, 6, 4, cfg);
  for (size_t t = 0; t < kTokens; t += 64) {  // in turn, block by block, and fetched between
    const size_t n = std::min<size_t>(64, kTokens - t);
    for (size_t i = 0; i < cfgs.size(); ++i) {
      const auto ks = token_slice(keys[i], kHeads, kTokens, kDim, t, n);
      const auto vs = token_slice(v, kHeads, kTokens, kDim, t, n);
      c[i].append(view(ks, kHeads, n, kDim), view(vs, kHeads, n, kDim));
    }
    (void)c[2].fetch_keys();
  }
  for (size_t i = 0; i < cfgs.size(); ++i) {
    EXPECT_TRUE(same(c[i].fetch_keys(), alone[i])) << i;
    EXPECT_TRUE(same(c[i].fetch_keys(100, 200), part[i])) << i;
  }
}

TEST(PreRope, TrimKeepsPositions) {
  const KVCacheConfig cfg = pre_rope_config(ParamMode::compact);
  const auto k = rotated_keys(cfg), v = kv_walk(kHeads, kTokens, kDim, 12);
  for (size_t trim : {1, 12, 64, 100, 299}) {
    LayerKVCache c = fill(cfg, k, v, {kTokens});
    const std::vector<Half> before = c.fetch_keys(0, kTokens - trim);
    c.trim(trim);
    EXPECT_TRUE(same(c.fetch_keys(), before)) << trim;
    // Re-appending the trimmed tokens gives the keys at their original positions again.
    const size_t n0 = kTokens - trim;
    const auto ks = token_slice(k, kHeads, kTokens, kDim, n0, trim);
    const auto vs = token_slice(v, kHeads, kTokens, kDim, n0, trim);
    c.append(view(ks, kHeads, trim, kDim), view(vs, kHeads, trim, kDim));
    const LayerKVCache whole = fill(cfg, k, v, {kTokens});
    const std::vector<Half> a = c.fetch_keys(n0, kTokens), b = whole.fetch_keys(n0, kTokens);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_NEAR(half_to_float(a[i]), half_to_float(b[i]), 0.05f) << trim << " " << i;
    }
  }
}

TEST(Recompute, LayerStoresNothingAndRefusesFetch) {
  KVCacheConfig cfg;
  cfg.layer_bits = {0, 4};
  cfg.value_layer_bits = {0, 3};
  ModelShape shape;
  shape.n_layers = 2;
  shape.n_kv_heads = kHeads;
  shape.head_dim = kDim;
  KVCache cache = KVCacheBuilder::for_model(shape, cfg);
  ASSERT_TRUE(cache.layers[0].recomputed());
  ASSERT_FALSE(cache.layers[1].recomputed());
  const auto k = kv_walk(kHeads, kTokens, kDim, 1);
  for (LayerKVCache& l : cache.layers) {
    l.append(view(k, kHeads, kTokens, kDim), view(k, kHeads, kTokens, kDim));
  }
  EXPECT_EQ(cache.layers[0].n_tokens(), kTokens);
  EXPECT_THROW(cache.layers[0].fetch_keys(), Error);
  EXPECT_THROW(cache.layers[0].fetch_values(), Error);
  EXPECT_TRUE(cache.layers[0].snapshot_blocks(0).empty());
  const LayerStats s = cache.layers[0].stats();
  EXPECT_EQ(s.both.compressed_bytes, 0u);
  EXPECT_EQ(s.both.memory_bytes, 0u);
  EXPECT_EQ(s.both.quantized_elements, 2 * kTokens * kHeads * kDim);
  cache.layers[0].trim(10);
  EXPECT_EQ(cache.layers[0].n_tokens(), kTokens - 10);
  // A layer is recomputed as a whole.
  KVCacheConfig half_zero;
  half_zero.layer_bits = {0, 4};
  half_zero.value_layer_bits = {2, 3};
  EXPECT_THROW(half_zero.validate(), Error);
}

TEST(QualityLevelConfig, IsTheRealLevel) {
  ModelShape shape;
  shape.n_layers = 5;
  shape.n_kv_heads = 1;
  shape.head_dim = 8;
  RopeParams rope;
  rope.n_rot = 8;
  const KVCacheConfig high = quality_level_config(QualityLevel::high, shape, rope);
  EXPECT_EQ(high.layer_bits, (std::vector<int>{0, 6, 6, 6, 6}));
  EXPECT_EQ(high.value_layer_bits, (std::vector<int>{0, 5, 5, 5, 6}));
  EXPECT_TRUE(high.key_pre_rope);
  EXPECT_EQ(high.rope, rope);
  RopeParams bad;
  bad.n_rot = 16;  // > head_dim
  EXPECT_THROW(quality_level_config(QualityLevel::low, shape, bad), Error);
  KVCacheConfig c = high;
  c.rope_position_offset = -1;
  EXPECT_THROW(c.validate(), Error);
}

}  // namespace
}  // namespace cachegen
