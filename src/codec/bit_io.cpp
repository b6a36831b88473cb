#include "codec/bit_io.h"

#include <cstring>
#include <string>

namespace cachegen::detail {

void BitWriter::grow() {
  bytes_.resize(bytes_.size() < 56 ? 64 : 2 * bytes_.size());
}

void BitWriter::exp_golomb_long(uint64_t v, int k) {
  const uint64_t w = (v >> k) + 1;
  const int len = 63 - __builtin_clzll(w);
  put(0, len);
  put(w, len + 1);
  put(v & ((uint64_t{1} << k) - 1), k);
}

std::vector<uint8_t> BitWriter::finish() {
  if (fill_ > 0) put(0, 8 - fill_);
  bytes_.resize(pos_);
  pos_ = 0;
  return std::move(bytes_);
}

uint64_t BitReader::window_tail() const noexcept {
  const size_t byte = bit_pos_ >> 3;
  uint64_t w = 0;
  for (size_t i = 0; i < 8; ++i) w = (w << 8) | (byte + i < in_.size() ? in_[byte + i] : 0u);
  return w << (bit_pos_ & 7);
}

uint64_t BitReader::get_long(int n_bits, const char* field) {
  const uint64_t high = get(n_bits - 32, field);
  return (high << 32) | get(32, field);
}

void BitReader::past_end(const char* field) const {
  fail(ErrorCode::truncated_input, std::string("codec stream: ") + field +
                                       ": bit field runs past its section ending at offset " +
                                       std::to_string(base_ + in_.size()));
}

void BitReader::bad_prefix(size_t zeros, const char* field) const {
  if (zeros > 40) {
    fail(ErrorCode::corrupt_input, std::string("codec stream: ") + field +
                                       ": Exp-Golomb prefix longer than 40 bits near offset " +
                                       std::to_string(base_ + (bit_pos_ + 41) / 8));
  }
  past_end(field);  // the prefix ran out of bits
}

void BitReader::finish(const char* section) {
  const size_t used_bytes = (bit_pos_ + 7) / 8;
  if (used_bytes != in_.size() ||
      (bit_pos_ % 8 != 0 && get(static_cast<int>(8 - bit_pos_ % 8), section) != 0)) {
    fail(ErrorCode::corrupt_input, std::string("codec stream: ") + section +
                                       " has trailing or non-zero padding bits before offset " +
                                       std::to_string(base_ + in_.size()));
  }
}

}  // namespace cachegen::detail
