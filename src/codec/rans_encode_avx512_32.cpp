// AVX-512 rANS encoders with each lane's state in a 32-bit slot: 16 lanes per zmm (32-lane
// payloads of the models rans_encode_avx512_takes16 admits: encode_lanes32_16) or 8 per ymm
// (8-lane payloads of models of at most 8 symbols: Blended32). The entries are the AVX2
// encoder's two 32-bit fields (rans.h, RansEncodeTables), picked by permutes or blends where the
// models are small enough (Held16, Rows16, Blended32), else gathered (Gathered16). The step is
// one template for both widths (Step32); the words are stored as rans_encode_avx512.cpp says.
// The bytes are the scalar encoder's (tests compare the paths).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "codec/rans.h"
#include "codec/rans_encode_avx512.h"

namespace cachegen::detail {

namespace {

// A narrow entry's parts (rans.h) at precision p as the AVX2 encoder's two fields.
inline void narrow_fields(uint64_t n, int p, uint32_t& entry, uint32_t& magic) {
  const auto f = (1u << p) - static_cast<uint32_t>((n >> 32) & 0x1fff);
  entry =
      avx2_entry_of(f, static_cast<uint32_t>((n >> 45) & 0x1fff), static_cast<uint32_t>(n >> 58));
  magic = static_cast<uint32_t>(n);
}

// The 8-lane kernels' entries for models of at most kSyms (2, 4 or 8) symbols, as 32-bit fields
// (the AVX2 encoder's entry and magic, rans.h, made from the narrow entries): rows of 8 lanes
// per symbol, held in registers where every vector of 8 lanes sees the same channels (kHeld:
// dim divides 8), else one block of 8 channels loaded each call (dim a multiple of 8, channels
// stepping back by 8 elements a call from the last 8), each lane's fields picked by kSyms - 1
// blends on its symbol's bits as BlendedEntries picks the 64-bit entries. A step in 32-bit
// lanes (Step32<8, true>) is one ymm per operation where the 64-bit entries' step (Step8) took a
// zmm: on an AMD Zen 4 VM, whose zmm operations take both halves of its 256-bit units, the 8-lane
// kernel was bound by them (stories260K's 3-bit chunk tensors, 8,192 codes each, ~0.65 ns a
// code); in 32-bit lanes ~0.5.
template <int kSyms, bool kHeld>
class Blended32 {
 public:
  static_assert(kSyms == 2 || kSyms == 4 || kSyms == 8);
  // rows: 16 * kSyms u32 for each block (dim / 8 blocks; one held): symbol s's entries, then
  // its magics.
  Blended32(const RansEncodeTables& t, size_t dim, size_t end, uint32_t* rows)
      : rows_(rows), dim_(dim), chan_(kHeld ? 0 : (end - 8) % dim) {
    const size_t n_syms = static_cast<size_t>(t.n_syms);  // <= kSyms
    const size_t n_blocks = kHeld ? 1 : dim / 8;
    for (size_t b = 0; b < n_blocks; ++b) {
      for (size_t s = 0; s < kSyms; ++s) {
        for (size_t j = 0; j < 8; ++j) {
          const size_t c = kHeld ? j % dim : 8 * b + j;
          // An absent symbol's (0, never coded) read as frequency 2^p, as a present one's at
          // precision 0 (f = 1) must be.
          const uint64_t n = s < n_syms ? t.narrow[c * n_syms + s] : 0;
          narrow_fields(n, t.precision, rows[((b * kSyms + s) * 2) * 8 + j],
                        rows[((b * kSyms + s) * 2 + 1) * 8 + j]);
        }
      }
    }
    if constexpr (kHeld) {
      for (int s = 0; s < kSyms; ++s) {
        held_[s][0] = _mm256_load_si256(reinterpret_cast<const __m256i*>(rows + 16 * s));
        held_[s][1] = _mm256_load_si256(reinterpret_cast<const __m256i*>(rows + 16 * s + 8));
      }
    }
  }
  void next8(const uint8_t* sym, __m256i& e, __m256i& m) {
    const __m128i sv = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sym));
    const auto b0 = static_cast<__mmask8>(_mm_test_epi8_mask(sv, _mm_set1_epi8(1)));
    const auto b1 = static_cast<__mmask8>(_mm_test_epi8_mask(sv, _mm_set1_epi8(2)));
    const auto b2 = static_cast<__mmask8>(_mm_test_epi8_mask(sv, _mm_set1_epi8(4)));
    const uint32_t* block = rows_;
    if constexpr (!kHeld) {
      block = rows_ + chan_ / 8 * kSyms * 16;
      chan_ = chan_ >= 8 ? chan_ - 8 : chan_ + dim_ - 8;
    }
    const __mmask8 bits[3] = {b0, b1, b2};
    const auto pick = [&](int field) {
      return pick_by_symbol_bits<kSyms>(
          [&](int s) {
            if constexpr (kHeld) return held_[s][field];
            return _mm256_load_si256(reinterpret_cast<const __m256i*>(block + 16 * s + 8 * field));
          },
          [&](int bit, __m256i u, __m256i v) { return _mm256_mask_blend_epi32(bits[bit], u, v); });
    };
    e = pick(0);
    m = pick(1);
  }

