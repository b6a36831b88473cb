// cachegen: the llama.cpp adapter of the context store (library cachegen_llama): chunks of a
// captured KV cache written to a ContextStore at quality levels, and a ChunkSink that decodes
// loaded chunks (layer 0 from the weights, never a forward pass) into one snapshot to restore.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "cachegen/context_loader.h"
#include "cachegen/context_store.h"
#include "cachegen/llama.h"

namespace cachegen::llama {

// The ContextStore model fingerprint of a model (docs/FORMAT.md, "Context store"):
// "llama:<architecture>:<n_layer>:<n_head_kv>:<head_dim>:<GGUF header hash, hex>".
std::string context_fingerprint(const ModelIdentity& identity);

// Cells [first, first + n) of a snapshot's data stream, with their token ids (one per cell).
KvSnapshot slice_snapshot(const KvSnapshot& snapshot, size_t first, size_t n);

// Writes whole chunks from_chunk.. of `snapshot` (a capture of `tokens`, cells at positions
// 0..n-1) to `store` at each level; returns the chunks written. A chunk already stored at a
// level is rewritten only if missing (puts are idempotent).
size_t store_chunks(ContextStore& store, const Model& model, const KvSnapshot& snapshot,
                    std::span<const int32_t> tokens, size_t from_chunk,
                    std::span<const QualityLevel> levels);

// Decodes each loaded chunk (a .cgkv written by store_chunks) with the model: the model identity
// recorded in the chunk must be this model's, its cells must be the chunk's positions, and its
// token ids the chunk's (corrupt_input otherwise); the chunks are appended into one snapshot.
class SnapshotAssembler : public ChunkSink {
 public:
  explicit SnapshotAssembler(const Model& model) : model_(model) {}
  void decode(const StoredChunk& chunk, std::string_view level,
              std::span<const uint8_t> value) override;
  // The chunks decoded so far (no cells before the first decode).
  const KvSnapshot& snapshot() const { return snapshot_; }
  size_t n_cells() const { return have_ ? snapshot_.n_cells() : 0; }

 private:
  const Model& model_;
  KvSnapshot snapshot_;
  bool have_ = false;
};

}  // namespace cachegen::llama
