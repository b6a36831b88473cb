// Writing .cgkv files: quantized (from a KVCache) and lossless (from fp16 arrays).
#include <algorithm>
#include <cstring>
#include <optional>
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

// Where the writers put a file: the chunks and blobs appended in file order after the header's
// place, the header put into its place last. Held whole in memory (MemoryOut) or streamed to
// a CgkvWriteAt through a bounded buffer (StreamOut: the file never held whole).
class FileOut {
 public:
  explicit FileOut(uint64_t header_bytes) : size_(header_bytes) {}
  virtual ~FileOut() = default;
  // About `bytes` more are coming next (a hint).
  virtual void expect(uint64_t bytes) = 0;
  virtual void append(std::span<const uint8_t> bytes) = 0;
  virtual void put_header(std::span<const uint8_t> header) = 0;
  uint64_t size() const noexcept { return size_; }

 protected:
  uint64_t size_;
};

class MemoryOut final : public FileOut {
 public:
  // capacity: a first guess of the file's size (it grows past it if it must).
  MemoryOut(uint64_t header_bytes, uint64_t capacity) : FileOut(header_bytes) {
    make_room(capacity);
    bytes_.resize(header_bytes);  // the header's place
  }
  // Pages are advised for huge pages when the room is made and mapped when bytes are expected
  // (a 4 KiB fault per page of the file was 7-11% of a lossless encode).
  void expect(uint64_t bytes) override {
    if (size_ + bytes > bytes_.capacity()) make_room(std::max(size_ + bytes, 2 * size_));
    detail::populate_pages(bytes_.data() + size_, bytes);
  }
  void append(std::span<const uint8_t> bytes) override {
    if (size_ + bytes.size() > bytes_.capacity())
      make_room(std::max(size_ + bytes.size(), 2 * size_));
    bytes_.insert(bytes_.end(), bytes.begin(), bytes.end());
    size_ += bytes.size();
  }
  void put_header(std::span<const uint8_t> header) override {
    std::memcpy(bytes_.data(), header.data(), header.size());
  }
  std::vector<uint8_t> take() && { return std::move(bytes_); }

 private:
  void make_room(uint64_t bytes) {
    bytes_.reserve(bytes);
    detail::advise_huge_pages(bytes_.data(), bytes);
  }
  std::vector<uint8_t> bytes_;
};

class StreamOut final : public FileOut {
 public:
  StreamOut(uint64_t header_bytes, const CgkvWriteAt& write_at)
      : FileOut(header_bytes), write_at_(write_at) {
    if (!write_at_) detail::invalid("write_cgkv: no destination (an empty CgkvWriteAt)");
  }
  void expect(uint64_t) override {}
  // Pieces are gathered up to kBuffer bytes (few, large writes); larger ones go straight out.
  void append(std::span<const uint8_t> bytes) override {
    if (buffer_.size() + bytes.size() > kBuffer) flush();
    if (bytes.size() >= kBuffer) {
      write_at_(size_, bytes);
    } else {
      if (buffer_.empty()) buffer_.reserve(kBuffer);
      buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
    }
    size_ += bytes.size();
  }
  void put_header(std::span<const uint8_t> header) override {
    flush();
    write_at_(0, header);
  }

 private:
  static constexpr size_t kBuffer = size_t{1} << 20;
  void flush() {
    if (!buffer_.empty()) write_at_(size_ - buffer_.size(), buffer_);
    buffer_.clear();
  }
  const CgkvWriteAt& write_at_;
  std::vector<uint8_t> buffer_;
};

// Chunk c's bytes, appended piece by piece to the file and to the chunk's checksum; its range
// is set when it ends.
class ChunkOut {
 public:
  ChunkOut(CgkvInfo& info, size_t c, FileOut& out)
      : info_(info), c_(c), out_(out), hash_(info.version, c, info.chunks[c]) {
    info_.chunks[c].range.offset = out.size();
  }
  void append(std::span<const uint8_t> bytes) {
    out_.append(bytes);
    hash_.update(bytes);
  }
  // One framed part: its size as a varint, then its bytes (quantized and lossless payloads).
  void append_part(std::span<const uint8_t> part) {
    uint8_t size[10];
    append({size, wire::store_varint(size, part.size())});
    append(part);
  }
  void end() {
    CgkvRange& r = info_.chunks[c_].range;
    r.bytes = out_.size() - r.offset;
    r.xxh64 = hash_.digest();
  }

 private:
  CgkvInfo& info_;
  size_t c_;
  FileOut& out_;
  detail::ChunkHash hash_;
};

