// cachegen: the quality levels — one home for what a level is, its name, and every setting it
// fixes (zstd's clevels.h habit: one table, read by the CLI, the llama adapter, the C API,
// Python and the eval harness alike).
//
// In cachegen "level" means a QualityLevel and nothing else: a named point on the rate–quality
// curve measured in docs/QUALITY_LEVELS.md. The settings a snapshot is written with are a
// llama::SnapshotEncoding (cachegen/llama.h), a cache's are a KVCacheConfig; zstd's own
// compression level appears only as `zstd_level` of the lossless tier's optional zstd pass.
//
// Thread safety: everything here is a pure function of its arguments.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cachegen/codec.h"
#include "cachegen/kv_cache.h"
#include "cachegen/transform.h"

namespace cachegen {

enum class QualityLevel : uint8_t {
  lossless = 0,  // fp16 restored bit for bit (no quantization)
  high = 1,      // mean KL <= llama.cpp q8_0 KV's on the reference measurement
  medium = 2,    // mean KL <= llama.cpp q4_0 KV's
  low = 3,       // smallest size that still keeps top-1 agreement around 90%
};

// One row per level. Bits are given for five layer slots — layer 0, layer 1, the middle layers,
// layer n-2, layer n-1 — and stretched to a model's depth by quality_level_spec (16 = stored
// as fp16; 0 = recomputed from the token ids, see docs/QUALITY_LEVELS.md).
struct QualityLevelRow {
  QualityLevel level;
  const char* name;
  std::array<int8_t, 5> key_bits, value_bits;
  uint16_t group_tokens;  // quantization group (tokens); 0 for lossless
  bool key_pre_rope;      // keys quantized with RoPE undone (re-applied on restore)
  uint16_t chunk_tokens;  // default tokens per .cgkv chunk
};

// The table. Measured on both shared models (docs/QUALITY_LEVELS.md): the last layer's V is the
// most sensitive V (2-bit V there costs 5x the KL of layers 1-3), layers 1 and n-1 the most
// sensitive K once RoPE is undone; groups of 256 tokens code about 0.1 bit/element smaller
// than 128 at the same KL; lossless chunks of 1024 tokens find more repeated rows.
inline constexpr std::array<QualityLevelRow, 4> kQualityLevels = {{
    {QualityLevel::lossless,
     "lossless",
     {16, 16, 16, 16, 16},
     {16, 16, 16, 16, 16},
     0,
     false,
     1024},
    {QualityLevel::high, "high", {0, 6, 6, 6, 6}, {0, 5, 5, 5, 6}, 256, true, 256},
    {QualityLevel::medium, "medium", {0, 3, 2, 2, 3}, {0, 2, 2, 2, 2}, 256, true, 256},
    {QualityLevel::low, "low", {0, 2, 2, 2, 2}, {0, 2, 2, 2, 2}, 256, true, 256},
}};

const QualityLevelRow& quality_level_row(QualityLevel level);
const char* quality_level_name(QualityLevel level);
// The level named `name` ("lossless" | "high" | "medium" | "low"), or nullopt.
std::optional<QualityLevel> find_quality_level(std::string_view name);
// The same; Error(invalid_argument) "level must be <names>, not '<name>'" otherwise.
QualityLevel parse_quality_level(std::string_view name);
// "lossless, high, medium or low": the names for messages.
std::string quality_level_names();
// Tokens per .cgkv chunk when the caller gives none (1024 lossless, 256 quantized levels and
// explicit bits).
size_t default_chunk_tokens(bool lossless);
// The same for a model whose token (K and V of every attention layer, fp16) takes token_bytes:
// a reader decodes a lossless chunk whole (its rows refer to earlier ones), so lossless chunks
// are halved from 1024 tokens while they would hold more than kLosslessChunkBytes, down to 64
// (a 7B-shaped model's 128 KiB tokens: 256 a chunk). Quantized chunks stay at 256.
inline constexpr size_t kLosslessChunkBytes = size_t{32} << 20;
size_t default_chunk_tokens(bool lossless, size_t token_bytes);

// Everything a level fixes for a model with n_attention_layers layers: the table's row with the
// bits stretched to the model's depth (deeper models repeat the middle slot).
struct QualityLevelSpec {
  QualityLevel level = QualityLevel::lossless;
  std::vector<int> key_bits, value_bits;
  size_t key_group_size = 32, value_group_size = 32;
  bool key_pre_rope = false;  // quantize keys with RoPE undone (re-applied on restore)
  EncodeOptions encode;       // parameter precision
};
QualityLevelSpec quality_level_spec(QualityLevel level, int n_attention_layers);

// A quantized level as the cache configuration that realises it: the level's per-layer K/V
// bits with 0 = recomputed (layer 0), block_tokens = group size, keys pre-RoPE with `rope`
// (positions from rope_position_offset, 0 here). The lossless level is not a quantized
// configuration: Error(invalid_argument) (use write_cgkv_lossless).
KVCacheConfig quality_level_config(QualityLevel level, const ModelShape& shape,
                                   const RopeParams& rope);
// The same level for callers that will not have the model at restore time (e.g. .npy input):
// layers the level recomputes are stored instead, with the bits of the next stored layer; keys
// go pre-RoPE only when `rope` is given (else they are quantized as they come).
KVCacheConfig quality_level_config_stored(QualityLevel level, const ModelShape& shape,
                                          const RopeParams* rope);

}  // namespace cachegen
