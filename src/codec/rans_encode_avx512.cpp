// AVX-512 rANS encoders: the scalar encoder's steps, 8 lanes per vector, each lane's state in a
// 64-bit slot. Within a step of n_lanes elements every lane codes one element, so the lanes of
// a vector are independent; the scalar walk emits their words in decreasing element order at
// decreasing addresses, i.e. in increasing lane order from the lowest address, which is what a
// compress-and-store of the emitting lanes writes. The bytes are the scalar encoder's (tests
// compare the paths).
#include <immintrin.h>

#include "codec/rans.h"

namespace cachegen::detail {

namespace {

// One step of 8 lanes on their entries e (RansEncodeTables::narrow): the state's chain is
// q = floor(x / f) by a 32 x 32 -> 64 multiply, a shift, an add and a variable shift while x
// is compared with f << (32 - p), both shifted right 16 where a word is emitted, then
// x + start + q * (2^p - f). Every value stays below 2^32 (q < 2^(32-p) after
// renormalisation), so the 64-bit sums equal the scalar encoder's 32-bit ones. q comes from
// the state before renormalising: an emitting lane's floor((x >> 16) / f) is
// floor(x / f) >> 16 (floors of divisions nest), and the magic divides every x < 2^32 exactly
// (x * e < 2^32 * f <= 2^(32+L)), so the compare does not delay the multiply (-5% a symbol,
// best of 2,000 encodes of an 8-lane payload, 2.45-2.62 -> 2.30-2.49 TSC). Returns the lanes
// that emit the low 16 bits of their state before the step.
struct Step8 {
  __m512i full_v, mask13, mask12;
  __m128i renorm_shift;
  explicit Step8(int precision)
      : full_v(_mm512_set1_epi64(int64_t{1} << precision)),
        mask13(_mm512_set1_epi64(0x1fff)),
        mask12(_mm512_set1_epi64(0xfff)),
        renorm_shift(_mm_cvtsi32_si128(32 - precision)) {}
  __mmask8 operator()(__m512i& x, __m512i e) const {
    const __m512i f = _mm512_and_si512(_mm512_srli_epi64(e, 32), mask13);
    const __m512i bias = _mm512_and_si512(_mm512_srli_epi64(e, 45), mask12);
    const __mmask8 emit = _mm512_cmpge_epu64_mask(x, _mm512_sll_epi64(f, renorm_shift));
    __m512i q =
        _mm512_srlv_epi64(_mm512_add_epi64(_mm512_srli_epi64(_mm512_mul_epu32(x, e), 32), x),
                          _mm512_srli_epi64(e, 58));
    q = _mm512_mask_srli_epi64(q, emit, q, 16);
    x = _mm512_mask_srli_epi64(x, emit, x, 16);
    x = _mm512_add_epi64(_mm512_add_epi64(x, bias),
                         _mm512_mul_epu32(q, _mm512_sub_epi64(full_v, f)));
    return emit;
  }
};

}  // namespace

// 32 lanes: four vectors of 8, the entries of 16 lanes read by two 64-bit gathers indexed by
// one vector of channel * n_syms + symbol, and their words stored by one compress. (Until the
// seventeenth session this kernel kept 16 states in 32-bit lanes and read 32-bit entries and a
// double 1 / f per lane, three gathers per 16 lanes: on an AMD Zen 4 VM, where a 16-lane 32-bit
// gather costs as much as two 8-lane 64-bit ones, rANS encode of codes +5% on the synthetic set,
// the same bytes.)
size_t rans_encode_avx512(const RansEncodeTables& t, const uint8_t* symbols, size_t dim, size_t end,
                          uint32_t* x, uint16_t* words, size_t w_pos) {
  const uint64_t* const entries = t.narrow;
  const Step8 step(t.precision);
  const __m512i dim_v = _mm512_set1_epi32(static_cast<int>(dim));
  const __m512i step_v = _mm512_set1_epi32(static_cast<int>(16 % dim));
  const __m512i n_syms_v = _mm512_set1_epi32(t.n_syms);
  // Channels of the last step's upper half: element end - 16 + j is lane 16 + j.
  __m512i chan;
  {
    alignas(64) int32_t c0[16];
    for (int j = 0; j < 16; ++j) c0[j] = static_cast<int32_t>((end - 16 + j) % dim);
    chan = _mm512_load_si512(c0);
  }
  __m512i xs[4];  // lanes 8k..8k+7
  for (int k = 0; k < 4; ++k)
    xs[k] = _mm512_cvtepu32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 8 * k)));
  for (size_t i0 = end; i0 >= 32; i0 -= 32) {
    for (int half_index = 1; half_index >= 0; --half_index) {
      const size_t base = i0 - 32 + static_cast<size_t>(half_index) * 16;
      const __m512i sym =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(symbols + base)));
      const __m512i idx = _mm512_add_epi32(_mm512_mullo_epi32(chan, n_syms_v), sym);
      const __m512i e_hi = _mm512_i32gather_epi64(_mm512_extracti64x4_epi64(idx, 1), entries, 8);
      const __m512i e_lo = _mm512_i32gather_epi64(_mm512_castsi512_si256(idx), entries, 8);
      __m512i& x_hi = xs[2 * half_index + 1];
      __m512i& x_lo = xs[2 * half_index];
      const __m512i before = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi64_epi32(x_lo)),
                                                _mm512_cvtepi64_epi32(x_hi), 1);
      const unsigned emit_hi = step(x_hi, e_hi);
      const unsigned emit = step(x_lo, e_lo) | emit_hi << 8;
      const int n_emit = __builtin_popcount(emit);
      const __m256i packed =
          _mm512_cvtepi32_epi16(_mm512_maskz_compress_epi32(static_cast<__mmask16>(emit), before));
      w_pos -= static_cast<size_t>(n_emit);
      _mm256_mask_storeu_epi16(words + w_pos, static_cast<__mmask16>((1u << n_emit) - 1), packed);
      // The next 16 elements' channels: 16 fewer, modulo dim.
      chan = _mm512_sub_epi32(chan, step_v);
      chan = _mm512_mask_add_epi32(chan, _mm512_cmplt_epi32_mask(chan, _mm512_setzero_si512()),
                                   chan, dim_v);
    }
  }
  for (int k = 0; k < 4; ++k)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(x + 8 * k), _mm512_cvtepi64_epi32(xs[k]));
  return w_pos;
}