 private:
  const uint32_t* rows_;
  size_t dim_, chan_;
  __m256i held_[kHeld ? kSyms : 1][2];
};

// 8 32-bit lanes of a ymm or 16 of a zmm: the operations of Step32.
template <int kLanes>
struct Lanes32;
template <>
struct Lanes32<8> {
  using V = __m256i;
  using Mask = __mmask8;
  static V set1(int v) { return _mm256_set1_epi32(v); }
  static V and_(V a, V b) { return _mm256_and_si256(a, b); }
  static V add(V a, V b) { return _mm256_add_epi32(a, b); }
  static V sub(V a, V b) { return _mm256_sub_epi32(a, b); }
  template <int N>
  static V srli(V a) {
    return _mm256_srli_epi32(a, N);
  }
  static V srl(V a, __m128i n) { return _mm256_srl_epi32(a, n); }
  static V srlv(V a, V n) { return _mm256_srlv_epi32(a, n); }
  static V mullo(V a, V b) { return _mm256_mullo_epi32(a, b); }
  static V mulhi(V a, V b) {  // the high 32 bits of each lane's 64-bit product
    const V even = _mm256_srli_epi64(_mm256_mul_epu32(a, b), 32);
    const V odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), _mm256_srli_epi64(b, 32));
    return _mm256_blend_epi32(even, odd, 0xaa);
  }
  static Mask ge(V a, V b) { return _mm256_cmpge_epu32_mask(a, b); }
  static Mask eq(V a, V b) { return _mm256_cmpeq_epi32_mask(a, b); }
  static V mov(V src, Mask m, V a) { return _mm256_mask_mov_epi32(src, m, a); }
  static V srli16(V a, Mask m) { return _mm256_mask_srli_epi32(a, m, a, 16); }
  // The low 16 bits of the lanes in m, in lane order, stored below w_pos.
  static void store_words(Mask m, V a, uint16_t* words, size_t& w_pos) {
    const int n = __builtin_popcount(static_cast<unsigned>(m));
    w_pos -= static_cast<size_t>(n);
    _mm_mask_storeu_epi16(words + w_pos, static_cast<Mask>((1u << n) - 1),
                          _mm256_cvtepi32_epi16(_mm256_maskz_compress_epi32(m, a)));
  }
};
template <>
struct Lanes32<16> {
  using V = __m512i;
  using Mask = __mmask16;
  static V set1(int v) { return _mm512_set1_epi32(v); }
  static V and_(V a, V b) { return _mm512_and_si512(a, b); }
  static V add(V a, V b) { return _mm512_add_epi32(a, b); }
  static V sub(V a, V b) { return _mm512_sub_epi32(a, b); }
  template <int N>
  static V srli(V a) {
    return _mm512_srli_epi32(a, N);
  }
  static V srl(V a, __m128i n) { return _mm512_srl_epi32(a, n); }
  static V srlv(V a, V n) { return _mm512_srlv_epi32(a, n); }
  static V mullo(V a, V b) { return _mm512_mullo_epi32(a, b); }
  static V mulhi(V a, V b) {
    const V even = _mm512_srli_epi64(_mm512_mul_epu32(a, b), 32);
    const V odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), _mm512_srli_epi64(b, 32));
    return _mm512_mask_blend_epi32(0xaaaa, even, odd);
  }
  static Mask ge(V a, V b) { return _mm512_cmpge_epu32_mask(a, b); }
  static Mask eq(V a, V b) { return _mm512_cmpeq_epi32_mask(a, b); }
  static V mov(V src, Mask m, V a) { return _mm512_mask_mov_epi32(src, m, a); }
  static V srli16(V a, Mask m) { return _mm512_mask_srli_epi32(a, m, a, 16); }
  static void store_words(Mask m, V a, uint16_t* words, size_t& w_pos) {
    const int n = __builtin_popcount(static_cast<unsigned>(m));
    w_pos -= static_cast<size_t>(n);
    _mm256_mask_storeu_epi16(words + w_pos, static_cast<Mask>((1u << n) - 1),
                             _mm512_cvtepi32_epi16(_mm512_maskz_compress_epi32(m, a)));
  }
};

