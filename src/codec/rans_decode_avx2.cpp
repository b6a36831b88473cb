// AVX2 twins of rans_decode_scalar for 32 lanes (four vectors of 8; two payloads in lockstep),
// 8 and 4 lanes. Compiled with -mavx2; only called when cachegen::simd_path() says the CPU has
// it.
#include <immintrin.h>

#include <array>
#include <cstring>

#include "codec/rans.h"
#include "codec/rans_lane_pattern.h"
#include "codec/rans_narrow_search.h"

namespace cachegen::detail {
namespace {

// For each 8-bit renormalisation mask, the permutation that moves the next popcount(mask)
// words into the lanes that need them, in lane order.
struct ExpandTable {
  alignas(32) uint32_t idx[256][8];
  ExpandTable() {
    for (int m = 0; m < 256; ++m) {
      int r = 0;
      for (int l = 0; l < 8; ++l) idx[m][l] = (m >> l & 1) ? static_cast<uint32_t>(r++) : 0;
    }
  }
};
const ExpandTable kExpand;

// 4 x 8 u32 symbols (< 256) -> 32 bytes in lane order.
inline void store_symbols32(__m256i e0, __m256i e1, __m256i e2, __m256i e3, uint8_t* out) {
  const __m256i ab = _mm256_packus_epi32(e0, e1);
  const __m256i cd = _mm256_packus_epi32(e2, e3);
  const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd),
                                                    _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), bytes);
}

// Stores the low byte of each of 8 u32 lanes (symbols < 256) as 8 bytes in lane order.
inline void store_symbols8(__m256i v, uint8_t* out) {
  const __m256i pick =
      _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1,
                       -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i bytes = _mm256_shuffle_epi8(v, pick);
  const uint64_t packed =
      static_cast<uint32_t>(_mm256_cvtsi256_si32(bytes)) |
      static_cast<uint64_t>(static_cast<uint32_t>(_mm256_extract_epi32(bytes, 4))) << 32;
  std::memcpy(out, &packed, 8);
}

// Renormalises 8 lanes: lanes below 2^16 take the next words in lane order.
inline __m256i renorm8(__m256i x, const uint16_t* words, size_t& cursor) {
  const __m256i need = _mm256_cmpeq_epi32(_mm256_srli_epi32(x, 16), _mm256_setzero_si256());
  const int m = _mm256_movemask_ps(_mm256_castsi256_ps(need));
  const __m256i w16 =
      _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(words + cursor)));
  const __m256i w = _mm256_permutevar8x32_epi32(
      w16, _mm256_load_si256(reinterpret_cast<const __m256i*>(kExpand.idx[m])));
  cursor += static_cast<size_t>(__builtin_popcount(static_cast<unsigned>(m)));
  return _mm256_blendv_epi8(x, _mm256_or_si256(_mm256_slli_epi32(x, 16), w), need);
}

// One step of 8 lanes of a slot-table alphabet: each lane's entry gathered at its channel's
// base plus its slot shifted to the channel's precision; `cursor` is the caller's (a local, or
// the state's).
inline __m256i decode8(__m256i x, const uint32_t* base, const uint32_t* shift,
                       const DecodeTables& t, __m128i p, __m256i mask, const uint16_t* words,
                       size_t& cursor, __m256i& e_out) {
  const __m256i slot = _mm256_and_si256(x, mask);
  const __m256i sh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(shift));
  const __m256i idx = _mm256_add_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(base)),
                                       _mm256_srlv_epi32(slot, sh));
  const __m256i e = _mm256_i32gather_epi32(reinterpret_cast<const int*>(t.entries.data()), idx, 4);
  const __m256i f = _mm256_sllv_epi32(
      _mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(e, 8), _mm256_set1_epi32(0xfff)),
                       _mm256_set1_epi32(1)),
      sh);
  const __m256i start = _mm256_sllv_epi32(_mm256_srli_epi32(e, 20), sh);
  x = _mm256_add_epi32(_mm256_mullo_epi32(f, _mm256_srl_epi32(x, p)),
                       _mm256_sub_epi32(slot, start));
  e_out = _mm256_and_si256(e, _mm256_set1_epi32(0xff));
  return renorm8(x, words, cursor);
}

