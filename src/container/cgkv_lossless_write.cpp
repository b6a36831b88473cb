// Writing lossless fp16 tensor data: method 2 (rotated rows, repeated rows by reference,
// anchored rANS high bytes, raw or rANS low bytes) and, when asked, byte planes + zstd. The
// format and what the reader shares: lossless_internal.h.
#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numbers>
#include <string>

#include "cachegen/codec.h"
#include "cachegen/error.h"
#include "codec/channel_model.h"
#include "codec/stream_format.h"
#include "container/cgkv_internal.h"
#include "container/lossless_internal.h"
#include "core/huge_pages.h"
#include "core/wire.h"

namespace cachegen::detail {
namespace {

// Method 2 codes the low plane with rANS only when its pooled byte entropy is below this (bits):
// real KV mantissas sit at 7.95-7.99, where per-channel tables cost more than they save.
constexpr double kLowStreamEntropy = 7.9;
// The low bytes counted for that estimate first, and the margin above it past which the
// estimate stands (counting every low byte was ~7% of a lossless encode of 128-wide rows). The
// sample's estimate is corrected for its bias (Miller-Madow: (symbols seen - 1) / (2 n ln 2),
// 0.045 bits at 4,096 near-uniform bytes, whose estimate then varies by ~0.004 bits).
constexpr size_t kLowSampleValues = 4096;
constexpr double kLowSampleMargin = 0.05;
// Below this ratio of the high bytes' estimated bits (per-channel tables over one pooled table),
// only the per-channel form is coded (and likewise for form 2, below): its coded size came at
// 0.57-0.84 of the pooled table's where the estimate said 0.69-0.92 (the bench's synthetic set;
// per-channel models may code token deltas, which the estimate leaves out), and coding the
// pooled table too was a fifth of that set's lossless encode.
constexpr double kSure = 0.95;
// Values (in whole rows) whose differences from the row above estimate the bits of high form 2.
constexpr size_t kDeltaSampleValues = 1024;

std::vector<uint8_t> planes_zstd(std::span<const Half> values, int zstd_level) {
  const size_t n = values.size();
  std::vector<uint8_t> planes(2 * n);
  for (size_t i = 0; i < n; ++i) {
    planes[i] = static_cast<uint8_t>(values[i].bits & 0xff);
    planes[n + i] = static_cast<uint8_t>(values[i].bits >> 8);
  }
  std::vector<uint8_t> out(1 + ZSTD_compressBound(planes.size()));
  out[0] = kPlanesZstd;
  const size_t r =
      ZSTD_compress(out.data() + 1, out.size() - 1, planes.data(), planes.size(), zstd_level);
  if (ZSTD_isError(r)) {
    throw Error(ErrorCode::invalid_argument,
                std::string("zstd compression failed: ") + ZSTD_getErrorName(r));
  }
  out.resize(1 + r);
  return out;
}

// The 8-bit symbols symbol(value, c) of rows of `width` values (c = the value's position in its
// row) as a code stream of `dim` channels (width, or 1 for one pooled table), unit parameters
// (they are unused).
// (Restrict pointers: a byte store may alias anything, so without them every symbol reloaded
// its inputs and the loop stayed scalar.)
template <class Symbol>
void fill_symbols(const Half* __restrict values, size_t n, size_t width, Symbol symbol,
                  uint8_t* __restrict codes) {
  for (size_t i = 0; i < n; i += width) {
    for (size_t c = 0; c < width; ++c) codes[i + c] = symbol(values[i + c], c);
  }
}

template <class Symbol>
CodeStream plane_stream(std::span<const Half> values, size_t width, size_t dim, Symbol symbol) {
  CodeStream s;
  s.n_rows = values.size() / dim;
  s.dim = dim;
  s.bits = 8;
  s.group_size = s.n_rows < kMaxGroupSize ? s.n_rows : kMaxGroupSize;
  const size_t padded = s.n_groups() * s.group_size;
  s.codes.resize(padded * dim);
  fill_symbols(values.data(), values.size(), width, symbol, s.codes.data());
  for (size_t i = values.size(); i < s.codes.size(); ++i) s.codes[i] = s.codes[i - dim];
  s.scale.assign(s.n_groups() * dim, 1.0f);
  s.zero.assign(s.n_groups() * dim, 0.0f);
  return s;
}

// The byte statistics the encoder's choices need, from one pass over the rows: per channel a
// histogram of the high bytes (sign and magnitude), and one of the low bytes of the first
// low_rows rows. (Three passes, one per choice below, were a fifth of a lossless encode.)
struct ByteHistograms {
  size_t width = 0, n_rows = 0, low_rows = 0;
  std::vector<uint32_t> high;  // [channel][high byte] (a channel has at most 2^24 rows)
  uint64_t low[256] = {};
  // Every row's high bytes, the low bytes of the first min(low_rows_wanted, n_rows) rows.
  ByteHistograms(std::span<const Half> rows, size_t width_, size_t low_rows_wanted)
      : width(width_),
        n_rows(rows.size() / width_),
        low_rows(std::min(low_rows_wanted, n_rows)),
        high(width_ * 256, 0) {
    count<true, true>(rows, 0, low_rows);
    count<true, false>(rows, low_rows, n_rows);
  }
  // The low bytes of the rows after the first low_rows.
  void count_all_low(std::span<const Half> rows) {
    count<false, true>(rows, low_rows, n_rows);
    low_rows = n_rows;
  }

