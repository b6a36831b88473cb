#include "codec/bit_io.h"

namespace cachegen::detail {

void BitWriter::put(uint64_t value, int n_bits) {
  for (int i = n_bits - 1; i >= 0; --i) {
    acc_ = (acc_ << 1) | ((value >> i) & 1);
    if (++fill_ == 8) {
      bytes_.push_back(static_cast<uint8_t>(acc_));
      acc_ = 0;
      fill_ = 0;
    }
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

uint64_t BitReader::get(int n_bits, const char* field) {
  if (static_cast<size_t>(n_bits) > bits_left()) {
    fail(ErrorCode::truncated_input, std::string("codec stream: ") + field +
                                         ": bit field runs past its section ending at offset " +
                                         std::to_string(base_ + in_.size()));
  }
  uint64_t v = 0;
  for (int i = 0; i < n_bits; ++i, ++bit_pos_) {
    v = (v << 1) | ((in_[bit_pos_ >> 3] >> (7 - (bit_pos_ & 7))) & 1);
  }
  return v;
}

uint64_t BitReader::exp_golomb(int k, const char* field) {
  int len = 0;
  while (get(1, field) == 0) {
    if (++len > 40) {
      fail(ErrorCode::corrupt_input, std::string("codec stream: ") + field +
                                         ": Exp-Golomb prefix longer than 40 bits near offset " +
                                         std::to_string(base_ + bit_pos_ / 8));
    }
  }
  const uint64_t w = (uint64_t{1} << len) | get(len, field);
  return ((w - 1) << k) | get(k, field);
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
