// AVX-512 rANS encoders: the scalar encoder's steps, 8 lanes per vector, each lane's state in a
// 64-bit slot (rans_encode_avx512_32.cpp: in 32-bit slots, 16 lanes per zmm for the 32-lane
// payloads of the models rans_encode_avx512_takes16 admits, 8 per ymm for 8-lane payloads of
// models of at most 8 symbols). Within a step of n_lanes elements every lane codes one element,
// so the lanes of a vector are independent; the scalar walk emits their words in decreasing
// element order at decreasing addresses, i.e. in increasing lane order from the lowest address,
// which is what a compress-and-store of the emitting lanes writes. Each lane's entry is picked
// by blends or permutes where the models are small enough (BlendedEntries, HeldEntries), else
// gathered.
// Two 4-lane payloads share one 8-lane vector (rans_encode_avx512_lanes4_pair).
// The bytes are the scalar encoder's (tests compare the paths).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "codec/rans.h"
#include "codec/rans_encode_avx512.h"

namespace cachegen::detail {

namespace {

// One step of 8 lanes on their entries e (RansEncodeTables::narrow): the state's chain is
// q = floor(x / f) by a 32 x 32 -> 64 multiply, a shift, an add and a variable shift, both
// shifted right 16 where a word is emitted, then x + start + q * (2^p - f). Every value stays
// below 2^32 (q < 2^(32-p) after renormalisation), so the 64-bit sums equal the scalar
// encoder's 32-bit ones. q comes from the state before renormalising: an emitting lane's
// floor((x >> 16) / f) is floor(x / f) >> 16 (floors of divisions nest), and the magic
// divides every x < 2^32 exactly (x * e < 2^32 * f <= 2^(32+L)). A lane emits where
// x >= f * 2^(32-p) (the scalar encoder's x_max), which is q >= 2^(32-p): one compare with a
// constant once q is known (kFromQuotient: the 32-lane kernel, bound by its uops), or
// x + (2^p - f) * 2^(32-p) >= 2^32 beside the multiply, off the state's chain (the 8-lane
// kernel, one vector: bound by that chain; taking the compare off it was -5% a symbol, best of
// 2,000 encodes of an 8-lane payload, 2.45-2.62 -> 2.30-2.49 TSC). Returns the lanes that emit
// the low 16 bits of their state before the step. The shift 32 - p is per lane: two 4-lane
// payloads of their own precisions share a vector (rans_encode_avx512_lanes4_pair).
template <bool kFromQuotient>
struct Step8 {
  __m512i mask13, mask12, quotient_bound, state_bound, renorm_shift;
  explicit Step8(int precision)
      : Step8(_mm512_set1_epi64(int64_t{1} << (32 - precision)),
              _mm512_set1_epi64(32 - precision)) {}
  // Each lane's 32 - p (its emit test by the state, not the quotient).
  explicit Step8(__m512i renorm_shifts) requires(!kFromQuotient)
      : Step8(_mm512_setzero_si512(), renorm_shifts) {}
  __mmask8 operator()(__m512i& x, __m512i e) const {
    const __m512i cmpl = _mm512_and_si512(_mm512_srli_epi64(e, 32), mask13);
    const __m512i bias = _mm512_and_si512(_mm512_srli_epi64(e, 45), mask12);
    __mmask8 emit = 0;
    if constexpr (!kFromQuotient) {
      emit = _mm512_cmpge_epu64_mask(_mm512_add_epi64(x, _mm512_sllv_epi64(cmpl, renorm_shift)),
                                     state_bound);
    }
    __m512i q =
        _mm512_srlv_epi64(_mm512_add_epi64(_mm512_srli_epi64(_mm512_mul_epu32(x, e), 32), x),
                          _mm512_srli_epi64(e, 58));
    if constexpr (kFromQuotient) emit = _mm512_cmpge_epu64_mask(q, quotient_bound);
    q = _mm512_mask_srli_epi64(q, emit, q, 16);
    x = _mm512_mask_srli_epi64(x, emit, x, 16);
    x = _mm512_add_epi64(_mm512_add_epi64(x, bias), _mm512_mul_epu32(q, cmpl));
    return emit;
  }

