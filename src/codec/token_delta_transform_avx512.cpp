// AVX-512 twin of symbols_to_codes (token_delta_transform.cpp): the same bytes, 64 channels or
// 64 / dim rows per vector, with a group's boundary predictions made from the running sums in
// registers (a store of the last row and a reload of it would stall on store forwarding).
// Compiled with -mavx512f/bw/vl; only called when cachegen::simd_path() says the CPU has them.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "codec/token_delta_transform.h"

namespace cachegen::detail {
namespace {

inline __mmask64 first_bytes(size_t n) {
  return n >= 64 ? ~__mmask64{0} : (__mmask64{1} << n) - 1;
}

// boundary_predictions of 16 channels (lanes) from their previous codes (bytes): the new
// group's parameters at index i of k.scale / k.zero, the previous group's at i - k.dim. Lanes
// off `lanes` divide 0 by 1.
struct Params {
  const float* scale;
  const float* zero;
  size_t dim;
  __m512 top;
};
inline __m128i predict16(__m128i prev, const Params& k, size_t i, __mmask16 lanes) {
  const __m512 code = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(prev));
  const __m512 value =
      _mm512_add_ps(_mm512_mul_ps(code, _mm512_maskz_loadu_ps(lanes, k.scale + i - k.dim)),
                    _mm512_maskz_loadu_ps(lanes, k.zero + i - k.dim));
  __m512 q = _mm512_div_ps(_mm512_sub_ps(value, _mm512_maskz_loadu_ps(lanes, k.zero + i)),
                           _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), lanes, k.scale + i));
  q = _mm512_min_ps(_mm512_max_ps(q, _mm512_setzero_ps()), k.top);  // max(NaN, 0) is 0
  const __m512 magic = _mm512_set1_ps(12582912.0f);                 // round half to even
  q = _mm512_sub_ps(_mm512_add_ps(q, magic), magic);
  return _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(q));
}

// Rows of Q qwords (Q = 1, 2, 4): 8 / Q rows per vector. Their running sum is a prefix sum
// across the vector's rows (log2(8 / Q) shifts by whole rows, each with an add) plus the
// previous vector's last row, broadcast: one add and one permute on the chain per vector, and
// at a group boundary the prediction (~50 cycles of latency). N heads of one shape go side by
// side, so that their chains overlap.
template <int Q, int N>
void packed_rows(const DeltaHead* heads, size_t n_rows, size_t group_size, const uint8_t* keep,
                 int bits) {
  constexpr size_t kDim = 8 * Q, kRows = 8 / Q;
  const __m512i mask = _mm512_set1_epi8(static_cast<char>((1u << bits) - 1));
  __m512i kk;
  if constexpr (Q == 1) {
    uint64_t keep8;
    std::memcpy(&keep8, keep, 8);
    kk = _mm512_set1_epi64(static_cast<long long>(keep8));
  } else if constexpr (Q == 2) {
    kk = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(keep)));
  } else {
    kk = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(keep)));
  }
  // The last row's qwords, repeated: qword 8 - Q + i % Q.
  const __m512i last = _mm512_set_epi64(7, 7 - 1 % Q, 7 - 2 % Q, 7 - 3 % Q, 7 - 4 % Q, 7 - 5 % Q,
                                        7 - 6 % Q, 7 - 7 % Q);
  const __m512i zero = _mm512_setzero_si512();
  const __m512 top = _mm512_set1_ps(static_cast<float>((1 << bits) - 1));
  __m512i carry[N];
  for (int h = 0; h < N; ++h)
    carry[h] = _mm512_and_si512(_mm512_set1_epi8(static_cast<char>(1u << (bits - 1))), kk);
  for (size_t row0 = 0; row0 < n_rows; row0 += group_size) {
    if (row0 > 0) {
      const size_t i = row0 / group_size * kDim;
      for (int h = 0; h < N; ++h) {
        // carry holds the previous row's running sums, repeated: the delta channels' codes.
        const Params k{heads[h].scale.data(), heads[h].zero.data(), kDim, top};
        const __m512i prev = _mm512_and_si512(carry[h], mask);
        __m512i pred;
        if constexpr (Q == 1) {
          pred = _mm512_broadcastq_epi64(predict16(_mm512_castsi512_si128(prev), k, i, 0xff));
        } else if constexpr (Q == 2) {
          pred = _mm512_broadcast_i32x4(predict16(_mm512_castsi512_si128(prev), k, i, 0xffff));
        } else {
          const __m128i lo = predict16(_mm512_castsi512_si128(prev), k, i, 0xffff);
          const __m128i hi = predict16(_mm512_extracti32x4_epi32(prev, 1), k, i + 16, 0xffff);
          pred = _mm512_broadcast_i64x4(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
        }
        carry[h] = _mm512_and_si512(pred, kk);
      }
    }
    const size_t end = std::min(n_rows, row0 + group_size);
    for (size_t t = row0; t < end; t += kRows) {
      const __mmask64 lanes = first_bytes((end - t) * kDim);
      for (int h = 0; h < N; ++h) {
        const __m512i v = _mm512_maskz_loadu_epi8(lanes, heads[h].symbols + t * kDim);
        __m512i d = _mm512_and_si512(v, kk);
        if constexpr (Q == 1) d = _mm512_add_epi8(d, _mm512_alignr_epi64(d, zero, 7));
        if constexpr (Q <= 2) d = _mm512_add_epi8(d, _mm512_alignr_epi64(d, zero, 6));
        d = _mm512_add_epi8(d, _mm512_alignr_epi64(d, zero, 4));
        const __m512i acc = _mm512_add_epi8(carry[h], d);
        const __m512i code =
            _mm512_and_si512(_mm512_add_epi8(acc, _mm512_andnot_si512(kk, v)), mask);
        _mm512_mask_storeu_epi8(heads[h].codes + t * kDim, lanes, code);
        // Rows past `end` added nothing: the broadcast row is the group's last.
        carry[h] = _mm512_permutexvar_epi64(last, acc);
      }
    }
  }
}