// decode8 for lanes whose slots are their table indices (is_flat: base 0, shift 0), with the
// word cursor in the caller's local.
inline __m256i decode8_flat(__m256i x, const DecodeTables& t, __m128i p, __m256i mask,
                            const uint16_t* words, size_t& cursor, __m256i& e_out) {
  const __m256i slot = _mm256_and_si256(x, mask);
  const __m256i e = _mm256_i32gather_epi32(reinterpret_cast<const int*>(t.entries.data()), slot, 4);
  const __m256i f = _mm256_add_epi32(
      _mm256_and_si256(_mm256_srli_epi32(e, 8), _mm256_set1_epi32(0xfff)), _mm256_set1_epi32(1));
  x = _mm256_add_epi32(_mm256_mullo_epi32(f, _mm256_srl_epi32(x, p)),
                       _mm256_sub_epi32(slot, _mm256_srli_epi32(e, 20)));
  e_out = _mm256_and_si256(e, _mm256_set1_epi32(0xff));
  return renorm8(x, words, cursor);
}

// AVX2 twin of the AVX-512 search kernel (alphabets of NT + 1 <= 16 symbols): states in four
// vectors of 8, slots as two vectors of 16 u16 (vectors 0|1 and 2|3 interleaved, see
// make_threshold_pattern). Slots and starts are <= 2^12, so signed 16-bit compares serve.
template <int NT>
size_t decode_search(RansDecodeState& st, const DecodeTables& tables, size_t dim, size_t begin,
                     size_t end, uint8_t* symbols) {
  const ThresholdPattern& pattern = make_threshold_pattern(tables, dim, 8);
  if (pattern.period == 0) return begin;
  const __m128i p = _mm_cvtsi32_si128(tables.precision);
  const __m256i mask = _mm256_set1_epi32(static_cast<int>((1u << tables.precision) - 1));
  const __m256i low16 = _mm256_set1_epi32(0xffff);
  const __m256i top = _mm256_set1_epi16(static_cast<short>(1u << tables.precision));
  const __m256i one = _mm256_set1_epi16(1);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  __m256i x[4];
  for (int v = 0; v < 4; ++v)
    x[v] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(st.x + 8 * v));
  const uint16_t* const words = st.words;
  const size_t n_words = st.n_words;
  size_t cursor = st.cursor;
  size_t i = begin, step = pattern_step(begin, kMaxLanes, pattern.period);
  while (i + kMaxLanes <= end && cursor + kMaxLanes <= n_words) {
    const uint16_t* th = pattern.thresholds.data() + step * NT * kMaxLanes;
    __m256i e[4];
    for (int h = 0; h < 2; ++h) {
      __m256i& xa = x[2 * h];
      __m256i& xb = x[2 * h + 1];
      const __m256i slot = _mm256_or_si256(_mm256_and_si256(xa, mask),
                                           _mm256_slli_epi32(_mm256_and_si256(xb, mask), 16));
      const __m256i slot1 = _mm256_add_epi16(slot, one);
      __m256i lo[NT], hi[NT];
      __m256i sym = _mm256_setzero_si256();
#pragma GCC unroll 16
      for (int j = 0; j < NT; ++j) {
        const __m256i c =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(th + j * kMaxLanes + 16 * h));
        const __m256i ge = _mm256_cmpgt_epi16(slot1, c);  // slot >= c
        lo[j] = _mm256_and_si256(ge, c);
        hi[j] = _mm256_or_si256(ge, c);  // 0xffff where slot >= c: min ignores it
        sym = _mm256_sub_epi16(sym, ge);
      }
      hi[0] = _mm256_min_epu16(hi[0], top);
      reduce_interval16<NT>(lo, hi);
      const __m256i f = _mm256_sub_epi16(hi[0], lo[0]);
      const __m256i d = _mm256_sub_epi16(slot, lo[0]);
      xa = _mm256_add_epi32(_mm256_mullo_epi32(_mm256_and_si256(f, low16), _mm256_srl_epi32(xa, p)),
                            _mm256_and_si256(d, low16));
      xb = _mm256_add_epi32(_mm256_mullo_epi32(_mm256_srli_epi32(f, 16), _mm256_srl_epi32(xb, p)),
                            _mm256_srli_epi32(d, 16));
      xa = renorm8(xa, words, cursor);
      xb = renorm8(xb, words, cursor);
      e[2 * h] = _mm256_and_si256(sym, low16);
      e[2 * h + 1] = _mm256_srli_epi32(sym, 16);
    }
    // 4 x 8 u32 symbols -> 32 bytes in lane order.
    const __m256i ab = _mm256_packus_epi32(e[0], e[1]);
    const __m256i cd = _mm256_packus_epi32(e[2], e[3]);
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(symbols + i), bytes);
    i += kMaxLanes;
    if (++step == pattern.period) step = 0;
  }
  st.cursor = cursor;
  for (int v = 0; v < 4; ++v) _mm256_storeu_si256(reinterpret_cast<__m256i*>(st.x + 8 * v), x[v]);
  return i;
}

