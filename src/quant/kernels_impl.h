// Internal: the kernel bodies, included by one .cpp per SIMD target (compiled with that
// target's flags) inside a distinct namespace. Plain loops the compiler vectorises; the
// fp16 conversions use F16C where the including file provides CACHEGEN_HAVE_F16C.
//
// Rounding: round_half_even(v) for v in [-1, 256] is (v + 1.5*2^23) - 1.5*2^23: the sum lies
// in [2^23, 2^24), where the fp32 spacing is 1, so the addition itself rounds half-to-even.
// This is branch-free and identical on every target (no roundps/SSE4.1 needed); the vector
// quantizer rounds by ROUNDPS instead, to the same codes (Quantize8).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cachegen/half.h"
#include "quant/kernels.h"

#if defined(CACHEGEN_HAVE_F16C)
#include <immintrin.h>
#endif

namespace cachegen::detail::CACHEGEN_KERNEL_NS {

inline constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23
inline constexpr float kHalfMax = 65504.0f;        // largest finite fp16

// Local min/max (not std::): an inline function shared with another target's TU could be
// merged by the linker into a copy compiled for the wrong instruction set.
static inline float min_f(float a, float b) {
  return a < b ? a : b;
}
static inline float max_f(float a, float b) {
  return a > b ? a : b;
}
// fp16 of y clamped to +-65504 (a NaN y becomes the bound: min_f/max_f return b): what the
// vector loops' min, max and round-to-nearest conversion give.
static inline uint16_t half_sat(float y) {
  return float_to_half(max_f(min_f(y, kHalfMax), -kHalfMax)).bits;
}

static void f16_to_f32(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
#if defined(CACHEGEN_HAVE_F16C)
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) out[i] = half_to_float(Half{in[i]});
}

static void bf16_to_f32(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(in[i]) << 16;
    std::memcpy(out + i, &u, sizeof(float));
  }
}

static bool all_finite(const float* x, size_t n) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, sizeof u);
    bad |= static_cast<uint32_t>((u & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

// A value of the kernels' inputs as fp32: fp32 itself, or fp16 bits widened (exactly). The
// fp16 overloads let the codec quantise its fp16 inputs without an fp32 copy of them.
static inline float widen1(const float* x) {
  return *x;
}
static inline float widen1(const uint16_t* x) {
  return half_to_float(Half{*x});
}
#if defined(CACHEGEN_HAVE_F16C) && defined(__AVX2__)
static inline __m256 widen8(const float* x) {
  return _mm256_loadu_ps(x);
}
static inline __m256 widen8(const uint16_t* x) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
}
#endif
#if defined(CACHEGEN_HAVE_F16C) && defined(__AVX512F__)
static inline __m512 widen16(const float* x) {
  return _mm512_loadu_ps(x);
}
static inline __m512 widen16(const uint16_t* x) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
}
// Two rows of 8, at x and x + stride, as one vector (widen16(x) where stride is 8).
static inline __m512 widen8x2(const float* x, size_t stride) {
  if (stride == 8) return widen16(x);
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(widen8(x))),
                                             _mm256_castps_pd(widen8(x + stride)), 1));
}
// The fp16 bits of two rows of 8, at x and x + stride, as one vector.
static inline __m256i halves8x2(const uint16_t* x, size_t stride) {
  if (stride == 8) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x));
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + stride));
  return _mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1);
}
static inline __m512 widen8x2(const uint16_t* x, size_t stride) {
  return _mm512_cvtph_ps(halves8x2(x, stride));
}
#endif

}  // namespace cachegen::detail::CACHEGEN_KERNEL_NS

// The min/max kernels (minmax_rows, minmax_rows_first, minmax_rows_first_f16).
#include "quant/minmax_kernels_impl.h"

