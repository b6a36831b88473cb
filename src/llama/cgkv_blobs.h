// Internal: the llama-specific blobs of a .cgkv file (docs/FORMAT.md, "llama.cpp state blobs").
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "cachegen/llama.h"

namespace cachegen::llama::detail {

// app_state: kind, seq_id, arch tag, cell_ext, and per stream its cells, V layout and
// per-layer types/row sizes (no K/V data, no tokens). decode_app_state returns a snapshot
// whose layers have empty k/v; throws corrupt_input / truncated_input / unsupported_version
// naming the field ("app_state.<field>").
// Whether cells hold consecutive positions cells[0].pos + i (64-bit arithmetic: positions come
// from files). False for no cells.
bool consecutive_positions(const std::vector<KvCell>& cells);

std::vector<uint8_t> encode_app_state(const KvSnapshot& snapshot);
KvSnapshot decode_app_state(std::span<const uint8_t> bytes, const ParseOptions& limits);

// metadata_json: {"format":"cachegen.llama","version":1,"architecture",...} (UTF-8 JSON).
std::vector<uint8_t> encode_metadata(const ModelIdentity& identity, const KvSnapshot& snapshot);
ModelIdentity decode_metadata(std::span<const uint8_t> bytes);

// K and V (fp32 [n_cells, row width]) of the layers a file marks recomputed (layer 0 only; any
// other is corrupt_input), computed from the snapshot's token ids and cells with the model's
// weights (Layer0Projector: no forward pass; src/llama/cgkv_recompute.cpp).
using RecomputedKv = std::map<size_t, std::pair<std::vector<float>, std::vector<float>>>;
RecomputedKv recompute_layers(const Model& model, const KvSnapshot& snapshot, const CgkvInfo& info);

// Turns a config's recomputed layers (bits 0) into stored ones, each with the bits of the next
// stored layer (8 when none is): for snapshots without token ids and models whose layer 0
// Layer0Projector cannot compute.
void store_recomputed_layers(KVCacheConfig& config);

}  // namespace cachegen::llama::detail
