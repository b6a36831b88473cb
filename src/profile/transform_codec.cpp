// The transform codec's tensor data: quantized coefficients in 8-bit plane code streams.
#include "profile/transform_codec.h"

#include <algorithm>
#include <cmath>

#include "cachegen/codec.h"
#include "cachegen/error.h"
#include "core/wire.h"
#include "quant/kernels.h"

namespace cachegen::detail {
namespace {

constexpr int32_t kMaxQ = 32767;
constexpr uint8_t kFormPlanes = 1, kFormClasses = 2;
constexpr int kMaxClasses = 64;

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

}  // namespace

void project_rows(std::span<const float> x, const ProfileTensor& t, size_t width, size_t block,
                  std::span<float> y) {
  // y_b = B_b d_b as d's entries times the rows of the transposed basis (the basis kernel).
  const QuantKernels& k = quant_kernels();
  const size_t rows = x.size() / width;
  std::vector<float> bt(block * block), d(rows * block);
  const std::vector<float> zero(block, 0.0f);
  for (size_t b = 0; b < width; b += block) {
    for (size_t c = 0; c < block; ++c) {
      for (size_t i = 0; i < block; ++i) bt[i * block + c] = t.basis[(b + c) * block + i];
    }
    for (size_t r = 0; r < rows; ++r) {
      for (size_t i = 0; i < block; ++i) d[r * block + i] = x[r * width + b + i] - t.mean[b + i];
    }
    k.basis_combine(d.data(), rows, block, bt.data(), block, zero.data(), y.data() + b, width);
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

namespace {

// Form 1: the symbols [rows, width] row-major as one 8-bit plane stream of their low bytes (a
// table per component) and, when some symbol exceeds 255, one of their high bytes.
void pack_planes(std::span<const uint16_t> z, size_t width, wire::Writer& w) {
  const bool two = *std::max_element(z.begin(), z.end()) > 255;
  w.u8(two ? 2 : 1);
  for (int shift = 0; shift < (two ? 16 : 8); shift += 8) {
    const std::vector<uint8_t> stream = encode(plane(z, width, shift));
    w.varint(stream.size());
    w.bytes(stream);
  }
}

// Form 2: components pooled in classes by spread (one table per class): class 0 = all zero
// (nothing stored), else 1 + floor(log2(1 + mean symbol)); per class with members, its
// symbols component-major as one-channel streams (low bytes, then high bytes if needed).
void pack_classes(std::span<const uint16_t> z, size_t width, wire::Writer& w) {
  const size_t rows = z.size() / width;
  std::vector<uint8_t> cls(width, 0);
  uint8_t n_classes = 1;
  for (size_t c = 0; c < width; ++c) {
    double sum = 0;
    for (size_t r = 0; r < rows; ++r) sum += z[r * width + c];
    if (sum == 0) continue;
    const int k = 1 + static_cast<int>(std::log2(1.0 + sum / static_cast<double>(rows)));
    cls[c] = static_cast<uint8_t>(std::min(k, kMaxClasses - 1));
    n_classes = std::max<uint8_t>(n_classes, static_cast<uint8_t>(cls[c] + 1));
  }
  w.u8(n_classes);
  for (uint8_t k : cls) w.u8(k);
  std::vector<uint16_t> members;
  for (uint8_t k = 1; k < n_classes; ++k) {
    members.clear();
    for (size_t c = 0; c < width; ++c) {
      if (cls[c] != k) continue;
      for (size_t r = 0; r < rows; ++r) members.push_back(z[r * width + c]);
    }
    if (!members.empty()) pack_planes(members, 1, w);
  }
}

// Reads one form-1 group of planes of [rows, width] symbols; calls put(i, symbol) for each.
template <typename Put>
void unpack_planes(wire::Reader& r, size_t rows, size_t width, const std::string& context,
                   Put&& put) {
  const uint8_t planes = r.u8("planes");
  if (planes != 1 && planes != 2) r.corrupt("planes", "not 1 or 2");
  for (int shift = 0; shift < 8 * planes; shift += 8) {
    const uint64_t len = r.varint("plane length");
    if (len > r.remaining()) r.corrupt("plane length", "runs past the data");
    const CodeStream cs =
        decode_expecting(r.take(len, "plane"), rows, width, 8, context + ": coefficient plane");
    for (size_t i = 0; i < rows * width; ++i) put(i, static_cast<uint16_t>(cs.codes[i] << shift));
  }
}

}  // namespace

std::vector<uint8_t> pack_coefficients(std::span<const float> y, size_t width,
                                       const TransformSteps& steps) {
  std::vector<uint16_t> z(y.size());
  std::vector<float> s(width);
  for (size_t r = 0; r * width < y.size(); ++r) {
    if (r == 0 || r == steps.sink_rows) {
      for (size_t c = 0; c < width; ++c) s[c] = steps.at(r) * steps.factor[c];
    }
    for (size_t c = 0; c < width; ++c) z[r * width + c] = zigzag(quantize(y[r * width + c], s[c]));
  }
  // Both forms; the smaller is kept (classes win where per-component tables cost more than
  // pooling loses: mostly at high rates).
  std::vector<uint8_t> planes{kFormPlanes}, classes{kFormClasses};
  wire::Writer wp(planes), wc(classes);
  if (!z.empty()) {
    pack_planes(z, width, wp);
    pack_classes(z, width, wc);
  }
  return classes.size() < planes.size() ? classes : planes;
}

void unpack_transform(std::span<const uint8_t> bytes, const ProfileTensor& t, size_t width,
                      size_t block, const TransformSteps& steps, std::span<Half> out,
                      const std::string& context, const TransformRope* rope) {
  const size_t rows = out.size() / width;
  wire::Reader r(bytes, context, 0);
  const uint8_t form = r.u8("form");
  std::vector<uint16_t> z(rows * width, 0);  // row-major
  if (rows == 0) {
    if (form != kFormPlanes) r.corrupt("form", "not 1 for an empty tensor");
  } else if (form == kFormPlanes) {
    unpack_planes(r, rows, width, context, [&](size_t i, uint16_t v) { z[i] |= v; });
  } else if (form == kFormClasses) {
    const uint8_t n_classes = r.u8("classes");
    if (n_classes < 1 || n_classes > kMaxClasses) r.corrupt("classes", "not in 1..64");
    const auto cls = r.take(width, "component classes");
    std::vector<uint32_t> members;
    for (uint8_t k = 1; k < n_classes; ++k) {
      members.clear();
      for (size_t c = 0; c < width; ++c) {
        if (cls[c] >= n_classes) r.corrupt("component classes", "a class past the count");
        if (cls[c] == k) members.push_back(static_cast<uint32_t>(c));
      }
      if (members.empty()) continue;
      // Stream element i is row i % rows of the class's component i / rows.
      unpack_planes(r, rows * members.size(), 1, context,
                    [&](size_t i, uint16_t v) { z[(i % rows) * width + members[i / rows]] |= v; });
    }
  } else {
    r.corrupt("form", "not 1 or 2");
  }
  r.expect_end("its coefficient streams");
  // x = mean + B^T (s * q), block by block, rows in tiles (the basis kernel), then fp16.
  const QuantKernels& k = quant_kernels();
  std::vector<float> s(width), coef(rows * block), x(rows * width);
  for (size_t b = 0; b < width; b += block) {
    for (size_t row = 0; row < rows; ++row) {
      if (row == 0 || row == steps.sink_rows) {
        for (size_t c = 0; c < width; ++c) s[c] = steps.at(row) * t.step_factor[c];
      }
      for (size_t c = 0; c < block; ++c) {
        const uint16_t v = z[row * width + b + c];
        coef[row * block + c] = v == 0 ? 0.0f : s[b + c] * static_cast<float>(unzigzag(v));
      }
    }
    k.basis_combine(coef.data(), rows, block, t.basis.data() + b * block, block, t.mean.data() + b,
                    x.data() + b, width);
  }
  if (rope != nullptr && rows > 0) {
    std::vector<int32_t> pos(rows);
    for (size_t row = 0; row < rows; ++row) pos[row] = static_cast<int32_t>(rope->first_pos + row);
    rope_rows(x, rows, rope->n_heads, rope->head_dim, pos, rope->params, false);
  }
  k.f32_to_f16_sat(x.data(), reinterpret_cast<uint16_t*>(out.data()), x.size());
}

}  // namespace cachegen::detail
