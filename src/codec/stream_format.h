// Internal: the codec stream's head record (docs/FORMAT.md, "Codec stream").
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "cachegen/codec.h"
#include "codec/channel_model.h"

namespace cachegen::detail {

// Frozen format constants.
inline constexpr uint8_t kStreamMagic[4] = {'C', 'G', 'C', 'S'};
inline constexpr uint8_t kBatchMagic[4] = {'C', 'G', 'C', 'B'};
inline constexpr uint8_t kFormatVersion = 1;

// Appends one head record. Params are stored in `precision` (the caller has checked that it
// represents stream.scale/zero exactly); grid is used for compact.
void encode_head(const CodeStream& stream, ParamPrecision precision, int scale_mantissa_bits,
                 int zero_step_log2, bool allow_delta, std::vector<uint8_t>& out);

// The smallest exact parameter precision for this stream (compact, fp16, fp32 in that order
// of preference when they code equally).
void encode_head_exact(const CodeStream& stream, const EncodeOptions& options,
                       std::vector<uint8_t>& out);

// A parsed head record; models and symbols are kept for size reports.
struct DecodedHead {
  CodeStream stream;
  std::vector<ChannelModel> models;
  std::vector<uint8_t> symbols;  // [n_rows, dim], the coded representation
  size_t header_bytes = 0, param_bytes = 0, model_bytes = 0, payload_bytes = 0;
};
DecodedHead decode_head(std::span<const uint8_t> record, size_t record_offset,
                        const DecodeOptions& options);

// Checks magic and version; returns the bytes after them.
std::span<const uint8_t> check_magic(std::span<const uint8_t> bytes, const uint8_t (&magic)[4],
                                     const char* what);

}  // namespace cachegen::detail
