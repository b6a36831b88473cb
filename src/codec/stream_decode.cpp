// Decoder of one head record. Every field is bounded before it sizes an allocation.
#include <algorithm>
#include <cstring>
#include <optional>
#include <string>

#include "codec/bit_io.h"
#include "codec/params_codec.h"
#include "codec/rans.h"
#include "codec/stream_format.h"
#include "codec/token_delta_transform.h"
#include "quant/kernels.h"

namespace cachegen::detail {
namespace {

[[noreturn]] void corrupt(const std::string& what) {
  fail(ErrorCode::corrupt_input, "codec stream: " + what);
}

size_t bounded_mul(size_t a, size_t b, size_t limit, const char* what) {
  size_t r;
  if (__builtin_mul_overflow(a, b, &r) || r > limit) {
    fail(ErrorCode::invalid_argument,
         std::string("codec stream: ") + what + " (" + std::to_string(a) + " * " +
             std::to_string(b) +
             ") exceeds DecodeOptions::max_elements = " + std::to_string(limit));
  }
  return r;
}

void read_float_params(wire::Reader& r, ParamPrecision precision, std::vector<float>& out,
                       const char* field) {
  // One bounds check for the whole block (a check per value showed in decode profiles).
  const size_t width = precision == ParamPrecision::fp16 ? 2 : 4;
  // fp32 as one block copy (a word at a time, tested for the precision, did not vectorise).
  const uint8_t* in = r.take(out.size() * width, field).data();
  if (precision != ParamPrecision::fp16) return wire::load_le32_array(in, out.data(), out.size());
  float* const o = out.data();
  for (size_t i = 0; i < out.size(); ++i)
    o[i] = half_to_float(Half{static_cast<uint16_t>(wire::load_le(in + 2 * i, 2))});
}

// fp16 or fp32 group parameters (scales, then zeros) of s's shape, checked.
void read_fixed_params(wire::Reader& r, ParamPrecision precision, CodeStream& s) {
  const size_t n_params = s.n_groups() * s.dim;
  const size_t width = precision == ParamPrecision::fp16 ? 2 : 4;
  r.need(n_params * width * 2, "fixed-width group parameters");
  s.scale.resize(n_params);
  s.zero.resize(n_params);
  read_float_params(r, precision, s.scale, "scale");
  read_float_params(r, precision, s.zero, "zero");
  check_decoded_params(s.scale, s.zero);
}

}  // namespace

std::span<const uint8_t> check_magic(std::span<const uint8_t> bytes, const uint8_t (&magic)[4],
                                     const char* what) {
  if (bytes.size() < 5) {
    fail(ErrorCode::truncated_input, std::string(what) + ": " + std::to_string(bytes.size()) +
                                         " bytes, shorter than the 5-byte magic + version");
  }
  if (std::memcmp(bytes.data(), magic, 4) != 0) {
    corrupt(std::string("bad magic at offset 0 (expected ") + what + ")");
  }
  if (bytes[4] != kFormatVersion) {
    fail(ErrorCode::unsupported_version,
         std::string(what) + ": format version " + std::to_string(bytes[4]) +
             " at offset 4; this build reads " + std::to_string(kFormatVersion));
  }
  return bytes.subspan(5);
}

void parse_head_into(std::span<const uint8_t> record, size_t record_offset,
                     const DecodeOptions& options, ParsedHead& h) {
  wire::Reader r(record, "codec stream", record_offset);
  CodeStream& s = h.stream;
  s.codes.clear();
  const uint64_t n_rows = r.varint("n_rows");
  const uint64_t dim = r.varint("dim");
  const uint64_t group_size = r.varint("group_size");
  const uint8_t bits = r.u8("bits");
  const uint8_t precision_byte = r.u8("param_precision");
  if (group_size == 0) corrupt("group_size is 0");
  if (bits < 1 || bits > 8) corrupt("bits " + std::to_string(bits) + " outside 1..8");
  if (precision_byte > 2) corrupt("param_precision " + std::to_string(precision_byte) + " unknown");
  const auto precision = static_cast<ParamPrecision>(precision_byte);
  CompactGrid grid;
  if (precision == ParamPrecision::compact) {
    grid.scale_mantissa_bits = r.u8("scale_mantissa_bits");
    grid.zero_step_log2 = r.u8("zero_step_log2");
    if (grid.scale_mantissa_bits < 1 || grid.scale_mantissa_bits > 23 || grid.zero_step_log2 > 8)
      corrupt("compact grid (" + std::to_string(grid.scale_mantissa_bits) + ", " +
              std::to_string(grid.zero_step_log2) + ") out of range");
  }
  const int coder_precision = r.u8("coder_precision");
  const int n_lanes = r.u8("n_lanes");
  // Bound the shape before anything is allocated: elements, including group padding.
  const size_t limit = options.max_elements;
  const size_t n = bounded_mul(n_rows, dim, limit, "n_rows * dim");
  const size_t n_groups = (n_rows + group_size - 1) / group_size;
  bounded_mul(bounded_mul(n_groups, group_size, limit, "padded rows"), dim, limit,
              "padded rows * dim");
  if (coder_precision > kMaxPrecision) corrupt("coder_precision above 12");
  if (n == 0 ? (n_lanes != 0 || coder_precision != 0) : (n_lanes < 1 || n_lanes > kMaxLanes))
    corrupt("n_lanes " + std::to_string(n_lanes) + " invalid for " + std::to_string(n) +
            " elements");
  h.header_bytes = r.offset() - record_offset;

  s.n_rows = n_rows;
  s.dim = dim;
  s.group_size = group_size;
  s.bits = bits;
  const size_t n_params = n_groups * dim;
  if (precision != ParamPrecision::compact) read_fixed_params(r, precision, s);
  const size_t params_end = r.offset();
  const uint64_t side_bytes = r.varint("side_bytes");
  if (side_bytes > r.remaining()) r.need(r.remaining() + 1, "side information");
  const size_t side_offset = r.offset();
  BitReader bits_in(r.take(side_bytes, "side information"), side_offset);
  // Every channel model takes >= 2 bits and every compact parameter pair >= 2 bits.
  if (dim > side_bytes * 4)
    corrupt("dim " + std::to_string(dim) + " exceeds what the side section can describe");
  if (precision == ParamPrecision::compact) {
    if (n_params > side_bytes * 4) corrupt("too many compact parameters for the side section");
    read_params_compact(bits_in, n_groups, dim, grid, s.scale, s.zero);
  }
  const size_t bits_after_params = side_bytes * 8 - bits_in.bits_left();
  h.models.resize(dim);
  h.is_delta.resize(dim);
  for (size_t c = 0; c < dim; ++c) {
    read_channel_model(bits_in, bits, n_rows, h.models[c]);
    if (h.models[c].table.t > coder_precision)
      corrupt("channel " + std::to_string(c) + " table precision above coder_precision");
    h.is_delta[c] = h.models[c].kind == ChannelKind::delta_table;
  }
  bits_in.finish("side information");
  h.param_bytes = params_end - (record_offset + h.header_bytes) + bits_after_params / 8;
  h.model_bytes = r.offset() - params_end - bits_after_params / 8;
  h.payload_bytes = r.remaining();

  h.coder_precision = coder_precision;
  h.n_lanes = n_lanes;
  h.payload = r.take(r.remaining(), "rANS payload");
  h.payload_offset = side_offset + side_bytes;
  if (n == 0 && !h.payload.empty())
    corrupt(std::to_string(h.payload.size()) + " trailing bytes after an empty stream");
}

void frame_param_block(wire::Reader& r, const CodeStream& s, FramedParams& framed) {
  const uint8_t precision_byte = r.u8("param_precision");
  if (precision_byte > 2) corrupt("param_precision " + std::to_string(precision_byte) + " unknown");
  const auto precision = static_cast<ParamPrecision>(precision_byte);
  const size_t n_params = s.n_groups() * s.dim;
  framed.precision = precision;
  if (precision == ParamPrecision::compact) {
    CompactGrid& grid = framed.grid;
    grid.scale_mantissa_bits = r.u8("scale_mantissa_bits");
    grid.zero_step_log2 = r.u8("zero_step_log2");
    if (grid.scale_mantissa_bits < 1 || grid.scale_mantissa_bits > 23 || grid.zero_step_log2 > 8)
      corrupt("compact grid (" + std::to_string(grid.scale_mantissa_bits) + ", " +
              std::to_string(grid.zero_step_log2) + ") out of range");
    const uint64_t len = r.varint("compact parameter bytes");
    if (len > r.remaining()) r.need(r.remaining() + 1, "compact parameters");
    if (n_params > len * 4) corrupt("too many compact parameters for their section");
    framed.offset = r.offset();
    framed.bits = r.take(len, "compact parameters");
    return;
  }
  const size_t bytes = n_params * (precision == ParamPrecision::fp16 ? 2 : 4) * 2;
  r.need(bytes, "fixed-width group parameters");
  framed.offset = r.offset();
  framed.bits = r.take(bytes, "fixed-width group parameters");
}

void decode_framed_params(const FramedParams& framed, CodeStream& s) {
  if (framed.precision != ParamPrecision::compact) {
    wire::Reader r(framed.bits, "codec stream", framed.offset);
    return read_fixed_params(r, framed.precision, s);
  }
  BitReader bits_in(framed.bits, framed.offset);
  read_params_compact(bits_in, s.n_groups(), s.dim, framed.grid, s.scale, s.zero);
  bits_in.finish("compact parameters");
}

void decode_compact_params_pair(const FramedParams& ca, CodeStream& sa, const FramedParams& cb,
                                CodeStream& sb, int& failing) {
  BitReader ra(ca.bits, ca.offset), rb(cb.bits, cb.offset);
  read_params_compact_pair(ra, sa.n_groups(), sa.dim, ca.grid, sa.scale, sa.zero, rb, sb.n_groups(),
                           sb.dim, cb.grid, sb.scale, sb.zero, "compact parameters", failing);
}

bool decode_compact_params_lanes(std::span<const FramedParams* const> framed,
                                 std::span<CodeStream* const> s) {
  const size_t m = framed.size();
  if (m == 0 || m > kMaxLaneReaders || !BitReader::lanes_available()) return false;
  std::optional<BitReader> readers[kMaxLaneReaders];
  BitReader* r[kMaxLaneReaders];
  const CompactGrid* grid[kMaxLaneReaders];
  std::vector<float>* scale[kMaxLaneReaders];
  std::vector<float>* zero[kMaxLaneReaders];
  for (size_t j = 0; j < m; ++j) {
    r[j] = &readers[j].emplace(framed[j]->bits, framed[j]->offset);
    grid[j] = &framed[j]->grid;
    scale[j] = &s[j]->scale;
    zero[j] = &s[j]->zero;
  }
  return read_params_compact_lanes(std::span(r, m), s[0]->n_groups(), s[0]->dim, std::span(grid, m),
                                   std::span(scale, m), std::span(zero, m), "compact parameters");
}

void read_param_block(wire::Reader& r, CodeStream& s) {
  FramedParams framed;
  frame_param_block(r, s, framed);
  decode_framed_params(framed, s);
}

namespace {

// The decoder's tables for a parsed head's channel models, into dt (reusing its storage).
void build_head_tables(const ParsedHead& h, DecodeTables& dt) {
  thread_local std::vector<ChannelTable> tables;  // copy-assignment reuses their storage
  tables.resize(h.models.size());
  for (size_t c = 0; c < tables.size(); ++c) tables[c] = h.models[c].table;
  build_decode_tables(tables, h.coder_precision, dt);
}

}  // namespace

void decode_head_symbols(const ParsedHead& h, std::span<uint8_t> symbols) {
  if (symbols.empty()) return;
  thread_local DecodeTables dt;  // kept per thread: build_decode_tables reuses its storage
  build_head_tables(h, dt);
  rans_decode(h.payload, h.payload_offset, dt, h.stream.dim, h.n_lanes, symbols);
}

void decode_heads_symbols(std::span<const ParsedHead* const> heads,
                          std::span<const std::span<uint8_t>> symbols) {
  const size_t n = heads.size();
  bool together = n >= 2 && n <= 4 && symbols.size() == n;
  for (size_t k = 0; together && k < n; ++k) {
    together = !symbols[k].empty() && heads[k]->stream.dim == heads[0]->stream.dim;
  }
  if (!together) {
    for (size_t k = 0; k < n; ++k) decode_head_symbols(*heads[k], symbols[k]);
    return;
  }
  thread_local DecodeTables dt[4];  // kept per thread: build_decode_tables reuses their storage
  RansPayload p[4];
  for (size_t k = 0; k < n; ++k) {
    const ParsedHead& h = *heads[k];
    build_head_tables(h, dt[k]);
    p[k] = RansPayload{h.payload, h.payload_offset, h.n_lanes, symbols[k]};
  }
  const size_t dim = heads[0]->stream.dim;
  if (n == 4) {
    const DecodeTables* const t[4] = {&dt[0], &dt[1], &dt[2], &dt[3]};
    rans_decode_quad(p, t, dim);
    return;
  }
  rans_decode_pair(p[0], dt[0], p[1], dt[1], dim);
  if (n == 3)
    rans_decode(p[2].payload, p[2].payload_offset, dt[2], dim, p[2].n_lanes, p[2].symbols);
}

DecodedHead decode_head(std::span<const uint8_t> record, size_t record_offset,
                        const DecodeOptions& options) {
  ParsedHead p = parse_head(record, record_offset, options);
  DecodedHead h;
  h.symbols.resize(p.stream.n_rows * p.stream.dim);
  decode_head_symbols(p, h.symbols);
  std::vector<uint8_t> codes = h.symbols;
  symbols_to_codes_in_place(codes.data(), p.stream, p.is_delta.data());
  h.stream = std::move(p.stream);
  set_codes_with_padding(h.stream, codes.data());
  h.models = std::move(p.models);
  h.header_bytes = p.header_bytes;
  h.param_bytes = p.param_bytes;
  h.model_bytes = p.model_bytes;
  h.payload_bytes = p.payload_bytes;
  return h;
}

void symbols_to_codes_in_place(uint8_t* symbols, const CodeStream& s, const uint8_t* is_delta) {
  // Raw-code channels are their own codes: a stream without delta channels (the common case
  // on real KV) needs no pass at all.
  if (std::none_of(is_delta, is_delta + s.dim, [](uint8_t d) { return d != 0; })) return;
  symbols_to_codes(symbols, s.n_rows, s.dim, s.bits, s.group_size, s.scale, s.zero, is_delta,
                   symbols);
}

void symbols_to_codes_in_place(uint8_t* symbols, size_t stride, std::span<const CodeStream> heads,
                               const uint8_t* is_delta) {
  if (heads.empty()) return;
  const CodeStream& s = heads[0];
  if (std::none_of(is_delta, is_delta + s.dim, [](uint8_t d) { return d != 0; })) return;
  DeltaHead delta[4];
  for (size_t h0 = 0; h0 < heads.size(); h0 += 4) {
    const size_t n = std::min<size_t>(4, heads.size() - h0);
    for (size_t k = 0; k < n; ++k) {
      uint8_t* const at = symbols + (h0 + k) * stride;
      delta[k] = DeltaHead{at, heads[h0 + k].scale, heads[h0 + k].zero, at};
    }
    symbols_to_codes_heads(std::span<const DeltaHead>(delta, n), s.n_rows, s.dim, s.bits,
                           s.group_size, is_delta);
  }
}

void set_codes_with_padding(CodeStream& s, const uint8_t* real_codes) {
  const size_t n = s.n_rows * s.dim;
  s.codes.resize(s.n_groups() * s.group_size * s.dim);
  if (n == 0) return;
  std::memcpy(s.codes.data(), real_codes, n);
  pad_codes_in_place(s);
}

void pad_codes_in_place(CodeStream& s) {
  if (s.n_rows == 0 || s.dim == 0) return;  // nothing to copy (and codes.data() may be null)
  for (size_t t = s.n_rows; t < s.n_groups() * s.group_size; ++t)
    std::memcpy(s.codes.data() + t * s.dim, s.codes.data() + (s.n_rows - 1) * s.dim, s.dim);
}

namespace {

// out[0..64) = p[0..D) repeated: with D a constant, a few vector stores (a loop indexing
// p[i & (dim - 1)] was a tenth of a head-dim-8 fp16 decode). For the dims below 64 that divide
// it, but 8 (see dequant_real_rows).
template <size_t D>
void repeat_to_64(const float* p, float* out) {
  for (size_t i = 0; i < 64; i += D) {
    for (size_t c = 0; c < D; ++c) out[i + c] = p[c];
  }
}

using RepeatTo64 = void (*)(const float*, float*);
RepeatTo64 repeat_to_64_for(size_t dim) {
  switch (dim) {
    case 1:
      return repeat_to_64<1>;
    case 2:
      return repeat_to_64<2>;
    case 4:
      return repeat_to_64<4>;
    case 16:
      return repeat_to_64<16>;
    case 32:
      return repeat_to_64<32>;
    default:
      return nullptr;
  }
}

}  // namespace

void dequant_real_rows(const CodeStream& s, const uint8_t* codes, Half* out) {
  // A legal empty stream (0 rows, or 0 channels: the widening below divides by dim).
  if (s.n_rows == 0 || s.dim == 0) return;
  const QuantKernels& k = quant_kernels();
  uint16_t* o = reinterpret_cast<uint16_t*>(out);
  // Narrow heads run the row kernel on 64-wide "rows" of several real rows with the group's
  // parameters repeated: the same per-element arithmetic, a fraction of the per-row overhead.
  // Not heads of 8 (the small models'): the kernel has them a row or two a vector, its
  // parameters in registers (stories260K's fp16 decode 9% faster than with repeated ones).
  constexpr size_t kWide = 64;
  const RepeatTo64 repeat = repeat_to_64_for(s.dim);
  float wide_scale[kWide], wide_zero[kWide];
  for (size_t g = 0; g < s.n_groups(); ++g) {
    const size_t row0 = g * s.group_size;
    const size_t rows = std::min(s.group_size, s.n_rows - row0);
    const float* scale = s.scale.data() + g * s.dim;
    const float* zero = s.zero.data() + g * s.dim;
    size_t done = 0;
    if (repeat && rows * s.dim >= kWide) {
      repeat(scale, wide_scale);
      repeat(zero, wide_zero);
      const size_t wide_rows = rows * s.dim / kWide;
      k.dequant_rows(codes + row0 * s.dim, wide_rows, kWide, wide_scale, wide_zero,
                     o + row0 * s.dim, kWide);
      done = wide_rows * kWide / s.dim;
    }
    if (done < rows) {
      k.dequant_rows(codes + (row0 + done) * s.dim, rows - done, s.dim, scale, zero,
                     o + (row0 + done) * s.dim, s.dim);
    }
  }
}

void dequant_real_rows_strided(const CodeStream& s, const uint8_t* codes, Half* out,
                               size_t row_stride) {
  if (row_stride == s.dim) {
    dequant_real_rows(s, codes, out);
    return;
  }
  if (s.n_rows == 0 || s.dim == 0) return;
  const QuantKernels& k = quant_kernels();
  uint16_t* o = reinterpret_cast<uint16_t*>(out);
  if (s.dim % 8 != 0) {
    // Heads of other narrow widths: the contiguous kernel into a per-thread buffer, then rows
    // copied (a kernel row of 4 values runs value by value).
    const size_t n = s.n_rows * s.dim;
    thread_local std::vector<Half> rows;
    if (rows.size() < n) rows.resize(n);
    dequant_real_rows(s, codes, rows.data());
    for (size_t t = 0; t < s.n_rows; ++t)
      std::memcpy(out + t * row_stride, rows.data() + t * s.dim, s.dim * sizeof(Half));
    return;
  }
  // Whole vectors a row (two rows of 8 a vector on AVX-512), written in place. (Heads of 8
  // decoded contiguously and copied row by row took a tenth of stories260K's file decode.)
  for (size_t g = 0; g < s.n_groups(); ++g) {
    const size_t row0 = g * s.group_size;
    k.dequant_rows(codes + row0 * s.dim, std::min(s.group_size, s.n_rows - row0), s.dim,
                   s.scale.data() + g * s.dim, s.zero.data() + g * s.dim, o + row0 * row_stride,
                   row_stride);
  }
}

void check_head_shape(const CodeStream& h, size_t index, const BatchShape& shape) {
  if (h.n_rows != shape.n_rows || h.dim != shape.dim || h.bits != shape.bits ||
      h.group_size != shape.group_size) {
    fail(ErrorCode::corrupt_input,
         "codec batch, head " + std::to_string(index) + ": stream shape " +
             std::to_string(h.n_rows) + "x" + std::to_string(h.dim) + " bits " +
             std::to_string(h.bits) + " group " + std::to_string(h.group_size) + ", expected " +
             std::to_string(shape.n_rows) + "x" + std::to_string(shape.dim) + " bits " +
             std::to_string(shape.bits) + " group " + std::to_string(shape.group_size));
  }
}

}  // namespace cachegen::detail
