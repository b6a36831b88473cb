// AVX-512 twin of rans_decode_scalar for 32 lanes (two vectors of 16). Compiled with
// -mavx512f/bw/vl; only called when cachegen::simd_path() says the CPU has them.
#include <immintrin.h>

#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "codec/rans.h"
#include "codec/rans_lane_pattern.h"
#include "codec/rans_narrow_search.h"

namespace cachegen::detail {
namespace {

// Renormalises 16 lanes: lanes below 2^16 take the next words in lane order. The cursor is
// a local of the caller: kept in st, every symbol store (uint8_t aliases everything) would
// force it through memory on the loop's critical path.
inline __m512i renorm16(__m512i x, const uint16_t* words, size_t& cursor) {
  const __mmask16 renorm =
      _mm512_cmplt_epu32_mask(x, _mm512_set1_epi32(static_cast<int>(kRansLow)));
  const __m512i w16 =
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(words + cursor)));
  const __m512i w = _mm512_maskz_expand_epi32(renorm, w16);
  cursor += static_cast<size_t>(__builtin_popcount(renorm));
  return _mm512_mask_mov_epi32(x, renorm, _mm512_or_si512(_mm512_slli_epi32(x, 16), w));
}

inline __m512i decode16(__m512i x, const uint32_t* base, const uint32_t* shift,
                        const DecodeTables& t, __m128i p, __m512i mask, const uint16_t* words,
                        size_t& cursor, uint8_t* out) {
  const __m512i slot = _mm512_and_si512(x, mask);
  const __m512i sh = _mm512_loadu_si512(shift);
  const __m512i idx = _mm512_add_epi32(_mm512_loadu_si512(base), _mm512_srlv_epi32(slot, sh));
  const __m512i e = _mm512_i32gather_epi32(idx, t.entries.data(), 4);
  const __m512i f = _mm512_sllv_epi32(
      _mm512_add_epi32(_mm512_and_si512(_mm512_srli_epi32(e, 8), _mm512_set1_epi32(0xfff)),
                       _mm512_set1_epi32(1)),
      sh);
  const __m512i start = _mm512_sllv_epi32(_mm512_srli_epi32(e, 20), sh);
  x = _mm512_add_epi32(_mm512_mullo_epi32(f, _mm512_srl_epi32(x, p)),
                       _mm512_sub_epi32(slot, start));
  x = renorm16(x, words, cursor);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(e));
  return x;
}

// decode16 for lanes whose slots are their table indices (base 0, shift 0).
inline __m512i decode16_flat(__m512i x, const DecodeTables& t, __m128i p, __m512i mask,
                             const uint16_t* words, size_t& cursor, uint8_t* out) {
  const __m512i slot = _mm512_and_si512(x, mask);
  const __m512i e = _mm512_i32gather_epi32(slot, t.entries.data(), 4);
  const __m512i f = _mm512_add_epi32(
      _mm512_and_si512(_mm512_srli_epi32(e, 8), _mm512_set1_epi32(0xfff)), _mm512_set1_epi32(1));
  x = _mm512_add_epi32(_mm512_mullo_epi32(f, _mm512_srl_epi32(x, p)),
                       _mm512_sub_epi32(slot, _mm512_srli_epi32(e, 20)));
  x = renorm16(x, words, cursor);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(e));
  return x;
}

