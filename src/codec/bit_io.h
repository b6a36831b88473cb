// Internal: bit readers/writers for the codec stream's side information (MSB-first). Its
// byte-level fields go through the shared wire layer (core/wire.h), included here for them.
// Readers bound every access and throw Error(truncated_input) naming the field that ran out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/checks.h"
#include "core/wire.h"

namespace cachegen::detail {

// MSB-first bit writer; flush() pads the last byte with zero bits.
class BitWriter {
 public:
  void put(uint64_t value, int n_bits);  // n_bits in 0..57
  // Exp-Golomb of order k for v >= 0 (k in 0..30).
  void exp_golomb(uint64_t v, int k);
  // Signed value through the zigzag map (0, -1, 1, -2, ...).
  void signed_exp_golomb(int64_t v, int k) { exp_golomb(zigzag(v), k); }
  std::vector<uint8_t> finish();
  size_t bit_count() const noexcept { return bytes_.size() * 8 + fill_; }

  static uint64_t zigzag(int64_t v) noexcept {
    return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
  }
  // Bits exp_golomb(v, k) would write.
  static int exp_golomb_bits(uint64_t v, int k) noexcept {
    const uint64_t w = (v >> k) + 1;
    const int len = 63 - __builtin_clzll(w);
    return 2 * len + 1 + k;
  }

 private:
  std::vector<uint8_t> bytes_;
  uint64_t acc_ = 0;
  int fill_ = 0;  // bits in acc_
};

// Reads what BitWriter wrote. Reading past the end throws truncated_input; the padding bits of
// the last byte must be zero (checked by finish()).
class BitReader {
 public:
  BitReader(std::span<const uint8_t> in, size_t base_offset) : in_(in), base_(base_offset) {}
  uint64_t get(int n_bits, const char* field);
  uint64_t exp_golomb(int k, const char* field);
  int64_t signed_exp_golomb(int k, const char* field) {
    const uint64_t z = exp_golomb(k, field);
    return static_cast<int64_t>(z >> 1) ^ -static_cast<int64_t>(z & 1);
  }
  size_t bits_left() const noexcept { return in_.size() * 8 - bit_pos_; }
  // All bytes consumed except zero padding in the last partial byte.
  void finish(const char* section);

 private:
  // The next 64 bits from bit_pos_, MSB first, zeros past the end (at least 57 of them are
  // the input's when that many are left).
  uint64_t window() const noexcept;

  std::span<const uint8_t> in_;
  size_t base_;
  size_t bit_pos_ = 0;
};

}  // namespace cachegen::detail
