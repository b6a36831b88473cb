// The transform codec's tensor data: quantized coefficients in 8-bit plane code streams.
#include "profile/transform_codec.h"

#include <algorithm>
#include <cmath>

#include "cachegen/codec.h"
#include "cachegen/error.h"
#include "core/wire.h"

namespace cachegen::detail {
namespace {

constexpr int32_t kMaxQ = 32767;

// Round to nearest (a dead zone, rounding magnitudes below 0.5 + d down, measured worse: at
// the level's KL it took 0.24 (d = 0.1) to 1.2 (d = 0.3) more bits per element on stories260K).
int32_t quantize(float y, float step) {
  const float v = std::clamp(y / step, -static_cast<float>(kMaxQ), static_cast<float>(kMaxQ));
  return static_cast<int32_t>(std::nearbyint(v));
}

uint16_t zigzag(int32_t q) {
  return static_cast<uint16_t>((static_cast<uint32_t>(q) << 1) ^ static_cast<uint32_t>(q >> 31));
}

int32_t unzigzag(uint32_t z) {
  return static_cast<int32_t>(z >> 1) ^ -static_cast<int32_t>(z & 1);
}

// An 8-bit [rows, width] plane of one byte of every symbol (per-channel models, unit params).
CodeStream plane(std::span<const uint16_t> z, size_t width, int shift) {
  CodeStream s;
  s.n_rows = z.size() / width;
  s.dim = width;
  s.bits = 8;
  s.group_size = std::min(s.n_rows, kMaxGroupSize);
  s.codes.resize(s.n_groups() * s.group_size * width);
  for (size_t i = 0; i < z.size(); ++i) s.codes[i] = static_cast<uint8_t>(z[i] >> shift);
  for (size_t i = z.size(); i < s.codes.size(); ++i) s.codes[i] = s.codes[i - width];
  s.scale.assign(s.n_groups() * width, 1.0f);
  s.zero.assign(s.n_groups() * width, 0.0f);
  return s;
}

CodeStream decode_plane(std::span<const uint8_t> bytes, size_t rows, size_t width,
                        const std::string& context) {
  DecodeOptions opt;
  opt.max_elements = (rows + std::min(rows, kMaxGroupSize)) * width + width;
  CodeStream s = decode(bytes, opt);
  if (s.n_rows != rows || s.dim != width || s.bits != 8) {
    throw Error(ErrorCode::corrupt_input,
                context + ": coefficient plane is " + std::to_string(s.n_rows) + "x" +
                    std::to_string(s.dim) + " at " + std::to_string(s.bits) + " bits, expected " +
                    std::to_string(rows) + "x" + std::to_string(width) + " at 8");
  }
  return s;
}

}  // namespace

void project_rows(std::span<const float> x, const ProfileTensor& t, size_t width, size_t block,
                  std::span<float> y) {
  // y_b = B_b d_b as a sum of d_i times column i of B_b (the transposed basis): contiguous
  // multiply-adds the compiler vectorises.
  std::vector<float> bt(block * block), d(width);
  const size_t rows = x.size() / width;
  std::fill(y.begin(), y.end(), 0.0f);
  for (size_t b = 0; b < width; b += block) {
    for (size_t c = 0; c < block; ++c) {
      for (size_t i = 0; i < block; ++i) bt[i * block + c] = t.basis[(b + c) * block + i];
    }
    for (size_t r = 0; r < rows; ++r) {
      const float* xr = x.data() + r * width + b;
      float* yr = y.data() + r * width + b;
      for (size_t i = 0; i < block; ++i) {
        const float di = xr[i] - t.mean[b + i];
        const float* col = bt.data() + i * block;
        for (size_t c = 0; c < block; ++c) yr[c] += di * col[c];
      }
    }
  }
}

void quantization_error(std::span<const float> y, size_t width, const TransformSteps& steps,
                        std::span<double> err) {
  std::vector<float> s(width);
  for (size_t r = 0; r * width < y.size(); ++r) {
    if (r == 0 || r == steps.sink_rows) {
      for (size_t c = 0; c < width; ++c) s[c] = steps.at(r) * steps.factor[c];
    }
    for (size_t c = 0; c < width; ++c) {
      const float v = y[r * width + c];
      const double e = static_cast<double>(v) - static_cast<double>(s[c]) * quantize(v, s[c]);
      err[c] += e * e;
    }
  }
}

std::vector<uint8_t> pack_coefficients(std::span<const float> y, size_t width,
                                       const TransformSteps& steps) {
  std::vector<uint16_t> z(y.size());
  uint16_t top = 0;
  std::vector<float> s(width);
  for (size_t r = 0; r * width < y.size(); ++r) {
    if (r == 0 || r == steps.sink_rows) {
      for (size_t c = 0; c < width; ++c) s[c] = steps.at(r) * steps.factor[c];
    }
    for (size_t c = 0; c < width; ++c) {
      z[r * width + c] = zigzag(quantize(y[r * width + c], s[c]));
      top = std::max(top, z[r * width + c]);
    }
  }
  const bool two = top > 255;
  std::vector<uint8_t> out;
  wire::Writer w(out);
  w.u8(two ? 2 : 1);
  const std::vector<uint8_t> low = encode(plane(z, width, 0));
  w.varint(low.size());
  w.bytes(low);
  if (two) w.bytes(encode(plane(z, width, 8)));
  return out;
}

void unpack_transform(std::span<const uint8_t> bytes, const ProfileTensor& t, size_t width,
                      size_t block, const TransformSteps& steps, std::span<Half> out,
                      const std::string& context) {
  const size_t rows = out.size() / width;
  wire::Reader r(bytes, context, 0);
  const uint8_t planes = r.u8("planes");
  if (planes != 1 && planes != 2) r.corrupt("planes", "not 1 or 2");
  const uint64_t low_len = r.varint("low plane length");
  if (low_len > r.remaining()) r.corrupt("low plane length", "runs past the data");
  const CodeStream low = decode_plane(r.take(low_len, "low plane"), rows, width, context);
  CodeStream high;
  if (planes == 2) {
    high = decode_plane(r.rest(), rows, width, context + " (high bytes)");
  } else {
    r.expect_end("its coefficient plane");
  }
  std::vector<float> acc(width), s(width);
  for (size_t row = 0; row < rows; ++row) {
    if (row == 0 || row == steps.sink_rows) {
      for (size_t c = 0; c < width; ++c) s[c] = steps.at(row) * t.step_factor[c];
    }
    std::copy(t.mean.begin(), t.mean.end(), acc.begin());
    for (size_t b = 0; b < width; b += block) {
      for (size_t c = 0; c < block; ++c) {
        const size_t i = row * width + b + c;
        const uint32_t z = low.codes[i] | (planes == 2 ? uint32_t{high.codes[i]} << 8 : 0u);
        if (z == 0) continue;
        const float coef = s[b + c] * static_cast<float>(unzigzag(z));
        const float* v = t.basis.data() + (b + c) * block;
        float* a = acc.data() + b;
        for (size_t k = 0; k < block; ++k) a[k] += v[k] * coef;
      }
    }
    Half* o = out.data() + row * width;
    for (size_t k = 0; k < width; ++k)
      o[k] = float_to_half(std::clamp(acc[k], -65504.0f, 65504.0f));
  }
}

}  // namespace cachegen::detail
