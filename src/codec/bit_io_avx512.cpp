// The Exp-Golomb lanes kernel (BitReader::signed_exp_golomb_lanes) compiled with AVX-512 F, CD
// (VPLZCNTQ), BW and VL (see CMakeLists.txt); chosen on the AVX-512 path where the CPU has CD.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "codec/bit_io.h"

namespace cachegen::detail {
namespace {

// Up to kGroups groups of 8 readers, one reader a 64-bit lane, all at the same code: a step
// gathers each lane's 64 bits at its position (from the input's last 8 bytes where fewer are
// left: then its bits past the end are zeros), takes 4 codes from them one after the other in
// every lane, and keeps them where all 4 of every lane fit in the first 57 of those bits and in
// the input (else it stops there, with nothing of the step kept). Two or three groups side by
// side: one group's step is a chain (the gather, then four prefix counts), about half of it
// waiting.
// The reference: BitReader::signed_exp_golomb_run's take_code, four at a time.
template <int kGroups>
size_t lanes_kernel(LaneReaders& r, size_t from, size_t n) {
  constexpr int kCodes = 4;  // a step's codes per lane
  const auto m = static_cast<int>(r.n);
  __m512i base[kGroups], last[kGroups], end[kGroups], bits[kGroups][2], offset[kGroups][2];
  __m512i pos[kGroups];
  __mmask8 live[kGroups];
  for (int g = 0; g < kGroups; ++g) {
    alignas(64) uint64_t b[8] = {}, l[8] = {}, e[8] = {}, p[8] = {}, o0[8] = {}, o1[8] = {};
    alignas(64) uint64_t s0[8] = {}, s1[8] = {};
    const int have = m - 8 * g < 8 ? m - 8 * g : 8;
    live[g] = static_cast<__mmask8>((1u << have) - 1);
    for (int j = 0; j < have; ++j) {
      const size_t i = static_cast<size_t>(8 * g + j);
      b[j] = reinterpret_cast<uint64_t>(r.in[i]);
      l[j] = r.bytes[i] - 8;  // the last 8-byte load's
      e[j] = 8 * r.bytes[i];
      p[j] = r.pos[i];
      o0[j] = static_cast<uint64_t>(r.k[i][0]) + 1;
      o1[j] = static_cast<uint64_t>(r.k[i][1]) + 1;
      s0[j] = uint64_t{1} << r.k[i][0];
      s1[j] = uint64_t{1} << r.k[i][1];
    }
    base[g] = _mm512_load_si512(b);
    last[g] = _mm512_load_si512(l);
    end[g] = _mm512_load_si512(e);
    pos[g] = _mm512_load_si512(p);
    bits[g][0] = _mm512_load_si512(o0);
    bits[g][1] = _mm512_load_si512(o1);
    offset[g][0] = _mm512_load_si512(s0);
    offset[g][1] = _mm512_load_si512(s1);
  }
  // Each quadword's bytes reversed: the input is MSB first.
  const __m512i bswap = _mm512_set4_epi32(0x08090a0b, 0x0c0d0e0f, 0x00010203, 0x04050607);
  const __m512i c64 = _mm512_set1_epi64(64), c57 = _mm512_set1_epi64(57);
  const __m512i one = _mm512_set1_epi64(1);
  const __m512i lo_pairs = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
  const __m512i hi_pairs = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
  size_t i = from;
  for (; i + kCodes <= n; i += kCodes) {
    bool stop = false;
    __m512i w[kGroups], used[kGroups], room[kGroups], raw[kGroups][kCodes];
    for (int g = 0; g < kGroups; ++g) {
      // The load at byte min(pos / 8, bytes - 8), shifted by pos's distance from it (64 at the
      // end: nothing left); room = min(57, end - pos) bits.
      const __m512i byte = _mm512_min_epu64(_mm512_srli_epi64(pos[g], 3), last[g]);
      const __m512i at = _mm512_add_epi64(base[g], byte);
      w[g] = _mm512_mask_i64gather_epi64(_mm512_setzero_si512(), live[g], at, nullptr, 1);
      w[g] = _mm512_sllv_epi64(_mm512_shuffle_epi8(w[g], bswap),
                               _mm512_sub_epi64(pos[g], _mm512_slli_epi64(byte, 3)));
      room[g] = _mm512_min_epu64(c57, _mm512_sub_epi64(end[g], pos[g]));
      used[g] = _mm512_setzero_si512();
    }
    for (int c = 0; c < kCodes; ++c) {
      for (int g = 0; g < kGroups; ++g) {
        // total = 2 * zeros + order + 1 (a window of zeros: 128 and more, which never fits).
        const __m512i zeros = _mm512_lzcnt_epi64(w[g]);
        const __m512i total = _mm512_add_epi64(_mm512_add_epi64(zeros, zeros), bits[g][c & 1]);
        raw[g][c] = _mm512_srlv_epi64(w[g], _mm512_sub_epi64(c64, total));
        w[g] = _mm512_sllv_epi64(w[g], total);
        used[g] = _mm512_add_epi64(used[g], total);
      }
    }
    for (int g = 0; g < kGroups; ++g)
      stop |= _mm512_mask_cmpgt_epu64_mask(live[g], used[g], room[g]) != 0;
    if (stop) break;
    for (int g = 0; g < kGroups; ++g) {
      pos[g] = _mm512_add_epi64(pos[g], used[g]);
      // The order's offset off, then the zigzag map undone (finish_codes').
      __m512i v[kCodes];
      for (int c = 0; c < kCodes; ++c) {
        const __m512i z = _mm512_sub_epi64(raw[g][c], offset[g][c & 1]);
        v[c] = _mm512_xor_si512(_mm512_srli_epi64(z, 1),
                                _mm512_sub_epi64(_mm512_setzero_si512(), _mm512_and_si512(z, one)));
      }
      // Codes [c][lane] to each lane's 4 in a row: pairs (c0, c1) and (c2, c3) of even and odd
      // lanes, then each lane's two pairs side by side (lanes 0, 2 | 4, 6 and 1, 3 | 5, 7).
      const __m512i even01 = _mm512_unpacklo_epi64(v[0], v[1]);
      const __m512i odd01 = _mm512_unpackhi_epi64(v[0], v[1]);
      const __m512i even23 = _mm512_unpacklo_epi64(v[2], v[3]);
      const __m512i odd23 = _mm512_unpackhi_epi64(v[2], v[3]);
      const __m512i lanes[4] = {_mm512_permutex2var_epi64(even01, lo_pairs, even23),
                                _mm512_permutex2var_epi64(odd01, lo_pairs, odd23),
                                _mm512_permutex2var_epi64(even01, hi_pairs, even23),
                                _mm512_permutex2var_epi64(odd01, hi_pairs, odd23)};
      const int have = m - 8 * g < 8 ? m - 8 * g : 8;
      for (int j = 0; j < have; ++j) {
        // lanes[0]: lanes 0 | 2 (low | high half), [1]: 1 | 3, [2]: 4 | 6, [3]: 5 | 7.
        const __m512i q = lanes[(j >> 2) * 2 + (j & 1)];
        const __m256i four = (j & 2) ? _mm512_extracti64x4_epi64(q, 1) : _mm512_castsi512_si256(q);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(r.out[8 * g + j] + i), four);
      }
    }
  }
  for (int g = 0; g < kGroups; ++g) {
    alignas(64) uint64_t p[8];
    _mm512_store_si512(p, pos[g]);
    for (int j = 0; j < 8 && 8 * g + j < m; ++j) r.pos[8 * g + j] = p[j];
  }
  return i - from;
}

}  // namespace

size_t signed_exp_golomb_lanes_avx512(LaneReaders& r, size_t from, size_t n) noexcept {
  if (r.n > 16) return lanes_kernel<3>(r, from, n);
  return r.n > 8 ? lanes_kernel<2>(r, from, n) : lanes_kernel<1>(r, from, n);
}

}  // namespace cachegen::detail