namespace cachegen::detail::CACHEGEN_KERNEL_NS {

#if defined(CACHEGEN_HAVE_F16C) && defined(__AVX2__)
// The vector twin of quantize_span's scalar loop for 8 values: the same quotient, rounded by
// ROUNDPS (to nearest even, whatever MXCSR holds) and clamped once, in 6 operations instead of
// 10 (the scalar loop's two clamps and magic-number rounding took 0.47 TSC a value, this 0.29:
// the vector ALUs were the bound, not the division). The same codes for every quotient v:
// - v in [-1, max_code + 1]: the scalar pre-clamp changes nothing, and both round it alike;
// - v below -1 (or -Inf): the scalar code is 0; here rne(v) <= -1 converts to a negative
//   integer (INT_MIN past int32), which the packs saturate to 0;
// - v above max_code + 1 (or +Inf): both give max_code (MINPS with max_code first);
// - NaN: the scalar max_f(NaN, -1) is -1, code 0; here MINPS(max_code, NaN) returns the NaN,
//   which converts to INT_MIN: 0.
// Its results are codes only after the saturating packs (store_codes32, quantize_span).
template <Scaling kScaling>
struct Quantize8 {
  __m256 max;
  explicit Quantize8(float max_code) : max(_mm256_set1_ps(max_code)) {}
  template <typename T>
  __m256i operator()(const T* x, __m256 scale, __m256 zero) const {
    const __m256 d = _mm256_sub_ps(widen8(x), zero);
    const __m256 v =
        kScaling == Scaling::divide ? _mm256_div_ps(d, scale) : _mm256_mul_ps(d, scale);
    const __m256 q = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm256_cvttps_epi32(_mm256_min_ps(max, q));
  }
};
#if defined(CACHEGEN_HAVE_F16C) && defined(__AVX512F__)
// Quantize8's codes for 16 values, in 5 operations on 512-bit vectors and a narrowing store:
// the quotient clamped to [0, max_code] first (MAXPS with 0 second returns 0 for a NaN, the
// scalar loop's code; below 0 the scalar code is 0 too, above max_code max_code), then rounded
// to the nearest integer, ties to even, by the conversion's own rounding mode (embedded, not
// MXCSR's) and narrowed to bytes (every value lies in 0..255). Quantize8 took 0.29 TSC a value
// (ROUNDPS, the packs and their permute), this 0.17-0.18 on rows of 8, 64 and 128 (kernel
// microbenchmark, groups of 32 rows in L1): on Zen 4 the instruction count bounded the loop,
// not the vector width (the codec's multiply by inverse scales: 0.13). On the 34th session's
// Intel machine the 512-bit division bounded it (0.50 TSC a value; the multiply 0.28).
template <Scaling kScaling>
struct Quantize16 {
  __m512 max;
  explicit Quantize16(float max_code) : max(_mm512_set1_ps(max_code)) {}
  template <typename T>
  void operator()(const T* x, __m512 scale, __m512 zero, uint8_t* out) const {
    (*this)(widen16(x), scale, zero, out);
  }
  void operator()(__m512 x, __m512 scale, __m512 zero, uint8_t* out) const {
    const __m512 d = _mm512_sub_ps(x, zero);
    const __m512 v =
        kScaling == Scaling::divide ? _mm512_div_ps(d, scale) : _mm512_mul_ps(d, scale);
    const __m512 c = _mm512_min_ps(max, _mm512_max_ps(v, _mm512_setzero_ps()));
    const __m512i q = _mm512_cvt_roundps_epi32(c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(q));
  }
};
#endif
// Four results of Quantize8 as 32 bytes of codes in order: the saturating packs keep 0..255
// and make negatives 0; the permute undoes the packs' lane order.
static inline void store_codes32(__m256i a, __m256i b, __m256i c, __m256i d, uint8_t* out) {
  const __m256i bytes = _mm256_permutevar8x32_epi32(
      _mm256_packus_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d)),
      _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), bytes);
}
#endif

// n consecutive values with their own scale (or its reciprocal, Scaling::multiply) and zero each.
// The vector loop gives the scalar loop's codes (Quantize8): GCC 12 turned the scalar loop's
// clamps into branches it then did not vectorise (18% of an AVX2 fp16 encode).
template <Scaling kScaling, typename T>
static inline void quantize_span(const T* x, size_t n, const float* scale, const float* zero,
                                 float max_code, uint8_t* out) {
  const float hi = max_code + 1.0f;
  size_t c = 0;
#if defined(CACHEGEN_HAVE_F16C) && defined(__AVX512F__)
  const Quantize16<kScaling> q16(max_code);
  for (; c + 16 <= n; c += 16)
    q16(x + c, _mm512_loadu_ps(scale + c), _mm512_loadu_ps(zero + c), out + c);
#endif
#if defined(CACHEGEN_HAVE_F16C) && defined(__AVX2__)
  const Quantize8<kScaling> q8(max_code);
  const auto eight = [&](size_t i) {
    return q8(x + i, _mm256_loadu_ps(scale + i), _mm256_loadu_ps(zero + i));
  };
  for (; c + 32 <= n; c += 32)
    store_codes32(eight(c), eight(c + 8), eight(c + 16), eight(c + 24), out + c);
  for (; c + 8 <= n; c += 8) {
    const __m256i a = eight(c);
    const __m256i b = _mm256_packus_epi16(_mm256_packs_epi32(a, a), _mm256_setzero_si256());
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + c),
                     _mm_unpacklo_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1)));
  }