 private:
  Step8(__m512i quotient_bounds, __m512i renorm_shifts)
      : mask13(_mm512_set1_epi64(0x1fff)),
        mask12(_mm512_set1_epi64(0xfff)),
        quotient_bound(quotient_bounds),
        state_bound(_mm512_set1_epi64(int64_t{1} << 32)),
        renorm_shift(renorm_shifts) {}
};

// The same for 8-lane payloads: one 64-bit gather a step of 8, indexed by the lanes' table rows
// (channel * n_syms), which step back by 8 elements each call, from the last 8 elements.
class GatheredEntries8 {
 public:
  GatheredEntries8(const RansEncodeTables& t, size_t dim, size_t end)
      : entries_(t.narrow),
        wrap_v_(_mm512_set1_epi64(static_cast<int64_t>(dim) * t.n_syms)),
        step_v_(_mm512_set1_epi64(static_cast<int64_t>(8 % dim) * t.n_syms)) {
    alignas(64) int64_t r0[8];  // element end - 8 + j is lane j
    for (int j = 0; j < 8; ++j) r0[j] = static_cast<int64_t>((end - 8 + j) % dim) * t.n_syms;
    row_ = _mm512_load_si512(r0);
  }
  __m512i next8(const uint8_t* sym) {
    const __m512i e = _mm512_i64gather_epi64(
        _mm512_add_epi64(
            row_, _mm512_cvtepu8_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sym)))),
        entries_, 8);
    row_ = _mm512_sub_epi64(row_, step_v_);
    row_ = _mm512_mask_add_epi64(row_, _mm512_cmplt_epi64_mask(row_, _mm512_setzero_si512()), row_,
                                 wrap_v_);
    return e;
  }

 private:
  const uint64_t* entries_;
  __m512i wrap_v_, step_v_, row_;
};

// Entry g (< 8 * kTables) of the entries in `table`, 8 a register: permutes of register pairs
// (16 entries) by g's low 4 bits, blended on its bits 4 and 5.
template <int kTables>
__m512i pick(const __m512i* table, __m512i g) {
  static_assert(kTables == 2 || kTables == 4 || kTables == 8);
  const auto pair = [&](int k) {
    return _mm512_permutex2var_epi64(table[2 * k], g, table[2 * k + 1]);
  };
  if constexpr (kTables == 2) {
    return pair(0);
  } else {
    const __mmask8 bit4 = _mm512_test_epi64_mask(g, _mm512_set1_epi64(16));
    const auto quarter = [&](int k) {
      return _mm512_mask_blend_epi64(bit4, pair(2 * k), pair(2 * k + 1));
    };
    if constexpr (kTables == 4) return quarter(0);
    return _mm512_mask_blend_epi64(_mm512_test_epi64_mask(g, _mm512_set1_epi64(32)), quarter(0),
                                   quarter(1));
  }
}

// The same from tables held in registers, for models of at most 8 * kTables <= 64 entries
// whose channel count divides 8 (head_dim 8, say): lane j of every vector of 8 is channel
// j % dim, so entry (j % dim) * n_syms + symbol is picked by permutes of two registers each
// (16 entries) and blends on the index's bits 4 and 5. On an AMD Zen 4 VM a gather of 8 entries
// was most of a step: two 8-lane payloads of stories260K's shape (8 channels, 8 symbols)
// encoded in 12.6 us instead of 20.3.
template <int kTables>
class HeldEntries {
 public:
  HeldEntries(const RansEncodeTables& t, size_t dim) {
    const size_t n = dim * static_cast<size_t>(t.n_syms);  // <= 8 * kTables
    for (size_t i = 0; i < kTables; ++i) {
      const size_t have = n > 8 * i ? std::min<size_t>(8, n - 8 * i) : 0;
      table_[i] =
          _mm512_maskz_loadu_epi64(static_cast<__mmask8>((1u << have) - 1), t.narrow + 8 * i);
    }
    alignas(64) int64_t r[8];
    for (size_t j = 0; j < 8; ++j)
      r[j] = static_cast<int64_t>((j % dim) * static_cast<size_t>(t.n_syms));
    row_ = _mm512_load_si512(r);
  }
  __m512i next8(const uint8_t* sym) const {
    return pick<kTables>(
        table_,
        _mm512_add_epi64(
            row_, _mm512_cvtepu8_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sym)))));
  }

 private:
  __m512i table_[kTables];
  __m512i row_;
};

