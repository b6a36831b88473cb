// Every SIMD path gives bit-identical codes, parameters and fp16 output (the scalar path
// is the reference twin).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cachegen/quant.h"
#include "cachegen/runtime.h"
#include "cachegen/transform.h"
#include "quant/kernels.h"
#include "quant/test_inputs.h"

namespace cachegen {
namespace {

// The kernel tables this CPU runs.
std::vector<const detail::QuantKernels*> supported_tables() {
  std::vector<const detail::QuantKernels*> tables = {&detail::quant_kernels_scalar()};
  if (static_cast<int>(best_supported_simd_path()) >= 1)
    tables.push_back(&detail::quant_kernels_avx2());
  if (best_supported_simd_path() == SimdPath::avx512)
    tables.push_back(&detail::quant_kernels_avx512());
  return tables;
}

TEST(SimdPaths, AllPathsBitIdentical) {
  const std::vector<SimdPath> paths = {SimdPath::scalar, SimdPath::avx2, SimdPath::avx512};
  std::printf("best supported path: %s\n", simd_path_name(best_supported_simd_path()));
  for (size_t dim : {1, 7, 8, 16, 24, 128}) {
    for (int bits = 1; bits <= 8; ++bits) {
      const size_t n = 97;
      std::vector<float> x =
          test::random_walk(n, dim, 0.3f, static_cast<uint32_t>(dim * 10 + bits));
      x[3] = 1e-40f;  // a subnormal input
      std::vector<Half> xh(x.size());
      for (size_t i = 0; i < x.size(); ++i) xh[i] = float_to_half(x[i] * 1000.0f);
      set_simd_path(SimdPath::scalar);
      const CodeStream ref = quantize_to_codes(x, n, dim, bits, 32);
      const CodeStream ref_h = quantize_to_codes(xh, n, dim, bits, 32);
      const std::vector<Half> ref_y = dequant_codes(ref), ref_yh = dequant_codes(ref_h);
      for (SimdPath p : paths) {
        set_simd_path(p);
        const CodeStream s = quantize_to_codes(x, n, dim, bits, 32);
        const CodeStream sh = quantize_to_codes(xh, n, dim, bits, 32);
        ASSERT_EQ(s.codes, ref.codes) << simd_path_name(simd_path());
        ASSERT_EQ(0, std::memcmp(s.scale.data(), ref.scale.data(), s.scale.size() * 4));
        ASSERT_EQ(0, std::memcmp(s.zero.data(), ref.zero.data(), s.zero.size() * 4));
        ASSERT_EQ(sh.codes, ref_h.codes) << simd_path_name(simd_path());
        ASSERT_EQ(0, std::memcmp(dequant_codes(s).data(), ref_y.data(), ref_y.size() * 2));
        ASSERT_EQ(0, std::memcmp(dequant_codes(sh).data(), ref_yh.data(), ref_yh.size() * 2));
      }
    }
  }
  set_simd_path(best_supported_simd_path());
}

TEST(SimdPaths, F16cConversionMatchesSoftwareOnAllHalfPatterns) {
  // Every fp16 bit pattern widened by each path, then quantized against fixed parameters,
  // must agree; and float_to_half(half_to_float(h)) is the identity for non-NaN h.
  for (uint32_t b = 0; b < 65536; ++b) {
    const Half h{static_cast<uint16_t>(b)};
    const float f = half_to_float(h);
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_half(f).bits, h.bits) << b;
  }
}

TEST(SimdPaths, FloatToHalfKernelsMatchFloatToHalf) {
  // Every path's f32_to_f16 is float_to_half: ties and neighbours of every fp16 value, the
  // overflow and underflow edges, infinities and NaNs of both signs and any payload.
  std::vector<float> in;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = half_to_float(Half{static_cast<uint16_t>(b)});
    if (std::isnan(f)) continue;
    for (float d : {-1.0f, 0.0f, 1.0f}) in.push_back(std::nextafter(f, f + d * INFINITY));
    const float next = half_to_float(Half{static_cast<uint16_t>(b + 1)});
    if (std::isfinite(next) && (b & 0x7fff) < 0x7bff) in.push_back(f + (next - f) / 2);  // a tie
  }
  for (float f : {65504.0f, 65519.0f, 65520.0f, 65536.0f, 1e30f, INFINITY, 1e-30f, 5.96e-8f,
                  2.98e-8f, 2.99e-8f}) {
    in.push_back(f);
    in.push_back(-f);
  }
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffc12345u, 0x7fbfffffu}) {
    float f;
    std::memcpy(&f, &nan, 4);
    in.push_back(f);
  }
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 100000; ++i) {
    const uint32_t u = bits(rng);
    float f;
    std::memcpy(&f, &u, 4);
    in.push_back(f);
  }
  std::vector<uint16_t> want(in.size());
  for (size_t i = 0; i < in.size(); ++i) want[i] = float_to_half(in[i]).bits;
  const std::vector<const detail::QuantKernels*> tables = supported_tables();
  for (const detail::QuantKernels* k : tables) {
    std::vector<uint16_t> got(in.size());
    k->f32_to_f16(in.data(), got.data(), in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      uint32_t u;
      std::memcpy(&u, &in[i], 4);
      ASSERT_EQ(got[i], want[i]) << "input bits " << std::hex << u;
    }
  }
}

