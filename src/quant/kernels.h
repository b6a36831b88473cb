// Internal: the quantization kernels, one table per SIMD path. Every path computes exactly
// the same fp32 operations in the same order (no FMA, no reassociation), so all tables give
// bit-identical results; kernels_scalar.cpp is the reference twin. (The vector quantizers
// round and clamp each quotient by fewer operations than the scalar loop, to the same codes:
// Quantize8 in kernels_impl.h.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "cachegen/quant.h"
#include "cachegen/runtime.h"

namespace cachegen::detail {

// How a quantizer scales x - zero: divided by the scale (the reference's quantize_rows) or
// multiplied by its reciprocal (the codec's quantize_rows_inv).
enum class Scaling { divide, multiply };

struct QuantKernels {
  // Widen n fp16 / bf16 values to fp32 (exact).
  void (*f16_to_f32)(const uint16_t* in, float* out, size_t n);
  void (*bf16_to_f32)(const uint16_t* in, float* out, size_t n);
  // Per-channel min and max over rows x[rows, dim] (rows >= 1); false when any value is
  // NaN or +-Inf (then mn/mx are meaningless). Of equal values (-0 and +0) minmax_rows keeps
  // the last (the reference quantizer's), minmax_rows_first the first (what fp16 parameters
  // preserve: the codec's).
  bool (*minmax_rows)(const float* x, size_t rows, size_t dim, float* mn, float* mx);
  bool (*minmax_rows_first)(const float* x, size_t rows, size_t dim, float* mn, float* mx);
  // minmax_rows_first of fp16 values' exact widenings (no fp32 copy of them), row r at
  // x + r * stride (stride >= dim: a head's rows inside token-major rows of every head).
  bool (*minmax_rows_first_f16)(const uint16_t* x, size_t rows, size_t dim, size_t stride,
                                float* mn, float* mx);
  // True when none of the n values is NaN or +-Inf.
  bool (*all_finite)(const float* x, size_t n);
  // codes[r, c] = clamp(round_half_even((x[r, c] - zero[c]) / scale[c]), 0, max_code).
  void (*quantize_rows)(const float* x, size_t rows, size_t dim, const float* scale,
                        const float* zero, float max_code, uint8_t* codes);
  // The codec's quantizer (codec_quantize_into): quantize_rows with the division by scale[c]
  // replaced by a multiply by inv_scale[c] (= 1.0f / scale[c], reciprocals), every operation in
  // fp32. Codes differ from the division's only where (x - zero) / scale lies within ~2^-22 *
  // max_code of a half-integer (either code is then half a step off, to within that). The
  // reference quantizer keeps the division (the golden vectors).
  void (*quantize_rows_inv)(const float* x, size_t rows, size_t dim, const float* inv_scale,
                            const float* zero, float max_code, uint8_t* codes);
  // quantize_rows_inv of fp16 values' exact widenings, row r at x + r * stride (stride >= dim).
  void (*quantize_rows_inv_f16)(const uint16_t* x, size_t rows, size_t dim, size_t stride,
                                const float* inv_scale, const float* zero, float max_code,
                                uint8_t* codes);
  // out[i] = 1.0f / x[i] (IEEE, one rounding: the same on every path).
  void (*reciprocals)(const float* x, float* out, size_t n);
  // out[r * out_stride + c] = fp16(clamp((float(codes[r, c]) * scale[c]) + zero[c], -65504,
  // 65504)), two fp32 roundings (out_stride >= dim). The clamp saturates instead of rounding to
  // +-Inf: a group of finite fp16 inputs reaching +-65504 has a rounded-up scale whose top level
  // lies past 65504.
  void (*dequant_rows)(const uint8_t* codes, size_t rows, size_t dim, const float* scale,
                       const float* zero, uint16_t* out, size_t out_stride);
  // The transform codec's basis combination (docs/FORMAT.md, codec 2), rows r < rows:
  // out[r * out_stride + k] = (base[k] + 0) + sum over j < n, ascending, of
  // basis[j * len + k] * coef[r * n + j], for k < len; every product and sum rounded on its own.
  // Terms with coef 0 may be skipped: they cannot change the sum (which starts at +0, never -0).
  void (*basis_combine)(const float* coef, size_t rows, size_t n, const float* basis, size_t len,
                        const float* base, float* out, size_t out_stride);
  // out[i] = fp16(clamp(in[i], -65504, 65504)) (NaN saturates like dequant_rows).
  void (*f32_to_f16_sat)(const float* in, uint16_t* out, size_t n);
  // out[i] = float_to_half(in[i]): IEEE nearest-even, +-Inf past 65504, NaN to the quiet NaN
  // 0x7e00 with its sign (exactly cachegen::float_to_half).
  void (*f32_to_f16)(const float* in, uint16_t* out, size_t n);
  // RoPE on fp16 keys in place, k[rows, n_heads, head_dim]: row r's pairs (i, i + n_pairs)
  // (neox) or (2i, 2i + 1) rotated by cos[r * n_pairs + i] and sin[r * n_pairs + i] as
  // cachegen::rope_rows rotates their fp32 widenings (x0 * cos - x1 * sin, x0 * sin + x1 * cos,
  // every product and sum rounded), then each value rounded back as f32_to_f16_sat rounds
  // (also those past the 2 * n_pairs rotated ones). 2 * n_pairs <= head_dim.
  void (*rope_f16)(uint16_t* k, size_t rows, size_t n_heads, size_t head_dim, const float* cos,
                   const float* sin, size_t n_pairs, bool neox);
  // Per-channel histograms of a [rows, dim] matrix of symbols < n_syms: adds to
  // counts[c * n_syms + s] the rows whose channel c holds s (the codec's model search).
  void (*channel_histograms)(const uint8_t* symbols, size_t rows, size_t dim, size_t n_syms,
                             uint32_t* counts);
  // The symbols s < n with counts[s] != 0, ascending, into sym and their counts into count
  // (room for n entries each); returns how many (the model search's histograms).
  size_t (*present_symbols)(const uint32_t* counts, size_t n, uint16_t* sym, uint32_t* count);
  // The largest of n bytes (0 for n = 0): the check that codes fit their bits.
  uint8_t (*max_byte)(const uint8_t* p, size_t n);
  // The largest magnitude (bits & 0x7fff) of n fp16 values (0 for n = 0): one of them is NaN or
  // +-Inf exactly when it is >= 0x7c00.
  uint16_t (*max_f16_magnitude)(const uint16_t* x, size_t n);
};

const QuantKernels& quant_kernels_scalar();
const QuantKernels& quant_kernels_avx2();
const QuantKernels& quant_kernels_avx512();
// The table for cachegen::simd_path().
const QuantKernels& quant_kernels();

// quantize_with_params_into for callers that have checked its inputs: x finite, scale and
// zero n_groups * dim values each, every scale finite and > 0, every zero finite.
void quantize_with_checked_params_into(std::span<const float> x, size_t n_rows, size_t dim,
                                       int bits, size_t group_size, std::span<const float> scale,
                                       std::span<const float> zero, CodeStream& s);
// The codec's quantizer, with the same checked inputs (its rounded parameters, from a min/max
// pass that found x finite): quantize_with_checked_params_into's stream, its codes by a multiply
// with each scale's reciprocal (quantize_rows_inv: a near-tie may round the other way).
void codec_quantize_into(std::span<const float> x, size_t n_rows, size_t dim, int bits,
                         size_t group_size, std::span<const float> scale,
                         std::span<const float> zero, CodeStream& s);
// The same for fp16 values (their exact widenings quantised: the same codes), row r at
// x + r * stride (stride >= dim).
void codec_quantize_into(const Half* x, size_t stride, size_t n_rows, size_t dim, int bits,
                         size_t group_size, std::span<const float> scale,
                         std::span<const float> zero, CodeStream& s);

// fixed_width_bytes of a stream this library made (its shape consistent: not checked again,
// its codes not read).
size_t fixed_width_bytes_of(const CodeStream& s);

}  // namespace cachegen::detail
