// Internal: bit readers/writers for the codec stream's side information (MSB-first). Its
// byte-level fields go through the shared wire layer (core/wire.h), included here for them.
// Readers bound every access and throw Error(truncated_input) naming the field that ran out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/checks.h"
#include "core/wire.h"

namespace cachegen::detail {

// MSB-first bit writer; flush() pads the last byte with zero bits. The side information of a
// stream is thousands of short fields (two Exp-Golomb codes per group parameter), so the
// common case is inline: one shift into a 64-bit accumulator and, once a byte is complete,
// one 8-byte big-endian store of the accumulator into a buffer kept 8 bytes ahead.
class BitWriter {
 public:
  BitWriter() = default;
  // Writes into `storage`'s memory (its bytes are dropped; a buffer reused from one section to
  // the next is not allocated again).
  explicit BitWriter(std::vector<uint8_t>&& storage) : bytes_(std::move(storage)) {
    bytes_.resize(bytes_.capacity());
  }
  void put(uint64_t value, int n_bits) {  // n_bits in 0..57
    if (n_bits > 56) [[unlikely]] {
      put(value >> 28, n_bits - 28);
      put(value, 28);
      return;
    }
    acc_ = (acc_ << n_bits) | (value & ((uint64_t{1} << n_bits) - 1));
    fill_ += n_bits;
    if (fill_ >= 8) flush_bytes();
  }
  // Exp-Golomb of order k for v >= 0 (k in 0..30): len zeros, then (v >> k) + 1 in len + 1
  // bits, then the low k bits of v; the last two together are the number v + 2^k.
  void exp_golomb(uint64_t v, int k) {
    const int n = exp_golomb_bits(v, k);
    if (n <= 56) [[likely]] {
      put(v + (uint64_t{1} << k), n);
      return;
    }
    exp_golomb_long(v, k);
  }
  // Signed value through the zigzag map (0, -1, 1, -2, ...).
  void signed_exp_golomb(int64_t v, int k) { exp_golomb(zigzag(v), k); }
  // signed_exp_golomb(a[i], ka) then signed_exp_golomb(b[i], kb) for i < n, with the writer's
  // state in registers (through the members, every byte store, which may alias them, made the
  // compiler keep them in memory).
  void signed_exp_golomb_pairs(const int64_t* a, const int64_t* b, size_t n, int ka, int kb);
  // put(code[i], n_bits[i]) for i < n, n_bits[i] in 1..56, the writer's state in registers
  // (as above): codes made in bulk (write_params_compact's pairs on AVX-512).
  void put_codes(const uint64_t* code, const uint8_t* n_bits, size_t n);
  // exp_golomb(v[i], k) for i < n, the writer's state in registers (as above): a table's
  // frequency list.
  void exp_golomb_list(const uint16_t* v, size_t n, int k);
  // The first n_bits of bytes (MSB-first), e.g. another writer's finished bits.
  void put_bytes(std::span<const uint8_t> bytes, size_t n_bits);
  std::vector<uint8_t> finish();
  size_t bit_count() const noexcept { return pos_ * 8 + static_cast<size_t>(fill_); }

  static uint64_t zigzag(int64_t v) noexcept {
    return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
  }
  // Bits exp_golomb(v, k) would write.
  static int exp_golomb_bits(uint64_t v, int k) noexcept {
    const uint64_t w = (v >> k) + 1;
    const int len = 63 - __builtin_clzll(w);
    return 2 * len + 1 + k;
  }

 private:
  // Moves the whole bytes of acc_ (fill_ in 8..63 bits) to the buffer.
  void flush_bytes() {
    if (pos_ + 8 > bytes_.size()) grow();
    const uint64_t w = __builtin_bswap64(acc_ << (64 - fill_));
    std::memcpy(bytes_.data() + pos_, &w, 8);
    pos_ += static_cast<size_t>(fill_ >> 3);
    fill_ &= 7;
    acc_ &= (uint64_t{1} << fill_) - 1;
  }
  void grow();
  void exp_golomb_long(uint64_t v, int k);