// One step of kLanes 32-bit lanes (a ymm or a zmm), on the AVX2 encoder's fields (rans.h,
// RansEncodeTables: e = f | start << 13 | (L - 1) << 25, m = the magic less 2^32): a lane
// emits the low 16 bits of its state x where x >= f << (32 - p), i.e. x >> (32 - p) >= f (the
// emitting lanes' words stored below w_pos in lane order); then x' = x + start + q * (2^p - f)
// modulo 2^32 like the scalar encoder, from the renormalised x and q its floor(x / f):
// q = (h + ((x - h) >> 1)) >> (L - 1) with h = hi32(x * m); q = x for f = 1 (L = 0).
// kQuotientFirst: q from the state before renormalising, as Step8 takes it (an emitting lane's
// floor((x >> 16) / f) is floor(x / f) >> 16; the magic divides every x < 2^32 exactly), which
// takes the renormalisation off the state's chain for one operation more: the 8-lane kernel
// (one chain a payload, two payloads in flight) ran stories260K's file encode in 261-267 us
// instead of 264-272; the 16-lane one, bound by its operations, 1.2% slower (tinystories-hd64's
// codes, best of five alternating rounds: 521.7 against 515.9 us), so it renormalises first.
// kLaneShifts: each lane at its own precision (full and renorm_shifts hold 2^p and 32 - p).
template <int kLanes, bool kQuotientFirst, bool kLaneShifts = false>
struct Step32 {
  using L = Lanes32<kLanes>;
  using V = typename L::V;
  V mask13, mask12, one, full, renorm_shifts;
  __m128i renorm_shift;
  explicit Step32(int precision)
      : mask13(L::set1(0x1fff)),
        mask12(L::set1(0xfff)),
        one(L::set1(1)),
        full(L::set1(1 << precision)),
        renorm_shifts(L::set1(32 - precision)),
        renorm_shift(_mm_cvtsi32_si128(32 - precision)) {}
  Step32(V lane_full, V lane_shifts) requires(kLaneShifts)
      : mask13(L::set1(0x1fff)),
        mask12(L::set1(0xfff)),
        one(L::set1(1)),
        full(lane_full),
        renorm_shifts(lane_shifts),
        renorm_shift(_mm_setzero_si128()) {}
  __attribute__((always_inline)) void operator()(V& xs, V e, V m, uint16_t* words,
                                                 size_t& w_pos) const {
    (*this)(xs, e, m, [&](typename L::Mask emit, V s) { L::store_words(emit, s, words, w_pos); });
  }
  // The same, the emitting lanes' words stored by store(emit, states).
  template <class Store>
  __attribute__((always_inline)) void operator()(V& xs, V e, V m, Store&& store) const {
    const V f = L::and_(e, mask13);
    V s = xs;
    const auto emit = L::ge(kLaneShifts ? L::srlv(s, renorm_shifts) : L::srl(s, renorm_shift), f);
    store(emit, s);
    if constexpr (!kQuotientFirst) s = L::srli16(s, emit);
    const V h = L::mulhi(s, m);
    V q = L::srlv(L::add(h, L::template srli<1>(L::sub(s, h))), L::template srli<25>(e));
    q = L::mov(q, L::eq(f, one), s);
    if constexpr (kQuotientFirst) q = L::srli16(q, emit), s = L::srli16(s, emit);
    const V bias = L::and_(L::template srli<13>(e), mask12);
    xs = L::add(L::add(s, bias), L::mullo(q, L::sub(full, f)));
  }
};

