// KV transforms: exact inverses (within fp16 rounding), RoPE against a direct formula, quality
// level settings.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cachegen/error.h"
#include "cachegen/half.h"
#include "cachegen/kv_cache.h"
#include "cachegen/quality_levels.h"
#include "cachegen/transform.h"
#include "transform/rope_kept.h"

namespace cachegen {
namespace {

std::vector<float> random_rows(size_t n, uint32_t seed, float scale = 4.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}

// Largest |a - b| in units of half an fp16 ulp at the data's scale (its largest magnitude):
// < 1 means the round trip is invisible once stored as fp16 next to the row's largest values.
double worst_in_half_ulps(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 6.1e-5, worst = 0;
  for (float v : a) scale = std::max(scale, double{std::abs(v)});
  const double half_ulp = 0.5 * scale * 0x1p-10;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(double{a[i]} - double{b[i]}) / half_ulp);
  }
  return worst;
}

TEST(Hadamard, IsOrthonormalAndSelfInverse) {
  for (size_t dim : {1u, 2u, 8u, 64u, 128u}) {
    const size_t rows = 33, heads = 3;
    const std::vector<float> x = random_rows(rows * heads * dim, 1 + static_cast<uint32_t>(dim));
    std::vector<float> y = x;
    hadamard_heads(y, rows, heads, dim);
    double nx = 0, ny = 0;
    for (size_t i = 0; i < x.size(); ++i) nx += double{x[i]} * x[i], ny += double{y[i]} * y[i];
    EXPECT_NEAR(ny / nx, 1.0, 1e-5) << dim;  // energy preserved
    hadamard_heads(y, rows, heads, dim);
    EXPECT_LT(worst_in_half_ulps(x, y), 0.1) << dim;
  }
}

TEST(Hadamard, SpreadsAnOutlierOverTheHead) {
  std::vector<float> x(8, 0.0f);
  x[3] = 8.0f;
  hadamard_heads(x, 1, 1, 8);
  for (float v : x) EXPECT_NEAR(std::abs(v), 8.0f / std::sqrt(8.0f), 1e-5f);
}

TEST(Hadamard, RejectsBadShapes) {
  std::vector<float> x(12);
  EXPECT_THROW(hadamard_heads(x, 1, 2, 6), Error);  // not a power of two
  EXPECT_THROW(hadamard_heads(x, 2, 2, 4), Error);  // size mismatch
}

// The TurboQuant-style rotation: orthogonal (norms kept, per head vector), its inverse exact
// within fp rounding, seeded (same seed same result, another seed another rotation).
TEST(RandomSignHadamard, IsOrthogonalWithAnExactInverse) {
  for (size_t dim : {2u, 8u, 64u, 128u}) {
    const size_t rows = 17, heads = 2;
    const std::vector<float> x = random_rows(rows * heads * dim, 7 + static_cast<uint32_t>(dim));
    std::vector<float> y = x;
    random_sign_hadamard_heads(y, rows, heads, dim, 42, false);
    for (size_t h = 0; h < rows * heads; ++h) {
      double nx = 0, ny = 0;
      for (size_t c = 0; c < dim; ++c) {
        nx += double{x[h * dim + c]} * x[h * dim + c];
        ny += double{y[h * dim + c]} * y[h * dim + c];
      }
      EXPECT_NEAR(ny / nx, 1.0, 1e-5) << dim;  // each head vector's norm preserved
    }
    std::vector<float> z = x;
    random_sign_hadamard_heads(z, rows, heads, dim, 42, false);
    EXPECT_EQ(y, z) << dim;  // deterministic for a seed
    random_sign_hadamard_heads(z, rows, heads, dim, 43, false);
    if (dim >= 8) {
      EXPECT_NE(y, z) << dim;  // another seed, other signs
    }
    random_sign_hadamard_heads(y, rows, heads, dim, 42, true);
    EXPECT_LT(worst_in_half_ulps(x, y), 0.1) << dim;
  }
  std::vector<float> bad(12, 1.0f);
  EXPECT_THROW(random_sign_hadamard_heads(bad, 1, 2, 6, 1, false), Error);
  EXPECT_EQ(bad, std::vector<float>(12, 1.0f));  // untouched on error
}

TEST(Rope, InverseUndoesForwardWithinFp16Rounding) {
  for (bool neox : {false, true}) {
    const size_t rows = 300, heads = 4, dim = 16;
    std::vector<int32_t> pos(rows);
    for (size_t i = 0; i < rows; ++i) pos[i] = static_cast<int32_t>(i * 7 % 4096);
    const std::vector<float> x = random_rows(rows * heads * dim, 7);
    std::vector<float> y = x;
    RopeParams r;
    r.neox = neox;
    rope_rows(y, rows, heads, dim, pos, r, true);
    rope_rows(y, rows, heads, dim, pos, r, false);
    EXPECT_LT(worst_in_half_ulps(x, y), 0.5) << neox;
  }
}

