#include "codec/token_delta_transform.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace cachegen::detail {

uint8_t boundary_prediction(uint8_t prev_code, float prev_scale, float prev_zero, float scale,
                            float zero, int bits) {
  const float value = static_cast<float>(prev_code) * prev_scale + prev_zero;
  const float q = (value - zero) / scale;
  const float top = static_cast<float>((1 << bits) - 1);
  if (!(q > 0.0f)) return 0;  // also NaN
  if (q >= top) return static_cast<uint8_t>(top);
  // Round half to even, as nearbyint in the default rounding mode, without the libm call:
  // adding 1.5 * 2^23 leaves no fraction bits for 0 < q < 255 (fp contraction is off).
  constexpr float kRoundMagic = 12582912.0f;
  return static_cast<uint8_t>((q + kRoundMagic) - kRoundMagic);
}

void compute_delta_symbols(const uint8_t* codes, size_t n_rows, size_t dim, int bits,
                           size_t group_size, std::span<const float> scale,
                           std::span<const float> zero, uint8_t* symbols) {
  const uint8_t mask = static_cast<uint8_t>((1u << bits) - 1);
  const uint8_t first = static_cast<uint8_t>(1u << (bits - 1));
  for (size_t t0 = 0; t0 < n_rows; t0 += group_size) {
    // A group's first row: against the middle code, or predicted across the boundary.
    const uint8_t* row = codes + t0 * dim;
    uint8_t* out = symbols + t0 * dim;
    if (t0 == 0) {
      for (size_t c = 0; c < dim; ++c) out[c] = static_cast<uint8_t>(row[c] - first) & mask;
    } else {
      const size_t g = t0 / group_size;
      for (size_t c = 0; c < dim; ++c) {
        const size_t i = g * dim + c;
        const uint8_t pred = boundary_prediction((row - dim)[c], scale[i - dim], zero[i - dim],
                                                 scale[i], zero[i], bits);
        out[c] = static_cast<uint8_t>(row[c] - pred) & mask;
      }
    }
    // Its other rows against the row above: one run over the group, which vectorises
    // however short the rows are.
    const size_t m = (std::min(n_rows, t0 + group_size) - t0 - 1) * dim;
    const uint8_t* next = row + dim;
    for (size_t i = 0; i < m; ++i) out[dim + i] = static_cast<uint8_t>(next[i] - row[i]) & mask;
  }
}

namespace {
// Eight bytes with byte-wise (carry-free) arithmetic (GCC/Clang vector extension).
typedef uint8_t Bytes8 __attribute__((vector_size(8)));
}  // namespace

void symbols_to_codes(const uint8_t* symbols, size_t n_rows, size_t dim, int bits,
                      size_t group_size, std::span<const float> scale, std::span<const float> zero,
                      const uint8_t* is_delta, uint8_t* codes) {
  const uint8_t mask = static_cast<uint8_t>((1u << bits) - 1);
  // 0xff for delta channels, 0 for raw: the add below is branch-free and vectorizes.
  std::vector<uint8_t> keep(dim);
  for (size_t c = 0; c < dim; ++c) keep[c] = is_delta[c] ? 0xff : 0;
  std::vector<uint8_t> pred(dim, static_cast<uint8_t>(1u << (bits - 1)));
  const bool columns = dim % 8 == 0;
  Bytes8 mask8;
  for (int b = 0; b < 8; ++b) mask8[b] = mask;
  const uint8_t* k = keep.data();
  auto add_row = [&](const uint8_t* in, const uint8_t* p, uint8_t* out) {
    for (size_t c = 0; c < dim; ++c) out[c] = static_cast<uint8_t>(in[c] + (p[c] & k[c])) & mask;
  };
  // Group by group: the row's position in its group is a loop counter, not a division.
  for (size_t row0 = 0; row0 < n_rows; row0 += group_size) {
    const size_t g = row0 / group_size;
    if (g > 0) {
      const uint8_t* prev = codes + (row0 - 1) * dim;
      for (size_t c = 0; c < dim; ++c) {
        if (keep[c] == 0) continue;  // raw channel: its prediction is never used
        const size_t i = g * dim + c;
        pred[c] =
            boundary_prediction(prev[c], scale[i - dim], zero[i - dim], scale[i], zero[i], bits);
      }
    }
    const size_t rows = std::min(group_size, n_rows - row0);
    if (columns) {
      // 8 channels at a time, column by column, so the running sums stay in a register (a
      // row-by-row walk reloads the row just stored: a store-forwarding delay per row). Delta
      // channels keep a byte-wise running sum mod 256 (a multiple of 2^bits, masked on store);
      // its chain is one add per row, the raw channels' symbols join off that chain.
      for (size_t c = 0; c < dim; c += 8) {
        Bytes8 acc, kk, in;
        std::memcpy(&acc, pred.data() + c, 8);
        std::memcpy(&kk, k + c, 8);
        acc &= kk;
        for (size_t t = row0; t < row0 + rows; ++t) {
          std::memcpy(&in, symbols + t * dim + c, 8);
          acc += in & kk;
          const Bytes8 code = (acc + (in & ~kk)) & mask8;
          std::memcpy(codes + t * dim + c, &code, 8);
        }
      }
      continue;
    }
    add_row(symbols + row0 * dim, pred.data(), codes + row0 * dim);
    for (size_t t = row0 + 1; t < row0 + rows; ++t)
      add_row(symbols + t * dim, codes + (t - 1) * dim, codes + t * dim);
  }
}

}  // namespace cachegen::detail
