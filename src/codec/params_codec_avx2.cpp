// AVX2 twin of round_params_compact (params_codec.cpp): 8 group-channels per vector, the
// AVX-512 twin's operations and fast-path conditions. Compiled with -mavx2; only called when
// cachegen::simd_path() says the CPU has it.
#include <immintrin.h>

#include "codec/params_codec.h"

namespace cachegen::detail {

bool round_params_compact_avx2(const float* mins, const float* maxs, size_t n, int bits,
                               const CompactGrid& g, float* scale, float* zero) {
  // Lanes whose first scale candidate fits with at most one step down of the zero index and
  // whose quotient stays below 2^22 take the vector's values; the others, and the last n % 8,
  // the portable function's (the same IEEE operations, no FMA, so the same values).
  const float levels_f = static_cast<float>((1 << bits) - 1);
  const __m256 levels = _mm256_set1_ps(levels_f);
  const __m256 usable = _mm256_set1_ps(levels_f - 1.0f / static_cast<float>(1 << g.zero_step_log2));
  const __m256 to_step = _mm256_set1_ps(1.0f / static_cast<float>(1 << g.zero_step_log2));
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
