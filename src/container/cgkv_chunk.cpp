// Lossless fp16 tensor data. Each tensor's values are split into two byte planes - high bytes
// (sign, exponent, top mantissa bits: skewed, channel-dependent) and low bytes (mantissa: close
// to uniform) - and stored by whichever of two methods is smaller (a leading method byte):
//   0: both planes, low then high, as one zstd frame (content size set);
//   1: each plane as a cachegen code stream ("Codec stream": 8-bit codes [rows, width], per-channel
//      rANS models), high plane first with a varint length. Per-channel models see what a pooled
//      coder cannot: each channel's own exponent range.
#include <zstd.h>

#include <cstring>
#include <string>

#include "cachegen/codec.h"
#include "cachegen/error.h"
#include "container/cgkv_internal.h"
#include "core/wire.h"

namespace cachegen::detail {
namespace {

constexpr uint8_t kPlanesZstd = 0, kPlanesRans = 1;

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

// One byte plane [rows, width] as an 8-bit code stream (unit parameters: they are unused).
CodeStream plane_stream(std::span<const Half> values, size_t width, int shift) {
  CodeStream s;
  s.n_rows = values.size() / width;
  s.dim = width;
  s.bits = 8;
  s.group_size = s.n_rows < kMaxGroupSize ? s.n_rows : kMaxGroupSize;
  const size_t padded = s.n_groups() * s.group_size;
  s.codes.resize(padded * width);
  for (size_t i = 0; i < values.size(); ++i) {
    s.codes[i] = static_cast<uint8_t>(values[i].bits >> shift);
  }
  for (size_t i = values.size(); i < s.codes.size(); ++i) s.codes[i] = s.codes[i - width];
  s.scale.assign(s.n_groups() * width, 1.0f);
  s.zero.assign(s.n_groups() * width, 0.0f);
  return s;
}

std::vector<uint8_t> planes_rans(std::span<const Half> values, size_t width) {
  const std::vector<uint8_t> hi = encode(plane_stream(values, width, 8));
  const std::vector<uint8_t> lo = encode(plane_stream(values, width, 0));
  std::vector<uint8_t> out{kPlanesRans};
  wire::Writer w(out);
  w.varint(hi.size());
  w.bytes(hi);
  w.bytes(lo);
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

// Decodes one plane stream and ORs its bytes, shifted, into out.
void unpack_plane(std::span<const uint8_t> bytes, std::span<Half> out, size_t width, int shift,
                  const std::string& context) {
  const size_t rows = out.size() / width;
  DecodeOptions opt;
  opt.max_elements = (rows + (rows < kMaxGroupSize ? rows : kMaxGroupSize)) * width + width;
  const CodeStream s = decode(bytes, opt);
  if (s.n_rows != rows || s.dim != width || s.bits != 8) {
    throw Error(ErrorCode::corrupt_input,
                context + ": lossless byte plane is " + std::to_string(s.n_rows) + "x" +
                    std::to_string(s.dim) + " at " + std::to_string(s.bits) + " bits, expected " +
                    std::to_string(rows) + "x" + std::to_string(width) + " at 8");
  }
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].bits = static_cast<uint16_t>(out[i].bits | (s.codes[i] << shift));
  }
}

}  // namespace

std::vector<uint8_t> pack_fp16_lossless(std::span<const Half> values, size_t width,
                                        int zstd_level) {
  std::vector<uint8_t> best = planes_zstd(values, zstd_level);
  if (width > 0 && !values.empty() && values.size() % width == 0) {
    std::vector<uint8_t> rans = planes_rans(values, width);
    if (rans.size() < best.size()) best.swap(rans);
  }
  return best;
}

void unpack_fp16_lossless(std::span<const uint8_t> bytes, std::span<Half> out, size_t width,
                          const std::string& context) {
  if (bytes.empty()) throw Error(ErrorCode::truncated_input, context + ": no lossless method byte");
  const std::span<const uint8_t> body = bytes.subspan(1);
  if (bytes[0] == kPlanesZstd) return unpack_zstd(body, out, context);
  if (bytes[0] != kPlanesRans) {
    throw Error(ErrorCode::corrupt_input,
                context + ": unknown lossless method " + std::to_string(bytes[0]));
  }
  if (width == 0 || out.empty() || out.size() % width != 0) {
    throw Error(ErrorCode::corrupt_input, context + ": rANS planes for an empty tensor");
  }
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

}  // namespace cachegen::detail
