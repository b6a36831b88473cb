#include "store/store_key.h"

#include "cachegen/error.h"
#include "cachegen/store.h"

namespace cachegen {
namespace {

bool is_control(unsigned char c) {
  return c < 0x20 || c == 0x7F;
}

bool is_plain_file_char(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

constexpr char kHexUpper[] = "0123456789ABCDEF";

int hex_upper_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

void check_store_key(std::string_view key) {
  using store_detail::printable_key;
  if (key.empty()) throw Error(ErrorCode::invalid_argument, "store key is empty");
  if (key.size() > kMaxStoreKeyBytes) {
    throw Error(ErrorCode::invalid_argument,
                "store key " + printable_key(key) + " is " + std::to_string(key.size()) +
                    " bytes; the limit is " + std::to_string(kMaxStoreKeyBytes));
  }
  for (size_t i = 0; i < key.size(); ++i) {
    const auto c = static_cast<unsigned char>(key[i]);
    if (is_control(c)) {
      throw Error(ErrorCode::invalid_argument,
                  "store key " + printable_key(key) + " has control byte 0x" + kHexUpper[c >> 4] +
                      kHexUpper[c & 15] + " at offset " + std::to_string(i) +
                      "; keys may not contain NUL or other control bytes");
    }
  }
}

namespace store_detail {

std::string printable_key(std::string_view key) {
  constexpr size_t kShownBytes = 80;
  std::string out = "'";
  for (size_t i = 0; i < key.size() && i < kShownBytes; ++i) {
    const auto c = static_cast<unsigned char>(key[i]);
    if (is_control(c) || c >= 0x80 || c == '\\' || c == '\'') {
      out += "\\x";
      out += kHexUpper[c >> 4];
      out += kHexUpper[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  out += "'";
  if (key.size() > kShownBytes) out += "... (" + std::to_string(key.size()) + " bytes)";
  return out;
}

std::string key_to_file_name(std::string_view key) {
  std::string name;
  name.reserve(key.size());
  for (size_t i = 0; i < key.size(); ++i) {
    const auto c = static_cast<unsigned char>(key[i]);
    if (is_plain_file_char(c) && !(i == 0 && c == '.')) {
      name += static_cast<char>(c);
    } else {
      name += '%';
      name += kHexUpper[c >> 4];
      name += kHexUpper[c & 15];
    }
  }
  return name;
}

std::optional<std::string> file_name_to_key(std::string_view name) {
  if (name.empty() || name[0] == '.') return std::nullopt;
  std::string key;
  for (size_t i = 0; i < name.size(); ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (is_plain_file_char(c)) {
      key += static_cast<char>(c);
      continue;
    }
    if (c != '%' || i + 2 >= name.size()) return std::nullopt;
    const int hi = hex_upper_value(name[i + 1]), lo = hex_upper_value(name[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    key += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  // Only canonical names map back: re-encoding must give the same name.
  if (key_to_file_name(key) != name) return std::nullopt;
  try {
    check_store_key(key);
  } catch (const Error&) {
    return std::nullopt;
  }
  return key;
}

}  // namespace store_detail
}  // namespace cachegen
