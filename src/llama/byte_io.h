// Little-endian readers and writers over byte spans for llama.cpp state bytes.
// ByteReader never reads past its span: every read first checks the bytes left and throws
// cachegen::Error(truncated_input) naming the field and its offset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "cachegen/error.h"

namespace cachegen::llama::detail {

class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  size_t offset() const { return pos_; }
  size_t remaining() const { return bytes_.size() - pos_; }

  uint32_t u32(const char* field) { return static_cast<uint32_t>(read_le(field, 4)); }
  int32_t i32(const char* field) { return static_cast<int32_t>(u32(field)); }
  uint64_t u64(const char* field) { return read_le(field, 8); }
  // A view of the next n bytes (n bounded against what is left before anything is copied).
  std::span<const uint8_t> take(const char* field, uint64_t n) {
    need(field, n);
    std::span<const uint8_t> out = bytes_.subspan(pos_, static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return out;
  }
  // Throws truncated_input unless n bytes are left (n may be a product checked by the caller).
  void need(const char* field, uint64_t n) const {
    if (n > remaining()) {
      throw Error(ErrorCode::truncated_input, std::string("llama state: '") + field +
                                                  "' at offset " + std::to_string(pos_) +
                                                  " needs " + std::to_string(n) + " bytes, " +
                                                  std::to_string(remaining()) + " left");
    }
  }
  [[noreturn]] void fail(const char* field, const std::string& why) const {
    throw Error(ErrorCode::corrupt_input, std::string("llama state: '") + field +
                                              "' before offset " + std::to_string(pos_) + ": " +
                                              why);
  }

 private:
  uint64_t read_le(const char* field, int n) {
    need(field, static_cast<uint64_t>(n));
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(bytes_[pos_ + i]) << (8 * i);
    pos_ += static_cast<size_t>(n);
    return v;
  }

  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

class ByteWriter {
 public:
  void u32(uint32_t v) { put_le(v, 4); }
  void i32(int32_t v) { put_le(static_cast<uint32_t>(v), 4); }
  void u64(uint64_t v) { put_le(v, 8); }
  void bytes(std::span<const uint8_t> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  void reserve(size_t n) { out_.reserve(n); }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  void put_le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t> out_;
};

// a * b, or throws corrupt_input when it overflows 64 bits.
inline uint64_t checked_mul(uint64_t a, uint64_t b, const char* field) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) {
    throw Error(ErrorCode::corrupt_input, std::string("llama state: '") + field + "' overflows");
  }
  return r;
}

}  // namespace cachegen::llama::detail
