// cachegen: the compressed KV cache of a model: configuration, model shape, one cache per
// attention layer, and the builder/factory that make them (the reference module's names).
//
// A layer cache takes K and V blocks of [kv_heads, tokens, head_dim] (fp16, bf16 or fp32),
// keeps tokens in an fp16 residual buffer until a whole quantization group exists, quantizes
// each completed group (per head, per channel min/max), and entropy-codes every `block_tokens`
// tokens of codes into one compressed block (a codec batch over heads, cachegen/codec.h).
// Groups and blocks are cut at fixed token indices, so the codes, the block bytes and the
// reconstruction do not depend on how tokens arrived (one call, uneven calls, one token at a
// time all give identical results).
//
// Thread safety: const member functions (fetch, stats, n_tokens, ...) never modify the object,
// so any number of threads may read a cache that no thread is appending to or trimming.
// append/trim/seal need exclusive access.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cachegen/codec.h"
#include "cachegen/half.h"
#include "cachegen/quant.h"
#include "cachegen/transform.h"

namespace cachegen {

// How group parameters (scale, zero) are produced and stored.
enum class ParamMode : uint8_t {
  // Rounded to the codec's compact grid before quantizing (codes and reconstruction agree
  // with the stored parameters; about 0.1-0.3 bits per element less than fp16 parameters).
  compact = 0,
  // The reference quantizer's exact fp32 parameters (bit-exact with quantize_to_codes; the
  // codec stores them losslessly, fp16 where exact, else fp32).
  reference = 1,
};

struct KVCacheConfig {
  int base_bits = 4;          // bits of the shallowest layer group, 1..8
  int layer_groups = 3;       // groups of the layer-wise schedule (layer_group_bits), >= 1
  size_t group_size = 32;     // tokens per quantization group, 1..kMaxGroupSize
  size_t block_tokens = 256;  // tokens per entropy-coded block: a multiple of group_size
  bool use_delta = true;      // let the coder use token-delta models (and the estimate)
  // Let a block code every channel with one model where that is smaller (codec batch layout 2,
  // which .cgkv files of version 6 and later hold): off writes layouts 0 and 1 only.
  bool one_model = true;
  bool per_channel = true;  // the reference estimate per channel (else pooled)
  // Compute the reference estimate of every block (stats().estimated_bytes; a tenth of the
  // encoding time): off where only the bytes are wanted (encode_kv_array), the estimates 0.
  bool size_estimate = true;
  ParamMode params = ParamMode::compact;
  // Optional per-attention-layer bit widths for K (and V unless value_layer_bits is set); when
  // set they are used as given instead of the schedule. Sizes must equal the number of
  // attention layers. 0 = the layer is *recomputed, not stored* (its K and V both 0): the
  // layer's cache counts tokens but keeps no data; whoever restores it rebuilds its K/V from
  // the token ids with the model (e.g. layer 0, whose K/V depend only on the token).
  std::vector<int> layer_bits;
  std::vector<int> value_layer_bits;
  // Keys quantized with RoPE undone ("pre-RoPE": 4-12x lower KL at the same size, measured in
  // docs/QUALITY_LEVELS.md): append un-rotates the keys of token i at position
  // rope_position_offset + i (i counted from the cache's first token, trims included), the
  // cache holds pre-RoPE keys, fetch_keys re-rotates them. Un-rotation runs in fp32 and the
  // result is held as fp16 until quantized, so a residual key comes back within fp16 rounding
  // of what was appended (not bit for bit).
  bool key_pre_rope = false;
  RopeParams rope;                   // used when key_pre_rope
  int32_t rope_position_offset = 0;  // position of token 0, >= 0

  // Throws Error(invalid_argument) naming the bad field.
  void validate() const;
  // Whether attention layer i (0-based over attention layers) is recomputed (layer_bits[i] 0).
  bool recomputed(size_t i) const { return i < layer_bits.size() && layer_bits[i] == 0; }
};

// What a cache needs to know of a model.
struct ModelShape {
  std::string architecture;     // e.g. "llama" (informational)
  int n_layers = 0;             // transformer blocks
  std::vector<bool> attention;  // per layer: has a KV cache; empty = every layer
  int n_kv_heads = 0;
  int head_dim = 0;