#endif
  for (; c < n; ++c) {
    const float d = widen1(x + c) - zero[c];
    float v = kScaling == Scaling::divide ? d / scale[c] : d * scale[c];
    // Pre-clamp keeps the rounding trick in range; the final clamp is the reference's.
    v = min_f(max_f(v, -1.0f), hi);
    float q = (v + kRoundMagic) - kRoundMagic;
    q = min_f(max_f(q, 0.0f), max_code);
    out[c] = static_cast<uint8_t>(static_cast<int32_t>(q));
  }
}

// Row r at x + r * stride (stride >= dim); codes row-major, dim a row. `scale`: the scales
// (Scaling::divide) or their reciprocals (Scaling::multiply), as quantize_span's.
template <Scaling kScaling, typename T>
static void quantize_rows_of(const T* x, size_t rows, size_t dim, size_t stride, const float* scale,
                             const float* zero, float max_code, uint8_t* codes) {
  size_t r = 0;
#if defined(CACHEGEN_HAVE_F16C) && defined(__AVX512F__)
  if (dim == 8) {  // two rows a vector
    const Quantize16<kScaling> q16(max_code);
    const auto twice = [](const float* p) {  // (AVX512F, where broadcast_f32x8 is DQ)
      return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(p))));
    };
    const __m512 s = twice(scale), z = twice(zero);
    for (; r + 2 <= rows; r += 2) q16(widen8x2(x + r * stride, stride), s, z, codes + r * 8);
  } else if (dim % 16 == 0) {  // whole vectors a row, without quantize_span's tails
    const Quantize16<kScaling> q16(max_code);
    for (; r < rows; ++r) {
      for (size_t c = 0; c < dim; c += 16)
        q16(x + r * stride + c, _mm512_loadu_ps(scale + c), _mm512_loadu_ps(zero + c),
            codes + r * dim + c);
    }
  }
#endif
#if defined(CACHEGEN_HAVE_F16C) && defined(__AVX2__)
  if (dim == 8) {
    // Rows of 8 (head_dim 8): one vector a row, the parameters loaded once (repeating them
    // for the span below was a third of quantizing such groups).
    const Quantize8<kScaling> q8(max_code);
    const __m256 s = _mm256_loadu_ps(scale), z = _mm256_loadu_ps(zero);
    for (; r + 4 <= rows; r += 4) {
      const T* xr = x + r * stride;
      store_codes32(q8(xr, s, z), q8(xr + stride, s, z), q8(xr + 2 * stride, s, z),
                    q8(xr + 3 * stride, s, z), codes + r * 8);
    }
  }
#endif
  if (stride != dim) {  // rows apart: one at a time
    for (; r < rows; ++r)
      quantize_span<kScaling>(x + r * stride, dim, scale, zero, max_code, codes + r * dim);
    return;
  }
  if (dim < 32 && rows - r >= (64 + dim - 1) / dim) {
    // Rows too short to fill vectors (head_dim 8, say): blocks of whole rows, at least 64
    // values, as one span with the parameters repeated per row. The same operations per
    // value, so the same codes.
    constexpr size_t kBlock = 64;
    const size_t per = (kBlock + dim - 1) / dim, len = per * dim;
    float s_rep[kBlock + 32], z_rep[kBlock + 32];
    // A counter, not a division per value; not a memcpy per row either (a `rep movs` per row,
    // whose start-up cost was most of quantizing head_dim-8 groups).
    for (size_t i = 0, c = 0; i < len; ++i) {
      s_rep[i] = scale[c];
      z_rep[i] = zero[c];
      c = c + 1 == dim ? 0 : c + 1;
    }
    for (; r + per <= rows; r += per)
      quantize_span<kScaling>(x + r * dim, len, s_rep, z_rep, max_code, codes + r * dim);
  }
  for (; r < rows; ++r)
    quantize_span<kScaling>(x + r * dim, dim, scale, zero, max_code, codes + r * dim);
}
static void quantize_rows(const float* x, size_t rows, size_t dim, const float* scale,
                          const float* zero, float max_code, uint8_t* codes) {
  quantize_rows_of<Scaling::divide>(x, rows, dim, dim, scale, zero, max_code, codes);
}
static void quantize_rows_inv(const float* x, size_t rows, size_t dim, const float* inv_scale,
                              const float* zero, float max_code, uint8_t* codes) {
  quantize_rows_of<Scaling::multiply>(x, rows, dim, dim, inv_scale, zero, max_code, codes);
}
static void quantize_rows_inv_f16(const uint16_t* x, size_t rows, size_t dim, size_t stride,
                                  const float* inv_scale, const float* zero, float max_code,
                                  uint8_t* codes) {
  quantize_rows_of<Scaling::multiply>(x, rows, dim, stride, inv_scale, zero, max_code, codes);
}

