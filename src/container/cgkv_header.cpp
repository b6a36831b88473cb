// The .cgkv preamble and header: writing, and reading with every field validated.
#include <algorithm>
#include <cmath>
#include <string>

#include "cachegen/error.h"
#include "cachegen/transform.h"
#include "container/cgkv_internal.h"
#include "core/wire.h"

namespace cachegen {

int CgkvInfo::n_attention_layers() const {
  return static_cast<int>(std::count_if(layers.begin(), layers.end(),
                                        [](const CgkvLayerInfo& l) { return l.attention; }));
}

std::vector<int> CgkvInfo::recomputed_layers() const {
  std::vector<int> out;
  for (size_t l = 0; l < layers.size(); ++l) {
    if (layers[l].recomputed) out.push_back(static_cast<int>(l));
  }
  return out;
}

size_t CgkvInfo::n_elements() const {
  return static_cast<size_t>(n_attention_layers()) * 2 * n_tokens *
         static_cast<size_t>(n_kv_heads) * static_cast<size_t>(head_dim);
}

namespace detail {
namespace {

[[noreturn]] void corrupt(const std::string& m) {
  throw Error(ErrorCode::corrupt_input, "cgkv: " + m);
}

constexpr size_t kBodyFixedBytes = 4 * 4 + 8 + 4 + 4 + 4;  // through the reserved u16
constexpr size_t kLayerBytes = 4, kChunkBytes = 24, kBlobBytes = 32, kRopeBytes = 16;
// The transform block: u64 profile_id, u32 sink_tokens, f32 sink_scale; per layer 2 x f32.
constexpr size_t kTransformFixedBytes = 16, kTransformLayerBytes = 8;
constexpr float kMaxStep = 1e30f;
constexpr uint8_t kFlagAttention = 1, kFlagRecomputed = 2;

void check(bool ok, const std::string& what) {
  if (!ok) corrupt(what);
}

void check_range(const CgkvRange& r, uint64_t header_bytes, uint64_t file_bytes,
                 const std::string& name) {
  check(r.offset >= header_bytes && r.offset <= file_bytes && r.bytes <= file_bytes - r.offset,
        name + " range [" + std::to_string(r.offset) + ", +" + std::to_string(r.bytes) +
            ") lies outside the data area [" + std::to_string(header_bytes) + ", " +
            std::to_string(file_bytes) + ")");
}

}  // namespace

uint64_t header_size(size_t n_layers, size_t n_chunks, size_t n_blobs, bool has_rope,
                     bool transform) {
  return kPreambleBytes + kBodyFixedBytes + kLayerBytes * n_layers + (has_rope ? kRopeBytes : 0) +
         (transform ? kTransformFixedBytes + kTransformLayerBytes * n_layers : 0) +
         kChunkBytes * n_chunks + 4 + kBlobBytes * n_blobs + 8;
}

namespace {

// The RoPE block (16 bytes): f32 freq_base, f32 freq_scale, u16 n_rot, u8 mode, u8 reserved,
// i32 position_offset.
void read_rope(wire::Reader& r, CgkvInfo& info) {
  info.rope.freq_base = r.f32("rope freq_base");
  info.rope.freq_scale = r.f32("rope freq_scale");
  const uint16_t n_rot = r.u16("rope n_rot");
  const uint8_t mode = r.u8("rope mode");
  r.expect_zero(1, "rope reserved");
  info.rope_position_offset = r.i32("rope position_offset");
  info.rope.n_rot = n_rot;
  const std::string problem = info.rope.problem(static_cast<size_t>(info.head_dim));
  check(problem.empty(), "rope " + problem);
  check(mode <= 1, "rope mode " + std::to_string(mode) + " is not 0 (adjacent) or 1 (NEOX)");
  check(info.rope_position_offset >= 0 &&
            int64_t{info.rope_position_offset} + static_cast<int64_t>(info.n_tokens) <=
                int64_t{INT32_MAX} + 1,
        "rope position_offset " + std::to_string(info.rope_position_offset) +
            " is negative or puts positions past 2^31 - 1");
  info.rope.neox = mode == 1;
}

// What the bytes present can hold (FORMAT.md, "Work and memory bounds"): every later
// allocation and loop is proportional to these, never to n_tokens alone. O(chunks).
void check_content_bounds(const CgkvInfo& info) {
  uint64_t stored_tensors = 0;
  for (const CgkvLayerInfo& l : info.layers) stored_tensors += l.attention && !l.recomputed ? 2 : 0;
  if (stored_tensors == 0) {
    // Every attention layer is recomputed from the token ids: the ids are the content.
    uint64_t id_bytes = 0;
    for (const CgkvBlobInfo& b : info.blobs) {
      if (b.kind == static_cast<uint32_t>(BlobKind::token_ids)) {
        id_bytes = b.range.bytes;
        break;
      }
    }
    check(id_bytes / 4 >= info.n_tokens,
          "every attention layer is recomputed, but the token_ids blob holds " +
              std::to_string(id_bytes / 4) + " ids for " + std::to_string(info.n_tokens) +
              " tokens");
    for (size_t c = 0; c < info.chunks.size(); ++c) {
      check(info.chunks[c].range.bytes == 0,
            "chunk " + std::to_string(c) + " has bytes, but no layer is stored");
    }
    return;
  }
  const auto H = static_cast<unsigned __int128>(info.n_kv_heads);
  const auto D = static_cast<unsigned __int128>(info.head_dim);
  for (size_t c = 0; c < info.chunks.size(); ++c) {
    const CgkvChunkInfo& ci = info.chunks[c];
    const unsigned __int128 bytes = ci.range.bytes;
    bool ok = bytes >= stored_tensors;  // a varint length per tensor
    if (info.codec == ContainerCodec::quantized) {
      // Every head record spends >= 2 bits on each group's parameters of each channel.
      const uint64_t groups = (ci.n_tokens + info.group_size - 1) / info.group_size;
      ok = ok && stored_tensors * H * groups * D <= 4 * bytes;
    } else if (info.codec == ContainerCodec::transform) {
      // A coefficient plane stream spends >= 2 bits per group (<= 65536 rows) and channel.
      ok = ok && stored_tensors * H * ci.n_tokens * D <= (bytes << 18);
    } else {
      // A zstd block expands at most 32768x (an RLE block: 4 bytes -> 128 KiB); a plane code
      // stream spends >= 2 bits per group (<= 65536 rows) and channel.
      ok = ok && stored_tensors * H * ci.n_tokens * D <= (bytes << 17);
    }
    check(ok, "chunk " + std::to_string(c) + " (" + std::to_string(ci.range.bytes) +
                  " bytes) is too small for " + std::to_string(ci.n_tokens) + " tokens of " +
                  std::to_string(stored_tensors) + " stored tensors");
  }
}

}  // namespace

std::vector<uint8_t> serialize_header(const CgkvInfo& info) {
  // Never write a RoPE block the reader refuses (invalid_argument naming the field).
  if (info.has_rope) info.rope.validate(static_cast<size_t>(info.head_dim));
  std::vector<uint8_t> out;
  out.reserve(static_cast<size_t>(info.header_bytes));
  wire::Writer w(out);
  for (uint8_t m : kCgkvMagic) w.u8(m);
  w.u16(info.version);
  w.zeros(2);  // flags
  w.u32(static_cast<uint32_t>(info.header_bytes));
  w.zeros(4);
  w.u64(info.file_bytes);
  w.zeros(8);
  w.u32(static_cast<uint32_t>(info.n_layers));
  w.u32(static_cast<uint32_t>(info.n_kv_heads));
  w.u32(static_cast<uint32_t>(info.head_dim));
  w.u32(static_cast<uint32_t>(info.group_size));
  w.u64(info.n_tokens);
  w.u32(static_cast<uint32_t>(info.chunk_tokens));
  w.u32(static_cast<uint32_t>(info.chunks.size()));
  w.u8(static_cast<uint8_t>(info.codec));
  w.u8(static_cast<uint8_t>(info.param_mode));
  w.zeros(2);
  for (const CgkvLayerInfo& l : info.layers) {
    w.u8(static_cast<uint8_t>(l.key_bits));
    w.u8(static_cast<uint8_t>(l.value_bits));
    w.u8(static_cast<uint8_t>((l.attention ? kFlagAttention : 0) |
                              (l.recomputed ? kFlagRecomputed : 0)));
    w.u8(static_cast<uint8_t>(l.key_transform));
  }
  if (info.has_rope) {
    w.f32(info.rope.freq_base);
    w.f32(info.rope.freq_scale);
    w.u16(static_cast<uint16_t>(info.rope.n_rot));
    w.u8(info.rope.neox ? 1 : 0);
    w.zeros(1);
    w.i32(info.rope_position_offset);
  }
  if (info.codec == ContainerCodec::transform) {
    w.u64(info.profile_id);
    w.u32(info.sink_tokens);
    w.f32(info.sink_scale);
    for (const CgkvLayerInfo& l : info.layers) {
      w.f32(l.key_step);
      w.f32(l.value_step);
    }
  }
  for (const CgkvChunkInfo& c : info.chunks) {
    w.u64(c.range.offset);
    w.u64(c.range.bytes);
    w.u64(c.range.xxh64);
  }
  w.u32(static_cast<uint32_t>(info.blobs.size()));
  for (const CgkvBlobInfo& b : info.blobs) {
    w.u32(b.kind);
    w.zeros(4);
    w.u64(b.range.offset);
    w.u64(b.range.bytes);
    w.u64(b.range.xxh64);
  }
  w.u64(xxh64(out));
  if (out.size() != info.header_bytes)
    throw Error(ErrorCode::invalid_argument, "cgkv: header size mismatch");
  return out;
}

CgkvInfo parse_header(const CgkvReader::Source& src) {
  const uint64_t actual = src.size();
  if (actual < kPreambleBytes) {
    throw Error(ErrorCode::truncated_input,
                "cgkv: " + std::to_string(actual) + " bytes, shorter than the 32-byte preamble");
  }
  const std::vector<uint8_t> pre = src.read(0, kPreambleBytes);
  wire::Reader p(pre, "cgkv preamble");
  CgkvInfo info;
  const auto magic = p.take(4, "magic");
  check(std::equal(magic.begin(), magic.end(), kCgkvMagic), "bad magic (not a .cgkv file)");
  info.version = p.u16("version");
  if (info.version < kCgkvOldestVersion || info.version > kCgkvVersion) {
    throw Error(ErrorCode::unsupported_version,
                "cgkv: format version " + std::to_string(info.version) + " (this build reads " +
                    std::to_string(kCgkvOldestVersion) + ".." + std::to_string(kCgkvVersion) + ")");
  }
  p.expect_zero(2, "flags");
  info.header_bytes = p.u32("header_bytes");
  p.expect_zero(4, "reserved");
  info.file_bytes = p.u64("file_bytes");
  p.expect_zero(8, "reserved");
  check(info.header_bytes > kPreambleBytes + 8 && info.header_bytes <= kMaxHeaderBytes,
        "header_bytes " + std::to_string(info.header_bytes) + " out of range");
  if (actual < info.file_bytes || actual < info.header_bytes) {
    throw Error(ErrorCode::truncated_input,
                "cgkv: file has " + std::to_string(actual) + " bytes, its header declares " +
                    std::to_string(std::max(info.file_bytes, info.header_bytes)));
  }
  check(actual == info.file_bytes,
        "file has " + std::to_string(actual - info.file_bytes) + " bytes after its declared end");

  const std::vector<uint8_t> hdr = src.read(0, static_cast<size_t>(info.header_bytes));
  const std::span<const uint8_t> signed_part(hdr.data(), hdr.size() - 8);
  wire::Reader tail(std::span<const uint8_t>(hdr).subspan(hdr.size() - 8), "cgkv header",
                    hdr.size() - 8);
  check(tail.u64("header_xxh64") == xxh64(signed_part), "header checksum mismatch");

  wire::Reader r(
      std::span<const uint8_t>(hdr).subspan(kPreambleBytes, hdr.size() - kPreambleBytes - 8),
      "cgkv header", kPreambleBytes);
  const uint32_t n_layers = r.u32("n_layers"), heads = r.u32("n_kv_heads"), dim = r.u32("head_dim");
  const uint32_t gs = r.u32("group_size");
  const uint64_t n_tokens = r.u64("n_tokens");
  const uint32_t chunk_tokens = r.u32("chunk_tokens"), n_chunks = r.u32("n_chunks");
  const uint8_t codec = r.u8("codec"), param_mode = r.u8("param_mode");
  r.expect_zero(2, "reserved");
  check(n_layers >= 1 && n_layers <= 4096,
        "n_layers " + std::to_string(n_layers) + " out of range 1..4096");
  check(heads >= 1 && heads <= 65536, "n_kv_heads " + std::to_string(heads) + " out of range");
  check(dim >= 1 && dim <= 65536, "head_dim " + std::to_string(dim) + " out of range");
  check(gs >= 1 && gs <= 65536, "group_size " + std::to_string(gs) + " out of range");
  check(n_tokens <= kMaxTokens, "n_tokens " + std::to_string(n_tokens) + " exceeds 2^40");
  check(chunk_tokens >= 1 && chunk_tokens <= (1u << 24) && chunk_tokens % gs == 0,
        "chunk_tokens " + std::to_string(chunk_tokens) +
            " is not a multiple of group_size up to 2^24");
  check(n_chunks == (n_tokens + chunk_tokens - 1) / chunk_tokens,
        "n_chunks " + std::to_string(n_chunks) + " does not cover n_tokens " +
            std::to_string(n_tokens));
  check(codec <= 2, "unknown codec " + std::to_string(codec));
  check(codec != 2 || info.version >= kCgkvTransformVersion,
        "codec 2 (transform) in a version " + std::to_string(info.version) + " file");
  check(codec != 2 || gs == 1, "a transform file's group_size must be 1");
  check(codec != 2 || chunk_tokens <= kMaxTransformChunkTokens,
        "a transform file's chunk_tokens " + std::to_string(chunk_tokens) + " exceeds 2^18");
  check(param_mode <= 1, "unknown param_mode " + std::to_string(param_mode));
  // The body's size is fixed by these counts: check it before reading the tables.
  if (r.remaining() < kLayerBytes * n_layers + kChunkBytes * uint64_t{n_chunks} + 4) {
    throw Error(ErrorCode::truncated_input,
                "cgkv: header too short for its layer and chunk tables");
  }
  info.n_layers = static_cast<int>(n_layers);
  info.n_kv_heads = static_cast<int>(heads);
  info.head_dim = static_cast<int>(dim);
  info.group_size = gs;
  info.n_tokens = n_tokens;
  info.chunk_tokens = chunk_tokens;
  info.codec = static_cast<ContainerCodec>(codec);
  info.param_mode = static_cast<ParamMode>(param_mode);
  for (uint32_t l = 0; l < n_layers; ++l) {
    CgkvLayerInfo li;
    const std::string layer = "layer " + std::to_string(l);
    li.key_bits = r.u8("key_bits");
    li.value_bits = r.u8("value_bits");
    const uint8_t flags = r.u8("layer_flags");
    const uint8_t transform = r.u8("key_transform");
    check((flags & ~(kFlagAttention | kFlagRecomputed)) == 0,
          layer + ": reserved layer_flags bits set (flags " + std::to_string(flags) + ")");
    li.attention = (flags & kFlagAttention) != 0;
    li.recomputed = (flags & kFlagRecomputed) != 0;
    check(transform <= 1, layer + ": unknown key transform " + std::to_string(transform));
    li.key_transform = static_cast<KeyTransform>(transform);
    const bool lossy = li.attention && info.codec != ContainerCodec::lossless_fp16;
    check(!li.recomputed || lossy,
          layer + ": recompute flag on a " +
              (li.attention ? "lossless file's layer" : "layer without attention"));
    check(transform == 0 || (lossy && !li.recomputed),
          layer + ": key transform " + std::to_string(transform) +
              " on a layer that stores no quantized keys");
    info.has_rope = info.has_rope || transform == 1;
    const bool quantized = lossy && !li.recomputed && info.codec == ContainerCodec::quantized;
    const auto bits_ok = [&](int b) { return quantized ? (b >= 1 && b <= 8) : b == 0; };
    check(bits_ok(li.key_bits) && bits_ok(li.value_bits),
          "layer " + std::to_string(l) + ": bits " + std::to_string(li.key_bits) + "/" +
              std::to_string(li.value_bits) + " invalid for its kind");
    info.layers.push_back(li);
  }
  check(info.n_attention_layers() >= 1, "no attention layer");
  if (info.has_rope) {  // the RoPE block follows the layer table; sized before the tables
    if (r.remaining() < kRopeBytes + kChunkBytes * uint64_t{n_chunks} + 4) {
      throw Error(ErrorCode::truncated_input, "cgkv: header too short for its RoPE block");
    }
    read_rope(r, info);
  }
  if (info.codec == ContainerCodec::transform) {
    if (r.remaining() < kTransformFixedBytes + kTransformLayerBytes * uint64_t{n_layers} +
                            kChunkBytes * uint64_t{n_chunks} + 4) {
      throw Error(ErrorCode::truncated_input, "cgkv: header too short for its transform block");
    }
    info.profile_id = r.u64("profile_id");
    info.sink_tokens = r.u32("sink_tokens");
    info.sink_scale = r.f32("sink_scale");
    check(std::isfinite(info.sink_scale) && info.sink_scale > 0 && info.sink_scale <= 1,
          "sink_scale is not in (0, 1]");
    for (uint32_t l = 0; l < n_layers; ++l) {
      CgkvLayerInfo& li = info.layers[l];
      li.key_step = r.f32("key_step");
      li.value_step = r.f32("value_step");
      const bool stored = li.attention && !li.recomputed;
      const auto step_ok = [&](float s) {
        return stored ? std::isfinite(s) && s > 0 && s <= kMaxStep : s == 0;
      };
      check(step_ok(li.key_step) && step_ok(li.value_step),
            "layer " + std::to_string(l) + ": steps " + std::to_string(li.key_step) + "/" +
                std::to_string(li.value_step) + " invalid for its kind");
    }
  }
  for (uint32_t c = 0; c < n_chunks; ++c) {
    CgkvChunkInfo ci;
    ci.range = {r.u64("chunk offset"), r.u64("chunk bytes"), r.u64("chunk xxh64")};
    ci.token_begin = size_t{c} * chunk_tokens;
    ci.n_tokens = static_cast<size_t>(std::min<uint64_t>(chunk_tokens, n_tokens - ci.token_begin));
    check_range(ci.range, info.header_bytes, info.file_bytes, "chunk " + std::to_string(c));
    info.chunks.push_back(ci);
  }
  const uint32_t n_blobs = r.u32("n_blobs");
  check(n_blobs <= kMaxBlobs, "n_blobs " + std::to_string(n_blobs) + " exceeds 64");
  for (uint32_t b = 0; b < n_blobs; ++b) {
    CgkvBlobInfo bi;
    bi.kind = r.u32("blob kind");
    r.expect_zero(4, "blob reserved");
    bi.range = {r.u64("blob offset"), r.u64("blob bytes"), r.u64("blob xxh64")};
    check_range(bi.range, info.header_bytes, info.file_bytes, "blob " + std::to_string(b));
    info.blobs.push_back(bi);
  }
  check(r.remaining() == 0,
        std::to_string(r.remaining()) + " unexplained bytes at the end of the header");
  // No two data ranges may overlap (empty ones hold nothing: a file whose layers are all
  // recomputed has its empty chunks where its first blob starts).
  std::vector<CgkvRange> all;
  for (const auto& c : info.chunks) {
    if (c.range.bytes) all.push_back(c.range);
  }
  for (const auto& b : info.blobs) {
    if (b.range.bytes) all.push_back(b.range);
  }
  std::sort(all.begin(), all.end(),
            [](const CgkvRange& a, const CgkvRange& b) { return a.offset < b.offset; });
  for (size_t i = 1; i < all.size(); ++i) {
    check(all[i - 1].offset + all[i - 1].bytes <= all[i].offset,
          "data ranges overlap at offset " + std::to_string(all[i].offset));
  }
  check_content_bounds(info);
  return info;
}

}  // namespace detail
}  // namespace cachegen