// Search kernel for 8-lane payloads (one vector of states, u32 compares): the encoder gives
// tensors of 4 K..16 K elements 8 lanes, which the 32-lane kernels cannot take. The loops are
// rans_narrow_search.h's.
template <int NT>
struct Search8Avx2 {
  struct Constants {
    __m128i p;
    __m256i mask, top, one;
    explicit Constants(int precision)
        : p(_mm_cvtsi32_si128(precision)),
          mask(_mm256_set1_epi32(static_cast<int>((1u << precision) - 1))),
          top(_mm256_set1_epi32(static_cast<int>(1u << precision))),
          one(_mm256_set1_epi32(1)) {}
  };
  // One step of 8 lanes: th holds the step's NT thresholds of 8 lanes each.
  static __m256i run(__m256i x, const uint32_t* th, const Constants& k, const uint16_t* words,
                     size_t& cursor, uint8_t* out) {
    const __m256i slot = _mm256_and_si256(x, k.mask);
    const __m256i slot1 = _mm256_add_epi32(slot, k.one);
    __m256i lo[NT], hi[NT];
    __m256i sym = _mm256_setzero_si256();
#pragma GCC unroll 16
    for (int j = 0; j < NT; ++j) {
      const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(th + j * kNarrowLanes));
      const __m256i ge = _mm256_cmpgt_epi32(slot1, c);  // slot >= c
      lo[j] = _mm256_and_si256(ge, c);
      hi[j] = _mm256_or_si256(ge, c);  // all ones where slot >= c: min ignores it
      sym = _mm256_sub_epi32(sym, ge);
    }
    hi[0] = _mm256_min_epu32(hi[0], k.top);
#pragma GCC unroll 4
    for (int w = 1; w < NT; w *= 2)
#pragma GCC unroll 8
      for (int j = 0; j + w < NT; j += 2 * w) {
        lo[j] = _mm256_max_epu32(lo[j], lo[j + w]);
        hi[j] = _mm256_min_epu32(hi[j], hi[j + w]);
      }
    x = _mm256_add_epi32(
        _mm256_mullo_epi32(_mm256_sub_epi32(hi[0], lo[0]), _mm256_srl_epi32(x, k.p)),
        _mm256_sub_epi32(slot, lo[0]));
    x = renorm8(x, words, cursor);
    store_symbols8(sym, out);
    return x;
  }
};