// Any other width: 64 channels at a time, row by row (one add per row on the chain).
void column_rows(const uint8_t* in, size_t n_rows, size_t group_size, const Params& k,
                 const uint8_t* keep, int bits, uint8_t* out) {
  const size_t dim = k.dim;
  const __m512i mask = _mm512_set1_epi8(static_cast<char>((1u << bits) - 1));
  for (size_t c = 0; c < dim; c += 64) {
    const size_t w = std::min<size_t>(64, dim - c);
    const __mmask64 lanes = first_bytes(w);
    const __m512i kk = _mm512_maskz_loadu_epi8(lanes, keep + c);
    __m512i acc = _mm512_and_si512(_mm512_set1_epi8(static_cast<char>(1u << (bits - 1))), kk);
    for (size_t row0 = 0; row0 < n_rows; row0 += group_size) {
      if (row0 > 0) {
        const __m512i prev = _mm512_and_si512(acc, mask);
        const size_t i = row0 / group_size * dim + c;
        auto quarter = [&](__m128i p, size_t j) {
          const size_t n = w > 16 * j ? std::min<size_t>(16, w - 16 * j) : 0;
          return n == 0 ? _mm_setzero_si128()
                        : predict16(p, k, i + 16 * j, static_cast<__mmask16>((1u << n) - 1));
        };
        __m512i pred = _mm512_castsi128_si512(quarter(_mm512_castsi512_si128(prev), 0));
        pred = _mm512_inserti32x4(pred, quarter(_mm512_extracti32x4_epi32(prev, 1), 1), 1);
        pred = _mm512_inserti32x4(pred, quarter(_mm512_extracti32x4_epi32(prev, 2), 2), 2);
        pred = _mm512_inserti32x4(pred, quarter(_mm512_extracti32x4_epi32(prev, 3), 3), 3);
        acc = _mm512_and_si512(pred, kk);
      }
      const size_t end = std::min(n_rows, row0 + group_size);
      for (size_t t = row0; t < end; ++t) {
        const __m512i v = _mm512_maskz_loadu_epi8(lanes, in + t * dim + c);
        acc = _mm512_add_epi8(acc, _mm512_and_si512(v, kk));
        const __m512i code =
            _mm512_and_si512(_mm512_add_epi8(acc, _mm512_andnot_si512(kk, v)), mask);
        _mm512_mask_storeu_epi8(out + t * dim + c, lanes, code);
      }
    }
  }
}

// packed_rows of N heads for the row width dim (8, 16 or 32 channels).
template <int N>
void packed_heads(const DeltaHead* heads, size_t dim, size_t n_rows, size_t group_size,
                  const uint8_t* keep, int bits) {
  switch (dim) {
    case 8:
      return packed_rows<1, N>(heads, n_rows, group_size, keep, bits);
    case 16:
      return packed_rows<2, N>(heads, n_rows, group_size, keep, bits);
    default:
      return packed_rows<4, N>(heads, n_rows, group_size, keep, bits);
  }
}

}  // namespace