// The 32-lane kernel's entries for models of at most kSyms (2, 4 or 8) symbols over blocks of
// 8 consecutive channels (dim a multiple of 8: each vector's block loaded each call, channels
// stepping back by 8 elements a call from the last 8 elements). Row s of a block (in `rows`,
// dim * kSyms entries) holds symbol s's entries of its 8 lanes' channels, and a lane's entry is
// picked by kSyms - 1 blends on its symbol's bits, each bit's mask taken from 16 symbol bytes by
// one test. On an AMD Zen 4 VM cheaper than the permutes of channel-major rows they replaced,
// by index and block (TSC a value of 32-lane payloads of 64K symbols, the best of 2,000 encodes
// in 5 processes): 8 channels of 2, 4 and 8 symbols 1.34 -> 1.18, 1.51 -> 1.33, 1.75 -> 1.52;
// 64 channels of 4 symbols 1.51 -> 1.33; encode of tinystories-hd64's 3-bit codes (64 channels
// of 8 symbols) 900-917 -> 833-838 us. (8-lane payloads take Blended32, the same picks on
// 32-bit fields.)
template <int kSyms>
class BlendedEntries {
 public:
  static_assert(kSyms == 2 || kSyms == 4 || kSyms == 8);
  BlendedEntries(const RansEncodeTables& t, size_t dim, size_t end, uint64_t* rows)
      : rows_(rows), dim_(dim), chan_((end - 8) % dim) {
    const size_t n_syms = static_cast<size_t>(t.n_syms);  // <= kSyms
    for (size_t b = 0; b < dim / 8; ++b) {
      for (size_t s = 0; s < kSyms; ++s) {
        for (size_t j = 0; j < 8; ++j) {
          rows[(b * kSyms + s) * 8 + j] = s < n_syms ? t.narrow[(8 * b + j) * n_syms + s] : 0;
        }
      }
    }
  }
  void next16(const uint8_t* sym, __m512i& lo, __m512i& hi) {
    const Bits b = symbol_bits(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sym)));
    hi = pick(b, 8);
    lo = pick(b, 0);
  }

 private:
  struct Bits {
    unsigned b0, b1, b2;
  };
  static Bits symbol_bits(__m128i sv) {
    return {_mm_test_epi8_mask(sv, _mm_set1_epi8(1)), _mm_test_epi8_mask(sv, _mm_set1_epi8(2)),
            _mm_test_epi8_mask(sv, _mm_set1_epi8(4))};
  }
  // The entries of the 8 lanes whose symbols' bits are at `shift` in b (the next block).
  __m512i pick(const Bits& b, int shift) {
    const uint64_t* const block = rows_ + chan_ / 8 * kSyms * 8;
    chan_ = chan_ >= 8 ? chan_ - 8 : chan_ + dim_ - 8;
    const unsigned bits[3] = {b.b0, b.b1, b.b2};
    return pick_by_symbol_bits<kSyms>([&](int s) { return _mm512_load_si512(block + 8 * s); },
                                      [&](int bit, __m512i u, __m512i v) {
                                        return _mm512_mask_blend_epi64(
                                            static_cast<__mmask8>(bits[bit] >> shift), u, v);
                                      });
  }

  const uint64_t* rows_;
  size_t dim_, chan_;
};

