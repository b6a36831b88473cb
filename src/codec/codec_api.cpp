// Public entry points of the codec layer (cachegen/codec.h).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <optional>
#include <string>

#include "cachegen/codec.h"
#include "codec/bit_io.h"
#include "codec/params_codec.h"
#include "codec/scratch.h"
#include "codec/stream_format.h"
#include "core/checks.h"
#include "core/huge_pages.h"
#include "core/parallel.h"
#include "quant/kernels.h"

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
  std::vector<uint8_t> out;
  out.reserve(64);  // the header's room: one allocation before the body's size is known
  out.assign(magic, magic + 4);
  out.push_back(detail::kFormatVersion);
  return out;
}

// The min/max and quantizer kernels for fp32 or fp16 inputs, row r at x + r * stride (fp32
// rows are contiguous: stride == dim, as every caller passes).
bool minmax_first(const float* x, size_t rows, size_t dim, size_t /*stride: dim*/, float* mn,
                  float* mx) {
  return detail::quant_kernels().minmax_rows_first(x, rows, dim, mn, mx);
}
bool minmax_first(const Half* x, size_t rows, size_t dim, size_t stride, float* mn, float* mx) {
  return detail::quant_kernels().minmax_rows_first_f16(reinterpret_cast<const uint16_t*>(x), rows,
                                                       dim, stride, mn, mx);
}
void quantize_checked_into(std::span<const float> x, size_t /*stride: dim*/, size_t n_rows,
                           size_t dim, int bits, size_t group_size, std::span<const float> scale,
                           std::span<const float> zero, CodeStream& s) {
  detail::codec_quantize_into(x, n_rows, dim, bits, group_size, scale, zero, s);
}
void quantize_checked_into(std::span<const Half> x, size_t stride, size_t n_rows, size_t dim,
                           int bits, size_t group_size, std::span<const float> scale,
                           std::span<const float> zero, CodeStream& s) {
  detail::codec_quantize_into(x.data(), stride, n_rows, dim, bits, group_size, scale, zero, s);
}
// Rows x[r * stride, r * stride + dim) copied side by side (for the reference quantizer).
template <typename T>
std::span<const T> contiguous_rows(std::span<const T> x, size_t stride, size_t n_rows, size_t dim) {
  if (stride == dim) return x;
  thread_local std::vector<T> rows;
  rows.resize(n_rows * dim);
  for (size_t r = 0; r < n_rows; ++r)
    std::copy_n(x.data() + r * stride, dim, rows.data() + r * dim);
  return rows;
}

// Quantizes fp32 or fp16 values (the latter as their exact widenings, with no fp32 copy)
// against codec-rounded parameters into s (its buffers reused); returns the parameters'
// precision. Row r of x starts at x[r * stride] (stride >= dim; fp32 rows contiguous), and x
// ends with the last row.
template <typename T>
ParamPrecision quantize_for_codec(std::span<const T> x, size_t stride, size_t n_rows, size_t dim,
                                  int bits, size_t group_size, const EncodeOptions& options,
                                  CodeStream& s) {
  detail::check_bits(bits);
  if (group_size == 0) detail::invalid("group_size must be >= 1");
  const size_t n = detail::checked_mul(n_rows, dim, "n_rows * dim");
  if (stride == dim && x.size() != n) {
    detail::invalid("x has " + std::to_string(x.size()) +
                    " values, expected n_rows * dim = " + std::to_string(n));
  }
  if (stride != dim &&
      (stride < dim || n_rows == 0 ||
       x.size() != detail::checked_mul(n_rows - 1, stride, "rows * stride") + dim)) {
    detail::invalid("x has " + std::to_string(x.size()) + " values, expected " +
                    std::to_string(n_rows) + " rows of " + std::to_string(dim) + " values " +
                    std::to_string(stride) + " apart");
  }
  const size_t n_groups = (n_rows + group_size - 1) / group_size;
  // Per thread, as the stream's buffers: fresh allocations page-fault on every call.
  thread_local std::vector<float> mins, maxs, scale, zero;
  mins.resize(n_groups * dim);
  maxs.resize(n_groups * dim);
  // The ranges keep the first of equal values (-0 and +0), which fp16 parameters preserve.
  bool finite = true;
  for (size_t g = 0; g < n_groups && n > 0; ++g) {
    const size_t row0 = g * group_size, rows = std::min(n_rows - row0, group_size);
    finite &= minmax_first(x.data() + row0 * stride, rows, dim, stride, mins.data() + g * dim,
                           maxs.data() + g * dim);
  }
  if (!finite) detail::invalid("x contains NaN or Inf");
  const detail::CompactGrid grid{options.scale_mantissa_bits, options.zero_step_log2};
  ParamPrecision precision = ParamPrecision::compact;
  if (!detail::round_params_compact(mins, maxs, bits, grid, scale, zero)) {
    precision = ParamPrecision::fp16;
    if (!detail::round_params_fp16(mins, maxs, bits, scale, zero)) {
      // Neither grid holds these values: keep the reference parameters, stored losslessly.
      quantize_to_codes_into(contiguous_rows(x, stride, n_rows, dim), n_rows, dim, bits, group_size,
                             s);
      return ParamPrecision::fp32;
    }
  }
  // x is finite (the min/max pass), the rounded parameters finite and scales > 0.
  quantize_checked_into(x, stride, n_rows, dim, bits, group_size, scale, zero, s);
  return precision;
}

