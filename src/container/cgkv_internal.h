// Internal: the container's frozen constants, header (de)serialisation and chunk payloads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "cachegen/container.h"

namespace cachegen {

// Where a reader's bytes come from: an owned buffer, or a file read with pread.
struct CgkvReader::Source {
  virtual ~Source() = default;
  virtual uint64_t size() const = 0;
  // Bytes [offset, offset + out.size()) into `out`; the caller has checked the range against
  // size().
  virtual void read_into(uint64_t offset, std::span<uint8_t> out) const = 0;
  std::vector<uint8_t> read(uint64_t offset, size_t n) const {
    std::vector<uint8_t> out(n);
    read_into(offset, out);
    return out;
  }
  // The same bytes in place when the source holds them in memory (no copy), else empty.
  virtual std::span<const uint8_t> view(uint64_t /*offset*/, size_t /*n*/) const { return {}; }
};

namespace detail {

inline constexpr uint8_t kCgkvMagic[4] = {'C', 'G', 'K', 'V'};
// The newest version read, and the one every writer writes (its chunk checksums are the
// fastest to verify); older ones are read as FORMAT.md's "Versions" says.
inline constexpr uint16_t kCgkvVersion = 7;
inline constexpr uint16_t kCgkvRowsDedupVersion = 3;  // the first version with lossless method 2
inline constexpr uint16_t kCgkvTransformVersion = 4;  // the first version with codec 2
inline constexpr uint16_t kCgkvXxh3Version = 5;       // the first with XXH3-64 chunk checksums
inline constexpr uint16_t kCgkvOneModelVersion = 6;   // the first with codec batch layout 2
inline constexpr uint16_t kCgkvDeltaHighVersion = 7;  // the first with lossless high form 2
inline constexpr uint16_t kCgkvOldestVersion = 1;
inline constexpr size_t kPreambleBytes = 32;
inline constexpr uint64_t kMaxHeaderBytes = 64ull << 20;
inline constexpr uint64_t kMaxTokens = 1ull << 40;
inline constexpr uint32_t kMaxBlobs = 64;
// A transform file's chunks hold at most 2^18 tokens: a tensor of all-zero components then
// still holds at most 2^18 values per byte (FORMAT.md, the chunk size rule).
inline constexpr size_t kMaxTransformChunkTokens = size_t{1} << 18;

std::shared_ptr<const CgkvReader::Source> memory_source(std::vector<uint8_t> bytes);
std::shared_ptr<const CgkvReader::Source> file_source(const std::string& path);
std::shared_ptr<const CgkvReader::Source> mapped_source(const std::string& path);

// Lays out header + chunks + blobs: fills every range (checksums at info.version) and returns
// the file.
std::vector<uint8_t> assemble_cgkv(CgkvInfo& info, const std::vector<std::vector<uint8_t>>& chunks,
                                   std::span<const CgkvBlob> blobs);
// Serialises a complete header (preamble, body, checksum) for `info`, whose chunk and blob
// ranges must already be final.
std::vector<uint8_t> serialize_header(const CgkvInfo& info);
// Header size for a given layer/chunk/blob count, RoPE block and transform block (ranges do
// not change it).
uint64_t header_size(size_t n_layers, size_t n_chunks, size_t n_blobs, bool has_rope,
                     bool transform);
// Parses and validates the header from a source.
CgkvInfo parse_header(const CgkvReader::Source& src);

uint64_t xxh64(std::span<const uint8_t> bytes);
// A chunk's checksum: version >= 2 hashes its tag (u64 index, u64 first token, u64 token
// count) before its bytes, so a chunk verifies only in the table entry it was written for;
// version 1 hashed the bytes alone. XXH3-64 from version 5, XXH64 before (both seed 0).
uint64_t chunk_checksum(uint16_t version, size_t index, const CgkvChunkInfo& chunk,
                        std::span<const uint8_t> bytes);
// The same over a chunk's bytes given piece by piece (a writer that never holds the chunk
// whole): update with each piece in order, then digest.
class ChunkHash {
 public:
  ChunkHash(uint16_t version, size_t index, const CgkvChunkInfo& chunk);
  ~ChunkHash();
  ChunkHash(const ChunkHash&) = delete;
  ChunkHash& operator=(const ChunkHash&) = delete;
  void update(std::span<const uint8_t> bytes);
  uint64_t digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Lossless fp16 tensor data (docs/FORMAT.md, "Chunk payload"): method 2 (rows predicted as a
// rotation of an earlier row, repeated rows by reference, anchored high bytes rANS-coded, low
// bytes raw or rANS-coded); with zstd_level > 0 also byte planes + zstd at that level, keeping
// the smaller. And back: every method a file of `version` may hold (method 2 from version 3,
// its high form 2 from version 7).
// `width` = values per row (n_kv_heads * head_dim). rotation_hint (one entry per row, or empty):
// an earlier row that row r may be a RoPE rotation of (UINT32_MAX: none), e.g. the rows whose V
// repeats an earlier V row (the same token) for layer 0's K. equal_rows (one entry per row, or
// empty): first_equal_rows(values, width) when the caller has it (the V rows, hashed once for
// the K tensor's hint and for their own repeats).
std::vector<uint8_t> pack_fp16_lossless(std::span<const Half> values, size_t width, int zstd_level,
                                        size_t head_dim = 0,
                                        std::span<const uint32_t> rotation_hint = {},
                                        std::span<const uint32_t> equal_rows = {});
// Per row of [rows, width]: the first earlier row equal to it, or UINT32_MAX.
std::vector<uint32_t> first_equal_rows(std::span<const Half> values, size_t width);
void unpack_fp16_lossless(std::span<const uint8_t> bytes, std::span<Half> out, size_t width,
                          const std::string& context, uint16_t version = kCgkvVersion);
// Two tensors of one row width (a layer's K and V) as unpack_fp16_lossless does each, a first:
// the same values, or the first failure's error. Method 2 tensors have their high
// byte planes decoded in lockstep (decode_expecting_pair).
struct LosslessTensor {
  std::span<const uint8_t> bytes;
  std::span<Half> out;
  const std::string* context = nullptr;
};
void unpack_fp16_lossless_pair(const LosslessTensor& a, const LosslessTensor& b, size_t width,
                               uint16_t version);

}  // namespace detail
}  // namespace cachegen
