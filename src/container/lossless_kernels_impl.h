// Internal: the lossless kernels' bodies, included by one .cpp per SIMD target (compiled with
// that target's flags) inside a distinct namespace: plain loops the compiler vectorises.
#pragma once

#include "container/lossless_internal.h"
#include "container/lossless_kernels.h"

namespace cachegen::detail::CACHEGEN_KERNEL_NS {

// Restrict parameters, one loop per form: the byte arrays may alias anything, and without
// them the compiler kept the loop scalar or compared the pointers before every row.
static void join_planes(const uint8_t* __restrict codes, const uint8_t* __restrict anchors,
                        const uint8_t* __restrict low, size_t n, size_t width,
                        uint16_t* __restrict bits) {
  if (low) {
    for (size_t i = 0; i < n; i += width) {
      for (size_t c = 0; c < width; ++c)
        bits[i + c] =
            static_cast<uint16_t>((high_byte(codes[i + c], anchors[c]) << 8) | low[i + c]);
    }
  } else {
    for (size_t i = 0; i < n; i += width) {
      for (size_t c = 0; c < width; ++c)
        bits[i + c] = static_cast<uint16_t>(high_byte(codes[i + c], anchors[c]) << 8);
    }
  }
}

// The set bits visited alone (a branch per bit was mispredicted), every pair at once (their
// chains are independent).
template <size_t kN>  // 0: n pairs; else kN (a head of 2 kN values: the loops unroll)
static void power_pairs_n(const double* __restrict squares, size_t n, uint64_t delta,
                          double* __restrict c, double* __restrict s) {
  if (kN) n = kN;
  for (size_t i = 0; i < n; ++i) c[i] = 1, s[i] = 0;
  for (; delta; delta &= delta - 1) {
    // (The builtin, not std::countr_zero: an inline function compiled for AVX-512 could be the
    // out-of-line copy the linker keeps.)
    const double* __restrict pc = squares + 2 * n * static_cast<size_t>(__builtin_ctzll(delta));
    const double* __restrict ps = pc + n;
    for (size_t i = 0; i < n; ++i) {
      const double xc = c[i], xs = s[i];
      c[i] = xc * pc[i] - xs * ps[i];
      s[i] = xc * ps[i] + xs * pc[i];
    }
  }
}

// Heads of 8 and 16 values (stories260K's are 8) at a known size: with the count a variable,
// their 4 or 8 pairs were too few for the vector loop and ran one at a time (power_pairs and
// rotate_pairs were 13% of stories260K's lossless decode). The same operations in the same
// order: the same bits.
static void power_pairs(const double* __restrict squares, size_t n, uint64_t delta,
                        double* __restrict c, double* __restrict s) {
  if (n == 4) return power_pairs_n<4>(squares, n, delta, c, s);
  if (n == 8) return power_pairs_n<8>(squares, n, delta, c, s);
  power_pairs_n<0>(squares, n, delta, c, s);
}

template <size_t kDim>  // 0: dim values a head; else kDim
static void rotate_pairs_n(const float* __restrict x, const double* __restrict cosines,
                           const double* __restrict sines, size_t width, size_t dim, bool adjacent,
                           float* __restrict y) {
  if (kDim) dim = kDim;
  const size_t half = dim / 2;
  for (size_t h = 0; h < width; h += dim) {
    const float* xh = x + h;
    float* yh = y + h;
    if (adjacent) {
      for (size_t i = 0; i < half; ++i) {
        const double x0 = xh[2 * i], x1 = xh[2 * i + 1];
        yh[2 * i] = static_cast<float>(x0 * cosines[i] - x1 * sines[i]);
        yh[2 * i + 1] = static_cast<float>(x0 * sines[i] + x1 * cosines[i]);
      }
    } else {
      for (size_t i = 0; i < half; ++i) {
        const double x0 = xh[i], x1 = xh[i + half];
        yh[i] = static_cast<float>(x0 * cosines[i] - x1 * sines[i]);
        yh[i + half] = static_cast<float>(x0 * sines[i] + x1 * cosines[i]);
      }
    }
  }
}

static void rotate_pairs(const float* __restrict x, const double* __restrict cosines,
                         const double* __restrict sines, size_t width, size_t dim, bool adjacent,
                         float* __restrict y) {
  if (dim == 8) return rotate_pairs_n<8>(x, cosines, sines, width, dim, adjacent, y);
  if (dim == 16) return rotate_pairs_n<16>(x, cosines, sines, width, dim, adjacent, y);
  rotate_pairs_n<0>(x, cosines, sines, width, dim, adjacent, y);
}

// Internal linkage, and a name of its own: the quantization kernels' kTable shares this namespace.
static const LosslessKernels kLosslessTable = {join_planes, power_pairs, rotate_pairs};

}  // namespace cachegen::detail::CACHEGEN_KERNEL_NS
