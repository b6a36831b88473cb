// Internal: the min/max kernels (each group-channel's range, the quantizers' first pass), part
// of kernels_impl.h's kernel bodies: included by it inside the same per-target namespace, after
// the widening helpers they use, compiled with each target's flags.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace cachegen::detail::CACHEGEN_KERNEL_NS {

#if defined(CACHEGEN_HAVE_F16C) && defined(__AVX512F__)
// Finiteness of the values the min/max loops read, folded in as they are widened: fp32 as
// x - x summed (0 unless some x is NaN or Inf, which make it NaN); fp16 as the largest
// magnitude of their bits (NaN or Inf from 0x7c00 up), an AND and an unsigned max on the
// 256-bit vector loaded (the float way is a 512-bit subtract and add, which on Zen 4 take both
// halves of its units: head_dim 8's min/max ~17% faster, 1.3% of stories260K's fp16 encode).
struct FiniteF32 {
  __m512 sum = _mm512_setzero_ps();
  __m512 widen16(const float* x) {
    const __m512 a = _mm512_loadu_ps(x);
    sum = _mm512_add_ps(sum, _mm512_sub_ps(a, a));
    return a;
  }
  __m512 widen8x2(const float* x, size_t stride) {
    const __m512 a = CACHEGEN_KERNEL_NS::widen8x2(x, stride);
    sum = _mm512_add_ps(sum, _mm512_sub_ps(a, a));
    return a;
  }
  __m256 widen8(const float* x) {  // (the odd last row: into the sum's low half)
    const __m256 a = _mm256_loadu_ps(x);
    sum = _mm512_add_ps(sum, _mm512_zextps256_ps512(_mm256_sub_ps(a, a)));
    return a;
  }
  bool finite() const { return _mm512_cmp_ps_mask(sum, _mm512_setzero_ps(), _CMP_EQ_OQ) == 0xffff; }
};
struct FiniteF16 {
  __m256i top = _mm256_setzero_si256();
  __m512 widen16(const uint16_t* x) {
    return take(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
  }
  __m512 widen8x2(const uint16_t* x, size_t stride) { return take(halves8x2(x, stride)); }
  __m256 widen8(const uint16_t* x) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x));
    top = _mm256_max_epu16(top, _mm256_zextsi128_si256(_mm_and_si128(h, _mm_set1_epi16(0x7fff))));
    return _mm256_cvtph_ps(h);
  }
  bool finite() const { return _mm256_cmpge_epu16_mask(top, _mm256_set1_epi16(0x7c00)) == 0; }

 private:
  __m512 take(__m256i h) {
    top = _mm256_max_epu16(top, _mm256_and_si256(h, _mm256_set1_epi16(0x7fff)));
    return _mm512_cvtph_ps(h);
  }
};
template <typename T>
using Finite = std::conditional_t<std::is_same_v<T, uint16_t>, FiniteF16, FiniteF32>;
#endif

