// AVX-512 twin of read_params_compact's later groups (params_codec.cpp) for the usual parameters:
// 16 channels per vector. Compiled with -mavx512f/bw/vl; only called when cachegen::simd_path()
// says the CPU has them.
#include <immintrin.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "codec/params_codec.h"

namespace cachegen::detail {

namespace {

// One section's chain through its groups for compact_later_groups_avx512: its grid's constants
// and arrays, and the lanes whose parameters the vector code does not give.
class LaterGroups {
 public:
  LaterGroups(size_t dim, const int32_t* ds, const int32_t* dz, const CompactGrid& g, float* scale,
              float* zero)
      : shift_(_mm_cvtsi32_si128(23 - g.scale_mantissa_bits)),
        mbits_(_mm_cvtsi32_si128(g.scale_mantissa_bits)),
        to_step_(_mm512_set1_ps(zero_step_factor(g))),
        dim_(dim),
        ds_(ds),
        dz_(dz),
        scale_(scale),
        zero_(zero) {}
  // Group gi's 16 channels from c, their previous group's scales and zeros given (sp, zp):
  // stores them and returns them (as the next group's).
  void step(size_t gi, size_t c, __mmask16 lanes, __m512& sp, __m512& zp) {
    const __m512 magic = _mm512_set1_ps(12582912.0f), near = _mm512_set1_ps(4194304.0f);
    const __m512i one = _mm512_set1_epi32(1), exponents = _mm512_set1_epi32(254);
    const size_t row = gi * dim_;
    // The scale index: the previous group's plus the residual. With the previous scale a
    // positive float (bits < 2^31) and |residual| < 2^30, the 32-bit sum is the index when
    // its exponent is 1..254 and out of that range (as the wider sum) otherwise.
    const __m512i s = _mm512_add_epi32(_mm512_srl_epi32(_mm512_castps_si512(sp), shift_),
                                       _mm512_maskz_loadu_epi32(lanes, ds_ + row + c));
    const __mmask16 valid = _mm512_cmple_epu32_mask(
        _mm512_sub_epi32(_mm512_srl_epi32(s, mbits_), one), _mm512_sub_epi32(exponents, one));
    const __m512 sf =
        _mm512_castsi512_ps(_mm512_maskz_mov_epi32(valid, _mm512_sll_epi32(s, shift_)));
    const __m512 step = _mm512_mul_ps(sf, to_step_);
    // The zero index: nearest to the previous zero over the step (rounded as predict_index
    // rounds below 2^22) plus the residual (|sum| < 2^31).
    const __m512 q = _mm512_div_ps(zp, _mm512_mask_mov_ps(_mm512_set1_ps(1.0f), valid, step));
    const __mmask16 fast = _mm512_cmp_ps_mask(_mm512_abs_ps(q), near, _CMP_LT_OQ);
    const __m512i k =
        _mm512_add_epi32(_mm512_cvttps_epi32(_mm512_sub_ps(_mm512_add_ps(q, magic), magic)),
                         _mm512_maskz_loadu_epi32(lanes, dz_ + row + c));
    const __m512 z = _mm512_mul_ps(_mm512_cvtepi32_ps(k), step);
    _mm512_mask_storeu_ps(scale_ + row + c, lanes, sf);
    _mm512_mask_storeu_ps(zero_ + row + c, lanes, z);
    bad_ |= static_cast<__mmask16>(lanes & ~(valid & fast));
    sp = sf;
    zp = z;
  }
  // Every later group of a section of at most 16 channels: the previous group's parameters
  // stay in registers (reloaded from the masked stores just made, each group waited on them:
  // the chain of a head_dim-8 head's groups was 12% of stories260K's compact decode, 5.7% so).
  // M sections side by side: M chains (a division and its roundings a group each).
  template <int M>
  static void rows(LaterGroups* c, size_t n_groups) {
    const auto lanes = static_cast<__mmask16>((1u << c[0].dim_) - 1);
    __m512 sp[M], zp[M];
    for (int j = 0; j < M; ++j) {
      sp[j] = _mm512_maskz_loadu_ps(lanes, c[j].scale_);
      zp[j] = _mm512_maskz_loadu_ps(lanes, c[j].zero_);
    }
    for (size_t gi = 1; gi < n_groups; ++gi)
      for (int j = 0; j < M; ++j) c[j].step(gi, 0, lanes, sp[j], zp[j]);
  }
  bool good() const { return bad_ == 0; }