// N 8-lane slot-table payloads in lockstep from element 0: one payload's step waits on its
// gather (state -> slot -> gather -> state); N independent chains fill those cycles. Each
// payload has its own tables and lane pattern (equal periods: the same dim).
template <int N>
size_t slots_lockstep8(RansDecodeState* const* s, const DecodeTables* const* t, size_t dim,
                       size_t end, uint8_t* const* out) {
  thread_local LanePattern kept[N];
  for (int k = 0; k < N; ++k) {
    kept[k] = make_lane_pattern(*t[k], dim, 0, kNarrowLanes);
    if (kept[k].period == 0 || kept[k].period != kept[0].period) return 0;
  }
  const size_t period = kept[0].period;
  __m256i x[N], mask[N];
  __m128i p[N];
  const uint16_t* words[N];
  size_t cursor[N], n_words[N];
  for (int k = 0; k < N; ++k) {
    x[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s[k]->x));
    p[k] = _mm_cvtsi32_si128(t[k]->precision);
    mask[k] = _mm256_set1_epi32(static_cast<int>((1u << t[k]->precision) - 1));
    words[k] = s[k]->words;
    cursor[k] = s[k]->cursor;
    n_words[k] = s[k]->n_words;
  }
  const auto in_bounds = [&] {
    bool ok = true;
    for (int k = 0; k < N; ++k) ok = ok && cursor[k] + kNarrowLanes <= n_words[k];
    return ok;
  };
  size_t i = 0, step = 0;
  while (i + kNarrowLanes <= end && in_bounds()) {
#pragma GCC unroll 4
    for (int k = 0; k < N; ++k) {
      const uint32_t* base = kept[k].base.data() + step * kNarrowLanes;
      const uint32_t* shift = kept[k].shift.data() + step * kNarrowLanes;
      const __m256i slot = _mm256_and_si256(x[k], mask[k]);
      const __m256i sh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(shift));
      const __m256i idx = _mm256_add_epi32(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base)), _mm256_srlv_epi32(slot, sh));
      const __m256i e =
          _mm256_i32gather_epi32(reinterpret_cast<const int*>(t[k]->entries.data()), idx, 4);
      const __m256i f = _mm256_sllv_epi32(
          _mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(e, 8), _mm256_set1_epi32(0xfff)),
                           _mm256_set1_epi32(1)),
          sh);
      const __m256i start = _mm256_sllv_epi32(_mm256_srli_epi32(e, 20), sh);
      x[k] = renorm8(_mm256_add_epi32(_mm256_mullo_epi32(f, _mm256_srl_epi32(x[k], p[k])),
                                      _mm256_sub_epi32(slot, start)),
                     words[k], cursor[k]);
      store_symbols8(_mm256_and_si256(e, _mm256_set1_epi32(0xff)), out[k] + i);
    }
    i += kNarrowLanes;
    if (++step == period) step = 0;
  }
  for (int k = 0; k < N; ++k) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(s[k]->x), x[k]);
    s[k]->cursor = cursor[k];
  }
  return i;
}

// Two 32-lane slot-table payloads in lockstep from element 0 (the AVX-512 decode_slots_pair's
// twin): one payload's steps wait on their gathers and on its word cursor, the other's fill
// those cycles. Equal periods (the same dim); kFlat: both patterns flat.
template <bool kFlat>
size_t slots_pair32(RansDecodeState* const* s, const DecodeTables* const* t,
                    const LanePattern* pattern, size_t end, uint8_t* const* out) {
  __m128i p[2];
  __m256i mask[2], x[2][4];
  const uint16_t* words[2];
  size_t cursor[2];
  for (int k = 0; k < 2; ++k) {
    p[k] = _mm_cvtsi32_si128(t[k]->precision);
    mask[k] = _mm256_set1_epi32(static_cast<int>((1u << t[k]->precision) - 1));
    for (int v = 0; v < 4; ++v)
      x[k][v] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s[k]->x + 8 * v));
    words[k] = s[k]->words;
    cursor[k] = s[k]->cursor;
  }
  size_t i = 0, step = 0;
  while (i + kMaxLanes <= end && cursor[0] + kMaxLanes <= s[0]->n_words &&
         cursor[1] + kMaxLanes <= s[1]->n_words) {
#pragma GCC unroll 2
    for (int k = 0; k < 2; ++k) {
      __m256i e[4];
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        if constexpr (kFlat) {
          x[k][v] = decode8_flat(x[k][v], *t[k], p[k], mask[k], words[k], cursor[k], e[v]);
        } else {
          const size_t at = step * kMaxLanes + 8 * static_cast<size_t>(v);
          x[k][v] = decode8(x[k][v], pattern[k].base.data() + at, pattern[k].shift.data() + at,
                            *t[k], p[k], mask[k], words[k], cursor[k], e[v]);
        }
      }
      store_symbols32(e[0], e[1], e[2], e[3], out[k] + i);
    }
    i += kMaxLanes;
    if (++step == pattern[0].period) step = 0;
  }
  for (int k = 0; k < 2; ++k) {
    for (int v = 0; v < 4; ++v)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(s[k]->x + 8 * v), x[k][v]);
    s[k]->cursor = cursor[k];
  }
  return i;
}

// Whether every one of the channel's frequencies is 1 (its table is 2^t = n_syms entries, one
// a symbol).
bool all_ones(const ChannelTable& ch) {
  const size_t n = ch.freq.size();  // a multiple of 16
  if (size_t{1} << ch.t != n) return false;
  const __m256i one = _mm256_set1_epi16(1);
  __m256i differ = _mm256_setzero_si256();
  for (size_t s0 = 0; s0 < n; s0 += 16) {
    differ = _mm256_or_si256(
        differ, _mm256_xor_si256(one, _mm256_loadu_si256(
                                          reinterpret_cast<const __m256i*>(ch.freq.data() + s0))));
  }
  return _mm256_testz_si256(differ, differ);
}

}  // namespace

