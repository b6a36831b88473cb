// Internal: the channel histogram kernels (the codec's model search counts symbols per
// channel), part of kernels_impl.h's kernel bodies: included by it inside the same per-target
// namespace, compiled with each target's flags.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__AVX512BW__)
#include <immintrin.h>
#endif

namespace cachegen::detail::CACHEGEN_KERNEL_NS {

// 64-byte blocks of whole rows (64 % dim == 0) against S symbols, the byte counters in
// registers (GCC/Clang vector extension: one compare and one subtract per symbol and vector;
// AVX-512BW: 2 symbols by a compare into a mask and a masked add, 4 to 64 by bit position,
// count_run_by_bits); counts flushed every 255 blocks. The last symbol is not counted: its
// count is the values seen less the others' (every symbol is below S), which saves 1/8 to 1/2
// of the compares. Returns the rows counted. The vectors are
// the target's own width, a block's parts in turn over the run (in L1): a compare of vectors
// wider than the target's is lowered to one byte at a time (GCC 12, 64-byte vectors on AVX2:
// ~60% of an AVX2 encode).
#if defined(__AVX512BW__)
constexpr size_t kHistVecBytes = 64;
#elif defined(__AVX2__)
constexpr size_t kHistVecBytes = 32;
#else
constexpr size_t kHistVecBytes = 16;
#endif
typedef uint8_t HistBytes __attribute__((vector_size(kHistVecBytes)));
// acc + 1 in the bytes of x equal to v.
inline HistBytes count_matches(HistBytes acc, HistBytes x, uint8_t v) {
#if defined(__AVX512BW__)
  return reinterpret_cast<HistBytes>(_mm512_mask_add_epi8(
      reinterpret_cast<__m512i>(acc),
      _mm512_cmpeq_epi8_mask(reinterpret_cast<__m512i>(x), _mm512_set1_epi8(static_cast<char>(v))),
      reinterpret_cast<__m512i>(acc), _mm512_set1_epi8(1)));
#else
  return acc - (x == v);  // -1 per match
#endif
}
#if defined(__AVX512BW__)
// A carry-save adder of bit vectors: l = a ^ b ^ c, h = majority(a, b, c).
static inline void carry_save(__m512i& h, __m512i& l, __m512i a, __m512i b, __m512i c) {
  l = _mm512_ternarylogic_epi32(a, b, c, 0x96);
  h = _mm512_ternarylogic_epi32(a, b, c, 0xe8);
}
// Counts by bit position (Harley-Seal) of bytes with bits 0..kBits-1 in use: a carry-save tree
// sums 16 vectors into bit planes of weight 1, 2, 4, 8 and one of 16, whose bits go to byte
// counters; a position's count in a byte lane is 16 * sixteens + the planes' bits there.
template <int kBits>
struct BitPositionCounts {
  __m512i ones, twos, fours, eights, sixteens[kBits];
  BitPositionCounts() {
    ones = twos = fours = eights = _mm512_setzero_si512();
    for (int v = 0; v < kBits; ++v) sixteens[v] = _mm512_setzero_si512();
  }
  // The sums of in[0..3] and in[0..7] at the planes below, their carries of weight 4 and 8.
  __m512i add4(const __m512i* in) {
    __m512i twos_a, twos_b, carry;
    carry_save(twos_a, ones, ones, in[0], in[1]);
    carry_save(twos_b, ones, ones, in[2], in[3]);
    carry_save(carry, twos, twos, twos_a, twos_b);
    return carry;
  }
  __m512i add8(const __m512i* in) {
    __m512i carry;
    carry_save(carry, fours, fours, add4(in), add4(in + 4));
    return carry;
  }
  void add16(const __m512i* in) {
    __m512i sixteen;
    carry_save(sixteen, eights, eights, add8(in), add8(in + 8));
    for (int v = 0; v < kBits; ++v) {
      const __mmask64 m =
          _mm512_test_epi8_mask(sixteen, _mm512_set1_epi8(static_cast<char>(1 << v)));
      sixteens[v] = _mm512_mask_add_epi8(sixteens[v], m, sixteens[v], _mm512_set1_epi8(1));
    }
  }
  // Bit v's count per byte lane (at most 255: 16 * sixteens never wraps).
  __m512i count(int v) const {
    const __m512i planes[4] = {ones, twos, fours, eights};
    const __m512i bit = _mm512_set1_epi8(static_cast<char>(1 << v));
    __m512i c = _mm512_slli_epi16(sixteens[v], 4);  // per byte: sixteens[v] <= 15
    for (int k = 0; k < 4; ++k) {
      c = _mm512_mask_add_epi8(c, _mm512_test_epi8_mask(planes[k], bit), c,
                               _mm512_set1_epi8(static_cast<char>(1 << k)));
    }
    return c;
  }
};
// acc[v] (v < S - 1): per byte lane, the blocks of a run (run <= 255, `stride` apart) whose byte
// there is v. Symbols 8k..8k+7 form plane k: a byte becomes the bit 1 << (v - 8k) there (a
// subtract, a min that sends the others to index 8, and a shuffle) and the bits are counted by
// position, a pass over the run (in L1) per plane: about 7 operations per block and plane,
// against S - 1 compares and as many masked adds (7 and 7 at 8 symbols, 63 and 63 at 64; the
// scalar count of wider alphabets is an increment through memory per value).
template <int S>
static void count_run_by_bits(const uint8_t* block, size_t run, size_t stride, HistBytes* acc) {
  static_assert(S == 4 || S == 8 || S == 16 || S == 32 || S == 64);
  constexpr int kPlanes = S <= 8 ? 1 : S / 8, kBits = S < 8 ? S - 1 : 8;
  const __m512i bit_of = _mm512_set4_epi32(0, 0, static_cast<int>(0x80402010), 0x08040201);
  const __m512i eight = _mm512_set1_epi8(8);
  for (int plane = 0; plane < kPlanes; ++plane) {
    const __m512i first = _mm512_set1_epi8(static_cast<char>(8 * plane));
    BitPositionCounts<kBits> counts;
    for (size_t b = 0; b < run; b += 16) {
      __m512i bits[16];
      for (size_t j = 0; j < 16; ++j) {
        // Past the run: 0x80, outside every plane.
        const __m512i x = b + j < run ? _mm512_loadu_si512(block + (b + j) * stride)
                                      : _mm512_set1_epi8(static_cast<char>(0x80));
        // (Below 16 symbols the shuffle alone leaves the others out: x - 8k is 8..15, or has
        // its top bit set.)
        const __m512i at = plane == 0 ? x : _mm512_sub_epi8(x, first);
        bits[j] = _mm512_shuffle_epi8(bit_of, S <= 16 ? at : _mm512_min_epu8(at, eight));
      }
      counts.add16(bits);
    }
    for (int v = 0; v < kBits && 8 * plane + v < S - 1; ++v)
      acc[8 * plane + v] = reinterpret_cast<HistBytes>(counts.count(v));
  }
}
#endif

#if defined(__AVX512BW__)
// 16-bit sums of x's byte lanes j, j + lanes, j + 2 lanes, ... into sums[j] for j < lanes (a
// power of two below 64; sums has room for 8 words at least): halves added in registers (the
// generic loop's widths below 16 were a scalar add through memory per word, a sixth of
// stories260K's histograms).
static inline void fold_lanes(__m512i x, size_t lanes, uint16_t* sums) {
  const __m512i w = _mm512_add_epi16(_mm512_cvtepu8_epi16(_mm512_castsi512_si256(x)),
                                     _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(x, 1)));
  if (lanes == 32) return _mm512_storeu_si512(sums, w);
  const __m256i h = _mm256_add_epi16(_mm512_castsi512_si256(w), _mm512_extracti64x4_epi64(w, 1));
  if (lanes == 16) return _mm256_storeu_si256(reinterpret_cast<__m256i*>(sums), h);
  __m128i q = _mm_add_epi16(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
  if (lanes <= 4) q = _mm_add_epi16(q, _mm_srli_si128(q, 8));
  if (lanes <= 2) q = _mm_add_epi16(q, _mm_srli_si128(q, 4));
  if (lanes == 1) q = _mm_add_epi16(q, _mm_srli_si128(q, 2));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(sums), q);
}
#endif