// The search kernels' lanes (search_interval below): the vector, mask and threshold element
// types and their operations.
struct Lanes32x16 {  // 32 lanes of u16 in a zmm
  using Vec = __m512i;
  using Mask = __mmask32;
  using Elem = uint16_t;
  static Vec load(const Elem* p) { return _mm512_loadu_si512(p); }
  static Vec blend(Mask m, Vec a, Vec b) { return _mm512_mask_blend_epi16(m, a, b); }
  static Mask ge(Vec a, Vec b) { return _mm512_cmpge_epu16_mask(a, b); }
  static Vec mov(Vec src, Mask m, Vec a) { return _mm512_mask_mov_epi16(src, m, a); }
  static Vec add(Vec a, Mask m, int v) {
    return _mm512_mask_add_epi16(a, m, a, _mm512_set1_epi16(static_cast<short>(v)));
  }
  static Vec zero() { return _mm512_setzero_si512(); }
};
// Lanes of u16 (16: two 8-lane payloads packed, thresholds read as u32 pairs) or of u32 (8) in
// a ymm.
template <int kBits>
struct LanesYmm {
  static_assert(kBits == 16 || kBits == 32);
  using Vec = __m256i;
  using Mask = std::conditional_t<kBits == 16, __mmask16, __mmask8>;
  using Elem = uint32_t;
  static Vec load(const Elem* p) { return _mm256_loadu_si256(reinterpret_cast<const Vec*>(p)); }
  static Vec blend(Mask m, Vec a, Vec b) {
    if constexpr (kBits == 16) return _mm256_mask_blend_epi16(m, a, b);
    return _mm256_mask_blend_epi32(m, a, b);
  }
  static Mask ge(Vec a, Vec b) {
    if constexpr (kBits == 16) return _mm256_cmpge_epu16_mask(a, b);
    return _mm256_cmpge_epu32_mask(a, b);
  }
  static Vec mov(Vec src, Mask m, Vec a) {
    if constexpr (kBits == 16) return _mm256_mask_mov_epi16(src, m, a);
    return _mm256_mask_mov_epi32(src, m, a);
  }
  static Vec add(Vec a, Mask m, int v) {
    if constexpr (kBits == 16)
      return _mm256_mask_add_epi16(a, m, a, _mm256_set1_epi16(static_cast<short>(v)));
    return _mm256_mask_add_epi32(a, m, a, _mm256_set1_epi32(v));
  }
  static Vec zero() { return _mm256_setzero_si256(); }
};
// The symbol interval of each lane's slot, for the search kernels: the symbol is the count of
// the lane's thresholds c_0 <= ... <= c_{NT-1} (cumulative starts, equal where a symbol is
// absent) that are <= slot, so its bits come from the top by bisection: at bit b the lane
// compares with c at its prefix + 2^b - 1, chosen from the 2^(L-1-b) candidates by the bits
// found so far (a blend tree), and the compare narrows [lo, hi) from [0, top). log2(NT + 1)
// compares and NT - log2(NT + 1) blends instead of a compare, a masked load or move, an add and
// a blend per threshold (or max/min trees): the kernels are bound by uops (3-bit alphabets'
// file decode +4-8%, 4-bit +23-26%). th: threshold j's vector at th + j * stride elements.
template <class Ln, int NT>
inline void search_interval(typename Ln::Vec slot, const typename Ln::Elem* th, size_t stride,
                            typename Ln::Vec top, typename Ln::Vec& lo, typename Ln::Vec& hi,
                            typename Ln::Vec& sym) {
  constexpr int L = NT == 1 ? 1 : NT == 3 ? 2 : NT == 7 ? 3 : 4;
  static_assert((1 << L) - 1 == NT);
  lo = Ln::zero(), hi = top, sym = Ln::zero();
  typename Ln::Mask bit[L];  // bit[b]: the symbols' bit b
#pragma GCC unroll 4
  for (int b = L - 1; b >= 0; --b) {
    // Candidates k * 2^(b+1) + 2^b - 1 for k < 2^(L-1-b), k's bits being bit[L-1..b+1]:
    // folded by k's lowest bit (bit[b + 1]) first.
    typename Ln::Vec cand[1 << (L - 1)];
    const int n_cand = 1 << (L - 1 - b);
#pragma GCC unroll 8
    for (int c = 0; c < n_cand; ++c)
      cand[c] = Ln::load(th + (c * (2 << b) + (1 << b) - 1) * stride);
    // (No unroll pragmas here: at b = L - 1 these loops run no step, and GCC -O1 warns that it
    // ignores their annotations. Once the b loop is unrolled their counts are constants.)
    for (int level = b + 1, w = n_cand; level < L; ++level, w /= 2)
      for (int c = 0; c < w / 2; ++c) cand[c] = Ln::blend(bit[level], cand[2 * c], cand[2 * c + 1]);
    bit[b] = Ln::ge(slot, cand[0]);
    lo = Ln::mov(lo, bit[b], cand[0]);
    hi = Ln::mov(cand[0], bit[b], hi);
    sym = Ln::add(sym, bit[b], 1 << b);
  }
}

// Search kernel for alphabets of NT + 1 <= 16 symbols: all 32 slots as one vector of u16,
// compared against the lanes' cumulative starts (no table lookups, no gathers).
struct SearchConstants {
  __m128i p;
  __m512i mask, low16, top;
  SearchConstants() = default;
  explicit SearchConstants(int precision)
      : p(_mm_cvtsi32_si128(precision)),
        mask(_mm512_set1_epi32(static_cast<int>((1u << precision) - 1))),
        low16(_mm512_set1_epi32(0xffff)),
        top(_mm512_set1_epi16(static_cast<short>(1u << precision))) {}
};

// One step of 32 lanes (states x0 = lanes 0..15, x1 = lanes 16..31).
template <int NT>
inline void search_step(__m512i& x0, __m512i& x1, const uint16_t* th, const SearchConstants& k,
                        const uint16_t* words, size_t& cursor, uint8_t* out) {
  // Lanes 0..15 in the even u16 positions, lanes 16..31 in the odd ones.
  const __m512i slot = _mm512_or_si512(_mm512_and_si512(x0, k.mask),
                                       _mm512_slli_epi32(_mm512_and_si512(x1, k.mask), 16));
  __m512i lo, hi, sym;
  search_interval<Lanes32x16, NT>(slot, th, kMaxLanes, k.top, lo, hi, sym);
  const __m512i f = _mm512_sub_epi16(hi, lo);
  const __m512i d = _mm512_sub_epi16(slot, lo);  // slot - start, < f
  x0 = _mm512_add_epi32(_mm512_mullo_epi32(_mm512_and_si512(f, k.low16), _mm512_srl_epi32(x0, k.p)),
                        _mm512_and_si512(d, k.low16));
  x1 = _mm512_add_epi32(_mm512_mullo_epi32(_mm512_srli_epi32(f, 16), _mm512_srl_epi32(x1, k.p)),
                        _mm512_srli_epi32(d, 16));
  x0 = renorm16(x0, words, cursor);
  x1 = renorm16(x1, words, cursor);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(sym));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16),
                   _mm512_cvtepi32_epi8(_mm512_srli_epi32(sym, 16)));
}

