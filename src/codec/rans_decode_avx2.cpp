// AVX2 twin of rans_decode_scalar for 32 lanes (four vectors of 8). Compiled with -mavx2;
// only called when cachegen::simd_path() says the CPU has it.
#include <immintrin.h>

#include <array>

#include "codec/rans.h"
#include "codec/rans_lane_pattern.h"

namespace cachegen::detail {
namespace {

// For each 8-bit renormalisation mask, the permutation that moves the next popcount(mask)
// words into the lanes that need them, in lane order.
struct ExpandTable {
  alignas(32) uint32_t idx[256][8];
  ExpandTable() {
    for (int m = 0; m < 256; ++m) {
      int r = 0;
      for (int l = 0; l < 8; ++l) idx[m][l] = (m >> l & 1) ? static_cast<uint32_t>(r++) : 0;
    }
  }
};
const ExpandTable kExpand;

inline __m256i decode8(__m256i x, const uint32_t* base, const uint32_t* shift,
                       const DecodeTables& t, __m128i p, __m256i mask, RansDecodeState& st,
                       __m256i& e_out) {
  const __m256i slot = _mm256_and_si256(x, mask);
  const __m256i sh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(shift));
  const __m256i idx = _mm256_add_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(base)),
                                       _mm256_srlv_epi32(slot, sh));
  const __m256i e = _mm256_i32gather_epi32(reinterpret_cast<const int*>(t.entries.data()), idx, 4);
  const __m256i f = _mm256_sllv_epi32(
      _mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(e, 8), _mm256_set1_epi32(0xfff)),
                       _mm256_set1_epi32(1)),
      sh);
  const __m256i start = _mm256_sllv_epi32(_mm256_srli_epi32(e, 20), sh);
  x = _mm256_add_epi32(_mm256_mullo_epi32(f, _mm256_srl_epi32(x, p)),
                       _mm256_sub_epi32(slot, start));
  const __m256i need = _mm256_cmpeq_epi32(_mm256_srli_epi32(x, 16), _mm256_setzero_si256());
  const int m = _mm256_movemask_ps(_mm256_castsi256_ps(need));
  const __m256i words = _mm256_cvtepu16_epi32(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(st.words + st.cursor)));
  const __m256i w = _mm256_permutevar8x32_epi32(
      words, _mm256_load_si256(reinterpret_cast<const __m256i*>(kExpand.idx[m])));
  x = _mm256_blendv_epi8(x, _mm256_or_si256(_mm256_slli_epi32(x, 16), w), need);
  st.cursor += static_cast<size_t>(__builtin_popcount(static_cast<unsigned>(m)));
  e_out = _mm256_and_si256(e, _mm256_set1_epi32(0xff));
  return x;
}

}  // namespace

size_t rans_decode_avx2(RansDecodeState& st, const DecodeTables& tables, size_t dim, size_t begin,
                        size_t end, uint8_t* symbols) {
  // Search-decoded alphabets have no slot table; the scalar kernel serves them on AVX2
  // (the AVX2 twin of the AVX-512 search kernel is still to be written).
  if (tables.uses_search()) return begin;
  const LanePattern pattern = make_lane_pattern(tables, dim, begin);
  if (pattern.period == 0) return begin;
  const __m128i p = _mm_cvtsi32_si128(tables.precision);
  const __m256i mask = _mm256_set1_epi32(static_cast<int>((1u << tables.precision) - 1));
  __m256i x[4];
  for (int v = 0; v < 4; ++v)
    x[v] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(st.x + 8 * v));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  size_t i = begin, k = 0;
  while (i + kMaxLanes <= end && st.cursor + kMaxLanes <= st.n_words) {
    const uint32_t* base = pattern.base.data() + k * kMaxLanes;
    const uint32_t* shift = pattern.shift.data() + k * kMaxLanes;
    __m256i e[4];
    for (int v = 0; v < 4; ++v)
      x[v] = decode8(x[v], base + 8 * v, shift + 8 * v, tables, p, mask, st, e[v]);
    // 4 x 8 u32 symbols -> 32 bytes in lane order.
    const __m256i ab = _mm256_packus_epi32(e[0], e[1]);
    const __m256i cd = _mm256_packus_epi32(e[2], e[3]);
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(symbols + i), bytes);
    i += kMaxLanes;
    if (++k == pattern.period) k = 0;
  }
  for (int v = 0; v < 4; ++v) _mm256_storeu_si256(reinterpret_cast<__m256i*>(st.x + 8 * v), x[v]);
  return i;
}

}  // namespace cachegen::detail