// Quantizes for the codec and picks the exact parameter precision that codes smallest.
// compact_section (optional) receives the compact section when compact is chosen (emptied
// otherwise).
template <typename T>
ParamPrecision quantize_and_pick(std::span<const T> x, size_t n_rows, size_t dim, int bits,
                                 size_t group_size, const EncodeOptions& options, CodeStream& s,
                                 detail::CompactSection* compact_section = nullptr) {
  const ParamPrecision precision =
      quantize_for_codec(x, dim, n_rows, dim, bits, group_size, options, s);
  // fp16 parameters may still code smaller (e.g. tiny streams); both are exact here.
  if (precision != ParamPrecision::compact) {
    if (compact_section) compact_section->clear();
    return precision;
  }
  return detail::exact_param_precision(s, options, compact_section);
}

struct BatchHeader {
  uint64_t n_heads = 0;
  uint8_t layout = 0;
  size_t body_offset = 0;  // after the layout byte
};

BatchHeader read_batch_header(std::span<const uint8_t> bytes) {
  const auto body = detail::check_magic(bytes, detail::kBatchMagic, "codec batch");
  wire::Reader r(body, "codec batch", 5);
  BatchHeader h;
  h.n_heads = r.varint("n_heads");
  h.layout = r.u8("batch layout");
  if (h.layout > detail::kBatchOneModel) {
    detail::fail(ErrorCode::corrupt_input, "codec batch: layout " + std::to_string(h.layout) +
                                               " at offset " + std::to_string(r.offset() - 1) +
                                               " unknown");
  }
  if (h.n_heads > r.remaining()) {  // every head takes >= 1 byte either way
    detail::fail(ErrorCode::truncated_input, "codec batch: " + std::to_string(h.n_heads) +
                                                 " heads but only " +
                                                 std::to_string(r.remaining()) + " bytes follow");
  }
  h.body_offset = r.offset();
  return h;
}

