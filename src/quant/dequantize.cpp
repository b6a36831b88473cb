// dequant_codes: codes back to fp16.
#include <string>

#include "cachegen/quant.h"
#include "core/checks.h"
#include "quant/kernels.h"

namespace cachegen {

void dequant_codes_into(const CodeStream& s, std::span<Half> out) {
  validate(s);
  const size_t n = s.n_rows * s.dim;  // cannot overflow: validate() bounded the padded size
  if (out.size() != n) {
    detail::fail(ErrorCode::output_too_small,
                 "dequant output has " + std::to_string(out.size()) +
                     " values, expected n_rows * dim = " + std::to_string(n));
  }
  const detail::QuantKernels& k = detail::quant_kernels();
  uint16_t* o = reinterpret_cast<uint16_t*>(out.data());
  for (size_t g = 0; g < s.n_groups(); ++g) {
    const size_t row0 = g * s.group_size;
    const size_t rows = std::min(s.group_size, s.n_rows - row0);
    k.dequant_rows(s.codes.data() + row0 * s.dim, rows, s.dim, s.scale.data() + g * s.dim,
                   s.zero.data() + g * s.dim, o + row0 * s.dim, s.dim);
  }
}

std::vector<Half> dequant_codes(const CodeStream& s) {
  validate(s);
  std::vector<Half> out(s.n_rows * s.dim);
  dequant_codes_into(s, out);
  return out;
}

std::vector<Half> cachegen_quant_dequant(std::span<const float> x, size_t n_rows, size_t dim,
                                         int bits, size_t group_size) {
  return dequant_codes(quantize_to_codes(x, n_rows, dim, bits, group_size));
}

}  // namespace cachegen
