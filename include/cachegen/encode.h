// cachegen: a whole KV tensor to .cgkv bytes, with the options of `cachegen encode`.
//
// One home for "KV array + options -> .cgkv": the CLI, the C API (cachegen_encode) and the
// Python package (cachegen.encode) all call encode_kv_array, so the same array and options give
// the same bytes everywhere.
//
// Thread safety: encode_kv_array holds no state; any number of threads may call it at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cachegen/container.h"
#include "cachegen/error.h"
#include "cachegen/kv_cache.h"
#include "cachegen/profile.h"

namespace cachegen {

// The options of `cachegen encode`, with its defaults.
struct KVEncodeOptions {
  int bits = 4;            // bits of the shallowest layer group (1..8)
  int layer_groups = 3;    // layer groups of the bit schedule
  size_t group_size = 32;  // tokens per quantization group
  // Tokens per chunk (a multiple of group_size); 0: 256, or for lossless 1024 (longer chunks
  // find more repeated rows), fewer for models whose 1,024 tokens exceed 32 MiB
  // (default_chunk_tokens(true, token bytes)).
  size_t chunk_tokens = 0;
  // "" (use the fields above) or a quality level: lossless | high | medium | low, which replaces
  // bits, layer_groups, group_size and chunk_tokens (docs/QUALITY_LEVELS.md).
  std::string level;
  std::string params = "compact";  // compact | reference (the bit-exact reference quantizer)
  bool lossless = false;  // exact fp16 values (FORMAT.md, lossless method 2); fp16 input only
  // rope_base > 0: keys quantized pre-RoPE with these parameters (with a level).
  float rope_base = 0;
  int rope_dims = 0;  // rotated dims per head; 0 = head_dim
  float rope_scale = 1;
  bool rope_neox = false;

  // A calibration profile (cachegen/profile.h): a transform file (codec 2) at `level`'s
  // calibrated scale, or at scale / bits_per_element / max_kl when one is > 0 (at most one);
  // keys pre-RoPE and sinks as the profile says. Replaces bits, groups and the RoPE options.
  std::shared_ptr<const KvProfile> profile;
  double scale = 0, bits_per_element = 0, max_kl = 0;

  bool is_lossless() const { return lossless || level == "lossless"; }
};

// A KV tensor in memory: per model layer, [2, n_tokens, n_kv_heads, head_dim] (K then V,
// token-major, C order) at layers[l]. For one array [n_layers, 2, n_tokens, n_kv_heads,
// head_dim], layers[l] = data + l * 2 * n_tokens * n_kv_heads * head_dim * element size.
struct KVArrayView {
  std::vector<const void*> layers;
  KVDType dtype = KVDType::f16;
  size_t n_tokens = 0, n_kv_heads = 0, head_dim = 0;
};

// The model shape of a KV array of shape `shape` ([n_layers, 2, n_tokens, n_kv_heads,
// head_dim]), checked axis by axis (n_layers 1..4096, n_tokens 0..2^40, heads and head_dim
// 1..65536). A shape that breaks a rule throws Error(code) naming `what` and the axis.
ModelShape kv_array_model_shape(std::span<const size_t> shape, ErrorCode code,
                                const std::string& what);

// Encodes `kv` (shape `shape`, from kv_array_model_shape) into .cgkv bytes, with `blobs` stored
// alongside (e.g. token_ids_blob(tokens), which the context store checks on load). Errors:
// invalid_argument naming the option ("options.level", "config.base_bits", ...) that is out of
// range or does not fit the array. `progress`, when set, is called with (tokens done, total)
// summed over layers as the encoder advances: layers are encoded on cachegen::thread_count()
// threads, so it may be called from any of them, one call at a time, `done` increasing.
std::vector<uint8_t> encode_kv_array(
    const KVArrayView& kv, const ModelShape& shape, const KVEncodeOptions& options,
    std::span<const CgkvBlob> blobs = {},
    const std::function<void(size_t done, size_t total)>& progress = {});
// The same file streamed to `out` as it is written (the CLI's output file): a quantized file
// from the layers' coded blocks, a lossless one wave by wave, so the file is never held whole
// (a transform file is, and goes out in one call). Returns its size. Errors as above, all
// thrown before out's first call, and out's own.
uint64_t encode_kv_array(const CgkvWriteAt& out, const KVArrayView& kv, const ModelShape& shape,
                         const KVEncodeOptions& options, std::span<const CgkvBlob> blobs = {},
                         const std::function<void(size_t done, size_t total)>& progress = {});

}  // namespace cachegen
