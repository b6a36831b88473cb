// cachegen: the entropy-coder layer. Lossless rANS bitstreams for quantized KV codes.
//
// One *code stream* holds one CodeStream (a head's [n_rows, dim] codes plus its per-group
// scale/zero). Every channel (column) gets its own model, chosen by the encoder among
//   constant (0 bits), uniform (= fixed-width packing), a frequency table over raw codes, or a
//   frequency table over token deltas (mod 2^bits, predicted across group boundaries through the
//   group parameters),
// and the choice is recorded in the stream. The byte layout is specified in docs/FORMAT.md
// ("Codec stream").
//
// Guarantees:
//  - Lossless over codes: decode(encode(s)) gives back s.codes (real rows; padding rows are
//    re-created as copies of the last real row) and scale/zero bit-exactly, so dequantizing the
//    decoded stream equals dequant_codes(s).
//  - Deterministic: the same input gives the same bytes on every machine, thread count and SIMD
//    path (encoder decisions use integer arithmetic only).
//  - Hostile input: every decode function either returns a valid result or throws
//    cachegen::Error with corrupt_input / truncated_input / unsupported_version (or
//    invalid_argument when the stream exceeds DecodeOptions limits). Nothing is allocated from
//    a header field before it is bounded.
//
// Thread safety: all functions are re-entrant. *_batch functions use cachegen::thread_count()
// threads; their output does not depend on the thread count.
//
// Memory: encoders and decoders keep per-thread scratch between calls (at most about the
// largest batch's codes and symbols, 2-4 bytes per value, on each thread that ran it), so
// that repeated calls reuse warm pages instead of faulting in fresh ones; it is freed when
// the thread exits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cachegen/half.h"
#include "cachegen/quant.h"