 private:
  template <bool kHigh, bool kLow>
  void count(std::span<const Half> rows, size_t row0, size_t row1) {
    // Four low-byte tables in turn, so that repeats of a byte do not wait on one counter;
    // channels in blocks of 16, whose high-byte tables (16 KB) stay in L1 (one table of 64..128
    // channels, 64..128 KB, missed it on most values).
    std::vector<uint64_t> low4(kLow ? 4 * 256 : 0, 0);
    const uint8_t* __restrict const bytes = reinterpret_cast<const uint8_t*>(rows.data());
    for (size_t c0 = 0; c0 < width; c0 += 16) {
      const size_t c1 = std::min(width, c0 + 16);
      for (size_t i = row0 * width; i < row1 * width; i += width) {
        size_t c = c0;
        // Four values at a time on little-endian hosts, each byte loaded on its own (a load
        // per byte, where shifting bytes out of a wider load took two more instructions a
        // value); c0 is a multiple of 16, so value k of the four goes to low-byte table k, as
        // c & 3 says.
        for (; std::endian::native == std::endian::little && c + 4 <= c1; c += 4) {
          const uint8_t* const b = bytes + 2 * (i + c);  // low, high, low, high, ...
          if (kHigh) {
            uint32_t* h = high.data() + c * 256;
            ++h[b[1]];
            ++h[256 + b[3]];
            ++h[512 + b[5]];
            ++h[768 + b[7]];
          }
          if (kLow) {
            ++low4[b[0]];
            ++low4[256 + b[2]];
            ++low4[512 + b[4]];
            ++low4[768 + b[6]];
          }
        }
        for (; c < c1; ++c) {
          const uint16_t b = rows[i + c].bits;
          if (kHigh) ++high[c * 256 + (b >> 8)];
          if (kLow) ++low4[(c & 3) * 256 + (b & 0xff)];
        }
      }
    }
    if (kLow) {
      for (size_t v = 0; v < 256; ++v)
        low[v] += low4[v] + low4[256 + v] + low4[512 + v] + low4[768 + v];
    }
  }
};

// log2(n) of a count: std::log2's values from a table below 4097 (log2 calls were a tenth of a
// lossless encode), std::log2 past them.
// (Callers hold the table: a function-local static's guard per value cost more than log2.)
struct Log2Table {
  std::vector<double> t;
  double operator()(uint64_t n) const {
    return n < t.size() ? t[n] : std::log2(static_cast<double>(n));
  }
};
const Log2Table& log2_counts() {
  static const Log2Table table{[] {
    std::vector<double> t(4097, 0.0);
    for (size_t k = 1; k < t.size(); ++k) t[k] = std::log2(static_cast<double>(k));
    return t;
  }()};
  return table;
}

// Bits of n occurrences of a symbol among `total` (log2_total = log2(total)) at its empirical
// probability, plus ~6 bits to list the symbol.
double symbol_bits(const Log2Table& lg, uint64_t n, double log2_total) {
  return n ? 6 + static_cast<double>(n) * (log2_total - lg(n)) : 0.0;
}

// Bits per symbol of a 256-bin histogram totalling n, its empirical entropy, plus with `corrected`
// the Miller-Madow correction of a sample's estimate ((symbols seen - 1) / (2 n ln 2)); `seen`
// (optional) gets the symbols present.
template <class Count>
double entropy_per_symbol(const Count (&count)[256], uint64_t n, bool corrected,
                          size_t* seen_out = nullptr) {
  const Log2Table& lg = log2_counts();
  const double log2_n = lg(n);
  double bits = 0;
  size_t seen = 0;
  for (const Count c : count) bits += static_cast<double>(c) * (log2_n - lg(c)), seen += c != 0;
  if (seen_out) *seen_out = seen;
  const double h_bits = bits / static_cast<double>(n);
  return corrected && seen > 1 ? h_bits + static_cast<double>(seen - 1) /
                                              (2.0 * std::numbers::ln2 * static_cast<double>(n))
                               : h_bits;
}

// Estimated bits of the anchored high bytes under a table per channel and under one pooled table
// (empirical entropy plus ~6 bits per listed symbol): the per-channel form is only tried
// where it may win, as choosing a model per channel costs more time than coding the symbols. A
// channel's symbol histogram is its high-byte histogram permuted (high_symbol), which leaves its
// bits as they are; their sum, the pooled table's histogram, is left in `pooled`.
struct HighBits {
  double per_channel = 0, pooled = 0;
};
HighBits high_bits(const ByteHistograms& h, std::span<const uint8_t> anchor,
                   std::vector<uint32_t>& pooled) {
  double per_channel = 0;
  const Log2Table& lg = log2_counts();
  const double log2_rows = lg(h.n_rows);  // each channel's histogram sums to n_rows
  const double* const clog = count_log2_count_table();
  // Channels of one anchor map their high bytes to the same symbols: their counts are summed
  // per anchor and mapped once, block by present block (scattering every channel's counts into
  // the pooled table made each add wait on a store: this function fell from ~8.5% to ~6% of a
  // lossless encode).
  int slot_of[256];
  std::fill(std::begin(slot_of), std::end(slot_of), -1);
  std::vector<uint8_t> anchors;     // distinct, in order of first use
  std::vector<uint32_t> by_anchor;  // [distinct anchor][high byte]
  std::vector<uint32_t> blocks;     // [distinct anchor]: bit k set when bytes 8k..8k+7 occur
  for (size_t c = 0; c < h.width; ++c) {
    const uint32_t* high = h.high.data() + c * 256;
    if (slot_of[anchor[c]] < 0) {
      slot_of[anchor[c]] = static_cast<int>(anchors.size());
      anchors.push_back(anchor[c]);
      by_anchor.resize(anchors.size() * 256, 0);
      blocks.push_back(0);
    }
    const auto slot = static_cast<size_t>(slot_of[anchor[c]]);
    uint32_t* const sum = by_anchor.data() + slot * 256;
    // A channel's values span a few magnitudes: most blocks of 8 high bytes never occur. Its
    // bits: sum over present symbols of 6 + n * (log2(n_rows) - log2(n)), with sum n = n_rows
    // (n log2 n from the codec's table).
    uint32_t present = 0;
    // Four sums, so that the adds do not wait on each other (named: as an array indexed by
    // b & 3 they lived on the stack, each add waiting on a store).
    double n_log2_0 = 0, n_log2_1 = 0, n_log2_2 = 0, n_log2_3 = 0;
    for (unsigned b0 = 0; b0 < 256; b0 += 8) {
      uint64_t any = 0;  // in a register (through an array, the block went via the stack)
      for (unsigned k = 0; k < 8; k += 2) {
        uint64_t two;
        std::memcpy(&two, high + b0 + k, 8);
        any |= two;
      }
      if (any == 0) continue;
      blocks[slot] |= 1u << (b0 / 8);
      // Without a branch per count (absent symbols add 0; a branch on each was mispredicted).
      for (unsigned b = b0; b < b0 + 8; b += 4) {
        const uint32_t n0 = high[b], n1 = high[b + 1], n2 = high[b + 2], n3 = high[b + 3];
        sum[b] += n0, sum[b + 1] += n1, sum[b + 2] += n2, sum[b + 3] += n3;
        present += (n0 != 0) + (n1 != 0) + (n2 != 0) + (n3 != 0);
        n_log2_0 += count_log2_count(clog, n0);
        n_log2_1 += count_log2_count(clog, n1);
        n_log2_2 += count_log2_count(clog, n2);
        n_log2_3 += count_log2_count(clog, n3);
      }
    }
    per_channel += 6.0 * present + static_cast<double>(h.n_rows) * log2_rows -
                   ((n_log2_0 + n_log2_1) + (n_log2_2 + n_log2_3));
  }
  pooled.assign(256, 0);
  for (size_t k = 0; k < anchors.size(); ++k) {
    const uint32_t* const sum = by_anchor.data() + k * 256;
    for (uint32_t m = blocks[k]; m; m &= m - 1) {
      const auto b0 = static_cast<unsigned>(std::countr_zero(m)) * 8;
      for (unsigned b = b0; b < b0 + 8; ++b)
        pooled[high_symbol(Half{static_cast<uint16_t>(b << 8)}, anchors[k])] += sum[b];
    }
  }
  double pooled_bits = 0;
  const double log2_all = lg(uint64_t{h.n_rows} * h.width);
  for (const uint32_t n : pooled) pooled_bits += symbol_bits(lg, n, log2_all);
  return {per_channel, pooled_bits};
}

// Estimated bits of the high bytes as one table over the symbols' differences from the row
// above (high form 2): the pooled entropy of the differences of `pairs` rows spread over the
// tensor from the rows above them, bias corrected (Miller-Madow), times the values, plus ~6 bits
// a listed symbol (the first rows alone misled it: a drift that starts at zero crosses it there).
// The difference of two anchored symbols does not depend on the anchor: (sign - sign') +
// 2 (m' - m) mod 256 for magnitudes m, m' (high_symbol). The differences go through a buffer (a
// loop that vectorises) into four tables in turn (one table's adds waited on each other).
double pooled_delta_bits(std::span<const Half> distinct, size_t width, size_t pairs) {
  const size_t rows = distinct.size() / width;  // >= 2
  pairs = std::min(pairs, rows - 1);
  std::vector<uint8_t> d(pairs * width);
  const uint16_t* const value = reinterpret_cast<const uint16_t*>(distinct.data());
  for (size_t k = 0; k < pairs; ++k) {
    const size_t r = 1 + k * (rows - 1) / pairs;
    const uint16_t* __restrict row = value + r * width;
    const uint16_t* __restrict above = row - width;
    uint8_t* __restrict out = d.data() + k * width;
    for (size_t j = 0; j < width; ++j) {
      const unsigned b = row[j] >> 8, a = above[j] >> 8;
      out[j] = static_cast<uint8_t>((b >> 7) - (a >> 7) + 2 * ((a & 0x7f) - (b & 0x7f)));
    }
  }
  const uint8_t* const out = d.data();
  uint32_t count4[4][256] = {};
  size_t i = 0;
  for (; i + 4 <= d.size(); i += 4) {
    ++count4[0][out[i]], ++count4[1][out[i + 1]], ++count4[2][out[i + 2]];
    ++count4[3][out[i + 3]];
  }
  for (; i < d.size(); ++i) ++count4[0][out[i]];
  uint32_t count[256];
  for (size_t v = 0; v < 256; ++v)
    count[v] = count4[0][v] + count4[1][v] + count4[2][v] + count4[3][v];
  size_t seen = 0;
  const double per_value = entropy_per_symbol(count, d.size(), true, &seen);
  return per_value * static_cast<double>(distinct.size()) + 6.0 * static_cast<double>(seen);
}

// Each channel's anchor: the 90th percentile of its magnitudes.
std::vector<uint8_t> channel_anchors(const ByteHistograms& h) {
  const size_t rank = h.n_rows * 9 / 10;
  std::vector<uint8_t> anchor(h.width);
  for (size_t c = 0; c < h.width; ++c) {
    const uint32_t* hist = h.high.data() + c * 256;  // magnitude m: high bytes m and 128 + m
    size_t below = 0, m = 0;
    // Whole blocks of 8 magnitudes first (one magnitude at a time, the walk was a chain of ~70
    // dependent additions a channel); a block's prefixes stay below the rank when it does.
    for (; m + 8 <= 128; m += 8) {
      size_t block = 0;
      for (size_t k = m; k < m + 8; ++k) block += hist[k] + hist[128 + k];
      if (below + block > rank) break;
      below += block;
    }
    while (below + hist[m] + hist[128 + m] <= rank) below += hist[m] + hist[128 + m], ++m;
    anchor[c] = static_cast<uint8_t>(m);
  }
  return anchor;
}

// Pooled entropy (bits per byte) of the counted low bytes; with `corrected`, plus the
// Miller-Madow correction of a sample's estimate.
double low_byte_entropy(const ByteHistograms& h, bool corrected = false) {
  return entropy_per_symbol(h.low, uint64_t{h.low_rows} * h.width, corrected);
}

// A rotated row's residual symbols (kResidualEscape for residuals that escape); true when any
// does. (A push_back per value reloaded the vector's fields after every byte stored.)
bool residual_symbols(const Half* __restrict row, const Half* __restrict pred, size_t width,
                      uint8_t* __restrict out) {
  uint16_t escaped = 0;
  for (size_t j = 0; j < width; ++j) {
    const uint16_t z = residual_of(row[j], pred[j]);
    escaped |= static_cast<uint16_t>(z >= kResidualEscape);
    out[j] = static_cast<uint8_t>(z < kResidualEscape ? z : kResidualEscape);
  }
  return escaped != 0;
}

// Estimated bits of a row coded as a rotation of `src`.
double rotation_cost(const Rotation& rot, const Half* row, const Half* src, size_t width,
                     uint64_t delta, std::vector<Half>& pred) {
  rotate_row(rot, src, width, delta, pred.data());
  double bits = 0;
  const Log2Table& lg = log2_counts();
  for (size_t j = 0; j < width; ++j) bits += lg(1u + residual_of(row[j], pred[j]));
  return bits;
}

// The rotation (pairing and per-pair angles, RoPE's base^(-2i/dim) for a few bases) that best
// predicts the hinted rows, or none when none predicts them well.
Rotation fit_rotation(std::span<const Half> values, size_t width, size_t head_dim,
                      std::span<const uint32_t> hint) {
  Rotation best;
  if (hint.empty() || head_dim < 2 || head_dim % 2 || width % head_dim) return best;
  std::vector<size_t> rows;
  for (size_t r = 0; r < hint.size() && rows.size() < 16; ++r) {
    if (hint[r] < r) rows.push_back(r);
  }
  if (rows.empty()) return best;
  std::vector<Half> pred(width);
  double best_bits = 4.0 * static_cast<double>(rows.size() * width);  // at most ~4 bits a value
  for (const uint8_t mode : {kRotationAdjacent, kRotationHalves}) {
    for (const double base : {1e4, 5e5, 1e6}) {
      Rotation rot;
      rot.mode = mode;
      rot.dim = head_dim;
      rot.cs.resize(head_dim);
      for (size_t c = 0; c < head_dim / 2; ++c) {
        const double theta =
            std::pow(base, -2.0 * static_cast<double>(c) / static_cast<double>(head_dim));
        rot.cs[2 * c] = std::cos(theta);
        rot.cs[2 * c + 1] = std::sin(theta);
      }
      rot.square_chain();
      // A candidate stops once its bits reach the best's: the sum only grows, so it could not
      // win (the right rotation, usually tried first, cut the other five to a row or two).
      double bits = 0;
      for (size_t i = 0; i < rows.size() && bits < best_bits; ++i) {
        const size_t r = rows[i];
        bits += rotation_cost(rot, values.data() + r * width, values.data() + hint[r] * width,
                              width, r - hint[r], pred);
      }
      if (bits < best_bits) best_bits = bits, best = std::move(rot);
    }
  }
  return best;
}

void put_f64(wire::Writer& w, double v) {
  uint64_t b;
  std::memcpy(&b, &v, 8);
  w.u64(b);
}

// Options of the planes' streams: 32 lanes from 4,096 elements (a layer's planes shortened by
// repeated or rotated rows, a chunk's rotation residuals, short chunks' planes) costs ~96 bytes
// a stream (24 more final states) and decodes it in several chains instead of one (stories260K's
// lossless decode: +20% at chunks of 1,024 tokens for 0.09% more bytes, +60% at 256 for
// 0.5%). One-channel streams (the pooled high plane, rotation residuals) without token-delta
// models: their consecutive symbols are a row's channels, not a channel's tokens, and the
// token-delta alternative never won there (0 of 320 such streams: both models' 8 windows and the
// bench's synthetic set), while computing it cost 6-10% of a lossless encode.
EncodeOptions plane_options(bool one_channel) {
  EncodeOptions o;
  o.wide_lanes_from = 4096;
  o.allow_delta = !one_channel;
  return o;
}

// Row hash -> the first row inserted with that hash: open addressing in a power-of-two table
// at most half full (std::unordered_map allocated a node per row).
class RowHashIndex {
 public:
  explicit RowHashIndex(size_t rows) : mask_(std::bit_ceil(std::max<size_t>(2 * rows, 16)) - 1) {
    slots_.resize(mask_ + 1);
  }
  // The row first inserted with hash h; or, when none was, `row` (inserted for it).
  uint32_t first(uint64_t h, uint32_t row) {
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.row == kNoHint) {
        s = {h, row};
        return row;
      }
      if (s.hash == h) return s.row;
    }
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t row = kNoHint;
  };
  size_t mask_;
  std::vector<Slot> slots_;
};

