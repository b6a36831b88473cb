// Writing .cgkv files: quantized (from a KVCache) and lossless (from fp16 arrays).
#include <algorithm>
#include <string>

#include "cachegen/error.h"
#include "container/cgkv_internal.h"
#include "core/checks.h"
#include "core/huge_pages.h"
#include "core/parallel.h"
#include "core/wire.h"

namespace cachegen {

std::vector<uint8_t> detail::assemble_cgkv(CgkvInfo& info,
                                           const std::vector<std::vector<uint8_t>>& chunks,
                                           std::span<const CgkvBlob> blobs) {
  if (blobs.size() > detail::kMaxBlobs) detail::invalid("at most 64 blobs per file");
  info.header_bytes = detail::header_size(info.layers.size(), chunks.size(), blobs.size(),
                                          info.has_rope, info.codec == ContainerCodec::transform);
  if (info.header_bytes > detail::kMaxHeaderBytes)
    detail::invalid("too many chunks for one header");
  uint64_t offset = info.header_bytes;
  for (size_t c = 0; c < chunks.size(); ++c) {
    info.chunks[c].range = {offset, chunks[c].size(),
                            detail::chunk_checksum(info.version, c, info.chunks[c], chunks[c])};
    offset += chunks[c].size();
  }
  info.blobs.clear();
  for (const CgkvBlob& b : blobs) {
    info.blobs.push_back({b.kind, {offset, b.bytes.size(), detail::xxh64(b.bytes)}});
    offset += b.bytes.size();
  }
  info.file_bytes = offset;
  std::vector<uint8_t> out = detail::serialize_header(info);
  if (offset > out.capacity()) {
    out.reserve(offset);
    detail::advise_huge_pages(out.data(), offset);
  }
  for (const auto& c : chunks) out.insert(out.end(), c.begin(), c.end());
  for (const CgkvBlob& b : blobs) out.insert(out.end(), b.bytes.begin(), b.bytes.end());
  return out;
}

namespace {

CgkvInfo base_info(const ModelShape& shape, size_t n_tokens, size_t chunk_tokens,
                   size_t group_size) {
  shape.validate();
  if (n_tokens > detail::kMaxTokens) detail::invalid("n_tokens exceeds 2^40");
  CgkvInfo info;
  info.version = detail::kCgkvQuantizedVersion;
  info.n_layers = shape.n_layers;
  info.n_kv_heads = shape.n_kv_heads;
  info.head_dim = shape.head_dim;
  info.group_size = group_size;
  info.n_tokens = n_tokens;
  info.chunk_tokens = chunk_tokens;
  const size_t n_chunks = (n_tokens + chunk_tokens - 1) / chunk_tokens;
  info.chunks.resize(n_chunks);
  for (size_t c = 0; c < n_chunks; ++c) {
    info.chunks[c].token_begin = c * chunk_tokens;
    info.chunks[c].n_tokens = std::min(chunk_tokens, n_tokens - c * chunk_tokens);
  }
  info.layers.resize(static_cast<size_t>(shape.n_layers));
  for (int l = 0; l < shape.n_layers; ++l)
    info.layers[static_cast<size_t>(l)].attention = shape.has_attention(l);
  return info;
}

}  // namespace

std::vector<uint8_t> write_cgkv(const KVCache& cache, std::span<const CgkvBlob> blobs) {
  if (cache.layers.empty()) detail::invalid("write_cgkv: the cache has no layers");
  const size_t n_tokens = cache.n_tokens();
  for (const LayerKVCache& l : cache.layers) {
    if (l.n_tokens() != n_tokens) {
      detail::invalid("write_cgkv: layers hold different token counts (" +
                      std::to_string(l.n_tokens()) + " vs " + std::to_string(n_tokens) + ")");
    }
  }
  CgkvInfo info =
      base_info(cache.shape, n_tokens, cache.config.block_tokens, cache.config.group_size);
  info.codec = ContainerCodec::quantized;
  info.param_mode = cache.config.params;
  for (size_t i = 0; i < cache.layers.size(); ++i) {
    CgkvLayerInfo& li = info.layers[static_cast<size_t>(cache.layer_index[i])];
    li.key_bits = cache.layers[i].key_bits();
    li.value_bits = cache.layers[i].value_bits();
    li.recomputed = cache.layers[i].recomputed();
    if (cache.config.key_pre_rope && !li.recomputed) {
      li.key_transform = KeyTransform::pre_rope;
      info.has_rope = true;
    }
  }
  const bool any_stored =
      std::any_of(info.layers.begin(), info.layers.end(),
                  [](const CgkvLayerInfo& l) { return l.attention && !l.recomputed; });
  const bool ids_cover = std::any_of(blobs.begin(), blobs.end(), [&](const CgkvBlob& b) {
    return b.kind == static_cast<uint32_t>(BlobKind::token_ids) && b.bytes.size() / 4 >= n_tokens;
  });
  if (!any_stored && !ids_cover) {  // readers reject such a file (FORMAT.md)
    detail::invalid(
        "write_cgkv: every attention layer is recomputed, so the file needs a "
        "token_ids blob with one id per token");
  }
  if (info.has_rope) {
    info.rope = cache.config.rope;
    info.rope_position_offset = cache.config.rope_position_offset;
  }
  std::vector<std::vector<uint8_t>> chunks(info.chunks.size());
  for (const LayerKVCache& layer : cache.layers) {
    if (layer.recomputed()) continue;  // flagged in the header, nothing in the chunks
    for (int kind = 0; kind < 2; ++kind) {
      const std::vector<CompressedBlock> blocks = layer.snapshot_blocks(kind);
      if (blocks.size() != chunks.size()) detail::invalid("write_cgkv: block layout mismatch");
      for (size_t c = 0; c < chunks.size(); ++c) {
        wire::Writer w(chunks[c]);
        w.varint(blocks[c].bytes.size());
        w.bytes(blocks[c].bytes);
      }
    }
  }
  return detail::assemble_cgkv(info, chunks, blobs);
}

std::vector<uint8_t> write_cgkv_lossless(const ModelShape& shape, std::span<const Half> kv,
                                         size_t n_tokens, size_t chunk_tokens,
                                         std::span<const CgkvBlob> blobs, int zstd_level) {
  if (chunk_tokens == 0 || chunk_tokens > (size_t{1} << 24))
    detail::invalid("chunk_tokens must be in 1..2^24");
  CgkvInfo info = base_info(shape, n_tokens, chunk_tokens, 1);
  info.codec = ContainerCodec::lossless_fp16;
  info.version = detail::kCgkvRowsDedupVersion;
  info.param_mode = ParamMode::reference;
  const size_t row = static_cast<size_t>(shape.n_kv_heads) * static_cast<size_t>(shape.head_dim);
  const size_t plane = detail::checked_mul(n_tokens, row, "kv");
  const size_t n_attn = static_cast<size_t>(shape.n_attention_layers());
  if (kv.size() != detail::checked_mul(n_attn * 2, plane, "kv")) {
    detail::invalid("kv has " + std::to_string(kv.size()) +
                    " values, expected n_attention_layers * 2 * n_tokens * heads * head_dim = " +
                    std::to_string(n_attn * 2 * plane));
  }
  // Every chunk's tensors are packed in parallel (independent; the bytes do not depend on
  // the order), then framed chunk by chunk.
  const size_t n_tensors = n_attn * 2;
  std::vector<std::vector<uint8_t>> packed(info.chunks.size() * n_tensors);
  detail::parallel_for(packed.size(), [&](size_t task) {
    const CgkvChunkInfo& ci = info.chunks[task / n_tensors];
    const size_t t = task % n_tensors;
    // Chunk rows of tensor t, token-major [rows, heads, dim] as stored in kv.
    const auto chunk_rows = [&](size_t tensor) {
      return kv.subspan(tensor * plane + ci.token_begin * row, ci.n_tokens * row);
    };
    // K rows whose V row repeats an earlier one (the same token) may be that K row rotated.
    const std::vector<uint32_t> hint =
        t % 2 == 0 ? detail::first_equal_rows(chunk_rows(t + 1), row) : std::vector<uint32_t>();
    packed[task] = detail::pack_fp16_lossless(chunk_rows(t), row, zstd_level,
                                              static_cast<size_t>(shape.head_dim), hint);
  });
  std::vector<std::vector<uint8_t>> chunks(info.chunks.size());
  for (size_t c = 0; c < chunks.size(); ++c) {
    size_t bytes = 0;
    for (size_t t = 0; t < n_tensors; ++t) bytes += packed[c * n_tensors + t].size() + 10;
    chunks[c].reserve(bytes);
    detail::advise_huge_pages(chunks[c].data(), bytes);
    wire::Writer w(chunks[c]);
    for (size_t t = 0; t < n_tensors; ++t) {
      std::vector<uint8_t>& p = packed[c * n_tensors + t];
      w.varint(p.size());
      w.bytes(p);
      std::vector<uint8_t>().swap(p);  // peak memory: the output once, not twice
    }
  }
  return detail::assemble_cgkv(info, chunks, blobs);
}

CgkvBlob token_ids_blob(std::span<const int32_t> tokens) {
  CgkvBlob b;
  b.kind = static_cast<uint32_t>(BlobKind::token_ids);
  b.bytes.reserve(tokens.size() * 4);
  wire::Writer w(b.bytes);
  for (int32_t t : tokens) w.i32(t);
  return b;
}

}  // namespace cachegen
