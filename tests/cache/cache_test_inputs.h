// KV-like synthetic blocks [heads, tokens, dim] for the cache tests.
#pragma once

#include <cmath>
#include <random>
#include <vector>

#include "cachegen/half.h"
#include "cachegen/kv_cache.h"

namespace cachegen::test {

// Per-channel random walks, fp16, [heads, tokens, dim].
inline std::vector<Half> kv_walk(size_t heads, size_t tokens, size_t dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n01;
  std::vector<Half> x(heads * tokens * dim);
  for (size_t h = 0; h < heads; ++h) {
    for (size_t c = 0; c < dim; ++c) {
      float v = 0;
      for (size_t t = 0; t < tokens; ++t) {
        v += 0.2f * n01(rng);
        x[(h * tokens + t) * dim + c] = float_to_half(v + 0.05f * n01(rng));
      }
    }
  }
  return x;
}

// Tokens [t0, t0 + n) of a [heads, tokens, dim] array, as its own [heads, n, dim] array.
inline std::vector<Half> token_slice(const std::vector<Half>& x, size_t heads, size_t tokens,
                                     size_t dim, size_t t0, size_t n) {
  std::vector<Half> out(heads * n * dim);
  for (size_t h = 0; h < heads; ++h) {
    for (size_t t = 0; t < n; ++t) {
      for (size_t c = 0; c < dim; ++c) {
        out[(h * n + t) * dim + c] = x[(h * tokens + t0 + t) * dim + c];
      }
    }
  }
  return out;
}

inline KVBlockView view(const std::vector<Half>& x, size_t heads, size_t n, size_t dim) {
  return {x.data(), KVDType::f16, heads, n, dim};
}

}  // namespace cachegen::test
