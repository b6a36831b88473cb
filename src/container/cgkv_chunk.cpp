// Lossless fp16 tensor data. Each tensor's values are split into two byte planes - high bytes
// (sign, exponent, top mantissa bits: skewed, channel-dependent) and low bytes (mantissa: close
// to uniform) - and stored by one of three methods (a leading method byte):
//   0: both planes, low then high, as one zstd frame (content size set);
//   1: each plane as a cachegen code stream ("Codec stream": 8-bit codes [rows, width], per-channel
//      rANS models), high plane first with a varint length (read only: method 2 supersedes it);
//   2: rows that repeat an earlier row exactly stored as a reference to it, then the distinct
//      rows' high plane as a code stream and their low plane raw (or as a code stream when that
//      is smaller). Per-channel models see what a pooled coder cannot - each channel's own
//      exponent range - and row references find what zstd's matches found (layer 0's V rows
//      depend on the token alone, so a repeated token repeats them).
#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "cachegen/codec.h"
#include "cachegen/error.h"
#include "codec/channel_model.h"
#include "codec/stream_format.h"
#include "container/cgkv_internal.h"
#include "core/wire.h"
#include "quant/kernels.h"

namespace cachegen::detail {
namespace {

constexpr uint8_t kPlanesZstd = 0, kPlanesRans = 1, kRowsDedup = 2;
constexpr uint8_t kLowRaw = 0, kLowStream = 1;
constexpr uint8_t kHighPooled = 0, kHighPerChannel = 1;
constexpr uint8_t kRotationNone = 0, kRotationAdjacent = 1, kRotationHalves = 2;
constexpr uint32_t kNoHint = UINT32_MAX;
constexpr unsigned kResidualEscape = 255;
// Method 2 codes the low plane with rANS only when its pooled byte entropy is below this (bits):
// real KV mantissas sit at 7.95-7.99, where per-channel tables cost more than they save.
constexpr double kLowStreamEntropy = 7.9;
// The low bytes counted for that estimate first, and the margin above it past which the
// estimate stands (counting every low byte was ~7% of a lossless encode of 128-wide rows).
constexpr size_t kLowSampleValues = 16384;
constexpr double kLowSampleMargin = 0.05;

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

// Method 2's high-byte symbol: the channel's anchor minus the magnitude (exponent and two
// mantissa bits), mod 128, then the sign. Anchored, every channel's symbols follow nearly one
// distribution, so one table serves the whole tensor (per-channel tables of 512 tokens cost
// more bits than the channels' differences save: docs/PERFORMANCE.md, "Lossless tier").
uint8_t high_symbol(Half h, uint8_t anchor) {
  return static_cast<uint8_t>((((anchor - (h.bits >> 8)) & 0x7f) << 1) | (h.bits >> 15));
}
uint16_t high_byte(unsigned symbol, unsigned anchor) {
  return static_cast<uint16_t>(((symbol & 1) << 7) | ((anchor - (symbol >> 1)) & 0x7f));
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
    for (size_t c0 = 0; c0 < width; c0 += 16) {
      const size_t c1 = std::min(width, c0 + 16);
      for (size_t i = row0 * width; i < row1 * width; i += width) {
        size_t c = c0;
        // Four values per 8-byte load on little-endian hosts (c0 is a multiple of 16, so value
        // k of the load goes to low-byte table k, as c & 3 says).
        for (; std::endian::native == std::endian::little && c + 4 <= c1; c += 4) {
          uint64_t w;
          std::memcpy(&w, rows.data() + i + c, 8);
          if (kHigh) {
            uint32_t* h = high.data() + c * 256;
            ++h[(w >> 8) & 0xff];
            ++h[256 + ((w >> 24) & 0xff)];
            ++h[512 + ((w >> 40) & 0xff)];
            ++h[768 + (w >> 56)];
          }
          if (kLow) {
            ++low4[w & 0xff];
            ++low4[256 + ((w >> 16) & 0xff)];
            ++low4[512 + ((w >> 32) & 0xff)];
            ++low4[768 + ((w >> 48) & 0xff)];
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

// Estimated bits of the anchored high bytes under one pooled table and under a table per channel
// (empirical entropy plus ~6 bits per listed symbol): the per-channel form is only tried where it
// may win, as choosing a model per channel costs more time than coding the symbols. A channel's
// symbol histogram is its high-byte histogram permuted (high_symbol), which leaves its bits as
// they are; their sum, the pooled table's histogram, is left in `pooled`.
bool per_channel_may_win(const ByteHistograms& h, std::span<const uint8_t> anchor,
                         std::vector<uint32_t>& pooled) {
  pooled.assign(256, 0);
  double per_channel = 0;
  const Log2Table& lg = log2_counts();
  const double log2_rows = lg(h.n_rows);  // each channel's histogram sums to n_rows
  const double* const clog = count_log2_count_table();
  for (size_t c = 0; c < h.width; ++c) {
    const uint32_t* high = h.high.data() + c * 256;
    // A channel's values span a few magnitudes: most blocks of 8 high bytes never occur. Its
    // bits: sum over present symbols of 6 + n * (log2(n_rows) - log2(n)), with sum n = n_rows
    // (n log2 n from the codec's table).
    uint32_t present = 0;
    double n_log2[4] = {};  // four sums, so that the adds do not wait on each other
    for (unsigned b0 = 0; b0 < 256; b0 += 8) {
      uint64_t any = 0;  // in a register (through an array, the block went via the stack)
      for (unsigned k = 0; k < 8; k += 2) {
        uint64_t two;
        std::memcpy(&two, high + b0 + k, 8);
        any |= two;
      }
      if (any == 0) continue;
      // Without a branch per count (absent symbols add 0; a branch on each was mispredicted).
      for (unsigned b = b0; b < b0 + 8; ++b) {
        const uint32_t n = high[b];
        pooled[high_symbol(Half{static_cast<uint16_t>(b << 8)}, anchor[c])] += n;
        present += n != 0;
        n_log2[b & 3] += count_log2_count(clog, n);
      }
    }
    per_channel += 6.0 * present + static_cast<double>(h.n_rows) * log2_rows -
                   ((n_log2[0] + n_log2[1]) + (n_log2[2] + n_log2[3]));
  }
  double pooled_bits = 0;
  const double log2_all = lg(uint64_t{h.n_rows} * h.width);
  for (const uint32_t n : pooled) pooled_bits += symbol_bits(lg, n, log2_all);
  return per_channel < pooled_bits;
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

// Pooled entropy (bits per byte) of the counted low bytes.
double low_byte_entropy(const ByteHistograms& h) {
  double bits = 0;
  const uint64_t n = uint64_t{h.low_rows} * h.width;
  const Log2Table& lg = log2_counts();
  const double log2_n = lg(n);
  for (const uint64_t c : h.low) bits += static_cast<double>(c) * (log2_n - lg(c));
  return bits / static_cast<double>(n);
}

// Rotated rows (method 2): a row predicted as an earlier row rotated, pair by pair, by the angle
// of its pair times the row distance - RoPE keys of a repeated token (docs/FORMAT.md).
struct Rotation {
  uint8_t mode = kRotationNone;
  size_t dim = 0;          // head_dim: pairs repeat every dim values
  std::vector<double> cs;  // per pair: cos, sin of its angle per row
  // squares[k][2i, 2i+1]: pair i's (cos, sin) squared k times (the square-and-multiply chain,
  // the same for every distance: computed once).
  std::vector<std::vector<double>> squares;
  // The last distance's (cos, sin) per pair, as rotate_row computes them (rows of a repeated
  // span share their distance). A Rotation is used by one thread at a time.
  mutable uint64_t last_delta = 0;
  mutable std::vector<double> last_cs;
  void square_chain() {
    squares.assign(1, cs);
    for (int k = 1; k < 64; ++k) {
      std::vector<double> next(cs.size());
      const std::vector<double>& p = squares.back();
      for (size_t i = 0; i < cs.size(); i += 2) {
        next[i] = p[i] * p[i] - p[i + 1] * p[i + 1];
        next[i + 1] = 2 * p[i] * p[i + 1];
      }
      squares.push_back(std::move(next));
    }
  }
};

// pred = src rotated by `delta` rows (width values; every head alike). Each pair's (cos, sin)
// of delta times its angle by square-and-multiply in double (no fused multiply-add: the build
// sets -ffp-contract=off), so every decoder gets the same bits.
void rotate_row(const Rotation& rot, const Half* src, size_t width, uint64_t delta, Half* pred) {
  const size_t half = rot.dim / 2;
  std::vector<double>& cs = rot.last_cs;
  if (cs.size() != 2 * half || rot.last_delta != delta) {
    // Square-and-multiply, the pairs side by side for each bit (their chains are independent;
    // each pair's operations are those of a walk over the bits for that pair alone).
    cs.assign(2 * half, 0.0);
    for (size_t c = 0; c < half; ++c) cs[2 * c] = 1;
    // The set bits in ascending order, visited alone (a branch per bit was mispredicted).
    for (uint64_t n = delta; n; n &= n - 1) {
      const double* sq = rot.squares[static_cast<size_t>(std::countr_zero(n))].data();
      for (size_t c = 0; c < half; ++c) {
        const double xc = cs[2 * c], xs = cs[2 * c + 1];
        const double pc = sq[2 * c], ps = sq[2 * c + 1];
        cs[2 * c] = xc * pc - xs * ps;
        cs[2 * c + 1] = xc * ps + xs * pc;
      }
    }
    rot.last_delta = delta;
  }
  // Widened and rounded back by the SIMD kernels (the same values as half_to_float and
  // float_to_half per value, which took a quarter of a lossless decode's time).
  thread_local std::vector<float> x, y;
  x.resize(width);
  y.resize(width);
  const QuantKernels& kernels = quant_kernels();
  kernels.f16_to_f32(reinterpret_cast<const uint16_t*>(src), x.data(), width);
  for (size_t h = 0; h < width; h += rot.dim) {
    for (size_t c = 0; c < half; ++c) {
      const size_t i0 = h + (rot.mode == kRotationAdjacent ? 2 * c : c);
      const size_t i1 = i0 + (rot.mode == kRotationAdjacent ? 1 : half);
      const double x0 = x[i0], x1 = x[i1];
      const double c0 = cs[2 * c], s0 = cs[2 * c + 1];
      y[i0] = static_cast<float>(x0 * c0 - x1 * s0);
      y[i1] = static_cast<float>(x0 * s0 + x1 * c0);
    }
  }
  kernels.f32_to_f16(y.data(), reinterpret_cast<uint16_t*>(pred), width);
}

// fp16 bits in value order (an order-preserving map to 0..65535), the zigzag difference of two
// such keys, and back.
// (Masks rather than conditionals, so that loops over rows vectorise.)
uint16_t order_key(uint16_t h) {  // h ^ (negative ? 0xffff : 0x8000)
  return static_cast<uint16_t>(h ^ (0x8000u | (0u - (h >> 15u))));
}
uint16_t from_order_key(uint16_t k) {  // k ^ (k & 0x8000 ? 0x8000 : 0xffff)
  return static_cast<uint16_t>(k ^ (0x8000u | ((k >> 15u) - 1u)));
}
uint16_t residual_of(Half actual, Half pred) {
  const uint16_t d = static_cast<uint16_t>(order_key(actual.bits) - order_key(pred.bits));
  return static_cast<uint16_t>((d << 1) ^ ((d & 0x8000) ? 0xffff : 0));
}
uint16_t apply_residual(uint16_t pred, uint16_t z) {
  const uint16_t d = static_cast<uint16_t>((z >> 1u) ^ (0u - (z & 1u)));
  return from_order_key(static_cast<uint16_t>(order_key(pred) + d));
}
Half apply_residual(Half pred, uint16_t z) {
  return Half{apply_residual(pred.bits, z)};
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
      double bits = 0;
      for (const size_t r : rows) {
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

// Options of the one-channel streams below (the pooled high plane, rotation residuals): their
// consecutive symbols are a row's channels, not a channel's tokens, and the token-delta
// alternative never won there (0 of 320 such streams: both models' 8 windows and the bench's
// synthetic set), while computing it cost 6-10% of a lossless encode.
EncodeOptions pooled_options() {
  EncodeOptions o;
  o.allow_delta = false;
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
    const std::vector<uint8_t> coded = encode(rs, pooled_options());
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
  // from a sample of rows (real KV's mantissa bytes sit at 7.95-7.99 bits), from all of them
  // where the sample comes near (its estimate is ~0.01 bits low).
  ByteHistograms stats(distinct, width, (kLowSampleValues + width - 1) / width);
  if (stats.low_rows < stats.n_rows &&
      low_byte_entropy(stats) < kLowStreamEntropy + kLowSampleMargin) {
    stats.count_all_low(distinct);
  }
  if (low_byte_entropy(stats) < kLowStreamEntropy) {
    low = encode(plane_stream(distinct, width, width,
                              [](Half h, size_t) { return static_cast<uint8_t>(h.bits); }));
    low_form = low.size() < distinct.size() ? kLowStream : kLowRaw;
  }
  if (low_form == kLowRaw) {
    // A plain loop through restrict pointers, not push_back: it vectorises (through the
    // vectors, each byte store may alias their own fields, which were reloaded per value).
    std::vector<uint8_t> raw(distinct.size());
    const Half* __restrict from = distinct.data();
    uint8_t* __restrict to = raw.data();
    for (size_t i = 0, n = raw.size(); i < n; ++i) to[i] = static_cast<uint8_t>(from[i].bits);
    low.swap(raw);
  }
  w.u8(low_form);
  const std::vector<uint8_t> anchor = channel_anchors(stats);
  const auto symbol = [a = anchor.data()](Half h, size_t c) { return high_symbol(h, a[c]); };
  // One table for the tensor, unless a table per channel is smaller (channels whose anchored
  // shapes differ, as in synthetic data; real KV picks the pooled table).
  std::vector<uint32_t> pooled;
  const bool per_channel_tried = per_channel_may_win(stats, anchor, pooled) && width > 1;
  std::vector<uint8_t> hi =
      encode_counted(plane_stream(distinct, width, 1, symbol), pooled_options(), pooled);
  uint8_t high_form = kHighPooled;
  if (per_channel_tried) {
    std::vector<uint8_t> per_channel = encode(plane_stream(distinct, width, width, symbol));
    if (per_channel.size() < hi.size()) {
      hi.swap(per_channel);
      high_form = kHighPerChannel;
    }
  }
  w.u8(high_form);
  w.bytes(anchor);
  w.varint(hi.size());
  w.bytes(hi);
  w.bytes(low);
  return out;
}

void unpack_zstd(std::span<const uint8_t> bytes, std::span<Half> out, const std::string& context) {
  const size_t n = out.size();
  const unsigned long long declared = ZSTD_getFrameContentSize(bytes.data(), bytes.size());
  if (declared == ZSTD_CONTENTSIZE_ERROR || declared == ZSTD_CONTENTSIZE_UNKNOWN ||
      declared != 2 * n) {
    throw Error(ErrorCode::corrupt_input,
                context + ": lossless frame does not declare " + std::to_string(2 * n) + " bytes");
  }
  std::vector<uint8_t> planes(2 * n);
  const size_t r = ZSTD_decompress(planes.data(), planes.size(), bytes.data(), bytes.size());
  if (ZSTD_isError(r) || r != planes.size()) {
    throw Error(ErrorCode::corrupt_input, context + ": lossless data does not decompress (" +
                                              (ZSTD_isError(r) ? ZSTD_getErrorName(r) : "short") +
                                              ")");
  }
  for (size_t i = 0; i < n; ++i) {
    out[i].bits = static_cast<uint16_t>(planes[i] | (planes[n + i] << 8));
  }
}

// Decodes one plane stream of [rows, width] 8-bit symbols (checking that shape).
CodeStream decode_plane(std::span<const uint8_t> bytes, size_t rows, size_t width,
                        const std::string& context) {
  return decode_expecting(bytes, rows, width, 8, context + ": lossless byte plane");
}

// Method 1: decodes one plane stream and ORs its bytes, shifted, into out.
void unpack_plane(std::span<const uint8_t> bytes, std::span<Half> out, size_t width, int shift,
                  const std::string& context) {
  const CodeStream s = decode_plane(bytes, out.size() / width, width, context);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].bits = static_cast<uint16_t>(out[i].bits | (s.codes[i] << shift));
  }
}

// Method 2: the distinct rows' planes into the first rows of out, then every row moved or copied
// to its place, last row first (a row's source is never below a row already written).
// A row bitmap of method 2: ceil(rows/8) bytes, row 0 and the padding bits clear.
std::span<const uint8_t> read_row_bitmap(wire::Reader& r, size_t rows, const char* field) {
  const std::span<const uint8_t> bitmap = r.take((rows + 7) / 8, field);
  if (bitmap[0] & 1) r.corrupt(field, "row 0 marked");
  if (rows % 8 && (bitmap.back() >> (rows % 8)) != 0) r.corrupt(field, "padding bits set");
  return bitmap;
}
bool row_bit(std::span<const uint8_t> bitmap, size_t row) {
  return !bitmap.empty() && ((bitmap[row / 8] >> (row % 8)) & 1);
}

double get_f64(wire::Reader& r, const char* field) {
  const uint64_t b = r.u64(field);
  double v;
  std::memcpy(&v, &b, 8);
  if (!(v >= -1.0 && v <= 1.0)) r.corrupt(field, "not in [-1, 1]");
  return v;
}

// Method 2's rotated rows, parsed: the rotation, each row's distance back, the residuals.
struct RotatedRows {
  Rotation rot;
  std::span<const uint8_t> bitmap;
  std::vector<uint64_t> distances;
  std::span<const uint8_t> escapes;  // u16 each
  CodeStream residuals;
};

RotatedRows read_rotated_rows(wire::Reader& r, size_t rows, size_t width,
                              const std::string& context) {
  RotatedRows rr;
  rr.rot.mode = r.u8("rotation");
  if (rr.rot.mode == kRotationNone) return rr;
  if (rr.rot.mode != kRotationAdjacent && rr.rot.mode != kRotationHalves) {
    r.corrupt("rotation", "not 0, 1 or 2");
  }
  const uint64_t dim = r.varint("rotation head_dim");
  if (dim < 2 || dim % 2 || dim > width || width % dim) {
    r.corrupt("rotation head_dim", "not an even divisor of the row width");
  }
  rr.rot.dim = static_cast<size_t>(dim);
  r.need(8 * dim, "rotation angles");
  rr.rot.cs.resize(rr.rot.dim);
  for (double& v : rr.rot.cs) v = get_f64(r, "rotation angle");
  rr.rot.square_chain();
  const uint64_t n = r.varint("rotated row count");
  if (n == 0 || n >= rows) r.corrupt("rotated row count", "not in 1..rows-1");
  rr.bitmap = read_row_bitmap(r, rows, "rotated row bitmap");
  uint64_t seen = 0;
  for (size_t row = 0; row < rows; ++row) {
    if (!row_bit(rr.bitmap, row)) continue;
    if (++seen > n) r.corrupt("rotated row bitmap", "more rows than the count");
    const uint64_t d = r.varint("rotated row distance");
    if (d == 0 || d > row) r.corrupt("rotated row distance", "not an earlier row");
    rr.distances.push_back(d);
  }
  if (seen != n) r.corrupt("rotated row bitmap", "fewer rows than the count");
  const uint64_t n_escapes = r.varint("residual escape count");
  if (n_escapes > n * width) r.corrupt("residual escape count", "more than the residuals");
  rr.escapes = r.take(2 * n_escapes, "residual escapes");
  const uint64_t len = r.varint("residual length");
  rr.residuals = decode_plane(r.take(len, "residuals"), static_cast<size_t>(n) * width, 1,
                              context + " (rotated row residuals)");
  return rr;
}

// Rotated rows into out (ascending: each source row is final), after the other rows.
void apply_rotated_rows(const RotatedRows& rr, std::span<Half> out, size_t width,
                        const std::string& context) {
  const size_t rows = out.size() / width;
  size_t k = 0, e = 0;
  const size_t n_escapes = rr.escapes.size() / 2;
  for (size_t row = 0; row < rows; ++row) {
    if (!row_bit(rr.bitmap, row)) continue;
    Half* dst = out.data() + row * width;
    rotate_row(rr.rot, dst - rr.distances[k] * width, width, rr.distances[k], dst);
    const uint8_t* sym = rr.residuals.codes.data() + k * width;
    if (std::memchr(sym, kResidualEscape, width) == nullptr) {  // the usual row: one pass
      uint16_t* __restrict bits = reinterpret_cast<uint16_t*>(dst);
      const uint8_t* __restrict z = sym;
      for (size_t j = 0; j < width; ++j) bits[j] = apply_residual(bits[j], z[j]);
      ++k;
      continue;
    }
    for (size_t j = 0; j < width; ++j) {
      uint16_t z = sym[j];
      if (z == kResidualEscape) {
        if (e == n_escapes) {
          throw Error(ErrorCode::corrupt_input, context + ": more residual escapes than stored");
        }
        z = static_cast<uint16_t>(wire::load_le(rr.escapes.data() + 2 * e++, 2));
        if (z < kResidualEscape) {
          throw Error(ErrorCode::corrupt_input, context + ": residual escape below 255");
        }
      }
      dst[j] = apply_residual(dst[j], z);
    }
    ++k;
  }
  if (e != n_escapes) {
    throw Error(ErrorCode::corrupt_input, context + ": residual escapes left over");
  }
}

// Method 2 read up to its planes: everything but the high plane's rANS payload decoded.
struct DedupPlan {
  RotatedRows rr;
  std::vector<uint32_t> source;  // per row: its distinct-row index (empty: every row distinct)
  size_t distinct = 0;           // values of the distinct rows
  uint8_t low_form = 0, high_form = 0;
  std::span<const uint8_t> anchor, hi, lo;
  size_t high_dim() const { return high_form == kHighPooled ? 1 : anchor.size(); }
};

DedupPlan read_dedup(std::span<const uint8_t> body, size_t rows, size_t width,
                     const std::string& context) {
  DedupPlan plan;
  wire::Reader r(body, context);
  plan.rr = read_rotated_rows(r, rows, width, context);
  const RotatedRows& rr = plan.rr;
  const uint64_t n_rotated = rr.distances.size();
  const uint64_t n_copies = r.varint("repeated row count");
  if (n_copies + n_rotated >= rows) r.corrupt("repeated row count", "not below the row count");
  std::vector<uint32_t>& source = plan.source;
  if (n_copies > 0 || n_rotated > 0) {
    source.resize(rows);
    const std::span<const uint8_t> bitmap =
        n_copies > 0 ? read_row_bitmap(r, rows, "repeated row bitmap") : std::span<const uint8_t>();
    uint32_t n_distinct = 0;
    uint64_t seen = 0;
    for (size_t row = 0; row < rows; ++row) {
      const bool rotated = row_bit(rr.bitmap, row);
      if (!row_bit(bitmap, row)) {
        source[row] = rotated ? kNoHint : n_distinct++;
        continue;
      }
      if (rotated) r.corrupt("repeated row bitmap", "a rotated row marked repeated");
      if (++seen > n_copies) r.corrupt("repeated row bitmap", "more rows than the count");
      const uint64_t ref = r.varint("repeated row source");
      if (ref >= n_distinct) r.corrupt("repeated row source", "not an earlier distinct row");
      source[row] = static_cast<uint32_t>(ref);
    }
    if (seen != n_copies) r.corrupt("repeated row bitmap", "fewer rows than the count");
  }
  plan.distinct = (rows - static_cast<size_t>(n_copies + n_rotated)) * width;
  plan.low_form = r.u8("low plane form");
  if (plan.low_form != kLowRaw && plan.low_form != kLowStream)
    r.corrupt("low plane form", "not 0 or 1");
  plan.high_form = r.u8("high plane form");
  if (plan.high_form != kHighPooled && plan.high_form != kHighPerChannel) {
    r.corrupt("high plane form", "not 0 or 1");
  }
  plan.anchor = r.take(width, "channel anchors");
  for (const uint8_t a : plan.anchor) {
    if (a > 0x7f) r.corrupt("channel anchors", "an anchor above 0x7f");
  }
  const uint64_t hi_len = r.varint("high plane length");
  if (hi_len > r.remaining()) r.corrupt("high plane length", "runs past the data");
  plan.hi = r.take(hi_len, "high plane");
  plan.lo = r.rest();
  return plan;
}

// Method 2's fp16 bits of n values in rows of `width`: high bytes from their symbols and the
// channels' anchors, low bytes raw (or 0 where low is null, coded apart). Restrict parameters,
// one loop per form: the byte arrays may alias anything, and the compiler kept this loop scalar
// (a fifth of a lossless decode) while it could not rule that out, then checked the pointers
// per row where they were restrict locals (a third of the loop's time on 32-value rows).
void join_planes(const uint8_t* __restrict codes, const uint8_t* __restrict anchors,
                 const uint8_t* __restrict low, size_t n, size_t width, uint16_t* __restrict bits) {
  if (low) {
    for (size_t i = 0; i < n; i += width) {
      for (size_t c = 0; c < width; ++c)
        bits[i + c] =
            static_cast<uint16_t>((high_byte(codes[i + c], anchors[c]) << 8) | low[i + c]);
    }
  } else {
    for (size_t i = 0; i < n; i += width) {
      for (size_t c = 0; c < width; ++c)
        bits[i + c] = static_cast<uint16_t>(high_byte(codes[i + c], anchors[c]) << 8);
    }
  }
}

// The rest of method 2 once its high plane `high` is decoded: the bytes joined, the low plane
// if coded, then the repeated and rotated rows.
void finish_dedup(const DedupPlan& plan, const CodeStream& high, std::span<Half> out, size_t width,
                  const std::string& context) {
  const size_t distinct = plan.distinct, rows = out.size() / width;
  const std::span<Half> planes = out.first(distinct);
  if (plan.low_form == kLowRaw && plan.lo.size() != distinct) {
    throw Error(ErrorCode::corrupt_input, context + ": raw low plane is " +
                                              std::to_string(plan.lo.size()) + " bytes, expected " +
                                              std::to_string(distinct));
  }
  // Raw low bytes (the default) join their high bytes in the same pass.
  static_assert(sizeof(Half) == sizeof(uint16_t));
  uint16_t* const bits = reinterpret_cast<uint16_t*>(planes.data());
  if (plan.low_form == kLowRaw) {
    join_planes(high.codes.data(), plan.anchor.data(), plan.lo.data(), distinct, width, bits);
  } else {
    join_planes(high.codes.data(), plan.anchor.data(), nullptr, distinct, width, bits);
    unpack_plane(plan.lo, planes, width, 0, context + " (low bytes)");
  }
  const std::vector<uint32_t>& source = plan.source;
  if (source.empty()) return;
  for (size_t row = rows; row-- > 0;) {
    if (source[row] != row && source[row] != kNoHint) {
      std::memmove(out.data() + row * width, out.data() + size_t{source[row]} * width,
                   width * sizeof(Half));
    }
  }
  if (!plan.rr.distances.empty()) apply_rotated_rows(plan.rr, out, width, context);
}

void unpack_dedup(std::span<const uint8_t> body, std::span<Half> out, size_t width,
                  const std::string& context) {
  const DedupPlan plan = read_dedup(body, out.size() / width, width, context);
  const size_t dim = plan.high_dim();
  const CodeStream high =
      decode_plane(plan.hi, plan.distinct / dim, dim, context + " (high bytes)");
  finish_dedup(plan, high, out, width, context);
}

// Checks the framing unpack_fp16_lossless checks before a method's body; true for method 2.
bool is_dedup(std::span<const uint8_t> bytes, std::span<Half> out, size_t width, bool rows_dedup) {
  return rows_dedup && !bytes.empty() && bytes[0] == kRowsDedup && width != 0 && !out.empty() &&
         out.size() % width == 0;
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

void unpack_fp16_lossless(std::span<const uint8_t> bytes, std::span<Half> out, size_t width,
                          const std::string& context, bool rows_dedup) {
  if (bytes.empty()) throw Error(ErrorCode::truncated_input, context + ": no lossless method byte");
  const std::span<const uint8_t> body = bytes.subspan(1);
  if (bytes[0] == kPlanesZstd) return unpack_zstd(body, out, context);
  if (bytes[0] != kPlanesRans && !(bytes[0] == kRowsDedup && rows_dedup)) {
    throw Error(ErrorCode::corrupt_input,
                context + ": unknown lossless method " + std::to_string(bytes[0]) +
                    (bytes[0] == kRowsDedup ? " (method 2 needs file version 3)" : ""));
  }
  if (width == 0 || out.empty() || out.size() % width != 0) {
    throw Error(ErrorCode::corrupt_input, context + ": rANS planes for an empty tensor");
  }
  if (bytes[0] == kRowsDedup) return unpack_dedup(body, out, width, context);
  wire::Reader r(body, context);
  const uint64_t hi_len = r.varint("high plane length");
  if (hi_len > r.remaining()) {
    throw Error(ErrorCode::corrupt_input, context + ": high plane length runs past the data");
  }
  const auto hi = r.take(hi_len, "high plane");
  const auto lo = r.rest();
  for (Half& h : out) h.bits = 0;
  unpack_plane(hi, out, width, 8, context + " (high bytes)");
  unpack_plane(lo, out, width, 0, context + " (low bytes)");
}

void unpack_fp16_lossless_pair(const LosslessTensor& a, const LosslessTensor& b, size_t width,
                               bool rows_dedup) {
  if (is_dedup(a.bytes, a.out, width, rows_dedup) && is_dedup(b.bytes, b.out, width, rows_dedup)) {
    try {
      const DedupPlan pa = read_dedup(a.bytes.subspan(1), a.out.size() / width, width, *a.context);
      const DedupPlan pb = read_dedup(b.bytes.subspan(1), b.out.size() / width, width, *b.context);
      const std::string what_a = *a.context + " (high bytes): lossless byte plane";
      const std::string what_b = *b.context + " (high bytes): lossless byte plane";
      const auto [ha, hb] =
          decode_expecting_pair({pa.hi, pa.distinct / pa.high_dim(), pa.high_dim(), 8, &what_a},
                                {pb.hi, pb.distinct / pb.high_dim(), pb.high_dim(), 8, &what_b});
      finish_dedup(pa, ha, a.out, width, *a.context);
      finish_dedup(pb, hb, b.out, width, *b.context);
      return;
    } catch (const Error&) {  // decoded one at a time below: a's error first, as in sequence
    }
  }
  unpack_fp16_lossless(a.bytes, a.out, width, *a.context, rows_dedup);
  unpack_fp16_lossless(b.bytes, b.out, width, *b.context, rows_dedup);
}

}  // namespace cachegen::detail