 private:
  __m128i shift_, mbits_;
  __m512 to_step_;
  size_t dim_;
  const int32_t *ds_, *dz_;
  float *scale_, *zero_;
  __mmask16 bad_ = 0;
};

}  // namespace

bool compact_later_groups_avx512(size_t n_groups, size_t dim, const int32_t* ds, const int32_t* dz,
                                 const CompactGrid& g, float* scale, float* zero) {
  LaterGroups chain(dim, ds, dz, g, scale, zero);
  if (dim <= 16) {
    LaterGroups::rows<1>(&chain, n_groups);
    return chain.good();
  }
  // (Rows of 4 or 8 vectors, whose vectors are chains side by side, measured no faster loaded
  // from the stores than kept in registers.)
  for (size_t gi = 1; gi < n_groups; ++gi) {
    const size_t prev = (gi - 1) * dim;
    for (size_t c = 0; c < dim; c += 16) {
      const __mmask16 lanes =
          static_cast<__mmask16>(dim - c >= 16 ? 0xffff : (1u << (dim - c)) - 1);
      __m512 sp = _mm512_maskz_loadu_ps(lanes, scale + prev + c);
      __m512 zp = _mm512_maskz_loadu_ps(lanes, zero + prev + c);
      chain.step(gi, c, lanes, sp, zp);
    }
  }
  return chain.good();
}

void compact_later_groups_many_avx512(size_t m, size_t n_groups, size_t dim,
                                      const int32_t* const* ds, const int32_t* const* dz,
                                      const CompactGrid* const* g, float* const* scale,
                                      float* const* zero, bool* good) {
  for (size_t j0 = 0; j0 < m; j0 += 4) {
    const size_t k = std::min<size_t>(4, m - j0);
    const auto chain = [&](size_t j) {
      const size_t i = j0 + std::min(j, k - 1);  // (rows<k> runs the first k)
      return LaterGroups(dim, ds[i], dz[i], *g[i], scale[i], zero[i]);
    };
    LaterGroups run[4] = {chain(0), chain(1), chain(2), chain(3)};
    if (k == 4) LaterGroups::rows<4>(run, n_groups);
    if (k == 3) LaterGroups::rows<3>(run, n_groups);
    if (k == 2) LaterGroups::rows<2>(run, n_groups);
    if (k == 1) LaterGroups::rows<1>(run, n_groups);
    for (size_t j = 0; j < k; ++j) good[j0 + j] = run[j].good();
  }
}

bool compact_first_groups_many_avx512(size_t m, size_t n_groups, size_t dim,
                                      const int64_t* const* res, const CompactGrid* const* g,
                                      float* const* scale, float* const* zero, bool* good) {
  constexpr size_t kMaxDim = 64;
  if (m == 0 || m > 16 || dim == 0 || dim > kMaxDim) return false;
  // Group 0's residuals channel by channel, a section a lane (32-bit: each within +-2^30).
  alignas(64) int32_t ds[kMaxDim][16] = {}, dz[kMaxDim][16] = {};
  alignas(64) int32_t shift[16], mbits[16];
  alignas(64) float to_step[16];
  uint64_t far = 0;
  for (size_t j = 0; j < 16; ++j) {
    const CompactGrid& gj = *g[j < m ? j : 0];
    shift[j] = 23 - gj.scale_mantissa_bits;
    mbits[j] = gj.scale_mantissa_bits;
    to_step[j] = zero_step_factor(gj);
    if (j >= m) continue;
    for (size_t c = 0; c < dim; ++c) {
      const int64_t a = res[j][2 * c * n_groups], b = res[j][2 * c * n_groups + 1];
      far |= (static_cast<uint64_t>(a) + (uint64_t{1} << 30)) |
             (static_cast<uint64_t>(b) + (uint64_t{1} << 30));
      ds[c][j] = static_cast<int32_t>(a);
      dz[c][j] = static_cast<int32_t>(b);
    }
  }
  if (far >> 31) return false;
  const __m512i sh = _mm512_load_si512(shift), mb = _mm512_load_si512(mbits);
  const __m512 to = _mm512_load_ps(to_step);
  const __m512 magic = _mm512_set1_ps(12582912.0f), near = _mm512_set1_ps(4194304.0f);
  const __m512i one = _mm512_set1_epi32(1), exponents = _mm512_set1_epi32(254);
  const auto lanes = static_cast<__mmask16>((1u << m) - 1);
  alignas(64) float so[kMaxDim][16], zo[kMaxDim][16];
  // LaterGroups::step's arithmetic, channel c from channel c - 1 (channel 0 from nothing: index
  // and prediction 0).
  __m512 sp = _mm512_setzero_ps(), zp = _mm512_setzero_ps();
  __mmask16 bad = 0;
  for (size_t c = 0; c < dim; ++c) {
    const __m512i s =
        _mm512_add_epi32(_mm512_srlv_epi32(_mm512_castps_si512(sp), sh), _mm512_load_si512(ds[c]));
    const __mmask16 valid = _mm512_cmple_epu32_mask(_mm512_sub_epi32(_mm512_srlv_epi32(s, mb), one),
                                                    _mm512_sub_epi32(exponents, one));
    const __m512 sf = _mm512_castsi512_ps(_mm512_maskz_mov_epi32(valid, _mm512_sllv_epi32(s, sh)));
    const __m512 step = _mm512_mul_ps(sf, to);
    const __m512 q = _mm512_div_ps(zp, _mm512_mask_mov_ps(_mm512_set1_ps(1.0f), valid, step));
    const __mmask16 fast = _mm512_cmp_ps_mask(_mm512_abs_ps(q), near, _CMP_LT_OQ);
    const __m512i k =
        _mm512_add_epi32(_mm512_cvttps_epi32(_mm512_sub_ps(_mm512_add_ps(q, magic), magic)),
                         _mm512_load_si512(dz[c]));
    const __m512 z = _mm512_mul_ps(_mm512_cvtepi32_ps(k), step);
    _mm512_store_ps(so[c], sf);
    _mm512_store_ps(zo[c], z);
    bad |= static_cast<__mmask16>(lanes & ~(valid & fast));
    sp = sf;
    zp = z;
  }
  for (size_t j = 0; j < m; ++j) {
    for (size_t c = 0; c < dim; ++c) {
      scale[j][c] = so[c][j];
      zero[j][c] = zo[c][j];
    }
    good[j] = ((bad >> j) & 1) == 0;
  }
  return true;
}

bool round_params_compact_avx512(const float* mins, const float* maxs, size_t n, int bits,
                                 const CompactGrid& g, float* scale, float* zero) {
  // round_param_compact's operations, 16 group-channels at a time, for those whose first
  // scale candidate fits with at most one step down of the zero index and whose quotient stays
  // below 2^22 (so the index is exact in fp32 and int32); the others, one by one, by the
  // portable function (which gives every lane's same values: the operations are the same IEEE
  // ones, no FMA).
  const float levels_f = static_cast<float>((1 << bits) - 1);
  const __m512 levels = _mm512_set1_ps(levels_f);
  const __m512 usable = _mm512_set1_ps(levels_f - zero_step_factor(g));
  const __m512 to_step = _mm512_set1_ps(zero_step_factor(g));
  const __m512 tiny = _mm512_set1_ps(1e-8f), near = _mm512_set1_ps(4194304.0f);
  const __m512i low_bits =
      _mm512_set1_epi32(static_cast<int>((1u << (23 - g.scale_mantissa_bits)) - 1));
  const __m512i exponent = _mm512_set1_epi32(0x7f800000);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 lanes = static_cast<__mmask16>(n - i >= 16 ? 0xffff : (1u << (n - i)) - 1);
    const __m512 mn = _mm512_maskz_loadu_ps(lanes, mins + i);
    const __m512 mx = _mm512_maskz_loadu_ps(lanes, maxs + i);
    __m512 need = _mm512_div_ps(_mm512_sub_ps(mx, mn), usable);
    need = _mm512_mask_mov_ps(tiny, _mm512_cmp_ps_mask(need, tiny, _CMP_GE_OQ), need);
    // round_up_mantissa: drop the low significand bits, one grid step up if any was set.
    const __m512i u = _mm512_castps_si512(need);
    const __m512i low = _mm512_and_si512(u, low_bits);
    const __m512i up =
        _mm512_add_epi32(_mm512_andnot_si512(low_bits, u),
                         _mm512_maskz_mov_epi32(_mm512_test_epi32_mask(low, low),
                                                _mm512_add_epi32(low_bits, _mm512_set1_epi32(1))));
    const __m512 s = _mm512_castsi512_ps(up);
    const __mmask16 finite_s = _mm512_cmpneq_epi32_mask(_mm512_and_si512(up, exponent), exponent);
    const __m512 step = _mm512_mul_ps(s, to_step);
    const __m512 q =
        _mm512_roundscale_ps(_mm512_div_ps(mn, step), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __mmask16 small = _mm512_cmp_ps_mask(_mm512_abs_ps(q), near, _CMP_LT_OQ);
    // k = q as an integer (-0 becomes +0, as the portable int64 does), then one step down where
    // k * step is still above the minimum.
    __m512 k = _mm512_cvtepi32_ps(_mm512_cvttps_epi32(q));
    k = _mm512_mask_sub_ps(k, _mm512_cmp_ps_mask(_mm512_mul_ps(k, step), mn, _CMP_GT_OQ), k,
                           _mm512_set1_ps(1.0f));
    const __m512 z = _mm512_mul_ps(k, step);
    const __mmask16 settled = _mm512_cmp_ps_mask(z, mn, _CMP_LE_OQ);
    const __mmask16 covers =
        _mm512_cmp_ps_mask(_mm512_add_ps(z, _mm512_mul_ps(s, levels)), mx, _CMP_GE_OQ);
    _mm512_mask_storeu_ps(scale + i, lanes, s);
    _mm512_mask_storeu_ps(zero + i, lanes, z);
    unsigned slow = lanes & ~(finite_s & small & settled & covers);
    while (slow) {
      const size_t j = i + static_cast<size_t>(__builtin_ctz(slow));
      if (!round_param_compact(mins[j], maxs[j], bits, g, scale[j], zero[j])) return false;
      slow &= slow - 1;
    }
  }
  return true;
}

namespace {

// Rows r[0..15] of a 16 x 16 matrix of 32-bit values become its columns.
inline void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
  }
}

}  // namespace