// The 16-lane kernel's entries (encode_lanes32_16): the AVX2 encoder's two 32-bit tables
// (RansEncodeTables::avx2_entry, avx2_magic) for models of at most 16 * kRegs <= 64 entries
// whose channel count divides 16 (head_dim 8, say), each held in kRegs registers: lane j's
// entry (j % dim) * n_syms + symbol picked by a permute of one register or a pair (two pairs
// blended on the index's bit 5).
template <int kRegs>
class Held16 {
 public:
  static_assert(kRegs == 1 || kRegs == 2 || kRegs == 4);
  Held16(const RansEncodeTables& t, size_t dim) {
    const size_t n_syms = static_cast<size_t>(t.n_syms), n = dim * n_syms;  // <= 16 * kRegs
    for (size_t i = 0; i < kRegs; ++i) {
      const size_t have = n > 16 * i ? std::min<size_t>(16, n - 16 * i) : 0;
      const auto m = static_cast<__mmask16>((1u << have) - 1);
      entry_[i] = _mm512_maskz_loadu_epi32(m, t.avx2_entry + 16 * i);
      magic_[i] = _mm512_maskz_loadu_epi32(m, t.avx2_magic + 16 * i);
    }
    alignas(64) int32_t r[16];
    for (size_t j = 0; j < 16; ++j) r[j] = static_cast<int32_t>((j % dim) * n_syms);
    row_ = _mm512_load_si512(r);
  }
  void next16(const uint8_t* sym, __m512i& e, __m512i& m) const {
    const __m512i idx = _mm512_add_epi32(
        row_, _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sym))));
    e = pick(entry_, idx);
    m = pick(magic_, idx);
  }

 private:
  static __m512i pick(const __m512i* table, __m512i idx) {
    if constexpr (kRegs == 1) return _mm512_permutexvar_epi32(idx, table[0]);
    const __m512i low = _mm512_permutex2var_epi32(table[0], idx, table[1]);
    if constexpr (kRegs == 2) return low;
    return _mm512_mask_blend_epi32(_mm512_test_epi32_mask(idx, _mm512_set1_epi32(32)), low,
                                   _mm512_permutex2var_epi32(table[2], idx, table[3]));
  }
  __m512i entry_[kRegs], magic_[kRegs], row_;
};