// The 8-lane kernel's entries of models lanes8_takes32 leaves here: calls f with a pointer to
// t's entries picked by permutes (see there) where its models allow, else with nullptr (the
// caller gathers them). (32-lane payloads take encode_lanes32_16, or encode_lanes32 with
// BlendedEntries.) Held models of more than 4 symbols in at most 32 entries keep the permutes
// (4 channels of 8 symbols: 1.35 TSC a value against the 64-bit blends' 1.44).
template <class F>
size_t with_entries(const RansEncodeTables& t, size_t dim, F&& f) {
  const size_t n = dim * static_cast<size_t>(t.n_syms);
  const auto use = [&](auto entries) { return f(&entries); };
  if (8 % dim == 0) {  // every vector of 8 lanes sees the same channels
    if (n <= 16) return use(HeldEntries<2>(t, dim));
    if (n <= 32) return use(HeldEntries<4>(t, dim));
    if (n <= 64) return use(HeldEntries<8>(t, dim));
  }
  return f(static_cast<HeldEntries<2>*>(nullptr));
}

// 32 lanes: four vectors of 8, the entries of 16 lanes at a time from `entries`, their words
// stored by one compress. (Until the seventeenth session this kernel kept 16 states in 32-bit
// lanes and read 32-bit entries and a double 1 / f per lane, three gathers per 16 lanes: on an
// AMD Zen 4 VM, where a 16-lane 32-bit gather costs as much as two 8-lane 64-bit ones, rANS
// encode of codes +5% on the synthetic set, the same bytes; a 16-lane step on the 64-bit
// entries' halves, split by two permutes, measured 2-3% slower in the nineteenth session.)
// One kernel per kind of entries, not inlined, with its own copy of them: inlined into one
// function with every kind, the loaded rows' path ran 4-5% slower on tinystories-hd64 as kinds
// were added, and with the entries by reference their members went through memory (the words'
// stores may alias them): +13%.
template <class Entries>
__attribute__((noinline)) size_t encode_lanes32(const Step8<true> step, Entries entries,
                                                const uint8_t* symbols, size_t end, uint32_t* x,
                                                uint16_t* words, size_t w_pos) {
  // Lanes 8k..8k+7 in x<k>: named, not an array indexed by the half, which kept them in memory
  // (a store and a reload on every step's chain).
  const auto load = [&](int k) {
    return _mm512_cvtepu32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 8 * k)));
  };
  __m512i x0 = load(0), x1 = load(1), x2 = load(2), x3 = load(3);
  // The 16 elements from `base`: lanes 0..15 of the half in x_lo (0..7) and x_hi (8..15).
  // Inlined by force: GCC kept it out of line for some kinds, x_lo and x_hi then in memory.
  const auto half = [&](size_t base, __m512i & x_lo, __m512i & x_hi)
      __attribute__((always_inline)) {
    __m512i e_lo, e_hi;
    entries.next16(symbols + base, e_lo, e_hi);
    const __m512i before = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi64_epi32(x_lo)),
                                              _mm512_cvtepi64_epi32(x_hi), 1);
    const unsigned emit_hi = step(x_hi, e_hi);
    const unsigned emit = step(x_lo, e_lo) | emit_hi << 8;
    const int n_emit = __builtin_popcount(emit);
    const __m256i packed =
        _mm512_cvtepi32_epi16(_mm512_maskz_compress_epi32(static_cast<__mmask16>(emit), before));
    w_pos -= static_cast<size_t>(n_emit);
    _mm256_mask_storeu_epi16(words + w_pos, static_cast<__mmask16>((1u << n_emit) - 1), packed);
  };
  for (size_t i0 = end; i0 >= 32; i0 -= 32) {
    half(i0 - 16, x2, x3);
    half(i0 - 32, x0, x1);
  }
  const auto store = [&](int k, __m512i v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(x + 8 * k), _mm512_cvtepi64_epi32(v));
  };
  store(0, x0);
  store(1, x1);
  store(2, x2);
  store(3, x3);
  return w_pos;
}