// rope_f16 on every path: the fp32 rotation of the widened keys (cachegen::rope_rows) rounded
// back by f32_to_f16_sat, bit for bit, for both pair layouts, partial rotation (the values past
// the rotated ones only rounded back), pair counts off the vectors' widths, keys near and past
// the fp16 range, infinities and NaNs.
TEST(SimdPaths, RopeF16IsTheFp32RotationRoundedBack) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> half_bits(0, 0xffff);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  struct Case {
    size_t heads, head_dim, n_pairs;
  };
  for (const Case c : {Case{4, 8, 4}, Case{3, 128, 64}, Case{1, 160, 70}, Case{2, 46, 23},
                       Case{2, 64, 16}, Case{5, 4, 2}}) {
    for (const bool neox : {false, true}) {
      const size_t rows = 37, n = rows * c.heads * c.head_dim;
      std::vector<uint16_t> keys(n);
      for (size_t i = 0; i < n; ++i) {
        keys[i] = i % 7 == 0 ? static_cast<uint16_t>(half_bits(rng))  // any pattern
                             : float_to_half(normal(rng) * (i % 5 == 0 ? 20000.0f : 1.0f)).bits;
      }
      keys[1] = 0x7c00;  // +Inf
      keys[2] = 0xfe00;  // NaN
      std::vector<int32_t> positions(rows);
      for (size_t r = 0; r < rows; ++r) positions[r] = static_cast<int32_t>(3 * r + 1000);
      RopeParams params;
      params.n_rot = static_cast<int>(2 * c.n_pairs);
      params.neox = neox;
      const RopeAngles angles = rope_angles(positions, c.head_dim, params, false);
      ASSERT_EQ(angles.n_pairs, c.n_pairs);
      std::vector<float> x(n);
      const detail::QuantKernels& scalar = detail::quant_kernels_scalar();
      scalar.f16_to_f32(keys.data(), x.data(), n);
      rope_rows(x, rows, c.heads, c.head_dim, angles, 0, neox);
      std::vector<uint16_t> want(n);
      scalar.f32_to_f16_sat(x.data(), want.data(), n);
      for (const detail::QuantKernels* k : supported_tables()) {
        std::vector<uint16_t> got = keys;
        k->rope_f16(got.data(), rows, c.heads, c.head_dim, angles.cos.data(), angles.sin.data(),
                    c.n_pairs, neox);
        ASSERT_EQ(got, want) << "head_dim " << c.head_dim << " pairs " << c.n_pairs << " neox "
                             << neox;
      }
    }
  }
}