// Splits an independent-layout batch into its head records.
std::vector<std::pair<size_t, size_t>> batch_records(std::span<const uint8_t> bytes,
                                                     const BatchHeader& h) {
  wire::Reader r(bytes.subspan(h.body_offset), "codec batch", h.body_offset);
  std::vector<uint64_t> lengths(h.n_heads);
  for (auto& len : lengths) len = r.varint("head record length");
  std::vector<std::pair<size_t, size_t>> records;
  records.reserve(h.n_heads);
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

// Compact sections kept per thread (their storage reused: fresh ones grew on every block of a
// file's caches, 160 of the 611 allocations of a stories260K file encode): `which` 0, or 1 for
// the second batch of a pair.
std::vector<detail::CompactSection>& thread_sections(int which) {
  thread_local std::vector<detail::CompactSection> kept[2];
  return kept[which];
}
// The same for the streams' parameter precisions.
std::vector<ParamPrecision>& thread_precisions(int which) {
  thread_local std::vector<ParamPrecision> kept[2];
  return kept[which];
}

// A batch's magic, head count and layout byte (shared: encode_batch_shared sets the shared
// layout written, write_independent layout 0).
std::vector<uint8_t> batch_start(size_t n_heads) {
  std::vector<uint8_t> out = with_magic(detail::kBatchMagic);
  wire::Writer w(out);
  w.varint(n_heads);
  w.u8(detail::kBatchShared);
  return out;
}

// The batch started in `out` as G independent head records.
void write_independent(std::span<const CodeStream> streams,
                       std::span<const ParamPrecision> precisions, const EncodeOptions& options,
                       std::span<const detail::CompactSection> compact_sections,
                       std::vector<uint8_t>& out) {
  out.back() = detail::kBatchIndependent;
  std::vector<std::vector<uint8_t>> heads(streams.size());
  detail::parallel_for(streams.size(), [&](size_t i) {
    detail::encode_head(streams[i], precisions[i], options, heads[i], {},
                        compact_sections.empty() ? nullptr : &compact_sections[i]);
  });
  wire::Writer w(out);
  for (const auto& h : heads) w.varint(h.size());
  for (const auto& h : heads) w.bytes(h);
}

// Shared layout when the heads share a shape and it is estimated smaller, else G records.
// compact_sections: per head, the compact parameter bits the precision choice kept, or none.
std::vector<uint8_t> encode_batch_of(std::span<const CodeStream> streams,
                                     std::span<const ParamPrecision> precisions,
                                     const EncodeOptions& options,
                                     std::span<const detail::CompactSection> compact_sections) {
  std::vector<uint8_t> out = batch_start(streams.size());
  if (!detail::encode_batch_shared(streams, precisions, options, out, compact_sections))
    write_independent(streams, precisions, options, compact_sections, out);
  return out;
}

// Parsed heads kept per thread for the decoders into caller buffers (their parameters and
// models reuse their storage from one batch to the next), resized to n.
std::vector<detail::ParsedHead>& thread_heads(size_t n) {
  thread_local std::vector<detail::ParsedHead> heads;
  heads.resize(n);
  return heads;
}

// The codes of parsed heads, fn(j, codes) for each head j (codes in this thread's scratch,
// valid during the call): their payloads decoded four at a time (decode_heads_symbols: one
// payload alone is one dependency chain; stories260K's 8 heads of 4,096 codes, one 8-lane
// payload each, decoded in 62 us one at a time, in 28 four at a time), the groups on the
// pool's threads where there is enough work for them (~0.9 ns a code, dequantized included).
template <typename Fn>
void decode_parsed_heads(std::span<const detail::ParsedHead> heads, Fn&& fn) {
  if (heads.empty()) return;
  const size_t n_groups = (heads.size() + 3) / 4;
  size_t codes = 0;
  for (const detail::ParsedHead& h : heads) codes += h.stream.n_rows * h.stream.dim;
  const double per_group = 0.9 * static_cast<double>(codes) / static_cast<double>(n_groups);
  detail::parallel_for_work(n_groups, per_group, [&](size_t g) {
    const size_t j0 = 4 * g, count = std::min<size_t>(4, heads.size() - j0);
    const detail::ParsedHead* group[4];
    std::span<uint8_t> symbols[4];
    size_t total = 0;
    for (size_t k = 0; k < count; ++k)
      total += heads[j0 + k].stream.n_rows * heads[j0 + k].stream.dim;
    uint8_t* at = detail::scratch_bytes(total);
    for (size_t k = 0; k < count; ++k) {
      const detail::ParsedHead& h = heads[j0 + k];
      group[k] = &h;
      symbols[k] = std::span<uint8_t>(at, h.stream.n_rows * h.stream.dim);
      at += symbols[k].size();
    }
    detail::decode_heads_symbols(std::span<const detail::ParsedHead* const>(group, count),
                                 std::span<const std::span<uint8_t>>(symbols, count));
    for (size_t k = 0; k < count; ++k) {
      detail::symbols_to_codes_in_place(symbols[k].data(), group[k]->stream,
                                        group[k]->is_delta.data());
      fn(j0 + k, symbols[k].data());
    }
  });
}

// One head record (no magic) at `offset` -> its CodeStream, padding rows restored.
CodeStream decode_record(std::span<const uint8_t> record, size_t offset,
                         const DecodeOptions& options) {
  detail::ParsedHead h = detail::parse_head(record, offset, options);
  CodeStream& s = h.stream;
  const size_t n = s.n_rows * s.dim;
  s.codes.resize(s.n_groups() * s.group_size * s.dim);
  detail::decode_head_symbols(h, std::span<uint8_t>(s.codes.data(), n));
  detail::symbols_to_codes_in_place(s.codes.data(), s, h.is_delta.data());
  detail::pad_codes_in_place(s);
  return std::move(s);
}

}  // namespace

std::vector<uint8_t> detail::encode_counted(const CodeStream& stream, const EncodeOptions& options,
                                            std::span<const uint32_t> counts) {
  check_options(options);
  validate(stream);
  std::vector<uint8_t> out = with_magic(detail::kStreamMagic);
  detail::encode_head_exact(stream, options, out, counts);
  return out;
}

