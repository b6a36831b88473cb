// Reading lossless fp16 tensor data: every method, method 2's rows and planes checked as hostile
// input; and the rotation of method 2's rotated rows, which the writer predicts with too. The
// format and what the writer shares: lossless_internal.h.
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "cachegen/codec.h"
#include "cachegen/error.h"
#include "codec/stream_format.h"
#include "container/cgkv_internal.h"
#include "container/lossless_internal.h"
#include "container/lossless_kernels.h"
#include "core/wire.h"
#include "quant/kernels.h"

namespace cachegen::detail {

// pred = src rotated by `delta` rows (width values; every head alike). Each pair's (cos, sin)
// of delta times its angle by square-and-multiply in double (no fused multiply-add: the build
// sets -ffp-contract=off), so every decoder gets the same bits.
void rotate_row(const Rotation& rot, const Half* src, size_t width, uint64_t delta, Half* pred) {
  const size_t half = rot.dim / 2;
  const LosslessKernels& lk = lossless_kernels();
  std::vector<double>& cs = rot.last_cs;
  if (cs.size() != 2 * half || rot.last_delta != delta) {
    cs.resize(2 * half);
    lk.power_pairs(rot.squares.data(), half, delta, cs.data(), cs.data() + half);
    rot.last_delta = delta;
  }
  // Widened and rounded back by the SIMD kernels (the same values as half_to_float and
  // float_to_half per value, which took a quarter of a lossless decode's time).
  thread_local std::vector<float> x, y;
  x.resize(width);
  y.resize(width);
  const QuantKernels& kernels = quant_kernels();
  kernels.f16_to_f32(reinterpret_cast<const uint16_t*>(src), x.data(), width);
  lk.rotate_pairs(x.data(), cs.data(), cs.data() + half, width, rot.dim,
                  rot.mode == kRotationAdjacent, y.data());
  kernels.f32_to_f16(y.data(), reinterpret_cast<uint16_t*>(pred), width);
}

namespace {

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
  size_t high_dim() const { return high_form == kHighPerChannel ? anchor.size() : 1; }
};

DedupPlan read_dedup(std::span<const uint8_t> body, size_t rows, size_t width, uint16_t version,
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
  if (plan.high_form == kHighPooledDelta && version < kCgkvDeltaHighVersion)
    r.corrupt("high plane form", "2 needs file version 7");
  if (plan.high_form > kHighPooledDelta) r.corrupt("high plane form", "not 0, 1 or 2");
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

// The rest of method 2 once its high plane `high` is decoded: the symbols of form 2 summed
// over the rows, the bytes joined, the low plane if coded, then the repeated and rotated rows.
void finish_dedup(const DedupPlan& plan, const CodeStream& high, std::span<Half> out, size_t width,
                  const std::string& context) {
  const size_t distinct = plan.distinct, rows = out.size() / width;
  const uint8_t* symbols = high.codes.data();
  if (plan.high_form == kHighPooledDelta) {
    // Each row's symbols: its coded ones plus the row above's, mod 256 (the first row's as
    // coded), into this thread's buffer (the decoded stream is the decoder's; the loop
    // vectorises: restrict pointers, a row apart).
    thread_local std::vector<uint8_t> summed;
    summed.resize(distinct);
    std::memcpy(summed.data(), symbols, std::min(width, distinct));
    for (size_t at = width; at < distinct; at += width) {
      const uint8_t* __restrict coded = symbols + at;
      const uint8_t* __restrict above = summed.data() + at - width;
      uint8_t* __restrict row = summed.data() + at;
      for (size_t j = 0; j < width; ++j) row[j] = static_cast<uint8_t>(coded[j] + above[j]);
    }
    symbols = summed.data();
  }
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
    lossless_kernels().join_planes(symbols, plan.anchor.data(), plan.lo.data(), distinct, width,
                                   bits);
  } else {
    lossless_kernels().join_planes(symbols, plan.anchor.data(), nullptr, distinct, width, bits);
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
                  uint16_t version, const std::string& context) {
  const DedupPlan plan = read_dedup(body, out.size() / width, width, version, context);
  const size_t dim = plan.high_dim();
  const CodeStream high =
      decode_plane(plan.hi, plan.distinct / dim, dim, context + " (high bytes)");
  finish_dedup(plan, high, out, width, context);
}

// Checks the framing unpack_fp16_lossless checks before a method's body; true for method 2.
bool is_dedup(std::span<const uint8_t> bytes, std::span<Half> out, size_t width, uint16_t version) {
  return version >= kCgkvRowsDedupVersion && !bytes.empty() && bytes[0] == kRowsDedup &&
         width != 0 && !out.empty() && out.size() % width == 0;
}

}  // namespace

void unpack_fp16_lossless(std::span<const uint8_t> bytes, std::span<Half> out, size_t width,
                          const std::string& context, uint16_t version) {
  const bool rows_dedup = version >= kCgkvRowsDedupVersion;
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
  if (bytes[0] == kRowsDedup) return unpack_dedup(body, out, width, version, context);
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
                               uint16_t version) {
  if (is_dedup(a.bytes, a.out, width, version) && is_dedup(b.bytes, b.out, width, version)) {
    try {
      const size_t rows_a = a.out.size() / width, rows_b = b.out.size() / width;
      const DedupPlan pa = read_dedup(a.bytes.subspan(1), rows_a, width, version, *a.context);
      const DedupPlan pb = read_dedup(b.bytes.subspan(1), rows_b, width, version, *b.context);
      const std::string what_a = *a.context + " (high bytes): lossless byte plane";
      const std::string what_b = *b.context + " (high bytes): lossless byte plane";
      const auto& [ha, hb] =
          decode_expecting_pair({pa.hi, pa.distinct / pa.high_dim(), pa.high_dim(), 8, &what_a},
                                {pb.hi, pb.distinct / pb.high_dim(), pb.high_dim(), 8, &what_b});
      finish_dedup(pa, ha, a.out, width, *a.context);
      finish_dedup(pb, hb, b.out, width, *b.context);
      return;
    } catch (const Error&) {  // decoded one at a time below: a's error first, as in sequence
    }
  }
  unpack_fp16_lossless(a.bytes, a.out, width, *a.context, version);
  unpack_fp16_lossless(b.bytes, b.out, width, *b.context, version);
}

}  // namespace cachegen::detail