// The emitting lanes' words of an 8-lane step (the states before it), stored below w_pos in
// lane order from the lowest address.
inline void store_words8(__mmask8 emit, __m512i before, uint16_t* words, size_t& w_pos) {
  const int n_emit = __builtin_popcount(static_cast<unsigned>(emit));
  const __m128i packed = _mm512_cvtepi64_epi16(_mm512_maskz_compress_epi64(emit, before));
  w_pos -= static_cast<size_t>(n_emit);
  _mm_mask_storeu_epi16(words + w_pos, static_cast<__mmask8>((1u << n_emit) - 1), packed);
}

// 8 lanes: one vector, the entries of a step from `entries` (picked or gathered).
template <class Entries>
__attribute__((noinline)) size_t encode_lanes8(const Step8<false> step, Entries entries,
                                               const uint8_t* symbols, size_t end, uint32_t* x,
                                               uint16_t* words, size_t w_pos) {
  __m512i xs = _mm512_cvtepu32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
  for (size_t i0 = end; i0 >= 8; i0 -= 8) {
    const __m512i e = entries.next8(symbols + i0 - 8);
    const __m512i before = xs;
    store_words8(step(xs, e), before, words, w_pos);
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(x), _mm512_cvtepi64_epi32(xs));
  return w_pos;
}

// Two 8-lane payloads in lockstep, while both have steps left (their ends step down to where
// they stop): two chains, each of one vector, where one payload alone waits on its chain's
// latency. The entries are copies, as encode_lanes8's (see encode_lanes32), written back as
// far as they went.
template <class Entries>
__attribute__((noinline)) void encode_lanes8_pair(Lanes8& a, Entries& entries_a, Lanes8& b,
                                                  Entries& entries_b) {
  Entries ea = entries_a, eb = entries_b;
  const Step8<false> step_a(a.t.precision), step_b(b.t.precision);
  const uint8_t* const symbols_a = a.symbols;
  const uint8_t* const symbols_b = b.symbols;
  uint16_t* const words_a = a.words;
  uint16_t* const words_b = b.words;
  __m512i xa = _mm512_cvtepu32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.x)));
  __m512i xb = _mm512_cvtepu32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.x)));
  size_t ia = a.end, ib = b.end, wa = a.w_pos, wb = b.w_pos;
  for (; ia >= 8 && ib >= 8; ia -= 8, ib -= 8) {
    const __m512i e_a = ea.next8(symbols_a + ia - 8);
    const __m512i e_b = eb.next8(symbols_b + ib - 8);
    const __m512i before_a = xa, before_b = xb;
    const __mmask8 emit_a = step_a(xa, e_a);
    const __mmask8 emit_b = step_b(xb, e_b);
    store_words8(emit_a, before_a, words_a, wa);
    store_words8(emit_b, before_b, words_b, wb);
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(a.x), _mm512_cvtepi64_epi32(xa));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(b.x), _mm512_cvtepi64_epi32(xb));
  entries_a = ea;
  entries_b = eb;
  a.end = ia;
  b.end = ib;
  a.w_pos = wa;
  b.w_pos = wb;
}

// A payload's steps left, alone.
template <class Entries>
void encode_rest(Lanes8& p, Entries* entries) {
  const Step8<false> step(p.t.precision);
  p.w_pos = entries ? encode_lanes8(step, *entries, p.symbols, p.end, p.x, p.words, p.w_pos)
                    : encode_lanes8(step, GatheredEntries8(p.t, p.dim, p.end), p.symbols, p.end,
                                    p.x, p.words, p.w_pos);
}

// Payloads of different kinds of entries: one after the other.
template <class EA, class EB>
void encode_both(Lanes8& a, EA* ea, Lanes8& b, EB* eb) {
  encode_rest(a, ea);
  encode_rest(b, eb);
}

// Of the same kind (a chunk's K and V mostly are): in lockstep, then each one's rest alone.
template <class Entries>
void encode_both(Lanes8& a, Entries* ea, Lanes8& b, Entries* eb) {
  if (ea != nullptr && eb != nullptr) {
    encode_lanes8_pair(a, *ea, b, *eb);
  } else if (ea == nullptr && eb == nullptr) {  // both gathered
    GatheredEntries8 ga(a.t, a.dim, a.end), gb(b.t, b.dim, b.end);
    encode_lanes8_pair(a, ga, b, gb);
    encode_rest(a, &ga);
    encode_rest(b, &gb);
    return;
  }
  encode_rest(a, ea);
  encode_rest(b, eb);
}

}  // namespace

