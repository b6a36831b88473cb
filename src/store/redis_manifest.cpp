#include "store/redis_manifest.h"

#include "cachegen/error.h"

namespace cachegen::store_detail {
namespace {

constexpr std::string_view kMagic = "CGS1";

void put_hex(std::string& out, uint64_t v, int digits) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (int i = digits - 1; i >= 0; --i) out += kHex[(v >> (4 * i)) & 15];
}

// Reads `digits` lower-case hex digits at `pos`, or throws naming `field`.
uint64_t get_hex(std::string_view s, size_t pos, int digits, const char* field,
                 const std::string& where) {
  uint64_t v = 0;
  for (int i = 0; i < digits; ++i) {
    const char c = s[pos + i];
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      throw Error(ErrorCode::corrupt_input, "RedisStore: manifest of " + where + " has a bad " +
                                                field + " field at offset " +
                                                std::to_string(pos + i));
    }
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

}  // namespace

std::string encode_manifest_header(const Manifest& m) {
  std::string out(kMagic);
  out.reserve(kManifestHeaderBytes);
  out += ' ';
  put_hex(out, m.generation, 16);
  out += ' ';
  put_hex(out, m.parts, 8);
  out += ' ';
  put_hex(out, m.part_bytes, 8);
  out += ' ';
  put_hex(out, m.total_bytes, 16);
  out += ' ';
  put_hex(out, m.xxh64, 16);
  out += '\n';
  return out;
}

Manifest parse_manifest_header(std::string_view bytes, const std::string& where) {
  auto corrupt = [&](const std::string& what) {
    return Error(ErrorCode::corrupt_input, "RedisStore: manifest of " + where + " " + what);
  };
  if (bytes.size() < kManifestHeaderBytes) {
    throw corrupt("is " + std::to_string(bytes.size()) + " bytes, shorter than its " +
                  std::to_string(kManifestHeaderBytes) + "-byte header");
  }
  if (bytes.substr(0, kMagic.size()) != kMagic) throw corrupt("does not start with 'CGS1'");
  for (size_t pos : {4, 21, 30, 39, 56}) {
    if (bytes[pos] != ' ') throw corrupt("has no separator at offset " + std::to_string(pos));
  }
  if (bytes[73] != '\n') throw corrupt("header does not end with a newline at offset 73");
  Manifest m;
  m.generation = get_hex(bytes, 5, 16, "generation", where);
  m.parts = static_cast<uint32_t>(get_hex(bytes, 22, 8, "part count", where));
  m.part_bytes = static_cast<uint32_t>(get_hex(bytes, 31, 8, "part size", where));
  m.total_bytes = get_hex(bytes, 40, 16, "total size", where);
  m.xxh64 = get_hex(bytes, 57, 16, "checksum", where);
  if (m.parts == 0) {
    if (m.part_bytes != 0) throw corrupt("is inline but names a part size");
  } else {
    if (m.part_bytes == 0) throw corrupt("has parts of size 0");
    const uint64_t expected =
        m.total_bytes / m.part_bytes + (m.total_bytes % m.part_bytes != 0 ? 1 : 0);
    if (m.total_bytes == 0 || expected != m.parts) {
      throw corrupt("says " + std::to_string(m.parts) + " parts of " +
                    std::to_string(m.part_bytes) + " bytes for a " + std::to_string(m.total_bytes) +
                    "-byte value");
    }
  }
  return m;
}

std::string manifest_key(std::string_view key) {
  return "cgs:m:" + std::string(key);
}

std::string part_key(std::string_view key, uint64_t generation, uint32_t index) {
  std::string out = "cgs:p:" + std::string(key) + ":";
  put_hex(out, generation, 16);
  out += ':';
  out += std::to_string(index);
  return out;
}

}  // namespace cachegen::store_detail