// After the chunks: the blobs, then the header into its place. Returns the file's size.
uint64_t finish_file(CgkvInfo& info, FileOut& out, std::span<const CgkvBlob> blobs) {
  info.blobs.clear();
  for (const CgkvBlob& b : blobs) {
    info.blobs.push_back({b.kind, {out.size(), b.bytes.size(), detail::xxh64(b.bytes)}});
    out.append(b.bytes);
  }
  info.file_bytes = out.size();
  // serialize_header checks that it fills header_bytes exactly.
  out.put_header(detail::serialize_header(info));
  return info.file_bytes;
}

uint64_t blobs_size(std::span<const CgkvBlob> blobs) {
  uint64_t n = 0;
  for (const CgkvBlob& b : blobs) n += b.bytes.size();
  return n;
}

// Chunks given whole (transform) or as framed parts (quantized) into out, then the blobs and
// the header. chunk_bytes: the chunks' total size.
template <typename WriteChunk>
uint64_t assemble(CgkvInfo& info, uint64_t chunk_bytes, WriteChunk&& write_chunk, FileOut& out,
                  std::span<const CgkvBlob> blobs) {
  out.expect(chunk_bytes + blobs_size(blobs));
  for (size_t c = 0; c < info.chunks.size(); ++c) {
    ChunkOut chunk(info, c, out);
    write_chunk(c, chunk);
    chunk.end();
  }
  return finish_file(info, out, blobs);
}

}  // namespace

std::vector<uint8_t> detail::assemble_cgkv(CgkvInfo& info,
                                           const std::vector<std::vector<uint8_t>>& chunks,
                                           std::span<const CgkvBlob> blobs) {
  plan_header(info, blobs);
  uint64_t bytes = 0;
  for (const std::vector<uint8_t>& c : chunks) bytes += c.size();
  MemoryOut out(info.header_bytes, info.header_bytes + bytes + blobs_size(blobs));
  assemble(
      info, bytes, [&](size_t c, ChunkOut& chunk) { chunk.append(chunks[c]); }, out, blobs);
  return std::move(out).take();
}

