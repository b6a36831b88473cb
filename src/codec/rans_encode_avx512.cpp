// AVX-512 rANS encoders: the scalar encoder's steps, 8 lanes per vector, each lane's state in a
// 64-bit slot. Within a step of n_lanes elements every lane codes one element, so the lanes of
// a vector are independent; the scalar walk emits their words in decreasing element order at
// decreasing addresses, i.e. in increasing lane order from the lowest address, which is what a
// compress-and-store of the emitting lanes writes. Each lane's entry is picked from registers
// by permutes where the models are small enough (HeldEntries, LoadedEntries), else gathered.
// The bytes are the scalar encoder's (tests compare the paths).
#include <immintrin.h>

#include <algorithm>

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

// The entries of 16 lanes (two vectors of 8) from the symbols at `sym`, lane j's element at
// sym[j]: by two 64-bit gathers indexed by one vector of channel * n_syms + symbol, whose
// channels it steps on by 16 elements each call, from the last 16 elements backwards.
class GatheredEntries {
 public:
  GatheredEntries(const RansEncodeTables& t, size_t dim, size_t end)
      : entries_(t.narrow),
        dim_v_(_mm512_set1_epi32(static_cast<int>(dim))),
        step_v_(_mm512_set1_epi32(static_cast<int>(16 % dim))),
        n_syms_v_(_mm512_set1_epi32(t.n_syms)) {
    // Channels of the last 16 elements: element end - 16 + j is lane j.
    alignas(64) int32_t c0[16];
    for (int j = 0; j < 16; ++j) c0[j] = static_cast<int32_t>((end - 16 + j) % dim);
    chan_ = _mm512_load_si512(c0);
  }
  void next16(const uint8_t* sym, __m512i& lo, __m512i& hi) {
    const __m512i s = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sym)));
    const __m512i idx = _mm512_add_epi32(_mm512_mullo_epi32(chan_, n_syms_v_), s);
    hi = _mm512_i32gather_epi64(_mm512_extracti64x4_epi64(idx, 1), entries_, 8);
    lo = _mm512_i32gather_epi64(_mm512_castsi512_si256(idx), entries_, 8);
    // The next 16 elements' channels: 16 fewer, modulo dim.
    chan_ = _mm512_sub_epi32(chan_, step_v_);
    chan_ = _mm512_mask_add_epi32(chan_, _mm512_cmplt_epi32_mask(chan_, _mm512_setzero_si512()),
                                  chan_, dim_v_);
  }

 private:
  const uint64_t* entries_;
  __m512i dim_v_, step_v_, n_syms_v_, chan_;
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
  void next16(const uint8_t* sym, __m512i& lo, __m512i& hi) const {
    lo = next8(sym);
    hi = next8(sym + 8);
  }

 private:
  __m512i table_[kTables];
  __m512i row_;
};

// The same from memory for models over a multiple of 8 channels with at most 8 symbols: the 8
// lanes of a vector are 8 consecutive channels, whose 8 * n_syms entries (kTables = n_syms
// registers) are consecutive too; loaded for every vector, they are still cheaper than its
// gather on an AMD Zen 4 VM: tinystories-hd64's fused fp16 encode -15% (3 bits), the synthetic
// set's -11%. (Sixteen symbols, 16 registers a vector, were 38% slower than the gathers.)
// Channels step back by 8 elements each call, from the last 8 elements.
template <int kTables>
class LoadedEntries {
 public:
  LoadedEntries(const RansEncodeTables& t, size_t dim, size_t end)
      : entries_(t.narrow),
        n_syms_(static_cast<size_t>(t.n_syms)),
        dim_(dim),
        chan_((end - 8) % dim) {
    alignas(64) int64_t r[8];
    for (size_t j = 0; j < 8; ++j) r[j] = static_cast<int64_t>(j * n_syms_);
    row_ = _mm512_load_si512(r);
  }
  __m512i next8(const uint8_t* sym) {
    const uint64_t* const block = entries_ + chan_ * n_syms_;
    __m512i table[kTables];
    for (int i = 0; i < kTables; ++i) table[i] = _mm512_loadu_si512(block + 8 * i);
    chan_ = chan_ >= 8 ? chan_ - 8 : chan_ + dim_ - 8;
    return pick<kTables>(
        table, _mm512_add_epi64(row_, _mm512_cvtepu8_epi64(
                                          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sym)))));
  }
  void next16(const uint8_t* sym, __m512i& lo, __m512i& hi) {
    hi = next8(sym + 8);
    lo = next8(sym);
  }

 private:
  const uint64_t* entries_;
  size_t n_syms_, dim_, chan_;
  __m512i row_;
};