// Columns [0, kW) of rows x[r * stride] (fp32, or fp16 widened): their minima and maxima into
// mn, mx (kFirst: of equal values, -0 and +0, the first is kept, else the last); false when a
// value is NaN or Inf. The running values are locals, kept in registers: through mn/mx (which
// may alias x for all the compiler knows) rows of 8 were a scalar load-min-store chain per
// value, a fifth of a head_dim-8 file encode. Finiteness as x - x summed (0 unless some x is
// NaN or Inf, which make it NaN): float operations beside the others (on AVX-512, fp16 inputs'
// as their bits' largest magnitude: Finite<T>).
template <bool kFirst, size_t kW, typename T>
static bool minmax_columns(const T* x, size_t rows, size_t stride, float* mn, float* mx) {
#if defined(CACHEGEN_HAVE_F16C) && defined(__AVX512F__)
  if constexpr (kW % 16 == 0) {
    // The same operations 16 columns a vector (as the quantizer's, the loop's instruction
    // count bounded it on Zen 4, not the vector width).
    constexpr size_t kV = kW / 16;
    __m512 lo[kV], hi[kV];
    Finite<T> fin[kV];
    for (size_t v = 0; v < kV; ++v) lo[v] = hi[v] = widen16(x + 16 * v);
    for (size_t r = 0; r < rows; ++r) {
      const T* row = x + r * stride;
      for (size_t v = 0; v < kV; ++v) {
        const __m512 a = fin[v].widen16(row + 16 * v);
        lo[v] = kFirst ? _mm512_min_ps(a, lo[v]) : _mm512_min_ps(lo[v], a);
        hi[v] = kFirst ? _mm512_max_ps(a, hi[v]) : _mm512_max_ps(hi[v], a);
      }
    }
    bool finite = true;
    for (size_t v = 0; v < kV; ++v) {
      _mm512_storeu_ps(mn + 16 * v, lo[v]);
      _mm512_storeu_ps(mx + 16 * v, hi[v]);
      finite &= fin[v].finite();
    }
    return finite;
  }
#endif
#if defined(CACHEGEN_HAVE_F16C) && defined(__AVX2__)
  if constexpr (kW % 8 == 0) {
    // The same operations 8 columns a vector (MINPS/MAXPS are min_f/max_f, operand order
    // kept): GCC 12 left the loop below scalar.
    constexpr size_t kV = kW / 8;
    __m256 lo[kV], hi[kV], nan[kV];
    for (size_t v = 0; v < kV; ++v) {
      lo[v] = hi[v] = widen8(x + 8 * v);
      nan[v] = _mm256_setzero_ps();
    }
    for (size_t r = 0; r < rows; ++r) {
      const T* row = x + r * stride;
      for (size_t v = 0; v < kV; ++v) {
        const __m256 a = widen8(row + 8 * v);
        nan[v] = _mm256_add_ps(nan[v], _mm256_sub_ps(a, a));
        lo[v] = kFirst ? _mm256_min_ps(a, lo[v]) : _mm256_min_ps(lo[v], a);
        hi[v] = kFirst ? _mm256_max_ps(a, hi[v]) : _mm256_max_ps(hi[v], a);
      }
    }
    int finite = 0xff;
    for (size_t v = 0; v < kV; ++v) {
      _mm256_storeu_ps(mn + 8 * v, lo[v]);
      _mm256_storeu_ps(mx + 8 * v, hi[v]);
      finite &= _mm256_movemask_ps(_mm256_cmp_ps(nan[v], _mm256_setzero_ps(), _CMP_EQ_OQ));
    }
    return finite == 0xff;
  }
#endif
  float lo[kW], hi[kW], nan[kW];
  for (size_t c = 0; c < kW; ++c) {
    lo[c] = hi[c] = widen1(x + c);
    nan[c] = 0.0f;
  }
  for (size_t r = 0; r < rows; ++r) {
    const T* row = x + r * stride;
    for (size_t c = 0; c < kW; ++c) {
      const float v = widen1(row + c);
      nan[c] += v - v;
      lo[c] = kFirst ? min_f(v, lo[c]) : min_f(lo[c], v);
      hi[c] = kFirst ? max_f(v, hi[c]) : max_f(hi[c], v);
    }
  }
  bool finite = true;
  for (size_t c = 0; c < kW; ++c) {
    mn[c] = lo[c];
    mx[c] = hi[c];
    finite &= nan[c] == 0.0f;
  }
  return finite;
}

#if defined(CACHEGEN_HAVE_F16C) && defined(__AVX512F__)
// minmax_columns of rows of 8 (head_dim 8), two rows a 512-bit vector: even rows in the low
// half, odd ones in the high half, joined at the end. Equal values differ only as -0 and +0;
// where the halves' results are such a pair, which came first is not known here, and the
// caller is told to run the one-row loop instead (false in *decided). An odd last row joins
// after the halves, in order.
template <bool kFirst, typename T>
static bool minmax_rows8_paired(const T* x, size_t rows, size_t stride, float* mn, float* mx,
                                bool* decided) {
  Finite<T> fin;
  __m512 lo = fin.widen8x2(x, stride), hi = lo;
  size_t r = 2;
  for (; r + 2 <= rows; r += 2) {
    const __m512 a = fin.widen8x2(x + r * stride, stride);
    lo = kFirst ? _mm512_min_ps(a, lo) : _mm512_min_ps(lo, a);
    hi = kFirst ? _mm512_max_ps(a, hi) : _mm512_max_ps(hi, a);
  }
  // The halves (the extract's index a constant, as clang requires).
  const auto low = [](__m512 v) { return _mm512_castps512_ps256(v); };
  const auto high = [](__m512 v) {
    return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  };
  const __m256 lo_e = low(lo), lo_o = high(lo), hi_e = low(hi), hi_o = high(hi);
  // Equal as floats, unequal as bits: -0 against +0.
  const auto split = [](__m256 a, __m256 b) {
    return _mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_EQ_OQ)) &
           ~_mm256_movemask_ps(_mm256_castsi256_ps(
               _mm256_cmpeq_epi32(_mm256_castps_si256(a), _mm256_castps_si256(b))));
  };
  *decided = (split(lo_e, lo_o) | split(hi_e, hi_o)) == 0;
  __m256 lo8 = _mm256_min_ps(lo_e, lo_o), hi8 = _mm256_max_ps(hi_e, hi_o);
  if (r < rows) {  // the odd last row
    const __m256 a = fin.widen8(x + r * stride);
    lo8 = kFirst ? _mm256_min_ps(a, lo8) : _mm256_min_ps(lo8, a);
    hi8 = kFirst ? _mm256_max_ps(a, hi8) : _mm256_max_ps(hi8, a);
  }
  _mm256_storeu_ps(mn, lo8);
  _mm256_storeu_ps(mx, hi8);
  return fin.finite();
}
#endif

