// The reference's Shannon-entropy size estimate (kept for compatibility and comparison:
// the real coder lives in the codec layer).
#include <algorithm>
#include <array>
#include <cmath>

#include "cachegen/quant.h"
#include "core/checks.h"

namespace cachegen {
namespace {

// Symbols are offset into [0, 511): raw codes 0..255, deltas -255..255.
constexpr int kOffset = 255;
using Histogram = std::array<uint32_t, 511>;

// Bins [lo, hi] hold every nonzero count (the sum skips empty bins, so the range gives the
// same result as the whole histogram).
double entropy_of(const Histogram& h, size_t total, int lo = 0, int hi = 510) {
  if (total == 0) return 0.0;
  double bits = 0.0;
  const double inv = 1.0 / static_cast<double>(total);
  for (int i = lo; i <= hi; ++i) {
    const uint32_t n = h[static_cast<size_t>(i)];
    if (n == 0) continue;
    const double p = n * inv;
    bits -= p * std::log2(p);
  }
  return bits > 0.0 ? bits : 0.0;  // a single symbol gives -0.0 in the sum
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

size_t fixed_width_bytes(const CodeStream& s) {
  validate(s);
  const size_t code_bits = s.n_rows * s.dim * static_cast<size_t>(s.bits);
  return (code_bits + 7) / 8 + s.n_groups() * s.dim * 4;
}

size_t entropy_coded_bytes(const CodeStream& s, bool use_delta, bool per_channel) {
  validate(s);
  const size_t n = s.n_rows, dim = s.dim;
  // Symbols of the real rows: codes, or their token deltas.
  std::vector<int16_t> sym(n * dim);
  for (size_t r = 0; r < n; ++r) {
    for (size_t c = 0; c < dim; ++c) {
      const int cur = s.codes[r * dim + c];
      const int prev = (use_delta && r > 0) ? s.codes[(r - 1) * dim + c] : 0;
      sym[r * dim + c] = static_cast<int16_t>(cur - prev);
    }
  }
  const double cap = s.bits;
  double total_bits = 0.0;
  if (per_channel) {
    // One histogram for every channel, its used range only scanned and cleared: the channels
    // of a head are many and their symbols few.
    Histogram h{};
    for (size_t c = 0; c < dim; ++c) {
      int lo = 510, hi = 0;
      for (size_t r = 0; r < n; ++r) {
        const int b = sym[r * dim + c] + kOffset;
        ++h[static_cast<size_t>(b)];
        lo = std::min(lo, b);
        hi = std::max(hi, b);
      }
      total_bits += std::min(entropy_of(h, n, lo, hi), cap) * static_cast<double>(n);
      for (int i = lo; i <= hi; ++i) h[static_cast<size_t>(i)] = 0;
    }
  } else {
    Histogram h{};
    for (int16_t v : sym) ++h[v + kOffset];
    total_bits = std::min(entropy_of(h, sym.size()), cap) * static_cast<double>(sym.size());
  }
  return static_cast<size_t>(std::ceil(total_bits / 8.0)) + s.n_groups() * dim * 4;
}

}  // namespace cachegen
