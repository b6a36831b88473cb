// Internal: the one little-endian wire layer. Every byte cachegen writes or parses (codec
// streams, .cgkv headers and chunks, llama.cpp state, context-store manifests, .npy and GGUF
// headers) goes through these accessors: no packed structs, no host-endian loads.
//
// wire::Reader never reads past its span: each read first bounds the bytes left and throws
// cachegen::Error naming the reader's context (e.g. "cgkv header"), the field and the absolute
// offset (the span's base offset plus the position in it):
//   truncated_input  the bytes end inside the field;
//   corrupt_input    a varint that is not minimal or longer than 10 bytes / 64 bits
//                    (docs/FORMAT.md: "unsigned LEB128, at most 10 bytes, minimally encoded"),
//                    non-zero reserved bytes (expect_zero), or a caller's corrupt() report.
// Readers and writers are cheap value types; not thread-safe (one per parse).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "cachegen/error.h"

namespace cachegen::wire {

// n (1..8) little-endian bytes at p, for code that has bounded its bytes already.
inline uint64_t load_le(const uint8_t* p, int n) noexcept {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}
// n 32-bit little-endian words at p into out (a float or uint32_t array): a copy on
// little-endian hosts (a word at a time from bytes did not vectorise).
inline void load_le32_array(const uint8_t* p, void* out, size_t n) noexcept {
  if constexpr (std::endian::native == std::endian::little) {
    if (n) std::memcpy(out, p, n * 4);
  } else {
    auto* o = static_cast<uint8_t*>(out);
    for (size_t i = 0; i < n; ++i) {
      const auto v = static_cast<uint32_t>(load_le(p + 4 * i, 4));
      std::memcpy(o + 4 * i, &v, 4);
    }
  }
}
// n 16-bit words from `in` as little-endian bytes at p: a copy on little-endian hosts.
inline void store_le16_array(uint8_t* p, const uint16_t* in, size_t n) noexcept {
  if constexpr (std::endian::native == std::endian::little) {
    if (n) std::memcpy(p, in, n * 2);
  } else {
    for (size_t i = 0; i < n; ++i) {
      p[2 * i] = static_cast<uint8_t>(in[i]);
      p[2 * i + 1] = static_cast<uint8_t>(in[i] >> 8);
    }
  }
}
// n 32-bit words from `in` (a float or uint32_t array) as little-endian bytes at p: a copy on
// little-endian hosts.
inline void store_le32_array(uint8_t* p, const void* in, size_t n) noexcept {
  if constexpr (std::endian::native == std::endian::little) {
    if (n) std::memcpy(p, in, n * 4);
  } else {
    for (size_t i = 0; i < n; ++i) {
      uint32_t v;
      std::memcpy(&v, static_cast<const uint8_t*>(in) + 4 * i, 4);
      for (int k = 0; k < 4; ++k) p[4 * i + k] = static_cast<uint8_t>(v >> (8 * k));
    }
  }
}
inline void store_le(uint8_t* p, uint64_t v, int n) noexcept {
  for (int i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// Bytes varint(v) writes (1..10).
inline size_t varint_size(uint64_t v) noexcept {
  size_t n = 1;
  for (; v >= 0x80; v >>= 7) ++n;
  return n;
}
// Writes v as an unsigned LEB128 (minimal) at p; returns the end (p + varint_size(v)).
inline uint8_t* store_varint(uint8_t* p, uint64_t v) noexcept {
  for (; v >= 0x80; v >>= 7) *p++ = static_cast<uint8_t>(v | 0x80);
  *p++ = static_cast<uint8_t>(v);
  return p;
}

// Appends to a caller's vector.
class Writer {
 public:
  explicit Writer(std::vector<uint8_t>& out) : out_(out) {}
  void u8(uint8_t v) { out_.push_back(v); }
  void u16(uint16_t v) { put(v, 2); }
  void u32(uint32_t v) { put(v, 4); }
  void u64(uint64_t v) { put(v, 8); }
  void i32(int32_t v) { put(static_cast<uint32_t>(v), 4); }
  void f32(float v) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    put(b, 4);
  }
  // Unsigned LEB128, minimal.
  void varint(uint64_t v) {
    uint8_t b[10];
    out_.insert(out_.end(), b, store_varint(b, v));
  }
  void bytes(std::span<const uint8_t> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  void zeros(size_t n) { out_.insert(out_.end(), n, 0); }
  // n more bytes, uninitialised as far as the caller is concerned: it writes every one.
  uint8_t* extend(size_t n) {
    out_.resize(out_.size() + n);
    return out_.data() + out_.size() - n;
  }
  size_t size() const noexcept { return out_.size(); }

 private:
  void put(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t>& out_;
};

// Bounded reads from a span. `context` names the structure in errors; `base_offset` is the
// span's offset in the file or stream, so errors give absolute offsets.
class Reader {
 public:
  Reader(std::span<const uint8_t> bytes, std::string context, size_t base_offset = 0)
      : b_(bytes), ctx_(std::move(context)), base_(base_offset) {}

  uint8_t u8(const char* field) { return static_cast<uint8_t>(get(1, field)); }
  uint16_t u16(const char* field) { return static_cast<uint16_t>(get(2, field)); }
  uint32_t u32(const char* field) { return static_cast<uint32_t>(get(4, field)); }
  uint64_t u64(const char* field) { return get(8, field); }
  int32_t i32(const char* field) { return static_cast<int32_t>(u32(field)); }
  float f32(const char* field) {
    const uint32_t b = u32(field);
    float v;
    std::memcpy(&v, &b, 4);
    return v;
  }
  // Strict unsigned LEB128: at most 10 bytes, fits 64 bits, no trailing zero group.
  uint64_t varint(const char* field);
  // A view of the next n bytes (n may come straight from a header: it is bounded first).
  std::span<const uint8_t> take(uint64_t n, const char* field) {
    need(n, field);
    const auto s = b_.subspan(pos_, static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }
  // The rest of the span.
  std::span<const uint8_t> rest() { return take(remaining(), "rest"); }
  // Reads n reserved bytes; any non-zero one is corrupt_input naming `field`.
  void expect_zero(size_t n, const char* field);
  // Throws corrupt_input unless every byte was read ("N trailing bytes after `what`").
  void expect_end(const char* what) const;
  // Throws truncated_input unless n bytes are left.
  void need(uint64_t n, const char* field) const {
    if (n > remaining()) truncated(n, field);
  }
  // corrupt_input "<context>: '<field>' before offset <offset>: <why>".
  [[noreturn]] void corrupt(const char* field, const std::string& why) const;

  size_t offset() const noexcept { return base_ + pos_; }  // absolute
  size_t position() const noexcept { return pos_; }        // within the span
  size_t remaining() const noexcept { return b_.size() - pos_; }
  const std::string& context() const noexcept { return ctx_; }

 private:
  uint64_t get(int n, const char* field) {
    need(static_cast<uint64_t>(n), field);
    const uint64_t v = load_le(b_.data() + pos_, n);
    pos_ += static_cast<size_t>(n);
    return v;
  }
  [[noreturn]] void truncated(uint64_t n, const char* field) const;

  std::span<const uint8_t> b_;
  std::string ctx_;
  size_t base_;
  size_t pos_ = 0;
};

}  // namespace cachegen::wire