namespace cachegen {

// How group parameters are stored. Frozen in the format (the stream records the value).
enum class ParamPrecision : uint8_t {
  fp32 = 0,     // lossless: 4-byte IEEE floats
  fp16 = 1,     // 2-byte IEEE halves (exact only for values representable in fp16)
  compact = 2,  // scale: fp32 with `scale_mantissa_bits` significand bits (rounded up);
                // zero: integer multiple of scale * 2^-zero_step_log2 (rounded down);
                // both predicted from the previous group of the channel, Exp-Golomb coded.
};

struct EncodeOptions {
  // encode(): params are always kept exactly; the encoder picks the smallest of fp32, fp16 and
  // compact that represents every parameter bit-exactly. encode_values(): params are rounded
  // to the compact grid below (or fp16, whichever codes smaller); see encode_values.
  // Compact grid: scale keeps this many fractional significand bits (1..23). Rounding a scale
  // up by at most 2^-scale_mantissa_bits relative widens the quantization step by that much.
  int scale_mantissa_bits = 6;
  // Compact grid: zero is a multiple of scale * 2^-zero_step_log2 (0..8).
  int zero_step_log2 = 4;
  // Allow per-channel token-delta models (off forces raw-code models; for experiments).
  bool allow_delta = true;
  // Let a batch code every channel with one model (batch layout 2) where that is estimated
  // smaller than a model per channel (off: layouts 0 and 1 only, which readers from before
  // layout 2 take).
  bool allow_one_model = true;
  // Payloads of at least this many elements get 32 rANS lanes (shorter ones 8 from 4096, 4 from
  // 512, else 1): a stream's, a batch's head records', a shared batch's slices (of several
  // heads). Each lane costs a 4-byte final state; SIMD decoders run 32 lanes as several
  // independent chains, 8 as one. (The lossless tier's planes take 32 from 4096.)
  size_t wide_lanes_from = 16384;
};

struct DecodeOptions {
  // Streams describing more than this many elements (n_rows * dim, per head) are rejected
  // with invalid_argument before anything is allocated.
  size_t max_elements = size_t{1} << 30;
};

// ---- One head ------------------------------------------------------------------------

// Encodes a valid CodeStream (validate() is called; invalid_argument otherwise).
std::vector<uint8_t> encode(const CodeStream& stream, const EncodeOptions& options = {});

// Quantizes x[n_rows, dim] (fp32, row-major) with parameters rounded to the codec's compact
// grid and encodes the result: the lossy entry point whose size `bench seed` reports as
// coded_bytes. Per group and channel, with min/max of the group (padding rows included):
//   zero  = the largest grid value <= min; scale = the smallest grid value with
//   zero + scale * (2^bits - 1) >= max (and >= 1e-8),
// then codes = clamp(round_half_even((x - zero) * (1 / scale)), 0, 2^bits - 1), in fp32: the
// codes of quantize_with_params(x, ..., scale, zero), its division by a multiply with the
// reciprocal (a quotient within ~2^-22 * (2^bits - 1) of a half-integer may round the other
// way). Max abs error per element stays <= scale/2 (to that margin); scale exceeds the reference's (max-min)/(2^bits-1) by at most a factor
// (1 + 2^-scale_mantissa_bits) * (2^bits-1) / (2^bits-1 - 2^-zero_step_log2).
// If the returned pointer `quantized` is non-null it receives the CodeStream that was coded
// (so decode(result) == *quantized).
// The quantization step of encode_values alone: the CodeStream that encode_values would code
// (parameters on the compact grid, or fp16 / the reference's when the grid cannot hold them).
// For callers that quantize groups as they arrive and code them later (the cache layer).
CodeStream quantize_values(std::span<const float> x, size_t n_rows, size_t dim, int bits,
                           size_t group_size = 32, const EncodeOptions& options = {});
// Same, into `out`, reusing its buffers' capacity (no allocation once warm).
void quantize_values_into(std::span<const float> x, size_t n_rows, size_t dim, int bits,
                          size_t group_size, const EncodeOptions& options, CodeStream& out);
// Same from fp16 values: the CodeStream of their exact fp32 widenings, without an fp32 copy.
void quantize_values_into(std::span<const Half> x, size_t n_rows, size_t dim, int bits,
                          size_t group_size, const EncodeOptions& options, CodeStream& out);

std::vector<uint8_t> encode_values(std::span<const float> x, size_t n_rows, size_t dim, int bits,
                                   size_t group_size = 32, const EncodeOptions& options = {},
                                   CodeStream* quantized = nullptr);

// Decodes one code stream back to codes + params (padding rows restored).
CodeStream decode(std::span<const uint8_t> bytes, const DecodeOptions& options = {});
// Decodes straight to fp16 [n_rows, dim]; identical to dequant_codes(decode(bytes)).
std::vector<Half> decode_to_half(std::span<const uint8_t> bytes, const DecodeOptions& options = {});
// decode() of a stream that must hold [n_rows, dim] codes at `bits` (e.g. the byte planes of the
// lossless and transform codecs): nothing larger is allocated, and another shape or width is
// corrupt_input "<what> is RxC at B bits, expected ...".
CodeStream decode_expecting(std::span<const uint8_t> bytes, size_t n_rows, size_t dim, int bits,
                            const std::string& what);

// ---- A batch of G heads (one layer's K or V) ------------------------------------------
// Heads of one shape are coded with one model per channel shared by the batch, as slices of
// consecutive heads (one rANS payload each, >= 16384 elements where the heads allow, so SIMD
// decoders get 32 lanes); heads of differing shapes, or batches the encoder estimates smaller
// that way, are G independent records. Slices and records are encoded/decoded in parallel.
// The layout is recorded in the stream (docs/FORMAT.md, "Codec stream").
std::vector<uint8_t> encode_batch(std::span<const CodeStream> streams,
                                  const EncodeOptions& options = {});
// x laid out [n_heads, n_rows, dim]; per head as encode_values.
std::vector<uint8_t> encode_values_batch(std::span<const float> x, size_t n_heads, size_t n_rows,
                                         size_t dim, int bits, size_t group_size = 32,
                                         const EncodeOptions& options = {});
// The same from fp16 values: the bytes of encode_values_batch over their exact fp32
// widenings (quantised straight from fp16, with no fp32 copy).
std::vector<uint8_t> encode_values_batch(std::span<const Half> x, size_t n_heads, size_t n_rows,
                                         size_t dim, int bits, size_t group_size = 32,
                                         const EncodeOptions& options = {});
std::vector<CodeStream> decode_batch(std::span<const uint8_t> bytes,
                                     const DecodeOptions& options = {});
// fp16 [G, n_rows, dim]; all heads must share n_rows and dim (corrupt_input otherwise).
std::vector<Half> decode_batch_to_half(std::span<const uint8_t> bytes,
                                       const DecodeOptions& options = {});
// The same values into the caller's buffer, which must hold exactly G * n_rows * dim of them
// (invalid_argument otherwise, before anything is written; after a corrupt_input its contents
// are unspecified). Saves the returned vector's allocation and fill, paid on every call.
void decode_batch_to_half(std::span<const uint8_t> bytes, std::span<Half> out,
                          const DecodeOptions& options = {});

// What a batch must hold for decode_batch_to_rows: n_heads heads of n_rows x dim codes at
// `bits` bits in groups of group_size rows.
struct BatchShape {
  size_t n_heads = 0, n_rows = 0, dim = 0;
  int bits = 0;
  size_t group_size = 0;
};
// Decodes a batch straight into the caller's fp16 rows, token-major [n_rows, n_heads, dim]
// (llama.cpp's K/V row layout, a .cgkv chunk's tensor): the values of decode_batch_to_half,
// transposed, without intermediate codes or head buffers. out.size() must be n_heads * n_rows *
// dim (invalid_argument otherwise); a batch of another shape is corrupt_input naming the field.
void decode_batch_to_rows(std::span<const uint8_t> bytes, const BatchShape& shape,
                          std::span<Half> out, const DecodeOptions& options = {});
// One batch of decode_batches_to_rows.
struct BatchRows {
  std::span<const uint8_t> bytes;
  BatchShape shape;
  std::span<Half> out;
};
// Decodes several batches (layers' K and V, say) into their rows: the values of
// decode_batch_to_rows on each, and on bad input the error it throws for the first batch that
// fails. Their rANS payloads are decoded two or four at a time where they can be (dependency
// chains overlap in the core), which speeds up short batches of one payload each.
void decode_batches_to_rows(std::span<const BatchRows> batches, const DecodeOptions& options = {});

// ---- Size accounting -------------------------------------------------------------------

struct CodedSizeReport {
  size_t coded_bytes = 0;         // the whole stream, headers, params and models included
  size_t header_bytes = 0;        // fixed header fields
  size_t param_bytes = 0;         // group scale/zero
  size_t model_bytes = 0;         // per-channel model descriptions (byte-rounded share)
  size_t payload_bytes = 0;       // rANS states + words
  double code_entropy_bytes = 0;  // sum over channels of n * H(chosen representation) / 8
  size_t n_raw_channels = 0, n_delta_channels = 0, n_constant_channels = 0, n_uniform_channels = 0;
  // coded_bytes - param_bytes over code_entropy_bytes: the coder's and models' overhead over
  // the per-channel empirical entropy of the chosen representation (1.0 = ideal).
  double code_ratio_over_entropy() const noexcept;
};
// Encodes and breaks the size down. `stream_bytes` is an already encoded stream.
CodedSizeReport coded_size_report(std::span<const uint8_t> stream_bytes);
// The same breakdown for a batch (either layout): sizes summed over its heads, framing in
// header_bytes; code_entropy_bytes and channel counts are filled for independent records
// only (0 for a shared-model batch). Throws as decode_batch on malformed input.
CodedSizeReport coded_size_report_batch(std::span<const uint8_t> batch_bytes);

}  // namespace cachegen