bool residual_rows_avx512(const int64_t* res, size_t n_groups, size_t dim, int32_t* ds,
                          int32_t* dz) {
  // A residual is within +-2^30 exactly when adding 2^30 (mod 2^64) leaves a value below 2^31.
  const __m512i half_range = _mm512_set1_epi64(int64_t{1} << 30);
  __m512i far = _mm512_setzero_si512();
  // A channel's 8 pairs (2 vectors of 64-bit lanes a0 b0 a1 b1 ...): the low halves of its 8
  // a's, then of its 8 b's. 16 channels' of them transposed give the 8 groups' rows of scale
  // residuals, then their 8 rows of zero residuals.
  const __m512i split = _mm512_set_epi32(30, 26, 22, 18, 14, 10, 6, 2, 28, 24, 20, 16, 12, 8, 4, 0);
  const size_t whole_groups = n_groups / 8 * 8, whole_channels = dim / 16 * 16;
  // Channel `channel`'s 8 groups from gi as a split row (below), the far test taken.
  const auto split_row = [&](size_t channel, size_t gi) {
    const int64_t* const from = res + 2 * (channel * n_groups + gi);
    const __m512i v0 = _mm512_loadu_si512(from), v1 = _mm512_loadu_si512(from + 8);
    far = _mm512_or_si512(
        far, _mm512_or_si512(_mm512_add_epi64(v0, half_range), _mm512_add_epi64(v1, half_range)));
    return _mm512_permutex2var_epi32(v0, split, v1);
  };
  if (dim == 8) {
    // Rows of 8 channels (head_dim 8): two blocks of 8 groups in one transpose, channel k's
    // first block in row k and its second in row 8 + k, so that each column holds a group's
    // row of the first block in its low half and one of the second's in its high half.
    for (size_t gi = 0; gi < whole_groups; gi += 16) {
      const bool two = gi + 16 <= whole_groups;
      __m512i r[16];
      for (size_t k = 0; k < 16; ++k)
        r[k] = k < 8 || two ? split_row(k % 8, gi + k / 8 * 8) : _mm512_setzero_si512();
      transpose16(r);
      const auto store = [](int32_t* to, __m256i v) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(to), v);
      };
      for (size_t j = 0; j < 8; ++j) {
        store(ds + (gi + j) * 8, _mm512_castsi512_si256(r[j]));
        store(dz + (gi + j) * 8, _mm512_castsi512_si256(r[8 + j]));
        if (!two) continue;
        store(ds + (gi + 8 + j) * 8, _mm512_extracti64x4_epi64(r[j], 1));
        store(dz + (gi + 8 + j) * 8, _mm512_extracti64x4_epi64(r[8 + j], 1));
      }
    }
    const uint64_t far_rest =
        residual_rows_part(res, n_groups, dim, whole_groups, n_groups, 0, dim, ds, dz);
    return _mm512_test_epi64_mask(far, _mm512_set1_epi64(~int64_t{0x7fffffff})) == 0 &&
           (far_rest >> 31) == 0;
  }
  for (size_t gi = 0; gi < whole_groups; gi += 8) {
    for (size_t c = 0; c < whole_channels; c += 16) {
      __m512i r[16];
      for (size_t k = 0; k < 16; ++k) r[k] = split_row(c + k, gi);
      transpose16(r);
      for (size_t k = 0; k < 8; ++k) {
        _mm512_storeu_si512(ds + (gi + k) * dim + c, r[k]);
        _mm512_storeu_si512(dz + (gi + k) * dim + c, r[k + 8]);
      }
    }
  }
  const uint64_t far_rest =
      residual_rows_part(res, n_groups, dim, 0, whole_groups, whole_channels, dim, ds, dz) |
      residual_rows_part(res, n_groups, dim, whole_groups, n_groups, 0, dim, ds, dz);
  return _mm512_test_epi64_mask(far, _mm512_set1_epi64(~int64_t{0x7fffffff})) == 0 &&
         (far_rest >> 31) == 0;
}

