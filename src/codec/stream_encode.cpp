// Encoder of one head record: model choice per channel, then params, models, rANS payload.
#include <algorithm>
#include <cstring>
#include <vector>

#include "cachegen/runtime.h"
#include "codec/bit_io.h"
#include "codec/params_codec.h"
#include "codec/rans.h"
#include "codec/scratch.h"
#include "codec/stream_format.h"
#include "codec/token_delta_transform.h"
#include "core/checks.h"
#include "quant/kernels.h"

namespace cachegen::detail {
namespace {

// One store per value into bytes grown once (a push_back per byte was ~15% of encoding codes
// with fp32 parameters); fp16 through the kernels' conversion (float_to_half's values).
void write_float_params(wire::Writer& w, std::span<const float> values, ParamPrecision precision) {
  if (precision == ParamPrecision::fp16) {
    thread_local std::vector<uint16_t> halves;
    halves.resize(values.size());
    quant_kernels().f32_to_f16(values.data(), halves.data(), values.size());
    wire::store_le16_array(w.extend(2 * values.size()), halves.data(), values.size());
    return;
  }
  wire::store_le32_array(w.extend(4 * values.size()), values.data(), values.size());
}

}  // namespace

int choose_lanes(size_t n_elements, size_t wide_from) {
  if (n_elements == 0) return 0;
  if (n_elements >= wide_from) return 32;
  if (n_elements >= 4096) return 8;
  if (n_elements >= 512) return 4;
  return 1;
}

void stream_symbols(const CodeStream& s, std::span<const ChannelModel> models,
                    std::span<const uint8_t> delta, uint8_t* symbols) {
  const size_t n = s.n_rows * s.dim;
  bool any = false;
  for (size_t c = 0; c < s.dim; ++c) any = any || models[c].kind == ChannelKind::delta_table;
  if (!any) {
    std::memcpy(symbols, s.codes.data(), n);
    return;
  }
  // One pass over blocks of whole rows of at least 64 bytes, each symbol selected from the
  // code or its delta by a channel mask repeated per row, so that it vectorises however short
  // the rows are. (The mask was made with a division per byte, in a fresh vector per head, and
  // the codes copied first: 7% of encoding stories260K's codes.)
  const size_t per = (64 + s.dim - 1) / s.dim, len = per * s.dim;
  thread_local std::vector<uint8_t> kept_mask;
  std::vector<uint8_t>& use_delta = kept_mask;
  use_delta.resize(len);
  for (size_t c = 0; c < s.dim; ++c)
    use_delta[c] = models[c].kind == ChannelKind::delta_table ? 0xff : 0;
  for (size_t j = s.dim; j < len; ++j) use_delta[j] = use_delta[j - s.dim];
  const uint8_t* const mask = use_delta.data();
  if (simd_path() == SimdPath::avx512) {
    select_deltas_avx512(s.codes.data(), delta.data(), mask, len, n, symbols);
    return;
  }
  for (size_t t = 0; t < s.n_rows; t += per) {
    const size_t m = std::min(per, s.n_rows - t) * s.dim;
    const uint8_t* const code = s.codes.data() + t * s.dim;
    const uint8_t* const d = delta.data() + t * s.dim;
    uint8_t* const out = symbols + t * s.dim;
    for (size_t j = 0; j < m; ++j)
      out[j] = static_cast<uint8_t>((d[j] & mask[j]) | (code[j] & ~mask[j]));
  }
}

void write_param_block(const CodeStream& s, ParamPrecision precision, const CompactGrid& grid,
                       std::vector<uint8_t>& out, std::span<const uint8_t> compact_section) {
  wire::Writer w(out);
  w.u8(static_cast<uint8_t>(precision));
  if (precision == ParamPrecision::compact) {
    w.u8(static_cast<uint8_t>(grid.scale_mantissa_bits));
    w.u8(static_cast<uint8_t>(grid.zero_step_log2));
    std::vector<uint8_t> side;
    if (compact_section.empty()) {
      BitWriter bits;
      write_params_compact(bits, s.scale, s.zero, s.n_groups(), s.dim, grid);
      side = bits.finish();
      compact_section = side;
    }
    w.varint(compact_section.size());
    w.bytes(compact_section);
  } else {
    write_float_params(w, s.scale, precision);
    write_float_params(w, s.zero, precision);
  }
}

void encode_head(const CodeStream& s, ParamPrecision precision, const EncodeOptions& options,
                 std::vector<uint8_t>& out, std::span<const uint32_t> counts,
                 const CompactSection* compact) {
  const int scale_mantissa_bits = options.scale_mantissa_bits;
  const int zero_step_log2 = options.zero_step_log2;
  const bool allow_delta = options.allow_delta;
  const size_t n = s.n_rows * s.dim;
  const size_t n_syms = size_t{1} << s.bits;
  const CompactGrid grid{scale_mantissa_bits, zero_step_log2};

  // Representations and models.
  // Delta symbols and the coded symbols in per-thread scratch (every byte written first).
  const std::span<uint8_t> delta(allow_delta ? scratch_bytes(n, Scratch::delta) : nullptr,
                                 allow_delta ? n : 0);
  if (allow_delta) {
    compute_delta_symbols(s.codes.data(), s.n_rows, s.dim, s.bits, s.group_size, s.scale, s.zero,
                          delta.data());
  }
  // Histograms, models and tables kept per thread (their storage reused: a few allocations per
  // channel were a cost of short streams).
  thread_local std::vector<ChannelModel> models;
  thread_local std::vector<uint32_t> raw_counts, delta_counts;
  thread_local std::vector<ChannelTable> tables;
  models.resize(s.dim);
  delta_counts.assign(allow_delta ? s.dim * n_syms : 0, 0);
  const auto histograms = quant_kernels().channel_histograms;
  if (counts.size() == s.dim * n_syms) {
    raw_counts.assign(counts.begin(), counts.end());
  } else {
    if (!counts.empty()) invalid("encode: histograms of another shape");
    raw_counts.assign(s.dim * n_syms, 0);
    histograms(s.codes.data(), s.n_rows, s.dim, n_syms, raw_counts.data());
  }
  if (allow_delta) histograms(delta.data(), s.n_rows, s.dim, n_syms, delta_counts.data());
  for (size_t c = 0; c < s.dim; ++c) {
    choose_channel_model(std::span<const uint32_t>(raw_counts).subspan(c * n_syms, n_syms),
                         allow_delta
                             ? std::span<const uint32_t>(delta_counts).subspan(c * n_syms, n_syms)
                             : std::span<const uint32_t>(),
                         s.n_rows, s.bits, models[c]);
  }
  const std::span<uint8_t> symbols(scratch_bytes(n, Scratch::symbols), n);
  if (n > 0) stream_symbols(s, models, delta, symbols.data());
  int precision_bits = 0;
  tables.resize(s.dim);  // copy-assignment reuses their storage
  for (size_t c = 0; c < s.dim; ++c) {
    precision_bits = std::max(precision_bits, models[c].table.t);
    tables[c] = models[c].table;
  }

  // Fixed header.
  wire::Writer w(out);
  w.varint(s.n_rows);
  w.varint(s.dim);
  w.varint(s.group_size);
  w.u8(static_cast<uint8_t>(s.bits));
  w.u8(static_cast<uint8_t>(precision));
  if (precision == ParamPrecision::compact) {
    w.u8(static_cast<uint8_t>(scale_mantissa_bits));
    w.u8(static_cast<uint8_t>(zero_step_log2));
  }
  const int n_lanes = choose_lanes(n, options.wide_lanes_from);
  w.u8(static_cast<uint8_t>(n == 0 ? 0 : precision_bits));
  w.u8(static_cast<uint8_t>(n_lanes));
  if (precision != ParamPrecision::compact) {
    write_float_params(w, s.scale, precision);
    write_float_params(w, s.zero, precision);
  }
  // Side information: compact params and channel models, one bit stream.
  BitWriter bits;
  if (precision == ParamPrecision::compact) {
    if (compact && compact->bits != 0) {
      bits.put_bytes(compact->bytes, compact->bits);
    } else {
      write_params_compact(bits, s.scale, s.zero, s.n_groups(), s.dim, grid);
    }
  }
  for (const auto& m : models) write_channel_model(bits, m, s.bits);
  const std::vector<uint8_t> side = bits.finish();
  w.varint(side.size());
  w.bytes(side);
  if (n > 0) rans_encode(symbols, s.dim, tables, precision_bits, n_lanes, out);
}

ParamPrecision exact_param_precision(const CodeStream& s, const EncodeOptions& options,
                                     CompactSection* compact_section) {
  // Only the parameter section depends on the precision, so pick it by that section's size:
  // compact where it takes at most as many bits as the fp16 or (where some parameter is no fp16
  // value) fp32 parameters, else the smaller of those. Whether the parameters are fp16 values
  // is asked only where the compact section is larger than fp16 ones would be (a conversion
  // each way per parameter, called out of line: ~3 us of stories260K's 180 us fp16 encode).
  const CompactGrid grid{options.scale_mantissa_bits, options.zero_step_log2};
  const size_t n_params = s.scale.size(), fp16_bits = n_params * 32;
  const auto fixed = [&] {
    return params_fit_fp16(s.scale, s.zero) ? ParamPrecision::fp16 : ParamPrecision::fp32;
  };
  const auto fixed_bits = [&](ParamPrecision p) {
    return p == ParamPrecision::fp16 ? fp16_bits : n_params * 64;
  };
  if (compact_section) compact_section->clear();
  thread_local CompactCode code;  // kept: its vectors' storage
  if (!plan_params_compact(s.scale, s.zero, s.n_groups(), s.dim, grid, code)) return fixed();
  if (!compact_section) {  // counted, not written
    if (code.bits + 16 <= fp16_bits) return ParamPrecision::compact;
    const ParamPrecision p = fixed();
    return code.bits + 16 <= fixed_bits(p) ? ParamPrecision::compact : p;
  }
  BitWriter bits(std::move(compact_section->bytes));
  write_params_compact(bits, code);
  const size_t compact_bits = bits.bit_count() + 16;
  if (compact_bits > fp16_bits) {
    const ParamPrecision p = fixed();
    if (compact_bits > fixed_bits(p)) {
      compact_section->bytes = bits.finish();  // (its storage kept for the next stream)
      compact_section->bytes.clear();
      return p;
    }
  }
  compact_section->bits = bits.bit_count();
  compact_section->bytes = bits.finish();
  return ParamPrecision::compact;
}

void encode_head_exact(const CodeStream& s, const EncodeOptions& options, std::vector<uint8_t>& out,
                       std::span<const uint32_t> counts) {
  encode_head(s, exact_param_precision(s, options), options, out, counts);
}

}  // namespace cachegen::detail
