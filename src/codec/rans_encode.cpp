// Scalar rANS encoder. There is one encoder for every SIMD path: decoders must match its
// bytes, so the output is path-independent by construction.
#include <bit>
#include <cstring>
#include <memory>

#include "cachegen/runtime.h"
#include "codec/rans.h"
#include "codec/rans_lane_pattern.h"
#include "codec/scratch.h"
#include "core/wire.h"

namespace cachegen::detail {

namespace {

// One (channel, symbol) pair as the encoder uses it. The division x / f is a multiply by a
// rounded-up reciprocal: with m = ceil(2^44 / f), floor(x * m / 2^44) == floor(x / f) for every
// x < 2^32 and f <= 2^12 (the error x * (m - 2^44/f) / 2^44 stays below 2^-12 <= 1/f, less
// than the distance from x / f to the next integer). Encoding is then
// x' = x + start + q * (2^p - f), which equals (q << p) + (x mod f) + start.
struct EncSymbol {
  uint64_t rcp;    // ceil(2^44 / f)
  uint64_t x_max;  // renormalise when x >= x_max (up to 2^32: never)
  uint32_t bias;   // start
  uint32_t cmpl;   // 2^p - f
};

// ceil(2^44 / f) for f in 1..2^kMaxPrecision, computed once: a 64-bit division per table entry
// was a tenth of encoding a batch of 64-symbol channels (every chunk builds its tables).
const uint64_t* reciprocals() {
  struct Table {
    uint64_t v[(1u << kMaxPrecision) + 1];
    Table() {
      v[0] = 0;
      for (uint64_t f = 1; f <= (1u << kMaxPrecision); ++f)
        v[f] = ((uint64_t{1} << 44) + f - 1) / f;
    }
  };
  static const Table table;
  return table.v;
}

// m = ceil(2^(32+L) / f) with L = ceil(log2 f), from rcp = ceil(2^44 / f): ceilings of
// divisions nest. 2^32 <= m < 2^33 (the narrow encoders' multiplier, see RansEncodeTables).
struct Magic {
  uint64_t m;
  int L;
};
Magic magic_of(uint64_t rcp, uint32_t f) {
  const int L = std::bit_width(f - 1);
  const int down = 12 - L;
  return {(rcp + (uint64_t{1} << down) - 1) >> down, L};
}

}  // namespace

void rans_encode(std::span<const uint8_t> symbols, size_t dim,
                 std::span<const ChannelTable> channels, int precision, int n_lanes,
                 std::vector<uint8_t>& out) {
  const size_t n = symbols.size();
  const size_t n_syms = channels.empty() ? 0 : channels[0].freq.size();
  const uint64_t x_max_unit = static_cast<uint64_t>(kRansLow >> precision) << 16;
  std::vector<EncSymbol> table(dim * n_syms);
  const uint64_t* const rcp = reciprocals();
  for (size_t c = 0; c < dim; ++c) {
    const int up = precision - channels[c].t;
    for (size_t s = 0; s < n_syms; ++s) {
      EncSymbol& e = table[c * n_syms + s];
      const uint32_t f = static_cast<uint32_t>(channels[c].freq[s]) << up;
      if (f == 0) {
        e = EncSymbol{0, 0, 0, 0};  // absent: never coded
        continue;
      }
      e.rcp = rcp[f];  // f <= 2^precision <= 2^kMaxPrecision
      e.x_max = x_max_unit * f;
      e.bias = static_cast<uint32_t>(channels[c].cum[s]) << up;
      e.cmpl = (1u << precision) - f;
    }
  }
  uint32_t x[kMaxLanes];
  for (int l = 0; l < n_lanes; ++l) x[l] = kRansLow;
  // Words are written backwards into a buffer of the worst-case size (one word per element)
  // and then copied once, already in decoding order. Per-thread scratch, not zero-filled:
  // the slots the copy below reads have all been written.
  uint16_t* const words =
      reinterpret_cast<uint16_t*>(scratch_bytes((n + 1) * sizeof(uint16_t), Scratch::rans_words));
  const size_t words_end = n + 1;
  size_t w_pos = words_end;
  // 32- and 8-lane payloads: an AVX-512 encoder takes every full step of n_lanes elements;
  // the scalar loop below codes the partial step at the end (coded first).
  const auto lanes = static_cast<size_t>(n_lanes);
  const SimdPath path = simd_path();
  const bool simd = (lanes == kMaxLanes || lanes == kNarrowLanes) && n >= lanes &&
                    (path == SimdPath::avx512 || path == SimdPath::avx2);
  const size_t scalar_end = simd ? n - n % lanes : 0;
  size_t lane = n == 0 ? 0 : (n - 1) % static_cast<size_t>(n_lanes);
  size_t channel = n == 0 ? 0 : (n - 1) % dim;
  for (size_t i = n; i-- > scalar_end;) {
    const EncSymbol& e = table[channel * n_syms + symbols[i]];
    uint32_t s = x[lane];
    // Branch-free renormalisation: whether a lane emits a word is data-dependent (about one
    // symbol in ten), so a branch mispredicts often. The slot below w_pos always exists.
    const uint32_t emit = static_cast<uint64_t>(s) >= e.x_max ? 1u : 0u;
    words[w_pos - 1] = static_cast<uint16_t>(s);
    w_pos -= emit;
    s >>= 16 * emit;
    const uint32_t q = static_cast<uint32_t>((static_cast<unsigned __int128>(s) * e.rcp) >> 44);
    x[lane] = s + e.bias + q * e.cmpl;
    lane = lane == 0 ? static_cast<size_t>(n_lanes) - 1 : lane - 1;
    channel = channel == 0 ? dim - 1 : channel - 1;
  }
  if (simd && path == SimdPath::avx2) {
    std::vector<uint32_t> entry(table.size(), 0), magic(table.size(), 0);
    for (size_t i = 0; i < table.size(); ++i) {
      if (table[i].rcp == 0) continue;  // absent: never coded
      const uint32_t f = (1u << precision) - table[i].cmpl;
      const Magic mg = magic_of(table[i].rcp, f);
      entry[i] = f | table[i].bias << 13 | static_cast<uint32_t>(mg.L > 0 ? mg.L - 1 : 0) << 25;
      magic[i] = static_cast<uint32_t>(mg.m - (uint64_t{1} << 32));
    }
    const RansEncodeTables t{nullptr,   nullptr,      nullptr,     static_cast<int>(n_syms),
                             precision, entry.data(), magic.data()};
    w_pos = rans_encode_avx2(t, symbols.data(), dim, scalar_end, n_lanes, x, words, w_pos);
  } else if (simd && lanes == kMaxLanes) {
    std::vector<uint32_t> packed(table.size());
    std::vector<double> inv_freq(table.size());
    for (size_t i = 0; i < table.size(); ++i) {
      const uint32_t f = (1u << precision) - table[i].cmpl;
      packed[i] = f | (table[i].bias << 16);
      inv_freq[i] = table[i].rcp == 0 ? 0.0 : 1.0 / static_cast<double>(f);
    }
    const RansEncodeTables t{packed.data(), inv_freq.data(), nullptr, static_cast<int>(n_syms),
                             precision};
    w_pos = rans_encode_avx512(t, symbols.data(), dim, scalar_end, x, words, w_pos);
  } else if (simd) {
    std::vector<uint64_t> narrow(table.size());
    for (size_t i = 0; i < table.size(); ++i) {
      if (table[i].rcp == 0) continue;  // absent: never coded
      const uint32_t f = (1u << precision) - table[i].cmpl;
      const Magic mg = magic_of(table[i].rcp, f);
      narrow[i] = (mg.m - (uint64_t{1} << 32)) | uint64_t{f} << 32 | uint64_t{table[i].bias} << 45 |
                  uint64_t(mg.L) << 58;
    }
    const RansEncodeTables t{nullptr, nullptr, narrow.data(), static_cast<int>(n_syms), precision};
    w_pos = rans_encode_avx512_lanes8(t, symbols.data(), dim, scalar_end, x, words, w_pos);
  }
  const size_t n_words = words_end - w_pos;
  const size_t at = out.size();
  out.resize(at + static_cast<size_t>(n_lanes) * 4 + n_words * 2);
  uint8_t* o = out.data() + at;
  for (int l = 0; l < n_lanes; ++l, o += 4) wire::store_le(o, x[l], 4);
  for (size_t w = w_pos; w < words_end; ++w) {
    *o++ = static_cast<uint8_t>(words[w]);
    *o++ = static_cast<uint8_t>(words[w] >> 8);
  }
}

}  // namespace cachegen::detail
