// Compact group parameters below the stream level: read_params_compact returns exactly what
// write_params_compact wrote on every SIMD path (the AVX-512 one reconstructs later groups 16
// channels at a time and hands parameters far from their prediction, or residuals past 2^30,
// to the portable code), and damaged bits decode or fail alike on every path, with the same
// message (the first bad parameter in coding order).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cachegen/error.h"
#include "cachegen/runtime.h"
#include "codec/params_codec.h"
#include "codec/stream_format.h"
#include "codec_test_inputs.h"

namespace cachegen::detail {
namespace {

struct Params {
  std::vector<float> scale, zero;
};

// Group minima/maxima of a few kinds: usual ranges, zeros far from the origin relative to the
// step (zero indices past 2^22, below 2^24 so that the grid holds them), steps spanning 120 binades
// (scale residuals past 2^30 with the finest grid), and constant zero channels.
Params random_params(size_t n_groups, size_t dim, int kind, const CompactGrid& g, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> mins(n_groups * dim), maxs(n_groups * dim);
  for (size_t i = 0; i < mins.size(); ++i) {
    float lo = u(rng), width = 0.05f + std::abs(u(rng));
    if (kind == 1 && i % 3 == 0)
      lo = 1600.0f / static_cast<float>(1 << g.zero_step_log2) * u(rng), width = 1e-3f;
    if (kind == 2)
      width = std::ldexp(1.0f, static_cast<int>(rng() % 120) - 60), lo = 4 * width * u(rng);
    if (kind == 3 && i % 2 == 0) lo = 0.0f, width = 0.0f;
    mins[i] = lo;
    maxs[i] = lo + width;
  }
  Params p;
  EXPECT_TRUE(round_params_compact(mins, maxs, 3, g, p.scale, p.zero));
  // What the encoder writes compactly (exact_param_precision checks it).
  EXPECT_TRUE(params_fit_compact(p.scale, p.zero, g));
  return p;
}

// The decoded parameters, or the error's message.
std::string read_back(const std::vector<uint8_t>& bytes, size_t n_groups, size_t dim,
                      const CompactGrid& g, Params& out) {
  try {
    BitReader r(bytes, 0);
    read_params_compact(r, n_groups, dim, g, out.scale, out.zero);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(ParamsCompact, ExactPrecisionIsTheSmallestSection) {
  // exact_param_precision: compact where its section (+ 16 bits) takes no more than the fp16
  // parameters would, or, where some parameter is no fp16 value, the fp32 ones; else fp16 or
  // fp32. One group of one channel (2 parameters: fp16 32 bits, fp32 64) with its compact code
  // between the two sizes, its values fp16 or not, and a stream whose compact code is smallest.
  const CompactGrid g;
  const EncodeOptions options;
  const auto stream = [](std::vector<float> scale, std::vector<float> zero, size_t dim) {
    CodeStream s;
    s.bits = 3;
    s.group_size = 4;
    s.dim = dim;
    s.n_rows = scale.size() / dim * 4;
    s.codes.assign(s.n_rows * dim, 1);
    s.scale = std::move(scale);
    s.zero = std::move(zero);
    return s;
  };
  const auto compact_bits = [&](const CodeStream& s) {
    CompactCode code;
    EXPECT_TRUE(plan_params_compact(s.scale, s.zero, s.n_groups(), s.dim, g, code));
    BitWriter w;
    write_params_compact(w, code);
    EXPECT_EQ(w.bit_count(), code.bits);
    return code.bits + 16;
  };
  struct Case {
    const char* name;
    CodeStream s;
    bool fp16_values;
    ParamPrecision want;
  };
  // 1000.0 = 1000 zero steps of 1.0 (scale 16, 2^4 steps a scale): an fp16 value; 70000.0 is
  // past fp16's largest (65504).
  std::vector<float> scales(64), zeros(64);
  for (size_t i = 0; i < 64; ++i) scales[i] = 0.5f, zeros[i] = -1.0f + 0.03125f * (i % 8);
  Case cases[] = {
      {"fp16 values, compact larger", stream({16.0f}, {1000.0f}, 1), true, ParamPrecision::fp16},
      {"no fp16 values, compact smaller than fp32", stream({16.0f}, {70000.0f}, 1), false,
       ParamPrecision::compact},
      {"compact smallest", stream(scales, zeros, 8), true, ParamPrecision::compact},
  };
  for (Case& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_TRUE(params_fit_compact(c.s.scale, c.s.zero, g));
    ASSERT_EQ(params_fit_fp16(c.s.scale, c.s.zero), c.fp16_values);
    const size_t bits = compact_bits(c.s), n = c.s.scale.size();
    if (c.want == ParamPrecision::compact) {
      ASSERT_LE(bits, (c.fp16_values ? 32 : 64) * n);
    } else {
      ASSERT_GT(bits, 32 * n);
    }
    if (!c.fp16_values) {
      ASSERT_GT(bits, 32 * n);  // fp32 is the size to beat
    }
    EXPECT_EQ(exact_param_precision(c.s, options), c.want);
    CompactSection section;
    section.bytes.assign(5, 0xab);  // left by an earlier stream
    section.bits = 40;
    EXPECT_EQ(exact_param_precision(c.s, options, &section), c.want);
    if (c.want == ParamPrecision::compact) {
      EXPECT_EQ(section.bits + 16, bits);
    } else {
      EXPECT_EQ(section.bits, 0u);
      EXPECT_TRUE(section.bytes.empty());
    }
  }
}

// The writer's register loop for pairs writes the bytes of one signed_exp_golomb call per code,
// also around codes past 56 bits (which take the member path) and across its runs of pairs; so
// do the AVX-512 pair codes put in runs.
TEST(ParamsCompact, PairWriterMatchesCodeByCode) {
  std::mt19937_64 rng(9);
  for (const size_t n : {0u, 1u, 7u, 512u, 513u, 2000u}) {
    for (const int ka : {0, 4, 30}) {
      const int kb = (ka + 7) % 31;
      std::vector<int64_t> a(n), b(n);
      for (size_t i = 0; i < n; ++i) {
        const int shift = static_cast<int>(rng() % 64);  // values up to +-2^63
        a[i] = static_cast<int64_t>(rng()) >> shift;
        b[i] = i % 97 == 0 ? INT64_MIN : static_cast<int64_t>(rng()) >> (63 - shift % 8);
      }
      BitWriter one;
      one.put(5, 3);  // start off a byte boundary
      for (size_t i = 0; i < n; ++i) {
        one.signed_exp_golomb(a[i], ka);
        one.signed_exp_golomb(b[i], kb);
      }
      const size_t want_bits = one.bit_count();
      const std::vector<uint8_t> want = one.finish();
      for (const SimdPath path : test::supported_simd_paths()) {  // each Exp-Golomb kernel
        set_simd_path(path);
        BitWriter pairs;
        pairs.put(5, 3);
        pairs.signed_exp_golomb_pairs(a.data(), b.data(), n, ka, kb);
        ASSERT_EQ(pairs.bit_count(), want_bits) << simd_path_name(path) << " " << n << " " << ka;
        ASSERT_EQ(pairs.finish(), want) << simd_path_name(path) << " " << n << " " << ka;
      }
      if (best_supported_simd_path() != SimdPath::avx512) continue;
      // The AVX-512 pair codes: a pair of codes within 56 bits and zigzag values below
      // 2^32 - 1 as one code, put in runs; the others left out (0 bits), put code by code.
      std::vector<uint64_t> code(n);
      std::vector<uint8_t> n_bits(n);
      exp_golomb_pair_codes_avx512(a.data(), b.data(), n, ka, kb, code.data(), n_bits.data());
      BitWriter bulk;
      bulk.put(5, 3);
      size_t run = 0, in_bulk = 0;
      for (size_t i = 0; i <= n; ++i) {
        if (i < n) {
          const uint64_t za = BitWriter::zigzag(a[i]), zb = BitWriter::zigzag(b[i]);
          const int bits = BitWriter::exp_golomb_bits(za, ka) + BitWriter::exp_golomb_bits(zb, kb);
          const bool fits = za < UINT32_MAX && zb < UINT32_MAX && bits <= 56;
          ASSERT_EQ(n_bits[i], fits ? bits : 0) << i;
          if (fits) {
            ++run, ++in_bulk;
            continue;
          }
        }
        bulk.put_codes(code.data() + i - run, n_bits.data() + i - run, run);
        run = 0;
        if (i == n) break;
        bulk.signed_exp_golomb(a[i], ka);
        bulk.signed_exp_golomb(b[i], kb);
      }
      ASSERT_EQ(bulk.bit_count(), want_bits) << n << " " << ka;
      ASSERT_EQ(bulk.finish(), want) << n << " " << ka;
      if (n >= 512) {
        EXPECT_GT(in_bulk, 0u);
      }
    }
  }
  set_simd_path(best_supported_simd_path());
}

// The same for a list of 16-bit values at one order (a table's frequencies), the writer's
// buffer grown from empty and from a partly filled one, and orders past its register loop.
TEST(ParamsCompact, ListWriterMatchesCodeByCode) {
  std::mt19937_64 rng(11);
  for (const size_t n : {0u, 1u, 255u, 3000u}) {
    for (const int k : {0, 3, 23, 24, 30}) {
      std::vector<uint16_t> v(n);
      for (size_t i = 0; i < n; ++i) {
        v[i] = static_cast<uint16_t>(rng() >> (48 + rng() % 16));
        if (i % 53 == 0) v[i] = 65535;
      }
      for (const size_t before : {0u, 100u}) {
        BitWriter one;
        for (size_t i = 0; i < before; ++i) one.put(i, 7);
        one.put(5, 3);  // start off a byte boundary
        for (size_t i = 0; i < n; ++i) one.exp_golomb(v[i], k);
        one.put(3, 2);
        const size_t want_bits = one.bit_count();
        const std::vector<uint8_t> want = one.finish();
        for (const SimdPath path : test::supported_simd_paths()) {  // each Exp-Golomb kernel
          set_simd_path(path);
          BitWriter list;
          for (size_t i = 0; i < before; ++i) list.put(i, 7);
          list.put(5, 3);
          list.exp_golomb_list(v.data(), n, k);
          list.put(3, 2);  // the state it leaves carries on
          ASSERT_EQ(list.bit_count(), want_bits) << simd_path_name(path) << " " << n << " " << k;
          ASSERT_EQ(list.finish(), want) << simd_path_name(path) << " " << n << " " << k;
        }
      }
    }
  }
  set_simd_path(best_supported_simd_path());
}

// Another writer's finished bits appended (a stream's compact section into its side bits):
// the same bits as written in place, from a byte boundary or off one, whole bytes or not.
TEST(ParamsCompact, FinishedBitsAppendAsWritten) {
  std::mt19937_64 rng(13);
  for (const size_t n_bits : {0u, 5u, 8u, 13u, 64u, 1001u}) {
    std::vector<int> widths;  // the section's fields, then their values
    for (size_t b = 0; b < n_bits; b += static_cast<size_t>(widths.back()))
      widths.push_back(static_cast<int>(std::min<size_t>(1 + rng() % 17, n_bits - b)));
    std::vector<uint64_t> values(widths.size());
    for (uint64_t& v : values) v = rng();
    BitWriter section;
    for (size_t i = 0; i < widths.size(); ++i) section.put(values[i], widths[i]);
    ASSERT_EQ(section.bit_count(), n_bits);
    const std::vector<uint8_t> finished = section.finish();
    for (const int before : {0, 3, 8, 11}) {
      BitWriter want, got;
      want.put(0x5a5, before);
      got.put(0x5a5, before);
      for (size_t i = 0; i < widths.size(); ++i) want.put(values[i], widths[i]);
      got.put_bytes(finished, n_bits);
      want.put(6, 3);  // the state it leaves carries on
      got.put(6, 3);
      ASSERT_EQ(got.bit_count(), want.bit_count()) << n_bits << " " << before;
      ASSERT_EQ(got.finish(), want.finish()) << n_bits << " " << before;
    }
  }
}

// A writer on reused storage (an earlier section's bytes, all ones, shorter or longer than
// this one) writes what a fresh writer does: through put, the pairs' runs and put_codes.
TEST(ParamsCompact, WriterOnReusedStorageWritesTheSameBits) {
  std::mt19937_64 rng(29);
  for (const size_t old_size : {0u, 3u, 40u, 5000u}) {
    for (const size_t n : {1u, 17u, 700u}) {
      std::vector<int64_t> a(n), b(n);
      for (size_t i = 0; i < n; ++i) {
        a[i] = static_cast<int64_t>(rng() % 200) - 100;
        b[i] = static_cast<int64_t>(rng() % 9) - 4;
      }
      const auto write = [&](BitWriter& w) {
        w.put(0x15, 5);
        w.signed_exp_golomb_pairs(a.data(), b.data(), n, 2, 0);
        CompactCode code;
        code.scale_res = a;
        code.zero_res = b;
        code.ks = 3;
        code.kz = 1;
        write_params_compact(w, code);
        return w.finish();
      };
      BitWriter fresh;
      std::vector<uint8_t> storage(old_size, 0xff);
      BitWriter reused(std::move(storage));
      ASSERT_EQ(write(reused), write(fresh)) << old_size << " " << n;
    }
  }
}

TEST(ParamsCompact, RoundTripOnEveryPath) {
  const CompactGrid grids[] = {{6, 4}, {23, 0}, {1, 8}};
  for (const CompactGrid& g : grids) {
    for (const size_t dim : {1u, 5u, 8u, 16u, 64u, 100u}) {
      for (const size_t n_groups : {1u, 2u, 8u, 16u, 24u, 33u}) {
        for (int kind = 0; kind < 4; ++kind) {
          const Params p = random_params(n_groups, dim, kind, g, static_cast<uint32_t>(dim + kind));
          BitWriter w;
          write_params_compact(w, p.scale, p.zero, n_groups, dim, g);
          const std::vector<uint8_t> bytes = w.finish();
          for (const SimdPath path : test::supported_simd_paths()) {
            set_simd_path(path);
            Params got;
            const std::string where = std::string(simd_path_name(path)) + " grid " +
                                      std::to_string(g.scale_mantissa_bits) + "/" +
                                      std::to_string(g.zero_step_log2) + " dim " +
                                      std::to_string(dim) + " groups " + std::to_string(n_groups) +
                                      " kind " + std::to_string(kind);
            ASSERT_EQ(read_back(bytes, n_groups, dim, g, got), "") << where;
            ASSERT_TRUE(same_bits(got.scale, p.scale)) << where;
            ASSERT_TRUE(same_bits(got.zero, p.zero)) << where;
          }
        }
      }
    }
  }
  set_simd_path(best_supported_simd_path());
}

// Scale indices at the edges of the float exponents in a later group (the vector path's range
// check): exponent 254 decodes, 255 and 0 are the same error on every path.
TEST(ParamsCompact, ScaleExponentEdgesInALaterGroup) {
  const CompactGrid g{6, 4};
  const size_t n_groups = 2, dim = 20, bad_channel = 17;
  const int64_t one = int64_t{127} << g.scale_mantissa_bits;  // the index of scale 1.0
  for (const int exponent : {254, 255, 0, 256}) {
    BitWriter w;
    w.put(0, 5);
    w.put(0, 5);
    for (size_t c = 0; c < dim; ++c) {
      w.signed_exp_golomb(c == 0 ? one : 0, 0);  // group 0: scale 1, zero 0
      w.signed_exp_golomb(0, 0);
      const int64_t to = (int64_t{exponent} << g.scale_mantissa_bits) - one;
      w.signed_exp_golomb(c == bad_channel ? to : 0, 0);  // group 1
      w.signed_exp_golomb(0, 0);
    }
    const std::vector<uint8_t> bytes = w.finish();
    const std::string want = exponent == 254
                                 ? ""
                                 : "corrupt_input: codec stream: compact scale index " +
                                       std::to_string(int64_t{exponent} << g.scale_mantissa_bits) +
                                       " of group 1, channel 17 is not a positive normal float";
    for (const SimdPath path : test::supported_simd_paths()) {
      set_simd_path(path);
      Params got;
      EXPECT_EQ(read_back(bytes, n_groups, dim, g, got), want)
          << simd_path_name(path) << " exponent " << exponent;
      if (want.empty()) {
        EXPECT_EQ(got.scale[dim + bad_channel], std::ldexp(1.0f, 127));
      }
    }
  }
  set_simd_path(best_supported_simd_path());
}

// Residuals past +-2^30 (the vector paths take 32-bit ones) in a later group, inside a block of
// 8 groups x 16 channels (the AVX-512 transpose's; rows of 8 channels: either block of a pair,
// or a last block alone) and in the rest: the same parameters, or
// the same error, on every path (a zero index of 2^32 is valid; a 32-bit residual would lose it).
// Zero residuals in a last group (in an earlier one, the next group's prediction past 2^22
// sends the whole section to the portable code anyway); scale residuals also in an early one.
TEST(ParamsCompact, FarResidualsDecodeAlikeOnEveryPath) {
  const CompactGrid g{6, 4};
  const int64_t one = int64_t{127} << g.scale_mantissa_bits;  // the index of scale 1.0
  struct Case {
    size_t n_groups, dim, group, channel;
  };
  int valid = 0, errors = 0;
  for (const Case& c :
       {Case{8, 16, 7, 7}, Case{16, 32, 7, 25}, Case{16, 16, 2, 5}, Case{18, 20, 17, 3},
        Case{18, 20, 4, 18}, Case{16, 8, 15, 3}, Case{16, 8, 6, 7}, Case{24, 8, 23, 5},
        Case{9, 8, 8, 2}, Case{16, 8, 0, 3}, Case{8, 16, 0, 15}}) {
    for (const bool scale_side : {false, true}) {
      for (const int64_t far : {int64_t{1} << 32, -(int64_t{1} << 32), (int64_t{1} << 31) + 5}) {
        BitWriter w;
        w.put(0, 5);
        w.put(0, 5);
        for (size_t ch = 0; ch < c.dim; ++ch) {
          for (size_t gi = 0; gi < c.n_groups; ++gi) {
            const bool here = ch == c.channel && gi == c.group;
            w.signed_exp_golomb(ch == 0 && gi == 0 ? one : (here && scale_side ? far : 0), 0);
            w.signed_exp_golomb(here && !scale_side ? far : 0, 0);
          }
        }
        const std::vector<uint8_t> bytes = w.finish();
        set_simd_path(SimdPath::scalar);
        Params want;
        const std::string want_error = read_back(bytes, c.n_groups, c.dim, g, want);
        (want_error.empty() ? valid : errors) += 1;
        for (const SimdPath path : test::supported_simd_paths()) {
          set_simd_path(path);
          Params got;
          const std::string where =
              std::string(simd_path_name(path)) + " shape " + std::to_string(c.n_groups) + "x" +
              std::to_string(c.dim) + " at " + std::to_string(c.group) + "," +
              std::to_string(c.channel) + (scale_side ? " scale " : " zero ") + std::to_string(far);
          ASSERT_EQ(read_back(bytes, c.n_groups, c.dim, g, got), want_error) << where;
          if (!want_error.empty()) continue;
          ASSERT_TRUE(same_bits(got.scale, want.scale)) << where;
          ASSERT_TRUE(same_bits(got.zero, want.zero)) << where;
        }
        // Side by side with two sections of ordinary parameters (the lanes reader, where it
        // runs): the same values, or an error.
        if (!BitReader::lanes_available()) continue;
        set_simd_path(SimdPath::avx512);
        BitWriter plain;
        plain.put(0, 10);
        for (size_t i = 0; i < 2 * c.n_groups * c.dim; ++i) plain.signed_exp_golomb(i ? 0 : one, 0);
        const std::vector<uint8_t> other = plain.finish();
        const std::vector<uint8_t>* sections[3] = {&other, &bytes, &other};
        std::vector<BitReader> readers;
        for (const auto* b : sections) readers.emplace_back(*b, 0);
        std::vector<BitReader*> r;
        const std::vector<const CompactGrid*> grids(3, &g);
        Params got[3];
        std::vector<std::vector<float>*> scale, zero;
        for (size_t j = 0; j < 3; ++j) {
          r.push_back(&readers[j]);
          scale.push_back(&got[j].scale);
          zero.push_back(&got[j].zero);
        }
        bool ok = true;
        try {
          read_params_compact_lanes(r, c.n_groups, c.dim, grids, scale, zero, "parameters");
        } catch (const Error&) {
          ok = false;
        }
        ASSERT_EQ(ok, want_error.empty()) << c.group << " " << c.channel << " " << far;
        if (!ok) continue;
        ASSERT_TRUE(same_bits(got[1].scale, want.scale) && same_bits(got[1].zero, want.zero))
            << c.group << " " << c.channel << " " << far;
      }
    }
  }
  set_simd_path(best_supported_simd_path());
  EXPECT_GT(valid, 0);
  EXPECT_GT(errors, 0);
}

TEST(ParamsCompact, DamagedBitsFailAlikeOnEveryPath) {
  const CompactGrid g{6, 4};
  const size_t n_groups = 8, dim = 48;
  std::mt19937 rng(3);
  size_t failures = 0, trials = 0;
  for (int kind = 0; kind < 3; ++kind) {
    const Params p = random_params(n_groups, dim, kind, g, 17u + static_cast<uint32_t>(kind));
    BitWriter w;
    write_params_compact(w, p.scale, p.zero, n_groups, dim, g);
    const std::vector<uint8_t> good = w.finish();
    for (int t = 0; t < 300; ++t, ++trials) {
      std::vector<uint8_t> bad = good;
      for (int f = 0; f < 1 + t % 3; ++f)
        bad[rng() % bad.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
      if (t % 7 == 0) bad.resize(rng() % bad.size());
      std::string first_message;
      Params first;
      for (const SimdPath path : test::supported_simd_paths()) {
        set_simd_path(path);
        Params got;
        const std::string message = read_back(bad, n_groups, dim, g, got);
        if (path == SimdPath::scalar) {
          first_message = message;
          first = got;
          failures += !message.empty();
          continue;
        }
        ASSERT_EQ(message, first_message) << simd_path_name(path) << " trial " << t;
        if (message.empty()) {
          ASSERT_TRUE(same_bits(got.scale, first.scale)) << simd_path_name(path) << " trial " << t;
          ASSERT_TRUE(same_bits(got.zero, first.zero)) << simd_path_name(path) << " trial " << t;
        }
      }
    }
  }
  // Both outcomes are exercised.
  EXPECT_GT(failures, trials / 10);
  EXPECT_LT(failures, trials);
  set_simd_path(best_supported_simd_path());
}

// round_params_compact's AVX-512 twin against the portable loop: the same outcome and the same
// bits, on ranges that take its fast path and every way off it (a second step down of the
// zero index, a scale retry, quotients past 2^22, overflow, zero widths, NaN and infinities),
// in every position of a vector and its tail.
TEST(ParamsCompact, RoundingIsTheSameOnEveryPath) {
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  const float specials[] = {0.0f,     -0.0f,     1e-30f, -1e-30f, 3e38f, -3e38f,
                            INFINITY, -INFINITY, NAN,    1e7f,    -1e7f, 65504.0f};
  size_t succeeded = 0, failed = 0;
  for (const CompactGrid& g : {CompactGrid{6, 4}, CompactGrid{23, 0}, CompactGrid{1, 8}}) {
    for (int bits = 1; bits <= 8; ++bits) {
      for (const size_t n : {1u, 15u, 16u, 17u, 100u}) {
        for (int kind = 0; kind < 6; ++kind) {
          std::vector<float> mins(n), maxs(n);
          for (size_t i = 0; i < n; ++i) {
            const float scale = std::pow(10.0f, static_cast<float>(rng() % 12) - 6.0f);
            float lo = unit(rng) * scale, hi = lo + std::fabs(unit(rng)) * scale;
            if (kind == 1) hi = lo;                                           // zero width
            if (kind == 2) lo = -static_cast<float>(rng() % 9), hi = lo + 1;  // grid-aligned
            if (kind == 3) lo *= 1e9f, hi = lo + scale;                       // quotients past 2^22
            if (kind == 4 && rng() % 3 == 0) lo = specials[rng() % 12];
            if (kind == 5 && rng() % 3 == 0) hi = specials[rng() % 12];
            mins[i] = lo;
            maxs[i] = hi;
          }
          std::vector<float> want_s, want_z, got_s, got_z;
          set_simd_path(SimdPath::scalar);
          const bool want = round_params_compact(mins, maxs, bits, g, want_s, want_z);
          failed += !want;
          succeeded += want;
          for (const SimdPath path : test::supported_simd_paths()) {
            set_simd_path(path);
            const bool got = round_params_compact(mins, maxs, bits, g, got_s, got_z);
            const std::string where = std::string(simd_path_name(path)) + " bits " +
                                      std::to_string(bits) + " n " + std::to_string(n) + " kind " +
                                      std::to_string(kind);
            ASSERT_EQ(got, want) << where;
            if (want) {
              ASSERT_TRUE(same_bits(got_s, want_s)) << where;
              ASSERT_TRUE(same_bits(got_z, want_z)) << where;
            }
          }
        }
      }
    }
  }
  set_simd_path(best_supported_simd_path());
  EXPECT_GT(succeeded, 300u);
  EXPECT_GT(failed, 20u);
}

// The encoder's plan (residuals in coding order, orders, bits) is the same on every path, for
// parameters of every kind (the AVX-512 residuals' fast path and its fallbacks: quotients past
// 2^22, scale indices far apart) and for parameters off the grid (false on every path); shapes
// with and without whole blocks of 8 groups x 16 channels (the AVX-512 transpose's) and rests.
TEST(ParamsCompact, PlanIsTheSameOnEveryPath) {
  std::mt19937 rng(17);
  for (const CompactGrid& g : {CompactGrid{6, 4}, CompactGrid{23, 0}, CompactGrid{1, 8}}) {
    for (const size_t dim : {1u, 5u, 8u, 16u, 17u, 40u, 64u}) {
      for (const size_t n_groups : {1u, 2u, 9u, 16u, 33u}) {
        for (int kind = 0; kind < 5; ++kind) {
          Params p = random_params(n_groups, dim, kind % 4, g, static_cast<uint32_t>(rng()));
          if (kind == 4) {  // one parameter off the grid, anywhere
            const size_t i = rng() % p.scale.size();
            if (rng() & 1) {
              p.zero[i] = std::nextafter(p.zero[i], 1e30f);
            } else {
              p.scale[i] = std::nextafter(p.scale[i], 1e30f);
            }
          }
          set_simd_path(SimdPath::scalar);
          CompactCode want;
          const bool fits = plan_params_compact(p.scale, p.zero, n_groups, dim, g, want);
          ASSERT_EQ(fits, kind != 4 || params_fit_compact(p.scale, p.zero, g));
          for (const SimdPath path : test::supported_simd_paths()) {
            set_simd_path(path);
            CompactCode got;
            const std::string where = std::string(simd_path_name(path)) + " dim " +
                                      std::to_string(dim) + " groups " + std::to_string(n_groups) +
                                      " kind " + std::to_string(kind);
            ASSERT_EQ(plan_params_compact(p.scale, p.zero, n_groups, dim, g, got), fits) << where;
            if (!fits) continue;
            ASSERT_EQ(got.scale_res, want.scale_res) << where;
            ASSERT_EQ(got.zero_res, want.zero_res) << where;
            ASSERT_EQ(got.ks, want.ks) << where;
            ASSERT_EQ(got.kz, want.kz) << where;
            ASSERT_EQ(got.bits, want.bits) << where;
          }
        }
      }
    }
  }
  set_simd_path(best_supported_simd_path());
}

// A code longer than the reader's 57-bit window is read on its own and the run resumes after
// it with the next code's order: a scale residual (even place) past 2^28 among small ones once
// resumed with the wrong order and failed a valid stream (the finest grid, one scale 2^40
// below its neighbours); also a long zero residual, and both in one stream, on every path.
TEST(ParamsCompact, LongCodesResumeWithTheRightOrder) {
  const CompactGrid g{23, 0};
  const size_t n_groups = 4, dim = 64;
  for (int kind = 0; kind < 3; ++kind) {
    for (const size_t at : {size_t{0}, size_t{9}, 2 * dim + 9, n_groups * dim - 1}) {
      Params p;
      p.scale.assign(n_groups * dim, 1.0f);
      p.zero.resize(n_groups * dim);
      for (size_t i = 0; i < p.zero.size(); ++i) p.zero[i] = static_cast<float>(i % 5);
      if (kind != 1) p.scale[at] = std::ldexp(1.0f, -40), p.zero[at] = 0.0f;   // long scale code
      if (kind != 0) p.zero[(at + 7) % p.zero.size()] = std::ldexp(1.0f, 38);  // long zero code
      CompactCode code;
      ASSERT_TRUE(plan_params_compact(p.scale, p.zero, n_groups, dim, g, code));
      bool long_code = false;
      for (size_t i = 0; i < code.scale_res.size(); ++i) {
        long_code |= BitWriter::exp_golomb_bits(BitWriter::zigzag(code.scale_res[i]), code.ks) > 57;
        long_code |= BitWriter::exp_golomb_bits(BitWriter::zigzag(code.zero_res[i]), code.kz) > 57;
      }
      ASSERT_TRUE(long_code) << kind << " " << at;  // the case this test is about
      BitWriter w;
      write_params_compact(w, code);
      const std::vector<uint8_t> bytes = w.finish();
      for (const SimdPath path : test::supported_simd_paths()) {
        set_simd_path(path);
        Params got;
        ASSERT_EQ(read_back(bytes, n_groups, dim, g, got), "") << kind << " " << at;
        ASSERT_TRUE(same_bits(got.scale, p.scale)) << kind << " " << at;
        ASSERT_TRUE(same_bits(got.zero, p.zero)) << kind << " " << at;
      }
    }
  }
  set_simd_path(best_supported_simd_path());
}

// The order search (both compiled kernels, and the AVX-512 one where its zigzag values fit 32
// bits) finds the first order of fewest bits among those whose every code has at most
// max_prefix prefix zeros, as trying every order does: residual sets of several sizes and
// spreads (zeros, small, up to 2^62), several prefix limits.
TEST(ParamsCompact, BestOrderIsTheExhaustiveSearch) {
  std::mt19937_64 rng(11);
  const bool avx512 = best_supported_simd_path() == SimdPath::avx512;
  // Spreads 8 and 9 put the zigzag values below and around 256, where the kernels count values
  // by value instead of by bit length; 31 and 32 around the AVX-512 search's 2^32 - 1.
  // (1,000 and 3,000 values: the AVX-512 search's words on the stack and in a vector.)
  for (const size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{64}, size_t{1000}, size_t{3000}}) {
    for (const int spread : {0, 3, 8, 9, 12, 31, 32, 40, 62}) {
      std::vector<int64_t> res(n);
      for (size_t i = 0; i < n; ++i) {
        const int64_t mag = spread == 0 ? 0 : static_cast<int64_t>(rng() >> (64 - spread));
        res[i] = (rng() & 1) ? -mag : mag;
        if (rng() % 4 == 0) res[i] = 0;
        // Zigzag values 2^j - 1 (all ones: the lengths a rounding conversion would get wrong),
        // and in the largest set 2^32 - 1 (just past the AVX-512 search).
        if (spread == 31 && i % 3 == 0) res[i] = -(int64_t{1} << (i % 31));
        if (spread == 31 && n == 1000 && i == 1) res[i] = INT32_MIN;
      }
      for (const int max_prefix : {3, 10, 40}) {
        ExpGolombOrder want;
        for (int k = 0; k <= 24; ++k) {
          uint64_t bits = 0;
          bool fits = true;
          for (const int64_t r : res) {
            const uint64_t v = BitWriter::zigzag(r);
            fits &= (v >> k) + 1 < (uint64_t{1} << (max_prefix + 1));
            bits += static_cast<uint64_t>(BitWriter::exp_golomb_bits(v, k));
          }
          if (fits && bits < want.bits) want.bits = bits, want.k = k;
        }
        for (const ExpGolombKernels* kernels :
             {&exp_golomb_kernels(), &exp_golomb_kernels_bmi2()}) {
          if (kernels == &exp_golomb_kernels_bmi2() && simd_path() == SimdPath::scalar) continue;
          const ExpGolombOrder got = kernels->best_order(res.data(), n, max_prefix);
          EXPECT_EQ(got.k, want.k) << n << " " << spread << " " << max_prefix;
          EXPECT_EQ(got.bits, want.bits) << n << " " << spread << " " << max_prefix;
        }
        if (!avx512) continue;
        const auto wide = best_eg_order_avx512(res.data(), n, max_prefix);
        uint64_t largest = 0;
        for (const int64_t r : res) largest = std::max(largest, BitWriter::zigzag(r));
        ASSERT_EQ(wide.has_value(), largest < UINT32_MAX) << n << " " << spread;
        if (!wide) continue;
        EXPECT_EQ(wide->k, want.k) << "avx512 " << n << " " << spread << " " << max_prefix;
        EXPECT_EQ(wide->bits, want.bits) << "avx512 " << n << " " << spread << " " << max_prefix;
      }
    }
  }
}

// Two sections read side by side give what reading one whole section and then the other gives:
// both sets of values, or the first error (a's before b's) and whose it is; on sections of
// other shapes, intact, damaged or cut short.
// Sections of one shape read side by side by the AVX-512 lanes reader (where it runs) give
// what each gives read alone: the same parameters, or an error where one of them fails (the
// caller then reads them again in order for the first error: decode_head_params). Up to 16
// sections with every kind of parameters (far residuals: codes past 57 bits, which the lanes
// reader leaves to signed_exp_golomb), damaged or cut short, and sections shorter than one
// 8-byte load; half the trials with a grid of each section's own (the group-0 chains side by
// side, a section a lane, take each lane's).
TEST(ParamsCompact, LanesReadAsSectionsOneByOne) {
  if (!BitReader::lanes_available()) GTEST_SKIP() << "no AVX-512 CD on this CPU";
  std::mt19937 rng(29);
  size_t failed = 0, read = 0, long_codes = 0;
  for (int t = 0; t < 400; ++t) {
    const size_t m = 1 + rng() % kMaxLaneReaders;
    const size_t n_groups = 1 + rng() % 12, dim = 1 + rng() % (t % 4 == 0 ? 4 : 80);
    std::vector<CompactGrid> gs(m, CompactGrid{6, 4});
    if (t % 4 >= 2) {
      for (CompactGrid& g : gs)
        g = CompactGrid{4 + static_cast<int>(rng() % 6), static_cast<int>(rng() % 9)};
    }
    std::vector<std::vector<uint8_t>> bytes(m);
    for (size_t j = 0; j < m; ++j) {
      const CompactGrid& g = gs[j];
      const Params p = random_params(n_groups, dim, static_cast<int>(rng() % 4), g,
                                     static_cast<uint32_t>(rng()));
      BitWriter w;
      write_params_compact(w, p.scale, p.zero, n_groups, dim, g);
      bytes[j] = w.finish();
      if (t % 2 == 1 && rng() % 6 == 0)
        bytes[j][rng() % bytes[j].size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
      if (t % 2 == 1 && rng() % 12 == 0) bytes[j].resize(rng() % bytes[j].size());
    }
    std::vector<Params> want(m);
    bool want_ok = true;
    for (size_t j = 0; j < m; ++j) {
      try {
        BitReader r(bytes[j], 0);
        read_params_compact(r, n_groups, dim, gs[j], want[j].scale, want[j].zero);
        r.finish("compact parameters");
      } catch (const Error&) {
        want_ok = false;
      }
    }
    std::vector<BitReader> readers;
    for (size_t j = 0; j < m; ++j) readers.emplace_back(bytes[j], 0);
    std::vector<BitReader*> r;
    std::vector<const CompactGrid*> grids;
    for (const CompactGrid& g : gs) grids.push_back(&g);
    std::vector<Params> got(m);
    std::vector<std::vector<float>*> scale, zero;
    for (size_t j = 0; j < m; ++j) {
      r.push_back(&readers[j]);
      scale.push_back(&got[j].scale);
      zero.push_back(&got[j].zero);
    }
    bool got_ok = true;
    try {
      ASSERT_TRUE(
          read_params_compact_lanes(r, n_groups, dim, grids, scale, zero, "compact parameters"));
    } catch (const Error&) {
      got_ok = false;
    }
    ASSERT_EQ(got_ok, want_ok) << "trial " << t;
    if (want_ok) {
      for (size_t j = 0; j < m; ++j) {
        ASSERT_TRUE(same_bits(got[j].scale, want[j].scale) && same_bits(got[j].zero, want[j].zero))
            << "trial " << t << " section " << j;
      }
      // The kernel alone from the first code: where it stops short, signed_exp_golomb read on.
      std::vector<BitReader> probe;
      std::vector<BitReader*> pr;
      std::vector<std::vector<int64_t>> codes(m, std::vector<int64_t>(2 * n_groups * dim));
      std::vector<int64_t*> out;
      std::vector<std::array<int, 2>> k(m);
      for (size_t j = 0; j < m; ++j) {
        probe.emplace_back(bytes[j], 0);
        k[j][0] = static_cast<int>(probe[j].get(5, "order"));
        k[j][1] = static_cast<int>(probe[j].get(5, "order"));
        out.push_back(codes[j].data());
      }
      for (size_t j = 0; j < m; ++j) pr.push_back(&probe[j]);
      const size_t n = 2 * n_groups * dim;
      const size_t first = BitReader::signed_exp_golomb_lanes(
          pr, out.data(), 0, n, reinterpret_cast<const int(*)[2]>(k.data()));
      ASSERT_EQ(first % 4, 0u);
      ASSERT_LE(first, n);
      for (size_t j = 0; j < m; ++j) {
        BitReader one(bytes[j], 0);
        one.get(10, "orders");
        for (size_t i = 0; i < first; ++i)
          ASSERT_EQ(codes[j][i], one.signed_exp_golomb(k[j][i & 1], "code")) << t << " " << i;
        // Stopped well before the input's last 8 bytes: a code that did not fit its load.
        long_codes += first < n && probe[j].bits_left() > 128;
      }
    }
    failed += !want_ok;
    read += want_ok;
  }
  EXPECT_GT(failed, 40u);
  EXPECT_GT(read, 200u);
  EXPECT_GT(long_codes, 0u);
}

TEST(ParamsCompact, PairReadsAsTwoSectionsInTurn) {
  const CompactGrid g{6, 4};
  std::mt19937 rng(23);
  size_t a_failed = 0, b_failed = 0, both_read = 0;
  for (int t = 0; t < 600; ++t) {
    const size_t ga = 1 + rng() % 9, da = 1 + rng() % 70, gb = 1 + rng() % 9, db = 1 + rng() % 70;
    const Params pa = random_params(ga, da, t % 3, g, static_cast<uint32_t>(rng()));
    const Params pb = random_params(gb, db, (t / 3) % 3, g, static_cast<uint32_t>(rng()));
    std::vector<uint8_t> sa, sb;
    for (auto [p, n_groups, dim, out] :
         {std::tuple{&pa, ga, da, &sa}, std::tuple{&pb, gb, db, &sb}}) {
      BitWriter w;
      write_params_compact(w, p->scale, p->zero, n_groups, dim, g);
      *out = w.finish();
      if (rng() % 3 == 0) (*out)[rng() % out->size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
      if (rng() % 8 == 0) out->resize(rng() % out->size());
    }
    // One at a time.
    std::string want;
    int want_failing = -1;
    Params wa, wb;
    try {
      want_failing = 0;
      BitReader ra(sa, 0);
      read_params_compact(ra, ga, da, g, wa.scale, wa.zero);
      ra.finish("compact parameters");
      want_failing = 1;
      BitReader rb(sb, 0);
      read_params_compact(rb, gb, db, g, wb.scale, wb.zero);
      rb.finish("compact parameters");
      want_failing = -1;
    } catch (const Error& e) {
      want = e.what();
    }
    for (const SimdPath path : test::supported_simd_paths()) {
      set_simd_path(path);
      std::string got;
      int failing = -1;
      Params xa, xb;
      try {
        BitReader ra(sa, 0), rb(sb, 0);
        read_params_compact_pair(ra, ga, da, g, xa.scale, xa.zero, rb, gb, db, g, xb.scale, xb.zero,
                                 "compact parameters", failing);
        failing = -1;
      } catch (const Error& e) {
        got = e.what();
      }
      ASSERT_EQ(got, want) << "trial " << t << " " << simd_path_name(path);
      ASSERT_EQ(failing, want_failing) << "trial " << t;
      if (want.empty()) {
        ASSERT_TRUE(same_bits(xa.scale, wa.scale) && same_bits(xa.zero, wa.zero)) << t;
        ASSERT_TRUE(same_bits(xb.scale, wb.scale) && same_bits(xb.zero, wb.zero)) << t;
      }
    }
    a_failed += want_failing == 0;
    b_failed += want_failing == 1;
    both_read += want.empty();
  }
  set_simd_path(best_supported_simd_path());
  EXPECT_GT(a_failed, 50u);
  EXPECT_GT(b_failed, 50u);
  EXPECT_GT(both_read, 100u);
}

}  // namespace
}  // namespace cachegen::detail