size_t rans_encode_avx512(const RansEncodeTables& t, const uint8_t* symbols, size_t dim, size_t end,
                          uint32_t* x, uint16_t* words, size_t w_pos) {
  const Step8<true> step(t.precision);
  alignas(64) uint64_t rows[kMaxBlendDim * 8];
  const auto run = [&](auto entries) {
    return encode_lanes32(step, entries, symbols, end, x, words, w_pos);
  };
  if (t.n_syms <= 2) return run(BlendedEntries<2>(t, dim, end, rows));
  if (t.n_syms <= 4) return run(BlendedEntries<4>(t, dim, end, rows));
  return run(BlendedEntries<8>(t, dim, end, rows));
}

size_t rans_encode_avx512_lanes8(const RansEncodeTables& t, const uint8_t* symbols, size_t dim,
                                 size_t end, uint32_t* x, uint16_t* words, size_t w_pos) {
  if (lanes8_takes32(dim, t.n_syms)) {
    Lanes8 p{t, symbols, dim, end, x, words, w_pos};
    encode_lanes8_32(p);
    return w_pos;
  }
  const Step8<false> step(t.precision);
  return with_entries(t, dim, [&](auto* entries) {
    if (entries) return encode_lanes8(step, *entries, symbols, end, x, words, w_pos);
    return encode_lanes8(step, GatheredEntries8(t, dim, end), symbols, end, x, words, w_pos);
  });
}

void rans_encode_avx512_lanes8_pair(const RansEncodeTables& ta, const uint8_t* symbols_a,
                                    size_t dim_a, size_t end_a, uint32_t* x_a, uint16_t* words_a,
                                    size_t& w_pos_a, const RansEncodeTables& tb,
                                    const uint8_t* symbols_b, size_t dim_b, size_t end_b,
                                    uint32_t* x_b, uint16_t* words_b, size_t& w_pos_b) {
  Lanes8 a{ta, symbols_a, dim_a, end_a, x_a, words_a, w_pos_a};
  Lanes8 b{tb, symbols_b, dim_b, end_b, x_b, words_b, w_pos_b};
  const bool a32 = lanes8_takes32(dim_a, ta.n_syms), b32 = lanes8_takes32(dim_b, tb.n_syms);
  if (a32 && b32) return encode_lanes8_32_pair(a, b);
  // Kinds of entries that differ: one after the other.
  const auto alone = [](Lanes8& p, bool in32) {
    if (in32) return encode_lanes8_32(p);
    with_entries(p.t, p.dim, [&](auto* e) {
      encode_rest(p, e);
      return size_t{0};
    });
  };
  if (a32 || b32) {
    alone(a, a32);
    alone(b, b32);
    return;
  }
  with_entries(ta, dim_a, [&](auto* ea) {
    return with_entries(tb, dim_b, [&](auto* eb) {
      encode_both(a, ea, b, eb);
      return size_t{0};
    });
  });
}