template <int NT>
size_t decode_search(RansDecodeState& st, const DecodeTables& tables, size_t dim, size_t begin,
                     size_t end, uint8_t* symbols) {
  const ThresholdPattern& pattern = make_threshold_pattern(tables, dim, 16);
  if (pattern.period == 0) return begin;
  const SearchConstants k(tables.precision);
  __m512i x0 = _mm512_loadu_si512(st.x);
  __m512i x1 = _mm512_loadu_si512(st.x + 16);
  const uint16_t* const words = st.words;
  const size_t n_words = st.n_words;
  size_t cursor = st.cursor;
  size_t i = begin, step = pattern_step(begin, kMaxLanes, pattern.period);
  while (i + kMaxLanes <= end && cursor + kMaxLanes <= n_words) {
    search_step<NT>(x0, x1, pattern.thresholds.data() + step * NT * kMaxLanes, k, words, cursor,
                    symbols + i);
    i += kMaxLanes;
    if (++step == pattern.period) step = 0;
  }
  st.cursor = cursor;
  _mm512_storeu_si512(st.x, x0);
  _mm512_storeu_si512(st.x + 16, x1);
  return i;
}

// f(integral_constant<size_t, w>) for w = 0..N-1, written out: arrays indexed only by these
// constants stay in registers (states, cursors, constants), where a loop's index would keep them
// in memory, and every symbol store (uint8_t aliases everything) would reload what lies there.
template <size_t N, typename F>
inline void unrolled(F&& f) {
  [&]<size_t... W>(std::index_sequence<W...>) {
    (f(std::integral_constant<size_t, W>{}), ...);
  }
  (std::make_index_sequence<N>{});
}

// N 32-lane payloads in lockstep from element 0: their steps are independent, so the core
// overlaps them. step(x0, x1, which, k, words, cursor, i) decodes step k of the pattern (period
// `period`, shared: all start at element 0) at element i of payload `which`. kUnrolled: the
// payloads' steps written out, every access by a constant index, which keeps the states in
// registers (tinystories-hd64's fused decode, four search payloads: +6%; its 3-bit file decode
// +3.5%); otherwise a loop over the payloads, states in memory — faster for the slot-table
// kernels, bound by their gathers (tinystories-hd64's level-high file decode 4% slower
// unrolled; AMD Zen 4 VM).
template <size_t N, bool kUnrolled, typename Step>
size_t lockstep32(RansDecodeState* const* s, size_t end, size_t period, Step&& step) {
  const auto each = [](auto&& f) {
    if constexpr (kUnrolled) {
      unrolled<N>(f);
    } else {
      for (size_t w = 0; w < N; ++w) f(w);
    }
  };
  __m512i x[N][2];
  const uint16_t* words[N];
  size_t cursor[N];
  each([&](auto w) {
    x[w][0] = _mm512_loadu_si512(s[w]->x);
    x[w][1] = _mm512_loadu_si512(s[w]->x + 16);
    words[w] = s[w]->words;
    cursor[w] = s[w]->cursor;
  });
  const auto room = [&] {
    bool ok = true;
    each([&](auto w) { ok = ok && cursor[w] + kMaxLanes <= s[w]->n_words; });
    return ok;
  };
  size_t i = 0, k = 0;
  while (i + kMaxLanes <= end && room()) {
    each([&](auto w) { step(x[w][0], x[w][1], w, k, words[w], cursor[w], i); });
    i += kMaxLanes;
    if (++k == period) k = 0;
  }
  each([&](auto w) {
    s[w]->cursor = cursor[w];
    _mm512_storeu_si512(s[w]->x, x[w][0]);
    _mm512_storeu_si512(s[w]->x + 16, x[w][1]);
  });
  return i;
}

// Search alphabets (the same size) of N payloads, each with its own tables. Two payloads in
// lockstep decode 1.58x as fast as one after the other (tinystories-hd64's fused decode, the
// rANS part); four instead of two pairs: its 3-bit file decode +6% (AMD Zen 4 VM).
template <int NT, size_t N>
size_t decode_search_lockstep(RansDecodeState* const* s, const DecodeTables* const* t, size_t dim,
                              size_t end, uint8_t* const* out) {
  static_assert(N <= 4, "make_threshold_pattern keeps four patterns per thread");
  const ThresholdPattern* p[N];
  SearchConstants k[N];
  for (size_t w = 0; w < N; ++w) {
    p[w] = &make_threshold_pattern(*t[w], dim, 16);
    if (p[w]->period == 0 || p[w]->period != p[0]->period) return 0;
    k[w] = SearchConstants(t[w]->precision);
  }
  return lockstep32<N, true>(s, end, p[0]->period,
                             [&](__m512i& x0, __m512i& x1, size_t w, size_t step,
                                 const uint16_t* words, size_t& cursor, size_t i) {
                               search_step<NT>(x0, x1,
                                               p[w]->thresholds.data() + step * NT * kMaxLanes,
                                               k[w], words, cursor, out[w] + i);
                             });
}

