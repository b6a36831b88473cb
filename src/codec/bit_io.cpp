#include "codec/bit_io.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "cachegen/runtime.h"
#define CACHEGEN_EXP_GOLOMB_NS base
#include "codec/bit_io_kernels.h"

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

void BitWriter::signed_exp_golomb_pairs(const int64_t* a, const int64_t* b, size_t n, int ka,
                                        int kb) {
  // A code of at most 56 bits moves at most 8 bytes out: a run of pairs needs 16 bytes each
  // (plus the 8-byte store's slack). Longer codes go through exp_golomb_long.
  constexpr size_t kRun = 512;
  const auto put_pairs = exp_golomb_kernels().put_pairs;
  for (size_t i = 0; i < n;) {
    const size_t run = std::min(kRun, n - i);
    if (pos_ + 16 * run + 8 > bytes_.size()) bytes_.resize(2 * (pos_ + 16 * run + 8));
    BitPairState s{bytes_.data(), pos_, acc_, fill_};
    const size_t done = put_pairs(s, a + i, b + i, run, ka, kb);
    pos_ = s.pos, acc_ = s.acc, fill_ = s.fill;
    i += done / 2;
    if (done == 2 * run) continue;
    // A long code (may grow bytes_): the pair's a-code, then its b-code, or the b-code alone.
    if (done % 2 == 0) signed_exp_golomb(a[i], ka);
    signed_exp_golomb(b[i], kb);
    ++i;
  }
}

void BitWriter::put_codes(const uint64_t* code, const uint8_t* n_bits, size_t n) {
  // Room for the codes' bytes, the byte in progress and the 8-byte store's slack: sized by
  // their bits (8 bytes a code was ~8x the section, zero-filled: 2.5% of an encode).
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) total += n_bits[i];
  const size_t need = pos_ + total / 8 + 16;
  if (need > bytes_.size()) bytes_.resize(std::max(need, 2 * bytes_.size()));
  BitPairState s{bytes_.data(), pos_, acc_, fill_};
  exp_golomb_kernels().put_codes(s, code, n_bits, n);
  pos_ = s.pos, acc_ = s.acc, fill_ = s.fill;
}

void BitWriter::exp_golomb_list(const uint16_t* v, size_t n, int k) {
  if (k >= 24) {  // codes past put_list's 56 bits
    for (size_t i = 0; i < n; ++i) exp_golomb(v[i], k);
    return;
  }
  if (pos_ + 8 * n + 8 > bytes_.size()) bytes_.resize(2 * (pos_ + 8 * n + 8));
  BitPairState s{bytes_.data(), pos_, acc_, fill_};
  exp_golomb_kernels().put_list(s, v, n, k);
  pos_ = s.pos, acc_ = s.acc, fill_ = s.fill;
}

void BitWriter::put_bytes(std::span<const uint8_t> bytes, size_t n_bits) {
  const size_t whole = n_bits / 8;
  if (fill_ == 0) {  // byte-aligned: the whole bytes at once
    while (pos_ + whole + 8 > bytes_.size()) grow();
    if (whole) std::memcpy(bytes_.data() + pos_, bytes.data(), whole);
    pos_ += whole;
  } else {
    for (size_t i = 0; i < whole; ++i) put(bytes[i], 8);
  }
  if (n_bits % 8) put(bytes[whole] >> (8 - n_bits % 8), static_cast<int>(n_bits % 8));
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

const ExpGolombKernels& exp_golomb_kernels() noexcept {
  return simd_path() == SimdPath::scalar ? base::kExpGolomb : exp_golomb_kernels_bmi2();
}

size_t BitReader::signed_exp_golomb_run(int64_t* out, size_t n, const int k[2]) noexcept {
  return exp_golomb_kernels().signed_run(in_.data(), run_limit(), bit_pos_, out, n, k);
}
size_t BitReader::exp_golomb_run(uint64_t* out, size_t n, const int k[2]) noexcept {
  return exp_golomb_kernels().unsigned_run(in_.data(), run_limit(), bit_pos_, out, n, k);
}

void BitReader::signed_exp_golomb_runs(BitReader& a, int64_t* out_a, size_t n_a, const int ka[2],
                                       size_t& got_a, BitReader& b, int64_t* out_b, size_t n_b,
                                       const int kb[2], size_t& got_b) noexcept {
  const BitRunSide sa{a.in_.data(), a.run_limit(), out_a, n_a, ka};
  const BitRunSide sb{b.in_.data(), b.run_limit(), out_b, n_b, kb};
  exp_golomb_kernels().signed_runs_pair(sa, a.bit_pos_, got_a, sb, b.bit_pos_, got_b);
}

bool BitReader::lanes_available() noexcept {
  static const bool cd = [] {  // (every AVX-512 CPU so far)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512cd") != 0;
  }();
  return simd_path() == SimdPath::avx512 && cd;
}

size_t BitReader::signed_exp_golomb_lanes(std::span<BitReader* const> r, int64_t* const* out,
                                          size_t from, size_t n, const int (*k)[2]) noexcept {
  if (r.empty() || r.size() > kMaxLaneReaders || from % 2 != 0 || !lanes_available()) return 0;
  LaneReaders lanes;
  lanes.n = r.size();
  for (size_t j = 0; j < r.size(); ++j) {
    if (r[j]->in_.size() < 8) return 0;
    lanes.in[j] = r[j]->in_.data();
    lanes.bytes[j] = r[j]->in_.size();
    lanes.pos[j] = r[j]->bit_pos_;
    lanes.out[j] = out[j];
    lanes.k[j][0] = k[j][0];
    lanes.k[j][1] = k[j][1];
  }
  const size_t got = signed_exp_golomb_lanes_avx512(lanes, from, n);
  for (size_t j = 0; j < r.size(); ++j) r[j]->bit_pos_ = lanes.pos[j];
  return got;
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