TEST(Rope, MatchesTheFormula) {
  const size_t dim = 8;
  const std::vector<float> x = random_rows(dim, 3);
  std::vector<float> y = x;
  const int32_t pos[1] = {37};
  RopeParams r;
  r.freq_base = 10000.0f;
  rope_rows(y, 1, 1, dim, pos, r, false);
  for (size_t i = 0; i < dim / 2; ++i) {
    const double theta = 37.0 * std::pow(10000.0, -2.0 * static_cast<double>(i) / dim);
    EXPECT_NEAR(y[2 * i], x[2 * i] * std::cos(theta) - x[2 * i + 1] * std::sin(theta), 1e-4);
    EXPECT_NEAR(y[2 * i + 1], x[2 * i] * std::sin(theta) + x[2 * i + 1] * std::cos(theta), 1e-4);
  }
}

TEST(Rope, PartialRotationLeavesTheRestAlone) {
  const size_t dim = 8;
  const std::vector<float> x = random_rows(dim, 4);
  std::vector<float> y = x;
  const int32_t pos[1] = {5};
  RopeParams r;
  r.n_rot = 4;
  rope_rows(y, 1, 1, dim, pos, r, false);
  for (size_t c = 4; c < dim; ++c) EXPECT_EQ(y[c], x[c]);
  EXPECT_NE(y[0], x[0]);
}

TEST(Rope, PositionZeroIsTheIdentity) {
  const std::vector<float> x = random_rows(16, 5);
  std::vector<float> y = x;
  const int32_t pos[2] = {0, 0};
  rope_rows(y, 2, 1, 8, pos, RopeParams{}, false);
  EXPECT_EQ(x, y);
}

TEST(Rope, RejectsBadArguments) {
  std::vector<float> x(16);
  const int32_t pos[2] = {0, 1};
  RopeParams odd;
  odd.n_rot = 3;
  EXPECT_THROW(rope_rows(x, 2, 1, 8, pos, odd, false), Error);
  EXPECT_THROW(rope_rows(x, 2, 1, 8, std::span<const int32_t>(pos, 1), RopeParams{}, false), Error);
  RopeParams bad_base;
  bad_base.freq_base = 0;
  EXPECT_THROW(rope_rows(x, 2, 1, 8, pos, bad_base, false), Error);
}

TEST(QualityLevels, AreOrderedAndValid) {
  ModelShape shape;
  shape.n_layers = 5;
  shape.n_kv_heads = 4;
  shape.head_dim = 8;
  double prev_bits = 1e9;
  for (QualityLevel l :
       {QualityLevel::lossless, QualityLevel::high, QualityLevel::medium, QualityLevel::low}) {
    const QualityLevelSpec q = quality_level_spec(l, 5);
    ASSERT_EQ(q.key_bits.size(), 5u);
    ASSERT_EQ(q.value_bits.size(), 5u);
    double bits = 0;
    for (size_t i = 0; i < 5; ++i) bits += q.key_bits[i] + q.value_bits[i];
    EXPECT_LE(bits, prev_bits) << quality_level_name(l);
    prev_bits = bits;
    for (size_t i = 1; i < 5; ++i) EXPECT_GE(q.key_bits[i], q.value_bits[i]);  // keys need more
    if (l == QualityLevel::lossless) {
      EXPECT_THROW(quality_level_config(l, shape, RopeParams{}), Error);
      continue;
    }
    const KVCacheConfig c = quality_level_config(l, shape, RopeParams{});
    EXPECT_NO_THROW(c.validate()) << quality_level_name(l);
    EXPECT_TRUE(c.key_pre_rope);
    EXPECT_TRUE(c.recomputed(0));
    EXPECT_EQ(c.group_size, 256u);
    EXPECT_NO_THROW(KVCacheBuilder::for_model(shape, c));
  }
  EXPECT_THROW(quality_level_spec(QualityLevel::high, 0), Error);
  // Deeper models keep the first and last layers' settings.
  const QualityLevelSpec deep = quality_level_spec(QualityLevel::high, 32);
  EXPECT_EQ(deep.key_bits.front(), 0);
  EXPECT_EQ(deep.value_bits.back(), 6);
  EXPECT_EQ(quality_level_spec(QualityLevel::medium, 1).key_bits, std::vector<int>{0});
}

