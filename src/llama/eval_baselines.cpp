// KIVI and TurboQuant-style baselines for the rate–quality sweep (eval_baselines.h).
#include "llama/eval_baselines.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "cachegen/error.h"
#include "cachegen/half.h"
#include "cachegen/transform.h"

namespace cachegen::llama::baseline {
namespace {

[[noreturn]] void invalid(const std::string& what) {
  throw Error(ErrorCode::invalid_argument, "baseline: " + what);
}

void check_bits(int bits) {
  if (bits < 1 || bits > 8) invalid("bits " + std::to_string(bits) + " is not in 1..8");
}

// The fp16 value nearest v on the given side (v itself when representable): KIVI's scale and
// zero are stored in fp16, rounded outward so that the stored range still covers the group.
float half_toward(double v, bool up) {
  Half h = float_to_half(static_cast<float>(v));
  const double got = half_to_float(h);
  if (up ? got >= v : got <= v) return static_cast<float>(got);
  const bool negative = (h.bits & 0x8000) != 0;
  if ((h.bits & 0x7fff) == 0) {
    h.bits = up ? 0x0001 : 0x8001;  // the smallest subnormal on that side of zero
  } else if (up != negative) {
    h.bits = static_cast<uint16_t>(h.bits + 1);  // away from zero
  } else {
    h.bits = static_cast<uint16_t>(h.bits - 1);  // toward zero
  }
  return half_to_float(h);
}

}  // namespace

size_t Codebook::nearest(double x) const {
  return static_cast<size_t>(std::upper_bound(bounds.begin(), bounds.end(), x) - bounds.begin());
}

Codebook lloyd_max_codebook(int bits, const std::function<double(double)>& pdf, double lo,
                            double hi, size_t grid) {
  check_bits(bits);
  if (!(hi > lo) || grid < 16) invalid("lloyd_max_codebook: needs lo < hi and grid >= 16");
  const size_t levels = size_t{1} << bits;
  // Cumulative mass and first moment on the grid's midpoints: a cell's mean is then two
  // binary searches, so iterating to the fixed point costs O(levels log grid) per step.
  const double dx = (hi - lo) / static_cast<double>(grid);
  std::vector<double> xs(grid), mass(grid + 1, 0.0), moment(grid + 1, 0.0);
  for (size_t i = 0; i < grid; ++i) {
    xs[i] = lo + (static_cast<double>(i) + 0.5) * dx;
    const double w = std::max(pdf(xs[i]), 0.0);
    mass[i + 1] = mass[i] + w;
    moment[i + 1] = moment[i] + w * xs[i];
  }
  if (!(mass[grid] > 0)) invalid("lloyd_max_codebook: the density has no mass on [lo, hi]");
  Codebook cb;
  // Start from the quantiles' cell centres (the fixed point is the same, it is just reached
  // sooner).
  cb.centroids.resize(levels);
  for (size_t c = 0; c < levels; ++c) {
    const double target = mass[grid] * (static_cast<double>(c) + 0.5) / static_cast<double>(levels);
    const size_t i =
        static_cast<size_t>(std::lower_bound(mass.begin(), mass.end(), target) - mass.begin());
    cb.centroids[c] = xs[std::min(i == 0 ? 0 : i - 1, grid - 1)];
  }
  cb.bounds.resize(levels - 1);
  const auto cut = [&](double b) {  // grid points below b
    return static_cast<size_t>(std::lower_bound(xs.begin(), xs.end(), b) - xs.begin());
  };
  for (int iter = 0; iter < 10000; ++iter) {
    for (size_t c = 0; c + 1 < levels; ++c) {
      cb.bounds[c] = (cb.centroids[c] + cb.centroids[c + 1]) / 2;
    }
    double change = 0;
    for (size_t c = 0; c < levels; ++c) {
      const size_t a = c == 0 ? 0 : cut(cb.bounds[c - 1]);
      const size_t b = c + 1 == levels ? grid : cut(cb.bounds[c]);
      const double m = mass[b] - mass[a];
      if (m <= 0) continue;  // an empty cell keeps its centroid
      const double mean = (moment[b] - moment[a]) / m;
      change = std::max(change, std::abs(mean - cb.centroids[c]));
      cb.centroids[c] = mean;
    }
    if (change < 1e-12 * (hi - lo)) break;
  }
  for (size_t c = 0; c + 1 < levels; ++c) {
    cb.bounds[c] = (cb.centroids[c] + cb.centroids[c + 1]) / 2;
  }
  return cb;
}

double sphere_coordinate_pdf(double x, size_t dim) {
  if (dim < 2) invalid("sphere_coordinate_pdf: dim " + std::to_string(dim) + " < 2");
  const double d = static_cast<double>(dim);
  const double t = 1 - x * x / d;
  if (t <= 0) return 0;
  return std::pow(t, (d - 3) / 2);
}

Codebook lloyd_max_sphere(int bits, size_t dim) {
  if (dim < 2) invalid("lloyd_max_sphere: dim " + std::to_string(dim) + " < 2");
  // Beyond 12 standard deviations the mass is < 1e-30: no centroid can sit there.
  const double r = std::min(std::sqrt(static_cast<double>(dim)), 12.0);
  return lloyd_max_codebook(
      bits, [dim](double x) { return sphere_coordinate_pdf(x, dim); }, -r, r);
}

double quantize_group_minmax(std::span<float> values, size_t stride, size_t count, int bits) {
  check_bits(bits);
  if (count == 0) return 0;
  if (stride == 0 || (count - 1) * stride >= values.size()) {
    invalid("quantize_group_minmax: the group runs past the values");
  }
  double mn = values[0], mx = values[0];
  for (size_t i = 0; i < count; ++i) {
    mn = std::min(mn, double{values[i * stride]});
    mx = std::max(mx, double{values[i * stride]});
  }
  const double max_code = static_cast<double>((1 << bits) - 1);
  const double zero = half_toward(mn, false);
  const double scale = half_toward((mx - zero) / max_code, true);
  for (size_t i = 0; i < count; ++i) {
    float& v = values[i * stride];
    const double code =
        scale > 0 ? std::clamp(std::nearbyint((v - zero) / scale), 0.0, max_code) : 0.0;
    v = static_cast<float>(zero + code * scale);
  }
  return scale;
}

double kivi_bits(size_t n_rows, size_t n_embd, bool is_key, const KiviOptions& o) {
  check_bits(o.bits);
  if (o.group == 0) invalid("kivi: group 0");
  const size_t window = std::min(o.residual_tokens, n_rows);
  const size_t n_q = n_rows - window;
  size_t groups = 0;
  if (is_key) {
    groups = n_embd * ((n_q + o.group - 1) / o.group);  // per channel, along tokens
  } else {
    const size_t g = std::min(o.group, n_embd);
    groups = n_q * ((n_embd + g - 1) / g);  // per token, along channels
  }
  return static_cast<double>(n_q * n_embd) * o.bits + 32.0 * static_cast<double>(groups) +
         16.0 * static_cast<double>(window * n_embd);
}

double kivi_roundtrip(std::span<float> x, size_t n_rows, size_t n_embd, bool is_key,
                      const KiviOptions& o) {
  if (x.size() != n_rows * n_embd) invalid("kivi: x is not n_rows * n_embd values");
  const double bits = kivi_bits(n_rows, n_embd, is_key, o);  // checks the options
  const size_t window = std::min(o.residual_tokens, n_rows);
  const size_t n_q = n_rows - window;
  if (is_key) {
    for (size_t t0 = 0; t0 < n_q; t0 += o.group) {
      const size_t count = std::min(o.group, n_q - t0);
      for (size_t c = 0; c < n_embd; ++c) {
        quantize_group_minmax(x.subspan(t0 * n_embd + c), n_embd, count, o.bits);
      }
    }
  } else {
    const size_t g = std::min(o.group, n_embd);
    for (size_t t = 0; t < n_q; ++t) {
      for (size_t c0 = 0; c0 < n_embd; c0 += g) {
        quantize_group_minmax(x.subspan(t * n_embd + c0), 1, std::min(g, n_embd - c0), o.bits);
      }
    }
  }
  // The window is kept as fp16: the restored state is fp16 anyway.
  for (size_t i = n_q * n_embd; i < x.size(); ++i) x[i] = half_to_float(float_to_half(x[i]));
  return bits;
}

TurboQuant::TurboQuant(double bits, size_t head_dim, uint64_t seed)
    : head_dim_(head_dim), seed_(seed) {
  if (!(bits >= 1 && bits <= 8)) invalid("turboquant: bits " + std::to_string(bits));
  if (head_dim < 2 || (head_dim & (head_dim - 1)) != 0) {
    invalid("turboquant: head_dim " + std::to_string(head_dim) + " is not a power of two >= 2");
  }
  const int lo = static_cast<int>(std::floor(bits));
  const size_t n_hi = static_cast<size_t>(std::lround((bits - lo) * static_cast<double>(head_dim)));
  channel_bits_.assign(head_dim, lo);
  for (size_t c = 0; c < n_hi; ++c) channel_bits_[c] = lo + 1;
  codebook_by_bits_.resize(10);
  for (int b : channel_bits_) {
    if (codebook_by_bits_[static_cast<size_t>(b)].centroids.empty()) {
      codebook_by_bits_[static_cast<size_t>(b)] = lloyd_max_sphere(b, head_dim);
    }
  }
}

double TurboQuant::bits(size_t n_vectors) const {
  double per_vector = 16;  // the fp16 norm
  for (int b : channel_bits_) per_vector += b;
  return per_vector * static_cast<double>(n_vectors);
}

double TurboQuant::roundtrip(std::span<float> x, size_t n_rows, size_t n_heads) const {
  random_sign_hadamard_heads(x, n_rows, n_heads, head_dim_, seed_, false);
  const double root_d = std::sqrt(static_cast<double>(head_dim_));
  for (size_t h = 0; h < n_rows * n_heads; ++h) {
    float* v = x.data() + h * head_dim_;
    double sq = 0;
    for (size_t c = 0; c < head_dim_; ++c) sq += double{v[c]} * v[c];
    const double norm = std::sqrt(sq);
    const double norm_stored = half_to_float(float_to_half(static_cast<float>(norm)));
    for (size_t c = 0; c < head_dim_; ++c) {
      if (norm == 0) {
        v[c] = 0;
        continue;
      }
      const Codebook& cb = codebook_by_bits_[static_cast<size_t>(channel_bits_[c])];
      const double y = v[c] / norm * root_d;
      v[c] = static_cast<float>(cb.centroids[cb.nearest(y)] / root_d * norm_stored);
    }
  }
  random_sign_hadamard_heads(x, n_rows, n_heads, head_dim_, seed_, true);
  return bits(n_rows * n_heads);
}

}  // namespace cachegen::llama::baseline
