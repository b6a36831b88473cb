// Internal: interleaved rANS over per-channel models (32-bit states, 16-bit renormalisation).
//
// Element i of a [n_rows, dim] symbol matrix (row-major) belongs to channel i % dim and is
// coded by lane i % n_lanes. Decoding walks elements in increasing order; each lane decodes
// its symbol and then, if its state fell below kRansLow, reads the next 16-bit word of the
// shared word stream. The encoder runs the same walk backwards, so all paths (scalar, AVX2,
// AVX-512) see the same words in the same order and produce byte-identical results.
//
// Models: channel c has a table at its own precision t_c (0..kMaxPrecision): symbol s owns
// frequency f_s and cumulative start cum_s with sum f = 2^t_c. The coder runs at the stream
// precision p >= t_c and scales them by 2^(p - t_c), which is exact.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

namespace cachegen::detail {

inline constexpr uint32_t kRansLow = 1u << 16;  // state interval [2^16, 2^32)
inline constexpr int kMaxLanes = 32;
inline constexpr int kMaxPrecision = 12;

// One channel's model as the coder sees it.
struct ChannelTable {
  int t = 0;                   // table precision, sum of freq = 2^t
  std::vector<uint16_t> freq;  // [2^bits]; 0 = absent
  std::vector<uint16_t> cum;   // [2^bits]
};

// Decoding tables for all channels.
//
// Alphabets of up to kMaxSearchSymbols symbols (bits <= 4, the widths CacheGen uses) are
// decoded by comparing the slot against the channel's cumulative frequencies: no per-slot
// table (which costs 2^t entries per channel, megabytes for 128 channels at t = 12, and
// random gathers to read), and SIMD kernels compare 32 lanes of 16-bit slots at once.
// Larger alphabets use a slot table. Entry layout (uint32):
//   bits 0..7 symbol, bits 8..19 freq_t - 1, bits 20..31 cum_t.
// Channel c's entries start at base[c] and are indexed by slot >> shift[c].
inline constexpr int kMaxSearchSymbols = 16;
struct DecodeTables {
  int precision = 0;  // p
  int n_syms = 0;     // 2^bits
  // [dim][n_syms + 1]: cumulative frequency at precision p; cum[c][n_syms] = 2^p.
  std::vector<uint16_t> cum;
  // Slot table, only when n_syms > kMaxSearchSymbols.
  std::vector<uint32_t> entries;
  std::vector<uint32_t> base;   // [dim]
  std::vector<uint32_t> shift;  // [dim], p - t_c
  bool uses_search() const noexcept { return n_syms <= kMaxSearchSymbols; }
};

// f(std::integral_constant<int, NT>{}) for a search alphabet of n_syms = NT + 1 symbols (2, 4,
// 8 or 16): the kernels take their threshold count as a constant. `otherwise` for any other
// alphabet (slot tables).
template <typename R, typename F>
R with_thresholds(int n_syms, R otherwise, F&& f) {
  switch (n_syms) {
    case 2:
      return f(std::integral_constant<int, 1>{});
    case 4:
      return f(std::integral_constant<int, 3>{});
    case 8:
      return f(std::integral_constant<int, 7>{});
    case 16:
      return f(std::integral_constant<int, 15>{});
    default:
      return otherwise;
  }
}
DecodeTables build_decode_tables(std::span<const ChannelTable> channels, int precision);
// The same into `tables`, reusing its storage.
void build_decode_tables(std::span<const ChannelTable> channels, int precision,
                         DecodeTables& tables);
// The tables of `dim` channels that all use `table` (a batch of layout 2): one slot table
// that every channel's base points to, or its cumulative counts once per channel.
void build_shared_decode_tables(const ChannelTable& table, size_t dim, int precision,
                                DecodeTables& tables);

// build_decode_tables writes each symbol's slot entries as a block of kSlotRun entries (see
// there), and kSlotRun entries of padding after the last channel's.
inline constexpr size_t kSlotRun = 16;
// build_decode_tables' slot entries of `channels` (alphabets of more than kMaxSearchSymbols
// symbols), channel after channel, on the AVX2 and AVX-512 paths (rans_decode_avx2.cpp).
void fill_slot_entries_avx2(std::span<const ChannelTable> channels, uint32_t* entries);

inline uint32_t pack_entry(uint32_t sym, uint32_t freq_t, uint32_t cum_t) {
  return sym | ((freq_t - 1) << 8) | (cum_t << 20);
}

// Encodes symbols [n_rows * dim] (row-major): n_lanes little-endian u32 final states and then
// the 16-bit words, written to `out` from byte `at` (at <= out.size()), which then ends there.
// (A kept buffer reused from 0 is not zero-filled again where its old bytes reach.)
void rans_encode(std::span<const uint8_t> symbols, size_t dim,
                 std::span<const ChannelTable> channels, int precision, int n_lanes,
                 std::vector<uint8_t>& out, size_t at);
// The same, appended to `out`.
inline void rans_encode(std::span<const uint8_t> symbols, size_t dim,
                        std::span<const ChannelTable> channels, int precision, int n_lanes,
                        std::vector<uint8_t>& out) {
  rans_encode(symbols, dim, channels, precision, n_lanes, out, out.size());
}

// The AVX2 encoder's tables of a batch's models (RansEncodeTables::avx2_entry, avx2_magic: the
// AVX-512 16-lane kernel's too), made once for the batch's payloads that code with them
// (rans_wide_tables_used): made per payload, a 32-lane slice of 16,384 codes over 64 channels
// spent ~2% of its encode making its 512 entries again.
struct RansWideTables {
  std::vector<uint32_t> entry, magic;  // [channel * n_syms + symbol]
  void build(std::span<const ChannelTable> channels, size_t dim, int precision);
};
// Whether payloads of n_lanes lanes over these models code with RansWideTables here.
bool rans_wide_tables_used(size_t dim, size_t n_syms, int n_lanes);

// rans_encode's arguments, for the pair below (wide: the channels' RansWideTables, made at
// `precision`, or null).
struct RansJob {
  std::span<const uint8_t> symbols;
  size_t dim = 0;
  std::span<const ChannelTable> channels;
  int precision = 0, n_lanes = 0;
  std::vector<uint8_t>* out = nullptr;
  size_t at = 0;
  const RansWideTables* wide = nullptr;
};
// rans_encode of one job.
void rans_encode(const RansJob& job);
// rans_encode of two payloads, the same bytes. An 8-lane payload is one vector whose steps are
// one dependency chain (a step's multiplies and shifts wait on the last step's states), so two
// of them are coded in lockstep on AVX-512: a chunk's short tensors (stories260K's 256-token
// K and V: 8,192 codes each). Two 4-lane payloads (its 64-token chunks' 2,048 codes) share one
// 8-lane step.
void rans_encode_pair(const RansJob& a, const RansJob& b);

// The SIMD encoders' view of the models, entry [channel * n_syms + symbol] at precision p.
// The AVX-512 encoders' entries (narrow) are 64-bit: m - 2^32 | (2^p - f) << 32 | start << 45 |
// L << 58 with L = ceil(log2 f) and m = ceil(2^(32+L) / f), so 2^32 <= m < 2^33. After
// renormalisation x < f * 2^(32-p), and with e = m * f - 2^(32+L) < f, x * e < f^2 * 2^(32-p)
// <= 2^(32+L) (as L <= p): floor(x * m / 2^(32+L)) = floor(x / f), computed as
// ((x * (m - 2^32)) >> 32) + x, shifted right by L (floors nest). The division is exact for
// every x < 2^32, which lets the encoders take it before renormalising.
// The AVX2 encoder's entries (also the AVX-512 16-lane kernel's) are two 32-bit tables: avx2_entry
// f | start << 13 | (L - 1) << 25 (0 for f = 1) and avx2_magic m - 2^32, the narrow entries' parts.
// avx2_entry's value for frequency f, cumulative start and the bases' L (narrow_bases).
inline uint32_t avx2_entry_of(uint32_t f, uint32_t start, uint32_t L) {
  return f | start << 13 | (L > 0 ? L - 1 : 0) << 25;
}
struct RansEncodeTables {
  const uint64_t* narrow = nullptr;
  int n_syms = 0;
  int precision = 0;
  const uint32_t* avx2_entry = nullptr;
  const uint32_t* avx2_magic = nullptr;
};
// Encodes elements [0, end) of a 32-lane payload (end a multiple of 32) backwards from the
// states x[32], writing words downwards from words + w_pos; returns the new w_pos. The same
// steps and bytes as the scalar encoder. From the AVX2 encoder's tables where
// rans_encode_avx512_takes16(dim, n_syms) (16 lanes per vector), else from the narrow ones:
// models of at most 8 symbols over a multiple of 8 channels (not of 16) up to 256.
bool rans_encode_avx512_takes16(size_t dim, int n_syms);
size_t rans_encode_avx512_16(const RansEncodeTables& t, const uint8_t* symbols, size_t dim,
                             size_t end, uint32_t* x, uint16_t* words, size_t w_pos);
size_t rans_encode_avx512(const RansEncodeTables& t, const uint8_t* symbols, size_t dim, size_t end,
                          uint32_t* x, uint16_t* words, size_t w_pos);
// The same for an 8-lane payload (end a multiple of 8, states x[8]).
size_t rans_encode_avx512_lanes8(const RansEncodeTables& t, const uint8_t* symbols, size_t dim,
                                 size_t end, uint32_t* x, uint16_t* words, size_t w_pos);

// Two of them in lockstep (each its own tables; x and w_pos of each updated).
void rans_encode_avx512_lanes8_pair(const RansEncodeTables& ta, const uint8_t* symbols_a,
                                    size_t dim_a, size_t end_a, uint32_t* x_a, uint16_t* words_a,
                                    size_t& w_pos_a, const RansEncodeTables& tb,
                                    const uint8_t* symbols_b, size_t dim_b, size_t end_b,
                                    uint32_t* x_b, uint16_t* words_b, size_t& w_pos_b);

// A 4-lane payload's side of rans_encode_avx512_lanes4_pair: elements [0, end) (end a multiple
// of 4) from the states x[4], words downwards from words + w_pos (updated); its entries (the
// narrow ones) at `base` of the shared table. symbols == nullptr: no payload.
struct RansLanes4 {
  const uint8_t* symbols = nullptr;
  size_t dim = 0, n_syms = 0, end = 0;
  int precision = 0;
  size_t base = 0;
  uint32_t* x = nullptr;
  uint16_t* words = nullptr;
  size_t w_pos = 0;
};
// Two 4-lane payloads as one 8-lane step (a's lanes 0..3, b's 4..7; one alone: the other's lanes
// idle), their entries gathered from one table whose entry `idle` is 0 (a lane with entry 0 keeps
// its state and emits nothing), or, for two of one shape (dim, at most 8 symbols, end), blended
// from rows of that table's entries. The same steps and bytes as the scalar encoder.
void rans_encode_avx512_lanes4_pair(const uint64_t* entries, size_t idle, RansLanes4& a,
                                    RansLanes4& b);

// AVX2: elements [0, end) of a 32- or 8-lane payload (end a multiple of n_lanes), as above.
size_t rans_encode_avx2(const RansEncodeTables& t, const uint8_t* symbols, size_t dim, size_t end,
                        int n_lanes, uint32_t* x, uint16_t* words, size_t w_pos);

// Decodes n symbols from `payload` (states + words, exactly as rans_encode wrote them; any
// other length or a final state other than kRansLow is corrupt_input). `payload_offset` is
// only used in error messages. Uses cachegen::simd_path().
void rans_decode(std::span<const uint8_t> payload, size_t payload_offset,
                 const DecodeTables& tables, size_t dim, int n_lanes, std::span<uint8_t> symbols);

// One payload of a pair decoded together.
struct RansPayload {
  std::span<const uint8_t> payload;
  size_t payload_offset = 0;
  int n_lanes = 0;
  std::span<uint8_t> symbols;
};
// Decodes two independent payloads of the same dim, each with its tables; same results and
// errors as two rans_decode calls (a first, then b). Why: one payload's steps form one
// dependency chain (state -> slot -> interval -> state, and the shared word cursor), which
// leaves the core mostly waiting; the second payload's steps fill those cycles. Payloads with
// equal lane counts (32 or 8) and alphabet sizes run in lockstep on the SIMD paths (32-lane
// slot-table payloads on AVX-512; 8-lane ones of any two slot-table alphabets).
void rans_decode_pair(const RansPayload& a, const DecodeTables& ta, const RansPayload& b,
                      const DecodeTables& tb, size_t dim);
// Four payloads of the same dim: the results and errors of four rans_decode calls in order.
// 8-lane payloads run in lockstep: of one search alphabet on AVX-512 (two pairs packed, see
// rans_decode_avx512.cpp), of slot-table alphabets on AVX2 and AVX-512 (four gather chains);
// 4-lane ones of one search alphabet on AVX-512 as two packed pairs; anything else decodes as
// two pairs.
void rans_decode_quad(std::span<const RansPayload, 4> p, std::span<const DecodeTables* const, 4> t,
                      size_t dim);
// The most payloads rans_decode_group takes.
inline constexpr size_t kMaxDecodeGroup = 10;
// Up to kMaxDecodeGroup payloads of the same dim: the results and errors of rans_decode calls in
// order. Six, eight or ten 8- or 4-lane payloads of one search alphabet on AVX-512 run in
// lockstep as packed pairs (a chunk's three to five layers' K and V); others decode as quads,
// then a pair, then one.
void rans_decode_group(std::span<const RansPayload> p, std::span<const DecodeTables* const> t,
                       size_t dim);

// Kernel contract shared by every path: decode elements [begin, end) where begin is a multiple
// of n_lanes, updating states and the word cursor. Returns the new cursor. Only full steps of
// n_lanes elements whose words are all in bounds (cursor + n_lanes <= n_words) are decoded by
// SIMD kernels; they return early at the first step that would not be. rans_decode then runs
// the kernel once more over a zero-padded copy of the few remaining words (kept only if it read
// none of the padding, as every valid stream does), and the scalar kernel (which checks every
// read) finishes whatever is left.
struct RansDecodeState {
  uint32_t x[kMaxLanes];
  const uint16_t* words;  // may be unaligned: read through memcpy
  size_t n_words;
  size_t cursor;
};
// The scalar kernel decodes all of [begin, end) (any n_lanes) or throws truncated_input.
void rans_decode_scalar(RansDecodeState& st, const DecodeTables& tables, size_t dim, int n_lanes,
                        size_t begin, size_t end, uint8_t* symbols);
// SIMD kernels (n_lanes must be 32 unless named otherwise) return the element index reached, a
// multiple of 32.
size_t rans_decode_avx2(RansDecodeState& st, const DecodeTables& tables, size_t dim, size_t begin,
                        size_t end, uint8_t* symbols);
// The same contract for 8-lane payloads.
size_t rans_decode_avx2_8(RansDecodeState& st, const DecodeTables& tables, size_t dim, size_t begin,
                          size_t end, uint8_t* symbols);
size_t rans_decode_avx512_8(RansDecodeState& st, const DecodeTables& tables, size_t dim,
                            size_t begin, size_t end, uint8_t* symbols);
// The same for 4-lane payloads (512..4095 elements); search alphabets on the 8-lane step with
// half its lanes idle (rans_narrow_search.h), which stops 8 elements short of `end`. Slot
// tables by AVX2 gathers on both paths.
size_t rans_decode_avx2_4(RansDecodeState& st, const DecodeTables& tables, size_t dim, size_t begin,
                          size_t end, uint8_t* symbols);
size_t rans_decode_avx512_4(RansDecodeState& st, const DecodeTables& tables, size_t dim,
                            size_t begin, size_t end, uint8_t* symbols);
size_t rans_decode_avx512(RansDecodeState& st, const DecodeTables& tables, size_t dim, size_t begin,
                          size_t end, uint8_t* symbols);
// Two 32-lane payloads (a with tables ta, b with tb: equal search alphabets, or two slot-table
// ones) from element 0 in lockstep up to `end` (or until either runs short of words); returns
// the element index both reached. Declines (returns 0) where the single kernel would, or where
// the alphabets differ.
size_t rans_decode_avx512_pair(RansDecodeState& a, const DecodeTables& ta, RansDecodeState& b,
                               const DecodeTables& tb, size_t dim, size_t end, uint8_t* symbols_a,
                               uint8_t* symbols_b);
// The same for two 8-lane payloads.
size_t rans_decode_avx512_pair8(RansDecodeState& a, const DecodeTables& ta, RansDecodeState& b,
                                const DecodeTables& tb, size_t dim, size_t end, uint8_t* symbols_a,
                                uint8_t* symbols_b);
size_t rans_decode_avx2_pair8(RansDecodeState& a, const DecodeTables& ta, RansDecodeState& b,
                              const DecodeTables& tb, size_t dim, size_t end, uint8_t* symbols_a,
                              uint8_t* symbols_b);
// The same for two 4-lane payloads of one search alphabet (anything else: declined, 0): on
// AVX-512 packed into one 8-lane step (the first's lanes, then the second's), on AVX2 each on
// half an 8-lane step, which stops 8 elements short of `end` (rans_decode_avx2_4).
size_t rans_decode_avx512_pair4(RansDecodeState& a, const DecodeTables& ta, RansDecodeState& b,
                                const DecodeTables& tb, size_t dim, size_t end, uint8_t* symbols_a,
                                uint8_t* symbols_b);
size_t rans_decode_avx2_pair4(RansDecodeState& a, const DecodeTables& ta, RansDecodeState& b,
                              const DecodeTables& tb, size_t dim, size_t end, uint8_t* symbols_a,
                              uint8_t* symbols_b);
// Two 32-lane payloads of slot-table alphabets on AVX2 (search alphabets: declined, 0).
size_t rans_decode_avx2_pair(RansDecodeState& a, const DecodeTables& ta, RansDecodeState& b,
                             const DecodeTables& tb, size_t dim, size_t end, uint8_t* symbols_a,
                             uint8_t* symbols_b);
// Four 4-lane payloads of one search alphabet as two packed pairs (rans_decode_avx512_pair4) in
// flight, the same contract; 0 for anything else.
size_t rans_decode_avx512_quad4(RansDecodeState* const* states, const DecodeTables* const* tables,
                                size_t dim, size_t end, uint8_t* const* symbols);
// Four 8-lane payloads of slot-table alphabets (above 16 symbols; AVX2 gathers, also on the
// AVX-512 path), the same contract; 0 for anything else. (rans_decode_avx2_pair8 pairs two.)
size_t rans_decode_avx2_slots_quad8(RansDecodeState* const* states,
                                    const DecodeTables* const* tables, size_t dim, size_t end,
                                    uint8_t* const* symbols);
// Four 8-lane payloads with equal search alphabets (of 2..16 symbols) in lockstep, the same
// contract; 0 for anything else.
size_t rans_decode_avx512_quad8(RansDecodeState* const* states, const DecodeTables* const* tables,
                                size_t dim, size_t end, uint8_t* const* symbols);
// The same for n = 6, 8 or 10 payloads of `lanes` (8 or 4) lanes.
size_t rans_decode_avx512_group(RansDecodeState* const* states, const DecodeTables* const* tables,
                                size_t n, int lanes, size_t dim, size_t end,
                                uint8_t* const* symbols);
// The same for four 32-lane payloads (each its own tables and precision).
size_t rans_decode_avx512_quad32(RansDecodeState* const* states, const DecodeTables* const* tables,
                                 size_t dim, size_t end, uint8_t* const* symbols);

}  // namespace cachegen::detail
