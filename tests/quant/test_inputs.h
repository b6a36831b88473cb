// Deterministic synthetic inputs for the quantization tests.
#pragma once

#include <cmath>
#include <random>
#include <vector>

namespace cachegen::test {

// Gaussian random walk along rows (correlated tokens), scaled by `step`.
inline std::vector<float> random_walk(size_t n_rows, size_t dim, float step, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::vector<float> x(n_rows * dim);
  for (size_t c = 0; c < dim; ++c) {
    float v = 0.0f;
    for (size_t r = 0; r < n_rows; ++r) {
      v += step * n01(rng);
      x[r * dim + c] = v;
    }
  }
  return x;
}

inline std::vector<float> iid_normal(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = n01(rng);
  return x;
}

}  // namespace cachegen::test
