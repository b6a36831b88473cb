// Baseline KV quantizers for `cachegen eval --sweep rate`, implemented here so that they run on
// the same captured KV, in the same windows, as cachegen's own file path. Neither entropy-codes
// anything: their bits are an exact count of what a fixed-width layout stores.
//
// KIVI (Liu et al., ICML 2024): keys quantized per channel (groups of `group` tokens along the
// token axis), values per token (groups of `group` channels along the row), asymmetric min/max,
// scale and zero in fp16 each, and the last `residual_tokens` tokens kept in fp16.
//
// TurboQuant (Zandieh et al., 2025), MSE variant: every head vector's norm stored in fp16, the
// unit vector rotated by a seeded random orthogonal rotation (random signs + Walsh–Hadamard,
// random_sign_hadamard_heads), each rotated coordinate (times sqrt(head_dim)) quantized to the
// nearest centroid of a Lloyd–Max codebook fit to the *distribution a rotated unit vector's
// coordinate follows* (the scaled Beta density below, as the paper does: not fit on the data).
// Fractional rates mix widths: round(frac * head_dim) channels at floor(bits) + 1 bits, the rest
// at floor(bits).
//
// Layout of every matrix: token-major fp32 [n_rows, n_heads * head_dim] (a KV layer's K or V).
// Errors: Error(invalid_argument) naming the bad argument. All functions are re-entrant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace cachegen::llama::baseline {

// A scalar codebook: centroids ascending; a value maps to the centroid of the cell it falls
// in, cells split at bounds (bounds[i] between centroids i and i + 1, the midpoints).
struct Codebook {
  std::vector<double> centroids;
  std::vector<double> bounds;
  // Index of the nearest centroid (the cell x falls in).
  size_t nearest(double x) const;
};

// Lloyd–Max quantizer with 2^bits levels (bits 1..8) for the density pdf on [lo, hi]
// (unnormalised is fine; evaluated on `grid` midpoints), iterated to a fixed point: every
// centroid the pdf-weighted mean of its cell, every bound the midpoint of its neighbours.
Codebook lloyd_max_codebook(int bits, const std::function<double(double)>& pdf, double lo,
                            double hi, size_t grid = 1 << 16);
// Density (unnormalised) of sqrt(dim) * u_0 for u uniform on the unit sphere of R^dim:
// (1 - x^2 / dim)^((dim - 3) / 2) on |x| < sqrt(dim); tends to N(0, 1) as dim grows. dim >= 2.
double sphere_coordinate_pdf(double x, size_t dim);
// lloyd_max_codebook on sphere_coordinate_pdf (the codebook TurboQuant uses for head_dim dim).
Codebook lloyd_max_sphere(int bits, size_t dim);

struct KiviOptions {
  int bits = 2;       // 1..8
  size_t group = 32;  // tokens per key group, channels per value group (clamped to the row)
  size_t residual_tokens = 32;  // the most recent tokens, kept in fp16
};
// Quantizes and dequantizes x [n_rows, n_embd] in place as KIVI keys (is_key) or values;
// returns the bits stored: codes + 32 bits (fp16 scale and zero) per group + 16 per element of
// the fp16 window. Zero and scale are rounded to fp16 outward (zero down, scale up) so every
// value is within half a step of its reconstruction.
double kivi_roundtrip(std::span<float> x, size_t n_rows, size_t n_embd, bool is_key,
                      const KiviOptions& options);
// The bits kivi_roundtrip returns, from the shape alone.
double kivi_bits(size_t n_rows, size_t n_embd, bool is_key, const KiviOptions& options);

// Asymmetric min/max quantization of one group (KIVI's), in place; returns the step (scale).
// Values are within step / 2 of what they were (fp16 scale and zero, rounded outward).
double quantize_group_minmax(std::span<float> values, size_t stride, size_t count, int bits);

class TurboQuant {
 public:
  // bits per channel in [1, 8] (fractional: a mix of two widths); head_dim a power of two >= 2.
  TurboQuant(double bits, size_t head_dim, uint64_t seed = 0x7ab0c0de);
  // Quantizes and dequantizes x [n_rows, n_heads * head_dim] in place; returns the bits stored.
  double roundtrip(std::span<float> x, size_t n_rows, size_t n_heads) const;
  // Bits of n_vectors head vectors: codes plus a 16-bit norm each.
  double bits(size_t n_vectors) const;
  const std::vector<int>& channel_bits() const { return channel_bits_; }

 private:
  size_t head_dim_;
  uint64_t seed_;
  std::vector<int> channel_bits_;           // per rotated channel
  std::vector<Codebook> codebook_by_bits_;  // index = bits (only the used widths filled)
};

}  // namespace cachegen::llama::baseline
