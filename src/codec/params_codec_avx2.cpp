// AVX2 twins of round_params_compact and of read_params_compact's later groups
// (params_codec.cpp): 8 group-channels per vector, the AVX-512 twins' operations and fast-path
// conditions. Compiled with -mavx2; only called when cachegen::simd_path() says the CPU has it.
#include <immintrin.h>

#include <algorithm>

#include "codec/params_codec.h"

namespace cachegen::detail {

bool compact_later_groups_avx2(size_t n_groups, size_t dim, const int32_t* ds, const int32_t* dz,
                               const CompactGrid& g, float* scale, float* zero) {
  const __m128i shift = _mm_cvtsi32_si128(23 - g.scale_mantissa_bits);
  const __m128i mbits = _mm_cvtsi32_si128(g.scale_mantissa_bits);
  const __m256 to_step = _mm256_set1_ps(zero_step_factor(g));
  const __m256 magic = _mm256_set1_ps(12582912.0f), near = _mm256_set1_ps(4194304.0f);
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i one = _mm256_set1_epi32(1), top_exponent = _mm256_set1_epi32(253);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256 bad = _mm256_setzero_ps();
  for (size_t gi = 1; gi < n_groups; ++gi) {
    const size_t row = gi * dim, prev = row - dim;
    for (size_t c = 0; c < dim; c += 8) {
      const __m256i lanes = _mm256_cmpgt_epi32(
          _mm256_set1_epi32(static_cast<int>(std::min<size_t>(dim - c, 8))), lane);
      // The scale index: the previous group's plus the residual. With the previous scale a
      // positive float (bits < 2^31) and |residual| < 2^30, the 32-bit sum is the index when
      // its exponent is 1..254 and out of that range (as the wider sum) otherwise.
      const __m256i s = _mm256_add_epi32(
          _mm256_srl_epi32(
              _mm256_maskload_epi32(reinterpret_cast<const int*>(scale + prev + c), lanes), shift),
          _mm256_maskload_epi32(ds + row + c, lanes));
      // exponent - 1 <= 253 unsigned: max(exponent - 1, 253) == 253.
      const __m256i e1 = _mm256_sub_epi32(_mm256_srl_epi32(s, mbits), one);
      const __m256i valid = _mm256_cmpeq_epi32(_mm256_max_epu32(e1, top_exponent), top_exponent);
      const __m256 sf = _mm256_castsi256_ps(_mm256_and_si256(valid, _mm256_sll_epi32(s, shift)));
      const __m256 step = _mm256_mul_ps(sf, to_step);
      // The zero index: nearest to the previous zero over the step (rounded as predict_index
      // rounds below 2^22) plus the residual (|sum| < 2^31).
      const __m256 q =
          _mm256_div_ps(_mm256_maskload_ps(zero + prev + c, lanes),
                        _mm256_blendv_ps(_mm256_set1_ps(1.0f), step, _mm256_castsi256_ps(valid)));
      const __m256 fast = _mm256_cmp_ps(_mm256_and_ps(q, magnitude), near, _CMP_LT_OQ);
      const __m256i k =
          _mm256_add_epi32(_mm256_cvttps_epi32(_mm256_sub_ps(_mm256_add_ps(q, magic), magic)),
                           _mm256_maskload_epi32(dz + row + c, lanes));
      _mm256_maskstore_ps(scale + row + c, lanes, sf);
      _mm256_maskstore_ps(zero + row + c, lanes, _mm256_mul_ps(_mm256_cvtepi32_ps(k), step));
      bad = _mm256_or_ps(bad, _mm256_andnot_ps(_mm256_and_ps(_mm256_castsi256_ps(valid), fast),
                                               _mm256_castsi256_ps(lanes)));
    }
  }
  return _mm256_movemask_ps(bad) == 0;
}

bool round_params_compact_avx2(const float* mins, const float* maxs, size_t n, int bits,
                               const CompactGrid& g, float* scale, float* zero) {
  // Lanes whose first scale candidate fits with at most one step down of the zero index and
  // whose quotient stays below 2^22 take the vector's values; the others, and the last n % 8,
  // the portable function's (the same IEEE operations, no FMA, so the same values).
  const float levels_f = static_cast<float>((1 << bits) - 1);
  const __m256 levels = _mm256_set1_ps(levels_f);
  const __m256 usable = _mm256_set1_ps(levels_f - zero_step_factor(g));
  const __m256 to_step = _mm256_set1_ps(zero_step_factor(g));
  const __m256 tiny = _mm256_set1_ps(1e-8f), near = _mm256_set1_ps(4194304.0f);
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i low_bits =
      _mm256_set1_epi32(static_cast<int>((1u << (23 - g.scale_mantissa_bits)) - 1));
  const __m256i grid_step = _mm256_add_epi32(low_bits, _mm256_set1_epi32(1));
  const __m256i exponent = _mm256_set1_epi32(0x7f800000);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 mn = _mm256_loadu_ps(mins + i), mx = _mm256_loadu_ps(maxs + i);
    __m256 need = _mm256_div_ps(_mm256_sub_ps(mx, mn), usable);
    need = _mm256_blendv_ps(tiny, need, _mm256_cmp_ps(need, tiny, _CMP_GE_OQ));
    // round_up_mantissa: drop the low significand bits, one grid step up if any was set.
    const __m256i u = _mm256_castps_si256(need);
    const __m256i low = _mm256_and_si256(u, low_bits);
    const __m256i up = _mm256_add_epi32(
        _mm256_andnot_si256(low_bits, u),
        _mm256_andnot_si256(_mm256_cmpeq_epi32(low, _mm256_setzero_si256()), grid_step));
    const __m256 s = _mm256_castsi256_ps(up);
    const __m256i infinite_s = _mm256_cmpeq_epi32(_mm256_and_si256(up, exponent), exponent);
    const __m256 step = _mm256_mul_ps(s, to_step);
    const __m256 q =
        _mm256_round_ps(_mm256_div_ps(mn, step), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __m256 small = _mm256_cmp_ps(_mm256_and_ps(q, magnitude), near, _CMP_LT_OQ);
    // k = q as an integer (-0 becomes +0, as the portable int64 does), then one step down where
    // k * step is still above the minimum.
    __m256 k = _mm256_cvtepi32_ps(_mm256_cvttps_epi32(q));
    k = _mm256_blendv_ps(k, _mm256_sub_ps(k, _mm256_set1_ps(1.0f)),
                         _mm256_cmp_ps(_mm256_mul_ps(k, step), mn, _CMP_GT_OQ));
    const __m256 z = _mm256_mul_ps(k, step);
    const __m256 settled = _mm256_cmp_ps(z, mn, _CMP_LE_OQ);
    const __m256 covers = _mm256_cmp_ps(_mm256_add_ps(z, _mm256_mul_ps(s, levels)), mx, _CMP_GE_OQ);
    _mm256_storeu_ps(scale + i, s);
    _mm256_storeu_ps(zero + i, z);
    const __m256 fast = _mm256_andnot_ps(_mm256_castsi256_ps(infinite_s),
                                         _mm256_and_ps(small, _mm256_and_ps(settled, covers)));
    auto slow = static_cast<unsigned>(~_mm256_movemask_ps(fast) & 0xff);
    while (slow) {
      const size_t j = i + static_cast<size_t>(__builtin_ctz(slow));
      if (!round_param_compact(mins[j], maxs[j], bits, g, scale[j], zero[j])) return false;
      slow &= slow - 1;
    }
  }
  for (; i < n; ++i)
    if (!round_param_compact(mins[i], maxs[i], bits, g, scale[i], zero[i])) return false;
  return true;
}

}  // namespace cachegen::detail