template <size_t N>
size_t decode_search_lockstep(RansDecodeState* const* s, const DecodeTables* const* t, size_t dim,
                              size_t end, uint8_t* const* out) {
  for (size_t w = 1; w < N; ++w)
    if (t[w]->n_syms != t[0]->n_syms) return 0;
  return with_thresholds(t[0]->n_syms, size_t{0}, [&](auto nt) {
    return decode_search_lockstep<decltype(nt)::value, N>(s, t, dim, end, out);
  });
}

// Slot-table alphabets of N payloads: one payload's step waits on its gathers and on the word
// cursor; the others' steps fill that time. (Pairs only: four 32-lane payloads in lockstep made
// tinystories-hd64's level-high file decode 7% slower on an AMD Zen 4 VM, its gathers' throughput
// the bound.)
template <size_t N>
size_t decode_slots_lockstep(RansDecodeState* const* st, const DecodeTables* const* t, size_t dim,
                             size_t end, uint8_t* const* out) {
  LanePattern p[N];
  __m128i shift[N];
  __m512i mask[N];
  bool flat = true;
  for (size_t w = 0; w < N; ++w) {
    if (t[w]->uses_search()) return 0;
    p[w] = make_lane_pattern(*t[w], dim, 0);
    if (p[w].period == 0 || p[w].period != p[0].period) return 0;
    shift[w] = _mm_cvtsi32_si128(t[w]->precision);
    mask[w] = _mm512_set1_epi32(static_cast<int>((1u << t[w]->precision) - 1));
    flat = flat && is_flat(p[w]);
  }
  if (flat) {
    return lockstep32<N, false>(
        st, end, 1,
        [&](__m512i& x0, __m512i& x1, size_t w, size_t, const uint16_t* words, size_t& cursor,
            size_t i) {
          x0 = decode16_flat(x0, *t[w], shift[w], mask[w], words, cursor, out[w] + i);
          x1 = decode16_flat(x1, *t[w], shift[w], mask[w], words, cursor, out[w] + i + 16);
        });
  }
  return lockstep32<N, false>(st, end, p[0].period,
                              [&](__m512i& x0, __m512i& x1, size_t w, size_t step,
                                  const uint16_t* words, size_t& cursor, size_t i) {
                                const uint32_t* base = p[w].base.data() + step * kMaxLanes;
                                const uint32_t* sh = p[w].shift.data() + step * kMaxLanes;
                                x0 = decode16(x0, base, sh, *t[w], shift[w], mask[w], words, cursor,
                                              out[w] + i);
                                x1 = decode16(x1, base + 16, sh + 16, *t[w], shift[w], mask[w],
                                              words, cursor, out[w] + i + 16);
                              });
}

// Renormalises 8 lanes with a mask compare and an expand: lanes below `low` take the next
// words in lane order.
inline __m256i renorm8(__m256i x, __m256i low, const uint16_t* words, size_t& cursor) {
  const __mmask8 renorm = _mm256_cmplt_epu32_mask(x, low);
  const __m256i w16 =
      _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(words + cursor)));
  cursor += static_cast<size_t>(__builtin_popcount(renorm));
  return _mm256_mask_mov_epi32(
      x, renorm, _mm256_or_si256(_mm256_slli_epi32(x, 16), _mm256_maskz_expand_epi32(renorm, w16)));
}

// The 8-lane search kernel with AVX-512VL masks: one ymm of states, renormalised by a mask
// compare and an expand instead of AVX2's movemask and permutation table (a shorter chain).
// The loops are rans_narrow_search.h's.
template <int NT>
struct Search8Avx512 {
  struct Constants {
    __m128i p;
    __m256i mask, top, low;
    explicit Constants(int precision)
        : p(_mm_cvtsi32_si128(precision)),
          mask(_mm256_set1_epi32(static_cast<int>((1u << precision) - 1))),
          top(_mm256_set1_epi32(static_cast<int>(1u << precision))),
          low(_mm256_set1_epi32(static_cast<int>(kRansLow))) {}
  };
  // One step of 8 lanes: th holds the step's NT thresholds of 8 lanes each.
  static __m256i run(__m256i x, const uint32_t* th, const Constants& k, const uint16_t* words,
                     size_t& cursor, uint8_t* out) {
    const __m256i slot = _mm256_and_si256(x, k.mask);
    __m256i lo, hi, sym;
    search_interval<LanesYmm<32>, NT>(slot, th, kNarrowLanes, k.top, lo, hi, sym);
    x = _mm256_add_epi32(_mm256_mullo_epi32(_mm256_sub_epi32(hi, lo), _mm256_srl_epi32(x, k.p)),
                         _mm256_sub_epi32(slot, lo));
    x = renorm8(x, k.low, words, cursor);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm256_cvtepi32_epi8(sym));
    return x;
  }
};

// Whether two payloads' search patterns step together: one period, one alphabet.
bool lockstep_patterns(const ThresholdPattern32& a, const ThresholdPattern32& b) {
  return a.period != 0 && b.period == a.period && a.thresholds.size() == b.thresholds.size();
}

