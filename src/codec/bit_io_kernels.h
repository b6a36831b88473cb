// Internal: the Exp-Golomb kernels' bodies (BitReader's runs, BitWriter's pairs, the order
// search), included by bit_io.cpp (the baseline) and bit_io_bmi2.cpp (compiled with -mlzcnt
// -mbmi2: one LZCNT per prefix and flag-free shifts; +8% on an AVX2 compact-parameter decode),
// each inside its own namespace, which uses nothing inline from other headers (the linker could
// merge such a function's copies into one with the wrong instructions). exp_golomb_kernels()
// picks one at run time (cachegen::simd_path()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

namespace cachegen::detail::CACHEGEN_EXP_GOLOMB_NS {

// The 64 bits from bit position pos, MSB first, by one 8-byte load (pos below the run limit):
// BitReader::window_at's, a copy of this namespace's own (an inline function shared with the
// other target's TU could be merged by the linker into a copy using the wrong instructions).
static inline uint64_t window_at(const uint8_t* in, size_t pos) noexcept {
  uint64_t w;
  std::memcpy(&w, in + (pos >> 3), 8);
  return __builtin_bswap64(w) << (pos & 7);
}

// The leading zeros of w; 64 or more for w == 0 (LZCNT gives 64; without it, w | 1 counts 63,
// which makes any code's total run past the window as well).
static inline size_t leading_zeros(uint64_t w) noexcept {
#ifdef __LZCNT__
  return static_cast<size_t>(__builtin_ia32_lzcnt_u64(w));
#else
  return static_cast<size_t>(__builtin_clzll(w | 1));
#endif
}

// One code from the top of w, which holds 57 - used bits of input (then zeros), as its raw
// value v + 2^order (order_bits: order + 1): false, with nothing changed, if it does not end
// within them. A prefix running past them (counting the zeros shifted in, or w == 0) gives a
// total past them too. The order's offset and the signed map are taken off afterwards, the
// whole run at once (finish_codes): the chain from one code's length to the next is the loop.
static inline bool take_code(uint64_t& w, size_t& used, size_t order_bits, uint64_t& raw) noexcept {
  const size_t total = 2 * leading_zeros(w) + order_bits;
  if (used + total > 57) [[unlikely]]
    return false;
  raw = w >> ((0 - total) & 63);  // w >> (64 - total): one negation for SHRX's count
  w <<= total;                    // total <= 57
  used += total;
  return true;
}

// out[0..n) from raw values to codes of orders k[0], k[1], ... (signed: zigzag-decoded).
template <class T>
static void finish_codes(T* out, size_t n, const int k[2]) noexcept {
  const uint64_t off[2] = {uint64_t{1} << k[0], uint64_t{1} << k[1]};
  const auto one = [](uint64_t raw, uint64_t offset) {
    const uint64_t z = raw - offset;
    if constexpr (std::is_signed_v<T>) {
      return static_cast<T>(static_cast<int64_t>(z >> 1) ^ -static_cast<int64_t>(z & 1));
    } else {
      return static_cast<T>(z);
    }
  };
  size_t i = 0;
  for (; i + 2 <= n; i += 2) {
    out[i] = one(static_cast<uint64_t>(out[i]), off[0]);
    out[i + 1] = one(static_cast<uint64_t>(out[i + 1]), off[1]);
  }
  if (i < n) out[i] = one(static_cast<uint64_t>(out[i]), off[0]);
}

// Up to n codes of orders k[0], k[1], ... from bit position pos (advanced) while it is below
// limit; returns how many.
template <class T>
static size_t code_run(const uint8_t* in, size_t limit, size_t& pos_io, T* out, size_t n,
                       const int k[2]) noexcept {
  uint64_t* const raw = reinterpret_cast<uint64_t*>(out);
  const size_t order_bits[2] = {static_cast<size_t>(k[0]) + 1, static_cast<size_t>(k[1]) + 1};
  size_t pos = pos_io, i = 0;
  while (i < n && pos < limit) {
    uint64_t w = window_at(in, pos);
    size_t used = 0;
    const size_t start = i;
    // Two codes a step, of orders in turn (the run's parity from i).
    const size_t bits_a = order_bits[i & 1], bits_b = order_bits[(i + 1) & 1];
    for (;;) {
      if (i + 2 > n) {
        if (i < n && take_code(w, used, bits_a, raw[i])) ++i;
        break;
      }
      if (!take_code(w, used, bits_a, raw[i])) break;
      if (!take_code(w, used, bits_b, raw[i + 1])) {
        ++i;
        break;
      }
      i += 2;
    }
    pos += used;
    if (i == start) break;  // a long code, for signed_exp_golomb
  }
  pos_io = pos;
  finish_codes(out, i, k);
  return i;
}

static size_t signed_run(const uint8_t* in, size_t limit, size_t& pos, int64_t* out, size_t n,
                         const int k[2]) noexcept {
  return code_run(in, limit, pos, out, n, k);
}
static size_t unsigned_run(const uint8_t* in, size_t limit, size_t& pos, uint64_t* out, size_t n,
                           const int k[2]) noexcept {
  return code_run(in, limit, pos, out, n, k);
}

// Two readers' signed runs, their codes taken in turn; each stops where its own run would.
static void signed_runs_pair(const BitRunSide& a, size_t& pos_a_io, size_t& got_a,
                             const BitRunSide& b, size_t& pos_b_io, size_t& got_b) noexcept {
  uint64_t* const raw_a = reinterpret_cast<uint64_t*>(a.out);
  uint64_t* const raw_b = reinterpret_cast<uint64_t*>(b.out);
  const size_t bits_a[2] = {static_cast<size_t>(a.k[0]) + 1, static_cast<size_t>(a.k[1]) + 1};
  const size_t bits_b[2] = {static_cast<size_t>(b.k[0]) + 1, static_cast<size_t>(b.k[1]) + 1};
  size_t pos_a = pos_a_io, pos_b = pos_b_io, i = 0, j = 0;
  while (i < a.n && j < b.n && pos_a < a.limit && pos_b < b.limit) {
    uint64_t wa = window_at(a.in, pos_a), wb = window_at(b.in, pos_b);
    size_t used_a = 0, used_b = 0;
    const size_t start_a = i, start_b = j;
    // Two codes of each a step while both have two more (their orders in turn; a code that
    // does not fit ends the window), then one of each while both have one.
    const size_t a0 = bits_a[i & 1], a1 = bits_a[(i + 1) & 1];
    const size_t b0 = bits_b[j & 1], b1 = bits_b[(j + 1) & 1];
    bool fit = true;
    while (fit && i + 2 <= a.n && j + 2 <= b.n) {
      const bool first_a = take_code(wa, used_a, a0, raw_a[i]);
      const bool first_b = take_code(wb, used_b, b0, raw_b[j]);
      const bool second_a = first_a && take_code(wa, used_a, a1, raw_a[i + 1]);
      const bool second_b = first_b && take_code(wb, used_b, b1, raw_b[j + 1]);
      i += size_t{first_a} + size_t{second_a};
      j += size_t{first_b} + size_t{second_b};
      fit = first_a & first_b & second_a & second_b;
    }
    while (fit) {
      const bool more_a = i < a.n && take_code(wa, used_a, bits_a[i & 1], raw_a[i]);
      i += more_a;
      const bool more_b = j < b.n && take_code(wb, used_b, bits_b[j & 1], raw_b[j]);
      j += more_b;
      fit = more_a & more_b;
    }
    pos_a += used_a;
    pos_b += used_b;
    if (i == start_a || j == start_b) break;  // a long code: each reader's own run from here
  }
  pos_a_io = pos_a;
  pos_b_io = pos_b;
  finish_codes(a.out, i, a.k);
  finish_codes(b.out, j, b.k);
  got_a += i;
  got_b += j;
}

static inline uint64_t zigzag(int64_t v) noexcept {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}

// Appends the low n_bits <= 56 bits of code (its higher bits zero) to the accumulator (fill < 8
// bits before, so it holds at most 63) and moves its whole bytes out (room for 8 at pos).
static inline void put_code(uint8_t* out, uint64_t& acc, int& fill, size_t& pos, uint64_t code,
                            int n_bits) noexcept {
  acc = (acc << n_bits) | code;
  fill += n_bits;
  const uint64_t w = __builtin_bswap64(acc << (64 - fill));
  std::memcpy(out + pos, &w, 8);
  pos += static_cast<size_t>(fill >> 3);
  fill &= 7;
  acc &= (uint64_t{1} << fill) - 1;
}

// BitWriter::exp_golomb_bits's, this namespace's own copy (as window_at).
static inline int exp_golomb_bits(uint64_t v, int k) noexcept {
  return 2 * (63 - __builtin_clzll((v >> k) + 1)) + 1 + k;
}

// Codes of a[i] (order ka) and b[i] (order kb) in turn, into s.out from byte s.pos (room for 16
// bytes per pair plus 8), until a code longer than 56 bits: returns 2 * pairs + (1 if that
// pair's a-code was written), the state in s up to there.
static size_t put_pairs(BitPairState& s, const int64_t* a, const int64_t* b, size_t n, int ka,
                        int kb) noexcept {
  uint64_t acc = s.acc;
  int fill = s.fill;
  size_t pos = s.pos;
  size_t done = 2 * n;
  const auto code = [&](int64_t value, int k) {
    const uint64_t v = zigzag(value);
    const int n_bits = exp_golomb_bits(v, k);
    if (n_bits > 56) [[unlikely]]
      return false;
    put_code(s.out, acc, fill, pos, v + (uint64_t{1} << k), n_bits);
    return true;
  };
  for (size_t i = 0; i < n; ++i) {
    // A pair whose codes fit 56 bits together is put as one code (the usual case): half the
    // accumulator's chain of shifts, stores and masks.
    const uint64_t va = zigzag(a[i]), vb = zigzag(b[i]);
    const int na = exp_golomb_bits(va, ka), nb = exp_golomb_bits(vb, kb);
    if (na + nb <= 56) [[likely]] {
      put_code(s.out, acc, fill, pos,
               ((va + (uint64_t{1} << ka)) << nb) | (vb + (uint64_t{1} << kb)), na + nb);
      continue;
    }
    if (!code(a[i], ka)) {
      done = 2 * i;
      break;
    }
    if (!code(b[i], kb)) {
      done = 2 * i + 1;
      break;
    }
  }
  s.acc = acc, s.fill = fill, s.pos = pos;
  return done;
}

// Codes made elsewhere: code[i] of n_bits[i] (1..56) bits, into s.out from byte s.pos (room
// for 8 bytes per code plus 8).
static void put_codes(BitPairState& s, const uint64_t* code, const uint8_t* n_bits,
                      size_t n) noexcept {
  uint64_t acc = s.acc;
  int fill = s.fill;
  size_t pos = s.pos;
  for (size_t i = 0; i < n; ++i) put_code(s.out, acc, fill, pos, code[i], n_bits[i]);
  s.acc = acc, s.fill = fill, s.pos = pos;
}

// Codes of v[i] at order k < 24 (at most 33 + k <= 56 bits each), into s.out from byte s.pos
// (room for 8 bytes per code plus 8).
static void put_list(BitPairState& s, const uint16_t* v, size_t n, int k) noexcept {
  uint64_t acc = s.acc;
  int fill = s.fill;
  size_t pos = s.pos;
  for (size_t i = 0; i < n; ++i)
    put_code(s.out, acc, fill, pos, uint64_t{v[i]} + (uint64_t{1} << k), exp_golomb_bits(v[i], k));
  s.acc = acc, s.fill = fill, s.pos = pos;
}

// The order that codes the residuals in the fewest bits among the orders whose every code has
// a prefix of at most max_prefix zeros (see best_eg_order in params_codec.cpp).
static ExpGolombOrder best_order(const int64_t* residuals, size_t count, int max_prefix) noexcept {
  // Per bit length b, the values (by_length) and the nonzero values whose code carries from
  // order b - r up (carries; r the run of ones at the top): the difference array over k of the
  // values whose code carries is carries[k] - by_length[k] (k >= 1).
  //
  // Values below kSmall (nearly all of a parameter block's) are only counted by value, in four
  // tables taken in turn (equal values, e.g. runs of zeros, do not wait on each other's
  // increments), and turned into both counts afterwards: the values of bit length b are the
  // range [2^(b-1), 2^b), and those whose top j bits are ones its top 2^(b-j). Counting both
  // per value was ~10 cycles a value, most of this function. Longer values take that path, and
  // so do all values of short sets, where clearing and reading the tables would cost more.
  constexpr uint32_t kSmall = 256;
  const bool by_value = count >= kSmall && count <= UINT32_MAX;  // no table overflows
  uint32_t small[4][kSmall];
  if (by_value) std::memset(small, 0, sizeof small);
  uint64_t by_length[65] = {}, carries[65] = {};
  uint64_t largest = 0;  // of the long values here, of all of them once the tables are read
  const auto count_long = [&](uint64_t v) {
    largest = v > largest ? v : largest;
    // b is 0 for v == 0, whose leading-ones count below is 0 too.
    const int b = 64 - __builtin_clzll(v | 1) - (v == 0);
    const uint64_t top = ~(v << ((64 - b) & 63));  // leading ones of v become leading zeros
    const int ones = __builtin_clzll(top | 1) + (top == 0);
    ++by_length[b];
    carries[b - ones] += v != 0;
  };
  const uint64_t small_limit = by_value ? kSmall : 0;
  size_t i = 0;
  for (; i + 4 <= count; i += 4) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const uint64_t v = zigzag(residuals[i + j]);
      if (v < small_limit) [[likely]]
        ++small[j][v];
      else
        count_long(v);
    }
  }
  for (; i < count; ++i) {
    const uint64_t v = zigzag(residuals[i]);
    if (v < small_limit)
      ++small[0][v];
    else
      count_long(v);
  }
  uint64_t h[kSmall];
  uint32_t top_small = 0;  // the largest small value present, or 0
  if (by_value) {
    for (uint32_t v = 0; v < kSmall; ++v)
      h[v] = uint64_t{small[0][v]} + small[1][v] + small[2][v] + small[3][v];
    top_small = kSmall - 1;
    while (top_small > 0 && h[top_small] == 0) --top_small;
  }
  largest = top_small > largest ? top_small : largest;
  // (Zeros, of bit length 0, cost k + 1 bits at every order, which n accounts for: the small
  // ones need neither count.)
  for (int b = 1; b <= 8 && (uint32_t{1} << (b - 1)) <= top_small; ++b) {
    // Down from 2^b - 1: acc counts the values whose top j bits are ones (r >= j), for j = b
    // down to 1, i.e. [2^b - 2^(b-j), 2^b); those with r == j carry from order b - j.
    const uint32_t end = uint32_t{1} << b;
    uint64_t acc = 0, with_more = 0;
    uint32_t from = end;
    for (int j = b; j >= 1; --j) {
      const uint32_t lo = end - (uint32_t{1} << (b - j));
      for (uint32_t v = lo; v < from; ++v) acc += h[v];
      from = lo;
      carries[b - j] += acc - with_more;
      with_more = acc;
    }
    by_length[b] += acc;
  }
  int64_t carry_delta[66] = {};
  for (int j = 0; j < 65; ++j) {
    carry_delta[j] =
        static_cast<int64_t>(carries[j]) - (j == 0 ? 0 : static_cast<int64_t>(by_length[j]));
  }
  const uint64_t n = count;
  // Past the largest value's bit length every residual costs k + 1 bits, which only grows
  // with k: the search can stop there and still find the same (first) minimum.
  const int max_length = 64 - __builtin_clzll(largest | 1);  // no value is longer
  const int last_k = max_length + 1 < 24 ? max_length + 1 : 24;
  // The longer values' extra bits at order k, sum over b >= k + 2 of by_length[b] (b - k - 1),
  // as above_sum - (k + 1) * above_count over those b, both updated as k grows (a loop over b
  // per order was most of this function on short parameter blocks).
  uint64_t above_count = 0, above_sum = 0;
  for (int b = 2; b <= max_length; ++b) {
    above_count += by_length[b];
    above_sum += by_length[b] * static_cast<uint64_t>(b);
  }
  ExpGolombOrder best;
  int64_t carrying = 0;
  for (int k = 0; k <= last_k; ++k) {
    carrying += carry_delta[k];
    const uint64_t extra = above_sum - static_cast<uint64_t>(k + 1) * above_count;
    above_count -= by_length[k + 2];  // k + 2 <= 26: within the table
    above_sum -= by_length[k + 2] * static_cast<uint64_t>(k + 2);
    if ((largest >> k) + 1 >= (uint64_t{1} << (max_prefix + 1))) continue;
    const uint64_t bits =
        n * static_cast<uint64_t>(k + 1) + 2 * static_cast<uint64_t>(carrying) + 2 * extra;
    if (bits < best.bits) best.bits = bits, best.k = k;
  }
  return best;
}

// Internal linkage, as quant/kernels_impl.h's kTable (an inline variable would be a unique
// symbol, shared with another build of the library loaded in the same process).
static constexpr ExpGolombKernels kExpGolomb = {
    signed_run, unsigned_run, signed_runs_pair, put_pairs, put_codes, put_list, best_order};

}  // namespace cachegen::detail::CACHEGEN_EXP_GOLOMB_NS
