// The token-delta transform below the stream level: boundary_predictions is the clamped
// round-half-even re-quantization of its definition, also for parameters at the edges (zero or
// non-finite quotients, values past the top code); symbols_to_codes inverts
// compute_delta_symbols exactly on every SIMD path, which all compute the same deltas (the
// AVX-512 one predicts from registers: packed-row widths 8/16/32, 64-channel columns with
// partial vectors, groups cut short by the last row, raw and delta channels mixed, edge
// parameters at a group boundary).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cachegen/runtime.h"
#include "codec/token_delta_transform.h"
#include "codec_test_inputs.h"

namespace cachegen::detail {
namespace {

// The definition (token_delta_transform.h), one channel at a time, with nearbyint.
uint8_t reference_prediction(uint8_t prev_code, float prev_scale, float prev_zero, float scale,
                             float zero, int bits) {
  const float value = static_cast<float>(prev_code) * prev_scale + prev_zero;
  const float q = (value - zero) / scale;
  const float top = static_cast<float>((1 << bits) - 1);
  if (!(q > 0.0f)) return 0;
  if (q >= top) return static_cast<uint8_t>(top);
  return static_cast<uint8_t>(std::nearbyint(q));
}

TEST(TokenDelta, BoundaryPredictionsFollowTheDefinition) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float odd[] = {0.0f, -0.0f, inf, -inf, nan, 1e-30f, 1e30f, 0.5f, 0.25f};
  for (int bits = 1; bits <= 8; ++bits) {
    const size_t dim = 200;
    std::vector<uint8_t> prev(dim), got(dim);
    std::vector<float> ps(dim), pz(dim), s(dim), z(dim);
    for (size_t c = 0; c < dim; ++c) {
      prev[c] = static_cast<uint8_t>(rng() & ((1u << bits) - 1));
      ps[c] = u(rng), pz[c] = u(rng), s[c] = u(rng) / 4, z[c] = u(rng);
      // Exact halves (round to even), then odd parameters in a few channels.
      if (c % 7 == 0) ps[c] = 0.5f, pz[c] = 0.0f, s[c] = 1.0f, z[c] = 0.0f;
      if (c % 11 == 0) s[c] = odd[c % 9];
      if (c % 13 == 0) pz[c] = odd[(c / 13) % 9];
    }
    boundary_predictions(prev.data(), ps.data(), pz.data(), s.data(), z.data(), bits, dim,
                         got.data());
    for (size_t c = 0; c < dim; ++c) {
      ASSERT_EQ(got[c], reference_prediction(prev[c], ps[c], pz[c], s[c], z[c], bits))
          << "bits " << bits << " channel " << c;
    }
  }
}

TEST(TokenDelta, SymbolsToCodesInvertsOnEveryPath) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(0.01f, 1.0f);
  for (const size_t dim : {1u, 3u, 8u, 16u, 24u, 32u, 33u, 64u, 100u, 128u, 192u, 300u}) {
    for (const size_t n_rows : {1u, 5u, 31u, 64u, 77u}) {
      for (const int bits : {1, 3, 8}) {
        const size_t group_size = 32, n_groups = (n_rows + group_size - 1) / group_size;
        std::vector<uint8_t> codes(n_rows * dim), is_delta(dim), symbols(n_rows * dim);
        for (uint8_t& c : codes) c = static_cast<uint8_t>(rng() & ((1u << bits) - 1));
        for (uint8_t& d : is_delta) d = static_cast<uint8_t>(rng() % 3 != 0);
        std::vector<float> scale(n_groups * dim), zero(n_groups * dim);
        for (size_t i = 0; i < scale.size(); ++i) scale[i] = u(rng), zero[i] = u(rng) - 0.5f;
        // Parameters at the edges in some channels of the second group: quotients of zero,
        // infinite or NaN (the paths clamp them alike), predictions past the top code.
        const float odd[] = {0.0f, std::numeric_limits<float>::infinity(),
                             std::numeric_limits<float>::quiet_NaN(), 1e-30f, 1e30f};
        for (size_t c = 0; n_groups > 1 && c < dim; c += 3) {
          scale[dim + c] = odd[c % 5];
          if (c % 2 == 0) zero[dim + c] = -odd[(c / 2) % 5];
        }
        set_simd_path(SimdPath::scalar);
        compute_delta_symbols(codes.data(), n_rows, dim, bits, group_size, scale, zero,
                              symbols.data());
        const std::vector<uint8_t> deltas = symbols;
        for (size_t i = 0; i < symbols.size(); ++i)
          if (!is_delta[i % dim]) symbols[i] = codes[i];  // raw channels carry their codes
        for (const SimdPath path : test::supported_simd_paths()) {
          set_simd_path(path);
          const std::string where = std::string(simd_path_name(path)) + " dim " +
                                    std::to_string(dim) + " rows " + std::to_string(n_rows) +
                                    " bits " + std::to_string(bits);
          std::vector<uint8_t> path_deltas(n_rows * dim, 0xaa);
          compute_delta_symbols(codes.data(), n_rows, dim, bits, group_size, scale, zero,
                                path_deltas.data());
          ASSERT_EQ(path_deltas, deltas) << where << " (the deltas)";
          std::vector<uint8_t> got(n_rows * dim, 0xaa);
          symbols_to_codes(symbols.data(), n_rows, dim, bits, group_size, scale, zero,
                           is_delta.data(), got.data());
          ASSERT_EQ(got, codes) << where;
          std::vector<uint8_t> in_place = symbols;
          symbols_to_codes(in_place.data(), n_rows, dim, bits, group_size, scale, zero,
                           is_delta.data(), in_place.data());
          ASSERT_EQ(in_place, codes) << where << " (in place)";
        }
      }
    }
  }
  set_simd_path(best_supported_simd_path());
}

