// Quality levels for llama.cpp snapshots: the model's RoPE and shape, SnapshotEncoding::quality,
// and rebuilding recomputed layers from the token ids at restore (docs/FORMAT.md, "llama.cpp state
// blobs"). Contracts: cachegen/llama.h.
#include <llama.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "cachegen/error.h"
#include "cachegen/llama.h"
#include "cachegen/quality_levels.h"
#include "llama/cgkv_blobs.h"
#include "llama/layer0_kv.h"

namespace cachegen::llama {
namespace {

[[noreturn]] void invalid(const std::string& why) {
  throw Error(ErrorCode::invalid_argument, "llama cgkv: " + why);
}
[[noreturn]] void corrupt(const std::string& why) {
  throw Error(ErrorCode::corrupt_input, "llama cgkv: " + why);
}

}  // namespace

RopeParams model_rope_params(const Model& model) {
  RopeParams r;
  const std::string arch = model.identity().architecture;
  char buf[64];
  if (llama_model_meta_val_str(model.get(), (arch + ".rope.freq_base").c_str(), buf, sizeof buf) >
      0) {
    r.freq_base = std::strtof(buf, nullptr);
  }
  if (llama_model_meta_val_str(model.get(), (arch + ".rope.dimension_count").c_str(), buf,
                               sizeof buf) > 0) {
    r.n_rot = std::atoi(buf);
  }
  r.neox = llama_model_rope_type(model.get()) == LLAMA_ROPE_TYPE_NEOX;
  const float scale = llama_model_rope_freq_scale_train(model.get());
  if (scale > 0) r.freq_scale = scale;
  return r;
}

ModelShape model_cache_shape(const Model& model) {
  const ModelIdentity& id = model.identity();
  ModelShape shape;
  shape.architecture = id.architecture;
  shape.n_layers = static_cast<int>(id.n_layer);
  shape.n_kv_heads = static_cast<int>(id.n_head_kv);
  shape.head_dim = static_cast<int>(id.head_dim);
  return shape;
}

SnapshotEncoding SnapshotEncoding::quality(QualityLevel level, const ModelShape& shape,
                                           const RopeParams& rope) {
  if (level == QualityLevel::lossless) return exact();
  SnapshotEncoding out;
  out.quantized = quality_level_config(level, shape, rope);
  return out;
}

namespace detail {

bool layer0_recompute_pays(size_t n_embd) {
  const double recompute_s = 2.0 * static_cast<double>(n_embd) / kLayer0Flops;
  const double transfer_s = 16.0 / 8.0 / kReferenceLinkBytesPerS;
  return recompute_s <= transfer_s;
}

}  // namespace detail

SnapshotEncoding SnapshotEncoding::quality(QualityLevel level, const Model& model) {
  SnapshotEncoding e = quality(level, model_cache_shape(model), model_rope_params(model));
  if (e.lossless) return e;
  // Layer 0 is recomputed only where restore can compute it from the weights and doing so is
  // cheaper than moving it exactly (else it is stored with layer 1's bits).
  const size_t n_embd = static_cast<size_t>(std::max(0, llama_model_n_embd(model.get())));
  if (!detail::Layer0Projector::supported(model, nullptr) ||
      !detail::layer0_recompute_pays(n_embd)) {
    detail::store_recomputed_layers(e.quantized);
  }
  return e;
}

SnapshotEncoding SnapshotEncoding::profiled(std::shared_ptr<const KvProfile> profile,
                                            const Model& model) {
  if (!profile) invalid("no profile");
  const ModelShape shape = model_cache_shape(model);
  SnapshotEncoding e;
  e.transform.emplace();
  e.transform->profile = std::move(profile);
  e.transform->chunk_tokens = default_chunk_tokens(false);
  const size_t n_embd = static_cast<size_t>(std::max(0, llama_model_n_embd(model.get())));
  if (detail::Layer0Projector::supported(model, nullptr) && detail::layer0_recompute_pays(n_embd)) {
    e.transform->recompute.assign(static_cast<size_t>(shape.n_layers), 0);
    e.transform->recompute[0] = 1;
  }
  return e;
}

SnapshotEncoding SnapshotEncoding::profiled(std::shared_ptr<const KvProfile> profile,
                                            const Model& model, QualityLevel level) {
  const float scale = profile ? profile->scale_of(level) : 0.0f;
  if (scale <= 0) {
    invalid(std::string("the profile has no calibrated scale for level '") +
            quality_level_name(level) + "'");
  }
  SnapshotEncoding e = profiled(std::move(profile), model);
  e.transform->scale = scale;
  return e;
}

std::vector<uint8_t> snapshot_to_cgkv(const KvSnapshot& snapshot, const Model& model,
                                      QualityLevel level) {
  return snapshot_to_cgkv(snapshot, model.identity(), SnapshotEncoding::quality(level, model));
}

namespace detail {

RecomputedKv recompute_layers(const Model& model, const KvSnapshot& s, const CgkvInfo& info) {
  if (!(s.model == model.identity())) {
    invalid("the file was written for model '" + s.model.architecture +
            "' (another GGUF header hash or shape): recomputing its layers with this model would "
            "give wrong K/V");
  }
  const KvStream& stream = s.data_stream();
  const size_t n = stream.cells.size();
  if (s.tokens.size() != n) {
    corrupt("recomputed layers need one token id per cell: " + std::to_string(s.tokens.size()) +
            " token ids for " + std::to_string(n) + " cells");
  }
  // Only layer 0 depends on the token alone; a deeper layer would need the forward pass over
  // the whole prefix, which a restore never runs.
  if (info.recomputed_layers() != std::vector<int>{0}) {
    corrupt(
        "only layer 0 can be recomputed from the token ids; this file marks other layers "
        "as not stored");
  }
  std::vector<int32_t> pos(n);
  for (size_t i = 0; i < n; ++i) {
    if (stream.cells[i].pos < 0) corrupt("cell " + std::to_string(i) + " has a negative position");
    pos[i] = stream.cells[i].pos;
  }
  const Layer0Projector& layer0 = model.layer0();
  if (layer0.k_width() != k_row_elements(stream.layers.at(0)) ||
      layer0.v_width() != v_row_elements(stream.layers.at(0))) {
    invalid("the model's layer 0 rows do not match the file's width " +
            std::to_string(k_row_elements(stream.layers.at(0))));
  }
  RecomputedKv out;
  auto& [k, v] = out[0];
  layer0.compute(s.tokens, pos, info.has_rope ? info.rope : model_rope_params(model), k, v);
  return out;
}

}  // namespace detail
}  // namespace cachegen::llama
