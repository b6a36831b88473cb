// Internal: byte and bit readers/writers for the codec stream. Little-endian throughout.
// Readers bound every access and throw Error(truncated_input) naming the field that ran out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/checks.h"

namespace cachegen::detail {

// Appends little-endian integers and LEB128 varints to a byte vector.
class ByteWriter {
 public:
  explicit ByteWriter(std::vector<uint8_t>& out) : out_(out) {}
  void u8(uint8_t v) { out_.push_back(v); }
  void u16(uint16_t v) {
    out_.push_back(static_cast<uint8_t>(v));
    out_.push_back(static_cast<uint8_t>(v >> 8));
  }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void varint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<uint8_t>(v | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<uint8_t>(v));
  }
  void bytes(std::span<const uint8_t> b) { out_.insert(out_.end(), b.begin(), b.end()); }

 private:
  std::vector<uint8_t>& out_;
};

class ByteReader {
 public:
  ByteReader(std::span<const uint8_t> in, size_t base_offset = 0) : in_(in), base_(base_offset) {}
  size_t offset() const noexcept { return base_ + pos_; }
  size_t remaining() const noexcept { return in_.size() - pos_; }
  void need(size_t n, const char* field) const {
    if (remaining() < n) {
      fail(ErrorCode::truncated_input,
           std::string("codec stream: ") + field + " at offset " + std::to_string(offset()) +
               " needs " + std::to_string(n) + " bytes, " + std::to_string(remaining()) + " left");
    }
  }
  uint8_t u8(const char* field) {
    need(1, field);
    return in_[pos_++];
  }
  uint16_t u16(const char* field) {
    need(2, field);
    uint16_t v = static_cast<uint16_t>(in_[pos_] | (in_[pos_ + 1] << 8));
    pos_ += 2;
    return v;
  }
  uint32_t u32(const char* field) {
    need(4, field);
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(in_[pos_ + i]) << (8 * i);
    pos_ += 4;
    return v;
  }
  // LEB128, at most 10 bytes, value must fit 64 bits and be minimally encoded.
  uint64_t varint(const char* field);
  std::span<const uint8_t> bytes(size_t n, const char* field) {
    need(n, field);
    auto s = in_.subspan(pos_, n);
    pos_ += n;
    return s;
  }

 private:
  std::span<const uint8_t> in_;
  size_t base_;
  size_t pos_ = 0;
};

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
  std::span<const uint8_t> in_;
  size_t base_;
  size_t bit_pos_ = 0;
};

}  // namespace cachegen::detail
