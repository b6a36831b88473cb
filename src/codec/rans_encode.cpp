// Scalar rANS encoder. There is one encoder for every SIMD path: decoders must match its
// bytes, so the output is path-independent by construction.
#include <algorithm>
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

// Calls f(entry, frequency, start) for every (channel, symbol) entry of `channels` at
// `precision` (frequency 0: absent, never coded).
template <typename F>
void for_each_entry(std::span<const ChannelTable> channels, size_t dim, size_t n_syms,
                    int precision, F&& f) {
  for (size_t c = 0; c < dim; ++c) {
    const int up = precision - channels[c].t;
    const uint16_t* const freq = channels[c].freq.data();
    const uint16_t* const cum = channels[c].cum.data();
    for (size_t s = 0; s < n_syms; ++s) {
      f(c * n_syms + s, static_cast<uint32_t>(freq[s]) << up, static_cast<uint32_t>(cum[s]) << up);
    }
  }
}

// The AVX2 encoder's two 32-bit entries of `channels` (RansEncodeTables).
void wide_entries(std::span<const ChannelTable> channels, size_t dim, size_t n_syms, int precision,
                  uint32_t* entry, uint32_t* magic) {
  const uint64_t* const bases = narrow_bases();
  for_each_entry(channels, dim, n_syms, precision, [&](size_t i, uint32_t f, uint32_t start) {
    if (f == 0) {
      entry[i] = magic[i] = 0;
      return;
    }
    const uint64_t base = bases[f];
    const auto L = static_cast<uint32_t>(base >> 58);
    entry[i] = avx2_entry_of(f, start, L);
    magic[i] = static_cast<uint32_t>(base);
  });
}

// One payload as rans_encode codes it: its partial step at the end (coded first) by begin(),
// its full steps by a SIMD kernel (simd_steps, or a pair's), its bytes written by finish().
struct Payload {
  std::span<const uint8_t> symbols;
  size_t dim = 0;
  std::span<const ChannelTable> channels;
  int precision = 0, n_lanes = 0;
  const RansWideTables* wide = nullptr;  // prebuilt AVX2 tables, or null
  size_t n_syms = 0, n_entries = 0;
  bool simd = false;      // its full steps for a SIMD kernel
  size_t scalar_end = 0;  // where the scalar loop stops (the kernels' end)
  uint16_t* words = nullptr;
  size_t words_end = 0, w_pos = 0;
  uint32_t x[kMaxLanes];

  // for_each_entry over its channels.
  template <typename F>
  void for_each_entry(F&& f) const {
    cachegen::detail::for_each_entry(channels, dim, n_syms, precision, f);
  }
  // The AVX-512 kernels' 64-bit entries (RansEncodeTables::narrow), not zero-filled first:
  // every entry is written once (absent ones, never read, as 0).
  std::unique_ptr<uint64_t[]> narrow_entries() const {
    auto narrow = std::make_unique_for_overwrite<uint64_t[]>(n_entries);
    narrow_entries_into(narrow.get());
    return narrow;
  }
  void narrow_entries_into(uint64_t* narrow) const {
    const uint64_t* const bases = narrow_bases();
    for_each_entry([&](size_t i, uint32_t f, uint32_t start) {
      narrow[i] =
          f == 0 ? 0 : bases[f] | uint64_t{(1u << precision) - f} << 32 | uint64_t{start} << 45;
    });
  }
  // Its side of the 4-lane kernel, entries from `base`.
  RansLanes4 lanes4(size_t base) {
    return RansLanes4{symbols.data(), dim, n_syms, scalar_end, precision, base, x, words, w_pos};
  }
};

// The entry of frequency f and cumulative start at `precision` (rcp: reciprocals()).
EncSymbol enc_symbol(const uint64_t* rcp, uint32_t f, uint32_t start, int precision) {
  if (f == 0) return EncSymbol{0, 0, 0, 0};  // absent: never coded
  // f <= 2^precision <= 2^kMaxPrecision
  const uint64_t x_max_unit = static_cast<uint64_t>(kRansLow >> precision) << 16;
  return EncSymbol{rcp[f], x_max_unit * f, start, (1u << precision) - f};
}