std::vector<uint8_t> encode(const CodeStream& stream, const EncodeOptions& options) {
  return detail::encode_counted(stream, options, {});
}

CodeStream quantize_values(std::span<const float> x, size_t n_rows, size_t dim, int bits,
                           size_t group_size, const EncodeOptions& options) {
  CodeStream s;
  quantize_values_into(x, n_rows, dim, bits, group_size, options, s);
  return s;
}

void quantize_values_into(std::span<const float> x, size_t n_rows, size_t dim, int bits,
                          size_t group_size, const EncodeOptions& options, CodeStream& out) {
  check_options(options);
  quantize_for_codec(x, dim, n_rows, dim, bits, group_size, options, out);
}

void quantize_values_into(std::span<const Half> x, size_t n_rows, size_t dim, int bits,
                          size_t group_size, const EncodeOptions& options, CodeStream& out) {
  detail::quantize_values_reporting(x, dim, n_rows, dim, bits, group_size, options, out);
}

ParamPrecision detail::quantize_values_reporting(std::span<const Half> x, size_t stride,
                                                 size_t n_rows, size_t dim, int bits,
                                                 size_t group_size, const EncodeOptions& options,
                                                 CodeStream& out) {
  check_options(options);
  return quantize_for_codec(x, stride, n_rows, dim, bits, group_size, options, out);
}

std::vector<uint8_t> encode_values(std::span<const float> x, size_t n_rows, size_t dim, int bits,
                                   size_t group_size, const EncodeOptions& options,
                                   CodeStream* quantized) {
  check_options(options);
  std::vector<uint8_t> out = with_magic(detail::kStreamMagic);
  CodeStream s;
  const ParamPrecision precision = quantize_and_pick(x, n_rows, dim, bits, group_size, options, s);
  detail::encode_head(s, precision, options, out);
  if (quantized) *quantized = std::move(s);
  return out;
}

CodeStream decode(std::span<const uint8_t> bytes, const DecodeOptions& options) {
  const auto body = detail::check_magic(bytes, detail::kStreamMagic, "codec stream");
  return decode_record(body, 5, options);
}

CodeStream decode_expecting(std::span<const uint8_t> bytes, size_t n_rows, size_t dim, int bits,
                            const std::string& what) {
  DecodeOptions opt;  // the expected shape plus its last group's padding, no more
  opt.max_elements = (n_rows + std::min(n_rows, kMaxGroupSize)) * dim + dim;
  CodeStream s = decode(bytes, opt);
  if (s.n_rows != n_rows || s.dim != dim || s.bits != bits) {
    throw Error(ErrorCode::corrupt_input,
                what + " is " + std::to_string(s.n_rows) + "x" + std::to_string(s.dim) + " at " +
                    std::to_string(s.bits) + " bits, expected " + std::to_string(n_rows) + "x" +
                    std::to_string(dim) + " at " + std::to_string(bits));
  }
  return s;
}

namespace detail {

std::pair<const CodeStream&, const CodeStream&> decode_expecting_pair(const ExpectedStream& a,
                                                                      const ExpectedStream& b) {
  auto options = [](const ExpectedStream& e) {
    DecodeOptions opt;  // as decode_expecting
    opt.max_elements = (e.n_rows + std::min(e.n_rows, kMaxGroupSize)) * e.dim + e.dim;
    return opt;
  };
  thread_local ParsedHead kept[2];
  ParsedHead& ha = kept[0];
  ParsedHead& hb = kept[1];
  // The codes are kept at their size through the parses (which empty them), so that resizing
  // them fills only what grew.
  std::vector<uint8_t> codes[2] = {std::move(ha.stream.codes), std::move(hb.stream.codes)};
  try {
    parse_head_into(check_magic(a.bytes, kStreamMagic, "codec stream"), 5, options(a), ha);
    parse_head_into(check_magic(b.bytes, kStreamMagic, "codec stream"), 5, options(b), hb);
    ha.stream.codes.swap(codes[0]);
    hb.stream.codes.swap(codes[1]);
    const bool expected = ha.stream.n_rows == a.n_rows && ha.stream.dim == a.dim &&
                          ha.stream.bits == a.bits && hb.stream.n_rows == b.n_rows &&
                          hb.stream.dim == b.dim && hb.stream.bits == b.bits;
    if (expected) {
      CodeStream* streams[2] = {&ha.stream, &hb.stream};
      for (CodeStream* s : streams) s->codes.resize(s->n_groups() * s->group_size * s->dim);
      const size_t na = a.n_rows * a.dim, nb = b.n_rows * b.dim;
      const ParsedHead* heads[2] = {&ha, &hb};
      const std::span<uint8_t> symbols[2] = {std::span<uint8_t>(ha.stream.codes.data(), na),
                                             std::span<uint8_t>(hb.stream.codes.data(), nb)};
      decode_heads_symbols(heads, symbols);
      for (int k = 0; k < 2; ++k) {
        CodeStream& s = *streams[k];
        symbols_to_codes_in_place(s.codes.data(), s, heads[k]->is_delta.data());
        pad_codes_in_place(s);
      }
      return {ha.stream, hb.stream};
    }
  } catch (const Error&) {
  }
  // Another shape, or an error: one at a time reports the first failure as decode_expecting.
  ha.stream = decode_expecting(a.bytes, a.n_rows, a.dim, a.bits, *a.what);
  hb.stream = decode_expecting(b.bytes, b.n_rows, b.dim, b.bits, *b.what);
  return {ha.stream, hb.stream};
}

std::optional<uint8_t> batch_layout(std::span<const uint8_t> bytes) {
  try {
    return read_batch_header(bytes).layout;
  } catch (const Error&) {
    return std::nullopt;
  }
}

}  // namespace detail

