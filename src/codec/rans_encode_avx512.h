// What the AVX-512 rANS encoders share: rans_encode_avx512.cpp (lanes in 64-bit slots, 4-lane
// payloads) and rans_encode_avx512_32.cpp (lanes in 32-bit slots). Included only by those
// translation units (compiled with -mavx512f/bw/vl).
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec/rans.h"

namespace cachegen::detail {

// The widest loaded model the blended entries take: rows of up to 16 KiB on the stack.
inline constexpr size_t kMaxBlendDim = 256;

// Each lane's entry among the rows of kSyms (2, 4 or 8) symbols by its symbol's bits: kSyms - 1
// blends, row(s) being symbol s's row of the lanes' entries and blend(b, u, v) taking v where the
// lane's symbol has bit b set (BlendedEntries, Blended32, Rows16).
template <int kSyms, class Row, class Blend>
inline auto pick_by_symbol_bits(const Row& row, const Blend& blend) {
  static_assert(kSyms == 2 || kSyms == 4 || kSyms == 8);
  const auto pair = [&](int s) { return blend(0, row(s), row(s + 1)); };
  if constexpr (kSyms == 2) return pair(0);
  const auto quad = [&](int s) { return blend(1, pair(s), pair(s + 2)); };
  if constexpr (kSyms == 4) return quad(0);
  return blend(2, quad(0), quad(4));
}

// An 8-lane payload being coded: its elements [0, end) left, its states and words so far.
struct Lanes8 {
  const RansEncodeTables& t;
  const uint8_t* symbols;
  size_t dim, end;
  uint32_t* x;
  uint16_t* words;
  size_t& w_pos;
};

// Whether an 8-lane payload of these models is coded in 32-bit lanes (Blended32: at most 8
// symbols, over channels that divide 8 or a multiple of 8 up to kMaxBlendDim; held models of
// more than 4 symbols in at most 32 entries keep the 64-bit permutes).
bool lanes8_takes32(size_t dim, int n_syms);
// Such a payload's steps [end % 8, end) in 32-bit lanes (end and w_pos updated).
void encode_lanes8_32(Lanes8& p);
// Two such payloads: in lockstep where their models are of one kind, then each one's rest.
void encode_lanes8_32_pair(Lanes8& a, Lanes8& b);

// The most step phases (dim / gcd(dim, 4)) encode_lanes4_pair_32 takes: rows of 32 KiB.
inline constexpr size_t kMaxLanes4Phases = 64;
// Two 4-lane payloads of one shape (dim, at most 8 symbols, end) in the 32-bit lanes of one
// ymm, their entries at their bases of `entries` (rans_encode_avx512_lanes4_pair's): all their
// steps, or false (nothing done) for any other pair.
bool encode_lanes4_pair_32(const uint64_t* entries, RansLanes4& a, RansLanes4& b);

}  // namespace cachegen::detail