// quantize_rows (the division) and quantize_rows_inv (the multiply, fp32 and fp16 inputs) on
// every path against the scalar ones, byte for byte, with parameters and values the codec never
// makes as well (NaN, infinities, zero and negative scales, values far outside their group's
// range), for row widths that take the 32- and 8-wide vector loops, rows of 8 one vector each,
// their tails and the short-row blocks; and reciprocals bit for bit.
TEST(SimdPaths, QuantizeRowsGivesTheScalarCodes) {
  const std::vector<const detail::QuantKernels*> tables = supported_tables();
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  const float special[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, 3e38f, -3e38f};
  auto pick = [&](float usual) {
    return rng() % 8 == 0 ? special[rng() % std::size(special)] : usual;
  };
  for (const float max_code : {1.0f, 3.0f, 7.0f, 15.0f, 255.0f}) {
    for (const size_t dim : {1u, 3u, 8u, 24u, 31u, 32u, 33u, 40u, 64u, 100u}) {
      for (const size_t rows : {1u, 3u, 17u, 32u}) {
        std::vector<float> x(rows * dim), scale(dim), zero(dim), inv(dim);
        for (float& v : x) v = pick(u(rng) * 3.0f);
        for (size_t c = 0; c < dim; ++c) {
          scale[c] = pick(std::abs(u(rng)) / max_code);
          zero[c] = pick(u(rng));
        }
        std::vector<float> want_inv(dim);
        for (size_t c = 0; c < dim; ++c) want_inv[c] = 1.0f / scale[c];
        std::vector<uint8_t> want(x.size()), want_by_inv(x.size());
        tables[0]->quantize_rows(x.data(), rows, dim, scale.data(), zero.data(), max_code,
                                 want.data());
        tables[0]->quantize_rows_inv(x.data(), rows, dim, want_inv.data(), zero.data(), max_code,
                                     want_by_inv.data());
        // The fp16 kernel against the fp32 one on the values' fp16 roundings, widened.
        std::vector<uint16_t> xh(x.size());
        std::vector<float> xw(x.size());
        for (size_t i = 0; i < x.size(); ++i) {
          xh[i] = float_to_half(x[i]).bits;
          xw[i] = half_to_float(Half{xh[i]});
        }
        std::vector<uint8_t> want_h(x.size());
        tables[0]->quantize_rows_inv(xw.data(), rows, dim, want_inv.data(), zero.data(), max_code,
                                     want_h.data());
        for (const detail::QuantKernels* k : tables) {
          std::fill(inv.begin(), inv.end(), 7.0f);
          k->reciprocals(scale.data(), inv.data(), dim);
          for (size_t c = 0; c < dim; ++c) {
            ASSERT_EQ(std::bit_cast<uint32_t>(inv[c]), std::bit_cast<uint32_t>(want_inv[c]))
                << "reciprocal of " << scale[c] << " dim " << dim;
          }
          std::vector<uint8_t> got(x.size(), 0xAA);
          k->quantize_rows(x.data(), rows, dim, scale.data(), zero.data(), max_code, got.data());
          ASSERT_EQ(got, want) << "max_code " << max_code << " dim " << dim << " rows " << rows;
          std::fill(got.begin(), got.end(), 0xAA);
          k->quantize_rows_inv(x.data(), rows, dim, inv.data(), zero.data(), max_code, got.data());
          ASSERT_EQ(got, want_by_inv)
              << "inverse max_code " << max_code << " dim " << dim << " rows " << rows;
          std::fill(got.begin(), got.end(), 0xAA);
          k->quantize_rows_inv_f16(xh.data(), rows, dim, dim, inv.data(), zero.data(), max_code,
                                   got.data());
          ASSERT_EQ(got, want_h) << "fp16 max_code " << max_code << " dim " << dim << " rows "
                                 << rows;
          // The same rows apart (one head's inside token-major rows of three), NaN between.
          for (const size_t stride : {dim + 8, 3 * dim}) {
            std::vector<uint16_t> apart((rows - 1) * stride + dim, 0x7e00);
            for (size_t r = 0; r < rows; ++r)
              std::copy_n(xh.data() + r * dim, dim, apart.data() + r * stride);
            std::fill(got.begin(), got.end(), 0xAA);
            k->quantize_rows_inv_f16(apart.data(), rows, dim, stride, inv.data(), zero.data(),
                                     max_code, got.data());
            ASSERT_EQ(got, want_h) << "fp16 stride " << stride << " max_code " << max_code
                                   << " dim " << dim << " rows " << rows;
          }
        }
      }
    }
  }
}