std::vector<Half> decode_to_half(std::span<const uint8_t> bytes, const DecodeOptions& options) {
  const auto body = detail::check_magic(bytes, detail::kStreamMagic, "codec stream");
  const detail::ParsedHead h = detail::parse_head(body, 5, options);
  const size_t n = h.stream.n_rows * h.stream.dim;
  uint8_t* codes = detail::scratch_bytes(n);
  detail::decode_head_symbols(h, std::span<uint8_t>(codes, n));
  detail::symbols_to_codes_in_place(codes, h.stream, h.is_delta.data());
  std::vector<Half> out = detail::zeroed_halves(n);
  detail::dequant_real_rows(h.stream, codes, out.data());
  return out;
}

namespace {

// encode_batch's checks of its streams, and their parameters' precisions and compact sections.
// (sections: kept, its first streams.size() written.)
void check_and_pick(std::span<const CodeStream> streams, const EncodeOptions& options,
                    std::vector<ParamPrecision>& precisions,
                    std::vector<detail::CompactSection>& sections) {
  precisions.resize(streams.size());
  if (sections.size() < streams.size()) sections.resize(streams.size());
  // Each stream checked (its codes read once more: ~0.05 ns a code) and its parameters' precision
  // found (~0.01 ns a code), on one thread but for large batches (parallel_for_work); the first
  // bad stream's error is the one thrown, as a sequential check reports it. (The checks ran one
  // stream after another before: ~9% of the synthetic set's 2-thread encode.)
  thread_local std::vector<std::exception_ptr> kept_errors;  // (kept: no allocation per batch)
  std::vector<std::exception_ptr>& errors = kept_errors;
  errors.assign(streams.size(), nullptr);
  const double per_stream =
      streams.empty() ? 0.0 : 0.06 * static_cast<double>(streams[0].codes.size());
  detail::parallel_for_work(streams.size(), per_stream, [&](size_t i) {
    try {
      validate(streams[i]);
    } catch (...) {
      errors[i] = std::current_exception();
      return;
    }
    precisions[i] = detail::exact_param_precision(streams[i], options, &sections[i]);
  });
  for (std::exception_ptr& e : errors) {
    if (!e) continue;
    const std::exception_ptr first = std::move(e);
    errors.clear();  // none kept alive until the next batch
    std::rethrow_exception(first);
  }
}

}  // namespace

std::vector<uint8_t> encode_batch(std::span<const CodeStream> streams,
                                  const EncodeOptions& options) {
  check_options(options);
  std::vector<ParamPrecision>& precisions = thread_precisions(0);
  std::vector<detail::CompactSection>& sections = thread_sections(0);
  check_and_pick(streams, options, precisions, sections);
  return encode_batch_of(streams, precisions, options,
                         std::span<const detail::CompactSection>(sections.data(), streams.size()));
}

