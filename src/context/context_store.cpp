// Prefix-keyed chunks in a Store (contract: cachegen/context_store.h; bytes: docs/FORMAT.md,
// "Context store").
#include "cachegen/context_store.h"

#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "cachegen/container.h"
#include "cachegen/error.h"
#include "core/wire.h"

namespace cachegen {
namespace {

constexpr uint32_t kManifestMagic = 0x4D434743;  // "CGCM"
constexpr uint8_t kManifestVersion = 1;
constexpr size_t kMaxLevelName = 32;
constexpr int kManifestMergeAttempts = 16;

std::string hex(const uint8_t* p, size_t n) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = digits[p[i] >> 4];
    s[2 * i + 1] = digits[p[i] & 15];
  }
  return s;
}

std::string hex64(uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (56 - 8 * i));
  return hex(b, 8);
}

ChunkKey chain(const ChunkKey& parent, std::string_view fingerprint,
               std::span<const int32_t> tokens) {
  XXH3_state_t* st = XXH3_createState();
  if (st == nullptr) throw Error(ErrorCode::io_error, "context store: out of memory");
  XXH3_128bits_reset(st);
  XXH3_128bits_update(st, parent.bytes.data(), parent.bytes.size());
  const uint64_t fp_len = fingerprint.size();
  uint8_t len_le[8];
  wire::store_le(len_le, fp_len, 8);
  XXH3_128bits_update(st, len_le, 8);
  XXH3_128bits_update(st, fingerprint.data(), fingerprint.size());
  std::vector<uint8_t> le(tokens.size() * 4);
  for (size_t i = 0; i < tokens.size(); ++i)
    wire::store_le(&le[4 * i], static_cast<uint32_t>(tokens[i]), 4);
  XXH3_128bits_update(st, le.data(), le.size());
  const XXH128_hash_t h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  ChunkKey k;
  std::memcpy(k.bytes.data(), c.digest, 16);
  return k;
}

[[noreturn]] void corrupt(const std::string& why) {
  throw Error(ErrorCode::corrupt_input, "context store: " + why);
}

}  // namespace

std::string ChunkKey::hex() const {
  return cachegen::hex(bytes.data(), bytes.size());
}

const ChunkLevelEntry* StoredChunk::find(std::string_view level) const {
  for (const ChunkLevelEntry& e : levels) {
    if (e.level == level) return &e;
  }
  return nullptr;
}

void check_level_name(std::string_view level) {
  const bool ok = !level.empty() && level.size() <= kMaxLevelName &&
                  std::all_of(level.begin(), level.end(), [](char c) {
                    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
                  });
  if (!ok) {
    throw Error(ErrorCode::invalid_argument,
                "context store: a level name is 1..32 bytes of [a-z0-9_-], not '" +
                    std::string(level.substr(0, 40)) + "'");
  }
}

ContextStore::ContextStore(Store& store, std::string model_fingerprint, ContextStoreOptions options)
    : store_(store), fingerprint_(std::move(model_fingerprint)), options_(std::move(options)) {
  if (options_.chunk_tokens == 0 || options_.chunk_tokens > (size_t{1} << 20)) {
    throw Error(ErrorCode::invalid_argument, "context store: chunk_tokens must be 1..2^20, not " +
                                                 std::to_string(options_.chunk_tokens));
  }
  if (options_.max_levels == 0 || options_.max_levels > 255) {
    throw Error(ErrorCode::invalid_argument, "context store: max_levels must be 1..255");
  }
  model_dir_ =
      options_.key_prefix + hex64(XXH64(fingerprint_.data(), fingerprint_.size(), 0)) + "/";
  check_store_key(model_dir_ + std::string(32, '0') + "/manifest");
}

std::vector<ChunkKey> ContextStore::chunk_keys(std::span<const int32_t> tokens) const {
  const size_t n = tokens.size() / options_.chunk_tokens;
  std::vector<ChunkKey> keys;
  keys.reserve(n);
  ChunkKey parent;
  for (size_t i = 0; i < n; ++i) {
    parent = chain(parent, fingerprint_,
                   tokens.subspan(i * options_.chunk_tokens, options_.chunk_tokens));
    keys.push_back(parent);
  }
  return keys;
}

std::string ContextStore::manifest_key(const ChunkKey& key) const {
  return model_dir_ + key.hex() + "/manifest";
}

std::string ContextStore::value_key(const ChunkKey& key, std::string_view level,
                                    uint64_t checksum) const {
  check_level_name(level);
  return model_dir_ + key.hex() + "/" + std::string(level) + "/" + hex64(checksum);
}

