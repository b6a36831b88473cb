// token_delta and its inverse: the reversible transform along the token axis.
#include <string>

#include "cachegen/quant.h"
#include "core/checks.h"

namespace cachegen {
namespace {

void check_matrix(size_t size, size_t n_rows, size_t dim, const char* name) {
  if (dim == 0 && n_rows != 0) detail::invalid(std::string(name) + ": dim must be >= 1");
  const size_t want = detail::checked_mul(n_rows, dim, name);
  if (size != want) {
    detail::invalid(std::string(name) + " has " + std::to_string(size) +
                    " values, expected n_rows * dim = " + std::to_string(want));
  }
}

}  // namespace

std::vector<int16_t> token_delta(std::span<const uint8_t> codes, size_t n_rows, size_t dim) {
  check_matrix(codes.size(), n_rows, dim, "codes");
  std::vector<int16_t> d(codes.size());
  for (size_t c = 0; c < dim && n_rows > 0; ++c) d[c] = codes[c];
  for (size_t r = 1; r < n_rows; ++r) {
    const uint8_t* cur = codes.data() + r * dim;
    const uint8_t* prev = cur - dim;
    int16_t* out = d.data() + r * dim;
    for (size_t c = 0; c < dim; ++c) out[c] = static_cast<int16_t>(cur[c] - prev[c]);
  }
  return d;
}

std::vector<uint8_t> token_delta_inverse(std::span<const int16_t> delta, size_t n_rows,
                                         size_t dim) {
  check_matrix(delta.size(), n_rows, dim, "delta");
  std::vector<uint8_t> codes(delta.size());
  std::vector<int32_t> acc(dim, 0);
  for (size_t r = 0; r < n_rows; ++r) {
    for (size_t c = 0; c < dim; ++c) {
      acc[c] += delta[r * dim + c];
      if (acc[c] < 0 || acc[c] > 255) {
        detail::invalid("delta: prefix sum " + std::to_string(acc[c]) + " at row " +
                        std::to_string(r) + ", channel " + std::to_string(c) +
                        " is outside 0..255");
      }
      codes[r * dim + c] = static_cast<uint8_t>(acc[c]);
    }
  }
  return codes;
}

}  // namespace cachegen
