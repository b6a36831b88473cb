// KVCacheConfig / ModelShape validation and size-statistics arithmetic.
#include <string>

#include "cachegen/kv_cache.h"
#include "core/checks.h"

namespace cachegen {

using detail::invalid;

void KVCacheConfig::validate() const {
  detail::check_bits(base_bits, "config.base_bits");
  if (layer_groups < 1)
    invalid("config.layer_groups must be >= 1, got " + std::to_string(layer_groups));
  if (group_size == 0 || group_size > kMaxGroupSize) {
    invalid("config.group_size must be in 1.." + std::to_string(kMaxGroupSize) + ", got " +
            std::to_string(group_size));
  }
  if (block_tokens == 0 || block_tokens % group_size != 0 || block_tokens > (size_t{1} << 24)) {
    invalid("config.block_tokens must be a positive multiple of group_size (" +
            std::to_string(group_size) + ") up to 2^24, got " + std::to_string(block_tokens));
  }
  if (params != ParamMode::compact && params != ParamMode::reference) {
    invalid("config.params must be compact or reference");
  }
  // 0 = recomputed, not stored; a layer is recomputed as a whole (K and V).
  for (size_t i = 0; i < layer_bits.size(); ++i) {
    if (layer_bits[i] != 0)
      detail::check_bits(layer_bits[i], ("config.layer_bits[" + std::to_string(i) + "]").c_str());
  }
  if (!layer_bits.empty() && !value_layer_bits.empty() &&
      layer_bits.size() != value_layer_bits.size()) {
    invalid("config.value_layer_bits has " + std::to_string(value_layer_bits.size()) +
            " entries but config.layer_bits " + std::to_string(layer_bits.size()));
  }
  for (size_t i = 0; i < value_layer_bits.size(); ++i) {
    if (value_layer_bits[i] != 0) {
      detail::check_bits(value_layer_bits[i],
                         ("config.value_layer_bits[" + std::to_string(i) + "]").c_str());
    }
    const bool k0 = i < layer_bits.size() && layer_bits[i] == 0;
    if (k0 != (value_layer_bits[i] == 0)) {
      invalid("config layer " + std::to_string(i) +
              ": a recomputed layer (bits 0) must have 0 in both layer_bits and "
              "value_layer_bits");
    }
  }
  if (key_pre_rope) {
    rope.validate();
    if (rope_position_offset < 0) {
      invalid("config.rope_position_offset must be >= 0, got " +
              std::to_string(rope_position_offset));
    }
  }
}

bool ModelShape::has_attention(int layer) const {
  if (layer < 0 || layer >= n_layers) return false;
  return attention.empty() || attention[static_cast<size_t>(layer)];
}

int ModelShape::n_attention_layers() const {
  int n = 0;
  for (int l = 0; l < n_layers; ++l) n += has_attention(l);
  return n;
}

void ModelShape::validate() const {
  if (n_layers < 1 || n_layers > 4096)
    invalid("shape.n_layers must be in 1..4096, got " + std::to_string(n_layers));
  if (!attention.empty() && attention.size() != static_cast<size_t>(n_layers)) {
    invalid("shape.attention has " + std::to_string(attention.size()) +
            " entries, expected n_layers = " + std::to_string(n_layers));
  }
  if (n_attention_layers() == 0) invalid("shape has no attention layer");
  if (n_kv_heads < 1 || n_kv_heads > 65536)
    invalid("shape.n_kv_heads must be in 1..65536, got " + std::to_string(n_kv_heads));
  if (head_dim < 1 || head_dim > 65536)
    invalid("shape.head_dim must be in 1..65536, got " + std::to_string(head_dim));
}

double KVSizeStats::entropy_savings() const noexcept {
  return fixed_bytes == 0
             ? 0.0
             : 1.0 - static_cast<double>(compressed_bytes) / static_cast<double>(fixed_bytes);
}

double KVSizeStats::bits_per_element() const noexcept {
  return quantized_elements == 0 ? 0.0
                                 : 8.0 * static_cast<double>(compressed_bytes) /
                                       static_cast<double>(quantized_elements);
}

KVSizeStats& KVSizeStats::operator+=(const KVSizeStats& o) {
  const double bits_sum = assigned_avg_bits * static_cast<double>(n_elements) +
                          o.assigned_avg_bits * static_cast<double>(o.n_elements);
  // Token counts describe the same tokens when K and V (or layers) are summed: keep the max.
  n_tokens = n_tokens > o.n_tokens ? n_tokens : o.n_tokens;
  residual_tokens = residual_tokens > o.residual_tokens ? residual_tokens : o.residual_tokens;
  n_elements += o.n_elements;
  quantized_elements += o.quantized_elements;
  compressed_bytes += o.compressed_bytes;
  estimated_bytes += o.estimated_bytes;
  fixed_bytes += o.fixed_bytes;
  fp16_bytes += o.fp16_bytes;
  memory_bytes += o.memory_bytes;
  assigned_avg_bits = n_elements == 0 ? 0.0 : bits_sum / static_cast<double>(n_elements);
  return *this;
}

}  // namespace cachegen
