#include "core/wire.h"

namespace cachegen::wire {

uint64_t Reader::varint(const char* field) {
  const size_t start = offset();
  uint64_t v = 0;
  for (int i = 0; i < 10; ++i) {
    const uint8_t b = u8(field);
    if (i == 9 && b > 1) break;  // bits past 64
    v |= static_cast<uint64_t>(b & 0x7f) << (7 * i);
    if ((b & 0x80) == 0) {
      if (i > 0 && b == 0) {
        throw Error(ErrorCode::corrupt_input, ctx_ + ": varint '" + field + "' at offset " +
                                                  std::to_string(start) +
                                                  " is not minimally encoded");
      }
      return v;
    }
  }
  throw Error(ErrorCode::corrupt_input, ctx_ + ": varint '" + field + "' at offset " +
                                            std::to_string(start) +
                                            " is longer than 10 bytes or exceeds 64 bits");
}

void Reader::expect_zero(size_t n, const char* field) {
  const size_t start = offset();
  for (const uint8_t b : take(n, field)) {
    if (b != 0) {
      throw Error(ErrorCode::corrupt_input, ctx_ + ": reserved '" + field + "' at offset " +
                                                std::to_string(start) + " is not zero");
    }
  }
}

void Reader::expect_end(const char* what) const {
  if (remaining() != 0) {
    throw Error(ErrorCode::corrupt_input, ctx_ + ": " + std::to_string(remaining()) +
                                              " trailing bytes after " + what + " at offset " +
                                              std::to_string(offset()));
  }
}

void Reader::corrupt(const char* field, const std::string& why) const {
  throw Error(ErrorCode::corrupt_input,
              ctx_ + ": '" + field + "' before offset " + std::to_string(offset()) + ": " + why);
}

void Reader::truncated(uint64_t n, const char* field) const {
  throw Error(ErrorCode::truncated_input,
              ctx_ + ": '" + field + "' at offset " + std::to_string(offset()) + " needs " +
                  std::to_string(n) + " bytes, " + std::to_string(remaining()) + " left");
}

}  // namespace cachegen::wire