// out[i] = 1.0f / x[i], IEEE division (one rounding) on every path.
static void reciprocals(const float* x, float* out, size_t n) {
  size_t i = 0;
#if defined(__AVX512F__)
  const __m512 one = _mm512_set1_ps(1.0f);
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, _mm512_div_ps(one, _mm512_loadu_ps(x + i)));
#elif defined(__AVX2__)
  const __m256 one = _mm256_set1_ps(1.0f);
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_div_ps(one, _mm256_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) out[i] = 1.0f / x[i];
}

#if defined(CACHEGEN_HAVE_F16C)
// Whether the clamp to +-65504 changes none of the values dequant_rows makes with these
// parameters: y(q) = fl(fl(q * scale) + zero) is monotone in q (each rounding is), so the
// values of codes 0 and 255 bound every code's, and a NaN fails the test. The vector loops
// then skip the clamp's two operations (a quarter of a 64-wide head's dequantization).
static bool clamp_is_identity(const float* scale, const float* zero, size_t dim) {
  // Bitwise, not &&: a loop the compiler vectorises.
  uint32_t outside = 0;
  for (size_t c = 0; c < dim; ++c) {
    const float lo = 0.0f * scale[c] + zero[c], hi = 255.0f * scale[c] + zero[c];
    outside |= static_cast<uint32_t>(!(std::fabs(lo) <= kHalfMax)) |
               static_cast<uint32_t>(!(std::fabs(hi) <= kHalfMax));
  }
  return outside == 0;
}
#endif

// Asks the cache for the line of p[i], to be written (the address as an integer: it may lie
// past the caller's buffer, where a prefetch is harmless but a pointer is not): dequant_rows asks
// for its rows' places in the next group (`rows` rows on), while it writes this group's. The
// hardware prefetchers did not bring those lines in time: a head's rows in a file's token rows lie
// a row of all heads apart (2 KiB for 8 heads of 128, a new page every other row), and even
// contiguous rows left the stores waiting (measured on an Intel Xeon with a 480 MiB L3, 1 thread: a
// file of 8 layers x 8 heads x 1024 tokens x 128 decoded into its 32 MiB buffer 23.9 -> 14.7 ms,
// the bench's 16x4096x128 decode_fp16_into 1.77-1.80 -> 1.91-1.95 G values/s; outputs that stay in
// L2 from run to run, the small models' files, unchanged within noise).
static inline void prefetch_out(const uint16_t* p, size_t i) {
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(p) + 2 * i), 1, 3);
}

// dequant_rows with the clamp (kClamp) or without it, where clamp_is_identity holds.
template <bool kClamp>
static void dequant_rows_clamped(const uint8_t* codes, size_t rows, size_t dim, const float* scale,
                                 const float* zero, uint16_t* out, size_t out_stride) {
  size_t r0 = 0;
  const size_t ahead = rows * out_stride;  // from a row to its place in the next group
#if defined(CACHEGEN_HAVE_F16C) && defined(__AVX512F__)
  if (dim == 8 && rows >= 2) {
    // Rows of 8 (head_dim 8, contiguous or in a row of all heads) two to a vector.
    const __m512i twice = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7);
    const __m512 sc = _mm512_permutexvar_ps(twice, _mm512_castps256_ps512(_mm256_loadu_ps(scale)));
    const __m512 zc = _mm512_permutexvar_ps(twice, _mm512_castps256_ps512(_mm256_loadu_ps(zero)));
    for (; r0 + 2 <= rows; r0 += 2) {
      prefetch_out(out, r0 * out_stride + ahead);
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + r0 * 8));
      const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b));
      __m512 y = _mm512_add_ps(_mm512_mul_ps(f, sc), zc);
      if constexpr (kClamp) {
        y = _mm512_min_ps(y, _mm512_set1_ps(kHalfMax));
        y = _mm512_max_ps(y, _mm512_set1_ps(-kHalfMax));
      }
      const __m256i h = _mm512_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      if (out_stride == 8) {  // contiguous rows: one store
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + r0 * 8), h);
        continue;
      }
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + r0 * out_stride),
                       _mm256_castsi256_si128(h));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + (r0 + 1) * out_stride),
                       _mm256_extracti128_si256(h, 1));
    }
  }