#if defined(CACHEGEN_HAVE_F16C) && defined(__AVX512BW__)
// fp16 bits as 16-bit integers in the values' order (negatives' magnitude bits flipped; its own
// inverse): -0 lands just below +0, and NaN and Inf beyond every finite value (from 0x7c00 up,
// from -0x7c01 down), so the integer minima and maxima carry the finiteness check too.
static inline __m512i ordered_halves(__m512i h) {
  // h ^ ((h >> 15) & 0x7fff): ternary-logic table 0x78 is a ^ (b & c).
  return _mm512_ternarylogic_epi32(h, _mm512_srai_epi16(h, 15), _mm512_set1_epi16(0x7fff), 0x78);
}
enum class HalvesMinMax { done, not_finite, undecided };
// minmax_rows_first of fp16 rows of 8 (four rows a vector) or of a multiple of 32 channels
// (32 a vector) on their bits as ordered integers: 4 operations a vector (order, minimum,
// maximum) where the widened floats took 6 (widening, finiteness, minimum, maximum) for half
// as many values. A kernel loop over groups of 32 rows, 0.065 -> 0.046 ns a value on rows of
// 64 and 0.073 -> 0.068 on rows of 8 inside rows of 32 (their rows' gathering); in
// stories260K's fp16 encode ~2 us (a fifth of the min/max's samples; AMD Zen 4 VM). Equal
// values are the same bits but for -0 and +0: where a minimum or maximum is a zero, which one
// the float loop keeps (the first) is not known here, and nothing is decided (undecided: the
// caller runs the float loop).
static HalvesMinMax minmax_halves(const uint16_t* x, size_t rows, size_t dim, size_t stride,
                                  float* mn, float* mx) {
  const auto row = [&](size_t r) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + r * stride));
  };
  // Rows r..r + 3 of 8 (the last row again in place of those past it: min and max do not care).
  const auto four = [&](size_t r) {
    if (stride == 8 && r + 4 <= rows) return ordered_halves(_mm512_loadu_si512(x + r * 8));
    const auto at = [&](size_t k) { return row(r + k < rows ? r + k : rows - 1); };
    __m512i v = _mm512_castsi128_si512(at(0));
    v = _mm512_inserti32x4(v, at(1), 1);
    v = _mm512_inserti32x4(v, at(2), 2);
    return ordered_halves(_mm512_inserti32x4(v, at(3), 3));
  };
  // 32 ordered minima and maxima: finite and decided, then written as floats.
  const auto finish = [](__m512i lo, __m512i hi, size_t n, float* mn, float* mx) {
    const __m512i low = _mm512_set1_epi16(-0x7c00), high = _mm512_set1_epi16(0x7bff);
    const __mmask32 lanes = static_cast<__mmask32>(n == 32 ? ~0u : (1u << n) - 1);
    if ((_mm512_mask_cmplt_epi16_mask(lanes, lo, low) |
         _mm512_mask_cmpgt_epi16_mask(lanes, hi, high)) != 0)
      return HalvesMinMax::not_finite;
    // A zero, -0 (-1 here) or +0: the float loop's choice.
    const __m512i one = _mm512_set1_epi16(1);
    if ((_mm512_mask_cmplt_epu16_mask(lanes, _mm512_add_epi16(lo, one), _mm512_set1_epi16(2)) |
         _mm512_mask_cmplt_epu16_mask(lanes, _mm512_add_epi16(hi, one), _mm512_set1_epi16(2))) != 0)
      return HalvesMinMax::undecided;
    const __m512i a = ordered_halves(lo), b = ordered_halves(hi);
    _mm512_mask_storeu_ps(mn, static_cast<__mmask16>(lanes),
                          _mm512_cvtph_ps(_mm512_castsi512_si256(a)));
    _mm512_mask_storeu_ps(mx, static_cast<__mmask16>(lanes),
                          _mm512_cvtph_ps(_mm512_castsi512_si256(b)));
    if (n > 16) {
      _mm512_mask_storeu_ps(mn + 16, static_cast<__mmask16>(lanes >> 16),
                            _mm512_cvtph_ps(_mm512_extracti64x4_epi64(a, 1)));
      _mm512_mask_storeu_ps(mx + 16, static_cast<__mmask16>(lanes >> 16),
                            _mm512_cvtph_ps(_mm512_extracti64x4_epi64(b, 1)));
    }
    return HalvesMinMax::done;
  };
  if (dim == 8) {
    __m512i lo = four(0), hi = lo;
    for (size_t r = 4; r < rows; r += 4) {
      const __m512i v = four(r);
      lo = _mm512_min_epi16(lo, v);
      hi = _mm512_max_epi16(hi, v);
    }
    // The four rows' results (128-bit lanes) into the lowest.
    lo = _mm512_min_epi16(lo, _mm512_shuffle_i64x2(lo, lo, 0x4e));
    hi = _mm512_max_epi16(hi, _mm512_shuffle_i64x2(hi, hi, 0x4e));
    lo = _mm512_min_epi16(lo, _mm512_shuffle_i64x2(lo, lo, 0xb1));
    hi = _mm512_max_epi16(hi, _mm512_shuffle_i64x2(hi, hi, 0xb1));
    return finish(lo, hi, 8, mn, mx);
  }
  // Block by block: an undecided one sends the whole call to the float loop, which writes
  // every column again.
  HalvesMinMax verdict = HalvesMinMax::done;
  for (size_t c = 0; c < dim && verdict == HalvesMinMax::done; c += 32) {
    const auto load = [&](size_t r) {
      return ordered_halves(_mm512_loadu_si512(x + r * stride + c));
    };
    __m512i lo = load(0), hi = lo;
    for (size_t r = 1; r < rows; ++r) {
      const __m512i v = load(r);
      lo = _mm512_min_epi16(lo, v);
      hi = _mm512_max_epi16(hi, v);
    }
    verdict = finish(lo, hi, 32, mn + c, mx + c);
  }
  return verdict;
}
#endif

