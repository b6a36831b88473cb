// Internal: little-endian byte writing/reading for the container (no packed structs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cachegen/error.h"

namespace cachegen::detail {

class LeWriter {
 public:
  explicit LeWriter(std::vector<uint8_t>& out) : out_(out) {}
  void u8(uint8_t v) { out_.push_back(v); }
  void u16(uint16_t v) { put(v, 2); }
  void u32(uint32_t v) { put(v, 4); }
  void u64(uint64_t v) { put(v, 8); }
  void varint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<uint8_t>(v | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<uint8_t>(v));
  }
  void bytes(std::span<const uint8_t> b) { out_.insert(out_.end(), b.begin(), b.end()); }

 private:
  void put(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t>& out_;
};

// Reads fields from a span; running past the end throws truncated_input naming `what`.
class LeReader {
 public:
  LeReader(std::span<const uint8_t> b, std::string context, size_t base_offset = 0)
      : b_(b), ctx_(std::move(context)), base_(base_offset) {}
  uint8_t u8(const char* what) { return static_cast<uint8_t>(get(1, what)); }
  uint16_t u16(const char* what) { return static_cast<uint16_t>(get(2, what)); }
  uint32_t u32(const char* what) { return static_cast<uint32_t>(get(4, what)); }
  uint64_t u64(const char* what) { return get(8, what); }
  uint64_t varint(const char* what) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const uint8_t byte = u8(what);
      v |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (!(byte & 0x80)) return v;
    }
    throw Error(ErrorCode::corrupt_input, ctx_ + ": varint '" + what + "' is too long");
  }
  std::span<const uint8_t> take(size_t n, const char* what) {
    need(n, what);
    const auto s = b_.subspan(pos_, n);
    pos_ += n;
    return s;
  }
  size_t offset() const { return base_ + pos_; }
  size_t remaining() const { return b_.size() - pos_; }

 private:
  void need(size_t n, const char* what) {
    if (b_.size() - pos_ < n) {
      throw Error(ErrorCode::truncated_input,
                  ctx_ + ": ends inside '" + what + "' at offset " + std::to_string(offset()));
    }
  }
  uint64_t get(int n, const char* what) {
    need(static_cast<size_t>(n), what);
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(b_[pos_ + i]) << (8 * i);
    pos_ += static_cast<size_t>(n);
    return v;
  }
  std::span<const uint8_t> b_;
  std::string ctx_;
  size_t base_;
  size_t pos_ = 0;
};

}  // namespace cachegen::detail
