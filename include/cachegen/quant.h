// cachegen: the reference CacheGen quantization numerics.
//
// A head's KV block x[N, D] (N tokens, D = head_dim channels) is cut into groups of
// `group_size` tokens. For every group and channel, an asymmetric min/max quantizer maps
// values to unsigned codes of `bits` bits. These functions match the reference module's
// float32 numerics bit for bit (see tests/data/golden/expected.json).
//
// Thread safety: every function here is re-entrant; the *_batch functions use
// cachegen::thread_count() worker threads and give results identical to the loop over heads.
// Errors: every function throws cachegen::Error(invalid_argument) naming the bad argument
// for bits outside 1..8, group_size outside 1..kMaxGroupSize, NaN/Inf input values, mismatched
// sizes, or sizes whose products overflow.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "cachegen/half.h"

namespace cachegen {

// Largest accepted group_size: padding is stored, so a huge group would turn a short
// stream into a huge allocation.
inline constexpr size_t kMaxGroupSize = 65536;

// Quantized codes of one [n_rows, dim] block.
struct CodeStream {
  // [n_groups, group_size, dim], row-major. Rows past n_rows are padding (copies of the
  // last real row's codes); they take part in the group's min/max but are never coded.
  std::vector<uint8_t> codes;
  std::vector<float> scale;  // [n_groups, dim]
  std::vector<float> zero;   // [n_groups, dim] (the group's per-channel minimum)
  size_t n_rows = 0;
  size_t dim = 0;
  int bits = 0;
  size_t group_size = 0;