// The codec's multiply against the reference's division, on the values and parameters the
// codec makes (fp16 values, scales with 8-bit mantissas, zeros on a grid) and on every exact
// half-step: the codes differ only where the quotient, in exact arithmetic, lies within
// max_code * 2^-22 of a half-integer, by one, and every code is within half a step of its
// value, to that margin.
TEST(SimdPaths, QuantizeByInverseDiffersOnlyAtNearTies) {
  const detail::QuantKernels& k = detail::quant_kernels();
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  size_t differ = 0, total = 0;
  for (const float max_code : {3.0f, 7.0f, 15.0f, 255.0f}) {
    for (int trial = 0; trial < 200; ++trial) {
      const size_t dim = 64, rows = 32;
      std::vector<float> scale(dim), zero(dim), inv(dim);
      std::vector<uint16_t> xh(rows * dim);
      std::vector<float> xw(rows * dim);
      for (size_t c = 0; c < dim; ++c) {
        // An 8-bit mantissa (the codec's compact grid) and a zero on a 1/64 grid.
        int e = 0;
        const float m = std::frexp(std::abs(u(rng)) / max_code + 1e-3f, &e);
        scale[c] = std::ldexp(std::round(std::ldexp(m, 8)), e - 8);
        zero[c] = std::round(u(rng) * 64.0f) / 64.0f;
      }
      for (size_t r = 0; r < rows; ++r) {
        for (size_t c = 0; c < dim; ++c) {
          // Every fourth value an exact tie (zero + (j + 1/2) * scale, where fp16 holds it).
          float v = zero[c] + u(rng) * scale[c] * max_code / 4.0f + scale[c] * max_code / 2.0f;
          if (r % 4 == 0) v = zero[c] + (static_cast<float>(rng() % 255) + 0.5f) * scale[c];
          xh[r * dim + c] = float_to_half(v).bits;
          xw[r * dim + c] = half_to_float(Half{xh[r * dim + c]});
        }
      }
      k.reciprocals(scale.data(), inv.data(), dim);
      std::vector<uint8_t> by_div(rows * dim), by_inv(rows * dim);
      k.quantize_rows(xw.data(), rows, dim, scale.data(), zero.data(), max_code, by_div.data());
      k.quantize_rows_inv_f16(xh.data(), rows, dim, dim, inv.data(), zero.data(), max_code,
                              by_inv.data());
      const double margin = static_cast<double>(max_code) * std::ldexp(1.0, -22);
      for (size_t i = 0; i < rows * dim; ++i) {
        const size_t c = i % dim;
        const double q = (static_cast<double>(xw[i]) - zero[c]) / scale[c];
        const double err = std::abs(q - by_inv[i]);
        ++total;
        if (q < -0.5 || q > max_code + 0.5) continue;  // clamped: both give the bound
        ASSERT_LE(err, 0.5 + margin) << "value " << xw[i] << " quotient " << q;
        if (by_inv[i] != by_div[i]) {
          ++differ;
          ASSERT_EQ(std::abs(int{by_inv[i]} - int{by_div[i]}), 1) << "quotient " << q;
          ASSERT_LE(std::abs(std::abs(q - std::floor(q)) - 0.5), margin) << "quotient " << q;
        }
      }
    }
  }
  // Ties are common on such grids; most codes agree.
  EXPECT_LT(differ * 20, total) << differ << " of " << total;
}

// dequant_rows on every path against the scalar one, bit for bit, into contiguous and strided
// rows, for row widths that take each vector loop (rows of 8 two a vector, or four by a table
// where every code is below 8; 16- and 8-wide columns, tails): with parameters whose every
// value lies inside +-65504 (the vector loops then skip the clamp), and with one channel's
// where the clamp matters — a code's value past 65504 from a large scale, code 0's past it from
// the zero point alone (a negative scale: code 255's is inside), NaN and infinite parameters —
// or lies on its bound.
TEST(SimdPaths, DequantRowsGivesTheScalarHalves) {
  const std::vector<const detail::QuantKernels*> tables = supported_tables();
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  struct Params {
    float scale, zero;
  };
  const Params special[] = {{300.0f, 0.0f},    {-300.0f, 70000.0f}, {1.0f, 65504.0f},
                            {NAN, 1.0f},       {1.0f, NAN},         {INFINITY, 0.0f},
                            {0.0f, -INFINITY}, {-0.0f, -0.0f},      {1e-3f, -65504.0f}};
  // special[which - 1] in one channel (which > 0), or ordinary parameters only (which == 0).
  for (size_t which = 0; which <= std::size(special); ++which) {
    for (const size_t dim : {1u, 3u, 8u, 16u, 24u, 64u, 100u, 128u}) {
      for (const size_t rows : {1u, 2u, 3u, 4u, 5u, 7u, 32u}) {
        for (const size_t stride : {dim, dim + 8}) {
          // Codes below 8 (3 bits), below 16, or of any byte with half of them below 8.
          const uint32_t top = rng() % 3 == 0 ? 8 : rng() % 2 == 0 ? 16 : 0;
          std::vector<uint8_t> codes(rows * dim);
          for (uint8_t& c : codes)
            c = static_cast<uint8_t>(rng() % (top ? top : rng() % 2 ? 8 : 256));
          std::vector<float> scale(dim), zero(dim);
          for (size_t c = 0; c < dim; ++c) {
            scale[c] = std::abs(u(rng)) / 7.0f;
            zero[c] = u(rng);
          }
          if (which > 0) {
            const size_t c = rng() % dim;
            scale[c] = special[which - 1].scale;
            zero[c] = special[which - 1].zero;
          }
          std::vector<uint16_t> want(rows * stride, 0x5555);
          tables[0]->dequant_rows(codes.data(), rows, dim, scale.data(), zero.data(), want.data(),
                                  stride);
          for (const detail::QuantKernels* k : tables) {
            std::vector<uint16_t> got(rows * stride, 0x5555);
            k->dequant_rows(codes.data(), rows, dim, scale.data(), zero.data(), got.data(), stride);
            ASSERT_EQ(got, want) << "special " << which << " dim " << dim << " rows " << rows
                                 << " stride " << stride;
          }
        }
      }
    }
  }
}

