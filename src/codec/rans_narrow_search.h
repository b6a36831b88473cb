// Internal: the loops of the 8-lane search kernels (one payload, and two in lockstep), shared by
// the AVX2 and AVX-512 files, which differ only in their step. Step is a class template of each
// file's anonymous namespace, with Step<NT>::Constants (built from the coder precision) and
//   static __m256i run(__m256i x, const uint32_t* thresholds, const Constants&,
//                      const uint16_t* words, size_t& cursor, uint8_t* out)
// decoding one step of 8 lanes. Everything here is in an anonymous namespace, so each including
// file gets its own copies, compiled for its instruction set (a template of external linkage
// would be emitted weak by both files and linked from either: GCC 12 gave the loops external
// linkage even with a Step of an anonymous namespace). Only include from a file compiled with
// -mavx2 or above.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "codec/rans.h"
#include "codec/rans_lane_pattern.h"

namespace cachegen::detail {
namespace {

// The interval of each u16 slot from NT candidate bounds (lo[j]: threshold j where the slot is
// at or above it, else 0; hi[j]: threshold j where the slot is below it, else at least the top):
// the largest start and the smallest end, by trees of log depth, into lo[0] and hi[0]. Used by
// the AVX2 32-lane search kernel, which packs a payload's two halves' slots as u16 (the AVX-512
// kernels search by bisection instead; on AVX2 its byte blends made 3-bit alphabets 3-5% slower
// on an Intel machine).
template <int NT>
inline void reduce_interval16(__m256i* lo, __m256i* hi) {
#pragma GCC unroll 4
  for (int w = 1; w < NT; w *= 2)
#pragma GCC unroll 8
    for (int j = 0; j + w < NT; j += 2 * w) {
      lo[j] = _mm256_max_epu16(lo[j], lo[j + w]);
      hi[j] = _mm256_min_epu16(hi[j], hi[j + w]);
    }
}

// One payload of Lanes (8, or 4) lanes from element begin (rans_decode_avx2_8's and
// rans_decode_avx2_4's contract). A 4-lane payload runs on the 8-lane step with lanes 4..7 idle:
// their thresholds are all at the top (one symbol of the whole range), so their state never
// changes, never falls below kRansLow and reads no words; their symbols, stored past the
// step's four, are overwritten by the next step's, which is why every step stops 8 elements
// short of `end` (the scalar kernel's 4 lanes wait on each other through the word cursor: ~14
// cycles a value, ~1.7x this; two such payloads in lockstep take ~4.3 cycles a value).
template <template <int> class Step, int NT, size_t Lanes = kNarrowLanes>
size_t narrow_search(RansDecodeState& st, const DecodeTables& tables, size_t dim, size_t begin,
                     size_t end, uint8_t* symbols) {
  static_assert(Lanes == kNarrowLanes || Lanes == 4);
  const ThresholdPattern32& pattern = make_narrow_pattern(tables, dim, Lanes);
  if (pattern.period == 0) return begin;
  const typename Step<NT>::Constants k(tables.precision);
  uint32_t lanes[kNarrowLanes];
  for (size_t l = 0; l < kNarrowLanes; ++l) lanes[l] = l < Lanes ? st.x[l] : kRansLow;
  __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lanes));
  const uint16_t* const words = st.words;
  const uint32_t* const th = pattern.thresholds.data();
  const size_t n_words = st.n_words, period = pattern.period;
  size_t cursor = st.cursor;
  size_t i = begin, step = pattern_step(begin, Lanes, period);
  while (i + kNarrowLanes <= end && cursor + kNarrowLanes <= n_words) {
    x = Step<NT>::run(x, th + step * NT * kNarrowLanes, k, words, cursor, symbols + i);
    i += Lanes;
    if (++step == period) step = 0;
  }
  st.cursor = cursor;
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes), x);
  for (size_t l = 0; l < Lanes; ++l) st.x[l] = lanes[l];
  return i;
}