  bool has_attention(int layer) const;
  int n_attention_layers() const;
  void validate() const;  // Error(invalid_argument) naming the bad field

  // Reads the shape from a GGUF file's metadata ({arch}.block_count,
  // {arch}.attention.head_count[_kv] (a per-layer array is allowed: 0 = no attention),
  // {arch}.attention.key_length or embedding_length / head_count). Hostile files give
  // Error(corrupt_input / truncated_input / unsupported_version); only the metadata is read.
  static ModelShape from_gguf(const std::string& path);
};

// xxHash64 (seed 0) of a GGUF file's header and metadata key/values (everything before the
// tensor infos), read without llama.cpp: a cheap identity for a model file. Not the same value
// as llama::ModelIdentity's hash (which .cgkv files written from llama.cpp states record, and
// which also covers the tensor infos): compare like with like.
uint64_t gguf_metadata_hash(const std::string& path);

enum class KVDType : uint8_t { f32 = 0, f16 = 1, bf16 = 2 };

// A read-only view of one K or V block, row-major: [n_kv_heads, n_tokens, head_dim] (the
// reference's layout), or [n_tokens, n_kv_heads, head_dim] when token_major (llama.cpp's and
// the .npy files' layout).
struct KVBlockView {
  const void* data = nullptr;
  KVDType dtype = KVDType::f16;
  size_t n_kv_heads = 0, n_tokens = 0, head_dim = 0;
  bool token_major = false;
};

// Sizes of one tensor kind (K, V) or both, in bytes.
struct KVSizeStats {
  size_t n_tokens = 0;
  size_t n_elements = 0;          // tokens * heads * head_dim
  size_t quantized_elements = 0;  // the elements of quantized tokens (all but the residual)
  size_t compressed_bytes = 0;    // real bitstream bytes (blocks, plus the pending codes coded now)
  size_t estimated_bytes = 0;     // the reference's entropy estimate of the same codes
  size_t fixed_bytes = 0;         // fixed-width packing (codes + fp16 scale/zero)
  size_t fp16_bytes = 0;          // 2 bytes per element
  size_t residual_tokens = 0;    // tokens still in the fp16 residual buffer (not in the sizes above
                                 // except fp16_bytes and memory)
  size_t memory_bytes = 0;       // bytes actually held: blocks, pending codes and params, residual
  double assigned_avg_bits = 0;  // bit width averaged over elements

  // 1 - compressed / fixed: what entropy coding saved against fixed-width packing.
  double entropy_savings() const noexcept;
  // compressed bits per quantized element (params and models included).
  double bits_per_element() const noexcept;
  KVSizeStats& operator+=(const KVSizeStats& o);
};

struct LayerStats {
  KVSizeStats k, v, both;
};

// One compressed block of K or V: tokens [token_begin, token_begin + n_tokens), a codec batch
// over heads.
struct CompressedBlock {
  size_t token_begin = 0, n_tokens = 0;
  std::vector<uint8_t> bytes;
  size_t estimated_bytes = 0, fixed_bytes = 0;
};

// The cache of one attention layer.
class LayerKVCache {
 public:
  // n_kv_heads and head_dim may both be 0: the shape is then taken from the first append.
  LayerKVCache(size_t n_kv_heads, size_t head_dim, int key_bits, int value_bits,
               const KVCacheConfig& config);

  // Appends tokens: k and v both [n_kv_heads, T, head_dim] with this cache's heads and
  // head_dim (T may be 0, and may differ from call to call but must match between k and v).
  // Values must be finite. Strong guarantee: on error nothing changes.
  void append(const KVBlockView& k, const KVBlockView& v);
  // Drops the last n tokens (n <= n_tokens()). Tokens of a quantized group that survive the
  // trim go back to the residual buffer as their dequantized fp16 values.
  void trim(size_t n);

  size_t n_tokens() const noexcept { return n_tokens_; }
  size_t n_kv_heads() const noexcept { return heads_; }
  size_t head_dim() const noexcept { return dim_; }
  int key_bits() const noexcept { return bits_[0]; }  // 0 when recomputed
  int value_bits() const noexcept { return bits_[1]; }
  const KVCacheConfig& config() const noexcept { return config_; }
  // Recomputed, not stored (key_bits == value_bits == 0): append only counts tokens, fetch
  // throws invalid_argument, snapshot_blocks returns no blocks, the sizes are 0.
  bool recomputed() const noexcept { return bits_[0] == 0; }