std::array<std::vector<uint8_t>, 2> detail::encode_batch_pair(std::span<const CodeStream> a,
                                                              std::span<const CodeStream> b,
                                                              const EncodeOptions& options) {
  check_options(options);
  const std::span<const CodeStream> streams[2] = {a, b};
  std::vector<ParamPrecision>* const precisions[2] = {&thread_precisions(0), &thread_precisions(1)};
  std::span<const detail::CompactSection> sections[2];
  for (int k = 0; k < 2; ++k) {
    std::vector<detail::CompactSection>& kept = thread_sections(k);
    check_and_pick(streams[k], options, *precisions[k], kept);
    sections[k] = std::span<const detail::CompactSection>(kept.data(), streams[k].size());
  }
  std::array<std::vector<uint8_t>, 2> out = {batch_start(a.size()), batch_start(b.size())};
  const detail::SharedBatchInput inputs[2] = {{a, *precisions[0], sections[0]},
                                              {b, *precisions[1], sections[1]}};
  std::vector<uint8_t>* const outs[2] = {&out[0], &out[1]};
  const std::array<bool, 2> shared = detail::encode_batch_shared_pair(inputs, options, outs);
  for (int k = 0; k < 2; ++k)
    if (!shared[k]) write_independent(streams[k], *precisions[k], options, sections[k], out[k]);
  return out;
}

namespace {

// encode_values_batch for fp32 or fp16 values [n_heads, n_rows, dim].
template <typename T>
std::vector<uint8_t> encode_values_batch_of(std::span<const T> x, size_t n_heads, size_t n_rows,
                                            size_t dim, int bits, size_t group_size,
                                            const EncodeOptions& options) {
  check_options(options);
  const size_t per_head = detail::checked_mul(n_rows, dim, "n_rows * dim");
  if (x.size() != detail::checked_mul(n_heads, per_head, "n_heads * n_rows * dim")) {
    detail::invalid("x has " + std::to_string(x.size()) +
                    " values, expected n_heads * n_rows * dim");
  }
  // The heads' codes live only until the batch is written: kept per calling thread, so a
  // later batch reuses their pages (fresh ones page-faulted on every call: most of a 1-thread
  // encode of 8 M values went to faults).
  // (Named through references: a lambda names a thread_local directly, i.e. each pool
  // thread's own instance.)
  thread_local std::vector<CodeStream> kept_streams;
  std::vector<CodeStream>& streams = kept_streams;
  std::vector<detail::CompactSection>& sections = thread_sections(0);
  if (streams.size() < n_heads) streams.resize(n_heads);
  if (sections.size() < n_heads) sections.resize(n_heads);
  std::vector<ParamPrecision>& precisions = thread_precisions(0);
  precisions.resize(n_heads);  // every one written below
  // ~0.4 ns a value (parallel_for_work).
  detail::parallel_for_work(n_heads, 0.4 * static_cast<double>(per_head), [&](size_t h) {
    precisions[h] = quantize_and_pick(x.subspan(h * per_head, per_head), n_rows, dim, bits,
                                      group_size, options, streams[h], &sections[h]);
  });
  return encode_batch_of(std::span<const CodeStream>(streams.data(), n_heads), precisions, options,
                         std::span<const detail::CompactSection>(sections.data(), n_heads));
}

}  // namespace

std::vector<uint8_t> encode_values_batch(std::span<const float> x, size_t n_heads, size_t n_rows,
                                         size_t dim, int bits, size_t group_size,
                                         const EncodeOptions& options) {
  return encode_values_batch_of(x, n_heads, n_rows, dim, bits, group_size, options);
}

std::vector<uint8_t> encode_values_batch(std::span<const Half> x, size_t n_heads, size_t n_rows,
                                         size_t dim, int bits, size_t group_size,
                                         const EncodeOptions& options) {
  return encode_values_batch_of(x, n_heads, n_rows, dim, bits, group_size, options);
}

CodedSizeReport coded_size_report_batch(std::span<const uint8_t> batch_bytes) {
  const BatchHeader bh = read_batch_header(batch_bytes);
  CodedSizeReport rep;
  rep.coded_bytes = batch_bytes.size();
  if (detail::is_shared_layout(bh.layout)) {
    const auto sizes = detail::shared_batch_sizes(batch_bytes.subspan(bh.body_offset),
                                                  bh.body_offset, bh.layout, bh.n_heads);
    rep.param_bytes = sizes.param_bytes;
    rep.model_bytes = sizes.model_bytes;
    rep.payload_bytes = sizes.payload_bytes;
  } else {
    for (const auto& [offset, length] : batch_records(batch_bytes, bh)) {
      detail::add_head_size_report(
          detail::decode_head(batch_bytes.subspan(offset, length), offset, DecodeOptions{}), rep);
    }
  }
  rep.header_bytes =
      rep.coded_bytes - rep.param_bytes - rep.model_bytes - rep.payload_bytes;  // framing
  return rep;
}

