// cachegen: prefix-keyed KV chunks in a Store, for context reuse (docs/FORMAT.md, "Context
// store").
//
// A context's tokens are cut into chunks of chunk_tokens consecutive tokens. Chunk i's key is a
// chained hash, the way vLLM and LMCache key prefix blocks:
//   key_0 = H(zero key, model fingerprint, tokens of chunk 0)
//   key_i = H(key_{i-1}, model fingerprint, tokens of chunk i)          (H = XXH3-128)
// so equal prefixes share chunks across requests, a chunk is only found after exactly the same
// tokens, and a chunk of another model is never found. Each chunk may be stored at several
// quality levels, each an independently decodable value (a .cgkv of the chunk's tokens, written
// by an engine adapter such as the llama one), under a key naming the level and the value's
// checksum; a small per-chunk manifest lists the levels with their sizes and checksums. Lookups
// read manifests only; values are read and verified (size, checksum, and the token ids recorded
// in the value) when loaded.
//
// Keys (all under options.key_prefix, default "cg/ctx/v1/"):
//   <prefix><model fingerprint hash, 16 hex>/<chunk key, 32 hex>/manifest
//   <prefix><model fingerprint hash, 16 hex>/<chunk key, 32 hex>/<level>/<value xxh64, 16 hex>
// Writes are idempotent: the same chunk at the same level with the same bytes lands on the same
// key; concurrent writers of the same prefix never damage each other's values (values are
// content-addressed) and merge their manifest entries (a manifest is re-read after writing and
// merged again when a concurrent writer's put replaced it). Stores have no compare-and-swap, so
// a writer racing another at the same chunk may still drop the other's level entry; the value
// stays, the next put of that level restores the entry, and a manifest never lists a level before
// its value is written.
//
// Thread safety: a ContextStore holds no mutable state; it may be used from several threads when
// its Store may (see store.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cachegen/store.h"

namespace cachegen {

// A chunk's 128-bit chained key.
struct ChunkKey {
  std::array<uint8_t, 16> bytes{};
  std::string hex() const;  // 32 lowercase hex digits
  bool operator==(const ChunkKey&) const = default;
};

// One stored level of a chunk, as its manifest records it.
struct ChunkLevelEntry {
  std::string level;      // 1..32 bytes of [a-z0-9_-], e.g. "lossless", "high"
  uint64_t bytes = 0;     // the value's size
  uint64_t checksum = 0;  // XXH64 (seed 0) of the value
  bool operator==(const ChunkLevelEntry&) const = default;
};

// A chunk of a context found in the store.
struct StoredChunk {
  size_t index = 0;        // chunk number within the context
  size_t first_token = 0;  // index * chunk_tokens
  size_t n_tokens = 0;     // chunk_tokens
  ChunkKey key;
  std::vector<ChunkLevelEntry> levels;  // as the manifest lists them (sorted by name)
  const ChunkLevelEntry* find(std::string_view level) const;
};

struct ContextStoreOptions {
  // Tokens per chunk: 256 (LMCache's default; measured in docs/QUALITY_LEVELS.md, "Context
  // reuse"). Only whole chunks are stored; a context's tail shorter than this is not.
  size_t chunk_tokens = 256;
  std::string key_prefix = "cg/ctx/v1/";
  size_t max_levels = 16;  // per manifest
};

class ContextStore {
 public:
  // `model_fingerprint`: any bytes identifying the model whose KV is stored (the llama adapter
  // passes its ModelIdentity: architecture, shape, GGUF header hash). `store` must outlive this.
  ContextStore(Store& store, std::string model_fingerprint, ContextStoreOptions options = {});

  size_t chunk_tokens() const { return options_.chunk_tokens; }
  Store& store() const { return store_; }

  // Keys of the whole chunks of `tokens` (tokens.size() / chunk_tokens of them).
  std::vector<ChunkKey> chunk_keys(std::span<const int32_t> tokens) const;

  // The longest stored prefix of `tokens` in whole chunks: chunk 0, 1, ... while each has a
  // manifest with at least one level. Reads manifests only. A malformed manifest ends the prefix
  // there (the chunk counts as missing; the reason goes to *why when given).
  std::vector<StoredChunk> lookup(std::span<const int32_t> tokens,
                                  std::string* why = nullptr) const;

  // Stores chunk `index` of `tokens` (which must hold at least (index + 1) * chunk_tokens
  // tokens) at `level`, and records it in the chunk's manifest. Idempotent.
  void put_chunk(std::span<const int32_t> tokens, size_t index, std::string_view level,
                 std::span<const uint8_t> value);
  // The same with the chunk's key given (chunk_keys(tokens)[index]): a writer storing many
  // chunks hashes the prefix once.
  void put_chunk(const ChunkKey& key, size_t index, std::string_view level,
                 std::span<const uint8_t> value);

  // The value of `chunk` at `level`, verified: its size and XXH64 match the manifest, and it is a
  // .cgkv whose token_ids blob holds exactly the chunk's tokens (`chunk_tokens`, the same span
  // that was looked up; corrupt_input naming the mismatch otherwise). std::nullopt when the
  // manifest has no such level or the value is gone.
  std::optional<std::vector<uint8_t>> get_chunk(const StoredChunk& chunk, std::string_view level,
                                                std::span<const int32_t> chunk_tokens) const;

  // Chunk `index` of `tokens` when it and every chunk before it are stored (a lookup of the
  // chunks up to it), else std::nullopt; for get_chunk, with tokens.subspan(first_token,
  // n_tokens). invalid_argument when tokens hold fewer than (index + 1) * chunk_tokens tokens.
  std::optional<StoredChunk> find_chunk(std::span<const int32_t> tokens, size_t index) const;
  std::string manifest_key(const ChunkKey& key) const;
  std::string value_key(const ChunkKey& key, std::string_view level, uint64_t checksum) const;

  // Manifest bytes (docs/FORMAT.md, "Context store"); decode throws corrupt_input /
  // truncated_input / unsupported_version naming the field.
  static std::vector<uint8_t> encode_manifest(const ChunkKey& key, const StoredChunk& chunk);
  static StoredChunk decode_manifest(std::span<const uint8_t> bytes, const ChunkKey& expected_key,
                                     size_t max_levels = 16);

 private:
  Store& store_;
  std::string fingerprint_;
  std::string model_dir_;  // key_prefix + fingerprint hash + "/"
  ContextStoreOptions options_;
};

// Throws invalid_argument unless `level` is 1..32 bytes of [a-z0-9_-].
void check_level_name(std::string_view level);

}  // namespace cachegen