// The same tables for models of at most kSyms (2, 4 or 8) symbols whose channel count is a
// multiple of 16 (up to kMaxBlendDim): each vector's lanes are a block of 16 consecutive
// channels, stepping back by 16 elements a call from the last 16; row s of a block (in `rows`:
// entries, then multipliers, 16 each) holds symbol s's fields of its lanes, picked by kSyms - 1
// blends per field on the symbols' bits (BlendedEntries' way, on 32-bit fields).
template <int kSyms>
class Rows16 {
 public:
  static_assert(kSyms == 2 || kSyms == 4 || kSyms == 8);
  Rows16(const RansEncodeTables& t, size_t dim, size_t end, uint32_t* rows)
      : rows_(rows), dim_(dim), chan_((end - 16) % dim) {
    const size_t n_syms = static_cast<size_t>(t.n_syms);  // <= kSyms
    for (size_t b = 0; b < dim / 16; ++b) {
      for (size_t s = 0; s < kSyms; ++s) {
        uint32_t* const row = rows + (b * kSyms + s) * 32;
        for (size_t j = 0; j < 16; ++j) {
          const size_t i = (16 * b + j) * n_syms + s;
          row[j] = s < n_syms ? t.avx2_entry[i] : 0;
          row[16 + j] = s < n_syms ? t.avx2_magic[i] : 0;
        }
      }
    }
  }
  void next16(const uint8_t* sym, __m512i& e, __m512i& m) {
    const __m128i sv = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sym));
    const __mmask16 b0 = _mm_test_epi8_mask(sv, _mm_set1_epi8(1));
    const __mmask16 b1 = _mm_test_epi8_mask(sv, _mm_set1_epi8(2));
    const __mmask16 b2 = _mm_test_epi8_mask(sv, _mm_set1_epi8(4));
    const uint32_t* const block = rows_ + chan_ / 16 * kSyms * 32;
    chan_ = chan_ >= 16 ? chan_ - 16 : chan_ + dim_ - 16;
    const __mmask16 bits[3] = {b0, b1, b2};
    const auto pick = [&](int field) {
      return pick_by_symbol_bits<kSyms>(
          [&](int s) { return _mm512_load_si512(block + 32 * s + 16 * field); },
          [&](int bit, __m512i u, __m512i v) { return _mm512_mask_blend_epi32(bits[bit], u, v); });
    };
    e = pick(0);
    m = pick(1);
  }

 private:
  const uint32_t* rows_;
  size_t dim_, chan_;
};

// The same tables for any other model: both fields gathered, 16 lanes a gather, indexed by one
// vector of channel * n_syms + symbol whose channels step back by 16 elements each call, from
// the last 16 elements.
class Gathered16 {
 public:
  Gathered16(const RansEncodeTables& t, size_t dim, size_t end)
      : entry_(reinterpret_cast<const int*>(t.avx2_entry)),
        magic_(reinterpret_cast<const int*>(t.avx2_magic)),
        wrap_v_(_mm512_set1_epi32(static_cast<int>(dim) * t.n_syms)),
        step_v_(_mm512_set1_epi32(static_cast<int>(16 % dim) * t.n_syms)) {
    alignas(64) int32_t r0[16];  // element end - 16 + j is lane j
    for (int j = 0; j < 16; ++j) r0[j] = static_cast<int32_t>((end - 16 + j) % dim) * t.n_syms;
    row_ = _mm512_load_si512(r0);
  }
  void next16(const uint8_t* sym, __m512i& e, __m512i& m) {
    const __m512i idx = _mm512_add_epi32(
        row_, _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sym))));
    e = _mm512_i32gather_epi32(idx, entry_, 4);
    m = _mm512_i32gather_epi32(idx, magic_, 4);
    row_ = _mm512_sub_epi32(row_, step_v_);
    row_ = _mm512_mask_add_epi32(row_, _mm512_cmplt_epi32_mask(row_, _mm512_setzero_si512()), row_,
                                 wrap_v_);
  }

 private:
  const int *entry_, *magic_;
  __m512i wrap_v_, step_v_, row_;
};