  std::vector<uint8_t> bytes_;  // pos_ bytes written, then at least 8 bytes of room
  size_t pos_ = 0;
  uint64_t acc_ = 0;
  int fill_ = 0;  // bits in acc_ (< 8 between calls)
};

// One reader's side of a paired run (BitReader::signed_exp_golomb_runs).
struct BitRunSide {
  const uint8_t* in;
  size_t limit;  // positions below it load 8 bytes inside the input
  int64_t* out;
  size_t n;
  const int* k;  // the orders of codes 0, 1 (then in turn)
};
// Readers side by side for BitReader::signed_exp_golomb_lanes: reader j's input and its size
// (>= 8 bytes), bit position (advanced), output and orders.
inline constexpr size_t kMaxLaneReaders = 24;
struct LaneReaders {
  size_t n = 0;  // 1..kMaxLaneReaders
  const uint8_t* in[kMaxLaneReaders];
  size_t bytes[kMaxLaneReaders];
  size_t pos[kMaxLaneReaders];
  int64_t* out[kMaxLaneReaders];
  int k[kMaxLaneReaders][2];
};
// The lanes kernel (bit_io_avx512.cpp): codes [from, from + returned) of every reader, the
// returned count a multiple of 4 (see BitReader::signed_exp_golomb_lanes).
size_t signed_exp_golomb_lanes_avx512(LaneReaders& r, size_t from, size_t n) noexcept;
// A BitWriter's state as put_pairs and put_list take it.
struct BitPairState {
  uint8_t* out;
  size_t pos;
  uint64_t acc;
  int fill;
};
// An Exp-Golomb order and the bits it codes a section in.
struct ExpGolombOrder {
  int k = 24;
  uint64_t bits = UINT64_MAX;
};
// The Exp-Golomb kernels' entry points, compiled twice (bit_io_kernels.h); this path's.
struct ExpGolombKernels {
  size_t (*signed_run)(const uint8_t* in, size_t limit, size_t& pos, int64_t* out, size_t n,
                       const int k[2]) noexcept;
  size_t (*unsigned_run)(const uint8_t* in, size_t limit, size_t& pos, uint64_t* out, size_t n,
                         const int k[2]) noexcept;
  void (*signed_runs_pair)(const BitRunSide& a, size_t& pos_a, size_t& got_a, const BitRunSide& b,
                           size_t& pos_b, size_t& got_b) noexcept;
  size_t (*put_pairs)(BitPairState& s, const int64_t* a, const int64_t* b, size_t n, int ka,
                      int kb) noexcept;
  void (*put_codes)(BitPairState& s, const uint64_t* code, const uint8_t* n_bits,
                    size_t n) noexcept;
  void (*put_list)(BitPairState& s, const uint16_t* v, size_t n, int k) noexcept;
  ExpGolombOrder (*best_order)(const int64_t* residuals, size_t n, int max_prefix) noexcept;
};
const ExpGolombKernels& exp_golomb_kernels() noexcept;
const ExpGolombKernels& exp_golomb_kernels_bmi2() noexcept;

// Reads what BitWriter wrote. Reading past the end throws truncated_input; the padding bits of
// the last byte must be zero (checked by finish()). The common cases are inline (the side
// information of a stream is thousands of fields); errors and the stream's tail are not.
class BitReader {
 public:
  BitReader(std::span<const uint8_t> in, size_t base_offset) : in_(in), base_(base_offset) {}
  uint64_t get(int n_bits, const char* field) {
    if (static_cast<size_t>(n_bits) > bits_left()) [[unlikely]]
      past_end(field);
    if (n_bits == 0) return 0;
    if (n_bits > 56) [[unlikely]]
      return get_long(n_bits, field);
    const uint64_t v = window() >> (64 - n_bits);
    bit_pos_ += static_cast<size_t>(n_bits);
    return v;
  }
  // The prefix's zeros are counted at once; the errors are those of reading it bit by bit:
  // more than 40 zeros is corrupt, running out of bits first is truncated.
  uint64_t exp_golomb(int k, const char* field) {
    const uint64_t w = window();
    const size_t left = bits_left();
    size_t zeros = w == 0 ? 64 : static_cast<size_t>(__builtin_clzll(w));
    if (zeros > left) zeros = left;
    if (zeros > 40 || zeros == left) [[unlikely]]
      bad_prefix(zeros, field);
    const size_t total = 2 * zeros + 1 + static_cast<size_t>(k);
    if (total <= 57 && total <= left) {  // the whole code is in the window
      bit_pos_ += total;
      return (w >> (64 - total)) - (uint64_t{1} << k);
    }
    bit_pos_ += zeros + 1;
    const int len = static_cast<int>(zeros);
    const uint64_t v = (uint64_t{1} << len) | get(len, field);
    return ((v - 1) << k) | get(k, field);
  }
  int64_t signed_exp_golomb(int k, const char* field) {
    const uint64_t z = exp_golomb(k, field);
    return static_cast<int64_t>(z >> 1) ^ -static_cast<int64_t>(z & 1);
  }
  // Up to n signed Exp-Golomb codes of orders k[0], k[1], k[0], ... into out, the quick way
  // (several codes per 8-byte load, the bit position in a register): stops before a code that
  // is long (more than 57 bits with what precedes it in its load) or near the input's end, and
  // returns how many it read. signed_exp_golomb reads the one it stopped at, or reports it.
  // out[0] takes order k[0]: a caller resuming at an odd place passes the orders swapped.
  size_t signed_exp_golomb_run(int64_t* out, size_t n, const int k[2]) noexcept;
  // The same for unsigned codes (exp_golomb's values).
  size_t exp_golomb_run(uint64_t* out, size_t n, const int k[2]) noexcept;
  // signed_exp_golomb_run on two readers at once, their codes taken in turn (two chains side by
  // side): adds to got_a / got_b the codes each read into out_a / out_b (up to n_a / n_b), and
  // stops when either reader would stop.
  static void signed_exp_golomb_runs(BitReader& a, int64_t* out_a, size_t n_a, const int ka[2],
                                     size_t& got_a, BitReader& b, int64_t* out_b, size_t n_b,
                                     const int kb[2], size_t& got_b) noexcept;
  // signed_exp_golomb_run on up to kMaxLaneReaders readers in lockstep, one reader a 64-bit
  // vector lane (AVX-512 with CD's VPLZCNTQ): codes [from, n) of each into out[j] (from even;
  // codes 0, 1 of orders k[j][0], k[j][1], then in turn), four a reader at a time; returns how
  // many each read, a multiple of 4. It stops before four codes of any reader that do not fit
  // the 57 bits at their position or the bits left (signed_exp_golomb reads those, or reports
  // them); 0 where the path cannot run it (lanes_available()) or an input is under 8 bytes.
  static size_t signed_exp_golomb_lanes(std::span<BitReader* const> r, int64_t* const* out,
                                        size_t from, size_t n, const int (*k)[2]) noexcept;
  static bool lanes_available() noexcept;
  size_t bits_left() const noexcept { return in_.size() * 8 - bit_pos_; }
  // All bytes consumed except zero padding in the last partial byte.
  void finish(const char* section);

 private:
  // The next 64 bits from bit_pos_, MSB first, zeros past the end (at least 57 of them are
  // the input's when that many are left).
  uint64_t window() const noexcept {
    if ((bit_pos_ >> 3) + 8 > in_.size()) [[unlikely]]
      return window_tail();
    return window_at(bit_pos_);
  }
  // The 64 bits from bit position pos, MSB first, by one 8-byte load: pos < run_limit(), where
  // the load stays in the input and its first 57 bits are the input's (the runs' windows).
  uint64_t window_at(size_t pos) const noexcept {
    uint64_t w;
    std::memcpy(&w, in_.data() + (pos >> 3), 8);
    return __builtin_bswap64(w) << (pos & 7);
  }
  size_t run_limit() const noexcept { return in_.size() >= 8 ? (in_.size() - 8) * 8 : 0; }
  uint64_t window_tail() const noexcept;
  uint64_t get_long(int n_bits, const char* field);
  [[noreturn]] void past_end(const char* field) const;
  [[noreturn]] void bad_prefix(size_t zeros, const char* field) const;

  std::span<const uint8_t> in_;
  size_t base_;
  size_t bit_pos_ = 0;
};

}  // namespace cachegen::detail