// Row r at x + r * stride.
template <bool kFirst, typename T>
static bool minmax_rows_keeping(const T* x, size_t rows, size_t dim, size_t stride, float* mn,
                                float* mx) {
#if defined(CACHEGEN_HAVE_F16C) && defined(__AVX512BW__)
  if constexpr (std::is_same_v<T, uint16_t>) {
    if (rows >= 1 && (dim == 8 || dim % 32 == 0)) {
      const HalvesMinMax m = minmax_halves(x, rows, dim, stride, mn, mx);
      if (m != HalvesMinMax::undecided) return m == HalvesMinMax::done;
    }
  }
#endif
#if defined(CACHEGEN_HAVE_F16C) && defined(__AVX512F__)
  if (dim == 8 && rows >= 2) {
    bool decided = false;
    const bool finite = minmax_rows8_paired<kFirst>(x, rows, stride, mn, mx, &decided);
    if (decided || !finite) return finite;
  }
#endif
  bool finite = true;
  size_t c = 0;
  for (; c + 16 <= dim; c += 16)
    finite &= minmax_columns<kFirst, 16>(x + c, rows, stride, mn + c, mx + c);
  for (; c + 8 <= dim; c += 8)
    finite &= minmax_columns<kFirst, 8>(x + c, rows, stride, mn + c, mx + c);
  for (; c + 4 <= dim; c += 4)
    finite &= minmax_columns<kFirst, 4>(x + c, rows, stride, mn + c, mx + c);
  for (; c < dim; ++c) finite &= minmax_columns<kFirst, 1>(x + c, rows, stride, mn + c, mx + c);
  return finite;
}
static bool minmax_rows(const float* x, size_t rows, size_t dim, float* mn, float* mx) {
  return minmax_rows_keeping<false>(x, rows, dim, dim, mn, mx);
}
static bool minmax_rows_first(const float* x, size_t rows, size_t dim, float* mn, float* mx) {
  return minmax_rows_keeping<true>(x, rows, dim, dim, mn, mx);
}
static bool minmax_rows_first_f16(const uint16_t* x, size_t rows, size_t dim, size_t stride,
                                  float* mn, float* mx) {
  return minmax_rows_keeping<true>(x, rows, dim, stride, mn, mx);
}

}  // namespace cachegen::detail::CACHEGEN_KERNEL_NS
