// Internal: the C API's argument checks and library-allocated buffers (released by
// cachegen_free, which is free()).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "cachegen/error.h"

namespace cachegen::capi {

// Throws invalid_argument naming `name` when p is NULL.
inline void need(const void* p, const char* name) {
  if (p == nullptr) throw Error(ErrorCode::invalid_argument, std::string(name) + " is NULL");
}

// A malloc'ed copy of bytes (NULL when empty); bad_alloc when malloc fails.
inline uint8_t* malloc_copy(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return nullptr;
  auto* p = static_cast<uint8_t*>(std::malloc(bytes.size()));
  if (p == nullptr) throw std::bad_alloc();
  std::memcpy(p, bytes.data(), bytes.size());
  return p;
}

// Strings one after another, each NUL-terminated, in one malloc'ed buffer (NULL when none).
inline char* malloc_strings(const std::vector<std::string>& strings) {
  size_t n = 0;
  for (const std::string& s : strings) n += s.size() + 1;
  if (n == 0) return nullptr;
  auto* p = static_cast<char*>(std::malloc(n));
  if (p == nullptr) throw std::bad_alloc();
  char* at = p;
  for (const std::string& s : strings) {
    std::memcpy(at, s.c_str(), s.size() + 1);
    at += s.size() + 1;
  }
  return p;
}

// out-parameter pair for a library-allocated byte buffer: checked and cleared first.
struct BytesOut {
  uint8_t** data;
  size_t* size;
  BytesOut(uint8_t** d, size_t* s) : data(d), size(s) {
    need(d, "out");
    *d = nullptr;
    need(s, "out_size");
    *s = 0;
  }
  void set(std::span<const uint8_t> bytes) const {
    *data = malloc_copy(bytes);
    *size = bytes.size();
  }
};

}  // namespace cachegen::capi