namespace {

CgkvInfo base_info(const ModelShape& shape, size_t n_tokens, size_t chunk_tokens,
                   size_t group_size) {
  shape.validate();
  if (n_tokens > detail::kMaxTokens) detail::invalid("n_tokens exceeds 2^40");
  CgkvInfo info;
  info.version = detail::kCgkvVersion;
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

namespace {

// write_cgkv's one body: the file's layout from the cache, then its bytes into out (made by
// make_out from the header's and the whole file's sizes).
template <typename MakeOut>
uint64_t write_cache(const KVCache& cache, std::span<const CgkvBlob> blobs, MakeOut&& make_out) {
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
  // Chunk c is every (layer, K/V)'s block c, framed: written into the file from the cache's
  // blocks themselves (no copy of a chunk or of the file is assembled first).
  std::vector<CompressedBlock> tails;
  tails.reserve(2 * cache.layers.size());  // the parts below point into it
  std::vector<std::vector<std::span<const uint8_t>>> parts(info.chunks.size());
  uint64_t chunk_bytes = 0;
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
  for (const auto& chunk : parts)
    for (std::span<const uint8_t> p : chunk) chunk_bytes += wire::varint_size(p.size()) + p.size();
  plan_header(info, blobs);
  auto&& out = make_out(info.header_bytes, info.header_bytes + chunk_bytes + blobs_size(blobs));
  return assemble(
      info, chunk_bytes,
      [&](size_t c, ChunkOut& chunk) {
        for (std::span<const uint8_t> p : parts[c]) chunk.append_part(p);
      },
      out, blobs);
}

}  // namespace

std::vector<uint8_t> write_cgkv(const KVCache& cache, std::span<const CgkvBlob> blobs) {
  std::optional<MemoryOut> out;
  write_cache(cache, blobs, [&](uint64_t header, uint64_t total) -> MemoryOut& {
    return out.emplace(header, total);
  });
  return std::move(*out).take();
}

uint64_t write_cgkv(const CgkvWriteAt& write_at, const KVCache& cache,
                    std::span<const CgkvBlob> blobs) {
  std::optional<StreamOut> out;
  return write_cache(cache, blobs, [&](uint64_t header, uint64_t) -> StreamOut& {
    return out.emplace(header, write_at);
  });
}

namespace {

// write_cgkv_lossless's one body (make_out as in write_cache).
template <typename MakeOut>
uint64_t write_lossless(const ModelShape& shape, std::span<const Half> kv, size_t n_tokens,
                        size_t chunk_tokens, std::span<const CgkvBlob> blobs, int zstd_level,
                        MakeOut&& make_out) {
  if (chunk_tokens == 0 || chunk_tokens > (size_t{1} << 24))
    detail::invalid("chunk_tokens must be in 1..2^24");
  CgkvInfo info = base_info(shape, n_tokens, chunk_tokens, 1);
  info.codec = ContainerCodec::lossless_fp16;
  info.version = detail::kCgkvVersion;
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
  plan_header(info, blobs);
  // About fp16's size (a first guess for a file in memory).
  auto&& out =
      make_out(info.header_bytes, info.header_bytes + 2 * uint64_t{kv.size()} +
                                      16 * info.chunks.size() * n_tensors + blobs_size(blobs));
  // The tensors in file order (chunk by chunk), packed in waves of a few per thread (independent:
  // the bytes do not depend on the order); each wave is framed into the file and freed while the
  // next one is packed, so the working set is two waves' packed tensors, not a second copy of the
  // file (the 7B-shaped lossless encode peaked at input + 2x output). Framed after its wave, the
  // previous wave's copies, checksums and writes left the other thread idle about as long as the
  // packing took (7B-shaped array: 2 threads 1.34x one); framing is the first item of the next
  // wave's loop.
  const size_t n_tasks = info.chunks.size() * n_tensors;
  const size_t wave = std::min(4 * thread_count(), n_tasks);
  std::vector<std::vector<uint8_t>> packed[2] = {std::vector<std::vector<uint8_t>>(wave),
                                                 std::vector<std::vector<uint8_t>>(wave)};
  std::optional<ChunkOut> chunk;  // the chunk being written (waves may end inside one)
  // Tasks [first, first + count) of the wave packed into p framed into the file, and freed.
  const auto frame = [&](std::vector<std::vector<uint8_t>>& p, size_t first, size_t count) {
    uint64_t bytes = 0;
    for (size_t i = 0; i < count; ++i) bytes += wire::varint_size(p[i].size()) + p[i].size();
    out.expect(bytes);
    for (size_t i = 0; i < count; ++i) {
      const size_t c = (first + i) / n_tensors, t = (first + i) % n_tensors;
      if (t == 0) chunk.emplace(info, c, out);
      chunk->append_part(p[i]);
      std::vector<uint8_t>().swap(p[i]);
      if (t + 1 == n_tensors) chunk->end();
    }
  };
  size_t framed = 0, pending = 0;  // the wave waiting to be framed: tasks [framed, + pending)
  for (size_t k = 0; framed + pending < n_tasks; ++k) {
    const size_t first = framed + pending, count = std::min(wave, n_tasks - first);
    std::vector<std::vector<uint8_t>>& into = packed[k % 2];
    std::vector<std::vector<uint8_t>>& before = packed[(k + 1) % 2];
    const size_t framing = pending > 0 ? 1 : 0;
    detail::parallel_for(framing + count, [&](size_t i) {
      if (i < framing) return frame(before, framed, pending);
      i -= framing;
      const size_t c = (first + i) / n_tensors, t = (first + i) % n_tensors;
      const std::vector<uint32_t>& equal = equal_v[c * n_attn + t / 2];
      into[i] = detail::pack_fp16_lossless(
          chunk_rows(c, t), row, zstd_level, static_cast<size_t>(shape.head_dim),
          t % 2 == 0 ? std::span<const uint32_t>(equal) : std::span<const uint32_t>(),
          t % 2 == 1 ? std::span<const uint32_t>(equal) : std::span<const uint32_t>());
    });
    framed += pending;
    pending = count;
    if (framed + pending == n_tasks) frame(into, framed, pending);
  }
  return finish_file(info, out, blobs);
}

}  // namespace

std::vector<uint8_t> write_cgkv_lossless(const ModelShape& shape, std::span<const Half> kv,
                                         size_t n_tokens, size_t chunk_tokens,
                                         std::span<const CgkvBlob> blobs, int zstd_level) {
  std::optional<MemoryOut> out;
  write_lossless(
      shape, kv, n_tokens, chunk_tokens, blobs, zstd_level,
      [&](uint64_t header, uint64_t guess) -> MemoryOut& { return out.emplace(header, guess); });
  return std::move(*out).take();
}

uint64_t write_cgkv_lossless(const CgkvWriteAt& write_at, const ModelShape& shape,
                             std::span<const Half> kv, size_t n_tokens, size_t chunk_tokens,
                             std::span<const CgkvBlob> blobs, int zstd_level) {
  std::optional<StreamOut> out;
  return write_lossless(
      shape, kv, n_tokens, chunk_tokens, blobs, zstd_level,
      [&](uint64_t header, uint64_t) -> StreamOut& { return out.emplace(header, write_at); });
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