#elif defined(CACHEGEN_HAVE_F16C) && defined(__AVX2__)
  if (dim == 8) {  // a row a vector, the parameters loaded once
    const __m256 sc = _mm256_loadu_ps(scale), zc = _mm256_loadu_ps(zero);
    for (; r0 < rows; ++r0) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + r0 * 8));
      __m256 y = _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)), sc), zc);
      if constexpr (kClamp) {
        y = _mm256_min_ps(y, _mm256_set1_ps(kHalfMax));
        y = _mm256_max_ps(y, _mm256_set1_ps(-kHalfMax));
      }
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + r0 * out_stride),
                       _mm256_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
  }
#endif
  for (size_t r = r0; r < rows; ++r) {
    const uint8_t* in = codes + r * dim;
    uint16_t* o = out + r * out_stride;
    for (size_t c = 0; c < dim; c += 32) prefetch_out(o, ahead + c);  // a line each
    size_t c = 0;
#if defined(CACHEGEN_HAVE_F16C) && defined(__AVX512F__)
    // The same operations 16 wide (a fifth of a 64-wide head's fp16 decode ran 8 wide).
    for (; c + 16 <= dim; c += 16) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + c));
      const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b));
      __m512 y =
          _mm512_add_ps(_mm512_mul_ps(f, _mm512_loadu_ps(scale + c)), _mm512_loadu_ps(zero + c));
      if constexpr (kClamp) {
        y = _mm512_min_ps(y, _mm512_set1_ps(kHalfMax));
        y = _mm512_max_ps(y, _mm512_set1_ps(-kHalfMax));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + c),
                          _mm512_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
#endif
#if defined(CACHEGEN_HAVE_F16C)
    for (; c + 8 <= dim; c += 8) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + c));
      const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
      __m256 y =
          _mm256_add_ps(_mm256_mul_ps(f, _mm256_loadu_ps(scale + c)), _mm256_loadu_ps(zero + c));
      // Same operand order as min_f/max_f below (a NaN y becomes the bound on both paths).
      if constexpr (kClamp) {
        y = _mm256_min_ps(y, _mm256_set1_ps(kHalfMax));
        y = _mm256_max_ps(y, _mm256_set1_ps(-kHalfMax));
      }
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + c),
                       _mm256_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
#endif
    for (; c < dim; ++c) {
      const float y = static_cast<float>(in[c]) * scale[c] + zero[c];
      o[c] = half_sat(y);
    }
  }
}

#if defined(CACHEGEN_HAVE_F16C) && defined(__AVX512BW__)
// dequant_rows of rows of 8 whose codes are all below 8 (3 bits or fewer): each channel's 8
// values made once (64 halves: the loop's operations, clamped, which is the identity where
// clamp_is_identity holds), then picked by a 16-bit permute, four rows a vector: 5 operations a
// vector against the loop's 7 for half as many values (stories260K's compact-parameter decode
// into a buffer 107.7 -> 101.1 us, its dequantization's samples ~28% fewer; into its file's
// token rows, four stores a vector, ~12% fewer; AMD Zen 4 VM). False (nothing written) where
// some code is 8 or more.
static bool dequant_rows8_table(const uint8_t* codes, size_t rows, const float* scale,
                                const float* zero, uint16_t* out, size_t out_stride) {
  const size_t n = rows * 8;
  __m512i any = _mm512_setzero_si512();
  for (size_t i = 0; i < n; i += 64) {
    const __mmask64 m = n - i >= 64 ? ~__mmask64{0} : (__mmask64{1} << (n - i)) - 1;
    any = _mm512_or_si512(any, _mm512_maskz_loadu_epi8(m, codes + i));
  }
  if (_mm512_test_epi8_mask(any, _mm512_set1_epi8(static_cast<char>(0xf8))) != 0) return false;
  // Entry 8c + q: channel c's value of code q, 16 entries a conversion.
  const __m512 sc = _mm512_castps256_ps512(_mm256_loadu_ps(scale));
  const __m512 zc = _mm512_castps256_ps512(_mm256_loadu_ps(zero));
  __m256i half[4];
  for (int k = 0; k < 4; ++k) {
    const __m512i entry =
        _mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(16 * k));
    const __m512i channel = _mm512_srli_epi32(entry, 3);
    const __m512 q = _mm512_cvtepi32_ps(_mm512_and_si512(entry, _mm512_set1_epi32(7)));
    __m512 y = _mm512_add_ps(_mm512_mul_ps(q, _mm512_permutexvar_ps(channel, sc)),
                             _mm512_permutexvar_ps(channel, zc));
    y = _mm512_max_ps(_mm512_min_ps(y, _mm512_set1_ps(kHalfMax)), _mm512_set1_ps(-kHalfMax));
    half[k] = _mm512_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  const __m512i lo = _mm512_inserti64x4(_mm512_castsi256_si512(half[0]), half[1], 1);
  const __m512i hi = _mm512_inserti64x4(_mm512_castsi256_si512(half[2]), half[3], 1);
  // A 16-bit lane's channel, times 8.
  const __m512i row_base = _mm512_slli_epi16(
      _mm512_and_si512(_mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17,
                                        16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                       _mm512_set1_epi16(7)),
      3);
  const size_t ahead = rows * out_stride;  // (as dequant_rows_clamped)
  size_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    prefetch_out(out, r * out_stride + ahead);
    prefetch_out(out, (r + 2) * out_stride + ahead);
    const __m512i idx = _mm512_add_epi16(
        row_base,
        _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + r * 8))));
    const __m512i h = _mm512_permutex2var_epi16(lo, idx, hi);
    if (out_stride == 8) {
      _mm512_storeu_si512(out + r * 8, h);
      continue;
    }
    uint16_t* const o = out + r * out_stride;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o), _mm512_castsi512_si128(h));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + out_stride), _mm512_extracti32x4_epi32(h, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 2 * out_stride),
                     _mm512_extracti32x4_epi32(h, 2));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 3 * out_stride),
                     _mm512_extracti32x4_epi32(h, 3));
  }
  if (r < rows)  // the last rows: the loop's operations, clamped
    dequant_rows_clamped<true>(codes + r * 8, rows - r, 8, scale, zero, out + r * out_stride,
                               out_stride);
  return true;
}
#endif

