// AVX-512 twin of read_params_compact's later groups (params_codec.cpp) for the usual parameters:
// 16 channels per vector. Compiled with -mavx512f/bw/vl; only called when cachegen::simd_path()
// says the CPU has them.
#include <immintrin.h>

#include "codec/params_codec.h"

namespace cachegen::detail {

bool compact_later_groups_avx512(size_t n_groups, size_t dim, const int32_t* ds, const int32_t* dz,
                                 const CompactGrid& g, float* scale, float* zero) {
  const __m128i shift = _mm_cvtsi32_si128(23 - g.scale_mantissa_bits);
  const __m128i mbits = _mm_cvtsi32_si128(g.scale_mantissa_bits);
  const __m512 to_step = _mm512_set1_ps(1.0f / static_cast<float>(1 << g.zero_step_log2));
  const __m512 magic = _mm512_set1_ps(12582912.0f), near = _mm512_set1_ps(4194304.0f);
  const __m512i one = _mm512_set1_epi32(1), exponents = _mm512_set1_epi32(254);
  __mmask16 bad = 0;
  for (size_t gi = 1; gi < n_groups; ++gi) {
    const size_t row = gi * dim, prev = row - dim;
    for (size_t c = 0; c < dim; c += 16) {
      const __mmask16 lanes =
          static_cast<__mmask16>(dim - c >= 16 ? 0xffff : (1u << (dim - c)) - 1);
      // The scale index: the previous group's plus the residual. With the previous scale a
      // positive float (bits < 2^31) and |residual| < 2^30, the 32-bit sum is the index when
      // its exponent is 1..254 and out of that range (as the wider sum) otherwise.
      const __m512i s = _mm512_add_epi32(
          _mm512_srl_epi32(_mm512_maskz_loadu_epi32(lanes, scale + prev + c), shift),
          _mm512_maskz_loadu_epi32(lanes, ds + row + c));
      const __mmask16 valid = _mm512_cmple_epu32_mask(
          _mm512_sub_epi32(_mm512_srl_epi32(s, mbits), one), _mm512_sub_epi32(exponents, one));
      const __m512 sf =
          _mm512_castsi512_ps(_mm512_maskz_mov_epi32(valid, _mm512_sll_epi32(s, shift)));
      const __m512 step = _mm512_mul_ps(sf, to_step);
      // The zero index: nearest to the previous zero over the step (rounded as predict_index
      // rounds below 2^22) plus the residual (|sum| < 2^31).
      const __m512 q = _mm512_div_ps(_mm512_maskz_loadu_ps(lanes, zero + prev + c),
                                     _mm512_mask_mov_ps(_mm512_set1_ps(1.0f), valid, step));
      const __mmask16 fast = _mm512_cmp_ps_mask(_mm512_abs_ps(q), near, _CMP_LT_OQ);
      const __m512i k =
          _mm512_add_epi32(_mm512_cvttps_epi32(_mm512_sub_ps(_mm512_add_ps(q, magic), magic)),
                           _mm512_maskz_loadu_epi32(lanes, dz + row + c));
      _mm512_mask_storeu_ps(scale + row + c, lanes, sf);
      _mm512_mask_storeu_ps(zero + row + c, lanes, _mm512_mul_ps(_mm512_cvtepi32_ps(k), step));
      bad |= static_cast<__mmask16>(lanes & ~(valid & fast));
    }
  }
  return bad == 0;
}

}  // namespace cachegen::detail