// channel_histograms against a count of every value, on every path, for shapes that take each
// of its branches (small alphabets in byte blocks of whole rows or of 64-column pieces of wider
// rows, one channel in eight tables, two or three channels in four, wide tables in L1-sized
// channel blocks, the row-by-row tail), with skewed symbols (runs of one symbol stress the
// tables' interleaving) and counts added to nonzero ones.
TEST(SimdPaths, ChannelHistogramsCountEveryValue) {
  const std::vector<const detail::QuantKernels*> tables = supported_tables();
  std::mt19937 rng(7);
  for (const size_t n_syms : {2u, 4u, 8u, 16u, 32u, 64u, 256u}) {
    for (const size_t dim : {1u, 2u, 3u, 4u, 8u, 16u, 17u, 32u, 64u, 128u, 200u, 256u}) {
      // 4,100 rows: several runs of 255 blocks of whole rows, and counts of 255 in a run (all
      // but a few values 0 there).
      for (const size_t rows : {0u, 5u, 63u, 64u, 71u, 300u, 1100u, 4100u}) {
        std::vector<uint8_t> sym(rows * dim);
        std::geometric_distribution<int> skew(0.3);
        for (size_t i = 0; i < sym.size(); ++i) {
          const size_t v = rows == 4100 && i % 1000 != 7 ? 0 : skew(rng);
          sym[i] = static_cast<uint8_t>(std::min(v, n_syms - 1));
        }
        std::vector<uint32_t> want(dim * n_syms);
        for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<uint32_t>(i % 5);
        const std::vector<uint32_t> start = want;
        for (size_t r = 0; r < rows; ++r) {
          for (size_t c = 0; c < dim; ++c) ++want[c * n_syms + sym[r * dim + c]];
        }
        for (const detail::QuantKernels* k : tables) {
          std::vector<uint32_t> got = start;
          k->channel_histograms(sym.data(), rows, dim, n_syms, got.data());
          ASSERT_EQ(got, want) << "n_syms " << n_syms << " dim " << dim << " rows " << rows;
        }
      }
    }
  }
}

// max_byte on every path: lengths around the vector widths, the largest byte planted at the
// first, a middle and the last position (and 0 for no bytes).
TEST(SimdPaths, MaxByteFindsTheLargest) {
  const std::vector<const detail::QuantKernels*> tables = supported_tables();
  std::mt19937 rng(11);
  for (const size_t n : {0u, 1u, 15u, 16u, 33u, 63u, 64u, 65u, 127u, 1000u}) {
    std::vector<uint8_t> bytes(n);
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng() % 7);
    for (const size_t at : {size_t{0}, n / 2, n == 0 ? 0 : n - 1}) {
      std::vector<uint8_t> p = bytes;
      if (n > 0) p[at] = static_cast<uint8_t>(200 + at % 50);
      const uint8_t want = n == 0 ? 0 : *std::max_element(p.begin(), p.end());
      for (const detail::QuantKernels* k : tables)
        EXPECT_EQ(k->max_byte(p.data(), n), want) << "n " << n << " at " << at;
    }
  }
}