// Sets the payload up and codes what no SIMD kernel takes: its partial step at the end (coded
// first), or all of it without a kernel. Its words go to `slot` of this thread's scratch.
// paired4: a 4-lane payload coded with another on one 8-lane AVX-512 step (alone, half the
// step idle, it took the scalar loop's time: two of 2,048 codes 11.6 against 11.5 us).
void begin(Payload& p, Scratch slot, bool paired4 = false) {
  const size_t n = p.symbols.size();
  p.n_syms = p.channels.empty() ? 0 : p.channels[0].freq.size();
  p.n_entries = p.dim * p.n_syms;
  // 32- and 8-lane payloads: an AVX-512 or AVX2 encoder takes every full step of n_lanes
  // elements from its own tables, built straight from the channels; the scalar loop below
  // codes the partial step at the end (coded first) with entries made as it goes. Without
  // one, the scalar loop codes everything from a table of every entry.
  const auto lanes = static_cast<size_t>(p.n_lanes);
  const SimdPath path = simd_path();
  p.simd = (lanes == kMaxLanes || lanes == kNarrowLanes) && n >= lanes &&
           (path == SimdPath::avx512 || path == SimdPath::avx2);
  p.simd = p.simd || (paired4 && lanes == 4 && n >= lanes && path == SimdPath::avx512);
  p.scalar_end = p.simd ? n - n % lanes : 0;
  const uint64_t* const rcp = reciprocals();
  std::unique_ptr<EncSymbol[]> table;
  if (!p.simd) {
    table = std::make_unique_for_overwrite<EncSymbol[]>(p.n_entries);
    p.for_each_entry([&](size_t i, uint32_t f, uint32_t start) {
      table[i] = enc_symbol(rcp, f, start, p.precision);
    });
  }
  std::fill(p.x, p.x + kMaxLanes, kRansLow);
  // Words are written backwards into a buffer of the worst-case size (one word per element)
  // and then copied once, already in decoding order. Per-thread scratch, not zero-filled:
  // the slots the copy in finish() reads have all been written.
  uint16_t* const words =
      reinterpret_cast<uint16_t*>(scratch_bytes((n + 1) * sizeof(uint16_t), slot));
  p.words = words;
  p.words_end = n + 1;
  // (The loop on locals: the words' stores may alias p's members.)
  const uint8_t* const symbols = p.symbols.data();
  const ChannelTable* const channels = p.channels.data();
  const size_t dim = p.dim, n_syms = p.n_syms, scalar_end = p.scalar_end;
  const int precision = p.precision;
  uint32_t x[kMaxLanes];
  std::copy(p.x, p.x + kMaxLanes, x);
  size_t w_pos = p.words_end;
  size_t lane = n == 0 ? 0 : (n - 1) % lanes;
  size_t channel = n == 0 ? 0 : (n - 1) % dim;
  for (size_t i = n; i-- > scalar_end;) {
    const size_t sym = symbols[i];
    const ChannelTable& ch = channels[channel];
    const int up = precision - ch.t;
    const EncSymbol e = table ? table[channel * n_syms + sym]
                              : enc_symbol(rcp, static_cast<uint32_t>(ch.freq[sym]) << up,
                                           static_cast<uint32_t>(ch.cum[sym]) << up, precision);
    uint32_t s = x[lane];
    // Branch-free renormalisation: whether a lane emits a word is data-dependent (about one
    // symbol in ten), so a branch mispredicts often. The slot below w_pos always exists.
    const uint32_t emit = static_cast<uint64_t>(s) >= e.x_max ? 1u : 0u;
    words[w_pos - 1] = static_cast<uint16_t>(s);
    w_pos -= emit;
    s >>= 16 * emit;
    const uint32_t q = static_cast<uint32_t>((static_cast<unsigned __int128>(s) * e.rcp) >> 44);
    x[lane] = s + e.bias + q * e.cmpl;
    lane = lane == 0 ? lanes - 1 : lane - 1;
    channel = channel == 0 ? dim - 1 : channel - 1;
  }
  std::copy(x, x + kMaxLanes, p.x);
  p.w_pos = w_pos;
}

// Two 4-lane payloads' full steps (b null: a's alone, where the other was too short for a step)
// on AVX-512's packed kernel, from one table of both payloads' entries and a 0 entry.
void lanes4_steps(Payload& a, Payload* b) {
  const size_t n = a.n_entries + (b ? b->n_entries : 0);
  const auto entries = std::make_unique_for_overwrite<uint64_t[]>(n + 1);
  a.narrow_entries_into(entries.get());
  if (b) b->narrow_entries_into(entries.get() + a.n_entries);
  entries[n] = 0;
  RansLanes4 sa = a.lanes4(0), sb = b ? b->lanes4(a.n_entries) : RansLanes4{};
  rans_encode_avx512_lanes4_pair(entries.get(), n, sa, sb);
  a.w_pos = sa.w_pos;
  if (b) b->w_pos = sb.w_pos;
}

