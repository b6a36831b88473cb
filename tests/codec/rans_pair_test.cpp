// The rANS kernels below the stream level. rans_encode writes the same bytes on every SIMD
// path, for every lane count, precision mix and frequency (1 .. 2^12), and rans_encode_pair
// the bytes of two rans_encode calls. rans_decode_pair with
// two payloads of their own tables (a layer's K and V decoded together): every lane count,
// alphabet and SIMD path decodes both exactly as two rans_decode calls, and a damaged payload
// fails as rans_decode fails on it. (Batch-level callers fall back to one batch at a time after
// any error, which would hide a wrong lockstep kernel; this test would not.)
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cachegen/error.h"
#include "cachegen/runtime.h"
#include "codec/rans.h"
#include "codec_test_inputs.h"

namespace cachegen::detail {
namespace {

// Random per-channel tables at precision t with every symbol present (skew by `seed`).
std::vector<ChannelTable> random_tables(size_t dim, int bits, int t, uint32_t seed) {
  std::mt19937 rng(seed);
  const size_t n = size_t{1} << bits;
  std::vector<ChannelTable> out(dim);
  for (auto& ch : out) {
    ch.t = t;
    ch.freq.assign(n, 1);
    ch.cum.assign(n, 0);
    uint32_t left = (1u << t) - static_cast<uint32_t>(n);
    std::uniform_int_distribution<size_t> pick(0, n - 1);
    const size_t favourite = pick(rng);
    while (left > 0) {  // most of the mass on one symbol, the rest spread at random
      const size_t s = (rng() % 3 == 0) ? pick(rng) : favourite;
      ++ch.freq[s];
      --left;
    }
    // About half the channels have absent symbols (frequency 0: equal cumulative starts, which the
    // search kernels must pass over), their mass given to the favourite.
    if (n > 2 && rng() % 2 == 0) {
      for (size_t s = rng() % 3; s < n; s += 1 + rng() % 3) {
        if (s == favourite) continue;
        ch.freq[favourite] = static_cast<uint16_t>(ch.freq[favourite] + ch.freq[s]);
        ch.freq[s] = 0;
      }
    }
    for (size_t s = 1; s < n; ++s)
      ch.cum[s] = static_cast<uint16_t>(ch.cum[s - 1] + ch.freq[s - 1]);
  }
  return out;
}

// Symbols drawn from each channel's table.
std::vector<uint8_t> draw(const std::vector<ChannelTable>& tables, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  const size_t dim = tables.size();
  for (size_t i = 0; i < n; ++i) {
    const ChannelTable& ch = tables[i % dim];
    const uint32_t slot = rng() & ((1u << ch.t) - 1);
    size_t s = 0;
    while (s + 1 < ch.cum.size() && ch.cum[s + 1] <= slot) ++s;
    out[i] = static_cast<uint8_t>(s);
  }
  return out;
}

std::string outcome(const std::function<void()>& f) {
  try {
    f();
    return "ok";
  } catch (const Error& e) {
    return std::string(error_code_name(e.code())) + " " + e.what();
  }
}

TEST(RansEncode, EveryPathWritesTheScalarBytes) {
  struct Case {
    size_t dim, n;
    int bits, lanes;
  };
  // Full steps only, a partial step at the end (coded first by the scalar loop), one step,
  // periods 1, 3 and 33 against 8 and 32 lanes. The AVX-512 8-lane encoder picks the entries of
  // at most 8 symbols by blends from rows held in registers (1, 2, 4 or 8 channels; of 5..8
  // symbols only over more than 32 entries: 8 channels) or loaded by blocks of 8 channels (16,
  // 40 and 256 channels), the other models of at most 64 entries over 1, 2 or 4 channels by
  // permutes of register pairs, and gathers the rest (16 symbols over 8 or 24 channels, 8
  // symbols over 264). Its 32-lane encoder runs 16 lanes a vector from 32-bit tables: models of
  // at most 16, 32 or 64 entries over 1, 2, 4, 8 or 16 channels by permutes of 1, 2 or 4
  // registers, of 2, 4 or 8 symbols over 32, 48, 128 or 256 channels by blends of rows, the
  // rest gathered (33 and 264 channels, 16 symbols over 8); of at most 8 symbols over 24 or 40
  // channels it keeps 8 lanes a vector and blends of 8-channel rows. A 4-lane payload alone
  // takes the scalar loop on every path (two share an 8-lane step: the pair test below).
  const Case cases[] = {
      {8, 8192, 3, 8},   {24, 7205, 4, 8},    {33, 4099, 2, 8},    {8, 8, 1, 8},
      {1, 9000, 5, 8},   {8, 7, 3, 8},        {128, 32768, 3, 32}, {33, 16411, 4, 32},
      {8, 2000, 3, 4},   {100, 300, 6, 1},    {8, 4096, 3, 32},    {4, 4099, 2, 32},
      {2, 4096, 4, 8},   {1, 2048, 6, 32},    {2, 4104, 3, 32},    {4, 4096, 3, 8},
      {8, 4096, 4, 32},  {1, 8192, 4, 8},     {1, 4096, 1, 32},    {2, 4096, 1, 8},
      {16, 4096, 2, 32}, {24, 4104, 1, 32},   {40, 8000, 3, 8},    {16, 4096, 1, 8},
      {8, 4096, 2, 8},   {256, 16384, 3, 32}, {264, 16896, 3, 32}, {256, 8200, 2, 8},
      {4, 4100, 3, 32},  {32, 8192, 1, 32},   {48, 4800, 2, 32},   {40, 8000, 3, 32},
      {8, 2003, 3, 4},   {24, 4099, 4, 4},    {33, 2050, 5, 4},    {8, 4, 2, 4},
      {3, 2047, 6, 4},   {8, 3, 3, 4}};
  uint32_t seed = 500;
  for (const Case& c : cases) {
    // Channels at their own precisions, one with a single symbol at t = 0 (frequency 2^p
    // after scaling: never renormalises) and one whose rare symbols have frequency 1 at p = 12.
    std::vector<ChannelTable> tables;
    for (size_t ch = 0; ch < c.dim; ++ch) {
      const int t = ch % 5 == 1 ? 0 : c.bits + static_cast<int>((seed + ch) % (13 - c.bits));
      auto one = random_tables(1, t == 0 ? 0 : c.bits, t, seed + static_cast<uint32_t>(ch));
      one[0].freq.resize(size_t{1} << c.bits, 0);
      one[0].cum.resize(size_t{1} << c.bits, static_cast<uint16_t>(1u << t));
      tables.push_back(one[0]);
    }
    ++seed;
    const auto symbols = draw(tables, c.n, seed++);
    int precision = 0;
    for (const auto& ch : tables) precision = std::max(precision, ch.t);
    SCOPED_TRACE("dim " + std::to_string(c.dim) + " n " + std::to_string(c.n) + " lanes " +
                 std::to_string(c.lanes));
    std::vector<uint8_t> reference;
    for (SimdPath p : test::supported_simd_paths()) {
      set_simd_path(p);
      std::vector<uint8_t> bytes = {0xaa};  // appended to, not replaced
      rans_encode(symbols, c.dim, tables, precision, c.lanes, bytes);
      if (reference.empty()) reference = bytes;
      EXPECT_EQ(bytes, reference) << simd_path_name(p);
    }
    std::vector<uint8_t> back(c.n);
    const std::span<const uint8_t> payload(reference.data() + 1, reference.size() - 1);
    rans_decode(payload, 0, build_decode_tables(tables, precision), c.dim, c.lanes, back);
    EXPECT_EQ(back, symbols);
  }
  set_simd_path(best_supported_simd_path());
}

TEST(RansEncode, EveryPathCodesModelsAtPrecisionZero) {
  // A constant tensor's codes: every channel one symbol at t = 0, so the coder's precision is 0
  // and each present entry has f = 1 = 2^p (never renormalises). Its 64-bit AVX-512 entry is 0,
  // as an absent symbol's; the 8-lane kernels' 32-bit fields must still read f = 1 (they once
  // read 0 there and emitted a word every step: a stream the decoder refused).
  for (const size_t dim : {size_t{1}, size_t{8}, size_t{24}}) {
    for (const int bits : {1, 3}) {
      for (const int lanes : {8, kMaxLanes}) {
        const size_t n_syms = size_t{1} << bits;
        ChannelTable one;
        one.t = 0;
        one.freq.assign(n_syms, 0);
        one.freq[0] = 1;
        one.cum.assign(n_syms, 1);
        one.cum[0] = 0;
        const std::vector<ChannelTable> tables(dim, one);
        const std::vector<uint8_t> symbols(8 * 4096 + 5, 0);
        SCOPED_TRACE("dim " + std::to_string(dim) + " bits " + std::to_string(bits) + " lanes " +
                     std::to_string(lanes));
        std::vector<uint8_t> reference;
        for (SimdPath p : test::supported_simd_paths()) {
          set_simd_path(p);
          std::vector<uint8_t> single, a, b;
          rans_encode(symbols, dim, tables, 0, lanes, single);
          rans_encode_pair(RansJob{symbols, dim, tables, 0, lanes, &a, 0},
                           RansJob{symbols, dim, tables, 0, lanes, &b, 0});
          if (reference.empty()) reference = single;
          EXPECT_EQ(single, reference) << simd_path_name(p);
          EXPECT_EQ(a, reference) << simd_path_name(p);
          EXPECT_EQ(b, reference) << simd_path_name(p);
        }
        std::vector<uint8_t> back(symbols.size(), 1);
        rans_decode(reference, 0, build_decode_tables(tables, 0), dim, lanes, back);
        EXPECT_EQ(back, symbols);
      }
    }
  }
  set_simd_path(best_supported_simd_path());
}

TEST(RansEncode, PairWritesTheBytesOfTwoSingleEncodes) {
  struct Case {
    size_t dim_a, n_a, dim_b, n_b;
    int bits_a, bits_b, lanes_a, lanes_b;
  };
  // Two 8-lane payloads of the same kind of entries run in lockstep on AVX-512, each's rest
  // alone (either longer, partial steps at the ends), both gathered too; two 4-lane ones as one
  // 8-lane step (of one shape in 32-bit lanes, over 1 to 16 step phases and 2 to 8 symbols;
  // else gathered, the longer one's rest with the other half idle); any other pair one after
  // the other: kinds that differ, 32 lanes, 4 and 8 lanes, too short for a step, no SIMD path.
  const Case cases[] = {
      {8, 8192, 8, 8192, 3, 3, 8, 8},    // a chunk's K and V (rows held in registers)
      {8, 8192, 8, 3000, 3, 3, 8, 8},    // b shorter
      {8, 2003, 8, 8197, 2, 2, 8, 8},    // a shorter, partial steps
      {40, 8000, 16, 4096, 3, 3, 8, 8},  // blocks of 8 channels loaded, different dims
      {24, 7205, 24, 4096, 4, 4, 8, 8},  // 16 symbols over 24 channels: both gathered
      {24, 4096, 24, 7205, 4, 4, 8, 8},  // b longer
      {8, 8192, 8, 8192, 3, 1, 8, 8},    // different kinds of entries
      {24, 7205, 8, 8192, 4, 3, 8, 8},   // gathered and held
      {8, 8192, 8, 8192, 3, 3, 32, 8},   // a 32-lane payload
      {8, 8192, 8, 8192, 3, 3, 32, 32},  // two
      {8, 7, 8, 8192, 3, 3, 8, 8},       // a partial step only
      {8, 2000, 8, 2000, 3, 3, 4, 4},    // 4 lanes (a 64-token chunk's K and V)
      {16, 2048, 16, 2048, 2, 2, 4, 4},  // four step phases, 4 symbols
      {12, 1200, 12, 1200, 1, 1, 4, 4},  // three, 2 symbols
      {64, 4032, 64, 4032, 3, 3, 4, 4},  // sixteen
      {2, 1000, 2, 1000, 3, 3, 4, 4},    // one
      {8, 2000, 8, 1004, 3, 3, 4, 4},    // b shorter
      {8, 1003, 24, 2050, 2, 4, 4, 4},   // a shorter, partial steps, other dims and alphabets
      {8, 2000, 8, 2000, 3, 3, 4, 8},    // 4 and 8 lanes
      {8, 2, 8, 2000, 3, 3, 4, 4},       // a too short for a step
  };
  uint32_t seed = 900;
  for (const Case& c : cases) {
    const int t_a = 10 + static_cast<int>(seed % 3), t_b = 12 - static_cast<int>(seed % 2);
    const auto ta = random_tables(c.dim_a, c.bits_a, t_a, seed++);
    const auto tb = random_tables(c.dim_b, c.bits_b, t_b, seed++);
    const auto sa = draw(ta, c.n_a, seed++), sb = draw(tb, c.n_b, seed++);
    std::vector<uint8_t> want_a = {1, 2, 3}, want_b;  // a from byte 1, past the old end
    rans_encode(sa, c.dim_a, ta, t_a, c.lanes_a, want_a, 1);
    rans_encode(sb, c.dim_b, tb, t_b, c.lanes_b, want_b);
    for (SimdPath p : test::supported_simd_paths()) {
      set_simd_path(p);
      SCOPED_TRACE(std::string(simd_path_name(p)) + " n " + std::to_string(c.n_a) + ", " +
                   std::to_string(c.n_b) + " lanes " + std::to_string(c.lanes_a) + ", " +
                   std::to_string(c.lanes_b));
      std::vector<uint8_t> got_a = {1, 2, 3}, got_b;
      rans_encode_pair(RansJob{sa, c.dim_a, ta, t_a, c.lanes_a, &got_a, 1},
                       RansJob{sb, c.dim_b, tb, t_b, c.lanes_b, &got_b, 0});
      EXPECT_EQ(got_a, want_a);
      EXPECT_EQ(got_b, want_b);
    }
  }
  set_simd_path(best_supported_simd_path());
}

// The SIMD kernels' renormalisation at its bound. A lane emits a word where its state x >=
// f * 2^(32-p) (the AVX-512 32-lane kernel decides by the quotient floor(x / f) >= 2^(32-p),
// the 8-lane one on 64-bit entries by x + (2^p - f) * 2^(32-p) >= 2^32, the 8-lane one on
// blended 32-bit fields, the 16-lane one and AVX2 by x >> (32-p) >= f): states just below, at
// and just past
// the bound and at the ends of [2^16, 2^32), one step of every kernel from the tables rans.h
// describes, against the scalar step written out here. Random symbols almost never reach these
// states (a step's state is within f of its bound about once in 2^(32-p)).
TEST(RansEncode, SimdKernelsRenormaliseAtTheScalarBound) {
  constexpr int p = kMaxPrecision;
  const auto paths = test::supported_simd_paths();
  const bool avx2 = std::find(paths.begin(), paths.end(), SimdPath::avx2) != paths.end();
  const bool avx512 = std::find(paths.begin(), paths.end(), SimdPath::avx512) != paths.end();
  if (!avx2) GTEST_SKIP() << "no SIMD kernel on this machine";
  // Two tables (8 and 4 symbols, one absent), the same for every channel.
  const std::vector<std::vector<uint32_t>> models = {{1, 3, 100, 3983, 9, 0, 0, 0},
                                                     {1, 3, 100, 3992}};
  for (const auto& freq : models) {
    const size_t n_syms = freq.size();
    std::vector<uint32_t> start(n_syms, 0);
    for (size_t s = 1; s < n_syms; ++s) start[s] = start[s - 1] + freq[s - 1];
    for (const size_t dim : {size_t{1}, size_t{8}, size_t{24}, size_t{64}, size_t{264}}) {
      std::vector<uint64_t> narrow(dim * n_syms, 0);
      std::vector<uint32_t> entry(dim * n_syms, 0), magic(dim * n_syms, 0);
      for (size_t i = 0; i < narrow.size(); ++i) {
        const uint64_t f = freq[i % n_syms];
        if (f == 0) continue;
        const int L = std::bit_width(f - 1);
        const uint64_t m = ((uint64_t{1} << (32 + L)) + f - 1) / f - (uint64_t{1} << 32);
        narrow[i] = m | ((uint64_t{1} << p) - f) << 32 | uint64_t{start[i % n_syms]} << 45 |
                    uint64_t(L) << 58;
        entry[i] = static_cast<uint32_t>(f | start[i % n_syms] << 13 | (L > 0 ? L - 1 : 0) << 25);
        magic[i] = static_cast<uint32_t>(m);
      }
      const RansEncodeTables t{narrow.data(), static_cast<int>(n_syms), p, entry.data(),
                               magic.data()};
      // 4 lanes: six steps, so that every lane meets every case.
      const std::pair<int, int> runs[] = {{kMaxLanes, 0}, {8, 0}, {4, 0}, {4, 1},
                                          {4, 2},         {4, 3}, {4, 4}, {4, 5}};
      for (const auto& [lanes, shift] : runs) {
        // Element i (lane i) codes a present symbol; its state is one of the cases for the
        // symbol's frequency f, bound b = f * 2^(32-p).
        std::vector<uint8_t> symbols(static_cast<size_t>(lanes));
        uint32_t x0[kMaxLanes];
        std::vector<uint16_t> want_words;
        uint32_t want_x[kMaxLanes];
        for (int l = 0; l < lanes; ++l) {
          const int k = lanes == 4 ? l + shift : l / 5;  // the case
          const auto s = static_cast<uint8_t>((lanes == 4 ? k : l) % 5 % n_syms);
          symbols[static_cast<size_t>(l)] = s;
          const uint64_t f = freq[s], b = f << (32 - p);
          const uint64_t cases[] = {b - 1, b, b + f - 1, b + f, kRansLow, 0xffffffffu};
          const uint64_t x = std::clamp<uint64_t>(cases[k % 6], kRansLow, 0xffffffffu);
          x0[l] = static_cast<uint32_t>(x);
          uint64_t y = x;
          if (y >= b) {
            want_words.push_back(static_cast<uint16_t>(y));
            y >>= 16;
          }
          want_x[l] = static_cast<uint32_t>((y / f << p) + y % f + start[s]);
        }
        const auto check = [&](const char* kernel, auto&& encode) {
          SCOPED_TRACE(std::string(kernel) + " dim " + std::to_string(dim) + " symbols " +
                       std::to_string(n_syms) + " lanes " + std::to_string(lanes));
          uint32_t x[kMaxLanes];
          std::copy(x0, x0 + lanes, x);
          std::vector<uint16_t> words(64, 0);
          const size_t w_pos = encode(x, words.data(), words.size());
          EXPECT_EQ(
              std::vector<uint16_t>(words.begin() + static_cast<ptrdiff_t>(w_pos), words.end()),
              want_words);
          EXPECT_TRUE(std::equal(x, x + lanes, want_x));
        };
        if (lanes == 4) {  // AVX-512 only: the payload in either half of the 8-lane step
          if (!avx512) continue;
          std::vector<uint64_t> with_idle = narrow;
          with_idle.push_back(0);
          for (int half = 0; half < 2; ++half) {
            check(half ? "avx512 4-lane, second half" : "avx512 4-lane",
                  [&](uint32_t* x, uint16_t* w, size_t w_pos) {
                    RansLanes4 side{symbols.data(), dim, n_syms, 4, p, 0, x, w, w_pos}, none;
                    rans_encode_avx512_lanes4_pair(with_idle.data(), narrow.size(),
                                                   half ? none : side, half ? side : none);
                    return side.w_pos;
                  });
          }
          // Two of one shape (32-bit lanes): the second a copy of the first.
          check("avx512 4-lane pair", [&](uint32_t* x, uint16_t* w, size_t w_pos) {
            uint32_t x2[4];
            std::copy(x, x + 4, x2);
            std::vector<uint16_t> w2(w_pos, 0);
            RansLanes4 first{symbols.data(), dim, n_syms, 4, p, 0, x, w, w_pos};
            RansLanes4 second{symbols.data(), dim, n_syms, 4, p, 0, x2, w2.data(), w_pos};
            rans_encode_avx512_lanes4_pair(with_idle.data(), narrow.size(), first, second);
            EXPECT_TRUE(std::equal(x, x + 4, x2));
            EXPECT_EQ(second.w_pos, first.w_pos);
            EXPECT_TRUE(std::equal(w + first.w_pos, w + w_pos, w2.data() + first.w_pos));
            return first.w_pos;
          });
          continue;
        }
        check("avx2", [&](uint32_t* x, uint16_t* w, size_t w_pos) {
          return rans_encode_avx2(t, symbols.data(), dim, symbols.size(), lanes, x, w, w_pos);
        });
        if (!avx512) continue;
        check("avx512", [&](uint32_t* x, uint16_t* w, size_t w_pos) {
          if (lanes != kMaxLanes)
            return rans_encode_avx512_lanes8(t, symbols.data(), dim, symbols.size(), x, w, w_pos);
          return rans_encode_avx512_takes16(dim, static_cast<int>(n_syms))
                     ? rans_encode_avx512_16(t, symbols.data(), dim, symbols.size(), x, w, w_pos)
                     : rans_encode_avx512(t, symbols.data(), dim, symbols.size(), x, w, w_pos);
        });
      }
    }
  }
}

// Slot tables (alphabets above 16 symbols) as every path builds them: the SIMD fill writes the
// scalar loop's entries, with absent symbols (also the last ones), runs from 1 to 2^12 entries
// and one-symbol channels (t = 0) among the channels; channel 1 uniform (2^bits entries, one a
// symbol: the SIMD fill's own case) and channel 2 of as many entries with half the symbols
// absent, the others 2 each.
TEST(RansDecodeTables, EveryPathBuildsTheScalarSlotTables) {
  std::mt19937 rng(77);
  for (const int bits : {5, 6, 8}) {
    const size_t n = size_t{1} << bits;
    std::vector<ChannelTable> channels(40);
    int top = 0;
    for (size_t c = 0; c < channels.size(); ++c) {
      ChannelTable& ch = channels[c];
      ch.t = c == 0 ? 12 : static_cast<int>(rng() % 13);  // t = 12: runs past 2^11
      top = std::max(top, ch.t);
      ch.freq.assign(n, 0);
      if (c == 1 || c == 2) ch.t = bits;
      const size_t present = c == 1   ? n
                             : c == 2 ? n / 2
                                      : std::min<size_t>(size_t{1} << ch.t, 1 + rng() % n);
      std::vector<size_t> symbols(n);
      for (size_t s = 0; s < n; ++s) symbols[s] = s;
      std::shuffle(symbols.begin(), symbols.end(), rng);
      for (size_t k = 0; k < present; ++k) ch.freq[symbols[k]] = 1;
      for (uint32_t left = (1u << ch.t) - static_cast<uint32_t>(present); left > 0; --left) {
        // channel 2: each present symbol once more; the others one long run
        ++ch.freq[symbols[c == 2 ? left - 1 : rng() % 3 == 0 ? rng() % present : 0]];
      }
      ch.cum.assign(n, 0);
      for (size_t s = 1; s < n; ++s)
        ch.cum[s] = static_cast<uint16_t>(ch.cum[s - 1] + ch.freq[s - 1]);
    }
    set_simd_path(SimdPath::scalar);
    const DecodeTables want = build_decode_tables(channels, top);
    ASSERT_FALSE(want.uses_search());
    size_t total = 0;
    for (const ChannelTable& ch : channels) total += size_t{1} << ch.t;
    for (SimdPath p : test::supported_simd_paths()) {
      set_simd_path(p);
      const DecodeTables got = build_decode_tables(channels, top);
      SCOPED_TRACE(std::string(simd_path_name(p)) + " bits " + std::to_string(bits));
      EXPECT_EQ(got.base, want.base);
      EXPECT_EQ(got.shift, want.shift);
      ASSERT_GE(got.entries.size(), total);
      // The padding after the last channel holds spills: not part of any table.
      EXPECT_TRUE(
          std::equal(want.entries.begin(), want.entries.begin() + total, got.entries.begin()));
    }
  }
  set_simd_path(best_supported_simd_path());
}

TEST(RansPair, TwoTablesDecodeAsTwoSingleCalls) {
  struct Case {
    size_t dim, n_a, n_b;
    int bits, lanes_a, lanes_b, t_a, t_b;
  };
  const Case cases[] = {
      {8, 8192, 8192, 3, 8, 8, 12, 10},        // a short layer's K and V: 8 lanes each
      {8, 8192, 6144, 2, 8, 8, 11, 11},        // unequal lengths
      {24, 7200, 7200, 4, 8, 8, 12, 9},        // period 3
      {8, 8192, 8192, 1, 8, 8, 8, 12},         // two symbols
      {128, 32768, 32768, 3, 32, 32, 12, 10},  // 32 lanes
      {8, 32768, 8192, 3, 32, 8, 12, 12},      // unequal lane counts: no lockstep
      {8, 8192, 8192, 5, 8, 8, 12, 12},        // slot-table alphabet, 8 lanes (gathers)
      {24, 7200, 4096, 6, 8, 8, 12, 10},       // the same, period 3, unequal lengths
      {128, 32768, 32768, 8, 32, 32, 12, 11},  // slot tables, 32 lanes (lossless byte planes)
      {1, 40960, 32768, 6, 32, 32, 10, 12},    // one channel each, unequal lengths
  };
  uint32_t seed = 1;
  for (const Case& c : cases) {
    const auto ta = random_tables(c.dim, c.bits, c.t_a, seed++);
    const auto tb = random_tables(c.dim, c.bits, c.t_b, seed++);
    const auto sa = draw(ta, c.n_a, seed++), sb = draw(tb, c.n_b, seed++);
    std::vector<uint8_t> pa, pb;
    rans_encode(sa, c.dim, ta, c.t_a, c.lanes_a, pa);
    rans_encode(sb, c.dim, tb, c.t_b, c.lanes_b, pb);
    const DecodeTables da = build_decode_tables(ta, c.t_a), db = build_decode_tables(tb, c.t_b);
    for (SimdPath p : test::supported_simd_paths()) {
      set_simd_path(p);
      SCOPED_TRACE(std::string(simd_path_name(p)) + " dim " + std::to_string(c.dim) + " bits " +
                   std::to_string(c.bits));
      std::vector<uint8_t> oa(c.n_a), ob(c.n_b);
      rans_decode_pair({pa, 0, c.lanes_a, oa}, da, {pb, 0, c.lanes_b, ob}, db, c.dim);
      EXPECT_EQ(oa, sa);
      EXPECT_EQ(ob, sb);
      // Damage in either payload: the error of two single calls, a first.
      for (int victim = 0; victim < 2; ++victim) {
        for (size_t i = 5; i < (victim ? pb : pa).size(); i += 53) {
          std::vector<uint8_t> ba = pa, bb = pb;
          (victim ? bb : ba)[i] ^= 0x41;
          const std::string want = outcome([&] {
            rans_decode(ba, 0, da, c.dim, c.lanes_a, oa);
            rans_decode(bb, 0, db, c.dim, c.lanes_b, ob);
          });
          const std::string got = outcome([&] {
            rans_decode_pair({ba, 0, c.lanes_a, oa}, da, {bb, 0, c.lanes_b, ob}, db, c.dim);
          });
          ASSERT_EQ(got, want) << "payload " << victim << " byte " << i;
        }
      }
    }
  }
  set_simd_path(best_supported_simd_path());
}

// N payloads of one dim, each with its own tables, as one lockstep call.
template <size_t N>
struct LockstepCase {
  size_t dim;
  int bits[N], lanes;
  size_t n[N];
  int t[N];
};

// decode(payloads, tables, dim) gives what N single rans_decode calls in order give: the
// symbols, and after damage the first damaged payload's error, on every SIMD path.
template <size_t N, typename Decode>
void expect_single_calls(std::span<const LockstepCase<N>> cases, uint32_t seed, Decode&& decode) {
  for (const LockstepCase<N>& c : cases) {
    std::vector<ChannelTable> tables[N];
    std::vector<uint8_t> want[N], payload[N];
    DecodeTables dt[N];
    const DecodeTables* t[N];
    for (size_t k = 0; k < N; ++k) {
      tables[k] = random_tables(c.dim, c.bits[k], c.t[k], seed++);
      want[k] = draw(tables[k], c.n[k], seed++);
      rans_encode(want[k], c.dim, tables[k], c.t[k], c.lanes, payload[k]);
      dt[k] = build_decode_tables(tables[k], c.t[k]);
      t[k] = &dt[k];
    }
    for (SimdPath p : test::supported_simd_paths()) {
      set_simd_path(p);
      SCOPED_TRACE(std::string(simd_path_name(p)) + " dim " + std::to_string(c.dim) + " bits " +
                   std::to_string(c.bits[0]) + "," + std::to_string(c.bits[1]));
      std::vector<uint8_t> out[N];
      auto together = [&](const std::vector<uint8_t>* pl) {
        RansPayload rp[N];
        for (size_t k = 0; k < N; ++k) {
          out[k].assign(c.n[k], 0);
          rp[k] = {pl[k], 0, c.lanes, out[k]};
        }
        decode(std::span<const RansPayload, N>(rp), std::span<const DecodeTables* const, N>(t),
               c.dim);
      };
      together(payload);
      for (size_t k = 0; k < N; ++k) EXPECT_EQ(out[k], want[k]) << "payload " << k;
      // Damage in any payload, and every other time in the next one too: the error of N
      // single calls in order (the first damaged payload's).
      for (size_t victim = 0; victim < N; ++victim) {
        for (size_t i = 3; i < payload[victim].size(); i += 211) {
          std::vector<uint8_t> bad[N];
          for (size_t k = 0; k < N; ++k) bad[k] = payload[k];
          bad[victim][i] ^= 0x41;
          std::vector<uint8_t>& next = bad[(victim + 1) % N];
          if (i % 2 == 1 && i < next.size()) next[i] ^= 0x41;
          const std::string expected = outcome([&] {
            for (size_t k = 0; k < N; ++k) {
              out[k].assign(c.n[k], 0);
              rans_decode(bad[k], 0, dt[k], c.dim, c.lanes, out[k]);
            }
          });
          ASSERT_EQ(outcome([&] { together(bad); }), expected)
              << "payload " << victim << " byte " << i;
        }
      }
    }
  }
  set_simd_path(best_supported_simd_path());
}

TEST(RansQuad, FourTablesDecodeAsFourSingleCalls) {
  const LockstepCase<4> cases[] = {
      {8, {3, 3, 3, 3}, 8, {8192, 8192, 8192, 8192}, {12, 10, 11, 12}},  // two short layers
      {8, {3, 3, 3, 3}, 8, {8192, 6144, 8192, 4096}, {12, 12, 9, 12}},   // unequal lengths
      {24, {4, 4, 4, 4}, 8, {7200, 7200, 7200, 7200}, {12, 9, 12, 10}},  // period 3, 16 symbols
      {8, {1, 1, 1, 1}, 8, {8192, 8192, 8192, 8192}, {8, 12, 6, 12}},    // two symbols
      {8, {2, 2, 2, 2}, 8, {8192, 8192, 8192, 8192}, {11, 11, 7, 12}},   // four symbols
      {8, {3, 2, 3, 2}, 8, {8192, 8192, 8192, 8192}, {12, 12, 12, 12}},  // mixed: two pairs
      {8, {6, 5, 6, 5}, 8, {8192, 8192, 8192, 8192}, {12, 11, 12, 10}},  // slot tables (level high)
      {24, {8, 5, 7, 6}, 8, {7200, 4096, 7200, 6000}, {12, 12, 9, 12}},  // the same, period 3
      {8, {5, 3, 5, 5}, 8, {8192, 8192, 8192, 8192}, {12, 12, 12, 12}},  // a search one: pairs
      {128, {3, 3, 3, 3}, 32, {32768, 32768, 32768, 32768}, {12, 10, 12, 11}},  // 32 lanes
      {96, {4, 4, 4, 4}, 32, {24576, 18432, 24576, 24576}, {12, 9, 12, 11}},    // period 3, unequal
      {32, {1, 1, 1, 1}, 32, {16384, 16384, 16384, 16384}, {7, 12, 10, 12}},    // two symbols
      {64, {3, 4, 3, 4}, 32, {16384, 16384, 16384, 16384}, {12, 12, 12, 12}},   // mixed: two pairs
  };
  expect_single_calls<4>(cases, 100,
                         [](auto p, auto t, size_t dim) { rans_decode_quad(p, t, dim); });
}

// A case of N payloads of one alphabet and length (first_n for the first), precisions from t.
template <size_t N>
LockstepCase<N> group_case(size_t dim, int bits, int lanes, size_t n, std::initializer_list<int> t,
                           size_t first_n = 0) {
  LockstepCase<N> c{dim, {}, lanes, {}, {}};
  std::fill(std::begin(c.bits), std::end(c.bits), bits);
  std::fill(std::begin(c.n), std::end(c.n), n);
  if (first_n != 0) c.n[0] = first_n;
  std::copy(t.begin(), t.begin() + N, c.t);
  return c;
}

TEST(RansGroup, UpToTenTablesDecodeAsSingleCalls) {
  const auto group = [](auto p, auto t, size_t dim) { rans_decode_group(p, t, dim); };
  const std::initializer_list<int> t = {12, 10, 11, 12, 9, 12, 11, 10, 12, 8};
  using C8 = LockstepCase<8>;
  C8 unequal = group_case<8>(8, 3, 8, 8192, t);
  std::copy_n(std::begin({8192, 6144, 8192, 4096, 8192, 8192, 2048, 8192}), 8, unequal.n);
  C8 mixed = group_case<8>(8, 3, 8, 8192, t);
  mixed.bits[6] = 2;
  const C8 eight[] = {
      group_case<8>(8, 3, 8, 8192, t),     // four short layers
      unequal,                             // unequal lengths
      group_case<8>(24, 4, 8, 7200, t),    // period 3, 16 symbols
      group_case<8>(8, 1, 8, 8192, t),     // two symbols
      group_case<8>(8, 2, 8, 8192, t),     // four symbols
      mixed,                               // mixed alphabets: two quads
      group_case<8>(8, 6, 8, 8192, t),     // slot tables: two quads
      group_case<8>(8, 3, 4, 2048, t),     // 4 lanes (64-token chunks)
      group_case<8>(64, 3, 32, 16384, t),  // 32 lanes: two quads
  };
  expect_single_calls<8>(eight, 300, group);
  const LockstepCase<10> ten[] = {
      group_case<10>(8, 3, 8, 8192, t),        // five short layers (stories260K's chunk)
      group_case<10>(8, 3, 8, 8192, t, 4096),  // a shorter first payload
      group_case<10>(8, 6, 8, 8192, t),        // slot tables: quads and a pair
      group_case<10>(8, 3, 4, 2048, t, 1024),  // 4 lanes
  };
  expect_single_calls<10>(ten, 400, group);
  const LockstepCase<6> six[] = {group_case<6>(8, 3, 8, 8192, t), group_case<6>(24, 2, 8, 7200, t)};
  expect_single_calls<6>(six, 500, group);
  // Odd counts: quads, a pair, one.
  const LockstepCase<7> seven[] = {group_case<7>(8, 3, 8, 8192, t)};
  expect_single_calls<7>(seven, 600, group);
  const LockstepCase<3> three[] = {group_case<3>(8, 3, 8, 8192, t)};
  expect_single_calls<3>(three, 700, group);
}

}  // namespace
}  // namespace cachegen::detail
