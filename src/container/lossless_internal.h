// Internal: lossless fp16 tensor data (docs/FORMAT.md, "Chunk payload"), what its writer
// (cgkv_lossless_write.cpp) and its reader (cgkv_lossless_read.cpp) share: the method and form
// bytes, method 2's high-byte symbols, its rotated rows' residuals and the rotation that predicts
// them.
//
// Each tensor's values are split into two byte planes - high bytes
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
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cachegen/half.h"

namespace cachegen::detail {

inline constexpr uint8_t kPlanesZstd = 0, kPlanesRans = 1, kRowsDedup = 2;
inline constexpr uint8_t kLowRaw = 0, kLowStream = 1;
inline constexpr uint8_t kHighPooled = 0, kHighPerChannel = 1, kHighPooledDelta = 2;
inline constexpr uint8_t kRotationNone = 0, kRotationAdjacent = 1, kRotationHalves = 2;
inline constexpr uint32_t kNoHint = UINT32_MAX;
inline constexpr unsigned kResidualEscape = 255;

// (The functions below are static: lossless_kernels_impl.h compiles them for AVX2 and AVX-512,
// and of an inline function's out-of-line copies the linker keeps any one.)
//
// Method 2's high-byte symbol: the channel's anchor minus the magnitude (exponent and two
// mantissa bits), mod 128, then the sign. Anchored, every channel's symbols follow nearly one
// distribution, so one table serves the whole tensor (per-channel tables of 512 tokens cost
// more bits than the channels' differences save: docs/PERFORMANCE.md, "Lossless tier").
static inline uint8_t high_symbol(Half h, uint8_t anchor) {
  return static_cast<uint8_t>((((anchor - (h.bits >> 8)) & 0x7f) << 1) | (h.bits >> 15));
}
static inline uint16_t high_byte(unsigned symbol, unsigned anchor) {
  return static_cast<uint16_t>(((symbol & 1) << 7) | ((anchor - (symbol >> 1)) & 0x7f));
}

// fp16 bits in value order (an order-preserving map to 0..65535), the zigzag difference of two
// such keys, and back.
// (Masks rather than conditionals, so that loops over rows vectorise.)
static inline uint16_t order_key(uint16_t h) {  // h ^ (negative ? 0xffff : 0x8000)
  return static_cast<uint16_t>(h ^ (0x8000u | (0u - (h >> 15u))));
}
static inline uint16_t from_order_key(uint16_t k) {  // k ^ (k & 0x8000 ? 0x8000 : 0xffff)
  return static_cast<uint16_t>(k ^ (0x8000u | ((k >> 15u) - 1u)));
}
static inline uint16_t residual_of(Half actual, Half pred) {
  const uint16_t d = static_cast<uint16_t>(order_key(actual.bits) - order_key(pred.bits));
  return static_cast<uint16_t>((d << 1) ^ ((d & 0x8000) ? 0xffff : 0));
}
static inline uint16_t apply_residual(uint16_t pred, uint16_t z) {
  const uint16_t d = static_cast<uint16_t>((z >> 1u) ^ (0u - (z & 1u)));
  return from_order_key(static_cast<uint16_t>(order_key(pred) + d));
}
static inline Half apply_residual(Half pred, uint16_t z) {
  return Half{apply_residual(pred.bits, z)};
}

// Rotated rows (method 2): a row predicted as an earlier row rotated, pair by pair, by the angle
// of its pair times the row distance - RoPE keys of a repeated token (docs/FORMAT.md).
struct Rotation {
  uint8_t mode = kRotationNone;
  size_t dim = 0;          // head_dim: pairs repeat every dim values
  std::vector<double> cs;  // per pair: cos, sin of its angle per row (as stored)
  // squares[k * dim ..]: every pair's cos, then every pair's sin, of its angle squared k times,
  // k < 64 (the square-and-multiply chain, the same for every distance: computed once).
  std::vector<double> squares;
  // The last distance's cos, then sin, per pair, as rotate_row computes them (rows of a
  // repeated span share their distance). A Rotation is used by one thread at a time.
  mutable uint64_t last_delta = 0;
  mutable std::vector<double> last_cs;
  void square_chain() {
    const size_t half = cs.size() / 2;
    squares.resize(64 * 2 * half);
    double* p = squares.data();
    for (size_t i = 0; i < half; ++i) p[i] = cs[2 * i], p[half + i] = cs[2 * i + 1];
    for (int k = 1; k < 64; ++k, p += 2 * half) {
      double* next = p + 2 * half;
      for (size_t i = 0; i < half; ++i) {
        next[i] = p[i] * p[i] - p[half + i] * p[half + i];
        next[half + i] = 2 * p[i] * p[half + i];
      }
    }
  }
};

// pred = src rotated by `delta` rows (width values; every head alike); cgkv_lossless_read.cpp.
void rotate_row(const Rotation& rot, const Half* src, size_t width, uint64_t delta, Half* pred);

}  // namespace cachegen::detail