static void dequant_rows(const uint8_t* codes, size_t rows, size_t dim, const float* scale,
                         const float* zero, uint16_t* out, size_t out_stride) {
#if defined(CACHEGEN_HAVE_F16C) && defined(__AVX512BW__)
  if (dim == 8 && rows >= 4 && dequant_rows8_table(codes, rows, scale, zero, out, out_stride))
    return;
#endif
#if defined(CACHEGEN_HAVE_F16C)
  if (clamp_is_identity(scale, zero, dim)) {
    dequant_rows_clamped<false>(codes, rows, dim, scale, zero, out, out_stride);
    return;
  }
#endif
  dequant_rows_clamped<true>(codes, rows, dim, scale, zero, out, out_stride);
}

// Rows in tiles of four and columns in tiles of 16: the four rows' 16 sums stay in registers
// over all n terms, and every basis element loaded feeds four multiply-adds.
static void basis_combine(const float* coef, size_t rows, size_t n, const float* basis, size_t len,
                          const float* base, float* out, size_t out_stride) {
  constexpr size_t kT = 16;
  size_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float* c = coef + r * n;
    size_t k0 = 0;
    for (; k0 + kT <= len; k0 += kT) {
      float a0[kT], a1[kT], a2[kT], a3[kT];
      for (size_t t = 0; t < kT; ++t) a0[t] = a1[t] = a2[t] = a3[t] = base[k0 + t] + 0.0f;
      for (size_t j = 0; j < n; ++j) {
        const float c0 = c[j], c1 = c[n + j], c2 = c[2 * n + j], c3 = c[3 * n + j];
        if (c0 == 0.0f && c1 == 0.0f && c2 == 0.0f && c3 == 0.0f) continue;
        const float* v = basis + j * len + k0;
        for (size_t t = 0; t < kT; ++t) {
          a0[t] += v[t] * c0;
          a1[t] += v[t] * c1;
          a2[t] += v[t] * c2;
          a3[t] += v[t] * c3;
        }
      }
      float* o = out + r * out_stride + k0;
      for (size_t t = 0; t < kT; ++t) {
        o[t] = a0[t];
        o[out_stride + t] = a1[t];
        o[2 * out_stride + t] = a2[t];
        o[3 * out_stride + t] = a3[t];
      }
    }
    for (; k0 < len; ++k0) {  // columns past the last whole tile
      for (size_t i = 0; i < 4; ++i) {
        float a = base[k0] + 0.0f;
        for (size_t j = 0; j < n; ++j) {
          if (c[i * n + j] != 0.0f) a += basis[j * len + k0] * c[i * n + j];
        }
        out[(r + i) * out_stride + k0] = a;
      }
    }
  }
  for (; r < rows; ++r) {
    float* o = out + r * out_stride;
    for (size_t k = 0; k < len; ++k) o[k] = base[k] + 0.0f;
    const float* c = coef + r * n;
    for (size_t j = 0; j < n; ++j) {
      if (c[j] == 0.0f) continue;
      const float* v = basis + j * len;
      for (size_t k = 0; k < len; ++k) o[k] += v[k] * c[j];
    }
  }
}

