// Internal: the transform codec's tensor data (container codec 2; docs/FORMAT.md, "Chunk
// payload", codec 2). A tensor [rows, width] is coded as the zigzagged integers
// q = round(y / step) of its coefficients y = B (x - mean) (ProfileTensor, per block), in one
// or two 8-bit plane code streams (low bytes, then high bytes when some |q| exceeds 127).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cachegen/half.h"
#include "cachegen/profile.h"

namespace cachegen::detail {

// The steps of a tensor's rows: rows below sink_rows use step * sink_scale (fp32 product);
// component c of a row with step s uses fp32(s * factor[c]) (ProfileTensor::step_factor).
struct TransformSteps {
  float step = 0;
  size_t sink_rows = 0;
  float sink_scale = 1;
  std::span<const float> factor;  // [width]
  float at(size_t row) const { return row < sink_rows ? step * sink_scale : step; }
};

// Coefficients y [rows, width] of x [rows, width]: per block, y = B (x - mean).
void project_rows(std::span<const float> x, const ProfileTensor& t, size_t width, size_t block,
                  std::span<float> y);
// Squared errors of quantizing y at `steps`, summed over rows per component, added to
// err[width] (the reconstruction error of the rows, the basis being orthonormal, before fp16
// rounding).
void quantization_error(std::span<const float> y, size_t width, const TransformSteps& steps,
                        std::span<double> err);
// The tensor data of y quantized at `steps`.
std::vector<uint8_t> pack_coefficients(std::span<const float> y, size_t width,
                                       const TransformSteps& steps);
// Keys coded pre-RoPE: rotated back in fp32, row r to position first_pos + r, before the
// one rounding to fp16.
struct TransformRope {
  RopeParams params;
  int64_t first_pos = 0;
  size_t n_heads = 0, head_dim = 0;
};
// Decodes tensor data into out [rows, width] fp16 (x = mean + B^T (step * q) in fp32, rotated
// when `rope` is given, saturated to +-65504). corrupt_input naming `context` for malformed
// data.
void unpack_transform(std::span<const uint8_t> bytes, const ProfileTensor& t, size_t width,
                      size_t block, const TransformSteps& steps, std::span<Half> out,
                      const std::string& context, const TransformRope* rope = nullptr);

}  // namespace cachegen::detail