// Method 2 (docs/FORMAT.md): rotated rows, row references, then the distinct rows' planes.
// hint[r] (optional): an earlier row that row r may be a rotation of; equal (optional): the
// values' first_equal_rows.
std::vector<uint8_t> rows_dedup(std::span<const Half> values, size_t width, size_t head_dim,
                                std::span<const uint32_t> hint, std::span<const uint32_t> equal) {
  const size_t rows = values.size() / width, row_bytes = width * sizeof(Half);
  std::vector<uint8_t> bitmap((rows + 7) / 8, 0), rot_bitmap((rows + 7) / 8, 0);
  std::vector<uint32_t> refs;
  // Rotated rows first: those a rotation of their hinted row predicts in < 6 bits a value.
  const Rotation rot = fit_rotation(values, width, head_dim, hint);
  std::vector<uint64_t> distances;
  std::vector<uint8_t> residuals;
  std::vector<uint16_t> escapes;
  if (rot.mode != kRotationNone) {
    std::vector<Half> pred(width);
    for (size_t r = 1; r < rows; ++r) {
      const Half* row = values.data() + r * width;
      if (hint[r] >= r || std::memcmp(row, values.data() + hint[r] * width, row_bytes) == 0 ||
          rotation_cost(rot, row, values.data() + hint[r] * width, width, r - hint[r], pred) >
              6.0 * static_cast<double>(width)) {
        continue;
      }
      rot_bitmap[r / 8] = static_cast<uint8_t>(rot_bitmap[r / 8] | (1u << (r % 8)));
      distances.push_back(r - hint[r]);
      const size_t at = residuals.size();
      residuals.resize(at + width);
      if (residual_symbols(row, pred.data(), width, residuals.data() + at)) {
        for (size_t j = 0; j < width; ++j) {
          const uint16_t z = residual_of(row[j], pred[j]);
          if (z >= kResidualEscape) escapes.push_back(z);
        }
      }
    }
  }
  // The distinct rows: a row whose hash an earlier distinct row has, and whose values are that
  // row's, is a reference to it (a hash collision stays distinct). Without rotated rows that
  // earlier row is the one first_equal_rows names, when given.
  const bool given = equal.size() == rows && distances.empty();
  RowHashIndex index(given ? 0 : rows);
  std::vector<uint32_t> kept, kept_as(rows);  // distinct rows; a kept row's place among them
  kept.reserve(rows);
  for (size_t r = 0; r < rows; ++r) {
    if ((rot_bitmap[r / 8] >> (r % 8)) & 1) continue;
    const Half* row = values.data() + r * width;
    uint32_t f = static_cast<uint32_t>(r);
    if (given) {
      if (equal[r] < r) f = equal[r];  // kNoHint: none
    } else {
      f = index.first(XXH3_64bits(row, row_bytes), f);
      if (f != r && std::memcmp(values.data() + size_t{f} * width, row, row_bytes) != 0) f = r;
    }
    if (f != r) {
      bitmap[r / 8] = static_cast<uint8_t>(bitmap[r / 8] | (1u << (r % 8)));
      refs.push_back(kept_as[f]);
      continue;
    }
    kept_as[r] = static_cast<uint32_t>(kept.size());
    kept.push_back(static_cast<uint32_t>(r));
  }
  // Copied only when some rows are references or rotations.
  std::vector<Half> gathered;
  std::span<const Half> distinct = values;
  if (kept.size() < rows) {
    gathered.resize(kept.size() * width);
    for (size_t k = 0; k < kept.size(); ++k)
      std::memcpy(gathered.data() + k * width, values.data() + size_t{kept[k]} * width, row_bytes);
    distinct = gathered;
  }
  std::vector<uint8_t> out{kRowsDedup};
  wire::Writer w(out);
  if (distances.empty()) {
    w.u8(kRotationNone);
  } else {
    w.u8(rot.mode);
    w.varint(rot.dim);
    for (const double v : rot.cs) put_f64(w, v);
    w.varint(distances.size());
    w.bytes(rot_bitmap);
    for (const uint64_t d : distances) w.varint(d);
    w.varint(escapes.size());
    for (const uint16_t e : escapes) w.u16(e);
    CodeStream rs;
    rs.n_rows = residuals.size();
    rs.dim = 1;
    rs.bits = 8;
    rs.group_size = rs.n_rows < kMaxGroupSize ? rs.n_rows : kMaxGroupSize;
    rs.codes = std::move(residuals);
    rs.codes.resize(rs.n_groups() * rs.group_size, rs.codes.back());
    rs.scale.assign(rs.n_groups(), 1.0f);
    rs.zero.assign(rs.n_groups(), 0.0f);
    const std::vector<uint8_t> coded = encode(rs, plane_options(true));
    w.varint(coded.size());
    w.bytes(coded);
  }
  w.varint(refs.size());
  if (!refs.empty()) {
    w.bytes(bitmap);
    for (const uint32_t ref : refs) w.varint(ref);
  }
  std::vector<uint8_t> low;
  uint8_t low_form = kLowRaw;
  // The low plane is tried as a stream below kLowStreamEntropy, the entropy first estimated
  // from a sample of rows (real KV's mantissa bytes sit at 7.95-7.99 bits; the sample's
  // estimate bias-corrected), from all of them where the sample comes near.
  ByteHistograms stats(distinct, width, (kLowSampleValues + width - 1) / width);
  if (stats.low_rows < stats.n_rows &&
      low_byte_entropy(stats, true) < kLowStreamEntropy + kLowSampleMargin) {
    stats.count_all_low(distinct);
  }
  if (low_byte_entropy(stats, stats.low_rows < stats.n_rows) < kLowStreamEntropy) {
    low = encode(plane_stream(distinct, width, width,
                              [](Half h, size_t) { return static_cast<uint8_t>(h.bits); }),
                 plane_options(false));
    low_form = low.size() < distinct.size() ? kLowStream : kLowRaw;
  }
  w.u8(low_form);
  const std::vector<uint8_t> anchor = channel_anchors(stats);
  const auto symbol = [a = anchor.data()](Half h, size_t c) { return high_symbol(h, a[c]); };
  // One table for the tensor, unless a table per channel is smaller (channels whose anchored
  // shapes differ; real KV picks the pooled table), or one table over the symbols' differences
  // from the row above (channels that drift slowly, as in the bench's synthetic set, whose
  // tables per channel had been nearly half of its lossless decode to read and build). The
  // first two are both coded where their estimates lie within kSure, the smaller kept; form 2
  // alone where its estimate is below kSure times theirs (coded beside the pooled table where
  // it came within 5% below, 2 of stories260K's 10 tensors, where it won, it made that file
  // 0.3% smaller for 22% more encoding time).
  std::vector<uint32_t> pooled;
  const HighBits est = width > 1 ? high_bits(stats, anchor, pooled) : HighBits{};
  const double others = std::min(est.per_channel, est.pooled);
  // The differences of about kDeltaSampleValues values (whole rows, at least one).
  const double delta =
      width > 1 && stats.n_rows >= 2
          ? pooled_delta_bits(distinct, width, std::max<size_t>(1, kDeltaSampleValues / width))
          : HUGE_VAL;
  const bool delta_sure = delta < kSure * others;
  const bool code_pooled = !delta_sure && (width == 1 || est.per_channel >= kSure * est.pooled);
  const bool code_per_channel = !delta_sure && width > 1 && est.per_channel < est.pooled;
  std::vector<uint8_t> hi;
  uint8_t high_form = kHighPooled;
  const auto keep = [&](std::vector<uint8_t>&& coded, uint8_t form) {
    if (hi.empty() || coded.size() < hi.size()) hi.swap(coded), high_form = form;
  };
  if (code_pooled) {
    keep(encode_counted(plane_stream(distinct, width, 1, symbol), plane_options(true), pooled),
         kHighPooled);
  }
  if (code_per_channel) {
    // The channels' symbol histograms are their high-byte histograms permuted (no rows padded:
    // a stream of fewer than kMaxGroupSize rows is one group).
    CodeStream stream = plane_stream(distinct, width, width, symbol);
    std::vector<uint32_t> counts;
    if (stream.codes.size() == distinct.size()) {
      counts.resize(width * 256);
      for (size_t c = 0; c < width; ++c) {
        for (unsigned b = 0; b < 256; ++b) {
          counts[c * 256 + high_symbol(Half{static_cast<uint16_t>(b << 8)}, anchor[c])] =
              stats.high[c * 256 + b];
        }
      }
    }
    keep(encode_counted(stream, plane_options(false), counts), kHighPerChannel);
  }
  if (delta_sure) {
    CodeStream stream = plane_stream(distinct, width, 1, symbol);
    uint8_t* const sym = stream.codes.data();
    for (size_t at = distinct.size(); at > width;) {  // each row less the row above, last first
      at -= width;
      const uint8_t* __restrict above = sym + at - width;
      uint8_t* __restrict row = sym + at;
      for (size_t j = 0; j < width; ++j) row[j] = static_cast<uint8_t>(row[j] - above[j]);
    }
    // A group's padding repeats its last symbol, as plane_stream's does.
    for (size_t i = distinct.size(); i < stream.codes.size(); ++i) sym[i] = sym[i - 1];
    keep(encode(stream, plane_options(true)), kHighPooledDelta);
  }
  w.u8(high_form);
  w.bytes(anchor);
  w.varint(hi.size());
  const size_t low_bytes = low_form == kLowRaw ? distinct.size() : low.size();
  reserve_huge(out, out.size() + hi.size() + low_bytes);
  w.bytes(hi);
  if (low_form == kLowStream) {
    w.bytes(low);
    return out;
  }
  // The raw low bytes straight into the output, through restrict pointers: the loop vectorises
  // (through the vectors, each byte store may alias their own fields, reloaded per value).
  const size_t at = out.size();
  out.resize(at + low_bytes);
  const Half* __restrict from = distinct.data();
  uint8_t* __restrict to = out.data() + at;
  for (size_t i = 0; i < low_bytes; ++i) to[i] = static_cast<uint8_t>(from[i].bits);
  return out;
}

}  // namespace