size_t rans_decode_avx2_8(RansDecodeState& st, const DecodeTables& tables, size_t dim, size_t begin,
                          size_t end, uint8_t* symbols) {
  if (const NarrowKernel search = narrow_search_kernel<Search8Avx2>(tables.n_syms))
    return search(st, tables, dim, begin, end, symbols);
  // Slot tables: one vector of 8 lanes, gathering each lane's entry.
  const LanePattern pattern = make_lane_pattern(tables, dim, begin, kNarrowLanes);
  if (pattern.period == 0) return begin;
  const __m128i p = _mm_cvtsi32_si128(tables.precision);
  const __m256i mask = _mm256_set1_epi32(static_cast<int>((1u << tables.precision) - 1));
  __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(st.x));
  size_t i = begin, k = 0;
  while (i + kNarrowLanes <= end && st.cursor + kNarrowLanes <= st.n_words) {
    __m256i e;
    x = decode8(x, pattern.base.data() + k * kNarrowLanes, pattern.shift.data() + k * kNarrowLanes,
                tables, p, mask, st.words, st.cursor, e);
    store_symbols8(e, symbols + i);
    i += kNarrowLanes;
    if (++k == pattern.period) k = 0;
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(st.x), x);
  return i;
}

size_t rans_decode_avx2_4(RansDecodeState& st, const DecodeTables& tables, size_t dim, size_t begin,
                          size_t end, uint8_t* symbols) {
  // Search alphabets on the 8-lane step, half its lanes idle (narrow_search); slot tables by
  // decode8's steps on a 128-bit vector (the scalar kernel's 4 lanes waited on each other
  // through the word cursor: ~15 cycles a value), whose expansion table's first four entries
  // serve 4-lane masks.
  constexpr size_t kLanes = 4;
  if (const NarrowKernel search = narrow_search_kernel<Search8Avx2, kLanes>(tables.n_syms))
    return search(st, tables, dim, begin, end, symbols);
  if (tables.uses_search()) return begin;  // no slot tables
  const LanePattern pattern = make_lane_pattern(tables, dim, begin, kLanes);
  if (pattern.period == 0) return begin;
  const __m128i p = _mm_cvtsi32_si128(tables.precision);
  const __m128i mask = _mm_set1_epi32(static_cast<int>((1u << tables.precision) - 1));
  const int* const entries = reinterpret_cast<const int*>(tables.entries.data());
  const __m128i pick = _mm_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(st.x));
  size_t i = begin, k = 0, cursor = st.cursor;
  while (i + kLanes <= end && cursor + kLanes <= st.n_words) {
    const __m128i slot = _mm_and_si128(x, mask);
    const __m128i sh =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(pattern.shift.data() + k * kLanes));
    const __m128i base =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(pattern.base.data() + k * kLanes));
    const __m128i e =
        _mm_i32gather_epi32(entries, _mm_add_epi32(base, _mm_srlv_epi32(slot, sh)), 4);
    const __m128i f =
        _mm_sllv_epi32(_mm_add_epi32(_mm_and_si128(_mm_srli_epi32(e, 8), _mm_set1_epi32(0xfff)),
                                     _mm_set1_epi32(1)),
                       sh);
    const __m128i start = _mm_sllv_epi32(_mm_srli_epi32(e, 20), sh);
    x = _mm_add_epi32(_mm_mullo_epi32(f, _mm_srl_epi32(x, p)), _mm_sub_epi32(slot, start));
    const __m128i need = _mm_cmpeq_epi32(_mm_srli_epi32(x, 16), _mm_setzero_si128());
    const int m = _mm_movemask_ps(_mm_castsi128_ps(need));
    uint64_t four;
    std::memcpy(&four, st.words + cursor, 8);
    const __m128i w = _mm_castps_si128(_mm_permutevar_ps(
        _mm_castsi128_ps(_mm_cvtepu16_epi32(_mm_cvtsi64_si128(static_cast<long long>(four)))),
        _mm_load_si128(reinterpret_cast<const __m128i*>(kExpand.idx[m]))));
    x = _mm_blendv_epi8(x, _mm_or_si128(_mm_slli_epi32(x, 16), w), need);
    cursor += static_cast<size_t>(__builtin_popcount(static_cast<unsigned>(m)));
    const uint32_t bytes = static_cast<uint32_t>(_mm_cvtsi128_si32(_mm_shuffle_epi8(e, pick)));
    std::memcpy(symbols + i, &bytes, 4);
    i += kLanes;
    if (++k == pattern.period) k = 0;
  }
  _mm_storeu_si128(reinterpret_cast<__m128i*>(st.x), x);
  st.cursor = cursor;
  return i;
}

