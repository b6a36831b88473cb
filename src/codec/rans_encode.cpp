// Scalar rANS encoder. There is one encoder for every SIMD path: decoders must match its
// bytes, so the output is path-independent by construction.
#include <bit>
#include <cstring>
#include <memory>

#include "cachegen/runtime.h"
#include "codec/rans.h"
#include "codec/rans_lane_pattern.h"
#include "codec/scratch.h"
#include "core/checks.h"
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

// The SIMD encoders' multipliers and shifts by frequency f in 1..2^kMaxPrecision:
// m - 2^32 | L << 58 (RansEncodeTables::narrow without its 2^p - f and start; the AVX2 tables
// take the same m and L), with L = ceil(log2 f) and m = ceil(2^(32+L) / f) from ceil(2^44 / f)
// (ceilings of divisions nest), 2^32 <= m < 2^33. Computed once: per entry they were most of
// the tables' construction (every chunk builds its tables; 5-6% of a level-high file encode).
const uint64_t* narrow_bases() {
  struct Table {
    uint64_t v[(1u << kMaxPrecision) + 1];
    Table() {
      const uint64_t* const rcp = reciprocals();
      v[0] = 0;
      for (uint32_t f = 1; f <= (1u << kMaxPrecision); ++f) {
        const int L = std::bit_width(f - 1);
        const int down = kMaxPrecision - L;
        const uint64_t m = (rcp[f] + (uint64_t{1} << down) - 1) >> down;
        v[f] = (m - (uint64_t{1} << 32)) | uint64_t(L) << 58;
      }
    }
  };
  static const Table table;
  return table.v;
}

}  // namespace

void rans_encode(std::span<const uint8_t> symbols, size_t dim,
                 std::span<const ChannelTable> channels, int precision, int n_lanes,
                 std::vector<uint8_t>& out, size_t at) {
  if (at > out.size()) invalid("rans_encode: at past the output");
  const size_t n = symbols.size();
  const size_t n_syms = channels.empty() ? 0 : channels[0].freq.size();
  const size_t n_entries = dim * n_syms;
  const uint64_t x_max_unit = static_cast<uint64_t>(kRansLow >> precision) << 16;
  const uint64_t* const rcp = reciprocals();
  // Calls f(entry, frequency, start) for every (channel, symbol) entry at `precision`
  // (frequency 0: absent, never coded).
  const auto for_each_entry = [&](auto&& f) {
    for (size_t c = 0; c < dim; ++c) {
      const int up = precision - channels[c].t;
      const uint16_t* const freq = channels[c].freq.data();
      const uint16_t* const cum = channels[c].cum.data();
      for (size_t s = 0; s < n_syms; ++s) {
        f(c * n_syms + s, static_cast<uint32_t>(freq[s]) << up,
          static_cast<uint32_t>(cum[s]) << up);
      }
    }
  };
  const auto enc_symbol = [&](uint32_t f, uint32_t start) {
    if (f == 0) return EncSymbol{0, 0, 0, 0};  // absent: never coded
    // f <= 2^precision <= 2^kMaxPrecision
    return EncSymbol{rcp[f], x_max_unit * f, start, (1u << precision) - f};
  };
  // 32- and 8-lane payloads: an AVX-512 or AVX2 encoder takes every full step of n_lanes
  // elements from its own tables, built straight from the channels; the scalar loop below
  // codes the partial step at the end (coded first) with entries made as it goes. Without
  // one, the scalar loop codes everything from a table of every entry.
  const auto lanes = static_cast<size_t>(n_lanes);
  const SimdPath path = simd_path();
  const bool simd = (lanes == kMaxLanes || lanes == kNarrowLanes) && n >= lanes &&
                    (path == SimdPath::avx512 || path == SimdPath::avx2);
  const size_t scalar_end = simd ? n - n % lanes : 0;
  std::unique_ptr<EncSymbol[]> table;
  if (!simd) {
    table = std::make_unique_for_overwrite<EncSymbol[]>(n_entries);
    for_each_entry([&](size_t i, uint32_t f, uint32_t start) { table[i] = enc_symbol(f, start); });
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
  size_t lane = n == 0 ? 0 : (n - 1) % static_cast<size_t>(n_lanes);
  size_t channel = n == 0 ? 0 : (n - 1) % dim;
  for (size_t i = n; i-- > scalar_end;) {
    const size_t sym = symbols[i];
    const ChannelTable& ch = channels[channel];
    const int up = precision - ch.t;
    const EncSymbol e = table ? table[channel * n_syms + sym]
                              : enc_symbol(static_cast<uint32_t>(ch.freq[sym]) << up,
                                           static_cast<uint32_t>(ch.cum[sym]) << up);
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
  // The SIMD tables, not zero-filled first: every entry is written once (absent ones, never
  // read, as 0).
  const uint64_t* const bases = simd ? narrow_bases() : nullptr;
  // AVX2 tables, also the AVX-512 encoder's for most 32-lane payloads (see its 16-lane kernel).
  const bool lanes16 = simd && path == SimdPath::avx512 && lanes == kMaxLanes &&
                       rans_encode_avx512_takes16(dim, static_cast<int>(n_syms));
  if (simd && (path == SimdPath::avx2 || lanes16)) {
    const auto entry = std::make_unique_for_overwrite<uint32_t[]>(n_entries);
    const auto magic = std::make_unique_for_overwrite<uint32_t[]>(n_entries);
    for_each_entry([&](size_t i, uint32_t f, uint32_t start) {
      if (f == 0) {
        entry[i] = magic[i] = 0;
        return;
      }
      const uint64_t base = bases[f];
      const auto L = static_cast<uint32_t>(base >> 58);
      entry[i] = f | start << 13 | (L > 0 ? L - 1 : 0) << 25;
      magic[i] = static_cast<uint32_t>(base);
    });
    const RansEncodeTables t{nullptr, static_cast<int>(n_syms), precision, entry.get(),
                             magic.get()};
    w_pos = lanes16
                ? rans_encode_avx512_16(t, symbols.data(), dim, scalar_end, x, words, w_pos)
                : rans_encode_avx2(t, symbols.data(), dim, scalar_end, n_lanes, x, words, w_pos);
  } else if (simd) {
    const auto narrow = std::make_unique_for_overwrite<uint64_t[]>(n_entries);
    for_each_entry([&](size_t i, uint32_t f, uint32_t start) {
      narrow[i] =
          f == 0 ? 0 : bases[f] | uint64_t{(1u << precision) - f} << 32 | uint64_t{start} << 45;
    });
    const RansEncodeTables t{narrow.get(), static_cast<int>(n_syms), precision};
    w_pos = lanes == kMaxLanes
                ? rans_encode_avx512(t, symbols.data(), dim, scalar_end, x, words, w_pos)
                : rans_encode_avx512_lanes8(t, symbols.data(), dim, scalar_end, x, words, w_pos);
  }
  const size_t n_words = words_end - w_pos;
  out.resize(at + static_cast<size_t>(n_lanes) * 4 + n_words * 2);
  uint8_t* o = out.data() + at;
  for (int l = 0; l < n_lanes; ++l, o += 4) wire::store_le(o, x[l], 4);
  wire::store_le16_array(o, words + w_pos, n_words);
}

}  // namespace cachegen::detail