// 32 lanes as two vectors of 16 32-bit states, the entries from the AVX2 encoder's tables
// (Held16, Rows16, Gathered16) and the AVX2 encoder's step on 16 lanes: half the vectors of the
// 64-bit kernel for the arithmetic, and no 64-bit entry to split. Lanes 16..31 code before lanes
// 0..15, so their words lie above.
template <class Entries>
__attribute__((noinline)) size_t encode_lanes32_16(Entries entries, int precision,
                                                   const uint8_t* symbols, size_t end, uint32_t* x,
                                                   uint16_t* words, size_t w_pos) {
  const Step32<16, false> code(precision);
  // One vector's step on the 16 elements at sym.
  const auto step = [&](__m512i & xs, const uint8_t* sym) __attribute__((always_inline)) {
    __m512i e, m;
    entries.next16(sym, e, m);
    code(xs, e, m, words, w_pos);
  };
  __m512i x0 = _mm512_loadu_si512(x), x1 = _mm512_loadu_si512(x + 16);
  for (size_t i0 = end; i0 >= 32; i0 -= 32) {
    step(x1, symbols + i0 - 16);
    step(x0, symbols + i0 - 32);
  }
  _mm512_storeu_si512(x, x0);
  _mm512_storeu_si512(x + 16, x1);
  return w_pos;
}

// A payload's steps left, alone, in 32-bit lanes.
template <class E32>
__attribute__((noinline)) void lanes8_32(Lanes8& p, E32 entries) {
  const Step32<8, true> step(p.t.precision);
  __m256i xs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.x));
  const uint8_t* const symbols = p.symbols;
  uint16_t* const words = p.words;
  size_t i = p.end, w = p.w_pos;
  for (; i >= 8; i -= 8) {
    __m256i e, m;
    entries.next8(symbols + i - 8, e, m);
    step(xs, e, m, words, w);
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p.x), xs);
  p.end = i;
  p.w_pos = w;
}

// Two payloads in lockstep in 32-bit lanes, while both have steps left (encode_lanes8_pair's
// way).
template <class E32>
__attribute__((noinline)) void lanes8_32_pair(Lanes8& a, E32& entries_a, Lanes8& b,
                                              E32& entries_b) {
  E32 ea = entries_a, eb = entries_b;
  const Step32<8, true> step_a(a.t.precision), step_b(b.t.precision);
  const uint8_t* const symbols_a = a.symbols;
  const uint8_t* const symbols_b = b.symbols;
  uint16_t* const words_a = a.words;
  uint16_t* const words_b = b.words;
  __m256i xa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.x));
  __m256i xb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.x));
  size_t ia = a.end, ib = b.end, wa = a.w_pos, wb = b.w_pos;
  for (; ia >= 8 && ib >= 8; ia -= 8, ib -= 8) {
    __m256i e_a, m_a, e_b, m_b;
    ea.next8(symbols_a + ia - 8, e_a, m_a);
    eb.next8(symbols_b + ib - 8, e_b, m_b);
    step_a(xa, e_a, m_a, words_a, wa);
    step_b(xb, e_b, m_b, words_b, wb);
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(a.x), xa);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(b.x), xb);
  entries_a = ea;
  entries_b = eb;
  a.end = ia;
  b.end = ib;
  a.w_pos = wa;
  b.w_pos = wb;
}

// Two payloads of different kinds of entries: one after the other.
template <class EA, class EB>
void lanes8_32_both(Lanes8& a, EA& ea, Lanes8& b, EB& eb) {
  lanes8_32(a, ea);
  lanes8_32(b, eb);
}
// Of the same kind: in lockstep, then each one's rest alone.
template <class E32>
void lanes8_32_both(Lanes8& a, E32& ea, Lanes8& b, E32& eb) {
  lanes8_32_pair(a, ea, b, eb);
  lanes8_32(a, ea);
  lanes8_32(b, eb);
}

