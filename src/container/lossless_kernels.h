// Internal: the lossless tier's loops over values (method 2's plane join and rotated rows), one
// table per SIMD path. Every path does the same IEEE operations in the same order (no FMA: the
// build sets -ffp-contract=off, and the AVX-512 file is compiled without GCC's SLP vectoriser,
// which fused products anyway), so every table gives the same bits; the scalar table is the
// reference twin (tests/container/lossless_kernels_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace cachegen::detail {

struct LosslessKernels {
  // bits[i] = high_byte(codes[i], anchors[i % width]) << 8 | low[i] (low null: 0), for i < n
  // (whole rows of width values).
  void (*join_planes)(const uint8_t* codes, const uint8_t* anchors, const uint8_t* low, size_t n,
                      size_t width, uint16_t* bits);
  // Square-and-multiply of n pairs' (cos, sin) by distance delta: c[i] = 1, s[i] = 0, then for
  // each set bit k of delta in ascending order (c + s j) *= (p[i] + p[n + i] j) with
  // p = squares + 2 n k: c = c * pc - s * ps, s = c * ps + s * pc (the old c and s).
  void (*power_pairs)(const double* squares, size_t n, uint64_t delta, double* c, double* s);
  // y = x rotated pair by pair, every head of dim values alike (width a multiple of dim): pair
  // i < dim / 2 of a head is (2i, 2i + 1) when adjacent, else (i, i + dim / 2); in double, its
  // first value becomes x0 * cosines[i] - x1 * sines[i], its second x0 * sines[i] + x1 *
  // cosines[i], each rounded to float.
  void (*rotate_pairs)(const float* x, const double* cosines, const double* sines, size_t width,
                       size_t dim, bool adjacent, float* y);
};

const LosslessKernels& lossless_kernels_scalar();
const LosslessKernels& lossless_kernels_avx2();
const LosslessKernels& lossless_kernels_avx512();
// The table for cachegen::simd_path().
const LosslessKernels& lossless_kernels();

}  // namespace cachegen::detail
