// quantize_to_codes / quantize_with_params: group-wise asymmetric min/max quantization.
#include <string>
#include <vector>

#include "cachegen/quant.h"
#include "core/checks.h"
#include "quant/kernels.h"

namespace cachegen {
namespace {

using detail::checked_mul;
using detail::invalid;

enum class InputType { f32, f16, bf16 };

// Validates shapes and shapes `s` (codes/scale/zero sized; existing capacity reused).
void make_stream(size_t x_size, size_t n_rows, size_t dim, int bits, size_t group_size,
                 CodeStream& s) {
  detail::check_bits(bits);
  if (group_size == 0 || group_size > kMaxGroupSize) {
    invalid("group_size must be in 1.." + std::to_string(kMaxGroupSize) + ", got " +
            std::to_string(group_size));
  }
  if (dim == 0) invalid("dim (channels per row) must be >= 1, got 0");
  const size_t want = checked_mul(n_rows, dim, "x (n_rows * dim)");
  if (x_size != want) {
    invalid("x has " + std::to_string(x_size) + " values, expected n_rows * dim = " +
            std::to_string(n_rows) + " * " + std::to_string(dim));
  }
  s.n_rows = n_rows;
  s.dim = dim;
  s.bits = bits;
  s.group_size = group_size;
  const size_t n_groups = n_rows / group_size + (n_rows % group_size != 0);
  const size_t padded_rows = checked_mul(n_groups, group_size, "padded rows");
  s.codes.resize(checked_mul(padded_rows, dim, "codes (n_groups * group_size * dim)"));
  s.scale.resize(n_groups * dim);
  s.zero.resize(n_groups * dim);
}

// Rows [row0, row0 + rows) of x as fp32: a pointer into x, or converted into scratch.
const float* group_rows_f32(const void* x, InputType type, size_t row0, size_t rows, size_t dim,
                            const detail::QuantKernels& k, std::vector<float>& scratch) {
  const size_t off = row0 * dim;
  if (type == InputType::f32) return static_cast<const float*>(x) + off;
  scratch.resize(rows * dim);
  const uint16_t* h = static_cast<const uint16_t*>(x) + off;
  if (type == InputType::f16)
    k.f16_to_f32(h, scratch.data(), rows * dim);
  else
    k.bf16_to_f32(h, scratch.data(), rows * dim);
  return scratch.data();
}

[[noreturn]] void non_finite(size_t group, size_t group_size) {
  invalid("x contains NaN or Inf (in rows " + std::to_string(group * group_size) + ".." +
          std::to_string((group + 1) * group_size - 1) + ")");
}

// Copies the last real row's codes into the padding rows of the last group.
void pad_last_group(CodeStream& s) {
  const size_t padded_rows = s.n_groups() * s.group_size;
  if (s.n_rows == 0) return;
  const uint8_t* last = s.codes.data() + (s.n_rows - 1) * s.dim;
  for (size_t r = s.n_rows; r < padded_rows; ++r) {
    std::copy(last, last + s.dim, s.codes.data() + r * s.dim);
  }
}

// The reference quantizer. Padding rows are copies of the last row, so they cannot change a
// group's min/max: only real rows are scanned.
void quantize_impl(const void* x, InputType type, size_t x_size, size_t n_rows, size_t dim,
                   int bits, size_t group_size, CodeStream& s) {
  make_stream(x_size, n_rows, dim, bits, group_size, s);
  const detail::QuantKernels& k = detail::quant_kernels();
  const float max_code = static_cast<float>((1 << bits) - 1);
  thread_local std::vector<float> scratch, mx;
  mx.resize(dim);
  for (size_t g = 0; g < s.n_groups(); ++g) {
    const size_t row0 = g * group_size;
    const size_t rows = std::min(group_size, n_rows - row0);
    const float* xs = group_rows_f32(x, type, row0, rows, dim, k, scratch);
    float* mn = s.zero.data() + g * dim;
    float* scale = s.scale.data() + g * dim;
    if (!k.minmax_rows(xs, rows, dim, mn, mx.data())) non_finite(g, group_size);
    for (size_t c = 0; c < dim; ++c) {
      const float range = mx[c] - mn[c];
      if (!(range <= 3.4028234e38f))
        invalid("x value range overflows fp32 in channel " + std::to_string(c));
      const float sc = range / max_code;
      scale[c] = sc > 1e-8f ? sc : 1e-8f;
    }
    k.quantize_rows(xs, rows, dim, scale, mn, max_code, s.codes.data() + row0 * dim);
  }
  pad_last_group(s);
}

}  // namespace

CodeStream quantize_to_codes(std::span<const float> x, size_t n_rows, size_t dim, int bits,
                             size_t group_size) {
  CodeStream s;
  quantize_impl(x.data(), InputType::f32, x.size(), n_rows, dim, bits, group_size, s);
  return s;
}
void quantize_to_codes_into(std::span<const float> x, size_t n_rows, size_t dim, int bits,
                            size_t group_size, CodeStream& out) {
  quantize_impl(x.data(), InputType::f32, x.size(), n_rows, dim, bits, group_size, out);
}
CodeStream quantize_to_codes(std::span<const Half> x, size_t n_rows, size_t dim, int bits,
                             size_t group_size) {
  CodeStream s;
  quantize_impl(x.data(), InputType::f16, x.size(), n_rows, dim, bits, group_size, s);
  return s;
}
void quantize_to_codes_into(std::span<const Half> x, size_t n_rows, size_t dim, int bits,
                            size_t group_size, CodeStream& out) {
  quantize_impl(x.data(), InputType::f16, x.size(), n_rows, dim, bits, group_size, out);
}
CodeStream quantize_to_codes(std::span<const BFloat16> x, size_t n_rows, size_t dim, int bits,
                             size_t group_size) {
  CodeStream s;
  quantize_impl(x.data(), InputType::bf16, x.size(), n_rows, dim, bits, group_size, s);
  return s;
}
void quantize_to_codes_into(std::span<const BFloat16> x, size_t n_rows, size_t dim, int bits,
                            size_t group_size, CodeStream& out) {
  quantize_impl(x.data(), InputType::bf16, x.size(), n_rows, dim, bits, group_size, out);
}

CodeStream quantize_with_params(std::span<const float> x, size_t n_rows, size_t dim, int bits,
                                size_t group_size, std::span<const float> scale,
                                std::span<const float> zero) {
  CodeStream s;
  quantize_with_params_into(x, n_rows, dim, bits, group_size, scale, zero, s);
  return s;
}

void quantize_with_params_into(std::span<const float> x, size_t n_rows, size_t dim, int bits,
                               size_t group_size, std::span<const float> scale,
                               std::span<const float> zero, CodeStream& s) {
  make_stream(x.size(), n_rows, dim, bits, group_size, s);
  if (scale.size() != s.scale.size() || zero.size() != s.zero.size()) {
    invalid("scale/zero must have n_groups * dim = " + std::to_string(s.scale.size()) +
            " values, got " + std::to_string(scale.size()) + " / " + std::to_string(zero.size()));
  }
  for (size_t i = 0; i < scale.size(); ++i) {
    if (!(scale[i] > 0.0f && scale[i] <= 3.4028234e38f)) {
      invalid("scale[" + std::to_string(i) + "] must be finite and > 0");
    }
    if (!(zero[i] >= -3.4028234e38f && zero[i] <= 3.4028234e38f)) {
      invalid("zero[" + std::to_string(i) + "] must be finite");
    }
  }
  const detail::QuantKernels& k = detail::quant_kernels();
  for (size_t g = 0; g < s.n_groups(); ++g) {
    const size_t row0 = g * group_size;
    const size_t rows = std::min(group_size, n_rows - row0);
    if (!k.all_finite(x.data() + row0 * dim, rows * dim)) non_finite(g, group_size);
  }
  detail::quantize_with_checked_params_into(x, n_rows, dim, bits, group_size, scale, zero, s);
}

namespace {

// Row r of x at x + r * stride; x_size: the values the caller has (checked: n_rows * dim).
// quantize_rows(x, rows, dim, scales, zeros, max_code, codes) quantizes a group; kScaling says
// whether it takes the scales (divide) or their reciprocals (multiply).
template <detail::Scaling kScaling, typename T, typename QuantizeRows>
void quantize_checked(const T* x, size_t x_size, size_t stride, size_t n_rows, size_t dim, int bits,
                      size_t group_size, std::span<const float> scale, std::span<const float> zero,
                      CodeStream& s, QuantizeRows quantize_rows) {
  make_stream(x_size, n_rows, dim, bits, group_size, s);
  std::copy(scale.begin(), scale.end(), s.scale.begin());
  std::copy(zero.begin(), zero.end(), s.zero.begin());
  const float* by = s.scale.data();
  if constexpr (kScaling == detail::Scaling::multiply) {
    thread_local std::vector<float> inverse;  // per thread, as the stream's buffers
    inverse.resize(scale.size());
    detail::quant_kernels().reciprocals(scale.data(), inverse.data(), scale.size());
    by = inverse.data();
  }
  const float max_code = static_cast<float>((1 << bits) - 1);
  for (size_t g = 0; g < s.n_groups(); ++g) {
    const size_t row0 = g * group_size;
    const size_t rows = std::min(group_size, n_rows - row0);
    quantize_rows(x + row0 * stride, rows, dim, by + g * dim, s.zero.data() + g * dim, max_code,
                  s.codes.data() + row0 * dim);
  }
  pad_last_group(s);
}

}  // namespace

void detail::quantize_with_checked_params_into(std::span<const float> x, size_t n_rows, size_t dim,
                                               int bits, size_t group_size,
                                               std::span<const float> scale,
                                               std::span<const float> zero, CodeStream& s) {
  quantize_checked<detail::Scaling::divide>(x.data(), x.size(), dim, n_rows, dim, bits, group_size,
                                            scale, zero, s, detail::quant_kernels().quantize_rows);
}

void detail::codec_quantize_into(std::span<const float> x, size_t n_rows, size_t dim, int bits,
                                 size_t group_size, std::span<const float> scale,
                                 std::span<const float> zero, CodeStream& s) {
  quantize_checked<detail::Scaling::multiply>(x.data(), x.size(), dim, n_rows, dim, bits,
                                              group_size, scale, zero, s,
                                              detail::quant_kernels().quantize_rows_inv);
}

void detail::codec_quantize_into(const Half* x, size_t stride, size_t n_rows, size_t dim, int bits,
                                 size_t group_size, std::span<const float> scale,
                                 std::span<const float> zero, CodeStream& s) {
  const auto quantize_rows = detail::quant_kernels().quantize_rows_inv_f16;
  quantize_checked<detail::Scaling::multiply>(
      x, checked_mul(n_rows, dim, "x (n_rows * dim)"), stride, n_rows, dim, bits, group_size, scale,
      zero, s,
      [&](const Half* rows_x, size_t rows, size_t d, const float* inv, const float* z,
          float max_code, uint8_t* codes) {
        quantize_rows(reinterpret_cast<const uint16_t*>(rows_x), rows, d, stride, inv, z, max_code,
                      codes);
      });
}

void validate(const CodeStream& s) {
  detail::check_bits(s.bits, "stream.bits");
  if (s.group_size == 0 || s.group_size > kMaxGroupSize) {
    invalid("stream.group_size must be in 1.." + std::to_string(kMaxGroupSize) + ", got " +
            std::to_string(s.group_size));
  }
  if (s.dim == 0) invalid("stream.dim must be >= 1, got 0");
  const size_t n_groups = s.n_rows / s.group_size + (s.n_rows % s.group_size != 0);
  const size_t padded = checked_mul(n_groups, s.group_size, "stream padded rows");
  const size_t n_codes = checked_mul(padded, s.dim, "stream.codes size");
  const size_t n_params = checked_mul(n_groups, s.dim, "stream.scale size");
  if (s.codes.size() != n_codes) {
    invalid("stream.codes has " + std::to_string(s.codes.size()) + " entries, expected " +
            std::to_string(n_codes) + " (n_groups * group_size * dim)");
  }
  if (s.scale.size() != n_params || s.zero.size() != n_params) {
    invalid("stream.scale/zero must have n_groups * dim = " + std::to_string(n_params) +
            " entries");
  }
  const unsigned max_code = (1u << s.bits) - 1;
  const uint8_t hi = detail::quant_kernels().max_byte(s.codes.data(), s.codes.size());
  if (hi > max_code) {
    invalid("stream.codes holds " + std::to_string(hi) +
            ", above 2^bits - 1 = " + std::to_string(max_code));
  }
}

}  // namespace cachegen