template <int S>
static size_t block_histograms(const uint8_t* symbols, size_t rows, size_t dim, uint32_t* counts) {
  // 64-byte blocks: `per` whole rows when dim divides 64, else (64 divides dim) one 64-column
  // piece of a row, each piece a pass over the rows.
  const size_t per = dim <= 64 ? 64 / dim : 1, pieces = dim <= 64 ? 1 : dim / 64;
  const size_t stride = per * dim;  // from one block of a piece to the next
  // Pieces of 64 channels (per == 1) add each run's byte counters to 32-bit counters by column,
  // a widening vector add, and leave the piece's counts once at its end; the byte counters of
  // several rows a block are summed per channel at every run's end (a scalar add per channel
  // and symbol per run was a fifth of the kernel on 64 channels).
  alignas(64) uint32_t wide[S - 1][64];
  // A channel's counts of symbols 0..S-2 (count(v)) and of the last one, the rest of `seen`.
  const auto add_counts = [](uint32_t* channel, auto count, uint32_t seen) {
    uint32_t others = 0;
    for (int v = 0; v < S - 1; ++v) {
      channel[v] += count(v);
      others += count(v);
    }
    channel[S - 1] += seen - others;
  };
  size_t r = 0;
  for (size_t piece = 0; piece < pieces; ++piece) {
    r = 0;
    if (per == 1) std::memset(wide, 0, sizeof wide);
    for (size_t blocks = rows / per; blocks > 0;) {
      const size_t run = blocks < 255 ? blocks : 255;
      for (size_t part = 0; part < 64; part += kHistVecBytes) {
        HistBytes acc[S - 1];
        const uint8_t* block = symbols + r * dim + piece * 64 + part;
#if defined(__AVX512BW__)
        if constexpr (S >= 4) {
          count_run_by_bits<S>(block, run, stride, acc);
        } else
#endif
        {
          for (int v = 0; v < S - 1; ++v) acc[v] = HistBytes{};
          for (size_t b = 0; b < run; ++b, block += stride) {
            HistBytes x;
            std::memcpy(&x, block, kHistVecBytes);
            for (int v = 0; v < S - 1; ++v)
              acc[v] = count_matches(acc[v], x, static_cast<uint8_t>(v));
          }
        }
        uint8_t bytes[S - 1][kHistVecBytes];
        for (int v = 0; v < S - 1; ++v) std::memcpy(bytes[v], &acc[v], kHistVecBytes);
        if (per == 1) {
          for (int v = 0; v < S - 1; ++v) {
            for (size_t j = 0; j < kHistVecBytes; ++j) wide[v][part + j] += bytes[v][j];
          }
          continue;
        }
        // Each channel's bytes summed first, by halving the vector (widened to 16 bits) down
        // to one row (a strided sum per channel and symbol before: encode of stories260K's
        // codes -1%; an add per byte into its counter, earlier, was a chain through memory).
        const size_t lanes = dim < kHistVecBytes ? dim : kHistVecBytes;
        // Byte j's channel: c0 + j (dim and the vector width are powers of two: a vector
        // never crosses the end of a row but where it holds whole rows).
        const size_t c0 = part % dim;
        // Values of one channel in this part over the run.
        const auto seen = static_cast<uint32_t>(run * (kHistVecBytes / lanes));
        uint16_t sums[S - 1][kHistVecBytes];
        for (int v = 0; v < S - 1; ++v) {
#if defined(__AVX512BW__)
          fold_lanes(reinterpret_cast<__m512i>(acc[v]), lanes, sums[v]);
#else
          for (size_t k = 0; k < kHistVecBytes; ++k) sums[v][k] = bytes[v][k];
          for (size_t width = kHistVecBytes / 2; width >= lanes; width /= 2) {
            for (size_t k = 0; k < width; ++k)
              sums[v][k] = static_cast<uint16_t>(sums[v][k] + sums[v][k + width]);
          }
#endif
        }
        for (size_t j = 0; j < lanes; ++j)
          add_counts(
              counts + (c0 + j) * S, [&](int v) { return uint32_t{sums[v][j]}; }, seen);
      }
      r += run * per;
      blocks -= run;
    }
    if (per == 1) {
      for (size_t j = 0; j < 64; ++j) {
        add_counts(
            counts + (piece * 64 + j) * S, [&](int v) { return wide[v][j]; },
            static_cast<uint32_t>(r));
      }
    }
  }
  return r;
}

