// .cgkv files with pre-RoPE keys and recomputed layers: round trips, and forged transform bytes,
// layer flags and RoPE parameters rejected with errors naming the field.
#include <gtest/gtest.h>

#include <xxhash.h>

#include <cmath>

#include "cachegen/error.h"
#include "container/container_test_util.h"

namespace cachegen {
namespace {

constexpr size_t kT = 100, kH = 2, kD = 8;

// small_shape (layers: attention, none, attention): attention layer 0 recomputed, model layer 2
// quantized with keys pre-RoPE.
KVCacheConfig level_config() {
  KVCacheConfig cfg;
  cfg.block_tokens = 64;
  cfg.layer_bits = {0, 5};
  cfg.value_layer_bits = {0, 4};
  cfg.key_pre_rope = true;
  cfg.rope.freq_base = 500.0f;
  cfg.rope.neox = true;
  cfg.rope_position_offset = 7;
  return cfg;
}

TEST(CgkvLevels, PreRopeAndRecomputedRoundTrip) {
  const test::Filled f = test::filled_cache(kT, level_config());
  const CgkvReader r = CgkvReader::from_bytes(write_cgkv(f.cache));
  const CgkvInfo& info = r.info();
  ASSERT_TRUE(info.has_rope);
  EXPECT_EQ(info.rope, level_config().rope);
  EXPECT_EQ(info.rope_position_offset, 7);
  EXPECT_EQ(info.recomputed_layers(), std::vector<int>{0});
  EXPECT_EQ(info.layers[2].key_transform, KeyTransform::pre_rope);
  EXPECT_EQ(info.layers[0].key_transform, KeyTransform::none);
  const std::vector<Half> kv = r.read_tokens(0, kT);
  const size_t plane = kT * kH * kD;
  for (size_t i = 0; i < 2 * plane; ++i) ASSERT_EQ(kv[i].bits, 0) << "recomputed layer is zeros";
  // The stored layer's keys equal the cache's fetch (rotated back), token-major here, for the
  // whole groups (the cache returns its residual tokens unquantized, the file quantized).
  const std::vector<Half> want = f.cache.layers[1].fetch_keys();  // [H, T, D]
  for (size_t t = 0; t < kT / 32 * 32; ++t) {
    for (size_t h = 0; h < kH; ++h) {
      for (size_t d = 0; d < kD; ++d) {
        ASSERT_EQ(kv[2 * plane + (t * kH + h) * kD + d].bits, want[(h * kT + t) * kD + d].bits);
      }
    }
  }
  // A token range re-rotates with the right positions.
  const std::vector<Half> part = r.read_tokens(60, 70);
  for (size_t i = 0; i < 10 * kH * kD; ++i) {
    ASSERT_EQ(part[2 * 10 * kH * kD + i].bits, kv[2 * plane + 60 * kH * kD + i].bits);
  }
  EXPECT_NO_THROW(r.verify());
  // A file without transforms is as before: no RoPE block.
  KVCacheConfig plain;
  plain.block_tokens = 64;
  const CgkvReader p = CgkvReader::from_bytes(write_cgkv(test::filled_cache(kT, plain).cache));
  EXPECT_FALSE(p.info().has_rope);
  EXPECT_TRUE(p.info().recomputed_layers().empty());
}

ErrorCode outcome(const std::vector<uint8_t>& b, std::string* msg) {
  try {
    CgkvReader::from_bytes(b).verify();
    return ErrorCode::ok;
  } catch (const Error& e) {
    *msg = e.what();
    return e.code();
  }
}

TEST(CgkvLevels, ForgedFieldsNameTheField) {
  const std::vector<uint8_t> f = write_cgkv(test::filled_cache(kT, level_config()).cache);
  // Layer entries at 68 (layer 0), 72 (layer 1, no attention), 76 (layer 2): key_bits,
  // value_bits, layer_flags, key_transform. RoPE block at 80: base, scale, n_rot (88),
  // mode (90), reserved (91), position_offset (92).
  struct Case {
    size_t at;
    std::vector<uint8_t> bytes;
    const char* needle;
  };
  const uint32_t nan = 0x7fc00000u, neg = 0xbf800000u;
  const auto le32 = [](uint32_t v) {
    return std::vector<uint8_t>{static_cast<uint8_t>(v), static_cast<uint8_t>(v >> 8),
                                static_cast<uint8_t>(v >> 16), static_cast<uint8_t>(v >> 24)};
  };
  const Case cases[] = {
      {79, {2}, "unknown key transform"},
      {75, {1}, "key transform"},
      {71, {1}, "key transform"},  // on a recomputed layer
      {78, {0x05}, "reserved layer_flags"},
      {74, {0x02}, "recompute flag"},
      {70, {0x01}, "bits 0/0 invalid"},  // recompute flag cleared: a stored layer needs bits
      {68, {3}, "bits 3/0 invalid"},     // bits on a recomputed layer
      {79, {0}, "lies outside"},         // no pre-RoPE layer left: the RoPE block is read as chunks
      {80, le32(nan), "freq_base"},
      {80, le32(neg), "freq_base"},
      {84, le32(0), "freq_scale"},
      // Finite but absurd: angles overflow fp32 and decode would give NaN.
      {84, le32(0x7f61b1e6u), "freq_scale"},  // 3e38
      {84, le32(0x0da24260u), "freq_scale"},  // 1e-30
      {80, le32(0x7f61b1e6u), "freq_base"},   // 3e38
      {80, le32(0x53e8d4a5u), "freq_base"},   // 2e12
      {80, le32(0x3f000000u), "freq_base"},   // 0.5
      {88, {3, 0}, "n_rot"},
      {88, {10, 0}, "n_rot"},  // > head_dim 8
      {90, {2}, "mode"},
      {91, {1}, "reserved"},
      {92, le32(0xffffffffu), "position_offset"},
      {92, le32(0x7fffffffu), "position_offset"},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> b = f;
    std::copy(c.bytes.begin(), c.bytes.end(), b.begin() + static_cast<ptrdiff_t>(c.at));
    const uint32_t hb = b[8] | b[9] << 8 | b[10] << 16 | static_cast<uint32_t>(b[11]) << 24;
    const uint64_t h = XXH64(b.data(), hb - 8, 0);
    for (int i = 0; i < 8; ++i) b[hb - 8 + i] = static_cast<uint8_t>(h >> (8 * i));
    std::string msg;
    EXPECT_EQ(outcome(b, &msg), ErrorCode::corrupt_input) << c.needle << ": " << msg;
    EXPECT_NE(msg.find(c.needle), std::string::npos) << c.at << ": " << msg;
  }
  std::string msg;
  ASSERT_EQ(outcome(f, &msg), ErrorCode::ok) << msg;
  // Lossless files cannot carry either.
  const test::Filled lf = test::filled_cache(kT, KVCacheConfig{});
  std::vector<uint8_t> lossless = write_cgkv_lossless(test::small_shape(), lf.kv, kT, 64);
  lossless[70] = 0x03;
  const uint32_t hb = lossless[8] | lossless[9] << 8 | lossless[10] << 16;
  const uint64_t h = XXH64(lossless.data(), hb - 8, 0);
  for (int i = 0; i < 8; ++i) lossless[hb - 8 + i] = static_cast<uint8_t>(h >> (8 * i));
  EXPECT_EQ(outcome(lossless, &msg), ErrorCode::corrupt_input);
  EXPECT_NE(msg.find("recompute flag"), std::string::npos) << msg;
}

TEST(CgkvLevels, AbsurdRopeParamsAreNotWritten) {
  // What the reader refuses, the writer refuses first (invalid_argument naming the field).
  for (const auto& [base, scale, needle] :
       {std::tuple<float, float, const char*>{500.0f, 3e38f, "freq_scale"},
        std::tuple<float, float, const char*>{3e38f, 1.0f, "freq_base"},
        std::tuple<float, float, const char*>{500.0f, std::nanf(""), "freq_scale"}}) {
    KVCacheConfig cfg = level_config();
    cfg.rope.freq_base = base;
    cfg.rope.freq_scale = scale;
    try {
      write_cgkv(test::filled_cache(kT, cfg).cache);
      ADD_FAILURE() << needle << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

TEST(Levels, EveryLayerRecomputedNeedsTheTokenIds) {
  // A file that stores no layer: its chunks are empty and its token ids are its content.
  KVCacheConfig cfg;
  cfg.block_tokens = 64;
  cfg.layer_bits = {0, 0};
  const test::Filled f = test::filled_cache(100, cfg);
  EXPECT_THROW(write_cgkv(f.cache), Error);  // readers would refuse it: the writer does
  const std::vector<CgkvBlob> ids{{1, std::vector<uint8_t>(4 * 100, 7)}};
  const std::vector<uint8_t> b = write_cgkv(f.cache, ids);
  const CgkvReader r = CgkvReader::from_bytes(b);
  EXPECT_EQ(r.info().recomputed_layers(), (std::vector<int>{0, 2}));
  EXPECT_NO_THROW(r.verify());
  EXPECT_EQ(r.read_tokens(0, 100).size(), 2u * 2 * 100 * 16);
  EXPECT_EQ(r.read_blob(1)->size(), 400u);
}

}  // namespace
}  // namespace cachegen