// Four to ten 8-lane search payloads in lockstep, two per ymm: a pair's slots packed as 16 u16
// (the first payload's lane l in the low half of 32-bit lane l, the second's in the high half),
// as the 32-lane kernel packs its halves, so that the search costs one payload's uops for two.
// Two unpacked payloads were bound by uops (~60 per 8-lane step each), one packed pair by its
// chain; two packed pairs in flight still left the core waiting on their chains: a chunk's five
// layers as five pairs take 0.86 of the time of two quads and a pair (stories260K's 3-bit file
// decode, AMD Zen 4 VM), four pairs and a pair 0.88; past four pairs the rANS part's cost a
// symbol no longer falls. (Four payloads packed in one 32-lane zmm step, two such chains: 1.05x
// four ymm pairs' time there.) Each payload has its own tables and precision.
struct PackedPair8 {
  std::vector<uint32_t> thresholds;  // [period][NT][8 lanes]: first | second << 16
  size_t period = 0;
  struct Constants {
    __m128i p_first, p_second;
    __m256i mask, top;  // per half
  } k;
  // Interleaves two payloads' patterns (false where their periods differ).
  bool build(const ThresholdPattern32& a, const ThresholdPattern32& b, int precision_a,
             int precision_b) {
    if (!lockstep_patterns(a, b)) return false;
    period = a.period;
    thresholds.resize(a.thresholds.size());
    for (size_t i = 0; i < thresholds.size(); ++i)
      thresholds[i] = a.thresholds[i] | (b.thresholds[i] << 16);
    k.p_first = _mm_cvtsi32_si128(precision_a);
    k.p_second = _mm_cvtsi32_si128(precision_b);
    k.mask = _mm256_set1_epi32(
        static_cast<int>(((1u << precision_a) - 1) | (((1u << precision_b) - 1) << 16)));
    k.top = _mm256_set1_epi32(static_cast<int>((1u << precision_a) | ((1u << precision_b) << 16)));
    return true;
  }
};

// One step of a packed pair: th holds the step's NT thresholds of 16 u16 each.
template <int NT>
__attribute__((always_inline)) inline void packed_pair_step(
    __m256i& xa, __m256i& xb, const uint32_t* th, const PackedPair8::Constants& k,
    const uint16_t* words_a, size_t& cursor_a, const uint16_t* words_b, size_t& cursor_b,
    uint8_t* out_a, uint8_t* out_b) {
  const __m256i low16 = _mm256_set1_epi32(0xffff);
  const __m256i slot = _mm256_and_si256(
      _mm256_or_si256(_mm256_and_si256(xa, low16), _mm256_slli_epi32(xb, 16)), k.mask);
  __m256i lo, hi, sym;
  search_interval<LanesYmm<16>, NT>(slot, th, kNarrowLanes, k.top, lo, hi, sym);
  const __m256i f = _mm256_sub_epi16(hi, lo);
  const __m256i d = _mm256_sub_epi16(slot, lo);  // slot - start, < f
  const __m256i low = _mm256_set1_epi32(static_cast<int>(kRansLow));
  xa = _mm256_add_epi32(
      _mm256_mullo_epi32(_mm256_and_si256(f, low16), _mm256_srl_epi32(xa, k.p_first)),
      _mm256_and_si256(d, low16));
  xb = _mm256_add_epi32(
      _mm256_mullo_epi32(_mm256_srli_epi32(f, 16), _mm256_srl_epi32(xb, k.p_second)),
      _mm256_srli_epi32(d, 16));
  xa = renorm8(xa, low, words_a, cursor_a);
  xb = renorm8(xb, low, words_b, cursor_b);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out_a), _mm256_cvtepi32_epi8(sym));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out_b),
                   _mm256_cvtepi32_epi8(_mm256_srli_epi32(sym, 16)));
}

template <int NT, size_t P>
size_t search8_packed(RansDecodeState* const* s, const DecodeTables* const* t, size_t dim,
                      size_t end, uint8_t* const* out) {
  thread_local PackedPair8 kept[5];
  static_assert(P <= 5);
  // Each pattern reference stays valid until the fourth cache miss after it.
  for (size_t q = 0; q < P; ++q) {
    const ThresholdPattern32& pa = make_narrow_pattern(*t[2 * q], dim);
    const ThresholdPattern32& pb = make_narrow_pattern(*t[2 * q + 1], dim);
    if (!kept[q].build(pa, pb, t[2 * q]->precision, t[2 * q + 1]->precision)) return 0;
  }
  const size_t period = kept[0].period;
  for (size_t q = 0; q < P; ++q) {
    if (kept[q].period != period || kept[q].thresholds.size() != period * NT * kNarrowLanes)
      return 0;
  }
  // Every per-payload value in a local indexed by constants only (unrolled): with the loops
  // over payloads kept, states and cursors lay in memory and kept's fields were loaded again
  // every step (stories260K's file decode 125.8-130.2 -> 111.8-114.4 us on an AMD Zen 4 VM).
  const auto each = [](auto&& f) { unrolled<2 * P>(f); };
  const auto each_pair = [](auto&& f) { unrolled<P>(f); };
  __m256i x[2 * P];
  const uint16_t* words[2 * P];
  size_t cursor[2 * P], n_words[2 * P];
  uint8_t* o[2 * P];
  PackedPair8::Constants k[P];
  const uint32_t* th[P];
  each([&](auto p) {
    x[p] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s[p]->x));
    words[p] = s[p]->words;
    cursor[p] = s[p]->cursor;
    n_words[p] = s[p]->n_words;
    o[p] = out[p];
  });
  each_pair([&](auto q) {
    k[q] = kept[q].k;
    th[q] = kept[q].thresholds.data();
  });
  const size_t per_step = static_cast<size_t>(NT) * kNarrowLanes;
  const auto room = [&] {
    bool ok = true;
    each([&](auto p) { ok = ok && cursor[p] + kNarrowLanes <= n_words[p]; });
    return ok;
  };
  size_t i = 0, step = 0;
  while (i + kNarrowLanes <= end && room()) {
    const size_t at = step * per_step;
    each_pair([&](auto q) {
      packed_pair_step<NT>(x[2 * q], x[2 * q + 1], th[q] + at, k[q], words[2 * q], cursor[2 * q],
                           words[2 * q + 1], cursor[2 * q + 1], o[2 * q] + i, o[2 * q + 1] + i);
    });
    i += kNarrowLanes;
    if (++step == period) step = 0;
  }
  each([&](auto p) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(s[p]->x), x[p]);
    s[p]->cursor = cursor[p];
  });
  return i;
}