// Two 8-lane payloads with their own tables from element 0 in lockstep: one payload is one
// dependency chain of ~20 cycles per step that leaves the core mostly idle; the second chain
// fills it (rans_decode_avx512_pair8's contract; two 4-lane payloads each on half the 8-lane
// step, as narrow_search runs one, on AVX2: AVX-512 packs such a pair into one step).
template <template <int> class Step, int NT, size_t Lanes = kNarrowLanes>
size_t narrow_search_pair(RansDecodeState& a, const DecodeTables& ta, RansDecodeState& b,
                          const DecodeTables& tb, size_t dim, size_t end, uint8_t* symbols_a,
                          uint8_t* symbols_b) {
  const ThresholdPattern32& pa = make_narrow_pattern(ta, dim, Lanes);
  const ThresholdPattern32& pb = make_narrow_pattern(tb, dim, Lanes);
  if (pa.period == 0 || pb.period != pa.period) return 0;
  const typename Step<NT>::Constants ka(ta.precision), kb(tb.precision);
  uint32_t lanes_a[kNarrowLanes], lanes_b[kNarrowLanes];
  for (size_t l = 0; l < kNarrowLanes; ++l) {
    lanes_a[l] = l < Lanes ? a.x[l] : kRansLow;
    lanes_b[l] = l < Lanes ? b.x[l] : kRansLow;
  }
  __m256i xa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lanes_a));
  __m256i xb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lanes_b));
  // In locals: the symbols' stores (uint8_t aliases everything) would reload them every step.
  const uint16_t* const words_a = a.words;
  const uint16_t* const words_b = b.words;
  const uint32_t* const th_a = pa.thresholds.data();
  const uint32_t* const th_b = pb.thresholds.data();
  const size_t n_words_a = a.n_words, n_words_b = b.n_words, period = pa.period;
  size_t cursor_a = a.cursor, cursor_b = b.cursor;
  size_t i = 0, step = 0;
  while (i + kNarrowLanes <= end && cursor_a + kNarrowLanes <= n_words_a &&
         cursor_b + kNarrowLanes <= n_words_b) {
    const size_t at = step * NT * kNarrowLanes;
    xa = Step<NT>::run(xa, th_a + at, ka, words_a, cursor_a, symbols_a + i);
    xb = Step<NT>::run(xb, th_b + at, kb, words_b, cursor_b, symbols_b + i);
    i += Lanes;
    if (++step == period) step = 0;
  }
  a.cursor = cursor_a;
  b.cursor = cursor_b;
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes_a), xa);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes_b), xb);
  for (size_t l = 0; l < Lanes; ++l) {
    a.x[l] = lanes_a[l];
    b.x[l] = lanes_b[l];
  }
  return i;
}

using NarrowKernel = size_t (*)(RansDecodeState&, const DecodeTables&, size_t, size_t, size_t,
                                uint8_t*);
using NarrowPairKernel = size_t (*)(RansDecodeState&, const DecodeTables&, RansDecodeState&,
                                    const DecodeTables&, size_t, size_t, uint8_t*, uint8_t*);

// The loops for an alphabet of n_syms symbols; nullptr for slot-table alphabets.
template <template <int> class Step, size_t Lanes = kNarrowLanes>
NarrowKernel narrow_search_kernel(int n_syms) {
  return with_thresholds(n_syms, NarrowKernel{nullptr}, [](auto nt) {
    return NarrowKernel{narrow_search<Step, decltype(nt)::value, Lanes>};
  });
}
template <template <int> class Step, size_t Lanes = kNarrowLanes>
NarrowPairKernel narrow_search_pair_kernel(int n_syms) {
  return with_thresholds(n_syms, NarrowPairKernel{nullptr}, [](auto nt) {
    return NarrowPairKernel{narrow_search_pair<Step, decltype(nt)::value, Lanes>};
  });
}

// Two payloads of one search alphabet on Step in lockstep; declined (0) for slot-table or
// unequal alphabets.
template <template <int> class Step, size_t Lanes>
size_t narrow_search_pair_of(RansDecodeState& a, const DecodeTables& ta, RansDecodeState& b,
                             const DecodeTables& tb, size_t dim, size_t end, uint8_t* symbols_a,
                             uint8_t* symbols_b) {
  const NarrowPairKernel pair = narrow_search_pair_kernel<Step, Lanes>(ta.n_syms);
  if (!pair || ta.n_syms != tb.n_syms) return 0;
  return pair(a, ta, b, tb, dim, end, symbols_a, symbols_b);
}

}  // namespace
}  // namespace cachegen::detail
