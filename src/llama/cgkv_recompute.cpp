// Quality levels for llama.cpp snapshots: the model's RoPE and shape, CgkvLevel::quality, and
// rebuilding recomputed layers from the token ids at restore (docs/FORMAT.md, "llama.cpp state
// blobs"). Contracts: cachegen/llama.h.
#include <llama.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>

#include "cachegen/error.h"
#include "cachegen/llama.h"
#include "llama/cgkv_blobs.h"

namespace cachegen::llama {
namespace {

[[noreturn]] void invalid(const std::string& why) {
  throw Error(ErrorCode::invalid_argument, "llama cgkv: " + why);
}
[[noreturn]] void corrupt(const std::string& why) {
  throw Error(ErrorCode::corrupt_input, "llama cgkv: " + why);
}

ContextSettings scratch_settings(uint32_t n_ctx) {
  ContextSettings cs;
  cs.n_ctx = std::max<uint32_t>(256, (n_ctx + 255) / 256 * 256);
  return cs;
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

CgkvLevel CgkvLevel::quality(QualityLevel level, const ModelShape& shape, const RopeParams& rope) {
  if (level == QualityLevel::lossless) return exact();
  CgkvLevel out;
  out.quantized = quality_level_config(level, shape, rope);
  return out;
}

std::vector<uint8_t> snapshot_to_cgkv(const KvSnapshot& snapshot, const Model& model,
                                      QualityLevel level) {
  return snapshot_to_cgkv(
      snapshot, model.identity(),
      CgkvLevel::quality(level, model_cache_shape(model), model_rope_params(model)));
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
  const std::vector<int> layers = info.recomputed_layers();
  RecomputedKv out;
  // Positions come from the file: 64-bit arithmetic, and a prefill only when the run starts at 0
  // and fits the model's training context (a forged offset must not size a context).
  for (size_t i = 0; i < n; ++i) {
    if (stream.cells[i].pos < 0) corrupt("cell " + std::to_string(i) + " has a negative position");
  }
  const bool consecutive = detail::consecutive_positions(stream.cells);
  const int64_t ctx_train = llama_model_n_ctx_train(model.get());
  const bool prefill = consecutive && stream.cells[0].pos == 0 &&
                       static_cast<int64_t>(n) <= (ctx_train > 0 ? ctx_train : int64_t{1} << 20);
  if (layers == std::vector<int>{0} && !prefill) {
    // Layer 0's K/V depend only on the token: one decode per distinct token at position 0,
    // where RoPE is the identity, then K rotated to each cell's position. (Consecutive cells,
    // the usual case, take the single batched prefill below instead: one llama_decode rather
    // than one per distinct token.)
    Context ctx(model, scratch_settings(1));
    std::map<int32_t, std::pair<std::vector<float>, std::vector<float>>> table;
    const size_t width = k_row_elements(stream.layers.at(0));
    std::vector<float> k(n * width), v(n * width);
    std::vector<int32_t> pos(n);
    for (size_t i = 0; i < n; ++i) {
      const int32_t tok = s.tokens[i];
      auto it = table.find(tok);
      if (it == table.end()) {
        if (tok < 0 || tok >= model.n_vocab()) {
          corrupt("token id " + std::to_string(tok) + " at cell " + std::to_string(i) +
                  " is outside the model's vocabulary");
        }
        ctx.clear();
        const int32_t one[1] = {tok};
        ctx.decode(one, 0, false);
        const KvSnapshot cap = capture_seq_state(ctx, one);
        const KvLayer& l0 = cap.data_stream().layers.at(0);
        it = table.emplace(tok, std::pair{layer_k_float(l0), layer_v_float(l0)}).first;
      }
      if (it->second.first.size() != width || it->second.second.size() != width) {
        invalid("the model's layer 0 rows do not match the file's width " + std::to_string(width));
      }
      std::copy(it->second.first.begin(), it->second.first.end(),
                k.begin() + static_cast<ptrdiff_t>(i * width));
      std::copy(it->second.second.begin(), it->second.second.end(),
                v.begin() + static_cast<ptrdiff_t>(i * width));
      pos[i] = stream.cells[i].pos;
    }
    const size_t head_dim = model.identity().head_dim;
    rope_rows(k, n, width / head_dim, head_dim, pos,
              info.has_rope ? info.rope : model_rope_params(model), false);
    out[0] = {std::move(k), std::move(v)};
    return out;
  }
  // Prefill the tokens at positions 0..n-1: exact for layer 0 (a function of token and position
  // only) and the only way for deeper layers, which depend on the whole prefix.
  if (!prefill) {
    corrupt(
        "recomputing layers beyond 0 needs cells at positions 0..n-1 within the model's "
        "training context");
  }
  for (size_t i = 0; i < n; ++i) {
    if (s.tokens[i] < 0 || s.tokens[i] >= model.n_vocab()) {
      corrupt("token id " + std::to_string(s.tokens[i]) + " at cell " + std::to_string(i) +
              " is outside the model's vocabulary");
    }
  }
  Context ctx(model, scratch_settings(static_cast<uint32_t>(n)));
  ctx.decode(s.tokens, 0, false);
  const KvSnapshot cap = capture_seq_state(ctx, s.tokens);
  for (int l : layers) {
    const KvLayer& layer = cap.data_stream().layers.at(static_cast<size_t>(l));
    out[static_cast<size_t>(l)] = {layer_k_float(layer), layer_v_float(layer)};
  }
  return out;
}

}  // namespace detail
}  // namespace cachegen::llama