// max_f16_magnitude on every path: lengths around the vector widths, with the sign bit set on
// every value (it is not part of the magnitude) and the largest (0x7c00: +-Inf, or a NaN)
// planted at the first, a middle and the last position.
TEST(SimdPaths, MaxF16MagnitudeIgnoresTheSign) {
  const std::vector<const detail::QuantKernels*> tables = supported_tables();
  std::mt19937 rng(12);
  for (const size_t n : {0u, 1u, 7u, 8u, 31u, 32u, 33u, 100u, 1000u}) {
    std::vector<uint16_t> x(n);
    for (uint16_t& v : x) v = static_cast<uint16_t>(0x8000u | (rng() % 0x7bffu));
    for (const uint16_t top : {uint16_t{0x7c00}, uint16_t{0x7e01}, uint16_t{0x7bff}}) {
      for (const size_t at : {size_t{0}, n / 2, n == 0 ? 0 : n - 1}) {
        std::vector<uint16_t> p = x;
        if (n > 0) p[at] = static_cast<uint16_t>(0x8000u | top);
        uint16_t want = 0;
        for (const uint16_t v : p) want = std::max(want, static_cast<uint16_t>(v & 0x7fffu));
        for (const detail::QuantKernels* k : tables)
          EXPECT_EQ(k->max_f16_magnitude(p.data(), n), want) << "n " << n << " at " << at;
      }
    }
  }
}

// present_symbols on every path: lengths around the vector width, densities from empty to full
// (counts up to 2^32 - 1, which no narrowing may drop), the present symbols ascending with their
// counts, and nothing written past the n entries of room.
TEST(SimdPaths, PresentSymbolsListEveryNonZeroCountInOrder) {
  const std::vector<const detail::QuantKernels*> tables = supported_tables();
  std::mt19937 rng(21);
  for (const size_t n : {0u, 1u, 8u, 15u, 16u, 17u, 32u, 64u, 255u, 256u}) {
    for (const uint32_t one_in : {1u, 2u, 5u, 1000u}) {
      std::vector<uint32_t> counts(n);
      for (uint32_t& c : counts) {
        c = rng() % one_in != 0 ? 0u : (rng() % 4 == 0 ? 0xffffffffu - (rng() % 3) : 1 + rng() % 9);
      }
      std::vector<uint16_t> want_sym;
      std::vector<uint32_t> want_count;
      for (size_t s = 0; s < n; ++s) {
        if (counts[s] != 0) {
          want_sym.push_back(static_cast<uint16_t>(s));
          want_count.push_back(counts[s]);
        }
      }
      for (const detail::QuantKernels* k : tables) {
        std::vector<uint16_t> sym(n + 1, 0xdead);
        std::vector<uint32_t> count(n + 1, 0xdeadbeef);
        const size_t m = k->present_symbols(counts.data(), n, sym.data(), count.data());
        ASSERT_EQ(m, want_sym.size()) << "n " << n << " one in " << one_in;
        EXPECT_TRUE(std::equal(want_sym.begin(), want_sym.end(), sym.begin())) << "n " << n;
        EXPECT_TRUE(std::equal(want_count.begin(), want_count.end(), count.begin())) << "n " << n;
        EXPECT_EQ(sym[n], 0xdead);
        EXPECT_EQ(count[n], 0xdeadbeefu);
      }
    }
  }
}