// Calls f with a pointer to t's entries held in registers or loaded by rows (see there) where
// its models allow, else with nullptr (the caller gathers them).
template <class F>
size_t with_entries(const RansEncodeTables& t, size_t dim, size_t end, F&& f) {
  const size_t n = dim * static_cast<size_t>(t.n_syms);
  if (8 % dim == 0 && n <= 64) {
    if (n <= 16) {
      HeldEntries<2> e(t, dim);
      return f(&e);
    }
    if (n <= 32) {
      HeldEntries<4> e(t, dim);
      return f(&e);
    }
    HeldEntries<8> e(t, dim);
    return f(&e);
  }
  if (dim % 8 == 0) {
    switch (t.n_syms) {
      case 2: {
        LoadedEntries<2> e(t, dim, end);
        return f(&e);
      }
      case 4: {
        LoadedEntries<4> e(t, dim, end);
        return f(&e);
      }
      case 8: {
        LoadedEntries<8> e(t, dim, end);
        return f(&e);
      }
      default:
        break;
    }
  }
  return f(static_cast<HeldEntries<2>*>(nullptr));
}

// 32 lanes: four vectors of 8, the entries of 16 lanes at a time from `entries`, their words
// stored by one compress. (Until the seventeenth session this kernel kept 16 states in 32-bit
// lanes and read 32-bit entries and a double 1 / f per lane, three gathers per 16 lanes: on an
// AMD Zen 4 VM, where a 16-lane 32-bit gather costs as much as two 8-lane 64-bit ones, rANS
// encode of codes +5% on the synthetic set, the same bytes; a 16-lane step on the 64-bit
// entries' halves, split by two permutes, measured 2-3% slower in the nineteenth session.)
template <class Entries>
size_t encode_lanes32(const Step8& step, Entries& entries, const uint8_t* symbols, size_t end,
                      uint32_t* x, uint16_t* words, size_t w_pos) {
  // Lanes 8k..8k+7 in x<k>: named, not an array indexed by the half, which kept them in memory
  // (a store and a reload on every step's chain).
  const auto load = [&](int k) {
    return _mm512_cvtepu32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 8 * k)));
  };
  __m512i x0 = load(0), x1 = load(1), x2 = load(2), x3 = load(3);
  // The 16 elements from `base`: lanes 0..15 of the half in x_lo (0..7) and x_hi (8..15).
  const auto half = [&](size_t base, __m512i& x_lo, __m512i& x_hi) {
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

// 8 lanes: one vector, the entries of a step from `next` (held, loaded or gathered).
template <class NextEntries>
size_t encode_lanes8(const Step8& step, NextEntries&& next, const uint8_t* symbols, size_t end,
                     uint32_t* x, uint16_t* words, size_t w_pos) {
  __m512i xs = _mm512_cvtepu32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
  for (size_t i0 = end; i0 >= 8; i0 -= 8) {
    const __m512i e = next(symbols + i0 - 8);
    const __m512i before = xs;
    const __mmask8 emit = step(xs, e);
    const int n_emit = __builtin_popcount(static_cast<unsigned>(emit));
    const __m128i packed = _mm512_cvtepi64_epi16(_mm512_maskz_compress_epi64(emit, before));
    w_pos -= static_cast<size_t>(n_emit);
    _mm_mask_storeu_epi16(words + w_pos, static_cast<__mmask8>((1u << n_emit) - 1), packed);
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(x), _mm512_cvtepi64_epi32(xs));
  return w_pos;
}

}  // namespace

size_t rans_encode_avx512(const RansEncodeTables& t, const uint8_t* symbols, size_t dim, size_t end,
                          uint32_t* x, uint16_t* words, size_t w_pos) {
  const Step8 step(t.precision);
  return with_entries(t, dim, end, [&](auto* entries) {
    if (entries) return encode_lanes32(step, *entries, symbols, end, x, words, w_pos);
    GatheredEntries gathered(t, dim, end);
    return encode_lanes32(step, gathered, symbols, end, x, words, w_pos);
  });
}

size_t rans_encode_avx512_lanes8(const RansEncodeTables& t, const uint8_t* symbols, size_t dim,
                                 size_t end, uint32_t* x, uint16_t* words, size_t w_pos) {
  const Step8 step(t.precision);
  const auto run = [&](auto& entries) {
    return encode_lanes8(
        step, [&](const uint8_t* sym) { return entries.next8(sym); }, symbols, end, x, words,
        w_pos);
  };
  return with_entries(t, dim, end, [&](auto* entries) {
    if (entries) return run(*entries);
    GatheredEntries8 gathered(t, dim, end);
    return run(gathered);
  });
}

}  // namespace cachegen::detail
