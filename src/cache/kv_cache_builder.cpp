// KVCacheBuilder, KVCacheFactory and whole-model statistics.
#include <string>

#include "cachegen/kv_cache.h"
#include "core/checks.h"

namespace cachegen {

KVCache KVCacheBuilder::for_model(const ModelShape& shape, const KVCacheConfig& config) {
  shape.validate();
  config.validate();
  const int n_attn = shape.n_attention_layers();
  auto check_size = [&](const std::vector<int>& bits, const char* name) {
    if (!bits.empty() && bits.size() != static_cast<size_t>(n_attn)) {
      detail::invalid(std::string("config.") + name + " has " + std::to_string(bits.size()) +
                      " entries, the model " + std::to_string(n_attn) + " attention layers");
    }
  };
  check_size(config.layer_bits, "layer_bits");
  check_size(config.value_layer_bits, "value_layer_bits");
  // The schedule counts attention layers only: a model with non-attention layers keeps its
  // shallow attention layers at base_bits.
  const std::vector<int> k_bits =
      config.layer_bits.empty() ? layer_group_bits(n_attn, config.base_bits, config.layer_groups)
                                : config.layer_bits;
  const std::vector<int> v_bits =
      config.value_layer_bits.empty() ? k_bits : config.value_layer_bits;
  KVCache cache;
  cache.shape = shape;
  cache.config = config;
  int i = 0;
  for (int l = 0; l < shape.n_layers; ++l) {
    if (!shape.has_attention(l)) continue;
    cache.layers.emplace_back(static_cast<size_t>(shape.n_kv_heads),
                              static_cast<size_t>(shape.head_dim), k_bits[i], v_bits[i], config);
    cache.layer_index.push_back(l);
    ++i;
  }
  return cache;
}

LayerKVCache KVCacheFactory::create(const KVCacheConfig& config) {
  return LayerKVCache(0, 0, config.base_bits, config.base_bits, config);
}

LayerKVCache KVCacheFactory::create(const KVCacheConfig& config, size_t n_kv_heads,
                                    size_t head_dim) {
  return LayerKVCache(n_kv_heads, head_dim, config.base_bits, config.base_bits, config);
}

LayerStats KVCache::stats() const {
  LayerStats s;
  for (const LayerKVCache& l : layers) {
    const LayerStats ls = l.stats();
    s.k += ls.k;
    s.v += ls.v;
    s.both += ls.both;
  }
  return s;
}

}  // namespace cachegen
