// Internal: the codec stream's head record and shared-model batch (docs/FORMAT.md, "Codec
// stream").
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cachegen/codec.h"
#include "codec/bit_io.h"
#include "codec/channel_model.h"
#include "codec/params_codec.h"

namespace cachegen::detail {

// Frozen format constants.
inline constexpr uint8_t kStreamMagic[4] = {'C', 'G', 'C', 'S'};
inline constexpr uint8_t kBatchMagic[4] = {'C', 'G', 'C', 'B'};
inline constexpr uint8_t kFormatVersion = 1;
// Batch layouts (u8 after the head count).
inline constexpr uint8_t kBatchIndependent = 0;  // G head records
inline constexpr uint8_t kBatchShared = 1;       // one shape, shared models, sliced payloads
inline constexpr uint8_t kBatchOneModel = 2;     // layout 1 with one model for every channel
// The layouts whose body is a shared batch's (batch_shared.cpp).
inline constexpr bool is_shared_layout(uint8_t layout) {
  return layout == kBatchShared || layout == kBatchOneModel;
}

// Lanes for a payload of n elements: enough to keep SIMD decoders busy on long payloads, few
// enough that the 4-byte final state per lane stays a small share of short ones; 32 from
// wide_from elements (EncodeOptions::wide_lanes_from: a stream's, a head record's or a shared
// batch slice's elements).
int choose_lanes(size_t n_elements, size_t wide_from);

// A stream's compact parameter bits, finished (the last byte padded with zero bits), and how
// many bits they are: written once for a batch's parameter block or a head record's side bits.
struct CompactSection {
  std::vector<uint8_t> bytes;
  size_t bits = 0;
  void clear() {  // none (the storage kept)
    bytes.clear();
    bits = 0;
  }
};

// Appends one head record. Params are stored in `precision` (the caller has checked that it
// represents stream.scale/zero exactly); grid is used for compact. counts (optional): the codes'
// per-channel histograms when the caller has them, counts[c * 2^bits + v] = occurrences of v
// among channel c's n_rows codes (not checked: the bytes depend on them).
// The options' grid, delta models and lanes apply. compact (optional): the stream's compact
// section, where exact_param_precision left one.
void encode_head(const CodeStream& stream, ParamPrecision precision, const EncodeOptions& options,
                 std::vector<uint8_t>& out, std::span<const uint32_t> counts = {},
                 const CompactSection* compact = nullptr);

// The smallest exact parameter precision for this stream (compact, fp16, fp32 in that order
// of preference when they code equally). With compact_section, a compact choice also leaves
// there its section (emptied otherwise).
ParamPrecision exact_param_precision(const CodeStream& stream, const EncodeOptions& options,
                                     CompactSection* compact_section = nullptr);
void encode_head_exact(const CodeStream& stream, const EncodeOptions& options,
                       std::vector<uint8_t>& out, std::span<const uint32_t> counts = {});
// encode(stream, options) (codec.h) with the codes' histograms given, as encode_head takes them
// (the lossless tier's pooled high bytes, whose counts its byte statistics already hold).
std::vector<uint8_t> encode_counted(const CodeStream& stream, const EncodeOptions& options,
                                    std::span<const uint32_t> counts);

// Token-delta symbols of every element, or the codes themselves for raw channels: the
// representation each channel's model codes. models.size() == stream.dim.
void stream_symbols(const CodeStream& s, std::span<const ChannelModel> models,
                    std::span<const uint8_t> delta, uint8_t* symbols);

// A parsed head record: everything but the rANS payload decoded.
struct ParsedHead {
  CodeStream stream;  // codes left empty
  std::vector<ChannelModel> models;
  std::vector<uint8_t> is_delta;  // [dim]
  int coder_precision = 0, n_lanes = 0;
  std::span<const uint8_t> payload;
  size_t payload_offset = 0;
  size_t header_bytes = 0, param_bytes = 0, model_bytes = 0, payload_bytes = 0;
};
// Parses into `h`, reusing its storage (decoders keep heads per thread).
void parse_head_into(std::span<const uint8_t> record, size_t record_offset,
                     const DecodeOptions& options, ParsedHead& h);
inline ParsedHead parse_head(std::span<const uint8_t> record, size_t record_offset,
                             const DecodeOptions& options) {
  ParsedHead h;
  parse_head_into(record, record_offset, options, h);
  return h;
}
// Decodes the payload to symbols [n_rows * dim].
void decode_head_symbols(const ParsedHead& head, std::span<uint8_t> symbols);

// Up to four heads' payloads decoded together (rans_decode_quad, rans_decode_pair: one
// payload's steps are one dependency chain) where their dims agree: the results and errors of
// decode_head_symbols on each in order.
void decode_heads_symbols(std::span<const ParsedHead* const> heads,
                          std::span<const std::span<uint8_t>> symbols);

// A parsed head record with its symbols, for size reports.
struct DecodedHead {
  CodeStream stream;
  std::vector<ChannelModel> models;
  std::vector<uint8_t> symbols;  // [n_rows, dim], the coded representation
  size_t header_bytes = 0, param_bytes = 0, model_bytes = 0, payload_bytes = 0;
};
DecodedHead decode_head(std::span<const uint8_t> record, size_t record_offset,
                        const DecodeOptions& options);

// Turns decoded symbols of real rows (in place) into codes.
void symbols_to_codes_in_place(uint8_t* symbols, const CodeStream& params, const uint8_t* is_delta);
// The same for heads of one batch (one shape, one is_delta), head k's symbols at
// symbols + k * stride: four at a time side by side.
void symbols_to_codes_in_place(uint8_t* symbols, size_t stride, std::span<const CodeStream> heads,
                               const uint8_t* is_delta);
// Codes of real rows -> the CodeStream's codes with padding rows (copies of the last row).
void set_codes_with_padding(CodeStream& s, const uint8_t* real_codes);
// The same where s.codes (already padded in size) holds the real rows' codes.
void pad_codes_in_place(CodeStream& s);
// fp16 [n_rows, dim] of real-row codes with the stream's parameters (as dequant_codes).
void dequant_real_rows(const CodeStream& params, const uint8_t* codes, Half* out);
// The same with row t written at out + t * row_stride (row_stride >= dim).
void dequant_real_rows_strided(const CodeStream& params, const uint8_t* codes, Half* out,
                               size_t row_stride);
// Checks that a decoded head has the shape a caller expects (corrupt_input naming the field).
void check_head_shape(const CodeStream& head, size_t index, const BatchShape& shape);

// Per-head parameter block of a shared batch.
// compact_section: the compact section's bytes exact_param_precision left, or empty (written
// here).
void write_param_block(const CodeStream& s, ParamPrecision precision, const CompactGrid& grid,
                       std::vector<uint8_t>& out, std::span<const uint8_t> compact_section = {});
void read_param_block(wire::Reader& r, CodeStream& s);
// read_param_block in two steps, so that a batch's heads read their parameters in parallel:
// frame_param_block checks a block's framing and keeps its bytes, decode_framed_params reads
// and checks them into s (compact bits decoded, fixed-width values loaded).
struct FramedParams {
  ParamPrecision precision = ParamPrecision::compact;
  std::span<const uint8_t> bits;  // compact: the section; fp16/fp32: the scales, then the zeros
  size_t offset = 0;              // of bits in the batch
  CompactGrid grid;               // compact only
};
void frame_param_block(wire::Reader& r, const CodeStream& s, FramedParams& framed);
void decode_framed_params(const FramedParams& framed, CodeStream& s);
// decode_framed_params(ca, sa) then (cb, sb) for two compact blocks, a's errors first
// (`failing` says whose: 0 or 1), the two sections' codes read side by side.
void decode_compact_params_pair(const FramedParams& ca, CodeStream& sa, const FramedParams& cb,
                                CodeStream& sb, int& failing);
// decode_framed_params of up to kMaxLaneReaders compact blocks of one shape (s[j]'s n_groups and
// dim), their codes read side by side (read_params_compact_lanes): false where that does not
// run. Throws the first error it meets, not necessarily the first block's: callers read the
// blocks again in order (decode_framed_params, decode_compact_params_pair) to report it.
bool decode_compact_params_lanes(std::span<const FramedParams* const> framed,
                                 std::span<CodeStream* const> s);

// Shared-model batch (layout 1, or 2 with one model for every channel where that is estimated
// smaller and options.allow_one_model): heads must share n_rows, dim, bits and group_size.
// `out` ends with the batch's layout byte, which is set to the layout written. Returns false
// (writing nothing) when the heads cannot or should not share: mismatched shapes, or when
// independent records are estimated to code smaller. compact_sections: per head,
// exact_param_precision's compact section, or empty (none kept).
bool encode_batch_shared(std::span<const CodeStream> streams,
                         std::span<const ParamPrecision> precisions, const EncodeOptions& options,
                         std::vector<uint8_t>& out,
                         std::span<const CompactSection> compact_sections = {});
// encode_batch_shared of two batches at once (each's bytes and result the same): where each is
// one slice of 8 lanes (a chunk's short K and V), their payloads are coded in lockstep.
struct SharedBatchInput {
  std::span<const CodeStream> streams;
  std::span<const ParamPrecision> precisions;
  std::span<const CompactSection> compact_sections;
};
std::array<bool, 2> encode_batch_shared_pair(std::span<const SharedBatchInput, 2> batches,
                                             const EncodeOptions& options,
                                             std::span<std::vector<uint8_t>* const, 2> out);
// encode_batch of two batches, the same bytes: a chunk's K and V blocks (the cache's), whose
// short payloads are then coded in lockstep (encode_batch_shared_pair).
std::array<std::vector<uint8_t>, 2> encode_batch_pair(std::span<const CodeStream> a,
                                                      std::span<const CodeStream> b,
                                                      const EncodeOptions& options);
// `body` starts after the layout byte (`layout`: kBatchShared or kBatchOneModel); offsets are
// relative to the batch start.
std::vector<CodeStream> decode_batch_shared(std::span<const uint8_t> body, size_t body_offset,
                                            uint8_t layout, size_t n_heads,
                                            const DecodeOptions& options);
// fp16 [G, n_rows, dim] into dest(G * n_rows * dim), called once the batch is parsed and
// checked (it returns where those values go, or throws).
void decode_batch_shared_to_half(std::span<const uint8_t> body, size_t body_offset, uint8_t layout,
                                 size_t n_heads, const DecodeOptions& options,
                                 const std::function<Half*(size_t)>& dest);
// fp16 [n_rows, G, dim] into out (decode_batch_to_rows).
void decode_batch_shared_to_rows(std::span<const uint8_t> body, size_t body_offset, uint8_t layout,
                                 const BatchShape& shape, std::span<Half> out,
                                 const DecodeOptions& options);

// What decode_expecting checks a stream against.
struct ExpectedStream {
  std::span<const uint8_t> bytes;
  size_t n_rows = 0, dim = 0;
  int bits = 0;
  const std::string* what = nullptr;  // names the stream in the error
};
// decode_expecting(a...) and decode_expecting(b...) in that order: their streams, or the
// error of the first that fails; their payloads decoded in lockstep (two dependency chains: a
// .cgkv layer's K and V byte planes). The streams are the calling thread's, valid until its
// next call (their storage is reused: a lossless chunk's allocations and zero fills were ~3%
// of its decode).
std::pair<const CodeStream&, const CodeStream&> decode_expecting_pair(const ExpectedStream& a,
                                                                      const ExpectedStream& b);

// Several layout-1 or -2 batches into their callers' rows, as decode_batch_shared_to_rows does
// each, their slices decoded in pairs or fours across batches (decode_batches_to_rows). Errors may
// differ from decoding them in order: callers that must name the failing batch decode them one at a
// time after a failure.
struct SharedBatchRows {
  std::span<const uint8_t> body;  // after the layout byte
  size_t body_offset = 0;
  uint8_t layout = kBatchShared;
  BatchShape shape;
  std::span<Half> out;
};
void decode_batches_shared_to_rows(std::span<const SharedBatchRows> batches,
                                   const DecodeOptions& options);

// Adds one decoded head's sizes, channel kinds and code entropy to `report`.
void add_head_size_report(const DecodedHead& head, CodedSizeReport& report);

// Section sizes of a layout-1 or -2 batch body (parameter blocks, model section with its
// length, slice payloads), for size reports.
struct SharedBatchSizes {
  size_t param_bytes = 0, model_bytes = 0, payload_bytes = 0;
};
SharedBatchSizes shared_batch_sizes(std::span<const uint8_t> body, size_t body_offset,
                                    uint8_t layout, size_t n_heads);
// The layout byte of a codec batch, or nullopt where its header does not parse (its decoder
// reports that).
std::optional<uint8_t> batch_layout(std::span<const uint8_t> bytes);

// Checks magic and version; returns the bytes after them.
std::span<const uint8_t> check_magic(std::span<const uint8_t> bytes, const uint8_t (&magic)[4],
                                     const char* what);

}  // namespace cachegen::detail