std::vector<uint32_t> first_equal_rows(std::span<const Half> values, size_t width) {
  const size_t rows = width ? values.size() / width : 0, row_bytes = width * sizeof(Half);
  std::vector<uint32_t> first(rows, kNoHint);
  RowHashIndex index(rows);
  for (size_t r = 0; r < rows; ++r) {
    const Half* row = values.data() + r * width;
    const uint32_t f = index.first(XXH3_64bits(row, row_bytes), static_cast<uint32_t>(r));
    if (f != r && std::memcmp(values.data() + size_t{f} * width, row, row_bytes) == 0) first[r] = f;
  }
  return first;
}

std::vector<uint8_t> pack_fp16_lossless(std::span<const Half> values, size_t width, int zstd_level,
                                        size_t head_dim, std::span<const uint32_t> rotation_hint,
                                        std::span<const uint32_t> equal_rows) {
  std::vector<uint8_t> best;
  if (width > 0 && !values.empty() && values.size() % width == 0) {
    if (rotation_hint.size() != values.size() / width) rotation_hint = {};
    if (equal_rows.size() != values.size() / width) equal_rows = {};
    best = rows_dedup(values, width, head_dim, rotation_hint, equal_rows);
    // The container's size rule (at most 2^17 values per chunk byte) holds for zstd's forms;
    // row references of very wide rows could break it: such a tensor goes to zstd.
    if ((best.size() << 17) < values.size()) best.clear();
  }
  if (best.empty() || zstd_level > 0) {
    std::vector<uint8_t> z = planes_zstd(values, zstd_level > 0 ? zstd_level : 1);
    if (best.empty() || z.size() < best.size()) best.swap(z);
  }
  return best;
}

}  // namespace cachegen::detail