bool compact_residuals_avx512(const float* scale, const float* zero, size_t n_groups, size_t dim,
                              const CompactGrid& g, int64_t* scale_res, int64_t* zero_res) {
  // Parameter i = gi * dim + c is predicted from i - dim (a later group) or i - 1 (group 0's
  // channels after the first); its residuals go to c * n_groups + gi (coding order). They are
  // made 16 parameters a vector in the parameters' order, in 32 bits (below), then transposed.
  // The portable test for a parameter on the grid, lane by lane: a scale index of a positive
  // normal float that gives back the scale's bits; a zero index k (the quotient by the step,
  // rounded) with k * step giving back the zero's bits. Below 2^22 the fp32 quotient rounds to
  // the portable double quotient's nearest integer, and the prediction's quotient rounds as
  // predict_index's does.
  const __m128i shift = _mm_cvtsi32_si128(23 - g.scale_mantissa_bits);
  const __m512i low_bits =
      _mm512_set1_epi32(static_cast<int>((1u << (23 - g.scale_mantissa_bits)) - 1));
  const __m512i one = _mm512_set1_epi32(1), exponents = _mm512_set1_epi32(254);
  const __m512 to_step = _mm512_set1_ps(zero_step_factor(g));
  const __m512 magic = _mm512_set1_ps(12582912.0f), near = _mm512_set1_ps(4194304.0f);
  const size_t n = n_groups * dim;
  thread_local std::vector<int32_t> flat;  // scale residuals, then zero residuals
  if (flat.size() < 2 * n) flat.resize(2 * n);
  int32_t* const ds = flat.data();
  int32_t* const dz = ds + n;
  // Parameters i.. (lanes) predicted from `from`.. (or, for i == 0, lane l from l - 1, lane 0
  // from nothing).
  auto residuals = [&](size_t i, __mmask16 lanes, size_t from) {
    const __m512i bits = _mm512_maskz_loadu_epi32(lanes, scale + i);
    const __m512 z = _mm512_maskz_loadu_ps(lanes, zero + i);
    __m512i pb = _mm512_maskz_loadu_epi32(lanes, scale + from);
    __m512 pzv = _mm512_maskz_loadu_ps(lanes, zero + from);
    if (i == 0) {  // (the loads started at parameter 0: one lane up)
      pb = _mm512_maskz_expand_epi32(static_cast<__mmask16>(lanes & ~1u), pb);
      pzv = _mm512_maskz_expand_ps(static_cast<__mmask16>(lanes & ~1u), pzv);
    }
    const __mmask16 on_scale =
        _mm512_cmpeq_epi32_mask(_mm512_and_si512(bits, low_bits), _mm512_setzero_si512()) &
        _mm512_cmple_epu32_mask(_mm512_sub_epi32(_mm512_srli_epi32(bits, 23), one),
                                _mm512_sub_epi32(exponents, one));
    const __m512 step = _mm512_mul_ps(_mm512_castsi512_ps(bits), to_step);
    const __m512 q = _mm512_div_ps(z, step);
    const __m512 qp = _mm512_div_ps(pzv, step);
    const __mmask16 small = _mm512_cmp_ps_mask(_mm512_abs_ps(q), near, _CMP_LT_OQ) &
                            _mm512_cmp_ps_mask(_mm512_abs_ps(qp), near, _CMP_LT_OQ);
    const __m512i k = _mm512_cvttps_epi32(_mm512_sub_ps(_mm512_add_ps(q, magic), magic));
    const __m512i kp = _mm512_cvttps_epi32(_mm512_sub_ps(_mm512_add_ps(qp, magic), magic));
    const __mmask16 on_zero = _mm512_cmpeq_epi32_mask(
        _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(k), step)), _mm512_castps_si512(z));
    // The residuals fit 32 bits: scale indices of positive floats (bits < 2^31; the predicting
    // one also a checked parameter, or 0), zero indices below 2^22 + 1.
    _mm512_mask_storeu_epi32(
        ds + i, lanes,
        _mm512_sub_epi32(_mm512_srl_epi32(bits, shift), _mm512_srl_epi32(pb, shift)));
    _mm512_mask_storeu_epi32(dz + i, lanes, _mm512_sub_epi32(k, kp));
    return (lanes & ~(on_scale & small & on_zero)) == 0;
  };
  auto first_lanes = [](size_t left) {
    return static_cast<__mmask16>(left >= 16 ? 0xffff : (1u << left) - 1);
  };
  bool ok = true;
  for (size_t c0 = 0; c0 < dim && c0 < n; c0 += 16)
    ok &= residuals(c0, first_lanes(dim - c0), c0 == 0 ? 0 : c0 - 1);
  for (size_t i = dim; i < n; i += 16) ok &= residuals(i, first_lanes(n - i), i - dim);
  if (!ok) return false;
  // Coding order, widened: blocks of 8 groups x 16 channels, the scale residuals' 8 rows and
  // the zero residuals' 8 transposed together (a channel's 8 of each per row), the rest one by
  // one.
  const size_t whole_groups = n_groups / 8 * 8, whole_channels = dim / 16 * 16;
  const auto rest = [&](size_t g0, size_t g1, size_t c0) {
    for (size_t c = c0; c < dim; ++c) {
      for (size_t gi = g0; gi < g1; ++gi) {
        scale_res[c * n_groups + gi] = ds[gi * dim + c];
        zero_res[c * n_groups + gi] = dz[gi * dim + c];
      }
    }
  };
  // A row's halves widened (the extract's index a constant, as clang requires).
  const auto widen_low = [](__m512i v) { return _mm512_cvtepi32_epi64(_mm512_castsi512_si256(v)); };
  const auto widen_high = [](__m512i v) {
    return _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(v, 1));
  };
  if (dim == 8) {
    // Rows of 8 channels (head_dim 8): two blocks of 8 groups in one transpose, group gi + k's
    // row in row k's low half and gi + 8 + k's in its high half (residual_rows_avx512's
    // layout, inverted).
    for (size_t gi = 0; gi < whole_groups; gi += 16) {
      const bool two = gi + 16 <= whole_groups;
      const auto rows = [&](const int32_t* from, size_t k) {
        const auto row = [&](size_t g) {
          return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(from + g * 8));
        };
        return _mm512_inserti64x4(_mm512_castsi256_si512(row(gi + k)),
                                  two ? row(gi + 8 + k) : _mm256_setzero_si256(), 1);
      };
      __m512i r[16];
      for (size_t k = 0; k < 8; ++k) r[k] = rows(ds, k), r[k + 8] = rows(dz, k);
      transpose16(r);
      for (size_t c = 0; c < 8; ++c) {
        _mm512_storeu_si512(scale_res + c * n_groups + gi, widen_low(r[c]));
        _mm512_storeu_si512(zero_res + c * n_groups + gi, widen_high(r[c]));
        if (!two) continue;
        _mm512_storeu_si512(scale_res + c * n_groups + gi + 8, widen_low(r[8 + c]));
        _mm512_storeu_si512(zero_res + c * n_groups + gi + 8, widen_high(r[8 + c]));
      }
    }
    rest(whole_groups, n_groups, 0);
    return true;
  }
  for (size_t gi = 0; gi < whole_groups; gi += 8) {
    for (size_t c = 0; c < whole_channels; c += 16) {
      __m512i r[16];
      for (size_t k = 0; k < 8; ++k) {
        r[k] = _mm512_loadu_si512(ds + (gi + k) * dim + c);
        r[k + 8] = _mm512_loadu_si512(dz + (gi + k) * dim + c);
      }
      transpose16(r);
      for (size_t k = 0; k < 16; ++k) {
        _mm512_storeu_si512(scale_res + (c + k) * n_groups + gi, widen_low(r[k]));
        _mm512_storeu_si512(zero_res + (c + k) * n_groups + gi, widen_high(r[k]));
      }
    }
  }
  rest(0, whole_groups, whole_channels);
  rest(whole_groups, n_groups, 0);
  return true;
}

