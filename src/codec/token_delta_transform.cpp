#include "codec/token_delta_transform.h"

#include <cmath>
#include <vector>

namespace cachegen::detail {

uint8_t boundary_prediction(uint8_t prev_code, float prev_scale, float prev_zero, float scale,
                            float zero, int bits) {
  const float value = static_cast<float>(prev_code) * prev_scale + prev_zero;
  const float q = (value - zero) / scale;
  const float top = static_cast<float>((1 << bits) - 1);
  if (!(q > 0.0f)) return 0;  // also NaN
  if (q >= top) return static_cast<uint8_t>(top);
  return static_cast<uint8_t>(std::nearbyint(q));
}

void compute_delta_symbols(const uint8_t* codes, size_t n_rows, size_t dim, int bits,
                           size_t group_size, std::span<const float> scale,
                           std::span<const float> zero, uint8_t* symbols) {
  const uint8_t mask = static_cast<uint8_t>((1u << bits) - 1);
  const uint8_t first = static_cast<uint8_t>(1u << (bits - 1));
  for (size_t t = 0; t < n_rows; ++t) {
    const uint8_t* row = codes + t * dim;
    uint8_t* out = symbols + t * dim;
    if (t == 0) {
      for (size_t c = 0; c < dim; ++c) out[c] = static_cast<uint8_t>(row[c] - first) & mask;
    } else if (t % group_size != 0) {
      for (size_t c = 0; c < dim; ++c)
        out[c] = static_cast<uint8_t>(row[c] - (row - dim)[c]) & mask;
    } else {
      const size_t g = t / group_size;
      for (size_t c = 0; c < dim; ++c) {
        const size_t i = g * dim + c;
        const uint8_t pred = boundary_prediction((row - dim)[c], scale[i - dim], zero[i - dim],
                                                 scale[i], zero[i], bits);
        out[c] = static_cast<uint8_t>(row[c] - pred) & mask;
      }
    }
  }
}

void symbols_to_codes(const uint8_t* symbols, size_t n_rows, size_t dim, int bits,
                      size_t group_size, std::span<const float> scale, std::span<const float> zero,
                      const uint8_t* is_delta, uint8_t* codes) {
  const uint8_t mask = static_cast<uint8_t>((1u << bits) - 1);
  // 0xff for delta channels, 0 for raw: the add below is branch-free and vectorizes.
  std::vector<uint8_t> keep(dim);
  for (size_t c = 0; c < dim; ++c) keep[c] = is_delta[c] ? 0xff : 0;
  std::vector<uint8_t> pred(dim, static_cast<uint8_t>(1u << (bits - 1)));
  for (size_t t = 0; t < n_rows; ++t) {
    const uint8_t* in = symbols + t * dim;
    uint8_t* out = codes + t * dim;
    const uint8_t* p = pred.data();
    if (t > 0 && t % group_size != 0) {
      p = out - dim;
    } else if (t > 0) {
      const size_t g = t / group_size;
      for (size_t c = 0; c < dim; ++c) {
        const size_t i = g * dim + c;
        pred[c] = boundary_prediction((out - dim)[c], scale[i - dim], zero[i - dim], scale[i],
                                      zero[i], bits);
      }
    }
    const uint8_t* k = keep.data();
    for (size_t c = 0; c < dim; ++c) out[c] = static_cast<uint8_t>(in[c] + (p[c] & k[c])) & mask;
  }
}

}  // namespace cachegen::detail
