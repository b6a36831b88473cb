// Public entry points of the codec layer (cachegen/codec.h).
#include <algorithm>
#include <cmath>
#include <string>

#include "cachegen/codec.h"
#include "codec/bit_io.h"
#include "codec/params_codec.h"
#include "codec/stream_format.h"
#include "core/checks.h"
#include "core/parallel.h"

namespace cachegen {
namespace {

void check_options(const EncodeOptions& o) {
  if (o.scale_mantissa_bits < 1 || o.scale_mantissa_bits > 23)
    detail::invalid("EncodeOptions::scale_mantissa_bits must be in 1..23, got " +
                    std::to_string(o.scale_mantissa_bits));
  if (o.zero_step_log2 < 0 || o.zero_step_log2 > 8)
    detail::invalid("EncodeOptions::zero_step_log2 must be in 0..8, got " +
                    std::to_string(o.zero_step_log2));
}

std::vector<uint8_t> with_magic(const uint8_t (&magic)[4]) {
  std::vector<uint8_t> out(magic, magic + 4);
  out.push_back(detail::kFormatVersion);
  return out;
}

// Quantizes against codec-rounded parameters; returns the stream and its param precision.
CodeStream quantize_for_codec(std::span<const float> x, size_t n_rows, size_t dim, int bits,
                              size_t group_size, const EncodeOptions& options,
                              ParamPrecision& precision) {
  detail::check_bits(bits);
  if (group_size == 0) detail::invalid("group_size must be >= 1");
  const size_t n = detail::checked_mul(n_rows, dim, "n_rows * dim");
  if (x.size() != n) {
    detail::invalid("x has " + std::to_string(x.size()) +
                    " values, expected n_rows * dim = " + std::to_string(n));
  }
  for (float v : x)
    if (!std::isfinite(v)) detail::invalid("x contains NaN or Inf");
  const size_t n_groups = (n_rows + group_size - 1) / group_size;
  std::vector<float> mins(n_groups * dim), maxs(n_groups * dim);
  for (size_t g = 0; g < n_groups; ++g) {
    const size_t end = std::min(n_rows, (g + 1) * group_size);
    for (size_t c = 0; c < dim; ++c) {
      float lo = x[g * group_size * dim + c], hi = lo;
      for (size_t t = g * group_size + 1; t < end; ++t) {
        lo = std::min(lo, x[t * dim + c]);
        hi = std::max(hi, x[t * dim + c]);
      }
      mins[g * dim + c] = lo;
      maxs[g * dim + c] = hi;
    }
  }
  const detail::CompactGrid grid{options.scale_mantissa_bits, options.zero_step_log2};
  std::vector<float> scale, zero;
  precision = ParamPrecision::compact;
  if (!detail::round_params_compact(mins, maxs, bits, grid, scale, zero)) {
    precision = ParamPrecision::fp16;
    if (!detail::round_params_fp16(mins, maxs, bits, scale, zero)) {
      // Neither grid holds these values: keep the reference parameters, stored losslessly.
      precision = ParamPrecision::fp32;
      return quantize_to_codes(x, n_rows, dim, bits, group_size);
    }
  }
  return quantize_with_params(x, n_rows, dim, bits, group_size, scale, zero);
}

void encode_values_into(std::span<const float> x, size_t n_rows, size_t dim, int bits,
                        size_t group_size, const EncodeOptions& options, CodeStream* quantized,
                        std::vector<uint8_t>& out) {
  ParamPrecision precision;
  CodeStream s = quantize_for_codec(x, n_rows, dim, bits, group_size, options, precision);
  std::vector<uint8_t> head;
  if (precision == ParamPrecision::compact) {
    // fp16 parameters may still code smaller (e.g. tiny streams); both are exact here.
    detail::encode_head_exact(s, options, head);
  } else {
    detail::encode_head(s, precision, options.scale_mantissa_bits, options.zero_step_log2,
                        options.allow_delta, head);
  }
  out.insert(out.end(), head.begin(), head.end());
  if (quantized) *quantized = std::move(s);
}

// Splits a batch into its head records.
std::vector<std::pair<size_t, size_t>> batch_records(std::span<const uint8_t> bytes) {
  const auto body = detail::check_magic(bytes, detail::kBatchMagic, "codec batch");
  detail::ByteReader r(body, 5);
  const uint64_t n_heads = r.varint("n_heads");
  if (n_heads > r.remaining()) {  // every length takes >= 1 byte
    detail::fail(ErrorCode::truncated_input, "codec batch: " + std::to_string(n_heads) +
                                                 " heads but only " +
                                                 std::to_string(r.remaining()) + " bytes follow");
  }
  std::vector<uint64_t> lengths(n_heads);
  for (auto& len : lengths) len = r.varint("head record length");
  std::vector<std::pair<size_t, size_t>> records;
  records.reserve(n_heads);
  size_t offset = r.offset();
  for (uint64_t len : lengths) {
    if (len > bytes.size() - offset) {
      detail::fail(ErrorCode::truncated_input, "codec batch: head record at offset " +
                                                   std::to_string(offset) + " of length " +
                                                   std::to_string(len) + " runs past the end (" +
                                                   std::to_string(bytes.size()) + " bytes)");
    }
    records.emplace_back(offset, len);
    offset += len;
  }
  if (offset != bytes.size()) {
    detail::fail(ErrorCode::corrupt_input, "codec batch: " + std::to_string(bytes.size() - offset) +
                                               " trailing bytes at offset " +
                                               std::to_string(offset));
  }
  return records;
}

std::vector<uint8_t> assemble_batch(std::vector<std::vector<uint8_t>>& heads) {
  std::vector<uint8_t> out = with_magic(detail::kBatchMagic);
  detail::ByteWriter w(out);
  w.varint(heads.size());
  for (const auto& h : heads) w.varint(h.size());
  for (const auto& h : heads) w.bytes(h);
  return out;
}

}  // namespace

std::vector<uint8_t> encode(const CodeStream& stream, const EncodeOptions& options) {
  check_options(options);
  validate(stream);
  std::vector<uint8_t> out = with_magic(detail::kStreamMagic);
  detail::encode_head_exact(stream, options, out);
  return out;
}

std::vector<uint8_t> encode_values(std::span<const float> x, size_t n_rows, size_t dim, int bits,
                                   size_t group_size, const EncodeOptions& options,
                                   CodeStream* quantized) {
  check_options(options);
  std::vector<uint8_t> out = with_magic(detail::kStreamMagic);
  encode_values_into(x, n_rows, dim, bits, group_size, options, quantized, out);
  return out;
}

CodeStream decode(std::span<const uint8_t> bytes, const DecodeOptions& options) {
  const auto body = detail::check_magic(bytes, detail::kStreamMagic, "codec stream");
  return detail::decode_head(body, 5, options).stream;
}

std::vector<Half> decode_to_half(std::span<const uint8_t> bytes, const DecodeOptions& options) {
  return dequant_codes(decode(bytes, options));
}

std::vector<uint8_t> encode_batch(std::span<const CodeStream> streams,
                                  const EncodeOptions& options) {
  check_options(options);
  for (const auto& s : streams) validate(s);
  std::vector<std::vector<uint8_t>> heads(streams.size());
  detail::parallel_for(streams.size(),
                       [&](size_t i) { detail::encode_head_exact(streams[i], options, heads[i]); });
  return assemble_batch(heads);
}

std::vector<uint8_t> encode_values_batch(std::span<const float> x, size_t n_heads, size_t n_rows,
                                         size_t dim, int bits, size_t group_size,
                                         const EncodeOptions& options) {
  check_options(options);
  const size_t per_head = detail::checked_mul(n_rows, dim, "n_rows * dim");
  if (x.size() != detail::checked_mul(n_heads, per_head, "n_heads * n_rows * dim")) {
    detail::invalid("x has " + std::to_string(x.size()) +
                    " values, expected n_heads * n_rows * dim");
  }
  std::vector<std::vector<uint8_t>> heads(n_heads);
  detail::parallel_for(n_heads, [&](size_t h) {
    encode_values_into(x.subspan(h * per_head, per_head), n_rows, dim, bits, group_size, options,
                       nullptr, heads[h]);
  });
  return assemble_batch(heads);
}

std::vector<CodeStream> decode_batch(std::span<const uint8_t> bytes, const DecodeOptions& options) {
  const auto records = batch_records(bytes);
  std::vector<CodeStream> out(records.size());
  detail::parallel_for(records.size(), [&](size_t i) {
    out[i] = detail::decode_head(bytes.subspan(records[i].first, records[i].second),
                                 records[i].first, options)
                 .stream;
  });
  return out;
}

std::vector<Half> decode_batch_to_half(std::span<const uint8_t> bytes,
                                       const DecodeOptions& options) {
  const std::vector<CodeStream> streams = decode_batch(bytes, options);
  for (const auto& s : streams) {
    if (s.n_rows != streams[0].n_rows || s.dim != streams[0].dim) {
      detail::fail(ErrorCode::corrupt_input,
                   "codec batch: heads differ in shape; decode_batch_to_half needs one shape");
    }
  }
  return dequant_codes_batch(streams);
}

}  // namespace cachegen
