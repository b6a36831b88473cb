// The model search's per-channel bound parts on AVX-512 (channel_model.cpp, bound_parts): eight
// channels of 3-bit codes at a time, each lane one channel, its sums in the scalar loop's order.
#include <immintrin.h>

#include "codec/channel_model.h"

namespace cachegen::detail {

bool bound_parts8_avx512(const uint32_t* counts, const double* clog, const uint8_t* place,
                         BoundParts* parts) {
  // The 8 x 8 counts (channel-major) as four pairs of columns (symbol-major): two rounds of
  // two-source permutes. lo/hi: symbols 0-3 / 4-7 of two channels' rows, as channel pairs per
  // symbol; then each pair of symbols' eight channels.
  const __m512i a = _mm512_loadu_si512(counts), b = _mm512_loadu_si512(counts + 16);
  const __m512i c = _mm512_loadu_si512(counts + 32), d = _mm512_loadu_si512(counts + 48);
  const __m512i big = _mm512_set1_epi32(static_cast<int>(kClogTable));
  if (_mm512_cmpge_epu32_mask(_mm512_max_epu32(_mm512_max_epu32(a, b), _mm512_max_epu32(c, d)),
                              big) != 0)
    return false;  // c log c computed past the table: the scalar loop
  const __m512i lo = _mm512_setr_epi32(0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27);
  const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(4));
  const __m512i ab_lo = _mm512_permutex2var_epi32(a, lo, b),
                ab_hi = _mm512_permutex2var_epi32(a, hi, b);
  const __m512i cd_lo = _mm512_permutex2var_epi32(c, lo, d),
                cd_hi = _mm512_permutex2var_epi32(c, hi, d);
  const __m512i first = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i second = _mm512_add_epi32(first, _mm512_set1_epi32(8));
  const __m512i cols[4] = {_mm512_permutex2var_epi32(ab_lo, first, cd_lo),
                           _mm512_permutex2var_epi32(ab_lo, second, cd_lo),
                           _mm512_permutex2var_epi32(ab_hi, first, cd_hi),
                           _mm512_permutex2var_epi32(ab_hi, second, cd_hi)};
  __m512d part[4];
  __m512i total = _mm512_setzero_si512();
  __m256i n = _mm256_setzero_si256(), end = _mm256_setzero_si256();
  const __m256i one = _mm256_set1_epi32(1);
  for (int s = 0; s < 8; ++s) {
    const __m256i col =
        (s & 1) ? _mm512_extracti64x4_epi64(cols[s / 2], 1) : _mm512_castsi512_si256(cols[s / 2]);
    const __m512d v = _mm512_i32gather_pd(col, clog, 8);
    // 0 + v is v: the scalar loop's first addition.
    part[s & 3] = s < 4 ? v : _mm512_add_pd(part[s & 3], v);
    total = _mm512_add_epi64(total, _mm512_cvtepu32_epi64(col));
    const __mmask8 present = _mm256_cmpneq_epu32_mask(col, _mm256_setzero_si256());
    n = _mm256_mask_add_epi32(n, present, n, one);
    end = _mm256_mask_max_epu32(end, present, end, _mm256_set1_epi32(place[s] + 1));
  }
  alignas(64) double sum[8];
  alignas(64) uint64_t totals[8];
  alignas(32) uint32_t ns[8], ends[8];
  _mm512_store_pd(sum,
                  _mm512_add_pd(_mm512_add_pd(part[0], part[1]), _mm512_add_pd(part[2], part[3])));
  _mm512_store_si512(totals, total);
  _mm256_store_si256(reinterpret_cast<__m256i*>(ns), n);
  _mm256_store_si256(reinterpret_cast<__m256i*>(ends), end);
  for (int ch = 0; ch < 8; ++ch)
    parts[ch] = BoundParts{sum[ch], totals[ch], ns[ch], ends[ch] ? ends[ch] - 1 : 0};
  return true;
}

}  // namespace cachegen::detail