// N pairs of 4-lane search payloads (N = 1 or 2 in flight), each pair packed into one 8-lane
// step: the first payload's lanes in lanes 0..3, the second's in 4..7, each renormalised from
// its own words. On half-idle 8-lane steps (narrow_search) two payloads cost two steps' uops;
// packed, one. Each payload has its own tables and precision (per-lane masks and shifts).
struct PackedPair4 {
  std::vector<uint32_t> thresholds;  // [period][NT][8 lanes]: the first's 4, then the second's
  size_t period = 0;
  struct Constants {
    __m256i mask, top, shift;
  } k;
  bool build(const ThresholdPattern32& a, const ThresholdPattern32& b, int precision_a,
             int precision_b) {
    if (!lockstep_patterns(a, b)) return false;
    period = a.period;
    thresholds.resize(a.thresholds.size());
    for (size_t i = 0; i < thresholds.size(); i += kNarrowLanes) {
      for (size_t l = 0; l < 4; ++l) {
        thresholds[i + l] = a.thresholds[i + l];
        thresholds[i + 4 + l] = b.thresholds[i + l];
      }
    }
    const auto halves = [](uint32_t first, uint32_t second) {
      const auto f = static_cast<int>(first), g = static_cast<int>(second);
      return _mm256_setr_epi32(f, f, f, f, g, g, g, g);
    };
    k.mask = halves((1u << precision_a) - 1, (1u << precision_b) - 1);
    k.top = halves(1u << precision_a, 1u << precision_b);
    k.shift = halves(static_cast<uint32_t>(precision_a), static_cast<uint32_t>(precision_b));
    return true;
  }
};

// One step of a packed pair: th holds the step's NT thresholds of 8 lanes each.
template <int NT>
__attribute__((always_inline)) inline __m256i packed4_step(
    __m256i x, const uint32_t* th, const PackedPair4::Constants& k, const uint16_t* words_a,
    size_t& cursor_a, const uint16_t* words_b, size_t& cursor_b, uint8_t* out_a, uint8_t* out_b) {
  const __m256i slot = _mm256_and_si256(x, k.mask);
  __m256i lo, hi, sym;
  search_interval<LanesYmm<32>, NT>(slot, th, kNarrowLanes, k.top, lo, hi, sym);
  x = _mm256_add_epi32(_mm256_mullo_epi32(_mm256_sub_epi32(hi, lo), _mm256_srlv_epi32(x, k.shift)),
                       _mm256_sub_epi32(slot, lo));
  const __mmask8 renorm = _mm256_cmplt_epu32_mask(x, _mm256_set1_epi32(static_cast<int>(kRansLow)));
  const auto ma = static_cast<__mmask8>(renorm & 15), mb = static_cast<__mmask8>(renorm >> 4);
  long long wa, wb;  // four words of each payload
  std::memcpy(&wa, words_a + cursor_a, 8);
  std::memcpy(&wb, words_b + cursor_b, 8);
  cursor_a += static_cast<size_t>(__builtin_popcount(ma));
  cursor_b += static_cast<size_t>(__builtin_popcount(mb));
  const __m128i ea = _mm_maskz_expand_epi32(ma, _mm_cvtepu16_epi32(_mm_cvtsi64_si128(wa)));
  const __m128i eb = _mm_maskz_expand_epi32(mb, _mm_cvtepu16_epi32(_mm_cvtsi64_si128(wb)));
  const __m256i w = _mm256_inserti128_si256(_mm256_castsi128_si256(ea), eb, 1);
  x = _mm256_mask_mov_epi32(x, renorm, _mm256_or_si256(_mm256_slli_epi32(x, 16), w));
  const auto bytes = static_cast<uint64_t>(_mm_cvtsi128_si64(_mm256_cvtepi32_epi8(sym)));
  const auto first = static_cast<uint32_t>(bytes), second = static_cast<uint32_t>(bytes >> 32);
  std::memcpy(out_a, &first, 4);
  std::memcpy(out_b, &second, 4);
  return x;
}

