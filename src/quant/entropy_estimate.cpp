// The reference's Shannon-entropy size estimate (kept for compatibility and comparison:
// the real coder lives in the codec layer).
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "cachegen/quant.h"
#include "core/checks.h"
#include "quant/kernels.h"

namespace cachegen {
namespace {

// Symbols are offset into [0, 511): raw codes 0..255, deltas -255..255.
constexpr int kOffset = 255;
using Histogram = std::array<uint32_t, 511>;

// Entropy of the counts of consecutive symbols (empty bins skipped, so any run of bins that
// holds every nonzero count gives the same result as the whole histogram).
double entropy_of(const uint32_t* h, size_t n_bins, size_t total) {
  if (total == 0) return 0.0;
  double bits = 0.0;
  const double inv = 1.0 / static_cast<double>(total);
  for (size_t i = 0; i < n_bins; ++i) {
    const uint32_t n = h[i];
    if (n == 0) continue;
    const double p = n * inv;
    bits -= p * std::log2(p);
  }
  return bits > 0.0 ? bits : 0.0;  // a single symbol gives -0.0 in the sum
}
double entropy_of(const Histogram& h, size_t total) {
  return entropy_of(h.data(), h.size(), total);
}

template <typename T>
double entropy_impl(std::span<const T> symbols) {
  Histogram h{};
  for (T s : symbols) ++h[static_cast<int>(s) + kOffset];
  return entropy_of(h, symbols.size());
}

}  // namespace

double symbol_entropy_bits(std::span<const uint8_t> symbols) {
  return entropy_impl(symbols);
}

double symbol_entropy_bits(std::span<const int16_t> symbols) {
  for (int16_t s : symbols) {
    if (s < -kOffset || s > kOffset) {
      detail::invalid("symbol_entropy_bits: symbol " + std::to_string(s) + " outside -255..255");
    }
  }
  return entropy_impl(symbols);
}

size_t detail::fixed_width_bytes_of(const CodeStream& s) {
  const size_t code_bits = s.n_rows * s.dim * static_cast<size_t>(s.bits);
  return (code_bits + 7) / 8 + s.n_groups() * s.dim * 4;
}

size_t fixed_width_bytes(const CodeStream& s) {
  validate(s);
  return detail::fixed_width_bytes_of(s);
}

size_t entropy_coded_bytes(const CodeStream& s, bool use_delta, bool per_channel) {
  validate(s);
  const size_t n = s.n_rows, dim = s.dim;
  // Symbols of the real rows: codes, or their token deltas, counted straight from the codes
  // (no array of them: a fresh one per call page-faulted in every block the cache sealed).
  const uint8_t* codes = s.codes.data();
  const auto symbol = [&](size_t r, size_t c) {
    const int cur = codes[r * dim + c];
    return (use_delta && r > 0) ? cur - codes[(r - 1) * dim + c] : cur;
  };
  const double cap = s.bits;
  double total_bits = 0.0;
  if (per_channel) {
    // Symbols lie in [lowest, max_code] (validated codes, or their differences): one narrow
    // histogram per channel, filled row by row, so that consecutive increments go to
    // different channels rather than waiting on one another in a single channel's bins.
    const int max_code = (1 << s.bits) - 1, lowest = use_delta ? -max_code : 0;
    const size_t width = static_cast<size_t>(max_code - lowest + 1);
    std::vector<uint32_t> counts(dim * width, 0);
    for (size_t r = 0; r < n; ++r) {
      for (size_t c = 0; c < dim; ++c)
        ++counts[c * width + static_cast<size_t>(symbol(r, c) - lowest)];
    }
    for (size_t c = 0; c < dim; ++c) {
      total_bits +=
          std::min(entropy_of(counts.data() + c * width, width, n), cap) * static_cast<double>(n);
    }
  } else {
    Histogram h{};
    for (size_t r = 0; r < n; ++r)
      for (size_t c = 0; c < dim; ++c) ++h[static_cast<size_t>(symbol(r, c) + kOffset)];
    total_bits = std::min(entropy_of(h, n * dim), cap) * static_cast<double>(n * dim);
  }
  return static_cast<size_t>(std::ceil(total_bits / 8.0)) + s.n_groups() * dim * 4;
}

}  // namespace cachegen