std::vector<CodeStream> decode_batch(std::span<const uint8_t> bytes, const DecodeOptions& options) {
  const BatchHeader bh = read_batch_header(bytes);
  if (detail::is_shared_layout(bh.layout)) {
    return detail::decode_batch_shared(bytes.subspan(bh.body_offset), bh.body_offset, bh.layout,
                                       bh.n_heads, options);
  }
  const auto records = batch_records(bytes, bh);
  std::vector<CodeStream> out(records.size());
  detail::parallel_for(records.size(), [&](size_t i) {
    out[i] = decode_record(bytes.subspan(records[i].first, records[i].second), records[i].first,
                           options);
  });
  return out;
}

namespace {

// fp16 [G, n_rows, dim] of a batch into dest(G * n_rows * dim), called once the batch is parsed
// and its heads' shapes checked (decode_batch_to_half, both forms).
void batch_to_half(std::span<const uint8_t> bytes, const DecodeOptions& options,
                   const std::function<Half*(size_t)>& dest) {
  const BatchHeader bh = read_batch_header(bytes);
  if (detail::is_shared_layout(bh.layout)) {
    detail::decode_batch_shared_to_half(bytes.subspan(bh.body_offset), bh.body_offset, bh.layout,
                                        bh.n_heads, options, dest);
    return;
  }
  const auto records = batch_records(bytes, bh);
  std::vector<detail::ParsedHead>& heads = thread_heads(records.size());
  detail::parallel_for(records.size(), [&](size_t i) {
    detail::parse_head_into(bytes.subspan(records[i].first, records[i].second), records[i].first,
                            options, heads[i]);
  });
  for (const auto& h : heads) {
    if (h.stream.n_rows != heads[0].stream.n_rows || h.stream.dim != heads[0].stream.dim) {
      detail::fail(ErrorCode::corrupt_input,
                   "codec batch: heads differ in shape; decode_batch_to_half needs one shape");
    }
  }
  const size_t n = heads.empty() ? 0 : heads[0].stream.n_rows * heads[0].stream.dim;
  Half* out = dest(detail::checked_mul(heads.size(), n, "batch output"));
  decode_parsed_heads(heads, [&](size_t i, const uint8_t* codes) {
    detail::dequant_real_rows(heads[i].stream, codes, out + i * n);
  });
}

}  // namespace

std::vector<Half> decode_batch_to_half(std::span<const uint8_t> bytes,
                                       const DecodeOptions& options) {
  std::vector<Half> out;
  batch_to_half(bytes, options, [&](size_t n) {
    out = detail::zeroed_halves(n);
    return out.data();
  });
  return out;
}

void decode_batch_to_half(std::span<const uint8_t> bytes, std::span<Half> out,
                          const DecodeOptions& options) {
  batch_to_half(bytes, options, [&](size_t n) {
    if (out.size() != n) {
      detail::invalid("decode_batch_to_half: out holds " + std::to_string(out.size()) +
                      " values, the batch " + std::to_string(n));
    }
    return out.data();
  });
}

void decode_batch_to_rows(std::span<const uint8_t> bytes, const BatchShape& shape,
                          std::span<Half> out, const DecodeOptions& options) {
  const size_t n = detail::checked_mul(detail::checked_mul(shape.n_heads, shape.n_rows, "shape"),
                                       shape.dim, "shape");
  if (out.size() != n) {
    detail::invalid("decode_batch_to_rows: out holds " + std::to_string(out.size()) +
                    " values, the shape " + std::to_string(n));
  }
  const BatchHeader bh = read_batch_header(bytes);
  if (bh.n_heads != shape.n_heads) {
    detail::fail(ErrorCode::corrupt_input, "codec batch: " + std::to_string(bh.n_heads) +
                                               " heads, expected " + std::to_string(shape.n_heads));
  }
  if (detail::is_shared_layout(bh.layout)) {
    detail::decode_batch_shared_to_rows(bytes.subspan(bh.body_offset), bh.body_offset, bh.layout,
                                        shape, out, options);
    return;
  }
  const auto records = batch_records(bytes, bh);
  std::vector<detail::ParsedHead>& heads = thread_heads(records.size());
  detail::parallel_for(records.size(), [&](size_t i) {
    detail::parse_head_into(bytes.subspan(records[i].first, records[i].second), records[i].first,
                            options, heads[i]);
  });
  for (size_t i = 0; i < heads.size(); ++i) detail::check_head_shape(heads[i].stream, i, shape);
  decode_parsed_heads(heads, [&](size_t i, const uint8_t* codes) {
    detail::dequant_real_rows_strided(heads[i].stream, codes, out.data() + i * shape.dim,
                                      shape.n_heads * shape.dim);
  });
}

