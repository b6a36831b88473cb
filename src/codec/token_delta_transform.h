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

uint8_t boundary_prediction(uint8_t prev_code, float prev_scale, float prev_zero, float scale,
                            float zero, int bits);

// codes/symbols: [n_rows, dim] real rows. scale/zero: [n_groups, dim].
void compute_delta_symbols(const uint8_t* codes, size_t n_rows, size_t dim, int bits,
                           size_t group_size, std::span<const float> scale,
                           std::span<const float> zero, uint8_t* symbols);

// Inverts the per-channel representation: channels with is_delta[c] != 0 are token deltas,
// the others raw codes.
void symbols_to_codes(const uint8_t* symbols, size_t n_rows, size_t dim, int bits,
                      size_t group_size, std::span<const float> scale, std::span<const float> zero,
                      const uint8_t* is_delta, uint8_t* codes);

}  // namespace cachegen::detail
