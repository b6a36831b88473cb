// Internal: the token-delta representation of a channel, mod 2^bits.
//
// Symbol of row t, channel c: (code[t][c] - pred[t][c]) mod 2^bits, where pred is
//   2^(bits-1)                        for t == 0,
//   code[t-1][c]                      inside a group,
//   the previous row's value re-quantized with the new group's parameters at a group
//   boundary: clamp(round_half_even((code*scale_prev + zero_prev - zero) / scale), 0, 2^bits-1)
//   in fp32 without FMA, which the decoder can compute because it holds every parameter.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace cachegen::detail {

// pred[c] for a group's first row from the previous row's codes, for channels 0..dim-1 (the
// parameter pointers at channel 0 of the previous and the new group).
void boundary_predictions(const uint8_t* prev_codes, const float* prev_scale,
                          const float* prev_zero, const float* scale, const float* zero, int bits,
                          size_t dim, uint8_t* pred);

// codes/symbols: [n_rows, dim] real rows. scale/zero: [n_groups, dim]. Uses
// cachegen::simd_path().
void compute_delta_symbols(const uint8_t* codes, size_t n_rows, size_t dim, int bits,
                           size_t group_size, std::span<const float> scale,
                           std::span<const float> zero, uint8_t* symbols);
// Its AVX-512 path (token_delta_transform_avx512.cpp): the same bytes, 64 bytes a step and the
// boundary predictions 16 channels a vector (the baseline build's were 6-7% of encoding
// stories260K's codes).
void compute_delta_symbols_avx512(const uint8_t* codes, size_t n_rows, size_t dim, int bits,
                                  size_t group_size, std::span<const float> scale,
                                  std::span<const float> zero, uint8_t* symbols);

// symbols[i] = use_delta[i % len] ? delta[i] : codes[i] for i < n, use_delta's bytes 0xff or 0
// (len >= 64: blocks of whole rows, the channel mask repeated per row): stream_symbols' select
// on AVX-512 (the baseline build's 16-byte one was 7% of encoding stories260K's codes).
void select_deltas_avx512(const uint8_t* codes, const uint8_t* delta, const uint8_t* use_delta,
                          size_t len, size_t n, uint8_t* symbols);

// Inverts the per-channel representation: channels with is_delta[c] != 0 are token deltas,
// the others raw codes.
void symbols_to_codes(const uint8_t* symbols, size_t n_rows, size_t dim, int bits,
                      size_t group_size, std::span<const float> scale, std::span<const float> zero,
                      const uint8_t* is_delta, uint8_t* codes);

// One head of symbols_to_codes_heads: its symbols, parameters and codes (codes may be symbols).
struct DeltaHead {
  const uint8_t* symbols;
  std::span<const float> scale, zero;
  uint8_t* codes;
};
// symbols_to_codes of heads of one shape (one batch's: the same n_rows, dim, bits, group_size
// and is_delta), up to four of their chains side by side on AVX-512 (the same bytes).
void symbols_to_codes_heads(std::span<const DeltaHead> heads, size_t n_rows, size_t dim, int bits,
                            size_t group_size, const uint8_t* is_delta);

// The AVX-512 path of symbols_to_codes for heads of one shape (token_delta_transform_avx512.cpp):
// the same bytes; keep[c] is 0xff for delta channels and 0 for raw ones.
void symbols_to_codes_avx512(std::span<const DeltaHead> heads, size_t n_rows, size_t dim, int bits,
                             size_t group_size, const uint8_t* keep);

}  // namespace cachegen::detail
