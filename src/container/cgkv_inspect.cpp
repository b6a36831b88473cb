// cgkv_inspect_json: the description `cachegen inspect --json` prints (and cachegen.inspect
// returns), built in one place.
#include <nlohmann/json.hpp>

#include <cstdio>

#include "cachegen/container.h"

namespace cachegen {

std::string cgkv_inspect_json(const CgkvReader& r, int indent) {
  const CgkvInfo& info = r.info();
  // Per-tensor bytes, from the chunk payloads' framing (every chunk checksum checked).
  const size_t n_attn = static_cast<size_t>(info.n_attention_layers());
  std::vector<size_t> bytes(n_attn * 2, 0);
  for (size_t c = 0; c < info.chunks.size(); ++c) {
    const std::vector<uint64_t> sizes = r.chunk_tensor_bytes(c);
    for (size_t t = 0; t < sizes.size() && t < bytes.size(); ++t) bytes[t] += sizes[t];
  }
  for (size_t b = 0; b < info.blobs.size(); ++b) r.read_blob_at(b);  // every blob's checksum
  const size_t per_tensor =
      info.n_tokens * static_cast<size_t>(info.n_kv_heads) * static_cast<size_t>(info.head_dim);
  const double fp16_total = 2.0 * static_cast<double>(per_tensor) * 2 * static_cast<double>(n_attn);
  nlohmann::json j;
  j["file_bytes"] = info.file_bytes;
  j["header_bytes"] = info.header_bytes;
  j["codec"] = info.codec == ContainerCodec::quantized       ? "quantized"
               : info.codec == ContainerCodec::lossless_fp16 ? "lossless_fp16"
                                                             : "transform";
  if (info.codec == ContainerCodec::transform) {
    char id[17];
    std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(info.profile_id));
    j["profile_id"] = id;
    j["sink_tokens"] = info.sink_tokens;
    j["sink_scale"] = info.sink_scale;
  }
  j["n_layers"] = info.n_layers;
  j["n_kv_heads"] = info.n_kv_heads;
  j["head_dim"] = info.head_dim;
  j["n_tokens"] = info.n_tokens;
  j["group_size"] = info.group_size;
  j["chunk_tokens"] = info.chunk_tokens;
  j["n_chunks"] = info.chunks.size();
  if (info.has_rope) {
    j["rope"] = {{"freq_base", info.rope.freq_base},
                 {"freq_scale", info.rope.freq_scale},
                 {"n_rot", info.rope.n_rot},
                 {"neox", info.rope.neox},
                 {"position_offset", info.rope_position_offset}};
  }
  j["bits_per_element"] =
      per_tensor ? 8.0 * static_cast<double>(info.file_bytes) /
                       (static_cast<double>(per_tensor) * 2 * static_cast<double>(n_attn))
                 : 0.0;
  j["ratio_vs_fp16"] = info.file_bytes ? fp16_total / static_cast<double>(info.file_bytes) : 0.0;
  // What inspect checked (every chunk and blob checksum, the tensor lengths); verify decodes.
  j["checked"] = "checksums";
  j["layers"] = nlohmann::json::array();
  size_t t = 0;
  for (size_t l = 0; l < info.layers.size(); ++l) {
    const CgkvLayerInfo& li = info.layers[l];
    nlohmann::json lj = {{"layer", l}, {"attention", li.attention}};
    if (li.attention && t + 1 < bytes.size()) {
      const size_t kb = bytes[t], vb = bytes[t + 1];
      t += 2;
      lj["key_bits"] = li.key_bits;
      lj["value_bits"] = li.value_bits;
      lj["recomputed"] = li.recomputed;
      lj["key_pre_rope"] = li.key_transform == KeyTransform::pre_rope;
      if (info.codec == ContainerCodec::transform) {
        lj["key_step"] = li.key_step;
        lj["value_step"] = li.value_step;
      }
      lj["key_bytes"] = kb;
      lj["value_bytes"] = vb;
      lj["key_bits_per_element"] =
          per_tensor ? 8.0 * static_cast<double>(kb) / static_cast<double>(per_tensor) : 0.0;
      lj["value_bits_per_element"] =
          per_tensor ? 8.0 * static_cast<double>(vb) / static_cast<double>(per_tensor) : 0.0;
      if (li.key_bits > 0) {
        const double fixed =
            static_cast<double>(per_tensor) * (li.key_bits + 1);  // + fp16 scale/zero per 32
        lj["key_savings_vs_fixed"] = fixed > 0 ? 1.0 - 8.0 * static_cast<double>(kb) / fixed : 0.0;
      }
    }
    j["layers"].push_back(lj);
  }
  return j.dump(indent);
}

}  // namespace cachegen