// Two 4-lane payloads of one shape side by side in a ymm's 32-bit lanes (a's lanes 0..3, b's
// 4..7), each at its own precision and into its own words: Blended32's fields and blends, from
// rows per step phase (a lane's channel repeats every `period` steps) that hold both payloads'
// channels. kSyms: 2, 4 or 8.
template <int kSyms>
__attribute__((noinline)) void lanes4_pair_32(const uint64_t* entries, RansLanes4& a, RansLanes4& b,
                                              size_t period, uint32_t* rows) {
  const size_t dim = a.dim, n_syms = a.n_syms, end = a.end;
  RansLanes4* const side[2] = {&a, &b};
  alignas(32) int32_t full[8], shifts[8];
  alignas(32) uint32_t x[8];
  for (size_t l = 0; l < 8; ++l) {
    const RansLanes4& p = *side[l / 4];
    const size_t j = l % 4;
    full[l] = 1 << p.precision;
    shifts[l] = 32 - p.precision;
    x[l] = p.x[j];
    for (size_t q = 0; q < period; ++q) {
      // Lane j's element at step q: end - 4 + j - 4q (mod dim: 4 * period is a multiple).
      const size_t c = (end - 4 + j + (4 * period - 4 * q)) % dim;
      for (size_t s = 0; s < kSyms; ++s) {
        uint32_t* const row = rows + (q * kSyms + s) * 16;
        const uint64_t n = s < n_syms ? entries[p.base + c * n_syms + s] : 0;
        narrow_fields(n, p.precision, row[l], row[8 + l]);
      }
    }
  }
  const Step32<8, true, true> step(_mm256_load_si256(reinterpret_cast<const __m256i*>(full)),
                                   _mm256_load_si256(reinterpret_cast<const __m256i*>(shifts)));
  __m256i xs = _mm256_load_si256(reinterpret_cast<const __m256i*>(x));
  const uint8_t *const sym_a = a.symbols, *const sym_b = b.symbols;
  uint16_t *const words_a = a.words, *const words_b = b.words;
  size_t wa = a.w_pos, wb = b.w_pos, q = 0;
  for (size_t i = end; i >= 4; i -= 4) {
    uint32_t sa, sb;
    std::memcpy(&sa, sym_a + i - 4, 4);
    std::memcpy(&sb, sym_b + i - 4, 4);
    const __m128i sv =
        _mm_insert_epi32(_mm_cvtsi32_si128(static_cast<int>(sa)), static_cast<int>(sb), 1);
    const __mmask8 bits[3] = {static_cast<__mmask8>(_mm_test_epi8_mask(sv, _mm_set1_epi8(1))),
                              static_cast<__mmask8>(_mm_test_epi8_mask(sv, _mm_set1_epi8(2))),
                              static_cast<__mmask8>(_mm_test_epi8_mask(sv, _mm_set1_epi8(4)))};
    const uint32_t* const block = rows + q * kSyms * 16;
    q = q + 1 == period ? 0 : q + 1;
    const auto pick = [&](int field) {
      return pick_by_symbol_bits<kSyms>(
          [&](int s) {
            return _mm256_load_si256(reinterpret_cast<const __m256i*>(block + 16 * s + 8 * field));
          },
          [&](int bit, __m256i u, __m256i v) { return _mm256_mask_blend_epi32(bits[bit], u, v); });
    };
    step(xs, pick(0), pick(1), [&](__mmask8 emit, __m256i s) {
      Lanes32<8>::store_words(static_cast<__mmask8>(emit & 0x0f), s, words_a, wa);
      Lanes32<8>::store_words(static_cast<__mmask8>(emit & 0xf0), s, words_b, wb);
    });
  }
  _mm256_store_si256(reinterpret_cast<__m256i*>(x), xs);
  for (size_t l = 0; l < 8; ++l) side[l / 4]->x[l % 4] = x[l];
  a.w_pos = wa;
  b.w_pos = wb;
  a.end = b.end = end % 4;
}

// f(entries) with t's Blended32 entries (lanes8_takes32(dim, t.n_syms) holds).
template <class F>
void with_blended32(const RansEncodeTables& t, size_t dim, size_t end, uint32_t* rows, F&& f) {
  if (8 % dim == 0) {  // every vector of 8 lanes sees the same channels
    if (t.n_syms <= 2) return f(Blended32<2, true>(t, dim, end, rows));
    if (t.n_syms <= 4) return f(Blended32<4, true>(t, dim, end, rows));
    return f(Blended32<8, true>(t, dim, end, rows));
  }
  if (t.n_syms <= 2) return f(Blended32<2, false>(t, dim, end, rows));  // blocks of 8 channels
  if (t.n_syms <= 4) return f(Blended32<4, false>(t, dim, end, rows));
  return f(Blended32<8, false>(t, dim, end, rows));
}

