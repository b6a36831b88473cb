#include "codec/bit_io.h"

#include <cstring>
#include <string>

namespace cachegen::detail {

namespace {
uint64_t low_bits(int n) {
  return n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
}
}  // namespace

void BitWriter::put(uint64_t value, int n_bits) {
  // Up to 56 bits at a time on top of the < 8 pending ones; whole bytes leave as they fill.
  while (n_bits > 0) {
    const int take = n_bits < 56 ? n_bits : 56;
    n_bits -= take;
    acc_ = (acc_ << take) | ((value >> n_bits) & low_bits(take));
    fill_ += take;
    while (fill_ >= 8) {
      fill_ -= 8;
      bytes_.push_back(static_cast<uint8_t>(acc_ >> fill_));
    }
    acc_ &= low_bits(fill_);
  }
}

void BitWriter::exp_golomb(uint64_t v, int k) {
  const uint64_t w = (v >> k) + 1;
  const int len = 63 - __builtin_clzll(w);
  put(0, len);
  put(w, len + 1);
  put(v & ((uint64_t{1} << k) - 1), k);
}

std::vector<uint8_t> BitWriter::finish() {
  if (fill_ > 0) put(0, 8 - fill_);
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