static void channel_histograms(const uint8_t* symbols, size_t rows, size_t dim, size_t n_syms,
                               uint32_t* counts) {
  size_t r = 0;
  if (dim >= 1 && (64 % dim == 0 || dim % 64 == 0) &&
      (n_syms == 2 || n_syms == 4 || n_syms == 8 || n_syms == 16)) {
    r = n_syms == 2   ? block_histograms<2>(symbols, rows, dim, counts)
        : n_syms == 4 ? block_histograms<4>(symbols, rows, dim, counts)
        : n_syms == 8 ? block_histograms<8>(symbols, rows, dim, counts)
                      : block_histograms<16>(symbols, rows, dim, counts);
#if defined(__AVX512BW__)
  } else if (dim >= 1 && (64 % dim == 0 || dim % 64 == 0) && (n_syms == 32 || n_syms == 64)) {
    // 5- and 6-bit codes (level high) by bit position too, on AVX-512 only (by compares, 31
    // or 63 a vector, they would cost more than the increments below).
    r = n_syms == 32 ? block_histograms<32>(symbols, rows, dim, counts)
                     : block_histograms<64>(symbols, rows, dim, counts);
#endif
  } else if (n_syms <= 16 && dim >= 1 && dim <= 64) {
    // Small alphabets: blocks of whole rows (up to 64 bytes) are compared with every symbol
    // and the matches counted per block position in bytes, flushed every 255 blocks. Vector
    // compares replace one increment per value, whose loads and stores were the cost.
    constexpr size_t kRun = 255;
    const size_t per = 64 / dim, len = per * dim;
    uint8_t acc[16 * 64];
    for (size_t blocks = rows / per; blocks > 0;) {
      const size_t run = blocks < kRun ? blocks : kRun;
      std::memset(acc, 0, sizeof acc);
      for (size_t b = 0; b < run; ++b, r += per) {
        const uint8_t* block = symbols + r * dim;
        for (size_t v = 0; v < n_syms; ++v) {
          uint8_t* a = acc + v * 64;
          const uint8_t sym = static_cast<uint8_t>(v);  // a byte compare, not a widened one
          for (size_t j = 0; j < len; ++j)
            a[j] = static_cast<uint8_t>(a[j] + static_cast<uint8_t>(block[j] == sym));
        }
      }
      for (size_t v = 0; v < n_syms; ++v) {
        for (size_t j = 0, c = 0; j < len; ++j, c = c + 1 == dim ? 0 : c + 1)
          counts[c * n_syms + v] += acc[v * 64 + j];
      }
      blocks -= run;
    }
  }
  if (dim == 1 && n_syms <= 256 && rows - r >= 64) {
    // One channel (a pooled table): eight tables in turn, one 8-byte load per eight symbols.
    uint32_t part[7 * 256] = {};
    uint32_t* const t[8] = {counts,         part,           part + 256,     part + 2 * 256,
                            part + 3 * 256, part + 4 * 256, part + 5 * 256, part + 6 * 256};
    for (; r + 8 <= rows; r += 8) {
      uint64_t w;
      std::memcpy(&w, symbols + r, 8);
      for (int k = 0; k < 8; ++k) ++t[k][(w >> (8 * k)) & 0xff];
    }
    for (size_t v = 0; v < n_syms; ++v) {
      for (int k = 1; k < 8; ++k) counts[v] += t[k][v];
    }
  }
  if (dim < 4 && n_syms <= 256 && rows - r >= 64) {
    // Large alphabets over one to three channels (the lossless planes' pooled tables): rows in
    // turn go to four tables, so that a run of one symbol does not make every increment wait
    // on the one before (a store-to-load chain was most of this kernel on such planes).
    const size_t n = dim * n_syms;
    uint32_t part[3 * 3 * 256] = {};
    uint32_t* const table[4] = {counts, part, part + n, part + 2 * n};
    for (; r + 4 <= rows; r += 4) {
      for (size_t k = 0; k < 4; ++k) {
        const uint8_t* row = symbols + (r + k) * dim;
        for (size_t c = 0; c < dim; ++c) ++table[k][c * n_syms + row[c]];
      }
    }
    for (size_t i = 0; i < n; ++i) counts[i] += part[i] + part[n + i] + part[2 * n + i];
  }
  if (dim * n_syms > 4096 && rows - r >= 64) {
    // Tables past 16 KB (the lossless planes' 256 symbols over 64..128 channels: 64-128 KB):
    // an increment per value into such a table misses L1 on most values, so channels go in
    // blocks whose tables fit it, each block a pass over the rows (the rows stay in L2).
    const size_t block = 4096 / n_syms > 0 ? 4096 / n_syms : 1;
    for (size_t c0 = 0; c0 < dim; c0 += block) {
      const size_t c1 = c0 + block < dim ? c0 + block : dim;
      for (size_t i = r; i < rows; ++i) {
        const uint8_t* row = symbols + i * dim;
        for (size_t c = c0; c < c1; ++c) ++counts[c * n_syms + row[c]];
      }
    }
    r = rows;
  }
  for (; r < rows; ++r) {
    const uint8_t* row = symbols + r * dim;
    uint32_t* table = counts;  // channel c's (a pointer stepped by n_syms, held in a register)
    for (size_t c = 0; c < dim; ++c, table += n_syms) ++table[row[c]];
  }
}