// Heads of one shape inverted side by side (the AVX-512 kernel's fours, twos and ones: 1 to 7
// heads) give each head's own codes, in place or not, on every path.
TEST(TokenDelta, HeadsSideBySideInvertEachHead) {
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> u(0.01f, 1.0f);
  for (const size_t dim : {8u, 16u, 24u, 32u, 64u}) {
    for (const size_t n_rows : {1u, 33u, 77u}) {
      const int bits = 3;
      const size_t group_size = 32, n_groups = (n_rows + group_size - 1) / group_size;
      std::vector<uint8_t> is_delta(dim);
      for (uint8_t& d : is_delta) d = static_cast<uint8_t>(rng() % 4 != 0);
      constexpr size_t kHeads = 7;
      std::vector<uint8_t> codes[kHeads], symbols[kHeads];
      std::vector<float> scale[kHeads], zero[kHeads];
      for (size_t h = 0; h < kHeads; ++h) {
        codes[h].resize(n_rows * dim);
        for (uint8_t& c : codes[h]) c = static_cast<uint8_t>(rng() & 7);
        scale[h].resize(n_groups * dim);
        zero[h].resize(n_groups * dim);
        for (size_t i = 0; i < scale[h].size(); ++i) scale[h][i] = u(rng), zero[h][i] = u(rng);
        symbols[h].resize(n_rows * dim);
        compute_delta_symbols(codes[h].data(), n_rows, dim, bits, group_size, scale[h], zero[h],
                              symbols[h].data());
        for (size_t i = 0; i < symbols[h].size(); ++i)
          if (!is_delta[i % dim]) symbols[h][i] = codes[h][i];
      }
      for (const SimdPath path : test::supported_simd_paths()) {
        set_simd_path(path);
        for (size_t n_heads = 1; n_heads <= kHeads; ++n_heads) {
          const std::string where = std::string(simd_path_name(path)) + " dim " +
                                    std::to_string(dim) + " rows " + std::to_string(n_rows) +
                                    " heads " + std::to_string(n_heads);
          // Even heads into a separate buffer, odd ones in place.
          std::vector<std::vector<uint8_t>> out(n_heads);
          std::vector<DeltaHead> heads;
          for (size_t h = 0; h < n_heads; ++h) {
            out[h] = h % 2 ? symbols[h] : std::vector<uint8_t>(n_rows * dim, 0xaa);
            heads.push_back(DeltaHead{h % 2 ? out[h].data() : symbols[h].data(), scale[h], zero[h],
                                      out[h].data()});
          }
          symbols_to_codes_heads(heads, n_rows, dim, bits, group_size, is_delta.data());
          for (size_t h = 0; h < n_heads; ++h)
            ASSERT_EQ(out[h], codes[h]) << where << " head " << h;
        }
      }
    }
  }
  set_simd_path(best_supported_simd_path());
}

}  // namespace
}  // namespace cachegen::detail