// 2N 4-lane search payloads of one alphabet from element 0 in lockstep, as N packed pairs.
template <int NT, int N>
size_t search4_packed(RansDecodeState* const* s, const DecodeTables* const* t, size_t dim,
                      size_t end, uint8_t* const* out) {
  thread_local PackedPair4 kept[5];
  static_assert(N <= 5);
  for (int q = 0; q < N; ++q) {
    // Each pattern reference stays valid until the fourth cache miss after it.
    const ThresholdPattern32& pa = make_narrow_pattern(*t[2 * q], dim, 4);
    const ThresholdPattern32& pb = make_narrow_pattern(*t[2 * q + 1], dim, 4);
    if (!kept[q].build(pa, pb, t[2 * q]->precision, t[2 * q + 1]->precision)) return 0;
    if (kept[q].period != kept[0].period ||
        kept[q].thresholds.size() != kept[0].period * NT * kNarrowLanes)
      return 0;
  }
  const size_t period = kept[0].period;
  // Per-payload values in locals indexed by constants only, as search8_packed's.
  __m256i x[N];
  PackedPair4::Constants k[N];
  const uint32_t* th[N];
  const uint16_t* words[2 * N];
  size_t cursor[2 * N], n_words[2 * N];
  uint8_t* o[2 * N];
  unrolled<N>([&](auto q) {
    uint32_t lanes[kNarrowLanes];
    for (size_t l = 0; l < 4; ++l) {
      lanes[l] = s[2 * q]->x[l];
      lanes[4 + l] = s[2 * q + 1]->x[l];
    }
    x[q] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lanes));
    k[q] = kept[q].k;
    th[q] = kept[q].thresholds.data();
  });
  unrolled<2 * N>([&](auto p) {
    words[p] = s[p]->words;
    cursor[p] = s[p]->cursor;
    n_words[p] = s[p]->n_words;
    o[p] = out[p];
  });
  const auto in_bounds = [&] {
    bool ok = true;
    unrolled<2 * N>([&](auto p) { ok = ok && cursor[p] + 4 <= n_words[p]; });
    return ok;
  };
  size_t i = 0, step = 0;
  while (i + 4 <= end && in_bounds()) {
    const size_t at = step * NT * kNarrowLanes;
    unrolled<N>([&](auto q) {
      x[q] = packed4_step<NT>(x[q], th[q] + at, k[q], words[2 * q], cursor[2 * q], words[2 * q + 1],
                              cursor[2 * q + 1], o[2 * q] + i, o[2 * q + 1] + i);
    });
    i += 4;
    if (++step == period) step = 0;
  }
  unrolled<N>([&](auto q) {
    uint32_t lanes[kNarrowLanes];
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes), x[q]);
    for (size_t l = 0; l < 4; ++l) {
      s[2 * q]->x[l] = lanes[l];
      s[2 * q + 1]->x[l] = lanes[4 + l];
    }
  });
  unrolled<2 * N>([&](auto p) { s[p]->cursor = cursor[p]; });
  return i;
}

// f(NT) for n payloads of one search alphabet (its NT thresholds as a constant); 0 (declined)
// for slot tables or unequal alphabets.
template <typename F>
size_t with_one_alphabet(const DecodeTables* const* t, size_t n, F&& f) {
  for (size_t p = 1; p < n; ++p)
    if (t[p]->n_syms != t[0]->n_syms) return 0;
  return with_thresholds(t[0]->n_syms, size_t{0}, f);
}

}  // namespace

size_t rans_decode_avx512_8(RansDecodeState& st, const DecodeTables& tables, size_t dim,
                            size_t begin, size_t end, uint8_t* symbols) {
  if (const NarrowKernel search = narrow_search_kernel<Search8Avx512>(tables.n_syms))
    return search(st, tables, dim, begin, end, symbols);
  return rans_decode_avx2_8(st, tables, dim, begin, end, symbols);  // slot tables: gathers
}

size_t rans_decode_avx512_4(RansDecodeState& st, const DecodeTables& tables, size_t dim,
                            size_t begin, size_t end, uint8_t* symbols) {
  if (const NarrowKernel search = narrow_search_kernel<Search8Avx512, 4>(tables.n_syms))
    return search(st, tables, dim, begin, end, symbols);
  return rans_decode_avx2_4(st, tables, dim, begin, end, symbols);  // slot tables: gathers
}