  // fp16 [n_kv_heads, n_tokens, head_dim] for tokens [begin, end) (whole cache by default):
  // decoded blocks, dequantized pending groups, and the residual buffer as stored (keys
  // re-rotated when config().key_pre_rope).
  std::vector<Half> fetch_keys(size_t begin = 0, size_t end = SIZE_MAX) const;
  std::vector<Half> fetch_values(size_t begin = 0, size_t end = SIZE_MAX) const;

  LayerStats stats() const;

  // For the container: every token as compressed blocks of block_tokens tokens (the last may
  // be shorter), the pending groups and the residual tokens (quantized as a partial, padded
  // group) coded now. kind 0 = K, 1 = V (pre-RoPE keys when config().key_pre_rope). Does not
  // modify the cache.
  std::vector<CompressedBlock> snapshot_blocks(int kind) const;
  // The same in two parts, for writers that need not copy the sealed blocks: the sealed
  // blocks by reference (valid until the cache changes), then the pending and residual
  // tokens coded now as one block (n_tokens 0 when there are none).
  const std::vector<CompressedBlock>& sealed_blocks(int kind) const;
  CompressedBlock tail_block(int kind) const;

 private:
  struct PlaneState {
    std::vector<CompressedBlock> blocks;  // sealed, block_tokens each
    std::vector<CodeStream> pending;      // per head: completed groups not yet in a block
    std::vector<Half> residual;           // per head [heads][group_size][dim], first r rows used
  };
  void set_shape(size_t n_kv_heads, size_t head_dim);
  Half* residual_buffer(int kind);  // plane_[kind].residual, sized on first use
  // Quantizes `rows` rows (whole groups) of every head of `kind` into `pending` (a stream per
  // head): head h's row r at base + h * head_stride + r * row_stride.
  void quantize_groups(int kind, std::vector<CodeStream>& pending, const Half* base,
                       size_t head_stride, size_t row_stride, size_t rows) const;
  // One block each of K's and V's streams, coded, at token_begin.
  std::array<CompressedBlock, 2> code_blocks(const std::vector<CodeStream>& k,
                                             const std::vector<CodeStream>& v,
                                             size_t token_begin) const;
  void seal_blocks();  // the pending K and V rows as one block each
  std::vector<Half> fetch(int kind, size_t begin, size_t end) const;  // as stored (pre-RoPE)
  void rotate_keys(std::vector<Half>& x, size_t n_tokens, size_t first, bool inverse) const;
  KVSizeStats plane_stats(int kind) const;
  std::vector<CodeStream> quantize_residual(int kind) const;

  size_t heads_, dim_;
  int bits_[2];
  KVCacheConfig config_;
  size_t n_tokens_ = 0;
  size_t residual_rows_ = 0;  // tokens in the residual buffer (< group_size)
  size_t pending_rows_ = 0;   // tokens in pending groups (< block_tokens)
  PlaneState plane_[2];
};

// A whole model's cache: one LayerKVCache per attention layer.
struct KVCache {
  ModelShape shape;
  KVCacheConfig config;
  std::vector<int> layer_index;      // model layer of each cache
  std::vector<LayerKVCache> layers;  // one per attention layer

  size_t n_tokens() const noexcept { return layers.empty() ? 0 : layers[0].n_tokens(); }
  LayerStats stats() const;  // summed over layers
};

struct KVCacheBuilder {
  // One cache per attention layer; K/V bits from config.layer_bits / value_layer_bits when
  // given, else layer_group_bits(n_attention_layers, base_bits, layer_groups) counted over
  // attention layers only.
  static KVCache for_model(const ModelShape& shape, const KVCacheConfig& config);
};

struct KVCacheFactory {
  // One cache with uniform bits (config.base_bits), for callers managing layers themselves.
  static LayerKVCache create(const KVCacheConfig& config, size_t n_kv_heads, size_t head_dim);
  // The reference's form: the cache takes its heads and head_dim from its first append.
  static LayerKVCache create(const KVCacheConfig& config);
};

}  // namespace cachegen
