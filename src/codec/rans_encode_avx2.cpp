// AVX2 rANS encoder for 32- and 8-lane payloads: the scalar encoder's steps, 8 lanes per
// vector (four vectors per 32-lane step). Within a step every lane codes one element, so a
// vector's lanes are independent; the scalar walk emits their words in decreasing element
// order at decreasing addresses, i.e. in increasing lane order up to w_pos, which is what a
// permutation of the emitting lanes to the top of the vector stored below w_pos writes (the
// slots below the emitted words are written again later or lie below the payload). The bytes
// are the scalar encoder's (RansEncode.EveryPathWritesTheScalarBytes). Compiled with -mavx2;
// only called when cachegen::simd_path() says the CPU has it.
#include <immintrin.h>

#include "codec/rans.h"

namespace cachegen::detail {
namespace {

// For each 8-bit emit mask: the lanes that emit, in lane order, moved to the top lanes.
struct CompressHighTable {
  alignas(32) int32_t idx[256][8];
  CompressHighTable() {
    for (int m = 0; m < 256; ++m) {
      int to = 8 - __builtin_popcount(static_cast<unsigned>(m));
      for (int j = 0; j < 8; ++j) idx[m][j] = 0;
      for (int j = 0; j < 8; ++j)
        if ((m >> j) & 1) idx[m][to++] = j;
    }
  }
};

template <int V>
size_t encode_steps(const RansEncodeTables& t, const uint8_t* symbols, size_t dim, size_t end,
                    uint32_t* x, uint16_t* words, size_t w_pos) {
  static const CompressHighTable compress;
  constexpr size_t kStep = 8 * static_cast<size_t>(V);
  const auto n_syms = static_cast<int32_t>(t.n_syms);
  // In locals: the word stores could alias t's fields, which were loaded again every vector.
  const int* const entries = reinterpret_cast<const int*>(t.avx2_entry);
  const int* const magics = reinterpret_cast<const int*>(t.avx2_magic);
  const __m256i wrap_v = _mm256_set1_epi32(static_cast<int32_t>(dim) * n_syms);
  const __m256i step_v = _mm256_set1_epi32(static_cast<int32_t>(kStep % dim) * n_syms);
  const __m256i full_v = _mm256_set1_epi32(1 << t.precision);
  const __m256i mask13 = _mm256_set1_epi32(0x1fff), mask12 = _mm256_set1_epi32(0xfff);
  const __m256i one = _mm256_set1_epi32(1);
  // Each 128-bit half's four low 16-bit halves into its low 8 bytes.
  const __m256i low16 = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1,
                                         0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m128i renorm_shift = _mm_cvtsi32_si128(32 - t.precision);
  // Table rows (channel * n_syms) of the last step: element end - kStep + 8v + j is lane 8v + j.
  __m256i row[V], xs[V];
  for (int v = 0; v < V; ++v) {
    alignas(32) int32_t r0[8];
    for (int j = 0; j < 8; ++j)
      r0[j] = static_cast<int32_t>((end - kStep + 8 * static_cast<size_t>(v) + j) % dim) * n_syms;
    row[v] = _mm256_load_si256(reinterpret_cast<const __m256i*>(r0));
    xs[v] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 8 * v));
  }
  for (size_t i0 = end; i0 >= kStep; i0 -= kStep) {
    for (int v = V - 1; v >= 0; --v) {
      const size_t base = i0 - kStep + 8 * static_cast<size_t>(v);
      const __m256i sym =
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(symbols + base)));
      const __m256i idx = _mm256_add_epi32(row[v], sym);
      const __m256i e = _mm256_i32gather_epi32(entries, idx, 4);
      const __m256i m = _mm256_i32gather_epi32(magics, idx, 4);
      const __m256i f = _mm256_and_si256(e, mask13);
      // Renormalise: x >= f << (32 - p), i.e. x >> (32 - p) > f - 1 (both below 2^13).
      __m256i s = xs[v];
      const __m256i emit =
          _mm256_cmpgt_epi32(_mm256_srl_epi32(s, renorm_shift), _mm256_sub_epi32(f, one));
      const auto mask = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(emit)));
      const __m256i moved = _mm256_permutevar8x32_epi32(
          s, _mm256_load_si256(reinterpret_cast<const __m256i*>(compress.idx[mask])));
      const __m256i packed = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(moved, low16), 0x08);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(words + w_pos - 8),
                       _mm256_castsi256_si128(packed));
      w_pos -= static_cast<size_t>(__builtin_popcount(mask));
      s = _mm256_blendv_epi8(s, _mm256_srli_epi32(s, 16), emit);
      // q = floor(x / f) = (hi32(x * (m - 2^32)) + x) >> L (see RansEncodeTables), the 33-bit
      // sum as (h + ((x - h) >> 1)) >> (L - 1); f = 1 (L = 0) gives q = x.
      const __m256i h_even = _mm256_srli_epi64(_mm256_mul_epu32(s, m), 32);
      const __m256i h_odd = _mm256_mul_epu32(_mm256_srli_epi64(s, 32), _mm256_srli_epi64(m, 32));
      const __m256i h = _mm256_blend_epi32(h_even, h_odd, 0xaa);
      __m256i q =
          _mm256_srlv_epi32(_mm256_add_epi32(h, _mm256_srli_epi32(_mm256_sub_epi32(s, h), 1)),
                            _mm256_srli_epi32(e, 25));
      q = _mm256_blendv_epi8(q, s, _mm256_cmpeq_epi32(f, one));
      // x' = x + start + q * (2^p - f), modulo 2^32 like the scalar encoder.
      const __m256i bias = _mm256_and_si256(_mm256_srli_epi32(e, 13), mask12);
      xs[v] = _mm256_add_epi32(_mm256_add_epi32(s, bias),
                               _mm256_mullo_epi32(q, _mm256_sub_epi32(full_v, f)));
      // The next step's rows: kStep elements fewer, modulo dim.
      const __m256i r = _mm256_sub_epi32(row[v], step_v);
      row[v] = _mm256_add_epi32(
          r, _mm256_and_si256(_mm256_cmpgt_epi32(_mm256_setzero_si256(), r), wrap_v));
    }
  }
  for (int v = 0; v < V; ++v) _mm256_storeu_si256(reinterpret_cast<__m256i*>(x + 8 * v), xs[v]);
  return w_pos;
}

}  // namespace

size_t rans_encode_avx2(const RansEncodeTables& t, const uint8_t* symbols, size_t dim, size_t end,
                        int n_lanes, uint32_t* x, uint16_t* words, size_t w_pos) {
  return n_lanes == kMaxLanes ? encode_steps<4>(t, symbols, dim, end, x, words, w_pos)
                              : encode_steps<1>(t, symbols, dim, end, x, words, w_pos);
}

}  // namespace cachegen::detail