// The two min/max kernels on every path (dims taking each width of columns: 16, 8, 4, 1; rows
// of 8 two a vector): the same ranges, the first (minmax_rows_first) or the last (minmax_rows)
// of equal -0 and +0, as minima among positive values and as maxima among negative ones, and
// false for any NaN or infinity. The fp16 kernel gives minmax_rows_first's results on the
// values' widenings: also where no zero is an extreme (its AVX-512 loops on the bits as
// ordered integers decide those) and among values of both signs.
TEST(SimdPaths, MinMaxKeepTheFirstOrTheLastOfEqualValues) {
  const std::vector<const detail::QuantKernels*> tables = supported_tables();
  std::mt19937 rng(3);
  for (const size_t dim : {1u, 7u, 8u, 12u, 16u, 24u, 33u, 64u}) {
    for (const size_t rows : {1u, 2u, 5u, 32u, 33u}) {
      for (const int sign : {0x0000, 0x8000, -1}) {  // -1: either sign
        std::vector<float> x(rows * dim);
        // Zeros of both signs among positive (or negative, or any) fp16 values.
        for (float& v : x) {
          const int bit = sign >= 0 ? sign : (rng() & 1) << 15;
          v = (rng() % 3 == 0) ? ((rng() & 1) ? -0.0f : 0.0f)
                               : half_to_float(Half{static_cast<uint16_t>(bit | (rng() % 0x7c00))});
        }
        // Somewhere; in the last row (an odd one, after rows two a vector) or the first, of
        // values without zeros (no -0/+0 tie sends rows of 8 to the one-row loop); none, of
        // values without zeros.
        for (int bad = 0; bad < 6; ++bad) {
          std::vector<float> y = x;
          if (bad >= 3) {
            for (float& v : y)
              if (v == 0.0f) v = sign == 0x8000 ? -1.0f : 1.0f;
          }
          if (bad == 1) y[rng() % y.size()] = NAN;
          if (bad == 2) y[rng() % y.size()] = -INFINITY;
          if (bad == 3) y[(rows - 1) * dim + rng() % dim] = NAN;
          if (bad == 4) y[rng() % dim] = INFINITY;
          std::vector<uint16_t> yh(y.size());
          for (size_t i = 0; i < y.size(); ++i) yh[i] = float_to_half(y[i]).bits;
          for (const detail::QuantKernels* k : tables) {
            std::vector<float> mn_h(dim), mx_h(dim), mn(dim), mx(dim);
            const bool ok_h =
                k->minmax_rows_first_f16(yh.data(), rows, dim, dim, mn_h.data(), mx_h.data());
            ASSERT_EQ(ok_h, bad == 0 || bad == 5) << "fp16 dim " << dim << " rows " << rows;
            // The same rows apart (one head's inside token-major rows of three), NaN between.
            for (const size_t stride : {dim + 8, 3 * dim}) {
              std::vector<uint16_t> apart((rows - 1) * stride + dim, 0x7e00);
              for (size_t r = 0; r < rows; ++r)
                std::copy_n(yh.data() + r * dim, dim, apart.data() + r * stride);
              std::vector<float> mn_s(dim), mx_s(dim);
              ASSERT_EQ(k->minmax_rows_first_f16(apart.data(), rows, dim, stride, mn_s.data(),
                                                 mx_s.data()),
                        ok_h)
                  << "fp16 stride " << stride << " dim " << dim << " rows " << rows;
              if (ok_h) {
                ASSERT_EQ(0, std::memcmp(mn_s.data(), mn_h.data(), dim * sizeof(float)));
                ASSERT_EQ(0, std::memcmp(mx_s.data(), mx_h.data(), dim * sizeof(float)));
              }
            }
            ASSERT_EQ(k->minmax_rows_first(y.data(), rows, dim, mn.data(), mx.data()), ok_h);
            if (ok_h) {
              ASSERT_EQ(0, std::memcmp(mn_h.data(), mn.data(), dim * sizeof(float)));
              ASSERT_EQ(0, std::memcmp(mx_h.data(), mx.data(), dim * sizeof(float)));
            }
            for (const bool first : {true, false}) {
              std::vector<float> mn(dim), mx(dim);
              const bool ok = (first ? k->minmax_rows_first : k->minmax_rows)(y.data(), rows, dim,
                                                                              mn.data(), mx.data());
              ASSERT_EQ(ok, bad == 0 || bad == 5) << "dim " << dim << " rows " << rows;
              if (!ok) continue;
              for (size_t c = 0; c < dim; ++c) {
                // The wanted values: the smallest and largest, and among equal ones the first or
                // the last row's (signs of zeros compared through their bits).
                float lo = y[c], hi = y[c];
                for (size_t r = 1; r < rows; ++r) {
                  const float v = y[r * dim + c];
                  if (v < lo || (!first && v == lo)) lo = v;
                  if (v > hi || (!first && v == hi)) hi = v;
                }
                ASSERT_EQ(std::signbit(mn[c]), std::signbit(lo)) << "first " << first;
                ASSERT_EQ(mn[c], lo);
                ASSERT_EQ(std::signbit(mx[c]), std::signbit(hi)) << "first " << first;
                ASSERT_EQ(mx[c], hi);
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace cachegen
