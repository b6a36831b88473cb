// The quality levels (cachegen/quality_levels.h): the table's lookups and its settings
// stretched to a model's depth.
#include "cachegen/quality_levels.h"

#include <string>

#include "cachegen/error.h"

namespace cachegen {

const QualityLevelRow& quality_level_row(QualityLevel level) {
  for (const QualityLevelRow& row : kQualityLevels)
    if (row.level == level) return row;
  throw Error(ErrorCode::invalid_argument,
              "quality level " + std::to_string(static_cast<int>(level)) + " does not exist");
}

const char* quality_level_name(QualityLevel level) {
  for (const QualityLevelRow& row : kQualityLevels)
    if (row.level == level) return row.name;
  return "unknown";
}

std::optional<QualityLevel> find_quality_level(std::string_view name) {
  for (const QualityLevelRow& row : kQualityLevels)
    if (name == row.name) return row.level;
  return std::nullopt;
}

std::string quality_level_names() {
  std::string names;
  for (size_t i = 0; i < kQualityLevels.size(); ++i) {
    if (i > 0) names += i + 1 == kQualityLevels.size() ? " or " : ", ";
    names += kQualityLevels[i].name;
  }
  return names;
}

QualityLevel parse_quality_level(std::string_view name) {
  if (const std::optional<QualityLevel> level = find_quality_level(name)) return *level;
  throw Error(ErrorCode::invalid_argument,
              "level must be " + quality_level_names() + ", not '" + std::string(name) + "'");
}

size_t default_chunk_tokens(bool lossless) {
  return quality_level_row(lossless ? QualityLevel::lossless : QualityLevel::high).chunk_tokens;
}

size_t default_chunk_tokens(bool lossless, size_t token_bytes) {
  size_t tokens = default_chunk_tokens(lossless);
  if (!lossless || token_bytes == 0) return tokens;
  while (tokens > 64 && tokens > kLosslessChunkBytes / token_bytes) tokens /= 2;
  return tokens;
}

QualityLevelSpec quality_level_spec(QualityLevel level, int n_attention_layers) {
  if (n_attention_layers < 1) {
    throw Error(ErrorCode::invalid_argument, "quality_level_spec: n_attention_layers " +
                                                 std::to_string(n_attention_layers) + " < 1");
  }
  const QualityLevelRow& row = quality_level_row(level);
  const size_t n = static_cast<size_t>(n_attention_layers);
  const auto stretch = [n](const std::array<int8_t, 5>& five) {
    std::vector<int> out(n, five[2]);
    out[0] = five[0];
    if (n > 1) out[1] = five[1];
    if (n > 2) out[n - 1] = five[4];
    if (n > 3) out[n - 2] = five[3];
    return out;
  };
  QualityLevelSpec q;
  q.level = level;
  q.key_bits = stretch(row.key_bits);
  q.value_bits = stretch(row.value_bits);
  if (row.group_tokens != 0) q.key_group_size = q.value_group_size = row.group_tokens;
  q.key_pre_rope = row.key_pre_rope;
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
