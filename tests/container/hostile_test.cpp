// Every corrupt, truncated or forged .cgkv gives a clear error: never a crash or a huge
// allocation.
#include <gtest/gtest.h>

#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "cachegen/error.h"
#include "cachegen/npy.h"
#include "cachegen/runtime.h"
#include "codec/stream_format.h"
#include "container/container_test_util.h"
#include "core/wire.h"

namespace cachegen {
namespace {

std::vector<uint8_t> valid_file() {
  KVCacheConfig cfg;
  cfg.block_tokens = 64;
  return write_cgkv(test::filled_cache(100, cfg).cache, std::vector<CgkvBlob>{{1, {1, 2, 3, 4}}});
}

// Opens and fully reads; returns the error code (ok when everything decoded).
ErrorCode outcome(const std::vector<uint8_t>& b, std::string* msg = nullptr) {
  try {
    const CgkvReader r = CgkvReader::from_bytes(b);
    r.verify();
    return ErrorCode::ok;
  } catch (const Error& e) {
    if (msg) *msg = e.what();
    return e.code();
  }
}

void put_u32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(std::vector<uint8_t>& b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
// Re-signs the header after a deliberate edit (a forged but self-consistent header).
void resign(std::vector<uint8_t>& b) {
  const uint32_t hb = b[8] | b[9] << 8 | b[10] << 16 | static_cast<uint32_t>(b[11]) << 24;
  put_u64(b, hb - 8, XXH64(b.data(), hb - 8, 0));
}

TEST(Hostile, ValidFileIsAccepted) {
  EXPECT_EQ(outcome(valid_file()), ErrorCode::ok);
}

TEST(Hostile, ChunkTensorBytesFollowTheFraming) {
  const std::vector<uint8_t> f = valid_file();
  const CgkvReader r = CgkvReader::from_bytes(f);
  for (size_t c = 0; c < r.info().chunks.size(); ++c) {
    const std::vector<uint64_t> sizes = r.chunk_tensor_bytes(c);
    ASSERT_EQ(sizes.size(), 4u);  // 2 attention layers, K and V
    uint64_t framed = 0;
    for (uint64_t s : sizes) framed += wire::varint_size(s) + s;
    EXPECT_EQ(framed, r.info().chunks[c].range.bytes);
  }
  EXPECT_THROW(r.chunk_tensor_bytes(r.info().chunks.size()), Error);
}

TEST(Hostile, EveryTruncationIsAnError) {
  const std::vector<uint8_t> f = valid_file();
  for (size_t n = 0; n < f.size(); ++n) {
    ASSERT_NE(outcome(std::vector<uint8_t>(f.begin(), f.begin() + n)), ErrorCode::ok) << n;
  }
}

TEST(Hostile, EverySingleByteCorruptionIsDetected) {
  const std::vector<uint8_t> f = valid_file();
  for (size_t i = 0; i < f.size(); ++i) {
    std::vector<uint8_t> b = f;
    b[i] ^= 0x01;
    ASSERT_NE(outcome(b), ErrorCode::ok) << "flip at " << i;  // checksums cover every byte
  }
}

TEST(Hostile, ForgedHeadersNameTheField) {
  const std::vector<uint8_t> f = valid_file();
  struct Case {
    size_t at;
    int width;
    uint64_t value;
    ErrorCode code;
    const char* needle;
  };
  // Offsets: preamble 0..31; body: n_layers 32, heads 36, dim 40, group 44, n_tokens 48,
  // chunk_tokens 56, n_chunks 60, codec 64, param_mode 65, reserved 66.
  const Case cases[] = {
      {4, 2, 8, ErrorCode::unsupported_version, "version"},
      {4, 2, 0, ErrorCode::unsupported_version, "version"},
      {6, 2, 1, ErrorCode::corrupt_input, "flags"},
      {12, 4, 7, ErrorCode::corrupt_input, "reserved"},
      {32, 4, 0, ErrorCode::corrupt_input, "n_layers"},
      {36, 4, 1u << 30, ErrorCode::corrupt_input, "n_kv_heads"},
      {48, 8, uint64_t{1} << 50, ErrorCode::corrupt_input, "n_tokens"},
      {48, 8, 1000000, ErrorCode::corrupt_input, "n_chunks"},
      {56, 4, 33, ErrorCode::corrupt_input, "chunk_tokens"},
      {64, 4, 7, ErrorCode::corrupt_input, "codec"},
      {72, 4, 0x0109, ErrorCode::corrupt_input, "bits"},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> b = f;
    if (c.width == 2) {
      b[c.at] = static_cast<uint8_t>(c.value);
      b[c.at + 1] = static_cast<uint8_t>(c.value >> 8);
    } else if (c.width == 4) {
      put_u32(b, c.at, static_cast<uint32_t>(c.value));
    } else {
      put_u64(b, c.at, c.value);
    }
    if (c.at >= 32) resign(b);
    std::string msg;
    EXPECT_EQ(outcome(b, &msg), c.code) << c.needle << ": " << msg;
    EXPECT_NE(msg.find(c.needle), std::string::npos) << msg;
  }
}

TEST(Hostile, ForgedChunkRangesRejected) {
  std::vector<uint8_t> f = valid_file();
  const CgkvInfo info = CgkvReader::from_bytes(f).info();
  const size_t table = 32 + 36 + 4 * 3;  // first chunk entry: preamble, fixed body, 3 layers
  {
    std::vector<uint8_t> b = f;
    put_u64(b, table, 3);  // chunk 0 starts inside the header
    resign(b);
    std::string msg;
    EXPECT_EQ(outcome(b, &msg), ErrorCode::corrupt_input);
    EXPECT_NE(msg.find("chunk 0"), std::string::npos) << msg;
  }
  {
    std::vector<uint8_t> b = f;
    put_u64(b, table + 8, info.file_bytes);  // runs past the end
    resign(b);
    EXPECT_EQ(outcome(b), ErrorCode::corrupt_input);
  }
  {
    std::vector<uint8_t> b = f;
    put_u64(b, table + 24, info.chunks[0].range.offset);  // chunk 1 overlaps chunk 0
    resign(b);
    std::string msg;
    EXPECT_EQ(outcome(b, &msg), ErrorCode::corrupt_input);
    EXPECT_NE(msg.find("overlap"), std::string::npos) << msg;
  }
  {
    std::vector<uint8_t> b = f;
    b.push_back(0);  // trailing byte after the declared end
    EXPECT_EQ(outcome(b), ErrorCode::corrupt_input);
  }
}

// Offset of chunk entry 0 in the chunk table of a small_shape file without a RoPE block.
constexpr size_t kChunkTable = 32 + 36 + 4 * 3;

void swap_chunk_entries(std::vector<uint8_t>& b, size_t i, size_t j) {
  std::swap_ranges(b.begin() + static_cast<ptrdiff_t>(kChunkTable + 24 * i),
                   b.begin() + static_cast<ptrdiff_t>(kChunkTable + 24 * i + 24),
                   b.begin() + static_cast<ptrdiff_t>(kChunkTable + 24 * j));
}

TEST(Hostile, SwappedChunkEntriesAreDetected) {
  // Two chunks of the same shape: swapped table entries (header re-signed) would decode as
  // the wrong tokens if a chunk's checksum did not cover its place in the table.
  KVCacheConfig cfg;
  cfg.block_tokens = 64;
  std::vector<uint8_t> b = write_cgkv(test::filled_cache(128, cfg).cache);
  ASSERT_EQ(CgkvReader::from_bytes(b).info().version, 7);
  ASSERT_EQ(outcome(b), ErrorCode::ok);
  swap_chunk_entries(b, 0, 1);
  resign(b);
  std::string msg;
  EXPECT_EQ(outcome(b, &msg), ErrorCode::corrupt_input) << msg;
  EXPECT_NE(msg.find("chunk 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("checksum"), std::string::npos) << msg;
}

TEST(Hostile, VersionOneFilesStillRead) {
  // A version-1 file: chunk checksums over the bytes alone. It reads as before (and, as
  // FORMAT.md says, cannot detect swapped entries). (Blocks of codec batch layouts 0 and 1:
  // layout 2 needs version 6.)
  KVCacheConfig cfg;
  cfg.block_tokens = 64;
  cfg.one_model = false;
  const test::Filled f = test::filled_cache(128, cfg);
  const std::vector<uint8_t> written = write_cgkv(f.cache);
  std::vector<uint8_t> b = written;
  b[4] = 1;
  const CgkvInfo info = CgkvReader::from_bytes(written).info();
  for (size_t c = 0; c < info.chunks.size(); ++c) {
    const CgkvRange& r = info.chunks[c].range;
    put_u64(b, kChunkTable + 24 * c + 16, XXH64(b.data() + r.offset, r.bytes, 0));
  }
  resign(b);
  const CgkvReader r1 = CgkvReader::from_bytes(b);
  EXPECT_EQ(r1.info().version, 1);
  EXPECT_NO_THROW(r1.verify());
  const std::vector<Half> a = r1.read_tokens(0, 128),
                          e = CgkvReader::from_bytes(written).read_tokens(0, 128);
  ASSERT_EQ(a.size(), e.size());
  EXPECT_EQ(0, std::memcmp(a.data(), e.data(), a.size() * 2));
  // A newer version's checksum in a version-1 file does not verify.
  std::vector<uint8_t> mixed = written;
  mixed[4] = 1;
  resign(mixed);
  EXPECT_EQ(outcome(mixed), ErrorCode::corrupt_input);
}

// The chunk checksum of each version (FORMAT.md): XXH64 of tag + bytes in versions 2-4, XXH3-64
// from version 5, computed here with xxhash's own library; the files' values are the same, and
// a checksum of one version does not verify in the other.
uint64_t tagged_checksum(const std::vector<uint8_t>& file, size_t c, const CgkvChunkInfo& ci,
                         bool xxh3) {
  std::vector<uint8_t> t(24);
  put_u64(t, 0, c);
  put_u64(t, 8, ci.token_begin);
  put_u64(t, 16, ci.n_tokens);
  t.insert(t.end(), file.begin() + static_cast<ptrdiff_t>(ci.range.offset),
           file.begin() + static_cast<ptrdiff_t>(ci.range.offset + ci.range.bytes));
  return xxh3 ? XXH3_64bits(t.data(), t.size()) : XXH64(t.data(), t.size(), 0);
}

TEST(Hostile, ChunkChecksumsFollowTheVersion) {
  KVCacheConfig cfg;
  cfg.block_tokens = 64;
  cfg.one_model = false;  // codec batch layouts 0 and 1, which every version holds
  const test::Filled f = test::filled_cache(150, cfg);
  // Every SIMD path writes (and reads) the same checksums.
  const SimdPath path = simd_path();
  for (SimdPath p : {SimdPath::scalar, SimdPath::avx2, SimdPath::avx512}) {
    set_simd_path(p);
    const std::vector<uint8_t> written = write_cgkv(f.cache);
    const CgkvInfo info = CgkvReader::from_bytes(written).info();
    ASSERT_EQ(info.version, 7);
    ASSERT_EQ(info.chunks.size(), 3u);
    for (size_t c = 0; c < info.chunks.size(); ++c) {
      EXPECT_EQ(info.chunks[c].range.xxh64, tagged_checksum(written, c, info.chunks[c], true))
          << simd_path_name(simd_path()) << " chunk " << c;
    }
    EXPECT_NO_THROW(CgkvReader::from_bytes(written).verify());
    // As version 5: the same checksums.
    std::vector<uint8_t> v5 = written;
    v5[4] = 5;
    resign(v5);
    EXPECT_EQ(outcome(v5), ErrorCode::ok);
    // As an older version: refused until its checksums are XXH64's, then the same values.
    for (uint8_t version : {2, 3, 4}) {
      std::vector<uint8_t> b = written;
      b[4] = version;
      resign(b);
      EXPECT_EQ(outcome(b), ErrorCode::corrupt_input) << int{version};
      for (size_t c = 0; c < info.chunks.size(); ++c) {
        put_u64(b, kChunkTable + 24 * c + 16, tagged_checksum(written, c, info.chunks[c], false));
      }
      resign(b);
      const CgkvReader r = CgkvReader::from_bytes(b);
      EXPECT_NO_THROW(r.verify()) << int{version};
      const std::vector<Half> a = r.read_tokens(0, 150),
                              e = CgkvReader::from_bytes(written).read_tokens(0, 150);
      ASSERT_EQ(a.size(), e.size());
      EXPECT_EQ(0, std::memcmp(a.data(), e.data(), a.size() * 2)) << int{version};
    }
  }
  set_simd_path(path);
}

// Codec batch layout 2 (one model for every channel) came with version 6: in an older file it
// is corrupt input, named, even where everything else (checksums included) is consistent.
TEST(Hostile, OneModelBatchesNeedVersionSix) {
  KVCacheConfig cfg;
  cfg.block_tokens = 64;
  const std::vector<uint8_t> written = write_cgkv(test::filled_cache(150, cfg).cache);
  const CgkvReader r = CgkvReader::from_bytes(written);
  // The first tensor (its varint length first). The test cache's channels are alike: layout 2
  // is written.
  const std::vector<uint8_t> chunk = r.read_chunk(0);
  size_t at = 0;
  while (chunk.at(at) & 0x80) ++at;
  ASSERT_EQ(detail::batch_layout(std::span<const uint8_t>(chunk).subspan(at + 1)), 2);
  std::vector<uint8_t> b = written;
  b[4] = 5;  // version 5 has version 6's checksums
  resign(b);
  std::string msg;
  EXPECT_EQ(outcome(b, &msg), ErrorCode::corrupt_input);
  EXPECT_NE(msg.find("layout 2 in a file of version 5"), std::string::npos) << msg;
  EXPECT_EQ(outcome(written), ErrorCode::ok);
}

TEST(Hostile, ChunksTooSmallForTheirTokensAreRejectedOnOpen) {
  // A re-signed header claiming 2^24 tokens in one chunk of a few hundred bytes: read_tokens
  // would allocate 2^30 values (2 GiB) before finding out. The chunk's size bounds what it can
  // decode to (>= 2 bits per group parameter), so opening the file refuses it.
  KVCacheConfig cfg;
  cfg.block_tokens = 64;
  std::vector<uint8_t> b = write_cgkv(test::filled_cache(64, cfg).cache);
  put_u64(b, 48, uint64_t{1} << 24);  // n_tokens
  put_u32(b, 56, 1u << 24);           // chunk_tokens (n_chunks stays 1)
  resign(b);
  std::string msg;
  try {
    CgkvReader::from_bytes(b);
    FAIL() << "opened";
  } catch (const Error& e) {
    msg = e.what();
    EXPECT_EQ(e.code(), ErrorCode::corrupt_input) << msg;
  }
  EXPECT_NE(msg.find("chunk 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("too small"), std::string::npos) << msg;
}

// A self-consistent file whose one attention layer is recomputed: n_chunks empty chunks and,
// when id_bytes > 0, a token_ids blob of that many zero bytes. Checksums are valid.
std::vector<uint8_t> recomputed_only_file(uint64_t n_tokens, uint32_t chunk_tokens,
                                          uint64_t id_bytes) {
  const uint64_t n_chunks = (n_tokens + chunk_tokens - 1) / chunk_tokens;
  const uint32_t n_blobs = id_bytes ? 1 : 0;
  const uint64_t header_bytes = 32 + 36 + 4 + 24 * n_chunks + 4 + 32 * n_blobs + 8;
  std::vector<uint8_t> b(header_bytes + id_bytes, 0);
  std::memcpy(b.data(), "CGKV", 4);
  b[4] = 2;
  put_u32(b, 8, static_cast<uint32_t>(header_bytes));
  put_u64(b, 16, b.size());
  put_u32(b, 32, 1);  // n_layers
  put_u32(b, 36, 1);  // n_kv_heads
  put_u32(b, 40, 1);  // head_dim
  put_u32(b, 44, 1);  // group_size
  put_u64(b, 48, n_tokens);
  put_u32(b, 56, chunk_tokens);
  put_u32(b, 60, static_cast<uint32_t>(n_chunks));
  b[70] = 3;  // layer 0: bits 0/0, attention + recomputed
  size_t at = 72;
  for (uint64_t c = 0; c < n_chunks; ++c, at += 24) {
    const uint64_t tag[3] = {c, c * chunk_tokens,
                             std::min<uint64_t>(chunk_tokens, n_tokens - c * chunk_tokens)};
    put_u64(b, at, header_bytes);
    put_u64(b, at + 16, XXH64(tag, sizeof tag, 0));  // the tag and no bytes (little-endian host)
  }
  put_u32(b, at, n_blobs);
  if (n_blobs) {
    put_u32(b, at + 4, 1);  // token ids
    put_u64(b, at + 12, header_bytes);
    put_u64(b, at + 20, id_bytes);
    put_u64(b, at + 28, XXH64(b.data() + header_bytes, id_bytes, 0));
  }
  resign(b);
  return b;
}

TEST(Hostile, RecomputedOnlyFileClaimingHugeTokenCountIsRejectedOnOpen) {
  // 1.5 MB, valid checksums, 2^40 tokens in 65,536 empty chunks: verify once zeroed 2^24
  // values per chunk (hours). Without stored layers the token ids are the content, and there
  // are none: refused when opened, before any chunk is read.
  const std::vector<uint8_t> b = recomputed_only_file(uint64_t{1} << 40, 1u << 24, 0);
  ASSERT_LT(b.size(), 2u << 20);
  std::string msg;
  try {
    CgkvReader::from_bytes(b);
    FAIL() << "opened";
  } catch (const Error& e) {
    msg = e.what();
    EXPECT_EQ(e.code(), ErrorCode::corrupt_input) << msg;
  }
  EXPECT_NE(msg.find("token_ids"), std::string::npos) << msg;
}

TEST(Hostile, VerifyOfRecomputedOnlyFileAllocatesNothingPerToken) {
  // 65,536 empty chunks of 16 tokens with their ids: verify checks every checksum in
  // O(chunks) and decodes nothing; a reader limit of one value shows no per-token buffer.
  CgkvReader r = CgkvReader::from_bytes(recomputed_only_file(uint64_t{16} << 16, 16, 4u << 20));
  ASSERT_EQ(r.info().chunks.size(), 65536u);
  r.set_max_elements(1);
  EXPECT_NO_THROW(r.verify());
}

TEST(Hostile, ReadsOverTheReadersLimitAreRefusedBeforeAllocating) {
  // The header's token count and shape size the output: a reader refuses a read over its
  // limit before allocating (a forged header cannot ask for a huge buffer).
  KVCacheConfig cfg;
  cfg.block_tokens = 64;
  CgkvReader r = CgkvReader::from_bytes(write_cgkv(test::filled_cache(100, cfg).cache));
  r.set_max_elements(1000);
  try {
    r.read_tokens(0, 100);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("limit"), std::string::npos) << e.what();
  }
  r.set_max_elements(size_t{1} << 30);
  EXPECT_EQ(r.read_tokens(0, 100).size(), 2u * 2 * 100 * 16);
}

TEST(Hostile, GarbageAndEmptyInputs) {
  EXPECT_EQ(outcome({}), ErrorCode::truncated_input);
  EXPECT_EQ(outcome(std::vector<uint8_t>(31, 0)), ErrorCode::truncated_input);
  EXPECT_EQ(outcome(std::vector<uint8_t>(4096, 0xff)), ErrorCode::corrupt_input);
  EXPECT_THROW(CgkvReader::open_file("/nonexistent/x.cgkv"), Error);
  // A mapped file: the same errors as one read, naming the file.
  const std::string path = ::testing::TempDir() + "/cachegen_hostile_mapped.cgkv";
  for (const std::vector<uint8_t>& bytes :
       {std::vector<uint8_t>(), std::vector<uint8_t>(31, 0), std::vector<uint8_t>(4096, 0xff)}) {
    write_file_atomic(path, bytes);
    ErrorCode read_code = ErrorCode::ok, mapped_code = ErrorCode::ok;
    try {
      CgkvReader::open_file(path);
    } catch (const Error& e) {
      read_code = e.code();
    }
    try {
      CgkvReader::map_file(path);
    } catch (const Error& e) {
      mapped_code = e.code();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
    EXPECT_EQ(mapped_code, read_code);
    EXPECT_EQ(mapped_code, outcome(bytes));
  }
  std::remove(path.c_str());
  try {
    CgkvReader::map_file("/nonexistent/x.cgkv");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found);
  }
}

}  // namespace
}  // namespace cachegen