void compute_delta_symbols_avx512(const uint8_t* codes, size_t n_rows, size_t dim, int bits,
                                  size_t group_size, std::span<const float> scale,
                                  std::span<const float> zero, uint8_t* symbols) {
  const __m512i mask = _mm512_set1_epi8(static_cast<char>((1u << bits) - 1));
  const Params k{scale.data(), zero.data(), dim,
                 _mm512_set1_ps(static_cast<float>((1 << bits) - 1))};
  // (a - b) & mask over n bytes, 64 a step (a partial last step masked).
  const auto differences = [&](const uint8_t* a, const uint8_t* b, size_t n, uint8_t* out) {
    for (size_t j = 0; j < n; j += 64) {
      const __mmask64 m = first_bytes(n - j);
      const __m512i d =
          _mm512_sub_epi8(_mm512_maskz_loadu_epi8(m, a + j), _mm512_maskz_loadu_epi8(m, b + j));
      _mm512_mask_storeu_epi8(out + j, m, _mm512_and_si512(d, mask));
    }
  };
  for (size_t t0 = 0; t0 < n_rows; t0 += group_size) {
    // A group's first row: against the middle code, or predicted across the boundary, 16
    // channels a vector.
    const uint8_t* const row = codes + t0 * dim;
    uint8_t* const out = symbols + t0 * dim;
    if (t0 == 0) {
      const __m512i middle = _mm512_set1_epi8(static_cast<char>(1u << (bits - 1)));
      for (size_t c = 0; c < dim; c += 64) {
        const __mmask64 m = first_bytes(dim - c);
        const __m512i d = _mm512_sub_epi8(_mm512_maskz_loadu_epi8(m, row + c), middle);
        _mm512_mask_storeu_epi8(out + c, m, _mm512_and_si512(d, mask));
      }
    } else {
      const size_t i = t0 / group_size * dim;
      for (size_t c = 0; c < dim; c += 16) {
        const auto lanes = static_cast<__mmask16>(first_bytes(dim - c));
        const __m128i pred = predict16(_mm_maskz_loadu_epi8(lanes, row - dim + c), k, i + c, lanes);
        const __m128i d = _mm_sub_epi8(_mm_maskz_loadu_epi8(lanes, row + c), pred);
        _mm_mask_storeu_epi8(out + c, lanes, _mm_and_si128(d, _mm512_castsi512_si128(mask)));
      }
    }
    // Its other rows against the row above: one run over the group.
    differences(row + dim, row, (std::min(n_rows, t0 + group_size) - t0 - 1) * dim, out + dim);
  }
}

void select_deltas_avx512(const uint8_t* codes, const uint8_t* delta, const uint8_t* use_delta,
                          size_t len, size_t n, uint8_t* symbols) {
  if (len == 64) {  // rows of a divisor of 64: the mask in a register (not reloaded per block)
    const __m512i use = _mm512_loadu_si512(use_delta);
    for (size_t j = 0; j < n; j += 64) {
      const __mmask64 k = first_bytes(n - j);
      const __m512i code = _mm512_maskz_loadu_epi8(k, codes + j);
      const __m512i d = _mm512_maskz_loadu_epi8(k, delta + j);
      _mm512_mask_storeu_epi8(symbols + j, k, _mm512_ternarylogic_epi32(use, d, code, 0xca));
    }
    return;
  }
  for (size_t b = 0; b < n; b += len) {
    const size_t m = std::min(len, n - b);
    for (size_t j = 0; j < m; j += 64) {
      const __mmask64 k = first_bytes(m - j);
      const __m512i code = _mm512_maskz_loadu_epi8(k, codes + b + j);
      const __m512i d = _mm512_maskz_loadu_epi8(k, delta + b + j);
      const __m512i use = _mm512_maskz_loadu_epi8(k, use_delta + j);
      // (d & use) | (code & ~use): bitwise select, ternary-logic table 0xca (use ? d : code).
      _mm512_mask_storeu_epi8(symbols + b + j, k, _mm512_ternarylogic_epi32(use, d, code, 0xca));
    }
  }
}

void symbols_to_codes_avx512(std::span<const DeltaHead> heads, size_t n_rows, size_t dim, int bits,
                             size_t group_size, const uint8_t* keep) {
  if (dim == 8 || dim == 16 || dim == 32) {
    // Four chains at a time, then two, then one (a group boundary's prediction is a long
    // chain: stories260K's slices of five heads as 4 + 1, not 2 + 2 + 1, convert in 30% less
    // time).
    size_t h = 0;
    for (; h + 4 <= heads.size(); h += 4)
      packed_heads<4>(&heads[h], dim, n_rows, group_size, keep, bits);
    for (; h + 2 <= heads.size(); h += 2)
      packed_heads<2>(&heads[h], dim, n_rows, group_size, keep, bits);
    if (h < heads.size()) packed_heads<1>(&heads[h], dim, n_rows, group_size, keep, bits);
    return;
  }
  for (const DeltaHead& h : heads) {
    column_rows(h.symbols, n_rows, group_size,
                Params{h.scale.data(), h.zero.data(), dim,
                       _mm512_set1_ps(static_cast<float>((1 << bits) - 1))},
                keep, bits, h.codes);
  }
}

}  // namespace cachegen::detail