// The payload's full steps [0, scalar_end) on its SIMD kernel.
void simd_steps(Payload& p) {
  if (!p.simd) return;
  if (p.n_lanes == 4) return lanes4_steps(p, nullptr);
  const auto lanes = static_cast<size_t>(p.n_lanes);
  const SimdPath path = simd_path();
  const uint8_t* const symbols = p.symbols.data();
  // AVX2 tables, also the AVX-512 encoder's for most 32-lane payloads (see its 16-lane kernel).
  const bool lanes16 = path == SimdPath::avx512 && lanes == kMaxLanes &&
                       rans_encode_avx512_takes16(p.dim, static_cast<int>(p.n_syms));
  if (path == SimdPath::avx2 || lanes16) {
    std::unique_ptr<uint32_t[]> entry, magic;
    if (p.wide == nullptr) {
      entry = std::make_unique_for_overwrite<uint32_t[]>(p.n_entries);
      magic = std::make_unique_for_overwrite<uint32_t[]>(p.n_entries);
      wide_entries(p.channels, p.dim, p.n_syms, p.precision, entry.get(), magic.get());
    }
    const RansEncodeTables t{nullptr, static_cast<int>(p.n_syms), p.precision,
                             p.wide ? p.wide->entry.data() : entry.get(),
                             p.wide ? p.wide->magic.data() : magic.get()};
    p.w_pos =
        lanes16
            ? rans_encode_avx512_16(t, symbols, p.dim, p.scalar_end, p.x, p.words, p.w_pos)
            : rans_encode_avx2(t, symbols, p.dim, p.scalar_end, p.n_lanes, p.x, p.words, p.w_pos);
  } else {
    const auto narrow = p.narrow_entries();
    const RansEncodeTables t{narrow.get(), static_cast<int>(p.n_syms), p.precision};
    p.w_pos =
        lanes == kMaxLanes
            ? rans_encode_avx512(t, symbols, p.dim, p.scalar_end, p.x, p.words, p.w_pos)
            : rans_encode_avx512_lanes8(t, symbols, p.dim, p.scalar_end, p.x, p.words, p.w_pos);
  }
}

// The final states and the words, in decoding order, into out from byte `at`.
void finish(const Payload& p, std::vector<uint8_t>& out, size_t at) {
  const size_t n_words = p.words_end - p.w_pos;
  out.resize(at + static_cast<size_t>(p.n_lanes) * 4 + n_words * 2);
  uint8_t* o = out.data() + at;
  for (int l = 0; l < p.n_lanes; ++l, o += 4) wire::store_le(o, p.x[l], 4);
  wire::store_le16_array(o, p.words + p.w_pos, n_words);
}

Payload payload_of(const RansJob& job) {
  if (job.at > job.out->size()) invalid("rans_encode: at past the output");
  Payload p;
  p.symbols = job.symbols;
  p.dim = job.dim;
  p.channels = job.channels;
  p.precision = job.precision;
  p.n_lanes = job.n_lanes;
  p.wide = job.wide;
  return p;
}

}  // namespace

void RansWideTables::build(std::span<const ChannelTable> channels, size_t dim, int precision) {
  const size_t n_syms = channels.empty() ? 0 : channels[0].freq.size();
  entry.resize(dim * n_syms);
  magic.resize(dim * n_syms);
  wide_entries(channels, dim, n_syms, precision, entry.data(), magic.data());
}

bool rans_wide_tables_used(size_t dim, size_t n_syms, int n_lanes) {
  const SimdPath path = simd_path();
  const auto lanes = static_cast<size_t>(n_lanes);
  if (path == SimdPath::avx2) return lanes == kMaxLanes || lanes == kNarrowLanes;
  return path == SimdPath::avx512 && lanes == kMaxLanes &&
         rans_encode_avx512_takes16(dim, static_cast<int>(n_syms));
}

void rans_encode(const RansJob& job) {
  Payload p = payload_of(job);
  begin(p, Scratch::rans_words);
  simd_steps(p);
  finish(p, *job.out, job.at);
}

void rans_encode(std::span<const uint8_t> symbols, size_t dim,
                 std::span<const ChannelTable> channels, int precision, int n_lanes,
                 std::vector<uint8_t>& out, size_t at) {
  rans_encode(RansJob{symbols, dim, channels, precision, n_lanes, &out, at});
}

void rans_encode_pair(const RansJob& a, const RansJob& b) {
  Payload p[2] = {payload_of(a), payload_of(b)};
  const bool paired4 = a.n_lanes == 4 && b.n_lanes == 4;
  begin(p[0], Scratch::rans_words, paired4);
  begin(p[1], Scratch::rans_words_pair, paired4);
  // Two 8-lane payloads on AVX-512 in lockstep (each one dependency chain), else one by one.
  if (simd_path() == SimdPath::avx512 && p[0].simd && p[1].simd &&
      p[0].n_lanes == static_cast<int>(kNarrowLanes) &&
      p[1].n_lanes == static_cast<int>(kNarrowLanes)) {
    const auto narrow_a = p[0].narrow_entries(), narrow_b = p[1].narrow_entries();
    const RansEncodeTables ta{narrow_a.get(), static_cast<int>(p[0].n_syms), p[0].precision};
    const RansEncodeTables tb{narrow_b.get(), static_cast<int>(p[1].n_syms), p[1].precision};
    rans_encode_avx512_lanes8_pair(ta, p[0].symbols.data(), p[0].dim, p[0].scalar_end, p[0].x,
                                   p[0].words, p[0].w_pos, tb, p[1].symbols.data(), p[1].dim,
                                   p[1].scalar_end, p[1].x, p[1].words, p[1].w_pos);
  } else if (p[0].simd && p[1].simd && p[0].n_lanes == 4 && p[1].n_lanes == 4) {
    lanes4_steps(p[0], &p[1]);  // one 8-lane step (AVX-512 only takes 4-lane payloads)
  } else {
    simd_steps(p[0]);
    simd_steps(p[1]);
  }
  finish(p[0], *a.out, a.at);
  finish(p[1], *b.out, b.at);
}

}  // namespace cachegen::detail