  size_t n_groups() const noexcept { return (n_rows + group_size - 1) / group_size; }
  // Code of real row `row`, channel `c`.
  uint8_t code(size_t row, size_t c) const noexcept { return codes[row * dim + c]; }
};

// Quantizes x[n_rows, dim] (row-major). Groups of `group_size` rows per channel; the last
// group is padded with copies of the last row. Per group and channel, in fp32:
//   scale = max((max - min) / (2^bits - 1), 1e-8), zero = min,
//   code  = clamp(round_half_even((x - min) / scale), 0, 2^bits - 1).
// n_rows may be 0 (an empty stream).
CodeStream quantize_to_codes(std::span<const float> x, size_t n_rows, size_t dim, int bits,
                             size_t group_size = 32);
CodeStream quantize_to_codes(std::span<const Half> x, size_t n_rows, size_t dim, int bits,
                             size_t group_size = 32);
CodeStream quantize_to_codes(std::span<const BFloat16> x, size_t n_rows, size_t dim, int bits,
                             size_t group_size = 32);

// Same, into `out`, reusing its buffers' capacity (no allocation once warm): for callers
// that quantize many blocks in a loop.
void quantize_to_codes_into(std::span<const float> x, size_t n_rows, size_t dim, int bits,
                            size_t group_size, CodeStream& out);
void quantize_to_codes_into(std::span<const Half> x, size_t n_rows, size_t dim, int bits,
                            size_t group_size, CodeStream& out);
void quantize_to_codes_into(std::span<const BFloat16> x, size_t n_rows, size_t dim, int bits,
                            size_t group_size, CodeStream& out);

// Quantizes against caller-given parameters scale/zero [n_groups, dim] (e.g. parameters
// rounded to a storage precision by a codec): code = clamp(round_half_even((x - zero) /
// scale), 0, 2^bits - 1), in fp32. Scales must be finite and > 0, zeros finite.
CodeStream quantize_with_params(std::span<const float> x, size_t n_rows, size_t dim, int bits,
                                size_t group_size, std::span<const float> scale,
                                std::span<const float> zero);
// Same, into `out`, reusing its buffers' capacity.
void quantize_with_params_into(std::span<const float> x, size_t n_rows, size_t dim, int bits,
                               size_t group_size, std::span<const float> scale,
                               std::span<const float> zero, CodeStream& out);

// Checks a stream's internal consistency (sizes, bits, codes in range); throws
// Error(invalid_argument) otherwise. Every function taking a CodeStream calls it.
void validate(const CodeStream& stream);

// fp16 reconstruction [n_rows, dim]: fp32 (code * scale), then fp32 (+ zero), no FMA,
// then rounded to fp16 (nearest-even).
std::vector<Half> dequant_codes(const CodeStream& stream);
// Same, into out (out.size() must equal n_rows * dim).
void dequant_codes_into(const CodeStream& stream, std::span<Half> out);

// quantize_to_codes followed by dequant_codes: the lossy round trip, fp16 [n_rows, dim].
std::vector<Half> cachegen_quant_dequant(std::span<const float> x, size_t n_rows, size_t dim,
                                         int bits, size_t group_size = 32);

// Token delta along rows of a [n_rows, dim] code matrix, per channel:
//   d[0, c] = codes[0, c];  d[t, c] = codes[t, c] - codes[t - 1, c].
std::vector<int16_t> token_delta(std::span<const uint8_t> codes, size_t n_rows, size_t dim);
// Inverse (prefix sum along rows). Throws if a sum leaves 0..255.
std::vector<uint8_t> token_delta_inverse(std::span<const int16_t> delta, size_t n_rows, size_t dim);

// Empirical order-0 entropy in bits per symbol (log base 2); 0 for empty input.
double symbol_entropy_bits(std::span<const uint8_t> symbols);
double symbol_entropy_bits(std::span<const int16_t> symbols);

// The reference's size *estimate* in bytes (not a real bitstream): symbols are the stream's
// real rows, token deltas when use_delta; entropy per channel (one column) when per_channel,
// else pooled; each entropy capped at `bits` bits/symbol; ceil(total_bits / 8) plus 4 bytes
// (fp16 scale + zero) per group per channel.
size_t entropy_coded_bytes(const CodeStream& stream, bool use_delta = true,
                           bool per_channel = true);
// Fixed-width packing: ceil(n_rows * dim * bits / 8) + n_groups * dim * 4.
size_t fixed_width_bytes(const CodeStream& stream);

// Layer-wise bit schedule: layers split into G = min(n_groups, n_layers) contiguous groups
// with bounds round_half_even(n_layers * g / G); group g gets max(2, base_bits - g) bits.
// Empty for n_layers == 0. Throws for n_layers < 0, n_groups <= 0, base_bits outside 1..8.
std::vector<int> layer_group_bits(int n_layers, int base_bits, int n_groups = 3);

// ---- Batched versions over G independent heads, x laid out [G, n_rows, dim]. ----
std::vector<CodeStream> quantize_to_codes_batch(std::span<const float> x, size_t n_heads,
                                                size_t n_rows, size_t dim, int bits,
                                                size_t group_size = 32);
std::vector<CodeStream> quantize_to_codes_batch(std::span<const Half> x, size_t n_heads,
                                                size_t n_rows, size_t dim, int bits,
                                                size_t group_size = 32);
std::vector<CodeStream> quantize_to_codes_batch(std::span<const BFloat16> x, size_t n_heads,
                                                size_t n_rows, size_t dim, int bits,
                                                size_t group_size = 32);
// Same, into `out` (resized to G streams, each reusing its buffers).
void quantize_to_codes_batch_into(std::span<const Half> x, size_t n_heads, size_t n_rows,
                                  size_t dim, int bits, size_t group_size,
                                  std::vector<CodeStream>& out);
// fp16 [G, n_rows, dim]; all streams must share n_rows and dim.
std::vector<Half> dequant_codes_batch(std::span<const CodeStream> streams);
// Same, into out (out.size() must be G * n_rows * dim).
void dequant_codes_batch_into(std::span<const CodeStream> streams, std::span<Half> out);
// Sum over streams of entropy_coded_bytes / fixed_width_bytes.
size_t entropy_coded_bytes_batch(std::span<const CodeStream> streams, bool use_delta = true,
                                 bool per_channel = true);
size_t fixed_width_bytes_batch(std::span<const CodeStream> streams);
std::vector<Half> cachegen_quant_dequant_batch(std::span<const float> x, size_t n_heads,
                                               size_t n_rows, size_t dim, int bits,
                                               size_t group_size = 32);

}  // namespace cachegen