namespace {

// The first n of 8 lanes (all 8 from n = 8 up).
inline __mmask8 first_lanes8(size_t n) {
  return static_cast<__mmask8>(n >= 8 ? 0xff : (1u << n) - 1);
}

// Zigzag of signed 64-bit values (0, -1, 1, -2, ... to 0, 1, 2, 3, ...).
inline __m512i zigzag8(__m512i r) {
  return _mm512_xor_si512(_mm512_slli_epi64(r, 1), _mm512_srai_epi64(r, 63));
}

// 127 + the bit length less 1 of 16 nonzero 32-bit words: the exponent of their fp32 conversion
// rounded toward zero (powers of two stay, nothing rounds up to one).
inline __m512i biased_exponents(__m512i w) {
  const __m512 f = _mm512_cvt_roundepu32_ps(w, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  return _mm512_srli_epi32(_mm512_castps_si512(f), 23);
}

}  // namespace

std::optional<ExpGolombOrder> best_eg_order_avx512(const int64_t* residuals, size_t count,
                                                   int max_prefix) {
  // Order k codes a zigzag value v in k + 1 + 2 * (bit length of (v >> k) + 1, less 1) bits:
  // per order, one shift, add, conversion and add per 16 values on 32-bit lanes (the lengths
  // from biased_exponents). Padding lanes hold 0 (w = 1, length 1).
  if (count >= (size_t{1} << 26)) return std::nullopt;  // the 32-bit sums' bound
  // The zigzag values as 32-bit words: on the stack for a head's usual parameters, else in the
  // thread's vector (with one reduction an order, stories260K's fused encode 263 -> 255 us).
  constexpr size_t kOnStack = 1024;
  alignas(64) uint32_t local[kOnStack];
  thread_local std::vector<uint32_t> kept;
  const size_t n_vec = (count + 15) / 16;
  uint32_t* v = local;
  if (n_vec * 16 > kOnStack) {
    kept.resize(n_vec * 16);
    v = kept.data();
  }
  __m512i top = _mm512_setzero_si512();
  for (size_t i = 0; i < count; i += 8) {
    const __m512i z = zigzag8(_mm512_maskz_loadu_epi64(first_lanes8(count - i), residuals + i));
    top = _mm512_max_epu64(top, z);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(v + i), _mm512_cvtepi64_epi32(z));
  }
  const uint64_t largest = _mm512_reduce_max_epu64(top);
  if (largest >= UINT32_MAX) return std::nullopt;  // (v >> 0) + 1 must fit 32 bits
  for (size_t i = count; i < n_vec * 16; ++i) v[i] = 0;
  const int max_length = 64 - __builtin_clzll(largest | 1);
  const int last_k = max_length + 1 < 24 ? max_length + 1 : 24;
  const __m512i one = _mm512_set1_epi32(1);
  ExpGolombOrder best;
  for (int k = 0; k <= last_k; ++k) {
    // Every order from k up costs at least count * (k + 1) bits (each code's k + 1 fixed
    // bits): none of them can beat the best once that does not (an earlier order wins ties).
    if (count * static_cast<uint64_t>(k + 1) >= best.bits) break;
    if ((largest >> k) + 1 >= (uint64_t{1} << (max_prefix + 1))) continue;
    const __m128i shift = _mm_cvtsi32_si128(k);
    __m512i sum = _mm512_setzero_si512();
    for (size_t j = 0; j < n_vec; ++j) {
      const __m512i w =
          _mm512_add_epi32(_mm512_srl_epi32(_mm512_loadu_si512(v + 16 * j), shift), one);
      sum = _mm512_add_epi32(sum, biased_exponents(w));
    }
    // Exponents are biased by 127: their sum less 127 a lane is the lengths less 1, summed,
    // below 32 * 2^26 (so the 32-bit sums' wrap-around cancels).
    const uint64_t lengths = static_cast<uint32_t>(_mm512_reduce_add_epi32(sum)) -
                             static_cast<uint32_t>(127 * 16 * n_vec);
    const uint64_t bits = count * static_cast<uint64_t>(k + 1) + 2 * lengths;
    if (bits < best.bits) best.bits = bits, best.k = k;
  }
  return best;
}