// build_decode_tables' scalar fill with vectors: blocks of kSlotRun entries in ascending order
// of symbols, a longer run's rest by 8 entries at a time (its spill, under 8 entries, lands in
// the next present symbol's block, written after it).
void fill_slot_entries_avx2(std::span<const ChannelTable> channels, uint32_t* entries) {
  static_assert(kSlotRun == 16, "two vectors of entries per symbol");
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i one = _mm256_set1_epi32(1), zero = _mm256_setzero_si256();
  for (const ChannelTable& ch : channels) {
    const size_t n = ch.freq.size();  // a power of two above kMaxSearchSymbols
    if (all_ones(ch)) {
      // A uniform channel: entry s is symbol s, 8 a store instead of a block of 16 per symbol
      // (about half of tinystories-hd64's level-high channels are uniform).
      for (size_t s0 = 0; s0 < n; s0 += 8) {
        const __m256i sym = _mm256_add_epi32(iota, _mm256_set1_epi32(static_cast<int>(s0)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(entries + s0),
                            _mm256_or_si256(sym, _mm256_slli_epi32(sym, 20)));
      }
      entries += n;
      continue;
    }
    for (size_t s0 = 0; s0 < n; s0 += 8) {
      const __m128i f16 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ch.freq.data() + s0));
      // Eight absent symbols: nothing to write (their runs are empty; their blocks would be
      // overwritten by the symbols after them). 8-bit tables of token deltas hold few of their
      // 256 symbols (the bench's synthetic lossless planes: 41 present on average; its decode
      // 15.1-15.4 -> 14.5-14.7 ms, this fill from 16% of it to 11%).
      if (_mm_testz_si128(f16, f16)) continue;
      const __m256i f = _mm256_cvtepu16_epi32(f16);
      const __m256i c = _mm256_cvtepu16_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(ch.cum.data() + s0)));
      // pack_entry of the present symbols, 0 for absent ones.
      const __m256i sym = _mm256_add_epi32(iota, _mm256_set1_epi32(static_cast<int>(s0)));
      const __m256i packed =
          _mm256_or_si256(_mm256_or_si256(sym, _mm256_slli_epi32(_mm256_sub_epi32(f, one), 8)),
                          _mm256_slli_epi32(c, 20));
      const __m256i e = _mm256_andnot_si256(_mm256_cmpeq_epi32(f, zero), packed);
      const uint16_t* const cum = ch.cum.data() + s0;
      // In ascending order: a block spilling past its run is overwritten by the next symbols'.
      for (int k = 0; k < 8; ++k) {
        const __m256i v = _mm256_permutevar8x32_epi32(e, _mm256_set1_epi32(k));
        uint32_t* const to = entries + cum[k];
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(to), v);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + 8), v);
      }
      // Runs longer than a block: the rest within the run (the last store ends at its end).
      const __m256i longer_v = _mm256_cmpgt_epi32(f, _mm256_set1_epi32(kSlotRun));
      for (uint32_t longer =
               static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(longer_v)));
           longer != 0; longer &= longer - 1) {
        const int k = __builtin_ctz(longer);
        const __m256i v = _mm256_permutevar8x32_epi32(e, _mm256_set1_epi32(k));
        const uint32_t fk = ch.freq[s0 + static_cast<size_t>(k)];
        uint32_t* const to = entries + cum[k];
        uint32_t j = kSlotRun;
        for (; j + 8 <= fk; j += 8) _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + j), v);
        if (j < fk) _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + fk - 8), v);
      }
    }
    entries += size_t{1} << ch.t;
  }
}