// The present symbols of a histogram, ascending: sym[m] = s and count[m] = counts[s] for each
// s < n with counts[s] != 0; returns m. sym and count have room for n entries. Branch-free
// (absent symbols, scattered over wide alphabets, mispredicted): every symbol is written at m,
// which advances past present ones only. AVX-512: 16 counts a step, the present ones
// compressed in a register and stored under a mask (a compressing store to memory is
// microcoded on Zen 4).
static size_t present_symbols(const uint32_t* counts, size_t n, uint16_t* sym, uint32_t* count) {
  size_t m = 0, s = 0;
#if defined(__AVX512BW__)
  __m512i index = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (; s + 16 <= n; s += 16) {
    const __m512i c = _mm512_loadu_si512(counts + s);
    const __mmask16 present = _mm512_test_epi32_mask(c, c);
    const int k = __builtin_popcount(present);
    const __mmask16 first_k = static_cast<__mmask16>((1u << k) - 1);
    _mm512_mask_storeu_epi32(count + m, first_k, _mm512_maskz_compress_epi32(present, c));
    _mm512_mask_cvtepi32_storeu_epi16(sym + m, first_k,
                                      _mm512_maskz_compress_epi32(present, index));
    index = _mm512_add_epi32(index, _mm512_set1_epi32(16));
    m += static_cast<size_t>(k);
  }
#endif
  for (; s < n; ++s) {
    sym[m] = static_cast<uint16_t>(s);
    count[m] = counts[s];
    m += counts[s] != 0;
  }
  return m;
}

}  // namespace cachegen::detail::CACHEGEN_KERNEL_NS
