// The quality levels: settings chosen from the rate–quality table in docs/QUALITY_LEVELS.md.
#include <string>

#include "cachegen/error.h"
#include "cachegen/kv_cache.h"
#include "cachegen/transform.h"

namespace cachegen {

const char* quality_level_name(QualityLevel level) {
  switch (level) {
    case QualityLevel::lossless:
      return "lossless";
    case QualityLevel::high:
      return "high";
    case QualityLevel::medium:
      return "medium";
    case QualityLevel::low:
      return "low";
  }
  return "unknown";
}

QualityLevelSpec quality_level_spec(QualityLevel level, int n_attention_layers) {
  if (n_attention_layers < 1) {
    throw Error(ErrorCode::invalid_argument, "quality_level_spec: n_attention_layers " +
                                                 std::to_string(n_attention_layers) + " < 1");
  }
  const size_t n = static_cast<size_t>(n_attention_layers);
  QualityLevelSpec q;
  q.level = level;
  // Per layer, layer 0 first (0 = recomputed from the token ids); the last layer's V is the
  // most sensitive V (2-bit V there costs 5x the KL of layers 1-3), layers 1 and 4 the most
  // sensitive K once RoPE is undone. Deeper models repeat the middle entry.
  const auto fill = [&](std::vector<int> k, std::vector<int> v) {
    const auto stretch = [&](const std::vector<int>& five) {
      std::vector<int> out(n, five[2]);
      out[0] = five[0];
      if (n > 1) out[1] = five[1];
      if (n > 2) out[n - 1] = five[4];
      if (n > 3) out[n - 2] = five[3];
      return out;
    };
    q.key_bits = stretch(k);
    q.value_bits = stretch(v);
  };
  switch (level) {
    case QualityLevel::lossless:
      fill({16, 16, 16, 16, 16}, {16, 16, 16, 16, 16});
      return q;
    case QualityLevel::high:
      fill({0, 6, 6, 6, 6}, {0, 5, 5, 5, 6});
      break;
    case QualityLevel::medium:
      fill({0, 3, 2, 2, 3}, {0, 2, 2, 2, 2});
      break;
    case QualityLevel::low:
      fill({0, 2, 2, 2, 2}, {0, 2, 2, 2, 2});
      break;
  }
  // Groups of 256 tokens: about 0.1 bit/element less than 128 at the same KL (measured).
  q.key_group_size = q.value_group_size = 256;
  q.key_pre_rope = true;
  return q;
}

KVCacheConfig quality_level_config(QualityLevel level, const ModelShape& shape,
                                   const RopeParams& rope) {
  if (level == QualityLevel::lossless) {
    throw Error(ErrorCode::invalid_argument,
                "quality_level_config: the lossless level stores exact fp16 (write_cgkv_lossless), "
                "not a quantized cache");
  }
  shape.validate();
  rope.validate(static_cast<size_t>(shape.head_dim));
  const QualityLevelSpec q = quality_level_spec(level, shape.n_attention_layers());
  KVCacheConfig c;
  c.layer_bits = q.key_bits;  // 0 = recomputed from the token ids (layer 0)
  c.value_layer_bits = q.value_bits;
  c.group_size = q.key_group_size;  // K and V share one group size in the cache (256 both)
  c.block_tokens = c.group_size;
  c.key_pre_rope = q.key_pre_rope;
  c.rope = rope;
  c.validate();
  return c;
}

KVCacheConfig quality_level_config_stored(QualityLevel level, const ModelShape& shape,
                                          const RopeParams* rope) {
  KVCacheConfig c = quality_level_config(level, shape, rope ? *rope : RopeParams{});
  c.key_pre_rope = rope != nullptr;
  for (std::vector<int>* bits : {&c.layer_bits, &c.value_layer_bits}) {
    for (size_t i = 0; i < bits->size(); ++i) {
      if ((*bits)[i] != 0) continue;
      size_t j = i + 1;
      while (j < bits->size() && (*bits)[j] == 0) ++j;
      (*bits)[i] = j < bits->size() ? (*bits)[j] : 8;
    }
  }
  c.validate();
  return c;
}

}  // namespace cachegen