static void f32_to_f16_sat(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
#if defined(CACHEGEN_HAVE_F16C)
  for (; i + 8 <= n; i += 8) {
    __m256 y = _mm256_loadu_ps(in + i);
    y = _mm256_min_ps(y, _mm256_set1_ps(kHalfMax));
    y = _mm256_max_ps(y, _mm256_set1_ps(-kHalfMax));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
#endif
  for (; i < n; ++i) out[i] = half_sat(in[i]);
}

static void f32_to_f16(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
#if defined(CACHEGEN_HAVE_F16C)
  for (; i + 8 <= n; i += 8) {
    const __m256 y = _mm256_loadu_ps(in + i);
    const __m256 nan = _mm256_cmp_ps(y, y, _CMP_UNORD_Q);
    if (!_mm256_testz_ps(nan, nan)) break;  // NaNs: float_to_half's canonical one, below
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
#endif
  for (; i < n; ++i) out[i] = float_to_half(in[i]).bits;
}

// Each head in place, widened, rotated and rounded back a vector at a time (8 values on AVX2,
// 16 on AVX-512: adjacent pairs through a swap, the halves' pairs directly), the rest value by
// value. (Through an fp32 buffer in three passes, widening, cachegen::rope_rows and rounding
// back, it took 13-15% of a pre-RoPE level's file decode; rope_rows alone ran 4 wide with a
// tail per 8-value head.)
static void rope_f16(uint16_t* k, size_t rows, size_t n_heads, size_t head_dim, const float* cos,
                     const float* sin, size_t n_pairs, bool neox) {
#if defined(CACHEGEN_HAVE_F16C)
  const __m256 hi = _mm256_set1_ps(kHalfMax), lo = _mm256_set1_ps(-kHalfMax);
  const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);  // pair i's angle twice
  const __m256 even_negated = _mm256_castsi256_ps(
      _mm256_setr_epi32(INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0));
  const auto round_back = [&](__m256 y, uint16_t* to) {
    y = _mm256_max_ps(_mm256_min_ps(y, hi), lo);  // f32_to_f16_sat's order
    _mm_storeu_si128(reinterpret_cast<__m128i*>(to),
                     _mm256_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  };
  const auto widen = [](const uint16_t* from) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(from)));
  };
#endif
#if defined(CACHEGEN_HAVE_F16C) && defined(__AVX512F__)
  // The same 16 wide; heads of 8 values (4 adjacent pairs) two to a vector.
  const __m512 hi16 = _mm512_set1_ps(kHalfMax), lo16 = _mm512_set1_ps(-kHalfMax);
  const __m512i dup16 = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  const __m512i dup4x2 = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 0, 0, 1, 1, 2, 2, 3, 3);
  const __m512 even_negated16 = _mm512_castsi512_ps(_mm512_set1_epi64(0x80000000u));
  const auto round_back16 = [&](__m512 y, uint16_t* to) {
    y = _mm512_max_ps(_mm512_min_ps(y, hi16), lo16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(to),
                        _mm512_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  };
  // x * cc + swapped(x) * ss, the angles c and s (in their low lanes) placed by `idx`.
  const auto rotate_adjacent16 = [&](uint16_t* v, __m512 c, __m512 s, __m512i idx) {
    const __m512 x = widen16(v);
    const __m512 cc = _mm512_permutexvar_ps(idx, c);
    const __m512 ss = _mm512_castsi512_ps(_mm512_xor_si512(
        _mm512_castps_si512(_mm512_permutexvar_ps(idx, s)), _mm512_castps_si512(even_negated16)));
    round_back16(_mm512_add_ps(_mm512_mul_ps(x, cc), _mm512_mul_ps(_mm512_permute_ps(x, 0xb1), ss)),
                 v);
  };
#endif
  for (size_t r = 0; r < rows; ++r) {
    const float* c = cos + r * n_pairs;
    const float* s = sin + r * n_pairs;
    size_t h = 0;
#if defined(CACHEGEN_HAVE_F16C) && defined(__AVX512F__)
    if (!neox && head_dim == 8 && n_pairs == 4) {
      const __m512 c4 = _mm512_castps128_ps512(_mm_loadu_ps(c));
      const __m512 s4 = _mm512_castps128_ps512(_mm_loadu_ps(s));
      for (; h + 2 <= n_heads; h += 2) rotate_adjacent16(k + (r * n_heads + h) * 8, c4, s4, dup4x2);
    }
#endif
    for (; h < n_heads; ++h) {
      uint16_t* v = k + (r * n_heads + h) * head_dim;
      size_t i = 0;
#if defined(CACHEGEN_HAVE_F16C) && defined(__AVX512F__)
      if (neox) {
        for (; i + 16 <= n_pairs; i += 16) {
          const __m512 x0 = widen16(v + i), x1 = widen16(v + n_pairs + i);
          const __m512 ci = _mm512_loadu_ps(c + i), si = _mm512_loadu_ps(s + i);
          round_back16(_mm512_sub_ps(_mm512_mul_ps(x0, ci), _mm512_mul_ps(x1, si)), v + i);
          round_back16(_mm512_add_ps(_mm512_mul_ps(x0, si), _mm512_mul_ps(x1, ci)),
                       v + n_pairs + i);
        }
      } else {
        for (; i + 8 <= n_pairs; i += 8) {
          rotate_adjacent16(v + 2 * i, _mm512_castps256_ps512(_mm256_loadu_ps(c + i)),
                            _mm512_castps256_ps512(_mm256_loadu_ps(s + i)), dup16);
        }
      }
#endif
#if defined(CACHEGEN_HAVE_F16C)
      if (neox) {
        for (; i + 8 <= n_pairs; i += 8) {
          const __m256 x0 = widen(v + i), x1 = widen(v + n_pairs + i);
          const __m256 ci = _mm256_loadu_ps(c + i), si = _mm256_loadu_ps(s + i);
          round_back(_mm256_sub_ps(_mm256_mul_ps(x0, ci), _mm256_mul_ps(x1, si)), v + i);
          round_back(_mm256_add_ps(_mm256_mul_ps(x0, si), _mm256_mul_ps(x1, ci)), v + n_pairs + i);
        }
      } else {
        // y = x * (c, c) + swapped(x) * (-s, s): x0 * c + -(x1 * s) is x0 * c - x1 * s exactly,
        // and x1 * c + x0 * s the same sum in the other order.
        for (; i + 4 <= n_pairs; i += 4) {
          const __m256 x = widen(v + 2 * i);
          const __m256 cc =
              _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(c + i)), dup);
          const __m256 ss = _mm256_xor_ps(
              _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(s + i)), dup),
              even_negated);
          round_back(
              _mm256_add_ps(_mm256_mul_ps(x, cc), _mm256_mul_ps(_mm256_permute_ps(x, 0xb1), ss)),
              v + 2 * i);
        }
      }