size_t rans_decode_avx512(RansDecodeState& st, const DecodeTables& tables, size_t dim, size_t begin,
                          size_t end, uint8_t* symbols) {
  if (tables.uses_search()) {
    return with_thresholds(tables.n_syms, begin, [&](auto nt) {
      return decode_search<decltype(nt)::value>(st, tables, dim, begin, end, symbols);
    });
  }
  const LanePattern pattern = make_lane_pattern(tables, dim, begin);
  if (pattern.period == 0) return begin;
  const __m128i p = _mm_cvtsi32_si128(tables.precision);
  const __m512i mask = _mm512_set1_epi32(static_cast<int>((1u << tables.precision) - 1));
  __m512i x0 = _mm512_loadu_si512(st.x);
  __m512i x1 = _mm512_loadu_si512(st.x + 16);
  const uint16_t* const words = st.words;
  const size_t n_words = st.n_words;
  size_t cursor = st.cursor;
  size_t i = begin, k = 0;
  if (is_flat(pattern)) {  // one channel at the coder's precision, as in decode_slots_pair
    for (; i + kMaxLanes <= end && cursor + kMaxLanes <= n_words; i += kMaxLanes) {
      x0 = decode16_flat(x0, tables, p, mask, words, cursor, symbols + i);
      x1 = decode16_flat(x1, tables, p, mask, words, cursor, symbols + i + 16);
    }
  }
  while (i + kMaxLanes <= end && cursor + kMaxLanes <= n_words) {
    const uint32_t* base = pattern.base.data() + k * kMaxLanes;
    const uint32_t* shift = pattern.shift.data() + k * kMaxLanes;
    x0 = decode16(x0, base, shift, tables, p, mask, words, cursor, symbols + i);
    x1 = decode16(x1, base + 16, shift + 16, tables, p, mask, words, cursor, symbols + i + 16);
    i += kMaxLanes;
    if (++k == pattern.period) k = 0;
  }
  st.cursor = cursor;
  _mm512_storeu_si512(st.x, x0);
  _mm512_storeu_si512(st.x + 16, x1);
  return i;
}

size_t rans_decode_avx512_pair(RansDecodeState& a, const DecodeTables& ta, RansDecodeState& b,
                               const DecodeTables& tb, size_t dim, size_t end, uint8_t* symbols_a,
                               uint8_t* symbols_b) {
  RansDecodeState* const st[2] = {&a, &b};
  const DecodeTables* const t[2] = {&ta, &tb};
  uint8_t* const out[2] = {symbols_a, symbols_b};
  if (!ta.uses_search() && !tb.uses_search()) return decode_slots_lockstep<2>(st, t, dim, end, out);
  if (!ta.uses_search() || !tb.uses_search()) return 0;  // a search and a slot-table alphabet
  return decode_search_lockstep<2>(st, t, dim, end, out);
}

size_t rans_decode_avx512_quad32(RansDecodeState* const* states, const DecodeTables* const* tables,
                                 size_t dim, size_t end, uint8_t* const* symbols) {
  return decode_search_lockstep<4>(states, tables, dim, end, symbols);
}

size_t rans_decode_avx512_pair8(RansDecodeState& a, const DecodeTables& ta, RansDecodeState& b,
                                const DecodeTables& tb, size_t dim, size_t end, uint8_t* symbols_a,
                                uint8_t* symbols_b) {
  if (!ta.uses_search() && !tb.uses_search())  // slot tables: gathers, as the single kernel
    return rans_decode_avx2_pair8(a, ta, b, tb, dim, end, symbols_a, symbols_b);
  return narrow_search_pair_of<Search8Avx512, kNarrowLanes>(a, ta, b, tb, dim, end, symbols_a,
                                                            symbols_b);
}

size_t rans_decode_avx512_pair4(RansDecodeState& a, const DecodeTables& ta, RansDecodeState& b,
                                const DecodeTables& tb, size_t dim, size_t end, uint8_t* symbols_a,
                                uint8_t* symbols_b) {
  RansDecodeState* const s[2] = {&a, &b};
  const DecodeTables* const t[2] = {&ta, &tb};
  uint8_t* const out[2] = {symbols_a, symbols_b};
  return with_one_alphabet(
      t, 2, [&](auto nt) { return search4_packed<decltype(nt)::value, 1>(s, t, dim, end, out); });
}

size_t rans_decode_avx512_quad4(RansDecodeState* const* states, const DecodeTables* const* tables,
                                size_t dim, size_t end, uint8_t* const* symbols) {
  return with_one_alphabet(tables, 4, [&](auto nt) {
    return search4_packed<decltype(nt)::value, 2>(states, tables, dim, end, symbols);
  });
}

size_t rans_decode_avx512_quad8(RansDecodeState* const* states, const DecodeTables* const* tables,
                                size_t dim, size_t end, uint8_t* const* symbols) {
  return with_one_alphabet(tables, 4, [&](auto nt) {
    return search8_packed<decltype(nt)::value, 2>(states, tables, dim, end, symbols);
  });
}

size_t rans_decode_avx512_group(RansDecodeState* const* states, const DecodeTables* const* tables,
                                size_t n, int lanes, size_t dim, size_t end,
                                uint8_t* const* symbols) {
  return with_one_alphabet(tables, n, [&](auto nt) {
    constexpr int NT = decltype(nt)::value;
    const auto pairs = [&]<int P>() {
      return lanes == 4 ? search4_packed<NT, P>(states, tables, dim, end, symbols)
                        : search8_packed<NT, P>(states, tables, dim, end, symbols);
    };
    if (n == 6) return pairs.template operator()<3>();
    if (n == 8) return pairs.template operator()<4>();
    if (n == 10) return pairs.template operator()<5>();
    return size_t{0};
  });
}

}  // namespace cachegen::detail