// 8-lane payloads: one step of 8 elements per vector, one 64-bit gather per step.
size_t rans_encode_avx512_lanes8(const RansEncodeTables& t, const uint8_t* symbols, size_t dim,
                                 size_t end, uint32_t* x, uint16_t* words, size_t w_pos) {
  const uint64_t* const entries = t.narrow;
  const Step8 step(t.precision);
  const auto n_syms = static_cast<int64_t>(t.n_syms);
  const __m512i wrap_v = _mm512_set1_epi64(static_cast<int64_t>(dim) * n_syms);
  const __m512i step_v = _mm512_set1_epi64(static_cast<int64_t>(8 % dim) * n_syms);
  // Table rows (channel * n_syms) of the last step: element end - 8 + j is lane j.
  __m512i row;
  {
    alignas(64) int64_t r0[8];
    for (int j = 0; j < 8; ++j) r0[j] = static_cast<int64_t>((end - 8 + j) % dim) * n_syms;
    row = _mm512_load_si512(r0);
  }
  __m512i xs = _mm512_cvtepu32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
  for (size_t i0 = end; i0 >= 8; i0 -= 8) {
    const __m512i sym =
        _mm512_cvtepu8_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(symbols + i0 - 8)));
    const __m512i e = _mm512_i64gather_epi64(_mm512_add_epi64(row, sym), entries, 8);
    const __m512i before = xs;
    const __mmask8 emit = step(xs, e);
    const int n_emit = __builtin_popcount(static_cast<unsigned>(emit));
    const __m128i packed = _mm512_cvtepi64_epi16(_mm512_maskz_compress_epi64(emit, before));
    w_pos -= static_cast<size_t>(n_emit);
    _mm_mask_storeu_epi16(words + w_pos, static_cast<__mmask8>((1u << n_emit) - 1), packed);
    row = _mm512_sub_epi64(row, step_v);
    row = _mm512_mask_add_epi64(row, _mm512_cmplt_epi64_mask(row, _mm512_setzero_si512()), row,
                                wrap_v);
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(x), _mm512_cvtepi64_epi32(xs));
  return w_pos;
}

}  // namespace cachegen::detail
