// Writing .cgkv files: quantized (from a KVCache) and lossless (from fp16 arrays).
#include <algorithm>
#include <cstring>
#include <string>

#include "cachegen/error.h"
#include "cachegen/runtime.h"
#include "container/cgkv_internal.h"
#include "core/checks.h"
#include "core/huge_pages.h"
#include "core/parallel.h"
#include "core/wire.h"

namespace cachegen {

namespace {

// The header's size (it depends on counts only, so it is known before any chunk), checked.
void plan_header(CgkvInfo& info, std::span<const CgkvBlob> blobs) {
  if (blobs.size() > detail::kMaxBlobs) detail::invalid("at most 64 blobs per file");
  info.header_bytes = detail::header_size(info.layers.size(), info.chunks.size(), blobs.size(),
                                          info.has_rope, info.codec == ContainerCodec::transform);
  if (info.header_bytes > detail::kMaxHeaderBytes)
    detail::invalid("too many chunks for one header");
}

// Chunk c, just written at its range's offset in out: its checksum.
void seal_chunk(CgkvInfo& info, size_t c, const std::vector<uint8_t>& out) {
  CgkvRange& r = info.chunks[c].range;
  r.xxh64 = detail::chunk_checksum(info.version, c, info.chunks[c],
                                   std::span<const uint8_t>(out.data() + r.offset, r.bytes));
}

// out holds the header's place and every chunk: the blobs go after them, then the header into
// its place.
void finish_file(CgkvInfo& info, std::vector<uint8_t>& out, std::span<const CgkvBlob> blobs) {
  info.blobs.clear();
  for (const CgkvBlob& b : blobs) {
    info.blobs.push_back({b.kind, {out.size(), b.bytes.size(), detail::xxh64(b.bytes)}});
    out.insert(out.end(), b.bytes.begin(), b.bytes.end());
  }
  info.file_bytes = out.size();
  // serialize_header checks that it fills header_bytes exactly.
  const std::vector<uint8_t> header = detail::serialize_header(info);
  std::memcpy(out.data(), header.data(), header.size());
}

// assemble_cgkv's one body: chunk c is chunk_sizes[c] bytes that write_chunk(c, dst) writes.
// The file is allocated once and every chunk written in place (copying chunks assembled
// apart page-faulted the file's bytes in twice); the header goes in last, its size known.
template <typename WriteChunk>
std::vector<uint8_t> assemble(CgkvInfo& info, std::span<const uint64_t> chunk_sizes,
                              WriteChunk&& write_chunk, std::span<const CgkvBlob> blobs) {
  plan_header(info, blobs);
  uint64_t offset = info.header_bytes;
  for (size_t c = 0; c < chunk_sizes.size(); ++c) {
    info.chunks[c].range = {offset, chunk_sizes[c], 0};
    offset += chunk_sizes[c];
  }
  uint64_t total = offset;
  for (const CgkvBlob& b : blobs) total += b.bytes.size();
  std::vector<uint8_t> out;
  detail::reserve_huge(out, total);
  out.resize(offset);
  for (size_t c = 0; c < chunk_sizes.size(); ++c) {
    write_chunk(c, out.data() + info.chunks[c].range.offset);
    seal_chunk(info, c, out);
  }
  finish_file(info, out, blobs);
  return out;
}

}  // namespace

std::vector<uint8_t> detail::assemble_cgkv(CgkvInfo& info,
                                           const std::vector<std::vector<uint8_t>>& chunks,
                                           std::span<const CgkvBlob> blobs) {
  std::vector<uint64_t> sizes(chunks.size());
  for (size_t c = 0; c < chunks.size(); ++c) sizes[c] = chunks[c].size();
  return assemble(
      info, sizes,
      [&](size_t c, uint8_t* dst) {
        if (!chunks[c].empty()) std::memcpy(dst, chunks[c].data(), chunks[c].size());
      },
      blobs);
}

std::vector<uint8_t> detail::assemble_cgkv_framed(
    CgkvInfo& info, const std::vector<std::vector<std::span<const uint8_t>>>& chunk_parts,
    std::span<const CgkvBlob> blobs) {
  std::vector<uint64_t> sizes(chunk_parts.size());
  for (size_t c = 0; c < chunk_parts.size(); ++c)
    for (std::span<const uint8_t> p : chunk_parts[c])
      sizes[c] += wire::varint_size(p.size()) + p.size();
  return assemble(
      info, sizes,
      [&](size_t c, uint8_t* dst) {
        for (std::span<const uint8_t> p : chunk_parts[c]) {
          dst = wire::store_varint(dst, p.size());
          if (!p.empty()) std::memcpy(dst, p.data(), p.size());
          dst += p.size();
        }
      },
      blobs);
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
  // Chunk c is every (layer, K/V)'s block c, framed: the sealed blocks are written into the
  // file from the cache itself (copies of them page-faulted the file's bytes in again).
  std::vector<CompressedBlock> tails;
  tails.reserve(2 * cache.layers.size());  // the parts below point into it
  std::vector<std::vector<std::span<const uint8_t>>> parts(info.chunks.size());
  for (const LayerKVCache& layer : cache.layers) {
    if (layer.recomputed()) continue;  // flagged in the header, nothing in the chunks
    for (int kind = 0; kind < 2; ++kind) {
      const std::vector<CompressedBlock>& sealed = layer.sealed_blocks(kind);
      tails.push_back(layer.tail_block(kind));
      const size_t n_blocks = sealed.size() + (tails.back().n_tokens > 0);
      if (n_blocks != parts.size()) detail::invalid("write_cgkv: block layout mismatch");
      for (size_t c = 0; c < sealed.size(); ++c) parts[c].push_back(sealed[c].bytes);
      if (sealed.size() < parts.size()) parts.back().push_back(tails.back().bytes);
    }
  }
  return detail::assemble_cgkv_framed(info, parts, blobs);
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
  const size_t n_tensors = n_attn * 2;
  // Chunk c's rows of tensor t, token-major [rows, heads, dim] as stored in kv.
  const auto chunk_rows = [&](size_t c, size_t t) {
    const CgkvChunkInfo& ci = info.chunks[c];
    return kv.subspan(t * plane + ci.token_begin * row, ci.n_tokens * row);
  };
  // Each layer's repeated V rows, found once for both tensors: K rows whose V row repeats an
  // earlier one (the same token) may be that K row rotated, and the V rows are references.
  std::vector<std::vector<uint32_t>> equal_v(info.chunks.size() * n_attn);
  detail::parallel_for(equal_v.size(), [&](size_t task) {
    equal_v[task] = detail::first_equal_rows(chunk_rows(task / n_attn, task % n_attn * 2 + 1), row);
  });
  // The tensors in file order (chunk by chunk), packed in waves of a few per thread (independent:
  // the bytes do not depend on the order); each wave is framed into the file and freed before
  // the next, so the working set is a wave's packed tensors, not a second copy of the file (the
  // 7B-shaped lossless encode peaked at input + 2x output).
  plan_header(info, blobs);
  std::vector<uint8_t> out;
  // Room advised for huge pages, its pages mapped as the waves are written.
  const auto make_room = [&out](uint64_t bytes) {
    out.reserve(bytes);
    detail::advise_huge_pages(out.data(), bytes);
  };
  {  // about fp16's size (a hint: the file grows past it if it must)
    uint64_t guess =
        info.header_bytes + 2 * uint64_t{kv.size()} + 16 * info.chunks.size() * n_tensors;
    for (const CgkvBlob& b : blobs) guess += b.bytes.size();
    make_room(guess);
  }
  out.resize(info.header_bytes);  // the header's place, written last
  const size_t n_tasks = info.chunks.size() * n_tensors;
  const size_t wave = 4 * thread_count();
  std::vector<std::vector<uint8_t>> packed(std::min(wave, n_tasks));
  for (size_t first = 0; first < n_tasks; first += packed.size()) {
    const size_t count = std::min(packed.size(), n_tasks - first);
    detail::parallel_for(count, [&](size_t i) {
      const size_t c = (first + i) / n_tensors, t = (first + i) % n_tensors;
      const std::vector<uint32_t>& equal = equal_v[c * n_attn + t / 2];
      packed[i] = detail::pack_fp16_lossless(
          chunk_rows(c, t), row, zstd_level, static_cast<size_t>(shape.head_dim),
          t % 2 == 0 ? std::span<const uint32_t>(equal) : std::span<const uint32_t>(),
          t % 2 == 1 ? std::span<const uint32_t>(equal) : std::span<const uint32_t>());
    });
    size_t bytes = 0;
    for (size_t i = 0; i < count; ++i)
      bytes += wire::varint_size(packed[i].size()) + packed[i].size();
    if (out.size() + bytes > out.capacity())
      make_room(std::max(out.size() + bytes, 2 * out.capacity()));
    detail::populate_pages(out.data() + out.size(), bytes);
    wire::Writer w(out);
    for (size_t i = 0; i < count; ++i) {
      const size_t c = (first + i) / n_tensors, t = (first + i) % n_tensors;
      if (t == 0) info.chunks[c].range.offset = out.size();
      w.varint(packed[i].size());
      w.bytes(packed[i]);
      std::vector<uint8_t>().swap(packed[i]);
      if (t + 1 == n_tensors) {
        info.chunks[c].range.bytes = out.size() - info.chunks[c].range.offset;
        seal_chunk(info, c, out);
      }
    }
  }
  finish_file(info, out, blobs);
  return out;
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