std::vector<uint8_t> ContextStore::encode_manifest(const ChunkKey& key, const StoredChunk& c) {
  std::vector<uint8_t> out;
  wire::Writer w(out);
  w.u32(kManifestMagic);
  w.u8(kManifestVersion);
  w.zeros(3);
  w.bytes(key.bytes);
  w.u64(c.index);
  w.u32(static_cast<uint32_t>(c.n_tokens));
  w.u8(static_cast<uint8_t>(c.levels.size()));
  for (const ChunkLevelEntry& e : c.levels) {
    check_level_name(e.level);
    w.u8(static_cast<uint8_t>(e.level.size()));
    w.bytes(std::span(reinterpret_cast<const uint8_t*>(e.level.data()), e.level.size()));
    w.u64(e.bytes);
    w.u64(e.checksum);
  }
  w.u64(XXH64(out.data(), out.size(), 0));
  return out;
}

StoredChunk ContextStore::decode_manifest(std::span<const uint8_t> bytes,
                                          const ChunkKey& expected_key, size_t max_levels) {
  wire::Reader r(bytes, "context manifest");
  if (r.u32("magic") != kManifestMagic) corrupt("manifest: bad magic");
  const uint8_t version = r.u8("version");
  if (version != kManifestVersion) {
    throw Error(ErrorCode::unsupported_version,
                "context store: manifest version " + std::to_string(version) + " (this reader: 1)");
  }
  r.expect_zero(3, "reserved");
  StoredChunk c;
  const std::span<const uint8_t> key = r.take(16, "chunk key");
  std::copy(key.begin(), key.end(), c.key.bytes.begin());
  if (!(c.key == expected_key)) corrupt("manifest: it names another chunk key");
  const uint64_t index = r.u64("chunk index");
  const uint32_t n_tokens = r.u32("n_tokens");
  const uint8_t n_levels = r.u8("n_levels");
  if (n_levels == 0 || n_levels > max_levels) {
    corrupt("manifest: " + std::to_string(n_levels) + " levels (1.." + std::to_string(max_levels) +
            " allowed)");
  }
  for (uint8_t i = 0; i < n_levels; ++i) {
    ChunkLevelEntry e;
    const uint8_t len = r.u8("level name length");
    const std::span<const uint8_t> name = r.take(len, "level name");
    e.level.assign(name.begin(), name.end());
    try {
      check_level_name(e.level);
    } catch (const Error&) {
      corrupt("manifest: level " + std::to_string(i) + " has a malformed name");
    }
    if (!c.levels.empty() && !(c.levels.back().level < e.level)) {
      corrupt("manifest: levels are not sorted by name without repeats");
    }
    e.bytes = r.u64("level bytes");
    e.checksum = r.u64("level checksum");
    c.levels.push_back(std::move(e));
  }
  const size_t covered = r.offset();
  const uint64_t sum = r.u64("manifest checksum");
  if (sum != XXH64(bytes.data(), covered, 0)) corrupt("manifest: checksum mismatch");
  r.expect_end("the manifest checksum");
  c.index = static_cast<size_t>(index);
  c.n_tokens = n_tokens;
  return c;
}

std::vector<StoredChunk> ContextStore::lookup(std::span<const int32_t> tokens,
                                              std::string* why) const {
  std::vector<StoredChunk> out;
  const std::vector<ChunkKey> keys = chunk_keys(tokens);
  for (size_t i = 0; i < keys.size(); ++i) {
    std::optional<std::vector<uint8_t>> bytes;
    try {
      bytes = store_.try_get(manifest_key(keys[i]));
    } catch (const Error& e) {
      if (e.code() != ErrorCode::corrupt_input) throw;  // the store itself failing is an error
      if (why != nullptr) *why = "chunk " + std::to_string(i) + ": " + e.what();
      break;
    }
    if (!bytes) break;
    try {
      StoredChunk c = decode_manifest(*bytes, keys[i], options_.max_levels);
      if (c.index != i || c.n_tokens != options_.chunk_tokens) {
        corrupt("manifest of chunk " + std::to_string(i) + " says chunk " +
                std::to_string(c.index) + " of " + std::to_string(c.n_tokens) + " tokens");
      }
      c.first_token = i * options_.chunk_tokens;
      out.push_back(std::move(c));
    } catch (const Error& e) {
      if (why != nullptr) *why = "chunk " + std::to_string(i) + ": " + e.what();
      break;
    }
  }
  return out;
}

