// State files in the .cgkv container at a chosen level: what `cachegen llama pack` / `unpack`,
// the C API and the Python package all call (contracts: cachegen/llama.h, "Packing state
// files").
#include <string>

#include "cachegen/error.h"
#include "cachegen/llama.h"
#include "cachegen/quality_levels.h"

namespace cachegen::llama {

SnapshotEncoding pack_encoding(const PackOptions& o, const Model* model, size_t n_layers) {
  SnapshotEncoding encoding;
  if (o.profile) {
    if (model == nullptr) {
      throw Error(ErrorCode::invalid_argument, "a calibration profile needs the model (--model)");
    }
    if (o.lossless || o.bits) {
      throw Error(ErrorCode::invalid_argument,
                  "a calibration profile codes lossy transform files: not with lossless or bits");
    }
    if (o.bits_per_element > 0 || o.max_kl > 0) {
      encoding = SnapshotEncoding::profiled(o.profile, *model);
      encoding.transform->bits_per_element = o.bits_per_element;
      encoding.transform->max_kl = o.max_kl;
    } else {
      encoding = SnapshotEncoding::profiled(o.profile, *model, parse_quality_level(o.level));
    }
    if (o.chunk_tokens != 0) encoding.transform->chunk_tokens = o.chunk_tokens;
    return encoding;
  }
  if (o.lossless || (!o.bits && parse_quality_level(o.level) == QualityLevel::lossless)) {
    encoding = SnapshotEncoding::exact();
  } else if (o.bits) {
    encoding = SnapshotEncoding::bits(*o.bits, o.group_size);
  } else if (model != nullptr) {
    encoding = SnapshotEncoding::quality(parse_quality_level(o.level), *model);
  } else {
    ModelShape shape;
    shape.n_layers = static_cast<int>(n_layers);
    shape.n_kv_heads = shape.head_dim = 1;
    // No model to recompute with or to read RoPE from: recomputed layers are stored, keys as is.
    encoding.quantized = quality_level_config_stored(parse_quality_level(o.level), shape, nullptr);
  }
  if (o.chunk_tokens != 0) {
    encoding.lossless_chunk_tokens = o.chunk_tokens;
    encoding.quantized.block_tokens = o.chunk_tokens;
  }
  return encoding;
}

PackedState pack_state_file(std::span<const uint8_t> state, const Model* model,
                            const PackOptions& options) {
  ModelIdentity identity;
  ParseOptions parse;
  if (model != nullptr) {
    identity = model->identity();
    parse.cell_ext = model->cell_ext();
  }
  PackedState p;
  p.snapshot = parse_state_file(state, parse);
  if (model == nullptr) {
    identity.architecture = p.snapshot.arch_tag;
    identity.n_layer = static_cast<uint32_t>(p.snapshot.data_stream().layers.size());
  }
  p.cgkv = snapshot_to_cgkv(p.snapshot, identity,
                            pack_encoding(options, model, p.snapshot.data_stream().layers.size()));
  return p;
}

KvSnapshot unpack_snapshot(const CgkvReader& reader, const Model* model) {
  return model != nullptr ? cgkv_to_snapshot(reader, *model) : cgkv_to_snapshot(reader);
}

}  // namespace cachegen::llama
