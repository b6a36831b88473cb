// Internal: the Exp-Golomb run readers' bodies (BitReader::signed_exp_golomb_run and friends),
// included by bit_io.cpp (the baseline) and bit_io_bmi2.cpp (compiled with -mlzcnt -mbmi2: one
// LZCNT per prefix and flag-free shifts; +5% on an AVX2 compact-parameter decode), each inside
// its own namespace. BitReader picks one at run time (cachegen::simd_path()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace cachegen::detail::CACHEGEN_BIT_RUNS_NS {

// The 64 bits from bit position pos, MSB first, by one 8-byte load (pos below the run limit):
// BitReader::window_at's, a copy of this namespace's own (an inline function shared with the
// other target's TU could be merged by the linker into a copy using the wrong instructions).
static inline uint64_t window_at(const uint8_t* in, size_t pos) noexcept {
  uint64_t w;
  std::memcpy(&w, in + (pos >> 3), 8);
  return __builtin_bswap64(w) << (pos & 7);
}

// One code from the top of w, which holds 57 - used bits of input (then zeros): false, with
// nothing changed, if it does not end within them. A prefix running past them (counting the
// zeros shifted in, or w == 0) gives a total past them too.
// (Signed: zigzag-decoded.)
template <class T>
static inline bool take_code(uint64_t& w, size_t& used, int order, T& out) noexcept {
  const size_t zeros = static_cast<size_t>(__builtin_clzll(w | 1));
  const size_t total = 2 * zeros + 1 + static_cast<size_t>(order);
  if (used + total > 57) [[unlikely]]
    return false;
  const uint64_t z = (w >> (64 - total)) - (uint64_t{1} << order);
  if constexpr (std::is_signed_v<T>) {
    out = static_cast<int64_t>(z >> 1) ^ -static_cast<int64_t>(z & 1);
  } else {
    out = z;
  }
  w <<= total;  // total <= 57
  used += total;
  return true;
}

// Up to n codes of orders k[0], k[1], ... from bit position pos (advanced) while it is below
// limit; returns how many.
template <class T>
static size_t code_run(const uint8_t* in, size_t limit, size_t& pos_io, T* out, size_t n,
                       const int k[2]) noexcept {
  size_t pos = pos_io, i = 0;
  while (i < n && pos < limit) {
    uint64_t w = window_at(in, pos);
    size_t used = 0;
    const size_t start = i;
    while (i < n && take_code(w, used, k[i & 1], out[i])) ++i;
    pos += used;
    if (i == start) break;  // a long code, for signed_exp_golomb
  }
  pos_io = pos;
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
  size_t pos_a = pos_a_io, pos_b = pos_b_io, i = 0, j = 0;
  while (i < a.n && j < b.n && pos_a < a.limit && pos_b < b.limit) {
    uint64_t wa = window_at(a.in, pos_a), wb = window_at(b.in, pos_b);
    size_t used_a = 0, used_b = 0;
    const size_t start_a = i, start_b = j;
    for (;;) {
      const bool more_a = i < a.n && take_code(wa, used_a, a.k[i & 1], a.out[i]);
      i += more_a;
      const bool more_b = j < b.n && take_code(wb, used_b, b.k[j & 1], b.out[j]);
      j += more_b;
      if (!(more_a & more_b)) break;
    }
    pos_a += used_a;
    pos_b += used_b;
    if (i == start_a || j == start_b) break;  // a long code: each reader's own run from here
  }
  pos_a_io = pos_a;
  pos_b_io = pos_b;
  got_a += i;
  got_b += j;
}

inline constexpr BitRunKernels kBitRuns = {signed_run, unsigned_run, signed_runs_pair};

}  // namespace cachegen::detail::CACHEGEN_BIT_RUNS_NS