void ContextStore::put_chunk(std::span<const int32_t> tokens, size_t index, std::string_view level,
                             std::span<const uint8_t> value) {
  if (tokens.size() / options_.chunk_tokens <= index) {
    throw Error(ErrorCode::invalid_argument,
                "context store: chunk " + std::to_string(index) + " needs " +
                    std::to_string((index + 1) * options_.chunk_tokens) + " tokens, " +
                    std::to_string(tokens.size()) + " given");
  }
  put_chunk(chunk_keys(tokens.subspan(0, (index + 1) * options_.chunk_tokens)).back(), index, level,
            value);
}

void ContextStore::put_chunk(const ChunkKey& key, size_t index, std::string_view level,
                             std::span<const uint8_t> value) {
  check_level_name(level);
  ChunkLevelEntry mine{std::string(level), value.size(), XXH64(value.data(), value.size(), 0)};
  const std::string vkey = value_key(key, level, mine.checksum);
  // Always written (an atomic replace with the same bytes): a value damaged in the store is
  // repaired by the next writer of that chunk.
  store_.put(vkey, value);
  // Merge into the manifest; a concurrent writer's put may replace ours, so re-read and merge
  // again until ours is listed.
  const std::string mkey = manifest_key(key);
  for (int attempt = 0; attempt < kManifestMergeAttempts; ++attempt) {
    StoredChunk c;
    c.index = index;
    c.n_tokens = options_.chunk_tokens;
    c.key = key;
    if (std::optional<std::vector<uint8_t>> old = store_.try_get(mkey)) {
      try {
        c.levels = decode_manifest(*old, key, options_.max_levels).levels;
      } catch (const Error&) {
        c.levels.clear();  // a damaged manifest is replaced
      }
    }
    if (const ChunkLevelEntry* e = c.find(level); e != nullptr && *e == mine) return;
    std::erase_if(c.levels, [&](const ChunkLevelEntry& e) { return e.level == level; });
    c.levels.push_back(mine);
    std::sort(c.levels.begin(), c.levels.end(),
              [](const ChunkLevelEntry& a, const ChunkLevelEntry& b) { return a.level < b.level; });
    if (c.levels.size() > options_.max_levels) {
      throw Error(ErrorCode::invalid_argument, "context store: more than " +
                                                   std::to_string(options_.max_levels) +
                                                   " levels for one chunk");
    }
    store_.put(mkey, encode_manifest(key, c));
    if (attempt > 0) {
      // Writers that keep colliding back off by a random 0..2^attempt ms (at most ~0.5 s).
      thread_local std::minstd_rand jitter(std::random_device{}());
      const int cap = 1 << std::min(attempt, 9);
      std::this_thread::sleep_for(std::chrono::microseconds(jitter() % (1000u * cap)));
    }
  }
  throw Error(ErrorCode::io_error, "context store: the manifest of chunk " + std::to_string(index) +
                                       " kept changing under concurrent writers");
}

std::optional<std::vector<uint8_t>> ContextStore::get_chunk(const StoredChunk& chunk,
                                                            std::string_view level,
                                                            std::span<const int32_t> tokens) const {
  const ChunkLevelEntry* e = chunk.find(level);
  if (e == nullptr) return std::nullopt;
  std::optional<std::vector<uint8_t>> v = store_.try_get(value_key(chunk.key, level, e->checksum));
  if (!v) return std::nullopt;
  const std::string where = "chunk " + std::to_string(chunk.index) + " level " + e->level;
  if (v->size() != e->bytes || XXH64(v->data(), v->size(), 0) != e->checksum) {
    corrupt(where + ": the value does not match its manifest (size or checksum)");
  }
  const CgkvReader reader = CgkvReader::from_bytes(*v);
  const std::optional<std::vector<uint8_t>> ids =
      reader.read_blob(static_cast<uint32_t>(BlobKind::token_ids));
  const bool same =
      ids.has_value() && std::ranges::equal(decode_token_ids(*ids, tokens.size() + 1), tokens);
  if (!same) corrupt(where + ": the value holds other token ids than the chunk's");
  return v;
}

std::optional<StoredChunk> ContextStore::find_chunk(std::span<const int32_t> tokens,
                                                    size_t index) const {
  const size_t n = options_.chunk_tokens;
  if (tokens.size() / n <= index) {
    throw Error(ErrorCode::invalid_argument, "context store: chunk " + std::to_string(index) +
                                                 " needs " + std::to_string((index + 1) * n) +
                                                 " tokens, " + std::to_string(tokens.size()) +
                                                 " given");
  }
  std::vector<StoredChunk> found = lookup(tokens.first((index + 1) * n));
  if (found.size() <= index) return std::nullopt;
  return std::move(found[index]);
}

}  // namespace cachegen