size_t rans_decode_avx2(RansDecodeState& st, const DecodeTables& tables, size_t dim, size_t begin,
                        size_t end, uint8_t* symbols) {
  if (tables.uses_search()) {
    return with_thresholds(tables.n_syms, begin, [&](auto nt) {
      return decode_search<decltype(nt)::value>(st, tables, dim, begin, end, symbols);
    });
  }
  const LanePattern pattern = make_lane_pattern(tables, dim, begin);
  if (pattern.period == 0) return begin;
  const __m128i p = _mm_cvtsi32_si128(tables.precision);
  const __m256i mask = _mm256_set1_epi32(static_cast<int>((1u << tables.precision) - 1));
  __m256i x[4];
  for (int v = 0; v < 4; ++v)
    x[v] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(st.x + 8 * v));
  // The cursor through the state in memory and no flat step: alone, this kernel ran no faster
  // with the cursor in a local (1.03 G symbols/s both ways) and slower with slots_pair32's flat
  // step (0.86-0.88), unlike the pair (variants of one binary; across binaries the same code
  // moved by up to a fifth with the layout).
  size_t i = begin, k = 0;
  while (i + kMaxLanes <= end && st.cursor + kMaxLanes <= st.n_words) {
    const uint32_t* base = pattern.base.data() + k * kMaxLanes;
    const uint32_t* shift = pattern.shift.data() + k * kMaxLanes;
    __m256i e[4];
    for (int v = 0; v < 4; ++v)
      x[v] = decode8(x[v], base + 8 * v, shift + 8 * v, tables, p, mask, st.words, st.cursor, e[v]);
    store_symbols32(e[0], e[1], e[2], e[3], symbols + i);
    i += kMaxLanes;
    if (++k == pattern.period) k = 0;
  }
  for (int v = 0; v < 4; ++v) _mm256_storeu_si256(reinterpret_cast<__m256i*>(st.x + 8 * v), x[v]);
  return i;
}

size_t rans_decode_avx2_pair(RansDecodeState& a, const DecodeTables& ta, RansDecodeState& b,
                             const DecodeTables& tb, size_t dim, size_t end, uint8_t* symbols_a,
                             uint8_t* symbols_b) {
  if (ta.uses_search() || tb.uses_search()) return 0;
  const LanePattern pattern[2] = {make_lane_pattern(ta, dim, 0), make_lane_pattern(tb, dim, 0)};
  if (pattern[0].period == 0 || pattern[1].period != pattern[0].period) return 0;
  RansDecodeState* const s[2] = {&a, &b};
  const DecodeTables* const t[2] = {&ta, &tb};
  uint8_t* const out[2] = {symbols_a, symbols_b};
  return is_flat(pattern[0]) && is_flat(pattern[1]) ? slots_pair32<true>(s, t, pattern, end, out)
                                                    : slots_pair32<false>(s, t, pattern, end, out);
}

size_t rans_decode_avx2_pair4(RansDecodeState& a, const DecodeTables& ta, RansDecodeState& b,
                              const DecodeTables& tb, size_t dim, size_t end, uint8_t* symbols_a,
                              uint8_t* symbols_b) {
  return narrow_search_pair_of<Search8Avx2, 4>(a, ta, b, tb, dim, end, symbols_a, symbols_b);
}

size_t rans_decode_avx2_pair8(RansDecodeState& a, const DecodeTables& ta, RansDecodeState& b,
                              const DecodeTables& tb, size_t dim, size_t end, uint8_t* symbols_a,
                              uint8_t* symbols_b) {
  if (!ta.uses_search() && !tb.uses_search()) {
    RansDecodeState* const s[2] = {&a, &b};
    const DecodeTables* const t[2] = {&ta, &tb};
    uint8_t* const out[2] = {symbols_a, symbols_b};
    return slots_lockstep8<2>(s, t, dim, end, out);
  }
  return narrow_search_pair_of<Search8Avx2, kNarrowLanes>(a, ta, b, tb, dim, end, symbols_a,
                                                          symbols_b);
}

size_t rans_decode_avx2_slots_quad8(RansDecodeState* const* states,
                                    const DecodeTables* const* tables, size_t dim, size_t end,
                                    uint8_t* const* symbols) {
  for (int k = 0; k < 4; ++k)
    if (tables[k]->uses_search()) return 0;
  return slots_lockstep8<4>(states, tables, dim, end, symbols);
}

}  // namespace cachegen::detail