// Rows of the widest model with_blended32 loads.
constexpr size_t kBlended32Rows = kMaxBlendDim / 8 * 8 * 16;

}  // namespace

bool rans_encode_avx512_takes16(size_t dim, int n_syms) {
  // 24, 40, 56, ... channels (neither held in registers nor blocks of 16) of at most 8 symbols
  // keep the 64-bit kernel's blends of 8-channel rows (not measured against 16-lane gathers).
  return !(16 % dim != 0 && dim % 16 != 0 && dim % 8 == 0 && dim <= kMaxBlendDim && n_syms <= 8);
}

size_t rans_encode_avx512_16(const RansEncodeTables& t, const uint8_t* symbols, size_t dim,
                             size_t end, uint32_t* x, uint16_t* words, size_t w_pos) {
  const size_t n = dim * static_cast<size_t>(t.n_syms);
  const auto run = [&](auto entries) {
    return encode_lanes32_16(entries, t.precision, symbols, end, x, words, w_pos);
  };
  if (16 % dim == 0 && n <= 16) return run(Held16<1>(t, dim));
  if (16 % dim == 0 && n <= 32) return run(Held16<2>(t, dim));
  if (16 % dim == 0 && n <= 64) return run(Held16<4>(t, dim));
  if (dim % 16 != 0 || dim > kMaxBlendDim || t.n_syms > 8) return run(Gathered16(t, dim, end));
  alignas(64) uint32_t rows[kMaxBlendDim / 16 * 8 * 32];
  if (t.n_syms <= 2) return run(Rows16<2>(t, dim, end, rows));
  if (t.n_syms <= 4) return run(Rows16<4>(t, dim, end, rows));
  return run(Rows16<8>(t, dim, end, rows));
}

bool lanes8_takes32(size_t dim, int n_syms) {
  if (8 % dim == 0) return n_syms <= 4 || (n_syms <= 8 && dim * static_cast<size_t>(n_syms) > 32);
  return dim % 8 == 0 && dim <= kMaxBlendDim && n_syms <= 8;
}

void encode_lanes8_32(Lanes8& p) {
  alignas(64) uint32_t rows[kBlended32Rows];
  with_blended32(p.t, p.dim, p.end, rows, [&](auto entries) { lanes8_32(p, entries); });
}

bool encode_lanes4_pair_32(const uint64_t* entries, RansLanes4& a, RansLanes4& b) {
  // One shape (K and V of a chunk's layer): the rows of both hold a phase's channels.
  if (a.symbols == nullptr || b.symbols == nullptr || a.dim != b.dim || a.n_syms != b.n_syms ||
      a.end != b.end || a.end < 4 || a.n_syms > 8 || a.dim == 0)
    return false;
  const size_t period = a.dim / std::gcd(a.dim, size_t{4});
  if (period > kMaxLanes4Phases) return false;
  alignas(32) uint32_t rows[kMaxLanes4Phases * 8 * 16];
  if (a.n_syms <= 2) {
    lanes4_pair_32<2>(entries, a, b, period, rows);
  } else if (a.n_syms <= 4) {
    lanes4_pair_32<4>(entries, a, b, period, rows);
  } else {
    lanes4_pair_32<8>(entries, a, b, period, rows);
  }
  return true;
}

void encode_lanes8_32_pair(Lanes8& a, Lanes8& b) {
  alignas(64) uint32_t rows_a[kBlended32Rows], rows_b[kBlended32Rows];
  with_blended32(a.t, a.dim, a.end, rows_a, [&](auto ea) {
    with_blended32(b.t, b.dim, b.end, rows_b, [&](auto eb) { lanes8_32_both(a, ea, b, eb); });
  });
}

}  // namespace cachegen::detail
