#include "codec/token_delta_transform.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cachegen/runtime.h"

namespace cachegen::detail {

void boundary_predictions(const uint8_t* prev_codes, const float* prev_scale,
                          const float* prev_zero, const float* scale, const float* zero, int bits,
                          size_t dim, uint8_t* pred) {
  const float top = static_cast<float>((1 << bits) - 1);
  // Round half to even, as nearbyint in the default rounding mode, without the libm call:
  // adding 1.5 * 2^23 leaves no fraction bits for 0 <= q <= 255 (fp contraction is off).
  constexpr float kRoundMagic = 12582912.0f;
  // Branch-free, so that the loop vectorises: a clamp to [0, top] (NaN to 0), then the rounding
  // (which leaves 0 and top as they are).
  for (size_t c = 0; c < dim; ++c) {
    const float value = static_cast<float>(prev_codes[c]) * prev_scale[c] + prev_zero[c];
    float q = (value - zero[c]) / scale[c];
    q = q > 0.0f ? q : 0.0f;
    q = q < top ? q : top;
    pred[c] = static_cast<uint8_t>(static_cast<int32_t>((q + kRoundMagic) - kRoundMagic));
  }
}

void compute_delta_symbols(const uint8_t* codes, size_t n_rows, size_t dim, int bits,
                           size_t group_size, std::span<const float> scale,
                           std::span<const float> zero, uint8_t* symbols) {
  if (simd_path() == SimdPath::avx512) {
    compute_delta_symbols_avx512(codes, n_rows, dim, bits, group_size, scale, zero, symbols);
    return;
  }
  const uint8_t mask = static_cast<uint8_t>((1u << bits) - 1);
  const uint8_t first = static_cast<uint8_t>(1u << (bits - 1));
  std::vector<uint8_t> pred(dim);
  for (size_t t0 = 0; t0 < n_rows; t0 += group_size) {
    // A group's first row: against the middle code, or predicted across the boundary.
    const uint8_t* row = codes + t0 * dim;
    uint8_t* out = symbols + t0 * dim;
    if (t0 == 0) {
      for (size_t c = 0; c < dim; ++c) out[c] = static_cast<uint8_t>(row[c] - first) & mask;
    } else {
      const size_t i = t0 / group_size * dim;
      boundary_predictions(row - dim, &scale[i - dim], &zero[i - dim], &scale[i], &zero[i], bits,
                           dim, pred.data());
      for (size_t c = 0; c < dim; ++c) out[c] = static_cast<uint8_t>(row[c] - pred[c]) & mask;
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

// One group's rows (codes may equal symbols): pred holds the first row's predictions, keep
// 0xff for delta channels and 0 for raw ones, mask 2^bits - 1.
void delta_group(const uint8_t* symbols, size_t rows, size_t dim, const uint8_t* pred,
                 const uint8_t* keep, uint8_t mask, uint8_t* codes) {
  if (dim % 8 == 0) {
    // 8 channels at a time, column by column, so the running sums stay in a register (a
    // row-by-row walk reloads the row just stored: a store-forwarding delay per row). Delta
    // channels keep a byte-wise running sum mod 256 (a multiple of 2^bits, masked on store);
    // its chain is one add per row, the raw channels' symbols join off that chain.
    const Bytes8 mask8 = Bytes8{} + mask;  // mask in every byte
    for (size_t c = 0; c < dim; c += 8) {
      Bytes8 acc, kk, in;
      std::memcpy(&acc, pred + c, 8);
      std::memcpy(&kk, keep + c, 8);
      acc &= kk;
      for (size_t t = 0; t < rows; ++t) {
        std::memcpy(&in, symbols + t * dim + c, 8);
        acc += in & kk;
        const Bytes8 code = (acc + (in & ~kk)) & mask8;
        std::memcpy(codes + t * dim + c, &code, 8);
      }
    }
    return;
  }
  auto add_row = [&](const uint8_t* in, const uint8_t* p, uint8_t* out) {
    for (size_t c = 0; c < dim; ++c) out[c] = static_cast<uint8_t>(in[c] + (p[c] & keep[c])) & mask;
  };
  add_row(symbols, pred, codes);
  for (size_t t = 1; t < rows; ++t)
    add_row(symbols + t * dim, codes + (t - 1) * dim, codes + t * dim);
}
}  // namespace

namespace {

// symbols_to_codes of heads of one shape: the AVX-512 kernel takes them together, the portable
// path one after the other.
void heads_to_codes(std::span<const DeltaHead> heads, size_t n_rows, size_t dim, int bits,
                    size_t group_size, const uint8_t* is_delta) {
  const uint8_t mask = static_cast<uint8_t>((1u << bits) - 1);
  // keep: 0xff for delta channels, 0 for raw, so that the kernels are branch-free; pred: the
  // group's first-row predictions (raw channels' too, then masked off by keep).
  constexpr size_t kOnStack = 256;
  uint8_t on_stack[2 * kOnStack];
  std::vector<uint8_t> on_heap(dim > kOnStack ? 2 * dim : 0);
  uint8_t* const keep = dim > kOnStack ? on_heap.data() : on_stack;
  uint8_t* const pred = keep + dim;
  for (size_t c = 0; c < dim; ++c) keep[c] = is_delta[c] ? 0xff : 0;
  if (simd_path() == SimdPath::avx512) {
    symbols_to_codes_avx512(heads, n_rows, dim, bits, group_size, keep);
    return;
  }
  for (const DeltaHead& h : heads) {
    std::memset(pred, 1u << (bits - 1), dim);
    // Group by group: the row's position in its group is a loop counter, not a division.
    for (size_t row0 = 0; row0 < n_rows; row0 += group_size) {
      if (row0 > 0) {
        const size_t i = row0 / group_size * dim;
        boundary_predictions(h.codes + (row0 - 1) * dim, &h.scale[i - dim], &h.zero[i - dim],
                             &h.scale[i], &h.zero[i], bits, dim, pred);
      }
      delta_group(h.symbols + row0 * dim, std::min(group_size, n_rows - row0), dim, pred, keep,
                  mask, h.codes + row0 * dim);
    }
  }
}

}  // namespace

void symbols_to_codes(const uint8_t* symbols, size_t n_rows, size_t dim, int bits,
                      size_t group_size, std::span<const float> scale, std::span<const float> zero,
                      const uint8_t* is_delta, uint8_t* codes) {
  const DeltaHead head{symbols, scale, zero, codes};
  heads_to_codes(std::span<const DeltaHead>(&head, 1), n_rows, dim, bits, group_size, is_delta);
}

void symbols_to_codes_heads(std::span<const DeltaHead> heads, size_t n_rows, size_t dim, int bits,
                            size_t group_size, const uint8_t* is_delta) {
  heads_to_codes(heads, n_rows, dim, bits, group_size, is_delta);
}

}  // namespace cachegen::detail