TEST(QualityLevels, OneTableNamesParsesAndSizesEveryLevel) {
  for (const QualityLevelRow& row : kQualityLevels) {
    EXPECT_EQ(parse_quality_level(row.name), row.level);
    EXPECT_STREQ(quality_level_name(row.level), row.name);
    EXPECT_EQ(quality_level_row(row.level).name, row.name);
    const QualityLevelSpec q = quality_level_spec(row.level, 5);
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(q.key_bits[i], row.key_bits[i]) << row.name;
      EXPECT_EQ(q.value_bits[i], row.value_bits[i]) << row.name;
    }
    EXPECT_EQ(q.key_pre_rope, row.key_pre_rope);
    if (row.group_tokens != 0) {
      EXPECT_EQ(q.key_group_size, row.group_tokens);
    }
  }
  EXPECT_FALSE(find_quality_level("High"));
  EXPECT_FALSE(find_quality_level(""));
  EXPECT_FALSE(find_quality_level("high "));
  try {
    parse_quality_level("ultra");
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(
        std::string(e.what()).find("level must be lossless, high, medium or low, not 'ultra'"),
        std::string::npos)
        << e.what();
  }
  EXPECT_THROW(quality_level_row(static_cast<QualityLevel>(9)), Error);
  EXPECT_STREQ(quality_level_name(static_cast<QualityLevel>(9)), "unknown");
  EXPECT_EQ(default_chunk_tokens(true), 1024u);
  EXPECT_EQ(default_chunk_tokens(false), 256u);
  // Lossless chunks of a wide model stay within 32 MiB of fp16 (halved from 1024, at least 64);
  // quantized ones do not depend on the width.
  const size_t kib = 1024;
  const std::pair<size_t, size_t> cases[] = {{0, 1024},           {640, 1024},     {32 * kib, 1024},
                                             {32 * kib + 2, 512}, {64 * kib, 512}, {128 * kib, 256},
                                             {320 * kib, 64},     {4096 * kib, 64}};
  for (const auto& [token_bytes, tokens] : cases) {
    EXPECT_EQ(default_chunk_tokens(true, token_bytes), tokens) << token_bytes;
    EXPECT_EQ(default_chunk_tokens(false, token_bytes), 256u) << token_bytes;
  }
}

// The angles kept between calls are rope_angles' for the positions asked, whatever came
// before on the thread: runs that extend, repeat, fall inside or outside what is kept, other
// head sizes, bases, pairings and directions, and runs too long to keep.
TEST(Rope, KeptAnglesAreTheAnglesOfThePositionsAsked) {
  std::mt19937 rng(13);
  RopeParams ropes[3];
  ropes[1].freq_base = 500000.0f;
  ropes[2].neox = true;
  ropes[2].n_rot = 32;
  int64_t last_first = 0, last_rows = 0;
  for (int call = 0; call < 400; ++call) {
    const size_t dim = (rng() % 4 == 0) ? 64 : 128;
    const RopeParams& rope = ropes[rng() % 3];
    const bool inverse = rng() % 4 == 0;
    // A run anywhere, the run after the last one (blocks of a layer), or one inside the last.
    const int kind = static_cast<int>(rng() % 3);
    size_t rows = call % 50 == 49 ? 9000 : 1 + rng() % 300;
    int64_t first = kind == 0 ? static_cast<int64_t>(rng() % 2000) : last_first + last_rows;
    if (kind == 2 && last_rows >= 3) {
      first = last_first + static_cast<int64_t>(last_rows / 3);
      rows = static_cast<size_t>(last_rows / 3);
    }
    last_first = first;
    last_rows = static_cast<int64_t>(rows);
    size_t row = 99;
    const RopeAngles& got = detail::kept_rope_angles(first, rows, dim, rope, inverse, row);
    std::vector<int32_t> pos(rows);
    for (size_t t = 0; t < rows; ++t)
      pos[t] = static_cast<int32_t>(first + static_cast<int64_t>(t));
    const RopeAngles want = rope_angles(pos, dim, rope, inverse);
    ASSERT_EQ(got.n_pairs, want.n_pairs) << call;
    ASSERT_GE(got.cos.size(), (row + rows) * got.n_pairs) << call;
    for (size_t i = 0; i < want.cos.size(); ++i) {
      ASSERT_EQ(got.cos[row * got.n_pairs + i], want.cos[i]) << call << " " << i;
      ASSERT_EQ(got.sin[row * got.n_pairs + i], want.sin[i]) << call << " " << i;
    }
  }
}

}  // namespace
}  // namespace cachegen
