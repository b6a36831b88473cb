// Test inputs for the codec: synthetic KV-like blocks and hand-built code streams.
#pragma once

#include <bit>
#include <cstdint>
#include <random>

#include <gtest/gtest.h>
#include <vector>

#include "cachegen/codec.h"
#include "cachegen/quant.h"
#include "cachegen/runtime.h"
#include "codec/stream_format.h"

namespace cachegen::test {

// Every SIMD path this CPU can run, scalar first.
inline std::vector<SimdPath> supported_simd_paths() {
  std::vector<SimdPath> out = {SimdPath::scalar};
  if (static_cast<int>(best_supported_simd_path()) >= 1) out.push_back(SimdPath::avx2);
  if (best_supported_simd_path() == SimdPath::avx512) out.push_back(SimdPath::avx512);
  return out;
}

// Correlated (random walk per channel, step `step`) fp32 values [n_rows, dim].
inline std::vector<float> random_walk(size_t n_rows, size_t dim, float step, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n_rows * dim);
  std::vector<float> level(dim);
  for (size_t c = 0; c < dim; ++c) level[c] = normal(rng);
  for (size_t t = 0; t < n_rows; ++t)
    for (size_t c = 0; c < dim; ++c) x[t * dim + c] = level[c] += step * normal(rng);
  return x;
}

inline std::vector<float> iid_normal(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

// A valid CodeStream with the given codes for real rows (padding copies the last row) and
// parameters scale = 1 + channel/8, zero = -group.
inline CodeStream make_stream(const std::vector<uint8_t>& real_codes, size_t n_rows, size_t dim,
                              int bits, size_t group_size) {
  CodeStream s;
  s.n_rows = n_rows;
  s.dim = dim;
  s.bits = bits;
  s.group_size = group_size;
  const size_t n_groups = s.n_groups();
  s.codes.resize(n_groups * group_size * dim);
  for (size_t t = 0; t < n_groups * group_size; ++t)
    for (size_t c = 0; c < dim; ++c)
      s.codes[t * dim + c] = real_codes[(t < n_rows ? t : n_rows - 1) * dim + c];
  s.scale.resize(n_groups * dim);
  s.zero.resize(n_groups * dim);
  for (size_t g = 0; g < n_groups; ++g)
    for (size_t c = 0; c < dim; ++c) {
      s.scale[g * dim + c] = 1.0f + static_cast<float>(c) / 8.0f;
      s.zero[g * dim + c] = -static_cast<float>(g);
    }
  return s;
}

// A batch's layout byte, read by the library's header parser (bad_optional_access where the
// header does not parse).
inline uint8_t batch_layout(const std::vector<uint8_t>& bytes) {
  return detail::batch_layout(bytes).value();
}

// A batch of independent records (layout 0) written by hand: each stream's record as encode()
// coded it (magic and version dropped), as FORMAT.md frames a batch.
inline std::vector<uint8_t> independent_batch(const std::vector<std::vector<uint8_t>>& streams) {
  std::vector<uint8_t> b = {'C', 'G', 'C', 'B', 1, static_cast<uint8_t>(streams.size()), 0};
  for (const auto& s : streams) {
    for (size_t v = s.size() - 5;; v >>= 7) {  // LEB128 length
      b.push_back(static_cast<uint8_t>((v & 0x7f) | (v >= 0x80 ? 0x80 : 0)));
      if (v < 0x80) break;
    }
  }
  for (const auto& s : streams) b.insert(b.end(), s.begin() + 5, s.end());
  return b;
}

inline void expect_same_stream(const CodeStream& a, const CodeStream& b) {
  EXPECT_EQ(a.n_rows, b.n_rows);
  EXPECT_EQ(a.dim, b.dim);
  EXPECT_EQ(a.bits, b.bits);
  EXPECT_EQ(a.group_size, b.group_size);
  EXPECT_EQ(a.codes, b.codes);
  ASSERT_EQ(a.scale.size(), b.scale.size());
  for (size_t i = 0; i < a.scale.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(a.scale[i]), std::bit_cast<uint32_t>(b.scale[i])) << i;
    EXPECT_EQ(std::bit_cast<uint32_t>(a.zero[i]), std::bit_cast<uint32_t>(b.zero[i])) << i;
  }
}

}  // namespace cachegen::test
