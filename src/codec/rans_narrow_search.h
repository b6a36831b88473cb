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

// One 8-lane payload from element begin (rans_decode_avx2_8's contract).
template <template <int> class Step, int NT>
size_t narrow_search(RansDecodeState& st, const DecodeTables& tables, size_t dim, size_t begin,
                     size_t end, uint8_t* symbols) {
  const ThresholdPattern32& pattern = make_narrow_pattern(tables, dim);
  if (pattern.period == 0) return begin;
  const typename Step<NT>::Constants k(tables.precision);
  __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(st.x));
  const uint16_t* const words = st.words;
  const size_t n_words = st.n_words;
  size_t cursor = st.cursor;
  size_t i = begin, step = pattern_step(begin, kNarrowLanes, pattern.period);
  while (i + kNarrowLanes <= end && cursor + kNarrowLanes <= n_words) {
    x = Step<NT>::run(x, pattern.thresholds.data() + step * NT * kNarrowLanes, k, words, cursor,
                      symbols + i);
    i += kNarrowLanes;
    if (++step == pattern.period) step = 0;
  }
  st.cursor = cursor;
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(st.x), x);
  return i;
}

// Two 8-lane payloads with their own tables from element 0 in lockstep: one payload is one
// dependency chain of ~20 cycles per step that leaves the core mostly idle; the second chain
// fills it (rans_decode_avx512_pair8's contract).
template <template <int> class Step, int NT>
size_t narrow_search_pair(RansDecodeState& a, const DecodeTables& ta, RansDecodeState& b,
                          const DecodeTables& tb, size_t dim, size_t end, uint8_t* symbols_a,
                          uint8_t* symbols_b) {
  const ThresholdPattern32& pa = make_narrow_pattern(ta, dim);
  const ThresholdPattern32& pb = make_narrow_pattern(tb, dim);
  if (pa.period == 0 || pb.period != pa.period) return 0;
  const typename Step<NT>::Constants ka(ta.precision), kb(tb.precision);
  __m256i xa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.x));
  __m256i xb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.x));
  const uint16_t* const words_a = a.words;
  const uint16_t* const words_b = b.words;
  size_t cursor_a = a.cursor, cursor_b = b.cursor;
  size_t i = 0, step = 0;
  while (i + kNarrowLanes <= end && cursor_a + kNarrowLanes <= a.n_words &&
         cursor_b + kNarrowLanes <= b.n_words) {
    const size_t at = step * NT * kNarrowLanes;
    xa = Step<NT>::run(xa, pa.thresholds.data() + at, ka, words_a, cursor_a, symbols_a + i);
    xb = Step<NT>::run(xb, pb.thresholds.data() + at, kb, words_b, cursor_b, symbols_b + i);
    i += kNarrowLanes;
    if (++step == pa.period) step = 0;
  }
  a.cursor = cursor_a;
  b.cursor = cursor_b;
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(a.x), xa);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(b.x), xb);
  return i;
}

using NarrowKernel = size_t (*)(RansDecodeState&, const DecodeTables&, size_t, size_t, size_t,
                                uint8_t*);
using NarrowPairKernel = size_t (*)(RansDecodeState&, const DecodeTables&, RansDecodeState&,
                                    const DecodeTables&, size_t, size_t, uint8_t*, uint8_t*);

// The loops for an alphabet of n_syms symbols; nullptr for slot-table alphabets.
template <template <int> class Step>
NarrowKernel narrow_search_kernel(int n_syms) {
  switch (n_syms) {
    case 2:
      return narrow_search<Step, 1>;
    case 4:
      return narrow_search<Step, 3>;
    case 8:
      return narrow_search<Step, 7>;
    case 16:
      return narrow_search<Step, 15>;
    default:
      return nullptr;
  }
}
template <template <int> class Step>
NarrowPairKernel narrow_search_pair_kernel(int n_syms) {
  switch (n_syms) {
    case 2:
      return narrow_search_pair<Step, 1>;
    case 4:
      return narrow_search_pair<Step, 3>;
    case 8:
      return narrow_search_pair<Step, 7>;
    case 16:
      return narrow_search_pair<Step, 15>;
    default:
      return nullptr;
  }
}

}  // namespace
}  // namespace cachegen::detail