// 4-lane payloads were coded by the scalar loop (~2.8 ns a code: half of stories260K's file
// encode in 64-token chunks); here two share an 8-lane step, entries gathered by table row
// (channel * n_syms + symbol, the rows stepping back by 4 elements a step). Two of one shape
// (a chunk's K and V) take encode_lanes4_pair_32's blends in 32-bit lanes instead: the gathers
// and 64-bit step took ~1.6 ns a code, 39% of that file encode; the blends ~0.85 (one chain of
// 8 lanes; the file encode 662 -> 541 us, AMD Zen 4 VM).
void rans_encode_avx512_lanes4_pair(const uint64_t* entries, size_t idle, RansLanes4& a,
                                    RansLanes4& b) {
  if (encode_lanes4_pair_32(entries, a, b)) return;
  RansLanes4* const side[2] = {&a, &b};
  // Per lane: its state, table row (base + channel * n_syms) and the row's step back by 4
  // elements, wrap and floor, the renormalisation's shift (32 - precision); idle lanes: the
  // idle entry, steps of 0.
  alignas(64) int64_t x0[8], row0[8], step0[8], wrap0[8], floor0[8], shift0[8];
  bool active[2] = {false, false};
  const auto set_lanes = [&](int h) {
    const RansLanes4& p = *side[h];
    active[h] = p.symbols != nullptr && p.end >= 4;
    for (size_t j = 0; j < 4; ++j) {
      const size_t l = 4 * static_cast<size_t>(h) + j;
      if (!active[h]) {
        x0[l] = kRansLow;
        row0[l] = static_cast<int64_t>(idle);
        step0[l] = wrap0[l] = floor0[l] = shift0[l] = 0;
        continue;
      }
      x0[l] = p.x[j];
      row0[l] = static_cast<int64_t>(p.base + (p.end - 4 + j) % p.dim * p.n_syms);
      step0[l] = static_cast<int64_t>(4 % p.dim * p.n_syms);
      wrap0[l] = static_cast<int64_t>(p.dim * p.n_syms);
      floor0[l] = static_cast<int64_t>(p.base);
      shift0[l] = 32 - p.precision;
    }
  };
  set_lanes(0);
  set_lanes(1);
  while (active[0] || active[1]) {
    __m512i x = _mm512_load_si512(x0), row = _mm512_load_si512(row0);
    const __m512i step = _mm512_load_si512(step0), wrap = _mm512_load_si512(wrap0);
    const __m512i floor = _mm512_load_si512(floor0);
    const Step8<false> code(_mm512_load_si512(shift0));
    // Both sides' steps while each active one has one left; then the other alone.
    size_t steps = SIZE_MAX;
    for (int h = 0; h < 2; ++h)
      if (active[h]) steps = std::min(steps, side[h]->end / 4);
    const uint8_t* const sym_a = active[0] ? a.symbols : nullptr;
    const uint8_t* const sym_b = active[1] ? b.symbols : nullptr;
    size_t ia = a.end, ib = b.end, wa = a.w_pos, wb = b.w_pos;
    for (size_t k = 0; k < steps; ++k) {
      uint32_t sa = 0, sb = 0;  // idle lanes' symbols: 0 (the idle entry)
      if (sym_a) std::memcpy(&sa, sym_a + ia - 4, 4);
      if (sym_b) std::memcpy(&sb, sym_b + ib - 4, 4);
      const __m512i sym = _mm512_cvtepu8_epi64(
          _mm_insert_epi32(_mm_cvtsi32_si128(static_cast<int>(sa)), static_cast<int>(sb), 1));
      const __m512i e = _mm512_i64gather_epi64(_mm512_add_epi64(row, sym), entries, 8);
      row = _mm512_sub_epi64(row, step);
      row = _mm512_mask_add_epi64(row, _mm512_cmplt_epi64_mask(row, floor), row, wrap);
      const __m512i before = x;
      const __mmask8 emit = code(x, e);
      if (sym_a) {
        store_words8(static_cast<__mmask8>(emit & 0x0f), before, a.words, wa);
        ia -= 4;
      }
      if (sym_b) {
        store_words8(static_cast<__mmask8>(emit & 0xf0), before, b.words, wb);
        ib -= 4;
      }
    }
    _mm512_store_si512(x0, x);
    _mm512_store_si512(row0, row);
    a.end = ia;
    b.end = ib;
    a.w_pos = wa;
    b.w_pos = wb;
    for (int h = 0; h < 2; ++h) {
      if (!active[h]) continue;
      for (size_t j = 0; j < 4; ++j) side[h]->x[j] = static_cast<uint32_t>(x0[4 * h + j]);
      if (side[h]->end < 4) set_lanes(h);  // done: idle
    }
  }
}

}  // namespace cachegen::detail
