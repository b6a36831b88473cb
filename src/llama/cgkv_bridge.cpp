// KvSnapshot <-> .cgkv: K/V through the cache layer (quantized) or the lossless fp16 writer,
// the rest of the state in blobs (src/llama/cgkv_blobs.cpp). Contracts: cachegen/llama.h.
#include <ggml.h>

#include <cstring>
#include <string>
#include <utility>

#include "cachegen/error.h"
#include "cachegen/llama.h"
#include "cachegen/llama_context.h"
#include "cachegen/quality_levels.h"
#include "core/parallel.h"
#include "llama/cgkv_blobs.h"
#include "llama/state_internal.h"

namespace cachegen::llama {
namespace detail {

void store_recomputed_layers(KVCacheConfig& c) {
  for (size_t i = 0; i < c.layer_bits.size(); ++i) {
    if (c.layer_bits[i] != 0) continue;
    size_t j = i;
    while (j < c.layer_bits.size() && c.layer_bits[j] == 0) ++j;
    const bool any = j < c.layer_bits.size();
    c.layer_bits[i] = any ? c.layer_bits[j] : 8;
    if (i < c.value_layer_bits.size() && j < c.value_layer_bits.size()) {
      c.value_layer_bits[i] = c.value_layer_bits[j];
    } else if (i < c.value_layer_bits.size()) {
      c.value_layer_bits[i] = 8;
    }
  }
}

}  // namespace detail

namespace {

[[noreturn]] void invalid(const std::string& why) {
  throw Error(ErrorCode::invalid_argument, "llama cgkv: " + why);
}
[[noreturn]] void corrupt(const std::string& why) {
  throw Error(ErrorCode::corrupt_input, "llama cgkv: " + why);
}

// The container shape of a stream: every layer an attention layer, K and V rows of equal
// width split into heads as the identity says when it fits, else one head of the row width.
ModelShape container_shape(const KvStream& stream, const ModelIdentity& id,
                           const std::string& arch) {
  const size_t width = k_row_elements(stream.layers[0]);
  for (size_t il = 0; il < stream.layers.size(); ++il) {
    const KvLayer& l = stream.layers[il];
    if (k_row_elements(l) != width || v_row_elements(l) != width) {
      invalid("layer " + std::to_string(il) + " has K width " + std::to_string(k_row_elements(l)) +
              " and V width " + std::to_string(v_row_elements(l)) + ", layer 0 K width " +
              std::to_string(width) + ": the container needs one K/V width for all layers");
    }
  }
  ModelShape shape;
  shape.architecture = arch;
  shape.n_layers = static_cast<int>(stream.layers.size());
  const bool identity_fits =
      id.n_head_kv > 0 && id.head_dim > 0 && size_t{id.n_head_kv} * id.head_dim == width;
  shape.n_kv_heads = identity_fits ? static_cast<int>(id.n_head_kv) : 1;
  shape.head_dim = identity_fits ? static_cast<int>(id.head_dim) : static_cast<int>(width);
  return shape;
}

std::vector<CgkvBlob> make_blobs(const KvSnapshot& s, const ModelIdentity& id) {
  std::vector<CgkvBlob> blobs(3);
  blobs[0] = token_ids_blob(s.tokens);
  blobs[1].kind = static_cast<uint32_t>(BlobKind::metadata_json);
  blobs[1].bytes = detail::encode_metadata(id, s);
  blobs[2].kind = static_cast<uint32_t>(BlobKind::app_state);
  blobs[2].bytes = detail::encode_app_state(s);
  return blobs;
}

std::vector<uint8_t> write_lossless(const KvStream& stream, const ModelShape& shape,
                                    const SnapshotEncoding& level,
                                    std::span<const CgkvBlob> blobs) {
  const size_t n = stream.cells.size();
  const size_t row = static_cast<size_t>(shape.n_kv_heads) * static_cast<size_t>(shape.head_dim);
  std::vector<Half> kv(stream.layers.size() * 2 * n * row);
  Half* dst = kv.data();
  for (size_t il = 0; il < stream.layers.size(); ++il) {
    const KvLayer& l = stream.layers[il];
    if (l.k_type != kTypeF16 || l.v_type != kTypeF16) {
      invalid("the lossless level stores f16 K/V only; layer " + std::to_string(il) +
              " holds K type " + std::to_string(l.k_type) + ", V type " + std::to_string(l.v_type) +
              " (use a quantized level)");
    }
    if (l.k_row_bytes != row * sizeof(Half) || l.v_row_bytes != row * sizeof(Half)) {
      invalid("layer " + std::to_string(il) + " rows are not n_kv_heads * head_dim halves");
    }
    // f16 rows are [n_kv_heads, head_dim] halves, token-major: the container's layout.
    std::memcpy(dst, l.k.data(), n * row * sizeof(Half));
    dst += n * row;
    std::memcpy(dst, l.v.data(), n * row * sizeof(Half));
    dst += n * row;
  }
  const size_t chunk_tokens =
      level.lossless_chunk_tokens
          ? level.lossless_chunk_tokens
          : default_chunk_tokens(true, stream.layers.size() * 2 * row * sizeof(Half));
  return write_cgkv_lossless(shape, kv, n, chunk_tokens, blobs, level.zstd_level);
}

// The level's config adapted to this snapshot: pre-RoPE only with a real head split and one run
// of positions (offset = the first cell's position); recomputed layers only with one token id
// per cell (else stored with the next stored layer's bits).
KVCacheConfig snapshot_config(const KvSnapshot& s, const KvStream& stream, const ModelShape& shape,
                              const ModelIdentity& id, KVCacheConfig c) {
  if (c.key_pre_rope) {
    const bool run = detail::consecutive_positions(stream.cells);
    const bool heads_known =
        id.head_dim > 0 && static_cast<uint32_t>(shape.head_dim) == id.head_dim;
    if (run && heads_known && stream.cells[0].pos >= 0) {
      c.rope_position_offset = stream.cells[0].pos;
    } else {
      c.key_pre_rope = false;
    }
  }
  if (s.tokens.size() != stream.cells.size()) detail::store_recomputed_layers(c);
  return c;
}

std::vector<uint8_t> write_quantized(const KvSnapshot& s, const KvStream& stream,
                                     const ModelShape& shape, const ModelIdentity& id,
                                     const SnapshotEncoding& level,
                                     std::span<const CgkvBlob> blobs) {
  KVCache cache =
      KVCacheBuilder::for_model(shape, snapshot_config(s, stream, shape, id, level.quantized));
  const size_t n = stream.cells.size();
  // Layers are independent caches: each is converted and filled on one of the pool's threads
  // (the bytes do not depend on it).
  cachegen::detail::parallel_for(stream.layers.size(), [&](size_t il) {
    const bool stored = !cache.layers[il].recomputed();
    const std::vector<float> k = stored ? layer_k_float(stream.layers[il]) : std::vector<float>();
    const std::vector<float> v = stored ? layer_v_float(stream.layers[il]) : std::vector<float>();
    const auto view = [&](const std::vector<float>& x) {
      return KVBlockView{stored ? x.data() : nullptr,           KVDType::f32,
                         static_cast<size_t>(shape.n_kv_heads), n,
                         static_cast<size_t>(shape.head_dim),   true};
    };
    cache.layers[il].append(view(k), view(v));
  });
  return write_cgkv(cache, blobs);
}

// A transform file: every layer's K/V as fp32, layer 0 recomputed as the encoding says (stored
// when the snapshot lacks token ids), keys pre-RoPE from the first cell's position.
std::vector<uint8_t> write_transform(const KvSnapshot& s, const KvStream& stream,
                                     const ModelShape& shape, const ModelIdentity& id,
                                     TransformEncoding enc, std::span<const CgkvBlob> blobs) {
  if (!enc.profile) invalid("a transform encoding needs a profile");
  if (!enc.profile->model_fingerprint.empty() && id.n_layer > 0 &&
      enc.profile->model_fingerprint != context_fingerprint(id)) {
    invalid("the profile was measured on model " + enc.profile->model_fingerprint + ", not on " +
            context_fingerprint(id));
  }
  const size_t n = stream.cells.size();
  if (enc.profile->key_pre_rope) {
    if (!detail::consecutive_positions(stream.cells) || stream.cells[0].pos < 0) {
      invalid("a transform file needs cells at one run of positions (keys are coded pre-RoPE)");
    }
    enc.rope_position_offset = stream.cells[0].pos;
  }
  if (s.tokens.size() != n) enc.recompute.clear();
  const size_t row = static_cast<size_t>(shape.n_kv_heads) * static_cast<size_t>(shape.head_dim);
  std::vector<float> kv(stream.layers.size() * 2 * n * row);
  for (size_t il = 0; il < stream.layers.size(); ++il) {
    if (!enc.recompute.empty() && enc.recompute[il]) continue;
    const std::vector<float> k = layer_k_float(stream.layers[il]);
    const std::vector<float> v = layer_v_float(stream.layers[il]);
    std::copy(k.begin(), k.end(), kv.begin() + static_cast<ptrdiff_t>(il * 2 * n * row));
    std::copy(v.begin(), v.end(), kv.begin() + static_cast<ptrdiff_t>((il * 2 + 1) * n * row));
  }
  return write_cgkv_transform(shape, kv, n, enc, blobs);
}

// Checks that the app_state's stream agrees with the container header before any K/V is
// allocated from it.
void check_against_header(const KvStream& stream, const CgkvInfo& info) {
  if (static_cast<size_t>(info.n_layers) != stream.layers.size() ||
      static_cast<size_t>(info.n_attention_layers()) != stream.layers.size()) {
    corrupt("app_state has " + std::to_string(stream.layers.size()) +
            " layers, the container header " + std::to_string(info.n_layers) + " (" +
            std::to_string(info.n_attention_layers()) + " with attention)");
  }
  if (info.n_tokens != stream.cells.size()) {
    corrupt("app_state has " + std::to_string(stream.cells.size()) +
            " cells, the container header " + std::to_string(info.n_tokens) + " tokens");
  }
  const size_t width = static_cast<size_t>(info.n_kv_heads) * static_cast<size_t>(info.head_dim);
  for (size_t il = 0; il < stream.layers.size(); ++il) {
    const KvLayer& l = stream.layers[il];
    const std::string where = "app_state layer " + std::to_string(il);
    // Types were validated by the app_state decoder; rows must be whole blocks of them.
    for (const auto& [type, bytes] :
         {std::pair{l.k_type, l.k_row_bytes}, {l.v_type, l.v_row_bytes}}) {
      const ggml_type_traits* t = ggml_get_type_traits(static_cast<ggml_type>(type));
      if (bytes == 0 || bytes % t->type_size != 0 ||
          bytes / t->type_size * static_cast<uint64_t>(t->blck_size) != width) {
        corrupt(where + ": " + std::to_string(bytes) + "-byte " + t->type_name +
                " rows do not hold " + std::to_string(width) + " elements");
      }
    }
    if (stream.v_trans) {
      const ggml_type_traits* t = ggml_get_type_traits(static_cast<ggml_type>(l.v_type));
      if (t->blck_size != 1 || l.v_elem_bytes != t->type_size || l.n_embd_v != width) {
        corrupt(where +
                ": transposed V needs a one-element type, v_elem_bytes == its size and "
                "n_embd_v == " +
                std::to_string(width));
      }
    }
  }
}

std::vector<int32_t> decode_tokens(std::span<const uint8_t> b, const ParseOptions& limits) {
  return decode_token_ids(b, limits.max_tokens);
}

}  // namespace

SnapshotEncoding SnapshotEncoding::bits(int bits, size_t group_size) {
  SnapshotEncoding encoding;
  encoding.quantized.base_bits = bits;
  encoding.quantized.layer_groups = 1;
  encoding.quantized.group_size = group_size;
  const size_t chunk = default_chunk_tokens(false);
  encoding.quantized.block_tokens = (chunk + group_size - 1) / group_size * group_size;
  return encoding;
}

SnapshotEncoding SnapshotEncoding::exact() {
  SnapshotEncoding encoding;
  encoding.lossless = true;
  return encoding;
}

std::vector<uint8_t> snapshot_to_cgkv(const KvSnapshot& snapshot, const ModelIdentity& identity,
                                      const SnapshotEncoding& encoding) {
  const KvStream& stream = snapshot.data_stream();  // throws for no cells / several streams
  if (stream.layers.empty()) invalid("the state has no layers");
  detail::check_layer_sizes(stream);  // KvSnapshot is a mutable struct: trust no size in it
  if (!encoding.lossless && !encoding.transform) encoding.quantized.validate();
  const std::string arch =
      identity.architecture.empty() ? snapshot.arch_tag : identity.architecture;
  const ModelShape shape = container_shape(stream, identity, arch);
  const std::vector<CgkvBlob> blobs = make_blobs(snapshot, identity);
  if (encoding.transform) {
    return write_transform(snapshot, stream, shape, identity, *encoding.transform, blobs);
  }
  return encoding.lossless ? write_lossless(stream, shape, encoding, blobs)
                           : write_quantized(snapshot, stream, shape, identity, encoding, blobs);
}

std::optional<ModelIdentity> cgkv_model_identity(const CgkvReader& reader) {
  const auto meta = reader.read_blob(static_cast<uint32_t>(BlobKind::metadata_json));
  if (!meta) return std::nullopt;
  return detail::decode_metadata(*meta);
}

namespace {

KvSnapshot decode_snapshot(const CgkvReader& reader, const ParseOptions& limits,
                           const Model* model) {
  const auto app = reader.read_blob(static_cast<uint32_t>(BlobKind::app_state));
  if (!app) {
    corrupt("no app_state blob (kind 3): the file was not written from a llama.cpp state");
  }
  KvSnapshot s = detail::decode_app_state(*app, limits);
  if (const std::optional<ModelIdentity> id = cgkv_model_identity(reader)) s.model = *id;
  if (const auto tokens = reader.read_blob(static_cast<uint32_t>(BlobKind::token_ids))) {
    s.tokens = decode_tokens(*tokens, limits);
  }
  KvStream& stream = s.data_stream();  // the app_state decoder keeps streams consistent
  const CgkvInfo& info = reader.info();
  check_against_header(stream, info);

  const std::vector<int> recomputed = info.recomputed_layers();
  detail::RecomputedKv rebuilt;
  if (!recomputed.empty()) {
    if (model == nullptr) {
      std::string list;
      for (int l : recomputed) list += (list.empty() ? "" : ", ") + std::to_string(l);
      invalid("layer(s) " + list +
              " of this file are recomputed from the token ids, not stored: restoring needs the "
              "model (cgkv_to_snapshot(reader, model); `cachegen llama unpack --model M.gguf`)");
    }
    rebuilt = detail::recompute_layers(*model, s, info);
  }
  const size_t n = stream.cells.size();
  const size_t row = static_cast<size_t>(info.n_kv_heads) * static_cast<size_t>(info.head_dim);
  const std::vector<Half> kv = reader.read_tokens(0, n);
  const bool exact = info.codec == ContainerCodec::lossless_fp16;
  std::vector<float> values(n * row);
  for (size_t il = 0; il < stream.layers.size(); ++il) {
    KvLayer& l = stream.layers[il];
    for (int kind = 0; kind < 2; ++kind) {
      const Half* src = kv.data() + (il * 2 + static_cast<size_t>(kind)) * n * row;
      std::vector<uint8_t>& data = kind == 0 ? l.k : l.v;
      const int32_t type = kind == 0 ? l.k_type : l.v_type;
      data.assign(n * (kind == 0 ? l.k_row_bytes : l.v_row_bytes), 0);
      if (exact && type == kTypeF16) {  // the stored bits, NaN payloads and -0 included
        std::memcpy(data.data(), src, n * row * sizeof(Half));
        continue;
      }
      if (const auto it = rebuilt.find(il); it != rebuilt.end()) {
        values = kind == 0 ? it->second.first : it->second.second;
      } else {
        for (size_t i = 0; i < values.size(); ++i) values[i] = half_to_float(src[i]);
      }
      if (kind == 0) {
        set_layer_k_float(l, values);
      } else {
        set_layer_v_float(l, values);
      }
    }
  }
  return s;
}

}  // namespace

KvSnapshot cgkv_to_snapshot(const CgkvReader& reader, const ParseOptions& limits) {
  return decode_snapshot(reader, limits, nullptr);
}

KvSnapshot cgkv_to_snapshot(const CgkvReader& reader, const Model& model,
                            const ParseOptions& limits) {
  return decode_snapshot(reader, limits, &model);
}

}  // namespace cachegen::llama