namespace {

// The heads of several independent-layout batches (their numbers in `which`), four at a time
// across batches (decode_parsed_heads: a file's one-head tensors are a layer's K and V, each its
// own batch), with decode_batch_to_rows' results; its checks are left to the caller's retry.
void decode_independent_to_rows(std::span<const BatchRows> batches, std::span<const size_t> which,
                                const DecodeOptions& options) {
  struct Head {
    const BatchRows* batch;
    size_t index;  // the head's number in its batch
    std::pair<size_t, size_t> record;
  };
  thread_local std::vector<Head> kept_heads;
  std::vector<Head>& list = kept_heads;
  list.clear();
  for (const size_t k : which) {
    const BatchRows& b = batches[k];
    const BatchHeader bh = read_batch_header(b.bytes);
    const size_t n = detail::checked_mul(
        detail::checked_mul(b.shape.n_heads, b.shape.n_rows, "shape"), b.shape.dim, "shape");
    if (bh.layout != detail::kBatchIndependent || bh.n_heads != b.shape.n_heads ||
        b.out.size() != n) {
      detail::invalid("decode_batches_to_rows: a batch unlike its shape");
    }
    const auto records = batch_records(b.bytes, bh);
    for (size_t i = 0; i < records.size(); ++i) list.push_back(Head{&b, i, records[i]});
  }
  std::vector<detail::ParsedHead>& heads = thread_heads(list.size());
  detail::parallel_for(list.size(), [&](size_t j) {
    const Head& h = list[j];
    detail::parse_head_into(h.batch->bytes.subspan(h.record.first, h.record.second), h.record.first,
                            options, heads[j]);
    detail::check_head_shape(heads[j].stream, h.index, h.batch->shape);
  });
  decode_parsed_heads(heads, [&](size_t j, const uint8_t* codes) {
    const BatchShape& shape = list[j].batch->shape;
    detail::dequant_real_rows_strided(heads[j].stream, codes,
                                      list[j].batch->out.data() + list[j].index * shape.dim,
                                      shape.n_heads * shape.dim);
  });
}

}  // namespace

void decode_batches_to_rows(std::span<const BatchRows> batches, const DecodeOptions& options) {
  // Shared-model batches are decoded together, the independent ones' heads four at a time after
  // them (the encoder picks the layout per batch, so a level file mixes them); any error decodes
  // them all one at a time again, which reports the first failing batch exactly as
  // decode_batch_to_rows does.
  thread_local std::vector<detail::SharedBatchRows> kept_jobs;
  thread_local std::vector<size_t> kept_shared, kept_alone;
  std::vector<detail::SharedBatchRows>& jobs = kept_jobs;
  std::vector<size_t>& shared = kept_shared;  // the jobs' batch numbers
  std::vector<size_t>& alone = kept_alone;
  jobs.clear();
  shared.clear();
  alone.clear();
  try {
    for (size_t k = 0; batches.size() >= 2 && k < batches.size(); ++k) {
      const BatchRows& b = batches[k];
      const BatchShape& shape = b.shape;
      const BatchHeader bh = read_batch_header(b.bytes);
      if (detail::is_shared_layout(bh.layout) && bh.n_heads == shape.n_heads &&
          b.out.size() ==
              detail::checked_mul(detail::checked_mul(shape.n_heads, shape.n_rows, "shape"),
                                  shape.dim, "shape")) {
        jobs.push_back(detail::SharedBatchRows{b.bytes.subspan(bh.body_offset), bh.body_offset,
                                               bh.layout, shape, b.out});
        shared.push_back(k);
      } else {
        alone.push_back(k);
      }
    }
    if (jobs.size() >= 2 || alone.size() >= 2) {
      if (jobs.size() >= 2) {
        detail::decode_batches_shared_to_rows(jobs, options);
      } else {
        for (const size_t k : shared)
          decode_batch_to_rows(batches[k].bytes, batches[k].shape, batches[k].out, options);
      }
      if (alone.size() >= 2) {
        decode_independent_to_rows(batches, alone, options);
      } else {
        for (const size_t k : alone)
          decode_batch_to_rows(batches[k].bytes, batches[k].shape, batches[k].out, options);
      }
      return;
    }
  } catch (const Error&) {
  }
  for (const BatchRows& b : batches) decode_batch_to_rows(b.bytes, b.shape, b.out, options);
}

}  // namespace cachegen