#endif
      for (; i < n_pairs; ++i) {
        uint16_t* a = neox ? v + i : v + 2 * i;
        uint16_t* b = neox ? a + n_pairs : a + 1;
        const float x0 = half_to_float(Half{*a}), x1 = half_to_float(Half{*b});
        *a = half_sat(x0 * c[i] - x1 * s[i]);
        *b = half_sat(x0 * s[i] + x1 * c[i]);
      }
      for (size_t d = 2 * n_pairs; d < head_dim; ++d) v[d] = half_sat(half_to_float(Half{v[d]}));
    }
  }
}

}  // namespace cachegen::detail::CACHEGEN_KERNEL_NS

// channel_histograms and its helpers.
#include "quant/histogram_kernels_impl.h"

namespace cachegen::detail::CACHEGEN_KERNEL_NS {

// Compiled for the target's vectors: the check reads every code once more (with the generic
// build's 16-byte vectors 1.9% of encoding tinystories-hd64's codes, 1.2% with 64-byte ones).
static uint8_t max_byte(const uint8_t* p, size_t n) {
  uint8_t hi = 0;
  for (size_t i = 0; i < n; ++i) hi = p[i] > hi ? p[i] : hi;
  return hi;
}

// A 16-bit max, the path's vector a step (widening compares took four times as long: 4% of
// a tinystories-hd64 3-bit file encode; the generic build's 8 values a step, 3.3%).
static uint16_t max_f16_magnitude(const uint16_t* x, size_t n) {
  uint16_t top = 0;
  for (size_t i = 0; i < n; ++i) {
    const auto m = static_cast<uint16_t>(x[i] & 0x7fffu);
    top = m > top ? m : top;
  }
  return top;
}

// Internal linkage: an inline variable is a unique symbol of the shared library, which a process
// holding two builds of it (two namespaces, RTLD_LOCAL) would share: one build's code would call
// the other's kernels through a table of another layout.
static const QuantKernels kTable = {f16_to_f32,
                                    bf16_to_f32,
                                    minmax_rows,
                                    minmax_rows_first,
                                    minmax_rows_first_f16,
                                    all_finite,
                                    quantize_rows,
                                    quantize_rows_inv,
                                    quantize_rows_inv_f16,
                                    reciprocals,
                                    dequant_rows,
                                    basis_combine,
                                    f32_to_f16_sat,
                                    f32_to_f16,
                                    rope_f16,
                                    channel_histograms,
                                    present_symbols,
                                    max_byte,
                                    max_f16_magnitude};

}  // namespace cachegen::detail::CACHEGEN_KERNEL_NS
