// Decoder of one head record. Every field is bounded before it sizes an allocation.
#include <cstring>
#include <string>

#include "codec/bit_io.h"
#include "codec/params_codec.h"
#include "codec/rans.h"
#include "codec/stream_format.h"
#include "codec/token_delta_transform.h"

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

void read_float_params(ByteReader& r, ParamPrecision precision, std::vector<float>& out,
                       const char* field) {
  for (float& v : out) {
    if (precision == ParamPrecision::fp16) {
      v = half_to_float(Half{r.u16(field)});
    } else {
      const uint32_t u = r.u32(field);
      std::memcpy(&v, &u, 4);
    }
  }
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

DecodedHead decode_head(std::span<const uint8_t> record, size_t record_offset,
                        const DecodeOptions& options) {
  ByteReader r(record, record_offset);
  DecodedHead h;
  CodeStream& s = h.stream;
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
  if (precision != ParamPrecision::compact) {
    const size_t width = precision == ParamPrecision::fp16 ? 2 : 4;
    r.need(n_params * width * 2, "fixed-width group parameters");
    s.scale.resize(n_params);
    s.zero.resize(n_params);
    read_float_params(r, precision, s.scale, "scale");
    read_float_params(r, precision, s.zero, "zero");
    check_decoded_params(s.scale, s.zero);
  }
  const size_t params_end = r.offset();
  const uint64_t side_bytes = r.varint("side_bytes");
  if (side_bytes > r.remaining()) r.need(r.remaining() + 1, "side information");
  const size_t side_offset = r.offset();
  BitReader bits_in(r.bytes(side_bytes, "side information"), side_offset);
  // Every channel model takes >= 2 bits and every compact parameter pair >= 2 bits.
  if (dim > side_bytes * 4)
    corrupt("dim " + std::to_string(dim) + " exceeds what the side section can describe");
  if (precision == ParamPrecision::compact) {
    if (n_params > side_bytes * 4) corrupt("too many compact parameters for the side section");
    read_params_compact(bits_in, n_groups, dim, grid, s.scale, s.zero);
  }
  const size_t bits_after_params = side_bytes * 8 - bits_in.bits_left();
  h.models.resize(dim);
  std::vector<ChannelTable> tables(dim);
  std::vector<uint8_t> is_delta(dim);
  for (size_t c = 0; c < dim; ++c) {
    h.models[c] = read_channel_model(bits_in, bits, n_rows);
    if (h.models[c].table.t > coder_precision)
      corrupt("channel " + std::to_string(c) + " table precision above coder_precision");
    tables[c] = h.models[c].table;
    is_delta[c] = h.models[c].kind == ChannelKind::delta_table;
  }
  bits_in.finish("side information");
  h.param_bytes = params_end - (record_offset + h.header_bytes) + bits_after_params / 8;
  h.model_bytes = r.offset() - params_end - bits_after_params / 8;
  h.payload_bytes = r.remaining();

  h.symbols.resize(n);
  const auto payload = r.bytes(r.remaining(), "rANS payload");
  if (n == 0) {
    if (!payload.empty())
      corrupt(std::to_string(payload.size()) + " trailing bytes after an empty stream");
  } else {
    const DecodeTables dt = build_decode_tables(tables, coder_precision);
    rans_decode(payload, side_offset + side_bytes, dt, dim, n_lanes, h.symbols);
  }
  s.codes.resize(n_groups * group_size * dim);
  symbols_to_codes(h.symbols.data(), n_rows, dim, bits, group_size, s.scale, s.zero,
                   is_delta.data(), s.codes.data());
  // Padding rows repeat the last real row.
  for (size_t t = n_rows; t < n_groups * group_size; ++t)
    std::memcpy(s.codes.data() + t * dim, s.codes.data() + (n_rows - 1) * dim, dim);
  return h;
}

}  // namespace cachegen::detail
