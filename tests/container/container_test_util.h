// Builds small caches and .cgkv files for the container tests.
#pragma once

#include <cstring>
#include <vector>

#include "cache/cache_test_inputs.h"
#include "cachegen/container.h"
#include "cachegen/kv_cache.h"

namespace cachegen::test {

inline ModelShape small_shape() {
  ModelShape s;
  s.architecture = "test";
  s.n_layers = 3;
  s.attention = {true, false, true};
  s.n_kv_heads = 2;
  s.head_dim = 8;
  return s;
}

// Token-major fp16 [n_attn, 2, T, H, D] and the cache holding it.
struct Filled {
  std::vector<Half> kv;
  KVCache cache;
};

inline Filled filled_cache(size_t T, const KVCacheConfig& cfg, uint32_t seed = 1) {
  const ModelShape shape = small_shape();
  Filled f{{}, KVCacheBuilder::for_model(shape, cfg)};
  const size_t H = 2, D = 8, plane = T * H * D;
  f.kv.resize(2 * 2 * plane);
  for (size_t t = 0; t < 4; ++t) {
    const std::vector<Half> hm = kv_walk(H, T, D, seed + static_cast<uint32_t>(t));  // [H, T, D]
    for (size_t tok = 0; tok < T; ++tok) {
      for (size_t h = 0; h < H; ++h) {
        std::memcpy(f.kv.data() + t * plane + (tok * H + h) * D, hm.data() + (h * T + tok) * D,
                    D * 2);
      }
    }
  }
  for (size_t l = 0; l < 2; ++l) {
    KVBlockView k{f.kv.data() + (2 * l) * plane, KVDType::f16, H, T, D, true};
    KVBlockView v{f.kv.data() + (2 * l + 1) * plane, KVDType::f16, H, T, D, true};
    f.cache.layers[l].append(k, v);
  }
  return f;
}

}  // namespace cachegen::test