void exp_golomb_pair_codes_avx512(const int64_t* a, const int64_t* b, size_t n, int ka, int kb,
                                  uint64_t* code, uint8_t* n_bits) {
  // 8 pairs a step in 64-bit lanes. The codes' lengths 2 * (bit length of (v >> k) + 1, less
  // 1) + 1 + k come from one 16-lane biased_exponents of both values of 8 pairs; the pair's
  // code is the a-code shifted above the b-code.
  const __m512i top = _mm512_set1_epi64(UINT32_MAX - 1);  // (v >> k) + 1 fits 32 bits
  const __m512i one = _mm512_set1_epi64(1);
  const __m512i lead_a = _mm512_set1_epi64(int64_t{1} << ka);
  const __m512i lead_b = _mm512_set1_epi64(int64_t{1} << kb);
  // 2 * exponent + (1 + k - 2 * 127): lanes 0-7 a's, 8-15 b's.
  const __m512i bias =
      _mm512_inserti64x4(_mm512_set1_epi32(ka - 253), _mm256_set1_epi32(kb - 253), 1);
  const __m128i shift_a = _mm_cvtsi32_si128(ka), shift_b = _mm_cvtsi32_si128(kb);
  for (size_t i = 0; i < n; i += 8) {
    const __mmask8 m = first_lanes8(n - i);
    const __m512i za = zigzag8(_mm512_maskz_loadu_epi64(m, a + i));
    const __m512i zb = zigzag8(_mm512_maskz_loadu_epi64(m, b + i));
    const __m512i w = _mm512_inserti64x4(
        _mm512_castsi256_si512(
            _mm512_cvtepi64_epi32(_mm512_add_epi64(_mm512_srl_epi64(za, shift_a), one))),
        _mm512_cvtepi64_epi32(_mm512_add_epi64(_mm512_srl_epi64(zb, shift_b), one)), 1);
    const __m512i len = _mm512_add_epi32(_mm512_slli_epi32(biased_exponents(w), 1), bias);
    const __m256i len_b = _mm512_extracti64x4_epi64(len, 1);
    const __m256i total = _mm256_add_epi32(_mm512_castsi512_si256(len), len_b);
    const __mmask8 fits = _mm512_cmple_epu64_mask(za, top) & _mm512_cmple_epu64_mask(zb, top) &
                          _mm256_cmple_epu32_mask(total, _mm256_set1_epi32(56)) & m;
    const __m512i pair = _mm512_or_si512(
        _mm512_sllv_epi64(_mm512_add_epi64(za, lead_a), _mm512_cvtepu32_epi64(len_b)),
        _mm512_add_epi64(zb, lead_b));
    _mm512_mask_storeu_epi64(code + i, m, pair);
    _mm256_mask_cvtepi32_storeu_epi8(n_bits + i, m, _mm256_maskz_mov_epi32(fits, total));
  }
}

}  // namespace cachegen::detail
