// encode_kv_array: a KV array and `cachegen encode`'s options -> .cgkv bytes (returned or
// streamed).
#include "cachegen/encode.h"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "cachegen/container.h"
#include "cachegen/quality_levels.h"
#include "cachegen/runtime.h"
#include "cachegen/transform.h"
#include "core/parallel.h"
#include "quant/kernels.h"

namespace cachegen {
namespace {

size_t kv_dtype_size(KVDType t) {
  return t == KVDType::f32 ? 4 : 2;
}

RopeParams rope_params(const KVEncodeOptions& o) {
  RopeParams rope;
  rope.freq_base = o.rope_base;
  rope.freq_scale = o.rope_scale;
  rope.n_rot = o.rope_dims;
  rope.neox = o.rope_neox;
  return rope;
}

// The quality level's configuration with no model (recomputed layers are stored).
KVCacheConfig level_config(const KVEncodeOptions& o, const ModelShape& shape) {
  const std::optional<QualityLevel> level = find_quality_level(o.level);
  if (!level || *level == QualityLevel::lossless) {
    throw Error(ErrorCode::invalid_argument,
                "options.level must be " + quality_level_names() + " (got '" + o.level + "')");
  }
  const RopeParams rope = rope_params(o);
  return quality_level_config_stored(*level, shape, o.rope_base > 0 ? &rope : nullptr);
}

KVCacheConfig quantized_config(const KVEncodeOptions& o, const ModelShape& shape) {
  KVCacheConfig cfg;
  if (!o.level.empty()) {
    cfg = level_config(o, shape);
  } else {
    cfg.base_bits = o.bits;
    cfg.layer_groups = o.layer_groups;
    cfg.group_size = o.group_size;
    cfg.block_tokens = o.chunk_tokens ? o.chunk_tokens : default_chunk_tokens(false);
  }
  if (o.params == "reference")
    cfg.params = ParamMode::reference;
  else if (o.params != "compact")
    throw Error(ErrorCode::invalid_argument, "options.params must be compact or reference");
  cfg.size_estimate = false;  // the file does not hold it
  return cfg;
}

size_t lossless_chunk_tokens(const KVEncodeOptions& o, const KVArrayView& kv) {
  return o.chunk_tokens ? o.chunk_tokens
                        : default_chunk_tokens(true, kv.layers.size() * 2 * kv.n_kv_heads *
                                                         kv.head_dim * sizeof(Half));
}

// Where the file goes: returned whole (ToMemory) or streamed (ToStream), the writers' two forms
// behind one call each.
struct ToMemory {
  std::vector<uint8_t> file;
  uint64_t cache(const KVCache& cache, std::span<const CgkvBlob> blobs) {
    return keep(write_cgkv(cache, blobs));
  }
  uint64_t lossless(const ModelShape& shape, std::span<const Half> kv, size_t n_tokens,
                    size_t chunk_tokens, std::span<const CgkvBlob> blobs) {
    return keep(write_cgkv_lossless(shape, kv, n_tokens, chunk_tokens, blobs));
  }
  uint64_t keep(std::vector<uint8_t> whole) {
    file = std::move(whole);
    return file.size();
  }
};

struct ToStream {
  const CgkvWriteAt& out;
  uint64_t cache(const KVCache& cache, std::span<const CgkvBlob> blobs) {
    return write_cgkv(out, cache, blobs);
  }
  uint64_t lossless(const ModelShape& shape, std::span<const Half> kv, size_t n_tokens,
                    size_t chunk_tokens, std::span<const CgkvBlob> blobs) {
    return write_cgkv_lossless(out, shape, kv, n_tokens, chunk_tokens, blobs);
  }
  uint64_t keep(const std::vector<uint8_t>& whole) {  // a file made whole (transform codec)
    out(0, whole);
    return whole.size();
  }
};

template <typename To>
uint64_t encode_lossless(To& to, const KVArrayView& kv, const ModelShape& shape,
                         const KVEncodeOptions& o, std::span<const CgkvBlob> blobs) {
  if (kv.dtype != KVDType::f16)
    throw Error(ErrorCode::invalid_argument, "options.lossless needs a float16 array");
  const size_t layer = 2 * kv.n_tokens * kv.n_kv_heads * kv.head_dim;
  const Half* first = static_cast<const Half*>(kv.layers[0]);
  // One contiguous array needs no copy; separate layers are gathered.
  bool contiguous = true;
  for (size_t l = 1; l < kv.layers.size(); ++l)
    contiguous = contiguous && kv.layers[l] == first + l * layer;
  if (contiguous) {
    return to.lossless(shape, {first, layer * kv.layers.size()}, kv.n_tokens,
                       lossless_chunk_tokens(o, kv), blobs);
  }
  std::vector<Half> all(layer * kv.layers.size());
  for (size_t l = 0; l < kv.layers.size(); ++l) {
    if (layer) std::memcpy(all.data() + l * layer, kv.layers[l], layer * sizeof(Half));
  }
  return to.lossless(shape, all, kv.n_tokens, lossless_chunk_tokens(o, kv), blobs);
}

// A transform file (codec 2) with the options' profile: the array as fp32, every layer stored
// (an array carries no token ids to recompute from).
std::vector<uint8_t> encode_transform(const KVArrayView& kv, const ModelShape& shape,
                                      const KVEncodeOptions& o, std::span<const CgkvBlob> blobs) {
  if (o.is_lossless() || o.rope_base != 0) {
    throw Error(ErrorCode::invalid_argument,
                "options.profile codes lossy transform files with the profile's RoPE: not with "
                "lossless or rope options");
  }
  TransformEncoding enc;
  enc.profile = o.profile;
  enc.chunk_tokens = o.chunk_tokens ? o.chunk_tokens : default_chunk_tokens(false);
  enc.scale = o.scale;
  enc.bits_per_element = o.bits_per_element;
  enc.max_kl = o.max_kl;
  if (o.scale <= 0 && o.bits_per_element <= 0 && o.max_kl <= 0) {
    const std::optional<QualityLevel> level = find_quality_level(o.level);
    enc.scale = level ? o.profile->scale_of(*level) : 0.0f;
    if (enc.scale <= 0) {
      throw Error(ErrorCode::invalid_argument,
                  "options.profile needs options.level (a level the profile calibrated: high, "
                  "medium or low), options.bits_per_element or options.max_kl");
    }
  }
  const size_t n = kv.n_tokens * kv.n_kv_heads * kv.head_dim;  // one K or V plane
  std::vector<float> x(kv.layers.size() * 2 * n);
  const detail::QuantKernels& k = detail::quant_kernels();  // the widening kernels
  for (size_t l = 0; l < kv.layers.size(); ++l) {
    float* dst = x.data() + l * 2 * n;
    if (kv.dtype == KVDType::f32) {
      if (n) std::memcpy(dst, kv.layers[l], 2 * n * sizeof(float));
    } else {
      (kv.dtype == KVDType::f16 ? k.f16_to_f32 : k.bf16_to_f32)(
          static_cast<const uint16_t*>(kv.layers[l]), dst, 2 * n);
    }
  }
  return write_cgkv_transform(shape, x, kv.n_tokens, enc, blobs);
}

}  // namespace

ModelShape kv_array_model_shape(std::span<const size_t> s, ErrorCode code,
                                const std::string& what) {
  if (s.size() != 5 || s[1] != 2)
    throw Error(code, what + ": expected shape [n_layers, 2, n_tokens, n_kv_heads, head_dim]");
  const struct {
    size_t axis, max;
    const char* name;
  } limits[] = {{0, 4096, "n_layers"},
                {2, size_t{1} << 40, "n_tokens"},
                {3, 65536, "n_kv_heads"},
                {4, 65536, "head_dim"}};
  for (const auto& l : limits) {
    if (s[l.axis] > l.max || (l.axis != 2 && s[l.axis] == 0)) {
      throw Error(code, what + ": shape[" + std::to_string(l.axis) + "] (" + l.name +
                            ") = " + std::to_string(s[l.axis]) + " is outside " +
                            (l.axis == 2 ? "0" : "1") + ".." + std::to_string(l.max));
    }
  }
  ModelShape shape;
  shape.architecture = "npy";
  shape.n_layers = static_cast<int>(s[0]);
  shape.n_kv_heads = static_cast<int>(s[3]);
  shape.head_dim = static_cast<int>(s[4]);
  shape.validate();
  return shape;
}

namespace {

template <typename To>
uint64_t encode_to(To& to, const KVArrayView& kv, const ModelShape& shape, const KVEncodeOptions& o,
                   std::span<const CgkvBlob> blobs,
                   const std::function<void(size_t, size_t)>& progress) {
  if (kv.layers.size() != static_cast<size_t>(shape.n_layers) ||
      kv.n_kv_heads != static_cast<size_t>(shape.n_kv_heads) ||
      kv.head_dim != static_cast<size_t>(shape.head_dim)) {
    throw Error(ErrorCode::invalid_argument, "KV array view does not match its model shape");
  }
  for (const void* p : kv.layers) {
    if (p == nullptr && kv.n_tokens != 0)
      throw Error(ErrorCode::invalid_argument, "KV array view has a NULL layer");
  }
  if (o.rope_base != 0 || o.rope_scale != 1) {  // NaN included: it compares unequal
    const std::string problem = rope_params(o).problem();
    if (!problem.empty())
      throw Error(ErrorCode::invalid_argument, "options.rope_base/options.rope_scale: " + problem);
  }
  if (o.profile) return to.keep(encode_transform(kv, shape, o, blobs));
  if (o.is_lossless()) return encode_lossless(to, kv, shape, o, blobs);
  const KVCacheConfig cfg = quantized_config(o, shape);
  KVCache cache = KVCacheBuilder::for_model(shape, cfg);
  const size_t T = kv.n_tokens, H = kv.n_kv_heads, D = kv.head_dim;
  const size_t plane = T * H * D * kv_dtype_size(kv.dtype);
  const size_t total = cache.layers.size() * T;
  std::mutex progress_mutex;
  size_t done = 0;
  // Layers are independent caches: each is filled on one of the pool's threads (a chunk's
  // heads, coded inside, then stay on that thread). Where the layers do not split evenly over
  // the threads (stories260K: 5 layers on 2), the last L mod threads of them come after the
  // others, one at a time, a block per thread at a time (LayerKVCache::append codes several
  // whole blocks on the pool's threads; a call's working set stays a few blocks). The bytes do
  // not depend on it.
  const size_t L = cache.layers.size();
  const size_t threads = std::min(thread_count(), L);
  const size_t by_layer = threads > 1 && T / cfg.block_tokens >= threads ? L - L % threads : L;
  const auto fill = [&](size_t l, size_t step) {
    // `step` tokens at a time: progress moves, the result is the same (results do not depend
    // on how tokens arrive).
    for (size_t t = 0; t < T; t += step) {
      const size_t n = std::min(step, T - t);
      const uint8_t* base =
          static_cast<const uint8_t*>(kv.layers[l]) + t * H * D * kv_dtype_size(kv.dtype);
      cache.layers[l].append({base, kv.dtype, H, n, D, true},
                             {base + plane, kv.dtype, H, n, D, true});
      if (progress) {
        const std::lock_guard<std::mutex> lock(progress_mutex);
        done += n;
        progress(done, total);
      }
    }
  };
  detail::parallel_for(by_layer, [&](size_t l) { fill(l, cfg.block_tokens); });
  for (size_t l = by_layer; l < L; ++l) fill(l, threads * cfg.block_tokens);
  return to.cache(cache, blobs);
}

}  // namespace

std::vector<uint8_t> encode_kv_array(const KVArrayView& kv, const ModelShape& shape,
                                     const KVEncodeOptions& o, std::span<const CgkvBlob> blobs,
                                     const std::function<void(size_t, size_t)>& progress) {
  ToMemory to;
  encode_to(to, kv, shape, o, blobs, progress);
  return std::move(to.file);
}

uint64_t encode_kv_array(const CgkvWriteAt& out, const KVArrayView& kv, const ModelShape& shape,
                         const KVEncodeOptions& o, std::span<const CgkvBlob> blobs,
                         const std::function<void(size_t, size_t)>& progress) {
  ToStream to{out};
  return encode_to(to, kv, shape, o, blobs, progress);
}

}  // namespace cachegen
